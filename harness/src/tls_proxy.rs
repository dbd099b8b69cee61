//! A TLS-terminating reverse proxy in front of one `seatlock serve`, configured the way
//! such proxies usually are: HAProxy accepts https with a self-signed certificate for
//! `127.0.0.1`, writes the buyer's scheme and host into `X-Forwarded-Proto` and
//! `X-Forwarded-Host`, and then rewrites `Host` to the upstream's name (nginx's default,
//! `proxy_set_header Host $proxy_host`). It connects to the server from
//! [`TlsProxy::SOURCE`], so a server can trust that address alone and tests can still
//! reach the server directly from `127.0.0.1`, as a stranger. Killed when dropped.

use anyhow::Context;

use crate::procs::port_and_folder;

/// A private HAProxy terminating TLS on a free loopback port.
pub struct TlsProxy {
    port: u16,
    dir: std::path::PathBuf,
    /// The proxy's certificate (PEM): what a buyer must trust ([`crate::HttpBuyer::trusting`]).
    pub certificate: Vec<u8>,
    child: Option<std::process::Child>,
}

impl TlsProxy {
    /// The address the proxy connects to its backend from (all of 127/8 is loopback on
    /// Linux): the one to list in `--trusted-proxies`.
    pub const SOURCE: &str = "127.0.0.2";
    /// The `Host` the proxy sends its backend, whatever the buyer's was.
    pub const UPSTREAM_HOST: &str = "seatlock-upstream";

    /// Picks a port and makes a certificate for `127.0.0.1` (openssl, one day, P-256),
    /// so a server can be told the proxy's origin before [`TlsProxy::start`].
    pub fn new() -> anyhow::Result<TlsProxy> {
        let (port, dir) = port_and_folder("seatlock-tls-proxy")?;
        let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
        let made = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
            .args([
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .context("running openssl")?;
        anyhow::ensure!(
            made.status.success(),
            "openssl req failed: {}",
            String::from_utf8_lossy(&made.stderr)
        );
        let certificate = std::fs::read(&cert)?;
        // HAProxy wants the certificate and its key in one file.
        let mut both = certificate.clone();
        both.extend(std::fs::read(&key)?);
        std::fs::write(dir.join("proxy.pem"), both)?;
        Ok(TlsProxy {
            port,
            dir,
            certificate,
            child: None,
        })
    }

    /// `https://127.0.0.1:PORT`, where buyers connect (and the server's public origin).
    pub fn address(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// Starts HAProxy in front of `backend` (`http://HOST:PORT`) and waits (at most 10 s)
    /// until it accepts connections.
    pub async fn start(&mut self, backend: &str) -> anyhow::Result<()> {
        let config = format!(
            "global\n    maxconn 256\n\
             defaults\n    mode http\n    timeout connect 2s\n    timeout client 30s\n    timeout server 30s\n\
             frontend tls\n    bind 127.0.0.1:{port} ssl crt {pem}\n\
             \x20   http-request set-header X-Forwarded-Proto https\n\
             \x20   http-request set-header X-Forwarded-Host %[req.hdr(host)]\n\
             \x20   http-request set-header Host {upstream}\n\
             \x20   default_backend app\n\
             backend app\n    server app1 {backend} source {source}\n",
            port = self.port,
            pem = self.dir.join("proxy.pem").display(),
            upstream = Self::UPSTREAM_HOST,
            backend = backend.trim_start_matches("http://"),
            source = Self::SOURCE,
        );
        let file = self.dir.join("haproxy.cfg");
        std::fs::write(&file, config)?;
        let log = self.dir.join("haproxy.log");
        self.child = Some(
            std::process::Command::new("haproxy")
                .arg("-db")
                .arg("-f")
                .arg(&file)
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(&log)?)
                .spawn()
                .context("starting haproxy (scripts/services.sh up installs it)")?,
        );
        crate::procs::wait_until_listening(self.port, "haproxy", &log).await
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
