-- The race lab (`load-test race`): sales written by the deliberately unsafe purchase
-- strategies (race-lab-naive, race-lab-unfenced-lease, race-lab-conditional). They exist
-- only to show what goes wrong without a lock or without fencing, so this table has NO
-- unique constraint: a seat sold twice shows up here as two rows, which is the point.
-- The product path (fenced) writes `orders` instead.
CREATE TABLE race_lab_sales (
    id          bigserial   PRIMARY KEY,
    event_id    bigint      NOT NULL,
    seat_id     bigint      NOT NULL,
    buyer_id    text        NOT NULL,
    -- The lease's fencing token when the strategy had one (the resource did not check it).
    fence_token bigint,
    strategy    text        NOT NULL,
    -- clock_timestamp(), not now(): the moment of this write, not of its transaction.
    accepted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    FOREIGN KEY (event_id, seat_id) REFERENCES event_seats (event_id, seat_id)
);
CREATE INDEX race_lab_sales_by_seat ON race_lab_sales (event_id, seat_id, id);
