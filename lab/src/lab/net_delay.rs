//! The fault "A's write is delayed in the network" (Kleppmann's other slow holder: not a
//! process that stops, a packet that arrives late): a TCP proxy between server A and
//! Postgres, on a loopback port of its own for one run. Bytes pass both ways as they
//! come, until the lab arms it: then the next bytes A sends (its write's first packet)
//! are held for the delay before they go on. A sent its write inside its lease; Postgres
//! receives it after the lease ran out and the next holder wrote. Nothing is simulated:
//! the write is A's real transaction, late.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

/// A proxy to Postgres for one server, and a pool of one connection through it.
pub(super) struct DelayedLink {
    /// Server A's pool: one connection, through the proxy.
    pub db: PgPool,
    /// The delay the next packet A sends is held for, once armed.
    armed: Arc<Mutex<Option<Duration>>>,
    proxy: JoinHandle<()>,
}

impl DelayedLink {
    /// Starts a proxy on a free loopback port to the Postgres `db` connects to, and
    /// opens a one-connection pool through it (connected now, before the start line).
    pub(super) async fn open(db: &PgPool) -> anyhow::Result<DelayedLink> {
        let options: PgConnectOptions = (*db.connect_options()).clone();
        let target = format!("{}:{}", options.get_host(), options.get_port());
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let armed = Arc::new(Mutex::new(None));
        let proxy = tokio::spawn(serve(listener, target, armed.clone()));
        let db = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .connect_with(options.host("127.0.0.1").port(port))
            .await?;
        Ok(DelayedLink { db, armed, proxy })
    }

    /// Holds the next bytes A sends for `delay`.
    pub(super) async fn arm(&self, delay: Duration) {
        *self.armed.lock().await = Some(delay);
    }
}

impl Drop for DelayedLink {
    fn drop(&mut self) {
        // The pool's connection closes with the pool; the proxy stops here.
        self.proxy.abort();
    }
}

/// Accepts A's connections and relays each to `target`.
async fn serve(listener: TcpListener, target: String, armed: Arc<Mutex<Option<Duration>>>) {
    let mut relays = tokio::task::JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        let (target, armed) = (target.clone(), armed.clone());
        relays.spawn(async move {
            if let Ok(server) = TcpStream::connect(&target).await {
                relay(client, server, armed).await;
            }
        });
    }
}

/// Copies bytes both ways until either side closes; A's side through the armed delay.
async fn relay(client: TcpStream, server: TcpStream, armed: Arc<Mutex<Option<Duration>>>) {
    let (mut from_client, mut to_server) = (client.into_split(), server.into_split());
    let upstream = async {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            let n = match from_client.0.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // Armed: these bytes (the write's first packet) wait in the network.
            let delay = armed.lock().await.take();
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            if to_server.1.write_all(&buffer[..n]).await.is_err() {
                break;
            }
        }
    };
    let downstream = tokio::io::copy(&mut to_server.0, &mut from_client.1);
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
    }
}
