//! Small loops unrolled, and small arrays replaced by scalars.
//!
//! `unroll`: a `build` or `ifold` of a constant count (at most `MAX_COUNT`) with a small body
//! becomes straight-line code: the body once per index, in order (a `build`'s array made and
//! each element stored; an `ifold`'s accumulators passed from one copy of the step to the
//! next). Everything is computed in the order the loop computed it, so what fails fails as
//! before. `simplify` then makes each copy's index a constant and folds what it decides
//! (`(cond ((= i 0) ...) ...)`, `(get v i)`).
//!
//! `replace`: an array of a constant count that is only stored into, right after it is made,
//! and read, at constant indices, is no array at all: each read is the value stored. What a C
//! programmer writes as three scalars (a cross product, a rotated point, the slice of a
//! camera's parameters) is then three scalars here too, with no allocation. So is a variable
//! that joins such arrays (each branch of an `if` makes one: the rotation of a point with a
//! zero and a non-zero angle) and is read at constant indices: a variable per element.

use crate::ir::*;
use std::collections::{HashMap, HashSet};

/// The largest count unrolled.
pub const MAX_COUNT: i64 = 16;

/// The largest loop unrolled, in statements (`code_size` of the body times the count): a
/// three-way `cond` on the index, as in a cross product and its forward version.
pub const MAX_UNROLLED: usize = 512;

/// Unrolls the small loops of a function.
pub fn unroll(f: &mut Function) {
    {
        let mut vars = std::mem::take(&mut f.vars);
        flat_map(&mut f.body, &mut |s| match s {
            Stmt::Build {
                array,
                layout,
                count: Operand::I64(n),
                index,
                body,
                elem,
            } if (0..=MAX_COUNT).contains(&n)
                && (n as usize) * code_size(&body) <= MAX_UNROLLED
                && !layout.iter().any(Ty::holds_pointer) =>
            {
                // Only elements without pointers: a step of a loop that stores pointers keeps
                // what it allocated (`passes::carry`).
                let mut out = vec![Stmt::Let(
                    vec![array],
                    Op::NewArray {
                        layout,
                        count: Operand::I64(n),
                    },
                )];
                for k in 0..n {
                    let (copy, renamed) = copy_fresh(&body, &[index], &mut vars);
                    out.push(Stmt::Let(vec![renamed[&index]], Op::Copy(Operand::I64(k))));
                    out.extend(copy);
                    for (slot, x) in elem.iter().enumerate() {
                        out.push(Stmt::Store {
                            array: Operand::Var(array),
                            index: Operand::I64(k),
                            slot: slot as u32,
                            value: renamed_operand(x, &renamed),
                        });
                    }
                }
                out
            }
            Stmt::Ifold {
                accs,
                init,
                count: Operand::I64(n),
                index,
                body,
                next,
            } if (0..=MAX_COUNT).contains(&n)
                && (n as usize) * code_size(&body) <= MAX_UNROLLED =>
            {
                let mut out = Vec::new();
                let mut current = init;
                for k in 0..n {
                    let (copy, then) =
                        ifold_step_copy(&accs, index, &body, &next, k, &current, &mut vars);
                    out.extend(copy);
                    current = then;
                }
                for (a, x) in accs.iter().zip(current) {
                    out.push(Stmt::Let(vec![*a], Op::Copy(x)));
                }
                out
            }
            // A loop that fills arrays element by element (forward arrays are two arrays,
            // `vlad-lower`'s `array_loop`), if it only stores numbers and leaves no way out.
            Stmt::For {
                index,
                count: Operand::I64(n),
                body,
            } if (0..=MAX_COUNT).contains(&n)
                && (n as usize) * code_size(&body) <= MAX_UNROLLED
                && straight(&body, &vars) =>
            {
                let mut out = Vec::new();
                for k in 0..n {
                    let (copy, renamed) = copy_fresh(&body, &[index], &mut vars);
                    out.push(Stmt::Let(vec![renamed[&index]], Op::Copy(Operand::I64(k))));
                    out.extend(copy);
                }
                out
            }
            other => vec![other],
        });
        f.vars = vars;
    }
}

