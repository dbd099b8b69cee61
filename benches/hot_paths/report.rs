//! The report: `target/bench/report.json` (`{"rows": [{"name", "unit", "ours",
//! "baseline", "ratio"}, …], "meta": {…}}`) and the Markdown table printed at the end.

use serde::Serialize;

/// One measured row. `ratio` = ours / baseline for throughput rows; latency and size
/// rows have no baseline (`ours` alone is the figure) unless they compare with the
/// smallest size (the growth factor).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    pub name: String,
    pub unit: String,
    pub ours: f64,
    pub baseline: Option<f64>,
    pub ratio: Option<f64>,
    /// What the row is held to, in words ("ratio >= 0.5"); not part of the JSON contract.
    #[serde(skip)]
    pub target: Option<Target>,
}

/// A row's target.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target {
    /// `ratio` at least this.
    RatioAtLeast(f64),
    /// `ratio` at most this (a cost compared with a baseline's).
    RatioAtMost(f64),
    /// `ours` at most this.
    AtMost(f64),
}

impl Row {
    /// A throughput row compared with a baseline: ratio = ours / baseline.
    pub(crate) fn versus(name: &str, unit: &str, ours: f64, baseline: f64) -> Row {
        Row {
            name: name.into(),
            unit: unit.into(),
            ours,
            baseline: Some(baseline),
            ratio: (baseline > 0.0).then(|| ours / baseline),
            target: None,
        }
    }

    /// A row with no baseline.
    pub(crate) fn alone(name: &str, unit: &str, ours: f64) -> Row {
        Row {
            name: name.into(),
            unit: unit.into(),
            ours,
            baseline: None,
            ratio: None,
            target: None,
        }
    }

    /// Sets the target.
    pub(crate) fn target(mut self, target: Target) -> Row {
        self.target = Some(target);
        self
    }

    /// Whether the target is met (`None` without a target).
    pub(crate) fn met(&self) -> Option<bool> {
        Some(match self.target? {
            Target::RatioAtLeast(min) => self.ratio.is_some_and(|r| r >= min),
            Target::RatioAtMost(max) => self.ratio.is_some_and(|r| r <= max),
            Target::AtMost(max) => self.ours <= max,
        })
    }
}

/// The whole report.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub rows: Vec<Row>,
    pub meta: serde_json::Value,
}

/// A number with a sensible number of digits.
fn figure(x: f64) -> String {
    match x.abs() {
        a if a >= 1000.0 => format!("{x:.0}"),
        a if a >= 10.0 => format!("{x:.1}"),
        a if a >= 0.1 => format!("{x:.2}"),
        _ => format!("{x:.3}"),
    }
}

/// The Markdown table (name, unit, ours, baseline, ratio, target, met).
pub(crate) fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| row | unit | ours | baseline | ratio | target | met |\n|---|---|---:|---:|---:|---|---|\n",
    );
    for row in rows {
        let target = match row.target {
            Some(Target::RatioAtLeast(min)) => format!("ratio >= {min}"),
            Some(Target::RatioAtMost(max)) => format!("ratio <= {max}"),
            Some(Target::AtMost(max)) => format!("<= {max}"),
            None => String::new(),
        };
        let met = match row.met() {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "",
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {target} | {met} |\n",
            row.name,
            row.unit,
            figure(row.ours),
            row.baseline.map(figure).unwrap_or_default(),
            row.ratio.map(|r| format!("{r:.2}")).unwrap_or_default(),
        ));
    }
    out
}
