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
    let venue = serde_json::json!({
        "slug": slug(seats),
        "name": format!("Bench hall ({seats} seats)"),
        "city": "Benchville", "time_zone": "UTC",
        "event": {"name": format!("Bench night ({seats} seats)"), "starts_in_days": 7, "time": "20:00"},
        "zones": [{"code": "S", "name": "Stalls", "price_cents": 4000, "colour": "#1d70b8"}],
        "sections": [{"code": "MAIN", "name": "Main", "rows": [
            {"rows": format!("1-{rows}"), "blocks": [ROW_SEATS / 2, ROW_SEATS / 2], "zone": "S"}
        ]}]
    });
    let path = dir.join(format!("{}.json", slug(seats)));
    std::fs::write(path, serde_json::to_vec_pretty(&venue)?)?;
    Ok(())
}
