//! The tag transforms of Core (paper 001 §4.1): `bundle`, `perturb` and `sensitize` of a closure
//! give a closure over the transformed lambda expression. The transform is the same structural
//! map for every tag: binders and variable references get the tag pushed (alpha conversion to the
//! tagged variable), `cons` builds pairs carrying the tag, and constants and primitives are lifted
//! through it (`j*` of a constant in forward code, `perturb` of it in perturbation code, ...).
//!
//! Transforms are memoised on hash-consed ids and remember their origin, so the inverse
//! (`primal`, `tangent`, `unperturb`, `unsensitize`) is a table look-up.

use crate::expr::{Arena, Expr, ExprId, Pattern};
use crate::{Tag, Tags, Var};
use std::fmt;
use std::rc::Rc;

/// Why a transform could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransformError {
    /// More nested AD levels than [`crate::tags::MAX_TAG_DEPTH`].
    TooDeep,
    /// `Arena::stop` said to stop (a compile-time budget is spent).
    Stopped,
}

impl fmt::Display for TransformError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransformError::TooDeep => write!(
                f,
                "derivatives are nested more than {} levels deep",
                crate::tags::MAX_TAG_DEPTH
            ),
            TransformError::Stopped => write!(f, "the transform was stopped (its budget is spent)"),
        }
    }
}

pub(crate) fn push(tags: Tags, tag: Tag) -> Result<Tags, TransformError> {
    tags.push(tag).ok_or(TransformError::TooDeep)
}

pub(crate) fn tag_var(v: Var, tag: Tag) -> Result<Var, TransformError> {
    Ok(Var {
        id: v.id,
        tags: push(v.tags, tag)?,
    })
}

/// The pattern with every binder and every matched pair tagged.
pub fn tag_pattern(p: &Pattern, tag: Tag) -> Result<Pattern, TransformError> {
    Ok(match p {
        Pattern::Var(v) => Pattern::Var(tag_var(*v, tag)?),
        Pattern::Const(d, t) => Pattern::Const(d.clone(), push(*t, tag)?),
        Pattern::Cons(t, a, b) => Pattern::Cons(
            push(*t, tag)?,
            Rc::new(tag_pattern(a, tag)?),
            Rc::new(tag_pattern(b, tag)?),
        ),
    })
}

impl Arena {
    /// The `tag`-transform of expression `e` (memoised). The transform is a bijection: see
    /// [`Arena::untransform`].
    pub fn transform(&mut self, e: ExprId, tag: Tag) -> Result<ExprId, TransformError> {
        if let Some(t) = self.transformed.get(&(e, tag)) {
            return Ok(*t);
        }
        // Post-order over the DAG with an explicit stack: transformed code can be large.
        let mut stack = vec![(e, false)];
        while let Some((x, ready)) = stack.pop() {
            if self.transformed.contains_key(&(x, tag)) {
                continue;
            }
            if !ready {
                stack.push((x, true));
                for k in self.children(x) {
                    if !self.transformed.contains_key(&(k, tag)) {
                        stack.push((k, false));
                    }
                }
                continue;
            }
            self.keep_going()?;
            let t = |a: &Arena, k: ExprId| a.transformed[&(k, tag)];
            let new = match self.get(x).clone() {
                Expr::Var(v) => Expr::Var(tag_var(v, tag)?),
                Expr::Const(d, ts) => Expr::Const(d, push(ts, tag)?),
                Expr::Prim(p, ts) => Expr::Prim(p, push(ts, tag)?),
                Expr::Lambda(p, b, sp) => {
                    Expr::Lambda(Rc::new(tag_pattern(&p, tag)?), t(self, b), sp)
                }
                Expr::App(f, a, sp) => Expr::App(t(self, f), t(self, a), sp),
                Expr::Cons(ts, a, b) => Expr::Cons(push(ts, tag)?, t(self, a), t(self, b)),
                Expr::Letrec(bs, body) => {
                    let mut nbs = Vec::with_capacity(bs.len());
                    for (v, l) in bs.iter() {
                        nbs.push((tag_var(*v, tag)?, t(self, *l)));
                    }
                    Expr::Letrec(nbs.into(), t(self, body))
                }
                Expr::Let(p, a, b, sp) => {
                    Expr::Let(Rc::new(tag_pattern(&p, tag)?), t(self, a), t(self, b), sp)
                }
                Expr::If(c, a, b) => Expr::If(t(self, c), t(self, a), t(self, b)),
            };
            let id = self.mk(new);
            self.transformed.insert((x, tag), id);
            self.origin.entry(id).or_insert((tag, x));
        }
        Ok(self.transformed[&(e, tag)])
    }

