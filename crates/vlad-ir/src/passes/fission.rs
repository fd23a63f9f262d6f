//! Two rewrites of `ifold`s that split what one loop computes, so that a part that does not
//! depend on the rest can leave an enclosing loop (loop-invariant code motion in `simplify`).
//!
//! **Fission** (paper 002 Fig. 7g): the accumulators of an `ifold` fall into groups that do not
//! read each other (the primal sum of log-sum-exp and its tangent, once the tangent's seed is a
//! one-hot computed in the loop: the tangent reads the primal's terms, not its running sum);
//! each group gets a loop of its own, with the part of the step it needs. In forward-mode
//! `grad`, the primal group does not depend on the entry differentiated, and is then computed
//! once instead of once per entry.
//!
//! **Last writes**: an accumulator whose step either keeps it or replaces it by a value that
//! depends only on the index and on what the loop does not change (the tangent of a running
//! maximum: the one-hot entry of the index where the maximum last changed) is computed from the
//! index of the last replacement, an integer accumulator, and one evaluation of the value at
//! that index after the loop. The loop then no longer depends on the entry differentiated.
//!
//! Both are exact: every value is computed by the same operations on the same operands.

use crate::ir::*;
use crate::passes::fuse;
use std::collections::{HashMap, HashSet};

/// Splits and rewrites the `ifold`s of `f`; whether any was.
pub fn function(f: &mut Function) -> bool {
    let mut vars = std::mem::take(&mut f.vars);
    let mut changed = false;
    flat_map(&mut f.body, &mut |s| {
        if let Some(out) = last_write(&s, &mut vars) {
            changed = true;
            return out;
        }
        match split(&s, &mut vars) {
            Some(out) => {
                changed = true;
                out
            }
            None => vec![s],
        }
    });
    f.vars = vars;
    changed
}

/// For each accumulator (by position), the accumulators its next value needs, the step's
/// effects and branch conditions included (what `fuse::needed_vars` keeps).
fn dependencies(accs: &[Var], body: &[Stmt], next: &[Operand]) -> Vec<HashSet<usize>> {
    (0..accs.len())
        .map(|k| {
            let needed = fuse::needed_vars(body, next, &HashSet::from([k]));
            (0..accs.len())
                .filter(|j| needed.contains(&accs[*j]))
                .collect()
        })
        .collect()
}

