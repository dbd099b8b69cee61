//! A Redis Sentinel topology on private loopback ports: a primary, one replica and three
//! Sentinels (quorum 2), for the failover test and `make failover`. The facts behind the
//! settings are in `/work/shared/notes/failover-and-etcd.md`: the primary runs with
//! `--repl-diskless-sync-delay 0` (the default delays the first sync by 5 s); each
//! Sentinel has its own config file (Sentinel rewrites it), `down-after-milliseconds`
//! 1000 and `failover-timeout` 5000, so a killed primary is replaced in about 2 s.
//!
//! [`SentinelTopology::lose_next_write`] and [`SentinelTopology::fail_over`] make the
//! failover lose a grant, deterministically: the replica is paused for writes (`CLIENT
//! PAUSE … WRITE`: it keeps reading the stream and answering pings, applies nothing),
//! the caller writes on the primary, the primary is killed (SIGKILL), Sentinel promotes
//! the replica, which never saw the write.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::procs::{RedisServer, port_and_folder};

/// How long a test waits for Sentinel to promote the replica. A failover takes about 2 s;
/// an election that fails (a busy machine: votes arrive late) is tried again only after
/// twice `failover-timeout` (10 s), so the wait allows for two retries.
pub const PROMOTION_WAIT: Duration = Duration::from_secs(40);

/// The master name the Sentinels monitor, and the path of [`SentinelTopology::url`].
pub const MASTER_NAME: &str = "seatlock";

/// How long the replica ignores the stream in [`SentinelTopology::lose_next_write`], in
/// milliseconds: longer than the write takes, shorter than down-after (1000 ms) plus an
/// election, or the promotion itself waits for it.
pub const REPLICA_PAUSE_MS: u64 = 1_500;

/// The processes of one topology; all are killed when it drops.
pub struct SentinelTopology {
    /// The primary the Sentinels start with.
    pub primary: RedisServer,
    /// Its replica, promoted by [`SentinelTopology::fail_over`].
    pub replica: RedisServer,
    sentinels: Vec<Sentinel>,
}

