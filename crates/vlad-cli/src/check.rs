//! `vlad check`: conformance files of `expr ===> expected` assertions.
//!
//! Each assertion runs the definitions seen so far plus its expression as one program. What the
//! program printed (its writes, then its value) is read back as data and compared with the
//! expectation: numbers within 1e-10 absolute, everything else structurally. Expectations may be
//! a datum, `(or e ...)`, `(error "regex")`, `(multiform p ... final)` or
//! `(with-inputs (n ...) e)`. With `--print`, what each program printed goes to standard
//! output too, so that one evaluation serves both the assertions and a comparison of the
//! output (tests/native.rs does this for the examples that take long in the evaluator).

use regex::Regex;
use std::path::PathBuf;
use vlad_eval::{Input, Output};
use vlad_syntax::reader::read;
use vlad_syntax::{Diagnostic, Sexp, SexpKind};

/// Absolute tolerance for numbers.
const TOLERANCE: f64 = 1e-10;

/// What running one assertion's program gave.
enum Outcome {
    /// The printed items (writes, then the value).
    Printed(Vec<Sexp>),
    Failed(String),
}

fn numbers_match(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= TOLERANCE
}

/// Structural equality of data with numeric tolerance.
pub fn data_match(a: &Sexp, b: &Sexp) -> bool {
    use SexpKind::*;
    match (&a.kind, &b.kind) {
        (Real(x), Real(y)) => numbers_match(*x, *y),
        (Symbol(x), Symbol(y)) => x == y,
        (Bool(x), Bool(y)) => x == y,
        (Str(x), Str(y)) => x == y,
        (List(x), List(y)) | (Vector(x), Vector(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| data_match(p, q))
        }
        (Dotted(x, xt), Dotted(y, yt)) => {
            x.len() == y.len()
                && x.iter().zip(y).all(|(p, q)| data_match(p, q))
                && data_match(xt, yt)
        }
        // A quoted expectation `'x` matches x.
        (List(q), _) if q.len() == 2 && q[0].symbol() == Some("quote") => data_match(&q[1], b),
        _ => false,
    }
}

/// Does `outcome` satisfy `expected`?
fn satisfies(expected: &Sexp, outcome: &Outcome) -> Result<bool, String> {
    if let Some(items) = expected.list() {
        match items.first().and_then(|h| h.symbol()) {
            Some("or") => {
                for alt in &items[1..] {
                    if satisfies(alt, outcome)? {
                        return Ok(true);
                    }
                }
                return Ok(false);
            }
            Some("error") => {
                let [_, Sexp {
                    kind: SexpKind::Str(re),
                    ..
                }] = items
                else {
                    return Err("`(error \"regex\")` takes one string".into());
                };
                let re = Regex::new(re).map_err(|e| format!("bad regex in expectation: {e}"))?;
                return Ok(matches!(outcome, Outcome::Failed(m) if re.is_match(m)));
            }
            Some("multiform") => {
                return Ok(match outcome {
                    Outcome::Printed(got) => {
                        got.len() == items.len() - 1
                            && got.iter().zip(&items[1..]).all(|(g, e)| data_match(e, g))
                    }
                    Outcome::Failed(_) => false,
                });
            }
            _ => {}
        }
    }
    Ok(match outcome {
        Outcome::Printed(got) => got.len() == 1 && data_match(expected, &got[0]),
        Outcome::Failed(_) => false,
    })
}

fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Printed(items) if items.len() == 1 => items[0].to_string(),
        Outcome::Printed(items) => {
            format!(
                "(multiform {})",
                items
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        }
        Outcome::Failed(m) => format!("error: {m}"),
    }
}

/// Splits `(with-inputs (n ...) e)` into its numbers and inner expectation.
fn inputs_of(expected: &Sexp) -> Result<(Vec<f64>, &Sexp), String> {
    if expected.is_form("with-inputs") {
        let items = expected.list().expect("form");
        let (Some(nums), Some(inner)) = (items.get(1).and_then(|s| s.list()), items.get(2)) else {
            return Err(
                "`(with-inputs (n ...) expected)` needs a list of numbers and an expectation"
                    .into(),
            );
        };
        let mut v = Vec::new();
        for n in nums {
            match n.kind {
                SexpKind::Real(r) => v.push(r),
                _ => return Err(format!("with-inputs: `{n}` is not a number")),
            }
        }
        return Ok((v, inner));
    }
    Ok((vec![], expected))
}

pub fn check(
    source: &crate::Source,
    include: &[PathBuf],
    max_steps: Option<u64>,
    engine: crate::Engine,
    print: bool,
) -> u8 {
    let (sources, program, mut ev) = match crate::prepare(source, include, max_steps) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let exprs = program.exprs;
    let (mut passed, mut failed) = (0usize, 0usize);
    for te in exprs {
        let expected = te.expected.as_ref();
        let (inputs, inner) = match expected.map(inputs_of).transpose() {
            Ok(Some((i, e))) => (i, Some(e)),
            Ok(None) => (vec![], None),
            Err(m) => {
                failed += 1;
                eprint!("{}", Diagnostic::new(te.span, m).render(&sources));
                continue;
            }
        };
        let (out, buffer) = Output::buffer();
        ev.output = out;
        ev.input = Input::from_numbers(inputs);
        ev.steps = 0;
        let outcome = match &te.core {
            Err(d) => Outcome::Failed(d.message.clone()),
            Ok(core) => match crate::evaluate(&mut ev, *core, engine, max_steps) {
                Err(e) => Outcome::Failed(crate::eval_diagnostic(&e, &sources).message),
                Ok(v) => {
                    let mut text = buffer.borrow().clone();
                    text.push_str(&ev.render(&v));
                    if print {
                        if let Err(code) = crate::write_stdout(&format!("{text}\n")) {
                            return code;
                        }
                    }
                    match read(u32::MAX - 1, &text) {
                        Ok(items) => Outcome::Printed(items),
                        Err(d) => Outcome::Failed(format!(
                            "output is not readable data ({}): {text}",
                            d.message
                        )),
                    }
                }
            },
        };
        let verdict = match inner {
            None => Ok(!matches!(outcome, Outcome::Failed(_))),
            Some(exp) => satisfies(exp, &outcome),
        };
        match verdict {
            Ok(true) => passed += 1,
            Ok(false) => {
                failed += 1;
                let msg = match expected {
                    Some(e) => format!(
                        "assertion failed\n  expected: {e}\n       got: {}",
                        describe(&outcome)
                    ),
                    None => format!("expression failed: {}", describe(&outcome)),
                };
                eprint!("{}", Diagnostic::new(te.span, msg).render(&sources));
            }
            Err(m) => {
                failed += 1;
                eprint!("{}", Diagnostic::new(te.span, m).render(&sources));
            }
        }
    }
    if let Err(code) = crate::write_stdout(&format!("{passed} passed, {failed} failed\n")) {
        return code.max(u8::from(failed > 0));
    }
    u8::from(failed > 0)
}
