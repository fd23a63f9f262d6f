//! Values no one reads, across functions: the results of a function that no call reads, the
//! parameters it does not read, the accumulators of an `ifold` that neither its steps (for a
//! value read) nor the code after it read, and everything computed only for them.
//!
//! A reverse sweep is the case. `(grad-R f)` of a function `f` that closes over data (a loss
//! over its data points) computes the sensitivity of the closure, the data's included, and
//! drops it: the sweep is an `ifold` whose step is a call (it adds into the accumulators it is
//! given, so `passes::inline` leaves it alone) returning every accumulator's next value, the
//! data's with the argument's. Each function alone reads every value it computes; only across
//! the calls and the loop's back edge is the data's sensitivity seen to go nowhere.
//!
//! The analysis is optimistic (aggressive dead code elimination): nothing is read until a
//! statement that must run, or a read value, reads it, to a fixed point over the whole
//! program. A statement must run when it writes output, reads input, may fail, writes a global
//! or a boxed object, stores into an array that may be someone else's, or calls a function
//! that may not return (one that recurses: loops are counted). A store into an array
//! the function made, or into an accumulator of a sweep (an array `vl_acc_mark` marked, which
//! `vlad-lower`'s accumulation guarantees no one else holds while the sweep runs), runs only if
//! the array is read afterwards.
//!
//! One kind of failure is dropped with what it checks: the check that a sweep's accumulation
//! (`%accumulate`) adds two sensitivities of the same length (`Rt::AccLengthFail`) runs only if
//! the accumulator's array, the first of the two, is read. Both are sensitivities of one value,
//! so the check cannot fail unless a program gives a backpropagator a sensitivity of another
//! shape than its value's; the evaluator checks every addition (docs/ir.md).
//!
//! A function's results and parameters change only if it is a specialised function that is
//! called, directly and only, by `Call`s (every caller is then rewritten): the program's entry
//! points, exports and helpers keep theirs.

use crate::ir::*;
use crate::rt::Rt;
use std::collections::HashMap;

/// Drops what no one reads; the functions it changed are simplified again.
pub fn run(p: &mut Program) {
    let mut a = Analysis::new(p);
    loop {
        a.changed = false;
        for (i, f) in p.funcs.iter().enumerate() {
            a.block(i, &f.body);
        }
        if !a.changed {
            break;
        }
    }
    for (i, f) in p.funcs.iter_mut().enumerate() {
        let mut body = std::mem::take(&mut f.body);
        let before = size(&body);
        rewrite(&mut a, i, &mut body);
        let mut changed = size(&body) != before;
        f.body = body;
        if a.changeable[i] {
            let live = &a.live[i];
            let np = f.params.len();
            f.params.retain(|v| live[v.0 as usize]);
            let nr = f.results.len();
            f.results = f
                .results
                .iter()
                .zip(&a.results[i])
                .filter(|(_, &r)| r)
                .map(|(t, _)| t.clone())
                .collect();
            changed |= f.params.len() != np || f.results.len() != nr;
        }
        if changed {
            super::simplify::function(f);
        }
    }
}

struct Analysis {
    /// Per function, per variable: read by something that runs.
    live: Vec<Vec<bool>>,
    /// Per function, per result: read by some caller.
    results: Vec<Vec<bool>>,
    /// Per function: it has a statement that must run whatever its results.
    effects: Vec<bool>,
    /// Per function: its parameters and results may change.
    changeable: Vec<bool>,
    /// Per function: its parameters.
    params: Vec<Vec<Var>>,
    /// Per function: the variables defined by the length of an array, and the array.
    lengths: Vec<HashMap<Var, Var>>,
    /// Per function: the arrays no one else holds (see `owned`).
    owned: Vec<Vec<bool>>,
    changed: bool,
}

impl Analysis {
    fn new(p: &Program) -> Analysis {
        let mut changeable = super::same_args::internal(p);
        for (i, f) in p.funcs.iter().enumerate() {
            walk(&f.body, &mut |s| {
                // Both return the callee's results.
                if let Stmt::TailCall { func, .. } = s {
                    changeable[func.0 as usize] = false;
                    changeable[i] = false;
                }
            });
        }
        let mut a = Analysis {
            live: p.funcs.iter().map(|f| vec![false; f.vars.len()]).collect(),
            results: p
                .funcs
                .iter()
                .zip(&changeable)
                .map(|(f, &c)| vec![!c; f.results.len()])
                .collect(),
            effects: may_not_return(p),
            params: p.funcs.iter().map(|f| f.params.clone()).collect(),
            lengths: p.funcs.iter().map(|f| lengths(&f.body)).collect(),
            owned: p.funcs.iter().map(owned).collect(),
            changeable,
            changed: false,
        };
        for (i, f) in p.funcs.iter().enumerate() {
            if !a.changeable[i] {
                for &v in &f.params {
                    a.live[i][v.0 as usize] = true;
                }
            }
        }
        a
    }

    fn is_live(&self, f: usize, x: &Operand) -> bool {
        x.var().is_some_and(|v| self.live[f][v.0 as usize])
    }