/// Whether a loop body runs to its end (no `return`, `continue` or nested loop) and stores
/// no pointer, so that its copies one after another do what its iterations did.
fn straight(body: &Block, vars: &[VarInfo]) -> bool {
    let mut yes = true;
    walk(body, &mut |s| match s {
        Stmt::Return(_)
        | Stmt::TailCall { .. }
        | Stmt::Continue
        | Stmt::Loop(_)
        | Stmt::For { .. }
        | Stmt::Build { .. }
        | Stmt::Ifold { .. }
        | Stmt::MachineCall { .. }
        | Stmt::MachineTailCall { .. }
        | Stmt::Member { .. } => yes = false,
        Stmt::Store { value, .. } => {
            let pointer = match value {
                Operand::Var(v) => vars[v.0 as usize].ty.holds_pointer(),
                Operand::Null | Operand::Global(_) | Operand::Str(_) => true,
                _ => false,
            };
            yes &= !pointer;
        }
        _ => {}
    });
    yes
}

/// Replaces the small arrays of a function that are only stored into and read at constant
/// indices.
pub fn replace(f: &mut Function) {
    // The joins and their arrays are replaced together: a join whose arrays are not all
    // replaced is dropped, and the arrays are chosen again without it.
    let mut joins = joins(&f.body);
    joins.retain(|v, _| matches!(f.vars[v.0 as usize].ty, Ty::Array(_)));
    let (wanted, stored) = loop {
        let (wanted, stored) = chosen(&f.body, &joins);
        let before = joins.len();
        joins.retain(|_, (_, sources)| sources.iter().all(|b| wanted.contains(b)));
        if joins.len() == before {
            break (wanted, stored);
        }
    };
    if wanted.is_empty() {
        return;
    }
    // A variable for each element's slot of each join.
    let mut scalars: HashMap<(Var, i64, u32), Var> = HashMap::new();
    // In variable order: the new variables' numbers do not depend on a hash map's order.
    let mut order: Vec<(&Var, &(i64, Vec<Var>))> = joins.iter().collect();
    order.sort_unstable_by_key(|(v, _)| **v);
    for (v, (n, _)) in order {
        let Ty::Array(layout) = f.vars[v.0 as usize].ty.clone() else {
            unreachable!("joins are arrays")
        };
        let name = f.vars[v.0 as usize].name.clone();
        for k in 0..*n {
            for (slot, ty) in layout.iter().enumerate() {
                let x = fresh_var(&mut f.vars, ty.clone(), &format!("{name}_{k}_"));
                scalars.insert((*v, k, slot as u32), x);
            }
        }
    }
    let elements = |v: Var| {
        let mut xs: Vec<(i64, u32, Var)> = scalars
            .iter()
            .filter(|((w, ..), _)| *w == v)
            .map(|((_, k, slot), x)| (*k, *slot, *x))
            .collect();
        xs.sort_unstable();
        xs
    };
    flat_map(&mut f.body, &mut |s| match s {
        Stmt::Declare(vs) if vs.iter().any(|v| joins.contains_key(v)) => {
            let mut out = Vec::new();
            for v in vs {
                if joins.contains_key(&v) {
                    out.extend(elements(v).into_iter().map(|(_, _, x)| x));
                } else {
                    out.push(v);
                }
            }
            vec![Stmt::Declare(out)]
        }
        Stmt::Set(v, Operand::Var(b)) if joins.contains_key(&v) => elements(v)
            .into_iter()
            .map(|(k, slot, x)| Stmt::Set(x, stored[&(b, k, slot)].clone()))
            .collect(),
        // A read of a join is its element's variable; of an array, the value stored.
        Stmt::Let(
            vs,
            Op::Load {
                array: Operand::Var(a),
                index: Operand::I64(k),
                slot,
            },
        ) if joins.contains_key(&a) || wanted.contains(&a) => {
            let x = match scalars.get(&(a, k, slot)) {
                Some(x) => Operand::Var(*x),
                None => stored[&(a, k, slot)].clone(),
            };
            vec![Stmt::Let(vs, Op::Copy(x))]
        }
        Stmt::Let(vs, Op::NewArray { .. }) if vs.len() == 1 && wanted.contains(&vs[0]) => {
            vec![]
        }
        Stmt::Store {
            array: Operand::Var(a),
            ..
        } if wanted.contains(&a) => vec![],
        other => vec![other],
    });
}

