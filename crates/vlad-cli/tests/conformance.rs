//! Conformance: `vlad check` must pass on every `*.vlad` file under `tests/` (recursively, except
//! `tests/fixtures/`, which holds inputs for other tests) and `examples/`.
//!
//! One test per directory; each checks every file it finds and fails with the list of all
//! failing files and what `vlad check` reported for them, so one run shows every failure. Files
//! run in parallel; one that runs past `VLAD_CHECK_TIMEOUT_SECS` (default 600) is killed and
//! counts as failed.

mod common;
use common::CHECKED_WITH_NATIVE;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// Every `*.vlad` file under `dir`, sorted, skipping the directories and files named in
/// `exclude`.
fn vlad_files(dir: &Path, exclude: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        if exclude.iter().any(|e| e == &d) {
            continue;
        }
        let entries =
            std::fs::read_dir(&d).unwrap_or_else(|e| panic!("cannot list {}: {e}", d.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|x| x == "vlad") && !exclude.contains(&path) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// How long one file may take before it counts as hung: `VLAD_CHECK_TIMEOUT_SECS`, or 600 s.
fn deadline() -> Duration {
    let secs = std::env::var("VLAD_CHECK_TIMEOUT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    Duration::from_secs(secs)
}

/// Runs `vlad check` (with `extra` arguments) on one file; `Some(report)` if it failed or ran
/// past the deadline.
fn check_one(root: &Path, file: &Path, extra: &[&str]) -> Option<String> {
    let rel = file.strip_prefix(root).unwrap_or(file);
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_vlad"))
        .arg("check")
        .args(extra)
        .arg(rel)
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vlad");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let limit = deadline();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for vlad") {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let secs = start.elapsed().as_secs_f64();
    let stdout = out.join().expect("stdout reader");
    let stderr = err.join().expect("stderr reader");
    let summary = stdout.lines().last().unwrap_or("no summary");
    match status {
        None => Some(format!(
            "--- {} (killed after {secs:.0} s: did not finish within {limit:?}; \
             set VLAD_CHECK_TIMEOUT_SECS to allow more)\n{stderr}",
            rel.display()
        )),
        Some(st) if !st.success() || stderr.contains("panicked") => Some(format!(
            "--- {} ({st}; {summary}; {secs:.1} s)\n{stderr}",
            rel.display()
        )),
        Some(_) => {
            eprintln!("ok {} ({summary}; {secs:.1} s)", rel.display());
            None
        }
    }
}

/// Runs `vlad check` on every file under `root/sub` and fails listing all that did not pass.
fn check_all(sub: &str, exclude: &[&str]) {
    let root = repo_root();
    let dir = root.join(sub);
    assert!(dir.is_dir(), "{} is not a directory", dir.display());
    let exclude: Vec<PathBuf> = exclude.iter().map(|e| root.join(e)).collect();
    let files = vlad_files(&dir, &exclude);
    assert!(!files.is_empty(), "no .vlad files under {}", dir.display());
    check_files(&root, &files, &[], sub);
}

/// Checks `files` in parallel and fails listing all that did not pass.
fn check_files(root: &Path, files: &[PathBuf], extra: &[&str], what: &str) {
    // Files are independent: check them on all cores, report in file order.
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Option<String>)>> = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers.min(files.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(file) = files.get(i) else { break };
                let r = check_one(root, file, extra);
                results.lock().unwrap().push((i, r));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|r| r.0);
    let failures: Vec<String> = results.into_iter().filter_map(|r| r.1).collect();
    assert!(
        failures.is_empty(),
        "{} of {} files ({what}) failed `vlad check`:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn tests_directory() {
    check_all("tests", &["tests/fixtures"]);
}

/// Every example but those tests/native.rs checks (`common::CHECKED_WITH_NATIVE`).
#[test]
fn examples_directory() {
    check_all("examples", CHECKED_WITH_NATIVE);
}

/// The specialised program (flow analysis, specialisation, and its executor) must print what
/// the evaluator prints: the same assertions, whose expected values the evaluator meets (the
/// tests above), must hold through `vlad check --engine ir`. Every file of tests/ and
/// examples/ but these, which pass too but take minutes there:
/// - the four particle and four saddle programs, in the executor: tests/native.rs compiles the
///   same specialised programs and compares what they print with the evaluator (the particle
///   programs at a coarser time step, and at theirs with their expectations), and
///   tests/ad/forward.vlad and reverse.vlad take lib/ad.vlad's optimisers through the executor
///   here, nested in forward mode;
/// - tests/array/property.vlad, in the analysis: the random programs of
///   crates/vlad/tests/differential.rs run through the specialised program instead.
#[test]
fn specialised_program_agrees_with_the_evaluator() {
    let root = repo_root();
    let mut files = vlad_files(&root.join("tests/conformance"), &[]);
    for f in SPECIALISED {
        files.push(root.join(f));
    }
    check_files(
        &root,
        &files,
        &["--engine", "ir"],
        "through the specialised program",
    );
}

/// Files outside tests/conformance that run through the specialised program.
const SPECIALISED: &[&str] = &[
    "tests/ad/checkpoint.vlad",
    "tests/ad/forward.vlad",
    "tests/ad/property.vlad",
    "tests/ad/reverse.vlad",
    "tests/ad/reverse-property.vlad",
    "tests/array/arrays.vlad",
    "tests/array/compiled.vlad",
    "tests/array/forward.vlad",
    "tests/array/reverse.vlad",
    "tests/array/reverse-tape.vlad",
    "tests/array/reverse-select.vlad",
    "examples/array-calculus.vlad",
    "examples/bundle-adjustment.vlad",
    "examples/even-odd.vlad",
    "examples/factorial.vlad",
    "examples/higher-order.vlad",
    "examples/lists.vlad",
    "examples/log-sum-exp.vlad",
    "examples/nnmf.vlad",
    "examples/secant.vlad",
    "examples/streams.vlad",
    "examples/tour.vlad",
];
