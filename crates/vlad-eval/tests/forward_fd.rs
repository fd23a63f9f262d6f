//! Forward-mode AD against finite differences (property tests).
//!
//! Random expression trees over the differentiable primitives (`+ - * / sqrt exp log sin cos
//! atan`, constants) are rendered as VLAD functions and differentiated with `derivative-F`,
//! defined as in paper 001 from the forward primitives:
//! - the first derivative must agree with central finite differences of the function (relative
//!   1e-6) and, nearly to the last bit, with dual numbers computed here in Rust by the tangent
//!   rules of issue 3;
//! - the nested second derivative (`derivative-F` of `derivative-F`) must agree with central
//!   differences of the first derivative (relative 1e-4);
//! - for functions of two variables, the directional derivative obtained by bundling a pair,
//!   `(bundle (cons x y) (perturb (cons dx dy)))`, must agree with finite differences along
//!   (dx, dy).
//!
//! Trees stay in the domain of every primitive by construction: the argument of `sqrt` and
//! `log`, the divisor of `/` and the second argument of `atan` are `(+ 1.5 (* u u))`, and `exp`
//! sees only `u / (1.5 + u²)`, in [-0.41, 0.41].
//!
//! Tolerances: finite differences err by truncation (h² f'''/6) and by rounding (about
//! k·eps·M/h, where M is the largest magnitude of any intermediate value and k the number of
//! operations). So each comparison allows a relative error plus an absolute floor proportional to
//! M, and cases where the finite difference itself is unreliable (the estimates with steps h and
//! 2h disagree by more than half the tolerance: high curvature, as in sin of a high-degree
//! polynomial) are skipped with `prop_assume!`; the skip rate is small.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use std::fmt::Write as _;
use std::path::Path;
use vlad_core::Arena;
use vlad_eval::{Evaluator, Input, Output};
use vlad_syntax::program::{build, load_str};
use vlad_syntax::SourceMap;

const STACK_BYTES: usize = 256 << 20;
const CASES: u32 = 128;
/// Far more than the properties need (about a second in release, a few in debug).
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(300);

/// An expression in the variables x and y.
#[derive(Clone, Debug)]
enum E {
    X,
    Y,
    C(f64),
    Add(Box<E>, Box<E>),
    Sub(Box<E>, Box<E>),
    Mul(Box<E>, Box<E>),
    /// `a / (1.5 + b²)`
    Div(Box<E>, Box<E>),
    /// `sqrt(1.5 + a²)`
    Sqrt(Box<E>),
    /// `exp(a / (1.5 + a²))`
    Exp(Box<E>),
    /// `log(1.5 + a²)`
    Log(Box<E>),
    Sin(Box<E>),
    Cos(Box<E>),
    /// `atan(a, 1.5 + b²)`
    Atan(Box<E>, Box<E>),
    /// `atan(1.5 + b², a)`
    AtanR(Box<E>, Box<E>),
}

// ------------------------------------------------------------------------------- rendering

/// `(+ 1.5 (* u u))` with `u` bound once by a `let`.
fn positive(a: &E, out: &mut String) {
    out.push_str("(let ((u ");
    render(a, out);
    out.push_str(")) (+ 1.5 (* u u)))");
}

fn binary(op: &str, a: &E, b: &E, out: &mut String) {
    let _ = write!(out, "({op} ");
    render(a, out);
    out.push(' ');
    render(b, out);
    out.push(')');
}

fn unary(op: &str, a: &E, out: &mut String) {
    let _ = write!(out, "({op} ");
    render(a, out);
    out.push(')');
}

