//! The race lab's report: a table for the terminal, JSON for machines, and a
//! self-contained HTML page with a latency chart per strategy (plotters, SVG).

use plotters::prelude::*;
use serde::Serialize;

use super::race::{Outcome, RaceNumbers};
use crate::check::{CheckReport, Violation};
use crate::history::Op;
use crate::history::check::Verdict;
use crate::history::linearizability::{Budget, Linearizable};
use crate::history::partitions::{RowsVerdict, check_rows};

/// Latency percentiles of a purchase attempt (hold + confirm), in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// The 50th percentile.
    pub p50: f64,
    /// The 95th percentile.
    pub p95: f64,
    /// The 99th percentile.
    pub p99: f64,
}

/// One strategy's row (the JSON shape `load-test --json` promises).
#[derive(Debug, Clone, Serialize)]
pub struct StrategyRow {
    /// The purchase strategy the servers used.
    pub strategy: String,
    /// Purchase attempts: a hold, then a confirm.
    pub attempts: usize,
    /// Purchases confirmed.
    pub confirmed: usize,
    /// Seats with more than one accepted sale.
    pub double_sold_seats: usize,
    /// Late confirms the fence refused.
    pub stale_rejected: usize,
    /// Accepted writes out of token order, or under a token two holders wrote with.
    pub invariant_violations: usize,
    /// Attempts per second.
    pub throughput_per_s: f64,
    /// Latency of an attempt, hold and confirm.
    pub latency_ms: Latency,
    /// Whether the history checker ([`crate::history::check`]) found the race's history
    /// valid: no seat accepted two sales, no write lost or phantom, tokens in order.
    pub history_valid: bool,
    /// Operations in the history (holds, confirms, final reads).
    pub history_operations: usize,
    /// Holds granted while another buyer's lease on the seat may still have run (the
    /// lock-free strategies grant every hold: they have no lease).
    pub double_grants: usize,
    /// Whether the history is linearizable against the fenced row, seat by seat
    /// ([`crate::history::partitions`]): `true`, `false` or `unknown`.
    pub linearizable: Linearizable,
    /// How long that search took, ms.
    pub check_ms: f64,
    /// Percentile curve for the chart: (percentile, ms). Not in the JSON.
    #[serde(skip)]
    pub curve: Vec<(f64, f64)>,
    /// What the checker found. Not in the JSON; printed and in the HTML.
    #[serde(skip)]
    pub violations: Vec<Violation>,
    /// Outcomes that were neither a purchase nor a clean refusal. Not in the JSON.
    #[serde(skip)]
    pub failures: usize,
    /// A few contended seats' timeline ([`super::timeline`]). Not in the JSON.
    #[serde(skip)]
    pub lanes: Vec<super::timeline::Lane>,
}

/// `{"strategies": [...]}`, and `"groups": [...]` when the group scenario ran
/// ([`super::groups::GroupRow`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// One row per strategy.
    pub strategies: Vec<StrategyRow>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    /// The group scenario's rows, when it ran.
    pub groups: Vec<super::groups::GroupRow>,
}

impl StrategyRow {
    /// Combines the race's numbers with the invariant check and the history's verdict.
    pub fn new(
        strategy: &str,
        numbers: &RaceNumbers,
        check: CheckReport,
        history: &Verdict,
        linearizable: (Linearizable, f64),
    ) -> Self {
        let h = &numbers.latency_us;
        let ms = |q: f64| {
            if h.is_empty() {
                0.0
            } else {
                h.value_at_quantile(q) as f64 / 1000.0
            }
        };
        let confirmed = numbers.count(Outcome::Confirmed);
        let curve = (0..=100)
            .map(|p| (p as f64, ms(p as f64 / 100.0)))
            .collect();
        StrategyRow {
            strategy: strategy.to_owned(),
            attempts: numbers.attempts,
            confirmed,
            double_sold_seats: check.double_sold_seats,
            stale_rejected: numbers.count(Outcome::StaleRejected),
            invariant_violations: check.violations.len(),
            throughput_per_s: confirmed as f64 / numbers.elapsed.as_secs_f64().max(1e-9),
            latency_ms: Latency {
                p50: ms(0.50),
                p95: ms(0.95),
                p99: ms(0.99),
            },
            history_valid: history.valid,
            history_operations: history.operations,
            double_grants: history.double_grants,
            linearizable: linearizable.0,
            check_ms: linearizable.1,
            curve,
            lanes: super::timeline::race_lanes(
                &numbers.log,
                &check,
                numbers.hold_ttl.as_secs_f64() * 1e3,
            ),
            violations: check.violations,
            failures: numbers
                .outcomes
                .iter()
                .filter(|o| matches!(o, Outcome::Failed(_)))
                .count(),
        }
    }
}

const HEADER: [&str; 13] = [
    "strategy",
    "attempts",
    "confirmed",
    "sold twice",
    "stale rejected",
    "violations",
    "purchases/s",
    "p50 ms",
    "p95 / p99 ms",
    "history valid",
    "history ops",
    "double grants",
    "linearizable",
];

