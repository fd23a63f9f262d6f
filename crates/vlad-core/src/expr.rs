//! Core expressions, hash-consed in an [`Arena`].
//!
//! Core is: variables, constants, primitives, one-parameter `lambda` (the parameter is a
//! destructuring pattern), application, binary `cons`, `letrec` of lambdas, and two derived forms
//! kept for speed and readable IR: `let` (a pattern binding, `((lambda p body) e)`) and `if` (
//! `(if-procedure c (lambda () a) (lambda () b))`). Every binder is alpha-converted by the
//! expander: a [`Var`] id names exactly one binding site in the source program.
//!
//! Hash-consing makes structurally equal expressions one [`ExprId`], so transforms can be memoised
//! on ids and the flow analysis can compare expressions in O(1). Nodes that can fail at run time
//! (applications, pattern bindings) carry their source [`Span`] in the node itself, so two
//! identical calls at different places stay distinct and errors name the right place.

use crate::{Datum, Prim, Span, Tags};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::rc::Rc;

/// A variable: a binding-site id plus the AD tags of the transforms applied to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Var {
    pub id: u32,
    pub tags: Tags,
}

/// A destructuring pattern (lambda parameters and `let` bindings).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// Binds the whole value.
    Var(Var),
    /// Matches only a value equal to the constant (lifted through the tags).
    Const(Datum, Tags),
    /// Matches a pair carrying exactly these tags.
    Cons(Tags, Rc<Pattern>, Rc<Pattern>),
}

impl Pattern {
    /// The variables this pattern binds, left to right.
    pub fn vars(&self, out: &mut Vec<Var>) {
        match self {
            Pattern::Var(v) => out.push(*v),
            Pattern::Const(..) => {}
            Pattern::Cons(_, a, b) => {
                a.vars(out);
                b.vars(out);
            }
        }
    }
}

/// Index of an expression in its [`Arena`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExprId(pub u32);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Expr {
    Var(Var),
    /// A constant, lifted through `Tags` (outermost first) by the AD operators when the code is a
    /// transformed copy: `forward` lifts by `j*`, `perturbation` by `perturb`, and so on.
    Const(Datum, Tags),
    /// A primitive, lifted through `Tags` like a constant.
    Prim(Prim, Tags),
    Lambda(Rc<Pattern>, ExprId, Span),
    App(ExprId, ExprId, Span),
    /// Pair construction; transformed code builds tagged pairs.
    Cons(Tags, ExprId, ExprId),
    /// Mutually recursive bindings; every right-hand side is a `Lambda`.
    Letrec(Rc<[(Var, ExprId)]>, ExprId),
    /// `(let ((pattern e)) body)`; the span is the binding's, for mismatch errors.
    Let(Rc<Pattern>, ExprId, ExprId, Span),
    If(ExprId, ExprId, ExprId),
}

/// The store of all Core expressions of one program, with variable names for printing and a
/// cache of free variables.
#[derive(Default)]
pub struct Arena {
    exprs: Vec<Expr>,
    ids: HashMap<Expr, ExprId>,
    free: Vec<Option<Rc<[Var]>>>,
    names: Vec<String>,
    /// Memo of the tag transforms: (expression, tag) -> transformed expression.
    pub(crate) transformed: HashMap<(ExprId, crate::Tag), ExprId>,
    /// Inverse of `transformed`, so `primal`, `unperturb`, ... can undo a transform.
    pub(crate) origin: HashMap<ExprId, (crate::Tag, ExprId)>,
    /// Code levels of lambdas whose parameter tags say otherwise (see `retag_parameter`).
    pub(crate) base_level: HashMap<ExprId, Tags>,
    /// Asked every `STOP_INTERVAL` steps of a transform (`transform`, `reverse_transform`):
    /// `true` stops it with `TransformError::Stopped`. A transform of code that is already
    /// large can take minutes and gigabytes (reverse mode nested eight deep), so a compile-time
    /// user with a budget (the flow analysis) sets it; the evaluator leaves it unset.
    pub stop: Option<Rc<dyn Fn() -> bool>>,
    /// Steps of transforms since `stop` was last asked.
    steps: u32,
}

/// How many steps of a transform (a node of `transform`, a binding of `reverse_transform`) pass
/// between two questions to `Arena::stop`.
const STOP_INTERVAL: u32 = 256;

impl Arena {
    pub fn new() -> Arena {
        Arena::default()
    }

    /// Creates a fresh variable (a new binding site) named `name` for printing.
    pub fn fresh_var(&mut self, name: &str) -> Var {
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        Var {
            id,
            tags: Tags::EMPTY,
        }
    }

    pub fn var_name(&self, v: Var) -> &str {
        self.names
            .get(v.id as usize)
            .map(|s| s.as_str())
            .unwrap_or("?")
    }

