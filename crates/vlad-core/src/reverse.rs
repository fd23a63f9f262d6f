//! The reverse transform of paper 003 §4, for our Core.
//!
//! `(*j f)` for a closure `f` is a closure over the reverse transform of `f`'s lambda. The
//! transformed lambda takes a reverse value `x~` and returns `(cons y~ backpropagator)`. Its body
//! is the original body in A-normal form, each binding computed on reverse values (the *forward
//! phase*), a call also keeping the callee's backpropagator; a conditional calls the chosen
//! branch as a reverse-transformed thunk and keeps its backpropagator. The backpropagator takes the sensitivity of the result and runs the bindings
//! backwards (the *reverse phase*), accumulating sensitivities with `plus`, and returns the
//! sensitivity-tagged pair `(cons fbar xbar)`: the sensitivities of the closure's environment
//! (its free variables in canonical order, as a list) and of the argument.
//!
//! Two departures from the paper's presentation keep the cost of a backpropagator proportional to
//! the work of the forward phase:
//! - a sensitivity variable that has received nothing is not initialised to an explicit zero:
//!   the transform knows statically which have been assigned, calls whose result sensitivity is
//!   still zero are skipped, and a zero that must be returned is the lazy
//!   `(%zero-sensitivity x~)`, which costs O(1) until something looks inside it;
//! - a closure created from a `letrec` group returns, as `fbar`, sensitivities over the group's
//!   shared environment; sensitivity flowing into recursive references to the group's own
//!   procedures is folded back into that environment.

use crate::expr::{Arena, Expr, ExprId, Pattern};
use crate::transform::{push, tag_pattern, tag_var as tagged, TransformError};
use crate::{Datum, Prim, Span, Tag, Tags, Var};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

#[derive(Clone)]
enum Atom {
    Var(Var),
    Const(Datum, Tags),
    Prim(Prim, Tags),
}

enum Bind {
    App(Var, Atom, Atom, Span),
    Cons(Var, Tags, Atom, Atom),
    Lambda(Var, ExprId),
    Letrec(Rc<[(Var, ExprId)]>),
    Match(Rc<Pattern>, Atom, Span),
    /// `x = (if c (la) (lb))` with the branches as thunks. Conditionals are transformed directly
    /// rather than through the reverse `if-procedure`: that one's own code contains an `if`, and
    /// transforming it through itself would never end.
    If(Var, Atom, ExprId, ExprId),
    /// `x = (if c a b)` whose branches are atoms (variables or constants): a selection, which
    /// needs no thunks. Its backpropagator is no closure of its own: the enclosing one tests
    /// `c` again and gives the result's sensitivity to the atom that was chosen. A conditional
    /// with thunks makes a closure per branch, of two codes, and where it runs in a loop
    /// (`max`, `min` and `relu` written with `if`) compiled code boxed each step's
    /// backpropagator, a different closure each time.
    Select(Var, Atom, Atom, Atom),
}

/// The tags of the code a lambda belongs to, read off its parameter pattern.
pub fn pattern_tags(p: &Pattern) -> Tags {
    match p {
        Pattern::Var(v) => v.tags,
        Pattern::Const(_, t) | Pattern::Cons(t, _, _) => *t,
    }
}

/// The zero of a constant, its reals 0 (what `zero` gives): the zero sensitivity of a
/// constant, before the sensitivity tag.
pub fn zero_datum(d: &Datum) -> Datum {
    match d {
        Datum::Real(_) => Datum::Real(0.0),
        Datum::Pair(p) => Datum::Pair(Rc::new((zero_datum(&p.0), zero_datum(&p.1)))),
        Datum::Array(a) => Datum::Array(a.iter().map(zero_datum).collect()),
        other => other.clone(),
    }
}

struct Rev<'a> {
    arena: &'a mut Arena,
    /// The variable currently holding each original variable's sensitivity, for those that have
    /// received any. Every accumulation binds a fresh variable: the generated code must itself
    /// have unique binders, because it may be reverse-transformed in turn (nested reverse mode).
    assigned: HashMap<Var, Var>,
    /// Original variables this lambda can accumulate into.
    tracked: HashSet<Var>,
    /// Reverse-phase bindings, in order.
    lets: Vec<(Pattern, ExprId)>,
    /// The code's level, and with the sensitivity tag pushed.
    ts: Tags,
}

