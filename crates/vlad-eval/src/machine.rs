//! The abstract machine: an eval/apply loop over compiled nodes with an explicit continuation
//! stack and a value stack of frames.
//!
//! Proper tail calls: a call whose continuation is "return from this frame" (the top of the
//! continuation stack is a `Frame`) reuses the frame instead of pushing another, so a loop
//! written as tail recursion runs in constant space. Non-tail recursion grows only the heap
//! vectors, never the native stack.

use crate::code::{Capture, Node, NodeId, PatCode};
use crate::value::{Closure, Env, Value};
use crate::{EvalError, Evaluator};
use std::rc::Rc;
use vlad_core::{Datum, Expr, ExprId, Pattern, Prim, Span, Tags};

enum Kont {
    /// The function is evaluated; evaluate the argument next.
    AppArg {
        a: NodeId,
        span: Span,
    },
    /// Both evaluated: apply `f` to the returned argument.
    AppCall {
        f: Value,
        span: Span,
    },
    Prim2A {
        p: Prim,
        b: NodeId,
        span: Span,
    },
    Prim2B {
        p: Prim,
        a: Value,
        span: Span,
    },
    ConsB {
        b: NodeId,
        tags: Tags,
    },
    ConsMake {
        a: Value,
        tags: Tags,
    },
    Let {
        pat: u32,
        body: NodeId,
        span: Span,
    },
    If {
        a: NodeId,
        b: NodeId,
    },
    /// Return from a procedure: restore the caller's frame and closure. `span` is the call site,
    /// used to place errors raised inside built-in code.
    Frame {
        fp: usize,
        clo: Rc<Closure>,
        span: Span,
    },
}

pub(crate) enum Mode {
    Eval(NodeId),
    Ret(Value),
}

pub(crate) struct State {
    stack: Vec<Value>,
    fp: usize,
    clo: Rc<Closure>,
    konts: Vec<Kont>,
    /// The most recent call made from the user's program: where an error raised inside
    /// library or built-in code is reported (tail calls reuse frames). A cell, so that the
    /// arithmetic done in place (`simple`) records its calls too, as compiled code does.
    site: std::cell::Cell<Span>,
}

impl Evaluator {
    /// Runs a closed expression: it becomes the body of a procedure of no arguments.
    pub(crate) fn run_closed(&mut self, e: ExprId) -> Result<Value, EvalError> {
        let clo = self.thunk(e)?;
        self.call(Value::Closure(clo), Value::Nil, Span::NONE)
    }

    /// A closure of no arguments whose body is `e`.
    fn thunk(&mut self, e: ExprId) -> Result<Rc<Closure>, EvalError> {
        let unit = Rc::new(Pattern::Const(Datum::Nil, Tags::EMPTY));
        let lam = self.arena.mk(Expr::Lambda(unit, e, Span::NONE));
        let g = self.group(&[], &[lam])?;
        Ok(Rc::new(Closure {
            group: self.code.groups[g as usize].clone(),
            index: 0,
            env: Rc::new(Env(vec![])),
        }))
    }

    /// Applies a procedure to an argument and runs to completion (a fresh machine). The machine
    /// starts inside a trivial caller, so the call is made like any other.
    pub fn call(&mut self, f: Value, arg: Value, span: Span) -> Result<Value, EvalError> {
        let nil = self.arena.mk(Expr::Const(Datum::Nil, Tags::EMPTY));
        let caller = self.thunk(nil)?;
        let mut st = State {
            stack: Vec::new(),
            fp: 0,
            clo: caller,
            konts: Vec::new(),
            site: std::cell::Cell::new(Span::NONE),
        };
        let mode = self.apply(&mut st, f, arg, span)?;
        self.run(&mut st, mode)
    }

