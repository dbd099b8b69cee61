//! `load-test holds` and the bench's HTTP rows: hold and confirm throughput and latency
//! through the real HTTP flow (session cookie, CSRF token, forms), each buyer on its own
//! seats, so nothing is contended and the figures are the cost of the path itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use reqwest::StatusCode;
use serde::Serialize;
use tokio::sync::{Barrier, Mutex};

use crate::http::{HttpBuyer, Reply};

/// What a run measured: the timed requests (holds, or confirms) of `buyers` buyers.
#[derive(Debug, Serialize)]
pub struct RunReport {
    /// Buyers sending requests at once.
    pub buyers: usize,
    /// Seconds measured (for confirms: the confirm phases only).
    pub seconds: f64,
    /// Timed requests answered.
    pub requests: u64,
    /// Timed requests answered per second.
    pub per_s: f64,
    /// Latency percentiles of the timed requests, ms.
    pub latency_ms: super::report::Latency,
    /// Requests that did not answer 303 (should be 0).
    pub failures: u64,
}

impl RunReport {
    /// The report of `buyers` buyers whose timed requests took `all` (µs) over `seconds`.
    pub(super) fn new(
        buyers: usize,
        seconds: f64,
        all: &Histogram<u64>,
        failures: u64,
    ) -> RunReport {
        RunReport {
            buyers,
            seconds,
            requests: all.len(),
            per_s: all.len() as f64 / seconds,
            latency_ms: latency_ms(all),
            failures,
        }
    }
}

/// A latency histogram in microseconds, 1 µs to 60 s, 3 significant digits.
pub(super) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds")
}

/// p50 / p95 / p99 of a histogram in microseconds, as milliseconds.
pub(super) fn latency_ms(all: &Histogram<u64>) -> super::report::Latency {
    let ms = |q: f64| all.value_at_quantile(q) as f64 / 1000.0;
    super::report::Latency {
        p50: ms(0.5),
        p95: ms(0.95),
        p99: ms(0.99),
    }
}

/// Counts the replies that are not 303 See Other (what every seat form answers).
pub(super) fn not_redirects(replies: &[StatusCode]) -> u64 {
    replies
        .iter()
        .filter(|s| **s != StatusCode::SEE_OTHER)
        .count() as u64
}

/// 1 unless `reply` is a 303 See Other: a failed request (no answer) counts too, so a
/// confirms run never leaves the other buyers waiting at a barrier.
fn failed(reply: anyhow::Result<Reply>) -> u64 {
    reply.map_or(1, |r| not_redirects(&[r.status]))
}

/// One buyer's latencies (µs) and failed requests.
pub(super) type BuyerResult = anyhow::Result<(Histogram<u64>, u64)>;

/// Merges the buyers' histograms and failure counts.
pub(super) async fn merge(tasks: Vec<tokio::task::JoinHandle<BuyerResult>>) -> BuyerResult {
    let mut all = histogram();
    let mut failures = 0;
    for task in tasks {
        let (histogram, failed) = task.await??;
        all.add(histogram)?;
        failures += failed;
    }
    Ok((all, failures))
}

/// Runs `buyers` concurrent buyers against `server` for `duration`, each on its own seat
/// (`seat_ids[i]`). Each iteration is a hold (timed) then a release (not timed). Each
/// buyer first opens `form_page` (a path with a form, e.g. `/`: the session cookie and
/// the CSRF token; choose a cheap one).
pub async fn run(
    server: &str,
    form_page: &str,
    event_id: i64,
    seat_ids: &[i64],
    buyers: usize,
    duration: Duration,
) -> anyhow::Result<RunReport> {
    anyhow::ensure!(
        seat_ids.len() >= buyers,
        "not enough seats for {buyers} buyers"
    );
    let deadline = Instant::now() + duration;
    let started = Instant::now();
    let tasks: Vec<_> = seat_ids[..buyers]
        .iter()
        .map(|&seat| {
            let (server, form_page) = (server.to_owned(), format!("{server}{form_page}"));
            tokio::spawn(async move {
                let mut histogram = histogram();
                let mut failures = 0;
                let mut buyer = HttpBuyer::new();
                buyer.get(&form_page).await?;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let hold = buyer.seat_action(&server, event_id, seat, "hold").await?;
                    histogram.saturating_record(t.elapsed().as_micros() as u64);
                    let release = buyer
                        .seat_action(&server, event_id, seat, "release")
                        .await?;
                    failures += not_redirects(&[hold.status, release.status]);
                }
                anyhow::Ok((histogram, failures))
            })
        })
        .collect();
    let (all, failures) = merge(tasks).await?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(RunReport::new(buyers, seconds, &all, failures))
}

