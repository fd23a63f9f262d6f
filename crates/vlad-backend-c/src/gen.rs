//! Code generation: one C function per specialised function, values as flat lists of leaves.
//! See the crate documentation for the representation.

mod arrays;

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use vlad_core::{Expr, ExprId, Pattern, Prim, Span, Tag, Var};
use vlad_flow::analysis::datum_av;
use vlad_flow::{Analysis, Av, Boxed, Program, Target};

/// Why a program cannot be compiled to C (yet); `vlad run` says this and falls back to the
/// evaluator.
#[derive(Clone, Debug)]
pub struct Unsupported {
    pub span: Span,
    pub reason: String,
}

type R<T> = Result<T, Unsupported>;

/// One scalar of a flat value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Leaf {
    /// "Some real": a `double`.
    D,
    /// "Some boolean": a `long` (0 or 1).
    B,
    /// A boxed value: a `V` (pointer to a runtime object).
    V,
}

impl Leaf {
    fn ctype(self) -> &'static str {
        match self {
            Leaf::D => "double",
            Leaf::B => "long",
            Leaf::V => "V",
        }
    }

    fn letter(self) -> char {
        match self {
            Leaf::D => 'd',
            Leaf::B => 'b',
            Leaf::V => 'v',
        }
    }

    /// The field of a runtime slot (`vl_slot`) that holds this leaf.
    fn slot(self) -> &'static str {
        match self {
            Leaf::D => "d",
            Leaf::B => "b",
            Leaf::V => "v",
        }
    }

    /// A placeholder of this type (for code after a call that never returns).
    fn dummy(self) -> &'static str {
        match self {
            Leaf::D => "0.0",
            Leaf::B => "0",
            Leaf::V => "vl_nil",
        }
    }
}

/// A value in generated code: its abstract value and the C expressions of its leaves (names of
/// C variables or literals, cheap to repeat).
#[derive(Clone, Debug)]
struct Val {
    av: Av,
    leaves: Vec<String>,
}

impl Val {
    fn known(av: Av) -> Val {
        Val {
            av,
            leaves: Vec::new(),
        }
    }
}

/// The code numbers of primitives in a dispatch `switch` (closures use their code number).
fn prim_case(p: Prim) -> i64 {
    -1 - Prim::ALL.iter().position(|q| *q == p).expect("a primitive") as i64
}

fn prim_index(p: Prim) -> usize {
    Prim::ALL.iter().position(|q| *q == p).expect("a primitive")
}

fn tag_index(t: Tag) -> u32 {
    t as u32
}

/// An AD map of boxed values that boxed closures need a generated function for: the
/// `vl_map_closure` kinds of runtime.c (`number`), plus `bundle` (`vl_map_bundle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum MapKind {
    /// `perturb`, `sensitize`, `*j`.
    Tag(Tag),
    /// `unperturb`, `unsensitize`, `*j-inverse`.
    Untag(Tag),
    /// `primal` (false) or `tangent` (true).
    Split(bool),
    /// The zero sensitivity before its tag (`%sensitivity-zero`).
    SZero,
    ShallowPrimal,
    Bundle,
    /// The zero sensitivity of a reverse value, computed in full (`vl_zero_sens`).
    ZeroSensitivity,
}

impl MapKind {
    /// The kind's number in runtime.c.
    fn number(self) -> u32 {
        match self {
            MapKind::Tag(t) => tag_index(t),
            MapKind::Untag(t) => 4 + tag_index(t),
            MapKind::Split(tangent) => 8 + tangent as u32,
            MapKind::SZero => 10,
            MapKind::ShallowPrimal => 11,
            MapKind::Bundle => 12,
            MapKind::ZeroSensitivity => 14,
        }
    }

    /// The primitive whose abstract version gives the map's result.
    fn prim(self) -> Option<Prim> {
        Some(match self {
            MapKind::Tag(Tag::Perturbation) => Prim::Perturb,
            MapKind::Tag(Tag::Sensitivity) => Prim::Sensitize,
            MapKind::Tag(Tag::Reverse) => Prim::StarJ,
            MapKind::Untag(Tag::Perturbation) => Prim::Unperturb,
            MapKind::Untag(Tag::Sensitivity) => Prim::Unsensitize,
            MapKind::Untag(Tag::Reverse) => Prim::StarJInverse,
            MapKind::Split(false) => Prim::Primal,
            MapKind::Split(true) => Prim::Tangent,
            MapKind::SZero => Prim::SZero,
            MapKind::ShallowPrimal => Prim::ShallowPrimal,
            MapKind::Bundle => Prim::Bundle,
            // Forward tags come from `bundle`; the full zero is not one primitive.
            MapKind::Tag(Tag::Forward)
            | MapKind::Untag(Tag::Forward)
            | MapKind::ZeroSensitivity => return None,
        })
    }
}

/// How the function being generated returns: its result's abstract value, C type and number
/// of leaves.
struct Return {
    av: Av,
    ctype: String,
    leaves: usize,
}

/// The placeholder lines around a call whose result has no boxed part (`call_fun`):
/// `MARK k m` before the call of `fk`, `RELEASE k m` after it; `finish_marks` turns them into
/// an arena mark `m` and its release, or drops them.
const MARK: &str = "/*@mark ";
const RELEASE: &str = "/*@release ";

/// The numbers of the generated functions that can allocate boxed values: those that hold a
/// boxed value (a `V` variable or parameter), and those that call one of them.
fn allocating_functions(texts: &[(usize, String)]) -> HashSet<usize> {
    let calls: HashMap<usize, Vec<usize>> = texts
        .iter()
        .map(|(k, t)| (*k, called_functions(t)))
        .collect();
    let mut out: HashSet<usize> = texts
        .iter()
        .filter(|(_, t)| holds_boxed(t))
        .map(|(k, _)| *k)
        .collect();
    loop {
        let before = out.len();
        for (k, cs) in &calls {
            if !out.contains(k) && cs.iter().any(|c| out.contains(c)) {
                out.insert(*k);
            }
        }
        if out.len() == before {
            return out;
        }
    }
}

/// Whether C code declares a boxed value: `V name` after a delimiter.
fn holds_boxed(text: &str) -> bool {
    let b = text.as_bytes();
    text.match_indices("V ").any(|(i, _)| {
        (i == 0 || matches!(b[i - 1], b' ' | b'(' | b'\n'))
            && b.get(i + 2).is_some_and(|c| c.is_ascii_lowercase())
    })
}

/// The generated functions `fN(` that C code calls.
pub(crate) fn called_functions(text: &str) -> Vec<usize> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    for (i, _) in text.match_indices('f') {
        if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
            continue;
        }
        let digits: String = text[i + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if !digits.is_empty() && b.get(i + 1 + digits.len()) == Some(&b'(') {
            if let Ok(n) = digits.parse() {
                out.push(n);
            }
        }
    }
    out
}

/// Resolves the mark placeholders of a function's text. A mark stays where the callee can
/// allocate and the call is not the last thing before a `return` (a tail call stays a tail
/// call, so loops keep running in constant stack; the enclosing call's mark reclaims it).
fn finish_marks(text: &str, allocating: &HashSet<usize>) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut keep: HashSet<String> = HashSet::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(rest) = l.trim_start().strip_prefix(RELEASE) else {
            continue;
        };
        let (k, m) = rest.split_once(' ').unwrap_or(("", ""));
        let tail = lines
            .get(i + 1)
            .is_some_and(|n| n.trim_start().starts_with("return"));
        if !tail && k.parse().is_ok_and(|k: usize| allocating.contains(&k)) {
            keep.insert(m.to_string());
        }
    }
    let mut out = String::with_capacity(text.len());
    for l in lines {
        let t = l.trim_start();
        let indent = &l[..l.len() - t.len()];
        if let Some(rest) = t.strip_prefix(MARK) {
            let m = rest.split_once(' ').map_or("", |x| x.1);
            if keep.contains(m) {
                let _ = writeln!(out, "{indent}vl_mark_t {m} = vl_mark();");
            }
        } else if let Some(rest) = t.strip_prefix(RELEASE) {
            let m = rest.split_once(' ').map_or("", |x| x.1);
            if keep.contains(m) {
                let _ = writeln!(out, "{indent}vl_release({m});");
            }
        } else {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// The parameters (C type, name) of a generated function's signature.
pub(crate) fn parameters(sig: &str) -> Vec<(String, String)> {
    let Some((_, ps)) = sig.split_once('(') else {
        return Vec::new();
    };
    let ps = ps.trim_end_matches(')');
    if ps == "void" || ps.is_empty() {
        return Vec::new();
    }
    ps.split(", ")
        .filter_map(|p| p.rsplit_once(' '))
        .map(|(t, n)| (t.to_string(), n.to_string()))
        .collect()
}

/// The callee and the arguments of a tail call `return fK(args);` whose arguments are all
/// literals or variables.
fn simple_tail_call(l: &str) -> Option<(usize, Vec<String>)> {
    let call = l.trim_start().strip_prefix("return f")?;
    let digits = call.bytes().take_while(u8::is_ascii_digit).count();
    let k = call[..digits].parse::<usize>().ok()?;
    let args = call[digits..].strip_prefix('(')?.strip_suffix(");")?;
    let args: Vec<String> = if args.is_empty() {
        Vec::new()
    } else {
        args.split(", ").map(str::to_string).collect()
    };
    args.iter().all(|a| is_simple(a)).then_some((k, args))
}

/// Arena releases before the tail calls of function `me` (whose text is `text`).
///
/// A tail call `return fK(args);` passes on nothing that this call of the function allocated
/// when each argument is a literal or a variable and every argument in a boxed (`V`) parameter
/// of the callee is one of the function's own parameters (allocated before it was entered).
/// Its result is the callee's, so everything allocated since the function was entered is
/// garbage: the function takes an arena mark on entry and releases it before such a call. A
/// loop (a function calling itself in tail position) that builds arrays or boxed values at
/// each step, and carries only reals to the next, then runs in constant memory.
///
/// A loop that carries an array it built to the next step (a simulation stepping a state
/// vector) needs more: the array is copied down to the mark (`vl_release_carrying`) when its
/// elements hold no pointers (`carriable`, per function and parameter). The copy must
/// replace the previous step's array, so the mark has to stay where it was on the loop's
/// first entry: the function becomes a C loop (`for (;;)`, the mark taken once before it),
/// and its self tail calls assign the parameters and `continue`. A boxed parameter may then
/// hold something an earlier step allocated above the mark, so a release is allowed only
/// where each boxed argument is copied or is a parameter that every self tail call passes on
/// unchanged (still the caller's, below the mark).
fn release_before_tail_calls(
    text: &str,
    me: usize,
    params: &HashMap<usize, Vec<(String, String)>>,
    carriable: &HashMap<usize, Vec<bool>>,
) -> String {
    let Some(own) = params.get(&me) else {
        return text.to_string();
    };
    let calls: Vec<Option<(usize, Vec<String>)>> = text.lines().map(simple_tail_call).collect();
    let self_call = format!("return f{me}(");
    // The boxed parameters every self tail call passes on unchanged, in place.
    let invariant: Vec<bool> = own
        .iter()
        .enumerate()
        .map(|(j, (ty, name))| {
            ty == "V"
                && text.lines().zip(&calls).all(|(l, c)| {
                    !l.trim_start().starts_with(&self_call)
                        || c.as_ref().is_some_and(|(_, a)| a.get(j) == Some(name))
                })
        })
        .collect();
    let is_own = |a: &str| own.iter().any(|(_, n)| n == a);
    let is_invariant = |a: &str| {
        own.iter()
            .zip(&invariant)
            .any(|((_, n), inv)| *inv && n == a)
    };
    // The arguments to copy at each releasing call (`None`: no release there), with the C
    // loop (`looped`) or without.
    let plan = |call: &Option<(usize, Vec<String>)>, looped: bool| -> Option<Vec<usize>> {
        let (k, args) = call.as_ref()?;
        let callee = params.get(k)?;
        if args.len() != callee.len() {
            return None;
        }
        let mut copied = Vec::new();
        for (j, (a, (ty, _))) in args.iter().zip(callee).enumerate() {
            if ty != "V" || (!looped && is_own(a)) || (looped && is_invariant(a)) {
                continue;
            }
            if looped && *k == me && carriable.get(&me).is_some_and(|c| c.get(j) == Some(&true)) {
                copied.push(j);
            } else {
                return None;
            }
        }
        Some(copied)
    };
    let looped = calls.iter().any(|c| {
        c.as_ref().is_some_and(|(k, _)| *k == me) && plan(c, true).is_some_and(|p| !p.is_empty())
    });
    let plans: Vec<Option<Vec<usize>>> = calls.iter().map(|c| plan(c, looped)).collect();
    if plans.iter().all(Option::is_none) {
        return text.to_string();
    }
    let lines: Vec<&str> = text.lines().collect();
    let last = lines.iter().rposition(|l| *l == "}");
    let mut out = String::with_capacity(text.len() + 128);
    for (i, l) in lines.iter().enumerate() {
        let indent = &l[..l.len() - l.trim_start().len()];
        if looped && Some(i) == last {
            out.push_str("  }\n");
        }
        match (&plans[i], &calls[i]) {
            (Some(copied), Some((k, args))) => {
                let mut args = args.clone();
                if copied.is_empty() {
                    let _ = writeln!(out, "{indent}vl_release(vl_entry);");
                } else {
                    let c = format!("vl_c{i}");
                    let items: Vec<&str> = copied.iter().map(|&j| args[j].as_str()).collect();
                    for statement in release_carrying("vl_entry", &c, &items) {
                        let _ = writeln!(out, "{indent}{statement}");
                    }
                    for (n, &j) in copied.iter().enumerate() {
                        args[j] = format!("{c}[{n}]");
                    }
                }
                if looped && *k == me {
                    // The parameters all at once (an argument may be another parameter).
                    let _ = write!(out, "{indent}{{");
                    for (j, ((ty, _), a)) in own.iter().zip(&args).enumerate() {
                        let _ = write!(out, " {ty} vl_n{i}_{j} = {a};");
                    }
                    for (j, (_, name)) in own.iter().enumerate() {
                        let _ = write!(out, " {name} = vl_n{i}_{j};");
                    }
                    out.push_str(" continue; }");
                } else {
                    let _ = write!(out, "{indent}return f{k}({});", args.join(", "));
                }
            }
            _ => out.push_str(l),
        }
        out.push('\n');
        if i == 0 {
            out.push_str("  vl_mark_t vl_entry = vl_mark();\n");
            if looped {
                out.push_str("  for (;;) {\n");
            }
        }
    }
    out
}

/// The C statements that release the arena to `mark` keeping the flat arrays `items`, copied
/// down to it: afterwards element `n` of the array `name` is the copy of `items[n]`.
fn release_carrying(mark: &str, name: &str, items: &[&str]) -> [String; 2] {
    [
        format!("V {name}[] = {{{}}};", items.join(", ")),
        format!("vl_release_carrying({mark}, {name}, {});", items.len()),
    ]
}

/// `T t = fK(...);` followed by a `return` of exactly `t` (all its fields, in order) becomes
/// `return fK(...);`: GCC makes a tail call of that (a jump, arguments in place), not of a call
/// whose struct result is copied field by field into the caller's result.
fn return_calls(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < lines.len() {
        if let Some(merged) = lines.get(i + 1).and_then(|r| returned_call(lines[i], r)) {
            out.push_str(&merged);
            i += 2;
        } else {
            out.push_str(lines[i]);
            i += 1;
        }
        out.push('\n');
    }
    out
}

/// `return CALL;` where `line` is `T t = CALL;` with CALL a generated function's call, and
/// `ret` returns `t` unchanged.
fn returned_call(line: &str, ret: &str) -> Option<String> {
    let body = line.trim_start();
    let indent = &line[..line.len() - body.len()];
    let (decl, call) = body.split_once(" = ")?;
    let call = call.strip_suffix(';')?;
    let (ty, t) = decl.rsplit_once(' ')?;
    let is_call = call.strip_prefix('f').is_some_and(|r| {
        let digits = r.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0 && r[digits..].starts_with('(')
    });
    if !is_call || !t.starts_with('t') {
        return None;
    }
    let r = ret
        .trim_start()
        .strip_prefix("return ")?
        .strip_suffix(';')?;
    let same = if r == t {
        matches!(ty, "double" | "long" | "V")
    } else if let Some(fields) = r
        .strip_prefix(&format!("({ty}){{"))
        .and_then(|f| f.strip_suffix('}'))
    {
        ty.starts_with("struct ")
            && fields
                .split(", ")
                .enumerate()
                .all(|(k, f)| f == format!("{t}.f{k}"))
    } else {
        false
    };
    same.then(|| format!("{indent}return {call};"))
}

/// A C double literal with exactly the value `x`.
fn real_literal(x: f64) -> String {
    if x.is_nan() {
        "NAN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "INFINITY" } else { "(-INFINITY)" }.into()
    } else {
        // Rust's `{:e}` is the shortest representation that reads back as `x`.
        format!("({x:e})")
    }
}

fn c_string(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '?' => {
                let _ = write!(o, "\\{:03o}", c as u32);
            }
            c if c.is_ascii() => o.push(c),
            c => {
                let mut b = [0u8; 4];
                for byte in c.encode_utf8(&mut b).bytes() {
                    let _ = write!(o, "\\{byte:03o}");
                }
            }
        }
    }
    o.push('"');
    o
}

