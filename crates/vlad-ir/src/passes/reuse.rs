//! Values of one loop read by a later loop: common subexpressions across loops over the same
//! count. Where a loop computes `exp`, `log`, `sin` or `cos` of an expression of its index
//! (and of values from before it) at every step, and a later loop over the same count computes
//! the same function of the same expression of its own index, the first loop stores each value
//! in a new array and the second reads it there instead of calling the function again.
//!
//! Forward-mode `grad` of log-sum-exp is the case: the primal's sum `s = sum_i exp(x_i - m)`
//! is a loop, and each entry of the gradient, `exp(x_i - m) / s` once `passes::sparse` has
//! taken the one-hot fold apart, is a step of a loop after it that cannot run before `s` is
//! known. The hand-written gradient stores the `exp`s as it sums them; so does this. It costs
//! an array of the count's reals (the hand-written gradient's), and saves a call of the
//! function per step, which costs many times a load.
//!
//! The second loop comes after the first in its block, or is nested in a statement after it.
//! The first loop may also be at the top level of the first branch of an `if` on `0 < count`
//! in that block (what `simplify`'s code motion makes of a loop that needs a first element):
//! the second loop runs a step only if the count is positive, and then the first loop ran. A variable that joins the branches of that `if` is, in the second loop,
//! what the first branch assigned it. The value is computed at the top level of the first
//! loop's body, so at every step. The arrays the expressions read must not change between the
//! two loops: a function that writes into an array it did not make (in-place accumulation),
//! or calls one that may, is left alone, and an array the function stores into is never read
//! for a shared value.

use crate::ir::*;
use crate::passes::inline::{own_arrays, writes_given};
use crate::passes::sparse::definitions;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// The functions whose values are stored for a later loop; each changed is simplified again
/// (the expression the second loop no longer needs is dead code).
pub fn run(p: &mut Program) {
    let writers = writers(p);
    for f in &mut p.funcs {
        if function(f, &|c| writers[c.0 as usize]) {
            super::simplify::function(f);
        }
    }
}

/// For each function, whether it or a function it calls may write into an array it was given
/// (reverse sweeps add into their accumulators in place).
fn writers(p: &Program) -> Vec<bool> {
    let mut out: Vec<bool> = p
        .funcs
        .iter()
        .map(|f| {
            let own = own_arrays(&f.body);
            let mut w = false;
            walk(&f.body, &mut |s| w |= writes_given(s, &own));
            w
        })
        .collect();
    let edges = call_graph(p);
    loop {
        let mut changed = false;
        for (f, callees) in edges.iter().enumerate() {
            if !out[f] && callees.iter().any(|&c| out[c]) {
                out[f] = true;
                changed = true;
            }
        }
        if !changed {
            return out;
        }
    }
}

/// Rewrites the loops of one function, unless it or a function it calls (`writes`) may write
/// into an array it was given; whether any was.
pub fn function(f: &mut Function, writes: &dyn Fn(FuncId) -> bool) -> bool {
    let own = own_arrays(&f.body);
    let mut eligible = true;
    let mut stored = HashSet::new();
    walk(&f.body, &mut |s| {
        eligible &= !writes_given(s, &own);
        match s {
            Stmt::Let(_, Op::Call { func, .. }) | Stmt::TailCall { func, .. } => {
                eligible &= !writes(*func)
            }
            Stmt::Store {
                array: Operand::Var(a),
                ..
            } => {
                stored.insert(*a);
            }
            _ => {}
        }
    });
    if !eligible {
        return false;
    }
    // And what copies or joins them.
    loop {
        let mut more = Vec::new();
        walk(&f.body, &mut |s| match s {
            Stmt::Set(v, Operand::Var(a)) if stored.contains(a) => more.push(*v),
            Stmt::Let(vs, Op::Copy(Operand::Var(a))) if stored.contains(a) => {
                more.extend(vs.iter().copied())
            }
            _ => {}
        });
        let before = stored.len();
        stored.extend(more);
        if stored.len() == before {
            break;
        }
    }
    let defs = definitions(&f.body);
    let mut mutable = super::simplify::mutable(&f.body);
    // An array the function stores into may change between the loops: its reads are never
    // the same value.
    mutable.extend(stored);
    let mut vars = std::mem::take(&mut f.vars);
    let mut cx = Cx {
        m: Matcher { defs, mutable },
        vars: &mut vars,
        changed: false,
    };
    cx.block(&mut f.body);
    let changed = cx.changed;
    f.vars = vars;
    changed
}

