//! The lowering (paper 001 §6): the specialised program of the flow analysis as a typed IR
//! program (`vlad-ir`).
//!
//! Every value of the specialised program has a layout fixed by its abstract value, and the
//! lowering keeps it *flat*: a value is a list of scalar leaves (an `f64` for "some real", a
//! `bool` for "some boolean", a pointer for a boxed value or a flat array), with everything
//! known at compile time erased. Pairs, closures, bundles and tagged values are never
//! allocated: their leaves travel as separate variables and parameters (scalar replacement of
//! aggregates by construction), so a closure is its free variables' leaves and a call of a known
//! closure is a direct call. A function's results are the leaves of its result.
//!
//! Boxed values (`Av::Dyn`) are runtime objects; a boxed closure keeps its code number and its
//! leaves in the layout of its code's environment summary, and a call of a boxed procedure is a
//! `switch` over the codes it may be, each case a direct call. Converting a value to the layout
//! of a wider abstract value (`coerce`) is where known constants are materialised and values
//! are boxed.
//!
//! The AD operators are maps over the layouts (`prims`): `perturb`, `*j`, ... change tags only
//! and keep the leaves; `bundle` interleaves its arguments' leaves, `primal` and `tangent` select
//! them, `plus` adds them, and zeros are known at compile time. Arrays are flat runtime objects
//! (`arrays`), with `build` and `ifold` lowered to the IR's loops of the same names.
//!
//! What the lowering cannot handle is reported as `Unsupported` with a reason and a position in
//! the user's program; `vlad run` then falls back to the evaluator. The memory management of
//! the program (arena marks), its tail calls and its explicit-stack machines are the IR passes'
//! (`vlad_ir::passes`).
//!
//! Architecture invariant: the lowering never changes the analysis's answer; where it cannot
//! represent something it refuses.

mod accumulate;
mod arrays;
mod layout;
mod maps;
mod prims;
mod soa;

use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use vlad_core::{Expr, ExprId, Pattern, Span, Var};
use vlad_flow::analysis::datum_av;
use vlad_flow::{Analysis, Av, Boxed, Program, Target};
use vlad_ir::{
    BinOp, Block, Builder, FuncId, FuncKind, Layout, MapKind, Op, Operand, Rt, Site, Stmt, Ty, UnOp,
};

/// Why a program cannot be compiled (yet); `vlad run` says this and falls back to the
/// evaluator.
#[derive(Clone, Debug)]
pub struct Unsupported {
    pub span: Span,
    pub reason: String,
}

type R<T> = Result<T, Unsupported>;

/// A value in the lowered code: its abstract value and the operands of its leaves.
#[derive(Clone, Debug)]
struct Val {
    av: Av,
    leaves: Vec<Operand>,
}

impl Val {
    fn known(av: Av) -> Val {
        Val {
            av,
            leaves: Vec::new(),
        }
    }
}

/// A condition: known at compile time, or a boolean operand.
#[derive(Clone, Debug, PartialEq)]
enum Cond {
    Known(bool),
    Test(Operand),
}

/// The code numbers of primitives in a dispatch `switch` (closures use their code number).
fn prim_case(p: vlad_core::Prim) -> i64 {
    -1 - prim_index(p) as i64
}

fn prim_index(p: vlad_core::Prim) -> usize {
    vlad_core::Prim::ALL
        .iter()
        .position(|q| *q == p)
        .expect("a primitive")
}

/// How the function being lowered returns: its result's abstract value and layout.
struct Return {
    av: Av,
    layout: Layout,
}

/// The error site of a source span (its position, source line and caret); `None` for no
/// position. For a span in library code: the message its errors are reported with, as the
/// prefix (no excerpt), if its line gives one.
pub type SiteRenderer<'r> = &'r dyn Fn(Span) -> Option<Site>;

struct Lowerer<'g, 'a> {
    an: &'g mut Analysis<'a>,
    prog: &'g Program,
    boxed: Boxed,
    render: SiteRenderer<'g>,
    /// The program being built: its globals, sites and (at the end) its functions.
    out: vlad_ir::Program,
    site_ids: HashMap<Span, usize>,
    /// The function of each specialised key.
    func_of: HashMap<usize, FuncId>,
    /// The function being lowered.
    b: Builder,
    /// The key whose body is lowered (its recorded values); `usize::MAX` outside one.
    key: usize,
    /// The innermost source position, for `Unsupported`.
    span: Span,
    /// The AD maps of boxed closures the program uses.
    map_kinds: std::collections::BTreeSet<MapKind>,
    /// Boxing only to print or describe a value: a closure whose code is never called boxed
    /// (it has no environment summary) is boxed without its environment.
    for_display: bool,
    /// Lowering a sweep's `%accumulate`: the lengths it checks are those of two sensitivities
    /// of one value (`Rt::AccLengthFail`).
    accumulating: bool,
    /// Boxed constants: the global that holds each (see `boxed_val`), and the function that
    /// builds them all at start-up.
    constants: HashMap<Av, vlad_ir::GlobalId>,
    init: Builder,
    /// The code being built is the initialisation function's (`detached`).
    in_init: bool,
    /// The element layouts of flat arrays boxed by reference (`vl_flatref`), with whether
    /// they are boxed only for display: entry `N` is boxed by `vl_box_elem_N`
    /// (`arrays.rs`, `elem_boxer`).
    elem_boxers: Vec<(Av, bool)>,
    elem_boxer_ids: HashMap<(Av, bool), usize>,
    /// The helper functions made so far (closure maps, element boxers), added after the
    /// specialised functions.
    helpers: Vec<vlad_ir::Function>,
}

