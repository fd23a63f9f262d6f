//! Scalar simplification of each function: copy propagation, common subexpressions of pure
//! operations, a conversion to a real and back folded away, the checks of array indices and
//! loop counts that the loops themselves prove, and dead code.
//!
//! The lowering writes an index as a real (the language has only reals): a step of
//! `(ifold f z (array-length u))` reading `(get u i)` converts the loop's counter to a real,
//! and `get` checks that the real is a natural number below the array's length. After
//! `passes::inline` has put the step in its loop, the facts are local: the index is the
//! counter converted, the counter is below the loop's count, and the count is the length of
//! `u` (the same `length` operation, once common subexpressions are shared). Such a check is
//! dropped; an index that is an integer but not so bounded is checked as an integer
//! (`vl_index_i`), without the round trip through a real.
//!
//! Only `Let`-defined variables are propagated and shared: a variable assigned by `Set` (a
//! join of branches, a loop's variable) may change between two uses.

use crate::ir::*;
use crate::rt::Rt;
use std::collections::{HashMap, HashSet};

pub fn run(p: &mut Program) {
    for f in &mut p.funcs {
        function(f);
    }
}

/// Simplifies one function.
pub fn function(f: &mut Function) {
    let mut assigned = HashSet::new();
    walk(&f.body, &mut |s| {
        if let Stmt::Set(v, _) = s {
            assigned.insert(*v);
        }
    });
    let mut cx = Cx {
        vars: &f.vars,
        assigned,
        subst: HashMap::new(),
        defs: HashMap::new(),
        below: HashMap::new(),
        natural: HashSet::new(),
        avail: vec![HashMap::new()],
    };
    let mut body = std::mem::take(&mut f.body);
    cx.block(&mut body);
    dead_code(&mut body);
    f.body = body;
}

struct Cx<'a> {
    vars: &'a [VarInfo],
    /// Variables assigned by `Set`: never propagated nor shared.
    assigned: HashSet<Var>,
    /// Copies: a variable's uses read this operand instead.
    subst: HashMap<Var, Operand>,
    /// The operations that defined single `Let` variables (after rewriting).
    defs: HashMap<Var, Op>,
    /// A loop counter's count: the counter is below it.
    below: HashMap<Var, Operand>,
    /// Integer variables known to be natural numbers (lengths, loop counters).
    natural: HashSet<Var>,
    /// Pure operations computed so far, innermost scope last: a later equal operation in the
    /// same scope or a nested one reads the earlier result.
    avail: Vec<HashMap<String, Var>>,
}

