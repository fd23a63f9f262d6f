//! The C backend: the IR program (`vlad-ir`), after its passes, printed as C (`emit`), with the
//! runtime (`runtime.c`) and the ABI constants they share (`abi`), as one translation unit or
//! several (`units`).
//!
//! Architecture invariant: this crate depends on the IR alone (and on `vlad-core` for the AD
//! tags' numbers); it makes no decision the IR has not made, and reads no C it wrote.

mod abi;
mod emit;
mod units;

pub use emit::{c_string, emit, header, real_literal, EmitError, HeaderEntry};
pub use units::{CFunction, CProgram};

/// The C runtime every generated program includes.
pub const RUNTIME: &str = include_str!("runtime.c");