/// What each slot of each element of the arrays to replace holds.
type Stored = HashMap<(Var, i64, u32), Operand>;

/// The arrays to replace (`candidates`) whose every read is of a slot stored, and what each
/// element's slot holds: the operand stored.
fn chosen(body: &Block, joins: &HashMap<Var, (i64, Vec<Var>)>) -> (HashSet<Var>, Stored) {
    let mut wanted = candidates(body, joins);
    let mut stored: Stored = HashMap::new();
    walk(body, &mut |s| {
        if let Stmt::Store {
            array: Operand::Var(a),
            index: Operand::I64(k),
            slot,
            value,
        } = s
        {
            if wanted.contains(a) {
                stored.insert((*a, *k, *slot), value.clone());
            }
        }
    });
    // An array with a read of a slot that was not stored is left alone (`candidates` should
    // not let one through).
    walk(body, &mut |s| {
        if let Stmt::Let(
            _,
            Op::Load {
                array: Operand::Var(a),
                index,
                slot,
            },
        ) = s
        {
            let known = matches!(index, Operand::I64(k) if stored.contains_key(&(*a, *k, *slot)));
            if !known {
                wanted.remove(a);
            }
        }
    });
    (wanted, stored)
}

/// The arrays to replace: made with a constant count no larger than `MAX_COUNT`, every slot of
/// every element stored once, in order, in the block that makes the array and before anything
/// reads it, and used otherwise only by loads at constant indices below the count, and by the
/// assignments of `joins`.
fn candidates(body: &Block, joins: &HashMap<Var, (i64, Vec<Var>)>) -> HashSet<Var> {
    // Each array made with a small constant count: its count, slots, and the number of stores
    // in order that filled it.
    let mut made: HashMap<Var, (i64, usize, usize)> = HashMap::new();
    let mut bad = HashSet::new();
    fill(body, &mut made, &mut bad);
    let mut stores: HashMap<Var, usize> = HashMap::new();
    walk(body, &mut |s| match s {
        Stmt::Store {
            array: Operand::Var(a),
            index,
            value,
            ..
        } => {
            *stores.entry(*a).or_default() += 1;
            bad.extend(index.var());
            bad.extend(value.var());
        }
        Stmt::Let(
            _,
            Op::Load {
                array: Operand::Var(a),
                index,
                ..
            },
        ) => {
            if !constant_below(index, made.get(a).map(|(n, _, _)| *n)) {
                bad.insert(*a);
            }
            bad.extend(index.var());
        }
        Stmt::Set(v, Operand::Var(_)) if joins.contains_key(v) => {}
        _ => bad.extend(stmt_operands(s).iter().filter_map(|x| x.var())),
    });
    // The values stored into a join's arrays are read where the join is assigned: they must
    // not change in between.
    let changing = crate::passes::simplify::mutable(body);
    walk(body, &mut |s| {
        if let Stmt::Store {
            array: Operand::Var(a),
            value,
            ..
        } = s
        {
            let joined = joins.values().any(|(_, sources)| sources.contains(a));
            if joined && value.var().is_some_and(|x| changing.contains(&x)) {
                bad.insert(*a);
            }
        }
    });
    made.into_iter()
        .filter(|(a, (n, slots, filled))| {
            let all = (*n as usize) * slots;
            !bad.contains(a) && *filled == all && stores.get(a).copied().unwrap_or(0) == all
        })
        .map(|(a, _)| a)
        .collect()
}

/// The arrays made with a constant count (by `new array` or `build`), with their counts, and
/// the declared variables.
pub(crate) fn constant_counts(body: &Block) -> (HashMap<Var, i64>, HashSet<Var>) {
    let mut counts: HashMap<Var, i64> = HashMap::new();
    let mut declared: HashSet<Var> = HashSet::new();
    walk(body, &mut |s| match s {
        Stmt::Let(
            vs,
            Op::NewArray {
                count: Operand::I64(n),
                ..
            },
        ) if vs.len() == 1 && *n >= 0 => {
            counts.insert(vs[0], *n);
        }
        Stmt::Build {
            array,
            count: Operand::I64(n),
            ..
        } if *n >= 0 => {
            counts.insert(*array, *n);
        }
        Stmt::Declare(vs) => declared.extend(vs),
        _ => {}
    });
    (counts, declared)
}

