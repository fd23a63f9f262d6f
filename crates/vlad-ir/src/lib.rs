//! The typed first-order IR between the flow analysis and the C backend: the home of every
//! optimisation.
//!
//! The lowering (`vlad-lower`) turns the specialised program of the flow analysis into a
//! [`Program`]: first-order functions over typed leaves (`Ty`: reals, booleans, integers,
//! boxed values, flat arrays of a layout, tagged unions, arena marks), with structured control
//! flow, direct calls only (a boxed procedure is a `switch` over the codes it may be, each case
//! a direct call), the runtime's functions through a typed table (`rt`), and `build` and `ifold`
//! as first-class loops. The passes (`passes::optimize`) run over it, each followed by the
//! verifier (`verify`) when checking is on; the C backend (`vlad-backend-c`) only prints it.
//!
//! Architecture invariant: this crate knows nothing of the source language beyond what a
//! first-order program needs (no abstract values, no Core, no C): it depends on `vlad-core`
//! only for the graph algorithms stages share.

pub mod builder;
pub mod ir;
pub mod liveness;
pub mod passes;
pub mod print;
pub mod rt;
pub mod verify;

/// Statements nested deeper than this are printed (as IR or C) without more indentation, so that
/// the text of a deeply nested program (a `cond` of thousands of clauses) stays linear in it.
pub const MAX_INDENT: usize = 16;

pub use builder::Builder;
pub use ir::*;
pub use rt::Rt;
pub use verify::{verify, VerifyError};

#[cfg(test)]
mod tests;
