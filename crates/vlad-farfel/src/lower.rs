//! Farfel to Core.
//!
//! The file becomes one closed Core expression: a `letrec` of the top-level subprograms (and of
//! the few helpers written in VLAD, `helpers.rs`) around the main program.
//!
//! - **Subprograms** are procedure values `(cons code env)`. `code` takes `(cons env args)`,
//!   `args` the list of actual argument values, and returns `(cons result (cons env' args'))`:
//!   the function's result (`()` for a subroutine), the environment and the arguments as they
//!   are at the RETURN. `env` holds the current values of the mutable variables of enclosing
//!   subprograms the subprogram uses (`Sema::env`); top-level subprograms have `()`. A nested
//!   subprogram's `code` is a closure made once at its parent's entry, so it captures the
//!   parent's immutable variables as they are. This is closure conversion with the captured
//!   variables passed in and out, the pure reading of paper 000 §3's extra by-reference
//!   arguments.
//! - **Arguments** are copied in and copied out: after a call, each variable or array element
//!   passed where the callee may change its dummy gets the returned value, and a nested
//!   subprogram passed as an argument gives its environment back. Without aliasing (which
//!   `sema` rejects) this is Fortran's by-reference passing.
//! - **Variables** are SSA values. Each body (a subprogram's, or an ADF/ADR block's) is split
//!   into basic blocks; a block entered from two places (a loop head, the statement after an IF,
//!   a GOTO target) is a local function whose parameters are the body's mutable variables, and
//!   a jump is a tail call. Other blocks are inlined where they are entered.
//! - **Arrays** are VLAD arrays (flattened, column-major); a store builds the updated array.
//! - **An ADF block** is a function from the values of the variables it may read (and its
//!   independent variables) to the values of those it may change (and its dependent ones):
//!   `Sema::block_in`, `Sema::block_out`. It is applied to those values through `j*` with the opening
//!   assignments' tangents (zero elsewhere); the primal results replace the variables and the
//!   closing assignments read the tangents: paper 000 §3's correspondence with the forward J
//!   operator. **An ADR block** goes through `*j`: the primal results replace the variables, the
//!   opening assignments' cotangents are evaluated then (after the forward phase, as the paper
//!   says) and fed to the backpropagator, and the closing assignments read the cotangents of the
//!   block's inputs.

use crate::ast::*;
use crate::helpers::{Helper, Helpers};
use crate::sema::{
    Arg, Bound, CallSite, Callee, Const, Intr, Res, Role, Sema, Shape, UnitId, VarId,
};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use vlad_core::{Arena, Datum, Expr as CExpr, ExprId, Pattern, Prim, Span, Tags, Var};
use vlad_syntax::Diagnostic;

type R<T> = Result<T, Diagnostic>;

fn internal<T>(span: Span, what: &str) -> R<T> {
    Err(Diagnostic::new(
        span,
        format!("internal error in the Farfel lowering: {what}"),
    ))
}

/// A slot of the lowering's state: a Fortran variable, or a value an ADF/ADR block or a PRINT
/// is building (threaded through implied-DO loops like a variable).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    V(VarId),
    /// The tangent or cotangent of a variable, in an ADF/ADR statement.
    Tan(VarId),
    /// The items of a PRINT record, reversed.
    Acc,
}

type State = BTreeMap<Slot, ExprId>;

/// Let-bindings in order, wrapped around a tail expression at the end.
#[derive(Default)]
struct Seq {
    binds: Vec<(Rc<Pattern>, ExprId, Span)>,
}

/// How a body ends.
#[derive(Clone)]
enum Exit {
    Unit(UnitId),
    Main,
    Block(Vec<VarId>),
}

pub struct Lowering<'s, 'a> {
    sema: &'s Sema<'a>,
    pub arena: &'s mut Arena,
    helpers: Helpers,
    code: HashMap<UnitId, Var>,
    /// Values of immutable variables.
    imm: HashMap<VarId, ExprId>,
    /// Each array's lower bounds and extents (the last may be unknown: `*`).
    extents: HashMap<VarId, Vec<(ExprId, Option<ExprId>)>>,
    /// The unit being lowered.
    unit: UnitId,
}

/// Lowers an analysed file to one closed Core expression.
pub fn lower(sema: &Sema<'_>, arena: &mut Arena) -> R<ExprId> {
    let mut l = Lowering {
        sema,
        helpers: Helpers::new(arena),
        arena,
        code: HashMap::new(),
        imm: HashMap::new(),
        extents: HashMap::new(),
        unit: sema.main,
    };
    for u in 0..sema.units.len() {
        let v = l.arena.fresh_var(&sema.units[u].path);
        l.code.insert(u, v);
    }
    let mut bindings = Vec::new();
    let globals: Vec<UnitId> = sema.global_units().collect();
    for g in globals {
        let lam = l.unit_code(g)?;
        bindings.push((l.code[&g], lam));
    }
    let main = l.main_body()?;
    let mut all = l.helpers.bindings(l.arena)?;
    all.extend(bindings);
    if all.is_empty() {
        return Ok(main);
    }
    Ok(l.arena.mk(CExpr::Letrec(all.into(), main)))
}

impl<'s, 'a> Lowering<'s, 'a> {
    // ---------------------------------------------------------------------------------------
    // Core construction.

    fn mk(&mut self, e: CExpr) -> ExprId {
        self.arena.mk(e)
    }

    fn var(&mut self, v: Var) -> ExprId {
        self.mk(CExpr::Var(v))
    }

    fn num(&mut self, x: f64) -> ExprId {
        self.mk(CExpr::Const(Datum::Real(x), Tags::EMPTY))
    }

    fn boolean(&mut self, b: bool) -> ExprId {
        self.mk(CExpr::Const(Datum::Bool(b), Tags::EMPTY))
    }

    fn nil(&mut self) -> ExprId {
        self.mk(CExpr::Const(Datum::Nil, Tags::EMPTY))
    }

    fn prim(&mut self, p: Prim) -> ExprId {
        self.mk(CExpr::Prim(p, Tags::EMPTY))
    }

    fn cons(&mut self, a: ExprId, d: ExprId) -> ExprId {
        self.mk(CExpr::Cons(Tags::EMPTY, a, d))
    }

    fn list(&mut self, items: &[ExprId]) -> ExprId {
        let mut acc = self.nil();
        for &x in items.iter().rev() {
            acc = self.cons(x, acc);
        }
        acc
    }

    fn app(&mut self, f: ExprId, arg: ExprId, span: Span) -> ExprId {
        self.mk(CExpr::App(f, arg, span))
    }

    /// A primitive applied to arguments in the calling convention (one, or nested pairs).
    fn call_prim(&mut self, p: Prim, args: &[ExprId], span: Span) -> ExprId {
        let f = self.prim(p);
        let arg = match args {
            [] => self.nil(),
            [a] => *a,
            _ => {
                let mut acc = *args.last().expect("nonempty");
                for &a in args[..args.len() - 1].iter().rev() {
                    acc = self.cons(a, acc);
                }
                acc
            }
        };
        self.app(f, arg, span)
    }

    fn helper(&mut self, h: Helper, args: &[ExprId], span: Span) -> ExprId {
        let v = self.helpers.use_(h);
        let f = self.var(v);
        let arg = match args {
            [a] => *a,
            _ => {
                let mut acc = *args.last().expect("nonempty");
                for &a in args[..args.len() - 1].iter().rev() {
                    acc = self.cons(a, acc);
                }
                acc
            }
        };
        self.app(f, arg, span)
    }

    fn iff(&mut self, c: ExprId, a: ExprId, b: ExprId) -> ExprId {
        self.mk(CExpr::If(c, a, b))
    }

    fn lambda(&mut self, p: Pattern, body: ExprId, span: Span) -> ExprId {
        self.mk(CExpr::Lambda(Rc::new(p), body, span))
    }

    fn pvar(v: Var) -> Pattern {
        Pattern::Var(v)
    }

    fn plist(items: Vec<Pattern>) -> Pattern {
        let mut acc = Pattern::Const(Datum::Nil, Tags::EMPTY);
        for p in items.into_iter().rev() {
            acc = Pattern::Cons(Tags::EMPTY, Rc::new(p), Rc::new(acc));
        }
        acc
    }

    fn pcons(a: Pattern, d: Pattern) -> Pattern {
        Pattern::Cons(Tags::EMPTY, Rc::new(a), Rc::new(d))
    }

    fn fresh(&mut self, name: &str) -> Var {
        self.arena.fresh_var(name)
    }

    /// Binds `value` to a fresh variable (unless it is already a variable or a constant).
    fn bind(&mut self, seq: &mut Seq, name: &str, value: ExprId, span: Span) -> ExprId {
        if matches!(
            self.arena.get(value),
            CExpr::Var(_) | CExpr::Const(..) | CExpr::Prim(..)
        ) {
            return value;
        }
        let v = self.fresh(name);
        seq.binds.push((Rc::new(Pattern::Var(v)), value, span));
        self.var(v)
    }

    /// Binds `value` to a pattern of fresh variables named `names`: their values.
    fn bind_list(
        &mut self,
        seq: &mut Seq,
        names: &[String],
        value: ExprId,
        span: Span,
    ) -> Vec<ExprId> {
        let vars: Vec<Var> = names.iter().map(|n| self.fresh(n)).collect();
        let pat = Self::plist(vars.iter().map(|v| Self::pvar(*v)).collect());
        seq.binds.push((Rc::new(pat), value, span));
        vars.into_iter().map(|v| self.var(v)).collect()
    }

