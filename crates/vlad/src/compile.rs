//! The compiler's one entry point: closed top-level expressions to the IR and C.
//!
//! ```text
//! Core --flow analysis--> keys --specialisation--> Program --lowering--> IR
//!      --passes (tail calls, marks, carrying loops, loops, machines)--> IR --emitter--> C
//! ```
//!
//! `vlad run` and `vlad compile` both come here; the C compiler and the cache of executables are
//! the command's (`vlad-cli/src/native.rs`).

use vlad_backend_c::CProgram;
use vlad_core::{ExprId, Span};
use vlad_eval::Evaluator;
use vlad_syntax::SourceMap;

/// Why a program could not be compiled: a position and a message (`Unsupported` of the
/// lowering, or an error of the analysis, which `vlad run` answers by running the evaluator).
#[derive(Clone, Debug)]
pub struct CompileError {
    pub span: Span,
    pub message: String,
    /// The error comes from the flow analysis (its time limit, say), not the lowering.
    pub in_analysis: bool,
    /// The top-level expression being analysed when it failed, if any.
    pub expr: Option<usize>,
}

/// A compiled program: its IR after the passes, and its C.
pub struct Compiled {
    pub ir: vlad_ir::Program,
    pub c: CProgram,
    pub stats: vlad_ir::passes::Stats,
}

/// How to compile.
pub struct Options<'r> {
    /// The bounds on the flow analysis's cost (`vlad_flow::Analysis::budget`): asked as it
    /// works (and inside the Core transforms it applies), its message stops the analysis with
    /// that error. `None`: unbounded.
    pub budget: Option<vlad_flow::analysis::Budget>,
    /// The rendered position of an error site (`path:line:col: error: ` and the excerpt).
    pub render: vlad_lower::SiteRenderer<'r>,
    /// A rendered diagnostic the program reports after its expressions (the expansion error
    /// of the top-level form after them), exiting with status 1.
    pub final_error: Option<&'r str>,
    /// Print each expression's value on a line of its own (off for a whole program's run,
    /// which writes its expressions' values itself).
    pub print_values: bool,
    /// The IR passes' options (the verifier between passes, ...).
    pub passes: vlad_ir::passes::Options,
}

/// Compiles the closed top-level expressions `exprs` of the program `ev` holds.
pub fn compile(
    ev: &mut Evaluator,
    exprs: &[ExprId],
    opts: &Options<'_>,
) -> Result<Compiled, CompileError> {
    let analysis_error = |e: vlad_flow::FlowError, expr: Option<usize>| CompileError {
        span: e.span,
        message: e.message,
        in_analysis: true,
        expr,
    };
    let mut analysis = crate::analysis(ev).map_err(|e| CompileError {
        span: e.span,
        message: e.message,
        in_analysis: false,
        expr: None,
    })?;
    analysis.budget = opts.budget.clone();
    let mut entries = Vec::new();
    for (i, e) in exprs.iter().enumerate() {
        entries.push(
            analysis
                .analyse(*e)
                .map_err(|err| analysis_error(err, Some(i)))?,
        );
    }
    let program = analysis
        .specialise(&entries)
        .map_err(|e| analysis_error(e, None))?;
    let mut ir = vlad_lower::lower(
        &mut analysis,
        &program,
        opts.render,
        opts.final_error,
        opts.print_values,
        &[],
    )
    .map_err(|u| CompileError {
        span: u.span,
        message: u.reason,
        in_analysis: false,
        expr: None,
    })?;
    let internal = |message: String| CompileError {
        span: Span::NONE,
        message: format!("internal error: {message}"),
        in_analysis: false,
        expr: None,
    };
    let stats = vlad_ir::passes::optimize(&mut ir, opts.passes)
        .map_err(|e| internal(format!("the IR does not verify {e}")))?;
    let c = vlad_backend_c::emit(&ir, &stats).map_err(|e| internal(e.0))?;
    Ok(Compiled { ir, c, stats })
}

/// The error site of `span`, as the evaluator's diagnostics render it; for a span in the
/// standard library, the message its line gives (`SourceMap::library_message`) as the site's
/// prefix, with no excerpt, if it gives one (its errors are reported at the user's call site).
pub fn render_site(sources: &SourceMap, span: vlad_core::Span) -> Option<vlad_ir::Site> {
    if span.is_library() {
        return sources.library_message(span).map(|m| vlad_ir::Site {
            prefix: m,
            excerpt: None,
        });
    }
    let site = vlad_syntax::diagnostic::Site::of(span, sources)?;
    Some(vlad_ir::Site {
        prefix: site.prefix,
        excerpt: Some(vlad_ir::Excerpt {
            line: site.line as u32,
            text: site.text.into(),
            col: site.col as u32,
            width: site.width as u32,
        }),
    })
}
