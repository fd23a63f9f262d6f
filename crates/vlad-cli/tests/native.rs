//! Native code against the evaluator: every example and every `tests/` program that the C
//! backend compiles must print exactly what the evaluator prints (reals within 1e-10 relative),
//! with the same errors and exit code, through `vlad run` and `vlad run --interp`.
//!
//! Which programs compile is asserted too (`NATIVE`), so a regression that sends a program back
//! to the evaluator fails here; the others are listed in the test's output with the reason the
//! compiler gave.

mod common;
use common::CHECKED_WITH_NATIVE;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// Programs that must compile to native code.
const NATIVE: &[&str] = &[
    "examples/array-calculus.vlad",
    "examples/bundle-adjustment.vlad",
    "examples/even-odd.vlad",
    "examples/factorial.vlad",
    "examples/higher-order.vlad",
    "examples/lists.vlad",
    "examples/log-sum-exp.vlad",
    "examples/nnmf.vlad",
    "examples/particle-FF.vlad",
    "examples/particle-FR.vlad",
    "examples/particle-RF.vlad",
    "examples/particle-RR.vlad",
    "examples/saddle-FF.vlad",
    "examples/saddle-FR.vlad",
    "examples/saddle-RF.vlad",
    "examples/saddle-RR.vlad",
    "examples/secant.vlad",
    "examples/streams.vlad",
    "examples/tour.vlad",
    "tests/ad/checkpoint.vlad",
    "tests/ad/forward.vlad",
    "tests/ad/property.vlad",
    "tests/ad/reverse.vlad",
    "tests/ad/reverse-property.vlad",
    "tests/array/arrays.vlad",
    "tests/array/compiled.vlad",
    "tests/array/forward.vlad",
    "tests/array/forward-lse.vlad",
    "tests/array/reverse.vlad",
    "tests/array/reverse-tape.vlad",
    "tests/array/reverse-select.vlad",
    "tests/conformance/errors.vlad",
    "tests/conformance/io.vlad",
    "tests/conformance/patterns.vlad",
    "tests/conformance/primitives.vlad",
    "tests/conformance/reader.vlad",
    "tests/conformance/redefine.vlad",
    "tests/conformance/special-forms.vlad",
    "tests/numeric/helpers.vlad",
    "tests/numeric/optimisers.vlad",
];

/// Not tried: `vlad run` runs this file in the evaluator, its C (73 MB) being larger than the
/// size limit (`programs_too_large_to_compile_run_in_the_evaluator`); compiling it takes
/// minutes. Compiled by `vlad compile -o`, it prints what the evaluator prints
/// (docs/backend-c.md).
const SKIPPED: &[&str] = &["tests/array/property.vlad"];

/// C compiled at `-O1` (`VLAD_CFLAGS` comes after vlad's own flags): for the tests that compile
/// many programs or large ones to test what they print, not how fast they run. The C compiler
/// takes less time over them than at `-O3`, and no flag vlad passes lets it change a
/// floating-point result.
const QUICK_CC: (&str, &str) = ("VLAD_CFLAGS", "-O1");

/// The setting that runs every call of a recursive component with non-tail calls in the
/// component's explicit-stack machine, at any depth (crates/vlad-ir/src/passes/machines.rs).
const MACHINES_ONLY: (&str, &str) = ("VLAD_NATIVE_DEPTH_BYTES", "0");

/// The setting that makes every loop that carries boxed values collect as soon as its arena has
/// grown past four times what survived its last collection (`vl_collect` in runtime.c), instead
/// of also waiting for a megabyte: the run in the machines runs so too, and so checks the
/// collector on every program.
const COLLECT_OFTEN: (&str, &str) = ("VLAD_GC_MIN_BYTES", "0");

fn vlad(root: &Path, cache: &Path, args: &[&str]) -> Output {
    vlad_env(root, cache, &[], args)
}

/// The compile budget of these tests' `vlad run`s: whatever compiling costs. They test the
/// compiler on every program; `vlad run` by default leaves the evaluator a brief program whose
/// C would take long to compile (tests/robustness.rs).
const ANY_COST: (&str, &str) = ("VLAD_COMPILE_BUDGET_SECS", "1000000");

/// `vlad` with more environment variables.
fn vlad_env(root: &Path, cache: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vlad"))
        .args(args)
        .current_dir(root)
        .env("VLAD_CACHE_DIR", cache)
        // The IR verifier after every pass, for every program these tests compile.
        .env("VLAD_VERIFY_IR", "1")
        .envs([ANY_COST])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run vlad")
}

/// `vlad_env` with `input` on standard input (written on a thread of its own, so that a
/// program that stops reading cannot block the test).
fn vlad_reading(
    root: &Path,
    cache: &Path,
    env: &[(&str, &str)],
    args: &[&str],
    input: &str,
) -> Output {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_vlad"))
        .args(args)
        .current_dir(root)
        .env("VLAD_CACHE_DIR", cache)
        .envs([ANY_COST])
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vlad");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_string();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let out = child.wait_with_output().expect("wait for vlad");
    let _ = feeder.join();
    out
}

/// Writes a program `name` into the scratch directory `dir`; its path.
fn program(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let file = dir.path().join(name);
    std::fs::write(&file, text).expect("write a program");
    file.to_str().expect("a UTF-8 path").to_string()
}

/// What a run printed on its standard output and its standard error.
fn texts(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A number from the environment (how many random programs a test runs, and its seed), or
/// `default`.
fn env_setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Runs `file` with `input` compiled (`vlad run`) and in the evaluator: it must compile, and
/// print what the evaluator prints (`same_output`). What the compiled program printed.
fn compiled_prints_what_the_evaluator_prints(
    root: &Path,
    cache: &Path,
    file: &str,
    input: &str,
) -> String {
    let native = vlad_with_input(root, cache, &[], &["run", file], input);
    let eval = vlad_with_input(root, cache, &[], &["run", "--interp", file], input);
    let stderr = String::from_utf8_lossy(&native.stderr);
    assert!(
        native.status.success() && !stderr.contains("not compiled"),
        "{input}: {stderr}"
    );
    let n = String::from_utf8_lossy(&native.stdout).into_owned();
    let e = String::from_utf8_lossy(&eval.stdout);
    assert!(same_output(&n, &e), "{input}: native {n} evaluator {e}");
    n
}

/// Equal texts, but for reals that differ by at most 1e-10 relative.
fn same_output(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let split = |s: &str| -> Vec<String> {
        s.split(|c: char| c.is_whitespace() || c == '(' || c == ')')
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect()
    };
    let (ta, tb) = (split(a), split(b));
    ta.len() == tb.len()
        && ta.iter().zip(&tb).all(|(x, y)| {
            x == y
                || match (x.parse::<f64>(), y.parse::<f64>()) {
                    (Ok(x), Ok(y)) => (x - y).abs() <= 1e-10 * x.abs().max(y.abs()),
                    _ => false,
                }
        })
}

/// `Ok(true)`: compiled and agrees; `Ok(false)`: not compiled (the reason printed); `Err`: a
/// mismatch.
/// Runs `rel` natively and in the evaluator; whether it compiled to native code (`Ok(false)`:
/// it ran in the evaluator without a note, as a program with an expansion error used to).
/// Each program gets a cache of its own: a native run leaves one record of the source cache
/// there (`KEY.src`), a run in the evaluator none.
fn compare(root: &Path, rel: &str) -> Result<bool, String> {
    if PARTICLES.contains(&rel) {
        return compare_particle(root, rel);
    }
    let cache = tempfile::tempdir().expect("a cache directory");
    let cache = cache.path();
    // The examples' C is compiled as a user's is (`-O3`); the test programs' at `-O1`, as the
    // run in the machines below compiles it, which then reuses the executable (its settings
    // are read at run time): one compile of each test program where there were two, the
    // costlier at `-O3` (benches/README.md, "CI time"). The benchmarks and the memory tests
    // run `-O3` code.
    let cc: &[(&str, &str)] = if rel.starts_with("examples/") {
        &[]
    } else {
        &[QUICK_CC]
    };
    let native = vlad_env(root, cache, cc, &["run", rel]);
    let eval = if CHECKED_WITH_NATIVE.contains(&rel) {
        let mut eval = vlad(root, cache, &["check", "--print", rel]);
        // The last line is the summary of the assertions, which must all hold.
        let out = String::from_utf8_lossy(&eval.stdout).into_owned();
        let (printed, summary) = out.trim_end().rsplit_once('\n').unwrap_or(("", &out));
        if !eval.status.success() || !summary.ends_with(" 0 failed") {
            return Err(format!(
                "{rel}: `vlad check` failed ({}):\n{out}{}",
                eval.status,
                String::from_utf8_lossy(&eval.stderr)
            ));
        }
        eval.stdout = format!("{printed}\n").into_bytes();
        eval
    } else {
        vlad(root, cache, &["run", "--interp", rel])
    };
    let compiled = std::fs::read_dir(cache)
        .expect("the cache directory")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "src"))
        })
        .count()
        == 1;
    let (nout, nerr) = texts(&native);
    let (eout, eerr) = texts(&eval);
    // Every call of a deep recursive component in its explicit-stack machine (passes/machines.rs).
    // Compiled as the native run was, so that it runs that executable from the cache.
    let machine = vlad_env(
        root,
        cache,
        &[&[MACHINES_ONLY, COLLECT_OFTEN], cc].concat(),
        &["run", rel],
    );
    let (mout, merr) = texts(&machine);
    if !same_output(&mout, &eout) || merr != eerr || machine.status.code() != eval.status.code() {
        return Err(format!(
            "{rel}: native code run in its machines and the evaluator differ\n--- machines ({}):\n{mout}{merr}\n--- evaluator ({}):\n{eout}{eerr}",
            machine.status, eval.status
        ));
    }
    if nerr.contains("not compiled to native code") {
        return Err(format!(
            "{rel}: `vlad run` fell back to the evaluator:\n{nerr}"
        ));
    }
    if !same_output(&nout, &eout) || nerr != eerr || native.status.code() != eval.status.code() {
        return Err(format!(
            "{rel}: native and evaluator differ\n--- native ({}):\n{nout}{nerr}\n--- evaluator ({}):\n{eout}{eerr}",
            native.status, eval.status
        ));
    }
    if !compiled {
        eprintln!("not compiled: {rel}");
    }
    Ok(compiled)
}

/// The particle examples, minutes each in the evaluator (the largest part of CI's time): the
/// evaluator runs each at a time step four times as long (`COARSE`: the same code, a quarter
/// of the steps), and native code must print what it prints at that step; at the file's
/// step, native code must print the file's expectation (`===>`), which the evaluator gives
/// (`vlad check examples/particle-RF.vlad`, minutes).
const PARTICLES: &[&str] = &[
    "examples/particle-FF.vlad",
    "examples/particle-FR.vlad",
    "examples/particle-RF.vlad",
    "examples/particle-RR.vlad",
];

