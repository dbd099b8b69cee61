//! A Redis Cluster on private loopback ports: three masters and three replicas
//! (`redis-server --cluster-enabled yes`, joined by `redis-cli --cluster create …
//! --cluster-replicas 1`), for the cluster tests and `make scale STORE=cluster`'s twin in
//! the tests. Each node is a [`RedisServer`] (free port, own folder, dies with its
//! parent) with `--cluster-node-timeout 1000`, so a killed master's replica is promoted
//! in about 2 s; `--cluster-require-full-coverage no`, so that while one shard fails over
//! the others keep serving (the default stops every slot), and expiry notifications on
//! from the start (`--notify-keyspace-events
//! Ex`: a node restarted keeps them).
//!
//! The faults: [`ClusterTopology::lose_next_write`] and [`ClusterTopology::kill_master`]
//! lose a grant on one shard as [`crate::sentinel::SentinelTopology`] does (the replica
//! paused for writes, the master killed); [`ClusterTopology::force_failover`] is the
//! operator's `CLUSTER FAILOVER FORCE`; [`ClusterTopology::migrate_slot`] moves one slot,
//! keys and all, as `redis-cli --cluster reshard` does.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::procs::RedisServer;

/// How long a test waits for a replica to be promoted: about 2 s with a node timeout of
/// 1 s; an election that fails on a busy machine is tried again after twice the node
/// timeout, so the wait allows for several.
pub const PROMOTION_WAIT: Duration = Duration::from_secs(30);

/// The six nodes of one cluster; all are killed when it drops.
pub struct ClusterTopology {
    /// Every node, in the order they were started (the first three began as masters).
    pub nodes: Vec<RedisServer>,
}

/// One line of `CLUSTER NODES`, as the tests need it.
#[derive(Clone, Debug)]
pub struct Node {
    /// The node's id.
    pub id: String,
    /// Its port on loopback.
    pub port: u16,
    /// Whether it is a master now.
    pub master: bool,
    /// The id of its master, for a replica.
    pub master_id: Option<String>,
}

