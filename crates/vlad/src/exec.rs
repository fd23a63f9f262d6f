//! An executor for the specialised program: runs each top-level expression through its
//! specialised functions, every call through the target the analysis resolved for it.
//!
//! Values are the evaluator's (so primitives, the AD operators and printing are shared and
//! cannot differ); what is tested here is the specialisation: that every call the program
//! makes is one the analysis predicted, to the function specialised for it. A call whose
//! callee is not the predicted code is an internal error, never a silent fallback.
//!
//! Tail calls run in a loop (a 10^6-step loop needs no native stack); other calls recurse
//! natively, so deep non-tail recursion needs a large stack (the CLI runs on a 1 GiB thread).

use std::rc::Rc;
use vlad_core::{Expr, ExprId, Pattern, Prim, Span, Var};
use vlad_eval::machine::{const_mismatch, is_user_span, pair_mismatch, tags_start_with};
use vlad_eval::value::{Closure, Value};
use vlad_eval::{EvalError, Evaluator};
use vlad_flow::{Program, Target};

type R<T> = Result<T, EvalError>;

/// The result of evaluating an expression in tail position: a value, or a call to make in
/// place of the current one.
enum Out {
    Value(Value),
    Call(usize, Rc<Closure>, Value, Span),
}

struct Frame {
    locals: Vec<(Var, Value)>,
}

pub struct Executor<'a> {
    pub ev: &'a mut Evaluator,
    prog: &'a Program,
    /// The most recent call made from the user's program (errors in built-in code are
    /// reported there, as by the evaluator).
    site: Span,
    /// Stop with an error after this many calls (for generated test programs).
    pub max_calls: Option<u64>,
    calls: u64,
}

fn internal(span: Span, m: impl Into<String>) -> EvalError {
    EvalError::new(
        span,
        format!("internal error in the specialised program: {}", m.into()),
    )
}