    /// `lam` with its parameter variable renamed to carry `tag`, so the lambda reads as code of
    /// that level: the transformed primitives of the prelude are written at base level but are
    /// `tag` values (paper 003 §4: the tag on the argument variable marks a transformed lambda).
    pub fn retag_parameter(&mut self, lam: ExprId, tag: Tag) -> Result<ExprId, TransformError> {
        let Expr::Lambda(p, body, sp) = self.get(lam).clone() else {
            return Ok(lam);
        };
        let Pattern::Var(x) = &*p else { return Ok(lam) };
        let to = tag_var(*x, tag)?;
        let level = x.tags;
        let body = self.rename(body, *x, to);
        let out = self.mk(Expr::Lambda(Rc::new(Pattern::Var(to)), body, sp));
        self.base_level.insert(out, level);
        Ok(out)
    }

    /// `e` with every reference to `from` replaced by `to` (binders are unique, so nothing can
    /// be captured).
    fn rename(&mut self, e: ExprId, from: Var, to: Var) -> ExprId {
        if !self.free_vars(e).contains(&from) {
            return e;
        }
        let new = match self.get(e).clone() {
            Expr::Var(v) if v == from => Expr::Var(to),
            Expr::Lambda(p, b, sp) => Expr::Lambda(p, self.rename(b, from, to), sp),
            Expr::App(f, a, sp) => {
                Expr::App(self.rename(f, from, to), self.rename(a, from, to), sp)
            }
            Expr::Cons(t, a, b) => {
                Expr::Cons(t, self.rename(a, from, to), self.rename(b, from, to))
            }
            Expr::Letrec(bs, body) => {
                let bs: Vec<(Var, ExprId)> = bs
                    .iter()
                    .map(|(v, l)| (*v, self.rename(*l, from, to)))
                    .collect();
                Expr::Letrec(bs.into(), self.rename(body, from, to))
            }
            Expr::Let(p, a, b, sp) => {
                Expr::Let(p, self.rename(a, from, to), self.rename(b, from, to), sp)
            }
            Expr::If(c, a, b) => Expr::If(
                self.rename(c, from, to),
                self.rename(a, from, to),
                self.rename(b, from, to),
            ),
            other => other,
        };
        self.mk(new)
    }

    /// The transform that produced `e`, if any: its tag and the original expression.
    pub fn origin_of(&self, e: ExprId) -> Option<&(Tag, ExprId)> {
        self.origin.get(&e)
    }

