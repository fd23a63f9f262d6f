//! Whole programs: loading files (with `include`), pairing `expr ===> expected` assertions, and
//! building one closed Core expression per top-level expression.
//!
//! Top-level semantics (DESIGN.md): every non-definition form is evaluated inside a `letrec` of
//! all definitions so far. Definitions of values that are not procedures are allowed too; the
//! definitions are ordered by their dependencies (strongly connected components, ties in source
//! order), procedures of one component share a `letrec`, and a value definition is a `let`
//! around the forms that need it.

use crate::expand::Expander;
use crate::reader::{read, Sexp, SexpKind};
use crate::{Diagnostic, SourceMap};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use vlad_core::{Arena, Expr, ExprId, Pattern, Span, Var};

/// A top-level form after include splicing.
#[derive(Debug, Clone)]
pub enum TopForm {
    Define(Sexp),
    Expr { form: Sexp, expected: Option<Sexp> },
}

/// Reads `path` and every file it includes, in order.
pub fn load(
    sources: &mut SourceMap,
    path: &Path,
    include_dirs: &[PathBuf],
) -> Result<Vec<TopForm>, Diagnostic> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Diagnostic::new(Span::NONE, format!("cannot read {}: {e}", path.display())))?;
    let mut out = Vec::new();
    let mut active = Includes {
        stack: vec![canonical(path)],
        done: vec![],
    };
    load_text(sources, path, text, include_dirs, &mut out, &mut active)?;
    Ok(out)
}

/// Like [`load`] for text that is not in a file (`path` names it in messages).
pub fn load_str(
    sources: &mut SourceMap,
    path: &Path,
    text: &str,
    include_dirs: &[PathBuf],
) -> Result<Vec<TopForm>, Diagnostic> {
    let mut out = Vec::new();
    let mut active = Includes {
        stack: vec![canonical(path)],
        done: vec![],
    };
    load_text(
        sources,
        path,
        text.to_string(),
        include_dirs,
        &mut out,
        &mut active,
    )?;
    Ok(out)
}

/// The files being included (to reject cycles) and those already spliced (to splice once).
struct Includes {
    stack: Vec<PathBuf>,
    done: Vec<PathBuf>,
}

fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

fn load_text(
    sources: &mut SourceMap,
    path: &Path,
    text: String,
    include_dirs: &[PathBuf],
    out: &mut Vec<TopForm>,
    active: &mut Includes,
) -> Result<(), Diagnostic> {
    let file = sources.add(path.display().to_string(), text);
    let forms = read(file, &sources.file(file).expect("just added").text.clone())?;
    let mut i = 0;
    while i < forms.len() {
        let f = &forms[i];
        if f.symbol() == Some("===>") {
            return Err(Diagnostic::new(f.span, "`===>` must follow an expression"));
        }
        if f.is_form("include") {
            include(sources, path, f, include_dirs, out, active)?;
            i += 1;
            continue;
        }
        if f.is_form("define") {
            out.push(TopForm::Define(f.clone()));
            i += 1;
            continue;
        }
        let expected = if forms.get(i + 1).and_then(|s| s.symbol()) == Some("===>") {
            let Some(e) = forms.get(i + 2) else {
                return Err(Diagnostic::new(
                    forms[i + 1].span,
                    "`===>` needs an expected value after it",
                ));
            };
            Some(e.clone())
        } else {
            None
        };
        let step = if expected.is_some() { 3 } else { 1 };
        let form = if f.is_form("multiform") {
            splice_includes(sources, path, f, include_dirs, active)?
        } else {
            f.clone()
        };
        out.push(TopForm::Expr { form, expected });
        i += step;
    }
    Ok(())
}

