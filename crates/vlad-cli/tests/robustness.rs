//! Issue 23: what a new user meets off the beaten path, in both engines (`vlad run`, native
//! code, against `vlad run --interp`, the evaluator): `read-real` on any input, programs on
//! standard input, byte order marks, old Mac line ends and datum comments, `include` inside
//! `multiform`, output that cannot be written, and memory that runs out.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `vlad ARGS` in `dir`, the cache in `cache`, `input` on standard input (written on a thread
/// of its own: a program that stops reading must not block the test).
fn vlad_in(dir: &Path, cache: &Path, args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vlad"))
        .args(args)
        .current_dir(dir)
        .env("VLAD_CACHE_DIR", cache)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vlad");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait for vlad");
    let _ = feeder.join();
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// What a run printed, its errors and its status, for comparing engines exactly.
fn outcome(o: &Output) -> (String, String, Option<i32>) {
    (text(&o.stdout), text(&o.stderr), o.status.code())
}

/// A scratch directory with a cache directory inside.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            dir: tempfile::tempdir().expect("a scratch directory"),
        }
    }

    fn file(&self, name: &str, text: &[u8]) -> String {
        std::fs::write(self.dir.path().join(name), text).expect("write a file");
        name.to_string()
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    fn vlad(&self, args: &[&str], input: &[u8]) -> Output {
        vlad_in(self.path(), &self.cache(), args, input)
    }

    /// `vlad run FILE` and `vlad run --interp FILE` on the same input: what each gave,
    /// asserting that the native run was compiled (no note about the evaluator).
    fn both(&self, file: &str, input: &[u8]) -> [(String, String, Option<i32>); 2] {
        let native = self.vlad(&["run", file], input);
        let eval = self.vlad(&["run", "--interp", file], input);
        let n = outcome(&native);
        assert!(
            !n.1.contains("not compiled to native code"),
            "{file}: {}",
            n.1
        );
        [n, outcome(&eval)]
    }
}

/// The inputs on which `read-real` differed between the engines (issue 23), and their
/// neighbours: tokens longer than any buffer, long runs of zeros, NUL bytes, the spellings
/// that C's `strtod` takes and the reader does not (and the other way round), every radix,
/// every kind of whitespace, and the ends of the range of doubles.
fn read_real_inputs() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = [
        "1 2 3",
        "-0 +0 0.0 -0.0",
        "+5 .5 5. -.5e-3 1E3 2.5e+2 7e0",
        "1e400 -1e400 1e-400 4.9e-324 2.4703282292062328e-324 2.2250738585072011e-308",
        "0.1 0.30000000000000004 9007199254740993 123456789012345678901234567890",
        "nan",
        "inf",
        "-inf",
        "infinity",
        "NaN",
        "0x10",
        "0X1p3",
        "1e",
        "e3",
        ".",
        "+",
        "-",
        "1.2.3",
        "1,5",
        "1_000",
        "+nan.0 -nan.0 +inf.0 -inf.0 +INF.0 -NaN.0",
        "#x1F #X1f #b-101 #o17 #d10 #d-2.5 #x+ff #d+inf.0",
        "#x",
        "#b102",
        "#x-",
        "#x1.5",
        "\t1\n2\r3\u{b}4\u{c}5\r\n6   ",
        "1\u{a0}2",
        "\u{ff11}",
        "",
        "  \n\t ",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    v.push(b"1\x002".to_vec());
    v.push(b"\x00".to_vec());
    v.push(b"7 \xff\xfe 8".to_vec());
    v.push("1".repeat(300).into_bytes());
    v.push(format!("{}.5", "9".repeat(400)).into_bytes());
    v.push(format!("0.{}1", "0".repeat(300)).into_bytes());
    v.push(format!("0.{}1", "0".repeat(400)).into_bytes());
    v.push(format!("{}e-300", "1".repeat(300)).into_bytes());
    v.push(format!("#x{}", "f".repeat(300)).into_bytes());
    v.push(format!("#b{}", "1".repeat(1100)).into_bytes());
    v.push("x".repeat(100).into_bytes());
    v.push(format!("2 {}", "3".repeat(5000)).into_bytes());
    v
}