/// The particle examples' time step, and the coarser one of their run in the evaluator.
const COARSE: (&str, &str) = ("(delta-t (real 1e-1))", "(delta-t (real 4e-1))");

/// `compare` for a particle example (`PARTICLES`).
fn compare_particle(root: &Path, rel: &str) -> Result<bool, String> {
    let text = std::fs::read_to_string(root.join(rel)).expect("read the example");
    // The file's one expectation, `(multiform W (W))`: what it prints, `W` and `(W)`.
    let expected = text
        .split_once("===> (multiform ")
        .and_then(|(_, e)| e.trim_end().strip_suffix(')'))
        .ok_or_else(|| format!("{rel}: no `===> (multiform ...)` expectation"))?;
    if text.matches(COARSE.0).count() != 1 {
        return Err(format!("{rel}: not one `{}`", COARSE.0));
    }
    let cache = tempfile::tempdir().expect("a cache directory");
    let native = vlad(root, cache.path(), &["run", rel]);
    let (nout, nerr) = texts(&native);
    if !native.status.success() || !nerr.is_empty() || !same_output(&nout, expected) {
        return Err(format!(
            "{rel}: native code does not print the expectation {expected}\n--- native ({}):\n{nout}{nerr}",
            native.status
        ));
    }
    let dir = tempfile::tempdir().expect("a directory");
    let name = Path::new(rel).file_name().expect("a file name");
    let coarse = dir.path().join(name);
    std::fs::write(&coarse, text.replace(COARSE.0, COARSE.1)).expect("write the coarse copy");
    let coarse = coarse.to_str().expect("a UTF-8 path");
    compare(root, coarse)
}

fn programs(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![root.join("examples"), root.join("tests")];
    while let Some(d) = todo.pop() {
        if d.ends_with("tests/fixtures") {
            continue;
        }
        for entry in std::fs::read_dir(&d).expect("list a directory") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|x| x == "vlad") {
                let rel = path.strip_prefix(root).expect("under the root");
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    out.retain(|p| !SKIPPED.contains(&p.as_str()));
    out.sort();
    out
}

#[test]
fn native_code_prints_what_the_evaluator_prints() {
    let root = repo_root();
    let mut files = programs(&root);
    // The longest first, so that the workers finish together.
    files.sort_by_key(|f| !CHECKED_WITH_NATIVE.contains(&f.as_str()));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(String, Result<bool, String>)>> = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(f) = files.get(i) else { break };
                let r = compare(&root, f);
                results.lock().unwrap().push((f.clone(), r));
            });
        }
    });
    let results = results.into_inner().unwrap();
    let mut failures: Vec<String> = Vec::new();
    for (f, r) in &results {
        match r {
            Err(e) => failures.push(e.clone()),
            Ok(false) if NATIVE.contains(&f.as_str()) => {
                failures.push(format!("{f}: no longer compiles to native code"))
            }
            _ => {}
        }
    }
    let compiled = results.iter().filter(|r| matches!(r.1, Ok(true))).count();
    eprintln!("{compiled} of {} programs compiled natively", results.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(compiled >= NATIVE.len());
}

/// Every recursive component with a non-tail call of every example and test program gets its
/// explicit-stack machine (a component left without one would recurse on the C stack): none
/// is above the pass's size limit. The C is the same at each run.
#[test]
fn every_deep_recursion_gets_an_explicit_stack_machine() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let mut machines = 0;
    for rel in programs(&root) {
        let out = vlad(&root, cache.path(), &["compile", &rel, "--emit", "c"]);
        if !out.status.success() {
            continue; // an expansion error on purpose (tests/array/arrays.vlad)
        }
        let again = vlad(&root, cache.path(), &["compile", &rel, "--emit", "c"]);
        assert!(
            out.stdout == again.stdout,
            "{rel}: the C differs from one run to the next"
        );
        let c = String::from_utf8_lossy(&out.stdout);
        let line = c
            .lines()
            .find(|l| l.starts_with("/* deep recursive components: "))
            .unwrap_or_else(|| panic!("{rel}: no count of deep components"));
        assert!(line.ends_with(", 0 too large for one */"), "{rel}: {line}");
        machines += line
            .trim_start_matches("/* deep recursive components: ")
            .split(' ')
            .next()
            .and_then(|n| n.parse::<usize>().ok())
            .expect("a count");
    }
    assert!(machines >= 100, "only {machines} machines");
}

/// Large programs compile as several translation units in parallel (`units.rs`); small ones
/// are split here on request, so every run of the tests checks the split: shared runtime state
/// (the arena, error sites, boxed constants), the AD maps of boxed closures in unit 0, and
/// calls across units.
/// tests/ad/checkpoint.vlad has the AD maps of many boxed closures, in far less C than
/// tests/ad/reverse-property.vlad, which was here before (the largest C of the test programs:
/// benches/README.md, "CI time").
#[test]
fn programs_split_into_units_print_what_the_evaluator_prints() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a directory");
    for rel in [
        "examples/saddle-RR.vlad",
        "examples/streams.vlad",
        "tests/ad/checkpoint.vlad",
        "tests/array/compiled.vlad",
        "tests/conformance/patterns.vlad",
    ] {
        let exe = dir.path().join("prog");
        let exe = exe.to_str().unwrap();
        let c = Command::new(env!("CARGO_BIN_EXE_vlad"))
            .args(["compile", rel, "-o", exe])
            .current_dir(&root)
            .env("VLAD_C_UNITS", "3")
            .env("VLAD_C_DEBUG", "1")
            .envs([QUICK_CC])
            .output()
            .expect("run vlad");
        let err = String::from_utf8_lossy(&c.stderr);
        assert!(c.status.success(), "{rel}: {err}");
        assert!(err.contains("3 translation unit(s)"), "{rel}: {err}");
        let native = Command::new(exe)
            .current_dir(&root)
            .stdin(Stdio::null())
            .output()
            .expect("run the program");
        let eval = vlad(&root, cache.path(), &["run", "--interp", rel]);
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        assert!(
            same_output(&text(&native.stdout), &text(&eval.stdout))
                && native.stderr == eval.stderr
                && native.status.code() == eval.status.code(),
            "{rel}: split native code and the evaluator differ\n--- native:\n{}{}\n--- evaluator:\n{}{}",
            text(&native.stdout),
            text(&native.stderr),
            text(&eval.stdout),
            text(&eval.stderr)
        );
    }
}

#[test]
fn run_falls_back_to_the_evaluator_with_a_reason() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    // Every example compiles, so the fallback is made to happen: an analysis time limit of 0 s
    // (the limit is checked at every evaluation).
    let o = Command::new(env!("CARGO_BIN_EXE_vlad"))
        .args(["run", "examples/higher-order.vlad"])
        .current_dir(&root)
        .env("VLAD_CACHE_DIR", cache.path())
        .env("VLAD_ANALYSIS_TIMEOUT_SECS", "0")
        .stdin(Stdio::null())
        .output()
        .expect("run vlad");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let eval = vlad(
        &root,
        cache.path(),
        &["run", "--interp", "examples/higher-order.vlad"],
    );
    assert_eq!(o.stdout, eval.stdout);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not compiled to native code"), "{err}");
    // The reason, with the position the analysis had reached and how to raise the limit.
    assert!(
        err.contains("examples/higher-order.vlad:")
            && err.contains("the flow analysis ran out of time")
            && err.contains("VLAD_ANALYSIS_TIMEOUT_SECS"),
        "{err}"
    );
    assert!(err.contains("running in the evaluator"), "{err}");
}

/// `checkpoint` applied through a procedure to a boxed pair (a procedure and its argument
/// that the analysis does not take apart): `vlad run` says why it is not compiled and prints
/// what the evaluator prints, never a compiled "malformed call" error.
#[test]
fn checkpoint_of_a_boxed_argument_runs_in_the_evaluator() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a directory");
    let file = program(
        &dir,
        "checkpoint-boxed.vlad",
        "(define (cube x) (* x (* x x)))\n\
         (define (car (cons a d)) a)\n\
         (define (args k) (if (< k 1) (cons cube 2) (if (< k 2) '() (cons (lambda (p) (car p)) (cons 1 2)))))\n\
         (define (app g a) (g a))\n\
         (list (app checkpoint (args (real 0))) (app checkpoint (args (real 5))))\n",
    );
    let o = vlad(&root, cache.path(), &["run", &file]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("not compiled to native code")
            && err.contains("`checkpoint` on a boxed argument"),
        "{err}"
    );
    let eval = vlad(&root, cache.path(), &["run", "--interp", &file]);
    assert_eq!(o.stdout, eval.stdout);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "(8 1)\n");
}

/// A reverse derivative through an array, the fallback of this test before reverse-mode
/// arrays compiled, now compiles: no note, the evaluator's answer.
#[test]
fn reverse_mode_arrays_compile() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a directory");
    let file = program(
        &dir,
        "a.vlad",
        "(let (((cons y bp) ((*j (lambda (v) (get v 0))) (*j (build 2 (lambda (i) i))))))\n\
         (let (((cons f x) (unsensitize (bp (sensitize 1))))) x))\n",
    );
    let o = vlad(&root, cache.path(), &["run", &file]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "#(1 0)\n");
    assert_eq!(err, "", "compiled, so nothing on stderr");
}

#[test]
fn second_run_uses_the_cache() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let o = vlad(&root, cache.path(), &["run", "examples/factorial.vlad"]);
    assert!(o.status.success());
    let entries = || -> Vec<(PathBuf, std::time::SystemTime)> {
        let mut e: Vec<_> = std::fs::read_dir(cache.path())
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.path(), e.metadata().unwrap().modified().unwrap())
            })
            .collect();
        e.sort();
        e
    };
    let first = entries();
    assert_eq!(
        first.len(),
        3,
        "one executable, its sum and its source record: {first:?}"
    );
    assert_eq!(
        first
            .iter()
            .filter(|(p, _)| p.extension().is_some_and(|x| x == "src"))
            .count(),
        1
    );
    std::thread::sleep(std::time::Duration::from_millis(50));
    let again = vlad(&root, cache.path(), &["run", "examples/factorial.vlad"]);
    assert_eq!(again.stdout, o.stdout);
    assert_eq!(entries(), first, "the same executable, not written again");
}

