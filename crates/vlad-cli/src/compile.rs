//! `vlad compile`: the compiler pipeline as far as it exists (the flow analysis, issue 6).

use crate::{prepare, report};
use std::path::{Path, PathBuf};
use vlad_flow::Analysis;
use vlad_syntax::Diagnostic;

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Emit {
    /// Every specialised function: its abstract argument and result.
    Flow,
    /// The specialised program: each reachable function's Core with its calls resolved.
    Ir,
}

pub fn compile(file: &Path, include: &[PathBuf], emit: Emit) -> u8 {
    let (sources, exprs, mut ev) = match prepare(file, include, None) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let place = |span: vlad_core::Span| match sources.location(span) {
        Some((_, line, col)) => format!("{line}:{col}"),
        None => "?".to_string(),
    };
    let mut analysis = Analysis::new(&mut ev);
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
                return report(
                    &Diagnostic::new(e.span, format!("cannot compile: {}", e.message)),
                    &sources,
                );
            }
        }
    }
    match emit {
        Emit::Flow => {
            for (span, k) in results {
                println!(
                    "; {} => {}",
                    place(span),
                    analysis.show_av(&analysis.results[k], &place)
                );
            }
            print!("{}", analysis.show(&place));
        }
        Emit::Ir => {
            let entries: Vec<usize> = results.iter().map(|r| r.1).collect();
            let program = match analysis.specialise(&entries) {
                Ok(p) => p,
                Err(e) => {
                    return report(
                        &Diagnostic::new(e.span, format!("cannot compile: {}", e.message)),
                        &sources,
                    )
                }
            };
            for (span, k) in &results {
                println!("; {} => f{k}", place(*span));
            }
            print!("{}", program.show(&analysis, &place));
        }
    }
    0
}
