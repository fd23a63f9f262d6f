//! Dead `site` statements. The lowering records the current call site before every operation
//! of the user's program (`vl_site = N` in C), for the errors of built-in code; only the next
//! statement that can fail, call, or leave the block reads it. A site followed in its block by
//! another site with nothing between that could read it is dropped: in a numerical loop, most
//! of them are (they are stores to a global, which the C compiler must keep).

use crate::ir::*;
use crate::passes::simplify::is_pure;

pub fn run(p: &mut Program) {
    for f in &mut p.funcs {
        block(&mut f.body);
    }
}

fn block(b: &mut Block) {
    let mut dead = vec![false; b.len()];
    // The sites recorded since the last statement that may read one (a conditional record
    // does not replace the one before it).
    let mut pending: Vec<usize> = Vec::new();
    for (i, s) in b.iter_mut().enumerate() {
        for c in children_mut(s) {
            block(c);
        }
        if let Stmt::Site(_) = s {
            for j in pending.drain(..) {
                dead[j] = true;
            }
            pending.push(i);
        } else if is_conditional_site(s) {
            // The site a loop that no longer runs would have left (`fuse::trailing_site`).
            pending.push(i);
        } else if reads_site(s) {
            pending.clear();
        }
    }
    let mut i = 0;
    b.retain(|_| {
        i += 1;
        !dead[i - 1]
    });
}

/// `if c { site N }`: a site recorded only if a condition holds.
fn is_conditional_site(s: &Stmt) -> bool {
    matches!(s, Stmt::If { then, els, .. } if els.is_empty() && matches!(then[..], [Stmt::Site(_)]))
}

/// Whether a statement may read the current site: it may fail (reporting an error at the site),
/// calls code that may, or leaves the straight-line code of its block (a nested block, a
/// return, a loop's next iteration).
fn reads_site(s: &Stmt) -> bool {
    match s {
        Stmt::Let(_, op) => !(is_pure(op) || matches!(op, Op::Mark)),
        Stmt::Declare(_)
        | Stmt::Set(..)
        | Stmt::Store { .. }
        | Stmt::SetField { .. }
        | Stmt::SetGlobal(..)
        | Stmt::Release(_) => false,
        _ => true,
    }
}
