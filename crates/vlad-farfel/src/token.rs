//! Tokens of a statement's text (blanks already removed, upper-cased).
//!
//! Without blanks a number can run into an operator: `1.EQ.X` is `1` then `.EQ.`, while `1.E5`
//! is a real. A `.` after digits belongs to an operator when the letters after it spell one and
//! end with a `.`.

use vlad_core::Span;
use vlad_syntax::Diagnostic;

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    Name(String),
    /// An integer literal.
    Int(f64),
    /// A real literal; `true` if it is DOUBLE PRECISION (a `D` exponent).
    Real(f64, bool),
    /// `.TRUE.` or `.FALSE.`
    Logical(bool),
    /// `.AND.`, `.LT.`, ... (the letters between the dots).
    DotOp(&'static str),
    Plus,
    Minus,
    Star,
    Power,
    Slash,
    LParen,
    RParen,
    Comma,
    Equals,
    Colon,
}

#[derive(Clone, Debug)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
}

const DOT_OPS: &[&str] = &[
    "EQ", "NE", "LT", "LE", "GT", "GE", "AND", "OR", "NOT", "EQV", "NEQV", "TRUE", "FALSE",
];

/// The dot-operator spelled at `i` (which holds a `.`), and its length with both dots.
fn dot_op(text: &[(char, u32)], i: usize) -> Option<(&'static str, usize)> {
    let mut j = i + 1;
    let mut word = String::new();
    while j < text.len() && text[j].0.is_ascii_alphabetic() {
        word.push(text[j].0);
        j += 1;
    }
    if j < text.len() && text[j].0 == '.' {
        DOT_OPS
            .iter()
            .find(|op| **op == word)
            .map(|op| (*op, j + 1 - i))
    } else {
        None
    }
}

/// The span of characters `from..to` of `text`.
pub fn span_of(file: u32, text: &[(char, u32)], from: usize, to: usize) -> Span {
    let start = text.get(from).map_or(0, |c| c.1);
    let end = if to > from {
        text.get(to - 1).map_or(start + 1, |c| c.1 + 1)
    } else {
        start + 1
    };
    Span {
        file,
        start,
        end: end.max(start + 1),
    }
}

/// Tokenises `text`.
pub fn tokenize(file: u32, text: &[(char, u32)]) -> Result<Vec<Token>, Diagnostic> {
    let mut out = Vec::new();
    let mut i = 0;
    let sp = |a: usize, b: usize| span_of(file, text, a, b);
    while i < text.len() {
        let c = text[i].0;
        let start = i;
        let tok = if c.is_ascii_alphabetic() {
            let mut s = String::new();
            while i < text.len() && (text[i].0.is_ascii_alphanumeric() || text[i].0 == '_') {
                s.push(text[i].0);
                i += 1;
            }
            Tok::Name(s)
        } else if c.is_ascii_digit()
            || (c == '.' && text.get(i + 1).is_some_and(|d| d.0.is_ascii_digit()))
        {
            let mut s = String::new();
            let mut real = false;
            let mut double = false;
            while i < text.len() && text[i].0.is_ascii_digit() {
                s.push(text[i].0);
                i += 1;
            }
            if i < text.len() && text[i].0 == '.' && dot_op(text, i).is_none() {
                real = true;
                s.push('.');
                i += 1;
                while i < text.len() && text[i].0.is_ascii_digit() {
                    s.push(text[i].0);
                    i += 1;
                }
            }
            if i < text.len() && matches!(text[i].0, 'E' | 'D') {
                let mut j = i + 1;
                if j < text.len() && matches!(text[j].0, '+' | '-') {
                    j += 1;
                }
                if j < text.len() && text[j].0.is_ascii_digit() {
                    real = true;
                    double = text[i].0 == 'D';
                    s.push('E');
                    s.extend(text[i + 1..j].iter().map(|c| c.0));
                    i = j;
                    while i < text.len() && text[i].0.is_ascii_digit() {
                        s.push(text[i].0);
                        i += 1;
                    }
                }
            }
            let value: f64 = s
                .parse()
                .map_err(|_| Diagnostic::new(sp(start, i), "malformed number"))?;
            if real {
                Tok::Real(value, double)
            } else {
                Tok::Int(value)
            }
        } else {
            match c {
                '.' => match dot_op(text, i) {
                    Some((op, len)) => {
                        i += len;
                        match op {
                            "TRUE" => Tok::Logical(true),
                            "FALSE" => Tok::Logical(false),
                            op => Tok::DotOp(op),
                        }
                    }
                    None => {
                        return Err(Diagnostic::new(
                            sp(i, i + 1),
                            "`.` here is neither part of a number nor an operator such as .EQ.",
                        ))
                    }
                },
                '\'' | '"' => {
                    return Err(Diagnostic::new(
                        sp(i, i + 1),
                        "character constants are not supported (VLAD has no strings)",
                    ))
                }
                _ => {
                    i += 1;
                    match c {
                        '+' => Tok::Plus,
                        '-' => Tok::Minus,
                        '*' if text.get(i).is_some_and(|c| c.0 == '*') => {
                            i += 1;
                            Tok::Power
                        }
                        '*' => Tok::Star,
                        '/' if text.get(i).is_some_and(|c| c.0 == '/') => {
                            return Err(Diagnostic::new(
                                sp(start, i + 1),
                                "`//` (character concatenation) is not supported",
                            ))
                        }
                        '/' => Tok::Slash,
                        '(' => Tok::LParen,
                        ')' => Tok::RParen,
                        ',' => Tok::Comma,
                        '=' => Tok::Equals,
                        ':' => Tok::Colon,
                        _ => {
                            return Err(Diagnostic::new(
                                sp(start, i),
                                format!("unexpected character `{c}`"),
                            ))
                        }
                    }
                }
            }
        };
        out.push(Token {
            tok,
            span: sp(start, i),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        let text: Vec<(char, u32)> = s.chars().zip(0..).collect();
        tokenize(0, &text)
            .unwrap()
            .into_iter()
            .map(|t| t.tok)
            .collect()
    }

    #[test]
    fn numbers_and_dot_operators() {
        assert_eq!(
            toks("1.EQ.X"),
            vec![Tok::Int(1.0), Tok::DotOp("EQ"), Tok::Name("X".into())]
        );
        assert_eq!(toks("1.E5"), vec![Tok::Real(1e5, false)]);
        assert_eq!(toks("2.5D-1"), vec![Tok::Real(0.25, true)]);
        assert_eq!(toks(".5"), vec![Tok::Real(0.5, false)]);
        assert_eq!(toks("3."), vec![Tok::Real(3.0, false)]);
        assert_eq!(
            toks("X**2.AND..NOT..TRUE."),
            vec![
                Tok::Name("X".into()),
                Tok::Power,
                Tok::Int(2.0),
                Tok::DotOp("AND"),
                Tok::DotOp("NOT"),
                Tok::Logical(true)
            ]
        );
        assert_eq!(
            toks("A1E5"),
            vec![Tok::Name("A1E5".into())],
            "a name keeps its digits"
        );
    }

    #[test]
    fn strings_are_rejected_at_their_quote() {
        let text: Vec<(char, u32)> = "X='A'".chars().zip(10..).collect();
        let e = tokenize(0, &text).unwrap_err();
        assert_eq!(e.span.start, 12);
    }
}
