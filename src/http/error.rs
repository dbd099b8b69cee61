//! One error type for every handler, mapped to a status code and a page with a human
//! message. Bad input is always a 4xx; only an unavailable store is a 5xx (503).
//!
//! A well-formed request that the rules turn down is a [`Refusal`]: 409 with a stable
//! machine-readable code that every response carries twice, in the
//! [`REFUSAL_HEADER`] header and as `data-refusal` on the page's message, so tests, the
//! load test and scripts tell "held" from "stale" without reading the prose.

use askama::Template;
use askama_web::WebTemplate;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use lease::LeaseError;

use chrono::{DateTime, Utc};

use crate::money::{MAX_AMOUNT_CENTS, format_cents};

/// Response header naming the [`Refusal::code`] of a refused request.
pub const REFUSAL_HEADER: &str = "x-seatlock-refusal";

/// Why a well-formed request was turned down (409). `Display` is the message a person
/// reads; [`Refusal::code`] the stable name a program matches.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The seat is held by another buyer (the lease's create-if-absent lost): `held`.
    #[error(
        "Someone is buying this seat. It may come free again if they do not complete their purchase."
    )]
    SomeoneIsBuying,
    /// The seat's hold lapsed while its buyer's confirm was paying for it, and that
    /// confirm has not ended: the seat *cools*, and nobody is granted it for at most
    /// `remaining_ms` more (docs/time-to-pay.md): `cooling`. Answered with `Retry-After`.
    #[error(
        "Someone's payment for this seat is still going through: their hold ran out while they paid. The seat is not free yet; it may come free within {} seconds ({remaining_ms} ms), when their payment has finished or failed.", .remaining_ms.div_ceil(1000)
    )]
    Cooling {
        /// The most the seat cools for from the refusal, in milliseconds (Redis clock).
        remaining_ms: u64,
    },
    /// The buyer's own hold has lapsed (or was lost with Redis): `expired`.
    #[error("Your hold on this seat has expired. Pick the seat again if it is still available.")]
    HoldExpired,
    /// The buyer asked for more time `limit` times on a hold, the most a hold allows
    /// ([`lease::MAX_EXTENSIONS`]): `extension_limit`. Nothing was extended.
    #[error(
        "You have asked for more time {limit} times, the most a hold allows, so nothing was extended. Your seats stay yours until the countdown ends: buy them now."
    )]
    ExtensionLimit {
        /// The most extensions of one hold.
        limit: u32,
    },
    /// A hold already lasts as long as a hold may from its grant, ten hold TTLs
    /// (`Settings::max_hold_life`): `hold_life_limit`. Nothing was extended.
    #[error(
        "Your seats have been held for as long as a hold may last from when you picked them, so nothing was extended. They stay yours until the countdown ends: buy them now."
    )]
    HoldLifeLimit {
        /// The longest a hold may last from its grant, in seconds.
        max_life_secs: u64,
    },
    /// The seat is sold: `sold`.
    #[error("This seat has already been sold.")]
    AlreadySold,
    /// The event has started: its seats are no longer sold: `event_started`.
    #[error("This event has already started, so its seats are no longer on sale.")]
    EventStarted,
    /// Postgres refused the purchase because the seat's row had accepted a newer fencing
    /// token (Kleppmann's fencing): `stale`.
    #[error(
        "Your hold was superseded by a newer one: its fencing token is stale, so the purchase was refused."
    )]
    StaleToken,
    /// The buyer already holds `held` seats of this event and the hold asked for would
    /// take them past the per-buyer limit (`--max-seats-per-buyer`), counted by Redis in
    /// the hold's own script: `seat_limit`.
    #[error(
        "You can hold at most {limit} seats of this event at once, and you already hold {held}. \
         Buy or release some of them first."
    )]
    SeatLimit {
        /// The buyer's live holds in the event when refused.
        held: u64,
        /// The per-buyer limit.
        limit: u64,
    },
    /// Best available found no `quantity` adjacent unsold, unheld seats in one row that
    /// fit the choice (its filters, or the block chosen from the list): `no_block`.
    #[error(
        "There are no {quantity} seats together in one row that fit your choice right now: someone may have just taken them. Try fewer seats, another row, or the seat map."
    )]
    NoBlock {
        /// The number of seats asked for.
        quantity: u64,
    },
    /// Best available found blocks of `quantity` seats together, but each would leave a
    /// single seat alone between taken seats or an aisle, which it never does:
    /// `strands_seat`.
    #[error(
        "Every {quantity} seats together left right now would leave a single seat alone in its row, which best available never does. Try another number of seats, or pick seats on the map."
    )]
    StrandsSeat {
        /// The number of seats asked for.
        quantity: u64,
    },
    /// Best available's every pick was taken by other buyers a moment before its hold
    /// (a crowd asking at once): nothing was held: `blocks_taken`.
    #[error(
        "Other buyers took each block of {quantity} seats together that we tried for you, a moment before you. Nothing is held: please try again."
    )]
    BlocksTaken {
        /// The number of seats asked for.
        quantity: u64,
    },
    /// At checkout, the holds on `seats` had lapsed: nothing was bought, the buyer's
    /// other holds stay: `holds_lapsed`.
    #[error(
        "Your hold on {seats} has expired, so nothing was bought. Your other seats are still held for you: buy them, or pick more seats."
    )]
    HoldsLapsed {
        /// The lapsed seats, named for a person.
        seats: String,
    },
    /// The sale's capture found the hold's payment voided, so the sale was rolled back:
    /// nothing bought, nothing charged, the hold kept: `payment_voided`. Only an
    /// authorization nobody joined for longer than the longest hold (ten hold TTLs, with
    /// every extension) plus the request deadline is voided under a live attempt
    /// (migration 0009).
    #[error(
        "Your payment authorization was voided before the sale, so nothing was bought and nothing was charged. Your hold stands: confirm again to authorize the payment anew."
    )]
    PaymentVoided,
    /// The seat's price changed after the payment was authorized, so the sale's capture,
    /// which takes only the authorized amount, took nothing and the sale was rolled back:
    /// nothing bought, nothing charged, the hold kept: `price_changed`. The next confirm
    /// authorizes the new price.
    #[error(
        "The price of this seat changed after your payment was authorized, so nothing was bought and nothing was charged. Your hold stands: reload to see the new price, and confirm again to pay it."
    )]
    PriceChanged,
    /// The event has a waiting room and the buyer has no live admission to it (never
    /// admitted, lapsed, or ended at checkout), checked by Redis in the hold's own
    /// script: `not_admitted`. Seats the buyer already holds stay theirs.
    #[error(
        "It is not your turn to shop this event: its waiting room admits a few buyers at a time. Join the queue from the event's page; seats you already hold stay yours until their countdown ends."
    )]
    NotAdmitted,
    /// The event's sale has not opened: `not_on_sale`. Judged where the grant is (the
    /// hold script on Redis's clock, the etcd txn; `docs/stores.md`) and by the sale's
    /// write on Postgres's clock. `opens` is the on-sale on the venue's wall clock
    /// ([`Refusal::not_on_sale`]).
    #[error(
        "This event is not on sale yet: its sale opens {opens}. Nothing was bought and nothing new was held; seats you already hold stay yours until their countdown ends."
    )]
    NotOnSale {
        /// "Sat 12 Dec 2026, 19:30:00 GMT".
        opens: String,
    },
    /// The item's bid lock stayed busy through every retry: `busy`.
    #[error(
        "Bidding on this item is busy right now, so your bid was not placed. Please try again."
    )]
    BidLockBusy,
    /// Postgres refused a bid whose lock had lapsed mid-bid after a newer bid lock was
    /// granted and used: `stale_bid_lock`.
    #[error(
        "Your bid took longer than its bid lock's lease and a newer bid was placed meanwhile \
         (the lock's fencing token is stale), so your bid was refused. Please try again."
    )]
    StaleBidLock,
    /// A bid rule turned the bid down (not open, ended, too low): the rule's code.
    #[error(transparent)]
    Bid(#[from] BidRefusal),
    /// The item changed between the write and the read explaining it: `auction_changed`.
    #[error("The auction changed while your bid was placed. Please try again.")]
    AuctionChanged,
    /// The bid lock's fencing token was already used for a bid
    /// (`bids_one_per_fencing_token`): `bid_lock_used`.
    #[error("This bid lock was already used for a bid. Please try again.")]
    BidLockUsed,
}