    #[inline]
    fn simple(&self, n: NodeId, st: &State) -> Option<Value> {
        match self.code.nodes[n as usize] {
            Node::Local(s) => Some(st.stack[st.fp + s as usize].clone()),
            Node::Free(i) => Some(st.clo.env.0[i as usize].clone()),
            Node::Const(c) => Some(self.code.consts[c as usize].clone()),
            Node::Sibling(k) => Some(Self::sibling(st, k)),
            // Pure and cheap: arithmetic on reals and pairs of simple operands are evaluated
            // here, without continuations. Anything else (including a type error) takes the
            // general path, which re-evaluates these effect-free operands.
            Node::Prim2 { p, a, b, span } => match (self.simple(a, st)?, self.simple(b, st)?) {
                (Value::Real(x), Value::Real(y)) => {
                    if is_user_span(span) {
                        st.site.set(span);
                    }
                    Some(if p.is_comparison() {
                        Value::Bool(crate::prims::compare(p, x, y))
                    } else {
                        Value::Real(crate::prims::arith(p, x, y))
                    })
                }
                _ => None,
            },
            Node::Cons { tags, a, b } => {
                Some(Value::pair(tags, self.simple(a, st)?, self.simple(b, st)?))
            }
            _ => None,
        }
    }

    fn sibling(st: &State, k: u32) -> Value {
        if st.clo.index == k {
            Value::Closure(st.clo.clone())
        } else {
            Value::Closure(Rc::new(Closure {
                group: st.clo.group.clone(),
                index: k,
                env: st.clo.env.clone(),
            }))
        }
    }

    fn capture(&self, st: &State, caps: u32) -> Rc<Env> {
        let caps = &self.code.caps[caps as usize];
        Rc::new(Env(caps
            .iter()
            .map(|c| match *c {
                Capture::Local(s) => st.stack[st.fp + s as usize].clone(),
                Capture::Free(i) => st.clo.env.0[i as usize].clone(),
                Capture::Sibling(k) => Self::sibling(st, k),
            })
            .collect()))
    }

    fn run(&mut self, st: &mut State, mode: Mode) -> Result<Value, EvalError> {
        self.run_loop(st, mode).map_err(|mut e| {
            // An error inside library or built-in code (the standard library, the AD prelude)
            // is reported at the most recent call made from the user's program.
            if !is_user_span(e.span) {
                let site = st.konts.iter().rev().find_map(|k| match k {
                    Kont::Frame { span, .. } if is_user_span(*span) => Some(*span),
                    _ => None,
                });
                let moved_from = e.span;
                if is_user_span(st.site.get()) {
                    e.span = st.site.get();
                } else if let Some(site) = site {
                    e.span = site;
                }
                if moved_from.is_library() && e.span != moved_from && e.library.is_none() {
                    e.library = moved_from;
                }
            }
            e
        })
    }

