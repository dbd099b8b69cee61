//! Observability: the metrics served at `GET /metrics` (Prometheus text format, from the
//! `metrics` facade and `metrics-exporter-prometheus`, rendered by our own route: the
//! exporter runs no listener of its own) and the helpers that record them.
//!
//! | name | kind | labels | counts or measures |
//! |---|---|---|---|
//! | `seatlock_holds_granted_total` | counter | | holds granted (a new lease) |
//! | `seatlock_holds_refused_total` | counter | `reason` = `held` / `sold` | holds refused: someone else holds the seat, or it is sold |
//! | `seatlock_confirms_total` | counter | `outcome` = `accepted` / `rejected_stale` / `rejected_expired` / `rejected_sold` | confirms by outcome: sold; refused by the fencing token; refused because the buyer's own hold lapsed; the seat was sold already |
//! | `seatlock_double_sales_detected_total` | counter | | writes stopped by the `orders_one_per_seat` constraint: the fence let a second sale through. Must stay 0 |
//! | `seatlock_postgres_round_trip_seconds` | histogram, seconds | `op` | Postgres calls, pool wait included: `event_seats` (an event's seats, once per process), `authorize`, `sell`, `commit`, `fence_ledger` |
//! | `lease_redis_round_trip_seconds` | histogram, seconds | `op` | Redis round trips, through the lease library's connection: the leases' (`acquire`, `release`, `retire`, `renew`, `holders`, …) and the sessions' (`session_load`, `session_save`, `session_create`, `session_delete`, [`crate::http::sessions`]) |
//! | `seatlock_queue_length` | gauge | `event` | buyers in the event's waiting-room queue, as last seen by this process |
//! | `seatlock_admissions_total` | counter | | buyers who arrived for their turn in a waiting room (each counted by the process that served the arrival) |
//! | `seatlock_queue_wait_seconds` | histogram, seconds | | how long each admitted buyer waited in the queue ([`QUEUE_WAIT_BUCKETS_SECONDS`]) |
//! | `seatlock_queue_ticks_fenced_total` | counter | | waiting-room ticks refused by the room's fence: a ticker that paused past its lease and woke late |
//! | `seatlock_auction_page_reads_total` | counter | | reads of an auction item's page data (item and history: two queries): one per page opened, and one per bid per process however many pages watch it |
//! | `lease_renewals_total` | counter | `result` = `renewed` / `not_owner` | lease renewals (the closer's watchdog) |
//! | `lease_watchdog_losses_total` | counter | | watchdogs that reported their lease lost |
//! | `lease_lock_wait_seconds` | histogram, seconds | `outcome` = `granted` / `busy` / `failed` | time a bid waited for the item's bid lock (backoff included) |
//!
//! Histograms are Prometheus histograms with the buckets [`LATENCY_BUCKETS_SECONDS`]
//! (`_bucket`, `_sum`, `_count`); a `_count` is also the number of calls, so
//! `lease_redis_round_trip_seconds_count{op="session_load"}` is the number of session
//! loads. The `lease_*` names are defined by the lease library
//! ([`lease::telemetry`]).
//!
//! The recorder is global to the process: servers built in one process (tests) share it.

use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use axum::http::header;
use axum::response::IntoResponse;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::http::error::Refusal;

/// Counter: reads of an auction item's page data ([`crate::auction`]'s live pages).
pub(crate) const AUCTION_PAGE_READS_TOTAL: &str = "seatlock_auction_page_reads_total";
/// Counter: holds granted.
pub(crate) const HOLDS_GRANTED_TOTAL: &str = "seatlock_holds_granted_total";
/// Counter, label `reason` (`held`, `sold`, `event_started`): holds refused.
pub(crate) const HOLDS_REFUSED_TOTAL: &str = "seatlock_holds_refused_total";
/// Counter, label `outcome` (see [`ConfirmOutcome`]): confirms by outcome.
pub(crate) const CONFIRMS_TOTAL: &str = "seatlock_confirms_total";
/// Counter: a sale stopped by the `orders_one_per_seat` unique constraint, i.e. one that
/// the fenced, conditional write let through. Must stay 0.
pub(crate) const DOUBLE_SALES_DETECTED_TOTAL: &str = "seatlock_double_sales_detected_total";
/// Histogram (seconds), label `op`: one Postgres call, from the call to its answer
/// (waiting for a pooled connection included, so under load it shows pool queueing).
pub(crate) const POSTGRES_ROUND_TRIP_SECONDS: &str = "seatlock_postgres_round_trip_seconds";

