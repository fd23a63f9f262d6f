//! Statements to program units.
//!
//! Each statement is classified on its blank-free text, the way fixed-form compilers do it: an
//! `IF(...)` followed by more text is an IF; a `=` outside parentheses makes an assignment,
//! unless the statement starts with `DO` and a comma follows the `=` (`DO10I=1,N` against
//! `DO10I=1.5`); anything else is recognised by its leading keyword. The rest of the statement is
//! tokenised and parsed by recursive descent.
//!
//! Units nest (paper 000's nested subprograms): a SUBROUTINE or FUNCTION header inside a unit
//! opens a subprogram of that unit, closed by its own END. Labelled DO loops end at their
//! terminal statement, which nested loops may share; IF, DO/END DO and ADF/ADR blocks nest.

use crate::ast::*;
use crate::lex::Line;
use crate::token::{span_of, tokenize, Tok, Token};
use vlad_core::Span;
use vlad_syntax::Diagnostic;

type R<T> = Result<T, Diagnostic>;

/// A subprogram header: the name, where it is, and the dummy arguments.
type Header = (String, Span, Vec<(String, Span)>);

fn err<T>(span: Span, msg: impl Into<String>) -> R<T> {
    Err(Diagnostic::new(span, msg))
}

/// How deeply expressions may nest (parentheses, unary operators): a bound on the parser's
/// recursion, far beyond what programs write.
const MAX_DEPTH: usize = 200;

/// Statements the subset leaves out, recognised so that the error names them.
const UNSUPPORTED: &[&str] = &[
    "BLOCKDATA",
    "BACKSPACE",
    "CHARACTER",
    "COMMON",
    "COMPLEX",
    "DOUBLECOMPLEX",
    "DATA",
    "ENDFILE",
    "ENTRY",
    "EQUIVALENCE",
    "FORMAT",
    "INQUIRE",
    "NAMELIST",
    "OPEN",
    "CLOSE",
    "REWIND",
    "SAVE",
    "ASSIGN",
    "PAUSE",
    "INCLUDE",
    "SELECTCASE",
    "MODULE",
    "USE",
    "CONTAINS",
    "ALLOCATE",
    "CYCLE",
    "EXIT",
    "RECURSIVE",
    "INTERFACE",
];

/// What a statement is, before the structure is built.
enum Head {
    Program(String, Span),
    Subroutine(String, Span, Vec<(String, Span)>),
    Function(Option<Ty>, String, Span, Vec<(String, Span)>),
    End,
    EndIf,
    EndDo,
    EndAd(bool, Vec<AdItem>),
    Else,
    ElseIf(Expr),
    BlockIf(Expr),
    Decl(Decl),
    Do {
        label: Option<(u32, Span)>,
        var: Ref,
        start: Expr,
        end: Expr,
        step: Option<Expr>,
    },
    AdOpen(bool, Vec<AdItem>),
    Simple(StmtKind),
}

/// What ended a sequence of statements.
enum Ender {
    End(Span, Option<(u32, Span)>),
    EndIf(Option<(u32, Span)>, Span),
    Else(Option<(u32, Span)>, Span),
    ElseIf(Expr, Option<(u32, Span)>, Span),
    EndDo(Option<(u32, Span)>, Span),
    EndAd(bool, Vec<AdItem>, Span),
    /// The terminal statement of a labelled DO (already part of the sequence).
    Label(u32),
    Eof,
}

pub struct Parser {
    file: u32,
    /// Byte offsets where lines start (for line numbers in messages).
    line_starts: Vec<usize>,
    lines: Vec<Line>,
    heads: Vec<Option<Head>>,
    pos: usize,
    next_id: NodeId,
    /// Terminal labels of the labelled DO loops being parsed, innermost last.
    do_labels: Vec<u32>,
    eof: Span,
}

/// Parses the statements of a file into its program units.
pub fn parse(file: u32, src: &str, lines: Vec<Line>) -> R<Vec<Unit>> {
    let eof = Span::new(file, src.len().saturating_sub(1), src.len());
    let mut line_starts = vec![0];
    line_starts.extend(src.match_indices('\n').map(|(i, _)| i + 1));
    let mut p = Parser {
        file,
        line_starts,
        heads: Vec::new(),
        lines,
        pos: 0,
        next_id: 0,
        do_labels: Vec::new(),
        eof,
    };
    let mut heads = Vec::with_capacity(p.lines.len());
    for i in 0..p.lines.len() {
        let line = p.lines[i].clone();
        heads.push(Some(p.classify(&line.text, line.span)?));
    }
    p.heads = heads;
    p.file_units()
}

fn starts(text: &[(char, u32)], kw: &str) -> bool {
    text.len() >= kw.len() && text.iter().zip(kw.chars()).all(|(a, b)| a.0 == b)
}

fn is(text: &[(char, u32)], kw: &str) -> bool {
    text.len() == kw.len() && starts(text, kw)
}

