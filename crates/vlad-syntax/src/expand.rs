//! The expander: S-expressions to Core.
//!
//! Every derived form of DESIGN.md is lowered here (curried `define`, `let`, named `let`, `let*`,
//! `letrec`, `cond`, `and`, `or`, `list`, `cons*`, multi-argument application and parameters).
//! Every binder gets a fresh [`Var`] (alpha conversion), so later stages never worry about
//! shadowing. Names resolve innermost local first, then top-level definitions, then primitives.

use crate::reader::{Sexp, SexpKind};
use crate::Diagnostic;
use std::collections::HashMap;
use std::rc::Rc;
use vlad_core::{Arena, Datum, Expr, ExprId, Pattern, Prim, Span, Tags, Var};

/// The names that are special forms when not bound as variables.
pub const SPECIAL_FORMS: &[&str] = &[
    "quote", "lambda", "let", "let*", "letrec", "if", "cond", "and", "or", "cons", "list", "cons*",
    "define", "include",
];

type R<T> = Result<T, Diagnostic>;

pub struct Expander<'a> {
    pub arena: &'a mut Arena,
    /// Top-level definitions in scope.
    pub globals: HashMap<String, Var>,
    /// Where each global was first referenced, so an undefined one is reported at its use.
    pub global_refs: HashMap<Var, Span>,
    locals: Vec<(String, Var)>,
    /// Resolve the names of internal primitives too (only for vlad's built-in prelude).
    pub internal: bool,
    /// Top-level procedures defined with a curried header, `(define ((f a) b) ...)`: how many
    /// arguments their first application takes. Calling one with another number of arguments,
    /// `(gradient-R f x)` for `((gradient-R f) x)`, is an error found here: it would bind the
    /// first parameter to a pair and silently return a procedure.
    pub curried: HashMap<Var, usize>,
}

fn err<T>(span: Span, msg: impl Into<String>) -> R<T> {
    Err(Diagnostic::new(span, msg))
}

/// Converts quoted data to a Core constant.
pub fn datum(s: &Sexp) -> R<Datum> {
    Ok(match &s.kind {
        SexpKind::Real(r) => Datum::Real(*r),
        SexpKind::Bool(b) => Datum::Bool(*b),
        SexpKind::List(items) => list_datum(items, Datum::Nil)?,
        SexpKind::Dotted(items, tail) => list_datum(items, datum(tail)?)?,
        SexpKind::Symbol(name) => {
            return err(
                s.span,
                format!("symbols are not VLAD data: `{name}` cannot be quoted"),
            )
        }
        SexpKind::Str(_) => return err(s.span, "strings are not VLAD data"),
        SexpKind::Vector(items) => {
            Datum::Array(items.iter().map(datum).collect::<R<Vec<_>>>()?.into())
        }
    })
}

fn list_datum(items: &[Sexp], tail: Datum) -> R<Datum> {
    let mut d = tail;
    for x in items.iter().rev() {
        d = Datum::Pair(Rc::new((datum(x)?, d)));
    }
    Ok(d)
}