/// `read-real` reads the same numbers, and rejects the same tokens with the same message, in
/// compiled code as in the evaluator: one numeral syntax, the reader's (docs/language.md).
/// Before, compiled code split a 300-digit token in two, read 300 zeros and a 1 as 0,
/// accepted NUL bytes, `nan`, `inf` and `0x10`, and rejected `+nan.0` and `#x1F`.
#[test]
fn read_real_reads_the_same_numbers_in_both_engines() {
    let s = Scratch::new();
    let file = s.file(
        "echo.vlad",
        b"(define (loop n) (let ((x (write-real (read-real)))) (loop (+ n 1))))\n(loop 0)\n",
    );
    let mut read = 0;
    for input in read_real_inputs() {
        let [native, eval] = s.both(&file, &input);
        assert_eq!(
            native,
            eval,
            "input {:?}: native code and the evaluator differ",
            text(&input)
        );
        // Every run ends at the end of the input or at a token that is not a numeral.
        assert_eq!(eval.2, Some(1), "{eval:?}");
        assert!(eval.1.contains("read-real: "), "{eval:?}");
        read += eval.0.lines().count();
    }
    assert!(read >= 50, "only {read} numbers read");
    // What the evaluator reads, spelled out: the cases the engines used to disagree on.
    let reads = |input: &[u8]| outcome(&s.vlad(&["run", "--interp", &file], input));
    assert_eq!(
        reads("1".repeat(300).as_bytes()).0,
        "1.1111111111111112e299\n"
    );
    assert_eq!(
        reads(format!("0.{}1", "0".repeat(300)).as_bytes()).0,
        "1e-301\n"
    );
    assert_eq!(reads(b"+nan.0 #x1F").0, "+nan.0\n31\n");
    for bad in [&b"nan"[..], b"inf", b"0x10", b"1\x002"] {
        let (out, err, _) = reads(bad);
        assert_eq!(out, "", "{bad:?}");
        assert!(err.contains("is not a number"), "{bad:?}: {err}");
    }
    assert!(reads(b"1\x002")
        .1
        .contains("read-real: `1\\x002` is not a number"));
}

/// `echo '(+ 1 2)' | vlad run /dev/stdin` printed nothing: `vlad run` read the file once for
/// its cache key and again to compile it, and the second read found standard input empty.
/// `-` names standard input too; both work in every command and engine.
#[test]
fn programs_can_come_from_standard_input() {
    let s = Scratch::new();
    for file in ["-", "/dev/stdin"] {
        for args in [
            vec!["run", file],
            vec!["run", "--interp", file],
            vec!["check", file],
        ] {
            let o = s.vlad(&args, b"(+ 1 2) ===> 3\n");
            let expected = if args[0] == "check" {
                "1 passed, 0 failed\n"
            } else {
                "3\n"
            };
            assert_eq!(
                outcome(&o),
                (expected.into(), String::new(), Some(0)),
                "{args:?}"
            );
        }
        let o = s.vlad(&["compile", file, "--emit", "c"], b"(+ 1 2)\n");
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert!(text(&o.stdout).contains("int main"), "compile {file}");
    }
    // Errors name standard input.
    for engine in [&["run", "-"][..], &["run", "--interp", "-"][..]] {
        let o = s.vlad(engine, b"(+ 1 2)\n(car 1)\n");
        assert_eq!(o.status.code(), Some(1));
        assert_eq!(text(&o.stdout), "3\n");
        assert!(
            text(&o.stderr).starts_with("<stdin>:2:2: error: unbound variable `car`"),
            "{engine:?}: {}",
            text(&o.stderr)
        );
    }
}

/// A UTF-8 byte order mark was read as a variable, and a file with CR-only line ends was one
/// line (its comments ran to the end of the file, its errors were all on line 1). Positions
/// are the same in both engines, and the excerpt shows the right line.
#[test]
fn byte_order_marks_and_every_line_end() {
    let s = Scratch::new();
    let file = s.file(
        "mac.vlad",
        b"\xef\xbb\xbf; a comment\r(define x 2) ; another\r(* x 3)\r\r  (car x)\r",
    );
    let [native, eval] = s.both(&file, b"");
    assert_eq!(native, eval);
    assert_eq!(eval.0, "6\n");
    assert_eq!(eval.2, Some(1));
    assert!(
        eval.1.starts_with(
            "mac.vlad:5:4: error: unbound variable `car`\n  |\n5 |   (car x)\n  |    ^^^\n"
        ),
        "{}",
        eval.1
    );
    let windows = s.file("dos.vlad", b"\xef\xbb\xbf(+ 1 2)\r\n(car 1)\r\n");
    let [native, eval] = s.both(&windows, b"");
    assert_eq!(native, eval);
    assert!(eval.1.starts_with("dos.vlad:2:2: error:"), "{}", eval.1);
}

