//! The floor server: the least a hold and a confirm can cost on seatlock's stack, the
//! baseline of `http_hold_vs_floor_64` and `confirm_vs_floor_64`.
//!
//! The same HTTP stack as the product (axum's router on hyper's HTTP/1.1 connections,
//! served by [`seatlock::http::serve::serve`] with the product's default limits), on a tokio
//! runtime of its own (as the server has its process), driven by the same load client
//! ([`seatlock_harness::load`]). It has the same URLs and answers 303 like the product,
//! and does only a request's bare work:
//!
//! * `GET /events/{event}`: a random id in a cookie (`floor`) and a form with a dummy
//!   `authenticity_token`, which the client reads like the product's page.
//! * `POST …/seats/{seat}/hold`: the cookie, then [`lease::LeaseStore::acquire`] (the
//!   product's acquire script) in the group `floor:event:<event>`; the lease is kept in
//!   process memory under (cookie, seat).
//! * `POST …/release`: [`lease::LeaseStore::release`] (the product's release script).
//! * `POST …/confirm`: in one transaction, the fenced UPDATE of the seat and the order's
//!   INSERT (one statement, [`SELL`]), COMMIT, then the release.
//!
//! Nothing else: no session store, CSRF check, seat read, payment, owner check, live
//! notification, tracing or metrics. The pool has the product's size and the same
//! `test_before_acquire(false)`; sqlx still pings each connection returned to it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use lease::{Lease, LeaseClient, LeaseKey, LeaseStore, OwnerToken};
use seatlock::config::Settings;
use seatlock::ledger::PgFenceLedger;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tower_sessions::cookie::Cookie;

/// The cookie naming a floor buyer.
const COOKIE: &str = "floor";

/// The confirm's bare write: the fenced conditional UPDATE (unsold, token not lower than
/// the row's) and the order's INSERT, one statement. `$1` event, `$2` seat, `$3` fencing
/// token, `$4` buyer id. Returns the order id, or no row if the fence refused.
pub(crate) const SELL: &str = "WITH sold AS (
     UPDATE event_seats SET sold = true, fence_token = $3
      WHERE event_id = $1 AND seat_id = $2 AND NOT sold AND fence_token <= $3
  RETURNING event_id, seat_id, price_cents)
 INSERT INTO orders (event_id, seat_id, buyer_id, buyer_name, price_cents, fence_token)
 SELECT event_id, seat_id, $4, 'floor', price_cents, $3 FROM sold
 RETURNING id";

/// What the floor's handlers share.
struct Floor {
    leases: LeaseClient<PgFenceLedger>,
    db: PgPool,
    /// Live holds by (cookie, seat id).
    held: Mutex<HashMap<(String, i64), Lease>>,
}

/// A running floor server; stops (its runtime shut down) when dropped.
pub(crate) struct FloorServer {
    /// `http://127.0.0.1:PORT`.
    pub address: String,
    runtime: Option<tokio::runtime::Runtime>,
}

impl FloorServer {
    /// Starts the floor on a free loopback port over the bench's stores, on a new
    /// multi-threaded tokio runtime (one worker per core, like the server's
    /// `#[tokio::main]`). Errors: a store URL that does not parse, no free port.
    pub(crate) fn start(database_url: &str, redis_url: &str) -> anyhow::Result<FloorServer> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("floor")
            .build()?;
        // The pool, the Redis connection and the server loop spawn their tasks on the
        // floor's runtime, not on the caller's.
        let _inside = runtime.enter();
        let defaults = Settings::new(database_url, redis_url, "127.0.0.1:0");
        let db = PgPoolOptions::new()
            .max_connections(defaults.db_pool_size)
            .test_before_acquire(false)
            .connect_lazy(database_url)?;
        let redis = lease::connect(redis_url, defaults.store_timeout())?;
        let floor = Arc::new(Floor {
            leases: LeaseClient::new(redis, PgFenceLedger(db.clone())),
            db,
            held: Mutex::default(),
        });
        let router = Router::new()
            .route("/events/{event}", get(page))
            .route("/events/{event}/seats/{seat}/hold", post(hold))
            .route("/events/{event}/seats/{seat}/release", post(release))
            .route("/events/{event}/seats/{seat}/confirm", post(confirm))
            .with_state(floor);
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let address = format!("http://{}", listener.local_addr()?);
        let limits = seatlock::http::serve::Limits {
            header_timeout: defaults.header_timeout(),
            max_connections: defaults.max_connections as usize,
        };
        runtime.spawn(seatlock::http::serve::serve(
            tokio::net::TcpListener::from_std(listener)?,
            router,
            limits,
            std::future::pending(),
        ));
        drop(_inside);
        Ok(FloorServer {
            address,
            runtime: Some(runtime),
        })
    }
}

