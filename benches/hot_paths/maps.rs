//! The open-maps rows (`BENCH_ONLY=maps`): ten thousand browsers with the arena's map
//! open at once, as in an on-sale's first minute, each holding the event's live stream
//! (`GET /events/{id}/stream`, one connection each, as a browser tab does). Lookers must
//! never lock out buyers: every map gets its opening snapshot, a buyer's hold reaches
//! every map quickly, and the hold itself is answered as fast as with no map open.
//!
//! | row | ours | baseline |
//! |---|---|---|
//! | `open_maps_with_snapshot` | streams that got their opening snapshot | streams opened ([`OPEN_MAPS`]) |
//! | `open_maps_fanout_p99_ms` | p99 over every open map and [`PROBES`] holds: from the hold's send to its `held` update on that map (a map never reached counts [`FANOUT_LIMIT`]) | |
//! | `hold_ms_with_open_maps` | a buyer's slowest hold of [`PROBES`] with the maps open, each sent while they are quiet: at most the 10 ms the issue sets for a hold's p99 | the same buyer's slowest with no map open |
//! | `server_kb_per_open_map` | the server's RSS growth per open map | |
//!
//! The client is this process, on the same cores as the server: reading ten thousand
//! sockets is part of what the fan-out row measures.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;
use hdrhistogram::Histogram;
use seatlock_harness::HttpBuyer;
use seatlock_harness::load::onsale::raise_fd_limit;
use tokio::sync::mpsc;

use super::Setup;
use super::breakdown::metrics;
use super::report::{Row, Target};

/// Maps opened: the crowd, and the server's default stream budget.
const OPEN_MAPS: usize = 10_000;
/// Holds whose fan-out (and latency) is measured, one after another.
const PROBES: usize = 10;
/// Streams being opened at once (the rest wait their turn): below the kernel's
/// listen backlog, so no connection is dropped for the way it was opened.
const OPENING_AT_ONCE: usize = 256;
/// How long a hold may take to reach every map before the rest count as never reached.
const FANOUT_LIMIT: Duration = Duration::from_secs(10);
/// The server's gauge of open streams.
const STREAMS_OPEN: &str = "seatlock_live_streams_open";

