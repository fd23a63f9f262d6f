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
    single_assignments(&mut f.body);
    let mut cx = Cx {
        vars: std::mem::take(&mut f.vars),
        assigned: mutable(&f.body),
        nullable: nullable(&f.body),
        subst: HashMap::new(),
        defs: HashMap::new(),
        below: HashMap::new(),
        natural: HashSet::new(),
        avail: vec![HashMap::new()],
        lengths: HashMap::new(),
        counted: HashMap::new(),
        integers: HashMap::new(),
        last_of: HashMap::new(),
        counts: HashSet::new(),
        checked: Vec::new(),
        facts: Vec::new(),
        nonempty: Vec::new(),
    };
    let mut body = std::mem::take(&mut f.body);
    cx.lengths.extend(joined_lengths(&body));
    cx.block(&mut body);
    dead_code(&mut body);
    let mut uses = HashMap::new();
    walk(&body, &mut |s| count_uses(s, &mut uses));
    sink(&mut body, &uses);
    f.body = body;
    f.vars = cx.vars;
}

/// The variables that may hold `null` (the placeholder of a join's branch that does not make
/// the array, or of a sweep's accumulator where no step runs): assigned or defined as it or
/// as a copy of such a variable, or the accumulators of a fold that starts or goes on with
/// one.
fn nullable(body: &Block) -> HashSet<Var> {
    let mut out: HashSet<Var> = HashSet::new();
    loop {
        let before = out.len();
        let null = |x: &Operand, out: &HashSet<Var>| match x {
            Operand::Null => true,
            Operand::Var(v) => out.contains(v),
            _ => false,
        };
        walk(body, &mut |s| match s {
            Stmt::Set(v, x) if null(x, &out) => {
                out.insert(*v);
            }
            Stmt::Let(vs, Op::Copy(x)) if null(x, &out) => out.extend(vs.iter().copied()),
            Stmt::Ifold {
                accs, init, next, ..
            } => {
                for (k, a) in accs.iter().enumerate() {
                    if null(&init[k], &out) || null(&next[k], &out) {
                        out.insert(*a);
                    }
                }
            }
            _ => {}
        });
        if out.len() == before {
            return out;
        }
    }
}

/// Whether a statement is a check written as an `if` whose branch fails: it only computes, and
/// makes and reports the error's values.
fn failing_check(s: &Stmt) -> bool {
    let mut only = true;
    walk(std::slice::from_ref(s), &mut |t| match t {
        Stmt::If { .. } | Stmt::Site(_) => {}
        Stmt::Let(_, Op::Rt(rt, _)) => only &= !rt.effects().io,
        Stmt::Let(_, op) => only &= is_pure(op),
        _ => only = false,
    });
    only && never_returns(std::slice::from_ref(s))
}

/// Whether a block reports an error somewhere (a runtime call that never returns).
fn never_returns(b: &[Stmt]) -> bool {
    let mut yes = false;
    walk(
        b,
        &mut |t| yes |= matches!(t, Stmt::Let(_, Op::Rt(rt, _)) if rt.effects().noreturn),
    );
    yes
}

/// The declared variables that are only ever assigned arrays made with one constant count: each
/// has that length wherever it is read (where branches that each make a small array join).
fn joined_lengths(body: &Block) -> HashMap<Var, i64> {
    let (counts, declared) = super::scalars::constant_counts(body);
    let mut joined: HashMap<Var, Option<i64>> = HashMap::new();
    walk(body, &mut |s| {
        if let Stmt::Set(v, x) = s {
            let n = x.var().and_then(|b| counts.get(&b).copied());
            let e = joined.entry(*v).or_insert(n);
            if *e != n {
                *e = None;
            }
        }
    });
    joined
        .into_iter()
        .filter(|(v, _)| declared.contains(v))
        .filter_map(|(v, n)| Some((v, n?)))
        .collect()
}

/// The call site a loop's step has recorded before a statement, read statement by statement
/// (`see` each before deciding on it): known after a `site` at the step's top level, unknown
/// after a statement with one inside; and whether the step has recorded one at all (before
/// the first, a check reports at the site recorded before the loop).
#[derive(Default)]
struct SitesSeen {
    site: Option<u32>,
    any: bool,
}

impl SitesSeen {
    fn see(&mut self, t: &Stmt) {
        if let Stmt::Site(n) = t {
            self.site = Some(*n);
            self.any = true;
            return;
        }
        let mut sets = false;
        walk(std::slice::from_ref(t), &mut |u| {
            sets |= matches!(u, Stmt::Site(_))
        });
        if sets {
            self.site = None;
            self.any = true;
        }
    }

    /// Whether the site a check here would report at is known (or is the loop's own).
    fn known(&self) -> bool {
        self.site.is_some() || !self.any
    }
}

/// The most checks of a loop's counter that `range_checks` takes out of its step (the tests
/// before the loop compare each length with every other).
const MAX_RANGE_CHECKS: usize = 4;

struct Cx {
    vars: Vec<VarInfo>,
    /// Variables that may change between two reads (`mutable`): never propagated nor shared.
    assigned: HashSet<Var>,
    /// Array variables that may hold the null placeholder (`nullable`): their length is taken
    /// only where the code that reads them runs.
    nullable: HashSet<Var>,
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
    /// Arrays whose length is a constant (built with a constant count, or a join of such
    /// arrays: `joined_lengths`).
    lengths: HashMap<Var, i64>,
    /// Arrays made with a count that is a variable no one assigns: their length is that
    /// variable (a loop over one read with the other's index needs no check).
    counted: HashMap<Var, Var>,
    /// Reals that are integers computed as such too (`integer_sum`).
    integers: HashMap<Var, Operand>,
    /// Integers that are a count less one (`integer_sum`): the count.
    last_of: HashMap<Var, Operand>,
    /// Reals that a `vl_check_count` found natural numbers, in the blocks that hold it
    /// (`learn_count`); for each open block, the reals it checked (`true`) and those whose
    /// integer it defined (`false`, `learn_counted`), forgotten when it ends.
    counts: HashSet<Var>,
    checked: Vec<Vec<(Var, bool)>>,
    /// For each open block, innermost last: the copies learned from the checks in it (`learn_check`),
    /// which hold only in the rest of that block.
    facts: Vec<Vec<Var>>,
    /// The counts of the loops whose bodies enclose the statement: each is at least 1.
    nonempty: Vec<Operand>,
}

