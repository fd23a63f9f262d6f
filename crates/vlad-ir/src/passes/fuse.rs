//! Paper 002's fusion of `build` into `get` (Fig. 7c, `(build n f)[i] ~> f i`), and its loop
//! partial evaluation (Fig. 7d and g: an `ifold` accumulator nothing reads is not computed).
//!
//! **Fusion.** An array made by a `build` whose step is cheap and only computes (no call, no
//! check, no allocation, no write), and which the function only reads (`load`, `length`), is
//! not made: each read computes the element it reads, by a copy of the step at the read's
//! index, and `length` is the count. The read's index is below the count (every `load` is
//! checked before it, or proved), so the copy computes what the element held. What this
//! removes is the intermediate array of differentiated code: the one-hot tangent of forward
//! `grad`'s `(vector-hot n i)`, a zero tangent, the array of a `vector-map` read once.
//!
//! **Dead accumulators.** An `ifold` accumulator that nothing after the loop reads, and that
//! the step reads only to compute its own next value (or that of other such accumulators),
//! is dropped with the code that computed it: the primal half of a dual number whose tangent
//! alone is used (`(tangent (f* ...))`), paper 002's loop fission followed by `snd`.

use crate::ir::*;
use crate::passes::simplify::count_uses;
use std::collections::{HashMap, HashSet};

/// The largest step (in statements) that fusion copies into each read.
pub const MAX_STEP: usize = 12;

/// Fuses the builds of `f` that can be and drops its dead accumulators; whether anything
/// changed.
pub fn function(f: &mut Function) -> bool {
    let mut fused = false;
    for _ in 0..4 {
        match fuse_builds(f) {
            Fused::Nothing => break,
            Fused::Flat => {}
            // The rows now built where they are read are read through copies: propagated,
            // the next round sees the reads of each row and fuses it into them.
            Fused::Rows => crate::passes::simplify::function(f),
        }
        fused = true;
    }
    for _ in 0..4 {
        if !fuse_consumers(f) {
            break;
        }
        // A consumer's reads of a row the producer's step builds are reads of a copy of it:
        // propagated, the row's own consumer is seen in the next round.
        crate::passes::simplify::function(f);
        fused = true;
    }
    let dropped = dead_accumulators(&mut f.body);
    fused || dropped
}

/// A build to fuse: its index, step and element operands.
struct Step {
    index: Var,
    count: Operand,
    body: Block,
    elem: Vec<Operand>,
}

/// Paper 002's build/ifold fusion, of a producer into its consumer: an array made by a
/// `build` and read, element `j` at step `j`, by the loop that follows it over the same count
/// (a fold's or another build's), and read nowhere else but for its length, is not made: the
/// producer's step runs at the top of the consumer's, and the reads take its element. Unlike
/// `fuse_builds`, any step fuses so (a call, a check, an `exp`, the rows of a matrix): each
/// element is computed once, as before, and the effects happen in the same order, because
/// what runs between the producer's steps is pure and records no call site (`consumer`): the
/// records between the two loops move after the consumer.
/// Where the consumer is a reduction, as `matrix-sum` of a `matrix-map2` of an outer product
/// (paper 002's unfused NNMF), no intermediate array is made at all.
fn fuse_consumers(f: &mut Function) -> bool {
    let reads = count_reads(&f.body);
    // A count that may change would not be the length where the array's was read.
    let changing = assigned(&f.body);
    let mut fused: Vec<(Var, Operand)> = Vec::new();
    fuse_in(&mut f.body, &reads, &changing, &mut fused);
    if fused.is_empty() {
        return false;
    }
    // The lengths of the arrays no longer made are their counts.
    let counts: HashMap<Var, Operand> = fused.into_iter().collect();
    walk_mut(&mut f.body, &mut |s| {
        if let Stmt::Let(_, op) = s {
            let n = match op {
                Op::Length(Operand::Var(a)) => counts.get(a).cloned(),
                _ => None,
            };
            if let Some(n) = n {
                *op = Op::Copy(n);
            }
        }
    });
    true
}

