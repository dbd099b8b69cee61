//! # seatlock-harness
//!
//! Everything around the seatlock product that is not the product: what the integration
//! tests, the end-to-end suite, the benches and the `load-test` binary share.
//!
//! * [`stores`]: `DATABASE_URL`/`REDIS_URL`, a fresh migrated database per test, seeding.
//! * [`app`]: the one test entry point, [`TestApp::builder`]: a fresh database, the
//!   stores, settings and a server on port 0 (zero-to-production's `spawn_app`).
//! * [`http`]: [`HttpBuyer`], one browser's worth of HTTP (cookies, CSRF token, forms),
//!   and [`Reply`] with its typed refusal code.
//! * [`procs`]: real processes a test controls by PID: [`ServerProcess`],
//!   [`RedisServer`], [`PostgresServer`].
//! * [`haproxy`]: [`HaProxy`], HAProxy in front of several server processes, configured
//!   as `make scale` configures it, with its stats (which backend is up, how many
//!   connections each was sent).
//! * [`sentinel`]: [`sentinel::SentinelTopology`], a primary, a replica and three Sentinels
//!   on loopback, with the failover that loses a grant.
//! * [`cluster`]: [`cluster::ClusterTopology`], a Redis Cluster of three masters and three
//!   replicas on loopback, with a shard's failover and a slot migration.
//! * [`etcd`]: [`EtcdCluster`], a private one- or three-member etcd a test can kill
//!   members of.
//! * [`proxy`]: [`TcpProxy`], a loopback TCP proxy whose open flows can be made half-open.
//! * [`pgwire`]: [`pgwire::PgWire`], a proxy in front of Postgres that counts what a
//!   server sends it ([`pgwire::PgCost`]: round trips, statements, session traffic).
//! * [`check`]: the article's invariant checked over what Postgres accepted.
//! * [`load`]: the race lab's client (`load-test race`), hold/confirm throughput
//!   (`load-test holds`, `make bench`), holds at a fixed arrival rate (`make bench`) and
//!   the report with its charts.

pub mod app;
pub mod check;
pub mod cluster;
pub mod etcd;
pub mod haproxy;
pub mod history;
pub mod http;
pub mod leader;
pub mod load;
pub mod pgbouncer;
pub mod pgwire;
pub mod procs;
pub mod proxy;
pub mod sentinel;
pub mod stores;
pub mod tls_proxy;
pub mod zookeeper;

pub use app::{
    TEST_SECRET, TestApp, TestAppBuilder, auction_item, end_auction_now, eventually, test_settings,
};
pub use etcd::EtcdCluster;
pub use haproxy::HaProxy;
pub use http::{HttpBuyer, Reply, authenticity_token};
pub use pgbouncer::PgBouncer;
pub use procs::{PostgresServer, RedisServer, ServerProcess, send_signal};
pub use proxy::TcpProxy;
pub use stores::{
    DEMO_VENUES, TINY_VENUES, authority, etcd_url, event_seats, first_event_seats, fresh_database,
    lapse_lease, orders_for, seed, store_urls, unique_name, zk_url,
};
pub use tls_proxy::TlsProxy;
pub use zookeeper::ZooKeeperEnsemble;
