//! Abstract values (paper 001 §5.4), with a boxed fallback instead of the paper's ⊤.
//!
//! An abstract value denotes a set of concrete values: a known constant, "some real", "some
//! boolean", a pair or array of abstract values, a closure over an abstract environment (one
//! per code and environment: polyvariance), or `Dyn`. The paper's analysis is union-free and
//! aborts when two different shapes meet; here they widen to `Dyn`: *some* value, kept boxed at
//! run time, naming exactly the procedures (callees) it may hold. A call of a `Dyn` procedure
//! dispatches over those callees, so every call still has statically known candidates and the
//! analysis never gives up on a program.
//!
//! A boxed closure's environment is not part of the `Dyn`: the analysis keeps one summary per
//! code, the join of the environments of its boxed closures (`Boxes::pending` collects them).
//! docs/flow.md says why the callees are an exact set rather than classes of a union-find, as
//! they once were.

use std::fmt;
use std::rc::Rc;
use vlad_core::{Prim, Tag, Tags};

/// A specialisable piece of code: member `index` of a `letrec` group (a plain lambda is a group
/// of one), interned by the analysis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CodeId(pub u32);

/// What a procedure value may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Callee {
    Code(CodeId),
    Prim(Prim),
}

/// A real constant, compared bitwise so that values are hashable (and `-0`, NaN distinct).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Real(pub u64);

impl Real {
    pub fn new(x: f64) -> Real {
        Real(x.to_bits())
    }

    pub fn get(self) -> f64 {
        f64::from_bits(self.0)
    }
}

impl fmt::Debug for Real {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", vlad_core::number::format_real(self.get()))
    }
}

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub enum Av {
    /// No value: the expression does not return (an error, or not analysed yet).
    Bottom,
    Nil,
    /// A known boolean, or some boolean.
    Bool(Option<bool>),
    /// A known real, or some real.
    Real(Option<Real>),
    Prim(Prim),
    /// A pair with its AD tag stack (tagged structurally, as in the evaluator).
    Pair(Tags, Rc<Av>, Rc<Av>),
    /// A closure: its code and its environment, in the code's free-variable order. Its tags are
    /// its code's.
    Closure(CodeId, Rc<[Av]>),
    /// An array whose elements are all in the element value, with its tags and its length
    /// where that is known.
    Array(Tags, Len, Rc<Av>),
    /// `(forward primal tangent)` of a scalar primal.
    Bundle(Rc<Av>, Rc<Av>),
    /// A scalar tagged `perturbation`, `sensitivity` or `reverse`.
    Tagged(Tag, Rc<Av>),
    /// The lazy zero sensitivity of a reverse value (the evaluator's `Value::Zero`).
    Zero(Rc<Av>),
    /// Either the lazy zero sensitivity of a reverse value of the first (`Zero`), or a value
    /// of the second, which is never itself a lazy zero, boxed or bottom: the join of a lazy
    /// zero with something else (`Av::or_zero`). Reverse mode makes these everywhere: a
    /// backpropagator returns a zero for what a branch or the last step of a loop did not use,
    /// and sensitivities for the rest. Kept apart, the compiled code holds a flag and the two
    /// alternatives' leaves, where a join boxed them: a lazy zero is the identity of `plus`
    /// without arithmetic (a sensitivity of -0 added to it stays -0), so it cannot be
    /// represented by a computed zero.
    OrZero(Rc<Av>, Rc<Av>),
    /// The sensitivity of a reverse array of the first (an `Av::Array`) that is zero but at
    /// one index, where it is a value of the second: what reverse-mode `get` gives its array
    /// (the evaluator's lazy one-hot `SensArray`). The compiled code holds the array, the index
    /// and the element's leaves, and a sweep adds it into a dense sensitivity in place
    /// (`%accumulate`), where an array per read would cost O(n) and a boxed node an
    /// allocation.
    OneHot(Rc<Av>, Rc<Av>),
    /// A sensitivity of a reverse array that is a one-hot (the first: a `OneHot`, or that or
    /// the lazy zero, `OrZero`) plus a dense array sensitivity (the second: an `Array`, or that
    /// or the lazy zero), one of the two at least there: what `plus` of a reverse `get`'s
    /// sensitivity and a sweep's accumulator gives (a loop's and a read of the same array),
    /// and the join of a one-hot and an array (`Av::sum`). The compiled code holds both
    /// parts, where a boxed lazy sum costs an allocation and a boxed dense array (and a dense
    /// copy would cost the length at every `plus` of a recursion adding one-hots). `plus` of
    /// it and a dense array adds the dense parts; of it and a one-hot or another sum, it is
    /// boxed, so a chain of one-hots never grows here.
    Sum(Rc<Av>, Rc<Av>),
    /// Some value of any shape, boxed; the procedures inside it are among these callees
    /// (sorted, without repeats; none: there are no procedures).
    Dyn(Rc<[Callee]>),
}

