//! The connection of a [`RedisStore`](super::RedisStore), and its repairs.
//!
//! redis-rs's `ConnectionManager` is multiplexed and reconnects by itself. Two repairs it
//! does not make, so the store makes them:
//!
//! * **A connection the server closed.** A managed Redis closes idle connections, and so
//!   do NATs and proxies. The next request fails while the manager reconnects. The store
//!   sends that request once more, on the new connection. Every script of this crate is
//!   safe to run twice: acquire is idempotent for its owner token, release and renew
//!   compare first, retire adds to a set, and the rest are reads.
//! * **A connection that stopped answering.** A dropped flow or a suspended host leaves
//!   the connection half open. Each request times out, and the manager keeps the dead
//!   connection. So after a timeout the store replaces it. The timed-out request may have
//!   run, so it is not sent again.
//!
//! The Sentinels may also name a new primary: `Current::follow` moves to it.

use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::sentinel::{SENTINEL_POLL, Sentinels};
use crate::telemetry;

/// A connection a [`RedisStore`](super::RedisStore) hands out (a cheap handle, like redis-rs's own): to one
/// server, or to a Redis Cluster, which sends each command to the master of its key's
/// slot. Both are multiplexed and reconnect by themselves; run commands on it with
/// `query_async` or redis-rs's `AsyncCommands`.
#[derive(Clone)]
pub enum Connection {
    /// One server: the URL's, or the primary the Sentinels name.
    Server(ConnectionManager),
    /// The nodes of a `redis+cluster://` URL.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Server(conn) => conn.req_packed_command(cmd),
            Connection::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Server(conn) => conn.req_packed_commands(cmd, offset, count),
            Connection::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Server(conn) => conn.get_db(),
            Connection::Cluster(conn) => conn.get_db(),
        }
    }
}

/// The server a store talks to, and its connection. Both change when the Sentinels name
/// another primary. The connection also changes after a timeout.
pub(super) struct Current {
    /// The server; for a cluster, the first node of the URL.
    pub(super) client: RwLock<Client>,
    pub(super) connection: RwLock<Connection>,
    pub(super) config: ConnectionManagerConfig,
    /// The nodes of a `redis+cluster://` URL: each connection is to the cluster.
    pub(super) cluster: Option<ClusterClient>,
    /// Bounds connecting, each response and each question to the Sentinels.
    pub(super) timeout: Duration,
}

impl Current {
    pub(super) fn client(&self) -> Client {
        self.client
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(super) fn connection(&self) -> Connection {
        self.connection
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A new, lazily connected connection: to the cluster, or to `client`'s server.
    fn fresh(&self, client: Client) -> RedisResult<Connection> {
        lazy_connection(self.cluster.as_ref(), client, &self.config, self.timeout)
    }

    /// Asks every Sentinel for the primary; if a majority name another server than the
    /// current one, connects to it from now on. Returns whether the server changed (here
    /// or by a round that asked while this one waited). No majority (Sentinels down,
    /// hung, or disagreeing mid-failover) changes nothing: a request fails, and a later
    /// round asks again.
    pub(super) async fn follow(&self, sentinels: &Sentinels) -> bool {
        let before = self.client().get_connection_info().addr().clone();
        let _asking = sentinels.asking.lock().await;
        if *self.client().get_connection_info().addr() != before {
            return true; // another round followed the failover while this one waited
        }
        let Some(primary) = sentinels.majority(self.timeout).await else {
            return false;
        };
        if *primary.get_connection_info().addr() == before {
            return false;
        }
        let Ok(fresh) = self.fresh(primary.clone()) else {
            return false;
        };
        *self.client.write().unwrap_or_else(|e| e.into_inner()) = primary;
        *self.connection.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        true
    }

    /// Replaces the current connection with a new, lazily connected one.
    pub(super) fn replace(&self) {
        // Only a malformed client config fails here, and it was built once already: on
        // failure keep the old connection; the next timeout tries again.
        if let Ok(fresh) = self.fresh(self.client()) {
            metrics::counter!(telemetry::REDIS_REPAIRS_TOTAL, "repair" => "replaced").increment(1);
            *self.connection.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        }
    }
}

/// A new connection, made on its first request: to `cluster` when given, else to
/// `client`'s server with `config`; `timeout` bounds connecting and each response.
pub(super) fn lazy_connection(
    cluster: Option<&ClusterClient>,
    client: Client,
    config: &ConnectionManagerConfig,
    timeout: Duration,
) -> RedisResult<Connection> {
    Ok(match cluster {
        Some(cluster) => {
            let config = ClusterConfig::new()
                .set_connection_timeout(timeout)
                .set_response_timeout(timeout);
            Connection::Cluster(cluster.get_pending_async_connection_with_config(config))
        }
        None => Connection::Server(ConnectionManager::new_lazy_with_config(
            client,
            config.clone(),
        )?),
    })
}

/// Asks the Sentinels every [`SENTINEL_POLL`] and follows a new primary, until the store
/// whose `current` this is has been dropped.
pub(super) async fn poll(current: Weak<Current>, sentinels: Arc<Sentinels>) {
    loop {
        tokio::time::sleep(SENTINEL_POLL).await;
        let Some(current) = current.upgrade() else {
            return;
        };
        if current.follow(&sentinels).await {
            metrics::counter!(telemetry::REDIS_REPAIRS_TOTAL, "repair" => "new_primary_polled")
                .increment(1);
        }
    }
}
