//! Health checks, split as a proxy needs them (the AWS Builders' Library, "Implementing
//! health checks": a deep check that fails on every server at once, because a store they
//! share is slow, must not take them all out).
//!
//! * `GET /livez`: 200 `ok` whenever the process serves requests. It asks no store.
//! * `GET /readyz`: 200 `ok` when the lease store, Redis and Postgres answer and both
//!   live feeds are subscribed, else 503 naming what is down (`redis`, `etcd` when etcd
//!   backs the leases, with the alarm when etcd has raised NOSPACE, `postgres`, `live-redis` (the lease feed, whichever store),
//!   `live-postgres`), or `draining` once the server was told to stop. Each check is
//!   bounded by the store timeout. A server that works but less well than it should adds
//!   `warning:` lines after `ok` (expiry notifications off, an eviction policy that can
//!   drop holds).
//! * `GET /healthz`: `/readyz`, under the name earlier releases gave it.
//!
//! The proxy (`scripts/haproxy.cfg`) routes by `/readyz`, and when no server is ready
//! by `/livez`: a server whose Redis is down still serves what it can (docs/scale-out.md).

use axum::extract::State;
use axum::http::StatusCode;
use lease::LeaseError;

use crate::http::sessions::SessionRedis;
use crate::state::AppState;

/// Drains the server before it stops (reddit's baseplate.py#591 is what skipping it
/// costs): `/readyz` answers 503 `draining` from now on, while every request is still
/// served; after `--drain-ms` the caller ends the live streams (each browser's
/// EventSource reconnects, through the proxy, to a server that stays) and stops
/// accepting, then finishes the requests in flight ([`crate::app::Application::run_until`]).
pub async fn drain(state: &AppState) {
    state.draining.set();
    let drain = state.settings.drain();
    tracing::info!(
        drain_ms = drain.as_millis() as u64,
        "draining: /readyz says so"
    );
    tokio::time::sleep(drain).await;
}

/// `GET /livez`: the process serves.
pub async fn livez() -> &'static str {
    "ok"
}

/// `GET /readyz` (and `/healthz`): `draining` at once when [`drain`] has begun, else
/// pings the stores concurrently: the lease store, Redis (sessions; pinged once when they
/// share the lease client's store) and Postgres, each on a task of its own (`answers`).
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, String) {
    if state.draining.is_set() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable: draining".into(),
        );
    }
    let timeout = state.settings.store_timeout();
    let leases_name = state.leases.name();
    // Through the lease store, so the check sees what the leases see (a connection
    // Redis closed while idle is reopened, not reported as Redis down).
    let leases = answers(timeout, {
        let leases = state.leases.clone();
        async move { leases.ping().await }
    });
    let redis = async {
        matches!(state.redis, SessionRedis::Leases(_))
            || answers(timeout, {
                let redis = state.redis.clone();
                async move {
                    let command = redis::cmd("PING");
                    redis.query::<String>("ping", &command).await.is_ok()
                }
            })
            .await
                == Some(true)
    };
    let postgres = answers(timeout, {
        let db = state.db.clone();
        async move { sqlx::query("SELECT 1").execute(&db).await.is_ok() }
    });
    let (leases, redis_ok, postgres_ok) = tokio::join!(leases, redis, postgres);
    // etcd past its quota answers reads but refuses every write: say which alarm, as a
    // hold's 503 does, so whoever reads the check knows to compact and defragment.
    let leases_down = match leases {
        Some(Ok(())) => None,
        Some(Err(LeaseError::EtcdNoSpace(why))) => Some(format!("{leases_name} ({why})")),
        _ => Some(leases_name.to_owned()),
    };
    let down: Vec<String> = leases_down
        .into_iter()
        .chain(
            [(redis_ok, "redis"), (postgres_ok == Some(true), "postgres")]
                .into_iter()
                .filter(|(ok, _)| !ok)
                .map(|(_, name)| name.to_owned()),
        )
        .chain(
            state
                .live
                .feeds_down()
                .into_iter()
                .map(|feed| feed.name().to_owned()),
        )
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

/// Runs `check` on a task of its own and waits at most `timeout` for its answer (`None`
/// if it did not come in time). A
/// check that takes longer, or whose caller goes away (a proxy's check timeout is often
/// shorter than the store timeout), still runs to its end: a store's ping whose
/// request times out repairs the store (a new connection; with Sentinels, the promoted
/// primary followed), and only if it runs on can the next check see the repair. Cut at
/// the same timeout as the request inside it, it never would: a server whose Redis
/// primary hung would report Redis down, and stay out of the proxy, for good.
async fn answers<F>(timeout: std::time::Duration, check: F) -> Option<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let task = tokio::spawn(check);
    tokio::time::timeout(timeout, task).await.ok()?.ok()
}
