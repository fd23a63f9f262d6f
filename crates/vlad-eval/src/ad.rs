//! First-class AD operators on values (paper 001 §4.1 for forward mode).
//!
//! Every operator is a structural map over values. Scalars (reals, `()`, booleans, primitives,
//! and values already tagged) are wrapped; pairs carry the tag on the pair and map their
//! components; closures get a group of lambdas transformed by the Core -> Core tag transform
//! (`vlad_core::transform`) and an environment mapped slot by slot. A primitive is bundled into
//! its *forward version*, a closure over a lambda of the prelude below, written in VLAD; `primal`
//! and `tangent` turn such a closure back into the primitive.
//!
//! The maps are memoised on shared structure (a pair or closure reached twice is mapped once), so
//! an exponentially large tree with linear-size sharing costs linear time (paper 003 §4).

use crate::code::Group;
use crate::value::{Closure, Env, SensNode, Value};
use crate::{EvalError, Evaluator};
use std::collections::HashMap;
use std::rc::Rc;
use vlad_core::{ExprId, Prim, Span, Tag, Tags, Var};

/// Memo of one structural map, keyed by the address of shared structure.
#[derive(Default)]
struct Memo(HashMap<(usize, usize), Value, std::hash::BuildHasherDefault<AddrHasher>>);

impl Memo {
    fn get(&self, key: Option<(usize, usize)>) -> Option<Value> {
        key.and_then(|k| self.0.get(&k).cloned())
    }

    fn put(&mut self, key: Option<(usize, usize)>, r: &Value) {
        if let Some(k) = key {
            self.0.insert(k, r.clone());
        }
    }
}

/// A hasher for pairs of addresses: the memo is on the hot path of every AD operator, and
/// addresses need no protection against adversarial collisions.
#[derive(Default)]
struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 =
                (self.0.rotate_left(5) ^ u64::from(*b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = (self.0.rotate_left(5) ^ n as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// The memo key of a value: the address of its shared cell. A cell with one owner cannot be
/// reached twice in one traversal unless an ancestor is (and the ancestor's memo entry catches
/// that), so only cells with several owners are memoised: scalars and unshared pairs, the
/// common case in arithmetic, skip the table entirely.
fn addr(v: &Value) -> Option<usize> {
    fn shared<T>(rc: &Rc<T>) -> Option<usize> {
        (Rc::strong_count(rc) > 1).then_some(Rc::as_ptr(rc) as *const () as usize)
    }
    // A pair of scalars or a scalar bundle is cheaper to map twice than to look up.
    let aggregate = |v: &Value| matches!(v, Value::Pair(_) | Value::Closure(_));
    match v {
        Value::Pair(p) if aggregate(&p.car) || aggregate(&p.cdr) => shared(p),
        Value::Closure(c) if !c.env.0.is_empty() => shared(c),
        Value::Array(a) if !a.elems.is_empty() => shared(a),
        Value::SensArray(a) => shared(a),
        _ => None,
    }
}

/// Structural equality of first-order data (constant patterns).
pub fn equal_data(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Nil, Value::Nil) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Real(x), Value::Real(y)) => x == y,
        (Value::Pair(p), Value::Pair(q)) => {
            p.tags == q.tags && equal_data(&p.car, &q.car) && equal_data(&p.cdr, &q.cdr)
        }
        (Value::Bundle(p), Value::Bundle(q)) => {
            equal_data(&p.primal, &q.primal) && equal_data(&p.tangent, &q.tangent)
        }
        (Value::Tagged(p), Value::Tagged(q)) => p.tag == q.tag && equal_data(&p.value, &q.value),
        (Value::Array(p), Value::Array(q)) => {
            p.tags == q.tags
                && p.elems.len() == q.elems.len()
                && p.elems
                    .iter()
                    .zip(q.elems.iter())
                    .all(|(x, y)| equal_data(x, y))
        }
        _ => false,
    }
}

/// For printing: the primal and tangent of a forward-tagged pair, one level deep (closures are
/// printed opaquely, so they are passed through unchanged).
pub(crate) fn split_forward_shallow(v: &Value) -> (Value, Value) {
    match v {
        Value::Bundle(b) => (b.primal.clone(), b.tangent.clone()),
        Value::Pair(p) if p.tags.top() == Some(Tag::Forward) => {
            let (a1, a2) = split_forward_shallow(&p.car);
            let (d1, d2) = split_forward_shallow(&p.cdr);
            let rest = p.tags.pop();
            let pert = rest.push(Tag::Perturbation).unwrap_or(rest);
            (Value::pair(rest, a1, d1), Value::pair(pert, a2, d2))
        }
        Value::Array(a) if a.tags.top() == Some(Tag::Forward) => {
            let (ps, ts): (Vec<Value>, Vec<Value>) =
                a.elems.iter().map(split_forward_shallow).unzip();
            let rest = a.tags.pop();
            let pert = rest.push(Tag::Perturbation).unwrap_or(rest);
            (Value::array(rest, ps), Value::array(pert, ts))
        }
        _ => (v.clone(), v.clone()),
    }
}

/// For printing: a value with its outermost `tag` removed, one level deep.
pub(crate) fn untag_shallow(v: &Value, tag: Tag) -> Value {
    match v {
        Value::Tagged(t) if t.tag == tag => t.value.clone(),
        Value::Pair(p) if p.tags.top() == Some(tag) => Value::pair(
            p.tags.pop(),
            untag_shallow(&p.car, tag),
            untag_shallow(&p.cdr, tag),
        ),
        Value::Array(a) if a.tags.top() == Some(tag) => Value::array(
            a.tags.pop(),
            a.elems
                .iter()
                .map(|x| untag_shallow(x, tag))
                .collect::<Vec<_>>(),
        ),
        _ => v.clone(),
    }
}