/// The length of an abstract array: known, or `None`.
pub type Len = Option<u64>;

/// The length of the join of two arrays, or of `bundle` or `plus` of them (where lengths that
/// differ fail at run time): known if both are and agree.
pub fn join_len(a: Len, b: Len) -> Len {
    if a == b {
        a
    } else {
        None
    }
}

/// Data (pairs, arrays) nested deeper than this is boxed (`Dyn`): it bounds the lattice, so the
/// analysis terminates on programs that build structures of unbounded size. Sensitivities count
/// here too, and the sensitivity of a closure is a list of its environment's sensitivities, so
/// the closures inside closures that nest freely in a primal make data as deep as their nesting;
/// a loop's state in reverse mode holds such a list and the arrays at its leaves (a matrix of
/// matrices under a loop over points, the optimisers' closures in saddle-RR). At 10 those leaves
/// were boxed (docs/flow.md, "Termination without `(real ...)`").
pub const MAX_DEPTH: usize = 16;

/// A closure inside this many closures of its own code is boxed (`Av::bounded`).
pub const MAX_REPEAT: usize = 8;

/// Values whose trees are larger than this are boxed at a shallower nesting (`Av::bounded`).
pub const MAX_SIZE: usize = 2000;

/// Any value nested deeper than this is boxed: a safety net over `MAX_DEPTH` and
/// `MAX_REPEAT` (`Av::bounded`).
pub const MAX_NESTING: usize = 64;

impl Av {
    pub fn real() -> Av {
        Av::Real(None)
    }

    pub fn known_real(x: f64) -> Av {
        Av::Real(Some(Real::new(x)))
    }

    pub fn pair(a: Av, b: Av) -> Av {
        Av::tagged_pair(Tags::EMPTY, a, b)
    }

    pub fn tagged_pair(tags: Tags, a: Av, b: Av) -> Av {
        if a == Av::Bottom || b == Av::Bottom {
            return Av::Bottom;
        }
        Av::Pair(tags, Rc::new(a), Rc::new(b))
    }

    pub fn bundle(p: Av, t: Av) -> Av {
        if p == Av::Bottom || t == Av::Bottom {
            return Av::Bottom;
        }
        Av::Bundle(Rc::new(p), Rc::new(t))
    }

    pub fn tagged(tag: Tag, v: Av) -> Av {
        if v == Av::Bottom {
            return Av::Bottom;
        }
        Av::Tagged(tag, Rc::new(v))
    }

    /// The lazy zero of a reverse value of `of`, or a value of `v` (`Av::OrZero`), normalised:
    /// an alternative that is a lazy zero already merges with the first, a boxed one boxes the
    /// whole.
    pub fn or_zero(of: &Av, v: &Av, boxes: &mut Boxes) -> Av {
        match v {
            Av::Bottom => Av::Zero(Rc::new(of.clone())),
            Av::Zero(y) => Av::Zero(Rc::new(of.join(y, boxes))),
            Av::OrZero(y, w) => Av::OrZero(Rc::new(of.join(y, boxes)), w.clone()),
            Av::Dyn(_) => Av::Zero(Rc::new(of.clone())).join(v, boxes),
            _ => Av::OrZero(Rc::new(of.clone()), Rc::new(v.clone())),
        }
    }

    /// A boxed value holding these procedures.
    pub fn dyn_of(callees: impl IntoIterator<Item = Callee>) -> Av {
        Av::Dyn(callee_set(callees))
    }

