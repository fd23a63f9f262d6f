//! Source positions. Resolving a span to `file:line:col` is the syntax crate's job (it owns the
//! source map); Core only carries the numbers so that run-time errors can name their site.

/// The first file id of built-in code (the AD prelude's source map numbers its files from
/// here), far above any user file's.
pub const BUILTIN_FILES: u32 = u32::MAX / 2;

/// A byte range in one source file. `file == u32::MAX` marks code with no source (the prelude of
/// transformed primitives, synthesized code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Span {
    pub file: u32,
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub const NONE: Span = Span {
        file: u32::MAX,
        start: 0,
        end: 0,
    };

    pub fn new(file: u32, start: usize, end: usize) -> Span {
        Span {
            file,
            start: start as u32,
            end: end as u32,
        }
    }

    pub fn is_none(&self) -> bool {
        self.file == u32::MAX
    }

    /// Whether the span is in the user's program: built-in code (the AD prelude) has file ids
    /// far above any user file's (`SourceMap::builtin` in the syntax crate), and so has no span.
    pub fn is_user(&self) -> bool {
        self.file < BUILTIN_FILES
    }
}