/// Lowers the specialised `prog` of `an` to the IR; `render` gives the position text of error
/// sites. `final_error`, if any, is a rendered diagnostic the program reports after its
/// top-level expressions, exiting with status 1 (the expansion error of the top-level form that
/// follows them, which the evaluator reports when it gets there). With `print_values`, the
/// value of each entry is printed on a line of its own; without, the entries print only what
/// they write (a whole program's run writes its expressions' values itself).
pub fn lower(
    an: &mut Analysis<'_>,
    prog: &Program,
    render: SiteRenderer<'_>,
    final_error: Option<&str>,
    print_values: bool,
    exports: &[Export],
) -> R<vlad_ir::Program> {
    let boxed = an.boxed_snapshot();
    let keys: Vec<usize> = (0..prog.funs.len())
        .filter(|k| prog.funs[*k].is_some())
        .collect();
    let func_of: HashMap<usize, FuncId> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (*k, FuncId(i as u32)))
        .collect();
    let mut g = Lowerer {
        an,
        prog,
        boxed,
        render,
        out: vlad_ir::Program {
            sites: vec![Site {
                prefix: "vlad: error: ".into(),
                excerpt: None,
            }],
            prim_names: vlad_core::Prim::ALL
                .iter()
                .map(|p| p.name().to_string())
                .collect(),
            ..Default::default()
        },
        site_ids: HashMap::new(),
        func_of,
        b: Builder::new(),
        key: usize::MAX,
        span: Span::NONE,
        map_kinds: Default::default(),
        for_display: false,
        accumulating: false,
        constants: HashMap::new(),
        init: Builder::new(),
        in_init: false,
        elem_boxers: Vec::new(),
        elem_boxer_ids: HashMap::new(),
        helpers: Vec::new(),
    };
    let mut funcs = Vec::with_capacity(keys.len());
    for &k in &keys {
        let f = g.function(k).map_err(|u| g.placed(u))?;
        funcs.push(f);
    }
    // The entry point: each top-level expression in order, its value printed.
    g.key = usize::MAX;
    g.b = Builder::new();
    let init_id = FuncId((keys.len()) as u32);
    g.b.effect(Op::Call {
        func: init_id,
        args: Vec::new(),
        guard: None,
    });
    for &k in &prog.entries {
        let v = g.call_fun(k, Vec::new(), Vec::new())?;
        if v.av == Av::Bottom || !print_values {
            continue;
        }
        if let Some(text) = layout::known_text(&v.av) {
            // Printed at compile time (a constant list may be long).
            g.b.effect(Op::Rt(Rt::PutLine, vec![Operand::Str(text.into())]));
            continue;
        }
        let b = g.boxed_for_display(&v)?;
        g.b.effect(Op::Rt(Rt::PrintLine, vec![b]));
    }
    if let Some(d) = final_error {
        g.b.effect(Op::Rt(Rt::ExitDiagnostic, vec![Operand::Str(d.into())]));
    }
    g.b.push(Stmt::Return(Vec::new()));
    let main = std::mem::take(&mut g.b).finish(
        FuncKind::Helper {
            name: "vl_program".into(),
            exported: true,
        },
        Vec::new(),
        Rc::from([]),
    );
    // The entry points of a shared library.
    for e in exports {
        let f = g.export(e).map_err(|u| Unsupported {
            span: u.span,
            reason: format!("cannot export `{}`: {}", e.name, u.reason),
        })?;
        g.helpers.push(f);
    }
    // The AD maps of boxed closures and the element boxers (a map may box an array, a boxer
    // may need a map), then their dispatchers, which the runtime calls.
    let dispatchers = g.closure_maps()?;
    let mut init = std::mem::take(&mut g.init);
    init.push(Stmt::Return(Vec::new()));
    let init = init.finish(
        FuncKind::Helper {
            name: "vl_init_constants".into(),
            exported: false,
        },
        Vec::new(),
        Rc::from([]),
    );
    // The leaf types of each boxed code's environment summary (for `plus` and `zero` of boxed
    // closures in the runtime).
    let mut code_slots = Vec::new();
    for c in 0..prog.codes.len() {
        let code = vlad_flow::CodeId(c as u32);
        code_slots.push(match g.boxed.envs.get(&code).cloned() {
            Some(env) => {
                let mut l = Vec::new();
                for x in env.iter() {
                    l.extend(g.layout(x)?);
                }
                Some(l.into())
            }
            None => None,
        });
    }
    let mut out = std::mem::take(&mut g.out);
    out.funcs = funcs;
    let init_at = out.add(init);
    debug_assert_eq!(init_at, init_id);
    out.init = Some(init_at);
    out.main = Some(out.add(main));
    // Helpers call each other by the numbers `helper_id` gave them: in order, after these.
    for f in g.helpers.drain(..) {
        out.funcs.push(f);
    }
    for f in dispatchers {
        out.funcs.push(f);
    }
    out.code_slots = code_slots;
    Ok(out)
}

/// An entry point of a shared library (`vlad compile --lib`): the procedure whose closure is
/// `procedure` (a top-level definition), applied by the analysis in key `key` to the argument
/// made of arguments of abstract values `args` (`(f a b)` passes `(cons a b)`). Each argument
/// is a real or an array (of reals, or of such arrays). The C function `vlad_NAME` takes the
/// arguments boxed, one C parameter each, and returns the result boxed.
pub struct Export {
    pub name: String,
    pub procedure: Av,
    pub args: Vec<Av>,
    pub key: usize,
}

/// `(cons* a b ...)`: the one argument a call `(f a b ...)` passes.
pub fn cons_star(args: &[Av]) -> Av {
    match args {
        [] => Av::Nil,
        [a] => a.clone(),
        [a, rest @ ..] => Av::Pair(
            vlad_core::tags::Tags::EMPTY,
            Rc::new(a.clone()),
            Rc::new(cons_star(rest)),
        ),
    }
}

