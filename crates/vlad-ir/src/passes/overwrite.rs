//! A `build` that overwrites an array no one reads after it, an update in place where a
//! hand-written loop would make no new array: element `i` of the new array is computed from
//! elements `i` of arrays of its length, and one of them, `x`, is dead once the build has run
//! and held by no one else. The build then stores its elements into `x` and its result is `x`.
//!
//! The case is the reverse sweeps' `plus` of two dense sensitivities (log-sum-exp: the sum's
//! and the maximum's) and the copy that a one-hot is added into: the first operand is the
//! sweep's accumulator, read only there. The allocation, and the write of a fresh array that
//! the cache has to fetch first, go.
//!
//! What makes it safe, for the build `b = build n (i) body elem` and the array variable `x`:
//! - `n` is `length x`, defined in the build's block before it with no assignment of `x` in
//!   between; `x`'s layout is the build's and holds no pointer (an older array must not point
//!   to newer objects: the collector's invariant, `vl_collect`);
//! - the body reads `x` (and anything that may hold the same array) only by loads at index
//!   `i`: each iteration reads element `i` before the stores at its end overwrite it;
//! - the arrays `x` may be (its alias class: the variables joined by copies, `Set`s, the
//!   accumulators of `ifold`s, `vl_acc_mark`, collections and `release carrying`) are made in
//!   this function (`new array`, `build`), never a parameter, a call's result or a load;
//! - none of them is passed to a call, stored, returned or cast in a statement that may run
//!   before the build (earlier in the text, or in a loop around it);
//! - none of the class's variables (but `b`) is live after the build.
//!
//! An accumulator's array carries `vl_acc_mark` (a sweep adds into it in place); the result is
//! a new array as far as anyone after it knows, so the mark is cleared (`vl_acc_clear`).

use crate::ir::*;
use crate::liveness::{Live, Liveness};
use crate::rt::Rt;
use std::collections::HashMap;

/// Rewrites every such build of every function without machines.
pub fn run(p: &mut Program) {
    for f in &mut p.funcs {
        let mut machine = false;
        walk(&f.body, &mut |s| {
            machine |= matches!(s, Stmt::Member { .. })
        });
        if !machine {
            function(f);
        }
    }
}

/// Union-find over a function's variables.
struct Classes(Vec<u32>);

impl Classes {
    fn find(&mut self, v: Var) -> u32 {
        let mut r = v.0;
        while self.0[r as usize] != r {
            r = self.0[r as usize];
        }
        let mut c = v.0;
        while self.0[c as usize] != r {
            let next = self.0[c as usize];
            self.0[c as usize] = r;
            c = next;
        }
        r
    }
    fn join(&mut self, a: Var, b: &Operand) {
        if let Operand::Var(b) = b {
            let (ra, rb) = (self.find(a), self.find(*b));
            self.0[ra as usize] = rb;
        }
    }
}

/// What the whole function says about each alias class.
struct Facts {
    classes: Classes,
    /// Per variable: defined by something other than a fresh array or a copy of its class.
    foreign: Vec<bool>,
    /// Per variable: defined by `vl_acc_mark`.
    marked: Vec<bool>,
    /// Each statement's number in a pre-order walk, and the escaping uses of variables, by the
    /// number of the statement that makes them.
    escapes: Vec<(usize, Var)>,
    /// The number range of each loop (its own number to its last nested statement's).
    loops: Vec<(usize, usize)>,
}

/// The variables a statement uses where the array they hold could be kept by someone else:
/// every operand but a load's array, a length's, a store's array, an ownership test's and the
/// copies that join classes.
fn escaping(s: &Stmt) -> Vec<Var> {
    let xs: Vec<&Operand> = match s {
        Stmt::Let(_, Op::Load { index, .. }) => vec![index],
        Stmt::Let(_, Op::Length(_) | Op::Copy(_) | Op::Rt(Rt::AccMark | Rt::AccOwned, _)) => {
            vec![]
        }
        Stmt::Let(_, Op::Collect { mark, budget, .. }) => vec![mark, budget],
        Stmt::Let(_, Op::ReleaseCarrying { mark, .. }) => vec![mark],
        Stmt::Set(..) => vec![],
        Stmt::Store { index, value, .. } => vec![index, value],
        Stmt::Ifold { count, .. } => vec![count],
        _ => stmt_operands(s),
    };
    xs.into_iter().filter_map(Operand::var).collect()
}

