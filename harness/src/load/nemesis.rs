//! The nemesis (`load-test nemesis`, `make nemesis`): buyers with several tabs each and
//! bidders work against several `seatlock-lab serve` processes while a fault schedule drawn
//! from a seed hits the real processes, alone and together; every client operation goes
//! into a [history](crate::history), judged afterwards by [the checker](crate::history::check).
//! Jepsen's lock analyses (etcd, Hazelcast) do it this way, with three lock workloads
//! side by side:
//!
//! | workload | servers' strategy | the write | expected |
//! |---|---|---|---|
//! | `unfenced-lease` | `race-lab-unfenced-lease` | checks the lease, pauses, writes | **invalid** (a paused holder sells a seat twice) |
//! | `fenced` | `fenced` (the product) | `NOT sold AND fence_token <= $token` | valid |
//! | `conditional` | `race-lab-conditional` | `UPDATE … WHERE sold = false` | valid |
//! | `auction` | `fenced` (the product) | a bid under the item's bid lock, fenced | valid |
//!
//! The faults ([`FaultKind`]): a server killed (SIGKILL) and started again, a server
//! paused (SIGSTOP), the Redis primary paused, a Sentinel failover that loses the last
//! writes, Redis restarted empty, a server's wall clock moved (libfaketime), every open
//! Postgres connection frozen (half-open). The same seed gives the same schedule
//! ([`schedule`]); what the processes do under it is up to them.
//!
//! Each history is also searched for a linearization, resource by resource, against the
//! fenced row ([`crate::history::partitions`]): a full verdict, `true`, `false` or
//! `unknown` (the search's budget ran out).
//!
//! A run fails when a product workload's history is invalid or not found linearizable,
//! when the unfenced one is *valid* or not found non-linearizable (a checker that never
//! flags the broken workload is broken itself), or when none of the interesting things
//! ([`Sometimes`]) happened.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::header::{HeaderMap, HeaderValue};
use serde::Serialize;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::Mutex;

use seatlock::config::Settings;
use seatlock::failpoint::PAUSE_HEADER;
use seatlock::http::error::Refusal;
use seatlock_lab::{LabSettings, PurchaseStrategy};

use super::report::{escape, html_table, linearizability, markdown_table};
use super::timeline::{self, Lane, Moment};
use crate::history::check::{self as checker, Accepted, Model, Verdict};
use crate::history::linearizability::Linearizable;
use crate::history::partitions::{self, RowsVerdict};
use crate::history::{History, Op, OpKind, Outcome, outcome_of, seat_resource};
use crate::http::page_buyer_id;
use crate::leader::kill_and_restart_leader;
use crate::procs::{ServerProcess, libfaketime};
use crate::sentinel::SentinelTopology;
use crate::{
    DEMO_VENUES, HttpBuyer, TcpProxy, auction_item, authority, check, fresh_database, seed,
};

/// The shape of one run.
#[derive(Debug, Clone)]
pub struct NemesisConfig {
    /// Draws the fault schedule and every client's choices.
    pub seed: u64,
    /// How long clients work and faults are injected.
    pub duration: Duration,
    /// Buyers per seat workload, each with [`NemesisConfig::tabs`] tabs.
    pub buyers: usize,
    /// Tabs per buyer: concurrent clients sharing one session (one holder).
    pub tabs: usize,
    /// Bidders on the auction workload.
    pub bidders: usize,
    /// Server processes per workload (the auction shares the fenced workload's).
    pub servers: usize,
    /// The servers' hold TTL, in ms (short, so leases lapse under pauses).
    pub hold_ttl_ms: u64,
    /// Where the leases are.
    pub store: LeaseBackend,
}

impl Default for NemesisConfig {
    fn default() -> Self {
        NemesisConfig {
            seed: 1,
            duration: Duration::from_secs(180),
            buyers: 4,
            tabs: 2,
            bidders: 3,
            servers: 2,
            hold_ttl_ms: 2_000,
            store: LeaseBackend::Redis,
        }
    }
}

/// What the nemesis does to the processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// SIGKILL a server, start it again after a while (on a new port).
    KillServer,
    /// SIGSTOP a server for a while, then SIGCONT: a holder that stalls.
    PauseServer,
    /// SIGSTOP the Redis primary for less than Sentinel's `down-after`.
    PauseRedis,
    /// Kill the primary after pausing its replica's apply: Sentinel promotes a replica
    /// that misses the last grants. The old primary rejoins, empty, as the replica.
    Failover,
    /// Restart the Redis primary with no data, before Sentinel notices.
    RedisRestartEmpty,
    /// Move one server's wall clock (libfaketime) for a while.
    ClockJump,
    /// Make every open Postgres connection half-open (the harness's proxy).
    FreezePostgres,
    /// On etcd: SIGKILL the leader of the three members, start it again after a while.
    KillEtcdLeader,
    /// On ZooKeeper: SIGKILL the leader of the three members, start it again after a
    /// while.
    #[serde(rename = "kill_zookeeper_leader")]
    KillZooKeeperLeader,
}

/// Where the run keeps its leases (`load-test nemesis --store`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LeaseBackend {
    /// Leases and sessions on Redis: a primary, a replica, three Sentinels.
    Redis,
    /// Leases on a three-member etcd; sessions on a Redis of their own.
    Etcd,
    /// Leases on a three-member ZooKeeper; sessions on a Redis of their own.
    #[serde(rename = "zookeeper")]
    #[value(name = "zookeeper")]
    ZooKeeper,
}

impl LeaseBackend {
    /// `redis`, `etcd` or `zookeeper`, as `--store` takes it.
    pub fn name(self) -> &'static str {
        match self {
            LeaseBackend::Redis => "redis",
            LeaseBackend::Etcd => "etcd",
            LeaseBackend::ZooKeeper => "zookeeper",
        }
    }

    /// The faults a run on this store draws from, in the order the schedule draws.
    pub fn faults(self) -> &'static [FaultKind] {
        match self {
            LeaseBackend::Redis => &FaultKind::ALL,
            LeaseBackend::Etcd => &[
                FaultKind::KillServer,
                FaultKind::PauseServer,
                FaultKind::PauseRedis,
                FaultKind::RedisRestartEmpty,
                FaultKind::ClockJump,
                FaultKind::FreezePostgres,
                FaultKind::KillEtcdLeader,
            ],
            LeaseBackend::ZooKeeper => &[
                FaultKind::KillServer,
                FaultKind::PauseServer,
                FaultKind::PauseRedis,
                FaultKind::RedisRestartEmpty,
                FaultKind::ClockJump,
                FaultKind::FreezePostgres,
                FaultKind::KillZooKeeperLeader,
            ],
        }
    }
}

impl FaultKind {
    /// The kinds of a run on Redis, in the order the schedule draws from.
    pub const ALL: [FaultKind; 7] = [
        FaultKind::KillServer,
        FaultKind::PauseServer,
        FaultKind::PauseRedis,
        FaultKind::Failover,
        FaultKind::RedisRestartEmpty,
        FaultKind::ClockJump,
        FaultKind::FreezePostgres,
    ];

    /// Its name in the report (`kill_server`, …), as the JSON spells it.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KillServer => "kill_server",
            FaultKind::PauseServer => "pause_server",
            FaultKind::PauseRedis => "pause_redis",
            FaultKind::Failover => "failover",
            FaultKind::RedisRestartEmpty => "redis_restart_empty",
            FaultKind::ClockJump => "clock_jump",
            FaultKind::FreezePostgres => "freeze_postgres",
            FaultKind::KillEtcdLeader => "kill_etcd_leader",
            FaultKind::KillZooKeeperLeader => "kill_zookeeper_leader",
        }
    }

    /// Whether it hits one server (then [`PlannedFault::server`] names it).
    fn hits_a_server(self) -> bool {
        matches!(
            self,
            FaultKind::KillServer | FaultKind::PauseServer | FaultKind::ClockJump
        )
    }
}

