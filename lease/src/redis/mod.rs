//! The Redis connection of a [`crate::LeaseClient`]: redis-rs's multiplexed, reconnecting
//! `ConnectionManager`, plus the two repairs it does not make by itself.
//!
//! * **A connection the server closed** (the idle timeout of a managed Redis, a NAT or a
//!   proxy): the next request fails with a dropped connection while the manager
//!   reconnects. Such a request is sent once more on the new connection. Every script of
//!   this crate is safe to run twice: acquire is idempotent for its owner token, release
//!   and renew are compare-and-something, retire adds to a set and compares-and-deletes,
//!   an install whose marker is gone is refused, the rest are reads.
//! * **A connection that stopped answering without closing** (a dropped flow, a suspended
//!   host: half-open): each request times out and the manager keeps the dead connection,
//!   so every later request would time out too. After a timeout the connection is
//!   replaced by a new one (whether the timed-out request ran is unknown: it is not sent
//!   again).
//!
//! **Sentinel** (`redis+sentinel://host:port,host:port/<master name>`): the primary is
//! asked of the Sentinels when the store opens, every [`SENTINEL_POLL`] after that, and
//! at once after an error that a failover causes (an I/O error, a refused or dropped
//! connection, a timeout, `READONLY` from a demoted primary). redis-rs does not move an
//! existing connection to a new primary (redis-rs issue 1438), so the store does.
//!
//! * **Every Sentinel is asked, and a majority decides.** A Sentinel on the minority side
//!   of a partition still names the old primary; the first to answer is not trusted.
//!   Only an address named by more than half of the Sentinels in the URL is followed.
//! * **Asked before an error, not only after one.** During a partition the old primary
//!   keeps answering its clients, so no request fails, while the Sentinels on the
//!   majority side promote a replica: without the poll, the store would keep writing to
//!   a primary whose writes the failover discards. The poll bounds that to about one
//!   [`SENTINEL_POLL`] plus the Sentinels' own detection time. (`min-replicas-to-write`
//!   on the primary bounds it from the other side: an old primary that cannot reach
//!   enough replicas refuses writes with `NOREPLICAS`,
//!   [`crate::LeaseError::TooFewReplicas`].)
//!
//! When the Sentinels name another server, the connection is replaced by one to it, and a
//! request that failed is sent once more (safe, as above); until they do (a failover takes
//! some seconds), requests fail. A plain `redis://` URL never asks anything of a Sentinel:
//! its path is unchanged.
//!
//! **Redis Cluster** (`redis+cluster://host:port,host:port`, any nodes of it): redis-rs's
//! cluster connection ([`redis::cluster_async::ClusterConnection`]) learns the slots from
//! the nodes and sends each request to the master of its slot. Every script touches one
//! group, and every key of a group carries the group's hash tag, so a script is one
//! slot's, run on that slot's master. The connection follows `MOVED` (a slot moved) and
//! `ASK` (a slot moving), waits and resends on `TRYAGAIN` (a script whose keys are split
//! mid-migration) and `CLUSTERDOWN` (a failover under way), and reads the slots again on
//! `READONLY` or an error from a node that went away, so it finds a promoted replica by
//! itself; each request, retries included, is bounded by the store's timeout, and after
//! a timeout the whole cluster connection is replaced like a single one. Pub/sub is per
//! node: see [`RedisStore::pubsub_nodes`]. Why one group per slot is the design and what a
//! shard's failover does to the fence: `docs/cluster.md`.

use std::future::Future;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{
    Client, Cmd, ErrorKind, FromRedisValue, Pipeline, RedisError, RedisFuture, RedisResult,
    ScriptInvocation, Value,
};

use crate::telemetry;

/// The URL scheme that names Sentinels instead of a Redis server.
pub const SENTINEL_SCHEME: &str = "redis+sentinel://";

/// The URL scheme that names nodes of a Redis Cluster: `redis+cluster://host:port,host:port`.
pub const CLUSTER_SCHEME: &str = "redis+cluster://";

/// How often a store on Sentinels asks them for the primary when nothing has failed.
pub const SENTINEL_POLL: Duration = Duration::from_secs(1);

