-- A waiting room per event (issue 25): when an event goes on sale, and how many buyers
-- may shop it at once.
--
-- The room itself (its queue and its admissions, each admission a lease) lives in the
-- lease store beside the event's seat leases, never here: it is shared by every server
-- and checked by the hold's own script (lease/src/room.rs). Postgres only keeps what an
-- operator sets and what every server reads alike, once per process
-- (src/seats/catalog.rs):
--   * on_sale_at: nobody is admitted before it; buyers who come earlier join a pre-queue
--     whose order is drawn at random (NULL: on sale since the event was created). The
--     moment is compared with the lease store's clock, not an app server's.
--   * waiting_room_shoppers: at most this many buyers shop the event at once; 0: no
--     waiting room; NULL: the server's --waiting-room-shoppers decides (default 0).
ALTER TABLE events
    ADD COLUMN on_sale_at timestamptz,
    ADD COLUMN waiting_room_shoppers integer CHECK (waiting_room_shoppers >= 0);
