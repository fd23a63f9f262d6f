//! `vlad`: run and check VLAD programs.

mod check;
mod compile;
mod gradbench;
mod native;
mod repl;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use vlad_core::Arena;
use vlad_eval::Evaluator;
use vlad_syntax::program::{build_program, load, Program};
use vlad_syntax::{Diagnostic, SourceMap};

#[derive(Parser, Clone)]
#[command(
    name = "vlad",
    version,
    about = "VLAD: a functional language with first-class automatic differentiation"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Clone)]
enum Command {
    /// Run a program: compile it to native code (cached) and run it, printing the value of
    /// each top-level expression. A program the compiler cannot handle yet runs in the
    /// evaluator, after a one-line note on stderr.
    Run {
        file: PathBuf,
        /// Extra directories searched by `include`.
        #[arg(short = 'I', value_name = "DIR")]
        include: Vec<PathBuf>,
        /// Use the reference evaluator (the same as `--engine eval`).
        #[arg(long)]
        interp: bool,
        /// How to run: `native`, compiled C; `eval`, the reference evaluator; `ir`, flow
        /// analysis and an interpreter of the specialised first-order program.
        #[arg(long, value_enum, default_value = "native")]
        engine: Engine,
        /// Stop with an error after this many evaluation steps (evaluator and `ir` only: with
        /// this flag the default engine is the evaluator).
        #[arg(long, value_name = "N")]
        max_steps: Option<u64>,
        /// Compile for any CPU of this architecture (no `-march=native`).
        #[arg(long)]
        portable: bool,
    },
    /// Analyse a program for compilation and print what the compiler knows about it.
    Compile {
        file: PathBuf,
        /// Extra directories searched by `include`.
        #[arg(short = 'I', value_name = "DIR")]
        include: Vec<PathBuf>,
        /// What to write: `flow`, the abstract argument and result of every specialised
        /// function the flow analysis found; `ir`, the specialised program; `c`, the C
        /// program. Without `--emit`: an executable if `-o` is given, else `flow`.
        #[arg(long, value_enum)]
        emit: Option<compile::Emit>,
        /// Where to write (an executable without `--emit`); standard output if absent.
        #[arg(short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
        /// Compile for any CPU of this architecture (no `-march=native`).
        #[arg(long)]
        portable: bool,
        /// Write a shared library `libNAME.so` and its C header `NAME.h` (NAME may have a
        /// directory) of the procedures `--export` names, instead of a program.
        #[arg(long, value_name = "NAME", requires = "export")]
        lib: Option<PathBuf>,
        /// A procedure of the library and the shapes of its arguments: `name(real, array)`,
        /// a shape being `real`, `array` (of reals) or `array(SHAPE)`. Repeatable.
        #[arg(long = "export", value_name = "SIGNATURE", requires = "lib")]
        export: Vec<String>,
    },
    /// Read-eval-print loop: definitions persist, errors do not end the session; `,help`
    /// lists the commands (`,time EXPR`, `,native EXPR`, `,history`).
    Repl {
        /// Extra directories searched by `include`.
        #[arg(short = 'I', value_name = "DIR")]
        include: Vec<PathBuf>,
        /// The history file (default `$VLAD_HISTORY`, else `~/.vlad_history`).
        #[arg(long, value_name = "FILE")]
        history: Option<PathBuf>,
    },
    /// Speak GradBench's protocol on standard input and output: vlad as a tool of the AD
    /// benchmark suite (docs/gradbench.md).
    Gradbench {
        /// Read the modules' VLAD files (`NAME.vlad`) from this directory instead of the ones
        /// built into vlad.
        #[arg(long, value_name = "DIR")]
        modules: Option<PathBuf>,
        /// Compile for any CPU of this architecture (no `-march=native`).
        #[arg(long)]
        portable: bool,
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
        /// How to run each assertion (see `vlad run --help`).
        #[arg(long, value_enum, default_value = "eval")]
        engine: Engine,
    },
}

/// Deep data (long lists, deeply nested pairs) is printed and compared recursively, and the
/// executor of the specialised program recurses natively for non-tail calls (about 3 KB a
/// call): give that work a generous stack (reserved, not committed, until used) rather than
/// risk an overflow on legitimate programs such as a million-deep non-tail recursion.
const STACK_BYTES: usize = 1 << 33;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A system that will not reserve the large stack still gets a thread with a smaller one.
    let worker = [STACK_BYTES, 1 << 30].into_iter().find_map(|bytes| {
        let cli = cli.clone();
        std::thread::Builder::new()
            .stack_size(bytes)
            .spawn(move || dispatch(cli))
            .ok()
    });
    match worker.map(|h| h.join()) {
        Some(Ok(code)) => ExitCode::from(code),
        _ => {
            eprintln!("vlad: internal error");
            ExitCode::from(70)
        }
    }
}

