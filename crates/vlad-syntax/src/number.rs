//! Numerals: reading them (`12`, `-.5`, `1e3`, `#x1F`, `+inf.0`) and printing reals the way the
//! reference implementation does: shortest round-trip digits, integral values without a fraction,
//! exponent notation for very small and very large magnitudes (`8.246324826140356e-6`).

/// Parses a numeral token; `None` if the token is not a number (then it is a symbol).
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
