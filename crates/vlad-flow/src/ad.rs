//! The AD operators on abstract values: the evaluator's structural maps (`vlad-eval/src/ad.rs`)
//! one for one, over shapes instead of values. Closures are transformed by transforming their
//! code with the same Core -> Core transforms (memoised in the shared arena), and primitives
//! are lifted to the closures of the evaluator's prelude, so an abstract closure always names
//! exactly the code the evaluator would run.

use crate::analysis::{two, Analysis, FlowError};
use crate::domain::{join_len, Av, Callee, CodeId};
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use vlad_core::{Prim, Tag, Tags};

type R<T> = Result<T, FlowError>;

/// Boxed procedures an AD map of a boxed value gives, each closure's code with its environment
/// (`None`: not known yet, or supplied by an enclosing map).
type Mapped = Vec<(Callee, Option<Rc<[Av]>>)>;

/// The map of a boxed callee by an operation (`map_dyn`): the callees it becomes, and the
/// summaries its environments were mapped from.
pub(crate) struct CalleeMap {
    images: Rc<[Callee]>,
    /// Every summary the map of the environments read, nested maps' included, each with its
    /// version then; `None`: not mapped yet.
    done: Option<Rc<[(CodeId, u64)]>>,
}

/// An AD map over the environments of boxed closures (to cut its recursion through recursive
/// summaries: see `map_boxed_env`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapOp {
    Tag(Tag),
    Untag(Tag),
    Split(bool),
    Same,
    Bundle,
}