impl Refusal {
    /// [`Refusal::NotOnSale`] for a sale that opens at `opens_at_ms` (Unix ms), written on
    /// the wall clock of the IANA zone `time_zone` (the venue's).
    pub fn not_on_sale(opens_at_ms: u64, time_zone: &str) -> Refusal {
        let at = chrono::DateTime::from_timestamp_millis(opens_at_ms as i64).unwrap_or_default();
        Refusal::NotOnSale {
            opens: crate::events::venue_time(time_zone, at, crate::events::ON_SALE_FORMAT),
        }
    }

    /// The stable code: `held`, `cooling`, `expired`, `extension_limit`, `hold_life_limit`, `sold`, `event_started`, `stale`,
    /// `seat_limit`, `no_block`, `strands_seat`, `blocks_taken`, `holds_lapsed`, `payment_voided`,
    /// `price_changed`, `not_on_sale`, `not_admitted`, `busy`,
    /// `stale_bid_lock`, `auction_changed`, `bid_lock_used`, or a bid rule's
    /// ([`BidRefusal::code`]).
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::SomeoneIsBuying => "held",
            Refusal::Cooling { .. } => "cooling",
            Refusal::HoldExpired => "expired",
            Refusal::ExtensionLimit { .. } => "extension_limit",
            Refusal::HoldLifeLimit { .. } => "hold_life_limit",
            Refusal::AlreadySold => "sold",
            Refusal::EventStarted => "event_started",
            Refusal::StaleToken => "stale",
            Refusal::SeatLimit { .. } => "seat_limit",
            Refusal::NoBlock { .. } => "no_block",
            Refusal::StrandsSeat { .. } => "strands_seat",
            Refusal::BlocksTaken { .. } => "blocks_taken",
            Refusal::HoldsLapsed { .. } => "holds_lapsed",
            Refusal::PaymentVoided => "payment_voided",
            Refusal::PriceChanged => "price_changed",
            Refusal::NotAdmitted => "not_admitted",
            Refusal::NotOnSale { .. } => "not_on_sale",
            Refusal::BidLockBusy => "busy",
            Refusal::StaleBidLock => "stale_bid_lock",
            Refusal::Bid(rule) => rule.code(),
            Refusal::AuctionChanged => "auction_changed",
            Refusal::BidLockUsed => "bid_lock_used",
        }
    }
}

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed (bad id, bad amount, bad form): 400.
    #[error("{0}")]
    BadRequest(String),
    /// The caller may not do this (not its hold, bad CSRF token): 403.
    #[error("{0}")]
    Forbidden(String),
    /// No such event, seat or order: 404.
    #[error("{0}")]
    NotFound(String),
    /// The request lost a race or the rules turn it down: 409 with a [`Refusal`] code.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The request body is over [`crate::http::deadline::BODY_LIMIT_BYTES`]: 413.
    #[error("The request is too large.")]
    TooLarge,
    /// The request body did not arrive whole within the header timeout
    /// (`--header-timeout-ms`): 408. The client is slow, not a store.
    #[error("The form arrived too slowly to be read; nothing was changed. Please send it again.")]
    RequestTimeout,
    /// Redis or Postgres is unreachable; names which one: 503.
    #[error("{0} is unavailable, please try again in a moment")]
    Unavailable(&'static str),
    /// Every live stream of this server's budget (`--max-streams`) is open: 503 with
    /// `Retry-After`, at once (never a hang).
    #[error(
        "Too many pages are live on this server right now. This page shows what it loaded and catches up in a moment."
    )]
    StreamsFull,
    /// A Postgres error that is not one of the above.
    #[error("database error: {0}")]
    Database(sqlx::Error),
}