fn cells(row: &StrategyRow) -> [String; 13] {
    [
        row.strategy.clone(),
        row.attempts.to_string(),
        row.confirmed.to_string(),
        row.double_sold_seats.to_string(),
        row.stale_rejected.to_string(),
        row.invariant_violations.to_string(),
        format!("{:.1}", row.throughput_per_s),
        format!("{:.1}", row.latency_ms.p50),
        format!("{:.1} / {:.1}", row.latency_ms.p95, row.latency_ms.p99),
        row.history_valid.to_string(),
        row.history_operations.to_string(),
        row.double_grants.to_string(),
        row.linearizable.name().into(),
    ]
}

/// The linearizability search on a lab's history, resource by resource against the
/// fenced row ([`check_rows`]: `exclusive` for seats, `answers_own_sale` for the product's
/// confirm), and how long it took, ms.
pub fn linearizability(ops: &[Op], exclusive: bool, answers_own_sale: bool) -> (RowsVerdict, f64) {
    let started = std::time::Instant::now();
    let verdict = check_rows(ops, exclusive, answers_own_sale, Budget::DEFAULT);
    (verdict, started.elapsed().as_secs_f64() * 1e3)
}

/// The table as Markdown (readable in a terminal, pasteable into the README).
pub fn table(report: &Report) -> String {
    markdown_table(&HEADER, report.strategies.iter().map(cells))
}

/// A Markdown table: `header`, then a line per row of `rows`. The labs' reports share it.
pub fn markdown_table<const N: usize>(
    header: &[&str; N],
    rows: impl IntoIterator<Item = [String; N]>,
) -> String {
    let mut out = format!("| {} |\n|{}\n", header.join(" | "), "---|".repeat(N));
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

/// The same table as HTML, `<table>` to `</table>`, every cell escaped.
pub fn html_table<const N: usize>(
    header: &[&str; N],
    rows: impl IntoIterator<Item = [String; N]>,
) -> String {
    let head: String = header.iter().map(|h| format!("<th>{h}</th>")).collect();
    let mut out = format!("<table><tr>{head}</tr>\n");
    for row in rows {
        let tds: String = row
            .iter()
            .map(|c| format!("<td>{}</td>", escape(c)))
            .collect();
        out.push_str(&format!("<tr>{tds}</tr>\n"));
    }
    out + "</table>"
}

/// `text` with `&`, `<` and `>` escaped, for HTML.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The first `limit` violations of each strategy, one line per accepted write.
pub fn violations(report: &Report, limit: usize) -> String {
    let mut out = String::new();
    for row in &report.strategies {
        if row.violations.len() > limit {
            out.push_str(&format!(
                "{}: {} violations, the first {limit}:\n",
                row.strategy,
                row.violations.len()
            ));
        }
        for v in row.violations.iter().take(limit) {
            out.push_str(&format!(
                "{}: {} on seat {}\n",
                row.strategy, v.kind, v.seat_id
            ));
            for w in &v.writes {
                let token = w.fence_token.map_or("none".into(), |t| t.to_string());
                out.push_str(&format!(
                    "    accepted {} buyer {} fencing token {}\n",
                    w.accepted_at.format("%H:%M:%S%.3f"),
                    w.buyer_id,
                    token
                ));
            }
        }
    }
    out
}

/// An SVG chart of one strategy's latency percentiles.
fn chart(row: &StrategyRow) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (520, 260)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let top = row.curve.iter().map(|(_, ms)| *ms).fold(1.0, f64::max) * 1.1;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("{}: latency by percentile", row.strategy),
                ("sans-serif", 16),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..100f64, 0f64..top)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("percentile")
            .y_desc("ms")
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(LineSeries::new(row.curve.iter().copied(), &BLUE))
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// A self-contained HTML report: the table, the violations, a chart per strategy.
pub fn html(report: &Report) -> Result<String, String> {
    let table = html_table(&HEADER, report.strategies.iter().map(cells));
    let mut charts = String::new();
    for row in &report.strategies {
        charts.push_str(&format!("<figure>{}</figure>\n", chart(row)?));
    }
    let mut timelines = String::new();
    for row in report.strategies.iter().filter(|r| !r.lanes.is_empty()) {
        let title = format!("{}: contended seats", row.strategy);
        timelines.push_str(&format!(
            "<figure>{}</figure>\n",
            super::timeline::svg(&title, &row.lanes, &[])?
        ));
    }
    Ok(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>seatlock race lab</title>\
         <style>body{{font:15px system-ui,sans-serif;margin:2rem}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}}td:first-child{{text-align:left}}\
         figure{{display:inline-block;margin:.5rem}}pre{{background:#f4f4f4;padding:.6rem}}</style></head><body>\
         <h1>Race lab: who sells a seat twice?</h1>{table}\
         <h2>Latency of a purchase attempt (hold + confirm)</h2>{charts}\
         <h2>Timelines</h2>{}{timelines}\
         <h2>Invariant violations</h2><details><summary>every accepted write involved</summary>\
         <pre>{}</pre></details></body></html>",
        super::timeline::LEGEND_HTML,
        escape(&violations(report, usize::MAX))
    ))
}
