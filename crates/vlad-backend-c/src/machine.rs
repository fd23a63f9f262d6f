//! Deep recursion without native stack growth: explicit-stack versions of recursive functions.
//!
//! The reverse transform (paper 003) turns a loop into non-tail recursion twice over: the
//! forward sweep builds each step's backpropagator after the recursive call returns, and the
//! backpropagator of a step calls the next step's before it distributes the sensitivities that
//! call returns. Compiled naively, both recurse once per step on the C stack.
//!
//! For every strongly connected component of the call graph that has a call inside it that is
//! not a tail call (a *deep* component), this pass writes one more C function, the component's
//! *machine*: the bodies of all its members, with their locals in heap frames on an explicit
//! stack (`vl_push` in the runtime) instead of C locals. A call between members pushes the
//! callee's frame (its parameters, a resume point, where its result goes) and jumps to the
//! dispatch; a `return` stores the result through the frame and pops it; a tail call between
//! members replaces the frame. The machine itself never recurses natively, so a recursion of
//! any depth inside the component uses a constant amount of C stack, and its frames hold only
//! the member's parameters and the locals it needs after a call.
//!
//! The native members stay as they were (they are faster: locals in registers), but for one
//! test at each non-tail call of another member: once the C stack is deeper than a budget
//! (`VL_DEEP`, `VLAD_NATIVE_DEPTH_BYTES`, 1 MiB by default), the call goes to the machine,
//! through an entry function of the callee. Shallow recursion runs natively; deep recursion
//! runs natively down to the budget and in the machine beyond it. (Only non-tail calls grow
//! the stack; a component's recursion is deep only through calls between its members.)
//!
//! The pass works on the generated text, which has a small, regular grammar: a call of a
//! generated function is always `T t = fK(...);`, `fK(...);` or `return fK(...);`. A component
//! whose text has any other shape is left as it is (`None`): it still runs, on the C stack.

use crate::units::Function;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Id,
    Num,
    Lit,
    Punct,
    Space,
}

#[derive(Clone, Copy, Debug)]
struct Tok<'a> {
    kind: Kind,
    text: &'a str,
}

/// The tokens of C text (comments are spaces).
fn tokenize(s: &str) -> Vec<Tok<'_>> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        let kind = if c.is_ascii_whitespace() {
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            Kind::Space
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i = (i + 2).min(b.len());
            Kind::Space
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            Kind::Id
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            while i < b.len() {
                let d = b[i];
                // A sign belongs to the number after an exponent's letter (`1e-05`).
                let sign =
                    (d == b'+' || d == b'-') && matches!(b[i - 1], b'e' | b'E' | b'p' | b'P');
                if d.is_ascii_alphanumeric() || d == b'_' || d == b'.' || sign {
                    i += 1;
                } else {
                    break;
                }
            }
            Kind::Num
        } else if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
            Kind::Lit
        } else {
            const TWO: [&str; 19] = [
                "->", "++", "--", "==", "!=", "<=", ">=", "&&", "||", "<<", ">>", "+=", "-=", "*=",
                "/=", "%=", "&=", "|=", "^=",
            ];
            let two = s.get(i..i + 2).filter(|t| TWO.contains(t));
            i += two.map_or(1, |_| 2);
            Kind::Punct
        };
        out.push(Tok {
            kind,
            text: &s[start..i],
        });
    }
    out
}

/// The number `K` of a generated function's name `fK`.
fn function_number(t: &str) -> Option<usize> {
    let d = t.strip_prefix('f')?;
    (!d.is_empty() && d.bytes().all(|c| c.is_ascii_digit()))
        .then(|| d.parse().ok())
        .flatten()
}

const KEYWORDS: [&str; 15] = [
    "return", "goto", "case", "else", "default", "if", "for", "switch", "break", "continue", "do",
    "while", "sizeof", "struct", "static",
];

/// A member's signature: its text, its return type (`void`, a scalar or a result struct) and
/// its parameters.
struct Sig {
    text: String,
    ret: String,
    params: Vec<(String, String)>,
}

fn signature(sig: &str, k: usize) -> Option<Sig> {
    let (ret, _) = sig.split_once(&format!(" f{k}("))?;
    Some(Sig {
        text: sig.to_string(),
        ret: ret.to_string(),
        params: crate::gen::parameters(sig),
    })
}

/// Where a generated function's body lies in its text: after the signature's `) {` line, up
/// to the closing brace.
fn body_range(text: &str) -> Option<std::ops::Range<usize>> {
    Some(text.find(") {\n")? + 4..text.rfind('}')?)
}

/// The most C (the members' text) a component may have to get a machine. The machine is a
/// second copy of it, and a generic program can have components of megabytes: in
/// tests/array/property.vlad (a generator of random programs) machines for all would make its C
/// 163 MB instead of 73 (62 without any). A component above this recurses on the C stack (8 GiB, mapped as used). The
/// largest of the examples, tests and benchmarks but that one is 0.3 MB.
const MAX_MACHINE_BYTES: usize = 1 << 20;