impl Lowerer<'_, '_> {
    /// The function of an exported entry point: it takes its boxed arguments apart (each real
    /// checked to be a real, each array converted to the flat array of its layout), calls the
    /// specialised function, and boxes its result.
    fn export(&mut self, e: &Export) -> R<vlad_ir::Function> {
        let Av::Closure(_, env) = &e.procedure else {
            return self.unsupported("it is not a procedure defined in the program");
        };
        let mut env_leaves = Vec::new();
        for x in env.iter() {
            env_leaves.extend(self.layout(x)?);
        }
        if !env_leaves.is_empty() {
            return self.unsupported(
                "it refers to values known only when the program runs (read, or computed from \
                 what is read)",
            );
        }
        let (r, b) = self.in_function(|s| {
            let mut params = Vec::new();
            let mut leaves = Vec::new();
            for (i, av) in e.args.iter().enumerate() {
                let p = s.b.named_var(Ty::Boxed, format!("arg{i}"));
                params.push(p);
                let what = format!("vlad_{}, argument {}", e.name, i + 1);
                leaves.extend(s.unpack_argument(Operand::Var(p), av, &what)?);
            }
            // The analysis may have widened the argument (a long list of arguments is a deep
            // pair, whose later parts it may box): the leaves go into the function's layout.
            let to = s.fun(e.key)?.arg.clone();
            let leaves = s.coerce_leaves(&cons_star(&e.args), &leaves, &to)?;
            let v = s.call_fun(e.key, Vec::new(), leaves)?;
            let boxed = if v.av == Av::Bottom {
                Operand::Null
            } else {
                s.boxed_val(&v)?
            };
            s.b.push(Stmt::Return(vec![boxed]));
            Ok(params)
        });
        let name = e.name.clone();
        Ok(b.finish(FuncKind::Export { name }, r?, Rc::from([Ty::Boxed])))
    }

    /// The leaf of one boxed argument made by the library's caller, in the layout of `av`: a
    /// real checked to be one, an array converted (and checked) by the runtime.
    /// `what` names the argument in the runtime's message.
    fn unpack_argument(&mut self, v: Operand, av: &Av, what: &str) -> R<Vec<Operand>> {
        Ok(match av {
            Av::Real(None) => {
                vec![self.rt(Ty::F64, Rt::ArgReal, vec![v, Operand::Str(what.into())])]
            }
            Av::Array(t, None, elem) if t.is_empty() => {
                let ty = Ty::Array(self.layout(elem)?.into());
                let mut depth = 1;
                let mut inner = &**elem;
                while let Av::Array(_, _, e) = inner {
                    depth += 1;
                    inner = e;
                }
                if *inner != Av::Real(None) {
                    return self.unsupported("an array argument whose elements are not reals");
                }
                vec![self.rt(
                    ty,
                    Rt::AsFlat,
                    vec![v, Operand::I64(depth), Operand::Str(what.into())],
                )]
            }
            _ => return self.unsupported("an argument that is not a real or an array"),
        })
    }

    /// `u` placed in the user's program: a reason found in built-in code (a prelude function,
    /// an AD primitive's version) is reported at a call in the user's program that leads to
    /// the function being lowered, as the evaluator reports errors in built-in code.
    fn placed(&self, u: Unsupported) -> Unsupported {
        if u.span.is_user() || self.key == usize::MAX {
            return u;
        }
        Unsupported {
            span: self.user_call_reaching(self.key).unwrap_or(u.span),
            reason: u.reason,
        }
    }

    /// A call in the user's program from which function `k` is reached (the nearest, by the
    /// fewest calls), if any.
    fn user_call_reaching(&self, k: usize) -> Option<Span> {
        let mut callers: HashMap<usize, Vec<(usize, ExprId)>> = HashMap::new();
        for ((caller, e), t) in &self.prog.targets {
            let mut callees = Vec::new();
            t.keys(&mut callees);
            for c in callees {
                callers.entry(c).or_default().push((*caller, *e));
            }
        }
        let mut seen = HashSet::from([k]);
        let mut queue = std::collections::VecDeque::from([k]);
        while let Some(f) = queue.pop_front() {
            let mut sites = callers.get(&f).cloned().unwrap_or_default();
            sites.sort();
            for (caller, e) in sites {
                if let Expr::App(_, _, span) = self.an.arena.get(e) {
                    if span.is_user() && (self.render)(*span).is_some() {
                        return Some(*span);
                    }
                }
                if seen.insert(caller) {
                    queue.push_back(caller);
                }
            }
        }
        None
    }

    fn unsupported<T>(&self, what: impl Into<String>) -> R<T> {
        Err(Unsupported {
            span: self.span,
            reason: what.into(),
        })
    }

    /// The number of the error site of `span` in the site table: -1 for errors inside library
    /// or built-in code (reported at the last user call site); `-2 - i` for a library line
    /// that says what its errors mean (entry `i`, whose prefix is that message: reported with
    /// it at the last user call site).
    fn site(&mut self, span: Span) -> i64 {
        if !span.is_user() && !span.is_library() {
            return -1;
        }
        let code = |i: usize| {
            if span.is_library() {
                -2 - i as i64
            } else {
                i as i64
            }
        };
        if let Some(i) = self.site_ids.get(&span) {
            return code(*i);
        }
        let Some(site) = (self.render)(span) else {
            return if span.is_library() { -1 } else { 0 };
        };
        let i = self.out.sites.len();
        self.out.sites.push(site);
        self.site_ids.insert(span, i);
        code(i)
    }

    /// A variable defined by `op`.
    fn let1(&mut self, ty: Ty, op: Op) -> Operand {
        let prefix = match ty {
            Ty::Boxed | Ty::Array(_) => "b",
            _ => "t",
        };
        Operand::Var(self.b.let1(ty, prefix, op))
    }

    /// A runtime call's result.
    fn rt(&mut self, ty: Ty, rt: Rt, args: Vec<Operand>) -> Operand {
        self.let1(ty, Op::Rt(rt, args))
    }

    /// A runtime call for its effect.
    fn rt_effect(&mut self, rt: Rt, args: Vec<Operand>) {
        self.b.effect(Op::Rt(rt, args));
    }

    /// Fails with an internal error of the compiled program (code the analysis says is never
    /// reached).
    fn fail_internal(&mut self, message: &str) {
        self.rt_effect(Rt::FailInternal, vec![Operand::Str(message.into())]);
    }

