//! Names, types and effects.
//!
//! Scoping follows paper 000 §2: parameters and declared variables belong to the subprogram
//! that declares them and shadow outer ones; an undeclared variable belongs to the top-level
//! subprogram of its nest (so a loop counter used in a nested function is the enclosing
//! top-level subprogram's). Every name occurrence is resolved once here and recorded under the
//! node's id, with the node's type; the lowering only reads these tables.
//!
//! The effect analysis decides what the lowering must thread as state. A variable is *mutable*
//! if anything in its owner's nest may change it: an assignment, a READ, a DO variable, an
//! actual argument whose dummy the callee may change, a procedure variable that is called (its
//! closure state may change), or any variable an ADF/ADR block uses (the block's results
//! replace them). A nested subprogram's *environment* is the mutable variables of enclosing
//! subprograms that it or anything it calls by name uses: they travel with its procedure value
//! and come back updated (see `lower.rs`). Immutable variables are captured as they are.
//! Both are least fixpoints over the whole file.

use crate::ast::*;
use std::collections::{BTreeSet, HashMap};
use vlad_core::Span;
use vlad_syntax::Diagnostic;

type R<T> = Result<T, Diagnostic>;

fn err<T>(span: Span, msg: impl Into<String>) -> R<T> {
    Err(Diagnostic::new(span, msg))
}

pub type UnitId = usize;
pub type VarId = usize;

/// The value shape of an expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Scalar(Ty),
    Array(Ty),
    Proc,
}

/// A compile-time constant (a PARAMETER).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Const {
    Num(f64, Ty),
    Bool(bool),
}

impl Const {
    fn ty(self) -> Ty {
        match self {
            Const::Num(_, t) => t,
            Const::Bool(_) => Ty::Logical,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intr {
    Sqrt,
    Exp,
    Log,
    Sin,
    Cos,
    Tan,
    Atan,
    Atan2,
    Abs,
    Max,
    Min,
    Mod,
    Sign,
    Real,
    Dble,
    Int,
    Nint,
}

/// Generic and specific names of the intrinsics.
const INTRINSICS: &[(&str, Intr)] = &[
    ("SQRT", Intr::Sqrt),
    ("DSQRT", Intr::Sqrt),
    ("EXP", Intr::Exp),
    ("DEXP", Intr::Exp),
    ("LOG", Intr::Log),
    ("ALOG", Intr::Log),
    ("DLOG", Intr::Log),
    ("SIN", Intr::Sin),
    ("DSIN", Intr::Sin),
    ("COS", Intr::Cos),
    ("DCOS", Intr::Cos),
    ("TAN", Intr::Tan),
    ("DTAN", Intr::Tan),
    ("ATAN", Intr::Atan),
    ("DATAN", Intr::Atan),
    ("ATAN2", Intr::Atan2),
    ("DATAN2", Intr::Atan2),
    ("ABS", Intr::Abs),
    ("IABS", Intr::Abs),
    ("DABS", Intr::Abs),
    ("MAX", Intr::Max),
    ("MAX0", Intr::Max),
    ("AMAX1", Intr::Max),
    ("DMAX1", Intr::Max),
    ("MIN", Intr::Min),
    ("MIN0", Intr::Min),
    ("AMIN1", Intr::Min),
    ("DMIN1", Intr::Min),
    ("MOD", Intr::Mod),
    ("AMOD", Intr::Mod),
    ("DMOD", Intr::Mod),
    ("SIGN", Intr::Sign),
    ("ISIGN", Intr::Sign),
    ("DSIGN", Intr::Sign),
    ("REAL", Intr::Real),
    ("FLOAT", Intr::Real),
    ("SNGL", Intr::Real),
    ("DBLE", Intr::Dble),
    ("INT", Intr::Int),
    ("IFIX", Intr::Int),
    ("IDINT", Intr::Int),
    ("NINT", Intr::Nint),
    ("IDNINT", Intr::Nint),
];

pub fn intrinsic(name: &str) -> Option<Intr> {
    INTRINSICS.iter().find(|i| i.0 == name).map(|i| i.1)
}

/// What a name occurrence denotes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Res {
    /// A variable (a scalar, a whole array, or a procedure-valued dummy).
    Var(VarId),
    /// An array element (`Apply` on an array, or a `Ref` with subscripts).
    Elem(VarId),
    Const(Const),
    /// A nested subprogram: called by name, or passed as a procedure value.
    Nested(UnitId),
    /// A top-level subprogram.
    Global(UnitId),
    /// A call through a procedure-valued variable.
    CallVar(VarId),
    Intrinsic(Intr),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Dummy(usize),
    Result,
    Local,
    /// A DO loop's trip count or step, made by the lowering.
    Hidden,
}

/// An array bound.
#[derive(Clone, Debug)]
pub enum Bound {
    Const(f64),
    /// Evaluated on entry (an adjustable array's bound, from dummies).
    Expr(Expr),
}

#[derive(Clone, Debug)]
pub struct DimInfo {
    pub lo: Bound,
    /// `None` for `*`.
    pub hi: Option<Bound>,
}

#[derive(Clone, Debug)]
pub struct VarInfo {
    pub name: String,
    pub owner: UnitId,
    pub ty: Ty,
    pub dims: Option<Vec<DimInfo>>,
    pub role: Role,
    pub span: Span,
    /// For hidden variables: the ADF/ADR block whose body they live in (`None`: the unit's).
    pub body: Option<NodeId>,
    used_as_data: Option<Span>,
    used_as_proc: Option<Span>,
}

impl VarInfo {
    pub fn is_array(&self) -> bool {
        self.dims.is_some()
    }

    pub fn is_proc(&self) -> bool {
        self.used_as_proc.is_some()
    }
}

#[derive(Clone, Debug)]
enum DeclInfo {
    Var(VarId),
    Const(Const),
    External(Span),
}

/// How an actual argument is passed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    /// A variable or whole array, by reference (copied in and out).
    Whole(VarId),
    /// An array element, by reference.
    Elem(VarId),
    /// A nested subprogram as a procedure value (its environment comes back).
    Nested(UnitId),
    Global(UnitId),
    /// An expression or constant: by value.
    Value,
}

#[derive(Clone, Debug)]
pub enum Callee {
    Unit(UnitId),
    Var(VarId),
}

#[derive(Clone, Debug)]
pub struct CallSite {
    pub callee: Callee,
    pub args: Vec<(Arg, Shape, Span)>,
    pub span: Span,
    pub name: String,
}

pub struct UnitInfo<'a> {
    pub ast: &'a Unit,
    pub parent: Option<UnitId>,
    pub top: UnitId,
    /// `EQLBRM.F.G`: for messages and the names of the Core.
    pub path: String,
    nested: HashMap<String, UnitId>,
    pub dummies: Vec<VarId>,
    pub result: Option<VarId>,
    decls: HashMap<String, DeclInfo>,
    /// Declared types of names that turn out to be functions (`REAL F` for an external F).
    fn_types: HashMap<String, (Ty, Span)>,
    implicit: [Option<Ty>; 26],
    /// Every variable the unit owns.
    pub frame: Vec<VarId>,
    /// Mutable variables of enclosing units that travel with this unit's procedure value.
    pub env: Vec<VarId>,
    refs: BTreeSet<VarId>,
    writes: BTreeSet<VarId>,
    mat: BTreeSet<UnitId>,
    calls: Vec<CallSite>,
    /// Fixpoint: everything referenced / possibly changed in the nest.
    refs_all: BTreeSet<VarId>,
    writes_all: BTreeSet<VarId>,
    /// `writes_all` and the independent variables of the nest's ADF/ADR blocks: variables
    /// that must be threaded as state (so that a nested subprogram sees a derivative).
    threads_all: BTreeSet<VarId>,
    labels: HashMap<u32, (Option<NodeId>, Span)>,
}

struct Block {
    unit: UnitId,
    /// The block around this one, if any.
    parent: Option<NodeId>,
    refs: BTreeSet<VarId>,
    writes: BTreeSet<VarId>,
    mat: BTreeSet<UnitId>,
    calls: Vec<CallSite>,
    /// Variables whose derivative is seeded (ADF opening) or asked for (ADR closing).
    independent: BTreeSet<VarId>,
    /// Variables whose derivative is asked for (ADF closing) or seeded (ADR opening).
    dependent: BTreeSet<VarId>,
}

/// The analysis of a whole file.
pub struct Sema<'a> {
    pub units: Vec<UnitInfo<'a>>,
    pub vars: Vec<VarInfo>,
    globals: HashMap<String, UnitId>,
    pub main: UnitId,
    /// What each `Expr`/`Ref` node resolved to.
    pub res: HashMap<NodeId, Res>,
    /// The shape of each expression node.
    pub shapes: HashMap<NodeId, Shape>,
    /// The argument passing of each call (`Apply` and CALL nodes), by node id.
    pub sites: HashMap<NodeId, CallSite>,
    /// DO statements' hidden trip-count and step variables.
    pub do_vars: HashMap<NodeId, (VarId, Option<VarId>)>,
    /// ADF/ADR blocks: the variables they take (those they may read before writing, and
    /// the independent ones), in order.
    pub block_in: HashMap<NodeId, Vec<VarId>>,
    /// ADF/ADR blocks: the variables they give back (those they may change, and the
    /// dependent ones), in order.
    pub block_out: HashMap<NodeId, Vec<VarId>>,
    blocks: HashMap<NodeId, Block>,
    implicit_vars: HashMap<(UnitId, String), VarId>,
    /// The subprograms each procedure-valued variable may hold: procedure values are only
    /// made where a subprogram's name is passed, so these sets are exact up to paths.
    pub proc_sets: HashMap<VarId, BTreeSet<UnitId>>,
    /// What each unit's code gives back, by unit.
    pub conventions: Vec<Convention>,
}

/// What a subprogram's code returns besides its result: the dummies (by position) it or
/// another subprogram that may be called in its place may change, and whether their
/// environments may change. Shared by every subprogram that can reach one procedure variable,
/// so that a call through it has one shape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Convention {
    pub args: Vec<usize>,
    pub env: bool,
}

/// The walk's position: the unit, the ADF/ADR blocks around, whether inside the main program.
#[derive(Clone)]
struct Cx {
    unit: UnitId,
    blocks: Vec<NodeId>,
}

impl Cx {
    fn body(&self) -> Option<NodeId> {
        self.blocks.last().copied()
    }
}

fn default_implicit() -> [Option<Ty>; 26] {
    let mut t = [Some(Ty::Real); 26];
    for c in 'I'..='N' {
        t[(c as u8 - b'A') as usize] = Some(Ty::Int);
    }
    t
}

