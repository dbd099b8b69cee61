//! Redis servers of the lab's own: child processes of `seatlock-lab serve`, each on a free
//! loopback port, with no persistence, killed when dropped. The faults that must happen
//! *to the lock server itself* need one: a clock that jumps forward would expire every
//! lease on a shared Redis, and a restart or a failover would end everybody's. A server
//! of its own per run keeps the fault inside that run.
//!
//! Three things a shared Redis cannot be made to do, each a real operation here:
//! - [`OwnRedis::jump_clock`]: the server's wall clock moves forward (libfaketime's
//!   `FAKETIME_TIMESTAMP_FILE`, read at every clock call). Redis expires a key when its
//!   own clock passes the key's deadline, so every lease ends early by the jump.
//! - [`OwnRedis::restart_empty`]: the process is killed and started again on its port
//!   with nothing: a restart without persistence, with a new `run_id`.
//! - [`OwnRedis::copy_from`]: asynchronous replication, one catch-up at a time. The
//!   server follows the primary (`REPLICAOF`) until it has every write, then stands alone
//!   again (`REPLICAOF NO ONE`): a replica that is behind by whatever the primary took
//!   since, which a failover promotes by using it.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

/// How long a started server has to answer `PING`, and a copy to catch up.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// One server of the lab's own. Killed, and its folder removed, when dropped.
pub(crate) struct OwnRedis {
    /// The server binary (`redis-server`, or one that runs under libfaketime).
    binary: String,
    port: u16,
    /// Holds the server's working folder and, under libfaketime, its clock file.
    dir: PathBuf,
    /// The clock's offset so far, when the server runs under libfaketime.
    clock_offset: Option<Duration>,
    child: Child,
}

impl OwnRedis {
    /// Starts `binary` (a `redis-server`, or a Redis-protocol server such as Valkey's) on
    /// a free loopback port and waits until it answers. Errors: the binary is missing,
    /// or the server does not answer within 10 s.
    pub(crate) async fn start(binary: &str) -> anyhow::Result<OwnRedis> {
        Self::launch(binary, None).await
    }

    /// [`OwnRedis::start`] under libfaketime, its clock at the real time until
    /// [`OwnRedis::jump_clock`] moves it. `binary` must not be linked against jemalloc
    /// (Debian's `redis-server` is: libfaketime cannot start it, wolfcw/libfaketime#130);
    /// `scripts/services.sh clock-server` fetches one that is not. Errors: as `start`,
    /// or libfaketime is not installed.
    pub(crate) async fn start_with_clock(binary: &str) -> anyhow::Result<OwnRedis> {
        Self::launch(binary, Some(libfaketime()?)).await
    }

    /// `redis://127.0.0.1:PORT/`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Moves the server's wall clock forward by `by` (on top of earlier jumps). Keys whose
    /// TTL is shorter expire at once; the others keep `by` less. Errors: the server was
    /// not started with [`OwnRedis::start_with_clock`].
    pub(crate) async fn jump_clock(&mut self, by: Duration) -> anyhow::Result<()> {
        let offset = self
            .clock_offset
            .as_mut()
            .context("this server's clock cannot move: it was started without libfaketime")?;
        *offset += by;
        // libfaketime reads the offset at every clock call (FAKETIME_NO_CACHE), so the
        // jump happens at the next one; written whole, then renamed, never read half-way.
        let spec = format!("+{}.{:03}", offset.as_secs(), offset.subsec_millis());
        let staged = self.dir.join("clock.next");
        tokio::fs::write(&staged, spec).await?;
        tokio::fs::rename(&staged, self.dir.join("clock")).await?;
        Ok(())
    }

    /// Kills the server and starts it again on the same port with no data, as a restart
    /// without persistence (a new `run_id`; under libfaketime, the clock as it was).
    pub(crate) async fn restart_empty(&mut self) -> anyhow::Result<()> {
        let _ = self.child.kill().await;
        let _ = tokio::fs::remove_file(self.dir.join("dump.rdb")).await;
        self.child = spawn(
            &self.binary,
            self.port,
            &self.dir,
            self.clock_offset.is_some(),
        )?;
        wait_until_ready(self.port).await
    }

    /// Brings this server up to date with `primary` by real replication, then makes it
    /// stand alone again: afterwards it holds exactly what `primary` held, and nothing
    /// `primary` takes later. Errors: the copy did not complete within 10 s.
    pub(crate) async fn copy_from(&self, primary: &OwnRedis) -> anyhow::Result<()> {
        let mut me = connection(self.port).await?;
        let mut source = connection(primary.port).await?;
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(primary.port)
            .query_async(&mut me)
            .await?;
        let wanted = repl_offset(&mut source, "master_repl_offset").await?;
        let deadline = tokio::time::Instant::now() + READY_WITHIN;
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut me)
                .await?;
            let linked = info.lines().any(|l| l.trim() == "master_link_status:up");
            if linked && field(&info, "slave_repl_offset").is_some_and(|o| o >= wanted) {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "the copy from port {} did not complete: {info}",
                    primary.port
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query_async(&mut me)
            .await?;
        Ok(())
    }

