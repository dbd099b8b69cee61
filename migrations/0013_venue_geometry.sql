-- Where things are in a venue (issue 29): the overview map of GET /events/{id} draws
-- every section where it is, around the stage, inside the venue's outline. The venue
-- files (data/venues/*.json) give the shapes in metres, as polygons or arcs of a bowl;
-- `seatlock seed` checks them (no two sections overlap, each section has room for its
-- seats) and stores each one already drawn, as the `d` of an SVG path in the venue's
-- own coordinates, so a page view does no geometry.
--
--   * venues.map_view_box: the SVG viewBox, "0 0 <width> <height>" (metres).
--   * venues.outline_path, venues.stage_path: the venue's outline and its stage (or
--     floor's end), SVG path data; venues.stage_label: what the stage is called, and
--     stage_label_x, stage_label_y where it is written.
--   * sections.shape_path: the section's outline, SVG path data; sections.label_x and
--     label_y: where its name is written (inside it).
--   * seats.access: 'wheelchair' (a wheelchair place) or 'companion' (the seat beside
--     one, for a companion), else NULL: what the "accessible seats" filter looks for.
--
-- Venues seeded before this migration have no geometry (NULLs): their overview lists
-- the sections instead of drawing them, and they have no accessible places until
-- seeded again into a fresh database.
ALTER TABLE venues
    ADD COLUMN map_view_box text,
    ADD COLUMN outline_path text,
    ADD COLUMN stage_path   text,
    ADD COLUMN stage_label  text,
    ADD COLUMN stage_label_x real,
    ADD COLUMN stage_label_y real;

ALTER TABLE sections
    ADD COLUMN shape_path text,
    ADD COLUMN label_x    real,
    ADD COLUMN label_y    real;

ALTER TABLE seats
    ADD COLUMN access text CHECK (access IN ('wheelchair', 'companion'));
