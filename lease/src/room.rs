//! A waiting room in front of a group: the article's lock generalised to N permits, a
//! semaphore whose permits are leases (seatlock: at most N buyers shop an event at once).
//!
//! In the article's terms:
//!
//! * **the lock** is a place among the N admitted; a buyer gets one by reaching the head
//!   of a FIFO queue while a place is free (`scripts/enter.lua`, one atomic step, so
//!   however many servers admit at the same instant, never more than N are admitted);
//! * **the lease** is the admission's TTL on the store's clock, renewed by each visit up
//!   to a cap: a buyer who walks away frees the place when it lapses, without anyone
//!   having to notice; a new admission is only a short arrival window until the buyer
//!   shows they are here, so a closed tab or a crawler frees the place in a minute;
//! * **the owner token** is the admission's own random token ([`OwnerToken`]), kept
//!   server side (seatlock: in the buyer's session); only its holder can shop with it or
//!   end it ([`LeaseClient::leave`]);
//! * **the fence** is the grant itself: [`LeaseClient::acquire_admitted`] checks the
//!   admission inside the hold's own script, so a hold is never granted on an admission
//!   that lapsed or ended, whichever server asks and however late. A hold already granted
//!   keeps its own TTL and fencing token: the admission gates taking seats, not keeping
//!   or buying them.
//!
//! The queue, the admissions and their clock live in Redis beside the group's leases
//! (one slot: `lease:{group}:~queue`, `~queue-seen`, `~admitted`, `~room`), shared by
//! every server and never in a process. Members who join before the on-sale get a random
//! place ahead of everyone who joins after it: the pre-queue is in random order, each
//! order equally likely, fixed at the on-sale time (Ticketmaster's and Cloudflare's answer
//! to "whoever refreshes at 09:59:59 wins"). Redis restarted empty loses the room: each
//! buyer's next visit or poll joins again, at the back, in the order they ask.

use std::time::Duration;

pub use crate::keys::admitted_key;
use crate::{FenceLedger, Lease, LeaseClient, LeaseError, LeaseKey, OwnerToken, scripts};

/// A room's terms, the same for every server and every call for one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoomTerms {
    /// At most this many members admitted at once (at least 1).
    pub shoppers: u64,
    /// An admission's lease; each [`LeaseClient::enter`] of an admitted member renews it
    /// to this from now…
    pub admission_ttl: Duration,
    /// …but never past the admission's start plus this cap, so a busy buyer cannot keep
    /// a place for ever.
    pub admission_cap: Duration,
    /// Nobody is admitted before this time, Unix ms on the Redis clock (0: on sale).
    pub on_sale_at_ms: u64,
    /// A queued member that has not called [`LeaseClient::enter`] for this long has left
    /// (a closed tab) and loses its place. Counted on the room's own clock, which does not
    /// advance through a stall of the store or of every server.
    pub grace: Duration,
    /// A new admission lasts this long (at most the TTL) until the member calls
    /// [`LeaseClient::enter`] as one who is here, which makes it the full admission: a
    /// member admitted while away (a closed tab, a crawler) frees the place soon.
    pub arrival_window: Duration,
}

/// Where a member stands after [`LeaseClient::enter`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Admitted until `expires_at_ms` (Unix ms, Redis clock); `queue_length` still wait.
    Admitted {
        /// When the admission lapses unless renewed.
        expires_at_ms: u64,
        /// Members in the queue.
        queue_length: u64,
    },
    /// In the queue: `position` 1 is the next one in.
    Queued {
        /// 1-based place in the queue.
        position: u64,
        /// Members in the queue.
        queue_length: u64,
        /// One mean admission for the first N in the queue, one more for each N after.
        wait_estimate: Duration,
    },
    /// Before the on-sale: in the pre-queue, whose order is drawn at random.
    PreQueue {
        /// Time left until the on-sale.
        opens_in: Duration,
        /// Members in the pre-queue.
        queue_length: u64,
    },
}

/// What one [`LeaseClient::enter`] found, and whom it admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entered {
    /// The member's own standing.
    pub entry: Entry,
    /// How long each member this call admitted had waited (from its join, or from the
    /// on-sale for the pre-queue): every admission is reported by exactly one call.
    pub admitted_waits: Vec<Duration>,
}

impl<L: FenceLedger + 'static> LeaseClient<L> {
    /// One step of `member` into the waiting room of `group` (`scripts/enter.lua`, one
    /// round trip): a member not admitted joins the queue once (a later call only marks it
    /// as still waiting); members are admitted from the head while fewer than
    /// `terms.shoppers` are, each for the arrival window; and if `here` (the member is
    /// present, not just polling: seatlock, a map view by a session it already had) its
    /// admission becomes, or is renewed as, the full one. Errors:
    /// [`LeaseError::Unavailable`].
    pub async fn enter(
        &self,
        group: &str,
        member: &OwnerToken,
        terms: &RoomTerms,
        here: bool,
    ) -> Result<Entered, LeaseError> {
        Ok(scripts::enter(self.store(), group, member, terms, here).await?)
    }

    /// `member` leaves the room of `group` (`scripts/leave.lua`, one round trip): out of
    /// the queue, and its admission ends at once, freeing its place. Returns whether an
    /// admission ended. Errors: [`LeaseError::Unavailable`].
    pub async fn leave(&self, group: &str, member: &OwnerToken) -> Result<bool, LeaseError> {
        Ok(scripts::leave(self.store(), group, member).await?)
    }

    /// [`crate::LeaseStore::acquire_all`] behind the waiting room of the keys' group:
    /// granted only while `admission` is live there, checked in the grant's own script.
    /// Errors: those of `acquire_all`, and [`LeaseError::NotAdmitted`].
    pub async fn acquire_admitted(
        &self,
        keys: &[LeaseKey],
        holder: &str,
        ttl: Duration,
        limit: Option<u64>,
        admission: &OwnerToken,
    ) -> Result<Vec<Lease>, LeaseError> {
        self.grant(keys, holder, ttl, limit, Some(admission)).await
    }
}