impl Analysis<'_> {
    /// The maps of boxed closures whose environments the analysis mapped (`map_dyn`).
    pub(crate) fn mapped_envs(&self) -> std::collections::HashSet<(MapOp, CodeId)> {
        self.callee_maps
            .iter()
            .filter(|(_, m)| m.done.is_some())
            .filter_map(|((op, c), _)| match c {
                Callee::Code(c) => Some((*op, *c)),
                Callee::Prim(_) => None,
            })
            .collect()
    }

    /// The AD tag stack of an abstract value (as `Value::tags`).
    pub fn tags_of(&self, v: &Av) -> Tags {
        match v {
            Av::Pair(t, ..) | Av::Array(t, ..) => *t,
            Av::Closure(c, _) => self.code_tags(*c),
            Av::Bundle(p, _) => self.tags_of(p).push(Tag::Forward).unwrap_or(Tags::EMPTY),
            Av::Tagged(t, x) => self.tags_of(x).push(*t).unwrap_or(Tags::EMPTY),
            Av::Zero(of) | Av::OrZero(of, _) | Av::OneHot(of, _) => self
                .tags_of(of)
                .pop()
                .push(Tag::Sensitivity)
                .unwrap_or(Tags::EMPTY),
            Av::Sum(o, _) => self.tags_of(o),
            _ => Tags::EMPTY,
        }
    }

    /// The tags of closures of a code: those of its lambda's parameter.
    pub fn code_tags(&self, c: CodeId) -> Tags {
        let lam = self.codes[c.0 as usize].lambda();
        match self.arena.get(lam) {
            vlad_core::Expr::Lambda(p, _, _) => vlad_core::reverse::pattern_tags(p),
            _ => Tags::EMPTY,
        }
    }

    /// A lazy zero computed one level (as the evaluator's pattern matching and maps do).
    pub(crate) fn force(&mut self, v: &Av) -> R<Av> {
        match v {
            Av::Zero(of) => self.force_zero(of),
            // Either alternative, as the operation that forces sees it.
            Av::OrZero(of, x) => {
                let z = self.force_zero(of)?;
                // (The join of a dense array and a one-hot or a sum is a sum: computed.)
                let x = match &**x {
                    Av::OneHot(..) | Av::Sum(..) => self.force(x)?,
                    _ => (**x).clone(),
                };
                Ok(z.join(&x, &mut self.boxes))
            }
            // A perturbed one-hot (see `tag`): the perturbation array.
            Av::Tagged(Tag::Perturbation, x) if matches!(**x, Av::OneHot(..)) => {
                let d = self.force(x)?;
                self.tag(&d, Tag::Perturbation)
            }
            // A forward one-hot kept as the bundle of two (see `bundle`): the forward array.
            Av::Bundle(p, t) if is_onehot_bundle(p, t) => {
                let p = self.force(p)?;
                let t = self.force(t)?;
                self.bundle(&p, &t)
            }
            // The dense array: the element's zero but at the index.
            Av::OneHot(of, x) => match &**of {
                Av::Array(t, n, e) => {
                    let tags = t.pop().push(Tag::Sensitivity).expect("same depth");
                    let elem = Av::Zero(e.clone()).join(x, &mut self.boxes);
                    Ok(Av::array(tags, *n, elem))
                }
                _ => Ok(v.boxed(&mut self.boxes)),
            },
            // The dense array: the dense part where there is no one-hot, the one-hot's where
            // there is no dense part, the dense part copied with the one-hot added into it.
            Av::Sum(o, d) => {
                let (o, d) = (sum_part(o), sum_part(d));
                let fo = self.force(o)?;
                let both = self.accumulate(d, o)?;
                Ok(fo.join(d, &mut self.boxes).join(&both, &mut self.boxes))
            }
            _ => Ok(v.clone()),
        }
    }

    /// Lazy zeros in the top two levels computed: where a primitive's operands are.
    pub(crate) fn force_shallow(&mut self, v: &Av) -> R<Av> {
        let v = self.force(v)?;
        Ok(match &v {
            Av::Pair(t, a, d) => {
                let a = self.force(a)?;
                let d = match self.force(d)? {
                    Av::Pair(u, x, y) => {
                        let x = self.force(&x)?;
                        let y = self.force(&y)?;
                        Av::tagged_pair(u, x, y)
                    }
                    other => other,
                };
                Av::tagged_pair(*t, a, d)
            }
            _ => v,
        })
    }

    /// The closure of the `tag` version of a primitive, as an abstract value.
    fn prim_closure(&mut self, p: Prim, tag: Tag) -> R<Option<Av>> {
        Ok(self.prelude.version(p, tag).map(|lam| {
            let code = self.code(Rc::from([]), Rc::from([lam]), 0);
            Av::Closure(code, Rc::from([]))
        }))
    }

    /// If code `c` is the `tag` version of a primitive, that primitive.
    pub(crate) fn prim_version(&self, c: CodeId, tag: Tag) -> Option<Prim> {
        let code = &self.codes[c.0 as usize];
        if code.lambdas.len() != 1 {
            return None;
        }
        match self.prelude.version_of(code.lambdas[0]) {
            Some((t, p)) if t == tag => Some(p),
            _ => None,
        }
    }

    /// The code of `c` transformed by `tag` (the evaluator's `transform_group`); `None` when
    /// the tags would nest too deep (an error at run time: no value).
    ///
    /// Memoised here, failures included: a transform that nests too deep fails only when it
    /// reaches the deepest part of the code, after building most of it, and the Core
    /// transforms memoise successes only.
    fn transform_code(&mut self, c: CodeId, tag: Tag) -> R<Option<CodeId>> {
        if let Some(t) = self.transformed_codes.get(&(c, tag)) {
            return Ok(*t);
        }
        let t = self.transform_code_now(c, tag)?;
        self.transformed_codes.insert((c, tag), t);
        Ok(t)
    }

    fn transform_code_now(&mut self, c: CodeId, tag: Tag) -> R<Option<CodeId>> {
        if self.code_tags(c).depth() >= vlad_core::tags::MAX_TAG_DEPTH {
            return Ok(None);
        }
        let code = self.codes[c.0 as usize].clone();
        let mut lambdas = Vec::with_capacity(code.lambdas.len());
        for l in code.lambdas.iter() {
            let t = if tag == Tag::Reverse {
                self.arena.reverse_transform(*l, &code.names, &code.free)
            } else {
                self.arena.transform(*l, tag)
            };
            match t {
                Ok(t) => lambdas.push(t),
                Err(vlad_core::transform::TransformError::TooDeep) => return Ok(None),
                Err(vlad_core::transform::TransformError::Stopped) => {
                    self.within_budget()?;
                    return self.fail("the flow analysis was stopped".into());
                }
            }
        }
        let mut names = Vec::with_capacity(code.names.len());
        for v in code.names.iter() {
            match v.tags.push(tag) {
                Some(tags) => names.push(vlad_core::Var { id: v.id, tags }),
                None => return Ok(None),
            }
        }
        Ok(Some(self.code(names.into(), lambdas.into(), code.index)))
    }

    /// The code `c`'s is the `tag` transform of, if any.
    pub(crate) fn untransform_code(&mut self, c: CodeId, tag: Tag) -> Option<CodeId> {
        let code = self.codes[c.0 as usize].clone();
        let mut lambdas = Vec::with_capacity(code.lambdas.len());
        for l in code.lambdas.iter() {
            lambdas.push(self.arena.untransform(*l, tag)?);
        }
        let names: Vec<vlad_core::Var> = code
            .names
            .iter()
            .map(|v| vlad_core::Var {
                id: v.id,
                tags: v.tags.pop(),
            })
            .collect();
        Some(self.code(names.into(), lambdas.into(), code.index))
    }

    /// A boxed value whose procedures are `f` of the procedures of `v`: each callee maps to the
    /// callees it can become (none when the operation fails on it at run time), a closure with
    /// its environment computed from the summary of the boxed closures of its code.
    ///
    /// Incremental: the map of a callee by an operation is kept (`CalleeMap`), and its
    /// environment is mapped again only when a summary that map read has grown (its own, or
    /// that of a code whose boxed closures its environment holds). Keys that map a boxed
    /// value are evaluated again whenever any summary they read grows, and boxed values are
    /// shared all over the summaries: redoing whole maps took time exponential in their
    /// nesting (particle-RR).
    fn map_dyn(
        &mut self,
        v: &Av,
        op: MapOp,
        mut f: impl FnMut(&mut Self, Callee) -> R<Mapped>,
    ) -> R<Av> {
        let Av::Dyn(callees) = v else {
            return Ok(Av::dyn_data());
        };
        let mut out = BTreeSet::new();
        for c in callees.iter() {
            out.extend(self.map_callee(*c, op, &mut f)?.iter().copied());
        }
        Ok(Av::dyn_of(out))
    }

    /// `map_dyn` of one callee: the callees it becomes.
    fn map_callee(
        &mut self,
        c: Callee,
        op: MapOp,
        f: &mut impl FnMut(&mut Self, Callee) -> R<Mapped>,
    ) -> R<Rc<[Callee]>> {
        let key = (op, c);
        // The images first, without environments: they are known before any environment is
        // mapped, so a map that meets this callee again inside a summary returns them.
        if !self.callee_maps.contains_key(&key) {
            let outer = std::mem::replace(&mut self.envs_off, true);
            let images = f(self, c);
            self.envs_off = outer;
            let images = crate::domain::callee_set(images?.into_iter().map(|(d, _)| d));
            self.callee_maps
                .insert(key, CalleeMap { images, done: None });
        }
        // The environments, if a summary they were mapped from is new or has grown: the
        // callee's own, or one that a map nested in it read (a slot of its environment that
        // holds boxed callees of other codes is mapped through their summaries).
        // (Not while computing images only: what it mapped would be no environments.)
        if self.envs_off {
            return Ok(self.callee_maps[&key].images.clone());
        }
        if let Callee::Code(code) = c {
            // Read even when up to date: this key depends on the summary.
            let _ = self.boxed_env(code);
        }
        let done = self.callee_maps[&key].done.clone();
        let fresh = done.as_ref().is_some_and(|reads| {
            reads
                .iter()
                .all(|&(code, v)| self.summary_version(code) == v)
        });
        match done {
            Some(reads) if fresh => {
                // The key being evaluated, and the maps enclosing this one, depend on every
                // summary this map read.
                for &(code, v) in reads.iter() {
                    self.note_summary_read(code, v);
                }
            }
            _ => {
                // Marked done while it runs: a map that meets this callee again inside a
                // summary returns its images only.
                self.callee_maps.get_mut(&key).expect("inserted above").done = Some(Rc::from([]));
                self.map_reads.push(HashMap::new());
                if let Callee::Code(code) = c {
                    let v = self.summary_version(code);
                    self.note_summary_read(code, v);
                }
                let mapped = f(self, c);
                let reads = self.map_reads.pop().expect("pushed above");
                let mut reads: Vec<(CodeId, u64)> = reads.into_iter().collect();
                reads.sort();
                for &(code, v) in &reads {
                    self.note_summary_read(code, v);
                }
                self.callee_maps.get_mut(&key).expect("inserted above").done = Some(reads.into());
                for (d, env) in mapped? {
                    // No environment: none known yet (the readers of the summary are evaluated
                    // again when it is), or being computed by an enclosing map.
                    if let (Callee::Code(code), Some(env)) = (d, env) {
                        self.boxes.pending.push((code, env));
                    }
                }
            }
        }
        Ok(self.callee_maps[&key].images.clone())
    }

    /// The boxed environment of code `c` mapped slot by slot by the operation `op`.
    ///
    /// Summaries are recursive (a backpropagator's environment holds boxed backpropagators of
    /// its own code), so a map of a callee can meet the same callee again inside an
    /// environment: there it maps the callee only, and the enclosing map supplies the
    /// environment.
    fn map_boxed_env(
        &mut self,
        c: CodeId,
        op: MapOp,
        mut f: impl FnMut(&mut Self, &Av) -> R<Av>,
    ) -> R<Option<Rc<[Av]>>> {
        if self.envs_off {
            return Ok(None);
        }
        let Some(env) = self.boxed_env(c) else {
            return Ok(None);
        };
        if !self.mapping.insert((op, c)) {
            return Ok(None);
        }
        let r = self.map_env(&env, |s, x| f(s, x));
        self.mapping.remove(&(op, c));
        Ok(Some(r?))
    }

    /// `tag` of a boxed procedure.
    fn tag_callee(&mut self, c: Callee, tag: Tag) -> R<Mapped> {
        Ok(match c {
            Callee::Code(c) => match self.transform_code(c, tag)? {
                Some(c2) => {
                    let env = self.map_boxed_env(c, MapOp::Tag(tag), |s, x| s.tag(x, tag))?;
                    vec![(Callee::Code(c2), env)]
                }
                None => vec![],
            },
            Callee::Prim(q) if tag == Tag::Reverse => self.prim_callee(q, Tag::Reverse)?,
            Callee::Prim(q) => vec![(Callee::Prim(q), None)],
        })
    }

    /// The closure of a primitive's `tag` version, as a boxed callee (no environment).
    fn prim_callee(&mut self, q: Prim, tag: Tag) -> R<Mapped> {
        Ok(match self.prim_closure(q, tag)? {
            Some(Av::Closure(c, env)) => vec![(Callee::Code(c), Some(env))],
            _ => vec![],
        })
    }

    /// The callees a procedure becomes when its outermost `tag` is removed, with `f` mapping
    /// the environment of a closure.
    fn untag_callee(
        &mut self,
        c: Callee,
        tag: Tag,
        op: MapOp,
        f: impl FnMut(&mut Self, &Av) -> R<Av>,
    ) -> R<Mapped> {
        Ok(match c {
            Callee::Code(c) => match self.prim_version(c, tag) {
                Some(q) => vec![(Callee::Prim(q), None)],
                None if self.code_tags(c).top() == Some(tag) => match self.untransform_code(c, tag)
                {
                    Some(c2) => {
                        let env = self.map_boxed_env(c, op, f)?;
                        vec![(Callee::Code(c2), env)]
                    }
                    None => vec![],
                },
                None => vec![],
            },
            Callee::Prim(q) => vec![(Callee::Prim(q), None)],
        })
    }

    fn map_env(&mut self, env: &[Av], mut f: impl FnMut(&mut Self, &Av) -> R<Av>) -> R<Rc<[Av]>> {
        env.iter().map(|x| f(self, x)).collect()
    }

    /// Lifts a constant or primitive through its tags, innermost first (`lift` of the evaluator).
    pub(crate) fn lift(&mut self, v: Av, tags: Tags) -> R<Av> {
        let mut v = v;
        let ts: Vec<Tag> = tags.iter().collect();
        for tag in ts.into_iter().rev() {
            v = match tag {
                Tag::Forward => {
                    let z = self.zero(&v)?;
                    let t = self.tag(&z, Tag::Perturbation)?;
                    self.bundle(&v, &t)?
                }
                other => self.tag(&v, other)?,
            };
        }
        Ok(v)
    }

    pub(crate) fn zero(&mut self, v: &Av) -> R<Av> {
        Ok(match v {
            Av::Real(_) => Av::known_real(0.0),
            Av::Bottom | Av::Nil | Av::Bool(_) | Av::Prim(_) => v.clone(),
            Av::Pair(t, a, d) => {
                let (a, d) = (self.zero(a)?, self.zero(d)?);
                Av::tagged_pair(*t, a, d)
            }
            Av::Closure(c, env) => Av::Closure(*c, self.map_env(env, |s, x| s.zero(x))?),
            Av::Bundle(p, t) => {
                let (p, t) = (self.zero(p)?, self.zero(t)?);
                Av::bundle(p, t)
            }
            Av::Tagged(t, x) => Av::tagged(*t, self.zero(x)?),
            Av::Array(t, n, e) => Av::array(*t, *n, self.zero(e)?),
            Av::Zero(_) | Av::OrZero(..) | Av::OneHot(..) | Av::Sum(..) => {
                let m = self.force(v)?;
                self.zero(&m)?
            }
            Av::Dyn(_) => v.clone(),
        })
    }

    /// `perturb`, `sensitize`, `*j`: push a tag.
    pub(crate) fn tag(&mut self, v: &Av, tag: Tag) -> R<Av> {
        if self.tags_of(v).depth() >= vlad_core::tags::MAX_TAG_DEPTH {
            // The evaluator reports this nesting as an error: no value.
            return Ok(Av::Bottom);
        }
        Ok(match v {
            Av::Bottom => Av::Bottom,
            // A one-hot perturbed (the forward version of a reverse `get`'s backpropagator
            // perturbs its tangent): kept, to be bundled with its primal (`bundle`).
            Av::OneHot(..) if tag == Tag::Perturbation => Av::tagged(tag, v.clone()),
            Av::Pair(t, a, d) => {
                let (a, d) = (self.tag(a, tag)?, self.tag(d, tag)?);
                Av::tagged_pair(t.push(tag).expect("depth checked"), a, d)
            }
            Av::Array(t, n, e) => {
                Av::array(t.push(tag).expect("depth checked"), *n, self.tag(e, tag)?)
            }
            Av::Closure(c, env) => {
                let Some(c2) = self.transform_code(*c, tag)? else {
                    return Ok(Av::Bottom);
                };
                Av::Closure(c2, self.map_env(env, |s, x| s.tag(x, tag))?)
            }
            Av::Prim(q) if tag == Tag::Reverse => match self.prim_closure(*q, Tag::Reverse)? {
                Some(f) => f,
                None => return self.fail(format!("`{}` has no reverse version", q.name())),
            },
            // (A perturbed one-hot tagged again is computed, as compiled code computes it: only
            // the one level of perturbation that `bundle` meets is kept lazy.)
            Av::Zero(_) | Av::OrZero(..) | Av::OneHot(..) | Av::Sum(..) => {
                let m = self.force(v)?;
                self.tag(&m, tag)?
            }
            Av::Tagged(Tag::Perturbation, x) if matches!(**x, Av::OneHot(..)) => {
                let m = self.force(v)?;
                self.tag(&m, tag)?
            }
            Av::Dyn(_) => self.map_dyn(v, MapOp::Tag(tag), |s, c| s.tag_callee(c, tag))?,
            _ => Av::tagged(tag, v.clone()),
        })
    }

    /// `unperturb`, `unsensitize`, `*j-inverse`: remove the outermost tag (bottom: an error).
    pub(crate) fn untag(&mut self, v: &Av, tag: Tag) -> R<Av> {
        if let Av::Tagged(t, x) = v {
            if *t == tag && matches!(**x, Av::OneHot(..)) {
                return Ok((**x).clone());
            }
        }
        let v = self.force(v)?;
        Ok(match &v {
            Av::Tagged(t, x) if *t == tag => (**x).clone(),
            Av::Pair(t, a, d) if t.top() == Some(tag) => {
                let (a, d) = (self.untag(a, tag)?, self.untag(d, tag)?);
                Av::tagged_pair(t.pop(), a, d)
            }
            Av::Array(t, n, e) if t.top() == Some(tag) => {
                Av::array(t.pop(), *n, self.untag(e, tag)?)
            }
            Av::Closure(c, _) if tag == Tag::Reverse && self.prim_version(*c, tag).is_some() => {
                Av::Prim(self.prim_version(*c, tag).expect("checked"))
            }
            Av::Closure(c, env) if self.code_tags(*c).top() == Some(tag) => {
                match self.untransform_code(*c, tag) {
                    Some(c2) => Av::Closure(c2, self.map_env(env, |s, x| s.untag(x, tag))?),
                    None => Av::Bottom,
                }
            }
            Av::Dyn(_) => self.map_dyn(&v, MapOp::Untag(tag), |s, c| {
                s.untag_callee(c, tag, MapOp::Untag(tag), |s, x| s.untag(x, tag))
            })?,
            _ => Av::Bottom,
        })
    }

    pub(crate) fn bundle(&mut self, p: &Av, t: &Av) -> R<Av> {
        // Two one-hot sensitivities (what the forward version of a reverse `get`'s
        // backpropagator gives): kept as they are, so that the forward version of a sweep
        // takes them apart again (`primal`, `tangent`) for nothing, where the forward array
        // they stand for costs its length.
        if is_onehot_bundle(p, t) {
            return Ok(Av::bundle(p.clone(), t.clone()));
        }
        let p = self.force(p)?;
        let t = self.force(t)?;
        if matches!(p, Av::Dyn(_)) || matches!(t, Av::Dyn(_)) {
            return self.bundle_dyn(&p, &t);
        }
        let inner = match &t {
            Av::Tagged(Tag::Perturbation, x) => Some((**x).clone()),
            _ => None,
        };
        Ok(match &p {
            Av::Bottom => Av::Bottom,
            Av::Prim(q) => match inner {
                Some(Av::Prim(q2)) if q2 == *q => match self.prim_closure(*q, Tag::Forward)? {
                    Some(f) => f,
                    None => return self.fail(format!("`{}` has no forward version", q.name())),
                },
                _ => Av::Bottom,
            },
            Av::Real(_) | Av::Nil | Av::Bool(_) | Av::Bundle(..) | Av::Tagged(..) => match inner {
                Some(x) if same_scalar_shape(&p, &x) => Av::bundle(p.clone(), t.clone()),
                _ => Av::Bottom,
            },
            Av::Pair(pt, pa, pd) => match &t {
                Av::Pair(tt, ta, td) if Some(*tt) == pt.push(Tag::Perturbation) => {
                    let a = self.bundle(pa, ta)?;
                    let d = self.bundle(pd, td)?;
                    match pt.push(Tag::Forward) {
                        Some(tags) => Av::tagged_pair(tags, a, d),
                        None => Av::Bottom,
                    }
                }
                _ => Av::Bottom,
            },
            Av::Array(pt, pn, pe) => match &t {
                Av::Array(tt, tn, te) if Some(*tt) == pt.push(Tag::Perturbation) => {
                    let e = self.bundle(pe, te)?;
                    match pt.push(Tag::Forward) {
                        Some(tags) => Av::array(tags, join_len(*pn, *tn), e),
                        None => Av::Bottom,
                    }
                }
                _ => Av::Bottom,
            },
            Av::Closure(pc, penv) => match &t {
                Av::Closure(tc, tenv)
                    if self.codes[tc.0 as usize].index == self.codes[pc.0 as usize].index =>
                {
                    if self.transform_code(*pc, Tag::Perturbation)? != Some(*tc) {
                        return Ok(Av::Bottom);
                    }
                    let Some(fc) = self.transform_code(*pc, Tag::Forward)? else {
                        return Ok(Av::Bottom);
                    };
                    let mut env = Vec::with_capacity(penv.len());
                    for (x, y) in penv.iter().zip(tenv.iter()) {
                        env.push(self.bundle(x, y)?);
                    }
                    Av::Closure(fc, env.into())
                }
                _ => Av::Bottom,
            },
            Av::Zero(_) | Av::OrZero(..) | Av::OneHot(..) | Av::Sum(..) | Av::Dyn(_) => {
                unreachable!("forced and checked above")
            }
        })
    }

    /// `bundle` where the primal or the tangent is boxed: the forward versions of the primal's
    /// procedures, closures with their environments bundled slot by slot with those of the
    /// tangent's.
    fn bundle_dyn(&mut self, p: &Av, t: &Av) -> R<Av> {
        // Memoised while no summary grows: boxed values are shared all over the
        // summaries, and bundling each occurrence again would take time exponential in their
        // nesting.
        if self.bundle_memo_generation != self.generation {
            self.bundle_memo.clear();
            self.bundle_memo_generation = self.generation;
        }
        let key = (p.clone(), t.clone());
        if let Some(r) = self.bundle_memo.get(&key) {
            return Ok(r.clone());
        }
        self.bundling += 1;
        let r = self.bundle_dyn_now(p, t);
        self.bundling -= 1;
        let r = r?;
        self.bundle_memo.insert(key, r.clone());
        Ok(r)
    }

    fn bundle_dyn_now(&mut self, p: &Av, t: &Av) -> R<Av> {
        let primal: Mapped = match p {
            Av::Dyn(callees) => {
                let mut out = Vec::new();
                for c in callees.iter().copied() {
                    let env = match c {
                        Callee::Code(c) => self.boxed_env(c),
                        Callee::Prim(_) => None,
                    };
                    out.push((c, env));
                }
                out
            }
            Av::Closure(c, env) => vec![(Callee::Code(*c), Some(env.clone()))],
            Av::Prim(q) => vec![(Callee::Prim(*q), None)],
            _ => vec![],
        };
        let mut to = BTreeSet::new();
        for (c, penv) in primal {
            match c {
                Callee::Prim(q) => {
                    for (d, env) in self.prim_callee(q, Tag::Forward)? {
                        to.insert(d);
                        if let (Callee::Code(code), Some(env)) = (d, env) {
                            self.boxes.pending.push((code, env));
                        }
                    }
                }
                Callee::Code(c) => {
                    let (Some(fc), Some(pc)) = (
                        self.transform_code(c, Tag::Forward)?,
                        self.transform_code(c, Tag::Perturbation)?,
                    ) else {
                        continue;
                    };
                    let tenv = match t {
                        Av::Closure(tc, tenv) if *tc == pc => Some(tenv.clone()),
                        Av::Dyn(ts) if !ts.is_empty() => self.boxed_env(pc),
                        _ => None,
                    };
                    to.insert(Callee::Code(fc));
                    let (Some(penv), Some(tenv)) = (penv, tenv) else {
                        continue;
                    };
                    // As in `map_boxed_env`: an enclosing bundle of this code supplies it.
                    if !self.mapping.insert((MapOp::Bundle, fc)) {
                        continue;
                    }
                    let mut env = Vec::with_capacity(penv.len());
                    let mut failed = None;
                    for (x, y) in penv.iter().zip(tenv.iter()) {
                        match self.bundle(x, y) {
                            Ok(b) => env.push(b),
                            Err(e) => {
                                failed = Some(e);
                                break;
                            }
                        }
                    }
                    self.mapping.remove(&(MapOp::Bundle, fc));
                    if let Some(e) = failed {
                        return Err(e);
                    }
                    self.boxes.pending.push((fc, env.into()));
                }
            }
        }
        Ok(Av::dyn_of(to))
    }

    /// `primal` (`tangent == false`) or `tangent` of a forward value.
    pub(crate) fn split(&mut self, v: &Av, tangent: bool) -> R<Av> {
        if let Av::Bundle(p, t) = v {
            if is_onehot_bundle(p, t) {
                return Ok(if tangent {
                    (**t).clone()
                } else {
                    (**p).clone()
                });
            }
        }
        let v = self.force(v)?;
        Ok(match &v {
            Av::Bundle(p, t) => {
                if tangent {
                    (**t).clone()
                } else {
                    (**p).clone()
                }
            }
            Av::Pair(t, a, d) if t.top() == Some(Tag::Forward) => {
                let (a, d) = (self.split(a, tangent)?, self.split(d, tangent)?);
                Av::tagged_pair(Self::split_tags(*t, tangent), a, d)
            }
            Av::Array(t, n, e) if t.top() == Some(Tag::Forward) => {
                Av::array(Self::split_tags(*t, tangent), *n, self.split(e, tangent)?)
            }
            Av::Closure(c, _) if self.prim_version(*c, Tag::Forward).is_some() => {
                let q = Av::Prim(self.prim_version(*c, Tag::Forward).expect("checked"));
                if tangent {
                    Av::tagged(Tag::Perturbation, q)
                } else {
                    q
                }
            }
            Av::Closure(c, env) if self.code_tags(*c).top() == Some(Tag::Forward) => {
                let Some(mut c2) = self.untransform_code(*c, Tag::Forward) else {
                    return Ok(Av::Bottom);
                };
                if tangent {
                    let Some(t) = self.transform_code(c2, Tag::Perturbation)? else {
                        return Ok(Av::Bottom);
                    };
                    c2 = t;
                }
                Av::Closure(c2, self.map_env(env, |s, x| s.split(x, tangent))?)
            }
            Av::Dyn(_) => self.map_dyn(&v, MapOp::Split(tangent), |s, c| {
                let parts = s.untag_callee(c, Tag::Forward, MapOp::Split(tangent), |s, x| {
                    s.split(x, tangent)
                })?;
                let mut out = Vec::new();
                for (d, env) in parts {
                    out.push(match d {
                        Callee::Code(c2) if tangent => {
                            match s.transform_code(c2, Tag::Perturbation)? {
                                Some(t) => (Callee::Code(t), env),
                                None => continue,
                            }
                        }
                        _ => (d, env),
                    });
                }
                Ok(out)
            })?,
            _ => Av::Bottom,
        })
    }

    fn split_tags(t: Tags, tangent: bool) -> Tags {
        let rest = t.pop();
        if tangent {
            rest.push(Tag::Perturbation).expect("same depth")
        } else {
            rest
        }
    }

    pub(crate) fn plus(&mut self, a: &Av, b: &Av) -> R<Av> {
        if let Av::Zero(_) = a {
            return Ok(b.clone());
        }
        if let Av::Zero(_) = b {
            return Ok(a.clone());
        }
        // A lazy zero or a value: `b` itself (the zero is the identity), or the sum.
        if let Av::OrZero(_, x) = a {
            let s = self.plus(x, b)?;
            return Ok(b.join(&s, &mut self.boxes));
        }
        if let Av::OrZero(_, y) = b {
            let s = self.plus(a, y)?;
            return Ok(a.join(&s, &mut self.boxes));
        }
        Ok(match (a, b) {
            (Av::Bottom, _) | (_, Av::Bottom) => Av::Bottom,
            (Av::Dyn(_), _) | (_, Av::Dyn(_)) => a.join(b, &mut self.boxes),
            // A one-hot and a dense array sensitivity of the same array: the two (a boxed lazy
            // sum where they are not).
            (o @ Av::OneHot(..), d @ Av::Array(..)) | (d @ Av::Array(..), o @ Av::OneHot(..)) => {
                Av::sum(o.clone(), d.clone(), &mut self.boxes)
            }
            // A sum and a dense array: the sum of the dense parts, beside the one-hot (the
            // evaluator's order: the dense parts first, in order, then the one-hot).
            (Av::Sum(o, d), e @ Av::Array(..)) => {
                let s = self.plus(d, e)?;
                Av::sum((**o).clone(), s, &mut self.boxes)
            }
            (e @ Av::Array(..), Av::Sum(o, d)) => {
                let s = self.plus(e, d)?;
                Av::sum((**o).clone(), s, &mut self.boxes)
            }
            // A one-hot or a sum added to another array sensitivity: a lazy sum, boxed (O(1),
            // where a dense array would cost the length at every read of straight-line code,
            // and a sum of sums could grow round a recursion).
            (Av::OneHot(..) | Av::Sum(..), _) | (_, Av::OneHot(..) | Av::Sum(..)) => {
                let x = a.boxed(&mut self.boxes);
                x.join(&b.boxed(&mut self.boxes), &mut self.boxes)
            }
            (Av::Real(Some(x)), Av::Real(Some(y))) => Av::known_real(x.get() + y.get()),
            (Av::Real(_), Av::Real(_)) => Av::real(),
            (Av::Nil, Av::Nil) => Av::Nil,
            (Av::Bool(x), Av::Bool(y)) => match (x, y) {
                (Some(x), Some(y)) if x != y => Av::Bottom,
                (Some(x), _) | (_, Some(x)) => Av::Bool(Some(*x)),
                _ => Av::Bool(None),
            },
            (Av::Prim(x), Av::Prim(y)) if x == y => a.clone(),
            (Av::Pair(t, a1, d1), Av::Pair(u, a2, d2)) if t == u => {
                let (x, y) = (self.plus(a1, a2)?, self.plus(d1, d2)?);
                Av::tagged_pair(*t, x, y)
            }
            (Av::Array(t, n, x), Av::Array(u, m, y)) if t == u => {
                Av::array(*t, join_len(*n, *m), self.plus(x, y)?)
            }
            (Av::Tagged(t, x), Av::Tagged(u, y)) if t == u => Av::tagged(*t, self.plus(x, y)?),
            (Av::Bundle(p1, t1), Av::Bundle(p2, t2)) => {
                let (x, y) = (self.plus(p1, p2)?, self.plus(t1, t2)?);
                Av::bundle(x, y)
            }
            (Av::Closure(c, e1), Av::Closure(d, e2)) if c == d => {
                let mut env = Vec::with_capacity(e1.len());
                for (x, y) in e1.iter().zip(e2.iter()) {
                    env.push(self.plus(x, y)?);
                }
                Av::Closure(*c, env.into())
            }
            _ => Av::Bottom,
        })
    }

    /// `(%accumulate a b)`: `plus`, as compiled code computes it into `a`, the accumulator of
    /// a sweep: the arrays of a lazy zero accumulator are new dense arrays (`densified`), and
    /// those of an accumulator that has some are kept, their elements joined with what is
    /// added to them (a one-hot's element at its index, an array's at each).
    pub(crate) fn accumulate(&mut self, a: &Av, b: &Av) -> R<Av> {
        let join = |s: &mut Self, x: Av, y: Av| x.join(&y, &mut s.boxes);
        Ok(match (a, b) {
            (Av::Bottom, _) | (_, Av::Bottom) => Av::Bottom,
            (Av::Zero(_), _) => self.densified(b)?,
            (Av::OrZero(_, x), _) => {
                let d = self.densified(b)?;
                let s = self.accumulate(x, b)?;
                join(self, d, s)
            }
            (_, Av::Zero(_)) => a.clone(),
            (_, Av::OrZero(_, y)) => {
                let s = self.accumulate(a, y)?;
                join(self, a.clone(), s)
            }
            // The dense part, then the one-hot (the evaluator's order when it computes a sum).
            (Av::Array(..), Av::Sum(o, d)) => {
                let t = self.accumulate(a, d)?;
                self.accumulate(&t, o)?
            }
            (Av::Array(t, n, e), Av::OneHot(..)) if Some(*t) == self.onehot_tags(b) => {
                let Av::OneHot(_, x) = b else {
                    unreachable!("matched")
                };
                let s = self.plus(e, x)?;
                Av::array(*t, *n, join(self, (**e).clone(), s))
            }
            (Av::Array(t, n, e), Av::Array(u, m, f)) if t == u => {
                let s = self.plus(e, f)?;
                Av::array(*t, join_len(*n, *m), join(self, (**e).clone(), s))
            }
            (Av::Pair(t, a1, d1), Av::Pair(u, a2, d2)) if t == u => {
                let (x, y) = (self.accumulate(a1, a2)?, self.accumulate(d1, d2)?);
                Av::tagged_pair(*t, x, y)
            }
            (Av::Tagged(t, x), Av::Tagged(u, y)) if t == u => {
                Av::tagged(*t, self.accumulate(x, y)?)
            }
            (Av::Closure(c, e1), Av::Closure(d, e2)) if c == d => {
                let mut env = Vec::with_capacity(e1.len());
                for (x, y) in e1.iter().zip(e2.iter()) {
                    env.push(self.accumulate(x, y)?);
                }
                Av::Closure(*c, env.into())
            }
            _ => self.plus(a, b)?,
        })
    }

    /// The AD tags of the dense array a one-hot sensitivity stands for.
    fn onehot_tags(&self, v: &Av) -> Option<Tags> {
        match v {
            Av::OneHot(of, _) => match &**of {
                Av::Array(t, ..) => t.pop().push(Tag::Sensitivity),
                _ => None,
            },
            _ => None,
        }
    }

    /// A sensitivity with its one-hot arrays dense, as `%accumulate` copies what it adds to a
    /// lazy zero (its arrays are then the accumulator's own, to add into in place).
    pub fn densified(&mut self, v: &Av) -> R<Av> {
        Ok(match v {
            Av::OneHot(..) => {
                let d = self.force(v)?;
                self.densified(&d)?
            }
            // The dense part copied (or the one-hot made dense), the one-hot added into it.
            Av::Sum(o, d) => {
                let t = self.densified(d)?;
                self.accumulate(&t, o)?
            }
            Av::Array(t, n, e) => Av::array(*t, *n, self.densified(e)?),
            Av::Pair(t, a, d) => {
                let (x, y) = (self.densified(a)?, self.densified(d)?);
                Av::tagged_pair(*t, x, y)
            }
            Av::Tagged(t, x) => Av::tagged(*t, self.densified(x)?),
            Av::Closure(c, env) => Av::Closure(*c, self.map_env(env, |s, x| s.densified(x))?),
            Av::OrZero(z, x) => {
                let x = self.densified(x)?;
                Av::or_zero(z, &x, &mut self.boxes)
            }
            _ => v.clone(),
        })
    }

    /// The zero sensitivity (before the sensitivity tag) of a value.
    pub(crate) fn szero(&mut self, v: &Av) -> R<Av> {
        let v = self.force(v)?;
        Ok(match &v {
            Av::Real(_) => Av::known_real(0.0),
            Av::Bottom | Av::Nil | Av::Bool(_) => v.clone(),
            Av::Prim(_) => Av::Nil,
            Av::Pair(t, a, d) => {
                let (a, d) = (self.szero(a)?, self.szero(d)?);
                Av::tagged_pair(*t, a, d)
            }
            Av::Closure(c, env) => {
                let tags = self.code_tags(*c);
                let mut acc = self.lift(Av::Nil, tags)?;
                for x in env.iter().rev() {
                    let z = self.szero(x)?;
                    acc = Av::tagged_pair(tags, z, acc);
                }
                acc
            }
            Av::Bundle(p, t) => {
                let (p, t) = (self.szero(p)?, self.szero(t)?);
                Av::bundle(p, t)
            }
            Av::Tagged(t, x) => Av::tagged(*t, self.szero(x)?),
            Av::Array(t, n, e) => Av::array(*t, *n, self.szero(e)?),
            Av::Zero(_) | Av::OrZero(..) | Av::OneHot(..) | Av::Sum(..) => unreachable!("forced"),
            // A sensitivity holds no procedures.
            Av::Dyn(_) => Av::dyn_data(),
        })
    }

    /// One level of the lazy zero sensitivity of the reverse value `of`.
    pub(crate) fn force_zero(&mut self, of: &Av) -> R<Av> {
        match of {
            Av::Pair(t, a, d) if t.top() == Some(Tag::Reverse) => {
                let tags = t.pop().push(Tag::Sensitivity).expect("same depth");
                Ok(Av::tagged_pair(
                    tags,
                    Av::Zero(a.clone()),
                    Av::Zero(d.clone()),
                ))
            }
            Av::Array(t, n, e) if t.top() == Some(Tag::Reverse) => {
                let tags = t.pop().push(Tag::Sensitivity).expect("same depth");
                Ok(Av::array(tags, *n, Av::Zero(e.clone())))
            }
            Av::Closure(c, env)
                if self.code_tags(*c).top() == Some(Tag::Reverse)
                    && self.prim_version(*c, Tag::Reverse).is_none() =>
            {
                let base = self.code_tags(*c).pop();
                let tags = base.push(Tag::Sensitivity).expect("same depth");
                let nil = self.lift(Av::Nil, base)?;
                let mut acc = self.tag(&nil, Tag::Sensitivity)?;
                for x in env.iter().rev() {
                    acc = Av::tagged_pair(tags, Av::Zero(Rc::new(x.clone())), acc);
                }
                Ok(acc)
            }
            Av::Bottom => Ok(Av::Bottom),
            _ => {
                let p = self.untag(of, Tag::Reverse)?;
                let z = self.szero(&p)?;
                self.tag(&z, Tag::Sensitivity)
            }
        }
    }

    fn shallow_primal(&mut self, v: &Av) -> R<Av> {
        let v = self.force(v)?;
        if let Av::Dyn(_) = v {
            // The primal of a forward value or of a reverse one: either tag may be on top.
            // The shallow primal keeps a closure's environment as it is.
            return self.map_dyn(&v, MapOp::Same, |s, c| {
                let mut out = s.untag_callee(c, Tag::Forward, MapOp::Same, |_, x| Ok(x.clone()))?;
                out.extend(s.untag_callee(c, Tag::Reverse, MapOp::Same, |_, x| Ok(x.clone()))?);
                if let Callee::Prim(_) = c {
                    out.push((c, None));
                }
                Ok(out)
            });
        }
        let Some(tag) = self.tags_of(&v).top() else {
            return Ok(Av::Bottom);
        };
        Ok(match &v {
            Av::Bundle(p, _) => (**p).clone(),
            Av::Tagged(_, x) => (**x).clone(),
            Av::Pair(t, a, d) => Av::Pair(t.pop(), a.clone(), d.clone()),
            Av::Array(t, n, e) => Av::Array(t.pop(), *n, e.clone()),
            Av::Closure(c, _) if self.prim_version(*c, tag).is_some() => {
                Av::Prim(self.prim_version(*c, tag).expect("checked"))
            }
            Av::Closure(c, env) => match self.untransform_code(*c, tag) {
                Some(c2) => Av::Closure(c2, env.clone()),
                None => Av::Bottom,
            },
            _ => Av::Bottom,
        })
    }

    /// The AD operators and the internal primitives of the prelude; `None` for the others.
    pub(crate) fn ad_prim(&mut self, p: Prim, a: &Av) -> R<Option<Av>> {
        let pair = |s: &mut Self, a: &Av| -> R<Option<(Av, Av)>> { Ok(two(&s.force(a)?)) };
        Ok(Some(match p {
            Prim::Zero => self.zero(a)?,
            Prim::Perturb => self.tag(a, Tag::Perturbation)?,
            Prim::Unperturb => self.untag(a, Tag::Perturbation)?,
            Prim::Sensitize => self.tag(a, Tag::Sensitivity)?,
            Prim::Unsensitize => self.untag(a, Tag::Sensitivity)?,
            Prim::Primal => self.split(a, false)?,
            Prim::Tangent => self.split(a, true)?,
            Prim::StarJ => self.tag(a, Tag::Reverse)?,
            Prim::StarJInverse => self.untag(a, Tag::Reverse)?,
            Prim::Bundle => match pair(self, a)? {
                Some((x, y)) => self.bundle(&x, &y)?,
                None => Av::Bottom,
            },
            Prim::Plus => match pair(self, a)? {
                Some((x, y)) => self.plus(&x, &y)?,
                None => Av::Bottom,
            },
            Prim::Accumulate => match pair(self, a)? {
                Some((x, y)) => self.accumulate(&x, &y)?,
                None => Av::Bottom,
            },
            Prim::ZeroSensR => Av::Zero(Rc::new(a.clone())),
            Prim::SZero => self.szero(a)?,
            Prim::ShallowPrimal => self.shallow_primal(a)?,
            Prim::BuildLength | Prim::IfoldCount => a.clone(),
            // Asked of the value as it is: a lazy zero is not computed first.
            Prim::IsLazyZero => match a {
                Av::Bottom => Av::Bottom,
                Av::Zero(_) => Av::Bool(Some(true)),
                Av::OrZero(..) | Av::Dyn(_) => Av::Bool(None),
                _ => Av::Bool(Some(false)),
            },
            // One level of a lazy zero computed, as the evaluator's (an array's); a boxed lazy
            // sensitivity stays boxed.
            Prim::Dense => match self.force(a)? {
                v @ (Av::Array(..) | Av::Dyn(_)) => v,
                _ => Av::Bottom,
            },
            Prim::ListToArrayRev => self.list_to_array(a)?,
            // A list of the array's length: boxed.
            Prim::ArrayToListRev => match self.force(a)? {
                Av::Array(..) | Av::Dyn(_) => a.boxed(&mut self.boxes),
                _ => Av::Bottom,
            },
            Prim::OneHotSens => {
                let parts = match self.force(a)? {
                    Av::Pair(_, x, rest) => match &*rest {
                        Av::Pair(_, _, sy) => Some(((*x).clone(), (**sy).clone())),
                        _ => None,
                    },
                    d @ Av::Dyn(_) => Some((d.clone(), d)),
                    _ => None,
                };
                match parts {
                    // A zero element sensitivity gives the array's lazy zero (the evaluator's).
                    Some((a @ Av::Array(..), Av::Zero(_))) => Av::Zero(Rc::new(a)),
                    Some((a @ Av::Array(..), Av::OrZero(_, sy))) => {
                        let one = Av::OneHot(Rc::new(a.clone()), sy);
                        Av::or_zero(&a, &one, &mut self.boxes)
                    }
                    Some((a @ Av::Array(..), sy)) => Av::OneHot(Rc::new(a), Rc::new(sy)),
                    Some((d @ Av::Dyn(_), sy)) => d.join(&sy, &mut self.boxes),
                    _ => Av::Bottom,
                }
            }
            _ => return Ok(None),
        }))
    }
}