/// The rendered error position of a source span: the text before the message (`path:line:col:
/// error: `) and the source excerpt after it; `None` for no position. For a span in library
/// code: the message its errors are reported with, if its line gives one (and nothing after).
pub type SiteRenderer<'r> = &'r dyn Fn(Span) -> Option<(String, String)>;

struct Gen<'g, 'a> {
    an: &'g mut Analysis<'a>,
    prog: &'g Program,
    boxed: Boxed,
    render: SiteRenderer<'g>,
    structs: HashMap<Vec<Leaf>, String>,
    struct_defs: String,
    sites: Vec<(String, String)>,
    site_ids: HashMap<Span, usize>,
    /// The body of the function being generated.
    body: String,
    indent: usize,
    tmp: usize,
    /// The key whose body is generated (its recorded values).
    key: usize,
    /// The innermost source position, for `Unsupported`.
    span: Span,
    /// The AD maps of boxed closures the program uses (`MapKind` numbers of runtime.c).
    map_kinds: std::collections::BTreeSet<MapKind>,
    /// Boxing only to print or describe a value: a closure whose code is never called boxed
    /// (it has no environment summary) is boxed without its environment.
    for_display: bool,
    /// Boxed constants: the global that holds each, its declaration, and the code that builds
    /// them all at start-up (see `boxed_val`).
    constants: HashMap<Av, String>,
    constant_decls: String,
    constant_init: String,
    /// The element layouts of flat arrays boxed by reference (`vl_flatref`), with whether
    /// they are boxed only for display: entry `N` is boxed by `vl_box_elem_N`
    /// (`gen/arrays.rs`, `elem_boxers`).
    elem_boxers: Vec<(Av, bool)>,
    elem_boxer_ids: HashMap<(Av, bool), usize>,
}

/// Generates the C program (the runtime included) for the specialised `prog` of `an`; `render`
/// gives the position text of error sites. `final_error`, if any, is a rendered diagnostic the
/// program reports after its top-level expressions, exiting with status 1 (the expansion error
/// of the top-level form that follows them, which the evaluator reports when it gets there).
/// With `print_values`, the value of each entry is printed on a line of its own; without, the
/// entries print only what they write (a whole program's run writes its expressions' values
/// itself).
pub fn generate(
    an: &mut Analysis<'_>,
    prog: &Program,
    render: SiteRenderer<'_>,
    final_error: Option<&str>,
    print_values: bool,
) -> R<crate::units::CProgram> {
    let boxed = an.boxed_snapshot();
    let mut g = Gen {
        an,
        prog,
        boxed,
        render,
        structs: HashMap::new(),
        struct_defs: String::new(),
        sites: vec![("vlad: error: ".into(), String::new())],
        site_ids: HashMap::new(),
        body: String::new(),
        indent: 1,
        tmp: 0,
        key: usize::MAX,
        span: Span::NONE,
        map_kinds: Default::default(),
        for_display: false,
        constants: HashMap::new(),
        constant_decls: String::new(),
        constant_init: String::new(),
        elem_boxers: Vec::new(),
        elem_boxer_ids: HashMap::new(),
    };
    let mut sigs = Vec::new();
    let mut texts = Vec::new();
    for (k, f) in prog.funs.iter().enumerate() {
        if f.is_none() {
            continue;
        }
        let (sig, text) = g.function(k).map_err(|u| g.placed(u))?;
        sigs.push(sig);
        texts.push((k, text));
    }
    // The entry point: each top-level expression in order, its value printed.
    g.body.clear();
    g.key = usize::MAX;
    for &k in &prog.entries {
        let v = g.call_fun(k, Vec::new(), Vec::new())?;
        if v.av == Av::Bottom || !print_values {
            continue;
        }
        if let Some(text) = known_text(&v.av) {
            // Printed at compile time (a constant list may be long).
            g.line(format!("puts({});", c_string(&text)));
            continue;
        }
        let b = g.boxed_for_display(&v)?;
        g.line(format!("vl_print_line({b});"));
    }
    if let Some(d) = final_error {
        g.line(format!("vl_exit_diagnostic({});", c_string(d)));
    }
    let allocating = allocating_functions(&texts);
    let params: HashMap<usize, Vec<(String, String)>> = texts
        .iter()
        .zip(&sigs)
        .map(|((k, _), sig)| (*k, parameters(sig)))
        .collect();
    let mut carriable = HashMap::new();
    for (k, _) in &texts {
        let flags = g.carriable_params(*k)?;
        if flags.len() == params[k].len() {
            carriable.insert(*k, flags);
        }
    }
    let mut funs: Vec<crate::units::Function> = texts
        .iter()
        .zip(sigs)
        .map(|((k, text), sig)| {
            let text = return_calls(&finish_marks(text, &allocating));
            let text = if allocating.contains(k) {
                release_before_tail_calls(&text, *k, &params, &carriable)
            } else {
                text
            };
            // Storage classes are the layout's choice (`units.rs`).
            let strip = |s: &str| s.strip_prefix("static ").unwrap_or(s).to_string();
            crate::units::Function {
                number: *k,
                signature: strip(&sig),
                text: strip(&text),
            }
        })
        .collect();
    // Deep recursion runs on an explicit stack beyond a native budget (`machine.rs`).
    let next = funs.iter().map(|f| f.number).max().map_or(0, |n| n + 1);
    let (frames, _) = crate::machine::add_machines(&mut funs, next);
    let main = format!(
        "static void vl_program(void) {{\n  vl_init_constants();\n{}}}\n",
        finish_marks(&g.body, &allocating)
    );
    // The maps are generated code too: any call they make gets its mark resolved.
    let maps = finish_marks(&g.closure_maps()?, &allocating);

    let mut head = String::new();
    head.push_str("/* Generated by vlad from the specialised program. */\n");
    head.push_str(crate::RUNTIME);
    head.push_str("\nstatic const char *vl_prim_names[] = {");
    for p in Prim::ALL {
        let _ = write!(head, "{}, ", c_string(p.name()));
    }
    head.push_str("};\nstatic const vl_site_t vl_sites[] = {\n");
    for (prefix, excerpt) in &g.sites {
        let _ = writeln!(head, "  {{{}, {}}},", c_string(prefix), c_string(excerpt));
    }
    head.push_str("};\n");
    // The leaf kinds of each boxed code's environment summary (for `plus` and `zero` of boxed
    // closures in the runtime).
    let ncodes = prog.codes.len();
    let mut code_slots = format!(
        "VL_SHARED const char *vl_code_slots[{}] = {{",
        ncodes.max(1)
    );
    for c in 0..ncodes {
        let code = vlad_flow::CodeId(c as u32);
        let kinds = match g.boxed.envs.get(&code).cloned() {
            Some(env) => {
                let mut l = Vec::new();
                for x in env.iter() {
                    l.extend(g.layout(x)?);
                }
                c_string(&l.iter().map(|l| l.letter()).collect::<String>())
            }
            None => "0".into(),
        };
        let _ = write!(code_slots, "{kinds}, ");
    }
    code_slots.push_str("};\n\n");
    let mut entry = maps;
    let _ = write!(
        entry,
        "static void vl_init_constants(void) {{\n{}}}\n",
        g.constant_init
    );
    entry.push_str(&main);
    Ok(crate::units::CProgram {
        head,
        code_slots,
        structs: g.struct_defs + &frames,
        constants: g.constant_decls,
        funs,
        entry,
    })
}

impl Gen<'_, '_> {
    /// `u` placed in the user's program: a reason found in built-in code (a prelude function,
    /// an AD primitive's version) is reported at a call in the user's program that leads to
    /// the function being generated, as the evaluator reports errors in built-in code.
    fn placed(&self, u: Unsupported) -> Unsupported {
        if (self.render)(u.span).is_some() || self.key == usize::MAX {
            return u;
        }
        Unsupported {
            span: self.user_call_reaching(self.key).unwrap_or(u.span),
            reason: u.reason,
        }
    }

    /// A call in the user's program from which function `k` is reached (the nearest, by the
    /// fewest calls), if any.
    fn user_call_reaching(&self, k: usize) -> Option<Span> {
        let mut callers: HashMap<usize, Vec<(usize, ExprId)>> = HashMap::new();
        for ((caller, e), t) in &self.prog.targets {
            let mut callees = Vec::new();
            t.keys(&mut callees);
            for c in callees {
                callers.entry(c).or_default().push((*caller, *e));
            }
        }
        let mut seen = HashSet::from([k]);
        let mut queue = std::collections::VecDeque::from([k]);
        while let Some(f) = queue.pop_front() {
            let mut sites = callers.get(&f).cloned().unwrap_or_default();
            sites.sort();
            for (caller, e) in sites {
                if let Expr::App(_, _, span) = self.an.ev.arena.get(e) {
                    if (self.render)(*span).is_some() {
                        return Some(*span);
                    }
                }
                if seen.insert(caller) {
                    queue.push_back(caller);
                }
            }
        }
        None
    }

    fn unsupported<T>(&self, what: impl Into<String>) -> R<T> {
        Err(Unsupported {
            span: self.span,
            reason: what.into(),
        })
    }

    fn line(&mut self, s: impl AsRef<str>) {
        for _ in 0..self.indent {
            self.body.push_str("  ");
        }
        self.body.push_str(s.as_ref());
        self.body.push('\n');
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.tmp += 1;
        format!("{prefix}{}", self.tmp)
    }

    /// The index of the error site of `span` in the site table (-1: the last user call site,
    /// for errors inside library or built-in code; -2 - i: the same, with the message of entry
    /// i, a library line's own message for its errors, which `render` gives as the prefix).
    fn site(&mut self, span: Span) -> i64 {
        if !vlad_eval::machine::is_user_span(span) && !span.is_library() {
            return -1;
        }
        let code = |i: usize| {
            if span.is_library() {
                -2 - i as i64
            } else {
                i as i64
            }
        };
        if let Some(i) = self.site_ids.get(&span) {
            return code(*i);
        }
        let Some(text) = (self.render)(span) else {
            return if span.is_library() { -1 } else { 0 };
        };
        let i = self.sites.len();
        self.sites.push(text);
        self.site_ids.insert(span, i);
        code(i)
    }

    // ------------------------------------------------------------------ layouts

    fn layout(&self, av: &Av) -> R<Vec<Leaf>> {
        let mut out = Vec::new();
        self.layout_into(av, &mut out)?;
        Ok(out)
    }

    fn layout_into(&self, av: &Av, out: &mut Vec<Leaf>) -> R<()> {
        self.visit_leaves(av, &mut |l, _| {
            out.push(l);
            Ok(())
        })
    }

    /// For each leaf of `av`'s layout, whether it is a flat array whose elements hold no
    /// pointers: a loop may carry such an array from one iteration to the next by copying it
    /// (`vl_release_carrying`).
    fn carriable_leaves(&self, av: &Av) -> R<Vec<bool>> {
        let mut out = Vec::new();
        self.visit_leaves(av, &mut |l, x| {
            out.push(match x {
                Av::Array(_, _, e) if l == Leaf::V => !self.layout(&e.shape())?.contains(&Leaf::V),
                _ => false,
            });
            Ok(())
        })?;
        Ok(out)
    }

