//! Inlining of small functions that do not recurse: mostly the steps of `build`
//! and `ifold` (the lowering makes every procedure a function, so a loop's body is a call of
//! its step). The C compiler inlines them too, but only after this IR has lost the facts that
//! `simplify` needs: that the step's index is the loop's counter, below the loop's count, and
//! that the count is the length of the array the step reads. With the step's body in the loop,
//! `simplify` drops the index checks that those facts prove.
//!
//! A function that allocates is inlined only if its results hold a pointer (an array it
//! returns): a call of one whose results hold none is where `passes::marks` releases what it
//! allocated, and inlining it would keep that memory until the caller returns; a call that
//! returns a pointer is never released. Inlining a function that returns a small array lets
//! `passes::scalars` replace the array by its elements. A function that adds into an array it
//! was given in place (the step of a reverse sweep, `%accumulate`) is inlined like any other:
//! in the sweep's loop its index is the loop's, its tape is read with no index check and
//! without the slots the loop does not change (`passes::fields`), and `passes::carry` and
//! `marks::accumulating` see the in-place addition (`vl_acc_owned`) in the loop's body as
//! they saw the call. Functions that set globals or boxed objects' fields are left alone.
//!
//! Callees come first (the call graph's components in order), and each function gets its
//! scalar optimisation (`passes::scalar_optimise`) once its calls are inlined: a callee is
//! weighed, and inlined, as it will be.

use crate::ir::*;
use crate::passes::marks;
use crate::verify::{verify_function, VerifyError};

/// The largest callee inlined, in statements (nested ones included, call-site records not),
/// after its own scalar optimisation: enough for the steps of numerical loops and for the
/// small vector functions whose arrays `scalars` then replaces.
/// Larger limits grow the C of programs with many specialised functions called from many
/// places (tests/ad/reverse-property.vlad past `vlad run`'s 8 MB at 100).
pub const MAX_SIZE: usize = 40;

/// The largest callee inlined where it is the only call of the callee (the program does not
/// grow: the original is dropped, `passes::dead`).
pub const MAX_SIZE_ONCE: usize = 1000;

/// The largest callee inlined that returns only small arrays it made (a cross product, a
/// rotated point, their forward versions' two arrays): inlined, its arrays are its caller's
/// scalars (`passes::scalars`); called, each is an allocation and loads through memory.
pub const MAX_SIZE_SMALL_ARRAYS: usize = 160;

/// Whether every result of a function is an array it made with a constant count of at most
/// `scalars::MAX_COUNT`, at each of its returns.
fn returns_small_arrays(f: &Function) -> bool {
    if f.results.is_empty() || !f.results.iter().all(|t| matches!(t, Ty::Array(_))) {
        return false;
    }
    let mut small = std::collections::HashSet::new();
    walk(&f.body, &mut |s| {
        if let Stmt::Let(
            vs,
            Op::NewArray {
                count: Operand::I64(n),
                ..
            },
        ) = s
        {
            if *n <= super::scalars::MAX_COUNT {
                small.extend(vs.iter().copied());
            }
        }
    });
    let mut yes = true;
    walk(&f.body, &mut |s| match s {
        Stmt::Return(xs) => {
            yes &= xs
                .iter()
                .all(|x| x.var().is_some_and(|v| small.contains(&v)));
        }
        Stmt::TailCall { .. } => yes = false,
        _ => {}
    });
    yes
}

pub fn run(p: &mut Program) {
    run_checked(p, false).expect("nothing verified");
}

/// `run`, with the verifier (`verify`) on each function after its calls are inlined and after
/// each sub-pass of its scalar optimisation.
pub fn run_checked(p: &mut Program, verify: bool) -> Result<(), VerifyError> {
    let allocating = marks::allocating(p);
    let edges = call_graph(p);
    // How many calls each function has in the program: a larger callee is inlined only where
    // it is called once (the copy replaces it: `passes::dead` drops the original).
    let mut calls = vec![0usize; p.funcs.len()];
    for f in &p.funcs {
        walk(&f.body, &mut |s| {
            if let Stmt::Let(_, Op::Call { func, .. }) | Stmt::TailCall { func, .. } = s {
                calls[func.0 as usize] += 1;
            }
        });
    }
    // Callees before callers: a callee is inlined with its own calls inlined already.
    let mut ok = vec![false; p.funcs.len()];
    // Whether each function may allocate, as it is once optimised (sinking moves the boxing of
    // an error message's operands into the branch that fails, which does not count); until
    // then, as it was lowered.
    let mut allocates: Vec<bool> = p.ids().map(|id| allocating.contains(&id)).collect();
    for comp in vlad_core::graph::tarjan(p.funcs.len(), &edges) {
        let recursive = comp.len() > 1 || edges[comp[0]].contains(&comp[0]);
        for &id in &comp {
            let wanted: Vec<usize> = edges[id].iter().copied().filter(|&c| ok[c]).collect();
            if !wanted.is_empty() {
                // The caller's code is taken out while the callees (never the caller: a
                // function that calls itself is not inlined) are read in place.
                let mut vars = std::mem::take(&mut p.funcs[id].vars);
                let mut body = std::mem::take(&mut p.funcs[id].body);
                let funcs = &p.funcs;
                flat_map(&mut body, &mut |s| match s {
                    Stmt::Let(
                        results,
                        Op::Call {
                            func,
                            args,
                            guard: None,
                        },
                    ) if func.0 as usize != id && wanted.contains(&(func.0 as usize)) => {
                        expand(&funcs[func.0 as usize], &args, &results, &mut vars)
                    }
                    other => vec![other],
                });
                p.funcs[id].vars = vars;
                p.funcs[id].body = body;
            }
            if verify {
                optimise_verified(p, id)?;
            } else {
                super::scalar_optimise(&mut p.funcs[id]);
            }
            let f = &p.funcs[id];
            // A call whose results hold a pointer is never bracketed by a mark: inlining it
            // keeps nothing longer than the call did. Only flat arrays, though: inlining
            // functions that return boxed values (a chain of list builders specialised per
            // length) grows the code for nothing.
            let unmarked = f.results.iter().any(Ty::holds_pointer)
                && f.results
                    .iter()
                    .all(|t| !t.holds_pointer() || matches!(t, Ty::Array(_)));
            allocates[id] = marks::allocates_itself(f)
                || callees(&f.body).iter().any(|c| allocates[c.0 as usize]);
            let limit = if calls[id] == 1 {
                MAX_SIZE_ONCE
            } else if returns_small_arrays(f) {
                MAX_SIZE_SMALL_ARRAYS
            } else {
                MAX_SIZE
            };
            ok[id] = !recursive && (unmarked || !allocates[id]) && inlinable(f, limit);
        }
    }
    Ok(())
}

