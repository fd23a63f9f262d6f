//! Where each array may have been made: a flow-insensitive points-to analysis over the whole
//! program (Andersen's, on the IR's arrays).
//!
//! The IR's types are structural: reverse mode's tape of a loop and the tangent half of the
//! same tape in forward-over-reverse code have one layout, so a fact about every array of a
//! layout (`fields`' first analyses) fails for all of them when it fails for one. Here each
//! `new array`, `build` and array constant is a site, and each array variable, each array slot
//! of a site's elements, each parameter and each result of a function gets the set of sites
//! its arrays may come from, to a fixed point: through copies, joins, loads and stores of
//! array slots, the accumulators of `ifold`, calls, tail calls and returns.
//!
//! An array that comes from elsewhere (the runtime, a boxed value, a union, a global, a cast, a
//! parameter of a function the runtime calls) has an unknown origin, and a store into an array
//! of unknown origin may be a store into any site of its layout. Layouts that the runtime or a
//! boxed value may see (`fields`' escaped layouts, with the layouts nested in them) are not
//! followed: their arrays are all of unknown origin. The analysis gives up (`analyse` returns
//! `None`) past a number of rounds, and a set grown past `MAX_SITES` becomes unknown.

use crate::ir::*;
use std::collections::{BTreeSet, HashMap, HashSet};

/// The most sites one set holds before it is taken as unknown.
pub const MAX_SITES: usize = 64;

/// The most rounds over the program before the analysis gives up.
const MAX_ROUNDS: usize = 100;

/// Where an array may come from: some of the sites, or anywhere (`None`).
pub type Origin = Option<BTreeSet<u32>>;

/// The analysis's result. A site is a number, one for each `new array`, `build` or constant
/// of a followed layout, in the order of the functions and of their statements.
#[derive(Default)]
pub struct Provenance {
    /// The site each array-making statement defines, by function and variable.
    pub site_of: HashMap<(usize, Var), u32>,
    /// The sites of each layout.
    pub by_layout: HashMap<Layout, Vec<u32>>,
    vars: HashMap<(usize, Var), Origin>,
    slots: HashMap<(u32, u32), Origin>,
    results: HashMap<(usize, usize), Origin>,
    escaped: HashSet<Layout>,
}

impl Provenance {
    /// The sites the array operand `x` of function `func` may come from (`None`: anywhere;
    /// the empty set: nowhere, e.g. `null`).
    pub fn origin(&self, func: usize, f: &Function, x: &Operand) -> Origin {
        match x {
            Operand::Var(v) if self.followed(f.ty(*v)) => self
                .vars
                .get(&(func, *v))
                .cloned()
                .unwrap_or(Some(BTreeSet::new())),
            Operand::Null => Some(BTreeSet::new()),
            _ => None,
        }
    }

    /// The sites whose arrays stay in the call of the function that made them: no variable of
    /// another function, no parameter or result of their own function, and no slot of an array
    /// from a site that is not itself confined may hold one. (Recursion and calls give each
    /// call its own arrays: a value that one call stored into every element of a confined
    /// site's arrays is that call's value wherever those arrays are read.) Empty where some
    /// array of a followed layout may come from anywhere.
    pub fn confined(&self, p: &Program) -> HashSet<u32> {
        let home: HashMap<u32, usize> = self.site_of.iter().map(|(&(fi, _), &s)| (s, fi)).collect();
        let mut out: HashSet<u32> = HashSet::new();
        for (fi, f) in p.funcs.iter().enumerate() {
            for (i, info) in f.vars.iter().enumerate() {
                let v = Var(i as u32);
                if !self.followed(&info.ty) {
                    continue;
                }
                let Some(sites) = self.origin(fi, f, &Operand::Var(v)) else {
                    return HashSet::new();
                };
                let param = f.params.contains(&v);
                out.extend(sites.into_iter().filter(|s| param || home[s] != fi));
            }
            for i in 0..f.results.len() {
                let Some(sites) = self.result(fi, i) else {
                    return HashSet::new();
                };
                out.extend(sites);
            }
        }
        loop {
            let before = out.len();
            for ((site, _), held) in &self.slots {
                if out.contains(site) {
                    match held {
                        Some(sites) => out.extend(sites.iter().copied()),
                        None => return HashSet::new(),
                    }
                }
            }
            if out.len() == before {
                break;
            }
        }
        home.into_keys().filter(|s| !out.contains(s)).collect()
    }

