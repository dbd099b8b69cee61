//! Following a Sentinel failover.
//!
//! A `redis+sentinel://host:port,host:port/<master name>` URL names Sentinels, not a
//! server. The store asks them for the primary when it opens. It asks again every
//! [`SENTINEL_POLL`], and at once after an error that a failover causes: an I/O error, a
//! refused or dropped connection, a timeout, or `READONLY` from a demoted primary.
//! redis-rs does not move a connection to a new primary (redis-rs issue 1438), so the
//! store does.
//!
//! * **A majority decides.** Every Sentinel is asked. One on the minority side of a
//!   partition still names the old primary, so the first answer is not trusted. The
//!   store follows an address only when more than half of the URL's Sentinels name it.
//! * **The store asks before an error, too.** During a partition the old primary keeps
//!   answering its clients. No request fails, while the majority promotes a replica.
//!   Without the poll, the store would keep writing where the failover discards writes.
//!   The poll bounds that to about one [`SENTINEL_POLL`], plus the Sentinels' own
//!   detection time. `min-replicas-to-write` bounds it from the other side: an old
//!   primary cut off from its replicas refuses writes with `NOREPLICAS`
//!   ([`LeaseError::TooFewReplicas`](crate::LeaseError::TooFewReplicas)).
//!
//! When the Sentinels name another server, the store connects to it. A request that
//! failed is sent once more, which is safe (see `connection.rs`). A failover takes some
//! seconds; until it ends, requests fail. A plain `redis://` URL never asks a Sentinel.

use std::time::Duration;

use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{Client, ErrorKind, RedisError, RedisResult};

/// How often a store on Sentinels asks them for the primary when nothing has failed.
pub const SENTINEL_POLL: Duration = Duration::from_secs(1);

/// The Sentinels of a `redis+sentinel://` URL; one round of questions at a time.
pub(super) struct Sentinels {
    /// `redis://host:port/`, in the URL's order.
    urls: Vec<String>,
    master: String,
    pub(super) asking: tokio::sync::Mutex<()>,
}

impl Sentinels {
    /// The primary named by more than half of the Sentinels (`SENTINEL
    /// GET-MASTER-ADDR-BY-NAME`, all asked at once, each for at most `timeout`), or
    /// `None`.
    pub(super) async fn majority(&self, timeout: Duration) -> Option<Client> {
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
pub(super) fn after_failover(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_refusal()
        || err.is_connection_dropped()
        || err.is_timeout()
        || err.kind() == ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
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
pub(super) fn sentinels(rest: &str) -> RedisResult<Sentinels> {
    let (urls, master) = sentinel_parts(rest)?;
    Ok(Sentinels {
        urls,
        master,
        asking: tokio::sync::Mutex::new(()),
    })
}

/// redis-rs's Sentinel client of `rest` ([`sentinel_parts`]), for the blocking
/// [`RedisStore::open`].
pub(super) fn sentinel_client(rest: &str) -> RedisResult<SentinelClient> {
    let (sentinels, master) = sentinel_parts(rest)?;
    // Owned: `SentinelClient::build` takes a String, or `impl AsRef<str>` when another
    // crate turns on redis's `tls-rustls` (a workspace build with the bench's rslock).
    SentinelClient::build(sentinels, master, None, SentinelServerType::Master)
}

/// A client for the primary the first answering Sentinel of `rest` names (`SENTINEL
/// GET-MASTER-ADDR-BY-NAME`), unverified: it may be down. Each Sentinel is asked for at
/// most `timeout`, in the URL's order. Errors: none answers with an address.
pub(super) async fn named_primary(rest: &str, timeout: Duration) -> RedisResult<Client> {
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
    use crate::redis::sentinel::{sentinel_client, sentinel_parts};

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
