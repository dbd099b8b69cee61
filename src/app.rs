//! The one place that builds the application, used by `seatlock serve`, the integration
//! tests, the end-to-end suite and the load test (zero-to-production's
//! `Application::build`).

use std::future::Future;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tower_http::compression::CompressionLayer;
use tower_http::trace::TraceLayer;
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, SessionManagerLayer};

use crate::config::Settings;
use crate::http::secrets::Secrets;
use crate::http::sessions::SessionRedis;
use crate::http::{buyer, csrf, deadline, health, sessions};
use crate::ledger::PgFenceLedger;
use crate::state::{AppState, RoomStore, Shared};
use crate::telemetry;
use crate::{auction, events, live, orders, profile, seats, venue, waiting_room};

/// What a build adds to the product: the one hook of the race lab (the `seatlock-lab`
/// crate). The product itself builds with [`Extension::default`], which adds nothing.
#[derive(Default)]
pub struct Extension {
    /// Routes merged beside the product's.
    pub routes: Router<AppState>,
    /// Hold and confirm in place of the product's ([`seats::purchase_routes`]). `None`:
    /// the product's.
    pub purchase_routes: Option<Router<AppState>>,
    /// Turns the lease store's failover guard off
    /// ([`lease::LeaseClient::with_failover_guard`]), so that a failover can repeat a
    /// fencing token. The product never does.
    pub no_failover_guard: bool,
    /// Turns the lease store's cooling off ([`lease::LeaseClient::with_cooling`]), so that
    /// a hold lapsing mid-confirm is granted again at once and only the fence stops the
    /// late write. The product never does.
    pub no_cooling: bool,
    /// Installs the pause seam's layer ([`crate::failpoint::layer`]) and lengthens the
    /// request deadline by the longest pause ([`crate::failpoint::MAX_PAUSE`]).
    #[cfg(feature = "failpoints")]
    pub pauses: bool,
}

/// A built, bound, not yet running server.
pub struct Application {
    listener: TcpListener,
    metrics_listener: TcpListener,
    router: Router,
    state: AppState,
}

