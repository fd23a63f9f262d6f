//! Fixed-form source lines to statements.
//!
//! Fortran 77's card layout: a `C`, `c`, `*` or `!` in column 1 (or a blank line) is a comment;
//! columns 1-5 hold a statement label; a character other than blank or `0` in column 6 continues
//! the previous statement; the statement is in columns 7-72, and anything beyond column 72 is
//! ignored (it once held sequence numbers). A tab within the first six columns starts the
//! statement field at once (the common DEC extension; a digit right after the tab marks a
//! continuation). A `!` outside column 1 starts a comment to the end of the line.
//!
//! Blanks are not significant in fixed form (`DO 10 I = 1, N` is `DO10I=1,N`), so a statement
//! comes out as its characters without blanks, upper-cased, each with the byte offset it came
//! from: keywords are recognised on this text and every diagnostic still points at the column
//! the user wrote.

use vlad_core::Span;
use vlad_syntax::Diagnostic;

/// One statement: its label and its significant characters.
#[derive(Clone, Debug)]
pub struct Line {
    pub label: Option<(u32, Span)>,
    /// Upper-cased, blanks removed, with the byte offset of each character in the file.
    pub text: Vec<(char, u32)>,
    /// From the label (or the first character) to the last character of the statement.
    pub span: Span,
}

impl Line {
    /// The statement text as a string.
    pub fn string(&self) -> String {
        self.text.iter().map(|c| c.0).collect()
    }
}

/// The longest line of statement text kept (columns 7-72).
const LAST_COLUMN: usize = 72;

/// Whether a source line has statement text past column 72 (ignored).
pub fn cut_at_72(line: &str) -> bool {
    let first = line.chars().next();
    if matches!(first, Some('C' | 'c' | '*' | '!')) || line.contains('\t') {
        return false;
    }
    let beyond: String = line.chars().skip(LAST_COLUMN).collect();
    let body: String = line.chars().take(LAST_COLUMN).skip(6).collect();
    !beyond.trim().is_empty() && !body.contains('!')
}

/// Whether a source line continues the statement before it.
pub fn is_continuation(line: &str) -> bool {
    let first = line.chars().next();
    if matches!(first, Some('C' | 'c' | '*' | '!')) || line.trim().is_empty() {
        return false;
    }
    line.chars()
        .nth(5)
        .is_some_and(|c| c != ' ' && c != '0' && !line.chars().take(5).any(|c| c == '\t'))
}