/// A program whose C is larger than `vlad run` compiles (`VLAD_MAX_C_MB`) runs in the
/// evaluator after a note that says why; the decision is recorded in the source cache, so the
/// next run goes straight to the evaluator, and the default limit compiles the program.
#[test]
fn programs_too_large_to_compile_run_in_the_evaluator() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let tiny = [("VLAD_MAX_C_MB", "0.001")];
    let file = "examples/factorial.vlad";
    let eval = vlad(&root, cache.path(), &["run", "--interp", file]);
    let o = vlad_env(&root, cache.path(), &tiny, &["run", file]);
    assert!(o.status.success());
    assert_eq!(o.stdout, eval.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("vlad: not compiled to native code (the program is ")
            && err.contains(" KB of C, more than the 1 KB `vlad run` compiles; ")
            && err.contains("VLAD_MAX_C_MB raises the limit); running in the evaluator"),
        "{err}"
    );
    // No executable, one record that says why.
    let files: Vec<PathBuf> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let record = std::fs::read_to_string(&files[0]).unwrap();
    assert!(record.starts_with("evaluator the program is "), "{record}");
    // The next run reads the record instead of compiling again.
    std::fs::write(&files[0], "evaluator a recorded reason").unwrap();
    let again = vlad_env(&root, cache.path(), &tiny, &["run", file]);
    assert_eq!(again.stdout, eval.stdout);
    assert_eq!(
        String::from_utf8_lossy(&again.stderr),
        "vlad: not compiled to native code (a recorded reason); running in the evaluator\n"
    );
    // The default limit is another key: the program compiles.
    let native = vlad(&root, cache.path(), &["run", file]);
    assert_eq!(native.stdout, eval.stdout);
    assert!(
        native.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&native.stderr)
    );
}

/// A deep non-tail recursion runs in a small C stack: beyond a budget (half the stack here),
/// its calls go to the component's explicit-stack machine (passes/machines.rs). A recursion that
/// still overflows the stack (here: the budget set beyond it) says so, and how to run it
/// instead, after the output it printed before, rather than dying of a segmentation fault.
#[test]
fn deep_recursion_runs_in_a_small_stack_and_an_overflow_is_reported() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let file = program(
        &dir,
        "deep.vlad",
        "(define (depth n) (if (= n 0) 0 (+ 1 (depth (- n 1)))))\n\
         (depth (real 10))\n(depth (real 1000000))\n",
    );
    let small = vlad_env(
        &root,
        cache.path(),
        &[("VLAD_STACK_BYTES", "100000")],
        &["run", &file],
    );
    assert!(small.status.success(), "{small:?}");
    assert_eq!(String::from_utf8_lossy(&small.stdout), "10\n1000000\n");
    assert!(small.stderr.is_empty());
    let native_only = vlad_env(
        &root,
        cache.path(),
        &[
            ("VLAD_STACK_BYTES", "100000"),
            ("VLAD_NATIVE_DEPTH_BYTES", "100000000"),
        ],
        &["run", &file],
    );
    assert_eq!(native_only.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&native_only.stdout), "10\n");
    assert_eq!(
        String::from_utf8_lossy(&native_only.stderr),
        "vlad: error: the compiled program ran out of stack (its recursion is deeper than its \
         stack allows); `vlad run --interp` runs it in the evaluator, which has no such limit\n"
    );
}

/// The reverse sweep of a loop of 10^6 steps (the forward sweep and the backpropagator chain
/// both recurse once per step) runs natively in a C stack of 1 MB, where the native recursion
/// alone needs about 170 MB: its frames are on the explicit stack (benches/reverse-loop.vlad,
/// whose Euler value for n = 10^6 is 1.10118055776934...).
#[test]
fn a_reverse_derivative_through_a_long_loop_runs_in_a_small_stack() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let out = vlad_with_input(
        &root,
        cache.path(),
        &[("VLAD_STACK_BYTES", "1000000")],
        &["run", "benches/reverse-loop.vlad"],
        "1000000\n",
    );
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("vlad: arena:") && err.lines().count() == 1,
        "{err}"
    );
    let x: f64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a real");
    assert!((x - 1.101_180_557_769_34).abs() < 1e-12, "{x}");
    // Issue 21's target, under 100 bytes a step: each step's backpropagator in the arena, and
    // the frames of the forward sweep's recursion (then the reverse sweep's), which hold only
    // what is live across their calls. Frames that held every parameter, a result slot and
    // two pointers took 184 bytes a step.
    let (arena, frames) = memory_stats(&err, "reverse-loop");
    let steps = 1_000_000;
    assert!(
        frames / steps <= 48 && (arena + frames) / steps < 100,
        "{arena} bytes of arena and {frames} of frames for {steps} steps"
    );
}

/// A compiled program killed by a signal (here SIGTERM, while it waits for input) makes `vlad
/// run` say so, with status 70, instead of ending without a word.
#[cfg(target_os = "linux")]
#[test]
fn a_compiled_program_killed_by_a_signal_is_reported() {
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let file = program(&dir, "wait.vlad", "(read-real)\n");
    // Compiled first, so that the run below only runs it.
    let o = Command::new(env!("CARGO_BIN_EXE_vlad"))
        .args(["run", &file])
        .env("VLAD_CACHE_DIR", cache.path())
        .stdin(Stdio::null())
        .output()
        .expect("run vlad");
    assert!(!String::from_utf8_lossy(&o.stderr).contains("not compiled"));
    let mut vlad = Command::new(env!("CARGO_BIN_EXE_vlad"))
        .args(["run", &file])
        .env("VLAD_CACHE_DIR", cache.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start vlad");
    // The compiled program is vlad's child: find it in /proc and end it.
    let parent = vlad.id().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let child = loop {
        let found = std::fs::read_dir("/proc").unwrap().find_map(|e| {
            let e = e.ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // pid (comm) state ppid ...: the fields after the command name's parenthesis.
            let ppid = stat.rsplit_once(") ")?.1.split(' ').nth(1)?;
            (ppid == parent).then(|| e.file_name().to_string_lossy().into_owned())
        });
        if let Some(pid) = found {
            break pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no compiled program started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let killed = Command::new("kill")
        .args(["-TERM", &child])
        .status()
        .expect("run kill");
    assert!(killed.success());
    drop(vlad.stdin.take());
    let o = vlad.wait_with_output().expect("wait for vlad");
    assert_eq!(o.status.code(), Some(70));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "vlad: the compiled program was killed by signal 15\n"
    );
}

/// The source cache knows every file a program loads: changing an included file compiles the
/// program again (and a stale record pointing at a missing executable is not followed).
#[test]
fn changing_an_included_file_compiles_again() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a directory");
    let lib = program(&dir, "lib.vlad", "(define (f x) (* 2 x))\n");
    let main = program(&dir, "main.vlad", "(include \"lib\")\n(f (real 21))\n");
    let o = vlad(&root, cache.path(), &["run", &main]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "42\n");
    std::fs::write(&lib, "(define (f x) (* 3 x))\n").unwrap();
    let o = vlad(&root, cache.path(), &["run", &main]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "63\n");
    // Every executable removed, the records left: the program compiles again.
    for e in std::fs::read_dir(cache.path()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none() {
            std::fs::remove_file(p).unwrap();
        }
    }
    let o = vlad(&root, cache.path(), &["run", &main]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "63\n");
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `vlad ARGS` with `input` on standard input and `VLAD_ARENA_STATS` set.
fn vlad_with_input(
    root: &Path,
    cache: &Path,
    env: &[(&str, &str)],
    args: &[&str],
    input: &str,
) -> Output {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_vlad"))
        .args(args)
        .current_dir(root)
        .env("VLAD_CACHE_DIR", cache)
        .env("VLAD_VERIFY_IR", "1")
        .env("VLAD_ARENA_STATS", "1")
        .envs([ANY_COST])
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vlad");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input.as_bytes()).expect("write stdin");
    drop(stdin);
    child.wait_with_output().expect("wait for vlad")
}

/// Loops that carry arrays they build from one step to the next (a tail-recursive loop, an
/// `ifold`; one array or two) copy them down to the loop's arena mark at each step, so they
/// run in constant memory: 20,000 steps over 1,000 reals would otherwise hold 160 MB of
/// arrays (10 of the arena's 16 MB chunks), and print what the evaluator prints.
#[test]
fn loops_carrying_arrays_run_in_constant_memory() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let lib = root.join("lib/array");
    let file = program(
        &dir,
        "carry.vlad",
        &format!(
            "(include \"{}\")\n\
             (define h 0.001)\n\
             (define (step x) (build (array-length x) (lambda (i) (+ (get x i) (* h (sin (get x i)))))))\n\
             (define (sum x) (ifold (lambda (acc i) (+ acc (get x i))) 0 (array-length x)))\n\
             (define (run x t) (if (= t 0) x (run (step x) (- t 1))))\n\
             (define (run2 x v t) (if (= t 0) (vector-sub x v) (run2 (vector-add x v) (step v) (- t 1))))\n\
             (let* ((n (read-real)) (steps (read-real)) (mode (read-real))\n\
                    (x (build n (lambda (i) (/ i n)))))\n\
               (cond ((= mode 0) (sum (run x steps)))\n\
                     ((= mode 1) (sum (run2 x x steps)))\n\
                     ((= mode 2) (sum (ifold (lambda (y t) (step y)) x steps)))\n\
                     (else (let ((r (ifold (lambda (p t) (cons (step (car p)) (car p))) (cons x x) steps)))\n\
                             (- (sum (car r)) (sum (cdr r)))))))\n",
            lib.display()
        ),
    );
    for mode in 0..4 {
        let small = format!("50 7 {mode}\n");
        compiled_prints_what_the_evaluator_prints(&root, cache.path(), &file, &small);
        let big = vlad_with_input(
            &root,
            cache.path(),
            &[],
            &["run", &file],
            &format!("1000 20000 {mode}\n"),
        );
        let stderr = String::from_utf8_lossy(&big.stderr);
        assert!(big.status.success(), "mode {mode}: {stderr}");
        let (chunks, _) = arena_stats(&stderr, &format!("mode {mode}"));
        assert!(chunks <= 2, "mode {mode}: {chunks} arena chunks: {stderr}");
    }
}

/// The number before `unit` in the statistics line of a run with `VLAD_ARENA_STATS` set (its
/// standard error): "vlad: arena: 3 chunks, 50331648 bytes, 0 collections, 4096 bytes of
/// frames".
fn arena_field(stderr: &str, unit: &str) -> Option<usize> {
    let line = stderr.split("vlad: arena: ").nth(1)?.lines().next()?;
    let part = line.split(", ").find(|p| p.ends_with(unit))?;
    part.split(' ').next()?.parse().ok()
}

/// The arena's chunks and the collections of a run with `VLAD_ARENA_STATS` set; a run that
/// printed no statistics fails the test, `what` saying which run.
fn arena_stats(stderr: &str, what: &str) -> (usize, usize) {
    let chunks = arena_field(stderr, " chunks")
        .unwrap_or_else(|| panic!("{what}: no arena statistics in {stderr:?}"));
    (chunks, arena_field(stderr, " collections").unwrap_or(0))
}

/// The bytes of the arena and the peak bytes of the explicit stack's frames that a run with
/// `VLAD_ARENA_STATS` reports.
fn memory_stats(stderr: &str, what: &str) -> (usize, usize) {
    match (
        arena_field(stderr, " bytes"),
        arena_field(stderr, " bytes of frames"),
    ) {
        (Some(arena), Some(frames)) => (arena, frames),
        _ => panic!("{what}: no memory statistics in {stderr:?}"),
    }
}

/// Loops that carry boxed values they rebuild at each step run in constant memory: the arena
/// above the loop's mark is collected at its back edge (`Collect`, `vl_collect` in runtime.c).
/// Each mode prints what the evaluator prints on a small input, collecting often or not; on a large one, where the arena grew by hundreds of megabytes without the collection
/// (benches/README.md, "Loops that carry boxed values"), it stays within two 16 MB chunks.
#[test]
fn loops_carrying_boxed_values_run_in_constant_memory() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let file = program(
        &dir,
        "carry-boxed.vlad",
        "(include \"ad\")\n\
         ;; a list rebuilt at each step, dropped now and then (the reproducer of the issue)\n\
         (define (rebuilt l n k) (if (> n k) (length l) (rebuilt (if (> (sin n) 0.5) '() (cons n l)) (+ n 1) k)))\n\
         ;; a list of 100 reals mapped at each step\n\
         (define (stepped l n k) (if (> n k) (reduce + 0 l) (stepped (map (lambda (x) (+ x 1)) l) (+ n 1) k)))\n\
         ;; a list handed back and forth between two functions\n\
         (define (ping l n k) (if (> n k) (length l) (pong (cons n l) (+ n 1) k)))\n\
         (define (pong l n k) (if (> (sin n) 0.9) (ping (list n) (+ n 1) k) (ping (cons (* 2 n) l) (+ n 1) k)))\n\
         ;; a boxed closure that closes over the previous one\n\
         (define (composed f n k) (if (> n k) (f 1) (composed (if (> (sin n) 0) (lambda (x) (+ (f x) 1)) (lambda (x) (* x n))) (+ n 1) k)))\n\
         (define (target n) (map-n (lambda (i) (/ i n)) n))\n\
         (define ((objective c) x) (reduce + 0 (map2 (lambda (xi ci) (* (- xi ci) (- xi ci))) x c)))\n\
         (let* ((mode (read-real)) (k (read-real)))\n\
           (cond ((= mode 0) (rebuilt '() (real 0) k))\n\
                 ((= mode 1) (stepped (map-n (lambda (i) i) 100) (real 0) k))\n\
                 ;; an ifold whose accumulator is a boxed list\n\
                 ((= mode 2) (length (ifold (lambda (l i) (if (> (sin i) 0.5) '() (cons i l))) '() k)))\n\
                 ((= mode 3) (ping '() (real 0) k))\n\
                 ((= mode 4) (composed (lambda (x) x) (real 0) k))\n\
                 ;; gradient descent, each step carrying its gradient (lib/ad.vlad)\n\
                 (else (reduce + 0 (multivariate-argmin-R (objective (target k)) (map-n (lambda (i) (real 0)) k))))))\n",
    );
    let sizes = [
        (1000, 3_000_000),
        (50, 20_000),
        (1000, 3_000_000),
        (1000, 3_000_000),
        (100, 10_000_000),
        (20, 10_000),
    ];
    for (mode, (small, big)) in sizes.iter().enumerate() {
        let small = format!("{mode} {small}\n");
        let n = compiled_prints_what_the_evaluator_prints(&root, cache.path(), &file, &small);
        let big = vlad_with_input(
            &root,
            cache.path(),
            &[],
            &["run", &file],
            &format!("{mode} {big}\n"),
        );
        let stderr = String::from_utf8_lossy(&big.stderr);
        assert!(big.status.success(), "mode {mode}: {stderr}");
        let (chunks, _) = arena_stats(&stderr, &format!("mode {mode}"));
        assert!(chunks <= 2, "mode {mode}: {chunks} arena chunks: {stderr}");
        // Collecting often changes nothing but the memory.
        let often = vlad_with_input(
            &root,
            cache.path(),
            &[COLLECT_OFTEN],
            &["run", &file],
            &small,
        );
        let stderr = String::from_utf8_lossy(&often.stderr);
        let (_, collections) = arena_stats(&stderr, &format!("mode {mode}"));
        assert!(collections > 0, "mode {mode}: no collection: {stderr}");
        assert_eq!(
            String::from_utf8_lossy(&often.stdout),
            n,
            "mode {mode}: collecting often"
        );
    }
}

