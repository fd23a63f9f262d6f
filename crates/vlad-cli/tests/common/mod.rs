//! What more than one test file of vlad-cli needs.

/// The examples that take minutes in the evaluator, evaluated once in CI: tests/native.rs checks
/// their expectations (`===>`), and tests/conformance.rs leaves them out of its
/// `examples_directory`. The saddle examples' expectations are checked in the evaluator's run
/// that native code is compared with (`vlad check --print`: the assertions, and what the
/// program printed); the particle examples' against native code, whose output the evaluator
/// checks at a coarser time step (`PARTICLES` in tests/native.rs).
pub const CHECKED_WITH_NATIVE: &[&str] = &[
    "examples/particle-FF.vlad",
    "examples/particle-FR.vlad",
    "examples/particle-RF.vlad",
    "examples/particle-RR.vlad",
    "examples/saddle-FF.vlad",
    "examples/saddle-FR.vlad",
    "examples/saddle-RF.vlad",
    "examples/saddle-RR.vlad",
];
