//! The on-sale's report beside its JSON: a table for the terminal, and a self-contained
//! HTML page with the numbers, the run's settings and plots over time (plotters, SVG):
//! seats sold, seats held per second, open streams, the queue, latency percentiles.

use plotters::prelude::*;
use serde::Serialize;

use super::OnsaleRun;
use crate::load::report::{escape, html_table, markdown_table};

/// The crowd at one moment, as the sampler saw it.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since the on-sale (negative before it).
    pub at_s: f64,
    /// Seats sold so far (Postgres).
    pub sold: u64,
    /// Seats granted to best-available requests per second, since the last sample.
    pub holds_per_s: f64,
    /// Streams open (their snapshot arrived).
    pub streams: u64,
    /// People on the queue page.
    pub queued: u64,
    /// Latencies of the requests answered since the last sample, ms (`None`: none).
    pub hold_p50_ms: Option<f64>,
    /// Hold latency at the 99th percentile, ms.
    pub hold_p99_ms: Option<f64>,
    /// Page latency at the 99th percentile, ms.
    pub page_p99_ms: Option<f64>,
    /// Checkout latency at the 99th percentile, ms.
    pub confirm_p99_ms: Option<f64>,
    /// Queue page latency at the 99th percentile, ms.
    pub queue_p99_ms: Option<f64>,
}

/// One kind of request over the run (a row of the report's second table).
#[derive(Debug, Clone)]
pub struct RequestRow {
    /// `page`, `stream`, `queue`, `hold` or `confirm` ([`super::crowd::Tally::kinds`]).
    pub kind: &'static str,
    /// Answered within 10 s, and their latency percentiles, ms.
    pub answered: u64,
    /// The 50th percentile, ms.
    pub p50_ms: f64,
    /// The 99th percentile, ms.
    pub p99_ms: f64,
    /// Not answered within 10 s.
    pub unanswered: u64,
    /// Not sent: this process had no file descriptor left (its limit, not the servers').
    pub client_out_of_files: u64,
    /// The answers' HTTP statuses, with how many of each (`200×48 503×12`).
    pub statuses: String,
}

const REQUEST_HEADER: [&str; 7] = [
    "request",
    "answered",
    "statuses",
    "p50 ms",
    "p99 ms",
    "unanswered",
    "not sent: client out of files",
];

fn request_cells(row: &RequestRow) -> [String; 7] {
    [
        row.kind.to_owned(),
        row.answered.to_string(),
        row.statuses.clone(),
        format!("{:.1}", row.p50_ms),
        format!("{:.1}", row.p99_ms),
        row.unanswered.to_string(),
        row.client_out_of_files.to_string(),
    ]
}

/// The report's fields as (name, value) rows, in the JSON's order (`null` as `-`).
fn rows(run: &OnsaleRun) -> Vec<[String; 2]> {
    let json = serde_json::to_value(&run.report).unwrap_or_default();
    let fields = json.as_object().cloned().unwrap_or_default();
    fields
        .into_iter()
        .map(|(name, value)| {
            let shown = match value {
                serde_json::Value::Null => "-".to_owned(),
                serde_json::Value::Number(n) => match n.as_f64() {
                    Some(x) if n.is_f64() => format!("{x:.1}"),
                    _ => n.to_string(),
                },
                other => other.to_string(),
            };
            [name, shown]
        })
        .collect()
}

/// The numbers as a Markdown table, and a line naming the run.
pub fn table(run: &OnsaleRun) -> String {
    format!(
        "{}\n{}\n{}",
        settings(run),
        markdown_table(&["field", "value"], rows(run)),
        markdown_table(&REQUEST_HEADER, run.requests.iter().map(request_cells)),
    )
}

