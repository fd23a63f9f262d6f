//! The polyvariant abstract interpreter (paper 001 §5.6).
//!
//! The analysis is a table from *keys* (a code, an abstract environment and an abstract
//! argument: one specialised function each) to abstract results. Evaluating a body consults the
//! table for every call it makes, adding keys it has not seen; a worklist re-evaluates a key
//! when a result it read has grown, until nothing changes. Results only grow (by `Av::join`),
//! and the lattice is finite: values are bounded in depth, repetition and size (`Av::bounded`),
//! summaries of boxed closures only grow, a closure (a code and an exact environment)
//! called with more than `MAX_VARIANTS` arguments of one shape gets one growing key from then on (a loop counter
//! that is a different constant at each iteration widens to "some real", constants that never
//! change stay known), and a code with more than `MAX_CODE_VARIANTS` keys gets one for all. So
//! the analysis always terminates, without `(real ...)` annotations; `MAX_KEYS` and `MAX_EVALS`
//! bound its cost (an error with the position, never a hang).
//!
//! AD operators on abstract values apply the evaluator's own Core -> Core transforms to the
//! codes of abstract closures (`ad.rs`), and primitives in transformed code are lifted to the
//! prelude lambdas the evaluator runs, so compile time and run time transform code identically. See
//! docs/flow.md for what is still slow or imprecise.

use crate::domain::{Av, Boxes, Callee, CodeId};
use std::collections::HashMap;
use std::rc::Rc;
use vlad_core::{Arena, Prelude};
use vlad_core::{Datum, Expr, ExprId, Pattern, Prim, Span, Tag, Tags, Var};

/// A closure's different abstract arguments of one shape (same code, the same exact
/// environment, the same argument but for constants) before they are merged into one: a loop
/// counter widens to "some real" after this many iterations. Closures of one code over
/// different environments count apart (counting by environment shape widened unrelated calls
/// together; docs/flow.md); `MAX_CODE_VARIANTS` bounds a code whatever its environments.
pub const MAX_VARIANTS: usize = 8;

/// A code's different keys over all environments before they are all merged (the last resort
/// that bounds the analysis whatever the program does).
pub const MAX_CODE_VARIANTS: usize = 4096;

/// Safety nets: an analysis this large is reported, never run until memory or patience runs
/// out.
pub const MAX_KEYS: usize = 200_000;
pub const MAX_EVALS: u64 = 1_000_000;

/// Member `index` of a `letrec` group (a plain lambda: a group of one, with no names).
#[derive(Clone, Debug)]
pub struct Code {
    pub names: Rc<[Var]>,
    pub lambdas: Rc<[ExprId]>,
    pub index: u32,
    /// The group's environment layout: its free variables, sorted.
    pub free: Rc<[Var]>,
}

impl Code {
    pub fn lambda(&self) -> ExprId {
        self.lambdas[self.index as usize]
    }
}

/// One specialised function: a code applied in an abstract environment to an abstract argument.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub code: CodeId,
    pub env: Rc<[Av]>,
    pub arg: Av,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FlowError {
    pub span: Span,
    pub message: String,
}

type R<T> = Result<T, FlowError>;

/// The identity of a code: its group's names and lambdas, and which member it is.
type CodeKey = (Rc<[Var]>, Rc<[ExprId]>, u32);

/// The targets recorded at each call site (key, node) while specialising.
pub(crate) type SiteTargets = HashMap<(usize, ExprId), Vec<Target>>;

/// A closure and the shape of an argument (`Av::shape`): the unit of loop-counter widening.
type ShapeKey = (CodeId, Rc<[Av]>, Av);

pub struct Analysis<'a> {
    /// The program's Core (the arena), which the evaluator shares: codes, transforms and the
    /// AD prelude's lambdas are the same expressions in both engines.
    pub arena: &'a mut Arena,
    /// The AD prelude's lambdas (`vlad_prelude::load`, into `arena`).
    pub prelude: Rc<Prelude>,
    pub codes: Vec<Code>,
    code_ids: HashMap<CodeKey, CodeId>,
    pub keys: Vec<Key>,
    key_ids: crate::domain::FastMap<Key, usize>,
    pub results: Vec<Av>,
    /// The environments of closures boxed since the summaries were last grown.
    pub boxes: Boxes,
    /// For each code, the join of the environments of its boxed closures, and the keys that
    /// read it.
    boxed_envs: HashMap<CodeId, Rc<[Av]>>,
    env_readers: HashMap<CodeId, std::collections::BTreeSet<usize>>,
    /// The AD maps of boxed environments in progress (see `ad.rs`, `map_boxed_env`).
    pub(crate) mapping: std::collections::HashSet<(crate::ad::MapOp, CodeId)>,
    /// `bundle` of boxed values, memoised for one `generation` (`ad.rs`, `bundle_dyn`).
    pub(crate) bundle_memo: crate::domain::FastMap<(Av, Av), Av>,
    /// The incremental AD maps of boxed callees (`ad.rs`, `map_dyn`), and the version of each
    /// summary.
    pub(crate) callee_maps: HashMap<(crate::ad::MapOp, Callee), crate::ad::CalleeMap>,
    summary_versions: HashMap<CodeId, u64>,
    /// For each callee map computing its environments (innermost last): the summaries it has
    /// read, each with its version when first read (`ad.rs`, `map_callee`).
    pub(crate) map_reads: Vec<HashMap<CodeId, u64>>,
    /// The transforms of codes (`ad.rs`, `transform_code`).
    pub(crate) transformed_codes: HashMap<(CodeId, Tag), Option<CodeId>>,
    /// For each code of no free variables called so far: `build` or `ifold` and the number of
    /// forward tags `d` if it is that primitive's forward version transformed by `forward`
    /// `d - 1` more times (`forward_build`, `forward_ifold`).
    forward_loops: HashMap<CodeId, Option<(Prim, usize)>>,
    /// Computing the images of boxed callees only: summaries are not mapped.
    pub(crate) envs_off: bool,
    /// `bundle` of boxed values in progress (its memo assumes fixed summaries).
    pub(crate) bundling: u32,
    /// `VLAD_FLOW_DEBUG` is set: report progress on stderr.
    debug: bool,
    /// Bumped whenever a summary grows; the generation `bundle_memo` is for.
    pub(crate) generation: u64,
    pub(crate) bundle_memo_generation: u64,
    per_code: HashMap<CodeId, Bucket>,
    per_shape: crate::domain::FastMap<ShapeKey, Bucket>,
    /// Keys to (re-)evaluate, first in first out, and whether each is queued.
    work: std::collections::VecDeque<usize>,
    queued: Vec<bool>,
    /// For each key, the keys whose evaluation read its result.
    readers: Vec<std::collections::BTreeSet<usize>>,
    /// The key being evaluated.
    reading: Option<usize>,
    /// Key evaluations so far.
    evals: u64,
    /// The innermost source position being analysed, for error messages.
    site: Span,
    /// While specialising: the key whose body is walked, and the targets of its call sites.
    pub(crate) recording: Option<(usize, SiteTargets)>,
    /// While specialising: the abstract value of every expression of the walked body (more
    /// than one if a shared node is reached with different values).
    pub(crate) recorded_values: Option<HashMap<ExprId, Vec<Av>>>,
    /// The bounds on the analysis's cost (`vlad run` bounds its CPU time and memory, and falls
    /// back to the evaluator rather than keep the user waiting): asked at every key
    /// evaluation, and by the Core transforms every few hundred steps (`Arena::stop`: one
    /// transform of large code can take minutes and gigabytes). A message stops the analysis
    /// with that error.
    pub budget: Option<Budget>,
}