fn shape_error(span: Span, op: &str, a: &Value, b: &Value) -> EvalError {
    EvalError::new(
        span,
        format!(
            "{op}: the values do not have the same shape: {} and {}",
            a.describe(),
            b.describe()
        ),
    )
}

/// The prelude's compiled forward versions of primitives.
pub struct Prelude {
    forward: HashMap<Prim, Value>,
    reverse: HashMap<Prim, Value>,
    /// The untransformed closures of the primitives defined in VLAD (`build`, `ifold`).
    base: HashMap<Prim, Value>,
}

impl Evaluator {
    /// The frame shared by the memoised unary maps (`zero`, tagging, untagging, `primal` and
    /// `tangent`, sensitivity zeros): a lazy zero is forced one level, a shared cell already
    /// mapped is looked up, and the result of `one_level` is recorded.
    fn memoised(
        &mut self,
        v: &Value,
        span: Span,
        memo: &mut Memo,
        one_level: impl FnOnce(&mut Self, &Value, &mut Memo) -> Result<Value, EvalError>,
    ) -> Result<Value, EvalError> {
        if let Value::Zero(z) = v {
            let m = self.force_zero(&z.of, span)?;
            return one_level(self, &m, memo);
        }
        if let Value::SensArray(a) = v {
            let m = self.force_sens(a, span)?;
            return one_level(self, &m, memo);
        }
        let key = addr(v).map(|a| (a, 0));
        if let Some(r) = memo.get(key) {
            return Ok(r);
        }
        let r = one_level(self, v, memo)?;
        memo.put(key, &r);
        Ok(r)
    }

    fn err<T>(&self, span: Span, m: impl Into<String>) -> Result<T, EvalError> {
        Err(EvalError::new(span, m))
    }

    /// Lifts a constant or primitive in transformed code through its tags (innermost first):
    /// `forward` by `j*`, the others by tagging.
    pub(crate) fn lift(&mut self, v: Value, tags: Tags, span: Span) -> Result<Value, EvalError> {
        let mut v = v;
        let ts: Vec<Tag> = tags.iter().collect();
        for tag in ts.into_iter().rev() {
            v = match tag {
                Tag::Forward => {
                    let z = self.zero(&v, span)?;
                    let t = self.tag_value(&z, Tag::Perturbation, span)?;
                    self.bundle(&v, &t, span)?
                }
                other => self.tag_value(&v, other, span)?,
            };
        }
        Ok(v)
    }

    /// The prelude's lambdas (`vlad_prelude::load`), shared with the flow analysis: loaded into
    /// the arena on first use.
    pub fn prelude_ids(&mut self) -> Result<Rc<vlad_core::Prelude>, EvalError> {
        if let Some(p) = &self.prelude_ids {
            return Ok(p.clone());
        }
        let p = Rc::new(
            vlad_prelude::load(&mut self.arena).map_err(|m| EvalError::new(Span::NONE, m))?,
        );
        self.prelude_ids = Some(p.clone());
        Ok(p)
    }

    /// The prelude's closures: one of no free variables over each lambda.
    fn prelude(&mut self) -> Result<Rc<Prelude>, EvalError> {
        if let Some(p) = &self.prelude {
            return Ok(p.clone());
        }
        let ids = self.prelude_ids()?;
        let mut forward = HashMap::new();
        let mut reverse = HashMap::new();
        for (prim, lam) in &ids.forward {
            if !ids.base.contains_key(prim) {
                forward.insert(*prim, self.prelude_closure(*lam)?);
            }
        }
        for (prim, lam) in &ids.reverse {
            if !ids.base.contains_key(prim) {
                reverse.insert(*prim, self.prelude_closure(*lam)?);
            }
        }
        // The versions of the primitives defined in VLAD come second: compiling transformed
        // code lifts the primitives it calls, which needs the prelude made so far.
        self.prelude = Some(Rc::new(Prelude {
            forward: forward.clone(),
            reverse: reverse.clone(),
            base: HashMap::new(),
        }));
        let mut base = HashMap::new();
        for (prim, lam) in &ids.base {
            base.insert(*prim, self.prelude_closure(*lam)?);
            forward.insert(*prim, self.prelude_closure(ids.forward[prim])?);
            reverse.insert(*prim, self.prelude_closure(ids.reverse[prim])?);
        }
        let p = Rc::new(Prelude {
            forward,
            reverse,
            base,
        });
        self.prelude = Some(p.clone());
        Ok(p)
    }

    /// The untransformed closure of a primitive defined in VLAD (`build`, `ifold`).
    pub(crate) fn array_definition(&mut self, p: Prim) -> Result<Value, EvalError> {
        let prelude = self.prelude()?;
        Ok(prelude.base[&p].clone())
    }

    /// A closure of no free variables over the lambda `lam`.
    fn prelude_closure(&mut self, lam: ExprId) -> Result<Value, EvalError> {
        self.make_closure(&[], &[lam], 0, vec![])
    }

