//! Command line and environment configuration (clap). Every flag can also be given as the
//! environment variable named next to it. The clap attributes on [`Settings`] are the only
//! place a default is written: [`Settings::new`] parses them, and [`Settings::to_env`]
//! turns a value back into the environment a `seatlock serve` process is started with.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, FromArgMatches, Parser, Subcommand};
use serde::{Deserialize, Serialize};

mod origin;
pub use origin::{PublicOrigin, TrustedProxies, without_default_port};

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
/// [`crate::app::Application::build`]. Field names are the flags' names (`hold_ttl_ms` is
/// `--hold-ttl-ms`), which [`Settings::to_env`] relies on.
#[derive(Debug, Clone, PartialEq, Eq, Args, Serialize)]
pub struct Settings {
    /// Postgres URL.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// Redis URL, e.g. redis://127.0.0.1:6379/, or Sentinels naming the primary:
    /// `redis+sentinel://host:port,host:port/<master name>` (re-asked after a failover),
    /// or nodes of a Redis Cluster: `redis+cluster://host:port,host:port` (docs/cluster.md).
    /// Browser sessions, and the leases unless `--lease-store-url` names another store.
    #[arg(long, env = "REDIS_URL")]
    pub redis_url: String,
    /// The lease store (seat holds, bid locks, closing leases), chosen at start:
    /// `redis://host:port/db` (default: `--redis-url`; a Sentinel or cluster URL too), or
    /// `etcd://host:port[,host:port…]` for an etcd cluster, or `zk://host:port[,host:port…]`
    /// for a ZooKeeper ensemble, where a grant is committed to a majority before it is
    /// acknowledged. etcd TTLs are whole seconds of at least 2 s; ZooKeeper's lie within
    /// its server's session timeouts: the server refuses to start with a hold, bid lock
    /// or closing lease TTL the store cannot express (docs/stores.md).
    #[arg(long, env = "SEATLOCK_LEASE_STORE_URL")]
    pub lease_store_url: Option<String>,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, env = "SEATLOCK_BIND", default_value = "127.0.0.1:3000")]
    pub bind: String,
    /// Address of the listener that serves `GET /metrics` (Prometheus), apart from the
    /// app's port so that buyers, and whatever fronts the app, cannot read it; loopback
    /// by default. Port 0 picks a free port.
    #[arg(long, env = "SEATLOCK_METRICS_BIND", default_value = "127.0.0.1:9464")]
    pub metrics_bind: String,
    /// Length of a seat hold (the lease TTL), in milliseconds. Default: ten minutes.
    #[arg(long, env = "SEATLOCK_HOLD_TTL_MS", default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub hold_ttl_ms: u64,
    /// Most seats one buyer may hold in one event at once (single holds and best-available
    /// groups together). Counted by Redis in the hold's own script, so two concurrent
    /// holds of one buyer cannot both slip under it.
    #[arg(long, env = "SEATLOCK_MAX_SEATS_PER_BUYER", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub max_seats_per_buyer: u64,
    /// At most this many buyers shop one event at once; the rest wait in its queue
    /// (`GET /events/{id}/queue`), admitted first come, first served. 0: no waiting room.
    /// An event's own `waiting_room_shoppers` (migration 0010) overrides it. Needs the
    /// Redis lease store (the room lives beside the seat leases).
    #[arg(long, env = "SEATLOCK_WAITING_ROOM_SHOPPERS", default_value_t = 0)]
    pub waiting_room_shoppers: u64,
    /// Length of an admission to a waiting room (its lease), in milliseconds; each page
    /// the buyer opens renews it, up to twice this from the admission. Default: fifteen
    /// minutes; at most a day.
    #[arg(long, env = "SEATLOCK_ADMISSION_TTL_MS", default_value_t = 900_000, value_parser = clap::value_parser!(u64).range(1_000..=86_400_000))]
    pub admission_ttl_ms: u64,
    /// How long a waiting-room turn waits for its buyer, in milliseconds: a buyer whose
    /// turn comes while away (a phone in a pocket) keeps it this long, and a buyer gone
    /// for good holds an idle place this long. Default: two minutes.
    #[arg(long, env = "SEATLOCK_ARRIVAL_WINDOW_MS", default_value_t = 120_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub arrival_window_ms: u64,
    /// Simulated payment time before a purchase is written, in milliseconds.
    #[arg(long, env = "SEATLOCK_PAYMENT_DELAY_MS", default_value_t = 0)]
    pub payment_delay_ms: u64,
    /// Prefix of every lease group and session key, so several deployments (or tests) can
    /// share a Redis.
    #[arg(long, env = "SEATLOCK_LEASE_NAMESPACE", default_value = "seatlock")]
    pub lease_namespace: LeaseNamespace,
    /// Secret shared by all server processes, which signs buyer cookies, had-hold
    /// cookies, waiting-room tickets and CSRF tokens (at least 32 bytes). Random per
    /// process when unset, which only suits a single process.
    #[arg(long, env = "SEATLOCK_SECRET")]
    pub secret: Option<String>,
    /// Secrets a buyer cookie, a form or a waiting-room ticket may also be signed with,
    /// comma-separated (each at least 32 bytes; needs `--secret`): accepted, never used to
    /// sign. A rotation's overlap: the old secret after the switch, and during a rolling
    /// restart the new one before it (docs/configuration.md, "Rotating the secret").
    #[arg(long, env = "SEATLOCK_ACCEPTED_SECRETS")]
    pub accepted_secrets: Option<String>,
    /// The origin buyers' browsers use, when a proxy in front of this server terminates
    /// TLS or rewrites `Host` (`https://tickets.example.com`): forms are accepted from
    /// it alone, and on https cookies are `Secure` and HSTS is sent
    /// (docs/scale-out.md, "Behind a TLS proxy"). Wins over `--trusted-proxies`. Unset:
    /// taken from `Host`, or from a trusted proxy's forwarded headers.
    #[arg(long, env = "SEATLOCK_PUBLIC_ORIGIN")]
    pub public_origin: Option<PublicOrigin>,
    /// Peers whose `X-Forwarded-Proto`, `X-Forwarded-Host` and `X-Forwarded-Port` are
    /// believed: addresses or networks, comma-separated (`127.0.0.1,10.0.0.0/8`). Unset: no peer's; a forwarded
    /// header any client can send is ignored.
    #[arg(long, env = "SEATLOCK_TRUSTED_PROXIES")]
    pub trusted_proxies: Option<TrustedProxies>,
    /// How long a call to Redis or Postgres may take before the request fails with 503,
    /// in milliseconds.
    #[arg(long, env = "SEATLOCK_STORE_TIMEOUT_MS", default_value_t = 2_000)]
    pub store_timeout_ms: u64,
    /// Most Postgres connections this process opens. Few suit a small machine: on 2
    /// cores, 8 served about 25% more holds per second than 32 at 64 buyers
    /// (`load-test holds --buyers 64`), as Postgres switches between fewer backends.
    #[arg(long, env = "SEATLOCK_DB_POOL_SIZE", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub db_pool_size: u32,
    /// Time a client has to send a request's headers, and again its whole body, in
    /// milliseconds: a connection slower with its headers is closed (slowloris), which
    /// frees its slot; a body slower than this is answered 408.
    /// Responses may take as long as they need (live pages' event streams).
    #[arg(long, env = "SEATLOCK_HEADER_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub header_timeout_ms: u64,
    /// Most connections served at once; more wait in the kernel's accept queue. Each
    /// open live page holds one for its event stream, at most `--max-streams` of them, so
    /// at least `max_connections - max_streams` are always left for requests: lookers
    /// never lock buyers out. Must exceed `--max-streams`; the server raises its open-file
    /// limit to fit, and lowers both (logged) where the system allows fewer.
    #[arg(long, env = "SEATLOCK_MAX_CONNECTIONS", default_value_t = 12_288, value_parser = clap::value_parser!(u32).range(2..))]
    pub max_connections: u32,
    /// Most live event streams (seat maps, auction items) served at once. A page past
    /// the budget is answered at once, 503 with `Retry-After`: it shows what it loaded,
    /// says it is not live, and its script opens the stream again later (catching up with
    /// a fresh snapshot). Must be below `--max-connections`.
    #[arg(long, env = "SEATLOCK_MAX_STREAMS", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams: u32,
    /// How long a server told to stop by SIGTERM keeps serving while `/readyz` says it
    /// is draining, before it ends its live streams and stops accepting, in
    /// milliseconds: long enough for the proxy's checks to take it out (HAProxy here:
    /// two failed checks 500 ms apart). At most a minute; Ctrl-C, or a second signal
    /// during the drain, stops without it.
    #[arg(long, env = "SEATLOCK_DRAIN_MS", default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(..=60_000))]
    pub drain_ms: u64,
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
    pub bid_strategy: BidStrategy,
    /// How often this process looks for auctions past their end to close, in
    /// milliseconds; 0 = never (leave closing to other processes).
    #[arg(long, env = "SEATLOCK_CLOSE_INTERVAL_MS", default_value_t = 1_000)]
    pub close_interval_ms: u64,
    /// Length of the lease on an auction's closing job, in milliseconds; its watchdog
    /// renews it every third of that while the closer works.
    #[arg(long, env = "SEATLOCK_CLOSE_LEASE_TTL_MS", default_value_t = 6_000, value_parser = clap::value_parser!(u64).range(30..))]
    pub close_lease_ttl_ms: u64,
    /// Added to [`Settings::request_deadline`] so that a paused request is not cut off.
    /// Not a flag: zero in the product. The race lab's build sets it when it installs the
    /// pause seam ([`crate::app::Extension`], [`crate::failpoint`]).
    #[arg(skip)]
    #[serde(skip)]
    pub pause_margin: Duration,
}