/// `#;` comments out the next datum, as in R7RS and the reference implementation's tests.
#[test]
fn datum_comments() {
    let s = Scratch::new();
    let file = s.file(
        "comments.vlad",
        b"#;(this is not evaluated)\n(+ 1 #;2 3)\n#; #; 4 5\n(list 6 #;(7 8) 9)\n",
    );
    let [native, eval] = s.both(&file, b"");
    assert_eq!(native, eval);
    assert_eq!(eval, ("4\n(6 9)\n".into(), String::new(), Some(0)));
    let o = s.vlad(
        &["run", "--interp", &s.file("bad.vlad", b"(+ 1 #;)\n")],
        b"",
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).starts_with("bad.vlad:1:6: error: `#;` without a datum"),
        "{}",
        text(&o.stderr)
    );
}

/// `(multiform (include "math") expr)`, as the reference implementation's tests write it:
/// the file's definitions belong to that one test. It was rejected ("only definitions may
/// precede the last form").
#[test]
fn include_inside_multiform() {
    let s = Scratch::new();
    s.file(
        "math.vlad",
        b"(define (square x) (* x x))\n(define two 2)\n",
    );
    s.file("script.vlad", b"(define (f x) x)\n(f 1)\n");
    let file = s.file(
        "tests.vlad",
        b"(multiform (include \"math\") (square 3)) ===> 9\n\
          (multiform (include \"math\") (define (cube x) (* x (square x))) (cube two)) ===> 8\n\
          (square 3) ===> (error \"unbound variable\")\n",
    );
    let o = s.vlad(&["check", &file], b"");
    assert_eq!(
        outcome(&o),
        ("3 passed, 0 failed\n".into(), String::new(), Some(0))
    );
    let run = s.file("run.vlad", b"(multiform (include \"math\") (square two))\n");
    let [native, eval] = s.both(&run, b"");
    assert_eq!(native, eval);
    assert_eq!(eval.0, "4\n");
    // A file with expressions cannot be spliced among definitions.
    let bad = s.file("bad.vlad", b"(multiform (include \"script\") (f 2))\n");
    let o = s.vlad(&["run", "--interp", &bad], b"");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).starts_with("script.vlad:2:1: error: a file included in `multiform`"),
        "{}",
        text(&o.stderr)
    );
}

/// Output that cannot be written (`> /dev/full`) is an error, reported the same way by both
/// engines, with status 1; it was ignored (status 0). `check` and `compile` too. A program
/// that writes without end stops at the first failure.
#[test]
fn write_errors_are_reported() {
    let s = Scratch::new();
    let small = s.file("small.vlad", b"(write-real 1)\n(+ 1 2)\n");
    let endless = s.file(
        "endless.vlad",
        b"(define (loop i) (loop (write-real (+ i 1))))\n(loop 0)\n",
    );
    let full = || std::fs::File::create("/dev/full").expect("/dev/full (Linux)");
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_vlad"))
            .args(args)
            .current_dir(s.path())
            .env("VLAD_CACHE_DIR", s.cache())
            .stdin(Stdio::null())
            .stdout(full())
            .stderr(Stdio::piped())
            .output()
            .expect("run vlad");
        (text(&o.stderr), o.status.code())
    };
    let expected = (
        "vlad: error: cannot write the output: No space left on device\n".to_string(),
        Some(1),
    );
    // Compiled first, so that the note about compiling is not part of what is compared.
    assert!(s.vlad(&["run", &small], b"").status.success());
    assert!(s
        .vlad(&["compile", &endless, "--emit", "c"], b"")
        .status
        .success());
    for args in [
        vec!["run", &small],
        vec!["run", "--interp", &small],
        vec!["run", "--engine", "ir", &small],
        vec!["run", &endless],
        vec!["run", "--interp", &endless],
        vec!["check", &small],
        vec!["compile", &small, "--emit", "c"],
        vec!["compile", &small, "--emit", "flow"],
    ] {
        assert_eq!(run(&args), expected, "{args:?}");
    }
}