/// The scalar optimisation of function `id`, verified after its inlining and after each
/// sub-pass. The function is taken out of the program while it changes: in its place, one of
/// its signature with no body, against which its calls of itself are checked.
fn optimise_verified(p: &mut Program, id: usize) -> Result<(), VerifyError> {
    let f = &p.funcs[id];
    let stub = Function {
        kind: f.kind.clone(),
        params: f.params.clone(),
        results: f.results.clone(),
        vars: f.vars.clone(),
        body: Vec::new(),
        cold: f.cold,
    };
    let mut f = std::mem::replace(&mut p.funcs[id], stub);
    let name = p.func_name(FuncId(id as u32));
    let mut check = |f: &Function, _: &str| verify_function(p, f);
    let result = check(&f, "inlining")
        .map_err(|m| format!("after inlining: {m}"))
        .and_then(|()| super::scalar_optimise_checked(&mut f, &mut check));
    p.funcs[id] = f;
    result.map_err(|message| VerifyError {
        func: name,
        message,
    })
}

/// Whether a function (already known not to recurse) may be inlined: a small specialised
/// function that returns only at the ends of its blocks and writes at most into arrays (its
/// own, or in place into the accumulator it was given: a reverse sweep's step).
pub fn inlinable(f: &Function, limit: usize) -> bool {
    if !matches!(f.kind, FuncKind::Specialised { .. }) || code_size(&f.body) > limit {
        return false;
    }
    let mut writes = false;
    walk(&f.body, &mut |s| {
        writes |= matches!(s, Stmt::SetField { .. } | Stmt::SetGlobal(..))
            || match s {
                Stmt::Release(_)
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
                        | Op::Call { guard: Some(_), .. }
                ),
                _ => false,
            }
    });
    !writes && returns_at_ends(&f.body)
}

/// The arrays a function makes itself (`new array`): stores into them are its own business.
pub(crate) fn own_arrays(body: &[Stmt]) -> std::collections::HashSet<Var> {
    let mut own = std::collections::HashSet::new();
    walk(body, &mut |s| {
        if let Stmt::Let(vs, Op::NewArray { .. }) = s {
            own.extend(vs.iter().copied());
        }
    });
    own
}

/// Whether a statement may write into an array its function did not make (`own`: a store into
/// one, in-place accumulation, a boxed object's field, a global).
pub(crate) fn writes_given(s: &Stmt, own: &std::collections::HashSet<Var>) -> bool {
    match s {
        Stmt::Store { array, .. } => !array.var().is_some_and(|a| own.contains(&a)),
        Stmt::SetField { .. } | Stmt::SetGlobal(..) => true,
        Stmt::Let(_, Op::Rt(crate::Rt::AccOwned | crate::Rt::AccMark, _)) => true,
        _ => false,
    }
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
    // Fresh variables for those the callee's code uses only: its table also holds those of
    // code that its own optimisation removed, which copies would carry up the call graph.
    let mut body = callee.body.clone();
    let used = std::cell::RefCell::new(vec![false; callee.vars.len()]);
    map_vars(&mut body, &|v| {
        used.borrow_mut()[v.0 as usize] = true;
        v
    });
    let used = used.into_inner();
    let renamed: Vec<Var> = callee
        .vars
        .iter()
        .enumerate()
        .map(|(i, v)| {
            if used[i] || callee.params.contains(&Var(i as u32)) {
                fresh_var(vars, v.ty.clone(), &copy_prefix(&v.name))
            } else {
                Var(u32::MAX)
            }
        })
        .collect();
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
                    fresh_var(vars, info.ty, &copy_prefix(&info.name))
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
