//! A private ZooKeeper ensemble on loopback, owned by one test: one member (standalone)
//! or three, each on free client, quorum and election ports, run from Debian's
//! `zookeeper` package's jar with the project's settings (`scripts/zookeeper.cfg`),
//! killed (SIGKILL) and their data removed when the guard drops. For the lease store's
//! tests on ZooKeeper ([`lease::zookeeper::ZooKeeperStore`]).

use std::time::Duration;

use anyhow::{Context, bail};
use lease::LeaseStore;
use lease::zookeeper::ZooKeeperStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::procs::{free_port, loopback_hosts, port_and_folder};

/// Debian's `zookeeper` package: the server's jar, its dependencies on its Class-Path
/// (scripts/services.sh installs it).
const ZK_JAR: &str = "/usr/share/java/zookeeper.jar";

/// One member: its ports and process.
struct Member {
    client_port: u16,
    quorum_port: u16,
    election_port: u16,
    child: Option<std::process::Child>,
}

/// A running ZooKeeper ensemble; see the module docs.
pub struct ZooKeeperEnsemble {
    members: Vec<Member>,
    dir: std::path::PathBuf,
}

impl ZooKeeperEnsemble {
    /// Starts `size` members (1 or 3 make sense) and waits until the ensemble serves (a
    /// `sync` through the leader answers, [`ZooKeeperStore::ping`]), at most 30 s.
    /// Errors: the package not installed (`apt-get install zookeeper`) or not serving in
    /// time.
    pub async fn start(size: usize) -> anyhow::Result<ZooKeeperEnsemble> {
        let (_, dir) = port_and_folder("seatlock-zookeeper")?;
        let members = (0..size)
            .map(|_| {
                Ok(Member {
                    client_port: free_port()?,
                    quorum_port: free_port()?,
                    election_port: free_port()?,
                    child: None,
                })
            })
            .collect::<anyhow::Result<_>>()?;
        let mut ensemble = ZooKeeperEnsemble { members, dir };
        for index in 0..size {
            ensemble.spawn(index)?;
        }
        ensemble.wait_until_serving().await?;
        Ok(ensemble)
    }

    /// Writes member `index`'s configuration (the project's settings, its folder and
    /// ports, every member's `server.N` line in an ensemble) and starts its process.
    fn spawn(&mut self, index: usize) -> anyhow::Result<()> {
        let data = self.dir.join(format!("m{index}"));
        std::fs::create_dir_all(&data)?;
        let member = &self.members[index];
        let mut config = format!(
            "{}\ndataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\n",
            include_str!("../../scripts/zookeeper.cfg"),
            data.display(),
            member.client_port
        );
        if self.members.len() > 1 {
            std::fs::write(data.join("myid"), format!("{}\n", index + 1))?;
            for (i, m) in self.members.iter().enumerate() {
                config.push_str(&format!(
                    "server.{}=127.0.0.1:{}:{}\n",
                    i + 1,
                    m.quorum_port,
                    m.election_port
                ));
            }
        }
        let config_path = data.join("zoo.cfg");
        std::fs::write(&config_path, config)?;
        let log = std::fs::File::create(data.join("zookeeper.log"))?;
        let child = crate::procs::dies_with_parent(&mut std::process::Command::new("java"))
            .args(["-Xmx256m", "-cp", ZK_JAR])
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(&config_path)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting ZooKeeper (apt-get install zookeeper)")?;
        self.members[index].child = Some(child);
        Ok(())
    }

    /// Starts member `index` again after [`ZooKeeperEnsemble::kill`], on its data (it
    /// rejoins and catches up from the leader), and waits until the ensemble serves.
    /// Errors: it was not killed, ZooKeeper would not start, or not serving in 30 s.
    pub async fn restart(&mut self, index: usize) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.members[index].child.is_none(),
            "member {index} is running"
        );
        self.spawn(index)?;
        self.wait_until_serving().await
    }

    /// Waits (at most 30 s) until a `sync` through the leader answers.
    async fn wait_until_serving(&self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while tokio::time::Instant::now() < deadline {
            if let Ok(Ok(store)) = tokio::time::timeout(Duration::from_secs(3), self.store()).await
                && store.ping().await.is_ok()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!(
            "the ZooKeeper ensemble did not serve in 30 s: see {}",
            self.dir.display()
        )
    }

    /// `zk://127.0.0.1:<client port>,…` naming every member.
    pub fn url(&self) -> String {
        let hosts = loopback_hosts(self.members.iter().map(|m| m.client_port));
        format!("zk://{hosts}")
    }

    /// A lease store on the whole ensemble.
    pub async fn store(&self) -> anyhow::Result<ZooKeeperStore> {
        Ok(ZooKeeperStore::connect(&self.url(), Duration::from_secs(2)).await?)
    }

    /// The index of the current leader: the running member whose `srvr` answer says
    /// `Mode: leader` (or `standalone`, a one-member ensemble).
    pub async fn leader(&self) -> anyhow::Result<usize> {
        for (index, member) in self.members.iter().enumerate() {
            if member.child.is_none() {
                continue;
            }
            let mode = mode(member.client_port).await.unwrap_or_default();
            if mode == "leader" || mode == "standalone" {
                return Ok(index);
            }
        }
        bail!("no running member says it leads")
    }

    /// Kills member `index` (SIGKILL: no goodbye to its peers).
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.members[index].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ZooKeeperEnsemble {
    fn drop(&mut self) {
        for index in 0..self.members.len() {
            self.kill(index);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The member's `Mode:` from its `srvr` four-letter word (`leader`, `follower`,
/// `standalone`), within a second.
async fn mode(port: u16) -> anyhow::Result<String> {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(b"srvr").await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        anyhow::Ok(answer)
    };
    let answer = tokio::time::timeout(Duration::from_secs(1), ask).await??;
    answer
        .lines()
        .find_map(|line| line.strip_prefix("Mode: "))
        .map(str::to_owned)
        .context("no Mode in the srvr answer")
}
