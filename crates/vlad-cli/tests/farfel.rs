//! Farfel (paper 000) through the `vlad` command: Fortran files are recognised by their
//! extension; Listing 1 runs unchanged in both engines and prints what the VLAD version
//! prints; errors are positioned; `--emit core` shows the lowering.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// `vlad ARGS` with `input` on standard input, in a cache of its own. Compiling costs what it
/// costs (as in tests/native.rs): these tests check that Listing 1 compiles and runs
/// natively, and `vlad run`'s default budget (docs/backend-c.md, item 7) is a heuristic whose
/// prediction for Listing 1 is close to its limit.
fn vlad(cache: &Path, args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vlad"))
        .args(args)
        .current_dir(repo_root())
        .env("VLAD_CACHE_DIR", cache)
        .env("VLAD_COMPILE_BUDGET_SECS", "1000000")
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

fn numbers(text: &str) -> Vec<f64> {
    text.split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|t| t.parse::<f64>().ok())
        .collect()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Listing 1 at N = 2 (the smallest N at which its last BSTAR, computed at the last Newton
/// iterate but one, is the VLAD version's b*), natively and in the evaluator, against the
/// VLAD version in the evaluator; the native run must really be native.
#[test]
fn listing_1_runs_natively_and_prints_what_the_vlad_version_prints() {
    let cache = tempfile::tempdir().expect("a cache directory");
    let input = "1\n1\n2\n";
    let native = vlad(
        cache.path(),
        &["run", "examples/farfel/equilibrium.f"],
        input,
    );
    let interp = vlad(
        cache.path(),
        &["run", "--interp", "examples/farfel/equilibrium.f"],
        input,
    );
    let reference = vlad(
        cache.path(),
        &["run", "--interp", "examples/farfel/equilibrium.vlad"],
        input,
    );
    let (nout, nerr) = text(&native);
    let (iout, ierr) = text(&interp);
    let (rout, rerr) = text(&reference);
    assert!(
        native.status.success() && nerr.is_empty(),
        "native: {nout}{nerr}"
    );
    assert!(
        interp.status.success() && ierr.is_empty(),
        "evaluator: {iout}{ierr}"
    );
    assert!(reference.status.success(), "VLAD version: {rout}{rerr}");
    // A native run leaves its record in the source cache; a fallback to the evaluator none.
    let records = std::fs::read_dir(cache.path())
        .expect("the cache")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "src"))
        })
        .count();
    assert_eq!(records, 1, "Listing 1 did not compile to native code");
    let want = numbers(&rout);
    assert_eq!(want.len(), 2, "{rout}");
    for (engine, out) in [("native", &nout), ("evaluator", &iout)] {
        let got = numbers(out);
        assert_eq!(got.len(), 2, "{engine}: {out}");
        for (a, b) in got.iter().zip(&want) {
            assert!(
                (a - b).abs() <= 1e-12 * b.abs(),
                "{engine}: Listing 1 printed {got:?}, the VLAD version {want:?}"
            );
        }
    }
}

#[test]
fn fortran_errors_are_positioned_in_both_commands() {
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("bad.F77");
    std::fs::write(
        &file,
        "      PROGRAM P\n      X = 1\n      ADF(X)\n      Y = X*X\n      END\n",
    )
    .expect("write");
    let path = file.to_str().expect("a UTF-8 path");
    for args in [
        vec!["run", path],
        vec!["run", "--interp", path],
        vec!["compile", path, "--emit", "core"],
        vec!["compile", path, "--emit", "c"],
    ] {
        let o = vlad(dir.path(), &args, "");
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {out}{err}");
        assert!(
            err.starts_with(&format!(
                "{path}:3:7: error: this ADF block is not closed by END ADF"
            )),
            "{args:?}: {err}"
        );
        assert!(err.contains("3 |       ADF(X)\n"), "{args:?}: {err}");
    }
}

#[test]
fn emit_core_shows_the_lowering() {
    let dir = tempfile::tempdir().expect("a directory");
    let o = vlad(
        dir.path(),
        &["compile", "examples/farfel/equilibrium.f", "--emit", "core"],
        "",
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    // The subprograms by name, an ADF block through j* (bundle/perturb/zero of the block).
    for needle in [
        "(EQLBRM_",
        "(DERIV2_",
        "EQLBRM.F.G.H_",
        "(bundle (cons adf-block_",
        "(perturb (zero adf-block_",
        "(read-real '())",
    ] {
        assert!(out.contains(needle), "no `{needle}` in\n{out}");
    }
    assert!(out.lines().all(|l| l.len() <= 110), "lines are broken");
}