/// A reverse sweep through a loop whose steps are checkpointed (`checkpoint`: the sweep runs
/// each step again, making its tape then) keeps one step's tape, not every step's: the loop
/// over 2,000 points, each a loop over 1,000 entries, stays within two 16 MB chunks (not so
/// when the sweep, which adds into its accumulator in place, was never collected, nor without
/// the checkpoints: benches/README.md has the figures), and prints what it prints without them
/// and what the evaluator prints.
#[test]
fn a_reverse_sweep_through_checkpointed_steps_keeps_one_steps_tape() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let file = program(
        &dir,
        "checkpointed.vlad",
        "(include \"array\")\n\
         ;; the gradient of sum_i (sum_k x_k sin(i + k))^2 over n points, each point's term\n\
         ;; checkpointed (mode 1) or not (mode 0)\n\
         (let* ((m (read-real)) (n (read-real)) (mode (read-real))\n\
                (point (lambda (x i) (let ((s (ifold (lambda (s k) (+ s (* (get x k) (sin (+ i k))))) 0 m))) (* s s))))\n\
                (f (lambda (x) (ifold (lambda (t i) (+ t (if (= mode 1) (checkpoint (lambda (j) (point x j)) i) (point x i)))) 0 n)))\n\
                (g ((grad-R f) (build m (lambda (k) (cos k))))))\n\
           (list (vector-sum g) (get g (- m 1))))\n",
    );
    let run = |input: &str, env: &[(&str, &str)], interp: bool| {
        let args: &[&str] = if interp {
            &["run", "--interp", &file]
        } else {
            &["run", &file]
        };
        let o = vlad_with_input(&root, cache.path(), env, args, input);
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            o.status.success() && !stderr.contains("not compiled"),
            "{input}: {stderr}"
        );
        (String::from_utf8_lossy(&o.stdout).into_owned(), stderr)
    };
    let (plain, _) = run("5 4 0\n", &[], false);
    let (checkpointed, _) = run("5 4 1\n", &[], false);
    let (eval, _) = run("5 4 1\n", &[], true);
    assert_eq!(checkpointed, plain, "with and without checkpoints");
    assert!(
        same_output(&checkpointed, &eval),
        "native {checkpointed} evaluator {eval}"
    );
    let (often, stderr) = run("5 4 1\n", &[COLLECT_OFTEN], false);
    let (_, collections) = arena_stats(&stderr, "collecting often");
    assert!(collections > 0, "no collection: {stderr}");
    assert_eq!(often, checkpointed, "collecting often");
    let (_, stderr) = run("1000 2000 1\n", &[], false);
    let (chunks, _) = arena_stats(&stderr, "1000 2000 1");
    assert!(chunks <= 2, "{chunks} arena chunks: {stderr}");
}

/// Gradient descent on a matrix: each step takes a reverse-mode gradient (whose sweeps add
/// into arrays in place) and builds the next matrix from it. The sweeps are `ifold`s inside the
/// descent's step, and their tapes arrays the step makes and stores into: the descent loop
/// collects what it carries all the same (`passes::carry`), so 300 steps of a 100 x 100 matrix
/// stay within two 16 MB chunks (the arena kept every step's tapes when an in-place addition
/// or a store of a pointer anywhere in the step kept the loop from collecting:
/// benches/README.md), and it prints what the evaluator prints, collecting often or not.
#[test]
fn gradient_descent_on_a_matrix_runs_in_constant_memory() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let file = program(
        &dir,
        "descent-matrix.vlad",
        "(include \"array\")\n\
         (include \"ad\")\n\
         (let* ((n (read-real)) (steps (read-real))\n\
                (t (build n (lambda (i) (build n (lambda (j) (sin (+ (* n i) j)))))))\n\
                ;; sum_ij (m_ij - t_ij)^2 + sum_i (sum_j m_ij)^2 / 100\n\
                (f (lambda (m)\n\
                     (+ (ifold (lambda (s i)\n\
                                 (let ((row (get m i)) (ti (get t i)))\n\
                                   (+ s (ifold (lambda (s j) (let ((e (- (get row j) (get ti j)))) (+ s (* e e)))) 0 n))))\n\
                               0 n)\n\
                        (/ (ifold (lambda (s i) (let ((r (vector-sum (get m i)))) (+ s (* r r)))) 0 n) 100))))\n\
                (m (ifold (lambda (m k)\n\
                            (let ((g ((grad-R f) m)))\n\
                              (build n (lambda (i) (build n (lambda (j) (- (get (get m i) j) (/ (get (get g i) j) 4))))))))\n\
                          (build n (lambda (i) (build n (lambda (j) 0))))\n\
                          steps)))\n\
           (list (f m) (matrix-sum m)))\n",
    );
    let small = "6 5\n";
    let n = compiled_prints_what_the_evaluator_prints(&root, cache.path(), &file, small);
    let often = vlad_with_input(
        &root,
        cache.path(),
        &[COLLECT_OFTEN],
        &["run", &file],
        small,
    );
    let stderr = String::from_utf8_lossy(&often.stderr);
    let (_, collections) = arena_stats(&stderr, "collecting often");
    assert!(collections > 0, "no collection: {stderr}");
    assert_eq!(
        String::from_utf8_lossy(&often.stdout),
        n,
        "collecting often"
    );
    let big = vlad_with_input(&root, cache.path(), &[], &["run", &file], "100 300\n");
    let stderr = String::from_utf8_lossy(&big.stderr);
    assert!(big.status.success(), "{stderr}");
    let (chunks, _) = arena_stats(&stderr, "100 300");
    assert!(chunks <= 2, "{chunks} arena chunks: {stderr}");
}

/// Reverse mode through `build` and `ifold` keeps one backpropagator per element in an array
/// (a tape) and adds what each gives into a dense sensitivity in place, so that the gradient of
/// a sum over n elements takes memory linear in n with a small constant: 200,000 elements in at
/// most three of the arena's 16 MB chunks (chained backpropagators and lazy one-hot nodes took
/// many more). A loop whose step takes such a gradient (gradient descent) releases what each
/// step allocated: 2,000 steps over 2,000 elements in one chunk (it kept every step's tape
/// while its step counted as one that adds in place). Both print what the evaluator prints.
#[test]
fn reverse_sweeps_over_arrays_take_linear_memory() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let file = program(
        &dir,
        "sweep.vlad",
        "(define (vsum v) (ifold (lambda (s i) (+ s (get v i))) 0 (array-length v)))\n\
         (define (lse v) (log (vsum (build (array-length v) (lambda (i) (exp (get v i)))))))\n\
         (define (grad-R f x)\n\
           (let* (((cons y bp) ((*j f) (*j x))) ((cons fbar xbar) (unsensitize (bp (sensitize 1))))) xbar))\n\
         (define (descend n steps)\n\
           (ifold (lambda (w k) (let ((g (grad-R lse w))) (build n (lambda (i) (- (get w i) (* 0.1 (get g i)))))))\n\
                  (build n (lambda (i) (sin i))) steps))\n\
         (let* ((mode (read-real)) (n (read-real)))\n\
           (if (= mode 0)\n\
               (let ((g (grad-R lse (build n (lambda (i) (sin i)))))) (list (get g 0) (get g (- n 1)) (vsum g)))\n\
               (let ((w (descend n (read-real)))) (list (get w 0) (vsum w)))))\n",
    );
    for (small, big, most) in [
        ("0 50\n", "0 200000\n", 3),
        ("1 20 5\n", "1 2000 2000\n", 1),
    ] {
        compiled_prints_what_the_evaluator_prints(&root, cache.path(), &file, small);
        let run = vlad_with_input(&root, cache.path(), &[], &["run", &file], big);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{big}: {stderr}");
        let (chunks, _) = arena_stats(&stderr, big);
        assert!(chunks <= most, "{big}: {chunks} arena chunks: {stderr}");
    }
}