/// One fault of the schedule, as drawn from the seed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedFault {
    /// What the fault does.
    pub kind: FaultKind,
    /// When it starts, ms on the run's clock (the histories'; the clients start about
    /// 10 s in, once every process is up, and the schedule's first slot 2 s after them).
    pub at_ms: u64,
    /// How long it lasts (a pause, a server's downtime, a moved clock), ms; 0 for one
    /// that is over once done (a failover, a restart, a freeze).
    pub for_ms: u64,
    /// The server it hits (an index over every server of the run), if it hits one.
    pub server: Option<usize>,
    /// A clock jump's libfaketime offset (`+1h`, `-10m`, …).
    pub offset: Option<String>,
}

/// The clock offsets a [`FaultKind::ClockJump`] draws from.
const CLOCK_OFFSETS: [&str; 4] = ["+1h", "-1h", "+10m", "-30s"];

/// The fault schedule of `seed` over `duration`, for `servers` server processes, drawn
/// from `kinds`: a slot every 4 to 9 s from 2 s on (none in the last 3 s), holding one
/// fault, or two together (three slots in ten). Deterministic: the same arguments give
/// the same schedule.
pub fn schedule(
    seed: u64,
    duration: Duration,
    servers: usize,
    kinds: &[FaultKind],
) -> Vec<PlannedFault> {
    let mut rng = StdRng::seed_from_u64(seed);
    let end_ms = duration.as_millis() as u64;
    let mut at_ms = 2_000;
    let mut plan = Vec::new();
    while at_ms + 3_000 <= end_ms {
        let together = if rng.random_bool(0.3) { 2 } else { 1 };
        let mut chosen: Vec<FaultKind> = Vec::new();
        while chosen.len() < together {
            let kind = kinds[rng.random_range(0..kinds.len())];
            if !chosen.contains(&kind) {
                chosen.push(kind);
            }
        }
        for kind in chosen {
            let for_ms = match kind {
                FaultKind::KillServer => rng.random_range(300..1_500),
                FaultKind::PauseServer => rng.random_range(500..4_000),
                FaultKind::PauseRedis => rng.random_range(100..600),
                FaultKind::ClockJump => rng.random_range(2_000..6_000),
                FaultKind::KillEtcdLeader | FaultKind::KillZooKeeperLeader => {
                    rng.random_range(500..3_000)
                }
                FaultKind::Failover | FaultKind::RedisRestartEmpty | FaultKind::FreezePostgres => 0,
            };
            plan.push(PlannedFault {
                kind,
                at_ms,
                for_ms,
                server: kind.hits_a_server().then(|| rng.random_range(0..servers)),
                offset: (kind == FaultKind::ClockJump)
                    .then(|| CLOCK_OFFSETS[rng.random_range(0..CLOCK_OFFSETS.len())].into()),
            });
        }
        at_ms += rng.random_range(4_000..9_000);
    }
    plan
}

/// A fault as it happened: ms on the histories' clock.
#[derive(Debug, Clone, Serialize)]
pub struct Fault {
    /// What the fault did.
    pub kind: FaultKind,
    /// What it hit: `server 3`, `redis primary :PORT`, `postgres`.
    pub target: String,
    /// When it started, ms on the histories' clock.
    pub start_ms: f64,
    /// When it ended, ms on the same clock.
    pub end_ms: f64,
    /// What the nemesis saw: `failover took 2100 ms`, or the error if the fault failed.
    pub note: Option<String>,
}

/// One interesting thing and how often it happened.
#[derive(Debug, Clone, Serialize)]
pub struct Sometimes {
    /// What happened.
    pub name: &'static str,
    /// How many times it happened.
    pub count: usize,
}

/// One workload's result.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadReport {
    /// The workload's name.
    pub name: &'static str,
    /// The servers' `--purchase-strategy`.
    pub strategy: String,
    /// Whether the run needs it valid (false only for `unfenced-lease`).
    pub must_be_valid: bool,
    /// Operations in the workload's history.
    pub operations: usize,
    /// The checker's verdict and, for seats, the database's (one order, one captured
    /// payment each way).
    pub valid: bool,
    /// Writes the resource accepted.
    pub accepted_writes: usize,
    /// Leases granted while another holder's may still have run.
    pub double_grants: usize,
    /// Double grants where the resource accepted the writes of at most one of the two holders.
    pub double_grants_caught: usize,
    /// The lock's anomalies (see [`checker`]), counted.
    pub lock_anomalies: usize,
    /// The first few of them, each with the operations around it.
    pub first_lock_anomalies: Vec<checker::Anomaly>,
    /// The first few violations, each with the operations around it.
    pub violations: Vec<checker::Anomaly>,
    /// Violations found by the database check (money, a double sale), as `kind seat N`.
    pub database_violations: Vec<String>,
    /// Whether the history is linearizable against the fenced row: `true`, `false`, or
    /// `unknown` (a resource's search ran out of budget).
    pub linearizable: Linearizable,
    /// The linearizability search's details: resources, failing ones, steps, unknown
    /// writes settled, the longest partial linearization of a failing resource.
    pub linearizability: RowsVerdict,
    /// How long the linearizability search took, ms.
    pub check_ms: f64,
    /// The history, one operation per line.
    pub history: String,
}

/// `target/nemesis/report.json`.
#[derive(Debug, Clone, Serialize)]
pub struct NemesisReport {
    /// The seed the schedule was drawn from: the same seed, the same run.
    pub seed: u64,
    /// The lease store the servers used.
    pub store: LeaseBackend,
    /// How long the clients ran, s.
    pub seconds: u64,
    /// The faults as drawn from the seed.
    pub schedule: Vec<PlannedFault>,
    /// The faults as they happened.
    pub faults: Vec<Fault>,
    /// Each workload's result.
    pub workloads: Vec<WorkloadReport>,
    /// Interesting things, and how often each happened.
    pub sometimes: Vec<Sometimes>,
    /// Why the run failed; empty when it passed.
    pub failures: Vec<String>,
    /// A timeline window per workload. Not in the JSON.
    #[serde(skip)]
    pub timeline: Vec<Window>,
}

impl NemesisReport {
    /// Whether every promise held (see the module docs).
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// A seat workload's pool: buyers pick among the first few unsold seats, so several
/// always want the same one.
struct SeatPool {
    seats: Vec<i64>,
    /// Indices of seats known sold; the window starts at the first one not in it.
    sold: std::sync::Mutex<BTreeSet<usize>>,
}

/// How many unsold seats buyers choose among at once.
const CONTENDED: usize = 3;

impl SeatPool {
    fn pick(&self, rng: &mut StdRng) -> Option<i64> {
        let sold = self.sold.lock().expect("pool lock");
        let open: Vec<i64> = (0..self.seats.len())
            .filter(|i| !sold.contains(i))
            .take(CONTENDED)
            .map(|i| self.seats[i])
            .collect();
        (!open.is_empty()).then(|| open[rng.random_range(0..open.len())])
    }

    fn mark_sold(&self, seat: i64) {
        if let Some(i) = self.seats.iter().position(|&s| s == seat) {
            self.sold.lock().expect("pool lock").insert(i);
        }
    }

