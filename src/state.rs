//! Shared application state, handed to every handler.

use std::sync::Arc;

use axum::extract::FromRef;
use axum_csrf::CsrfConfig;
use lease::{LeaseClient, LeaseKey};
use sqlx::PgPool;

use crate::config::Settings;
use crate::ledger::PgFenceLedger;

/// The lease client as the application uses it: Redis plus the Postgres fence ledger.
pub type Leases = LeaseClient<PgFenceLedger>;

/// Handles to the stores and the settings. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// Postgres pool (orders, seat state, sessions, fence ceilings).
    pub db: PgPool,
    /// Redis leases (holds, bid locks).
    pub leases: Arc<Leases>,
    /// The settings the server was started with.
    pub settings: Arc<Settings>,
    /// CSRF token signing.
    pub csrf: CsrfConfig,
    /// Live updates for the pages this process serves.
    pub live: Arc<crate::live::LiveHub>,
    /// Auction items known to exist (a bid on an unknown id takes no lock).
    pub known_items: Arc<crate::auction::bid::KnownItems>,
}

impl AppState {
    /// The lease group of one event's seats: `<namespace>:event:<id>`. All seats of an
    /// event share it (one Redis Cluster slot), so the seat map lists every hold of the
    /// event in one round trip.
    pub fn event_group(&self, event_id: i64) -> String {
        format!("{}:event:{event_id}", self.settings.lease_namespace)
    }

    /// The lease key of one seat of one event.
    pub fn seat_key(&self, event_id: i64, seat_id: i64) -> LeaseKey {
        LeaseKey::new(self.event_group(event_id), seat_id.to_string())
            .expect("namespace and ids make a valid key")
    }

    /// The lease group of one auction item: `<namespace>:auction:<id>`. The item's bid
    /// lock and its closing job's lease share it, hence one fencing counter per item, so
    /// the item row's `fence_token` orders both kinds of writer.
    pub fn auction_group(&self, item_id: i64) -> String {
        format!("{}:auction:{item_id}", self.settings.lease_namespace)
    }

    /// The bid lock of one auction item: name `bid` in [`AppState::auction_group`].
    pub fn bid_lock_key(&self, item_id: i64) -> LeaseKey {
        LeaseKey::new(self.auction_group(item_id), "bid")
            .expect("namespace and ids make a valid key")
    }

    /// The closing job's lease of one auction item: name `close` in
    /// [`AppState::auction_group`].
    pub fn closing_key(&self, item_id: i64) -> LeaseKey {
        LeaseKey::new(self.auction_group(item_id), "close")
            .expect("namespace and ids make a valid key")
    }
}

impl FromRef<AppState> for CsrfConfig {
    fn from_ref(state: &AppState) -> Self {
        state.csrf.clone()
    }
}
