//! Loops that run in constant memory.
//!
//! **Releases before tail calls.** A tail call passes on nothing that the current call of the
//! function allocated when every pointer argument is one of the function's own parameters
//! (allocated before it was entered), and the function stores nothing in a global. Its result
//! is the callee's, so everything allocated since the function was entered is garbage: the
//! function takes a mark on entry and releases it before such a call. A tail-recursive loop
//! that builds arrays at each step and carries only reals then runs in constant memory.
//!
//! **Loops that carry what they build.** A loop that passes something it built to its next
//! step needs more. The mark has to stay where it was on the loop's first entry, so that what
//! a step keeps can replace what the previous step kept: the function becomes a `Loop`, taking
//! the mark once, and its self tail calls assign the parameters and `Continue`. Before that:
//! - where the carried pointers are flat arrays whose elements hold no pointers (a simulation
//!   stepping a state vector), the arena is released to the mark and they are copied down to
//!   it at every step (`ReleaseCarrying`; flat arrays are immutable, so a copy is as good);
//! - where they are anything else (a list, a gradient, a closure, arrays of boxed values),
//!   the runtime collects them (`Collect`): when the arena above the mark has grown past a
//!   multiple of what survived the last collection, the objects they reach above the mark are
//!   copied down to it, sharing kept, and the rest is freed (`vl_collect` in runtime.c). A
//!   loop's memory then stays within a constant factor of what it carries, at a constant cost
//!   per byte allocated.
//!
//! A pointer parameter may then hold something an earlier step allocated above the mark, so a
//! release is allowed only where each pointer argument is kept (copied or collected) or is a
//! parameter that every self tail call passes on unchanged (still the caller's, below the
//! mark). The verifier checks what this relies on: after a release, every live pointer is
//! kept or older than the mark.
//!
//! **Loops through several functions.** A cycle of tail calls between functions that passes
//! on pointers it builds is merged into one function that loops (`merge_tail_cycles`): the
//! members' bodies are the cases of a `switch` on which runs, and a tail call between them
//! collects what it carries, assigns the callee's parameters and `Continue`s.
//!
//! **`ifold`s that carry what they build** take a mark before the loop and, after each step,
//! copy their accumulator's arrays down to it or collect their accumulators, as above. One
//! whose step adds into its accumulator in place (a reverse sweep) is collected, never copied
//! down: a copy at every step would cost the array's length each time, where a collection is
//! due only once the steps have allocated a multiple of what it keeps (what a checkpointed
//! step's recomputed tape leaves behind), and moves the array with its mark.

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
    let done = merge_tail_cycles(p, &alloc, &globals, &accumulating);
    let params: Vec<Vec<Ty>> = p
        .funcs
        .iter()
        .map(|f| f.params.iter().map(|v| f.ty(*v).clone()).collect())
        .collect();
    for id in p.ids() {
        let f = p.func_mut(id);
        if alloc.contains(&id) && !globals.contains(&id) && !done.contains(&id) {
            release_before_tail_calls(f, id, &params, accumulating.contains(&id));
        }
        let owned = super::unread::owned(f);
        let mut vars = std::mem::take(&mut f.vars);
        carry_ifolds(&mut f.body, &mut vars, &accumulating, &owned, &alloc);
        f.vars = vars;
    }
}

/// The largest cycle of tail calls merged into one loop, in statements (the loop is one C
/// function, and the C compiler's time grows faster than a function's size).
const MAX_MERGED_SIZE: usize = 20_000;