    /// Calls `f` on each leaf of `av`'s layout, in order, with the value the leaf holds.
    fn visit_leaves(&self, av: &Av, f: &mut dyn FnMut(Leaf, &Av) -> R<()>) -> R<()> {
        match av {
            Av::Bottom | Av::Nil | Av::Bool(Some(_)) | Av::Real(Some(_)) | Av::Prim(_) => {}
            Av::Bool(None) => f(Leaf::B, av)?,
            Av::Real(None) => f(Leaf::D, av)?,
            Av::Pair(_, a, b) | Av::Bundle(a, b) => {
                self.visit_leaves(a, f)?;
                self.visit_leaves(b, f)?;
            }
            Av::Closure(_, env) => {
                for x in env.iter() {
                    self.visit_leaves(x, f)?;
                }
            }
            Av::Tagged(_, x) => self.visit_leaves(x, f)?,
            // A lazy zero keeps the leaves of the parts of its reverse value whose zeros are not
            // known at compile time (boxed parts): `force` makes the zero from them.
            Av::Zero(of) => {
                if !static_zero(of) {
                    self.visit_leaves(of, f)?;
                }
            }
            // A flat array (`arrays.rs`), tagged or not.
            Av::Array(..) => f(Leaf::V, av)?,
            Av::Dyn(_) => f(Leaf::V, av)?,
        }
        Ok(())
    }

    /// The leaves of the parts `avs` of a value whose leaves are `leaves`, in order.
    fn split(&self, avs: &[&Av], leaves: &[String]) -> R<Vec<Vec<String>>> {
        let mut out = Vec::new();
        let mut at = 0;
        for av in avs {
            let n = self.layout(av)?.len();
            if at + n > leaves.len() {
                return self.unsupported("internal: a value with too few leaves");
            }
            out.push(leaves[at..at + n].to_vec());
            at += n;
        }
        Ok(out)
    }

    /// The struct that returns a result of these leaves.
    fn result_struct(&mut self, layout: &[Leaf]) -> String {
        if let Some(s) = self.structs.get(layout) {
            return s.clone();
        }
        let name: String = layout.iter().map(|l| l.letter()).collect();
        let name = format!("struct r_{name}");
        let mut def = format!("{name} {{");
        for (i, l) in layout.iter().enumerate() {
            let _ = write!(def, " {} f{i};", l.ctype());
        }
        def.push_str(" };\n");
        self.struct_defs.push_str(&def);
        self.structs.insert(layout.to_vec(), name.clone());
        name
    }

    /// C variables holding a value of `layout`, declared (uninitialised) here.
    fn temps(&mut self, layout: &[Leaf]) -> Vec<String> {
        layout
            .iter()
            .map(|l| {
                let t = self.fresh("t");
                self.line(format!("{} {t};", l.ctype()));
                t
            })
            .collect()
    }

    /// A two-way branch on a condition (`truth`'s C text): only the arm a known condition
    /// takes, else both, their values stored in shared variables of the joined value `av`.
    fn branch(
        &mut self,
        cond: &str,
        av: &Av,
        mut arm: impl FnMut(&mut Self, bool) -> R<Val>,
    ) -> R<Val> {
        match cond {
            "1" => return arm(self, true),
            "0" => return arm(self, false),
            _ => {}
        }
        let layout = self.layout(av)?;
        let out = self.temps(&layout);
        for then in [true, false] {
            self.line(if then {
                format!("if ({cond}) {{")
            } else {
                "} else {".to_string()
            });
            self.indent += 1;
            let v = arm(self, then)?;
            self.store(&out, av, v)?;
            self.indent -= 1;
        }
        self.line("}");
        Ok(Val {
            av: av.clone(),
            leaves: out,
        })
    }

    /// Stores a branch's value, converted to the joined abstract value `av`, in the shared
    /// result variables `dst` (nothing for a branch that never returns).
    fn store(&mut self, dst: &[String], av: &Av, v: Val) -> R<()> {
        if v.av != Av::Bottom {
            let v = self.coerce(v, av)?;
            self.assign(dst, &v.leaves);
        }
        Ok(())
    }

    fn assign(&mut self, dst: &[String], src: &[String]) {
        for (d, s) in dst.iter().zip(src) {
            if d != s {
                self.line(format!("{d} = {s};"));
            }
        }
    }

    /// Evaluates each leaf expression once into a variable (literals and variables stay).
    fn bind_leaves(&mut self, layout: &[Leaf], leaves: Vec<String>) -> Vec<String> {
        leaves
            .into_iter()
            .zip(layout)
            .map(|(e, l)| {
                if is_simple(&e) {
                    e
                } else {
                    let t = self.fresh("t");
                    self.line(format!("{} {t} = {e};", l.ctype()));
                    t
                }
            })
            .collect()
    }

    // ------------------------------------------------------------------ functions

    fn fun(&self, k: usize) -> R<&vlad_flow::specialise::Fun> {
        match self.prog.funs.get(k) {
            Some(Some(f)) => Ok(f),
            _ => self.unsupported(format!("internal: function {k} was not specialised")),
        }
    }

    fn return_type(&mut self, layout: &[Leaf]) -> String {
        match layout.len() {
            0 => "void".into(),
            1 => layout[0].ctype().into(),
            _ => self.result_struct(layout),
        }
    }

    /// The C function of key `k`: its signature and its text.
    fn function(&mut self, k: usize) -> R<(String, String)> {
        let f = self.fun(k)?.clone();
        let code = self.prog.codes[f.code.0 as usize].clone();
        let Expr::Lambda(pattern, body, span) = self.an.ev.arena.get(code.lambda()).clone() else {
            return self.unsupported("internal: a code that is not a lambda");
        };
        self.span = span;
        self.key = k;
        self.body.clear();
        self.indent = 1;
        let mut params = Vec::new();
        let mut env: Vec<(Var, Val)> = Vec::new();
        let mut env_leaves = Vec::new();
        for (i, (v, av)) in code.free.iter().zip(f.env.iter()).enumerate() {
            let leaves = self.parameters(av, &format!("e{i}_"), &mut params)?;
            env_leaves.extend(leaves.iter().cloned());
            env.push((
                *v,
                Val {
                    av: av.clone(),
                    leaves,
                },
            ));
        }
        for (j, name) in code.names.iter().enumerate() {
            let Some(sib) = self.prog.code_of(&code.names, &code.lambdas, j as u32) else {
                return self.unsupported("internal: a letrec member without a code");
            };
            env.push((
                *name,
                Val {
                    av: Av::Closure(sib, f.env.clone()),
                    leaves: env_leaves.clone(),
                },
            ));
        }
        let arg_leaves = self.parameters(&f.arg, "a", &mut params)?;
        let arg = Val {
            av: f.arg.clone(),
            leaves: arg_leaves,
        };
        let result_layout = self.layout(&f.result)?;
        let ret = self.return_type(&result_layout);
        let sig = format!(
            "static {ret} f{k}({})",
            if params.is_empty() {
                "void".to_string()
            } else {
                params.join(", ")
            }
        );
        // A parameter pattern fails at the call site (the evaluator's position).
        let ret = Return {
            av: f.result.clone(),
            ctype: ret,
            leaves: result_layout.len(),
        };
        if self.bind(&pattern, arg, &mut env, Span::NONE)? {
            self.tail(body, &mut env, &ret, &mut Vec::new())?;
        } else {
            self.ret(None, &ret, &[])?;
        }
        let text = format!("{sig} {{\n{}}}\n\n", self.body);
        Ok((sig, text))
    }

    /// Generates `e`, in tail position of the function being generated: its value is returned.
    /// An `if` returns from each branch and a `let` from its body, so that a call in tail
    /// position is followed directly by its `return` and the C compiler makes it a jump: a
    /// tail-recursive loop runs in constant stack, and its arguments stay in registers. `outer`
    /// holds the abstract values of the enclosing `if` and `let` nodes, innermost last: the
    /// value goes through each, as `expr` converts it.
    fn tail(
        &mut self,
        e: ExprId,
        env: &mut Vec<(Var, Val)>,
        ret: &Return,
        outer: &mut Vec<Av>,
    ) -> R<()> {
        let node = self.an.ev.arena.get(e).clone();
        let Some(av) = self.recorded(e)? else {
            let v = self.expr(e, env)?;
            return self.ret(Some(v), ret, outer);
        };
        match node {
            Expr::If(c, a, b) => {
                let cv = self.expr(c, env)?;
                let Some(cond) = self.truth(&cv)? else {
                    return self.ret(None, ret, outer);
                };
                outer.push(av);
                match cond.as_str() {
                    "1" => self.tail(a, env, ret, outer)?,
                    "0" => self.tail(b, env, ret, outer)?,
                    _ => {
                        self.line(format!("if ({cond}) {{"));
                        self.indent += 1;
                        self.tail(a, env, ret, outer)?;
                        self.indent -= 1;
                        self.line("} else {");
                        self.indent += 1;
                        self.tail(b, env, ret, outer)?;
                        self.indent -= 1;
                        self.line("}");
                    }
                }
                outer.pop();
                Ok(())
            }
            Expr::Let(p, x, body, span) => {
                let xv = self.expr(x, env)?;
                if xv.av == Av::Bottom {
                    return self.ret(None, ret, outer);
                }
                self.span = span;
                let mark = env.len();
                outer.push(av);
                let r = if self.bind(&p, xv, env, span)? {
                    self.tail(body, env, ret, outer)
                } else {
                    self.ret(None, ret, outer)
                };
                outer.pop();
                env.truncate(mark);
                r
            }
            Expr::Letrec(bs, body) => {
                let mark = self.letrec(&bs, env)?;
                outer.push(av);
                let r = self.tail(body, env, ret, outer);
                outer.pop();
                env.truncate(mark);
                r
            }
            _ => {
                let v = self.expr(e, env)?;
                self.ret(Some(v), ret, outer)
            }
        }
    }

    /// Returns `v` (`None` or no value: the code before never returns) from the function,
    /// converted through the abstract values of the enclosing nodes `outer` to the result's.
    fn ret(&mut self, v: Option<Val>, ret: &Return, outer: &[Av]) -> R<()> {
        let mut v = v.filter(|v| v.av != Av::Bottom);
        if let Some(mut x) = v.take() {
            for av in outer.iter().rev() {
                x = self.coerce(x, av)?;
            }
            v = Some(self.coerce(x, &ret.av)?);
        }
        let ctype = &ret.ctype;
        match (v, ret.leaves) {
            (_, 0) => self.line("return;"),
            (Some(v), 1) => self.line(format!("return {};", v.leaves[0])),
            (Some(v), _) => self.line(format!("return ({ctype}){{{}}};", v.leaves.join(", "))),
            // Never reached (the code before always fails): keep the C compiler quiet.
            (None, _) => self.line(format!(
                "{{ {ctype} r_; memset(&r_, 0, sizeof r_); return r_; }}"
            )),
        }
        Ok(())
    }

    /// For each C parameter of the function of key `k` (its environment's leaves, then its
    /// argument's), whether it is a pointer-free flat array (`carriable_leaves`).
    fn carriable_params(&self, k: usize) -> R<Vec<bool>> {
        let f = self.fun(k)?;
        let code = &self.prog.codes[f.code.0 as usize];
        let mut out = Vec::new();
        for av in f.env.iter().take(code.free.len()).chain([&f.arg]) {
            out.extend(self.carriable_leaves(av)?);
        }
        Ok(out)
    }

    /// C parameters `PREFIX0`, `PREFIX1`, ... for the leaves of `av` (declarations pushed on
    /// `params`), and their names.
    fn parameters(&self, av: &Av, prefix: &str, params: &mut Vec<String>) -> R<Vec<String>> {
        Ok(self
            .layout(av)?
            .iter()
            .enumerate()
            .map(|(j, l)| {
                let name = format!("{prefix}{j}");
                params.push(format!("{} {name}", l.ctype()));
                name
            })
            .collect())
    }

    /// A call of the function of key `k` with these environment and argument leaves (already
    /// in its layouts).
    fn call_fun(&mut self, k: usize, env: Vec<String>, arg: Vec<String>) -> R<Val> {
        let f = self.fun(k)?.clone();
        let layout = self.layout(&f.result)?;
        let args: Vec<String> = env.into_iter().chain(arg).collect();
        let call = format!("f{k}({})", args.join(", "));
        // A result with no boxed part: what the call allocates is garbage once it returns
        // (`finish_marks` keeps the mark only where the callee can allocate).
        let mark = (!layout.contains(&Leaf::V)).then(|| {
            let m = self.fresh("m");
            self.line(format!("{MARK}{k} {m}"));
            m
        });
        let leaves = match layout.len() {
            0 => {
                self.line(format!("{call};"));
                Vec::new()
            }
            1 => {
                let t = self.fresh("t");
                self.line(format!("{} {t} = {call};", layout[0].ctype()));
                vec![t]
            }
            n => {
                let s = self.result_struct(&layout);
                let t = self.fresh("t");
                self.line(format!("{s} {t} = {call};"));
                (0..n).map(|i| format!("{t}.f{i}")).collect()
            }
        };
        if let Some(m) = mark {
            self.line(format!("{RELEASE}{k} {m}"));
        }
        Ok(Val {
            av: f.result,
            leaves,
        })
    }

    // ------------------------------------------------------------------ expressions

    /// The abstract value the analysis recorded for node `e` of the current body (`None`: the
    /// node is never evaluated).
    fn recorded(&self, e: ExprId) -> R<Option<Av>> {
        match self.prog.values.get(&(self.key, e)) {
            None => Ok(None),
            Some(vs) if vs.len() == 1 => Ok(Some(vs[0].clone())),
            Some(_) => self.unsupported("a shared subexpression with different abstract values"),
        }
    }

