//! Where a venue's sections are: the shapes a venue file gives
//! (`data/venues/*.json`), the checks `seatlock seed` runs on them, and the SVG path data
//! the overview map draws (stored at seeding, migration 0013, so a page view does no
//! geometry).
//!
//! Coordinates are metres on the venue's plan, x to the right and y down (as SVG draws
//! them). A section is a polygon, or an arc of a bowl: the ring between two radii around a
//! centre, from one angle to another (degrees, clockwise on the plan from the +x axis, as
//! SVG's y-down coordinates turn them). The checks are the ones a seat map's author
//! would otherwise find by looking: no two sections (nor a section and the stage)
//! overlap, every section lies inside the venue's outline, and every section has room for
//! its seats at [`SEAT_AREA_M2`] each.

use anyhow::{Context, bail};
use serde::Deserialize;

/// The floor area one seat needs, in square metres: a 0.5 m seat in a 0.9 m row (the
/// usual minimum row pitch of fixed seating). A section smaller than its seats times this
/// cannot hold them.
pub const SEAT_AREA_M2: f64 = 0.45;

/// The longest straight piece an arc is cut into for the overlap checks, in degrees.
const ARC_STEP_DEG: f64 = 3.0;

/// Within this (square metres of the cross product), three points count as on one line:
/// neighbouring sections share an edge, and sharing it is not overlapping.
const COLLINEAR_EPS: f64 = 1e-6;

/// A shape on the venue's plan: `{"polygon": [[x, y], …]}` or `{"arc": {…}}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Shape {
    /// The corners, in order (either direction); at least three.
    Polygon(Vec<[f64; 2]>),
    /// A piece of a bowl's ring.
    Arc(Arc),
}

/// The ring between `inner` and `outer` metres from `centre`, from `from_deg` to
/// `to_deg` (clockwise on the plan; `to_deg - from_deg` between 0 and 360, exclusive).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arc {
    /// The bowl's centre, `[x, y]` in metres.
    pub centre: [f64; 2],
    /// The inner radius, metres (0: a slice reaching the centre).
    pub inner: f64,
    /// The outer radius, metres.
    pub outer: f64,
    /// Where the arc starts, degrees.
    pub from_deg: f64,
    /// Where it ends, degrees.
    pub to_deg: f64,
}

impl Arc {
    fn point(&self, radius: f64, deg: f64) -> [f64; 2] {
        let rad = deg.to_radians();
        [
            self.centre[0] + radius * rad.cos(),
            self.centre[1] + radius * rad.sin(),
        ]
    }
}

/// A venue's plan: its size, outline and stage (`"map"` in a venue file).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapSpec {
    /// The plan's width, metres.
    pub width: f64,
    /// The plan's height, metres.
    pub height: f64,
    /// The venue's outline: every section lies inside it.
    pub outline: Shape,
    /// The stage, or the end of the floor the show faces.
    pub stage: StageSpec,
}

/// The stage on the plan.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageSpec {
    /// What to call it on the map ("Stage").
    pub label: String,
    /// Where it is.
    pub shape: Shape,
}

/// A shape as the overview draws it.
#[derive(Debug, Clone, PartialEq)]
pub struct Drawn {
    /// SVG path data (`d`), in the plan's metres.
    pub path: String,
    /// A point inside the shape where its name goes, `[x, y]`.
    pub label: [f64; 2],
}

impl Shape {
    /// Refuses a shape that is not one: a polygon of fewer than three corners, an arc
    /// whose radii or angles are out of order. `what` names it in the message.
    pub fn check(&self, what: &str) -> anyhow::Result<()> {
        match self {
            Shape::Polygon(corners) if corners.len() < 3 => {
                bail!("{what}: a polygon needs at least three corners")
            }
            Shape::Arc(arc) if !(arc.inner >= 0.0 && arc.outer > arc.inner) => {
                bail!("{what}: an arc needs 0 <= inner < outer")
            }
            Shape::Arc(arc)
                if !(0.0 < arc.to_deg - arc.from_deg && arc.to_deg - arc.from_deg < 360.0) =>
            {
                bail!("{what}: an arc's to_deg - from_deg must be between 0 and 360")
            }
            _ => Ok(()),
        }
    }

