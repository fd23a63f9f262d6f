//! Shared libraries: procedures of a VLAD program called from C or Rust (`vlad compile --lib`,
//! [`crate::Library`]).
//!
//! Each exported procedure is named with the shapes of its arguments (`f(real, array)`): the
//! flow analysis analyses a call of the procedure on arguments of those shapes, and the
//! compiler specialises and compiles what that call needs, as it does for a program's run. The
//! C function `vlad_NAME` takes one boxed value per argument and returns the result boxed; a
//! run-time error returns 0 and leaves its message for `vlad_error()`. The interface is in the
//! header this module writes ([`LibraryC::header`]) and in docs/language.md, "Libraries".

use std::path::{Path, PathBuf};
use std::rc::Rc;
use vlad_core::{Span, Tags};
use vlad_eval::Evaluator;
use vlad_flow::Av;
use vlad_syntax::{Diagnostic, SourceMap};

/// The shape of an exported procedure's argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A real.
    Real,
    /// An array of values of a shape (reals, or arrays of reals, ...).
    Array(Box<Shape>),
}

impl Shape {
    /// Any value of this shape, as the flow analysis sees it.
    fn av(&self) -> Av {
        match self {
            Shape::Real => Av::Real(None),
            Shape::Array(e) => Av::Array(Tags::EMPTY, None, Rc::new(e.av())),
        }
    }

    /// A value of this shape, written in VLAD (for messages).
    fn example(&self) -> String {
        match self {
            Shape::Real => "1".into(),
            Shape::Array(e) => format!("#({} {})", e.example(), e.example()),
        }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shape::Real => write!(f, "real"),
            Shape::Array(e) if **e == Shape::Real => write!(f, "array"),
            Shape::Array(e) => write!(f, "array({e})"),
        }
    }
}

/// An exported procedure: its name in the program, and the shapes of its arguments. Written
/// `name(shape, ...)`, a shape being `real`, `array` (of reals) or `array(shape)`; the C
/// function is `vlad_` and the name with each `-` made `_`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    pub name: String,
    pub args: Vec<Shape>,
}

impl Signature {
    /// The name of the C function is `vlad_` and this.
    pub fn c_name(&self) -> String {
        self.name.replace('-', "_")
    }
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let args: Vec<String> = self.args.iter().map(|s| s.to_string()).collect();
        write!(f, "{}({})", self.name, args.join(", "))
    }
}

impl std::str::FromStr for Signature {
    type Err = String;

    /// Parses `name(shape, ...)`.
    fn from_str(text: &str) -> Result<Signature, String> {
        let bad = |why: &str| {
            format!(
                "`{text}` is not an exported procedure: {why} (write `name(real, array, \
                 array(array))`)"
            )
        };
        let (name, rest) = text
            .split_once('(')
            .ok_or_else(|| bad("the arguments' shapes are missing"))?;
        let name = name.trim();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            || name.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(bad(
                "the name must be letters, digits, `_` and `-` (it becomes a C name; define \
                 a procedure of such a name to export another)",
            ));
        }
        let inner = rest
            .trim_end()
            .strip_suffix(')')
            .ok_or_else(|| bad("`)` is missing at the end"))?;
        let mut args = Vec::new();
        for part in split_top(inner).map_err(|e| bad(&e))? {
            args.push(parse_shape(part.trim()).map_err(|e| bad(&e))?);
        }
        Ok(Signature {
            name: name.to_string(),
            args,
        })
    }
}