/// The VLAD text of `e`.
fn render(e: &E, out: &mut String) {
    match e {
        E::X => out.push('x'),
        E::Y => out.push('y'),
        // Constants are multiples of 1/8: exact in binary and in decimal.
        E::C(c) => {
            let _ = write!(out, "{c}");
        }
        E::Add(a, b) => binary("+", a, b, out),
        E::Sub(a, b) => binary("-", a, b, out),
        E::Mul(a, b) => binary("*", a, b, out),
        E::Div(a, b) => {
            out.push_str("(/ ");
            render(a, out);
            out.push(' ');
            positive(b, out);
            out.push(')');
        }
        E::Sqrt(a) => {
            out.push_str("(sqrt ");
            positive(a, out);
            out.push(')');
        }
        E::Log(a) => {
            out.push_str("(log ");
            positive(a, out);
            out.push(')');
        }
        // Through a lambda application rather than a `let`, for variety.
        E::Exp(a) => {
            out.push_str("((lambda (v) (exp (/ v (+ 1.5 (* v v))))) ");
            render(a, out);
            out.push(')');
        }
        E::Sin(a) => unary("sin", a, out),
        E::Cos(a) => unary("cos", a, out),
        E::Atan(a, b) => {
            out.push_str("(atan ");
            render(a, out);
            out.push(' ');
            positive(b, out);
            out.push(')');
        }
        E::AtanR(a, b) => {
            out.push_str("(atan ");
            positive(b, out);
            out.push(' ');
            render(a, out);
            out.push(')');
        }
    }
}

fn text(e: &E) -> String {
    let mut s = String::new();
    render(e, &mut s);
    s
}

// ------------------------------------------------------------------ dual numbers in Rust

/// A value and its tangent, with the tangent rules of issue 3 in the same order of operations.
#[derive(Clone, Copy, Debug)]
struct Dual {
    v: f64,
    d: f64,
}

/// Evaluates `e` on dual numbers, recording in `m` the largest magnitude of any intermediate
/// value and in `m1` that of any value or tangent.
struct Duals {
    m: f64,
    m1: f64,
}

impl Duals {
    fn see(&mut self, r: Dual) -> Dual {
        self.m = self.m.max(r.v.abs());
        self.m1 = self.m1.max(r.v.abs()).max(r.d.abs());
        r
    }

    fn mul(&mut self, a: Dual, b: Dual) -> Dual {
        self.see(Dual {
            v: a.v * b.v,
            d: b.v * a.d + a.v * b.d,
        })
    }

    fn add(&mut self, a: Dual, b: Dual) -> Dual {
        self.see(Dual {
            v: a.v + b.v,
            d: a.d + b.d,
        })
    }

    fn div(&mut self, a: Dual, b: Dual) -> Dual {
        self.see(Dual {
            v: a.v / b.v,
            d: (b.v * a.d - a.v * b.d) / (b.v * b.v),
        })
    }

    fn positive(&mut self, u: Dual) -> Dual {
        let uu = self.mul(u, u);
        self.add(Dual { v: 1.5, d: 0.0 }, uu)
    }

    fn atan(&mut self, a: Dual, b: Dual) -> Dual {
        self.see(Dual {
            v: a.v.atan2(b.v),
            d: (b.v * a.d - a.v * b.d) / (a.v * a.v + b.v * b.v),
        })
    }

    fn eval(&mut self, e: &E, x: Dual, y: Dual) -> Dual {
        let r = match e {
            E::X => x,
            E::Y => y,
            E::C(c) => Dual { v: *c, d: 0.0 },
            E::Add(a, b) => {
                let (a, b) = (self.eval(a, x, y), self.eval(b, x, y));
                self.add(a, b)
            }
            E::Sub(a, b) => {
                let (a, b) = (self.eval(a, x, y), self.eval(b, x, y));
                Dual {
                    v: a.v - b.v,
                    d: a.d - b.d,
                }
            }
            E::Mul(a, b) => {
                let (a, b) = (self.eval(a, x, y), self.eval(b, x, y));
                self.mul(a, b)
            }
            E::Div(a, b) => {
                let a = self.eval(a, x, y);
                let b = self.eval(b, x, y);
                let b = self.positive(b);
                self.div(a, b)
            }
            E::Sqrt(a) => {
                let a = self.eval(a, x, y);
                let p = self.positive(a);
                let s = p.v.sqrt();
                Dual {
                    v: s,
                    d: p.d / (s + s),
                }
            }
            E::Log(a) => {
                let a = self.eval(a, x, y);
                let p = self.positive(a);
                Dual {
                    v: p.v.ln(),
                    d: p.d / p.v,
                }
            }
            E::Exp(a) => {
                let a = self.eval(a, x, y);
                let p = self.positive(a);
                let q = self.div(a, p);
                let e = q.v.exp();
                Dual { v: e, d: e * q.d }
            }
            E::Sin(a) => {
                let a = self.eval(a, x, y);
                Dual {
                    v: a.v.sin(),
                    d: a.v.cos() * a.d,
                }
            }
            E::Cos(a) => {
                let a = self.eval(a, x, y);
                Dual {
                    v: a.v.cos(),
                    d: 0.0 - a.v.sin() * a.d,
                }
            }
            E::Atan(a, b) => {
                let a = self.eval(a, x, y);
                let b = self.eval(b, x, y);
                let b = self.positive(b);
                self.atan(a, b)
            }
            E::AtanR(a, b) => {
                let b = self.eval(b, x, y);
                let b = self.positive(b);
                let a = self.eval(a, x, y);
                self.atan(b, a)
            }
        };
        self.see(r)
    }
}

