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

/// The first file id of the standard library's files (`SourceMap::add_library`): their code is
/// *library code*, whose errors are reported at the user's call site, like those of built-in
/// code (file ids from `BUILTIN_FILE_BASE`). User files count from 0.
pub const LIBRARY_FILE_BASE: u32 = 1 << 30;

/// The first file id of built-in code (the AD prelude).
pub const BUILTIN_FILE_BASE: u32 = u32::MAX / 2;

impl Span {
    /// `true` for a position in one of the user's files (not the standard library, not built-in
    /// code, not `NONE`).
    pub fn is_user(&self) -> bool {
        self.file < LIBRARY_FILE_BASE
    }

    /// `true` for a position in a file of the standard library.
    pub fn is_library(&self) -> bool {
        (LIBRARY_FILE_BASE..BUILTIN_FILE_BASE).contains(&self.file)
    }

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
