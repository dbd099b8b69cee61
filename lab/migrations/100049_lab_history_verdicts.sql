-- Issue 48's second migration: the history checker's verdict on each side of a timed run
-- (lab/src/lab/history.rs). The side's grants, refusals, writes and releases are judged
-- when the side ends by the checker that judges `make nemesis` (the seatlock-history
-- crate), and the challenges pass or fail on it. NULL: not judged (a step session, a run
-- still going, or one that could not start).
ALTER TABLE lab_seats
    ADD COLUMN history_valid boolean,
    -- The kinds of promise it found broken, in the order found, comma-separated
    -- (`double_sale`, `token_order`, `repeated_token`, …); empty when valid.
    ADD COLUMN history_anomalies text NOT NULL DEFAULT '',
    -- Leases the checker saw granted while another holder's may still have run (a broken
    -- lock, or a store that lost a lease): counted, not judged; the seat is what is judged.
    ADD COLUMN history_double_grants integer NOT NULL DEFAULT 0;
