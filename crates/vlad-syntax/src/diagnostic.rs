//! Source files and error reports. Every error a user can cause is a [`Diagnostic`]: a message
//! and a span, rendered in the GNU `file:line:col: message` form (which editors and terminals
//! turn into links) followed by the source line and a caret under the offending text.

use std::fmt::Write as _;
use vlad_core::span::{BUILTIN_FILE_BASE, LIBRARY_FILE_BASE};
use vlad_core::Span;

/// One loaded source file.
pub struct SourceFile {
    pub path: String,
    pub text: String,
    line_starts: Vec<usize>,
}

impl SourceFile {
    fn new(path: String, text: String) -> SourceFile {
        let line_starts = line_starts(&text);
        SourceFile {
            path,
            text,
            line_starts,
        }
    }
}

/// All source files of a program, indexed by the `file` field of a [`Span`].
#[derive(Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
    /// The file id of `files[0]`: built-in code is read into a map with a base far from 0, so its
    /// spans can never be mistaken for positions in a user's files.
    base: u32,
    /// The standard library's files, ids from `LIBRARY_FILE_BASE`: their spans say that they
    /// are library code (`Span::is_library`).
    library: Vec<SourceFile>,
}

impl SourceMap {
    pub fn new() -> SourceMap {
        SourceMap::default()
    }

    /// A source map for built-in code, whose file ids no user source map uses.
    pub fn builtin() -> SourceMap {
        SourceMap {
            files: Vec::new(),
            base: BUILTIN_FILE_BASE,
            library: Vec::new(),
        }
    }

    /// Adds a file and returns its index.
    pub fn add(&mut self, path: impl Into<String>, text: impl Into<String>) -> u32 {
        self.files.push(SourceFile::new(path.into(), text.into()));
        self.base + (self.files.len() - 1) as u32
    }

    /// Adds a file of the standard library and returns its index (library code: see
    /// `Span::is_library`).
    pub fn add_library(&mut self, path: impl Into<String>, text: impl Into<String>) -> u32 {
        self.library.push(SourceFile::new(path.into(), text.into()));
        LIBRARY_FILE_BASE + (self.library.len() - 1) as u32
    }

    /// The files, in the order they were added (the user's, then the library's).
    pub fn files(&self) -> impl Iterator<Item = &SourceFile> {
        self.files.iter().chain(self.library.iter())
    }

    /// `true` if a file with this path was already added.
    pub fn contains_path(&self, path: &str) -> bool {
        self.files().any(|f| f.path == path)
    }

    pub fn file(&self, id: u32) -> Option<&SourceFile> {
        if let Some(f) = id
            .checked_sub(self.base)
            .and_then(|i| self.files.get(i as usize))
        {
            return Some(f);
        }
        if self.base == BUILTIN_FILE_BASE {
            return None;
        }
        self.library
            .get(id.checked_sub(LIBRARY_FILE_BASE)? as usize)
    }

    /// `(path, line, column)` of the start of `span`, 1-based, column in characters.
    pub fn location(&self, span: Span) -> Option<(&str, usize, usize)> {
        let f = self.file(span.file)?;
        let off = (span.start as usize).clamp(f.line_starts[0], f.text.len());
        let line = f.line_starts.partition_point(|&s| s <= off) - 1;
        let start = f.line_starts[line];
        let col = f
            .text
            .get(start..off)
            .map(|s| s.chars().count())
            .unwrap_or(0)
            + 1;
        Some((&f.path, line + 1, col))
    }

    /// What an error raised at `span` in the standard library means, if its line says so in a
    /// comment `; error: MESSAGE` (the library's checks of its arguments). The error is then
    /// reported, at the user's call site, with that message.
    pub fn library_message(&self, span: Span) -> Option<String> {
        if !span.is_library() {
            return None;
        }
        let (_, line, _) = self.location(span)?;
        let text = self.line_text(span.file, line);
        let (_, message) = text.split_once("; error: ")?;
        Some(message.trim().to_string())
    }

    /// The text of one line (1-based), without its newline.
    fn line_text(&self, file: u32, line: usize) -> &str {
        let Some(f) = self.file(file) else { return "" };
        let start = f.line_starts[line - 1];
        let end = f.line_starts.get(line).copied().unwrap_or(f.text.len());
        f.text[start..end].trim_end_matches(['\n', '\r'])
    }
}

/// Where each line of `text` starts: after CR LF, LF, or a CR alone (old Mac files; the
/// reader treats all three as line ends). The first line starts after a byte order mark, which
/// is not part of it.
fn line_starts(text: &str) -> Vec<usize> {
    let b = text.as_bytes();
    let mut starts = vec![if text.starts_with('\u{feff}') { 3 } else { 0 }];
    for (i, &c) in b.iter().enumerate() {
        if c == b'\n' || (c == b'\r' && b.get(i + 1) != Some(&b'\n')) {
            starts.push(i + 1);
        }
    }
    starts
}

