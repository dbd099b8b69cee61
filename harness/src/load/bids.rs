//! `load-test bids`: the bid rate of one auction item while many pages watch it live
//! (docs/auction.md, "Watchers"). Watchers open the item's event stream and count the
//! updates they are pushed; bidders state rising maxima through the real HTTP flow
//! (session, CSRF token, form), each next maximum $100.00 above the last one sent, so
//! that every bid is high enough whatever the price's band (the largest increment is
//! $100.00) and each one that gets its turn is accepted. What it measures: accepted bids
//! per second, their latency, and how many page reads the server made for the watchers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde::Serialize;

use super::throughput::{histogram, latency_ms};
use crate::http::{EventStream, HttpBuyer};

/// How far each maximum is above the last one sent, in cents: the largest increment of
/// the published table, so a maximum is always at least the price plus its increment.
const STEP_CENTS: u64 = 10_000;

/// What one run measured.
#[derive(Debug, Serialize)]
pub struct BidsReport {
    /// Pages watching the item (each an open event stream).
    pub watchers: usize,
    /// Bidders sending maxima at once.
    pub bidders: usize,
    /// Seconds measured.
    pub seconds: f64,
    /// Bids accepted.
    pub accepted: u64,
    /// Accepted bids per second.
    pub per_s: f64,
    /// Latency percentiles of the accepted bids, ms.
    pub latency_ms: super::report::Latency,
    /// Bids refused (busy lock, or overtaken by a higher maximum first) or unanswered.
    pub refused: u64,
    /// Updates the watchers were pushed, all together.
    pub updates_pushed: u64,
    /// Page reads the server made meanwhile (`seatlock_auction_page_reads_total`).
    pub page_reads: u64,
}

/// Runs `bidders` bidders against item `item` on the server at `base` for `duration`,
/// with `watchers` pages open on it; `metrics_url` is the server's `/metrics`.
pub async fn run(
    base: &str,
    metrics_url: &str,
    item: i64,
    watchers: usize,
    bidders: usize,
    duration: Duration,
) -> anyhow::Result<BidsReport> {
    let stop = Arc::new(AtomicBool::new(false));
    let pushed = Arc::new(AtomicU64::new(0));
    let stream = format!("{base}/auctions/{item}/stream");
    let mut streams = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        let mut watcher = EventStream::open(&stream).await;
        watcher.next_or_end().await; // the snapshot
        streams.push(watcher);
    }
    let watching: Vec<_> = streams
        .into_iter()
        .map(|mut watcher| {
            let (stop, pushed) = (stop.clone(), pushed.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let next =
                        tokio::time::timeout(Duration::from_millis(200), watcher.next_or_end());
                    match next.await {
                        Ok(Some(_)) => {
                            pushed.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(None) => break,
                        Err(_) => {}
                    }
                }
            })
        })
        .collect();

    let page = format!("{base}/auctions/{item}");
    let next_cents = Arc::new(AtomicU64::new(1_000));
    let reads_before = page_reads(metrics_url).await?;
    let started = Instant::now();
    let bidding: Vec<_> = (0..bidders)
        .map(|_| {
            let (page, stop, next_cents) = (page.clone(), stop.clone(), next_cents.clone());
            tokio::spawn(async move {
                let mut buyer = HttpBuyer::new();
                let (mut latencies, mut refused) = (histogram(), 0_u64);
                if buyer.get(&page).await.is_err() {
                    return (latencies, 1);
                }
                while !stop.load(Ordering::Relaxed) {
                    let cents = next_cents.fetch_add(STEP_CENTS, Ordering::SeqCst);
                    let amount = format!("{}.{:02}", cents / 100, cents % 100);
                    let sent = Instant::now();
                    let url = format!("{page}/bids");
                    match buyer.post(&url, &[("amount", &amount)]).await {
                        Ok(r) if r.status == StatusCode::SEE_OTHER => {
                            let micros = sent.elapsed().as_micros() as u64;
                            latencies.saturating_record(micros.max(1));
                        }
                        _ => refused += 1,
                    }
                }
                (latencies, refused)
            })
        })
        .collect();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let (mut all, mut refused) = (histogram(), 0);
    for bidder in bidding {
        let (latencies, r) = bidder.await?;
        all.add(&latencies)?;
        refused += r;
    }
    let seconds = started.elapsed().as_secs_f64();
    // The last bid's updates reach the watchers after its answer: give them a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let page_reads = page_reads(metrics_url).await? - reads_before;
    for watcher in watching {
        watcher.await?;
    }
    Ok(BidsReport {
        watchers,
        bidders,
        seconds,
        accepted: all.len(),
        per_s: all.len() as f64 / seconds,
        latency_ms: latency_ms(&all),
        refused,
        updates_pushed: pushed.load(Ordering::Relaxed),
        page_reads,
    })
}

/// `seatlock_auction_page_reads_total` on the server's `/metrics`.
async fn page_reads(metrics_url: &str) -> anyhow::Result<u64> {
    Ok(crate::http::metric(metrics_url, "seatlock_auction_page_reads_total").await? as u64)
}