    fn wrap(&mut self, seq: Seq, tail: ExprId) -> ExprId {
        let mut acc = tail;
        for (p, e, span) in seq.binds.into_iter().rev() {
            acc = self.mk(CExpr::Let(p, e, acc, span));
        }
        acc
    }

    // ---------------------------------------------------------------------------------------
    // Variables.

    fn name(&self, v: VarId) -> String {
        self.sema.vars[v].name.clone()
    }

    fn read(&self, cur: &State, v: VarId, span: Span) -> R<ExprId> {
        if let Some(e) = cur.get(&Slot::V(v)) {
            return Ok(*e);
        }
        if let Some(e) = self.imm.get(&v) {
            return Ok(*e);
        }
        internal(
            span,
            &format!("variable {} is not available here", self.sema.vars[v].name),
        )
    }

    /// Assigns a variable (which must be state).
    fn set(
        &mut self,
        seq: &mut Seq,
        cur: &mut State,
        v: VarId,
        value: ExprId,
        span: Span,
    ) -> R<()> {
        if !cur.contains_key(&Slot::V(v)) {
            return internal(
                span,
                &format!(
                    "variable {} is assigned but not threaded",
                    self.sema.vars[v].name
                ),
            );
        }
        let name = self.name(v);
        let e = self.bind(seq, &name, value, span);
        cur.insert(Slot::V(v), e);
        Ok(())
    }

    fn zero_of(&mut self, ty: Ty) -> ExprId {
        if ty == Ty::Logical {
            self.boolean(false)
        } else {
            self.num(0.0)
        }
    }

    /// The initial value of a local variable: zero, or an array of zeros.
    fn initial(&mut self, seq: &mut Seq, v: VarId) -> R<ExprId> {
        let info = &self.sema.vars[v];
        let (ty, span, is_array) = (info.ty, info.span, info.is_array());
        let z = self.zero_of(ty);
        if !is_array {
            return Ok(z);
        }
        let Some(ext) = self.extents.get(&v).cloned() else {
            return internal(span, "array without extents");
        };
        let mut size = self.num(1.0);
        for (_, e) in ext {
            let Some(e) = e else {
                return internal(span, "local array of assumed size");
            };
            size = self.call_prim(Prim::Mul, &[size, e], span);
        }
        let k = self.fresh("k");
        let f = self.lambda(Pattern::Var(k), z, span);
        let b = self.call_prim(Prim::Build, &[size, f], span);
        let name = self.name(v);
        Ok(self.bind(seq, &name, b, span))
    }

    /// Lower bounds and extents of the arrays a unit owns, evaluated on entry.
    fn bind_extents(&mut self, seq: &mut Seq, cur: &mut State, u: UnitId) -> R<()> {
        for &v in &self.sema.units[u].frame {
            let Some(dims) = self.sema.vars[v].dims.clone() else {
                continue;
            };
            let mut out = Vec::new();
            for d in dims {
                let lo = self.bound(seq, cur, &d.lo)?;
                let ext = match &d.hi {
                    None => None,
                    Some(hi) => {
                        let hi = self.bound(seq, cur, hi)?;
                        let span = self.sema.vars[v].span;
                        let one = self.num(1.0);
                        let diff = self.call_prim(Prim::Sub, &[hi, lo], span);
                        let e = self.call_prim(Prim::Add, &[diff, one], span);
                        Some(self.bind(seq, "extent", e, span))
                    }
                };
                out.push((lo, ext));
            }
            self.extents.insert(v, out);
        }
        Ok(())
    }