    /// A boxed value holding no procedures.
    pub fn dyn_data() -> Av {
        Av::Dyn(Rc::from([]))
    }

    pub fn array(tags: Tags, len: Len, e: Av) -> Av {
        Av::Array(tags, len, Rc::new(e))
    }

    /// `Av::Sum` of a one-hot part and a dense part, where they are the two parts of one
    /// array's sensitivity (a one-hot, or that or a lazy zero; an array of the one-hot's
    /// tags, or that or a lazy zero); the two boxed together otherwise.
    pub fn sum(o: Av, d: Av, boxes: &mut Boxes) -> Av {
        let onehot = match &o {
            Av::OneHot(..) => Some(&o),
            Av::OrZero(_, x) if matches!(**x, Av::OneHot(..)) => Some(&**x),
            _ => None,
        };
        let dense = match &d {
            Av::Array(..) => Some(&d),
            Av::OrZero(_, x) if matches!(**x, Av::Array(..)) => Some(&**x),
            _ => None,
        };
        if let (Some(Av::OneHot(of, _)), Some(Av::Array(t, ..))) = (onehot, dense) {
            if let Av::Array(u, ..) = &**of {
                if u.pop().push(vlad_core::Tag::Sensitivity) == Some(*t) {
                    return Av::Sum(Rc::new(o), Rc::new(d));
                }
            }
        }
        o.boxed(boxes).join(&d.boxed(boxes), boxes)
    }

    /// The reverse array of which a one-hot (`OneHot`, or it or a lazy zero) or a `Sum` is the
    /// sensitivity.
    pub fn sensitivity_of(&self) -> Option<&Av> {
        match self {
            Av::OneHot(of, _) => Some(of),
            Av::OrZero(_, x) | Av::Sum(x, _) => x.sensitivity_of(),
            _ => None,
        }
    }

    /// The procedures a boxed copy of this value holds at its top level: closures and
    /// primitives reachable through pairs, arrays and AD wrappers, but not through closure
    /// environments. The environments of its closures are noted in `boxes` instead (a boxed
    /// closure of code `c` has an environment within the summary the analysis keeps for `c`),
    /// so boxing a closure does not box everything it closes over.
    pub fn box_parts(&self, out: &mut Vec<Callee>, boxes: &mut Boxes) {
        match self {
            Av::Prim(p) => out.push(Callee::Prim(*p)),
            Av::Pair(_, a, b) | Av::Bundle(a, b) => {
                a.box_parts(out, boxes);
                b.box_parts(out, boxes);
            }
            Av::Closure(c, env) => {
                out.push(Callee::Code(*c));
                boxes.pending.push((*c, env.clone()));
            }
            Av::Array(_, _, e) | Av::Tagged(_, e) | Av::Zero(e) => e.box_parts(out, boxes),
            Av::OrZero(z, v) | Av::OneHot(z, v) | Av::Sum(z, v) => {
                z.box_parts(out, boxes);
                v.box_parts(out, boxes);
            }
            Av::Dyn(cs) => out.extend(cs.iter().copied()),
            Av::Bottom | Av::Nil | Av::Bool(_) | Av::Real(_) => {}
        }
    }

    /// This value boxed: `Dyn` of its callees.
    pub fn boxed(&self, boxes: &mut Boxes) -> Av {
        let mut s = Vec::new();
        self.box_parts(&mut s, boxes);
        Av::dyn_of(s)
    }

