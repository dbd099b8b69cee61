//! A private PgBouncer in front of the Postgres of a `DATABASE_URL`, in the pool mode a
//! test asks for, as deployments commonly run it: `auth_type = trust` to the client, the
//! URL's own password to Postgres (the auth file), one pool per database. Killed when
//! dropped.

use anyhow::Context;
use sqlx::postgres::PgConnectOptions;

use crate::procs::port_and_folder;

/// A private `pgbouncer` on a free loopback port.
pub struct PgBouncer {
    /// The `DATABASE_URL` given to [`PgBouncer::start`], through the bouncer.
    pub url: String,
    dir: std::path::PathBuf,
    child: std::process::Child,
}

impl PgBouncer {
    /// Starts PgBouncer in front of the Postgres `database_url` names, with `pool_mode`
    /// (`session`, `transaction`, `statement`) and `ignore_startup_parameters` (the
    /// startup parameters it accepts and drops; empty: it refuses all but its own), and
    /// waits (at most 10 s) until it accepts connections. As root it runs as `postgres`
    /// (`-u`: PgBouncer refuses to run as root).
    pub async fn start(
        database_url: &str,
        pool_mode: &str,
        ignore_startup_parameters: &str,
    ) -> anyhow::Result<PgBouncer> {
        let upstream: PgConnectOptions = database_url.parse().context("parsing DATABASE_URL")?;
        let (port, dir) = port_and_folder("seatlock-pgbouncer")?;
        let password = database_url
            .split_once("://")
            .and_then(|(_, rest)| rest.split_once('@'))
            .and_then(|(user, _)| user.split_once(':'))
            .map_or("", |(_, password)| password);
        std::fs::write(
            dir.join("users.txt"),
            format!("\"{}\" \"{password}\"\n", upstream.get_username()),
        )?;
        let config = format!(
            "[databases]\n* = host={host} port={upstream_port}\n\
             [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
             auth_type = trust\nauth_file = {users}\npool_mode = {pool_mode}\n\
             ignore_startup_parameters = {ignore_startup_parameters}\n\
             default_pool_size = 20\nmax_client_conn = 200\n",
            host = upstream.get_host(),
            upstream_port = upstream.get_port(),
            users = dir.join("users.txt").display(),
        );
        let file = dir.join("pgbouncer.ini");
        std::fs::write(&file, config)?;
        let log = dir.join("pgbouncer.log");
        let mut command = std::process::Command::new("pgbouncer");
        if crate::procs::running_as_root() {
            command.args(["-u", "postgres"]);
        }
        let child = command
            .arg(&file)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting pgbouncer (scripts/services.sh up installs it)")?;
        let authority = format!("{}:{}", upstream.get_host(), upstream.get_port());
        let bouncer = PgBouncer {
            url: database_url.replacen(&authority, &format!("127.0.0.1:{port}"), 1),
            dir,
            child,
        };
        anyhow::ensure!(
            bouncer.url != database_url,
            "DATABASE_URL does not name {authority} as its host and port"
        );
        crate::procs::wait_until_listening(port, "pgbouncer", &log).await?;
        Ok(bouncer)
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
