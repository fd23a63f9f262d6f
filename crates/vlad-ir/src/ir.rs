//! The IR's data: a program of first-order functions over typed variables.
//!
//! A function's body is a tree of statements (structured control flow: `if`, `switch`, counted
//! loops, and the two array loops `build` and `ifold` of paper 002, kept as first-class
//! operations until `passes::loops` lowers them). Every value is a list of *leaves* of scalar
//! types (`Ty`): the lowering flattens pairs, closures and AD values into their leaves, so an
//! aggregate is never allocated and a known part takes no space. A variable is defined once
//! (`Let`), or declared (`Declare`) and assigned (`Set`) where control flow joins.
//!
//! Boxed values are pointers to runtime objects (`Ty::Boxed`); flat arrays are pointers to
//! runtime arrays whose elements are all in one layout (`Ty::Array`). The runtime's functions
//! are called through a typed table (`rt::Rt`), so the verifier checks every call.

use crate::rt::Rt;
use std::fmt;
use std::rc::Rc;

/// The type of a leaf: what one C variable holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ty {
    /// A real (`double`).
    F64,
    /// A boolean (`long`, 0 or 1).
    Bool,
    /// A machine integer (`long`): lengths, indices, loop counters, codes.
    I64,
    /// A boxed value: a pointer to a runtime object of any shape.
    Boxed,
    /// A flat array: a pointer to a runtime array whose elements each hold this layout of
    /// slots, in a row.
    Array(Layout),
    /// A tagged union: a tag (the variant's index) and the leaves of that variant.
    Union(Rc<[Layout]>),
    /// An arena mark (what `Mark` returns and `Release` takes).
    Mark,
    /// A constant string (messages and names passed to the runtime).
    Str,
}

/// A list of leaf types: the layout of a flattened value, a function's results, an array's
/// element.
pub type Layout = Rc<[Ty]>;

impl Ty {
    /// A pointer to a runtime object (what the arena holds).
    pub fn is_pointer(&self) -> bool {
        matches!(self, Ty::Boxed | Ty::Array(_))
    }

    /// A value of this type may lead to memory in the arena (a pointer, or a union with a
    /// pointer in a variant).
    pub fn holds_pointer(&self) -> bool {
        match self {
            Ty::Boxed | Ty::Array(_) => true,
            Ty::Union(vs) => vs.iter().any(|l| l.iter().any(Ty::holds_pointer)),
            _ => false,
        }
    }

    /// A flat array whose elements hold no pointers: a copy of it is as good as the original,
    /// so a loop may carry it to its next iteration by copying it down (`passes::carry`).
    pub fn is_pointer_free_array(&self) -> bool {
        matches!(self, Ty::Array(l) if !l.iter().any(Ty::holds_pointer))
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::F64 => write!(f, "f64"),
            Ty::Bool => write!(f, "bool"),
            Ty::I64 => write!(f, "i64"),
            Ty::Boxed => write!(f, "boxed"),
            Ty::Array(l) => write!(f, "array{}", LayoutDisplay(l)),
            Ty::Union(vs) => {
                write!(f, "union{{")?;
                for (i, v) in vs.iter().enumerate() {
                    if i > 0 {
                        write!(f, " | ")?;
                    }
                    write!(f, "{}", LayoutDisplay(v))?;
                }
                write!(f, "}}")
            }
            Ty::Mark => write!(f, "mark"),
            Ty::Str => write!(f, "str"),
        }
    }
}

/// A layout printed as `(f64, bool)`.
pub struct LayoutDisplay<'a>(pub &'a [Ty]);

impl fmt::Display for LayoutDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(")?;
        for (i, t) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{t}")?;
        }
        write!(f, ")")
    }
}

/// A local variable of a function (an index into `Function::vars`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Var(pub u32);

/// A function of the program (an index into `Program::funcs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FuncId(pub u32);

/// A global variable (an index into `Program::globals`): constants built once at start-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GlobalId(pub u32);

/// What a statement reads: a variable or a constant.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    Var(Var),
    F64(f64),
    Bool(bool),
    I64(i64),
    /// The null pointer: no object (an optional argument of the runtime), and the placeholder
    /// of a pointer leaf in code that is never reached.
    Null,
    Global(GlobalId),
    Str(Rc<str>),
}

impl Operand {
    pub fn var(&self) -> Option<Var> {
        match self {
            Operand::Var(v) => Some(*v),
            _ => None,
        }
    }