    /// `Err(TransformError::Stopped)` if a transform should stop now (`stop`, asked every
    /// `STOP_INTERVAL` calls).
    pub(crate) fn keep_going(&mut self) -> Result<(), crate::transform::TransformError> {
        self.steps += 1;
        if self.steps < STOP_INTERVAL {
            return Ok(());
        }
        self.steps = 0;
        match &self.stop {
            Some(stop) if stop() => Err(crate::transform::TransformError::Stopped),
            _ => Ok(()),
        }
    }

    /// Interns an expression.
    pub fn mk(&mut self, e: Expr) -> ExprId {
        if let Some(id) = self.ids.get(&e) {
            return *id;
        }
        let id = ExprId(self.exprs.len() as u32);
        self.exprs.push(e.clone());
        self.free.push(None);
        self.ids.insert(e, id);
        id
    }

    pub fn get(&self, id: ExprId) -> &Expr {
        &self.exprs[id.0 as usize]
    }

    pub fn len(&self) -> usize {
        self.exprs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.exprs.is_empty()
    }

    /// The free variables of `id`, sorted (by binding-site id, then tags), cached.
    ///
    /// The order matters: closure environments are laid out in it, and because every transform
    /// pushes the same tag on every variable, a transformed lambda's free variables come in the
    /// same order as the original's. That is what lets `bundle`, `primal`, `zero`, ... walk two
    /// closure environments in lock step.
    pub fn free_vars(&mut self, id: ExprId) -> Rc<[Var]> {
        if let Some(fv) = &self.free[id.0 as usize] {
            return fv.clone();
        }
        // Iterative post-order over the DAG so that deep programs cannot overflow the stack.
        let mut stack = vec![(id, false)];
        while let Some((e, children_done)) = stack.pop() {
            if self.free[e.0 as usize].is_some() {
                continue;
            }
            let kids = self.children(e);
            if !children_done {
                stack.push((e, true));
                for k in kids {
                    if self.free[k.0 as usize].is_none() {
                        stack.push((k, false));
                    }
                }
                continue;
            }
            let mut set: Vec<Var> = Vec::new();
            let fv_of = |a: &Arena, k: ExprId| a.free[k.0 as usize].clone().expect("child first");
            let mut bound: Vec<Var> = Vec::new();
            match self.get(e).clone() {
                Expr::Var(v) => set.push(v),
                Expr::Const(..) | Expr::Prim(..) => {}
                Expr::Lambda(p, b, _) => {
                    p.vars(&mut bound);
                    set.extend(fv_of(self, b).iter().copied());
                }
                Expr::App(f, a, _) => {
                    set.extend(fv_of(self, f).iter().copied());
                    set.extend(fv_of(self, a).iter().copied());
                }
                Expr::Cons(_, a, b) => {
                    set.extend(fv_of(self, a).iter().copied());
                    set.extend(fv_of(self, b).iter().copied());
                }
                Expr::Letrec(bs, body) => {
                    for (v, l) in bs.iter() {
                        bound.push(*v);
                        set.extend(fv_of(self, *l).iter().copied());
                    }
                    set.extend(fv_of(self, body).iter().copied());
                }
                Expr::Let(p, x, body, _) => {
                    p.vars(&mut bound);
                    let body_fv: Vec<Var> = fv_of(self, body)
                        .iter()
                        .copied()
                        .filter(|v| !bound.contains(v))
                        .collect();
                    bound.clear();
                    set.extend(fv_of(self, x).iter().copied());
                    set.extend(body_fv);
                }
                Expr::If(c, a, b) => {
                    for k in [c, a, b] {
                        set.extend(fv_of(self, k).iter().copied());
                    }
                }
            }
            set.retain(|v| !bound.contains(v));
            set.sort();
            set.dedup();
            self.free[e.0 as usize] = Some(set.into());
        }
        self.free[id.0 as usize].clone().expect("computed")
    }

    /// The direct subexpressions of `id`.
    pub fn children(&self, id: ExprId) -> Vec<ExprId> {
        match self.get(id) {
            Expr::Var(_) | Expr::Const(..) | Expr::Prim(..) => vec![],
            Expr::Lambda(_, b, _) => vec![*b],
            Expr::App(f, a, _) => vec![*f, *a],
            Expr::Cons(_, a, b) => vec![*a, *b],
            Expr::Letrec(bs, body) => {
                let mut v: Vec<ExprId> = bs.iter().map(|(_, l)| *l).collect();
                v.push(*body);
                v
            }
            Expr::Let(_, x, b, _) => vec![*x, *b],
            Expr::If(c, a, b) => vec![*c, *a, *b],
        }
    }

    /// A readable S-expression rendering of `id` (for IR dumps and debugging).
    pub fn show(&self, id: ExprId) -> String {
        self.show_annotated(id, &|_| None)
    }

    /// `show`, with the text `note` gives for an application written after it as `@TEXT` (the
    /// specialised program's call targets).
    pub fn show_annotated(&self, id: ExprId, note: &dyn Fn(ExprId) -> Option<String>) -> String {
        let mut s = String::new();
        self.show_into(id, note, &mut s);
        s
    }

