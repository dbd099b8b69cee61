//! A Redis Cluster.
//!
//! A `redis+cluster://host:port,host:port` URL names any nodes of a cluster. redis-rs's
//! cluster connection learns the slots from them. It sends each request to the master
//! of its slot. Every script touches one group, and every key of a group carries the
//! group's hash tag. So each script runs on one slot's master.
//!
//! The connection follows `MOVED` (a slot moved) and `ASK` (a slot moving). It waits and
//! resends on `TRYAGAIN` (a script's keys split mid-migration) and on `CLUSTERDOWN` (a
//! failover under way). On `READONLY`, or an error from a node that went away, it reads
//! the slots again, so it finds a promoted replica by itself. The store's timeout bounds
//! each request, retries included. After a timeout the whole cluster connection is
//! replaced, as a single one is.
//!
//! Pub/sub is per node: see [`RedisStore::pubsub_nodes`](super::RedisStore::pubsub_nodes).
//! Why one group per slot is the design, and what a shard's failover does to the fence:
//! `docs/cluster.md`.

use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::{Client, ErrorKind, RedisError, RedisResult};

/// The first node and the cluster client for `rest`, a URL after its `redis+cluster://`.
/// Each request, with its redirects and retries, is bounded by `timeout`. A `TRYAGAIN` or
/// `CLUSTERDOWN` is resent after a short jittered wait, from 10 ms, doubling. So a slot
/// migration or a failover that ends within the timeout costs a pause, not a failure.
/// Errors: no node named, a malformed one, or no Tokio runtime.
pub(super) fn client(rest: &str, timeout: Duration) -> RedisResult<(Client, ClusterClient)> {
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
    // redis-rs's default waits 1.28 s or more before resending a TRYAGAIN: most of a
    // store timeout. A migrating slot is resent within milliseconds instead. The response
    // timeout ends the retries.
    let cluster = ClusterClient::builder(nodes.clone())
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(32)
        .min_retry_wait(10)
        .max_retry_wait((timeout.as_millis() as u64 / 4).max(11))
        .retry_wait_formula(10, 2)
        .build()?;
    // The cluster connection spawns its driver task on the caller's runtime, and panics
    // without one. Refuse in words instead.
    tokio::runtime::Handle::try_current()
        .map_err(|_| invalid("a redis+cluster:// store opens inside a Tokio runtime"))?;
    Ok((client, cluster))
}

/// The `host:port` of every node in `nodes` (the reply of `CLUSTER NODES`: one line per
/// node, `<id> <host:port@bus-port[,hostname]> <flags> <master> <ping> <pong> <epoch>
/// <link-state> <slots…>`) that is linked and neither failed, without an address, nor
/// still joining.
pub(super) fn listening_nodes(nodes: &str) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use crate::redis::cluster::listening_nodes;

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
}