/// `a, b(c, d), e` split at the commas outside parentheses; nothing for blank text.
fn split_top(text: &str) -> Result<Vec<&str>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let (mut depth, mut start, mut parts) = (0i32, 0, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err("a `)` too many".into());
        }
    }
    if depth != 0 {
        return Err("a `(` is not closed".into());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn parse_shape(text: &str) -> Result<Shape, String> {
    match text {
        "real" => return Ok(Shape::Real),
        "array" => return Ok(Shape::Array(Box::new(Shape::Real))),
        _ => {}
    }
    let inner = text
        .strip_prefix("array")
        .map(str::trim_start)
        .and_then(|t| t.strip_prefix('('))
        .and_then(|t| t.strip_suffix(')'));
    match inner {
        Some(e) => Ok(Shape::Array(Box::new(parse_shape(e.trim())?))),
        None if text.is_empty() => Err("an argument's shape is empty".into()),
        None => Err(format!(
            "`{text}` is not a shape (`real`, `array` or `array(SHAPE)`)"
        )),
    }
}

/// The C of a shared library, and its header.
pub struct LibraryC {
    /// One translation unit, with `VL_LIBRARY` defined (no `main`).
    pub c: String,
    pub header: String,
}

/// Compiles the procedures `exports` of the program `text`, read from `file` (its name in
/// messages, and where `include` starts), to the C of a shared library.
/// The error is rendered as the command reports it (`path:line:col: error: ...`). The program's
/// own top-level expressions are not part of the library; its definitions are.
pub fn library_c(
    file: &Path,
    text: &str,
    include: &[PathBuf],
    exports: &[Signature],
    budget: Option<vlad_flow::analysis::Budget>,
) -> Result<LibraryC, String> {
    if exports.is_empty() {
        return Err("vlad: error: a library exports at least one procedure (--export)\n".into());
    }
    for (i, e) in exports.iter().enumerate() {
        let argv = |d: &Signature| format!("{}_argv", d.c_name());
        if exports[..i]
            .iter()
            .any(|d| d.c_name() == e.c_name() || argv(d) == e.c_name() || d.c_name() == argv(e))
        {
            return Err(format!(
                "vlad: error: `{}` is exported twice, or its C name vlad_{} is another's\n",
                e.name,
                e.c_name()
            ));
        }
    }
    // Each exported name becomes a top-level expression after the program (the file's own
    // scope sees the file's definitions); its value is the procedure the library calls.
    let mut with_names = text.to_string();
    for e in exports {
        with_names.push('\n');
        with_names.push_str(&e.name);
    }
    with_names.push('\n');
    let mut sources = SourceMap::new();
    let mut arena = vlad_core::Arena::new();
    let forms = vlad_syntax::program::load_str(&mut sources, file, &with_names, include)
        .map_err(|d| d.render(&sources))?;
    let program =
        vlad_syntax::program::build_program(&mut arena, &forms).map_err(|d| d.render(&sources))?;
    let named = &program.exprs[program.exprs.len() - exports.len()..];
    let not_exported = |e: &Signature, why: &str| {
        format!(
            "vlad: error: {}: cannot export `{e}`: {why}\n",
            file.display(),
        )
    };
    let mut cores = Vec::new();
    for (e, top) in exports.iter().zip(named) {
        match &top.core {
            Ok(core) => cores.push(*core),
            Err(d) => {
                return Err(not_exported(
                    e,
                    &format!("{} (it must be defined at top level)", d.message),
                ))
            }
        }
    }
    let mut ev = Evaluator::new(arena);
    let mut analysis = crate::analysis(&mut ev)
        .map_err(|e| Diagnostic::new(e.span, e.message).render(&sources))?;
    analysis.budget = budget;
    let at = |span: Span, message: String| {
        if sources.location(span).is_some() && span.is_user() {
            Diagnostic::new(span, message).render(&sources)
        } else {
            format!("vlad: error: {}: {message}\n", file.display())
        }
    };
    let mut lowered = Vec::new();
    let mut calls = Vec::new();
    for (e, core) in exports.iter().zip(cores) {
        let key = analysis
            .analyse(core)
            .map_err(|err| at(err.span, err.message))?;
        let procedure = analysis.results[key].clone();
        let why = match &procedure {
            Av::Closure(..) => None,
            Av::Prim(_) => Some(
                "it is a primitive or an AD operator, not a procedure defined in the program \
                 (define a procedure that calls it)",
            ),
            Av::Real(_) => Some("it is a real, not a procedure"),
            Av::Bool(_) => Some("it is a boolean, not a procedure"),
            Av::Array(..) => Some("it is an array, not a procedure"),
            Av::Bottom => Some("its definition does not return a value"),
            _ => Some("it is not a procedure defined in the program"),
        };
        if let Some(why) = why {
            return Err(not_exported(e, why));
        }
        let args: Vec<Av> = e.args.iter().map(Shape::av).collect();
        let call = analysis
            .analyse_call(&procedure, &vlad_lower::cons_star(&args))
            .map_err(|err| at(err.span, err.message))?;
        // The analysis is sound: a result with no value means that no call returns.
        if analysis.results[call] == Av::Bottom {
            return Err(not_exported(
                e,
                &format!(
                    "no call with arguments of these shapes returns a value (each fails or does \
                     not end; `vlad run` a call such as ({}) to see why)",
                    std::iter::once(e.name.clone())
                        .chain(e.args.iter().map(Shape::example))
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            ));
        }
        if holds_procedure(&analysis.results[call]) {
            return Err(not_exported(
                e,
                "its result may hold a procedure, which a caller in C or Rust cannot apply \
                 (export a procedure that applies it)",
            ));
        }
        calls.push(call);
        lowered.push(vlad_lower::Export {
            name: e.c_name(),
            procedure,
            args,
            key: call,
        });
    }
    let mut specialised = analysis
        .specialise(&calls)
        .map_err(|err| at(err.span, err.message))?;
    // No run of the program: the library's entry points are its only entries.
    specialised.entries.clear();
    let render = |span: Span| crate::compile::render_site(&sources, span);
    let mut ir = vlad_lower::lower(&mut analysis, &specialised, &render, None, false, &lowered)
        .map_err(|u| at(u.span, u.reason))?;
    let stats = vlad_ir::passes::optimize(&mut ir, vlad_ir::passes::Options::default())
        .map_err(|e| format!("vlad: internal error: the IR does not verify {e}\n"))?;
    let c = vlad_backend_c::emit(&ir, &stats)
        .map_err(|e| format!("vlad: internal error: {}\n", e.0))?;
    let unit = c.units(1).remove(0);
    let entries: Vec<vlad_backend_c::HeaderEntry> = exports
        .iter()
        .map(|e| vlad_backend_c::HeaderEntry {
            name: e.c_name(),
            params: (0..e.args.len()).map(|i| format!("a{i}")).collect(),
            comment: format!(
                "{}: the procedure `{}` of {}",
                e,
                e.name,
                file.file_name().map_or(file.display().to_string(), |f| f
                    .to_string_lossy()
                    .into_owned())
            ),
        })
        .collect();
    let stem = file
        .file_stem()
        .map_or("vlad".into(), |s| s.to_string_lossy().into_owned());
    let guard: String = format!("VLAD_{stem}_H")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    Ok(LibraryC {
        c: format!("#define VL_LIBRARY 1\n{unit}"),
        header: vlad_backend_c::header(&guard, &entries),
    })
}

/// Whether a value of `av` may hold a procedure.
fn holds_procedure(av: &Av) -> bool {
    match av {
        Av::Closure(..) | Av::Prim(_) => true,
        Av::Pair(_, a, d) => holds_procedure(a) || holds_procedure(d),
        Av::Array(_, _, e) | Av::Tagged(_, e) | Av::Zero(e) => holds_procedure(e),
        Av::Bundle(p, t) | Av::OrZero(p, t) | Av::OneHot(p, t) | Av::Sum(p, t) => {
            holds_procedure(p) || holds_procedure(t)
        }
        Av::Dyn(callees) => !callees.is_empty(),
        Av::Bottom | Av::Nil | Av::Bool(_) | Av::Real(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_parse_and_print() {
        let s: Signature = "grad-f(real, array, array(array))".parse().unwrap();
        assert_eq!(s.name, "grad-f");
        assert_eq!(s.c_name(), "grad_f");
        assert_eq!(
            s.args,
            vec![
                Shape::Real,
                Shape::Array(Box::new(Shape::Real)),
                Shape::Array(Box::new(Shape::Array(Box::new(Shape::Real)))),
            ]
        );
        assert_eq!(s.to_string(), "grad-f(real, array, array(array))");
        let none: Signature = "f()".parse().unwrap();
        assert!(none.args.is_empty());
        let spaced: Signature = " g ( array ( real ) ) ".parse().unwrap();
        assert_eq!(spaced.args, vec![Shape::Array(Box::new(Shape::Real))]);
    }

    #[test]
    fn bad_signatures_say_why() {
        for (text, why) in [
            ("f", "shapes are missing"),
            ("f(real", "`)` is missing"),
            ("f(vector)", "`vector` is not a shape"),
            ("f(real,)", "shape is empty"),
            ("f?(real)", "the name must be"),
            ("(real)", "the name must be"),
            ("f(array(real)))", "a `)` too many"),
        ] {
            let e = text.parse::<Signature>().unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
    }
}