    /// Variables holding a value of `layout`, declared (unassigned) here.
    fn temps(&mut self, layout: &[Ty]) -> Vec<vlad_ir::Var> {
        let vs: Vec<vlad_ir::Var> = layout.iter().map(|t| self.b.var(t.clone(), "t")).collect();
        if !vs.is_empty() {
            self.b.push(Stmt::Declare(vs.clone()));
        }
        vs
    }

    /// A two-way branch on a condition: only the arm a known condition takes, else both, their
    /// values assigned to shared variables of the joined value `av`.
    fn branch(
        &mut self,
        cond: Cond,
        av: &Av,
        mut arm: impl FnMut(&mut Self, bool) -> R<Val>,
    ) -> R<Val> {
        let cond = match cond {
            Cond::Known(b) => return arm(self, b),
            Cond::Test(c) => c,
        };
        let layout = self.layout(av)?;
        let out = self.temps(&layout);
        let mut arms = Vec::new();
        for then in [true, false] {
            self.b.open();
            let v = arm(self, then)?;
            self.store(&out, av, v)?;
            arms.push(self.b.close());
        }
        let els = arms.pop().expect("two arms");
        let then = arms.pop().expect("two arms");
        self.b.push(Stmt::If { cond, then, els });
        Ok(Val {
            av: av.clone(),
            leaves: out.into_iter().map(Operand::Var).collect(),
        })
    }