/// Splices the forms of the file that `(include "name")` (the form `f`, in the file `path`)
/// names into `out`, unless this program has spliced it already (`active.done`).
fn include(
    sources: &mut SourceMap,
    path: &Path,
    f: &Sexp,
    include_dirs: &[PathBuf],
    out: &mut Vec<TopForm>,
    active: &mut Includes,
) -> Result<(), Diagnostic> {
    let items = f.list().expect("form");
    let name = match items {
        [_, Sexp {
            kind: SexpKind::Str(s),
            ..
        }] => s.clone(),
        _ => {
            return Err(Diagnostic::new(
                f.span,
                "`include` takes one string: (include \"name\")",
            ))
        }
    };
    let found = find_include(path, &name, include_dirs)
        .ok_or_else(|| Diagnostic::new(f.span, format!("cannot find included file \"{name}\" (tried {name}.vlad in the including file's directory, the current directory and the -I directories)")))?;
    let key = canonical(&found);
    if active.stack.contains(&key) {
        return Err(Diagnostic::new(
            f.span,
            format!("\"{name}\" includes itself"),
        ));
    }
    // A file is spliced once per program: including a library twice (directly and through
    // another library) does not define its names twice.
    if active.done.contains(&key) {
        return Ok(());
    }
    active.done.push(key.clone());
    let text = std::fs::read_to_string(&found)
        .map_err(|e| Diagnostic::new(f.span, format!("cannot read {}: {e}", found.display())))?;
    active.stack.push(key);
    load_text(sources, &found, text, include_dirs, out, active)?;
    active.stack.pop();
    Ok(())
}

/// `(multiform form ... expr)` with each `(include "name")` among its forms replaced by the
/// definitions of that file, as the reference implementation's tests write it: `(multiform
/// (include "math") (f 3))`. The definitions are the test's own, like its other definitions;
/// the file is spliced whether or not the program included it already, since what an earlier
/// `multiform` included is not visible here.
fn splice_includes(
    sources: &mut SourceMap,
    path: &Path,
    form: &Sexp,
    include_dirs: &[PathBuf],
    active: &mut Includes,
) -> Result<Sexp, Diagnostic> {
    let items = form.list().expect("a multiform form");
    if !items.iter().any(|x| x.is_form("include")) {
        return Ok(form.clone());
    }
    let mut local = Includes {
        stack: active.stack.clone(),
        done: Vec::new(),
    };
    let mut spliced = Vec::with_capacity(items.len());
    for item in items {
        if !item.is_form("include") {
            spliced.push(item.clone());
            continue;
        }
        let mut forms = Vec::new();
        include(sources, path, item, include_dirs, &mut forms, &mut local)?;
        for f in forms {
            match f {
                TopForm::Define(d) => spliced.push(d),
                TopForm::Expr { form, .. } => {
                    return Err(Diagnostic::new(
                        form.span,
                        "a file included in `multiform` may only define names",
                    ))
                }
            }
        }
    }
    Ok(Sexp {
        kind: SexpKind::List(spliced),
        span: form.span,
    })
}

fn find_include(from: &Path, name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    let here = from.parent().map(|p| p.to_path_buf()).unwrap_or_default();
    let mut bases = vec![here, PathBuf::from(".")];
    bases.extend(dirs.iter().cloned());
    for b in &bases {
        candidates.push(b.join(format!("{name}.vlad")));
        candidates.push(b.join(name));
    }
    candidates.into_iter().find(|c| c.is_file())
}

/// One definition, expanded.
#[derive(Debug, Clone)]
pub struct Def {
    pub name: String,
    pub var: Var,
    pub rhs: ExprId,
    pub span: Span,
}

/// One top-level expression: its closed Core (or the error expanding it) and its assertion.
#[derive(Debug, Clone)]
pub struct TopExpr {
    pub span: Span,
    pub core: Result<ExprId, Diagnostic>,
    pub expected: Option<Sexp>,
}

