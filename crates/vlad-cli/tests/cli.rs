//! End-to-end behaviour of the `vlad` binary: `run` output, error reports (position, caret,
//! exit code 1, never a panic), `check` summaries, `read-real` from stdin and `--max-steps`.
//!
//! Every child process runs under a deadline: a `vlad` that hangs is killed and the test fails.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long any one `vlad` invocation may take before it counts as hung.
const DEADLINE: Duration = Duration::from_secs(30);

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn describe(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `vlad ARGS` in `cwd` with `stdin` piped in, killing it if it outlives [`DEADLINE`].
fn vlad(args: &[&str], cwd: &Path, stdin: &str) -> Outcome {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vlad"))
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn vlad");
    // Feed stdin and drain stdout/stderr on their own threads so no pipe can fill up and block.
    let mut input = child.stdin.take().expect("stdin");
    let text = stdin.to_string();
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(text.as_bytes());
    });
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for vlad") {
            break s;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`vlad {}` did not finish within {DEADLINE:?}",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = feeder.join();
    let mut stderr = err.join().expect("stderr reader");
    // `vlad run` compiles to native code; where it cannot, it says so in one line and runs the
    // evaluator. These tests are about what the program does, so that note is set aside here
    // (tests/native.rs checks it).
    if args.first() == Some(&"run") && stderr.starts_with("vlad: not compiled to native code") {
        stderr = stderr.split_once('\n').map_or("", |x| x.1).to_string();
    }
    let o = Outcome {
        code: status.code(),
        stdout: out.join().expect("stdout reader"),
        stderr,
    };
    assert!(
        !o.stderr.contains("panicked") && !o.stderr.contains("RUST_BACKTRACE"),
        "`vlad {}` panicked:\n{}",
        args.join(" "),
        o.describe()
    );
    o
}

/// A scratch directory holding one source file.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            dir: tempfile::tempdir().expect("temporary directory"),
        }
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).expect("write source");
        p
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// `vlad run` on `text` (written to `prog.vlad`, run from its directory).
fn run_text(text: &str, stdin: &str) -> Outcome {
    let s = Scratch::new();
    s.file("prog.vlad", text);
    vlad(&["run", "prog.vlad"], s.path(), stdin)
}

/// Asserts a failed run reported `prog.vlad:LINE:COL: error: ...` (first line), with the
/// source line and a caret line, and exit code 1.
fn assert_error_at(o: &Outcome, line: usize, col: usize, message_part: &str) {
    assert_eq!(o.code, Some(1), "{}", o.describe());
    let prefix = format!("prog.vlad:{line}:{col}: error: ");
    assert!(
        o.stderr.starts_with(&prefix),
        "stderr should start with `{prefix}`:\n{}",
        o.describe()
    );
    let first = o.stderr.lines().next().unwrap_or("");
    assert!(
        first.contains(message_part),
        "message should mention `{message_part}`:\n{}",
        o.describe()
    );
    assert!(
        has_caret_line(&o.stderr),
        "no caret excerpt:\n{}",
        o.describe()
    );
}

/// Does some line look like `   |   ^^^`?
fn has_caret_line(stderr: &str) -> bool {
    stderr.lines().any(|l| {
        let t = l.trim_start();
        t.starts_with('|') && {
            let rest = t[1..].trim();
            !rest.is_empty() && rest.chars().all(|c| c == '^')
        }
    })
}

#[test]
fn run_prints_each_value_on_its_own_line() {
    let o = run_text(
        "(define (square x) (* x x))\n\
         (square 3)\n\
         (+ 1 2)\n\
         '(1 2 3)\n\
         (cons 1 2)\n\
         '()\n\
         #t\n\
         (/ 1 4)\n",
        "",
    );
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(
        o.stdout,
        "9\n3\n(1 2 3)\n(1 . 2)\n()\n#t\n0.25\n",
        "{}",
        o.describe()
    );
    assert_eq!(o.stderr, "");
}

#[test]
fn run_prints_writes_before_the_value() {
    let o = run_text(
        "(+ (write-real 1) (write-real 2))\n(write (list 1 2))\n",
        "",
    );
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout, "1\n2\n3\n(1 2)\n(1 2)\n", "{}", o.describe());
}

#[test]
fn run_empty_file_prints_nothing() {
    let o = run_text("", "");
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout, "");
    let o = run_text("; only a comment\n(define (f x) x)\n", "");
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout, "");
}

#[test]
fn unbound_variable_is_reported_with_position() {
    let o = run_text("(+ 1 2)\n  (let ((x 1)) y)\n", "");
    assert_error_at(&o, 2, 16, "unbound");
}

#[test]
fn applying_a_non_procedure_is_reported_with_position() {
    let o = run_text("(+ 1 2)\n(3 4)\n", "");
    assert_error_at(&o, 2, 1, "procedure");
}

#[test]
fn values_before_an_error_are_still_printed() {
    let o = run_text("(+ 1 2)\n(3 4)\n(+ 5 6)\n", "");
    assert_eq!(o.code, Some(1), "{}", o.describe());
    assert_eq!(o.stdout, "3\n", "{}", o.describe());
}