/// How a block reads a variable: as the array of `load`s (how many), or otherwise (as the
/// array of a `length` is neither).
#[derive(Default)]
struct Reads {
    loads: usize,
    other: usize,
}

fn count_reads(block: &[Stmt]) -> HashMap<Var, Reads> {
    let mut reads: HashMap<Var, Reads> = HashMap::new();
    walk(block, &mut |s| match s {
        Stmt::Let(_, Op::Load { array, index, .. }) => {
            if let Operand::Var(a) = array {
                reads.entry(*a).or_default().loads += 1;
            }
            if let Operand::Var(i) = index {
                reads.entry(*i).or_default().other += 1;
            }
        }
        Stmt::Let(_, Op::Length(_)) => {}
        _ => {
            for v in stmt_operands(s).iter().filter_map(|x| x.var()) {
                reads.entry(v).or_default().other += 1;
            }
        }
    });
    reads
}

/// Fuses the producers of `block` and of the blocks nested in it into their consumers, noting
/// each fused array with its count.
fn fuse_in(
    block: &mut Block,
    reads: &HashMap<Var, Reads>,
    changing: &HashSet<Var>,
    fused: &mut Vec<(Var, Operand)>,
) {
    for s in block.iter_mut() {
        for b in children_mut(s) {
            fuse_in(b, reads, changing, fused);
        }
    }
    let mut p = 0;
    while p < block.len() {
        if let Some(q) = consumer(block, p, reads, changing) {
            let Stmt::Build {
                array,
                count,
                index,
                body,
                elem,
                ..
            } = block.remove(p)
            else {
                unreachable!("consumer matched a build")
            };
            // The call-site records between the two move after the consumer (the last of
            // them): the producer's steps, which now run in the consumer's, start from the
            // site they started from, and the site after the consumer, which records none,
            // is as it was.
            let between: Vec<Stmt> = block.drain(p..q - 1).collect();
            let site = last_record(&between);
            let kept: Vec<Stmt> = between
                .into_iter()
                .filter(|t| !matches!(t, Stmt::Site(_)))
                .collect();
            let q = p + kept.len();
            block.splice(p..p, kept);
            let (j, body_q) = match &mut block[q] {
                Stmt::Ifold { index, body, .. } | Stmt::Build { index, body, .. } => (*index, body),
                _ => unreachable!("consumer is a loop"),
            };
            let mut top = vec![Stmt::Let(vec![index], Op::Copy(Operand::Var(j)))];
            top.extend(body);
            walk_mut(body_q, &mut |t| {
                if let Stmt::Let(_, op) = t {
                    if let Op::Load { array: a, slot, .. } = op {
                        if *a == Operand::Var(array) {
                            *op = Op::Copy(elem[*slot as usize].clone());
                        }
                    }
                }
            });
            top.append(body_q);
            *body_q = top;
            if let Some(n) = site {
                block.insert(q + 1, Stmt::Site(n));
            }
            fused.push((array, count));
            continue;
        }
        p += 1;
    }
}

