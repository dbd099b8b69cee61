//! Money is integer cents everywhere; this formats it for people.

/// Formats cents as dollars with two decimals: `12550` → `"$125.50"`.
pub fn format_cents(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let cents = cents.unsigned_abs();
    format!("{sign}${}.{:02}", cents / 100, cents % 100)
}

#[cfg(test)]
mod tests {
    use super::format_cents;

    #[test]
    fn formats_cents() {
        assert_eq!(format_cents(12550), "$125.50");
        assert_eq!(format_cents(5), "$0.05");
        assert_eq!(format_cents(-100), "-$1.00");
    }
}
