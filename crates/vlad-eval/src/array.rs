//! Arrays (paper 002): the base primitives `get` and `array-length`, the internal primitives the
//! prelude builds `build` and `ifold` from, and the lazy array sensitivities of reverse mode.
//!
//! `build` and `ifold` are defined in VLAD (`ad::ARRAY_DEFINITIONS`): a loop that calls the
//! user's procedure, so their forward and reverse versions are simply the transforms of that
//! definition (paper 002 Fig. 6's D-Build and D-IFold fall out of the forward transform). What
//! the loops need from Rust is only structural: checking a count, and turning the list the loop
//! accumulated into an array (and back, for the sensitivity).
//!
//! Reverse-mode `get` must not build a one-hot array per read (paper 004 §6-7): its
//! backpropagator returns a lazy one-hot sensitivity (`SensNode::OneHot`, O(1)), `plus` of lazy
//! array sensitivities makes a lazy sum (O(1)), and the dense array is computed once, when
//! something looks inside (`force_sens`, O(n + number of contributions)).

use crate::value::{SensArray, SensNode, Value};
use crate::{EvalError, Evaluator};
use std::rc::Rc;
use vlad_core::{Prim, Span, Tag, Tags};

/// The real under any AD tags (a count in transformed code is a bundle or a tagged real).
fn scalar_primal(v: &Value) -> Option<f64> {
    let mut v = v;
    loop {
        match v {
            Value::Real(r) => return Some(*r),
            Value::Bundle(b) => v = &b.primal,
            Value::Tagged(t) => v = &t.value,
            _ => return None,
        }
    }
}

/// A real holding a non-negative integer (an index or a count).
fn natural(r: f64) -> Option<usize> {
    (r >= 0.0 && r.fract() == 0.0 && r < 2f64.powi(53)).then_some(r as usize)
}

impl Evaluator {
    /// The elements of an array in any of its forms, with its tags: lazy sensitivities and lazy
    /// zeros of arrays are computed. `None` if `v` is not an array.
    pub(crate) fn as_array(
        &mut self,
        v: &Value,
        span: Span,
    ) -> Result<Option<Rc<crate::value::Array>>, EvalError> {
        match v {
            Value::Array(a) => Ok(Some(a.clone())),
            Value::SensArray(a) => {
                let m = self.force_sens(a, span)?;
                self.as_array(&m, span)
            }
            Value::Zero(z) if matches!(z.of, Value::Array(_)) => {
                let m = self.force_zero(&z.of, span)?;
                self.as_array(&m, span)
            }
            _ => Ok(None),
        }
    }

    /// The dense value of a lazy array sensitivity, computed once and cached. Iterative: a sum
    /// can be a chain of a million contributions.
    pub(crate) fn force_sens(&mut self, s: &Rc<SensArray>, span: Span) -> Result<Value, EvalError> {
        if let SensNode::Forced(v) = &*s.node.borrow() {
            return Ok(v.clone());
        }
        let mut ones: Vec<(usize, Value)> = Vec::new();
        let mut dense: Vec<Rc<crate::value::Array>> = Vec::new();
        let mut of: Option<Value> = None;
        let mut work = vec![Value::SensArray(s.clone())];
        while let Some(v) = work.pop() {
            match &v {
                Value::SensArray(n) => match &*n.node.borrow() {
                    SensNode::Forced(d) => work.push(d.clone()),
                    SensNode::Sum(a, b) => {
                        work.push(b.clone());
                        work.push(a.clone());
                    }
                    SensNode::OneHot {
                        of: o,
                        index,
                        value,
                    } => {
                        ones.push((*index, value.clone()));
                        of.get_or_insert_with(|| o.clone());
                    }
                },
                Value::Array(a) => dense.push(a.clone()),
                Value::Zero(z) => {
                    of.get_or_insert_with(|| z.of.clone());
                }
                other => {
                    return Err(EvalError::new(
                        span,
                        format!(
                            "plus: the values do not have the same shape: an array and {}",
                            other.describe()
                        ),
                    ))
                }
            }
        }
        let mut elems: Vec<Value> = match (dense.first(), &of) {
            (Some(d), _) => d.elems.to_vec(),
            (None, Some(Value::Array(o))) => {
                o.elems.iter().map(|x| Value::zero_of(x.clone())).collect()
            }
            _ => unreachable!("a lazy sensitivity has a one-hot or a dense part"),
        };
        for d in dense.iter().skip(1) {
            for (e, x) in elems.iter_mut().zip(d.elems.iter()) {
                *e = self.plus(e, x, span)?;
            }
        }
        for (i, x) in ones {
            elems[i] = self.plus(&elems[i], &x, span)?;
        }
        let forced = Value::array(s.tags, elems);
        let old = std::mem::replace(&mut *s.node.borrow_mut(), SensNode::Forced(forced.clone()));
        crate::value::drop_node(old);
        Ok(forced)
    }