#[test]
fn pattern_mismatch_is_reported_with_position() {
    let o = run_text("(define (f (cons a b)) a)\n(f 5)\n", "");
    assert_eq!(o.code, Some(1), "{}", o.describe());
    assert!(o.stderr.starts_with("prog.vlad:"), "{}", o.describe());
    assert!(o.stderr.lines().next().unwrap().contains(": error: "));
    assert!(has_caret_line(&o.stderr), "{}", o.describe());
    assert!(o.stderr.contains("match"), "{}", o.describe());
}

#[test]
fn bad_primitive_argument_is_reported_with_position() {
    let o = run_text("1\n(+ 1 #t)\n", "");
    assert_error_at(&o, 2, 1, "");
}

#[test]
fn unclosed_parenthesis_is_reported_with_position() {
    let o = run_text("1\n(+ 1 (* 2 3)\n", "");
    assert_error_at(&o, 2, 1, "");
    // A reader error stops the program before anything runs.
    assert_eq!(o.stdout, "");
}

#[test]
fn stray_closing_parenthesis_is_reported_with_position() {
    let o = run_text("(+ 1 2))\n", "");
    assert_error_at(&o, 1, 8, "");
}

#[test]
fn missing_include_is_reported_with_position() {
    let o = run_text("1\n  (include \"no-such-file\")\n", "");
    assert_error_at(&o, 2, 3, "no-such-file");
}

#[test]
fn include_splices_a_file_from_the_including_directory() {
    let s = Scratch::new();
    std::fs::create_dir(s.path().join("sub")).unwrap();
    s.file("sub/lib.vlad", "(define (double x) (+ x x))\n");
    s.file("sub/prog.vlad", "(include \"lib\")\n(double 21)\n");
    // Run from the scratch root: the include is found beside the including file.
    let o = vlad(&["run", "sub/prog.vlad"], s.path(), "");
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout, "42\n");
}

#[test]
fn include_dirs_are_searched() {
    let s = Scratch::new();
    std::fs::create_dir(s.path().join("libdir")).unwrap();
    s.file("libdir/mylib.vlad", "(define (triple x) (* 3 x))\n");
    s.file("prog.vlad", "(include \"mylib\")\n(triple 5)\n");
    let o = vlad(&["run", "prog.vlad"], s.path(), "");
    assert_eq!(o.code, Some(1), "found without -I?\n{}", o.describe());
    let o = vlad(&["run", "-I", "libdir", "prog.vlad"], s.path(), "");
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout, "15\n");
}

#[test]
fn errors_in_an_included_file_name_that_file() {
    let s = Scratch::new();
    s.file("broken.vlad", "(define (f x) x)\n\n(f 1 2 3\n");
    s.file("prog.vlad", "(include \"broken\")\n1\n");
    let o = vlad(&["run", "prog.vlad"], s.path(), "");
    assert_eq!(o.code, Some(1), "{}", o.describe());
    let first = o.stderr.lines().next().unwrap_or("");
    assert!(
        first.contains("broken.vlad:3:1: error: "),
        "{}",
        o.describe()
    );
    assert!(has_caret_line(&o.stderr), "{}", o.describe());
}

#[test]
fn missing_program_file_is_an_error_not_a_panic() {
    let s = Scratch::new();
    let o = vlad(&["run", "does-not-exist.vlad"], s.path(), "");
    assert_eq!(o.code, Some(1), "{}", o.describe());
    assert!(o.stderr.contains("error"), "{}", o.describe());
    let o = vlad(&["check", "does-not-exist.vlad"], s.path(), "");
    assert_ne!(o.code, Some(0), "{}", o.describe());
}

#[test]
fn usage_errors_do_not_panic() {
    let s = Scratch::new();
    for args in [
        &[][..],
        &["run"][..],
        &["frobnicate"][..],
        &["run", "--max-steps", "lots", "x.vlad"][..],
    ] {
        let o = vlad(args, s.path(), "");
        assert_ne!(o.code, Some(0), "vlad {args:?}\n{}", o.describe());
    }
}

#[test]
fn hostile_inputs_never_panic() {
    let deep_open = "(".repeat(100_000);
    let deep_list = format!("'{}{}", "(".repeat(50_000), ")".repeat(50_000));
    let long_list = format!("'({})", "1 ".repeat(200_000));
    let cases: Vec<String> = vec![
        deep_open,
        deep_list,
        long_list,
        "\"unterminated string".into(),
        "#".into(),
        "#x".into(),
        "#\\a".into(),
        "'".into(),
        "(. 1)".into(),
        "(1 . )".into(),
        "(1 . 2 3)".into(),
        "(define)".into(),
        "(define 3 4)".into(),
        "(lambda)".into(),
        "(lambda (x))".into(),
        "(let ((x)) x)".into(),
        "(cond)".into(),
        "(cond (#t 1))".into(),
        "(if 1)".into(),
        "(quote)".into(),
        "(include)".into(),
        "(include 3)".into(),
        "===> 3".into(),
        "1 ===>".into(),
        "\u{0}\u{1}\u{7f}".into(),
        "(λ (x) x)".into(),
        "(/ 1 0)".into(),
        "(log -1)".into(),
        "(sqrt -1)".into(),
        "(atan 0 0)".into(),
        "(bundle 1 2)".into(),
        "(tangent 1)".into(),
        "(primal '())".into(),
        "(perturb (lambda (x) x))".into(),
        "(unperturb 3)".into(),
    ];
    for text in &cases {
        let o = run_text(text, "");
        assert!(
            o.code == Some(0) || o.code == Some(1),
            "input {:?}\n{}",
            text.chars().take(60).collect::<String>(),
            o.describe()
        );
        if o.code == Some(1) {
            assert!(o.stderr.contains("error"), "{}", o.describe());
        }
    }
}

