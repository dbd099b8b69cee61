-- Venues and their seats: the static layout of a hall, loaded by `seatlock seed` from
-- data/venues/*.json. Nothing here changes while tickets are sold.

CREATE TABLE venues (
    id   bigserial PRIMARY KEY,
    -- Stable name used by the seed files, e.g. 'grand-hall'. Seeding twice is a no-op.
    slug text NOT NULL UNIQUE,
    name text NOT NULL,
    city text NOT NULL
);

-- A price zone groups seats that cost the same (e.g. 'Premium', 'Standard').
CREATE TABLE price_zones (
    id          bigserial PRIMARY KEY,
    venue_id    bigint NOT NULL REFERENCES venues (id) ON DELETE CASCADE,
    code        text   NOT NULL,
    name        text   NOT NULL,
    -- Money is always integer cents.
    price_cents bigint NOT NULL CHECK (price_cents > 0),
    -- CSS colour used on the seat map legend.
    colour      text   NOT NULL,
    UNIQUE (venue_id, code)
);

-- A named block of seats: 'Orchestra', 'Balcony', 'Section 112'.
CREATE TABLE sections (
    id       bigserial PRIMARY KEY,
    venue_id bigint NOT NULL REFERENCES venues (id) ON DELETE CASCADE,
    code     text   NOT NULL,
    name     text   NOT NULL,
    -- Drawing order on the seat map, top (stage side) first.
    position int    NOT NULL,
    UNIQUE (venue_id, code)
);

CREATE TABLE seats (
    id           bigserial PRIMARY KEY,
    section_id   bigint NOT NULL REFERENCES sections (id) ON DELETE CASCADE,
    zone_id      bigint NOT NULL REFERENCES price_zones (id),
    -- Row as printed on the ticket ('A', 'BB', '12') and its drawing order.
    row_label    text   NOT NULL,
    row_position int    NOT NULL,
    number       int    NOT NULL CHECK (number > 0),
    -- True when an aisle runs just before this seat: the map draws a gap.
    aisle_before boolean NOT NULL DEFAULT false,
    UNIQUE (section_id, row_label, number)
);
CREATE INDEX seats_section_order ON seats (section_id, row_position, number);
