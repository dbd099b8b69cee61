//! `seatlock seed`: loads venue files (data/venues/*.json) and creates one demo event per
//! venue, and opens the auctions of data/auctions.json. Idempotent: a venue whose slug
//! exists is left as it is, and so is an auction item whose slug has an open round (once
//! a round has closed, seeding again opens a fresh one).
//!
//! A venue file names price zones and sections; a section lists row groups, each a range
//! of row labels (`"A-M"`, `"AA-DD"` or `"1-20"`) with the same seat blocks (`[8, 16, 8]`:
//! 32 seats numbered 1 to 32 left to right, with an aisle after seats 8 and 24) and zone.
//! Where things are: the venue's `map` (size, outline, stage) and each
//! section's `shape`, in metres ([`crate::venue::layout`], checked before anything is
//! written), and each section's wheelchair places and companion seats (`access`).

use std::path::Path;

use anyhow::{Context, bail};
use chrono::{DateTime, Days, NaiveDate, NaiveTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use serde::Deserialize;
use sqlx::PgPool;

use crate::auction::queries::{self, ItemTerms, NewItem};
use crate::venue::layout::{self, MapSpec, PlacedSection, Shape};

/// A venue file.
#[derive(Debug, Deserialize)]
pub struct VenueFile {
    /// The venue's URL name.
    pub slug: String,
    /// Its name, for a person.
    pub name: String,
    /// The venue's city.
    pub city: String,
    /// The venue's IANA time zone (`Europe/London`): its events' times are on its clock.
    pub time_zone: Tz,
    /// The demo event seeded on the venue.
    pub event: EventSpec,
    /// More events on the venue, seeded after every venue's first event (so the first
    /// events keep their ids: 1, 2, …).
    #[serde(default)]
    pub more_events: Vec<EventSpec>,
    /// The venue's plan: size, outline, stage.
    pub map: MapSpec,
    /// The price zones, dearest first.
    pub zones: Vec<ZoneSpec>,
    /// The sections, in drawing order.
    pub sections: Vec<SectionSpec>,
}

impl VenueFile {
    /// Refuses a plan whose shapes overlap, leave the outline or have no room for their
    /// seats ([`layout::check_venue`]), and an `access` entry naming a seat the section
    /// does not have; the message names the venue and the section.
    pub fn check_layout(&self) -> anyhow::Result<()> {
        let mut placed = Vec::with_capacity(self.sections.len());
        for section in &self.sections {
            let rows = section.seat_rows()?;
            for access in &section.access {
                let width = rows.iter().find(|(label, _)| *label == access.row);
                let fits = |n: &u32| width.is_some_and(|(_, w)| (1..=*w).contains(n));
                if let Some(n) = access
                    .wheelchair
                    .iter()
                    .chain(&access.companion)
                    .find(|n| !fits(n))
                {
                    bail!(
                        "venue {}: section {} has no seat {n} in row {:?} for its access list",
                        self.slug,
                        section.code,
                        access.row
                    );
                }
            }
            placed.push(PlacedSection {
                code: &section.code,
                shape: &section.shape,
                seats: rows.iter().map(|(_, w)| *w as usize).sum(),
            });
        }
        layout::check_venue(&self.slug, &self.map, &placed)
    }
}

/// The demo event created on the venue.
#[derive(Debug, Deserialize)]
pub struct EventSpec {
    /// Its name, for a person.
    pub name: String,
    /// Days from the day of seeding.
    pub starts_in_days: u64,
    /// "HH:MM" on the venue's clock ([`VenueFile::time_zone`]).
    pub time: String,
    /// Minutes from seeding to the on-sale (`events.on_sale_at`); none: on sale now.
    #[serde(default)]
    pub on_sale_in_minutes: Option<i64>,
    /// At most this many buyers shop it at once (`events.waiting_room_shoppers`); none:
    /// `--waiting-room-shoppers` decides.
    #[serde(default)]
    pub waiting_room_shoppers: Option<i32>,
}

/// A price zone.
#[derive(Debug, Deserialize)]
pub struct ZoneSpec {
    /// Its short code, unique within its venue.
    pub code: String,
    /// Its name, for a person.
    pub name: String,
    /// The price, in cents.
    pub price_cents: i64,
    /// The colour the map draws it in (CSS).
    pub colour: String,
}

impl ZoneSpec {
    /// Refuses a code that is not a CSS class name's letters, digits and dashes, and a
    /// colour that is not `#rgb` or `#rrggbb`: both are written into the event's
    /// stylesheet (`GET /events/{id}/zones.css`) as they are.
    pub fn check(&self) -> anyhow::Result<()> {
        let code_ok = !self.code.is_empty()
            && (self.code.bytes()).all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !code_ok {
            bail!(
                "zone code {:?} may have only letters, digits and '-'",
                self.code
            );
        }
        let hex = self.colour.strip_prefix('#').unwrap_or_default();
        if !matches!(hex.len(), 3 | 6) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!(
                "zone {}'s colour {:?} is not #rgb or #rrggbb",
                self.code,
                self.colour
            );
        }
        Ok(())
    }
}