/// A recursion that adds a one-hot per level (`(get v i)`) to the sensitivity of `v` that the
/// levels below it gave, which a loop made dense (the base case's sum), keeps the sums lazy:
/// a dense copy per level (which would unbox k-means' gradient) makes it quadratic, 62 arena
/// chunks (1 GB) at n = 8000 where the lazy sums take one.
#[test]
fn a_recursion_adding_one_hots_to_a_dense_sensitivity_takes_linear_memory() {
    let root = repo_root();
    let dir = tempfile::tempdir().expect("a scratch directory");
    let file = program(
        &dir,
        "recursion.vlad",
        "(define (vsum v) (ifold (lambda (s i) (+ s (get v i))) 0 (array-length v)))\n\
         (define (f v i) (if (= i 0) (vsum v) (+ (get v i) (f v (- i 1)))))\n\
         (define (grad-R f x)\n\
           (let* (((cons y bp) ((*j f) (*j x))) ((cons fbar xbar) (unsensitize (bp (sensitize 1))))) xbar))\n\
         (let* ((n (read-real)) (g (grad-R (lambda (v) (f v (- n 1))) (build n (lambda (i) (sin i))))))\n\
           (list (get g 0) (get g (- n 1)) (vsum g)))\n",
    );
    prints_what_the_evaluator_prints_in_few_chunks(&root, &file, "50\n", "8000\n", 2);
}

/// `file` prints what the evaluator prints on input `small`, and runs natively on input `big`
/// in at most `chunks` arena chunks.
fn prints_what_the_evaluator_prints_in_few_chunks(
    root: &Path,
    file: &str,
    small: &str,
    big: &str,
    chunks: usize,
) {
    let cache = tempfile::tempdir().expect("a cache directory");
    compiled_prints_what_the_evaluator_prints(root, cache.path(), file, small);
    let run = vlad_with_input(root, cache.path(), &[], &["run", file], big);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{big}: {stderr}");
    let (used, _) = arena_stats(&stderr, big);
    assert!(used <= chunks, "{big}: {used} arena chunks: {stderr}");
}

/// Reverse over reverse through a `build` whose elements are derivatives: the tape's records
/// are copied into an array whose layout no load reads, and `fields` dropped the copy's load
/// but kept its store, so the C did not compile (the program ran in the evaluator). Found by
/// `VLAD_RANDOM_SEED=18`.
#[test]
fn a_copy_into_an_array_no_one_reads_compiles() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let file = program(
        &dir,
        "copy.vlad",
        "(include \"ad\")\n\
         ((derivative-R (lambda (x1) (get (build 2 (lambda (j9) ((derivative-R (lambda (x11)\n\
            (if (< x11 (real 0.5)) (* x11 x11) (+ x11 1.5)))) x1))) 1))) 0.3)\n",
    );
    let out = compiled_prints_what_the_evaluator_prints(&root, cache.path(), &file, "");
    assert_eq!(out.trim(), "2");
}

/// Reverse over reverse through a list loop of `build`s whose elements are reverse
/// derivatives: the analysis joins the count of an inner loop's tape with values of other
/// tags, so the count is boxed, and the lowering declined it (the program ran in the
/// evaluator). Found by `VLAD_RANDOM_SEED=18`.
#[test]
fn a_loop_whose_count_is_boxed_compiles() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let file = program(
        &dir,
        "count.vlad",
        "(include \"ad\")\n\
         ((derivative-R (lambda (x1) ((derivative-R (lambda (x2)\n\
           (let loop3 ((k4 (real 4)) (l5 '()))\n\
             (if (< k4 1)\n\
                 (let sum6 ((m7 l5) (s8 0))\n\
                   (if (null? m7) s8 (sum6 (cdr m7) (+ (* 0.5 s8) (get (car m7) (real 1))))))\n\
                 (loop3 (- k4 1)\n\
                        (cons (build 2 (lambda (j9) ((derivative-R (lambda (x11)\n\
                                (let ((p10 (cons (< x11 (real 0.5)) x11)))\n\
                                  (if (car p10) (* (cdr p10) x11) (+ (cdr p10) (real 1.5))))))\n\
                              x1)))\n\
                              l5)))))) 0.5))) 0.3)\n",
    );
    let out = compiled_prints_what_the_evaluator_prints(&root, cache.path(), &file, "");
    assert_eq!(out.trim(), "0");
}

/// A random program (`VLAD_RANDOM_SEED=26`, reduced to the forms it needs) whose analysis
/// joins a lazy zero with a reverse real in `derivative-R`'s backpropagator, where a real is
/// added to it: the alternative that is not the lazy zero cannot be added (and never is at run
/// time). The lowering declined the program (`plus` of unexpected values); it now compiles
/// that alternative's addition to the evaluator's error.
#[test]
fn a_plus_that_fails_in_one_alternative_compiles() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let file = root.join("tests/fixtures/native/plus-of-a-lazy-zero-alternative.vlad");
    let file = file.to_str().expect("a UTF-8 path");
    compiled_prints_what_the_evaluator_prints(&root, cache.path(), file, &"1 ".repeat(20));
}

/// A random program (`VLAD_RANDOM_SEED=32`, reduced to three expressions) where `*j` meets a
/// boxed closure whose environment holds a closure that holds boxed closures of other codes.
/// The analysis mapped that environment once and did not map it again when the summary of a
/// nested code grew, so the summary of the mapped code missed what the map gives; the lowering
/// could not box the map's result into it, made no map for the code, and the compiled program
/// stopped ("an AD operator (map 3) met a boxed procedure of code N it was not compiled for").
#[test]
fn an_ad_map_through_a_nested_summary_that_grows_is_compiled() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let file = root.join("tests/fixtures/native/reverse-map-through-a-nested-summary.vlad");
    let file = file.to_str().expect("a UTF-8 path");
    let out = compiled_prints_what_the_evaluator_prints(&root, cache.path(), file, "");
    assert_eq!(out.split_whitespace().collect::<Vec<_>>(), ["0", "0", "0"]);
}

/// Paper 002's rules that the IR applies exactly (tests/fixtures/flow/rules.vlad): the
/// one-hot folds as written run their step at k alone, which must give what the loop gives
/// where k is an index below n, not an integer, negative, n itself or -0, and where n is 0;
/// the other rules on the same values (x = -0 among them). No loop is left but the `build`.
#[test]
fn paper_002s_exact_rules_print_what_the_evaluator_prints() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let file = "tests/fixtures/flow/rules.vlad";
    for input in [
        "5 3 2", "5 0 2", "5 4 16", "5 2.5 2", "5 -1 2", "5 5 2", "5 -0 -0", "0 0 1", "5 1 -4",
    ] {
        compiled_prints_what_the_evaluator_prints(&root, cache.path(), file, input);
    }
    let ir = vlad(&root, cache.path(), &["compile", file, "--emit", "ir"]);
    let ir = String::from_utf8_lossy(&ir.stdout);
    let main = &ir[..ir.find("\n}\n").expect("the first function")];
    assert_eq!(main.matches("for ").count(), 1, "{main}");
}

/// A loop whose step reads an array once and loops over it (k-means' shape: the nearest centre
/// from the first one and a fold over all) gives the array a one-hot plus a dense sensitivity
/// per step, which the sweep adds into its accumulator part by part: the arena holds the tape,
/// not every step's dense sensitivity. Boxed as a lazy sum, the accumulator was a chain of
/// every step's sums until the end: 26 arena chunks (500 MB) at these sizes, where the tape
/// takes 4.
#[test]
fn a_read_beside_a_loop_over_an_array_accumulates_in_constant_memory() {
    let root = repo_root();
    let dir = tempfile::tempdir().expect("a scratch directory");
    let file = program(
        &dir,
        "sum.vlad",
        "(define (vsum v) (ifold (lambda (s i) (+ s (get v i))) 0 (array-length v)))\n\
         (define (cost c xs)\n\
           (ifold (lambda (acc i) (+ acc (* (get xs i) (+ (get c 0) (vsum c))))) 0 (array-length xs)))\n\
         (define (grad-R f x)\n\
           (let* (((cons y bp) ((*j f) (*j x))) ((cons fbar xbar) (unsensitize (bp (sensitize 1))))) xbar))\n\
         (let* ((n (read-real)) (k (read-real)) (xs (build n (lambda (i) (sin i))))\n\
                (g (grad-R (lambda (c) (cost c xs)) (build k (lambda (j) (cos j))))))\n\
           (list (get g 0) (get g (- k 1)) (vsum g)))\n",
    );
    prints_what_the_evaluator_prints_in_few_chunks(&root, &file, "300 20\n", "20000 200\n", 6);
}

/// A loop that releases its arena and then asks for a little more than before (the k-means
/// gradient's collections, each copying down a larger tape) reuses the chunk it had: a new
/// chunk of exactly each size, all kept, made the arena 3.3 GB in 124 chunks at 1150 points,
/// where 1000 points take 0.37 GB (benches/README.md).
#[test]
fn an_arena_that_grows_by_large_requests_reuses_its_chunks() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let run = vlad_with_input(
        &root,
        cache.path(),
        &[],
        &[
            "run",
            "-I",
            "benches/array-ad",
            "benches/array-ad/kmeans.vlad",
        ],
        "1150 100 20 2 1\n",
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success() && !stderr.contains("not compiled"),
        "{stderr}"
    );
    let (arena, _) = memory_stats(&stderr, "k-means");
    assert!(arena < 1 << 30, "{arena} bytes of arena: {stderr}");
}

