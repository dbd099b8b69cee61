//! `load-test race`: reproduces the double-purchase race across several `seatlock-lab serve`
//! processes, one purchase strategy at a time, and checks the article's invariant on what
//! Postgres accepted; `load-test race --strategy groups` races buyers for overlapping
//! groups of seats, seat by seat against the one-script group hold. `load-test failover`:
//! a Redis failover that loses grants, with and without the failover guard (`make
//! failover`). `load-test queue`: a crowd through an on-sale's waiting room. `load-test
//! onsale`: the opening minute of an on-sale, a crowd against N servers (`make onsale`). See
//! `seatlock_harness::load`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use seatlock_harness::history::History;
use seatlock_harness::load::bids as bids_run;
use seatlock_harness::load::failover as failover_lab;
use seatlock_harness::load::groups::{self as lab_groups, GroupConfig, GroupStrategy};
use seatlock_harness::load::nemesis as nemesis_run;
use seatlock_harness::load::onsale as onsale_run;
use seatlock_harness::load::queue::{self as queue_lab, QueueConfig};
use seatlock_harness::load::race::{self as lab, RaceConfig};
use seatlock_harness::load::report::{self, Report, StrategyRow};
use seatlock_harness::load::throughput;
use seatlock_harness::{
    DEMO_VENUES, ServerProcess, auction_item, check, fresh_database, seed, test_settings,
};
use seatlock_lab::{LabSettings, PurchaseStrategy};
use sqlx::postgres::PgPoolOptions;

// The server's allocator: the crowd of `load-test onsale` (20,000 browsers in one
// process) spent a tenth of its time in glibc's malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "load-test",
    version,
    about = "Race buyers for the same seats and check who sells a seat twice"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Race buyers across server processes under each purchase strategy.
    Race(RaceArgs),
    /// Hold throughput: concurrent buyers hold and release seats of the arena.
    Holds(HoldsArgs),
    /// Bid rate of one auction item with many pages watching it live (docs/auction.md,
    /// "Watchers").
    Bids(BidsArgs),
    /// A Redis failover that loses grants, guard off and on (`make failover`).
    Failover(FailoverArgs),
    /// A crowd through an on-sale's waiting room across several servers: never more
    /// than N shopping, admission in arrival order; exits non-zero if a promise broke.
    Queue(QueueArgs),
    /// Buyers, tabs and bidders under a seeded schedule of faults, every operation in a
    /// history checked against a fenced lock (`make nemesis`); exits non-zero if a
    /// product workload is invalid, the unfenced one valid, a workload ran nothing, a
    /// fault could not be injected, or nothing interesting happened.
    Nemesis(NemesisArgs),
    /// The linearizability checker on Porcupine's test histories (`make linearizability`):
    /// each history's verdict, steps and time; exits non-zero if a verdict differs from
    /// Porcupine's.
    Porcupine(PorcupineArgs),
    /// The opening minute of an on-sale (`make onsale`): a crowd of lookers and buyers
    /// in a burst against N servers behind HAProxy; exits non-zero if a seat was sold
    /// twice or a buyer bought over the limit.
    Onsale(OnsaleArgs),
}

#[derive(clap::Args)]
struct PorcupineArgs {
    /// The folder of Porcupine's histories, with `expected.txt` (their verdicts).
    #[arg(long, default_value = "harness/tests/data/porcupine")]
    data: PathBuf,
}