    fn show_var(&self, v: Var, s: &mut String) {
        let _ = write!(s, "{}_{}", self.var_name(v), v.id);
        for t in v.tags.iter() {
            let _ = write!(s, "^{}", &t.name()[..1]);
        }
    }

    fn show_tags(tags: Tags, s: &mut String) {
        for t in tags.iter() {
            let _ = write!(s, "{}:", t.name());
        }
    }

    fn show_pattern(&self, p: &Pattern, s: &mut String) {
        match p {
            Pattern::Var(v) => self.show_var(*v, s),
            Pattern::Const(d, t) => {
                Self::show_tags(*t, s);
                show_datum(d, s);
            }
            Pattern::Cons(t, a, b) => {
                s.push('(');
                Self::show_tags(*t, s);
                s.push_str("cons ");
                self.show_pattern(a, s);
                s.push(' ');
                self.show_pattern(b, s);
                s.push(')');
            }
        }
    }

    fn show_into(&self, id: ExprId, note: &dyn Fn(ExprId) -> Option<String>, s: &mut String) {
        match self.get(id) {
            Expr::Var(v) => self.show_var(*v, s),
            Expr::Const(d, t) => {
                Self::show_tags(*t, s);
                show_datum(d, s);
            }
            Expr::Prim(p, t) => {
                Self::show_tags(*t, s);
                s.push_str(p.name());
            }
            Expr::Lambda(p, b, _) => {
                s.push_str("(lambda ");
                self.show_pattern(p, s);
                s.push(' ');
                self.show_into(*b, note, s);
                s.push(')');
            }
            Expr::App(f, a, _) => {
                s.push('(');
                self.show_into(*f, note, s);
                s.push(' ');
                self.show_into(*a, note, s);
                s.push(')');
                if let Some(n) = note(id) {
                    s.push('@');
                    s.push_str(&n);
                }
            }
            Expr::Cons(t, a, b) => {
                s.push('(');
                Self::show_tags(*t, s);
                s.push_str("cons ");
                self.show_into(*a, note, s);
                s.push(' ');
                self.show_into(*b, note, s);
                s.push(')');
            }
            Expr::Letrec(bs, body) => {
                s.push_str("(letrec (");
                for (i, (v, l)) in bs.iter().enumerate() {
                    if i > 0 {
                        s.push(' ');
                    }
                    s.push('(');
                    self.show_var(*v, s);
                    s.push(' ');
                    self.show_into(*l, note, s);
                    s.push(')');
                }
                s.push_str(") ");
                self.show_into(*body, note, s);
                s.push(')');
            }
            Expr::Let(p, x, b, _) => {
                s.push_str("(let ((");
                self.show_pattern(p, s);
                s.push(' ');
                self.show_into(*x, note, s);
                s.push_str(")) ");
                self.show_into(*b, note, s);
                s.push(')');
            }
            Expr::If(c, a, b) => {
                s.push_str("(if ");
                self.show_into(*c, note, s);
                s.push(' ');
                self.show_into(*a, note, s);
                s.push(' ');
                self.show_into(*b, note, s);
                s.push(')');
            }
        }
    }
}

fn show_datum(d: &Datum, s: &mut String) {
    match d {
        Datum::Nil => s.push_str("'()"),
        Datum::Bool(true) => s.push_str("#t"),
        Datum::Bool(false) => s.push_str("#f"),
        Datum::Real(r) => {
            let _ = write!(s, "{r}");
        }
        Datum::Pair(p) => {
            s.push_str("'(");
            show_datum(&p.0, s);
            s.push_str(" . ");
            show_datum(&p.1, s);
            s.push(')');
        }
        Datum::Array(a) => {
            s.push_str("'#(");
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    s.push(' ');
                }
                show_datum(x, s);
            }
            s.push(')');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_consing_shares_equal_nodes() {
        let mut a = Arena::new();
        let one = a.mk(Expr::Const(Datum::Real(1.0), Tags::EMPTY));
        let one2 = a.mk(Expr::Const(Datum::Real(1.0), Tags::EMPTY));
        assert_eq!(one, one2);
        let zero = a.mk(Expr::Const(Datum::Real(0.0), Tags::EMPTY));
        let negzero = a.mk(Expr::Const(Datum::Real(-0.0), Tags::EMPTY));
        assert_ne!(zero, negzero);
    }

    #[test]
    fn free_vars_respect_binders() {
        let mut a = Arena::new();
        let x = a.fresh_var("x");
        let y = a.fresh_var("y");
        let vx = a.mk(Expr::Var(x));
        let vy = a.mk(Expr::Var(y));
        let app = a.mk(Expr::App(vx, vy, Span::NONE));
        let lam = a.mk(Expr::Lambda(Rc::new(Pattern::Var(x)), app, Span::NONE));
        assert_eq!(&*a.free_vars(lam), &[y]);
        assert_eq!(&*a.free_vars(app), &[x, y]);
        let lr = a.mk(Expr::Letrec(vec![(y, lam)].into(), vy));
        assert!(a.free_vars(lr).is_empty());
    }
}
