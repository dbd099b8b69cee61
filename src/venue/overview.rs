//! The venue at a glance: `GET /events/{id}` opens on a drawing of the venue,
//! every section where it is ([`super::layout`]), shaded by the share of its seats still
//! available, and `GET /events/{id}/sections/{code}` shows one section's seats.
//!
//! What this module builds is the part of those pages every viewer shares: the plan and
//! each section's counts, from seat states that do not depend on who looks (a seat held
//! by the viewer counts as held, like anyone's). It is built and rendered once per board
//! ([`super::board`]) and served to every view; the buyer's own part (name, holds, cart,
//! form token) is the page's panel, rendered beside it.

use super::queries::{MapSeat, SectionShape, VenuePlan};
use crate::money::format_cents;

/// A venue of at most this many seats shows every seat under its overview (the
/// 1,642-seat hall); a bigger one (the 11,056-seat arena) only the overview, each
/// section's seats on the section's own page, so its first view stays small.
pub const ALL_SEATS_UP_TO: usize = 2_000;

/// The venue's drawing and its sections' counts.
pub struct Overview {
    /// The plan's SVG view box; `None` for a venue seeded without a plan (its sections
    /// are then listed, not drawn).
    pub view_box: Option<String>,
    /// The venue's outline, SVG path data.
    pub outline_path: String,
    /// The stage, SVG path data.
    pub stage_path: String,
    /// What the stage is called.
    pub stage_label: String,
    /// Where that is written, `[x, y]`.
    pub stage_at: [f32; 2],
    /// The sections, in drawing order.
    pub sections: Vec<SectionSummary>,
}

/// One section on the overview.
#[derive(Clone)]
pub struct SectionSummary {
    /// Its code (the `{code}` of its page).
    pub code: String,
    /// Its name.
    pub name: String,
    /// Its shape, SVG path data (empty without a plan).
    pub path: String,
    /// Where its code is written, `[x, y]`.
    pub label: [f32; 2],
    /// Its seats.
    pub total: usize,
    /// Those neither held nor sold.
    pub available: usize,
    /// Its cheapest and dearest seat, in cents.
    pub price_cents: (i64, i64),
    /// Its wheelchair places.
    pub wheelchair: usize,
    /// Its seat ids as ranges, `"1-320"` or `"5-9,12"`: the page's script counts each live
    /// change of a seat against its section with them.
    pub seat_ids: String,
}

impl Overview {
    /// The overview of an event: `plan` and `shapes` as seeded (migration 0013), the
    /// counts from its `seats` (in drawing order, so each section's are together), of
    /// which those `taken` (sold or held) are not available.
    pub fn new(
        plan: VenuePlan,
        shapes: &[SectionShape],
        seats: &[MapSeat],
        taken: impl Fn(&MapSeat) -> bool,
    ) -> Overview {
        let sections = seats
            .chunk_by(|a, b| a.section_code == b.section_code)
            .map(|section| {
                let shape = shapes.iter().find(|s| s.code == section[0].section_code);
                SectionSummary::new(section, shape, &taken)
            })
            .collect();
        let drawn = plan.map_view_box.is_some() && shapes.iter().all(|s| s.shape_path.is_some());
        Overview {
            view_box: plan.map_view_box.filter(|_| drawn),
            outline_path: plan.outline_path.unwrap_or_default(),
            stage_path: plan.stage_path.unwrap_or_default(),
            stage_label: plan.stage_label.unwrap_or_default(),
            stage_at: [
                plan.stage_label_x.unwrap_or_default(),
                plan.stage_label_y.unwrap_or_default(),
            ],
            sections,
        }
    }
}

impl SectionSummary {
    /// The summary of one section's `seats` (not empty).
    fn new(
        seats: &[MapSeat],
        shape: Option<&SectionShape>,
        taken: impl Fn(&MapSeat) -> bool,
    ) -> SectionSummary {
        let mut ids: Vec<i64> = seats.iter().map(|seat| seat.seat_id).collect();
        ids.sort_unstable();
        let prices = seats.iter().map(|seat| seat.price_cents);
        SectionSummary {
            code: seats[0].section_code.clone(),
            name: seats[0].section_name.clone(),
            path: shape.and_then(|s| s.shape_path.clone()).unwrap_or_default(),
            label: [
                shape.and_then(|s| s.label_x).unwrap_or_default(),
                shape.and_then(|s| s.label_y).unwrap_or_default(),
            ],
            total: ids.len(),
            available: seats.iter().filter(|seat| !taken(seat)).count(),
            price_cents: (
                prices.clone().min().unwrap_or_default(),
                prices.max().unwrap_or_default(),
            ),
            wheelchair: seats
                .iter()
                .filter(|seat| seat.access.as_deref() == Some("wheelchair"))
                .count(),
            seat_ids: ranges(&ids),
        }
    }

    /// Its prices: "$90.00", or "$95.00 to $125.00".
    pub fn prices(&self) -> String {
        let (low, high) = self.price_cents;
        if low == high {
            format_cents(low)
        } else {
            format!("{} to {}", format_cents(low), format_cents(high))
        }
    }

    /// "320 left", or "sold out": written on the section, so that the shade is not the
    /// only sign of what is left.
    pub fn left(&self) -> String {
        match self.available {
            0 => "sold out".into(),
            n => format!("{n} left"),
        }
    }

    /// The section for a screen reader and a tooltip: "Section 101: 280 of 320 seats
    /// available, $90.00, 2 wheelchair places". `web/app.js` writes the same sentence when
    /// the counts change live.
    pub fn summary(&self) -> String {
        let access = match self.wheelchair {
            0 => String::new(),
            n => format!(", {n} wheelchair places"),
        };
        format!(
            "{}: {} of {} seats available, {}{access}",
            self.name,
            self.available,
            self.total,
            self.prices()
        )
    }

    /// The section's accessible name on the drawing: what is written on it first, its
    /// code and what is left, then [`Self::summary`]: "101, 280 left: Section 101: 280 of
    /// 320 seats available, $90.00". A name that starts with the visible words is WCAG
    /// 2.5.3's "label in name" (a voice user says what they see; axe-core checks it);
    /// `web/app.js` writes the same when the counts change live.
    pub fn name_on_map(&self) -> String {
        format!("{}, {}: {}", self.code, self.left(), self.summary())
    }

    /// The shade: the share of seats available, as the fill's opacity (0.08 when none is
    /// left, so a sold-out section still shows; 1 when all are).
    pub fn opacity(&self) -> String {
        let share = self.available as f64 / self.total.max(1) as f64;
        format!("{:.3}", 0.08 + 0.92 * share)
    }
}

/// Sorted ids as ranges: `[1, 2, 3, 7]` → `"1-3,7"`.
fn ranges(ids: &[i64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let start = ids[i];
        while i + 1 < ids.len() && ids[i + 1] == ids[i] + 1 {
            i += 1;
        }
        out.push(if ids[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", ids[i])
        });
        i += 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::ranges;

    #[test]
    fn seat_ids_are_sent_as_ranges() {
        assert_eq!(ranges(&[1, 2, 3, 7, 9, 10]), "1-3,7,9-10");
        assert_eq!(ranges(&[]), "");
    }
}