#[derive(clap::Args)]
struct OnsaleArgs {
    /// People in the crowd: lookers and buyers (the bots come on top).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    buyers: u64,
    /// The share of the crowd that buys (1-4 seats with best available, then checkout);
    /// the rest open the map and its stream and watch.
    #[arg(long, default_value_t = 0.3, value_parser = share)]
    buy_share: f64,
    /// The share that hangs up: a looker closes the tab after 1-10 s, a buyer once their
    /// seats are held (never checking out).
    #[arg(long, default_value_t = 0.05, value_parser = share)]
    hang_up_share: f64,
    /// The share that tries again after a refusal or no answer (--retries times).
    #[arg(long, default_value_t = 0.5, value_parser = share)]
    retry_share: f64,
    /// How many times a retrying person tries again.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    retries: u32,
    /// Bots at the on-sale, each trying 5 fresh cookie jars straight to best available.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=1_000))]
    bots: u64,
    /// Server processes behind HAProxy (`make scale`'s N).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=16))]
    servers: u64,
    /// The servers' --max-seats-per-buyer; a buyer wants 1 to this (at most 4).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=100))]
    max_seats_per_buyer: u64,
    /// The servers' hold TTL, in ms (a hung-up buyer's seats come back after it).
    #[arg(long, default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(100..))]
    hold_ttl_ms: u64,
    /// The arena's waiting room: at most this many shopping at once (0: no room).
    #[arg(long, default_value_t = 0)]
    waiting_room_shoppers: u64,
    /// The servers' --admission-ttl-ms: how long an admitted visitor's turn lasts (a
    /// minute here, so a hung-up visitor's place comes back within the run).
    #[arg(long, default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1_000..=86_400_000))]
    admission_ttl_ms: u64,
    /// How long a queued visitor waits before asking the queue page again when the page
    /// names no refresh (an error page), in ms; otherwise they reload when the page says,
    /// as a browser without JavaScript does.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(100..))]
    poll_ms: u64,
    /// The crowd arrives spread over this many ms…
    #[arg(long, default_value_t = 5_000)]
    arrive_over_ms: u64,
    /// …and the on-sale is this far into it, in ms (who came earlier waits on the map,
    /// or in the pre-queue, and presses the button at the on-sale).
    #[arg(long, default_value_t = 2_000)]
    on_sale_after_ms: u64,
    /// How long a looker watches the map, in seconds.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    look_s: u64,
    /// The run ends after this many seconds even if buyers are still queued or waiting
    /// for seats to come back (a hung-up buyer's seats come back at the hold TTL, so
    /// selling out takes longer than it).
    #[arg(long, default_value_t = 1_500, value_parser = clap::value_parser!(u64).range(10..=7_200))]
    max_run_s: u64,
    /// One person in this many records on their stream when each hold arrived (the
    /// fan-out).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    probe_every: u64,
    /// Write the report as JSON here.
    #[arg(long, default_value = "target/onsale/report.json")]
    json: PathBuf,
    /// Write the HTML report (the numbers and the plots over time) here.
    #[arg(long, default_value = "target/onsale/report.html")]
    html: PathBuf,
    /// The stores and the server binary, as for `race` (a fresh database is created).
    #[command(flatten)]
    stores: Stores,
}

/// A share of the crowd: a number from 0 to 1.
fn share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(format!("{text:?} is not a share from 0 to 1")),
    }
}

#[derive(clap::Args)]
struct NemesisArgs {
    /// Draws the fault schedule and the clients' choices (default: drawn, and printed).
    #[arg(long, env = "SEED")]
    seed: Option<u64>,
    /// How long the clients work under the faults, in seconds.
    #[arg(long, env = "NEMESIS_SECONDS", default_value_t = 180, value_parser = clap::value_parser!(u64).range(10..=3_600))]
    seconds: u64,
    /// Buyers per seat workload.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    buyers: u64,
    /// Tabs per buyer (concurrent clients of one session).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=8))]
    tabs: u64,
    /// Bidders on the auction workload.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=64))]
    bidders: u64,
    /// Server processes per seat workload.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(2..=8))]
    servers: u64,
    /// The servers' hold and bid-lock TTL, in ms.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(200..))]
    hold_ttl_ms: u64,
    /// Where the leases are: `redis` (under Sentinel, with the sessions), `etcd` or
    /// `zookeeper` (three members; sessions on a Redis of their own).
    #[arg(long, value_enum, default_value = "redis")]
    store: nemesis_run::LeaseBackend,
    /// Write the report as JSON here; the histories go beside it.
    #[arg(long, default_value = "target/nemesis/report.json")]
    json: PathBuf,
    /// Write the HTML report (tables, first violations, timelines) here.
    #[arg(long, default_value = "target/nemesis/report.html")]
    html: PathBuf,
    /// The stores and the server binary, as for `race` (the run starts its own Redis
    /// primary, replica and Sentinels; only the Postgres admin URL is used).
    #[command(flatten)]
    stores: Stores,
}

