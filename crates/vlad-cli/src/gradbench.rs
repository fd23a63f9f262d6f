//! `vlad gradbench`: vlad as a tool of GradBench, the public benchmark suite of AD tools
//! (docs/gradbench.md).
//!
//! The harness's "eval" process writes one JSON object per line on our standard input and
//! reads exactly one JSON object per line back, with the same `id`:
//!
//! - `start` is answered with the tool's name;
//! - `define` compiles a module (a VLAD file of `gradbench/`, built into the binary) to a
//!   native shared library ([`vlad::Library`]), once;
//! - `evaluate` converts the input to the library's arguments, calls one of the module's
//!   procedures at least `min_runs` times and until the calls add up to `min_seconds`, timing
//!   each call alone, and converts the last result to JSON;
//! - any other kind gets `{"id"}`.
//!
//! Nothing else is written on standard output: logs go to standard error. A line that is not a
//! message (not JSON, not an object, no id) cannot be answered and is reported on standard
//! error; a message with an id that cannot be carried out is answered `success: false` with
//! the reason.

use serde_json::{json, Map, Value as Json};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vlad::library::{Arg, Library, Value};

/// What an input field holds, and so the shape of the procedure's argument it becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A number: a `real` argument.
    Real,
    /// A non-negative integer (a size, a count of steps): a `real` argument.
    Count,
    /// An array of numbers: an `array` argument.
    Vector,
    /// An array of arrays of numbers, all of one length: an `array(array)` argument.
    Matrix,
}

impl Kind {
    fn shape(self) -> &'static str {
        match self {
            Kind::Real | Kind::Count => "real",
            Kind::Vector => "array",
            Kind::Matrix => "array(array)",
        }
    }
}

/// Where a function's arguments come from in the harness's input.
#[derive(Clone, Copy, Debug)]
enum Input {
    /// The input is one number.
    Number,
    /// The input is an object: these fields, in the order of the procedure's arguments.
    Fields(&'static [(&'static str, Kind)]),
}

/// A function of a module: the procedure of the VLAD file that computes it.
struct Function {
    name: &'static str,
    procedure: &'static str,
    input: Input,
    output: Output,
}

/// How a function's result becomes its output.
#[derive(Clone, Copy)]
enum Output {
    /// Numbers, and arrays and lists of them, as they are ([`to_json`]).
    Plain,
    /// The result is a list, written as an object with these fields.
    Fields(&'static [&'static str]),
    /// Written by this function, which also sees the input.
    Custom(fn(&Value, &Json) -> Result<Json, String>),
}

/// A module of GradBench: its VLAD source and functions, and the checks across its input's
/// fields that the procedures' arguments cannot express.
struct Module {
    name: &'static str,
    source: &'static str,
    functions: &'static [Function],
    check: fn(&Json, &[Owned]) -> Result<(), String>,
}

/// The modules GradBench defines that vlad does not have, and why.
const UNSUPPORTED: &[(&str, &str)] = &[
    ("lstm", "the LSTM module is not written in VLAD"),
    ("ht", "the hand tracking module is not written in VLAD"),
];

fn no_check(_: &Json, _: &[Owned]) -> Result<(), String> {
    Ok(())
}

fn det_check(_: &Json, args: &[Owned]) -> Result<(), String> {
    if let [Owned::Reals(a), Owned::Real(ell)] = args {
        if a.len() as f64 != ell * ell {
            return Err(format!(
                "`A` has {} entries: an {ell} x {ell} matrix has {}",
                a.len(),
                ell * ell
            ));
        }
    }
    Ok(())
}

fn kmeans_check(_: &Json, args: &[Owned]) -> Result<(), String> {
    if let [Owned::Rows(points), Owned::Rows(centroids)] = args {
        if centroids.is_empty() {
            return Err("`centroids` is empty".into());
        }
        let d = centroids[0].len();
        if let Some(p) = points.first().filter(|p| p.len() != d) {
            return Err(format!(
                "the points have {} coordinates and the centroids {d}",
                p.len()
            ));
        }
    }
    Ok(())
}

const SADDLE: &[(&str, Kind)] = &[("start", Kind::Vector)];
const PARTICLE: &[(&str, Kind)] = &[("w", Kind::Real)];
const X: &[(&str, Kind)] = &[("x", Kind::Vector)];

