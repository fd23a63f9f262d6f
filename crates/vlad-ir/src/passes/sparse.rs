//! One-hot folds: paper 002's `ifold (fun a j -> if j = k then f a j else a) z n ~> f z k`
//! (Fig. 7e), as written (`selection`), and made exact in IEEE arithmetic by a guard where
//! the step adds zeros at the other indices.
//!
//! **As written.** A fold whose step compares its index with a value `k` the loop does not
//! change and, where they differ, only computes and leaves every accumulator as it was, does
//! something at `k` alone: it becomes that step, run once from the initial values if `k` is
//! an index below the count (a natural number: a real `k` is tested integral), and the
//! initial values if not. Exact: the same operations on the same operands.
//!
//! Forward-mode `grad` differentiates `f` once per input `k` with the one-hot tangent
//! `(vector-hot n k)`; once `passes::fuse` has put the one-hot's step in the loop that reads
//! it, a sum such as the tangent of a dot product is `s := s + (v_j * [j = k] + x_j * 0)`, and
//! every step but the one at `k` adds a zero. Paper 002 drops those steps by its ring rules
//! (`e * 0 ~> 0`, `e + 0 ~> e`), which are not exact: `inf * 0` is NaN, and `-0 + 0` is `+0`.
//! Here the loop is run once, at `k`, only where that gives what the loop gives:
//!
//! - every accumulator is a real that starts as a constant other than `-0`, and its next value
//!   is itself plus a term, or itself;
//! - the step only computes (no check, call, allocation or write: skipping it changes nothing
//!   else);
//! - at every index but `k` (where the step's comparisons of the index with `k` are false),
//!   each term is a zero, provided some of the step's values are finite (the factors of
//!   products with a zero) and some are neither zero nor NaN (the divisors of quotients of a
//!   zero): the step's reals are followed as "a zero" or "something", a product of a zero and
//!   something asks for that something to be finite, and a zero divided by something for
//!   that something to be non-zero (`0 / y` is a zero for every `y` but a zero and NaN: the
//!   quotient rule's numerator over `x * x` in the tangent of `a / x`);
//! - a real from before the loop may be taken for a zero where that makes a term a zero (the
//!   tangent of log-sum-exp's maximum, a zero at every entry but the maximum's): it is then
//!   tested, with the guard.
//!
//! Then, if those values are finite (or non-zero) at every index (and those reals zeros),
//! each step but `k`'s adds a zero to an accumulator that is not `-0`, which leaves it
//! unchanged (`x + 0 = x` for such `x`, `x + -0 = x` for all), and the step at `k` starts
//! from the initial values. So the loop becomes a guard loop (those values computed at every
//! index and tested finite, `x * 0 = 0`, or above or below zero), then the step at `k` if `k`
//! is below the count (the initial values if not), or the original loop where the guard
//! fails. A value needed finite that is the `exp`, `sin` or `cos` of one the step computes is
//! tested through its argument (`finite_test`), so that the guard loop does not call them
//! again. The guard reads neither the accumulators nor, in `grad`, `k`: the next `simplify`
//! takes it out of the loop over `k` (loop-invariant code motion), so `grad` costs one pass
//! to check and O(1) per entry, not a pass per entry.

use crate::ir::*;
use crate::passes::fuse;
use std::collections::{HashMap, HashSet};

/// Rewrites the one-hot folds of `f`; whether any was.
pub fn function(f: &mut Function) -> bool {
    let mut vars = std::mem::take(&mut f.vars);
    let mut changed = false;
    let assigned = crate::passes::simplify::mutable(&f.body);
    flat_map(&mut f.body, &mut |s| {
        if let Some(sel) = selection(&s, &assigned) {
            changed = true;
            return select(s, sel, &mut vars);
        }
        match one_hot(&s, &assigned, &vars) {
            Some(plan) => {
                changed = true;
                rewrite(s, plan, &mut vars)
            }
            None => vec![s],
        }
    });
    f.vars = vars;
    changed
}

/// What a step's real is at an index other than `k`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Abs {
    /// A zero (of either sign), given the guard and, if the mask has bits, given that the
    /// values of those bits (`Follow::assumable`) are zeros.
    Zero(u64),
    /// A boolean known there.
    Known(bool),
    Other,
}