/// Merges each cycle of tail calls through several functions that passes on a pointer it
/// did not receive (a loop through several functions that carries a boxed value it builds)
/// into one function that loops: a `switch` on which member runs, inside a `loop`, each tail
/// call between members a collection of what it carries (`Collect`) and a `continue`. The
/// members become wrappers that call it. The parameters of the members share the loop's
/// variables, one per type and position, so that the loop has as many parameters as its
/// largest member. Returns the functions made or rewritten (their tail calls are handled).
fn merge_tail_cycles(
    p: &mut Program,
    alloc: &HashSet<FuncId>,
    globals: &HashSet<FuncId>,
    accumulating: &HashSet<FuncId>,
) -> HashSet<FuncId> {
    let n = p.funcs.len();
    // A function that adds into an array in place must not have it moved by a collection.
    let candidate = |i: usize| {
        let id = FuncId(i as u32);
        matches!(p.funcs[i].kind, FuncKind::Specialised { .. })
            && alloc.contains(&id)
            && !globals.contains(&id)
            && !accumulating.contains(&id)
    };
    let edges: Vec<Vec<usize>> = (0..n)
        .map(|i| {
            if !candidate(i) {
                return Vec::new();
            }
            let mut out: Vec<usize> = tail_calls(&p.funcs[i].body)
                .iter()
                .map(|(g, _)| g.0 as usize)
                .filter(|&g| candidate(g))
                .collect();
            out.sort_unstable();
            out.dedup();
            out
        })
        .collect();
    let mut done = HashSet::new();
    for mut scc in vlad_core::graph::tarjan(n, &edges) {
        if scc.len() < 2 {
            continue;
        }
        scc.sort_unstable();
        let members: Vec<FuncId> = scc.iter().map(|&i| FuncId(i as u32)).collect();
        if !worth_merging(p, &members) {
            continue;
        }
        let merged = merge(p, &members);
        done.insert(merged);
        done.extend(members);
    }
    done
}

/// Whether a cycle of tail calls needs merging and can be merged: a tail call between members
/// passes a pointer that is not a parameter of the caller (so no member can release before
/// it), every parameter is a leaf the loop can assign and the runtime can collect (no
/// unions), the members return the same layout, no member loops already, and the whole is
/// not too large.
fn worth_merging(p: &Program, members: &[FuncId]) -> bool {
    let results = &p.func(members[0]).results;
    let mut size = 0;
    let mut needed = false;
    for &m in members {
        let f = p.func(m);
        if f.results != *results
            || f.params
                .iter()
                .any(|v| matches!(f.ty(*v), Ty::Union(_) | Ty::Mark | Ty::Str))
        {
            return false;
        }
        let mut loops = false;
        walk(&f.body, &mut |s| loops |= matches!(s, Stmt::Loop(_)));
        if loops {
            return false;
        }
        size += crate::ir::size(&f.body);
        for (g, args) in tail_calls(&f.body) {
            if !members.contains(&g) {
                continue;
            }
            let callee = p.func(g);
            needed |= args.iter().zip(&callee.params).any(|(a, q)| {
                callee.ty(*q).holds_pointer() && a.var().is_some_and(|v| !f.params.contains(&v))
            });
        }
    }
    needed && size <= MAX_MERGED_SIZE
}