const MODULES: &[Module] = &[
    Module {
        name: "hello",
        source: include_str!("../../../gradbench/hello.vlad"),
        functions: &[
            Function {
                name: "square",
                procedure: "hello-square",
                input: Input::Number,
                output: Output::Plain,
            },
            Function {
                name: "double",
                procedure: "hello-double",
                input: Input::Number,
                output: Output::Plain,
            },
        ],
        check: no_check,
    },
    Module {
        name: "saddle",
        source: include_str!("../../../gradbench/saddle.vlad"),
        functions: &[
            Function {
                name: "ff",
                procedure: "saddle-ff",
                input: Input::Fields(SADDLE),
                output: Output::Plain,
            },
            Function {
                name: "fr",
                procedure: "saddle-fr",
                input: Input::Fields(SADDLE),
                output: Output::Plain,
            },
            Function {
                name: "rf",
                procedure: "saddle-rf",
                input: Input::Fields(SADDLE),
                output: Output::Plain,
            },
            Function {
                name: "rr",
                procedure: "saddle-rr",
                input: Input::Fields(SADDLE),
                output: Output::Plain,
            },
        ],
        check: saddle_check,
    },
    Module {
        name: "particle",
        source: include_str!("../../../gradbench/particle.vlad"),
        functions: &[
            Function {
                name: "ff",
                procedure: "particle-ff",
                input: Input::Fields(PARTICLE),
                output: Output::Plain,
            },
            Function {
                name: "fr",
                procedure: "particle-fr",
                input: Input::Fields(PARTICLE),
                output: Output::Plain,
            },
            Function {
                name: "rf",
                procedure: "particle-rf",
                input: Input::Fields(PARTICLE),
                output: Output::Plain,
            },
            Function {
                name: "rr",
                procedure: "particle-rr",
                input: Input::Fields(PARTICLE),
                output: Output::Plain,
            },
        ],
        check: no_check,
    },
    Module {
        name: "lse",
        source: include_str!("../../../gradbench/lse.vlad"),
        functions: &[
            Function {
                name: "primal",
                procedure: "lse-primal",
                input: Input::Fields(X),
                output: Output::Plain,
            },
            Function {
                name: "gradient",
                procedure: "lse-gradient",
                input: Input::Fields(X),
                output: Output::Plain,
            },
        ],
        check: lse_check,
    },
    Module {
        name: "llsq",
        source: include_str!("../../../gradbench/llsq.vlad"),
        functions: &[
            Function {
                name: "primal",
                procedure: "llsq-primal",
                input: Input::Fields(&[("x", Kind::Vector), ("n", Kind::Count)]),
                output: Output::Plain,
            },
            Function {
                name: "gradient",
                procedure: "llsq-gradient",
                input: Input::Fields(&[("x", Kind::Vector), ("n", Kind::Count)]),
                output: Output::Plain,
            },
        ],
        check: no_check,
    },
    Module {
        name: "det",
        source: include_str!("../../../gradbench/det.vlad"),
        functions: &[
            Function {
                name: "primal",
                procedure: "det-primal",
                input: Input::Fields(&[("A", Kind::Vector), ("ell", Kind::Count)]),
                output: Output::Plain,
            },
            Function {
                name: "gradient",
                procedure: "det-gradient",
                input: Input::Fields(&[("A", Kind::Vector), ("ell", Kind::Count)]),
                output: Output::Plain,
            },
        ],
        check: det_check,
    },
    Module {
        name: "ode",
        source: include_str!("../../../gradbench/ode.vlad"),
        functions: &[
            Function {
                name: "primal",
                procedure: "ode-primal",
                input: Input::Fields(&[("x", Kind::Vector), ("s", Kind::Count)]),
                output: Output::Plain,
            },
            Function {
                name: "gradient",
                procedure: "ode-gradient",
                input: Input::Fields(&[("x", Kind::Vector), ("s", Kind::Count)]),
                output: Output::Plain,
            },
        ],
        check: ode_check,
    },
    Module {
        name: "kmeans",
        source: include_str!("../../../gradbench/kmeans.vlad"),
        functions: &[
            Function {
                name: "cost",
                procedure: "kmeans-cost",
                input: Input::Fields(&[("points", Kind::Matrix), ("centroids", Kind::Matrix)]),
                output: Output::Plain,
            },
            Function {
                name: "dir",
                procedure: "kmeans-dir",
                input: Input::Fields(&[("points", Kind::Matrix), ("centroids", Kind::Matrix)]),
                output: Output::Plain,
            },
        ],
        check: kmeans_check,
    },
    Module {
        name: "gmm",
        source: include_str!("../../../gradbench/gmm.vlad"),
        functions: &[
            Function {
                name: "objective",
                procedure: "gmm-objective",
                input: Input::Fields(GMM),
                output: Output::Plain,
            },
            Function {
                name: "jacobian",
                procedure: "gmm-jacobian",
                input: Input::Fields(GMM),
                output: Output::Fields(&["alpha", "mu", "q", "l"]),
            },
        ],
        check: gmm_check,
    },
    Module {
        name: "ba",
        source: include_str!("../../../gradbench/ba.vlad"),
        functions: &[
            Function {
                name: "objective",
                procedure: "ba-objective",
                input: Input::Fields(BA_OBJECTIVE),
                output: Output::Custom(ba_objective_output),
            },
            Function {
                name: "jacobian",
                procedure: "ba-jacobian",
                input: Input::Fields(BA_JACOBIAN),
                output: Output::Custom(ba_jacobian_output),
            },
        ],
        check: ba_check,
    },
];

