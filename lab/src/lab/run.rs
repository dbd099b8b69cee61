//! One lab run: both sides at once, each three servers and a recorder, then the lock's
//! keys cleaned up and the run marked finished.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease::{LeaseClient, LeaseKey, LeaseStore, RedisStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use super::check::{Action, Checker, in_secs, why};
use super::history;
use super::net_delay::DelayedLink;
use super::own_redis::OwnRedis;
use super::queries::{self, NewRow};
use super::simulated::{Arena, Protocol, Report, Server};
use super::unsafe_ops::{self, LedgerInRedis};
use super::{
    ClockServer, Fault, JITTER_MS, LEASE_TTL, RUN_LIMIT, SEAT, SERVERS, STAGGER, Scenario, Side,
};
use seatlock::ledger::PgFenceLedger;
use seatlock::state::AppState;

/// How far ahead of the moment both sides are ready their clocks start.
const START_LINE: Duration = Duration::from_millis(50);

/// Runs `scenario` as run `run_id` to its end: the step-off side and the step-on side at
/// once, on one clock. Errors (a store down) are recorded as rows by the servers; what
/// fails here is logged, and the run is marked finished whatever happens, so that its
/// page stops waiting. `clock` starts each side's Redis of its own for
/// [`Fault::ClockJump`].
pub(super) async fn run(state: AppState, run_id: i64, scenario: Scenario, clock: ClockServer) {
    let (off, on) = tokio::join!(
        prepare(&state, run_id, scenario, Side::Off, &clock),
        prepare(&state, run_id, scenario, Side::On, &clock),
    );
    match (off, on) {
        (Ok(off), Ok(on)) => {
            // One start line for both sides, once both are ready, so that neither side's
            // setup shifts its schedule against the other's.
            let started = Instant::now() + START_LINE;
            let (off, on) = tokio::join!(off.race(&state, started), on.race(&state, started));
            for result in [off, on] {
                if let Err(err) = result {
                    tracing::warn!(run_id, "lab run: {err:#}");
                }
            }
        }
        (off, on) => {
            // A store down before the start: the table says so, on each side.
            for (side, result) in [(Side::Off, off), (Side::On, on)] {
                let why = match result {
                    Ok(_) => "the other side could not start".to_string(),
                    Err(err) => why(&err),
                };
                let failed = Action::Failed(format!("could not start: {why}"));
                let mark = Checker::default().mark("lab", &failed);
                let row = NewRow {
                    side,
                    seq: 1,
                    at_ms: 0,
                    server: "lab",
                    action: &failed,
                    lock_key: "?",
                    fence_counter: None,
                    mark: mark.as_ref(),
                };
                if let Err(err) = queries::insert_row(&state.db, run_id, row).await {
                    tracing::warn!(run_id, "lab row not recorded: {err}");
                }
            }
        }
    }
    // Whatever happened (a side that could not start, a recorder that failed), what the
    // run left in the stores goes, before the run says it is finished.
    for side in [Side::Off, Side::On] {
        if let Err(err) = clean_up(&state, run_id, side).await {
            tracing::warn!(run_id, "lab clean-up: {err:#}");
        }
    }
    if let Err(err) = queries::finish_run(&state.db, run_id).await {
        tracing::warn!(run_id, "lab run not marked finished: {err}");
    }
}

/// One side, ready to race: its own lease group (`<namespace>:lab:<run>:<side>`, so
/// tokens start afresh and nothing else shares its keys), the lab's connection, and three
/// servers with a connection and a lease client each; with [`Fault::ClockJump`], the
/// side's Redis of its own, which holds its lock.
struct Prepared {
    run_id: i64,
    side: Side,
    protocol: Protocol,
    key: LeaseKey,
    redis: Arc<RedisStore>,
    clock: Option<OwnRedis>,
    servers: Vec<Server>,
}

