//! Readable renderings of abstract values and of a whole analysis (`vlad compile --emit flow`).

use crate::analysis::{Analysis, Target};
use crate::domain::{Av, Callee, CodeId};
use crate::specialise::Program;
use std::fmt::Write as _;
use vlad_core::{Expr, Span};

impl Analysis<'_> {
    /// The name of a code: its `letrec` name, or `lambda@LOCATION`.
    pub fn code_name(&self, c: CodeId, place: &dyn Fn(Span) -> String) -> String {
        let code = &self.codes[c.0 as usize];
        if let Some(name) = code.names.get(code.index as usize) {
            return self.arena.var_name(*name).to_string();
        }
        match self.arena.get(code.lambda()) {
            Expr::Lambda(_, _, span) if !span.is_none() => format!("lambda@{}", place(*span)),
            _ => "top-level".to_string(),
        }
    }

    /// An abstract value: `R` some real, `B` some boolean, constants as printed, `(a . d)`,
    /// `#[e]` an array of elements `e` (`#[e; n]` of length `n`), `<name e1 ...>` a closure and its environment,
    /// `dyn{...}` a boxed value and the procedures it may contain.
    pub fn show_av(&self, v: &Av, place: &dyn Fn(Span) -> String) -> String {
        let mut s = String::new();
        self.write_av(v, place, &mut s);
        s
    }

    fn write_av(&self, v: &Av, place: &dyn Fn(Span) -> String, s: &mut String) {
        match v {
            Av::Bottom => s.push('⊥'),
            Av::Nil => s.push_str("()"),
            Av::Bool(None) => s.push('B'),
            Av::Bool(Some(b)) => s.push_str(if *b { "#t" } else { "#f" }),
            Av::Real(None) => s.push('R'),
            Av::Real(Some(r)) => s.push_str(&vlad_core::number::format_real(r.get())),
            Av::Prim(p) => {
                let _ = write!(s, "<procedure:{}>", p.name());
            }
            Av::Pair(t, a, d) => {
                s.push('(');
                self.write_av(a, place, s);
                s.push_str(" . ");
                self.write_av(d, place, s);
                s.push(')');
                write_tags(*t, s);
            }
            Av::Closure(c, env) => {
                s.push('<');
                s.push_str(&self.code_name(*c, place));
                for x in env.iter() {
                    s.push(' ');
                    self.write_av(x, place, s);
                }
                s.push('>');
            }
            Av::Array(t, n, e) => {
                s.push_str("#[");
                self.write_av(e, place, s);
                if let Some(n) = n {
                    let _ = write!(s, "; {n}");
                }
                s.push(']');
                write_tags(*t, s);
            }
            Av::Bundle(p, t) => {
                s.push_str("(forward ");
                self.write_av(p, place, s);
                s.push(' ');
                self.write_av(t, place, s);
                s.push(')');
            }
            Av::Tagged(t, x) => {
                let _ = write!(s, "({} ", t.name());
                self.write_av(x, place, s);
                s.push(')');
            }
            Av::Zero(of) => {
                s.push_str("(zero-sensitivity-of ");
                self.write_av(of, place, s);
                s.push(')');
            }
            Av::OrZero(of, x) => {
                s.push_str("(or (zero-sensitivity-of ");
                self.write_av(of, place, s);
                s.push_str(") ");
                self.write_av(x, place, s);
                s.push(')');
            }
            Av::OneHot(of, x) => {
                s.push_str("(one-hot-sensitivity-of ");
                self.write_av(of, place, s);
                s.push(' ');
                self.write_av(x, place, s);
                s.push(')');
            }
            Av::Sum(o, d) => {
                s.push_str("(sum-sensitivity ");
                self.write_av(o, place, s);
                s.push(' ');
                self.write_av(d, place, s);
                s.push(')');
            }
            Av::Dyn(callees) => {
                s.push_str("dyn{");
                for (i, c) in callees.iter().enumerate() {
                    if i > 0 {
                        s.push(' ');
                    }
                    match c {
                        Callee::Prim(p) => s.push_str(p.name()),
                        Callee::Code(c) => s.push_str(&self.code_name(*c, place)),
                    }
                }
                s.push('}');
            }
        }
    }

    /// Every specialisation: `name ARG -> RESULT`, with the environment when there is one.
    pub fn show(&self, place: &dyn Fn(Span) -> String) -> String {
        let mut s = String::new();
        for (k, key) in self.keys.iter().enumerate() {
            let _ = write!(
                s,
                "{}#{} {} -> {}",
                self.code_name(key.code, place),
                key.code.0,
                self.show_av(&key.arg, place),
                self.show_av(&self.results[k], place)
            );
            if !key.env.is_empty() {
                s.push_str("   env:");
                for x in key.env.iter() {
                    s.push(' ');
                    s.push_str(&self.show_av(x, place));
                }
            }
            s.push('\n');
        }
        s
    }
}

