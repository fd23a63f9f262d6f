//! Whole programs: loading files (with `include`), pairing `expr ===> expected` assertions, and
//! building one closed Core expression per top-level expression.
//!
//! Top-level semantics (docs/language.md): every non-definition form is evaluated inside a
//! `letrec` of all definitions so far. Definitions of values that are not procedures are allowed
//! too; the definitions are ordered by their dependencies (strongly connected components, ties in
//! source order), procedures of one component share a `letrec`, and a value definition is a `let`
//! around the forms that need it.
//!
//! A program is built two ways (`build_program`): as one closed expression per top-level
//! expression (what `vlad check` runs, each assertion a program of its own), and as one
//! expression for the whole run (what `vlad run` runs), in which the definitions made between
//! two expressions are bound once, just before the second, and every expression's value is
//! written where it stands: a value definition is evaluated once per run.
//!
//! Names are scoped by file: a file sees its own definitions and those of the files it includes
//! (directly or not), its own shadowing theirs, a later include's shadowing an earlier one's. So
//! a program may define `e` or `sqr` although the standard library does, and the library's own
//! code still means its own.

use crate::expand::Expander;
use crate::reader::{read, Sexp, SexpKind};
use crate::{library, Diagnostic, SourceMap};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use vlad_core::{Arena, Expr, ExprId, Pattern, Span, Var};

/// A top-level form after include splicing.
#[derive(Debug, Clone)]
pub enum TopForm {
    Define(Sexp),
    Expr {
        form: Sexp,
        expected: Option<Sexp>,
    },
    /// `(include ...)` in file `from` of the file `file` (spliced here, or earlier if it was
    /// included before): for the scope of names.
    Include {
        from: u32,
        file: u32,
    },
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
    let mut active = Includes::new(path);
    let file = sources.add(path.display().to_string(), text);
    load_text(
        sources,
        Origin::Disk(path),
        file,
        include_dirs,
        &mut out,
        &mut active,
    )?;
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
    let mut active = Includes::new(path);
    let file = sources.add(path.display().to_string(), text.to_string());
    load_text(
        sources,
        Origin::Disk(path),
        file,
        include_dirs,
        &mut out,
        &mut active,
    )?;
    Ok(out)
}

/// The files being included (to reject cycles) and those already spliced (to splice once),
/// with their file ids.
struct Includes {
    stack: Vec<PathBuf>,
    done: HashMap<PathBuf, u32>,
}

impl Includes {
    fn new(path: &Path) -> Includes {
        Includes {
            stack: vec![canonical(path)],
            done: HashMap::new(),
        }
    }
}

/// Where a file being loaded came from: a path on disk, or the standard library.
#[derive(Clone, Copy)]
enum Origin<'a> {
    Disk(&'a Path),
    Library,
}

/// A file `include` found.
enum Found {
    Disk(PathBuf),
    Library(&'static str, &'static str),
}

impl Found {
    /// The key of the file for "included once" and cycles.
    fn key(&self) -> PathBuf {
        match self {
            Found::Disk(p) => canonical(p),
            Found::Library(name, _) => PathBuf::from(library::path(name)),
        }
    }
}

fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

fn load_text(
    sources: &mut SourceMap,
    origin: Origin<'_>,
    file: u32,
    include_dirs: &[PathBuf],
    out: &mut Vec<TopForm>,
    active: &mut Includes,
) -> Result<(), Diagnostic> {
    let forms = read(file, &sources.file(file).expect("just added").text.clone())?;
    let mut i = 0;
    while i < forms.len() {
        let f = &forms[i];
        if f.symbol() == Some("===>") {
            return Err(Diagnostic::new(f.span, "`===>` must follow an expression"));
        }
        if f.is_form("include") {
            include(sources, origin, file, f, include_dirs, out, active)?;
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
            splice_includes(sources, origin, file, f, include_dirs, active)?
        } else {
            f.clone()
        };
        out.push(TopForm::Expr { form, expected });
        i += step;
    }
    Ok(())
}