    fn expr(&mut self, e: ExprId, env: &mut Vec<(Var, Val)>) -> R<Val> {
        let Some(av) = self.recorded(e)? else {
            self.line("vl_fail_internal(\"reached code the analysis found unreachable\");");
            return Ok(Val::known(Av::Bottom));
        };
        let node = self.an.ev.arena.get(e).clone();
        let v = match node {
            Expr::Var(x) => {
                let v = lookup(env, x)?;
                if v.av != av && std::env::var_os("VLAD_C_DEBUG").is_some() {
                    eprintln!(
                        "var {} in f{}: bound to {:?}, recorded {:?}",
                        self.an.ev.arena.var_name(x),
                        self.key,
                        v.av,
                        av
                    );
                }
                v
            }
            Expr::Const(d, tags)
                if matches!(av, Av::Array(..) | Av::Pair(..)) && !self.layout(&av)?.is_empty() =>
            {
                self.array_constant(&d, tags, &av)?
            }
            Expr::Const(..) | Expr::Prim(..) => {
                if !self.layout(&av)?.is_empty() {
                    return self.unsupported("a constant that is not known");
                }
                Val::known(av.clone())
            }
            Expr::Lambda(..) => {
                let Av::Closure(_, fields) = &av else {
                    return self.unsupported("internal: a lambda that is not a closure");
                };
                let free = self.an.ev.arena.free_vars(e);
                let mut leaves = Vec::new();
                for (x, want) in free.iter().zip(fields.iter()) {
                    let v = lookup(env, *x)?;
                    leaves.extend(self.coerce(v, want)?.leaves);
                }
                return Ok(Val { av, leaves });
            }
            Expr::App(f, a, span) => {
                let fv = self.expr(f, env)?;
                let argv = self.expr(a, env)?;
                if fv.av == Av::Bottom || argv.av == Av::Bottom {
                    return Ok(Val::known(Av::Bottom));
                }
                self.span = span;
                let site = self.site(span);
                if site > 0 {
                    self.line(format!("vl_site = {site};"));
                }
                let Some(target) = self.prog.targets.get(&(self.key, e)).cloned() else {
                    return self.unsupported("internal: a call site without a target");
                };
                self.apply(&target, fv, argv, &av, site)?
            }
            Expr::Cons(_, a, b) => {
                let x = self.expr(a, env)?;
                let y = self.expr(b, env)?;
                let mut leaves = x.leaves;
                leaves.extend(y.leaves);
                return Ok(Val { av, leaves });
            }
            Expr::Letrec(bs, body) => {
                let mark = self.letrec(&bs, env)?;
                let r = self.expr(body, env);
                env.truncate(mark);
                r?
            }
            Expr::Let(p, x, body, span) => {
                let xv = self.expr(x, env)?;
                if xv.av == Av::Bottom {
                    return Ok(Val::known(Av::Bottom));
                }
                self.span = span;
                let mark = env.len();
                let r = if self.bind(&p, xv, env, span)? {
                    self.expr(body, env)
                } else {
                    Ok(Val::known(Av::Bottom))
                };
                env.truncate(mark);
                r?
            }
            Expr::If(c, a, b) => {
                let cv = self.expr(c, env)?;
                let Some(cond) = self.truth(&cv)? else {
                    return Ok(Val::known(Av::Bottom));
                };
                self.branch(&cond, &av, |s, then| s.expr(if then { a } else { b }, env))?
            }
        };
        if v.av == Av::Bottom {
            return Ok(v);
        }
        self.coerce(v, &av)
    }

    /// Binds the closures of a `letrec` (each with the group's environment); returns the length
    /// of `env` before them, to truncate to after the body.
    fn letrec(&mut self, bs: &[(Var, ExprId)], env: &mut Vec<(Var, Val)>) -> R<usize> {
        let names: Vec<Var> = bs.iter().map(|(v, _)| *v).collect();
        let lambdas: Vec<ExprId> = bs.iter().map(|(_, l)| *l).collect();
        let Some(c0) = self.prog.code_of(&names, &lambdas, 0) else {
            return self.unsupported("internal: a letrec without a code");
        };
        let free = self.prog.codes[c0.0 as usize].free.clone();
        let mut avs = Vec::new();
        let mut leaves = Vec::new();
        for x in free.iter() {
            let v = lookup(env, *x)?;
            avs.push(v.av.clone());
            leaves.extend(v.leaves);
        }
        let avs: std::rc::Rc<[Av]> = avs.into();
        let mark = env.len();
        for (j, name) in names.iter().enumerate() {
            let Some(c) = self.prog.code_of(&names, &lambdas, j as u32) else {
                return self.unsupported("internal: a letrec member without a code");
            };
            env.push((
                *name,
                Val {
                    av: Av::Closure(c, avs.clone()),
                    leaves: leaves.clone(),
                },
            ));
        }
        Ok(mark)
    }

    /// Binds a pattern (the evaluator's checks and errors); `false` if it can never match (the
    /// generated code fails there).
    fn bind(&mut self, p: &Pattern, v: Val, env: &mut Vec<(Var, Val)>, span: Span) -> R<bool> {
        if let Pattern::Var(x) = p {
            env.push((*x, v));
            return Ok(true);
        }
        let site = self.site(span);
        let v = self.force(v)?;
        match p {
            Pattern::Var(_) => unreachable!("handled above"),
            Pattern::Const(d, tags) => {
                let c = self.an.lift_av(datum_av(d), *tags).map_err(flow_error)?;
                let test = self.const_test(&c, &v)?;
                if test == "1" {
                    return Ok(true);
                }
                let cb = self.boxed_for_display(&Val::known(c))?;
                let b = self.boxed_for_display(&v)?;
                self.line(format!(
                    "if (!({test})) vl_fail_mismatch({site}, {cb}, {b});"
                ));
                Ok(test != "0")
            }
            Pattern::Cons(tags, a, b) => match &v.av {
                Av::Pair(t, x, y) if t == tags => {
                    let mut ps = self.raw_parts(&v, &[x, y])?;
                    let y = ps.pop().expect("two parts");
                    let x = ps.pop().expect("two parts");
                    Ok(self.bind(a, x, env, span)? && self.bind(b, y, env, span)?)
                }
                Av::Dyn(_) => {
                    let car = self.fresh("t");
                    let cdr = self.fresh("t");
                    self.line(format!(
                        "V {car} = vl_car({}, {}u, {site}), {cdr} = {}->s[1].v;",
                        v.leaves[0],
                        tags.bits(),
                        v.leaves[0]
                    ));
                    let x = Val {
                        av: v.av.clone(),
                        leaves: vec![car],
                    };
                    let y = Val {
                        av: v.av.clone(),
                        leaves: vec![cdr],
                    };
                    Ok(self.bind(a, x, env, span)? && self.bind(b, y, env, span)?)
                }
                _ => {
                    let what = match tags.top() {
                        None => "a pair".to_string(),
                        Some(t) => format!("a {} pair", t.name()),
                    };
                    let b = self.boxed_for_display(&v)?;
                    self.line(format!(
                        "vl_fail_value({site}, {}, {b}, \"\");",
                        c_string(&format!("pattern mismatch: expected {what}, got "))
                    ));
                    Ok(false)
                }
            },
        }
    }

    /// A C condition: `v` equals the constant `c` (the evaluator's `equal_data`); "1" or "0"
    /// when known.
    fn const_test(&mut self, c: &Av, v: &Val) -> R<String> {
        let v = self.force(v.clone())?;
        let both = |s: &mut Self, x: String, y: String| -> String {
            let _ = s;
            match (x.as_str(), y.as_str()) {
                ("0", _) | (_, "0") => "0".into(),
                ("1", _) => y,
                (_, "1") => x,
                _ => format!("({x} && {y})"),
            }
        };
        Ok(match (c, &v.av) {
            (Av::Real(Some(x)), Av::Real(Some(y))) => ((x.get() == y.get()) as u8).to_string(),
            (Av::Real(Some(x)), Av::Real(None)) => {
                format!("({} == {})", v.leaves[0], real_literal(x.get()))
            }
            (Av::Bool(Some(a)), Av::Bool(Some(b))) => ((a == b) as u8).to_string(),
            (Av::Bool(Some(a)), Av::Bool(None)) => format!("({} == {})", v.leaves[0], *a as u8),
            (Av::Nil, Av::Nil) => "1".into(),
            (Av::Pair(t, a, b), Av::Pair(u, x, y)) if t == u => {
                let ps = self.parts(&v, &[x, y])?;
                let l = self.const_test(a, &ps[0])?;
                let r = self.const_test(b, &ps[1])?;
                both(self, l, r)
            }
            (Av::Bundle(a, b), Av::Bundle(x, y)) => {
                let ps = self.parts(&v, &[x, y])?;
                let l = self.const_test(a, &ps[0])?;
                let r = self.const_test(b, &ps[1])?;
                both(self, l, r)
            }
            (Av::Tagged(t, a), Av::Tagged(u, x)) if t == u => {
                let ps = self.parts(&v, &[x])?;
                self.const_test(a, &ps[0])?
            }
            (Av::Real(Some(x)), Av::Dyn(_)) => format!(
                "({0}->kind == VL_REAL && {0}->s[0].d == {1})",
                v.leaves[0],
                real_literal(x.get())
            ),
            (Av::Bool(Some(b)), Av::Dyn(_)) => format!(
                "({0}->kind == VL_BOOL && {0}->s[0].b == {1})",
                v.leaves[0], *b as u8
            ),
            (Av::Nil, Av::Dyn(_)) => format!("({}->kind == VL_NIL)", v.leaves[0]),
            (_, Av::Dyn(_)) => {
                let b = self.boxed_val(&Val::known(c.clone()))?;
                format!("vl_equal_data({b}, {})", v.leaves[0])
            }
            _ => "0".into(),
        })
    }

    /// The truth of a value as a C condition ("1", "0" when known; `None`: no value), as the
    /// evaluator's `is_true`: everything but `#f` is true, looking through bundles and tags.
    fn truth(&mut self, v: &Val) -> R<Option<String>> {
        let v = self.force(v.clone())?;
        Ok(Some(match &v.av {
            Av::Bottom => return Ok(None),
            Av::Bool(Some(b)) => (*b as u8).to_string(),
            Av::Bool(None) => v.leaves[0].clone(),
            Av::Dyn(_) => format!("vl_truthy({})", v.leaves[0]),
            Av::Bundle(p, t) => {
                let ps = self.parts(&v, &[p, t])?;
                return self.truth(&ps[0]);
            }
            Av::Tagged(_, x) => {
                let ps = self.parts(&v, &[x])?;
                return self.truth(&ps[0]);
            }
            _ => "1".into(),
        }))
    }

    /// A lazy zero computed one level (the evaluator's `force_zero`).
    fn force(&mut self, v: Val) -> R<Val> {
        let Av::Zero(of) = &v.av else {
            return Ok(v);
        };
        let forced = self.an.force_av(&v.av).map_err(flow_error)?;

        if static_zero(of) {
            return Ok(Val::known(forced));
        }
        let of = Val {
            av: (**of).clone(),
            leaves: v.leaves.clone(),
        };
        let leaves = match &of.av {
            // A zero the analysis only knows as boxed (the zero of a reverse value with boxed
            // parts): the runtime computes it from the boxed reverse value.
            _ if matches!(forced, Av::Dyn(_)) => {
                self.map_kinds.insert(MapKind::ZeroSensitivity);
                let b = self.boxed_val(&of)?;
                vec![self.runtime_v(format!("vl_zero_sens({b})"))]
            }
            // A pair or closure of zeros of the parts: each part keeps its leaves if its own
            // zero is not known.
            Av::Pair(..) | Av::Closure(..) => self
                .components(&of, true)?
                .into_iter()
                .flat_map(|p| {
                    if static_zero(&p.av) {
                        Vec::new()
                    } else {
                        p.leaves
                    }
                })
                .collect(),
            // An array of the zeros of the elements, of the reverse array's length: the same
            // array where the elements' zeros need their leaves.
            Av::Array(_, _, e) => {
                let Av::Array(_, _, ze) = &forced else {
                    return self.unsupported("internal: the lazy zero of an array");
                };
                let keep = !static_zero(e);
                let src = &of.leaves[0];
                vec![self.map_flat(src, e, &ze.clone(), |_, x| {
                    Ok(if keep { x.leaves } else { Vec::new() })
                })?]
            }
            _ if self.layout(&forced)?.is_empty() => Vec::new(),
            // A reverse scalar: the sensitivity-tagged zero of its primal.
            Av::Tagged(Tag::Reverse, x) => {
                let x = Val {
                    av: (**x).clone(),
                    leaves: of.leaves.clone(),
                };
                self.zero_leaves(&x, true)?
            }
            _ => {
                if std::env::var_os("VLAD_C_DEBUG").is_some() {
                    eprintln!("lazy zero of {:?}\n  forced {forced:?}", of.av);
                }
                return self.unsupported("a lazy zero of a boxed scalar");
            }
        };
        if leaves.len() != self.layout(&forced)?.len() {
            return self.unsupported("internal: a lazy zero of another layout");
        }
        Ok(Val { av: forced, leaves })
    }

    // ------------------------------------------------------------------ conversions

    /// `v` in the layout of `to`, an abstract value that contains `v.av`: constants
    /// materialised, parts boxed.
    fn coerce(&mut self, v: Val, to: &Av) -> R<Val> {
        if v.av == *to {
            return Ok(v);
        }
        let leaves = self.coerce_leaves(&v.av, &v.leaves, to)?;
        Ok(Val {
            av: to.clone(),
            leaves,
        })
    }

    /// Leaves in the layout of `av` whose values never matter (code never reached, or a
    /// known zero that does not depend on them).
    fn placeholders(&self, av: &Av) -> R<Vec<String>> {
        Ok(self
            .layout(av)?
            .iter()
            .map(|l| l.dummy().to_string())
            .collect())
    }

    fn coerce_leaves(&mut self, from: &Av, leaves: &[String], to: &Av) -> R<Vec<String>> {
        if from == to {
            return Ok(leaves.to_vec());
        }
        if *from == Av::Bottom {
            return self.placeholders(to);
        }
        Ok(match (from, to) {
            (_, Av::Dyn(_)) => {
                let b = self.boxed_val(&Val {
                    av: from.clone(),
                    leaves: leaves.to_vec(),
                })?;
                vec![b]
            }
            (Av::Real(Some(x)), Av::Real(None)) => vec![real_literal(x.get())],
            (Av::Bool(Some(b)), Av::Bool(None)) => vec![(*b as u8).to_string()],
            (Av::Pair(t, a, b), Av::Pair(u, c, d)) if t == u => {
                let parts = self.split(&[a, b], leaves)?;
                let mut out = self.coerce_leaves(a, &parts[0], c)?;
                out.extend(self.coerce_leaves(b, &parts[1], d)?);
                out
            }
            (Av::Bundle(a, b), Av::Bundle(c, d)) => {
                let parts = self.split(&[a, b], leaves)?;
                let mut out = self.coerce_leaves(a, &parts[0], c)?;
                out.extend(self.coerce_leaves(b, &parts[1], d)?);
                out
            }
            (Av::Tagged(t, x), Av::Tagged(u, y)) if t == u => self.coerce_leaves(x, leaves, y)?,
            (Av::Array(t, _, x), Av::Array(u, _, y)) if t == u => {
                self.coerce_array(&leaves[0], x, y)?
            }
            (Av::Closure(c, e1), Av::Closure(d, e2)) if c == d && e1.len() == e2.len() => {
                let parts = self.split(&e1.iter().collect::<Vec<_>>(), leaves)?;
                let mut out = Vec::new();
                for ((x, y), l) in e1.iter().zip(e2.iter()).zip(parts) {
                    out.extend(self.coerce_leaves(x, &l, y)?);
                }
                out
            }
            // Two lazy zeros: the reverse value they stand for is coerced (its zero is the
            // same), so the zero stays lazy. Leaves whose zero is known are not kept.
            (Av::Zero(a), Av::Zero(c)) => {
                if static_zero(c) {
                    return Ok(Vec::new());
                }
                let a_leaves = if static_zero(a) {
                    self.placeholders(a)?
                } else {
                    leaves.to_vec()
                };
                self.coerce_leaves(a, &a_leaves, c)?
            }
            (Av::Zero(_), _) => {
                let forced = self.force(Val {
                    av: from.clone(),
                    leaves: leaves.to_vec(),
                })?;
                self.coerce_leaves(&forced.av, &forced.leaves, to)?
            }
            _ => {
                if std::env::var_os("VLAD_C_DEBUG").is_some() {
                    eprintln!("coerce {from:?}\n  to {to:?}");
                }
                return self.unsupported(format!(
                    "a value that changes layout ({} to {})",
                    short(from),
                    short(to)
                ));
            }
        })
    }

