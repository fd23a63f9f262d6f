//! Source files and error reports. Every error a user can cause is a [`Diagnostic`]: a message
//! and a span, rendered in the GNU `file:line:col: message` form (which editors and terminals
//! turn into links) followed by the source line and a caret under the offending text.

use std::fmt::Write as _;
use vlad_core::Span;

/// One loaded source file.
pub struct SourceFile {
    pub path: String,
    pub text: String,
    line_starts: Vec<usize>,
}

/// All source files of a program, indexed by the `file` field of a [`Span`].
#[derive(Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
    /// The file id of `files[0]`: built-in code is read into a map with a base far from 0, so its
    /// spans can never be mistaken for positions in a user's files.
    base: u32,
}

impl SourceMap {
    pub fn new() -> SourceMap {
        SourceMap::default()
    }

    /// A source map for built-in code, whose file ids no user source map uses.
    pub fn builtin() -> SourceMap {
        SourceMap {
            files: Vec::new(),
            base: u32::MAX / 2,
        }
    }

    /// Adds a file and returns its index.
    pub fn add(&mut self, path: impl Into<String>, text: impl Into<String>) -> u32 {
        let text = text.into();
        let line_starts = line_starts(&text);
        self.files.push(SourceFile {
            path: path.into(),
            text,
            line_starts,
        });
        self.base + (self.files.len() - 1) as u32
    }

    /// The files, in the order they were added.
    pub fn files(&self) -> impl Iterator<Item = &SourceFile> {
        self.files.iter()
    }

    /// `true` if a file with this path was already added.
    pub fn contains_path(&self, path: &str) -> bool {
        self.files.iter().any(|f| f.path == path)
    }

    pub fn file(&self, id: u32) -> Option<&SourceFile> {
        self.files.get(id.checked_sub(self.base)? as usize)
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
        let Some((path, line, col)) = sources.location(self.span) else {
            return format!("vlad: error: {}\n", self.message);
        };
        let mut out = format!("{path}:{line}:{col}: error: {}\n", self.message);
        let text = sources.line_text(self.span.file, line);
        let gutter = line.to_string().len();
        let _ = writeln!(out, "{:gutter$} |", "");
        let _ = writeln!(out, "{line} | {text}");
        // Underline to the end of the span, or to the end of the line for multi-line spans.
        let f = sources.file(self.span.file).expect("located");
        let start = (self.span.start as usize).min(f.text.len());
        let end = (self.span.end as usize).clamp(start, f.text.len());
        let same_line = f
            .text
            .get(start..end)
            .map(|s| s.chars().count())
            .unwrap_or(1);
        let rest_of_line = text.chars().count().saturating_sub(col - 1);
        let width = same_line.min(rest_of_line).max(1);
        let _ = writeln!(
            out,
            "{:gutter$} | {}{}",
            "",
            " ".repeat(col - 1),
            "^".repeat(width)
        );
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
