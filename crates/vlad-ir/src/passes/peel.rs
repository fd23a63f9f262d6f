//! The first step of a loop that branches on whether it is the first, run before the loop.
//!
//! A reverse sweep's accumulator starts as a lazy zero: the sweep's first step makes the array
//! it adds into, and every later step adds into that array in place. The lowering carries a
//! flag for it in the `ifold` (`#t` before the first step, `#f` after each), and the step
//! branches on it. So every step tests the flag, and the loop allocates (on its first step
//! only), which makes `carry` test at every back edge whether a collection is due. An `ifold`
//! with an accumulator that starts as one boolean constant and that every step sets to the
//! other, read by a branch of the step, runs its first step before the loop, where the loop
//! runs at all, and the other steps in a loop from index 1 in which the flag is the constant
//! it has there. `simplify` then keeps only the branch each copy takes, and a loop whose steps
//! no longer allocate is not collected (`carry`).
//!
//! The loop's count is the old count less one (no step runs where that is not positive), and
//! its index the old index less one: `simplify` knows that `j + 1` is below `n` for a counter
//! `j` below `n - 1`, so the sweep's reads of its tape stay unchecked.

use crate::ir::*;
use crate::rt::Rt;

/// The largest step peeled, in statements (`code_size`): the step is copied once.
const MAX_PEELED: usize = 400;

pub fn run(p: &mut Program) {
    let alloc = super::marks::allocating(p);
    for f in &mut p.funcs {
        let mut vars = std::mem::take(&mut f.vars);
        let mut changed = false;
        flat_map(&mut f.body, &mut |s| peel(s, &mut vars, &mut changed));
        f.vars = vars;
        if changed {
            super::simplify::function(f);
            if owned_accumulators(f, &alloc) {
                // The first round makes the accumulator that each step now passes on its
                // own (a variable assigned once); the second sees the step pass it on as
                // itself (`simplify`'s invariant accumulators).
                super::simplify::function(f);
                super::simplify::function(f);
            }
        }
    }
}

/// How a variable is defined, for `owned_accumulators`.
enum Def {
    /// `let v = op`.
    Let(Op),
    /// `v := x`.
    Set(Operand),
}

/// Makes `vl_acc_owned(a)` true for each accumulator `a` of an `ifold` that is its own array at
/// every step: it starts as an array marked its own (`vl_acc_mark`; null where no step runs,
/// which the test would not survive), and every step passes on such an array, or `a` itself
/// (its own at the start of the step: nothing in the function clears a mark, `vl_acc_clear`).
/// Once `peel` ran a sweep's first step, which makes its accumulator, before the loop, the
/// loop's test is then always true, and the copy it guarded (an allocation at every step, for
/// `carry`) is dead. Only in a step that then allocates nothing (no call of a function in
/// `alloc` either): `carry` tells a step that adds in place by its test, and it collects the
/// loop, never copies its accumulators down, only if the step allocates. Whether anything
/// changed.
fn owned_accumulators(f: &mut Function, alloc: &std::collections::HashSet<FuncId>) -> bool {
    let mut defs: std::collections::HashMap<Var, Vec<Def>> = Default::default();
    let mut checks: std::collections::HashMap<Var, Var> = Default::default();
    let mut clears = false;
    walk(&f.body, &mut |s| match s {
        Stmt::Let(vs, op) => {
            match (&vs[..], op) {
                ([c], Op::Rt(Rt::AccOwned, xs)) => {
                    if let [Operand::Var(a)] = &xs[..] {
                        checks.insert(*c, *a);
                    }
                }
                (_, Op::Rt(Rt::AccClear, _)) => clears = true,
                _ => {}
            }
            if let [v] = &vs[..] {
                defs.entry(*v).or_default().push(Def::Let(op.clone()));
            }
        }
        Stmt::Set(v, x) => defs.entry(*v).or_default().push(Def::Set(x.clone())),
        _ => {}
    });
    if clears || checks.is_empty() {
        return false;
    }
    /// Whether `x` is an array marked its own wherever it is read, `a` being one at the start
    /// of the step.
    fn owned(
        x: &Operand,
        a: Var,
        defs: &std::collections::HashMap<Var, Vec<Def>>,
        depth: usize,
    ) -> bool {
        let Operand::Var(v) = x else {
            return *x == Operand::Null;
        };
        if *v == a {
            return true;
        }
        if depth == 0 {
            return false;
        }
        match defs.get(v).map(|d| &d[..]) {
            Some([Def::Let(Op::Rt(Rt::AccMark, _))]) => true,
            Some([Def::Let(Op::Copy(y))]) => owned(y, a, defs, depth - 1),
            // `a` itself counts (above): it is the loop's own at the start of the step, and
            // nothing clears a mark, so a step that found it its own and passes it on is covered.
            Some(sets) if !sets.is_empty() => sets.iter().all(|d| match d {
                Def::Set(y) => owned(y, a, defs, depth - 1),
                Def::Let(_) => false,
            }),
            _ => false,
        }
    }
    let mut changed = false;
    walk_mut(&mut f.body, &mut |s| {
        let Stmt::Ifold {
            accs,
            init,
            next,
            body,
            ..
        } = s
        else {
            return;
        };
        let always: Vec<Var> = (0..accs.len())
            .filter(|&k| owned(&init[k], accs[k], &defs, 8) && owned(&next[k], accs[k], &defs, 8))
            .map(|k| accs[k])
            .collect();
        let test = |c: &Operand| {
            c.var()
                .is_some_and(|c| checks.get(&c).is_some_and(|a| always.contains(a)))
        };
        // The step as it runs with those tests true.
        let mut taken = body.clone();
        walk_mut(&mut taken, &mut |s| {
            if let Stmt::If { cond, els, .. } = s {
                if test(cond) {
                    els.clear();
                }
            }
        });
        if always.is_empty() || super::marks::block_allocates(&taken, alloc) {
            return;
        }
        walk_mut(body, &mut |s| {
            if let Stmt::Let(vs, op @ Op::Rt(Rt::AccOwned, _)) = s {
                if vs.first().is_some_and(|c| test(&Operand::Var(*c))) {
                    *op = Op::Copy(Operand::Bool(true));
                    changed = true;
                }
            }
        });
    });
    changed
}