/// The statements of a fixed-form source file.
pub fn statements(file: u32, src: &str) -> Result<Vec<Line>, Diagnostic> {
    let mut out: Vec<Line> = Vec::new();
    let mut offset = 0usize;
    for raw in src.split_inclusive('\n') {
        let line_start = offset;
        offset += raw.len();
        let line = raw.trim_end_matches(['\n', '\r']);
        let chars: Vec<(usize, char)> = line.char_indices().collect();
        let first = chars.first().map(|c| c.1);
        if matches!(first, Some('C' | 'c' | '*' | '!')) || line.trim().is_empty() {
            continue;
        }
        let at = |i: usize| Span::new(file, line_start + i, line_start + i + 1);
        // The label field, the continuation mark and where the statement field starts.
        let tab = chars.iter().take(6).position(|c| c.1 == '\t');
        let (label_chars, cont, body_from) = match tab {
            Some(t) => {
                let next = chars.get(t + 1).map(|c| c.1);
                if next.is_some_and(|c| c.is_ascii_digit() && c != '0') {
                    (&chars[..t], true, t + 2)
                } else {
                    (&chars[..t], false, t + 1)
                }
            }
            None => {
                let cont = chars.get(5).is_some_and(|c| c.1 != ' ' && c.1 != '0');
                (&chars[..chars.len().min(5)], cont, 6)
            }
        };
        let mut label: Option<(u32, Span)> = None;
        let mut digits = String::new();
        let mut label_start = None;
        let mut label_end = 0;
        for &(i, c) in label_chars {
            if c == ' ' {
                continue;
            }
            if c == '!' {
                break;
            }
            if !c.is_ascii_digit() {
                return Err(Diagnostic::new(
                    at(i),
                    format!(
                        "`{c}` in the label field (columns 1-5): fixed-form statements start in \
                         column 7, comments have C, * or ! in column 1"
                    ),
                ));
            }
            label_start.get_or_insert(i);
            label_end = i + 1;
            digits.push(c);
        }
        if let Some(s) = label_start {
            let span = Span::new(file, line_start + s, line_start + label_end);
            let value: u32 = digits
                .parse()
                .ok()
                .filter(|v| *v > 0)
                .ok_or_else(|| Diagnostic::new(span, "a statement label is 1 to 99999"))?;
            label = Some((value, span));
        }
        // The statement field: up to column 72 (a tab line counts its text from column 7).
        let limit = if tab.is_some() {
            body_from + (LAST_COLUMN - 6)
        } else {
            LAST_COLUMN
        };
        let mut text = Vec::new();
        let mut end = None;
        for &(i, c) in chars.iter().take(limit).skip(body_from) {
            if c == '!' {
                break;
            }
            if c == ' ' || c == '\t' {
                continue;
            }
            if !c.is_ascii() || c.is_ascii_control() {
                return Err(Diagnostic::new(
                    Span::new(file, line_start + i, line_start + i + c.len_utf8()),
                    format!("`{}` is not a Fortran character", c.escape_default()),
                ));
            }
            text.push((c.to_ascii_uppercase(), (line_start + i) as u32));
            end = Some(line_start + i + 1);
        }
        if cont {
            if let Some((_, s)) = label {
                return Err(Diagnostic::new(
                    s,
                    "a continuation line cannot have a label",
                ));
            }
            let Some(prev) = out.last_mut() else {
                return Err(Diagnostic::new(
                    at(body_from.saturating_sub(1)),
                    "a continuation line (column 6) with no statement to continue",
                ));
            };
            if let Some(e) = end {
                prev.span.end = e as u32;
            }
            prev.text.extend(text);
            continue;
        }
        if text.is_empty() {
            if let Some((_, s)) = label {
                return Err(Diagnostic::new(s, "a label with no statement"));
            }
            continue;
        }
        let start = label
            .map(|l| l.1.start as usize)
            .unwrap_or(text[0].1 as usize);
        out.push(Line {
            label,
            span: Span::new(file, start, end.unwrap_or(start + 1)),
            text,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(src: &str) -> Vec<(Option<u32>, String)> {
        statements(0, src)
            .expect("lexes")
            .into_iter()
            .map(|l| (l.label.map(|l| l.0), l.string()))
            .collect()
    }

    #[test]
    fn columns_labels_comments_and_continuations() {
        let src = "C A COMMENT\n* ANOTHER\n\n      DO 10 I = 1, N\n   10 X = X +\n     &    1.5\n      end ! trailing\n";
        assert_eq!(
            texts(src),
            vec![
                (None, "DO10I=1,N".to_string()),
                (Some(10), "X=X+1.5".to_string()),
                (None, "END".to_string()),
            ]
        );
    }

    #[test]
    fn columns_past_72_are_ignored_and_comment_lines_may_separate_continuations() {
        let src = format!(
            "      X = 1{}99999\nC between\n     1  + 2\n",
            " ".repeat(72 - 11)
        );
        assert_eq!(texts(&src), vec![(None, "X=1+2".to_string())]);
    }

    #[test]
    fn tab_format() {
        assert_eq!(
            texts("10\tY = 2\n\t1 + 3\n"),
            vec![(Some(10), "Y=2+3".to_string())]
        );
    }

    #[test]
    fn positions_point_at_the_source() {
        let lines = statements(0, "      X = Y\n").unwrap();
        assert_eq!(lines[0].text[2], ('Y', 10));
    }

    #[test]
    fn errors_are_positioned() {
        let e = statements(0, "  x   Y = 1\n").unwrap_err();
        assert_eq!(e.span.start, 2);
        assert!(e.message.contains("label field"), "{}", e.message);
        let e = statements(0, "     1X = 2\n").unwrap_err();
        assert!(e.message.contains("continuation"), "{}", e.message);
        let e = statements(0, "      X = 'A'\n      Y = é\n").unwrap_err();
        assert!(
            e.message.contains("not a Fortran character"),
            "{}",
            e.message
        );
    }
}