/// What the run was, in one line.
fn settings(run: &OnsaleRun) -> String {
    let c = &run.config;
    let room = match c.waiting_room_shoppers {
        0 => "no waiting room".to_owned(),
        n => format!("a waiting room of {n} shoppers"),
    };
    format!(
        "{} people ({:.0}% buying, {:.0}% hanging up, {:.0}% retrying up to {} times) and {} bots \
         arriving over {:.1} s, the on-sale {:.1} s in; {} server(s) behind HAProxy; {room}; \
         {} seats on sale, at most {} per buyer; bots' holds granted {}, refused not_admitted {}.",
        c.buyers,
        c.buy_share * 100.0,
        c.hang_up_share * 100.0,
        c.retry_share * 100.0,
        c.retries,
        c.bots,
        c.arrive_over.as_secs_f64(),
        c.on_sale_after.as_secs_f64(),
        c.servers,
        run.capacity,
        c.max_seats_per_buyer,
        run.bot_holds,
        run.bot_refused,
    )
}

/// One line of a chart: its name, colour and points (seconds since the on-sale, value).
type Series<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);

/// An SVG line chart of `series` over the run, titled `title`, its y axis `y_desc`.
/// Errors: plotters' drawing error, as text.
fn chart(title: &str, y_desc: &str, series: &[Series]) -> Result<String, String> {
    let points = || series.iter().flat_map(|(_, _, p)| p.iter());
    let (x0, x1) = points().fold((0f64, 1f64), |(lo, hi), (x, _)| (lo.min(*x), hi.max(*x)));
    let top = points().map(|(_, y)| *y).fold(1.0, f64::max) * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (620, 280)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, 0f64..top)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("s since the on-sale")
            .y_desc(y_desc)
            .draw()
            .map_err(|e| e.to_string())?;
        for (name, colour, line) in series {
            let colour = *colour;
            chart
                .draw_series(LineSeries::new(line.iter().copied(), colour))
                .map_err(|e| e.to_string())?
                .label(*name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The points of `value` over the samples, leaving out those it has none for.
fn over_time(run: &OnsaleRun, value: impl Fn(&Sample) -> Option<f64>) -> Vec<(f64, f64)> {
    run.samples
        .iter()
        .filter_map(|s| Some((s.at_s, value(s)?)))
        .collect()
}

/// A self-contained HTML page: the numbers, the run's settings, the plots.
pub fn html(run: &OnsaleRun) -> Result<String, String> {
    let as_f64 = |n: u64| Some(n as f64);
    let charts = [
        chart(
            "Seats sold",
            "seats",
            &[("sold", BLUE, over_time(run, |s| as_f64(s.sold)))],
        )?,
        chart(
            "Seats held per second (best available)",
            "seats/s",
            &[("held/s", MAGENTA, over_time(run, |s| Some(s.holds_per_s)))],
        )?,
        chart(
            "Open streams and the queue",
            "people",
            &[
                ("open streams", GREEN, over_time(run, |s| as_f64(s.streams))),
                ("queued", RED, over_time(run, |s| as_f64(s.queued))),
            ],
        )?,
        chart(
            "Latency of the requests answered, per half second",
            "ms",
            &[
                ("hold p50", CYAN, over_time(run, |s| s.hold_p50_ms)),
                ("hold p99", BLUE, over_time(run, |s| s.hold_p99_ms)),
                ("page p99", RED, over_time(run, |s| s.page_p99_ms)),
                ("confirm p99", BLACK, over_time(run, |s| s.confirm_p99_ms)),
                ("queue p99", GREEN, over_time(run, |s| s.queue_p99_ms)),
            ],
        )?,
    ];
    let figures: String = charts
        .iter()
        .map(|svg| format!("<figure>{svg}</figure>\n"))
        .collect();
    Ok(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>seatlock on-sale</title>\
         <style>body{{font:15px system-ui,sans-serif;margin:2rem}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}}td:first-child{{text-align:left}}\
         figure{{display:inline-block;margin:.5rem}}</style></head><body>\
         <h1>The on-sale: the crowd at the opening minute</h1><p>{}</p>{}\
         <h2>By request</h2>{}<p>A stream is answered when its opening snapshot arrives; \
         <code>page</code> is the map and the checkout page.</p><p>Latencies are of the requests answered within 10 s; the rest are counted in \
         <code>unanswered</code>. The fan-out is measured on one stream in {}.</p>\
         <h2>Over time</h2>{figures}</body></html>",
        escape(&settings(run)),
        html_table(&["field", "value"], rows(run)),
        html_table(&REQUEST_HEADER, run.requests.iter().map(request_cells)),
        run.config.probe_every,
    ))
}