    /// If `c` is the `tag` version of a primitive, that primitive.
    fn prim_version(&self, c: &Closure, tag: Tag) -> Option<Prim> {
        match c.group.prim_version {
            Some((t, p)) if t == tag && c.group.lambdas.len() == 1 => Some(p),
            _ => None,
        }
    }

    /// The group whose code is `g`'s transformed by `tag`.
    fn transform_group(&mut self, g: &Group, tag: Tag, span: Span) -> Result<Rc<Group>, EvalError> {
        let mut lambdas = Vec::with_capacity(g.lambdas.len());
        for l in &g.lambdas {
            let t = if tag == Tag::Reverse {
                self.arena.reverse_transform(*l, &g.names, &g.free)
            } else {
                self.arena.transform(*l, tag)
            };
            lambdas.push(t.map_err(|e| EvalError::new(span, e.to_string()))?);
        }
        let names: Vec<Var> = g
            .names
            .iter()
            .map(|v| Var {
                id: v.id,
                tags: v.tags.push(tag).expect("checked by transform"),
            })
            .collect();
        let id = self.group(&names, &lambdas)?;
        Ok(self.code.groups[id as usize].clone())
    }

    /// The group whose code `g`'s is the `tag` transform of, if any.
    fn untransform_group(&mut self, g: &Group, tag: Tag) -> Result<Option<Rc<Group>>, EvalError> {
        let mut lambdas = Vec::with_capacity(g.lambdas.len());
        for l in &g.lambdas {
            match self.arena.untransform(*l, tag) {
                Some(o) => lambdas.push(o),
                None => return Ok(None),
            }
        }
        let names: Vec<Var> = g
            .names
            .iter()
            .map(|v| Var {
                id: v.id,
                tags: v.tags.pop(),
            })
            .collect();
        let id = self.group(&names, &lambdas)?;
        Ok(Some(self.code.groups[id as usize].clone()))
    }

    /// A closure's environment mapped slot by slot.
    fn map_env(
        &mut self,
        c: &Closure,
        mut f: impl FnMut(&mut Self, &Value) -> Result<Value, EvalError>,
    ) -> Result<Vec<Value>, EvalError> {
        c.env.0.iter().map(|x| f(self, x)).collect()
    }

    /// An array's elements mapped one by one.
    fn map_elems(
        &mut self,
        a: &crate::value::Array,
        mut f: impl FnMut(&mut Self, &Value) -> Result<Value, EvalError>,
    ) -> Result<Vec<Value>, EvalError> {
        a.elems.iter().map(|x| f(self, x)).collect()
    }

    pub(crate) fn closure(group: Rc<Group>, index: u32, env: Vec<Value>) -> Value {
        Value::Closure(Rc::new(Closure {
            group,
            index,
            env: Rc::new(Env(env)),
        }))
    }

    /// `zero`: the same shape with every real 0.
    pub fn zero(&mut self, v: &Value, span: Span) -> Result<Value, EvalError> {
        // Scalars need no memo (the memo exists for shared aggregates).
        match v {
            Value::Real(_) => return Ok(Value::Real(0.0)),
            Value::Nil | Value::Bool(_) | Value::Prim(_) => return Ok(v.clone()),
            _ => {}
        }
        self.zero_m(v, span, &mut Memo::default())
    }

    fn zero_m(&mut self, v: &Value, span: Span, memo: &mut Memo) -> Result<Value, EvalError> {
        self.memoised(v, span, memo, |this, v, memo| {
            Ok(match v {
                Value::Real(_) => Value::Real(0.0),
                Value::Nil | Value::Bool(_) | Value::Prim(_) => v.clone(),
                Value::Pair(p) => {
                    let a = this.zero_m(&p.car, span, memo)?;
                    let d = this.zero_m(&p.cdr, span, memo)?;
                    Value::pair(p.tags, a, d)
                }
                Value::Closure(c) => {
                    let env = this.map_env(c, |this, x| this.zero_m(x, span, memo))?;
                    Self::closure(c.group.clone(), c.index, env)
                }
                Value::Bundle(b) => {
                    let p = this.zero_m(&b.primal, span, memo)?;
                    let t = this.zero_m(&b.tangent, span, memo)?;
                    Value::bundle(p, t)
                }
                Value::Tagged(t) => Value::tagged(t.tag, this.zero_m(&t.value, span, memo)?),
                Value::Array(a) => {
                    let elems = this.map_elems(a, |this, x| this.zero_m(x, span, memo))?;
                    Value::array(a.tags, elems)
                }
                Value::Zero(_) | Value::SensArray(_) => unreachable!("forced above"),
            })
        })
    }

    /// `perturb` / `sensitize`: tag a value (closures get transformed code).
    pub fn tag_value(&mut self, v: &Value, tag: Tag, span: Span) -> Result<Value, EvalError> {
        if let Value::Real(_) | Value::Nil | Value::Bool(_) | Value::Bundle(_) = v {
            return Ok(Value::tagged(tag, v.clone()));
        }
        self.tag_m(v, tag, span, &mut Memo::default())
    }

