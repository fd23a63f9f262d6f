//! Differential test of the specialised program against the evaluator (the oracle) on random
//! programs: closures, pairs, conditionals, loops and recursion, `real`, and forward and
//! reverse derivatives (nested), built from a seeded grammar so that most of them run without
//! error. Each program is analysed, specialised and run by the executor; its value (printed)
//! or its error (message and position) must be the evaluator's. 1,000 programs per run.

use std::path::Path;
use vlad_core::Arena;
use vlad_eval::io::{Input, Output};
use vlad_eval::Evaluator;
use vlad_syntax::program::{build, load_str};
use vlad_syntax::SourceMap;

const CASES: usize = 1000;
const MAX_STEPS: u64 = 2_000_000;

/// xorshift64*: tiny, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A random real-valued expression over the real variables `vars`, `depth` levels deep.
fn real(rng: &mut Rng, vars: &mut Vec<String>, depth: u32, fresh: &mut u32) -> String {
    let leaf = depth == 0 || rng.below(5) == 0;
    if leaf {
        return match rng.below(3) {
            0 if !vars.is_empty() => vars[rng.below(vars.len())].clone(),
            1 => format!("(real {})", rng.below(7) as f64 / 2.0 - 1.0),
            _ => format!("{}", rng.below(9) as f64 / 4.0 - 0.5),
        };
    }
    let d = depth - 1;
    match rng.below(14) {
        0 | 1 => {
            let op = ["+", "-", "*"][rng.below(3)];
            let a = real(rng, vars, d, fresh);
            let b = real(rng, vars, d, fresh);
            format!("({op} {a} {b})")
        }
        2 => {
            let op = ["sin", "cos", "exp"][rng.below(3)];
            let a = real(rng, vars, d, fresh);
            format!("({op} (* 0.1 {a}))")
        }
        3 => {
            let (a, b) = (real(rng, vars, d, fresh), real(rng, vars, d, fresh));
            let (x, y) = (real(rng, vars, d, fresh), real(rng, vars, d, fresh));
            format!("(if (< {a} {b}) {x} {y})")
        }
        4 => {
            let x = name("x", fresh);
            let e = real(rng, vars, d, fresh);
            vars.push(x.clone());
            let body = real(rng, vars, d, fresh);
            vars.pop();
            format!("(let (({x} {e})) {body})")
        }
        5 => {
            // A closure bound, then called (possibly twice: two arguments, one code).
            let (f, y) = (name("f", fresh), name("y", fresh));
            vars.push(y.clone());
            let body = real(rng, vars, d, fresh);
            vars.pop();
            let (a, b) = (real(rng, vars, d, fresh), real(rng, vars, d, fresh));
            format!("(let (({f} (lambda ({y}) {body}))) (+ ({f} {a}) ({f} {b})))")
        }
        6 => {
            let (a, b) = (real(rng, vars, d, fresh), real(rng, vars, d, fresh));
            let (p, q) = (name("p", fresh), name("q", fresh));
            vars.push(p.clone());
            vars.push(q.clone());
            let body = real(rng, vars, d, fresh);
            vars.pop();
            vars.pop();
            format!("(let (((cons {p} {q}) (cons {a} {b}))) {body})")
        }
        7 => {
            let (a, b) = (real(rng, vars, d, fresh), real(rng, vars, d, fresh));
            format!("({} (cons {a} {b}))", ["car", "cdr"][rng.below(2)])
        }
        8 | 9 => {
            // A loop: a known or unknown trip count, an accumulator updated by the body.
            let (lp, i, acc) = (name("loop", fresh), name("i", fresh), name("acc", fresh));
            let n = if rng.below(2) == 0 {
                format!("{}", rng.below(5))
            } else {
                format!("(real {})", rng.below(5))
            };
            let init = real(rng, vars, d, fresh);
            vars.push(acc.clone());
            vars.push(i.clone());
            let step = real(rng, vars, d, fresh);
            vars.pop();
            vars.pop();
            format!(
                "(let {lp} (({i} 0) ({acc} {init})) (if (< {i} {n}) ({lp} (+ {i} 1) (* 0.5 {step})) {acc}))"
            )
        }
        10 => {
            // Non-tail recursion through a named procedure.
            let (r, k) = (name("r", fresh), name("k", fresh));
            let base = real(rng, vars, d, fresh);
            vars.push(k.clone());
            let step = real(rng, vars, d, fresh);
            vars.pop();
            format!(
                "(letrec (({r} (lambda ({k}) (if (< {k} 1) {base} (+ (* 0.5 {step}) ({r} (- {k} 1))))))) ({r} {}))",
                rng.below(4)
            )
        }
        11 | 12 => {
            let mode = ["derivative-F", "derivative-R"][rng.below(2)];
            let x = name("x", fresh);
            vars.push(x.clone());
            let body = real(rng, vars, d, fresh);
            vars.pop();
            let at = real(rng, vars, d, fresh);
            format!("(({mode} (lambda ({x}) {body})) {at})")
        }
        _ => {
            // A closure returned by a procedure and called later.
            let (mk, a, y) = (name("mk", fresh), name("a", fresh), name("y", fresh));
            vars.push(a.clone());
            vars.push(y.clone());
            let body = real(rng, vars, d, fresh);
            vars.pop();
            vars.pop();
            let (c, e) = (real(rng, vars, d, fresh), real(rng, vars, d, fresh));
            format!("(let (({mk} (lambda ({a}) (lambda ({y}) {body})))) (({mk} {c}) {e}))")
        }
    }
}

