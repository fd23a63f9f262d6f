//! The reader: source text to S-expressions with spans. It never panics and never recurses on
//! the native stack in proportion to nesting depth (lists are built with an explicit stack), so
//! hostile input is reported, not crashed on.

use crate::number::parse_number;
use crate::Diagnostic;
use vlad_core::Span;

/// A datum as read, with the span of its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Sexp {
    pub kind: SexpKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SexpKind {
    Symbol(String),
    Real(f64),
    Bool(bool),
    Str(String),
    /// A proper list (possibly empty).
    List(Vec<Sexp>),
    /// `(a b . c)`: at least one element before the dot.
    Dotted(Vec<Sexp>, Box<Sexp>),
    /// `#(a b c)`.
    Vector(Vec<Sexp>),
}

impl Sexp {
    pub fn symbol(&self) -> Option<&str> {
        match &self.kind {
            SexpKind::Symbol(s) => Some(s),
            _ => None,
        }
    }

    pub fn list(&self) -> Option<&[Sexp]> {
        match &self.kind {
            SexpKind::List(v) => Some(v),
            _ => None,
        }
    }

    /// `true` if this is a list whose head is the symbol `head`.
    pub fn is_form(&self, head: &str) -> bool {
        matches!(self.list(), Some([h, ..]) if h.symbol() == Some(head))
    }
}

impl std::fmt::Display for Sexp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            SexpKind::Symbol(s) => write!(f, "{s}"),
            SexpKind::Real(r) => write!(f, "{}", crate::number::format_real(*r)),
            SexpKind::Bool(b) => write!(f, "{}", if *b { "#t" } else { "#f" }),
            SexpKind::Str(s) => write!(f, "{s:?}"),
            SexpKind::List(v) | SexpKind::Vector(v) | SexpKind::Dotted(v, _) => {
                if matches!(self.kind, SexpKind::Vector(_)) {
                    write!(f, "#")?;
                }
                write!(f, "(")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        write!(f, " ")?;
                    }
                    write!(f, "{x}")?;
                }
                if let SexpKind::Dotted(_, t) = &self.kind {
                    write!(f, " . {t}")?;
                }
                write!(f, ")")
            }
        }
    }
}

enum Open {
    List,
    Vector,
    /// `'` waiting for its datum.
    Quote,
    /// `#;` waiting for the datum it comments out.
    Skip,
}

struct Frame {
    kind: Open,
    start: usize,
    items: Vec<Sexp>,
    /// Set once a `.` has been read in a list: the datum after it is the tail.
    dot: Option<usize>,
}

/// The deepest nesting of lists, vectors and quotes the reader accepts. Later stages walk the
/// syntax recursively; this bound keeps them far from the native stack's limit.
pub const MAX_NESTING: usize = 1000;

fn is_delimiter(c: char) -> bool {
    c.is_whitespace() || matches!(c, '(' | ')' | '[' | ']' | '"' | ';' | '\'')
}