/// A one-hot fold found: the index `k`, the values the guard tests finite, those it tests
/// neither zero nor NaN, and the reals defined before the loop that must be zeros (tested
/// where the loop is).
struct Plan {
    k: Var,
    finite: Vec<Operand>,
    nonzero: Vec<Operand>,
    zero: Vec<Var>,
}

fn one_hot(s: &Stmt, assigned: &HashSet<Var>, vars: &[VarInfo]) -> Option<Plan> {
    let Stmt::Ifold {
        accs,
        init,
        index,
        body,
        next,
        ..
    } = s
    else {
        return None;
    };
    let is_f64 = |v: &Var| vars[v.0 as usize].ty == Ty::F64;
    if accs.is_empty()
        || !accs.iter().all(is_f64)
        || !init
            .iter()
            .all(|x| matches!(x, Operand::F64(c) if !(*c == 0.0 && c.is_sign_negative())))
        || !fuse::pure(body)
        || fuse::last_site(body).is_none()
    {
        return None;
    }
    let mut nested = false;
    walk(body, &mut |t| {
        nested |= matches!(
            t,
            Stmt::Ifold { .. } | Stmt::For { .. } | Stmt::Build { .. } | Stmt::Switch { .. }
        )
    });
    if nested {
        return None;
    }
    let mut inner: HashSet<Var> = HashSet::new();
    walk(body, &mut |t| inner.extend(stmt_defs(t)));
    // `k`: compared with the index for equality, defined before the loop, never assigned.
    let mut k = None;
    walk(body, &mut |t| {
        if let Stmt::Let(_, Op::Binary(BinOp::IEq | BinOp::INe, Operand::Var(a), Operand::Var(b))) =
            t
        {
            let other = if a == index {
                *b
            } else if b == index {
                *a
            } else {
                return;
            };
            if k.is_none()
                && !inner.contains(&other)
                && !assigned.contains(&other)
                && other != *index
            {
                k = Some(other);
            }
        }
    });
    let k = k?;
    // Reals defined before the loop that the step reads: each may be assumed a zero (the
    // tangent of a running maximum, a zero unless the maximum is at `k`), then tested.
    let mut assumable: Vec<Var> = Vec::new();
    walk(body, &mut |t| {
        for x in stmt_operands(t) {
            if let Operand::Var(v) = x {
                if !inner.contains(v)
                    && !accs.contains(v)
                    && !assigned.contains(v)
                    && vars[v.0 as usize].ty == Ty::F64
                    && !assumable.contains(v)
                    && assumable.len() < 64
                {
                    assumable.push(*v);
                }
            }
        }
    });
    let mut cx = Follow {
        index: *index,
        k,
        env: HashMap::new(),
        finite: Vec::new(),
        nonzero: Vec::new(),
        assumable,
        assumed: 0,
    };
    cx.block(body);
    // Every next value: the accumulator plus a zero, or the accumulator.
    let defs = definitions(body);
    let mut assumed = cx.assumed;
    for (acc, n) in accs.iter().zip(next) {
        let Operand::Var(n) = n else {
            return None;
        };
        if n == acc {
            continue;
        }
        let Some(Op::Binary(BinOp::FAdd, x, y)) = defs.get(n) else {
            return None;
        };
        let term = if x == &Operand::Var(*acc) {
            y
        } else if y == &Operand::Var(*acc) {
            x
        } else {
            return None;
        };
        let Abs::Zero(bits) = cx.value(term) else {
            return None;
        };
        assumed |= bits;
    }
    // The guard's values must be computable from the index and what the loop does not
    // change: not from the accumulators, nor from what the step assigns.
    let step_assigned = crate::ir::assigned(body);
    let top: HashSet<Var> = body.iter().flat_map(stmt_defs).collect();
    for x in cx.finite.iter().chain(&cx.nonzero) {
        if let Operand::Var(v) = x {
            let slice = slice(body, &[*v], &defs);
            // Defined in a branch: not computed at every index.
            let in_branch = slice
                .iter()
                .flat_map(|t| stmt_operands(t).into_iter().filter_map(|x| x.var()))
                .chain([*v])
                .any(|u| inner.contains(&u) && !top.contains(&u));
            if in_branch {
                return None;
            }
            let reads_state = slice.iter().any(|t| {
                stmt_operands(t).iter().any(|x| {
                    x.var()
                        .is_some_and(|u| accs.contains(&u) || step_assigned.contains(&u))
                })
            });
            if reads_state || accs.contains(v) || step_assigned.contains(v) {
                return None;
            }
        }
    }
    let zero = (0..cx.assumable.len())
        .filter(|b| assumed & (1 << b) != 0)
        .map(|b| cx.assumable[b])
        .collect();
    Some(Plan {
        k,
        finite: cx.finite,
        nonzero: cx.nonzero,
        zero,
    })
}