/// A fresh variable name.
fn name(prefix: &str, fresh: &mut u32) -> String {
    *fresh += 1;
    format!("{prefix}{fresh}")
}

/// What a run gave: the printed value, or the error and its position.
fn outcome(r: Result<vlad_eval::value::Value, vlad_eval::EvalError>, ev: &mut Evaluator) -> String {
    match r {
        Ok(v) => ev.render(&v),
        Err(e) => format!("error at {:?}: {}", e.span, e.message),
    }
}

/// Runs one program both ways; `Ok(true)` when it gave a value (not an error).
fn run_case(text: &str) -> Result<bool, String> {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lib");
    let mut sources = SourceMap::new();
    let forms = load_str(&mut sources, Path::new("random.vlad"), text, &[lib])
        .map_err(|d| format!("does not load: {}", d.message))?;
    let mut arena = Arena::new();
    let exprs = build(&mut arena, &forms).map_err(|d| format!("does not build: {}", d.message))?;
    let mut ev = Evaluator::new(arena);
    ev.max_steps = Some(MAX_STEPS);
    let mut value = false;
    for te in exprs {
        let core = te
            .core
            .map_err(|d| format!("does not expand: {}", d.message))?;
        ev.input = Input::from_numbers([]);
        ev.output = Output::buffer().0;
        ev.steps = 0;
        let expected = ev.eval(core);
        if matches!(&expected, Err(e) if e.message.contains("steps")) {
            continue;
        }
        value = expected.is_ok();
        let expected = outcome(expected, &mut ev);
        let compiled = {
            let mut an = vlad_flow::Analysis::new(&mut ev);
            an.analyse(core).and_then(|k| an.specialise(&[k]))
        };
        let program = compiled.map_err(|e| format!("does not compile: {}", e.message))?;
        ev.steps = 0;
        let got = {
            let mut exec = vlad_flow::Executor::new(&mut ev, &program);
            exec.max_calls = Some(MAX_STEPS);
            exec.run(program.entries[0])
        };
        let got = outcome(got, &mut ev);
        if got != expected {
            return Err(format!("evaluator: {expected}\nspecialised: {got}"));
        }
    }
    Ok(value)
}

#[test]
fn random_programs_agree_with_the_evaluator() {
    let handle = std::thread::Builder::new()
        .stack_size(1 << 30)
        .spawn(|| {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
            let mut failures = Vec::new();
            let (mut values, mut reverse) = (0, 0);
            for case in 0..CASES {
                let mut fresh = 0;
                let e = real(&mut rng, &mut Vec::new(), 4, &mut fresh);
                let text = format!("(include \"ad\")\n{e}\n");
                reverse += usize::from(text.contains("derivative-R"));
                match run_case(&text) {
                    Ok(v) => values += usize::from(v),
                    Err(why) => failures.push(format!("case {case}:\n{text}{why}\n")),
                }
            }
            (failures, values, reverse)
        })
        .expect("thread");
    let (failures, values, reverse) = handle.join().expect("no panic");
    eprintln!("{CASES} random programs: {values} gave values, {reverse} use reverse mode");
    // Not vacuous: most programs compute something, and many differentiate in reverse mode.
    assert!(
        values >= CASES * 8 / 10,
        "only {values} programs gave values"
    );
    assert!(
        reverse >= CASES / 5,
        "only {reverse} programs use reverse mode"
    );
    assert!(
        failures.is_empty(),
        "{} of {CASES} random programs differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
