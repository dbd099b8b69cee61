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
    /// Load the venues in data/venues/ and create a demo event on each (idempotent).
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
    /// How purchases are made. Only `fenced` is the product; the `race-lab-*` strategies
    /// are unsafe on purpose, for `load-test race`, and need `--enable-race-lab`.
    #[arg(long, env = "SEATLOCK_PURCHASE_STRATEGY", value_enum, default_value = "fenced")]
    pub purchase_strategy: crate::racelab::PurchaseStrategy,
    /// Allows the race-lab strategies and the `x-race-lab-pause-ms` header. Never in
    /// production.
    #[arg(long, env = "SEATLOCK_ENABLE_RACE_LAB")]
    pub enable_race_lab: bool,
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
            purchase_strategy: crate::racelab::PurchaseStrategy::Fenced,
            enable_race_lab: false,
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
}