/// `vlad compile --emit flow` and `--emit ir` stop at the analysis time limit, as `vlad run`
/// does, with the position and how to raise the limit (tests/array/property.vlad's analysis
/// takes about 15 s).
#[test]
fn emitting_the_analysis_stops_at_its_time_limit() {
    let root = repo_root();
    for emit in ["flow", "ir"] {
        // A bound well under the analysis's own 15 s of CPU time: the limit is 1 s. The
        // limit counts CPU time, so the test does too (`ulimit -t`: the kernel ends a process
        // that uses more), whatever the load of the machine.
        let o = Command::new("sh")
            .arg("-c")
            .arg("ulimit -t 8 && exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_vlad"))
            .args(["compile", "tests/array/property.vlad", "--emit", emit])
            .current_dir(&root)
            .env("VLAD_ANALYSIS_TIMEOUT_SECS", "1")
            .stdin(Stdio::null())
            .output()
            .expect("run vlad");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "--emit {emit}: {stderr}");
        assert!(
            stderr.contains("tests/array/property.vlad:")
                && stderr.contains("ran out of time")
                && stderr.contains(
                    "after 1 s (VLAD_ANALYSIS_TIMEOUT_SECS sets the limit, in seconds of CPU time)"
                ),
            "--emit {emit}: {stderr}"
        );
    }
}

/// Runs `body` (after an include of lib/ad.vlad) natively and in the evaluator; asserts
/// that the native run succeeds quietly and prints exactly what the evaluator prints, which
/// it returns.
fn exact_native_output(name: &str, body: &str) -> String {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let text = format!("(include \"{}\")\n{body}", root.join("lib/ad").display());
    let file = program(&dir, name, &text);
    let native = vlad(&root, cache.path(), &["run", &file]);
    let eval = vlad(&root, cache.path(), &["run", "--interp", &file]);
    let stderr = String::from_utf8_lossy(&native.stderr);
    assert!(
        native.status.success() && stderr.is_empty(),
        "{name}: {stderr}"
    );
    let (n, e) = (
        String::from_utf8_lossy(&native.stdout),
        String::from_utf8_lossy(&eval.stdout),
    );
    assert_eq!(n, e, "{name}");
    e.into_owned()
}

/// A lazy zero sensitivity is the identity of `plus` in the evaluator (no arithmetic), so a
/// sensitivity of -0 added to one stays -0. Compiled code must print the same sign, which
/// `same_output` would not notice: here the texts must be equal. The loop's boxed
/// sensitivities used to be added to a computed +0 (printing 0).
#[test]
fn signed_zero_sensitivities_match_the_evaluator() {
    let out = exact_native_output(
        "negative-zero.vlad",
        "(define c (* -1 0))\n\
         ((derivative-R (lambda (x) (* x c))) (real 1))\n\
         ((gradient-R (lambda (p) (* (car p) c))) (cons (real 1) (real 2)))\n\
         ((derivative-R (lambda (x) (let ((g (lambda (y) (* x c)))) (g 1)))) (real 1))\n\
         ((derivative-R (lambda (x) (let loop ((i 0) (acc 0))\n\
           (if (< i (real 3)) (loop (+ i 1) (+ acc (* x c))) acc)))) (real 1))\n\
         ((gradient-R (lambda (l) (let loop ((l l) (acc 0))\n\
           (if (null? l) acc (loop (cdr l) (+ acc (* (car l) c)))))))\n\
          (list (real 1) (real 2)))\n",
    );
    assert_eq!(out, "-0\n(-0 . 0)\n-0\n-0\n(-0 -0)\n");
}

/// Lists of reals and of empty lists of a length known only at run time (so boxed in compiled
/// code): `(upto n)` is `(n ... 1)`, `(nils n)` holds n empty lists.
const LISTS: &str = "(define (upto n) (if (= n 0) '() (cons (real n) (upto (- n 1)))))\n\
                     (define (nils n) (if (= n 0) '() (cons '() (nils (- n 1)))))\n";

/// The runtime's `plus` of boxed values returns an object with no reals in it, added to itself,
/// as it is, and a pair, tagged value or closure whose parts add to its own parts as itself
/// (runtime.c, `VL_NOREALS`). Lists of unknown length and closures chosen at run time are
/// boxed, so these sums are the runtime's: reals in them must still be added (a list of reals,
/// a closure over a real, a list of empty lists beside reals), and two real-free values of
/// different shapes must still fail as the evaluator fails.
#[test]
fn plus_of_boxed_values_and_themselves_matches_the_evaluator() {
    let defs = format!(
        "{LISTS}\
         (define (pick k x) (if (< k (real 1)) (lambda (y) (+ x y)) (lambda (y) (* x y))))\n\
         (define (pick2 k n) (if (< k (real 1)) (lambda (y) (cons y n)) (lambda (y) (cons n y))))\n"
    );
    let out = exact_native_output(
        "self-plus.vlad",
        &format!(
            "{defs}\
             (let ((l (upto (real 3)))) (plus l l))\n\
             (let ((l (nils (real 3)))) (plus l l))\n\
             (let ((l (cons (nils (real 2)) (upto (real 2))))) (plus l l))\n\
             (plus (cons (nils (real 2)) (upto (real 2))) (cons (nils (real 2)) (upto (real 2))))\n\
             (let ((f (pick (real 0) (real 2)))) ((plus f f) 1))\n\
             (let ((f (pick (real 2) (real 2)))) ((plus f f) 3))\n\
             (let ((f (pick2 (real 0) '()))) ((plus f f) 5))\n"
        ),
    );
    assert_eq!(
        out,
        "(6 4 2)\n(() () ())\n((() ()) 4 2)\n((() ()) 4 2)\n5\n12\n(5)\n"
    );

    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let file = program(
        &dir,
        "self-plus-fails.vlad",
        &format!("{defs}(let ((l (nils (real 2)))) (plus l (nils (real 3))))\n"),
    );
    let (n, e) = native_and_evaluator_fail(&root, cache.path(), &file);
    assert_eq!(n, e);
    assert!(
        e.contains("plus: the values do not have the same shape: () and a pair"),
        "{e}"
    );
}

/// Runs `file` natively and in the evaluator, asserts that both fail, and returns what each
/// printed (standard output and error together).
fn native_and_evaluator_fail(root: &Path, cache: &Path, file: &str) -> (String, String) {
    let native = vlad(root, cache, &["run", file]);
    let eval = vlad(root, cache, &["run", "--interp", file]);
    assert!(!native.status.success() && !eval.status.success(), "{file}");
    let (n, e) = (texts(&native), texts(&eval));
    (n.0 + &n.1, e.0 + &e.1)
}

/// The runtime's `plus` and `bundle` of boxed pairs look at the car before the cdr, as the
/// evaluator does, so where both fail the compiled program reports the evaluator's error. C
/// leaves the order of a call's arguments to the compiler, and GCC's reported the cdr's ("1
/// and ()" for "2 and ()").
#[test]
fn errors_in_both_parts_of_a_pair_are_reported_for_the_car() {
    let defs = LISTS;
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a scratch directory");
    for (name, failing, error) in [
        (
            "plus-car-first.vlad",
            "(plus (upto (real 2)) (nils (real 2)))",
            "plus: the values do not have the same shape: 2 and ()",
        ),
        (
            "bundle-car-first.vlad",
            "(bundle (upto (real 2)) (perturb (nils (real 2))))",
            "bundle: the values do not have the same shape: 2 and (perturbation ())",
        ),
    ] {
        let file = program(&dir, name, &format!("{defs}{failing}\n"));
        let (n, e) = native_and_evaluator_fail(&root, cache.path(), &file);
        assert_eq!(n, e, "{name}");
        assert!(e.contains(error), "{e}");
    }
}

/// Found by the random programs: forward mode over reverse mode over forward mode, where a
/// loop with an unknown trip count makes the inner values boxed. The analysis took a `bundle`
/// of forward values with boxed parts for an error (it could not tell their shapes agree), so
/// the compiled program stopped with an internal error where the evaluator prints 0.
#[test]
fn bundles_of_values_with_boxed_parts_match_the_evaluator() {
    let out = exact_native_output(
        "nested.vlad",
        "((derivative-F (lambda (x1) ((derivative-R (lambda (x2) ((derivative-F (lambda (x3)\n\
           (let loop ((i 0) (acc (real 1.5))) (if (< i (real 0)) (loop (+ i 1) 1) acc))))\n\
           x2))) 1))) 2)\n",
    );
    assert_eq!(out, "0\n");
}