    /// The seats buyers have reached (every one up to the window's end).
    fn touched(&self) -> Vec<i64> {
        let sold = self.sold.lock().expect("pool lock");
        let reached = sold.iter().next_back().map_or(0, |&last| last + 1) + CONTENDED;
        self.seats[..reached.min(self.seats.len())].to_vec()
    }
}

/// One server process the nemesis can kill, pause and restart; its clock is libfaketime's
/// offset file.
struct Slot {
    process: ServerProcess,
    settings: Settings,
    lab: LabSettings,
    clock_file: PathBuf,
}

impl Slot {
    async fn start(
        binary: &Path,
        settings: Settings,
        lab: LabSettings,
        clock_file: PathBuf,
    ) -> anyhow::Result<Slot> {
        std::fs::write(&clock_file, "+0")?;
        let process = start_server(binary, &settings, &lab, &clock_file).await?;
        Ok(Slot {
            process,
            settings,
            lab,
            clock_file,
        })
    }
}

async fn start_server(
    binary: &Path,
    settings: &Settings,
    lab: &LabSettings,
    clock_file: &Path,
) -> anyhow::Result<ServerProcess> {
    let lib = libfaketime()?;
    let file = clock_file.display().to_string();
    let env = [
        ("LD_PRELOAD", lib.as_str()),
        ("FAKETIME_TIMESTAMP_FILE", file.as_str()),
        // Read the offset file every second, so a jump takes effect while it runs.
        ("FAKETIME_CACHE_DURATION", "1"),
        // Sleeps and timeouts keep the real monotonic clock: only the wall clock moves.
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    ServerProcess::start_lab_with_env(binary, settings, lab, &env).await
}

/// The lock store and the Redis of the sessions.
enum LockStore {
    /// Leases and sessions on the topology's primary.
    Sentinel(SentinelTopology),
    /// Leases on etcd, sessions on a Redis of their own.
    Etcd {
        cluster: crate::EtcdCluster,
        sessions: crate::RedisServer,
    },
    /// Leases on ZooKeeper, sessions on a Redis of their own.
    ZooKeeper {
        ensemble: crate::ZooKeeperEnsemble,
        sessions: crate::RedisServer,
    },
}

impl LockStore {
    async fn start(backend: LeaseBackend) -> anyhow::Result<LockStore> {
        Ok(match backend {
            LeaseBackend::Redis => LockStore::Sentinel(SentinelTopology::start().await?),
            LeaseBackend::Etcd => LockStore::Etcd {
                cluster: crate::EtcdCluster::start(3).await?,
                sessions: crate::RedisServer::start().await?,
            },
            LeaseBackend::ZooKeeper => LockStore::ZooKeeper {
                ensemble: crate::ZooKeeperEnsemble::start(3).await?,
                sessions: crate::RedisServer::start().await?,
            },
        })
    }

    /// Before a fault on Redis: the primary is the one the Sentinels name now.
    async fn settle(&mut self) -> anyhow::Result<()> {
        match self {
            LockStore::Sentinel(topology) => topology.follow_sentinels().await,
            LockStore::Etcd { .. } | LockStore::ZooKeeper { .. } => Ok(()),
        }
    }

    /// The Redis the nemesis stops and restarts: the one holding the sessions.
    fn redis(&self) -> &crate::RedisServer {
        match self {
            LockStore::Sentinel(topology) => &topology.primary,
            LockStore::Etcd { sessions, .. } | LockStore::ZooKeeper { sessions, .. } => sessions,
        }
    }

    /// Settings over `database_url` whose sessions and leases are in this store.
    fn settings(&self, database_url: &str) -> Settings {
        match self {
            LockStore::Sentinel(topology) => crate::test_settings(database_url, &topology.url()),
            LockStore::Etcd { cluster, sessions } => {
                let mut settings = crate::test_settings(database_url, &sessions.url());
                settings.lease_store_url = Some(cluster.url());
                settings
            }
            LockStore::ZooKeeper { ensemble, sessions } => {
                let mut settings = crate::test_settings(database_url, &sessions.url());
                settings.lease_store_url = Some(ensemble.url());
                settings
            }
        }
    }
}

/// Everything a run shares: the processes the nemesis hits and the clients' addresses.
struct Stage {
    binary: PathBuf,
    store: Mutex<LockStore>,
    slots: Vec<Mutex<Slot>>,
    /// Each slot's current address (a restarted server listens on a new port).
    addresses: std::sync::RwLock<Vec<String>>,
    postgres: TcpProxy,
    /// The clock every history and fault is timed on.
    clock: History,
}

impl Stage {
    fn address(&self, slot: usize) -> String {
        self.addresses.read().expect("addresses lock")[slot].clone()
    }

    /// Runs one fault; returns its target and a note.
    async fn inflict(&self, fault: &PlannedFault) -> anyhow::Result<(String, Option<String>)> {
        let hold = Duration::from_millis(fault.for_ms);
        match fault.kind {
            FaultKind::KillServer | FaultKind::PauseServer | FaultKind::ClockJump => {
                let index = fault.server.context("a server fault names its server")?;
                let mut slot = self.slots[index].lock().await;
                let target = format!("server {index}");
                match fault.kind {
                    FaultKind::KillServer => {
                        slot.process.kill().await?;
                        tokio::time::sleep(hold).await;
                        slot.process =
                            start_server(&self.binary, &slot.settings, &slot.lab, &slot.clock_file)
                                .await?;
                        self.addresses.write().expect("addresses lock")[index] =
                            slot.process.address.clone();
                    }
                    FaultKind::PauseServer => {
                        slot.process.signal("STOP")?;
                        tokio::time::sleep(hold).await;
                        slot.process.signal("CONT")?;
                    }
                    _ => {
                        let offset = fault.offset.as_deref().unwrap_or("+1h");
                        std::fs::write(&slot.clock_file, offset)?;
                        tokio::time::sleep(hold).await;
                        std::fs::write(&slot.clock_file, "+0")?;
                        return Ok((target, Some(format!("clock {offset}"))));
                    }
                }
                Ok((target, None))
            }
            FaultKind::PauseRedis => {
                let mut store = self.store.lock().await;
                store.settle().await?;
                let redis = store.redis();
                redis.signal("STOP")?;
                tokio::time::sleep(hold).await;
                redis.signal("CONT")?;
                Ok((format!("redis :{}", redis.port), None))
            }
            FaultKind::RedisRestartEmpty => {
                let mut store = self.store.lock().await;
                store.settle().await?;
                let port = store.redis().port;
                match &mut *store {
                    LockStore::Sentinel(topology) => topology.restart_primary_empty().await?,
                    LockStore::Etcd { sessions, .. } | LockStore::ZooKeeper { sessions, .. } => {
                        sessions.restart_empty().await?
                    }
                }
                Ok((format!("redis :{port}"), None))
            }
            FaultKind::KillEtcdLeader | FaultKind::KillZooKeeperLeader => {
                let mut store = self.store.lock().await;
                let (name, leader) = match (&mut *store, fault.kind) {
                    (LockStore::Etcd { cluster, .. }, FaultKind::KillEtcdLeader) => {
                        ("etcd", kill_and_restart_leader(cluster, hold).await?)
                    }
                    (LockStore::ZooKeeper { ensemble, .. }, FaultKind::KillZooKeeperLeader) => {
                        ("zookeeper", kill_and_restart_leader(ensemble, hold).await?)
                    }
                    _ => anyhow::bail!("no such cluster in this run: {}", fault.kind.name()),
                };
                Ok((format!("{name} member {leader}"), None))
            }
            FaultKind::Failover => {
                let mut store = self.store.lock().await;
                let LockStore::Sentinel(topology) = &mut *store else {
                    anyhow::bail!("no Sentinel in a run on etcd or ZooKeeper");
                };
                topology.follow_sentinels().await?;
                let target = format!("redis primary :{}", topology.primary.port);
                topology.lose_next_write().await?;
                // The writes of the next moment reach the primary and not the replica.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let took = topology.fail_over().await?;
                topology.rejoin().await?;
                Ok((
                    target,
                    Some(format!("failover took {} ms", took.as_millis())),
                ))
            }
            FaultKind::FreezePostgres => {
                self.postgres.freeze_open_connections();
                Ok(("postgres".into(), None))
            }
        }
    }

    /// Runs `plan` slot by slot (a slot's faults together); returns what happened.
    async fn nemesis(self: Arc<Self>, plan: Vec<PlannedFault>) -> Vec<Fault> {
        let mut faults = Vec::new();
        for slot in plan.chunk_by(|a, b| a.at_ms == b.at_ms) {
            let wait = slot[0].at_ms as f64 - self.clock.now_ms();
            if wait > 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(wait / 1e3)).await;
            }
            let runs = slot.iter().cloned().map(|fault| {
                let stage = self.clone();
                tokio::spawn(async move {
                    let start_ms = stage.clock.now_ms();
                    let done = stage.inflict(&fault).await;
                    let (target, note) = match done {
                        Ok(done) => done,
                        Err(e) => (
                            fault.server.map_or("?".into(), |s| format!("server {s}")),
                            Some(format!("the fault failed: {e:#}")),
                        ),
                    };
                    Fault {
                        kind: fault.kind,
                        target,
                        start_ms,
                        end_ms: stage.clock.now_ms(),
                        note,
                    }
                })
            });
            for (run, fault) in runs.collect::<Vec<_>>().into_iter().zip(slot) {
                faults.push(run.await.unwrap_or_else(|panic| Fault {
                    kind: fault.kind,
                    target: "?".into(),
                    start_ms: fault.at_ms as f64,
                    end_ms: self.clock.now_ms(),
                    note: Some(format!("the fault failed: it panicked: {panic}")),
                }));
            }
        }
        faults
    }
}

