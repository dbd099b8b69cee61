//! The SQL of the venue's pages: each event's seats as drawn, its price zones, its
//! venue's plan and section shapes, and who bought what. Reads only: the writes are the
//! core's ([`crate::seats::queries`]).

use sqlx::PgPool;

/// One seat of the map, in drawing order.
#[derive(Debug, sqlx::FromRow)]
pub struct MapSeat {
    /// `seats.id`.
    pub seat_id: i64,
    /// `sections.id`.
    pub section_id: i64,
    /// The section's short code.
    pub section_code: String,
    /// The section's name.
    pub section_name: String,
    /// The row's label ("C").
    pub row_label: String,
    /// The seat's number in its row.
    pub number: i32,
    /// An aisle runs just before this seat.
    pub aisle_before: bool,
    /// The seat's price zone code.
    pub zone_code: String,
    /// `seats.access`: `wheelchair`, `companion` or none (migration 0013).
    pub access: Option<String>,
    /// The price, in cents.
    pub price_cents: i64,
    /// Whether the seat is sold.
    pub sold: bool,
}

/// Every seat of the event, ordered by section, row and number: one query, the same for
/// every viewer (so it is shared: [`super::board::Boards`]).
pub async fn map_seats(db: &PgPool, event_id: i64) -> sqlx::Result<Vec<MapSeat>> {
    sqlx::query_as(
        "SELECT s.id AS seat_id, s.section_id, sec.code AS section_code, sec.name AS section_name,
                s.row_label, s.number, s.aisle_before, z.code AS zone_code, s.access,
                es.price_cents, es.sold
           FROM event_seats es
           JOIN seats s ON s.id = es.seat_id
           JOIN sections sec ON sec.id = s.section_id
           JOIN price_zones z ON z.id = s.zone_id
          WHERE es.event_id = $1
          ORDER BY sec.position, s.row_position, s.number",
    )
    .bind(event_id)
    .fetch_all(db)
    .await
}

/// The seats of the event sold to `buyer_id`: the viewer's own part of a map.
pub async fn seats_sold_to(db: &PgPool, event_id: i64, buyer_id: &str) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar("SELECT seat_id FROM orders WHERE event_id = $1 AND buyer_id = $2")
        .bind(event_id)
        .bind(buyer_id)
        .fetch_all(db)
        .await
}

/// A price zone of the event's venue, for the legend.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Zone {
    /// Its short code, unique within its venue.
    pub code: String,
    /// Its name, for a person.
    pub name: String,
    /// The price, in cents.
    pub price_cents: i64,
    /// The colour the map draws it in (CSS).
    pub colour: String,
}

/// The zones of the event's venue, cheapest last.
pub async fn zones(db: &PgPool, event_id: i64) -> sqlx::Result<Vec<Zone>> {
    sqlx::query_as(
        "SELECT z.code, z.name, z.price_cents, z.colour
           FROM price_zones z JOIN events e ON e.venue_id = z.venue_id
          WHERE e.id = $1 ORDER BY z.price_cents DESC",
    )
    .bind(event_id)
    .fetch_all(db)
    .await
}

/// The ids of the event's sold seats (for live snapshots).
pub async fn sold_seats(db: &PgPool, event_id: i64) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar("SELECT seat_id FROM event_seats WHERE event_id = $1 AND sold")
        .bind(event_id)
        .fetch_all(db)
        .await
}

/// A venue's plan as seeded (migration 0013): SVG view box and path data, all `None`
/// for a venue seeded before the plan was kept.
#[derive(Debug, Default, sqlx::FromRow)]
pub struct VenuePlan {
    /// `venues.map_view_box`: `"0 0 <width> <height>"`, metres.
    pub map_view_box: Option<String>,
    /// `venues.outline_path`: the outline, SVG path data.
    pub outline_path: Option<String>,
    /// `venues.stage_path`: the stage, SVG path data.
    pub stage_path: Option<String>,
    /// `venues.stage_label`: what the stage is called.
    pub stage_label: Option<String>,
    /// Where that is written, x (metres).
    pub stage_label_x: Option<f32>,
    /// Where that is written, y (metres).
    pub stage_label_y: Option<f32>,
}

/// The plan of the event's venue; `None` if there is no such event.
pub async fn venue_plan(db: &PgPool, event_id: i64) -> sqlx::Result<Option<VenuePlan>> {
    sqlx::query_as(
        "SELECT v.map_view_box, v.outline_path, v.stage_path, v.stage_label, v.stage_label_x,
                v.stage_label_y
           FROM venues v JOIN events e ON e.venue_id = v.id WHERE e.id = $1",
    )
    .bind(event_id)
    .fetch_optional(db)
    .await
}

/// Where one section is drawn (migration 0013).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SectionShape {
    /// `sections.code`.
    pub code: String,
    /// `sections.shape_path`: SVG path data; `None` if seeded before the plan was kept.
    pub shape_path: Option<String>,
    /// Where its name goes, x (metres).
    pub label_x: Option<f32>,
    /// Where its name goes, y (metres).
    pub label_y: Option<f32>,
}

/// The shapes of the sections of the event's venue, in drawing order.
pub async fn section_shapes(db: &PgPool, event_id: i64) -> sqlx::Result<Vec<SectionShape>> {
    sqlx::query_as(
        "SELECT sec.code, sec.shape_path, sec.label_x, sec.label_y
           FROM sections sec JOIN events e ON e.venue_id = sec.venue_id
          WHERE e.id = $1 ORDER BY sec.position",
    )
    .bind(event_id)
    .fetch_all(db)
    .await
}