/// gmm's arguments. `d`, `k` and `n` are checked against the arrays' sizes (the procedures
/// take them from the arrays): an exported procedure's arguments after the eighth arrive wrong
/// in the library, so the procedures take seven.
const GMM: &[(&str, Kind)] = &[
    ("x", Kind::Matrix),
    ("alpha", Kind::Vector),
    ("mu", Kind::Matrix),
    ("q", Kind::Matrix),
    ("l", Kind::Matrix),
    ("m", Kind::Real),
    ("gamma", Kind::Real),
];

/// The sizes of gmm's arrays agree with `d`, `k` and `n`.
fn gmm_check(input: &Json, args: &[Owned]) -> Result<(), String> {
    let [Owned::Rows(x), Owned::Reals(alpha), Owned::Rows(mu), Owned::Rows(q), Owned::Rows(l), ..] =
        args
    else {
        return Ok(());
    };
    let size = |name: &str| -> Result<usize, String> {
        match convert(&input[name], Kind::Count, &format!("`{name}`"))? {
            Owned::Real(v) => Ok(v as usize),
            _ => Err(format!("`{name}` must be a count")),
        }
    };
    let (d, k, n) = (size("d")?, size("k")?, size("n")?);
    if k == 0 || d == 0 {
        return Err("`d` and `k` must be at least 1".into());
    }
    let rows = |name: &str, m: &[Vec<f64>], count: usize, length: usize| {
        if m.len() != count || m.iter().any(|r| r.len() != length) {
            Err(format!("`{name}` must be {count} x {length}"))
        } else {
            Ok(())
        }
    };
    rows("x", x, n, d)?;
    rows("mu", mu, k, d)?;
    rows("q", q, k, d)?;
    rows("l", l, k, d.saturating_mul(d - 1) / 2)?;
    if alpha.len() != k {
        return Err(format!("`alpha` must have {k} numbers"));
    }
    Ok(())
}

const BA_OBJECTIVE: &[(&str, Kind)] = &[
    ("cam", Kind::Vector),
    ("x", Kind::Vector),
    ("w", Kind::Real),
    ("feat", Kind::Vector),
];
const BA_JACOBIAN: &[(&str, Kind)] = &[
    ("p", Kind::Count),
    ("cam", Kind::Vector),
    ("x", Kind::Vector),
    ("w", Kind::Real),
    ("feat", Kind::Vector),
];

/// ba's sizes: `n`, `m` and `p` counts (n, m at least 1), a camera of 11, a point of 3, a
/// feature of 2.
fn ba_sizes(input: &Json) -> Result<(usize, usize, usize), String> {
    let count = |name: &str| -> Result<usize, String> {
        match convert(&input[name], Kind::Count, &format!("`{name}`"))? {
            Owned::Real(v) => Ok(v as usize),
            _ => Err(format!("`{name}` must be a count")),
        }
    };
    let (n, m, p) = (count("n")?, count("m")?, count("p")?);
    if n == 0 || m == 0 {
        return Err("`n` and `m` must be at least 1".into());
    }
    Ok((n, m, p))
}

