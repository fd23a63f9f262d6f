//! Liveness of variables: a backward dataflow over the statement tree, with a fixpoint at each
//! loop. The explicit-stack machines keep in a member's frame exactly the variables live across
//! a call of another member (`passes::machines`), and the verifier checks that they do.

use crate::ir::*;
use std::collections::{BTreeSet, HashSet};

pub type Live = BTreeSet<Var>;

fn uses_of(s: &Stmt, live: &mut Live) {
    for x in stmt_operands(s) {
        if let Operand::Var(v) = x {
            live.insert(*v);
        }
    }
}

fn op_uses(xs: &[Operand], live: &mut Live) {
    for x in xs {
        if let Operand::Var(v) = x {
            live.insert(*v);
        }
    }
}

/// Whether control never continues after the statement itself (nested blocks aside).
fn ends_path(s: &Stmt) -> bool {
    match s {
        Stmt::Return(_) | Stmt::TailCall { .. } | Stmt::MachineTailCall { .. } => true,
        Stmt::Let(_, Op::Rt(rt, _)) => rt.effects().noreturn,
        Stmt::Loop(_) => true,
        _ => false,
    }
}

/// Computes liveness over a block; `observe` is called with each statement and the variables
/// live just after it (possibly several times, with growing sets, inside loops).
pub struct Liveness<'o> {
    observe: &'o mut dyn FnMut(&Stmt, &Live),
    /// The live sets at the heads of the enclosing `Loop`s (what `Continue` goes to).
    heads: Vec<Live>,
}

