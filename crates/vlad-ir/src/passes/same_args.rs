//! Parameters that every call gives the same value: the later one is read as the earlier.
//!
//! Closure conversion gives each closure its own copy of what it captures, so a procedure
//! that receives two closures over one variable (bundle adjustment's `over` and `sum-over`,
//! both over the numbers of cameras and points) has one parameter per copy, and nothing in
//! the function says that they are equal: a loop over one copy's count reading an array
//! built with the other's checks its index on every step, and fusion does not see that the
//! two loops have one count. When every call of a function passes the same variable (or the
//! same constant) for parameters `i` and `j`, the two are equal in every run of its body, and
//! `j` is read as `i` (`passes::unread` then drops `j`).
//!
//! The rounds go down the call graph: a caller whose parameters were merged passes its
//! callees one variable where it passed two. A function's calls of itself are calls like the
//! others (they must pass equal values too), so a recursive function is merged only where
//! its recursion keeps the values equal. Only specialised functions whose callers are all in
//! the program (not the entry points, exports, helpers, or guards) change.

use crate::ir::*;
use std::collections::HashMap;

/// Merges the parameters that every call passes equal values; whether any were.
pub fn run(p: &mut Program) -> bool {
    let known = internal(p);
    // Per function, the parameters read as another already.
    let mut merged: Vec<HashMap<Var, Var>> = vec![HashMap::new(); p.funcs.len()];
    let mut any = false;
    loop {
        let calls = argument_lists(p);
        let mut changed = false;
        for (id, f) in p.funcs.iter_mut().enumerate() {
            let Some(lists) = calls.get(&id).filter(|_| known[id]) else {
                continue;
            };
            let merge = merges(f, lists, &merged[id]);
            if merge.is_empty() {
                continue;
            }
            map_vars(&mut f.body, &|v| merge.get(&v).copied().unwrap_or(v));
            merged[id].extend(merge);
            changed = true;
        }
        if !changed {
            return any;
        }
        any = true;
    }
}

/// Per function: whether all its callers are calls in the program that it may change with
/// them: a specialised function, not an entry point, not a guard.
pub(crate) fn internal(p: &Program) -> Vec<bool> {
    let mut internal: Vec<bool> = p
        .ids()
        .map(|id| {
            Some(id) != p.main
                && Some(id) != p.init
                && matches!(p.func(id).kind, FuncKind::Specialised { .. })
        })
        .collect();
    for f in &p.funcs {
        walk(&f.body, &mut |s| {
            if let Stmt::Let(_, Op::Call { guard: Some(g), .. }) = s {
                internal[g.0 as usize] = false;
            }
        });
    }
    internal
}

/// Each function's calls, by its index: the argument list of each.
fn argument_lists(p: &Program) -> HashMap<usize, Vec<Vec<Operand>>> {
    let mut calls: HashMap<usize, Vec<Vec<Operand>>> = HashMap::new();
    for f in &p.funcs {
        walk(&f.body, &mut |s| match s {
            Stmt::Let(_, Op::Call { func, args, .. }) | Stmt::TailCall { func, args } => {
                calls.entry(func.0 as usize).or_default().push(args.clone());
            }
            _ => {}
        });
    }
    calls
}

/// The parameters of `f` to read as an earlier one (each mapped to the first parameter of
/// its type that every call in `lists` passes the same value), but those its body assigns and
/// those `done` maps already.
fn merges(f: &Function, lists: &[Vec<Operand>], done: &HashMap<Var, Var>) -> HashMap<Var, Var> {
    let assigned = assigned(&f.body);
    let mut merge = HashMap::new();
    for j in 1..f.params.len() {
        let pj = f.params[j];
        if assigned.contains(&pj) || done.contains_key(&pj) {
            continue;
        }
        let same = (0..j).find(|&i| {
            let pi = f.params[i];
            !merge.contains_key(&pi)
                && !done.contains_key(&pi)
                && !assigned.contains(&pi)
                && f.ty(pi) == f.ty(pj)
                && lists.iter().all(|args| same_value(&args[i], &args[j]))
        });
        if let Some(i) = same {
            merge.insert(pj, f.params[i]);
        }
    }
    merge
}

/// Whether two operands are the same value: one variable, or equal constants (reals by their
/// bits: `0.0` and `-0.0` differ).
fn same_value(a: &Operand, b: &Operand) -> bool {
    match (a, b) {
        (Operand::Var(x), Operand::Var(y)) => x == y,
        (Operand::F64(x), Operand::F64(y)) => x.to_bits() == y.to_bits(),
        (Operand::I64(x), Operand::I64(y)) => x == y,
        (Operand::Bool(x), Operand::Bool(y)) => x == y,
        _ => false,
    }
}