    /// A placeholder of type `ty`, for a leaf whose value never matters (code after a call
    /// that never returns; a known zero that does not depend on it).
    pub fn placeholder(ty: &Ty) -> Operand {
        match ty {
            Ty::F64 => Operand::F64(0.0),
            Ty::Bool => Operand::Bool(false),
            Ty::I64 => Operand::I64(0),
            Ty::Str => Operand::Str("".into()),
            Ty::Boxed | Ty::Array(_) | Ty::Union(_) | Ty::Mark => Operand::Null,
        }
    }
}

impl From<Var> for Operand {
    fn from(v: Var) -> Operand {
        Operand::Var(v)
    }
}

/// A unary operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    Sqrt,
    Exp,
    Log,
    Sin,
    Cos,
    /// A real to an integer, truncated (a count or an index already checked).
    F64ToI64,
    I64ToF64,
    Not,
}

/// A binary operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    FAdd,
    FSub,
    FMul,
    FDiv,
    /// `atan2(x, y)`.
    FAtan2,
    FEq,
    FLt,
    FGt,
    FLe,
    FGe,
    IEq,
    INe,
    ILt,
    IAdd,
    ISub,
    IMul,
    /// Booleans (both operands are always evaluated: they are pure).
    And,
    Or,
    BEq,
}

impl BinOp {
    /// The operand type and the result type.
    pub fn types(self) -> (Ty, Ty) {
        use BinOp::*;
        match self {
            FAdd | FSub | FMul | FDiv | FAtan2 => (Ty::F64, Ty::F64),
            FEq | FLt | FGt | FLe | FGe => (Ty::F64, Ty::Bool),
            IEq | INe | ILt => (Ty::I64, Ty::Bool),
            IAdd | ISub | IMul => (Ty::I64, Ty::I64),
            And | Or | BEq => (Ty::Bool, Ty::Bool),
        }
    }
}

impl UnOp {
    /// The operand type and the result type.
    pub fn types(self) -> (Ty, Ty) {
        use UnOp::*;
        match self {
            Sqrt | Exp | Log | Sin | Cos => (Ty::F64, Ty::F64),
            F64ToI64 => (Ty::F64, Ty::I64),
            I64ToF64 => (Ty::I64, Ty::F64),
            Not => (Ty::Bool, Ty::Bool),
        }
    }
}

/// The kinds of runtime objects (the ABI shared with `runtime.c`, which the C backend generates
/// from this enum: `VL_NIL`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjKind {
    Nil,
    Bool,
    Real,
    Prim,
    Pair,
    Closure,
    Bundle,
    Tagged,
    Array,
    Flat,
    Sens,
    FlatRef,
}

impl ObjKind {
    pub const ALL: [ObjKind; 12] = [
        ObjKind::Nil,
        ObjKind::Bool,
        ObjKind::Real,
        ObjKind::Prim,
        ObjKind::Pair,
        ObjKind::Closure,
        ObjKind::Bundle,
        ObjKind::Tagged,
        ObjKind::Array,
        ObjKind::Flat,
        ObjKind::Sens,
        ObjKind::FlatRef,
    ];

    pub fn number(self) -> u32 {
        self as u32
    }

    /// The name runtime.c knows it by.
    pub fn c_name(self) -> &'static str {
        match self {
            ObjKind::Nil => "VL_NIL",
            ObjKind::Bool => "VL_BOOL",
            ObjKind::Real => "VL_REAL",
            ObjKind::Prim => "VL_PRIM",
            ObjKind::Pair => "VL_PAIR",
            ObjKind::Closure => "VL_CLOSURE",
            ObjKind::Bundle => "VL_BUNDLE",
            ObjKind::Tagged => "VL_TAGGED",
            ObjKind::Array => "VL_ARRAY",
            ObjKind::Flat => "VL_FLAT",
            ObjKind::Sens => "VL_SENS",
            ObjKind::FlatRef => "VL_FLATREF",
        }
    }
}

