//! Whole-program flow analysis (paper 001 §5): a polyvariant abstract interpreter over Core.
//!
//! This is the first part of the compiler pipeline of DESIGN.md: it computes, for every
//! procedure that can be called, the abstract arguments it is called with and the abstract
//! values it returns. Specialisation into a first-order program (one function per key of the
//! analysis) builds on it. `docs/flow.md` describes the design and what is still missing.
//!
//! Architecture invariant: the analysis never runs the program; it reads Core only, and folds
//! constants with the arithmetic the evaluator computes with (`Prim::arith`), so that folding
//! cannot change a result. It is the evaluator's peer: it depends on `vlad-core` alone, and
//! shares the program's arena and AD prelude with the evaluator, never the evaluator itself.

mod ad;
pub use ad::{is_onehot_bundle, MapOp};
pub mod analysis;
pub mod domain;
pub mod show;
pub mod specialise;

pub use analysis::{Analysis, Boxed, FlowError, Key, Target};
pub use domain::{Av, Callee, CodeId};
pub use specialise::Program;
