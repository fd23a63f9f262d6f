//! The programs of the array-gradient benchmark (benches/array-ad/, issues 21 and 22) at small
//! sizes: each C baseline's hand-written derivatives against central differences of its own
//! primal (its mode 9), and the evaluator's output (`vlad run --interp`) and native code's
//! against the C baseline's, in every mode. The benchmark sizes are checked by
//! benches/array-ad/validate.sh and run.sh, which take minutes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn bench_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/array-ad")
}

/// Runs `cmd` with `input` on standard input; its standard output, which must be one list of
/// reals, `(a b c)`, as numbers. Panics (naming `what`) if it fails.
fn numbers(what: &str, mut cmd: Command, input: &str) -> Vec<f64> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{input}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what} <<< {input}: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout.trim();
    assert!(
        text.starts_with('(') && text.ends_with(')') && !text.contains('\n'),
        "{what} <<< {input}: expected one list of reals, got {text:?}"
    );
    text[1..text.len() - 1]
        .split_whitespace()
        .map(|w| {
            w.parse::<f64>()
                .unwrap_or_else(|_| panic!("{what} <<< {input}: {w:?} is not a real"))
        })
        .collect()
}

/// Compiles `c/NAME.c` into `dir`.
fn build_c(dir: &Path, name: &str) -> PathBuf {
    let exe = dir.join(format!("{name}.c.exe"));
    let status = Command::new("cc")
        .args(["-O1", "-ffp-contract=off", "-o"])
        .arg(&exe)
        .arg(bench_dir().join(format!("c/{name}.c")))
        .arg("-lm")
        .status()
        .expect("run cc");
    assert!(status.success(), "cc c/{name}.c: {status}");
    exe
}

/// The finite-difference checks (`sizes 9 0`) of the C baseline `name`, then the evaluator and
/// the program compiled to native code against the C baseline at `sizes` in each of `modes`,
/// two repetitions each.
fn check(name: &str, fd_sizes: &[&str], sizes: &str, modes: &[u32]) {
    let dir = tempfile::tempdir().expect("a directory");
    let exe = build_c(dir.path(), name);
    for s in fd_sizes {
        let out = Command::new(&exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                c.stdin
                    .take()
                    .unwrap()
                    .write_all(format!("{s} 9 0\n").as_bytes())?;
                c.wait_with_output()
            })
            .expect("run the C baseline");
        assert!(
            out.status.success(),
            "c/{name}.c's derivatives against finite differences at {s}:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let file = bench_dir().join(format!("{name}.vlad"));
    // The program compiled to native code too (C at -O1: what it prints, not how fast).
    let native = dir.path().join(format!("{name}.vlad.exe"));
    let compiled = Command::new(env!("CARGO_BIN_EXE_vlad"))
        .arg("compile")
        .arg(&file)
        .arg("-o")
        .arg(&native)
        .env("VLAD_CACHE_DIR", dir.path().join("cache"))
        .env("VLAD_CFLAGS", "-O1")
        .output()
        .expect("run vlad compile");
    assert!(
        compiled.status.success(),
        "vlad compile {name}.vlad: {}",
        String::from_utf8_lossy(&compiled.stderr)
    );
    for mode in modes {
        let input = format!("{sizes} {mode} 2");
        let want = numbers(&format!("c/{name}.c"), Command::new(&exe), &input);
        let mut eval = Command::new(env!("CARGO_BIN_EXE_vlad"));
        eval.arg("run").arg("--interp").arg(&file);
        let evaluated = numbers(&format!("{name}.vlad (evaluator)"), eval, &input);
        // Collecting at every loop's back edge (VLAD_GC_MIN_BYTES=0), as at large sizes.
        let mut run = Command::new(&native);
        run.env("VLAD_GC_MIN_BYTES", "0");
        let compiled = numbers(&format!("{name}.vlad (native)"), run, &input);
        for (engine, got) in [("evaluator", evaluated), ("native code", compiled)] {
            assert_eq!(
                got.len(),
                want.len(),
                "{name} <<< {input}: the {engine} gives {got:?} against C's {want:?}"
            );
            for (a, b) in got.iter().zip(&want) {
                assert!(
                    (a - b).abs() <= 1e-8 * (a.abs() + b.abs()).max(1.0),
                    "{name} <<< {input}: the {engine} gives {got:?} against C's {want:?}"
                );
            }
        }
    }
}

#[test]
fn lse() {
    check("lse", &["50"], "20", &[1, 2, 3, 4, 5]);
}

#[test]
fn micro() {
    for op in ["1", "2", "3", "4"] {
        check("micro", &["1 30"], &format!("{op} 7"), &[1, 2, 3, 4, 5]);
    }
}

#[test]
fn llsq() {
    check("llsq", &["30 5"], "12 4", &[1, 2, 3]);
}

#[test]
fn logreg() {
    check("logreg", &["50 4"], "15 3", &[1, 2, 3, 4, 5]);
}

#[test]
fn kmeans() {
    check("kmeans", &["40 5 3"], "12 3 2", &[1, 2, 3, 4]);
}

#[test]
fn gmm() {
    check("gmm", &["3 4 20", "5 3 10"], "3 4 10", &[1, 2]);
}

#[test]
fn ba() {
    check("ba", &["3 5"], "2 3", &[1, 2, 3]);
}

#[test]
fn nnmf() {
    for form in ["1", "2"] {
        check(
            "nnmf",
            &["1 30 40", "1 7 5"],
            &format!("{form} 4 3"),
            &[1, 2, 3],
        );
    }
}