impl Settings {
    /// Settings for a server on `bind` with every other field at its default: the clap
    /// attributes above are parsed (environment variables are not read), so a default is
    /// written once.
    pub fn new(database_url: &str, redis_url: &str, bind: &str) -> Self {
        let command = Self::command().mut_args(|arg| arg.env(None));
        let matches = command
            .try_get_matches_from([
                "serve",
                "--database-url",
                database_url,
                "--redis-url",
                redis_url,
                "--bind",
                bind,
            ])
            .unwrap_or_else(|err| {
                panic!("Settings::new({database_url:?}, {redis_url:?}, {bind:?}): {err}")
            });
        Settings::from_arg_matches(&matches).expect("clap built these matches from Settings")
    }

    /// The `seatlock serve` command line these settings come from (for `--help` text and
    /// the flags' metadata).
    pub fn command() -> clap::Command {
        Self::augment_args(clap::Command::new("serve"))
    }

    /// The environment variables that make a `seatlock serve` process start with exactly
    /// these settings: one `(NAME, value)` per field that has a value (an unset `secret`
    /// is left out). Names come from the flags' `env` attributes, values from the fields,
    /// so a new setting needs no change here.
    pub fn to_env(&self) -> Vec<(String, String)> {
        let values = serde_json::to_value(self).expect("settings serialise to JSON");
        Self::command()
            .get_arguments()
            .filter_map(|arg| {
                let name = arg.get_env()?.to_str()?.to_owned();
                let value = match &values[arg.get_id().as_str()] {
                    serde_json::Value::Null => return None,
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                Some((name, value))
            })
            .collect()
    }

    /// The lease store's URL: `--lease-store-url`, else `--redis-url`.
    pub fn lease_store_url(&self) -> &str {
        self.lease_store_url.as_deref().unwrap_or(&self.redis_url)
    }

    /// The consensus store the leases are in, by its name: `Some("etcd")` for
    /// `--lease-store-url etcd://…`, `Some("ZooKeeper")` for `zk://…`; `None` for Redis.
    pub fn consensus_lease_store(&self) -> Option<&'static str> {
        let url = self.lease_store_url();
        if url.starts_with("etcd://") {
            Some("etcd")
        } else if url.starts_with("zk://") {
            Some("ZooKeeper")
        } else {
            None
        }
    }