impl Rev<'_> {
    /// `v-bar += s`.
    fn accumulate(&mut self, v: Var, s: ExprId) -> Result<(), TransformError> {
        if !self.tracked.contains(&v) {
            return Ok(());
        }
        let e = match self.assigned.get(&v) {
            None => s,
            Some(cur) => {
                let cur = self.arena.mk(Expr::Var(*cur));
                let pair = self.arena.mk(Expr::Cons(Tags::EMPTY, cur, s));
                let plus = self.arena.mk(Expr::Prim(Prim::Plus, Tags::EMPTY));
                self.arena.mk(Expr::App(plus, pair, Span::NONE))
            }
        };
        let vb = self.arena.temp("bar", self.ts);
        self.assigned.insert(v, vb);
        self.lets.push((Pattern::Var(vb), e));
        Ok(())
    }

    fn accumulate_atom(&mut self, a: &Atom, s: ExprId) -> Result<(), TransformError> {
        if let Atom::Var(v) = a {
            self.accumulate(*v, s)?;
        }
        Ok(())
    }

    /// The current sensitivity of `v`: its variable, or a lazy zero shaped like `v`'s value.
    fn current(&mut self, v: Var) -> Result<ExprId, TransformError> {
        if let Some(vb) = self.assigned.get(&v) {
            let vb = *vb;
            return Ok(self.arena.mk(Expr::Var(vb)));
        }
        self.arena.lazy_zero(v)
    }

    /// The sensitivity of a value that was destructured by pattern `p`.
    fn reconstruct(&mut self, p: &Pattern) -> Result<ExprId, TransformError> {
        Ok(match p {
            Pattern::Var(v) => self.current(*v)?,
            Pattern::Const(d, t) => self
                .arena
                .mk(Expr::Const(zero_datum(d), push(*t, Tag::Sensitivity)?)),
            Pattern::Cons(t, a, b) => {
                let x = self.reconstruct(a)?;
                let y = self.reconstruct(b)?;
                self.arena.mk(Expr::Cons(push(*t, Tag::Sensitivity)?, x, y))
            }
        })
    }

    /// The reverse phase of `x = (if c (la) (lb))`: the backpropagator `bp` of the branch taken
    /// returns the sensitivity of the union of the two branches' environments (see
    /// `widened_branch`), which is accumulated into each variable.
    fn distribute_branch(
        &mut self,
        s: ExprId,
        bp: Var,
        la: ExprId,
        lb: ExprId,
        conv_s: Tags,
    ) -> Result<(), TransformError> {
        let union = self.arena.branch_union(la, lb);
        let (fb, ub) = (
            self.arena.temp("f-bar", self.ts),
            self.arena.temp("unit-bar", self.ts),
        );
        let bpe = self.arena.mk(Expr::Var(bp));
        let call = self.arena.mk(Expr::App(bpe, s, Span::NONE));
        let pair = Pattern::Cons(conv_s, Rc::new(Pattern::Var(fb)), Rc::new(Pattern::Var(ub)));
        self.lets.push((pair, call));
        let us: Vec<Var> = union
            .iter()
            .map(|_| self.arena.temp("branch-bar", self.ts))
            .collect();
        let mut pat = Pattern::Const(Datum::Nil, self.ts);
        for u in us.iter().rev() {
            pat = Pattern::Cons(self.ts, Rc::new(Pattern::Var(*u)), Rc::new(pat));
        }
        let fbe = self.arena.mk(Expr::Var(fb));
        self.lets.push((pat, fbe));
        for (y, u) in union.iter().zip(&us) {
            let e = self.arena.mk(Expr::Var(*u));
            self.accumulate(*y, e)?;
        }
        Ok(())
    }

    /// The reverse phase of `x = (if c a b)` with atoms for branches: `s`, the sensitivity of
    /// `x`, goes to the atom `c` chose, a lazy zero to the other (what the backpropagator of
    /// a branch thunk gives, `widened_branch`): `a += (if c s 0)`, `b += (if c 0 s)`, and
    /// `a += s` where both are one variable.
    fn distribute_select(
        &mut self,
        s: ExprId,
        c: &Atom,
        a: &Atom,
        b: &Atom,
    ) -> Result<(), TransformError> {
        if let (Atom::Var(x), Atom::Var(y)) = (a, b) {
            if x == y {
                return self.accumulate(*x, s);
            }
        }
        // The sensitivity in a variable of its own: it is read by both conditionals.
        let sv = self.arena.temp("select-bar", self.ts);
        self.lets.push((Pattern::Var(sv), s));
        for (atom, chosen_first) in [(a, true), (b, false)] {
            let Atom::Var(v) = atom else { continue };
            if !self.tracked.contains(v) {
                continue;
            }
            let ce = self.arena.atom_reverse(c)?;
            let se = self.arena.mk(Expr::Var(sv));
            let zero = self.arena.lazy_zero(*v)?;
            let (th, el) = if chosen_first { (se, zero) } else { (zero, se) };
            let e = self.arena.mk(Expr::If(ce, th, el));
            self.accumulate(*v, e)?;
        }
        Ok(())
    }

    /// Destructures `s`, the sensitivity of a closure of `lam` over `free`, and accumulates each
    /// part. The sensitivity is a list tagged like the closure (its parameter's tags), plus the
    /// sensitivity tag.
    fn distribute_closure(
        &mut self,
        s: ExprId,
        lam: ExprId,
        free: &[Var],
    ) -> Result<(), TransformError> {
        let tags = match self.arena.get(lam) {
            Expr::Lambda(p, _, _) => push(pattern_tags(p), Tag::Sensitivity)?,
            _ => self.ts,
        };
        let mut parts = Vec::with_capacity(free.len());
        let mut pat = Pattern::Const(Datum::Nil, tags);
        let mut vars = Vec::new();
        for _ in free {
            let t = self.arena.fresh_var("env-bar");
            vars.push(Var {
                id: t.id,
                tags: self.ts,
            });
        }
        for v in vars.iter().rev() {
            pat = Pattern::Cons(tags, Rc::new(Pattern::Var(*v)), Rc::new(pat));
        }
        self.lets.push((pat, s));
        for (y, t) in free.iter().zip(&vars) {
            let e = self.arena.mk(Expr::Var(*t));
            parts.push((*y, e));
        }
        for (y, e) in parts {
            self.accumulate(y, e)?;
        }
        Ok(())
    }
}

