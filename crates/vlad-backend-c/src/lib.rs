//! The C backend (paper 001 §6): the specialised first-order program of `vlad-flow` as C.
//!
//! Every value of the specialised program has a layout fixed by its abstract value, and the
//! generated code keeps it *flat*: a value is a list of scalar leaves (a `double` for "some
//! real", a `long` for "some boolean", a `V` pointer for a boxed value), with everything
//! known at compile time erased. Pairs, closures, bundles and tagged values are never
//! allocated: their leaves travel as separate C variables and function parameters (scalar
//! replacement of aggregates by construction), so a closure is its free variables' leaves and a
//! call of a known closure is a direct C call. Results with several leaves come back in a
//! struct per leaf list.
//!
//! Boxed values (`Av::Dyn`) are pointers to tagged heap objects of the runtime
//! (`runtime.c`), allocated in an arena; a boxed closure keeps its code number and its leaves in
//! the layout of its code's environment summary, and a call of a boxed procedure is a `switch`
//! over the codes it may be. Converting a value to the layout of a wider abstract value
//! (`coerce`) is where known constants are materialised and values are boxed.
//!
//! The AD operators are maps over the layouts: `perturb`, `*j`, ... change tags only and keep
//! the leaves; `bundle` interleaves its arguments' leaves, `primal` and `tangent` select them,
//! `plus` adds them, and zeros are known at compile time.
//!
//! Arrays are flat runtime objects (`gen/arrays.rs`), with AD tags of either mode, boxed by
//! reference where they are part of a boxed value; the sensitivity of a reverse-mode `get` is
//! a lazy one-hot object of the runtime. Recursion with non-tail calls (a reverse-mode loop's
//! forward sweep and backpropagator chain) goes, once the C stack is deep, to an explicit-stack
//! version of its component (`machine.rs`). What the backend cannot compile is reported as
//! `Unsupported` with a reason and a position in the user's program; `vlad run` then falls
//! back to the evaluator.

mod gen;
mod machine;
mod units;

pub use gen::{generate, Unsupported};
pub use units::{CProgram, Function};

/// The C runtime every generated program starts with.
pub const RUNTIME: &str = include_str!("runtime.c");