/// Adds a machine for each deep component of `funs` (numbered from `next`), makes the
/// members hand deep calls to it, and returns the frame structs' definitions (C, for every
/// unit) with the number of components that got one.
pub(crate) fn add_machines(funs: &mut Vec<Function>, mut next: usize) -> (String, usize) {
    let index: HashMap<usize, usize> = funs
        .iter()
        .enumerate()
        .map(|(i, f)| (f.number, i))
        .collect();
    let calls: Vec<Vec<usize>> = funs
        .iter()
        .map(|f| {
            // The body's calls (the signature names the function itself).
            let body = body_range(&f.text).map_or("", |r| &f.text[r]);
            let mut cs: Vec<usize> = crate::gen::called_functions(body)
                .into_iter()
                .filter_map(|k| index.get(&k).copied())
                .collect();
            cs.sort_unstable();
            cs.dedup();
            cs
        })
        .collect();
    let mut structs = String::new();
    let (mut count, mut native, mut large) = (0, 0, 0);
    for scc in components(&calls) {
        let members: HashSet<usize> = scc.iter().map(|&i| funs[i].number).collect();
        let recursive = scc.len() > 1 || calls[scc[0]].contains(&scc[0]);
        if !recursive
            || !scc.iter().any(|&i| {
                body_range(&funs[i].text)
                    .is_some_and(|r| has_non_tail_call(&funs[i].text[r], &members))
            })
        {
            continue;
        }
        let bytes: usize = scc.iter().map(|&i| funs[i].text.len()).sum();
        if bytes > MAX_MACHINE_BYTES {
            large += 1;
            continue;
        }
        let Some(m) = machine(funs, &scc, &members, next) else {
            native += 1;
            continue;
        };
        structs.push_str(&m.structs);
        for (i, body) in m.natives {
            let text = &mut funs[i].text;
            if let Some(r) = body_range(text) {
                text.replace_range(r, &body);
            }
        }
        next += 1 + m.entries.len();
        funs.push(m.function);
        funs.extend(m.entries);
        count += 1;
    }
    let _ = writeln!(
        structs,
        "/* deep recursive components: {count} with an explicit-stack machine, {native} left native, {large} too large for one */"
    );
    (structs, count)
}

/// The strongly connected components of the graph, each sorted.
fn components(calls: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut cs = vlad_core::graph::tarjan(calls.len(), calls);
    for c in &mut cs {
        c.sort_unstable();
    }
    cs
}

/// Whether the body calls a member other than by `return fK(...)`.
fn has_non_tail_call(body: &str, members: &HashSet<usize>) -> bool {
    let toks: Vec<Tok> = tokenize(body)
        .into_iter()
        .filter(|t| t.kind != Kind::Space)
        .collect();
    toks.iter().enumerate().any(|(i, t)| {
        t.kind == Kind::Id
            && function_number(t.text).is_some_and(|k| members.contains(&k))
            && toks.get(i + 1).is_some_and(|n| n.text == "(")
            && !(i > 0 && matches!(toks[i - 1].text, "return" | "." | "->"))
    })
}

struct Machine {
    function: Function,
    structs: String,
    /// The members' entries to the machine, for their callers' tests.
    entries: Vec<Function>,
    /// The new bodies of the members that call members (by index in `funs`).
    natives: Vec<(usize, String)>,
}

/// What a statement of a member's body is, by its first tokens.
enum Stmt {
    /// A declaration: its type, its declarators (name, token range of the initializer) and
    /// the end of the statement (the `;`). Only those whose variables live in the frame are
    /// kept (`analyse`); the others stay C declarations.
    Decl {
        ty: String,
        decls: Vec<(String, Option<(usize, usize)>)>,
        end: usize,
    },
    /// `fK(args);` or `T t = fK(args);` of a member: the callee, the argument ranges, the
    /// variable that receives the result, the statement's end.
    Call {
        callee: usize,
        /// The callee's token and its closing parenthesis.
        at: (usize, usize),
        args: Vec<(usize, usize)>,
        into: Option<String>,
        end: usize,
    },
    /// `return ...;`: the range of the expression (empty for `return;`) and the end.
    Return { expr: (usize, usize), end: usize },
}

/// One member's body, analysed.
struct Body<'a> {
    toks: Vec<Tok<'a>>,
    /// The statements to rewrite, by the position of their first token.
    stmts: HashMap<usize, Stmt>,
    /// The names that live in the frame, with their C types (the parameters first).
    fields: Vec<(String, String)>,
}

impl Body<'_> {
    fn prev(&self, i: usize) -> Option<&Tok<'_>> {
        self.toks[..i].iter().rev().find(|t| t.kind != Kind::Space)
    }
    fn next(&self, i: usize) -> Option<(usize, &Tok<'_>)> {
        self.toks
            .iter()
            .enumerate()
            .skip(i)
            .find(|(_, t)| t.kind != Kind::Space)
    }
}