#[derive(clap::Args)]
struct QueueArgs {
    /// Virtual buyers: each queues, is admitted, holds a seat, then buys or leaves.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    buyers: u64,
    /// The room's size (`waiting_room_shoppers`).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    shoppers: u64,
    /// Server processes; buyer i uses server i mod this.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=16))]
    servers: u64,
    /// Buyers arrive spread over this many milliseconds…
    #[arg(long, default_value_t = 4_000)]
    arrive_over_ms: u64,
    /// …and the on-sale is this far into it, in milliseconds (earlier arrivals join the
    /// pre-queue).
    #[arg(long, default_value_t = 2_000)]
    on_sale_after_ms: u64,
    /// How long an admitted buyer shops, in milliseconds.
    #[arg(long, default_value_t = 300)]
    shop_ms: u64,
    /// How often a queued buyer asks, in milliseconds (the page's stream: 2,000).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(100..))]
    poll_ms: u64,
    /// Bots: fresh cookie jars that try to hold without waiting their turn.
    #[arg(long, default_value_t = 20)]
    bots: u64,
    /// Write the result as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// The stores and the server binary, as for `race` (a fresh database is created).
    #[command(flatten)]
    stores: Stores,
}

#[derive(clap::Args)]
struct FailoverArgs {
    /// Write the report as JSON here.
    #[arg(long, default_value = "target/failover/report.json")]
    json: PathBuf,
    /// Write the HTML report (table and timelines) here.
    #[arg(long, default_value = "target/failover/report.html")]
    html: PathBuf,
    /// The stores and the server binary, as for `race` (the lab starts its own Redis
    /// primary, replica and Sentinels; only the Postgres admin URL is used).
    #[command(flatten)]
    stores: Stores,
}

#[derive(clap::Args)]
struct HoldsArgs {
    /// Concurrent buyers, each on its own seat.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1000))]
    buyers: u64,
    #[command(flatten)]
    run: Timed,
}

/// How long a throughput run lasts, where its result goes, and its stores.
#[derive(clap::Args)]
struct Timed {
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=300))]
    duration_s: u64,
    /// Write the result as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// The stores and the server binary, as for `race` (a fresh database is created).
    #[command(flatten)]
    stores: Stores,
}

#[derive(clap::Args)]
struct BidsArgs {
    /// Pages watching the item, each with its event stream open.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(0..=9_000))]
    watchers: u64,
    /// Bidders sending maxima at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    bidders: u64,
    #[command(flatten)]
    run: Timed,
}

/// Where the stores and the server binary are.
#[derive(clap::Args)]
struct Stores {
    /// Postgres admin URL; a fresh database is created under it for the run (with
    /// `race --target`: the targets' own database).
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// Redis for the servers this command starts.
    #[arg(long, env = "REDIS_URL")]
    redis_url: String,
    /// The `seatlock` binary to start (default: next to this one).
    #[arg(long, env = "SEATLOCK_SERVER_BIN")]
    server_bin: Option<PathBuf>,
    /// The `seatlock-lab` binary that `race`, `nemesis` and `failover` start: their
    /// servers run the race lab's strategies and pauses (default: next to this one).
    #[arg(long, env = "SEATLOCK_LAB_BIN")]
    lab_bin: Option<PathBuf>,
}

impl Stores {
    fn server_bin(&self) -> anyhow::Result<PathBuf> {
        match &self.server_bin {
            Some(path) => Ok(path.clone()),
            None => Ok(std::env::current_exe()?.with_file_name("seatlock")),
        }
    }

    fn lab_bin(&self) -> anyhow::Result<PathBuf> {
        match &self.lab_bin {
            Some(path) => Ok(path.clone()),
            None => Ok(std::env::current_exe()?.with_file_name("seatlock-lab")),
        }
    }
}

/// `--strategy` values.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Choice {
    Naive,
    Lease,
    /// A lease whose lapse is followed by a lock-delay (`--lock-delay-ms`), no fence.
    LockDelay,
    /// The product's path with cooling off: only the fence stops the stalled holder.
    FencedNoCooling,
    Fenced,
    Conditional,
    All,
    /// Buyers wanting overlapping groups of --group-size seats, held seat by seat
    /// against the one-script group hold (product servers, fenced).
    Groups,
}

