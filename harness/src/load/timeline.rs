//! A timeline of contended resources, the article's table as a picture: one lane per
//! holder of a resource, its lease as a bar (from the grant to the end of its TTL, as the
//! holder believes), labelled with its fencing token, and each write it sent as a mark,
//! green where the resource accepted it, red where it refused it. Moments that explain
//! the race (a failover, a pause) are vertical lines. Drawn with plotters as SVG, for the
//! failover report (`make failover`) and the race report (`make race`).

use plotters::prelude::*;

use super::race::{Attempt, Outcome};
use crate::check::CheckReport;

/// One holder's lease on one resource and the writes it sent under it.
#[derive(Debug, Clone)]
pub struct Lane {
    /// The resource (`seat 14`, `item 3`).
    pub resource: String,
    /// The holder's label (`buyer A`).
    pub holder: String,
    /// The lease as the holder believes it: granted at, ends at, ms since the run began.
    pub lease_ms: (f64, f64),
    /// The grant's fencing token, if the holder learned it.
    pub fencing_token: Option<i64>,
    /// Each write sent: when it was answered (ms since the run began) and whether the
    /// resource accepted it.
    pub writes: Vec<(f64, bool)>,
}

/// A moment drawn across every lane, e.g. `(2140.0, "primary killed")`.
pub type Moment = (f64, String);

const LANE_PX: u32 = 34;

/// The SVG of `lanes` (top to bottom in the order given) with `moments`, titled `title`.
/// Errors: plotters' drawing error, as text.
pub fn svg(title: &str, lanes: &[Lane], moments: &[Moment]) -> Result<String, String> {
    svg_from(title, lanes, moments, 0.0)
}

/// [`svg`] of a window of a long run: the time axis starts at `from_ms` (lanes and
/// moments keep the run's times).
pub fn svg_from(
    title: &str,
    lanes: &[Lane],
    moments: &[Moment],
    from_ms: f64,
) -> Result<String, String> {
    let end_ms = lanes
        .iter()
        .flat_map(|l| std::iter::once(l.lease_ms.1).chain(l.writes.iter().map(|w| w.0)))
        .chain(moments.iter().map(|m| m.0))
        .fold(from_ms + 1.0, f64::max)
        * 1.05
        - from_ms * 0.05;
    let height = 90 + LANE_PX * lanes.len() as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let rows = lanes.len().max(1) as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(10)
            .build_cartesian_2d(from_ms..end_ms, 0f64..rows)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_desc("ms since the run began")
            .draw()
            .map_err(|e| e.to_string())?;
        let palette = [&BLUE, &MAGENTA, &CYAN, &BLACK];
        for (i, lane) in lanes.iter().enumerate() {
            let y = rows - i as f64 - 0.5;
            let color = palette[i % palette.len()];
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(lane.lease_ms.0, y - 0.3), (lane.lease_ms.1, y + 0.3)],
                    color.mix(0.25).filled(),
                )))
                .map_err(|e| e.to_string())?;
            let token = lane
                .fencing_token
                .map_or("token ?".to_owned(), |t| format!("token {t}"));
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("{} · {} · {token}", lane.resource, lane.holder),
                    (from_ms, y + 0.28), // at the left edge: a late lane's label stays in view
                    ("sans-serif", 12),
                )))
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(lane.writes.iter().map(|&(at, accepted)| {
                    let style = if accepted {
                        GREEN.filled()
                    } else {
                        RED.filled()
                    };
                    Circle::new((at, y), 6, style)
                }))
                .map_err(|e| e.to_string())?;
        }
        for (at, label) in moments {
            chart
                .draw_series(LineSeries::new([(*at, 0.0), (*at, rows)], RED.mix(0.6)))
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(std::iter::once(Text::new(
                    label.clone(),
                    (*at, rows),
                    ("sans-serif", 11).into_font().color(&RED),
                )))
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The legend shown under every timeline, as HTML.
pub const LEGEND_HTML: &str = "<p>Each bar is one holder's lease as the holder believes it \
    (from its grant to the end of its TTL), labelled with its fencing token; a green dot is a \
    write the resource accepted, a red dot one it refused. Red lines mark what happened to \
    the lock service. \"token ?\": the write was refused and the holder was never shown its token.</p>";

/// Seats drawn per strategy in the race report.
pub const RACE_SEATS: usize = 3;

/// The race report's lanes for one strategy: up to [`RACE_SEATS`] seats, those the
/// checker found a violation on first, then those granted to more than one buyer; one
/// lane per buyer whose hold was granted, its lease from the grant to `hold_ttl_ms` later,
/// its token from the write the seat accepted (a refused write's token is not shown to
/// the buyer), its confirm as the write.
pub fn race_lanes(log: &[Attempt], check: &CheckReport, hold_ttl_ms: f64) -> Vec<Lane> {
    let held = |seat: i64| {
        log.iter()
            .filter(move |a| a.seat == seat && a.held_ms.is_some())
    };
    let mut seats: Vec<i64> = check.violations.iter().map(|v| v.seat_id).collect();
    seats.extend(log.iter().map(|a| a.seat).filter(|&s| held(s).count() > 1));
    let mut picked: Vec<i64> = Vec::new();
    for seat in seats {
        if !picked.contains(&seat) && picked.len() < RACE_SEATS {
            picked.push(seat);
        }
    }
    let mut lanes = Vec::new();
    for seat in picked {
        let mut holders: Vec<&Attempt> = held(seat).collect();
        holders.sort_by(|a, b| a.held_ms.partial_cmp(&b.held_ms).expect("finite times"));
        for attempt in holders {
            let granted = attempt.held_ms.unwrap_or_default();
            let token = check
                .writes
                .iter()
                .find(|w| w.seat_id == seat && w.buyer_id == attempt.buyer_id)
                .and_then(|w| w.fence_token);
            lanes.push(Lane {
                resource: format!("seat {seat}"),
                holder: format!("buyer {}", attempt.buyer_id),
                lease_ms: (granted, granted + hold_ttl_ms),
                fencing_token: token,
                writes: vec![(attempt.answered_ms, attempt.outcome == Outcome::Confirmed)],
            });
        }
    }
    lanes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_lane_per_holder_with_its_token_and_writes() {
        let lane = |holder: &str, token, start, accepted| Lane {
            resource: "seat 14".into(),
            holder: holder.into(),
            lease_ms: (start, start + 1_000.0),
            fencing_token: Some(token),
            writes: vec![(start + 500.0, accepted)],
        };
        let svg = svg(
            "t",
            &[
                lane("buyer A", 41, 0.0, false),
                lane("buyer B", 42, 2_000.0, true),
            ],
            &[(1_500.0, "primary killed".into())],
        )
        .unwrap();
        for text in ["buyer A", "token 41", "token 42", "primary killed"] {
            assert!(svg.contains(text), "{text}");
        }
        assert_eq!(svg.matches("<circle").count(), 2);
    }
}
