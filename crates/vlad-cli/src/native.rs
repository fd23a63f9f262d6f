//! Native code: the whole pipeline from a file to an executable (flow analysis,
//! specialisation, the C backend, the system C compiler), with a cache of executables keyed by
//! the hash of the C they were compiled from, and a cache of which executable a program's
//! sources compiled to (`source_key`), so that running an unchanged program again skips the
//! analysis too; a program too large to compile is recorded there as well.

use crate::budget::Meter;
use crate::{prepare, Source};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use vlad_backend_c::CProgram;
use vlad_syntax::SourceMap;

/// Why a program was not compiled: one line for the user, and whether the evaluator should
/// run it instead (a program that does not load or expand is reported, not run).
pub enum Failure {
    /// The program itself is wrong (a load or expansion error): reported, with its exit code.
    Program(u8),
    /// The compiler cannot compile it (yet): the reason, on one line.
    Unsupported(String),
    /// A top-level expression does not expand (its rendered diagnostic): `vlad run` has the
    /// evaluator run the program up to it and report it there (no note: this is not a limit
    /// of the compiler); `vlad compile` reports it.
    Evaluate(String),
    /// The analysis reached a limit of its meter (the reason, on one line, and which).
    OverBudget(String, crate::budget::Spent),
}

/// Options of the C compilation.
#[derive(Clone, Copy, Debug)]
pub struct CcOptions {
    /// Pass `-march=native` (the default).
    pub native: bool,
}

/// The compiled program for `file` (its IR and C). With `through_expansion_error`, a top-level
/// form that does not expand ends the program instead of failing it: the expressions before it
/// are compiled, and the program then reports the error, as the evaluator does when it gets
/// there (`vlad run`); without, it is `Failure::Evaluate` (`vlad compile` rejects the program).
pub fn generate_c(
    source: &Source,
    include: &[PathBuf],
    through_expansion_error: bool,
    meter: &Meter,
) -> Result<vlad::Compiled, Failure> {
    let (sources, program, mut ev) = prepare(source, include, None).map_err(Failure::Program)?;
    let place = |span: vlad_core::Span| match sources.location(span) {
        Some((path, line, col)) => format!("{path}:{line}:{col}"),
        None => "in built-in code".to_string(),
    };
    // The run of the whole program is the one entry; the expansion error that stops it, if
    // any, is reported after it (`vlad run`) or rejects the program (`vlad compile`).
    let final_error = match &program.stop {
        Some(d) if through_expansion_error => Some(d.render(&sources)),
        Some(d) => return Err(Failure::Evaluate(d.render(&sources))),
        None => None,
    };
    let whole = program
        .exprs
        .first()
        .map_or(vlad_core::Span::NONE, |e| e.span);
    let render = |span: vlad_core::Span| vlad::compile::render_site(&sources, span);
    let opts = vlad::compile::Options {
        budget: Some(meter.budget()),
        render: &render,
        final_error: final_error.as_deref(),
        print_values: false,
        passes: vlad_ir::passes::Options::default(),
    };
    // A limit of the meter reached (in the analysis, or in the lowering's questions to it) is
    // `OverBudget`, which `vlad run` may record; anything else is `Unsupported`.
    let failure = |message: String| match meter.spent() {
        Some(spent) => Failure::OverBudget(message, spent),
        None => Failure::Unsupported(message),
    };
    vlad::compile(&mut ev, &[program.run], &opts).map_err(|e| {
        if e.in_analysis {
            let fe = vlad_flow::FlowError {
                span: e.span,
                message: e.message,
            };
            let (span, message) = analysis_error(&sources, &fe, whole, meter);
            failure(format!("{}: {message}", place(span)))
        } else {
            failure(format!("{}: {}", place(e.span), e.message))
        }
    })
}

