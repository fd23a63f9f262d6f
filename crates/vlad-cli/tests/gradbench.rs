//! `vlad gradbench`: scripted sessions of GradBench's protocol (every message kind, malformed
//! lines, a module that fails, `min_runs` / `min_seconds`), and each module's outputs against
//! an independent reference computed here (hand-written Rust, or finite differences of it),
//! with GradBench's tolerance or a tighter one.
//!
//! The modules are compiled with `VLAD_CFLAGS=-O1` (the C compiler's time is most of these
//! tests' time; the results are the same at -O3). The particle module is the exception: its
//! library is the largest (four nestings of reverse and forward mode through an ODE loop), and
//! compiling and running it takes about a minute on two cores, so its test is `#[ignore]`d and
//! run by benches/gradbench/run.sh, and by `cargo test --release -p vlad-cli --test gradbench
//! -- --ignored`.

use serde_json::{json, Value as Json};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one session may take before it counts as hung.
const DEADLINE: Duration = Duration::from_secs(300);

/// Runs `vlad gradbench` on `lines` (each written as one line; a `Json::String` is written
/// as its raw text, for malformed lines) and returns the answers, one JSON value per line of
/// its standard output, and its standard error. The session must end by itself at the end of
/// its input, with exit code 0, and write nothing but JSON lines.
fn session(lines: &[Json]) -> (Vec<Json>, String) {
    session_with(&[], lines)
}

/// [`session`] with more arguments for `vlad gradbench`.
fn session_with(args: &[&str], lines: &[Json]) -> (Vec<Json>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vlad"))
        .arg("gradbench")
        .args(args)
        .env("VLAD_CFLAGS", "-O1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn vlad gradbench");
    let text: String = lines
        .iter()
        .map(|l| match l {
            Json::String(raw) => format!("{raw}\n"),
            other => format!("{other}\n"),
        })
        .collect();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(text.as_bytes());
    });
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).unwrap();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).unwrap();
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("vlad gradbench did not finish in {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    feeder.join().unwrap();
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(status.success(), "exit {status:?}\n{out}\n{err}");
    let answers = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line: {l:?} ({e})")))
        .collect();
    (answers, err)
}

/// The answers to `define module` and then to evaluating each call, in order (and the log).
fn answers(module: &str, calls: &[(&str, Json)]) -> (Vec<Json>, String) {
    let mut lines = vec![json!({"id": 0, "kind": "define", "module": module})];
    for (i, (function, input)) in calls.iter().enumerate() {
        lines.push(json!({"id": i + 1, "kind": "evaluate", "module": module,
                          "function": function, "input": input}));
    }
    let (answers, err) = session(&lines);
    assert_eq!(answers.len(), lines.len(), "{answers:?}\n{err}");
    assert_eq!(answers[0], json!({"id": 0, "success": true}), "{err}");
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(a["id"], json!(i));
    }
    (answers[1..].to_vec(), err)
}

/// The outputs of the calls, which must all succeed.
fn outputs(module: &str, calls: &[(&str, Json)]) -> Vec<Json> {
    let (answers, err) = answers(module, calls);
    answers
        .iter()
        .map(|a| {
            assert_eq!(a["success"], json!(true), "{a}\n{err}");
            let timings = a["timings"].as_array().unwrap();
            assert!(!timings.is_empty());
            a["output"].clone()
        })
        .collect()
}

/// GradBench's comparison of two floats: |x - y| / max(1, |x| + |y|) <= tolerance.
fn close(x: f64, y: f64, tolerance: f64) -> bool {
    (x - y).abs() / (x.abs() + y.abs()).max(1.0) <= tolerance
}

/// `got` has the shape of `want` (numbers, arrays of them) and its numbers are close.
fn assert_close(got: &Json, want: &Json, tolerance: f64) {
    match (got, want) {
        (Json::Number(g), Json::Number(w)) => {
            let (g, w) = (g.as_f64().unwrap(), w.as_f64().unwrap());
            assert!(close(g, w, tolerance), "{g} is not {w}");
        }
        (Json::Array(g), Json::Array(w)) => {
            assert_eq!(g.len(), w.len(), "{got} against {want}");
            for (g, w) in g.iter().zip(w) {
                assert_close(g, w, tolerance);
            }
        }
        _ => panic!("{got} does not have the shape of {want}"),
    }
}

