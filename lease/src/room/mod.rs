//! A waiting room in front of a group: at most N holders shop it at once, the rest wait
//! in line, first come, first served (seatlock: an event's on-sale).
//!
//! The line costs the store nothing while a holder waits. A holder joins once
//! ([`LeaseClient::join`], one script) and gets a place number. The caller keeps it in a
//! signed ticket in the browser. One number per room moves: the *frontier*, the highest
//! place whose turn has come. Every server keeps the frontier in memory, told of each
//! move on the group's channel ([`RoomView::parse`]). A holder's position is then its
//! place minus the frontier, worked out with no store read.
//!
//! In the article's terms:
//!
//! * **the lock** is one of the N places. A turn comes when the frontier passes the
//!   holder's place; the holder takes it by arriving ([`LeaseClient::arrive`]);
//! * **the lease** is the admission's TTL on the store's clock, renewed by each visit up
//!   to a cap. A turn not taken within the arrival window is over, so a holder gone for
//!   good costs one window of an idle place;
//! * **the owner token** is the admission's member, which the caller derives per holder
//!   and never takes from a client (seatlock: SHA-256 of the buyer and the event, from
//!   the buyer id its signed cookie proves). It never reaches the browser;
//! * **the fence**, twice. The hold's own script checks the admission (a [`Grant`](crate::Grant)
//!   with its `admission` set), so no hold is granted on an admission that lapsed or ended. And one server at a time moves the frontier under a lease of its
//!   own; its fencing token goes with every step ([`LeaseClient::tick`]), so a ticker
//!   that paused past its lease changes nothing when it wakes.
//!
//! Holders who join before the on-sale form a pre-queue: each is told only that it is
//! the k-th to join. At the on-sale they take places 1 to M in an order drawn once from
//! a seed ([`prequeue_order`]), ahead of everyone who comes later.
//!
//! Every key lives in the group's slot, beside its leases: `lease:{group}:~room`,
//! `~admitted`, `~turns`, `~places`, `~since`, `~gone`. Each script's header names what
//! each holds. Redis restarted empty loses the room: its *epoch* changes, so tickets of
//! the old room are known to be stale and their holders join again.

use std::time::Duration;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use redis::{ErrorKind, RedisError, Script};
use std::sync::LazyLock;

use crate::client::LeaseClient;
use crate::error::LeaseError;
use crate::fence::FenceLedger;
pub use crate::keys::admitted_key;
use crate::keys::events_channel;
use crate::token::{FencingToken, OwnerToken};

/// A room's terms, the same for every server and every call for one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoomTerms {
    /// At most this many holders shop at once (at least 1).
    pub shoppers: u64,
    /// An admission's lease. An arrival, and each visit after it, renews it to this from
    /// now…
    pub admission_ttl: Duration,
    /// …but never past the admission's start plus this cap, so a busy holder cannot keep
    /// a place for ever.
    pub admission_cap: Duration,
    /// How long a turn waits for its holder to arrive before it is over.
    pub arrival_window: Duration,
    /// Nobody's turn comes before this time, Unix ms on the Redis clock (0: on sale).
    pub on_sale_at_ms: u64,
}

impl RoomTerms {
    /// How long the room's keys live after a write: longer than anything in them can
    /// matter (the longest admission plus a window), and an hour more.
    fn keep_ms(&self) -> u64 {
        millis(self.admission_cap + self.arrival_window + Duration::from_secs(3_600))
    }
}

/// A holder's place, as [`LeaseClient::join`] gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    /// The k-th holder to join before the on-sale (k from 1). Its place in line is drawn
    /// at the on-sale: [`prequeue_order`].
    PreQueue(u64),
    /// The place in line, 1 = first.
    Line(u64),
}

impl Place {
    /// The place as the room records it for its holder: `p<k>` or `<n>` (`join.lua`).
    pub fn recorded(&self) -> String {
        match self {
            Place::PreQueue(k) => format!("p{k}"),
            Place::Line(n) => n.to_string(),
        }
    }
}

/// What [`LeaseClient::join`] gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Joined {
    /// The life of the room the place belongs to.
    pub epoch: String,
    /// The holder's place.
    pub place: Place,
}