/// A section and its row groups.
#[derive(Debug, Deserialize)]
pub struct SectionSpec {
    /// Its short code, unique within its venue.
    pub code: String,
    /// Its name, for a person.
    pub name: String,
    /// Where it is on the venue's plan.
    pub shape: Shape,
    /// The rows, in drawing order.
    pub rows: Vec<RowGroup>,
    /// Its wheelchair places and companion seats, by row.
    #[serde(default)]
    pub access: Vec<AccessSpec>,
}

impl SectionSpec {
    /// Each row's label and seat count, in drawing order. Errors: a bad label range.
    pub fn seat_rows(&self) -> anyhow::Result<Vec<(String, u32)>> {
        let mut rows = vec![];
        for group in &self.rows {
            let width = group.blocks.iter().sum();
            rows.extend(
                row_labels(&group.rows)?
                    .into_iter()
                    .map(|label| (label, width)),
            );
        }
        Ok(rows)
    }

    /// What seat `number` of row `row` is for (`seats.access`): a wheelchair place, a
    /// companion seat, or neither.
    fn access(&self, row: &str, number: u32) -> Option<&'static str> {
        let listed = self.access.iter().find(|a| a.row == row)?;
        if listed.wheelchair.contains(&number) {
            Some("wheelchair")
        } else {
            listed.companion.contains(&number).then_some("companion")
        }
    }
}

/// A row's accessible places: `{"row": "T", "wheelchair": [1, 36], "companion": [2, 35]}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessSpec {
    /// The row's label.
    pub row: String,
    /// The seat numbers that are wheelchair places.
    #[serde(default)]
    pub wheelchair: Vec<u32>,
    /// The seat numbers kept for a wheelchair user's companion.
    #[serde(default)]
    pub companion: Vec<u32>,
}

/// Rows sharing one layout and zone.
#[derive(Debug, Deserialize)]
pub struct RowGroup {
    /// Inclusive label range: letters (`A-M`, `AA-DD`) or numbers (`1-20`).
    pub rows: String,
    /// Seats per block, left to right; an aisle separates blocks.
    pub blocks: Vec<u32>,
    /// Zone code.
    pub zone: String,
}

/// Expands a label range: `"A-C"` → A, B, C; `"AA-CC"` → AA, BB, CC; `"8-10"` → 8, 9, 10.
pub fn row_labels(range: &str) -> anyhow::Result<Vec<String>> {
    let (from, to) = range
        .split_once('-')
        .context("a row range looks like A-M or 1-20")?;
    if let (Ok(a), Ok(b)) = (from.parse::<u32>(), to.parse::<u32>()) {
        return Ok((a..=b).map(|n| n.to_string()).collect());
    }
    let letter = |s: &str| -> anyhow::Result<(char, usize)> {
        let c = s.chars().next().context("empty row label")?;
        if !c.is_ascii_uppercase() || s.chars().any(|x| x != c) {
            bail!("row label {s:?} must be one repeated capital letter");
        }
        Ok((c, s.len()))
    };
    let ((a, width), (b, width_b)) = (letter(from)?, letter(to)?);
    if width != width_b || a > b {
        bail!("row range {range:?} is not ascending");
    }
    Ok((a..=b).map(|c| c.to_string().repeat(width)).collect())
}