/// Pseudo-random reals in [-1, 1) (a fixed sequence: the tests are repeatable).
fn reals(seed: u64, n: usize) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// Central differences of `f` at `x`.
fn finite_gradient(f: impl Fn(&[f64]) -> f64, x: &[f64]) -> Vec<f64> {
    (0..x.len())
        .map(|i| {
            let h = 1e-6 * x[i].abs().max(1.0);
            let (mut up, mut down) = (x.to_vec(), x.to_vec());
            up[i] += h;
            down[i] -= h;
            (f(&up) - f(&down)) / (2.0 * h)
        })
        .collect()
}

#[test]
fn a_scripted_session_answers_every_kind_of_message() {
    let x: [f64; 3] = [1.0, -2.0, 0.5];
    let (answers, err) = session(&[
        json!({"id": 0, "kind": "start", "eval": "hello", "config": {"any": 1}}),
        json!({"id": 1, "kind": "define", "module": "hello"}),
        json!({"id": 2, "kind": "evaluate", "module": "hello", "function": "square", "input": 3,
               "description": "a number"}),
        json!({"id": 3, "kind": "evaluate", "module": "hello", "function": "double", "input": -1.5}),
        json!({"id": 4, "kind": "analysis", "module": "hello", "function": "square"}),
        // A module vlad does not have, one it does not support, and one whose evaluation fails.
        json!({"id": 5, "kind": "define", "module": "nonesuch"}),
        json!({"id": 6, "kind": "define", "module": "lstm"}),
        json!({"id": 7, "kind": "evaluate", "module": "lstm", "function": "objective", "input": {}}),
        json!({"id": "eight", "kind": "evaluate", "module": "hello", "function": "cube", "input": 1}),
        json!({"id": 9, "kind": "evaluate", "module": "hello", "function": "square", "input": "three"}),
        // Lines that are not messages: on standard error, not answered.
        json!("this is not JSON"),
        json!("[1, 2]"),
        json!({"kind": "start"}),
        json!(""),
        // Messages with an id that cannot be carried out.
        json!({"id": 10}),
        json!({"id": 11, "kind": "define"}),
        json!({"id": 12, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"x": x}}),
        // min_runs and min_seconds.
        json!({"id": 13, "kind": "define", "module": "lse"}),
        json!({"id": 14, "kind": "evaluate", "module": "lse", "function": "primal",
               "input": {"x": x, "min_runs": 5.0, "min_seconds": 0}}),
        json!({"id": 15, "kind": "evaluate", "module": "lse", "function": "gradient",
               "input": {"x": x, "min_runs": 2, "min_seconds": 0.05}}),
        json!({"id": 16, "kind": "evaluate", "module": "lse", "function": "gradient",
               "input": {"x": x, "min_runs": -1}}),
        json!({"id": 17, "kind": "evaluate", "module": "lse", "function": "primal",
               "input": {"x": [1, "two"]}}),
        json!({"id": 18, "kind": "define", "module": "hello"}),
    ]);
    let ids: Vec<&Json> = answers.iter().map(|a| &a["id"]).collect();
    let want: Vec<Json> = (0..8)
        .map(|i| json!(i))
        .chain([json!("eight")])
        .chain((9..19).map(|i| json!(i)))
        .collect();
    assert_eq!(ids, want.iter().collect::<Vec<_>>(), "{err}");
    let by_id = |i: usize| &answers[i];
    assert_eq!(by_id(0), &json!({"id": 0, "tool": "vlad"}));
    assert_eq!(by_id(1), &json!({"id": 1, "success": true}));
    assert_eq!(by_id(2)["output"], json!(9.0));
    assert_eq!(by_id(3)["output"], json!(-3.0));
    for i in [2, 3] {
        let t = by_id(i)["timings"].as_array().unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0]["name"], json!("evaluate"));
        assert!(t[0]["nanoseconds"].is_u64(), "{}", t[0]);
    }
    assert_eq!(by_id(4), &json!({"id": 4}));
    let failed = |i: usize, words: &str| {
        let a = by_id(i);
        assert_eq!(a["success"], json!(false), "{a}");
        let e = a["error"].as_str().unwrap();
        assert!(e.contains(words), "{e}");
        assert_eq!(a.as_object().unwrap().len(), 3, "{a}");
    };
    failed(5, "vlad has no module `nonesuch`");
    failed(6, "vlad does not support the module `lstm`");
    failed(7, "vlad does not support the module `lstm`");
    failed(8, "no function `cube`");
    failed(9, "the input must be a number");
    failed(10, "no `kind`");
    failed(11, "no `module`");
    failed(12, "the module `lse` is not defined");
    assert_eq!(by_id(13), &json!({"id": 13, "success": true}));
    let lse = (x.iter().map(|v| v.exp()).sum::<f64>()).ln();
    assert_close(&by_id(14)["output"], &json!(lse), 1e-12);
    let runs = by_id(14)["timings"].as_array().unwrap();
    assert_eq!(runs.len(), 5, "min_runs 5, min_seconds 0: five runs");
    let runs = by_id(15)["timings"].as_array().unwrap();
    let total: u64 = runs
        .iter()
        .map(|t| t["nanoseconds"].as_u64().unwrap())
        .sum();
    assert!(
        runs.len() >= 2 && total >= 50_000_000,
        "{} runs, {total} ns",
        runs.len()
    );
    // Enough runs and no more: without the last one the total fell short.
    let last = runs.last().unwrap()["nanoseconds"].as_u64().unwrap();
    assert!(runs.len() == 2 || total - last < 50_000_000);
    failed(16, "`min_runs` must be a non-negative integer");
    failed(17, "`x`[1] must be a number");
    assert_eq!(by_id(18), &json!({"id": 18, "success": true}));
    for line in [
        "line 11: not a JSON message",
        "line 12: not a JSON object",
        "line 13: the message has no `id`",
    ] {
        assert!(err.contains(line), "{line:?} not in\n{err}");
    }
    assert!(
        err.contains("compiled `hello`") && !err.contains("line 14"),
        "{err}"
    );
}