/// The operation that defines each variable a `Let` of one result defines (in a step: its
/// pure definitions, by the variable they define).
pub(crate) fn definitions(body: &[Stmt]) -> HashMap<Var, Op> {
    let mut defs = HashMap::new();
    walk(body, &mut |t| {
        if let Stmt::Let(vs, op) = t {
            if let [v] = vs[..] {
                defs.insert(v, op.clone());
            }
        }
    });
    defs
}

/// The definitions (in order, top-level ones of the step: the step has no nested loops and
/// the guard's values are defined outside its branches) that `roots` need.
fn slice(body: &[Stmt], roots: &[Var], defs: &HashMap<Var, Op>) -> Vec<Stmt> {
    let mut needed: HashSet<Var> = HashSet::new();
    let mut todo: Vec<Var> = roots.to_vec();
    while let Some(v) = todo.pop() {
        if !needed.insert(v) {
            continue;
        }
        if let Some(op) = defs.get(&v) {
            todo.extend(op_operands(op).iter().filter_map(|x| x.var()));
        }
    }
    body.iter()
        .filter(|t| matches!(t, Stmt::Let(vs, _) if vs.iter().any(|v| needed.contains(v))))
        .cloned()
        .collect()
}

/// Follows a step's values at an index other than `k`.
struct Follow {
    index: Var,
    k: Var,
    env: HashMap<Var, Abs>,
    finite: Vec<Operand>,
    nonzero: Vec<Operand>,
    /// The reals from before the loop that may be assumed zeros, by bit.
    assumable: Vec<Var>,
    /// Those assumed zeros to know a test (`x = 0`), by bit: the guard tests them too.
    assumed: u64,
}

impl Follow {
    fn value(&self, x: &Operand) -> Abs {
        match x {
            Operand::F64(c) if *c == 0.0 => Abs::Zero(0),
            Operand::Bool(b) => Abs::Known(*b),
            Operand::Var(v) => match self.env.get(v) {
                Some(a) => *a,
                None => match self.assumable.iter().position(|u| u == v) {
                    Some(b) => Abs::Zero(1 << b),
                    None => Abs::Other,
                },
            },
            _ => Abs::Other,
        }
    }

    /// A product with a zero is a zero if the other factor is finite: the guard tests it.
    fn times_zero(&mut self, zero: u64, other: &Operand) -> Abs {
        match other {
            Operand::F64(c) if c.is_finite() => {}
            _ => self.finite.push(other.clone()),
        }
        Abs::Zero(zero)
    }

    /// A zero divided by a value is a zero if the value is neither a zero nor NaN (infinities
    /// are fine): the guard tests it.
    fn over(&mut self, zero: u64, divisor: &Operand) -> Abs {
        match (divisor, self.value(divisor)) {
            (_, Abs::Zero(_)) => Abs::Other,
            (Operand::F64(c), _) if *c != 0.0 && !c.is_nan() => Abs::Zero(zero),
            _ => {
                self.nonzero.push(divisor.clone());
                Abs::Zero(zero)
            }
        }
    }