/// Builds one side and warms it up: every connection made, and the group's first block of
/// fencing tokens reserved (one grant and release of 14C by the lab before the start
/// line, so A's first token is 2), so that no row waits on a first connection or a ledger
/// write the others did not.
async fn prepare(
    state: &AppState,
    run_id: i64,
    scenario: Scenario,
    side: Side,
    clock: &ClockServer,
) -> anyhow::Result<Prepared> {
    let protocol = Protocol::of(scenario.step, side);
    let key = lock_key(state, run_id, side);
    // Redis's clock jumps: the side's lock lives on a Redis of its own, under libfaketime,
    // so that the jump ends no other run's lease and none of the product's. The seat's
    // row and the fence ledger stay in Postgres.
    let clock = match scenario.fault {
        Fault::ClockJump => Some(OwnRedis::start_with_clock(clock.binary()?).await?),
        _ => None,
    };
    let store_url = clock.as_ref().map_or_else(
        || state.settings.lease_store_url().to_owned(),
        OwnRedis::url,
    );
    let redis = Arc::new(connect_to(state, &store_url)?);
    // B and C start one and two staggers after A, each a little later as the seed draws.
    let mut rng = StdRng::seed_from_u64(scenario.seed);
    let mut servers = Vec::new();
    for (i, name) in SERVERS.into_iter().enumerate() {
        let jitter = if i == 0 {
            0
        } else {
            rng.random_range(0..=JITTER_MS)
        };
        let client = lease_client_on(state, protocol, connect_to(state, &store_url)?, &redis);
        client.ping().await?;
        // A's write delayed in the network: its own connection to Postgres, through a
        // proxy, made now.
        let link = match (i, scenario.fault) {
            (0, Fault::WriteDelayed) => Some(DelayedLink::open(&state.db).await?),
            _ => None,
        };
        servers.push(Server {
            name,
            start: STAGGER * i as u32 + Duration::from_millis(jitter),
            client,
            fault: if i == 0 { scenario.fault } else { Fault::None },
            pause: scenario.fault_pause(),
            link,
        });
    }
    let warm_up = servers[0].client.acquire(&key, "lab", LEASE_TTL).await?;
    servers[0].client.release(&warm_up).await?;
    Ok(Prepared {
        run_id,
        side,
        protocol,
        key,
        redis,
        clock,
        servers,
    })
}

impl Prepared {
    /// Races the side's servers from `started`, with a recorder for their rows, for at
    /// most [`RUN_LIMIT`] (then the servers are stopped, and a row says so).
    async fn race(self, state: &AppState, started: Instant) -> anyhow::Result<()> {
        let (run_id, side) = (self.run_id, self.side);
        let (reports, received) = mpsc::unbounded_channel();
        let recorder = tokio::spawn(record(
            state.db.clone(),
            run_id,
            side,
            self.protocol,
            received,
        ));
        let arena = Arc::new(Arena {
            run_id,
            side,
            protocol: self.protocol,
            key: self.key.clone(),
            redis: self.redis.clone(),
            clock: self.clock.map(tokio::sync::Mutex::new),
            db: state.db.clone(),
            started,
            owners: Mutex::new(HashMap::new()),
            reports,
        });
        let mut servers = tokio::task::JoinSet::new();
        for server in self.servers {
            servers.spawn(server.run(arena.clone()));
        }
        let all_done = async { while servers.join_next().await.is_some() {} };
        if tokio::time::timeout_at(started + RUN_LIMIT, all_done)
            .await
            .is_err()
        {
            // A store so slow that the run outlived its limit: stop the servers here, so
            // that no row comes after the run is marked finished.
            servers.abort_all();
            let why = format!("the run is cut short after {}", in_secs(RUN_LIMIT));
            arena.report("lab", Action::Failed(why)).await;
        }
        // Every server is done: the recorder ends once it has stored what they sent.
        drop(servers);
        drop(arena);
        Ok(recorder.await?)
    }
}

/// A connection of its own to the server's Redis (the lease store).
pub(super) fn connect(state: &AppState) -> anyhow::Result<RedisStore> {
    connect_to(state, state.settings.lease_store_url())
}

