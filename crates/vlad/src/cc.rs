//! The system C compiler: which one, and its flags (`vlad run`, `vlad compile`, libraries).

use std::path::Path;
use std::process::Command;

/// The C compiler: `$CC` (a program and its arguments), else `cc`.
pub fn c_compiler() -> (String, Vec<String>) {
    let cc = std::env::var("CC").unwrap_or_default();
    let mut words = cc.split_whitespace().map(String::from);
    match words.next() {
        Some(program) => (program, words.collect()),
        None => ("cc".into(), Vec::new()),
    }
}

/// The flags of every compilation: `-march=native` if `native`, then the words of
/// `$VLAD_CFLAGS`. Those come last so that they override the defaults: the GradBench tests set
/// `-O1`, which halves the time `cc` takes over their modules (the results do not change:
/// nothing here lets the compiler change floating-point results).
pub fn flags(native: bool) -> Vec<String> {
    let mut flags: Vec<String> = ["-O3", "-ffp-contract=off", "-w", "-std=gnu99"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if native {
        flags.push("-march=native".into());
    }
    let extra = std::env::var("VLAD_CFLAGS").unwrap_or_default();
    flags.extend(extra.split_whitespace().map(String::from));
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
pub fn gcc_tuning(cc: &str, pre: &[String]) -> Vec<String> {
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

/// Compiles one translation unit of a shared library (`export::library_c`) to `out`, through
/// a temporary directory (a library being loaded is never half written).
pub fn compile_shared(c: &str, out: &Path, native: bool) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("cannot make a temporary directory: {e}"))?;
    let source = dir.path().join("library.c");
    std::fs::write(&source, c).map_err(|e| format!("cannot write {}: {e}", source.display()))?;
    let built = dir.path().join("library.so");
    let (cc, pre) = c_compiler();
    let output = Command::new(&cc)
        .args(&pre)
        .args(flags(native))
        .args(gcc_tuning(&cc, &pre))
        .args(["-shared", "-fPIC", "-fvisibility=hidden", "-o"])
        .arg(&built)
        .arg(&source)
        .args(["-lm", "-lpthread"])
        .stdout(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run the C compiler `{cc}`: {e}"))?;
    if !output.status.success() {
        let err = String::from_utf8_lossy(&output.stderr);
        let first = err.lines().find(|l| l.contains("error")).unwrap_or("");
        return Err(format!("the C compiler `{cc}` failed: {first}"));
    }
    let partial = out.with_extension(format!("partial{}", std::process::id()));
    std::fs::copy(&built, &partial).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    std::fs::rename(&partial, out).map_err(|e| {
        let _ = std::fs::remove_file(&partial);
        format!("cannot write {}: {e}", out.display())
    })
}
