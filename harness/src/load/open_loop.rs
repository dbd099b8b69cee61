//! Holds at a fixed arrival rate: an open-loop load, like wrk2's, for latency that a
//! saturated closed loop cannot show.
//!
//! A closed-loop client (each buyer sends its next request when the last one is answered,
//! [`super::throughput`]) slows down with the server, so the requests that would have
//! waited behind a slow answer are never sent and never timed: coordinated omission (Gil
//! Tene). Here each request has a *scheduled* send time fixed in advance, `rate` a second
//! in all, and its latency runs from that time to its answer: a request sent late
//! because its buyer was still waiting on the previous answer counts that wait.
//!
//! `connections` buyers (each its own HTTP connection, cookie and seat) share the rate:
//! buyer `k` sends its `j`-th hold at `start + (k + j × connections) / rate`, and after
//! each hold a release on the same seat (not timed, on the same connection, as in
//! [`super::throughput::run`]). Tokio's timer wakes a task up to about 1 ms after its
//! scheduled time; that lateness counts in the latency too.

use std::time::{Duration, Instant};

use super::throughput::{RunReport, histogram, merge, not_redirects};
use crate::http::HttpBuyer;

/// Sends holds to `server` at `rate_per_s` a second in all, from `connections` buyers
/// (buyer `i` on `seat_ids[i]` of `event_id`, each first opening `form_page` for its
/// session and CSRF token, as in [`super::throughput::run`]), for `duration`. Returns
/// the run with each hold's latency from its scheduled send time, in the report's
/// `latency_ms`, and the rate achieved (`per_s`: holds answered over the time from the
/// first scheduled send to the last answer). Errors: fewer seats than connections, a
/// rate that is not positive, a request that got no answer.
pub async fn holds(
    server: &str,
    form_page: &str,
    event_id: i64,
    seat_ids: &[i64],
    connections: usize,
    rate_per_s: f64,
    duration: Duration,
) -> anyhow::Result<RunReport> {
    anyhow::ensure!(
        seat_ids.len() >= connections,
        "not enough seats for {connections} connections"
    );
    anyhow::ensure!(rate_per_s > 0.0, "the rate must be positive");
    let mut buyers = Vec::with_capacity(connections);
    for &seat in &seat_ids[..connections] {
        let mut buyer = HttpBuyer::new();
        buyer.get(&format!("{server}{form_page}")).await?;
        buyers.push((buyer, seat));
    }
    let gap = Duration::from_secs_f64(1.0 / rate_per_s);
    let every = gap * connections as u32;
    let start = Instant::now() + Duration::from_millis(10);
    let end = start + duration;
    let tasks: Vec<_> = buyers
        .into_iter()
        .enumerate()
        .map(|(k, (mut buyer, seat))| {
            let server = server.to_owned();
            let mut due = start + gap * k as u32;
            tokio::spawn(async move {
                let mut latencies = histogram();
                let mut failures = 0;
                while due < end {
                    tokio::time::sleep_until(due.into()).await;
                    let hold = buyer.seat_action(&server, event_id, seat, "hold").await?;
                    latencies.saturating_record(due.elapsed().as_micros() as u64);
                    let release = buyer
                        .seat_action(&server, event_id, seat, "release")
                        .await?;
                    failures += not_redirects(&[hold.status, release.status]);
                    due += every;
                }
                anyhow::Ok((latencies, failures))
            })
        })
        .collect();
    let (all, failures) = merge(tasks).await?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(RunReport::new(connections, seconds, &all, failures))
}