impl Cx {
    fn block(&mut self, block: &mut Block) {
        self.avail.push(HashMap::new());
        self.facts.push(Vec::new());
        self.checked.push(Vec::new());
        let mut out = Vec::with_capacity(block.len());
        let mut todo: std::collections::VecDeque<Stmt> = std::mem::take(block).into();
        while let Some(mut s) = todo.pop_front() {
            for x in stmt_operands_mut(&mut s) {
                self.rename(x);
            }
            // A branch on a constant: the branch taken, in place of the `if`.
            if let Stmt::If {
                cond: Operand::Bool(c),
                then,
                els,
            } = s
            {
                let taken = if c { then } else { els };
                for t in taken.into_iter().rev() {
                    todo.push_front(t);
                }
                continue;
            }
            let ends = matches!(s, Stmt::Return(_) | Stmt::TailCall { .. } | Stmt::Continue);
            match &mut s {
                Stmt::Let(vs, op) => {
                    if let Some(op2) = self.rewrite(vs, op) {
                        *op = op2;
                    }
                    if vs.is_empty() && self.needless_check(op) {
                        continue;
                    }
                    if vs.is_empty() {
                        self.learn_count(op);
                    }
                    if let [v] = vs[..] {
                        self.learn(v, op);
                        self.learn_counted(v, op);
                        out.extend(self.integer_sum(v, op));
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
            // In a loop's body, its count is at least 1.
            let count = match &s {
                Stmt::For { count, .. } | Stmt::Build { count, .. } | Stmt::Ifold { count, .. }
                    if self.is_fixed(count) =>
                {
                    Some(count.clone())
                }
                _ => None,
            };
            if let Some(c) = &count {
                self.nonempty.push(c.clone());
            }
            self.children(&mut s);
            if count.is_some() {
                self.nonempty.pop();
            }
            // A fold that does nothing, and an `if` whose branches are the same code.
            if let Some(out2) = trivial_fold(&s, &mut self.vars).or_else(|| same_branches(&s)) {
                for t in out2.into_iter().rev() {
                    todo.push_front(t);
                }
                continue;
            }
            // A loop's `next` and `elem` operands are read after its body: renamed above,
            // before the body's own copies were known; rename them again.
            if let Stmt::Build { elem: xs, .. } | Stmt::Ifold { next: xs, .. } = &mut s {
                for x in xs {
                    self.rename(x);
                }
            }
            out.extend(invariant_accumulators(&mut s));
            self.learn_check(&s);
            out.extend(self.range_checks(&mut s));
            out.extend(self.hoist(&mut s));
            if let Stmt::Build {
                array,
                count: Operand::I64(n),
                ..
            } = &s
            {
                self.lengths.insert(*array, *n);
            }
            if let Stmt::Build {
                array,
                count: Operand::Var(n),
                ..
            } = &s
            {
                if !self.assigned.contains(n) {
                    self.counted.insert(*array, *n);
                }
            }
            out.push(s);
            if ends {
                // What follows in the block is never reached (a branch spliced above).
                break;
            }
        }
        *block = out;
        self.avail.pop();
        for v in self.facts.pop().unwrap_or_default() {
            self.subst.remove(&v);
        }
        for (r, count) in self.checked.pop().unwrap_or_default() {
            if count {
                self.counts.remove(&r);
            } else {
                self.integers.remove(&r);
            }
        }
    }

    /// After `vl_check_count` of a real (a count a tape's record holds: the inner loop's
    /// count, for the sweep of a loop nested in a loop), the rest of the block knows it is a
    /// natural number (`learn_counted`).
    fn learn_count(&mut self, op: &Op) {
        if let Op::Rt(Rt::CheckCount, args) = op {
            if let Some(Operand::Var(r)) = args.last() {
                if !self.assigned.contains(r) && !self.counts.contains(r) {
                    self.counts.insert(*r);
                    if let Some(scope) = self.checked.last_mut() {
                        scope.push((*r, true));
                    }
                }
            }
        }
    }

    /// `t = f64toi64 r` of a real checked to be a count: the real is the integer `t` converted
    /// (exact: r is a natural number), so that arithmetic on r is computed as integers too
    /// (`integer_sum`, `reversed_index`), in the rest of the block that defines `t`.
    fn learn_counted(&mut self, t: Var, op: &Op) {
        if let Op::Unary(UnOp::F64ToI64, Operand::Var(r)) = op {
            if self.counts.contains(r) && !self.integers.contains_key(r) {
                self.integers.insert(*r, Operand::Var(t));
                self.natural.insert(t);
                // `t` is visible in the rest of this block only.
                if let Some(scope) = self.checked.last_mut() {
                    scope.push((*r, false));
                }
            }
        }
    }

    /// Simplifies the blocks nested in `s`. In the branches of an `if` on a variable that does
    /// not change, the condition is known: true in the first, false in the second (paper 002
    /// Fig. 7f, `if e0 then e1[e0 := true] else e2[e0 := false]`), so that an `if` on the same
    /// condition inside either is the branch it takes.
    fn children(&mut self, s: &mut Stmt) {
        if let Stmt::If {
            cond: Operand::Var(c),
            then,
            els,
        } = s
        {
            let c = *c;
            if self.is_fixed(&Operand::Var(c)) && !self.subst.contains_key(&c) {
                self.subst.insert(c, Operand::Bool(true));
                self.block(then);
                self.subst.insert(c, Operand::Bool(false));
                self.block(els);
                self.subst.remove(&c);
                return;
            }
        }
        for b in children_mut(s) {
            self.block(b);
        }
    }

    /// What a check tells the rest of its block: after `if c {} else {fail}` (a branch that
    /// never returns), `c` is true, and so are both operands of an `and` it is; an integer
    /// equality with a constant that is true makes the later uses of the variable read the
    /// constant, and one of two operands makes the later uses of the second read the first (the
    /// index checks against the length of one of two arrays of equal length, which `bundle`
    /// or `same-length` checked, are then proved by a loop over the other).
    fn learn_check(&mut self, s: &Stmt) {
        let Stmt::If {
            cond: Operand::Var(c),
            then,
            els,
        } = s
        else {
            return;
        };
        let fails = |b: &Block| {
            b.iter()
                .any(|t| matches!(t, Stmt::Let(_, Op::Rt(rt, _)) if rt.effects().noreturn))
        };
        let holds = match (fails(then), fails(els)) {
            (false, true) => true,
            (true, false) => false,
            _ => return,
        };
        self.learn_truth(*c, holds, 0);
    }

    fn learn_truth(&mut self, c: Var, holds: bool, depth: u32) {
        if depth > 8 || !self.is_fixed(&Operand::Var(c)) {
            return;
        }
        self.add_fact(c, Operand::Bool(holds));
        match self.defs.get(&c).cloned() {
            Some(Op::Binary(BinOp::And, x, y)) if holds => {
                for v in [x, y].iter().filter_map(Operand::var) {
                    self.learn_truth(v, true, depth + 1);
                }
            }
            Some(Op::Binary(BinOp::Or, x, y)) if !holds => {
                for v in [x, y].iter().filter_map(Operand::var) {
                    self.learn_truth(v, false, depth + 1);
                }
            }
            Some(Op::Unary(UnOp::Not, Operand::Var(x))) => self.learn_truth(x, !holds, depth + 1),
            // An integer checked equal to a constant is the constant (a vector operation's
            // check that its arguments have the 3 elements of a point: its loops then have a
            // constant count, which `scalars` unrolls).
            Some(Op::Binary(BinOp::IEq, Operand::Var(a), c @ Operand::I64(_)))
                if holds && !self.assigned.contains(&a) =>
            {
                self.add_fact(a, c);
            }
            Some(Op::Binary(BinOp::IEq, a, Operand::Var(b)))
                if holds && self.is_fixed(&a) && Operand::Var(b) != a =>
            {
                self.add_fact(b, a);
            }
            _ => {}
        }
    }

    /// Later uses of `v` in the current block read `x`.
    fn add_fact(&mut self, v: Var, x: Operand) {
        if self.subst.contains_key(&v) {
            return;
        }
        self.subst.insert(v, x);
        if let Some(scope) = self.facts.last_mut() {
            scope.push(v);
        }
    }

    /// Loop-invariant code motion out of an `if` of a loop's body on a condition the loop does
    /// not change: the arithmetic at the top level of its branches that reads only what the
    /// loop does not change (`inside` are the variables the loop defines) leaves the loop, in
    /// an `if` on the same condition before it, its results passed on in joins (the primal
    /// half of a forward pass through `(if (= theta 0) ...)`, computed once for all the
    /// directions of `jacob`). Not where the condition or the arithmetic reads what the loop's
    /// guarded reads define (`guarded`). Returns what goes before the loop.
    fn split_if(
        &mut self,
        t: &mut Stmt,
        inside: &HashSet<Var>,
        guarded: &HashSet<Var>,
    ) -> Vec<Stmt> {
        let Stmt::If { cond, then, els } = t else {
            return Vec::new();
        };
        let outside = |x: &Operand, own: &HashSet<Var>, s: &Self| match x {
            Operand::Var(v) => {
                own.contains(v) || (s.is_fixed(x) && !inside.contains(v) && !guarded.contains(v))
            }
            _ => true,
        };
        if !outside(cond, &HashSet::new(), self) {
            return Vec::new();
        }
        let mut pre: [Block; 2] = [Vec::new(), Vec::new()];
        let mut branches = [then, els];
        for (b, branch) in branches.iter_mut().enumerate() {
            let mut own: HashSet<Var> = HashSet::new();
            let mut rest = Vec::with_capacity(branch.len());
            for u in std::mem::take(&mut **branch) {
                let leaves = match &u {
                    Stmt::Let(vs, op @ (Op::Unary(..) | Op::Binary(..) | Op::Copy(_))) => {
                        vs.len() == 1
                            && !matches!(op, Op::Unary(UnOp::F64ToI64, _))
                            && op_operands(op).iter().all(|x| outside(x, &own, self))
                    }
                    _ => false,
                };
                if leaves {
                    own.extend(stmt_defs(&u));
                    pre[b].push(u);
                } else {
                    rest.push(u);
                }
            }
            **branch = rest;
        }
        if pre.iter().all(|p| p.is_empty()) {
            return Vec::new();
        }
        // Each result the rest of its branch reads, through a variable of the join.
        let mut map: HashMap<Var, Var> = HashMap::new();
        let mut joins: Vec<Var> = Vec::new();
        let mut sets: [Block; 2] = [Vec::new(), Vec::new()];
        for b in 0..2 {
            let mut used: HashSet<Var> = HashSet::new();
            walk(branches[b], &mut |u| {
                used.extend(stmt_operands(u).iter().filter_map(|x| x.var()))
            });
            for v in pre[b].iter().flat_map(stmt_defs) {
                if !used.contains(&v) {
                    continue;
                }
                let info = self.vars[v.0 as usize].clone();
                let e = fresh_var(&mut self.vars, info.ty.clone(), &copy_prefix(&info.name));
                sets[b].push(Stmt::Set(e, Operand::Var(v)));
                sets[1 - b].push(Stmt::Set(e, Operand::placeholder(&info.ty)));
                map.insert(v, e);
                joins.push(e);
            }
        }
        for branch in branches.iter_mut() {
            walk_mut(branch, &mut |u| {
                for x in stmt_operands_mut(u) {
                    if let Operand::Var(v) = x {
                        if let Some(e) = map.get(v) {
                            *v = *e;
                        }
                    }
                }
            });
        }
        let [mut pre_then, mut pre_els] = pre;
        let [sets_then, sets_els] = sets;
        pre_then.extend(sets_then);
        pre_els.extend(sets_els);
        let mut out = Vec::new();
        if !joins.is_empty() {
            out.push(Stmt::Declare(joins));
        }
        out.push(Stmt::If {
            cond: cond.clone(),
            then: pre_then,
            els: pre_els,
        });
        out
    }

    /// A `build` whose step checks its own counter against lengths it does not
    /// change (at most `MAX_RANGE_CHECKS`), and otherwise only computes: the checks leave the
    /// step, as tests before the loop that fail as the loop would. Steps before the first
    /// failing one act on nothing, so the loop fails exactly when a length is below the
    /// count, at the step of the least such length, by the first check (in the step's order)
    /// against it. The step is then cheap, and `fuse` can copy it into the reads of the array
    /// (a point `u + c` read by the guard of `passes::sparse`).
    fn range_checks(&mut self, s: &mut Stmt) -> Vec<Stmt> {
        // Not an `ifold`: its step is not copied into reads, and `version` runs a fold that
        // checks in two versions, the faster where the loop is short (k-means' distances).
        let (index, count, body) = match s {
            Stmt::Build {
                index, count, body, ..
            } => (*index, count.clone(), body),
            _ => return Vec::new(),
        };
        if !self.is_fixed(&count) {
            return Vec::new();
        }
        // The checks, in order: (its statement's position, the site it reports at, the site
        // the step has set before it if known, the length).
        let mut checks: Vec<(usize, i64, Option<u32>, Operand)> = Vec::new();
        let mut seen = SitesSeen::default();
        for (k, t) in body.iter().enumerate() {
            seen.see(t);
            match t {
                Stmt::Let(vs, Op::Rt(Rt::IndexI64, args))
                    if vs.len() <= 1 && args.get(1) == Some(&Operand::Var(index)) =>
                {
                    let (Some(Operand::I64(at)), Some(len)) = (args.first(), args.get(2)) else {
                        return Vec::new();
                    };
                    let at = match (*at, seen.site) {
                        (at, _) if at >= 0 => at,
                        (-1, Some(n)) => i64::from(n),
                        _ => return Vec::new(),
                    };
                    if !self.is_fixed(len) || checks.len() == MAX_RANGE_CHECKS {
                        return Vec::new();
                    }
                    checks.push((k, at, seen.site, len.clone()));
                }
                _ if super::fuse::pure(std::slice::from_ref(t)) => {}
                _ => return Vec::new(),
            }
        }
        if checks.is_empty() {
            return Vec::new();
        }
        // The lengths are defined before the loop (found only once there are checks: this
        // runs on every `build` in every round).
        let inside: HashSet<Var> = defined_in(body).into_iter().collect();
        if checks
            .iter()
            .any(|c| c.3.var().is_some_and(|v| inside.contains(&v)))
        {
            return Vec::new();
        }
        // In the step, each check's result is the counter.
        for (k, ..) in checks.iter().rev() {
            match &mut body[*k] {
                Stmt::Let(vs, op) if !vs.is_empty() => *op = Op::Copy(Operand::Var(index)),
                _ => {
                    body.remove(*k);
                }
            }
        }
        // The loop fails where a length is below the count (one test each, joined); then
        // check `j` fails first where its length is also below the lengths of the checks
        // before it and not above those after it: each such test (pure, so constants fold)
        // guards the check at its own length, which fails.
        let mut out = Vec::new();
        let mut shorts = Vec::new();
        for (.., len) in &checks {
            let short = fresh_var(&mut self.vars, Ty::Bool, "short");
            out.push(Stmt::Let(
                vec![short],
                Op::Binary(BinOp::ILt, len.clone(), count.clone()),
            ));
            shorts.push(short);
        }
        let mut any = shorts[0];
        for &short in &shorts[1..] {
            let either = fresh_var(&mut self.vars, Ty::Bool, "short");
            out.push(Stmt::Let(
                vec![either],
                Op::Binary(BinOp::Or, Operand::Var(any), Operand::Var(short)),
            ));
            any = either;
        }
        let lens: Vec<Operand> = checks.iter().map(|c| c.3.clone()).collect();
        let mut fail = Vec::new();
        for (j, (_, at, site, len)) in checks.into_iter().enumerate() {
            let mut first = shorts[j];
            for (k, other) in lens.iter().enumerate().filter(|(k, _)| *k != j) {
                // Before `j`: `len < other`; after it: `!(other < len)`.
                let less = fresh_var(&mut self.vars, Ty::Bool, "less");
                let test = if k < j {
                    fail.push(Stmt::Let(
                        vec![less],
                        Op::Binary(BinOp::ILt, len.clone(), other.clone()),
                    ));
                    less
                } else {
                    fail.push(Stmt::Let(
                        vec![less],
                        Op::Binary(BinOp::ILt, other.clone(), len.clone()),
                    ));
                    let not = fresh_var(&mut self.vars, Ty::Bool, "least");
                    fail.push(Stmt::Let(
                        vec![not],
                        Op::Unary(UnOp::Not, Operand::Var(less)),
                    ));
                    not
                };
                let both = fresh_var(&mut self.vars, Ty::Bool, "short");
                fail.push(Stmt::Let(
                    vec![both],
                    Op::Binary(BinOp::And, Operand::Var(first), Operand::Var(test)),
                ));
                first = both;
            }
            let r = fresh_var(&mut self.vars, Ty::I64, "i");
            let mut check: Vec<Stmt> = site.map(Stmt::Site).into_iter().collect();
            check.push(Stmt::Let(
                vec![r],
                Op::Rt(Rt::IndexI64, vec![Operand::I64(at), len.clone(), len]),
            ));
            fail.push(Stmt::If {
                cond: Operand::Var(first),
                then: check,
                els: vec![],
            });
        }
        out.push(Stmt::If {
            cond: Operand::Var(any),
            then: fail,
            els: vec![],
        });
        out
    }

    /// Loop-invariant code motion: the operations at the top of a loop's body that can
    /// neither fail nor write and read nothing the loop defines, taken out to run before it
    /// (a length, arithmetic on what the loop does not change).
    fn hoist(&mut self, s: &mut Stmt) -> Vec<Stmt> {
        let mut inside: HashSet<Var> = stmt_defs(s).into_iter().collect();
        let (count, body) = match s {
            Stmt::For { index, body, count }
            | Stmt::Build {
                index, body, count, ..
            }
            | Stmt::Ifold {
                index, body, count, ..
            } => {
                inside.insert(*index);
                (count.clone(), body)
            }
            _ => return Vec::new(),
        };
        walk(body, &mut |t| inside.extend(stmt_defs(t)));
        // Reads of arrays leave the loop only if it writes into none (a read before the loop
        // would not see an element added in place by an iteration).
        let writes = super::fuse::writes_arrays(body, &self.vars);
        let mut hoisted = Vec::new();
        // What may run only if the loop runs at all (`guarded`): reads of arrays (proved in
        // range where the loop's count is at least 1), and what reads them.
        let mut guarded: Vec<Stmt> = Vec::new();
        let mut guarded_defs: HashSet<Var> = HashSet::new();
        // Until the first statement that may fail or act, the body only computes: a read there
        // is in range whenever the loop runs (no check inside the loop guards it).
        let mut prefix = self.is_fixed(&count);
        // The site the body has set before the statement (a check that leaves the loop
        // reports its error at the site it would have in the loop).
        let mut seen = SitesSeen::default();
        let mut kept = Vec::with_capacity(body.len());
        for mut t in std::mem::take(body) {
            seen.see(&t);
            let (site, site_known) = (seen.site, seen.known());
            let reads_ok = |x: &Operand, own: &HashSet<Var>| match x {
                Operand::Var(v) => {
                    own.contains(v)
                        || (self.is_fixed(x) && (!inside.contains(v) || guarded_defs.contains(v)))
                }
                _ => true,
            };
            let reads_guarded = {
                let mut r = false;
                walk(std::slice::from_ref(&t), &mut |u| {
                    r |= stmt_operands(u)
                        .iter()
                        .any(|x| x.var().is_some_and(|v| guarded_defs.contains(&v)))
                });
                r
            };
            // The variables a statement defines inside itself (a loop's step).
            let own: HashSet<Var> = defined_in(std::slice::from_ref(&t)).into_iter().collect();
            let mut free = true;
            walk(std::slice::from_ref(&t), &mut |u| {
                for x in stmt_operands(u) {
                    free &= reads_ok(x, &own);
                }
            });
            // Not a conversion to an integer: the loop may run it only after the check that
            // makes it defined in C (a real in range).
            let movable = free
                && !(writes && super::fuse::reads_arrays(std::slice::from_ref(&t)))
                && match &t {
                    Stmt::Let(_, Op::Unary(UnOp::F64ToI64, _)) => false,
                    // A loop that only computes (the guard of `passes::sparse`, a fold of
                    // what this loop does not change).
                    Stmt::Ifold { .. } => super::fuse::pure(std::slice::from_ref(&t)),
                    // The length of an array that may be null, only where the loop runs.
                    Stmt::Let(vs, Op::Length(Operand::Var(a))) if self.nullable.contains(a) => {
                        vs.len() == 1 && prefix
                    }
                    Stmt::Let(vs, Op::Length(_) | Op::Unary(..) | Op::Binary(..) | Op::Copy(_)) => {
                        vs.len() == 1
                    }
                    Stmt::Let(vs, Op::Load { .. }) => vs.len() == 1 && prefix,
                    // A check of what the loop does not change, before anything in the body
                    // may fail or act: the first iteration would make it, and it holds in
                    // every other if it holds in the first (the reads of an input vector at
                    // constant indices in each pass of forward `jacob`, a check that two
                    // lengths agree). One that reports at the site the body set runs after
                    // that site is set again.
                    Stmt::Let(
                        vs,
                        Op::Rt(rt @ (Rt::Index | Rt::IndexI64 | Rt::CheckCount), args),
                    ) => {
                        vs.len() <= 1
                            && prefix
                            && rt.effects()
                                == (crate::rt::Effects {
                                    fails: true,
                                    ..Default::default()
                                })
                            && match args.first() {
                                Some(Operand::I64(k)) => *k >= 0 || (*k == -1 && site_known),
                                _ => false,
                            }
                    }
                    Stmt::If { .. } => prefix && site_known && failing_check(&t),
                    _ => false,
                };
            let check = matches!(t, Stmt::Let(_, Op::Rt(..)) | Stmt::If { .. });
            // The site it reported at in the loop: made explicit, or set where it fails.
            if let (true, true, Some(n)) = (movable, check, site) {
                match &mut t {
                    Stmt::Let(_, Op::Rt(_, args)) => {
                        if let Some(Operand::I64(k @ -1)) = args.first_mut() {
                            *k = i64::from(n);
                        }
                    }
                    Stmt::If { then, els, .. } => {
                        for b in [then, els] {
                            if never_returns(b) {
                                b.insert(0, Stmt::Site(n));
                            }
                        }
                    }
                    _ => {}
                }
            }
            let load = match &t {
                Stmt::Let(_, Op::Load { .. }) => true,
                Stmt::Let(_, Op::Length(Operand::Var(a))) => self.nullable.contains(a),
                _ => false,
            };
            if movable && !load && !check && !reads_guarded {
                for v in stmt_defs(&t) {
                    inside.remove(&v);
                }
                hoisted.push(t);
            } else if movable && prefix {
                guarded_defs.extend(stmt_defs(&t));
                guarded.push(t);
            } else {
                if !super::fuse::pure(std::slice::from_ref(&t)) {
                    prefix = false;
                }
                hoisted.extend(self.split_if(&mut t, &inside, &guarded_defs));
                kept.push(t);
            }
        }
        *body = kept;
        if guarded.is_empty() {
            return hoisted;
        }
        // `if count > 0 { guarded } `, its results passed to the loop through variables
        // assigned in both branches (placeholders where the loop does not run).
        let mut used: HashSet<Var> = HashSet::new();
        walk(std::slice::from_ref(&*s), &mut |u| {
            used.extend(stmt_operands(u).iter().filter_map(|x| x.var()))
        });
        let exported: Vec<Var> = guarded
            .iter()
            .flat_map(stmt_defs)
            .filter(|v| used.contains(v))
            .collect();
        let mut map: HashMap<Var, Var> = HashMap::new();
        let mut then = guarded;
        let mut els = Vec::new();
        for v in &exported {
            let info = self.vars[v.0 as usize].clone();
            let e = fresh_var(&mut self.vars, info.ty.clone(), &copy_prefix(&info.name));
            then.push(Stmt::Set(e, Operand::Var(*v)));
            els.push(Stmt::Set(e, Operand::placeholder(&info.ty)));
            map.insert(*v, e);
        }
        let rename = |x: &mut Operand| {
            if let Operand::Var(v) = x {
                if let Some(e) = map.get(v) {
                    *v = *e;
                }
            }
        };
        for x in stmt_operands_mut(s) {
            rename(x);
        }
        for b in children_mut(s) {
            walk_mut(b, &mut |u| {
                for x in stmt_operands_mut(u) {
                    rename(x);
                }
            });
        }
        let ran = fresh_var(&mut self.vars, Ty::Bool, "ran");
        if !exported.is_empty() {
            hoisted.push(Stmt::Declare(exported.iter().map(|v| map[v]).collect()));
        }
        hoisted.push(Stmt::Let(
            vec![ran],
            Op::Binary(BinOp::ILt, Operand::I64(0), count),
        ));
        hoisted.push(Stmt::If {
            cond: Operand::Var(ran),
            then,
            els,
        });
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

    /// A real that is the sum of a natural number converted and an integer constant (an index
    /// `(+ i 7)`) is also computed as an integer, for `get` to check as one: the sum of
    /// integers below 2^52 is exact in both.
    fn integer_sum(&mut self, v: Var, op: &Op) -> Option<Stmt> {
        let Op::Binary(f @ (BinOp::FAdd | BinOp::FSub), a, b) = op else {
            return None;
        };
        if let Some(stmt) = self.reversed_index(v, *f, a, b) {
            return Some(stmt);
        }
        let small = |c: f64| c.fract() == 0.0 && c.abs() < 4503599627370496.0;
        let (x, c) = match (self.integer_of(a), b) {
            (Some(x), Operand::F64(c)) if self.is_natural(&x) && small(*c) => (x, *c as i64),
            _ => match (a, self.integer_of(b)) {
                (Operand::F64(c), Some(x))
                    if *f == BinOp::FAdd && self.is_natural(&x) && small(*c) =>
                {
                    (x, *c as i64)
                }
                _ => return None,
            },
        };
        if matches!(x, Operand::I64(_)) {
            return None;
        }
        let int = if *f == BinOp::FAdd {
            BinOp::IAdd
        } else {
            BinOp::ISub
        };
        let k = fresh_var(&mut self.vars, Ty::I64, "k");
        if c >= 0 && int == BinOp::IAdd {
            self.natural.insert(k);
        }
        if c == 1 && int == BinOp::ISub && self.is_fixed(&x) {
            self.last_of.insert(k, x.clone());
        }
        self.integers.insert(v, Operand::Var(k));
        Some(Stmt::Let(vec![k], Op::Binary(int, x, Operand::I64(c))))
    }

    /// `(- (- n 1) i)` for a counter `i` below the count `n` (the index from the end that a
    /// reverse sweep reads its tape at): also computed as an integer, which is a natural
    /// number below `n` too. Exact: the three are naturals below the count, which is below
    /// 2^53 (a loop of 2^53 steps does not end).
    fn reversed_index(&mut self, v: Var, f: BinOp, a: &Operand, b: &Operand) -> Option<Stmt> {
        if f != BinOp::FSub {
            return None;
        }
        let (Some(Operand::Var(last)), Some(Operand::Var(i))) =
            (self.integer_of(a), self.integer_of(b))
        else {
            return None;
        };
        let n = self.last_of.get(&last)?.clone();
        if self.below.get(&i) != Some(&n) || !self.is_fixed(&Operand::Var(i)) {
            return None;
        }
        let k = fresh_var(&mut self.vars, Ty::I64, "k");
        self.natural.insert(k);
        self.below.insert(k, n);
        self.integers.insert(v, Operand::Var(k));
        Some(Stmt::Let(
            vec![k],
            Op::Binary(BinOp::ISub, Operand::Var(last), Operand::Var(i)),
        ))
    }

    /// Whether a real is never -0 (looking `depth` definitions back): a square, an
    /// exponential, an integer converted, a sum with a term that is never -0 (in rounding to
    /// nearest a sum is -0 only if both terms are), a difference whose first term is never
    /// -0 (x - y is -0 only for -0 - +0), the root of such a real. NaN may be any of them.
    fn never_minus_zero(&self, x: &Operand, depth: usize) -> bool {
        let v = match x {
            Operand::F64(c) => return *c != 0.0 || c.is_sign_positive(),
            Operand::Var(v) => v,
            _ => return false,
        };
        if depth == 0 || self.assigned.contains(v) {
            return false;
        }
        match self.defs.get(v) {
            // (Of one variable: `==` on operands takes the constants 0 and -0 as equal.)
            Some(Op::Binary(BinOp::FMul, a @ Operand::Var(_), b)) => a == b && self.is_fixed(a),
            Some(Op::Binary(BinOp::FAdd, a, b)) => {
                self.never_minus_zero(a, depth - 1) || self.never_minus_zero(b, depth - 1)
            }
            Some(Op::Binary(BinOp::FSub, a, _)) => self.never_minus_zero(a, depth - 1),
            Some(Op::Unary(UnOp::Exp | UnOp::I64ToF64, _)) => true,
            Some(Op::Unary(UnOp::Sqrt, a)) => self.never_minus_zero(a, depth - 1),
            _ => false,
        }
    }

    /// The integer whose conversion a real operand is, if it is one.
    fn integer_of(&self, r: &Operand) -> Option<Operand> {
        match r {
            Operand::Var(t) => match self.defs.get(t) {
                Some(Op::Unary(UnOp::I64ToF64, x)) => Some(x.clone()),
                _ => self.integers.get(t).cloned(),
            },
            Operand::F64(c) if *c >= 0.0 && *c < 9007199254740992.0 && c.fract() == 0.0 => {
                Some(Operand::I64(*c as i64))
            }
            _ => None,
        }
    }

    /// Whether an integer index is known to be below a length: a loop's counter below its
    /// count, or two constants.
    fn in_range(&self, i: &Operand, n: &Operand) -> bool {
        match (i, n) {
            (Operand::Var(x), _) => self.below.get(x) == Some(n),
            (Operand::I64(i), Operand::I64(n)) => 0 <= *i && i < n,
            (Operand::I64(0), n) => self.nonempty.contains(n),
            _ => false,
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
                Some(if self.in_range(&i, n) {
                    Op::Copy(i)
                } else {
                    Op::Rt(Rt::IndexI64, vec![site.clone(), i, n.clone()])
                })
            }
            Op::Rt(Rt::IndexI64, args) => {
                let [_, i, n] = &args[..] else {
                    return None;
                };
                self.in_range(i, n).then(|| Op::Copy(i.clone()))
            }
            // A loop's counter is below its count, and a natural number is not negative.
            Op::Binary(BinOp::ILt, i, n) if self.in_range(i, n) => {
                Some(Op::Copy(Operand::Bool(true)))
            }
            Op::Binary(BinOp::ILt, i, Operand::I64(0)) if self.is_natural(i) => {
                Some(Op::Copy(Operand::Bool(false)))
            }
            Op::Rt(Rt::CountOk, args)
                if args.len() == 1
                    && self
                        .integer_of(&args[0])
                        .is_some_and(|i| self.is_natural(&i)) =>
            {
                Some(Op::Copy(Operand::Bool(true)))
            }
            Op::Binary(BinOp::FMul, x, Operand::F64(one))
            | Op::Binary(BinOp::FMul, Operand::F64(one), x)
            | Op::Binary(BinOp::FDiv, x, Operand::F64(one))
                if *one == 1.0 =>
            {
                // Exact: x * 1 and x / 1 are x for every x.
                Some(Op::Copy(x.clone()))
            }
            Op::Binary(BinOp::FSub, x, Operand::F64(z)) if *z == 0.0 && z.is_sign_positive() => {
                // Exact: x - 0 is x for every x, -0 and NaN included (x + 0 is not: -0 + 0
                // is +0, so paper 002's `e + 0 ~> e` holds only for the negative zero).
                Some(Op::Copy(x.clone()))
            }
            Op::Binary(BinOp::FAdd, x, Operand::F64(z))
            | Op::Binary(BinOp::FAdd, Operand::F64(z), x)
                if *z == 0.0 && (z.is_sign_negative() || self.never_minus_zero(x, 8)) =>
            {
                // Exact: x + -0 is x for every x, and x + 0 is x but for x = -0 (a sum of
                // squares from 0 starts with `0 + x * x`).
                Some(Op::Copy(x.clone()))
            }
            Op::Length(Operand::Var(a)) if self.lengths.contains_key(a) => {
                Some(Op::Copy(Operand::I64(self.lengths[a])))
            }
            Op::Length(Operand::Var(a)) if self.counted.contains_key(a) => {
                Some(Op::Copy(Operand::Var(self.counted[a])))
            }
            Op::Binary(op, x, y) if x == y && self.same_operands(*op, x).is_some() => {
                self.same_operands(*op, x)
            }
            // Two natural numbers (below 2^53) converted to reals are equal as the integers are.
            Op::Binary(BinOp::FEq, x, y)
                if [x, y]
                    .iter()
                    .all(|r| self.integer_of(r).is_some_and(|i| self.is_natural(&i))) =>
            {
                Some(Op::Binary(
                    BinOp::IEq,
                    self.integer_of(x)?,
                    self.integer_of(y)?,
                ))
            }
            Op::Unary(op, x) if fold_unary(*op, x).is_some() => fold_unary(*op, x).map(Op::Copy),
            Op::Binary(op, x, y) if fold_binary(*op, x, y).is_some() => {
                fold_binary(*op, x, y).map(Op::Copy)
            }
            Op::Unary(..) | Op::Binary(..) | Op::Length(_) if vs.len() == 1 => {
                let key = cse_key(op);
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

    /// An operation of an operand with itself that has a simpler result: exact for integers
    /// and booleans, and for reals that cannot be NaN (integers converted).
    fn same_operands(&self, op: BinOp, x: &Operand) -> Option<Op> {
        use BinOp::*;
        let not_nan = || self.integer_of(x).is_some();
        let fixed = self.is_fixed(x);
        match op {
            And | Or if fixed => Some(Op::Copy(x.clone())),
            IEq | BEq if fixed => Some(Op::Copy(Operand::Bool(true))),
            INe | ILt if fixed => Some(Op::Copy(Operand::Bool(false))),
            FEq | FLe | FGe if fixed && not_nan() => Some(Op::Copy(Operand::Bool(true))),
            FLt | FGt if fixed && not_nan() => Some(Op::Copy(Operand::Bool(false))),
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
            // A count less one, and the index from the end that it gives (`reversed_index`
            // makes them from reals; a later round sees the integers).
            Op::Binary(BinOp::ISub, n @ Operand::Var(_), Operand::I64(1))
                if self.is_natural(n) && self.is_fixed(n) =>
            {
                self.last_of.insert(v, n.clone());
            }
            Op::Binary(BinOp::ISub, Operand::Var(last), i @ Operand::Var(iv))
                if self.is_fixed(i)
                    && self
                        .last_of
                        .get(last)
                        .is_some_and(|n| self.below.get(iv) == Some(n)) =>
            {
                let n = self.last_of[last].clone();
                self.natural.insert(v);
                self.below.insert(v, n);
            }
            // A counter below `n - 1`, plus one, is below `n`: the index of a loop whose first
            // step `peel` ran before it.
            Op::Binary(BinOp::IAdd, j @ Operand::Var(jv), Operand::I64(1))
                if self.is_fixed(j)
                    && self
                        .below
                        .get(jv)
                        .and_then(Operand::var)
                        .is_some_and(|last| self.last_of.contains_key(&last)) =>
            {
                let last = self.below[jv].var().expect("a variable");
                let n = self.last_of[&last].clone();
                self.natural.insert(v);
                self.below.insert(v, n);
            }
            Op::NewArray {
                count: Operand::I64(n),
                ..
            } => {
                self.lengths.insert(v, *n);
            }
            Op::NewArray {
                count: Operand::Var(n),
                ..
            } if !self.assigned.contains(n) => {
                self.counted.insert(v, *n);
            }
            _ => {}
        }
        if matches!(op, Op::Unary(..) | Op::Binary(..) | Op::Length(_))
            && op_operands(op).iter().all(|x| self.is_fixed(x))
        {
            let scope = self.avail.last_mut().expect("a scope");
            scope.entry(cse_key(op)).or_insert(v);
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

/// A unary operation on a constant, computed (the conversions and `not`: what C computes
/// exactly the same way).
fn fold_unary(op: UnOp, x: &Operand) -> Option<Operand> {
    match (op, x) {
        (UnOp::I64ToF64, Operand::I64(c)) if c.unsigned_abs() < 1 << 53 => {
            Some(Operand::F64(*c as f64))
        }
        (UnOp::Not, Operand::Bool(b)) => Some(Operand::Bool(!b)),
        _ => None,
    }
}

/// A binary operation on constants, computed: IEEE arithmetic and comparisons give the same
/// results here as in C (no contraction: `-ffp-contract=off`), integer arithmetic that does not
/// overflow, booleans.
pub fn fold_binary(op: BinOp, x: &Operand, y: &Operand) -> Option<Operand> {
    use BinOp::*;
    use Operand::{Bool as B, F64 as F, I64 as I};
    let r = match (op, x, y) {
        (FAdd, F(a), F(b)) => F(a + b),
        (FSub, F(a), F(b)) => F(a - b),
        (FMul, F(a), F(b)) => F(a * b),
        (FDiv, F(a), F(b)) => F(a / b),
        (FEq, F(a), F(b)) => B(a == b),
        (FLt, F(a), F(b)) => B(a < b),
        (FGt, F(a), F(b)) => B(a > b),
        (FLe, F(a), F(b)) => B(a <= b),
        (FGe, F(a), F(b)) => B(a >= b),
        (IEq, I(a), I(b)) => B(a == b),
        (INe, I(a), I(b)) => B(a != b),
        (ILt, I(a), I(b)) => B(a < b),
        (IAdd, I(a), I(b)) => I(a.checked_add(*b)?),
        (ISub, I(a), I(b)) => I(a.checked_sub(*b)?),
        (IMul, I(a), I(b)) => I(a.checked_mul(*b)?),
        (And, B(a), B(b)) => B(*a && *b),
        (Or, B(a), B(b)) => B(*a || *b),
        (BEq, B(a), B(b)) => B(a == b),
        _ => return None,
    };
    // A NaN's bits are the hardware's: left to C.
    (!matches!(r, F(c) if c.is_nan())).then_some(r)
}

/// The variables that may change between two reads: those assigned by `Set`, except joins. A
/// join is declared in a block and assigned only at the top level of the branches of one `if`
/// later in that block, and not read before it: once the `if` has run it does not change, and
/// it reads like a definition (the results of a callee inlined with returns in branches, of a
/// `cond`, of the hoisted code of `hoist`).
pub fn mutable(body: &[Stmt]) -> HashSet<Var> {
    let mut out = assigned(body);
    let mut sets: HashMap<Var, usize> = HashMap::new();
    walk(body, &mut |s| {
        if let Stmt::Set(v, _) = s {
            *sets.entry(*v).or_default() += 1;
        }
    });
    fn block(b: &[Stmt], sets: &HashMap<Var, usize>, out: &mut HashSet<Var>) {
        for (d, s) in b.iter().enumerate() {
            for c in children(s) {
                block(c, sets, out);
            }
            let Stmt::Declare(vs) = s else {
                continue;
            };
            for v in vs {
                let Some(&n) = sets.get(v) else {
                    continue;
                };
                let reads = |t: &Stmt| stmt_operands(t).iter().any(|x| x.var() == Some(*v));
                for (e, t) in b.iter().enumerate().skip(d + 1) {
                    if let Stmt::If { cond, then, els } = t {
                        let top = |blk: &Block| {
                            blk.iter()
                                .filter(|u| matches!(u, Stmt::Set(w, _) if w == v))
                                .count()
                        };
                        // Once in each branch at most: a branch that assigns it twice
                        // (an unrolled loop's accumulator) changes it between its reads.
                        let (in_then, in_els) = (top(then), top(els));
                        if in_then <= 1 && in_els <= 1 && in_then + in_els == n {
                            let mut before = false;
                            walk(&b[d + 1..e], &mut |u| before |= reads(u));
                            if !before && cond.var() != Some(*v) {
                                out.remove(v);
                            }
                            break;
                        }
                    }
                    let mut sets_here = false;
                    walk(std::slice::from_ref(t), &mut |u| {
                        sets_here |= matches!(u, Stmt::Set(w, _) if w == v)
                    });
                    if sets_here {
                        break;
                    }
                }
            }
        }
    }
    block(body, &sets, &mut out);
    out
}

/// A declared variable assigned once, in its declaration's block (not in a branch or a loop)
/// and read only after that, becomes a definition: what a branch on a constant leaves
/// (`var x; x := 1.0`), which copy propagation and folding then see through.
fn single_assignments(body: &mut Block) {
    let mut sets: HashMap<Var, usize> = HashMap::new();
    walk(body, &mut |s| {
        if let Stmt::Set(v, _) = s {
            *sets.entry(*v).or_default() += 1;
        }
    });
    fn block(b: &mut Block, sets: &HashMap<Var, usize>) {
        for s in b.iter_mut() {
            for c in children_mut(s) {
                block(c, sets);
            }
        }
        let mut d = 0;
        while d < b.len() {
            let Stmt::Declare(vs) = &b[d] else {
                d += 1;
                continue;
            };
            let mut single = Vec::new();
            for v in vs.clone() {
                if sets.get(&v) != Some(&1) {
                    continue;
                }
                // Its one assignment at this level, and no read before it.
                let at = (d + 1..b.len()).find(|&i| matches!(&b[i], Stmt::Set(w, _) if *w == v));
                let Some(at) = at else {
                    continue;
                };
                let mut read = false;
                walk(&b[d + 1..at], &mut |t| {
                    read |= stmt_operands(t).iter().any(|x| x.var() == Some(v))
                });
                if !read {
                    single.push((v, at));
                }
            }
            for (v, at) in single {
                if let Stmt::Set(w, x) = &b[at] {
                    b[at] = Stmt::Let(vec![*w], Op::Copy(x.clone()));
                }
                if let Stmt::Declare(vs) = &mut b[d] {
                    vs.retain(|u| *u != v);
                }
            }
            if matches!(&b[d], Stmt::Declare(vs) if vs.is_empty()) {
                b.remove(d);
            } else {
                d += 1;
            }
        }
    }
    block(body, &sets);
}

/// Adds the variables a statement reads itself to `uses`.
pub(crate) fn count_uses(s: &Stmt, uses: &mut HashMap<Var, usize>) {
    for x in stmt_operands(s) {
        if let Operand::Var(v) = x {
            *uses.entry(*v).or_default() += 1;
        }
    }
}

/// Code sinking: a definition by an operation that only computes or allocates (boxing the
/// operands of an error message), whose variables are read only in one branch of an `if` later
/// in its block, moves to the start of that branch: the common path no longer computes it.
/// Nothing observable moves: such an operation neither fails, writes nor reads input.
fn sink(block: &mut Block, uses: &HashMap<Var, usize>) {
    for s in block.iter_mut() {
        for b in children_mut(s) {
            sink(b, uses);
        }
    }
    let mut j = block.len();
    while j > 0 {
        j -= 1;
        if !matches!(block[j], Stmt::If { .. }) {
            continue;
        }
        // The uses inside each branch, kept up to date as definitions move in.
        let mut inside: [HashMap<Var, usize>; 2] = [HashMap::new(), HashMap::new()];
        if let Stmt::If { then, els, .. } = &block[j] {
            walk(then, &mut |t| count_uses(t, &mut inside[0]));
            walk(els, &mut |t| count_uses(t, &mut inside[1]));
        }
        let mut i = j;
        while i > 0 {
            i -= 1;
            let Stmt::Let(vs, op) = &block[i] else {
                continue;
            };
            let movable = match op {
                Op::Rt(rt, _) => {
                    let e = rt.effects();
                    !e.fails && !e.noreturn && !e.io
                }
                op => is_pure(op),
            };
            let all_in = |m: &HashMap<Var, usize>| {
                vs.iter()
                    .all(|v| uses.get(v).copied().unwrap_or(0) == m.get(v).copied().unwrap_or(0))
            };
            let used = vs.iter().any(|v| uses.contains_key(v));
            let Some(branch) = (0..2).find(|&b| movable && used && all_in(&inside[b])) else {
                continue;
            };
            let moved = block.remove(i);
            j -= 1;
            count_uses(&moved, &mut inside[branch]);
            if let Stmt::If { then, els, .. } = &mut block[j] {
                let target = if branch == 0 { then } else { els };
                target.insert(0, moved);
            }
        }
    }
}

/// Removes the definitions of unused variables by operations without effects or that only
/// allocate, and the `build`s and `ifold`s whose results are unused and whose steps only
/// compute and allocate, until none is left.
pub fn dead_code(body: &mut Block) {
    loop {
        let mut used = HashMap::new();
        walk(body, &mut |s| count_uses(s, &mut used));
        let mut removed = false;
        flat_map(body, &mut |s| match &s {
            Stmt::Let(vs, op) if is_pure(op) && vs.iter().all(|v| !used.contains_key(v)) => {
                removed = true;
                vec![]
            }
            Stmt::Set(v, _) if !used.contains_key(v) => {
                removed = true;
                vec![]
            }
            Stmt::Declare(vs) if vs.iter().any(|v| !used.contains_key(v)) => {
                removed = true;
                let vs: Vec<Var> = vs
                    .iter()
                    .copied()
                    .filter(|v| used.contains_key(v))
                    .collect();
                if vs.is_empty() {
                    vec![]
                } else {
                    vec![Stmt::Declare(vs)]
                }
            }
            Stmt::If { then, els, .. } if then.is_empty() && els.is_empty() => {
                removed = true;
                vec![]
            }
            Stmt::Let(vs, op) if allocates_only(op) && vs.iter().all(|v| !used.contains_key(v)) => {
                removed = true;
                vec![]
            }
            Stmt::Build { array: v, body, .. } if !used.contains_key(v) && removable(body) => {
                removed = true;
                vec![]
            }
            Stmt::Ifold { accs, body, .. }
                if accs.iter().all(|v| !used.contains_key(v)) && removable(body) =>
            {
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

/// What identifies a pure operation among those computed so far: the operation, with the
/// operands of a symmetric comparison or boolean operation in one order (`feq k, r` is
/// `feq r, k`).
fn cse_key(op: &Op) -> String {
    match op {
        Op::Binary(
            b @ (BinOp::FEq | BinOp::IEq | BinOp::INe | BinOp::BEq | BinOp::And | BinOp::Or),
            x,
            y,
        ) => {
            let (x, y) = (format!("{x:?}"), format!("{y:?}"));
            let (x, y) = if x <= y { (x, y) } else { (y, x) };
            format!("Binary({b:?}, {x}, {y})")
        }
        _ => format!("{op:?}"),
    }
}

/// Paper 002's iteration rules `ifold f z 0 ~> z` and `ifold (fun a i -> a) z n ~> z` (Fig. 7e):
/// a fold of no steps, or whose steps only compute and leave every accumulator as it was, is
/// its initial values (and, if it would have run, the call site its step recorded last: an
/// error after it reports that site); a counted loop of no steps, or of an empty body, is
/// nothing.
fn trivial_fold(s: &Stmt, vars: &mut Vec<VarInfo>) -> Option<Vec<Stmt>> {
    match s {
        Stmt::Ifold {
            accs,
            init,
            count,
            body,
            next,
            ..
        } => {
            let unchanged = next.iter().zip(accs).all(|(x, a)| *x == Operand::Var(*a));
            let skippable = removable(body)
                && sets_only_its_own(body)
                && crate::passes::fuse::last_site(body).is_some();
            let none = matches!(count, Operand::I64(n) if *n <= 0);
            if !(none || (unchanged && skippable)) {
                return None;
            }
            let mut out = if none {
                vec![]
            } else {
                crate::passes::fuse::trailing_site(body, count.clone(), vars)
            };
            out.extend(
                accs.iter()
                    .zip(init)
                    .map(|(a, z)| Stmt::Let(vec![*a], Op::Copy(z.clone()))),
            );
            Some(out)
        }
        Stmt::For { count, body, .. }
            if body.is_empty() || matches!(count, Operand::I64(n) if *n <= 0) =>
        {
            Some(vec![])
        }
        _ => None,
    }
}

/// An `ifold` accumulator that every step passes on as itself is its initial value throughout
/// (paper 002's `ifold (fun a i -> a) z n ~> z`, Fig. 7e, for one accumulator of several,
/// whatever the step does): it is defined before the loop as that value, and the loop no
/// longer carries it. A reverse sweep's sensitivity array, added into in place once `peel`
/// ran its first step, is such an accumulator: its length, and the check of it, then leave
/// the loop. The definitions, to go before the loop (none if there is no such accumulator, or
/// if every accumulator is one: `trivial_fold` decides that fold).
fn invariant_accumulators(s: &mut Stmt) -> Vec<Stmt> {
    let Stmt::Ifold {
        accs, init, next, ..
    } = s
    else {
        return Vec::new();
    };
    let unchanged: Vec<bool> = next
        .iter()
        .zip(accs.iter())
        .map(|(x, a)| *x == Operand::Var(*a))
        .collect();
    if unchanged.iter().all(|u| *u) || !unchanged.iter().any(|u| *u) {
        return Vec::new();
    }
    let out = (0..accs.len())
        .filter(|&k| unchanged[k])
        .map(|k| Stmt::Let(vec![accs[k]], Op::Copy(init[k].clone())))
        .collect();
    let keep: Vec<bool> = unchanged.iter().map(|u| !u).collect();
    retain_marked(accs, &keep);
    retain_marked(init, &keep);
    retain_marked(next, &keep);
    out
}

/// Paper 002's `if e0 then e1 else e1 ~> e1` (Fig. 7f): an `if` whose branches are the same
/// code, up to the names of what they define, is that code (the condition is an operand:
/// computing it had no effect). Their call-site records must be the same too: the next
/// statement that can fail after the `if` reports the site its branch recorded last.
fn same_branches(s: &Stmt) -> Option<Vec<Stmt>> {
    let Stmt::If { then, els, .. } = s else {
        return None;
    };
    let (da, db) = (defined_in(then), defined_in(els));
    if da.len() != db.len() {
        return None;
    }
    let renamed: HashMap<Var, Var> = db.into_iter().zip(da).collect();
    let mut b = els.clone();
    map_vars(&mut b, &|v| renamed.get(&v).copied().unwrap_or(v));
    // Compared as printed, so that `0.0` and `-0.0` differ (`==` on reals has them equal).
    (format!("{then:?}") == format!("{b:?}")).then(|| then.clone())
}

/// Whether every variable a block assigns is one it declares: running it has no effect on the
/// variables around it.
pub(crate) fn sets_only_its_own(block: &[Stmt]) -> bool {
    let own: HashSet<Var> = defined_in(block).into_iter().collect();
    assigned(block).is_subset(&own)
}

/// An operation whose only effect is to allocate a new array (its slots written by nothing
/// else yet): unused, it can go.
fn allocates_only(op: &Op) -> bool {
    matches!(op, Op::NewArray { .. } | Op::ArrayOf { .. })
}

/// A block that only computes and allocates (`fuse::pure`, and the arrays of nested `build`s
/// and new arrays): if what it defines is unused, the whole can go. A `build` whose elements
/// are themselves built (a matrix, the sensitivity of an array of arrays) is such a block,
/// which `fuse::pure` refuses because copying it into its readers would copy allocations.
fn removable(block: &[Stmt]) -> bool {
    block.iter().all(|s| match s {
        Stmt::Let(_, op) => is_pure(op) || allocates_only(op),
        Stmt::Declare(_) | Stmt::Set(..) | Stmt::Site(_) => true,
        Stmt::If { .. }
        | Stmt::Ifold { .. }
        | Stmt::For { .. }
        | Stmt::Switch { .. }
        | Stmt::Build { .. } => children(s).into_iter().all(|b| removable(b)),
        _ => false,
    })
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
