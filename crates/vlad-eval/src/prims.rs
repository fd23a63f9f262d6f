//! The primitives: arithmetic, comparisons, predicates, I/O, and dispatch of the AD operators to
//! `ad`. Primitives take one argument like every procedure: binary ones a pair.
//!
//! Base primitives work on untagged data only. Arithmetic on AD values happens in transformed
//! code, where a primitive reference is lifted to its forward or reverse version (`ad`).

use crate::value::Value;
use crate::{EvalError, Evaluator};
use vlad_core::{Prim, Span, Tag};

/// What applying a primitive produced: a value, or a procedure to call in its place (so
/// `if-procedure` keeps tail calls proper).
pub enum Outcome {
    Value(Value),
    TailCall(Value, Value),
}

/// The two components of an untagged pair.
pub fn two(arg: &Value) -> Option<(&Value, &Value)> {
    match arg {
        Value::Pair(p) if p.tags.is_empty() => Some((&p.car, &p.cdr)),
        _ => None,
    }
}

/// The error of a call of `if-procedure` or `checkpoint` whose argument is not of the shape
/// it takes (the executor of the specialised program reports the same).
pub fn malformed_call(p: Prim, arg: &Value) -> String {
    format!("{}{}", p.malformed_call_head(), arg.describe())
}

fn real(v: &Value) -> Option<f64> {
    match v {
        Value::Real(r) => Some(*r),
        _ => None,
    }
}

fn two_reals(p: Prim, arg: &Value) -> Result<(f64, f64), String> {
    if let Some((a, b)) = two(arg) {
        if let (Some(x), Some(y)) = (real(a), real(b)) {
            return Ok((x, y));
        }
        return Err(format!(
            "`{}` takes two reals, got {} and {}",
            p.name(),
            a.describe(),
            b.describe()
        ));
    }
    Err(format!(
        "`{}` takes two reals, got {}",
        p.name(),
        arg.describe()
    ))
}

fn one_real(p: Prim, arg: &Value) -> Result<f64, String> {
    real(arg).ok_or_else(|| format!("`{}` takes a real, got {}", p.name(), arg.describe()))
}

/// The base (untagged) real function of an arithmetic primitive (`Prim::arith`).
pub fn arith(p: Prim, x: f64, y: f64) -> f64 {
    p.arith(x, y)
}

/// A comparison of reals (`Prim::compare`).
pub fn compare(p: Prim, x: f64, y: f64) -> bool {
    p.compare(x, y)
}

fn top_tag_is(v: &Value, tag: Tag) -> bool {
    v.tags().top() == Some(tag)
}

impl Evaluator {
    pub(crate) fn apply_prim(
        &mut self,
        p: Prim,
        arg: Value,
        span: Span,
    ) -> Result<Outcome, EvalError> {
        let e = |m: String| EvalError::new(span, m);
        if let Prim::Build | Prim::Ifold | Prim::IfoldTape = p {
            // Defined in VLAD (a loop calling the argument procedure): run that definition.
            let f = self.array_definition(p)?;
            return Ok(Outcome::TailCall(f, arg));
        }
        // The array primitives look through lazy sensitivities themselves (forcing only what
        // they need).
        if let Some(v) = self.apply_array_prim(p, &arg, span)? {
            return Ok(Outcome::Value(v));
        }
        // A lazy zero is what this one asks about: seen before it would be computed below.
        if p == Prim::IsLazyZero {
            return Ok(Outcome::Value(Value::Bool(matches!(arg, Value::Zero(_)))));
        }
        // Lazy zero sensitivities are computed before a primitive inspects its argument (the AD
        // operators handle them themselves).
        // (Only the top two levels are looked at: that is where a primitive's operands are;
        // `write` materialises the whole value when it prints it.)
        let arg = if !crate::ad::is_ad_prim(p) && shallow_zero(&arg) {
            self.materialize(&arg, span)?
        } else {
            arg
        };
        let v = match p {
            _ if p.is_binary_real() => {
                let (x, y) = two_reals(p, &arg).map_err(e)?;
                Value::Real(arith(p, x, y))
            }
            _ if p.is_unary_real() => Value::Real(arith(p, one_real(p, &arg).map_err(e)?, 0.0)),
            _ if p.is_comparison() => {
                let (x, y) = two_reals(p, &arg).map_err(e)?;
                Value::Bool(compare(p, x, y))
            }
            Prim::ZeroTangent => Value::Bool(matches!(arg, Value::Real(x) if x == 0.0)),
            Prim::IsZero => Value::Bool(one_real(p, &arg).map_err(e)? == 0.0),
            Prim::IsPositive => Value::Bool(one_real(p, &arg).map_err(e)? > 0.0),
            Prim::IsNegative => Value::Bool(one_real(p, &arg).map_err(e)? < 0.0),
            Prim::IsNull => Value::Bool(matches!(arg, Value::Nil)),
            Prim::IsBoolean => Value::Bool(matches!(arg, Value::Bool(_))),
            Prim::IsReal => Value::Bool(matches!(arg, Value::Real(_))),
            Prim::IsPair => Value::Bool(matches!(&arg, Value::Pair(p) if p.tags.is_empty())),
            Prim::IsProcedure => Value::Bool(arg.is_procedure()),
            Prim::IsPerturbation => Value::Bool(top_tag_is(&arg, Tag::Perturbation)),
            Prim::IsForward => Value::Bool(top_tag_is(&arg, Tag::Forward)),
            Prim::IsSensitivity => Value::Bool(top_tag_is(&arg, Tag::Sensitivity)),
            Prim::IsReverse => Value::Bool(top_tag_is(&arg, Tag::Reverse)),
            Prim::IfProcedure => {
                let parts = two(&arg).and_then(|(c, rest)| two(rest).map(|(t, f)| (c, t, f)));
                let Some((c, t, f)) = parts else {
                    return Err(e(malformed_call(p, &arg)));
                };
                let chosen = if c.is_true() { t.clone() } else { f.clone() };
                return Ok(Outcome::TailCall(chosen, Value::Nil));
            }
            Prim::Checkpoint => {
                let Some((f, x)) = two(&arg) else {
                    return Err(e(malformed_call(p, &arg)));
                };
                return Ok(Outcome::TailCall(f.clone(), x.clone()));
            }
            Prim::ReadReal => {
                if !matches!(arg, Value::Nil) {
                    return Err(e(format!(
                        "`read-real` takes no arguments, got {}",
                        arg.describe()
                    )));
                }
                self.output.flush();
                Value::Real(self.input.next_real().map_err(e)?)
            }
            Prim::Real => Value::Real(one_real(p, &arg).map_err(e)?),
            Prim::WriteReal => {
                let x = one_real(p, &arg).map_err(e)?;
                self.output
                    .line(&vlad_syntax::number::format_real(x))
                    .map_err(e)?;
                arg
            }
            Prim::Write => {
                let s = self.render(&arg);
                self.output.line(&s).map_err(e)?;
                arg
            }
            _ => return self.apply_ad_prim(p, arg, span).map(Outcome::Value),
        };
        Ok(Outcome::Value(v))
    }
}

/// Is there a lazy zero among the top two levels of `v`?
fn shallow_zero(v: &Value) -> bool {
    let is_zero = |v: &Value| matches!(v, Value::Zero(_) | Value::SensArray(_));
    match v {
        _ if is_zero(v) => true,
        Value::Pair(p) => {
            is_zero(&p.car)
                || is_zero(&p.cdr)
                || matches!(&p.cdr, Value::Pair(q) if is_zero(&q.car) || is_zero(&q.cdr))
        }
        _ => false,
    }
}