impl<'a> Executor<'a> {
    pub fn new(ev: &'a mut Evaluator, prog: &'a Program) -> Executor<'a> {
        Executor {
            ev,
            prog,
            site: Span::NONE,
            max_calls: None,
            calls: 0,
        }
    }

    /// Runs the top-level expression whose entry function is `entry`.
    pub fn run(&mut self, entry: usize) -> R<Value> {
        let fun = self.fun(entry, Span::NONE)?;
        let code = &self.prog.codes[fun.code.0 as usize];
        let thunk = self
            .ev
            .make_closure(&code.names, &code.lambdas, code.index, vec![])?;
        let Value::Closure(c) = thunk else {
            unreachable!("make_closure makes closures")
        };
        let r = self.call(entry, c, Value::Nil, Span::NONE);
        self.ev.output.flush();
        r.map_err(|mut e| {
            if !is_user_span(e.span) && is_user_span(self.site) {
                if e.span.is_library() && e.library.is_none() {
                    e.library = e.span;
                }
                e.span = self.site;
            }
            e
        })
    }

    fn fun(&self, k: usize, span: Span) -> R<&'a vlad_flow::specialise::Fun> {
        match self.prog.funs.get(k) {
            Some(Some(f)) => Ok(f),
            _ => Err(internal(span, format!("function {k} was not specialised"))),
        }
    }

    /// Calls the function of key `k` with the closure `clo` (whose code must be the key's) on
    /// `arg`; tail calls in its body loop here.
    fn call(
        &mut self,
        mut k: usize,
        mut clo: Rc<Closure>,
        mut arg: Value,
        mut span: Span,
    ) -> R<Value> {
        loop {
            self.calls += 1;
            if let Some(max) = self.max_calls {
                if self.calls > max {
                    return Err(EvalError::new(
                        span,
                        format!("call budget of {max} exhausted"),
                    ));
                }
            }
            let fun = self.fun(k, span)?;
            let code = &self.prog.codes[fun.code.0 as usize];
            let runs = self
                .prog
                .code_of(&clo.group.names, &clo.group.lambdas, clo.index);
            if runs != Some(fun.code) {
                return Err(internal(span, "a call reached a function of another code"));
            }
            // Transformed code only runs on values of its level (as in the evaluator).
            let ctags = clo.group.tags;
            if !ctags.is_empty() && !tags_start_with(arg.tags(), ctags) {
                let name = ctags.top().expect("nonempty").name();
                return Err(EvalError::new(
                    span,
                    format!(
                        "this {name} procedure was applied to {}, which is not a {name} value",
                        arg.describe()
                    ),
                ));
            }
            let Expr::Lambda(p, body, _) = self.ev.arena.get(code.lambda()).clone() else {
                unreachable!("codes are lambdas")
            };
            let mut frame = Frame { locals: Vec::new() };
            for (v, x) in code.free.iter().zip(clo.env.0.iter()) {
                frame.locals.push((*v, x.clone()));
            }
            for (j, name) in code.names.iter().enumerate() {
                let sib = if j as u32 == clo.index {
                    Value::Closure(clo.clone())
                } else {
                    Value::Closure(Rc::new(Closure {
                        group: clo.group.clone(),
                        index: j as u32,
                        env: clo.env.clone(),
                    }))
                };
                frame.locals.push((*name, sib));
            }
            self.bind(&p, arg, &mut frame, span)?;
            match self.eval(body, &mut frame, k, true)? {
                Out::Value(v) => return Ok(v),
                Out::Call(k2, c2, a2, s2) => {
                    k = k2;
                    clo = c2;
                    arg = a2;
                    span = s2;
                }
            }
        }
    }

    fn value(&mut self, e: ExprId, frame: &mut Frame, k: usize) -> R<Value> {
        match self.eval(e, frame, k, false)? {
            Out::Value(v) => Ok(v),
            Out::Call(k2, c, a, s) => self.call(k2, c, a, s),
        }
    }

    fn eval(&mut self, e: ExprId, frame: &mut Frame, k: usize, tail: bool) -> R<Out> {
        let v = match self.ev.arena.get(e).clone() {
            Expr::Var(v) => lookup(frame, v)?,
            Expr::Const(d, tags) => {
                let v = vlad_eval::datum_value(&d);
                self.ev.constant(v, tags)?
            }
            Expr::Prim(p, tags) => self.ev.constant(Value::Prim(p), tags)?,
            Expr::Lambda(..) => {
                let free = self.ev.arena.free_vars(e);
                let env = free
                    .iter()
                    .map(|v| lookup(frame, *v))
                    .collect::<R<Vec<Value>>>()?;
                self.ev.make_closure(&[], &[e], 0, env)?
            }
            Expr::App(f, a, span) => {
                let fv = self.value(f, frame, k)?;
                let av = self.value(a, frame, k)?;
                if is_user_span(span) {
                    self.site = span;
                }
                let target = self.prog.targets.get(&(k, e)).cloned();
                let Some(target) = target else {
                    return Err(internal(span, "a call site the analysis did not reach"));
                };
                return self.apply(&target, fv, av, span, tail);
            }
            Expr::Cons(tags, a, b) => {
                let x = self.value(a, frame, k)?;
                let y = self.value(b, frame, k)?;
                Value::pair(tags, x, y)
            }
            Expr::Letrec(bs, body) => {
                let names: Vec<Var> = bs.iter().map(|(v, _)| *v).collect();
                let lambdas: Vec<ExprId> = bs.iter().map(|(_, l)| *l).collect();
                // The group's environment layout, as the analysis computed it.
                let Some(code) = self.prog.code_of(&names, &lambdas, 0) else {
                    return Err(internal(Span::NONE, "a letrec the analysis did not reach"));
                };
                let free = self.prog.codes[code.0 as usize].free.clone();
                let env = free
                    .iter()
                    .map(|v| lookup(frame, *v))
                    .collect::<R<Vec<Value>>>()?;
                let mark = frame.locals.len();
                for (j, name) in names.iter().enumerate() {
                    let c = self
                        .ev
                        .make_closure(&names, &lambdas, j as u32, env.clone())?;
                    frame.locals.push((*name, c));
                }
                let r = self.eval(body, frame, k, tail);
                frame.locals.truncate(mark);
                return r;
            }
            Expr::Let(p, x, body, span) => {
                let v = self.value(x, frame, k)?;
                let mark = frame.locals.len();
                self.bind(&p, v, frame, span)?;
                let r = self.eval(body, frame, k, tail);
                frame.locals.truncate(mark);
                return r;
            }
            Expr::If(c, a, b) => {
                let v = self.value(c, frame, k)?;
                return self.eval(if v.is_true() { a } else { b }, frame, k, tail);
            }
        };
        Ok(Out::Value(v))
    }

    /// Makes the call the analysis resolved.
    fn apply(&mut self, t: &Target, f: Value, a: Value, span: Span, tail: bool) -> R<Out> {
        match t {
            Target::Direct(k) => {
                let Value::Closure(c) = f else {
                    return Err(internal(span, "a direct call of a non-closure"));
                };
                if tail {
                    Ok(Out::Call(*k, c, a, span))
                } else {
                    Ok(Out::Value(self.call(*k, c, a, span)?))
                }
            }
            Target::Dispatch(ts) => {
                let chosen = ts.iter().find(|t| match (t, &f) {
                    (Target::Direct(k), Value::Closure(c)) => {
                        let code = self.prog.funs[*k].as_ref().map(|f| f.code);
                        code.is_some()
                            && self.prog.code_of(&c.group.names, &c.group.lambdas, c.index) == code
                    }
                    (Target::Prim(p), Value::Prim(q)) => p == q,
                    (Target::IfProc(..), Value::Prim(q)) => *q == Prim::IfProcedure,
                    (Target::Checkpoint(_), Value::Prim(q)) => *q == Prim::Checkpoint,
                    (Target::Build(_), Value::Prim(q)) => *q == Prim::Build,
                    (Target::Ifold(_), Value::Prim(q)) => *q == Prim::Ifold,
                    (Target::IfoldTape(_), Value::Prim(q)) => *q == Prim::IfoldTape,
                    _ => false,
                });
                match chosen {
                    Some(t) => {
                        let t = t.clone();
                        self.apply(&t, f, a, span, tail)
                    }
                    None if !f.is_procedure() => Err(not_procedure(&f, span)),
                    None => Err(internal(
                        span,
                        "a boxed procedure the analysis did not predict",
                    )),
                }
            }
            Target::Prim(p) => {
                if !matches!(f, Value::Prim(q) if q == *p) {
                    return Err(internal(span, "a primitive call reached another procedure"));
                }
                Ok(Out::Value(self.ev.apply_primitive(*p, a, span)?))
            }
            Target::IfProc(then, els) => {
                let parts = vlad_eval::prims::two(&a)
                    .and_then(|(c, rest)| vlad_eval::prims::two(rest).map(|(t, e)| (c, t, e)));
                let Some((c, th, el)) = parts else {
                    let m = vlad_eval::prims::malformed_call(Prim::IfProcedure, &a);
                    return Err(EvalError::new(span, m));
                };
                let (t, chosen) = if c.is_true() {
                    (then, th.clone())
                } else {
                    (els, el.clone())
                };
                self.apply(t, chosen, Value::Nil, span, tail)
            }
            Target::Checkpoint(t) => {
                let Some((f, x)) = vlad_eval::prims::two(&a) else {
                    let m = vlad_eval::prims::malformed_call(Prim::Checkpoint, &a);
                    return Err(EvalError::new(span, m));
                };
                let (f, x) = (f.clone(), x.clone());
                self.apply(t, f, x, span, tail)
            }
            Target::Build(elem) => {
                let (n, f) = two(&a, span)?;
                let n = self.ev.apply_primitive(Prim::BuildLength, n, span)?;
                let Value::Real(n) = n else {
                    return Err(internal(span, "a bad length"));
                };
                let mut elems = Vec::with_capacity(n as usize);
                for i in 0..n as usize {
                    let v = self.apply(elem, f.clone(), Value::Real(i as f64), span, false)?;
                    elems.push(self.finish(v)?);
                }
                Ok(Out::Value(Value::array(vlad_core::Tags::EMPTY, elems)))
            }
            Target::ForwardBuild(elem) => {
                // The forward `build` as its definition runs it: the length checked (a forward
                // real), `f` called on the indices lifted to the argument's forward tags (zero
                // tangents), the elements in an array with those tags.
                let tags = a.tags();
                let Value::Pair(p) = &a else {
                    return Err(internal(span, "a forward `build` of a non-pair"));
                };
                let (n, f) = (p.car.clone(), p.cdr.clone());
                let mut len = self.ev.apply_primitive(Prim::BuildLength, n, span)?;
                for _ in 0..tags.depth() {
                    len = self.ev.apply_primitive(Prim::Primal, len, span)?;
                }
                let Value::Real(len) = len else {
                    return Err(internal(span, "a bad length"));
                };
                let mut elems = Vec::with_capacity(len as usize);
                for i in 0..len as usize {
                    let index = self.forward_index(i, tags, span)?;
                    let v = self.apply(elem, f.clone(), index, span, false)?;
                    elems.push(self.finish(v)?);
                }
                Ok(Out::Value(Value::array(tags, elems)))
            }
            Target::ForwardIfold(step) => {
                // The forward `ifold` as its definition runs it: the count checked (a forward
                // real), `f` called on the forward pairs of the accumulator and the indices
                // lifted to the argument's forward tags.
                let tags = a.tags();
                let parts = match &a {
                    Value::Pair(p) => match &p.cdr {
                        Value::Pair(q) => Some((p.car.clone(), q.car.clone(), q.cdr.clone())),
                        _ => None,
                    },
                    _ => None,
                };
                let Some((f, init, n)) = parts else {
                    return Err(internal(span, "a forward `ifold` of a non-list"));
                };
                let mut count = self.ev.apply_primitive(Prim::IfoldCount, n, span)?;
                for _ in 0..tags.depth() {
                    count = self.ev.apply_primitive(Prim::Primal, count, span)?;
                }
                let Value::Real(count) = count else {
                    return Err(internal(span, "a bad count"));
                };
                let mut acc = init;
                for i in 0..count as usize {
                    let index = self.forward_index(i, tags, span)?;
                    let v =
                        self.apply(step, f.clone(), Value::pair(tags, acc, index), span, false)?;
                    acc = self.finish(v)?;
                }
                Ok(Out::Value(acc))
            }
            Target::Ifold(step) => {
                let (f, rest) = two(&a, span)?;
                let (init, n) = two(&rest, span)?;
                let n = self.ev.apply_primitive(Prim::IfoldCount, n, span)?;
                let Value::Real(n) = n else {
                    return Err(internal(span, "a bad count"));
                };
                let mut acc = init;
                for i in 0..n as usize {
                    let arg = Value::pair(vlad_core::Tags::EMPTY, acc, Value::Real(i as f64));
                    let v = self.apply(step, f.clone(), arg, span, false)?;
                    acc = self.finish(v)?;
                }
                Ok(Out::Value(acc))
            }
            Target::IfoldTape(step) => {
                let (f, rest) = two(&a, span)?;
                let (init, n) = two(&rest, span)?;
                let n = self.ev.apply_primitive(Prim::IfoldCount, n, span)?;
                let Value::Real(n) = n else {
                    return Err(internal(span, "a bad count"));
                };
                let mut acc = init;
                let mut outs = Vec::with_capacity(n as usize);
                for i in 0..n as usize {
                    let arg = Value::pair(vlad_core::Tags::EMPTY, acc, Value::Real(i as f64));
                    let v = self.apply(step, f.clone(), arg, span, false)?;
                    let r = self.finish(v)?;
                    let (next, out) = two(&r, span)?;
                    acc = next;
                    outs.push(out);
                }
                let outs = Value::array(vlad_core::Tags::EMPTY, outs);
                Ok(Out::Value(Value::pair(vlad_core::Tags::EMPTY, acc, outs)))
            }
            Target::NotProcedure => Err(not_procedure(&f, span)),
            Target::Unreachable => Err(internal(span, "a call the analysis found unreachable")),
        }
    }

    /// Index `i` lifted to the forward tags `tags` (its tangents zero), as the forward loops'
    /// definitions make it.
    fn forward_index(&mut self, i: usize, tags: vlad_core::Tags, span: Span) -> R<Value> {
        let mut index = Value::Real(i as f64);
        for _ in 0..tags.depth() {
            let zero = self.ev.apply_primitive(Prim::Zero, index.clone(), span)?;
            let t = self.ev.apply_primitive(Prim::Perturb, zero, span)?;
            let pair = Value::pair(vlad_core::Tags::EMPTY, index, t);
            index = self.ev.apply_primitive(Prim::Bundle, pair, span)?;
        }
        Ok(index)
    }

    fn finish(&mut self, o: Out) -> R<Value> {
        match o {
            Out::Value(v) => Ok(v),
            Out::Call(k, c, a, s) => self.call(k, c, a, s),
        }
    }

    /// Binds a pattern as the evaluator's machine does (same errors).
    fn bind(&mut self, p: &Pattern, v: Value, frame: &mut Frame, span: Span) -> R<()> {
        if let Pattern::Var(x) = p {
            frame.locals.push((*x, v));
            return Ok(());
        }
        let v = self.ev.force_lazy(&v)?;
        match p {
            Pattern::Var(_) => unreachable!("handled above"),
            Pattern::Const(d, tags) => {
                let c = self.ev.constant(vlad_eval::datum_value(d), *tags)?;
                let v = self.ev.materialize(&v, span)?;
                if vlad_eval::ad::equal_data(&c, &v) {
                    Ok(())
                } else {
                    Err(const_mismatch(&c, &v, span))
                }
            }
            Pattern::Cons(tags, a, b) => match &v {
                Value::Pair(pair) if pair.tags == *tags => {
                    self.bind(a, pair.car.clone(), frame, span)?;
                    self.bind(b, pair.cdr.clone(), frame, span)
                }
                _ => Err(pair_mismatch(*tags, &v, span)),
            },
        }
    }
}

fn lookup(frame: &Frame, v: Var) -> R<Value> {
    frame
        .locals
        .iter()
        .rev()
        .find(|(x, _)| *x == v)
        .map(|(_, x)| x.clone())
        .ok_or_else(|| internal(Span::NONE, "unbound variable"))
}

/// The parts of an argument pair, with the error the evaluator's definitions of `build` and
/// `ifold` give (their parameter patterns).
fn two(a: &Value, span: Span) -> R<(Value, Value)> {
    match vlad_eval::prims::two(a) {
        Some((x, y)) => Ok((x.clone(), y.clone())),
        None => Err(EvalError::new(
            span,
            format!("pattern mismatch: expected a pair, got {}", a.describe()),
        )),
    }
}

fn not_procedure(f: &Value, span: Span) -> EvalError {
    EvalError::new(
        span,
        format!("cannot apply {}: it is not a procedure", f.describe()),
    )
}
