//! Slots of array elements that nothing reads, taken out of the layout.
//!
//! A reverse-mode `build` or `ifold` keeps a tape: a flat array of records, one per step, each
//! the environment of the step's backpropagator. The lowering stores the whole environment
//! (the arrays the step read, the index as a real several times, the values it computed),
//! and once `passes::unread` has dropped the sensitivities no one reads (the data's), the
//! sweep loads only a few of them. A slot that no `load` of the program reads is not stored,
//! and the layout loses it, so the tape takes the memory and the stores of what the sweep
//! reads.
//!
//! The analysis is by type: the slots of a layout that any `load` of an array of that layout
//! reads, in any function. A load whose value is only stored into slots of other arrays (forward
//! mode copies a tape into its primal and tangent halves) reads its slot only if one of those is
//! read, to a fixed point. A layout that the runtime or a boxed value may see is left whole,
//! with the layouts nested in it: an array passed to or returned by the runtime, cast, held
//! by a boxed object or a global, a constant, in a union, or a parameter or result of a
//! function the runtime calls. A layout no slot of which is read keeps its first slot, and
//! nothing is stored there.
//!
//! Before that, slots that every write of a layout stores the same value into (the index as a
//! real, which the lowering stores once for each use the step made of it) are merged: a load
//! of the later slot reads the first instead, so that the later one is read by no load
//! (`merge_same`). Before that, a slot that every write stores its own index into is read as
//! the index the load is at (`own_index`): the sweep knows which record it reads, so the record
//! need not hold the step's index. And first of all, a slot into which every write of one
//! array that its function alone sees stores one value from before the array (the array the
//! step read, which each record of a tape held) is read as that value (`invariant_slots`).

use crate::ir::*;
use std::collections::{HashMap, HashSet};

/// Drops the slots no one reads from every layout the program alone sees; the functions it
/// changed are simplified again (the values only stored there are dead).
pub fn run(p: &mut Program) {
    invariant_slots(p);
    let escaped = uses(p).escaped;
    confined_invariant_slots(p, &escaped);
    site_slots(p, &escaped);
    own_index(p, &escaped);
    merge_same(p, &escaped);
    let use_ = uses(p);
    let mut kept = Kept::default();
    for f in &p.funcs {
        for v in &f.vars {
            kept.plan(&v.ty, &use_);
        }
        walk(&f.body, &mut |s| match s {
            Stmt::Let(_, Op::NewArray { layout, .. }) | Stmt::Build { layout, .. } => {
                kept.plan(&Ty::Array(layout.clone()), &use_)
            }
            _ => {}
        });
    }
    if kept.keep.values().all(|k| k.iter().all(|&x| x)) {
        return;
    }
    for f in &mut p.funcs {
        let old: Vec<Ty> = f.vars.iter().map(|v| v.ty.clone()).collect();
        let mut changed = false;
        flat_map(&mut f.body, &mut |mut s| {
            match &mut s {
                // A store into the slot a layout keeps though no one reads it is dropped: its
                // value may be a load of a dropped slot (copied only into unread slots).
                Stmt::Store { array, .. } if kept.unread_layout(&old, array) => {
                    changed = true;
                    return vec![];
                }
                // A load of a dropped slot is only copied into slots dropped too.
                Stmt::Store { array, slot, .. } | Stmt::Let(_, Op::Load { array, slot, .. }) => {
                    if let Some(k) = kept.slots(&old, array) {
                        match k[*slot as usize] {
                            Some(n) => *slot = n,
                            None => {
                                changed = true;
                                return vec![];
                            }
                        }
                    }
                }
                Stmt::Let(_, Op::NewArray { layout, .. }) => *layout = kept.layout(layout),
                Stmt::Build { layout, elem, .. } => {
                    if kept.unread.contains(layout) {
                        elem[0] = Operand::placeholder(&layout[0]);
                    }
                    let k = &kept.keep[layout];
                    changed |= k.contains(&false);
                    retain_marked(elem, k);
                    *layout = kept.layout(layout);
                }
                _ => {}
            }
            vec![s]
        });
        for v in &mut f.vars {
            v.ty = kept.ty(&v.ty);
        }
        f.results = f.results.iter().map(|t| kept.ty(t)).collect();
        if changed {
            super::simplify::function(f);
        }
    }
}

/// What the program does with each layout's slots.
fn uses(p: &Program) -> Uses {
    let mut use_ = Uses::default();
    for g in &p.globals {
        use_.escape(&g.ty);
    }
    for l in p.code_slots.iter().flatten() {
        for t in l.iter() {
            use_.escape(t);
        }
    }
    for f in &p.funcs {
        if !matches!(f.kind, FuncKind::Specialised { .. }) {
            for &v in &f.params {
                use_.escape(f.ty(v));
            }
            for t in f.results.iter() {
                use_.escape(t);
            }
        }
        let copied = copied(f);
        walk(&f.body, &mut |s| use_.stmt(p, f, s, &copied));
    }
    use_.propagate();
    use_
}