    /// The array primitives. `None` for other primitives.
    pub(crate) fn apply_array_prim(
        &mut self,
        p: Prim,
        arg: &Value,
        span: Span,
    ) -> Result<Option<Value>, EvalError> {
        let e = |m: String| EvalError::new(span, m);
        Ok(Some(match p {
            Prim::Get => {
                let Some((a, i)) = crate::prims::two(arg) else {
                    return Err(e(format!(
                        "`get` takes an array and an index, got {}",
                        arg.describe()
                    )));
                };
                let Some(arr) = self.as_array(a, span)? else {
                    return Err(e(format!("get: expected an array, got {}", a.describe())));
                };
                let Some(k) = (match i {
                    // Integers too large for an index are out of range, like any other.
                    Value::Real(r) if *r >= 0.0 && r.fract() == 0.0 => {
                        Some(natural(*r).unwrap_or(usize::MAX))
                    }
                    _ => None,
                }) else {
                    return Err(e(format!(
                        "get: the index must be a non-negative integer, got {}",
                        i.describe()
                    )));
                };
                match arr.elems.get(k) {
                    Some(x) => x.clone(),
                    None => {
                        return Err(e(format!(
                            "get: index {} is out of range for an array of length {}",
                            i.describe(),
                            arr.elems.len()
                        )))
                    }
                }
            }
            Prim::ArrayLength => match self.as_array(arg, span)? {
                Some(arr) => Value::Real(arr.elems.len() as f64),
                None => {
                    return Err(e(format!(
                        "array-length: expected an array, got {}",
                        arg.describe()
                    )))
                }
            },
            Prim::BuildLength | Prim::IfoldCount => {
                let (op, what) = if p == Prim::BuildLength {
                    ("build", "length")
                } else {
                    ("ifold", "count")
                };
                match scalar_primal(arg) {
                    Some(r) if natural(r).is_some() => {}
                    Some(r) if r >= 0.0 && r.fract() == 0.0 => {
                        return Err(e(format!(
                            "{op}: the {what} {} is too large",
                            arg.describe()
                        )))
                    }
                    _ => {
                        return Err(e(format!(
                            "{op}: the {what} must be a non-negative integer, got {}",
                            arg.describe()
                        )))
                    }
                }
                arg.clone()
            }
            Prim::ListToArrayRev => {
                // The list (x_{n-1} ... x_0) a `build` loop accumulated, with any tags, to the
                // array #(x_0 ... x_{n-1}) with the same tags.
                let tags = arg.tags();
                let mut elems = Vec::new();
                let mut l = arg.clone();
                loop {
                    match l {
                        Value::Pair(p) if p.tags == tags => {
                            elems.push(p.car.clone());
                            l = p.cdr.clone();
                        }
                        Value::Zero(z) => l = self.force_zero(&z.of, span)?,
                        _ => break,
                    }
                }
                elems.reverse();
                Value::array(tags, elems)
            }
            Prim::ArrayToListRev => {
                let Some(arr) = self.as_array(arg, span)? else {
                    return Err(e(format!(
                        "the sensitivity of an array made by `build` must be an array, got {}",
                        arg.describe()
                    )));
                };
                let mut acc = self.lift(Value::Nil, arr.tags, span)?;
                for x in arr.elems.iter() {
                    acc = Value::pair(arr.tags, x.clone(), acc);
                }
                acc
            }
            Prim::Dense => match arg {
                Value::SensArray(a) => self.force_sens(a, span)?,
                Value::Zero(z) if matches!(z.of, Value::Array(_)) => {
                    self.force_zero(&z.of, span)?
                }
                Value::Array(_) => arg.clone(),
                _ => {
                    return Err(e(format!(
                        "the sensitivity of an array made by `build` must be an array, got {}",
                        arg.describe()
                    )))
                }
            },
            Prim::OneHotSens => {
                // (a k s): the sensitivity of the reverse array `a` that is `s` at index k.
                let parts = crate::prims::two(arg)
                    .and_then(|(a, rest)| crate::prims::two(rest).map(|(k, s)| (a, k, s)));
                let Some((a, k, s)) = parts else {
                    return Err(e(format!("internal: bad one-hot {}", arg.describe())));
                };
                let (Value::Array(arr), Some(k)) = (a, scalar_primal(k).and_then(natural)) else {
                    return Err(e(format!("internal: bad one-hot {}", arg.describe())));
                };
                if arr.tags.top() != Some(Tag::Reverse) || k >= arr.elems.len() {
                    return Err(e(format!("internal: bad one-hot {}", arg.describe())));
                }
                if let Value::Zero(_) = s {
                    Value::zero_of(a.clone())
                } else {
                    let tags: Tags = arr.tags.pop().push(Tag::Sensitivity).expect("same depth");
                    Value::sens_array(
                        tags,
                        arr.elems.len(),
                        SensNode::OneHot {
                            of: a.clone(),
                            index: k,
                            value: s.clone(),
                        },
                    )
                }
            }
            _ => return Ok(None),
        }))
    }
}