    /// `boxed_val` for printing or an error message only.
    fn boxed_for_display(&mut self, v: &Val) -> R<String> {
        let outer = std::mem::replace(&mut self.for_display, true);
        let r = self.boxed_val(v);
        self.for_display = outer;
        r
    }

    /// A C expression (a variable) for `v` as a boxed runtime value.
    ///
    /// A value known in full at compile time is boxed once, before the program starts, into a
    /// global (`vl_kN`): boxed objects are never mutated, so every use can share it, and a
    /// constant (a tagged `()` that a pattern checks, a closure without free variables) does not
    /// cost an allocation each time its code runs.
    fn boxed_val(&mut self, v: &Val) -> R<String> {
        if !v.leaves.is_empty()
            || self.for_display
            || matches!(v.av, Av::Nil | Av::Bool(_) | Av::Bottom | Av::Dyn(_))
        {
            return self.boxed_val_now(v);
        }
        if let Some(name) = self.constants.get(&v.av) {
            return Ok(name.clone());
        }
        let (r, lines) = self.detached(|s| s.boxed_val_now(v));
        let b = r?;
        let name = format!("vl_k{}", self.constants.len());
        let _ = writeln!(self.constant_decls, "VL_SHARED V {name};");
        self.constant_init.push_str(&lines);
        let _ = writeln!(self.constant_init, "  {name} = {b};");
        self.constants.insert(v.av.clone(), name.clone());
        Ok(name)
    }

    fn boxed_val_now(&mut self, v: &Val) -> R<String> {
        if v.leaves.is_empty() && !matches!(v.av, Av::Closure(..)) {
            let mut budget = MAX_BOXED_CONSTANT;
            if !small(&v.av, &mut budget) {
                return self.unsupported(format!(
                    "a constant of more than {MAX_BOXED_CONSTANT} parts to box"
                ));
            }
        }
        let e = match &v.av {
            Av::Dyn(_) => return Ok(v.leaves[0].clone()),
            Av::Bottom => "vl_nil".to_string(),
            Av::Nil => "vl_nil".into(),
            Av::Bool(Some(b)) => format!("vl_bool({})", *b as u8),
            Av::Bool(None) => format!("vl_bool({})", v.leaves[0]),
            Av::Real(Some(x)) => format!("vl_real({})", real_literal(x.get())),
            Av::Real(None) => format!("vl_real({})", v.leaves[0]),
            Av::Prim(p) => format!("vl_prim({})", prim_index(*p)),
            Av::Pair(_, a, b) | Av::Bundle(a, b) => {
                let ps = self.raw_parts(v, &[a, b])?;
                let x = self.boxed_val(&ps[0])?;
                let y = self.boxed_val(&ps[1])?;
                match &v.av {
                    Av::Pair(t, ..) => format!("vl_pair({}u, {x}, {y})", t.bits()),
                    _ => format!("vl_bundle({x}, {y})"),
                }
            }
            Av::Tagged(t, x) => {
                let inner = self.boxed_val(&Val {
                    av: (**x).clone(),
                    leaves: v.leaves.clone(),
                })?;
                format!("vl_tagged({}, {inner})", tag_index(*t))
            }
            Av::Closure(c, env) => {
                let Some(summary) = self.boxed.envs.get(c).cloned() else {
                    if !self.for_display {
                        return self.unsupported("boxing a closure whose code is never boxed");
                    }
                    // Boxed only to be printed or described: no environment.
                    let t = self.fresh("b");
                    self.line(format!("V {t} = vl_obj(VL_CLOSURE, {}u, 0);", c.0));
                    return Ok(t);
                };
                let parts = self.split(&env.iter().collect::<Vec<_>>(), &v.leaves)?;
                let mut slots = Vec::new();
                for ((x, want), l) in env.iter().zip(summary.iter()).zip(parts) {
                    let leaves = self.coerce_leaves(x, &l, want)?;
                    let layout = self.layout(want)?;
                    slots.extend(leaves.into_iter().zip(layout));
                }
                let t = self.fresh("b");
                self.line(format!(
                    "V {t} = vl_obj(VL_CLOSURE, {}u, {});",
                    c.0,
                    slots.len()
                ));
                for (i, (s, l)) in slots.iter().enumerate() {
                    self.line(format!("{t}->s[{i}].{} = {s};", l.slot()));
                }
                return Ok(t);
            }
            // The evaluator keeps a lazy zero lazy: boxed, it is flagged as one (`vl_as_zero`)
            // so that `plus` returns the other operand, as the evaluator's does. A zero the
            // runtime computed (`vl_zero_sens`) is flagged already.
            Av::Zero(_) => {
                let forced = self.force(v.clone())?;
                let b = self.boxed_val(&forced)?;
                if matches!(forced.av, Av::Dyn(_)) {
                    return Ok(b);
                }
                return Ok(self.runtime_v(format!("vl_as_zero({b})")));
            }
            Av::Array(t, _, e) => return self.box_array(&v.leaves[0], *t, e),
        };
        let t = self.fresh("b");
        self.line(format!("V {t} = {e};"));
        Ok(t)
    }

    // ------------------------------------------------------------------ calls

    fn apply(&mut self, t: &Target, f: Val, a: Val, out: &Av, site: i64) -> R<Val> {
        match t {
            Target::Direct(k) => {
                let fun = self.fun(*k)?.clone();
                let Av::Closure(_, env) = &f.av else {
                    return self.unsupported("internal: a direct call of a non-closure");
                };
                if env.len() != fun.env.len() {
                    return self.unsupported("internal: an environment of another layout");
                }
                let parts = self.split(&env.iter().collect::<Vec<_>>(), &f.leaves)?;
                let mut env_leaves = Vec::new();
                for ((x, want), l) in env.iter().zip(fun.env.iter()).zip(parts) {
                    env_leaves.extend(self.coerce_leaves(x, &l, want)?);
                }
                if std::env::var_os("VLAD_C_DEBUG").is_some() {
                    eprintln!(
                        "call f{k} from f{}: arg {:?}\n  fun.arg {:?}\n  result {:?}\n  out {:?}",
                        self.key, a.av, fun.arg, fun.result, out
                    );
                }
                let arg = self.coerce(a, &fun.arg)?;
                self.call_fun(*k, env_leaves, arg.leaves)
            }
            Target::Prim(p) => self.prim(*p, a, out, site),
            Target::Dispatch(ts) => self.dispatch(ts, f, a, out, site),
            Target::IfProc(then_t, els_t) => {
                let a = self.force(a)?;
                let Av::Pair(_, c, rest) = &a.av else {
                    return self.unsupported("`if-procedure` on a boxed argument");
                };
                let Av::Pair(_, th, el) = &**rest else {
                    return self.unsupported("`if-procedure` on a boxed argument");
                };
                let parts = self.split(&[c, th, el], &a.leaves)?;
                let cv = Val {
                    av: (**c).clone(),
                    leaves: parts[0].clone(),
                };
                let thv = Val {
                    av: (**th).clone(),
                    leaves: parts[1].clone(),
                };
                let elv = Val {
                    av: (**el).clone(),
                    leaves: parts[2].clone(),
                };
                let Some(cond) = self.truth(&cv)? else {
                    return Ok(Val::known(Av::Bottom));
                };
                self.branch(&cond, out, |s, then| {
                    let (t, thunk) = if then { (then_t, &thv) } else { (els_t, &elv) };
                    s.apply(t, thunk.clone(), Val::known(Av::Nil), out, site)
                })
            }
            Target::Build(t) => self.build(t, a, out, site),
            Target::ForwardBuild(t) => self.forward_build(t, a, out, site),
            Target::Ifold(t) => self.ifold(t, a, out, site),
            Target::NotProcedure => {
                let b = self.boxed_for_display(&f)?;
                self.line(format!(
                    "vl_fail_value({site}, \"cannot apply \", {b}, \": it is not a procedure\");"
                ));
                Ok(Val::known(Av::Bottom))
            }
            Target::Unreachable => {
                self.line("vl_fail_internal(\"a call the analysis found unreachable\");");
                Ok(Val::known(Av::Bottom))
            }
        }
    }

    /// A call of a boxed procedure: a `switch` over the codes (and primitives) it may be.
    fn dispatch(&mut self, ts: &[Target], f: Val, a: Val, out: &Av, site: i64) -> R<Val> {
        if !matches!(f.av, Av::Dyn(_)) {
            return self.unsupported("internal: a dispatch on an unboxed procedure");
        }
        let fv = f.leaves[0].clone();
        let layout = self.layout(out)?;
        let res = self.temps(&layout);
        self.line(format!(
            "switch ({fv}->kind == VL_CLOSURE ? (long){fv}->aux : {fv}->kind == VL_PRIM ? -1 - (long){fv}->aux : -1000000) {{"
        ));
        for t in ts {
            match t {
                Target::Direct(k) => {
                    let fun = self.fun(*k)?.clone();
                    let Some(summary) = self.boxed.envs.get(&fun.code).cloned() else {
                        return self.unsupported("internal: a boxed code without a summary");
                    };
                    self.line(format!("case {}: {{", fun.code.0));
                    self.indent += 1;
                    let mut slot = 0;
                    let mut env_leaves = Vec::new();
                    for (s, want) in summary.iter().zip(fun.env.iter()) {
                        let l = self.layout(s)?;
                        let leaves: Vec<String> = l
                            .iter()
                            .map(|leaf| {
                                let e = format!("{fv}->s[{slot}].{}", leaf.slot());
                                slot += 1;
                                e
                            })
                            .collect();
                        let leaves = self.bind_leaves(&l, leaves);
                        env_leaves.extend(self.coerce_leaves(s, &leaves, want)?);
                    }
                    let arg = self.coerce(a.clone(), &fun.arg)?;
                    let r = self.call_fun(*k, env_leaves, arg.leaves)?;
                    self.store(&res, out, r)?;
                    self.line("break;");
                    self.indent -= 1;
                    self.line("}");
                }
                Target::Prim(p) => {
                    self.line(format!("case {}: {{", prim_case(*p)));
                    self.indent += 1;
                    let want = self.prim_result(*p, &a.av)?;
                    let r = self.prim(*p, a.clone(), &want, site)?;
                    self.store(&res, out, r)?;
                    self.line("break;");
                    self.indent -= 1;
                    self.line("}");
                }
                _ => return self.unsupported("a boxed higher-order primitive"),
            }
        }
        self.line(format!(
            "default: vl_fail_value({site}, \"cannot apply \", {fv}, \": it is not a procedure\");"
        ));
        self.line("}");
        Ok(Val {
            av: out.clone(),
            leaves: res,
        })
    }

    /// The abstract result of primitive `p` on `a` (for a primitive reached by a dispatch,
    /// whose own result the analysis joined with the others).
    fn prim_result(&mut self, p: Prim, a: &Av) -> R<Av> {
        self.an.apply(&Av::Prim(p), a).map_err(flow_error)
    }

    // ------------------------------------------------------------------ primitives

    /// The real operand `v` as a C expression (`None`: it cannot be a real).
    fn real_operand(&mut self, v: &Val, p: Prim, site: i64) -> Option<String> {
        match &v.av {
            Av::Real(Some(x)) => Some(real_literal(x.get())),
            Av::Real(None) => Some(v.leaves[0].clone()),
            Av::Dyn(_) => Some(format!(
                "vl_to_real({}, {site}, {})",
                v.leaves[0],
                c_string(p.name())
            )),
            _ => None,
        }
    }

    /// The two parts of a primitive's argument pair.
    fn two(&mut self, a: &Val, site: i64) -> R<Option<(Val, Val)>> {
        Ok(match self.two_raw(a, site)? {
            Some((x, y)) => Some((self.force(x)?, self.force(y)?)),
            None => None,
        })
    }

    /// `two` without computing lazy zeros in the parts (`plus` takes them as they are).
    fn two_raw(&mut self, a: &Val, site: i64) -> R<Option<(Val, Val)>> {
        let a = self.force(a.clone())?;
        Ok(match &a.av {
            Av::Pair(t, x, y) if t.is_empty() => {
                let mut ps = self.raw_parts(&a, &[x, y])?;
                let y = ps.pop().expect("two parts");
                let x = ps.pop().expect("two parts");
                Some((x, y))
            }
            Av::Dyn(_) => {
                let car = self.fresh("t");
                let cdr = self.fresh("t");
                self.line(format!(
                    "V {car} = vl_car({}, 0u, {site}), {cdr} = {}->s[1].v;",
                    a.leaves[0], a.leaves[0]
                ));
                Some((
                    Val {
                        av: a.av.clone(),
                        leaves: vec![car],
                    },
                    Val {
                        av: a.av.clone(),
                        leaves: vec![cdr],
                    },
                ))
            }
            _ => None,
        })
    }

