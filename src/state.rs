//! Shared application state, handed to every handler.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lease::{LeaseClient, LeaseStore};
use sqlx::PgPool;

use crate::config::Settings;
use crate::http::sessions::SessionRedis;
use crate::ledger::PgFenceLedger;

/// The store of the events' waiting rooms ([`crate::waiting_room`]): the Redis lease
/// client, whose hold script checks an admission in the same step as the grant.
pub type RoomStore = Arc<LeaseClient<PgFenceLedger>>;

/// Handles to the stores and the settings, behind one `Arc`: axum clones the state for
/// each layer and extractor that takes it, several times a request, and a clone is then
/// one reference count (a profile of the hold path put 4 % of the server's CPU in cloning
/// and dropping the fields one by one). Reads go through to [`Shared`] (`state.db`).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    /// The state over `shared`.
    pub fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What every handler and background task of one server process shares.
pub struct Shared {
    /// Postgres pool (events and seats, orders, payments, fence ceilings, auctions).
    pub db: PgPool,
    /// The lease store (holds, bid locks, closing leases), chosen at start
    /// (`--lease-store-url`): Redis with the Postgres fence ledger, or etcd.
    pub leases: Arc<dyn LeaseStore>,
    /// Redis, where the browser sessions live ([`crate::http::sessions`]) whichever store
    /// backs the leases.
    pub redis: SessionRedis,
    /// The waiting rooms' store: `None` when the leases are on etcd (no event may then
    /// have a waiting room).
    pub waiting_room: Option<RoomStore>,
    /// The settings the server was started with.
    pub settings: Arc<Settings>,
    /// CSRF token signing.
    pub csrf: crate::http::csrf::Csrf,
    /// Buyer cookie signing ([`crate::http::buyer::Identities`]).
    pub identities: crate::http::buyer::Identities,
    /// Live updates for the pages this process serves.
    pub live: Arc<crate::live::LiveHub>,
    /// Reads each Redis lease key just after its expiry, so that its lapse is heard on
    /// time: fed by the grants the live feed hears and the open maps' reads.
    pub lapses: Arc<crate::live::LapseTouches>,
    /// Each event's seats and start, read once (a hold asks no Postgres).
    pub catalog: Arc<crate::seats::catalog::Catalog>,
    /// Each event's board (seats, holds, overview), built at most once a second and
    /// shared by every view of its pages.
    pub boards: Arc<crate::venue::board::Boards>,
    /// Each event's seat-map snapshot, shared by every open map while it is current.
    pub snapshots: Arc<crate::venue::snapshots::Snapshots>,
    /// What this process knows of each event's waiting room ([`crate::waiting_room`]).
    pub rooms: Arc<crate::waiting_room::rooms::Rooms>,
    /// Auction items known to exist (a bid on an unknown id takes no lock).
    pub known_items: Arc<crate::auction::known_items::KnownItems>,
    /// The item streams' reads: one per bid per process, shared by every watcher.
    pub auction_reads: Arc<crate::auction::SharedReads>,
    /// Set once the server is told to stop (SIGTERM): `/readyz` then says so.
    pub draining: Arc<Draining>,
}

/// Whether the server is draining: told to stop (SIGTERM), still serving while the proxy
/// notices. Set once, never cleared ([`crate::http::health::drain`]).
#[derive(Debug, Default)]
pub struct Draining(AtomicBool);

impl Draining {
    /// Whether the drain has begun.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Begins the drain: `/readyz` says so from now on.
    pub fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The CSRF configuration as a slice of the state, so that the CSRF extractors
/// ([`crate::http::csrf::CsrfForm`], [`crate::http::csrf::FormToken`]) need only this.
impl axum::extract::FromRef<AppState> for crate::http::csrf::Csrf {
    fn from_ref(state: &AppState) -> Self {
        state.csrf.clone()
    }
}
