//! `POST /race-lab/events/{event}/hold-group` (field `seats`: seat ids, comma-separated):
//! holds exactly the named seats with the product's group hold
//! ([`seatlock::seats::cart::hold_group`], one script, all or none), so `load-test race
//! --strategy groups` can race buyers for overlapping groups they choose (best
//! available picks the block itself, so its buyers never overlap). 404 unless the server
//! runs with `--enable-race-lab`.

use axum::extract::{Path, State};
use axum::response::Redirect;
use serde::Deserialize;

use seatlock::http::buyer::Buyer;
use seatlock::http::csrf::CsrfForm;
use seatlock::http::error::{Error, Refusal, Result};
use seatlock::http::ids::parse_id;
use seatlock::seats::{cart, purchase};
use seatlock::state::AppState;

/// The form: `seats=12,13,14,15`.
#[derive(Deserialize)]
pub(super) struct GroupForm {
    seats: String,
}

/// Holds the named group for the buyer and goes to the seat map's cart (303). Errors:
/// 404 race lab off, no such event or a seat not of it; 400 a malformed id, a seat
/// named twice, or more seats than `--max-seats-per-buyer`; 409 the event started, a
/// seat held by someone else or sold, or the buyer's limit (nothing held); 503 a store
/// unavailable.
pub(super) async fn hold_group_route(
    State(state): State<AppState>,
    buyer: Buyer,
    Path(event): Path<String>,
    CsrfForm(form): CsrfForm<GroupForm>,
) -> Result<Redirect> {
    let event_id = parse_id(&event, "event")?;
    let seats = parse_group(&form.seats, state.settings.max_seats_per_buyer)?;
    let event = state
        .catalog
        .event(&state.db, event_id)
        .await?
        .ok_or_else(Error::no_such_event)?;
    if let Some(seat) = seats.iter().find(|&&seat| !event.has_seat(seat)) {
        return Err(Error::NotFound(format!("This event has no seat {seat}.")));
    }
    if event.started() {
        return Err(Refusal::EventStarted.into());
    }
    cart::hold_group(&state, &buyer, event_id, &seats)
        .await?
        .map_err(|err| purchase::hold_refused(err, &event))?;
    Ok(Redirect::to(&format!("/events/{event_id}#cart")))
}

/// `12,13,14` as seat ids: 1 to `limit` distinct positive ids, else a 400 saying why.
fn parse_group(raw: &str, limit: u64) -> Result<Vec<i64>> {
    let seats = raw
        .split(',')
        .map(|id| parse_id(id.trim(), "seat"))
        .collect::<Result<Vec<i64>>>()?;
    let mut distinct = seats.clone();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != seats.len() {
        return Err(Error::BadRequest("A seat is named twice.".into()));
    }
    if seats.len() as u64 > limit {
        return Err(Error::BadRequest(format!(
            "Name between 1 and {limit} seats."
        )));
    }
    Ok(seats)
}

#[cfg(test)]
mod tests {
    use super::parse_group;

    #[test]
    fn a_group_is_one_to_limit_distinct_ids() {
        assert_eq!(parse_group("3, 4,5", 8).unwrap(), vec![3, 4, 5]);
        for bad in ["", "3,3", "3,x", "1,2,3", "0"] {
            assert!(parse_group(bad, 2).is_err(), "{bad:?}");
        }
    }
}