/// `seatlock seed` (and `seatlock-lab seed`): the venues of `args.venues` and the
/// auctions of `args.auctions`, each only once; prints what it added. Errors: Postgres
/// unreachable, or a venue or auction file that does not parse.
pub async fn run(args: &crate::config::SeedArgs) -> anyhow::Result<()> {
    let db = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&args.database.database_url)
        .await?;
    let (venues, seats) = seed(&db, &args.venues).await?;
    println!("seeded {venues} new venue(s) with {seats} seats");
    let auctions = seed_auctions(&db, &args.auctions).await?;
    println!("opened {auctions} new auction(s)");
    Ok(())
}

/// Loads every `*.json` venue in `dir` into `db`; returns (venues added, seats added).
pub async fn seed(db: &PgPool, dir: &Path) -> anyhow::Result<(usize, usize)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    // Every file is read and every event's start worked out before anything is
    // written: a bad one stops the seeding with nothing of any file half-loaded.
    let mut parsed = vec![];
    for path in files {
        let text = std::fs::read_to_string(&path)?;
        let venue: VenueFile =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        venue
            .check_layout()
            .with_context(|| format!("checking {}", path.display()))?;
        for event in std::iter::once(&venue.event).chain(&venue.more_events) {
            starts_at(venue.time_zone, event)
                .with_context(|| format!("{}: event {:?}", path.display(), event.name))?;
        }
        parsed.push(venue);
    }
    let (mut venues, mut seats) = (0, 0);
    let mut added = vec![];
    for venue in parsed {
        if let Some((venue_id, n)) = load_venue(db, &venue).await? {
            venues += 1;
            seats += n;
            added.push((venue_id, venue));
        }
    }
    for (venue_id, venue) in &added {
        for event in &venue.more_events {
            let mut tx = db.begin().await?;
            create_event(&mut tx, *venue_id, venue.time_zone, event).await?;
            tx.commit().await?;
        }
    }
    Ok((venues, seats))
}