#[test]
fn errors_inside_forward_primitives_are_reported_at_the_call() {
    // The forward version of a primitive applied to arguments it rejects: the error happens
    // inside the evaluator's own definitions of the forward primitives, but must be reported
    // in the user's file.
    for text in [
        "((bundle sqrt (perturb (zero sqrt))) #t)\n",
        "((bundle = (perturb (zero =))))\n",
        "((bundle boolean? (perturb (zero boolean?))))\n",
        "((bundle + (perturb (zero +))) 1)\n",
    ] {
        let o = run_text(text, "");
        assert_eq!(o.code, Some(1), "{text}\n{}", o.describe());
        assert!(
            o.stderr.starts_with("prog.vlad:1:"),
            "{text}\n{}",
            o.describe()
        );
        assert!(has_caret_line(&o.stderr), "{text}\n{}", o.describe());
    }
}

#[test]
fn deep_recursion_runs() {
    // Non-tail recursion a million deep, and a printed list that long.
    let o = run_text(
        "(define (count n) (if (zero? n) 0 (+ 1 (count (- n 1)))))\n\
         (count 1000000)\n\
         (define (iota n) (if (zero? n) '() (cons n (iota (- n 1)))))\n\
         (define (len l) (if (null? l) 0 (+ 1 (len ((lambda ((cons a d)) d) l)))))\n\
         (len (iota 1000000))\n",
        "",
    );
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout, "1000000\n1000000\n");
}

#[test]
fn read_real_reads_stdin() {
    let o = run_text("(* (read-real) (read-real))\n", "3 4\n");
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout, "12\n");
    // Numbers may be spread over lines and use any numeral syntax.
    let o = run_text(
        "(+ (read-real) (+ (read-real) (read-real)))\n",
        "1\n  2.5\n\n1e1\n",
    );
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout, "13.5\n");
}

#[test]
fn read_real_at_end_of_input_is_an_error() {
    let o = run_text("(+ 1 2)\n(read-real)\n", "");
    assert_eq!(o.code, Some(1), "{}", o.describe());
    assert_eq!(o.stdout, "3\n");
    assert!(o.stderr.starts_with("prog.vlad:2:"), "{}", o.describe());
    let o = run_text("(read-real)\n", "abc\n");
    assert_eq!(o.code, Some(1), "{}", o.describe());
}

#[test]
fn max_steps_stops_an_infinite_loop() {
    let o = vlad_with_steps("(let loop ((i 0)) (loop i))\n", "100000");
    assert_eq!(o.code, Some(1), "{}", o.describe());
    assert!(o.stderr.contains("error"), "{}", o.describe());
    // Non-tail infinite recursion too (it also grows the continuation stack).
    let o = vlad_with_steps("(define (f x) (+ 1 (f x)))\n(f 0)\n", "100000");
    assert_eq!(o.code, Some(1), "{}", o.describe());
    // A program that fits in the budget is unaffected.
    let o = vlad_with_steps(
        "(let loop ((i 0)) (if (< i 10) (loop (+ i 1)) i))\n",
        "100000",
    );
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout, "10\n");
}

fn vlad_with_steps(text: &str, steps: &str) -> Outcome {
    let s = Scratch::new();
    s.file("prog.vlad", text);
    vlad(&["run", "--max-steps", steps, "prog.vlad"], s.path(), "")
}

#[test]
fn check_passes_and_summarises() {
    let s = Scratch::new();
    s.file(
        "prog.vlad",
        "(define (square x) (* x x))\n\
         (square 3) ===> 9\n\
         (+ 0.1 0.2) ===> 0.3\n\
         '(1 (2 . 3)) ===> (1 (2 . 3))\n\
         (write 1) ===> (multiform 1 1)\n\
         (* (read-real) (read-real)) ===> (with-inputs (3 4) 12)\n\
         (3 4) ===> (error \"procedure\")\n\
         (+ 1 1) ===> (or 3 2)\n\
         (square 2)\n",
    );
    let o = vlad(&["check", "prog.vlad"], s.path(), "");
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(
        o.stdout.lines().last(),
        Some("8 passed, 0 failed"),
        "{}",
        o.describe()
    );
}

/// `vlad check --print` prints what each expression's program printed, as `vlad run` prints it,
/// before the summary (tests/native.rs compares it with native code's output).
#[test]
fn check_prints_what_the_programs_printed() {
    let s = Scratch::new();
    s.file(
        "prog.vlad",
        "(define (square x) (* x x))\n\
         (square 3) ===> 9\n\
         (list (write-real 2.5) #t) ===> (multiform 2.5 (2.5 #t))\n",
    );
    let o = vlad(&["check", "--print", "prog.vlad"], s.path(), "");
    assert_eq!(o.code, Some(0), "{}", o.describe());
    let run = vlad(&["run", "--interp", "prog.vlad"], s.path(), "");
    assert_eq!(
        o.stdout,
        format!("{}2 passed, 0 failed\n", run.stdout),
        "{}",
        o.describe()
    );
    let quiet = vlad(&["check", "prog.vlad"], s.path(), "");
    assert_eq!(quiet.stdout, "2 passed, 0 failed\n", "{}", quiet.describe());
}

