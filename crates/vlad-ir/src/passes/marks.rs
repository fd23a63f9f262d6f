//! Arena marks instead of a collector. The language is pure, so the only way a call can hand
//! on an object it allocated is its result: after a call whose results hold no pointer,
//! everything the call allocated is garbage. Such a call, of a function that can allocate, is
//! bracketed by a mark of the arena and its release, which reuses the chunks above the mark.
//! This is exact, not a heuristic. A tail call gets no mark (it stays a jump, so loops run in
//! constant stack; the enclosing call's mark reclaims what it allocates), and neither does a
//! call of a function that stores in a global (the constants' initialisation), transitively:
//! what a global holds must outlive the call.

use crate::ir::*;
use std::collections::HashSet;

/// The functions that may allocate in the arena: those with an allocating statement, and
/// those that call one of them.
pub fn allocating(p: &Program) -> HashSet<FuncId> {
    let calls: Vec<Vec<FuncId>> = p.funcs.iter().map(|f| callees(&f.body)).collect();
    let mut out: HashSet<FuncId> = p.ids().filter(|id| allocates_itself(p.func(*id))).collect();
    loop {
        let before = out.len();
        for id in p.ids() {
            if !out.contains(&id) && calls[id.0 as usize].iter().any(|c| out.contains(c)) {
                out.insert(id);
            }
        }
        if out.len() == before {
            return out;
        }
    }
}

/// The functions that store in a global, and those that call one of them.
pub fn setting_globals(p: &Program) -> HashSet<FuncId> {
    closure_over_callers(p, |f| {
        let mut yes = false;
        walk(&f.body, &mut |s| yes |= matches!(s, Stmt::SetGlobal(..)));
        yes
    })
}

/// The functions that add into an array they may have received in place (`%accumulate`,
/// whose code asks the runtime whether the array is its own: `vl_acc_owned`): those that do
/// it themselves, and those that call one of them other than from an `ifold`'s step. A loop
/// whose step calls one must not move its accumulator (the step adds into it in place: the
/// reverse sweep's step, and its forward version, which adds through a helper). A function that
/// runs such a loop makes the array the loop adds into, so its callers do not add into
/// theirs: a loop whose step takes a gradient (gradient descent) releases what each step
/// allocated like any other loop.
pub fn accumulating(p: &Program) -> HashSet<FuncId> {
    let calls: Vec<Vec<FuncId>> = p
        .funcs
        .iter()
        .map(|f| {
            let (mut out, mut adds) = (Vec::new(), false);
            outside_ifolds(&f.body, &mut out, &mut adds);
            out
        })
        .collect();
    closure_over(p, &calls, |f| {
        let mut yes = false;
        walk(&f.body, &mut |s| {
            yes |= matches!(s, Stmt::Let(_, Op::Rt(crate::Rt::AccOwned, _)))
        });
        yes
    })
}

/// The calls a block makes, and whether it adds into an array in place (`vl_acc_owned`),
/// outside the steps of the `ifold`s in it.
pub fn outside_ifolds(block: &[Stmt], calls: &mut Vec<FuncId>, adds: &mut bool) {
    for s in block {
        match s {
            Stmt::Ifold { .. } => continue,
            Stmt::Let(_, Op::Call { func, guard, .. }) => {
                calls.push(*func);
                calls.extend(*guard);
            }
            Stmt::Let(_, Op::Rt(crate::Rt::AccOwned, _)) => *adds = true,
            Stmt::TailCall { func, .. } => calls.push(*func),
            _ => {}
        }
        for b in children(s) {
            outside_ifolds(b, calls, adds);
        }
    }
}

/// The functions for which `own` holds, and those that call one of them.
fn closure_over_callers(p: &Program, own: impl Fn(&Function) -> bool) -> HashSet<FuncId> {
    let calls: Vec<Vec<FuncId>> = p.funcs.iter().map(|f| callees(&f.body)).collect();
    closure_over(p, &calls, own)
}

/// The functions for which `own` holds, and those that make one of their `calls` to them.
fn closure_over(
    p: &Program,
    calls: &[Vec<FuncId>],
    own: impl Fn(&Function) -> bool,
) -> HashSet<FuncId> {
    let mut out: HashSet<FuncId> = p.ids().filter(|id| own(p.func(*id))).collect();
    loop {
        let before = out.len();
        for id in p.ids() {
            if !out.contains(&id) && calls[id.0 as usize].iter().any(|c| out.contains(c)) {
                out.insert(id);
            }
        }
        if out.len() == before {
            return out;
        }
    }
}

/// Whether a function's own statements allocate (calls aside). A machine's entry runs the
/// machine, which runs copies of its members' bodies: it allocates if they do. A block that
/// ends the program (boxing the operands of an error message, then failing) does not count:
/// nothing after it could reuse the memory.
pub fn allocates_itself(f: &Function) -> bool {
    matches!(f.kind, FuncKind::MachineEntry { .. }) || block_allocates(&f.body, &HashSet::new())
}

/// Whether running `b` may allocate: an allocating statement, or a call of a function in
/// `alloc` (`allocating`). A block that ends the program does not count (`allocates_itself`).
pub fn block_allocates(b: &[Stmt], alloc: &HashSet<FuncId>) -> bool {
    if b.iter()
        .any(|s| matches!(s, Stmt::Let(_, Op::Rt(rt, _)) if rt.effects().noreturn))
    {
        return false;
    }
    b.iter().any(|s| {
        matches!(
            s,
            Stmt::Let(
                _,
                Op::NewArray { .. }
                    | Op::ArrayOf { .. }
                    | Op::ReleaseCarrying { .. }
                    | Op::Collect { .. }
            ) | Stmt::Build { .. }
                | Stmt::MachineCall { .. }
        ) || matches!(s, Stmt::Let(_, Op::Rt(rt, _)) if rt.effects().allocates)
            || matches!(s, Stmt::Let(_, Op::Call { func, guard, .. })
                if alloc.contains(func) || guard.is_some_and(|g| alloc.contains(&g)))
            || matches!(s, Stmt::TailCall { func, .. } if alloc.contains(func))
            || children(s).into_iter().any(|c| block_allocates(c, alloc))
    })
}

pub fn run(p: &mut Program) {
    let mut markable = allocating(p);
    for f in setting_globals(p) {
        markable.remove(&f);
    }
    for f in &mut p.funcs {
        let mut vars = std::mem::take(&mut f.vars);
        mark(&mut f.body, &markable, &mut vars);
        f.vars = vars;
    }
}

fn mark(block: &mut Block, alloc: &HashSet<FuncId>, vars: &mut Vec<VarInfo>) {
    flat_map(block, &mut |s| {
        let needs = match &s {
            Stmt::Let(rs, Op::Call { func, .. }) => {
                alloc.contains(func) && !rs.iter().any(|r| vars[r.0 as usize].ty.holds_pointer())
            }
            _ => false,
        };
        if !needs {
            return vec![s];
        }
        let m = fresh_var(vars, Ty::Mark, "m");
        vec![
            Stmt::Let(vec![m], Op::Mark),
            s,
            Stmt::Release(Operand::Var(m)),
        ]
    });
}