impl Analysis<'_> {
    /// `%list->array-rev`: the list a `build` loop accumulated, as an array with its tags
    /// (and its length, where the list is known to its end).
    fn list_to_array(&mut self, l: &Av) -> R<Av> {
        let tags = self.tags_of(l);
        let mut elem = Av::Bottom;
        let mut rest = self.force(l)?;
        let mut len = Some(0);
        loop {
            match rest {
                Av::Pair(t, x, d) if t == tags => {
                    elem = elem.join(&x, &mut self.boxes);
                    len = len.map(|n| n + 1);
                    rest = self.force(&d)?;
                }
                Av::Dyn(_) if elem == Av::Bottom && !matches!(l, Av::Pair(..)) => {
                    return Ok(rest.clone());
                }
                Av::Dyn(_) => {
                    elem = elem.join(&rest, &mut self.boxes);
                    len = None;
                    break;
                }
                end => {
                    if end != self.lift(Av::Nil, tags)? {
                        len = None;
                    }
                    break;
                }
            }
        }
        Ok(Av::array(tags, len, elem))
    }
}

/// A part of an `Av::Sum` that is there (not the lazy zero).
fn sum_part(v: &Av) -> &Av {
    match v {
        Av::OrZero(_, x) => x,
        _ => v,
    }
}