/// Where `block[p]` is a `build` that fuses into a consumer: the consumer's position. The
/// consumer is an `ifold` or `build` over the build's count (or its length) after statements
/// that only compute and record sites; its step is pure, records no site, and reads the array
/// only at its own index; the array is read nowhere else but for its length, and its count
/// does not change. The producer's step reads nothing the consumer assigns, and neither
/// returns nor leaves its loop.
fn consumer(
    block: &[Stmt],
    p: usize,
    reads: &HashMap<Var, Reads>,
    changing: &HashSet<Var>,
) -> Option<usize> {
    let Stmt::Build {
        array, count, body, ..
    } = &block[p]
    else {
        return None;
    };
    if count.var().is_some_and(|v| changing.contains(&v)) {
        return None;
    }
    let r = reads.get(array)?;
    if r.other > 0 || r.loads == 0 {
        return None;
    }
    // The statements between: pure computation (the consumer's count among them) and sites.
    let mut lengths: HashSet<Var> = HashSet::new();
    let mut q = p + 1;
    while q < block.len() {
        match &block[q] {
            Stmt::Site(_) => {}
            Stmt::Let(vs, Op::Length(Operand::Var(a))) if a == array => lengths.extend(vs),
            Stmt::Let(_, op) if crate::passes::simplify::is_pure(op) => {}
            _ => break,
        }
        q += 1;
    }
    let (c, j, q_body) = match block.get(q)? {
        Stmt::Ifold {
            count: c,
            index,
            body,
            ..
        }
        | Stmt::Build {
            count: c,
            index,
            body,
            ..
        } => (c, *index, body),
        _ => return None,
    };
    let same_count = c == count || c.var().is_some_and(|v| lengths.contains(&v));
    if !same_count || !pure(q_body) {
        return None;
    }
    let mut sites = false;
    let mut loads_at_j = 0;
    walk(q_body, &mut |t| {
        sites |= matches!(t, Stmt::Site(_));
        if let Stmt::Let(
            _,
            Op::Load {
                array: a, index, ..
            },
        ) = t
        {
            if *a == Operand::Var(*array) && *index == Operand::Var(j) {
                loads_at_j += 1;
            }
        }
    });
    if sites || loads_at_j != r.loads {
        return None;
    }
    // The producer's step: no control leaving it, and nothing the consumer assigns read.
    let mut leaves = false;
    walk(body, &mut |t| {
        leaves |= matches!(
            t,
            Stmt::Return(_)
                | Stmt::TailCall { .. }
                | Stmt::Continue
                | Stmt::Loop(_)
                | Stmt::Release(_)
                | Stmt::Let(
                    _,
                    Op::Mark | Op::Collect { .. } | Op::ReleaseCarrying { .. }
                )
        )
    });
    (!leaves && reads_fixed(&block[p], &assigned(q_body))).then_some(q)
}

/// What a round of fusion did: nothing, fused arrays of scalars, or fused arrays whose
/// elements are arrays it builds (a matrix's rows).
enum Fused {
    Nothing,
    Flat,
    Rows,
}

fn fuse_builds(f: &mut Function) -> Fused {
    let assigned = assigned(&f.body);
    // A step that reads arrays computes the same later only if nothing writes into arrays
    // between (in-place accumulation of reverse mode stores into an array it was given).
    let writes = writes_arrays(&f.body, &f.vars);
    let mut steps: HashMap<Var, Step> = HashMap::new();
    walk(&f.body, &mut |s| {
        if let Stmt::Build {
            array,
            count,
            index,
            body,
            elem,
            ..
        } = s
        {
            if (cheap(body) || builds_rows(body))
                && code_size(body) <= MAX_STEP
                && reads_fixed(s, &assigned)
                && last_site(body).is_some()
                && !(writes && reads_arrays(body))
            {
                steps.insert(
                    *array,
                    Step {
                        index: *index,
                        count: count.clone(),
                        body: body.clone(),
                        elem: elem.clone(),
                    },
                );
            }
        }
    });
    // Only arrays that are only read: then the array is not made at all.
    walk(&f.body, &mut |s| {
        let reads: Vec<&Operand> = match s {
            Stmt::Let(_, Op::Load { array, index, .. }) => {
                let mut v = vec![index];
                if !matches!(array, Operand::Var(_)) {
                    v.push(array);
                }
                v
            }
            Stmt::Let(_, Op::Length(_)) => vec![],
            _ => stmt_operands(s),
        };
        for x in reads {
            if let Operand::Var(v) = x {
                steps.remove(v);
            }
        }
    });
    // A matrix whose step builds its rows is fused only where every row read is only read
    // (`load`, `length`): the row is then built where it is read, and fused into those reads
    // in the next round, so no row is made; a row that went elsewhere would be made once per
    // read instead of once.
    let rows_read_only = rows_only_read(&f.body);
    steps.retain(|a, st| !nested(&st.body) || rows_read_only(*a));
    // A step that reads another array being fused waits for the next round (its copies would
    // read an array no longer made).
    let readers: Vec<Var> = steps
        .iter()
        .filter(|(_, st)| {
            let mut reads = false;
            walk(&st.body, &mut |t| {
                reads |= matches!(t, Stmt::Let(_, Op::Load { array: Operand::Var(a), .. }) if steps.contains_key(a))
            });
            reads
        })
        .map(|(a, _)| *a)
        .collect();
    for a in readers {
        steps.remove(&a);
    }
    if steps.is_empty() {
        return Fused::Nothing;
    }
    let rows = steps.values().any(|st| nested(&st.body));
    let mut vars = std::mem::take(&mut f.vars);
    flat_map(&mut f.body, &mut |s| match s {
        Stmt::Let(
            xs,
            Op::Load {
                array: Operand::Var(a),
                index,
                slot,
            },
        ) if steps.contains_key(&a) => {
            let step = &steps[&a];
            let without_sites: Block = step
                .body
                .iter()
                .filter(|t| !matches!(t, Stmt::Site(_)))
                .cloned()
                .collect();
            let (copy, renamed) = copy_fresh(&without_sites, &[step.index], &mut vars);
            let mut out = vec![Stmt::Let(vec![renamed[&step.index]], Op::Copy(index))];
            out.extend(copy);
            let x = renamed_operand(&step.elem[slot as usize], &renamed);
            out.push(Stmt::Let(xs, Op::Copy(x)));
            out
        }
        Stmt::Let(xs, Op::Length(Operand::Var(a))) if steps.contains_key(&a) => {
            vec![Stmt::Let(xs, Op::Copy(steps[&a].count.clone()))]
        }
        Stmt::Build {
            array, count, body, ..
        } if steps.contains_key(&array) => trailing_site(&body, count, &mut vars),
        other => vec![other],
    });
    f.vars = vars;
    if rows {
        Fused::Rows
    } else {
        Fused::Flat
    }
}