    /// Stores a branch's value, converted to the joined abstract value `av`, in the shared
    /// result variables `dst` (nothing for a branch that never returns).
    fn store(&mut self, dst: &[vlad_ir::Var], av: &Av, v: Val) -> R<()> {
        if v.av != Av::Bottom {
            let v = self.coerce(v, av)?;
            for (d, s) in dst.iter().zip(v.leaves) {
                if s.var() != Some(*d) {
                    self.b.push(Stmt::Set(*d, s));
                }
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------------ functions

    fn fun(&self, k: usize) -> R<&vlad_flow::specialise::Fun> {
        match self.prog.funs.get(k) {
            Some(Some(f)) => Ok(f),
            _ => self.unsupported(format!("internal: function {k} was not specialised")),
        }
    }

    fn func_id(&self, k: usize) -> R<FuncId> {
        match self.func_of.get(&k) {
            Some(f) => Ok(*f),
            None => self.unsupported(format!("internal: function {k} was not specialised")),
        }
    }

    /// The IR function of key `k`.
    fn function(&mut self, k: usize) -> R<vlad_ir::Function> {
        let f = self.fun(k)?.clone();
        let code = self.prog.codes[f.code.0 as usize].clone();
        let Expr::Lambda(pattern, body, span) = self.an.arena.get(code.lambda()).clone() else {
            return self.unsupported("internal: a code that is not a lambda");
        };
        self.span = span;
        self.key = k;
        self.b = Builder::new();
        let mut params = Vec::new();
        let mut env: Vec<(Var, Val)> = Vec::new();
        let mut env_leaves = Vec::new();
        for (i, (v, av)) in code.free.iter().zip(f.env.iter()).enumerate() {
            let leaves = self.parameters(av, &format!("e{i}_"), &mut params)?;
            env_leaves.extend(leaves.iter().cloned());
            env.push((
                *v,
                Val {
                    av: av.clone(),
                    leaves,
                },
            ));
        }
        for (j, name) in code.names.iter().enumerate() {
            let Some(sib) = self.prog.code_of(&code.names, &code.lambdas, j as u32) else {
                return self.unsupported("internal: a letrec member without a code");
            };
            env.push((
                *name,
                Val {
                    av: Av::Closure(sib, f.env.clone()),
                    leaves: env_leaves.clone(),
                },
            ));
        }
        let arg_leaves = self.parameters(&f.arg, "a", &mut params)?;
        let arg = Val {
            av: f.arg.clone(),
            leaves: arg_leaves,
        };
        let result_layout: Layout = self.layout(&f.result)?.into();
        let ret = Return {
            av: f.result.clone(),
            layout: result_layout.clone(),
        };
        // A parameter pattern fails at the call site (the evaluator's position).
        if self.bind(&pattern, arg, &mut env, Span::NONE)? {
            self.tail(body, &mut env, &ret, &mut Vec::new())?;
        } else {
            self.ret(None, &ret, &[])?;
        }
        let b = std::mem::take(&mut self.b);
        Ok(b.finish(FuncKind::Specialised { key: k }, params, result_layout))
    }

    /// Lowers `e` in tail position of the function being lowered: its value is returned. An
    /// `if` returns from each branch and a `let` from its body, so that a call in tail position
    /// is followed directly by its return (the tail-call pass makes it a jump: a tail-recursive
    /// loop runs in constant stack). `outer` holds the abstract values of the enclosing `if`
    /// and `let` nodes, innermost last: the value goes through each, as `expr` converts it.
    fn tail(
        &mut self,
        e: ExprId,
        env: &mut Vec<(Var, Val)>,
        ret: &Return,
        outer: &mut Vec<Av>,
    ) -> R<()> {
        let node = self.an.arena.get(e).clone();
        let Some(av) = self.recorded(e)? else {
            let v = self.expr(e, env)?;
            return self.ret(Some(v), ret, outer);
        };
        match node {
            Expr::If(c, a, b) => {
                let cv = self.expr(c, env)?;
                let Some(cond) = self.truth(&cv)? else {
                    return self.ret(None, ret, outer);
                };
                outer.push(av);
                match cond {
                    Cond::Known(true) => self.tail(a, env, ret, outer)?,
                    Cond::Known(false) => self.tail(b, env, ret, outer)?,
                    Cond::Test(cond) => {
                        self.b.open();
                        self.tail(a, env, ret, outer)?;
                        let then = self.b.close();
                        self.b.open();
                        self.tail(b, env, ret, outer)?;
                        let els = self.b.close();
                        self.b.push(Stmt::If { cond, then, els });
                    }
                }
                outer.pop();
                Ok(())
            }
            Expr::Let(p, x, body, span) => {
                let xv = self.expr(x, env)?;
                if xv.av == Av::Bottom {
                    return self.ret(None, ret, outer);
                }
                self.span = span;
                let mark = env.len();
                outer.push(av);
                let r = if self.bind(&p, xv, env, span)? {
                    self.tail(body, env, ret, outer)
                } else {
                    self.ret(None, ret, outer)
                };
                outer.pop();
                env.truncate(mark);
                r
            }
            Expr::Letrec(bs, body) => {
                let mark = self.letrec(&bs, env)?;
                outer.push(av);
                let r = self.tail(body, env, ret, outer);
                outer.pop();
                env.truncate(mark);
                r
            }
            _ => {
                let v = self.expr(e, env)?;
                self.ret(Some(v), ret, outer)
            }
        }
    }

    /// Returns `v` (`None` or no value: the code before never returns) from the function,
    /// converted through the abstract values of the enclosing nodes `outer` to the result's.
    fn ret(&mut self, v: Option<Val>, ret: &Return, outer: &[Av]) -> R<()> {
        let mut v = v.filter(|v| v.av != Av::Bottom);
        if let Some(mut x) = v.take() {
            for av in outer.iter().rev() {
                x = self.coerce(x, av)?;
            }
            v = Some(self.coerce(x, &ret.av)?);
        }
        let leaves = match v {
            Some(v) => v.leaves,
            // Never reached (the code before always fails): placeholders.
            None => ret.layout.iter().map(Operand::placeholder).collect(),
        };
        self.b.push(Stmt::Return(leaves));
        Ok(())
    }

    /// Parameters `PREFIX0`, `PREFIX1`, ... for the leaves of `av` (pushed on `params`), as
    /// operands.
    fn parameters(
        &mut self,
        av: &Av,
        prefix: &str,
        params: &mut Vec<vlad_ir::Var>,
    ) -> R<Vec<Operand>> {
        Ok(self
            .layout(av)?
            .into_iter()
            .enumerate()
            .map(|(j, ty)| {
                let v = self.b.named_var(ty, format!("{prefix}{j}"));
                params.push(v);
                Operand::Var(v)
            })
            .collect())
    }

    /// A call of the function of key `k` with these environment and argument leaves (already
    /// in its layouts).
    fn call_fun(&mut self, k: usize, env: Vec<Operand>, arg: Vec<Operand>) -> R<Val> {
        let f = self.fun(k)?.clone();
        let func = self.func_id(k)?;
        let layout = self.layout(&f.result)?;
        let args: Vec<Operand> = env.into_iter().chain(arg).collect();
        let results: Vec<vlad_ir::Var> =
            layout.iter().map(|t| self.b.var(t.clone(), "t")).collect();
        self.b.push(Stmt::Let(
            results.clone(),
            Op::Call {
                func,
                args,
                guard: None,
            },
        ));
        Ok(Val {
            av: f.result,
            leaves: results.into_iter().map(Operand::Var).collect(),
        })
    }

    // ------------------------------------------------------------------ expressions

    /// The abstract value the analysis recorded for node `e` of the current body (`None`: the
    /// node is never evaluated).
    fn recorded(&self, e: ExprId) -> R<Option<Av>> {
        match self.prog.values.get(&(self.key, e)) {
            None => Ok(None),
            Some(vs) if vs.len() == 1 => Ok(Some(vs[0].clone())),
            Some(_) => self.unsupported("a shared subexpression with different abstract values"),
        }
    }

    fn expr(&mut self, e: ExprId, env: &mut Vec<(Var, Val)>) -> R<Val> {
        let Some(av) = self.recorded(e)? else {
            self.fail_internal("reached code the analysis found unreachable");
            return Ok(Val::known(Av::Bottom));
        };
        let node = self.an.arena.get(e).clone();
        let v = match node {
            Expr::Var(x) => {
                let v = lookup(env, x)?;
                if v.av != av && std::env::var_os("VLAD_C_DEBUG").is_some() {
                    eprintln!(
                        "var {} in key {}: bound to {:?}, recorded {:?}",
                        self.an.arena.var_name(x),
                        self.key,
                        v.av,
                        av
                    );
                }
                v
            }
            Expr::Const(d, tags)
                if matches!(av, Av::Array(..) | Av::Pair(..)) && !self.layout(&av)?.is_empty() =>
            {
                self.array_constant(&d, tags, &av)?
            }
            Expr::Const(..) | Expr::Prim(..) => {
                if !self.layout(&av)?.is_empty() {
                    return self.unsupported("a constant that is not known");
                }
                Val::known(av.clone())
            }
            Expr::Lambda(..) => {
                let Av::Closure(_, fields) = &av else {
                    return self.unsupported("internal: a lambda that is not a closure");
                };
                let free = self.an.arena.free_vars(e);
                let mut leaves = Vec::new();
                for (x, want) in free.iter().zip(fields.iter()) {
                    let v = lookup(env, *x)?;
                    leaves.extend(self.coerce(v, want)?.leaves);
                }
                return Ok(Val { av, leaves });
            }
            Expr::App(f, a, span) => {
                let fv = self.expr(f, env)?;
                let argv = self.expr(a, env)?;
                if fv.av == Av::Bottom || argv.av == Av::Bottom {
                    return Ok(Val::known(Av::Bottom));
                }
                self.span = span;
                let site = self.site(span);
                if site > 0 {
                    self.b.push(Stmt::Site(site as u32));
                }
                let Some(target) = self.prog.targets.get(&(self.key, e)).cloned() else {
                    return self.unsupported("internal: a call site without a target");
                };
                self.apply(&target, fv, argv, &av, site)?
            }
            Expr::Cons(_, a, b) => {
                let x = self.expr(a, env)?;
                let y = self.expr(b, env)?;
                let mut leaves = x.leaves;
                leaves.extend(y.leaves);
                return Ok(Val { av, leaves });
            }
            Expr::Letrec(bs, body) => {
                let mark = self.letrec(&bs, env)?;
                let r = self.expr(body, env);
                env.truncate(mark);
                r?
            }
            Expr::Let(p, x, body, span) => {
                let xv = self.expr(x, env)?;
                if xv.av == Av::Bottom {
                    return Ok(Val::known(Av::Bottom));
                }
                self.span = span;
                let mark = env.len();
                let r = if self.bind(&p, xv, env, span)? {
                    self.expr(body, env)
                } else {
                    Ok(Val::known(Av::Bottom))
                };
                env.truncate(mark);
                r?
            }
            Expr::If(c, a, b) => {
                let cv = self.expr(c, env)?;
                let Some(cond) = self.truth(&cv)? else {
                    return Ok(Val::known(Av::Bottom));
                };
                self.branch(cond, &av, |s, then| s.expr(if then { a } else { b }, env))?
            }
        };
        if v.av == Av::Bottom {
            return Ok(v);
        }
        self.coerce(v, &av)
    }

    /// Binds the closures of a `letrec` (each with the group's environment); returns the length
    /// of `env` before them, to truncate to after the body.
    fn letrec(&mut self, bs: &[(Var, ExprId)], env: &mut Vec<(Var, Val)>) -> R<usize> {
        let names: Vec<Var> = bs.iter().map(|(v, _)| *v).collect();
        let lambdas: Vec<ExprId> = bs.iter().map(|(_, l)| *l).collect();
        let Some(c0) = self.prog.code_of(&names, &lambdas, 0) else {
            return self.unsupported("internal: a letrec without a code");
        };
        let free = self.prog.codes[c0.0 as usize].free.clone();
        let mut avs = Vec::new();
        let mut leaves = Vec::new();
        for x in free.iter() {
            let v = lookup(env, *x)?;
            avs.push(v.av.clone());
            leaves.extend(v.leaves);
        }
        let avs: Rc<[Av]> = avs.into();
        let mark = env.len();
        for (j, name) in names.iter().enumerate() {
            let Some(c) = self.prog.code_of(&names, &lambdas, j as u32) else {
                return self.unsupported("internal: a letrec member without a code");
            };
            env.push((
                *name,
                Val {
                    av: Av::Closure(c, avs.clone()),
                    leaves: leaves.clone(),
                },
            ));
        }
        Ok(mark)
    }

    /// Binds a pattern (the evaluator's checks and errors); `false` if it can never match (the
    /// lowered code fails there).
    fn bind(&mut self, p: &Pattern, v: Val, env: &mut Vec<(Var, Val)>, span: Span) -> R<bool> {
        if let Pattern::Var(x) = p {
            env.push((*x, v));
            return Ok(true);
        }
        let site = self.site(span);
        let v = self.force(v)?;
        match p {
            Pattern::Var(_) => unreachable!("handled above"),
            Pattern::Const(d, tags) => {
                let c = self.an.lift_av(datum_av(d), *tags).map_err(flow_error)?;
                let test = self.const_test(&c, &v)?;
                let test = match test {
                    Cond::Known(true) => return Ok(true),
                    Cond::Known(false) => None,
                    Cond::Test(t) => Some(t),
                };
                let cb = self.boxed_for_display(&Val::known(c))?;
                let b = self.boxed_for_display(&v)?;
                let fail = vec![Stmt::Let(
                    Vec::new(),
                    Op::Rt(Rt::FailMismatch, vec![Operand::I64(site), cb, b]),
                )];
                match test {
                    // The mismatch is certain: the code fails here.
                    None => {
                        self.b.push(fail.into_iter().next().expect("one statement"));
                        Ok(false)
                    }
                    Some(t) => {
                        self.b.push(Stmt::If {
                            cond: t,
                            then: Vec::new(),
                            els: fail,
                        });
                        Ok(true)
                    }
                }
            }
            Pattern::Cons(tags, a, b) => match &v.av {
                Av::Pair(t, x, y) if t == tags => {
                    let mut ps = self.raw_parts(&v, &[x, y])?;
                    let y = ps.pop().expect("two parts");
                    let x = ps.pop().expect("two parts");
                    Ok(self.bind(a, x, env, span)? && self.bind(b, y, env, span)?)
                }
                Av::Dyn(_) => {
                    let (car, cdr) = self.car_cdr(&v.leaves[0], tags.bits(), site);
                    let x = Val {
                        av: v.av.clone(),
                        leaves: vec![car],
                    };
                    let y = Val {
                        av: v.av.clone(),
                        leaves: vec![cdr],
                    };
                    Ok(self.bind(a, x, env, span)? && self.bind(b, y, env, span)?)
                }
                _ => {
                    let what = match tags.top() {
                        None => "a pair".to_string(),
                        Some(t) => format!("a {} pair", t.name()),
                    };
                    let b = self.boxed_for_display(&v)?;
                    self.rt_effect(
                        Rt::FailValue,
                        vec![
                            Operand::I64(site),
                            Operand::Str(format!("pattern mismatch: expected {what}, got ").into()),
                            b,
                            Operand::Str("".into()),
                        ],
                    );
                    Ok(false)
                }
            },
        }
    }

    /// The car and cdr of a boxed pair with these tags (checked: the evaluator's error).
    fn car_cdr(&mut self, v: &Operand, tags: u32, site: i64) -> (Operand, Operand) {
        let car = self.rt(
            Ty::Boxed,
            Rt::Car,
            vec![v.clone(), Operand::I64(tags as i64), Operand::I64(site)],
        );
        let cdr = self.rt(Ty::Boxed, Rt::Cdr, vec![v.clone()]);
        (car, cdr)
    }

    /// A condition: `v` equals the constant `c` (the evaluator's `equal_data`).
    fn const_test(&mut self, c: &Av, v: &Val) -> R<Cond> {
        let v = self.force(v.clone())?;
        let both = |s: &mut Self, x: Cond, y: Cond| -> Cond {
            match (x, y) {
                (Cond::Known(false), _) | (_, Cond::Known(false)) => Cond::Known(false),
                (Cond::Known(true), y) => y,
                (x, Cond::Known(true)) => x,
                (Cond::Test(x), Cond::Test(y)) => {
                    Cond::Test(s.let1(Ty::Bool, Op::Binary(BinOp::And, x, y)))
                }
            }
        };
        Ok(match (c, &v.av) {
            (Av::Real(Some(x)), Av::Real(Some(y))) => Cond::Known(x.get() == y.get()),
            (Av::Real(Some(x)), Av::Real(None)) => Cond::Test(self.let1(
                Ty::Bool,
                Op::Binary(BinOp::FEq, v.leaves[0].clone(), Operand::F64(x.get())),
            )),
            (Av::Bool(Some(a)), Av::Bool(Some(b))) => Cond::Known(a == b),
            (Av::Bool(Some(a)), Av::Bool(None)) => Cond::Test(if *a {
                v.leaves[0].clone()
            } else {
                self.let1(Ty::Bool, Op::Unary(UnOp::Not, v.leaves[0].clone()))
            }),
            (Av::Nil, Av::Nil) => Cond::Known(true),
            (Av::Pair(t, a, b), Av::Pair(u, x, y)) if t == u => {
                let ps = self.parts(&v, &[x, y])?;
                let l = self.const_test(a, &ps[0])?;
                let r = self.const_test(b, &ps[1])?;
                both(self, l, r)
            }
            (Av::Bundle(a, b), Av::Bundle(x, y)) => {
                let ps = self.parts(&v, &[x, y])?;
                let l = self.const_test(a, &ps[0])?;
                let r = self.const_test(b, &ps[1])?;
                both(self, l, r)
            }
            (Av::Tagged(t, a), Av::Tagged(u, x)) if t == u => {
                let ps = self.parts(&v, &[x])?;
                self.const_test(a, &ps[0])?
            }
            (Av::Real(Some(x)), Av::Dyn(_)) => Cond::Test(self.rt(
                Ty::Bool,
                Rt::IsRealEq,
                vec![v.leaves[0].clone(), Operand::F64(x.get())],
            )),
            (Av::Bool(Some(b)), Av::Dyn(_)) => Cond::Test(self.rt(
                Ty::Bool,
                Rt::IsBoolEq,
                vec![v.leaves[0].clone(), Operand::Bool(*b)],
            )),
            (Av::Nil, Av::Dyn(_)) => Cond::Test(self.let1(
                Ty::Bool,
                Op::IsKind(v.leaves[0].clone(), vlad_ir::ObjKind::Nil),
            )),
            (_, Av::Dyn(_)) => {
                let b = self.boxed_val(&Val::known(c.clone()))?;
                Cond::Test(self.rt(Ty::Bool, Rt::EqualData, vec![b, v.leaves[0].clone()]))
            }
            _ => Cond::Known(false),
        })
    }

    /// The truth of a value (`None`: no value), as the evaluator's `is_true`: everything but
    /// `#f` is true, looking through bundles and tags.
    fn truth(&mut self, v: &Val) -> R<Option<Cond>> {
        let v = self.force(v.clone())?;
        Ok(Some(match &v.av {
            Av::Bottom => return Ok(None),
            Av::Bool(Some(b)) => Cond::Known(*b),
            Av::Bool(None) => Cond::Test(v.leaves[0].clone()),
            Av::Dyn(_) => Cond::Test(self.rt(Ty::Bool, Rt::Truthy, vec![v.leaves[0].clone()])),
            Av::Bundle(p, t) => {
                let ps = self.parts(&v, &[p, t])?;
                return self.truth(&ps[0]);
            }
            Av::Tagged(_, x) => {
                let ps = self.parts(&v, &[x])?;
                return self.truth(&ps[0]);
            }
            _ => Cond::Known(true),
        }))
    }

    // ------------------------------------------------------------------ calls

    fn apply(&mut self, t: &Target, f: Val, a: Val, out: &Av, site: i64) -> R<Val> {
        match t {
            Target::Direct(k) => {
                let fun = self.fun(*k)?.clone();
                let Av::Closure(_, env) = &f.av else {
                    return self.unsupported("internal: a direct call of a non-closure");
                };
                if env.len() != fun.env.len() {
                    return self.unsupported("internal: an environment of another layout");
                }
                let parts = self.split(&env.iter().collect::<Vec<_>>(), &f.leaves)?;
                let mut env_leaves = Vec::new();
                for ((x, want), l) in env.iter().zip(fun.env.iter()).zip(parts) {
                    env_leaves.extend(self.coerce_leaves(x, &l, want)?);
                }
                if std::env::var_os("VLAD_C_DEBUG").is_some() {
                    eprintln!(
                        "call of key {k} from key {}: arg {:?}\n  fun.arg {:?}\n  result {:?}\n  out {:?}",
                        self.key, a.av, fun.arg, fun.result, out
                    );
                }
                let arg = self.coerce(a, &fun.arg)?;
                self.call_fun(*k, env_leaves, arg.leaves)
            }
            Target::Prim(p) => self.prim(*p, a, out, site),
            Target::Dispatch(ts) => self.dispatch(ts, f, a, out, site),
            Target::IfProc(then_t, els_t) => {
                let a = self.force(a)?;
                let Av::Pair(_, c, rest) = &a.av else {
                    return self.unsupported("`if-procedure` on a boxed argument");
                };
                let Av::Pair(_, th, el) = &**rest else {
                    return self.unsupported("`if-procedure` on a boxed argument");
                };
                let [cv, thv, elv]: [Val; 3] = self
                    .raw_parts(&a, &[c, th, el])?
                    .try_into()
                    .expect("three parts");
                let Some(cond) = self.truth(&cv)? else {
                    return Ok(Val::known(Av::Bottom));
                };
                self.branch(cond, out, |s, then| {
                    let (t, thunk) = if then { (then_t, &thv) } else { (els_t, &elv) };
                    s.apply(t, thunk.clone(), Val::known(Av::Nil), out, site)
                })
            }
            Target::Checkpoint(t) => {
                let a = self.force(a)?;
                let Av::Pair(_, f, x) = &a.av else {
                    if matches!(a.av, Av::Dyn(_)) {
                        // A boxed pair, which the analysis did not take apart (nor does it
                        // take `if-procedure`'s).
                        return self.unsupported("`checkpoint` on a boxed argument");
                    }
                    // Not a procedure and its argument (the analysis found no call): the
                    // evaluator's error, which describes a procedure without boxing it.
                    let head = vlad_core::Prim::Checkpoint.malformed_call_head();
                    if matches!(a.av, Av::Closure(..) | Av::Prim(_)) {
                        let m = format!("{head}a procedure");
                        self.rt_effect(
                            Rt::FailAt,
                            vec![Operand::I64(site), Operand::Str(m.into())],
                        );
                    } else {
                        let b = self.boxed_val(&a)?;
                        let args = vec![
                            Operand::I64(site),
                            Operand::Str(head.into()),
                            b,
                            Operand::Str("".into()),
                        ];
                        self.rt_effect(Rt::FailValue, args);
                    }
                    return Ok(Val::known(Av::Bottom));
                };
                let [fv, xv]: [Val; 2] =
                    self.raw_parts(&a, &[f, x])?.try_into().expect("two parts");
                self.apply(t, fv, xv, out, site)
            }
            Target::Build(t) => self.build(t, a, out, site),
            Target::ForwardBuild(t) => self.forward_build(t, a, out, site),
            Target::Ifold(t) => self.ifold(t, a, out, site),
            Target::ForwardIfold(t) => self.forward_ifold(t, a, out, site),
            Target::IfoldTape(t) => self.ifold_tape(t, a, out, site),
            Target::NotProcedure => {
                let b = self.boxed_for_display(&f)?;
                self.fail_not_procedure(site, b);
                Ok(Val::known(Av::Bottom))
            }
            Target::Unreachable => {
                self.fail_internal("a call the analysis found unreachable");
                Ok(Val::known(Av::Bottom))
            }
        }
    }

    fn fail_not_procedure(&mut self, site: i64, b: Operand) {
        self.rt_effect(
            Rt::FailValue,
            vec![
                Operand::I64(site),
                Operand::Str("cannot apply ".into()),
                b,
                Operand::Str(": it is not a procedure".into()),
            ],
        );
    }

    /// A call of a boxed procedure: a `switch` over the codes (and primitives) it may be.
    fn dispatch(&mut self, ts: &[Target], f: Val, a: Val, out: &Av, site: i64) -> R<Val> {
        if !matches!(f.av, Av::Dyn(_)) {
            return self.unsupported("internal: a dispatch on an unboxed procedure");
        }
        let fv = f.leaves[0].clone();
        let layout = self.layout(out)?;
        let res = self.temps(&layout);
        let on = self.let1(Ty::I64, Op::CodeOf(fv.clone()));
        let mut cases = Vec::new();
        for t in ts {
            self.b.open();
            let case = match t {
                Target::Direct(k) => {
                    let fun = self.fun(*k)?.clone();
                    let Some(summary) = self.boxed.envs.get(&fun.code).cloned() else {
                        return self.unsupported("internal: a boxed code without a summary");
                    };
                    let clo = self.unpack_closure(fun.code, &summary, &fv)?;
                    let parts = self.split(&summary.iter().collect::<Vec<_>>(), &clo.leaves)?;
                    let mut env_leaves = Vec::new();
                    for ((s, want), l) in summary.iter().zip(fun.env.iter()).zip(parts) {
                        env_leaves.extend(self.coerce_leaves(s, &l, want)?);
                    }
                    let arg = self.coerce(a.clone(), &fun.arg)?;
                    let r = self.call_fun(*k, env_leaves, arg.leaves)?;
                    self.store(&res, out, r)?;
                    fun.code.0 as i64
                }
                Target::Prim(p) => {
                    let want = self.prim_result(*p, &a.av)?;
                    let r = self.prim(*p, a.clone(), &want, site)?;
                    self.store(&res, out, r)?;
                    prim_case(*p)
                }
                _ => return self.unsupported("a boxed higher-order primitive"),
            };
            cases.push((vec![case], self.b.close()));
        }
        self.b.open();
        let b = fv.clone();
        self.fail_not_procedure(site, b);
        let default = self.b.close();
        self.b.push(Stmt::Switch { on, cases, default });
        Ok(Val {
            av: out.clone(),
            leaves: res.into_iter().map(Operand::Var).collect(),
        })
    }

    /// The abstract result of primitive `p` on `a` (for a primitive reached by a dispatch,
    /// whose own result the analysis joined with the others).
    fn prim_result(&mut self, p: vlad_core::Prim, a: &Av) -> R<Av> {
        self.an.apply(&Av::Prim(p), a).map_err(flow_error)
    }

    /// Runs `f` into a block of its own, which it returns with `f`'s result (the block is not
    /// pushed anywhere).
    fn block<T>(&mut self, f: impl FnOnce(&mut Self) -> R<T>) -> R<(T, Block)> {
        self.b.open();
        let r = f(self);
        let block = self.b.close();
        Ok((r?, block))
    }
}

fn lookup(env: &[(Var, Val)], x: Var) -> R<Val> {
    env.iter()
        .rev()
        .find(|(y, _)| *y == x)
        .map(|(_, v)| v.clone())
        .ok_or_else(|| Unsupported {
            span: Span::NONE,
            reason: "internal: an unbound variable".into(),
        })
}

fn flow_error(e: vlad_flow::FlowError) -> Unsupported {
    Unsupported {
        span: e.span,
        reason: e.message,
    }
}