/// See `Analysis::budget`.
pub type Budget = Rc<dyn Fn() -> Option<String>>;

/// Keys of one code (or one closure and argument shape), and the key that covers them all once
/// there are too many: new calls join into it.
#[derive(Default)]
struct Bucket {
    keys: Vec<usize>,
    widened: Option<usize>,
}

/// What the closures in boxed values may close over (`Analysis::boxed_snapshot`).
#[derive(Clone, Debug, Default)]
pub struct Boxed {
    /// The environment summary of each code whose closures were boxed.
    pub envs: HashMap<CodeId, Rc<[Av]>>,
    /// The AD maps of boxed closures whose environments the analysis mapped (`ad.rs`,
    /// `map_callee`): a run may reach them. A run reaches no other map of tags, untags or a
    /// bundle's split.
    pub mapped: std::collections::HashSet<(crate::ad::MapOp, CodeId)>,
}

/// What a call site calls, as resolved by the analysis.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// The specialised function of this key.
    Direct(usize),
    Prim(Prim),
    /// `if-procedure`: the calls of the two thunks.
    IfProc(Box<Target>, Box<Target>),
    /// `checkpoint`: the call of the procedure on the argument.
    Checkpoint(Box<Target>),
    /// `build`: the call of the element procedure.
    Build(Box<Target>),
    /// The forward version of `build` (paper 002's D-Build), run as a loop instead of its
    /// definition's list: the call of the element procedure on each forward index.
    ForwardBuild(Box<Target>),
    /// The forward version of `ifold` (paper 002's D-IFold), run as a loop instead of its
    /// definition's recursion: the call of the step procedure on each forward pair of the
    /// accumulator and the index.
    ForwardIfold(Box<Target>),
    /// `ifold`: the call of the step procedure.
    Ifold(Box<Target>),
    /// `%ifold-tape`: the call of the step procedure.
    IfoldTape(Box<Target>),
    /// A boxed procedure: one of these, chosen by its code at run time.
    Dispatch(Vec<Target>),
    /// Not a procedure: the call is a run-time error.
    NotProcedure,
    /// Never reached.
    Unreachable,
}

impl Drop for Analysis<'_> {
    /// The budget bounds this analysis only: the evaluator's transforms run unbounded again.
    fn drop(&mut self) {
        self.arena.stop = None;
    }
}