/// A seat workload: its servers (slot indices), event, pool and history.
struct SeatWorkload {
    name: &'static str,
    strategy: PurchaseStrategy,
    slots: Vec<usize>,
    event: i64,
    pool: SeatPool,
    history: History,
}

/// What a tab needs to know about its buyer and workload.
struct Tab {
    process: String,
    holder: String,
    http: HttpBuyer,
    /// The same browser, asking the server to stall its confirm past the hold's TTL.
    stalling: HttpBuyer,
    stall: HeaderMap,
    rng: StdRng,
}

impl Tab {
    /// GETs the event page `page`; returns its body. The page names the buyer the tab now
    /// is: the session may have been lost with Redis (or the other tab's reload made a new
    /// one), and what the tab does next is that buyer's.
    async fn open(&mut self, page: &str) -> Option<String> {
        let body = self.http.get(page).await.ok()?.body;
        if let Some(holder) = page_buyer_id(&body)
            && holder != self.holder
        {
            self.holder = holder;
            self.stalling = self.http.another_tab(self.stall.clone());
        }
        Some(body)
    }

    /// What a buyer does on "this form has expired" or "you do not hold this seat" (a
    /// 403: the session was lost with Redis): reloads the page.
    async fn reload_if_refused(&mut self, reason: Option<&str>, page: &str) {
        if reason == Some("403") {
            self.open(page).await;
        }
    }
}

impl SeatWorkload {
    /// One tab's loop until `until_ms`: pick a seat, hold it (lease workloads), read the
    /// hold's token from the page, then release it or buy it, now and then stalled past
    /// the lease or hung up on.
    async fn tab(&self, stage: &Stage, mut tab: Tab, until_ms: f64) {
        let lease = self.strategy.uses_lease();
        while stage.clock.now_ms() < until_ms {
            tokio::time::sleep(Duration::from_millis(tab.rng.random_range(20..150))).await;
            let Some(seat) = self.pool.pick(&mut tab.rng) else {
                continue;
            };
            let base = stage.address(self.slots[tab.rng.random_range(0..self.slots.len())]);
            let url = |action: &str| format!("{base}/events/{}/seats/{seat}/{action}", self.event);
            let page_url = format!("{base}/events/{}", self.event);
            let resource = seat_resource(seat);
            let mut token = None;
            if lease {
                let acquire =
                    self.history
                        .invoke(&tab.process, &tab.holder, OpKind::Acquire, &resource);
                let reply = tab.http.post(&url("hold"), &[]).await;
                let (outcome, reason) = outcome_of(&reply);
                if outcome != Outcome::Ok {
                    acquire.complete(outcome, reason.clone());
                    if reason.as_deref() == Some(Refusal::AlreadySold.code()) {
                        self.pool.mark_sold(seat);
                    }
                    tab.reload_if_refused(reason.as_deref(), &page_url).await;
                    continue;
                }
                // The 303 leads back to the map, which shows the hold's token.
                let page = tab.open(&page_url).await;
                token = page.and_then(|p| crate::http::hold_token_of(&p, seat));
                acquire.granted(token);
                if tab.rng.random_bool(0.1) {
                    let release = self
                        .history
                        .invoke(&tab.process, &tab.holder, OpKind::Release, &resource)
                        .token(token);
                    let (outcome, reason) = outcome_of(&tab.http.post(&url("release"), &[]).await);
                    release.complete(outcome, reason.clone());
                    tab.reload_if_refused(reason.as_deref(), &page_url).await;
                    continue;
                }
            }
            let write = self
                .history
                .invoke(&tab.process, &tab.holder, OpKind::Write, &resource)
                .token(token.filter(|_| self.strategy == PurchaseStrategy::Fenced))
                .value("sold");
            let roll = tab.rng.random_range(0..100);
            let client = if roll < 20 { &tab.stalling } else { &tab.http };
            let confirm_url = url("confirm");
            let confirm = client.post(&confirm_url, &[]);
            let (outcome, reason) = if roll >= 95 {
                // Hang up: the tab closes before the answer.
                let patience = Duration::from_millis(tab.rng.random_range(5..60));
                match tokio::time::timeout(patience, confirm).await {
                    Ok(reply) => outcome_of(&reply),
                    Err(_) => (Outcome::Unknown, Some(HUNG_UP.into())),
                }
            } else {
                outcome_of(&confirm.await)
            };
            let sold =
                outcome == Outcome::Ok || reason.as_deref() == Some(Refusal::AlreadySold.code());
            write.complete(outcome, reason.clone());
            if sold {
                self.pool.mark_sold(seat);
            }
            tab.reload_if_refused(reason.as_deref(), &page_url).await;
        }
    }
}

/// A folder of the run's own (the servers' clock files), removed however the run ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(prefix: &str) -> anyhow::Result<TempDir> {
        let dir = std::env::temp_dir().join(crate::unique_name(prefix));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The reason of a write whose client closed before the answer.
pub const HUNG_UP: &str = "hung up";

/// The auction workload: bidders stating rising hidden maxima (proxy bidding) on one
/// item, on the fenced servers.
struct AuctionWorkload {
    slots: Vec<usize>,
    item: i64,
    history: History,
    /// The next maximum, in cents: a bidder states a maximum above the last one sent, or
    /// now and then the last one itself (`last_cents`: equal maxima, the earlier leads).
    next_cents: AtomicU64,
    /// The last maximum drawn from `next_cents`.
    last_cents: AtomicU64,
    /// A page that names its buyer (the event page: the item page does not), for a
    /// bidder to open and to reload when its session is lost.
    page: String,
}

