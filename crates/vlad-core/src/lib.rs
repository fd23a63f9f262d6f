//! Core: the small language every vlad stage shares.
//!
//! The expander lowers VLAD surface syntax into Core; the evaluator runs it; the AD transforms
//! (forward, perturbation, ...) map Core to Core so that the evaluator (at run time) and the flow
//! analysis (at compile time) transform closures with the very same code.
//!
//! Architecture invariant: this crate knows nothing about source text, values at run time or
//! evaluation strategy. It holds expressions, patterns, constant data and the transforms.

pub mod datum;
pub mod expr;
pub mod graph;
pub mod number;
pub mod prelude;
pub mod prim;
pub mod reverse;
pub mod span;
pub mod tags;
pub mod transform;

pub use datum::Datum;
pub use expr::{Arena, Expr, ExprId, Pattern, Var};
pub use prelude::Prelude;
pub use prim::Prim;
pub use span::Span;
pub use tags::{Tag, Tags};
