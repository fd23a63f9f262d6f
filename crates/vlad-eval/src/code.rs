//! Compilation of Core into the evaluator's code: a flat node store with variables resolved to
//! frame slots, closure-environment indices and letrec siblings.
//!
//! A `letrec` group (a plain lambda is a group of one) is compiled once per distinct Core group
//! and cached, including groups created at run time by the AD transforms. Constants and
//! primitives in transformed code are lifted through their tags here, once, not per evaluation.

use crate::value::Value;
use crate::{EvalError, Evaluator};
use std::collections::HashMap;
use std::rc::Rc;
use vlad_core::{Expr, ExprId, Pattern, Prim, Span, Tags, Var};

pub type NodeId = u32;

/// How a closure captures one free variable of a group it creates.
#[derive(Clone, Copy, Debug)]
pub enum Capture {
    Local(u32),
    Free(u32),
    Sibling(u32),
}

#[derive(Clone, Copy, Debug)]
pub enum Node {
    Local(u32),
    Free(u32),
    Sibling(u32),
    Const(u32),
    Lambda {
        group: u32,
        caps: u32,
    },
    App {
        f: NodeId,
        a: NodeId,
        span: Span,
    },
    /// `(p a b)` for an untransformed binary primitive: the argument pair is never built when
    /// both operands are reals (the common case in numeric loops).
    Prim2 {
        p: Prim,
        a: NodeId,
        b: NodeId,
        span: Span,
    },
    Cons {
        tags: Tags,
        a: NodeId,
        b: NodeId,
    },
    Let {
        pat: u32,
        e: NodeId,
        body: NodeId,
        span: Span,
    },
    Letrec {
        group: u32,
        caps: u32,
        first: u32,
        body: NodeId,
    },
    If {
        c: NodeId,
        a: NodeId,
        b: NodeId,
    },
}

/// A compiled parameter or `let` pattern.
#[derive(Debug)]
pub enum PatCode {
    Bind(u32),
    Const(Value),
    Cons(Tags, Box<PatCode>, Box<PatCode>),
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", crate::print::to_string(self))
    }
}

/// One member of a group: its parameter pattern, frame size and body.
pub struct Member {
    pub pat: u32,
    pub frame: u32,
    pub body: NodeId,
}

/// A compiled letrec group.
pub struct Group {
    pub id: u32,
    pub names: Vec<Var>,
    pub lambdas: Vec<ExprId>,
    /// The environment layout: free variables of the group, sorted.
    pub free: Rc<[Var]>,
    /// The AD tags of closures of this group (from the transforms that made its code).
    pub tags: Tags,
    pub members: Vec<Member>,
    /// For the prelude's transformed primitives: which version of which primitive this is
    /// (the machine runs forward arithmetic on plain bundles natively).
    pub prim_version: Option<(vlad_core::Tag, vlad_core::Prim)>,
}

#[derive(Default)]
pub struct Code {
    pub nodes: Vec<Node>,
    pub consts: Vec<Value>,
    pub caps: Vec<Box<[Capture]>>,
    pub pats: Vec<Rc<PatCode>>,
    pub groups: Vec<Rc<Group>>,
    group_ids: HashMap<(Vec<Var>, Vec<ExprId>), u32>,
}

struct Scope {
    free: Rc<[Var]>,
    names: Vec<Var>,
    locals: Vec<(Var, u32)>,
    next: u32,
}

impl Scope {
    fn slot(&mut self, v: Var) -> u32 {
        let s = self.next;
        self.next += 1;
        self.locals.push((v, s));
        s
    }

    fn resolve(&self, v: Var) -> Capture {
        if let Some((_, s)) = self.locals.iter().rev().find(|(x, _)| *x == v) {
            return Capture::Local(*s);
        }
        if let Some(k) = self.names.iter().position(|x| *x == v) {
            return Capture::Sibling(k as u32);
        }
        match self.free.binary_search(&v) {
            Ok(i) => Capture::Free(i as u32),
            Err(_) => {
                unreachable!("variable {v:?} is not in scope: the expander closes every program")
            }
        }
    }
}

impl Evaluator {
    fn node(&mut self, n: Node) -> NodeId {
        self.code.nodes.push(n);
        (self.code.nodes.len() - 1) as NodeId
    }

    /// The compiled group for these letrec names and lambdas (compiled on first use).
    pub(crate) fn group(&mut self, names: &[Var], lambdas: &[ExprId]) -> Result<u32, EvalError> {
        let key = (names.to_vec(), lambdas.to_vec());
        if let Some(g) = self.code.group_ids.get(&key) {
            return Ok(*g);
        }
        let mut free: Vec<Var> = Vec::new();
        for l in lambdas {
            free.extend(
                self.arena
                    .free_vars(*l)
                    .iter()
                    .filter(|v| !names.contains(v)),
            );
        }
        free.sort();
        free.dedup();
        let free: Rc<[Var]> = free.into();
        let tags = self.lambda_tags(lambdas[0]);
        let mut members = Vec::with_capacity(lambdas.len());
        for l in lambdas {
            let Expr::Lambda(pat, body, _) = self.arena.get(*l).clone() else {
                unreachable!("letrec binds lambdas")
            };
            let mut sc = Scope {
                free: free.clone(),
                names: names.to_vec(),
                locals: vec![],
                next: 0,
            };
            let pat = self.compile_pattern(&pat, &mut sc)?;
            let body = self.compile(body, &mut sc)?;
            members.push(Member {
                pat,
                frame: sc.next,
                body,
            });
        }
        let id = self.code.groups.len() as u32;
        self.code.groups.push(Rc::new(Group {
            id,
            names: names.to_vec(),
            lambdas: lambdas.to_vec(),
            free,
            tags,
            members,
            prim_version: self
                .prelude_ids
                .as_ref()
                .and_then(|p| p.version_of(lambdas[0])),
        }));
        self.code.group_ids.insert(key, id);
        Ok(id)
    }

