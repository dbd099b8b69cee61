-- The seed that orders each event's pre-queue (issue 41).
--
-- Buyers who join a waiting room before the on-sale are told only that they are the
-- k-th to join. At the on-sale every server draws the same order of places from this
-- seed (lease::room::prequeue_order), so the pre-queue goes in a random order that no
-- buyer can change by arriving early or reloading, and that anyone with the seed can
-- reproduce. It is drawn once, with the event, and never changes.
--
-- A random 52-bit number (random() has 52 bits of precision), so it is exact in a
-- JSON number too.
ALTER TABLE events
    ADD COLUMN queue_seed bigint NOT NULL DEFAULT floor(random() * 4503599627370496)::bigint;