#[test]
fn check_reports_a_failing_assertion() {
    let s = Scratch::new();
    s.file(
        "prog.vlad",
        "(+ 1 2) ===> 3\n\
         \n\
         (+ 1 1) ===> 3\n\
         (* 2 2) ===> 4\n\
         (3 4) ===> 5\n",
    );
    let o = vlad(&["check", "prog.vlad"], s.path(), "");
    assert_ne!(o.code, Some(0), "{}", o.describe());
    assert_eq!(
        o.stdout.lines().last(),
        Some("2 passed, 2 failed"),
        "{}",
        o.describe()
    );
    assert!(o.stderr.contains("prog.vlad:3:1: "), "{}", o.describe());
    assert!(o.stderr.contains("prog.vlad:5:1: "), "{}", o.describe());
    assert!(has_caret_line(&o.stderr), "{}", o.describe());
}

#[test]
fn check_with_max_steps_fails_the_looping_assertion_only() {
    let s = Scratch::new();
    s.file(
        "prog.vlad",
        "(let loop ((i 0)) (loop i)) ===> 0\n\
         (+ 1 2) ===> 3\n",
    );
    let o = vlad(
        &["check", "--max-steps", "100000", "prog.vlad"],
        s.path(),
        "",
    );
    assert_ne!(o.code, Some(0), "{}", o.describe());
    assert_eq!(
        o.stdout.lines().last(),
        Some("1 passed, 1 failed"),
        "{}",
        o.describe()
    );
}

#[test]
fn check_reader_error_exits_one() {
    let s = Scratch::new();
    s.file("prog.vlad", "(+ 1 2) ===> 3\n(+ 1\n");
    let o = vlad(&["check", "prog.vlad"], s.path(), "");
    assert_eq!(o.code, Some(1), "{}", o.describe());
    assert!(
        o.stderr.starts_with("prog.vlad:2:1: error: "),
        "{}",
        o.describe()
    );
    assert!(has_caret_line(&o.stderr), "{}", o.describe());
}

#[test]
fn array_errors_are_reported_at_the_call() {
    // A bad count in tail position (the call's frame is reused) and inside a procedure.
    let o = run_text("(+ 1 2)\n  (build 2.5 (lambda (i) i))\n", "");
    assert_error_at(&o, 2, 3, "non-negative integer");
    let o = run_text("(define (f n) (ifold (lambda (a i) a) 0 n))\n(f -1)\n", "");
    assert_error_at(&o, 1, 15, "non-negative integer");
    let o = run_text("(define a #(1 2))\n(get a 2)\n", "");
    assert_error_at(&o, 2, 1, "out of range");
    let o = run_text("(plus #(1 2)\n      #(1 2 3))\n", "");
    assert_error_at(&o, 1, 1, "different lengths");
}

#[test]
fn reverse_mode_array_errors_are_reported_in_the_program() {
    // An out-of-range read inside a function differentiated by reverse mode.
    let o = run_text("(define (f a) (get a 3))\n((*j f) (*j #(1 2)))\n", "");
    assert_error_at(&o, 1, 15, "out of range");
}

/// The repository root (where `tests/` and `lib/` are).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The small programs of `tests/fixtures/flow`, with what each reads from stdin.
const FLOW_FIXTURES: &[(&str, &str)] = &[
    ("factorial", "6\n"),
    ("closures", "2\n"),
    ("list-of-n", "50\n"),
    ("loop", ""),
    ("forward", ""),
    ("reverse-loop", "7\n"),
    ("forward-build", "4\n"),
    ("array-lengths", "5\n"),
    ("array-dot", "4\n"),
    ("small-vectors", "2\n"),
    ("forward-small-vectors", "0.5\n"),
    ("forward-grad-dot", "4\n"),
    ("forward-grad-lse", "5\n"),
    ("softmax", "5\n"),
    ("reverse-data", "4\n"),
    ("reverse-nested-arrays", "4\n"),
    ("rules", "5\n3\n2\n"),
];

/// `vlad compile --emit flow` and `--emit ir` on small programs: the analysis terminates (the
/// issue's list: a list of n elements read from stdin, a 10^6-iteration loop, a reverse-mode
/// derivative through a loop whose trip count is read), and its readable output is pinned by
/// snapshots (`cargo insta review` after an intended change).
#[test]
fn flow_and_ir_snapshots() {
    for (name, _) in FLOW_FIXTURES {
        let file = format!("tests/fixtures/flow/{name}.vlad");
        for emit in ["flow", "ir"] {
            insta::assert_snapshot!(format!("{name}-{emit}"), emitted(&file, emit));
        }
    }
}

/// What `vlad compile FILE --emit EMIT` writes (it must succeed).
fn emitted(file: &str, emit: &str) -> String {
    let o = vlad(&["compile", file, "--emit", emit], &repo_root(), "");
    assert_eq!(o.code, Some(0), "{file} --emit {emit}: {}", o.describe());
    o.stdout
}