/// The most generated C (its functions, in bytes) that `vlad run` compiles: `VLAD_MAX_C_MB`
/// megabytes, default 8. The C compiler's time grows faster than the size: 6.8 MB (the
/// largest test program but one) compile in 12 s on two cores, 73 MB
/// (tests/array/property.vlad) in three and a half minutes, against 4 s for the evaluator to
/// run it.
pub(crate) fn c_size_limit() -> usize {
    let mb: f64 = std::env::var("VLAD_MAX_C_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|mb: &f64| mb.is_finite() && *mb >= 0.0)
        .unwrap_or(8.0);
    (mb * 1e6) as usize
}

/// Why `vlad run` does not compile this C program, if it is larger than `c_size_limit`.
pub fn too_large(c: &CProgram) -> Option<String> {
    let (size, limit) = (c.function_bytes(), c_size_limit());
    (size > limit).then(|| {
        format!(
            "the program is {} of C, more than the {} `vlad run` compiles; \
             `vlad compile FILE -o PROG` compiles it, and VLAD_MAX_C_MB raises the limit",
            bytes(size),
            bytes(limit)
        )
    })
}

/// A size for people: `21.4 MB`, `12 KB`.
fn bytes(n: usize) -> String {
    if n >= 1_000_000 {
        format!("{:.1} MB", n as f64 / 1e6)
    } else {
        format!("{} KB", n.div_ceil(1000))
    }
}

/// Where and what to report for an analysis error: an error placed in library or built-in
/// code (a limit of the meter, say) is placed at `fallback`, the top-level expression whose analysis
/// it stopped; a limit reached says which, and how to raise it.
pub(crate) fn analysis_error(
    sources: &SourceMap,
    e: &vlad_flow::FlowError,
    fallback: vlad_core::Span,
    meter: &Meter,
) -> (vlad_core::Span, String) {
    let span = if sources.location(e.span).is_some() && e.span.is_user() {
        e.span
    } else {
        fallback
    };
    let message = match meter.spent() {
        Some(spent) => format!("{}{}", e.message, spent.explain()),
        None => e.message.clone(),
    };
    (span, message)
}

/// The C compiler's CPU time for a program of `function_bytes` of generated functions,
/// predicted: what compiling the runtime costs, and the rest at the rate GCC compiles
/// generated functions at `-O3` (measured on the examples and tests, 57 to 92 KB a CPU
/// second, docs/backend-c.md; the slower end, so that a prediction errs on the side of the
/// evaluator).
pub fn predicted_cc_seconds(function_bytes: usize) -> f64 {
    RUNTIME_CC_SECONDS + function_bytes as f64 / CC_BYTES_PER_SECOND
}

/// The CPU seconds of compiling `runtime.c` and `main` alone (a program of one expression).
const RUNTIME_CC_SECONDS: f64 = 1.2;

/// Generated C compiled per CPU second (see `predicted_cc_seconds`).
const CC_BYTES_PER_SECOND: f64 = 65_000.0;

/// Generated functions per translation unit (`units`): GCC compiles about 120 KB of them a
/// second with `-O3` on this project's 2-core VM (particle-RR: 693 KB in 5.8 s), so a unit
/// this large takes about 2 s. Of the benchmarks, particle-RF and particle-RR (558 and 693 KB)
/// become two units; the others (at most 213 KB) stay one.
const BYTES_PER_UNIT: usize = 250_000;

/// The translation units to compile `c` as: one per `BYTES_PER_UNIT` of generated functions,
/// at most one per core, or `VLAD_C_UNITS` of them if set (tests use it to split small
/// programs).
pub fn units(c: &CProgram) -> Vec<String> {
    let forced = std::env::var("VLAD_C_UNITS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok());
    let n = forced.unwrap_or_else(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (c.function_bytes() / BYTES_PER_UNIT).clamp(1, cores)
    });
    if std::env::var_os("VLAD_C_DEBUG").is_some() {
        eprintln!(
            "vlad: {} KB of generated functions, {n} translation unit(s)",
            c.function_bytes() / 1000
        );
    }
    c.units(n.max(1))
}

/// Compiles C translation units (unit 0 has `main`) to an executable at `out`, in a private
/// temporary directory. The compiler is run directly, never through a shell; several units
/// compile in parallel, then link.
pub fn compile_c(units: &[String], out: &Path, opts: CcOptions) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("cannot make a temporary directory: {e}"))?;
    let exe = dir.path().join("program");
    let (cc, pre) = vlad::cc::c_compiler();
    let tuning = vlad::cc::gcc_tuning(&cc, &pre);
    let mut sources = Vec::new();
    for (i, text) in units.iter().enumerate() {
        let c = dir.path().join(format!("program{i}.c"));
        std::fs::write(&c, text).map_err(|e| format!("cannot write {}: {e}", c.display()))?;
        sources.push(c);
    }
    let command = || {
        let mut c = Command::new(&cc);
        c.args(&pre)
            .args(vlad::cc::flags(opts.native))
            .args(&tuning);
        c
    };
    let run = |mut c: Command| -> Result<std::process::Child, String> {
        c.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run the C compiler `{cc}`: {e}"))
    };
    let mut children = Vec::new();
    if let [one] = &sources[..] {
        let mut c = command();
        c.arg("-o").arg(&exe).arg(one).args(["-lm", "-lpthread"]);
        children.push(run(c)?);
    } else {
        for c_file in &sources {
            let mut c = command();
            c.arg("-c")
                .arg("-o")
                .arg(c_file.with_extension("o"))
                .arg(c_file);
            children.push(run(c)?);
        }
    }
    // Wait for every compiler (none is left running), then report the first failure.
    let outputs: Vec<_> = children.into_iter().map(|c| c.wait_with_output()).collect();
    for output in outputs {
        let output = output.map_err(|e| format!("cannot run the C compiler `{cc}`: {e}"))?;
        if !output.status.success() {
            let err = String::from_utf8_lossy(&output.stderr);
            let first = err.lines().find(|l| l.contains("error")).unwrap_or("");
            return Err(format!("the C compiler `{cc}` failed: {first}"));
        }
    }
    if sources.len() > 1 {
        let mut c = Command::new(&cc);
        c.args(&pre).arg("-o").arg(&exe);
        for c_file in &sources {
            c.arg(c_file.with_extension("o"));
        }
        c.args(["-lm", "-lpthread"]);
        let output = run(c)?
            .wait_with_output()
            .map_err(|e| format!("cannot run the C compiler `{cc}`: {e}"))?;
        if !output.status.success() {
            let err = String::from_utf8_lossy(&output.stderr);
            let first = err.lines().next().unwrap_or("");
            return Err(format!("linking with `{cc}` failed: {first}"));
        }
    }
    // Copy then rename, so a concurrent run never sees a half-written executable; what is
    // left of the copy if either fails is removed.
    let partial = out.with_extension(format!("partial{}", std::process::id()));
    let written = std::fs::copy(&exe, &partial)
        .map_err(|e| format!("cannot write {}: {e}", partial.display()))
        .and_then(|_| {
            std::fs::rename(&partial, out)
                .map_err(|e| format!("cannot write {}: {e}", out.display()))
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written
}

/// Where compiled programs are kept: `$VLAD_CACHE_DIR`, else `$XDG_CACHE_HOME/vlad`, else
/// `~/.cache/vlad`, else `vlad-cache-UID` in the system's temporary directory (private to
/// the user: it was one `vlad-cache` for every user, who could plant executables there for
/// the others to run). Made if need be (mode 0700); `None`, after a note saying why, where it
/// cannot be used safely: `vlad run` runs the executables it holds, so it must be a directory
/// of this user's that no one else can write. Checked once per run.
fn cache_dir() -> Option<PathBuf> {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = cache_path();
        match private_dir(&dir) {
            Ok(()) => Some(dir),
            Err(why) => {
                eprintln!(
                    "vlad: not using the cache directory {}: {why}; compiling without it",
                    dir.display()
                );
                None
            }
        }
    })
    .clone()
}

