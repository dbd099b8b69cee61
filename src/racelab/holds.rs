//! `load-test holds`: hold throughput and latency. Concurrent buyers each hold one seat of
//! the arena, release it, and go again, through the real HTTP flow, for a fixed time.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use reqwest::StatusCode;
use serde::Serialize;

use crate::testkit::HttpBuyer;

/// What a holds run measured.
#[derive(Debug, Serialize)]
pub struct HoldsReport {
    pub buyers: usize,
    pub seconds: f64,
    pub holds: u64,
    pub holds_per_s: f64,
    /// HTTP hold latency percentiles, ms.
    pub hold_ms: super::report::Latency,
    /// Requests that did not answer 303 (should be 0).
    pub failures: u64,
}

/// Runs `buyers` concurrent buyers against `server` for `duration`, each on its own seat
/// (`seat_ids[i]`). Each iteration is a hold (timed) then a release (not timed).
pub async fn run(
    server: &str,
    event_id: i64,
    seat_ids: &[i64],
    buyers: usize,
    duration: Duration,
) -> anyhow::Result<HoldsReport> {
    anyhow::ensure!(
        seat_ids.len() >= buyers,
        "not enough seats for {buyers} buyers"
    );
    let deadline = Instant::now() + duration;
    let started = Instant::now();
    let tasks: Vec<_> = seat_ids[..buyers]
        .iter()
        .map(|&seat| {
            let server = server.to_owned();
            tokio::spawn(async move {
                let mut histogram =
                    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
                let mut failures = 0;
                let mut buyer = HttpBuyer::new();
                buyer.get(&format!("{server}/")).await?;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let hold = buyer.seat_action(&server, event_id, seat, "hold").await?;
                    histogram.saturating_record(t.elapsed().as_micros() as u64);
                    let release = buyer
                        .seat_action(&server, event_id, seat, "release")
                        .await?;
                    failures += [hold.status, release.status]
                        .iter()
                        .filter(|s| **s != StatusCode::SEE_OTHER)
                        .count() as u64;
                }
                anyhow::Ok((histogram, failures))
            })
        })
        .collect();
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
    let mut failures = 0;
    for task in tasks {
        let (histogram, failed) = task.await??;
        all.add(histogram)?;
        failures += failed;
    }
    let seconds = started.elapsed().as_secs_f64();
    let ms = |q: f64| all.value_at_quantile(q) as f64 / 1000.0;
    Ok(HoldsReport {
        buyers,
        seconds,
        holds: all.len(),
        holds_per_s: all.len() as f64 / seconds,
        hold_ms: super::report::Latency {
            p50: ms(0.5),
            p95: ms(0.95),
            p99: ms(0.99),
        },
        failures,
    })
}
