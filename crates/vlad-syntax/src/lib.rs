//! The VLAD front end: source files and diagnostics, the reader (text to S-expressions with
//! spans), the expander (S-expressions to Core) and the program loader (top-level forms,
//! `include`, `===>` assertions).
//!
//! Architecture invariant: nothing here evaluates anything. The output is Core in a
//! `vlad_core::Arena` plus the data of the assertions.

pub mod diagnostic;
pub mod expand;
pub mod library;
pub mod number;
pub mod program;
pub mod reader;

pub use diagnostic::{Diagnostic, SourceMap};
pub use reader::{Sexp, SexpKind};
