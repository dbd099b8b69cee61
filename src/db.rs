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
//!
//! **Connection poolers.** Through PgBouncer (or a pooler like it) in *session* mode
//! everything works: the session settings are `SET` once the connection is open, not
//! sent as startup parameters (PgBouncer refuses `options` and `extra_float_digits`, or,
//! told to ignore them, drops them and with them the timeouts; pgbouncer#525). In
//! *transaction* or *statement* mode a client's consecutive statements may run on
//! different Postgres sessions: LISTEN hears nothing (live pages would never update),
//! `SET` and prepared statements land on a session another client gets next (sqlx#67).
//! [`refuse_transaction_pooling`] stops the server at start, saying what to change.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{Connection, Executor, PgConnection, PgPool};

use crate::config::Settings;

/// A pooled Postgres connection idle for at least this long is pinged before use; one
/// used more recently was checked when it was returned (sqlx pings on release).
pub(crate) const IDLE_CHECK: Duration = Duration::from_secs(1);

/// The pool of `settings.database_url`, `settings.db_pool_size` connections, opened
/// lazily (the server starts while Postgres is down). Every session gets
/// `statement_timeout` = the store timeout and `lock_timeout` = [`Settings::lock_wait`].
/// Errors: an unparsable `DATABASE_URL`.
pub(crate) fn pool(settings: &Settings) -> anyhow::Result<PgPool> {
    // No startup parameters beyond the ones every pooler passes on: nothing here reads a
    // float as text, so sqlx's `extra_float_digits` is not needed.
    let options = PgConnectOptions::from_str(&settings.database_url)
        .context("parsing DATABASE_URL")?
        .extra_float_digits(None);
    // The session settings, in one simple-query round trip as each connection opens
    // (a pooler in session mode passes a `SET` through, where it would refuse or drop
    // the same settings sent at startup).
    let session_settings: std::sync::Arc<str> = format!(
        "SET statement_timeout = {}; SET lock_timeout = {}; SET random_page_cost = 1.1",
        settings.store_timeout_ms,
        settings.lock_wait().as_millis(),
    )
    .into();
    // (random_page_cost: the tables are small and cached; with the default 4 the planner
    // reads every venue's seats to draw a 1,000-seat map, 30 ms rather than 3.6 ms.)
    let (ping_deadline, drain_deadline) = (settings.store_timeout() / 4, settings.store_timeout());
    Ok(PgPoolOptions::new()
        .max_connections(settings.db_pool_size)
        .acquire_timeout(settings.store_timeout())
        .after_connect(move |conn, _| {
            let session_settings = session_settings.clone();
            Box::pin(async move {
                // Without arguments sqlx sends this as one simple query.
                conn.execute(&*session_settings).await?;
                Ok(())
            })
        })
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

/// What [`refuse_transaction_pooling`] says, for the operator.
pub(crate) const TRANSACTION_POOLING: &str = "DATABASE_URL reaches Postgres through a pooler in \
     transaction or statement mode (such as PgBouncer with pool_mode = transaction): a \
     notification sent on one connection never reached this server's LISTEN, so live \
     pages would never update, and per-session settings (the statement and lock timeouts) \
     and prepared statements would not stay with a connection. Point DATABASE_URL at \
     Postgres itself, or at a pool in session mode (pool_mode = session)";

/// Refuses a Postgres reached through a pooler in transaction or statement mode: LISTEN
/// on a connection of the pool, NOTIFY from a connection of its own, and wait at most
/// `wait` for the notification, which such a pooler never delivers to the listener (in
/// session mode, or straight to Postgres, it comes within milliseconds). Costs one
/// connection and two statements, once at start.
/// A Postgres that does not answer is not refused: the server starts while Postgres is
/// down, and `/readyz` names it. Errors: [`TRANSACTION_POOLING`].
pub(crate) async fn refuse_transaction_pooling(db: &PgPool, wait: Duration) -> anyhow::Result<()> {
    let cannot_judge = |err: &dyn std::fmt::Display| {
        tracing::warn!(error = %err, "could not check DATABASE_URL for a pooler");
        Ok(())
    };
    let channel = format!("seatlock_pooling_check_{:016x}", rand::random::<u64>());
    let listening = tokio::time::timeout(wait, async {
        let mut listener = PgListener::connect_with(db).await?;
        listener.listen(&channel).await?;
        Ok::<_, sqlx::Error>(listener)
    });
    let mut listener = match listening.await {
        Ok(Ok(listener)) => listener,
        Ok(Err(err)) => return cannot_judge(&err),
        Err(elapsed) => return cannot_judge(&elapsed),
    };
    // Sent from a connection of its own, as one simple query: no prepared statement (a
    // pooler's Postgres sessions may hold another client's) and no pool slot.
    let notify = async {
        let mut sender = PgConnection::connect_with(&db.connect_options()).await?;
        sender.execute(format!("NOTIFY {channel}").as_str()).await
    };
    match tokio::time::timeout(wait, notify).await {
        // The notification left. (Through a pooler in transaction mode it may come back
        // to the sender, which holds the Postgres session that LISTENed at that moment:
        // sqlx then reports "unexpected message: NotificationResponse". That is an
        // answer too.)
        Ok(Ok(_) | Err(sqlx::Error::Protocol(_))) => {}
        Ok(Err(err)) => return cannot_judge(&err),
        Err(elapsed) => return cannot_judge(&elapsed),
    }
    match tokio::time::timeout(wait, listener.recv()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => cannot_judge(&err),
        Err(_) => anyhow::bail!(TRANSACTION_POOLING),
    }
}