/// One `redis-server <conf> --sentinel` child.
struct Sentinel {
    port: u16,
    dir: std::path::PathBuf,
    child: std::process::Child,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl SentinelTopology {
    /// Starts the primary, the replica and three Sentinels, and waits until the replica
    /// is in sync and every Sentinel knows the replica and reaches its quorum (`SENTINEL
    /// CKQUORUM`): about 2 s. Errors: `redis-server` missing, or not ready in 20 s.
    pub async fn start() -> anyhow::Result<SentinelTopology> {
        Self::start_with_primary(&[]).await
    }

    /// [`SentinelTopology::start`] with a primary the Sentinels cannot turn into a
    /// replica (`REPLICAOF` and `SLAVEOF` renamed away): after a failover it keeps
    /// answering and accepting writes, as a primary on the minority side of a partition
    /// does until the partition heals.
    pub async fn start_undemotable() -> anyhow::Result<SentinelTopology> {
        Self::start_with_primary(&[
            "--rename-command",
            "REPLICAOF",
            "",
            "--rename-command",
            "SLAVEOF",
            "",
        ])
        .await
    }

    async fn start_with_primary(extra: &[&str]) -> anyhow::Result<SentinelTopology> {
        let mut args = vec!["--repl-diskless-sync-delay", "0"];
        args.extend_from_slice(extra);
        let primary = RedisServer::start_with(&args).await?;
        let primary_port = primary.port.to_string();
        let replica = RedisServer::start_with(&[
            "--repl-diskless-sync-delay",
            "0",
            "--replicaof",
            "127.0.0.1",
            &primary_port,
        ])
        .await?;
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            let (port, dir) = port_and_folder("seatlock-sentinel")?;
            let conf = dir.join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "bind 127.0.0.1\nport {port}\ndir {dir}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                     sentinel failover-timeout {MASTER_NAME} 5000\n",
                    dir = dir.display()
                ),
            )?;
            let child =
                crate::procs::dies_with_parent(&mut std::process::Command::new("redis-server"))
                    .arg(&conf)
                    .arg("--sentinel")
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .context("starting redis-server --sentinel (apt-get install redis-server)")?;
            sentinels.push(Sentinel { port, dir, child });
        }
        let topology = SentinelTopology {
            primary,
            replica,
            sentinels,
        };
        topology.wait_until_ready().await?;
        Ok(topology)
    }

    /// `redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/seatlock`: what
    /// `REDIS_URL` is set to for a server that follows failovers.
    pub fn url(&self) -> String {
        let hosts = crate::procs::loopback_hosts(self.sentinels.iter().map(|s| s.port));
        format!("{}{hosts}/{MASTER_NAME}", lease::redis::SENTINEL_SCHEME)
    }

    async fn wait_until_ready(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.ready().await.unwrap_or(false) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("the Sentinel topology was not ready within 20 s")
    }

    async fn ready(&self) -> anyhow::Result<bool> {
        let info: String =
            query(&self.replica.url(), redis::cmd("INFO").arg("replication")).await?;
        if !info.contains("master_link_status:up") {
            return Ok(false);
        }
        for sentinel in &self.sentinels {
            let url = format!("redis://127.0.0.1:{}/", sentinel.port);
            let quorum: redis::RedisResult<String> = query(
                &url,
                redis::cmd("SENTINEL").arg("CKQUORUM").arg(MASTER_NAME),
            )
            .await;
            let replicas: Vec<redis::Value> = query(
                &url,
                redis::cmd("SENTINEL").arg("REPLICAS").arg(MASTER_NAME),
            )
            .await?;
            if quorum.is_err() || replicas.is_empty() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Waits until the replica has applied every write the primary has (`WAIT 1`), then
    /// pauses the replica for writes for [`REPLICA_PAUSE_MS`]: the next write on the
    /// primary reaches the replica's socket but is not applied before
    /// [`SentinelTopology::fail_over`] kills the primary.
    pub async fn lose_next_write(&self) -> anyhow::Result<()> {
        pause_in_sync(&self.primary.url(), &self.replica.url()).await
    }

    /// Makes Sentinel `index` forget the topology and monitor the old primary as the
    /// master again, alone: a Sentinel left with a stale view, as one on the minority
    /// side of a partition has. Errors: no such Sentinel, or it refused.
    pub async fn make_stale(&self, index: usize) -> anyhow::Result<()> {
        let sentinel = self.sentinels.get(index).context("no such Sentinel")?;
        let url = format!("redis://127.0.0.1:{}/", sentinel.port);
        let () = query(&url, redis::cmd("SENTINEL").arg("REMOVE").arg(MASTER_NAME)).await?;
        let () = query(
            &url,
            redis::cmd("SENTINEL")
                .arg("MONITOR")
                .arg(MASTER_NAME)
                .arg("127.0.0.1")
                .arg(self.primary.port)
                .arg(2),
        )
        .await?;
        Ok(())
    }

    /// Sends `signal` (`STOP`, `CONT`, …) to Sentinel `index` (0 is the first one
    /// [`SentinelTopology::url`] names). A stopped Sentinel's port still accepts
    /// connections (the kernel completes the handshake) but nothing is answered: what a
    /// hung host looks like to a client. Errors: no such Sentinel, or `kill` failed.
    pub fn signal_sentinel(&self, index: usize, signal: &str) -> anyhow::Result<()> {
        let sentinel = self.sentinels.get(index).context("no such Sentinel")?;
        crate::procs::send_signal(sentinel.child.id(), signal)
    }

    /// Kills the primary (SIGKILL) and waits until the failover is over as a client sees
    /// it: the first Sentinel's `SENTINEL MASTER` names the replica, with no `s_down`,
    /// `o_down` or `failover_in_progress` flag. (`GET-MASTER-ADDR-BY-NAME` names the
    /// promoted replica earlier, while the Sentinel still reconfigures the replicas, and
    /// redis-rs's Sentinel client refuses a master in that state:
    /// `MasterNameNotFoundBySentinel`.) Returns the time from the kill to then.
    /// Errors: no promotion within [`PROMOTION_WAIT`].
    pub async fn fail_over(&mut self) -> anyhow::Result<Duration> {
        let killed_at = Instant::now();
        self.primary.kill();
        self.wait_for_promotion(killed_at).await
    }

    /// Stops the primary (SIGSTOP: a hung host, its port open and nothing answered) and
    /// waits as [`SentinelTopology::fail_over`] does; the primary stays stopped (SIGCONT
    /// it with `primary.signal`, Sentinel then turns it into a replica). Errors: no
    /// promotion within [`PROMOTION_WAIT`].
    pub async fn hang_primary(&mut self) -> anyhow::Result<Duration> {
        let stopped_at = Instant::now();
        self.primary.signal("STOP")?;
        self.wait_for_promotion(stopped_at).await
    }

    /// A graceful failover, as an operator makes one for maintenance (`SENTINEL
    /// FAILOVER`): the primary keeps running and is turned into a replica of the
    /// promoted one (its clients stay connected to it). Waits as
    /// [`SentinelTopology::fail_over`] does. Errors: the Sentinel refused, or no
    /// promotion within [`PROMOTION_WAIT`].
    pub async fn switch_over(&mut self) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let url = format!("redis://127.0.0.1:{}/", self.sentinels[0].port);
        let () = query(
            &url,
            redis::cmd("SENTINEL").arg("FAILOVER").arg(MASTER_NAME),
        )
        .await?;
        self.wait_for_promotion(started).await
    }

    /// After [`SentinelTopology::fail_over`]: starts the killed primary again, empty, as a
    /// replica of the promoted one, swaps the two roles (so `primary` is the promoted
    /// one and the next failover goes back), and waits until the topology is ready.
    /// Errors: `redis-server` did not start, or not ready in 20 s.
    pub async fn rejoin(&mut self) -> anyhow::Result<()> {
        std::mem::swap(&mut self.primary, &mut self.replica);
        self.replica
            .restart_empty_replicating(Some(self.primary.port))
            .await?;
        self.wait_until_ready().await
    }

    /// Makes `primary` the server the Sentinels name as master, swapping the roles if
    /// they moved it by themselves (an election retried after a failover was already
    /// waited for, a primary that stalled past `down-after`), and waits until the topology
    /// is ready. Errors: no Sentinel answered, or not ready in 20 s.
    pub async fn follow_sentinels(&mut self) -> anyhow::Result<()> {
        let url = format!("redis://127.0.0.1:{}/", self.sentinels[0].port);
        let (_, port): (String, u16) = query(
            &url,
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(MASTER_NAME),
        )
        .await?;
        if port == self.replica.port {
            std::mem::swap(&mut self.primary, &mut self.replica);
        }
        self.wait_until_ready().await
    }

    /// Restarts the primary empty (SIGKILL, then a new process on its port with no data),
    /// faster than Sentinel's `down-after` (1 s), so no failover: the lock store forgot
    /// every lease and counter, and the replica copies the empty data set. Waits until
    /// the replica is in sync again. Errors: as [`SentinelTopology::rejoin`].
    pub async fn restart_primary_empty(&mut self) -> anyhow::Result<()> {
        self.primary.restart_empty_replicating(None).await?;
        self.wait_until_ready().await
    }

    /// Waits until the first Sentinel names the replica as the primary, with no flag
    /// of a failover in progress (see [`SentinelTopology::fail_over`]); returns the time
    /// since `since`.
    async fn wait_for_promotion(&self, since: Instant) -> anyhow::Result<Duration> {
        let url = format!("redis://127.0.0.1:{}/", self.sentinels[0].port);
        let replica_port = self.replica.port.to_string();
        while since.elapsed() < PROMOTION_WAIT {
            let master: redis::RedisResult<HashMap<String, String>> =
                query(&url, redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME)).await;
            let promoted = master.is_ok_and(|m| {
                m.get("port") == Some(&replica_port)
                    && m.get("flags").is_some_and(|flags| {
                        flags.split(',').all(|flag| {
                            !matches!(flag, "s_down" | "o_down" | "failover_in_progress")
                        })
                    })
            });
            if promoted {
                return Ok(since.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("Sentinel did not promote the replica within {PROMOTION_WAIT:?}")
    }
}

/// Waits until the replica at `replica` has applied every write of the primary at
/// `primary` (`WAIT 1` there), then pauses the replica for writes for
/// [`REPLICA_PAUSE_MS`] (`CLIENT PAUSE … WRITE`): it keeps reading the replication stream
/// and answering pings, and applies nothing.
pub(crate) async fn pause_in_sync(primary: &str, replica: &str) -> anyhow::Result<()> {
    let acked: i64 = query(primary, redis::cmd("WAIT").arg(1).arg(2_000)).await?;
    anyhow::ensure!(acked == 1, "the replica did not catch up before the pause");
    let () = query(
        replica,
        redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(REPLICA_PAUSE_MS)
            .arg("WRITE"),
    )
    .await?;
    Ok(())
}

/// One command on a fresh connection to `url`, bounded by 2 s.
pub(crate) async fn query<T: redis::FromRedisValue>(
    url: &str,
    command: &redis::Cmd,
) -> redis::RedisResult<T> {
    let client = redis::Client::open(url)?;
    let asked = async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        command.query_async(&mut conn).await
    };
    tokio::time::timeout(Duration::from_secs(2), asked)
        .await
        .map_err(|_| redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)))?
}