fn facts(f: &Function) -> Facts {
    let n = f.vars.len();
    let mut facts = Facts {
        classes: Classes((0..n as u32).collect()),
        foreign: vec![false; n],
        marked: vec![false; n],
        escapes: Vec::new(),
        loops: Vec::new(),
    };
    for p in &f.params {
        facts.foreign[p.0 as usize] = true;
    }
    let mut number = 0;
    fn visit(b: &[Stmt], facts: &mut Facts, number: &mut usize) {
        for s in b {
            let me = *number;
            *number += 1;
            for v in escaping(s) {
                facts.escapes.push((me, v));
            }
            match s {
                Stmt::Let(vs, op) => match op {
                    Op::Copy(_) | Op::Rt(Rt::AccMark, _) => {
                        let x = match op {
                            Op::Rt(_, args) => &args[0],
                            Op::Copy(x) => x,
                            _ => unreachable!("a copy or a mark"),
                        };
                        facts.marked[vs[0].0 as usize] = matches!(op, Op::Rt(..));
                        match x {
                            Operand::Var(_) => facts.classes.join(vs[0], x),
                            Operand::Null => {}
                            _ => facts.foreign[vs[0].0 as usize] = true,
                        }
                    }
                    Op::NewArray { .. } => {}
                    Op::Collect { values: xs, .. } | Op::ReleaseCarrying { arrays: xs, .. } => {
                        for (i, v) in vs.iter().enumerate() {
                            match xs.get(i) {
                                Some(x) => facts.classes.join(*v, x),
                                None => facts.foreign[v.0 as usize] = true,
                            }
                        }
                    }
                    _ => vs.iter().for_each(|v| facts.foreign[v.0 as usize] = true),
                },
                Stmt::Set(v, x) => match x {
                    Operand::Var(_) => facts.classes.join(*v, x),
                    Operand::Null => {}
                    _ => facts.foreign[v.0 as usize] = true,
                },
                Stmt::Ifold {
                    accs, init, next, ..
                } => {
                    for (i, a) in accs.iter().enumerate() {
                        for x in [&init[i], &next[i]] {
                            match x {
                                Operand::Var(_) => facts.classes.join(*a, x),
                                Operand::Null => {}
                                _ => facts.foreign[a.0 as usize] = true,
                            }
                        }
                    }
                }
                Stmt::MachineCall { results, .. } => results
                    .iter()
                    .for_each(|v| facts.foreign[v.0 as usize] = true),
                _ => {}
            }
            for c in children(s) {
                visit(c, facts, number);
            }
            if matches!(
                s,
                Stmt::For { .. } | Stmt::Loop(_) | Stmt::Build { .. } | Stmt::Ifold { .. }
            ) {
                facts.loops.push((me, *number - 1));
            }
        }
    }
    visit(&f.body, &mut facts, &mut number);
    facts
}

/// A build that may overwrite `x`, at pre-order number `at`.
struct Candidate {
    at: usize,
    array: Var,
    x: Var,
}

/// The builds of `b` (numbered from `number`) whose count is the length of an array of their
/// layout, defined before them in their block with no assignment of the array in between, and
/// whose body reads that array's class only at the build's index.
fn candidates(
    f: &Function,
    b: &[Stmt],
    number: &mut usize,
    facts: &mut Facts,
    out: &mut Vec<Candidate>,
) {
    // The lengths defined so far in this block, by variable: the array, and still valid.
    let mut lengths: HashMap<Var, Var> = HashMap::new();
    for s in b {
        let me = *number;
        *number += 1;
        if let Stmt::Build {
            array,
            layout,
            count: Operand::Var(n),
            index,
            body,
            elem,
        } = s
        {
            if let Some(&x) = lengths.get(n) {
                let ty = Ty::Array(layout.clone());
                if f.ty(x) == &ty
                    && ty.is_pointer_free_array()
                    && reads_at(body, elem, x, *index, facts)
                {
                    out.push(Candidate {
                        at: me,
                        array: *array,
                        x,
                    });
                }
            }
        }
        // An assignment of an array (here or nested) ends the lengths taken of it.
        let mut assigned = stmt_defs(s);
        walk(std::slice::from_ref(s), &mut |t| {
            assigned.extend(stmt_defs(t));
            if let Stmt::Set(v, _) = t {
                assigned.push(*v);
            }
        });
        lengths.retain(|_, a| !assigned.contains(a));
        if let Stmt::Let(vs, Op::Length(Operand::Var(a))) = s {
            lengths.insert(vs[0], *a);
        }
        for c in children(s) {
            candidates(f, c, number, facts, out);
        }
    }
}