    fn run_loop(&mut self, st: &mut State, mut mode: Mode) -> Result<Value, EvalError> {
        loop {
            self.steps += 1;
            if let Some(max) = self.max_steps {
                if self.steps > max {
                    return Err(EvalError::new(
                        Span::NONE,
                        format!("step budget of {max} exhausted"),
                    ));
                }
            }
            mode = match mode {
                Mode::Eval(n) => match self.code.nodes[n as usize] {
                    Node::Local(s) => Mode::Ret(st.stack[st.fp + s as usize].clone()),
                    Node::Free(i) => Mode::Ret(st.clo.env.0[i as usize].clone()),
                    Node::Sibling(k) => Mode::Ret(Self::sibling(st, k)),
                    Node::Const(c) => Mode::Ret(self.code.consts[c as usize].clone()),
                    Node::Lambda { group, caps } => {
                        let env = self.capture(st, caps);
                        let group = self.code.groups[group as usize].clone();
                        Mode::Ret(Value::Closure(Rc::new(Closure {
                            group,
                            index: 0,
                            env,
                        })))
                    }
                    Node::App { f, a, span } => match self.simple(f, st) {
                        Some(fv) => match self.two_simple_args(a, st) {
                            Some((x, y)) => self.apply2(st, fv, x, y, span)?,
                            None => match self.simple(a, st) {
                                Some(av) => self.apply(st, fv, av, span)?,
                                None => {
                                    st.konts.push(Kont::AppCall { f: fv, span });
                                    Mode::Eval(a)
                                }
                            },
                        },
                        None => {
                            st.konts.push(Kont::AppArg { a, span });
                            Mode::Eval(f)
                        }
                    },
                    Node::Prim2 { p, a, b, span } => match self.simple(a, st) {
                        Some(x) => match self.simple(b, st) {
                            Some(y) => self.prim2(st, p, x, y, span)?,
                            None => {
                                st.konts.push(Kont::Prim2B { p, a: x, span });
                                Mode::Eval(b)
                            }
                        },
                        None => {
                            st.konts.push(Kont::Prim2A { p, b, span });
                            Mode::Eval(a)
                        }
                    },
                    Node::Cons { tags, a, b } => match (self.simple(a, st), self.simple(b, st)) {
                        (Some(x), Some(y)) => Mode::Ret(Value::pair(tags, x, y)),
                        _ => {
                            st.konts.push(Kont::ConsB { b, tags });
                            Mode::Eval(a)
                        }
                    },
                    Node::Let { pat, e, body, span } => match self.simple(e, st) {
                        Some(v) => {
                            self.bind(st, pat, v, span)?;
                            Mode::Eval(body)
                        }
                        None => {
                            st.konts.push(Kont::Let { pat, body, span });
                            Mode::Eval(e)
                        }
                    },
                    Node::Letrec {
                        group,
                        caps,
                        first,
                        body,
                    } => {
                        let env = self.capture(st, caps);
                        let g = self.code.groups[group as usize].clone();
                        for k in 0..g.names.len() {
                            let c = Closure {
                                group: g.clone(),
                                index: k as u32,
                                env: env.clone(),
                            };
                            st.stack[st.fp + first as usize + k] = Value::Closure(Rc::new(c));
                        }
                        Mode::Eval(body)
                    }
                    Node::If { c, a, b } => match self.simple(c, st) {
                        Some(v) => Mode::Eval(if v.is_true() { a } else { b }),
                        None => {
                            st.konts.push(Kont::If { a, b });
                            Mode::Eval(c)
                        }
                    },
                },
                Mode::Ret(v) => match st.konts.pop() {
                    None => return Ok(v),
                    Some(k) => match k {
                        Kont::AppArg { a, span } => match self.simple(a, st) {
                            Some(av) => self.apply(st, v, av, span)?,
                            None => {
                                st.konts.push(Kont::AppCall { f: v, span });
                                Mode::Eval(a)
                            }
                        },
                        Kont::AppCall { f, span } => self.apply(st, f, v, span)?,
                        Kont::Prim2A { p, b, span } => match self.simple(b, st) {
                            Some(y) => self.prim2(st, p, v, y, span)?,
                            None => {
                                st.konts.push(Kont::Prim2B { p, a: v, span });
                                Mode::Eval(b)
                            }
                        },
                        Kont::Prim2B { p, a, span } => self.prim2(st, p, a, v, span)?,
                        Kont::ConsB { b, tags } => match self.simple(b, st) {
                            Some(y) => Mode::Ret(Value::pair(tags, v, y)),
                            None => {
                                st.konts.push(Kont::ConsMake { a: v, tags });
                                Mode::Eval(b)
                            }
                        },
                        Kont::ConsMake { a, tags } => Mode::Ret(Value::pair(tags, a, v)),
                        Kont::Let { pat, body, span } => {
                            self.bind(st, pat, v, span)?;
                            Mode::Eval(body)
                        }
                        Kont::If { a, b } => Mode::Eval(if v.is_true() { a } else { b }),
                        Kont::Frame { fp, clo, .. } => {
                            st.stack.truncate(st.fp);
                            st.fp = fp;
                            st.clo = clo;
                            Mode::Ret(v)
                        }
                    },
                },
            };
        }
    }