    /// What result `i` of function `func` may come from.
    fn result(&self, func: usize, i: usize) -> Origin {
        self.results
            .get(&(func, i))
            .cloned()
            .unwrap_or(Some(BTreeSet::new()))
    }

    /// Whether arrays of this type are followed (a flat array of a layout not escaped).
    fn followed(&self, t: &Ty) -> bool {
        matches!(t, Ty::Array(l) if !self.escaped.contains(l))
    }

    /// What slot `slot` of the elements of the arrays of `from` may hold.
    fn loaded(&self, from: &Origin, slot: u32) -> Origin {
        let sites = from.as_ref()?;
        let mut out = BTreeSet::new();
        for s in sites {
            match self.slots.get(&(*s, slot)) {
                Some(None) => return None,
                Some(Some(xs)) => out.extend(xs.iter().copied()),
                None => {}
            }
        }
        Some(out)
    }
}

/// Joins `x` into the origin `map` holds at `key` (nothing, at first): whether it grew.
fn join_at<K: std::hash::Hash + Eq>(map: &mut HashMap<K, Origin>, key: K, x: &Origin) -> bool {
    join(map.entry(key).or_insert(Some(BTreeSet::new())), x)
}

/// Joins `x` into `into`: whether it grew.
fn join(into: &mut Origin, x: &Origin) -> bool {
    match (into.as_mut(), x) {
        (None, _) => false,
        (Some(_), None) => {
            *into = None;
            true
        }
        (Some(a), Some(b)) => {
            let before = a.len();
            a.extend(b.iter().copied());
            if a.len() > MAX_SITES {
                *into = None;
                return true;
            }
            a.len() != before
        }
    }
}

/// The origins of the arrays of program `p`, whose layouts in `escaped` are not followed;
/// `None` where the analysis does not settle within its rounds.
pub fn analyse(p: &Program, escaped: &HashSet<Layout>) -> Option<Provenance> {
    let mut pr = Provenance {
        escaped: escaped.clone(),
        ..Provenance::default()
    };
    for (fi, f) in p.funcs.iter().enumerate() {
        if matches!(f.kind, FuncKind::Machine(_) | FuncKind::MachineEntry { .. }) {
            return None;
        }
        walk(&f.body, &mut |s| {
            let made = match s {
                Stmt::Let(vs, Op::NewArray { .. } | Op::ArrayOf { .. }) if vs.len() == 1 => {
                    Some(vs[0])
                }
                Stmt::Build { array, .. } => Some(*array),
                _ => None,
            };
            if let Some(a) = made {
                if let Ty::Array(l) = f.ty(a) {
                    if !escaped.contains(l) {
                        let id = pr.site_of.len() as u32;
                        pr.site_of.insert((fi, a), id);
                        pr.by_layout.entry(l.clone()).or_default().push(id);
                    }
                }
            }
        });
    }
    // The parameters of the functions the runtime calls come from anywhere.
    for (fi, f) in p.funcs.iter().enumerate() {
        if !matches!(f.kind, FuncKind::Specialised { .. }) {
            for &v in &f.params {
                pr.vars.insert((fi, v), None);
            }
        }
    }
    for _ in 0..MAX_ROUNDS {
        let mut changed = false;
        for (fi, f) in p.funcs.iter().enumerate() {
            walk(&f.body, &mut |s| changed |= step(&mut pr, p, fi, f, s));
        }
        if !changed {
            return Some(pr);
        }
    }
    None
}

/// The arguments of a call (in function `fi`) joined into callee `c`'s parameters: whether
/// any grew.
fn pass_args(
    pr: &mut Provenance,
    p: &Program,
    fi: usize,
    f: &Function,
    c: usize,
    args: &[Operand],
) -> bool {
    let g = &p.funcs[c];
    let mut changed = false;
    for (param, x) in g.params.iter().zip(args) {
        if pr.followed(g.ty(*param)) {
            let o = pr.origin(fi, f, x);
            changed |= join_at(&mut pr.vars, (c, *param), &o);
        }
    }
    changed
}