/// An AD map of boxed values that boxed closures need a lowered function for (the ABI shared
/// with `runtime.c`: `vl_map_closure`'s kinds, plus `bundle`, `vl_map_bundle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MapKind {
    /// `perturb`, `sensitize`, `*j`.
    Tag(vlad_core::Tag),
    /// `unperturb`, `unsensitize`, `*j-inverse`.
    Untag(vlad_core::Tag),
    /// `primal` (false) or `tangent` (true).
    Split(bool),
    /// The zero sensitivity before its tag (`%sensitivity-zero`).
    SZero,
    ShallowPrimal,
    Bundle,
    /// The zero sensitivity of a reverse value, computed in full (`vl_zero_sens`).
    ZeroSensitivity,
}

impl MapKind {
    /// The kinds runtime.c names (`VL_MAP_...`), with their names.
    pub const NAMED: [(MapKind, &'static str); 6] = [
        (MapKind::Untag(vlad_core::Tag::Forward), "VL_MAP_UNTAG"),
        (MapKind::Split(false), "VL_MAP_PRIMAL"),
        (MapKind::Split(true), "VL_MAP_TANGENT"),
        (MapKind::SZero, "VL_MAP_SZERO"),
        (MapKind::ShallowPrimal, "VL_MAP_SHALLOW"),
        (MapKind::ZeroSensitivity, "VL_MAP_ZERO_SENS"),
    ];

    /// The kind's number (`vl_map_closure`'s argument): a tag's maps are numbered by the tag.
    pub fn number(self) -> u32 {
        match self {
            MapKind::Tag(t) => t as u32,
            MapKind::Untag(t) => 4 + t as u32,
            MapKind::Split(tangent) => 8 + tangent as u32,
            MapKind::SZero => 10,
            MapKind::ShallowPrimal => 11,
            MapKind::Bundle => 12,
            MapKind::ZeroSensitivity => 14,
        }
    }
}

/// An operation: what a `Let` computes.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Copy(Operand),
    Unary(UnOp, Operand),
    Binary(BinOp, Operand, Operand),
    /// A direct call. With a `guard`, the call goes to that function instead (the callee's
    /// entry to its component's explicit-stack machine) once the native stack is deep
    /// (`passes::machines`).
    Call {
        func: FuncId,
        args: Vec<Operand>,
        guard: Option<FuncId>,
    },
    /// A call of the runtime.
    Rt(Rt, Vec<Operand>),
    /// A new flat array of `count` elements of `layout` (their slots uninitialised).
    NewArray {
        layout: Layout,
        count: Operand,
    },
    /// A new flat array of `layout` whose slots are these constants, element after element
    /// (an array literal: data, not a store per slot).
    ArrayOf {
        layout: Layout,
        slots: Rc<[Operand]>,
    },
    /// Slot `slot` of element `index` of a flat array.
    Load {
        array: Operand,
        index: Operand,
        slot: u32,
    },
    /// The length of a flat array.
    Length(Operand),
    /// Slot `slot` of a boxed object (a boxed closure's environment), read as `ty`.
    Field {
        obj: Operand,
        slot: u32,
        ty: Ty,
    },
    /// The kind of a boxed object is `kind`.
    IsKind(Operand, ObjKind),
    /// The same pointer as another pointer type (a boxed value the runtime knows to be a flat
    /// array of a layout: the element boxers it calls).
    Cast(Operand, Ty),
    /// The code of a boxed procedure, to dispatch on: a closure's code number, `-1 - index` for
    /// a primitive, and `-1000000` (neither) for anything else.
    CodeOf(Operand),
    /// An arena mark.
    Mark,
    /// Releases the arena to `mark` keeping the flat arrays `arrays` (whose elements hold no
    /// pointers), copied down to it: the results are the copies, in order.
    ReleaseCarrying {
        mark: Operand,
        arrays: Vec<Operand>,
    },
    /// A copying collection of what a loop carries to its next iteration, at its back edge,
    /// when it is due: where the arena above `mark` has grown past `budget` (an `i64`, 0 at
    /// the loop's entry), the objects allocated since the mark that `values` (pointers) reach
    /// are copied down to it, sharing kept, and the rest is released. The results are the
    /// values (moved or not), in order, then the budget for the next collection. Every
    /// pointer live after it is one of its results or older than the mark (the verifier
    /// checks it): a collection moves everything else above the mark.
    Collect {
        mark: Operand,
        budget: Operand,
        values: Vec<Operand>,
    },
    /// A union value: variant `variant` of `ty` (a `Ty::Union`) with these leaves.
    MakeUnion {
        ty: Ty,
        variant: u32,
        fields: Vec<Operand>,
    },
    /// The variant of a union value.
    UnionTag(Operand),
    /// Leaf `index` of variant `variant` of a union value (which must be of that variant).
    UnionField {
        value: Operand,
        variant: u32,
        index: u32,
    },
}

