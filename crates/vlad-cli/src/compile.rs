//! `vlad compile`: the compiler pipeline as far as it exists (the flow analysis, issue 6).

use crate::{prepare, report};
use std::path::{Path, PathBuf};
use vlad_flow::Analysis;
use vlad_syntax::Diagnostic;

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Emit {
    /// The Core of each top-level expression (a Fortran file's lowering), indented.
    Core,
    /// Every specialised function: its abstract argument and result.
    Flow,
    /// The specialised program: each reachable function's Core with its calls resolved.
    Ir,
    /// The C program.
    C,
}

pub fn compile(
    file: &Path,
    include: &[PathBuf],
    emit: Option<Emit>,
    output: Option<&Path>,
    opts: crate::native::CcOptions,
) -> u8 {
    let emit = match (emit, output) {
        (Some(Emit::C), _) | (None, Some(_)) => {
            return compile_c(file, include, emit, output, opts)
        }
        (Some(e), _) => e,
        (None, None) => Emit::Flow,
    };
    if let Some(out) = output {
        eprintln!(
            "vlad: -o {} writes an executable or C (--emit c); --emit {emit:?} prints to standard output",
            out.display()
        );
        return 2;
    }
    let (sources, exprs, mut ev) = match prepare(file, include, None) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let place = |span: vlad_core::Span| match sources.location(span) {
        Some((_, line, col)) => format!("{line}:{col}"),
        None => "?".to_string(),
    };
    if let Emit::Core = emit {
        for te in &exprs {
            match &te.core {
                Ok(c) => write_out(&format!(
                    "; {}\n{}",
                    place(te.span),
                    vlad_farfel::pretty::show_core(&ev.arena, *c)
                )),
                Err(d) => return report(d, &sources),
            }
        }
        return 0;
    }
    let mut analysis = Analysis::new(&mut ev);
    analysis.deadline = Some(std::time::Instant::now() + crate::native::analysis_time_limit());
    let mut results = Vec::new();
    for te in &exprs {
        let core = match &te.core {
            Ok(c) => *c,
            Err(d) => return report(d, &sources),
        };
        if std::env::var_os("VLAD_FLOW_DEBUG").is_some() {
            eprintln!("flow: analysing the expression at {}", place(te.span));
        }
        match analysis.analyse(core) {
            Ok(k) => results.push((te.span, k)),
            Err(e) => {
                if std::env::var_os("VLAD_FLOW_DEBUG").is_some() {
                    eprint!("{}", analysis.show(&place));
                }
                let (span, message) = crate::native::analysis_error(&sources, &e, te.span);
                return report(
                    &Diagnostic::new(span, format!("cannot compile: {message}")),
                    &sources,
                );
            }
        }
    }
    match emit {
        Emit::Flow => {
            for (span, k) in results {
                write_out(&format!(
                    "; {} => {}\n",
                    place(span),
                    analysis.show_av(&analysis.results[k], &place)
                ));
            }
            write_out(&analysis.show(&place));
        }
        Emit::Ir => {
            let entries: Vec<usize> = results.iter().map(|r| r.1).collect();
            let program = match analysis.specialise(&entries) {
                Ok(p) => p,
                Err(e) => {
                    let (span, message) = crate::native::analysis_error(&sources, &e, e.span);
                    return report(
                        &Diagnostic::new(span, format!("cannot compile: {message}")),
                        &sources,
                    );
                }
            };
            for (span, k) in &results {
                write_out(&format!("; {} => f{k}\n", place(*span)));
            }
            write_out(&program.show(&analysis, &place));
        }
        Emit::C | Emit::Core => unreachable!("handled above"),
    }
    0
}

/// `--emit c` (the C program, to `output` or standard output) or `-o` (an executable).
fn compile_c(
    file: &Path,
    include: &[PathBuf],
    emit: Option<Emit>,
    output: Option<&Path>,
    opts: crate::native::CcOptions,
) -> u8 {
    let c = match crate::native::generate_c(file, include, false) {
        Ok(c) => c,
        Err(crate::native::Failure::Program(code)) => return code,
        Err(crate::native::Failure::Unsupported(reason)) => {
            eprintln!("vlad: cannot compile {} to C: {reason}", file.display());
            return 1;
        }
        Err(crate::native::Failure::Evaluate(diagnostic)) => {
            eprint!("{diagnostic}");
            return 1;
        }
    };
    let written = match (emit, output) {
        (Some(Emit::C), None) => {
            write_out(&c.single());
            Ok(())
        }
        (Some(Emit::C), Some(out)) => std::fs::write(out, c.single())
            .map_err(|e| format!("cannot write {}: {e}", out.display())),
        (_, Some(out)) => crate::native::compile_c(&crate::native::units(&c), out, opts),
        (_, None) => unreachable!("an output or --emit c"),
    };
    match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("vlad: {e}");
            1
        }
    }
}

/// Writes to standard output; a closed pipe (`vlad compile ... | head`) is not an error.
fn write_out(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}