impl AuctionWorkload {
    async fn bidder(&self, stage: &Stage, mut tab: Tab, until_ms: f64) {
        let resource = format!("item {}", self.item);
        while stage.clock.now_ms() < until_ms {
            tokio::time::sleep(Duration::from_millis(tab.rng.random_range(50..250))).await;
            let base = stage.address(self.slots[tab.rng.random_range(0..self.slots.len())]);
            let cents = if tab.rng.random_bool(0.2) {
                // The last maximum sent (by another bidder, most likely): an equal one.
                self.last_cents.load(Ordering::SeqCst)
            } else {
                let cents = self
                    .next_cents
                    .fetch_add(tab.rng.random_range(100..300), Ordering::SeqCst);
                self.last_cents.store(cents, Ordering::SeqCst);
                cents
            };
            let amount = format!("{}.{:02}", cents / 100, cents % 100);
            let client = if tab.rng.random_bool(0.2) {
                &tab.stalling
            } else {
                &tab.http
            };
            let write = self
                .history
                .invoke(&tab.process, &tab.holder, OpKind::Write, &resource)
                .value(cents.to_string());
            let reply = client
                .post(
                    &format!("{base}/auctions/{}/bids", self.item),
                    &[("amount", &amount)],
                )
                .await;
            let (outcome, reason) = outcome_of(&reply);
            write.complete(outcome, reason.clone());
            tab.reload_if_refused(reason.as_deref(), &self.page).await;
        }
    }
}

/// A buyer's tabs: opens the event page (the session and its buyer id) on `base`, retrying
/// while the server is down, and returns `tabs` clients sharing that session.
async fn open_tabs(
    page: &str,
    name: &str,
    tabs: usize,
    stall_ms: u64,
    rng: &mut StdRng,
) -> anyhow::Result<Vec<Tab>> {
    let mut http = HttpBuyer::new();
    let reply = http.get(page).await?;
    let holder = page_buyer_id(&reply.body).context("the page names its buyer")?;
    let mut stall = HeaderMap::new();
    stall.insert(PAUSE_HEADER, HeaderValue::from(stall_ms));
    Ok((0..tabs)
        .map(|t| Tab {
            process: format!("{name}/tab{t}"),
            holder: holder.clone(),
            stalling: http.another_tab(stall.clone()),
            http: http.another_tab(HeaderMap::new()),
            stall: stall.clone(),
            rng: StdRng::seed_from_u64(rng.random()),
        })
        .collect())
}

/// The names of the seat workloads, their strategies, and whether they must be valid.
const SEAT_WORKLOADS: [(&str, PurchaseStrategy, bool); 3] = [
    (
        "unfenced-lease",
        PurchaseStrategy::RaceLabUnfencedLease,
        false,
    ),
    ("fenced", PurchaseStrategy::Fenced, true),
    ("conditional", PurchaseStrategy::RaceLabConditional, true),
];