    /// The shape's area, square metres (an arc's exactly, a polygon's by the shoelace
    /// formula).
    pub fn area_m2(&self) -> f64 {
        match self {
            Shape::Polygon(corners) => shoelace(corners).abs(),
            Shape::Arc(arc) => {
                (arc.outer.powi(2) - arc.inner.powi(2)) / 2.0
                    * (arc.to_deg - arc.from_deg).to_radians()
            }
        }
    }

    /// The shape's corners; an arc's curves cut into pieces of at most 3 degrees.
    fn corners(&self) -> Vec<[f64; 2]> {
        match self {
            Shape::Polygon(corners) => corners.clone(),
            Shape::Arc(arc) => {
                let span = arc.to_deg - arc.from_deg;
                let steps = (span / ARC_STEP_DEG).ceil().max(1.0) as usize;
                let at = |i: usize| arc.from_deg + span * i as f64 / steps as f64;
                let outer = (0..=steps).map(|i| arc.point(arc.outer, at(i)));
                let mut corners: Vec<_> = outer.collect();
                if arc.inner > 0.0 {
                    corners.extend((0..=steps).rev().map(|i| arc.point(arc.inner, at(i))));
                } else {
                    corners.push(arc.centre);
                }
                corners
            }
        }
    }

    /// A point inside the shape: an arc's middle; a polygon's centroid (inside a convex
    /// one; a concave section should be given as arcs or convex pieces).
    pub fn inner_point(&self) -> [f64; 2] {
        match self {
            Shape::Polygon(corners) => centroid(corners),
            Shape::Arc(arc) => arc.point(
                (arc.inner + arc.outer) / 2.0,
                (arc.from_deg + arc.to_deg) / 2.0,
            ),
        }
    }

    /// The shape as SVG path data and its label's place. Arcs are drawn with SVG's own
    /// arc command, so a curved section costs a few dozen bytes, not one per corner.
    pub fn drawn(&self) -> Drawn {
        let xy = |p: [f64; 2]| format!("{} {}", num(p[0]), num(p[1]));
        let path = match self {
            Shape::Polygon(corners) => {
                let mut path = format!("M{}", xy(corners[0]));
                for &corner in &corners[1..] {
                    path.push_str(&format!("L{}", xy(corner)));
                }
                path + "Z"
            }
            Shape::Arc(arc) => {
                let large = u8::from(arc.to_deg - arc.from_deg > 180.0);
                let (r, r0) = (num(arc.outer), num(arc.inner));
                let outer_end = xy(arc.point(arc.outer, arc.to_deg));
                let start = format!(
                    "M{}A{r} {r} 0 {large} 1 {outer_end}",
                    xy(arc.point(arc.outer, arc.from_deg))
                );
                if arc.inner > 0.0 {
                    let inner_end = xy(arc.point(arc.inner, arc.to_deg));
                    let inner_start = xy(arc.point(arc.inner, arc.from_deg));
                    format!("{start}L{inner_end}A{r0} {r0} 0 {large} 0 {inner_start}Z")
                } else {
                    format!("{start}L{}Z", xy(arc.centre))
                }
            }
        };
        Drawn {
            path,
            label: self.inner_point(),
        }
    }

    /// Whether the two shapes overlap: an edge of one crosses an edge of the other, or a
    /// point inside one lies inside the other (one within the other, or the same shape
    /// twice). Shapes that only share an edge or a corner do not overlap.
    pub fn overlaps(&self, other: &Shape) -> bool {
        let (a, b) = (self.corners(), other.corners());
        edges_cross(&a, &b) || contains(&b, self.inner_point()) || contains(&a, other.inner_point())
    }

    /// Whether `inner` lies inside this shape (touching its edge from inside counts).
    pub fn holds(&self, inner: &Shape) -> bool {
        let (outer, corners) = (self.corners(), inner.corners());
        !edges_cross(&outer, &corners) && contains(&outer, inner.inner_point())
    }
}

/// One section as [`check_venue`] sees it.
pub struct PlacedSection<'a> {
    /// Its code, to name it in a refusal.
    pub code: &'a str,
    /// Where it is.
    pub shape: &'a Shape,
    /// How many seats it has.
    pub seats: usize,
}

