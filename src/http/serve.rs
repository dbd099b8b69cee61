//! The HTTP server loop: the application's router on hyper's HTTP/1.1 connections, with
//! the limits that `axum::serve` does not set, against slow or abusive clients.
//!
//! * A request's headers must arrive within [`Limits::header_timeout`] (hyper's
//!   `header_read_timeout`): a connection that sends part of its headers and then nothing
//!   (slowloris) is closed. A request body has the same time, for the whole of it, and
//!   gets a 408 past it ([`crate::http::deadline::bound`]).
//! * At most [`Limits::max_connections`] connections are served at once; further ones
//!   wait in the kernel's accept queue until one closes. Live pages' event streams are
//!   budgeted apart, below it ([`crate::live::LiveHub`]), so requests always have room.
//!   [`fit_open_files`] makes the process's open-file limit hold them.
//! * A response may take as long as it likes, so live pages' event streams are not cut.
//!
//! Shutdown is graceful: stop accepting, then wait for the open connections to finish
//! (the live hub ends its streams first, see [`crate::app::Application::run_until`]).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// How much a client may hold of the server.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Time for a request's headers (and, in the router, its body) to arrive.
    pub header_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

/// Open files kept for everything but client connections: the stores' connections,
/// the listeners, logs and the like.
const FILES_FOR_THE_REST: u64 = 512;

/// Raises this process's open-file limit (`RLIMIT_NOFILE`, the soft one, up to the hard
/// one) to fit `max_connections` client connections and the files kept for the rest
/// (`FILES_FOR_THE_REST`), and
/// returns how many connections fit: `max_connections`, or fewer where the system's
/// hard limit is lower (then the caller scales its budgets down and says so). Without
/// this, connection 1,025 on a default Linux limit fails to be accepted, however large
/// the budget.
pub fn fit_open_files(max_connections: u64) -> u64 {
    let needed = max_connections + FILES_FOR_THE_REST;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed to them.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return max_connections;
        }
        if limit.rlim_cur < needed {
            limit.rlim_cur = needed.min(limit.rlim_max);
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
            }
        }
    }
    max_connections.min(limit.rlim_cur.saturating_sub(FILES_FOR_THE_REST).max(2))
}

/// Serves `router` on `listener` within `limits` until `shutdown` completes, then waits
/// for the connections in flight to finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = accept(&listener, &permits) => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer, permit) = accepted;
        // The peer's address goes with each request, for axum's `ConnectInfo`: whether
        // it is a trusted proxy decides if its forwarded headers count (`http::proxy`).
        let service = router
            .clone()
            .map_request(move |request: hyper::Request<Incoming>| {
                let mut request = request.map(Body::new);
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::trace!(error = %err, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The next connection and its peer's address, once a permit is free; accept errors (too many open files, a
/// connection reset before it was accepted) are retried after a moment.
async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
) -> (
    tokio::net::TcpStream,
    SocketAddr,
    tokio::sync::OwnedSemaphorePermit,
) {
    let permit = permits
        .clone()
        .acquire_owned()
        .await
        .expect("the semaphore is never closed");
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => return (stream, peer, permit),
            Err(err) => {
                tracing::debug!(error = %err, "accept failed; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
