//! Running Farfel text in the evaluator, for the tests. Each test file uses a part of it.

#![allow(dead_code)]

use vlad_core::Arena;
use vlad_eval::{Evaluator, Input, Output};
use vlad_syntax::SourceMap;

/// What a program printed (the lines of its PRINTs: the run of a Fortran program writes
/// nothing else, as `vlad run` runs it), or its rendered error.
pub fn run(src: &str, inputs: &[f64]) -> Result<String, String> {
    let mut sources = SourceMap::new();
    let mut arena = Arena::new();
    let program = vlad_farfel::program_str(&mut sources, &mut arena, "test.f", src)
        .map_err(|d| d.render(&sources))?;
    let mut ev = Evaluator::new(arena);
    ev.input = Input::from_numbers(inputs.iter().copied());
    let (out, buffer) = Output::buffer();
    ev.output = out;
    ev.eval(program.run)
        .map_err(|e| vlad_syntax::Diagnostic::new(e.span, e.message).render(&sources))?;
    let s = buffer.borrow().clone();
    Ok(s)
}

/// The reals a program printed, in order (booleans and parentheses skipped).
pub fn numbers(output: &str) -> Vec<f64> {
    output
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == '#')
        .filter_map(|t| t.parse::<f64>().ok())
        .collect()
}

/// The numbers printed by `src` run on `inputs`; panics with the error if it fails.
pub fn run_numbers(src: &str, inputs: &[f64]) -> Vec<f64> {
    match run(src, inputs) {
        Ok(out) => numbers(&out),
        Err(e) => panic!("the program failed:\n{e}"),
    }
}

/// The error a program fails with at lowering or run time: `(line, column, message)`.
pub fn error(src: &str) -> (usize, usize, String) {
    let e = match run(src, &[]) {
        Ok(out) => panic!("expected an error, the program printed:\n{out}"),
        Err(e) => e,
    };
    let first = e.lines().next().unwrap_or("").to_string();
    // test.f:LINE:COL: error: MESSAGE
    let mut parts = first.splitn(4, ':');
    let _file = parts.next();
    let line = parts.next().and_then(|l| l.parse().ok()).unwrap_or(0);
    let col = parts.next().and_then(|c| c.parse().ok()).unwrap_or(0);
    let msg = parts.next().unwrap_or("").trim().to_string();
    assert!(e.contains('^'), "no caret excerpt in\n{e}");
    (line, col, msg)
}
