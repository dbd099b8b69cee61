//! The `seatlock` binary: `serve`, `migrate`, `seed`. It has no race lab: that is the
//! `seatlock-lab` binary of the `lab/` crate.

use clap::Parser;
use seatlock::app::Application;
use seatlock::config::{Cli, Command};
use sqlx::postgres::PgPoolOptions;
use tracing_subscriber::EnvFilter;

// mimalloc, not glibc's malloc: a profile of the hold path put a quarter of the server's
// CPU in malloc, free and their consolidation (docs/performance.md, "Where the time goes").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| "seatlock=info,warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Serve(settings) => {
            let app = Application::build(*settings).await?;
            app.serve_until_signalled("seatlock").await?;
        }
        Command::Migrate(db) => {
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .connect(&db.database_url)
                .await?;
            seatlock::MIGRATOR.run(&pool).await?;
            println!("migrations applied");
        }
        Command::Seed(args) => seatlock::seed::run(&args).await?,
    }
    Ok(())
}