/// Result alias for handlers and domain functions.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a page names as unavailable when the browser sessions' store fails.
pub const SESSION_STORE: &str = "Redis";

/// What a page names as unavailable when Redis refuses a write with `NOREPLICAS`
/// (`min-replicas-to-write`: too few replicas in sync with it).
pub const TOO_FEW_REPLICAS: &str = "Redis, with too few replicas in sync to accept a write,";

/// A session store failure, logged, as a 503 naming [`SESSION_STORE`] (or
/// [`TOO_FEW_REPLICAS`], for Redis's `NOREPLICAS` refusal).
impl From<tower_sessions::session::Error> for Error {
    fn from(err: tower_sessions::session::Error) -> Self {
        tracing::warn!(error = %err, "session store failed");
        if err.to_string().contains("NOREPLICAS") {
            return Error::Unavailable(TOO_FEW_REPLICAS);
        }
        Error::Unavailable(SESSION_STORE)
    }
}

impl From<sqlx::Error> for Error {
    /// Maps constraint violations to friendly conflicts and lost connections to 503.
    fn from(err: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &err
            && let Some(friendly) = db.constraint().and_then(constraint_error)
        {
            return friendly;
        }
        match err {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_) => Error::Unavailable("Postgres"),
            sqlx::Error::Database(ref db)
                if db.code().is_some_and(|c| {
                    c.starts_with("57P") || matches!(c.as_ref(), "57014" | "55P03" | "25P03")
                }) =>
            {
                // admin_shutdown, crash_shutdown, cannot_connect_now; and our own
                // statement_timeout (query_canceled), lock_timeout (lock_not_available)
                // and a purchase cut off idle in its transaction
                // (idle_in_transaction_session_timeout)
                Error::Unavailable("Postgres")
            }
            other => Error::Database(other),
        }
    }
}