    /// Each lease TTL setting as (flag, `Duration`): what a lease store must be able to
    /// express ([`lease::LeaseStore::ttl_limits`]).
    pub fn lease_ttls(&self) -> [(&'static str, Duration); 3] {
        [
            ("--hold-ttl-ms", self.hold_ttl()),
            ("--bid-lock-ttl-ms", self.bid_lock_ttl()),
            ("--close-lease-ttl-ms", self.close_lease_ttl()),
        ]
    }

    /// The hold TTL as a `Duration`.
    pub fn hold_ttl(&self) -> Duration {
        Duration::from_millis(self.hold_ttl_ms)
    }

    /// The longest a hold may last from its grant, with every extension a buyer may ask
    /// for ("Need more time?", [`lease::MAX_EXTENSIONS`]): ten hold TTLs.
    pub fn max_hold_life(&self) -> Duration {
        self.hold_ttl() * lease::MAX_EXTENSIONS
    }

    /// The admission TTL of a waiting room as a `Duration`.
    pub fn admission_ttl(&self) -> Duration {
        Duration::from_millis(self.admission_ttl_ms)
    }

    /// A waiting-room turn's arrival window as a `Duration`.
    pub fn arrival_window(&self) -> Duration {
        Duration::from_millis(self.arrival_window_ms)
    }

    /// The simulated payment delay as a `Duration`.
    pub fn payment_delay(&self) -> Duration {
        Duration::from_millis(self.payment_delay_ms)
    }

    /// The store timeout as a `Duration`.
    pub fn store_timeout(&self) -> Duration {
        Duration::from_millis(self.store_timeout_ms)
    }

    /// How long a Postgres statement may wait for a row lock (`lock_timeout`): three
    /// quarters of the store timeout, so the wait fits inside it.
    pub fn lock_wait(&self) -> Duration {
        self.store_timeout() * 3 / 4
    }

    /// How long a purchase's transaction may sit idle after its fenced write, with the
    /// seat's row locked, before Postgres ends it (`idle_in_transaction_session_timeout`):
    /// half the store timeout, below [`Settings::lock_wait`], so a valid holder waiting
    /// behind a stalled or dead one gets the row within its own lock wait.
    pub fn purchase_idle_timeout(&self) -> Duration {
        self.store_timeout() / 2
    }

    /// Four store timeouts: each step on a store that answers is bounded by one; a store
    /// that stops answering without closing the connection is bounded only by this. The
    /// request deadline is this plus the pause margin ([`Settings::request_deadline`]).
    pub fn store_deadline(&self) -> Duration {
        self.store_timeout() * 4
    }

    /// The longest a request may wait on the stores, together with the purchase or bid it
    /// runs detached: [`Settings::store_deadline`] plus [`Settings::pause_margin`]. On
    /// expiry the request answers 503 and its work is dropped ([`crate::http::deadline`]).
    pub fn request_deadline(&self) -> Duration {
        self.store_deadline() + self.pause_margin
    }

    /// The drain after SIGTERM as a `Duration`.
    pub fn drain(&self) -> Duration {
        Duration::from_millis(self.drain_ms)
    }

    /// The header (and body) read timeout as a `Duration`.
    pub fn header_timeout(&self) -> Duration {
        Duration::from_millis(self.header_timeout_ms)
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

/// How bids are serialised (`seatlock serve --bid-strategy`, env `SEATLOCK_BID_STRATEGY`).
/// Both are safe: they differ in what does the serialising, which is what the race lab
/// compares.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum BidStrategy {
    /// A short per-item lease in Redis (the bid lock), then read, validate and one fenced
    /// conditional write: lock (1 Redis) + 1 Postgres transaction + release (1 Redis).
    #[default]
    Lease,
    /// No lock service: the same one `UPDATE` of the item row (proxy resolution and
    /// all), serialised by Postgres's row lock alone (the article: "a single partition
    /// does the same job without a lock").
    Conditional,
}

/// The prefix of every Redis key of one deployment (`--lease-namespace`), so several
/// deployments or tests can share a Redis: lease groups are `<namespace>:event:<id>` and
/// `<namespace>:auction:<id>`, sessions `<namespace>:session:<id>`. Parsed once at start-up: it may not contain what a
/// [`lease::LeaseKey`] refuses (braces, white space) or be empty.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct LeaseNamespace(String);

impl LeaseNamespace {
    /// The lease group `<namespace>:<kind>:<id>` (`kind` is `event` or `auction`).
    pub fn group(&self, kind: &str, id: i64) -> String {
        format!("{}:{kind}:{id}", self.0)
    }

    /// The lease key of resource `name` in group `<namespace>:<kind>:<id>`.
    pub fn key(&self, kind: &str, id: i64, name: &str) -> lease::LeaseKey {
        lease::LeaseKey::new(self.group(kind, id), name)
            .expect("a parsed namespace, a kind word and an id make a valid key")
    }

    /// The Redis key of the browser session `session_id` ([`crate::http::sessions`]):
    /// `<namespace>:session:<id>`. Never a lease key (those start with `lease:{`), and
    /// distinct from another namespace's sessions: a session id has no `:`.
    pub fn session_key(&self, session_id: &str) -> String {
        format!("{}:session:{session_id}", self.0)
    }

    /// The namespace's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for LeaseNamespace {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        if raw.is_empty() {
            return Err("the lease namespace may not be empty".into());
        }
        lease::LeaseKey::new(format!("{raw}:event:1"), "1")
            .map(|_| LeaseNamespace(raw.to_owned()))
            .map_err(|_| format!("{raw:?} may not contain braces or white space"))
    }
}