/// A statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// Defines the variables (none: for the operation's effect) by the operation's results.
    Let(Vec<Var>, Op),
    /// Declares variables, to be assigned by `Set` (where branches join).
    Declare(Vec<Var>),
    Set(Var, Operand),
    /// The current call site in the user's program (for errors inside built-in code).
    Site(u32),
    /// Stores `value` in slot `slot` of element `index` of a flat array.
    Store {
        array: Operand,
        index: Operand,
        slot: u32,
        value: Operand,
    },
    /// Assigns a global (in the initialisation function).
    SetGlobal(GlobalId, Operand),
    /// Stores `value` in slot `slot` of a boxed object being built.
    SetField {
        obj: Operand,
        slot: u32,
        value: Operand,
    },
    /// Releases the arena to a mark: everything allocated since is garbage.
    Release(Operand),
    If {
        cond: Operand,
        then: Block,
        els: Block,
    },
    /// A switch on an integer; each case ends the switch.
    Switch {
        on: Operand,
        cases: Vec<(Vec<i64>, Block)>,
        default: Block,
    },
    /// `index` from 0 to `count - 1`.
    For {
        index: Var,
        count: Operand,
        body: Block,
    },
    /// A loop left only by a return (or a statement that never returns); `Continue` starts
    /// its next iteration.
    Loop(Block),
    Continue,
    Return(Vec<Operand>),
    /// `return func(args)`: the callee's results are the function's.
    TailCall {
        func: FuncId,
        args: Vec<Operand>,
    },
    /// Paper 002's `build`: `array` is a new flat array of `count` elements of `layout`, each
    /// element `index` the operands `elem` after `body` ran for that index.
    Build {
        array: Var,
        layout: Layout,
        count: Operand,
        index: Var,
        body: Block,
        elem: Vec<Operand>,
    },
    /// Paper 002's `ifold`: `accs` start as `init`; for each `index` below `count`, `body` runs
    /// and `accs` become `next`.
    Ifold {
        accs: Vec<Var>,
        init: Vec<Operand>,
        count: Operand,
        index: Var,
        body: Block,
        next: Vec<Operand>,
    },
    /// The body of member `member` of an explicit-stack machine (only in a machine).
    Member {
        member: u32,
        body: Block,
    },
    /// A call of member `member` inside a machine: its frame is pushed and the machine runs it;
    /// `results` are defined when it returns (to resume point `resume`).
    MachineCall {
        member: u32,
        args: Vec<Operand>,
        results: Vec<Var>,
        resume: u32,
    },
    /// A tail call of a member inside a machine: the callee's frame replaces the caller's.
    MachineTailCall {
        member: u32,
        args: Vec<Operand>,
    },
}

pub type Block = Vec<Stmt>;

/// A variable's type and name (unique in its function; the C code uses it too).
#[derive(Clone, Debug, PartialEq)]
pub struct VarInfo {
    pub ty: Ty,
    pub name: String,
}

/// How a function is named in C and what it is.
#[derive(Clone, Debug, PartialEq)]
pub enum FuncKind {
    /// The specialised function of an analysis key (its number, for `--emit flow`).
    Specialised { key: usize },
    /// Code the lowering generates besides (AD maps of boxed closures, element boxers, the
    /// constants' initialisation, the program's entry point), or a runtime entry point
    /// (`exported`: the runtime calls it by this name).
    Helper { name: String, exported: bool },
    /// An entry point of a shared library (`vlad compile --lib`): the C function
    /// `vlad_NAME` calls it with the argument list boxed, catching a run-time error.
    Export { name: String },
    /// The loop of a cycle of tail calls through several functions (`passes::carry`): their
    /// bodies, as the cases of a switch on which of them runs, in one loop whose back edges
    /// collect what they carry.
    Merged { members: Vec<FuncId> },
    /// The explicit-stack machine of a deep recursive component (`passes::machines`).
    Machine(Rc<Machine>),
    /// The entry of member `member` of the machine `machine`, for native callers.
    MachineEntry { machine: FuncId, member: u32 },
}

