//! Conformance: `vlad check` must pass on every `*.vlad` file under `tests/` (recursively, except
//! `tests/fixtures/`, which holds inputs for other tests) and `examples/`.
//!
//! One test per directory; each checks every file it finds and fails with the list of all
//! failing files and what `vlad check` reported for them, so one run shows every failure.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// Every `*.vlad` file under `dir`, sorted, skipping directories named in `exclude`.
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
            } else if path.extension().is_some_and(|x| x == "vlad") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Runs `vlad check` on one file; `Some(report)` if it failed.
fn check_one(root: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(root).unwrap_or(file);
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_vlad"))
        .arg("check")
        .arg(rel)
        .current_dir(root)
        .output()
        .expect("run vlad");
    let secs = start.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stdout.lines().last().unwrap_or("no summary");
    if !out.status.success() || stderr.contains("panicked") {
        Some(format!(
            "--- {} ({}; {summary}; {secs:.1} s)\n{stderr}",
            rel.display(),
            out.status
        ))
    } else {
        eprintln!("ok {} ({summary}; {secs:.1} s)", rel.display());
        None
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
    // Files are independent: check them on all cores, report in file order.
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Option<String>)>> = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers.min(files.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(file) = files.get(i) else { break };
                let r = check_one(&root, file);
                results.lock().unwrap().push((i, r));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|r| r.0);
    let failures: Vec<String> = results.into_iter().filter_map(|r| r.1).collect();
    assert!(
        failures.is_empty(),
        "{} of {} files under {sub}/ failed `vlad check`:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn tests_directory() {
    check_all("tests", &["tests/fixtures"]);
}

#[test]
fn examples_directory() {
    check_all("examples", &[]);
}