/// Inserts one venue, its seats and its demo event in one transaction; returns the
/// venue's id and its seat count, or `None` if the venue was already there.
async fn load_venue(db: &PgPool, venue: &VenueFile) -> anyhow::Result<Option<(i64, usize)>> {
    // Checked before anything is written, so a bad zone leaves no half-seeded venue.
    for zone in &venue.zones {
        zone.check()
            .with_context(|| format!("venue {}", venue.slug))?;
    }
    let mut tx = db.begin().await?;
    let (outline, stage) = (venue.map.outline.drawn(), venue.map.stage.shape.drawn());
    let venue_id: Option<i64> = sqlx::query_scalar(
        "INSERT INTO venues (slug, name, city, time_zone, map_view_box, outline_path, stage_path,
                             stage_label, stage_label_x, stage_label_y)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (slug) DO NOTHING RETURNING id",
    )
    .bind(&venue.slug)
    .bind(&venue.name)
    .bind(&venue.city)
    .bind(venue.time_zone.name())
    .bind(layout::view_box(&venue.map))
    .bind(outline.path)
    .bind(stage.path)
    .bind(&venue.map.stage.label)
    .bind(stage.label[0] as f32)
    .bind(stage.label[1] as f32)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(venue_id) = venue_id else {
        return Ok(None);
    };
    for zone in &venue.zones {
        sqlx::query("INSERT INTO price_zones (venue_id, code, name, price_cents, colour) VALUES ($1, $2, $3, $4, $5)")
            .bind(venue_id)
            .bind(&zone.code)
            .bind(&zone.name)
            .bind(zone.price_cents)
            .bind(&zone.colour)
            .execute(&mut *tx)
            .await?;
    }
    let mut total = 0;
    for (position, section) in venue.sections.iter().enumerate() {
        let drawn = section.shape.drawn();
        let section_id: i64 = sqlx::query_scalar(
            "INSERT INTO sections (venue_id, code, name, position, shape_path, label_x, label_y)
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        )
        .bind(venue_id)
        .bind(&section.code)
        .bind(&section.name)
        .bind(position as i32)
        .bind(drawn.path)
        .bind(drawn.label[0] as f32)
        .bind(drawn.label[1] as f32)
        .fetch_one(&mut *tx)
        .await?;
        let (mut rows, mut positions, mut numbers, mut aisles, mut zones, mut access) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        let mut row_position = 0;
        for group in &section.rows {
            for label in row_labels(&group.rows)? {
                row_position += 1;
                let mut number = 0;
                for (block, size) in group.blocks.iter().enumerate() {
                    for i in 0..*size {
                        number += 1;
                        rows.push(label.clone());
                        positions.push(row_position);
                        numbers.push(number);
                        aisles.push(block > 0 && i == 0);
                        zones.push(group.zone.clone());
                        access.push(section.access(&label, number as u32));
                    }
                }
            }
        }
        total += rows.len();
        let inserted = sqlx::query(
            "INSERT INTO seats (section_id, zone_id, row_label, row_position, number, aisle_before, access)
             SELECT $1, z.id, r.label, r.pos, r.num, r.aisle, r.access
               FROM unnest($2::text[], $3::int[], $4::int[], $5::bool[], $6::text[], $8::text[])
                    AS r(label, pos, num, aisle, zone, access)
               JOIN price_zones z ON z.venue_id = $7 AND z.code = r.zone",
        )
        .bind(section_id)
        .bind(&rows)
        .bind(&positions)
        .bind(&numbers)
        .bind(&aisles)
        .bind(&zones)
        .bind(venue_id)
        .bind(&access)
        .execute(&mut *tx)
        .await?;
        if inserted.rows_affected() as usize != rows.len() {
            bail!(
                "section {} of {} names an unknown zone",
                section.code,
                venue.slug
            );
        }
    }
    create_event(&mut tx, venue_id, venue.time_zone, &venue.event).await?;
    tx.commit().await?;
    Ok(Some((venue_id, total)))
}

/// The instant `time` ("HH:MM") is on `date` by the wall clocks of `zone`. Errors: a
/// time that is not HH:MM, and one the clocks skip that day (01:30 when they go forward
/// from 01:00 to 02:00). Of a time they pass twice (when they go back), the first.
pub fn venue_instant(zone: Tz, date: NaiveDate, time: &str) -> anyhow::Result<DateTime<Utc>> {
    let time = NaiveTime::parse_from_str(time, "%H:%M").context("event time is HH:MM")?;
    let local = date.and_time(time);
    let instant = zone
        .from_local_datetime(&local)
        .earliest()
        .with_context(|| {
            format!("{local} does not exist in {zone}: the clocks go forward over it")
        })?;
    Ok(instant.with_timezone(&Utc))
}

/// When `event` starts: its `time` on the day `starts_in_days` from today, both on the
/// calendar and clocks of `zone` ("in 14 days at 19:30" in Manchester). Errors: as
/// [`venue_instant`].
fn starts_at(zone: Tz, event: &EventSpec) -> anyhow::Result<DateTime<Utc>> {
    let date = Utc::now()
        .with_timezone(&zone)
        .date_naive()
        .checked_add_days(Days::new(event.starts_in_days))
        .context("event date")?;
    venue_instant(zone, date, &event.time)
}

/// Inserts one event of venue `venue_id` (in `zone`) and its seats' `event_seats` rows.
async fn create_event(
    tx: &mut sqlx::PgConnection,
    venue_id: i64,
    zone: Tz,
    event: &EventSpec,
) -> anyhow::Result<i64> {
    let starts_at = starts_at(zone, event)?;
    let on_sale_at = event
        .on_sale_in_minutes
        .map(|m| Utc::now() + chrono::Duration::minutes(m));
    let event_id: i64 = sqlx::query_scalar(
        "INSERT INTO events (venue_id, name, starts_at, on_sale_at, waiting_room_shoppers)
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
    )
    .bind(venue_id)
    .bind(&event.name)
    .bind(starts_at)
    .bind(on_sale_at)
    .bind(event.waiting_room_shoppers)
    .fetch_one(&mut *tx)
    .await?;
    create_event_seats(tx, event_id).await?;
    Ok(event_id)
}