/// An explicit-stack machine: its members (the component's functions), their frames and
/// resume points.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    pub members: Vec<MachineMember>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct MachineMember {
    /// The function this member's body is a copy of.
    pub func: FuncId,
    pub params: Vec<Var>,
    pub results: Layout,
    /// The variables that live in its frame: those live across a call of a member, the
    /// parameters among them first. The other parameters are C locals.
    pub frame: Vec<Var>,
    /// The number of resume points of its body.
    pub resumes: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    pub kind: FuncKind,
    pub params: Vec<Var>,
    pub results: Layout,
    pub vars: Vec<VarInfo>,
    pub body: Block,
    /// Rarely run: optimised for size (machines and their entries).
    pub cold: bool,
}

impl Function {
    pub fn ty(&self, v: Var) -> &Ty {
        &self.vars[v.0 as usize].ty
    }

    pub fn name(&self, v: Var) -> &str {
        &self.vars[v.0 as usize].name
    }

    /// A new variable of this function.
    pub fn new_var(&mut self, ty: Ty, prefix: &str) -> Var {
        fresh_var(&mut self.vars, ty, prefix)
    }
}

/// A new variable in a function's table, named `PREFIX<n>` (unique: `n` is its number).
pub fn fresh_var(vars: &mut Vec<VarInfo>, ty: Ty, prefix: &str) -> Var {
    let v = Var(vars.len() as u32);
    vars.push(VarInfo {
        ty,
        name: format!("{prefix}{}", v.0),
    });
    v
}

/// A global: a constant built by the initialisation function.
#[derive(Clone, Debug, PartialEq)]
pub struct Global {
    pub name: String,
    pub ty: Ty,
}

/// An error site: the text before the message (`path:line:col: error: `), and the source
/// excerpt after it, if it has one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Site {
    pub prefix: String,
    pub excerpt: Option<Excerpt>,
}

/// The source line of an error site (its number and text) and the span's column and width on
/// it (in characters): the C holds each line once, however many sites it has.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Excerpt {
    pub line: u32,
    pub text: Rc<str>,
    pub col: u32,
    pub width: u32,
}

/// A whole program.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    pub funcs: Vec<Function>,
    pub globals: Vec<Global>,
    /// The function that builds the globals (run first).
    pub init: Option<FuncId>,
    /// The program's entry point: each top-level expression, its value printed.
    pub main: Option<FuncId>,
    /// Error sites, by the number `Site` and the runtime's errors take.
    pub sites: Vec<Site>,
    /// For each code of a boxed closure, the leaf types of its environment (the runtime adds
    /// and zeros boxed closures slot by slot).
    pub code_slots: Vec<Option<Layout>>,
    /// The names of the primitives, by index (boxed primitives print them).
    pub prim_names: Vec<String>,
}

impl Program {
    pub fn func(&self, f: FuncId) -> &Function {
        &self.funcs[f.0 as usize]
    }

    pub fn func_mut(&mut self, f: FuncId) -> &mut Function {
        &mut self.funcs[f.0 as usize]
    }

    pub fn add(&mut self, f: Function) -> FuncId {
        self.funcs.push(f);
        FuncId(self.funcs.len() as u32 - 1)
    }

    pub fn ids(&self) -> impl Iterator<Item = FuncId> {
        (0..self.funcs.len() as u32).map(FuncId)
    }

    /// The C name of a function.
    pub fn func_name(&self, f: FuncId) -> String {
        match &self.func(f).kind {
            FuncKind::Helper { name, .. } => name.clone(),
            FuncKind::Export { name } => format!("vl_export_{name}"),
            _ => format!("f{}", f.0),
        }
    }
}

/// Calls `f` on every statement of `block`, nested ones included (before their children).
pub fn walk<'a>(block: &'a [Stmt], f: &mut impl FnMut(&'a Stmt)) {
    for s in block {
        f(s);
        for b in children(s) {
            walk(b, f);
        }
    }
}

/// Calls `f` on every statement of `block`, nested ones included, mutably (children first).
pub fn walk_mut(block: &mut Block, f: &mut impl FnMut(&mut Stmt)) {
    for s in block.iter_mut() {
        for b in children_mut(s) {
            walk_mut(b, f);
        }
        f(s);
    }
}

/// Replaces every statement of `block`, nested ones included (their blocks first), by the
/// statements `f` gives for it.
pub fn flat_map(block: &mut Block, f: &mut impl FnMut(Stmt) -> Vec<Stmt>) {
    let mut out = Vec::with_capacity(block.len());
    for mut s in std::mem::take(block) {
        for b in children_mut(&mut s) {
            flat_map(b, f);
        }
        out.extend(f(s));
    }
    *block = out;
}

