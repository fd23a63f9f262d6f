//! How reals print: the one output format of the evaluator, the flow analysis's dumps and the
//! compiled code's constants (reading numerals is the syntax crate's job).

/// Prints a real in VLAD's output format.
pub fn format_real(x: f64) -> String {
    if x.is_nan() {
        return "+nan.0".into();
    }
    if x.is_infinite() {
        return if x > 0.0 {
            "+inf.0".into()
        } else {
            "-inf.0".into()
        };
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let exp = x.abs().log10().floor();
    if (-5.0..21.0).contains(&exp) {
        // Shortest round-trip digits; Rust prints integral values without a fraction.
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}