/// Analyses `units` (the top-level units of a file).
pub fn analyse<'a>(units: &'a [Unit], file_span: Span) -> R<Sema<'a>> {
    let mut s = Sema {
        units: Vec::new(),
        vars: Vec::new(),
        globals: HashMap::new(),
        main: usize::MAX,
        res: HashMap::new(),
        shapes: HashMap::new(),
        sites: HashMap::new(),
        do_vars: HashMap::new(),
        block_in: HashMap::new(),
        block_out: HashMap::new(),
        blocks: HashMap::new(),
        implicit_vars: HashMap::new(),
        proc_sets: HashMap::new(),
        conventions: Vec::new(),
    };
    for u in units {
        let id = s.add_unit(u, None)?;
        if u.kind == UnitKind::Program {
            if s.main != usize::MAX {
                return err(u.span, "a second main program (a file has one PROGRAM)");
            }
            s.main = id;
        } else if let Some(&other) = s.globals.get(&u.name) {
            let _ = other;
            return err(u.name_span, format!("{} is defined twice", u.name));
        }
        if u.kind != UnitKind::Program {
            s.globals.insert(u.name.clone(), id);
        }
    }
    if s.main == usize::MAX {
        return err(
            file_span,
            "no main program: a Farfel file needs a PROGRAM (the statements that run)",
        );
    }
    for id in 0..s.units.len() {
        s.declare(id)?;
    }
    for id in 0..s.units.len() {
        s.implicit_pass(id)?;
    }
    for id in 0..s.units.len() {
        s.walk_unit(id)?;
    }
    s.infer_procs()?;
    s.flow_procs();
    s.check_calls()?;
    s.fixpoint();
    s.conventions();
    s.check_aliasing()?;
    Ok(s)
}

impl<'a> Sema<'a> {
    fn add_unit(&mut self, u: &'a Unit, parent: Option<UnitId>) -> R<UnitId> {
        let id = self.units.len();
        let top = parent.map_or(id, |p| self.units[p].top);
        let path = match parent {
            Some(p) => format!("{}.{}", self.units[p].path, u.name),
            None => u.name.clone(),
        };
        self.units.push(UnitInfo {
            ast: u,
            parent,
            top,
            path,
            nested: HashMap::new(),
            dummies: Vec::new(),
            result: None,
            decls: HashMap::new(),
            fn_types: HashMap::new(),
            implicit: default_implicit(),
            frame: Vec::new(),
            env: Vec::new(),
            refs: BTreeSet::new(),
            writes: BTreeSet::new(),
            mat: BTreeSet::new(),
            calls: Vec::new(),
            refs_all: BTreeSet::new(),
            writes_all: BTreeSet::new(),
            threads_all: BTreeSet::new(),
            labels: HashMap::new(),
        });
        for n in &u.nested {
            let nid = self.add_unit(n, Some(id))?;
            if self.units[id].nested.insert(n.name.clone(), nid).is_some() {
                return err(
                    n.name_span,
                    format!("{} is defined twice in {}", n.name, u.name),
                );
            }
        }
        Ok(id)
    }

    fn new_var(&mut self, v: VarInfo) -> VarId {
        let id = self.vars.len();
        self.units[v.owner].frame.push(id);
        self.vars.push(v);
        id
    }

    fn implicit_type(&self, u: UnitId, name: &str, span: Span) -> R<Ty> {
        let c = name.as_bytes()[0];
        let i = (c.wrapping_sub(b'A')) as usize;
        match self.units[u].implicit.get(i).copied().flatten() {
            Some(t) => Ok(t),
            None => err(
                span,
                format!("{name} has no type (IMPLICIT NONE): declare it"),
            ),
        }
    }