    fn block(&mut self, body: &[Stmt]) {
        for s in body {
            match s {
                Stmt::Let(vs, op) => {
                    let [v] = vs[..] else {
                        continue;
                    };
                    let a = match op {
                        Op::Copy(x) => self.value(x),
                        Op::Binary(BinOp::IEq | BinOp::INe, x, y)
                            if [x, y].iter().any(|o| o.var() == Some(self.index))
                                && [x, y].iter().any(|o| o.var() == Some(self.k)) =>
                        {
                            Abs::Known(matches!(op, Op::Binary(BinOp::INe, ..)))
                        }
                        Op::Binary(BinOp::FMul, x, y) => match (self.value(x), self.value(y)) {
                            (Abs::Zero(a), Abs::Zero(b)) => Abs::Zero(a | b),
                            (Abs::Zero(a), _) => self.times_zero(a, y),
                            (_, Abs::Zero(b)) => self.times_zero(b, x),
                            _ => Abs::Other,
                        },
                        Op::Binary(BinOp::FDiv, x, y) => match self.value(x) {
                            Abs::Zero(a) => self.over(a, y),
                            _ => Abs::Other,
                        },
                        Op::Binary(BinOp::FAdd | BinOp::FSub, x, y) => {
                            match (self.value(x), self.value(y)) {
                                (Abs::Zero(a), Abs::Zero(b)) => Abs::Zero(a | b),
                                _ => Abs::Other,
                            }
                        }
                        // A forward rule's test of a zero tangent (it then skips the
                        // tangent's term): true, given the zeros it assumes.
                        Op::Binary(BinOp::FEq, x, y) => match (self.value(x), self.value(y)) {
                            (Abs::Zero(a), Abs::Zero(b)) => {
                                self.assumed |= a | b;
                                Abs::Known(true)
                            }
                            _ => Abs::Other,
                        },
                        Op::Unary(UnOp::Not, x) => match self.value(x) {
                            Abs::Known(b) => Abs::Known(!b),
                            _ => Abs::Other,
                        },
                        _ => Abs::Other,
                    };
                    self.env.insert(v, a);
                }
                Stmt::Set(v, x) => {
                    let a = self.value(x);
                    self.env.insert(*v, a);
                }
                Stmt::If { cond, then, els } => match self.value(cond) {
                    Abs::Known(true) => self.block(then),
                    Abs::Known(false) => self.block(els),
                    _ => {
                        let before = self.env.clone();
                        self.block(then);
                        let after_then = std::mem::replace(&mut self.env, before);
                        self.block(els);
                        // A variable assigned in either branch is a zero after the `if` only
                        // if it is one after both.
                        let keys: HashSet<Var> =
                            after_then.keys().chain(self.env.keys()).copied().collect();
                        for v in keys {
                            let a = after_then.get(&v).copied().unwrap_or(Abs::Other);
                            let b = self.env.get(&v).copied().unwrap_or(Abs::Other);
                            self.env.insert(v, if a == b { a } else { Abs::Other });
                        }
                    }
                },
                _ => {}
            }
        }
    }
}

/// What the guard tests of a value it needs finite: `operand` finite and, if given, at most
/// `at_most`.
struct Finite {
    operand: Operand,
    at_most: Option<f64>,
}

/// Below this, `exp` is finite (`exp(709.782712893384)` is the largest finite one): a margin
/// keeps the test sufficient whatever the last bit of the library's `exp` does there.
const EXP_FINITE_BELOW: f64 = 709.78;

/// The test of `x` finite that the guard makes: of the argument, where `x` is the `exp`,
/// `sin` or `cos` of one defined in the step (a finite argument below `EXP_FINITE_BELOW` makes
/// a finite `exp`; any finite one a finite `sin` or `cos`), so that the guard does not compute
/// those again at every index (log-sum-exp's terms); of `x` itself otherwise. The test may
/// reject a value whose own test would pass (`exp(-inf)` is 0): the guard then takes the
/// original loop, which is exact either way.
fn finite_test(x: &Operand, defs: &HashMap<Var, Op>) -> Finite {
    let itself = Finite {
        operand: x.clone(),
        at_most: None,
    };
    let Some(v) = x.var() else {
        return itself;
    };
    match defs.get(&v) {
        Some(Op::Unary(UnOp::Exp, y)) => Finite {
            operand: y.clone(),
            at_most: Some(EXP_FINITE_BELOW),
        },
        Some(Op::Unary(UnOp::Sin | UnOp::Cos, y)) => Finite {
            operand: y.clone(),
            at_most: None,
        },
        _ => itself,
    }
}