/// A reverse sweep's state that holds the sensitivities of closures inside closures and, at
/// their leaves, those of a matrix's rows stays unboxed: with data bounded at ten levels, the
/// rows' sensitivities were `dyn` (every element a boxed object, the collector copying them
/// at each step of the loop).
#[test]
fn sensitivities_deep_in_a_sweeps_state_are_not_boxed() {
    let flow = emitted("tests/fixtures/flow/reverse-nested-arrays.vlad", "flow");
    let boxed: Vec<&str> = flow.lines().filter(|l| l.contains("dyn")).collect();
    assert!(boxed.is_empty(), "boxed values:\n{}", boxed.join("\n"));
}

/// Nested forward mode computes only the tangents something perturbs: the IR of the five
/// nested derivatives of paper 000's equilibrium (Fig. 1) has well over the bound below of
/// products where every tangent is computed (a constant's zero tangent may become NaN by
/// `inf * 0` in IEEE arithmetic, so it is not known zero), and far fewer where the forward
/// rules skip a zero tangent and the analysis keeps the zeros (docs/decisions.md, "A zero
/// tangent contributes nothing"; the counts are in benches/README.md).
#[test]
fn nested_forward_mode_multiplies_only_what_is_perturbed() {
    let file = "examples/farfel/equilibrium.vlad";
    let ir = emitted(file, "ir");
    let products = ir.lines().filter(|l| l.contains(" = fmul ")).count();
    assert!(products < 90, "{products} products in the IR of {file}");
}

/// The same programs run through the specialised program print what the evaluator prints.
#[test]
fn flow_fixtures_run_the_same_through_the_specialised_program() {
    let root = repo_root();
    for (name, input) in FLOW_FIXTURES {
        let file = format!("tests/fixtures/flow/{name}.vlad");
        let eval = vlad(&["run", &file], &root, input);
        let ir = vlad(&["run", "--engine", "ir", &file], &root, input);
        assert_eq!(eval.code, Some(0), "{file}: {}", eval.describe());
        assert_eq!(eval.stdout, ir.stdout, "{file}: {}", ir.describe());
    }
}

/// Both engines of `vlad run` on `text` (in a scratch directory, with `stdin`): they must
/// agree; the evaluator's outcome.
fn run_both(text: &str, stdin: &str) -> Outcome {
    let s = Scratch::new();
    s.file("prog.vlad", text);
    let native = vlad(&["run", "prog.vlad"], s.path(), stdin);
    let eval = vlad(&["run", "--interp", "prog.vlad"], s.path(), stdin);
    assert_eq!(
        (&native.stdout, &native.stderr, native.code),
        (&eval.stdout, &eval.stderr, eval.code),
        "native and evaluator differ\n--- native\n{}\n--- evaluator\n{}",
        native.describe(),
        eval.describe()
    );
    eval
}

/// Loops that the IR fuses (a `build` computed in the loop that consumes it, rows built where
/// they are read, the one-hot folds as written) fail where the evaluator fails, with its
/// message, position and status: the checks of a fused step run in the order they ran, and
/// report the call site they reported. The unfused NNMF shape with a row of another length
/// (at row 1 or none), and a producer reading out of range in its last step.
#[test]
fn fused_loops_fail_where_the_evaluator_fails() {
    let nnmf = "(include \"array\")\n\
         (let* ((m (read-real)) (n (read-real)) (bad (read-real))\n\
                (u (build m (lambda (i) (+ 1 i))))\n\
                (v (build n (lambda (j) (- 2 j))))\n\
                (a (build m (lambda (i) (build (if (= i bad) (+ n 1) n) (lambda (j) (+ i j)))))))\n\
           (matrix-sum (matrix-map2-entries (lambda (x y) (+ (log x) (/ y x)))\n\
                                            (vector-outer-product u v) a)))\n";
    let failed = run_both(nnmf, "3 2 1");
    assert!(
        failed.stderr.contains("sizes differ"),
        "{}",
        failed.describe()
    );
    for input in ["3 2 7", "3 4 7", "0 2 7"] {
        assert_eq!(run_both(nnmf, input).code, Some(0));
    }
    let shifted = "(include \"array\")\n\
         (let* ((n (read-real)) (k (read-real))\n\
                (v (build n (lambda (i) (sin i))))\n\
                (b (build n (lambda (i) (exp (get v (+ i k)))))))\n\
           (ifold (lambda (s i) (+ s (get b i))) 0 (array-length b)))\n";
    assert_eq!(run_both(shifted, "5 0").code, Some(0));
    let failed = run_both(shifted, "5 1");
    assert!(
        failed.stderr.contains("index 5 is out of range"),
        "{}",
        failed.describe()
    );
    let pick = "(let* ((n (read-real)) (k (read-real))\n\
                (v (build n (lambda (i) (sin i)))))\n\
           (ifold (lambda (a i) (if (= i k) (+ a (get v (+ i 1))) a)) 0 n))\n";
    assert_eq!(run_both(pick, "5 2").code, Some(0));
    let failed = run_both(pick, "5 4");
    assert!(
        failed.stderr.contains("out of range"),
        "{}",
        failed.describe()
    );
}