    /// The tags of closures of a lambda: those of its parameter (every transform tags the
    /// parameter, and the prelude's transformed primitives are written with tagged parameters).
    fn lambda_tags(&self, l: ExprId) -> Tags {
        match self.arena.get(l) {
            Expr::Lambda(p, _, _) => vlad_core::reverse::pattern_tags(p),
            _ => Tags::EMPTY,
        }
    }

    fn compile_pattern(&mut self, p: &Pattern, sc: &mut Scope) -> Result<u32, EvalError> {
        let code = self.pattern_code(p, sc)?;
        self.code.pats.push(Rc::new(code));
        Ok((self.code.pats.len() - 1) as u32)
    }

    fn pattern_code(&mut self, p: &Pattern, sc: &mut Scope) -> Result<PatCode, EvalError> {
        Ok(match p {
            Pattern::Var(v) => PatCode::Bind(sc.slot(*v)),
            Pattern::Const(d, tags) => {
                PatCode::Const(self.lift(crate::datum_value(d), *tags, Span::NONE)?)
            }
            Pattern::Cons(tags, a, b) => PatCode::Cons(
                *tags,
                Box::new(self.pattern_code(a, sc)?),
                Box::new(self.pattern_code(b, sc)?),
            ),
        })
    }

    fn captures(&mut self, g: u32, sc: &Scope) -> u32 {
        let free = self.code.groups[g as usize].free.clone();
        let caps: Box<[Capture]> = free.iter().map(|v| sc.resolve(*v)).collect();
        self.code.caps.push(caps);
        (self.code.caps.len() - 1) as u32
    }

    /// `(p x y)` with `p` an untransformed binary real primitive or comparison.
    fn binary_prim_call(&self, f: ExprId, a: ExprId) -> Option<(Prim, ExprId, ExprId)> {
        match (self.arena.get(f), self.arena.get(a)) {
            (Expr::Prim(p, t), Expr::Cons(ct, x, y))
                if t.is_empty() && ct.is_empty() && (p.is_binary_real() || p.is_comparison()) =>
            {
                Some((*p, *x, *y))
            }
            _ => None,
        }
    }

    fn compile(&mut self, e: ExprId, sc: &mut Scope) -> Result<NodeId, EvalError> {
        let node = match self.arena.get(e).clone() {
            Expr::Var(v) => match sc.resolve(v) {
                Capture::Local(s) => Node::Local(s),
                Capture::Free(i) => Node::Free(i),
                Capture::Sibling(k) => Node::Sibling(k),
            },
            Expr::Const(d, tags) => {
                let v = self.lift(crate::datum_value(&d), tags, Span::NONE)?;
                self.code.consts.push(v);
                Node::Const((self.code.consts.len() - 1) as u32)
            }
            Expr::Prim(p, tags) => {
                let v = self.lift(Value::Prim(p), tags, Span::NONE)?;
                self.code.consts.push(v);
                Node::Const((self.code.consts.len() - 1) as u32)
            }
            Expr::Lambda(..) => {
                let group = self.group(&[], &[e])?;
                let caps = self.captures(group, sc);
                Node::Lambda { group, caps }
            }
            Expr::App(f, a, span) if self.binary_prim_call(f, a).is_some() => {
                let (p, x, y) = self.binary_prim_call(f, a).expect("checked");
                let a = self.compile(x, sc)?;
                let b = self.compile(y, sc)?;
                Node::Prim2 { p, a, b, span }
            }
            Expr::App(f, a, span) => {
                let f = self.compile(f, sc)?;
                let a = self.compile(a, sc)?;
                Node::App { f, a, span }
            }
            Expr::Cons(tags, a, b) => {
                let a = self.compile(a, sc)?;
                let b = self.compile(b, sc)?;
                Node::Cons { tags, a, b }
            }
            Expr::Letrec(bs, body) => {
                let names: Vec<Var> = bs.iter().map(|(v, _)| *v).collect();
                let lambdas: Vec<ExprId> = bs.iter().map(|(_, l)| *l).collect();
                let group = self.group(&names, &lambdas)?;
                let caps = self.captures(group, sc);
                let mark = sc.locals.len();
                let first = sc.next;
                for v in &names {
                    sc.slot(*v);
                }
                let body = self.compile(body, sc)?;
                sc.locals.truncate(mark);
                Node::Letrec {
                    group,
                    caps,
                    first,
                    body,
                }
            }
            Expr::Let(pat, x, body, span) => {
                let x = self.compile(x, sc)?;
                let mark = sc.locals.len();
                let pat = self.compile_pattern(&pat, sc)?;
                let body = self.compile(body, sc)?;
                sc.locals.truncate(mark);
                Node::Let {
                    pat,
                    e: x,
                    body,
                    span,
                }
            }
            Expr::If(c, a, b) => {
                let c = self.compile(c, sc)?;
                let a = self.compile(a, sc)?;
                let b = self.compile(b, sc)?;
                Node::If { c, a, b }
            }
        };
        Ok(self.node(node))
    }
}
