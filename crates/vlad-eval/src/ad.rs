//! First-class AD operators on values (placeholder until forward mode lands).

use crate::value::Value;
use crate::{EvalError, Evaluator};
use vlad_core::{Prim, Span, Tag, Tags};

/// The transformed versions of primitives, written in VLAD.
pub struct Prelude;

/// Structural equality of first-order data (constant patterns).
pub fn equal_data(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Nil, Value::Nil) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Real(x), Value::Real(y)) => x == y,
        (Value::Pair(p), Value::Pair(q)) => {
            p.tags == q.tags && equal_data(&p.car, &q.car) && equal_data(&p.cdr, &q.cdr)
        }
        (Value::Bundle(p), Value::Bundle(q)) => {
            equal_data(&p.primal, &q.primal) && equal_data(&p.tangent, &q.tangent)
        }
        (Value::Tagged(p), Value::Tagged(q)) => p.tag == q.tag && equal_data(&p.value, &q.value),
        _ => false,
    }
}

pub(crate) fn split_forward_shallow(v: &Value) -> (Value, Value) {
    (v.clone(), v.clone())
}

pub(crate) fn untag_shallow(v: &Value, _tag: Tag) -> Value {
    v.clone()
}

impl Evaluator {
    pub(crate) fn lift(&mut self, v: Value, tags: Tags, span: Span) -> Result<Value, EvalError> {
        if tags.is_empty() {
            return Ok(v);
        }
        Err(EvalError::new(span, "AD is not implemented yet"))
    }

    pub(crate) fn apply_ad_prim(
        &mut self,
        p: Prim,
        _arg: Value,
        span: Span,
    ) -> Result<Value, EvalError> {
        Err(EvalError::new(
            span,
            format!("`{}` is not implemented yet", p.name()),
        ))
    }
}