#[test]
fn modules_that_do_not_compile_or_fail_when_called_are_answered_with_their_errors() {
    let dir = tempfile::tempdir().unwrap();
    // hello's procedures: one fails at run time on a negative input; lse does not expand.
    std::fs::write(
        dir.path().join("hello.vlad"),
        "(define (hello-square x) (if (< x 0) (get x 0) (* x x)))\n         (define (hello-double x) (+ x x))\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("lse.vlad"), "(define (lse-primal x) (+ x\n").unwrap();
    let (answers, err) = session_with(
        &["--modules", dir.path().to_str().unwrap()],
        &[
            json!({"id": 1, "kind": "define", "module": "lse"}),
            json!({"id": 2, "kind": "define", "module": "llsq"}),
            json!({"id": 3, "kind": "define", "module": "hello"}),
            json!({"id": 4, "kind": "evaluate", "module": "hello", "function": "square", "input": 3}),
            json!({"id": 5, "kind": "evaluate", "module": "hello", "function": "square", "input": -3}),
        ],
    );
    assert_eq!(answers.len(), 5, "{answers:?}\n{err}");
    let error = |i: usize| answers[i]["error"].as_str().unwrap_or_default().to_string();
    assert_eq!(answers[0]["success"], json!(false));
    assert!(error(0).contains("lse.vlad:1:"), "{}", error(0));
    assert_eq!(answers[1]["success"], json!(false));
    assert!(error(1).contains("llsq.vlad"), "{}", error(1));
    assert_eq!(answers[2], json!({"id": 3, "success": true}));
    assert_eq!(answers[3]["output"], json!(9.0));
    assert_eq!(answers[4]["success"], json!(false));
    assert!(error(4).contains("hello.vlad:1:"), "{}", error(4));
}

#[test]
fn a_result_json_cannot_carry_is_an_error() {
    // The second centroid is nearest to no point: its direction is 0/0.
    let input =
        json!({"points": [[0.0, 0.0], [1.0, 0.0]], "centroids": [[0.5, 0.0], [100.0, 100.0]]});
    let (got, err) = answers("kmeans", &[("dir", input)]);
    assert_eq!(got[0]["success"], json!(false), "{err}");
    assert!(
        got[0]["error"]
            .as_str()
            .unwrap()
            .contains("JSON cannot carry"),
        "{}",
        got[0]
    );
}

#[test]
fn an_empty_input_ends_the_session_at_once() {
    let (answers, err) = session(&[]);
    assert!(answers.is_empty() && err.is_empty(), "{answers:?} {err}");
}

#[test]
fn lse_is_the_log_of_the_sum_of_exponentials_and_its_gradient_the_softmax() {
    // Large entries: the naive formula would overflow.
    let mut x = reals(1, 9);
    x[3] = 800.0;
    x[5] = 799.0;
    let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = x.iter().map(|v| (v - m).exp()).sum();
    let softmax: Vec<f64> = x.iter().map(|v| (v - m).exp() / sum).collect();
    let got = outputs(
        "lse",
        &[("primal", json!({"x": x})), ("gradient", json!({"x": x}))],
    );
    assert_close(&got[0], &json!(m + sum.ln()), 1e-12);
    assert_close(&got[1], &json!(softmax), 1e-12);
}

/// llsq's objective, by hand.
fn llsq(x: &[f64], n: usize) -> f64 {
    (0..n)
        .map(|i| {
            let t = -1.0 + 2.0 * i as f64 / (n - 1) as f64;
            let s = if t > 0.0 {
                1.0
            } else if t < 0.0 {
                -1.0
            } else {
                0.0
            };
            let p: f64 = x
                .iter()
                .enumerate()
                .map(|(j, xj)| xj * t.powi(j as i32))
                .sum();
            0.5 * (s - p) * (s - p)
        })
        .sum()
}

#[test]
fn llsq_is_the_least_squares_objective_and_its_gradient() {
    let (x, n) = (reals(2, 6), 11); // n odd: t = 0 at i = 5
    let exact: Vec<f64> = (0..x.len())
        .map(|k| {
            // d/dx_k = -sum_i r_i t_i^k
            (0..n)
                .map(|i| {
                    let t = -1.0 + 2.0 * i as f64 / (n - 1) as f64;
                    let s = f64::from(t > 0.0) - f64::from(t < 0.0);
                    let p: f64 = x
                        .iter()
                        .enumerate()
                        .map(|(j, xj)| xj * t.powi(j as i32))
                        .sum();
                    -(s - p) * t.powi(k as i32)
                })
                .sum()
        })
        .collect();
    let fd = finite_gradient(|x| llsq(x, n), &x);
    assert_close(&json!(exact), &json!(fd), 1e-6);
    let input = json!({"x": x, "n": n});
    let got = outputs("llsq", &[("primal", input.clone()), ("gradient", input)]);
    assert_close(&got[0], &json!(llsq(&x, n)), 1e-12);
    assert_close(&got[1], &json!(exact), 1e-12);
}

/// The determinant by Gaussian elimination with partial pivoting (not by minors).
fn det_lu(a: &[f64], l: usize) -> f64 {
    let mut m = a.to_vec();
    let mut det = 1.0;
    for c in 0..l {
        let p = (c..l)
            .max_by(|&i, &j| m[i * l + c].abs().total_cmp(&m[j * l + c].abs()))
            .unwrap();
        if p != c {
            for k in 0..l {
                m.swap(p * l + k, c * l + k);
            }
            det = -det;
        }
        let pivot = m[c * l + c];
        det *= pivot;
        for r in c + 1..l {
            let f = m[r * l + c] / pivot;
            for k in c..l {
                m[r * l + k] -= f * m[c * l + k];
            }
        }
    }
    det
}

#[test]
fn det_is_the_determinant_and_its_gradient_the_cofactors() {
    let mut calls = Vec::new();
    let mut want = Vec::new();
    for l in [1, 2, 4] {
        let a = reals(3 + l as u64, l * l);
        // The gradient of the determinant is the matrix of cofactors.
        let cofactors: Vec<f64> = (0..l * l)
            .map(|at| {
                let (i, j) = (at / l, at % l);
                let minor: Vec<f64> = (0..l * l)
                    .filter(|k| k / l != i && k % l != j)
                    .map(|k| a[k])
                    .collect();
                let sign = if (i + j) % 2 == 0 { 1.0 } else { -1.0 };
                sign * det_lu(&minor, l - 1)
            })
            .collect();
        let input = json!({"A": a, "ell": l});
        calls.extend([("primal", input.clone()), ("gradient", input)]);
        want.extend([json!(det_lu(&a, l)), json!(cofactors)]);
    }
    // A matrix of the wrong size is refused.
    calls.push(("primal", json!({"A": [1, 2, 3], "ell": 2})));
    let (got, err) = answers("det", &calls);
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g["success"], json!(true), "{g}\n{err}");
        assert_close(&g["output"], w, 1e-12);
    }
    let refused = got.last().unwrap();
    assert_eq!(refused["success"], json!(false));
    assert!(refused["error"]
        .as_str()
        .unwrap()
        .contains("`A` has 3 entries"));
}

/// RK4 for ode's system, by hand.
fn ode(x: &[f64], s: usize) -> Vec<f64> {
    let n = x.len();
    let field = |y: &[f64]| -> Vec<f64> {
        (0..n)
            .map(|i| if i == 0 { x[0] } else { x[i] * y[i - 1] })
            .collect()
    };
    let axpy = |y: &[f64], a: f64, k: &[f64]| -> Vec<f64> {
        y.iter().zip(k).map(|(y, k)| y + a * k).collect()
    };
    let h = 2.0 / s as f64;
    let mut y = vec![0.0; n];
    for _ in 0..s {
        let k1 = field(&y);
        let k2 = field(&axpy(&y, h / 2.0, &k1));
        let k3 = field(&axpy(&y, h / 2.0, &k2));
        let k4 = field(&axpy(&y, h, &k3));
        y = (0..n)
            .map(|i| y[i] + h / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]))
            .collect();
    }
    y
}