    fn tag_m(
        &mut self,
        v: &Value,
        tag: Tag,
        span: Span,
        memo: &mut Memo,
    ) -> Result<Value, EvalError> {
        if v.tags().depth() >= vlad_core::tags::MAX_TAG_DEPTH {
            return self.err(
                span,
                vlad_core::transform::TransformError::TooDeep.to_string(),
            );
        }
        self.memoised(v, span, memo, |this, v, memo| {
            Ok(match v {
                Value::Pair(p) => {
                    let a = this.tag_m(&p.car, tag, span, memo)?;
                    let d = this.tag_m(&p.cdr, tag, span, memo)?;
                    Value::pair(p.tags.push(tag).expect("depth checked"), a, d)
                }
                Value::Array(a) => {
                    let elems = this.map_elems(a, |this, x| this.tag_m(x, tag, span, memo))?;
                    Value::array(a.tags.push(tag).expect("depth checked"), elems)
                }
                Value::Closure(c) => {
                    let g = this.transform_group(&c.group, tag, span)?;
                    let env = this.map_env(c, |this, x| this.tag_m(x, tag, span, memo))?;
                    Self::closure(g, c.index, env)
                }
                Value::Prim(q) if tag == Tag::Reverse => {
                    let prelude = this.prelude()?;
                    match prelude.reverse.get(q) {
                        Some(f) => f.clone(),
                        None => {
                            return this.err(span, format!("`{}` has no reverse version", q.name()))
                        }
                    }
                }
                _ => Value::tagged(tag, v.clone()),
            })
        })
    }

    /// `unperturb` / `unsensitize`: remove the outermost `tag`.
    pub fn untag_value(&mut self, v: &Value, tag: Tag, span: Span) -> Result<Value, EvalError> {
        if let Value::Tagged(t) = v {
            if t.tag == tag {
                return Ok(t.value.clone());
            }
        }
        self.untag_m(v, tag, span, &mut Memo::default())
    }

    fn untag_m(
        &mut self,
        v: &Value,
        tag: Tag,
        span: Span,
        memo: &mut Memo,
    ) -> Result<Value, EvalError> {
        self.memoised(v, span, memo, |this, v, memo| {
            Ok(match v {
                Value::Tagged(t) if t.tag == tag => t.value.clone(),
                Value::Pair(p) if p.tags.top() == Some(tag) => {
                    let a = this.untag_m(&p.car, tag, span, memo)?;
                    let d = this.untag_m(&p.cdr, tag, span, memo)?;
                    Value::pair(p.tags.pop(), a, d)
                }
                Value::Array(a) if a.tags.top() == Some(tag) => {
                    let elems = this.map_elems(a, |this, x| this.untag_m(x, tag, span, memo))?;
                    Value::array(a.tags.pop(), elems)
                }
                Value::Closure(c)
                    if tag == Tag::Reverse && this.prim_version(c, Tag::Reverse).is_some() =>
                {
                    Value::Prim(this.prim_version(c, Tag::Reverse).expect("checked"))
                }
                Value::Closure(c) if c.group.tags.top() == Some(tag) => {
                    let Some(g) = this.untransform_group(&c.group, tag)? else {
                        return this.err(
                            span,
                            format!("cannot remove the {} tag of this procedure", tag.name()),
                        );
                    };
                    let env = this.map_env(c, |this, x| this.untag_m(x, tag, span, memo))?;
                    Self::closure(g, c.index, env)
                }
                _ => {
                    let op = match tag {
                        Tag::Perturbation => "unperturb",
                        Tag::Sensitivity => "unsensitize",
                        Tag::Reverse => "*j-inverse",
                        Tag::Forward => "primal",
                    };
                    return this.err(
                        span,
                        format!(
                            "{op}: expected a {} value, got {}",
                            tag.name(),
                            v.describe()
                        ),
                    );
                }
            })
        })
    }

    /// `bundle`: a forward value from a primal and a perturbation of the same shape.
    pub fn bundle(&mut self, p: &Value, t: &Value, span: Span) -> Result<Value, EvalError> {
        if let (Value::Real(_), Value::Tagged(x)) = (p, t) {
            if x.tag == Tag::Perturbation && matches!(x.value, Value::Real(_)) {
                return Ok(Value::bundle(p.clone(), t.clone()));
            }
        }
        self.bundle_m(p, t, span, &mut Memo::default())
    }

