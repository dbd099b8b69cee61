//! Money is integer cents everywhere; this formats it for people and parses what they
//! type.

/// Formats cents as dollars with two decimals: `12550` → `"$125.50"`.
pub fn format_cents(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let cents = cents.unsigned_abs();
    format!("{sign}${}.{:02}", cents / 100, cents % 100)
}

/// The largest amount a form accepts: $1,000,000.00, in cents. Matches the
/// `bids_amount_in_range` constraint (migrations/0004).
pub const MAX_AMOUNT_CENTS: i64 = 100_000_000;

/// Why a typed amount was refused. The messages are shown next to the form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    /// Nothing was typed.
    #[error("Enter an amount, such as 125.50.")]
    Empty,
    /// Not digits with at most one decimal point (letters, `1e3`, `1,000`, `.5`, `+5`).
    #[error("That is not an amount: use digits and at most one decimal point, such as 125.50.")]
    NotANumber,
    /// A minus sign.
    #[error("An amount must be positive.")]
    Negative,
    /// Zero (`0`, `0.00`).
    #[error("An amount must be more than $0.00.")]
    Zero,
    /// More than two digits after the decimal point: a fraction of a cent.
    #[error("Amounts are in whole cents: at most two digits after the decimal point.")]
    FractionalCents,
    /// Above [`MAX_AMOUNT_CENTS`].
    #[error("Amounts above $1000000.00 are not accepted.")]
    TooLarge,
}

/// Parses a typed dollar amount strictly into cents: `"125.50"` → `12550`, `"7"` → `700`,
/// `"7.5"` → `750`. Surrounding whitespace is ignored; nothing else is: no sign, no `$`,
/// no thousands separators, no exponent, at most two decimals, at most
/// [`MAX_AMOUNT_CENTS`]. Never overflows, whatever the length of the input.
pub fn parse_amount(raw: &str) -> Result<i64, AmountError> {
    let text = raw.trim();
    if text.is_empty() {
        return Err(AmountError::Empty);
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (unsigned, negative) = match text.strip_prefix('-') {
        Some(rest) => (rest, true),
        None => (text, false),
    };
    let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, "00"));
    if !digits(whole) || !digits(fraction) {
        return Err(AmountError::NotANumber);
    }
    if negative {
        return Err(AmountError::Negative);
    }
    if fraction.len() > 2 {
        return Err(AmountError::FractionalCents);
    }
    let whole = whole.trim_start_matches('0');
    // More than 7 significant digits of dollars is over the maximum: stop before parsing.
    if whole.len() > 7 {
        return Err(AmountError::TooLarge);
    }
    let dollars: i64 = whole.parse().unwrap_or(0);
    let cents: i64 = format!("{fraction:0<2}").parse().unwrap_or(0);
    match dollars * 100 + cents {
        0 => Err(AmountError::Zero),
        total if total > MAX_AMOUNT_CENTS => Err(AmountError::TooLarge),
        total => Ok(total),
    }
}

#[cfg(test)]
mod tests {
    use super::{AmountError, MAX_AMOUNT_CENTS, format_cents, parse_amount};

    #[test]
    fn formats_cents() {
        assert_eq!(format_cents(12550), "$125.50");
        assert_eq!(format_cents(5), "$0.05");
        assert_eq!(format_cents(-100), "-$1.00");
    }

    #[test]
    fn parses_amounts_into_cents() {
        for (raw, cents) in [
            ("125.50", 12550),
            ("125.5", 12550),
            ("125", 12500),
            (" 0.01 ", 1),
            ("007.10", 710),
            ("1000000", MAX_AMOUNT_CENTS),
            ("1000000.00", MAX_AMOUNT_CENTS),
        ] {
            assert_eq!(parse_amount(raw), Ok(cents), "{raw:?}");
        }
    }

    #[test]
    fn refuses_anything_else_with_a_reason() {
        use AmountError::*;
        let huge = "9".repeat(400);
        for (raw, error) in [
            ("", Empty),
            ("   ", Empty),
            ("abc", NotANumber),
            ("12a", NotANumber),
            ("1e3", NotANumber),
            ("1,000", NotANumber),
            ("$5", NotANumber),
            ("+5", NotANumber),
            (".5", NotANumber),
            ("5.", NotANumber),
            ("1.2.3", NotANumber),
            ("NaN", NotANumber),
            ("-5", Negative),
            ("-0.01", Negative),
            ("0", Zero),
            ("0.00", Zero),
            ("000", Zero),
            ("12.345", FractionalCents),
            ("0.001", FractionalCents),
            ("1000000.01", TooLarge),
            ("10000000", TooLarge),
            ("99999999999999999999999", TooLarge),
            (huge.as_str(), TooLarge),
        ] {
            assert_eq!(parse_amount(raw), Err(error), "{raw:?}");
        }
    }
}