#[test]
fn ode_is_rk4_and_its_gradient_that_of_the_last_component() {
    // x_i = (i + 1)/2 (1 + v_i / 10): y_i(2) = prod_j (1 + v_j / 10), of order 1 for every i.
    let x: Vec<f64> = reals(4, 5)
        .iter()
        .enumerate()
        .map(|(i, v)| (i + 1) as f64 / 2.0 * (1.0 + 0.1 * v))
        .collect();
    let s = 7;
    // The exact solution, which RK4 with enough steps approaches: y_i(t) = x_0...x_i t^(i+1)/(i+1)!
    let fine = ode(&x, 2000);
    let mut exact = Vec::new();
    let (mut product, mut factorial) = (1.0, 1.0);
    for (i, xi) in x.iter().enumerate() {
        product *= xi;
        factorial *= (i + 1) as f64;
        exact.push(product * 2f64.powi(i as i32 + 1) / factorial);
    }
    assert_close(&json!(fine), &json!(exact), 1e-9);
    let fd = finite_gradient(|x| *ode(x, s).last().unwrap(), &x);
    let input = json!({"x": x, "s": s});
    let got = outputs("ode", &[("primal", input.clone()), ("gradient", input)]);
    assert_close(&got[0], &json!(ode(&x, s)), 1e-12);
    assert_close(&got[1], &json!(fd), 1e-7);
}