impl Application {
    /// Connects to Postgres and Redis (lazily: the server starts even if they are down,
    /// and `/healthz` says so), builds the router and binds `settings.bind`.
    /// Errors: a store URL that cannot be opened, a setting the store refuses, a bind
    /// that fails.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        Self::build_with(settings, Extension::default()).await
    }

    /// [`Application::build`] with `extension`'s routes, strategies and switches added:
    /// the race lab's one hook. Errors as [`Application::build`].
    pub async fn build_with(mut settings: Settings, extension: Extension) -> anyhow::Result<Self> {
        telemetry::prometheus(); // installed before anything is counted
        fit_connection_budgets(&mut settings)?;
        // A paused request must not meet its deadline because of the pause.
        #[cfg(feature = "failpoints")]
        if extension.pauses {
            settings.pause_margin = crate::failpoint::MAX_PAUSE;
        }
        // The store timeout bounds every statement and every lock wait (a lock wait is
        // shorter, so that a purchase cut off after its idle bound,
        // Settings::purchase_idle_timeout, frees the row within it); a request's
        // deadline bounds the waits on a store that stopped answering (crate::db).
        let db = crate::db::pool(&settings)?;
        let (leases, redis, waiting_room) = stores(&settings, &db, &extension).await?;
        let secrets = Secrets::of(&settings).map_err(anyhow::Error::msg)?;
        let csrf = csrf::Csrf::new(secrets.as_ref());
        let identities = buyer::Identities::new(secrets.as_ref());
        let live = Arc::new(live::LiveHub::new(settings.max_streams as usize));
        let lapses = Arc::new(live::LapseTouches::new(leases.clone()));
        live::spawn(
            live.clone(),
            leases.clone(),
            lapses.clone(),
            settings.lease_store_url().to_owned(),
            db.clone(),
            settings.lease_namespace.to_string(),
        );
        let state = AppState::new(Shared {
            db,
            leases,
            redis,
            waiting_room,
            settings: Arc::new(settings),
            csrf,
            identities,
            live,
            lapses,
            catalog: Arc::default(),
            snapshots: Arc::default(),
            boards: Arc::default(),
            rooms: Arc::default(),
            known_items: Arc::default(),
            auction_reads: Arc::default(),
            draining: Arc::default(),
        });
        // Not ready before the live feeds are subscribed (pages would miss changes),
        // unless a store is down: then start anyway, and /healthz says which feed.
        if !state
            .live
            .wait_until_live(state.settings.store_timeout())
            .await
        {
            tracing::warn!(down = ?state.live.feeds_down(), "starting with a live feed down");
        }
        // A pooler in transaction mode would let the server start and its live pages
        // go silent: refuse it now, in words (crate::db).
        crate::db::refuse_transaction_pooling(&state.db, state.settings.store_timeout()).await?;
        // Open maps converge to the stores' truth after a lost message.
        venue::live::spawn_convergence(state.clone());
        let router = router(state.clone(), extension);
        let listener = TcpListener::bind(&state.settings.bind)
            .await
            .with_context(|| format!("binding {}", state.settings.bind))?;
        let metrics_listener = TcpListener::bind(&state.settings.metrics_bind)
            .await
            .with_context(|| format!("binding {} (metrics)", state.settings.metrics_bind))?;
        Ok(Application {
            listener,
            metrics_listener,
            router,
            state,
        })
    }

    /// The address actually bound (with `bind = 127.0.0.1:0`, the port picked).
    pub fn address(&self) -> std::net::SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// The address `GET /metrics` is served on (`--metrics-bind`).
    pub fn metrics_address(&self) -> std::net::SocketAddr {
        self.metrics_listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// The shared state (pool, lease client, settings).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` completes, then finishes in-flight requests (live page
    /// streams are ended, else they would never finish). The auction closer
    /// ([`auction::close`]) runs alongside for exactly as long.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let _closer = auction::close::spawn(self.state.clone());
        let _payments = AbortOnDrop(tokio::spawn(seats::payments::sweep_forever(
            self.state.clone(),
        )));
        let metrics = Router::new().route("/metrics", get(telemetry::metrics_page));
        let _metrics = AbortOnDrop(tokio::spawn(
            axum::serve(self.metrics_listener, metrics).into_future(),
        ));
        let live = self.state.live.clone();
        let limits = crate::http::serve::Limits {
            header_timeout: self.state.settings.header_timeout(),
            max_connections: self.state.settings.max_connections as usize,
        };
        crate::http::serve::serve(self.listener, self.router, limits, async move {
            shutdown.await;
            live.close();
        })
        .await;
        Ok(())
    }
}

impl Application {
    /// What a server process does once built: prints where it serves (the first two lines
    /// of stdout, which tests and the load test read), then serves until Ctrl-C or SIGTERM.
    /// After SIGTERM it drains first ([`crate::http::health::drain`]). `name` is the
    /// binary's. Errors: a listener that fails.
    pub async fn serve_until_signalled(self, name: &str) -> anyhow::Result<()> {
        println!("{name} is serving at http://{}", self.address());
        println!("metrics at http://{}/metrics", self.metrics_address());
        println!(
            "leases in {}, sessions in Redis",
            self.state().leases.name()
        );
        let state = self.state().clone();
        self.run_until(async move {
            if shutdown_signal().await == Stop::Drain {
                // A second signal (Ctrl-C, another SIGTERM) cuts the drain short.
                tokio::select! {
                    () = crate::http::health::drain(&state) => {}
                    _ = shutdown_signal() => {}
                }
            }
        })
        .await?;
        Ok(())
    }
}

/// How the server was told to stop.
#[derive(PartialEq)]
enum Stop {
    /// Ctrl-C: a person at a terminal; stop accepting and finish in-flight requests now.
    Now,
    /// SIGTERM (`docker stop`, `kill`, a supervisor rolling the servers): drain first.
    Drain,
}

/// Waits for Ctrl-C or SIGTERM.
async fn shutdown_signal() -> Stop {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => Stop::Now,
        _ = term.recv() => Stop::Drain,
    }
}