impl Arena {
    /// The free variables of either branch of a conditional, sorted.
    fn branch_union(&mut self, la: ExprId, lb: ExprId) -> Vec<Var> {
        let mut union: Vec<Var> = self.free_vars(la).to_vec();
        union.extend(self.free_vars(lb).iter().copied());
        union.sort();
        union.dedup();
        union
    }

    /// `call`, the call of a reverse-transformed branch thunk (whose free variables are
    /// `free`), with its backpropagator wrapped so that it returns the sensitivity of the union
    /// of both branches' free variables (`union`, a lazy zero for those this branch does not
    /// use) instead of its own environment's. The two branches' backpropagators then return
    /// values of one shape: a backpropagator that received either (it is chosen at run time)
    /// has one result, where results of two shapes would have to be boxed in compiled code.
    /// `t` is the level of the enclosing code, `ts` with the sensitivity tag pushed, `conv_s`
    /// the tags of a backpropagator's result pair.
    fn widened_branch(
        &mut self,
        call: ExprId,
        free: &[Var],
        union: &[Var],
        t: Tags,
        ts: Tags,
        conv_s: Tags,
    ) -> Result<ExprId, TransformError> {
        let (y, bp) = (self.temp("branch", t), self.temp("backprop", t));
        let sy = self.temp("result-bar", Tags::EMPTY);
        let (fb, ub) = (self.temp("f-bar", ts), self.temp("unit-bar", ts));
        let parts: Vec<Var> = free.iter().map(|_| self.temp("env-bar", ts)).collect();
        let mut list_pat = Pattern::Const(Datum::Nil, ts);
        for v in parts.iter().rev() {
            list_pat = Pattern::Cons(ts, Rc::new(Pattern::Var(*v)), Rc::new(list_pat));
        }
        let mut widened = self.mk(Expr::Const(Datum::Nil, ts));
        for u in union.iter().rev() {
            let item = match free.iter().position(|f| f == u) {
                Some(k) => self.mk(Expr::Var(parts[k])),
                None => self.lazy_zero(*u)?,
            };
            widened = self.mk(Expr::Cons(ts, item, widened));
        }
        let ube = self.mk(Expr::Var(ub));
        let result = self.mk(Expr::Cons(conv_s, widened, ube));
        let fbe = self.mk(Expr::Var(fb));
        let inner = self.mk(Expr::Let(Rc::new(list_pat), fbe, result, Span::NONE));
        let bpe = self.mk(Expr::Var(bp));
        let sye = self.mk(Expr::Var(sy));
        let call_bp = self.mk(Expr::App(bpe, sye, Span::NONE));
        let pair = Pattern::Cons(conv_s, Rc::new(Pattern::Var(fb)), Rc::new(Pattern::Var(ub)));
        let body = self.mk(Expr::Let(Rc::new(pair), call_bp, inner, Span::NONE));
        let wrapper = self.mk(Expr::Lambda(Rc::new(Pattern::Var(sy)), body, Span::NONE));
        self.base_level.insert(wrapper, t);
        let ye = self.mk(Expr::Var(y));
        let out = self.mk(Expr::Cons(Tags::EMPTY, ye, wrapper));
        let pat = Pattern::Cons(
            Tags::EMPTY,
            Rc::new(Pattern::Var(y)),
            Rc::new(Pattern::Var(bp)),
        );
        Ok(self.mk(Expr::Let(Rc::new(pat), call, out, Span::NONE)))
    }

