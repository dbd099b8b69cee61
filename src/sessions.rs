//! Where browser sessions live: Postgres, through tower-sessions-sqlx-store's
//! `PostgresStore` (migrations/0003), with two changes.
//!
//! * **Save updates, never inserts.** tower-sessions creates a session with `create` and
//!   writes it back with `save`, which the Postgres store makes an upsert. A request still
//!   in flight when the buyer renames themselves (the session id is rotated: the old row
//!   deleted, a new one created) would then write the old session back under the old id,
//!   and the old cookie, perhaps planted by someone else, would work again. Here `save`
//!   is an `UPDATE` of a row that still exists: a rotated or deleted session stays gone.
//! * **The sweeper keeps sweeping.** Expired sessions are deleted once a minute; an error
//!   (Postgres restarting) is logged and the next sweep runs as planned, where the
//!   library's own loop would stop for good.
//!
//! Every call is timed as a Postgres round trip ([`crate::telemetry::postgres`]).

use std::time::Duration;

use sqlx::PgPool;
use tower_sessions::ExpiredDeletion;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, SessionStore};
use tower_sessions_sqlx_store::PostgresStore;

use crate::telemetry::postgres;

/// How often expired sessions are deleted.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// The session store of the application: see the module docs.
#[derive(Clone, Debug)]
pub struct Sessions {
    store: PostgresStore,
    db: PgPool,
}

impl Sessions {
    /// Sessions in the `tower_sessions.session` table of `db`.
    pub fn new(db: PgPool) -> Self {
        Sessions {
            store: PostgresStore::new(db.clone()),
            db,
        }
    }

    /// Deletes expired sessions every [`SWEEP_INTERVAL`], forever; a failed sweep is
    /// logged and the next one runs on time.
    pub async fn sweep_expired(self) {
        let mut every = tokio::time::interval(SWEEP_INTERVAL);
        loop {
            every.tick().await;
            if let Err(err) = postgres("session_sweep", self.store.delete_expired()).await {
                tracing::warn!(error = %err, "expired sessions not deleted this time");
            }
        }
    }
}

#[async_trait::async_trait]
impl SessionStore for Sessions {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        postgres("session_create", self.store.create(record)).await
    }

    /// Writes `record` over the row of its id if that row still exists; a session
    /// rotated or deleted meanwhile is not brought back.
    async fn save(&self, record: &Record) -> session_store::Result<()> {
        let data = rmp_serde::to_vec(record)
            .map_err(|err| session_store::Error::Encode(err.to_string()))?;
        let update = sqlx::query(
            "UPDATE tower_sessions.session SET data = $2, expiry_date = $3 WHERE id = $1",
        )
        .bind(record.id.to_string())
        .bind(data)
        .bind(record.expiry_date)
        .execute(&self.db);
        postgres("session_save", update)
            .await
            .map(drop)
            .map_err(|err| session_store::Error::Backend(err.to_string()))
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        postgres("session_load", self.store.load(id)).await
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        postgres("session_delete", self.store.delete(id)).await
    }
}
