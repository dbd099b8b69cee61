//! The leader of a consensus cluster, etcd's ([`crate::EtcdCluster`]) or ZooKeeper's
//! ([`crate::ZooKeeperEnsemble`]): found, killed, started again.

use std::time::Duration;

/// A cluster of members one of which leads.
pub trait Leader {
    /// The index of the current leader. Errors: no running member says it leads.
    fn leader(&self) -> impl Future<Output = anyhow::Result<usize>> + Send;
    /// Kills member `index` (SIGKILL: no goodbye to its peers).
    fn kill(&mut self, index: usize);
    /// Starts member `index` again on its data and waits until the cluster serves.
    fn restart(&mut self, index: usize) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// Kills the leader, starts it again `down` later, and returns its index. Just after an
/// election no member may yet say it leads: asked again every 100 ms, for 5 s.
pub async fn kill_and_restart_leader(
    cluster: &mut impl Leader,
    down: Duration,
) -> anyhow::Result<usize> {
    let mut leader = cluster.leader().await;
    for _ in 0..50 {
        if leader.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        leader = cluster.leader().await;
    }
    let leader = leader?;
    cluster.kill(leader);
    tokio::time::sleep(down).await;
    cluster.restart(leader).await?;
    Ok(leader)
}

impl Leader for crate::EtcdCluster {
    fn leader(&self) -> impl Future<Output = anyhow::Result<usize>> + Send {
        crate::EtcdCluster::leader(self)
    }

    fn kill(&mut self, index: usize) {
        crate::EtcdCluster::kill(self, index)
    }

    fn restart(&mut self, index: usize) -> impl Future<Output = anyhow::Result<()>> + Send {
        crate::EtcdCluster::restart(self, index)
    }
}

impl Leader for crate::ZooKeeperEnsemble {
    fn leader(&self) -> impl Future<Output = anyhow::Result<usize>> + Send {
        crate::ZooKeeperEnsemble::leader(self)
    }

    fn kill(&mut self, index: usize) {
        crate::ZooKeeperEnsemble::kill(self, index)
    }

    fn restart(&mut self, index: usize) -> impl Future<Output = anyhow::Result<()>> + Send {
        crate::ZooKeeperEnsemble::restart(self, index)
    }
}