impl Program {
    /// The specialised program (`vlad compile --emit ir`): every reachable function as
    /// `fun fK NAME ARG -> RESULT` with its environment, then the Core of its code, each call
    /// followed by `@` and what it calls: `fK` a function, `prim:NAME` a primitive,
    /// `dispatch[...]` a boxed procedure, `build[...]`, `ifold[...]`, `if-procedure[...]` the
    /// calls of a higher-order primitive, `not-procedure` a run-time error, `unreachable`.
    pub fn show(&self, an: &Analysis, place: &dyn Fn(Span) -> String) -> String {
        let mut s = String::new();
        for (k, fun) in self.funs.iter().enumerate() {
            let Some(fun) = fun else { continue };
            let _ = write!(
                s,
                "fun f{k} {} {} -> {}",
                an.code_name(fun.code, place),
                an.show_av(&fun.arg, place),
                an.show_av(&fun.result, place)
            );
            if !fun.env.is_empty() {
                s.push_str("\n  env:");
                for x in fun.env.iter() {
                    s.push(' ');
                    s.push_str(&an.show_av(x, place));
                }
            }
            let lambda = an.codes[fun.code.0 as usize].lambda();
            let note = |site: vlad_core::ExprId| self.targets.get(&(k, site)).map(show_target);
            let _ = writeln!(s, "\n  {}", an.arena.show_annotated(lambda, &note));
        }
        s
    }
}

fn show_target(t: &Target) -> String {
    let list = |ts: &[&Target]| {
        ts.iter()
            .map(|t| show_target(t))
            .collect::<Vec<_>>()
            .join(" ")
    };
    match t {
        Target::Direct(k) => format!("f{k}"),
        Target::Prim(p) => format!("prim:{}", p.name()),
        Target::IfProc(a, b) => format!("if-procedure[{}]", list(&[a, b])),
        Target::Checkpoint(t) => format!("checkpoint[{}]", show_target(t)),
        Target::Build(t) => format!("build[{}]", show_target(t)),
        Target::ForwardBuild(t) => format!("forward-build[{}]", show_target(t)),
        Target::Ifold(t) => format!("ifold[{}]", show_target(t)),
        Target::ForwardIfold(t) => format!("forward-ifold[{}]", show_target(t)),
        Target::IfoldTape(t) => format!("ifold-tape[{}]", show_target(t)),
        Target::Dispatch(ts) => format!("dispatch[{}]", list(&ts.iter().collect::<Vec<_>>())),
        Target::NotProcedure => "not-procedure".into(),
        Target::Unreachable => "unreachable".into(),
    }
}

/// A tagged aggregate's tag stack, as a suffix: `(1 . 2)^forward`.
fn write_tags(t: vlad_core::Tags, s: &mut String) {
    if t.is_empty() {
        return;
    }
    let names: Vec<&str> = t.iter().map(|x| x.name()).collect();
    let _ = write!(s, "^{}", names.join("^"));
}