    /// `(%zero-sensitivity v~)`: the lazy zero sensitivity shaped like `v`'s reverse value.
    fn lazy_zero(&mut self, v: Var) -> Result<ExprId, TransformError> {
        let vr = self.mk(Expr::Var(tagged(v, Tag::Reverse)?));
        let z = self.mk(Expr::Prim(Prim::ZeroSensR, Tags::EMPTY));
        Ok(self.mk(Expr::App(z, vr, Span::NONE)))
    }

    /// Whether `e` is an atom of A-normal form: a variable or a constant.
    fn is_atom(&self, e: ExprId) -> bool {
        matches!(self.get(e), Expr::Var(_) | Expr::Const(..))
    }

    fn temp(&mut self, name: &str, tags: Tags) -> Var {
        let v = self.fresh_var(name);
        Var { id: v.id, tags }
    }

    fn atom_reverse(&mut self, a: &Atom) -> Result<ExprId, TransformError> {
        Ok(match a {
            Atom::Var(v) => self.mk(Expr::Var(tagged(*v, Tag::Reverse)?)),
            Atom::Const(d, t) => self.mk(Expr::Const(d.clone(), push(*t, Tag::Reverse)?)),
            Atom::Prim(p, t) => self.mk(Expr::Prim(*p, push(*t, Tag::Reverse)?)),
        })
    }

    /// A-normal form of `e` at level `t`, appending bindings; returns the result atom.
    fn anf(&mut self, e: ExprId, t: Tags, out: &mut Vec<Bind>) -> Atom {
        match self.get(e).clone() {
            Expr::Var(v) => Atom::Var(v),
            Expr::Const(d, ts) => Atom::Const(d, ts),
            Expr::Prim(p, ts) => Atom::Prim(p, ts),
            Expr::App(f, a, sp) => {
                let f = self.anf(f, t, out);
                let a = self.anf(a, t, out);
                let x = self.temp("call", t);
                out.push(Bind::App(x, f, a, sp));
                Atom::Var(x)
            }
            Expr::Cons(ts, a, b) => {
                let a = self.anf(a, t, out);
                let b = self.anf(b, t, out);
                let x = self.temp("pair", t);
                out.push(Bind::Cons(x, ts, a, b));
                Atom::Var(x)
            }
            Expr::Lambda(..) => {
                let x = self.temp("closure", t);
                out.push(Bind::Lambda(x, e));
                Atom::Var(x)
            }
            Expr::Letrec(bs, body) => {
                out.push(Bind::Letrec(bs));
                self.anf(body, t, out)
            }
            Expr::Let(p, x, body, sp) => {
                let a = self.anf(x, t, out);
                out.push(Bind::Match(p, a, sp));
                self.anf(body, t, out)
            }
            Expr::If(c, a, b) if self.is_atom(a) && self.is_atom(b) => {
                let c = self.anf(c, t, out);
                let a = self.anf(a, t, out);
                let b = self.anf(b, t, out);
                let x = self.temp("select", t);
                out.push(Bind::Select(x, c, a, b));
                Atom::Var(x)
            }
            Expr::If(c, a, b) => {
                let c = self.anf(c, t, out);
                let unit = Rc::new(Pattern::Const(Datum::Nil, t));
                let la = self.mk(Expr::Lambda(unit.clone(), a, Span::NONE));
                let lb = self.mk(Expr::Lambda(unit, b, Span::NONE));
                let x = self.temp("if", t);
                out.push(Bind::If(x, c, la, lb));
                Atom::Var(x)
            }
        }
    }