impl From<LeaseError> for Error {
    fn from(err: LeaseError) -> Self {
        match err {
            LeaseError::Held { .. } => Refusal::SomeoneIsBuying.into(),
            LeaseError::Cooling { remaining, .. } => Refusal::Cooling {
                remaining_ms: remaining.as_millis() as u64,
            }
            .into(),
            // Only a sold seat is retired (seats::purchase).
            LeaseError::Retired => Refusal::AlreadySold.into(),
            LeaseError::OverLimit { held, limit } => Refusal::SeatLimit { held, limit }.into(),
            LeaseError::NotAdmitted => Refusal::NotAdmitted.into(),
            // An extension ("Need more time?") found a hold gone, or its budget spent.
            LeaseError::Expired { .. } => Refusal::HoldExpired.into(),
            LeaseError::ExtensionLimit { limit, .. } => Refusal::ExtensionLimit { limit }.into(),
            LeaseError::LifeLimit { max_life, .. } => Refusal::HoldLifeLimit {
                max_life_secs: max_life.as_secs(),
            }
            .into(),
            // Without the venue at hand (a hold names it: `seats::purchase::hold_refused`).
            LeaseError::NotYet { not_before_ms } => {
                Refusal::not_on_sale(not_before_ms, "UTC").into()
            }
            // Only the Redis store checks admissions; on etcd the server starts with no
            // waiting room.
            LeaseError::AdmissionUnchecked { .. } => {
                Error::Unavailable("The waiting room (it needs the Redis lease store)")
            }
            LeaseError::NotOneGroup => {
                Error::BadRequest("Those seats cannot be held together.".into())
            }
            LeaseError::Unavailable(_) => Error::Unavailable("Redis"),
            // Redis answered, and refused: its account may not run the lease functions
            // (ACL), or another program took their names. A setting for the operator,
            // named in the log at error level, not an outage that passes.
            LeaseError::RedisRefused(_) => {
                tracing::error!(error = %err, "Redis refused a lease request");
                Error::Unavailable("The lock service")
            }
            LeaseError::TooFewReplicas(_) => Error::Unavailable(TOO_FEW_REPLICAS),
            LeaseError::Etcd(_) => Error::Unavailable("etcd"),
            // etcd answered, and refused: a request it finds invalid is this server's
            // bug, named in the log, not an etcd that is down.
            LeaseError::EtcdRefused(_) => {
                tracing::error!(error = %err, "etcd refused a request");
                Error::Unavailable("The lock service")
            }
            LeaseError::ZooKeeper(_) => Error::Unavailable("ZooKeeper"),
            // A hold on ZooKeeper is renewed by the server that granted it (its session's
            // password stays there): behind a balancer, another server cannot extend it.
            LeaseError::SessionElsewhere { .. } => Error::Unavailable(
                "Extending a hold through another server than the one that took it",
            ),
            LeaseError::EtcdNoSpace(_) => {
                Error::Unavailable("etcd, out of space (past its backend quota),")
            }
            LeaseError::TooManyKeys { limit, .. } => {
                Error::BadRequest(format!("One hold takes at most {limit} seats."))
            }
            // Application::build refuses to start with a TTL the store cannot express.
            LeaseError::TtlNotExpressible { .. } | LeaseError::TtlNotGranted { .. } => {
                tracing::error!(error = %err, "a lease TTL the store cannot express");
                Error::Unavailable("The lock service")
            }
            LeaseError::Ledger(_) => Error::Unavailable("Postgres"),
            LeaseError::TokensExhausted { ceiling } => {
                tracing::error!(ceiling, "fencing tokens exhausted for a lease group");
                Error::Unavailable("The lock service")
            }
        }
    }
}

