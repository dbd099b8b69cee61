//! Generated venues for the size rows: one section of rows of 50 seats (two blocks of
//! 25), as many rows as the size needs, written as venue files to a temporary folder.

use std::path::{Path, PathBuf};

/// Seats per generated row.
const ROW_SEATS: usize = 50;

/// The slug of the generated venue with `seats` seats.
pub(crate) fn slug(seats: usize) -> String {
    format!("bench-{seats}-seats")
}

/// Writes one venue file per size into a fresh folder under the system temp dir and
/// returns the folder (the caller seeds it, then removes it).
pub(crate) fn write(sizes: &[usize]) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(seatlock_harness::unique_name("seatlock-bench-venues"));
    std::fs::create_dir_all(&dir)?;
    for &seats in sizes {
        anyhow::ensure!(
            seats % ROW_SEATS == 0,
            "{seats} is not a multiple of {ROW_SEATS}"
        );
        write_venue(&dir, seats)?;
    }
    Ok(dir)
}

fn write_venue(dir: &Path, seats: usize) -> anyhow::Result<()> {
    let rows = seats / ROW_SEATS;
    // A plan that holds the seats (0.5 m a seat, 0.9 m a row: seatlock::venue::layout):
    // the section 30 m wide, its rows' depth deep, the stage in front of it.
    let depth = rows as f64 * 0.9 + 1.0;
    let venue = serde_json::json!({
        "slug": slug(seats),
        "name": format!("Bench hall ({seats} seats)"),
        "city": "Benchville", "time_zone": "UTC",
        "event": {"name": format!("Bench night ({seats} seats)"), "starts_in_days": 7, "time": "20:00"},
        "map": {"width": 40, "height": depth + 10.0,
                "outline": {"polygon": [[0, 0], [40, 0], [40, depth + 10.0], [0, depth + 10.0]]},
                "stage": {"label": "Stage", "shape": {"polygon": [[10, 1], [30, 1], [30, 4], [10, 4]]}}},
        "zones": [{"code": "S", "name": "Stalls", "price_cents": 4000, "colour": "#1d70b8"}],
        "sections": [{"code": "MAIN", "name": "Main",
            "shape": {"polygon": [[5, 6], [35, 6], [35, 6.0 + depth], [5, 6.0 + depth]]}, "rows": [
            {"rows": format!("1-{rows}"), "blocks": [ROW_SEATS / 2, ROW_SEATS / 2], "zone": "S"}
        ]}]
    });
    let path = dir.join(format!("{}.json", slug(seats)));
    std::fs::write(path, serde_json::to_vec_pretty(&venue)?)?;
    Ok(())
}