fn cache_path() -> PathBuf {
    if let Some(d) = std::env::var_os("VLAD_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("vlad");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("vlad");
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    std::env::temp_dir().join(format!("vlad-cache-{uid}"))
}

/// Makes `dir` if it does not exist (its parents as usual, itself with mode 0700), and checks
/// that it is a directory (a link to one is followed) owned by this user that neither its
/// group nor others can write.
fn private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot make it: {e}"))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot make it: {e}")),
    }
    let meta = std::fs::metadata(dir).map_err(|e| format!("cannot read it: {e}"))?;
    // SAFETY: as in cache_path.
    let uid = unsafe { libc::geteuid() };
    if !meta.is_dir() {
        Err("it is not a directory".into())
    } else if meta.uid() != uid {
        Err(format!("it belongs to another user (uid {})", meta.uid()))
    } else if meta.mode() & 0o022 != 0 {
        Err(format!(
            "others can write to it (mode {:o}; chmod go-w makes it private)",
            meta.mode() & 0o777
        ))
    } else {
        Ok(())
    }
}

/// An executable compiled for `vlad run`: in the cache, or in a temporary directory (removed
/// with this) when there is no usable cache.
pub struct Executable {
    pub path: PathBuf,
    scratch: Option<tempfile::TempDir>,
}