/// The accumulator of an `ifold` that starts as one boolean and that every step sets to the
/// other (`next` that constant), with a branch of the step on it: its position and the value
/// it has from the second step on.
fn first_step_flag(
    accs: &[Var],
    init: &[Operand],
    body: &[Stmt],
    next: &[Operand],
) -> Option<(usize, bool)> {
    (0..accs.len()).find_map(|k| {
        let (Operand::Bool(first), Operand::Bool(later)) = (&init[k], &next[k]) else {
            return None;
        };
        let mut branches = false;
        walk(body, &mut |s| {
            branches |= matches!(s, Stmt::If { cond: Operand::Var(c), .. } if *c == accs[k]);
        });
        (first != later && branches).then_some((k, *later))
    })
}

/// `s` with its first step peeled, if it is such an `ifold` (`first_step_flag`).
fn peel(s: Stmt, vars: &mut Vec<VarInfo>, changed: &mut bool) -> Vec<Stmt> {
    let flag = match &s {
        Stmt::Ifold {
            accs,
            init,
            body,
            next,
            ..
        } => {
            // The first step's arrays are then older than the loop's mark: a later step that
            // stored into them a pointer to what it allocated would hide it from the loop's
            // collections, which copy what the values they keep reach above the mark. So
            // only accumulators that hold no pointer, or are flat arrays of numbers.
            let flat = accs.iter().all(|a| {
                let t = &vars[a.0 as usize].ty;
                !t.holds_pointer() || t.is_pointer_free_array()
            });
            first_step_flag(accs, init, body, next)
                .filter(|_| flat && code_size(body) <= MAX_PEELED)
        }
        _ => None,
    };
    let Some((k, later)) = flag else {
        return vec![s];
    };
    let Stmt::Ifold {
        accs,
        init,
        count,
        index,
        mut body,
        next,
    } = s
    else {
        unreachable!("an ifold")
    };
    *changed = true;
    let ty = |vars: &Vec<VarInfo>, v: Var| vars[v.0 as usize].ty.clone();
    let mut out = Vec::new();
    // The accumulators after the first step (their initial values where no step runs).
    let after: Vec<Var> = accs
        .iter()
        .map(|&a| {
            let name = copy_prefix(&vars[a.0 as usize].name);
            fresh_var(vars, ty(vars, a), &name)
        })
        .collect();
    out.push(Stmt::Declare(after.clone()));
    let runs = fresh_var(vars, Ty::Bool, "runs");
    out.push(Stmt::Let(
        vec![runs],
        Op::Binary(BinOp::ILt, Operand::I64(0), count.clone()),
    ));
    let (mut first, then) = ifold_step_copy(&accs, index, &body, &next, 0, &init, vars);
    for (a, x) in after.iter().zip(then) {
        first.push(Stmt::Set(*a, x));
    }
    let none: Block = after
        .iter()
        .zip(&init)
        .map(|(a, x)| Stmt::Set(*a, x.clone()))
        .collect();
    out.push(Stmt::If {
        cond: Operand::Var(runs),
        then: first,
        els: none,
    });
    // The other steps: the flag is `later` in each, and the index one more than the loop's.
    let rest = fresh_var(vars, Ty::I64, "n");
    out.push(Stmt::Let(
        vec![rest],
        Op::Binary(BinOp::ISub, count, Operand::I64(1)),
    ));
    let flag = accs[k];
    walk_mut(&mut body, &mut |s| {
        for x in stmt_operands_mut(s) {
            if *x == Operand::Var(flag) {
                *x = Operand::Bool(later);
            }
        }
    });
    let j = fresh_var(vars, Ty::I64, &copy_prefix(&vars[index.0 as usize].name));
    body.insert(
        0,
        Stmt::Let(
            vec![index],
            Op::Binary(BinOp::IAdd, Operand::Var(j), Operand::I64(1)),
        ),
    );
    out.push(Stmt::Ifold {
        accs,
        init: after.into_iter().map(Operand::Var).collect(),
        count: Operand::Var(rest),
        index: j,
        body,
        next,
    });
    out
}