fn ba_check(input: &Json, args: &[Owned]) -> Result<(), String> {
    ba_sizes(input)?;
    let vectors: Vec<&Vec<f64>> = args
        .iter()
        .filter_map(|a| match a {
            Owned::Reals(v) => Some(v),
            _ => None,
        })
        .collect();
    if let [cam, x, feat] = vectors[..] {
        for (name, v, len) in [("cam", cam, 11), ("x", x, 3), ("feat", feat, 2)] {
            if v.len() != len {
                return Err(format!("`{name}` must have {len} numbers, not {}", v.len()));
            }
        }
    }
    Ok(())
}

/// `{"reproj_error": {"elements": [e0, e1], "repeated": p}, "w_err": {"element": w0,
/// "repeated": p}}`: every observation has the same errors.
fn ba_objective_output(result: &Value, input: &Json) -> Result<Json, String> {
    let (_, _, p) = ba_sizes(input)?;
    let Value::Pair(reprojection, weight) = result else {
        return Err(format!("the result {result} is not a pair"));
    };
    Ok(json!({
        "reproj_error": {"elements": to_json(reprojection)?, "repeated": p},
        "w_err": {"element": to_json(weight)?, "repeated": p},
    }))
}

/// The sparse Jacobian of the 2p reprojection errors and the p weight errors with respect to
/// the n cameras, the m points and the p weights (observation i: camera i mod n, point i mod
/// m), 3p x (11n + 3m + p), in CSR form `{rows, cols, vals}`: rows 2i and 2i + 1 hold the 15
/// entries of observation i's block (its camera's 11 columns, its point's 3, its weight's),
/// row 2p + i the derivative of its weight error.
fn ba_jacobian_output(result: &Value, input: &Json) -> Result<Json, String> {
    let (n, m, p) = ba_sizes(input)?;
    let shape = || format!("the result {result} is not p blocks and p derivatives");
    let Value::Pair(blocks, weights) = result else {
        return Err(shape());
    };
    let (Value::Array(blocks), Some(weights)) = (&**blocks, weights.reals()) else {
        return Err(shape());
    };
    if blocks.len() != p || weights.len() != p {
        return Err(shape());
    }
    let (mut rows, mut cols, mut vals) = (vec![0usize], Vec::new(), Vec::new());
    for (i, block) in blocks.iter().enumerate() {
        let Value::Array(block_rows) = block else {
            return Err(shape());
        };
        let camera = 11 * (i % n);
        let point = 11 * n + 3 * (i % m);
        let weight = 11 * n + 3 * m + i;
        let columns: Vec<usize> = (camera..camera + 11)
            .chain(point..point + 3)
            .chain([weight])
            .collect();
        for row in block_rows {
            let row = row.reals().filter(|r| r.len() == 15).ok_or_else(shape)?;
            cols.extend(&columns);
            vals.extend(row);
            rows.push(cols.len());
        }
        if block_rows.len() != 2 {
            return Err(shape());
        }
    }
    for (i, d) in weights.iter().enumerate() {
        cols.push(11 * n + 3 * m + i);
        vals.push(*d);
        rows.push(cols.len());
    }
    let vals: Vec<Value> = vals.into_iter().map(Value::Real).collect();
    Ok(json!({"rows": rows, "cols": cols, "vals": to_json(&Value::Array(vals))?}))
}

fn saddle_check(_: &Json, args: &[Owned]) -> Result<(), String> {
    match args {
        [Owned::Reals(s)] if s.len() != 2 => {
            Err(format!("`start` must have 2 numbers, not {}", s.len()))
        }
        _ => Ok(()),
    }
}

fn lse_check(_: &Json, args: &[Owned]) -> Result<(), String> {
    match args {
        [Owned::Reals(x)] if x.is_empty() => Err("`x` is empty".into()),
        _ => Ok(()),
    }
}

fn ode_check(_: &Json, args: &[Owned]) -> Result<(), String> {
    match args {
        [Owned::Reals(x), _] if x.is_empty() => Err("`x` is empty".into()),
        [_, Owned::Real(s)] if *s == 0.0 => Err("`s` must be at least 1".into()),
        _ => Ok(()),
    }
}

/// An argument converted from JSON, owned (an [`Arg`] borrows it).
#[derive(Clone, Debug, PartialEq)]
enum Owned {
    Real(f64),
    Reals(Vec<f64>),
    Rows(Vec<Vec<f64>>),
}

