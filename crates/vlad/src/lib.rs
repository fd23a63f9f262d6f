//! The vlad toolchain as a library: the stages put together. The `vlad` command is a thin layer
//! over it.
//!
//! - [`compile`]: the compiler's one entry point, closed top-level expressions to the IR and C
//!   (the flow analysis, the specialisation, the lowering, the IR's passes, the C emitter).
//! - [`export`]: procedures of a program compiled to a shared library (`vlad compile --lib`),
//!   and [`library`]: such a library loaded and called from Rust; [`cc`]: the C compiler.
//! - [`exec`]: the specialised program of the flow analysis, run by an interpreter over the
//!   evaluator's values (`vlad run --engine ir`): the oracle that checks the specialisation.

pub mod cc;
pub mod compile;
pub mod exec;
pub mod export;
pub mod library;

pub use compile::{compile, CompileError, Compiled};
pub use library::Library;

use vlad_eval::{EvalError, Evaluator};
use vlad_flow::Analysis;

/// A flow analysis of the program the evaluator holds: the analysis shares its arena and AD
/// prelude (the two engines are peers; neither holds the other).
pub fn analysis(ev: &mut Evaluator) -> Result<Analysis<'_>, EvalError> {
    let prelude = ev.prelude_ids()?;
    Ok(Analysis::new(&mut ev.arena, prelude))
}
