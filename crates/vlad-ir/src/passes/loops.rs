//! Lowers the array loops to counted loops: `build` to a new array filled by a `for`, `ifold`
//! to its accumulators assigned at the end of each iteration. (The optimiser's rewrites of
//! paper 002 work on `build` and `ifold` before this pass.)

use crate::ir::*;

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
