//! Procedures of a program compiled to a shared library and called from Rust
//! (`vlad::Library`), against the evaluator (the oracle): each call's value, written as VLAD
//! writes it, or its error message, must be what the evaluator gives for the same call
//! written in the program. Also: the shapes a call is checked against, and programs that
//! cannot be exported.

use std::path::{Path, PathBuf};
use vlad::library::{Arg, Library, Value};
use vlad_core::Arena;
use vlad_eval::Evaluator;
use vlad_syntax::program::{build, load_str};
use vlad_syntax::{Diagnostic, SourceMap};

const PROGRAM: &str = r#"(include "array")
(define (rosen v)
  (let ((x (get v 0)) (y (get v 1)))
    (+ (* (- 1 x) (- 1 x)) (* 100 (* (- y (* x x)) (- y (* x x)))))))
(define (g v) ((grad-R rosen) v))
(define (h v) ((jacob g) v))
(define (df x) ((derivative-F (lambda (y) (* y (sin y)))) x))
(define (mm a b) (matrix-mul a b))
(define (stats v) (cons (vector-sum v) (vector-max v)))
(define (three x y z) (list (+ x y) (* y z) (exp z)))
(define (pos x) (> x 0))
(define (checked x) (if (> x 0) (sqrt x) (car x)))
(define (nothing) '())
(define (make-adder x) (lambda (y) (+ x y)))
(define (ten a b c m e f v n q l)
  (list a b c (array-length (get m 0)) e f (get v 1) (array-length n) (get (get q 0) 2) (array-length l)))
(define k 3)
"#;

fn lib_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lib")
}

/// The program in a file of its own (the library's messages name it).
fn program_file(dir: &Path) -> PathBuf {
    let file = dir.join("prog.vlad");
    std::fs::write(&file, PROGRAM).unwrap();
    file
}