    /// The reverse transform of `lam`, a member of a letrec group with these `names` whose
    /// shared environment is `group_free` (a plain lambda: no names, its own free variables).
    pub fn reverse_transform(
        &mut self,
        lam: ExprId,
        names: &[Var],
        group_free: &[Var],
    ) -> Result<ExprId, TransformError> {
        if let Some(t) = self.transformed.get(&(lam, Tag::Reverse)) {
            return Ok(*t);
        }
        let Expr::Lambda(p, body, span) = self.get(lam).clone() else {
            unreachable!("only lambdas are reverse-transformed")
        };
        let t = self.code_level(lam);
        let ts = push(t, Tag::Sensitivity)?;
        // The calling convention's pairs are plain whatever the code's level: a reverse procedure
        // returns `(cons y~ backpropagator)`, a backpropagator `(sensitize (cons fbar xbar))`
        // (paper 003 §4: the transform introduces them, it does not transform them).
        let conv_s = push(Tags::EMPTY, Tag::Sensitivity)?;
        let mut binds = Vec::new();
        let result = self.anf(body, t, &mut binds);

        // Forward phase.
        enum Wrap {
            Let(Pattern, ExprId, Span),
            Letrec(Vec<(Var, ExprId)>),
        }
        let mut wraps = Vec::new();
        let mut backprops = Vec::new();
        let mut tracked: HashSet<Var> = group_free.iter().chain(names).copied().collect();
        let mut pvars = Vec::new();
        p.vars(&mut pvars);
        tracked.extend(pvars);
        for b in &binds {
            self.keep_going()?;
            match b {
                Bind::App(x, f, a, sp) => {
                    tracked.insert(*x);
                    let bp = self.temp("backprop", t);
                    backprops.push(bp);
                    let (fe, ae) = (self.atom_reverse(f)?, self.atom_reverse(a)?);
                    let call = self.mk(Expr::App(fe, ae, *sp));
                    let pat = Pattern::Cons(
                        Tags::EMPTY,
                        Rc::new(Pattern::Var(tagged(*x, Tag::Reverse)?)),
                        Rc::new(Pattern::Var(bp)),
                    );
                    wraps.push(Wrap::Let(pat, call, *sp));
                }
                Bind::Cons(x, tags, a, b2) => {
                    tracked.insert(*x);
                    let (ae, be) = (self.atom_reverse(a)?, self.atom_reverse(b2)?);
                    let e = self.mk(Expr::Cons(push(*tags, Tag::Reverse)?, ae, be));
                    wraps.push(Wrap::Let(
                        Pattern::Var(tagged(*x, Tag::Reverse)?),
                        e,
                        Span::NONE,
                    ));
                }
                Bind::Lambda(x, l) => {
                    tracked.insert(*x);
                    let free = self.free_vars(*l);
                    let e = self.reverse_transform(*l, &[], &free)?;
                    wraps.push(Wrap::Let(
                        Pattern::Var(tagged(*x, Tag::Reverse)?),
                        e,
                        Span::NONE,
                    ));
                }
                Bind::If(x, c, la, lb) => {
                    tracked.insert(*x);
                    let bp = self.temp("backprop", t);
                    backprops.push(bp);
                    let ce = self.atom_reverse(c)?;
                    let unit = self.mk(Expr::Const(Datum::Nil, push(t, Tag::Reverse)?));
                    let union = self.branch_union(*la, *lb);
                    let mut calls = Vec::new();
                    for l in [*la, *lb] {
                        let free = self.free_vars(l);
                        let f = self.reverse_transform(l, &[], &free)?;
                        let call = self.mk(Expr::App(f, unit, Span::NONE));
                        calls.push(self.widened_branch(call, &free, &union, t, ts, conv_s)?);
                    }
                    let e = self.mk(Expr::If(ce, calls[0], calls[1]));
                    let pat = Pattern::Cons(
                        Tags::EMPTY,
                        Rc::new(Pattern::Var(tagged(*x, Tag::Reverse)?)),
                        Rc::new(Pattern::Var(bp)),
                    );
                    wraps.push(Wrap::Let(pat, e, Span::NONE));
                }
                Bind::Select(x, c, a, b) => {
                    tracked.insert(*x);
                    let (ce, ae, be) = (
                        self.atom_reverse(c)?,
                        self.atom_reverse(a)?,
                        self.atom_reverse(b)?,
                    );
                    let e = self.mk(Expr::If(ce, ae, be));
                    wraps.push(Wrap::Let(
                        Pattern::Var(tagged(*x, Tag::Reverse)?),
                        e,
                        Span::NONE,
                    ));
                }
                Bind::Letrec(bs) => {
                    let ns: Vec<Var> = bs.iter().map(|(v, _)| *v).collect();
                    tracked.extend(ns.iter().copied());
                    let gfree = self.group_free(bs);
                    let mut nbs = Vec::with_capacity(bs.len());
                    for (v, l) in bs.iter() {
                        nbs.push((
                            tagged(*v, Tag::Reverse)?,
                            self.reverse_transform(*l, &ns, &gfree)?,
                        ));
                    }
                    wraps.push(Wrap::Letrec(nbs));
                }
                Bind::Match(pat, a, sp) => {
                    let mut vs = Vec::new();
                    pat.vars(&mut vs);
                    tracked.extend(vs);
                    let e = self.atom_reverse(a)?;
                    wraps.push(Wrap::Let(tag_pattern(pat, Tag::Reverse)?, e, *sp));
                }
            }
        }

        // Reverse phase, inside the backpropagator.
        // The backpropagator is a plain procedure (its parameter untagged, so it applies to any
        // sensitivity) whose code is at this lambda's level.
        let sy = self.temp("result-bar", Tags::EMPTY);
        let mut rev = Rev {
            arena: self,
            assigned: HashMap::new(),
            tracked,
            lets: Vec::new(),
            ts,
        };
        let sye = rev.arena.mk(Expr::Var(sy));
        rev.accumulate_atom(&result, sye)?;
        let mut bp_iter = backprops.iter().rev();
        for b in binds.iter().rev() {
            rev.arena.keep_going()?;
            match b {
                Bind::App(x, f, a, _) => {
                    let bp = *bp_iter.next().expect("one backpropagator per call");
                    if !rev.assigned.contains_key(x) {
                        continue;
                    }
                    let s = rev.current(*x)?;
                    let bpe = rev.arena.mk(Expr::Var(bp));
                    let call = rev.arena.mk(Expr::App(bpe, s, Span::NONE));
                    let (fb, ab) = (rev.arena.temp("f-bar", ts), rev.arena.temp("x-bar", ts));
                    let pat =
                        Pattern::Cons(conv_s, Rc::new(Pattern::Var(fb)), Rc::new(Pattern::Var(ab)));
                    rev.lets.push((pat, call));
                    let (fbe, abe) = (rev.arena.mk(Expr::Var(fb)), rev.arena.mk(Expr::Var(ab)));
                    rev.accumulate_atom(f, fbe)?;
                    rev.accumulate_atom(a, abe)?;
                }
                Bind::Cons(x, tags, a, b2) => {
                    if !rev.assigned.contains_key(x) {
                        continue;
                    }
                    let s = rev.current(*x)?;
                    let st = push(*tags, Tag::Sensitivity)?;
                    let (u, w) = (rev.arena.temp("car-bar", ts), rev.arena.temp("cdr-bar", ts));
                    rev.lets.push((
                        Pattern::Cons(st, Rc::new(Pattern::Var(u)), Rc::new(Pattern::Var(w))),
                        s,
                    ));
                    let (ue, we) = (rev.arena.mk(Expr::Var(u)), rev.arena.mk(Expr::Var(w)));
                    rev.accumulate_atom(a, ue)?;
                    rev.accumulate_atom(b2, we)?;
                }
                Bind::Lambda(x, l) => {
                    if !rev.assigned.contains_key(x) {
                        continue;
                    }
                    let s = rev.current(*x)?;
                    let free = rev.arena.free_vars(*l);
                    rev.distribute_closure(s, *l, &free)?;
                }
                Bind::If(x, _, la, lb) => {
                    let bp = *bp_iter.next().expect("one backpropagator per conditional");
                    if !rev.assigned.contains_key(x) {
                        continue;
                    }
                    let s = rev.current(*x)?;
                    rev.distribute_branch(s, bp, *la, *lb, conv_s)?;
                }
                Bind::Select(x, c, a, b) => {
                    if rev.assigned.contains_key(x) {
                        let s = rev.current(*x)?;
                        rev.distribute_select(s, c, a, b)?;
                    }
                }
                Bind::Letrec(bs) => {
                    let gfree = rev.arena.group_free(bs);
                    for (n, l) in bs.iter() {
                        if rev.assigned.contains_key(n) {
                            let s = rev.current(*n)?;
                            rev.distribute_closure(s, *l, &gfree)?;
                        }
                    }
                }
                Bind::Match(pat, a, _) => {
                    let mut vs = Vec::new();
                    pat.vars(&mut vs);
                    if vs.iter().any(|v| rev.assigned.contains_key(v)) {
                        let s = rev.reconstruct(pat)?;
                        rev.accumulate_atom(a, s)?;
                    }
                }
            }
        }
        // Sensitivity that reached the group's own procedures belongs to the shared environment.
        for n in names {
            if rev.assigned.contains_key(n) {
                let s = rev.current(*n)?;
                rev.distribute_closure(s, lam, group_free)?;
            }
        }
        // The environment's sensitivity is a list tagged like this lambda's closures.
        let env_tags = push(pattern_tags(&p), Tag::Sensitivity)?;
        let mut fbar = rev.arena.mk(Expr::Const(Datum::Nil, env_tags));
        for y in group_free.iter().rev() {
            let s = rev.current(*y)?;
            fbar = rev.arena.mk(Expr::Cons(env_tags, s, fbar));
        }
        let xbar = rev.reconstruct(&p)?;
        let mut acc = rev.arena.mk(Expr::Cons(conv_s, fbar, xbar));
        let lets = std::mem::take(&mut rev.lets);
        for (pat, e) in lets.into_iter().rev() {
            acc = self.mk(Expr::Let(Rc::new(pat), e, acc, Span::NONE));
        }
        let bp = self.mk(Expr::Lambda(Rc::new(Pattern::Var(sy)), acc, span));
        self.base_level.insert(bp, t);

        // The transformed body: forward phase, then (cons y~ backpropagator).
        let r = self.atom_reverse(&result)?;
        let mut acc = self.mk(Expr::Cons(Tags::EMPTY, r, bp));
        for w in wraps.into_iter().rev() {
            acc = match w {
                Wrap::Let(pat, e, sp) => self.mk(Expr::Let(Rc::new(pat), e, acc, sp)),
                Wrap::Letrec(bs) => self.mk(Expr::Letrec(bs.into(), acc)),
            };
        }
        let out = self.mk(Expr::Lambda(
            Rc::new(tag_pattern(&p, Tag::Reverse)?),
            acc,
            span,
        ));
        self.transformed.insert((lam, Tag::Reverse), out);
        self.origin.insert(out, (Tag::Reverse, lam));
        Ok(out)
    }