/// Runs the nemesis: a Sentinel topology, a fresh database under `admin_url` (behind a
/// proxy the nemesis can freeze), `config.servers` servers per seat workload, clients for
/// `config.duration` under [`schedule`], then the checks. `out` receives the histories.
/// Errors: a process that would not start, a database error; a broken promise is not an
/// error but a failed report ([`NemesisReport::passed`]).
pub async fn run(
    config: &NemesisConfig,
    binary: &Path,
    admin_url: &str,
    out: &Path,
    progress: &indicatif::ProgressBar,
) -> anyhow::Result<NemesisReport> {
    progress.set_message("starting Redis, Sentinels, Postgres and servers");
    let store = LockStore::start(config.store).await?;
    let url = fresh_database(admin_url).await?;
    seed(&url, DEMO_VENUES).await?;
    let db = PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await?;
    let postgres = TcpProxy::start(
        tokio::net::lookup_host(authority(&url)?)
            .await?
            .next()
            .context("the database host resolves")?,
    )
    .await?;
    let proxied_url = url.replacen(&authority(&url)?, &postgres.address.to_string(), 1);
    let mut rng = StdRng::seed_from_u64(config.seed);
    let clock_dir = TempDir::new("seatlock-nemesis")?;

    let mut slots = Vec::new();
    let mut seat_workloads = Vec::new();
    let clock = History::new();
    for (name, strategy, _) in SEAT_WORKLOADS {
        let (event, seats) =
            super::race::create_race_event(&db, &format!("Nemesis: {name}")).await?;
        let mut settings = store.settings(&proxied_url);
        settings.hold_ttl_ms = config.hold_ttl_ms;
        settings.bid_lock_ttl_ms = config.hold_ttl_ms;
        let mut indices = Vec::new();
        for _ in 0..config.servers {
            let file = clock_dir.0.join(format!("clock-{}", slots.len()));
            indices.push(slots.len());
            let lab = LabSettings {
                purchase_strategy: strategy,
                ..LabSettings::enabled()
            };
            slots.push(Slot::start(binary, settings.clone(), lab, file).await?);
        }
        seat_workloads.push(SeatWorkload {
            name,
            strategy,
            slots: indices,
            event,
            pool: SeatPool {
                seats,
                sold: Default::default(),
            },
            history: clock.sharing_clock(),
        });
    }
    let item = seatlock::auction::queries::insert_item(&db, &auction_item("Nemesis poster"))
        .await?
        .context("the nemesis's auction item was not inserted")?;
    let auction = AuctionWorkload {
        slots: seat_workloads[1].slots.clone(),
        item,
        history: clock.sharing_clock(),
        next_cents: AtomicU64::new(1_100),
        last_cents: AtomicU64::new(1_100),
        page: format!(
            "{}/events/{}",
            slots[seat_workloads[1].slots[0]].process.address, seat_workloads[1].event
        ),
    };
    let addresses = slots.iter().map(|s| s.process.address.clone()).collect();
    let stage = Arc::new(Stage {
        binary: binary.to_owned(),
        store: Mutex::new(store),
        slots: slots.into_iter().map(Mutex::new).collect(),
        addresses: std::sync::RwLock::new(addresses),
        postgres,
        clock,
    });

    // Clients open their pages before the clock starts counting the run.
    // Past the lease by a second and a half more than the TTL: time for the next buyer
    // to hold and buy before the stalled write lands (the fence refuses it then).
    let stall_ms = config.hold_ttl_ms * 2 + 1_500;
    let mut tabs: Vec<Vec<Vec<Tab>>> = Vec::new();
    for w in &seat_workloads {
        let page = format!("{}/events/{}", stage.address(w.slots[0]), w.event);
        let mut buyers = Vec::new();
        for b in 0..config.buyers {
            let name = format!("{} buyer {b}", w.name);
            buyers.push(open_tabs(&page, &name, config.tabs, stall_ms, &mut rng).await?);
        }
        tabs.push(buyers);
    }
    let mut bidders = Vec::new();
    for b in 0..config.bidders {
        let name = format!("auction bidder {b}");
        bidders.extend(open_tabs(&auction.page, &name, 1, stall_ms, &mut rng).await?);
    }

    let plan = schedule(
        config.seed,
        config.duration,
        stage.slots.len(),
        config.store.faults(),
    );
    progress.set_message(format!(
        "seed {}: {} faults over {} s",
        config.seed,
        plan.len(),
        config.duration.as_secs()
    ));
    let start_ms = stage.clock.now_ms();
    let plan: Vec<PlannedFault> = plan
        .into_iter()
        .map(|f| PlannedFault {
            at_ms: f.at_ms + start_ms as u64,
            ..f
        })
        .collect();
    let until_ms = start_ms + config.duration.as_secs_f64() * 1e3;
    let nemesis = tokio::spawn(stage.clone().nemesis(plan.clone()));
    let ticker = {
        let progress = progress.clone();
        let clock = stage.clock.clone();
        tokio::spawn(async move {
            loop {
                progress.set_position(((clock.now_ms() - start_ms) / 1e3) as u64);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let seat_workloads = Arc::new(seat_workloads);
    let auction = Arc::new(auction);
    let mut clients = Vec::new();
    for (w, buyers) in tabs.into_iter().enumerate() {
        for tab in buyers.into_iter().flatten() {
            let (stage, workloads) = (stage.clone(), seat_workloads.clone());
            clients.push(tokio::spawn(async move {
                workloads[w].tab(&stage, tab, until_ms).await
            }));
        }
    }
    for tab in bidders {
        let (stage, auction) = (stage.clone(), auction.clone());
        clients.push(tokio::spawn(async move {
            auction.bidder(&stage, tab, until_ms).await
        }));
    }
    for client in clients {
        client.await?;
    }
    let faults = nemesis.await?;
    ticker.abort();
    progress.set_message("checking the histories");
    // Purchases run to completion on the servers even when their buyer hung up: give the
    // last ones their deadline before reading what the resource accepted.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let mut workloads = Vec::new();
    let ttl_ms = config.hold_ttl_ms as f64;
    for (w, (_, _, must_be_valid)) in seat_workloads.iter().zip(SEAT_WORKLOADS) {
        let report = check::check(&db, w.event).await?;
        w.history.read_seats(&report, &w.pool.touched());
        let model = Model {
            ttl_ms,
            fenced: w.strategy == PurchaseStrategy::Fenced,
            exclusive: true,
            proxy_increment: None,
        };
        let database = report
            .violations
            .iter()
            .map(|v| format!("{} seat {}", v.kind, v.seat_id))
            .collect();
        workloads.push(judge(
            w.name,
            w.strategy,
            must_be_valid,
            &w.history,
            model,
            database,
            out,
        )?);
    }
    read_bids(&db, &auction).await?;
    let model = Model {
        ttl_ms: config.hold_ttl_ms as f64,
        fenced: true,
        exclusive: false,
        proxy_increment: Some(seatlock::auction::increments::increment_cents),
    };
    workloads.push(judge(
        "auction",
        PurchaseStrategy::Fenced,
        true,
        &auction.history,
        model,
        Vec::new(),
        out,
    )?);

    let histories: Vec<(&str, Vec<Op>)> = seat_workloads
        .iter()
        .map(|w| (w.name, w.history.ops()))
        .chain(std::iter::once(("auction", auction.history.ops())))
        .collect();
    let sometimes = sometimes(&histories, &faults, &workloads, ttl_ms);
    let failures = failures(&workloads, &sometimes, &faults);
    let timeline = histories
        .iter()
        .zip(&workloads)
        .map(|((_, ops), report)| window(ops, report, &faults, ttl_ms))
        .collect();
    Ok(NemesisReport {
        seed: config.seed,
        store: config.store,
        seconds: config.duration.as_secs(),
        schedule: plan,
        faults,
        workloads,
        sometimes,
        failures,
        timeline,
    })
}

/// The checker's verdict on one workload's history, written to `out`.
fn judge(
    name: &'static str,
    strategy: PurchaseStrategy,
    must_be_valid: bool,
    history: &History,
    model: Model,
    database_violations: Vec<String>,
    out: &Path,
) -> anyhow::Result<WorkloadReport> {
    let ops = history.ops();
    let file = out.join(format!("history-{name}.jsonl"));
    history.write_jsonl(&file)?;
    let verdict: Verdict = checker::check(&ops, model);
    // The product's confirm answers a buyer's second submit with its order; the race
    // lab's writes do not.
    let answers_own_sale = strategy == PurchaseStrategy::Fenced;
    let (rows, check_ms) = linearizability(&ops, model.exclusive, answers_own_sale);
    let accepted_writes = ops
        .iter()
        .filter(|o| o.op == OpKind::Read)
        .map(|o| checker::parse_accepted(o.value.as_deref().unwrap_or_default()).len())
        .sum();
    Ok(WorkloadReport {
        name,
        strategy: strategy.flag_value(),
        must_be_valid,
        operations: verdict.operations,
        valid: verdict.valid && database_violations.is_empty(),
        accepted_writes,
        double_grants: verdict.double_grants,
        double_grants_caught: verdict.double_grants_caught,
        lock_anomalies: verdict.lock_anomalies.len(),
        first_lock_anomalies: verdict.lock_anomalies.iter().take(3).cloned().collect(),
        violations: verdict.violations.into_iter().take(3).collect(),
        database_violations,
        linearizable: rows.linearizable,
        linearizability: rows,
        check_ms,
        history: file.display().to_string(),
    })
}

/// The auction item's final read: every accepted bid, in the order the item took them.
async fn read_bids(db: &PgPool, auction: &AuctionWorkload) -> anyhow::Result<()> {
    // In the order the item took them: `id` is drawn by the INSERT, under the item's row
    // lock (`created_at` is the transaction's start, and a stalled bid starts early).
    // The bidders' own rows: the automatic ones the site placed for a leader are no
    // client's write.
    let bids: Vec<(String, Option<i64>, i64, i64)> = sqlx::query_as(
        "SELECT bidder_id, fence_token, max_cents, price_cents FROM bids
          WHERE item_id = $1 AND NOT automatic ORDER BY id",
    )
    .bind(auction.item)
    .fetch_all(db)
    .await?;
    // Each bid's maximum tells one bidder's bids apart (a bidder sends each maximum once,
    // but for an equal maximum sent as another bidder's last); the price after it is
    // judged by the proxy rule.
    let accepted: Vec<Accepted> = bids
        .into_iter()
        .map(|(holder, token, max_cents, price_cents)| Accepted {
            value: Some(max_cents.to_string()),
            price_cents: Some(price_cents),
            ..Accepted::of(&holder, token)
        })
        .collect();
    auction
        .history
        .read_accepted(&format!("item {}", auction.item), &accepted);
    Ok(())
}

/// How often each interesting thing happened.
fn sometimes(
    histories: &[(&str, Vec<Op>)],
    faults: &[Fault],
    workloads: &[WorkloadReport],
    ttl_ms: f64,
) -> Vec<Sometimes> {
    let writes = || {
        histories
            .iter()
            .filter(|(name, _)| *name != "unfenced-lease")
            .flat_map(|(_, ops)| ops.iter())
            .filter(|o| o.op == OpKind::Write)
    };
    let refused = |codes: &[&str]| {
        writes()
            .filter(|o| o.outcome == Outcome::Fail)
            .filter(|o| o.reason.as_deref().is_some_and(|r| codes.contains(&r)))
            .count()
    };
    let happened = |kind| {
        faults
            .iter()
            .filter(|f| {
                f.kind == kind
                    && !f
                        .note
                        .as_deref()
                        .unwrap_or("")
                        .starts_with("the fault failed")
            })
            .count()
    };
    let fenced = histories
        .iter()
        .find(|(name, _)| *name == "fenced")
        .map(|(_, ops)| ops.as_slice())
        .unwrap_or_default();
    vec![
        Sometimes {
            name: "stale_write_refused_by_the_fence",
            count: refused(&[Refusal::StaleToken.code(), Refusal::StaleBidLock.code()]),
        },
        Sometimes {
            name: "lease_lost_with_the_store",
            count: leases_lost_early(fenced, ttl_ms),
        },
        Sometimes {
            name: "hold_granted_twice_and_caught",
            count: workloads
                .iter()
                .filter(|w| w.must_be_valid)
                .map(|w| w.double_grants_caught)
                .sum(),
        },
        Sometimes {
            name: "failover",
            count: happened(FaultKind::Failover),
        },
        Sometimes {
            name: "redis_restarted_empty",
            count: happened(FaultKind::RedisRestartEmpty),
        },
        Sometimes {
            name: "buyer_hung_up",
            count: writes()
                .filter(|o| o.reason.as_deref() == Some(HUNG_UP))
                .count(),
        },
        Sometimes {
            name: "answer_lost",
            count: writes()
                .filter(|o| o.outcome == Outcome::Unknown && o.reason.as_deref() != Some(HUNG_UP))
                .count(),
        },
    ]
}

/// Writes refused as `expired` although they were answered sooner than a TTL after their
/// hold was sent: the store forgot the lease (a restart, a failover) while it still ran.
fn leases_lost_early(ops: &[Op], ttl_ms: f64) -> usize {
    ops.iter()
        .filter(|w| {
            w.op == OpKind::Write
                && w.outcome == Outcome::Fail
                && w.reason.as_deref() == Some(Refusal::HoldExpired.code())
        })
        .filter(|w| {
            ops.iter()
                .filter(|a| {
                    a.op == OpKind::Acquire
                        && a.outcome == Outcome::Ok
                        && a.process == w.process
                        && a.resource == w.resource
                        && a.complete_ms <= w.invoke_ms
                })
                .map(|a| a.invoke_ms)
                .fold(None, |last: Option<f64>, t| {
                    Some(last.map_or(t, |l| l.max(t)))
                })
                .is_some_and(|sent| w.complete_ms - sent < ttl_ms)
        })
        .count()
}

/// Why the run failed, if it did (see the module docs).
fn failures(
    workloads: &[WorkloadReport],
    sometimes: &[Sometimes],
    faults: &[Fault],
) -> Vec<String> {
    let mut failures = Vec::new();
    for w in workloads {
        match (w.must_be_valid, w.valid) {
            (true, false) => failures.push(format!("workload {} is invalid", w.name)),
            (false, true) => failures.push(format!(
                "workload {} is valid: the checker never flagged the broken workload",
                w.name
            )),
            _ => {}
        }
        let expected = if w.must_be_valid {
            Linearizable::True
        } else {
            Linearizable::False
        };
        if w.linearizable != expected {
            failures.push(format!(
                "workload {} is linearizable: {}, expected {}",
                w.name,
                w.linearizable.name(),
                expected.name()
            ));
        }
        if w.operations == 0 {
            failures.push(format!("workload {} ran no operation", w.name));
        }
    }
    // The clients' own (a hang-up, an answer lost) nearly always happen: the store's are
    // what the faults are for.
    let mut of_the_store = sometimes
        .iter()
        .filter(|s| !matches!(s.name, "buyer_hung_up" | "answer_lost"));
    if of_the_store.all(|s| s.count == 0) {
        failures.push(
            "none of the interesting things happened: no stale write refused, no lease lost, \
             no double grant caught, no failover, no restart"
                .into(),
        );
    }
    for f in faults {
        if let Some(note) = f
            .note
            .as_deref()
            .filter(|n| n.starts_with("the fault failed"))
        {
            failures.push(format!("{} at {:.0} ms: {note}", f.kind.name(), f.start_ms));
        }
    }
    failures
}

/// A stretch of one workload's history for the report's timeline.
#[derive(Debug, Clone)]
pub struct Window {
    /// The workload the stretch is of.
    pub workload: String,
    /// Where it starts and ends, ms on the run's clock.
    pub from_ms: f64,
    /// Where the stretch ends, ms on the same clock.
    pub to_ms: f64,
    /// What it is centred on: the first violation, else the first failover or restart.
    pub around: String,
    /// The timeline's lanes.
    pub lanes: Vec<Lane>,
    /// The faults' moments in the stretch.
    pub moments: Vec<Moment>,
}

/// How much of the run a timeline shows, in ms: a few TTLs, readable.
const WINDOW_MS: f64 = 10_000.0;

/// The timeline window of one workload: ten seconds around its first violation (else the
/// first failover or restart, else the first fault); one lane per grant (per holder's
/// writes on a lock-free workload) of the resources written in it, the violation's first,
/// at most 14; the faults that began in it.
fn window(ops: &[Op], report: &WorkloadReport, faults: &[Fault], ttl_ms: f64) -> Window {
    let violation = report.violations.first();
    let shake = faults.iter().find(|f| {
        matches!(
            f.kind,
            FaultKind::Failover
                | FaultKind::RedisRestartEmpty
                | FaultKind::KillEtcdLeader
                | FaultKind::KillZooKeeperLeader
        )
    });
    let (focus, around) = match (violation, shake.or(faults.first())) {
        (Some(v), _) => (
            v.ops.iter().map(|o| o.invoke_ms).fold(f64::MAX, f64::min),
            format!("the first violation, {} on {}", v.kind, v.resource),
        ),
        (None, Some(f)) => (f.start_ms, format!("{} of {}", f.kind.name(), f.target)),
        (None, None) => (0.0, "the start".into()),
    };
    let from_ms = (focus - WINDOW_MS * 0.3).max(0.0);
    let to_ms = from_ms + WINDOW_MS;
    let inside = |o: &&Op| o.process != "checker" && o.invoke_ms >= from_ms && o.invoke_ms <= to_ms;
    // A write in the window may be under a grant made before it: the lease still ran.
    let in_view = |o: &&Op| {
        inside(o)
            || (o.op == OpKind::Acquire
                && o.outcome == Outcome::Ok
                && o.complete_ms + ttl_ms >= from_ms
                && o.invoke_ms <= to_ms)
    };
    let flagged = violation.map(|v| v.resource.as_str());
    let mut resources: Vec<&str> = Vec::new();
    for op in ops.iter().filter(inside).filter(|o| o.op == OpKind::Write) {
        if !resources.contains(&op.resource.as_str()) {
            resources.push(&op.resource);
        }
    }
    resources.sort_by_key(|r| Some(*r) != flagged);
    let mut lanes = Vec::new();
    for resource in resources {
        let mine: Vec<&Op> = ops
            .iter()
            .filter(in_view)
            .filter(|o| o.resource == resource)
            .collect();
        let writes_of = |holder: &str, after: f64| -> Vec<(f64, bool)> {
            mine.iter()
                .filter(|o| o.holder == holder && o.op == OpKind::Write && o.invoke_ms >= after)
                .filter(|o| o.outcome != Outcome::Unknown)
                .map(|o| (o.complete_ms, o.outcome == Outcome::Ok))
                .collect()
        };
        let grants: Vec<&&Op> = mine
            .iter()
            .filter(|o| o.op == OpKind::Acquire && o.outcome == Outcome::Ok)
            .collect();
        let short = |holder: &str| holder.chars().take(8).collect::<String>();
        if grants.is_empty() {
            let mut holders: Vec<&str> = mine.iter().map(|o| o.holder.as_str()).collect();
            holders.sort_unstable();
            holders.dedup();
            for holder in holders {
                let writes = writes_of(holder, from_ms);
                let Some(&(first, _)) = writes.first() else {
                    continue;
                };
                lanes.push(Lane {
                    resource: resource.into(),
                    holder: short(holder),
                    lease_ms: (first, first),
                    fencing_token: None,
                    writes,
                });
            }
        }
        for (i, grant) in grants.iter().enumerate() {
            // A second tab's grant of the same lease is the same lane.
            if grants[..i]
                .iter()
                .any(|g| g.holder == grant.holder && g.fencing_token == grant.fencing_token)
            {
                continue;
            }
            let mut writes = writes_of(&grant.holder, grant.invoke_ms);
            if let Some(next) = grants[i + 1..]
                .iter()
                .find(|g| g.holder == grant.holder && g.fencing_token != grant.fencing_token)
            {
                writes.retain(|w| w.0 < next.invoke_ms);
            }
            lanes.push(Lane {
                resource: resource.into(),
                holder: short(&grant.holder),
                lease_ms: (grant.complete_ms, grant.complete_ms + ttl_ms),
                fencing_token: grant.fencing_token,
                writes,
            });
        }
        if lanes.len() >= 14 {
            lanes.truncate(14);
            break;
        }
    }
    let moments = faults
        .iter()
        .filter(|f| f.start_ms >= from_ms && f.start_ms <= to_ms)
        .map(|f| (f.start_ms, format!("{} {}", f.kind.name(), f.target)))
        .collect();
    Window {
        workload: report.name.into(),
        from_ms,
        to_ms,
        around,
        lanes,
        moments,
    }
}

const HEADER: [&str; 10] = [
    "workload",
    "strategy",
    "operations",
    "accepted writes",
    "double grants",
    "caught",
    "valid",
    "linearizable",
    "check ms",
    "expected",
];

fn cells(w: &WorkloadReport) -> [String; 10] {
    [
        w.name.into(),
        w.strategy.clone(),
        w.operations.to_string(),
        w.accepted_writes.to_string(),
        w.double_grants.to_string(),
        w.double_grants_caught.to_string(),
        w.valid.to_string(),
        w.linearizable.name().into(),
        format!("{:.1}", w.check_ms),
        if w.must_be_valid { "valid" } else { "invalid" }.into(),
    ]
}

/// The workloads and the sometimes list as Markdown.
pub fn table(report: &NemesisReport) -> String {
    format!(
        "seed {}, {} s, {} faults\n\n{}\n{}",
        report.seed,
        report.seconds,
        report.faults.len(),
        markdown_table(&HEADER, report.workloads.iter().map(cells)),
        markdown_table(
            &SOMETIMES_HEADER,
            report.sometimes.iter().map(sometimes_cells)
        )
    )
}

const SOMETIMES_HEADER: [&str; 2] = ["sometimes", "count"];

fn sometimes_cells(s: &Sometimes) -> [String; 2] {
    [s.name.into(), s.count.to_string()]
}

const FAULTS_HEADER: [&str; 5] = ["start ms", "end ms", "kind", "target", "note"];

fn fault_cells(f: &Fault) -> [String; 5] {
    [
        format!("{:.0}", f.start_ms),
        format!("{:.0}", f.end_ms),
        f.kind.name().into(),
        f.target.clone(),
        f.note.clone().unwrap_or_default(),
    ]
}

/// A self-contained HTML page: the table, the faults, the first violations and a
/// timeline per workload with the faults marked.
pub fn html(report: &NemesisReport) -> Result<String, String> {
    let table = html_table(&HEADER, report.workloads.iter().map(cells));
    let sometimes = html_table(
        &SOMETIMES_HEADER,
        report.sometimes.iter().map(sometimes_cells),
    );
    let faults = html_table(&FAULTS_HEADER, report.faults.iter().map(fault_cells));
    let mut violations = String::new();
    for w in &report.workloads {
        // The resource's violations, then the lock's anomalies (counted, judged only where
        // the fence itself broke: see the checker).
        for v in w.violations.iter().chain(&w.first_lock_anomalies) {
            violations.push_str(&format!(
                "<h3>{}: {} on {}</h3><p>{}</p><pre>{}</pre>",
                w.name,
                v.kind,
                escape(&v.resource),
                escape(&v.message),
                escape(
                    &v.ops
                        .iter()
                        .map(|o| serde_json::to_string(o).unwrap_or_default())
                        .collect::<Vec<_>>()
                        .join("\n")
                )
            ));
        }
    }
    let linearizations: String = report
        .workloads
        .iter()
        .filter_map(|w| Some((w.name, w.linearizability.longest.as_ref()?)))
        .map(|(name, partial)| partial_html(name, partial))
        .collect();
    let mut timelines = String::new();
    for w in &report.timeline {
        let title = format!(
            "{}: {:.1} s to {:.1} s, around {}",
            w.workload,
            w.from_ms / 1e3,
            w.to_ms / 1e3,
            w.around
        );
        timelines.push_str(&format!(
            "<figure>{}</figure>\n",
            timeline::svg_from(&title, &w.lanes, &w.moments, w.from_ms)?
        ));
    }
    let (verdict, why) = if report.passed() {
        ("passed", String::new())
    } else {
        let items: String = report
            .failures
            .iter()
            .map(|f| format!("<li>{}</li>", escape(f)))
            .collect();
        ("FAILED", format!("<ul class=\"failures\">{items}</ul>"))
    };
    Ok(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>seatlock nemesis</title>\
         <style>body{{font:15px system-ui,sans-serif;margin:2rem}}table{{border-collapse:collapse;margin:1rem 0}}\
         td,th{{border:1px solid #ccc;padding:.3rem .6rem;text-align:left}}td.n{{text-align:right}}\
         pre{{font-size:12px;overflow-x:auto}}</style></head><body>\
         <h1>Nemesis, seed {seed}, on {store}: {verdict}</h1>{why}\
         {table}<h2>Sometimes</h2>{sometimes}<h2>Faults</h2>{faults}\
         <h2>First violations and lock anomalies</h2>{violations}\
         <h2>Longest partial linearizations</h2>{linearizations}\
         <h2>Timelines</h2>{legend}<p>On <code>conditional</code> and <code>auction</code> \
         nothing is held: their lanes are writes only (\"token ?\").</p>{timelines}</body></html>",
        seed = report.seed,
        store = report.store.name(),
        legend = timeline::LEGEND_HTML
    ))
}

/// How far the linearizability search got in a failing (or undecided) resource: the
/// operations it could order, each with the row after it, then those it could not.
fn partial_html(workload: &str, partial: &partitions::PartialLinearization) -> String {
    let row = |o: &partitions::Linearized, n: String| {
        [
            n,
            o.process.clone(),
            o.op.clone(),
            format!("{:.0}", o.invoke_ms),
            o.complete_ms
                .map_or("unknown".into(), |ms| format!("{ms:.0}")),
            o.state.clone().unwrap_or_default(),
        ]
    };
    let ordered = partial
        .ordered
        .iter()
        .enumerate()
        .map(|(i, o)| row(o, (i + 1).to_string()));
    let left = partial.left.iter().map(|o| row(o, "left".into()));
    format!(
        "<h3>{workload}: {}</h3><p>Ordered: {}. Left over, none of which can come next: {}.</p>{}",
        escape(&partial.resource),
        partial.ordered.len(),
        partial.left.len(),
        html_table(
            &[
                "#",
                "process",
                "operation",
                "called ms",
                "answered ms",
                "the row after it"
            ],
            ordered.chain(left)
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_schedule_and_every_kind_comes_up() {
        let minutes = Duration::from_secs(600);
        let redis = LeaseBackend::Redis.faults();
        assert_eq!(
            schedule(7, minutes, 6, redis),
            schedule(7, minutes, 6, redis)
        );
        assert_ne!(
            schedule(7, minutes, 6, redis),
            schedule(8, minutes, 6, redis)
        );
        for backend in [LeaseBackend::Redis, LeaseBackend::Etcd] {
            let plan = schedule(7, minutes, 6, backend.faults());
            for kind in backend.faults() {
                assert!(plan.iter().any(|f| f.kind == *kind), "{kind:?}");
            }
            assert!(plan.iter().all(|f| backend.faults().contains(&f.kind)));
        }
        let plan = schedule(7, minutes, 6, redis);
        assert!(
            plan.chunk_by(|a, b| a.at_ms == b.at_ms)
                .any(|slot| slot.len() == 2),
            "some faults come together"
        );
        assert!(plan.iter().all(|f| f.at_ms + 3_000 <= 600_000));
        assert!(
            plan.iter()
                .all(|f| f.kind.hits_a_server() == f.server.is_some_and(|s| s < 6))
        );
    }
}
