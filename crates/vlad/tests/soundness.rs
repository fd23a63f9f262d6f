//! The flow analysis is sound: on every program of `tests/` and `examples/`, the value each
//! top-level expression evaluates to (by the evaluator, the oracle) is a member of the abstract
//! value the analysis computed for it. Expressions the analysis does not handle yet (the AD
//! operators) are counted, and must be reported as such, never as a wrong answer.

use std::path::{Path, PathBuf};
use vlad_core::Arena;
use vlad_eval::value::Value;
use vlad_eval::Evaluator;
use vlad_flow::{Av, Boxed, Callee, CodeId};

/// What the check needs of the analysis: how closures map to codes, and what boxed values
/// may hold.
struct World<'a> {
    code: &'a dyn Fn(&Value) -> Option<CodeId>,
    boxed: Boxed,
}

/// Is the concrete value `v` in the extension of `a`?
fn contains(a: &Av, v: &Value, w: &World) -> bool {
    match (a, v) {
        (Av::Dyn(callees), _) => boxed_within(v, callees, w),
        (Av::Nil, Value::Nil) => true,
        (Av::Bool(b), Value::Bool(x)) => b.is_none_or(|b| b == *x),
        (Av::Real(r), Value::Real(x)) => r.is_none_or(|r| r.get().to_bits() == x.to_bits()),
        (Av::Prim(p), Value::Prim(q)) => p == q,
        (Av::Pair(t, x, y), Value::Pair(p)) => {
            p.tags == *t && contains(x, &p.car, w) && contains(y, &p.cdr, w)
        }
        (Av::Closure(c, env), Value::Closure(k)) => {
            (w.code)(v) == Some(*c)
                && env
                    .iter()
                    .zip(k.env.0.iter())
                    .all(|(x, y)| contains(x, y, w))
        }
        (Av::Array(t, n, e), Value::Array(arr)) => {
            arr.tags == *t
                && n.is_none_or(|n| n == arr.elems.len() as u64)
                && arr.elems.iter().all(|x| contains(e, x, w))
        }
        // A lazy array sensitivity: its shape only.
        (Av::Array(t, ..), Value::SensArray(arr)) => arr.tags == *t,
        (Av::OneHot(of, _), Value::SensArray(arr)) => {
            matches!(&**of, Av::Array(t, ..) if t.pop().push(vlad_core::Tag::Sensitivity) == Some(arr.tags))
        }
        (Av::Bundle(p, t), Value::Bundle(b)) => {
            contains(p, &b.primal, w) && contains(t, &b.tangent, w)
        }
        (Av::Tagged(t, x), Value::Tagged(y)) => *t == y.tag && contains(x, &y.value, w),
        (Av::Zero(of), Value::Zero(z)) => contains(of, &z.of, w),
        // A lazy zero or a value: either alternative.
        (Av::OrZero(of, x), _) => {
            matches!(v, Value::Zero(z) if contains(of, &z.of, w)) || contains(x, v, w)
        }
        _ => false,
    }
}

/// Every procedure inside the boxed value `v` (not looking into closure environments) is one
/// of `callees`, and every closure's environment is within its code's boxed summary.
fn boxed_within(v: &Value, callees: &[Callee], w: &World) -> bool {
    match v {
        Value::Prim(p) => callees.contains(&Callee::Prim(*p)),
        Value::Closure(k) => {
            let Some(c) = (w.code)(v) else { return false };
            let Some(env) = w.boxed.envs.get(&c) else {
                return false;
            };
            callees.contains(&Callee::Code(c))
                && env
                    .iter()
                    .zip(k.env.0.iter())
                    .all(|(x, y)| contains(x, y, w))
        }
        Value::Pair(p) => boxed_within(&p.car, callees, w) && boxed_within(&p.cdr, callees, w),
        Value::Bundle(b) => {
            boxed_within(&b.primal, callees, w) && boxed_within(&b.tangent, callees, w)
        }
        Value::Tagged(t) => boxed_within(&t.value, callees, w),
        Value::Array(a) => a.elems.iter().all(|x| boxed_within(x, callees, w)),
        _ => true,
    }
}

fn vlad_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("readable directory")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            vlad_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "vlad") {
            out.push(p);
        }
    }
}

#[derive(Default)]
struct Tally {
    checked: usize,
    unsupported: usize,
    errors: usize,
    failures: Vec<String>,
}

fn check_file(path: &Path, tally: &mut Tally) {
    let mut sources = vlad_syntax::SourceMap::new();
    let mut arena = Arena::new();
    let Ok(forms) = vlad_syntax::program::load(&mut sources, path, &[]) else {
        return;
    };
    let Ok(exprs) = vlad_syntax::program::build(&mut arena, &forms) else {
        return;
    };
    let mut ev = Evaluator::new(arena);
    ev.max_steps = Some(20_000_000);
    for te in exprs {
        let Ok(core) = te.core else { continue };
        // The analysis first (it borrows the arena), keeping what the check needs.
        let (result, codes, boxed) = {
            let mut an = vlad::analysis(&mut ev).expect("the prelude loads");
            match an.analyse(core) {
                Ok(k) => {
                    let r = an.results[k].clone();
                    let mut table = Vec::new();
                    for (i, c) in an.codes.iter().enumerate() {
                        table.push((
                            c.names.to_vec(),
                            c.lambdas.to_vec(),
                            c.index,
                            CodeId(i as u32),
                        ));
                    }
                    (r, table, an.boxed_snapshot())
                }
                Err(_) => {
                    tally.unsupported += 1;
                    continue;
                }
            }
        };
        let value = match ev.eval(core) {
            Ok(v) => v,
            Err(_) => {
                tally.errors += 1;
                continue;
            }
        };
        let code_of = |v: &Value| -> Option<CodeId> {
            let Value::Closure(k) = v else { return None };
            codes.iter().find_map(|(n, l, i, c)| {
                (n == &k.group.names && l == &k.group.lambdas && *i == k.index).then_some(*c)
            })
        };
        tally.checked += 1;
        let world = World {
            code: &code_of,
            boxed,
        };
        if !contains(&result, &value, &world) {
            let (_, line, col) = sources.location(te.span).unwrap_or(("?", 0, 0));
            tally.failures.push(format!(
                "{}:{line}:{col}: the value {} is not in the abstract value {:?}",
                path.display(),
                vlad_eval::print::to_string(&value),
                result
            ));
        }
    }
}

#[test]
fn every_value_is_in_its_abstract_value() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for dir in ["tests/conformance", "examples"] {
        vlad_files(&root.join(dir), &mut files);
    }
    // The saddle and particle programs take minutes in the evaluator: the differential test
    // of the CLI covers them through the specialised program.
    files.retain(|f| {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        !["saddle-", "particle-"].iter().any(|p| name.starts_with(p))
    });
    let mut tally = Tally::default();
    // The evaluator needs a deep native stack for printing deep data, as in the CLI.
    let handle = std::thread::Builder::new()
        .stack_size(1 << 30)
        .spawn(move || {
            for f in &files {
                check_file(f, &mut tally);
            }
            tally
        })
        .expect("thread");
    let tally = handle.join().expect("no panic");
    eprintln!(
        "flow soundness: {} values checked, {} expressions not analysable yet, {} run-time errors",
        tally.checked, tally.unsupported, tally.errors
    );
    assert!(
        tally.failures.is_empty(),
        "{} unsound results:\n{}",
        tally.failures.len(),
        tally.failures.join("\n")
    );
    assert!(tally.checked > 400, "too few checks: {}", tally.checked);
}