#[derive(clap::Args)]
struct RaceArgs {
    /// Which strategy to race (`all`: the six rows side by side).
    #[arg(long, value_enum, default_value = "all")]
    strategy: Choice,
    /// Server processes per strategy (buyers of one seat are spread over them).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=16))]
    servers: u64,
    /// Buyers racing for each seat.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(2..=64))]
    buyers: u64,
    /// Contended seats per round.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=400))]
    seats: u64,
    /// Rounds, each on fresh seats.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    rounds: u64,
    /// The pausing holder's pause between its lock check and its write, in ms. Longer
    /// than --hold-ttl-ms, so its lease lapses while it is paused.
    #[arg(long, default_value_t = 600)]
    pause_ms: u64,
    /// The lock-delay of `--strategy lock-delay`, in ms: after a lease lapses nobody is
    /// granted the seat for this long. Shorter than the pause outlasts the lease, the
    /// race still sells twice; longer, it does not.
    #[arg(long, default_value_t = seatlock_lab::DEFAULT_LOCK_DELAY_MS)]
    lock_delay_ms: u64,
    /// Simulated payment time on the servers, in ms.
    #[arg(long, default_value_t = 20)]
    payment_delay_ms: u64,
    /// Hold (lease) TTL on the servers, in ms. Default 300 (shorter than --pause-ms, so
    /// the pausing holder's lease lapses); with --strategy groups 10000 (longer than any
    /// checkout: that race is about taking seats, not about stalled holders).
    #[arg(long, value_parser = clap::value_parser!(u64).range(100..))]
    hold_ttl_ms: Option<u64>,
    /// RNG seed: who pauses and when the others start.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// With --strategy groups: seats each buyer wants together (at most the servers'
    /// --max-seats-per-buyer, 8).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(2..=8))]
    group_size: u64,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a self-contained HTML report (table and latency charts) here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Race servers already running (`seatlock-lab serve --enable-race-lab` with the
    /// strategy named by --strategy) instead of starting them.
    #[arg(long, num_args = 1..)]
    target: Vec<String>,
    #[command(flatten)]
    stores: Stores,
}

impl RaceArgs {
    /// `--hold-ttl-ms`, or its default for the chosen race.
    fn hold_ttl_ms(&self) -> u64 {
        let default = if self.strategy == Choice::Groups {
            10_000
        } else {
            300
        };
        self.hold_ttl_ms.unwrap_or(default)
    }
}

/// One row of the race: a purchase strategy, and whether its servers cool a hold that
/// lapses mid-confirm (docs/time-to-pay.md; only the product's path marks its holds).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Row {
    strategy: PurchaseStrategy,
    cooling: bool,
}

impl Row {
    /// The strategy with cooling on, as it ships.
    fn of(strategy: PurchaseStrategy) -> Row {
        Row {
            strategy,
            cooling: true,
        }
    }

    /// The row's name in reports: the strategy's, `fenced-no-cooling` for the product's
    /// path with cooling off.
    fn name(self) -> &'static str {
        match (self.strategy, self.cooling) {
            (PurchaseStrategy::Fenced, false) => "fenced-no-cooling",
            (strategy, _) => strategy.short_name(),
        }
    }
}

