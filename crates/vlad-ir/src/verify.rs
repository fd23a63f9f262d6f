//! The verifier: every variable is defined once and used in its scope, every operand has the
//! type its use needs, every call names a function of the program with the right arguments and
//! results, and the statements of explicit-stack machines appear only in machines, where every
//! variable live across a call of a member lives in the member's frame.
//!
//! `passes::optimize` runs it after each pass when checking is on (in `cargo test`, and under
//! `VLAD_VERIFY_IR=1`); a failure names the pass that broke the invariant.

use crate::ir::*;
use crate::liveness;
use crate::rt::Ret;
use std::collections::{HashMap, HashSet};

/// A verification error: the function and what is wrong.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyError {
    pub func: String,
    pub message: String,
}

impl std::fmt::Display for VerifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "in {}: {}", self.func, self.message)
    }
}

type R = Result<(), String>;

/// Verifies a whole program.
pub fn verify(p: &Program) -> Result<(), VerifyError> {
    for id in p.ids() {
        let f = p.func(id);
        verify_function(p, f).map_err(|message| VerifyError {
            func: p.func_name(id),
            message,
        })?;
    }
    for (what, f) in [("init", p.init), ("main", p.main)] {
        if let Some(f) = f {
            if f.0 as usize >= p.funcs.len() {
                return Err(VerifyError {
                    func: what.into(),
                    message: format!("no function f{}", f.0),
                });
            }
        }
    }
    Ok(())
}

struct Checker<'a> {
    p: &'a Program,
    f: &'a Function,
    /// The variables in scope (a stack of scopes).
    scopes: Vec<Vec<Var>>,
    defined: HashSet<Var>,
    /// The enclosing loops: `true` for a `Loop` (what `Continue` continues), `false` for a
    /// counted loop in between.
    loops: Vec<bool>,
    /// The member whose body is checked (machines).
    member: Option<&'a MachineMember>,
}

/// Verifies one function of `p` (its calls against the signatures of their callees in `p`).
pub(crate) fn verify_function(p: &Program, f: &Function) -> R {
    let mut c = Checker {
        p,
        f,
        scopes: vec![Vec::new()],
        defined: HashSet::new(),
        loops: Vec::new(),
        member: None,
    };
    for v in &f.params {
        c.define(*v)?;
    }
    c.block(&f.body)?;
    check_releases(f)?;
    if let FuncKind::Machine(m) = &f.kind {
        for mb in &m.members {
            if p.funcs.get(mb.func.0 as usize).is_none() {
                return Err(format!("a machine member of no function f{}", mb.func.0));
            }
        }
        liveness::check_frames(f, m)?;
    }
    Ok(())
}

/// A release (`Release`, and `ReleaseCarrying` and `Collect`, which keep values) frees or
/// moves every object allocated since its mark but those it keeps: every pointer live after it
/// must be one of its results, or *older than the mark*: defined before the mark, and not
/// assigned between the mark and the release (before the release in the rest of the mark's
/// block, or anywhere in a loop there that holds the release too). Otherwise a variable could
/// be left pointing at a freed or moved object.
fn check_releases(f: &Function) -> R {
    let mut any = false;
    walk(&f.body, &mut |s| {
        any |= matches!(
            s,
            Stmt::Let(_, Op::ReleaseCarrying { .. } | Op::Collect { .. }) | Stmt::Release(_)
        );
    });
    if !any {
        return Ok(());
    }
    let mut t = Numbering {
        f,
        next: 1,
        loops: Vec::new(),
        at: HashMap::new(),
        defined: f.params.iter().map(|v| (*v, 0)).collect(),
        sets: HashMap::new(),
        marks: HashMap::new(),
    };
    t.block(&f.body);
    let mut bad: Option<String> = None;
    let mut observe = |s: &Stmt, live: &liveness::Live| {
        let (results, mark): (&[Var], &Operand) = match s {
            Stmt::Let(rs, Op::ReleaseCarrying { mark, .. } | Op::Collect { mark, .. }) => {
                (rs, mark)
            }
            Stmt::Release(mark) => (&[], mark),
            _ => return,
        };
        if bad.is_some() {
            return;
        }
        let Some(m) = mark.var() else {
            bad = Some("a release of a mark that is not a variable".into());
            return;
        };
        let (Some(&(def, end)), Some((here, loops))) =
            (t.marks.get(&m), t.at.get(&(s as *const Stmt)))
        else {
            bad = Some(format!("a release of {}, which no mark defines", f.name(m)));
            return;
        };
        for v in live {
            if results.contains(v) || !f.ty(*v).holds_pointer() {
                continue;
            }
            let assigned = t.sets.get(v).is_some_and(|sets| {
                sets.iter().any(|(i, ls)| {
                    (def..=end).contains(i)
                        && (i < here || ls.iter().any(|l| *l > def && loops.contains(l)))
                })
            });
            let older = t.defined.get(v).is_some_and(|d| *d < def) && !assigned;
            if !older {
                bad = Some(format!(
                    "{} is live after a release to {} that does not keep it",
                    f.name(*v),
                    f.name(m)
                ));
                return;
            }
        }
    };
    liveness::Liveness::new(&mut observe).block(&f.body, &liveness::Live::new());
    bad.map_or(Ok(()), Err)
}