/// Checks that live streams leave room for requests (`--max-streams` below
/// `--max-connections`), and fits both into the open files the system allows
/// ([`crate::http::serve::fit_open_files`]), scaled down together, with a warning, where
/// it allows fewer.
fn fit_connection_budgets(settings: &mut Settings) -> anyhow::Result<()> {
    let (connections, streams) = (settings.max_connections, settings.max_streams);
    if streams >= connections {
        anyhow::bail!(
            "--max-streams ({streams}) must be below --max-connections ({connections}): \
             the connections left over are what requests (a hold, a confirm) are served on"
        );
    }
    let fits = crate::http::serve::fit_open_files(u64::from(connections)) as u32;
    if fits < connections {
        settings.max_connections = fits;
        settings.max_streams =
            ((u64::from(streams) * u64::from(fits)) / u64::from(connections)).max(1) as u32;
        tracing::warn!(
            max_connections = settings.max_connections,
            max_streams = settings.max_streams,
            "the open-file limit (ulimit -n) is too low for --max-connections {connections}: \
             serving fewer"
        );
    }
    Ok(())
}

/// The routes and middleware. Sessions live in Redis ([`crate::http::sessions::Sessions`]:
/// under the lease namespace, expired by Redis, never resurrecting a rotated session);
/// cookies are HttpOnly and SameSite=Lax, and Secure on an https origin
/// ([`crate::http::proxy`]); every POST is CSRF-checked by [`csrf::CsrfForm`] and
/// refused if its Origin is foreign.
/// `GET /metrics` is not here: `telemetry`'s page has a listener of its own
/// (`--metrics-bind`, [`Application::run_until`]). Hold and confirm are the
/// product's ([`seats::purchase_routes`]) unless `extension` brings its own (the race
/// lab's strategies): chosen here, once, so neither path tests the other.
pub fn router(state: AppState, extension: Extension) -> Router {
    let store = crate::http::sessions::Sessions::new(
        state.redis.clone(),
        state.settings.lease_namespace.clone(),
    );
    let sessions = SessionManagerLayer::new(store)
        .with_name(sessions::SESSION_COOKIE)
        .with_http_only(true)
        .with_same_site(SameSite::Lax)
        .with_secure(false)
        .with_expiry(Expiry::OnInactivity(time::Duration::days(1)));
    let router = Router::new()
        .route("/", get(events::list::index))
        .route("/livez", get(health::livez))
        .route("/readyz", get(health::readyz))
        .route("/healthz", get(health::readyz))
        .route("/static/app.js", get(app_js))
        .route("/static/app.css", get(app_css))
        .merge(seats::router())
        .merge(venue::router())
        .merge(waiting_room::router())
        .merge(
            extension
                .purchase_routes
                .unwrap_or_else(seats::purchase_routes),
        )
        .merge(orders::router())
        .merge(auction::router())
        .merge(profile::routes::router())
        .merge(extension.routes)
        .fallback(not_found);
    // The pause seam wraps the handlers only: a pause never counts against reading the
    // body, and the deadline (outside it) already allows for it.
    #[cfg(feature = "failpoints")]
    let router = if extension.pauses {
        router.layer(axum::middleware::from_fn(crate::failpoint::layer))
    } else {
        router
    };
    let router = router
        .layer(axum::middleware::from_fn(csrf::refuse_foreign_origin))
        .layer(axum::middleware::from_fn_with_state(
            state.identities.clone(),
            buyer::identify,
        ))
        .layer(sessions)
        .layer(axum::middleware::from_fn(buyer::keep_rotated_sessions))
        .layer(axum::middleware::from_fn(buyer::session_save_failures))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            deadline::bound,
        ))
        // Outside the sessions: it sees (and marks `Secure`, on https) their cookies.
        // Outside the deadline too, so its answers (408, 413) get HSTS on https.
        .layer(axum::middleware::from_fn_with_state(
            crate::http::proxy::Proxying::of(&state.settings),
            crate::http::proxy::buyer_origin,
        ))
        // gzip for clients that ask (the arena's overview: 24 kB of HTML, 5 kB sent);
        // tower-http's default predicate leaves event streams and tiny bodies
        // alone, so live pages are not buffered. At the fastest level: at the default
        // one, compressing was a third of the server's CPU per arena view, for 4.2 kB
        // sent instead of 5.1 (docs/performance.md).
        .layer(CompressionLayer::new().quality(tower_http::CompressionLevel::Fastest))
        .layer(TraceLayer::new_for_http());
    crate::http::headers::secured(router).with_state(state)
}

