//! `vlad`: run and check VLAD programs.

mod budget;
mod check;
mod compile;
mod gradbench;
mod native;
mod repl;

use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use vlad_core::Arena;
use vlad_eval::Evaluator;
use vlad_syntax::program::{build_program, load_str, Program};
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
        /// What to write: `core`, the program's Core (for a Fortran file, its lowering);
        /// `flow`, the abstract argument and result of every specialised function the flow
        /// analysis found; `ir`, the IR after its passes; `c`, the C program. Without
        /// `--emit`: an executable if `-o` is given, else `flow`.
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
        /// Also print what each expression's program printed (its writes, then its value, as
        /// `vlad run` prints them), before the summary line.
        #[arg(long)]
        print: bool,
    },
}

/// Deep data (long lists, deeply nested pairs) is printed and compared recursively, and the
/// executor of the specialised program recurses natively for non-tail calls (about 3 KB a
/// call): give that work a generous stack (reserved, not committed, until used) rather than
/// risk an overflow on legitimate programs such as a million-deep non-tail recursion.
const STACK_BYTES: usize = 1 << 33;

/// mimalloc, but for what happens when it fails: Rust's default is to abort with `memory
/// allocation of N bytes failed` (and a core dump); `vlad` reports running out of memory and
/// exits as a compiled program does (`runtime.c`: the same message and status).
///
/// Why not the system allocator: the evaluator and the compiler's passes allocate and free
/// small values (pairs, closures, tagged scalars, IR nodes) at a high rate, and glibc's malloc
/// and free were about a fifth of the evaluator's profile on examples/particle-RF.vlad;
/// mimalloc makes such runs and `vlad compile` faster (benches/README.md, "CI time").
struct Allocator;

