//! Robustness: no input makes the reader, the expander or the evaluator panic.
//!
//! Two deterministic (seeded) campaigns of 10,000 cases each:
//! - random byte strings biased toward VLAD's punctuation, fed to the reader, then (if they
//!   read) to the loader and expander, then (if they build) to the evaluator with a step budget;
//! - random well-formed S-expression programs from a grammar covering every special form, every
//!   pattern kind and every primitive (AD ones included), with random arities and argument
//!   shapes, so that most of them are type errors of some kind.
//!
//! Every case runs under `catch_unwind`; every error must carry a non-empty message and render
//! as a diagnostic without panicking. Failures are collected and reported together with the
//! program text that caused them.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use vlad_core::Arena;
use vlad_eval::{Evaluator, Input, Output};
use vlad_syntax::program::{build, load_str};
use vlad_syntax::reader::read;
use vlad_syntax::{Diagnostic, SourceMap};

const CASES: usize = 10_000;
const MAX_STEPS: u64 = 10_000;
/// Evaluation (printing, AD on nested data) may recurse on deep values: give it room.
const STACK_BYTES: usize = 256 << 20;

/// xorshift64*: tiny, deterministic, good enough for test inputs.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// `true` with probability `1/n`.
    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// Why a case failed: the program and what went wrong.
struct Failure {
    case: usize,
    text: String,
    problem: String,
}

/// Checks one error report: a non-empty message that renders without panicking.
fn check_diagnostic(d: &Diagnostic, sources: &SourceMap) -> Result<(), String> {
    if d.message.trim().is_empty() {
        return Err(format!("error with an empty message at {:?}", d.span));
    }
    let r = d.render(sources);
    if !r.contains(&d.message) {
        return Err(format!("rendered diagnostic lost its message: {r}"));
    }
    Ok(())
}

/// Loads, expands and evaluates `text`; `Err` only for a violated invariant (not for an
/// ordinary error of the program, which is expected).
fn run_program(text: &str) -> Result<(), String> {
    let mut sources = SourceMap::new();
    let forms = match load_str(&mut sources, Path::new("fuzz.vlad"), text, &[]) {
        Ok(f) => f,
        Err(d) => return check_diagnostic(&d, &sources),
    };
    let mut arena = Arena::new();
    let exprs = match build(&mut arena, &forms) {
        Ok(e) => e,
        Err(d) => return check_diagnostic(&d, &sources),
    };
    let mut ev = Evaluator::new(arena);
    ev.max_steps = Some(MAX_STEPS);
    for te in exprs {
        let core = match te.core {
            Ok(c) => c,
            Err(d) => {
                check_diagnostic(&d, &sources)?;
                continue;
            }
        };
        // Never touch the test's real stdin/stdout.
        ev.input = Input::from_numbers([1.5, -2.0, 0.0]);
        let (out, _buffer) = Output::buffer();
        ev.output = out;
        ev.steps = 0;
        match ev.eval(core) {
            Ok(v) => {
                let printed = vlad_eval::print::to_string(&v);
                if printed.is_empty() {
                    return Err("a value printed as nothing".into());
                }
            }
            Err(e) => check_diagnostic(&Diagnostic::new(e.span, e.message), &sources)?,
        }
    }
    Ok(())
}

/// Reads `text` on its own first (the reader must never panic), then runs the whole pipeline.
fn run_bytes(text: &str) -> Result<(), String> {
    let mut sources = SourceMap::new();
    let file = sources.add("fuzz.vlad", text);
    match read(file, text) {
        Ok(_) => run_program(text),
        Err(d) => check_diagnostic(&d, &sources),
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".into()
    }
}

/// A case still running after this long counts as hung (the evaluator has a step budget, so
/// nothing legitimate comes close).
const STALL: Duration = Duration::from_secs(20);