/// Page-view throughput: `viewers` concurrent clients each GET `path` of `server` over and
/// over for `duration`, each with the cookies of one earlier visit (a returning viewer)
/// and `Accept-Encoding: gzip` (the body is read as the network carries it, not
/// inflated). Counts the answers that are 200 OK; any other is a failure.
pub async fn page_views(
    server: &str,
    path: &str,
    viewers: usize,
    duration: Duration,
) -> anyhow::Result<RunReport> {
    let deadline = Instant::now() + duration;
    let started = Instant::now();
    let url = format!("{server}{path}");
    let tasks: Vec<_> = (0..viewers)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let client = reqwest::Client::builder().cookie_store(true).build()?;
                // The first visit: the buyer cookie, so the timed views are a returning
                // viewer's.
                client.get(&url).send().await?.bytes().await?;
                let mut histogram = histogram();
                let mut failures = 0;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let reply = client
                        .get(&url)
                        .header(reqwest::header::ACCEPT_ENCODING, "gzip")
                        .send()
                        .await?;
                    let status = reply.status();
                    reply.bytes().await?;
                    histogram.saturating_record(t.elapsed().as_micros() as u64);
                    failures += u64::from(status != StatusCode::OK);
                }
                anyhow::Ok((histogram, failures))
            })
        })
        .collect();
    let (all, failures) = merge(tasks).await?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(RunReport::new(viewers, seconds, &all, failures))
}

/// Confirm throughput: `buyers` concurrent buyers each own a share of `seat_ids` and, in
/// rounds, hold `batch` of their seats (not timed), wait for every buyer, then confirm
/// them (timed). Throughput is confirms over the wall time of the confirm phases alone,
/// from the first buyer's start to the last buyer's end, so it is what the server
/// sustains with `buyers` confirms in flight. Stops once the confirm phases add up to
/// `duration` or the seats run out (every seat is sold once). `form_page` as for [`run`].
pub async fn confirms(
    server: &str,
    form_page: &str,
    event_id: i64,
    seat_ids: &[i64],
    buyers: usize,
    batch: usize,
    duration: Duration,
) -> anyhow::Result<RunReport> {
    let rounds = seat_ids.len() / buyers.max(1) / batch.max(1);
    anyhow::ensure!(rounds > 0, "not enough seats for {buyers} buyers");
    let barrier = Arc::new(Barrier::new(buyers));
    let stop = Arc::new(AtomicBool::new(false));
    // (first start, last end) of the current confirm phase; total confirm time.
    let phase = Arc::new(Mutex::new((
        None::<Instant>,
        None::<Instant>,
        Duration::ZERO,
    )));
    let tasks: Vec<_> = seat_ids
        .chunks(rounds * batch)
        .take(buyers)
        .map(|mine| {
            let (server, mine) = (server.to_owned(), mine.to_vec());
            let form_page = format!("{server}{form_page}");
            let (barrier, stop, phase) = (barrier.clone(), stop.clone(), phase.clone());
            tokio::spawn(async move {
                let mut histogram = histogram();
                let mut failures = 0;
                let mut buyer = HttpBuyer::new();
                failures += buyer.get(&form_page).await.is_err() as u64;
                for seats in mine.chunks(batch) {
                    barrier.wait().await;
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    for &seat in seats {
                        failures +=
                            failed(buyer.seat_action(&server, event_id, seat, "hold").await);
                    }
                    barrier.wait().await;
                    let start = Instant::now();
                    for &seat in seats {
                        let t = Instant::now();
                        let confirm = buyer.seat_action(&server, event_id, seat, "confirm");
                        failures += failed(confirm.await);
                        histogram.saturating_record(t.elapsed().as_micros() as u64);
                    }
                    let end = Instant::now();
                    {
                        let mut p = phase.lock().await;
                        p.0 = Some(p.0.map_or(start, |s| s.min(start)));
                        p.1 = Some(p.1.map_or(end, |e| e.max(end)));
                    }
                    if barrier.wait().await.is_leader() {
                        let mut p = phase.lock().await;
                        if let (Some(s), Some(e)) = (p.0.take(), p.1.take()) {
                            p.2 += e - s;
                        }
                        stop.store(p.2 >= duration, Ordering::SeqCst);
                    }
                }
                anyhow::Ok((histogram, failures))
            })
        })
        .collect();
    let (all, failures) = merge(tasks).await?;
    let confirm_seconds = phase.lock().await.2.as_secs_f64();
    Ok(RunReport::new(buyers, confirm_seconds, &all, failures))
}