/// Splices the forms of the file that `(include "name")` (the form `f`, in the file `file`,
/// which came from `origin`) names into `out` after a `TopForm::Include` marker; a file this
/// program has spliced already (`active.done`) gets the marker alone.
fn include(
    sources: &mut SourceMap,
    origin: Origin<'_>,
    file: u32,
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
    let found = find_include(origin, &name, include_dirs)
        .ok_or_else(|| Diagnostic::new(f.span, format!("cannot find included file \"{name}\" (tried {name}.vlad in the including file's directory, the current directory, the -I directories and the standard library)")))?;
    let key = found.key();
    if active.stack.contains(&key) {
        return Err(Diagnostic::new(
            f.span,
            format!("\"{name}\" includes itself"),
        ));
    }
    // A file is spliced once per program: including a library twice (directly and through
    // another library) does not define its names twice.
    if let Some(&id) = active.done.get(&key) {
        out.push(TopForm::Include {
            from: file,
            file: id,
        });
        return Ok(());
    }
    let (id, next) = match &found {
        Found::Disk(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| {
                Diagnostic::new(f.span, format!("cannot read {}: {e}", p.display()))
            })?;
            (sources.add(p.display().to_string(), text), Origin::Disk(p))
        }
        Found::Library(name, text) => (
            sources.add_library(library::path(name), *text),
            Origin::Library,
        ),
    };
    active.done.insert(key.clone(), id);
    out.push(TopForm::Include {
        from: file,
        file: id,
    });
    active.stack.push(key);
    load_text(sources, next, id, include_dirs, out, active)?;
    active.stack.pop();
    Ok(())
}