    fn bundle_m(
        &mut self,
        p: &Value,
        t: &Value,
        span: Span,
        memo: &mut Memo,
    ) -> Result<Value, EvalError> {
        if let Value::Zero(z) = p {
            let m = self.force_zero(&z.of, span)?;
            return self.bundle_m(&m, t, span, memo);
        }
        if let Value::Zero(z) = t {
            let m = self.force_zero(&z.of, span)?;
            return self.bundle_m(p, &m, span, memo);
        }
        if let Value::SensArray(a) = p {
            let m = self.force_sens(a, span)?;
            return self.bundle_m(&m, t, span, memo);
        }
        if let Value::SensArray(a) = t {
            let m = self.force_sens(a, span)?;
            return self.bundle_m(p, &m, span, memo);
        }
        let key = match (addr(p), addr(t)) {
            (Some(a), Some(b)) => Some((a, b)),
            _ => None,
        };
        if let Some(r) = memo.get(key) {
            return Ok(r);
        }
        let inner = match t {
            Value::Tagged(x) if x.tag == Tag::Perturbation => Some(&x.value),
            _ => None,
        };
        let r = match p {
            Value::Zero(_) | Value::SensArray(_) => unreachable!("forced above"),
            Value::Prim(q) => match inner {
                Some(Value::Prim(q2)) if q2 == q => {
                    let prelude = self.prelude()?;
                    match prelude.forward.get(q) {
                        Some(f) => f.clone(),
                        None => {
                            return self.err(span, format!("`{}` has no forward version", q.name()))
                        }
                    }
                }
                _ => return Err(shape_error(span, "bundle", p, t)),
            },
            Value::Real(_) | Value::Nil | Value::Bool(_) | Value::Bundle(_) | Value::Tagged(_) => {
                match inner {
                    Some(x) if same_scalar_shape(p, x) => Value::bundle(p.clone(), t.clone()),
                    _ => return Err(shape_error(span, "bundle", p, t)),
                }
            }
            Value::Pair(pp) => match t {
                Value::Pair(tp) if Some(tp.tags) == pp.tags.push(Tag::Perturbation) => {
                    let a = self.bundle_m(&pp.car, &tp.car, span, memo)?;
                    let d = self.bundle_m(&pp.cdr, &tp.cdr, span, memo)?;
                    let tags = pp
                        .tags
                        .push(Tag::Forward)
                        .ok_or_else(|| EvalError::new(span, "AD nesting too deep"))?;
                    Value::pair(tags, a, d)
                }
                _ => return Err(shape_error(span, "bundle", p, t)),
            },
            Value::Array(pa) => match t {
                Value::Array(ta) if Some(ta.tags) == pa.tags.push(Tag::Perturbation) => {
                    check_lengths(span, "bundle", pa.elems.len(), ta.elems.len())?;
                    let mut elems = Vec::with_capacity(pa.elems.len());
                    for (x, y) in pa.elems.iter().zip(ta.elems.iter()) {
                        elems.push(self.bundle_m(x, y, span, memo)?);
                    }
                    let tags = pa
                        .tags
                        .push(Tag::Forward)
                        .ok_or_else(|| EvalError::new(span, "AD nesting too deep"))?;
                    Value::array(tags, elems)
                }
                _ => return Err(shape_error(span, "bundle", p, t)),
            },
            Value::Closure(pc) => match t {
                Value::Closure(tc) if tc.index == pc.index => {
                    let pg = self.transform_group(&pc.group, Tag::Perturbation, span)?;
                    if pg.id != tc.group.id {
                        return Err(shape_error(span, "bundle", p, t));
                    }
                    let fg = self.transform_group(&pc.group, Tag::Forward, span)?;
                    let mut env = Vec::with_capacity(pc.env.0.len());
                    for (x, y) in pc.env.0.iter().zip(tc.env.0.iter()) {
                        env.push(self.bundle_m(x, y, span, memo)?);
                    }
                    Self::closure(fg, pc.index, env)
                }
                _ => return Err(shape_error(span, "bundle", p, t)),
            },
        };
        memo.put(key, &r);
        Ok(r)
    }

    /// `primal` (`want_tangent == false`) or `tangent` of a forward value.
    pub fn split_forward(
        &mut self,
        v: &Value,
        want_tangent: bool,
        span: Span,
    ) -> Result<Value, EvalError> {
        if let Value::Bundle(b) = v {
            return Ok(if want_tangent {
                b.tangent.clone()
            } else {
                b.primal.clone()
            });
        }
        self.split_m(v, want_tangent, span, &mut Memo::default())
    }

    fn split_m(
        &mut self,
        v: &Value,
        tangent: bool,
        span: Span,
        memo: &mut Memo,
    ) -> Result<Value, EvalError> {
        self.memoised(v, span, memo, |this, v, memo| {
            Ok(match v {
                Value::Bundle(b) => {
                    if tangent {
                        b.tangent.clone()
                    } else {
                        b.primal.clone()
                    }
                }
                Value::Pair(p) if p.tags.top() == Some(Tag::Forward) => {
                    let a = this.split_m(&p.car, tangent, span, memo)?;
                    let d = this.split_m(&p.cdr, tangent, span, memo)?;
                    let rest = p.tags.pop();
                    let tags = if tangent {
                        rest.push(Tag::Perturbation).expect("same depth")
                    } else {
                        rest
                    };
                    Value::pair(tags, a, d)
                }
                Value::Array(a) if a.tags.top() == Some(Tag::Forward) => {
                    let elems =
                        this.map_elems(a, |this, x| this.split_m(x, tangent, span, memo))?;
                    let rest = a.tags.pop();
                    let tags = if tangent {
                        rest.push(Tag::Perturbation).expect("same depth")
                    } else {
                        rest
                    };
                    Value::array(tags, elems)
                }
                Value::Closure(c) if this.prim_version(c, Tag::Forward).is_some() => {
                    let q = Value::Prim(this.prim_version(c, Tag::Forward).expect("checked"));
                    if tangent {
                        Value::tagged(Tag::Perturbation, q)
                    } else {
                        q
                    }
                }
                Value::Closure(c) if c.group.tags.top() == Some(Tag::Forward) => {
                    let Some(g) = this.untransform_group(&c.group, Tag::Forward)? else {
                        return this.err(span, "cannot take this procedure apart");
                    };
                    let g = if tangent {
                        this.transform_group(&g, Tag::Perturbation, span)?
                    } else {
                        g
                    };
                    let env = this.map_env(c, |this, x| this.split_m(x, tangent, span, memo))?;
                    Self::closure(g, c.index, env)
                }
                _ => {
                    let op = if tangent { "tangent" } else { "primal" };
                    return this.err(
                        span,
                        format!("{op}: expected a forward value, got {}", v.describe()),
                    );
                }
            })
        })
    }

    /// `plus`: point-wise sum of two values of the same shape.
    pub fn plus(&mut self, a: &Value, b: &Value, span: Span) -> Result<Value, EvalError> {
        self.plus_m(a, b, span, &mut Memo::default())
    }

