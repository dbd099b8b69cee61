//! The Postgres pool, and the client-side bounds that keep a silent connection from
//! hanging a request.
//!
//! Postgres bounds what it runs (`statement_timeout`, `lock_timeout`, set here from the
//! store timeout), but it cannot end a wait it never hears of: on a half-open connection
//! (a dropped flow, a suspended host, a proxy that stopped passing bytes) a statement is
//! sent and its answer never comes, until TCP gives up minutes later. So the client bounds
//! its own waits:
//!
//! * a connection idle for [`IDLE_CHECK`] or more is pinged before use, for at most a
//!   quarter of the store timeout; a silent one is closed and the next one tried, so the
//!   request does not notice;
//! * a connection handed back with a statement still unanswered (its request was dropped
//!   at its deadline, see [`crate::http::deadline`]) is drained for at most one store timeout
//!   before it may be reused; a silent one is closed. A clean connection is handed back
//!   at no cost (sqlx then pings it, as it does every returned connection).
//!
//! The request deadline itself ([`crate::http::deadline`]) bounds the statement caught on the
//! connection as it went silent.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgPool};

use crate::config::Settings;

/// A pooled Postgres connection idle for at least this long is pinged before use; one
/// used more recently was checked when it was returned (sqlx pings on release).
pub(crate) const IDLE_CHECK: Duration = Duration::from_secs(1);

/// The pool of `settings.database_url`, `settings.db_pool_size` connections, opened
/// lazily (the server starts while Postgres is down). Every session gets
/// `statement_timeout` = the store timeout and `lock_timeout` = [`Settings::lock_wait`].
/// Errors: an unparsable `DATABASE_URL`.
pub(crate) fn pool(settings: &Settings) -> anyhow::Result<PgPool> {
    let timeout_ms = settings.store_timeout_ms.to_string();
    let lock_wait_ms = settings.lock_wait().as_millis().to_string();
    let options = PgConnectOptions::from_str(&settings.database_url)
        .context("parsing DATABASE_URL")?
        .options([
            ("statement_timeout", timeout_ms.as_str()),
            ("lock_timeout", lock_wait_ms.as_str()),
            // The tables are small and cached: with the default 4 the planner reads
            // every venue's seats to draw a 1,000-seat map (30 ms, not 3.6 ms).
            ("random_page_cost", "1.1"),
        ]);
    let (ping_deadline, drain_deadline) = (settings.store_timeout() / 4, settings.store_timeout());
    Ok(PgPoolOptions::new()
        .max_connections(settings.db_pool_size)
        .acquire_timeout(settings.store_timeout())
        // sqlx pings every connection as it goes back to the pool; pinging it again when
        // it is handed out would cost every statement a second round trip. Only a
        // connection idle for a while (the server may have gone meanwhile) is checked.
        .test_before_acquire(false)
        .before_acquire(move |conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= IDLE_CHECK {
                    within(ping_deadline, conn.ping()).await?;
                }
                Ok(true)
            })
        })
        // `flush` waits for the answers still owed (none on a clean connection: no
        // round trip); an error closes the connection instead of pooling it.
        .after_release(move |conn, _| {
            Box::pin(async move {
                within(drain_deadline, conn.flush()).await?;
                Ok(true)
            })
        })
        .connect_lazy_with(options))
}

/// `call`, or an I/O `TimedOut` error once `deadline` has passed.
async fn within<T>(
    deadline: Duration,
    call: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, sqlx::Error> {
    tokio::time::timeout(deadline, call).await.map_err(|_| {
        tracing::warn!(
            ?deadline,
            "a Postgres connection stopped answering; closing it"
        );
        sqlx::Error::Io(std::io::ErrorKind::TimedOut.into())
    })?
}