/// The name a `define` form defines, and where.
fn define_name(form: &Sexp) -> Result<(String, Span), Diagnostic> {
    let items = form.list().expect("define form");
    let mut t = items
        .get(1)
        .ok_or_else(|| Diagnostic::new(form.span, "`define` needs a name"))?;
    loop {
        match &t.kind {
            SexpKind::Symbol(s) => return Ok((s.clone(), t.span)),
            SexpKind::List(parts) if !parts.is_empty() => t = &parts[0],
            _ => {
                return Err(Diagnostic::new(
                    t.span,
                    "`define` needs a name or a `(name parameter ...)` header",
                ))
            }
        }
    }
}

/// Expands a whole program. Definitions that fail to expand are fatal; a top-level expression
/// that fails keeps its error so a conformance check can expect it.
pub fn build(arena: &mut Arena, forms: &[TopForm]) -> Result<Vec<TopExpr>, Diagnostic> {
    let mut ex = Expander::new(arena);
    let mut seen: HashMap<String, Span> = HashMap::new();
    for f in forms {
        if let TopForm::Define(d) = f {
            let (name, span) = define_name(d)?;
            if seen.insert(name.clone(), span).is_some() {
                return Err(Diagnostic::new(
                    span,
                    format!("`{name}` is defined twice at top level"),
                ));
            }
            let v = ex.arena.fresh_var(&name);
            ex.globals.insert(name, v);
        }
    }
    let mut defs: Vec<Def> = Vec::new();
    let mut out = Vec::new();
    for f in forms {
        match f {
            TopForm::Define(d) => {
                let (name, span, rhs) = ex.define(d.list().expect("form"), d.span)?;
                let var = ex.globals[&name];
                defs.push(Def {
                    name,
                    var,
                    rhs,
                    span,
                });
            }
            TopForm::Expr { form, expected } => {
                // An expression sees the definitions made so far: a name defined only later
                // (say, a redefined primitive) still means what it meant here.
                let all = ex.globals.clone();
                ex.globals.retain(|_, v| defs.iter().any(|d| d.var == *v));
                let core = if form.is_form("multiform") {
                    multiform(&mut ex, &defs, form)
                } else {
                    ex.expr(form).and_then(|e| close(&mut ex, &defs, e))
                };
                ex.globals = all;
                out.push(TopExpr {
                    span: form.span,
                    core,
                    expected: expected.clone(),
                });
            }
        }
    }
    Ok(out)
}

/// `(multiform form ... expr)`: definitions local to one test, then its expression.
fn multiform(ex: &mut Expander, defs: &[Def], form: &Sexp) -> Result<ExprId, Diagnostic> {
    let items = &form.list().expect("form")[1..];
    let Some((last, local)) = items.split_last() else {
        return Err(Diagnostic::new(
            form.span,
            "`multiform` needs at least an expression",
        ));
    };
    let saved = ex.globals.clone();
    let result = (|| {
        for d in local {
            if !d.is_form("define") {
                return Err(Diagnostic::new(
                    d.span,
                    "only definitions may precede the last form of `multiform`",
                ));
            }
            let (name, _) = define_name(d)?;
            let v = ex.arena.fresh_var(&name);
            ex.globals.insert(name, v);
        }
        let mut all = defs.to_vec();
        for d in local {
            let (name, span, rhs) = ex.define(d.list().expect("form"), d.span)?;
            let var = ex.globals[&name];
            all.push(Def {
                name,
                var,
                rhs,
                span,
            });
        }
        let e = ex.expr(last)?;
        close(ex, &all, e)
    })();
    ex.globals = saved;
    result
}

/// Wraps `body` in the definitions it may use and checks that nothing is left unbound.
fn close(ex: &mut Expander, defs: &[Def], body: ExprId) -> Result<ExprId, Diagnostic> {
    let wrapped = wrap(ex.arena, defs, body)?;
    let free = ex.arena.free_vars(wrapped);
    if let Some(v) = free.first() {
        let name = ex.arena.var_name(*v).to_string();
        let span = ex.global_refs.get(v).copied().unwrap_or(Span::NONE);
        return Err(Diagnostic::new(
            span,
            format!("unbound variable `{name}` (it is defined later in the file)"),
        ));
    }
    Ok(wrapped)
}