    fn plus_m(
        &mut self,
        a: &Value,
        b: &Value,
        span: Span,
        memo: &mut Memo,
    ) -> Result<Value, EvalError> {
        // A lazy zero is the identity of plus: this is what keeps reverse mode linear.
        if let Value::Zero(_) = a {
            return Ok(b.clone());
        }
        if let Value::Zero(_) = b {
            return Ok(a.clone());
        }
        // A sum involving a lazy array sensitivity stays lazy: O(1) here, O(n + contributions)
        // once, when the sum is looked at.
        if matches!(a, Value::SensArray(_)) || matches!(b, Value::SensArray(_)) {
            return match (array_shape(a), array_shape(b)) {
                (Some((ta, na)), Some((tb, nb))) if ta == tb => {
                    check_lengths(span, "plus", na, nb)?;
                    Ok(Value::sens_array(
                        ta,
                        na,
                        SensNode::Sum(a.clone(), b.clone()),
                    ))
                }
                _ => Err(shape_error(span, "plus", a, b)),
            };
        }
        let key = match (addr(a), addr(b)) {
            (Some(x), Some(y)) => Some((x, y)),
            _ => None,
        };
        if let Some(r) = memo.get(key) {
            return Ok(r);
        }
        let r = match (a, b) {
            (Value::Array(p), Value::Array(q)) if p.tags == q.tags => {
                check_lengths(span, "plus", p.elems.len(), q.elems.len())?;
                let mut elems = Vec::with_capacity(p.elems.len());
                for (x, y) in p.elems.iter().zip(q.elems.iter()) {
                    elems.push(self.plus_m(x, y, span, memo)?);
                }
                Value::array(p.tags, elems)
            }
            (Value::Real(x), Value::Real(y)) => Value::Real(x + y),
            (Value::Nil, Value::Nil) => Value::Nil,
            (Value::Bool(x), Value::Bool(y)) if x == y => a.clone(),
            (Value::Prim(x), Value::Prim(y)) if x == y => a.clone(),
            (Value::Pair(p), Value::Pair(q)) if p.tags == q.tags => {
                let x = self.plus_m(&p.car, &q.car, span, memo)?;
                let y = self.plus_m(&p.cdr, &q.cdr, span, memo)?;
                Value::pair(p.tags, x, y)
            }
            (Value::Tagged(p), Value::Tagged(q)) if p.tag == q.tag => {
                Value::tagged(p.tag, self.plus_m(&p.value, &q.value, span, memo)?)
            }
            (Value::Bundle(p), Value::Bundle(q)) => {
                let x = self.plus_m(&p.primal, &q.primal, span, memo)?;
                let y = self.plus_m(&p.tangent, &q.tangent, span, memo)?;
                Value::bundle(x, y)
            }
            (Value::Closure(p), Value::Closure(q))
                if p.group.id == q.group.id && p.index == q.index =>
            {
                let mut env = Vec::with_capacity(p.env.0.len());
                for (x, y) in p.env.0.iter().zip(q.env.0.iter()) {
                    env.push(self.plus_m(x, y, span, memo)?);
                }
                Self::closure(p.group.clone(), p.index, env)
            }
            _ => return Err(shape_error(span, "plus", a, b)),
        };
        memo.put(key, &r);
        Ok(r)
    }

    /// The zero sensitivity (before the sensitivity tag) matching a value: reals 0, a closure
    /// the list of its environment's zeros (in free-variable order, tagged like the closure), a
    /// primitive `()`. Sensitivities of closures are these lists, as in paper 003.
    pub fn szero(&mut self, v: &Value, span: Span) -> Result<Value, EvalError> {
        self.szero_m(v, span, &mut Memo::default())
    }

    fn szero_m(&mut self, v: &Value, span: Span, memo: &mut Memo) -> Result<Value, EvalError> {
        self.memoised(v, span, memo, |this, v, memo| {
            Ok(match v {
                Value::Real(_) => Value::Real(0.0),
                Value::Nil | Value::Bool(_) => v.clone(),
                Value::Prim(_) => Value::Nil,
                Value::Pair(p) => {
                    let a = this.szero_m(&p.car, span, memo)?;
                    let d = this.szero_m(&p.cdr, span, memo)?;
                    Value::pair(p.tags, a, d)
                }
                Value::Closure(c) => {
                    let tags = c.group.tags;
                    let mut acc = this.lift(Value::Nil, tags, span)?;
                    for x in c.env.0.iter().rev() {
                        let z = this.szero_m(x, span, memo)?;
                        acc = Value::pair(tags, z, acc);
                    }
                    acc
                }
                Value::Bundle(b) => {
                    let p = this.szero_m(&b.primal, span, memo)?;
                    let t = this.szero_m(&b.tangent, span, memo)?;
                    Value::bundle(p, t)
                }
                Value::Tagged(t) => Value::tagged(t.tag, this.szero_m(&t.value, span, memo)?),
                Value::Array(a) => {
                    let elems = this.map_elems(a, |this, x| this.szero_m(x, span, memo))?;
                    Value::array(a.tags, elems)
                }
                Value::Zero(_) | Value::SensArray(_) => unreachable!("forced by memoised"),
            })
        })
    }

