//! The Redis connection of a [`LeaseClient`](crate::LeaseClient): one [`RedisStore`].
//!
//! A store opens on one of three kinds of URL:
//!
//! * `redis://host:port/db`: one server.
//! * `redis+sentinel://host:port,host:port/<master name>`: the primary the Sentinels
//!   name.
//! * `redis+cluster://host:port,host:port`: any nodes of a Redis Cluster.
//!
//! Each request is one round trip, timed under its operation's name. The store repairs
//! what redis-rs does not, each in its own file:
//!
//! * **A dropped connection** (`connection.rs`). A managed Redis, a NAT or a proxy may
//!   close an idle connection. The request that finds it closed is sent once more. Every
//!   script of this crate is safe to run twice.
//! * **A connection that stopped answering** (`connection.rs`). After a timeout the store
//!   replaces the connection. The timed-out request is not sent again.
//! * **A Sentinel failover** (`sentinel.rs`). The store asks every Sentinel, and follows
//!   the primary a majority names. It asks every [`SENTINEL_POLL`], and at once after an
//!   error a failover causes. So it also leaves an old primary cut off by a partition.
//! * **A Cluster's moves and failovers** (`cluster.rs`). redis-rs's cluster connection
//!   follows `MOVED` and `ASK`, and resends on `TRYAGAIN` and `CLUSTERDOWN`. Each script
//!   touches one group's hash tag, so it runs on one slot's master. Pub/sub is per node:
//!   see [`RedisStore::pubsub_nodes`]. `docs/cluster.md` explains the design.

mod cluster;
mod connection;
pub(crate) mod library;
mod sentinel;

use std::future::Future;
use std::sync::Arc;
use std::sync::RwLock;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::cluster::ClusterClient;
use redis::{Client, Cmd, FromRedisValue, RedisResult, ScriptInvocation};

pub use self::connection::Connection;
use self::connection::{Current, lazy_connection, poll};
use self::library::{FunctionCall, Library};
pub use self::sentinel::SENTINEL_POLL;
use self::sentinel::{Sentinels, after_failover, named_primary, sentinel_client, sentinels};
use crate::telemetry;

/// The URL scheme that names Sentinels instead of a Redis server.
pub const SENTINEL_SCHEME: &str = "redis+sentinel://";

/// The URL scheme that names nodes of a Redis Cluster: `redis+cluster://host:port,host:port`.
pub const CLUSTER_SCHEME: &str = "redis+cluster://";

/// One logical Redis connection that repairs itself, as the module docs say.
pub struct RedisStore {
    /// The server and the connection to it, shared with the Sentinel poll.
    current: Arc<Current>,
    /// The Sentinels, for a `redis+sentinel://` URL.
    sentinels: Option<Arc<Sentinels>>,
}

impl RedisStore {
    /// A store over the Redis at `url`. `timeout` bounds connecting and every response.
    ///
    /// * `redis://host:port/db` connects lazily: nothing is sent until the first request.
    /// * `redis+sentinel://host:port,host:port/<master name>` asks the Sentinels for the
    ///   primary now, in one blocking question. It asks again after a failover.
    /// * `redis+cluster://host:port,host:port` connects lazily too, in the caller's Tokio
    ///   runtime. Outside one, it is an error.
    ///
    /// With Sentinels, the blocking question has no bound. redis-rs's blocking client
    /// sets no read timeout. So a Sentinel or a primary that hangs blocks the calling
    /// thread until it wakes. Async code calls [`RedisStore::open_async`].
    ///
    /// Errors: a malformed URL. With Sentinels, none of them naming a reachable primary.
    pub fn open(url: &str, timeout: Duration) -> RedisResult<Self> {
        if let Some(rest) = url.strip_prefix(CLUSTER_SCHEME) {
            let (client, cluster) = cluster::client(rest, timeout)?;
            return Self::with_target(client, Some(cluster), None, timeout);
        }
        match url.strip_prefix(SENTINEL_SCHEME) {
            None => Self::with_client(Client::open(url)?, None, timeout),
            Some(rest) => {
                let primary = sentinel_client(rest)?.get_client()?;
                Self::with_client(primary, Some(sentinels(rest)?), timeout)
            }
        }
    }

    /// [`RedisStore::open`] for async code: every Sentinel is asked at once (each for at
    /// most `timeout`, so a hung one is outvoted) and the address a majority names is
    /// taken; with no majority, the first Sentinel to answer in the URL's order names it
    /// (so that the store starts at all; its poll follows a majority once there is one).
    /// The address is unverified: a primary that is down (its failover not over) is
    /// started on as a store on a plain URL starts while Redis is down, its requests
    /// failing until the failover. Errors: a malformed URL, or no Sentinel answering.
    pub async fn open_async(url: &str, timeout: Duration) -> RedisResult<Self> {
        let Some(rest) = url.strip_prefix(SENTINEL_SCHEME) else {
            return Self::open(url, timeout);
        };
        let sentinels = sentinels(rest)?;
        let primary = match sentinels.majority(timeout).await {
            Some(primary) => primary,
            None => named_primary(rest, timeout).await?,
        };
        Self::with_client(primary, Some(sentinels), timeout)
    }

    /// The store over `client` (the primary, for a Sentinel URL), connected lazily; on
    /// Sentinels, with the poll running (in the Tokio runtime of the caller, if any)
    /// for as long as the store lives.
    fn with_client(
        client: Client,
        sentinels: Option<Sentinels>,
        timeout: Duration,
    ) -> RedisResult<Self> {
        Self::with_target(client, None, sentinels, timeout)
    }