    fn prim(&mut self, p: Prim, a: Val, out: &Av, site: i64) -> R<Val> {
        // `get` checks its index even where the element is known: an index out of range is an
        // error, not the known element.
        let pure_known = !matches!(
            p,
            Prim::ReadReal | Prim::WriteReal | Prim::Write | Prim::Get
        ) && *out != Av::Bottom
            && self.layout(out)?.is_empty();
        if pure_known {
            return Ok(Val::known(out.clone()));
        }
        let real = |leaf: String| Val {
            av: Av::real(),
            leaves: vec![leaf],
        };
        let boolean = |leaf: String| Val {
            av: Av::Bool(None),
            leaves: vec![leaf],
        };
        let v = match p {
            _ if p.is_binary_real() || p.is_comparison() => {
                let Some((x, y)) = self.two(&a, site)? else {
                    return self.prim_error(p, &a, site);
                };
                let is_dyn = |v: &Val| matches!(v.av, Av::Dyn(_));
                let can_be_real = |v: &Val| matches!(v.av, Av::Real(_) | Av::Dyn(_));
                if !can_be_real(&x) || !can_be_real(&y) || is_dyn(&x) || is_dyn(&y) {
                    // The evaluator's message names both operands.
                    let bx = self.boxed_for_display(&x)?;
                    let by = self.boxed_for_display(&y)?;
                    let test = [(&x, &bx), (&y, &by)]
                        .iter()
                        .filter(|(v, _)| is_dyn(v))
                        .map(|(_, b)| format!("{b}->kind == VL_REAL"))
                        .chain((!can_be_real(&x) || !can_be_real(&y)).then(|| "0".to_string()))
                        .collect::<Vec<_>>()
                        .join(" && ");
                    self.line(format!(
                        "if (!({test})) vl_fail_two({site}, {}, {bx}, {by});",
                        c_string(p.name())
                    ));
                    if !can_be_real(&x) || !can_be_real(&y) {
                        return Ok(Val::known(Av::Bottom));
                    }
                }
                let (Some(xs), Some(ys)) = (
                    self.real_operand(&x, p, site),
                    self.real_operand(&y, p, site),
                ) else {
                    return self.prim_error(p, &a, site);
                };
                let op = match p {
                    Prim::Add => "+",
                    Prim::Sub => "-",
                    Prim::Mul => "*",
                    Prim::Div => "/",
                    Prim::Eq => "==",
                    Prim::Lt => "<",
                    Prim::Gt => ">",
                    Prim::Le => "<=",
                    Prim::Ge => ">=",
                    _ => "",
                };
                match p {
                    Prim::Atan => real(format!("atan2({xs}, {ys})")),
                    _ if p.is_comparison() => boolean(format!("({xs} {op} {ys})")),
                    _ => real(format!("({xs} {op} {ys})")),
                }
            }
            _ if p.is_unary_real() => {
                let a = self.force(a)?;
                let Some(x) = self.real_operand(&a, p, site) else {
                    return self.prim_error(p, &a, site);
                };
                let f = match p {
                    Prim::Sqrt => "sqrt",
                    Prim::Exp => "exp",
                    Prim::Log => "log",
                    Prim::Sin => "sin",
                    Prim::Cos => "cos",
                    _ => return self.unsupported(format!("the primitive `{}`", p.name())),
                };
                real(format!("{f}({x})"))
            }
            Prim::IsZero | Prim::IsPositive | Prim::IsNegative => {
                let a = self.force(a)?;
                let Some(x) = self.real_operand(&a, p, site) else {
                    return self.prim_error(p, &a, site);
                };
                let op = match p {
                    Prim::IsZero => "==",
                    Prim::IsPositive => ">",
                    _ => "<",
                };
                boolean(format!("({x} {op} 0.0)"))
            }
            Prim::IsNull | Prim::IsBoolean | Prim::IsReal | Prim::IsPair | Prim::IsProcedure => {
                let a = self.force(a)?;
                let Av::Dyn(_) = a.av else {
                    return self.unsupported("internal: an unknown type predicate");
                };
                let x = &a.leaves[0];
                boolean(match p {
                    Prim::IsNull => format!("({x}->kind == VL_NIL)"),
                    Prim::IsBoolean => format!("({x}->kind == VL_BOOL)"),
                    Prim::IsReal => format!("({x}->kind == VL_REAL)"),
                    Prim::IsPair => format!("({x}->kind == VL_PAIR && {x}->aux == 0)"),
                    _ => format!("({x}->kind == VL_CLOSURE || {x}->kind == VL_PRIM)"),
                })
            }
            Prim::Real => {
                let a = self.force(a)?;
                let Some(x) = self.real_operand(&a, p, site) else {
                    return self.prim_error(p, &a, site);
                };
                real(x)
            }
            Prim::ReadReal => real(format!("vl_read_real({site})")),
            Prim::WriteReal => {
                let a = self.force(a)?;
                let Some(x) = self.real_operand(&a, p, site) else {
                    return self.prim_error(p, &a, site);
                };
                let t = self.fresh("t");
                self.line(format!("double {t} = vl_write_real({x});"));
                real(t)
            }
            Prim::Write => {
                let b = self.boxed_for_display(&a)?;
                self.line(format!("vl_write_value({b});"));
                a
            }
            Prim::Get => self.get(a, out, site)?,
            Prim::OneHotSens => self.onehot(a, out)?,
            Prim::ListToArrayRev => self.list_to_array_rev(a, out)?,
            Prim::ArrayToListRev => self.array_to_list_rev(a, out, site)?,
            Prim::ArrayLength => {
                let a = self.force(a)?;
                self.array_length(a, site)?
            }
            _ => return self.ad_prim(p, a, out),
        };
        if *out == Av::Bottom {
            return Ok(Val::known(Av::Bottom));
        }
        if self.layout(out)?.is_empty() {
            // Known at compile time (the effect of an I/O primitive happened above).
            return Ok(Val::known(out.clone()));
        }
        let layout = self.layout(&v.av)?;
        let leaves = self.bind_leaves(&layout, v.leaves);
        self.coerce(Val { av: v.av, leaves }, out)
    }

    /// A primitive applied to an argument it never accepts: the evaluator's error.
    fn prim_error(&mut self, p: Prim, a: &Val, site: i64) -> R<Val> {
        let b = self.boxed_for_display(a)?;
        let what = if p.is_binary_real() || p.is_comparison() {
            "two reals"
        } else {
            "a real"
        };
        self.line(format!(
            "vl_fail_value({site}, {}, {b}, \"\");",
            c_string(&format!("`{}` takes {what}, got ", p.name()))
        ));
        Ok(Val::known(Av::Bottom))
    }

    /// The AD operators: maps over layouts (see the crate documentation).
    fn ad_prim(&mut self, p: Prim, a: Val, out: &Av) -> R<Val> {
        if *out == Av::Bottom {
            // The operator fails: the runtime's operator on the boxed argument reports it as
            // the evaluator does.
            let a = self.force(a)?;
            let call = match p {
                Prim::Unperturb | Prim::Unsensitize | Prim::StarJInverse => {
                    let tag = match p {
                        Prim::Unperturb => Tag::Perturbation,
                        Prim::Unsensitize => Tag::Sensitivity,
                        _ => Tag::Reverse,
                    };
                    format!(
                        "vl_ad_untag({{}}, {}, {})",
                        tag_index(tag),
                        c_string(p.name())
                    )
                }
                Prim::Primal | Prim::Tangent => {
                    format!("vl_ad_split({{}}, {})", (p == Prim::Tangent) as u8)
                }
                Prim::Plus | Prim::Bundle => {
                    let Some((x, y)) = self.two_raw(&a, -1)? else {
                        return self.unsupported(format!("`{}` applied where it fails", p.name()));
                    };
                    let (x, y) = (self.force(x)?, self.force(y)?);
                    let same_code = matches!((&x.av, &y.av),
                        (Av::Closure(c, _), Av::Closure(d, _)) if c == d);
                    if same_code || [&x.av, &y.av].iter().any(|v| matches!(v, Av::Dyn(_))) {
                        // The failure is inside the environments (or only known at run time).
                        return self.unsupported(format!("`{}` applied where it fails", p.name()));
                    }
                    let bx = self.boxed_for_display(&x)?;
                    let by = self.boxed_for_display(&y)?;
                    if [&x.av, &y.av].iter().any(|v| matches!(v, Av::Closure(..))) {
                        // A closure against a value of another shape (another code, a
                        // non-procedure): the evaluator's shape error, whose description of
                        // a procedure does not show its environment.
                        self.line(format!(
                            "vl_shape_fail({}, {bx}, {by});",
                            c_string(p.name())
                        ));
                        return Ok(Val::known(Av::Bottom));
                    }
                    let f = if p == Prim::Plus {
                        "vl_ad_plus"
                    } else {
                        "vl_ad_bundle"
                    };
                    self.line(format!("{f}({bx}, {by});"));
                    self.line("vl_fail_internal(\"an AD operator did not fail as the analysis predicted\");");
                    return Ok(Val::known(Av::Bottom));
                }
                // Pushing a tag fails only past the nesting limit (a closure's transformed
                // code included).
                Prim::Perturb | Prim::Sensitize | Prim::StarJ => {
                    let message = vlad_core::transform::TransformError::TooDeep.to_string();
                    self.line(format!("vl_fail_at(-1, {});", c_string(&message)));
                    return Ok(Val::known(Av::Bottom));
                }
                _ => return self.unsupported(format!("`{}` applied where it fails", p.name())),
            };
            if matches!(a.av, Av::Closure(..) | Av::Dyn(_)) {
                return self.unsupported(format!("`{}` applied where it fails", p.name()));
            }
            let b = self.boxed_for_display(&a)?;
            self.line(format!("{};", call.replace("{}", &b)));
            self.line(
                "vl_fail_internal(\"an AD operator did not fail as the analysis predicted\");",
            );
            return Ok(Val::known(Av::Bottom));
        }
        let out_layout = self.layout(out)?;
        if out_layout.is_empty() {
            return Ok(Val::known(out.clone()));
        }
        if p == Prim::ZeroSensR {
            // The lazy zero keeps the reverse value's leaves (see `layout`).
            return Ok(Val {
                av: out.clone(),
                leaves: a.leaves,
            });
        }
        let a = self.force(a)?;
        // `plus` and `zero` of boxed closures keep their codes (the runtime maps their
        // environments slot by slot); the other operators would change codes.
        let leaves = match p {
            Prim::Perturb => self.tag_leaves(&a, Tag::Perturbation)?,
            Prim::Sensitize => self.tag_leaves(&a, Tag::Sensitivity)?,
            Prim::StarJ => self.tag_leaves(&a, Tag::Reverse)?,
            Prim::Unperturb | Prim::Unsensitize | Prim::StarJInverse => {
                let tag = match p {
                    Prim::Unperturb => Tag::Perturbation,
                    Prim::Unsensitize => Tag::Sensitivity,
                    _ => Tag::Reverse,
                };
                self.untag_leaves(&a, tag, p.name())?
            }
            Prim::BuildLength | Prim::IfoldCount => a.leaves,
            Prim::ShallowPrimal => match &a.av {
                Av::Bundle(x, y) => self.split(&[x, y], &a.leaves)?.swap_remove(0),
                Av::Dyn(_) => {
                    vec![self.runtime_map(
                        Some(MapKind::ShallowPrimal),
                        format!("vl_ad_shallow_primal({})", a.leaves[0]),
                    )]
                }
                _ => a.leaves,
            },
            Prim::Primal | Prim::Tangent => self.split_forward(&a, p == Prim::Tangent)?,
            Prim::Zero => self.zero_leaves(&a, false)?,
            Prim::SZero => self.zero_leaves(&a, true)?,
            Prim::Bundle => {
                let Some((x, y)) = self.two(&a, -1)? else {
                    return self.unsupported("internal: `bundle` of a non-pair");
                };
                self.bundle(&x, &y)?
            }
            Prim::Plus => {
                let Some((x, y)) = self.two_raw(&a, -1)? else {
                    return self.unsupported("internal: `plus` of a non-pair");
                };
                self.plus(&x, &y)?
            }
            _ => return self.unsupported(format!("the primitive `{}`", p.name())),
        };
        // An array's leaf is one pointer whatever its element value: the maps above give the
        // element images the analysis computes for this argument, so where the analysis
        // recorded a wider result the array is converted, never read in another layout.
        let leaves = if has_array(out) {
            let image = self.prim_result(p, &a.av)?;
            self.coerce_leaves(&image, &leaves, out)?
        } else {
            leaves
        };
        if leaves.len() != out_layout.len() {
            if std::env::var_os("VLAD_C_DEBUG").is_some() {
                eprintln!("{} of {:?}\n  gives {out:?}", p.name(), a.av);
            }
            return self.unsupported(format!(
                "internal: `{}` gives {} leaves for a layout of {}",
                p.name(),
                leaves.len(),
                out_layout.len()
            ));
        }
        Ok(Val {
            av: out.clone(),
            leaves,
        })
    }

    /// The parts of `v` as they are (lazy zeros not computed).
    fn raw_parts(&mut self, v: &Val, avs: &[&Av]) -> R<Vec<Val>> {
        let parts = self.split(avs, &v.leaves)?;
        Ok(avs
            .iter()
            .zip(parts)
            .map(|(av, leaves)| Val {
                av: (*av).clone(),
                leaves,
            })
            .collect())
    }

    fn parts(&mut self, v: &Val, avs: &[&Av]) -> R<Vec<Val>> {
        let parts = self.split(avs, &v.leaves)?;
        let mut out = Vec::new();
        for (av, leaves) in avs.iter().zip(parts) {
            out.push(self.force(Val {
                av: (*av).clone(),
                leaves,
            })?);
        }
        Ok(out)
    }

    /// The parts of a pair, bundle or tagged value, or a closure's environment (lazy zeros in
    /// them computed if `forced`).
    fn components(&mut self, v: &Val, forced: bool) -> R<Vec<Val>> {
        let avs: Vec<Av> = match &v.av {
            Av::Pair(_, a, d) | Av::Bundle(a, d) => vec![(**a).clone(), (**d).clone()],
            Av::Tagged(_, x) => vec![(**x).clone()],
            Av::Closure(_, env) => env.to_vec(),
            _ => return self.unsupported("internal: the parts of a scalar"),
        };
        let avs: Vec<&Av> = avs.iter().collect();
        if forced {
            self.parts(v, &avs)
        } else {
            self.raw_parts(v, &avs)
        }
    }

    /// A structural map over two values of one structure (`bundle`, `plus`): the leaves `f`
    /// gives for each pair of corresponding parts, in order.
    fn zip_parts(
        &mut self,
        a: &Val,
        b: &Val,
        forced: bool,
        mut f: impl FnMut(&mut Self, &Val, &Val) -> R<Vec<String>>,
    ) -> R<Vec<String>> {
        let xs = self.components(a, forced)?;
        let ys = self.components(b, forced)?;
        if xs.len() != ys.len() {
            return self.unsupported("internal: a structural map of two different structures");
        }
        let mut out = Vec::new();
        for (x, y) in xs.iter().zip(&ys) {
            out.extend(f(self, x, y)?);
        }
        Ok(out)
    }