    /// One level of a lazy zero sensitivity of `*j-inverse of`: pairs and closures get lazy
    /// components, scalars are computed.
    pub(crate) fn force_zero(&mut self, of: &Value, span: Span) -> Result<Value, EvalError> {
        match of {
            Value::Pair(p) if p.tags.top() == Some(Tag::Reverse) => {
                let tags = p.tags.pop().push(Tag::Sensitivity).expect("same depth");
                Ok(Value::pair(
                    tags,
                    Value::zero_of(p.car.clone()),
                    Value::zero_of(p.cdr.clone()),
                ))
            }
            Value::Array(a) if a.tags.top() == Some(Tag::Reverse) => {
                let tags = a.tags.pop().push(Tag::Sensitivity).expect("same depth");
                let elems: Vec<Value> = a.elems.iter().map(|x| Value::zero_of(x.clone())).collect();
                Ok(Value::array(tags, elems))
            }
            Value::Closure(c)
                if c.group.tags.top() == Some(Tag::Reverse)
                    && self.prim_version(c, Tag::Reverse).is_none() =>
            {
                let base = c.group.tags.pop();
                let tags = base.push(Tag::Sensitivity).expect("same depth");
                let nil = self.lift(Value::Nil, base, span)?;
                let mut acc = self.tag_value(&nil, Tag::Sensitivity, span)?;
                for x in c.env.0.iter().rev() {
                    acc = Value::pair(tags, Value::zero_of(x.clone()), acc);
                }
                Ok(acc)
            }
            _ => {
                let p = self.untag_value(of, Tag::Reverse, span)?;
                let z = self.szero(&p, span)?;
                self.tag_value(&z, Tag::Sensitivity, span)
            }
        }
    }

    /// The primal of a forward value or `*j-inverse` of a reverse one, at the top level only
    /// (components keep their tags): enough for a type predicate, and O(1).
    fn shallow_primal(&mut self, v: &Value, span: Span) -> Result<Value, EvalError> {
        let Some(tag) = v.tags().top() else {
            return self.err(
                span,
                format!("expected a forward or reverse value, got {}", v.describe()),
            );
        };
        Ok(match v {
            Value::Bundle(b) => b.primal.clone(),
            Value::Tagged(t) => t.value.clone(),
            Value::Pair(p) => Value::pair(p.tags.pop(), p.car.clone(), p.cdr.clone()),
            Value::Array(a) => Value::Array(Rc::new(crate::value::Array {
                tags: a.tags.pop(),
                elems: a.elems.clone(),
            })),
            Value::SensArray(a) => {
                let m = self.force_sens(a, span)?;
                self.shallow_primal(&m, span)?
            }
            Value::Closure(c) if self.prim_version(c, tag).is_some() => {
                Value::Prim(self.prim_version(c, tag).expect("checked"))
            }
            Value::Closure(c) => match self.untransform_group(&c.group, tag)? {
                Some(g) => Value::Closure(Rc::new(Closure {
                    group: g,
                    index: c.index,
                    env: c.env.clone(),
                })),
                None => return self.err(span, "cannot take this procedure apart"),
            },
            Value::Zero(z) => {
                let m = self.force_zero(&z.of, span)?;
                self.shallow_primal(&m, span)?
            }
            _ => {
                return self.err(
                    span,
                    format!("expected a forward or reverse value, got {}", v.describe()),
                )
            }
        })
    }

    /// The value with every lazy zero inside it computed (for printing and comparing).
    pub fn materialize(&mut self, v: &Value, span: Span) -> Result<Value, EvalError> {
        Ok(match v {
            Value::Zero(z) => {
                let m = self.force_zero(&z.of, span)?;
                self.materialize(&m, span)?
            }
            Value::Pair(p) if has_zero(v) => {
                let a = self.materialize(&p.car, span)?;
                let d = self.materialize(&p.cdr, span)?;
                Value::pair(p.tags, a, d)
            }
            Value::Bundle(b) if has_zero(v) => {
                let p = self.materialize(&b.primal, span)?;
                let t = self.materialize(&b.tangent, span)?;
                Value::bundle(p, t)
            }
            Value::Tagged(t) if has_zero(v) => {
                Value::tagged(t.tag, self.materialize(&t.value, span)?)
            }
            Value::SensArray(a) => {
                let m = self.force_sens(a, span)?;
                self.materialize(&m, span)?
            }
            Value::Array(a) if has_zero(v) => {
                let elems = self.map_elems(a, |this, x| this.materialize(x, span))?;
                Value::array(a.tags, elems)
            }
            _ => v.clone(),
        })
    }

    /// The printed form of a value (lazy zeros computed).
    pub fn render(&mut self, v: &Value) -> String {
        match self.materialize(v, Span::NONE) {
            Ok(m) => crate::print::to_string(&m),
            Err(_) => crate::print::to_string(v),
        }
    }

