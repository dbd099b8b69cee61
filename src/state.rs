//! Shared application state, handed to every handler.

use std::sync::Arc;

use lease::LeaseClient;
use sqlx::PgPool;

use crate::config::Settings;
use crate::ledger::PgFenceLedger;

/// The lease client as the application uses it: Redis plus the Postgres fence ledger.
pub type Leases = LeaseClient<PgFenceLedger>;

/// Handles to the stores and the settings. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// Postgres pool (events and seats, orders, payments, fence ceilings, auctions).
    pub db: PgPool,
    /// Redis leases (holds, bid locks); its store also keeps the browser sessions
    /// ([`crate::sessions`]).
    pub leases: Arc<Leases>,
    /// The settings the server was started with.
    pub settings: Arc<Settings>,
    /// CSRF token signing.
    pub csrf: crate::csrf::Csrf,
    /// Live updates for the pages this process serves.
    pub live: Arc<crate::live::LiveHub>,
    /// Each event's seats and start, read once (a hold asks no Postgres).
    pub catalog: Arc<crate::seats::catalog::Catalog>,
    /// Auction items known to exist (a bid on an unknown id takes no lock).
    pub known_items: Arc<crate::auction::bid::KnownItems>,
}