/// The guard loop, then the step at `k` or the original loop.
fn rewrite(s: Stmt, plan: Plan, vars: &mut Vec<VarInfo>) -> Vec<Stmt> {
    let Stmt::Ifold {
        accs,
        init,
        count,
        index,
        body,
        next,
    } = s
    else {
        unreachable!("one_hot takes an ifold")
    };
    let defs = definitions(&body);
    let body_sites: Block = body
        .iter()
        .filter(|t| matches!(t, Stmt::Site(_)))
        .cloned()
        .collect();
    let count_after = count.clone();
    let body: Block = body
        .into_iter()
        .filter(|t| !matches!(t, Stmt::Site(_)))
        .collect();
    let mut out = Vec::new();
    // The guard: an ifold of a boolean over the same count.
    let ok = fresh_var(vars, Ty::Bool, "ok");
    let tests: Vec<Finite> = plan.finite.iter().map(|x| finite_test(x, &defs)).collect();
    let roots: Vec<Var> = tests
        .iter()
        .map(|t| &t.operand)
        .chain(&plan.nonzero)
        .filter_map(|x| x.var())
        .collect();
    let sliced = slice(&body, &roots, &defs);
    let (mut guard_body, renamed) = copy_fresh(&sliced, &[index], vars);
    let rn = |x: &Operand| renamed_operand(x, &renamed);
    let mut acc = Operand::Var(ok);
    let and = |guard_body: &mut Block, vars: &mut Vec<VarInfo>, acc: &mut Operand, e: Var| {
        let a = fresh_var(vars, Ty::Bool, "ok");
        guard_body.push(Stmt::Let(
            vec![a],
            Op::Binary(BinOp::And, acc.clone(), Operand::Var(e)),
        ));
        *acc = Operand::Var(a);
    };
    for t in &tests {
        let z = fresh_var(vars, Ty::F64, "z");
        let e = fresh_var(vars, Ty::Bool, "e");
        guard_body.push(Stmt::Let(
            vec![z],
            Op::Binary(BinOp::FMul, rn(&t.operand), Operand::F64(0.0)),
        ));
        guard_body.push(Stmt::Let(
            vec![e],
            Op::Binary(BinOp::FEq, Operand::Var(z), Operand::F64(0.0)),
        ));
        and(&mut guard_body, vars, &mut acc, e);
        if let Some(bound) = t.at_most {
            let b = fresh_var(vars, Ty::Bool, "e");
            guard_body.push(Stmt::Let(
                vec![b],
                Op::Binary(BinOp::FLe, rn(&t.operand), Operand::F64(bound)),
            ));
            and(&mut guard_body, vars, &mut acc, b);
        }
    }
    // Neither zero nor NaN: above or below zero.
    for y in &plan.nonzero {
        let above = fresh_var(vars, Ty::Bool, "e");
        let below = fresh_var(vars, Ty::Bool, "e");
        let e = fresh_var(vars, Ty::Bool, "e");
        guard_body.push(Stmt::Let(
            vec![above],
            Op::Binary(BinOp::FGt, rn(y), Operand::F64(0.0)),
        ));
        guard_body.push(Stmt::Let(
            vec![below],
            Op::Binary(BinOp::FLt, rn(y), Operand::F64(0.0)),
        ));
        guard_body.push(Stmt::Let(
            vec![e],
            Op::Binary(BinOp::Or, Operand::Var(above), Operand::Var(below)),
        ));
        and(&mut guard_body, vars, &mut acc, e);
    }
    out.push(Stmt::Ifold {
        accs: vec![ok],
        init: vec![Operand::Bool(true)],
        count: count.clone(),
        index: renamed[&index],
        body: guard_body,
        next: vec![acc],
    });
    out.push(Stmt::Declare(accs.clone()));
    // The step at `k`, from the initial values.
    let (step, renamed) = copy_fresh(&body, &[&[index][..], &accs].concat(), vars);
    let rn = |x: &Operand| renamed_operand(x, &renamed);
    let mut at_k = vec![Stmt::Let(
        vec![renamed[&index]],
        Op::Copy(Operand::Var(plan.k)),
    )];
    for (a, z) in accs.iter().zip(&init) {
        at_k.push(Stmt::Let(vec![renamed[a]], Op::Copy(z.clone())));
    }
    at_k.extend(step);
    for (a, n) in accs.iter().zip(&next) {
        at_k.push(Stmt::Set(*a, rn(n)));
    }
    let initial: Vec<Stmt> = accs
        .iter()
        .zip(&init)
        .map(|(a, z)| Stmt::Set(*a, z.clone()))
        .collect();
    // `k` may be any integer: at `k` only if 0 <= k < count.
    let below = fresh_var(vars, Ty::Bool, "in");
    let negative = fresh_var(vars, Ty::Bool, "in");
    let not_negative = fresh_var(vars, Ty::Bool, "in");
    let inside = fresh_var(vars, Ty::Bool, "in");
    let fast = vec![
        Stmt::Let(
            vec![below],
            Op::Binary(BinOp::ILt, Operand::Var(plan.k), count.clone()),
        ),
        Stmt::Let(
            vec![negative],
            Op::Binary(BinOp::ILt, Operand::Var(plan.k), Operand::I64(0)),
        ),
        Stmt::Let(
            vec![not_negative],
            Op::Unary(UnOp::Not, Operand::Var(negative)),
        ),
        Stmt::Let(
            vec![inside],
            Op::Binary(BinOp::And, Operand::Var(below), Operand::Var(not_negative)),
        ),
        Stmt::If {
            cond: Operand::Var(inside),
            then: at_k,
            els: initial,
        },
    ];
    // The original loop, where the guard fails: as the `for` loop `passes::loops` makes of
    // it, which this pass does not rewrite again (a copy of it inlined elsewhere keeps it).
    let (mut slow_body, renamed) = copy_fresh(&body, &[index], vars);
    let next: Vec<Operand> = next.iter().map(|x| renamed_operand(x, &renamed)).collect();
    slow_body.extend(crate::passes::loops::assign_all(&accs, next, vars));
    let mut slow_path: Vec<Stmt> = accs
        .iter()
        .zip(init)
        .map(|(a, z)| Stmt::Set(*a, z))
        .collect();
    slow_path.push(Stmt::For {
        index: renamed[&index],
        count,
        body: slow_body,
    });
    // The step at `k` records no call site: the loop's last one, if it ran, follows.
    let site_after = fuse::trailing_site(&body_sites, count_after, vars);
    // The guard, and the zeros assumed.
    let mut cond = Operand::Var(ok);
    for v in &plan.zero {
        let z = fresh_var(vars, Ty::Bool, "zero");
        let both = fresh_var(vars, Ty::Bool, "ok");
        out.push(Stmt::Let(
            vec![z],
            Op::Binary(BinOp::FEq, Operand::Var(*v), Operand::F64(0.0)),
        ));
        out.push(Stmt::Let(
            vec![both],
            Op::Binary(BinOp::And, cond, Operand::Var(z)),
        ));
        cond = Operand::Var(both);
    }
    out.push(Stmt::If {
        cond,
        then: fast,
        els: slow_path,
    });
    out.extend(site_after);
    out
}