// SAFETY: every call is mimalloc's, with the same arguments; only a null result, which would
// be returned to a caller that then aborts, instead ends the process.
unsafe impl std::alloc::GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { mimalloc::MiMalloc.alloc(layout) };
        if p.is_null() {
            out_of_memory();
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) };
        if p.is_null() {
            out_of_memory();
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        let p = unsafe { mimalloc::MiMalloc.realloc(ptr, layout, size) };
        if p.is_null() {
            out_of_memory();
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Allocator = Allocator;

/// Says that memory ran out and exits with status 70, as compiled programs do. Allocates
/// nothing: a constant message, written unbuffered; `exit` flushes what the program printed.
fn out_of_memory() -> ! {
    use std::io::Write;
    let _ = std::io::stderr().write_all(b"vlad: out of memory\n");
    std::process::exit(70)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A system that will not reserve the large stack (a limit on address space, `ulimit -v`)
    // still gets a thread with a smaller one.
    let worker = [STACK_BYTES, 1 << 30, 1 << 26]
        .into_iter()
        .find_map(|bytes| {
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
            let source = match Source::read(&file) {
                Ok(s) => s,
                Err(code) => return code,
            };
            if engine == Engine::Native {
                let opts = native::CcOptions { native: !portable };
                return run_native(&source, &include, opts);
            }
            run(&source, &include, max_steps, engine)
        }
        Command::Check {
            file,
            include,
            max_steps,
            engine,
            print,
        } => {
            if engine == Engine::Native {
                eprintln!(
                    "vlad: `check --engine native` is not available: assertions run in the \
                     evaluator (eval) or the specialised program (ir); `vlad run` runs whole \
                     programs natively"
                );
                return 2;
            }
            match Source::read(&file) {
                Ok(source) => check::check(&source, &include, max_steps, engine, print),
                Err(code) => code,
            }
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
            match Source::read(&file) {
                Ok(source) => compile::compile(&source, &include, emit, output.as_deref(), opts),
                Err(code) => code,
            }
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

/// A program's main file, read once: standard input (`-`), a pipe or `/dev/stdin` can be read
/// only once, and `vlad run` loads a program more than once (for its cache key, then to
/// compile it, then perhaps to evaluate it).
pub(crate) struct Source {
    /// The name in messages, and where `include` starts looking.
    pub path: PathBuf,
    pub text: String,
}

impl Source {
    /// Reads `file` (`-`: standard input, named `<stdin>`); an error is reported, with the
    /// exit code.
    fn read(file: &Path) -> Result<Source, u8> {
        let (path, text) = if file == Path::new("-") {
            let mut text = String::new();
            let read = std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut text);
            (PathBuf::from("<stdin>"), read.map(|_| text))
        } else {
            (file.to_path_buf(), std::fs::read_to_string(file))
        };
        match text {
            Ok(text) => Ok(Source { path, text }),
            Err(e) => {
                eprintln!("vlad: error: cannot read {}: {e}", path.display());
                Err(1)
            }
        }
    }

    /// Every file of the program, read into `sources` (`include`s spliced).
    pub fn load(
        &self,
        sources: &mut SourceMap,
        include: &[PathBuf],
    ) -> Result<Vec<vlad_syntax::program::TopForm>, Diagnostic> {
        load_str(sources, &self.path, &self.text, include)
    }
}

pub(crate) fn report(d: &Diagnostic, sources: &SourceMap) -> u8 {
    eprint!("{}", d.render(sources));
    1
}

/// Loads and expands a program and makes its evaluator. A load or expansion error of a
/// definition is reported here and gives the exit code.
pub(crate) fn prepare(
    source: &Source,
    include: &[PathBuf],
    max_steps: Option<u64>,
) -> Result<(SourceMap, Program, Evaluator), u8> {
    let mut sources = SourceMap::new();
    let mut arena = Arena::new();
    // Fortran (Farfel, paper 000) by its extension: its own front end, the same Core.
    let exprs = if vlad_farfel::is_farfel_path(&source.path) {
        let name = source.path.display().to_string();
        vlad_farfel::program_str(&mut sources, &mut arena, &name, &source.text)
            .map_err(|d| report(&d, &sources))?
    } else {
        let forms = source
            .load(&mut sources, include)
            .map_err(|d| report(&d, &sources))?;
        build_program(&mut arena, &forms).map_err(|d| report(&d, &sources))?
    };
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
/// evaluator, with a one-line note, where the compiler cannot handle the program or compiling
/// it would cost more than the compile budget (`budget::compile_budget`: the analysis's time
/// and memory, the C's size, the C compiler's predicted time).
fn run_native(source: &Source, include: &[PathBuf], opts: native::CcOptions) -> u8 {
    // An unchanged program that compiled before runs at once: no analysis, no C. One found
    // too costly runs in the evaluator at once.
    let key = native::source_key(source, include, opts);
    // A cached executable that cannot be run is compiled again (once).
    let mut fresh = false;
    let mut budget = budget::compile_budget();
    match key.as_deref().and_then(native::cached_by_source) {
        Some(native::SourceRecord::Executable(exe)) => match native::run_executable(&exe) {
            Ok(code) => return code,
            Err(_) => fresh = true,
        },
        Some(native::SourceRecord::Evaluator(reason)) => {
            return run_evaluator(source, include, &reason, None)
        }
        Some(native::SourceRecord::Costly { cost, reason }) => {
            let key = key.as_deref().map(|k| (k, cost));
            return run_evaluator(source, include, &reason, key);
        }
        Some(native::SourceRecord::Compile { budget: b }) => budget = budget.max(b),
        None => {}
    }
    let progress = Progress::after(std::time::Duration::from_secs(2), source);
    let meter = budget::Meter::run(budget);
    let compiled = compile_for_run(source, include, opts, fresh, &meter, budget);
    drop(progress);
    let (reason, costly) = match compiled {
        Ok(exe) => {
            if let Some(k) = &key {
                native::remember_source(k, &exe);
            }
            match native::run_executable(&exe.path) {
                Ok(code) => return code,
                Err(e) => (e, None),
            }
        }
        Err(Fallback::Program(code)) => return code,
        Err(Fallback::Evaluate) => return run(source, include, None, Engine::Eval),
        Err(Fallback::Unsupported(reason)) => (reason, None),
        Err(Fallback::Lasting(reason)) => {
            if let Some(k) = &key {
                native::remember_evaluator(k, &reason);
            }
            (reason, None)
        }
        Err(Fallback::Costly {
            reason,
            cost,
            lasting,
        }) => {
            if let (Some(k), true) = (&key, lasting) {
                native::remember_costly(k, cost, &reason);
            }
            (
                reason,
                key.as_deref().filter(|_| lasting).map(|k| (k, cost)),
            )
        }
    };
    run_evaluator(source, include, &reason, costly)
}

/// Why `vlad run` does not run a program natively.
enum Fallback {
    /// It does not load or expand: reported, with this exit code.
    Program(u8),
    /// A top-level form does not expand: the evaluator runs the program up to it.
    Evaluate,
    /// The compiler cannot handle it (yet), or the C compiler failed.
    Unsupported(String),
    /// Its C is larger than `VLAD_MAX_C_MB`, or its analysis needs more memory than it may
    /// have: recorded, for as long as the limits are those of the source key.
    Lasting(String),
    /// Compiling it would cost at least `cost` CPU seconds, more than the budget; `lasting`
    /// unless a busy machine decided it (the wall-clock limit).
    Costly {
        reason: String,
        cost: f64,
        lasting: bool,
    },
}

/// Compiles `source` for `vlad run` within `budget` CPU seconds: the analysis stops at its
/// share of the budget (or its memory limit), and the C is compiled only if what has been
/// spent plus the C compiler's predicted time fits.
fn compile_for_run(
    source: &Source,
    include: &[PathBuf],
    opts: native::CcOptions,
    fresh: bool,
    meter: &budget::Meter,
    budget: f64,
) -> Result<native::Executable, Fallback> {
    let compiled = match native::generate_c(source, include, true, meter) {
        Ok(compiled) => compiled,
        Err(native::Failure::Program(code)) => return Err(Fallback::Program(code)),
        Err(native::Failure::Evaluate(_)) => return Err(Fallback::Evaluate),
        Err(native::Failure::Unsupported(reason)) => return Err(Fallback::Unsupported(reason)),
        // More time would not give the analysis more memory.
        Err(native::Failure::OverBudget(reason, budget::Spent::Memory { .. })) => {
            return Err(Fallback::Lasting(reason));
        }
        Err(native::Failure::OverBudget(reason, spent)) => {
            return Err(Fallback::Costly {
                reason,
                // The analysis alone took its share: compiling costs at least the budget.
                cost: budget,
                lasting: spent.lasting(),
            });
        }
    };
    let c = &compiled.c;
    if let Some(reason) = native::too_large(c) {
        return Err(Fallback::Lasting(reason));
    }
    let cost = meter.cpu_used() + native::predicted_cc_seconds(c.function_bytes());
    if cost > budget {
        return Err(Fallback::Costly {
            reason: format!(
                "compiling it would take about {} s of CPU time, more than the {} s `vlad run` \
                 spends (VLAD_COMPILE_BUDGET_SECS); `vlad compile FILE -o PROG` compiles it",
                seconds(cost),
                seconds(budget)
            ),
            cost,
            lasting: true,
        });
    }
    native::cached_executable(&native::units(c), opts, fresh).map_err(Fallback::Unsupported)
}

/// Seconds for a message: whole ones, or tenths below ten.
fn seconds(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// "compiling…" on standard error once a compilation has taken `after`, so that a user
/// waiting on it knows why; only where standard error is a terminal (`VLAD_PROGRESS=1`
/// always, `0` never), since it is not the program's output.
struct Progress {
    done: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    fn after(after: std::time::Duration, source: &Source) -> Progress {
        use std::io::IsTerminal;
        let show = match std::env::var("VLAD_PROGRESS").ok().as_deref() {
            Some("1") => true,
            Some("0") => false,
            _ => std::io::stderr().is_terminal(),
        };
        if !show {
            return Progress {
                done: None,
                thread: None,
            };
        }
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let name = source.path.display().to_string();
        let thread = std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(after) {
                eprintln!("vlad: compiling {name}\u{2026}");
            }
        });
        Progress {
            done: Some(done),
            thread: Some(thread),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The evaluator's run of a program `vlad run` does not compile, after a one-line note. For a
/// program found too costly to compile (`costly`: its source key and the cost), a run that
/// takes longer than compiling would have cost has the next run compile it, with twice that
/// budget: compiling then pays for itself, and a program that runs briefly is never compiled
/// at a cost many times its run.
fn run_evaluator(
    source: &Source,
    include: &[PathBuf],
    reason: &str,
    costly: Option<(&str, f64)>,
) -> u8 {
    eprintln!("vlad: not compiled to native code ({reason}); running in the evaluator");
    let start = budget::cpu_seconds();
    let code = run(source, include, None, Engine::Eval);
    if let Some((key, cost)) = costly {
        if budget::cpu_seconds() - start > cost {
            native::remember_compile(key, 2.0 * cost);
        }
    }
    code
}

/// Runs a whole program (its run writes each top-level value), then reports the expansion
/// error that stops it, if any. Output that cannot be written stops the run (`Output::line`
/// fails): reported without a position (`output_status`).
fn run(source: &Source, include: &[PathBuf], max_steps: Option<u64>, engine: Engine) -> u8 {
    let (sources, program, mut ev) = match prepare(source, include, max_steps) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let result = evaluate(&mut ev, program.run, engine, max_steps);
    ev.output.flush();
    if let Some(failure) = ev.output.failure() {
        return output_status(Some(failure));
    }
    match (result, program.stop) {
        (Err(e), _) => report(&eval_diagnostic(&e, &sources), &sources),
        (Ok(_), Some(d)) => report(&d, &sources),
        (Ok(_), None) => 0,
    }
}

/// The exit status of a program whose output may have failed: 0 if it did not or its reader
/// went away (a closed pipe), else 1 after saying why (`vl_check_output` in `runtime.c`).
pub(crate) fn output_status(failure: Option<vlad_eval::io::WriteFailure>) -> u8 {
    match failure {
        None | Some(vlad_eval::io::WriteFailure::Closed) => 0,
        Some(f) => {
            eprintln!("vlad: error: {}", f.message());
            1
        }
    }
}

/// Writes `text` to standard output, for `check` and `compile`: `Err` with the exit status
/// where standard output cannot be written (`output_status`).
pub(crate) fn write_stdout(text: &str) -> Result<(), u8> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) => {
            let failure = if e.kind() == std::io::ErrorKind::BrokenPipe {
                vlad_eval::io::WriteFailure::Closed
            } else {
                vlad_eval::io::WriteFailure::Error(vlad_eval::io::os_message(&e))
            };
            Err(output_status(Some(failure)))
        }
    }
}