/// Analyses the body of a member (the text between its outer braces).
fn analyse<'a>(
    text: &'a str,
    params: &[(String, String)],
    members: &HashSet<usize>,
) -> Option<Body<'a>> {
    let toks = tokenize(text);
    let n = toks.len();
    // Matching brackets.
    let mut matching = vec![usize::MAX; n];
    let mut open = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        match t.text {
            "(" | "[" | "{" if t.kind == Kind::Punct => open.push(i),
            ")" | "]" | "}" if t.kind == Kind::Punct => {
                let o = open.pop()?;
                matching[o] = i;
                matching[i] = o;
            }
            _ => {}
        }
    }
    if !open.is_empty() {
        return None;
    }
    let mut body = Body {
        toks,
        stmts: HashMap::new(),
        fields: params.to_vec(),
    };
    // Statement starts: after `;` `{` `}` `else` and labels at nesting depth 0 of parentheses
    // and initialisers, after `for (`, and after the header of an `if`/`for`/`switch`/`while`.
    let mut starts = vec![0usize];
    // (enclosing block's end) for each start, for scopes.
    let mut block_end = vec![n];
    let mut depth = 0i32; // parentheses and brackets
    let mut init = 0i32; // initialiser braces
    let mut blocks: Vec<usize> = Vec::new();
    let mut question = 0;
    let mut i = 0;
    let is_type_start =
        |t: &str| matches!(t, "struct" | "double" | "long" | "int" | "V" | "unsigned");
    while i < n {
        let t = body.toks[i];
        let cur_end = blocks.last().copied().unwrap_or(n);
        match (t.kind, t.text) {
            (Kind::Punct, "(" | "[") => depth += 1,
            (Kind::Punct, ")" | "]") => {
                depth -= 1;
                // The header of a control statement: a statement follows.
                if t.text == ")" && depth == 0 && init == 0 {
                    let o = matching[i];
                    if body
                        .prev(o)
                        .is_some_and(|p| matches!(p.text, "if" | "for" | "switch" | "while"))
                    {
                        starts.push(i + 1);
                        block_end.push(cur_end);
                    }
                }
            }
            (Kind::Punct, "{") => {
                let p = body.prev(i).map(|p| p.text);
                // `(T){...}` is a compound literal; `for (long i = 0; ...) {` is not.
                let compound = p == Some(")") && {
                    let o = matching[body.toks[..i].iter().rposition(|t| t.text == ")")?];
                    body.next(o + 1).is_some_and(|(_, t)| is_type_start(t.text))
                        && !body
                            .prev(o)
                            .is_some_and(|t| matches!(t.text, "for" | "if" | "switch" | "while"))
                };
                if init > 0
                    || depth > 0
                    || compound
                    || matches!(p, Some("=" | "," | "(" | "return"))
                {
                    init += 1;
                } else {
                    blocks.push(matching[i]);
                    starts.push(i + 1);
                    block_end.push(matching[i]);
                }
            }
            (Kind::Punct, "}") => {
                if init > 0 {
                    init -= 1;
                } else {
                    blocks.pop();
                    starts.push(i + 1);
                    block_end.push(blocks.last().copied().unwrap_or(n));
                }
            }
            (Kind::Punct, ";") if init == 0 => {
                question = 0;
                if depth == 0 {
                    starts.push(i + 1);
                    block_end.push(cur_end);
                }
            }
            (Kind::Punct, "?") => question += 1,
            (Kind::Punct, ":") if depth == 0 && init == 0 => {
                if question > 0 {
                    question -= 1;
                } else {
                    starts.push(i + 1);
                    block_end.push(cur_end);
                }
            }
            (Kind::Id, "else") => {
                starts.push(i + 1);
                block_end.push(cur_end);
            }
            (Kind::Id, "for") => {
                if let Some((o, p)) = body.next(i + 1) {
                    if p.text == "(" {
                        // The for-init: its declaration's scope is (at most) the enclosing block.
                        starts.push(o + 1);
                        block_end.push(cur_end);
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    // Classify the statements.
    // The resume points: the ends of the calls of members (the arguments are read before).
    let mut resume_points = Vec::new();
    // The member calls the statements below account for (by the callee's token).
    let mut handled: HashSet<usize> = HashSet::new();
    let mut decls: Vec<(usize, usize)> = Vec::new(); // (start, scope end)
    for (&s, &scope) in starts.iter().zip(&block_end) {
        let Some((a, first)) = body.next(s) else {
            continue;
        };
        if body.stmts.contains_key(&a) {
            continue;
        }
        let end_of = |from: usize| -> Option<usize> {
            let mut d = 0i32;
            for (j, t) in body.toks.iter().enumerate().skip(from) {
                match t.text {
                    "(" | "[" | "{" if t.kind == Kind::Punct => d += 1,
                    ")" | "]" | "}" if t.kind == Kind::Punct => {
                        if d == 0 {
                            return None;
                        }
                        d -= 1;
                    }
                    ";" if d == 0 && t.kind == Kind::Punct => return Some(j),
                    _ => {}
                }
            }
            None
        };
        if first.kind != Kind::Id {
            continue;
        }
        if first.text == "return" {
            let end = end_of(a)?;
            let (e0, _) = body.next(a + 1)?;
            handled.insert(e0);
            body.stmts.insert(
                a,
                Stmt::Return {
                    expr: (e0, end),
                    end,
                },
            );
            continue;
        }
        if KEYWORDS.contains(&first.text) && first.text != "struct" {
            continue;
        }
        // A call statement `fK(args);` of a member.
        if let Some(k) = function_number(first.text).filter(|k| members.contains(k)) {
            let (o, p) = body.next(a + 1)?;
            if p.text != "(" {
                return None;
            }
            let c = matching[o];
            let (e, semi) = body.next(c + 1)?;
            if semi.text != ";" {
                return None;
            }
            let args = split_args(&body.toks, o, c);
            handled.insert(a);
            body.stmts.insert(
                a,
                Stmt::Call {
                    callee: k,
                    at: (a, c),
                    args,
                    into: None,
                    end: e,
                },
            );
            resume_points.push(e);
            continue;
        }
        // A declaration: a type (one identifier, or `struct` and one) and a declarator name.
        let (ty_end, ty) = if first.text == "struct" {
            let (b, tag) = body.next(a + 1)?;
            (b + 1, format!("struct {}", tag.text))
        } else {
            (a + 1, first.text.to_string())
        };
        let Some((nm, name)) = body.next(ty_end) else {
            continue;
        };
        if name.kind != Kind::Id || KEYWORDS.contains(&name.text) {
            continue;
        }
        let end = end_of(a)?;
        // The declarators: NAME [= INIT] separated by top-level commas.
        let mut ds = Vec::new();
        let mut j = nm;
        loop {
            let (jn, nt) = body.next(j)?;
            if nt.kind != Kind::Id {
                return None;
            }
            let (after, at) = body.next(jn + 1)?;
            match at.text {
                "=" => {
                    let from = after + 1;
                    let mut d = 0i32;
                    let mut k = from;
                    while k < end {
                        let t = body.toks[k];
                        match t.text {
                            "(" | "[" | "{" if t.kind == Kind::Punct => d += 1,
                            ")" | "]" | "}" if t.kind == Kind::Punct => d -= 1,
                            "," if d == 0 && t.kind == Kind::Punct => break,
                            _ => {}
                        }
                        k += 1;
                    }
                    ds.push((nt.text.to_string(), Some((from, k))));
                    if k >= end {
                        break;
                    }
                    j = k + 1;
                }
                ";" => {
                    ds.push((nt.text.to_string(), None));
                    break;
                }
                "," => {
                    ds.push((nt.text.to_string(), None));
                    j = after + 1;
                }
                // An array declarator (`V c[] = {...}`): kept only if it can stay a C local.
                "[" => {
                    ds.push((format!("[{}", nt.text), None));
                    break;
                }
                _ => return None,
            }
        }
        // A call of a member as the initializer: a resume point.
        if let [(name, Some((from, to)))] = ds.as_slice() {
            if let Some((f, ft)) = body.next(*from) {
                if let Some(k) = function_number(ft.text).filter(|k| members.contains(k)) {
                    let (o, p) = body.next(f + 1)?;
                    let c = matching[o];
                    if p.text != "(" || body.next(c + 1)?.0 != *to {
                        return None;
                    }
                    let args = split_args(&body.toks, o, c);
                    handled.insert(f);
                    body.fields.push((ty.clone(), name.clone()));
                    body.stmts.insert(
                        a,
                        Stmt::Call {
                            callee: k,
                            at: (f, c),
                            args,
                            into: Some(name.clone()),
                            end,
                        },
                    );
                    resume_points.push(end);
                    continue;
                }
            }
        }
        body.stmts.insert(a, Stmt::Decl { ty, decls: ds, end });
        decls.push((a, scope));
    }
    // Any other call of a member is a shape this pass does not know.
    for (i, t) in body.toks.iter().enumerate() {
        // (`t.f12` is a result struct's field, not a call.)
        if t.kind == Kind::Id
            && function_number(t.text).is_some_and(|k| members.contains(&k))
            && body.next(i + 1).is_some_and(|(_, n)| n.text == "(")
            && !body.prev(i).is_some_and(|p| matches!(p.text, "." | "->"))
            && !handled.contains(&i)
        {
            return None;
        }
    }
    // A declaration lives in the frame when its variable may be used after a resume point in
    // its scope: named after it (in the scope), or named anywhere in a loop (header included)
    // whose body holds the resume point and which the declaration precedes or heads. (The members' bodies share the machine's
    // C function, so a C local does not survive a call: the callee's body may reuse it.)
    let mut uses: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, t) in body.toks.iter().enumerate() {
        if t.kind == Kind::Id && !body.prev(i).is_some_and(|p| matches!(p.text, "." | "->")) {
            uses.entry(t.text).or_default().push(i);
        }
    }
    let mut loops = Vec::new();
    for (i, t) in body.toks.iter().enumerate() {
        if t.kind == Kind::Id && t.text == "for" {
            let (o, _) = body.next(i + 1)?;
            let (b, brace) = body.next(matching[o] + 1)?;
            if brace.text != "{" {
                return None;
            }
            loops.push((i, b, matching[b]));
        }
    }
    let live = |name: &str, a: usize, scope: usize| -> bool {
        let us = uses.get(name).map_or(&[][..], Vec::as_slice);
        resume_points.iter().any(|&r| {
            r > a
                && r < scope
                && (us.iter().any(|&u| u > r && u < scope)
                    || loops.iter().any(|&(ls, lb, le)| {
                        a < lb && lb < r && r < le && us.iter().any(|&u| ls <= u && u < le)
                    }))
        })
    };
    let mut keep_local: HashSet<String> = HashSet::new();
    let mut frame: HashMap<String, String> = body
        .fields
        .iter()
        .map(|(t, n)| (n.clone(), t.clone()))
        .collect();
    let mut in_frame = HashSet::new();
    for (a, scope) in decls {
        let Some(Stmt::Decl { ty, decls, .. }) = body.stmts.get(&a) else {
            continue;
        };
        let live = decls
            .iter()
            .any(|(n, _)| live(n.trim_start_matches('['), a, scope));
        for (name, _) in decls {
            if live {
                if name.starts_with('[') {
                    return None;
                }
                match frame.get(name) {
                    Some(t) if t != ty => return None,
                    Some(_) => {}
                    None => {
                        frame.insert(name.clone(), ty.clone());
                        body.fields.push((ty.clone(), name.clone()));
                    }
                }
            } else {
                keep_local.insert(name.trim_start_matches('[').to_string());
            }
        }
        if live {
            in_frame.insert(a);
        }
    }
    if keep_local.iter().any(|n| frame.contains_key(n)) {
        return None;
    }
    // Declarations kept as C locals are not rewritten.
    body.stmts
        .retain(|a, s| !matches!(s, Stmt::Decl { .. }) || in_frame.contains(a));
    Some(body)
}

/// The token ranges of the arguments between the parentheses at `o` and `c`.
fn split_args(toks: &[Tok], o: usize, c: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut d = 0i32;
    let mut from = o + 1;
    for (j, t) in toks.iter().enumerate().take(c).skip(o + 1) {
        match t.text {
            "(" | "[" | "{" if t.kind == Kind::Punct => d += 1,
            ")" | "]" | "}" if t.kind == Kind::Punct => d -= 1,
            "," if d == 0 && t.kind == Kind::Punct => {
                out.push((from, j));
                from = j + 1;
            }
            _ => {}
        }
    }
    if toks[o + 1..c].iter().any(|t| t.kind != Kind::Space) {
        out.push((from, c));
    }
    out
}

/// A member: its position in `funs`, number, signature and analysed body.
struct Member<'a> {
    index: usize,
    k: usize,
    sig: Sig,
    body: Body<'a>,
}

/// The machine of component `scc` (indices into `funs`), numbered `m`.
fn machine(
    funs: &[Function],
    scc: &[usize],
    members: &HashSet<usize>,
    m: usize,
) -> Option<Machine> {
    let mut ms = Vec::new();
    for &i in scc {
        let f = &funs[i];
        let k = f.number;
        let sig = signature(&f.signature, k)?;
        let body = analyse(&f.text[body_range(&f.text)?], &sig.params, members)?;
        ms.push(Member {
            index: i,
            k,
            sig,
            body,
        });
    }
    let slot: HashMap<usize, usize> = ms.iter().enumerate().map(|(j, m)| (m.k, j)).collect();
    let mut structs = String::new();
    for mb in &ms {
        let k = mb.k;
        let _ = write!(structs, "struct vl_fr{k} {{ vl_frame h;");
        for (t, n) in &mb.body.fields {
            let _ = write!(structs, " {t} {n};");
        }
        structs.push_str(" };\n");
        if !mb.sig.params.is_empty() {
            let _ = write!(structs, "struct vl_ar{k} {{");
            for (t, n) in &mb.sig.params {
                let _ = write!(structs, " {t} {n};");
            }
            structs.push_str(" };\n");
        }
    }
    let mut text =
        format!("void f{m}(int vl_fn, void *vl_args, void *vl_ret) {{\n  vl_frame *vl_h = 0;\n");
    for mb in &ms {
        let k = mb.k;
        let _ = writeln!(text, "  struct vl_fr{k} *vl_F{k} = 0;");
    }
    text.push_str("  switch (vl_fn) {\n");
    for (j, mb) in ms.iter().enumerate() {
        let k = mb.k;
        let _ = write!(
            text,
            "  case {j}: {{ struct vl_fr{k} *vl_c = (struct vl_fr{k} *)vl_push(sizeof(struct vl_fr{k})); vl_c->h.fn = {j}; vl_c->h.pc = 0; vl_c->h.ret = vl_ret; vl_c->h.prev = 0;"
        );
        if !mb.sig.params.is_empty() {
            let _ = write!(text, " struct vl_ar{k} *vl_a = (struct vl_ar{k} *)vl_args;");
            for (_, n) in &mb.sig.params {
                let _ = write!(text, " vl_c->{n} = vl_a->{n};");
            }
        }
        text.push_str(" vl_h = &vl_c->h; break; }\n");
    }
    text.push_str(
        "  default: (void)vl_args; vl_fail_internal(\"a machine entered at no member\");\n  }\n",
    );
    let mut bodies = String::new();
    let mut resumes: Vec<Vec<usize>> = vec![Vec::new(); ms.len()];
    for (j, mb) in ms.iter().enumerate() {
        let k = mb.k;
        // A block of its own: the members' C locals (`vl_entry`, say) share names.
        let _ = writeln!(bodies, "  {{\nvl_L{k}_0: ;");
        let mut e = Emit {
            mb,
            fields: mb.body.fields.iter().map(|(_, n)| n.as_str()).collect(),
            ms: &ms,
            slot: &slot,
            out: String::new(),
            resumes: 0,
        };
        e.statements()?;
        resumes[j] = (1..=e.resumes).collect();
        bodies.push_str(&e.out);
        bodies.push_str("\n  goto vl_pop;\n  }\n");
    }
    text.push_str("vl_run:\n  switch (vl_h->fn) {\n");
    for (j, mb) in ms.iter().enumerate() {
        let k = mb.k;
        let _ = write!(
            text,
            "  case {j}: vl_F{k} = (struct vl_fr{k} *)vl_h; switch (vl_h->pc) {{ case 0: goto vl_L{k}_0;"
        );
        for r in &resumes[j] {
            let _ = write!(text, " case {r}: goto vl_L{k}_{r};");
        }
        text.push_str(" } break;\n");
    }
    text.push_str(
        "  }\n  vl_fail_internal(\"a frame of the explicit stack is corrupt\");\n  return;\n\
         vl_pop: { vl_frame *vl_p = vl_h->prev; vl_xs_top = (char *)vl_h; if (!vl_p) return; vl_h = vl_p; goto vl_run; }\n",
    );
    text.push_str(&bodies);
    text.push_str("}\n\n");
    // A call between members in the native code goes to the machine, through an entry
    // function of the callee, once the C stack is deep. The test is at the calls, not at the
    // members' entries: only a non-tail call grows the stack, and a test in every member
    // (a loop's head, a leaf) cost 10-15 % of saddle-RF's time.
    let mut entries = Vec::new();
    // Numbered in the members' order (the statements are in a hash map: its order would make
    // the C differ from one run to the next).
    let called: HashSet<usize> = ms
        .iter()
        .flat_map(|mb| mb.body.stmts.values())
        .filter_map(|st| match st {
            Stmt::Call { callee, .. } => Some(*callee),
            _ => None,
        })
        .collect();
    let mut entry_of = HashMap::new();
    for mb in ms.iter().filter(|mb| called.contains(&mb.k)) {
        entry_of.insert(mb.k, m + 1 + entry_of.len());
    }
    for (j, mb) in ms.iter().enumerate() {
        let Some(&h) = entry_of.get(&mb.k) else {
            continue;
        };
        let k = mb.k;
        // The member's own signature, renamed.
        let definition = mb
            .sig
            .text
            .replacen(&format!(" f{k}("), &format!(" f{h}("), 1);
        let mut text = format!("{definition} {{\n  ");
        let args = if mb.sig.params.is_empty() {
            "0".to_string()
        } else {
            let names: Vec<&str> = mb.sig.params.iter().map(|(_, n)| n.as_str()).collect();
            let _ = write!(text, "struct vl_ar{k} vl_a = {{{}}};\n  ", names.join(", "));
            "&vl_a".to_string()
        };
        if mb.sig.ret == "void" {
            let _ = write!(text, "f{m}({j}, {args}, 0);\n}}\n\n");
        } else {
            let _ = write!(
                text,
                "{} vl_r;\n  f{m}({j}, {args}, &vl_r);\n  return vl_r;\n}}\n\n",
                mb.sig.ret
            );
        }
        entries.push(Function {
            number: h,
            signature: format!("VL_COLD {definition}"),
            text,
        });
    }
    let natives = ms
        .iter()
        .filter(|mb| {
            mb.body
                .stmts
                .values()
                .any(|s| matches!(s, Stmt::Call { .. }))
        })
        .map(|mb| (mb.index, native_with_tests(mb, &entry_of)))
        .collect();
    Some(Machine {
        function: Function {
            number: m,
            // Cold: optimised for size, and no inlining into it at the expense of the native
            // code (`VL_COLD` in the runtime; the definition's line has no attribute).
            signature: format!("VL_COLD void f{m}(int vl_fn, void *vl_args, void *vl_ret)"),
            text,
        },
        structs,
        entries,
        natives,
    })
}

/// A member's native text with each call of a member tested: `fK(args)` becomes
/// `VL_DEEP() ? fE(args) : fK(args)`, `fE` the callee's entry to the machine.
fn native_with_tests(mb: &Member, entry_of: &HashMap<usize, usize>) -> String {
    let body = &mb.body;
    let mut out = String::new();
    let mut i = 0;
    while i < body.toks.len() {
        let Some(Stmt::Call {
            callee,
            at: (f, c),
            into,
            end,
            ..
        }) = body.stmts.get(&i)
        else {
            out.push_str(body.toks[i].text);
            i += 1;
            continue;
        };
        let head: String = body.toks[i..*f].iter().map(|t| t.text).collect();
        // `(...)`, the parentheses included.
        let args: String = body.toks[f + 1..=*c].iter().map(|t| t.text).collect();
        let e = entry_of[callee];
        if into.is_some() {
            let _ = write!(out, "{head}VL_DEEP() ? f{e}{args} : f{callee}{args};");
        } else {
            let _ = write!(
                out,
                "{{ if (VL_DEEP()) f{e}{args}; else f{callee}{args}; }}"
            );
        }
        i = end + 1;
    }
    out
}

/// Writes a member's body for its machine.
struct Emit<'a, 'b> {
    mb: &'a Member<'b>,
    /// The names of the member's frame variables.
    fields: HashSet<&'a str>,
    ms: &'a [Member<'b>],
    slot: &'a HashMap<usize, usize>,
    out: String,
    resumes: usize,
}

impl Emit<'_, '_> {
    fn statements(&mut self) -> Option<()> {
        let body = &self.mb.body;
        let mut i = 0;
        while i < body.toks.len() {
            let Some(s) = body.stmts.get(&i) else {
                let t = self.token(i);
                self.out.push_str(&t);
                i += 1;
                continue;
            };
            i = match s {
                Stmt::Decl { decls, end, .. } => {
                    let parts: Vec<String> = decls
                        .iter()
                        .filter_map(|(n, init)| {
                            init.map(|(a, b)| {
                                format!("vl_F{}->{n} = {}", self.mb.k, self.range(a, b))
                            })
                        })
                        .collect();
                    self.out.push_str(&parts.join(", "));
                    self.out.push(';');
                    end + 1
                }
                Stmt::Call {
                    callee,
                    args,
                    into,
                    end,
                    ..
                } => {
                    let ret = into
                        .as_ref()
                        .map_or("0".to_string(), |n| format!("&vl_F{}->{n}", self.mb.k));
                    self.call(*callee, args, &ret)?;
                    end + 1
                }
                Stmt::Return { expr, end } => {
                    self.ret(*expr)?;
                    end + 1
                }
            };
        }
        Some(())
    }

    /// Token `i`, a frame variable renamed.
    fn token(&self, i: usize) -> String {
        let body = &self.mb.body;
        let t = body.toks[i];
        let member_access = body.prev(i).is_some_and(|p| matches!(p.text, "." | "->"));
        if t.kind == Kind::Id && !member_access && self.fields.contains(t.text) {
            format!("vl_F{}->{}", self.mb.k, t.text)
        } else {
            t.text.to_string()
        }
    }

    fn range(&self, a: usize, b: usize) -> String {
        (a..b)
            .map(|i| self.token(i))
            .collect::<String>()
            .trim()
            .to_string()
    }

    /// A call of member `callee` (not a tail call): push its frame and run it; the result
    /// goes to `ret` (a C pointer expression).
    fn call(&mut self, callee: usize, args: &[(usize, usize)], ret: &str) -> Option<()> {
        let j = *self.slot.get(&callee)?;
        let g = &self.ms[j];
        if g.sig.params.len() != args.len() {
            return None;
        }
        self.resumes += 1;
        let (k, pc) = (self.mb.k, self.resumes);
        let mut s = format!(
            "{{ struct vl_fr{callee} *vl_c = (struct vl_fr{callee} *)vl_push(sizeof(struct vl_fr{callee})); vl_c->h.fn = {j}; vl_c->h.pc = 0; vl_c->h.ret = {ret}; vl_c->h.prev = vl_h;"
        );
        for ((_, n), &(a, b)) in g.sig.params.iter().zip(args) {
            let _ = write!(s, " vl_c->{n} = {};", self.range(a, b));
        }
        let _ = write!(
            s,
            " vl_h->pc = {pc}; vl_h = &vl_c->h; goto vl_run; vl_L{k}_{pc}: ; }}"
        );
        self.out.push_str(&s);
        Some(())
    }

    /// `return EXPR;`: a tail call of a member replaces the frame; anything else stores the
    /// value where the caller wants it and pops the frame.
    fn ret(&mut self, (a, b): (usize, usize)) -> Option<()> {
        let body = &self.mb.body;
        let toks: Vec<usize> = (a..b)
            .filter(|&i| body.toks[i].kind != Kind::Space)
            .collect();
        if toks.is_empty() {
            self.out.push_str("{ goto vl_pop; }");
            return Some(());
        }
        let first = body.toks[toks[0]];
        if let Some(g) = function_number(first.text).filter(|g| self.slot.contains_key(g)) {
            // `return fG(args);`: the parentheses must close the expression.
            let o = *toks.get(1)?;
            if body.toks[o].text != "(" || body.toks[*toks.last()?].text != ")" {
                return None;
            }
            let c = *toks.last()?;
            let args = split_args(&body.toks, o, c);
            let j = self.slot[&g];
            let callee = &self.ms[j];
            if callee.sig.params.len() != args.len() || callee.sig.ret != self.mb.sig.ret {
                return None;
            }
            let mut s = String::from("{ ");
            for (n, ((t, _), &(x, y))) in callee.sig.params.iter().zip(&args).enumerate() {
                let _ = write!(s, "{t} vl_x{n} = {}; ", self.range(x, y));
            }
            let _ = write!(
                s,
                "void *vl_rt = vl_h->ret; vl_frame *vl_pv = vl_h->prev; vl_xs_top = (char *)vl_h; struct vl_fr{g} *vl_c = (struct vl_fr{g} *)vl_push(sizeof(struct vl_fr{g})); vl_c->h.fn = {j}; vl_c->h.pc = 0; vl_c->h.ret = vl_rt; vl_c->h.prev = vl_pv;"
            );
            for (n, (_, p)) in callee.sig.params.iter().enumerate() {
                let _ = write!(s, " vl_c->{p} = vl_x{n};");
            }
            s.push_str(" vl_h = &vl_c->h; goto vl_run; }");
            self.out.push_str(&s);
            return Some(());
        }
        let rt = &self.mb.sig.ret;
        if rt == "void" {
            return None;
        }
        let _ = write!(
            self.out,
            "{{ {rt} vl_rv = {}; if (vl_h->ret) *({rt} *)vl_h->ret = vl_rv; goto vl_pop; }}",
            self.range(a, b)
        );
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_are_found_with_their_cycles() {
        // 0 -> 1 -> 2 -> 1, 3 -> 3, 4 alone.
        let calls = vec![vec![1], vec![2], vec![1], vec![3], vec![]];
        let mut cs = components(&calls);
        cs.sort();
        assert_eq!(cs, vec![vec![0], vec![1, 2], vec![3], vec![4]]);
    }

    fn fun(k: usize, sig: &str, body: &str) -> Function {
        Function {
            number: k,
            signature: sig.to_string(),
            text: format!("{sig} {{\n{body}}}\n\n"),
        }
    }

    #[test]
    fn a_non_tail_recursive_function_gets_a_machine() {
        let mut funs = vec![fun(
            3,
            "double f3(double a0, long a1)",
            "  if (a1) {\n    double t1 = f3(a0, a1 - 1);\n    double t2 = t1 * a0;\n    return t2;\n  } else {\n    return a0;\n  }\n",
        )];
        let (structs, n) = add_machines(&mut funs, 10);
        assert_eq!(n, 1);
        assert!(
            structs.contains("struct vl_fr3 { vl_frame h; double a0; long a1; double t1; };"),
            "{structs}"
        );
        let m = &funs[1].text;
        assert!(
            m.contains("vl_c->a0 = vl_F3->a0; vl_c->a1 = vl_F3->a1 - 1;"),
            "{m}"
        );
        assert!(m.contains("vl_c->h.ret = &vl_F3->t1;"), "{m}");
        // t2 is declared after the only resume point: it stays a C local.
        assert!(m.contains("double t2 = vl_F3->t1 * vl_F3->a0;"), "{m}");
        // The native call is tested, and goes to the machine through f3's entry, f11.
        assert!(
            funs[0]
                .text
                .contains("double t1 = VL_DEEP() ? f11(a0, a1 - 1) : f3(a0, a1 - 1);"),
            "{}",
            funs[0].text
        );
        assert_eq!(
            funs[2].text,
            "double f11(double a0, long a1) {\n  struct vl_ar3 vl_a = {a0, a1};\n  \
             double vl_r;\n  f10(0, &vl_a, &vl_r);\n  return vl_r;\n}\n\n"
        );
    }

    #[test]
    fn only_variables_used_after_a_call_live_in_the_frame() {
        let mut funs = vec![fun(
            4,
            "double f4(double a0)",
            "  double t1 = a0 * 2;\n  double t2 = t1 + 1;\n  double t3 = t2 * t2;\n  \
             for (long i4 = 0; i4 < 3; i4++) {\n    double t5 = f4(t1);\n    t3 = t3 + t5;\n  }\n  \
             return t3;\n",
        )];
        let (structs, n) = add_machines(&mut funs, 10);
        assert_eq!(n, 1);
        // t1 is read in the loop that holds the call, t3 after it, i4 is the loop's counter and
        // t5 receives the result; t2 is dead by the call.
        assert!(
            structs.contains(
                "struct vl_fr4 { vl_frame h; double a0; double t5; double t1; double t3; long i4; };"
            ),
            "{structs}"
        );
        assert!(
            funs[1].text.contains("double t2 = vl_F4->t1 + 1;"),
            "{}",
            funs[1].text
        );
    }

    #[test]
    fn a_result_field_named_like_a_member_is_not_a_call() {
        let mut funs = vec![fun(
            3,
            "struct r_dddd f3(double a0)",
            "  struct r_dddd t1 = f3(a0);\n  return (struct r_dddd){t1.f3, t1.f2, t1.f1, t1.f0};\n",
        )];
        assert_eq!(add_machines(&mut funs, 10).1, 1);
        assert!(
            funs[1].text.contains("vl_F3->t1.f3, vl_F3->t1.f2"),
            "{}",
            funs[1].text
        );
    }

    /// Two mutually recursive members, each with a C local of the same name that stays a C
    /// local (`vl_entry`, dead by the call), compiled by the C compiler with the runtime and
    /// run 10^5 deep, in their machine only and with their native code in a 64 KiB stack.
    #[test]
    fn a_machine_compiles_and_runs_deep() {
        let body = |other: usize| {
            format!(
                "  vl_mark_t vl_entry = vl_mark();\n  vl_release(vl_entry);\n  if (a0 > 0) {{\n    \
                 double t1 = f{other}(a0 - 1);\n    return t1 + 1;\n  }}\n  return a0;\n"
            )
        };
        let mut funs = vec![
            fun(1, "double f1(double a0)", &body(2)),
            fun(2, "double f2(double a0)", &body(1)),
        ];
        let (frames, n) = add_machines(&mut funs, 3);
        assert_eq!(n, 1);
        let program = crate::units::CProgram {
            head: format!(
                "{}static const char *vl_prim_names[] = {{\"\"}};\n\
                 static const vl_site_t vl_sites[] = {{{{\"\", \"\"}}}};\n",
                crate::RUNTIME
            ),
            code_slots: "VL_SHARED const char *vl_code_slots[1] = {0};\n".into(),
            structs: frames,
            constants: String::new(),
            funs,
            entry: "static void vl_program(void) { printf(\"%g\\n\", f1(100000)); }\n".into(),
        };
        let dir = std::env::temp_dir().join(format!("vlad-machine-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let (c, exe) = (dir.join("m.c"), dir.join("m"));
        std::fs::write(&c, program.single()).expect("write the C");
        let cc = std::process::Command::new("cc")
            .args(["-O1", "-w", "-std=gnu99", "-o"])
            .arg(&exe)
            .arg(&c)
            .args(["-lm", "-lpthread"])
            .output()
            .expect("run cc");
        assert!(
            cc.status.success(),
            "{}",
            String::from_utf8_lossy(&cc.stderr)
        );
        for env in [
            ("VLAD_NATIVE_DEPTH_BYTES", "0"),
            ("VLAD_STACK_BYTES", "65536"),
        ] {
            let run = std::process::Command::new(&exe)
                .env(env.0, env.1)
                .output()
                .expect("run the program");
            assert_eq!(
                String::from_utf8_lossy(&run.stdout),
                "100000\n",
                "{env:?}: {run:?}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn tail_recursion_alone_gets_no_machine() {
        let mut funs = vec![fun(
            1,
            "double f1(double a0)",
            "  if (a0 > 1) {\n    return f1(a0 - 1);\n  }\n  return a0;\n",
        )];
        assert_eq!(add_machines(&mut funs, 5).1, 0);
        assert_eq!(funs.len(), 1);
    }

    #[test]
    fn a_call_in_an_unknown_shape_leaves_the_component_native() {
        let mut funs = vec![fun(
            1,
            "double f1(double a0)",
            "  double t1 = 2 * f1(a0 - 1);\n  return t1;\n",
        )];
        assert_eq!(add_machines(&mut funs, 5).1, 0);
    }
}