/// `(multiform form ... expr)` with each `(include "name")` among its forms replaced by the
/// definitions of that file, as the reference implementation's tests write it: `(multiform
/// (include "math") (f 3))`. The definitions are the test's own, like its other definitions
/// (expanded in the scope of the `multiform`, which is the including file's); the file is
/// spliced whether or not the program included it already, since what an earlier `multiform`
/// included is not visible here.
fn splice_includes(
    sources: &mut SourceMap,
    origin: Origin<'_>,
    file: u32,
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
        done: HashMap::new(),
    };
    let mut spliced = Vec::with_capacity(items.len());
    for item in items {
        if !item.is_form("include") {
            spliced.push(item.clone());
            continue;
        }
        let mut forms = Vec::new();
        include(
            sources,
            origin,
            file,
            item,
            include_dirs,
            &mut forms,
            &mut local,
        )?;
        for f in forms {
            match f {
                TopForm::Define(d) => spliced.push(d),
                // The scope of names is the multiform's: the markers of scoping by file do
                // not apply inside an expression.
                TopForm::Include { .. } => {}
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

/// The file `(include "name")` means, searched in this order: the directory of the including
/// file (the library itself for a library file), the current directory, each `-I` directory,
/// the standard library.
fn find_include(from: Origin<'_>, name: &str, dirs: &[PathBuf]) -> Option<Found> {
    let in_library = || library::find(name).map(|(n, t)| Found::Library(n, t));
    let mut bases = Vec::new();
    match from {
        Origin::Library => {
            if let Some(f) = in_library() {
                return Some(f);
            }
        }
        Origin::Disk(p) => bases.push(p.parent().map(|p| p.to_path_buf()).unwrap_or_default()),
    }
    bases.push(PathBuf::from("."));
    bases.extend(dirs.iter().cloned());
    let on_disk = bases
        .iter()
        .flat_map(|b| [b.join(format!("{name}.vlad")), b.join(name)])
        .find(|c| c.is_file())
        .map(Found::Disk);
    on_disk.or_else(in_library)
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

/// For a definition with a curried header, `(define ((f a b) c) ...)`, the number of
/// parameters of its first level (2 here); `None` otherwise, or for a dotted first level.
pub fn curried_arity(form: &Sexp) -> Option<usize> {
    let header = form.list()?.get(1)?;
    let outer = header.list()?;
    let mut first = outer.first()?;
    if first.symbol().is_some() {
        return None;
    }
    while let Some(parts) = first.list() {
        match parts.first() {
            Some(h) if h.symbol().is_some() => return Some(parts.len() - 1),
            Some(h) => first = h,
            None => return None,
        }
    }
    None
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

/// A whole program, expanded.
#[derive(Debug, Clone)]
pub struct Program {
    /// Each top-level expression as a program of its own: the definitions made before it
    /// (evaluated for it) and the expression (what `vlad check` runs).
    pub exprs: Vec<TopExpr>,
    /// The run of the whole program as one closed expression (what `vlad run` runs): each
    /// group of definitions bound once, just before the expression that follows it (those
    /// after the last expression at the end), each expression's value written (`write`) where
    /// it stands; its own value is `()`, not printed.
    pub run: ExprId,
    /// The error that ends the run after the expressions in `run`: the first top-level
    /// expression that does not expand (or whose definitions are not closed), reported when
    /// the run gets there.
    pub stop: Option<Diagnostic>,
}

/// Expands a whole program (see [`build_program`]); each top-level expression's own program.
pub fn build(arena: &mut Arena, forms: &[TopForm]) -> Result<Vec<TopExpr>, Diagnostic> {
    Ok(build_program(arena, forms)?.exprs)
}

/// One definition form, before expansion: where it is, its name and variable.
struct DefSite {
    /// Index of the form in the program.
    at: usize,
    file: u32,
    name: String,
    var: Var,
}

/// The scope of names, file by file.
#[derive(Default)]
struct Scopes {
    defs: Vec<DefSite>,
    /// Per file, the files it includes, with the index of the include form.
    includes: HashMap<u32, Vec<(usize, u32)>>,
}

impl Scopes {
    /// The top-level names a form of `file` sees when the forms before index `upto` are made:
    /// the file's own definitions over those of the files it includes (a later include over an
    /// earlier one), transitively.
    fn visible(&self, file: u32, upto: usize) -> HashMap<String, Var> {
        let mut memo = HashMap::new();
        self.visible_in(file, upto, &mut memo)
    }

    fn visible_in(
        &self,
        file: u32,
        upto: usize,
        memo: &mut HashMap<u32, HashMap<String, Var>>,
    ) -> HashMap<String, Var> {
        if let Some(m) = memo.get(&file) {
            return m.clone();
        }
        // Includes form no cycles, but a file under construction is empty to itself.
        memo.insert(file, HashMap::new());
        let mut m = HashMap::new();
        for &(at, g) in self.includes.get(&file).into_iter().flatten() {
            if at < upto {
                m.extend(self.visible_in(g, upto, memo));
            }
        }
        for d in &self.defs {
            if d.file == file && d.at < upto {
                m.insert(d.name.clone(), d.var);
            }
        }
        memo.insert(file, m.clone());
        m
    }
}

/// Expands a whole program: every definition (an error in one is fatal), each top-level
/// expression's own program (an expression that fails to expand keeps its error, so that a
/// conformance check can expect it), and the run of the whole program.
pub fn build_program(arena: &mut Arena, forms: &[TopForm]) -> Result<Program, Diagnostic> {
    let mut ex = Expander::new(arena);
    let mut scopes = Scopes {
        defs: Vec::new(),
        includes: HashMap::new(),
    };
    let mut seen: HashMap<(u32, String), Span> = HashMap::new();
    for (at, f) in forms.iter().enumerate() {
        match f {
            TopForm::Define(d) => {
                let (name, span) = define_name(d)?;
                if seen.insert((span.file, name.clone()), span).is_some() {
                    return Err(Diagnostic::new(
                        span,
                        format!("`{name}` is defined twice at top level"),
                    ));
                }
                let var = ex.arena.fresh_var(&name);
                if let Some(n) = curried_arity(d) {
                    ex.curried.insert(var, n);
                }
                scopes.defs.push(DefSite {
                    at,
                    file: span.file,
                    name,
                    var,
                });
            }
            TopForm::Include { from, file } => {
                scopes.includes.entry(*from).or_default().push((at, *file))
            }
            TopForm::Expr { .. } => {}
        }
    }
    let mut defs: Vec<Def> = Vec::new();
    let mut out = Vec::new();
    // The run: the definitions made since the last expression, then each expression.
    let mut steps: Vec<(Vec<Def>, ExprId, Span)> = Vec::new();
    let mut pending: Vec<Def> = Vec::new();
    let mut stop = None;
    let mut site = scopes.defs.iter();
    for (at, f) in forms.iter().enumerate() {
        match f {
            TopForm::Define(d) => {
                let me = site.next().expect("one site per definition");
                // A definition sees every definition of its scope, wherever it stands.
                ex.globals = scopes.visible(me.file, usize::MAX);
                let (name, span, rhs) = ex.define(d.list().expect("form"), d.span)?;
                let def = Def {
                    name,
                    var: me.var,
                    rhs,
                    span,
                };
                defs.push(def.clone());
                pending.push(def);
            }
            TopForm::Include { .. } => {}
            TopForm::Expr { form, expected } => {
                // An expression sees the definitions made so far: a name defined only later
                // (say, a redefined primitive) still means what it meant here.
                ex.globals = scopes.visible(form.span.file, at);
                let expanded = if form.is_form("multiform") {
                    multiform(&mut ex, form)
                } else {
                    ex.expr(form).map(|e| (Vec::new(), e))
                };
                let core = expanded.clone().and_then(|(local, e)| {
                    let mut all = defs.clone();
                    all.extend(local);
                    close(&mut ex, &all, e)
                });
                if stop.is_none() {
                    match (&core, expanded) {
                        (Ok(_), Ok((local, e))) => {
                            // The expression with its own local definitions (a `multiform`'s).
                            let e = wrap(ex.arena, &local, e)?;
                            steps.push((std::mem::take(&mut pending), e, form.span));
                        }
                        (Err(d), _) => stop = Some(d.clone()),
                        (_, Err(d)) => stop = Some(d),
                    }
                }
                out.push(TopExpr {
                    span: form.span,
                    core,
                    expected: expected.clone(),
                });
            }
        }
    }
    // Definitions after the last expression are made at the end of the run, if they are
    // closed; one that is not stops it there.
    let nil = ex
        .arena
        .mk(Expr::Const(vlad_core::Datum::Nil, vlad_core::Tags::EMPTY));
    if stop.is_none() && !pending.is_empty() {
        if let Err(d) = close(&mut ex, &defs, nil) {
            stop = Some(d);
            pending.clear();
        }
    }
    let mut run = wrap(ex.arena, &pending, nil)?;
    for (group, e, span) in steps.into_iter().rev() {
        let w = ex
            .arena
            .mk(Expr::Prim(vlad_core::Prim::Write, vlad_core::Tags::EMPTY));
        let written = ex.arena.mk(Expr::App(w, e, span));
        let ignored = ex.arena.fresh_var("_");
        let step = ex.arena.mk(Expr::Let(
            Rc::new(Pattern::Var(ignored)),
            written,
            run,
            span,
        ));
        run = wrap(ex.arena, &group, step)?;
    }
    Ok(Program {
        exprs: out,
        run,
        stop,
    })
}

/// `(multiform form ... expr)`: definitions local to one test, then its expression; the local
/// definitions and the expression.
fn multiform(ex: &mut Expander, form: &Sexp) -> Result<(Vec<Def>, ExprId), Diagnostic> {
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
        let mut all = Vec::new();
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
        Ok((all, e))
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

pub use vlad_core::graph::tarjan;

/// What a batch of forms added to a [`Unit`]: its definitions, and its top-level expressions
/// (where each is, and its Core, not closed).
pub type Batch = (Vec<Def>, Vec<(Span, ExprId)>);

/// Programs loaded a batch of forms at a time (the REPL's includes): each batch's definitions
/// are expanded in the scope of their own files, which may see the files of earlier batches
/// (never later ones, so what was expanded stays valid).
#[derive(Default)]
pub struct Unit {
    scopes: Scopes,
    /// Forms seen so far (positions in the unit).
    count: usize,
    /// Every definition, expanded.
    pub defs: Vec<Def>,
    /// The curried definitions' first arities (`Expander::curried`).
    pub curried: HashMap<Var, usize>,
}

impl Unit {
    pub fn new() -> Unit {
        Unit::default()
    }

    /// Adds a batch of forms; the new definitions (also in `defs`) and the new top-level
    /// expressions (expanded in their file's scope, not closed).
    pub fn add(&mut self, arena: &mut Arena, forms: &[TopForm]) -> Result<Batch, Diagnostic> {
        let base = self.count;
        let first = self.scopes.defs.len();
        let mut seen: HashMap<(u32, String), Span> = HashMap::new();
        for (i, f) in forms.iter().enumerate() {
            match f {
                TopForm::Define(d) => {
                    let (name, span) = define_name(d)?;
                    let again = self
                        .scopes
                        .defs
                        .iter()
                        .any(|x| x.file == span.file && x.name == name);
                    if again || seen.insert((span.file, name.clone()), span).is_some() {
                        return Err(Diagnostic::new(
                            span,
                            format!("`{name}` is defined twice at top level"),
                        ));
                    }
                    let var = arena.fresh_var(&name);
                    if let Some(n) = curried_arity(d) {
                        self.curried.insert(var, n);
                    }
                    self.scopes.defs.push(DefSite {
                        at: base + i,
                        file: span.file,
                        name,
                        var,
                    });
                }
                TopForm::Include { from, file } => self
                    .scopes
                    .includes
                    .entry(*from)
                    .or_default()
                    .push((base + i, *file)),
                TopForm::Expr { .. } => {}
            }
        }
        self.count += forms.len();
        let mut ex = Expander::new(arena);
        ex.curried = self.curried.clone();
        let mut new_defs = Vec::new();
        let mut exprs = Vec::new();
        let mut site = first;
        for (i, f) in forms.iter().enumerate() {
            match f {
                TopForm::Define(d) => {
                    let (file, var) = (self.scopes.defs[site].file, self.scopes.defs[site].var);
                    site += 1;
                    ex.globals = self.scopes.visible(file, usize::MAX);
                    let (name, span, rhs) = ex.define(d.list().expect("form"), d.span)?;
                    new_defs.push(Def {
                        name,
                        var,
                        rhs,
                        span,
                    });
                }
                TopForm::Expr { form, .. } => {
                    ex.globals = self.scopes.visible(form.span.file, base + i);
                    let e = if form.is_form("multiform") {
                        multiform(&mut ex, form).and_then(|(local, e)| wrap(ex.arena, &local, e))
                    } else {
                        ex.expr(form)
                    }?;
                    exprs.push((form.span, e));
                }
                TopForm::Include { .. } => {}
            }
        }
        self.defs.extend(new_defs.iter().cloned());
        Ok((new_defs, exprs))
    }

    /// The names the code of file `file` sees.
    pub fn visible(&self, file: u32) -> HashMap<String, Var> {
        self.scopes.visible(file, usize::MAX)
    }
}

/// Loads files a piece at a time (the REPL): a file is spliced once per loader, as within one
/// program.
pub struct Loader {
    active: Includes,
}

impl Loader {
    pub fn new() -> Loader {
        Loader {
            active: Includes::new(Path::new("<repl>")),
        }
    }

    /// Reads `text` as a file named `path` (includes searched from the current directory
    /// first); its file id, and its forms with those it includes.
    pub fn load_str(
        &mut self,
        sources: &mut SourceMap,
        path: &str,
        text: &str,
        include_dirs: &[PathBuf],
    ) -> Result<(u32, Vec<TopForm>), Diagnostic> {
        let mut out = Vec::new();
        let file = sources.add(path, text.to_string());
        let here = Path::new("./<repl>");
        load_text(
            sources,
            Origin::Disk(here),
            file,
            include_dirs,
            &mut out,
            &mut self.active,
        )?;
        Ok((file, out))
    }
}

impl Default for Loader {
    fn default() -> Self {
        Loader::new()
    }
}

/// `body` inside the definitions `defs` (procedures in `letrec`s, values in `let`s, ordered by
/// their dependencies); an error for a value that depends on itself.
pub fn wrap_definitions(
    arena: &mut Arena,
    defs: &[Def],
    body: ExprId,
) -> Result<ExprId, Diagnostic> {
    wrap(arena, defs, body)
}