/// Renames every variable of `block` (definitions and uses, nested blocks included).
pub fn map_vars(block: &mut Block, f: &impl Fn(Var) -> Var) {
    walk_mut(block, &mut |s| {
        for x in stmt_operands_mut(s) {
            if let Operand::Var(v) = x {
                *v = f(*v);
            }
        }
        match s {
            Stmt::Let(vs, _) | Stmt::Declare(vs) => vs.iter_mut().for_each(|v| *v = f(*v)),
            Stmt::Set(v, _) | Stmt::For { index: v, .. } => *v = f(*v),
            Stmt::Build { array, index, .. } => {
                *array = f(*array);
                *index = f(*index);
            }
            Stmt::Ifold { accs, index, .. } => {
                accs.iter_mut().for_each(|v| *v = f(*v));
                *index = f(*index);
            }
            Stmt::MachineCall { results, .. } => results.iter_mut().for_each(|v| *v = f(*v)),
            _ => {}
        }
    });
}

/// The variables a block defines, nested blocks included: definitions, declarations and the
/// indices of its loops.
pub fn defined_in(block: &[Stmt]) -> Vec<Var> {
    let mut defined = Vec::new();
    walk(block, &mut |s| {
        defined.extend(stmt_defs(s));
        if let Stmt::Build { index, .. } | Stmt::Ifold { index, .. } | Stmt::For { index, .. } = s {
            defined.push(*index);
        }
    });
    defined
}

/// A copy of `block` in which the variables it defines, and `also`, are fresh variables of
/// `vars` (a second copy of code in the same function: every variable is defined once); the
/// renaming too.
pub fn copy_fresh(
    block: &[Stmt],
    also: &[Var],
    vars: &mut Vec<VarInfo>,
) -> (Block, std::collections::HashMap<Var, Var>) {
    let mut defined = also.to_vec();
    defined.extend(defined_in(block));
    let renamed: std::collections::HashMap<Var, Var> = defined
        .into_iter()
        .map(|v| {
            let info = vars[v.0 as usize].clone();
            (v, fresh_var(vars, info.ty, &copy_prefix(&info.name)))
        })
        .collect();
    let mut copy = block.to_vec();
    map_vars(&mut copy, &|v| renamed.get(&v).copied().unwrap_or(v));
    (copy, renamed)
}

/// A copy of step `k` of an `ifold` (`accs`, `index`, `body`, `next`) whose accumulators hold
/// `current`, its variables fresh (`copy_fresh`): the index and the accumulators defined as
/// those constants, then the body; and what the accumulators hold after it.
pub fn ifold_step_copy(
    accs: &[Var],
    index: Var,
    body: &[Stmt],
    next: &[Operand],
    k: i64,
    current: &[Operand],
    vars: &mut Vec<VarInfo>,
) -> (Block, Vec<Operand>) {
    let mut also = accs.to_vec();
    also.push(index);
    let (copy, renamed) = copy_fresh(body, &also, vars);
    let mut out = vec![Stmt::Let(vec![renamed[&index]], Op::Copy(Operand::I64(k)))];
    for (a, x) in accs.iter().zip(current) {
        out.push(Stmt::Let(vec![renamed[a]], Op::Copy(x.clone())));
    }
    out.extend(copy);
    let then = next.iter().map(|x| renamed_operand(x, &renamed)).collect();
    (out, then)
}

/// An operand of a copy of code made by `copy_fresh`: its variable renamed if the copy renamed
/// it.
pub fn renamed_operand(x: &Operand, renamed: &std::collections::HashMap<Var, Var>) -> Operand {
    match x {
        Operand::Var(v) => Operand::Var(renamed.get(v).copied().unwrap_or(*v)),
        c => c.clone(),
    }
}

/// The prefix of the name of a copy of a variable (`fresh_var` appends its number): the
/// original's name up to its first `_`, then `_` (`t4` and `t4_17` give `t4_`).
pub fn copy_prefix(name: &str) -> String {
    format!("{}_", name.split('_').next().unwrap_or(name))
}