/// Running out of memory in the evaluator ended in Rust's abort (`memory allocation of N
/// bytes failed`, a core dump, status 134; under this test's limit `vlad` could not even make
/// its thread, and said `internal error`); it is reported as compiled code reports it. The list
/// grown is the result if `n` is negative: one no one reads is not built in compiled code
/// (`passes::unread`), which then loops forever in constant memory.
#[test]
fn running_out_of_memory_is_reported_in_both_engines() {
    let s = Scratch::new();
    let file = s.file(
        "grow.vlad",
        b"(write-real 1)\n\
          (define (grow n acc) (if (< n 0) acc (grow (+ n 1) (cons n acc))))\n\
          (grow 0 '())\n",
    );
    // Compiled without the limit (the C compiler needs more memory than the program is
    // allowed), run under it.
    let exe = s.path().join("grow");
    let c = s.vlad(&["compile", &file, "-o", exe.to_str().expect("UTF-8")], b"");
    assert!(c.status.success(), "{}", text(&c.stderr));
    let limited = |program: &Path, args: &[&str]| {
        let o = Command::new("sh")
            .arg("-c")
            .arg("ulimit -v 400000 && exec \"$0\" \"$@\"")
            .arg(program)
            .args(args)
            .current_dir(s.path())
            .env("VLAD_CACHE_DIR", s.cache())
            .stdin(Stdio::null())
            .output()
            .expect("run under a memory limit");
        outcome(&o)
    };
    let expected = (
        "1\n1\n".to_string(),
        "vlad: out of memory\n".to_string(),
        Some(70),
    );
    let vlad = Path::new(env!("CARGO_BIN_EXE_vlad"));
    assert_eq!(limited(vlad, &["run", "--interp", &file]), expected);
    assert_eq!(limited(&exe, &[]), expected);
}

/// The cached executable of `file` (the one file in the cache without an extension).
fn cached_executable(cache: &Path) -> PathBuf {
    let exes: Vec<PathBuf> = std::fs::read_dir(cache)
        .expect("the cache directory")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_none())
        .collect();
    assert_eq!(exes.len(), 1, "{exes:?}");
    exes[0].clone()
}

/// A damaged executable in the cache is compiled again: a truncated one made every later run
/// die of a segmentation fault, and one that could not be run sent every run to the
/// evaluator ("compiling again" found the same file).
#[test]
fn broken_cache_entries_are_replaced() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new();
    let file = s.file("prog.vlad", b"(define (f x) (* x (real 2)))\n(f 21)\n");
    let first = s.vlad(&["run", &file], b"");
    assert_eq!(outcome(&first), ("42\n".into(), String::new(), Some(0)));
    let exe = cached_executable(&s.cache());
    let bytes = std::fs::read(&exe).expect("the executable");
    let damage: [(&str, &dyn Fn()); 3] = [
        ("truncated", &|| {
            std::fs::write(&exe, &bytes[..bytes.len() / 2]).unwrap()
        }),
        ("not executable", &|| {
            std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o644)).unwrap()
        }),
        ("another program", &|| {
            std::fs::write(&exe, b"#!/bin/sh\necho 0\n").unwrap();
            std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap()
        }),
    ];
    for (what, damage) in damage {
        damage();
        let again = s.vlad(&["run", &file], b"");
        assert_eq!(
            outcome(&again),
            ("42\n".into(), String::new(), Some(0)),
            "{what}"
        );
        assert_eq!(std::fs::read(&exe).expect("replaced"), bytes, "{what}");
    }
}