    /// The leaves of `primal` (or `tangent`) of a forward value.
    fn split_forward(&mut self, v: &Val, tangent: bool) -> R<Vec<String>> {
        Ok(match &v.av {
            Av::Dyn(_) => {
                vec![self.runtime_map(
                    Some(MapKind::Split(tangent)),
                    format!("vl_ad_split({}, {})", v.leaves[0], tangent as u8),
                )]
            }
            Av::Bundle(p, t) => {
                let mut parts = self.split(&[p, t], &v.leaves)?;
                parts.swap_remove(tangent as usize)
            }
            Av::Pair(..) | Av::Closure(..) => {
                self.map_parts(v, |s, x| s.split_forward(x, tangent))?
            }
            Av::Array(_, _, e) => {
                let to = self.map_image(MapKind::Split(tangent), e)?;
                let src = &v.leaves[0];
                vec![self.map_flat(src, e, &to, |s, x| s.split_forward(&x, tangent))?]
            }
            _ if self.layout(&v.av)?.is_empty() => Vec::new(),
            _ => return self.unsupported("`primal` or `tangent` of an unexpected value"),
        })
    }

    /// `runtime_v` of an AD map of a boxed value, noting that the program needs the map of
    /// `kind` for boxed closures (`None`: the runtime maps closures without one). Every boxed
    /// code gets the map, not only the callees of the value: the runtime's maps recurse into
    /// parts, whose callees differ.
    fn runtime_map(&mut self, kind: Option<MapKind>, e: String) -> String {
        self.map_kinds.extend(kind);
        self.runtime_v(e)
    }

    /// The AD maps of boxed closures (`vl_map_closure`, `vl_map_bundle` of runtime.c): for
    /// each map the program uses, one C function per boxed code, which unpacks the closure's
    /// environment, maps it as compiled code maps an unboxed closure, and boxes the result. A
    /// code the map does not apply to (or whose image is never boxed) has none: reaching it is
    /// an internal error of the compiled program, as the analysis says it cannot happen.
    fn closure_maps(&mut self) -> R<String> {
        let mut out = String::new();
        let mut done = std::collections::BTreeSet::new();
        let mut entries: Vec<(MapKind, u32)> = Vec::new();
        let mut codes: Vec<vlad_flow::CodeId> = self.boxed.envs.keys().copied().collect();
        codes.sort();
        let mut boxers = 0;
        loop {
            let todo: Vec<MapKind> = self.map_kinds.difference(&done).copied().collect();
            if todo.is_empty() {
                // The element boxers of flat arrays boxed by reference (a map may box an
                // array, a boxer may need a map).
                if boxers == self.elem_boxers.len() {
                    break;
                }
                while boxers < self.elem_boxers.len() {
                    out.push_str(&self.elem_boxer(boxers)?);
                    boxers += 1;
                }
                continue;
            }
            for kind in todo {
                done.insert(kind);
                for &c in &codes {
                    let key = std::mem::replace(&mut self.key, usize::MAX);
                    let (r, body) = self.detached(|s| s.closure_map(kind, c));
                    self.key = key;
                    if std::env::var_os("VLAD_C_DEBUG").is_some() {
                        match &r {
                            Ok(Some(_)) => {}
                            Ok(None) => eprintln!("map {kind:?} of code {}: none", c.0),
                            Err(e) => eprintln!("map {kind:?} of code {}: {}", c.0, e.reason),
                        }
                    }
                    if let Ok(Some(params)) = r {
                        let _ = write!(
                            out,
                            "static V vl_map_{}_{}({params}) {{\n{body}}}\n\n",
                            kind.number(),
                            c.0
                        );
                        entries.push((kind, c.0));
                    }
                }
            }
        }
        out.push_str("VL_FUN V vl_map_closure(int kind, V v) {\n  switch (kind) {\n");
        for kind in done.iter().filter(|k| **k != MapKind::Bundle) {
            let k = kind.number();
            let _ = writeln!(out, "  case {k}: switch (v->aux) {{");
            for (_, c) in entries.iter().filter(|e| e.0 == *kind) {
                let _ = writeln!(out, "    case {c}: return vl_map_{k}_{c}(v);");
            }
            out.push_str("    } break;\n");
        }
        out.push_str("  }\n  char m[120];\n  snprintf(m, sizeof m, \"an AD operator (map %d) met a boxed procedure of code %u it was not compiled for\", kind, v->aux);\n  vl_fail_internal(m);\n  return v;\n}\n");
        out.push_str("VL_FUN V vl_box_elem(int layout, V a, long i) {\n  switch (layout) {\n");
        for n in 0..boxers {
            let _ = writeln!(out, "  case {n}: return vl_box_elem_{n}(a, i);");
        }
        out.push_str(
            "  }\n  vl_fail_internal(\"an array of a layout with no boxer\");\n  return a;\n}\n",
        );
        out.push_str("VL_FUN V vl_map_bundle(V p, V t) {\n  switch (p->aux) {\n");
        let k = MapKind::Bundle.number();
        for (_, c) in entries.iter().filter(|e| e.0 == MapKind::Bundle) {
            let _ = writeln!(out, "  case {c}: return vl_map_{k}_{c}(p, t);");
        }
        out.push_str("  }\n  vl_fail_internal(\"bundle met a boxed procedure it was not compiled for\");\n  return p;\n}\n");
        Ok(out)
    }

    /// The body of the map `kind` of boxed closures of code `c` (into `self.body`), and its
    /// parameter list; `None` where the map does not apply.
    fn closure_map(&mut self, kind: MapKind, c: vlad_flow::CodeId) -> R<Option<String>> {
        let summary = self.boxed.envs[&c].clone();
        let bundle = kind == MapKind::Bundle;
        let clo = self.unpack_closure(c, &summary, if bundle { "p" } else { "v" })?;
        let Some(prim) = kind.prim() else {
            if kind != MapKind::ZeroSensitivity {
                return Ok(None);
            }
            // The zero sensitivity of a reverse closure, computed in full.
            let zero = Av::Zero(std::rc::Rc::new(clo.av.clone()));
            let leaves = if static_zero(&clo.av) {
                Vec::new()
            } else {
                clo.leaves.clone()
            };
            let forced = self.force(Val { av: zero, leaves })?;
            if forced.av == Av::Bottom {
                return Ok(None);
            }
            let b = self.boxed_val(&forced)?;
            self.line(format!("return {b};"));
            return Ok(Some("V v".into()));
        };
        let (arg, tangent) = if bundle {
            // The tangent: a closure of the perturbation-transformed code.
            let Ok(t_av) = self.an.apply(&Av::Prim(Prim::Perturb), &clo.av) else {
                return Ok(None);
            };
            let Av::Closure(tc, _) = t_av else {
                return Ok(None);
            };
            let Some(t_summary) = self.boxed.envs.get(&tc).cloned() else {
                return Ok(None);
            };
            let t = self.unpack_closure(tc, &t_summary, "t")?;
            (Av::pair(clo.av.clone(), t.av.clone()), Some(t))
        } else {
            (clo.av.clone(), None)
        };
        let r = match self.an.apply(&Av::Prim(prim), &arg) {
            Ok(r) if r != Av::Bottom => r,
            _ => return Ok(None),
        };
        if std::env::var_os("VLAD_C_DEBUG").is_some() {
            eprintln!("map {kind:?} of {:?}\n  gives {r:?}", clo.av);
        }
        let leaves = match (kind, tangent) {
            (MapKind::Tag(tag), _) => self.tag_leaves(&clo, tag)?,
            (MapKind::Untag(tag), _) => self.untag_leaves(&clo, tag, prim.name())?,
            (MapKind::Split(tangent), _) => self.split_forward(&clo, tangent)?,
            (MapKind::SZero, _) => self.zero_leaves(&clo, true)?,
            // The shallow primal keeps a closure's environment as it is.
            (MapKind::ShallowPrimal, _) => clo.leaves.clone(),
            (MapKind::Bundle, Some(t)) => self.bundle(&clo, &t)?,
            (MapKind::Bundle | MapKind::ZeroSensitivity, _) => unreachable!("handled above"),
        };
        if leaves.len() != self.layout(&r)?.len() {
            return Ok(None);
        }
        let b = self.boxed_val(&Val { av: r, leaves })?;
        self.line(format!("return {b};"));
        Ok(Some(if bundle { "V p, V t" } else { "V v" }.to_string()))
    }

    /// The closure of code `c` held by the boxed value `var`, its leaves in the layout of the
    /// code's environment summary.
    fn unpack_closure(
        &mut self,
        c: vlad_flow::CodeId,
        summary: &std::rc::Rc<[Av]>,
        var: &str,
    ) -> R<Val> {
        let mut leaves = Vec::new();
        let mut slot = 0;
        for s in summary.iter() {
            for leaf in self.layout(s)? {
                let t = self.fresh("u");
                self.line(format!(
                    "{} {t} = {var}->s[{slot}].{};",
                    leaf.ctype(),
                    leaf.slot()
                ));
                leaves.push(t);
                slot += 1;
            }
        }
        Ok(Val {
            av: Av::Closure(c, summary.clone()),
            leaves,
        })
    }

    /// A structural map over the parts of a pair, bundle or closure (its environment): the
    /// leaves `f` gives for each part, in order.
    fn map_parts(
        &mut self,
        v: &Val,
        mut f: impl FnMut(&mut Self, &Val) -> R<Vec<String>>,
    ) -> R<Vec<String>> {
        let parts = self.components(v, true)?;
        let mut out = Vec::new();
        for x in &parts {
            out.extend(f(self, x)?);
        }
        Ok(out)
    }

    /// A boxed value computed by the runtime, in a variable.
    /// Runs `f` on an empty body at indentation 1, for code outside the function being
    /// generated (start-up initialisers, generated runtime helpers); `f`'s result and the
    /// lines it wrote. The body being generated is left as it was.
    fn detached<T>(&mut self, f: impl FnOnce(&mut Self) -> R<T>) -> (R<T>, String) {
        let outer_body = std::mem::take(&mut self.body);
        let outer_indent = std::mem::replace(&mut self.indent, 1);
        let r = f(self);
        let lines = std::mem::replace(&mut self.body, outer_body);
        self.indent = outer_indent;
        (r, lines)
    }

    fn runtime_v(&mut self, e: String) -> String {
        let t = self.fresh("t");
        self.line(format!("V {t} = {e};"));
        t
    }

    /// The leaves of `v` with `tag` pushed (`perturb`, `sensitize`, `*j`): scalars keep their
    /// leaves under the tag; pairs and closures are mapped part by part.
    fn tag_leaves(&mut self, v: &Val, tag: Tag) -> R<Vec<String>> {
        let v = self.force(v.clone())?;
        Ok(match &v.av {
            Av::Dyn(_) => {
                vec![self.runtime_map(
                    Some(MapKind::Tag(tag)),
                    format!("vl_ad_tag({}, {})", v.leaves[0], tag_index(tag)),
                )]
            }
            Av::Pair(..) | Av::Closure(..) => self.map_parts(&v, |s, x| s.tag_leaves(x, tag))?,
            Av::Array(_, _, e) => {
                let to = self.map_image(MapKind::Tag(tag), e)?;
                vec![self.map_flat(&v.leaves[0], e, &to, |s, x| s.tag_leaves(&x, tag))?]
            }
            _ => v.leaves.clone(),
        })
    }

    /// The leaves of `v` with its outermost `tag` removed (`unperturb`, `unsensitize`,
    /// `*j-inverse`).
    fn untag_leaves(&mut self, v: &Val, tag: Tag, name: &str) -> R<Vec<String>> {
        let v = self.force(v.clone())?;
        Ok(match &v.av {
            Av::Dyn(_) => vec![self.runtime_map(
                Some(MapKind::Untag(tag)),
                format!(
                    "vl_ad_untag({}, {}, {})",
                    v.leaves[0],
                    tag_index(tag),
                    c_string(name)
                ),
            )],
            Av::Pair(..) | Av::Closure(..) => {
                self.map_parts(&v, |s, x| s.untag_leaves(x, tag, name))?
            }
            Av::Array(_, _, e) => {
                let to = self.map_image(MapKind::Untag(tag), e)?;
                let src = &v.leaves[0];
                vec![self.map_flat(src, e, &to, |s, x| s.untag_leaves(&x, tag, name))?]
            }
            _ => v.leaves.clone(),
        })
    }

    /// The leaves of `(zero v)` (or of the zero sensitivity): reals become known zeros, and
    /// booleans stay, so only the leaves of unknown booleans remain.
    fn zero_leaves(&mut self, v: &Val, sensitivity: bool) -> R<Vec<String>> {
        let v = self.force(v.clone())?;
        Ok(match &v.av {
            // `zero` keeps a boxed closure's code: the runtime maps it slot by slot.
            Av::Dyn(_) => vec![self.runtime_map(
                sensitivity.then_some(MapKind::SZero),
                format!("vl_ad_zero({}, {})", v.leaves[0], sensitivity as u8),
            )],
            Av::Bool(None) => v.leaves.clone(),
            Av::Pair(..) | Av::Bundle(..) | Av::Closure(..) => {
                self.map_parts(&v, |s, x| s.zero_leaves(x, sensitivity))?
            }
            Av::Tagged(_, x) => {
                let ps = self.parts(&v, &[x])?;
                self.zero_leaves(&ps[0], sensitivity)?
            }
            Av::Array(_, _, e) => {
                let p = if sensitivity { Prim::SZero } else { Prim::Zero };
                let to = self.elem_image(p, (**e).clone())?;
                let src = &v.leaves[0];
                vec![self.map_flat(src, e, &to, |s, x| s.zero_leaves(&x, sensitivity))?]
            }
            _ => Vec::new(),
        })
    }

    /// The leaves of `(bundle p t)`.
    fn bundle(&mut self, p: &Val, t: &Val) -> R<Vec<String>> {
        // Parts of a structure (elements of flat arrays too) may be lazy zeros.
        let (p, t) = (&self.force(p.clone())?, &self.force(t.clone())?);
        Ok(match (&p.av, &t.av) {
            (Av::Dyn(_), _) | (_, Av::Dyn(_)) => {
                let (x, y) = (self.boxed_val(p)?, self.boxed_val(t)?);
                vec![self.runtime_map(Some(MapKind::Bundle), format!("vl_ad_bundle({x}, {y})"))]
            }
            (Av::Pair(..), Av::Pair(..)) | (Av::Closure(..), Av::Closure(..)) => {
                self.zip_parts(p, t, true, |s, x, y| s.bundle(x, y))?
            }
            (Av::Array(_, _, x), Av::Array(_, _, y)) => {
                let to = self.elem_image(Prim::Bundle, Av::pair((**x).clone(), (**y).clone()))?;
                vec![self.zip_flat("bundle", p, t, &to, |s, x, y| s.bundle(&x, &y))?]
            }
            (Av::Array(..), _) | (_, Av::Array(..)) => {
                if std::env::var_os("VLAD_C_DEBUG").is_some() {
                    eprintln!("bundle of {:?}\n  and {:?}", p.av, t.av);
                }
                return self.unsupported("`bundle` of an array and another value");
            }
            // Scalars: the primal's leaves, then the perturbation's. Where a part of either is
            // boxed, the analysis could not tell whether their shapes agree: the runtime's
            // `bundle` of the boxed values checks it (the evaluator's error), its result unused.
            _ => {
                if has_boxed_part(&p.av) || has_boxed_part(&t.av) {
                    let (x, y) = (self.boxed_val(p)?, self.boxed_val(t)?);
                    self.map_kinds.insert(MapKind::Bundle);
                    self.line(format!("(void)vl_ad_bundle({x}, {y});"));
                }
                let mut out = p.leaves.clone();
                out.extend(t.leaves.iter().cloned());
                out
            }
        })
    }

