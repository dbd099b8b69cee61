-- Events, the per-event seat state (the resource the leases protect) and orders.

CREATE TABLE events (
    id        bigserial PRIMARY KEY,
    venue_id  bigint      NOT NULL REFERENCES venues (id),
    name      text        NOT NULL,
    starts_at timestamptz NOT NULL,
    UNIQUE (venue_id, name)
);

-- One row per seat per event. This row is the protected resource of the article: a
-- confirmation writes it only if
--   * the seat is not sold yet, and
--   * the buyer's fencing token is not lower than `fence_token`, the highest token this
--     row has accepted (Kleppmann's fencing check: a holder that paused past its lease
--     carries an older token and is refused).
-- Both checks and the write happen in ONE conditional UPDATE (see src/seats/queries.rs).
CREATE TABLE event_seats (
    event_id    bigint  NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    seat_id     bigint  NOT NULL REFERENCES seats (id),
    -- Copied from the seat's price zone when the event is created.
    price_cents bigint  NOT NULL CHECK (price_cents > 0),
    sold        boolean NOT NULL DEFAULT false,
    -- Highest fencing token accepted by this row; 0 = never written.
    fence_token bigint  NOT NULL DEFAULT 0 CHECK (fence_token >= 0),
    PRIMARY KEY (event_id, seat_id)
);

-- A confirmed purchase. The UNIQUE constraint makes a second order for one seat of one
-- event impossible whatever the application does: the last line of defence, mapped to a
-- friendly 409 by src/error.rs.
CREATE TABLE orders (
    id          bigserial   PRIMARY KEY,
    event_id    bigint      NOT NULL,
    seat_id     bigint      NOT NULL,
    -- Public buyer id from the browser session (not the session id) and display name.
    buyer_id    text        NOT NULL,
    buyer_name  text        NOT NULL,
    price_cents bigint      NOT NULL CHECK (price_cents > 0),
    -- The fencing token the purchase was accepted with.
    fence_token bigint      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT orders_one_per_seat UNIQUE (event_id, seat_id),
    FOREIGN KEY (event_id, seat_id) REFERENCES event_seats (event_id, seat_id)
);
CREATE INDEX orders_by_buyer ON orders (buyer_id, created_at DESC);

-- The durable half of the fencing scheme (the article's step 5). Redis hands out fencing
-- tokens only up to a ceiling reserved here, one block at a time (hi/lo allocation). If
-- Redis restarts empty, the next reservation starts above every token ever issued, so
-- tokens never go backwards. One row per lease group (seatlock: one per event).
CREATE TABLE fence_ceilings (
    lease_group text   PRIMARY KEY,
    ceiling     bigint NOT NULL CHECK (ceiling > 0)
);