    /// [`RedisStore::with_client`], on the nodes of `cluster` when given.
    fn with_target(
        client: Client,
        cluster: Option<ClusterClient>,
        sentinels: Option<Sentinels>,
        timeout: Duration,
    ) -> RedisResult<Self> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let connection = lazy_connection(cluster.as_ref(), client.clone(), &config, timeout)?;
        let current = Arc::new(Current {
            client: RwLock::new(client),
            connection: RwLock::new(connection),
            config,
            cluster,
            timeout,
        });
        let sentinels = sentinels.map(Arc::new);
        if let (Some(sentinels), Ok(runtime)) = (&sentinels, tokio::runtime::Handle::try_current())
        {
            runtime.spawn(poll(Arc::downgrade(&current), sentinels.clone()));
        }
        Ok(RedisStore { current, sentinels })
    }

    /// A client for the server the store talks to now (the primary last named by the
    /// Sentinels; for a cluster, the first node of the URL), for connections the store
    /// does not make itself. Pub/sub listens to [`RedisStore::pubsub_nodes`].
    pub fn client(&self) -> Client {
        self.current.client()
    }

    /// Whether the store is on a Redis Cluster (a `redis+cluster://` URL).
    pub fn is_cluster(&self) -> bool {
        self.current.cluster.is_some()
    }

    /// The current connection (a cheap handle), for commands of the caller's own.
    pub fn connection(&self) -> Connection {
        self.current.connection()
    }

    /// The servers a watcher of the store's pub/sub listens to ([`crate::changes`]): the
    /// server itself; on a cluster every node that `CLUSTER NODES` lists as up and
    /// linked, masters and replicas. A cluster forwards every `PUBLISH` to every node, so
    /// any one node hears the grants and releases; but keyspace notifications (the
    /// expiries) are sent only by the master that expired the key, so each master is
    /// listened to, and each replica too: a promoted one sends its expiries from its
    /// first moment as master. Errors: the cluster did not answer.
    pub async fn pubsub_nodes(&self) -> RedisResult<Vec<Client>> {
        if !self.is_cluster() {
            return Ok(vec![self.client()]);
        }
        let nodes: String = self
            .query("cluster_nodes", redis::cmd("CLUSTER").arg("NODES"))
            .await?;
        let mut addresses = cluster::listening_nodes(&nodes);
        addresses.sort();
        addresses
            .into_iter()
            .map(|address| Client::open(format!("redis://{address}/")))
            .collect()
    }

    /// Runs one request and records its latency under `op`. `request` is given a
    /// connection, and may be called twice. The connection is repaired as the module
    /// docs say: once more after a dropped connection, a new connection after a timeout,
    /// the new primary after a Sentinel failover.
    pub(crate) async fn round_trip<T, F, Fut>(&self, op: &'static str, request: F) -> RedisResult<T>
    where
        F: Fn(Connection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let first = telemetry::redis_round_trip(op, request(self.connection())).await;
        let first = match first {
            // Boxed: asking the Sentinels is a deep future, and every future that awaits a
            // round trip would otherwise carry its layout (only this path allocates).
            Err(err)
                if after_failover(&err)
                    && let Some(sentinels) = &self.sentinels
                    && Box::pin(self.current.follow(sentinels)).await =>
            {
                metrics::counter!(telemetry::REDIS_REPAIRS_TOTAL, "repair" => "new_primary")
                    .increment(1);
                return telemetry::redis_round_trip(op, request(self.connection())).await;
            }
            other => other,
        };
        match first {
            Err(err) if err.is_connection_dropped() => {
                metrics::counter!(telemetry::REDIS_REPAIRS_TOTAL, "repair" => "resent")
                    .increment(1);
                telemetry::redis_round_trip(op, request(self.connection())).await
            }
            Err(err) if err.is_timeout() => {
                self.current.replace();
                Err(err)
            }
            other => other,
        }
    }

    /// Runs `script` as one [`RedisStore::round_trip`].
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        op: &'static str,
        script: &ScriptInvocation<'_>,
    ) -> RedisResult<T> {
        self.round_trip(op, |mut conn| async move {
            script.invoke_async(&mut conn).await
        })
        .await
    }

    /// Runs `call`, a function of `library`, as one [`RedisStore::round_trip`]. A server
    /// that has not loaded the library answers that the function is missing: the library
    /// is loaded (on a cluster, on every master) and the function called again, in the
    /// same round trip's time, as `EVALSHA` falls back to `SCRIPT LOAD`.
    pub(crate) async fn fcall<T: FromRedisValue>(
        &self,
        op: &'static str,
        library: &Library,
        call: &FunctionCall,
    ) -> RedisResult<T> {
        self.round_trip(op, |mut conn| async move {
            match call.command().query_async(&mut conn).await {
                Err(err) if Library::is_missing(&err) => {
                    library
                        .load()
                        .query_async::<redis::Value>(&mut conn)
                        .await?;
                    call.command().query_async(&mut conn).await
                }
                other => other,
            }
        })
        .await
    }

    /// Runs `command` as one round trip, timed under `op` in
    /// [`telemetry::REDIS_ROUND_TRIP_SECONDS`]. It is repaired as the module docs say. It
    /// may be sent once more after a dropped connection. So give it only a command that
    /// is safe to run twice. Errors: Redis's, or the timeout.
    pub async fn query<T: FromRedisValue>(
        &self,
        op: &'static str,
        command: &Cmd,
    ) -> RedisResult<T> {
        self.round_trip(op, |mut conn| async move {
            command.query_async(&mut conn).await
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cluster_urls_need_a_node() {
        let timeout = Duration::from_secs(1);
        assert!(RedisStore::open("redis+cluster://127.0.0.1:7001,127.0.0.1:7002", timeout).is_ok());
        assert!(RedisStore::open("redis+cluster://", timeout).is_err());
    }
}
