//! Native code: the whole pipeline from a file to an executable (flow analysis,
//! specialisation, the C backend, the system C compiler), with a cache of executables keyed by
//! the hash of the C they were compiled from, and a cache of which executable a program's
//! sources compiled to (`source_key`), so that running an unchanged program again skips the
//! analysis too; a program too large to compile is recorded there as well.

use crate::prepare;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use vlad_backend_c::CProgram;
use vlad_flow::Analysis;
use vlad_syntax::{Diagnostic, SourceMap};

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
}

/// Options of the C compilation.
#[derive(Clone, Copy, Debug)]
pub struct CcOptions {
    /// Pass `-march=native` (the default).
    pub native: bool,
}

/// The C program for `file`. With `through_expansion_error`, a top-level form that does not
/// expand ends the program instead of failing it: the expressions before it are compiled, and
/// the program then reports the error, as the evaluator does when it gets there (`vlad run`);
/// without, it is `Failure::Evaluate` (`vlad compile` rejects the program).
pub fn generate_c(
    file: &Path,
    include: &[PathBuf],
    through_expansion_error: bool,
) -> Result<CProgram, Failure> {
    let (sources, exprs, mut ev) = prepare(file, include, None).map_err(Failure::Program)?;
    let place = |span: vlad_core::Span| match sources.location(span) {
        Some((path, line, col)) => format!("{path}:{line}:{col}"),
        None => "in built-in code".to_string(),
    };
    let mut entries = Vec::new();
    let mut final_error = None;
    let mut analysis = Analysis::new(&mut ev);
    analysis.deadline = Some(std::time::Instant::now() + analysis_time_limit());
    for te in &exprs {
        let core = match &te.core {
            Ok(c) => *c,
            // The evaluator runs the expressions before this one, then reports it.
            Err(d) if through_expansion_error => {
                final_error = Some(d.render(&sources));
                break;
            }
            Err(d) => return Err(Failure::Evaluate(d.render(&sources))),
        };
        let k = analysis.analyse(core).map_err(|e| {
            let (span, message) = analysis_error(&sources, &e, te.span);
            Failure::Unsupported(format!("{}: {message}", place(span)))
        })?;
        entries.push(k);
    }
    let program = analysis.specialise(&entries).map_err(|e| {
        let (span, message) = analysis_error(&sources, &e, e.span);
        Failure::Unsupported(format!("{}: {message}", place(span)))
    })?;
    let render = |span: vlad_core::Span| render_site(&sources, span);
    vlad_backend_c::generate(&mut analysis, &program, &render, final_error.as_deref())
        .map_err(|u| Failure::Unsupported(format!("{}: {}", place(u.span), u.reason)))
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

/// How long the flow analysis may take (`vlad run` then runs the program in the evaluator;
/// `vlad compile` reports it): `VLAD_ANALYSIS_TIMEOUT_SECS`, default 20 s (every example needs
/// well under 1 s).
pub(crate) fn analysis_time_limit() -> std::time::Duration {
    let secs = std::env::var("VLAD_ANALYSIS_TIMEOUT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    std::time::Duration::from_secs(secs)
}

/// Where and what to report for an analysis error: an error placed in built-in code (the
/// time limit, say) is placed at `fallback`, the top-level expression whose analysis it
/// stopped; a time-out says how to raise the limit.
pub(crate) fn analysis_error(
    sources: &SourceMap,
    e: &vlad_flow::FlowError,
    fallback: vlad_core::Span,
) -> (vlad_core::Span, String) {
    let span = if sources.location(e.span).is_some() {
        e.span
    } else {
        fallback
    };
    let message = if e.message.contains("ran out of time") {
        format!(
            "{}, after {} s (VLAD_ANALYSIS_TIMEOUT_SECS sets the limit)",
            e.message,
            analysis_time_limit().as_secs()
        )
    } else {
        e.message.clone()
    };
    (span, message)
}

/// The text before and after the message of an error at `span`, as the evaluator's
/// diagnostics render it.
fn render_site(sources: &SourceMap, span: vlad_core::Span) -> Option<(String, String)> {
    sources.location(span)?;
    const MARK: &str = "\u{1}MESSAGE\u{1}";
    let text = Diagnostic::new(span, MARK).render(sources);
    let (before, after) = text.split_once(MARK)?;
    Some((before.to_string(), after.strip_prefix('\n')?.to_string()))
}

/// The C compiler: `$CC` (a program and its arguments), else `cc`.
fn c_compiler() -> (String, Vec<String>) {
    let cc = std::env::var("CC").unwrap_or_default();
    let mut words = cc.split_whitespace().map(String::from);
    match words.next() {
        Some(program) => (program, words.collect()),
        None => ("cc".into(), Vec::new()),
    }
}

fn cc_flags(opts: CcOptions) -> Vec<String> {
    let mut flags: Vec<String> = ["-O3", "-ffp-contract=off", "-w", "-std=gnu99"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if opts.native {
        flags.push("-march=native".into());
    }
    flags
}

/// Two settings of GCC's inliner; other compilers get no tuning.
///
/// - Left to grow a unit by its default 40%, the inliner spends most of the compile of a large
///   program with boxed values (particle-RF: 16 s of 17 s) inlining the many small functions
///   that handle them. Capping the growth at 5% brings that under 5 s with the same running
///   time; small units (the forward-mode programs) are below GCC's `large-unit-insns` and are
///   not affected.
/// - Generated functions are small and call each other a lot, and every call in a hot loop
///   makes the caller save its live doubles (all vector registers are caller-saved). GCC's
///   default limit for inlining a function not declared `inline` (15 instructions at `-O3`)
///   leaves the line searches of the optimisers as calls: raising it to 100 makes saddle-FF
///   24 % faster, saddle-FR 35 %, particle-FF 17 % (at 50, only saddle-FF gains); the boxed
///   reverse-mode programs run 4-5 % slower (particle-FR, -RF, -RR), and compile times stay
///   within 0.3 s (interleaved runs, docs/backend-c.md).
fn gcc_tuning(cc: &str, pre: &[String]) -> Vec<String> {
    let version = Command::new(cc).args(pre).arg("--version").output();
    let is_gcc = version.is_ok_and(|o| {
        let text = String::from_utf8_lossy(&o.stdout);
        text.contains("Free Software Foundation") && !text.contains("clang")
    });
    if is_gcc {
        vec![
            "--param=inline-unit-growth=5".into(),
            "--param=max-inline-insns-auto=100".into(),
        ]
    } else {
        Vec::new()
    }
}

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
    let (cc, pre) = c_compiler();
    let tuning = gcc_tuning(&cc, &pre);
    let mut sources = Vec::new();
    for (i, text) in units.iter().enumerate() {
        let c = dir.path().join(format!("program{i}.c"));
        std::fs::write(&c, text).map_err(|e| format!("cannot write {}: {e}", c.display()))?;
        sources.push(c);
    }
    let command = || {
        let mut c = Command::new(&cc);
        c.args(&pre).args(cc_flags(opts)).args(&tuning);
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
    // Copy then rename, so a concurrent run never sees a half-written executable.
    let partial = out.with_extension(format!("partial{}", std::process::id()));
    std::fs::copy(&exe, &partial)
        .map_err(|e| format!("cannot write {}: {e}", partial.display()))?;
    std::fs::rename(&partial, out).map_err(|e| format!("cannot write {}: {e}", out.display()))
}

/// Where compiled programs are kept: `$VLAD_CACHE_DIR`, else `$XDG_CACHE_HOME/vlad`, else
/// `~/.cache/vlad`, else the system's temporary directory.
fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("VLAD_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("vlad");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("vlad");
    }
    std::env::temp_dir().join("vlad-cache")
}

/// The executable of this C program (its translation units), compiled now or found in the
/// cache.
pub fn cached_executable(units: &[String], opts: CcOptions) -> Result<PathBuf, String> {
    let mut h = Sha256::new();
    for unit in units {
        h.update(unit.as_bytes());
        h.update([0]);
    }
    hash_c_compiler(&mut h, opts);
    let digest = hex(h);
    let dir = cache_dir();
    let exe = dir.join(&digest[..32]);
    if exe.is_file() {
        return Ok(exe);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    compile_c(units, &exe, opts)?;
    Ok(exe)
}

/// The key of a program in the source cache: a hash of every file it loads (paths and texts),
/// of this `vlad` executable (its path, size and modification time, so that a rebuilt
/// compiler never reuses what its predecessor made), of the C compiler and its flags, of
/// `VLAD_C_UNITS` and of the size limit (`c_size_limit`). `None` if the program does not load
/// (the full path reports why) or this executable cannot be identified.
pub fn source_key(file: &Path, include: &[PathBuf], opts: CcOptions) -> Option<String> {
    let mut sources = SourceMap::new();
    if vlad_farfel::is_farfel_path(file) {
        let text = std::fs::read_to_string(file).ok()?;
        sources.add(file.display().to_string(), text);
    } else {
        vlad_syntax::program::load(&mut sources, file, include).ok()?;
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
    h.update(format!("\0{}", c_size_limit()).as_bytes());
    Some(hex(h))
}

/// Adds the C compiler and its flags to a cache key.
fn hash_c_compiler(h: &mut Sha256, opts: CcOptions) {
    let (cc, pre) = c_compiler();
    h.update(cc.as_bytes());
    for f in pre.iter().chain(cc_flags(opts).iter()) {
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
    /// `vlad run` runs it in the evaluator, for this reason (one line): a decision that does
    /// not depend on the machine's load (a time-out is never recorded).
    Evaluator(String),
}

/// What the source cache records for the program of source key `key`, if anything that is
/// still valid (an executable that is gone is ignored).
pub fn cached_by_source(key: &str) -> Option<SourceRecord> {
    let dir = cache_dir();
    let record = std::fs::read_to_string(dir.join(format!("{}.src", &key[..32]))).ok()?;
    if let Some(reason) = record.strip_prefix("evaluator ") {
        return Some(SourceRecord::Evaluator(reason.trim().to_string()));
    }
    let name = record.trim();
    let exe = dir.join(name);
    // Only a name of the executable cache: the record cannot point elsewhere.
    (name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit()) && exe.is_file())
        .then_some(SourceRecord::Executable(exe))
}

/// Records that the program of source key `key` compiled to `exe` (in the cache directory).
pub fn remember_source(key: &str, exe: &Path) {
    if let Some(name) = exe.file_name() {
        write_record(key, &name.to_string_lossy());
    }
}

/// Records that `vlad run` runs the program of source key `key` in the evaluator, and why.
pub fn remember_evaluator(key: &str, reason: &str) {
    write_record(key, &format!("evaluator {}", reason.replace('\n', " ")));
}

/// Writes a source-cache record to a temporary name and renames it, so a concurrent reader
/// sees all of it or nothing.
fn write_record(key: &str, text: &str) {
    let dir = cache_dir();
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let record = dir.join(format!("{}.src", &key[..32]));
    let partial = dir.join(format!("{}.src.{}", &key[..32], std::process::id()));
    if std::fs::write(&partial, text.as_bytes()).is_ok() {
        let _ = std::fs::rename(&partial, &record);
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