/// `(f(x, y), directional derivative along (dx, dy), M, M1)` by dual numbers.
fn duals(e: &E, x: f64, y: f64, dx: f64, dy: f64) -> (Dual, f64, f64) {
    let mut s = Duals { m: 0.0, m1: 0.0 };
    let r = s.eval(e, Dual { v: x, d: dx }, Dual { v: y, d: dy });
    (r, s.m, s.m1)
}

// ------------------------------------------------------------------------- running VLAD

const PRELUDE: &str = "(define (j* x) (bundle x (perturb (zero x))))\n\
(define ((derivative-F f) x) (unperturb (tangent ((j* f) (bundle x (perturb 1))))))\n";

/// Runs `program` (whose last form evaluates to a list of reals), feeding `inputs` to
/// `read-real`; returns the reals.
fn run_reals(program: &str, inputs: &[f64]) -> Result<Vec<f64>, String> {
    let mut sources = SourceMap::new();
    let forms = load_str(&mut sources, Path::new("prop.vlad"), program, &[])
        .map_err(|d| d.render(&sources))?;
    let mut arena = Arena::new();
    let exprs = build(&mut arena, &forms).map_err(|d| d.render(&sources))?;
    let core = exprs
        .last()
        .ok_or("no expression")?
        .core
        .clone()
        .map_err(|d| d.render(&sources))?;
    let mut ev = Evaluator::new(arena);
    ev.input = Input::from_numbers(inputs.iter().copied());
    ev.output = Output::buffer().0;
    ev.max_steps = Some(50_000_000);
    let v = ev.eval(core).map_err(|e| e.message)?;
    let printed = vlad_eval::print::to_string(&v);
    let inner = printed
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("not a list of reals: {printed}"))?;
    inner
        .split_whitespace()
        .map(|t| match t {
            "+inf.0" => Ok(f64::INFINITY),
            "-inf.0" => Ok(f64::NEG_INFINITY),
            "+nan.0" | "-nan.0" => Ok(f64::NAN),
            _ => t
                .parse::<f64>()
                .map_err(|_| format!("not a real: {t} in {printed}")),
        })
        .collect()
}

/// A program that reads `n` reals into `p0 .. p(n-1)` and evaluates `body` (a list).
fn reading(defs: &str, n: usize, body: &str) -> String {
    let mut s = String::from(PRELUDE);
    s.push_str(defs);
    s.push_str("(let* (");
    for i in 0..n {
        let _ = write!(s, "(p{i} (read-real)) ");
    }
    let _ = writeln!(s, ") {body})");
    s
}

/// Step for central differences at `x`, and the points x ± h, x ± 2h (`h` made exact).
fn steps(x: f64) -> (f64, [f64; 4]) {
    let h = 1e-6 * x.abs().max(1.0);
    let xp = x + h;
    let h = xp - x;
    (h, [x + h, x - h, x + 2.0 * h, x - 2.0 * h])
}

fn all_finite(v: &[f64]) -> bool {
    v.iter().all(|x| x.is_finite())
}

fn close(a: f64, b: f64, rel: f64, floor: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()) + floor
}

// --------------------------------------------------------------------------- strategies

fn tree(two_vars: bool) -> impl Strategy<Value = E> {
    let var = if two_vars {
        prop_oneof![Just(E::X), Just(E::Y)].boxed()
    } else {
        Just(E::X).boxed()
    };
    let leaf = prop_oneof![
        3 => var,
        1 => (-24i32..=24).prop_map(|k| E::C(f64::from(k) / 8.0)),
    ];
    leaf.prop_recursive(4, 24, 2, |inner| {
        let b = || inner.clone().prop_map(Box::new);
        prop_oneof![
            (b(), b()).prop_map(|(a, b)| E::Add(a, b)),
            (b(), b()).prop_map(|(a, b)| E::Sub(a, b)),
            (b(), b()).prop_map(|(a, b)| E::Mul(a, b)),
            (b(), b()).prop_map(|(a, b)| E::Div(a, b)),
            b().prop_map(E::Sqrt),
            b().prop_map(E::Exp),
            b().prop_map(E::Log),
            b().prop_map(E::Sin),
            b().prop_map(E::Cos),
            (b(), b()).prop_map(|(a, b)| E::Atan(a, b)),
            (b(), b()).prop_map(|(a, b)| E::AtanR(a, b)),
        ]
    })
}