    pub(crate) fn apply_ad_prim(
        &mut self,
        p: Prim,
        arg: Value,
        span: Span,
    ) -> Result<Value, EvalError> {
        let pair = |name: &str| -> Result<(Value, Value), EvalError> {
            match crate::prims::two(&arg) {
                Some((a, b)) => Ok((a.clone(), b.clone())),
                None => Err(EvalError::new(
                    span,
                    format!("`{name}` takes two arguments, got {}", arg.describe()),
                )),
            }
        };
        match p {
            Prim::Zero => self.zero(&arg, span),
            Prim::Perturb => self.tag_value(&arg, Tag::Perturbation, span),
            Prim::Unperturb => self.untag_value(&arg, Tag::Perturbation, span),
            Prim::Sensitize => self.tag_value(&arg, Tag::Sensitivity, span),
            Prim::Unsensitize => self.untag_value(&arg, Tag::Sensitivity, span),
            Prim::Primal => self.split_forward(&arg, false, span),
            Prim::Tangent => self.split_forward(&arg, true, span),
            Prim::Bundle => {
                let (a, b) = pair("bundle")?;
                self.bundle(&a, &b, span)
            }
            // `%accumulate` is `plus` (compiled code adds into its first argument's arrays in
            // place; the value is the same).
            Prim::Plus | Prim::Accumulate => {
                let (a, b) = pair("plus")?;
                self.plus(&a, &b, span)
            }
            Prim::StarJ => self.tag_value(&arg, Tag::Reverse, span),
            Prim::StarJInverse => self.untag_value(&arg, Tag::Reverse, span),
            Prim::ZeroSensR => Ok(Value::zero_of(arg)),
            Prim::SZero => self.szero(&arg, span),
            Prim::ShallowPrimal => self.shallow_primal(&arg, span),
            _ => unreachable!("every primitive is implemented"),
        }
    }
}

/// Does `v` contain a lazy zero (outside closures)?
fn has_zero(v: &Value) -> bool {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Zero(_) | Value::SensArray(_) => return true,
            Value::Pair(p) => {
                stack.push(&p.car);
                stack.push(&p.cdr);
            }
            Value::Array(a) => stack.extend(a.elems.iter()),
            Value::Bundle(b) => {
                stack.push(&b.primal);
                stack.push(&b.tangent);
            }
            Value::Tagged(t) => stack.push(&t.value),
            _ => {}
        }
    }
    false
}

/// Can `t` (untagged) be the tangent of the scalar `p`? Reals pair with reals; discrete values
/// with the same kind; tagged scalars with tagged scalars of the same shape.
fn same_scalar_shape(p: &Value, t: &Value) -> bool {
    match (p, t) {
        (Value::Real(_), Value::Real(_)) | (Value::Nil, Value::Nil) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Bundle(x), Value::Bundle(y)) => {
            same_scalar_shape(&x.primal, &y.primal) && same_scalar_shape(&x.tangent, &y.tangent)
        }
        (Value::Tagged(x), Value::Tagged(y)) => {
            x.tag == y.tag && same_scalar_shape(&x.value, &y.value)
        }
        (Value::Prim(x), Value::Prim(y)) => x == y,
        _ => false,
    }
}

/// The AD operators (including the internal ones), which handle lazy zeros themselves.
pub(crate) fn is_ad_prim(p: Prim) -> bool {
    vlad_prelude::REARRANGING.contains(&p)
}

/// Forward arithmetic on plain bundles of reals, natively: exactly the computation of the
/// prelude's forward version (same operations in the same order), without interpreting it.
/// `None` for anything else (nested bundles, aggregates), which runs the prelude code.
pub(crate) fn fast_forward(p: Prim, arg: &Value) -> Option<Value> {
    fn dual(v: &Value) -> Option<(f64, f64)> {
        let Value::Bundle(b) = v else { return None };
        let (Value::Real(x), Value::Tagged(t)) = (&b.primal, &b.tangent) else {
            return None;
        };
        match (t.tag, &t.value) {
            (Tag::Perturbation, Value::Real(d)) => Some((*x, *d)),
            _ => None,
        }
    }
    let out = |y: f64, dy: f64| {
        Some(Value::bundle(
            Value::Real(y),
            Value::tagged(Tag::Perturbation, Value::Real(dy)),
        ))
    };
    let boolean = |r: bool| {
        Some(Value::bundle(
            Value::Bool(r),
            Value::tagged(Tag::Perturbation, Value::Bool(r)),
        ))
    };
    if p.is_binary_real() || p.is_comparison() {
        let Value::Pair(pair) = arg else { return None };
        if pair.tags != Tags::EMPTY.push(Tag::Forward)? {
            return None;
        }
        let ((a, da), (b, db)) = (dual(&pair.car)?, dual(&pair.cdr)?);
        if p.is_comparison() {
            return boolean(p.compare(a, b));
        }
        let (y, dy) = vlad_prelude::derivatives::forward_dual(p, &[(a, da), (b, db)])?;
        return out(y, dy);
    }
    let (x, d) = dual(arg)?;
    match p {
        Prim::IsZero => boolean(x == 0.0),
        Prim::IsPositive => boolean(x > 0.0),
        Prim::IsNegative => boolean(x < 0.0),
        _ => {
            let (y, dy) = vlad_prelude::derivatives::forward_dual(p, &[(x, d)])?;
            out(y, dy)
        }
    }
}

/// Arrays combined point-wise must have the same length: never truncate silently.
fn check_lengths(span: Span, op: &str, a: usize, b: usize) -> Result<(), EvalError> {
    if a == b {
        Ok(())
    } else {
        Err(EvalError::new(
            span,
            format!("{op}: the arrays have different lengths ({a} and {b})"),
        ))
    }
}

/// The tags and length of an array sensitivity in any of its forms (dense, lazy, or a lazy zero
/// of an array).
fn array_shape(v: &Value) -> Option<(Tags, usize)> {
    match v {
        Value::Array(a) => Some((a.tags, a.elems.len())),
        Value::SensArray(a) => Some((a.tags, a.len)),
        Value::Zero(z) => match &z.of {
            Value::Array(a) => Some((v.tags(), a.elems.len())),
            _ => None,
        },
        _ => None,
    }
}
