//! HAProxy in front of several `seatlock serve` processes, configured as `make scale`
//! configures it: `scripts/scale.sh config` renders `scripts/haproxy.cfg` (least
//! connections, `/readyz` checks every 500 ms and `/livez` ones for when no backend is
//! ready, `option http-no-delay` for the live streams, a `seatlock_backend` cookie
//! keeping a browser on one backend, an `X-Seatlock-Backend` header naming the backend
//! that answered). Backends are named `app1`, `app2`, … in the order given. Killed when
//! dropped.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::procs::{free_port, port_and_folder};

/// The response header naming the backend that answered (`app1`, …), set by the proxy.
pub const BACKEND_HEADER: &str = "x-seatlock-backend";
/// The cookie the proxy keeps a browser on one backend with; its value is the backend's
/// name ([`HaProxy::backend_name`]).
pub const BACKEND_COOKIE: &str = "seatlock_backend";

/// A private `haproxy` on free loopback ports in front of some backends.
pub struct HaProxy {
    /// `http://127.0.0.1:PORT`, where buyers connect.
    pub address: String,
    /// `http://127.0.0.1:PORT/`, the proxy's stats page (`;csv` for the CSV).
    pub stats_url: String,
    /// The file HAProxy logs to (its alerts: a backend going down, …).
    pub log: std::path::PathBuf,
    dir: std::path::PathBuf,
    child: std::process::Child,
}

/// What the proxy's stats say of one backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendStats {
    /// `UP`, `DOWN`, or a transition such as `UP 1/2` (one failed check of the two that
    /// take it out).
    pub status: String,
    /// Connections the proxy has sent it in total (the CSV's `stot`).
    pub sessions: u64,
}

impl HaProxy {
    /// The name the proxy gives the backend at `index` (0-based) of [`HaProxy::start`]'s
    /// list: `app1`, `app2`, …
    pub fn backend_name(index: usize) -> String {
        format!("app{}", index + 1)
    }

    /// Renders the configuration for `backends` (`http://HOST:PORT`) with
    /// `scripts/scale.sh config`, starts `haproxy` in the foreground on it, and waits
    /// until its health checks have found every backend up (at most 10 s).
    pub async fn start(backends: &[&str]) -> anyhow::Result<HaProxy> {
        let (port, dir) = port_and_folder("seatlock-haproxy")?;
        let stats_port = free_port()?;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/scale.sh");
        let rendered = tokio::process::Command::new("bash")
            .arg(script)
            .arg("config")
            .arg(format!("127.0.0.1:{port}"))
            .arg(format!("127.0.0.1:{stats_port}"))
            .args(backends.iter().map(|b| b.trim_start_matches("http://")))
            .output()
            .await
            .context("running scripts/scale.sh config")?;
        anyhow::ensure!(
            rendered.status.success(),
            "scripts/scale.sh config failed: {}",
            String::from_utf8_lossy(&rendered.stderr)
        );
        let config = dir.join("haproxy.cfg");
        std::fs::write(&config, &rendered.stdout)?;
        let log = dir.join("haproxy.log");
        let child = std::process::Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting haproxy (scripts/services.sh up installs it)")?;
        let proxy = HaProxy {
            address: format!("http://127.0.0.1:{port}"),
            stats_url: format!("http://127.0.0.1:{stats_port}/"),
            log,
            dir,
            child,
        };
        for index in 0..backends.len() {
            proxy
                .wait_for(&Self::backend_name(index), "UP", Duration::from_secs(10))
                .await?;
        }
        Ok(proxy)
    }

    /// Every backend's stats, by name, read from the stats page's CSV.
    pub async fn backends(&self) -> anyhow::Result<BTreeMap<String, BackendStats>> {
        let csv = reqwest::get(format!("{};csv", self.stats_url))
            .await?
            .error_for_status()?
            .text()
            .await?;
        parse_stats(&csv)
    }

    /// Waits until backend `name`'s status is `status` (`UP`, `DOWN`), polling the stats
    /// every 50 ms; fails after `limit` with the last status and the proxy's log.
    pub async fn wait_for(&self, name: &str, status: &str, limit: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let seen = self
                .backends()
                .await
                .ok()
                .and_then(|b| b.get(name).map(|s| s.status.clone()));
            if seen.as_deref() == Some(status) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "backend {name} is {seen:?}, not {status}, after {limit:?}; haproxy log:\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for HaProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The server rows of HAProxy's stats CSV (`# pxname,svname,…,status,…`): name →
/// status and total sessions. The frontend and backend summary rows are left out.
fn parse_stats(csv: &str) -> anyhow::Result<BTreeMap<String, BackendStats>> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines
        .next()
        .and_then(|h| h.strip_prefix("# "))
        .context("the stats CSV has no header")?
        .split(',')
        .collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|c| *c == name)
            .with_context(|| format!("the stats CSV has no {name} column"))
    };
    let (pxname, svname) = (column("pxname")?, column("svname")?);
    let (status, stot) = (column("status")?, column("stot")?);
    let mut backends = BTreeMap::new();
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        let (Some(name), Some(state)) = (fields.get(svname), fields.get(status)) else {
            continue;
        };
        // The ready servers' backend (`seatlock_live` lists the same ones, checked only
        // for being alive).
        if fields.get(pxname) != Some(&"seatlock") || matches!(*name, "FRONTEND" | "BACKEND") {
            continue;
        }
        let sessions = fields.get(stot).and_then(|n| n.parse().ok()).unwrap_or(0);
        backends.insert(
            name.to_string(),
            BackendStats {
                status: state.to_string(),
                sessions,
            },
        );
    }
    Ok(backends)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stats_csv_gives_each_servers_status_and_sessions() {
        let csv = "# pxname,svname,qcur,stot,status\n\
                   seatlock,FRONTEND,,12,OPEN\n\
                   seatlock,app1,0,7,UP\n\
                   seatlock,app2,0,5,DOWN\n\
                   seatlock,BACKEND,0,12,UP\n\
                   seatlock_live,app1,0,0,UP\n\
                   seatlock_live,app2,0,0,UP\n";
        let backends = parse_stats(csv).unwrap();
        assert_eq!(backends.len(), 2);
        assert_eq!(
            backends["app1"],
            BackendStats {
                status: "UP".into(),
                sessions: 7
            }
        );
        assert_eq!(
            backends["app2"].status, "DOWN",
            "the ready servers' backend"
        );
    }
}