impl Drop for FloorServer {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A handler's failure: 500 with the error's text (the load client counts non-303s).
struct Failed(anyhow::Error);

impl<E: Into<anyhow::Error>> From<E> for Failed {
    fn from(err: E) -> Self {
        Failed(err.into())
    }
}

impl IntoResponse for Failed {
    fn into_response(self) -> Response {
        (StatusCode::INTERNAL_SERVER_ERROR, format!("{:#}", self.0)).into_response()
    }
}

/// The `floor` cookie's value.
fn buyer(headers: &HeaderMap) -> anyhow::Result<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|cookie| cookie.name() == COOKIE)
        .map(|cookie| cookie.value().to_owned())
        .context("no floor cookie")
}

/// The lease key of a seat in the floor's own group of the event.
fn key(event: i64, seat: i64) -> anyhow::Result<LeaseKey> {
    Ok(LeaseKey::new(
        format!("floor:event:{event}"),
        seat.to_string(),
    )?)
}

/// Back to the page, as the product answers a seat form.
fn back(event: i64, seat: i64) -> Redirect {
    Redirect::to(&format!("/events/{event}#seat-{seat}"))
}

async fn page(Path(_event): Path<i64>) -> impl IntoResponse {
    let cookie = Cookie::build((COOKIE, OwnerToken::random().as_str().to_owned()))
        .path("/")
        .http_only(true)
        .build();
    (
        [(header::SET_COOKIE, cookie.to_string())],
        r#"<form method="post"><input type="hidden" name="authenticity_token" value="floor"></form>"#,
    )
}

async fn hold(
    State(floor): State<Arc<Floor>>,
    headers: HeaderMap,
    Path((event, seat)): Path<(i64, i64)>,
) -> Result<Redirect, Failed> {
    let buyer = buyer(&headers)?;
    let lease = floor
        .leases
        .acquire(&key(event, seat)?, &buyer, Duration::from_secs(600))
        .await?;
    floor
        .held
        .lock()
        .expect("not poisoned")
        .insert((buyer, seat), lease);
    Ok(back(event, seat))
}

/// The caller's lease on `seat`, taken out of the floor's memory.
fn take(floor: &Floor, headers: &HeaderMap, seat: i64) -> anyhow::Result<Lease> {
    let buyer = buyer(headers)?;
    let mut held = floor.held.lock().expect("not poisoned");
    held.remove(&(buyer, seat)).context("no hold on this seat")
}

async fn release(
    State(floor): State<Arc<Floor>>,
    headers: HeaderMap,
    Path((event, seat)): Path<(i64, i64)>,
) -> Result<Redirect, Failed> {
    let lease = take(&floor, &headers, seat)?;
    if !floor.leases.release(&lease).await? {
        return Err(anyhow::anyhow!("the hold had lapsed").into());
    }
    Ok(back(event, seat))
}

async fn confirm(
    State(floor): State<Arc<Floor>>,
    headers: HeaderMap,
    Path((event, seat)): Path<(i64, i64)>,
) -> Result<Redirect, Failed> {
    let buyer = buyer(&headers)?;
    let lease = take(&floor, &headers, seat)?;
    let mut tx = floor.db.begin().await?;
    let order: Option<i64> = sqlx::query_scalar(SELL)
        .bind(event)
        .bind(seat)
        .bind(lease.fencing_token().0 as i64)
        .bind(&buyer)
        .fetch_optional(&mut *tx)
        .await?;
    let order = order.context("the fence refused the sale")?;
    tx.commit().await?;
    floor.leases.release(&lease).await?;
    Ok(Redirect::to(&format!("/orders/{order}")))
}