/// The executable of this C program (its translation units), compiled now or found in the
/// cache. A cached executable that is not whole (`whole`: truncated, damaged, no longer
/// executable) is compiled again, and so is one that `fresh` asks to replace (it could not
/// be run).
pub fn cached_executable(
    units: &[String],
    opts: CcOptions,
    fresh: bool,
) -> Result<Executable, String> {
    let mut h = Sha256::new();
    for unit in units {
        h.update(unit.as_bytes());
        h.update([0]);
    }
    hash_c_compiler(&mut h, opts);
    let digest = hex(h);
    let Some(dir) = cache_dir() else {
        let scratch =
            tempfile::tempdir().map_err(|e| format!("cannot make a temporary directory: {e}"))?;
        let path = scratch.path().join("program");
        compile_c(units, &path, opts)?;
        return Ok(Executable {
            path,
            scratch: Some(scratch),
        });
    };
    let exe = dir.join(&digest[..32]);
    if fresh || !whole(&exe) {
        discard(&exe);
        compile_c(units, &exe, opts)?;
        record_whole(&exe);
    }
    Ok(Executable {
        path: exe,
        scratch: None,
    })
}

/// The record that a cached executable is whole: the SHA-256 of its bytes, written beside it
/// (`NAME.sum`) once it is in place.
fn sum_path(exe: &Path) -> PathBuf {
    exe.with_extension("sum")
}

fn record_whole(exe: &Path) {
    if let Ok(bytes) = std::fs::read(exe) {
        let mut h = Sha256::new();
        h.update(&bytes);
        write_atomically(&sum_path(exe), &hex(h));
    }
}

/// Is the cached executable `exe` as it was written: executable, and of the bytes its sum
/// records? A truncated one (a full disk, a killed copy) made every later run die of a
/// segmentation fault; one that cannot be run sent every run to the evaluator.
fn whole(exe: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable =
        std::fs::metadata(exe).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o100 != 0);
    let (Ok(recorded), Ok(bytes)) = (std::fs::read_to_string(sum_path(exe)), std::fs::read(exe))
    else {
        return false;
    };
    let mut h = Sha256::new();
    h.update(&bytes);
    executable && hex(h) == recorded.trim()
}

/// Removes a cached executable and its sum (those that exist).
fn discard(exe: &Path) {
    let _ = std::fs::remove_file(exe);
    let _ = std::fs::remove_file(sum_path(exe));
}

/// The key of a program in the source cache: a hash of every file it loads (paths and texts),
/// of this `vlad` executable (its path, size and modification time, so that a rebuilt
/// compiler never reuses what its predecessor made), of the C compiler and its flags, of
/// `VLAD_C_UNITS` and of the limits that decide whether to compile (`c_size_limit`, the
/// settings of `budget.rs`). `None` if the program does not load (the full path reports why)
/// or this executable cannot be identified.
pub fn source_key(source: &Source, include: &[PathBuf], opts: CcOptions) -> Option<String> {
    let mut sources = SourceMap::new();
    if vlad_farfel::is_farfel_path(&source.path) {
        sources.add(source.path.display().to_string(), source.text.clone());
    } else {
        source.load(&mut sources, include).ok()?;
    }
    let exe = std::env::current_exe().ok()?;
    let meta = std::fs::metadata(&exe).ok()?;
    let modified = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    let mut h = Sha256::new();
    h.update(b"vlad source cache 1\0");
    h.update(exe.to_string_lossy().as_bytes());
    h.update(format!("\0{}\0{}\0", meta.len(), modified.as_nanos()).as_bytes());
    for f in sources.files() {
        h.update(f.path.as_bytes());
        h.update([0]);
        h.update(f.text.as_bytes());
        h.update([0]);
    }
    hash_c_compiler(&mut h, opts);
    h.update(std::env::var("VLAD_C_UNITS").unwrap_or_default().as_bytes());
    // The limits that decide whether to compile: another limit, another decision.
    h.update(
        format!(
            "\0{}\0{}\0{:?}\0{}",
            c_size_limit(),
            crate::budget::compile_budget(),
            std::env::var("VLAD_ANALYSIS_TIMEOUT_SECS").ok(),
            crate::budget::analysis_memory()
        )
        .as_bytes(),
    );
    Some(hex(h))
}

/// Adds the C compiler and its flags to a cache key.
fn hash_c_compiler(h: &mut Sha256, opts: CcOptions) {
    let (cc, pre) = vlad::cc::c_compiler();
    h.update(cc.as_bytes());
    for f in pre.iter().chain(vlad::cc::flags(opts.native).iter()) {
        h.update([0]);
        h.update(f.as_bytes());
    }
}