impl Choice {
    fn rows(self) -> Vec<Row> {
        let fenced_no_cooling = Row {
            strategy: PurchaseStrategy::Fenced,
            cooling: false,
        };
        match self {
            // Each strategy, and the product's path twice: the fence alone, then with
            // cooling.
            Choice::All => PurchaseStrategy::ALL
                .into_iter()
                .flat_map(|strategy| match strategy {
                    PurchaseStrategy::Fenced => vec![fenced_no_cooling, Row::of(strategy)],
                    _ => vec![Row::of(strategy)],
                })
                .collect(),
            Choice::Naive => vec![Row::of(PurchaseStrategy::RaceLabNaive)],
            Choice::Lease => vec![Row::of(PurchaseStrategy::RaceLabUnfencedLease)],
            Choice::LockDelay => vec![Row::of(PurchaseStrategy::RaceLabLockDelay)],
            Choice::FencedNoCooling => vec![fenced_no_cooling],
            // The group race runs on the product's servers.
            Choice::Fenced | Choice::Groups => vec![Row::of(PurchaseStrategy::Fenced)],
            Choice::Conditional => vec![Row::of(PurchaseStrategy::RaceLabConditional)],
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let command = async {
        match Cli::parse().command {
            Command::Race(args) => race(args).await,
            Command::Holds(args) => holds(args).await,
            Command::Bids(args) => bids(args).await,
            Command::Failover(args) => failover(args).await,
            Command::Queue(args) => queue(args).await,
            Command::Nemesis(args) => nemesis(args).await,
            Command::Onsale(args) => onsale(args).await,
            Command::Porcupine(args) => porcupine(&args),
        }
    };
    // Ctrl-C ends the run through its destructors, which stop every server, Redis,
    // Sentinel and etcd it started (a plain SIGINT would leave them running).
    tokio::select! {
        done = command => done,
        _ = tokio::signal::ctrl_c() => bail!("interrupted: the processes this run started are stopped"),
    }
}

async fn queue(args: QueueArgs) -> anyhow::Result<()> {
    let ms = Duration::from_millis;
    let config = QueueConfig {
        buyers: args.buyers as usize,
        shoppers: args.shoppers,
        servers: args.servers as usize,
        arrive_over: ms(args.arrive_over_ms),
        on_sale_after: ms(args.on_sale_after_ms),
        shop_for: ms(args.shop_ms),
        poll_every: ms(args.poll_ms),
        bots: args.bots as usize,
    };
    let stores = &args.stores;
    let report = queue_lab::run(
        &stores.server_bin()?,
        &stores.database_url,
        &stores.redis_url,
        &config,
    )
    .await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    if let Some(path) = &args.json {
        write_output(path, &serde_json::to_string_pretty(&report)?)?;
    }
    if !report.kept(&config) {
        bail!("the waiting room broke a promise in this run (see the report above)");
    }
    Ok(())
}

async fn onsale(args: OnsaleArgs) -> anyhow::Result<()> {
    let ms = Duration::from_millis;
    let config = onsale_run::OnsaleConfig {
        buyers: args.buyers as usize,
        buy_share: args.buy_share,
        hang_up_share: args.hang_up_share,
        retry_share: args.retry_share,
        retries: args.retries,
        bots: args.bots as usize,
        servers: args.servers as usize,
        max_seats_per_buyer: args.max_seats_per_buyer,
        hold_ttl: ms(args.hold_ttl_ms),
        waiting_room_shoppers: args.waiting_room_shoppers,
        admission_ttl: ms(args.admission_ttl_ms),
        poll_every: ms(args.poll_ms),
        arrive_over: ms(args.arrive_over_ms),
        on_sale_after: ms(args.on_sale_after_ms),
        look_for: Duration::from_secs(args.look_s),
        max_run: Duration::from_secs(args.max_run_s),
        probe_every: args.probe_every as usize,
    };
    // A connection per person, and another while a page loads beside a stream.
    let wanted = 3 * (args.buyers + args.bots) + 1_024;
    let limit = onsale_run::raise_fd_limit(wanted);
    if limit < wanted {
        eprintln!(
            "note: open files limited to {limit} (wanted {wanted}): some connections will fail"
        );
    }
    let progress = ProgressBar::new(0).with_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} people done · {msg}",
        )?
        .progress_chars("=> "),
    );
    let run = onsale_run::run(
        &args.stores.server_bin()?,
        &args.stores.database_url,
        &args.stores.redis_url,
        &config,
        &progress,
    )
    .await?;
    progress.finish_and_clear();
    println!("{}", onsale_run::report::table(&run));
    write_output(&args.json, &serde_json::to_string_pretty(&run.report)?)?;
    write_output(
        &args.html,
        &onsale_run::report::html(&run).map_err(anyhow::Error::msg)?,
    )?;
    if run.report.double_sales > 0 || run.report.over_limit > 0 {
        bail!(
            "{} seat(s) sold twice, {} buyer(s) over the limit",
            run.report.double_sales,
            run.report.over_limit
        );
    }
    Ok(())
}

async fn failover(args: FailoverArgs) -> anyhow::Result<()> {
    let report = failover_lab::run(&args.stores.lab_bin()?, &args.stores.database_url).await?;
    println!("{}", failover_lab::table(&report));
    let history_dir = output_dir(Some(&args.json), "target/failover");
    for run in &report.runs {
        write_history(&history_dir, &run.name, &run.history)?;
    }
    write_output(&args.json, &serde_json::to_string_pretty(&report)?)?;
    write_output(
        &args.html,
        &failover_lab::html(&report).map_err(anyhow::Error::msg)?,
    )
}

async fn nemesis(args: NemesisArgs) -> anyhow::Result<()> {
    let config = nemesis_run::NemesisConfig {
        seed: args.seed.unwrap_or_else(rand::random),
        duration: Duration::from_secs(args.seconds),
        buyers: args.buyers as usize,
        tabs: args.tabs as usize,
        bidders: args.bidders as usize,
        servers: args.servers as usize,
        hold_ttl_ms: args.hold_ttl_ms,
        store: args.store,
    };
    println!(
        "Nemesis seed {seed} ({seconds} s, on {store}): run it again with \
         STORE={store} NEMESIS_SECONDS={seconds} SEED={seed} make nemesis",
        seed = config.seed,
        seconds = args.seconds,
        store = config.store.name(),
    );
    let out = args.json.parent().unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(out)?;
    let progress = ProgressBar::new(args.seconds).with_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} s {msg}")?
            .progress_chars("=> "),
    );
    let report = nemesis_run::run(
        &config,
        &args.stores.lab_bin()?,
        &args.stores.database_url,
        out,
        &progress,
    )
    .await?;
    progress.finish_and_clear();
    println!("{}", nemesis_run::table(&report));
    write_output(&args.json, &serde_json::to_string_pretty(&report)?)?;
    write_output(
        &args.html,
        &nemesis_run::html(&report).map_err(anyhow::Error::msg)?,
    )?;
    if !report.passed() {
        bail!(
            "the nemesis run failed (seed {}): {}",
            config.seed,
            report.failures.join("; ")
        );
    }
    Ok(())
}

