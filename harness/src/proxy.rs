//! A TCP proxy on loopback that can make its current connections half-open: they stay
//! open at both ends but no byte passes any more (a dropped flow, a suspended host, a
//! NAT that forgot the mapping), while new connections pass normally.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running proxy; stops accepting when dropped (flows already open end with their
/// sockets).
pub struct TcpProxy {
    /// The address to connect to instead of the upstream.
    pub address: std::net::SocketAddr,
    /// How many times open flows were frozen; a flow that started when it was lower is.
    frozen_below: Arc<AtomicU64>,
    accept: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    /// Starts forwarding a new loopback port to `upstream`.
    pub async fn start(upstream: std::net::SocketAddr) -> anyhow::Result<TcpProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let frozen_below = Arc::new(AtomicU64::new(0));
        let accept = tokio::spawn({
            let frozen_below = frozen_below.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        continue;
                    };
                    // A flow is frozen once the count of freezes passes the count at its start.
                    let flow = frozen_below.load(Ordering::SeqCst);
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    for (from, to) in [
                        (
                            Box::new(client_read) as Box<dyn Reader>,
                            Box::new(server_write) as Box<dyn Writer>,
                        ),
                        (Box::new(server_read), Box::new(client_write)),
                    ] {
                        tokio::spawn(relay(from, to, flow, frozen_below.clone()));
                    }
                }
            }
        });
        Ok(TcpProxy {
            address,
            frozen_below,
            accept,
        })
    }

    /// Freezes every connection open now: from here on they carry nothing, in either
    /// direction, and never close. Connections made later pass.
    pub fn freeze_open_connections(&self) {
        self.frozen_below.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

trait Reader: tokio::io::AsyncRead + Unpin + Send {}
impl<T: tokio::io::AsyncRead + Unpin + Send> Reader for T {}
trait Writer: tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncWrite + Unpin + Send> Writer for T {}

/// Copies `from` to `to` until either closes, or until the flow is frozen: then holds both
/// ends open forever, passing nothing.
async fn relay(
    mut from: Box<dyn Reader>,
    mut to: Box<dyn Writer>,
    flow: u64,
    frozen_below: Arc<AtomicU64>,
) {
    let frozen = || flow < frozen_below.load(Ordering::SeqCst);
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            _ = until(frozen) => break,
        };
        let Ok(n) = read else { return };
        if n == 0 || frozen() {
            if n == 0 {
                return;
            }
            break;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
    // Half-open: keep both sockets, move nothing.
    std::future::pending::<()>().await;
    drop((from, to));
}

/// Resolves once `condition` holds, checking every 20 ms.
async fn until(condition: impl Fn() -> bool) {
    while !condition() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