impl fmt::Display for LeaseNamespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `env` as `seatlock serve` would read it: each variable becomes its flag.
    fn parse_env(env: &[(String, String)]) -> Settings {
        let flags = Settings::command();
        let mut argv = vec!["serve".to_owned()];
        for (name, value) in env {
            let arg = flags
                .get_arguments()
                .find(|a| a.get_env().and_then(|e| e.to_str()) == Some(name.as_str()))
                .unwrap_or_else(|| panic!("{name} is no flag's variable"));
            let flag = format!(
                "--{}",
                arg.get_long().expect("every setting has a long flag")
            );
            if arg.get_action().takes_values() {
                argv.extend([flag, value.clone()]);
            } else if value == "true" {
                argv.push(flag);
            }
        }
        let command = Settings::command().mut_args(|arg| arg.env(None));
        let matches = command.try_get_matches_from(argv).unwrap();
        Settings::from_arg_matches(&matches).unwrap()
    }

    #[test]
    fn every_setting_survives_the_trip_through_the_environment() {
        let mut settings = Settings::new("postgres://db/x", "redis://r/", "127.0.0.1:0");
        assert_eq!(parse_env(&settings.to_env()), settings);
        // Every field away from its default, so a dropped one cannot hide behind it.
        settings = Settings {
            database_url: "postgres://u:p@127.0.0.1:1/y".into(),
            redis_url: "redis://127.0.0.1:2/".into(),
            lease_store_url: Some("etcd://127.0.0.1:3,127.0.0.1:4".into()),
            bind: "127.0.0.1:4000".into(),
            metrics_bind: "127.0.0.1:4001".into(),
            hold_ttl_ms: 1_234,
            max_seats_per_buyer: 3,
            waiting_room_shoppers: 5,
            admission_ttl_ms: 4_321,
            arrival_window_ms: 7_654,
            payment_delay_ms: 56,
            lease_namespace: "ns-7".parse().unwrap(),
            secret: Some("s".repeat(40)),
            accepted_secrets: Some(format!("{},{}", "a".repeat(32), "b".repeat(33))),
            public_origin: Some("https://tickets.example.com".parse().unwrap()),
            trusted_proxies: Some("127.0.0.1,10.0.0.0/8".parse().unwrap()),
            store_timeout_ms: 789,
            db_pool_size: 3,
            bid_lock_ttl_ms: 321,
            bid_strategy: BidStrategy::Conditional,
            close_interval_ms: 0,
            close_lease_ttl_ms: 999,
            header_timeout_ms: 1_500,
            max_connections: 77,
            max_streams: 55,
            drain_ms: 3_210,
            // Not a flag, so not in the environment.
            pause_margin: Duration::ZERO,
        };
        assert_ne!(settings, Settings::new("a", "b", "c"));
        assert_eq!(parse_env(&settings.to_env()), settings);
        assert_eq!(
            settings.to_env().len(),
            Settings::command().get_arguments().count()
        );
    }

    /// The race lab's flags are the `seatlock-lab` binary's: none of them is a flag of
    /// `seatlock serve`, so no command line of the product can sell a seat twice.
    #[test]
    fn the_product_has_no_race_lab_flag() {
        let serve = |extra: &[&str]| {
            let base = [
                "serve",
                "--database-url",
                "postgres://x",
                "--redis-url",
                "redis://x",
            ];
            let args = base.iter().chain(extra).copied();
            Settings::command()
                .mut_args(|arg| arg.env(None))
                .try_get_matches_from(args)
        };
        assert!(serve(&[]).is_ok());
        for lab_only in [
            &["--purchase-strategy", "race-lab-naive"][..],
            &["--purchase-strategy", "fenced"],
            &["--enable-race-lab"],
            &["--lab-disable-failover-guard"],
        ] {
            let err = serve(lab_only).expect_err("a lab flag");
            assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument, "{err}");
        }
        let flags = Settings::command();
        for arg in flags.get_arguments() {
            let env = arg.get_env().and_then(|e| e.to_str()).unwrap_or_default();
            let lab = env.contains("LAB_") || env == "SEATLOCK_PURCHASE_STRATEGY";
            assert!(!lab, "{env} is a race lab flag");
        }
        let settings = Settings::new("postgres://x", "redis://x", "127.0.0.1:0");
        assert_eq!(settings.pause_margin, Duration::ZERO);
        assert_eq!(settings.request_deadline(), settings.store_deadline());
    }

    #[test]
    fn defaults_are_the_flags_defaults() {
        let settings = Settings::new("postgres://db/x", "redis://r/", "127.0.0.1:0");
        assert_eq!(settings.hold_ttl(), Duration::from_secs(600));
        assert_eq!(settings.bid_strategy, BidStrategy::Lease);
        assert_eq!(settings.lease_namespace.as_str(), "seatlock");
        assert_eq!(settings.secret, None);
        assert_eq!(settings.lease_store_url(), "redis://r/");
    }

    #[test]
    fn lease_namespaces_are_parsed_once() {
        assert!("seatlock".parse::<LeaseNamespace>().is_ok());
        for bad in ["", "a b", "{x}"] {
            assert!(bad.parse::<LeaseNamespace>().is_err(), "{bad:?}");
        }
        let ns: LeaseNamespace = "t1".parse().unwrap();
        assert_eq!(ns.key("event", 4, "9").lease_key(), "lease:{t1:event:4}:9");
        assert_eq!(ns.session_key("AbC-_1"), "t1:session:AbC-_1");
    }
}