/// The index of the `)` matching the `(` at `open`.
fn matching(text: &[(char, u32)], open: usize) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in text.iter().enumerate().skip(open) {
        match c.0 {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The index of the first `ch` outside parentheses at or after `from`.
fn top_level(text: &[(char, u32)], ch: char, from: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (i, c) in text.iter().enumerate().skip(from) {
        match c.0 {
            '(' => depth += 1,
            ')' => depth -= 1,
            x if x == ch && depth == 0 => return Some(i),
            _ => {}
        }
    }
    None
}

impl Parser {
    fn id(&mut self) -> NodeId {
        self.next_id += 1;
        self.next_id
    }

    fn sp(&self, text: &[(char, u32)], a: usize, b: usize) -> Span {
        span_of(self.file, text, a, b)
    }

    /// A token cursor over `text[from..]`.
    fn tokens(&self, text: &[(char, u32)], from: usize) -> R<Vec<Token>> {
        tokenize(self.file, &text[from.min(text.len())..])
    }

    fn classify(&mut self, text: &[(char, u32)], span: Span) -> R<Head> {
        let all = |p: &Parser| p.sp(text, 0, text.len());
        // IF(...)...: a block IF, a logical IF, or an arithmetic IF.
        if starts(text, "IF(") || starts(text, "ELSEIF(") {
            let open = if starts(text, "IF(") { 2 } else { 6 };
            let Some(close) = matching(text, open) else {
                return err(all(self), "unbalanced parentheses");
            };
            let rest = &text[close + 1..];
            let is_else = open == 6;
            if !rest.is_empty() && rest[0].0 != '=' || is_else {
                let cond = self.expr_of(text, open + 1, close)?;
                if is(rest, "THEN") {
                    return Ok(if is_else {
                        Head::ElseIf(cond)
                    } else {
                        Head::BlockIf(cond)
                    });
                }
                if is_else {
                    return err(self.sp(text, close + 1, text.len()), "ELSE IF needs THEN");
                }
                if rest[0].0.is_ascii_digit() {
                    return err(
                        all(self),
                        "the arithmetic IF is not supported: use IF (...) GOTO",
                    );
                }
                let inner_span = self.sp(text, close + 1, text.len());
                let inner = self.classify(rest, inner_span)?;
                let kind = match inner {
                    Head::Simple(k) => k,
                    _ => {
                        return err(
                            inner_span,
                            "a logical IF takes one simple statement (assignment, CALL, GOTO, \
                             RETURN, STOP, READ, PRINT or CONTINUE)",
                        )
                    }
                };
                let inner = Stmt {
                    id: self.id(),
                    label: None,
                    kind,
                    span: inner_span,
                };
                return Ok(Head::Simple(StmtKind::LogicalIf(cond, Box::new(inner))));
            }
            if rest.is_empty() {
                return err(all(self), "IF (...) needs THEN or a statement");
            }
        }
        // Assignments and DO statements have a `=` outside parentheses.
        if let Some(eq) = top_level(text, '=', 0) {
            if starts(text, "DO") && top_level(text, ',', eq).is_some() {
                return self.do_statement(text);
            }
            let lhs = self.ref_of(text, 0, eq)?;
            let rhs = self.expr_of(text, eq + 1, text.len())?;
            return Ok(Head::Simple(StmtKind::Assign(lhs, rhs)));
        }
        for kw in ["ENDIF", "ENDDO"] {
            if is(text, kw) {
                return Ok(if kw == "ENDIF" {
                    Head::EndIf
                } else {
                    Head::EndDo
                });
            }
        }
        if starts(text, "ENDADF") || starts(text, "ENDADR") {
            let reverse = text[5].0 == 'R';
            let items = if text.len() > 6 {
                self.ad_list(text, 6, true, reverse)?
            } else {
                Vec::new()
            };
            return Ok(Head::EndAd(reverse, items));
        }
        if is(text, "END") {
            return Ok(Head::End);
        }
        for kw in ["ENDPROGRAM", "ENDSUBROUTINE", "ENDFUNCTION"] {
            if starts(text, kw) {
                return Ok(Head::End);
            }
        }
        if is(text, "ELSE") {
            return Ok(Head::Else);
        }
        if starts(text, "ADF(") || starts(text, "ADR(") {
            let reverse = text[2].0 == 'R';
            let items = self.ad_list(text, 3, false, reverse)?;
            return Ok(Head::AdOpen(reverse, items));
        }
        if starts(text, "PROGRAM") {
            let toks = self.tokens(text, 7)?;
            return match &toks[..] {
                [Token {
                    tok: Tok::Name(n),
                    span,
                }] => Ok(Head::Program(n.clone(), *span)),
                _ => err(all(self), "PROGRAM takes a name"),
            };
        }
        if starts(text, "SUBROUTINE") {
            let (name, nspan, params) = self.header(text, 10, false)?;
            return Ok(Head::Subroutine(name, nspan, params));
        }
        if starts(text, "FUNCTION") {
            let (name, nspan, params) = self.header(text, 8, true)?;
            return Ok(Head::Function(None, name, nspan, params));
        }
        if let Some((ty, after)) = self.type_keyword(text)? {
            if starts(&text[after..], "FUNCTION") {
                if let Ok((name, nspan, params)) = self.header(text, after + 8, true) {
                    return Ok(Head::Function(Some(ty), name, nspan, params));
                }
            }
            let entities = self.entities(text, after, false)?;
            return Ok(Head::Decl(Decl::Type(ty, entities, span)));
        }
        if starts(text, "DIMENSION") {
            let entities = self.entities(text, 9, true)?;
            return Ok(Head::Decl(Decl::Dimension(entities)));
        }
        if starts(text, "PARAMETER(") {
            return self.parameter(text);
        }
        if starts(text, "EXTERNAL") || starts(text, "INTRINSIC") {
            let from = if starts(text, "EXTERNAL") { 8 } else { 9 };
            let names = self.name_list(text, from)?;
            return Ok(Head::Decl(if from == 8 {
                Decl::External(names)
            } else {
                Decl::Intrinsic(names)
            }));
        }
        if starts(text, "IMPLICIT") {
            return self.implicit(text, span);
        }
        if starts(text, "CALL") {
            let toks = self.tokens(text, 4)?;
            let mut c = Cursor::new(self, &toks, all(self));
            let (name, nspan) = c.name("a subroutine name after CALL")?;
            let args = if c.at(&Tok::LParen) {
                c.next();
                c.args()?
            } else {
                Vec::new()
            };
            c.finish()?;
            return Ok(Head::Simple(StmtKind::Call(name, nspan, args)));
        }
        if starts(text, "GOTO") {
            let rest = &text[4..];
            if !rest.is_empty() && rest.iter().all(|c| c.0.is_ascii_digit()) {
                let digits: String = rest.iter().map(|c| c.0).collect();
                let lspan = self.sp(text, 4, text.len());
                let label = digits
                    .parse::<u32>()
                    .map_err(|_| Diagnostic::new(lspan, "a statement label is 1 to 99999"))?;
                return Ok(Head::Simple(StmtKind::Goto(label, lspan)));
            }
            return err(
                all(self),
                "only GOTO label is supported (not the computed or assigned GOTO)",
            );
        }
        if is(text, "RETURN") {
            return Ok(Head::Simple(StmtKind::Return));
        }
        if starts(text, "RETURN") {
            return err(all(self), "alternate returns (RETURN n) are not supported");
        }
        if is(text, "CONTINUE") {
            return Ok(Head::Simple(StmtKind::Continue));
        }
        if starts(text, "STOP") && text[4..].iter().all(|c| c.0.is_ascii_digit()) {
            return Ok(Head::Simple(StmtKind::Stop));
        }
        if starts(text, "READ") {
            let from = self.io_control(text, 4, &["*", "5"], "READ")?;
            let items = self.io_list(text, from)?;
            return Ok(Head::Simple(StmtKind::Read(items)));
        }
        if starts(text, "PRINT") || starts(text, "WRITE") {
            let from = self.io_control(text, 5, &["*", "6"], &self.word(text, 5))?;
            let items = self.io_list(text, from)?;
            return Ok(Head::Simple(StmtKind::Print(items)));
        }
        if starts(text, "DOWHILE") {
            return err(all(self), "DO WHILE is not supported: use IF (...) GOTO");
        }
        if starts(text, "DO") {
            return err(all(self), "a DO statement needs a variable, =, and bounds");
        }
        for kw in UNSUPPORTED {
            if starts(text, kw) {
                return err(
                    all(self),
                    format!("{kw} is not supported by Farfel (docs/farfel.md lists the subset)"),
                );
            }
        }
        err(
            all(self),
            "unrecognised statement (docs/farfel.md lists the supported subset)",
        )
    }

    fn word(&self, text: &[(char, u32)], n: usize) -> String {
        text.iter().take(n).map(|c| c.0).collect()
    }

    fn expr_of(&mut self, text: &[(char, u32)], from: usize, to: usize) -> R<Expr> {
        let toks = tokenize(self.file, &text[from..to])?;
        let whole = self.sp(text, from, to);
        let mut c = Cursor::new(self, &toks, whole);
        let e = c.expr()?;
        c.finish()?;
        Ok(e)
    }

    fn ref_of(&mut self, text: &[(char, u32)], from: usize, to: usize) -> R<Ref> {
        let toks = tokenize(self.file, &text[from..to])?;
        let whole = self.sp(text, from, to);
        let mut c = Cursor::new(self, &toks, whole);
        let r = c.reference()?;
        c.finish()?;
        Ok(r)
    }

    /// `TYPE[*n]` at the start of `text`: the type and where the rest starts.
    fn type_keyword(&self, text: &[(char, u32)]) -> R<Option<(Ty, usize)>> {
        let (ty, mut at) = if starts(text, "DOUBLEPRECISION") {
            (Ty::Double, 15)
        } else if starts(text, "INTEGER") {
            (Ty::Int, 7)
        } else if starts(text, "REAL") && !starts(text, "READ") {
            (Ty::Real, 4)
        } else if starts(text, "LOGICAL") {
            (Ty::Logical, 7)
        } else {
            return Ok(None);
        };
        let mut ty = ty;
        if text.get(at).is_some_and(|c| c.0 == '*') {
            let from = at + 1;
            let mut end = from;
            while end < text.len() && text[end].0.is_ascii_digit() {
                end += 1;
            }
            let size: String = text[from..end].iter().map(|c| c.0).collect();
            ty = match (ty, size.as_str()) {
                (Ty::Real, "8") => Ty::Double,
                (Ty::Real, "4") => Ty::Real,
                (Ty::Int, "2" | "4" | "8") => Ty::Int,
                (Ty::Logical, "1" | "2" | "4" | "8") => Ty::Logical,
                _ => {
                    return err(
                        self.sp(text, 0, end),
                        "unsupported size (REAL*4, REAL*8, INTEGER*n and LOGICAL*n are known)",
                    )
                }
            };
            at = end;
        }
        Ok(Some((ty, at)))
    }

    /// `NAME[(params)]` after a SUBROUTINE or FUNCTION keyword.
    fn header(&mut self, text: &[(char, u32)], from: usize, parens_required: bool) -> R<Header> {
        let toks = self.tokens(text, from)?;
        let whole = self.sp(text, 0, text.len());
        let mut c = Cursor::new(self, &toks, whole);
        let (name, span) = c.name("a subprogram name")?;
        let mut params = Vec::new();
        if c.at(&Tok::LParen) {
            c.next();
            if !c.at(&Tok::RParen) {
                loop {
                    if c.at(&Tok::Star) {
                        return err(c.span(), "alternate returns (*) are not supported");
                    }
                    params.push(c.name("a dummy argument name")?);
                    if !c.at(&Tok::Comma) {
                        break;
                    }
                    c.next();
                }
            }
            c.expect(&Tok::RParen, "`)`")?;
        } else if parens_required {
            return err(
                c.span(),
                "a FUNCTION needs its argument list: FUNCTION F(...)",
            );
        }
        c.finish()?;
        Ok((name, span, params))
    }

    /// Declarators: `X, A(10), B(0:N, *)`.
    fn entities(&mut self, text: &[(char, u32)], from: usize, need_dims: bool) -> R<Vec<Entity>> {
        let toks = self.tokens(text, from)?;
        let whole = self.sp(text, 0, text.len());
        let mut c = Cursor::new(self, &toks, whole);
        let mut out = Vec::new();
        if c.done() {
            return err(whole, "a declaration needs at least one name");
        }
        loop {
            let (name, span) = c.name("a name")?;
            let dims = if c.at(&Tok::LParen) {
                c.next();
                let mut dims = Vec::new();
                loop {
                    let start = c.span();
                    let first = if c.at(&Tok::Star) {
                        c.next();
                        None
                    } else {
                        Some(c.expr()?)
                    };
                    let dim = if c.at(&Tok::Colon) {
                        c.next();
                        let hi = if c.at(&Tok::Star) {
                            c.next();
                            None
                        } else {
                            Some(c.expr()?)
                        };
                        let Some(lo) = first else {
                            return err(start, "`*` can only be an upper bound");
                        };
                        Dim {
                            lo: Some(lo),
                            hi,
                            span: start,
                        }
                    } else {
                        Dim {
                            lo: None,
                            hi: first,
                            span: start,
                        }
                    };
                    dims.push(dim);
                    if c.at(&Tok::Comma) {
                        c.next();
                        continue;
                    }
                    c.expect(&Tok::RParen, "`)` or `,`")?;
                    break;
                }
                Some(dims)
            } else {
                if need_dims {
                    return err(span, "DIMENSION needs the array's bounds: DIMENSION A(10)");
                }
                None
            };
            out.push(Entity { name, span, dims });
            if c.done() {
                break;
            }
            c.expect(&Tok::Comma, "`,`")?;
        }
        Ok(out)
    }

    fn parameter(&mut self, text: &[(char, u32)]) -> R<Head> {
        let toks = self.tokens(text, 9)?;
        let whole = self.sp(text, 0, text.len());
        let mut c = Cursor::new(self, &toks, whole);
        c.expect(&Tok::LParen, "`(`")?;
        let mut out = Vec::new();
        loop {
            let (name, span) = c.name("a constant's name")?;
            c.expect(&Tok::Equals, "`=`")?;
            let e = c.expr()?;
            out.push((name, span, e));
            if c.at(&Tok::Comma) {
                c.next();
                continue;
            }
            c.expect(&Tok::RParen, "`)` or `,`")?;
            break;
        }
        c.finish()?;
        Ok(Head::Decl(Decl::Parameter(out)))
    }

    fn name_list(&mut self, text: &[(char, u32)], from: usize) -> R<Vec<(String, Span)>> {
        let toks = self.tokens(text, from)?;
        let whole = self.sp(text, 0, text.len());
        let mut c = Cursor::new(self, &toks, whole);
        let mut out = vec![c.name("a name")?];
        while c.at(&Tok::Comma) {
            c.next();
            out.push(c.name("a name")?);
        }
        c.finish()?;
        Ok(out)
    }

    fn implicit(&mut self, text: &[(char, u32)], span: Span) -> R<Head> {
        if is(text, "IMPLICITNONE") {
            return Ok(Head::Decl(Decl::Implicit(None, span)));
        }
        let mut rules = Vec::new();
        let mut at = 8;
        loop {
            let Some((ty, after)) = self.type_keyword(&text[at..])? else {
                return err(
                    self.sp(text, at, text.len()),
                    "IMPLICIT takes NONE or a type with letter ranges: IMPLICIT DOUBLE PRECISION (A-H, O-Z)",
                );
            };
            let open = at + after;
            if text.get(open).map(|c| c.0) != Some('(') {
                return err(self.sp(text, open, open + 1), "expected `(` and letters");
            }
            let Some(close) = matching(text, open) else {
                return err(self.sp(text, open, text.len()), "unbalanced parentheses");
            };
            let toks = tokenize(self.file, &text[open + 1..close])?;
            let whole = self.sp(text, open, close + 1);
            let mut c = Cursor::new(self, &toks, whole);
            loop {
                let letter = |c: &mut Cursor| -> R<char> {
                    let (n, s) = c.name("a letter")?;
                    let mut ch = n.chars();
                    match (ch.next(), ch.next()) {
                        (Some(l), None) => Ok(l),
                        _ => err(s, "IMPLICIT takes single letters (A-H)"),
                    }
                };
                let a = letter(&mut c)?;
                let b = if c.at(&Tok::Minus) {
                    c.next();
                    letter(&mut c)?
                } else {
                    a
                };
                rules.push((ty, a, b));
                if c.done() {
                    break;
                }
                c.expect(&Tok::Comma, "`,`")?;
            }
            at = close + 1;
            if at >= text.len() {
                break;
            }
            if text[at].0 != ',' {
                return err(self.sp(text, at, at + 1), "expected `,`");
            }
            at += 1;
        }
        Ok(Head::Decl(Decl::Implicit(Some(rules), span)))
    }

    fn do_statement(&mut self, text: &[(char, u32)]) -> R<Head> {
        let mut at = 2;
        let mut label = None;
        while at < text.len() && text[at].0.is_ascii_digit() {
            at += 1;
        }
        if at > 2 {
            let digits: String = text[2..at].iter().map(|c| c.0).collect();
            let lspan = self.sp(text, 2, at);
            let value = digits
                .parse::<u32>()
                .ok()
                .filter(|v| *v > 0)
                .ok_or_else(|| Diagnostic::new(lspan, "a statement label is 1 to 99999"))?;
            label = Some((value, lspan));
            if text.get(at).is_some_and(|c| c.0 == ',') {
                at += 1;
            }
        }
        let toks = self.tokens(text, at)?;
        let whole = self.sp(text, 0, text.len());
        let mut c = Cursor::new(self, &toks, whole);
        let (name, name_span) = c.name("the DO variable")?;
        let var = Ref {
            id: c.p.id(),
            name,
            name_span,
            subs: None,
            span: name_span,
        };
        c.expect(&Tok::Equals, "`=`")?;
        let start = c.expr()?;
        c.expect(&Tok::Comma, "`,`")?;
        let end = c.expr()?;
        let step = if c.at(&Tok::Comma) {
            c.next();
            Some(c.expr()?)
        } else {
            None
        };
        c.finish()?;
        Ok(Head::Do {
            label,
            var,
            start,
            end,
            step,
        })
    }

    /// The `(unit, format)` or `*,` of a READ, PRINT or WRITE: where the item list starts.
    fn io_control(
        &mut self,
        text: &[(char, u32)],
        from: usize,
        units: &[&str],
        what: &str,
    ) -> R<usize> {
        let rest: String = text[from..].iter().map(|c| c.0).collect();
        let bad = |p: &Parser| {
            err(
                p.sp(text, 0, text.len()),
                format!(
                    "only list-directed {what} is supported: {what} *, ... or {what} (*, *) ..."
                ),
            )
        };
        if what == "PRINT" || what == "READ" {
            if rest == "*" {
                return Ok(text.len());
            }
            if rest.starts_with("*,") {
                return Ok(from + 2);
            }
            if what == "PRINT" {
                return bad(self);
            }
        }
        if !rest.starts_with('(') {
            return bad(self);
        }
        let Some(close) = matching(text, from) else {
            return err(self.sp(text, from, text.len()), "unbalanced parentheses");
        };
        let inner: String = text[from + 1..close].iter().map(|c| c.0).collect();
        let ok = inner
            .split_once(',')
            .is_some_and(|(u, f)| units.contains(&u) && f == "*");
        if !ok {
            return bad(self);
        }
        if text.get(close + 1).is_some_and(|c| c.0 == ',') {
            return err(
                self.sp(text, close + 1, close + 2),
                "no `,` after the (unit, format) list",
            );
        }
        Ok(close + 1)
    }

    fn io_list(&mut self, text: &[(char, u32)], from: usize) -> R<Vec<IoItem>> {
        let toks = self.tokens(text, from)?;
        let whole = self.sp(text, 0, text.len());
        let mut c = Cursor::new(self, &toks, whole);
        if c.done() {
            return err(whole, "an input/output statement needs at least one item");
        }
        let mut items = Vec::new();
        loop {
            items.push(c.io_item()?);
            if c.done() {
                break;
            }
            c.expect(&Tok::Comma, "`,`")?;
        }
        Ok(items)
    }

    /// `( items )` of an ADF/ADR statement or of its END: the opening or closing assignments.
    fn ad_list(
        &mut self,
        text: &[(char, u32)],
        from: usize,
        closing: bool,
        reverse: bool,
    ) -> R<Vec<AdItem>> {
        let toks = self.tokens(text, from)?;
        let whole = self.sp(text, 0, text.len());
        let mut c = Cursor::new(self, &toks, whole);
        c.expect(&Tok::LParen, "`(`")?;
        // ADF(X): the shorthand for ADF(TANGENT(X) = 1).
        if !closing {
            let save = c.pos;
            if let Tok::Name(n) = c.peek_tok() {
                let keyword = if reverse { "COTANGENT" } else { "TANGENT" };
                if n != keyword {
                    let r = c.reference()?;
                    if c.at(&Tok::RParen) {
                        c.next();
                        c.finish()?;
                        let one = Expr {
                            id: c.p.id(),
                            kind: ExprKind::Int(1.0),
                            span: r.span,
                        };
                        let span = r.span;
                        return Ok(vec![AdItem::Open {
                            var: r,
                            value: one,
                            span,
                        }]);
                    }
                    c.pos = save;
                }
            }
        }
        let items = c.ad_items(closing, reverse, false)?.0;
        c.finish()?;
        Ok(items)
    }

    fn file_units(&mut self) -> R<Vec<Unit>> {
        let mut units = Vec::new();
        while self.pos < self.lines.len() {
            let span = self.lines[self.pos].span;
            let unit = match self.heads[self.pos].take() {
                Some(Head::Program(name, name_span)) => {
                    self.pos += 1;
                    self.unit(UnitKind::Program, name, name_span, Vec::new(), span)?
                }
                Some(Head::Subroutine(name, name_span, params)) => {
                    self.pos += 1;
                    self.unit(UnitKind::Subroutine, name, name_span, params, span)?
                }
                Some(Head::Function(ty, name, name_span, params)) => {
                    self.pos += 1;
                    self.unit(UnitKind::Function(ty), name, name_span, params, span)?
                }
                Some(Head::End) => return err(span, "END without a program unit"),
                other => {
                    // A main program without a PROGRAM statement.
                    self.heads[self.pos] = other;
                    self.unit(UnitKind::Program, "MAIN".into(), span, Vec::new(), span)?
                }
            };
            units.push(unit);
        }
        Ok(units)
    }

    fn unit(
        &mut self,
        kind: UnitKind,
        name: String,
        name_span: Span,
        params: Vec<(String, Span)>,
        span: Span,
    ) -> R<Unit> {
        let mut unit = Unit {
            kind,
            name,
            name_span,
            params,
            decls: Vec::new(),
            body: Vec::new(),
            nested: Vec::new(),
            span,
            end_span: span,
            end_label: None,
        };
        let saved = std::mem::take(&mut self.do_labels);
        let (body, ender) = self.seq(&mut unit, 0)?;
        self.do_labels = saved;
        unit.body = body;
        match ender {
            Ender::End(s, l) => {
                unit.end_span = s;
                unit.end_label = l;
            }
            Ender::Eof => return err(span, format!("{} has no END statement", unit.name)),
            other => return self.stray(other),
        }
        Ok(unit)
    }

    /// The error for an ender nothing opened.
    fn stray<T>(&self, e: Ender) -> R<T> {
        match e {
            Ender::EndIf(_, s) => err(s, "END IF without IF"),
            Ender::Else(_, s) | Ender::ElseIf(_, _, s) => err(s, "ELSE without IF ... THEN"),
            Ender::EndDo(_, s) => err(s, "END DO without DO"),
            Ender::EndAd(r, _, s) => err(s, format!("END {} without {}", adname(r), adname(r))),
            Ender::End(s, _) => err(s, "END inside a block (IF, DO, ADF or ADR not closed)"),
            Ender::Label(_) | Ender::Eof => err(self.eof, "unexpected end of file"),
        }
    }

    /// Statements up to an ender. `depth` is 0 at the top of a unit (where declarations and
    /// nested subprograms may appear).
    fn seq(&mut self, unit: &mut Unit, depth: usize) -> R<(Vec<Stmt>, Ender)> {
        let mut out: Vec<Stmt> = Vec::new();
        loop {
            if self.pos >= self.lines.len() {
                return Ok((out, Ender::Eof));
            }
            let line_span = self.lines[self.pos].span;
            let label = self.lines[self.pos].label;
            let Some(head) = self.heads[self.pos].take() else {
                return err(line_span, "internal error: statement parsed twice");
            };
            self.pos += 1;
            let no_label = |what: &str| -> R<()> {
                match label {
                    Some((_, s)) => err(s, format!("a {what} cannot have a label")),
                    None => Ok(()),
                }
            };
            let stmt = match head {
                Head::Program(..) => {
                    return err(
                        line_span,
                        format!("PROGRAM inside {} (is its END missing?)", unit.name),
                    )
                }
                Head::Subroutine(name, name_span, params) => {
                    no_label("subprogram header")?;
                    if depth > 0 {
                        return err(
                            line_span,
                            "a subprogram cannot be defined inside IF, DO, ADF or ADR",
                        );
                    }
                    let u = self.unit(UnitKind::Subroutine, name, name_span, params, line_span)?;
                    unit.nested.push(u);
                    continue;
                }
                Head::Function(ty, name, name_span, params) => {
                    no_label("subprogram header")?;
                    if depth > 0 {
                        return err(
                            line_span,
                            "a subprogram cannot be defined inside IF, DO, ADF or ADR",
                        );
                    }
                    let u =
                        self.unit(UnitKind::Function(ty), name, name_span, params, line_span)?;
                    unit.nested.push(u);
                    continue;
                }
                Head::Decl(d) => {
                    no_label("declaration")?;
                    if depth > 0 {
                        return err(
                            line_span,
                            "declarations cannot appear inside IF, DO, ADF or ADR",
                        );
                    }
                    unit.decls.push(d);
                    continue;
                }
                Head::End => return Ok((out, Ender::End(line_span, label))),
                Head::EndIf => return Ok((out, Ender::EndIf(label, line_span))),
                Head::Else => return Ok((out, Ender::Else(label, line_span))),
                Head::ElseIf(c) => return Ok((out, Ender::ElseIf(c, label, line_span))),
                Head::EndDo => return Ok((out, Ender::EndDo(label, line_span))),
                Head::EndAd(r, items) => return Ok((out, Ender::EndAd(r, items, line_span))),
                Head::BlockIf(cond) => self.block_if(unit, depth, cond, label, line_span)?,
                Head::Do {
                    label: terminal,
                    var,
                    start,
                    end,
                    step,
                } => {
                    let (body, end_label) = match terminal {
                        Some((t, tspan)) => {
                            if label.is_some_and(|l| l.0 == t) {
                                return err(tspan, "a DO statement cannot end its own loop");
                            }
                            self.do_labels.push(t);
                            let (body, e) = self.seq(unit, depth + 1)?;
                            self.do_labels.pop();
                            match e {
                                Ender::Label(l) if l == t => (body, None),
                                Ender::Label(l) => {
                                    return err(
                                        line_span,
                                        format!(
                                            "this DO loop (terminal label {t}) is not closed before label {l} closes an enclosing one"
                                        ),
                                    )
                                }
                                Ender::Eof => {
                                    return err(
                                        line_span,
                                        format!("no statement labelled {t} ends this DO loop"),
                                    )
                                }
                                other => match other {
                                    Ender::End(..) => {
                                        return err(
                                            line_span,
                                            format!(
                                                "no statement labelled {t} ends this DO loop before END"
                                            ),
                                        )
                                    }
                                    o => return self.stray(o),
                                },
                            }
                        }
                        None => {
                            let (body, e) = self.seq(unit, depth + 1)?;
                            match e {
                                Ender::EndDo(l, _) => (body, l),
                                Ender::Label(l) => {
                                    return err(
                                        line_span,
                                        format!(
                                        "label {l} closes an enclosing DO before this DO's END DO"
                                    ),
                                    )
                                }
                                Ender::End(..) | Ender::Eof => {
                                    return err(line_span, "this DO loop has no END DO")
                                }
                                o => return self.stray(o),
                            }
                        }
                    };
                    Stmt {
                        id: self.id(),
                        label,
                        kind: StmtKind::Do {
                            var,
                            start,
                            end,
                            step,
                            body,
                            terminal: terminal.map(|t| t.0),
                            end_label,
                        },
                        span: line_span,
                    }
                }
                Head::AdOpen(reverse, opening) => {
                    no_label(adname(reverse))?;
                    let (body, e) = self.seq(unit, depth + 1)?;
                    match e {
                        Ender::EndAd(r, closing, end_span) if r == reverse => Stmt {
                            id: self.id(),
                            label,
                            kind: StmtKind::Ad {
                                reverse,
                                opening,
                                body,
                                closing,
                                end_span,
                            },
                            span: line_span,
                        },
                        Ender::EndAd(r, _, s) => {
                            return err(
                                s,
                                format!(
                                    "END {} closes the {} block opened at line {}",
                                    adname(r),
                                    adname(reverse),
                                    self.line_number(line_span)
                                ),
                            )
                        }
                        Ender::End(..) | Ender::Eof => {
                            return err(
                                line_span,
                                format!(
                                    "this {} block is not closed by END {}",
                                    adname(reverse),
                                    adname(reverse)
                                ),
                            )
                        }
                        Ender::Label(l) => {
                            return err(
                                line_span,
                                format!(
                                    "label {l} ends a DO loop inside this {} block",
                                    adname(reverse)
                                ),
                            )
                        }
                        o => return self.stray(o),
                    }
                }
                Head::Simple(kind) => Stmt {
                    id: self.id(),
                    label,
                    kind,
                    span: line_span,
                },
            };
            let closes_do = stmt.label.is_some_and(|l| self.do_labels.contains(&l.0));
            let ended_inner_do = matches!(&stmt.kind, StmtKind::Do { terminal: Some(t), .. } if self.do_labels.contains(t));
            if closes_do {
                let bad = matches!(
                    &stmt.kind,
                    StmtKind::Goto(..)
                        | StmtKind::Return
                        | StmtKind::Stop
                        | StmtKind::If { .. }
                        | StmtKind::Ad { .. }
                        | StmtKind::Do { .. }
                );
                if bad {
                    return err(
                        stmt.span,
                        "a DO loop cannot end with GOTO, RETURN, STOP, a block IF, DO or ADF/ADR",
                    );
                }
            }
            let l = stmt.label.map(|l| l.0);
            let t = match &stmt.kind {
                StmtKind::Do { terminal, .. } => *terminal,
                _ => None,
            };
            out.push(stmt);
            if let Some(l) = l.filter(|l| self.do_labels.contains(l)) {
                return Ok((out, Ender::Label(l)));
            }
            if ended_inner_do {
                let t = t.expect("checked");
                return Ok((out, Ender::Label(t)));
            }
        }
    }

    fn line_number(&self, span: Span) -> usize {
        self.line_starts
            .partition_point(|&s| s <= span.start as usize)
    }

    fn block_if(
        &mut self,
        unit: &mut Unit,
        depth: usize,
        cond: Expr,
        label: Option<(u32, Span)>,
        span: Span,
    ) -> R<Stmt> {
        let mut arms = Vec::new();
        let mut inner_labels = Vec::new();
        let mut else_body = None;
        let (body, mut e) = self.seq(unit, depth + 1)?;
        arms.push(IfArm { cond, body });
        let end_label = loop {
            match e {
                Ender::ElseIf(c, l, _) => {
                    inner_labels.extend(l);
                    let (b, e2) = self.seq(unit, depth + 1)?;
                    arms.push(IfArm { cond: c, body: b });
                    e = e2;
                }
                Ender::Else(l, _) => {
                    inner_labels.extend(l);
                    let (b, e2) = self.seq(unit, depth + 1)?;
                    else_body = Some(b);
                    match e2 {
                        Ender::EndIf(l, _) => break l,
                        Ender::Else(_, s) | Ender::ElseIf(_, _, s) => {
                            return err(s, "a second ELSE in one IF block")
                        }
                        other => return self.unclosed_if(other, span),
                    }
                }
                Ender::EndIf(l, _) => break l,
                other => return self.unclosed_if(other, span),
            }
        };
        Ok(Stmt {
            id: self.id(),
            label,
            kind: StmtKind::If {
                arms,
                else_body,
                inner_labels,
                end_label,
            },
            span,
        })
    }

    fn unclosed_if<T>(&self, e: Ender, span: Span) -> R<T> {
        match e {
            Ender::Label(l) => err(
                span,
                format!("label {l} ends a DO loop inside this IF block"),
            ),
            Ender::End(..) | Ender::Eof => err(span, "this IF block is not closed by END IF"),
            o => self.stray(o),
        }
    }
}

fn adname(reverse: bool) -> &'static str {
    if reverse {
        "ADR"
    } else {
        "ADF"
    }
}

/// Recursive descent over the tokens of one statement.
struct Cursor<'a, 'p> {
    p: &'p mut Parser,
    toks: &'a [Token],
    pos: usize,
    /// The whole statement (for errors at its end).
    whole: Span,
    depth: usize,
}

impl<'a, 'p> Cursor<'a, 'p> {
    fn new(p: &'p mut Parser, toks: &'a [Token], whole: Span) -> Self {
        Cursor {
            p,
            toks,
            pos: 0,
            whole,
            depth: 0,
        }
    }

    fn done(&self) -> bool {
        self.pos >= self.toks.len()
    }

    fn peek_tok(&self) -> Tok {
        self.toks
            .get(self.pos)
            .map_or(Tok::Comma, |t| t.tok.clone())
    }

    fn at(&self, t: &Tok) -> bool {
        self.toks.get(self.pos).is_some_and(|x| &x.tok == t)
    }

    fn at_name_equals(&self) -> bool {
        matches!(
            (self.toks.get(self.pos), self.toks.get(self.pos + 1)),
            (
                Some(Token {
                    tok: Tok::Name(_),
                    ..
                }),
                Some(Token {
                    tok: Tok::Equals,
                    ..
                })
            )
        )
    }

    /// The span of the current token, or of the end of the statement.
    fn span(&self) -> Span {
        match self.toks.get(self.pos) {
            Some(t) => t.span,
            None => Span {
                file: self.whole.file,
                start: self.whole.end.saturating_sub(1),
                end: self.whole.end,
            },
        }
    }

    fn prev_end(&self) -> u32 {
        self.pos
            .checked_sub(1)
            .and_then(|i| self.toks.get(i))
            .map_or(self.whole.end, |t| t.span.end)
    }

    fn next(&mut self) -> Option<&'a Token> {
        let t = self.toks.get(self.pos);
        self.pos += 1;
        t
    }

    fn expect(&mut self, t: &Tok, what: &str) -> R<()> {
        if self.at(t) {
            self.pos += 1;
            Ok(())
        } else {
            err(self.span(), format!("expected {what}"))
        }
    }

    fn finish(&self) -> R<()> {
        if self.done() {
            Ok(())
        } else {
            err(self.span(), "unexpected text at the end of the statement")
        }
    }

    fn name(&mut self, what: &str) -> R<(String, Span)> {
        match self.toks.get(self.pos) {
            Some(Token {
                tok: Tok::Name(n),
                span,
            }) => {
                self.pos += 1;
                Ok((n.clone(), *span))
            }
            _ => err(self.span(), format!("expected {what}")),
        }
    }

    fn mk(&mut self, kind: ExprKind, start: u32) -> Expr {
        let end = self.prev_end().max(start + 1);
        Expr {
            id: self.p.id(),
            kind,
            span: Span {
                file: self.whole.file,
                start,
                end,
            },
        }
    }

    fn enter(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return err(self.span(), "expression nested too deeply");
        }
        Ok(())
    }

    fn expr(&mut self) -> R<Expr> {
        self.enter()?;
        let start = self.span().start;
        let mut e = self.or_expr()?;
        loop {
            let op = match self.peek_tok() {
                Tok::DotOp("EQV") => BinOp::Eqv,
                Tok::DotOp("NEQV") => BinOp::Neqv,
                _ => break,
            };
            self.next();
            let r = self.or_expr()?;
            e = self.mk(ExprKind::Bin(op, Box::new(e), Box::new(r)), start);
        }
        self.depth -= 1;
        Ok(e)
    }

    fn or_expr(&mut self) -> R<Expr> {
        let start = self.span().start;
        let mut e = self.and_expr()?;
        while self.at(&Tok::DotOp("OR")) {
            self.next();
            let r = self.and_expr()?;
            e = self.mk(ExprKind::Bin(BinOp::Or, Box::new(e), Box::new(r)), start);
        }
        Ok(e)
    }

    fn and_expr(&mut self) -> R<Expr> {
        let start = self.span().start;
        let mut e = self.not_expr()?;
        while self.at(&Tok::DotOp("AND")) {
            self.next();
            let r = self.not_expr()?;
            e = self.mk(ExprKind::Bin(BinOp::And, Box::new(e), Box::new(r)), start);
        }
        Ok(e)
    }

    fn not_expr(&mut self) -> R<Expr> {
        let start = self.span().start;
        if self.at(&Tok::DotOp("NOT")) {
            self.next();
            self.enter()?;
            let e = self.not_expr()?;
            self.depth -= 1;
            return Ok(self.mk(ExprKind::Not(Box::new(e)), start));
        }
        self.rel_expr()
    }

    fn rel_expr(&mut self) -> R<Expr> {
        let start = self.span().start;
        let e = self.arith()?;
        let op = match self.peek_tok() {
            Tok::DotOp("EQ") => BinOp::Eq,
            Tok::DotOp("NE") => BinOp::Ne,
            Tok::DotOp("LT") => BinOp::Lt,
            Tok::DotOp("LE") => BinOp::Le,
            Tok::DotOp("GT") => BinOp::Gt,
            Tok::DotOp("GE") => BinOp::Ge,
            _ => return Ok(e),
        };
        self.next();
        let r = self.arith()?;
        Ok(self.mk(ExprKind::Bin(op, Box::new(e), Box::new(r)), start))
    }

    fn arith(&mut self) -> R<Expr> {
        let start = self.span().start;
        let mut e = self.term()?;
        loop {
            let op = match self.peek_tok() {
                Tok::Plus => BinOp::Add,
                Tok::Minus => BinOp::Sub,
                _ => break,
            };
            self.next();
            let r = self.term()?;
            e = self.mk(ExprKind::Bin(op, Box::new(e), Box::new(r)), start);
        }
        Ok(e)
    }

    fn term(&mut self) -> R<Expr> {
        let start = self.span().start;
        let mut e = self.signed()?;
        loop {
            let op = match self.peek_tok() {
                Tok::Star => BinOp::Mul,
                Tok::Slash => BinOp::Div,
                _ => break,
            };
            self.next();
            let r = self.signed()?;
            e = self.mk(ExprKind::Bin(op, Box::new(e), Box::new(r)), start);
        }
        Ok(e)
    }

    /// A factor with optional leading signs (`-A`, `A*-B`, `X**-2`).
    fn signed(&mut self) -> R<Expr> {
        let start = self.span().start;
        match self.peek_tok() {
            Tok::Plus | Tok::Minus => {
                let neg = self.at(&Tok::Minus);
                self.next();
                self.enter()?;
                let e = self.signed()?;
                self.depth -= 1;
                if !neg {
                    return Ok(self.mk(ExprKind::Paren(Box::new(e)), start));
                }
                Ok(match e.kind {
                    // A negative literal is a constant.
                    ExprKind::Int(v) => self.mk(ExprKind::Int(0.0 - v), start),
                    ExprKind::Real(v, d) => self.mk(ExprKind::Real(-v, d), start),
                    _ => self.mk(ExprKind::Neg(Box::new(e)), start),
                })
            }
            _ => self.factor(),
        }
    }

    fn factor(&mut self) -> R<Expr> {
        let start = self.span().start;
        let base = self.primary()?;
        if self.at(&Tok::Power) {
            self.next();
            self.enter()?;
            let exp = self.signed()?;
            self.depth -= 1;
            return Ok(self.mk(
                ExprKind::Bin(BinOp::Pow, Box::new(base), Box::new(exp)),
                start,
            ));
        }
        Ok(base)
    }

    fn primary(&mut self) -> R<Expr> {
        let start = self.span().start;
        let Some(t) = self.next() else {
            self.pos -= 1;
            return err(self.span(), "expected an expression");
        };
        let kind = match &t.tok {
            Tok::Int(v) => ExprKind::Int(*v),
            Tok::Real(v, d) => ExprKind::Real(*v, *d),
            Tok::Logical(b) => ExprKind::Logical(*b),
            Tok::Name(n) => {
                let nspan = t.span;
                if self.at(&Tok::LParen) {
                    self.next();
                    let args = self.args()?;
                    ExprKind::Apply(n.clone(), nspan, args)
                } else {
                    ExprKind::Name(n.clone())
                }
            }
            Tok::LParen => {
                let e = self.expr()?;
                self.expect(&Tok::RParen, "`)`")?;
                ExprKind::Paren(Box::new(e))
            }
            _ => {
                self.pos -= 1;
                return err(self.span(), "expected an expression");
            }
        };
        Ok(self.mk(kind, start))
    }

    /// Arguments after `(`, through the closing `)`.
    fn args(&mut self) -> R<Vec<Expr>> {
        let mut args = Vec::new();
        if self.at(&Tok::RParen) {
            self.next();
            return Ok(args);
        }
        loop {
            if self.at(&Tok::Star) {
                return err(
                    self.span(),
                    "alternate return arguments (*label) are not supported",
                );
            }
            if self.at(&Tok::Colon) || self.at_name_equals() {
                return err(
                    self.span(),
                    "substrings and keyword arguments are not supported",
                );
            }
            args.push(self.expr()?);
            if self.at(&Tok::Comma) {
                self.next();
                continue;
            }
            self.expect(&Tok::RParen, "`)` or `,`")?;
            return Ok(args);
        }
    }

    fn reference(&mut self) -> R<Ref> {
        let (name, name_span) = self.name("a variable")?;
        let subs = if self.at(&Tok::LParen) {
            self.next();
            let args = self.args()?;
            if args.is_empty() {
                return err(name_span, "an array element needs subscripts");
            }
            Some(args)
        } else {
            None
        };
        let end = self.prev_end();
        Ok(Ref {
            id: self.p.id(),
            name,
            name_span,
            subs,
            span: Span {
                file: name_span.file,
                start: name_span.start,
                end,
            },
        })
    }

    /// `I = start, end[, step]` then `)`.
    fn loop_control(&mut self) -> R<(Ref, Expr, Expr, Option<Expr>)> {
        let var = self.reference()?;
        if var.subs.is_some() {
            return err(var.span, "an implied-DO variable is a scalar variable");
        }
        self.expect(&Tok::Equals, "`=`")?;
        let start = self.expr()?;
        self.expect(&Tok::Comma, "`,`")?;
        let end = self.expr()?;
        let step = if self.at(&Tok::Comma) {
            self.next();
            Some(self.expr()?)
        } else {
            None
        };
        self.expect(&Tok::RParen, "`)`")?;
        Ok((var, start, end, step))
    }

    /// Whether the `(` at the cursor opens an implied DO: a `NAME =` directly inside it.
    fn opens_implied_do(&self) -> bool {
        let mut depth = 0;
        for i in self.pos..self.toks.len() {
            match self.toks[i].tok {
                Tok::LParen => depth += 1,
                Tok::RParen => {
                    depth -= 1;
                    if depth == 0 {
                        return false;
                    }
                }
                Tok::Equals if depth == 1 => return true,
                _ => {}
            }
        }
        false
    }

    fn io_item(&mut self) -> R<IoItem> {
        if self.at(&Tok::LParen) && self.opens_implied_do() {
            let start = self.span().start;
            self.next();
            self.enter()?;
            let mut items = Vec::new();
            loop {
                if self.at_name_equals() {
                    break;
                }
                items.push(self.io_item()?);
                self.expect(&Tok::Comma, "`,`")?;
            }
            self.depth -= 1;
            if items.is_empty() {
                return err(self.span(), "an implied DO needs items before its control");
            }
            let (var, s, e, st) = self.loop_control()?;
            let span = Span {
                file: self.whole.file,
                start,
                end: self.prev_end(),
            };
            return Ok(IoItem::Loop(Box::new(ImpliedDo {
                items,
                var,
                start: s,
                end: e,
                step: st,
                span,
            })));
        }
        Ok(IoItem::Expr(self.expr()?))
    }

    /// Opening (`TANGENT(X) = e`) or closing (`D = TANGENT(X)`) items up to `)`; inside an
    /// implied DO (`nested`) they stop at the loop control, which is returned too.
    #[allow(clippy::type_complexity)]
    fn ad_items(
        &mut self,
        closing: bool,
        reverse: bool,
        nested: bool,
    ) -> R<(Vec<AdItem>, Option<(Ref, Expr, Expr, Option<Expr>)>)> {
        let keyword = if reverse { "COTANGENT" } else { "TANGENT" };
        let mut items = Vec::new();
        loop {
            if nested
                && self.at_name_equals()
                && !items.is_empty()
                && !(closing && self.at_closing_item(keyword))
            {
                let control = self.loop_control()?;
                return Ok((items, Some(control)));
            }
            let start = self.span().start;
            if self.at(&Tok::LParen) {
                self.next();
                self.enter()?;
                let (inner, control) = self.ad_items(closing, reverse, true)?;
                self.depth -= 1;
                let (var, s, e, st) = control.expect("a nested list ends at its control");
                let span = Span {
                    file: self.whole.file,
                    start,
                    end: self.prev_end(),
                };
                items.push(AdItem::Loop(Box::new(ImpliedDo {
                    items: inner,
                    var,
                    start: s,
                    end: e,
                    step: st,
                    span,
                })));
            } else if closing {
                let dest = self.reference()?;
                self.expect(&Tok::Equals, "`=`")?;
                let var = self.keyword_ref(keyword)?;
                let span = Span {
                    file: self.whole.file,
                    start,
                    end: self.prev_end(),
                };
                items.push(AdItem::Close { dest, var, span });
            } else {
                let var = self.keyword_ref(keyword)?;
                self.expect(&Tok::Equals, "`=`")?;
                let value = self.expr()?;
                let span = Span {
                    file: self.whole.file,
                    start,
                    end: self.prev_end(),
                };
                items.push(AdItem::Open { var, value, span });
            }
            if self.at(&Tok::Comma) {
                self.next();
                continue;
            }
            if nested {
                return err(
                    self.span(),
                    "expected `,` and the implied DO's control (I = 1, N)",
                );
            }
            self.expect(&Tok::RParen, "`)` or `,`")?;
            return Ok((items, None));
        }
    }

    /// Whether `NAME = KEYWORD(` follows: a closing item, not an implied DO's control.
    fn at_closing_item(&self, keyword: &str) -> bool {
        matches!(self.toks.get(self.pos + 2), Some(Token { tok: Tok::Name(n), .. }) if n == keyword)
            && self
                .toks
                .get(self.pos + 3)
                .is_some_and(|t| t.tok == Tok::LParen)
    }

    /// `TANGENT(ref)` (or `COTANGENT(ref)`): the reference.
    fn keyword_ref(&mut self, keyword: &str) -> R<Ref> {
        let (n, s) = self.name(&format!("{keyword}(...)"))?;
        if n != keyword {
            let other = if keyword == "TANGENT" {
                "COTANGENT"
            } else {
                "TANGENT"
            };
            let hint = if n == other {
                format!(
                    ": {other} belongs to {}",
                    if other == "TANGENT" { "ADF" } else { "ADR" }
                )
            } else {
                String::new()
            };
            return err(s, format!("expected {keyword}(...){hint}"));
        }
        self.expect(&Tok::LParen, "`(`")?;
        let r = self.reference()?;
        self.expect(&Tok::RParen, "`)`")?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lex::statements;

    fn parse_src(src: &str) -> R<Vec<Unit>> {
        let lines = statements(0, src)?;
        parse(0, src, lines)
    }

    fn body(src: &str) -> Vec<Stmt> {
        let units = parse_src(src).expect("parses");
        units[0].body.clone()
    }

    #[test]
    fn assignment_do_and_logical_if_are_told_apart() {
        let b = body(
            "      DO 10 I = 1.5\n      DO 10 I = 1, 5\n   10 IF (I .GT. 2) X = 1\n      END\n",
        );
        assert!(matches!(&b[0].kind, StmtKind::Assign(r, _) if r.name == "DO10I"));
        match &b[1].kind {
            StmtKind::Do { body, terminal, .. } => {
                assert_eq!(*terminal, Some(10));
                assert!(matches!(body[0].kind, StmtKind::LogicalIf(..)));
            }
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn shared_terminal_statements_close_nested_loops() {
        let b = body(
            "      DO 10 I = 1, 2\n      DO 10 J = 1, 2\n   10 X = X + 1\n      Y = 1\n      END\n",
        );
        assert_eq!(b.len(), 2);
        match &b[0].kind {
            StmtKind::Do { body, .. } => match &body[0].kind {
                StmtKind::Do { body, .. } => assert_eq!(body.len(), 1),
                k => panic!("{k:?}"),
            },
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn nested_subprograms_and_ad_blocks() {
        let units = parse_src(
            "      SUBROUTINE S(F, X)\n      EXTERNAL F\n      FUNCTION G(A)\n      G = A\n      END\n      ADF(X)\n      Y = F(X)\n      END ADF(YP = TANGENT(Y))\n      END\n",
        )
        .unwrap();
        assert_eq!(units[0].nested.len(), 1);
        assert_eq!(units[0].nested[0].name, "G");
        match &units[0].body[0].kind {
            StmtKind::Ad {
                reverse,
                opening,
                closing,
                ..
            } => {
                assert!(!reverse);
                assert!(matches!(&opening[0], AdItem::Open { var, .. } if var.name == "X"));
                assert!(
                    matches!(&closing[0], AdItem::Close { dest, var, .. } if dest.name == "YP" && var.name == "Y")
                );
            }
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn implied_do_in_ad_and_io_lists() {
        let b = body(
            "      ADR((COTANGENT(Y(I)) = W(I), I = 1, N), COTANGENT(Z) = 1)\n      Z = 1\n      END ADR((G(I) = COTANGENT(X(I)), I = 1, N))\n      PRINT *, (X(I), I = 1, N), (Y)\n      END\n",
        );
        match &b[0].kind {
            StmtKind::Ad {
                opening, closing, ..
            } => {
                assert!(matches!(&opening[0], AdItem::Loop(l) if l.items.len() == 1));
                assert!(matches!(&opening[1], AdItem::Open { .. }));
                assert!(matches!(&closing[0], AdItem::Loop(_)));
            }
            k => panic!("{k:?}"),
        }
        match &b[1].kind {
            StmtKind::Print(items) => {
                assert!(matches!(items[0], IoItem::Loop(_)));
                assert!(matches!(items[1], IoItem::Expr(_)));
            }
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn structural_errors_are_positioned() {
        let e = parse_src("      ADF(X)\n      Y = X\n      END\n").unwrap_err();
        assert!(e.message.contains("not closed by END ADF"), "{}", e.message);
        assert_eq!(e.span.start, 6);
        let e = parse_src("      Y = 1\n      END ADF(D = TANGENT(Y))\n      END\n").unwrap_err();
        assert!(e.message.contains("END ADF without ADF"), "{}", e.message);
        let e = parse_src("      ADF(X)\n      END ADR\n      END\n").unwrap_err();
        assert!(
            e.message.contains("END ADR closes the ADF block"),
            "{}",
            e.message
        );
        let e = parse_src("      COMMON /B/ X\n      END\n").unwrap_err();
        assert!(
            e.message.contains("COMMON is not supported"),
            "{}",
            e.message
        );
        let e = parse_src("      ADF(COTANGENT(X) = 1)\n      END ADF\n      END\n").unwrap_err();
        assert!(
            e.message.contains("COTANGENT belongs to ADR"),
            "{}",
            e.message
        );
    }
}
