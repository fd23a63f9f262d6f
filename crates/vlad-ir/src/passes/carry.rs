//! Loops that run in constant memory.
//!
//! **Releases before tail calls.** A tail call passes on nothing that the current call of the
//! function allocated when every pointer argument is one of the function's own parameters
//! (allocated before it was entered), and the function stores nothing in a global. Its result is the callee's, so everything allocated since
//! the function was entered is garbage: the function takes a mark on entry and releases it
//! before such a call. A tail-recursive loop that builds arrays at each step and carries only
//! reals then runs in constant memory.
//!
//! **Loops that carry arrays.** A loop that passes an array it built to its next step (a
//! simulation stepping a state vector) needs more: where the array's elements hold no
//! pointers, it is copied down to the mark (`ReleaseCarrying`; flat arrays are immutable, so a
//! copy is as good). The copy must replace the previous step's array, so the mark has to stay
//! where it was on the loop's first entry: the function becomes a `Loop`, taking the mark once,
//! and its self tail calls assign the parameters and `Continue`. A pointer parameter may then
//! hold something an earlier step allocated above the mark, so a release is allowed only where
//! each pointer argument is copied or is a parameter that every self tail call passes on
//! unchanged (still the caller's, below the mark).
//!
//! **`ifold`s that carry arrays** take a mark before the loop and, after each step, release it
//! keeping the accumulator's arrays, copied down.

use crate::ir::*;
use std::collections::HashSet;

pub fn run(p: &mut Program) {
    let alloc = super::marks::allocating(p);
    // What a global holds must outlive the function that stored it (the constants'
    // initialisation, and the entry point that calls it): no release there.
    let globals = super::marks::setting_globals(p);
    // A step that adds into its accumulator's arrays in place keeps them where they are:
    // copying them down would cost their length at every step.
    let accumulating = super::marks::accumulating(p);
    let params: Vec<Vec<Ty>> = p
        .funcs
        .iter()
        .map(|f| f.params.iter().map(|v| f.ty(*v).clone()).collect())
        .collect();
    for id in p.ids() {
        let f = p.func_mut(id);
        if alloc.contains(&id) && !globals.contains(&id) {
            release_before_tail_calls(f, id, &params, accumulating.contains(&id));
        }
        let mut vars = std::mem::take(&mut f.vars);
        carry_ifolds(&mut f.body, &mut vars, &accumulating);
        f.vars = vars;
    }
}

/// The tail calls of a block (nested ones included), in order.
fn tail_calls(block: &[Stmt]) -> Vec<(FuncId, Vec<Operand>)> {
    let mut out = Vec::new();
    walk(block, &mut |s| {
        if let Stmt::TailCall { func, args } = s {
            out.push((*func, args.clone()));
        }
    });
    out
}