/// Runs a property with a deterministic seed on a big-stack thread; on failure, panics with
/// the shrunk case rendered as VLAD.
fn check<S, M>(name: &'static str, make: M, property: fn(&S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: std::fmt::Debug + 'static,
    M: FnOnce() -> S + Send + 'static,
{
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            let strategy = make();
            let config = Config {
                cases: CASES,
                failure_persistence: None,
                max_global_rejects: 4 * CASES,
                ..Config::default()
            };
            let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
            let mut runner = TestRunner::new_with_rng(config, rng);
            let outcome = match runner.run(&strategy, |v| property(&v)) {
                Ok(()) => Ok(()),
                Err(TestError::Fail(why, v)) => Err(format!("{why}\nminimal case: {v:?}")),
                Err(TestError::Abort(why)) => Err(format!("aborted: {why}")),
            };
            let _ = done.send(outcome);
        })
        .expect("spawn property thread");
    // A hung evaluator fails the test instead of hanging it (the stuck thread is abandoned).
    match finished.recv_timeout(DEADLINE) {
        Ok(Ok(())) => {}
        Ok(Err(m)) => panic!("{name}: {m}"),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{name}: did not finish within {DEADLINE:?}")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            panic!("{name}: the property thread died")
        }
    }
}

// ---------------------------------------------------------------------------- properties

fn first_derivative((e, x): &(E, f64)) -> Result<(), TestCaseError> {
    let x = *x;
    let body = text(e);
    let (h, pts) = steps(x);
    let defs = format!("(define (f x) {body})\n");
    let program = reading(
        &defs,
        5,
        "(list (f p0) ((derivative-F f) p0) (f p1) (f p2) (f p3) (f p4))",
    );
    let got = run_reals(&program, &[x, pts[0], pts[1], pts[2], pts[3]])
        .map_err(|m| TestCaseError::fail(format!("evaluation failed: {m}\n{program}")))?;
    let (r, m, m1) = duals(e, x, 0.0, 1.0, 0.0);
    prop_assume!(all_finite(&got) && r.v.is_finite() && r.d.is_finite() && m1.is_finite());
    let [fx, ad, fp, fm, fp2, fm2] = got[..] else {
        return Err(TestCaseError::fail(format!(
            "expected 6 reals, got {got:?}"
        )));
    };
    // The primal is the plain value, the tangent the dual numbers' one (same rules).
    prop_assert!(
        close(fx, r.v, 1e-12, 1e-14 * (1.0 + m)),
        "f(x) = {fx}, expected {}\n{program}",
        r.v
    );
    prop_assert!(
        close(ad, r.d, 1e-9, 1e-12 * (1.0 + m1)),
        "AD derivative {ad} differs from dual numbers {}\n{program}",
        r.d
    );
    let fd = (fp - fm) / (2.0 * h);
    let fd2 = (fp2 - fm2) / (4.0 * h);
    let tol = |a: f64, b: f64| 1e-6 * a.abs().max(b.abs()) + 1e-8 * (1.0 + m);
    prop_assume!((fd - fd2).abs() <= tol(fd, fd2) / 2.0);
    prop_assert!(
        (ad - fd).abs() <= tol(ad, fd),
        "derivative at x = {x}: AD {ad}, central difference {fd} (h = {h}, M = {m})\n{program}"
    );
    Ok(())
}