/// Whether the body and elements of a build over `index` use `x`'s class only by loads at
/// `index` and lengths.
fn reads_at(body: &[Stmt], elem: &[Operand], x: Var, index: Var, facts: &mut Facts) -> bool {
    let class = facts.classes.find(x);
    let mut ok = elem
        .iter()
        .filter_map(Operand::var)
        .all(|v| facts.classes.find(v) != class);
    walk(body, &mut |s| {
        let allowed: Vec<&Operand> = match s {
            Stmt::Let(
                _,
                Op::Load {
                    index: Operand::Var(i),
                    ..
                },
            ) if *i == index => vec![],
            Stmt::Let(_, Op::Length(_)) => vec![],
            _ => stmt_operands(s),
        };
        ok &= allowed
            .into_iter()
            .filter_map(Operand::var)
            .all(|v| facts.classes.find(v) != class);
        ok &= stmt_defs(s)
            .iter()
            .chain(match s {
                Stmt::Set(v, _) => Some(v),
                _ => None,
            })
            .all(|v| facts.classes.find(*v) != class);
    });
    ok
}

/// Rewrites the builds of one function that can overwrite an array; whether it changed.
pub fn function(f: &mut Function) -> bool {
    let mut facts = facts(f);
    let mut found = Vec::new();
    candidates(f, &f.body, &mut 0, &mut facts, &mut found);
    if found.is_empty() {
        return false;
    }
    // Per class: its variables, whether one is foreign or marked.
    let n = f.vars.len();
    let mut members: HashMap<u32, Vec<Var>> = HashMap::new();
    for v in 0..n as u32 {
        let c = facts.classes.find(Var(v));
        members.entry(c).or_default().push(Var(v));
    }
    let escapes: Vec<(usize, u32)> = facts
        .escapes
        .iter()
        .map(|&(at, v)| (at, facts.classes.find(v)))
        .collect();
    found.retain(|c| {
        let class = facts.classes.find(c.x);
        let vars = &members[&class];
        if vars.iter().any(|v| facts.foreign[v.0 as usize]) {
            return false;
        }
        // An escape that may run before the build: earlier, or in a loop around both.
        let around: Vec<&(usize, usize)> = facts
            .loops
            .iter()
            .filter(|(s, e)| *s < c.at && c.at <= *e)
            .collect();
        !escapes.iter().any(|&(at, e)| {
            e == class && (at < c.at || around.iter().any(|(s, end)| *s <= at && at <= *end))
        })
    });
    if found.is_empty() {
        return false;
    }
    // Liveness just after each candidate.
    let at: HashMap<Var, usize> = found
        .iter()
        .enumerate()
        .map(|(i, c)| (c.array, i))
        .collect();
    let mut live_after = vec![Live::new(); found.len()];
    let mut observe = |s: &Stmt, live: &Live| {
        if let Stmt::Build { array, .. } = s {
            if let Some(&i) = at.get(array) {
                live_after[i].extend(live.iter().copied());
            }
        }
    };
    Liveness::new(&mut observe).block(&f.body, &Live::new());
    let mut chosen: HashMap<Var, (Var, bool)> = HashMap::new();
    for (i, c) in found.iter().enumerate() {
        let class = facts.classes.find(c.x);
        let vars = &members[&class];
        if vars
            .iter()
            .any(|v| *v != c.array && live_after[i].contains(v))
        {
            continue;
        }
        let marked = vars.iter().any(|v| facts.marked[v.0 as usize]);
        chosen.insert(c.array, (c.x, marked));
    }
    if chosen.is_empty() {
        return false;
    }
    flat_map(&mut f.body, &mut |s| match s {
        Stmt::Build {
            array,
            count,
            index,
            mut body,
            elem,
            ..
        } if chosen.contains_key(&array) => {
            let (x, marked) = chosen[&array];
            // The element's slots that are x's own at the index (a copy of x) stay.
            let mut own = HashMap::new();
            for s in &body {
                if let Stmt::Let(
                    vs,
                    Op::Load {
                        array: Operand::Var(a),
                        index: Operand::Var(i),
                        slot,
                    },
                ) = s
                {
                    if *a == x && *i == index {
                        own.insert(vs[0], *slot);
                    }
                }
            }
            for (slot, value) in elem.into_iter().enumerate() {
                if value.var().and_then(|v| own.get(&v)) == Some(&(slot as u32)) {
                    continue;
                }
                body.push(Stmt::Store {
                    array: Operand::Var(x),
                    index: Operand::Var(index),
                    slot: slot as u32,
                    value,
                });
            }
            let result = if marked {
                Op::Rt(Rt::AccClear, vec![Operand::Var(x)])
            } else {
                Op::Copy(Operand::Var(x))
            };
            // A copy of x: nothing to do but the loads.
            let copy = body
                .iter()
                .all(|s| matches!(s, Stmt::Let(_, Op::Load { .. }) | Stmt::Site(_)));
            let result = Stmt::Let(vec![array], result);
            if copy {
                vec![result]
            } else {
                vec![Stmt::For { index, count, body }, result]
            }
        }
        s => vec![s],
    });
    true
}