impl<'a> Analysis<'a> {
    pub fn new(arena: &'a mut Arena, prelude: Rc<Prelude>) -> Analysis<'a> {
        Analysis {
            arena,
            prelude,
            codes: Vec::new(),
            code_ids: HashMap::new(),
            keys: Vec::new(),
            key_ids: Default::default(),
            results: Vec::new(),
            boxes: Boxes::default(),
            boxed_envs: HashMap::new(),
            env_readers: HashMap::new(),
            mapping: Default::default(),
            bundle_memo: Default::default(),
            callee_maps: HashMap::new(),
            summary_versions: HashMap::new(),
            map_reads: Vec::new(),
            transformed_codes: HashMap::new(),
            forward_loops: HashMap::new(),
            envs_off: false,
            bundling: 0,
            debug: std::env::var_os("VLAD_FLOW_DEBUG").is_some(),
            generation: 0,
            bundle_memo_generation: 0,
            per_code: HashMap::new(),
            per_shape: Default::default(),
            work: Default::default(),
            queued: Vec::new(),
            readers: Vec::new(),
            reading: None,
            evals: 0,
            site: Span::NONE,
            recording: None,
            recorded_values: None,
            budget: None,
        }
    }

    /// One level of a lazy zero computed (`Av::Zero` to what it stands for); other values as
    /// they are. For code generators, after the analysis.
    pub fn force_av(&mut self, v: &Av) -> Result<Av, FlowError> {
        self.force(v)
    }

    /// A constant lifted through AD tags, as transformed code sees it (for code generators).
    pub fn lift_av(&mut self, v: Av, tags: Tags) -> Result<Av, FlowError> {
        self.lift(v, tags)
    }

    pub(crate) fn fail<T>(&self, message: String) -> R<T> {
        Err(FlowError {
            span: self.site,
            message,
        })
    }

    pub(crate) fn unsupported<T>(&self, what: &str) -> R<T> {
        Err(FlowError {
            span: self.site,
            message: format!("the flow analysis does not handle {what} yet"),
        })
    }

    /// Records the target of a call site of the key being specialised.
    fn record(&mut self, site: ExprId, t: Target) {
        if let Some((k, table)) = &mut self.recording {
            table.entry((*k, site)).or_default().push(t);
        }
    }

    /// Analyses a closed expression (a top-level expression); returns its key, whose result is
    /// the expression's abstract value.
    ///
    /// A worklist: a key is (re-)evaluated when it is new or when the result of a key it read
    /// has grown, so the work is proportional to the changes, not to passes over all keys.
    pub fn analyse(&mut self, e: ExprId) -> R<usize> {
        self.arena.stop = self.budget.clone().map(|b| {
            let stop: Rc<dyn Fn() -> bool> = Rc::new(move || b().is_some());
            stop
        });
        let unit = Rc::new(Pattern::Const(Datum::Nil, Tags::EMPTY));
        let lam = self.arena.mk(Expr::Lambda(unit, e, Span::NONE));
        let code = self.code(Rc::from([]), Rc::from([lam]), 0);
        let (_, entry) = self.call(code, Rc::from([]), Av::Nil)?;
        self.solve()?;
        Ok(entry)
    }

    /// Analyses a call of the procedure `f` (a closure, as the analysis of a top-level
    /// expression found it) on an argument of abstract value `arg`: the key of the specialised
    /// function it calls (an exported entry point, `vlad compile --lib`). An error where `f`
    /// is not a closure.
    pub fn analyse_call(&mut self, f: &Av, arg: &Av) -> R<usize> {
        let Av::Closure(code, env) = f else {
            return self.fail("only a procedure defined in the program can be exported".into());
        };
        let (_, k) = self.call(*code, env.clone(), arg.clone())?;
        self.solve()?;
        Ok(k)
    }

    /// Runs the worklist until no key needs evaluating.
    pub(crate) fn solve(&mut self) -> R<()> {
        // First in, first out: a key queued again waits for the other changes of the round, so
        // that a result growing one callee at a time is not re-read after each (last in,
        // first out took ten times as many evaluations on tests/array/property.vlad).
        while let Some(k) = self.work.pop_front() {
            self.evals += 1;
            if self.evals > MAX_EVALS {
                return self.fail(format!(
                    "the flow analysis gave up after {MAX_EVALS} evaluations ({} specialisations)",
                    self.keys.len()
                ));
            }
            self.queued[k] = false;
            self.within_budget()?;
            if self.debug && self.evals.is_multiple_of(1000) {
                let mut depths = vec![0usize; vlad_core::tags::MAX_TAG_DEPTH as usize + 1];
                for c in 0..self.codes.len() {
                    depths[self.code_tags(CodeId(c as u32)).depth() as usize] += 1;
                }
                eprintln!(
                    "flow: {} evaluations, {} keys, {} codes (by AD depth {:?}), {} boxed summaries",
                    self.evals,
                    self.keys.len(),
                    self.codes.len(),
                    &depths[..],
                    self.boxed_envs.len()
                );
            }
            let outer = self.reading.replace(k);
            let r = self.eval_key(k);
            self.reading = outer;
            self.grow_result(k, &r?);
            self.summaries_grown();
        }
        Ok(())
    }

    /// An error, the budget's message, once the budget is spent (`budget`).
    pub(crate) fn within_budget(&self) -> R<()> {
        match self.budget.as_ref().and_then(|b| b()) {
            Some(why) => self.fail(format!(
                "{why} ({} specialisations so far)",
                self.keys.len()
            )),
            None => Ok(()),
        }
    }

    /// Joins `r` into the result of key `k`; where that grows it, the keys that read it are
    /// queued again. Whether it grew.
    pub(crate) fn grow_result(&mut self, k: usize, r: &Av) -> bool {
        let new = self.results[k].join(r, &mut self.boxes);
        let new = new.bounded(&mut self.boxes);
        if new == self.results[k] {
            return false;
        }
        self.results[k] = new;
        let readers: Vec<usize> = self.readers[k].iter().copied().collect();
        for j in readers {
            self.enqueue(j);
        }
        true
    }

    /// Joins the environments of newly boxed closures into their codes' summaries, and queues
    /// again the keys that read a summary that has grown.
    pub(crate) fn summaries_grown(&mut self) {
        while !self.boxes.pending.is_empty() {
            for (c, env) in std::mem::take(&mut self.boxes.pending) {
                // Bounded as the environment of a closure of `c`: a closure of `c` inside it
                // is boxed (its environment joins this summary), so the summary is finite.
                let env = match Av::Closure(c, env).bounded(&mut self.boxes) {
                    Av::Closure(_, env) => env,
                    _ => unreachable!("a closure stays a closure"),
                };
                let new: Rc<[Av]> = match self.boxed_envs.get(&c) {
                    Some(old) => old
                        .iter()
                        .zip(env.iter())
                        .map(|(x, y)| x.join(y, &mut self.boxes))
                        .collect(),
                    None => env,
                };
                if self.boxed_envs.get(&c) != Some(&new) {
                    self.generation += 1;
                    *self.summary_versions.entry(c).or_default() += 1;
                    self.boxed_envs.insert(c, new);
                    let readers: Vec<usize> = self
                        .env_readers
                        .get(&c)
                        .map(|r| r.iter().copied().collect())
                        .unwrap_or_default();
                    for j in readers {
                        self.enqueue(j);
                    }
                }
            }
        }
    }

    /// What boxed closures may close over, for checking run-time values and generating code:
    /// the environment summary of each boxed code, and the maps of them the analysis made.
    pub fn boxed_snapshot(&self) -> Boxed {
        Boxed {
            envs: self.boxed_envs.clone(),
            mapped: self.mapped_envs(),
        }
    }

    /// The environment of a boxed closure of code `c` (the join of all that were boxed; `None`
    /// if none was yet), noting that the key being evaluated depends on it.
    pub(crate) fn boxed_env(&mut self, c: CodeId) -> Option<Rc<[Av]>> {
        // Not in the middle of a memoised `bundle` of boxed values, which assumes fixed
        // summaries (what changes is seen when the readers are evaluated again).
        if self.bundling == 0 {
            self.summaries_grown();
        }
        self.note_summary_read(c, self.summary_version(c));
        self.boxed_envs.get(&c).cloned()
    }

    /// Notes that the key being evaluated, and each callee map in progress, read the summary
    /// of code `c` at version `version`.
    pub(crate) fn note_summary_read(&mut self, c: CodeId, version: u64) {
        if let Some(r) = self.reading {
            self.env_readers.entry(c).or_default().insert(r);
        }
        for reads in &mut self.map_reads {
            let v = reads.entry(c).or_insert(version);
            *v = (*v).min(version);
        }
    }

    /// How many times the summary of code `c` has grown.
    pub(crate) fn summary_version(&self, c: CodeId) -> u64 {
        self.summary_versions.get(&c).copied().unwrap_or(0)
    }

    pub(crate) fn enqueue(&mut self, k: usize) {
        if !self.queued[k] {
            self.queued[k] = true;
            self.work.push_back(k);
        }
    }

    /// Interns a code.
    pub fn code(&mut self, names: Rc<[Var]>, lambdas: Rc<[ExprId]>, index: u32) -> CodeId {
        if let Some(c) = self.code_ids.get(&(names.clone(), lambdas.clone(), index)) {
            return *c;
        }
        let mut free: Vec<Var> = Vec::new();
        for l in lambdas.iter() {
            free.extend(self.arena.free_vars(*l).iter().copied());
        }
        free.retain(|v| !names.contains(v));
        free.sort();
        free.dedup();
        let id = CodeId(self.codes.len() as u32);
        self.codes.push(Code {
            names: names.clone(),
            lambdas: lambdas.clone(),
            index,
            free: free.into(),
        });
        self.code_ids.insert((names, lambdas, index), id);
        id
    }

    /// The current result of key `k`, noting that the key being evaluated depends on it.
    fn read(&mut self, k: usize) -> (Av, usize) {
        if let Some(r) = self.reading {
            self.readers[k].insert(r);
        }
        (self.results[k].clone(), k)
    }

    /// The current result of calling `code` in `env` on `arg` (bottom until analysed), and the
    /// key that stands for the call.
    fn call(&mut self, code: CodeId, env: Rc<[Av]>, arg: Av) -> R<(Av, usize)> {
        let mut key = Key {
            code,
            env: env.iter().map(|x| x.bounded(&mut self.boxes)).collect(),
            arg: arg.bounded(&mut self.boxes),
        };
        if let Some(k) = self.key_ids.get(&key) {
            let k = *k;
            return Ok(self.read(k));
        }
        // The last resort first: a code with too many keys has one growing key for all.
        let code_bucket = self.per_code.entry(code).or_default();
        let code_widening =
            code_bucket.widened.is_some() || code_bucket.keys.len() >= MAX_CODE_VARIANTS;
        let bucket_key = if code_widening {
            None
        } else {
            Some((code, key.env.clone(), key.arg.variant_shape()))
        };
        let bucket = match &bucket_key {
            Some(b) => self.per_shape.get(b),
            None => self.per_code.get(&code),
        };
        if let Some(bucket) = bucket {
            let limit = if code_widening {
                MAX_CODE_VARIANTS
            } else {
                MAX_VARIANTS
            };
            let widen_from: Vec<usize> = match bucket.widened {
                Some(w) => vec![w],
                None if bucket.keys.len() >= limit => bucket.keys.clone(),
                None => vec![],
            };
            if !widen_from.is_empty() {
                // Widen: one key covering every argument (and, for a whole code, every
                // environment) met so far; it only grows, so the table stays finite.
                for k in widen_from {
                    let old = &self.keys[k];
                    key.arg = key.arg.join(&old.arg, &mut self.boxes);
                    key.env = key
                        .env
                        .iter()
                        .zip(old.env.iter())
                        .map(|(x, y)| x.join(y, &mut self.boxes))
                        .collect();
                }
                if let Some(k) = self.key_ids.get(&key) {
                    let k = *k;
                    return Ok(self.read(k));
                }
            }
        }
        if self.keys.len() >= MAX_KEYS {
            return Err(FlowError {
                span: self.site,
                message: format!(
                    "the flow analysis needs more than {MAX_KEYS} specialisations; giving up"
                ),
            });
        }
        let k = self.keys.len();
        self.keys.push(key.clone());
        self.key_ids.insert(key, k);
        self.results.push(Av::Bottom);
        let code_bucket = self.per_code.entry(code).or_default();
        code_bucket.keys.push(k);
        if code_widening {
            code_bucket.widened = Some(k);
        }
        if let Some(b) = bucket_key {
            let bucket = self.per_shape.entry(b).or_default();
            bucket.keys.push(k);
            if bucket.keys.len() > MAX_VARIANTS {
                bucket.widened = Some(k);
            }
        }
        self.queued.push(false);
        self.readers.push(Default::default());
        self.enqueue(k);
        Ok(self.read(k))
    }

    pub(crate) fn eval_key(&mut self, k: usize) -> R<Av> {
        let key = self.keys[k].clone();
        let code = self.codes[key.code.0 as usize].clone();
        let Expr::Lambda(p, body, span) = self.arena.get(code.lambda()).clone() else {
            unreachable!("codes are lambdas")
        };
        self.site = span;
        let mut env: Vec<(Var, Av)> = Vec::new();
        for (v, x) in code.free.iter().zip(key.env.iter()) {
            env.push((*v, x.clone()));
        }
        for (j, name) in code.names.iter().enumerate() {
            let sib = self.code(code.names.clone(), code.lambdas.clone(), j as u32);
            env.push((*name, Av::Closure(sib, key.env.clone())));
        }
        if !self.bind(&p, &key.arg, &mut env)? {
            return Ok(Av::Bottom);
        }
        self.eval(body, &mut env)
    }

    fn lookup(env: &[(Var, Av)], v: Var) -> Av {
        env.iter()
            .rev()
            .find(|(x, _)| *x == v)
            .map(|(_, a)| a.clone())
            .expect("closed code: every variable is bound")
    }

    /// Binds a pattern; `false` if the match can never succeed (a run-time error).
    fn bind(&mut self, p: &Pattern, v: &Av, env: &mut Vec<(Var, Av)>) -> R<bool> {
        match p {
            Pattern::Var(x) => {
                env.push((*x, v.clone()));
                Ok(true)
            }
            Pattern::Const(d, tags) => {
                let c = self.lift(datum_av(d), *tags)?;
                let v = self.force(v)?;
                Ok(may_equal(&c, &v))
            }
            Pattern::Cons(tags, a, b) => match self.force(v)? {
                Av::Pair(t, x, y) if t == *tags => {
                    Ok(self.bind(a, &x, env)? && self.bind(b, &y, env)?)
                }
                d @ Av::Dyn(_) => Ok(self.bind(a, &d, env)? && self.bind(b, &d, env)?),
                _ => Ok(false),
            },
        }
    }

    fn eval(&mut self, e: ExprId, env: &mut Vec<(Var, Av)>) -> R<Av> {
        let v = self.eval_node(e, env)?;
        if let Some(values) = &mut self.recorded_values {
            let seen = values.entry(e).or_default();
            if !seen.contains(&v) {
                seen.push(v.clone());
            }
        }
        Ok(v)
    }

    fn eval_node(&mut self, e: ExprId, env: &mut Vec<(Var, Av)>) -> R<Av> {
        Ok(match self.arena.get(e).clone() {
            Expr::Var(v) => Self::lookup(env, v),
            Expr::Const(d, tags) => self.lift(datum_av(&d), tags)?,
            Expr::Prim(p, tags) => self.lift(Av::Prim(p), tags)?,
            Expr::Lambda(..) => {
                let code = self.code(Rc::from([]), Rc::from([e]), 0);
                let free = self.codes[code.0 as usize].free.clone();
                Av::Closure(code, free.iter().map(|v| Self::lookup(env, *v)).collect())
            }
            Expr::App(f, a, span) => {
                let fv = self.eval(f, env)?;
                let av = self.eval(a, env)?;
                self.site = span;
                let (r, t) = self.apply_t(&fv, &av)?;
                self.record(e, t);
                r
            }
            Expr::Cons(tags, a, b) => {
                let x = self.eval(a, env)?;
                let y = self.eval(b, env)?;
                Av::tagged_pair(tags, x, y)
            }
            Expr::Letrec(bs, body) => {
                let names: Rc<[Var]> = bs.iter().map(|(v, _)| *v).collect();
                let lambdas: Rc<[ExprId]> = bs.iter().map(|(_, l)| *l).collect();
                let c0 = self.code(names.clone(), lambdas.clone(), 0);
                let free = self.codes[c0.0 as usize].free.clone();
                let vals: Rc<[Av]> = free.iter().map(|v| Self::lookup(env, *v)).collect();
                let mark = env.len();
                for (j, name) in names.iter().enumerate() {
                    let c = self.code(names.clone(), lambdas.clone(), j as u32);
                    env.push((*name, Av::Closure(c, vals.clone())));
                }
                let r = self.eval(body, env)?;
                env.truncate(mark);
                r
            }
            Expr::Let(p, x, body, span) => {
                let xv = self.eval(x, env)?;
                if xv == Av::Bottom {
                    return Ok(Av::Bottom);
                }
                self.site = span;
                let mark = env.len();
                let r = if self.bind(&p, &xv, env)? {
                    self.eval(body, env)?
                } else {
                    Av::Bottom
                };
                env.truncate(mark);
                r
            }
            Expr::If(c, a, b) => {
                let c = self.eval(c, env)?;
                match truth(&c) {
                    None if c == Av::Bottom => Av::Bottom,
                    Some(false) => self.eval(b, env)?,
                    Some(true) => self.eval(a, env)?,
                    None => {
                        let x = self.eval(a, env)?;
                        let y = self.eval(b, env)?;
                        x.join(&y, &mut self.boxes)
                    }
                }
            }
        })
    }

    /// Applies an abstract procedure to an abstract argument.
    pub fn apply(&mut self, f: &Av, a: &Av) -> R<Av> {
        Ok(self.apply_t(f, a)?.0)
    }

    /// `apply`, and the call target it resolved (for specialisation).
    fn apply_t(&mut self, f: &Av, a: &Av) -> R<(Av, Target)> {
        if *a == Av::Bottom {
            return Ok((Av::Bottom, Target::Unreachable));
        }
        let f = self.force(f)?;
        Ok(match &f {
            Av::Prim(p) => self.prim_t(*p, a)?,
            Av::Closure(c, env) => {
                if env.is_empty() {
                    let r = match self.forward_loop(*c) {
                        Some((Prim::Build, d)) => self.forward_build(a, d)?,
                        Some((_, d)) => self.forward_ifold(a, d)?,
                        None => None,
                    };
                    if let Some(r) = r {
                        return Ok(r);
                    }
                }
                let (r, k) = self.call(*c, env.clone(), a.clone())?;
                (r, Target::Direct(k))
            }
            Av::Dyn(callees) if callees.is_empty() => (Av::Bottom, Target::NotProcedure),
            Av::Dyn(callees) => {
                let mut r = Av::Bottom;
                let mut targets = Vec::new();
                for callee in callees.iter().copied() {
                    let (x, t) = match callee {
                        Callee::Prim(p) => self.prim_t(p, a)?,
                        Callee::Code(c) => {
                            let Some(env) = self.boxed_env(c) else {
                                // No closure of this code has been boxed (yet).
                                continue;
                            };
                            let (x, k) = self.call(c, env, a.clone())?;
                            (x, Target::Direct(k))
                        }
                    };
                    r = r.join(&x, &mut self.boxes);
                    targets.push(t);
                }
                (r, Target::Dispatch(targets))
            }
            Av::Bottom => (Av::Bottom, Target::Unreachable),
            // Applying a non-procedure is a run-time error: no value.
            _ => (Av::Bottom, Target::NotProcedure),
        })
    }

    /// `build` or `ifold`, and `d`, if code `c` is that primitive's forward version
    /// transformed by `forward` `d - 1` more times (the loops of nested forward derivatives).
    fn forward_loop(&mut self, c: CodeId) -> Option<(Prim, usize)> {
        if let Some(d) = self.forward_loops.get(&c) {
            return *d;
        }
        let tags = self.code_tags(c);
        let d = match self.prim_version(c, Tag::Forward) {
            Some(p @ (Prim::Build | Prim::Ifold)) => Some((p, 1)),
            _ if tags.depth() >= 2 && tags.iter().all(|t| t == Tag::Forward) => self
                .untransform_code(c, Tag::Forward)
                .and_then(|inner| self.forward_loop(inner))
                .map(|(p, d)| (p, d + 1)),
            _ => None,
        };
        self.forward_loops.insert(c, d);
        d
    }

    /// The `d` forward tags of a forward loop's argument `a`, and the pair it is, if it is a
    /// pair of those tags whose `count` part (selected by `count`) is a real `d` bundles deep.
    fn forward_loop_arg(
        &mut self,
        a: &Av,
        d: usize,
        count: impl Fn(&Av) -> Option<Av>,
    ) -> R<Option<(Tags, Av, Av)>> {
        let a = self.force_shallow(a)?;
        let mut tags = Tags::EMPTY;
        for _ in 0..d {
            let Some(t) = tags.push(Tag::Forward) else {
                return Ok(None);
            };
            tags = t;
        }
        let Some(n) = count(&a) else {
            return Ok(None);
        };
        let Some(p) = innermost_primal(&n, d) else {
            return Ok(None);
        };
        if !matches!(p, Av::Real(_)) || !matches!(&a, Av::Pair(t, ..) if *t == tags) {
            return Ok(None);
        }
        let p = p.clone();
        Ok(Some((tags, a, p)))
    }

    /// The forward version of `build` at `d` forward tags applied to `a`, without analysing
    /// its definition's loop.
    ///
    /// That loop conses the elements onto a list and turns the list into an array at the end:
    /// analysed as it is, a list of unknown length is boxed, and so is every array a forward
    /// derivative builds. Its meaning is simple (paper 002 Fig. 6, D-Build): the forward array
    /// of `f` applied to each index `i` below the (innermost) primal of the length, an index
    /// being `i` lifted to the `d` forward tags (tangents zero). `None` (analyse the
    /// definition) where the argument is not a forward pair of a forward real and something
    /// else.
    fn forward_build(&mut self, a: &Av, d: usize) -> R<Option<(Av, Target)>> {
        let count = |a: &Av| match a {
            Av::Pair(_, n, _) => Some((**n).clone()),
            _ => None,
        };
        let Some((tags, a, p)) = self.forward_loop_arg(a, d, count)? else {
            return Ok(None);
        };
        let Av::Pair(_, _, f) = &a else {
            return Ok(None);
        };
        let known_empty = p == Av::known_real(0.0);
        let index = self.lift(Av::real(), tags)?;
        let (elem, target) = if known_empty {
            (Av::Bottom, Target::Unreachable)
        } else {
            self.apply_t(f, &index)?
        };
        Ok(Some((
            Av::array(tags, known_length(&p), elem),
            Target::ForwardBuild(Box::new(target)),
        )))
    }

    /// The forward version of `ifold` at `d` forward tags applied to `a`, without analysing
    /// its definition's recursive loop (which the analysis would specialise on the first
    /// indices, each a function of its own, and the IR could not treat as one loop). Its
    /// meaning (paper 002 Fig. 6, D-IFold): the accumulator threaded through `f` applied to
    /// the forward pair of the accumulator and each index `i` below the (innermost) primal of
    /// the count, lifted to the `d` forward tags. `None` (analyse the definition) where the
    /// argument is not a forward list of a procedure, an accumulator and a forward real.
    fn forward_ifold(&mut self, a: &Av, d: usize) -> R<Option<(Av, Target)>> {
        let count = |a: &Av| match a {
            Av::Pair(t, _, rest) => match &**rest {
                Av::Pair(u, _, n) if u == t => Some((**n).clone()),
                _ => None,
            },
            _ => None,
        };
        let Some((tags, a, p)) = self.forward_loop_arg(a, d, count)? else {
            return Ok(None);
        };
        let Av::Pair(_, f, rest) = &a else {
            return Ok(None);
        };
        let Av::Pair(_, init, _) = &**rest else {
            return Ok(None);
        };
        if p == Av::known_real(0.0) {
            return Ok(Some((
                (**init).clone(),
                Target::ForwardIfold(Box::new(Target::Unreachable)),
            )));
        }
        let index = self.lift(Av::real(), tags)?;
        // As `ifold`: the accumulator a fixpoint over the iterations.
        let mut acc = (**init).clone();
        loop {
            let arg = Av::tagged_pair(tags, acc.clone(), index.clone());
            let (r, t) = self.apply_t(f, &arg)?;
            let next = acc.join(&r, &mut self.boxes).bounded(&mut self.boxes);
            if next == acc {
                return Ok(Some((acc, Target::ForwardIfold(Box::new(t)))));
            }
            acc = next;
        }
    }

    /// A primitive applied: its result, and its target (the higher-order primitives have the
    /// targets of the procedures they call).
    fn prim_t(&mut self, p: Prim, a: &Av) -> R<(Av, Target)> {
        match p {
            Prim::IfProcedure | Prim::Checkpoint | Prim::Build | Prim::Ifold | Prim::IfoldTape => {
                let a = self.force_shallow(a)?;
                self.higher_order(p, &a)
            }
            _ => Ok((self.prim(p, a)?, Target::Prim(p))),
        }
    }

    /// `if-procedure`, `checkpoint`, `build` and `ifold` (untransformed): the procedures they
    /// call are resolved like any call.
    fn higher_order(&mut self, p: Prim, a: &Av) -> R<(Av, Target)> {
        let is_real = |a: &Av| matches!(a, Av::Real(_) | Av::Dyn(_));
        // A malformed call: an error at run time, which the executor raises in the same place.
        let none = (
            Av::Bottom,
            match p {
                Prim::IfProcedure => {
                    Target::IfProc(Box::new(Target::Unreachable), Box::new(Target::Unreachable))
                }
                Prim::Checkpoint => Target::Checkpoint(Box::new(Target::Unreachable)),
                Prim::Build => Target::Build(Box::new(Target::Unreachable)),
                Prim::IfoldTape => Target::IfoldTape(Box::new(Target::Unreachable)),
                _ => Target::Ifold(Box::new(Target::Unreachable)),
            },
        );
        Ok(match p {
            Prim::IfProcedure => {
                let Some((c, rest)) = two(a) else {
                    return Ok(none);
                };
                let Some((t, e)) = two(&rest) else {
                    return Ok(none);
                };
                if c == Av::Bottom {
                    return Ok(none);
                }
                let (x, tt) = match truth(&c) {
                    Some(false) => (Av::Bottom, Target::Unreachable),
                    _ => self.apply_t(&t, &Av::Nil)?,
                };
                let (y, te) = match truth(&c) {
                    Some(true) => (Av::Bottom, Target::Unreachable),
                    _ => self.apply_t(&e, &Av::Nil)?,
                };
                (
                    x.join(&y, &mut self.boxes),
                    Target::IfProc(Box::new(tt), Box::new(te)),
                )
            }
            Prim::Checkpoint => {
                let Some((f, x)) = two(a) else {
                    return Ok(none);
                };
                let (y, t) = self.apply_t(&f, &x)?;
                (y, Target::Checkpoint(Box::new(t)))
            }
            Prim::Build => {
                let Some((n, f)) = two(a) else {
                    return Ok(none);
                };
                if !is_real(&n) {
                    return Ok(none);
                }
                let (elem, t) = if n == Av::known_real(0.0) {
                    (Av::Bottom, Target::Unreachable)
                } else {
                    self.apply_t(&f, &Av::real())?
                };
                (
                    Av::array(Tags::EMPTY, known_length(&n), elem),
                    Target::Build(Box::new(t)),
                )
            }
            Prim::IfoldTape => {
                let Some((f, rest)) = two(a) else {
                    return Ok(none);
                };
                let Some((init, n)) = two(&rest) else {
                    return Ok(none);
                };
                if !is_real(&n) {
                    return Ok(none);
                }
                let len = known_length(&n);
                if n == Av::known_real(0.0) {
                    let empty = Av::array(Tags::EMPTY, len, Av::Bottom);
                    return Ok((
                        Av::pair(init, empty),
                        Target::IfoldTape(Box::new(Target::Unreachable)),
                    ));
                }
                // As `ifold`, the accumulator a fixpoint over the iterations; each step also
                // gives an element of the array.
                let mut acc = init;
                let mut out = Av::Bottom;
                loop {
                    let (r, t) = self.apply_t(&f, &Av::pair(acc.clone(), Av::real()))?;
                    let r = self.force_shallow(&r)?;
                    let (next, elem) = two(&r).unwrap_or((Av::Bottom, Av::Bottom));
                    out = out.join(&elem, &mut self.boxes).bounded(&mut self.boxes);
                    let grown = acc.join(&next, &mut self.boxes).bounded(&mut self.boxes);
                    if grown == acc {
                        // (An array of no elements, if no step returns, is still a value: that
                        // of a count of 0.)
                        let r = Av::pair(acc, Av::array(Tags::EMPTY, len, out));
                        break (r, Target::IfoldTape(Box::new(t)));
                    }
                    acc = grown;
                }
            }
            _ => {
                let Some((f, rest)) = two(a) else {
                    return Ok(none);
                };
                let Some((init, n)) = two(&rest) else {
                    return Ok(none);
                };
                if !is_real(&n) {
                    return Ok(none);
                }
                if n == Av::known_real(0.0) {
                    return Ok((init, Target::Ifold(Box::new(Target::Unreachable))));
                }
                // The accumulator: a fixpoint over the iterations (finite: widened joins). The
                // call of the last round covers every iteration.
                let mut acc = init;
                loop {
                    let (r, t) = self.apply_t(&f, &Av::pair(acc.clone(), Av::real()))?;
                    let next = acc.join(&r, &mut self.boxes).bounded(&mut self.boxes);
                    if next == acc {
                        break (acc, Target::Ifold(Box::new(t)));
                    }
                    acc = next;
                }
            }
        })
    }

    /// A primitive on an abstract argument. Known reals are folded with the evaluator's own
    /// arithmetic, so folding never changes a result.
    fn prim(&mut self, p: Prim, a: &Av) -> R<Av> {
        if let Some(r) = self.ad_prim(p, a)? {
            return Ok(r);
        }
        let a = &self.force_shallow(a)?;
        // The real in a (possibly boxed) operand: Some(Some(x)) known, Some(None) unknown, None
        // if it cannot be a real (a run-time error).
        let real = |a: &Av| -> Option<Option<f64>> {
            match a {
                Av::Real(r) => Some(r.map(|r| r.get())),
                Av::Dyn(_) => Some(None),
                _ => None,
            }
        };
        let yes_no = |b: Option<bool>| Av::Bool(b);
        Ok(match p {
            _ if p.is_binary_real() || p.is_comparison() => {
                let Some((x, y)) = two(a) else {
                    return Ok(Av::Bottom);
                };
                let (Some(x), Some(y)) = (real(&x), real(&y)) else {
                    return Ok(Av::Bottom);
                };
                match (x, y) {
                    (Some(x), Some(y)) if p.is_comparison() => Av::Bool(Some(p.compare(x, y))),
                    (Some(x), Some(y)) => Av::known_real(p.arith(x, y)),
                    _ if p.is_comparison() => Av::Bool(None),
                    _ => Av::real(),
                }
            }
            _ if p.is_unary_real() => match real(a) {
                None => Av::Bottom,
                Some(Some(x)) => Av::known_real(p.arith(x, 0.0)),
                Some(None) => Av::real(),
            },
            // Not a real: false (the rule then computes, and its arithmetic fails).
            Prim::ZeroTangent => match real(a) {
                None if *a == Av::Bottom => Av::Bottom,
                None => Av::Bool(Some(false)),
                Some(None) => Av::Bool(None),
                Some(Some(x)) => Av::Bool(Some(x == 0.0)),
            },
            Prim::IsZero | Prim::IsPositive | Prim::IsNegative => match real(a) {
                None => Av::Bottom,
                Some(None) => Av::Bool(None),
                Some(Some(x)) => Av::Bool(Some(match p {
                    Prim::IsZero => x == 0.0,
                    Prim::IsPositive => x > 0.0,
                    _ => x < 0.0,
                })),
            },
            _ if p.is_type_predicate() => match a {
                Av::Dyn(_) => Av::Bool(None),
                _ => {
                    let top = self.tags_of(a).top();
                    yes_no(Some(match p {
                        Prim::IsNull => *a == Av::Nil,
                        Prim::IsBoolean => matches!(a, Av::Bool(_)),
                        Prim::IsReal => matches!(a, Av::Real(_)),
                        Prim::IsPair => matches!(a, Av::Pair(t, ..) if t.is_empty()),
                        Prim::IsProcedure => matches!(a, Av::Prim(_) | Av::Closure(..)),
                        Prim::IsPerturbation => top == Some(Tag::Perturbation),
                        Prim::IsForward => top == Some(Tag::Forward),
                        Prim::IsSensitivity => top == Some(Tag::Sensitivity),
                        _ => top == Some(Tag::Reverse),
                    }))
                }
            },
            Prim::IfProcedure | Prim::Checkpoint | Prim::Build | Prim::Ifold | Prim::IfoldTape => {
                self.higher_order(p, a)?.0
            }
            Prim::ReadReal => match a {
                Av::Nil | Av::Dyn(_) => Av::real(),
                _ => Av::Bottom,
            },
            // `real` hides a value from the analysis (paper 001 §5.7).
            Prim::Real => match real(a) {
                Some(_) => Av::real(),
                None => Av::Bottom,
            },
            Prim::WriteReal => match real(a) {
                Some(_) => a.clone(),
                None => Av::Bottom,
            },
            Prim::Write => a.clone(),
            Prim::Get => {
                let Some((arr, i)) = two(a) else {
                    return Ok(Av::Bottom);
                };
                if real(&i).is_none() {
                    return Ok(Av::Bottom);
                }
                match self.force(&arr)? {
                    Av::Array(_, _, e) => (*e).clone(),
                    Av::Dyn(_) => arr,
                    _ => Av::Bottom,
                }
            }
            Prim::ArrayLength => match self.force(a)? {
                Av::Array(_, Some(n), _) => Av::known_real(n as f64),
                Av::Array(..) | Av::Dyn(_) => Av::real(),
                _ => Av::Bottom,
            },
            _ => return self.unsupported(&format!("the primitive `{}`", p.name())),
        })
    }
}

/// The two parts of an untagged argument pair (a boxed value: two boxed parts); `None` if `a`
/// cannot be one (a run-time error).
pub(crate) fn two(a: &Av) -> Option<(Av, Av)> {
    match a {
        Av::Pair(t, x, y) if t.is_empty() => Some(((**x).clone(), (**y).clone())),
        Av::Dyn(_) => Some((a.clone(), a.clone())),
        _ => None,
    }
}

/// Could a value of `v` equal the constant `c` (a constant pattern)?
fn may_equal(c: &Av, v: &Av) -> bool {
    match (c, v) {
        (_, Av::Dyn(_)) => true,
        (Av::Real(Some(x)), Av::Real(y)) => y.is_none_or(|y| y == *x),
        (Av::Bool(Some(x)), Av::Bool(y)) => y.is_none_or(|y| y == *x),
        (Av::Pair(t, a, b), Av::Pair(u, x, y)) => t == u && may_equal(a, x) && may_equal(b, y),
        (Av::Bundle(a, b), Av::Bundle(x, y)) => may_equal(a, x) && may_equal(b, y),
        (Av::Tagged(t, a), Av::Tagged(u, x)) => t == u && may_equal(a, x),
        (Av::Array(t, ..), Av::Array(u, ..)) => t == u,
        _ => c == v,
    }
}

/// Truth for `if` (everything but `#f`, looking through AD tags, as the evaluator); `None`
/// when not known.
fn truth(v: &Av) -> Option<bool> {
    match v {
        Av::Bool(b) => b.map(|b| b),
        Av::Bundle(p, _) => truth(p),
        Av::Tagged(_, x) => truth(x),
        Av::Bottom | Av::Dyn(_) | Av::Zero(_) | Av::OrZero(..) => None,
        _ => Some(true),
    }
}

/// The abstract value of a constant (every part known).
pub fn datum_av(d: &Datum) -> Av {
    match d {
        Datum::Nil => Av::Nil,
        Datum::Bool(b) => Av::Bool(Some(*b)),
        Datum::Real(r) => Av::known_real(*r),
        Datum::Pair(p) => Av::pair(datum_av(&p.0), datum_av(&p.1)),
        // Data holds no procedures: joining its elements boxes no closure.
        Datum::Array(a) => Av::array(
            Tags::EMPTY,
            Some(a.len() as u64),
            a.iter().fold(Av::Bottom, |acc, x| {
                acc.join(&datum_av(x), &mut Boxes::default())
            }),
        ),
    }
}

/// The length of an array `build` makes from this length, where it is known: a known
/// natural number below 2^53, as the evaluator accepts (otherwise `build` fails).
fn known_length(n: &Av) -> crate::domain::Len {
    match n {
        Av::Real(Some(r)) => {
            let r = r.get();
            (r >= 0.0 && r.fract() == 0.0 && r < 2f64.powi(53)).then_some(r as u64)
        }
        _ => None,
    }
}

/// The primal of the primal ... (`d` times) of a forward value, if it is `d` bundles deep.
fn innermost_primal(v: &Av, d: usize) -> Option<&Av> {
    let mut v = v;
    for _ in 0..d {
        match v {
            Av::Bundle(p, _) => v = p,
            _ => return None,
        }
    }
    Some(v)
}
