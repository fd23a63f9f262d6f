//! Loop versioning, on a condition and on index checks.
//!
//! Unswitching: a counted loop whose body branches on a condition that does not change in
//! the loop (`if c` at the body's top level, `c` neither defined nor assigned there) runs as
//! two loops, `if c { for .. {then} } else { for .. {else} }`, each copy with the branch
//! taken (and any other branch on `c` inside it). `passes::sparse`'s guard is such a
//! condition: the direction's fast step and its slow loop were one loop body, which the C
//! compiler did not vectorise.
//!
//! Speculation: a loop that only computes a condition (`passes::sparse`'s guard: every
//! factor finite), then the two unswitched loops on it, `if ok { for i {fast} } else { for i
//! {slow} }`, where the fast step can neither fail nor act but fill the array both fill,
//! become one loop that computes the condition and runs the fast step together, then the slow
//! loop if the condition does not hold: `for i { guard; fast }; if !ok { for i {slow} }`.
//! The slow loop writes every element the fast one wrote, and the fast step's values where
//! the condition fails (a NaN from `inf * 0`) are never read. One pass over the data fewer:
//! at sizes that leave the cache, the guard's reads were a third of the memory traffic. The
//! slow loop must record its call site before it can fail (the copies of one body do), or its
//! error would report the fast loop's last site.
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
        speculate(&mut f.body);
        flat_map(&mut f.body, &mut |s| version(s, &mut vars));
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

/// Speculation (the module's comment), in `block` and the blocks nested in it: `for i < n
/// {g}` (a guard: it only computes, and assigns variables declared before it), statements
/// that only compute or make arrays, then `if ok { for j < n {f} } else { for k < n {s} }`
/// where `ok` is one of the guard's variables, neither loop reads those, and `f` only
/// computes and stores into arrays made between, at its own index, as `s` does.
fn speculate(block: &mut Block) {
    for s in block.iter_mut() {
        for b in children_mut(s) {
            speculate(b);
        }
    }
    let mut g = 0;
    while g < block.len() {
        let Some(at) = speculation(block, g) else {
            g += 1;
            continue;
        };
        let Stmt::For {
            index, body: guard, ..
        } = block.remove(g)
        else {
            unreachable!("a guard is a loop")
        };
        let at = at - 1;
        let Stmt::If { then, .. } = &mut block[at] else {
            unreachable!("the branch on the guard")
        };
        let Some(Stmt::For {
            index: j,
            count,
            body: fast,
        }) = then.pop()
        else {
            unreachable!("the fast loop")
        };
        // `if ok {fast} else {slow}` becomes `for j { guard; fast }; if ok {} else {slow}`.
        let mut body = guard;
        map_vars(&mut body, &|v| if v == index { j } else { v });
        body.extend(fast);
        block.insert(
            at,
            Stmt::For {
                index: j,
                count,
                body,
            },
        );
        g = at + 2;
    }
}

/// Where `block[g]` is a guard that speculation fuses: the position of the branch on it.
fn speculation(block: &[Stmt], g: usize) -> Option<usize> {
    let Stmt::For {
        count, body: guard, ..
    } = &block[g]
    else {
        return None;
    };
    // The guard only computes, and assigns only variables declared outside it.
    let inner: HashSet<Var> = defined_in(guard).into_iter().collect();
    let mut outs: HashSet<Var> = HashSet::new();
    for s in guard {
        match s {
            Stmt::Let(_, op) if crate::passes::simplify::is_pure(op) => {}
            Stmt::Set(v, _) if !inner.contains(v) => {
                outs.insert(*v);
            }
            _ => return None,
        }
    }
    // Between: pure computation, new arrays (the arrays the loops fill), sites.
    let mut made: HashSet<Var> = HashSet::new();
    let mut at = g + 1;
    loop {
        match block.get(at)? {
            Stmt::Let(vs, Op::NewArray { .. }) => made.extend(vs.iter().copied()),
            Stmt::Let(_, op) if crate::passes::simplify::is_pure(op) => {
                if op_operands(op)
                    .iter()
                    .any(|x| x.var().is_some_and(|v| outs.contains(&v)))
                {
                    return None;
                }
            }
            Stmt::Site(_) => {}
            _ => break,
        }
        at += 1;
    }
    let Stmt::If {
        cond: Operand::Var(ok),
        then,
        els,
    } = &block[at]
    else {
        return None;
    };
    let (
        [Stmt::For {
            index: j,
            count: cf,
            body: fast,
        }],
        [Stmt::For {
            index: k,
            count: cs,
            body: slow,
        }],
    ) = (then.as_slice(), els.as_slice())
    else {
        return None;
    };
    if !outs.contains(ok) || cf != count || cs != count {
        return None;
    }
    let reads_outs = |body: &[Stmt]| {
        let mut reads = false;
        walk(body, &mut |s| {
            reads |= stmt_operands(s)
                .iter()
                .any(|x| x.var().is_some_and(|v| outs.contains(&v)))
        });
        reads
    };
    let reads_guard = reads_outs(fast) || reads_outs(slow);
    let stores = |body: &[Stmt], i: Var| -> Option<Vec<(Var, u32)>> {
        let mut out = Vec::new();
        for s in body {
            if let Stmt::Store {
                array: Operand::Var(a),
                index: Operand::Var(x),
                slot,
                ..
            } = s
            {
                if *x != i || !made.contains(a) {
                    return None;
                }
                out.push((*a, *slot));
            }
        }
        out.sort_unstable();
        Some(out)
    };
    let (Some(fs), Some(ss)) = (stores(fast, *j), stores(slow, *k)) else {
        return None;
    };
    // The fast step: nothing but computing, its own variables and those stores; no
    // conversion to an integer (undefined in C for the values a failed guard lets through).
    let mut converts = false;
    walk(fast, &mut |s| {
        converts |= matches!(s, Stmt::Let(_, Op::Unary(UnOp::F64ToI64, _)))
    });
    let quiet = crate::passes::simplify::sets_only_its_own(fast)
        && fast.iter().all(|s| {
            matches!(s, Stmt::Store { .. }) || crate::passes::fuse::pure(std::slice::from_ref(s))
        });
    // The slow loop, run after the fast one, fails where it failed before only if it records
    // its site before it can fail: else an error there would report the fast loop's last.
    let mut records = false;
    walk(fast, &mut |s| records |= matches!(s, Stmt::Site(_)));
    let sited = !records || matches!(slow.first(), Some(Stmt::Site(_)));
    (quiet && sited && !converts && !reads_guard && !fs.is_empty() && fs == ss).then_some(at)
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

fn version(s: Stmt, vars: &mut Vec<VarInfo>) -> Vec<Stmt> {
    let Stmt::For { index, count, body } = s else {
        return vec![s];
    };
    let innermost = !body.iter().any(|s| {
        let mut nested = false;
        walk(std::slice::from_ref(s), &mut |s| {
            nested |= matches!(s, Stmt::For { .. } | Stmt::Loop(_))
        });
        nested
    });
    if !innermost || size(&body) > MAX_SIZE {
        return vec![Stmt::For { index, count, body }];
    }
    // A length the loop does not assign has, all through the loop, the value it had before
    // the loop, where the versions' test reads it (it may be a variable assigned earlier: the
    // length of the first of some arrays, or 0 if there are none).
    let assigned = assigned(&body);
    let lengths = checked_lengths(index, &body, &assigned);
    if lengths.is_empty() || count.var().is_some_and(|c| assigned.contains(&c)) {
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

/// The lengths, defined outside the loop and not assigned in it (`assigned`), that its body
/// checks its counter against (in order, each once).
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