/// Reads every datum in `text` (file index `file`).
pub fn read(file: u32, text: &str) -> Result<Vec<Sexp>, Diagnostic> {
    let sp = |s: usize, e: usize| Span::new(file, s, e);
    let bytes = text.as_bytes();
    let mut top: Vec<Sexp> = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    // A byte order mark, which some editors write at the start of UTF-8 files, is not text.
    let mut i = if text.starts_with('\u{feff}') { 3 } else { 0 };
    // Pushes a completed datum into the innermost open frame (closing pending quotes).
    fn deliver(stack: &mut Vec<Frame>, top: &mut Vec<Sexp>, mut d: Sexp, file: u32) {
        loop {
            match stack.last_mut() {
                None => {
                    top.push(d);
                    return;
                }
                Some(f) if matches!(f.kind, Open::Skip) => {
                    // The datum is commented out: it goes nowhere.
                    stack.pop();
                    return;
                }
                Some(f) if matches!(f.kind, Open::Quote) => {
                    let start = f.start;
                    stack.pop();
                    let q = Sexp {
                        kind: SexpKind::Symbol("quote".into()),
                        span: Span::new(file, start, start + 1),
                    };
                    let span = Span::new(file, start, d.span.end as usize);
                    d = Sexp {
                        kind: SexpKind::List(vec![q, d]),
                        span,
                    };
                }
                Some(f) => {
                    f.items.push(d);
                    return;
                }
            }
        }
    }
    while i < bytes.len() {
        if stack.len() > MAX_NESTING {
            let f = stack.last().expect("nonempty");
            return Err(Diagnostic::new(
                sp(f.start, f.start + 1),
                format!("data nested more than {MAX_NESTING} levels deep"),
            ));
        }
        let c = text[i..].chars().next().expect("in bounds");
        let clen = c.len_utf8();
        if c.is_whitespace() {
            i += clen;
            continue;
        }
        match c {
            ';' => {
                // To the end of the line, whichever line ends the file uses (CR LF, LF, CR).
                while i < bytes.len() && bytes[i] != b'\n' && bytes[i] != b'\r' {
                    i += 1;
                }
            }
            '#' if text[i..].starts_with("#;") => {
                stack.push(Frame {
                    kind: Open::Skip,
                    start: i,
                    items: vec![],
                    dot: None,
                });
                i += 2;
            }
            '#' if text[i..].starts_with("#|") => {
                let start = i;
                let mut depth = 0usize;
                loop {
                    if text[i..].starts_with("#|") {
                        depth += 1;
                        i += 2;
                    } else if text[i..].starts_with("|#") {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else if i >= bytes.len() {
                        return Err(Diagnostic::new(
                            sp(start, start + 2),
                            "unterminated block comment",
                        ));
                    } else {
                        i += text[i..].chars().next().map(|c| c.len_utf8()).unwrap_or(1);
                    }
                }
            }
            '(' | '[' => {
                stack.push(Frame {
                    kind: Open::List,
                    start: i,
                    items: vec![],
                    dot: None,
                });
                i += 1;
            }
            '#' if text[i..].starts_with("#(") => {
                stack.push(Frame {
                    kind: Open::Vector,
                    start: i,
                    items: vec![],
                    dot: None,
                });
                i += 2;
            }
            '\'' => {
                stack.push(Frame {
                    kind: Open::Quote,
                    start: i,
                    items: vec![],
                    dot: None,
                });
                i += 1;
            }
            ')' | ']' => {
                let Some(f) = stack.pop() else {
                    return Err(Diagnostic::new(
                        sp(i, i + 1),
                        "unexpected closing parenthesis",
                    ));
                };
                let span = sp(f.start, i + 1);
                let kind = match f.kind {
                    Open::Quote => {
                        return Err(Diagnostic::new(
                            sp(f.start, f.start + 1),
                            "quote without a datum",
                        ))
                    }
                    Open::Skip => {
                        return Err(Diagnostic::new(
                            sp(f.start, f.start + 2),
                            "`#;` without a datum to comment out",
                        ))
                    }
                    Open::Vector => SexpKind::Vector(f.items),
                    Open::List => match f.dot {
                        None => SexpKind::List(f.items),
                        Some(at) => {
                            let mut items = f.items;
                            if items.len() != at + 1 {
                                return Err(Diagnostic::new(
                                    span,
                                    "a dotted list needs exactly one datum after the dot",
                                ));
                            }
                            let tail = items.pop().expect("one after dot");
                            SexpKind::Dotted(items, Box::new(tail))
                        }
                    },
                };
                i += 1;
                deliver(&mut stack, &mut top, Sexp { kind, span }, file);
            }
            '"' => {
                let start = i;
                i += 1;
                let mut s = String::new();
                loop {
                    let Some(ch) = text[i..].chars().next() else {
                        return Err(Diagnostic::new(sp(start, start + 1), "unterminated string"));
                    };
                    i += ch.len_utf8();
                    match ch {
                        '"' => break,
                        '\\' => {
                            let Some(e) = text[i..].chars().next() else {
                                return Err(Diagnostic::new(
                                    sp(start, start + 1),
                                    "unterminated string",
                                ));
                            };
                            i += e.len_utf8();
                            s.push(match e {
                                'n' => '\n',
                                't' => '\t',
                                other => other,
                            });
                        }
                        _ => s.push(ch),
                    }
                }
                deliver(
                    &mut stack,
                    &mut top,
                    Sexp {
                        kind: SexpKind::Str(s),
                        span: sp(start, i),
                    },
                    file,
                );
            }
            _ => {
                let start = i;
                while i < bytes.len() {
                    let ch = text[i..].chars().next().expect("in bounds");
                    if is_delimiter(ch) {
                        break;
                    }
                    i += ch.len_utf8();
                }
                let tok = &text[start..i];
                let span = sp(start, i);
                if tok == "." {
                    match stack.last_mut() {
                        Some(f)
                            if matches!(f.kind, Open::List)
                                && f.dot.is_none()
                                && !f.items.is_empty() =>
                        {
                            f.dot = Some(f.items.len());
                            continue;
                        }
                        _ => return Err(Diagnostic::new(span, "unexpected `.`")),
                    }
                }
                if let Some(f) = stack.last() {
                    if let Some(at) = f.dot {
                        if f.items.len() > at {
                            return Err(Diagnostic::new(span, "only one datum may follow `.`"));
                        }
                    }
                }
                let kind = match tok {
                    "#t" | "#true" => SexpKind::Bool(true),
                    "#f" | "#false" => SexpKind::Bool(false),
                    _ => match parse_number(tok) {
                        Some(r) => SexpKind::Real(r),
                        None if tok.starts_with('#') => {
                            return Err(Diagnostic::new(span, format!("unknown syntax `{tok}`")))
                        }
                        None => SexpKind::Symbol(tok.to_string()),
                    },
                };
                deliver(&mut stack, &mut top, Sexp { kind, span }, file);
            }
        }
    }
    if let Some(f) = stack.last() {
        let (what, width) = match f.kind {
            Open::Quote => ("quote without a datum", 1),
            Open::Skip => ("`#;` without a datum to comment out", 2),
            _ => ("unclosed parenthesis", 1),
        };
        return Err(Diagnostic::new(sp(f.start, f.start + width), what));
    }
    Ok(top)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(text: &str) -> String {
        read(0, text)
            .unwrap()
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn reads_data() {
        assert_eq!(
            show("(a (b . c) #t #f 1.5 'x) ; comment\n #(1 2)"),
            "(a (b . c) #t #f 1.5 (quote x)) #(1 2)"
        );
        assert_eq!(show("''()"), "(quote (quote ()))");
        assert_eq!(show("[a b] #| block #| nested |# |# c"), "(a b) c");
        assert_eq!(show("(x ===> 3)"), "(x ===> 3)");
        assert_eq!(show("\"a\\\"b\""), "\"a\\\"b\"");
    }

    #[test]
    fn datum_comments_skip_one_datum() {
        assert_eq!(show("(a #;b c)"), "(a c)");
        assert_eq!(show("(a #; (b (c d)) e)"), "(a e)");
        assert_eq!(show("#;#;a b c"), "c");
        assert_eq!(show("'#;a b"), "(quote b)");
        assert_eq!(show("(a . #;b c)"), "(a . c)");
        assert_eq!(show("#;(define x 1) 2 ; #;3\n4"), "2 4");
        for (text, at) in [("(a #;)", 3), ("#;", 0), ("(#;", 1)] {
            let e = read(0, text).unwrap_err();
            assert_eq!(e.span.start as usize, at, "{text}: {e:?}");
        }
    }

    #[test]
    fn a_byte_order_mark_is_not_text() {
        let v = read(0, "\u{feff}(a)").unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].to_string(), "(a)");
        assert_eq!(v[0].span, Span::new(0, 3, 6));
    }

    #[test]
    fn comments_end_at_any_line_end() {
        assert_eq!(show("; one\r(a) ; two\r\n(b) ; three\n(c)"), "(a) (b) (c)");
    }

    #[test]
    fn spans_cover_the_text() {
        let v = read(0, "  (foo bar)").unwrap();
        assert_eq!(v[0].span, Span::new(0, 2, 11));
        assert_eq!(v[0].list().unwrap()[1].span, Span::new(0, 7, 10));
    }

    #[test]
    fn errors_are_positioned() {
        for (text, at) in [
            ("(a", 0),
            ("a)", 1),
            ("(a . )", 0),
            ("(. a)", 1),
            ("'", 0),
            ("\"abc", 0),
            ("#q", 0),
            ("(a . b c)", 7),
        ] {
            let e = read(0, text).unwrap_err();
            assert_eq!(e.span.start as usize, at, "{text}: {e:?}");
        }
    }

    #[test]
    fn deep_nesting_is_bounded() {
        let ok = "(".repeat(MAX_NESTING) + &")".repeat(MAX_NESTING);
        assert_eq!(read(0, &ok).unwrap().len(), 1);
        let text = "(".repeat(200_000) + &")".repeat(200_000);
        let e = read(0, &text).unwrap_err();
        assert!(e.message.contains("nested"), "{e:?}");
    }
}