impl<'a> Expander<'a> {
    pub fn new(arena: &'a mut Arena) -> Expander<'a> {
        Expander {
            arena,
            globals: HashMap::new(),
            global_refs: HashMap::new(),
            locals: Vec::new(),
            internal: false,
            curried: HashMap::new(),
        }
    }

    fn is_bound(&self, name: &str) -> bool {
        self.locals.iter().any(|(n, _)| n == name) || self.globals.contains_key(name)
    }

    fn mk(&mut self, e: Expr) -> ExprId {
        self.arena.mk(e)
    }

    fn constant(&mut self, d: Datum) -> ExprId {
        self.mk(Expr::Const(d, Tags::EMPTY))
    }

    fn lookup(&mut self, name: &str, span: Span) -> R<ExprId> {
        if let Some((_, v)) = self.locals.iter().rev().find(|(n, _)| n == name) {
            let v = *v;
            return Ok(self.mk(Expr::Var(v)));
        }
        if let Some(v) = self.globals.get(name).copied() {
            self.global_refs.entry(v).or_insert(span);
            return Ok(self.mk(Expr::Var(v)));
        }
        let prim = if self.internal {
            Prim::from_name_internal(name)
        } else {
            Prim::from_name(name)
        };
        if let Some(p) = prim {
            return Ok(self.mk(Expr::Prim(p, Tags::EMPTY)));
        }
        if SPECIAL_FORMS.contains(&name) {
            return err(span, format!("`{name}` is a special form, not a value"));
        }
        err(span, format!("unbound variable `{name}`"))
    }

    /// Expands one expression.
    pub fn expr(&mut self, s: &Sexp) -> R<ExprId> {
        match &s.kind {
            SexpKind::Real(r) => Ok(self.constant(Datum::Real(*r))),
            SexpKind::Bool(b) => Ok(self.constant(Datum::Bool(*b))),
            SexpKind::Symbol(name) => self.lookup(name, s.span),
            SexpKind::Str(_) => err(s.span, "strings are not VLAD expressions"),
            // Like Scheme's `#(1 2 3)`, an array literal is self-quoting.
            SexpKind::Vector(_) => Ok(self.constant(datum(s)?)),
            SexpKind::Dotted(..) => err(s.span, "a dotted list is not an expression"),
            SexpKind::List(items) if items.is_empty() => Ok(self.constant(Datum::Nil)),
            SexpKind::List(items) => {
                if let Some(head) = items[0].symbol() {
                    if !self.is_bound(head) && SPECIAL_FORMS.contains(&head) {
                        return self.special(head, items, s.span);
                    }
                    if let (Some(tag), [_, a, b]) = (self.internal_cons(head), items.as_slice()) {
                        let (a, b) = (self.expr(a)?, self.expr(b)?);
                        return Ok(self.mk(Expr::Cons(tag, a, b)));
                    }
                }
                let f = self.expr(&items[0])?;
                if let Expr::Var(v) = self.arena.get(f) {
                    if let Some(&n) = self.curried.get(v) {
                        let given = items.len() - 1;
                        if given != n {
                            let name = items[0].symbol().unwrap_or("this procedure");
                            let takes = if n == 1 {
                                "1 argument".to_string()
                            } else {
                                format!("{n} arguments")
                            };
                            return err(
                                s.span,
                                format!(
                                    "`{name}` takes {takes} and returns a procedure (it is curried): \
                                     write (({name} f) x), not ({name} f x); this call passes {given}"
                                ),
                            );
                        }
                    }
                }
                let arg = self.args(&items[1..])?;
                Ok(self.mk(Expr::App(f, arg, s.span)))
            }
        }
    }

    /// The single argument passed for `args`: `'()`, the value itself, or `(cons* args...)`.
    fn args(&mut self, args: &[Sexp]) -> R<ExprId> {
        let es = args.iter().map(|a| self.expr(a)).collect::<R<Vec<_>>>()?;
        Ok(self.cons_star(es))
    }

    fn cons_star(&mut self, es: Vec<ExprId>) -> ExprId {
        let mut it = es.into_iter().rev();
        let Some(mut acc) = it.next() else {
            return self.constant(Datum::Nil);
        };
        for e in it {
            acc = self.mk(Expr::Cons(Tags::EMPTY, e, acc));
        }
        acc
    }

    fn one_body<'s>(&self, items: &'s [Sexp], from: usize, span: Span, form: &str) -> R<&'s Sexp> {
        match items.len().checked_sub(from) {
            Some(1) => Ok(&items[from]),
            Some(0) | None => err(span, format!("`{form}` needs a body expression")),
            Some(_) => err(
                items[from + 1].span,
                format!("`{form}` takes exactly one body expression; VLAD has no sequencing"),
            ),
        }
    }

    fn special(&mut self, head: &str, items: &[Sexp], span: Span) -> R<ExprId> {
        let n = items.len();
        match head {
            "quote" => {
                if n != 2 {
                    return err(span, "`quote` takes exactly one datum");
                }
                let d = datum(&items[1])?;
                Ok(self.constant(d))
            }
            "lambda" => {
                if n < 2 {
                    return err(span, "`lambda` needs parameters and a body");
                }
                let body = self.one_body(items, 2, span, "lambda")?;
                self.lambda(&[&items[1]], body, span)
            }
            "let" => self.let_form(items, span),
            "let*" => {
                let (bindings, body) = self.bindings(items, span, "let*")?;
                let mut pushed = 0;
                let mut lets = Vec::new();
                for (p, e, bspan) in bindings {
                    let ex = self.expr(e);
                    let ex = match ex {
                        Ok(x) => x,
                        Err(d) => {
                            self.locals.truncate(self.locals.len() - pushed);
                            return Err(d);
                        }
                    };
                    let before = self.locals.len();
                    let pat = self.pattern(p);
                    pushed += self.locals.len() - before;
                    match pat {
                        Ok(pat) => lets.push((pat, ex, bspan)),
                        Err(d) => {
                            self.locals.truncate(self.locals.len() - pushed);
                            return Err(d);
                        }
                    }
                }
                let b = self.expr(body);
                self.locals.truncate(self.locals.len() - pushed);
                let mut acc = b?;
                for (p, e, bspan) in lets.into_iter().rev() {
                    acc = self.mk(Expr::Let(Rc::new(p), e, acc, bspan));
                }
                Ok(acc)
            }
            "letrec" => {
                let (bindings, body) = self.bindings(items, span, "letrec")?;
                let mut vars = Vec::new();
                for (p, _, _) in &bindings {
                    let Some(name) = p.symbol() else {
                        return err(p.span, "`letrec` binds variables, not patterns");
                    };
                    if vars.iter().any(|(n, _): &(String, Var)| n == name) {
                        return err(p.span, format!("`{name}` is bound twice in this `letrec`"));
                    }
                    vars.push((name.to_string(), self.arena.fresh_var(name)));
                }
                let mark = self.locals.len();
                self.locals.extend(vars.iter().cloned());
                let result = (|| {
                    let mut bs = Vec::new();
                    for ((_, v), (_, e, _)) in vars.iter().zip(&bindings) {
                        let l = self.expr(e)?;
                        if !matches!(self.arena.get(l), Expr::Lambda(..)) {
                            return err(e.span, "`letrec` binds only `lambda` expressions");
                        }
                        bs.push((*v, l));
                    }
                    let b = self.expr(body)?;
                    Ok(self.mk(Expr::Letrec(bs.into(), b)))
                })();
                self.locals.truncate(mark);
                result
            }
            "if" => {
                if n != 4 {
                    return err(span, "`if` takes a condition and two branches");
                }
                let c = self.expr(&items[1])?;
                let a = self.expr(&items[2])?;
                let b = self.expr(&items[3])?;
                Ok(self.mk(Expr::If(c, a, b)))
            }
            "cond" => {
                let clauses = &items[1..];
                let Some(last) = clauses.last() else {
                    return err(span, "`cond` needs clauses ending with `else`");
                };
                let l = last.list().unwrap_or(&[]);
                if !(l.len() == 2 && l[0].symbol() == Some("else")) {
                    return err(last.span, "`cond` must end with an `(else e)` clause");
                }
                let mut acc = self.expr(&l[1])?;
                for c in clauses[..clauses.len() - 1].iter().rev() {
                    let Some(parts) = c.list() else {
                        return err(c.span, "a `cond` clause is `(test expression)`");
                    };
                    if parts.first().and_then(|p| p.symbol()) == Some("else") {
                        return err(c.span, "`else` must be the last `cond` clause");
                    }
                    if parts.len() != 2 {
                        return err(c.span, "a `cond` clause is `(test expression)`");
                    }
                    let t = self.expr(&parts[0])?;
                    let e = self.expr(&parts[1])?;
                    acc = self.mk(Expr::If(t, e, acc));
                }
                Ok(acc)
            }
            "and" => {
                if n == 1 {
                    return Ok(self.constant(Datum::Bool(true)));
                }
                let mut acc = self.expr(&items[n - 1])?;
                let f = self.constant(Datum::Bool(false));
                for e in items[1..n - 1].iter().rev() {
                    let c = self.expr(e)?;
                    acc = self.mk(Expr::If(c, acc, f));
                }
                Ok(acc)
            }
            "or" => {
                if n == 1 {
                    return Ok(self.constant(Datum::Bool(false)));
                }
                let mut acc = self.expr(&items[n - 1])?;
                for e in items[1..n - 1].iter().rev() {
                    let c = self.expr(e)?;
                    let t = self.arena.fresh_var("or");
                    let tv = self.mk(Expr::Var(t));
                    let i = self.mk(Expr::If(tv, tv, acc));
                    acc = self.mk(Expr::Let(Rc::new(Pattern::Var(t)), c, i, e.span));
                }
                Ok(acc)
            }
            "cons" => {
                if n != 3 {
                    return err(span, "`cons` takes exactly two arguments");
                }
                let a = self.expr(&items[1])?;
                let b = self.expr(&items[2])?;
                Ok(self.mk(Expr::Cons(Tags::EMPTY, a, b)))
            }
            "list" => {
                let mut acc = self.constant(Datum::Nil);
                let es = items[1..]
                    .iter()
                    .map(|e| self.expr(e))
                    .collect::<R<Vec<_>>>()?;
                for e in es.into_iter().rev() {
                    acc = self.mk(Expr::Cons(Tags::EMPTY, e, acc));
                }
                Ok(acc)
            }
            "cons*" => self.args(&items[1..]),
            "define" => err(span, "`define` is only allowed at top level"),
            "include" => err(span, "`include` is only allowed at top level"),
            _ => unreachable!("every special form is handled"),
        }
    }

    /// `((p e) ...)` and the single body of `let`, `let*`, `letrec`.
    #[allow(clippy::type_complexity)]
    fn bindings<'s>(
        &self,
        items: &'s [Sexp],
        span: Span,
        form: &str,
    ) -> R<(Vec<(&'s Sexp, &'s Sexp, Span)>, &'s Sexp)> {
        if items.len() < 2 {
            return err(span, format!("`{form}` needs bindings and a body"));
        }
        let Some(bs) = items[1].list() else {
            return err(
                items[1].span,
                format!("`{form}` bindings are a list of `(pattern expression)`"),
            );
        };
        let mut out = Vec::new();
        for b in bs {
            match b.list() {
                Some([p, e]) => out.push((p, e, b.span)),
                _ => return err(b.span, "a binding is `(pattern expression)`"),
            }
        }
        let body = self.one_body(items, 2, span, form)?;
        Ok((out, body))
    }

    fn let_form(&mut self, items: &[Sexp], span: Span) -> R<ExprId> {
        if let Some(name) = items.get(1).and_then(|s| s.symbol()) {
            // Named let: ((letrec ((name (lambda (p ...) body))) name) e ...)
            let (bindings, body) = self.bindings(&items[1..], span, "let")?;
            let inits = bindings
                .iter()
                .map(|(_, e, _)| self.expr(e))
                .collect::<R<Vec<_>>>()?;
            let arg = self.cons_star(inits);
            let v = self.arena.fresh_var(name);
            self.locals.push((name.to_string(), v));
            let pats: Vec<&Sexp> = bindings.iter().map(|(p, _, _)| *p).collect();
            let lam = self.lambda_params(&pats, body, span);
            self.locals.pop();
            let lam = lam?;
            let vr = self.mk(Expr::Var(v));
            let lr = self.mk(Expr::Letrec(vec![(v, lam)].into(), vr));
            return Ok(self.mk(Expr::App(lr, arg, span)));
        }
        let (bindings, body) = self.bindings(items, span, "let")?;
        let inits = bindings
            .iter()
            .map(|(_, e, _)| self.expr(e))
            .collect::<R<Vec<_>>>()?;
        let mark = self.locals.len();
        let result = (|| {
            let mut pats = Vec::new();
            for (p, _, _) in &bindings {
                pats.push(self.pattern(p)?);
            }
            let ps: Vec<&Sexp> = bindings.iter().map(|(p, _, _)| *p).collect();
            self.no_duplicates(mark, &ps)?;
            let mut acc = self.expr(body)?;
            for ((pat, init), (_, _, bspan)) in pats.into_iter().zip(inits).zip(&bindings).rev() {
                acc = self.mk(Expr::Let(Rc::new(pat), init, acc, *bspan));
            }
            Ok(acc)
        })();
        self.locals.truncate(mark);
        result
    }

    /// A lambda whose parameter list is `formals` (a list S-expression): one pattern for zero,
    /// one or several parameters, by the cons* convention.
    fn lambda(&mut self, formals: &[&Sexp], body: &Sexp, span: Span) -> R<ExprId> {
        let params = formal_list(formals[0])?;
        self.lambda_params(&params, body, span)
    }

    fn lambda_params(&mut self, params: &[&Sexp], body: &Sexp, span: Span) -> R<ExprId> {
        let mark = self.locals.len();
        let result = (|| {
            let pats = params
                .iter()
                .map(|p| self.pattern(p))
                .collect::<R<Vec<_>>>()?;
            self.no_duplicates(mark, params)?;
            let pat = cons_star_pattern(pats);
            let b = self.expr(body)?;
            Ok(self.mk(Expr::Lambda(Rc::new(pat), b, span)))
        })();
        self.locals.truncate(mark);
        result
    }

    /// In the built-in prelude only: `(%reverse-cons a b)`, `(%forward-cons a b)` and
    /// `(%sensitivity-cons a b)` build and match pairs tagged at one level, which transformed
    /// primitives need to take their arguments apart without traversing them.
    fn internal_cons(&self, head: &str) -> Option<Tags> {
        if !self.internal {
            return None;
        }
        let tag = match head {
            "%reverse-cons" => vlad_core::Tag::Reverse,
            "%forward-cons" => vlad_core::Tag::Forward,
            "%sensitivity-cons" => vlad_core::Tag::Sensitivity,
            _ => return None,
        };
        Tags::EMPTY.push(tag)
    }

    /// Rejects a parameter list that binds one name twice (the locals pushed since `mark`).
    fn no_duplicates(&self, mark: usize, params: &[&Sexp]) -> R<()> {
        let bound = &self.locals[mark..];
        for (i, (n, _)) in bound.iter().enumerate() {
            if bound[..i].iter().any(|(m, _)| m == n) {
                let at = params.first().map(|p| p.span).unwrap_or(Span::NONE);
                return err(at, format!("`{n}` is bound twice"));
            }
        }
        Ok(())
    }

    /// Expands a pattern, pushing the variables it binds onto the local scope.
    fn pattern(&mut self, s: &Sexp) -> R<Pattern> {
        match &s.kind {
            SexpKind::Symbol(name) => {
                // Binding a special-form keyword is allowed: the variable shadows the form.
                let v = self.arena.fresh_var(name);
                self.locals.push((name.clone(), v));
                Ok(Pattern::Var(v))
            }
            SexpKind::Real(r) => Ok(Pattern::Const(Datum::Real(*r), Tags::EMPTY)),
            SexpKind::Bool(b) => Ok(Pattern::Const(Datum::Bool(*b), Tags::EMPTY)),
            SexpKind::List(items) if items.is_empty() => {
                Ok(Pattern::Const(Datum::Nil, Tags::EMPTY))
            }
            SexpKind::List(items) => {
                let head = items[0].symbol().unwrap_or("");
                match head {
                    "quote" if items.len() == 2 => Ok(Pattern::Const(datum(&items[1])?, Tags::EMPTY)),
                    "cons" if items.len() == 3 => {
                        let a = self.pattern(&items[1])?;
                        let b = self.pattern(&items[2])?;
                        Ok(Pattern::Cons(Tags::EMPTY, Rc::new(a), Rc::new(b)))
                    }
                    _ if items.len() == 3 && self.internal_cons(head).is_some() => {
                        let tag = self.internal_cons(head).expect("checked");
                        let a = self.pattern(&items[1])?;
                        let b = self.pattern(&items[2])?;
                        Ok(Pattern::Cons(tag, Rc::new(a), Rc::new(b)))
                    }
                    "cons*" => {
                        let ps = items[1..].iter().map(|p| self.pattern(p)).collect::<R<Vec<_>>>()?;
                        Ok(cons_star_pattern(ps))
                    }
                    "list" => {
                        let ps = items[1..].iter().map(|p| self.pattern(p)).collect::<R<Vec<_>>>()?;
                        let mut acc = Pattern::Const(Datum::Nil, Tags::EMPTY);
                        for p in ps.into_iter().rev() {
                            acc = Pattern::Cons(Tags::EMPTY, Rc::new(p), Rc::new(acc));
                        }
                        Ok(acc)
                    }
                    _ => err(
                        s.span,
                        "a pattern is a variable, a constant, `(cons p q)`, `(cons* p ...)` or `(list p ...)`",
                    ),
                }
            }
            _ => err(s.span, "not a valid pattern"),
        }
    }

    /// Expands a top-level `(define ...)` form's right-hand side. Returns the defined name, its
    /// span and the expression. The name must already be in `globals`.
    pub fn define(&mut self, items: &[Sexp], span: Span) -> R<(String, Span, ExprId)> {
        if items.len() < 3 {
            return err(
                span,
                "`define` needs a name and a value: `(define (f x) body)` or `(define x e)`",
            );
        }
        // Peel curried headers: ((f a) b) -> levels [[a], [b]], name f.
        let mut target = &items[1];
        let mut levels: Vec<&Sexp> = Vec::new();
        loop {
            match &target.kind {
                SexpKind::Symbol(_) => break,
                SexpKind::List(parts) if !parts.is_empty() => {
                    levels.push(target);
                    target = &parts[0];
                }
                SexpKind::Dotted(..) => {
                    return err(target.span, "rest parameters are not supported in VLAD")
                }
                _ => {
                    return err(
                        target.span,
                        "`define` needs a name or a `(name parameter ...)` header",
                    )
                }
            }
        }
        let name = target.symbol().expect("symbol").to_string();
        let body = self.one_body(items, 2, span, "define")?;
        levels.reverse();
        let e = self.curried(&levels, body, span)?;
        Ok((name, target.span, e))
    }

    fn curried(&mut self, levels: &[&Sexp], body: &Sexp, span: Span) -> R<ExprId> {
        let Some((first, rest)) = levels.split_first() else {
            return self.expr(body);
        };
        let params: Vec<&Sexp> = match &first.kind {
            SexpKind::Dotted(parts, tail) => {
                parts[1..].iter().chain(std::iter::once(&**tail)).collect()
            }
            _ => first.list().expect("header list")[1..].iter().collect(),
        };
        let mark = self.locals.len();
        let result = (|| {
            let pats = params
                .iter()
                .map(|p| self.pattern(p))
                .collect::<R<Vec<_>>>()?;
            self.no_duplicates(mark, &params)?;
            let pat = cons_star_pattern(pats);
            let b = self.curried(rest, body, span)?;
            Ok(self.mk(Expr::Lambda(Rc::new(pat), b, span)))
        })();
        self.locals.truncate(mark);
        result
    }
}

/// The parameter patterns of a formals list. By the one-argument convention `(a b c)` is the
/// pattern `(cons* a b c)`, so a dotted list `(a . rest)` means the same as `(a rest)`, and a lone
/// variable `args` binds the whole argument.
fn formal_list(f: &Sexp) -> R<Vec<&Sexp>> {
    match &f.kind {
        SexpKind::List(ps) => Ok(ps.iter().collect()),
        SexpKind::Dotted(ps, tail) => Ok(ps.iter().chain(std::iter::once(&**tail)).collect()),
        SexpKind::Symbol(_) => Ok(vec![f]),
        _ => err(
            f.span,
            "lambda parameters must be a list of patterns or one variable",
        ),
    }
}

fn cons_star_pattern(pats: Vec<Pattern>) -> Pattern {
    let mut it = pats.into_iter().rev();
    let Some(mut acc) = it.next() else {
        return Pattern::Const(Datum::Nil, Tags::EMPTY);
    };
    for p in it {
        acc = Pattern::Cons(Tags::EMPTY, Rc::new(p), Rc::new(acc));
    }
    acc
}
