//! Lowers the array loops to counted loops: `build` to a new array filled by a `for`, `ifold`
//! to its accumulators assigned at the end of each iteration. (The optimiser's rewrites of
//! paper 002 work on `build` and `ifold` before this pass.) And which counted loops fill new
//! arrays whose iterations are independent (`iterations_independent`, for the C backend).

use crate::ir::*;
use crate::rt::Rt;

pub fn run(p: &mut Program) {
    for f in &mut p.funcs {
        let mut vars = std::mem::take(&mut f.vars);
        lower(&mut f.body, &mut vars);
        f.vars = vars;
    }
}

fn lower(block: &mut Block, vars: &mut Vec<VarInfo>) {
    flat_map(block, &mut |s| match s {
        Stmt::Build {
            array,
            layout,
            count,
            index,
            mut body,
            elem,
        } => {
            for (slot, value) in elem.into_iter().enumerate() {
                body.push(Stmt::Store {
                    array: Operand::Var(array),
                    index: Operand::Var(index),
                    slot: slot as u32,
                    value,
                });
            }
            vec![
                Stmt::Let(
                    vec![array],
                    Op::NewArray {
                        layout,
                        count: count.clone(),
                    },
                ),
                Stmt::For { index, count, body },
            ]
        }
        Stmt::Ifold {
            accs,
            init,
            count,
            index,
            mut body,
            next,
        } => {
            let mut out = vec![Stmt::Declare(accs.clone())];
            for (a, x) in accs.iter().zip(init) {
                out.push(Stmt::Set(*a, x));
            }
            body.extend(assign_all(&accs, next, vars));
            out.push(Stmt::For { index, count, body });
            out
        }
        other => vec![other],
    });
}

/// `accs := next` all at once: through temporaries where a new value reads an accumulator
/// assigned before it.
pub(crate) fn assign_all(accs: &[Var], next: Vec<Operand>, vars: &mut Vec<VarInfo>) -> Vec<Stmt> {
    let reads_acc = next
        .iter()
        .enumerate()
        .any(|(j, x)| x.var().is_some_and(|v| accs.contains(&v) && accs[j] != v));
    let mut out = Vec::new();
    if !reads_acc {
        for (a, x) in accs.iter().zip(next) {
            if x.var() != Some(*a) {
                out.push(Stmt::Set(*a, x));
            }
        }
        return out;
    }
    let mut temps = Vec::new();
    for (a, x) in accs.iter().zip(next) {
        let ty = vars[a.0 as usize].ty.clone();
        let t = fresh_var(vars, ty, "n");
        out.push(Stmt::Let(vec![t], Op::Copy(x)));
        temps.push(t);
    }
    for (a, t) in accs.iter().zip(temps) {
        out.push(Stmt::Set(*a, Operand::Var(t)));
    }
    out
}

/// The arrays a counted loop may store into without GCC testing at run time whether they
/// overlap the arrays it reads (the C backend writes `#pragma GCC ivdep` before such a loop, so
/// that a loop that fills a new array vectorises without those tests: issue 22, a short loop's
/// fixed cost). `fresh` holds the arrays made by `new array` earlier on the path to a statement,
/// since the innermost loop around it began, and not mentioned since: no other variable can
/// hold one, and no earlier iteration of an enclosing loop made it. `update_fresh` keeps it
/// across a statement; a loop's body starts with none.
pub fn update_fresh(fresh: &mut Vec<Var>, s: &Stmt) {
    // Most statements come where there is no new array: no walk of their nested blocks then.
    if !fresh.is_empty() {
        walk(std::slice::from_ref(s), &mut |t| {
            for x in stmt_operands(t) {
                if let Some(v) = x.var() {
                    fresh.retain(|f| *f != v);
                }
            }
        });
    }
    if let Stmt::Let(vs, Op::NewArray { .. }) = s {
        fresh.extend(vs);
    }
}

/// Whether no iteration of `for index < count { body }` touches memory that another iteration
/// touches, as `#pragma GCC ivdep` asserts: the body stores only into `fresh` arrays (above),
/// each at the loop's own index, and mentions them nowhere else but in their lengths; it
/// allocates nothing, calls nothing but the runtime's checks (which only read, or end the
/// program), and has no loop or collection inside. What it reads it may read freely: none of
/// it is a fresh array.
pub fn iterations_independent(fresh: &[Var], index: Var, body: &[Stmt]) -> bool {
    if fresh.is_empty() {
        return false;
    }
    let is_fresh = |x: &Operand| x.var().is_some_and(|v| fresh.contains(&v));
    let mut stores = false;
    let mut ok = true;
    walk(body, &mut |s| {
        let fine = match s {
            Stmt::Store {
                array,
                index: at,
                value,
                ..
            } => {
                stores = true;
                is_fresh(array) && *at == Operand::Var(index) && !is_fresh(value)
            }
            Stmt::Let(_, Op::Length(_)) => true,
            Stmt::Let(_, op) => {
                // Runtime calls by name: some that the effects call pure write an array's
                // header (`vl_acc_mark`).
                let reads_only = match op {
                    Op::Rt(rt, _) => {
                        matches!(rt, Rt::IndexI64 | Rt::Index | Rt::CheckCount | Rt::CountOk)
                            || rt.effects().noreturn
                    }
                    op => super::simplify::is_pure(op),
                };
                reads_only && !op_operands(op).into_iter().any(is_fresh)
            }
            Stmt::Set(_, x) => !is_fresh(x),
            Stmt::Declare(_) | Stmt::Site(_) | Stmt::If { .. } => true,
            _ => false,
        };
        ok &= fine;
    });
    ok && stores
}