impl<'o> Liveness<'o> {
    pub fn new(observe: &'o mut dyn FnMut(&Stmt, &Live)) -> Liveness<'o> {
        Liveness {
            observe,
            heads: Vec::new(),
        }
    }

    /// The variables live before `block`, given those live after it.
    pub fn block(&mut self, block: &[Stmt], out: &Live) -> Live {
        let mut live = out.clone();
        for s in block.iter().rev() {
            live = self.stmt(s, &live);
        }
        live
    }

    /// The variables live before `s`, given those live after it.
    pub fn stmt(&mut self, s: &Stmt, out: &Live) -> Live {
        (self.observe)(s, out);
        let after: Live = if ends_path(s) {
            Live::new()
        } else {
            out.clone()
        };
        match s {
            Stmt::Let(vs, _) | Stmt::Declare(vs) => {
                let mut live = after;
                for v in vs {
                    live.remove(v);
                }
                uses_of(s, &mut live);
                live
            }
            Stmt::Set(v, _) => {
                let mut live = after;
                live.remove(v);
                uses_of(s, &mut live);
                live
            }
            Stmt::MachineCall { results, .. } => {
                let mut live = after;
                for v in results {
                    live.remove(v);
                }
                uses_of(s, &mut live);
                live
            }
            Stmt::If { then, els, .. } => {
                let mut live = self.block(then, &after);
                live.extend(self.block(els, &after));
                uses_of(s, &mut live);
                live
            }
            Stmt::Switch { cases, default, .. } => {
                let mut live = self.block(default, &after);
                for (_, b) in cases {
                    live.extend(self.block(b, &after));
                }
                uses_of(s, &mut live);
                live
            }
            Stmt::Continue => self.heads.last().cloned().unwrap_or_default(),
            Stmt::Loop(body) => {
                // The head: whatever the body needs, given that `Continue` comes back here.
                let mut head = Live::new();
                loop {
                    self.heads.push(head.clone());
                    let next = self.block(body, &Live::new());
                    self.heads.pop();
                    if next == head {
                        return head;
                    }
                    head = next;
                }
            }
            Stmt::For { index, count, body } => {
                self.counted(&after, *index, &[], body, &[], count, &[])
            }
            Stmt::Build {
                array,
                count,
                index,
                body,
                elem,
                ..
            } => {
                let mut live = self.counted(&after, *index, &[*array], body, elem, count, &[]);
                live.remove(array);
                live
            }
            Stmt::Ifold {
                accs,
                init,
                count,
                index,
                body,
                next,
            } => {
                let mut live = self.counted(&after, *index, accs, body, next, count, accs);
                for v in accs {
                    live.remove(v);
                }
                op_uses(init, &mut live);
                live
            }
            Stmt::Member { body, .. } => self.block(body, &Live::new()),
            _ => {
                let mut live = after;
                uses_of(s, &mut live);
                live
            }
        }
    }

    /// A counted loop: the live set at its head (`index` excluded). `carried` live throughout
    /// (the array a `build` fills, the accumulators of an `ifold`); `end` read at the end of
    /// each iteration, and `assigned` (by `end`) after that.
    #[allow(clippy::too_many_arguments)]
    fn counted(
        &mut self,
        out: &Live,
        index: Var,
        carried: &[Var],
        body: &[Stmt],
        end: &[Operand],
        count: &Operand,
        assigned: &[Var],
    ) -> Live {
        let mut head: Live = out.clone();
        head.extend(carried.iter().copied());
        if let Operand::Var(v) = count {
            head.insert(*v);
        }
        loop {
            // At the end of an iteration: the head's set, less what `end` assigns, plus what
            // it reads, and the index (incremented).
            let mut tail = head.clone();
            for v in assigned {
                tail.remove(v);
            }
            op_uses(end, &mut tail);
            tail.insert(index);
            let mut next = self.block(body, &tail);
            next.remove(&index);
            next.extend(head.iter().copied());
            if next == head {
                return head;
            }
            head = next;
        }
    }
}

/// The variables live just after any statement of `block` that `at` selects (`out`: live after
/// the block).
pub fn live_after(block: &[Stmt], out: &Live, at: impl Fn(&Stmt) -> bool) -> Live {
    let mut found = Live::new();
    let mut observe = |s: &Stmt, live: &Live| {
        if at(s) {
            found.extend(live.iter().copied());
        }
    };
    Liveness::new(&mut observe).block(block, out);
    found
}

/// The variables live across a call of a member in a machine member's body: live after the
/// call but not defined by it (its results are written into its frame's result slot and read
/// back when it returns).
pub fn live_across_calls(body: &[Stmt]) -> Live {
    let mut found = Live::new();
    let mut observe = |s: &Stmt, live: &Live| {
        if let Stmt::MachineCall { results, .. } = s {
            found.extend(live.iter().filter(|v| !results.contains(v)).copied());
        }
    };
    Liveness::new(&mut observe).block(body, &Live::new());
    found
}

/// Every variable live across a call of a member, in a machine, is in the calling member's
/// frame (the machine's C locals do not survive a call: the callee runs in the same C
/// function).
pub fn check_frames(f: &Function, m: &Machine) -> Result<(), String> {
    for s in &f.body {
        let Stmt::Member { member, body } = s else {
            continue;
        };
        let Some(mb) = m.members.get(*member as usize) else {
            return Err(format!("no member {member}"));
        };
        let frame: HashSet<Var> = mb.frame.iter().copied().collect();
        if let Some(v) = live_across_calls(body)
            .into_iter()
            .find(|v| !frame.contains(v))
        {
            return Err(format!(
                "{} is live across a call in member {member} but not in its frame",
                f.name(v)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    fn v(n: u32) -> Var {
        Var(n)
    }

    #[test]
    fn a_variable_used_after_a_call_is_live_across_it_and_a_dead_one_is_not() {
        // x = 1; y = 2; call; use x
        let call = Stmt::Let(
            vec![v(2)],
            Op::Call {
                func: FuncId(0),
                args: vec![],
                guard: None,
            },
        );
        let block = vec![
            Stmt::Let(vec![v(0)], Op::Copy(Operand::F64(1.0))),
            Stmt::Let(vec![v(1)], Op::Copy(Operand::F64(2.0))),
            Stmt::Let(vec![v(3)], Op::Copy(Operand::Var(v(1)))),
            call.clone(),
            Stmt::Return(vec![Operand::Var(v(0)), Operand::Var(v(2))]),
        ];
        let live = live_after(&block, &Live::new(), |s| *s == call);
        assert_eq!(live, [v(0), v(2)].into_iter().collect());
    }

    #[test]
    fn a_loop_keeps_alive_what_its_next_iteration_reads() {
        // for i < n { call; s = s + x }: x, s, n (and i) are live across the call.
        let call = Stmt::Let(
            vec![],
            Op::Call {
                func: FuncId(0),
                args: vec![],
                guard: None,
            },
        );
        let body = vec![
            call.clone(),
            Stmt::Let(
                vec![v(5)],
                Op::Binary(BinOp::FAdd, Operand::Var(v(2)), Operand::Var(v(1))),
            ),
        ];
        let block = vec![
            Stmt::Let(vec![v(1)], Op::Copy(Operand::F64(1.0))),
            Stmt::Ifold {
                accs: vec![v(2)],
                init: vec![Operand::F64(0.0)],
                count: Operand::Var(v(0)),
                index: v(3),
                body,
                next: vec![Operand::Var(v(5))],
            },
            Stmt::Return(vec![Operand::Var(v(2))]),
        ];
        let live = live_after(&block, &Live::new(), |s| *s == call);
        assert_eq!(live, [v(0), v(1), v(2), v(3)].into_iter().collect());
        let _ = Rc::new(0);
    }
}