/// Runs `CASES` generated cases on a big-stack thread and fails listing every bad one. A case
/// that panics is recorded and the campaign goes on; a case that hangs fails the test at once
/// (the stuck thread is abandoned).
fn campaign(
    name: &str,
    seed: u64,
    generate: fn(&mut Rng) -> String,
    run: fn(&str) -> Result<(), String>,
) {
    let current = Arc::new(Mutex::new((0usize, String::new())));
    let (done, finished) = mpsc::channel();
    let progress = current.clone();
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            let mut rng = Rng::new(seed);
            let mut failures = Vec::new();
            for case in 0..CASES {
                let text = generate(&mut rng);
                *progress.lock().unwrap() = (case, text.clone());
                let problem = match catch_unwind(AssertUnwindSafe(|| run(&text))) {
                    Ok(Ok(())) => continue,
                    Ok(Err(m)) => m,
                    Err(p) => format!("panic: {}", panic_message(p)),
                };
                failures.push(Failure {
                    case,
                    text,
                    problem,
                });
            }
            let _ = done.send(failures);
        })
        .expect("spawn fuzz thread");
    let mut last = (usize::MAX, Instant::now());
    let failures = loop {
        match finished.recv_timeout(Duration::from_millis(200)) {
            Ok(f) => break f,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("{name}: the fuzz thread died")
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let (case, text) = current.lock().unwrap().clone();
                if case != last.0 {
                    last = (case, Instant::now());
                } else if last.1.elapsed() > STALL {
                    panic!(
                        "{name}: case {case} did not finish within {STALL:?}\n  input: {text:?}"
                    );
                }
            }
        }
    };
    if !failures.is_empty() {
        let shown: Vec<String> = failures
            .iter()
            .take(20)
            .map(|f| format!("case {}: {}\n  input: {:?}", f.case, f.problem, f.text))
            .collect();
        panic!(
            "{name}: {} of {CASES} cases failed (first {}):\n{}",
            failures.len(),
            shown.len(),
            shown.join("\n")
        );
    }
}

// ------------------------------------------------------------------------------ byte strings

/// Fragments that make random text look more like VLAD, so later stages get exercised.
const FRAGMENTS: &[&str] = &[
    "(",
    ")",
    "'",
    "(lambda (x) ",
    "(let ((",
    "(define (f x) ",
    "(if ",
    "(cond (",
    "(else ",
    "===> ",
    "(quote ",
    "(cons ",
    "(list ",
    "(cons* ",
    "(and ",
    "(or ",
    "(let* (",
    "(letrec ((",
    "(+ ",
    "(* ",
    "(sqrt ",
    "(bundle ",
    "(perturb ",
    "(tangent ",
    "(zero ",
    "(include \"",
    "#t",
    "#f",
    "#b101",
    "#x1F",
    "#o17",
    "#d10",
    "1e3",
    "-.5",
    "+inf",
    "1/2",
    "'()",
    "x",
    "f",
    "λ",
    "\"",
    "#(",
    "...",
    " . ",
];

/// Bytes the generator favours: VLAD's punctuation and the characters of names and numerals.
const FAVOURED: &[u8] = b"()'#;.\" \n\t()()  abcdefxyz0123456789+-*/<=>?!eE.";