fn split(s: &Stmt, vars: &mut Vec<VarInfo>) -> Option<Vec<Stmt>> {
    let Stmt::Ifold {
        accs,
        init,
        count,
        index,
        body,
        next,
    } = s
    else {
        return None;
    };
    if accs.len() < 2 || !fuse::pure(body) {
        return None;
    }
    // The groups: connected components of the dependencies.
    let deps = dependencies(accs, body, next);
    let mut group: Vec<usize> = (0..accs.len()).collect();
    fn find(g: &mut Vec<usize>, k: usize) -> usize {
        if g[k] != k {
            let r = find(g, g[k]);
            g[k] = r;
        }
        g[k]
    }
    for (k, ds) in deps.iter().enumerate() {
        for &j in ds {
            let (a, b) = (find(&mut group, k), find(&mut group, j));
            group[a] = b;
        }
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut seen: HashMap<usize, usize> = HashMap::new();
    for k in 0..accs.len() {
        let r = find(&mut group, k);
        let g = *seen.entry(r).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(k);
    }
    if groups.len() < 2 {
        return None;
    }
    let mut out = Vec::new();
    for g in groups {
        let (mut copy, renamed) = copy_fresh(body, &[*index], vars);
        let nexts: Vec<Operand> = next.iter().map(|x| renamed_operand(x, &renamed)).collect();
        let live: HashSet<usize> = g.iter().copied().collect();
        fuse::keep_needed(&mut copy, &nexts, &live);
        out.push(Stmt::Ifold {
            accs: g.iter().map(|&k| accs[k]).collect(),
            init: g.iter().map(|&k| init[k].clone()).collect(),
            count: count.clone(),
            index: renamed[index],
            body: copy,
            next: g.iter().map(|&k| nexts[k].clone()).collect(),
        });
    }
    Some(out)
}

/// An accumulator that is kept or replaced by a value of the index alone: the loop tracks the
/// index of the last replacement instead (`-1`: none), and the value is computed once after.
fn last_write(s: &Stmt, vars: &mut Vec<VarInfo>) -> Option<Vec<Stmt>> {
    let Stmt::Ifold {
        accs,
        init,
        count,
        index,
        body,
        next,
    } = s
    else {
        return None;
    };
    if !fuse::pure(body) {
        return None;
    }
    let inner: HashSet<Var> = {
        let mut d = HashSet::new();
        walk(body, &mut |t| d.extend(stmt_defs(t)));
        d
    };
    let mut reads: HashMap<Var, usize> = HashMap::new();
    walk(body, &mut |t| {
        for x in stmt_operands(t) {
            if let Operand::Var(v) = x {
                *reads.entry(*v).or_default() += 1;
            }
        }
    });
    for x in next {
        if let Operand::Var(v) = x {
            *reads.entry(*v).or_default() += 1;
        }
    }
    for (p, acc) in accs.iter().enumerate() {
        let Operand::Var(w) = next[p] else {
            continue;
        };
        if !body
            .iter()
            .any(|t| matches!(t, Stmt::Declare(vs) if vs.contains(&w)))
        {
            continue;
        }
        // `w` is declared at the top of the step and assigned in both branches of one `if`
        // there: the accumulator in one, a value in the other.
        let Some(at) = body.iter().position(
            |t| matches!(t, Stmt::If { then, els, .. } if sets_of(then, w) + sets_of(els, w) > 0),
        ) else {
            continue;
        };
        let Stmt::If { then, els, .. } = &body[at] else {
            continue;
        };
        let mut total_sets = 0;
        walk(body, &mut |t| {
            total_sets += usize::from(matches!(t, Stmt::Set(u, _) if *u == w))
        });
        if sets_of(then, w) != 1 || sets_of(els, w) != 1 || total_sets != 2 {
            continue;
        }
        let keeps = |b: &Block| {
            b.iter()
                .any(|t| matches!(t, Stmt::Set(u, Operand::Var(a)) if *u == w && a == acc))
        };
        let (write, write_then) = if keeps(els) {
            (then, true)
        } else if keeps(then) {
            (els, false)
        } else {
            continue;
        };
        // The accumulator is read only where it is kept, `w` only as the next value.
        if reads.get(acc).copied().unwrap_or(0) != 1 || reads.get(&w).copied().unwrap_or(0) != 1 {
            continue;
        }
        let Some(value) = write.iter().find_map(|t| match t {
            Stmt::Set(u, x) if *u == w => Some(x.clone()),
            _ => None,
        }) else {
            continue;
        };
        // The value's code: the branch but its assignments at the top, reading the index, what
        // it defines, and what the loop does not define.
        let code: Block = write
            .iter()
            .filter(|t| !matches!(t, Stmt::Set(..)))
            .cloned()
            .collect();
        let mut own: HashSet<Var> = HashSet::new();
        walk(&code, &mut |t| {
            own.extend(stmt_defs(t));
            if let Stmt::Set(u, _) = t {
                own.insert(*u);
            }
        });
        let mut ok = fuse::pure(&code);
        let fine =
            |v: &Var| v == index || own.contains(v) || !inner.contains(v) && !accs.contains(v);
        walk(&code, &mut |t| {
            for x in stmt_operands(t) {
                if let Operand::Var(v) = x {
                    ok &= fine(v);
                }
            }
        });
        // (A value that is the index itself is what this rewrite makes: left as it is.)
        if !ok || value.var().is_some_and(|v| !fine(&v) || v == *index) {
            continue;
        }
        // The rewritten loop.
        let last = fresh_var(vars, Ty::I64, "last");
        let wl = fresh_var(vars, Ty::I64, "last");
        let mut new_body = body.clone();
        for t in new_body.iter_mut() {
            if let Stmt::Declare(vs) = t {
                if vs.contains(&w) {
                    vs.retain(|u| *u != w);
                    vs.push(wl);
                }
            }
        }
        if let Stmt::If { then, els, .. } = &mut new_body[at] {
            let (wb, kb) = if write_then { (then, els) } else { (els, then) };
            for t in wb.iter_mut() {
                if matches!(t, Stmt::Set(u, _) if *u == w) {
                    *t = Stmt::Set(wl, Operand::Var(*index));
                }
            }
            for t in kb.iter_mut() {
                if matches!(t, Stmt::Set(u, _) if *u == w) {
                    *t = Stmt::Set(wl, Operand::Var(last));
                }
            }
        }
        let mut new_accs = accs.clone();
        let mut new_init = init.clone();
        let mut new_next = next.clone();
        new_accs[p] = last;
        new_init[p] = Operand::I64(-1);
        new_next[p] = Operand::Var(wl);
        let mut out = vec![Stmt::Ifold {
            accs: new_accs,
            init: new_init,
            count: count.clone(),
            index: *index,
            body: new_body,
            next: new_next,
        }];
        // After it: the initial value, or the value at the last replacement.
        let (copy, renamed) = copy_fresh(&code, &[*index], vars);
        let mut at_last = vec![Stmt::Let(
            vec![renamed[index]],
            Op::Copy(Operand::Var(last)),
        )];
        at_last.extend(copy);
        let value = renamed_operand(&value, &renamed);
        at_last.push(Stmt::Set(*acc, value));
        let none = fresh_var(vars, Ty::Bool, "none");
        out.push(Stmt::Declare(vec![*acc]));
        out.push(Stmt::Let(
            vec![none],
            Op::Binary(BinOp::ILt, Operand::Var(last), Operand::I64(0)),
        ));
        out.push(Stmt::If {
            cond: Operand::Var(none),
            then: vec![Stmt::Set(*acc, init[p].clone())],
            els: at_last,
        });
        return Some(out);
    }
    None
}

/// The assignments of `w` at the top of a block.
fn sets_of(b: &Block, w: Var) -> usize {
    b.iter()
        .filter(|t| matches!(t, Stmt::Set(u, _) if *u == w))
        .count()
}