/// A connection a [`RedisStore`] hands out (a cheap handle, like redis-rs's own): to one
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

/// One logical Redis connection that heals: see the module docs.
pub struct RedisStore {
    /// The server and the connection to it, shared with the Sentinel poll.
    current: Arc<Current>,
    /// The Sentinels, for a `redis+sentinel://` URL.
    sentinels: Option<Arc<Sentinels>>,
}

/// The server a store talks to, and its connection: both change only when the
/// Sentinels name another primary (the connection also after a timeout).
struct Current {
    /// The server; for a cluster, the first node of the URL.
    client: RwLock<Client>,
    connection: RwLock<Connection>,
    config: ConnectionManagerConfig,
    /// The nodes of a `redis+cluster://` URL: each connection is to the cluster.
    cluster: Option<ClusterClient>,
    /// Bounds connecting, each response and each question to the Sentinels.
    timeout: Duration,
}

/// The Sentinels of a `redis+sentinel://` URL; one round of questions at a time.
struct Sentinels {
    /// `redis://host:port/`, in the URL's order.
    urls: Vec<String>,
    master: String,
    asking: tokio::sync::Mutex<()>,
}

impl RedisStore {
    /// A store over the Redis at `url`: `redis://host:port/db`, connected lazily (nothing
    /// is sent until the first request), or `redis+sentinel://host:port,host:port/<master
    /// name>`, whose primary is asked of the Sentinels now (a blocking question, once)
    /// and again after a failover (see the module docs). `timeout` bounds connecting and
    /// every response. Errors: a malformed URL; with Sentinels, none of them naming a
    /// reachable primary.
    ///
    /// With Sentinels, the blocking question has no bound: redis-rs's blocking client
    /// sets no read timeout, so a Sentinel or a primary that hangs (a stopped process
    /// whose port still accepts) blocks the calling thread until it wakes. Async code
    /// calls [`RedisStore::open_async`].
    ///
    /// `redis+cluster://host:port,host:port` names nodes of a Redis Cluster (see the
    /// module docs): connected lazily too, in the Tokio runtime of the caller (an error
    /// outside one).
    pub fn open(url: &str, timeout: Duration) -> RedisResult<Self> {
        if let Some(rest) = url.strip_prefix(CLUSTER_SCHEME) {
            return Self::on_cluster(rest, timeout);
        }
        match url.strip_prefix(SENTINEL_SCHEME) {
            None => Self::with_client(Client::open(url)?, None, timeout),
            Some(rest) => {
                let primary = sentinel_client(rest)?.get_client()?;
                Self::with_client(primary, Some(sentinels(rest)?), timeout)
            }
        }
    }

    /// The store over the cluster whose nodes `rest` (a URL after its
    /// `redis+cluster://`) names. Each request, with its redirects and retries, is
    /// bounded by `timeout`; a `TRYAGAIN` or `CLUSTERDOWN` is resent after a short
    /// jittered wait (from 10 ms, doubling), so a slot migration or a failover costs a
    /// pause, not a failure, when it ends within the timeout. Errors: no node named, a
    /// malformed one, or no Tokio runtime.
    fn on_cluster(rest: &str, timeout: Duration) -> RedisResult<Self> {
        let invalid = |what: &'static str| RedisError::from((ErrorKind::InvalidClientConfig, what));
        let mut nodes: Vec<String> = Vec::new();
        for node in rest
            .trim_end_matches('/')
            .split(',')
            .filter(|n| !n.is_empty())
        {
            let url = format!("redis://{node}/");
            if !nodes.contains(&url) {
                nodes.push(url);
            }
        }
        let first = nodes
            .first()
            .ok_or_else(|| invalid("redis+cluster:// URL needs host:port[,host:port…]"))?;
        let client = Client::open(first.as_str())?;
        // redis-rs's default waits 1.28 s or more before resending a TRYAGAIN, most of a
        // store timeout: a migrating slot is resent within milliseconds instead, and the
        // overall bound (the response timeout) ends the retries.
        let cluster = ClusterClient::builder(nodes.clone())
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .retries(32)
            .min_retry_wait(10)
            .max_retry_wait((timeout.as_millis() as u64 / 4).max(11))
            .retry_wait_formula(10, 2)
            .build()?;
        // The cluster connection spawns its driver task on the caller's runtime (and
        // panics without one): refuse in words instead.
        tokio::runtime::Handle::try_current()
            .map_err(|_| invalid("a redis+cluster:// store opens inside a Tokio runtime"))?;
        Self::with_target(client, Some(cluster), None, timeout)
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

    /// The servers a watcher of the store's pub/sub listens to ([`crate::events`]): the
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
        let mut addresses = listening_nodes(&nodes);
        addresses.sort();
        addresses
            .into_iter()
            .map(|address| Client::open(format!("redis://{address}/")))
            .collect()
    }