/// One statement's effect on the origins: whether any grew.
fn step(pr: &mut Provenance, p: &Program, fi: usize, f: &Function, s: &Stmt) -> bool {
    let mut changed = false;
    let set = |pr: &mut Provenance, v: Var, x: Origin| -> bool {
        pr.followed(f.ty(v)) && join_at(&mut pr.vars, (fi, v), &x)
    };
    match s {
        Stmt::Let(vs, op) => match op {
            Op::NewArray { .. } | Op::ArrayOf { .. } if vs.len() == 1 => {
                if let Some(&id) = pr.site_of.get(&(fi, vs[0])) {
                    changed |= set(pr, vs[0], Some(BTreeSet::from([id])));
                }
            }
            Op::Copy(x) if vs.len() == 1 => {
                let o = pr.origin(fi, f, x);
                changed |= set(pr, vs[0], o);
            }
            Op::Load { array, slot, .. } if vs.len() == 1 => {
                let from = pr.origin(fi, f, array);
                let o = pr.loaded(&from, *slot);
                changed |= set(pr, vs[0], o);
            }
            Op::Call { func, args, guard } => {
                for callee in std::iter::once(func).chain(guard.as_ref()) {
                    let c = callee.0 as usize;
                    changed |= pass_args(pr, p, fi, f, c, args);
                    for (i, v) in vs.iter().enumerate() {
                        let o = pr.result(c, i);
                        changed |= set(pr, *v, o);
                    }
                }
            }
            _ => {
                for v in vs {
                    changed |= set(pr, *v, None);
                }
            }
        },
        Stmt::Set(v, x) => {
            let o = pr.origin(fi, f, x);
            changed |= set(pr, *v, o);
        }
        Stmt::Store {
            array, slot, value, ..
        } if value.var().is_some_and(|v| pr.followed(f.ty(v))) => {
            let o = pr.origin(fi, f, value);
            let into = match pr.origin(fi, f, array) {
                Some(sites) => sites.into_iter().collect(),
                // A store into an array from anywhere: into any site of its layout.
                None => match array.var().map(|a| f.ty(a)) {
                    Some(Ty::Array(l)) => pr.by_layout.get(l).cloned().unwrap_or_default(),
                    _ => Vec::new(),
                },
            };
            for site in into {
                changed |= join_at(&mut pr.slots, (site, *slot), &o);
            }
        }
        Stmt::Build { array, elem, .. } => {
            if let Some(&id) = pr.site_of.get(&(fi, *array)) {
                changed |= set(pr, *array, Some(BTreeSet::from([id])));
                for (k, x) in elem.iter().enumerate() {
                    if x.var().is_some_and(|v| pr.followed(f.ty(v))) {
                        let o = pr.origin(fi, f, x);
                        changed |= join_at(&mut pr.slots, (id, k as u32), &o);
                    }
                }
            }
        }
        Stmt::Ifold {
            accs, init, next, ..
        } => {
            for (a, (x, y)) in accs.iter().zip(init.iter().zip(next)) {
                let o = pr.origin(fi, f, x);
                changed |= set(pr, *a, o);
                let o = pr.origin(fi, f, y);
                changed |= set(pr, *a, o);
            }
        }
        Stmt::Return(xs) => {
            for (i, x) in xs.iter().enumerate() {
                if f.results.get(i).is_some_and(|t| pr.followed(t)) {
                    let o = pr.origin(fi, f, x);
                    changed |= join_at(&mut pr.results, (fi, i), &o);
                }
            }
        }
        Stmt::TailCall { func, args } => {
            let c = func.0 as usize;
            changed |= pass_args(pr, p, fi, f, c, args);
            for i in 0..f.results.len() {
                if pr.followed(&f.results[i]) {
                    let o = pr.result(c, i);
                    changed |= join_at(&mut pr.results, (fi, i), &o);
                }
            }
        }
        // No machine statements: `analyse` refuses a program with machines.
        _ => {}
    }
    changed
}