    /// The leaves of `(plus a b)`.
    fn plus(&mut self, a: &Val, b: &Val) -> R<Vec<String>> {
        if let Av::Zero(_) = a.av {
            return Ok(b.leaves.clone());
        }
        if let Av::Zero(_) = b.av {
            return Ok(a.leaves.clone());
        }
        Ok(match (&a.av, &b.av) {
            (Av::Dyn(_), _) | (_, Av::Dyn(_)) => {
                let (x, y) = (self.boxed_val(a)?, self.boxed_val(b)?);
                vec![self.runtime_v(format!("vl_ad_plus({x}, {y})"))]
            }
            (Av::Real(Some(_)), Av::Real(Some(_))) => Vec::new(),
            (Av::Real(_), Av::Real(_)) => {
                let x = match &a.av {
                    Av::Real(Some(x)) => real_literal(x.get()),
                    _ => a.leaves[0].clone(),
                };
                let y = match &b.av {
                    Av::Real(Some(y)) => real_literal(y.get()),
                    _ => b.leaves[0].clone(),
                };
                let t = self.fresh("t");
                self.line(format!("double {t} = {x} + {y};"));
                vec![t]
            }
            (Av::Pair(..), Av::Pair(..))
            | (Av::Bundle(..), Av::Bundle(..))
            | (Av::Tagged(..), Av::Tagged(..))
            | (Av::Closure(..), Av::Closure(..)) => {
                self.zip_parts(a, b, false, |s, x, y| s.plus(x, y))?
            }
            (Av::Array(_, _, x), Av::Array(_, _, y)) => {
                let to = self.elem_image(Prim::Plus, Av::pair((**x).clone(), (**y).clone()))?;
                vec![self.zip_flat("plus", a, b, &to, |s, x, y| s.plus(&x, &y))?]
            }
            (Av::Bool(None), _) => a.leaves.clone(),
            (_, Av::Bool(None)) => b.leaves.clone(),
            _ if self.layout(&a.av)?.is_empty() && self.layout(&b.av)?.is_empty() => Vec::new(),
            _ => return self.unsupported("`plus` of unexpected values"),
        })
    }
}

/// Known values boxed at run time are built part by part in the C code: a bound on its size.
const MAX_BOXED_CONSTANT: usize = 4096;

/// `v` has at most `budget` parts (which it uses up).
fn small(v: &Av, budget: &mut usize) -> bool {
    if *budget == 0 {
        return false;
    }
    *budget -= 1;
    match v {
        Av::Pair(_, a, b) | Av::Bundle(a, b) => small(a, budget) && small(b, budget),
        Av::Tagged(_, x) | Av::Zero(x) => small(x, budget),
        Av::Closure(_, env) => env.iter().all(|x| small(x, budget)),
        _ => true,
    }
}

/// The printed form of a known untagged value (the evaluator's `print`), `None` for values
/// with unknown or tagged parts.
fn known_text(v: &Av) -> Option<String> {
    fn go(v: &Av, s: &mut String) -> bool {
        match v {
            Av::Nil => s.push_str("()"),
            Av::Bool(Some(b)) => s.push_str(if *b { "#t" } else { "#f" }),
            Av::Real(Some(x)) => s.push_str(&vlad_syntax::number::format_real(x.get())),
            Av::Prim(p) => {
                let _ = write!(s, "<procedure:{}>", p.name());
            }
            Av::Closure(..) => s.push_str("<procedure>"),
            Av::Pair(t, _, _) if t.is_empty() => {
                s.push('(');
                let mut v = v;
                while let Av::Pair(_, a, d) = v {
                    if !go(a, s) {
                        return false;
                    }
                    match &**d {
                        Av::Pair(t, ..) if t.is_empty() => {
                            s.push(' ');
                            v = d;
                        }
                        Av::Nil => break,
                        other => {
                            s.push_str(" . ");
                            if !go(other, s) {
                                return false;
                            }
                            break;
                        }
                    }
                }
                s.push(')');
            }
            _ => return false,
        }
        true
    }
    let mut s = String::new();
    go(v, &mut s).then_some(s)
}

fn lookup(env: &[(Var, Val)], x: Var) -> R<Val> {
    env.iter()
        .rev()
        .find(|(y, _)| *y == x)
        .map(|(_, v)| v.clone())
        .ok_or_else(|| Unsupported {
            span: Span::NONE,
            reason: "internal: an unbound variable".into(),
        })
}

fn is_simple(e: &str) -> bool {
    e.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        || e.starts_with('(') && e.ends_with(')') && e[1..e.len() - 1].parse::<f64>().is_ok()
}

/// Whether an array is part of `v` (outside boxed parts).
fn has_array(v: &Av) -> bool {
    match v {
        Av::Array(..) => true,
        Av::Pair(_, a, b) | Av::Bundle(a, b) => has_array(a) || has_array(b),
        Av::Closure(_, env) => env.iter().any(has_array),
        Av::Tagged(_, x) | Av::Zero(x) => has_array(x),
        _ => false,
    }
}

/// Whether a scalar-like value (a bundle or tagged value) has a boxed part.
fn has_boxed_part(av: &Av) -> bool {
    match av {
        Av::Dyn(_) => true,
        Av::Bundle(a, b) => has_boxed_part(a) || has_boxed_part(b),
        Av::Tagged(_, x) => has_boxed_part(x),
        _ => false,
    }
}

/// A lazy zero of this value is known at compile time (it has no arrays, boxed parts or
/// unknown booleans: zeros keep booleans).
fn static_zero(of: &Av) -> bool {
    match of {
        Av::Array(..) | Av::Dyn(_) | Av::Bool(None) => false,
        Av::Pair(_, a, b) | Av::Bundle(a, b) => static_zero(a) && static_zero(b),
        Av::Closure(_, env) => env.iter().all(static_zero),
        Av::Tagged(_, x) | Av::Zero(x) => static_zero(x),
        _ => true,
    }
}

fn short(v: &Av) -> &'static str {
    match v {
        Av::Bottom => "no value",
        Av::Nil => "()",
        Av::Bool(_) => "a boolean",
        Av::Real(_) => "a real",
        Av::Prim(_) => "a primitive",
        Av::Pair(..) => "a pair",
        Av::Closure(..) => "a closure",
        Av::Array(..) => "an array",
        Av::Bundle(..) => "a forward value",
        Av::Tagged(..) => "a tagged value",
        Av::Zero(_) => "a zero sensitivity",
        Av::Dyn(_) => "a boxed value",
    }
}

fn flow_error(e: vlad_flow::FlowError) -> Unsupported {
    Unsupported {
        span: e.span,
        reason: e.message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three functions: f1 holds a boxed value, f2 only calls f1, f3 computes with doubles.
    fn program() -> Vec<(usize, String)> {
        vec![
            (
                1,
                "static V f1(double a0) {\n  V b1 = vl_real(a0);\n  return b1;\n}\n".into(),
            ),
            (
                2,
                "static double f2(double a0) {\n  V t1 = f1(a0);\n  return a0;\n}\n".into(),
            ),
            (
                3,
                "static double f3(double a0) {\n  return a0 + 1.0;\n}\n".into(),
            ),
        ]
    }

    #[test]
    fn a_call_whose_result_is_returned_as_it_is_becomes_a_tail_call() {
        let text = "  struct r_dd t1 = f2(a0, g(x));\n  return (struct r_dd){t1.f0, t1.f1};\n\
                    double t3 = f4(a0);\nreturn t3;\n\
                    struct r_dd t5 = f6(a0);\n  return (struct r_dd){t5.f1, t5.f0};\n\
                    double t7 = vl_real(a0);\nreturn t7;\n";
        let out = return_calls(text);
        assert!(
            out.starts_with("  return f2(a0, g(x));\nreturn f4(a0);\n"),
            "{out}"
        );
        // Fields swapped, or not a generated function: unchanged.
        assert!(out.contains("return (struct r_dd){t5.f1, t5.f0};"), "{out}");
        assert!(
            out.contains("double t7 = vl_real(a0);\nreturn t7;"),
            "{out}"
        );
    }

    #[test]
    fn allocation_spreads_to_callers() {
        let a = allocating_functions(&program());
        assert!(a.contains(&1) && a.contains(&2));
        assert!(!a.contains(&3));
        assert_eq!(
            called_functions("  double t = f2(f13(x), vl_f4(y)) + xf5(z);"),
            [2, 13]
        );
        assert!(holds_boxed("static int g(V a0)"));
        assert!(!holds_boxed("struct r_VV t; // LEAVES V"));
    }

    /// The parameters of generated functions, by number, from their signatures.
    fn signatures(sigs: &[(usize, &str)]) -> HashMap<usize, Vec<(String, String)>> {
        sigs.iter().map(|(k, s)| (*k, parameters(s))).collect()
    }

    #[test]
    fn a_tail_call_passing_no_new_boxed_value_releases_what_the_call_allocated() {
        let sig4 = "static double f4(double a0, V a1)";
        let sig5 = "static double f5(V a0, double a1)";
        let params = signatures(&[(4, sig4), (5, sig5)]);
        assert_eq!(
            params[&5],
            vec![("V".into(), "a0".into()), ("double".into(), "a1".into())]
        );
        let none = HashMap::new();
        let text = format!(
            "{sig4} {{\n  V b1 = vl_real(a0);\n  if (a0 > 1.0) {{\n    return f4(a0, b1);\n  }}\n  \
             return f5(a1, (1e0));\n}}\n"
        );
        // The entry mark, and a release before the call of f5 only: f4 is passed b1, which
        // was allocated here; f5 is passed the function's own parameter a1.
        assert_eq!(
            release_before_tail_calls(&text, 4, &params, &none),
            format!(
                "{sig4} {{\n  vl_mark_t vl_entry = vl_mark();\n  V b1 = vl_real(a0);\n  \
                 if (a0 > 1.0) {{\n    return f4(a0, b1);\n  }}\n  vl_release(vl_entry);\n  \
                 return f5(a1, (1e0));\n}}\n"
            )
        );
        // An argument that is an expression (it could read or allocate after the release):
        // nothing changes.
        let text = format!("{sig4} {{\n  return f5(a1, (a0 + 1.0));\n}}\n");
        assert_eq!(release_before_tail_calls(&text, 4, &params, &none), text);
    }

    #[test]
    fn a_loop_carrying_a_pointer_free_array_copies_it_down_to_its_first_entry_mark() {
        // f6(array, n, boxed): a loop stepping an array; a1 is a count, a2 a boxed value it
        // passes on unchanged.
        let sig6 = "static V f6(V a0, double a1, V a2)";
        let sig7 = "static V f7(V a0, V a1)";
        let params = signatures(&[(6, sig6), (7, sig7)]);
        let carriable: HashMap<usize, Vec<bool>> =
            [(6, vec![true, false, false]), (7, vec![true, true])]
                .into_iter()
                .collect();
        let text = format!(
            "{sig6} {{\n  if (a1 > 0.0) {{\n    V t1 = f9(a0);\n    double t2 = a1 - 1.0;\n    \
             return f6(t1, t2, a2);\n  }}\n  return f7(a2, a0);\n}}\n"
        );
        // The self tail call copies t1 down to the mark taken once, before the loop, and
        // continues; a2 is passed on unchanged by every self call, so it is not copied. The
        // call of f7 passes a0, which may be the copy above the mark: no release there.
        assert_eq!(
            release_before_tail_calls(&text, 6, &params, &carriable),
            format!(
                "{sig6} {{\n  vl_mark_t vl_entry = vl_mark();\n  for (;;) {{\n  \
                 if (a1 > 0.0) {{\n    V t1 = f9(a0);\n    double t2 = a1 - 1.0;\n    \
                 V vl_c4[] = {{t1}};\n    vl_release_carrying(vl_entry, vl_c4, 1);\n    \
                 {{ V vl_n4_0 = vl_c4[0]; double vl_n4_1 = t2; V vl_n4_2 = a2; a0 = vl_n4_0; \
                 a1 = vl_n4_1; a2 = vl_n4_2; continue; }}\n  }}\n  return f7(a2, a0);\n  }}\n}}\n"
            )
        );
        // A boxed argument that cannot be copied (a2 is not a pointer-free array): nothing
        // changes, since the self call might pass on what this step allocated.
        let text = format!(
            "{sig6} {{\n  if (a1 > 0.0) {{\n    V t1 = f9(a0);\n    V t3 = f9(a2);\n    \
             return f6(t1, a1, t3);\n  }}\n  return a0;\n}}\n"
        );
        assert_eq!(
            release_before_tail_calls(&text, 6, &params, &carriable),
            text
        );
        // Without the copy (no pointer-free arrays), the old rule: own parameters only.
        let text = format!("{sig6} {{\n  V t1 = f9(a0);\n  return f6(t1, a1, a2);\n}}\n");
        assert_eq!(
            release_before_tail_calls(&text, 6, &params, &HashMap::new()),
            text
        );
    }

    #[test]
    fn marks_stay_around_calls_that_allocate_and_are_not_tail_calls() {
        let a = allocating_functions(&program());
        let text = format!(
            "{MARK}2 m1\n  double t1 = f2(x);\n{RELEASE}2 m1\n  double y = t1 * 2.0;\n\
             {MARK}3 m2\n  double t2 = f3(y);\n{RELEASE}3 m2\n  double z = t2;\n\
             {MARK}2 m3\n  double t3 = f2(z);\n{RELEASE}2 m3\n  return t3;\n"
        );
        let out = finish_marks(&text, &a);
        // The first call allocates: marked and released.
        assert!(out.contains("vl_mark_t m1 = vl_mark();\n  double t1 = f2(x);\nvl_release(m1);"));
        // f3 never allocates, and the last call is a tail call: neither is marked.
        assert!(!out.contains("m2") && !out.contains("m3"), "{out}");
        assert!(!out.contains("/*@"), "{out}");
    }
}