/// Gauge, label `event`: the waiting-room queue's length at this process's last look.
pub(crate) const QUEUE_LENGTH: &str = "seatlock_queue_length";
/// Counter: buyers admitted from a waiting room.
pub(crate) const ADMISSIONS_TOTAL: &str = "seatlock_admissions_total";
/// Histogram (seconds): each admitted buyer's wait in the queue.
pub(crate) const QUEUE_WAIT_SECONDS: &str = "seatlock_queue_wait_seconds";
/// Counter: waiting-room ticks refused by the room's fence (a ticker that woke late).
pub(crate) const QUEUE_TICKS_FENCED_TOTAL: &str = "seatlock_queue_ticks_fenced_total";

/// Gauge: live event streams open on this process (at most `--max-streams`).
pub(crate) const STREAMS_OPEN: &str = "seatlock_live_streams_open";
/// Counter: live event streams refused because every one of `--max-streams` was open.
pub(crate) const STREAMS_REFUSED_TOTAL: &str = "seatlock_live_streams_refused_total";

/// A live stream opened ([`crate::live::LiveHub::subscribe`]).
pub(crate) fn stream_opened() {
    metrics::gauge!(STREAMS_OPEN).increment(1.0);
}

/// A live stream ended.
pub(crate) fn stream_closed() {
    metrics::gauge!(STREAMS_OPEN).decrement(1.0);
}

/// A live stream refused: the budget was full.
pub(crate) fn stream_refused() {
    metrics::counter!(STREAMS_REFUSED_TOTAL).increment(1);
}

/// Upper bounds of the queue-wait histogram's buckets, in seconds (1 s to 1 h).
pub(crate) const QUEUE_WAIT_BUCKETS_SECONDS: [f64; 10] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// A waiting room's line as this process last saw it: `waiting` buyers in it.
pub(crate) fn queue_seen(event_id: i64, waiting: u64) {
    metrics::gauge!(QUEUE_LENGTH, "event" => event_id.to_string()).set(waiting as f64);
}

/// A buyer arrived for their turn, after `waited` in line.
pub(crate) fn admitted(waited: Duration) {
    metrics::counter!(ADMISSIONS_TOTAL).increment(1);
    metrics::histogram!(QUEUE_WAIT_SECONDS).record(waited.as_secs_f64());
}

/// A ticker's step was refused by the room's fence: a newer ticker had stepped it.
pub(crate) fn tick_fenced() {
    metrics::counter!(QUEUE_TICKS_FENCED_TOTAL).increment(1);
}

/// Upper bounds of the latency histograms' buckets, in seconds (100 µs to 2.5 s).
pub(crate) const LATENCY_BUCKETS_SECONDS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// How often histogram samples are folded into their buckets between scrapes, so that an
/// unscraped server does not buffer every sample.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The process's Prometheus recorder, installed on first use (as the global `metrics`
/// recorder) with a thread that runs its upkeep every 5 s. If another recorder was
/// installed first, the handle renders an empty page.
pub(crate) fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &LATENCY_BUCKETS_SECONDS)
            .expect("the bucket list is not empty")
            .set_buckets_for_metric(
                Matcher::Full(QUEUE_WAIT_SECONDS.into()),
                &QUEUE_WAIT_BUCKETS_SECONDS,
            )
            .expect("the bucket list is not empty")
            .build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("another metrics recorder is installed; GET /metrics stays empty");
        }
        describe();
        register_at_zero();
        let upkeep = handle.clone();
        std::thread::Builder::new()
            .name("metrics-upkeep".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(UPKEEP_INTERVAL);
                    upkeep.run_upkeep();
                }
            })
            .expect("spawning the metrics upkeep thread");
        handle
    })
}