/// The lease store `settings` name (`--lease-store-url`, else `--redis-url`): Redis with
/// the Postgres fence ledger, or etcd (connected lazily, as Redis: the server starts while
/// it is down, and `/healthz` names it), or ZooKeeper (a member must answer at start: the
/// store's own session is made then); and
/// the sessions' Redis, the lease client's own connection when the leases are in the same
/// Redis (one healing connection, as before the store could be chosen). Refuses a lease
/// TTL setting the store cannot express (etcd: whole seconds, at least 2 s, and no
/// shorter than the etcd in use grants; ZooKeeper: within its server's session
/// timeouts), naming the flag, and more seats per buyer than one hold on the store takes.
///
/// Also the waiting rooms' store ([`crate::waiting_room`]): the Redis lease client, whose
/// hold script checks admissions; `None` on etcd and ZooKeeper, where the server refuses
/// to start with `--waiting-room-shoppers` set.
async fn stores(
    settings: &Settings,
    db: &sqlx::PgPool,
    extension: &Extension,
) -> anyhow::Result<(Arc<dyn lease::LeaseStore>, SessionRedis, Option<RoomStore>)> {
    let timeout = settings.store_timeout();
    // Async: with Sentinels, a hung one is passed over instead of hanging the start.
    let own_redis = || async {
        let redis = lease::connect_async(&settings.redis_url, timeout)
            .await
            .context("opening REDIS_URL (malformed, or no Sentinel answered)")?;
        anyhow::Ok(SessionRedis::Own(Arc::new(redis)))
    };
    let url = settings.lease_store_url();
    let (store, redis, room): (Arc<dyn lease::LeaseStore>, _, _) =
        if let Some(name) = settings.consensus_lease_store() {
            let store: Arc<dyn lease::LeaseStore> = if name == "etcd" {
                Arc::new(
                    lease::etcd::EtcdStore::connect(url, timeout)
                        .await
                        .with_context(|| format!("connecting to the lease store {url}"))?,
                )
            } else {
                Arc::new(
                    lease::zookeeper::ZooKeeperStore::connect(url, timeout)
                        .await
                        .with_context(|| format!("connecting to the lease store {url}"))?,
                )
            };
            if settings.waiting_room_shoppers > 0 {
                anyhow::bail!(
                    "refusing to start: --waiting-room-shoppers needs the Redis lease store \
                 (the queue and its admissions live beside the seat leases, checked by the \
                 hold's own script); {name} has no waiting room"
                );
            }
            (store, own_redis().await?, None)
        } else {
            let store = lease::connect_async(url, timeout)
                .await
                .context("opening the lease store URL (malformed, or no Sentinel answered)")?;
            let client = Arc::new(
                lease::LeaseClient::new(store, PgFenceLedger(db.clone()))
                    .with_failover_guard(!extension.no_failover_guard)
                    .with_cooling(!extension.no_cooling),
            );
            let room = Some(client.clone());
            if url == settings.redis_url {
                (client.clone(), SessionRedis::Leases(client), room)
            } else {
                (client, own_redis().await?, room)
            }
        };
    // A lease must last what it is asked for: the store's limits, and (etcd, ZooKeeper)
    // what it grants when asked (etcd lengthens a lease below a minimum that depends on
    // its election timeout; ZooKeeper clamps a session to its server's timeouts).
    for (flag, ttl) in settings.lease_ttls() {
        store
            .check_ttl(ttl)
            .await
            .with_context(|| format!("refusing to start: {flag} {}", ttl.as_millis()))?;
    }
    if let Some(most) = store.max_keys_per_hold()
        && settings.max_seats_per_buyer > most as u64
    {
        anyhow::bail!(
            "refusing to start: --max-seats-per-buyer {} is more seats than one hold on {} \
             takes ({most}: its operations per transaction)",
            settings.max_seats_per_buyer,
            store.name()
        );
    }
    Ok((store, redis, room))
}

async fn not_found() -> crate::http::error::Error {
    crate::http::error::Error::no_such_page()
}

async fn app_js() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../web/app.js"),
    )
}

async fn app_css() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../web/app.css"),
    )
}

/// Aborts a background task when dropped (when the server stops).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