/// Whether a step builds arrays (rows) by steps that are `cheap` and record no call site, and
/// is otherwise `cheap` itself: the outer product of two vectors, the `build` of `build`s that
/// a matrix operation makes.
fn builds_rows(body: &[Stmt]) -> bool {
    nested(body)
        && body.iter().all(|s| match s {
            Stmt::Build { body: row, .. } => cheap(row) && last_site(row) == Some(None),
            s => cheap(std::slice::from_ref(s)),
        })
}

/// Whether a step builds arrays at its top level.
fn nested(body: &[Stmt]) -> bool {
    body.iter().any(|s| matches!(s, Stmt::Build { .. }))
}

/// Whether every element read of an array is only read: the variables its loads define
/// appear only as the array of a `load` or of a `length`.
fn rows_only_read(body: &[Stmt]) -> impl Fn(Var) -> bool {
    let mut rows: HashMap<Var, Vec<Var>> = HashMap::new();
    walk(body, &mut |s| {
        if let Stmt::Let(
            xs,
            Op::Load {
                array: Operand::Var(a),
                ..
            },
        ) = s
        {
            rows.entry(*a).or_default().extend(xs);
        }
    });
    let reads = count_reads(body);
    move |a| {
        rows.get(&a)
            .into_iter()
            .flatten()
            .all(|x| reads.get(x).is_none_or(|r| r.other == 0))
    }
}

/// The last call-site record of a loop's step, which is the current site after the loop if
/// it ran at all (errors of built-in code that follows report it); `None` where a record is in
/// a branch (then which one ran last is not known here).
pub fn last_site(body: &[Stmt]) -> Option<Option<u32>> {
    let mut nested = false;
    for s in body {
        for c in children(s) {
            walk(c, &mut |t| nested |= matches!(t, Stmt::Site(_)));
        }
    }
    if nested {
        return None;
    }
    Some(last_record(body))
}

/// The last call-site record at the top level of a block.
pub fn last_record(block: &[Stmt]) -> Option<u32> {
    block.iter().rev().find_map(|t| match t {
        Stmt::Site(n) => Some(*n),
        _ => None,
    })
}

/// What replaces a loop that is no longer run, for the call-site record it left: the step's
/// last record if the loop would have run at least once.
pub fn trailing_site(body: &[Stmt], count: Operand, vars: &mut Vec<VarInfo>) -> Vec<Stmt> {
    let Some(Some(site)) = last_site(body) else {
        return vec![];
    };
    let ran = fresh_var(vars, Ty::Bool, "ran");
    vec![
        Stmt::Let(vec![ran], Op::Binary(BinOp::ILt, Operand::I64(0), count)),
        Stmt::If {
            cond: Operand::Var(ran),
            then: vec![Stmt::Site(site)],
            els: vec![],
        },
    ]
}

