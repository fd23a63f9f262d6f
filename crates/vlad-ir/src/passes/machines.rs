//! Deep recursion without native stack growth: explicit-stack versions of recursive functions.
//!
//! The reverse transform (paper 003) turns a loop into non-tail recursion twice over: the
//! forward sweep builds each step's backpropagator after the recursive call returns, and the
//! backpropagator of a step calls the next step's before it distributes the sensitivities that
//! call returns. Compiled naively, both recurse once per step on the C stack.
//!
//! For every strongly connected component of the call graph with a call inside it that is not
//! a tail call (a *deep* component), this pass adds one more function, the component's
//! *machine*: the bodies of all its members, with the variables live across a call of a member
//! (and only those) in heap frames on an explicit stack instead of C locals (liveness is
//! computed on the IR: `liveness`). A call between members pushes the callee's frame and jumps
//! to the machine's dispatch (`MachineCall`); a return pops the frame; a tail call between
//! members replaces the frame (`MachineTailCall`). The machine never recurses natively, so a
//! recursion of any depth inside the component uses a constant amount of C stack.
//!
//! The native members stay as they were (their locals in registers), but for a guard on each
//! non-tail call of another member: once the C stack is deeper than a budget, the call goes to
//! the machine, through an entry function of the callee (`MachineEntry`). Shallow recursion
//! runs natively; deep recursion runs natively down to the budget and in the machine beyond.

use crate::ir::*;
use crate::liveness::live_across_calls;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::rc::Rc;

/// What the pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Deep components that got a machine.
    pub machines: usize,
    /// Deep components larger than the limit, left to recurse on the C stack.
    pub too_large: usize,
}

/// Adds a machine for each deep component of at most `max_size` statements.
pub fn run(p: &mut Program, max_size: usize) -> Stats {
    let n = p.funcs.len();
    let calls = call_graph(p);
    let mut stats = Stats::default();
    for mut scc in vlad_core::graph::tarjan(n, &calls) {
        scc.sort_unstable();
        if !scc.iter().all(|&i| {
            matches!(
                p.funcs[i].kind,
                FuncKind::Specialised { .. } | FuncKind::Merged { .. }
            )
        }) {
            continue;
        }
        let members: Vec<FuncId> = scc.iter().map(|&i| FuncId(i as u32)).collect();
        let recursive = scc.len() > 1 || calls[scc[0]].contains(&scc[0]);
        if !recursive
            || !members
                .iter()
                .any(|f| has_non_tail_call(&p.func(*f).body, &members))
        {
            continue;
        }
        let size: usize = members.iter().map(|f| size(&p.func(*f).body)).sum();
        if size > max_size {
            stats.too_large += 1;
            continue;
        }
        add_machine(p, &members);
        stats.machines += 1;
    }
    stats
}

/// Whether a body calls a member other than in tail position.
fn has_non_tail_call(body: &[Stmt], members: &[FuncId]) -> bool {
    let mut yes = false;
    walk(body, &mut |s| {
        if let Stmt::Let(_, Op::Call { func, .. }) = s {
            yes |= members.contains(func);
        }
    });
    yes
}

fn add_machine(p: &mut Program, members: &[FuncId]) {
    let slot: HashMap<FuncId, u32> = members
        .iter()
        .enumerate()
        .map(|(j, f)| (*f, j as u32))
        .collect();
    let mut vars: Vec<VarInfo> = Vec::new();
    let mut infos = Vec::new();
    let mut bodies = Vec::new();
    let mut called: BTreeSet<u32> = BTreeSet::new();
    for (j, &fid) in members.iter().enumerate() {
        let f = p.func(fid);
        // The member's variables, renamed apart from the other members'.
        let off = vars.len() as u32;
        for v in &f.vars {
            vars.push(VarInfo {
                ty: v.ty.clone(),
                name: format!("{}_{j}", v.name),
            });
        }
        let mut body = f.body.clone();
        map_vars(&mut body, &|v| Var(v.0 + off));
        let params: Vec<Var> = f.params.iter().map(|v| Var(v.0 + off)).collect();
        let mut resumes = 0;
        flat_map(&mut body, &mut |s| match s {
            Stmt::Let(results, Op::Call { func, args, .. }) if slot.contains_key(&func) => {
                resumes += 1;
                called.insert(slot[&func]);
                vec![Stmt::MachineCall {
                    member: slot[&func],
                    args,
                    results,
                    resume: resumes,
                }]
            }
            Stmt::TailCall { func, args } if slot.contains_key(&func) => {
                vec![Stmt::MachineTailCall {
                    member: slot[&func],
                    args,
                }]
            }
            // A tail call of another function: its result is the member's.
            Stmt::TailCall { func, args } => {
                let rs: Vec<Var> = p
                    .func(func)
                    .results
                    .iter()
                    .map(|ty| fresh_var(&mut vars, ty.clone(), "r"))
                    .collect();
                vec![
                    Stmt::Let(
                        rs.clone(),
                        Op::Call {
                            func,
                            args,
                            guard: None,
                        },
                    ),
                    Stmt::Return(rs.into_iter().map(Operand::Var).collect()),
                ]
            }
            other => vec![other],
        });
        // The frame: what is live across a call of a member, the parameters among it first.
        // A parameter that is not arrives in a C local (the callee copies it out of the
        // machine's argument area), so a frame holds no more than the call must keep.
        let live = live_across_calls(&body);
        let mut frame: Vec<Var> = params
            .iter()
            .copied()
            .filter(|v| live.contains(v))
            .collect();
        frame.extend(live.into_iter().filter(|v| !params.contains(v)));
        infos.push(MachineMember {
            func: fid,
            params,
            results: f.results.clone(),
            frame,
            resumes,
        });
        bodies.push(Stmt::Member {
            member: j as u32,
            body,
        });
    }
    let machine = p.add(Function {
        kind: FuncKind::Machine(Rc::new(Machine { members: infos })),
        params: Vec::new(),
        results: Rc::from([]),
        vars,
        body: bodies,
        cold: true,
    });
    // The entries of the members other members call, in member order.
    let mut entry_of: HashMap<FuncId, FuncId> = HashMap::new();
    for j in called {
        let fid = members[j as usize];
        let f = p.func(fid);
        let mut e_vars = Vec::new();
        let params = f
            .params
            .iter()
            .map(|v| {
                let info = &f.vars[v.0 as usize];
                e_vars.push(info.clone());
                Var(e_vars.len() as u32 - 1)
            })
            .collect();
        let entry = Function {
            kind: FuncKind::MachineEntry { machine, member: j },
            params,
            results: f.results.clone(),
            vars: e_vars,
            body: Vec::new(),
            cold: true,
        };
        entry_of.insert(fid, p.add(entry));
    }
    // The native members hand deep calls to the machine.
    for &fid in members {
        flat_map(&mut p.func_mut(fid).body, &mut |s| match s {
            Stmt::Let(
                rs,
                Op::Call {
                    func,
                    args,
                    guard: None,
                },
            ) if entry_of.contains_key(&func) => vec![Stmt::Let(
                rs,
                Op::Call {
                    func,
                    args,
                    guard: Some(entry_of[&func]),
                },
            )],
            other => vec![other],
        });
    }
}

/// The members of the machines of a program, and the functions that are machines (for
/// `--emit c`'s summary and the tests).
pub fn machines(p: &Program) -> Vec<(FuncId, HashSet<FuncId>)> {
    p.ids()
        .filter_map(|id| match &p.func(id).kind {
            FuncKind::Machine(m) => Some((id, m.members.iter().map(|mb| mb.func).collect())),
            _ => None,
        })
        .collect()
}