/// The friendly error for a violated constraint that users can run into (names from
/// migrations/), or `None` for one that only a bug could violate.
fn constraint_error(constraint: &str) -> Option<Error> {
    Some(match constraint {
        "orders_one_per_seat" => Refusal::AlreadySold.into(),
        "bids_one_per_fencing_token" => Refusal::BidLockUsed.into(),
        "bids_amount_in_range" => {
            Error::BadRequest("A bid must be between $0.01 and $1000000.00.".into())
        }
        _ => return None,
    })
}

impl Error {
    /// 404: the path names an event that does not exist.
    pub fn no_such_event() -> Error {
        Error::NotFound("There is no such event.".into())
    }

    /// 404: the event exists, and the seat is not one of its venue's.
    pub fn no_such_seat() -> Error {
        Error::NotFound("This event has no such seat.".into())
    }

    /// 404: the path names no page (an unknown route, or a section the venue lacks).
    pub fn no_such_page() -> Error {
        Error::NotFound("There is no such page.".into())
    }

    /// 404: the path names an auction item that does not exist.
    pub fn no_such_auction() -> Error {
        Error::NotFound("There is no such auction.".into())
    }

    /// 400: the request's body broke off before its end, or is not a body at all.
    pub fn form_unreadable() -> Error {
        Error::BadRequest("The form could not be read.".into())
    }

