//! Real processes a test owns and controls by PID on loopback: `seatlock serve` children,
//! a private `redis-server`, a private PostgreSQL. Each is killed when its guard drops,
//! even when a test panics.

use std::time::Duration;

use anyhow::{Context, bail};
use seatlock::config::Settings;
use seatlock_lab::LabSettings;

use crate::stores::unique_name;

/// Makes the child of `command` die (SIGKILL) when the thread that starts it ends (Linux's
/// `PR_SET_PDEATHSIG`): a test or a `load-test` run killed with SIGKILL, whose destructors
/// never run, leaves no Redis, Sentinel, etcd or server behind, nor one stopped for good.
pub(crate) fn dies_with_parent(command: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure only calls prctl, which is async-signal-safe.
    unsafe { command.pre_exec(die_with_parent) }
}

/// The `pre_exec` hook of [`dies_with_parent`], for `tokio::process::Command` too: the
/// lab's, which starts servers of its own with it.
use seatlock_lab::lab::die_with_parent;

/// A free loopback port: the lab's, which starts servers of its own on them too.
pub(crate) use seatlock_lab::lab::free_port;

/// Waits (at most 10 s) until something accepts connections on loopback `port`; fails
/// with `what` and the text of `log` (the process's stderr) otherwise.
pub(crate) async fn wait_until_listening(
    port: u16,
    what: &str,
    log: &std::path::Path,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{what} did not listen: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// `127.0.0.1:P1,127.0.0.1:P2,…`: the host list of a Sentinel or cluster URL.
pub(crate) fn loopback_hosts(ports: impl IntoIterator<Item = u16>) -> String {
    let hosts: Vec<String> = ports
        .into_iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    hosts.join(",")
}

/// A free loopback port ([`free_port`]) and a new, empty temporary folder named after
/// `prefix`, for a private server.
pub(crate) fn port_and_folder(prefix: &str) -> anyhow::Result<(u16, std::path::PathBuf)> {
    let port = free_port()?;
    let dir = std::env::temp_dir().join(unique_name(prefix));
    std::fs::create_dir_all(&dir)?;
    Ok((port, dir))
}

/// The workspace's target directory: `CARGO_TARGET_DIR` (a relative one is taken from
/// the workspace root), else `<workspace>/target`.
pub fn target_dir() -> std::path::PathBuf {
    let workspace = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    match std::env::var_os("CARGO_TARGET_DIR").map(std::path::PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir,
        Some(dir) => workspace.join(dir),
        None => workspace.join("target"),
    }
}

/// `<target dir>/debug/seatlock`, built beforehand: cargo builds no binary of another
/// package for a crate's tests, so `make test` runs `cargo build --workspace --bins` first.
pub fn seatlock_binary() -> anyhow::Result<std::path::PathBuf> {
    let binary = target_dir().join("debug").join("seatlock");
    anyhow::ensure!(
        binary.is_file(),
        "the server binary {} is missing: run `cargo build --workspace --bins` first \
         (`make test` does)",
        binary.display()
    );
    Ok(binary)
}

/// `<target dir>/debug/seatlock-lab`, built beforehand as [`seatlock_binary`]: the
/// product's server with the race lab plugged in.
pub fn lab_binary() -> anyhow::Result<std::path::PathBuf> {
    let binary = target_dir().join("debug").join("seatlock-lab");
    anyhow::ensure!(
        binary.is_file(),
        "the lab's server binary {} is missing: run `cargo build --workspace --bins` first \
         (`make test` does)",
        binary.display()
    );
    Ok(binary)
}

/// A private `redis-server` on a free loopback port, owned by one test: for tests that
/// kill or restart the lock store. Stopped when dropped.
pub struct RedisServer {
    /// The port it listens on.
    pub port: u16,
    dir: std::path::PathBuf,
    child: Option<std::process::Child>,
    /// Extra `redis-server` arguments, kept across restarts.
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts one (no persistence: a restart comes back empty) and waits until it answers.
    pub async fn start() -> anyhow::Result<RedisServer> {
        Self::start_with(&[]).await
    }

    /// [`RedisServer::start`] with extra `redis-server` arguments, e.g.
    /// `["--maxmemory-policy", "volatile-lru"]` or `["--rename-command", "CONFIG", ""]` (a
    /// managed Redis that refuses `CONFIG`).
    ///
    /// The port is free when picked, and may be taken before the server binds it; a
    /// cluster node also needs its bus port, 10,000 above, which the system may have
    /// handed to a connection meanwhile (seen once in CI). So a server that does not
    /// start is tried again on another port, three times in all.
    pub async fn start_with(extra: &[&str]) -> anyhow::Result<RedisServer> {
        let cluster = extra.contains(&"--cluster-enabled");
        let mut failed = 0;
        loop {
            let (port, dir) = port_and_folder("seatlock-redis")?;
            // A cluster node's bus port must exist and be free too.
            if cluster
                && (port > u16::MAX - 10_000
                    || std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_err())
            {
                let _ = std::fs::remove_dir_all(&dir);
                continue;
            }
            let mut server = RedisServer {
                port,
                dir,
                child: None,
                extra: extra.iter().map(|a| a.to_string()).collect(),
            };
            match server.launch().await {
                Ok(()) => return Ok(server),
                Err(err) if failed == 2 => return Err(err),
                Err(_) => failed += 1,
            }
        }
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Sends `signal` (`STOP`: a suspended host whose connections stay open but never
    /// answer; `CONT`) to the server.
    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let pid = self
            .child
            .as_ref()
            .context("redis-server is not running")?
            .id();
        send_signal(pid, signal)
    }

    /// Whether the server was started and not killed since.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the server (SIGKILL: nothing is saved).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// [`RedisServer::restart_empty`] as a replica of the Redis on loopback port
    /// `primary` (`--replicaof`), or as a primary (`None`); kept across later restarts.
    pub async fn restart_empty_replicating(&mut self, primary: Option<u16>) -> anyhow::Result<()> {
        if let Some(at) = self.extra.iter().position(|a| a == "--replicaof") {
            self.extra.drain(at..at + 3);
        }
        if let Some(port) = primary {
            self.extra
                .extend(["--replicaof".into(), "127.0.0.1".into(), port.to_string()]);
        }
        self.restart_empty().await
    }

    /// Kills the server if running and starts a new, empty one on the same port.
    pub async fn restart_empty(&mut self) -> anyhow::Result<()> {
        // A snapshot a test took (`SAVE`) would be loaded: this restart loses everything.
        let _ = std::fs::remove_file(self.dir.join("dump.rdb"));
        self.launch().await
    }

    /// Kills the server (SIGKILL) and starts it again on the same port from the snapshot
    /// its last `SAVE` wrote: what a crashed Redis restarted from its RDB file comes back
    /// with, the writes after the snapshot lost. Errors: no `SAVE` was sent.
    pub async fn restart_from_snapshot(&mut self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.dir.join("dump.rdb").is_file(),
            "no snapshot to restart from: send SAVE first"
        );
        self.launch().await
    }

    /// Kills the server if running and starts one on the same port and folder, with
    /// whatever snapshot the folder holds.
    async fn launch(&mut self) -> anyhow::Result<()> {
        self.kill();
        let child = dies_with_parent(&mut std::process::Command::new("redis-server"))
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(std::process::Stdio::null())
            .spawn()
            .context("starting redis-server (apt-get install redis-server)")?;
        self.child = Some(child);
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!("redis-server did not start on port {}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The libfaketime preload library, for a server whose wall clock is offset (`FAKETIME`)
/// or moved while it runs (`FAKETIME_TIMESTAMP_FILE`): the lab's, which starts servers
/// under it too.
pub use seatlock_lab::lab::libfaketime;

/// A `seatlock serve` child process on a free loopback port: for tests and the load test
/// that need separate server processes (to pause them with SIGSTOP, or to race them).
/// Its log (stderr) goes to [`ServerProcess::log`]. Killed when dropped.
pub struct ServerProcess {
    /// `http://127.0.0.1:PORT`.
    pub address: String,
    /// `http://127.0.0.1:PORT/metrics`, on the server's metrics listener.
    pub metrics_url: String,
    /// The file the server logs to.
    pub log: std::path::PathBuf,
    child: tokio::process::Child,
}

impl ServerProcess {
    /// Starts `binary serve` with `settings` passed as environment variables
    /// ([`Settings::to_env`]: every field; both listeners forced to `127.0.0.1:0`) and waits for
    /// the lines announcing their addresses.
    pub async fn start(
        binary: &std::path::Path,
        settings: &Settings,
    ) -> anyhow::Result<ServerProcess> {
        Self::start_with_env(binary, settings, &[]).await
    }

    /// [`ServerProcess::start`] of a `seatlock-lab` binary, with the lab's settings `lab`
    /// passed as environment variables too ([`LabSettings::to_env`]).
    pub async fn start_lab(
        binary: &std::path::Path,
        settings: &Settings,
        lab: &LabSettings,
    ) -> anyhow::Result<ServerProcess> {
        Self::start_lab_with_env(binary, settings, lab, &[]).await
    }

    /// [`ServerProcess::start_lab`] with extra environment variables, as
    /// [`ServerProcess::start_with_env`].
    pub async fn start_lab_with_env(
        binary: &std::path::Path,
        settings: &Settings,
        lab: &LabSettings,
        env: &[(&str, &str)],
    ) -> anyhow::Result<ServerProcess> {
        let lab_env = lab.to_env();
        let mut all: Vec<(&str, &str)> = lab_env
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        all.extend_from_slice(env);
        Self::start_with_env(binary, settings, &all).await
    }

    /// [`ServerProcess::start`] with extra environment variables (e.g. `LD_PRELOAD` of
    /// libfaketime, to run the server with an offset clock).
    pub async fn start_with_env(
        binary: &std::path::Path,
        settings: &Settings,
        env: &[(&str, &str)],
    ) -> anyhow::Result<ServerProcess> {
        use tokio::io::AsyncBufReadExt;
        let log = std::env::temp_dir().join(format!("{}.log", unique_name("seatlock-serve")));
        let mut command = tokio::process::Command::new(binary);
        // SAFETY: as in `dies_with_parent`.
        unsafe { command.pre_exec(die_with_parent) };
        command
            .arg("serve")
            .envs(settings.to_env())
            .env("SEATLOCK_BIND", "127.0.0.1:0")
            .env("SEATLOCK_METRICS_BIND", "127.0.0.1:0")
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true);
        command.envs(env.iter().copied());
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stdout = child.stdout.take().context("server stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let announced = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .context("server did not announce its address within 30 s")??
            .with_context(|| {
                format!(
                    "server exited before announcing its address; its log ({}):\n{}",
                    log.display(),
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            })?;
        let url_in = |line: &str| {
            line.split_whitespace()
                .find(|w| w.starts_with("http://"))
                .map(str::to_owned)
                .with_context(|| format!("unexpected announcement {line:?}"))
        };
        let address = url_in(&announced)?;
        let metrics_url = url_in(&lines.next_line().await?.unwrap_or_default())?;
        // Keep draining stdout so the server never writes into a closed pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(ServerProcess {
            address,
            metrics_url,
            log,
            child,
        })
    }

    /// The child's process id (for SIGSTOP / SIGCONT / SIGKILL in fault tests).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sends `signal` (`STOP`, `CONT`, `KILL`, …) to the server with `kill(1)`.
    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let pid = self.pid().context("the server has exited")?;
        send_signal(pid, signal)
    }

    /// Waits at most `limit` for the server to exit by itself (after a SIGTERM's drain),
    /// and reaps it.
    pub async fn exited_within(
        &mut self,
        limit: Duration,
    ) -> anyhow::Result<std::process::ExitStatus> {
        tokio::time::timeout(limit, self.child.wait())
            .await
            .with_context(|| format!("the server was still running after {limit:?}"))?
            .context("waiting for the server")
    }

    /// Kills the server at once (SIGKILL: no graceful shutdown, in-flight requests die)
    /// and reaps it.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill().await?;
        Ok(())
    }
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`, …) to process `pid` with `kill(1)`.
pub fn send_signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .context("running kill")?;
    anyhow::ensure!(status.success(), "kill -{signal} {pid} failed");
    Ok(())
}

/// A private PostgreSQL server on a free loopback port, owned by one test: for tests that
/// stop or restart the database under a running application. Made like
/// `scripts/services.sh` does (`initdb`, `pg_ctl`, as the `postgres` user through
/// `runuser` when the tests run as root), trusting loopback connections, `fsync=off`.
/// Stopped (immediate mode) and deleted when dropped.
pub struct PostgresServer {
    /// The port it listens on.
    pub port: u16,
    dir: std::path::PathBuf,
    bin: std::path::PathBuf,
}

impl PostgresServer {
    /// Creates a cluster in a temporary folder and starts it.
    pub async fn start() -> anyhow::Result<PostgresServer> {
        let (port, dir) = port_and_folder("seatlock-pg")?;
        std::fs::create_dir_all(dir.join("sock"))?;
        let server = PostgresServer {
            port,
            bin: postgres_bin_dir()?,
            dir,
        };
        if running_as_root() {
            let chown = tokio::process::Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&server.dir)
                .status()
                .await?;
            anyhow::ensure!(chown.success(), "chown to postgres failed");
        }
        server
            .run(
                "initdb",
                &[
                    "-U",
                    "postgres",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                    "--auth=trust",
                ],
            )
            .await?;
        server.start_again().await?;
        Ok(server)
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`, a role that may create databases
    /// (for [`crate::fresh_database`]).
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server: `mode` is `pg_ctl`'s `fast` (roll back open transactions,
    /// disconnect everyone) or `immediate` (like a crash: recovery on the next start).
    pub async fn stop(&self, mode: &str) -> anyhow::Result<()> {
        self.run("pg_ctl", &["-m", mode, "-w", "stop"]).await
    }

    /// Starts the (stopped) server again on the same port and waits until it accepts
    /// connections.
    pub async fn start_again(&self) -> anyhow::Result<()> {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -c unix_socket_directories={} -c fsync=off",
            self.port,
            self.dir.join("sock").display()
        );
        let log = self.dir.join("log");
        let log = log.to_str().context("temporary folder path is not UTF-8")?;
        self.run("pg_ctl", &["-l", log, "-w", "-o", &options, "start"])
            .await
    }

    /// `bin` (`initdb`, `pg_ctl`) of the Postgres installation on the data folder, as
    /// `postgres` when root (Postgres refuses to run as root).
    fn command(&self, bin: &str) -> std::process::Command {
        let program = self.bin.join(bin);
        let mut command = if running_as_root() {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            std::process::Command::new(program)
        };
        command.arg("-D").arg(self.dir.join("data"));
        command
    }

    /// Runs [`Self::command`] with `args`; fails with its output unless it succeeds.
    async fn run(&self, bin: &str, args: &[&str]) -> anyhow::Result<()> {
        let output = tokio::process::Command::from(self.command(bin))
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .with_context(|| format!("running {bin}"))?;
        anyhow::ensure!(
            output.status.success(),
            "{bin} {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether this process runs as root (Postgres refuses to, hence `runuser`).
pub(crate) fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The folder of `initdb` and `pg_ctl`: `PG_BIN`, else the newest
/// `/usr/lib/postgresql/*/bin` (Debian), else the folder of `initdb` on the `PATH`.
fn postgres_bin_dir() -> anyhow::Result<std::path::PathBuf> {
    if let Ok(dir) = std::env::var("PG_BIN") {
        return Ok(dir.into());
    }
    let mut versions: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin)| bin.join("initdb").exists())
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).find(|dir| dir.join("initdb").exists()))
        .context("initdb not found: apt-get install postgresql (or set PG_BIN)")
}
