//! Source positions. Resolving a span to `file:line:col` is the syntax crate's job (it owns the
//! source map); Core only carries the numbers so that run-time errors can name their site.

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
}