    /// Builds the scope of unit `u`: implicit rules, dummies, declarations, the result.
    fn declare(&mut self, u: UnitId) -> R<()> {
        let ast = self.units[u].ast;
        if let Some(p) = self.units[u].parent {
            self.units[u].implicit = self.units[p].implicit;
        }
        // IMPLICIT first: it types everything else.
        for d in &ast.decls {
            if let Decl::Implicit(rules, _) = d {
                match rules {
                    None => self.units[u].implicit = [None; 26],
                    Some(rules) => {
                        for &(ty, a, b) in rules {
                            if b < a {
                                return err(ast.span, format!("IMPLICIT range {a}-{b} is empty"));
                            }
                            for c in a..=b {
                                self.units[u].implicit[(c as u8 - b'A') as usize] = Some(ty);
                            }
                        }
                    }
                }
            }
        }
        let mut types: HashMap<String, (Ty, Span)> = HashMap::new();
        let mut dims: HashMap<String, (&'a [Dim], Span)> = HashMap::new();
        let mut externals: HashMap<String, Span> = HashMap::new();
        for d in &ast.decls {
            match d {
                Decl::Type(ty, ents, _) => {
                    for e in ents {
                        if types.insert(e.name.clone(), (*ty, e.span)).is_some() {
                            return err(e.span, format!("{} is typed twice", e.name));
                        }
                        if let Some(ds) = &e.dims {
                            if dims.insert(e.name.clone(), (ds, e.span)).is_some() {
                                return err(e.span, format!("{} is dimensioned twice", e.name));
                            }
                        }
                    }
                }
                Decl::Dimension(ents) => {
                    for e in ents {
                        let ds = e.dims.as_deref().unwrap_or(&[]);
                        if dims.insert(e.name.clone(), (ds, e.span)).is_some() {
                            return err(e.span, format!("{} is dimensioned twice", e.name));
                        }
                    }
                }
                Decl::External(names) => {
                    for (n, s) in names {
                        externals.insert(n.clone(), *s);
                    }
                }
                Decl::Intrinsic(names) => {
                    if let Some((n, s)) = names.first() {
                        if intrinsic(n).is_none() {
                            return err(*s, format!("{n} is not an intrinsic of the subset"));
                        }
                        return err(
                            *s,
                            "INTRINSIC (passing an intrinsic as an argument) is not supported: wrap it in a FUNCTION",
                        );
                    }
                }
                Decl::Parameter(_) | Decl::Implicit(..) => {}
            }
        }
        // The function result.
        if let UnitKind::Function(header_ty) = ast.kind {
            let declared = types.remove(&ast.name);
            if let (Some(_), Some((_, s))) = (header_ty, declared) {
                return err(s, format!("the type of {} is given twice", ast.name));
            }
            if let Some((_, s)) = dims.get(&ast.name) {
                return err(*s, "a function's result cannot be an array");
            }
            let ty = match header_ty.or(declared.map(|d| d.0)) {
                Some(t) => t,
                None => self.implicit_type(u, &ast.name, ast.name_span)?,
            };
            let v = self.new_var(VarInfo {
                name: ast.name.clone(),
                owner: u,
                ty,
                dims: None,
                role: Role::Result,
                span: ast.name_span,
                body: None,
                used_as_data: Some(ast.name_span),
                used_as_proc: None,
            });
            self.units[u].result = Some(v);
        }
        // Dummies.
        for (i, (name, span)) in ast.params.iter().enumerate() {
            if ast.params[..i].iter().any(|p| &p.0 == name) {
                return err(*span, format!("{name} is a dummy argument twice"));
            }
            if self.units[u].nested.contains_key(name) {
                return err(
                    *span,
                    format!("{name} is both a dummy argument and a subprogram"),
                );
            }
            let ty = match types.remove(name) {
                Some((t, _)) => t,
                None => self.implicit_type(u, name, *span).unwrap_or(Ty::Real),
            };
            let v = self.new_var(VarInfo {
                name: name.clone(),
                owner: u,
                ty,
                dims: None,
                role: Role::Dummy(i),
                span: *span,
                body: None,
                used_as_data: None,
                used_as_proc: externals.remove(name),
            });
            self.units[u].dummies.push(v);
            self.units[u].decls.insert(name.clone(), DeclInfo::Var(v));
        }
        // PARAMETER constants, in order (each may use the ones before).
        for d in &ast.decls {
            if let Decl::Parameter(list) = d {
                for (name, span, e) in list {
                    let value = self.const_eval(u, e)?;
                    let ty = match types.remove(name) {
                        Some((t, _)) => t,
                        None => self.implicit_type(u, name, *span)?,
                    };
                    let c = convert_const(value, ty, *span)?;
                    if self.units[u]
                        .decls
                        .insert(name.clone(), DeclInfo::Const(c))
                        .is_some()
                    {
                        return err(*span, format!("{name} is declared twice"));
                    }
                }
            }
        }
        for (name, span) in externals {
            if self.units[u].decls.contains_key(&name) {
                return err(span, format!("{name} is EXTERNAL and a variable"));
            }
            self.units[u].decls.insert(name, DeclInfo::External(span));
        }
        // Declared variables (typed or dimensioned).
        let mut names: Vec<String> = types.keys().chain(dims.keys()).cloned().collect();
        names.sort();
        names.dedup();
        for name in names {
            let span = types
                .get(&name)
                .map(|t| t.1)
                .or(dims.get(&name).map(|d| d.1))
                .unwrap_or(ast.span);
            if self.units[u].decls.contains_key(&name) {
                if dims.contains_key(&name)
                    && !matches!(self.units[u].decls.get(&name), Some(DeclInfo::Var(_)))
                {
                    return err(span, format!("{name} cannot be an array"));
                }
                continue;
            }
            if self.units[u].nested.contains_key(&name) {
                if let Some((t, s)) = types.get(&name) {
                    self.units[u].fn_types.insert(name.clone(), (*t, *s));
                    continue;
                }
                return err(span, format!("{name} is a subprogram here"));
            }
            let ty = match types.get(&name) {
                Some((t, _)) => *t,
                None => self.implicit_type(u, &name, span)?,
            };
            if !dims.contains_key(&name) {
                // A typed scalar that is only ever called is a function's type; decided on use.
                self.units[u].fn_types.insert(name.clone(), (ty, span));
            }
            let v = self.new_var(VarInfo {
                name: name.clone(),
                owner: u,
                ty,
                dims: None,
                role: Role::Local,
                span,
                body: None,
                used_as_data: None,
                used_as_proc: None,
            });
            self.units[u].decls.insert(name, DeclInfo::Var(v));
        }
        // Dimensions of dummies and locals.
        for (name, (ds, span)) in dims {
            let Some(DeclInfo::Var(v)) = self.units[u].decls.get(&name).cloned() else {
                continue;
            };
            let is_dummy = matches!(self.vars[v].role, Role::Dummy(_));
            let mut out = Vec::new();
            for (k, d) in ds.iter().enumerate() {
                let lo = match &d.lo {
                    None => Bound::Const(1.0),
                    Some(e) => self.bound(u, e, is_dummy)?,
                };
                let hi = match &d.hi {
                    None if is_dummy && k + 1 == ds.len() => None,
                    None => {
                        return err(
                            d.span,
                            "`*` is only allowed as the last upper bound of a dummy array",
                        )
                    }
                    Some(e) => Some(self.bound(u, e, is_dummy)?),
                };
                out.push(DimInfo { lo, hi });
            }
            if !is_dummy {
                if let Some(n) = const_size(&out) {
                    if n < 0.0 {
                        return err(span, format!("{name} has a negative size"));
                    }
                }
            }
            self.vars[v].dims = Some(out);
            self.vars[v].used_as_data = Some(span);
        }
        Ok(())
    }

    fn bound(&mut self, u: UnitId, e: &Expr, adjustable: bool) -> R<Bound> {
        match self.const_eval(u, e) {
            Ok(c) => match c {
                Const::Num(v, Ty::Int) => Ok(Bound::Const(v)),
                _ => err(e.span, "an array bound is an INTEGER"),
            },
            Err(_) if adjustable => Ok(Bound::Expr(e.clone())),
            Err(_) => err(
                e.span,
                "a local array needs constant bounds (an adjustable array must be a dummy argument)",
            ),
        }
    }

    /// The value of a constant expression in unit `u`, if it is one.
    pub fn const_value(&self, u: UnitId, e: &Expr) -> Option<Const> {
        self.const_eval(u, e).ok()
    }

    /// A PARAMETER's value.
    fn const_eval(&self, u: UnitId, e: &Expr) -> R<Const> {
        let num = |c: Const, s: Span| match c {
            Const::Num(v, t) => Ok((v, t)),
            Const::Bool(_) => err(s, "LOGICAL in arithmetic"),
        };
        Ok(match &e.kind {
            ExprKind::Int(v) => Const::Num(*v, Ty::Int),
            ExprKind::Real(v, d) => Const::Num(*v, if *d { Ty::Double } else { Ty::Real }),
            ExprKind::Logical(b) => Const::Bool(*b),
            ExprKind::Paren(x) => self.const_eval(u, x)?,
            ExprKind::Name(n) => {
                let mut s = Some(u);
                loop {
                    let Some(su) = s else {
                        return err(e.span, format!("{n} is not a constant"));
                    };
                    if let Some(d) = self.units[su].decls.get(n) {
                        match d {
                            DeclInfo::Const(c) => break *c,
                            _ => return err(e.span, format!("{n} is not a constant")),
                        }
                    }
                    s = self.units[su].parent;
                }
            }
            ExprKind::Neg(x) => {
                let (v, t) = num(self.const_eval(u, x)?, x.span)?;
                Const::Num(if t == Ty::Int { 0.0 - v } else { -v }, t)
            }
            ExprKind::Bin(op, a, b) => {
                let (x, tx) = num(self.const_eval(u, a)?, a.span)?;
                let (y, ty) = num(self.const_eval(u, b)?, b.span)?;
                let t = wider(tx, ty);
                let v = match op {
                    BinOp::Add => x + y,
                    BinOp::Sub => x - y,
                    BinOp::Mul => x * y,
                    BinOp::Div if t == Ty::Int => {
                        if y == 0.0 {
                            return err(e.span, "division by zero in a constant");
                        }
                        (x / y).trunc()
                    }
                    BinOp::Div => x / y,
                    BinOp::Pow => {
                        let p = x.powf(y);
                        if tx == Ty::Int && ty == Ty::Int && y < 0.0 {
                            (1.0 / x.powf(-y)).trunc()
                        } else {
                            p
                        }
                    }
                    _ => return err(e.span, "only arithmetic is allowed in a constant"),
                };
                Const::Num(v + 0.0, t)
            }
            _ => return err(e.span, "not a constant expression"),
        })
    }

    // ---------------------------------------------------------------------------------------
    // Name resolution.

    /// The declared meaning of `name` seen from unit `u`, innermost scope first. `call`: the
    /// name is followed by parentheses.
    fn scoped(&self, u: UnitId, name: &str, call: bool) -> R<Option<Res>> {
        let mut s = Some(u);
        while let Some(su) = s {
            let info = &self.units[su];
            if su == u {
                if let Some(r) = info.result {
                    if name == info.ast.name {
                        return Ok(Some(Res::Var(r)));
                    }
                }
            }
            match info.decls.get(name) {
                Some(DeclInfo::Var(v)) => {
                    let var = &self.vars[*v];
                    let typed_function = call
                        && var.role == Role::Local
                        && !var.is_array()
                        && info.fn_types.contains_key(name);
                    if !typed_function {
                        return Ok(Some(Res::Var(*v)));
                    }
                }
                Some(DeclInfo::Const(c)) => return Ok(Some(Res::Const(*c))),
                Some(DeclInfo::External(span)) => {
                    return match self.procedure(su, name) {
                        Some(r) => Ok(Some(r)),
                        None => err(
                            *span,
                            format!("EXTERNAL {name}: there is no subprogram {name}"),
                        ),
                    };
                }
                None => {}
            }
            if let Some(&n) = info.nested.get(name) {
                return Ok(Some(Res::Nested(n)));
            }
            s = info.parent;
        }
        Ok(None)
    }

    /// A subprogram named `name` visible from unit `u`.
    fn procedure(&self, u: UnitId, name: &str) -> Option<Res> {
        let mut s = Some(u);
        while let Some(su) = s {
            if let Some(&n) = self.units[su].nested.get(name) {
                return Some(Res::Nested(n));
            }
            s = self.units[su].parent;
        }
        self.globals.get(name).map(|&g| Res::Global(g))
    }

    fn implicit_var(&mut self, u: UnitId, name: &str, span: Span) -> R<VarId> {
        let top = self.units[u].top;
        if let Some(&v) = self.implicit_vars.get(&(top, name.to_string())) {
            return Ok(v);
        }
        // IMPLICIT NONE anywhere on the way up forbids it.
        let mut s = Some(u);
        while let Some(su) = s {
            if self.units[su].implicit.iter().all(|t| t.is_none()) {
                return err(span, format!("{name} is not declared (IMPLICIT NONE)"));
            }
            s = self.units[su].parent;
        }
        let ty = self.implicit_type(top, name, span)?;
        let v = self.new_var(VarInfo {
            name: name.to_string(),
            owner: top,
            ty,
            dims: None,
            role: Role::Local,
            span,
            body: None,
            used_as_data: None,
            used_as_proc: None,
        });
        self.implicit_vars.insert((top, name.to_string()), v);
        Ok(v)
    }

    /// A name used as a value or assigned.
    fn resolve_value(&mut self, u: UnitId, name: &str, span: Span) -> R<Res> {
        if let Some(r) = self.scoped(u, name, false)? {
            return Ok(r);
        }
        Ok(Res::Var(self.implicit_var(u, name, span)?))
    }

    /// A bare name as an actual argument: a variable if there is one, else a subprogram.
    fn resolve_actual(&mut self, u: UnitId, name: &str, span: Span) -> R<Res> {
        if let Some(r) = self.scoped(u, name, false)? {
            return Ok(r);
        }
        let top = self.units[u].top;
        if let Some(&v) = self.implicit_vars.get(&(top, name.to_string())) {
            return Ok(Res::Var(v));
        }
        if let Some(&g) = self.globals.get(name) {
            return Ok(Res::Global(g));
        }
        Ok(Res::Var(self.implicit_var(u, name, span)?))
    }

    /// `NAME(...)` in an expression or a CALL.
    fn resolve_call(&mut self, u: UnitId, name: &str, span: Span) -> R<Res> {
        match self.scoped(u, name, true)? {
            Some(Res::Var(v)) => {
                let var = &self.vars[v];
                if var.is_array() {
                    return Ok(Res::Elem(v));
                }
                match var.role {
                    Role::Dummy(_) => Ok(Res::CallVar(v)),
                    Role::Result => err(
                        span,
                        format!(
                            "{name} is the result variable here: a function cannot call itself"
                        ),
                    ),
                    _ => err(
                        span,
                        format!("{name} is a scalar variable, not an array or a function"),
                    ),
                }
            }
            Some(Res::Const(_)) => err(span, format!("{name} is a constant (PARAMETER)")),
            Some(r) => Ok(r),
            None => {
                if let Some(&g) = self.globals.get(name) {
                    return Ok(Res::Global(g));
                }
                if let Some(i) = intrinsic(name) {
                    return Ok(Res::Intrinsic(i));
                }
                let top = self.units[u].top;
                if self.implicit_vars.contains_key(&(top, name.to_string())) {
                    return err(
                        span,
                        format!("{name} is a variable, not an array (declare its dimensions) or a function"),
                    );
                }
                err(span, format!("there is no array or function named {name}"))
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // Implicit variables: names used as variables, before any actual argument is resolved.

    fn implicit_pass(&mut self, u: UnitId) -> R<()> {
        let ast = self.units[u].ast;
        let mut names: Vec<(String, Span)> = Vec::new();
        collect_stmts(&ast.body, &mut names);
        for (n, s) in names {
            if self.scoped(u, &n, false)?.is_none() {
                self.implicit_var(u, &n, s)?;
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // The walk: types, resolutions, effects.

    fn touch(&mut self, cx: &Cx, v: VarId, write: bool) {
        if self.vars[v].role == Role::Hidden {
            return;
        }
        let u = &mut self.units[cx.unit];
        u.refs.insert(v);
        if write {
            u.writes.insert(v);
        }
        for b in &cx.blocks {
            if let Some(bl) = self.blocks.get_mut(b) {
                bl.refs.insert(v);
                if write {
                    bl.writes.insert(v);
                }
            }
        }
    }

    fn materialize(&mut self, cx: &Cx, n: UnitId) {
        self.units[cx.unit].mat.insert(n);
        for b in &cx.blocks {
            if let Some(bl) = self.blocks.get_mut(b) {
                bl.mat.insert(n);
            }
        }
    }

    fn data_use(&mut self, v: VarId, span: Span) -> R<()> {
        if let Some(p) = self.vars[v].used_as_proc {
            let _ = p;
            return err(
                span,
                format!(
                    "{} is a procedure (EXTERNAL or called) and is used as a variable here",
                    self.vars[v].name
                ),
            );
        }
        self.vars[v].used_as_data.get_or_insert(span);
        Ok(())
    }

    fn proc_use(&mut self, v: VarId, span: Span) -> R<()> {
        if self.vars[v].used_as_data.is_some() {
            return err(
                span,
                format!(
                    "{} is a variable and is used as a procedure here",
                    self.vars[v].name
                ),
            );
        }
        self.vars[v].used_as_proc.get_or_insert(span);
        Ok(())
    }

    fn walk_unit(&mut self, u: UnitId) -> R<()> {
        let ast = self.units[u].ast;
        let cx = Cx {
            unit: u,
            blocks: Vec::new(),
        };
        // Labels: unique in the unit; each belongs to the body (unit or ADF block) it is in.
        let mut labels = HashMap::new();
        collect_labels(&ast.body, None, &mut labels)?;
        if let Some((l, span)) = ast.end_label {
            if labels.insert(l, (None, span)).is_some() {
                return err(span, format!("label {l} is defined twice"));
            }
        }
        self.units[u].labels = labels;
        // Adjustable bounds are read on entry.
        let frame = self.units[u].frame.clone();
        for v in frame {
            let Some(dims) = self.vars[v].dims.clone() else {
                continue;
            };
            for d in dims {
                for b in [Some(d.lo), d.hi].into_iter().flatten() {
                    if let Bound::Expr(e) = b {
                        let t = self.expr(&cx, &e)?;
                        if t != Shape::Scalar(Ty::Int) {
                            return err(e.span, "an array bound is an INTEGER expression");
                        }
                    }
                }
            }
        }
        self.stmts(&cx, &ast.body)
    }

    fn stmts(&mut self, cx: &Cx, stmts: &[Stmt]) -> R<()> {
        for s in stmts {
            self.stmt(cx, s)?;
        }
        Ok(())
    }

    fn hidden(&mut self, cx: &Cx, name: &str, ty: Ty, span: Span) -> VarId {
        self.new_var(VarInfo {
            name: name.to_string(),
            owner: cx.unit,
            ty,
            dims: None,
            role: Role::Hidden,
            span,
            body: cx.body(),
            used_as_data: Some(span),
            used_as_proc: None,
        })
    }

    fn stmt(&mut self, cx: &Cx, s: &Stmt) -> R<()> {
        let is_main = self.units[cx.unit].ast.kind == UnitKind::Program;
        match &s.kind {
            StmtKind::Assign(r, e) => {
                if r.subs.is_none() && !self.is_variable_name(cx.unit, &r.name)? {
                    return err(r.name_span, format!("{} is not a variable", r.name));
                }
                let target = self.target(cx, r)?;
                let value = self.expr(cx, e)?;
                assignable(target, value, e.span, &r.name)?;
            }
            StmtKind::Call(name, nspan, args) => {
                let res = self.resolve_call(cx.unit, name, *nspan)?;
                self.call(cx, s.id, name, res, args, s.span, *nspan, true)?;
            }
            StmtKind::If {
                arms, else_body, ..
            } => {
                for arm in arms {
                    self.condition(cx, &arm.cond)?;
                    self.stmts(cx, &arm.body)?;
                }
                if let Some(b) = else_body {
                    self.stmts(cx, b)?;
                }
            }
            StmtKind::LogicalIf(c, inner) => {
                self.condition(cx, c)?;
                self.stmt(cx, inner)?;
            }
            StmtKind::Do {
                var,
                start,
                end,
                step,
                body,
                ..
            } => {
                let t = self.do_control(cx, var, start, end, step.as_ref())?;
                let cnt = self.hidden(cx, "%trips", t, s.span);
                let stp = match step {
                    Some(e) if self.const_eval(cx.unit, e).is_err() => {
                        Some(self.hidden(cx, "%step", t, e.span))
                    }
                    _ => None,
                };
                if let Some(e) = step {
                    if let Ok(Const::Num(0.0, _)) = self.const_eval(cx.unit, e) {
                        return err(e.span, "a DO loop's step cannot be zero");
                    }
                }
                self.do_vars.insert(s.id, (cnt, stp));
                self.stmts(cx, body)?;
            }
            StmtKind::Goto(l, span) => {
                let here = cx.body();
                match self.units[cx.unit].labels.get(l) {
                    None => return err(*span, format!("there is no statement labelled {l} in {}", self.units[cx.unit].path)),
                    Some((b, _)) if *b != here => {
                        return err(
                            *span,
                            format!("GOTO {l} would leave or enter an ADF/ADR block: a block is a function of its own"),
                        )
                    }
                    Some(_) => {}
                }
            }
            StmtKind::Continue => {}
            StmtKind::Return => {
                if !cx.blocks.is_empty() {
                    return err(s.span, "RETURN inside an ADF/ADR block");
                }
            }
            StmtKind::Stop => {
                if !is_main {
                    return err(
                        s.span,
                        "STOP is only supported in the main program (use RETURN and a flag)",
                    );
                }
                if !cx.blocks.is_empty() {
                    return err(s.span, "STOP inside an ADF/ADR block");
                }
            }
            StmtKind::Read(items) => {
                for it in items {
                    self.read_item(cx, it)?;
                }
            }
            StmtKind::Print(items) => {
                for it in items {
                    self.print_item(cx, it)?;
                }
            }
            StmtKind::Ad {
                reverse,
                opening,
                body,
                closing,
                ..
            } => {
                for it in opening {
                    self.ad_item(cx, it, false, *reverse, Some(s.id))?;
                }
                self.blocks.insert(
                    s.id,
                    Block {
                        unit: cx.unit,
                        parent: cx.body(),
                        refs: BTreeSet::new(),
                        writes: BTreeSet::new(),
                        mat: BTreeSet::new(),
                        calls: Vec::new(),
                        independent: BTreeSet::new(),
                        dependent: BTreeSet::new(),
                    },
                );
                let mut inner = cx.clone();
                inner.blocks.push(s.id);
                // The independent and dependent variables are the block's too.
                for it in opening {
                    self.ad_vars(&inner, it, !*reverse)?;
                }
                for it in closing {
                    self.ad_vars(&inner, it, *reverse)?;
                }
                self.stmts(&inner, body)?;
                for it in closing {
                    self.ad_item(cx, it, true, *reverse, Some(s.id))?;
                }
            }
        }
        Ok(())
    }

    /// Whether `name` may be assigned: a variable (not a constant or subprogram).
    fn is_variable_name(&mut self, u: UnitId, name: &str) -> R<bool> {
        Ok(!matches!(
            self.scoped(u, name, false)?,
            Some(Res::Const(_) | Res::Nested(_) | Res::Global(_))
        ))
    }

    fn do_control(
        &mut self,
        cx: &Cx,
        var: &Ref,
        start: &Expr,
        end: &Expr,
        step: Option<&Expr>,
    ) -> R<Ty> {
        let t = match self.target(cx, var)? {
            Shape::Scalar(t) if t.is_numeric() => t,
            _ => return err(var.span, "a DO variable is an INTEGER or REAL scalar"),
        };
        for e in [Some(start), Some(end), step].into_iter().flatten() {
            match self.expr(cx, e)? {
                Shape::Scalar(t) if t.is_numeric() => {}
                _ => return err(e.span, "a DO bound is a number"),
            }
        }
        Ok(t)
    }

    fn condition(&mut self, cx: &Cx, c: &Expr) -> R<()> {
        match self.expr(cx, c)? {
            Shape::Scalar(Ty::Logical) => Ok(()),
            Shape::Scalar(t) => err(
                c.span,
                format!(
                    "IF needs a LOGICAL condition, not {} (compare with .NE. 0?)",
                    t.name()
                ),
            ),
            _ => err(c.span, "IF needs a LOGICAL condition"),
        }
    }

    /// A variable or element being assigned: its shape (recorded, with the write).
    fn target(&mut self, cx: &Cx, r: &Ref) -> R<Shape> {
        let res = self.resolve_value(cx.unit, &r.name, r.name_span)?;
        let v = match res {
            Res::Var(v) => v,
            Res::Const(_) => {
                return err(r.name_span, format!("{} is a constant (PARAMETER)", r.name))
            }
            _ => {
                return err(
                    r.name_span,
                    format!("{} is a subprogram, not a variable", r.name),
                )
            }
        };
        self.data_use(v, r.name_span)?;
        let var = self.vars[v].clone();
        let shape = match (&r.subs, &var.dims) {
            (Some(subs), Some(dims)) => {
                self.subscripts(cx, subs, dims.len(), &r.name, r.span)?;
                self.res.insert(r.id, Res::Elem(v));
                Shape::Scalar(var.ty)
            }
            (Some(_), None) => {
                return err(
                    r.span,
                    format!(
                        "{} is not an array (statement functions are not supported: write a FUNCTION, nested if need be)",
                        r.name
                    ),
                )
            }
            (None, Some(_)) => {
                self.res.insert(r.id, Res::Var(v));
                Shape::Array(var.ty)
            }
            (None, None) => {
                self.res.insert(r.id, Res::Var(v));
                Shape::Scalar(var.ty)
            }
        };
        self.touch(cx, v, true);
        Ok(shape)
    }

    fn subscripts(&mut self, cx: &Cx, subs: &[Expr], rank: usize, name: &str, span: Span) -> R<()> {
        if subs.len() != rank {
            return err(
                span,
                format!("{name} has {rank} dimension(s), not {}", subs.len()),
            );
        }
        for s in subs {
            match self.expr(cx, s)? {
                Shape::Scalar(Ty::Int) => {}
                Shape::Scalar(t) => {
                    return err(
                        s.span,
                        format!("a subscript is an INTEGER, not {}", t.name()),
                    )
                }
                _ => return err(s.span, "a subscript is an INTEGER"),
            }
        }
        Ok(())
    }

    fn read_item(&mut self, cx: &Cx, it: &IoItem) -> R<()> {
        match it {
            IoItem::Expr(e) => {
                let r = match &e.kind {
                    ExprKind::Name(n) => Ref {
                        id: e.id,
                        name: n.clone(),
                        name_span: e.span,
                        subs: None,
                        span: e.span,
                    },
                    ExprKind::Apply(n, ns, args) => Ref {
                        id: e.id,
                        name: n.clone(),
                        name_span: *ns,
                        subs: Some(args.clone()),
                        span: e.span,
                    },
                    _ => return err(e.span, "READ reads into variables and array elements"),
                };
                match self.target(cx, &r)? {
                    Shape::Scalar(t) | Shape::Array(t) if t.is_numeric() => {}
                    _ => {
                        return err(
                            e.span,
                            "READ reads numbers (INTEGER, REAL, DOUBLE PRECISION)",
                        )
                    }
                }
                let s = self.res[&r.id];
                self.shapes.insert(
                    e.id,
                    match s {
                        Res::Var(v) if self.vars[v].is_array() => Shape::Array(self.vars[v].ty),
                        Res::Var(v) | Res::Elem(v) => Shape::Scalar(self.vars[v].ty),
                        _ => Shape::Proc,
                    },
                );
            }
            IoItem::Loop(l) => {
                self.do_control(cx, &l.var, &l.start, &l.end, l.step.as_ref())?;
                for i in &l.items {
                    self.read_item(cx, i)?;
                }
            }
        }
        Ok(())
    }

    fn print_item(&mut self, cx: &Cx, it: &IoItem) -> R<()> {
        match it {
            IoItem::Expr(e) => {
                self.expr_or_array(cx, e)?;
            }
            IoItem::Loop(l) => {
                self.do_control(cx, &l.var, &l.start, &l.end, l.step.as_ref())?;
                for i in &l.items {
                    self.print_item(cx, i)?;
                }
            }
        }
        Ok(())
    }

    /// The variables named in an ADF/ADR item belong to the block (the innermost of `cx`):
    /// independent ones, whose derivatives go in, or dependent ones.
    fn ad_vars(&mut self, cx: &Cx, it: &AdItem, independent: bool) -> R<()> {
        match it {
            AdItem::Open { var, .. } | AdItem::Close { var, .. } => {
                if let Res::Var(v) = self.resolve_value(cx.unit, &var.name, var.name_span)? {
                    self.touch(cx, v, false);
                    if let Some(b) = cx.body().and_then(|b| self.blocks.get_mut(&b)) {
                        if independent {
                            b.independent.insert(v);
                        } else {
                            b.dependent.insert(v);
                        }
                    }
                }
            }
            AdItem::Loop(l) => {
                for i in &l.items {
                    self.ad_vars(cx, i, independent)?;
                }
            }
        }
        Ok(())
    }

    /// Scalars a block assigns in its leading straight-line statements before anything
    /// there refers to them: their values on entry cannot matter.
    fn assigned_first(&self, body: &[Stmt]) -> BTreeSet<VarId> {
        let mut seen: BTreeSet<VarId> = BTreeSet::new();
        let mut first = BTreeSet::new();
        for s in body {
            if s.label.is_some() {
                break;
            }
            match &s.kind {
                StmtKind::Assign(r, e) => {
                    let mut rhs = BTreeSet::new();
                    self.vars_of_expr(e, &mut rhs);
                    for sub in r.subs.iter().flatten() {
                        self.vars_of_expr(sub, &mut rhs);
                    }
                    let target = self.res.get(&r.id).copied();
                    if let (Some(Res::Var(v)), None) = (target, &r.subs) {
                        if !seen.contains(&v) && !rhs.contains(&v) && !self.vars[v].is_array() {
                            first.insert(v);
                        }
                        seen.insert(v);
                    }
                    if let Some(Res::Elem(v)) = target {
                        seen.insert(v);
                    }
                    seen.extend(rhs);
                }
                StmtKind::Call(_, _, args) => {
                    if let Some(site) = self.sites.get(&s.id) {
                        self.vars_of_site(site, &mut seen);
                    }
                    for a in args {
                        self.vars_of_expr(a, &mut seen);
                    }
                }
                StmtKind::Print(items) => {
                    for it in items {
                        match it {
                            IoItem::Expr(e) => self.vars_of_expr(e, &mut seen),
                            IoItem::Loop(_) => return first,
                        }
                    }
                }
                StmtKind::Continue => {}
                _ => break,
            }
        }
        first
    }

    /// Every variable an expression may read (its calls' environments included).
    fn vars_of_expr(&self, e: &Expr, out: &mut BTreeSet<VarId>) {
        match self.res.get(&e.id) {
            Some(Res::Var(v) | Res::Elem(v) | Res::CallVar(v)) => {
                out.insert(*v);
            }
            Some(Res::Nested(n)) => out.extend(self.units[*n].env.iter().copied()),
            _ => {}
        }
        if let Some(site) = self.sites.get(&e.id) {
            self.vars_of_site(site, out);
        }
        match &e.kind {
            ExprKind::Apply(_, _, args) => {
                for a in args {
                    self.vars_of_expr(a, out);
                }
            }
            ExprKind::Paren(x) | ExprKind::Neg(x) | ExprKind::Not(x) => self.vars_of_expr(x, out),
            ExprKind::Bin(_, a, b) => {
                self.vars_of_expr(a, out);
                self.vars_of_expr(b, out);
            }
            _ => {}
        }
    }

    /// The variables a call reads besides its argument expressions: the callee's or the
    /// passed subprograms' environments, the procedure variable called.
    fn vars_of_site(&self, site: &CallSite, out: &mut BTreeSet<VarId>) {
        match site.callee {
            Callee::Unit(c) => out.extend(self.units[c].env.iter().copied()),
            Callee::Var(p) => {
                out.insert(p);
            }
        }
        for (arg, _, _) in &site.args {
            match arg {
                Arg::Whole(v) | Arg::Elem(v) => {
                    out.insert(*v);
                }
                Arg::Nested(n) => out.extend(self.units[*n].env.iter().copied()),
                _ => {}
            }
        }
    }

    fn ad_item(
        &mut self,
        cx: &Cx,
        it: &AdItem,
        closing: bool,
        reverse: bool,
        _block: Option<NodeId>,
    ) -> R<()> {
        let word = if reverse { "COTANGENT" } else { "TANGENT" };
        let differentiated = |s: &mut Self, var: &Ref| -> R<()> {
            let res = s.resolve_value(cx.unit, &var.name, var.name_span)?;
            let Res::Var(v) = res else {
                return err(
                    var.name_span,
                    format!("{word}({}): not a variable", var.name),
                );
            };
            let info = s.vars[v].clone();
            if !info.ty.is_real() {
                return err(
                    var.name_span,
                    format!(
                        "{word}({}): {} is {}; only REAL and DOUBLE PRECISION variables have derivatives",
                        var.name,
                        var.name,
                        info.ty.name()
                    ),
                );
            }
            match (&var.subs, &info.dims) {
                (Some(subs), Some(dims)) => {
                    s.subscripts(cx, subs, dims.len(), &var.name, var.span)?;
                    s.res.insert(var.id, Res::Elem(v));
                }
                (None, None) => {
                    s.res.insert(var.id, Res::Var(v));
                }
                (None, Some(_)) => {
                    return err(
                        var.span,
                        format!("{word}({}) of a whole array: name its elements with an implied DO, ({word}({}(I)) = ..., I = 1, N)", var.name, var.name),
                    )
                }
                (Some(_), None) => return err(var.span, format!("{} is not an array", var.name)),
            }
            s.data_use(v, var.name_span)?;
            s.touch(cx, v, false);
            Ok(())
        };
        match it {
            AdItem::Open { var, value, .. } => {
                if closing {
                    return err(
                        var.span,
                        "internal error: an opening item in a closing list",
                    );
                }
                differentiated(self, var)?;
                match self.expr(cx, value)? {
                    Shape::Scalar(t) if t.is_numeric() => {}
                    _ => return err(value.span, format!("a {word} is a number")),
                }
            }
            AdItem::Close { dest, var, .. } => {
                differentiated(self, var)?;
                match self.target(cx, dest)? {
                    Shape::Scalar(t) if t.is_numeric() => {}
                    _ => {
                        return err(
                            dest.span,
                            format!("a {word} goes into a numeric variable or element"),
                        )
                    }
                }
            }
            AdItem::Loop(l) => {
                self.do_control(cx, &l.var, &l.start, &l.end, l.step.as_ref())?;
                for i in &l.items {
                    self.ad_item(cx, i, closing, reverse, _block)?;
                }
            }
        }
        Ok(())
    }

    /// An expression that may also be a whole array (a PRINT item).
    fn expr_or_array(&mut self, cx: &Cx, e: &Expr) -> R<Shape> {
        if let ExprKind::Name(n) = &e.kind {
            if let Res::Var(v) = self.resolve_value(cx.unit, n, e.span)? {
                if self.vars[v].is_array() {
                    self.res.insert(e.id, Res::Var(v));
                    let s = Shape::Array(self.vars[v].ty);
                    self.shapes.insert(e.id, s);
                    self.touch(cx, v, false);
                    return Ok(s);
                }
            }
        }
        self.expr(cx, e)
    }

    /// An expression's shape (recorded), with its names resolved and its calls recorded.
    fn expr(&mut self, cx: &Cx, e: &Expr) -> R<Shape> {
        let shape = match &e.kind {
            ExprKind::Int(_) => Shape::Scalar(Ty::Int),
            ExprKind::Real(_, d) => Shape::Scalar(if *d { Ty::Double } else { Ty::Real }),
            ExprKind::Logical(_) => Shape::Scalar(Ty::Logical),
            ExprKind::Name(n) => {
                let r = self.resolve_value(cx.unit, n, e.span)?;
                self.res.insert(e.id, r);
                match r {
                    Res::Var(v) => {
                        let var = self.vars[v].clone();
                        if var.is_array() {
                            return err(
                                e.span,
                                format!("{n} is an array: name an element, {n}(I)"),
                            );
                        }
                        self.data_use(v, e.span)?;
                        self.touch(cx, v, false);
                        Shape::Scalar(var.ty)
                    }
                    Res::Const(c) => Shape::Scalar(c.ty()),
                    _ => {
                        return err(
                            e.span,
                            format!("{n} is a subprogram: call it, or pass it as an argument"),
                        )
                    }
                }
            }
            ExprKind::Apply(n, nspan, args) => {
                let r = self.resolve_call(cx.unit, n, *nspan)?;
                self.res.insert(e.id, r);
                match r {
                    Res::Elem(v) => {
                        let var = self.vars[v].clone();
                        let rank = var.dims.as_ref().map_or(0, |d| d.len());
                        self.subscripts(cx, args, rank, n, e.span)?;
                        self.touch(cx, v, false);
                        Shape::Scalar(var.ty)
                    }
                    Res::Intrinsic(i) => self.intrinsic_call(cx, i, n, args, e.span)?,
                    _ => self.call(cx, e.id, n, r, args, e.span, *nspan, false)?,
                }
            }
            ExprKind::Paren(x) => self.expr(cx, x)?,
            ExprKind::Neg(x) => match self.expr(cx, x)? {
                Shape::Scalar(t) if t.is_numeric() => Shape::Scalar(t),
                _ => return err(e.span, "unary minus needs a number"),
            },
            ExprKind::Not(x) => match self.expr(cx, x)? {
                Shape::Scalar(Ty::Logical) => Shape::Scalar(Ty::Logical),
                _ => return err(e.span, ".NOT. needs a LOGICAL"),
            },
            ExprKind::Bin(op, a, b) => {
                let ta = self.expr(cx, a)?;
                let tb = self.expr(cx, b)?;
                let (Shape::Scalar(ta), Shape::Scalar(tb)) = (ta, tb) else {
                    return err(e.span, "an operator on something that is not a scalar");
                };
                let sp = op.spelling();
                match op {
                    BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Pow => {
                        for (t, x) in [(ta, a), (tb, b)] {
                            if !t.is_numeric() {
                                return err(
                                    x.span,
                                    format!("`{sp}` needs numbers, this is LOGICAL"),
                                );
                            }
                        }
                        Shape::Scalar(wider(ta, tb))
                    }
                    BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                        for (t, x) in [(ta, a), (tb, b)] {
                            if !t.is_numeric() {
                                return err(
                                    x.span,
                                    format!("`{sp}` compares numbers; compare LOGICALs with .EQV. or .NEQV."),
                                );
                            }
                        }
                        Shape::Scalar(Ty::Logical)
                    }
                    BinOp::And | BinOp::Or | BinOp::Eqv | BinOp::Neqv => {
                        for (t, x) in [(ta, a), (tb, b)] {
                            if t != Ty::Logical {
                                return err(
                                    x.span,
                                    format!("`{sp}` needs LOGICALs, this is {}", t.name()),
                                );
                            }
                        }
                        Shape::Scalar(Ty::Logical)
                    }
                }
            }
        };
        self.shapes.insert(e.id, shape);
        Ok(shape)
    }

    fn intrinsic_call(
        &mut self,
        cx: &Cx,
        i: Intr,
        name: &str,
        args: &[Expr],
        span: Span,
    ) -> R<Shape> {
        let mut tys = Vec::new();
        for a in args {
            match self.expr(cx, a)? {
                Shape::Scalar(t) if t.is_numeric() => tys.push(t),
                Shape::Scalar(_) => {
                    return err(a.span, format!("{name} takes numbers, not LOGICAL"))
                }
                _ => return err(a.span, format!("{name} takes scalars")),
            }
        }
        let n = tys.len();
        let arity_ok = match i {
            Intr::Atan2 | Intr::Mod | Intr::Sign => n == 2,
            Intr::Max | Intr::Min => n >= 2,
            _ => n == 1,
        };
        if !arity_ok {
            let want = match i {
                Intr::Atan2 | Intr::Mod | Intr::Sign => "two arguments",
                Intr::Max | Intr::Min => "two or more arguments",
                _ => "one argument",
            };
            return err(span, format!("{name} takes {want}"));
        }
        let widest = tys.iter().copied().fold(Ty::Int, wider);
        let t = match i {
            Intr::Sqrt
            | Intr::Exp
            | Intr::Log
            | Intr::Sin
            | Intr::Cos
            | Intr::Tan
            | Intr::Atan
            | Intr::Atan2 => {
                if let Some(k) = tys.iter().position(|t| *t == Ty::Int) {
                    return err(
                        args[k].span,
                        format!("{name} takes a REAL or DOUBLE PRECISION argument, not INTEGER (convert it with REAL(...))"),
                    );
                }
                widest
            }
            Intr::Abs | Intr::Max | Intr::Min | Intr::Mod | Intr::Sign => widest,
            Intr::Real => Ty::Real,
            Intr::Dble => Ty::Double,
            Intr::Int | Intr::Nint => Ty::Int,
        };
        Ok(Shape::Scalar(t))
    }

    /// A CALL or a function reference: the actual arguments' passing, checked later against
    /// the callee (`check_calls`).
    #[allow(clippy::too_many_arguments)]
    fn call(
        &mut self,
        cx: &Cx,
        id: NodeId,
        name: &str,
        res: Res,
        args: &[Expr],
        span: Span,
        nspan: Span,
        is_call_stmt: bool,
    ) -> R<Shape> {
        let callee = match res {
            Res::Nested(n) => {
                self.materialize(cx, n);
                Callee::Unit(n)
            }
            Res::Global(g) => Callee::Unit(g),
            Res::CallVar(v) => {
                self.proc_use(v, nspan)?;
                self.touch(cx, v, false);
                Callee::Var(v)
            }
            Res::Intrinsic(_) if is_call_stmt => {
                return err(
                    nspan,
                    format!("{name} is an intrinsic function, not a subroutine"),
                )
            }
            _ => return err(nspan, format!("{name} cannot be called")),
        };
        // Kind checks that do not need the callee's analysis.
        let result = match &callee {
            Callee::Unit(c) => {
                let kind = self.units[*c].ast.kind;
                match (kind, is_call_stmt) {
                    (UnitKind::Subroutine, false) => {
                        return err(nspan, format!("{name} is a SUBROUTINE: CALL it"))
                    }
                    (UnitKind::Function(_), true) => {
                        return err(
                            nspan,
                            format!("{name} is a FUNCTION: use it in an expression"),
                        )
                    }
                    (UnitKind::Program, _) => {
                        return err(nspan, format!("{name} is the main program"))
                    }
                    _ => {}
                }
                let t = self.units[*c].result.map(|r| self.vars[r].ty);
                // A type the caller declared for the function must agree with its definition.
                if let (Some(t), Some((declared, dspan))) = (t, self.fn_type_seen(cx.unit, name)) {
                    if declared != t {
                        return err(
                            dspan,
                            format!(
                                "{name} is declared {} here but FUNCTION {name} is {}",
                                declared.name(),
                                t.name()
                            ),
                        );
                    }
                }
                t
            }
            Callee::Var(v) => Some(self.vars[*v].ty),
        };
        let mut passed = Vec::new();
        for a in args {
            let (arg, shape) = self.actual(cx, a)?;
            passed.push((arg, shape, a.span));
        }
        let site = CallSite {
            callee,
            args: passed,
            span,
            name: name.to_string(),
        };
        self.units[cx.unit].calls.push(site.clone());
        for b in &cx.blocks {
            if let Some(bl) = self.blocks.get_mut(b) {
                bl.calls.push(site.clone());
            }
        }
        self.sites.insert(id, site);
        Ok(match result {
            Some(t) if !is_call_stmt => Shape::Scalar(t),
            _ => Shape::Scalar(Ty::Int),
        })
    }

    fn fn_type_seen(&self, u: UnitId, name: &str) -> Option<(Ty, Span)> {
        let mut s = Some(u);
        while let Some(su) = s {
            if let Some(t) = self.units[su].fn_types.get(name) {
                return Some(*t);
            }
            if self.units[su].decls.contains_key(name) || self.units[su].nested.contains_key(name) {
                return None;
            }
            s = self.units[su].parent;
        }
        None
    }

    fn actual(&mut self, cx: &Cx, a: &Expr) -> R<(Arg, Shape)> {
        match &a.kind {
            ExprKind::Name(n) => {
                let r = self.resolve_actual(cx.unit, n, a.span)?;
                self.res.insert(a.id, r);
                let out = match r {
                    Res::Var(v) => {
                        let var = self.vars[v].clone();
                        self.touch(cx, v, false);
                        let shape = if var.is_proc() {
                            Shape::Proc
                        } else if var.is_array() {
                            Shape::Array(var.ty)
                        } else {
                            Shape::Scalar(var.ty)
                        };
                        (Arg::Whole(v), shape)
                    }
                    Res::Const(c) => (Arg::Value, Shape::Scalar(c.ty())),
                    Res::Nested(n) => {
                        self.materialize(cx, n);
                        (Arg::Nested(n), Shape::Proc)
                    }
                    Res::Global(g) => (Arg::Global(g), Shape::Proc),
                    _ => return err(a.span, format!("{n} cannot be passed")),
                };
                self.shapes.insert(a.id, out.1);
                Ok(out)
            }
            ExprKind::Apply(_, _, _) => {
                let s = self.expr(cx, a)?;
                match self.res.get(&a.id) {
                    Some(Res::Elem(v)) => {
                        let v = *v;
                        self.touch(cx, v, false);
                        Ok((Arg::Elem(v), s))
                    }
                    _ => Ok((Arg::Value, s)),
                }
            }
            _ => Ok((Arg::Value, self.expr(cx, a)?)),
        }
    }

    // ---------------------------------------------------------------------------------------
    // After the walk.

    /// Dummies passed on to procedure dummies are procedures too (to a fixpoint).
    fn infer_procs(&mut self) -> R<()> {
        loop {
            let mut changed = false;
            for u in 0..self.units.len() {
                for site in self.units[u].calls.clone() {
                    let Callee::Unit(c) = site.callee else {
                        continue;
                    };
                    for (i, (arg, _, span)) in site.args.iter().enumerate() {
                        let Some(&d) = self.units[c].dummies.get(i) else {
                            continue;
                        };
                        if let Arg::Whole(v) = arg {
                            if self.vars[d].is_proc() && !self.vars[*v].is_proc() {
                                if self.vars[*v].used_as_data.is_some()
                                    || !matches!(self.vars[*v].role, Role::Dummy(_))
                                {
                                    return err(
                                        *span,
                                        format!(
                                            "argument {} of {} must be a subprogram ({} is called there)",
                                            i + 1,
                                            site.name,
                                            self.vars[d].name
                                        ),
                                    );
                                }
                                self.vars[*v].used_as_proc = Some(*span);
                                changed = true;
                            }
                        }
                    }
                }
            }
            if !changed {
                return Ok(());
            }
        }
    }

    /// Which subprograms reach each procedure dummy (to a fixpoint over the call sites).
    fn flow_procs(&mut self) {
        loop {
            let mut changed = false;
            for u in 0..self.units.len() {
                for site in &self.units[u].calls {
                    let targets: Vec<UnitId> = self.targets(&site.callee).into_iter().collect();
                    for c in targets {
                        for (i, (arg, _, _)) in site.args.iter().enumerate() {
                            let Some(&d) = self.units[c].dummies.get(i) else {
                                continue;
                            };
                            let add: BTreeSet<UnitId> = match arg {
                                Arg::Global(g) | Arg::Nested(g) => [*g].into(),
                                Arg::Whole(v) => self.proc_sets.get(v).cloned().unwrap_or_default(),
                                _ => BTreeSet::new(),
                            };
                            let set = self.proc_sets.entry(d).or_default();
                            let before = set.len();
                            set.extend(add);
                            changed |= set.len() != before;
                        }
                    }
                }
            }
            if !changed {
                return;
            }
        }
    }

    /// The subprograms a call may reach.
    pub fn targets(&self, callee: &Callee) -> BTreeSet<UnitId> {
        match callee {
            Callee::Unit(c) => [*c].into(),
            Callee::Var(v) => self.proc_sets.get(v).cloned().unwrap_or_default(),
        }
    }

    /// Whether the call may change its `i`-th argument.
    pub fn arg_may_change(&self, site: &CallSite, i: usize) -> bool {
        self.targets(&site.callee)
            .into_iter()
            .any(|c| self.changes_dummy(c, i))
    }

    /// Whether calling through procedure variable `p` may change the environment its value
    /// carries.
    fn proc_var_changes(&self, p: VarId) -> bool {
        self.proc_sets.get(&p).is_some_and(|set| {
            set.iter()
                .any(|&m| self.units[m].parent.is_some() && self.env_writes(m).next().is_some())
        })
    }

    /// Direct calls against their callee's dummies: count, kinds, types.
    fn check_calls(&mut self) -> R<()> {
        for u in 0..self.units.len() {
            for site in &self.units[u].calls {
                if let Callee::Var(p) = site.callee {
                    for m in self.targets(&site.callee) {
                        let n = self.units[m].dummies.len();
                        if n != site.args.len() {
                            return err(
                                site.span,
                                format!(
                                    "{} may be {} here, which takes {n} argument(s), not {}",
                                    self.vars[p].name,
                                    self.units[m].path,
                                    site.args.len()
                                ),
                            );
                        }
                    }
                    continue;
                }
                // Shapes recorded before procedure inference may be stale for variables.
                let Callee::Unit(c) = site.callee else {
                    continue;
                };
                let dummies = &self.units[c].dummies;
                if dummies.len() != site.args.len() {
                    return err(
                        site.span,
                        format!(
                            "{} takes {} argument(s), not {}",
                            site.name,
                            dummies.len(),
                            site.args.len()
                        ),
                    );
                }
                for (i, ((arg, shape, span), &d)) in site.args.iter().zip(dummies).enumerate() {
                    let dv = &self.vars[d];
                    let shape = match arg {
                        Arg::Whole(v) if self.vars[*v].is_proc() => Shape::Proc,
                        _ => *shape,
                    };
                    let what = format!("argument {} of {} ({})", i + 1, site.name, dv.name);
                    match shape {
                        Shape::Proc => {
                            if dv.used_as_data.is_some() {
                                return err(
                                    *span,
                                    format!("{what} is a variable, but this is a subprogram"),
                                );
                            }
                        }
                        Shape::Array(t) => {
                            if dv.is_proc() {
                                return err(
                                    *span,
                                    format!("{what} is a procedure, but this is an array"),
                                );
                            }
                            if !dv.is_array() && dv.used_as_data.is_some() {
                                return err(
                                    *span,
                                    format!("{what} is a scalar, but this is a whole array"),
                                );
                            }
                            if t != dv.ty {
                                return err(
                                    *span,
                                    format!("{what} is {}, this is {}", dv.ty.name(), t.name()),
                                );
                            }
                        }
                        Shape::Scalar(t) => {
                            if dv.is_proc() {
                                return err(
                                    *span,
                                    format!("{what} is a procedure, but this is a value"),
                                );
                            }
                            if dv.is_array() {
                                return err(
                                    *span,
                                    format!("{what} is an array: pass a whole array (passing an element to an array dummy is not supported)"),
                                );
                            }
                            if t != dv.ty && dv.used_as_data.is_some() {
                                return err(
                                    *span,
                                    format!("{what} is {}, this is {}", dv.ty.name(), t.name()),
                                );
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn is_outer(&self, v: VarId, u: UnitId) -> bool {
        let owner = self.vars[v].owner;
        let mut s = self.units[u].parent;
        while let Some(p) = s {
            if p == owner {
                return true;
            }
            s = self.units[p].parent;
        }
        false
    }

    /// Whether `v` is threaded as state (else it is captured as it is on entry).
    pub fn mutable(&self, v: VarId) -> bool {
        self.vars[v].role == Role::Hidden || self.units[self.vars[v].owner].threads_all.contains(&v)
    }

    /// Whether `v`'s value may change.
    pub fn changed(&self, v: VarId) -> bool {
        self.units[self.vars[v].owner].writes_all.contains(&v)
    }

    /// Whether the callee may change its `i`-th dummy.
    pub fn changes_dummy(&self, callee: UnitId, i: usize) -> bool {
        self.units[callee]
            .dummies
            .get(i)
            .is_some_and(|&d| self.changed(d))
    }

    /// The outer variables a unit's nest may change.
    pub fn env_writes(&self, n: UnitId) -> impl Iterator<Item = VarId> + '_ {
        self.units[n]
            .writes_all
            .iter()
            .copied()
            .filter(move |&v| self.is_outer(v, n))
    }

    /// What a list of call sites may change in the scope making them.
    fn call_writes(&self, calls: &[CallSite], writes: &mut BTreeSet<VarId>) {
        for site in calls {
            match site.callee {
                Callee::Unit(c) => {
                    if self.units[c].parent.is_some() {
                        writes.extend(self.env_writes(c));
                    }
                }
                Callee::Var(p) => {
                    if self.proc_var_changes(p) {
                        writes.insert(p);
                    }
                }
            }
            for (i, (arg, _, _)) in site.args.iter().enumerate() {
                match arg {
                    Arg::Whole(v) | Arg::Elem(v) if self.arg_may_change(site, i) => {
                        writes.insert(*v);
                    }
                    Arg::Nested(m) => writes.extend(self.env_writes(*m)),
                    _ => {}
                }
            }
        }
    }

    fn fixpoint(&mut self) {
        let n = self.units.len();
        // Inner blocks after outer ones (node ids grow in parse order, inner blocks are
        // finished first): iterate deepest first by sorting on the nesting depth.
        let mut block_ids: Vec<NodeId> = self.blocks.keys().copied().collect();
        let depth = |s: &Self, mut b: NodeId| {
            let mut d = 0;
            while let Some(p) = s.blocks[&b].parent {
                d += 1;
                b = p;
            }
            d
        };
        block_ids.sort_by_key(|b| (std::cmp::Reverse(depth(self, *b)), *b));
        loop {
            let mut changed = false;
            // Blocks: what they may change (their outputs).
            for b in &block_ids {
                let bl = &self.blocks[b];
                let mut out = bl.writes.clone();
                out.extend(bl.dependent.iter().copied());
                self.call_writes(&bl.calls, &mut out);
                for &m in &bl.mat {
                    out.extend(self.env_writes(m));
                }
                for (c, cb) in &self.blocks {
                    if cb.parent == Some(*b) {
                        if let Some(o) = self.block_out.get(c) {
                            out.extend(o.iter().copied());
                        }
                    }
                }
                let out: Vec<VarId> = out.into_iter().collect();
                if self.block_out.get(b) != Some(&out) {
                    self.block_out.insert(*b, out);
                    changed = true;
                }
            }
            for u in (0..n).rev() {
                let mut writes = self.units[u].writes.clone();
                let mut refs = self.units[u].refs.clone();
                let mut threads = BTreeSet::new();
                for b in &block_ids {
                    if self.blocks[b].unit == u {
                        if let Some(o) = self.block_out.get(b) {
                            writes.extend(o.iter().copied());
                        }
                        threads.extend(self.blocks[b].independent.iter().copied());
                    }
                }
                for &c in self.units[u].nested.values() {
                    writes.extend(self.units[c].writes_all.iter().copied());
                    refs.extend(self.units[c].refs_all.iter().copied());
                    threads.extend(self.units[c].threads_all.iter().copied());
                }
                for &m in &self.units[u].mat {
                    refs.extend(self.units[m].env.iter().copied());
                    writes.extend(self.env_writes(m));
                }
                self.call_writes(&self.units[u].calls, &mut writes);
                threads.extend(writes.iter().copied());
                if writes != self.units[u].writes_all
                    || refs != self.units[u].refs_all
                    || threads != self.units[u].threads_all
                {
                    self.units[u].writes_all = writes;
                    self.units[u].refs_all = refs;
                    self.units[u].threads_all = threads;
                    changed = true;
                }
            }
            for u in 0..n {
                if self.units[u].parent.is_none() {
                    continue;
                }
                let env: Vec<VarId> = self.units[u]
                    .refs_all
                    .iter()
                    .copied()
                    .filter(|&v| self.is_outer(v, u) && self.mutable(v))
                    .collect();
                if env != self.units[u].env {
                    self.units[u].env = env;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        // Inputs: what a block may read before writing, and its independent variables.
        let mut ads: Vec<&'a Stmt> = Vec::new();
        for u in 0..n {
            find_blocks(&self.units[u].ast.body, &mut ads);
        }
        for s in ads {
            let StmtKind::Ad { body, .. } = &s.kind else {
                continue;
            };
            let first = self.assigned_first(body);
            let bl = &self.blocks[&s.id];
            let mut input = bl.refs.clone();
            for &m in &bl.mat {
                input.extend(self.units[m].env.iter().copied());
            }
            input.retain(|v| !first.contains(v));
            input.extend(bl.independent.iter().copied());
            self.block_in.insert(s.id, input.into_iter().collect());
        }
    }

    fn conventions(&mut self) {
        let n = self.units.len();
        let mut class: Vec<usize> = (0..n).collect();
        fn find(c: &mut [usize], mut x: usize) -> usize {
            while c[x] != x {
                c[x] = c[c[x]];
                x = c[x];
            }
            x
        }
        for set in self.proc_sets.values() {
            let mut it = set.iter();
            if let Some(&first) = it.next() {
                for &m in it {
                    let (a, b) = (find(&mut class, first), find(&mut class, m));
                    class[a] = b;
                }
            }
        }
        let mut conv: HashMap<usize, (BTreeSet<usize>, bool)> = HashMap::new();
        for u in 0..n {
            let c = find(&mut class, u);
            let e = conv.entry(c).or_default();
            for i in 0..self.units[u].dummies.len() {
                if self.changes_dummy(u, i) {
                    e.0.insert(i);
                }
            }
            e.1 |= self.units[u].parent.is_some() && self.env_writes(u).next().is_some();
        }
        self.conventions = (0..n)
            .map(|u| {
                let (args, env) = &conv[&find(&mut class, u)];
                Convention {
                    args: args.iter().copied().collect(),
                    env: *env,
                }
            })
            .collect();
    }

    /// The convention of a call's callee (of any subprogram it may reach).
    pub fn convention(&self, callee: &Callee) -> Convention {
        match self.targets(callee).into_iter().next() {
            Some(u) => self.conventions[u].clone(),
            None => Convention::default(),
        }
    }

    /// Copy-in/copy-out is reference passing when no variable is reachable twice in one call
    /// and changed through either path; such calls are rejected.
    fn check_aliasing(&self) -> R<()> {
        for u in 0..self.units.len() {
            for site in &self.units[u].calls {
                let mut seen: Vec<(VarId, bool, bool)> = Vec::new(); // (var, written, element)
                if let Callee::Unit(c) = site.callee {
                    if self.units[c].parent.is_some() {
                        let w: BTreeSet<VarId> = self.env_writes(c).collect();
                        for &v in &self.units[c].env {
                            seen.push((v, w.contains(&v), false));
                        }
                    }
                }
                for (i, (arg, _, _)) in site.args.iter().enumerate() {
                    let may_change = self.arg_may_change(site, i);
                    match arg {
                        Arg::Whole(v) => seen.push((*v, may_change, false)),
                        Arg::Elem(v) => seen.push((*v, may_change, true)),
                        Arg::Nested(m) => {
                            let w: BTreeSet<VarId> = self.env_writes(*m).collect();
                            for &v in &self.units[*m].env {
                                seen.push((v, w.contains(&v), false));
                            }
                        }
                        _ => {}
                    }
                }
                for (i, a) in seen.iter().enumerate() {
                    for b in &seen[i + 1..] {
                        if a.0 == b.0 && (a.1 || b.1) && !(a.2 && b.2) {
                            return err(
                                site.span,
                                format!(
                                    "{} reaches {} twice in this call (an argument, or a subprogram's enclosing scope) and may change it: Farfel copies arguments in and out, so this aliasing is not supported",
                                    site.name, self.vars[a.0].name
                                ),
                            );
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The variables a unit's body threads as state: its mutable variables (hidden ones of
    /// its own body included), then its environment.
    pub fn unit_state(&self, u: UnitId) -> Vec<VarId> {
        let mut out: Vec<VarId> = self.units[u]
            .frame
            .iter()
            .copied()
            .filter(|&v| self.vars[v].body.is_none() && self.mutable(v))
            .collect();
        out.extend(self.units[u].env.iter().copied());
        out.sort();
        out.dedup();
        out
    }

    /// Hidden variables of the body of block `b`.
    pub fn block_hidden(&self, u: UnitId, b: NodeId) -> Vec<VarId> {
        self.units[u]
            .frame
            .iter()
            .copied()
            .filter(|&v| self.vars[v].body == Some(b))
            .collect()
    }

    pub fn global_units(&self) -> impl Iterator<Item = UnitId> + '_ {
        (0..self.units.len()).filter(|&u| self.units[u].parent.is_none() && u != self.main)
    }

    pub fn nested_units(&self, u: UnitId) -> Vec<UnitId> {
        let mut v: Vec<UnitId> = self.units[u].nested.values().copied().collect();
        v.sort();
        v
    }
}

/// The wider of two numeric types.
pub fn wider(a: Ty, b: Ty) -> Ty {
    let rank = |t: Ty| match t {
        Ty::Int => 0,
        Ty::Real => 1,
        Ty::Double => 2,
        Ty::Logical => 3,
    };
    if rank(a) >= rank(b) {
        a
    } else {
        b
    }
}

fn convert_const(c: Const, ty: Ty, span: Span) -> R<Const> {
    match (c, ty) {
        (Const::Bool(b), Ty::Logical) => Ok(Const::Bool(b)),
        (Const::Num(v, _), Ty::Int) => Ok(Const::Num(v.trunc() + 0.0, Ty::Int)),
        (Const::Num(v, _), t) if t.is_real() => Ok(Const::Num(v, t)),
        _ => err(
            span,
            format!("a {} constant cannot hold this value", ty.name()),
        ),
    }
}

fn const_size(dims: &[DimInfo]) -> Option<f64> {
    let mut n = 1.0;
    for d in dims {
        match (&d.lo, &d.hi) {
            (Bound::Const(lo), Some(Bound::Const(hi))) => n *= (hi - lo + 1.0).max(0.0),
            _ => return None,
        }
    }
    Some(n)
}

/// Whether a value of shape `value` may be assigned to a target of shape `target`.
fn assignable(target: Shape, value: Shape, span: Span, name: &str) -> R<()> {
    match (target, value) {
        (Shape::Scalar(t), Shape::Scalar(v)) => {
            if (t == Ty::Logical) != (v == Ty::Logical) {
                return err(
                    span,
                    format!("{name} is {}; this value is {}", t.name(), v.name()),
                );
            }
            Ok(())
        }
        (Shape::Array(_), _) => err(
            span,
            format!(
                "{name} is an array: assign its elements (whole-array assignment is Fortran 90)"
            ),
        ),
        _ => err(span, "this is not a value"),
    }
}

// -------------------------------------------------------------------------------------------
// Names used as variables (for the implicit pass).

fn collect_stmts(stmts: &[Stmt], out: &mut Vec<(String, Span)>) {
    for s in stmts {
        collect_stmt(s, out);
    }
}

fn collect_ref(r: &Ref, out: &mut Vec<(String, Span)>) {
    if r.subs.is_none() {
        out.push((r.name.clone(), r.name_span));
    }
    for e in r.subs.iter().flatten() {
        collect_expr(e, out);
    }
}

fn collect_expr(e: &Expr, out: &mut Vec<(String, Span)>) {
    match &e.kind {
        ExprKind::Name(n) => out.push((n.clone(), e.span)),
        // Bare names as arguments may be subprograms: decided when resolved.
        ExprKind::Apply(_, _, args) => {
            for a in args {
                if !matches!(a.kind, ExprKind::Name(_)) {
                    collect_expr(a, out);
                }
            }
        }
        ExprKind::Paren(x) | ExprKind::Neg(x) | ExprKind::Not(x) => collect_expr(x, out),
        ExprKind::Bin(_, a, b) => {
            collect_expr(a, out);
            collect_expr(b, out);
        }
        _ => {}
    }
}

fn collect_io(it: &IoItem, out: &mut Vec<(String, Span)>) {
    match it {
        IoItem::Expr(e) => collect_expr(e, out),
        IoItem::Loop(l) => {
            collect_ref(&l.var, out);
            for i in &l.items {
                collect_io(i, out);
            }
        }
    }
}

fn collect_ad(it: &AdItem, out: &mut Vec<(String, Span)>) {
    match it {
        AdItem::Open { var, value, .. } => {
            collect_ref(var, out);
            collect_expr(value, out);
        }
        AdItem::Close { dest, var, .. } => {
            collect_ref(dest, out);
            collect_ref(var, out);
        }
        AdItem::Loop(l) => {
            collect_ref(&l.var, out);
            for i in &l.items {
                collect_ad(i, out);
            }
        }
    }
}

fn collect_stmt(s: &Stmt, out: &mut Vec<(String, Span)>) {
    match &s.kind {
        StmtKind::Assign(r, e) => {
            collect_ref(r, out);
            collect_expr(e, out);
        }
        StmtKind::Call(_, _, args) => {
            for a in args {
                if !matches!(a.kind, ExprKind::Name(_)) {
                    collect_expr(a, out);
                }
            }
        }
        StmtKind::If {
            arms, else_body, ..
        } => {
            for a in arms {
                collect_expr(&a.cond, out);
                collect_stmts(&a.body, out);
            }
            if let Some(b) = else_body {
                collect_stmts(b, out);
            }
        }
        StmtKind::LogicalIf(c, inner) => {
            collect_expr(c, out);
            collect_stmt(inner, out);
        }
        StmtKind::Do {
            var,
            start,
            end,
            step,
            body,
            ..
        } => {
            collect_ref(var, out);
            collect_expr(start, out);
            collect_expr(end, out);
            if let Some(st) = step {
                collect_expr(st, out);
            }
            collect_stmts(body, out);
        }
        StmtKind::Read(items) | StmtKind::Print(items) => {
            for i in items {
                collect_io(i, out);
            }
        }
        StmtKind::Ad {
            opening,
            body,
            closing,
            ..
        } => {
            for i in opening.iter().chain(closing) {
                collect_ad(i, out);
            }
            collect_stmts(body, out);
        }
        StmtKind::Goto(..) | StmtKind::Continue | StmtKind::Return | StmtKind::Stop => {}
    }
}

/// Every ADF/ADR statement in `stmts`, nested ones included.
fn find_blocks<'a>(stmts: &'a [Stmt], out: &mut Vec<&'a Stmt>) {
    for s in stmts {
        match &s.kind {
            StmtKind::Ad { body, .. } => {
                out.push(s);
                find_blocks(body, out);
            }
            StmtKind::If {
                arms, else_body, ..
            } => {
                for a in arms {
                    find_blocks(&a.body, out);
                }
                if let Some(b) = else_body {
                    find_blocks(b, out);
                }
            }
            StmtKind::Do { body, .. } => find_blocks(body, out),
            _ => {}
        }
    }
}

/// The labels of a unit: unique, each with the ADF/ADR block whose body holds it.
fn collect_labels(
    stmts: &[Stmt],
    body: Option<NodeId>,
    out: &mut HashMap<u32, (Option<NodeId>, Span)>,
) -> R<()> {
    let add = |l: &(u32, Span), out: &mut HashMap<u32, (Option<NodeId>, Span)>| -> R<()> {
        if let Some((_, first)) = out.insert(l.0, (body, l.1)) {
            let _ = first;
            return err(l.1, format!("label {} is defined twice", l.0));
        }
        Ok(())
    };
    for s in stmts {
        if let Some(l) = &s.label {
            add(l, out)?;
        }
        match &s.kind {
            StmtKind::If {
                arms,
                else_body,
                inner_labels,
                end_label,
            } => {
                for a in arms {
                    collect_labels(&a.body, body, out)?;
                }
                if let Some(b) = else_body {
                    collect_labels(b, body, out)?;
                }
                for l in inner_labels.iter().chain(end_label) {
                    add(l, out)?;
                }
            }
            StmtKind::Do {
                body: b, end_label, ..
            } => {
                collect_labels(b, body, out)?;
                if let Some(l) = end_label {
                    add(l, out)?;
                }
            }
            StmtKind::Ad { body: b, .. } => collect_labels(b, Some(s.id), out)?,
            _ => {}
        }
    }
    Ok(())
}