/// Checks a venue's plan: every shape is one, the stage and every section lie inside the
/// outline, no two of them overlap, and each section has room for its seats at
/// [`SEAT_AREA_M2`] each. The error names the venue (`slug`) and the sections at fault.
pub fn check_venue(slug: &str, map: &MapSpec, sections: &[PlacedSection]) -> anyhow::Result<()> {
    let venue = || format!("venue {slug}");
    if !(map.width > 0.0 && map.height > 0.0) {
        bail!("{}: the map's width and height must be positive", venue());
    }
    map.outline.check("the outline").with_context(venue)?;
    map.stage.shape.check("the stage").with_context(venue)?;
    // The stage takes part in the overlap checks as one more shape.
    let mut placed: Vec<(String, &Shape)> = vec![("the stage".into(), &map.stage.shape)];
    for section in sections {
        let name = format!("section {}", section.code);
        section.shape.check(&name).with_context(venue)?;
        let need = section.seats as f64 * SEAT_AREA_M2;
        let has = section.shape.area_m2();
        if has < need {
            bail!(
                "{}: {name} has {} seats, which need at least {need:.1} m² ({SEAT_AREA_M2} m² a seat), but its shape is {has:.1} m²",
                venue(),
                section.seats
            );
        }
        placed.push((name, section.shape));
    }
    for (i, (name, shape)) in placed.iter().enumerate() {
        if !map.outline.holds(shape) {
            bail!("{}: {name} is not inside the venue's outline", venue());
        }
        for (other, other_shape) in &placed[..i] {
            if shape.overlaps(other_shape) {
                bail!("{}: {name} overlaps {other}", venue());
            }
        }
    }
    Ok(())
}

/// `0 0 <width> <height>`: the SVG viewBox of a plan.
pub fn view_box(map: &MapSpec) -> String {
    format!("0 0 {} {}", num(map.width), num(map.height))
}

/// A coordinate as SVG path data writes it: at most two decimals, no trailing zeros.
fn num(x: f64) -> String {
    let text = format!("{x:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".into()
    } else {
        text.into()
    }
}

/// The signed area of a polygon (positive when its corners turn
/// counter-clockwise in y-up coordinates).
fn shoelace(corners: &[[f64; 2]]) -> f64 {
    let n = corners.len();
    (0..n)
        .map(|i| {
            let (p, q) = (corners[i], corners[(i + 1) % n]);
            p[0] * q[1] - q[0] * p[1]
        })
        .sum::<f64>()
        / 2.0
}

/// The centroid of a polygon's area (its corners' mean if it has none).
fn centroid(corners: &[[f64; 2]]) -> [f64; 2] {
    let area = shoelace(corners);
    let n = corners.len();
    if area.abs() < COLLINEAR_EPS {
        let sum = corners
            .iter()
            .fold([0.0, 0.0], |s, p| [s[0] + p[0], s[1] + p[1]]);
        return [sum[0] / n as f64, sum[1] / n as f64];
    }
    let (mut x, mut y) = (0.0, 0.0);
    for i in 0..n {
        let (p, q) = (corners[i], corners[(i + 1) % n]);
        let cross = p[0] * q[1] - q[0] * p[1];
        x += (p[0] + q[0]) * cross;
        y += (p[1] + q[1]) * cross;
    }
    [x / (6.0 * area), y / (6.0 * area)]
}

/// Which side of the line `a`→`b` the point `c` is on: the cross product's sign, 0 within
/// [`COLLINEAR_EPS`].
fn side(a: [f64; 2], b: [f64; 2], c: [f64; 2]) -> i8 {
    let cross = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]);
    if cross > COLLINEAR_EPS {
        1
    } else if cross < -COLLINEAR_EPS {
        -1
    } else {
        0
    }
}

/// Whether an edge of polygon `a` properly crosses an edge of polygon `b` (each
/// strictly through the other: touching or running along does not count).
fn edges_cross(a: &[[f64; 2]], b: &[[f64; 2]]) -> bool {
    let edges = |p: &[[f64; 2]]| {
        let n = p.len();
        (0..n)
            .map(move |i| (p[i], p[(i + 1) % n]))
            .collect::<Vec<_>>()
    };
    let (ea, eb) = (edges(a), edges(b));
    ea.iter().any(|&(p1, p2)| {
        eb.iter().any(|&(q1, q2)| {
            side(p1, p2, q1) * side(p1, p2, q2) < 0 && side(q1, q2, p1) * side(q1, q2, p2) < 0
        })
    })
}