#[test]
fn kmeans_cost_and_newton_direction() {
    let (n, k, d) = (12, 3, 2);
    let points: Vec<Vec<f64>> = (0..n).map(|i| reals(10 + i as u64, d)).collect();
    // Each centroid starts at a point, so no cluster is empty.
    let centroids: Vec<Vec<f64>> = (0..k).map(|j| points[j * 4].clone()).collect();
    let distance =
        |p: &[f64], c: &[f64]| -> f64 { p.iter().zip(c).map(|(a, b)| (a - b) * (a - b)).sum() };
    let nearest = |p: &[f64]| -> usize {
        (0..k)
            .min_by(|&a, &b| distance(p, &centroids[a]).total_cmp(&distance(p, &centroids[b])))
            .unwrap()
    };
    let cost: f64 = points
        .iter()
        .map(|p| distance(p, &centroids[nearest(p)]))
        .sum();
    // d cost / d C_j = sum over its points of 2 (C_j - P_i); the Hessian's diagonal 2 |cluster j|.
    let mut gradient = vec![vec![0.0; d]; k];
    let mut count = vec![0.0; k];
    for p in &points {
        let j = nearest(p);
        count[j] += 1.0;
        for e in 0..d {
            gradient[j][e] += 2.0 * (centroids[j][e] - p[e]);
        }
    }
    let dir: Vec<Vec<f64>> = (0..k)
        .map(|j| gradient[j].iter().map(|g| g / (2.0 * count[j])).collect())
        .collect();
    let input = json!({"points": points, "centroids": centroids});
    let got = outputs("kmeans", &[("cost", input.clone()), ("dir", input)]);
    assert_close(&got[0], &json!(cost), 1e-12);
    assert_close(&got[1], &json!(dir), 1e-12);
}