/// The `# HELP` lines.
fn describe() {
    use metrics::{describe_counter, describe_histogram};
    describe_counter!(HOLDS_GRANTED_TOTAL, "Seat holds granted (new leases).");
    describe_counter!(
        AUCTION_PAGE_READS_TOTAL,
        "Reads of an auction item's page data: one per page opened, one per bid per process."
    );
    describe_counter!(
        HOLDS_REFUSED_TOTAL,
        "Seat holds refused, by reason: held by someone else, or sold."
    );
    describe_counter!(CONFIRMS_TOTAL, "Purchase confirms, by outcome.");
    describe_counter!(
        DOUBLE_SALES_DETECTED_TOTAL,
        "Second sales of a seat stopped only by the orders_one_per_seat constraint (must stay 0)."
    );
    metrics::describe_gauge!(QUEUE_LENGTH, "Buyers in an event's waiting-room queue.");
    metrics::describe_gauge!(
        STREAMS_OPEN,
        "Live event streams open (at most --max-streams)."
    );
    describe_counter!(
        STREAMS_REFUSED_TOTAL,
        "Live event streams refused (503) because every one of --max-streams was open."
    );
    describe_counter!(
        ADMISSIONS_TOTAL,
        "Buyers who arrived for their turn in a waiting room."
    );
    describe_counter!(
        QUEUE_TICKS_FENCED_TOTAL,
        "Waiting-room ticks refused by the room's fence (a ticker that woke late)."
    );
    describe_histogram!(
        QUEUE_WAIT_SECONDS,
        metrics::Unit::Seconds,
        "How long admitted buyers waited in a waiting-room queue."
    );
    describe_histogram!(
        POSTGRES_ROUND_TRIP_SECONDS,
        metrics::Unit::Seconds,
        "Postgres round trips, by operation."
    );
    describe_histogram!(
        lease::telemetry::REDIS_ROUND_TRIP_SECONDS,
        metrics::Unit::Seconds,
        "Redis round trips (leases and sessions), by operation."
    );
    describe_counter!(
        lease::telemetry::RENEWALS_TOTAL,
        "Lease renewals answered by Redis, by result."
    );
    describe_counter!(
        lease::telemetry::WATCHDOG_LOSSES_TOTAL,
        "Watchdogs that reported their lease lost."
    );
    describe_counter!(
        lease::telemetry::STALE_RESERVATIONS_TOTAL,
        "Fence blocks refused at install because Redis lost its data after they were reserved."
    );
    describe_counter!(
        lease::telemetry::REDIS_REPAIRS_TOTAL,
        "Redis connection repairs: requests resent after a dropped connection, connections replaced after a timeout."
    );
    describe_histogram!(
        lease::telemetry::LOCK_WAIT_SECONDS,
        metrics::Unit::Seconds,
        "Time spent acquiring a lock with backoff (bid locks), by outcome."
    );
}

