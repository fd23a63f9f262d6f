//! Farfel (paper 000): fixed-form Fortran 77 with nested subprograms and the `ADF`/`ADR`
//! blocks, lowered to Core so that the evaluator and the compiler run it like any VLAD program.
//!
//! The stages: `lex` (card columns to statements), `parse` (statements to program units), `sema`
//! (names, types, and the effect analysis that decides what state each body threads), `lower`
//! (Core). `docs/farfel.md` describes the subset and the lowering.
//!
//! Architecture invariant: like `vlad-syntax`, nothing here evaluates; the output is Core in the
//! caller's arena, with spans into the Fortran file, and every error is a `Diagnostic`.

pub mod ast;
mod helpers;
pub mod lex;
mod lower;
pub mod parse;
pub mod pretty;
pub mod sema;
mod token;

use std::path::Path;
use vlad_core::{Arena, ExprId, Span};
use vlad_syntax::program::{Program, TopExpr};
use vlad_syntax::{Diagnostic, SourceMap};

/// Whether `path` names a Farfel source file (`.f`, `.for`, `.f77`, any case).
pub fn is_farfel_path(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "f" | "for" | "f77"))
}

/// Reads and lowers a Farfel file: one top-level expression, the main program.
pub fn load(
    sources: &mut SourceMap,
    arena: &mut Arena,
    path: &Path,
) -> Result<Vec<TopExpr>, Diagnostic> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Diagnostic::new(Span::NONE, format!("cannot read {}: {e}", path.display())))?;
    load_str(sources, arena, &path.display().to_string(), &text)
}

/// Like [`load`] for text that is not in a file (`name` names it in messages).
pub fn load_str(
    sources: &mut SourceMap,
    arena: &mut Arena,
    name: &str,
    text: &str,
) -> Result<Vec<TopExpr>, Diagnostic> {
    program_str(sources, arena, name, text).map(|p| p.exprs)
}

/// A Farfel text as a whole program, as `vlad_syntax::program::build_program` gives a VLAD
/// one: its one top-level expression, the main program, which is also the run. The run of a
/// VLAD program writes each top-level expression's value; a Fortran program writes its own
/// output (PRINT, WRITE), so its run is the main program alone and its value, `()`, is not
/// written, by the evaluator or by compiled code.
pub fn program_str(
    sources: &mut SourceMap,
    arena: &mut Arena,
    name: &str,
    text: &str,
) -> Result<Program, Diagnostic> {
    let file = sources.add(name, text);
    let (core, span) = lower_text(arena, file, text)?;
    Ok(Program {
        exprs: vec![TopExpr {
            span,
            core: Ok(core),
            expected: None,
        }],
        run: core,
        stop: None,
    })
}

/// Lowers the Farfel text of file `file` (already in the caller's source map): the main
/// program's Core and where its PROGRAM statement is.
pub fn lower_text(arena: &mut Arena, file: u32, text: &str) -> Result<(ExprId, Span), Diagnostic> {
    lower_file(arena, file, text).map_err(|d| past_column_72(d, text))
}

fn lower_file(arena: &mut Arena, file: u32, text: &str) -> Result<(ExprId, Span), Diagnostic> {
    let lines = lex::statements(file, text)?;
    let units = parse::parse(file, text, lines)?;
    let whole = Span::new(file, 0, text.len().max(1));
    let sema = sema::analyse(&units, whole)?;
    let span = sema.units[sema.main].ast.span;
    let core = lower::lower(&sema, arena)?;
    Ok((core, span))
}

/// An error in a statement with text past column 72 (which fixed form ignores) says so.
fn past_column_72(mut d: Diagnostic, text: &str) -> Diagnostic {
    let at = (d.span.start as usize).min(text.len());
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    // The statement may continue on later lines: look at its line and the continuations.
    let mut lines = text[start..].lines();
    let mut cut = false;
    if let Some(first) = lines.next() {
        cut |= lex::cut_at_72(first);
        for l in lines {
            if !lex::is_continuation(l) {
                break;
            }
            cut |= lex::cut_at_72(l);
        }
    }
    if cut {
        d.message
            .push_str(" (this statement has text past column 72, which fixed form ignores)");
    }
    d
}