/// The open-maps rows (see the module docs).
pub(crate) async fn rows(s: &Setup, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let server = &s.server.address;
    let (arena, seats) = s.event("harbour-arena").await?;
    // A descriptor per map, and some to spare for the buyer, the stores and the files.
    let files = raise_fd_limit(OPEN_MAPS as u64 + 512);
    anyhow::ensure!(
        files >= OPEN_MAPS as u64 + 512,
        "this process may open only {files} files, too few for {OPEN_MAPS} maps"
    );
    // Streams an earlier row left open must be gone from the server's budget first.
    wait_for_streams(&s.server.metrics_url, 0).await?;

    // The buyer's holds with no map open: their usual latency. The buyer is another
    // browser than the ten thousand: its requests and answers run on a thread of their
    // own, so they do not queue behind this process's reading of the maps.
    let probe_seats = &seats[seats.len() - PROBES..];
    let mut buyer = Buyer::new(server, arena)?;
    let mut usual_ms = Vec::with_capacity(PROBES);
    for &seat in probe_seats {
        usual_ms.push(buyer.hold(seat)?);
        buyer.release(seat)?;
    }

    // Open the maps, each reading its stream in a task of its own and reporting every
    // seat update it sees (seat, held or not, when).
    let pid = s.server.pid().context("the server has exited")?;
    let rss_before = rss_kb(pid)?;
    let client = reqwest::Client::new();
    let url = format!("{server}/events/{arena}/stream");
    let (updates, mut heard) = mpsc::unbounded_channel();
    let opening = Instant::now();
    let opened: Vec<anyhow::Result<tokio::task::JoinHandle<()>>> =
        futures_util::stream::iter(0..OPEN_MAPS)
            .map(|_| open_map(&client, &url, updates.clone()))
            .buffer_unordered(OPENING_AT_ONCE)
            .collect()
            .await;
    let open_s = opening.elapsed().as_secs_f64();
    let (maps, refused): (Vec<_>, Vec<_>) = opened.into_iter().partition(Result::is_ok);
    let maps: Vec<_> = maps.into_iter().map(Result::unwrap).collect();
    if let Some(Err(first)) = refused.first() {
        eprintln!(
            "  {} maps got no snapshot, the first: {first:#}",
            refused.len()
        );
    }
    wait_for_streams(&s.server.metrics_url, maps.len()).await?;
    let kb_per_map = (rss_kb(pid)? - rss_before) / maps.len().max(1) as f64;

    // Each probe: a hold, every map's `held` update for it, the release, and every map's
    // update for that, so that the next hold meets maps that are open but quiet.
    let mut fanout = Histogram::<u64>::new(3)?;
    let mut with_maps_ms = Vec::with_capacity(PROBES);
    let mut reached = 0;
    for &seat in probe_seats {
        let sent = Instant::now();
        with_maps_ms.push(buyer.hold(seat)?);
        let at = updates_of(&mut heard, seat, true, maps.len(), sent + FANOUT_LIMIT).await;
        for delay in at.iter().map(|at| at.duration_since(sent)) {
            fanout.record(delay.as_micros().max(1) as u64)?;
        }
        for _ in at.len()..maps.len() {
            fanout.record(FANOUT_LIMIT.as_micros() as u64)?;
        }
        reached += at.len();
        buyer.release(seat)?;
        updates_of(
            &mut heard,
            seat,
            false,
            maps.len(),
            Instant::now() + FANOUT_LIMIT,
        )
        .await;
    }
    for map in &maps {
        map.abort();
    }

    let p99_ms = fanout.value_at_quantile(0.99) as f64 / 1000.0;
    let slowest = |ms: &[f64]| ms.iter().copied().fold(0.0, f64::max);
    let (usual, with_maps) = (slowest(&usual_ms), slowest(&with_maps_ms));
    eprintln!(
        "  {} of {OPEN_MAPS} maps open in {open_s:.1} s ({kb_per_map:.1} kB each); \
         {reached} of {} updates within {FANOUT_LIMIT:?}, p50 {:.0} ms, p99 {p99_ms:.0} ms; \
         the slowest hold {with_maps:.1} ms (with no map open {usual:.1} ms)",
        maps.len(),
        maps.len() * PROBES,
        fanout.value_at_quantile(0.5) as f64 / 1000.0,
    );
    rows.push(
        Row::versus(
            "open_maps_with_snapshot",
            "maps vs maps opened",
            maps.len() as f64,
            OPEN_MAPS as f64,
        )
        .target(Target::RatioAtLeast(1.0)),
    );
    rows.push(
        Row::alone("open_maps_fanout_p99_ms", "ms, hold to every map", p99_ms)
            .target(Target::AtMost(500.0)),
    );
    rows.push(
        Row::versus(
            "hold_ms_with_open_maps",
            "ms, slowest of 10 (vs no map open)",
            with_maps,
            usual,
        )
        .target(Target::AtMost(10.0)),
    );
    rows.push(Row::alone("server_kb_per_open_map", "kB (RSS)", kb_per_map));
    Ok(())
}

/// What a map heard: a seat's update (held, or not), and when.
type Heard = (i64, bool, Instant);

/// Opens one map's stream at `url` and reads it to its opening snapshot; then a task
/// reads the rest, sending every seat update into `updates`. Errors: an answer other
/// than 200 (a 503 past the stream budget), or no snapshot.
async fn open_map(
    client: &reqwest::Client,
    url: &str,
    updates: mpsc::UnboundedSender<Heard>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let mut response = client.get(url).send().await?.error_for_status()?;
    let mut text = String::new();
    // Server-sent events end with a blank line; the first is the snapshot.
    while !text.contains("\n\n") {
        let chunk = response.chunk().await?.context("the stream ended")?;
        text.push_str(std::str::from_utf8(&chunk)?);
    }
    anyhow::ensure!(
        text.starts_with("event: snapshot"),
        "the stream opened on {text:.40}"
    );
    Ok(tokio::spawn(async move {
        while let Ok(Some(chunk)) = response.chunk().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = text.find("\n\n") {
                if let Some((seat, held)) = seat_update(&text[..end]) {
                    let _ = updates.send((seat, held, Instant::now()));
                }
                text.drain(..end + 2);
            }
        }
    }))
}