/// The number of statements of a block that become code, nested ones included: call-site
/// records do not count (most disappear, `passes::sites`), nor declarations and assignments
/// of variables (registers once C is compiled: the joins of an `if` the C compiler makes a
/// select). What inlining and unrolling weigh.
pub fn code_size(block: &[Stmt]) -> usize {
    let mut n = 0;
    walk(block, &mut |s| {
        n += usize::from(!matches!(
            s,
            Stmt::Site(_) | Stmt::Declare(_) | Stmt::Set(..)
        ))
    });
    n
}

/// The number of statements of a block, nested ones included (a measure of code size).
pub fn size(block: &[Stmt]) -> usize {
    let mut n = 0;
    walk(block, &mut |_| n += 1);
    n
}

/// The blocks nested in a statement.
pub fn children(s: &Stmt) -> Vec<&Block> {
    match s {
        Stmt::If { then, els, .. } => vec![then, els],
        Stmt::Switch { cases, default, .. } => {
            let mut v: Vec<&Block> = cases.iter().map(|(_, b)| b).collect();
            v.push(default);
            v
        }
        Stmt::For { body, .. }
        | Stmt::Loop(body)
        | Stmt::Build { body, .. }
        | Stmt::Ifold { body, .. }
        | Stmt::Member { body, .. } => vec![body],
        _ => vec![],
    }
}

pub fn children_mut(s: &mut Stmt) -> Vec<&mut Block> {
    match s {
        Stmt::If { then, els, .. } => vec![then, els],
        Stmt::Switch { cases, default, .. } => {
            let mut v: Vec<&mut Block> = cases.iter_mut().map(|(_, b)| b).collect();
            v.push(default);
            v
        }
        Stmt::For { body, .. }
        | Stmt::Loop(body)
        | Stmt::Build { body, .. }
        | Stmt::Ifold { body, .. }
        | Stmt::Member { body, .. } => vec![body],
        _ => vec![],
    }
}

/// The operands a statement reads itself (not in nested blocks).
pub fn stmt_operands(s: &Stmt) -> Vec<&Operand> {
    match s {
        Stmt::Let(_, op) => op_operands(op),
        Stmt::Set(_, x) | Stmt::Release(x) | Stmt::SetGlobal(_, x) => vec![x],
        Stmt::Store {
            array,
            index,
            value,
            ..
        } => vec![array, index, value],
        Stmt::SetField { obj, value, .. } => vec![obj, value],
        Stmt::If { cond, .. } => vec![cond],
        Stmt::Switch { on, .. } => vec![on],
        Stmt::For { count, .. } => vec![count],
        Stmt::Return(xs) => xs.iter().collect(),
        Stmt::TailCall { args, .. }
        | Stmt::MachineCall { args, .. }
        | Stmt::MachineTailCall { args, .. } => args.iter().collect(),
        Stmt::Build { count, elem, .. } => std::iter::once(count).chain(elem).collect(),
        Stmt::Ifold {
            init, count, next, ..
        } => init.iter().chain([count]).chain(next).collect(),
        Stmt::Declare(_) | Stmt::Site(_) | Stmt::Loop(_) | Stmt::Continue | Stmt::Member { .. } => {
            vec![]
        }
    }
}

/// The operands of an operation.
pub fn op_operands(op: &Op) -> Vec<&Operand> {
    match op {
        Op::Copy(x) | Op::Unary(_, x) | Op::Length(x) | Op::UnionTag(x) => vec![x],
        Op::IsKind(x, _) | Op::CodeOf(x) | Op::Cast(x, _) => vec![x],
        Op::Binary(_, x, y) => vec![x, y],
        Op::Call { args, .. } | Op::Rt(_, args) => args.iter().collect(),
        Op::NewArray { count, .. } => vec![count],
        Op::ArrayOf { slots, .. } => slots.iter().collect(),
        Op::Load { array, index, .. } => vec![array, index],
        Op::Field { obj, .. } => vec![obj],
        Op::Mark => vec![],
        Op::ReleaseCarrying { mark, arrays } => std::iter::once(mark).chain(arrays).collect(),
        Op::Collect {
            mark,
            budget,
            values,
        } => [mark, budget].into_iter().chain(values).collect(),
        Op::MakeUnion { fields, .. } => fields.iter().collect(),
        Op::UnionField { value, .. } => vec![value],
    }
}

