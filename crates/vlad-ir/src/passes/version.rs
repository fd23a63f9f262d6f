//! Loop versioning, on a condition and on index checks.
//!
//! Unswitching: a counted loop whose body branches on a condition that does not change in
//! the loop (`if c` at the body's top level, `c` neither defined nor assigned there) runs as
//! two loops, `if c { for .. {then} } else { for .. {else} }`, each copy with the branch
//! taken (and any other branch on `c` inside it). `passes::sparse`'s guard is such a
//! condition: the direction's fast step and its slow loop were one loop body, which the C
//! compiler did not vectorise.
//!
//! On index checks: an innermost counted loop whose body checks its counter
//! against lengths defined outside it (`rt vl_index_i(site, i, n)`: `simplify` left the checks
//! it could not prove, such as `(get v i)` in a fold over the length of another array) runs
//! as two versions: when every such length is at least the count, a copy of the body without
//! those checks; otherwise the body as it was, which fails where it failed. The check was the
//! only exit from the loop's straight-line code, so without it the C compiler can vectorise
//! the loop.

use crate::ir::*;
use crate::rt::Rt;
use std::collections::HashSet;

/// The largest loop body copied for its index checks, in statements.
pub const MAX_SIZE: usize = 60;

/// The largest loop body copied for a condition, in statements.
pub const MAX_UNSWITCH_SIZE: usize = 200;

pub fn run(p: &mut Program) {
    for f in &mut p.funcs {
        let mut vars = std::mem::take(&mut f.vars);
        flat_map(&mut f.body, &mut |s| unswitch(s, &mut vars));
        let assigned = assigned(&f.body);
        flat_map(&mut f.body, &mut |s| version(s, &assigned, &mut vars));
        f.vars = vars;
    }
}

/// `for i < n { pre; if c {a} else {b}; post }` as `if c { for i < n { pre; a; post } } else
/// { for i' < n { pre'; b'; post' } }` (the second copy's variables fresh), for the first
/// top-level `if` whose condition the loop does not change. Inner loops were unswitched
/// first (`flat_map` visits children first), so a condition invariant in a loop nest is
/// tested once, outside it.
fn unswitch(s: Stmt, vars: &mut Vec<VarInfo>) -> Vec<Stmt> {
    let Stmt::For { index, count, body } = s else {
        return vec![s];
    };
    let branches = body.iter().any(|s| {
        matches!(
            s,
            Stmt::If {
                cond: Operand::Var(_),
                ..
            }
        )
    });
    if !branches || size(&body) > MAX_UNSWITCH_SIZE {
        return vec![Stmt::For { index, count, body }];
    }
    let (defined, changed) = (defined_in(&body), assigned(&body));
    let cond = body.iter().find_map(|s| match s {
        Stmt::If {
            cond: Operand::Var(c),
            ..
        } if !defined.contains(c) && !changed.contains(c) => Some(Operand::Var(*c)),
        _ => None,
    });
    let Some(cond) = cond else {
        return vec![Stmt::For { index, count, body }];
    };
    let mut then = body;
    let (mut els, renamed) = copy_fresh(&then, &[index], vars);
    take_branch(&mut then, &cond, true);
    take_branch(&mut els, &cond, false);
    vec![Stmt::If {
        cond,
        then: vec![Stmt::For {
            index,
            count: count.clone(),
            body: then,
        }],
        els: vec![Stmt::For {
            index: renamed[&index],
            count,
            body: els,
        }],
    }]
}

/// Replaces every `if cond` of `block`, nested ones included, by its branch for `value`.
fn take_branch(block: &mut Block, cond: &Operand, value: bool) {
    flat_map(block, &mut |s| match s {
        Stmt::If { cond: c, then, els } if c == *cond => {
            if value {
                then
            } else {
                els
            }
        }
        other => vec![other],
    });
}

fn version(s: Stmt, assigned: &HashSet<Var>, vars: &mut Vec<VarInfo>) -> Vec<Stmt> {
    let Stmt::For { index, count, body } = s else {
        return vec![s];
    };
    let lengths = checked_lengths(index, &body, assigned);
    let innermost = !body.iter().any(|s| {
        let mut nested = false;
        walk(std::slice::from_ref(s), &mut |s| {
            nested |= matches!(s, Stmt::For { .. } | Stmt::Loop(_))
        });
        nested
    });
    if lengths.is_empty() || !innermost || size(&body) > MAX_SIZE {
        return vec![Stmt::For { index, count, body }];
    }
    // The fast copy: the checks become copies of the counter, every variable it defines fresh.
    let mut fast = body.clone();
    walk_mut(&mut fast, &mut |s| {
        if let Stmt::Let(_, op) = s {
            let proven = matches!(op, Op::Rt(Rt::IndexI64, args)
                if args[1] == Operand::Var(index) && lengths.contains(&args[2]));
            if proven {
                *op = Op::Copy(Operand::Var(index));
            }
        }
    });
    let (fast, renamed) = copy_fresh(&fast, &[index], vars);
    // short = n0 < count or n1 < count or ...
    let mut out = Vec::new();
    let mut short: Option<Var> = None;
    for n in &lengths {
        let lt = fresh_var(vars, Ty::Bool, "short");
        out.push(Stmt::Let(
            vec![lt],
            Op::Binary(BinOp::ILt, n.clone(), count.clone()),
        ));
        short = Some(match short {
            None => lt,
            Some(prev) => {
                let or = fresh_var(vars, Ty::Bool, "short");
                out.push(Stmt::Let(
                    vec![or],
                    Op::Binary(BinOp::Or, Operand::Var(prev), Operand::Var(lt)),
                ));
                or
            }
        });
    }
    out.push(Stmt::If {
        cond: Operand::Var(short.expect("a length")),
        then: vec![Stmt::For {
            index,
            count: count.clone(),
            body,
        }],
        els: vec![Stmt::For {
            index: renamed[&index],
            count,
            body: fast,
        }],
    });
    out
}

/// The lengths, defined outside the loop and never reassigned, that its body checks its
/// counter against (in order, each once).
fn checked_lengths(index: Var, body: &[Stmt], assigned: &HashSet<Var>) -> Vec<Operand> {
    let mut inside = HashSet::new();
    walk(body, &mut |s| inside.extend(stmt_defs(s)));
    let mut out: Vec<Operand> = Vec::new();
    walk(body, &mut |s| {
        if let Stmt::Let(_, Op::Rt(Rt::IndexI64, args)) = s {
            let n = &args[2];
            let outside = match n {
                Operand::Var(v) => !inside.contains(v) && !assigned.contains(v),
                Operand::I64(_) => true,
                _ => false,
            };
            if args[1] == Operand::Var(index) && outside && !out.contains(n) {
                out.push(n.clone());
            }
        }
    });
    out
}
