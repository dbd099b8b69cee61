//! What a buyer sees of an event: the venue drawn, the seat map, its live stream, and
//! best available's choice of seats. The holds and sales it shows are the core's
//! ([`crate::seats`]); nothing here decides who gets a seat.
//!
//! * [`board`]: what every viewer of an event shares, built once a second.
//! * [`map`]: the seat map for one buyer: the board and the buyer's own holds.
//! * [`overview`]: the venue drawn section by section, each shaded by what is left.
//! * [`layout`]: where the sections are, as `seatlock seed` reads a venue file.
//! * [`best_available`]: the block of adjacent seats a buyer is offered.
//! * [`list`]: the list way to choose: section, row, and the blocks sized to the party.
//! * [`live`]: the seat map's server-sent events.
//! * [`snapshots`]: the snapshot a map's stream opens on, shared, and what open maps show.
//! * [`queries`]: the SQL of the pages.
//! * `per_event`: one value per event, read by one caller while the others wait.
//! * `routes`: the event's pages (the list's too), its stream and best available.

pub mod best_available;
pub mod board;
pub mod layout;
pub mod list;
pub mod live;
pub mod map;
pub mod overview;
pub(crate) mod per_event;
pub mod queries;
mod routes;
pub mod snapshots;

pub use routes::router;