#[test]
fn saddle_finds_the_saddle_point_in_every_mode_pair() {
    // f = |p1|^2 - |p2|^2 has its saddle point at 0; the descent stops within 1e-5 of it.
    let mut calls = Vec::new();
    for start in [[1.0, 1.0], [-0.5, 2.0]] {
        for mode in ["ff", "fr", "rf", "rr"] {
            calls.push((mode, json!({"start": start})));
        }
    }
    let got = outputs("saddle", &calls);
    for (i, g) in got.iter().enumerate() {
        assert_close(g, &json!([0.0, 0.0, 0.0, 0.0]), 1e-4);
        assert_close(g, &got[i / 4 * 4], 1e-10);
    }
}

/// particle's cost by hand: naive Euler with the force from the potential's analytic gradient.
fn particle_cost(w: f64) -> f64 {
    let charges = [[10.0, 10.0 - w], [10.0, 0.0]];
    let (mut x, mut v, dt) = ([0.0, 8.0], [0.75, 0.0], 0.1);
    loop {
        let mut a = [0.0, 0.0];
        for c in &charges {
            let r = ((x[0] - c[0]) * (x[0] - c[0]) + (x[1] - c[1]) * (x[1] - c[1])).sqrt();
            for k in 0..2 {
                a[k] += (x[k] - c[k]) / (r * r * r);
            }
        }
        let next = [x[0] + dt * v[0], x[1] + dt * v[1]];
        if next[1] > 0.0 {
            v = [v[0] + dt * a[0], v[1] + dt * a[1]];
            x = next;
        } else {
            let t = -x[1] / v[1];
            let end = x[0] + t * v[0];
            return end * end;
        }
    }
}

#[test]
#[ignore = "about a minute of C compilation and runs on two cores: run by benches/gradbench/run.sh"]
fn particle_finds_the_optimal_control_in_every_mode_pair() {
    let input = json!({"w": 0});
    let modes = ["ff", "fr", "rf", "rr"];
    let got = outputs("particle", &modes.map(|m| (m, input.clone())));
    for g in &got {
        let w = g.as_f64().unwrap();
        // A minimum of the hand-written cost: near 0 and below its neighbours.
        assert!(particle_cost(w) < 1e-6 * particle_cost(0.0), "w* = {w}");
        assert!(particle_cost(w) < particle_cost(w - 1e-3));
        assert!(particle_cost(w) < particle_cost(w + 1e-3));
        assert_close(g, &got[0], 1e-10);
    }
}

/// log Gamma(x) for a positive multiple of 1/2, exactly: Gamma(1/2) = sqrt(pi), Gamma(1) = 1,
/// Gamma(x + 1) = x Gamma(x).
fn ln_gamma_half(mut x: f64) -> f64 {
    let mut sum = 0.0;
    while x > 1.0 {
        x -= 1.0;
        sum += x.ln();
    }
    if x == 0.5 {
        sum + 0.5 * std::f64::consts::PI.ln()
    } else {
        sum
    }
}

/// GMM's parameters: alpha, mu, q, l.
type Params = (Vec<f64>, Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<Vec<f64>>);

/// GMM's data; its parameters flat are alpha (k), mu (k d), q (k d), l (k d(d-1)/2).
struct Gmm {
    d: usize,
    k: usize,
    x: Vec<Vec<f64>>,
    m: f64,
    gamma: f64,
}