    /// A binary primitive on two operands; reals take the fast path.
    #[inline]
    fn prim2(
        &mut self,
        st: &mut State,
        p: Prim,
        x: Value,
        y: Value,
        span: Span,
    ) -> Result<Mode, EvalError> {
        if let (Value::Real(a), Value::Real(b)) = (&x, &y) {
            if is_user_span(span) {
                st.site.set(span);
            }
            return Ok(Mode::Ret(if p.is_comparison() {
                Value::Bool(crate::prims::compare(p, *a, *b))
            } else {
                Value::Real(crate::prims::arith(p, *a, *b))
            }));
        }
        self.apply(st, Value::Prim(p), Value::pair(Tags::EMPTY, x, y), span)
    }

    /// The two operands of an argument `(cons x y)` whose parts are simple (effect-free, so
    /// giving up half-way is harmless).
    #[inline]
    fn two_simple_args(&self, a: NodeId, st: &State) -> Option<(Value, Value)> {
        match self.code.nodes[a as usize] {
            Node::Cons { tags, a, b } if tags.is_empty() => {
                Some((self.simple(a, st)?, self.simple(b, st)?))
            }
            _ => None,
        }
    }

    /// `(f x y)`: when `f` is an untransformed closure whose parameters are two variables, they
    /// are bound directly and the argument pair is never built (most multi-argument calls).
    fn apply2(
        &mut self,
        st: &mut State,
        f: Value,
        x: Value,
        y: Value,
        span: Span,
    ) -> Result<Mode, EvalError> {
        if is_user_span(span) {
            st.site.set(span);
        }
        if let Value::Closure(c) = &f {
            let m = &c.group.members[c.index as usize];
            if let PatCode::Cons(tags, pa, pb) = &*self.code.pats[m.pat as usize] {
                if let (true, PatCode::Bind(sa), PatCode::Bind(sb)) =
                    (tags.is_empty(), &**pa, &**pb)
                {
                    let (sa, sb, frame, body) =
                        (*sa as usize, *sb as usize, m.frame as usize, m.body);
                    let Value::Closure(c) = f else {
                        unreachable!("matched above")
                    };
                    self.enter_frame(st, c, span);
                    st.stack.resize(st.fp + frame, Value::Nil);
                    st.stack[st.fp + sa] = x;
                    st.stack[st.fp + sb] = y;
                    return Ok(Mode::Eval(body));
                }
            }
        }
        self.apply(st, f, Value::pair(Tags::EMPTY, x, y), span)
    }

    /// Makes `c` the running closure: reuses the frame for a tail call, else saves the caller's.
    fn enter_frame(&mut self, st: &mut State, c: Rc<Closure>, span: Span) {
        if matches!(st.konts.last(), Some(Kont::Frame { .. })) {
            st.stack.truncate(st.fp);
            st.clo = c;
        } else {
            let caller = std::mem::replace(&mut st.clo, c);
            st.konts.push(Kont::Frame {
                fp: st.fp,
                clo: caller,
                span,
            });
            st.fp = st.stack.len();
        }
    }