/// A top-level value definition is evaluated once per run, in both engines: `n` reads the
/// input once (it would read 3, then 4), the write in `m` happens once, before the first
/// expression after it, and a value definition after the last expression is made at the end.
#[test]
fn value_definitions_are_evaluated_once_per_run() {
    let o = run_both(
        "(define n (read-real))\n\
         (define m (write (* n 2)))\n\
         n\n\
         (+ n m)\n\
         (define (f x) (+ x n))\n\
         (f 1)\n\
         (define late (write-real 7))\n",
        "3 4",
    );
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout, "6\n3\n9\n4\n7\n");
    // `vlad check` runs each assertion as a program of its own: the definitions before it
    // are evaluated for it.
    let s = Scratch::new();
    s.file(
        "t.vlad",
        "(define x (write 5))\nx ===> (multiform 5 5)\n(+ x 1) ===> (multiform 5 6)\n",
    );
    let c = vlad(&["check", "t.vlad"], s.path(), "");
    assert_eq!(c.code, Some(0), "{}", c.describe());
}

/// An expansion error stops the run where it stands, after what came before, in both
/// engines; so does an expression whose definitions use a name defined only after it.
#[test]
fn the_run_stops_at_the_first_form_that_does_not_expand() {
    let o = run_both("(define x (write 1))\n2\n(fo 3)\n4\n", "");
    assert_eq!(o.code, Some(1));
    assert_eq!(o.stdout, "1\n2\n");
    assert!(
        o.stderr
            .starts_with("prog.vlad:3:2: error: unbound variable `fo`"),
        "{}",
        o.describe()
    );
    let o = run_both("1\n(define y (g 2))\n2\n(define (g x) x)\n", "");
    assert_eq!(o.code, Some(1));
    assert_eq!(o.stdout, "1\n");
    assert!(
        o.stderr
            .contains("unbound variable `g` (it is defined later in the file)"),
        "{}",
        o.describe()
    );
}

/// The standard library is found from any directory without `-I`; a program may define the
/// library's names (`e`, `sqr`), and the library's own code keeps its own (`gradient-F`
/// uses the library's basis vectors `e`).
#[test]
fn the_library_is_built_in_and_user_definitions_shadow_it() {
    let o = run_both(
        "(include \"ad\")\n\
         (define e 2.718281828459045)\n\
         (define (sqr x) (list x x))\n\
         e\n\
         (sqr 3)\n\
         ((gradient-F (lambda ((list x y)) (* x (* y y)))) (list 3 4))\n",
        "",
    );
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout, "2.718281828459045\n(3 3)\n(16 24)\n");
    // Before the program's own definition an expression sees the library's; a name defined
    // twice in one file is still an error.
    let o = run_both(
        "(include \"list\")\n(sqr 3)\n(define (sqr x) 0)\n(sqr 3)\n",
        "",
    );
    assert_eq!(o.stdout, "9\n0\n", "{}", o.describe());
    let o = run_both("(define (f) 1)\n(define (f) 2)\n", "");
    assert!(
        o.stderr.contains("`f` is defined twice"),
        "{}",
        o.describe()
    );
    // Library files are named `<lib>/NAME.vlad`; a local file of the same name comes first.
    let s = Scratch::new();
    s.file("list.vlad", "(define (length l) 42)\n");
    s.file("prog.vlad", "(include \"list\")\n(length '(1 2))\n");
    let o = vlad(&["run", "--interp", "prog.vlad"], s.path(), "");
    assert_eq!(o.stdout, "42\n", "{}", o.describe());
}

/// A scripted session of `vlad repl`: definitions persist (procedures and values, a value
/// evaluated once), an error does not end the session, a form may span lines, `include`
/// loads the library, a redefinition replaces, and the history is written to its file and
/// read back by the next session (`,history`).
#[test]
fn repl_session() {
    let s = Scratch::new();
    let hist = s.path().join("history");
    let h = hist.to_str().expect("UTF-8 path");
    let o = vlad(
        &["repl", "--history", h],
        s.path(),
        "(define (sq x) (* x x))\n\
         (define n (write 3))\n\
         (sq n)\n\
         (car 1)\n\
         (sq\n  (+ n 1))\n\
         (include \"ad\")\n\
         ((derivative-F sq) n)\n\
         (define (sq x) (+ x x))\n\
         (sq n)\n\
         ,time (sq 2)\n\
         ,bogus\n\
         n\n",
    );
    assert_eq!(o.code, Some(0), "{}", o.describe());
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(
        lines[..6],
        ["3", "9", "16", "6", "6", "4"],
        "{}",
        o.describe()
    );
    assert!(
        lines[6].starts_with("; ") && lines[6].ends_with(" ms"),
        "{}",
        o.describe()
    );
    assert_eq!(lines[7..], ["3"], "{}", o.describe());
    assert!(
        o.stderr
            .contains("<repl:4>:1:2: error: unbound variable `car`"),
        "{}",
        o.describe()
    );
    assert!(
        o.stderr.contains("unknown command ,bogus"),
        "{}",
        o.describe()
    );
    // The next session reads the history: a two-line entry is one entry.
    let o = vlad(&["repl", "--history", h], s.path(), ",history\n");
    assert!(
        o.stdout.contains("   1  (define (sq x) (* x x))\n"),
        "{}",
        o.describe()
    );
    assert!(
        o.stdout.contains("   5  (sq\n        (+ n 1))\n"),
        "{}",
        o.describe()
    );
    assert!(
        o.stdout.contains("  12  n\n  13  ,history\n"),
        "{}",
        o.describe()
    );
}