impl Gmm {
    fn tri(&self) -> usize {
        self.d * (self.d - 1) / 2
    }

    /// alpha, mu, q, l from the flat parameters.
    fn split(&self, p: &[f64]) -> Params {
        let (d, k, t) = (self.d, self.k, self.tri());
        let rows = |at: usize, len: usize| -> Vec<Vec<f64>> {
            (0..k)
                .map(|j| p[at + j * len..at + (j + 1) * len].to_vec())
                .collect()
        };
        (
            p[..k].to_vec(),
            rows(k, d),
            rows(k + k * d, d),
            rows(k + 2 * k * d, t),
        )
    }

    /// The objective by hand (ADBench's gmm_objective, with Q built as a matrix).
    fn objective(&self, p: &[f64]) -> f64 {
        let (d, k) = (self.d, self.k);
        let (alpha, mu, q, l) = self.split(p);
        let lse = |v: &[f64]| {
            let m = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            m + v.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
        };
        // Q_j as a dense lower-triangular matrix; l fills the strict lower part column by column.
        let qmat: Vec<Vec<Vec<f64>>> = (0..k)
            .map(|j| {
                let mut m = vec![vec![0.0; d]; d];
                let mut at = 0;
                for c in 0..d {
                    m[c][c] = q[j][c].exp();
                    for row in m.iter_mut().skip(c + 1) {
                        row[c] = l[j][at];
                        at += 1;
                    }
                }
                m
            })
            .collect();
        let n = self.x.len() as f64;
        let mut total = -n * d as f64 * 0.5 * (2.0 * std::f64::consts::PI).ln();
        for xi in &self.x {
            let terms: Vec<f64> = (0..k)
                .map(|j| {
                    let v: Vec<f64> = (0..d).map(|e| xi[e] - mu[j][e]).collect();
                    let qv: f64 = (0..d)
                        .map(|r| (0..d).map(|c| qmat[j][r][c] * v[c]).sum::<f64>().powi(2))
                        .sum();
                    alpha[j] + q[j].iter().sum::<f64>() - 0.5 * qv
                })
                .collect();
            total += lse(&terms);
        }
        total -= n * lse(&alpha);
        let nw = d as f64 + self.m + 1.0;
        let multi_gamma = 0.25 * (d * (d - 1)) as f64 * std::f64::consts::PI.ln()
            + (1..=d)
                .map(|j| ln_gamma_half(0.5 * nw + 0.5 * (1.0 - j as f64)))
                .sum::<f64>();
        let c = nw * d as f64 * (self.gamma.ln() - 0.5 * 2f64.ln()) - multi_gamma;
        for j in 0..k {
            let frobenius: f64 = q[j].iter().map(|v| v.exp().powi(2)).sum::<f64>()
                + l[j].iter().map(|v| v * v).sum::<f64>();
            total += 0.5 * self.gamma * self.gamma * frobenius - self.m * q[j].iter().sum::<f64>();
        }
        total - k as f64 * c
    }
}

#[test]
fn gmm_is_the_adbench_objective_and_its_gradient() {
    let (d, k, n) = (3, 2, 4);
    let g = Gmm {
        d,
        k,
        x: (0..n).map(|i| reals(40 + i as u64, d)).collect(),
        m: 2.0,
        gamma: 1.5,
    };
    let p = reals(50, k + 2 * k * d + k * g.tri());
    let (alpha, mu, q, l) = g.split(&p);
    let input = json!({"d": d, "k": k, "n": n, "x": g.x, "m": g.m, "gamma": g.gamma,
                       "alpha": alpha, "mu": mu, "q": q, "l": l});
    let got = outputs("gmm", &[("objective", input.clone()), ("jacobian", input)]);
    assert_close(&got[0], &json!(g.objective(&p)), 1e-12);
    let fd = finite_gradient(|p| g.objective(p), &p);
    let (alpha, mu, q, l) = g.split(&fd);
    let jacobian = &got[1];
    assert_eq!(jacobian.as_object().unwrap().len(), 4, "{jacobian}");
    assert_close(&jacobian["alpha"], &json!(alpha), 1e-7);
    assert_close(&jacobian["mu"], &json!(mu), 1e-7);
    assert_close(&jacobian["q"], &json!(q), 1e-7);
    assert_close(&jacobian["l"], &json!(l), 1e-7);
}