/// What one write stores into a slot, for `merge_same`.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Stored {
    /// A variable (of function `.0`) or a constant (by its printed form).
    Var(usize, Var),
    Const(String),
    /// A slot of an element of another array (`.0`, `.1`: the function and the array, `.2`
    /// the index's printed form, `.3` its layout, `.4` the slot): what forward mode's copies
    /// of a tape store. Equal to another such load of the same element if the two slots are
    /// one class of that layout.
    Copy(usize, Var, String, Layout, u32),
    /// Stored more than once by one write: equal to nothing.
    Unique(u32),
    /// Not written by this write: the slot keeps what it held.
    Kept,
}

/// The first slot of each slot's type: every slot of a type one class, before any write.
fn by_type(l: &Layout) -> Vec<u32> {
    (0..l.len())
        .map(|k| (0..k).find(|&j| l[j] == l[k]).unwrap_or(k) as u32)
        .collect()
}

/// One write of array elements: the elements of a `build` at its index, or the stores into
/// one element (an array at an index) in a block with nothing between them that could read
/// it (arithmetic, stores into arrays of other layouts).
struct Write<'a> {
    layout: Layout,
    index: Operand,
    slots: Vec<Written<'a>>,
}

/// What a write stores into a slot.
enum Written<'a> {
    One(&'a Operand),
    /// Stored more than once.
    Many,
    /// Not written: the slot keeps what it held.
    Kept,
}

/// The writes of elements of `f` (`build`s and stores; nothing else writes array elements).
fn element_writes(f: &Function) -> Vec<Write<'_>> {
    let mut writes = Vec::new();
    walk(&f.body, &mut |s| {
        if let Stmt::Build {
            layout,
            elem,
            index,
            ..
        } = s
        {
            writes.push(Write {
                layout: layout.clone(),
                index: Operand::Var(*index),
                slots: elem.iter().map(Written::One).collect(),
            });
        }
    });
    let mut blocks: Vec<&Block> = vec![&f.body];
    walk(&f.body, &mut |s| blocks.extend(children(s)));
    for block in blocks {
        let mut taken = vec![false; block.len()];
        for i in 0..block.len() {
            let Stmt::Store { array, index, .. } = &block[i] else {
                continue;
            };
            if taken[i] {
                continue;
            }
            let layout = match array {
                Operand::Var(a) => match f.ty(*a) {
                    Ty::Array(l) => l.clone(),
                    _ => continue,
                },
                _ => continue,
            };
            // The stores into this element, through the statements that cannot read it:
            // arithmetic, and stores into arrays of other layouts.
            let mut run: HashMap<u32, Vec<&Operand>> = HashMap::new();
            for (j, t) in block.iter().enumerate().skip(i) {
                match t {
                    Stmt::Store {
                        array: a,
                        index: x,
                        slot,
                        value,
                    } if a == array && x == index => {
                        run.entry(*slot).or_default().push(value);
                        taken[j] = true;
                    }
                    Stmt::Store { array: a, .. }
                        if a.var()
                            .is_some_and(|a| !matches!(f.ty(a), Ty::Array(l) if *l == layout)) => {}
                    Stmt::Let(_, Op::Binary(..) | Op::Unary(..) | Op::Copy(_)) | Stmt::Site(_) => {}
                    _ => break,
                }
            }
            let slots = (0..layout.len() as u32)
                .map(|k| match run.get(&k).map(|xs| &xs[..]) {
                    None => Written::Kept,
                    Some([x]) => Written::One(x),
                    Some(_) => Written::Many,
                })
                .collect();
            writes.push(Write {
                layout,
                index: index.clone(),
                slots,
            });
        }
    }
    writes
}