impl Owned {
    fn arg(&self) -> Arg<'_> {
        match self {
            Owned::Real(x) => Arg::Real(*x),
            Owned::Reals(xs) => Arg::Reals(xs),
            Owned::Rows(rows) => Arg::Array(rows.iter().map(|r| Arg::Reals(r)).collect()),
        }
    }
}

fn number(v: &Json, what: &str) -> Result<f64, String> {
    v.as_f64()
        .ok_or_else(|| format!("{what} must be a number, not {}", brief(v)))
}

fn numbers(v: &Json, what: &str) -> Result<Vec<f64>, String> {
    let items = v
        .as_array()
        .ok_or_else(|| format!("{what} must be an array of numbers, not {}", brief(v)))?;
    items
        .iter()
        .enumerate()
        .map(|(i, x)| number(x, &format!("{what}[{i}]")))
        .collect()
}

/// A JSON value, shortened for a message.
fn brief(v: &Json) -> String {
    let text = v.to_string();
    match text.char_indices().nth(40) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text,
    }
}

fn convert(v: &Json, kind: Kind, what: &str) -> Result<Owned, String> {
    match kind {
        Kind::Real => Ok(Owned::Real(number(v, what)?)),
        Kind::Count => {
            let x = number(v, what)?;
            if x >= 0.0 && x.fract() == 0.0 && x <= (1u64 << 53) as f64 {
                Ok(Owned::Real(x))
            } else {
                Err(format!("{what} must be a non-negative integer, not {x}"))
            }
        }
        Kind::Vector => Ok(Owned::Reals(numbers(v, what)?)),
        Kind::Matrix => {
            let rows = v
                .as_array()
                .ok_or_else(|| format!("{what} must be an array of arrays, not {}", brief(v)))?;
            let rows: Vec<Vec<f64>> = rows
                .iter()
                .enumerate()
                .map(|(i, r)| numbers(r, &format!("{what}[{i}]")))
                .collect::<Result<_, _>>()?;
            if let Some(i) = rows.iter().position(|r| r.len() != rows[0].len()) {
                return Err(format!(
                    "{what}[{i}] has {} numbers and {what}[0] {}: the rows must have one length",
                    rows[i].len(),
                    rows[0].len()
                ));
            }
            Ok(Owned::Rows(rows))
        }
    }
}

/// The arguments of `function` from the harness's input.
fn arguments(function: &Function, input: &Json) -> Result<Vec<Owned>, String> {
    match function.input {
        Input::Number => Ok(vec![Owned::Real(number(input, "the input")?)]),
        Input::Fields(fields) => {
            let object = input
                .as_object()
                .ok_or_else(|| format!("the input must be an object, not {}", brief(input)))?;
            fields
                .iter()
                .map(|(name, kind)| {
                    let v = object
                        .get(*name)
                        .ok_or_else(|| format!("the input has no field `{name}`"))?;
                    convert(v, *kind, &format!("`{name}`"))
                })
                .collect()
        }
    }
}

/// How many times to run: the input's `min_runs` (at least 1) and `min_seconds`.
fn repetitions(input: &Json) -> Result<(u64, f64), String> {
    let Some(object) = input.as_object() else {
        return Ok((1, 0.0));
    };
    let runs = match object.get("min_runs") {
        None => 1,
        // An integer, also written as a float (`3.0`).
        Some(v) => match v.as_u64().or_else(|| {
            v.as_f64()
                .filter(|x| *x >= 0.0 && x.fract() == 0.0 && *x < u64::MAX as f64)
                .map(|x| x as u64)
        }) {
            Some(n) => n.max(1),
            None => {
                return Err(format!(
                    "`min_runs` must be a non-negative integer, not {v}"
                ))
            }
        },
    };
    let seconds = match object.get("min_seconds") {
        None => 0.0,
        Some(v) => match v.as_f64() {
            Some(s) if s >= 0.0 && s.is_finite() => s,
            _ => {
                return Err(format!(
                    "`min_seconds` must be a non-negative number, not {v}"
                ))
            }
        },
    };
    Ok((runs, seconds))
}