/// A bundle of two one-hot sensitivities (a primal and a tangent), which `bundle` keeps as it
/// is (`Av::Bundle` of them: a forward array sensitivity, zero but at one index of each).
pub fn is_onehot_bundle(p: &Av, t: &Av) -> bool {
    matches!(p, Av::OneHot(..))
        && matches!(t, Av::Tagged(Tag::Perturbation, x) if matches!(**x, Av::OneHot(..)))
}

/// Can `t` (untagged) be the tangent of the scalar `p`? A boxed part may be anything, so it
/// can (the compiled code checks it at run time, as the evaluator does).
fn same_scalar_shape(p: &Av, t: &Av) -> bool {
    match (p, t) {
        (Av::Dyn(_), _) | (_, Av::Dyn(_)) => true,
        (Av::Real(_), Av::Real(_)) | (Av::Nil, Av::Nil) => true,
        (Av::Bool(x), Av::Bool(y)) => match (x, y) {
            (Some(x), Some(y)) => x == y,
            _ => true,
        },
        (Av::Bundle(a, b), Av::Bundle(x, y)) => same_scalar_shape(a, x) && same_scalar_shape(b, y),
        (Av::Tagged(t, a), Av::Tagged(u, x)) => t == u && same_scalar_shape(a, x),
        (Av::Prim(x), Av::Prim(y)) => x == y,
        _ => false,
    }
}
