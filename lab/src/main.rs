//! The `seatlock-lab` binary: the product's `serve`, `migrate` and `seed`, with the race
//! lab plugged in. `serve` takes every flag of `seatlock serve` and the lab's own
//! ([`seatlock_lab::LabSettings`]).

use clap::{Args, Parser, Subcommand};
use seatlock::config::{DatabaseArgs, SeedArgs, Settings};
use seatlock_lab::LabSettings;
use sqlx::postgres::PgPoolOptions;
use tracing_subscriber::EnvFilter;

// The product's allocator, so that the lab's servers perform as the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `seatlock-lab serve | migrate | seed`.
#[derive(Debug, Parser)]
#[command(
    name = "seatlock-lab",
    version,
    about = "seatlock with the race lab: unsafe strategies, pauses and the lab at /lab"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the web application with the race lab.
    Serve(Box<Serve>),
    /// Apply the product's migrations, then the lab's, and exit.
    Migrate(DatabaseArgs),
    /// As `seatlock seed`.
    Seed(SeedArgs),
}

/// The product's flags and the lab's.
#[derive(Debug, Args)]
struct Serve {
    #[command(flatten)]
    settings: Settings,
    #[command(flatten)]
    lab: LabSettings,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "seatlock=info,seatlock_lab=info,warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Serve(serve) => {
            // Clap's own refusal, with its usage text and exit code.
            serve.lab.check().unwrap_or_else(|err| err.exit());
            let app = seatlock_lab::build(serve.settings, &serve.lab).await?;
            app.serve_until_signalled("seatlock-lab").await?;
        }
        Command::Migrate(db) => {
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .connect(&db.database_url)
                .await?;
            seatlock_lab::migrate(&pool).await?;
            println!("migrations applied");
        }
        Command::Seed(args) => seatlock::seed::run(&args).await?,
    }
    Ok(())
}
