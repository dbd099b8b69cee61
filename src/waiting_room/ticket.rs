//! The buyer's ticket: their place in an event's line, kept by the browser in a cookie
//! signed with the server secret (the buyer cookie's key, [`Buyer::signed_cookie`]; one
//! signed under a secret accepted during a rotation is signed again under the current
//! one, so a rotation costs nobody their place).
//! Every server reads it without asking a store. A forged ticket fails the signature;
//! one copied to another buyer or event names them and is refused; one from a room Redis
//! lost names an old epoch. None of that can admit anyone: the hold's own script checks
//! the admission, whatever the cookie says.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lease::{Joined, Place};

use crate::http::buyer::Buyer;

/// How long a browser keeps a ticket: a day, longer than any on-sale's line.
const TICKET_MAX_AGE: cookie::time::Duration = cookie::time::Duration::days(1);

/// One buyer's place in one event's room.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Ticket {
    /// The life of the room the place was given in.
    pub epoch: String,
    /// The place.
    pub place: Place,
    /// When the place was given, Unix ms (the giving server's clock; for the metrics).
    pub issued_at_ms: u64,
    /// Seats the buyer still held when a turn of theirs ended (shown on the queue page).
    pub held: usize,
}

/// The name of event `event_id`'s ticket cookie.
fn cookie_name(event_id: i64) -> String {
    format!("seatlock.queue.{event_id}")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Ticket {
    /// A ticket for the place `joined` gave, issued now.
    pub(super) fn new(joined: Joined, held: usize) -> Ticket {
        Ticket {
            epoch: joined.epoch,
            place: joined.place,
            issued_at_ms: now_ms(),
            held,
        }
    }

    /// The cookie's value: `<event>.<buyer>.<epoch>.<L|P><number>.<issued_at_ms>.<held>`.
    /// The signature covers the value, so the value names its buyer and event.
    fn value(&self, buyer_id: &str, event_id: i64) -> String {
        let (kind, number) = match self.place {
            Place::Line(n) => ('L', n),
            Place::PreQueue(k) => ('P', k),
        };
        let (epoch, at, held) = (&self.epoch, self.issued_at_ms, self.held);
        format!("{event_id}.{buyer_id}.{epoch}.{kind}{number}.{at}.{held}")
    }

    /// The ticket `value` carries, if it is `buyer_id`'s for event `event_id`.
    fn parse(value: &str, buyer_id: &str, event_id: i64) -> Option<Ticket> {
        let mut parts = value.split('.');
        if parts.next()? != event_id.to_string() || parts.next()? != buyer_id {
            return None;
        }
        let epoch = parts.next()?.to_owned();
        let place = parts.next()?;
        let number = place.get(1..)?.parse().ok()?;
        let place = match place.as_bytes().first()? {
            b'L' => Place::Line(number),
            b'P' => Place::PreQueue(number),
            _ => return None,
        };
        Some(Ticket {
            epoch,
            place,
            issued_at_ms: parts.next()?.parse().ok()?,
            held: parts.next()?.parse().ok()?,
        })
    }

    /// `buyer`'s ticket for event `event_id`, if their browser sent one that verifies.
    pub(super) fn read(buyer: &Buyer, event_id: i64) -> Option<Ticket> {
        let value = buyer.signed_cookie(&cookie_name(event_id), TICKET_MAX_AGE)?;
        Ticket::parse(&value, buyer.id(), event_id)
    }

    /// Gives the ticket to `buyer`'s browser (a cookie on this response).
    pub(super) fn give(&self, buyer: &Buyer, event_id: i64) {
        let value = self.value(buyer.id(), event_id);
        buyer.set_signed_cookie(cookie_name(event_id), value, TICKET_MAX_AGE);
    }

    /// Takes `buyer`'s ticket for event `event_id` back (they left).
    pub(super) fn take_back(buyer: &Buyer, event_id: i64) {
        buyer.remove_cookie(cookie_name(event_id));
    }

    /// How long the holder has waited since the place was given.
    pub(super) fn waited(&self) -> Duration {
        Duration::from_millis(now_ms().saturating_sub(self.issued_at_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_reads_back_only_for_its_buyer_and_event() {
        for place in [Place::Line(42), Place::PreQueue(7)] {
            let ticket = Ticket {
                epoch: "00ff".into(),
                place,
                issued_at_ms: 1_700_000_000_000,
                held: 2,
            };
            let value = ticket.value("0123456789abcdef", 9);
            assert_eq!(Ticket::parse(&value, "0123456789abcdef", 9), Some(ticket));
            assert_eq!(Ticket::parse(&value, "fedcba9876543210", 9), None);
            assert_eq!(Ticket::parse(&value, "0123456789abcdef", 10), None);
        }
        assert_eq!(
            Ticket::parse("9.0123456789abcdef.00ff.X1.0.0", "0123456789abcdef", 9),
            None
        );
    }
}