/// A fold that does something at one index alone (`selection`): the comparison of the index
/// with `k`, and whether `k` is a real.
struct Selection {
    k: Operand,
    real: bool,
}

/// `ifold (fun a i -> if i = k then f a i else a) z n`: the step is pure computation, then
/// an `if` on the comparison of the index (or the index converted to a real) with an operand
/// `k` that the loop does not change, whose second branch only makes every next value the
/// accumulator it was (through the step's joins).
fn selection(s: &Stmt, assigned: &HashSet<Var>) -> Option<Selection> {
    let Stmt::Ifold {
        accs,
        index,
        body,
        next,
        ..
    } = s
    else {
        return None;
    };
    let (
        Stmt::If {
            cond: Operand::Var(c),
            els,
            ..
        },
        prefix,
    ) = body.split_last()?
    else {
        return None;
    };
    let mut defs: HashMap<Var, &Op> = HashMap::new();
    for t in prefix {
        match t {
            Stmt::Let(vs, op) if crate::passes::simplify::is_pure(op) => {
                if let [v] = vs[..] {
                    defs.insert(v, op);
                }
            }
            Stmt::Declare(_) | Stmt::Site(_) => {}
            _ => return None,
        }
    }
    let inside: HashSet<Var> = defined_in(body).into_iter().chain([*index]).collect();
    let invariant = |x: &Operand| match x {
        Operand::Var(v) => !inside.contains(v) && !assigned.contains(v),
        _ => true,
    };
    let is_index = |x: &Operand| *x == Operand::Var(*index);
    let converted = |x: &Operand| {
        x.var()
            .and_then(|v| defs.get(&v))
            .is_some_and(|op| matches!(op, Op::Unary(UnOp::I64ToF64, i) if is_index(i)))
    };
    let sel = match defs.get(c)? {
        Op::Binary(BinOp::IEq, x, k) | Op::Binary(BinOp::IEq, k, x)
            if is_index(x) && invariant(k) =>
        {
            Selection {
                k: k.clone(),
                real: false,
            }
        }
        Op::Binary(BinOp::FEq, x, k) | Op::Binary(BinOp::FEq, k, x)
            if converted(x) && invariant(k) && !converted(k) =>
        {
            Selection {
                k: k.clone(),
                real: true,
            }
        }
        _ => return None,
    };
    // Where the index is not `k`: the joins the second branch sets, and nothing else.
    let mut joins: HashMap<Var, &Operand> = HashMap::new();
    for t in els {
        match t {
            Stmt::Set(x, y) if inside.contains(x) => {
                joins.insert(*x, y);
            }
            Stmt::Site(_) => {}
            _ => return None,
        }
    }
    let unchanged = next.iter().zip(accs).all(|(x, a)| {
        let kept = match x {
            Operand::Var(v) if joins.contains_key(v) => joins[v],
            x => x,
        };
        *kept == Operand::Var(*a)
    });
    unchanged.then_some(sel)
}