fn random_bytes(rng: &mut Rng) -> String {
    let len = rng.below(200);
    let mut bytes: Vec<u8> = Vec::with_capacity(len + 16);
    while bytes.len() < len {
        match rng.below(16) {
            0 => bytes.extend_from_slice(rng.pick(FRAGMENTS).as_bytes()),
            1 => bytes.push(rng.next() as u8),
            2 => bytes.push(b' ' + rng.below(95) as u8),
            _ => bytes.push(*rng.pick(FAVOURED)),
        }
    }
    bytes.truncate(len);
    // Invalid UTF-8 becomes U+FFFD: the reader sees non-ASCII text too.
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn random_byte_strings_never_panic() {
    campaign("bytes", 0x5eed_0001, random_bytes, run_bytes);
}

// ------------------------------------------------------------------------- grammar programs

/// Every primitive a program can name.
const PRIMS: &[&str] = &[
    "+",
    "-",
    "*",
    "/",
    "sqrt",
    "exp",
    "log",
    "sin",
    "cos",
    "atan",
    "=",
    "<",
    ">",
    "<=",
    ">=",
    "zero?",
    "positive?",
    "negative?",
    "null?",
    "boolean?",
    "real?",
    "pair?",
    "procedure?",
    "perturbation?",
    "forward?",
    "sensitivity?",
    "reverse?",
    "if-procedure",
    "read-real",
    "real",
    "write-real",
    "write",
    "zero",
    "perturb",
    "unperturb",
    "primal",
    "tangent",
    "bundle",
    "sensitize",
    "unsensitize",
    "plus",
    "*j",
    "*j-inverse",
    "build",
    "ifold",
    "get",
    "array-length",
];

/// The forward-AD primitives, favoured so that AD paths get real coverage.
const AD_PRIMS: &[&str] = &[
    "zero",
    "perturb",
    "unperturb",
    "primal",
    "tangent",
    "bundle",
    "plus",
];

/// Names a pattern may (rarely) bind instead of a fresh one: shadowing primitives, keywords
/// and library names is legal.
const SHADOWABLE: &[&str] = &[
    "+", "sqrt", "bundle", "if", "list", "cons", "lambda", "car", "j*",
];

const NUMBERS: &[&str] = &[
    "0", "1", "-1", "2", "3", "0.5", "-2.5", "1e300", "-1e300", "1e-300", "-0.0", "7", "100",
    "#x10", "0.1",
];

/// The library an AD program usually starts with.
const PRELUDE: &str = "(define (j* x) (bundle x (perturb (zero x))))\n\
(define ((derivative-F f) x) (unperturb (tangent ((j* f) (bundle x (perturb 1))))))\n\
(define (car (cons a d)) a)\n\
(define (cdr (cons a d)) d)\n";

struct Gen<'r> {
    rng: &'r mut Rng,
    /// Variables in scope, innermost last.
    scope: Vec<String>,
    fresh: usize,
    prelude: bool,
}