/// Merges `members` (a cycle of tail calls `worth_merging`) into a new function; returns it.
fn merge(p: &mut Program, members: &[FuncId]) -> FuncId {
    let me = FuncId(p.funcs.len() as u32);
    let results = p.func(members[0]).results.clone();
    let mut vars: Vec<VarInfo> = Vec::new();
    let sel = fresh_var(&mut vars, Ty::I64, "sel");
    // The shared parameters: by type, in order of first use.
    let mut pool: Vec<(Ty, Vec<Var>)> = Vec::new();
    let mut slots: Vec<Vec<Var>> = Vec::new();
    for &m in members {
        let f = p.func(m);
        let mut used: Vec<(Ty, usize)> = Vec::new();
        let mut mine = Vec::new();
        for v in &f.params {
            let ty = f.ty(*v).clone();
            let k = match used.iter_mut().find(|(t, _)| *t == ty) {
                Some((_, k)) => {
                    *k += 1;
                    *k - 1
                }
                None => {
                    used.push((ty.clone(), 1));
                    0
                }
            };
            let at = match pool.iter().position(|(t, _)| *t == ty) {
                Some(at) => at,
                None => {
                    pool.push((ty.clone(), Vec::new()));
                    pool.len() - 1
                }
            };
            while pool[at].1.len() <= k {
                let x = fresh_var(&mut vars, ty.clone(), "p");
                pool[at].1.push(x);
            }
            mine.push(pool[at].1[k]);
        }
        slots.push(mine);
    }
    let shared: Vec<Var> = pool.iter().flat_map(|(_, vs)| vs.iter().copied()).collect();
    let entry = fresh_var(&mut vars, Ty::Mark, "entry");
    let gc = fresh_var(&mut vars, Ty::I64, "gc");
    let mut cases: Vec<(Vec<i64>, Block)> = Vec::new();
    for (k, &m) in members.iter().enumerate() {
        let f = p.func(m);
        // The member's variables in the loop: its parameters the shared ones, the others
        // renamed.
        let map: Vec<Var> = (0..f.vars.len() as u32)
            .map(|i| match f.params.iter().position(|v| v.0 == i) {
                Some(j) => slots[k][j],
                None => {
                    let info = &f.vars[i as usize];
                    fresh_var(&mut vars, info.ty.clone(), &format!("{}_", info.name))
                }
            })
            .collect();
        let mut body = f.body.clone();
        map_vars(&mut body, &|v| map[v.0 as usize]);
        flat_map(&mut body, &mut |s| {
            let Stmt::TailCall { func, args } = s else {
                return vec![s];
            };
            let to = members.iter().position(|g| *g == func);
            let mut out = Vec::new();
            let mut args = args;
            keep_pointers(&mut out, &mut vars, entry, gc, &mut args);
            let Some(j) = to else {
                out.push(Stmt::TailCall { func, args });
                return out;
            };
            // The callee's parameters all at once (an argument may be one of them), the
            // pointers no other member's parameters hold cleared (they would be live, as far
            // as the liveness of variables can tell, after the collection moved them), and
            // the member to run next.
            let temps: Vec<Var> = slots[j]
                .iter()
                .map(|q| {
                    let ty = vars[q.0 as usize].ty.clone();
                    fresh_var(&mut vars, ty, "n")
                })
                .collect();
            for (t, a) in temps.iter().zip(args) {
                out.push(Stmt::Let(vec![*t], Op::Copy(a)));
            }
            for (q, t) in slots[j].iter().zip(temps) {
                out.push(Stmt::Set(*q, Operand::Var(t)));
            }
            for q in &shared {
                if vars[q.0 as usize].ty.holds_pointer() && !slots[j].contains(q) {
                    out.push(Stmt::Set(*q, Operand::Null));
                }
            }
            out.push(Stmt::Set(sel, Operand::I64(j as i64)));
            out.push(Stmt::Continue);
            out
        });
        cases.push((vec![k as i64], body));
    }
    let (_, default) = cases.pop().expect("a member");
    let body = vec![
        Stmt::Let(vec![entry], Op::Mark),
        Stmt::Declare(vec![gc]),
        Stmt::Set(gc, Operand::I64(0)),
        Stmt::Loop(vec![Stmt::Switch {
            on: Operand::Var(sel),
            cases,
            default,
        }]),
    ];
    p.funcs.push(Function {
        kind: FuncKind::Merged {
            members: members.to_vec(),
        },
        params: std::iter::once(sel).chain(shared.iter().copied()).collect(),
        results,
        vars,
        body,
        cold: false,
    });
    // Each member calls the loop, its arguments in its slots.
    let tys: Vec<Ty> = shared.iter().map(|q| p.func(me).ty(*q).clone()).collect();
    for (k, &m) in members.iter().enumerate() {
        let f = p.func_mut(m);
        let mut args = vec![Operand::I64(k as i64)];
        for (q, ty) in shared.iter().zip(&tys) {
            args.push(match slots[k].iter().position(|x| x == q) {
                Some(j) => Operand::Var(f.params[j]),
                None => Operand::placeholder(ty),
            });
        }
        f.body = vec![Stmt::TailCall { func: me, args }];
    }
    me
}