/// Without a cache directory of the user's own (`VLAD_CACHE_DIR`, `XDG_CACHE_HOME` and
/// `HOME` unset), the cache is `vlad-cache-UID` in the temporary directory, private to the
/// user (mode 0700). It was `vlad-cache`, shared by every user. One that others can write
/// (or that another user owns) is not used: the program is compiled and run without it.
#[test]
fn the_fallback_cache_is_private() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let s = Scratch::new();
    let file = s.file("prog.vlad", b"(+ 1 (real 2))\n");
    let tmp = s.path().join("tmp");
    std::fs::create_dir(&tmp).expect("a temporary directory");
    let run = || {
        let o = Command::new(env!("CARGO_BIN_EXE_vlad"))
            .args(["run", &file])
            .current_dir(s.path())
            .env_remove("VLAD_CACHE_DIR")
            .env_remove("XDG_CACHE_HOME")
            .env_remove("HOME")
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .output()
            .expect("run vlad");
        outcome(&o)
    };
    assert_eq!(run(), ("3\n".into(), String::new(), Some(0)));
    let made: Vec<PathBuf> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    let cache = &made[0];
    let meta = std::fs::metadata(cache).unwrap();
    let me = std::fs::metadata(s.path()).unwrap().uid();
    assert_eq!(
        cache.file_name().unwrap().to_string_lossy(),
        format!("vlad-cache-{me}")
    );
    assert_eq!(meta.mode() & 0o777, 0o700);
    assert_eq!(meta.uid(), me);
    // Opened to others: not used, and not trusted (the cached executable is not run).
    std::fs::set_permissions(cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let exe = cached_executable(cache);
    std::fs::write(&exe, b"#!/bin/sh\necho planted\n").unwrap();
    let (out, err, code) = run();
    assert_eq!((out.as_str(), code), ("3\n", Some(0)));
    assert!(
        err.starts_with("vlad: not using the cache directory ")
            && err.contains("others can write to it"),
        "{err}"
    );
    // Another user's (only root can make one here).
    if me == 0 {
        std::fs::set_permissions(cache, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(cache, Some(65534), None).unwrap();
        let (out, err, _) = run();
        assert_eq!(out, "3\n");
        assert!(err.contains("it belongs to another user"), "{err}");
    }
}

/// `vlad compile -o DIR`, DIR a directory, is an error that leaves nothing behind (it left
/// `DIR.partialPID`).
#[test]
fn compiling_onto_a_directory_leaves_nothing() {
    let s = Scratch::new();
    let file = s.file("prog.vlad", b"(+ 1 2)\n");
    std::fs::create_dir(s.path().join("out")).unwrap();
    let before: Vec<_> = std::fs::read_dir(s.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let o = s.vlad(&["compile", &file, "-o", "out"], b"");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).starts_with("vlad: cannot write out"),
        "{}",
        text(&o.stderr)
    );
    let mut after: Vec<_> = std::fs::read_dir(s.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    after.retain(|p| p.file_name().is_some_and(|n| n != "cache"));
    let mut before = before;
    before.retain(|p| p.file_name().is_some_and(|n| n != "cache"));
    before.sort();
    after.sort();
    assert_eq!(after, before);
}

/// Reverse mode nested `depth` deep: a flow analysis that blows up (issue 23).
fn reverse_tower(depth: usize) -> Vec<u8> {
    let mut f = "exp".to_string();
    for _ in 0..depth {
        f = format!("(d {f})");
    }
    format!(
        "(define ((d f) x) (let (((cons y bp) ((*j f) (*j x))))\n\
         (let (((cons fb xb) (unsensitize (bp (sensitize 1))))) xb)))\n({f} 0)\n"
    )
    .into_bytes()
}

/// The analysis's memory is bounded too: the Core transforms it runs ask the budget every few
/// hundred steps, so it stops near its limit, whatever one transform would take (reverse mode
/// nested eight deep reached 12 GB, one transform of 20 s taking most). Under an address
/// space limit of 3 GB, the analysis stops with its own message at 300 MB; unbounded, it
/// grows until it dies of a failed allocation.
#[test]
fn the_analysis_stops_at_its_memory_limit() {
    let s = Scratch::new();
    let file = s.file("tower.vlad", &reverse_tower(8));
    let o = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 3000000 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_vlad"))
        .args(["compile", &file, "--emit", "flow"])
        .current_dir(s.path())
        .env("VLAD_ANALYSIS_MEMORY_MB", "300")
        .env("VLAD_ANALYSIS_TIMEOUT_SECS", "100000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run vlad");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with(
            "tower.vlad:3:1: error: cannot compile: the flow analysis ran out of memory ("
        ) && err.contains("over 300 MB (VLAD_ANALYSIS_MEMORY_MB sets the limit)"),
        "{err}"
    );
}