/// A result as JSON: reals as numbers, arrays and lists as arrays. A result that JSON cannot
/// carry (NaN, an infinity, a procedure) is an error.
fn to_json(v: &Value) -> Result<Json, String> {
    match v {
        Value::Real(r) => serde_json::Number::from_f64(*r)
            .map(Json::Number)
            .ok_or_else(|| format!("the result holds {r}, which JSON cannot carry")),
        Value::Bool(b) => Ok(Json::Bool(*b)),
        Value::Nil => Ok(Json::Array(Vec::new())),
        Value::Array(xs) => xs.iter().map(to_json).collect::<Result<_, _>>(),
        Value::Pair(..) => match v.list() {
            Some(items) => items.iter().map(to_json).collect::<Result<_, _>>(),
            None => Err(format!("the result {v} is not a list")),
        },
        Value::Other => Err("the result holds a procedure or an AD value".into()),
    }
}

/// A protocol session: the modules defined so far.
pub struct Session {
    /// Where the modules' VLAD files are read from; `None`: the ones built into vlad.
    modules: Option<PathBuf>,
    native: bool,
    defined: HashMap<String, Library>,
    /// Where the built-in modules are written for the compiler.
    scratch: Option<tempfile::TempDir>,
}

impl Session {
    pub fn new(modules: Option<PathBuf>, native: bool) -> Session {
        Session {
            modules,
            native,
            defined: HashMap::new(),
            scratch: None,
        }
    }

