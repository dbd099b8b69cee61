//! The stores a test runs against: `DATABASE_URL` and `REDIS_URL` (which `make test`
//! exports after starting private instances), a fresh migrated database per test, seeding,
//! and the seat lists tests read back.

use anyhow::{Context, bail};
use rand::Rng;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};

/// `DATABASE_URL` and `REDIS_URL`, or an error saying to run under `make test`.
pub fn store_urls() -> anyhow::Result<(String, String)> {
    let db = std::env::var("DATABASE_URL")
        .context("DATABASE_URL is not set: run the tests with `make test`")?;
    let redis = std::env::var("REDIS_URL")
        .context("REDIS_URL is not set: run the tests with `make test`")?;
    Ok((db, redis))
}

/// `ETCD_URL` (the one-member etcd `make test` starts), or an error saying to run under
/// `make test`.
pub fn etcd_url() -> anyhow::Result<String> {
    std::env::var("ETCD_URL").context("ETCD_URL is not set: run the tests with `make test`")
}

/// `ZK_URL` (the one-member ZooKeeper `make test` starts), or an error saying to run
/// under `make test`.
pub fn zk_url() -> anyhow::Result<String> {
    std::env::var("ZK_URL").context("ZK_URL is not set: run the tests with `make test`")
}

/// A random lowercase name with `prefix`, e.g. `t_3f9a1c20b7`.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}_{:010x}",
        rand::rng().random::<u64>() & 0xff_ffff_ffff
    )
}

/// Creates an empty database next to the one `admin_url` names, applies the migrations
/// (the product's, [`seatlock::MIGRATOR`], then the race lab's, [`seatlock_lab::migrate`]),
/// and returns its URL. Every test database has the lab's tables: the invariant checker
/// reads `race_lab_sales` beside `orders`.
pub async fn fresh_database(admin_url: &str) -> anyhow::Result<String> {
    let name = unique_name("t");
    let mut admin = PgConnection::connect(admin_url)
        .await
        .context("connecting to DATABASE_URL")?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await?;
    let url = match admin_url.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{name}"),
        None => bail!("DATABASE_URL has no database name"),
    };
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await?;
    seatlock_lab::migrate(&pool).await?;
    pool.close().await;
    Ok(url)
}

/// Loads the venues of `dir` into the database at `url`.
pub async fn seed(url: &str, dir: &str) -> anyhow::Result<()> {
    let pool = PgPoolOptions::new().max_connections(1).connect(url).await?;
    seatlock::seed::seed(&pool, std::path::Path::new(dir)).await?;
    pool.close().await;
    Ok(())
}

/// The tiny test venue (one event, 32 seats): tests/venues.
pub const TINY_VENUES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/venues");
/// The real venues (the 1,642-seat hall and the 11,056-seat arena): data/venues.
pub const DEMO_VENUES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../data/venues");

/// The first event's id in `db` and the ids of its seats, in map order.
pub async fn first_event_seats(db: &PgPool) -> anyhow::Result<(i64, Vec<i64>)> {
    let event: i64 = sqlx::query_scalar("SELECT min(id) FROM events")
        .fetch_one(db)
        .await?;
    Ok((event, event_seats(db, event).await?))
}

/// How many orders seat `seat` of event `event` has, as written in the database (a seat
/// sold twice has 2).
pub async fn orders_for(db: &PgPool, event: i64, seat: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM orders WHERE event_id = $1 AND seat_id = $2")
        .bind(event)
        .bind(seat)
        .fetch_one(db)
        .await
}

/// The ids of the seats of `event`, in map order.
pub async fn event_seats(db: &PgPool, event: i64) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar(
        "SELECT es.seat_id FROM event_seats es JOIN seats s ON s.id = es.seat_id
          WHERE es.event_id = $1 ORDER BY s.section_id, s.row_position, s.number",
    )
    .bind(event)
    .fetch_all(db)
    .await
}

/// Makes the lease on `key` lapse now, as its TTL running out would: in one `MULTI`,
/// the lease key is deleted and its entry in the group's holders hash removed (a lapsed
/// entry is one no reader counts: not on the seat map, not in the holder's limit). The
/// holder's other leases and the fencing counter are left alone, as a real lapse leaves
/// them. Errors: Redis unreachable at `redis_url`.
pub async fn lapse_lease(redis_url: &str, key: &lease::LeaseKey) -> anyhow::Result<()> {
    let mut redis = redis::Client::open(redis_url)?
        .get_multiplexed_async_connection()
        .await?;
    let _: (i64, i64) = redis::pipe()
        .atomic()
        .del(key.lease_key())
        .hdel(key.holders_key(), key.name())
        .query_async(&mut redis)
        .await?;
    Ok(())
}

/// `host:port` of a URL such as `postgres://user:password@127.0.0.1:15432/db`.
/// Errors: no authority in it.
pub fn authority(url: &str) -> anyhow::Result<String> {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host_and_path = after_scheme
        .rsplit_once('@')
        .map_or(after_scheme, |(_, h)| h);
    host_and_path
        .split('/')
        .next()
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .with_context(|| format!("no host:port in {url}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_postgres_url_has_one_authority() {
        assert_eq!(
            super::authority("postgres://u:p@127.0.0.1:15432/db").unwrap(),
            "127.0.0.1:15432"
        );
        assert!(super::authority("postgres:///db").is_err());
    }
}