/// A VLAD literal of an argument.
fn literal(a: &Arg) -> String {
    match a {
        Arg::Real(x) => vlad_core::number::format_real(*x),
        Arg::Reals(xs) => format!(
            "#({})",
            xs.iter()
                .map(|x| vlad_core::number::format_real(*x))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Arg::Array(xs) => format!(
            "#({})",
            xs.iter().map(literal).collect::<Vec<_>>().join(" ")
        ),
    }
}

/// What the evaluator gives for `(name args...)` at the end of the program: the value
/// written, or the error rendered as `vlad run` renders it.
fn oracle(file: &Path, name: &str, args: &[Arg]) -> Result<String, String> {
    let call: Vec<String> = std::iter::once(name.to_string())
        .chain(args.iter().map(literal))
        .collect();
    let text = format!("{PROGRAM}\n({})\n", call.join(" "));
    let mut sources = SourceMap::new();
    let forms = load_str(&mut sources, file, &text, &[lib_dir()]).unwrap();
    let mut arena = Arena::new();
    let exprs = build(&mut arena, &forms).unwrap();
    let mut ev = Evaluator::new(arena);
    let core = exprs.last().unwrap().core.clone().unwrap();
    match ev.eval(core) {
        Ok(v) => Ok(ev.render(&v)),
        Err(e) => Err(Diagnostic::new(e.span, e.message).render(&sources)),
    }
}

#[test]
fn exported_procedures_agree_with_the_evaluator() {
    let dir = tempfile::tempdir().unwrap();
    let file = program_file(dir.path());
    let mut lib = Library::build_with(
        &file,
        &[lib_dir()],
        &[
            "g(array)",
            "h(array)",
            "df(real)",
            "mm(array(array), array(array))",
            "stats(array)",
            "three(real, real, real)",
            "pos(real)",
            "checked(real)",
            "nothing()",
            "ten(real, real, real, array(array), real, real, array, array(array), \
             array(array), array(array))",
        ],
        false,
    )
    .unwrap();
    let row = |xs: &'static [f64]| Arg::Reals(xs);
    let cases: Vec<(&str, Vec<Arg>)> = vec![
        ("g", vec![row(&[-1.2, 1.0])]),
        ("g", vec![row(&[0.5, 0.25, 9.0])]),
        ("h", vec![row(&[-1.2, 1.0])]),
        ("df", vec![Arg::Real(2.0)]),
        ("df", vec![Arg::Real(-1e-3)]),
        (
            "mm",
            vec![
                Arg::Array(vec![row(&[1.0, 2.0]), row(&[3.0, 4.0])]),
                Arg::Array(vec![row(&[0.5]), row(&[-1.0])]),
            ],
        ),
        ("stats", vec![row(&[3.0, -1.0, 7.5])]),
        (
            "three",
            vec![Arg::Real(1.0), Arg::Real(2.0), Arg::Real(0.5)],
        ),
        ("pos", vec![Arg::Real(-3.0)]),
        ("pos", vec![Arg::Real(3.0)]),
        ("checked", vec![Arg::Real(4.0)]),
        // A run-time error, then calls that work again.
        ("checked", vec![Arg::Real(-1.0)]),
        ("checked", vec![Arg::Real(9.0)]),
        ("nothing", vec![]),
        // An index out of range inside the library.
        ("g", vec![row(&[1.0])]),
        ("stats", vec![row(&[])]),
        ("g", vec![row(&[2.0, 2.0])]),
        // Ten arguments: the analysis boxes the end of the deep pair they make.
        (
            "ten",
            vec![
                Arg::Real(1.0),
                Arg::Real(2.0),
                Arg::Real(3.0),
                Arg::Array(vec![row(&[1.0, 2.0, 3.0])]),
                Arg::Real(5.0),
                Arg::Real(6.0),
                row(&[7.0, 8.0]),
                Arg::Array(vec![row(&[1.0]), row(&[2.0])]),
                Arg::Array(vec![row(&[1.0, 2.0, 9.0])]),
                Arg::Array(vec![row(&[1.0]), row(&[2.0]), row(&[3.0])]),
            ],
        ),
    ];
    for (name, args) in &cases {
        let expected = oracle(&file, name, args);
        let got = lib.call(name, args).map(|v| v.to_string());
        assert_eq!(got, expected, "({name} {:?})", args);
    }
    assert!(lib.call("checked", &[Arg::Real(-1.0)]).is_err());
    assert_eq!(lib.call("pos", &[Arg::Real(1.0)]), Ok(Value::Bool(true)));
    let three = lib
        .call("three", &[Arg::Real(1.0), Arg::Real(2.0), Arg::Real(0.0)])
        .unwrap();
    assert_eq!(
        three.list(),
        Some(vec![Value::Real(3.0), Value::Real(0.0), Value::Real(1.0)])
    );
    let g = lib.call("g", &[row(&[1.0, 1.0])]).unwrap();
    assert_eq!(g.reals(), Some(vec![0.0, 0.0]));
    assert_eq!(
        lib.exports().map(|s| s.to_string()).collect::<Vec<_>>()[3],
        "mm(array(array), array(array))"
    );
}

#[test]
fn calls_are_checked_against_the_signatures() {
    let dir = tempfile::tempdir().unwrap();
    let file = program_file(dir.path());
    let mut lib = Library::build_with(
        &file,
        &[lib_dir()],
        &["g(array)", "mm(array(array), array(array))"],
        false,
    )
    .unwrap();
    let err = |r: Result<Value, String>| r.unwrap_err();
    assert!(err(lib.call("rosen", &[Arg::Reals(&[1.0])])).contains("does not export `rosen`"));
    assert!(err(lib.call("g", &[])).contains("takes 1 arguments (g(array)), not 0"));
    assert!(err(lib.call("g", &[Arg::Real(1.0)])).contains("argument 1 of `g` must be array"));
    let m = Arg::Array(vec![Arg::Reals(&[1.0])]);
    assert!(err(lib.call("mm", &[m.clone(), Arg::Reals(&[1.0])]))
        .contains("argument 2 of `mm` must be array(array)"));
    assert!(
        err(lib.call("mm", &[m.clone(), Arg::Array(vec![Arg::Real(1.0)])])).contains("argument 2")
    );
    // Rows of different lengths are the program's business: its own message.
    let ragged = Arg::Array(vec![Arg::Reals(&[1.0, 2.0]), Arg::Reals(&[1.0])]);
    let expected = oracle(&file, "mm", &[m.clone(), ragged.clone()]);
    assert_eq!(
        lib.call("mm", &[m, ragged]).map(|v| v.to_string()),
        expected
    );
}

#[test]
fn what_cannot_be_exported_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let file = program_file(dir.path());
    let build = |sig: &str| match Library::build_with(&file, &[lib_dir()], &[sig], false) {
        Ok(_) => panic!("{sig} was exported"),
        Err(e) => e,
    };
    for (sig, why) in [
        ("nosuch(real)", "unbound variable `nosuch`"),
        ("k()", "cannot export `k()`: it is a real, not a procedure"),
        (
            "g(real)",
            "no call with arguments of these shapes returns a value",
        ),
        ("df(real, real)", "a call such as (df 1 1)"),
        ("make-adder(real)", "its result may hold a procedure"),
        ("g(vector)", "`vector` is not a shape"),
    ] {
        let e = build(sig);
        assert!(e.contains(why), "{sig}: {e}");
    }
    let e = Library::build_with(&file, &[lib_dir()], &["g(array)", "g(array)"], false)
        .err()
        .unwrap();
    assert!(e.contains("exported twice"), "{e}");
}