/// Before a tail call out of a merged loop or between its members: the pointers it passes
/// kept by a collection (when one is due), or, where it passes none, a release of
/// everything the loop allocated.
fn keep_pointers(
    out: &mut Vec<Stmt>,
    vars: &mut Vec<VarInfo>,
    entry: Var,
    gc: Var,
    args: &mut [Operand],
) {
    let ty = |x: &Operand| x.var().map(|v| vars[v.0 as usize].ty.clone());
    if args
        .iter()
        .any(|a| ty(a).is_some_and(|t| t.holds_pointer() && !t.is_pointer()))
    {
        // A union holding a pointer: the runtime cannot see which variant it is.
        return;
    }
    let kept: Vec<usize> = (0..args.len())
        .filter(|&i| ty(&args[i]).is_some_and(|t| t.is_pointer()))
        .collect();
    if kept.is_empty() {
        out.push(Stmt::Release(Operand::Var(entry)));
        return;
    }
    let results: Vec<Var> = kept
        .iter()
        .map(|&i| {
            let ty = vars[args[i].var().expect("a variable").0 as usize]
                .ty
                .clone();
            fresh_var(vars, ty, "c")
        })
        .collect();
    let values = kept.iter().map(|&i| args[i].clone()).collect();
    for (&i, c) in kept.iter().zip(&results) {
        args[i] = Operand::Var(*c);
    }
    push_collect(out, vars, entry, gc, results, values);
}