fn release_before_tail_calls(f: &mut Function, me: FuncId, params: &[Vec<Ty>], accumulating: bool) {
    let own = f.params.clone();
    let calls = tail_calls(&f.body);
    if calls.is_empty() {
        return;
    }
    // The pointer parameters every self tail call passes on unchanged, in place.
    let invariant: Vec<bool> = own
        .iter()
        .enumerate()
        .map(|(j, v)| {
            f.ty(*v).holds_pointer()
                && calls
                    .iter()
                    .filter(|(k, _)| *k == me)
                    .all(|(_, args)| args.get(j).and_then(Operand::var) == Some(*v))
        })
        .collect();
    // A loop that adds into an array in place carries it as it is: copying it down would cost
    // its length at every step (it is released only where it is the loop's own parameter).
    let carriable: Vec<bool> = own
        .iter()
        .map(|v| !accumulating && f.ty(*v).is_pointer_free_array())
        .collect();
    let is_own = |x: &Operand| x.var().is_some_and(|v| own.contains(&v));
    let is_invariant = |x: &Operand| {
        x.var()
            .is_some_and(|v| own.iter().zip(&invariant).any(|(p, inv)| *inv && *p == v))
    };
    // The arguments to copy at a releasing call (`None`: no release there), with the loop
    // (`looped`) or without.
    let plan = |k: FuncId, args: &[Operand], looped: bool| -> Option<Vec<usize>> {
        let callee = &params[k.0 as usize];
        if args.len() != callee.len() {
            return None;
        }
        let mut copied = Vec::new();
        for (j, (a, ty)) in args.iter().zip(callee).enumerate() {
            let pointer = ty.holds_pointer() && !matches!(a, Operand::Null | Operand::Global(_));
            if !pointer || (!looped && is_own(a)) || (looped && is_invariant(a)) {
                continue;
            }
            if looped && k == me && carriable.get(j) == Some(&true) {
                copied.push(j);
            } else {
                return None;
            }
        }
        Some(copied)
    };
    let looped = calls
        .iter()
        .any(|(k, args)| *k == me && plan(*k, args, true).is_some_and(|c| !c.is_empty()));
    if calls
        .iter()
        .all(|(k, args)| plan(*k, args, looped).is_none())
    {
        return;
    }
    let entry = f.new_var(Ty::Mark, "entry");
    let mut vars = std::mem::take(&mut f.vars);
    flat_map(&mut f.body, &mut |s| {
        let Stmt::TailCall { func, args } = &s else {
            return vec![s];
        };
        let Some(copied) = plan(*func, args, looped) else {
            return vec![s];
        };
        let (func, mut args) = (*func, args.clone());
        let mut out = Vec::new();
        if copied.is_empty() {
            out.push(Stmt::Release(Operand::Var(entry)));
        } else {
            let copies: Vec<Var> = copied
                .iter()
                .map(|&j| fresh_var(&mut vars, params[func.0 as usize][j].clone(), "c"))
                .collect();
            out.push(Stmt::Let(
                copies.clone(),
                Op::ReleaseCarrying {
                    mark: Operand::Var(entry),
                    arrays: copied.iter().map(|&j| args[j].clone()).collect(),
                },
            ));
            for (&j, c) in copied.iter().zip(copies) {
                args[j] = Operand::Var(c);
            }
        }
        if looped && func == me {
            // The parameters all at once (an argument may be another parameter).
            let temps: Vec<Var> = own
                .iter()
                .map(|p| {
                    let ty = vars[p.0 as usize].ty.clone();
                    fresh_var(&mut vars, ty, "n")
                })
                .collect();
            for (t, a) in temps.iter().zip(args) {
                out.push(Stmt::Let(vec![*t], Op::Copy(a)));
            }
            for (p, t) in own.iter().zip(temps) {
                out.push(Stmt::Set(*p, Operand::Var(t)));
            }
            out.push(Stmt::Continue);
        } else {
            out.push(Stmt::TailCall { func, args });
        }
        out
    });
    f.vars = vars;
    let body = std::mem::take(&mut f.body);
    f.body = vec![Stmt::Let(vec![entry], Op::Mark)];
    if looped {
        f.body.push(Stmt::Loop(body));
    } else {
        f.body.extend(body);
    }
}

/// Marks and copying releases for the `ifold`s whose accumulators' pointers are all flat
/// arrays without pointers.
fn carry_ifolds(block: &mut Block, vars: &mut Vec<VarInfo>, accumulating: &HashSet<FuncId>) {
    flat_map(block, &mut |mut s| {
        let Stmt::Ifold {
            accs, body, next, ..
        } = &mut s
        else {
            return vec![s];
        };
        let tys: Vec<Ty> = accs.iter().map(|a| vars[a.0 as usize].ty.clone()).collect();
        let carried: Vec<usize> = (0..tys.len()).filter(|&j| tys[j].holds_pointer()).collect();
        if carried.is_empty() || !carried.iter().all(|&j| tys[j].is_pointer_free_array()) {
            return vec![s];
        }
        // A step that stores into an array (the tape of `%ifold-tape`) may keep in it what the
        // step allocated: nothing may be released. One that accumulates in place must not
        // move its accumulator.
        let mut keep = false;
        walk(body, &mut |x| keep |= matches!(x, Stmt::Store { .. }));
        if keep || callees(body).iter().any(|c| accumulating.contains(c)) {
            return vec![s];
        }
        let m = fresh_var(vars, Ty::Mark, "m");
        let copies: Vec<Var> = carried
            .iter()
            .map(|&j| fresh_var(vars, tys[j].clone(), "c"))
            .collect();
        body.push(Stmt::Let(
            copies.clone(),
            Op::ReleaseCarrying {
                mark: Operand::Var(m),
                arrays: carried.iter().map(|&j| next[j].clone()).collect(),
            },
        ));
        for (&j, c) in carried.iter().zip(copies) {
            next[j] = Operand::Var(c);
        }
        vec![Stmt::Let(vec![m], Op::Mark), s]
    });
}