/// ba's reprojection error by hand (ADBench's project), of the camera (11), point (3) and
/// weight flat in `v`.
fn ba_reprojection(v: &[f64], feat: &[f64]) -> [f64; 2] {
    let (r, c, f, x0, k) = (&v[0..3], &v[3..6], v[6], &v[7..9], &v[9..11]);
    let (x, w) = (&v[11..14], v[14]);
    let y: Vec<f64> = (0..3).map(|i| x[i] - c[i]).collect();
    let cross = |a: &[f64], b: &[f64]| {
        [
            a[1] * b[2] - a[2] * b[1],
            a[2] * b[0] - a[0] * b[2],
            a[0] * b[1] - a[1] * b[0],
        ]
    };
    let theta = (r[0] * r[0] + r[1] * r[1] + r[2] * r[2]).sqrt();
    let u: Vec<f64> = r.iter().map(|ri| ri / theta).collect();
    let uy = cross(&u, &y);
    let dot: f64 = (0..3).map(|i| u[i] * y[i]).sum();
    let z: Vec<f64> = (0..3)
        .map(|i| y[i] * theta.cos() + uy[i] * theta.sin() + u[i] * dot * (1.0 - theta.cos()))
        .collect();
    let p = [z[0] / z[2], z[1] / z[2]];
    let rsq = p[0] * p[0] + p[1] * p[1];
    let l = 1.0 + k[0] * rsq + k[1] * rsq * rsq;
    [
        w * (p[0] * l * f + x0[0] - feat[0]),
        w * (p[1] * l * f + x0[1] - feat[1]),
    ]
}

#[test]
fn ba_errors_and_their_sparse_jacobian() {
    let cam = [0.1, -0.2, 0.3, 0.2, -0.1, -5.0, 2.0, 0.05, -0.1, 0.1, -0.05];
    let (x, w, feat) = ([0.7, 0.4, 1.2], 0.8, [0.1, 0.2]);
    let (n, m, p) = (2, 3, 5);
    let input = json!({"n": n, "m": m, "p": p, "cam": cam, "x": x, "w": w, "feat": feat});
    let got = outputs("ba", &[("objective", input.clone()), ("jacobian", input)]);
    let v: Vec<f64> = cam.iter().chain(&x).chain([&w]).cloned().collect();
    let e = ba_reprojection(&v, &feat);
    assert_eq!(got[0]["reproj_error"]["repeated"], json!(p));
    assert_eq!(got[0]["w_err"]["repeated"], json!(p));
    assert_close(&got[0]["reproj_error"]["elements"], &json!(e), 1e-12);
    assert_close(&got[0]["w_err"]["element"], &json!(1.0 - w * w), 1e-12);
    // The block by finite differences; the CSR layout of 3p rows and 11n + 3m + p columns.
    let block: Vec<Vec<f64>> = (0..2)
        .map(|r| finite_gradient(|v| ba_reprojection(v, &feat)[r], &v))
        .collect();
    let (mut rows, mut cols, mut vals) = (vec![0], Vec::new(), Vec::new());
    for i in 0..p {
        for row in &block {
            cols.extend(11 * (i % n)..11 * (i % n) + 11);
            cols.extend(11 * n + 3 * (i % m)..11 * n + 3 * (i % m) + 3);
            cols.push(11 * n + 3 * m + i);
            vals.extend(row);
            rows.push(cols.len());
        }
    }
    for i in 0..p {
        cols.push(11 * n + 3 * m + i);
        vals.push(-2.0 * w);
        rows.push(cols.len());
    }
    let jacobian = &got[1];
    assert_eq!(jacobian.as_object().unwrap().len(), 3, "{jacobian}");
    assert_eq!(jacobian["rows"], json!(rows));
    assert_eq!(jacobian["cols"], json!(cols));
    assert_close(&jacobian["vals"], &json!(vals), 1e-7);
}