/// Every counter series this process can report, registered at zero, so that the first
/// scrape already shows each one with its `# HELP` (Prometheus practice: a rate or an
/// alert over a series that appears only with its first event misses that event).
/// Label values are the ones the code uses (refusal codes, outcomes).
fn register_at_zero() {
    use crate::http::error::Refusal;
    metrics::counter!(HOLDS_GRANTED_TOTAL).absolute(0);
    metrics::counter!(ADMISSIONS_TOTAL).absolute(0);
    metrics::counter!(AUCTION_PAGE_READS_TOTAL).absolute(0);
    for reason in [
        Refusal::SomeoneIsBuying,
        Refusal::Cooling { remaining_ms: 0 },
        Refusal::AlreadySold,
        Refusal::EventStarted,
    ] {
        metrics::counter!(HOLDS_REFUSED_TOTAL, "reason" => reason.code()).absolute(0);
    }
    let outcomes = [
        Refusal::StaleToken,
        Refusal::HoldExpired,
        Refusal::AlreadySold,
    ];
    let labels = std::iter::once(ConfirmOutcome::Accepted.label())
        .chain(outcomes.iter().map(|r| ConfirmOutcome::Rejected(r).label()));
    for outcome in labels {
        metrics::counter!(CONFIRMS_TOTAL, "outcome" => outcome).absolute(0);
    }
    metrics::counter!(DOUBLE_SALES_DETECTED_TOTAL).absolute(0);
    for result in ["renewed", "not_owner"] {
        metrics::counter!(lease::telemetry::RENEWALS_TOTAL, "result" => result).absolute(0);
    }
    metrics::counter!(lease::telemetry::WATCHDOG_LOSSES_TOTAL).absolute(0);
    metrics::counter!(lease::telemetry::STALE_RESERVATIONS_TOTAL).absolute(0);
    for repair in ["resent", "replaced"] {
        metrics::counter!(lease::telemetry::REDIS_REPAIRS_TOTAL, "repair" => repair).absolute(0);
    }
}

/// `GET /metrics`: every metric in the Prometheus text exposition format (version 0.0.4).
pub(crate) async fn metrics_page() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        prometheus().render(),
    )
}

/// Awaits `call` (one Postgres round trip, or a short sequence the caller names) and
/// records its latency under `op` in [`POSTGRES_ROUND_TRIP_SECONDS`], success or not.
pub(crate) async fn postgres<T>(op: &'static str, call: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let reply = call.await;
    metrics::histogram!(POSTGRES_ROUND_TRIP_SECONDS, "op" => op).record(started.elapsed());
    reply
}

/// Counts a granted hold.
pub(crate) fn hold_granted() {
    metrics::counter!(HOLDS_GRANTED_TOTAL).increment(1);
}

/// Counts a refused hold; label `reason` is the refusal's code (`held`, `sold`).
pub(crate) fn hold_refused(reason: &Refusal) {
    metrics::counter!(HOLDS_REFUSED_TOTAL, "reason" => reason.code()).increment(1);
}

/// How a confirm ended, as counted in [`CONFIRMS_TOTAL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConfirmOutcome<'a> {
    /// The seat was sold to the buyer.
    Accepted,
    /// Refused (`stale`, `expired`, `sold`).
    Rejected(&'a Refusal),
}

impl ConfirmOutcome<'_> {
    /// The `outcome` label value: `accepted`, or `rejected_` and the refusal's code
    /// (`rejected_stale`, `rejected_expired`, `rejected_sold`).
    pub(crate) fn label(self) -> String {
        match self {
            ConfirmOutcome::Accepted => "accepted".into(),
            ConfirmOutcome::Rejected(refusal) => format!("rejected_{}", refusal.code()),
        }
    }
}

/// Counts a confirm's outcome.
pub(crate) fn confirm(outcome: ConfirmOutcome<'_>) {
    metrics::counter!(CONFIRMS_TOTAL, "outcome" => outcome.label()).increment(1);
}

/// Counts a write stopped by the `orders_one_per_seat` constraint (logged as an error:
/// it means the fence let a second sale through).
pub(crate) fn double_sale_detected() {
    tracing::error!("orders_one_per_seat refused a second sale of a seat");
    metrics::counter!(DOUBLE_SALES_DETECTED_TOTAL).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_histograms_render_in_prometheus_format() {
        let handle = prometheus();
        hold_granted();
        confirm(ConfirmOutcome::Rejected(&Refusal::StaleToken));
        metrics::histogram!(POSTGRES_ROUND_TRIP_SECONDS, "op" => "unit_test")
            .record(Duration::from_micros(300));
        let page = handle.render();
        assert!(page.contains("seatlock_holds_granted_total"), "{page}");
        assert!(
            page.contains(r#"seatlock_confirms_total{outcome="rejected_stale"}"#),
            "{page}"
        );
        assert!(
            page.contains(
                r#"seatlock_postgres_round_trip_seconds_bucket{op="unit_test",le="0.0005"} 1"#
            ),
            "{page}"
        );
    }
}