    fn bound(&mut self, seq: &mut Seq, cur: &mut State, b: &Bound) -> R<ExprId> {
        match b {
            Bound::Const(c) => Ok(self.num(*c)),
            Bound::Expr(e) => {
                let (x, _) = self.expr(e, seq, cur)?;
                Ok(self.bind(seq, "bound", x, e.span))
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // Units.

    /// The code of unit `u`: `(lambda (cons env args) body)`.
    fn unit_code(&mut self, u: UnitId) -> R<ExprId> {
        let saved = self.unit;
        self.unit = u;
        let info = &self.sema.units[u];
        let ast = info.ast;
        let mut seq = Seq::default();
        let mut cur = State::new();
        // Parameters: the environment and the dummies, on entry.
        let env_vars: Vec<VarId> = info.env.clone();
        let dummies: Vec<VarId> = info.dummies.clone();
        let env_entry: Vec<Var> = env_vars
            .iter()
            .map(|&w| self.fresh(&self.name(w)))
            .collect();
        let arg_entry: Vec<Var> = dummies.iter().map(|&d| self.fresh(&self.name(d))).collect();
        let env_pat = if info.parent.is_some() {
            Self::plist(env_entry.iter().map(|v| Self::pvar(*v)).collect())
        } else {
            let ignored = self.fresh("env");
            Self::pvar(ignored)
        };
        let args_pat = Self::plist(arg_entry.iter().map(|v| Self::pvar(*v)).collect());
        for (&w, &e) in env_vars.iter().zip(&env_entry) {
            let x = self.var(e);
            cur.insert(Slot::V(w), x);
        }
        for (&d, &e) in dummies.iter().zip(&arg_entry) {
            let x = self.var(e);
            if self.sema.mutable(d) {
                cur.insert(Slot::V(d), x);
            } else {
                self.imm.insert(d, x);
            }
        }
        let body = self.unit_body(u, &mut seq, cur)?;
        let body = self.wrap(seq, body);
        let pat = Self::pcons(env_pat, args_pat);
        let lam = self.lambda(pat, body, ast.span);
        self.unit = saved;
        Ok(lam)
    }

    /// A unit's body after its parameters are bound: locals, nested codes, statements.
    fn unit_body(&mut self, u: UnitId, seq: &mut Seq, mut cur: State) -> R<ExprId> {
        self.bind_extents(seq, &mut cur, u)?;
        let frame = self.sema.units[u].frame.clone();
        for v in frame {
            let info = &self.sema.vars[v];
            if matches!(info.role, Role::Dummy(_)) || info.body.is_some() {
                continue;
            }
            let value = self.initial(seq, v)?;
            if self.sema.mutable(v) {
                cur.insert(Slot::V(v), value);
            } else {
                self.imm.insert(v, value);
            }
        }
        // Nested subprograms: their codes, made here so that they capture the immutable
        // variables of this unit and of those around it.
        let nested = self.sema.nested_units(u);
        let mut codes = Vec::new();
        for n in nested {
            let lam = self.unit_code(n)?;
            codes.push((self.code[&n], lam));
        }
        let state = self.sema.unit_state(u);
        let exit = if u == self.sema.main {
            Exit::Main
        } else {
            Exit::Unit(u)
        };
        let ast = self.sema.units[u].ast;
        let body = self.body(&ast.body, ast.end_label.map(|l| l.0), &state, cur, exit)?;
        if codes.is_empty() {
            return Ok(body);
        }
        Ok(self.mk(CExpr::Letrec(codes.into(), body)))
    }

    fn main_body(&mut self) -> R<ExprId> {
        let u = self.sema.main;
        self.unit = u;
        let mut seq = Seq::default();
        let body = self.unit_body(u, &mut seq, State::new())?;
        Ok(self.wrap(seq, body))
    }

    fn exit_value(&mut self, exit: &Exit, cur: &State, span: Span) -> R<ExprId> {
        match exit {
            Exit::Main => Ok(self.nil()),
            Exit::Block(vars) => {
                let mut vals = Vec::new();
                for &v in vars {
                    let x = self.read(cur, v, span)?;
                    vals.push(if self.sema.vars[v].is_proc() {
                        // A procedure's code does not change: only its environment comes back.
                        let c = self.fresh("code");
                        let e = self.fresh("env");
                        let pat = Self::pcons(Self::pvar(c), Self::pvar(e));
                        let ev = self.var(e);
                        self.mk(CExpr::Let(Rc::new(pat), x, ev, span))
                    } else {
                        x
                    });
                }
                Ok(self.list(&vals))
            }
            Exit::Unit(u) => {
                let info = &self.sema.units[*u];
                let result = match info.result {
                    Some(r) => self.read(cur, r, span)?,
                    None => self.nil(),
                };
                // Only what may have changed goes back (`Sema::conventions`).
                let conv = self.sema.conventions[*u].clone();
                let env: Vec<VarId> = if conv.env {
                    info.env.clone()
                } else {
                    Vec::new()
                };
                let dummies: Vec<VarId> = conv.args.iter().map(|&i| info.dummies[i]).collect();
                let envv = env
                    .iter()
                    .map(|&w| self.read(cur, w, span))
                    .collect::<R<Vec<_>>>()?;
                let argv = dummies
                    .iter()
                    .map(|&d| self.read(cur, d, span))
                    .collect::<R<Vec<_>>>()?;
                let e = self.list(&envv);
                let a = self.list(&argv);
                let rest = self.cons(e, a);
                Ok(self.cons(result, rest))
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // Bodies: control flow.

    /// A body's statements as Core, from the state `cur` (whose variables are `state`).
    fn body(
        &mut self,
        stmts: &[Stmt],
        end_label: Option<u32>,
        state: &[VarId],
        cur: State,
        exit: Exit,
    ) -> R<ExprId> {
        let cfg = Cfg::build(stmts, end_label)?;
        let n = cfg.blocks.len();
        // Reachability and predecessors (the entry counts one more).
        let mut preds = vec![0usize; n];
        preds[0] = 1;
        let mut reach = vec![false; n];
        let mut todo = vec![0];
        reach[0] = true;
        while let Some(b) = todo.pop() {
            for s in cfg.blocks[b].term.successors() {
                preds[s] += 1;
                if !reach[s] {
                    reach[s] = true;
                    todo.push(s);
                }
            }
        }
        let mut fns: HashMap<usize, Var> = HashMap::new();
        for b in 0..n {
            if reach[b] && preds[b] >= 2 {
                let v = self.fresh(&format!("block{b}"));
                fns.insert(b, v);
            }
        }
        let ctx = BodyCx {
            cfg: &cfg,
            fns: &fns,
            state,
            exit,
        };
        let mut bindings = Vec::new();
        let mut order: Vec<usize> = fns.keys().copied().collect();
        order.sort();
        for b in order {
            let params: Vec<Var> = state.iter().map(|&v| self.fresh(&self.name(v))).collect();
            let mut entry = State::new();
            for (&v, &p) in state.iter().zip(&params) {
                let x = self.var(p);
                entry.insert(Slot::V(v), x);
            }
            let body = self.emit(&ctx, b, entry)?;
            let pat = Self::plist(params.iter().map(|p| Self::pvar(*p)).collect());
            let lam = self.lambda(pat, body, Span::NONE);
            bindings.push((fns[&b], lam));
        }
        let start = self.jump(&ctx, 0, cur)?;
        if bindings.is_empty() {
            return Ok(start);
        }
        Ok(self.mk(CExpr::Letrec(bindings.into(), start)))
    }

    fn jump(&mut self, cx: &BodyCx, b: usize, cur: State) -> R<ExprId> {
        match cx.fns.get(&b) {
            Some(f) => {
                let f = *f;
                let vals = cx
                    .state
                    .iter()
                    .map(|&v| self.read(&cur, v, Span::NONE))
                    .collect::<R<Vec<_>>>()?;
                let fv = self.var(f);
                let arg = self.list(&vals);
                Ok(self.app(fv, arg, Span::NONE))
            }
            None => self.emit(cx, b, cur),
        }
    }

    fn emit(&mut self, cx: &BodyCx, b: usize, mut cur: State) -> R<ExprId> {
        let block = &cx.cfg.blocks[b];
        let mut seq = Seq::default();
        for op in &block.ops {
            self.op(op, &mut seq, &mut cur)?;
        }
        let tail = match &block.term {
            Term::Goto(t) => self.jump(cx, *t, cur)?,
            Term::Cond(c, t, f) => {
                let (cv, _) = self.expr(c, &mut seq, &mut cur)?;
                let a = self.jump(cx, *t, cur.clone())?;
                let b = self.jump(cx, *f, cur)?;
                self.iff(cv, a, b)
            }
            Term::DoTest(s, body, exit) => {
                let Some(&(cnt, _)) = self.sema.do_vars.get(&s.id) else {
                    return internal(s.span, "DO without its trip count");
                };
                let c = self.read(&cur, cnt, s.span)?;
                let zero = self.num(0.0);
                let test = self.call_prim(Prim::Gt, &[c, zero], s.span);
                let a = self.jump(cx, *body, cur.clone())?;
                let b = self.jump(cx, *exit, cur)?;
                self.iff(test, a, b)
            }
            Term::Exit(span) => self.exit_value(&cx.exit, &cur, *span)?,
            Term::Open | Term::Label(..) => return internal(Span::NONE, "unresolved jump"),
        };
        Ok(self.wrap(seq, tail))
    }

    fn op(&mut self, op: &Op, seq: &mut Seq, cur: &mut State) -> R<()> {
        match op {
            Op::Stmt(s) => self.simple(s, seq, cur),
            Op::DoInit(s) => {
                let StmtKind::Do {
                    var,
                    start,
                    end,
                    step,
                    ..
                } = &s.kind
                else {
                    return internal(s.span, "DO");
                };
                let (cnt, stp) = self.sema.do_vars[&s.id];
                self.loop_init(var, start, end, step.as_ref(), cnt, stp, seq, cur, s.span)
            }
            Op::DoStep(s) => {
                let StmtKind::Do { var, step, .. } = &s.kind else {
                    return internal(s.span, "DO");
                };
                let (cnt, stp) = self.sema.do_vars[&s.id];
                let v = self.ref_var(var)?;
                let i = self.read(cur, v, s.span)?;
                let st = self.step_value(step.as_ref(), stp, cur, s.span)?;
                let next = self.call_prim(Prim::Add, &[i, st], s.span);
                self.set(seq, cur, v, next, s.span)?;
                let c = self.read(cur, cnt, s.span)?;
                let one = self.num(1.0);
                let dec = self.call_prim(Prim::Sub, &[c, one], s.span);
                self.set(seq, cur, cnt, dec, s.span)
            }
        }
    }

    fn ref_var(&self, r: &Ref) -> R<VarId> {
        match self.sema.res.get(&r.id) {
            Some(Res::Var(v)) | Some(Res::Elem(v)) => Ok(*v),
            _ => internal(r.span, "unresolved reference"),
        }
    }

    fn step_value(
        &mut self,
        step: Option<&Expr>,
        stp: Option<VarId>,
        cur: &State,
        span: Span,
    ) -> R<ExprId> {
        if let Some(s) = stp {
            return self.read(cur, s, span);
        }
        Ok(match step {
            None => self.num(1.0),
            Some(e) => match self.sema.const_value(self.unit, e) {
                Some(Const::Num(c, _)) => self.num(c),
                _ => return internal(e.span, "non-constant step without a variable"),
            },
        })
    }

    /// A DO loop's start: the variable's first value and the trip count (and the step, if
    /// it is not constant), Fortran 77's iteration count `MAX(INT((end - start + step) /
    /// step), 0)` computed once.
    #[allow(clippy::too_many_arguments)]
    fn loop_init(
        &mut self,
        var: &Ref,
        start: &Expr,
        end: &Expr,
        step: Option<&Expr>,
        cnt: VarId,
        stp: Option<VarId>,
        seq: &mut Seq,
        cur: &mut State,
        span: Span,
    ) -> R<()> {
        let v = self.ref_var(var)?;
        let ty = self.sema.vars[v].ty;
        let (s, ts) = self.expr(start, seq, cur)?;
        let s = self.convert(s, ts, ty, start.span);
        let s = self.bind(seq, "start", s, start.span);
        let (e, te) = self.expr(end, seq, cur)?;
        let e = self.convert(e, te, ty, end.span);
        let e = self.bind(seq, "end", e, end.span);
        let step_const = match step {
            None => Some(1.0),
            Some(x) => match self.sema.const_value(self.unit, x) {
                Some(Const::Num(c, _)) if stp.is_none() => {
                    Some(if ty == Ty::Int { c.trunc() } else { c })
                }
                _ => None,
            },
        };
        let st = match (step_const, step) {
            (Some(c), _) => self.num(c),
            (None, Some(x)) => {
                let (sv, tsv) = self.expr(x, seq, cur)?;
                let sv = self.convert(sv, tsv, ty, x.span);
                let Some(sv_var) = stp else {
                    return internal(x.span, "step variable");
                };
                self.set(seq, cur, sv_var, sv, x.span)?;
                self.read(cur, sv_var, x.span)?
            }
            (None, None) => return internal(span, "step"),
        };
        self.set(seq, cur, v, s, span)?;
        // The trip count.
        let trips = match step_const {
            Some(c) if ty == Ty::Int && (c == 1.0 || c == -1.0) => {
                let one = self.num(1.0);
                let d = if c == 1.0 {
                    self.call_prim(Prim::Sub, &[e, s], span)
                } else {
                    self.call_prim(Prim::Sub, &[s, e], span)
                };
                self.call_prim(Prim::Add, &[d, one], span)
            }
            _ => {
                let d = self.call_prim(Prim::Sub, &[e, s], span);
                let d = self.call_prim(Prim::Add, &[d, st], span);
                let q = self.call_prim(Prim::Div, &[d, st], span);
                self.helper(Helper::Trunc, &[q], span)
            }
        };
        let trips = self.bind(seq, "trips", trips, span);
        let zero = self.num(0.0);
        let pos = self.call_prim(Prim::Gt, &[trips, zero], span);
        let t = self.iff(pos, trips, zero);
        self.set(seq, cur, cnt, t, span)
    }

    // ---------------------------------------------------------------------------------------
    // Simple statements.

    fn simple(&mut self, s: &Stmt, seq: &mut Seq, cur: &mut State) -> R<()> {
        match &s.kind {
            StmtKind::Assign(r, e) => {
                let target = self.place(r, seq, cur)?;
                let (x, t) = self.expr(e, seq, cur)?;
                let v = self.ref_var(r)?;
                let x = self.convert(x, t, self.sema.vars[v].ty, e.span);
                self.store(target, x, seq, cur, s.span)
            }
            StmtKind::Call(..) => {
                let Some(site) = self.sema.sites.get(&s.id) else {
                    return internal(s.span, "CALL without its site");
                };
                let StmtKind::Call(_, _, args) = &s.kind else {
                    unreachable!()
                };
                self.call(site, args, seq, cur)?;
                Ok(())
            }
            StmtKind::Read(items) => {
                for it in items {
                    self.read_item(it, seq, cur)?;
                }
                Ok(())
            }
            StmtKind::Print(items) => self.print(items, seq, cur, s.span),
            StmtKind::Ad {
                reverse,
                opening,
                body,
                closing,
                ..
            } => self.ad(s, *reverse, opening, body, closing, seq, cur),
            _ => internal(s.span, "a control statement as a simple one"),
        }
    }

    /// Where a reference stores: a variable, or an array element at an evaluated offset.
    fn place(&mut self, r: &Ref, seq: &mut Seq, cur: &mut State) -> R<Place> {
        match self.sema.res.get(&r.id) {
            Some(Res::Var(v)) => Ok(Place::Var(*v)),
            Some(Res::Elem(v)) => {
                let v = *v;
                let Some(subs) = &r.subs else {
                    return internal(r.span, "element without subscripts");
                };
                let idx = self.index(v, subs, seq, cur, r.span)?;
                let idx = self.bind(seq, "index", idx, r.span);
                Ok(Place::Elem(v, idx, r.span))
            }
            _ => internal(r.span, "unresolved assignment target"),
        }
    }

    fn store(&mut self, p: Place, x: ExprId, seq: &mut Seq, cur: &mut State, span: Span) -> R<()> {
        match p {
            Place::Var(v) => self.set(seq, cur, v, x, span),
            Place::Elem(v, idx, rspan) => {
                let a = self.read(cur, v, rspan)?;
                let updated = self.update(seq, a, idx, x, rspan);
                self.set(seq, cur, v, updated, span)
            }
        }
    }

    /// The array `a` with element `idx` (an offset from 0) replaced by `x`.
    fn update(&mut self, seq: &mut Seq, a: ExprId, idx: ExprId, x: ExprId, span: Span) -> ExprId {
        let a = self.bind(seq, "array", a, span);
        let x = self.bind(seq, "value", x, span);
        // The build below reads every element but the one stored: reading that one checks
        // the index, as a load would.
        let check = self.call_prim(Prim::Get, &[a, idx], span);
        let unused = self.fresh("in-bounds");
        seq.binds.push((Rc::new(Pattern::Var(unused)), check, span));
        let k = self.fresh("k");
        let kv = self.var(k);
        let hit = self.call_prim(Prim::Eq, &[kv, idx], span);
        let old = self.call_prim(Prim::Get, &[a, kv], span);
        let body = self.iff(hit, x, old);
        let f = self.lambda(Pattern::Var(k), body, span);
        let len = self.call_prim(Prim::ArrayLength, &[a], span);
        self.call_prim(Prim::Build, &[len, f], span)
    }

    /// The offset (from 0) of element `subs` of array `v`, column-major.
    fn index(
        &mut self,
        v: VarId,
        subs: &[Expr],
        seq: &mut Seq,
        cur: &mut State,
        span: Span,
    ) -> R<ExprId> {
        let Some(ext) = self.extents.get(&v).cloned() else {
            return internal(span, "array without extents");
        };
        let mut offs = Vec::new();
        for (s, (lo, _)) in subs.iter().zip(&ext) {
            let (i, _) = self.expr(s, seq, cur)?;
            offs.push(self.call_prim(Prim::Sub, &[i, *lo], s.span));
        }
        // off1 + ext1 * (off2 + ext2 * (off3 + ...))
        let mut acc = *offs.last().expect("a subscript");
        for k in (0..offs.len() - 1).rev() {
            let Some(e) = ext[k].1 else {
                return internal(span, "assumed size before the last dimension");
            };
            let m = self.call_prim(Prim::Mul, &[e, acc], span);
            acc = self.call_prim(Prim::Add, &[offs[k], m], span);
        }
        Ok(acc)
    }

    fn convert(&mut self, x: ExprId, from: Ty, to: Ty, span: Span) -> ExprId {
        if to == Ty::Int && from.is_real() {
            return self.helper(Helper::Int, &[x], span);
        }
        x
    }

    fn read_item(&mut self, it: &IoItem, seq: &mut Seq, cur: &mut State) -> R<()> {
        match it {
            IoItem::Expr(e) => {
                let span = e.span;
                match self.sema.res.get(&e.id) {
                    Some(Res::Var(v)) if self.sema.vars[*v].is_array() => {
                        let v = *v;
                        let a = self.read(cur, v, span)?;
                        let len = self.call_prim(Prim::ArrayLength, &[a], span);
                        let k = self.fresh("k");
                        let r = self.read_real(v, span);
                        let f = self.lambda(Pattern::Var(k), r, span);
                        let b = self.call_prim(Prim::Build, &[len, f], span);
                        self.set(seq, cur, v, b, span)
                    }
                    Some(Res::Var(v)) => {
                        let v = *v;
                        let r = self.read_real(v, span);
                        self.set(seq, cur, v, r, span)
                    }
                    Some(Res::Elem(v)) => {
                        let v = *v;
                        let ExprKind::Apply(_, _, subs) = &e.kind else {
                            return internal(span, "element");
                        };
                        let idx = self.index(v, subs, seq, cur, span)?;
                        let idx = self.bind(seq, "index", idx, span);
                        let r = self.read_real(v, span);
                        let r = self.bind(seq, "input", r, span);
                        self.store(Place::Elem(v, idx, span), r, seq, cur, span)
                    }
                    _ => internal(span, "READ item"),
                }
            }
            IoItem::Loop(l) => self.implied_do(l, seq, cur, |me, seq, cur| {
                for i in &l.items {
                    me.read_item(i, seq, cur)?;
                }
                Ok(())
            }),
        }
    }

    /// `(read-real)`, truncated for an INTEGER variable.
    fn read_real(&mut self, v: VarId, span: Span) -> ExprId {
        let r = self.call_prim(Prim::ReadReal, &[], span);
        if self.sema.vars[v].ty == Ty::Int {
            self.helper(Helper::Trunc, &[r], span)
        } else {
            r
        }
    }

    /// A PRINT record: one item is written as itself, several as a list on one line.
    fn print(&mut self, items: &[IoItem], seq: &mut Seq, cur: &mut State, span: Span) -> R<()> {
        if let [IoItem::Expr(e)] = items {
            let (x, shape) = self.print_value(e, seq, cur)?;
            let p = match shape {
                Shape::Scalar(t) if t.is_numeric() => Prim::WriteReal,
                _ => Prim::Write,
            };
            let w = self.call_prim(p, &[x], span);
            self.bind(seq, "printed", w, span);
            // Bind even a variable: the write must happen.
            if !matches!(self.arena.get(w), CExpr::App(..)) {
                return internal(span, "write");
            }
            return Ok(());
        }
        let simple = items.iter().all(|i| matches!(i, IoItem::Expr(_)));
        let record = if simple {
            let mut vals = Vec::new();
            for it in items {
                let IoItem::Expr(e) = it else { unreachable!() };
                vals.push(self.print_value(e, seq, cur)?.0);
            }
            self.list(&vals)
        } else {
            let nil = self.nil();
            cur.insert(Slot::Acc, nil);
            for it in items {
                self.print_item(it, seq, cur)?;
            }
            let acc = cur.remove(&Slot::Acc).expect("accumulator");
            self.helper(Helper::Reverse, &[acc], span)
        };
        let w = self.call_prim(Prim::Write, &[record], span);
        self.bind(seq, "printed", w, span);
        Ok(())
    }

    fn print_item(&mut self, it: &IoItem, seq: &mut Seq, cur: &mut State) -> R<()> {
        match it {
            IoItem::Expr(e) => {
                let (x, _) = self.print_value(e, seq, cur)?;
                let acc = cur[&Slot::Acc];
                let c = self.cons(x, acc);
                let c = self.bind(seq, "record", c, e.span);
                cur.insert(Slot::Acc, c);
                Ok(())
            }
            IoItem::Loop(l) => self.implied_do(l, seq, cur, |me, seq, cur| {
                for i in &l.items {
                    me.print_item(i, seq, cur)?;
                }
                Ok(())
            }),
        }
    }

    /// A value to print: integers without a negative zero.
    fn print_value(&mut self, e: &Expr, seq: &mut Seq, cur: &mut State) -> R<(ExprId, Shape)> {
        if let Some(Shape::Array(t)) = self.sema.shapes.get(&e.id) {
            let Some(Res::Var(v)) = self.sema.res.get(&e.id) else {
                return internal(e.span, "array item");
            };
            return Ok((self.read(cur, *v, e.span)?, Shape::Array(*t)));
        }
        let (x, t) = self.expr(e, seq, cur)?;
        let x = if t == Ty::Int {
            let z = self.num(0.0);
            self.call_prim(Prim::Add, &[x, z], e.span)
        } else {
            x
        };
        Ok((x, Shape::Scalar(t)))
    }

    /// An implied DO: a local loop threading every slot of the state.
    fn implied_do<T>(
        &mut self,
        l: &ImpliedDo<T>,
        seq: &mut Seq,
        cur: &mut State,
        mut body: impl FnMut(&mut Self, &mut Seq, &mut State) -> R<()>,
    ) -> R<()> {
        let span = l.span;
        let v = self.ref_var(&l.var)?;
        let ty = self.sema.vars[v].ty;
        let (s, ts) = self.expr(&l.start, seq, cur)?;
        let s = self.convert(s, ts, ty, l.start.span);
        let (e, te) = self.expr(&l.end, seq, cur)?;
        let e = self.convert(e, te, ty, l.end.span);
        let e = self.bind(seq, "end", e, l.end.span);
        let st = match &l.step {
            None => self.num(1.0),
            Some(x) => {
                let (sv, tsv) = self.expr(x, seq, cur)?;
                let sv = self.convert(sv, tsv, ty, x.span);
                self.bind(seq, "step", sv, x.span)
            }
        };
        self.set(seq, cur, v, s, span)?;
        let s = self.read(cur, v, span)?;
        let d = self.call_prim(Prim::Sub, &[e, s], span);
        let d = self.call_prim(Prim::Add, &[d, st], span);
        let q = self.call_prim(Prim::Div, &[d, st], span);
        let trips = self.helper(Helper::Trunc, &[q], span);
        // The loop: (lambda (count slots...) (if (> count 0) (loop ...) (list slots...))).
        let slots: Vec<Slot> = cur.keys().copied().collect();
        let lv = self.fresh("implied-do");
        let count = self.fresh("count");
        let params: Vec<Var> = slots
            .iter()
            .map(|s| {
                let n = match s {
                    Slot::V(v) => self.name(*v),
                    Slot::Tan(v) => format!("d{}", self.name(*v)),
                    Slot::Acc => "record".into(),
                };
                self.fresh(&n)
            })
            .collect();
        let mut inner = State::new();
        for (s, p) in slots.iter().zip(&params) {
            let x = self.var(*p);
            inner.insert(*s, x);
        }
        let mut iseq = Seq::default();
        body(self, &mut iseq, &mut inner)?;
        let i = self.read(&inner, v, span)?;
        let next = self.call_prim(Prim::Add, &[i, st], span);
        self.set(&mut iseq, &mut inner, v, next, span)?;
        let cv = self.var(count);
        let one = self.num(1.0);
        let dec = self.call_prim(Prim::Sub, &[cv, one], span);
        let mut again = vec![dec];
        for s in &slots {
            let Some(x) = inner.get(s) else {
                return internal(span, "a slot lost in an implied DO");
            };
            again.push(*x);
        }
        let lvar = self.var(lv);
        let again_arg = self.list(&again);
        let again = self.app(lvar, again_arg, span);
        let again = self.wrap(iseq, again);
        let outs: Vec<ExprId> = params.iter().map(|p| self.var(*p)).collect();
        let done = self.list(&outs);
        let zero = self.num(0.0);
        let test = self.call_prim(Prim::Gt, &[cv, zero], span);
        let lbody = self.iff(test, again, done);
        let mut pats = vec![Self::pvar(count)];
        pats.extend(params.iter().map(|p| Self::pvar(*p)));
        let lam = self.lambda(Self::plist(pats), lbody, span);
        let mut init = vec![trips];
        for s in &slots {
            init.push(cur[s]);
        }
        let init_arg = self.list(&init);
        let lvar = self.var(lv);
        let call = self.app(lvar, init_arg, span);
        let looped = self.mk(CExpr::Letrec(vec![(lv, lam)].into(), call));
        let names: Vec<String> = slots
            .iter()
            .map(|s| match s {
                Slot::V(v) => self.name(*v),
                Slot::Tan(v) => format!("d{}", self.name(*v)),
                Slot::Acc => "record".into(),
            })
            .collect();
        let vals = self.bind_list(seq, &names, looped, span);
        for (s, x) in slots.iter().zip(vals) {
            cur.insert(*s, x);
        }
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // Calls.

    /// A procedure value for nested unit `n`: its code and its environment's current values.
    fn materialize(&mut self, n: UnitId, cur: &State, span: Span) -> R<ExprId> {
        let code = self.var(self.code[&n]);
        let env: Vec<VarId> = self.sema.units[n].env.clone();
        let vals = env
            .iter()
            .map(|&w| self.read(cur, w, span))
            .collect::<R<Vec<_>>>()?;
        let e = self.list(&vals);
        Ok(self.cons(code, e))
    }

    /// A call: the arguments copied in, the call, the changed ones copied out. Returns the
    /// function's result.
    fn call(
        &mut self,
        site: &CallSite,
        args: &[Expr],
        seq: &mut Seq,
        cur: &mut State,
    ) -> R<ExprId> {
        let span = site.span;
        let mut vals = Vec::new();
        let mut backs: Vec<(usize, Back)> = Vec::new();
        for (i, (a, (arg, _, _))) in args.iter().zip(&site.args).enumerate() {
            match arg {
                Arg::Whole(v) => {
                    vals.push(self.read(cur, *v, a.span)?);
                    backs.push((i, Back::Var(*v)));
                }
                Arg::Elem(v) => {
                    let ExprKind::Apply(_, _, subs) = &a.kind else {
                        return internal(a.span, "element argument");
                    };
                    let idx = self.index(*v, subs, seq, cur, a.span)?;
                    let idx = self.bind(seq, "index", idx, a.span);
                    let arr = self.read(cur, *v, a.span)?;
                    let x = self.call_prim(Prim::Get, &[arr, idx], a.span);
                    let name = self.name(*v);
                    vals.push(self.bind(seq, &name, x, a.span));
                    backs.push((i, Back::Elem(*v, idx, a.span)));
                }
                Arg::Nested(n) => {
                    vals.push(self.materialize(*n, cur, a.span)?);
                    backs.push((i, Back::Env(*n)));
                }
                Arg::Global(g) => {
                    let code = self.var(self.code[g]);
                    let nil = self.nil();
                    vals.push(self.cons(code, nil));
                }
                Arg::Value => {
                    let (x, _) = self.expr(a, seq, cur)?;
                    vals.push(x);
                }
            }
        }
        let mut proc_code = None;
        let (code, env, direct) = match site.callee {
            Callee::Unit(c) => {
                let code = self.var(self.code[&c]);
                let env = if self.sema.units[c].parent.is_some() {
                    let env: Vec<VarId> = self.sema.units[c].env.clone();
                    let mut vals = Vec::new();
                    for w in env {
                        vals.push(self.read(cur, w, span)?);
                    }
                    self.list(&vals)
                } else {
                    self.nil()
                };
                (code, env, Some(c))
            }
            Callee::Var(p) => {
                let pv = self.read(cur, p, span)?;
                let c = self.fresh("code");
                let e = self.fresh("env");
                let pat = Self::pcons(Self::pvar(c), Self::pvar(e));
                seq.binds.push((Rc::new(pat), pv, span));
                proc_code = Some(c);
                (self.var(c), self.var(e), None)
            }
        };
        let argl = self.list(&vals);
        let arg = self.cons(env, argl);
        let ret = self.app(code, arg, span);
        // Destructure (cons result (cons env' args')): what the convention gives back.
        let conv = self.sema.convention(&site.callee);
        let result = self.fresh(&format!("{}-result", site.name));
        let env_pat;
        let mut env_out: Vec<(VarId, Var)> = Vec::new();
        let mut env_whole = None;
        match (direct, &site.callee) {
            _ if !conv.env => {
                let ignored = self.fresh("env");
                env_pat = Self::pvar(ignored);
            }
            (Some(c), _) if self.sema.units[c].parent.is_some() => {
                let env: Vec<VarId> = self.sema.units[c].env.clone();
                let vars: Vec<Var> = env.iter().map(|&w| self.fresh(&self.name(w))).collect();
                env_pat = Self::plist(vars.iter().map(|v| Self::pvar(*v)).collect());
                env_out = env.into_iter().zip(vars).collect();
            }
            (Some(_), _) => {
                let ignored = self.fresh("env");
                env_pat = Self::pvar(ignored);
            }
            (None, _) => {
                let e = self.fresh("env");
                env_pat = Self::pvar(e);
                env_whole = Some(e);
            }
        }
        let mut outs: HashMap<usize, Var> = HashMap::new();
        let mut pats = Vec::new();
        for &i in &conv.args {
            let v = self.fresh(&format!("arg{}", i + 1));
            outs.insert(i, v);
            pats.push(Self::pvar(v));
        }
        let pat = Self::pcons(Self::pvar(result), Self::pcons(env_pat, Self::plist(pats)));
        seq.binds.push((Rc::new(pat), ret, span));
        // Copy out.
        for (i, back) in backs {
            let may_change = self.sema.arg_may_change(site, i);
            let Some(&out) = outs.get(&i).filter(|_| may_change) else {
                continue;
            };
            let out = self.var(out);
            match back {
                Back::Var(v) => {
                    if cur.contains_key(&Slot::V(v)) {
                        self.set(seq, cur, v, out, span)?;
                    }
                }
                Back::Elem(v, idx, aspan) => {
                    if cur.contains_key(&Slot::V(v)) {
                        let a = self.read(cur, v, aspan)?;
                        let updated = self.update(seq, a, idx, out, aspan);
                        self.set(seq, cur, v, updated, aspan)?;
                    }
                }
                Back::Env(n) => {
                    let env: Vec<VarId> = self.sema.units[n].env.clone();
                    if env.is_empty() {
                        continue;
                    }
                    let ignored = self.fresh("code");
                    let names: Vec<String> = env.iter().map(|&w| self.name(w)).collect();
                    let vars: Vec<Var> = names.iter().map(|n| self.fresh(n)).collect();
                    let pat = Self::pcons(
                        Self::pvar(ignored),
                        Self::plist(vars.iter().map(|v| Self::pvar(*v)).collect()),
                    );
                    seq.binds.push((Rc::new(pat), out, span));
                    for (w, x) in env.into_iter().zip(vars) {
                        let xv = self.var(x);
                        self.set(seq, cur, w, xv, span)?;
                    }
                }
            }
        }
        for (w, x) in env_out {
            let xv = self.var(x);
            self.set(seq, cur, w, xv, span)?;
        }
        if let (Callee::Var(p), Some(c), Some(e)) = (&site.callee, proc_code, env_whole) {
            if !cur.contains_key(&Slot::V(*p)) {
                // No subprogram it may hold changes its environment.
                return Ok(self.var(result));
            }
            // The procedure variable keeps its code, with the environment it gave back.
            let cv = self.var(c);
            let ev = self.var(e);
            let pair = self.cons(cv, ev);
            self.set(seq, cur, *p, pair, span)?;
        }
        Ok(self.var(result))
    }

    // ---------------------------------------------------------------------------------------
    // ADF and ADR.

    #[allow(clippy::too_many_arguments)]
    fn ad(
        &mut self,
        s: &Stmt,
        reverse: bool,
        opening: &[AdItem],
        body: &[Stmt],
        closing: &[AdItem],
        seq: &mut Seq,
        cur: &mut State,
    ) -> R<()> {
        let span = s.span;
        let (Some(ins), Some(outs)) = (
            self.sema.block_in.get(&s.id).cloned(),
            self.sema.block_out.get(&s.id).cloned(),
        ) else {
            return internal(span, "ADF/ADR block without its variables");
        };
        // The block as a function from its inputs to its outputs.
        let hidden = self.sema.block_hidden(self.unit, s.id);
        let params: Vec<Var> = ins.iter().map(|&v| self.fresh(&self.name(v))).collect();
        let mut inner = State::new();
        for (&v, &p) in ins.iter().zip(&params) {
            let x = self.var(p);
            inner.insert(Slot::V(v), x);
        }
        // Outputs that are not inputs are assigned before they are read.
        for &v in outs.iter().chain(&hidden) {
            let z = self.zero_of(self.sema.vars[v].ty);
            inner.entry(Slot::V(v)).or_insert(z);
        }
        let state: Vec<VarId> = inner
            .keys()
            .filter_map(|k| match k {
                Slot::V(v) => Some(*v),
                _ => None,
            })
            .collect();
        let block_body = self.body(body, None, &state, inner, Exit::Block(outs.clone()))?;
        let pat = Self::plist(params.iter().map(|p| Self::pvar(*p)).collect());
        let lam = self.lambda(pat, block_body, span);
        let blk = self.bind(
            seq,
            if reverse { "adr-block" } else { "adf-block" },
            lam,
            span,
        );
        let inputs = ins
            .iter()
            .map(|&v| self.read(cur, v, span))
            .collect::<R<Vec<_>>>()?;
        let input = self.list(&inputs);
        let out_names: Vec<String> = outs.iter().map(|&v| self.name(v)).collect();
        // The code of each procedure variable the block gives back (its environment only).
        let mut codes: HashMap<VarId, ExprId> = HashMap::new();
        for &v in &outs {
            if self.sema.vars[v].is_proc() {
                let pv = self.read(cur, v, span)?;
                let c = self.fresh("code");
                let e = self.fresh("env");
                seq.binds
                    .push((Rc::new(Self::pcons(Self::pvar(c), Self::pvar(e))), pv, span));
                let cv = self.var(c);
                codes.insert(v, cv);
            }
        }
        // The seeded variables whose seed slot must exist before the opening assignments run:
        // arrays (their elements are stored one by one) and those seeded in implied DOs (a
        // loop threads the slots that exist). Other scalars get their seed directly.
        let mut seeded = Vec::new();
        collect_ad_vars(self.sema, opening, &mut seeded);
        let mut in_loops = Vec::new();
        for it in opening {
            if let AdItem::Loop(l) = it {
                collect_ad_vars(self.sema, &l.items, &mut in_loops);
            }
        }
        seeded.retain(|&v| self.sema.vars[v].is_array() || in_loops.contains(&v));
        if !reverse {
            // Tangents of the independent variables, evaluated before the block.
            let tans = self.seeds(&seeded, &ins, opening, Prim::Zero, "d{}", seq, cur, span)?;
            // ((j* blk) (bundle inputs (perturb tangents)))
            let tl = self.list(&tans);
            let perturbed = self.call_prim(Prim::Perturb, &[tl], span);
            let bundled = self.call_prim(Prim::Bundle, &[input, perturbed], span);
            let jstar = self.jstar(blk, span);
            let y = self.app(jstar, bundled, span);
            let y = self.bind(seq, "adf-result", y, span);
            let primal = self.call_prim(Prim::Primal, &[y], span);
            let ps = self.bind_list(seq, &out_names, primal, span);
            let tangent = self.call_prim(Prim::Tangent, &[y], span);
            let tangent = self.call_prim(Prim::Unperturb, &[tangent], span);
            let dnames: Vec<String> = out_names.iter().map(|n| format!("d{n}")).collect();
            let ds = self.bind_list(seq, &dnames, tangent, span);
            for ((&v, p), d) in outs.iter().zip(ps).zip(ds) {
                let p = match codes.get(&v) {
                    Some(&c) => self.cons(c, p),
                    None => p,
                };
                self.set(seq, cur, v, p, span)?;
                cur.insert(Slot::Tan(v), d);
            }
        } else {
            // (*j blk) on (*j inputs): the forward phase.
            let jv = self.call_prim(Prim::StarJ, &[input], span);
            let jf = self.call_prim(Prim::StarJ, &[blk], span);
            let y = self.app(jf, jv, span);
            let yv = self.fresh("adr-result");
            let bp = self.fresh("backpropagator");
            seq.binds.push((
                Rc::new(Self::pcons(Self::pvar(yv), Self::pvar(bp))),
                y,
                span,
            ));
            let yref = self.var(yv);
            let primal = self.call_prim(Prim::StarJInverse, &[yref], span);
            let ps = self.bind_list(seq, &out_names, primal, span);
            for (&v, p) in outs.iter().zip(ps) {
                let p = match codes.get(&v) {
                    Some(&c) => self.cons(c, p),
                    None => p,
                };
                self.set(seq, cur, v, p, span)?;
            }
            // The cotangents of the dependent variables, evaluated after the forward phase.
            let sens = self.seeds(
                &seeded,
                &outs,
                opening,
                Prim::SZero,
                "{}-bar",
                seq,
                cur,
                span,
            )?;
            let sl = self.list(&sens);
            let sensitized = self.call_prim(Prim::Sensitize, &[sl], span);
            let bpv = self.var(bp);
            let back = self.app(bpv, sensitized, span);
            let back = self.call_prim(Prim::Unsensitize, &[back], span);
            let fbar = self.fresh("block-bar");
            let cvars: Vec<Var> = ins
                .iter()
                .map(|&v| {
                    let n = format!("{}-bar", self.name(v));
                    self.fresh(&n)
                })
                .collect();
            let pat = Self::pcons(
                Self::pvar(fbar),
                Self::plist(cvars.iter().map(|v| Self::pvar(*v)).collect()),
            );
            seq.binds.push((Rc::new(pat), back, span));
            for (&v, c) in ins.iter().zip(cvars) {
                let cv = self.var(c);
                cur.insert(Slot::Tan(v), cv);
            }
        }
        for it in closing {
            self.ad_close(it, seq, cur)?;
        }
        cur.retain(|k, _| !matches!(k, Slot::Tan(_)));
        Ok(())
    }

    /// `(bundle f (perturb (zero f)))`.
    fn jstar(&mut self, f: ExprId, span: Span) -> ExprId {
        let z = self.call_prim(Prim::Zero, &[f], span);
        let p = self.call_prim(Prim::Perturb, &[z], span);
        self.call_prim(Prim::Bundle, &[f, p], span)
    }

    /// The seeds of an ADF (tangents, `zero` each by default) or ADR (cotangents, `zero` of
    /// sensitivities) block: a slot of its default for each variable of `seeded` (named by
    /// `name`, `{}` the variable's name), the opening assignments, then the seed of each of
    /// `vars` (the default where the opening set none). The seed slots are gone afterwards.
    #[allow(clippy::too_many_arguments)]
    fn seeds(
        &mut self,
        seeded: &[VarId],
        vars: &[VarId],
        opening: &[AdItem],
        zero: Prim,
        name: &str,
        seq: &mut Seq,
        cur: &mut State,
        span: Span,
    ) -> R<Vec<ExprId>> {
        for &v in seeded {
            let x = self.read(cur, v, span)?;
            let z = self.call_prim(zero, &[x], span);
            let z = self.bind(seq, &name.replace("{}", &self.name(v)), z, span);
            cur.insert(Slot::Tan(v), z);
        }
        for it in opening {
            self.ad_open(it, seq, cur)?;
        }
        let mut out = Vec::new();
        for &v in vars {
            match cur.remove(&Slot::Tan(v)) {
                Some(t) => out.push(t),
                None => {
                    let x = self.read(cur, v, span)?;
                    out.push(self.call_prim(zero, &[x], span));
                }
            }
        }
        cur.retain(|k, _| !matches!(k, Slot::Tan(_)));
        Ok(out)
    }

    fn ad_open(&mut self, it: &AdItem, seq: &mut Seq, cur: &mut State) -> R<()> {
        match it {
            AdItem::Open { var, value, .. } => {
                let (x, t) = self.expr(value, seq, cur)?;
                let x = self.convert(x, t, Ty::Double, value.span);
                let v = self.ref_var(var)?;
                match self.sema.res.get(&var.id) {
                    Some(Res::Elem(_)) => {
                        let Some(subs) = &var.subs else {
                            return internal(var.span, "element");
                        };
                        let idx = self.index(v, subs, seq, cur, var.span)?;
                        let idx = self.bind(seq, "index", idx, var.span);
                        let base = cur[&Slot::Tan(v)];
                        let u = self.update(seq, base, idx, x, var.span);
                        let u = self.bind(seq, &format!("d{}", self.name(v)), u, var.span);
                        cur.insert(Slot::Tan(v), u);
                    }
                    _ => {
                        let x = self.bind(seq, &format!("d{}", self.name(v)), x, var.span);
                        cur.insert(Slot::Tan(v), x);
                    }
                }
                Ok(())
            }
            AdItem::Loop(l) => self.implied_do(l, seq, cur, |me, seq, cur| {
                for i in &l.items {
                    me.ad_open(i, seq, cur)?;
                }
                Ok(())
            }),
            AdItem::Close { span, .. } => internal(*span, "closing item in an opening list"),
        }
    }

    fn ad_close(&mut self, it: &AdItem, seq: &mut Seq, cur: &mut State) -> R<()> {
        match it {
            AdItem::Close { dest, var, span } => {
                let target = self.place(dest, seq, cur)?;
                let v = self.ref_var(var)?;
                let Some(&d) = cur.get(&Slot::Tan(v)) else {
                    return internal(*span, "derivative of a variable outside the block");
                };
                let x = match self.sema.res.get(&var.id) {
                    Some(Res::Elem(_)) => {
                        let Some(subs) = &var.subs else {
                            return internal(var.span, "element");
                        };
                        let idx = self.index(v, subs, seq, cur, var.span)?;
                        self.call_prim(Prim::Get, &[d, idx], var.span)
                    }
                    _ => d,
                };
                let dv = self.ref_var(dest)?;
                let x = self.convert(x, Ty::Double, self.sema.vars[dv].ty, *span);
                self.store(target, x, seq, cur, *span)
            }
            AdItem::Loop(l) => self.implied_do(l, seq, cur, |me, seq, cur| {
                for i in &l.items {
                    me.ad_close(i, seq, cur)?;
                }
                Ok(())
            }),
            AdItem::Open { span, .. } => internal(*span, "opening item in a closing list"),
        }
    }

    // ---------------------------------------------------------------------------------------
    // Expressions.

    /// An expression's value (with its calls' effects in `seq` and `cur`) and type.
    fn expr(&mut self, e: &Expr, seq: &mut Seq, cur: &mut State) -> R<(ExprId, Ty)> {
        let span = e.span;
        let ty = match self.sema.shapes.get(&e.id) {
            Some(Shape::Scalar(t)) => *t,
            _ => return internal(span, "expression without a type"),
        };
        let x = match &e.kind {
            ExprKind::Int(v) | ExprKind::Real(v, _) => self.num(*v),
            ExprKind::Logical(b) => self.boolean(*b),
            ExprKind::Name(_) => match self.sema.res.get(&e.id) {
                Some(Res::Var(v)) => self.read(cur, *v, span)?,
                Some(Res::Const(Const::Num(c, _))) => self.num(*c),
                Some(Res::Const(Const::Bool(b))) => self.boolean(*b),
                _ => return internal(span, "name"),
            },
            ExprKind::Apply(_, _, args) => match self.sema.res.get(&e.id).copied() {
                Some(Res::Elem(v)) => {
                    let idx = self.index(v, args, seq, cur, span)?;
                    let a = self.read(cur, v, span)?;
                    self.call_prim(Prim::Get, &[a, idx], span)
                }
                Some(Res::Intrinsic(i)) => self.intrinsic(i, args, ty, seq, cur, span)?,
                Some(Res::Nested(_) | Res::Global(_) | Res::CallVar(_)) => {
                    let Some(site) = self.sema.sites.get(&e.id) else {
                        return internal(span, "call without its site");
                    };
                    self.call(site, args, seq, cur)?
                }
                _ => return internal(span, "application"),
            },
            ExprKind::Paren(x) => self.expr(x, seq, cur)?.0,
            ExprKind::Neg(x) => {
                let (v, t) = self.expr(x, seq, cur)?;
                if t == Ty::Int {
                    let z = self.num(0.0);
                    self.call_prim(Prim::Sub, &[z, v], span)
                } else {
                    let m = self.num(-1.0);
                    self.call_prim(Prim::Mul, &[m, v], span)
                }
            }
            ExprKind::Not(x) => {
                let (v, _) = self.expr(x, seq, cur)?;
                let f = self.boolean(false);
                let t = self.boolean(true);
                self.iff(v, f, t)
            }
            ExprKind::Bin(op, a, b) => self.binary(*op, a, b, ty, seq, cur, span)?,
        };
        Ok((x, ty))
    }

    #[allow(clippy::too_many_arguments)]
    fn binary(
        &mut self,
        op: BinOp,
        a: &Expr,
        b: &Expr,
        ty: Ty,
        seq: &mut Seq,
        cur: &mut State,
        span: Span,
    ) -> R<ExprId> {
        let (x, tx) = self.expr(a, seq, cur)?;
        if op == BinOp::Pow {
            return self.power(x, tx, b, ty, seq, cur, span);
        }
        let (y, ty_b) = self.expr(b, seq, cur)?;
        let ints = tx == Ty::Int && ty_b == Ty::Int;
        Ok(match op {
            BinOp::Add => self.call_prim(Prim::Add, &[x, y], span),
            BinOp::Sub => self.call_prim(Prim::Sub, &[x, y], span),
            BinOp::Mul if ints => {
                // 0 * -1 is -0 in IEEE arithmetic, never an INTEGER.
                let m = self.call_prim(Prim::Mul, &[x, y], span);
                let z = self.num(0.0);
                self.call_prim(Prim::Add, &[m, z], span)
            }
            BinOp::Mul => self.call_prim(Prim::Mul, &[x, y], span),
            BinOp::Div if ints => {
                let q = self.call_prim(Prim::Div, &[x, y], span);
                self.helper(Helper::Trunc, &[q], span)
            }
            BinOp::Div => self.call_prim(Prim::Div, &[x, y], span),
            BinOp::Eq => self.call_prim(Prim::Eq, &[x, y], span),
            BinOp::Lt => self.call_prim(Prim::Lt, &[x, y], span),
            BinOp::Le => self.call_prim(Prim::Le, &[x, y], span),
            BinOp::Gt => self.call_prim(Prim::Gt, &[x, y], span),
            BinOp::Ge => self.call_prim(Prim::Ge, &[x, y], span),
            BinOp::Ne => {
                let eq = self.call_prim(Prim::Eq, &[x, y], span);
                let f = self.boolean(false);
                let t = self.boolean(true);
                self.iff(eq, f, t)
            }
            BinOp::And => {
                let f = self.boolean(false);
                self.iff(x, y, f)
            }
            BinOp::Or => {
                let t = self.boolean(true);
                self.iff(x, t, y)
            }
            BinOp::Eqv | BinOp::Neqv => {
                let y = self.bind(seq, "b", y, span);
                let f = self.boolean(false);
                let t = self.boolean(true);
                let not_y = self.iff(y, f, t);
                if op == BinOp::Eqv {
                    self.iff(x, y, not_y)
                } else {
                    self.iff(x, not_y, y)
                }
            }
            BinOp::Pow => unreachable!("handled above"),
        })
    }

    /// `x ** b`: small constant integer powers by multiplication, other integer powers by
    /// repeated squaring, real powers as `exp(b log x)`.
    #[allow(clippy::too_many_arguments)]
    fn power(
        &mut self,
        x: ExprId,
        tx: Ty,
        b: &Expr,
        ty: Ty,
        seq: &mut Seq,
        cur: &mut State,
        span: Span,
    ) -> R<ExprId> {
        let literal = match &b.kind {
            ExprKind::Int(k) => Some(*k),
            _ => None,
        };
        if let Some(k) = literal.filter(|k| (0.0..=4.0).contains(k)) {
            if k == 0.0 {
                return Ok(self.num(1.0));
            }
            let xv = self.bind(seq, "base", x, span);
            let mut acc = xv;
            for _ in 1..(k as usize) {
                acc = self.call_prim(Prim::Mul, &[acc, xv], span);
            }
            return Ok(acc);
        }
        let (y, tyb) = self.expr(b, seq, cur)?;
        if tyb == Ty::Int {
            let p = self.helper(Helper::Ipow, &[x, y], span);
            if tx == Ty::Int {
                // An INTEGER to a negative power truncates, as INTEGER division does.
                return Ok(self.helper(Helper::Trunc, &[p], span));
            }
            return Ok(p);
        }
        let _ = ty;
        let l = self.call_prim(Prim::Log, &[x], span);
        let m = self.call_prim(Prim::Mul, &[y, l], span);
        Ok(self.call_prim(Prim::Exp, &[m], span))
    }

    fn intrinsic(
        &mut self,
        i: Intr,
        args: &[Expr],
        ty: Ty,
        seq: &mut Seq,
        cur: &mut State,
        span: Span,
    ) -> R<ExprId> {
        let mut vals = Vec::new();
        for a in args {
            vals.push(self.expr(a, seq, cur)?);
        }
        let x = vals[0].0;
        let one_prim = |p: Prim| p;
        Ok(match i {
            Intr::Sqrt => self.call_prim(one_prim(Prim::Sqrt), &[x], span),
            Intr::Exp => self.call_prim(Prim::Exp, &[x], span),
            Intr::Log => self.call_prim(Prim::Log, &[x], span),
            Intr::Sin => self.call_prim(Prim::Sin, &[x], span),
            Intr::Cos => self.call_prim(Prim::Cos, &[x], span),
            Intr::Tan => {
                let xv = self.bind(seq, "x", x, span);
                let s = self.call_prim(Prim::Sin, &[xv], span);
                let c = self.call_prim(Prim::Cos, &[xv], span);
                self.call_prim(Prim::Div, &[s, c], span)
            }
            Intr::Atan => {
                let one = self.num(1.0);
                self.call_prim(Prim::Atan, &[x, one], span)
            }
            Intr::Atan2 => self.call_prim(Prim::Atan, &[x, vals[1].0], span),
            Intr::Abs => {
                let xv = self.bind(seq, "x", x, span);
                let zero = self.num(0.0);
                let neg = self.call_prim(Prim::Lt, &[xv, zero], span);
                let minus = self.call_prim(Prim::Sub, &[zero, xv], span);
                let plus = self.call_prim(Prim::Add, &[xv, zero], span);
                self.iff(neg, minus, plus)
            }
            Intr::Max | Intr::Min => {
                let mut acc = self.bind(seq, "x", x, span);
                for (y, _) in &vals[1..] {
                    let yv = self.bind(seq, "y", *y, span);
                    let p = if i == Intr::Max { Prim::Gt } else { Prim::Lt };
                    let c = self.call_prim(p, &[yv, acc], span);
                    let m = self.iff(c, yv, acc);
                    acc = self.bind(seq, "m", m, span);
                }
                acc
            }
            Intr::Mod => {
                let h = if ty == Ty::Int {
                    Helper::Imod
                } else {
                    Helper::Rmod
                };
                self.helper(h, &[x, vals[1].0], span)
            }
            Intr::Sign => {
                let xv = self.bind(seq, "x", x, span);
                let zero = self.num(0.0);
                let neg = self.call_prim(Prim::Lt, &[xv, zero], span);
                let minus = self.call_prim(Prim::Sub, &[zero, xv], span);
                let plus = self.call_prim(Prim::Add, &[xv, zero], span);
                let a = self.iff(neg, minus, plus);
                let a = self.bind(seq, "abs", a, span);
                let bneg = self.call_prim(Prim::Lt, &[vals[1].0, zero], span);
                let na = self.call_prim(Prim::Sub, &[zero, a], span);
                self.iff(bneg, na, a)
            }
            Intr::Real | Intr::Dble => x,
            Intr::Int => {
                if vals[0].1 == Ty::Int {
                    x
                } else {
                    self.helper(Helper::Int, &[x], span)
                }
            }
            Intr::Nint => {
                if vals[0].1 == Ty::Int {
                    x
                } else {
                    self.helper(Helper::Nint, &[x], span)
                }
            }
        })
    }
}

/// Where an assignment stores.
enum Place {
    Var(VarId),
    Elem(VarId, ExprId, Span),
}

/// What a call copies out.
enum Back {
    Var(VarId),
    Elem(VarId, ExprId, Span),
    Env(UnitId),
}

/// The variables named in opening or closing items.
fn collect_ad_vars(sema: &Sema<'_>, items: &[AdItem], out: &mut Vec<VarId>) {
    for it in items {
        match it {
            AdItem::Open { var, .. } | AdItem::Close { var, .. } => {
                if let Some(Res::Var(v) | Res::Elem(v)) = sema.res.get(&var.id) {
                    if !out.contains(v) {
                        out.push(*v);
                    }
                }
            }
            AdItem::Loop(l) => collect_ad_vars(sema, &l.items, out),
        }
    }
}

// -------------------------------------------------------------------------------------------
// Basic blocks.

enum Op<'a> {
    Stmt(&'a Stmt),
    DoInit(&'a Stmt),
    DoStep(&'a Stmt),
}

enum Term<'a> {
    /// Not terminated yet.
    Open,
    Goto(usize),
    /// A GOTO before its label is resolved (the label, its span, the construct path).
    Label(u32, Span, Vec<u32>),
    Cond(&'a Expr, usize, usize),
    DoTest(&'a Stmt, usize, usize),
    Exit(Span),
}

impl Term<'_> {
    fn successors(&self) -> Vec<usize> {
        match self {
            Term::Goto(t) => vec![*t],
            Term::Cond(_, a, b) | Term::DoTest(_, a, b) => vec![*a, *b],
            _ => vec![],
        }
    }
}

struct BlockData<'a> {
    ops: Vec<Op<'a>>,
    term: Term<'a>,
}

struct Cfg<'a> {
    blocks: Vec<BlockData<'a>>,
    cur: usize,
    /// Each label's block and the path of constructs (IF arms, DO bodies) around it; `None`
    /// for labels no GOTO may name (ELSE, ELSE IF).
    labels: HashMap<u32, Option<(usize, Vec<u32>)>>,
    path: Vec<u32>,
    next_construct: u32,
}

struct BodyCx<'c, 'a> {
    cfg: &'c Cfg<'a>,
    fns: &'c HashMap<usize, Var>,
    state: &'c [VarId],
    exit: Exit,
}

impl<'a> Cfg<'a> {
    fn build(stmts: &'a [Stmt], end_label: Option<u32>) -> R<Cfg<'a>> {
        let mut c = Cfg {
            blocks: Vec::new(),
            cur: 0,
            labels: HashMap::new(),
            path: Vec::new(),
            next_construct: 0,
        };
        c.cur = c.new_block();
        c.seq(stmts)?;
        let end = stmts.last().map_or(Span::NONE, |s| s.span);
        if let Some(l) = end_label {
            // A labelled END: a GOTO to it returns.
            let b = c.new_block();
            c.start_at(b);
            c.labels.insert(l, Some((b, Vec::new())));
        }
        c.terminate(Term::Exit(end));
        // Resolve GOTOs.
        for b in 0..c.blocks.len() {
            if let Term::Label(l, span, from) = &c.blocks[b].term {
                let (l, span) = (*l, *span);
                let target = match c.labels.get(&l) {
                    Some(Some((t, to))) => {
                        if !(to.len() <= from.len() && from[..to.len()] == to[..]) {
                            return Err(Diagnostic::new(
                                span,
                                format!("GOTO {l} jumps into a DO loop or an IF block"),
                            ));
                        }
                        *t
                    }
                    Some(None) => {
                        return Err(Diagnostic::new(
                            span,
                            format!("GOTO {l} names an ELSE or ELSE IF statement"),
                        ))
                    }
                    None => {
                        return Err(Diagnostic::new(
                            span,
                            format!("there is no statement labelled {l} here"),
                        ))
                    }
                };
                c.blocks[b].term = Term::Goto(target);
            }
        }
        Ok(c)
    }

    fn new_block(&mut self) -> usize {
        self.blocks.push(BlockData {
            ops: Vec::new(),
            term: Term::Open,
        });
        self.blocks.len() - 1
    }

    fn is_open(&self) -> bool {
        matches!(self.blocks[self.cur].term, Term::Open)
    }

    fn terminate(&mut self, t: Term<'a>) {
        if self.is_open() {
            self.blocks[self.cur].term = t;
        }
    }

    fn goto(&mut self, b: usize) {
        self.terminate(Term::Goto(b));
    }

    fn push(&mut self, op: Op<'a>) {
        if !self.is_open() {
            // Code after a GOTO or RETURN with no label: unreachable.
            self.cur = self.new_block();
        }
        self.blocks[self.cur].ops.push(op);
    }

    fn start_at(&mut self, b: usize) {
        self.goto(b);
        self.cur = b;
    }

    fn construct(&mut self) -> u32 {
        self.next_construct += 1;
        self.next_construct
    }

    fn seq(&mut self, stmts: &'a [Stmt]) -> R<()> {
        for s in stmts {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &'a Stmt) -> R<()> {
        if let Some((l, _)) = s.label {
            let b = self.new_block();
            self.start_at(b);
            self.labels.insert(l, Some((b, self.path.clone())));
        }
        match &s.kind {
            StmtKind::Assign(..)
            | StmtKind::Call(..)
            | StmtKind::Read(_)
            | StmtKind::Print(_)
            | StmtKind::Ad { .. } => self.push(Op::Stmt(s)),
            StmtKind::Continue => {}
            StmtKind::Goto(l, span) => {
                if !self.is_open() {
                    self.cur = self.new_block();
                }
                self.terminate(Term::Label(*l, *span, self.path.clone()));
            }
            StmtKind::Return | StmtKind::Stop => {
                if !self.is_open() {
                    self.cur = self.new_block();
                }
                self.terminate(Term::Exit(s.span));
            }
            StmtKind::LogicalIf(c, inner) => {
                if !self.is_open() {
                    self.cur = self.new_block();
                }
                let then = self.new_block();
                let join = self.new_block();
                self.terminate(Term::Cond(c, then, join));
                self.cur = then;
                let k = self.construct();
                self.path.push(k);
                self.stmt(inner)?;
                self.path.pop();
                self.goto(join);
                self.cur = join;
            }
            StmtKind::If {
                arms,
                else_body,
                inner_labels,
                end_label,
            } => {
                if !self.is_open() {
                    self.cur = self.new_block();
                }
                let join = self.new_block();
                for arm in arms {
                    let then = self.new_block();
                    let next = self.new_block();
                    self.terminate(Term::Cond(&arm.cond, then, next));
                    self.cur = then;
                    let k = self.construct();
                    self.path.push(k);
                    self.seq(&arm.body)?;
                    self.path.pop();
                    self.goto(join);
                    self.cur = next;
                }
                if let Some(b) = else_body {
                    let k = self.construct();
                    self.path.push(k);
                    self.seq(b)?;
                    self.path.pop();
                }
                self.goto(join);
                self.cur = join;
                for (l, _) in inner_labels {
                    self.labels.insert(*l, None);
                }
                if let Some((l, _)) = end_label {
                    self.labels.insert(*l, Some((join, self.path.clone())));
                }
            }
            StmtKind::Do {
                body, end_label, ..
            } => {
                self.push(Op::DoInit(s));
                let head = self.new_block();
                self.goto(head);
                let body_b = self.new_block();
                let exit = self.new_block();
                let latch = self.new_block();
                self.blocks[head].term = Term::DoTest(s, body_b, exit);
                self.cur = body_b;
                let k = self.construct();
                self.path.push(k);
                if let Some((l, _)) = end_label {
                    self.labels.insert(*l, Some((latch, self.path.clone())));
                }
                self.seq(body)?;
                self.path.pop();
                self.goto(latch);
                self.blocks[latch].ops.push(Op::DoStep(s));
                self.blocks[latch].term = Term::Goto(head);
                self.cur = exit;
            }
        }
        Ok(())
    }
}