    fn read(&mut self, f: usize, x: &Operand) {
        if let Some(v) = x.var() {
            let l = &mut self.live[f][v.0 as usize];
            if !*l {
                *l = true;
                self.changed = true;
            }
        }
    }

    fn must_run(&mut self, f: usize) {
        if !self.effects[f] {
            self.effects[f] = true;
            self.changed = true;
        }
    }

    /// Whether any statement of the block runs (marking what those read).
    fn block(&mut self, f: usize, b: &[Stmt]) -> bool {
        let mut any = false;
        for s in b.iter().rev() {
            any |= self.stmt(f, s);
        }
        any
    }

    /// Whether the statement runs (marking what it reads).
    fn stmt(&mut self, f: usize, s: &Stmt) -> bool {
        let runs = match s {
            Stmt::Let(vs, Op::Call { func: g, args, .. }) => {
                let g = g.0 as usize;
                let mut any = false;
                for (k, v) in vs.iter().enumerate() {
                    if self.live[f][v.0 as usize] {
                        any = true;
                        if !self.results[g][k] {
                            self.results[g][k] = true;
                            self.changed = true;
                        }
                    }
                }
                let runs = any || self.effects[g];
                if self.effects[g] {
                    self.must_run(f);
                }
                if runs {
                    for (j, x) in args.iter().enumerate() {
                        let p = self.params[g].get(j).copied();
                        if !self.changeable[g] || p.is_none_or(|p| self.live[g][p.0 as usize]) {
                            self.read(f, x);
                        }
                    }
                }
                return runs;
            }
            Stmt::Let(vs, op) => match self.op_runs(f, vs, op) {
                Some(runs) => runs,
                None => {
                    self.must_run(f);
                    true
                }
            },
            Stmt::Set(v, _) => self.live[f][v.0 as usize],
            Stmt::Declare(_) | Stmt::Site(_) => false,
            Stmt::Store { array, .. } => {
                let owned = array.var().is_some_and(|v| self.owned[f][v.0 as usize]);
                if owned {
                    self.is_live(f, array)
                } else {
                    self.must_run(f);
                    true
                }
            }
            Stmt::Return(xs) => {
                for (k, x) in xs.iter().enumerate() {
                    if self.results[f][k] {
                        self.read(f, x);
                    }
                }
                // It ends the function: the branches that return differ from those that go on.
                return true;
            }
            Stmt::If { cond, then, els } => {
                let a = self.block(f, then);
                let b = self.block(f, els);
                if a || b {
                    self.read(f, cond);
                }
                return a || b;
            }
            Stmt::Switch { on, cases, default } => {
                let mut any = self.block(f, default);
                for (_, b) in cases {
                    any |= self.block(f, b);
                }
                if any {
                    self.read(f, on);
                }
                return any;
            }
            Stmt::Build {
                array,
                count,
                body,
                elem,
                ..
            } => {
                let wanted = self.live[f][array.0 as usize];
                let runs = self.block(f, body) || wanted;
                if runs {
                    self.read(f, count);
                    for x in elem {
                        self.read(f, x);
                    }
                }
                return runs;
            }
            Stmt::Ifold {
                accs,
                init,
                count,
                body,
                next,
                ..
            } => {
                let mut any = false;
                for (k, a) in accs.iter().enumerate() {
                    if self.live[f][a.0 as usize] {
                        any = true;
                        self.read(f, &init[k]);
                        self.read(f, &next[k]);
                    }
                }
                let runs = self.block(f, body) || any;
                if runs {
                    self.read(f, count);
                }
                return runs;
            }
            Stmt::For { count, body, .. } => {
                let runs = self.block(f, body);
                if runs {
                    self.read(f, count);
                }
                return runs;
            }
            // Anything else (a global's assignment, a boxed object's field, the arena, the
            // statements of later passes) runs, reading all it reads.
            _ => {
                self.must_run(f);
                for b in children(s) {
                    self.block(f, b);
                }
                true
            }
        };
        if runs {
            for x in stmt_operands(s) {
                self.read(f, x);
            }
        }
        runs
    }

    /// Whether an operation other than a call runs: `Some` if only its results decide,
    /// `None` if it must.
    fn op_runs(&mut self, f: usize, vs: &[Var], op: &Op) -> Option<bool> {
        let wanted = vs.iter().any(|v| self.live[f][v.0 as usize]);
        match op {
            // The accumulator's length is the first compared (`vlad-lower`'s `lengths_agree`).
            Op::Rt(Rt::AccLengthFail, args) => {
                let acc = args
                    .get(1)
                    .and_then(|x| x.var())
                    .and_then(|v| self.lengths[f].get(&v));
                acc.map(|a| self.live[f][a.0 as usize])
            }
            Op::Rt(rt, _) => {
                let e = rt.effects();
                (!(e.io || e.fails || e.noreturn)).then_some(wanted)
            }
            Op::NewArray { .. } | Op::ArrayOf { .. } => Some(wanted),
            _ if super::simplify::is_pure(op) => Some(wanted),
            _ => None,
        }
    }
}