/// Whether `point` is inside polygon `corners` (even-odd rule, by a ray to the right).
fn contains(corners: &[[f64; 2]], point: [f64; 2]) -> bool {
    let n = corners.len();
    let mut inside = false;
    for i in 0..n {
        let (p, q) = (corners[i], corners[(i + 1) % n]);
        if (p[1] > point[1]) != (q[1] > point[1]) {
            let x = p[0] + (point[1] - p[1]) / (q[1] - p[1]) * (q[0] - p[0]);
            if point[0] < x {
                inside = !inside;
            }
        }
    }
    inside
}

#[cfg(test)]
mod tests {
    use super::*;

    fn square(x: f64, y: f64, side: f64) -> Shape {
        Shape::Polygon(vec![
            [x, y],
            [x + side, y],
            [x + side, y + side],
            [x, y + side],
        ])
    }

    fn ring(from_deg: f64, to_deg: f64) -> Shape {
        Shape::Arc(Arc {
            centre: [50.0, 50.0],
            inner: 20.0,
            outer: 30.0,
            from_deg,
            to_deg,
        })
    }

    fn map() -> MapSpec {
        MapSpec {
            width: 100.0,
            height: 100.0,
            outline: square(0.0, 0.0, 100.0),
            stage: StageSpec {
                label: "Stage".into(),
                shape: square(45.0, 45.0, 10.0),
            },
        }
    }

    #[test]
    fn neighbours_sharing_an_edge_do_not_overlap_but_crossing_or_nested_shapes_do() {
        assert!(!square(0.0, 0.0, 10.0).overlaps(&square(10.0, 0.0, 10.0)));
        assert!(square(0.0, 0.0, 10.0).overlaps(&square(5.0, 5.0, 10.0)));
        assert!(square(0.0, 0.0, 10.0).overlaps(&square(2.0, 2.0, 3.0)));
        assert!(square(0.0, 0.0, 10.0).overlaps(&square(0.0, 0.0, 10.0)));
        assert!(!ring(0.0, 30.0).overlaps(&ring(30.0, 60.0)));
        assert!(ring(0.0, 30.0).overlaps(&ring(20.0, 60.0)));
    }

    #[test]
    fn an_arc_is_drawn_with_svg_arcs_and_measured_exactly() {
        let quarter = ring(0.0, 90.0);
        assert_eq!(
            quarter.drawn().path,
            "M80 50A30 30 0 0 1 50 80L50 70A20 20 0 0 0 70 50Z"
        );
        let area = std::f64::consts::PI * (30f64.powi(2) - 20f64.powi(2)) / 4.0;
        assert!((quarter.area_m2() - area).abs() < 1e-9);
        assert_eq!(square(1.0, 2.0, 3.0).drawn().path, "M1 2L4 2L4 5L1 5Z");
        assert_eq!(square(1.0, 2.0, 2.0).drawn().label, [2.0, 3.0]);
    }

    #[test]
    fn a_bad_plan_is_refused_naming_the_venue_and_the_sections() {
        let (a, b) = (ring(0.0, 30.0), ring(20.0, 60.0));
        let placed = |shape, seats| PlacedSection {
            code: "101",
            shape,
            seats,
        };
        assert!(check_venue("arena", &map(), &[placed(&a, 100)]).is_ok());
        let overlapping = [
            placed(&a, 100),
            PlacedSection {
                code: "102",
                shape: &b,
                seats: 100,
            },
        ];
        let err = check_venue("arena", &map(), &overlapping)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "venue arena: section 102 overlaps section 101");
        let err = check_venue("arena", &map(), &[placed(&a, 1_000)])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("venue arena: section 101 has 1000 seats"),
            "{err}"
        );
        let on_stage = square(40.0, 40.0, 30.0);
        let err = check_venue("arena", &map(), &[placed(&on_stage, 10)])
            .unwrap_err()
            .to_string();
        assert_eq!(err, "venue arena: section 101 overlaps the stage");
        let outside = square(90.0, 90.0, 20.0);
        let err = check_venue("arena", &map(), &[placed(&outside, 10)])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "venue arena: section 101 is not inside the venue's outline"
        );
        let err = ring(30.0, 30.0).check("section 9").unwrap_err().to_string();
        assert!(err.contains("section 9"), "{err}");
    }
}