fn second_derivative((e, x): &(E, f64)) -> Result<(), TestCaseError> {
    let x = *x;
    let body = text(e);
    let (h, pts) = steps(x);
    let defs = format!("(define (f x) {body})\n(define df (derivative-F f))\n");
    let program = reading(
        &defs,
        5,
        "(list ((derivative-F df) p0) (df p1) (df p2) (df p3) (df p4))",
    );
    let got = run_reals(&program, &[x, pts[0], pts[1], pts[2], pts[3]])
        .map_err(|m| TestCaseError::fail(format!("evaluation failed: {m}\n{program}")))?;
    let (_, _, m1) = duals(e, x, 0.0, 1.0, 0.0);
    prop_assume!(all_finite(&got) && m1.is_finite());
    let [ad2, dp, dm, dp2, dm2] = got[..] else {
        return Err(TestCaseError::fail(format!(
            "expected 5 reals, got {got:?}"
        )));
    };
    let fd = (dp - dm) / (2.0 * h);
    let fd2 = (dp2 - dm2) / (4.0 * h);
    let tol = |a: f64, b: f64| 1e-4 * a.abs().max(b.abs()) + 1e-7 * (1.0 + m1);
    prop_assume!((fd - fd2).abs() <= tol(fd, fd2) / 2.0);
    prop_assert!(
        (ad2 - fd).abs() <= tol(ad2, fd),
        "second derivative at x = {x}: nested AD {ad2}, central difference of AD first \
         derivatives {fd} (h = {h}, M1 = {m1})\n{program}"
    );
    Ok(())
}

type TwoVarCase = (E, (f64, f64), (f64, f64));

fn directional_derivative((e, (x, y), (dx, dy)): &TwoVarCase) -> Result<(), TestCaseError> {
    let (x, y, dx, dy) = (*x, *y, *dx, *dy);
    let body = text(e);
    // Steps along the direction: t = ±h, ±2h.
    let h = 1e-6 * x.abs().max(y.abs()).max(1.0);
    let at = |t: f64| (x + t * dx, y + t * dy);
    let (xp, yp) = at(h);
    let (xm, ym) = at(-h);
    let (xp2, yp2) = at(2.0 * h);
    let (xm2, ym2) = at(-2.0 * h);
    let defs = format!("(define (f (cons x y)) {body})\n");
    let program = reading(
        &defs,
        12,
        "(list (unperturb (tangent ((j* f) (bundle (cons p0 p1) (perturb (cons p2 p3))))))
               (f (cons p4 p5)) (f (cons p6 p7)) (f (cons p8 p9)) (f (cons p10 p11)))",
    );
    let got = run_reals(
        &program,
        &[x, y, dx, dy, xp, yp, xm, ym, xp2, yp2, xm2, ym2],
    )
    .map_err(|m| TestCaseError::fail(format!("evaluation failed: {m}\n{program}")))?;
    let (r, m, m1) = duals(e, x, y, dx, dy);
    prop_assume!(all_finite(&got) && r.d.is_finite() && m1.is_finite());
    let [ad, fp, fm, fp2, fm2] = got[..] else {
        return Err(TestCaseError::fail(format!(
            "expected 5 reals, got {got:?}"
        )));
    };
    prop_assert!(
        close(ad, r.d, 1e-9, 1e-12 * (1.0 + m1)),
        "directional derivative {ad} differs from dual numbers {}\n{program}",
        r.d
    );
    let fd = (fp - fm) / (2.0 * h);
    let fd2 = (fp2 - fm2) / (4.0 * h);
    let tol = |a: f64, b: f64| 1e-6 * a.abs().max(b.abs()) + 1e-8 * (1.0 + m);
    prop_assume!((fd - fd2).abs() <= tol(fd, fd2) / 2.0);
    prop_assert!(
        (ad - fd).abs() <= tol(ad, fd),
        "directional derivative at ({x}, {y}) along ({dx}, {dy}): AD {ad}, central \
         difference {fd} (h = {h}, M = {m})\n{program}"
    );
    Ok(())
}

#[test]
fn first_derivative_matches_finite_differences() {
    check(
        "first derivative",
        || (tree(false), -2.0f64..2.0),
        first_derivative,
    );
}

#[test]
fn nested_second_derivative_matches_finite_differences() {
    check(
        "second derivative",
        || (tree(false), -2.0f64..2.0),
        second_derivative,
    );
}

#[test]
fn directional_derivative_of_a_pair_matches_finite_differences() {
    check(
        "directional derivative",
        || {
            (
                tree(true),
                (-2.0f64..2.0, -2.0f64..2.0),
                (-1.0f64..1.0, -1.0f64..1.0),
            )
        },
        directional_derivative,
    );
}
