//! The syntax tree of a Farfel file: program units (with their nested subprograms), their
//! declarations and their structured executable statements.
//!
//! Every expression, reference and statement carries a `NodeId`, unique in the file, under
//! which the analysis (`sema`) records what a name resolved to and what type a node has.

use vlad_core::Span;

pub type NodeId = u32;

/// The four types of the subset. REAL and DOUBLE PRECISION are both VLAD reals (IEEE doubles);
/// they stay distinct for the type checks a Fortran compiler makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    Int,
    Real,
    Double,
    Logical,
}

impl Ty {
    pub fn name(self) -> &'static str {
        match self {
            Ty::Int => "INTEGER",
            Ty::Real => "REAL",
            Ty::Double => "DOUBLE PRECISION",
            Ty::Logical => "LOGICAL",
        }
    }

    pub fn is_numeric(self) -> bool {
        self != Ty::Logical
    }

    /// REAL or DOUBLE PRECISION.
    pub fn is_real(self) -> bool {
        matches!(self, Ty::Real | Ty::Double)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    Eqv,
    Neqv,
}

impl BinOp {
    pub fn spelling(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Pow => "**",
            BinOp::Eq => ".EQ.",
            BinOp::Ne => ".NE.",
            BinOp::Lt => ".LT.",
            BinOp::Le => ".LE.",
            BinOp::Gt => ".GT.",
            BinOp::Ge => ".GE.",
            BinOp::And => ".AND.",
            BinOp::Or => ".OR.",
            BinOp::Eqv => ".EQV.",
            BinOp::Neqv => ".NEQV.",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub id: NodeId,
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    Int(f64),
    /// A real constant; `true` for DOUBLE PRECISION (`1D0`).
    Real(f64, bool),
    Logical(bool),
    /// A name on its own: a variable, a PARAMETER, or (as an actual argument) a subprogram.
    Name(String),
    /// `NAME(args)`: an array element, a function reference or an intrinsic.
    Apply(String, Span, Vec<Expr>),
    /// `(e)`: an expression, never a variable passed by reference.
    Paren(Box<Expr>),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
}

/// A variable or array element being assigned, read into or differentiated.
#[derive(Clone, Debug)]
pub struct Ref {
    pub id: NodeId,
    pub name: String,
    pub name_span: Span,
    pub subs: Option<Vec<Expr>>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct ImpliedDo<T> {
    pub items: Vec<T>,
    pub var: Ref,
    pub start: Expr,
    pub end: Expr,
    pub step: Option<Expr>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum IoItem {
    Expr(Expr),
    Loop(Box<ImpliedDo<IoItem>>),
}

/// An opening or closing assignment of an ADF/ADR block.
#[derive(Clone, Debug)]
pub enum AdItem {
    /// `TANGENT(var) = value` (ADF) or `COTANGENT(var) = value` (ADR).
    Open {
        var: Ref,
        value: Expr,
        span: Span,
    },
    /// `dest = TANGENT(var)` or `dest = COTANGENT(var)`.
    Close {
        dest: Ref,
        var: Ref,
        span: Span,
    },
    Loop(Box<ImpliedDo<AdItem>>),
}

#[derive(Clone, Debug)]
pub struct Stmt {
    pub id: NodeId,
    pub label: Option<(u32, Span)>,
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct IfArm {
    pub cond: Expr,
    pub body: Vec<Stmt>,
}

// A DO loop is the largest statement; the tree is built once per file, so the unboxed
// variants' size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum StmtKind {
    Assign(Ref, Expr),
    Call(String, Span, Vec<Expr>),
    /// A block IF: IF/ELSE IF arms, an optional ELSE, and the label of its END IF.
    If {
        arms: Vec<IfArm>,
        else_body: Option<Vec<Stmt>>,
        /// Labels on ELSE IF / ELSE statements (which no GOTO may name).
        inner_labels: Vec<(u32, Span)>,
        end_label: Option<(u32, Span)>,
    },
    LogicalIf(Expr, Box<Stmt>),
    Do {
        var: Ref,
        start: Expr,
        end: Expr,
        step: Option<Expr>,
        body: Vec<Stmt>,
        /// `DO 10 ...`: the label of the terminal statement (the last of `body`).
        terminal: Option<u32>,
        /// The label of an `END DO`.
        end_label: Option<(u32, Span)>,
    },
    Goto(u32, Span),
    Continue,
    Return,
    Stop,
    Read(Vec<IoItem>),
    Print(Vec<IoItem>),
    /// An ADF (forward) or ADR (`reverse`) block.
    Ad {
        reverse: bool,
        opening: Vec<AdItem>,
        body: Vec<Stmt>,
        closing: Vec<AdItem>,
        end_span: Span,
    },
}

#[derive(Clone, Debug)]
pub struct Dim {
    pub lo: Option<Expr>,
    /// `None` for `*` (assumed size).
    pub hi: Option<Expr>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Entity {
    pub name: String,
    pub span: Span,
    pub dims: Option<Vec<Dim>>,
}

#[derive(Clone, Debug)]
pub enum Decl {
    Type(Ty, Vec<Entity>, Span),
    Dimension(Vec<Entity>),
    Parameter(Vec<(String, Span, Expr)>),
    External(Vec<(String, Span)>),
    Intrinsic(Vec<(String, Span)>),
    /// `IMPLICIT NONE` (`None`) or letter ranges with their types.
    Implicit(Option<Vec<(Ty, char, char)>>, Span),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitKind {
    Program,
    Subroutine,
    Function(Option<Ty>),
}

#[derive(Clone, Debug)]
pub struct Unit {
    pub kind: UnitKind,
    pub name: String,
    pub name_span: Span,
    pub params: Vec<(String, Span)>,
    pub decls: Vec<Decl>,
    pub body: Vec<Stmt>,
    pub nested: Vec<Unit>,
    /// The header statement (or the first statement of a main program without one).
    pub span: Span,
    pub end_span: Span,
    /// The label of the END statement (a GOTO to it returns).
    pub end_label: Option<(u32, Span)>,
}