    /// Runs one request (`request` is given a connection and may be called twice),
    /// records its latency under `op`, and repairs the connection as the module docs
    /// say: once more after a dropped connection, a new connection after a timeout.
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

    /// Runs `command` as one round trip, repaired as the module docs say (sent once more
    /// after a dropped connection, so give it only a command that is safe to run twice;
    /// a new connection after a timeout) and timed under `op` in
    /// [`telemetry::REDIS_ROUND_TRIP_SECONDS`]. Errors: Redis's, or the timeout.
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

impl Current {
    fn client(&self) -> Client {
        self.client
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn connection(&self) -> Connection {
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
    async fn follow(&self, sentinels: &Sentinels) -> bool {
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
    fn replace(&self) {
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
fn lazy_connection(
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
async fn poll(current: Weak<Current>, sentinels: Arc<Sentinels>) {
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

impl Sentinels {
    /// The primary named by more than half of the Sentinels (`SENTINEL
    /// GET-MASTER-ADDR-BY-NAME`, all asked at once, each for at most `timeout`), or
    /// `None`.
    async fn majority(&self, timeout: Duration) -> Option<Client> {
        let asked = self
            .urls
            .iter()
            .map(|url| tokio::time::timeout(timeout, ask(url, &self.master)));
        let answers = futures_util::future::join_all(asked).await;
        let mut named: Vec<(String, u16)> = answers
            .into_iter()
            .filter_map(|answer| answer.ok()?.ok())
            .collect();
        named.sort();
        let most = named
            .chunk_by(|a, b| a == b)
            .max_by_key(|same| same.len())?;
        if most.len() * 2 <= self.urls.len() {
            return None;
        }
        let (host, port) = &most[0];
        Client::open(format!("redis://{host}:{port}/")).ok()
    }
}

/// What the Sentinel at `url` names as `master`'s address. Errors: it does not answer,
/// or does not know the name.
async fn ask(url: &str, master: &str) -> RedisResult<(String, u16)> {
    let mut conn = Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let named: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(master)
        .query_async(&mut conn)
        .await?;
    named.ok_or_else(|| {
        RedisError::from((
            ErrorKind::MasterNameNotFoundBySentinel,
            "the Sentinel does not know the master name",
        ))
    })
}

/// Whether `err` may mean the primary changed: the connection failed, dropped or timed
/// out, or the server answered `READONLY` (a primary demoted to replica).
fn after_failover(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_refusal()
        || err.is_connection_dropped()
        || err.is_timeout()
        || err.kind() == ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
}

/// The `host:port` of every node in `nodes` (the reply of `CLUSTER NODES`: one line per
/// node, `<id> <host:port@bus-port[,hostname]> <flags> <master> <ping> <pong> <epoch>
/// <link-state> <slots…>`) that is linked and neither failed, without an address, nor
/// still joining.
fn listening_nodes(nodes: &str) -> Vec<String> {
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (address, flags, link) = (fields.get(1)?, fields.get(2)?, fields.get(7)?);
            let down = flags
                .split(',')
                .any(|flag| matches!(flag, "fail" | "fail?" | "noaddr" | "handshake"));
            let address = address.split(['@', ',']).next()?;
            (!down && *link == "connected" && !address.starts_with(':')).then(|| address.to_owned())
        })
        .collect()
}

/// The Sentinels' URLs (`redis://host:port/`) and the master name of `rest`, a URL after
/// its `redis+sentinel://`: `host:port,host:port/<master name>`. Errors: no Sentinel or
/// no master name.
fn sentinel_parts(rest: &str) -> RedisResult<(Vec<String>, String)> {
    let invalid = |what: &'static str| RedisError::from((ErrorKind::InvalidClientConfig, what));
    let (hosts, master) = rest
        .split_once('/')
        .ok_or_else(|| invalid("redis+sentinel:// URL without /<master name>"))?;
    let master = master.trim_end_matches('/').to_owned();
    if master.is_empty() || hosts.is_empty() {
        return Err(invalid(
            "redis+sentinel:// URL needs host:port[,host:port…]/<master name>",
        ));
    }
    // Each Sentinel once: a majority of the URL's list must be a majority of Sentinels.
    let mut sentinels: Vec<String> = Vec::new();
    for host in hosts.split(',') {
        let url = format!("redis://{host}/");
        if !sentinels.contains(&url) {
            sentinels.push(url);
        }
    }
    Ok((sentinels, master))
}

/// The Sentinels of `rest` ([`sentinel_parts`]).
fn sentinels(rest: &str) -> RedisResult<Sentinels> {
    let (urls, master) = sentinel_parts(rest)?;
    Ok(Sentinels {
        urls,
        master,
        asking: tokio::sync::Mutex::new(()),
    })
}

/// redis-rs's Sentinel client of `rest` ([`sentinel_parts`]), for the blocking
/// [`RedisStore::open`].
fn sentinel_client(rest: &str) -> RedisResult<SentinelClient> {
    let (sentinels, master) = sentinel_parts(rest)?;
    // Owned: `SentinelClient::build` takes a String, or `impl AsRef<str>` when another
    // crate turns on redis's `tls-rustls` (a workspace build with the bench's rslock).
    SentinelClient::build(sentinels, master, None, SentinelServerType::Master)
}

/// A client for the primary the first answering Sentinel of `rest` names (`SENTINEL
/// GET-MASTER-ADDR-BY-NAME`), unverified: it may be down. Each Sentinel is asked for at
/// most `timeout`, in the URL's order. Errors: none answers with an address.
async fn named_primary(rest: &str, timeout: Duration) -> RedisResult<Client> {
    let (sentinels, master) = sentinel_parts(rest)?;
    let mut last = RedisError::from((ErrorKind::InvalidClientConfig, "no Sentinel"));
    for sentinel in sentinels {
        let asked = async {
            let (host, port) = ask(&sentinel, &master).await?;
            Client::open(format!("redis://{host}:{port}/"))
        };
        match tokio::time::timeout(timeout, asked).await {
            Ok(Ok(primary)) => return Ok(primary),
            Ok(Err(err)) => last = err,
            Err(_) => last = std::io::Error::from(std::io::ErrorKind::TimedOut).into(),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pubsub_listens_to_every_node_up_and_linked() {
        let nodes = "\
a 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b 127.0.0.1:7002@17002,host master - 0 0 2 connected 5461-10922
c 127.0.0.1:7003@17003 master,fail - 0 0 3 disconnected 10923-16383
d 127.0.0.1:7004@17004 slave a 0 0 1 connected
e :0@0 master,noaddr - 0 0 0 disconnected
";
        assert_eq!(
            listening_nodes(nodes),
            ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7004"]
        );
    }

    #[tokio::test]
    async fn cluster_urls_need_a_node() {
        let timeout = Duration::from_secs(1);
        assert!(RedisStore::open("redis+cluster://127.0.0.1:7001,127.0.0.1:7002", timeout).is_ok());
        assert!(RedisStore::open("redis+cluster://", timeout).is_err());
    }

    #[test]
    fn a_sentinel_named_twice_is_asked_once() {
        let (sentinels, _) = sentinel_parts("h:1,h:1,h:2/seatlock").unwrap();
        assert_eq!(sentinels, ["redis://h:1/", "redis://h:2/"]);
    }

    #[test]
    fn sentinel_urls_need_hosts_and_a_master_name() {
        assert!(sentinel_client("127.0.0.1:26379,127.0.0.1:26380/seatlock").is_ok());
        for bad in ["127.0.0.1:26379", "127.0.0.1:26379/", "/seatlock"] {
            assert!(sentinel_client(bad).is_err(), "{bad}");
        }
    }
}
