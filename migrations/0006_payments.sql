-- Simulated payments, at most one per hold. A confirm authorizes the seat's price under an
-- idempotency key derived from the hold: '<event>:<seat>:<fencing token>'. A confirm
-- retried after a hang-up, a crash or a double click has the same hold, hence the same
-- key, and `INSERT … ON CONFLICT DO NOTHING` authorizes nothing more. The fenced purchase
-- statement (src/seats/queries.rs `sell`) captures the authorization in the same
-- statement that sells the seat, so a payment is captured exactly when its order exists;
-- a refused purchase voids it. No payment provider is called.
CREATE TABLE payments (
    idempotency_key text        PRIMARY KEY,
    event_id        bigint      NOT NULL,
    seat_id         bigint      NOT NULL,
    -- Public buyer id (as in orders).
    buyer_id        text        NOT NULL,
    amount_cents    bigint      NOT NULL CHECK (amount_cents > 0),
    status          text        NOT NULL DEFAULT 'authorized'
                                CHECK (status IN ('authorized', 'captured', 'voided')),
    -- Set when captured: the order this payment paid for.
    order_id        bigint      UNIQUE REFERENCES orders (id),
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT payments_captured_with_an_order CHECK ((status = 'captured') = (order_id IS NOT NULL)),
    FOREIGN KEY (event_id, seat_id) REFERENCES event_seats (event_id, seat_id)
);
