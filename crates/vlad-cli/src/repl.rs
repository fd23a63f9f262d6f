//! `vlad repl`: read, evaluate and print, with the definitions of the session kept.
//!
//! A session is a program written a form at a time. Procedure definitions are kept as forms
//! and expanded again for every input, so redefining a procedure changes what the session's
//! other procedures call (the last definition of a name wins). A value definition is evaluated
//! once, when it is entered, and its value kept. `(include "name")` loads a file (the standard
//! library included): its definitions keep the scope of their file (docs/language.md), its
//! value definitions are evaluated once and its expressions run. An error is reported and the
//! session goes on.
//!
//! Line editing and history come from `rustyline` when standard input is a terminal; otherwise
//! lines are read as they come (scripts, tests). Either way the history is kept in a file
//! (`--history FILE`, `$VLAD_HISTORY`, else `~/.vlad_history`), and `,history` lists it.

use crate::native;
use std::collections::HashMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;
use vlad_core::{Arena, Datum, Expr, ExprId, Pattern, Span, Tags, Var};
use vlad_eval::value::Value;
use vlad_eval::Evaluator;
use vlad_syntax::program::{wrap_definitions, Def, Loader, TopForm, Unit};
use vlad_syntax::reader::read;
use vlad_syntax::{Diagnostic, Sexp, SourceMap};

const HELP: &str = "\
Enter definitions and expressions; a form may span several lines.
  (define ...)        kept for the rest of the session (a new definition replaces the old)
  (include \"ad\")      load a file or a library (ad, list, array, numeric)
  ,time EXPR          evaluate EXPR and say how long it took
  ,native EXPR        compile the session's definitions and EXPR to native code and run it
  ,history            list the history
  ,help               this text
  ,quit               leave (so does end of input, Ctrl-D)";

/// The lines typed: through `rustyline` at a terminal, plain lines otherwise; the history file.
enum Lines {
    Editor(Box<rustyline::DefaultEditor>),
    Plain(std::io::StdinLock<'static>),
}

struct Input {
    lines: Lines,
    history: Vec<String>,
    history_file: Option<PathBuf>,
}

impl Input {
    fn new(history_file: Option<PathBuf>) -> Input {
        let history: Vec<String> = history_file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .map(|t| {
                t.lines()
                    .filter(|l| !l.starts_with('#'))
                    .map(unescape)
                    .collect()
            })
            .unwrap_or_default();
        let lines = if std::io::stdin().is_terminal() {
            match rustyline::DefaultEditor::new() {
                Ok(mut ed) => {
                    for h in &history {
                        let _ = ed.add_history_entry(h.as_str());
                    }
                    Lines::Editor(Box::new(ed))
                }
                Err(_) => Lines::Plain(std::io::stdin().lock()),
            }
        } else {
            Lines::Plain(std::io::stdin().lock())
        };
        Input {
            lines,
            history,
            history_file,
        }
    }

    /// One line, without its newline; `None` at the end of the input.
    fn line(&mut self, prompt: &str) -> Option<String> {
        match &mut self.lines {
            Lines::Editor(ed) => loop {
                match ed.readline(prompt) {
                    Ok(l) => return Some(l),
                    // Ctrl-C abandons the line, as in a shell.
                    Err(rustyline::error::ReadlineError::Interrupted) => continue,
                    Err(_) => return None,
                }
            },
            Lines::Plain(stdin) => {
                let mut l = String::new();
                match stdin.read_line(&mut l) {
                    Ok(0) | Err(_) => None,
                    Ok(_) => Some(l.trim_end_matches(['\n', '\r']).to_string()),
                }
            }
        }
    }

    /// Records an entry (one whole input, perhaps of several lines) in the history and its
    /// file.
    fn remember(&mut self, entry: &str) {
        if entry.trim().is_empty() || self.history.last().map(String::as_str) == Some(entry) {
            return;
        }
        self.history.push(entry.to_string());
        if let Lines::Editor(ed) = &mut self.lines {
            let _ = ed.add_history_entry(entry);
        }
        if let Some(f) = &self.history_file {
            if let Ok(mut out) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(f)
            {
                let _ = writeln!(out, "{}", escape(entry));
            }
        }
    }
}

/// One history entry per line of the history file: newlines and backslashes escaped.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('\\', Some('n')) => {
                out.push('\n');
                chars.next();
            }
            ('\\', Some('\\')) => {
                out.push('\\');
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

/// `true` if `text` is the start of a form that goes on (an open parenthesis, string or block
/// comment): the REPL reads another line.
fn incomplete(text: &str) -> bool {
    match read(0, text) {
        Ok(_) => false,
        Err(d) => {
            matches!(
                d.message.as_str(),
                "unclosed parenthesis" | "unterminated string" | "unterminated block comment"
            ) || (d.message == "quote without a datum" && text.trim_end().ends_with('\''))
        }
    }
}

/// The history file: `--history`, `$VLAD_HISTORY`, `~/.vlad_history`.
fn history_file(given: Option<PathBuf>) -> Option<PathBuf> {
    given
        .or_else(|| std::env::var_os("VLAD_HISTORY").map(PathBuf::from))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".vlad_history")))
}