/// `,native EXPR` compiles the session (its includes, procedures and values) with EXPR and
/// runs it: it prints what the evaluator prints.
#[test]
fn repl_native() {
    let s = Scratch::new();
    let hist = s.path().join("history");
    let o = vlad(
        &["repl", "--history", hist.to_str().expect("UTF-8 path")],
        s.path(),
        "(include \"ad\")\n\
         (define xs (list 1 2 3))\n\
         (define (f v) (dot v v))\n\
         ((gradient-R f) xs)\n\
         ,native ((gradient-R f) xs)\n",
    );
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert_eq!(o.stdout, "(2 4 6)\n(2 4 6)\n", "{}", o.describe());
}

/// Errors in library code are reported at the program's own call, with the message the
/// library line gives, the same in both engines; a curried operator called with its argument
/// and point together is an error before the run.
#[test]
fn errors_in_library_code_name_the_callers_site() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "((gradient-F (lambda (x) (list x x))) (list 1 2))",
            "prog.vlad:2:1: error: gradient-F: the function must return a real",
            "^^^^^",
        ),
        (
            "((gradient-R (lambda ((list x y)) (list x y))) (list 1 2))",
            "prog.vlad:2:1: error: gradient-R: the function must return a real",
            "^^^^^",
        ),
        (
            "((derivative-F sin) (list 1 2))",
            "prog.vlad:2:1: error: derivative-F: the point must be a real",
            "^^^^^",
        ),
        (
            "(define (g v) (v+ v (list 1 2 3)))\n(g (list 1 2))",
            "prog.vlad:2:15: error: map2: the lists have different lengths",
            "(define (g v) (v+ v (list 1 2 3)))",
        ),
        (
            "((gradient-R (lambda ((list x y z)) (* x (* y z)))) (list 1 2))",
            "prog.vlad:2:1: error: pattern mismatch: expected a reverse pair, got (reverse ())",
            "^^^^^",
        ),
        (
            "(derivative-F sin 1)",
            "prog.vlad:2:1: error: `derivative-F` takes 1 argument and returns a procedure \
             (it is curried): write ((derivative-F f) x), not (derivative-F f x); this call passes 2",
            "^^^^^",
        ),
        (
            "(gradient-R (lambda (v) (dot v v)) (list 1 2))",
            "prog.vlad:2:1: error: `gradient-R` takes 1 argument",
            "^^^^^",
        ),
    ];
    for (body, first, excerpt) in cases {
        let o = run_both(&format!("(include \"ad\")\n{body}\n"), "");
        assert_eq!(o.code, Some(1), "{body}\n{}", o.describe());
        assert!(o.stderr.starts_with(first), "{body}\n{}", o.describe());
        assert!(o.stderr.contains(excerpt), "{body}\n{}", o.describe());
        assert!(!o.stderr.contains("<lib>"), "{body}\n{}", o.describe());
    }
}