/// Whether a block may write into an array that exists before it: a store into an array it
/// did not make itself, or a call that passes a pointer (the callee may add into it in place,
/// `marks::accumulating`).
pub fn writes_arrays(block: &[Stmt], vars: &[VarInfo]) -> bool {
    let mut fresh: HashSet<Var> = HashSet::new();
    walk(block, &mut |s| {
        if let Stmt::Let(vs, Op::NewArray { .. }) = s {
            fresh.extend(vs.iter().copied());
        }
    });
    let pointer = |x: &Operand| {
        x.var()
            .is_some_and(|v| vars[v.0 as usize].ty.holds_pointer())
    };
    let mut writes = false;
    walk(block, &mut |s| {
        writes |= match s {
            Stmt::Store { array, .. } => !array.var().is_some_and(|a| fresh.contains(&a)),
            Stmt::SetField { .. } => true,
            Stmt::Let(_, Op::Call { args, .. })
            | Stmt::TailCall { args, .. }
            | Stmt::MachineCall { args, .. }
            | Stmt::MachineTailCall { args, .. } => args.iter().any(pointer),
            _ => false,
        }
    });
    writes
}

/// Whether a block reads the elements of an array.
pub fn reads_arrays(block: &[Stmt]) -> bool {
    let mut reads = false;
    walk(block, &mut |s| {
        reads |= matches!(s, Stmt::Let(_, Op::Load { .. }))
    });
    reads
}

/// Whether a step only computes, cheaply: arithmetic, comparisons, conversions to reals,
/// reads, and the branches and assignments of a conditional.
fn cheap(body: &[Stmt]) -> bool {
    body.iter().all(|s| match s {
        Stmt::Let(_, op) => match op {
            Op::Copy(_) | Op::Binary(..) | Op::Load { .. } | Op::Length(_) => true,
            Op::Unary(u, _) => matches!(u, UnOp::I64ToF64 | UnOp::Not),
            _ => false,
        },
        Stmt::Declare(_) | Stmt::Set(..) | Stmt::Site(_) => true,
        Stmt::If { then, els, .. } => cheap(then) && cheap(els),
        _ => false,
    })
}

/// Whether a loop reads no variable that is assigned outside it (its step may assign the
/// variables it declares itself): a copy of its step elsewhere computes the same.
fn reads_fixed(s: &Stmt, assigned: &HashSet<Var>) -> bool {
    let mut own: HashSet<Var> = HashSet::new();
    walk(std::slice::from_ref(s), &mut |t| {
        if let Stmt::Declare(vs) = t {
            own.extend(vs.iter().copied());
        }
    });
    let mut ok = true;
    walk(std::slice::from_ref(s), &mut |t| {
        for x in stmt_operands(t) {
            if let Operand::Var(v) = x {
                ok &= own.contains(v) || !assigned.contains(v);
            }
        }
    });
    ok
}