impl ClusterTopology {
    /// Starts six nodes, makes three masters with a replica each, and waits until every
    /// node says `cluster_state:ok` and every replica is in sync. Errors: `redis-server`
    /// or `redis-cli` missing, or not ready in 30 s.
    pub async fn start() -> anyhow::Result<ClusterTopology> {
        let mut nodes = Vec::new();
        for _ in 0..6 {
            nodes.push(
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "1000",
                    // A failed shard stops only its own slots, not the whole cluster.
                    "--cluster-require-full-coverage",
                    "no",
                    "--repl-diskless-sync-delay",
                    "0",
                    "--notify-keyspace-events",
                    "Ex",
                ])
                .await?,
            );
        }
        let topology = ClusterTopology { nodes };
        let output = std::process::Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(
                topology
                    .nodes
                    .iter()
                    .map(|n| format!("127.0.0.1:{}", n.port)),
            )
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .context("running redis-cli --cluster create (apt-get install redis-tools)")?;
        anyhow::ensure!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        topology.wait_until_ready(Duration::from_secs(30)).await?;
        Ok(topology)
    }

    /// `redis+cluster://127.0.0.1:P1,…,127.0.0.1:P6`: what `REDIS_URL` is set to for a
    /// server on this cluster.
    pub fn url(&self) -> String {
        let nodes = crate::procs::loopback_hosts(self.nodes.iter().map(|n| n.port));
        format!("{}{nodes}", lease::redis::CLUSTER_SCHEME)
    }

    /// Every node as a running node sees them (`CLUSTER NODES`), failed ones left out.
    /// Errors: no node answered.
    pub async fn view(&self) -> anyhow::Result<Vec<Node>> {
        for server in &self.nodes {
            let Ok(text) = query::<String>(server.port, redis::cmd("CLUSTER").arg("NODES")).await
            else {
                continue;
            };
            return Ok(text
                .lines()
                .filter_map(|line| {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    let flags = f.get(2)?;
                    if flags.contains("fail") || flags.contains("noaddr") {
                        return None;
                    }
                    let port = f.get(1)?.split(['@', ',']).next()?.rsplit(':').next()?;
                    Some(Node {
                        id: f[0].to_owned(),
                        port: port.parse().ok()?,
                        master: flags.contains("master"),
                        master_id: (f.get(3)? != &"-").then(|| f[3].to_owned()),
                    })
                })
                .collect());
        }
        bail!("no cluster node answered CLUSTER NODES")
    }

    /// The port of the master that serves `key`'s slot now (`CLUSTER KEYSLOT`, then
    /// `CLUSTER SHARDS`' ranges as `CLUSTER SLOTS` gives them). Errors: no node answered,
    /// or the slot has no master.
    pub async fn master_of(&self, key: &str) -> anyhow::Result<u16> {
        let slot = self.slot_of(key).await?;
        self.master_of_slot(slot).await
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`).
    pub async fn slot_of(&self, key: &str) -> anyhow::Result<u16> {
        for server in &self.nodes {
            if let Ok(slot) =
                query::<u16>(server.port, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)).await
            {
                return Ok(slot);
            }
        }
        bail!("no cluster node answered CLUSTER KEYSLOT")
    }

    /// The port of the master serving `slot` (`CLUSTER SLOTS`, asked of the first node
    /// that answers).
    pub async fn master_of_slot(&self, slot: u16) -> anyhow::Result<u16> {
        for server in &self.nodes {
            let Ok(ranges) =
                query::<Vec<redis::Value>>(server.port, redis::cmd("CLUSTER").arg("SLOTS")).await
            else {
                continue;
            };
            for range in ranges {
                let redis::Value::Array(parts) = range else {
                    continue;
                };
                let (from, to): (u16, u16) = (
                    redis::from_redis_value(parts[0].clone())?,
                    redis::from_redis_value(parts[1].clone())?,
                );
                if (from..=to).contains(&slot) {
                    // The master: [host, port, id, metadata].
                    let master: Vec<redis::Value> = redis::from_redis_value(parts[2].clone())?;
                    return Ok(redis::from_redis_value(master[1].clone())?);
                }
            }
            bail!("slot {slot} has no master");
        }
        bail!("no cluster node answered CLUSTER SLOTS")
    }

    /// The node on `port`, to kill or signal. Errors: none of this cluster's.
    pub fn node(&mut self, port: u16) -> anyhow::Result<&mut RedisServer> {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .context("no such cluster node")
    }

    /// The port of the replica of the master on `master`. Errors: it has none.
    pub async fn replica_of(&self, master: u16) -> anyhow::Result<u16> {
        let view = self.view().await?;
        let id = &view
            .iter()
            .find(|n| n.port == master)
            .context("no such master")?
            .id;
        view.iter()
            .find(|n| n.master_id.as_ref() == Some(id))
            .map(|n| n.port)
            .context("the master has no replica")
    }

    /// Waits until the replica of `master` has applied every write (`WAIT 1`), then
    /// pauses it for writes for [`crate::sentinel::REPLICA_PAUSE_MS`]: the next write on `master` reaches
    /// the replica's socket but is not applied before [`ClusterTopology::kill_master`]
    /// kills the master (as [`crate::sentinel::SentinelTopology::lose_next_write`]).
    pub async fn lose_next_write(&self, master: u16) -> anyhow::Result<()> {
        let replica = self.replica_of(master).await?;
        crate::sentinel::pause_in_sync(&url(master), &url(replica)).await
    }

    /// Kills the master on `master` (SIGKILL) and waits until its replica is the master
    /// of its slots as every live node sees it, the cluster ok again. Returns the port
    /// of the promoted replica and the time from the kill to then. Errors: no promotion
    /// within [`PROMOTION_WAIT`].
    pub async fn kill_master(&mut self, master: u16) -> anyhow::Result<(u16, Duration)> {
        let replica = self.replica_of(master).await?;
        let killed_at = Instant::now();
        self.node(master)?.kill();
        self.wait_for_master(replica, killed_at).await?;
        Ok((replica, killed_at.elapsed()))
    }

    /// `CLUSTER FAILOVER FORCE` on the replica of `master`: the replica takes over at
    /// once, without the master's agreement (as an operator does when the master is
    /// unreachable); the old master becomes its replica. Returns the promoted port once
    /// the old master has itself stepped down: until its gossip tells it of the new
    /// epoch it still takes writes, which its resync from the new master then drops
    /// (Redis Cluster's asynchronous replication: a hold granted there in that window
    /// is lost, as after any failover). Errors: the replica refused, or no promotion
    /// or step-down within [`PROMOTION_WAIT`].
    pub async fn force_failover(&self, master: u16) -> anyhow::Result<u16> {
        let replica = self.replica_of(master).await?;
        let started = Instant::now();
        let () = query(replica, redis::cmd("CLUSTER").arg("FAILOVER").arg("FORCE")).await?;
        self.wait_for_master(replica, started).await?;
        while started.elapsed() < PROMOTION_WAIT {
            let role: redis::Value = query(master, &redis::cmd("ROLE")).await?;
            if matches!(&role, redis::Value::Array(parts)
                if matches!(parts.first(), Some(redis::Value::BulkString(r)) if r == b"slave"))
            {
                return Ok(replica);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!("the master on {master} did not step down within {PROMOTION_WAIT:?}")
    }

    /// Moves `slot` to the master on `to`, keys and all, while clients keep using it:
    /// `CLUSTER SETSLOT … IMPORTING` on the target, `MIGRATING` on the source, `MIGRATE`
    /// of the slot's keys `batch` at a time (`KEYS`: their TTLs kept), then `SETSLOT …
    /// NODE` on both. During the move a script whose keys are split between the two
    /// nodes is answered `TRYAGAIN`, one whose keys have all left `ASK`. Errors: a
    /// command refused.
    pub async fn migrate_slot(&self, slot: u16, to: u16, batch: usize) -> anyhow::Result<()> {
        let from = self.master_of_slot(slot).await?;
        anyhow::ensure!(from != to, "slot {slot} is already on {to}");
        let view = self.view().await?;
        let id = |port: u16| {
            view.iter()
                .find(|n| n.port == port)
                .map(|n| n.id.clone())
                .context("no such node")
        };
        let (from_id, to_id) = (id(from)?, id(to)?);
        let setslot = |state: &str, node: &str| {
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(state)
                .arg(node)
                .clone()
        };
        let () = query(to, &setslot("IMPORTING", &from_id)).await?;
        let () = query(from, &setslot("MIGRATING", &to_id)).await?;
        loop {
            let keys: Vec<String> = query(
                from,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(batch),
            )
            .await?;
            if keys.is_empty() {
                break;
            }
            let () = query(
                from,
                redis::cmd("MIGRATE")
                    .arg("127.0.0.1")
                    .arg(to)
                    .arg("")
                    .arg(0)
                    .arg(5_000)
                    .arg("KEYS")
                    .arg(&keys),
            )
            .await?;
        }
        let () = query(to, &setslot("NODE", &to_id)).await?;
        let () = query(from, &setslot("NODE", &to_id)).await?;
        Ok(())
    }

    /// Waits until every live node names the node on `port` as a master, and says
    /// `cluster_state:ok`.
    async fn wait_for_master(&self, port: u16, since: Instant) -> anyhow::Result<()> {
        while since.elapsed() < PROMOTION_WAIT {
            let promoted = self
                .view()
                .await
                .is_ok_and(|v| v.iter().any(|n| n.port == port && n.master));
            if promoted && self.all_ok().await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("the replica on {port} was not promoted within {PROMOTION_WAIT:?}")
    }

    /// Whether every running node says `cluster_state:ok`.
    async fn all_ok(&self) -> bool {
        for node in &self.nodes {
            if !node.running() {
                continue;
            }
            let info = query::<String>(node.port, redis::cmd("CLUSTER").arg("INFO")).await;
            if !info.is_ok_and(|i| i.contains("cluster_state:ok")) {
                return false;
            }
        }
        true
    }

    async fn wait_until_ready(&self, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.all_ok().await && self.replicas_in_sync().await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("the cluster was not ready within {limit:?}")
    }

    /// Whether three masters each have a replica whose link is up.
    async fn replicas_in_sync(&self) -> bool {
        let Ok(view) = self.view().await else {
            return false;
        };
        let replicas: Vec<&Node> = view.iter().filter(|n| !n.master).collect();
        if replicas.len() != 3 {
            return false;
        }
        for replica in replicas {
            let info = query::<String>(replica.port, redis::cmd("INFO").arg("replication")).await;
            if !info.is_ok_and(|i| i.contains("master_link_status:up")) {
                return false;
            }
        }
        true
    }
}

/// `redis://127.0.0.1:PORT/`: the node on loopback `port`.
fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}/")
}

/// One command to the node on loopback `port` ([`crate::sentinel`]'s `query`).
async fn query<T: redis::FromRedisValue>(port: u16, command: &redis::Cmd) -> redis::RedisResult<T> {
    crate::sentinel::query(&url(port), command).await
}
