//! One lab run: both sides at once, each three servers and a recorder, then the lock's
//! keys cleaned up and the run marked finished.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease::{LeaseClient, LeaseStore, RedisStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use super::check::Checker;
use super::queries::{self, NewRow};
use super::simulated::{Arena, Protocol, Report, Server};
use super::unsafe_ops::{self, LedgerInRedis};
use super::{Fault, RUN_LIMIT, SEAT, Scenario, Side};
use crate::ledger::PgFenceLedger;
use crate::state::AppState;

/// How far ahead of the run's request both sides' clocks start.
const START_LINE: Duration = Duration::from_millis(200);

/// Runs `scenario` as run `run_id` to its end: the step-off side and the step-on side at
/// once, on one clock. Errors (a store down) are recorded as rows by the servers; what
/// fails here is logged, and the run is marked finished whatever happens, so that its
/// page stops waiting.
pub(super) async fn run(state: AppState, run_id: i64, scenario: Scenario) {
    // One start line for both sides, a moment ahead, so that neither side's setup (its
    // connections) shifts its schedule against the other's.
    let started = Instant::now() + START_LINE;
    let both = async {
        tokio::join!(
            side(&state, run_id, scenario, Side::Off, started),
            side(&state, run_id, scenario, Side::On, started),
        )
    };
    match tokio::time::timeout(RUN_LIMIT, both).await {
        Ok((off, on)) => {
            for result in [off, on] {
                if let Err(err) = result {
                    tracing::warn!(run_id, "lab run: {err:#}");
                }
            }
        }
        Err(_) => tracing::warn!(run_id, "lab run cut short after {RUN_LIMIT:?}"),
    }
    if let Err(err) = queries::finish_run(&state.db, run_id).await {
        tracing::warn!(run_id, "lab run not marked finished: {err}");
    }
}

/// One side: its own lease group (`<namespace>:lab:<run>:<side>`, so tokens start afresh
/// and nothing else shares its keys), three servers with a connection and a lease client
/// each, and the recorder.
async fn side(
    state: &AppState,
    run_id: i64,
    scenario: Scenario,
    side: Side,
    started: Instant,
) -> anyhow::Result<()> {
    let protocol = Protocol::of(scenario.step, side);
    let group = format!(
        "{}:{side}",
        state.settings.lease_namespace.group("lab", run_id)
    );
    let key = lease::LeaseKey::new(group, SEAT)?;
    let url = state.settings.lease_store_url();
    let connect = || lease::connect(url, state.settings.store_timeout());
    let (reports, received) = mpsc::unbounded_channel();
    let arena = Arc::new(Arena {
        run_id,
        side,
        protocol,
        key: key.clone(),
        redis: Arc::new(connect()?),
        db: state.db.clone(),
        started,
        owners: Mutex::new(HashMap::new()),
        reports,
    });
    let recorder = tokio::spawn(record(state.db.clone(), run_id, side, received));

    // B and C start 100 and 200 ms after A, each a little later as the seed draws.
    let mut rng = StdRng::seed_from_u64(scenario.seed);
    let mut servers = Vec::new();
    for (i, name) in ["A", "B", "C"].into_iter().enumerate() {
        let jitter = if i == 0 { 0 } else { rng.random_range(0..=20) };
        let client: Arc<dyn LeaseStore> = if protocol.durable_tokens {
            Arc::new(LeaseClient::new(
                connect()?,
                PgFenceLedger(state.db.clone()),
            ))
        } else {
            Arc::new(
                LeaseClient::new(connect()?, LedgerInRedis(arena.redis.clone()))
                    .with_failover_guard(false),
            )
        };
        let server = Server {
            name,
            start: Duration::from_millis(100 * i as u64 + jitter),
            client,
            fault: if i == 0 { scenario.fault } else { Fault::None },
            pause: scenario.fault_pause(),
        };
        // Connected before the start line, so that a first connection delays no row.
        if let Err(err) = server.client.ping().await {
            tracing::warn!(run_id, "lab server {name}: {err}");
        }
        servers.push(server);
    }
    let servers: Vec<_> = servers
        .into_iter()
        .map(|server| tokio::spawn(server.run(arena.clone())))
        .collect();
    for server in servers {
        server.await?;
    }
    // Every server is done: the recorder ends once it has stored what they sent.
    drop(arena);
    recorder.await?;
    // The lock's keys go with the run (with step 2 off, one never expires).
    let redis: RedisStore = connect()?;
    unsafe_ops::lose_group(&redis, key.group()).await?;
    Ok(())
}

/// Marks each report as it comes ([`Checker`]) and stores it as the side's next row,
/// until every server of the side has dropped its sender.
async fn record(
    db: sqlx::PgPool,
    run_id: i64,
    side: Side,
    mut received: UnboundedReceiver<Report>,
) {
    let mut checker = Checker::default();
    let (mut seq, mut at_ms) = (0, 0);
    while let Some(report) = received.recv().await {
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
}
