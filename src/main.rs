//! The `seatlock` binary: `serve`, `migrate`, `seed`.

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
            settings
                .refuse_lab_settings_without_the_lab()
                .unwrap_or_else(|err| err.exit());
            let app = Application::build(*settings).await?;
            println!("seatlock is serving at http://{}", app.address());
            println!("metrics at http://{}/metrics", app.metrics_address());
            println!("leases in {}, sessions in Redis", app.state().leases.name());
            let state = app.state().clone();
            app.run_until(async move {
                if shutdown_signal().await == Stop::Drain {
                    // A second signal (Ctrl-C, another SIGTERM) cuts the drain short.
                    tokio::select! {
                        () = seatlock::http::health::drain(&state) => {}
                        _ = shutdown_signal() => {}
                    }
                }
            })
            .await?;
        }
        Command::Migrate(db) => {
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .connect(&db.database_url)
                .await?;
            seatlock::MIGRATOR.run(&pool).await?;
            println!("migrations applied");
        }
        Command::Seed(args) => {
            let pool = PgPoolOptions::new()
                .max_connections(2)
                .connect(&args.database.database_url)
                .await?;
            let (venues, seats) = seatlock::seed::seed(&pool, &args.venues).await?;
            println!("seeded {venues} new venue(s) with {seats} seats");
            let auctions = seatlock::seed::seed_auctions(&pool, &args.auctions).await?;
            println!("opened {auctions} new auction(s)");
        }
    }
    Ok(())
}

/// How the server was told to stop.
#[derive(PartialEq)]
enum Stop {
    /// Ctrl-C: a person at a terminal; stop accepting and finish in-flight requests now.
    Now,
    /// SIGTERM (`docker stop`, `kill`, a supervisor rolling the servers): drain first.
    Drain,
}

/// Waits for Ctrl-C or SIGTERM.
async fn shutdown_signal() -> Stop {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => Stop::Now,
        _ = term.recv() => Stop::Drain,
    }
}