fn dispatch(cli: Cli) -> u8 {
    match cli.command {
        Command::Run {
            file,
            include,
            interp,
            engine,
            max_steps,
            portable,
        } => {
            let engine = match engine {
                _ if interp => Engine::Eval,
                Engine::Native if max_steps.is_some() => Engine::Eval,
                e => e,
            };
            if engine == Engine::Native {
                let opts = native::CcOptions { native: !portable };
                return run_native(&file, &include, opts);
            }
            run(&file, &include, max_steps, engine)
        }
        Command::Check {
            file,
            include,
            max_steps,
            engine,
        } => {
            if engine == Engine::Native {
                eprintln!(
                    "vlad: `check --engine native` is not available: assertions run in the \
                     evaluator (eval) or the specialised program (ir); `vlad run` runs whole \
                     programs natively"
                );
                return 2;
            }
            check::check(&file, &include, max_steps, engine)
        }
        Command::Repl { include, history } => repl::repl(&include, history),
        Command::Gradbench { modules, portable } => gradbench::gradbench(modules, !portable),
        Command::Compile {
            file,
            include,
            emit,
            output,
            portable,
            lib,
            export,
        } => {
            let opts = native::CcOptions { native: !portable };
            if let Some(lib) = lib {
                return compile::library(&file, &include, &lib, &export, emit, output, opts);
            }
            compile::compile(&file, &include, emit, output.as_deref(), opts)
        }
    }
}

/// The diagnostic of a run-time error: at its span, with its message, or with what the library
/// line it arose on says it means (`SourceMap::library_message`).
pub(crate) fn eval_diagnostic(e: &vlad_eval::EvalError, sources: &SourceMap) -> Diagnostic {
    let message = sources
        .library_message(e.library)
        .unwrap_or_else(|| e.message.clone());
    Diagnostic::new(e.span, message)
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
) -> Result<(SourceMap, Program, Evaluator), u8> {
    let mut sources = SourceMap::new();
    let mut arena = Arena::new();
    let forms = load(&mut sources, file, include).map_err(|d| report(&d, &sources))?;
    let exprs = build_program(&mut arena, &forms).map_err(|d| report(&d, &sources))?;
    let mut ev = Evaluator::new(arena);
    ev.max_steps = max_steps;
    Ok((sources, exprs, ev))
}

/// The ways to run a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// Native code: flow analysis, specialisation, C, the system C compiler.
    Native,
    /// The reference evaluator.
    Eval,
    /// Flow analysis, specialisation, and the executor of the specialised program.
    Ir,
}

/// Runs one closed top-level expression with `engine`.
pub(crate) fn evaluate(
    ev: &mut Evaluator,
    core: vlad_core::ExprId,
    engine: Engine,
    max_steps: Option<u64>,
) -> Result<vlad_eval::value::Value, vlad_eval::EvalError> {
    match engine {
        // Native code runs whole programs (`run_native`); `check` refuses it.
        Engine::Eval | Engine::Native => ev.eval(core),
        Engine::Ir => {
            let compiled = {
                let mut analysis = vlad::analysis(ev)?;
                analysis
                    .analyse(core)
                    .and_then(|entry| analysis.specialise(&[entry]))
            };
            let program = compiled.map_err(|e| {
                vlad_eval::EvalError::new(e.span, format!("cannot compile: {}", e.message))
            })?;
            let mut exec = vlad::exec::Executor::new(ev, &program);
            exec.max_calls = max_steps;
            exec.run(program.entries[0])
        }
    }
}

/// `vlad run` with native code: compile (or find in the cache) and run; fall back to the
/// evaluator, with a one-line note, where the compiler cannot handle the program or the
/// program is too large to compile quickly (`native::too_large`).
fn run_native(file: &std::path::Path, include: &[PathBuf], opts: native::CcOptions) -> u8 {
    // An unchanged program that compiled before runs at once: no analysis, no C. One found
    // too large runs in the evaluator at once.
    let key = native::source_key(file, include, opts);
    match key.as_deref().and_then(native::cached_by_source) {
        Some(native::SourceRecord::Executable(exe)) => match native::run_executable(&exe) {
            Ok(code) => return code,
            Err(e) => eprintln!("vlad: {e}; compiling again"),
        },
        Some(native::SourceRecord::Evaluator(reason)) => {
            return run_evaluator(file, include, &reason)
        }
        None => {}
    }
    let reason = match native::generate_c(file, include, true) {
        Ok(compiled) => match native::too_large(&compiled.c) {
            Some(reason) => {
                if let Some(k) = &key {
                    native::remember_evaluator(k, &reason);
                }
                reason
            }
            None => match native::cached_executable(&native::units(&compiled.c), opts) {
                Ok(exe) => {
                    if let Some(k) = &key {
                        native::remember_source(k, &exe);
                    }
                    match native::run_executable(&exe) {
                        Ok(code) => return code,
                        Err(e) => e,
                    }
                }
                Err(e) => e,
            },
        },
        Err(native::Failure::Program(code)) => return code,
        Err(native::Failure::Evaluate(_)) => return run(file, include, None, Engine::Eval),
        Err(native::Failure::Unsupported(reason)) => reason,
    };
    run_evaluator(file, include, &reason)
}

/// The evaluator's run of a program `vlad run` does not compile, after a one-line note.
fn run_evaluator(file: &std::path::Path, include: &[PathBuf], reason: &str) -> u8 {
    eprintln!("vlad: not compiled to native code ({reason}); running in the evaluator");
    run(file, include, None, Engine::Eval)
}

/// Runs a whole program (its run writes each top-level value), then reports the expansion
/// error that stops it, if any.
fn run(file: &std::path::Path, include: &[PathBuf], max_steps: Option<u64>, engine: Engine) -> u8 {
    let (sources, program, mut ev) = match prepare(file, include, max_steps) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let result = evaluate(&mut ev, program.run, engine, max_steps);
    ev.output.flush();
    match (result, program.stop) {
        (Err(e), _) => report(&eval_diagnostic(&e, &sources), &sources),
        (Ok(_), Some(d)) => report(&d, &sources),
        (Ok(_), None) => 0,
    }
}