/// A program whose analysis runs out of time runs in the evaluator, and the decision is
/// recorded: the next run goes straight to the evaluator, without analysing again (it was not
/// recorded, and every run analysed for 20 s again). The limit is 0 s here, so that the
/// analysis stops at its first check.
#[test]
fn a_program_too_costly_to_compile_is_remembered() {
    let s = Scratch::new();
    let file = s.file("tower.vlad", &reverse_tower(5));
    let run = || {
        let o = Command::new(env!("CARGO_BIN_EXE_vlad"))
            .args(["run", &file])
            .current_dir(s.path())
            .env("VLAD_CACHE_DIR", s.cache())
            .env("VLAD_ANALYSIS_TIMEOUT_SECS", "0")
            .stdin(Stdio::null())
            .output()
            .expect("run vlad");
        outcome(&o)
    };
    let (out, err, code) = run();
    assert_eq!((out.as_str(), code), ("1\n", Some(0)));
    assert!(
        err.starts_with(
            "vlad: not compiled to native code (tower.vlad:3:1: the flow analysis ran out of \
             time ("
        ) && err.ends_with(
            "after 0 s (VLAD_ANALYSIS_TIMEOUT_SECS sets the limit, in seconds of CPU time)); \
             running in the evaluator\n"
        ),
        "{err}"
    );
    let records: Vec<PathBuf> = std::fs::read_dir(s.cache())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = std::fs::read_to_string(&records[0]).unwrap();
    // The cost: at least the compile budget, 20 s by default.
    assert!(
        record.starts_with("costly 20.000 tower.vlad:3:1: the flow analysis"),
        "{record}"
    );
    // The next run reads the record instead of analysing again.
    std::fs::write(&records[0], "costly 1000 a recorded reason").unwrap();
    assert_eq!(
        run(),
        (
            "1\n".into(),
            "vlad: not compiled to native code (a recorded reason); running in the evaluator\n"
                .into(),
            Some(0)
        )
    );
}

/// A program left to the evaluator for the cost of compiling it, whose run in the evaluator
/// takes longer than that cost, is compiled by the next run: compiling now pays for itself.
/// Here the compile budget is below what even the smallest program costs (the C compiler's
/// predicted time), and the recorded cost is made tiny, so that any run exceeds it whatever
/// the machine's speed; then a recorded larger budget has the program compiled.
#[test]
fn a_long_run_in_the_evaluator_has_the_next_run_compile() {
    let s = Scratch::new();
    let file = s.file("prog.vlad", b"(+ 1 (real 2))\n");
    let run = || {
        let o = Command::new(env!("CARGO_BIN_EXE_vlad"))
            .args(["run", &file])
            .current_dir(s.path())
            .env("VLAD_CACHE_DIR", s.cache())
            .env("VLAD_COMPILE_BUDGET_SECS", "0.5")
            .stdin(Stdio::null())
            .output()
            .expect("run vlad");
        outcome(&o)
    };
    let record = || {
        let files: Vec<PathBuf> = std::fs::read_dir(s.cache())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "src"))
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        (
            files[0].clone(),
            std::fs::read_to_string(&files[0]).unwrap(),
        )
    };
    let (out, err, code) = run();
    assert_eq!((out.as_str(), code), ("3\n", Some(0)));
    assert!(
        err.contains("compiling it would take about 1.")
            && err.contains(" s of CPU time, more than the 0.5 s `vlad run` spends"),
        "{err}"
    );
    let (path, text) = record();
    assert!(text.starts_with("costly 1."), "{text}");
    // A run in the evaluator longer than the recorded cost: the next run gets a budget.
    std::fs::write(&path, "costly 0.000001 a recorded reason").unwrap();
    let (out, err, _) = run();
    assert_eq!(out, "3\n");
    assert!(err.contains("(a recorded reason)"), "{err}");
    assert!(record().1.starts_with("compile 0.000"), "{}", record().1);
    // A recorded budget larger than the compile's cost: compiled, then from the cache.
    std::fs::write(&path, "compile 100").unwrap();
    assert_eq!(run(), ("3\n".into(), String::new(), Some(0)), "compiled");
    assert!(record().1.len() == 32, "{}", record().1);
    assert_eq!(
        run(),
        ("3\n".into(), String::new(), Some(0)),
        "from the cache"
    );
}

/// "compiling…" on standard error once a compilation has taken 2 s (with `VLAD_PROGRESS=1`;
/// by default only where standard error is a terminal). The C compiler is made slow here.
#[test]
fn a_long_compilation_says_so() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new();
    let file = s.file("prog.vlad", b"(+ 1 (real 2))\n");
    let cc = s.path().join("slow-cc");
    std::fs::write(&cc, "#!/bin/sh\nsleep 3\nexec cc \"$@\"\n").unwrap();
    std::fs::set_permissions(&cc, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_vlad"))
        .args(["run", &file])
        .current_dir(s.path())
        .env("VLAD_CACHE_DIR", s.cache())
        .env("VLAD_PROGRESS", "1")
        .env("CC", &cc)
        .stdin(Stdio::null())
        .output()
        .expect("run vlad");
    assert_eq!(
        outcome(&o),
        (
            "3\n".into(),
            "vlad: compiling prog.vlad\u{2026}\n".into(),
            Some(0)
        )
    );
}
