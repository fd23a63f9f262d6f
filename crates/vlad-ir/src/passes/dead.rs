//! Functions no longer called. After `inline`, a specialised function whose every call was
//! inlined is dead; its body is replaced by a return of placeholders (a stub the C compiler
//! drops), so that the C of a program does not hold every inlined function twice. The roots
//! are the program's entry, the constants' initialisation and every function that is not a
//! specialised one (the runtime's entry points, exports, machines).

use crate::ir::*;

pub fn run(p: &mut Program) {
    let mut live = vec![false; p.funcs.len()];
    let mut work: Vec<FuncId> = p
        .ids()
        .filter(|&id| {
            Some(id) == p.main
                || Some(id) == p.init
                || !matches!(p.func(id).kind, FuncKind::Specialised { .. })
        })
        .collect();
    while let Some(id) = work.pop() {
        if std::mem::replace(&mut live[id.0 as usize], true) {
            continue;
        }
        work.extend(callees(&p.func(id).body));
    }
    for id in p.ids().collect::<Vec<_>>() {
        if !live[id.0 as usize] {
            let f = p.func_mut(id);
            f.body = vec![Stmt::Return(
                f.results.iter().map(Operand::placeholder).collect(),
            )];
        }
    }
}