async fn bids(args: BidsArgs) -> anyhow::Result<()> {
    let url = fresh_database(&args.run.stores.database_url).await?;
    let db = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await?;
    let item = seatlock::auction::queries::insert_item(&db, &auction_item("Watched poster"))
        .await?
        .context("a fresh slug")?;
    // A connection per watcher here and in the server (which inherits the limit).
    onsale_run::raise_fd_limit(args.watchers * 2 + 1_024);
    let settings = test_settings(&url, &args.run.stores.redis_url);
    let server = ServerProcess::start(&args.run.stores.server_bin()?, &settings).await?;
    let report = bids_run::run(
        &server.address,
        &server.metrics_url,
        item,
        args.watchers as usize,
        args.bidders as usize,
        Duration::from_secs(args.run.duration_s),
    )
    .await?;
    println!(
        "{} watchers, {} bidders, {:.1} s: {} bids accepted, {:.1} bids/s, latency p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, {} refused; {} updates pushed, {} page reads",
        report.watchers,
        report.bidders,
        report.seconds,
        report.accepted,
        report.per_s,
        report.latency_ms.p50,
        report.latency_ms.p95,
        report.latency_ms.p99,
        report.refused,
        report.updates_pushed,
        report.page_reads
    );
    if let Some(path) = &args.run.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}

async fn holds(args: HoldsArgs) -> anyhow::Result<()> {
    let url = fresh_database(&args.run.stores.database_url).await?;
    seed(&url, DEMO_VENUES).await?;
    let db = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await?;
    let (event_id, seats): (i64, Vec<i64>) = {
        let event = sqlx::query_scalar(
            "SELECT e.id FROM events e JOIN venues v ON v.id = e.venue_id WHERE v.slug = 'harbour-arena'",
        )
        .fetch_one(&db)
        .await?;
        let seats = sqlx::query_scalar(
            "SELECT seat_id FROM event_seats WHERE event_id = $1 ORDER BY seat_id",
        )
        .bind(event)
        .fetch_all(&db)
        .await?;
        (event, seats)
    };
    let settings = test_settings(&url, &args.run.stores.redis_url);
    let server = ServerProcess::start(&args.run.stores.server_bin()?, &settings).await?;
    let duration = Duration::from_secs(args.run.duration_s);
    let result = throughput::run(
        &server.address,
        "/",
        event_id,
        &seats,
        args.buyers as usize,
        duration,
    )
    .await?;
    println!(
        "{} buyers, {:.1} s: {} holds, {:.0} holds/s, hold latency p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, {} failures",
        result.buyers,
        result.seconds,
        result.requests,
        result.per_s,
        result.latency_ms.p50,
        result.latency_ms.p95,
        result.latency_ms.p99,
        result.failures
    );
    if let Some(path) = &args.run.json {
        std::fs::write(path, serde_json::to_string_pretty(&result)?)?;
    }
    Ok(())
}