    /// Applies `f` to `arg` inside the running machine (tail position if the continuation is a
    /// return).
    pub(crate) fn apply(
        &mut self,
        st: &mut State,
        f: Value,
        arg: Value,
        span: Span,
    ) -> Result<Mode, EvalError> {
        if is_user_span(span) {
            st.site.set(span);
        }
        match f {
            Value::Closure(c) => {
                // Transformed code may only run on values of its level: a forward procedure on
                // forward values, and so on (the tags of the argument start with the closure's).
                let ctags = c.group.tags;
                if !ctags.is_empty() && !tags_start_with(arg.tags(), ctags) {
                    return Err(EvalError::new(
                        span,
                        format!(
                            "this {} procedure was applied to {}, which is not a {} value",
                            ctags.top().expect("nonempty").name(),
                            arg.describe(),
                            ctags.top().expect("nonempty").name()
                        ),
                    ));
                }
                if let Some((vlad_core::Tag::Forward, p)) = c.group.prim_version {
                    if let Some(v) = crate::ad::fast_forward(p, &arg) {
                        return Ok(Mode::Ret(v));
                    }
                }
                let m = &c.group.members[c.index as usize];
                let (pat, frame, body) = (m.pat, m.frame as usize, m.body);
                self.enter_frame(st, c, span);
                st.stack.resize(st.fp + frame, Value::Nil);
                self.bind(st, pat, arg, span)?;
                Ok(Mode::Eval(body))
            }
            Value::Prim(p) => match self.apply_prim(p, arg, span)? {
                crate::prims::Outcome::Value(v) => Ok(Mode::Ret(v)),
                crate::prims::Outcome::TailCall(f, a) => self.apply(st, f, a, span),
            },
            other => Err(EvalError::new(
                span,
                format!("cannot apply {}: it is not a procedure", other.describe()),
            )),
        }
    }

    fn bind(&mut self, st: &mut State, pat: u32, v: Value, span: Span) -> Result<(), EvalError> {
        if let PatCode::Bind(s) = &*self.code.pats[pat as usize] {
            st.stack[st.fp + *s as usize] = v;
            return Ok(());
        }
        let p = self.code.pats[pat as usize].clone();
        let fp = st.fp;
        self.bind_pattern(&p, v, &mut st.stack[fp..], span)
    }

    fn bind_pattern(
        &mut self,
        p: &PatCode,
        v: Value,
        frame: &mut [Value],
        span: Span,
    ) -> Result<(), EvalError> {
        let v = match (p, v) {
            (PatCode::Bind(s), v) => {
                frame[*s as usize] = v;
                return Ok(());
            }
            (_, Value::Zero(z)) => self.force_zero(&z.of, span)?,
            (_, v) => v,
        };
        match p {
            PatCode::Bind(_) => unreachable!("handled above"),
            PatCode::Const(c) => {
                let v = self.materialize(&v, span)?;
                if crate::ad::equal_data(c, &v) {
                    Ok(())
                } else {
                    Err(const_mismatch(c, &v, span))
                }
            }
            PatCode::Cons(tags, a, b) => match &v {
                Value::Pair(pair) if pair.tags == *tags => {
                    self.bind_pattern(a, pair.car.clone(), frame, span)?;
                    self.bind_pattern(b, pair.cdr.clone(), frame, span)
                }
                _ => Err(pair_mismatch(*tags, &v, span)),
            },
        }
    }
}

/// The error of a constant pattern `c` that `v` does not match.
pub fn const_mismatch(c: &Value, v: &Value, span: Span) -> EvalError {
    EvalError::new(
        span,
        format!(
            "pattern mismatch: expected {}, got {}",
            crate::print::to_string(c),
            v.describe()
        ),
    )
}

/// The error of a pair pattern with these tags that `v` does not match.
pub fn pair_mismatch(tags: Tags, v: &Value, span: Span) -> EvalError {
    let what = match tags.top() {
        None => "a pair".to_string(),
        Some(t) => format!("a {} pair", t.name()),
    };
    EvalError::new(
        span,
        format!("pattern mismatch: expected {what}, got {}", v.describe()),
    )
}

/// Spans of the user's files (not of the standard library or built-in code: their errors are
/// reported at the user's call site).
pub fn is_user_span(s: Span) -> bool {
    s.is_user()
}

/// `true` if `outer` is the outermost part of `tags`.
pub fn tags_start_with(tags: Tags, outer: Tags) -> bool {
    let mut a = tags.iter();
    outer.iter().all(|t| a.next() == Some(t))
}