/// The declared array variables assigned only arrays made with one constant count (at most
/// `MAX_COUNT`) and read only by loads at constant indices below it: each with its count and
/// the arrays assigned to it.
fn joins(body: &Block) -> HashMap<Var, (i64, Vec<Var>)> {
    let (mut counts, declared) = constant_counts(body);
    counts.retain(|_, n| *n <= MAX_COUNT);
    let mut joins: HashMap<Var, (i64, Vec<Var>)> = HashMap::new();
    let mut bad: HashSet<Var> = HashSet::new();
    walk(body, &mut |s| match s {
        Stmt::Set(v, x) => match x.var().and_then(|b| Some((b, *counts.get(&b)?))) {
            Some((b, n)) if declared.contains(v) => {
                let e = joins.entry(*v).or_insert((n, Vec::new()));
                if e.0 != n {
                    bad.insert(*v);
                }
                e.1.push(b);
            }
            _ => {
                bad.insert(*v);
                bad.extend(x.var());
            }
        },
        Stmt::Let(
            _,
            Op::Load {
                array: Operand::Var(a),
                index,
                ..
            },
        ) => {
            if !constant_below(index, joins.get(a).map(|(n, _)| *n)) {
                bad.insert(*a);
            }
        }
        _ => bad.extend(stmt_operands(s).iter().filter_map(|x| x.var())),
    });
    joins.retain(|v, _| !bad.contains(v));
    joins
}

/// Finds the arrays made in `block` and its nested blocks, and counts the stores that fill
/// each in order at the top of the block that makes it; an array read before it is filled is
/// `bad`.
fn fill(block: &Block, made: &mut HashMap<Var, (i64, usize, usize)>, bad: &mut HashSet<Var>) {
    // The arrays made in this block and not yet filled (several at once: the two arrays of a
    // forward array are filled element by element side by side).
    let mut filling: Vec<Var> = Vec::new();
    for s in block {
        if let Stmt::Let(
            vs,
            Op::NewArray {
                layout,
                count: Operand::I64(n),
            },
        ) = s
        {
            if vs.len() == 1 && (0..=MAX_COUNT).contains(n) {
                made.insert(vs[0], (*n, layout.len(), 0));
                if *n > 0 && !layout.is_empty() {
                    filling.push(vs[0]);
                }
                continue;
            }
        }
        if let Stmt::Store {
            array: Operand::Var(b),
            index: Operand::I64(k),
            slot,
            ..
        } = s
        {
            if filling.contains(b) {
                let (n, slots, done) = made[b];
                if *k < n && done == (*k as usize) * slots + *slot as usize {
                    made.get_mut(b).expect("made").2 += 1;
                    if done + 1 == (n as usize) * slots {
                        filling.retain(|a| a != b);
                    }
                    continue;
                }
            }
        }
        for &a in &filling {
            if reads(s, a) {
                bad.insert(a);
            }
        }
        for c in children(s) {
            fill(c, made, bad);
        }
    }
}

/// Whether an index is a constant below the count of the array it reads, where that is known.
fn constant_below(index: &Operand, count: Option<i64>) -> bool {
    matches!((index, count), (Operand::I64(k), Some(n)) if 0 <= *k && *k < n)
}

/// Whether a statement reads an array (a load of it, or its assignment to a join, itself or
/// nested).
fn reads(s: &Stmt, a: Var) -> bool {
    let mut yes = false;
    walk(std::slice::from_ref(s), &mut |t| {
        yes |= match t {
            Stmt::Let(
                _,
                Op::Load {
                    array: Operand::Var(b),
                    ..
                },
            ) => *b == a,
            // A join assigned the array reads it where it is read.
            Stmt::Set(_, Operand::Var(b)) => *b == a,
            _ => false,
        }
    });
    yes
}