/// What an arrival ([`LeaseClient::arrive`]) found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Admitted until `expires_at_ms` (Unix ms, Redis clock), renewed by each arrival.
    Admitted {
        /// When the admission lapses unless renewed.
        expires_at_ms: u64,
        /// Whether this call took the turn (the holder's first arrival), not a renewal.
        arrived: bool,
    },
    /// The place's turn has not come.
    Waiting,
    /// The turn came and is over (the holder left, lapsed, or missed the window). The
    /// holder is back in line, at the new place `place`.
    Spent {
        /// The new place, at the back of the line.
        place: u64,
    },
    /// The ticket names an earlier life of the room (Redis lost it): join again.
    OtherEpoch,
}

/// The room's state, as the ticker publishes it after each step and [`LeaseClient::room`]
/// reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoomView {
    /// The life of the room.
    pub epoch: String,
    /// The highest place whose turn has come.
    pub frontier: u64,
    /// The highest place given so far (the pre-queue's places included, once on sale).
    pub issued: u64,
    /// How many joined before the on-sale.
    pub prequeue: u64,
    /// Whether the on-sale has come.
    pub on_sale: bool,
    /// Admitted holders plus open turns: places taken.
    pub shopping: u64,
    /// When the state was read, Unix ms on the Redis clock.
    pub at_ms: u64,
}

impl RoomView {
    /// The view a `room …` message on a group's channel carries (published by
    /// `tick.lua`), or `None` for any other message.
    pub fn parse(payload: &str) -> Option<RoomView> {
        let mut parts = payload.strip_prefix("room ")?.split(' ');
        let epoch = parts.next()?.to_owned();
        let mut number = || parts.next()?.parse::<u64>().ok();
        Some(RoomView {
            epoch,
            frontier: number()?,
            issued: number()?,
            prequeue: number()?,
            on_sale: number()? == 1,
            shopping: number()?,
            at_ms: number()?,
        })
    }

    /// The `room …` message of this view, as `tick.lua` publishes it and
    /// [`RoomView::parse`] reads it (for a server that read the view itself and passes
    /// it on).
    pub fn message(&self) -> String {
        format!(
            "room {} {} {} {} {} {} {}",
            self.epoch,
            self.frontier,
            self.issued,
            self.prequeue,
            u8::from(self.on_sale),
            self.shopping,
            self.at_ms
        )
    }

    /// How many wait in line: places given whose turn has not come.
    pub fn waiting(&self) -> u64 {
        if self.on_sale {
            self.issued.saturating_sub(self.frontier)
        } else {
            self.prequeue
        }
    }
}

/// What one [`LeaseClient::tick`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tick {
    /// The step ran; the room is now as the view says (also published).
    Ticked(RoomView),
    /// A newer ticker has stepped the room: this one's token is too old. Nothing was
    /// written. The caller stops ticking.
    Fenced {
        /// The highest ticker token the room accepted.
        highest: FencingToken,
    },
}

/// The places of the pre-queue's members: `order[k - 1]` is the place in line of the
/// k-th to join, for a pre-queue of `size`. A shuffle of 1..=size drawn from `seed`, the
/// same for every server running this build (rand's `StdRng`; another version of rand
/// may draw another order from the same seed). Every order is equally likely, and
/// nothing a holder does after joining changes it.
pub fn prequeue_order(seed: u64, size: u64) -> Vec<u64> {
    let mut order: Vec<u64> = (1..=size).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    order
}

/// `lease:{group}:~<part>`, one of the room's keys.
fn key(group: &str, part: &str) -> String {
    format!("lease:{{{group}}}:~{part}")
}

fn millis(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// A fresh epoch, offered to a room that has none.
fn new_epoch() -> String {
    format!("{:016x}", rand::random::<u64>())
}

static JOIN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../scripts/now_ms.lua"),
        include_str!("open_sale.lua"),
        include_str!("join.lua")
    ))
});

static ARRIVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../scripts/now_ms.lua"),
        include_str!("arrive.lua")
    ))
});

static TICK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../scripts/now_ms.lua"),
        include_str!("open_sale.lua"),
        include_str!("tick.lua")
    ))
});

static LEAVE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("leave.lua")));

fn unexpected(script: &'static str, status: String) -> RedisError {
    RedisError::from((
        ErrorKind::UnexpectedReturnType,
        script,
        format!("unknown status {status}"),
    ))
}

