//! Command line and environment configuration (clap). Every flag can also be given as the
//! environment variable named next to it.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// `seatlock serve | migrate | seed`.
#[derive(Debug, Parser)]
#[command(
    name = "seatlock",
    version,
    about = "Seat holds as Redis leases, purchases fenced in Postgres"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the web application.
    Serve(Box<Settings>),
    /// Apply the database migrations in migrations/ and exit.
    Migrate(DatabaseArgs),
    /// Load the venues in data/venues/ and create a demo event on each, and open the
    /// auctions in data/auctions.json (idempotent).
    Seed(SeedArgs),
}

/// Where Postgres is.
#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// Postgres URL, e.g. postgres://user:pass@127.0.0.1:5432/seatlock.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
}

/// Arguments of `seatlock seed`.
#[derive(Debug, Clone, Args)]
pub struct SeedArgs {
    /// Postgres to seed.
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Folder of venue files (*.json).
    #[arg(long, env = "SEATLOCK_VENUES", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/data/venues"))]
    pub venues: std::path::PathBuf,
    /// Auction items file (JSON), see [`crate::seed::AuctionSpec`].
    #[arg(long, env = "SEATLOCK_AUCTIONS", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/data/auctions.json"))]
    pub auctions: std::path::PathBuf,
}

/// Everything `seatlock serve` needs; also what tests and the load test pass to
/// [`crate::app::Application::build`].
#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// Postgres URL.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// Redis URL for the lease store, e.g. redis://127.0.0.1:6379/.
    #[arg(long, env = "REDIS_URL")]
    pub redis_url: String,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, env = "SEATLOCK_BIND", default_value = "127.0.0.1:3000")]
    pub bind: String,
    /// Length of a seat hold (the lease TTL), in milliseconds. Default: ten minutes.
    #[arg(long, env = "SEATLOCK_HOLD_TTL_MS", default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub hold_ttl_ms: u64,
    /// Simulated payment time before a purchase is written, in milliseconds.
    #[arg(long, env = "SEATLOCK_PAYMENT_DELAY_MS", default_value_t = 0)]
    pub payment_delay_ms: u64,
    /// Prefix of every lease group, so several deployments (or tests) can share a Redis.
    #[arg(long, env = "SEATLOCK_LEASE_NAMESPACE", default_value = "seatlock")]
    pub lease_namespace: String,
    /// Secret shared by all server processes, used to sign CSRF tokens. Random per
    /// process when unset, which only suits a single process.
    #[arg(long, env = "SEATLOCK_SECRET")]
    pub secret: Option<String>,
    /// How long a call to Redis or Postgres may take before the request fails with 503,
    /// in milliseconds.
    #[arg(long, env = "SEATLOCK_STORE_TIMEOUT_MS", default_value_t = 2_000)]
    pub store_timeout_ms: u64,
    /// Most Postgres connections this process opens. Few suit a small machine: on 2
    /// cores, 8 served about 25% more holds per second than 32 at 64 buyers
    /// (`load-test holds --buyers 64`), as Postgres switches between fewer backends.
    #[arg(long, env = "SEATLOCK_DB_POOL_SIZE", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub db_pool_size: u32,
    /// How purchases are made. Only `fenced` is the product; the `race-lab-*` strategies
    /// are unsafe on purpose, for `load-test race`, and need `--enable-race-lab`.
    #[arg(
        long,
        env = "SEATLOCK_PURCHASE_STRATEGY",
        value_enum,
        default_value = "fenced"
    )]
    pub purchase_strategy: crate::racelab::PurchaseStrategy,
    /// Allows the race-lab strategies and the `x-race-lab-pause-ms` header. Never in
    /// production.
    #[arg(long, env = "SEATLOCK_ENABLE_RACE_LAB")]
    pub enable_race_lab: bool,
    /// Length of an auction item's bid lock (the lease TTL), in milliseconds. A bid holds
    /// it for one read and one write, a few milliseconds; the TTL bounds how long a
    /// crashed bidder blocks the item. Default: two seconds.
    #[arg(long, env = "SEATLOCK_BID_LOCK_TTL_MS", default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(10..))]
    pub bid_lock_ttl_ms: u64,
    /// How bids are serialised: `lease` (the per-item bid lock and a fenced write) or
    /// `conditional` (one conditional UPDATE, no lock service).
    #[arg(
        long,
        env = "SEATLOCK_BID_STRATEGY",
        value_enum,
        default_value = "lease"
    )]
    pub bid_strategy: crate::auction::BidStrategy,
    /// How often this process looks for auctions past their end to close, in
    /// milliseconds; 0 = never (leave closing to other processes).
    #[arg(long, env = "SEATLOCK_CLOSE_INTERVAL_MS", default_value_t = 1_000)]
    pub close_interval_ms: u64,
    /// Length of the lease on an auction's closing job, in milliseconds; its watchdog
    /// renews it every third of that while the closer works.
    #[arg(long, env = "SEATLOCK_CLOSE_LEASE_TTL_MS", default_value_t = 6_000, value_parser = clap::value_parser!(u64).range(30..))]
    pub close_lease_ttl_ms: u64,
}

impl Settings {
    /// Settings for a server on `bind` with the defaults above.
    pub fn new(database_url: &str, redis_url: &str, bind: &str) -> Self {
        Settings {
            database_url: database_url.into(),
            redis_url: redis_url.into(),
            bind: bind.into(),
            hold_ttl_ms: 600_000,
            payment_delay_ms: 0,
            lease_namespace: "seatlock".into(),
            secret: None,
            store_timeout_ms: 2_000,
            db_pool_size: 8,
            purchase_strategy: crate::racelab::PurchaseStrategy::Fenced,
            enable_race_lab: false,
            bid_lock_ttl_ms: 2_000,
            bid_strategy: crate::auction::BidStrategy::Lease,
            close_interval_ms: 1_000,
            close_lease_ttl_ms: 6_000,
        }
    }

    /// The hold TTL as a `Duration`.
    pub fn hold_ttl(&self) -> Duration {
        Duration::from_millis(self.hold_ttl_ms)
    }

    /// The simulated payment delay as a `Duration`.
    pub fn payment_delay(&self) -> Duration {
        Duration::from_millis(self.payment_delay_ms)
    }

    /// The store timeout as a `Duration`.
    pub fn store_timeout(&self) -> Duration {
        Duration::from_millis(self.store_timeout_ms)
    }

    /// The bid lock's TTL as a `Duration`.
    pub fn bid_lock_ttl(&self) -> Duration {
        Duration::from_millis(self.bid_lock_ttl_ms)
    }

    /// The closer's interval, or `None` when this process does not close auctions.
    pub fn close_interval(&self) -> Option<Duration> {
        (self.close_interval_ms > 0).then(|| Duration::from_millis(self.close_interval_ms))
    }

    /// The closing job's lease TTL as a `Duration`.
    pub fn close_lease_ttl(&self) -> Duration {
        Duration::from_millis(self.close_lease_ttl_ms)
    }
}
