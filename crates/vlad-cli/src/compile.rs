//! `vlad compile`: the compiler pipeline as far as it exists (the flow analysis, issue 6).

use crate::{prepare, report, Source};
use std::path::{Path, PathBuf};
use vlad_syntax::Diagnostic;

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Emit {
    /// The Core of each top-level expression (a Fortran file's lowering), indented.
    Core,
    /// Every specialised function: its abstract argument and result.
    Flow,
    /// The typed first-order IR the C is printed from (after its passes).
    Ir,
    /// The C program.
    C,
}

pub fn compile(
    source: &Source,
    include: &[PathBuf],
    emit: Option<Emit>,
    output: Option<&Path>,
    opts: crate::native::CcOptions,
) -> u8 {
    let emit = match (emit, output) {
        (Some(Emit::C), _) | (None, Some(_)) | (Some(Emit::Ir), None) => {
            return compile_c(source, include, emit, output, opts)
        }
        (Some(e), _) => e,
        (None, None) => Emit::Flow,
    };
    if let Some(out) = output {
        eprintln!(
            "vlad: -o {} writes an executable or C (--emit c); --emit {emit:?} prints to standard output",
            out.display()
        );
        return 2;
    }
    let (sources, program, mut ev) = match prepare(source, include, None) {
        Ok(p) => p,
        Err(code) => return code,
    };
    if let Some(d) = &program.stop {
        return report(d, &sources);
    }
    let place = |span: vlad_core::Span| match sources.location(span) {
        Some((_, line, col)) => format!("{line}:{col}"),
        None => "?".to_string(),
    };
    if let Emit::Core = emit {
        let mut text = String::new();
        for te in &program.exprs {
            match &te.core {
                Ok(c) => text.push_str(&format!(
                    "; {}\n{}",
                    place(te.span),
                    vlad_farfel::pretty::show_core(&ev.arena, *c)
                )),
                Err(d) => return report(d, &sources),
            }
        }
        return write_out(&text);
    }
    let meter = crate::budget::Meter::analysis();
    let mut analysis = match vlad::analysis(&mut ev) {
        Ok(a) => a,
        Err(e) => return report(&Diagnostic::new(e.span, e.message), &sources),
    };
    analysis.budget = Some(meter.budget());
    // The run of the whole program (docs/language.md): one entry, placed at the first
    // top-level expression.
    let whole = program
        .exprs
        .first()
        .map_or(vlad_core::Span::NONE, |e| e.span);
    let mut results = Vec::new();
    match analysis.analyse(program.run) {
        Ok(k) => results.push((whole, k)),
        Err(e) => {
            if std::env::var_os("VLAD_FLOW_DEBUG").is_some() {
                eprint!("{}", analysis.show(&place));
            }
            let (span, message) = crate::native::analysis_error(&sources, &e, whole, &meter);
            return report(
                &Diagnostic::new(span, format!("cannot compile: {message}")),
                &sources,
            );
        }
    }
    let mut text = String::new();
    match emit {
        Emit::Flow => {
            for (span, k) in results {
                text.push_str(&format!(
                    "; {} => {}\n",
                    place(span),
                    analysis.show_av(&analysis.results[k], &place)
                ));
            }
            text.push_str(&analysis.show(&place));
        }
        Emit::C | Emit::Ir | Emit::Core => unreachable!("handled above or by compile_c"),
    }
    write_out(&text)
}

/// `--emit c` (the C program, to `output` or standard output), `--emit ir` (the IR, to standard
/// output) or `-o` (an executable).
fn compile_c(
    source: &Source,
    include: &[PathBuf],
    emit: Option<Emit>,
    output: Option<&Path>,
    opts: crate::native::CcOptions,
) -> u8 {
    let compiled = match crate::native::generate_c(
        source,
        include,
        false,
        &crate::budget::Meter::analysis(),
    ) {
        Ok(compiled) => compiled,
        Err(crate::native::Failure::Program(code)) => return code,
        Err(
            crate::native::Failure::Unsupported(reason)
            | crate::native::Failure::OverBudget(reason, _),
        ) => {
            eprintln!(
                "vlad: cannot compile {} to C: {reason}",
                source.path.display()
            );
            return 1;
        }
        Err(crate::native::Failure::Evaluate(diagnostic)) => {
            eprint!("{diagnostic}");
            return 1;
        }
    };
    let c = &compiled.c;
    let written = match (emit, output) {
        (Some(Emit::Ir), _) => return write_out(&vlad_ir::print::program(&compiled.ir)),
        (Some(Emit::C), None) => return write_out(&c.single()),
        (Some(Emit::C), Some(out)) => std::fs::write(out, c.single())
            .map_err(|e| format!("cannot write {}: {e}", out.display())),
        (_, Some(out)) => crate::native::compile_c(&crate::native::units(c), out, opts),
        (_, None) => unreachable!("an output or --emit c"),
    };
    match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("vlad: {e}");
            1
        }
    }
}

/// `vlad compile FILE --lib NAME --export SIGNATURE ...`: the shared library `libNAME.so` and
/// its header `NAME.h`; with `--emit c`, the library's C (to standard output).
pub fn library(
    file: &Path,
    include: &[PathBuf],
    name: &Path,
    exports: &[String],
    emit: Option<Emit>,
    output: Option<PathBuf>,
    opts: crate::native::CcOptions,
) -> u8 {
    if output.is_some() || !matches!(emit, None | Some(Emit::C)) {
        eprintln!("vlad: --lib NAME writes libNAME.so and NAME.h (no -o); --emit c prints its C");
        return 2;
    }
    let mut sigs = Vec::new();
    for e in exports {
        match e.parse::<vlad::export::Signature>() {
            Ok(s) => sigs.push(s),
            Err(e) => {
                eprintln!("vlad: error: {e}");
                return 2;
            }
        }
    }
    let Some(stem) = name.file_name().and_then(|s| s.to_str()) else {
        eprintln!("vlad: error: --lib {}: not a name", name.display());
        return 2;
    };
    let meter = crate::budget::Meter::analysis();
    let source = match crate::Source::read(file) {
        Ok(source) => source,
        Err(code) => return code,
    };
    let budget = Some(meter.budget());
    let c = match vlad::export::library_c(&source.path, &source.text, include, &sigs, budget) {
        Ok(c) => c,
        Err(e) => {
            eprint!("{e}");
            return 1;
        }
    };
    if matches!(emit, Some(Emit::C)) {
        return write_out(&c.c);
    }
    let so = name.with_file_name(format!("lib{stem}.so"));
    let header = name.with_file_name(format!("{stem}.h"));
    let written = vlad::cc::compile_shared(&c.c, &so, opts.native).and_then(|()| {
        std::fs::write(&header, &c.header)
            .map_err(|e| format!("cannot write {}: {e}", header.display()))
    });
    match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("vlad: {e}");
            1
        }
    }
}

/// Writes to standard output: status 0, also where the reader went away (`vlad compile ... |
/// head`); 1 with a message where it cannot be written (`> /dev/full`).
fn write_out(text: &str) -> u8 {
    match crate::write_stdout(text) {
        Ok(()) => 0,
        Err(code) => code,
    }
}