impl Gen<'_> {
    fn fresh_name(&mut self, base: &str) -> String {
        if self.rng.one_in(40) {
            return self.rng.pick(SHADOWABLE).to_string();
        }
        if self.rng.one_in(60) && !self.scope.is_empty() {
            // Possibly a duplicate parameter: an expansion error.
            return self.rng.pick(&self.scope).clone();
        }
        self.fresh += 1;
        format!("{base}{}", self.fresh)
    }

    fn datum(&mut self, depth: usize) -> String {
        match if depth == 0 {
            self.rng.below(4)
        } else {
            self.rng.below(7)
        } {
            0 => self.rng.pick(NUMBERS).to_string(),
            1 => self.rng.pick(&["#t", "#f"]).to_string(),
            2 => "()".into(),
            3 => self.rng.pick(NUMBERS).to_string(),
            4 => {
                let a = self.datum(depth - 1);
                let b = self.datum(depth - 1);
                format!("({a} . {b})")
            }
            5 if self.rng.one_in(2) => {
                let n = self.rng.below(4);
                let items: Vec<String> = (0..n).map(|_| self.datum(depth - 1)).collect();
                format!("#({})", items.join(" "))
            }
            _ => {
                let n = self.rng.below(4);
                let items: Vec<String> = (0..n).map(|_| self.datum(depth - 1)).collect();
                format!("({})", items.join(" "))
            }
        }
    }

    fn leaf(&mut self) -> String {
        match self.rng.below(12) {
            0..=4 if !self.scope.is_empty() => self.rng.pick(&self.scope).clone(),
            0..=2 => self.rng.pick(NUMBERS).to_string(),
            3 | 4 => self.rng.pick(PRIMS).to_string(),
            5 | 6 => self.rng.pick(NUMBERS).to_string(),
            7 => self.rng.pick(&["#t", "#f"]).to_string(),
            8 => "'()".into(),
            9 => format!("'{}", self.datum(2)),
            10 => self.rng.pick(PRIMS).to_string(),
            _ => {
                if self.rng.one_in(4) {
                    "no-such-variable".into()
                } else {
                    "(read-real)".into()
                }
            }
        }
    }

    /// A parameter pattern; binds its variables (pushed onto `scope` by the caller via the
    /// returned names).
    fn pattern(&mut self, depth: usize, names: &mut Vec<String>) -> String {
        let k = if depth == 0 { 0 } else { self.rng.below(10) };
        match k {
            0..=5 => {
                let n = self.fresh_name("v");
                names.push(n.clone());
                n
            }
            6 => self
                .rng
                .pick(&["1", "0", "#t", "#f", "()", "'()", "'(1 2)"])
                .to_string(),
            7 => {
                let a = self.pattern(depth - 1, names);
                let b = self.pattern(depth - 1, names);
                format!("(cons {a} {b})")
            }
            8 => {
                let n = self.rng.below(4);
                let ps: Vec<String> = (0..n).map(|_| self.pattern(depth - 1, names)).collect();
                format!("(list {})", ps.join(" "))
            }
            _ => {
                let n = 1 + self.rng.below(3);
                let ps: Vec<String> = (0..n).map(|_| self.pattern(depth - 1, names)).collect();
                format!("(cons* {})", ps.join(" "))
            }
        }
    }

    /// Lambda formals: a list of patterns, a lone variable, or a dotted list.
    fn formals(&mut self, names: &mut Vec<String>) -> String {
        match self.rng.below(8) {
            0 => {
                let n = self.fresh_name("a");
                names.push(n.clone());
                n
            }
            1 => {
                let a = self.pattern(1, names);
                let r = self.fresh_name("r");
                names.push(r.clone());
                format!("({a} . {r})")
            }
            _ => {
                let n = self.rng.below(4);
                let ps: Vec<String> = (0..n).map(|_| self.pattern(2, names)).collect();
                format!("({})", ps.join(" "))
            }
        }
    }

    fn with_names<T>(&mut self, names: &[String], f: impl FnOnce(&mut Self) -> T) -> T {
        let mark = self.scope.len();
        self.scope.extend(names.iter().cloned());
        let r = f(self);
        self.scope.truncate(mark);
        r
    }

    fn lambda(&mut self, depth: usize) -> String {
        let mut names = Vec::new();
        let f = self.formals(&mut names);
        let body = self.with_names(&names, |g| g.expr(depth - 1));
        format!("(lambda {f} {body})")
    }

    fn args(&mut self, depth: usize, max: usize) -> String {
        let n = self.rng.below(max + 1);
        let xs: Vec<String> = (0..n).map(|_| self.expr(depth)).collect();
        xs.join(" ")
    }

    /// `let`/`let*` bindings: patterns and the names they bind.
    fn bindings(&mut self, depth: usize, sequential: bool) -> (String, Vec<String>) {
        let n = self.rng.below(4);
        let mut all = Vec::new();
        let mut parts = Vec::new();
        for _ in 0..n {
            let e = if sequential {
                let names = all.clone();
                self.with_names(&names, |g| g.expr(depth))
            } else {
                self.expr(depth)
            };
            let p = self.pattern(2, &mut all);
            parts.push(format!("({p} {e})"));
        }
        (parts.join(" "), all)
    }

    fn expr(&mut self, depth: usize) -> String {
        if depth == 0 || self.rng.one_in(depth + 1) {
            return self.leaf();
        }
        let d = depth - 1;
        match self.rng.below(26) {
            0 | 1 => {
                let p = self.rng.pick(PRIMS);
                format!("({p} {})", self.args(d, 3))
            }
            2 => {
                let p = self.rng.pick(AD_PRIMS);
                format!("({p} {})", self.args(d, 2))
            }
            3 if !self.scope.is_empty() => {
                let f = self.rng.pick(&self.scope).clone();
                format!("({f} {})", self.args(d, 3))
            }
            3 | 4 => {
                let l = self.lambda(depth);
                format!("({l} {})", self.args(d, 3))
            }
            5 => self.lambda(depth),
            6 => {
                let (bs, names) = self.bindings(d, false);
                let body = self.with_names(&names, |g| g.expr(d));
                format!("(let ({bs}) {body})")
            }
            7 => {
                let (bs, names) = self.bindings(d, true);
                let body = self.with_names(&names, |g| g.expr(d));
                format!("(let* ({bs}) {body})")
            }
            8 => {
                let n = 1 + self.rng.below(2);
                let names: Vec<String> = (0..n).map(|_| self.fresh_name("g")).collect();
                self.with_names(&names.clone(), |g| {
                    let bs: Vec<String> = names
                        .iter()
                        .map(|n| {
                            let rhs = if g.rng.one_in(10) {
                                g.expr(d)
                            } else {
                                g.lambda(d + 1)
                            };
                            format!("({n} {rhs})")
                        })
                        .collect();
                    let body = g.expr(d);
                    format!("(letrec ({}) {body})", bs.join(" "))
                })
            }
            9 => {
                // Named let: usually a counting loop, sometimes an arbitrary (maybe endless) one.
                let name = self.fresh_name("loop");
                let i = self.fresh_name("i");
                let init = self.expr(d);
                let names = vec![name.clone(), i.clone()];
                self.with_names(&names, |g| {
                    let body = if g.rng.one_in(2) {
                        let limit = g.rng.pick(NUMBERS);
                        let step = g.expr(d);
                        format!("(if (< {i} {limit}) ({name} (+ {i} 1)) {step})")
                    } else {
                        g.expr(d)
                    };
                    format!("(let {name} (({i} {init})) {body})")
                })
            }
            10 | 11 => {
                let c = self.expr(d);
                let a = self.expr(d);
                let b = self.expr(d);
                format!("(if {c} {a} {b})")
            }
            12 => {
                let n = self.rng.below(3);
                let mut clauses: Vec<String> = (0..n)
                    .map(|_| {
                        let t = self.expr(d);
                        let e = self.expr(d);
                        format!("({t} {e})")
                    })
                    .collect();
                clauses.push(format!("(else {})", self.expr(d)));
                format!("(cond {})", clauses.join(" "))
            }
            13 => format!("(and {})", self.args(d, 3)),
            14 => format!("(or {})", self.args(d, 3)),
            15 => {
                let a = self.expr(d);
                let b = self.expr(d);
                format!("(cons {a} {b})")
            }
            16 => format!("(list {})", self.args(d, 3)),
            17 => format!("(cons* {})", self.args(d, 3)),
            18 => format!("(quote {})", self.datum(3)),
            19 => {
                // A bundle of matching (or not) shapes.
                let x = self.expr(d);
                let t = if self.rng.one_in(2) {
                    format!("(zero {x})")
                } else {
                    self.expr(d)
                };
                format!("(bundle {x} (perturb {t}))")
            }
            20 if self.prelude => {
                // A derivative of a random function at a random point.
                let l = self.lambda(depth);
                let x = self.expr(d);
                format!("((derivative-F {l}) {x})")
            }
            21 if self.prelude => {
                let f = self.expr(d);
                let x = self.expr(d);
                format!("(unperturb (tangent ((j* {f}) (bundle {x} (perturb 1)))))")
            }
            22 => {
                // The tangent of something, possibly not a bundle.
                let x = self.expr(d);
                let op = self
                    .rng
                    .pick(&["primal", "tangent", "unperturb", "perturb", "zero"]);
                format!("({op} {x})")
            }
            23 | 24 => {
                // Arrays: usually well-formed, sometimes not (bad counts, indices, procedures).
                let n = if self.rng.one_in(3) {
                    self.expr(d)
                } else {
                    self.rng.below(4).to_string()
                };
                let l = self.lambda(depth);
                match self.rng.below(3) {
                    0 => format!("(build {n} {l})"),
                    1 => format!("(ifold {l} {} {n})", self.expr(d)),
                    _ => format!("(get (build {n} {l}) {})", self.expr(d)),
                }
            }
            _ => {
                let f = self.expr(d);
                format!("({f} {})", self.args(d, 2))
            }
        }
    }

    /// A top-level definition; its name is already in scope.
    fn define(&mut self, name: &str) -> String {
        match self.rng.below(4) {
            0 => format!("(define {name} {})", self.expr(3)),
            1 => {
                let (mut n1, mut n2) = (Vec::new(), Vec::new());
                let a = self.pattern(1, &mut n1);
                let b = self.pattern(1, &mut n2);
                n1.extend(n2);
                let body = self.with_names(&n1, |g| g.expr(4));
                format!("(define (({name} {a}) {b}) {body})")
            }
            _ => {
                let mut names = Vec::new();
                let n = self.rng.below(3);
                let ps: Vec<String> = (0..n).map(|_| self.pattern(2, &mut names)).collect();
                let body = self.with_names(&names, |g| g.expr(4));
                format!("(define ({name} {}) {body})", ps.join(" "))
            }
        }
    }
}