    /// Answers every message of `input` on `output` until `input` ends; logs go to `log`.
    /// The exit code: 0 at the end of the input, 1 when the input or output fails.
    pub fn serve(
        &mut self,
        mut input: impl BufRead,
        mut output: impl Write,
        mut log: impl Write,
    ) -> u8 {
        let mut line = Vec::new();
        for number in 1.. {
            line.clear();
            match input.read_until(b'\n', &mut line) {
                Ok(0) => return 0,
                Ok(_) => {}
                Err(e) => {
                    let _ = writeln!(log, "vlad gradbench: cannot read the input: {e}");
                    return 1;
                }
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match self.answer(&line, &mut log) {
                Ok(reply) => {
                    let written = writeln!(output, "{reply}").and_then(|()| output.flush());
                    if let Err(e) = written {
                        let _ = writeln!(log, "vlad gradbench: cannot write the answer: {e}");
                        return 1;
                    }
                }
                Err(why) => {
                    let _ = writeln!(log, "vlad gradbench: line {number}: {why}; not answered");
                }
            }
        }
        0
    }

    /// The answer to one line, or why it cannot be answered (it has no id).
    fn answer(&mut self, line: &[u8], log: &mut impl Write) -> Result<Json, String> {
        let message: Json =
            serde_json::from_slice(line).map_err(|e| format!("not a JSON message ({e})"))?;
        let object = message
            .as_object()
            .ok_or_else(|| format!("not a JSON object: {}", brief(&message)))?;
        let id = object
            .get("id")
            .ok_or_else(|| "the message has no `id`".to_string())?
            .clone();
        let mut reply = Map::new();
        reply.insert("id".into(), id);
        let outcome = match object.get("kind").and_then(Json::as_str) {
            None => Err("the message has no `kind` (a string)".to_string()),
            Some("start") => {
                reply.insert("tool".into(), json!("vlad"));
                return Ok(Json::Object(reply));
            }
            Some("define") => string(object, "module").and_then(|m| self.define(m, log)),
            Some("evaluate") => self.evaluate(object),
            Some(_) => return Ok(Json::Object(reply)),
        };
        match outcome {
            Ok(fields) => {
                reply.insert("success".into(), json!(true));
                reply.extend(fields);
            }
            Err(error) => {
                reply.insert("success".into(), json!(false));
                reply.insert("error".into(), json!(error));
            }
        }
        Ok(Json::Object(reply))
    }

    /// Compiles `name` (once).
    fn define(&mut self, name: &str, log: &mut impl Write) -> Result<Map<String, Json>, String> {
        if self.defined.contains_key(name) {
            return Ok(Map::new());
        }
        let module = find_module(name)?;
        let file = match &self.modules {
            Some(dir) => dir.join(format!("{name}.vlad")),
            None => self.write_builtin(module)?,
        };
        let exports: Vec<String> = module
            .functions
            .iter()
            .map(|f| {
                let shapes: Vec<&str> = match f.input {
                    Input::Number => vec!["real"],
                    Input::Fields(fields) => fields.iter().map(|(_, k)| k.shape()).collect(),
                };
                format!("{}({})", f.procedure, shapes.join(", "))
            })
            .collect();
        let exports: Vec<&str> = exports.iter().map(String::as_str).collect();
        let started = Instant::now();
        let library = Library::build_with(&file, &[], &exports, self.native)?;
        let _ = writeln!(
            log,
            "vlad gradbench: compiled `{name}` in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        self.defined.insert(name.to_string(), library);
        Ok(Map::new())
    }

    /// The built-in source of `module` written to a file of the session's scratch directory
    /// (the compiler reads files; its messages name this one).
    fn write_builtin(&mut self, module: &Module) -> Result<PathBuf, String> {
        if self.scratch.is_none() {
            let dir = tempfile::Builder::new()
                .prefix("vlad-gradbench")
                .tempdir()
                .map_err(|e| format!("cannot make a temporary directory: {e}"))?;
            self.scratch = Some(dir);
        }
        let dir: &Path = self
            .scratch
            .as_ref()
            .map(|d| d.path())
            .unwrap_or(Path::new("."));
        let file = dir.join(format!("{}.vlad", module.name));
        std::fs::write(&file, module.source)
            .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        Ok(file)
    }

    fn evaluate(&mut self, message: &Map<String, Json>) -> Result<Map<String, Json>, String> {
        let name = string(message, "module")?;
        let function_name = string(message, "function")?;
        let input = message
            .get("input")
            .ok_or_else(|| "the message has no `input`".to_string())?;
        let module = find_module(name)?;
        let function = module
            .functions
            .iter()
            .find(|f| f.name == function_name)
            .ok_or_else(|| {
                let names: Vec<&str> = module.functions.iter().map(|f| f.name).collect();
                format!(
                    "the module `{name}` has no function `{function_name}` (it has {})",
                    names.join(", ")
                )
            })?;
        let library = self
            .defined
            .get_mut(name)
            .ok_or_else(|| format!("the module `{name}` is not defined (send `define` first)"))?;
        let owned = arguments(function, input)?;
        (module.check)(input, &owned)?;
        let (min_runs, min_seconds) = repetitions(input)?;
        let args: Vec<Arg> = owned.iter().map(Owned::arg).collect();
        let (mut timings, mut total, mut runs) = (Vec::new(), Duration::ZERO, 0u64);
        let result = loop {
            let started = Instant::now();
            let result = library.call(function.procedure, &args);
            let took = started.elapsed();
            let result = result?;
            runs += 1;
            total += took;
            timings.push(json!({"name": "evaluate", "nanoseconds": took.as_nanos() as u64}));
            if runs >= min_runs && total.as_secs_f64() >= min_seconds {
                break result;
            }
        };
        let mut fields = Map::new();
        let output = match function.output {
            Output::Plain => to_json(&result)?,
            Output::Custom(write) => write(&result, input)?,
            Output::Fields(names) => {
                let items = result.list().filter(|items| items.len() == names.len());
                let items = items.ok_or_else(|| {
                    format!("the result {result} is not a list of {}", names.len())
                })?;
                let mut object = Map::new();
                for (name, item) in names.iter().zip(&items) {
                    object.insert(name.to_string(), to_json(item)?);
                }
                Json::Object(object)
            }
        };
        fields.insert("output".into(), output);
        fields.insert("timings".into(), Json::Array(timings));
        Ok(fields)
    }
}

fn find_module(name: &str) -> Result<&'static Module, String> {
    if let Some((_, why)) = UNSUPPORTED.iter().find(|(m, _)| *m == name) {
        return Err(format!("vlad does not support the module `{name}`: {why}"));
    }
    MODULES.iter().find(|m| m.name == name).ok_or_else(|| {
        let names: Vec<&str> = MODULES.iter().map(|m| m.name).collect();
        format!("vlad has no module `{name}` (it has {})", names.join(", "))
    })
}

fn string<'a>(message: &'a Map<String, Json>, field: &str) -> Result<&'a str, String> {
    message
        .get(field)
        .and_then(Json::as_str)
        .ok_or_else(|| format!("the message has no `{field}` (a string)"))
}

/// `vlad gradbench`: the session on standard input and output.
pub fn gradbench(modules: Option<PathBuf>, native: bool) -> u8 {
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    Session::new(modules, native).serve(stdin, stdout, std::io::stderr())
}