/// An expression of a loop's index: what two loops' values are compared by.
#[derive(Clone, Debug, PartialEq)]
enum Expr {
    /// The loop's index.
    Index,
    /// A variable from before the loop, never assigned.
    Var(Var),
    F64(u64),
    I64(i64),
    Bool(bool),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Load(Var, Box<Expr>, u32),
}

/// The functions whose values are worth a store and a load.
fn costly(op: UnOp) -> bool {
    matches!(op, UnOp::Exp | UnOp::Log | UnOp::Sin | UnOp::Cos)
}

/// A loop's index, count and body.
fn loop_parts(s: &Stmt) -> Option<(Var, &Operand, &Block)> {
    match s {
        Stmt::Build {
            index, count, body, ..
        }
        | Stmt::Ifold {
            index, count, body, ..
        }
        | Stmt::For {
            index, count, body, ..
        } => Some((*index, count, body)),
        _ => None,
    }
}

fn loop_body_mut(s: &mut Stmt) -> &mut Block {
    match s {
        Stmt::Build { body, .. } | Stmt::Ifold { body, .. } | Stmt::For { body, .. } => body,
        _ => unreachable!("a loop"),
    }
}

fn same_count(a: &Operand, b: &Operand) -> bool {
    match (a, b) {
        (Operand::Var(x), Operand::Var(y)) => x == y,
        (Operand::I64(x), Operand::I64(y)) => x == y,
        _ => false,
    }
}

/// The variables a loop defines or changes: its index, its accumulators, everything its body
/// defines or assigns.
fn variant(s: &Stmt) -> Vec<Var> {
    let mut out = stmt_defs(s);
    if let Some((index, _, body)) = loop_parts(s) {
        out.push(index);
        walk(body, &mut |t| {
            out.extend(stmt_defs(t));
            if let Stmt::Set(v, _) = t {
                out.push(*v);
            }
        });
    }
    out
}

/// Where a producer loop is: directly in the block, or in the first branch of an `if` on
/// `0 < count` (then with the values that branch assigns to the variables the `if` joins).
struct Producer {
    /// The statement of the block holding the loop.
    at: usize,
    /// Within the `if`'s first branch, the loop's position.
    inner: Option<usize>,
    joins: HashMap<Var, Operand>,
}

struct Cx<'a> {
    m: Matcher,
    vars: &'a mut Vec<VarInfo>,
    changed: bool,
}

