-- The online auction: items and their bids. The item row is the protected resource of
-- the article for bidding and closing, the way `event_seats` is for buying a seat.
--
-- Writers (see src/auction/):
--   * a bid, under a short per-item lease (the bid lock, Redis group
--     `<namespace>:auction:<id>`, name `bid`), writes the bid and the new high bid in ONE
--     statement that also checks the fencing token and the high bid (queries::place_bid);
--   * the lock-free strategy runs the same statement without a token: the conditional
--     UPDATE alone serialises the bids (the article's "can you avoid the lock");
--   * the closer, under a lease on the closing job (same group, name `close`, renewed by
--     a watchdog), writes the result in ONE statement that checks the status, the end
--     time and the fencing token (queries::close_item).
-- Both leases share the group, hence one fencing counter per item: `fence_token` below
-- orders every lease-holding writer of the row.

CREATE TABLE auction_items (
    id                   bigserial   PRIMARY KEY,
    -- Stable name used by the seed file (data/auctions.json). Seeding adds an item only
    -- if no OPEN item has its slug, so it is idempotent yet starts a fresh round once the
    -- previous one has closed (see auction_items_one_open_per_slug below).
    slug                 text        NOT NULL,
    title                text        NOT NULL,
    description          text        NOT NULL DEFAULT '',
    -- Money is always integer cents. The first bid must be at least the starting price;
    -- every later bid at least the high bid plus the minimum increment, so an EQUAL bid
    -- loses. The reserve price is the least the seller accepts (0 = no reserve): a high
    -- bid below it at the end closes the auction as 'reserve_not_met'.
    starting_price_cents bigint      NOT NULL,
    min_increment_cents  bigint      NOT NULL,
    reserve_price_cents  bigint      NOT NULL DEFAULT 0,
    starts_at            timestamptz NOT NULL,
    -- Bids are accepted while starts_at <= now() < ends_at (the Postgres clock, one
    -- clock for every server). Soft close: a bid placed in the last `soft_close_secs`
    -- seconds moves ends_at later by `soft_close_secs`; 0 turns soft close off.
    ends_at              timestamptz NOT NULL,
    soft_close_secs      int         NOT NULL DEFAULT 0,
    status               text        NOT NULL DEFAULT 'open',
    -- The current high bid: NULL until the first bid, then always set together.
    high_bid_cents       bigint,
    high_bidder_id       text,
    high_bidder_name     text,
    bid_count            int         NOT NULL DEFAULT 0,
    -- Highest fencing token this row has accepted (from the bid lock or the closing
    -- job's lease); 0 = never written under a lease. A write carrying a lower token is
    -- refused: its writer's lease lapsed and a newer holder has written since.
    fence_token          bigint      NOT NULL DEFAULT 0,
    -- The result, written once by the closer: 'sold' (to winner_id at high_bid_cents),
    -- 'reserve_not_met' or 'no_bids'.
    result               text,
    winner_id            text,
    winner_name          text,
    closed_at            timestamptz,

    CONSTRAINT auction_items_starting_price_positive CHECK (starting_price_cents > 0),
    -- A zero increment would let an equal bid win; the cap keeps sums far from overflow.
    CONSTRAINT auction_items_increment_in_range
        CHECK (min_increment_cents BETWEEN 1 AND 100000000),
    CONSTRAINT auction_items_reserve_not_negative CHECK (reserve_price_cents >= 0),
    CONSTRAINT auction_items_ends_after_start CHECK (ends_at > starts_at),
    CONSTRAINT auction_items_soft_close_in_range CHECK (soft_close_secs BETWEEN 0 AND 86400),
    CONSTRAINT auction_items_status_known CHECK (status IN ('open', 'closed')),
    CONSTRAINT auction_items_high_bid_complete CHECK (
        (high_bid_cents IS NULL) = (high_bidder_id IS NULL)
        AND (high_bid_cents IS NULL) = (high_bidder_name IS NULL)
        AND (high_bid_cents IS NULL) = (bid_count = 0)),
    CONSTRAINT auction_items_fence_token_not_negative CHECK (fence_token >= 0),
    -- Closed exactly when a result is written; a winner exactly when sold.
    CONSTRAINT auction_items_closed_has_result CHECK (
        (status = 'closed') = (result IS NOT NULL)
        AND (result IS NULL) = (closed_at IS NULL)),
    CONSTRAINT auction_items_result_known
        CHECK (result IN ('sold', 'reserve_not_met', 'no_bids')),
    CONSTRAINT auction_items_winner_when_sold CHECK (
        (result IS NOT DISTINCT FROM 'sold') = (winner_id IS NOT NULL)
        AND (winner_id IS NULL) = (winner_name IS NULL))
);

-- At most one open round per seeded item (seed: INSERT … ON CONFLICT DO NOTHING).
CREATE UNIQUE INDEX auction_items_one_open_per_slug ON auction_items (slug)
    WHERE status = 'open';
-- The closer's scan (open items past their end) and the list page (open items by end).
CREATE INDEX auction_items_open_by_end ON auction_items (ends_at) WHERE status = 'open';

-- Every accepted bid; refused bids leave no row. Written in the same statement as the
-- item's new high bid, so the two never disagree.
CREATE TABLE bids (
    id           bigserial   PRIMARY KEY,
    item_id      bigint      NOT NULL REFERENCES auction_items (id) ON DELETE CASCADE,
    -- Public buyer id from the browser session (not the session id) and display name.
    bidder_id    text        NOT NULL,
    bidder_name  text        NOT NULL,
    amount_cents bigint      NOT NULL,
    -- The bid lock's fencing token the bid was accepted with; NULL when placed by the
    -- lock-free conditional strategy.
    fence_token  bigint,
    created_at   timestamptz NOT NULL DEFAULT now(),

    -- The same bounds the form enforces (src/money.rs: $0.01 to $1,000,000.00).
    CONSTRAINT bids_amount_in_range CHECK (amount_cents BETWEEN 1 AND 100000000),
    -- Bids only go up and an equal bid loses, so two bids of one amount on one item are
    -- impossible whatever the application does: the last line of defence against the
    -- same-millisecond race, mapped to a friendly 409 by src/error.rs.
    CONSTRAINT bids_one_per_amount UNIQUE (item_id, amount_cents),
    -- One lease grant places at most one bid.
    CONSTRAINT bids_one_per_fencing_token UNIQUE (item_id, fence_token)
);
CREATE INDEX bids_by_bidder ON bids (bidder_id, created_at DESC);
