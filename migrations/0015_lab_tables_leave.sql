-- The race lab's tables leave the product's migrations: the lab is its own crate now
-- (lab/), and its migrations (lab/migrations/) create these tables again. 0005 and 0011
-- stay as they are: they were applied, and sqlx checks an applied file's checksum. Their
-- comments name the lab's old folder, src/racelab/; it is lab/src/ now.
-- What a lab run or a race-lab sale left behind is demo data: it goes with the tables.
DROP TABLE IF EXISTS lab_rows;
DROP TABLE IF EXISTS lab_seats;
DROP TABLE IF EXISTS lab_runs;
DROP TABLE IF EXISTS race_lab_sales;