    async fn launch(binary: &str, faketime: Option<String>) -> anyhow::Result<OwnRedis> {
        let port = free_port()?;
        remove_folders_of_dead_labs();
        let dir =
            std::env::temp_dir().join(format!("{FOLDER_PREFIX}{}-{port}", std::process::id()));
        tokio::fs::create_dir_all(&dir).await?;
        let clock_offset = faketime.map(|_| Duration::ZERO);
        if clock_offset.is_some() {
            tokio::fs::write(dir.join("clock"), "+0").await?;
        }
        let child = match spawn(binary, port, &dir, clock_offset.is_some()) {
            Ok(child) => child,
            Err(err) => {
                let _ = tokio::fs::remove_dir_all(&dir).await;
                return Err(err);
            }
        };
        let server = OwnRedis {
            binary: binary.to_owned(),
            port,
            dir,
            clock_offset,
            child,
        };
        wait_until_ready(port).await?;
        Ok(server)
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The start of each server's folder name in the temporary folder, before
/// `<lab's pid>-<port>`.
const FOLDER_PREFIX: &str = "seatlock-lab-redis-";

/// Removes the folders that labs no longer running left behind (a lab killed with SIGKILL
/// runs no destructor; its servers died with it, [`die_with_parent`]).
fn remove_folders_of_dead_labs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(FOLDER_PREFIX))
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        if !std::path::Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Makes a child process die (SIGKILL) when the thread that started it ends (Linux's
/// `PR_SET_PDEATHSIG`), as a `pre_exec` hook: a lab, test or `load-test` killed with
/// SIGKILL, whose destructors never run, leaves no server of its own behind. Tokio's
/// worker threads live as long as its runtime. Errors: prctl's.
pub fn die_with_parent() -> std::io::Result<()> {
    // SAFETY: prctl with these arguments reads and writes no memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The libfaketime preload library (Debian package `faketime`, which
/// `scripts/services.sh up` installs). Errors: not installed.
pub fn libfaketime() -> anyhow::Result<String> {
    std::fs::read_dir("/usr/lib")?
        .flatten()
        .map(|dir| dir.path().join("faketime/libfaketime.so.1"))
        .find(|lib| lib.exists())
        .map(|lib| lib.display().to_string())
        .context("libfaketime.so.1 not found: apt-get install faketime")
}

/// Starts the server process: no snapshots, no append-only file, loopback only, a
/// replica's sync served at once; under
/// libfaketime with its clock file in `dir`.
fn spawn(binary: &str, port: u16, dir: &std::path::Path, faketime: bool) -> anyhow::Result<Child> {
    let mut command = Command::new(binary);
    command
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no"])
        // A replica's sync starts at once (the default waits 5 s for more replicas).
        .args(["--repl-diskless-sync-delay", "0"])
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    // SAFETY: between fork and exec the hook only calls prctl, which is
    // async-signal-safe.
    unsafe { command.pre_exec(die_with_parent) };
    if faketime {
        command
            .env("LD_PRELOAD", libfaketime()?)
            .env("FAKETIME_TIMESTAMP_FILE", dir.join("clock"))
            .env("FAKETIME_NO_CACHE", "1");
    }
    command
        .spawn()
        .with_context(|| format!("starting {binary} for the lab"))
}

/// A free loopback port (free when asked: the kernel picks it for a listener that is
/// closed at once). The harness's servers take theirs here too.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A plain connection to the server on `port` (commands the lease library has no use
/// for: `REPLICAOF`, `INFO`).
async fn connection(port: u16) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    Ok(client.get_multiplexed_async_connection().await?)
}

/// Waits until the server on `port` answers `PING`.
async fn wait_until_ready(port: u16) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + READY_WITHIN;
    loop {
        if let Ok(mut con) = connection(port).await
            && redis::cmd("PING")
                .query_async::<String>(&mut con)
                .await
                .is_ok()
        {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the lab's own Redis on port {port} did not start");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `INFO replication` field `name` of the server on `con`.
async fn repl_offset(
    con: &mut redis::aio::MultiplexedConnection,
    name: &str,
) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(con)
        .await?;
    field(&info, name).with_context(|| format!("no {name} in INFO: {info}"))
}

/// The numeric field `name` of an `INFO` answer.
fn field(info: &str, name: &str) -> Option<u64> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|value| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(server: &OwnRedis, key: &str) -> Option<String> {
        let mut con = connection(server.port).await.unwrap();
        redis::cmd("GET")
            .arg(key)
            .query_async(&mut con)
            .await
            .unwrap()
    }

    async fn set(server: &OwnRedis, key: &str, ttl_ms: u64) {
        let mut con = connection(server.port).await.unwrap();
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("v")
            .arg("PX")
            .arg(ttl_ms)
            .query_async(&mut con)
            .await
            .unwrap();
    }

    async fn run_id(server: &OwnRedis) -> String {
        let mut con = connection(server.port).await.unwrap();
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut con)
            .await
            .unwrap();
        let line = info.lines().find(|l| l.starts_with("run_id:")).unwrap();
        line.trim().to_owned()
    }

    /// A jump longer than a key's TTL ends it now; a shorter one leaves it with less.
    /// Counted in keys, not timed: one lives an hour, one ten minutes, and the clock
    /// jumps 30 minutes.
    #[tokio::test]
    async fn a_clock_jump_expires_the_keys_it_passes_and_no_other() {
        let binary = std::env::var("SEATLOCK_LAB_CLOCK_SERVER")
            .expect("SEATLOCK_LAB_CLOCK_SERVER (scripts/services.sh up writes it to .run/env)");
        let mut server = OwnRedis::start_with_clock(&binary).await.unwrap();
        set(&server, "ten-minutes", 600_000).await;
        set(&server, "an-hour", 3_600_000).await;
        server
            .jump_clock(Duration::from_secs(30 * 60))
            .await
            .unwrap();
        assert_eq!(get(&server, "ten-minutes").await, None);
        assert_eq!(get(&server, "an-hour").await.as_deref(), Some("v"));
        // A restart keeps the clock where it was moved to.
        server.restart_empty().await.unwrap();
        set(&server, "ten-minutes", 600_000).await;
        assert_eq!(get(&server, "ten-minutes").await.as_deref(), Some("v"));
    }

    #[tokio::test]
    async fn a_plain_server_refuses_to_jump_and_restarts_empty_as_a_new_server() {
        let mut server = OwnRedis::start("redis-server").await.unwrap();
        let err = server.jump_clock(Duration::from_secs(1)).await.unwrap_err();
        assert!(err.to_string().contains("libfaketime"), "{err}");
        set(&server, "k", 600_000).await;
        let before = run_id(&server).await;
        server.restart_empty().await.unwrap();
        assert_eq!(get(&server, "k").await, None);
        assert_ne!(run_id(&server).await, before);
    }

    /// A copy holds what the primary held when it was made, and nothing after.
    #[tokio::test]
    async fn a_copy_has_the_primarys_writes_up_to_it_and_none_after() {
        let primary = OwnRedis::start("redis-server").await.unwrap();
        let replica = OwnRedis::start("redis-server").await.unwrap();
        set(&primary, "before", 600_000).await;
        replica.copy_from(&primary).await.unwrap();
        set(&primary, "after", 600_000).await;
        assert_eq!(get(&replica, "before").await.as_deref(), Some("v"));
        assert_eq!(get(&replica, "after").await, None);
        // It stands alone: it takes writes of its own.
        set(&replica, "its-own", 600_000).await;
        assert_eq!(get(&replica, "its-own").await.as_deref(), Some("v"));
    }

    /// A folder a lab killed with SIGKILL left goes at the next start; a living lab's stays.
    #[test]
    fn the_folders_of_labs_no_longer_running_are_removed_and_no_other() {
        let tmp = std::env::temp_dir();
        // Above the kernel's pid_max (at most 2^22): no process has it.
        let dead = tmp.join(format!("{FOLDER_PREFIX}4999999-1"));
        let alive = tmp.join(format!("{FOLDER_PREFIX}{}-1", std::process::id()));
        for dir in [&dead, &alive] {
            std::fs::create_dir_all(dir).unwrap();
        }
        remove_folders_of_dead_labs();
        assert!(!dead.exists());
        assert!(alive.exists());
        std::fs::remove_dir_all(alive).unwrap();
    }

    #[test]
    fn info_fields_are_read_by_their_whole_name() {
        let info =
            "# Replication\r\nrole:master\r\nmaster_repl_offset:42\r\nslave_repl_offset:7\r\n";
        assert_eq!(field(info, "master_repl_offset"), Some(42));
        assert_eq!(field(info, "slave_repl_offset"), Some(7));
        assert_eq!(field(info, "repl_offset"), None);
    }
}