/// An error with the place it is about.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    pub span: Span,
    pub message: String,
}

impl Diagnostic {
    pub fn new(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            span,
            message: message.into(),
        }
    }

    /// `file:line:col: error: message`, then the line and a caret excerpt. A diagnostic without a
    /// source position (for example one raised inside a built-in) still names the message.
    pub fn render(&self, sources: &SourceMap) -> String {
        let Some(site) = Site::of(self.span, sources) else {
            return format!("vlad: error: {}\n", self.message);
        };
        let mut out = format!("{}{}\n", site.prefix, self.message);
        site.excerpt(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_one_based_and_count_characters() {
        let mut sm = SourceMap::new();
        let f = sm.add("t.vlad", "(a)\n(λb c)\n");
        assert_eq!(sm.location(Span::new(f, 0, 1)), Some(("t.vlad", 1, 1)));
        let c = "(a)\n(λb ".len();
        assert_eq!(sm.location(Span::new(f, c, c + 1)), Some(("t.vlad", 2, 5)));
    }

    #[test]
    fn every_line_end_counts() {
        let mut sm = SourceMap::new();
        let f = sm.add("t.vlad", "a\rb\r\nc\nd\r\re");
        for (at, line) in [(0, 1), (2, 2), (5, 3), (7, 4), (10, 6)] {
            assert_eq!(
                sm.location(Span::new(f, at, at + 1)),
                Some(("t.vlad", line, 1))
            );
        }
        let r = Diagnostic::new(Span::new(f, 2, 3), "here").render(&sm);
        assert!(r.contains("2 | b\n  | ^\n"), "{r}");
    }

    #[test]
    fn a_byte_order_mark_is_not_a_column() {
        let mut sm = SourceMap::new();
        let f = sm.add("t.vlad", "\u{feff}(foo bar)\n");
        let d = Diagnostic::new(Span::new(f, 8, 11), "unbound variable bar");
        let r = d.render(&sm);
        assert!(r.starts_with("t.vlad:1:6: error:"), "{r}");
        assert!(r.contains("1 | (foo bar)\n  |      ^^^\n"), "{r}");
    }

    #[test]
    fn render_has_position_and_caret() {
        let mut sm = SourceMap::new();
        let f = sm.add("t.vlad", "(foo bar)\n");
        let d = Diagnostic::new(Span::new(f, 5, 8), "unbound variable bar");
        let r = d.render(&sm);
        assert!(
            r.starts_with("t.vlad:1:6: error: unbound variable bar\n"),
            "{r}"
        );
        assert!(r.contains("1 | (foo bar)\n  |      ^^^\n"), "{r}");
    }
}

/// Where an error is, as a diagnostic shows it: the text before the message
/// (`path:line:col: error: `), and the source line under it with a caret line marking the span.
/// The compiled code keeps sites in this form (a program's C holds each source line once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    pub prefix: String,
    /// The line's number, and its text.
    pub line: usize,
    pub text: String,
    /// The span's first column (1 for the first character) and its width on that line, in
    /// characters.
    pub col: usize,
    pub width: usize,
}

impl Site {
    /// The site of `span`, if it is in a source file.
    pub fn of(span: Span, sources: &SourceMap) -> Option<Site> {
        let (path, line, col) = sources.location(span)?;
        let text = sources.line_text(span.file, line).to_string();
        // Underline to the end of the span, or to the end of the line for multi-line spans.
        let f = sources.file(span.file)?;
        let start = (span.start as usize).min(f.text.len());
        let end = (span.end as usize).clamp(start, f.text.len());
        let same_line = f
            .text
            .get(start..end)
            .map(|s| s.chars().count())
            .unwrap_or(1);
        let rest_of_line = text.chars().count().saturating_sub(col - 1);
        Some(Site {
            prefix: format!("{path}:{line}:{col}: error: "),
            line,
            text,
            col,
            width: same_line.min(rest_of_line).max(1),
        })
    }

    /// The excerpt: the source line with its number, and the caret line.
    pub fn excerpt(&self, out: &mut String) {
        let line = self.line;
        let gutter = line.to_string().len();
        let _ = writeln!(out, "{:gutter$} |", "");
        let _ = writeln!(out, "{line} | {}", self.text);
        let _ = writeln!(
            out,
            "{:gutter$} | {}{}",
            "",
            " ".repeat(self.col - 1),
            "^".repeat(self.width)
        );
    }
}