impl Cx<'_> {
    fn block(&mut self, b: &mut Block) {
        for s in b.iter_mut() {
            for c in children_mut(s) {
                self.block(c);
            }
        }
        let mut inserted: Vec<(usize, Stmt)> = Vec::new();
        for a in 0..b.len() {
            for prod in self.producers(b, a) {
                self.pair(b, &prod, &mut inserted);
            }
        }
        // The new arrays, before their producers (in reverse, so positions hold).
        inserted.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        for (at, s) in inserted {
            b.insert(at, s);
        }
    }

    /// The producer loops at statement `a` of a block.
    fn producers(&self, b: &Block, a: usize) -> Vec<Producer> {
        let mut out = Vec::new();
        if loop_parts(&b[a]).is_some() {
            out.push(Producer {
                at: a,
                inner: None,
                joins: HashMap::new(),
            });
        }
        if let Stmt::If {
            cond: Operand::Var(c),
            then,
            ..
        } = &b[a]
        {
            if let Some(Op::Binary(BinOp::ILt, Operand::I64(0), n)) = self.m.defs.get(c) {
                let joins: HashMap<Var, Operand> = then
                    .iter()
                    .filter_map(|t| match t {
                        Stmt::Set(v, x) if !self.m.mutable.contains(v) => Some((*v, x.clone())),
                        _ => None,
                    })
                    .collect();
                for (i, t) in then.iter().enumerate() {
                    if loop_parts(t).is_some_and(|(_, count, _)| same_count(count, n)) {
                        out.push(Producer {
                            at: a,
                            inner: Some(i),
                            joins: joins.clone(),
                        });
                    }
                }
            }
        }
        out
    }

    fn producer_loop<'b>(b: &'b Block, prod: &Producer) -> &'b Stmt {
        match (prod.inner, &b[prod.at]) {
            (None, s) => s,
            (Some(i), Stmt::If { then, .. }) => &then[i],
            _ => unreachable!("a producer"),
        }
    }

    fn producer_loop_mut<'b>(b: &'b mut Block, prod: &Producer) -> &'b mut Stmt {
        match (prod.inner, &mut b[prod.at]) {
            (None, s) => s,
            (Some(i), Stmt::If { then, .. }) => &mut then[i],
            _ => unreachable!("a producer"),
        }
    }

    /// Matches the producer's costly values with the loops after it in the block.
    fn pair(&mut self, b: &mut Block, prod: &Producer, inserted: &mut Vec<(usize, Stmt)>) {
        let p = Self::producer_loop(b, prod);
        let (p_index, p_count, p_body) = loop_parts(p).expect("a loop");
        let p_count = p_count.clone();
        let p_variant = variant(p);
        // The costly values at the top level of the producer's body, with their expressions.
        let mut values: Vec<(Var, Expr)> = Vec::new();
        for s in p_body {
            if let Stmt::Let(vs, op @ Op::Unary(u, _)) = s {
                if let ([v], true) = (&vs[..], costly(*u)) {
                    let outside = HashMap::new();
                    let scope = Scope {
                        index: p_index,
                        variant: &p_variant,
                        joins: &outside,
                    };
                    if let Some(e) = self.m.expr_op(op, &scope, 0) {
                        values.push((*v, e));
                    }
                }
            }
        }
        for (value, expr) in values {
            let mut array: Option<Var> = None;
            for later in b.iter_mut().skip(prod.at + 1) {
                let mut make = || {
                    *array.get_or_insert_with(|| {
                        let t = fresh_var(self.vars, Ty::Array(Rc::from([Ty::F64])), "v");
                        inserted.push((
                            prod.at,
                            Stmt::Let(
                                vec![t],
                                Op::NewArray {
                                    layout: Rc::from([Ty::F64]),
                                    count: p_count.clone(),
                                },
                            ),
                        ));
                        t
                    })
                };
                self.changed |= self
                    .m
                    .consume(later, &p_count, &prod.joins, &expr, &mut make);
            }
            if let Some(t) = array {
                let p = Self::producer_loop_mut(b, prod);
                let body = loop_body_mut(p);
                let at = body
                    .iter()
                    .position(|s| stmt_defs(s).contains(&value))
                    .expect("the value's definition");
                body.insert(
                    at + 1,
                    Stmt::Store {
                        array: Operand::Var(t),
                        index: Operand::Var(p_index),
                        slot: 0,
                        value: Operand::Var(value),
                    },
                );
            }
        }
    }
}

/// The definitions of `found` (in a loop over `index`) become loads of `array` at the index.
fn replace(body: &mut Block, found: &[Var], array: Var, index: Var) {
    walk_mut(body, &mut |s| {
        if let Stmt::Let(vs, op) = s {
            if let [v] = vs[..] {
                if found.contains(&v) {
                    *op = Op::Load {
                        array: Operand::Var(array),
                        index: Operand::Var(index),
                        slot: 0,
                    };
                }
            }
        }
    });
}

/// What expressions are compared with: the function's definitions and assigned variables.
struct Matcher {
    defs: HashMap<Var, Op>,
    mutable: HashSet<Var>,
}