/// An auction item in data/auctions.json (a JSON array of these): a slug, the item's
/// terms ([`ItemTerms`]: title, description, money in cents) and how long it stays open.
#[derive(Debug, Deserialize)]
pub struct AuctionSpec {
    /// Stable name: seeding adds the item only if no open item has this slug.
    pub slug: String,
    #[serde(flatten)]
    /// The item's bidding terms (start price, increment).
    pub terms: ItemTerms,
    /// Hours from the moment of seeding until the auction ends; it opens at once.
    pub open_hours: u32,
    /// How far past its end soft close may move the end at most: the hard stop, in
    /// seconds after the end.
    pub hard_stop_after_end_secs: u32,
}

/// Opens the auction items of the JSON file at `path`, each for `open_hours` from now,
/// in one transaction; returns how many were added (items with an open round are left
/// as they are).
pub async fn seed_auctions(db: &PgPool, path: &Path) -> anyhow::Result<usize> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let specs: Vec<AuctionSpec> =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let now = Utc::now();
    let mut tx = db.begin().await?;
    let mut added = 0;
    for spec in specs {
        let item = NewItem {
            slug: spec.slug,
            terms: spec.terms,
            starts_at: now,
            ends_at: now + TimeDelta::hours(spec.open_hours.into()),
            hard_stop_at: now
                + TimeDelta::hours(spec.open_hours.into())
                + TimeDelta::seconds(spec.hard_stop_after_end_secs.into()),
        };
        let id = queries::insert_item(&mut *tx, &item)
            .await
            .with_context(|| format!("auction {:?} in {}", item.slug, path.display()))?;
        added += usize::from(id.is_some());
    }
    tx.commit().await?;
    Ok(added)
}

