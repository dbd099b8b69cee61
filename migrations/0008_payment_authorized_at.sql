-- When a payment was last authorized. A purchase authorizes, then sells and captures within
-- its request deadline; an authorization still open long after that (its purchase's server
-- was killed, or its statement reached Postgres after the purchase had given up) belongs
-- to no purchase any more. The server voids authorizations older than the hold TTL plus
-- the request deadline (src/seats/payments.rs); a retry with the same hold authorizes
-- again under the same key, and sets this anew.
ALTER TABLE payments ADD COLUMN authorized_at timestamptz NOT NULL DEFAULT now();

-- The sweep reads only the open authorizations, oldest first.
CREATE INDEX payments_open_by_age ON payments (authorized_at) WHERE status = 'authorized';