/// A value definition of the session, evaluated.
struct Kept {
    var: Var,
    value: Value,
    /// How `,native` defines it again: its value as a quoted datum, or (for a value that is not
    /// data, such as a procedure) its definition's text, evaluated again.
    text: String,
}

struct Session {
    sources: SourceMap,
    ev: Evaluator,
    loader: Loader,
    include: Vec<PathBuf>,
    /// The definitions of included files, each expanded in its file's scope.
    unit: Unit,
    /// The files included at the prompt, in order (their names are the session's).
    roots: Vec<u32>,
    /// The texts `,native` includes them by.
    root_includes: Vec<String>,
    /// Values of value definitions, of included files and of the session, in order.
    values: Vec<Kept>,
    /// The session's value definitions: name -> index in `values`.
    value_names: HashMap<String, usize>,
    /// The session's procedure definitions (their forms), in order.
    procedures: Vec<(String, Sexp)>,
    inputs: usize,
}

/// Runs the REPL until the end of the input; the exit status.
pub fn repl(include: &[PathBuf], history: Option<PathBuf>) -> u8 {
    let mut input = Input::new(history_file(history));
    let interactive = matches!(input.lines, Lines::Editor(_));
    let mut s = Session {
        sources: SourceMap::new(),
        ev: Evaluator::new(Arena::new()),
        loader: Loader::new(),
        include: include.to_vec(),
        unit: Unit::new(),
        roots: Vec::new(),
        root_includes: Vec::new(),
        values: Vec::new(),
        value_names: HashMap::new(),
        procedures: Vec::new(),
        inputs: 0,
    };
    if interactive {
        println!("vlad {} -- ,help for help", env!("CARGO_PKG_VERSION"));
    }
    while let Some(first) = input.line("vlad> ") {
        let mut text = first;
        while incomplete(&text) {
            match input.line("  ... ") {
                Some(more) => {
                    text.push('\n');
                    text.push_str(&more);
                }
                None => break,
            }
        }
        let entry = text.trim();
        if entry.is_empty() {
            continue;
        }
        input.remember(entry);
        match command(entry) {
            Some(("quit" | "q" | "exit", _)) => break,
            Some(("help" | "h", _)) => println!("{HELP}"),
            Some(("history", _)) => {
                for (i, h) in input.history.iter().enumerate() {
                    println!("{:4}  {}", i + 1, h.replace('\n', "\n      "));
                }
            }
            Some(("time", rest)) => {
                let start = Instant::now();
                s.input(rest);
                println!("; {:.3} ms", start.elapsed().as_secs_f64() * 1e3);
            }
            Some(("native", rest)) => s.native(rest),
            Some((other, _)) => eprintln!("vlad: unknown command ,{other} (,help lists them)"),
            None => s.input(entry),
        }
        let _ = std::io::stdout().flush();
        // Standard output cannot be written: said once, and the session ends as a run would.
        if let Some(failure) = s.ev.output.failure() {
            return crate::output_status(Some(failure));
        }
    }
    if interactive {
        println!();
    }
    0
}

/// `,name rest` as (name, rest).
fn command(entry: &str) -> Option<(&str, &str)> {
    let rest = entry.strip_prefix(',')?;
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    Some((&rest[..end], rest[end..].trim()))
}

impl Session {
    fn report(&self, d: &Diagnostic) {
        eprint!("{}", d.render(&self.sources));
    }