/// The statements of a function numbered in order (a statement before those nested in it),
/// for `check_releases`.
struct Numbering<'a> {
    f: &'a Function,
    next: usize,
    /// The numbers of the loops around the statement being numbered.
    loops: Vec<usize>,
    /// Each statement's number and the loops around it.
    at: HashMap<*const Stmt, (usize, Vec<usize>)>,
    /// Where each variable is defined (the parameters at 0).
    defined: HashMap<Var, usize>,
    /// Where each variable is assigned, with the loops around.
    sets: HashMap<Var, Vec<(usize, Vec<usize>)>>,
    /// Where each mark is taken, and the last statement of the rest of its block.
    marks: HashMap<Var, (usize, usize)>,
}

impl Numbering<'_> {
    fn block(&mut self, b: &[Stmt]) {
        let mut marks = Vec::new();
        for s in b {
            let i = self.next;
            self.next += 1;
            self.at.insert(s as *const Stmt, (i, self.loops.clone()));
            let mut defs = stmt_defs(s);
            // A machine member's parameters are defined as it starts.
            if let (Stmt::Member { member, .. }, FuncKind::Machine(m)) = (s, &self.f.kind) {
                if let Some(mb) = m.members.get(*member as usize) {
                    defs.extend(mb.params.iter().copied());
                }
            }
            for v in defs {
                self.defined.entry(v).or_insert(i);
            }
            match s {
                Stmt::Set(v, _) => self
                    .sets
                    .entry(*v)
                    .or_default()
                    .push((i, self.loops.clone())),
                Stmt::Let(vs, Op::Mark) => marks.extend(vs.iter().map(|m| (*m, i))),
                _ => {}
            }
            let looping = matches!(
                s,
                Stmt::Loop(_) | Stmt::For { .. } | Stmt::Build { .. } | Stmt::Ifold { .. }
            );
            if looping {
                self.loops.push(i);
            }
            for c in children(s) {
                self.block(c);
            }
            if looping {
                self.loops.pop();
            }
        }
        for (m, i) in marks {
            self.marks.insert(m, (i, self.next - 1));
        }
    }
}