/// Makes the loads of a slot of an array that every write of the array stores the same value
/// into, a constant or a variable defined before the array and never assigned, that value: a
/// reverse `build` or `ifold` over an array keeps the array in each record of its tape, and
/// the sweep (its step inlined) reads it from there. Only arrays that their function alone
/// sees: made there (`new array` or `build`), and otherwise only loaded from, stored into
/// and measured. The slot is then read by no load of that array, and the layout may lose it.
fn invariant_slots(p: &mut Program) {
    for f in &mut p.funcs {
        let assigned = super::simplify::mutable(&f.body);
        // The variables visible where each array is made.
        let mut visible: HashMap<Var, HashSet<Var>> = HashMap::new();
        visible_at_arrays(&f.body, &mut f.params.clone(), &mut visible);
        // For each slot of each such array: the one value its writes store (`Some`), or none.
        let mut stored: HashMap<Var, Vec<Option<Option<Operand>>>> = visible
            .keys()
            .filter_map(|a| match f.ty(*a) {
                Ty::Array(l) => Some((*a, vec![None; l.len()])),
                _ => None,
            })
            .collect();
        let note = |a: &Var, k: usize, x: &Operand, stored: &mut HashMap<_, Vec<_>>| {
            let Some(slots) = stored.get_mut(a) else {
                return;
            };
            let ok = match x {
                Operand::Var(v) => !assigned.contains(v) && visible[a].contains(v),
                _ => true,
            };
            let slot: &mut Option<Option<Operand>> = &mut slots[k];
            *slot = match slot.take() {
                _ if !ok => Some(None),
                None => Some(Some(x.clone())),
                Some(Some(y)) if y == *x => Some(Some(y)),
                Some(_) => Some(None),
            };
        };
        let mut escaped: HashSet<Var> = HashSet::new();
        walk(&f.body, &mut |s| {
            let mut own: Option<&Operand> = None;
            match s {
                Stmt::Build { array, elem, .. } => {
                    for (k, x) in elem.iter().enumerate() {
                        note(array, k, x, &mut stored);
                    }
                }
                Stmt::Store {
                    array: array @ Operand::Var(a),
                    slot,
                    value,
                    ..
                } => {
                    note(a, *slot as usize, value, &mut stored);
                    own = Some(array);
                }
                Stmt::Let(_, Op::Load { array, .. } | Op::Length(array)) => own = Some(array),
                _ => {}
            }
            let mut skipped = false;
            for x in stmt_operands(s) {
                if let Operand::Var(v) = x {
                    if own.is_some_and(|o| std::ptr::eq(o, x)) && !skipped {
                        skipped = true;
                        continue;
                    }
                    escaped.insert(*v);
                }
            }
        });
        let invariant: HashMap<(Var, u32), Operand> = stored
            .into_iter()
            .filter(|(a, _)| !escaped.contains(a))
            .flat_map(|(a, slots)| {
                slots
                    .into_iter()
                    .enumerate()
                    .filter_map(move |(k, x)| x.flatten().map(|x| ((a, k as u32), x)))
            })
            .collect();
        if invariant.is_empty() {
            continue;
        }
        let mut changed = false;
        walk_mut(&mut f.body, &mut |s| {
            if let Stmt::Let(
                _,
                op @ Op::Load {
                    array: Operand::Var(_),
                    ..
                },
            ) = s
            {
                let Op::Load {
                    array: Operand::Var(a),
                    slot,
                    ..
                } = &*op
                else {
                    unreachable!()
                };
                if let Some(x) = invariant.get(&(*a, *slot)) {
                    *op = Op::Copy(x.clone());
                    changed = true;
                }
            }
        });
        if changed {
            super::simplify::function(f);
        }
    }
}