fn random_program(rng: &mut Rng) -> String {
    let prelude = rng.one_in(3);
    let mut g = Gen {
        rng,
        scope: Vec::new(),
        fresh: 0,
        prelude,
    };
    let mut text = String::new();
    if prelude {
        text.push_str(PRELUDE);
        g.scope
            .extend(["j*", "derivative-F", "car", "cdr"].map(String::from));
    }
    let ndefs = g.rng.below(4);
    let names: Vec<String> = (0..ndefs).map(|i| format!("f{i}")).collect();
    g.scope.extend(names.iter().cloned());
    for n in &names {
        text.push_str(&g.define(n));
        text.push('\n');
    }
    let nexprs = 1 + g.rng.below(3);
    for _ in 0..nexprs {
        let e = if g.rng.one_in(12) {
            let local = g.fresh_name("m");
            let scope = std::slice::from_ref(&local);
            let d = g.with_names(scope, |g| g.define(&local));
            let e = g.with_names(scope, |g| g.expr(5));
            format!("(multiform {d} {e})")
        } else {
            g.expr(6)
        };
        text.push_str(&e);
        if g.rng.one_in(4) {
            text.push_str(" ===> ");
            text.push_str(&g.datum(2));
        }
        text.push('\n');
    }
    text
}

#[test]
fn random_programs_never_panic() {
    campaign("programs", 0x5eed_0002, random_program, run_program);
}