/// The fold of `selection` as its step at `k` alone: the accumulators are declared, and set
/// to the step's next values (the step copied, from the initial values, at `k`) if `k` is an
/// index below the count, to the initial values if not.
fn select(s: Stmt, sel: Selection, vars: &mut Vec<VarInfo>) -> Vec<Stmt> {
    let Stmt::Ifold {
        accs,
        init,
        count,
        index,
        body,
        next,
    } = s
    else {
        unreachable!("selection matched an ifold")
    };
    let let1 = |vars: &mut Vec<VarInfo>, out: &mut Vec<Stmt>, ty: Ty, prefix: &str, op| {
        let v = fresh_var(vars, ty, prefix);
        out.push(Stmt::Let(vec![v], op));
        Operand::Var(v)
    };
    // The call site the loop's last step would have recorded last where it is not `k`'s (the
    // step's before its `if`, or its second branch's): recorded after the loop if it ran and
    // its last step was not `k`'s, so that an error after it reports the site it reported.
    let tail = match body.split_last() {
        Some((Stmt::If { els, .. }, prefix)) => {
            fuse::last_record(els).or_else(|| fuse::last_record(prefix))
        }
        _ => None,
    };
    let at_last = tail.map(|_| fresh_var(vars, Ty::Bool, "last"));
    let set_all = |xs: &[Operand], renamed: &HashMap<Var, Var>| -> Vec<Stmt> {
        let mut b: Vec<Stmt> = accs
            .iter()
            .zip(xs)
            .map(|(a, x)| Stmt::Set(*a, renamed_operand(x, renamed)))
            .collect();
        if let (Some(l), true) = (at_last, renamed.is_empty()) {
            b.push(Stmt::Set(l, Operand::Bool(false)));
        }
        b
    };
    let none = HashMap::new();
    let mut out = vec![Stmt::Declare(accs.clone())];
    out.extend(at_last.map(|l| Stmt::Declare(vec![l])));
    // The step at `k`, from the initial values: the body copied, its index and accumulators
    // bound first.
    let step = |vars: &mut Vec<VarInfo>, at: Operand| -> Vec<Stmt> {
        let (copy, renamed) = copy_fresh(&body, &[&accs[..], &[index]].concat(), vars);
        let mut b: Vec<Stmt> = accs
            .iter()
            .zip(&init)
            .map(|(a, z)| Stmt::Let(vec![renamed[a]], Op::Copy(z.clone())))
            .collect();
        b.push(Stmt::Let(vec![renamed[&index]], Op::Copy(at.clone())));
        b.extend(copy);
        b.extend(set_all(&next, &renamed));
        if let Some(l) = at_last {
            let last = fresh_var(vars, Ty::I64, "n");
            let is = fresh_var(vars, Ty::Bool, "last");
            let n1 = Op::Binary(BinOp::ISub, count.clone(), Operand::I64(1));
            b.push(Stmt::Let(vec![last], n1));
            let at_n1 = Op::Binary(BinOp::IEq, at, Operand::Var(last));
            b.push(Stmt::Let(vec![is], at_n1));
            b.push(Stmt::Set(l, Operand::Var(is)));
        }
        b
    };
    // `k` is at least 0 (`lo`) and below the count (`hi`); a real `k` is then an index if it
    // converts to an integer and back to itself.
    let (lo, hi, then) = if sel.real {
        let n = let1(
            vars,
            &mut out,
            Ty::F64,
            "n",
            Op::Unary(UnOp::I64ToF64, count.clone()),
        );
        let zero = Operand::F64(0.0);
        let lo = let1(
            vars,
            &mut out,
            Ty::Bool,
            "lo",
            Op::Binary(BinOp::FGe, sel.k.clone(), zero),
        );
        let hi = let1(
            vars,
            &mut out,
            Ty::Bool,
            "hi",
            Op::Binary(BinOp::FLt, sel.k.clone(), n),
        );
        let mut then = Vec::new();
        let ki = let1(
            vars,
            &mut then,
            Ty::I64,
            "k",
            Op::Unary(UnOp::F64ToI64, sel.k.clone()),
        );
        let back = let1(
            vars,
            &mut then,
            Ty::F64,
            "k",
            Op::Unary(UnOp::I64ToF64, ki.clone()),
        );
        let exact = let1(
            vars,
            &mut then,
            Ty::Bool,
            "exact",
            Op::Binary(BinOp::FEq, back, sel.k),
        );
        then.push(Stmt::If {
            cond: exact,
            then: step(vars, ki),
            els: set_all(&init, &none),
        });
        (lo, hi, then)
    } else {
        let zero = Operand::I64(0);
        let neg = let1(
            vars,
            &mut out,
            Ty::Bool,
            "neg",
            Op::Binary(BinOp::ILt, sel.k.clone(), zero),
        );
        let lo = let1(vars, &mut out, Ty::Bool, "lo", Op::Unary(UnOp::Not, neg));
        let hi = let1(
            vars,
            &mut out,
            Ty::Bool,
            "hi",
            Op::Binary(BinOp::ILt, sel.k.clone(), count.clone()),
        );
        (lo, hi, step(vars, sel.k))
    };
    let ok = let1(
        vars,
        &mut out,
        Ty::Bool,
        "ok",
        Op::Binary(BinOp::And, lo, hi),
    );
    out.push(Stmt::If {
        cond: ok,
        then,
        els: set_all(&init, &none),
    });
    if let (Some(site), Some(l)) = (tail, at_last) {
        let ran = Op::Binary(BinOp::ILt, Operand::I64(0), count);
        let ran = let1(vars, &mut out, Ty::Bool, "ran", ran);
        let not_k = Op::Unary(UnOp::Not, Operand::Var(l));
        let other = let1(vars, &mut out, Ty::Bool, "last", not_k);
        let record = Op::Binary(BinOp::And, ran, other);
        let record = let1(vars, &mut out, Ty::Bool, "ran", record);
        out.push(Stmt::If {
            cond: record,
            then: vec![Stmt::Site(site)],
            els: vec![],
        });
    }
    out
}
