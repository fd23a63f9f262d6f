//! The passes over the IR, and the pipeline that runs them (`optimize`; Cranelift's
//! `Context::optimize` is the model): each pass a plain function in its own module, the
//! verifier after each when checking is on.

pub mod carry;
pub mod dead;
pub mod fields;
pub mod fission;
pub mod fuse;
pub mod inline;
pub mod loops;
pub mod machines;
pub mod marks;
pub mod overwrite;
pub mod peel;
pub mod provenance;
pub mod reuse;
pub mod same_args;
pub mod scalars;
pub mod simplify;
pub mod sites;
pub mod sparse;
pub mod tail;
pub mod units;
pub mod unread;
pub mod version;

use crate::ir::{Function, Program};
use crate::verify::{verify, VerifyError};

/// How the pipeline runs.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Run the verifier after every pass (on in tests, and under `VLAD_VERIFY_IR=1`).
    pub verify: bool,
    /// The largest deep component (in statements) that gets an explicit-stack machine: a
    /// machine is a second copy of its component, and a generic program can have components of
    /// megabytes of C.
    pub max_machine_size: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            verify: cfg!(debug_assertions) || std::env::var_os("VLAD_VERIFY_IR").is_some(),
            max_machine_size: 25_000,
        }
    }
}

/// What the pipeline did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub machines: machines::Stats,
}

/// The scalar optimisation of one function, which `inline` runs on each function (callees
/// first) once their calls are inlined: `simplify`, then twice `scalars::unroll`, `simplify`,
/// `scalars::replace`, `simplify` (unrolling a small loop makes the indices of its reads
/// constants, and the arrays it reads can then be replaced in turn).
pub fn scalar_optimise(f: &mut Function) {
    scalar_optimise_checked(f, &mut |_, _| Ok(())).expect("no check to fail");
}

/// `scalar_optimise`, with `check` called on the function after each of its sub-passes (the
/// verifier, when the pipeline verifies): the first failure, with the sub-pass's name, ends it.
pub fn scalar_optimise_checked(
    f: &mut Function,
    check: &mut dyn FnMut(&Function, &str) -> Result<(), String>,
) -> Result<(), String> {
    let mut after =
        |f: &Function, pass: &str| check(f, pass).map_err(|m| format!("after {pass}: {m}"));
    simplify::function(f);
    after(f, "simplify")?;
    if fuse::function(f) {
        after(f, "fuse")?;
        simplify::function(f);
        after(f, "simplify (after fuse)")?;
    }
    if fission::function(f) {
        after(f, "fission")?;
        simplify::function(f);
        after(f, "simplify (after fission)")?;
    }
    if sparse::function(f) {
        after(f, "sparse")?;
        simplify::function(f);
        after(f, "simplify (after sparse)")?;
    }
    for _ in 0..2 {
        scalars::unroll(f);
        after(f, "scalars::unroll")?;
        simplify::function(f);
        after(f, "simplify (after unroll)")?;
        scalars::replace(f);
        after(f, "scalars::replace")?;
        simplify::function(f);
        after(f, "simplify (after replace)")?;
    }
    Ok(())
}

/// The passes, in order, over a program fresh from the lowering.
pub fn optimize(p: &mut Program, opts: Options) -> Result<Stats, VerifyError> {
    let check = |p: &Program, after: &str| -> Result<(), VerifyError> {
        if opts.verify {
            verify(p).map_err(|e| VerifyError {
                func: e.func,
                message: format!("after {after}: {}", e.message),
            })?;
        }
        Ok(())
    };
    check(p, "the lowering")?;
    same_args::run(p);
    check(p, "parameters every call passes one value")?;
    inline::run_checked(p, opts.verify)?;
    check(p, "inlining and scalar optimisation")?;
    reuse::run(p);
    check(p, "values stored for a later loop")?;
    unread::run(p);
    check(p, "values no one reads")?;
    dead::run(p);
    check(p, "dead functions")?;
    fields::run(p);
    check(p, "slots no one reads")?;
    peel::run(p);
    check(p, "first steps peeled")?;
    tail::run(p);
    check(p, "tail calls")?;
    marks::run(p);
    check(p, "arena marks")?;
    carry::run(p);
    check(p, "loops that carry arrays")?;
    overwrite::run(p);
    check(p, "builds that overwrite a dead array")?;
    loops::run(p);
    check(p, "the lowering of build and ifold")?;
    version::run(p);
    check(p, "loop versioning")?;
    let machines = machines::run(p, opts.max_machine_size);
    check(p, "explicit-stack machines")?;
    sites::run(p);
    check(p, "dead sites")?;
    Ok(Stats { machines })
}