/// A `seat` event's seat, and whether it says held (`{"seat": 14, "state": "held", …}`).
fn seat_update(event: &str) -> Option<(i64, bool)> {
    let data = event.lines().find_map(|l| l.strip_prefix("data: "))?;
    let update: serde_json::Value = serde_json::from_str(data).ok()?;
    Some((update["seat"].as_i64()?, update["state"] == "held"))
}

/// When each of at most `maps` maps heard `seat` turn held (`held`) or not, as they come
/// until `deadline`; other updates are passed over.
async fn updates_of(
    heard: &mut mpsc::UnboundedReceiver<Heard>,
    seat: i64,
    held: bool,
    maps: usize,
    deadline: Instant,
) -> Vec<Instant> {
    let mut at = Vec::with_capacity(maps);
    while at.len() < maps {
        match tokio::time::timeout_at(deadline.into(), heard.recv()).await {
            Ok(Some((s, h, when))) if (s, h) == (seat, held) => at.push(when),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    at
}

/// The buyer beside the maps: an [`HttpBuyer`] on a runtime of its own (one thread),
/// each call run there to completion.
struct Buyer {
    http: HttpBuyer,
    server: String,
    event: i64,
    /// Taken when the buyer is dropped (inside the bench's runtime, a runtime may only be
    /// shut down in the background).
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Buyer {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Buyer {
    /// A buyer of `event` on `server`, who has read its page (cookie, form token).
    fn new(server: &str, event: i64) -> anyhow::Result<Buyer> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mut http = HttpBuyer::new();
        let page = format!("{server}/events/{event}");
        tokio::task::block_in_place(|| runtime.block_on(http.get(&page)))?;
        Ok(Buyer {
            http,
            server: server.into(),
            event,
            runtime: Some(runtime),
        })
    }

    /// `action` on `seat`, on the buyer's own runtime; errors unless it is answered 303.
    fn act(&mut self, seat: i64, action: &str) -> anyhow::Result<()> {
        let Buyer {
            http,
            server,
            event,
            runtime,
        } = self;
        let runtime = runtime.as_ref().expect("taken only on drop");
        let answer = tokio::task::block_in_place(|| {
            runtime.block_on(http.seat_action(server, *event, seat, action))
        })?;
        anyhow::ensure!(
            answer.status.is_redirection(),
            "a {action} answered {}",
            answer.status
        );
        Ok(())
    }

    /// Holds `seat`; returns how long the hold took to be answered, in ms.
    fn hold(&mut self, seat: i64) -> anyhow::Result<f64> {
        let sent = Instant::now();
        self.act(seat, "hold")?;
        Ok(sent.elapsed().as_secs_f64() * 1000.0)
    }

    /// Releases `seat`.
    fn release(&mut self, seat: i64) -> anyhow::Result<()> {
        self.act(seat, "release")
    }
}

/// Waits (at most 60 s: a closed stream is noticed at its next write) until the
/// server counts `open` streams.
async fn wait_for_streams(metrics_url: &str, open: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // (No gauge yet: no stream was ever opened.)
        let now = metrics(metrics_url).await?.get(STREAMS_OPEN).copied();
        if now.unwrap_or(0.0) == open as f64 {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the server counts {now:?} open streams, not {open}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A process's resident set size (`VmRSS`), in kB.
fn rss_kb(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .context("no VmRSS line")?
        .parse()
        .context("VmRSS")
}
