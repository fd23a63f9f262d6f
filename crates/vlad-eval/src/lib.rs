//! The reference evaluator: the oracle every faster path is tested against.
//!
//! Core is compiled (`code`) into a node store with resolved variables, then run by a machine
//! (`machine`) with an explicit continuation stack: no Rust recursion per VLAD call, proper tail
//! calls, so loops of any length and non-tail recursion a million deep run in bounded native
//! stack. The AD operators (`ad`) work on any value, transforming closures with the Core -> Core
//! transforms of `vlad_core::transform`.

pub mod ad;
mod array;
pub mod code;
pub mod io;
pub mod machine;
pub mod prims;
pub mod print;
pub mod value;

use code::Code;
use std::fmt;
use std::rc::Rc;
use value::Value;
use vlad_core::{Arena, Datum, ExprId, Span};

pub use io::{Input, Output};

/// A run-time error: the message and the source position of the operation that failed.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalError {
    pub span: Span,
    pub message: String,
    /// Where in library code the error arose, when `span` was moved to the user's call site
    /// (a library line may say what the error means: see `vlad_syntax::library::message`).
    pub library: Span,
}

impl EvalError {
    pub fn new(span: Span, message: impl Into<String>) -> EvalError {
        EvalError {
            span,
            message: message.into(),
            library: Span::NONE,
        }
    }
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)
    }
}

/// The evaluator: the program's Core, the compiled code, and the I/O of `read-real`/`write`.
pub struct Evaluator {
    pub arena: Arena,
    pub code: Code,
    pub input: Input,
    pub output: Output,
    /// Stop with an error after this many machine steps (for fuzzing and sandboxes).
    pub max_steps: Option<u64>,
    pub steps: u64,
    /// The AD prelude's lambdas (the versions of the primitives; shared with the flow
    /// analysis), once loaded into the arena.
    pub(crate) prelude_ids: Option<Rc<vlad_core::Prelude>>,
    /// The prelude's closures, made from `prelude_ids`.
    pub(crate) prelude: Option<Rc<ad::Prelude>>,
}

/// The value a constant denotes.
pub fn datum_value(d: &Datum) -> Value {
    match d {
        Datum::Nil => Value::Nil,
        Datum::Bool(b) => Value::Bool(*b),
        Datum::Real(r) => Value::Real(*r),
        Datum::Array(a) => Value::array(
            vlad_core::Tags::EMPTY,
            a.iter().map(datum_value).collect::<Vec<_>>(),
        ),
        Datum::Pair(p) => {
            // Iterative along the spine: quoted lists can be long.
            let mut items = Vec::new();
            let mut d = d;
            while let Datum::Pair(p) = d {
                items.push(datum_value(&p.0));
                d = &p.1;
            }
            let _ = p;
            let mut acc = datum_value(d);
            for x in items.into_iter().rev() {
                acc = Value::pair(vlad_core::Tags::EMPTY, x, acc);
            }
            acc
        }
    }
}

impl Evaluator {
    /// An evaluator over the program's arena into which `prelude` was loaded (shared with a
    /// flow analysis of the same program).
    pub fn with_prelude(arena: Arena, prelude: Rc<vlad_core::Prelude>) -> Evaluator {
        let mut ev = Evaluator::new(arena);
        ev.prelude_ids = Some(prelude);
        ev
    }

    pub fn new(arena: Arena) -> Evaluator {
        Evaluator {
            arena,
            code: Code::default(),
            input: Input::stdin(),
            output: Output::stdout(),
            max_steps: None,
            steps: 0,
            prelude_ids: None,
            prelude: None,
        }
    }

    /// Evaluates a closed Core expression.
    /// Applies a primitive that returns a value (not `build`, `ifold` or `if-procedure`, which
    /// call procedures): for engines other than the machine, which share its primitives.
    pub fn apply_primitive(
        &mut self,
        p: vlad_core::Prim,
        arg: Value,
        span: Span,
    ) -> Result<Value, EvalError> {
        match self.apply_prim(p, arg, span)? {
            prims::Outcome::Value(v) => Ok(v),
            prims::Outcome::TailCall(..) => Err(EvalError::new(
                span,
                format!("internal error: `{}` calls a procedure", p.name()),
            )),
        }
    }

    /// The value of a constant or primitive in code of level `tags` (lifted through them).
    pub fn constant(&mut self, v: Value, tags: vlad_core::Tags) -> Result<Value, EvalError> {
        if tags.is_empty() {
            return Ok(v);
        }
        self.lift(v, tags, Span::NONE)
    }

    /// A closure of member `index` of the group (`names`, `lambdas`) over `env` (laid out in
    /// the group's free-variable order).
    pub fn make_closure(
        &mut self,
        names: &[vlad_core::Var],
        lambdas: &[ExprId],
        index: u32,
        env: Vec<Value>,
    ) -> Result<Value, EvalError> {
        let g = self.group(names, lambdas)?;
        Ok(Self::closure(
            self.code.groups[g as usize].clone(),
            index,
            env,
        ))
    }

    /// One level of a lazy zero sensitivity or lazy array sensitivity computed (what pattern
    /// matching does before looking at a value); other values unchanged.
    pub fn force_lazy(&mut self, v: &Value) -> Result<Value, EvalError> {
        match v {
            Value::Zero(z) => self.force_zero(&z.of, Span::NONE),
            Value::SensArray(a) => self.force_sens(a, Span::NONE),
            _ => Ok(v.clone()),
        }
    }

    pub fn eval(&mut self, e: ExprId) -> Result<Value, EvalError> {
        let r = self.run_closed(e);
        self.output.flush();
        r
    }
}