    /// The least upper bound, widened: reals and booleans that differ become unknown, values of
    /// different shapes are boxed.
    pub fn join(&self, other: &Av, boxes: &mut Boxes) -> Av {
        if self == other {
            return self.clone();
        }
        match (self, other) {
            (Av::Bottom, x) | (x, Av::Bottom) => x.clone(),
            (Av::Real(_), Av::Real(_)) => Av::real(),
            (Av::Bool(_), Av::Bool(_)) => Av::Bool(None),
            (Av::Pair(t1, a1, d1), Av::Pair(t2, a2, d2)) if t1 == t2 => {
                Av::tagged_pair(*t1, a1.join(a2, boxes), d1.join(d2, boxes))
            }
            (Av::Bundle(a1, d1), Av::Bundle(a2, d2)) => {
                Av::bundle(a1.join(a2, boxes), d1.join(d2, boxes))
            }
            (Av::Tagged(t1, x), Av::Tagged(t2, y)) if t1 == t2 => Av::tagged(*t1, x.join(y, boxes)),
            (Av::Zero(x), Av::Zero(y)) => Av::Zero(Rc::new(x.join(y, boxes))),
            (Av::OrZero(x, v), Av::OrZero(y, w)) => {
                let of = x.join(y, boxes);
                let v = v.join(w, boxes);
                Av::or_zero(&of, &v, boxes)
            }
            // A lazy zero and another value, not boxed (below): the two alternatives kept.
            (Av::Zero(x), v) | (v, Av::Zero(x)) if !matches!(v, Av::Dyn(_)) => {
                Av::or_zero(x, v, boxes)
            }
            (Av::OrZero(x, v), w) | (w, Av::OrZero(x, v)) if !matches!(w, Av::Dyn(_)) => {
                let v = v.join(w, boxes);
                Av::or_zero(x, &v, boxes)
            }
            (Av::OneHot(x, e), Av::OneHot(y, f)) => {
                let of = x.join(y, boxes);
                if !matches!(of, Av::Array(..)) {
                    return Av::OneHot(x.clone(), e.clone())
                        .boxed(boxes)
                        .join(&Av::OneHot(y.clone(), f.clone()).boxed(boxes), boxes);
                }
                Av::OneHot(Rc::new(of), Rc::new(e.join(f, boxes)))
            }
            // A one-hot, an array, and sums of the two: a sum, each part that a value lacks a
            // lazy zero there.
            (Av::Sum(o1, d1), Av::Sum(o2, d2)) => {
                Av::sum(o1.join(o2, boxes), d1.join(d2, boxes), boxes)
            }
            (Av::Sum(o, d), x @ (Av::OneHot(..) | Av::Array(..)))
            | (x @ (Av::OneHot(..) | Av::Array(..)), Av::Sum(o, d)) => {
                let of = self
                    .sensitivity_of()
                    .or(other.sensitivity_of())
                    .expect("a sum");
                let (o, d) = match x {
                    Av::OneHot(..) => (o.join(x, boxes), Av::or_zero(of, d, boxes)),
                    _ => (Av::or_zero(of, o, boxes), d.join(x, boxes)),
                };
                Av::sum(o, d, boxes)
            }
            (o @ Av::OneHot(of, _), d @ Av::Array(..))
            | (d @ Av::Array(..), o @ Av::OneHot(of, _)) => {
                let (o, d) = (Av::or_zero(of, o, boxes), Av::or_zero(of, d, boxes));
                Av::sum(o, d, boxes)
            }
            (Av::Closure(c1, e1), Av::Closure(c2, e2)) if c1 == c2 => Av::Closure(
                *c1,
                e1.iter()
                    .zip(e2.iter())
                    .map(|(x, y)| x.join(y, boxes))
                    .collect(),
            ),
            (Av::Array(t1, n1, x), Av::Array(t2, n2, y)) if t1 == t2 => {
                Av::array(*t1, join_len(*n1, *n2), x.join(y, boxes))
            }
            (Av::Dyn(a), Av::Dyn(b)) => {
                // Shared rather than copied where the union is one of the two: joins of boxed
                // values are frequent and their sets large.
                let u = union(a, b);
                if u.len() == a.len() {
                    self.clone()
                } else if u.len() == b.len() {
                    other.clone()
                } else {
                    Av::Dyn(u.into())
                }
            }
            // A boxed value and another: the other's callees merged into the boxed set.
            (Av::Dyn(a), x) | (x, Av::Dyn(a)) => {
                let mut s = Vec::new();
                x.box_parts(&mut s, boxes);
                s.sort();
                s.dedup();
                let u = union(&s, a);
                if u.len() == a.len() {
                    Av::Dyn(a.clone())
                } else {
                    Av::Dyn(u.into())
                }
            }
            _ => {
                let mut s = Vec::new();
                self.box_parts(&mut s, boxes);
                other.box_parts(&mut s, boxes);
                Av::dyn_of(s)
            }
        }
    }