/// `invariant_slots` for arrays held in the records of other arrays, by the sites they may
/// come from (`provenance`): a load of a slot of an array whose every possible site is made in
/// the load's function and confined to its calls (`Provenance::confined`), and whose every write
/// of that slot stores one value, reads that value: a real, integer or boolean constant, or a
/// parameter or top-level `let` of the function that nothing assigns, defined before the
/// load's top-level statement. Reverse mode through an `ifold` nested in a loop (logistic
/// regression's dot product of each point with the weights) keeps a tape per point, each held
/// by a record of the outer tape, and every record of every point's tape holds the weights.
fn confined_invariant_slots(p: &mut Program, escaped: &HashSet<Layout>) {
    let Some(pr) = super::provenance::analyse(p, escaped) else {
        return;
    };
    let confined = pr.confined(p);
    if confined.is_empty() {
        return;
    }
    let home: HashMap<u32, usize> = pr.site_of.iter().map(|(&(fi, _), &s)| (s, fi)).collect();
    let same = |a: &Operand, b: &Operand| match (a, b) {
        (Operand::F64(x), Operand::F64(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    };
    // What the writes of each slot of each confined site store: one value, or `None`.
    let mut held: HashMap<(u32, u32), Option<Operand>> = HashMap::new();
    let tops: Vec<HashMap<Var, usize>> = p.funcs.iter().map(top_level_lets).collect();
    for (fi, f) in p.funcs.iter().enumerate() {
        let assigned = super::simplify::mutable(&f.body);
        let top = &tops[fi];
        let mut note = |site: u32, slot: u32, x: &Operand| {
            if !confined.contains(&site) {
                return;
            }
            let fits = home[&site] == fi
                && match x {
                    Operand::Var(v) => !assigned.contains(v) && top.contains_key(v),
                    Operand::F64(_) | Operand::I64(_) | Operand::Bool(_) => true,
                    _ => false,
                };
            let entry = held.entry((site, slot)).or_insert_with(|| Some(x.clone()));
            if !fits || entry.as_ref().is_some_and(|y| !same(x, y)) {
                *entry = None;
            }
        };
        walk(&f.body, &mut |s| match s {
            Stmt::Store {
                array, slot, value, ..
            } => {
                let Some(Ty::Array(l)) = array.var().map(|a| f.ty(a)) else {
                    return;
                };
                if escaped.contains(l) {
                    return;
                }
                let into = match pr.origin(fi, f, array) {
                    Some(o) => o.into_iter().collect(),
                    None => pr.by_layout.get(l).cloned().unwrap_or_default(),
                };
                for site in into {
                    note(site, *slot, value);
                }
            }
            Stmt::Build { array, elem, .. } => {
                if let Some(&site) = pr.site_of.get(&(fi, *array)) {
                    for (k, x) in elem.iter().enumerate() {
                        note(site, k as u32, x);
                    }
                }
            }
            Stmt::Let(vs, Op::ArrayOf { layout, .. }) => {
                if let Some(&site) = vs.first().and_then(|a| pr.site_of.get(&(fi, *a))) {
                    for k in 0..layout.len() {
                        note(site, k as u32, &Operand::Null);
                    }
                }
            }
            _ => {}
        });
    }
    for (fi, f) in p.funcs.iter_mut().enumerate() {
        let top = &tops[fi];
        // Each rewritten load, by the variable it defines (unique in its function).
        let mut rewrites: HashMap<Var, Op> = HashMap::new();
        for (at, s) in f.body.iter().enumerate() {
            walk(std::slice::from_ref(s), &mut |s| {
                let Stmt::Let(vs, Op::Load { array, slot, .. }) = s else {
                    return;
                };
                let (Some(sites), [v]) = (pr.origin(fi, f, array), &vs[..]) else {
                    return;
                };
                let mut value: Option<&Operand> = None;
                for site in &sites {
                    if home.get(site) != Some(&fi) {
                        return;
                    }
                    match held.get(&(*site, *slot)) {
                        Some(Some(x)) if value.is_none_or(|y| same(x, y)) => value = Some(x),
                        _ => return,
                    }
                }
                let visible = match value {
                    Some(Operand::Var(w)) => top[w] <= at,
                    Some(_) => true,
                    None => false,
                };
                if visible {
                    rewrites.insert(*v, Op::Copy(value.cloned().expect("a value")));
                }
            });
        }
        rewrite_loads(f, rewrites);
    }
}

/// Replaces each load that defines a variable of `rewrites` by its operation there, then
/// simplifies the function (the slots' values are then read by no one).
fn rewrite_loads(f: &mut Function, mut rewrites: HashMap<Var, Op>) {
    if rewrites.is_empty() {
        return;
    }
    walk_mut(&mut f.body, &mut |s| {
        if let Stmt::Let(vs, op @ Op::Load { .. }) = s {
            if let Some(new) = vs.first().and_then(|v| rewrites.remove(v)) {
                *op = new;
            }
        }
    });
    super::simplify::function(f);
}

/// The parameters of `f` (at 0) and the variables its body's top-level `let`s and `build`s
/// define (at one past the statement's position): where each becomes visible to the rest of
/// the body. (Not an `ifold`'s accumulators: its body sees every step's value.)
fn top_level_lets(f: &Function) -> HashMap<Var, usize> {
    let mut top: HashMap<Var, usize> = f.params.iter().map(|&v| (v, 0)).collect();
    for (i, s) in f.body.iter().enumerate() {
        match s {
            Stmt::Let(vs, _) => top.extend(vs.iter().map(|&v| (v, i + 1))),
            Stmt::Build { array, .. } => {
                top.insert(*array, i + 1);
            }
            _ => {}
        }
    }
    top
}

/// Records, for each array a block makes (`new array`, `build`), the variables visible where
/// it is made: the parameters and what the enclosing blocks defined before it.
fn visible_at_arrays(block: &[Stmt], visible: &mut Vec<Var>, out: &mut HashMap<Var, HashSet<Var>>) {
    let depth = visible.len();
    for s in block {
        match s {
            Stmt::Let(vs, Op::NewArray { .. }) if vs.len() == 1 => {
                out.insert(vs[0], visible.iter().copied().collect());
            }
            Stmt::Build { array, .. } => {
                out.insert(*array, visible.iter().copied().collect());
            }
            _ => {}
        }
        let inner = visible.len();
        match s {
            Stmt::For { index, .. } | Stmt::Build { index, .. } => visible.push(*index),
            Stmt::Ifold { index, accs, .. } => {
                visible.push(*index);
                visible.extend(accs);
            }
            _ => {}
        }
        for b in children(s) {
            visible_at_arrays(b, visible, out);
        }
        visible.truncate(inner);
        if !matches!(s, Stmt::For { .. }) {
            visible.extend(stmt_defs(s));
        }
    }
    visible.truncate(depth);
}

/// What the writes of a real slot of a site's elements store (`site_slots`).
#[derive(Clone, Copy, PartialEq, Debug)]
enum SlotValue {
    /// Nothing known yet (no write, or only copies not yet resolved).
    Any,
    /// The index of the element, as a real.
    Index,
    /// This constant (its bits).
    Const(u64),
    Other,
}

impl SlotValue {
    fn meet(self, o: SlotValue) -> SlotValue {
        match (self, o) {
            (SlotValue::Any, x) | (x, SlotValue::Any) => x,
            (x, y) if x == y => x,
            _ => SlotValue::Other,
        }
    }
}

/// `own_index` by the site each array was made at (`provenance`) rather than by layout, and
/// for constants too: a load of a real slot from an array whose every possible site's writes
/// store the element's own index there (or all one constant) reads that index (or constant).
/// Forward-over-reverse code makes the tangent half of a tape with the layout of the tape,
/// its index slot the constant 0: by layout the slot is neither, by site each is one.
fn site_slots(p: &mut Program, escaped: &HashSet<Layout>) {
    /// What one write stores into a real slot.
    enum Is {
        Known(SlotValue),
        /// A value loaded, at the index the write is at, from slot `.1` of an array made at
        /// one of the sites `.0` (`None`: anywhere).
        Copy(Option<Vec<u32>>, u32),
    }
    let Some(pr) = super::provenance::analyse(p, escaped) else {
        return;
    };
    if pr.site_of.is_empty() {
        return;
    }
    // Every write: the sites it may write into, the slot, what it stores.
    let mut writes: Vec<(Vec<u32>, u32, Is)> = Vec::new();
    for (fi, f) in p.funcs.iter().enumerate() {
        let assigned = super::simplify::mutable(&f.body);
        let reals = index_reals(f, &assigned);
        let loads = element_loads(f, escaped, &assigned);
        let classify = |x: &Operand, at: &Operand| -> Is {
            match x {
                Operand::F64(c) => Is::Known(SlotValue::Const(c.to_bits())),
                Operand::Var(v) if !assigned.contains(v) => {
                    let at = at.var().filter(|i| !assigned.contains(i));
                    if at.is_some() && reals.get(v) == at.as_ref() {
                        return Is::Known(SlotValue::Index);
                    }
                    match loads.get(v) {
                        Some((b, i, _, j)) if at.is_some() && i.var() == at => Is::Copy(
                            pr.origin(fi, f, &Operand::Var(*b))
                                .map(|o| o.into_iter().collect()),
                            *j,
                        ),
                        _ => Is::Known(SlotValue::Other),
                    }
                }
                _ => Is::Known(SlotValue::Other),
            }
        };
        walk(&f.body, &mut |s| match s {
            Stmt::Store {
                array,
                index,
                slot,
                value,
            } => {
                let Some(Ty::Array(l)) = array.var().map(|a| f.ty(a)) else {
                    return;
                };
                if escaped.contains(l) || l[*slot as usize] != Ty::F64 {
                    return;
                }
                let into = match pr.origin(fi, f, array) {
                    Some(o) => o.into_iter().collect(),
                    None => pr.by_layout.get(l).cloned().unwrap_or_default(),
                };
                writes.push((into, *slot, classify(value, index)));
            }
            Stmt::Build {
                array,
                layout,
                index,
                elem,
                ..
            } => {
                if let Some(&id) = pr.site_of.get(&(fi, *array)) {
                    for (k, x) in elem.iter().enumerate() {
                        if layout[k] == Ty::F64 {
                            writes.push((vec![id], k as u32, classify(x, &Operand::Var(*index))));
                        }
                    }
                }
            }
            _ => {}
        });
    }
    let mut value: HashMap<(u32, u32), SlotValue> = HashMap::new();
    for (into, k, is) in &writes {
        if let Is::Known(x) = is {
            for s in into {
                let e = value.entry((*s, *k)).or_insert(SlotValue::Any);
                *e = e.meet(*x);
            }
        }
    }
    loop {
        let mut changed = false;
        for (into, k, is) in &writes {
            let Is::Copy(from, j) = is else {
                continue;
            };
            let x = match from {
                None => SlotValue::Other,
                Some(sites) => sites.iter().fold(SlotValue::Any, |x, s| {
                    x.meet(value.get(&(*s, *j)).copied().unwrap_or(SlotValue::Any))
                }),
            };
            for s in into {
                let e = value.entry((*s, *k)).or_insert(SlotValue::Any);
                let m = e.meet(x);
                if m != *e {
                    *e = m;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    for (fi, f) in p.funcs.iter_mut().enumerate() {
        // Each rewritten load, by the variable it defines (unique in its function).
        let mut rewrites: HashMap<Var, Op> = HashMap::new();
        walk(&f.body, &mut |s| {
            let Stmt::Let(
                vs,
                Op::Load {
                    array: array @ Operand::Var(a),
                    index,
                    slot,
                },
            ) = s
            else {
                return;
            };
            let (Ty::Array(l), [v]) = (f.ty(*a), &vs[..]) else {
                return;
            };
            if l[*slot as usize] != Ty::F64 {
                return;
            }
            let Some(sites) = pr.origin(fi, f, array) else {
                return;
            };
            // A site whose slot no resolved write stores into reads as nothing known.
            let x = sites.iter().fold(SlotValue::Any, |x, s| {
                x.meet(match value.get(&(*s, *slot)) {
                    Some(SlotValue::Any) | None => SlotValue::Other,
                    Some(v) => *v,
                })
            });
            let op = match x {
                SlotValue::Index => Op::Unary(UnOp::I64ToF64, index.clone()),
                SlotValue::Const(c) => Op::Copy(Operand::F64(f64::from_bits(c))),
                _ => return,
            };
            rewrites.insert(*v, op);
        });
        rewrite_loads(f, rewrites);
    }
}

/// Makes the loads of a slot that every write of its layout stores its own index into, as a
/// real (`i64tof64` of the index the write is at: a tape's record holds the step's index),
/// that index converted, so that no load reads the slot (layouts not in `escaped`). Every
/// write must store into the slot: a value loaded from such a slot of another array at the
/// same index counts as the index (forward mode's copies of a tape), to a fixed point.
fn own_index(p: &mut Program, escaped: &HashSet<Layout>) {
    /// What one write stores into a slot.
    enum Is {
        Index,
        Copy(Layout, u32),
        Other,
    }
    let mut writes: Vec<(Layout, Vec<Is>)> = Vec::new();
    for f in &p.funcs {
        let assigned = super::simplify::mutable(&f.body);
        let loads = element_loads(f, escaped, &assigned);
        let reals = index_reals(f, &assigned);
        for w in element_writes(f) {
            let at = w.index.var().filter(|i| !assigned.contains(i));
            let slots = w
                .slots
                .iter()
                .map(|x| match (x, at) {
                    (Written::One(Operand::Var(v)), Some(i)) if reals.get(v) == Some(&i) => {
                        Is::Index
                    }
                    (Written::One(Operand::Var(v)), Some(i)) => match loads.get(v) {
                        Some((_, x, l, k)) if x.var() == Some(i) => Is::Copy(l.clone(), *k),
                        _ => Is::Other,
                    },
                    _ => Is::Other,
                })
                .collect();
            writes.push((w.layout, slots));
        }
    }
    writes.retain(|(l, _)| !escaped.contains(l));
    let mut own: HashMap<Layout, Vec<bool>> = writes
        .iter()
        .map(|(l, _)| (l.clone(), l.iter().map(|t| *t == Ty::F64).collect()))
        .collect();
    loop {
        let mut changed = false;
        for (l, slots) in &writes {
            for (k, x) in slots.iter().enumerate() {
                let index = match x {
                    Is::Index => true,
                    Is::Copy(m, j) => own.get(m).is_some_and(|o| o[*j as usize]),
                    Is::Other => false,
                };
                let o = own.get_mut(l).expect("a layout written");
                if !index && o[k] {
                    o[k] = false;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    for f in &mut p.funcs {
        let tys: Vec<Ty> = f.vars.iter().map(|v| v.ty.clone()).collect();
        walk_mut(&mut f.body, &mut |s| {
            let index = match s {
                Stmt::Let(
                    _,
                    Op::Load {
                        array: Operand::Var(a),
                        index,
                        slot,
                    },
                ) => match &tys[a.0 as usize] {
                    Ty::Array(l) if own.get(l).is_some_and(|o| o[*slot as usize]) => {
                        Some(index.clone())
                    }
                    _ => None,
                },
                _ => None,
            };
            if let (Some(index), Stmt::Let(vs, _)) = (index, &*s) {
                *s = Stmt::Let(vs.clone(), Op::Unary(UnOp::I64ToF64, index));
            }
        });
    }
}

/// The reals of `f` that are an index converted, `v = i64tof64 i` (neither assigned by a
/// `set`): each with its index.
fn index_reals(f: &Function, assigned: &HashSet<Var>) -> HashMap<Var, Var> {
    let mut reals = HashMap::new();
    walk(&f.body, &mut |s| {
        if let Stmt::Let(vs, Op::Unary(UnOp::I64ToF64, Operand::Var(i))) = s {
            if let [v] = &vs[..] {
                if !assigned.contains(v) && !assigned.contains(i) {
                    reals.insert(*v, *i);
                }
            }
        }
    });
    reals
}

/// The loads of one element in `f`: each variable loaded from an array variable at an index
/// that no `set` assigns (`assigned`), with the array, the index, its layout (not in
/// `escaped`) and the slot.
fn element_loads(
    f: &Function,
    escaped: &HashSet<Layout>,
    assigned: &HashSet<Var>,
) -> HashMap<Var, (Var, Operand, Layout, u32)> {
    let mut loads = HashMap::new();
    walk(&f.body, &mut |s| {
        if let Stmt::Let(
            vs,
            Op::Load {
                array: Operand::Var(a),
                index,
                slot,
            },
        ) = s
        {
            if let (Ty::Array(l), [v]) = (f.ty(*a), &vs[..]) {
                let fixed =
                    !assigned.contains(a) && index.var().is_none_or(|i| !assigned.contains(&i));
                if fixed && !escaped.contains(l) {
                    loads.insert(*v, (*a, index.clone(), l.clone(), *slot));
                }
            }
        }
    });
    loads
}

/// Makes the loads of a slot that every write of its layout stores the same value into as an
/// earlier slot load that earlier slot (layouts not in `escaped`, which the runtime or boxed
/// values may write too). The writes are the elements of a `build`, and the stores into one
/// element (an array at an index) in a block with nothing between them that could read it
/// (arithmetic, stores into arrays of other layouts); a write that leaves a slot out keeps
/// that slot's old value, equal to what it was equal to if the write also leaves the other
/// out. Slots are partitioned by type, then split by each write, to a fixed point: a value
/// loaded from one slot of another array equals one loaded from another slot of the same
/// element while those two slots are one class.
fn merge_same(p: &mut Program, escaped: &HashSet<Layout>) {
    // Every write: its layout and what it stores into each slot.
    let mut writes: Vec<(Layout, Vec<Stored>)> = Vec::new();
    for (fi, f) in p.funcs.iter().enumerate() {
        // Loads of one element: from an array variable at an index that no `set` assigns.
        let assigned = super::simplify::mutable(&f.body);
        let loads = element_loads(f, escaped, &assigned);
        let stored = |x: &Operand| match x {
            Operand::Var(v) => match loads.get(v) {
                Some((a, i, l, k)) => Stored::Copy(fi, *a, format!("{i:?}"), l.clone(), *k),
                None => Stored::Var(fi, *v),
            },
            x => Stored::Const(format!("{x:?}")),
        };
        for w in element_writes(f) {
            let slots = w
                .slots
                .iter()
                .enumerate()
                .map(|(k, x)| match x {
                    Written::Kept => Stored::Kept,
                    Written::One(x) => stored(x),
                    Written::Many => Stored::Unique(k as u32),
                })
                .collect();
            writes.push((w.layout, slots));
        }
    }
    writes.retain(|(l, _)| !escaped.contains(l));
    let mut classes: HashMap<Layout, Vec<u32>> = writes
        .iter()
        .map(|(l, _)| (l.clone(), by_type(l)))
        .collect();
    loop {
        let before = classes.clone();
        // A copy's key: the class of its slot, as the round began (a layout no write stores
        // into counts as one by type).
        let key = |x: &Stored| match x {
            Stored::Copy(f, a, i, l, k) => {
                let class = before
                    .get(l)
                    .map_or_else(|| by_type(l)[*k as usize], |c| c[*k as usize]);
                Stored::Copy(*f, *a, i.clone(), l.clone(), class)
            }
            x => x.clone(),
        };
        for (l, slots) in &writes {
            let class = classes.get_mut(l).expect("a class per written layout");
            // Slots stay together only if they were and this write stores the same into them.
            let keys: Vec<(u32, Stored)> = slots
                .iter()
                .enumerate()
                .map(|(k, x)| (class[k], key(x)))
                .collect();
            for k in 0..l.len() {
                class[k] = (0..k).find(|&j| keys[j] == keys[k]).unwrap_or(k) as u32;
            }
        }
        if classes == before {
            break;
        }
    }
    for f in &mut p.funcs {
        let tys: Vec<Ty> = f.vars.iter().map(|v| v.ty.clone()).collect();
        walk_mut(&mut f.body, &mut |s| {
            if let Stmt::Let(
                _,
                Op::Load {
                    array: Operand::Var(a),
                    slot,
                    ..
                },
            ) = s
            {
                if let Ty::Array(l) = &tys[a.0 as usize] {
                    if let Some(class) = classes.get(l) {
                        *slot = class[*slot as usize];
                    }
                }
            }
        });
    }
}

/// A slot of a layout.
type Slot = (Layout, u32);

/// What the program does with each layout.
#[derive(Default)]
struct Uses {
    /// The slots some `load` reads.
    read: HashMap<Layout, Vec<bool>>,
    /// The slots a `load` reads only to store the value in other slots (a copy of an array
    /// into another, which forward mode makes of a tape): read if one of those is.
    copies: HashMap<Slot, Vec<Slot>>,
    /// Seen by the runtime or a boxed value: left whole.
    escaped: HashSet<Layout>,
}

impl Uses {
    fn is_read(&self, (l, s): &Slot) -> bool {
        self.escaped.contains(l) || self.read.get(l).is_some_and(|r| r[*s as usize])
    }

    fn read_slot(&mut self, (l, s): Slot) {
        let n = l.len();
        self.read.entry(l).or_insert_with(|| vec![false; n])[s as usize] = true;
    }

    /// The slots copied into a slot that is read are read, to a fixed point.
    fn propagate(&mut self) {
        loop {
            let now: Vec<Slot> = self
                .copies
                .iter()
                .filter(|(from, to)| !self.is_read(from) && to.iter().any(|t| self.is_read(t)))
                .map(|(from, _)| from.clone())
                .collect();
            if now.is_empty() {
                return;
            }
            for s in now {
                self.read_slot(s);
            }
        }
    }

    /// The layouts in a type, nested ones included, left whole.
    fn escape(&mut self, t: &Ty) {
        match t {
            Ty::Array(l) if self.escaped.insert(l.clone()) => {
                for t in l.iter() {
                    self.escape(t);
                }
            }
            Ty::Union(vs) => {
                for l in vs.iter() {
                    for t in l.iter() {
                        self.escape(t);
                    }
                }
            }
            _ => {}
        }
    }

    fn escape_operand(&mut self, p: &Program, f: &Function, x: &Operand) {
        if let Some(t) = operand_ty(p, f, x) {
            self.escape(&t);
        }
    }

    fn stmt(&mut self, p: &Program, f: &Function, s: &Stmt, copied: &HashMap<Var, Vec<Slot>>) {
        match s {
            Stmt::Let(vs, op) => match op {
                Op::Load { array, slot, .. } => {
                    if let Some(Ty::Array(l)) = operand_ty(p, f, array) {
                        let from = (l, *slot);
                        match copied.get(&vs[0]) {
                            Some(to) => self.copies.entry(from).or_default().extend_from_slice(to),
                            None => self.read_slot(from),
                        }
                    }
                }
                Op::Call { .. } | Op::Copy(_) | Op::Length(_) | Op::NewArray { .. } => {}
                Op::Mark | Op::Binary(..) | Op::Unary(..) => {}
                // The runtime, boxed objects, unions, constants, and what later passes add.
                _ => {
                    for x in op_operands(op) {
                        self.escape_operand(p, f, x);
                    }
                    for &v in vs {
                        self.escape(f.ty(v));
                    }
                    match op {
                        Op::Cast(_, t) | Op::Field { ty: t, .. } | Op::MakeUnion { ty: t, .. } => {
                            self.escape(t)
                        }
                        Op::ArrayOf { layout, .. } => self.escape(&Ty::Array(layout.clone())),
                        _ => {}
                    }
                }
            },
            Stmt::SetField { value, .. } | Stmt::SetGlobal(_, value) => {
                self.escape_operand(p, f, value)
            }
            _ => {}
        }
    }
}

/// The variables of a function read only as values stored into slots of arrays (by `store`
/// or as a `build`'s element), and those slots.
fn copied(f: &Function) -> HashMap<Var, Vec<Slot>> {
    let mut to: HashMap<Var, Vec<Slot>> = HashMap::new();
    let mut other = HashSet::new();
    walk(&f.body, &mut |s| {
        let stored = match s {
            Stmt::Store {
                array: Operand::Var(a),
                slot,
                value: Operand::Var(v),
                ..
            } => match f.ty(*a) {
                Ty::Array(l) => Some((*v, (l.clone(), *slot))),
                _ => None,
            },
            _ => None,
        };
        let mut elems = Vec::new();
        if let Stmt::Build { layout, elem, .. } = s {
            for (j, x) in elem.iter().enumerate() {
                if let Some(v) = x.var() {
                    elems.push((v, (layout.clone(), j as u32)));
                }
            }
        }
        for x in stmt_operands(s) {
            let Some(v) = x.var() else { continue };
            let as_value = matches!(&stored, Some((w, _)) if *w == v)
                && !matches!(s, Stmt::Store { array, index, .. }
                    if array.var() == Some(v) || index.var() == Some(v));
            let as_elem = matches!(s, Stmt::Build { count, .. } if count.var() != Some(v))
                && elems.iter().any(|(w, _)| *w == v);
            if !as_value && !as_elem {
                other.insert(v);
            }
        }
        if let Some((v, slot)) = stored {
            to.entry(v).or_default().push(slot);
        }
        for (v, slot) in elems {
            to.entry(v).or_default().push(slot);
        }
    });
    to.retain(|v, _| !other.contains(v));
    to
}

/// The type of an operand that is a variable or a global.
fn operand_ty(p: &Program, f: &Function, x: &Operand) -> Option<Ty> {
    match x {
        Operand::Var(v) => Some(f.ty(*v).clone()),
        Operand::Global(g) => Some(p.globals[g.0 as usize].ty.clone()),
        _ => None,
    }
}

/// The slots each layout keeps, and the layouts it becomes.
#[derive(Default)]
struct Kept {
    keep: HashMap<Layout, Vec<bool>>,
    mapped: HashMap<Layout, Layout>,
    /// The layouts no slot of which is read, which keep their first slot all the same: what
    /// is stored there is never read (and may be a value whose load is dropped).
    unread: HashSet<Layout>,
}

impl Kept {
    /// Decides which slots of the layouts in `t` are kept.
    fn plan(&mut self, t: &Ty, uses: &Uses) {
        match t {
            Ty::Array(l) => {
                if self.keep.contains_key(l) {
                    return;
                }
                let mut k = if uses.escaped.contains(l) {
                    vec![true; l.len()]
                } else {
                    uses.read
                        .get(l)
                        .cloned()
                        .unwrap_or_else(|| vec![false; l.len()])
                };
                if !k.is_empty() && !k.contains(&true) {
                    k[0] = true;
                    self.unread.insert(l.clone());
                }
                self.keep.insert(l.clone(), k);
                for t in l.iter() {
                    self.plan(t, uses);
                }
            }
            Ty::Union(vs) => {
                for l in vs.iter() {
                    for t in l.iter() {
                        self.plan(t, uses);
                    }
                }
            }
            _ => {}
        }
    }

    /// Whether an array operand of the old types has a layout no slot of which is read.
    fn unread_layout(&self, old: &[Ty], array: &Operand) -> bool {
        matches!(array, Operand::Var(v) if matches!(&old[v.0 as usize], Ty::Array(l) if self.unread.contains(l)))
    }

    /// For an array operand of the old types, each old slot's new number (`None`: dropped).
    fn slots(&self, old: &[Ty], array: &Operand) -> Option<Vec<Option<u32>>> {
        let Operand::Var(v) = array else { return None };
        let Ty::Array(l) = &old[v.0 as usize] else {
            return None;
        };
        let mut n = 0;
        Some(
            self.keep[l]
                .iter()
                .map(|&k| {
                    k.then(|| {
                        n += 1;
                        n - 1
                    })
                })
                .collect(),
        )
    }

    fn layout(&mut self, l: &Layout) -> Layout {
        if let Some(m) = self.mapped.get(l) {
            return m.clone();
        }
        let k = self.keep[l].clone();
        let m: Layout = l
            .iter()
            .zip(k)
            .filter(|(_, k)| *k)
            .map(|(t, _)| self.ty(t))
            .collect();
        self.mapped.insert(l.clone(), m.clone());
        m
    }

    fn ty(&mut self, t: &Ty) -> Ty {
        match t {
            Ty::Array(l) => Ty::Array(self.layout(l)),
            Ty::Union(vs) => Ty::Union(
                vs.iter()
                    .map(|l| l.iter().map(|t| self.ty(t)).collect())
                    .collect(),
            ),
            t => t.clone(),
        }
    }
}