/// The operands of a statement, mutably (not in nested blocks).
pub fn stmt_operands_mut(s: &mut Stmt) -> Vec<&mut Operand> {
    match s {
        Stmt::Let(_, op) => match op {
            Op::Copy(x) | Op::Unary(_, x) | Op::Length(x) | Op::UnionTag(x) => vec![x],
            Op::IsKind(x, _) | Op::CodeOf(x) | Op::Cast(x, _) => vec![x],
            Op::Binary(_, x, y) => vec![x, y],
            Op::Call { args, .. } | Op::Rt(_, args) => args.iter_mut().collect(),
            Op::NewArray { count, .. } => vec![count],
            // Constants only.
            Op::ArrayOf { .. } => vec![],
            Op::Load { array, index, .. } => vec![array, index],
            Op::Field { obj, .. } => vec![obj],
            Op::Mark => vec![],
            Op::ReleaseCarrying { mark, arrays } => {
                std::iter::once(mark).chain(arrays.iter_mut()).collect()
            }
            Op::Collect {
                mark,
                budget,
                values,
            } => [mark, budget]
                .into_iter()
                .chain(values.iter_mut())
                .collect(),
            Op::MakeUnion { fields, .. } => fields.iter_mut().collect(),
            Op::UnionField { value, .. } => vec![value],
        },
        Stmt::Set(_, x) | Stmt::Release(x) | Stmt::SetGlobal(_, x) => vec![x],
        Stmt::Store {
            array,
            index,
            value,
            ..
        } => vec![array, index, value],
        Stmt::SetField { obj, value, .. } => vec![obj, value],
        Stmt::If { cond, .. } => vec![cond],
        Stmt::Switch { on, .. } => vec![on],
        Stmt::For { count, .. } => vec![count],
        Stmt::Return(xs) => xs.iter_mut().collect(),
        Stmt::TailCall { args, .. }
        | Stmt::MachineCall { args, .. }
        | Stmt::MachineTailCall { args, .. } => args.iter_mut().collect(),
        Stmt::Build { count, elem, .. } => std::iter::once(count).chain(elem).collect(),
        Stmt::Ifold {
            init, count, next, ..
        } => init.iter_mut().chain([count]).chain(next).collect(),
        Stmt::Declare(_) | Stmt::Site(_) | Stmt::Loop(_) | Stmt::Continue | Stmt::Member { .. } => {
            vec![]
        }
    }
}

/// The variables a statement defines itself (not in nested blocks; `Set` assigns rather than
/// defines, and `Declare` declares).
pub fn stmt_defs(s: &Stmt) -> Vec<Var> {
    match s {
        Stmt::Let(vs, _) | Stmt::Declare(vs) => vs.clone(),
        Stmt::MachineCall { results, .. } => results.clone(),
        Stmt::Build { array, .. } => vec![*array],
        Stmt::Ifold { accs, .. } => accs.clone(),
        Stmt::For { index, .. } => vec![*index],
        _ => vec![],
    }
}

/// The call graph: each function's callees (guards included), by index, sorted, each once.
pub fn call_graph(p: &Program) -> Vec<Vec<usize>> {
    p.funcs
        .iter()
        .map(|f| {
            let mut cs: Vec<usize> = callees(&f.body).iter().map(|c| c.0 as usize).collect();
            cs.sort_unstable();
            cs.dedup();
            cs
        })
        .collect()
}

/// The variables a block assigns with `Set` (joins of branches, loops' variables): those that
/// may change between two uses.
pub fn assigned(block: &[Stmt]) -> std::collections::HashSet<Var> {
    let mut out = std::collections::HashSet::new();
    walk(block, &mut |s| {
        if let Stmt::Set(v, _) = s {
            out.insert(*v);
        }
    });
    out
}

/// Keeps the elements of `xs` whose entry in `keep` (one per element, in order) is true: the
/// arguments of a call whose callee lost parameters, the slots of a layout that lost some.
pub fn retain_marked<T>(xs: &mut Vec<T>, keep: &[bool]) {
    let mut keep = keep.iter();
    xs.retain(|_| keep.next().copied().unwrap_or(true));
}

/// The functions a block calls directly (guards included).
pub fn callees(block: &[Stmt]) -> Vec<FuncId> {
    let mut out = Vec::new();
    walk(block, &mut |s| match s {
        Stmt::Let(_, Op::Call { func, guard: g, .. }) => {
            out.push(*func);
            out.extend(*g);
        }
        Stmt::TailCall { func, .. } => out.push(*func),
        _ => {}
    });
    out
}