    /// The value with every constant forgotten (its shape): loop counters that differ only in
    /// their values have the same shape.
    pub fn shape(&self) -> Av {
        self.shape_keeping(false)
    }

    /// The shape, but with known zeros kept: what the analysis counts a closure's arguments by
    /// before it widens them (`MAX_VARIANTS`). A known zero is what a tangent nothing perturbs
    /// holds, and the forward derivative rules skip it; counted with other reals, every
    /// inactive tangent of a rule called from more than `MAX_VARIANTS` places would widen to
    /// "some real", and nested forward mode would compute every one of them.
    pub fn variant_shape(&self) -> Av {
        self.shape_keeping(true)
    }

    fn shape_keeping(&self, zeros: bool) -> Av {
        let s = |v: &Av| v.shape_keeping(zeros);
        match self {
            Av::Real(Some(x)) if zeros && x.get() == 0.0 => Av::known_real(0.0),
            Av::Real(_) => Av::real(),
            Av::Bool(_) => Av::Bool(None),
            Av::Pair(t, a, b) => Av::tagged_pair(*t, s(a), s(b)),
            Av::Bundle(a, b) => Av::bundle(s(a), s(b)),
            Av::Closure(c, env) => Av::Closure(*c, env.iter().map(s).collect()),
            // The length is a constant too: arrays built at each step of a loop at another
            // length (a growing prefix) widen like the loop's counter.
            Av::Array(t, _, e) => Av::array(*t, None, s(e)),
            Av::Tagged(t, e) => Av::tagged(*t, s(e)),
            Av::Zero(e) => Av::Zero(Rc::new(s(e))),
            Av::OrZero(z, v) => Av::OrZero(Rc::new(s(z)), Rc::new(s(v))),
            Av::OneHot(a, e) => Av::OneHot(Rc::new(s(a)), Rc::new(s(e))),
            Av::Sum(o, d) => Av::Sum(Rc::new(s(o)), Rc::new(s(d))),
            _ => self.clone(),
        }
    }

    /// The value with what could grow without bound boxed, so that the lattice of values the
    /// analysis meets is finite: data (pairs, arrays) nested deeper than `MAX_DEPTH` (a list
    /// whose length depends on the input), a closure inside `MAX_REPEAT` closures of its own
    /// code (a stream, or the chain of backpropagators a loop builds in reverse mode), anything
    /// deeper than `MAX_NESTING` (a safety net). Closures of different codes nest freely: the
    /// environments of top-level definitions form deep but fixed chains that must stay known.
    ///
    /// A value whose tree is larger than `MAX_SIZE` nodes is boxed at a shallower nesting until
    /// it is not: the AD maps and joins walk values as trees, so size, not only depth, bounds
    /// the cost of the analysis (nested reverse mode builds closures over closures over ...).
    pub fn bounded(&self, boxes: &mut Boxes) -> Av {
        let mut nesting = MAX_NESTING;
        loop {
            let v = self.bounded_in(MAX_DEPTH, nesting, &mut Vec::new(), boxes);
            if nesting == 1 || v.size_within(MAX_SIZE).is_some() {
                return v;
            }
            nesting /= 2;
        }
    }

    /// The number of nodes of the value as a tree, if at most `limit` (the count stops there).
    fn size_within(&self, limit: usize) -> Option<usize> {
        fn go(v: &Av, left: &mut usize) -> bool {
            if *left == 0 {
                return false;
            }
            *left -= 1;
            match v {
                Av::Pair(_, a, b) | Av::Bundle(a, b) => go(a, left) && go(b, left),
                Av::Closure(_, env) => env.iter().all(|x| go(x, left)),
                Av::Array(_, _, e) | Av::Tagged(_, e) | Av::Zero(e) => go(e, left),
                Av::OrZero(z, v) | Av::OneHot(z, v) | Av::Sum(z, v) => go(z, left) && go(v, left),
                _ => true,
            }
        }
        let mut left = limit;
        go(self, &mut left).then_some(limit - left)
    }

