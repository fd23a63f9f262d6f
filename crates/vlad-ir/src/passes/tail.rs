//! Tail calls: `rs = call f(args); return rs` becomes `return call f(args)`, which the C
//! compiler makes a jump. A tail-recursive loop then runs in constant stack with its arguments
//! in registers.

use crate::ir::*;

pub fn run(p: &mut Program) {
    let results: Vec<Layout> = p.funcs.iter().map(|f| f.results.clone()).collect();
    for f in &mut p.funcs {
        let mine = f.results.clone();
        rewrite(&mut f.body, &mine, &results);
    }
}

fn rewrite(block: &mut Block, mine: &Layout, results: &[Layout]) {
    let mut i = 0;
    while i < block.len() {
        for b in children_mut(&mut block[i]) {
            rewrite(b, mine, results);
        }
        if let Some(call) = tail_call(&block[i], block.get(i + 1), mine, results) {
            block[i] = call;
            block.remove(i + 1);
        }
        i += 1;
    }
}

fn tail_call(s: &Stmt, next: Option<&Stmt>, mine: &Layout, results: &[Layout]) -> Option<Stmt> {
    let Stmt::Let(
        rs,
        Op::Call {
            func,
            args,
            guard: None,
        },
    ) = s
    else {
        return None;
    };
    let Some(Stmt::Return(xs)) = next else {
        return None;
    };
    let same = xs.len() == rs.len() && xs.iter().zip(rs).all(|(x, r)| x.var() == Some(*r));
    (same && results[func.0 as usize] == *mine).then(|| Stmt::TailCall {
        func: *func,
        args: args.clone(),
    })
}
