//! A private etcd cluster on loopback, owned by one test: one or three members, each on
//! free client and peer ports, killed (SIGKILL) and their data removed when the guard
//! drops. For the lease store's tests on etcd ([`lease::etcd::EtcdStore`]).

use std::time::Duration;

use anyhow::{Context, bail};
use lease::LeaseStore;
use lease::etcd::EtcdStore;

use crate::procs::port_and_folder;

/// One member: its ports and process.
struct Member {
    client_port: u16,
    peer_port: u16,
    child: Option<std::process::Child>,
}

/// A running etcd cluster; see the module docs.
pub struct EtcdCluster {
    members: Vec<Member>,
    dir: std::path::PathBuf,
    /// `--initial-cluster`: every member's name and peer URL.
    peers: String,
    /// The extra flags every member runs with.
    extra: Vec<String>,
}

impl EtcdCluster {
    /// Starts `size` members (1 or 3 make sense) and waits until the cluster grants
    /// (a quorum read answers through [`EtcdStore::ping`]), at most 20 s. Errors: etcd
    /// not installed (`apt-get install etcd-server`) or not healthy in time.
    pub async fn start(size: usize) -> anyhow::Result<EtcdCluster> {
        Self::start_with(size, &[]).await
    }

    /// [`EtcdCluster::start`] with extra `etcd` flags on every member (a small
    /// `--quota-backend-bytes`, a longer `--election-timeout`).
    pub async fn start_with(size: usize, extra: &[&str]) -> anyhow::Result<EtcdCluster> {
        let (_, dir) = port_and_folder("seatlock-etcd")?;
        let ports: Vec<(u16, u16)> = (0..size)
            .map(|_| Ok((crate::procs::free_port()?, crate::procs::free_port()?)))
            .collect::<anyhow::Result<_>>()?;
        let peers: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect();
        let mut cluster = EtcdCluster {
            members: ports
                .iter()
                .map(|&(client_port, peer_port)| Member {
                    client_port,
                    peer_port,
                    child: None,
                })
                .collect(),
            dir,
            peers: peers.join(","),
            extra: extra.iter().map(|f| f.to_string()).collect(),
        };
        for index in 0..size {
            cluster.spawn(index, "new")?;
        }
        cluster.wait_until_healthy().await?;
        Ok(cluster)
    }

    /// Starts member `index`'s process on its ports and data folder; `state` is
    /// `--initial-cluster-state` (`new` at first, `existing` for a restart).
    fn spawn(&mut self, index: usize, state: &str) -> anyhow::Result<()> {
        let member = &self.members[index];
        let client_url = format!("http://127.0.0.1:{}", member.client_port);
        let peer_url = format!("http://127.0.0.1:{}", member.peer_port);
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let child = crate::procs::dies_with_parent(&mut std::process::Command::new("etcd"))
            .args(["--name", &format!("m{index}")])
            .arg("--data-dir")
            .arg(self.dir.join(format!("m{index}")))
            .args([
                "--listen-client-urls",
                &client_url,
                "--advertise-client-urls",
                &client_url,
            ])
            .args([
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
            ])
            .args(["--initial-cluster", &self.peers])
            .args(["--initial-cluster-state", state, "--log-level", "error"])
            .envs(limits(&extra))
            .args(&extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("starting etcd (apt-get install etcd-server)")?;
        self.members[index].child = Some(child);
        Ok(())
    }

    /// Starts member `index` again after [`EtcdCluster::kill`], on its data (it rejoins
    /// and catches up from the leader), and waits until the cluster grants. Errors: it
    /// was not killed, etcd would not start, or not healthy in 20 s.
    pub async fn restart(&mut self, index: usize) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.members[index].child.is_none(),
            "member {index} is running"
        );
        self.spawn(index, "existing")?;
        self.wait_until_healthy().await
    }

    /// Waits (at most 20 s) until a quorum read answers ([`EtcdStore::ping`]).
    async fn wait_until_healthy(&self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while tokio::time::Instant::now() < deadline {
            if let Ok(store) = self.store().await
                && store.ping().await.is_ok()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!("the etcd cluster did not become healthy in 20 s")
    }

    /// `etcd://127.0.0.1:<client port>,…` naming every member.
    pub fn url(&self) -> String {
        let hosts = crate::procs::loopback_hosts(self.members.iter().map(|m| m.client_port));
        format!("etcd://{hosts}")
    }

    /// A lease store on the whole cluster.
    pub async fn store(&self) -> anyhow::Result<EtcdStore> {
        Ok(EtcdStore::connect(&self.url(), Duration::from_secs(2)).await?)
    }

    /// The index of the current leader: the running member whose status names itself
    /// as leader.
    pub async fn leader(&self) -> anyhow::Result<usize> {
        for (index, member) in self.members.iter().enumerate() {
            if member.child.is_none() {
                continue;
            }
            let url = format!("etcd://127.0.0.1:{}", member.client_port);
            let Ok(store) = EtcdStore::connect(&url, Duration::from_secs(2)).await else {
                continue;
            };
            let Ok(status) = store.client().status().await else {
                continue;
            };
            if status
                .header()
                .is_some_and(|h| h.member_id() == status.leader())
            {
                return Ok(index);
            }
        }
        bail!("no running member says it leads")
    }

    /// Sends `signal` (`STOP`, `CONT`, …) to member `index`: a stopped member keeps its
    /// port open (the kernel completes handshakes) and answers nothing, as a hung host.
    /// Errors: the member was killed, or `kill` failed.
    pub fn signal(&self, index: usize, signal: &str) -> anyhow::Result<()> {
        let child = self.members[index]
            .child
            .as_ref()
            .context("the member was killed")?;
        crate::procs::send_signal(child.id(), signal)
    }

    /// Kills member `index` (SIGKILL: no goodbye to its peers).
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.members[index].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for index in 0..self.members.len() {
            self.kill(index);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The environment of `scripts/etcd.env` (etcd's auto-compaction), as every etcd the
/// project starts gets it (`NAME=value` lines, `#` comments), but for the settings
/// `flags` give: etcd refuses to start when a flag and its `ETCD_` variable are both set.
fn limits(flags: &[&str]) -> Vec<(&'static str, &'static str)> {
    include_str!("../../scripts/etcd.env")
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once('='))
        .filter(|(name, _)| {
            let flag = format!("--{}", name.trim_start_matches("ETCD_").to_lowercase());
            !flags.contains(&flag.replace('_', "-").as_str())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_etcd_the_project_starts_compacts_its_history() {
        let limits = limits(&[]);
        assert!(limits.contains(&("ETCD_AUTO_COMPACTION_MODE", "periodic")));
        let retention = limits
            .iter()
            .find(|(name, _)| *name == "ETCD_AUTO_COMPACTION_RETENTION")
            .map(|(_, value)| *value);
        assert!(retention.is_some_and(|r| r != "0"), "{retention:?}");
        // A flag given on the command line replaces its variable (etcd refuses both).
        let overridden = super::limits(&["--auto-compaction-retention", "1s"]);
        assert!(
            !overridden
                .iter()
                .any(|(name, _)| name.ends_with("RETENTION"))
        );
    }
}