/// Gives an event one unsold `event_seats` row per seat of its venue, priced by zone.
pub async fn create_event_seats(tx: &mut sqlx::PgConnection, event_id: i64) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "INSERT INTO event_seats (event_id, seat_id, price_cents)
         SELECT e.id, s.id, z.price_cents
           FROM events e
           JOIN sections sec ON sec.venue_id = e.venue_id
           JOIN seats s ON s.section_id = sec.id
           JOIN price_zones z ON z.id = s.zone_id
          WHERE e.id = $1",
    )
    .bind(event_id)
    .execute(tx)
    .await?;
    Ok(done.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::{
        AuctionSpec, DateTime, NaiveDate, Utc, VenueFile, ZoneSpec, row_labels, venue_instant,
    };

    #[test]
    fn the_seeded_auctions_stay_open_a_day_with_a_hard_stop() {
        let text = include_str!("../data/auctions.json");
        let specs: Vec<AuctionSpec> = serde_json::from_str(text).unwrap();
        assert!((3..=10).contains(&specs.len()), "a handful");
        for spec in &specs {
            assert!(spec.open_hours >= 24, "{}", spec.slug);
            assert!(
                spec.hard_stop_after_end_secs >= u32::try_from(spec.terms.soft_close_secs).unwrap(),
                "{}",
                spec.slug
            );
            assert!(spec.terms.starting_price_cents > 0, "{}", spec.slug);
        }
    }

    #[test]
    fn a_zone_whose_code_or_colour_could_break_the_stylesheet_is_refused() {
        let zone = |code: &str, colour: &str| ZoneSpec {
            code: code.into(),
            name: "Stalls".into(),
            price_cents: 1_000,
            colour: colour.into(),
        };
        assert!(zone("stalls-1", "#1d70b8").check().is_ok());
        assert!(zone("A", "#fff").check().is_ok());
        for (code, colour) in [
            ("a b", "#fff"),
            ("", "#fff"),
            ("a{}", "#fff"),
            ("a", "red"),
            ("a", "#12345"),
            ("a", "#fff; } body { display: none"),
        ] {
            let err = zone(code, colour).check().unwrap_err().to_string();
            assert!(
                err.contains(&format!("{code:?}")) || err.contains(colour),
                "{err}"
            );
        }
    }

    #[test]
    fn an_event_time_is_the_instant_it_is_on_the_venues_clock() {
        let london = chrono_tz::Europe::London;
        let on = |y, m, d| NaiveDate::from_ymd_opt(y, m, d).unwrap();
        let utc = |text: &str| text.parse::<DateTime<Utc>>().unwrap();
        // Summer time (BST, UTC+1) and winter time (GMT).
        assert_eq!(
            venue_instant(london, on(2027, 7, 10), "19:30").unwrap(),
            utc("2027-07-10T18:30:00Z")
        );
        assert_eq!(
            venue_instant(london, on(2026, 12, 12), "19:30").unwrap(),
            utc("2026-12-12T19:30:00Z")
        );
        // 01:30 happens twice when the clocks go back: the first (still BST).
        assert_eq!(
            venue_instant(london, on(2027, 10, 31), "01:30").unwrap(),
            utc("2027-10-31T00:30:00Z")
        );
        // ... and not at all when they go forward.
        let skipped = venue_instant(london, on(2027, 3, 28), "01:30").unwrap_err();
        assert!(
            skipped.to_string().contains("clocks go forward"),
            "{skipped}"
        );
        assert!(venue_instant(london, on(2027, 3, 28), "7pm").is_err());
    }

    #[test]
    fn a_venue_file_names_a_zone_the_tz_database_knows() {
        let venue = |zone: &str| {
            serde_json::from_value::<VenueFile>(serde_json::json!({
                "slug": "s", "name": "n", "city": "c", "time_zone": zone,
                "event": {"name": "e", "starts_in_days": 1, "time": "19:30"},
                "zones": [], "sections": [],
                "map": {"width": 10, "height": 10,
                        "outline": {"polygon": [[0, 0], [10, 0], [10, 10]]},
                        "stage": {"label": "Stage", "shape": {"polygon": [[1, 1], [2, 1], [2, 2]]}}}
            }))
        };
        assert_eq!(
            venue("Europe/London").unwrap().time_zone,
            chrono_tz::Europe::London
        );
        let err = venue("Europe/Manchester").unwrap_err().to_string();
        assert!(err.contains("Europe/Manchester"), "{err}");
    }

    #[test]
    fn the_demo_venues_plans_pass_and_a_section_moved_onto_its_neighbour_is_named() {
        let hall = include_str!("../data/venues/grand-hall.json");
        let arena = include_str!("../data/venues/harbour-arena.json");
        for text in [hall, arena] {
            let venue: VenueFile = serde_json::from_str(text).unwrap();
            venue.check_layout().unwrap();
        }
        let mut venue: VenueFile = serde_json::from_str(arena).unwrap();
        venue.sections[5].shape = venue.sections[4].shape.clone();
        let err = venue.check_layout().unwrap_err().to_string();
        assert_eq!(err, "venue harbour-arena: section 102 overlaps section 101");
        let mut venue: VenueFile = serde_json::from_str(hall).unwrap();
        venue.sections[0].access[0].wheelchair.push(37);
        let err = venue.check_layout().unwrap_err().to_string();
        assert!(
            err.contains("section STALLS has no seat 37 in row \"T\""),
            "{err}"
        );
    }

    #[test]
    fn expands_row_ranges() {
        assert_eq!(row_labels("A-C").unwrap(), ["A", "B", "C"]);
        assert_eq!(row_labels("AA-BB").unwrap(), ["AA", "BB"]);
        assert_eq!(row_labels("9-11").unwrap(), ["9", "10", "11"]);
        assert!(row_labels("C-A").is_err());
        assert!(row_labels("A").is_err());
        assert!(row_labels("A-BB").is_err());
    }
}
