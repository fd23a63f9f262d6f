//! `vlad`: run and check VLAD programs.

mod check;
mod compile;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use vlad_core::Arena;
use vlad_eval::Evaluator;
use vlad_syntax::program::{build, load, TopExpr};
use vlad_syntax::{Diagnostic, SourceMap};

#[derive(Parser)]
#[command(
    name = "vlad",
    version,
    about = "VLAD: a functional language with first-class automatic differentiation"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a program: evaluate each top-level expression and print its value.
    Run {
        file: PathBuf,
        /// Extra directories searched by `include`.
        #[arg(short = 'I', value_name = "DIR")]
        include: Vec<PathBuf>,
        /// Use the reference evaluator (currently the only engine).
        #[arg(long)]
        interp: bool,
        /// Stop with an error after this many evaluation steps.
        #[arg(long, value_name = "N")]
        max_steps: Option<u64>,
    },
    /// Analyse a program for compilation and print what the compiler knows about it.
    Compile {
        file: PathBuf,
        /// Extra directories searched by `include`.
        #[arg(short = 'I', value_name = "DIR")]
        include: Vec<PathBuf>,
        /// What to print: `flow`, the abstract argument and result of every specialised
        /// function the flow analysis found.
        #[arg(long, value_enum, default_value = "flow")]
        emit: compile::Emit,
    },
    /// Check a conformance file: every `expr ===> expected` assertion must hold.
    Check {
        file: PathBuf,
        /// Extra directories searched by `include`.
        #[arg(short = 'I', value_name = "DIR")]
        include: Vec<PathBuf>,
        /// Stop each assertion with an error after this many evaluation steps.
        #[arg(long, value_name = "N")]
        max_steps: Option<u64>,
    },
}

/// Deep data (long lists, deeply nested pairs) is printed and compared recursively; give that
/// work a generous stack rather than risk an overflow on legitimate programs.
const STACK_BYTES: usize = 1 << 30;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let worker = std::thread::Builder::new()
        .stack_size(STACK_BYTES)
        .spawn(move || match cli.command {
            Command::Run {
                file,
                include,
                interp: _,
                max_steps,
            } => run(&file, &include, max_steps),
            Command::Check {
                file,
                include,
                max_steps,
            } => check::check(&file, &include, max_steps),
            Command::Compile {
                file,
                include,
                emit,
            } => compile::compile(&file, &include, emit),
        });
    match worker.map(|h| h.join()) {
        Ok(Ok(code)) => ExitCode::from(code),
        _ => {
            eprintln!("vlad: internal error");
            ExitCode::from(70)
        }
    }
}

pub(crate) fn report(d: &Diagnostic, sources: &SourceMap) -> u8 {
    eprint!("{}", d.render(sources));
    1
}

/// Loads and expands a program and makes its evaluator. A load or expansion error of a
/// definition is reported here and gives the exit code.
pub(crate) fn prepare(
    file: &std::path::Path,
    include: &[PathBuf],
    max_steps: Option<u64>,
) -> Result<(SourceMap, Vec<TopExpr>, Evaluator), u8> {
    let mut sources = SourceMap::new();
    let mut arena = Arena::new();
    let forms = load(&mut sources, file, include).map_err(|d| report(&d, &sources))?;
    let exprs = build(&mut arena, &forms).map_err(|d| report(&d, &sources))?;
    let mut ev = Evaluator::new(arena);
    ev.max_steps = max_steps;
    Ok((sources, exprs, ev))
}

fn run(file: &std::path::Path, include: &[PathBuf], max_steps: Option<u64>) -> u8 {
    let (sources, exprs, mut ev) = match prepare(file, include, max_steps) {
        Ok(p) => p,
        Err(code) => return code,
    };
    for te in exprs {
        let core = match te.core {
            Ok(c) => c,
            Err(d) => return report(&d, &sources),
        };
        match ev.eval(core) {
            Ok(v) => {
                let text = ev.render(&v);
                ev.output.line(&text);
            }
            Err(e) => return report(&Diagnostic::new(e.span, e.message), &sources),
        }
    }
    ev.output.flush();
    0
}