/// Drops the accumulators of every `ifold` (nested ones first) that nothing reads but their
/// own next values; whether any was dropped.
fn dead_accumulators(body: &mut Block) -> bool {
    let mut uses: HashMap<Var, usize> = HashMap::new();
    walk(body, &mut |s| count_uses(s, &mut uses));
    let mut changed = false;
    walk_mut(body, &mut |s| {
        let Stmt::Ifold {
            accs,
            init,
            body,
            next,
            ..
        } = s
        else {
            return;
        };
        // The uses of each accumulator inside the loop: its reads outside are the rest.
        let mut inside: HashMap<Var, usize> = HashMap::new();
        walk(body, &mut |t| count_uses(t, &mut inside));
        for x in next.iter() {
            if let Operand::Var(v) = x {
                *inside.entry(*v).or_default() += 1;
            }
        }
        let read_after =
            |v: &Var| uses.get(v).copied().unwrap_or(0) > inside.get(v).copied().unwrap_or(0);
        let mut live: HashSet<usize> = (0..accs.len()).filter(|&k| read_after(&accs[k])).collect();
        // What the live next values and the step's effects need, until that includes no
        // other accumulator.
        loop {
            let needed = needed_vars(body, next, &live);
            let more: Vec<usize> = (0..accs.len())
                .filter(|k| !live.contains(k) && needed.contains(&accs[*k]))
                .collect();
            if more.is_empty() {
                break;
            }
            live.extend(more);
        }
        // (A loop run for what it does besides keeps an accumulator: a loop of none is for
        // `dead_code` to remove.)
        if live.len() == accs.len() || (live.is_empty() && !pure(body)) {
            return;
        }
        let keep: Vec<usize> = (0..accs.len()).filter(|k| live.contains(k)).collect();
        // The step's code for the dropped values goes (it may read the dropped accumulators).
        keep_needed(body, next, &live);
        *accs = keep.iter().map(|&k| accs[k]).collect();
        *init = keep.iter().map(|&k| init[k].clone()).collect();
        *next = keep.iter().map(|&k| next[k].clone()).collect();
        changed = true;
    });
    changed
}

/// Removes from a loop's step the code that neither computes the `live` next values (by
/// position) nor does anything besides computing.
pub fn keep_needed(body: &mut Block, next: &[Operand], live: &HashSet<usize>) {
    let needed = needed_vars(body, next, live);
    flat_map(body, &mut |t| match &t {
        Stmt::Let(vs, op)
            if crate::passes::simplify::is_pure(op) && vs.iter().all(|v| !needed.contains(v)) =>
        {
            vec![]
        }
        Stmt::Set(v, _) if !needed.contains(v) => vec![],
        Stmt::Declare(vs) if vs.iter().all(|v| !needed.contains(v)) => vec![],
        _ => vec![t],
    });
}

/// The variables that a loop's step needs to compute the `live` next values and to do what it
/// does besides computing (a statement that is not a pure definition needs what it reads).
pub fn needed_vars(body: &[Stmt], next: &[Operand], live: &HashSet<usize>) -> HashSet<Var> {
    let mut needed: HashSet<Var> = live.iter().filter_map(|&k| next[k].var()).collect();
    // Definitions by pure operations, by variable, so that needs propagate back through them.
    let mut defs: HashMap<Var, Vec<Var>> = HashMap::new();
    let mut roots: Vec<Var> = Vec::new();
    walk(body, &mut |s| {
        let reads: Vec<Var> = stmt_operands(s).iter().filter_map(|x| x.var()).collect();
        match s {
            Stmt::Let(vs, op) if crate::passes::simplify::is_pure(op) => {
                for v in vs {
                    defs.entry(*v).or_default().extend(reads.iter().copied());
                }
            }
            Stmt::Set(v, _) => defs.entry(*v).or_default().extend(reads.iter().copied()),
            Stmt::Declare(_) | Stmt::Site(_) => {}
            // A condition is needed only if a needed variable is assigned in its branches;
            // kept simple: a branch's condition is needed.
            _ => roots.extend(reads),
        }
    });
    let mut todo: Vec<Var> = needed.iter().copied().chain(roots).collect();
    while let Some(v) = todo.pop() {
        needed.insert(v);
        if let Some(ds) = defs.get(&v) {
            for d in ds {
                if !needed.contains(d) {
                    needed.insert(*d);
                    todo.push(*d);
                }
            }
        }
    }
    needed
}

/// Whether a block only computes: pure definitions, declarations and assignments, and
/// branches and loops of such blocks (removing it changes nothing but time).
pub fn pure(block: &[Stmt]) -> bool {
    block.iter().all(|s| match s {
        Stmt::Let(_, op) => crate::passes::simplify::is_pure(op),
        Stmt::Declare(_) | Stmt::Set(..) | Stmt::Site(_) => true,
        Stmt::If { .. } | Stmt::Ifold { .. } | Stmt::For { .. } | Stmt::Switch { .. } => {
            children(s).into_iter().all(|b| pure(b))
        }
        _ => false,
    })
}