    /// If `e` is the `tag`-transform of some expression, that expression.
    pub fn untransform(&self, e: ExprId, tag: Tag) -> Option<ExprId> {
        match self.origin.get(&e) {
            Some((t, orig)) if *t == tag => Some(*orig),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Datum, Span};

    #[test]
    fn transform_is_memoised_and_invertible() {
        let mut a = Arena::new();
        let x = a.fresh_var("x");
        let vx = a.mk(Expr::Var(x));
        let one = a.mk(Expr::Const(Datum::Real(1.0), Tags::EMPTY));
        let c = a.mk(Expr::Cons(Tags::EMPTY, vx, one));
        let lam = a.mk(Expr::Lambda(Rc::new(Pattern::Var(x)), c, Span::NONE));
        let f = a.transform(lam, Tag::Forward).unwrap();
        assert_eq!(a.transform(lam, Tag::Forward).unwrap(), f);
        assert_ne!(f, lam);
        assert_eq!(a.untransform(f, Tag::Forward), Some(lam));
        assert_eq!(a.untransform(f, Tag::Perturbation), None);
        let Expr::Lambda(p, body, _) = a.get(f).clone() else {
            panic!("not a lambda")
        };
        let fx = Var {
            id: x.id,
            tags: Tags::EMPTY.push(Tag::Forward).unwrap(),
        };
        assert_eq!(*p, Pattern::Var(fx));
        let Expr::Cons(ts, _, k) = a.get(body).clone() else {
            panic!("not a cons")
        };
        assert_eq!(ts.top(), Some(Tag::Forward));
        assert_eq!(
            a.get(k),
            &Expr::Const(Datum::Real(1.0), Tags::EMPTY.push(Tag::Forward).unwrap())
        );
    }

    /// A lambda whose body nests `n` applications: `(lambda (x) (x (x ... (x 1))))`.
    fn deep_lambda(a: &mut Arena, n: usize) -> ExprId {
        let x = a.fresh_var("x");
        let vx = a.mk(Expr::Var(x));
        let mut body = a.mk(Expr::Const(Datum::Real(1.0), Tags::EMPTY));
        for _ in 0..n {
            body = a.mk(Expr::App(vx, body, Span::NONE));
        }
        a.mk(Expr::Lambda(Rc::new(Pattern::Var(x)), body, Span::NONE))
    }

    /// `Arena::stop` stops a transform of large code part of the way through, both kinds,
    /// asked every `STOP_INTERVAL` steps; what was done stays valid: once `stop` is unset the
    /// transform completes, the forward one as if it had never been stopped (the reverse one
    /// names its temporaries afresh).
    #[test]
    fn transforms_stop_when_told() {
        use std::cell::Cell;
        for reverse in [false, true] {
            let mut a = Arena::new();
            let lam = deep_lambda(&mut a, 600);
            let asked = Rc::new(Cell::new(0));
            let counter = asked.clone();
            a.stop = Some(Rc::new(move || {
                counter.set(counter.get() + 1);
                true
            }));
            let run = |a: &mut Arena| {
                if reverse {
                    a.reverse_transform(lam, &[], &[])
                } else {
                    a.transform(lam, Tag::Forward)
                }
            };
            assert_eq!(
                run(&mut a),
                Err(TransformError::Stopped),
                "reverse: {reverse}"
            );
            assert_eq!(asked.get(), 1, "stopped at the first question");
            a.stop = None;
            let done = run(&mut a).expect("unbounded, it completes");
            assert!(matches!(a.get(done), Expr::Lambda(..)));
            if !reverse {
                let mut fresh = Arena::new();
                let lam2 = deep_lambda(&mut fresh, 600);
                let expected = fresh.transform(lam2, Tag::Forward).unwrap();
                assert!(a.show(done) == fresh.show(expected));
            }
        }
    }

    #[test]
    fn free_variable_order_survives_transform() {
        let mut a = Arena::new();
        let x = a.fresh_var("x");
        let y = a.fresh_var("y");
        let z = a.fresh_var("z");
        let (vx, vy) = (a.mk(Expr::Var(x)), a.mk(Expr::Var(y)));
        let app = a.mk(Expr::App(vy, vx, Span::NONE));
        let lam = a.mk(Expr::Lambda(Rc::new(Pattern::Var(z)), app, Span::NONE));
        let f = a.transform(lam, Tag::Perturbation).unwrap();
        let orig: Vec<u32> = a.free_vars(lam).iter().map(|v| v.id).collect();
        let tr: Vec<u32> = a.free_vars(f).iter().map(|v| v.id).collect();
        assert_eq!(orig, tr);
    }
}