/// A connection of its own to the Redis at `url` (the server's, or a run's own).
pub(super) fn connect_to(state: &AppState, url: &str) -> anyhow::Result<RedisStore> {
    Ok(lease::connect(url, state.settings.store_timeout())?)
}

/// One server's lease client under `protocol`, on a connection of its own to the
/// server's Redis ([`lease_client_on`]).
pub(super) fn lease_client(
    state: &AppState,
    protocol: Protocol,
    redis: &Arc<RedisStore>,
) -> anyhow::Result<Arc<dyn LeaseStore>> {
    Ok(lease_client_on(state, protocol, connect(state)?, redis))
}

/// [`lease_client`] on the connection `store` (a Redis of the lab's own: a clock-jump
/// run's, the replay's).
pub(super) fn lease_client_on(
    state: &AppState,
    protocol: Protocol,
    store: RedisStore,
    redis: &Arc<RedisStore>,
) -> Arc<dyn LeaseStore> {
    if protocol.durable_tokens {
        Arc::new(
            LeaseClient::new(store, PgFenceLedger(state.db.clone()))
                .with_failover_guard(protocol.failover_guard),
        )
    } else {
        Arc::new(
            LeaseClient::new(store, LedgerInRedis(redis.clone()))
                .with_failover_guard(protocol.failover_guard),
        )
    }
}

/// The lock of run `run_id`'s `side`: 14C in the group `<namespace>:lab:<run>:<side>`.
pub(super) fn lock_key(state: &AppState, run_id: i64, side: Side) -> LeaseKey {
    let group = format!(
        "{}:{side}",
        state.settings.lease_namespace.group("lab", run_id)
    );
    LeaseKey::new(group, SEAT).expect("a namespace, a run id and a side make a valid key")
}

/// Deletes what run `run_id`'s `side` left in the stores: the lock's keys in Redis (with
/// step 2 off, one never expires) and its group's ceiling in the fence ledger. After the
/// run, and for a run found cut off (its server stopped mid-way). Idempotent. (A side
/// with a Redis of its own left no keys in the server's: that Redis died with the run.)
pub(super) async fn clean_up(state: &AppState, run_id: i64, side: Side) -> anyhow::Result<()> {
    let key = lock_key(state, run_id, side);
    let redis = connect(state)?;
    unsafe_ops::delete_lock_keys(&redis, &key).await?;
    super::queries::forget_fence_ceiling(&state.db, key.group()).await?;
    Ok(())
}

/// Marks each report as it comes ([`Checker`]) and stores it as the side's next row,
/// until every server of the side has dropped its sender; then has the side's history
/// judged by the history checker (`history.rs`) and keeps the verdict with its seat row.
async fn record(
    db: sqlx::PgPool,
    run_id: i64,
    side: Side,
    protocol: Protocol,
    mut received: UnboundedReceiver<Report>,
) {
    let mut checker = Checker::default();
    let mut ops = Vec::new();
    let (mut seq, mut at_ms) = (0, 0);
    while let Some(report) = received.recv().await {
        ops.extend(history::operation(&report));
        seq += 1;
        // Two servers' reports can cross on the way here; the table's time never goes back.
        at_ms = at_ms.max(report.at.as_millis() as i64);
        let mark = checker.mark(report.server, &report.action);
        let row = NewRow {
            side,
            seq,
            at_ms,
            server: report.server,
            action: &report.action,
            lock_key: &report.lock_key,
            fence_counter: report.counter,
            mark: mark.as_ref(),
        };
        if let Err(err) = queries::insert_row(&db, run_id, row).await {
            tracing::warn!(run_id, "lab row not recorded: {err}");
        }
    }
    let verdict = history::judge(&ops, protocol);
    let kept = queries::HistoryVerdict {
        valid: verdict.valid,
        anomalies: history::anomalies(&verdict),
        double_grants: verdict.double_grants as i32,
    };
    if let Err(err) = queries::keep_verdict(&db, run_id, side, &kept).await {
        tracing::warn!(run_id, "lab run's history verdict not kept: {err}");
    }
}