impl<'a> Checker<'a> {
    fn var_ty(&self, v: Var) -> Result<&'a Ty, String> {
        self.f
            .vars
            .get(v.0 as usize)
            .map(|i| &i.ty)
            .ok_or_else(|| format!("variable {} does not exist", v.0))
    }

    fn show(&self, v: Var) -> String {
        self.f
            .vars
            .get(v.0 as usize)
            .map_or_else(|| format!("#{}", v.0), |i| i.name.clone())
    }

    fn define(&mut self, v: Var) -> R {
        self.var_ty(v)?;
        if !self.defined.insert(v) {
            return Err(format!("{} is defined twice", self.show(v)));
        }
        self.scopes.last_mut().expect("a scope").push(v);
        Ok(())
    }

    fn in_scope(&self, v: Var) -> bool {
        self.scopes.iter().any(|s| s.contains(&v))
    }

    fn scoped<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, String>) -> Result<T, String> {
        self.scopes.push(Vec::new());
        let r = f(self);
        self.scopes.pop();
        r
    }

    /// The type of an operand (`None` for `Null`, which fits any pointer).
    fn operand(&self, x: &Operand) -> Result<Option<Ty>, String> {
        Ok(Some(match x {
            Operand::Var(v) => {
                if !self.in_scope(*v) {
                    return Err(format!("{} is used out of its scope", self.show(*v)));
                }
                self.var_ty(*v)?.clone()
            }
            Operand::F64(_) => Ty::F64,
            Operand::Bool(_) => Ty::Bool,
            Operand::I64(_) => Ty::I64,
            Operand::Str(_) => Ty::Str,
            Operand::Null => return Ok(None),
            Operand::Global(g) => self
                .p
                .globals
                .get(g.0 as usize)
                .map(|g| g.ty.clone())
                .ok_or_else(|| format!("no global {}", g.0))?,
        }))
    }

    /// Checks that `x` has type `ty`.
    fn expect(&self, x: &Operand, ty: &Ty, what: &str) -> R {
        match self.operand(x)? {
            None if ty.is_pointer() => Ok(()),
            Some(t) if t == *ty => Ok(()),
            t => Err(format!(
                "{what}: expected {ty}, got {}",
                t.map_or("null".to_string(), |t| t.to_string())
            )),
        }
    }

    fn expect_all(&self, xs: &[Operand], tys: &[Ty], what: &str) -> R {
        if xs.len() != tys.len() {
            return Err(format!(
                "{what}: {} operands for {} types",
                xs.len(),
                tys.len()
            ));
        }
        for (i, (x, t)) in xs.iter().zip(tys).enumerate() {
            self.expect(x, t, &format!("{what}, operand {i}"))?;
        }
        Ok(())
    }

    fn vars_of(&self, vs: &[Var]) -> Result<Vec<Ty>, String> {
        vs.iter().map(|v| self.var_ty(*v).cloned()).collect()
    }

    fn callee(&self, func: FuncId) -> Result<&'a Function, String> {
        self.p
            .funcs
            .get(func.0 as usize)
            .ok_or_else(|| format!("a call of f{}, which does not exist", func.0))
    }

    fn block(&mut self, b: &[Stmt]) -> R {
        self.scoped(|c| {
            for s in b {
                c.stmt(s)?;
            }
            Ok(())
        })
    }

    fn stmt(&mut self, s: &Stmt) -> R {
        match s {
            Stmt::Let(vs, op) => {
                let tys = self.vars_of(vs)?;
                self.op(op, &tys)?;
                for v in vs {
                    self.define(*v)?;
                }
            }
            Stmt::Declare(vs) => {
                for v in vs {
                    self.define(*v)?;
                }
            }
            Stmt::Set(v, x) => {
                if !self.in_scope(*v) {
                    return Err(format!("{} is assigned out of its scope", self.show(*v)));
                }
                let ty = self.var_ty(*v)?.clone();
                self.expect(x, &ty, &format!("the assignment of {}", self.show(*v)))?;
            }
            Stmt::Site(n) => {
                if *n as usize >= self.p.sites.len() {
                    return Err(format!("site {n} does not exist"));
                }
            }
            Stmt::Store {
                array,
                index,
                slot,
                value,
            } => {
                let l = self.array_layout(array)?;
                self.expect(index, &Ty::I64, "a store's index")?;
                let t = l
                    .get(*slot as usize)
                    .ok_or_else(|| format!("a store to slot {slot} of {} slots", l.len()))?;
                self.expect(value, t, "a stored value")?;
            }
            Stmt::SetField { obj, value, .. } => {
                self.expect(obj, &Ty::Boxed, "a field's object")?;
                if let Some(Ty::Str | Ty::Mark | Ty::Union(_)) = self.operand(value)? {
                    return Err("a field of a type objects cannot hold".into());
                }
            }
            Stmt::Release(m) => self.expect(m, &Ty::Mark, "a release")?,
            Stmt::SetGlobal(g, x) => {
                let ty = self
                    .p
                    .globals
                    .get(g.0 as usize)
                    .map(|g| g.ty.clone())
                    .ok_or_else(|| format!("no global {}", g.0))?;
                self.expect(x, &ty, "a global's value")?;
            }
            Stmt::If { cond, then, els } => {
                self.expect(cond, &Ty::Bool, "a condition")?;
                self.block(then)?;
                self.block(els)?;
            }
            Stmt::Switch { on, cases, default } => {
                self.expect(on, &Ty::I64, "a switch")?;
                let mut seen = HashSet::new();
                for (vals, b) in cases {
                    for v in vals {
                        if !seen.insert(*v) {
                            return Err(format!("a switch with case {v} twice"));
                        }
                    }
                    self.block(b)?;
                }
                self.block(default)?;
            }
            Stmt::For { index, count, body } => {
                self.expect(count, &Ty::I64, "a loop count")?;
                self.counted(*index, |c| c.block(body))?;
            }
            Stmt::Loop(body) => {
                self.loops.push(true);
                let r = self.block(body);
                self.loops.pop();
                r?;
            }
            Stmt::Continue => {
                if self.loops.last() != Some(&true) {
                    return Err("`continue` outside a loop (or inside a counted loop)".into());
                }
            }
            Stmt::Return(xs) => {
                let want = self.returns()?;
                self.expect_all(xs, &want, "a return")?;
            }
            Stmt::TailCall { func, args } => {
                if self.member.is_some() {
                    return Err("a native tail call inside a machine member".into());
                }
                let g = self.callee(*func)?;
                self.expect_all(args, &self.var_types(g, &g.params)?, "a tail call")?;
                if g.results != self.f.results {
                    return Err(format!(
                        "a tail call of f{} whose results {} are not the function's {}",
                        func.0,
                        LayoutDisplay(&g.results),
                        LayoutDisplay(&self.f.results)
                    ));
                }
            }
            Stmt::Build {
                array,
                layout,
                count,
                index,
                body,
                elem,
            } => {
                self.expect(count, &Ty::I64, "a build's count")?;
                if *self.var_ty(*array)? != Ty::Array(layout.clone()) {
                    return Err(format!(
                        "the array of a build is not {}",
                        LayoutDisplay(layout)
                    ));
                }
                self.counted(*index, |c| {
                    c.scoped(|c| {
                        for s in body {
                            c.stmt(s)?;
                        }
                        c.expect_all(elem, layout, "a build's element")
                    })
                })?;
                self.define(*array)?;
            }
            Stmt::Ifold {
                accs,
                init,
                count,
                index,
                body,
                next,
            } => {
                let tys = self.vars_of(accs)?;
                self.expect_all(init, &tys, "an ifold's initial value")?;
                self.expect(count, &Ty::I64, "an ifold's count")?;
                for v in accs {
                    self.define(*v)?;
                }
                self.counted(*index, |c| {
                    c.scoped(|c| {
                        for s in body {
                            c.stmt(s)?;
                        }
                        c.expect_all(next, &tys, "an ifold's next value")
                    })
                })?;
            }
            Stmt::Member { member, body } => {
                let m = self.machine()?;
                let mb = m
                    .members
                    .get(*member as usize)
                    .ok_or_else(|| format!("no member {member}"))?;
                if self.member.is_some() {
                    return Err("a member inside a member".into());
                }
                self.member = Some(mb);
                let r = self.scoped(|c| {
                    for v in &mb.params {
                        c.define(*v)?;
                    }
                    c.block(body)
                });
                self.member = None;
                r?;
            }
            Stmt::MachineCall {
                member,
                args,
                results,
                resume,
            } => {
                let mb = self.callee_member(*member)?;
                self.expect_all(args, &self.var_types(self.f, &mb.params)?, "a machine call")?;
                if self.vars_of(results)? != *mb.results {
                    return Err("a machine call's results are not its member's".into());
                }
                let me = self.member.ok_or("a machine call outside a member")?;
                if *resume == 0 || *resume > me.resumes {
                    return Err(format!("resume point {resume} of {}", me.resumes));
                }
                for v in results {
                    self.define(*v)?;
                }
            }
            Stmt::MachineTailCall { member, args } => {
                let mb = self.callee_member(*member)?;
                self.expect_all(
                    args,
                    &self.var_types(self.f, &mb.params)?,
                    "a machine tail call",
                )?;
                let me = self.member.ok_or("a machine tail call outside a member")?;
                if mb.results != me.results {
                    return Err("a machine tail call of another result layout".into());
                }
            }
        }
        Ok(())
    }

    fn counted(&mut self, index: Var, f: impl FnOnce(&mut Self) -> R) -> R {
        if *self.var_ty(index)? != Ty::I64 {
            return Err("a loop index that is not an integer".into());
        }
        self.loops.push(false);
        let r = self.scoped(|c| {
            c.define(index)?;
            f(c)
        });
        self.loops.pop();
        r
    }

    fn var_types(&self, f: &Function, vs: &[Var]) -> Result<Vec<Ty>, String> {
        vs.iter()
            .map(|v| {
                f.vars
                    .get(v.0 as usize)
                    .map(|i| i.ty.clone())
                    .ok_or_else(|| "a parameter that does not exist".to_string())
            })
            .collect()
    }

    /// What a `Return` here returns.
    fn returns(&self) -> Result<Vec<Ty>, String> {
        Ok(match self.member {
            Some(mb) => mb.results.to_vec(),
            None => self.f.results.to_vec(),
        })
    }

    fn machine(&self) -> Result<&'a Machine, String> {
        match &self.f.kind {
            FuncKind::Machine(m) => Ok(m),
            _ => Err("a machine statement outside a machine".into()),
        }
    }

    fn callee_member(&self, member: u32) -> Result<&'a MachineMember, String> {
        self.machine()?
            .members
            .get(member as usize)
            .ok_or_else(|| format!("no member {member}"))
    }

    fn array_layout(&self, a: &Operand) -> Result<Layout, String> {
        match self.operand(a)? {
            Some(Ty::Array(l)) => Ok(l),
            t => Err(format!(
                "an array operand of type {}",
                t.map_or("null".into(), |t| t.to_string())
            )),
        }
    }

    /// Checks an operation whose results go to variables of types `out`.
    fn op(&self, op: &Op, out: &[Ty]) -> R {
        let one = |t: Ty| -> R {
            if out == [t.clone()] {
                Ok(())
            } else {
                Err(format!(
                    "an operation giving {t} defines {}",
                    LayoutDisplay(out)
                ))
            }
        };
        match op {
            Op::Copy(x) => {
                let [t] = out else {
                    return Err("a copy defines one variable".into());
                };
                self.expect(x, t, "a copy")
            }
            Op::Unary(u, x) => {
                let (a, r) = u.types();
                self.expect(x, &a, &format!("{u:?}"))?;
                one(r)
            }
            Op::Binary(b, x, y) => {
                let (a, r) = b.types();
                self.expect(x, &a, &format!("{b:?}"))?;
                self.expect(y, &a, &format!("{b:?}"))?;
                one(r)
            }
            Op::Call { func, args, guard } => {
                let g = self.callee(*func)?;
                self.expect_all(args, &self.var_types(g, &g.params)?, "a call")?;
                if *g.results != *out {
                    return Err(format!(
                        "a call of f{} giving {} defines {}",
                        func.0,
                        LayoutDisplay(&g.results),
                        LayoutDisplay(out)
                    ));
                }
                if let Some(e) = guard {
                    let h = self.callee(*e)?;
                    if self.var_types(h, &h.params)? != self.var_types(g, &g.params)?
                        || h.results != g.results
                    {
                        return Err(format!(
                            "the guard f{} of a call of f{} has another signature",
                            e.0, func.0
                        ));
                    }
                }
                Ok(())
            }
            Op::Rt(rt, args) => {
                let (params, ret) = rt.signature();
                if args.len() != params.len() {
                    return Err(format!(
                        "{} takes {} arguments, given {}",
                        rt.c_name(),
                        params.len(),
                        args.len()
                    ));
                }
                for (i, (x, p)) in args.iter().zip(params).enumerate() {
                    let ok = match self.operand(x)? {
                        None => matches!(p, crate::rt::P::Ptr),
                        Some(t) => p.accepts(&t),
                    };
                    if !ok {
                        return Err(format!("argument {i} of {} is not a {p:?}", rt.c_name()));
                    }
                }
                match (&ret, out) {
                    (Ret::None, []) => Ok(()),
                    (r, [t]) if r.accepts(t) => Ok(()),
                    // A result may be ignored.
                    (_, []) => Ok(()),
                    _ => Err(format!(
                        "{} gives {ret:?}, defines {}",
                        rt.c_name(),
                        LayoutDisplay(out)
                    )),
                }
            }
            Op::NewArray { layout, count } => {
                self.expect(count, &Ty::I64, "a new array's count")?;
                if layout
                    .iter()
                    .any(|t| matches!(t, Ty::Union(_) | Ty::Mark | Ty::Str))
                {
                    return Err(format!(
                        "an array of {}: slots hold reals, booleans, integers and pointers",
                        LayoutDisplay(layout)
                    ));
                }
                one(Ty::Array(layout.clone()))
            }
            Op::ArrayOf { layout, slots } => {
                if layout.is_empty() || slots.len() % layout.len() != 0 {
                    return Err("an array literal whose slots are not whole elements".into());
                }
                for (i, x) in slots.iter().enumerate() {
                    let t = &layout[i % layout.len()];
                    let ok = matches!(
                        (x, t),
                        (Operand::F64(_), Ty::F64)
                            | (Operand::Bool(_), Ty::Bool)
                            | (Operand::I64(_), Ty::I64)
                    );
                    if !ok {
                        return Err(format!(
                            "slot {i} of an array literal of {} is not a constant of its type",
                            LayoutDisplay(layout)
                        ));
                    }
                }
                one(Ty::Array(layout.clone()))
            }
            Op::Load { array, index, slot } => {
                let l = self.array_layout(array)?;
                self.expect(index, &Ty::I64, "a load's index")?;
                let t = l
                    .get(*slot as usize)
                    .ok_or_else(|| format!("a load of slot {slot} of {} slots", l.len()))?;
                one(t.clone())
            }
            Op::Length(a) => {
                self.array_layout(a)?;
                one(Ty::I64)
            }
            Op::Field { obj, ty, .. } => {
                self.expect(obj, &Ty::Boxed, "a field's object")?;
                one(ty.clone())
            }
            Op::IsKind(x, _) => {
                self.expect(x, &Ty::Boxed, "a kind test")?;
                one(Ty::Bool)
            }
            Op::Cast(x, ty) => {
                let from = self.operand(x)?;
                if !ty.is_pointer() || from.is_some_and(|t| !t.is_pointer()) {
                    return Err("a cast between types that are not pointers".into());
                }
                one(ty.clone())
            }
            Op::CodeOf(x) => {
                self.expect(x, &Ty::Boxed, "a dispatch")?;
                one(Ty::I64)
            }
            Op::Mark => one(Ty::Mark),
            Op::ReleaseCarrying { mark, arrays } => {
                self.expect(mark, &Ty::Mark, "a release")?;
                if arrays.len() != out.len() {
                    return Err("a release carrying arrays defines one copy of each".into());
                }
                for (a, t) in arrays.iter().zip(out) {
                    let ty = self.operand(a)?.ok_or("a null array carried")?;
                    if !ty.is_pointer_free_array() || ty != *t {
                        return Err(format!("a release carrying {ty}"));
                    }
                }
                Ok(())
            }
            Op::Collect {
                mark,
                budget,
                values,
            } => {
                self.expect(mark, &Ty::Mark, "a collection")?;
                self.expect(budget, &Ty::I64, "a collection's budget")?;
                if out.len() != values.len() + 1 || out.last() != Some(&Ty::I64) {
                    return Err(
                        "a collection defines each value it keeps, then the next budget".into(),
                    );
                }
                for (x, t) in values.iter().zip(out) {
                    let ty = self.operand(x)?.ok_or("a collection keeping null")?;
                    if !ty.is_pointer() || ty != *t {
                        return Err(format!("a collection keeping {ty} as {t}"));
                    }
                }
                Ok(())
            }
            Op::MakeUnion {
                ty,
                variant,
                fields,
            } => {
                let Ty::Union(vs) = ty else {
                    return Err("a union of a type that is not one".into());
                };
                let l = vs
                    .get(*variant as usize)
                    .ok_or_else(|| format!("no variant {variant}"))?;
                self.expect_all(fields, l, "a union's fields")?;
                one(ty.clone())
            }
            Op::UnionTag(x) => {
                match self.operand(x)? {
                    Some(Ty::Union(_)) => {}
                    _ => return Err("the tag of a value that is not a union".into()),
                }
                one(Ty::I64)
            }
            Op::UnionField {
                value,
                variant,
                index,
            } => {
                let Some(Ty::Union(vs)) = self.operand(value)? else {
                    return Err("a field of a value that is not a union".into());
                };
                let t = vs
                    .get(*variant as usize)
                    .and_then(|l| l.get(*index as usize))
                    .ok_or_else(|| format!("no field {index} of variant {variant}"))?;
                one(t.clone())
            }
        }
    }
}