    fn bounded_in(
        &self,
        data: usize,
        nesting: usize,
        codes: &mut Vec<CodeId>,
        boxes: &mut Boxes,
    ) -> Av {
        match self {
            Av::Bottom | Av::Nil | Av::Bool(_) | Av::Real(_) | Av::Prim(_) => {
                return self.clone();
            }
            Av::Dyn(_) => return self.clone(),
            _ => {}
        }
        let recursive = match self {
            Av::Pair(..) | Av::Array(..) | Av::Zero(_) | Av::OneHot(..) => data == 0,
            Av::Closure(c, _) => codes.iter().filter(|d| *d == c).count() >= MAX_REPEAT,
            _ => false,
        };
        if recursive || nesting == 0 {
            return self.boxed(boxes);
        }
        let n = nesting - 1;
        match self {
            Av::Pair(t, a, b) => Av::tagged_pair(
                *t,
                a.bounded_in(data - 1, n, codes, boxes),
                b.bounded_in(data - 1, n, codes, boxes),
            ),
            // AD wrappers do not count as data: their nesting is bounded by the tag depth.
            Av::Bundle(a, b) => Av::bundle(
                a.bounded_in(data, n, codes, boxes),
                b.bounded_in(data, n, codes, boxes),
            ),
            Av::Tagged(t, e) => Av::tagged(*t, e.bounded_in(data, n, codes, boxes)),
            Av::Closure(c, env) => {
                codes.push(*c);
                let env = env
                    .iter()
                    .map(|x| x.bounded_in(data, n, codes, boxes))
                    .collect();
                codes.pop();
                Av::Closure(*c, env)
            }
            // The length of an array inside data (the rows of a matrix, the elements of a list
            // a loop builds) is forgotten: arrays of different lengths there made every
            // combination of them a key of its own (examples/array-calculus.vlad compiled to
            // twice the C).
            Av::Array(t, len, e) => Av::array(
                *t,
                if data < MAX_DEPTH { None } else { *len },
                e.bounded_in(data - 1, n, codes, boxes),
            ),
            Av::Zero(e) => Av::Zero(Rc::new(e.bounded_in(data - 1, n, codes, boxes))),
            // Not data: its alternatives are bounded as they stand.
            Av::OrZero(z, v) => {
                let z = Av::Zero(z.clone()).bounded_in(data, n, codes, boxes);
                let v = v.bounded_in(data, n, codes, boxes);
                z.join(&v, boxes)
            }
            Av::OneHot(a, e) => {
                let a = a.bounded_in(data, n, codes, boxes);
                let e = e.bounded_in(data - 1, n, codes, boxes);
                match a {
                    Av::Array(..) => Av::OneHot(Rc::new(a), Rc::new(e)),
                    _ => Av::OneHot(Rc::new(a), Rc::new(e)).boxed(boxes),
                }
            }
            // Not data: its parts are bounded as they stand.
            Av::Sum(o, d) => {
                let o = o.bounded_in(data, n, codes, boxes);
                let d = d.bounded_in(data, n, codes, boxes);
                Av::sum(o, d, boxes)
            }
            _ => unreachable!("aggregates only"),
        }
    }
}

/// A set of callees as a boxed value holds them: sorted, without repeats.
pub fn callee_set(callees: impl IntoIterator<Item = Callee>) -> Rc<[Callee]> {
    let mut v: Vec<Callee> = callees.into_iter().collect();
    // Stable sort: the callees usually come as a few sorted runs (boxed values' sets).
    v.sort();
    v.dedup();
    v.into()
}

/// The union of two sorted sets of callees.
fn union(a: &[Callee], b: &[Callee]) -> Vec<Callee> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// What boxing a value leaves to the analysis: the environments of the closures boxed since
/// last drained, to join into their codes' summaries.
#[derive(Default)]
pub struct Boxes {
    pub pending: Vec<(CodeId, Rc<[Av]>)>,
}

/// A fast, deterministic hasher for the analysis's tables, whose keys are abstract values
/// (the multiply-rotate of rustc's `FxHasher`): SipHash took a tenth of the analysis of
/// tests/array/property.vlad, and these keys need no protection against adversarial
/// collisions.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_isize(&mut self, n: isize) {
        self.write_u64(n as u64);
    }
}

/// A hash map keyed by abstract values (`FastHasher`).
pub type FastMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<FastHasher>>;