/// `vlad compile --lib`: a C program that includes the header and links the library calls
/// an exported gradient, a Hessian and a procedure that fails, and writes what it got; that
/// is what `vlad run --interp` writes for the same calls in the program. Then the errors of
/// the command itself.
#[test]
fn a_library_is_called_from_c() {
    let s = Scratch::new();
    let program = "(include \"array\")\n\
         (define (f v) (+ (* (get v 0) (sin (get v 1))) (exp (* (get v 0) (get v 1)))))\n\
         (define (grad-f v) ((grad-R f) v))\n\
         (define (hess-f v) ((jacob grad-f) v))\n\
         (define (first-row m) (get m 0))\n\
         (define (checked x) (if (> x 0) (sqrt x) (car x)))\n";
    s.file("model.vlad", program);
    let calls = "(grad-f #(0.5 -2))\n(hess-f #(0.5 -2))\n(first-row #(#(1 2) #(3 4)))\n\
                 (checked 2)\n(checked -1)\n";
    s.file("check.vlad", &format!("{program}{calls}"));
    std::fs::create_dir(s.path().join("out")).unwrap();
    let built = vlad(
        &[
            "compile",
            "model.vlad",
            "--lib",
            "out/model",
            "--export",
            "grad-f(array)",
            "--export",
            "hess-f(array)",
            "--export",
            "first-row(array(array))",
            "--export",
            "checked(real)",
        ],
        s.path(),
        "",
    );
    assert_eq!(built.code, Some(0), "{}", built.describe());
    let header = std::fs::read_to_string(s.path().join("out/model.h")).unwrap();
    assert!(
        header.contains("vlad_value vlad_grad_f(vlad_value a0);"),
        "{header}"
    );
    // The C program writes values as VLAD does (reals with %.17g, then compared as numbers).
    s.file(
        "main.c",
        r##"#include <stdio.h>
#include "model.h"
static void show(vlad_value v) {
  switch (vlad_kind(v)) {
  case VLAD_REAL: printf("%.17g", vlad_real_of(v)); break;
  case VLAD_ARRAY:
    printf("#(");
    for (long i = 0; i < vlad_length(v); i++) { if (i) printf(" "); show(vlad_at(v, i)); }
    printf(")");
    break;
  default: printf("?");
  }
}
static void line(vlad_value v) {
  if (v) { show(v); printf("\n"); } else fputs(vlad_error(), stdout);
}
int main(void) {
  double x[2] = {0.5, -2};
  line(vlad_grad_f(vlad_array_f64(x, 2)));
  line(vlad_hess_f(vlad_array_f64(x, 2)));
  double r0[2] = {1, 2}, r1[2] = {3, 4};
  vlad_value rows[2] = {vlad_array_f64(r0, 2), vlad_array_f64(r1, 2)};
  line(vlad_first_row(vlad_array(rows, 2)));
  line(vlad_checked(vlad_real(2)));
  line(vlad_checked(vlad_real(-1)));
  vlad_reset();
  line(vlad_checked(vlad_array_f64(x, 2)));
  line(vlad_first_row(vlad_array_f64(x, 2)));
  return 0;
}
"##,
    );
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let linked = Command::new(&cc)
        .current_dir(s.path())
        .args(["-Iout", "main.c", "-Lout", "-lmodel", "-o", "main"])
        .arg(format!("-Wl,-rpath,{}", s.path().join("out").display()))
        .output()
        .unwrap();
    assert!(
        linked.status.success(),
        "{}",
        String::from_utf8_lossy(&linked.stderr)
    );
    let ran = Command::new(s.path().join("main")).output().unwrap();
    assert!(ran.status.success());
    let got = String::from_utf8(ran.stdout).unwrap();
    let expected = vlad(&["run", "--interp", "check.vlad"], s.path(), "");
    let mut got_lines = got.lines();
    // Values: the same numbers.
    for want in expected.stdout.lines() {
        let have = got_lines.next().unwrap_or_default();
        let numbers = |t: &str| -> Vec<f64> {
            t.replace(['#', '(', ')'], " ")
                .split_whitespace()
                .map(|w| w.parse().unwrap())
                .collect()
        };
        assert_eq!(numbers(have), numbers(want), "{got}");
    }
    // The error: the evaluator's message, with the position in model.vlad.
    let error: Vec<&str> = got_lines.by_ref().take(4).collect();
    assert_eq!(
        error.join("\n") + "\n",
        expected.stderr.replace("check.vlad", "model.vlad"),
        "{got}"
    );
    // Arguments of the wrong shape are the library's error, not a crash.
    let rest: Vec<&str> = got_lines.collect();
    assert_eq!(
        rest,
        [
            "vlad: error: vlad_checked, argument 1: expected a real, got an array of length 2",
            "vlad: error: vlad_first_row, argument 1: expected an array, got 0.5",
        ],
        "{got}"
    );

    // Errors of the command: positions for the program, the signature for the rest.
    let compile = |exports: &[&str]| {
        let mut args = vec!["compile", "model.vlad", "--lib", "out/bad"];
        for e in exports {
            args.extend(["--export", e]);
        }
        vlad(&args, s.path(), "")
    };
    for (exports, message) in [
        (
            &["f(real)"][..],
            "cannot export `f(real)`: no call with arguments",
        ),
        (&["g(array)"], "unbound variable `g`"),
        (&["f(list)"], "`list` is not a shape"),
        (&["f(array)", "f(array)"], "`f` is exported twice"),
    ] {
        let o = compile(exports);
        assert_ne!(o.code, Some(0), "{exports:?}");
        assert!(o.stderr.contains(message), "{exports:?}: {}", o.describe());
    }
    // The program on standard input, as for every command.
    let piped = vlad(
        &[
            "compile",
            "-",
            "--lib",
            "out/piped",
            "--export",
            "grad-f(array)",
        ],
        s.path(),
        program,
    );
    assert_eq!(piped.code, Some(0), "{}", piped.describe());
    assert!(s.path().join("out/libpiped.so").exists());
    let missing = vlad(&["compile", "model.vlad", "--lib", "out/x"], s.path(), "");
    assert_eq!(missing.code, Some(2), "{}", missing.describe());
    for extra in [&["--emit", "core"][..], &["--emit", "flow"], &["-o", "x"]] {
        let mut args = vec![
            "compile",
            "model.vlad",
            "--lib",
            "out/x",
            "--export",
            "f(array)",
        ];
        args.extend(extra);
        let o = vlad(&args, s.path(), "");
        assert_eq!(o.code, Some(2), "{extra:?}: {}", o.describe());
    }
    let nowhere = vlad(
        &[
            "compile",
            "model.vlad",
            "--lib",
            "no/such/dir/x",
            "--export",
            "f(array)",
        ],
        s.path(),
        "",
    );
    assert_eq!(nowhere.code, Some(1));
    assert!(
        nowhere.stderr.contains("cannot write no/such/dir/libx.so"),
        "{}",
        nowhere.describe()
    );
    let syntax = s.file("broken.vlad", "(define (f x) (+ x 1)\n");
    let o = vlad(
        &[
            "compile",
            syntax.to_str().unwrap(),
            "--lib",
            "out/b",
            "--export",
            "f(real)",
        ],
        s.path(),
        "",
    );
    assert_eq!(o.code, Some(1));
    assert!(o.stderr.contains("broken.vlad:1:1"), "{}", o.describe());
}