async fn race(args: RaceArgs) -> anyhow::Result<()> {
    let rows = args.strategy.rows();
    if args.strategy != Choice::Groups && args.pause_ms <= args.hold_ttl_ms() {
        eprintln!(
            "note: --pause-ms is not longer than --hold-ttl-ms, so no lease lapses mid-purchase"
        );
    }
    let database_url = if args.target.is_empty() {
        let url = fresh_database(&args.stores.database_url).await?;
        seed(&url, DEMO_VENUES).await?;
        url
    } else {
        if rows.len() != 1 {
            bail!("with --target, name the one --strategy the targets run");
        }
        check_targets(&args.target, rows[0].strategy).await?;
        args.stores.database_url.clone()
    };
    let db = PgPoolOptions::new()
        .max_connections(4)
        .connect(&database_url)
        .await?;
    let server_bin = args.stores.lab_bin()?;
    let config = RaceConfig {
        buyers: args.buyers as usize,
        seats: args.seats as usize,
        rounds: args.rounds as usize,
        pause: Duration::from_millis(args.pause_ms),
        hold_ttl: Duration::from_millis(args.hold_ttl_ms()),
        seed: args.seed,
    };
    let groups = (args.strategy == Choice::Groups).then(|| GroupConfig {
        race: config.clone(),
        group_size: args.group_size as usize,
    });
    let per_strategy = match &groups {
        Some(groups) => (groups.groups() * GroupStrategy::BOTH.len()) as u64,
        None => (config.buyers * config.seats * config.rounds) as u64,
    };
    let progress = ProgressBar::new(per_strategy * rows.len() as u64).with_style(
        ProgressStyle::with_template(
            "{spinner} {msg:12} [{bar:40}] {pos}/{len} attempts, {elapsed}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    let mut report = Report::default();
    let history_dir = output_dir(args.json.as_deref(), "target/race");
    let mut disagreements = Vec::new();
    for row in rows {
        let strategy = row.strategy;
        if let Some(groups) = &groups {
            let servers = Servers::start(&server_bin, &args, &database_url, row).await?;
            for side in GroupStrategy::BOTH {
                progress.set_message(side.short_name());
                let label = format!(
                    "Race lab: groups {} (seed {})",
                    side.short_name(),
                    args.seed
                );
                let (event_id, seats) = lab::create_race_event(&db, &label).await?;
                let row = lab_groups::race(
                    groups,
                    side,
                    &servers.addresses,
                    &db,
                    event_id,
                    &seats,
                    &progress,
                )
                .await?;
                report.groups.push(row);
            }
            continue;
        }
        progress.set_message(row.name());
        let label = format!("Race lab: {} (seed {})", row.name(), args.seed);
        let (event_id, seats) = lab::create_race_event(&db, &label).await?;
        let servers = Servers::start(&server_bin, &args, &database_url, row).await?;
        let numbers = lab::race(
            &config,
            strategy,
            &servers.addresses,
            event_id,
            &seats,
            &progress,
        )
        .await?;
        let checked = check::check(&db, event_id).await?;
        let verdict = numbers.judge_history(strategy, &checked);
        let fenced = strategy == PurchaseStrategy::Fenced;
        let (rows, check_ms) = report::linearizability(&numbers.history.ops(), true, fenced);
        write_history(&history_dir, row.name(), &numbers.history)?;
        // Two checkers of one race: Postgres's rows and the history. Where they disagree
        // on whether a seat was sold twice, one of them is broken.
        if verdict.valid == (checked.double_sold_seats > 0) {
            disagreements.push(format!(
                "{}: {} seat(s) sold twice in Postgres, but the history checker found it {} ({})",
                row.name(),
                checked.double_sold_seats,
                if verdict.valid { "valid" } else { "invalid" },
                verdict
                    .violations
                    .first()
                    .map_or("no violation".into(), |v| format!("first: {}", v.message)),
            ));
        }
        report.strategies.push(StrategyRow::new(
            row.name(),
            &numbers,
            checked,
            &verdict,
            (rows.linearizable, check_ms),
        ));
    }
    progress.finish_and_clear();
    if report.groups.is_empty() {
        println!("{}", report::table(&report));
    } else {
        println!("{}", lab_groups::table(&report.groups));
    }
    let failures: usize = report.strategies.iter().map(|r| r.failures).sum::<usize>()
        + report.groups.iter().map(|r| r.failures).sum::<usize>();
    if failures > 0 {
        println!("{failures} attempt(s) ended in an unexpected status (see the servers' logs)");
    }
    print!("{}", report::violations(&report, 3));
    write_outputs(&args, &report)?;
    if !disagreements.is_empty() {
        for line in &disagreements {
            eprintln!("CHECKERS DISAGREE: {line}");
        }
        bail!(
            "the history checker and the Postgres check disagree on {} strategy(ies): one of them is broken",
            disagreements.len()
        );
    }
    Ok(())
}

/// The servers one strategy is raced on: `--target`'s, or `--servers` processes this
/// command started (`processes` keeps them alive).
struct Servers {
    addresses: Vec<String>,
    _processes: Vec<ServerProcess>,
}

impl Servers {
    /// `--target`'s addresses, or `--servers` new processes with `row`'s strategy and
    /// cooling (race lab enabled) on one shared Redis namespace and database.
    async fn start(
        binary: &std::path::Path,
        args: &RaceArgs,
        database_url: &str,
        row: Row,
    ) -> anyhow::Result<Servers> {
        if !args.target.is_empty() {
            return Ok(Servers {
                addresses: args.target.clone(),
                _processes: Vec::new(),
            });
        }
        let mut settings = test_settings(database_url, &args.stores.redis_url);
        settings.hold_ttl_ms = args.hold_ttl_ms();
        settings.payment_delay_ms = args.payment_delay_ms;
        let lab = LabSettings {
            purchase_strategy: row.strategy,
            lab_disable_cooling: !row.cooling,
            lab_lock_delay_ms: args.lock_delay_ms,
            ..LabSettings::enabled()
        };
        let mut processes = Vec::new();
        for _ in 0..args.servers {
            processes.push(ServerProcess::start_lab(binary, &settings, &lab).await?);
        }
        Ok(Servers {
            addresses: processes.iter().map(|p| p.address.clone()).collect(),
            _processes: processes,
        })
    }
}

/// Checks that every target runs the race lab with `strategy` (`GET /race-lab`).
async fn check_targets(targets: &[String], strategy: PurchaseStrategy) -> anyhow::Result<()> {
    for target in targets {
        let url = format!("{}/race-lab", target.trim_end_matches('/'));
        let body = reqwest::get(&url)
            .await?
            .error_for_status()
            .with_context(|| {
                format!(
                    "{url}: start the target with seatlock-lab serve --enable-race-lab --purchase-strategy {}",
                    strategy.flag_value()
                )
            })?;
        let running: serde_json::Value = serde_json::from_str(&body.text().await?)?;
        if running["strategy"] != strategy.flag_value() {
            bail!(
                "{target} runs {}, not {}",
                running["strategy"],
                strategy.flag_value()
            );
        }
    }
    Ok(())
}

/// `load-test porcupine`: every history of `expected.txt`, checked and timed.
fn porcupine(args: &PorcupineArgs) -> anyhow::Result<()> {
    use seatlock_harness::history::linearizability::Budget;
    use seatlock_harness::history::porcupine::{check_log, expected};
    let list = std::fs::read_to_string(args.data.join("expected.txt"))
        .with_context(|| format!("reading {}", args.data.join("expected.txt").display()))?;
    let (mut differ, mut slowest) = (Vec::new(), (0.0, String::new()));
    println!("| history | Porcupine | here | steps | ms |\n|---|---|---|---:|---:|");
    for (name, linearizable) in expected(&list).map_err(anyhow::Error::msg)? {
        let log = std::fs::read_to_string(args.data.join(&name))?;
        let started = std::time::Instant::now();
        let (verdict, steps) =
            check_log(&name, &log, Budget::DEFAULT).map_err(anyhow::Error::msg)?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        println!(
            "| {name} | {linearizable} | {} | {steps} | {ms:.1} |",
            verdict.name()
        );
        if verdict.name() != linearizable.to_string() {
            differ.push(name.clone());
        }
        if ms > slowest.0 {
            slowest = (ms, name);
        }
    }
    println!("slowest: {} in {:.1} ms", slowest.1, slowest.0);
    if !differ.is_empty() {
        bail!("verdicts differ from Porcupine's: {}", differ.join(", "));
    }
    Ok(())
}

fn write_outputs(args: &RaceArgs, report: &Report) -> anyhow::Result<()> {
    for (path, text) in [
        (&args.json, serde_json::to_string_pretty(report)?),
        (
            &args.html,
            report::html(report).map_err(anyhow::Error::msg)?,
        ),
    ] {
        if let Some(path) = path {
            write_output(path, &text)?;
        }
    }
    Ok(())
}

/// The folder of `json` (where a lab's other outputs go beside its report), or `default`
/// without one.
fn output_dir(json: Option<&std::path::Path>, default: &str) -> PathBuf {
    json.and_then(std::path::Path::parent)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from(default), std::path::Path::to_path_buf)
}

/// Writes `history` to `dir/history-<name, lowercase, dashes for the rest>.jsonl` and
/// says so.
fn write_history(dir: &std::path::Path, name: &str, history: &History) -> anyhow::Result<()> {
    let slug: String = name
        .to_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|word| !word.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    let path = dir.join(format!("history-{slug}.jsonl"));
    history
        .write_jsonl(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Writes `text` to `path`, creating its folder, and says so.
fn write_output(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}