/// Orders definitions by dependency: strongly connected components in a topological order that
/// keeps source order where dependencies allow. Procedures of one component become one `letrec`;
/// a value definition becomes a `let`. A value defined in terms of itself is an error.
fn wrap(arena: &mut Arena, defs: &[Def], body: ExprId) -> Result<ExprId, Diagnostic> {
    let n = defs.len();
    let index: HashMap<Var, usize> = defs.iter().enumerate().map(|(i, d)| (d.var, i)).collect();
    let deps: Vec<Vec<usize>> = defs
        .iter()
        .map(|d| {
            arena
                .free_vars(d.rhs)
                .iter()
                .filter_map(|v| index.get(v).copied())
                .collect()
        })
        .collect();
    let comps = tarjan(n, &deps);
    let mut comp_of = vec![0usize; n];
    for (c, members) in comps.iter().enumerate() {
        for &m in members {
            comp_of[m] = c;
        }
    }
    // Kahn's algorithm over components, always taking the ready one that appears first.
    let nc = comps.len();
    let mut indeg = vec![0usize; nc];
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); nc];
    for (i, ds) in deps.iter().enumerate() {
        for &j in ds {
            let (ci, cj) = (comp_of[i], comp_of[j]);
            if ci != cj && !users[cj].contains(&ci) {
                users[cj].push(ci);
                indeg[ci] += 1;
            }
        }
    }
    let first: Vec<usize> = comps
        .iter()
        .map(|m| *m.iter().min().expect("nonempty"))
        .collect();
    let mut ready: std::collections::BTreeSet<(usize, usize)> = (0..nc)
        .filter(|&c| indeg[c] == 0)
        .map(|c| (first[c], c))
        .collect();
    let mut order = Vec::with_capacity(nc);
    while let Some(&(k, c)) = ready.iter().next() {
        ready.remove(&(k, c));
        order.push(c);
        for &u in &users[c] {
            indeg[u] -= 1;
            if indeg[u] == 0 {
                ready.insert((first[u], u));
            }
        }
    }
    let mut acc = body;
    for &c in order.iter().rev() {
        let mut members = comps[c].clone();
        members.sort();
        let all_lambdas = members
            .iter()
            .all(|&m| matches!(arena.get(defs[m].rhs), Expr::Lambda(..)));
        if all_lambdas {
            let bs: Vec<(Var, ExprId)> = members
                .iter()
                .map(|&m| (defs[m].var, defs[m].rhs))
                .collect();
            acc = arena.mk(Expr::Letrec(bs.into(), acc));
        } else if members.len() == 1 && !deps[members[0]].contains(&members[0]) {
            let d = &defs[members[0]];
            acc = arena.mk(Expr::Let(Rc::new(Pattern::Var(d.var)), d.rhs, acc, d.span));
        } else {
            let d = members
                .iter()
                .map(|&m| &defs[m])
                .find(|d| !matches!(arena.get(d.rhs), Expr::Lambda(..)))
                .expect("a value");
            return Err(Diagnostic::new(
                d.span,
                format!("the value of `{}` depends on itself", d.name),
            ));
        }
    }
    Ok(acc)
}

/// Strongly connected components (iterative Tarjan), callees' components before callers'. Also
/// the C backend's, for the call graph of the generated functions.
pub fn tarjan(n: usize, edges: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on = vec![false; n];
    let mut stack = Vec::new();
    let mut comps = Vec::new();
    let mut next = 0;
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work: Vec<(usize, usize)> = vec![(root, 0)];
        while let Some(&mut (v, ref mut ei)) = work.last_mut() {
            if *ei == 0 && index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on[v] = true;
            }
            if let Some(&w) = edges[v].get(*ei) {
                *ei += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut comp = Vec::new();
                loop {
                    let w = stack.pop().expect("on stack");
                    on[w] = false;
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                comps.push(comp);
            }
        }
    }
    comps
}