impl Cx<'_> {
    fn block(&mut self, block: &mut Block) {
        self.avail.push(HashMap::new());
        let mut out = Vec::with_capacity(block.len());
        for mut s in std::mem::take(block) {
            for x in stmt_operands_mut(&mut s) {
                self.rename(x);
            }
            match &mut s {
                Stmt::Let(vs, op) => {
                    if let Some(op2) = self.rewrite(vs, op) {
                        *op = op2;
                    }
                    if vs.is_empty() && self.needless_check(op) {
                        continue;
                    }
                    if let [v] = vs[..] {
                        self.learn(v, op);
                    }
                }
                Stmt::For { index, count, .. }
                | Stmt::Build { index, count, .. }
                | Stmt::Ifold { index, count, .. } => {
                    self.below.insert(*index, count.clone());
                    self.natural.insert(*index);
                }
                _ => {}
            }
            for b in children_mut(&mut s) {
                self.block(b);
            }
            // A loop's `next` and `elem` operands are read after its body: renamed above,
            // before the body's own copies were known; rename them again.
            if let Stmt::Build { elem: xs, .. } | Stmt::Ifold { next: xs, .. } = &mut s {
                for x in xs {
                    self.rename(x);
                }
            }
            out.extend(self.hoist(&mut s));
            out.push(s);
        }
        *block = out;
        self.avail.pop();
    }

    /// Loop-invariant code motion: the operations at the top of a loop's body that can
    /// neither fail nor write and read nothing the loop defines, taken out to run before it
    /// (a length, arithmetic on what the loop does not change).
    fn hoist(&self, s: &mut Stmt) -> Vec<Stmt> {
        let mut inside: HashSet<Var> = stmt_defs(s).into_iter().collect();
        let body = match s {
            Stmt::For { index, body, .. }
            | Stmt::Build { index, body, .. }
            | Stmt::Ifold { index, body, .. } => {
                inside.insert(*index);
                body
            }
            _ => return Vec::new(),
        };
        walk(body, &mut |t| inside.extend(stmt_defs(t)));
        let mut hoisted = Vec::new();
        let mut kept = Vec::with_capacity(body.len());
        for t in std::mem::take(body) {
            let invariant = match &t {
                Stmt::Let(vs, op @ (Op::Length(_) | Op::Unary(..) | Op::Binary(..)))
                    if vs.len() == 1 =>
                {
                    op_operands(op)
                        .iter()
                        .all(|x| self.is_fixed(x) && x.var().is_none_or(|v| !inside.contains(&v)))
                }
                _ => false,
            };
            if invariant {
                if let Stmt::Let(vs, _) = &t {
                    inside.remove(&vs[0]);
                }
                hoisted.push(t);
            } else {
                kept.push(t);
            }
        }
        *body = kept;
        hoisted
    }

    fn rename(&self, x: &mut Operand) {
        if let Operand::Var(v) = x {
            if let Some(y) = self.subst.get(v) {
                *x = y.clone();
            }
        }
    }

    fn is_fixed(&self, x: &Operand) -> bool {
        x.var().is_none_or(|v| !self.assigned.contains(&v))
    }

    /// The integer whose conversion a real operand is, if it is one.
    fn integer_of(&self, r: &Operand) -> Option<Operand> {
        match r {
            Operand::Var(t) => match self.defs.get(t) {
                Some(Op::Unary(UnOp::I64ToF64, x)) => Some(x.clone()),
                _ => None,
            },
            Operand::F64(c) if *c >= 0.0 && *c < 9007199254740992.0 && c.fract() == 0.0 => {
                Some(Operand::I64(*c as i64))
            }
            _ => None,
        }
    }

    fn is_natural(&self, x: &Operand) -> bool {
        match x {
            Operand::I64(c) => *c >= 0,
            Operand::Var(v) => self.natural.contains(v),
            _ => false,
        }
    }

    /// A simpler operation computing the same results, if there is one.
    fn rewrite(&self, vs: &[Var], op: &Op) -> Option<Op> {
        match op {
            Op::Unary(UnOp::F64ToI64, r) if self.integer_of(r).is_some() => {
                self.integer_of(r).map(Op::Copy)
            }
            Op::Rt(Rt::Index, args) => {
                let [site, r, n] = &args[..] else {
                    return None;
                };
                let i = self.integer_of(r)?;
                let proven = match &i {
                    Operand::Var(x) => self.below.get(x) == Some(n),
                    _ => false,
                };
                Some(if proven {
                    Op::Copy(i)
                } else {
                    Op::Rt(Rt::IndexI64, vec![site.clone(), i, n.clone()])
                })
            }
            Op::Unary(..) | Op::Binary(..) | Op::Length(_) if vs.len() == 1 => {
                let key = format!("{op:?}");
                op_operands(op)
                    .iter()
                    .all(|x| self.is_fixed(x))
                    .then(|| self.avail.iter().rev().find_map(|m| m.get(&key)))
                    .flatten()
                    .map(|v| Op::Copy(Operand::Var(*v)))
            }
            _ => None,
        }
    }

    /// A check without results that the facts prove: a count that is a natural number
    /// converted to a real.
    fn needless_check(&self, op: &Op) -> bool {
        match op {
            Op::Rt(Rt::CheckCount, args) => args
                .last()
                .and_then(|r| self.integer_of(r))
                .is_some_and(|i| self.is_natural(&i)),
            _ => false,
        }
    }

    /// Records what defining `v` by `op` tells.
    fn learn(&mut self, v: Var, op: &Op) {
        match op {
            Op::Copy(x) if self.is_fixed(x) && self.same_type(v, x) => {
                if let Operand::Var(y) = x {
                    if self.natural.contains(y) {
                        self.natural.insert(v);
                    }
                    if let Some(c) = self.below.get(y).cloned() {
                        self.below.insert(v, c);
                    }
                    if let Some(d) = self.defs.get(y).cloned() {
                        self.defs.insert(v, d);
                    }
                }
                self.subst.insert(v, x.clone());
                return;
            }
            Op::Length(_) => {
                self.natural.insert(v);
            }
            _ => {}
        }
        if matches!(op, Op::Unary(..) | Op::Binary(..) | Op::Length(_))
            && op_operands(op).iter().all(|x| self.is_fixed(x))
        {
            let scope = self.avail.last_mut().expect("a scope");
            scope.entry(format!("{op:?}")).or_insert(v);
        }
        self.defs.insert(v, op.clone());
    }

    /// Whether a copy keeps the type (a pointer placeholder does not say which pointer type).
    fn same_type(&self, v: Var, x: &Operand) -> bool {
        let ty = &self.vars[v.0 as usize].ty;
        match x {
            Operand::Var(y) => self.vars[y.0 as usize].ty == *ty,
            Operand::F64(_) => *ty == Ty::F64,
            Operand::I64(_) => *ty == Ty::I64,
            Operand::Bool(_) => *ty == Ty::Bool,
            _ => false,
        }
    }
}

/// Removes the definitions of unused variables by operations without effects, until none is
/// left.
pub fn dead_code(body: &mut Block) {
    loop {
        let mut used = HashSet::new();
        walk(body, &mut |s| {
            for x in stmt_operands(s) {
                if let Operand::Var(v) = x {
                    used.insert(*v);
                }
            }
        });
        let mut removed = false;
        flat_map(body, &mut |s| match &s {
            Stmt::Let(vs, op) if is_pure(op) && vs.iter().all(|v| !used.contains(v)) => {
                removed = true;
                vec![]
            }
            _ => vec![s],
        });
        if !removed {
            return;
        }
    }
}

/// An operation that only computes its results: neither fails, allocates, writes nor reads
/// input.
pub fn is_pure(op: &Op) -> bool {
    match op {
        Op::Copy(_)
        | Op::Unary(..)
        | Op::Binary(..)
        | Op::Length(_)
        | Op::Load { .. }
        | Op::Field { .. }
        | Op::IsKind(..)
        | Op::Cast(..)
        | Op::CodeOf(_)
        | Op::MakeUnion { .. }
        | Op::UnionTag(_)
        | Op::UnionField { .. } => true,
        Op::Rt(rt, _) => rt.effects() == Default::default(),
        _ => false,
    }
}