    /// Reads, evaluates and prints one input (any number of forms).
    fn input(&mut self, text: &str) {
        self.inputs += 1;
        let name = format!("<repl:{}>", self.inputs);
        let (chunk, forms) =
            match self
                .loader
                .load_str(&mut self.sources, &name, text, &self.include)
            {
                Ok(f) => f,
                Err(d) => return self.report(&d),
            };
        for f in &forms {
            let result = match f {
                TopForm::Include { from, file } if *from == chunk => {
                    self.included(*file, &forms, f)
                }
                TopForm::Define(d) if d.span.file == chunk => self.define(d),
                TopForm::Expr { form, .. } if form.span.file == chunk => {
                    self.expression(form).map(|v| {
                        let text = self.ev.render(&v);
                        // A write that fails is recorded (`Output::failure`): the session
                        // ends after this form.
                        let _ = self.ev.output.line(&text);
                        self.ev.output.flush();
                    })
                }
                _ => Ok(()),
            };
            if self.ev.output.failure().is_some() {
                return;
            }
            if let Err(d) = result {
                self.ev.output.flush();
                self.report(&d);
                return;
            }
        }
    }

    /// `(include ...)` at the prompt: the included files' definitions (of the forms loaded
    /// with it) expanded in their scopes, their values evaluated, their expressions run.
    fn included(&mut self, file: u32, forms: &[TopForm], at: &TopForm) -> Result<(), Diagnostic> {
        self.roots.push(file);
        if let Some(f) = self.sources.file(file) {
            let path = &f.path;
            let how = match path.strip_prefix(vlad_syntax::library::PREFIX) {
                Some(lib) => lib.trim_end_matches(".vlad").to_string(),
                None => std::fs::canonicalize(path)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| path.clone()),
            };
            self.root_includes.push(format!("(include {how:?})"));
        }
        // The forms this include brought (those of other files, after it).
        let start = forms
            .iter()
            .position(|f| std::ptr::eq(f, at))
            .map_or(forms.len(), |i| i + 1);
        let end = forms[start..]
            .iter()
            .position(|f| matches!(f, TopForm::Include { from, .. } if self.is_chunk(*from)))
            .map_or(forms.len(), |i| start + i);
        let brought: Vec<TopForm> = forms[start..end]
            .iter()
            .filter(|f| !self.in_chunk(f))
            .cloned()
            .collect();
        let (defs, exprs) = self.unit.add(&mut self.ev.arena, &brought)?;
        self.evaluate_values(&defs)?;
        for (span, e) in exprs {
            let v = self.run(e, span)?;
            let text = self.ev.render(&v);
            if self.ev.output.line(&text).is_err() {
                // Recorded (`Output::failure`): the session ends.
                break;
            }
        }
        self.ev.output.flush();
        Ok(())
    }

    fn is_chunk(&self, file: u32) -> bool {
        self.sources
            .file(file)
            .is_some_and(|f| f.path.starts_with("<repl:"))
    }

    fn in_chunk(&self, f: &TopForm) -> bool {
        match f {
            TopForm::Include { from, .. } => self.is_chunk(*from),
            TopForm::Define(d) => self.is_chunk(d.span.file),
            TopForm::Expr { form, .. } => self.is_chunk(form.span.file),
        }
    }

    /// Evaluates the value definitions among `defs` (of included files), each after the ones
    /// it uses.
    fn evaluate_values(&mut self, defs: &[Def]) -> Result<(), Diagnostic> {
        let mut todo: Vec<&Def> = defs
            .iter()
            .filter(|d| !matches!(self.ev.arena.get(d.rhs), Expr::Lambda(..)))
            .collect();
        while !todo.is_empty() {
            let pending: Vec<Var> = todo.iter().map(|d| d.var).collect();
            let ready = todo.iter().position(|d| {
                let free = self.ev.arena.free_vars(d.rhs);
                !free.iter().any(|v| pending.contains(v))
            });
            let Some(i) = ready else {
                let d = todo[0];
                return Err(Diagnostic::new(
                    d.span,
                    format!("the value of `{}` depends on itself", d.name),
                ));
            };
            let d = todo.remove(i);
            let value = self.run(d.rhs, d.span)?;
            let text = self.source(d.span);
            self.values.push(Kept {
                var: d.var,
                value,
                text,
            });
        }
        Ok(())
    }

    /// The source text of a span.
    fn source(&self, span: Span) -> String {
        self.sources
            .file(span.file)
            .and_then(|f| f.text.get(span.start as usize..span.end as usize))
            .unwrap_or("")
            .to_string()
    }

    /// The names the prompt sees: the included files' (a later include's over an earlier
    /// one's), then the session's values; the session's procedures get `fresh` variables.
    fn names(&mut self) -> HashMap<String, Var> {
        let mut names = HashMap::new();
        for &r in &self.roots {
            names.extend(self.unit.visible(r));
        }
        for (name, &i) in &self.value_names {
            names.insert(name.clone(), self.values[i].var);
        }
        for (name, _) in &self.procedures {
            let v = self.ev.arena.fresh_var(name);
            names.insert(name.clone(), v);
        }
        names
    }

    /// Expands `form` (an expression) and the session's procedures with the prompt's names;
    /// the closed program, a procedure of the kept values.
    fn expand(&mut self, form: &Sexp) -> Result<ExprId, Diagnostic> {
        let names = self.names();
        let mut ex = vlad_syntax::expand::Expander::new(&mut self.ev.arena);
        ex.globals = names.clone();
        ex.curried = self.unit.curried.clone();
        for (name, d) in &self.procedures {
            if let Some(n) = vlad_syntax::program::curried_arity(d) {
                ex.curried.insert(names[name], n);
            }
        }
        let mut defs: Vec<Def> = Vec::new();
        for (name, d) in &self.procedures {
            let (_, span, rhs) = ex.define(d.list().expect("a define form"), d.span)?;
            defs.push(Def {
                name: name.clone(),
                var: names[name],
                rhs,
                span,
            });
        }
        let body = ex.expr(form)?;
        let arena = &mut self.ev.arena;
        defs.extend(
            self.unit
                .defs
                .iter()
                .filter(|d| matches!(arena.get(d.rhs), Expr::Lambda(..)))
                .cloned(),
        );
        self.close(defs, body, form.span)
    }

    /// `(lambda (list v ...) (letrec (procedures ...) body))` over the kept values `v`.
    fn close(&mut self, defs: Vec<Def>, body: ExprId, span: Span) -> Result<ExprId, Diagnostic> {
        let arena = &mut self.ev.arena;
        let body = wrap_definitions(arena, &defs, body)?;
        let mut pat = Pattern::Const(Datum::Nil, Tags::EMPTY);
        for k in self.values.iter().rev() {
            pat = Pattern::Cons(Tags::EMPTY, Rc::new(Pattern::Var(k.var)), Rc::new(pat));
        }
        let lam = arena.mk(Expr::Lambda(Rc::new(pat), body, span));
        if let Some(v) = arena.free_vars(lam).first() {
            return Err(Diagnostic::new(
                span,
                format!("unbound variable `{}`", arena.var_name(*v)),
            ));
        }
        Ok(lam)
    }

    /// Runs an expression expanded elsewhere (an included file's) in the session.
    fn run(&mut self, e: ExprId, span: Span) -> Result<Value, Diagnostic> {
        let arena = &self.ev.arena;
        let defs: Vec<Def> = self
            .unit
            .defs
            .iter()
            .filter(|d| matches!(arena.get(d.rhs), Expr::Lambda(..)))
            .cloned()
            .collect();
        let lam = self.close(defs, e, span)?;
        self.call(lam)
    }

    /// Calls a closed program of the kept values.
    fn call(&mut self, lam: ExprId) -> Result<Value, Diagnostic> {
        let f = self
            .ev
            .eval(lam)
            .map_err(|e| crate::eval_diagnostic(&e, &self.sources))?;
        let mut arg = Value::Nil;
        for k in self.values.iter().rev() {
            arg = Value::pair(Tags::EMPTY, k.value.clone(), arg);
        }
        let r = self.ev.call(f, arg, Span::NONE);
        self.ev.output.flush();
        r.map_err(|e| crate::eval_diagnostic(&e, &self.sources))
    }

    fn expression(&mut self, form: &Sexp) -> Result<Value, Diagnostic> {
        let lam = self.expand(form)?;
        self.call(lam)
    }

    /// A definition at the prompt: a procedure is kept as a form; a value is evaluated now.
    fn define(&mut self, d: &Sexp) -> Result<(), Diagnostic> {
        let items = d.list().expect("a define form");
        let Some(target) = items.get(1) else {
            return Err(Diagnostic::new(d.span, "`define` needs a name"));
        };
        let (name, procedure) = match target.symbol() {
            Some(n) => {
                let is_lambda = items.get(2).is_some_and(|e| e.is_form("lambda"));
                (n.to_string(), is_lambda)
            }
            None => {
                let mut t = target;
                while let Some(parts) = t.list().filter(|p| !p.is_empty()) {
                    t = &parts[0];
                }
                match t.symbol() {
                    Some(n) => (n.to_string(), true),
                    None => {
                        return Err(Diagnostic::new(
                            target.span,
                            "`define` needs a name or a `(name parameter ...)` header",
                        ))
                    }
                }
            }
        };
        if procedure {
            // Checked now (a mistake is reported at once), kept as its form.
            let saved = std::mem::take(&mut self.procedures);
            self.procedures = saved
                .iter()
                .filter(|(n, _)| *n != name)
                .cloned()
                .chain(std::iter::once((name.clone(), d.clone())))
                .collect();
            let check = Sexp {
                kind: vlad_syntax::SexpKind::List(Vec::new()),
                span: d.span,
            };
            if let Err(e) = self.expand(&check) {
                self.procedures = saved;
                return Err(e);
            }
            self.value_names.remove(&name);
            return Ok(());
        }
        let Some(rhs) = items.get(2).filter(|_| items.len() == 3) else {
            return Err(Diagnostic::new(
                d.span,
                "`define` needs a name and a value: `(define x e)`",
            ));
        };
        let value = self.expression(rhs)?;
        let var = self.ev.arena.fresh_var(&name);
        let text = match datum_text(&mut self.ev, &value) {
            Some(datum) => format!("(define {name} '{datum})"),
            None => self.source(d.span),
        };
        self.values.push(Kept { var, value, text });
        self.value_names.insert(name.clone(), self.values.len() - 1);
        self.procedures.retain(|(n, _)| *n != name);
        Ok(())
    }

    /// `,native EXPR`: the session as a program (its includes, procedures and values, then
    /// EXPR), compiled to native code and run.
    fn native(&mut self, expr: &str) {
        if let Err(d) = read(0, expr) {
            return eprintln!("vlad: ,native: {}", d.message);
        }
        let mut text = String::new();
        for i in &self.root_includes {
            text.push_str(i);
            text.push('\n');
        }
        let session_values: Vec<usize> = self.value_names.values().copied().collect();
        let mut ordered = session_values.clone();
        ordered.sort();
        for i in ordered {
            text.push_str(&self.values[i].text);
            text.push('\n');
        }
        for (_, d) in &self.procedures {
            text.push_str(&self.source(d.span));
            text.push('\n');
        }
        text.push_str(expr);
        text.push('\n');
        let dir = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => return eprintln!("vlad: ,native: cannot make a temporary directory: {e}"),
        };
        let file = dir.path().join("session.vlad");
        if let Err(e) = std::fs::write(&file, &text) {
            return eprintln!("vlad: ,native: cannot write {}: {e}", file.display());
        }
        let _ = std::io::stdout().flush();
        let source = crate::Source { path: file, text };
        let meter = crate::budget::Meter::analysis();
        let c = match native::generate_c(&source, &self.include, true, &meter) {
            Ok(c) => c,
            Err(native::Failure::Unsupported(why) | native::Failure::OverBudget(why, _)) => {
                return eprintln!("vlad: ,native: not compiled to native code ({why})")
            }
            Err(native::Failure::Program(_)) => return,
            Err(native::Failure::Evaluate(d)) => return eprint!("{d}"),
        };
        let opts = native::CcOptions { native: true };
        match native::cached_executable(&native::units(&c.c), opts, false).and_then(|exe| {
            // The compiled program reads no input of the session's.
            std::process::Command::new(&exe.path)
                .stdin(std::process::Stdio::null())
                .status()
                .map_err(|e| format!("cannot run the compiled program: {e}"))
        }) {
            Ok(_) => {}
            Err(e) => eprintln!("vlad: ,native: {e}"),
        }
    }
}

/// The external representation of `v` if it is data that reads back as itself (reals,
/// booleans, `()`, pairs and arrays of them).
fn datum_text(ev: &mut Evaluator, v: &Value) -> Option<String> {
    fn is_data(v: &Value) -> bool {
        let mut todo = vec![v];
        while let Some(v) = todo.pop() {
            match v {
                Value::Nil | Value::Bool(_) | Value::Real(_) => {}
                Value::Pair(p) if p.tags.is_empty() => {
                    todo.push(&p.car);
                    todo.push(&p.cdr);
                }
                Value::Array(a) if a.tags.is_empty() => todo.extend(a.elems.iter()),
                _ => return false,
            }
        }
        true
    }
    is_data(v).then(|| ev.render(v))
}