    /// The level of the operations in a lambda's body: the tags its `cons`, constants and
    /// primitives carry. A structural transform pushes its tag on it; the reverse transform keeps
    /// the level (its body computes on reverse values with the original operations' transformed
    /// versions, and builds its result pair and sensitivities at the original level). A lambda's
    /// parameter tags, which give the tags of its closures as values, can therefore differ.
    pub fn code_level(&self, lam: ExprId) -> Tags {
        let mut chain = Vec::new();
        let mut l = lam;
        while let Some(&(tag, orig)) = self.origin.get(&l) {
            chain.push(tag);
            l = orig;
        }
        let mut t = match self.base_level.get(&l) {
            Some(t) => *t,
            None => match self.get(l) {
                Expr::Lambda(p, _, _) => pattern_tags(p),
                _ => Tags::EMPTY,
            },
        };
        for tag in chain.into_iter().rev() {
            if tag != Tag::Reverse {
                t = t.push(tag).unwrap_or(t);
            }
        }
        t
    }

    /// Declares the code level of a lambda whose parameter pattern says otherwise (the prelude's
    /// transformed primitives: base-level code taking tagged arguments).
    pub fn set_code_level(&mut self, lam: ExprId, level: Tags) {
        self.base_level.insert(lam, level);
    }

    /// The shared environment of a letrec group: its lambdas' free variables minus its names.
    pub fn group_free(&mut self, bs: &[(Var, ExprId)]) -> Vec<Var> {
        let mut free: Vec<Var> = Vec::new();
        for (_, l) in bs {
            free.extend(
                self.free_vars(*l)
                    .iter()
                    .filter(|v| !bs.iter().any(|(n, _)| n == *v)),
            );
        }
        free.sort();
        free.dedup();
        free
    }
}
