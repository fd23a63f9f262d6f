//! Inlining of small functions that neither allocate nor recurse: mostly the steps of `build`
//! and `ifold` (the lowering makes every procedure a function, so a loop's body is a call of
//! its step). The C compiler inlines them too, but only after this IR has lost the facts that
//! `simplify` needs: that the step's index is the loop's counter, below the loop's count, and
//! that the count is the length of the array the step reads. With the step's body in the loop,
//! `simplify` drops the index checks that those facts prove.
//!
//! Only functions that do not allocate are inlined: a call of one that does is where
//! `passes::marks` releases what it allocated, and inlining it would keep that memory until
//! the caller returns. Functions that write (stores into arrays, in-place accumulation, globals)
//! are left alone too: `passes::carry` and `marks::accumulating` reason about them by calls.

use crate::ir::*;
use crate::passes::marks;
use std::collections::HashMap;

/// The largest callee inlined, in statements (nested ones included): enough for the steps of
/// numerical loops, small enough that the program grows little.
pub const MAX_SIZE: usize = 40;

pub fn run(p: &mut Program) {
    let allocating = marks::allocating(p);
    let edges = call_graph(p);
    // Callees before callers: a callee is inlined with its own calls inlined already.
    let mut ok = vec![false; p.funcs.len()];
    for comp in vlad_core::graph::tarjan(p.funcs.len(), &edges) {
        let recursive = comp.len() > 1 || edges[comp[0]].contains(&comp[0]);
        for &id in &comp {
            let mut wanted: Vec<usize> = edges[id].iter().copied().filter(|&c| ok[c]).collect();
            wanted.sort_unstable();
            wanted.dedup();
            if !wanted.is_empty() {
                let callees: HashMap<u32, Function> = wanted
                    .iter()
                    .map(|&c| (c as u32, p.funcs[c].clone()))
                    .collect();
                let f = &mut p.funcs[id];
                let mut vars = std::mem::take(&mut f.vars);
                flat_map(&mut f.body, &mut |s| match s {
                    Stmt::Let(
                        results,
                        Op::Call {
                            func,
                            args,
                            guard: None,
                        },
                    ) if callees.contains_key(&func.0) => {
                        expand(&callees[&func.0], &args, &results, &mut vars)
                    }
                    other => vec![other],
                });
                f.vars = vars;
            }
            ok[id] =
                !recursive && !allocating.contains(&FuncId(id as u32)) && inlinable(&p.funcs[id]);
        }
    }
}

/// The call graph: each function's callees, by index.
fn call_graph(p: &Program) -> Vec<Vec<usize>> {
    p.funcs
        .iter()
        .map(|f| callees(&f.body).iter().map(|c| c.0 as usize).collect())
        .collect()
}

/// Whether a function (already known not to allocate nor recurse) may be inlined: a small
/// specialised function that writes nothing and returns only at the ends of its blocks.
pub fn inlinable(f: &Function) -> bool {
    if !matches!(f.kind, FuncKind::Specialised { .. }) || size(&f.body) > MAX_SIZE {
        return false;
    }
    let mut writes = false;
    walk(&f.body, &mut |s| {
        writes |= match s {
            Stmt::Store { .. }
            | Stmt::SetField { .. }
            | Stmt::SetGlobal(..)
            | Stmt::Release(_)
            | Stmt::Loop(_)
            | Stmt::Continue
            | Stmt::Member { .. }
            | Stmt::MachineCall { .. }
            | Stmt::MachineTailCall { .. } => true,
            Stmt::Let(_, op) => matches!(
                op,
                Op::Mark
                    | Op::ReleaseCarrying { .. }
                    | Op::Collect { .. }
                    | Op::Rt(crate::Rt::AccOwned | crate::Rt::AccMark, _)
                    | Op::Call { guard: Some(_), .. }
            ),
            _ => false,
        }
    });
    !writes && returns_at_ends(&f.body)
}

/// Whether every return of a block is its last statement, or in an `if` or `switch` that is,
/// with the same property: the returns can become assignments of the call's results, with no
/// jump out of the middle of the callee.
fn returns_at_ends(block: &[Stmt]) -> bool {
    block.iter().enumerate().all(|(i, s)| {
        let last = i + 1 == block.len();
        match s {
            Stmt::Return(_) | Stmt::TailCall { .. } => last,
            Stmt::If { then, els, .. } => {
                !returns(s) || (last && returns_at_ends(then) && returns_at_ends(els))
            }
            Stmt::Switch { cases, default, .. } => {
                !returns(s)
                    || (last
                        && cases.iter().all(|(_, b)| returns_at_ends(b))
                        && returns_at_ends(default))
            }
            _ => !returns(s),
        }
    })
}

/// Whether a statement returns, itself or in a nested block.
fn returns(s: &Stmt) -> bool {
    let mut yes = false;
    walk(std::slice::from_ref(s), &mut |s| {
        yes |= matches!(s, Stmt::Return(_) | Stmt::TailCall { .. })
    });
    yes
}

/// The statements that run `callee` on `args` in the caller (whose variables are `vars`),
/// defining `results` as the call did. The
/// callee's variables are renamed to fresh ones of the caller; its parameters are copies of the
/// arguments; its returns assign the results (a body that returns once, at its end, defines
/// them by copies).
pub fn expand(
    callee: &Function,
    args: &[Operand],
    results: &[Var],
    vars: &mut Vec<VarInfo>,
) -> Vec<Stmt> {
    let renamed: Vec<Var> = callee
        .vars
        .iter()
        .map(|v| fresh_var(vars, v.ty.clone(), &format!("{}_", v.name)))
        .collect();
    let mut body = callee.body.clone();
    map_vars(&mut body, &|v| renamed[v.0 as usize]);
    let mut out: Vec<Stmt> = callee
        .params
        .iter()
        .zip(args)
        .map(|(p, a)| Stmt::Let(vec![renamed[p.0 as usize]], Op::Copy(a.clone())))
        .collect();
    let once = matches!(body.last(), Some(Stmt::Return(_)))
        && body[..body.len() - 1].iter().all(|s| !returns(s));
    if once {
        let Some(Stmt::Return(xs)) = body.pop() else {
            unreachable!("checked above")
        };
        out.extend(body);
        out.extend(
            results
                .iter()
                .zip(xs)
                .map(|(r, x)| Stmt::Let(vec![*r], Op::Copy(x))),
        );
        return out;
    }
    out.push(Stmt::Declare(results.to_vec()));
    flat_map(&mut body, &mut |s| match s {
        Stmt::Return(xs) => results
            .iter()
            .zip(xs)
            .map(|(r, x)| Stmt::Set(*r, x))
            .collect(),
        Stmt::TailCall { func, args } => {
            let tmps: Vec<Var> = results
                .iter()
                .map(|r| {
                    let info = vars[r.0 as usize].clone();
                    fresh_var(vars, info.ty, &format!("{}_", info.name))
                })
                .collect();
            let mut v = vec![Stmt::Let(
                tmps.clone(),
                Op::Call {
                    func,
                    args,
                    guard: None,
                },
            )];
            v.extend(
                results
                    .iter()
                    .zip(tmps)
                    .map(|(r, t)| Stmt::Set(*r, Operand::Var(t))),
            );
            v
        }
        other => vec![other],
    });
    out.extend(body);
    out
}
