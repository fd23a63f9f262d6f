//! Differential test of the specialised program against the evaluator (the oracle) on random
//! programs: closures, pairs, conditionals, loops and recursion, `real`, forward and reverse
//! derivatives (nested), and arrays (inside derivatives too), built from a seeded grammar
//! (`vlad-random`) so that most of them run without error. Each program is analysed,
//! specialised and run by the executor; its value (printed) or its error (message and
//! position), and what it printed, must be the evaluator's. Some read reals (`read-real`):
//! both runs read the same text, numerals spelled every way the reader allows. 1,000
//! programs per run.

use std::path::Path;
use vlad_core::Arena;
use vlad_eval::io::{Input, Output};
use vlad_eval::Evaluator;
use vlad_random::{expression_reading, input, Arrays, Rng};
use vlad_syntax::program::{build, load_str};
use vlad_syntax::SourceMap;

/// Programs per run; `VLAD_RANDOM_CASES` and `VLAD_RANDOM_SEED` change how many and which,
/// for longer runs by hand.
const DEFAULT_CASES: usize = 1000;

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
const MAX_STEPS: u64 = 2_000_000;

/// What a run gave: the printed value, or the error and its position.
fn outcome(r: Result<vlad_eval::value::Value, vlad_eval::EvalError>, ev: &mut Evaluator) -> String {
    match r {
        Ok(v) => ev.render(&v),
        Err(e) => format!("error at {:?}: {}", e.span, e.message),
    }
}

/// Runs one program both ways, each reading `numerals`; `Ok(true)` when it gave a value (not
/// an error).
fn run_case(text: &str, numerals: &str) -> Result<bool, String> {
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
        ev.input = Input::from_text(numerals);
        let (out, printed) = Output::buffer();
        ev.output = out;
        ev.steps = 0;
        let expected = ev.eval(core);
        let expected_output = printed.borrow().clone();
        if matches!(&expected, Err(e) if e.message.contains("steps")) {
            continue;
        }
        value = expected.is_ok();
        let expected = outcome(expected, &mut ev);
        let compiled = {
            let mut an = vlad::analysis(&mut ev).expect("the prelude loads");
            an.analyse(core).and_then(|k| an.specialise(&[k]))
        };
        let program = compiled.map_err(|e| format!("does not compile: {}", e.message))?;
        ev.steps = 0;
        ev.input = Input::from_text(numerals);
        let (out, printed) = Output::buffer();
        ev.output = out;
        let got = {
            let mut exec = vlad::exec::Executor::new(&mut ev, &program);
            exec.max_calls = Some(MAX_STEPS);
            exec.run(program.entries[0])
        };
        let got = outcome(got, &mut ev);
        if got != expected {
            return Err(format!("evaluator: {expected}\nspecialised: {got}"));
        }
        let got_output = printed.borrow().clone();
        if got_output != expected_output {
            return Err(format!(
                "the evaluator printed:\n{expected_output}the specialised program printed:\n{got_output}"
            ));
        }
    }
    Ok(value)
}

#[test]
fn random_programs_agree_with_the_evaluator() {
    let cases = setting("VLAD_RANDOM_CASES", DEFAULT_CASES as u64) as usize;
    let handle = std::thread::Builder::new()
        .stack_size(1 << 30)
        .spawn(move || {
            let seed = setting("VLAD_RANDOM_SEED", 0x9e37_79b9_7f4a_7c15) | 1;
            let mut rng = Rng(seed);
            // The inputs from a generator of their own: the programs are those of the seed.
            let mut numerals = Rng(seed.rotate_left(17) | 1);
            let mut failures = Vec::new();
            let (mut values, mut reverse, mut arrays, mut lists, mut prints) = (0, 0, 0, 0, 0);
            let (mut list_arrays, mut reads, mut booleans) = (0, 0, 0);
            for case in 0..cases {
                let (text, counts) = expression_reading(&mut rng, 4, Arrays::Everywhere, true);
                let numerals = input(&mut numerals, 64);
                reads += usize::from(counts.reads > 0);
                reverse += usize::from(text.contains("derivative-R"));
                arrays += usize::from(text.contains("(build") || text.contains("(ifold"));
                lists += usize::from(text.contains("(null? "));
                prints += usize::from(text.contains("(write-real "));
                list_arrays += usize::from(text.contains("(get (car "));
                booleans += usize::from(
                    text.contains("(plus (<")
                        || text.contains("(bundle (<")
                        || text.contains("(cons (<"),
                );
                match run_case(&text, &numerals) {
                    Ok(v) => values += usize::from(v),
                    Err(why) => {
                        failures.push(format!("case {case}:\n{text}input: {numerals:?}\n{why}\n"))
                    }
                }
            }
            (
                failures,
                values,
                reverse,
                arrays,
                (lists, list_arrays),
                (prints, reads, booleans),
            )
        })
        .expect("thread");
    let (failures, values, reverse, arrays, (lists, list_arrays), (prints, reads, booleans)) =
        handle.join().expect("no panic");
    eprintln!(
        "{cases} random programs: {values} gave values, {reverse} use reverse mode, {arrays} \
         arrays, {lists} lists of unknown length ({list_arrays} of arrays), {prints} write-real, \
         {reads} read-real, {booleans} booleans in AD operators"
    );
    // Not vacuous: most programs compute something, many differentiate in reverse mode, and
    // many use arrays (inside derivatives too).
    assert!(
        values >= cases * 8 / 10,
        "only {values} programs gave values"
    );
    assert!(
        reverse >= cases / 5,
        "only {reverse} programs use reverse mode"
    );
    assert!(arrays >= cases / 5, "only {arrays} programs use arrays");
    assert!(lists >= cases / 20, "only {lists} programs build lists");
    assert!(prints >= cases / 20, "only {prints} programs print");
    assert!(reads >= cases / 20, "only {reads} programs read");
    assert!(
        booleans >= cases / 20,
        "only {booleans} programs put booleans through AD operators"
    );
    assert!(
        list_arrays >= cases / 50,
        "only {list_arrays} programs build lists of arrays"
    );
    assert!(
        failures.is_empty(),
        "{} of {cases} random programs differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
