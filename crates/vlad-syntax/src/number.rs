//! Numerals: reading them (`12`, `-.5`, `1e3`, `#x1F`, `+inf.0`) and printing reals the way the
//! reference implementation does: shortest round-trip digits, integral values without a fraction,
//! exponent notation for very small and very large magnitudes (`8.246324826140356e-6`).
//!
//! `parse_number` is the one definition of a numeral: the reader uses it for source text and
//! `read-real` for its input (`numeral`). Compiled programs read their input with a C
//! transcription of it (`vl_parse_number` in `crates/vlad-backend-c/src/runtime.c`), which the
//! tests run against this one on the same inputs.

/// Parses a numeral token; `None` if the token is not a number (then it is a symbol).
///
/// The grammar, case-insensitive: a radix prefix `#b`, `#o`, `#d` or `#x`, then (for all but
/// `#d`) an optional sign and one or more digits of the radix, accumulated left to right in
/// double precision; or `+inf.0`, `-inf.0`, `+nan.0`, `-nan.0`; or a decimal: an optional
/// sign, digits with an optional `.`, at least one digit, and an optional exponent (`e`, an
/// optional sign, one or more digits), rounded to the nearest double.
pub fn parse_number(tok: &str) -> Option<f64> {
    let lower = tok.to_ascii_lowercase();
    let (radix, body) = match lower.get(..2) {
        Some("#b") => (2, &lower[2..]),
        Some("#o") => (8, &lower[2..]),
        Some("#d") => (10, &lower[2..]),
        Some("#x") => (16, &lower[2..]),
        _ => (10, &lower[..]),
    };
    if radix != 10 {
        let (neg, digits) = match body.as_bytes().first() {
            Some(b'-') => (true, &body[1..]),
            Some(b'+') => (false, &body[1..]),
            _ => (false, body),
        };
        if digits.is_empty() {
            return None;
        }
        let mut v = 0f64;
        for c in digits.chars() {
            v = v * radix as f64 + c.to_digit(radix)? as f64;
        }
        return Some(if neg { -v } else { v });
    }
    match body {
        "+inf.0" => return Some(f64::INFINITY),
        "-inf.0" => return Some(f64::NEG_INFINITY),
        "+nan.0" | "-nan.0" => return Some(f64::NAN),
        _ => {}
    }
    // Decimal: sign? digits* (. digits*)? (e sign? digits+)?, with at least one digit.
    let b = body.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let mut digits = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
        digits += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return None;
    }
    if i < b.len() && b[i] == b'e' {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let s = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if s == i {
            return None;
        }
    }
    if i != b.len() {
        return None;
    }
    body.parse::<f64>().ok()
}

/// The bytes that separate the numerals of `read-real`'s input: ASCII space, tab, newline,
/// vertical tab, form feed and carriage return (C's `isspace`).
pub fn is_input_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// A token of `read-real`'s input as a real: `parse_number` of its text (a token that is not
/// ASCII is not a numeral).
pub fn numeral(tok: &[u8]) -> Option<f64> {
    if !tok.is_ascii() {
        return None;
    }
    parse_number(std::str::from_utf8(tok).ok()?)
}

/// How an input token that is not a numeral is shown in `read-real`'s error: its first
/// `SHOWN_BYTES` bytes, those outside printable ASCII as `\xHH`, then `...` if it is longer.
pub fn show_token(tok: &[u8]) -> String {
    let mut s = String::new();
    for &b in tok.iter().take(SHOWN_BYTES) {
        if (0x21..0x7f).contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\x{b:02X}"));
        }
    }
    if tok.len() > SHOWN_BYTES {
        s.push_str("...");
    }
    s
}

/// The most bytes of a bad token `show_token` shows.
pub const SHOWN_BYTES: usize = 40;

pub use vlad_core::number::format_real;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numerals() {
        assert_eq!(parse_number(".5880026035475675"), Some(0.5880026035475675));
        assert_eq!(parse_number("-3"), Some(-3.0));
        assert_eq!(parse_number("1e3"), Some(1000.0));
        assert_eq!(parse_number("1.5E-2"), Some(0.015));
        assert_eq!(parse_number("#b101"), Some(5.0));
        assert_eq!(parse_number("#x1F"), Some(31.0));
        assert_eq!(parse_number("#o17"), Some(15.0));
        assert_eq!(parse_number("#d10"), Some(10.0));
        assert_eq!(parse_number("#x-a"), Some(-10.0));
        for s in [
            "-", "+", ".", "...", "1e", "e3", "abc", "1.2.3", "#b102", "#x", "1-2",
        ] {
            assert_eq!(parse_number(s), None, "{s}");
        }
        assert!(parse_number("+nan.0").unwrap().is_nan());
        assert!(parse_number("-NaN.0").unwrap().is_nan());
        assert_eq!(parse_number("#X1f"), Some(31.0));
        assert_eq!(parse_number("#d+inf.0"), Some(f64::INFINITY));
        // Not numerals, though other readers of numbers take them.
        for s in [
            "nan", "inf", "infinity", "0x10", "1_000", " 1", "1 ", "#x1.5", "#b", "1e5.0",
        ] {
            assert_eq!(parse_number(s), None, "{s}");
        }
    }

    #[test]
    fn long_numerals_are_rounded_once() {
        let digits = "1".repeat(300);
        assert_eq!(parse_number(&digits), Some(1.111_111_111_111_111_1e299));
        let tiny = format!("0.{}1", "0".repeat(300));
        assert_eq!(parse_number(&tiny), Some(1e-301));
        assert_eq!(
            parse_number(&format!("{digits}e-600")),
            Some(1.111_111_111_111_111_1e-301)
        );
    }

    #[test]
    fn input_tokens() {
        assert_eq!(numeral(b"2.5"), Some(2.5));
        assert_eq!(numeral(b"1\x002"), None);
        assert_eq!(numeral(b"\xcf\x80"), None);
        assert_eq!(show_token(b"a\x00b\xff"), "a\\x00b\\xFF");
        let long = show_token(&[b'x'; 100]);
        assert_eq!(long, format!("{}...", "x".repeat(SHOWN_BYTES)));
    }

    #[test]
    fn printing() {
        assert_eq!(format_real(3.0), "3");
        assert_eq!(format_real(-12.0), "-12");
        assert_eq!(format_real(0.25), "0.25");
        assert_eq!(format_real(8.246324826140356e-6), "8.246324826140356e-6");
        assert_eq!(format_real(0.2071918746486116), "0.2071918746486116");
        assert_eq!(format_real(1e21), "1e21");
        assert_eq!(format_real(123456.0), "123456");
        assert_eq!(format_real(0.0001), "0.0001");
        assert_eq!(format_real(f64::INFINITY), "+inf.0");
        for x in [0.1, 1.0 / 3.0, 2.0f64.sqrt(), 1e-300, 6.02e23, -7.5e-7] {
            assert_eq!(parse_number(&format_real(x)), Some(x));
        }
    }
}
