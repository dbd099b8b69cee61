-- Proxy bidding, a soft close that ends, and bids judged at their arrival (issue 44;
-- docs/auction.md is the page that explains the rules, src/auction/queries.rs the one
-- statement that applies them).
--
-- A bidder no longer types each bid: they state a hidden MAXIMUM, and the site bids for
-- them up to it. The price an item stands at is then a function of the two highest
-- maxima alone:
--
--     price = min(top maximum, runner-up maximum + increment(runner-up maximum))
--
-- (the starting price while there is one bidder), raised to the reserve price when the
-- top maximum reaches the reserve. Of two equal maxima the one placed EARLIER in the
-- item's own order wins: the order is `bid_count`, which only the fenced bid statement
-- advances, under the item's bid lock (or, lock-free, under the row lock of that one
-- UPDATE); never a client's clock. So the state the statement needs is the top two
-- maxima, who holds them and at which place in the order, and it all lives on the item
-- row: the whole resolution is ONE UPDATE of ONE row, whose WHERE clause and SET list
-- Postgres evaluates again on the newest row version if it had to wait for the row lock
-- (READ COMMITTED). A second table of maxima read by the same statement would be read
-- from the statement's snapshot, taken before that wait: two concurrent maxima could then
-- both be resolved against the same stale runner-up, and both believe they lead.
--
-- Why the top two are enough: a bidder who does not lead must bid at least the price
-- plus one increment, and the price is never below the runner-up's maximum; so the new
-- maximum beats the old runner-up, and the new top two are the old leader and the new
-- bid, in some order. The leader may raise their maximum, or lower it, but never below
-- the current price (which is at least the runner-up's maximum); raising never raises
-- the price (nobody outbids themself) except to meet the reserve.

-- The increment is no longer the item's own: it comes from the published table by price
-- band (src/auction/increments.rs, INCREMENT_TABLE; shown on every item page), which the bid
-- statement passes in as two arrays so that the table is written once, in Rust.
ALTER TABLE auction_items DROP CONSTRAINT auction_items_increment_in_range;
ALTER TABLE auction_items DROP COLUMN min_increment_cents;

ALTER TABLE auction_items
    -- The leader's hidden maximum and its place in the item's order (the `bid_count` of
    -- the bid that set it); the leader is `high_bidder_id`, the price `high_bid_cents`.
    ADD COLUMN leader_max_cents    bigint,
    ADD COLUMN leader_seq          bigint,
    -- The runner-up: the second-highest maximum, who holds it, and its place. NULL while
    -- fewer than two bidders have bid.
    ADD COLUMN runner_up_id        text,
    ADD COLUMN runner_up_name      text,
    ADD COLUMN runner_up_max_cents bigint,
    ADD COLUMN runner_up_seq       bigint,
    -- The hard stop: a bid in the soft-close window sets the end to the later of the end
    -- and the bid's arrival plus the window, never past this instant. Existing items get
    -- an hour past their end (the demo's items are reseeded with their own stop).
    ADD COLUMN hard_stop_at        timestamptz;

UPDATE auction_items SET hard_stop_at = ends_at + interval '1 hour';
-- Items bid on before proxy bidding: the high bid stands as the leader's maximum and as
-- the maximum of a runner-up standing for the bids before (placed after the leader, who
-- keeps the lead on the tie), so
-- the next bid resolves against the price as it was (no runner-up would put the price
-- back to the starting price on the leader's next raise).
UPDATE auction_items
   SET leader_max_cents = high_bid_cents, leader_seq = 0,
       runner_up_id = '(before proxy bidding)', runner_up_name = 'an earlier bidder',
       runner_up_max_cents = high_bid_cents, runner_up_seq = bid_count
 WHERE high_bid_cents IS NOT NULL;

ALTER TABLE auction_items
    ALTER COLUMN hard_stop_at SET NOT NULL,
    ADD CONSTRAINT auction_items_hard_stop_after_end CHECK (hard_stop_at >= ends_at),
    -- A leader always has a maximum at least the price.
    ADD CONSTRAINT auction_items_leader_complete CHECK (
        (high_bid_cents IS NULL) = (leader_max_cents IS NULL)
        AND (leader_max_cents IS NULL) = (leader_seq IS NULL)
        AND leader_max_cents >= high_bid_cents),
    -- A runner-up is complete or absent, and never above the leader.
    ADD CONSTRAINT auction_items_runner_up_complete CHECK (
        (runner_up_id IS NULL) = (runner_up_max_cents IS NULL)
        AND (runner_up_id IS NULL) = (runner_up_name IS NULL)
        AND (runner_up_id IS NULL) = (runner_up_seq IS NULL)
        AND runner_up_max_cents <= leader_max_cents);

-- The published increment at a price: the increment of the highest band starting at or
-- below `price_cents` (`band_from` ascending, `band_increment` beside it).
CREATE FUNCTION auction_increment(price_cents bigint, band_from bigint[], band_increment bigint[])
RETURNS bigint LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT band.increment FROM unnest(band_from, band_increment) AS band(from_cents, increment)
     WHERE band.from_cents <= price_cents
     ORDER BY band.from_cents DESC LIMIT 1
$$;

-- The resolution: the item's leader and runner-up (each: id, name, maximum, place in
-- the order; the runner-up may be absent) and one new maximum from `bidder_id`, placed
-- at `bidder_seq`, give the new leader, runner-up and price. The candidates are the
-- three maxima, the bidder's earlier one (as leader or runner-up) replaced by the new
-- one; the top two by (maximum DESC, place ASC) are kept: equal maxima, the earlier
-- wins. The price: the starting price alone, else min(top, runner-up + increment at the
-- runner-up's maximum), except that a leader who stays the leader keeps the price (no
-- self-outbid); raised to the reserve when the top maximum reaches it. The bid
-- statement checks beforehand that the bid is allowed (a non-leader bids at least the
-- price plus one increment, a leader not below the price); this function only ranks.
CREATE FUNCTION auction_resolve(
    leader_id text, leader_name text, leader_max bigint, leader_seq bigint,
    runner_up_id text, runner_up_name text, runner_up_max bigint, runner_up_seq bigint,
    bidder_id text, bidder_name text, bidder_max bigint, bidder_seq bigint,
    price_cents bigint, starting_price_cents bigint, reserve_price_cents bigint,
    band_from bigint[], band_increment bigint[],
    OUT new_leader_id text, OUT new_leader_name text, OUT new_leader_max bigint,
    OUT new_leader_seq bigint, OUT new_runner_up_id text, OUT new_runner_up_name text,
    OUT new_runner_up_max bigint, OUT new_runner_up_seq bigint, OUT new_price bigint)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    ranked record;
    place int := 0;
BEGIN
    FOR ranked IN
        SELECT * FROM (VALUES (leader_id, leader_name, leader_max, leader_seq),
                              (runner_up_id, runner_up_name, runner_up_max, runner_up_seq),
                              (bidder_id, bidder_name, bidder_max, bidder_seq))
                      AS candidate(id, name, max_cents, seq)
         WHERE candidate.id IS NOT NULL
           -- The bidder's earlier maximum is replaced by the new one.
           AND (candidate.id <> bidder_id OR candidate.seq = bidder_seq)
         ORDER BY candidate.max_cents DESC, candidate.seq ASC
         LIMIT 2
    LOOP
        place := place + 1;
        IF place = 1 THEN
            new_leader_id := ranked.id; new_leader_name := ranked.name;
            new_leader_max := ranked.max_cents; new_leader_seq := ranked.seq;
        ELSE
            new_runner_up_id := ranked.id; new_runner_up_name := ranked.name;
            new_runner_up_max := ranked.max_cents; new_runner_up_seq := ranked.seq;
        END IF;
    END LOOP;
    new_price := CASE WHEN new_runner_up_max IS NULL THEN starting_price_cents
                      ELSE least(new_leader_max, new_runner_up_max
                                 + auction_increment(new_runner_up_max, band_from, band_increment))
                 END;
    -- Nobody outbids themself: a leader who stays the leader keeps the price, whatever
    -- the new maximum (after a tie at the leader's maximum, the formula would put a
    -- raised maximum's price at the runner-up's plus the increment, above the price).
    IF leader_id = bidder_id AND new_leader_id = bidder_id THEN
        new_price := price_cents;
    END IF;
    IF reserve_price_cents > 0 AND new_leader_max >= reserve_price_cents THEN
        new_price := greatest(new_price, reserve_price_cents);
    END IF;
END
$$;

-- The bid history: every accepted bid writes one row for its bidder (`automatic` false:
-- the amount the bidder now visibly stands at, the new price if they lead, else their
-- maximum, which was beaten), and, when someone else leads after it, one automatic row
-- for the leader at the new price (the site bidding for them). So two rows may share an
-- amount (equal maxima: the later bidder's maximum and the leader's automatic bid at it)
-- and a fencing token: the old uniques become one MANUAL row per grant.
ALTER TABLE bids
    DROP CONSTRAINT bids_one_per_amount,
    DROP CONSTRAINT bids_one_per_fencing_token,
    ADD COLUMN automatic  boolean NOT NULL DEFAULT false,
    -- The maximum this bid set (hidden: shown to its own bidder only); NULL on automatic
    -- rows and on bids from before proxy bidding.
    ADD COLUMN max_cents  bigint,
    -- When the server received the request (its own clock; docs/auction.md, "Judged at
    -- arrival"); NULL on automatic rows and on bids from before.
    ADD COLUMN arrived_at timestamptz,
    -- The item's price right after this bid (the bidder's own rows): what the nemesis's
    -- history checker judges ("never above the runner-up's maximum plus the increment").
    ADD COLUMN price_cents bigint,
    ADD CONSTRAINT bids_max_not_below_amount CHECK (max_cents >= amount_cents),
    ADD CONSTRAINT bids_automatic_has_no_max CHECK (NOT (automatic AND max_cents IS NOT NULL));
-- One lease grant places at most one bid (its automatic companion aside).
CREATE UNIQUE INDEX bids_one_per_fencing_token ON bids (item_id, fence_token) WHERE NOT automatic;
-- The history, newest first.
CREATE INDEX bids_by_item ON bids (item_id, id DESC);