    /// The refusal's code, if this is a [`Refusal`].
    pub fn refusal_code(&self) -> Option<&'static str> {
        match self {
            Error::Refused(refusal) => Some(refusal.code()),
            _ => None,
        }
    }

    /// The HTTP status for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Error::BadRequest(_) => StatusCode::BAD_REQUEST,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Refused(_) => StatusCode::CONFLICT,
            Error::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Error::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Error::Unavailable(_) | Error::StreamsFull => StatusCode::SERVICE_UNAVAILABLE,
            Error::Database(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// The `Retry-After` of [`Error::StreamsFull`], in seconds.
const STREAMS_RETRY_AFTER_S: &str = "5";

/// The error page.
#[derive(Template, WebTemplate)]
#[template(path = "error.html")]
pub struct ErrorPage {
    /// Short heading, from the status ("Conflict").
    pub title: String,
    /// The human message.
    pub message: String,
    /// The [`Refusal::code`], for `data-refusal`; empty for other errors.
    pub refusal: &'static str,
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match &self {
            Error::Database(err) => {
                tracing::error!(error = %err, "unexpected database error");
                "Something went wrong on our side; nothing was charged. Please try again.".into()
            }
            other => {
                tracing::debug!(error = %other, status = status.as_u16(), "request refused");
                other.to_string()
            }
        };
        let title = status.canonical_reason().unwrap_or("Error").to_owned();
        let refusal = self.refusal_code();
        let page = ErrorPage {
            title,
            message,
            refusal: refusal.unwrap_or_default(),
        };
        match (refusal, &self) {
            // A cooling seat may come free within its milliseconds: say when to ask again.
            (Some(code), Error::Refused(Refusal::Cooling { remaining_ms })) => {
                let retry = remaining_ms.div_ceil(1000).to_string();
                let headers = [
                    (REFUSAL_HEADER, code.to_owned()),
                    (header::RETRY_AFTER.as_str(), retry),
                ];
                (status, headers, page).into_response()
            }
            (Some(code), _) => (status, [(REFUSAL_HEADER, code)], page).into_response(),
            // A page's script opens its stream again after this many seconds (or its own
            // backoff), and catches up then with a fresh snapshot.
            (None, Error::StreamsFull) => {
                (status, [(header::RETRY_AFTER, STREAMS_RETRY_AFTER_S)], page).into_response()
            }
            (None, _) => (status, page).into_response(),
        }
    }
}

/// Why a bid is refused by the rules. The `Display` text is shown next to the bid form.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BidRefusal {
    /// Before `starts_at`.
    #[error("This auction opens at {}; bids are not accepted yet.", .starts_at.format("%Y-%m-%d %H:%M:%S UTC"))]
    NotOpenYet {
        /// When bidding opens.
        starts_at: DateTime<Utc>,
    },
    /// At or after `ends_at`, or closed.
    #[error("This auction has ended; no more bids are accepted.")]
    Ended,
    /// The first bid is below the starting price.
    #[error("Your bid of {} is below the starting price: the first bid must be at least {}.", format_cents(*.amount_cents), format_cents(*.minimum_cents))]
    BelowStartingPrice {
        /// The bid, in cents.
        amount_cents: i64,
        /// The starting price, in cents.
        minimum_cents: i64,
    },
    /// The high bid is already [`MAX_AMOUNT_CENTS`]: no bid can beat it.
    #[error(
        "The high bid is {}, the most this site accepts: it cannot be outbid.",
        format_cents(MAX_AMOUNT_CENTS)
    )]
    AtLimit,
    /// A bidder who does not lead stated a maximum below the price plus the increment.
    #[error("Your maximum of {} is no longer high enough: the price is {}, so a maximum must be at least {} (the price plus the increment of {} for its band).", format_cents(*.amount_cents), format_cents(*.high_bid_cents), format_cents(*.minimum_cents), format_cents(*.increment_cents))]
    TooLow {
        /// The maximum, in cents.
        amount_cents: i64,
        /// The current price, in cents.
        high_bid_cents: i64,
        /// The increment of the price's band, in cents.
        increment_cents: i64,
        /// Price + increment, in cents.
        minimum_cents: i64,
    },
    /// The leader lowered their maximum below the price.
    #[error("You lead at {}: your maximum cannot be lowered below the price (you asked for {}).", format_cents(*.price_cents), format_cents(*.amount_cents))]
    BelowPrice {
        /// The maximum asked for, in cents.
        amount_cents: i64,
        /// The current price, in cents.
        price_cents: i64,
    },
}

impl BidRefusal {
    /// The stable code pages carry ([`Refusal::code`]): `not_open_yet`,
    /// `ended`, `below_starting_price`, `at_limit`, `too_low`, `below_price`.
    pub fn code(&self) -> &'static str {
        match self {
            BidRefusal::NotOpenYet { .. } => "not_open_yet",
            BidRefusal::Ended => "ended",
            BidRefusal::BelowStartingPrice { .. } => "below_starting_price",
            BidRefusal::AtLimit => "at_limit",
            BidRefusal::TooLow { .. } => "too_low",
            BidRefusal::BelowPrice { .. } => "below_price",
        }
    }
}