/// The loop an expression is read in: its index, what it defines or changes (`variant`), and
/// the variables joining the branches of the `if` the producer is in, read as what the first
/// branch assigned them (`joins`).
struct Scope<'s> {
    index: Var,
    variant: &'s [Var],
    joins: &'s HashMap<Var, Operand>,
}

impl Matcher {
    /// In `s` and the statements nested in it, the loops over `count` that compute `want`
    /// read it from the array `make` gives instead; whether any did.
    fn consume(
        &self,
        s: &mut Stmt,
        count: &Operand,
        joins: &HashMap<Var, Operand>,
        want: &Expr,
        make: &mut dyn FnMut() -> Var,
    ) -> bool {
        let mut changed = false;
        if let Some((index, c_count, body)) = loop_parts(s) {
            if same_count(c_count, count) {
                let variant = variant(s);
                let scope = Scope {
                    index,
                    variant: &variant,
                    joins,
                };
                let mut found = Vec::new();
                self.find(body, &scope, want, &mut found);
                if !found.is_empty() {
                    let t = make();
                    replace(loop_body_mut(s), &found, t, index);
                    changed = true;
                }
            }
        }
        for b in children_mut(s) {
            for t in b.iter_mut() {
                changed |= self.consume(t, count, joins, want, make);
            }
        }
        changed
    }

    /// The variables of a consumer's body (outside its nested loops) defined by the costly
    /// expression `want`.
    fn find(&self, body: &[Stmt], scope: &Scope, want: &Expr, found: &mut Vec<Var>) {
        for s in body {
            match s {
                Stmt::Let(vs, op @ Op::Unary(u, _))
                    if costly(*u)
                        && vs.len() == 1
                        && self.expr_op(op, scope, 0).as_ref() == Some(want) =>
                {
                    found.push(vs[0]);
                }
                Stmt::If { then, els, .. } => {
                    self.find(then, scope, want, found);
                    self.find(els, scope, want, found);
                }
                _ => {}
            }
        }
    }

    /// The expression an operand of a loop's body stands for, if it is one of the loop's index
    /// and of values from before the loop.
    fn expr(&self, x: &Operand, scope: &Scope, depth: u32) -> Option<Expr> {
        match x {
            Operand::F64(c) => Some(Expr::F64(c.to_bits())),
            Operand::I64(c) => Some(Expr::I64(*c)),
            Operand::Bool(c) => Some(Expr::Bool(*c)),
            Operand::Var(v) if *v == scope.index => Some(Expr::Index),
            Operand::Var(v) if scope.variant.contains(v) => {
                let op = self.defs.get(v)?;
                self.expr_op(op, scope, depth + 1)
            }
            Operand::Var(v) => match scope.joins.get(v) {
                // What the first branch assigned: a value from before the loop.
                Some(x) => {
                    let outside = HashMap::new();
                    let before = Scope {
                        index: scope.index,
                        variant: &[],
                        joins: &outside,
                    };
                    self.expr(x, &before, depth + 1)
                }
                None if self.mutable.contains(v) => None,
                None => Some(Expr::Var(*v)),
            },
            _ => None,
        }
    }

    fn expr_op(&self, op: &Op, scope: &Scope, depth: u32) -> Option<Expr> {
        if depth > 16 {
            return None;
        }
        let sub = |x: &Operand| self.expr(x, scope, depth);
        Some(match op {
            Op::Copy(x) => sub(x)?,
            Op::Unary(u, x) => Expr::Unary(*u, Box::new(sub(x)?)),
            Op::Binary(o, x, y) => Expr::Binary(*o, Box::new(sub(x)?), Box::new(sub(y)?)),
            Op::Load {
                array: Operand::Var(a),
                index: i,
                slot,
            } if !scope.variant.contains(a) && !self.mutable.contains(a) => {
                Expr::Load(*a, Box::new(sub(i)?), *slot)
            }
            _ => return None,
        })
    }
}