/// For each function, whether a call of it may not return: it recurses, or calls one that may
/// not return (its loops are counted). Such a call runs whatever its results: a program that
/// would run forever must not end instead.
fn may_not_return(p: &Program) -> Vec<bool> {
    let calls = call_graph(p);
    let mut out = vec![false; p.funcs.len()];
    for scc in vlad_core::graph::tarjan(p.funcs.len(), &calls) {
        let recursive = scc.len() > 1 || calls[scc[0]].contains(&scc[0]);
        let loops = recursive || scc.iter().any(|&f| calls[f].iter().any(|&g| out[g]));
        for f in scc {
            out[f] = loops;
        }
    }
    out
}

/// The variables defined by `length` of an array variable, and the array.
fn lengths(b: &[Stmt]) -> HashMap<Var, Var> {
    let mut out = HashMap::new();
    walk(b, &mut |s| {
        if let Stmt::Let(vs, Op::Length(Operand::Var(a))) = s {
            out.insert(vs[0], *a);
        }
    });
    out
}

/// The array variables of a function that no one else holds: those it makes (`new`, an array
/// literal, `build`), those `vl_acc_mark` marks, and a variable every assignment of which is
/// one of these, or a parameter `p` assigned where `vl_acc_owned(p)` holds (the branch of the
/// accumulation that adds into the accumulator it was given).
pub(crate) fn owned(func: &Function) -> Vec<bool> {
    let mut made = vec![false; func.vars.len()];
    // The results of `vl_acc_owned(p)`, and `p`.
    let mut owned_checks = HashMap::new();
    walk(&func.body, &mut |s| match s {
        Stmt::Let(vs, Op::NewArray { .. } | Op::ArrayOf { .. } | Op::Rt(Rt::AccMark, _)) => {
            made[vs[0].0 as usize] = true;
        }
        Stmt::Let(vs, Op::Rt(Rt::AccOwned, args)) => {
            if let Some(p) = args[0].var() {
                owned_checks.insert(vs[0], p);
            }
        }
        Stmt::Build { array, .. } => made[array.0 as usize] = true,
        _ => {}
    });
    // For each assigned variable: whether every assignment so far is of an owned array.
    let mut sets: HashMap<Var, bool> = HashMap::new();
    fn visit(
        b: &[Stmt],
        checked: Option<Var>,
        made: &[bool],
        checks: &HashMap<Var, Var>,
        sets: &mut HashMap<Var, bool>,
    ) {
        for s in b {
            match s {
                Stmt::Set(v, x) => {
                    let ok = match x.var() {
                        Some(y) => made[y.0 as usize] || Some(y) == checked,
                        None => matches!(x, Operand::Null),
                    };
                    let e = sets.entry(*v).or_insert(true);
                    *e &= ok;
                }
                Stmt::If { cond, then, els } => {
                    let p = cond.var().and_then(|c| checks.get(&c).copied());
                    visit(then, p, made, checks, sets);
                    visit(els, None, made, checks, sets);
                }
                _ => {
                    for c in children(s) {
                        visit(c, None, made, checks, sets);
                    }
                }
            }
        }
    }
    visit(&func.body, None, &made, &owned_checks, &mut sets);
    for (v, ok) in sets {
        if ok {
            made[v.0 as usize] = true;
        }
    }
    made
}

/// Drops what does not run, the parameters and results no one reads, and the arguments and
/// result variables of the calls that passed them.
fn rewrite(a: &mut Analysis, f: usize, body: &mut Block) {
    let mut out = Vec::with_capacity(body.len());
    for mut s in std::mem::take(body) {
        let runs = a.stmt(f, &s);
        match &mut s {
            Stmt::Let(vs, Op::Call { func: g, args, .. }) => {
                if !runs {
                    continue;
                }
                let g = g.0 as usize;
                if a.changeable[g] {
                    let read: Vec<bool> = a.params[g]
                        .iter()
                        .map(|p| a.live[g][p.0 as usize])
                        .collect();
                    retain_marked(args, &read);
                    retain_marked(vs, &a.results[g]);
                }
            }
            Stmt::Declare(vs) => {
                vs.retain(|v| a.live[f][v.0 as usize]);
                if vs.is_empty() {
                    continue;
                }
            }
            Stmt::Site(_) => {}
            Stmt::Return(xs) => {
                if a.changeable[f] {
                    retain_marked(xs, &a.results[f]);
                }
            }
            Stmt::Ifold {
                accs,
                init,
                body,
                next,
                ..
            } => {
                if !runs {
                    continue;
                }
                let keep: Vec<bool> = accs.iter().map(|v| a.live[f][v.0 as usize]).collect();
                retain_marked(init, &keep);
                retain_marked(next, &keep);
                retain_marked(accs, &keep);
                rewrite(a, f, body);
            }
            _ => {
                if !runs {
                    continue;
                }
                for b in children_mut(&mut s) {
                    rewrite(a, f, b);
                }
            }
        }
        out.push(match s {
            // An `ifold` left with no accumulator runs for what its steps do: a plain loop.
            Stmt::Ifold {
                accs,
                count,
                index,
                body,
                ..
            } if accs.is_empty() => Stmt::For { index, count, body },
            s => s,
        });
    }
    *body = out;
}