/// The generator is meant to reach the evaluator, not just the expander: make sure a healthy
/// share of its programs build and that some evaluate to a value.
#[test]
fn random_programs_reach_the_evaluator() {
    let worker = std::thread::Builder::new()
        .stack_size(STACK_BYTES)
        .spawn(|| {
            let mut rng = Rng::new(0x5eed_0003);
            let (mut built, mut valued) = (0, 0);
            for _ in 0..500 {
                let text = random_program(&mut rng);
                let mut sources = SourceMap::new();
                let Ok(forms) = load_str(&mut sources, Path::new("f.vlad"), &text, &[]) else {
                    continue;
                };
                let mut arena = Arena::new();
                let Ok(exprs) = build(&mut arena, &forms) else {
                    continue;
                };
                let mut ev = Evaluator::new(arena);
                ev.max_steps = Some(MAX_STEPS);
                for te in exprs {
                    let Ok(core) = te.core else { continue };
                    built += 1;
                    ev.input = Input::from_numbers([1.0, 2.0]);
                    ev.output = Output::buffer().0;
                    ev.steps = 0;
                    if ev.eval(core).is_ok() {
                        valued += 1;
                    }
                }
            }
            (built, valued)
        })
        .unwrap();
    let (built, valued) = worker.join().unwrap();
    assert!(built >= 150, "only {built} expressions built");
    assert!(
        valued >= 50,
        "only {valued} expressions evaluated to a value"
    );
}