/// Random programs (`vlad-random`: the grammar of the flow analysis's differential test, with
/// closures, pairs, conditionals, loops, recursion, `real`, lists of unknown length,
/// `write-real`, `read-real`, nested forward and reverse derivatives, and arrays, inside
/// derivatives of both modes too) compiled to native code print what the evaluator prints,
/// reading the same numerals (`vlad_random::input`). They are grouped into files of
/// `PER_FILE` top-level expressions, each printing its value (and what its `write-real`s
/// print), so that each file is compiled once. `VLAD_RANDOM_FILES` and
/// `VLAD_RANDOM_SEED` change how many files and which programs, for longer runs by hand.
#[test]
fn random_programs_compiled_natively_print_what_the_evaluator_prints() {
    const PER_FILE: usize = 100;
    let files = env_setting("VLAD_RANDOM_FILES", 10) as usize;
    let root = repo_root();
    let lib = root.join("lib");
    let lib = lib.to_str().expect("a UTF-8 path");
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let seed = env_setting("VLAD_RANDOM_SEED", 0x0bad_5eed_1234_5678) | 1;
    let mut rng = vlad_random::Rng(seed);
    // The numerals the programs read, from a generator of their own.
    let mut numerals = vlad_random::Rng(seed.rotate_left(17) | 1);
    let mut reads = 0;
    let (mut reverse, mut arrays, mut failures) = (0, 0, Vec::new());
    let (mut forward_arrays, mut reverse_arrays) = (0, 0);
    let (mut lists, mut prints, mut list_arrays, mut booleans) = (0, 0, 0, 0);
    for n in 0..files {
        let mut exprs = Vec::new();
        for _ in 0..PER_FILE {
            let (p, counts) =
                vlad_random::expression_reading(&mut rng, 4, vlad_random::Arrays::Everywhere, true);
            reads += usize::from(counts.reads > 0);
            forward_arrays += usize::from(counts.forward > 0);
            reverse_arrays += usize::from(counts.reverse > 0);
            let e = p
                .strip_prefix("(include \"ad\")\n")
                .expect("the library first");
            reverse += usize::from(e.contains("derivative-R"));
            arrays += usize::from(e.contains("(build") || e.contains("(ifold"));
            lists += usize::from(e.contains("(null? "));
            prints += usize::from(e.contains("(write-real "));
            list_arrays += usize::from(e.contains("(get (car "));
            booleans += usize::from(
                e.contains("(plus (<") || e.contains("(bundle (<") || e.contains("(cons (<"),
            );
            exprs.push(e.to_string());
        }
        let file = program(
            &dir,
            &format!("random{n}.vlad"),
            &format!("(include \"ad\")\n{}", exprs.concat()),
        );
        // Both engines read the same numerals, spelled every way the reader allows: the C
        // runtime's reader of numbers against the evaluator's.
        let input = vlad_random::input(&mut numerals, 4000);
        let native = vlad_reading(
            &root,
            cache.path(),
            &[QUICK_CC],
            &["run", "-I", lib, &file],
            &input,
        );
        let eval = vlad_reading(
            &root,
            cache.path(),
            &[],
            &["run", "--interp", "-I", lib, &file],
            &input,
        );
        let machine = vlad_reading(
            &root,
            cache.path(),
            &[MACHINES_ONLY, COLLECT_OFTEN, QUICK_CC],
            &["run", "-I", lib, &file],
            &input,
        );
        if !same_output(
            &String::from_utf8_lossy(&machine.stdout),
            &String::from_utf8_lossy(&native.stdout),
        ) || machine.status.code() != native.status.code()
        {
            failures.push(format!(
                "random{n}.vlad: run in its machines, native code prints\n{}",
                String::from_utf8_lossy(&machine.stdout)
            ));
        }
        let (nout, nerr) = texts(&native);
        let (eout, eerr) = texts(&eval);
        assert!(
            eval.status.success() && eerr.is_empty() && eout.lines().count() >= PER_FILE,
            "random{n}.vlad: every expression gives a value in the evaluator: {eerr}"
        );
        let before = failures.len();
        if nerr.contains("not compiled") {
            failures.push(format!("random{n}.vlad: {nerr}"));
        }
        // Lines, not expressions: `write-real` prints lines of its own.
        for (i, (a, b)) in nout.lines().zip(eout.lines()).enumerate() {
            if !same_output(a, b) {
                failures.push(format!(
                    "random{n}.vlad, line {}:\nnative:    {a}\nevaluator: {b}",
                    i + 1
                ));
            }
        }
        if nout.lines().count() != eout.lines().count()
            || nerr != eerr
            || native.status.code() != eval.status.code()
        {
            failures.push(format!(
                "random{n}.vlad: native printed {} lines ({}), the evaluator {}\n{nerr}",
                nout.lines().count(),
                native.status,
                eout.lines().count()
            ));
        }
        if failures.len() > before {
            // Kept for debugging: the scratch directory goes away with the test.
            let keep = std::env::temp_dir().join("vlad-random-failures");
            let kept = keep.join(format!("random{n}-{seed}.vlad"));
            if std::fs::create_dir_all(&keep).is_ok() && std::fs::copy(&file, &kept).is_ok() {
                failures.push(format!("(kept as {})", kept.display()));
            }
        }
    }
    // Not vacuous: many of the programs differentiate in reverse mode, many use arrays, and
    // some use arrays inside forward derivatives.
    eprintln!(
        "{} random programs: {reverse} use reverse mode, {arrays} arrays, \
         {forward_arrays} arrays inside forward derivatives, {reverse_arrays} inside reverse \
         derivatives, {lists} lists of unknown length \
         ({list_arrays} of arrays), {prints} write-real, {reads} read-real, {booleans} booleans in \
         AD operators",
        files * PER_FILE
    );
    assert!(reads >= files * PER_FILE / 20, "only {reads} read");
    assert!(lists >= files * PER_FILE / 20, "only {lists} build lists");
    assert!(prints >= files * PER_FILE / 20, "only {prints} print");
    assert!(
        booleans >= files * PER_FILE / 20,
        "only {booleans} put booleans through AD operators"
    );
    assert!(
        list_arrays >= files * PER_FILE / 50,
        "only {list_arrays} build lists of arrays"
    );
    assert!(
        forward_arrays >= files * PER_FILE / 20,
        "only {forward_arrays} use arrays inside forward derivatives"
    );
    assert!(
        reverse_arrays >= files * PER_FILE / 20,
        "only {reverse_arrays} use arrays inside reverse derivatives"
    );
    assert!(
        reverse >= files * PER_FILE / 5,
        "only {reverse} use reverse mode"
    );
    assert!(arrays >= files * PER_FILE / 5, "only {arrays} use arrays");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Equal lines of numbers, each real within 1e-10 of the largest finite magnitude on the line
/// (a normwise relative error): an entry that cancels to about zero (a rotation's derivative)
/// is a different rounding when the sensitivities reaching it are summed in another order,
/// and is compared with the vector's scale, not its own. Everything else is equal as text.
fn same_line_normwise(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let split = |s: &str| -> Vec<String> {
        s.split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == '#')
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect()
    };
    let (ta, tb) = (split(a), split(b));
    let scale = tb
        .iter()
        .filter_map(|t| t.parse::<f64>().ok())
        .filter(|x| x.is_finite())
        .fold(0.0f64, |m, x| m.max(x.abs()));
    ta.len() == tb.len()
        && ta.iter().zip(&tb).all(|(x, y)| {
            x == y
                || match (x.parse::<f64>(), y.parse::<f64>()) {
                    (Ok(x), Ok(y)) if x.is_finite() && y.is_finite() => {
                        (x - y).abs() <= 1e-10 * scale
                    }
                    _ => false,
                }
        })
}