impl<L: FenceLedger + 'static> LeaseClient<L> {
    /// `holder`'s place in the room of `group` (`join.lua`, one round trip): given once,
    /// the same for every later call while the room lives. Errors:
    /// [`LeaseError::Unavailable`].
    pub async fn join(
        &self,
        group: &str,
        holder: &str,
        terms: &RoomTerms,
    ) -> Result<Joined, LeaseError> {
        let mut invocation = JOIN.prepare_invoke();
        invocation
            .key(key(group, "room"))
            .key(key(group, "places"))
            .arg(holder)
            .arg(terms.on_sale_at_ms)
            .arg(new_epoch())
            .arg(terms.keep_ms());
        let (epoch, kind, number): (String, String, u64) =
            self.store().invoke("join", &invocation).await?;
        let place = match kind.as_str() {
            "pre" => Place::PreQueue(number),
            "place" => Place::Line(number),
            _ => return Err(unexpected("join.lua", kind).into()),
        };
        Ok(Joined { epoch, place })
    }

    /// `holder`, at `place` in line (from a ticket of `epoch` that says it `joined` at
    /// that place), arrives in the room of `group`, or renews its admission
    /// (`arrive.lua`, one round trip). `member` is the admission's owner token. A ticket
    /// whose `joined` is not the place the room now records for `holder` (they left and
    /// joined again) is stale: [`Arrival::OtherEpoch`]. Errors: [`LeaseError::Unavailable`].
    pub async fn arrive(
        &self,
        group: &str,
        holder: &str,
        member: &OwnerToken,
        (joined, place, epoch): (Place, u64, &str),
        terms: &RoomTerms,
    ) -> Result<Arrival, LeaseError> {
        let mut invocation = ARRIVE.prepare_invoke();
        invocation
            .key(key(group, "room"))
            .key(admitted_key(group))
            .key(key(group, "turns"))
            .key(key(group, "places"))
            .key(key(group, "since"))
            .arg(member.as_str())
            .arg(holder)
            .arg(place)
            .arg(epoch)
            .arg(millis(terms.admission_ttl))
            .arg(millis(terms.admission_cap))
            .arg(millis(terms.arrival_window))
            .arg(terms.keep_ms())
            .arg(joined.recorded());
        let (status, n): (String, u64) = self.store().invoke("arrive", &invocation).await?;
        Ok(match status.as_str() {
            "arrived" | "admitted" => Arrival::Admitted {
                expires_at_ms: n,
                arrived: status == "arrived",
            },
            "waiting" => Arrival::Waiting,
            "spent" => Arrival::Spent { place: n },
            "other_epoch" => Arrival::OtherEpoch,
            _ => return Err(unexpected("arrive.lua", status).into()),
        })
    }

    /// `holder` leaves the room of `group` (`leave.lua`, one round trip): its admission
    /// (`member`) ends, and so does an open turn of `place` (0: none known) in `epoch`;
    /// a place still in line is skipped by the ticker. Returns whether an admission or a
    /// turn ended. Errors: [`LeaseError::Unavailable`].
    pub async fn leave(
        &self,
        group: &str,
        holder: &str,
        member: &OwnerToken,
        (place, epoch): (u64, &str),
    ) -> Result<bool, LeaseError> {
        let mut invocation = LEAVE.prepare_invoke();
        for part in ["room", "admitted", "turns", "places", "since", "gone"] {
            invocation.key(key(group, part));
        }
        invocation
            .arg(member.as_str())
            .arg(holder)
            .arg(place)
            .arg(epoch);
        let ended: i64 = self.store().invoke("leave", &invocation).await?;
        Ok(ended == 1)
    }

    /// One step of the room of `group` by the ticker holding the lease whose fencing
    /// token is `ticker` (`tick.lua`, one round trip): lapsed admissions and missed
    /// turns end, the frontier moves while fewer than `terms.shoppers` shop, and the
    /// state is published on the group's channel. Errors: [`LeaseError::Unavailable`].
    pub async fn tick(
        &self,
        group: &str,
        ticker: FencingToken,
        terms: &RoomTerms,
    ) -> Result<Tick, LeaseError> {
        let mut invocation = TICK.prepare_invoke();
        for part in ["room", "admitted", "turns", "since", "gone"] {
            invocation.key(key(group, part));
        }
        invocation
            .arg(ticker.0)
            .arg(terms.shoppers.max(1))
            .arg(millis(terms.arrival_window))
            .arg(terms.on_sale_at_ms)
            .arg(events_channel(group))
            .arg(new_epoch())
            .arg(terms.keep_ms());
        let reply: Vec<redis::Value> = self.store().invoke("tick", &invocation).await?;
        let text = |i: usize| match reply.get(i) {
            Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
            Some(redis::Value::Int(n)) => n.to_string(),
            _ => String::new(),
        };
        let number = |i: usize| text(i).parse::<u64>().unwrap_or(0);
        Ok(match text(0).as_str() {
            "fenced" => Tick::Fenced {
                highest: FencingToken(number(1)),
            },
            "ticked" => Tick::Ticked(RoomView {
                epoch: text(1),
                frontier: number(2),
                issued: number(3),
                prequeue: number(4),
                on_sale: number(5) == 1,
                shopping: number(6),
                at_ms: number(7),
            }),
            other => return Err(unexpected("tick.lua", other.to_owned()).into()),
        })
    }

    /// The room of `group` as it is now (one pipelined round trip), or `None` if it has
    /// none (nobody joined, nobody ticked, or Redis lost it). For a server that has not
    /// heard the ticker's last message. Errors: [`LeaseError::Unavailable`].
    pub async fn room(&self, group: &str) -> Result<Option<RoomView>, LeaseError> {
        let mut pipe = redis::pipe();
        pipe.cmd("TIME")
            .cmd("HMGET")
            .arg(key(group, "room"))
            .arg(&["epoch", "frontier", "issued", "prequeue", "open"])
            .cmd("ZCARD")
            .arg(admitted_key(group))
            .cmd("ZCARD")
            .arg(key(group, "turns"));
        type Reply = ((u64, u64), Vec<Option<String>>, u64, u64);
        let ((secs, micros), fields, admitted, turns): Reply = self
            .store()
            .round_trip("room", |mut conn| {
                let pipe = &pipe;
                async move { pipe.query_async(&mut conn).await }
            })
            .await?;
        let Some(Some(epoch)) = fields.first().cloned() else {
            return Ok(None);
        };
        let number = |i: usize| {
            (fields.get(i).cloned().flatten())
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok(Some(RoomView {
            epoch,
            frontier: number(1),
            issued: number(2),
            prequeue: number(3),
            on_sale: number(4) == 1,
            shopping: admitted + turns,
            at_ms: secs * 1000 + micros / 1000,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_script_file_opens_with_its_name_keys_argv_and_reply() {
        for (file, text) in [
            ("join.lua", include_str!("join.lua")),
            ("arrive.lua", include_str!("arrive.lua")),
            ("tick.lua", include_str!("tick.lua")),
            ("leave.lua", include_str!("leave.lua")),
            ("open_sale.lua", include_str!("open_sale.lua")),
        ] {
            let header: String = text
                .lines()
                .take_while(|line| line.starts_with("--"))
                .collect();
            assert!(text.starts_with(&format!("-- {file}: ")), "{file}");
            for part in ["KEYS[1]", "ARGV[1]", "Reply"] {
                assert!(header.contains(part), "{file} header names {part}");
            }
        }
    }

    #[test]
    fn a_room_message_parses_and_others_do_not() {
        let view = RoomView::parse("room 0a1b 40 90 25 1 12 1700000000123").unwrap();
        assert_eq!(
            view,
            RoomView {
                epoch: "0a1b".into(),
                frontier: 40,
                issued: 90,
                prequeue: 25,
                on_sale: true,
                shopping: 12,
                at_ms: 1_700_000_000_123,
            }
        );
        assert_eq!(view.waiting(), 50);
        assert_eq!(RoomView::parse(&view.message()), Some(view.clone()));
        assert!(RoomView::parse("acquired 14 42 1700000000000 b").is_none());
        assert!(RoomView::parse("room 0a1b 40").is_none());
    }

    #[test]
    fn the_prequeue_order_is_a_shuffle_fixed_by_its_seed() {
        let order = prequeue_order(21, 1_000);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (1..=1_000).collect::<Vec<_>>(), "each place once");
        assert_eq!(
            order,
            prequeue_order(21, 1_000),
            "the same seed, the same order"
        );
        assert_ne!(
            order,
            prequeue_order(22, 1_000),
            "another seed, another order"
        );
        assert_ne!(order, sorted, "shuffled");
    }
}
