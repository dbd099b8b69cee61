//! `GET /healthz`: 200 `ok` when the lease store, Redis and Postgres answer and both live
//! feeds are subscribed, else 503 naming what is down (`redis`, `etcd` when etcd backs the
//! leases, `postgres`, `live-redis` (the lease feed, whichever store), `live-postgres`; each check bounded by the store timeout). A server that works but
//! less well than it should adds `warning:` lines after `ok` (expiry notifications off,
//! an eviction policy that can drop holds).

use axum::extract::State;
use axum::http::StatusCode;

use crate::state::{AppState, SessionRedis};

/// Pings the stores concurrently: the lease store, Redis (sessions; pinged once when they
/// share the lease client's store) and Postgres.
pub async fn healthz(State(state): State<AppState>) -> (StatusCode, String) {
    let timeout = state.settings.store_timeout();
    let leases_name = state.leases.name();
    let leases = async {
        // Through the lease store, so the check sees what the leases see (a connection
        // Redis closed while idle is reopened, not reported as Redis down).
        let ping = state.leases.ping();
        matches!(tokio::time::timeout(timeout, ping).await, Ok(Ok(())))
    };
    let redis = async {
        let command = redis::cmd("PING");
        let ping = state.redis.query::<String>("ping", &command);
        matches!(state.redis, SessionRedis::Leases(_))
            || matches!(tokio::time::timeout(timeout, ping).await, Ok(Ok(_)))
    };
    let postgres = async {
        let ping = sqlx::query("SELECT 1").execute(&state.db);
        matches!(tokio::time::timeout(timeout, ping).await, Ok(Ok(_)))
    };
    let (leases_ok, redis_ok, postgres_ok) = tokio::join!(leases, redis, postgres);
    let down: Vec<&str> = [
        (leases_ok, leases_name),
        (redis_ok, "redis"),
        (postgres_ok, "postgres"),
    ]
    .into_iter()
    .filter(|(ok, _)| !ok)
    .map(|(_, name)| name)
    .chain(state.live.feeds_down().into_iter().map(|feed| feed.name()))
    .collect();
    if down.is_empty() {
        let notes = state.live.notes();
        let body = std::iter::once("ok".to_owned())
            .chain(notes.into_iter().map(|note| format!("warning: {note}")))
            .collect::<Vec<_>>()
            .join("\n");
        (StatusCode::OK, body)
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("unavailable: {}", down.join(", ")),
        )
    }
}