/// Numerical array kernels (log-sum-exp, the maximum, products, a cross product, ...) and their
/// derivatives by forward and reverse mode, at random vectors with ties, signed zeros,
/// infinities and entries whose exponentials underflow, of lengths the compiler knows and
/// lengths it does not (`vlad_random::array_kernels`): native code prints what the evaluator
/// prints, expression by expression (to 1e-10 of each vector's largest entry:
/// `same_line_normwise`). The IR's array passes (fusion, fission, one-hot folds and
/// their guards, unrolling, scalar replacement, code motion, values shared by loops) meet here
/// the cases their conditions are about; a join taken for a value fixed in one branch gave
/// log-sum-exp's gradient at four equal entries of unknown length a wrong first entry.
#[test]
fn array_kernels_at_ties_and_edge_values_print_what_the_evaluator_prints() {
    const PER_FILE: usize = 100;
    let files = env_setting("VLAD_KERNEL_FILES", 3) as usize;
    let seed = env_setting("VLAD_KERNEL_SEED", 1) | 1;
    let mut rng = vlad_random::Rng(seed);
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let mut failures = Vec::new();
    for n in 0..files {
        let name = format!("kernels{n}.vlad");
        let file = program(&dir, &name, &vlad_random::array_kernels(&mut rng, PER_FILE));
        let input = vlad_random::KERNEL_LENGTHS;
        let native = vlad_reading(&root, cache.path(), &[], &["run", &file], input);
        let eval = vlad_reading(&root, cache.path(), &[], &["run", "--interp", &file], input);
        let (nout, nerr) = texts(&native);
        let (eout, eerr) = texts(&eval);
        assert!(
            eval.status.success() && eerr.is_empty() && eout.lines().count() == PER_FILE,
            "{name}: every expression gives a value in the evaluator: {eerr}"
        );
        if nerr.contains("not compiled") || !native.status.success() {
            failures.push(format!("{name}: {} {nerr}", native.status));
        }
        let source = std::fs::read_to_string(&file).expect("the program");
        let exprs: Vec<&str> = source.lines().rev().take(PER_FILE).collect();
        for (i, (a, b)) in nout.lines().zip(eout.lines()).enumerate() {
            if !same_line_normwise(a, b) {
                failures.push(format!(
                    "{name}: {}\nnative:    {a}\nevaluator: {b}",
                    exprs[PER_FILE - 1 - i]
                ));
            }
        }
        if nout.lines().count() != PER_FILE {
            failures.push(format!(
                "{name}: native printed {} lines",
                nout.lines().count()
            ));
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// A reader that stops early (`vlad ... | head -1`) ends the output, not in a panic or an error
/// status: for the native program `vlad run` starts, and for `vlad compile --emit` output.
#[test]
fn a_closed_pipe_is_not_an_error() {
    use std::io::{BufRead, BufReader};
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a directory");
    let file = program(
        &dir,
        "many.vlad",
        "(define (loop i) (if (< i 1000000) (let ((x (write-real i))) (loop (+ i 1))) 0))\n(loop 0)\n",
    );
    let file = file.as_str();
    for args in [
        vec!["run", file],
        vec!["compile", "examples/saddle-FF.vlad", "--emit", "c"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_vlad"))
            .args(&args)
            .current_dir(&root)
            .env("VLAD_CACHE_DIR", cache.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run vlad");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(!first.is_empty(), "{args:?}: no output");
        // The reader is dropped here: the pipe is closed.
        let out = child.wait_with_output().expect("wait for vlad");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {}\n{err}", out.status);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// Errors in compiled code read as the evaluator's, also where the operand is a boxed value
/// (the join of a list and a real) and where it is known not to be a real.
#[test]
fn compiled_errors_match_the_evaluator() {
    let root = repo_root();
    let cache = tempfile::tempdir().expect("a cache directory");
    let dir = tempfile::tempdir().expect("a directory");
    for (name, text) in [
        (
            "boxed.vlad",
            "(define (h x) (if (< x 0) (list 1) 2))\n(define (k y) (+ (h y) 1))\n(k 5)\n(k (real -1))\n",
        ),
        ("known.vlad", "(define (f x) (* x #t))\n(f (real 2))\n"),
        ("pattern.vlad", "(define (g (cons a b)) a)\n(g (cons 1 2))\n(g (real 3))\n"),
        // AD operators the analysis knows fail: a closure against another shape, and one tag
        // too many.
        (
            "shape.vlad",
            "(define ((scale k) x) (* k x))\n(define ((shift k) x) (+ k x))\n\
             (write-real 1)\n(bundle (scale 3) (perturb (shift 1)))\n",
        ),
        ("plus.vlad", "(define ((scale k) x) (* k x))\n(plus 2 (scale (real 3)))\n"),
        (
            "deep.vlad",
            "(define (p x n) (if (= n 0) x (p (perturb x) (- n 1))))\n(p 3 15)\n",
        ),
        // Arrays: an index out of range, not an integer, or not a natural; a length or count
        // that is negative, fractional or too large for an index; an error inside the loop
        // after output from the earlier iterations.
        (
            "range.vlad",
            "(define v (build 3 (lambda (i) (* i 1.5))))\n(get v 1)\n(get v (+ 2 (real 1)))\n",
        ),
        ("fraction.vlad", "(get #(1 2 3) (real 0.5))\n"),
        // Every element known (7): the index is still checked.
        (
            "known-element.vlad",
            "(define s (build (real 3) (lambda (i) 7)))\n(get s 1)\n(get s (real 5))\n",
        ),
        ("negative.vlad", "(get (build 2 (lambda (i) i)) (real -1))\n"),
        ("infinite.vlad", "(get (build 2 (lambda (i) i)) (/ 1 (real 0)))\n"),
        ("length.vlad", "(build (real -2) (lambda (i) i))\n"),
        ("half.vlad", "(build (real 2.5) (lambda (i) i))\n"),
        ("count.vlad", "(ifold (lambda (a i) a) 0 (real 1e300))\n"),
        (
            "inside.vlad",
            "(ifold (lambda (a i) (if (< i 2) (write-real (+ a i)) (+ a #t))) 0 (real 5))\n",
        ),
        (
            "element.vlad",
            "(build (real 4) (lambda (i) (if (< i 2) (write-real i) (* i #f))))\n",
        ),
        // A fold over one array's length reading a shorter one (the IR's `simplify` and
        // `version`: the loop whose check fails is the one that keeps it), and its output
        // before the failure.
        (
            "shorter.vlad",
            "(define (dot u v) (ifold (lambda (s i) (+ s (write-real (* (get u i) (get v i))))) 0 (array-length u)))\n\
             (dot (build (real 3) (lambda (i) i)) (build (real 3) (lambda (i) 2)))\n\
             (dot (build (real 4) (lambda (i) i)) (build (real 2) (lambda (i) 2)))\n",
        ),
        // An index computed from a counter (`i + 1`, `i - 1`): checked as an integer, or, the
        // loop unrolled, as a constant; a negative one reported as the evaluator does.
        (
            "offset.vlad",
            "(define v (build (real 3) (lambda (i) i)))\n\
             (ifold (lambda (s i) (+ s (get v (+ i 1)))) 0 2)\n\
             (ifold (lambda (s i) (+ s (get v (- i 1)))) 0 (real 3))\n",
        ),
        // A build reading two arrays at its counter, over a count longer than one of them
        // (`simplify::range_checks`: the checks leave the loop as one test): the step of the
        // shorter length fails, by the first check in the step's order against that length,
        // after the output of a build that did not fail.
        (
            "counter-second.vlad",
            "(define (f n u w) (build n (lambda (i) (+ (get u i) (* 2 (get w i))))))\n\
             (define u (build (real 5) (lambda (i) i)))\n(define w (build (real 3) (lambda (i) i)))\n\
             (f (real 3) u w)\n(f (real 4) u w)\n",
        ),
        (
            "counter-first.vlad",
            "(define (f n u w) (build n (lambda (i) (+ (get u i) (* 2 (get w i))))))\n\
             (define u (build (real 2) (lambda (i) i)))\n(define w (build (real 3) (lambda (i) i)))\n\
             (f (real 6) u w)\n",
        ),
        (
            "counter-equal.vlad",
            "(define (f n u w) (ifold (lambda (s i) (+ s (* (get u i) (get w i)))) 0 n))\n\
             (define u (build (real 2) (lambda (i) i)))\n(define w (build (real 2) (lambda (i) 1)))\n\
             (f (real 2) u w)\n(f (real 3) w u)\n",
        ),
        // A read at a constant index that the loop does not change: checked once before the
        // loop (`simplify`'s code motion), at the read's position, unless the body acts first.
        (
            "invariant-index.vlad",
            "(define v (build (real 3) (lambda (i) i)))\n(write-real 1)\n\
             (build (real 400) (lambda (i) (+ i (get v 5))))\n",
        ),
        (
            "invariant-after-output.vlad",
            "(define v (build (real 3) (lambda (i) i)))\n\
             (build (real 400) (lambda (i) (+ (write-real i) (get v 5))))\n",
        ),
        (
            "offset-small.vlad",
            "(define v (build 3 (lambda (i) i)))\n(ifold (lambda (s i) (+ s (get v (- i 1)))) 0 3)\n",
        ),
        // Forward arrays: a forward `build` whose length is negative or too large (the
        // message describes the forward length whole), and `bundle` and `plus` of arrays of
        // different lengths.
        (
            "forward-length.vlad",
            "(define (f x) (build x (lambda (i) (* i x))))\n\
             ((bundle f (perturb (zero f))) (bundle (real -1) (perturb 1)))\n",
        ),
        (
            "forward-large.vlad",
            "(define (f x) (build x (lambda (i) (* i x))))\n\
             ((bundle f (perturb (zero f))) (bundle (real 1e300) (perturb 0)))\n",
        ),
        (
            "bundle-lengths.vlad",
            "(bundle (build (real 2) (lambda (i) i)) (perturb (build (real 3) (lambda (i) i))))\n",
        ),
        // Boxed arrays (in a list whose length is known only at run time): an index out of
        // range, `array-length` and `get` of a boxed value that is not an array, `bundle` of
        // boxed arrays of different lengths.
        (
            "boxed-range.vlad",
            "(define (pts k) (if (< k 1) '() (cons (build 3 (lambda (j) (+ k j))) (pts (- k 1)))))\n\
             (let (((cons p ps) (pts (real 4)))) (get p 1))\n\
             (let (((cons p ps) (pts (real 4)))) (get p 10))\n",
        ),
        (
            "boxed-length.vlad",
            "(define (xs k) (if (< k 1) '() (cons k (xs (- k 1)))))\n\
             (let (((cons x rest) (xs (real 4)))) (array-length x))\n",
        ),
        (
            "boxed-get.vlad",
            "(define (xs k) (if (< k 1) '() (cons k (xs (- k 1)))))\n\
             (let (((cons x rest) (xs (real 4)))) (get x 0))\n",
        ),
        (
            "boxed-bundle.vlad",
            "(define (pts k n) (if (< k 1) '() (cons (build n (lambda (j) (+ k j))) (pts (- k 1) n))))\n\
             (bundle (pts (real 2) 3) (perturb (pts (real 2) 2)))\n",
        ),
        (
            "plus-lengths.vlad",
            "(plus (sensitize (build (real 2) (lambda (i) i)))\n\
                   (sensitize (build (real 3) (lambda (i) i))))\n",
        ),
        // Boxed indices (from a list whose length is known only at run time): a real reads
        // its element, a pair is the evaluator's error; with a boxed non-array too, the array
        // is reported first.
        (
            "boxed-index.vlad",
            "(define (xs k) (if (< k 1) '() (cons (if (< k 2) (cons k k) k) (xs (- k 1)))))\n\
             (let (((cons x rest) (xs (real 2)))) (get (build 3 (lambda (i) (* 10 i))) x))\n\
             (let (((cons x (cons y rest)) (xs (real 2)))) (get (build 3 (lambda (i) i)) y))\n",
        ),
        (
            "boxed-both.vlad",
            "(define (xs k) (if (< k 1) '() (cons (if (< k 2) (cons k k) k) (xs (- k 1)))))\n\
             (let (((cons x (cons y rest)) (xs (real 2)))) (get x y))\n",
        ),
        // Reverse-mode arrays: the backpropagator of a `build` given a sensitivity that is
        // not an array; a lazy one-hot sensitivity added to an array of another length (either
        // operand first), and to a value that is not an array.
        (
            "reverse-build.vlad",
            "(let (((cons y bp) ((*j (lambda (v) (build 2 (lambda (i) (* 2 (get v i))))))\n\
                                 (*j (build (real 2) (lambda (i) i))))))\n\
               (bp (sensitize 1)))\n",
        ),
        (
            "onehot-lengths.vlad",
            "(let (((cons y bp) ((*j (lambda (v) (get v 0))) (*j (build (real 2) (lambda (i) i))))))\n\
               (plus (bp (sensitize 1)) (sensitize (cons '() (build (real 3) (lambda (i) i))))))\n",
        ),
        (
            "onehot-lengths-array-first.vlad",
            "(let (((cons y bp) ((*j (lambda (v) (get v 0))) (*j (build (real 2) (lambda (i) i))))))\n\
               (plus (sensitize (cons '() (build (real 3) (lambda (i) i)))) (bp (sensitize 1))))\n",
        ),
        (
            "onehot-shape.vlad",
            "(let (((cons y bp) ((*j (lambda (v) (get v 0))) (*j (build (real 2) (lambda (i) i))))))\n\
               (plus (bp (sensitize 1)) (sensitize (cons '() 5))))\n",
        ),
        // `checkpoint` of something that is not a procedure and its argument, or of a
        // procedure and an argument that is not a procedure.
        (
            "checkpoint-arity.vlad",
            "(define (cube x) (* x (* x x)))\n(checkpoint cube (real 2))\n(checkpoint cube)\n",
        ),
        ("checkpoint-real.vlad", "(checkpoint (real 3))\n"),
        (
            "checkpoint-not-procedure.vlad",
            "(checkpoint (real 3) (real 4))\n",
        ),
        // `plus` and `bundle` of booleans of different values, known only at run time (issue
        // 23: native code printed #t), inside lists and sensitivities too.
        ("bool-plus.vlad", "(plus (< (real 1) 2) (< 2 (real 1)))\n"),
        ("bool-bundle.vlad", "(bundle (< (real 1) 2) (perturb (< 2 (real 1))))\n"),
        (
            "bool-list.vlad",
            "(plus (list (< (real 1) 2) 3) (list (< 2 (real 1)) 4))\n",
        ),
        (
            "bool-sensitivity.vlad",
            "(plus (sensitize (< (real 1) 2)) (sensitize (< 2 (real 1))))\n",
        ),
        // Counts and lengths the analysis boxed (a real or a pair, chosen at run time): a real
        // one runs its loop; a pair, a fraction or a count too large is the evaluator's error.
        (
            "boxed-count.vlad",
            "(define (pick k) (if (< k 1) (cons k k) k))\n\
             (ifold (lambda (a i) (+ a i)) 0 (pick (real 3)))\n\
             (build (pick (real 2)) (lambda (i) (* i i)))\n\
             (ifold (lambda (a i) a) 0 (pick (real 0)))\n",
        ),
        (
            "boxed-count-fraction.vlad",
            "(define (pick k) (if (< k 1) (cons k k) k))\n\
             (build (pick (real 2.5)) (lambda (i) i))\n",
        ),
        (
            "boxed-count-large.vlad",
            "(define (pick k) (if (< k 1) (cons k k) k))\n\
             (ifold (lambda (a i) a) 0 (pick (real 1e300)))\n",
        ),
        // ... and of primitives and known booleans (issue 23: internal errors, no position).
        ("prim-plus.vlad", "(plus sin cos)\n"),
        ("prim-bundle.vlad", "(bundle sin (perturb cos))\n"),
        ("prim-list.vlad", "(plus (list 1 sin) (list 2 cos))\n"),
        ("known-bundle.vlad", "(bundle #t (perturb #f))\n"),
        (
            "known-argument.vlad",
            "(define (f b) (bundle b (perturb #f)))\n(f #t)\n",
        ),
    ] {
        let file = program(&dir, name, text);
        let file = file.as_str();
        let c = vlad(&root, cache.path(), &["compile", file, "--emit", "c"]);
        assert!(c.status.success(), "{name}: {}", String::from_utf8_lossy(&c.stderr));
        let native = vlad(&root, cache.path(), &["run", file]);
        let eval = vlad(&root, cache.path(), &["run", "--interp", file]);
        assert_eq!(native.status.code(), Some(1), "{name}");
        assert_eq!(native.stdout, eval.stdout, "{name}");
        assert_eq!(
            String::from_utf8_lossy(&native.stderr),
            String::from_utf8_lossy(&eval.stderr),
            "{name}"
        );
    }
}