/// A collection (`Collect`) above `mark` that keeps `values` in `results`, its budget `gc`
/// updated after it.
fn push_collect(
    out: &mut Vec<Stmt>,
    vars: &mut Vec<VarInfo>,
    mark: Var,
    gc: Var,
    mut results: Vec<Var>,
    values: Vec<Operand>,
) {
    let next = fresh_var(vars, Ty::I64, "gc");
    results.push(next);
    out.push(Stmt::Let(
        results,
        Op::Collect {
            mark: Operand::Var(mark),
            budget: Operand::Var(gc),
            values,
        },
    ));
    out.push(Stmt::Set(gc, Operand::Var(next)));
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

/// What a releasing tail call keeps of what the current call allocated.
#[derive(Clone, Debug, PartialEq)]
enum Keep {
    /// Nothing: it passes on only what is older than the mark.
    Nothing,
    /// These arguments, pointer-free arrays, copied down at each step (`ReleaseCarrying`).
    Copy(Vec<usize>),
    /// These arguments, and what they reach, by a collection when one is due (`Collect`).
    Collect(Vec<usize>),
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
    let is_own = |x: &Operand| x.var().is_some_and(|v| own.contains(&v));
    let is_invariant = |x: &Operand| {
        x.var()
            .is_some_and(|v| own.iter().zip(&invariant).any(|(p, inv)| *inv && *p == v))
    };
    // What a releasing call keeps (`None`: no release there), with the loop (`looped`) or
    // without.
    let plan = |k: FuncId, args: &[Operand], looped: bool| -> Option<Keep> {
        let callee = &params[k.0 as usize];
        if args.len() != callee.len() {
            return None;
        }
        let mut carried = Vec::new();
        for (j, (a, ty)) in args.iter().zip(callee).enumerate() {
            let pointer = ty.holds_pointer() && !matches!(a, Operand::Null | Operand::Global(_));
            if !pointer || (!looped && is_own(a)) || (looped && is_invariant(a)) {
                continue;
            }
            // A loop that adds into an array in place carries it as it is: copying or
            // collecting it would move it (and cost its length at every step).
            if looped && k == me && !accumulating {
                carried.push(j);
            } else {
                return None;
            }
        }
        if carried.is_empty() {
            Some(Keep::Nothing)
        } else if carried.iter().all(|&j| callee[j].is_pointer_free_array()) {
            Some(Keep::Copy(carried))
        } else if carried.iter().all(|&j| callee[j].is_pointer()) {
            Some(Keep::Collect(carried))
        } else {
            // A union holding a pointer: the runtime cannot see which variant it is.
            None
        }
    };
    let looped = calls.iter().any(|(k, args)| {
        *k == me && matches!(plan(*k, args, true), Some(Keep::Copy(_) | Keep::Collect(_)))
    });
    if calls
        .iter()
        .all(|(k, args)| plan(*k, args, looped).is_none())
    {
        return;
    }
    let collects = calls
        .iter()
        .any(|(k, args)| matches!(plan(*k, args, looped), Some(Keep::Collect(_))));
    let entry = f.new_var(Ty::Mark, "entry");
    let budget = collects.then(|| f.new_var(Ty::I64, "gc"));
    let mut vars = std::mem::take(&mut f.vars);
    flat_map(&mut f.body, &mut |s| {
        let Stmt::TailCall { func, args } = &s else {
            return vec![s];
        };
        let Some(keep) = plan(*func, args, looped) else {
            return vec![s];
        };
        let (func, mut args) = (*func, args.clone());
        let mut out = Vec::new();
        let (kept, collect) = match keep {
            Keep::Nothing => (Vec::new(), false),
            Keep::Copy(kept) => (kept, false),
            Keep::Collect(kept) => (kept, true),
        };
        if kept.is_empty() {
            out.push(Stmt::Release(Operand::Var(entry)));
        } else {
            let copies: Vec<Var> = kept
                .iter()
                .map(|&j| fresh_var(&mut vars, params[func.0 as usize][j].clone(), "c"))
                .collect();
            let values: Vec<Operand> = kept.iter().map(|&j| args[j].clone()).collect();
            match budget.filter(|_| collect) {
                Some(gc) => push_collect(&mut out, &mut vars, entry, gc, copies.clone(), values),
                None => out.push(Stmt::Let(
                    copies.clone(),
                    Op::ReleaseCarrying {
                        mark: Operand::Var(entry),
                        arrays: values,
                    },
                )),
            }
            for (&j, c) in kept.iter().zip(copies) {
                args[j] = Operand::Var(c);
            }
        }
        if looped && func == me {
            // The parameters all at once (an argument may be another parameter); one passed
            // on in place is not assigned (it stays older than the mark).
            let moved: Vec<(Var, Operand)> = own
                .iter()
                .zip(args)
                .filter(|(p, a)| a.var() != Some(**p))
                .map(|(p, a)| (*p, a))
                .collect();
            let temps: Vec<Var> = moved
                .iter()
                .map(|(p, _)| {
                    let ty = vars[p.0 as usize].ty.clone();
                    fresh_var(&mut vars, ty, "n")
                })
                .collect();
            for (t, (_, a)) in temps.iter().zip(&moved) {
                out.push(Stmt::Let(vec![*t], Op::Copy(a.clone())));
            }
            for ((p, _), t) in moved.iter().zip(temps) {
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
    if let Some(gc) = budget {
        f.body.push(Stmt::Declare(vec![gc]));
        f.body.push(Stmt::Set(gc, Operand::I64(0)));
    }
    if looped {
        f.body.push(Stmt::Loop(body));
    } else {
        f.body.extend(body);
    }
}

/// Marks and releases for the `ifold`s whose accumulators hold pointers: the pointer-free
/// arrays among them copied down after each step, anything else kept by a collection when
/// one is due.
/// `owned`: the arrays of the function that no one else holds (`unread::owned`).
fn carry_ifolds(
    block: &mut Block,
    vars: &mut Vec<VarInfo>,
    accumulating: &HashSet<FuncId>,
    owned: &[bool],
    alloc: &HashSet<FuncId>,
) {
    flat_map(block, &mut |mut s| {
        let Stmt::Ifold {
            accs, body, next, ..
        } = &mut s
        else {
            return vec![s];
        };
        let tys: Vec<Ty> = accs.iter().map(|a| vars[a.0 as usize].ty.clone()).collect();
        // What is older than the mark (a constant, null) needs no keeping.
        let carried: Vec<usize> = (0..tys.len())
            .filter(|&j| {
                tys[j].holds_pointer() && !matches!(next[j], Operand::Null | Operand::Global(_))
            })
            .collect();
        if carried.is_empty()
            || !carried.iter().all(|&j| tys[j].is_pointer())
            || !super::marks::block_allocates(body, alloc)
        {
            // Nothing to keep, a union holding a pointer (the runtime cannot see which
            // variant it is), or no step that allocates: nothing to collect (a reverse sweep
            // whose first step, which made its accumulator, `peel` ran before the loop).
            return vec![s];
        }
        // A step that stores a pointer into an array made before it (the tape of the
        // `%ifold-tape` that is this loop) may keep in it what the step allocated: nothing may
        // be released. Stores into an array the step made (the tape of an `ifold` nested in
        // it: a gradient taken at each step) keep nothing the collection does not copy with
        // that array, and stores of numbers (a small `build` unrolled by `scalars`) nothing at
        // all. A step that adds into the loop's accumulator in place, or calls a function that
        // does (`marks::accumulating`), is collected but not copied down at every step (only
        // the loop holds the array it adds into: a collection may move it, marked as its own);
        // an `ifold` nested in the step that adds in place adds into arrays it made itself,
        // which do not count, and neither do the stores of such a step inlined (into its
        // accumulators, `vl_acc_mark`'s and `vl_acc_owned`'s), which were the callee's
        // before: the arrays the step defines that no one else holds.
        let fresh: HashSet<Var> = defined_in(body)
            .into_iter()
            .filter(|v| owned.get(v.0 as usize).copied().unwrap_or(false))
            .collect();
        let mut keep = false;
        walk(body, &mut |x| {
            keep |= match x {
                Stmt::Store { array, .. } if array.var().is_some_and(|a| fresh.contains(&a)) => {
                    false
                }
                Stmt::Store { value, .. } => match value {
                    Operand::Var(v) => vars[v.0 as usize].ty.holds_pointer(),
                    Operand::Global(_) | Operand::Null => true,
                    _ => false,
                },
                _ => false,
            }
        });
        if keep {
            return vec![s];
        }
        let (mut calls, mut adds) = (Vec::new(), false);
        super::marks::outside_ifolds(body, &mut calls, &mut adds);
        let in_place = adds || calls.iter().any(|c| accumulating.contains(c));
        let copy = !in_place && carried.iter().all(|&j| tys[j].is_pointer_free_array());
        let m = fresh_var(vars, Ty::Mark, "m");
        let copies: Vec<Var> = carried
            .iter()
            .map(|&j| fresh_var(vars, tys[j].clone(), "c"))
            .collect();
        let values: Vec<Operand> = carried.iter().map(|&j| next[j].clone()).collect();
        let mut out = vec![Stmt::Let(vec![m], Op::Mark)];
        if copy {
            body.push(Stmt::Let(
                copies.clone(),
                Op::ReleaseCarrying {
                    mark: Operand::Var(m),
                    arrays: values,
                },
            ));
        } else {
            let gc = fresh_var(vars, Ty::I64, "gc");
            out.push(Stmt::Declare(vec![gc]));
            out.push(Stmt::Set(gc, Operand::I64(0)));
            push_collect(body, vars, m, gc, copies.clone(), values);
        }
        for (&j, c) in carried.iter().zip(copies) {
            next[j] = Operand::Var(c);
        }
        out.push(s);
        out
    });
}