/// A finished hash, in hexadecimal.
fn hex(h: Sha256) -> String {
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// What the source cache records for a program.
pub enum SourceRecord {
    /// It compiled to this executable (in the executable cache).
    Executable(PathBuf),
    /// `vlad run` runs it in the evaluator, for this reason (one line).
    Evaluator(String),
    /// `vlad run` runs it in the evaluator because compiling it would cost more than its
    /// budget: at least `cost` CPU seconds (the reason says why). Compiled after all once a
    /// run in the evaluator has taken longer than that (`Compile`).
    Costly { cost: f64, reason: String },
    /// Compile it with a budget of this many CPU seconds: a run in the evaluator took longer
    /// than compiling it was expected to cost.
    Compile { budget: f64 },
}

/// What the source cache records for the program of source key `key`, if anything that is
/// still valid (an executable that is gone or not whole is ignored: compiling finds or
/// replaces it).
pub fn cached_by_source(key: &str) -> Option<SourceRecord> {
    let dir = cache_dir()?;
    let record = std::fs::read_to_string(dir.join(format!("{}.src", &key[..32]))).ok()?;
    let number = |s: &str| s.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0);
    if let Some(reason) = record.strip_prefix("evaluator ") {
        return Some(SourceRecord::Evaluator(reason.trim().to_string()));
    }
    if let Some(rest) = record.strip_prefix("costly ") {
        let (cost, reason) = rest.split_once(' ')?;
        return Some(SourceRecord::Costly {
            cost: number(cost)?,
            reason: reason.trim().to_string(),
        });
    }
    if let Some(budget) = record.strip_prefix("compile ") {
        return Some(SourceRecord::Compile {
            budget: number(budget.trim())?,
        });
    }
    let name = record.trim();
    let exe = dir.join(name);
    // Only a name of the executable cache: the record cannot point elsewhere.
    (name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit()) && whole(&exe))
        .then_some(SourceRecord::Executable(exe))
}

/// Records that the program of source key `key` compiled to `exe` (in the cache directory).
pub fn remember_source(key: &str, exe: &Executable) {
    if exe.scratch.is_none() {
        if let Some(name) = exe.path.file_name() {
            write_record(key, &name.to_string_lossy());
        }
    }
}

/// Records that `vlad run` runs the program of source key `key` in the evaluator, and why.
pub fn remember_evaluator(key: &str, reason: &str) {
    write_record(key, &format!("evaluator {}", reason.replace('\n', " ")));
}

/// Records that compiling the program of source key `key` costs at least `cost` CPU seconds,
/// more than `vlad run` spends (`SourceRecord::Costly`).
pub fn remember_costly(key: &str, cost: f64, reason: &str) {
    write_record(
        key,
        &format!("costly {cost:.3} {}", reason.replace('\n', " ")),
    );
}

/// Records that `vlad run` should compile the program of source key `key` with this budget
/// (`SourceRecord::Compile`).
pub fn remember_compile(key: &str, budget: f64) {
    write_record(key, &format!("compile {budget:.3}"));
}

fn write_record(key: &str, text: &str) {
    if let Some(dir) = cache_dir() {
        write_atomically(&dir.join(format!("{}.src", &key[..32])), text);
    }
}

/// Writes a file of the cache under a temporary name and renames it, so a concurrent reader
/// sees all of it or nothing.
fn write_atomically(path: &Path, text: &str) {
    let mut partial = path.as_os_str().to_owned();
    partial.push(format!(".{}", std::process::id()));
    let partial = PathBuf::from(partial);
    if std::fs::write(&partial, text.as_bytes()).is_ok() && std::fs::rename(&partial, path).is_err()
    {
        let _ = std::fs::remove_file(&partial);
    }
}

/// Runs an executable with this process's standard streams; its exit code.
pub fn run_executable(exe: &Path) -> Result<u8, String> {
    let status = Command::new(exe)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    Ok(match status.code() {
        Some(c) => c.clamp(0, 255) as u8,
        // A closed pipe (`vlad run prog | head`) ends the program, as it ends the evaluator's
        // output, without an error.
        None if signal(&status) == Some(13) => 0,
        // Killed by another signal: said, so that the status is not the only trace.
        None => {
            match signal(&status) {
                Some(n) => eprintln!("vlad: the compiled program was killed by signal {n}"),
                None => eprintln!("vlad: the compiled program ended abnormally"),
            }
            70
        }
    })
}

/// The signal that ended a process, if one did.
#[cfg(unix)]
fn signal(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn signal(_: &std::process::ExitStatus) -> Option<i32> {
    None
}
