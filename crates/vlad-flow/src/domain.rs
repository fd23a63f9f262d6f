//! Abstract values (paper 001 §5.4), with a boxed fallback instead of the paper's ⊤.
//!
//! An abstract value denotes a set of concrete values: a known constant, "some real", "some
//! boolean", a pair or array of abstract values, a closure over an abstract environment (one
//! per code and environment: polyvariance), or `Dyn`. The paper's analysis is union-free and
//! aborts when two different shapes meet; here they widen to `Dyn`: *some* value, kept boxed at
//! run time, whose procedures are among a known set of callees. A call of a `Dyn` procedure
//! dispatches over that set, so every call still has statically known candidates and the
//! analysis never gives up on a program.

use std::collections::BTreeSet;
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
        write!(f, "{}", vlad_syntax::number::format_real(self.get()))
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
    /// An array of any length whose elements are all in the element value, with its tags.
    Array(Tags, Rc<Av>),
    /// `(forward primal tangent)` of a scalar primal.
    Bundle(Rc<Av>, Rc<Av>),
    /// A scalar tagged `perturbation`, `sensitivity` or `reverse`.
    Tagged(Tag, Rc<Av>),
    /// The lazy zero sensitivity of a reverse value (the evaluator's `Value::Zero`).
    Zero(Rc<Av>),
    /// Some value of any shape, boxed; procedures inside it are among these callees.
    Dyn(Rc<BTreeSet<Callee>>),
}

/// Values nested deeper than this are boxed (`Dyn`): it bounds the lattice, so the analysis
/// terminates on programs that build structures of unbounded size.
pub const MAX_DEPTH: usize = 10;

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

    pub fn array(tags: Tags, e: Av) -> Av {
        Av::Array(tags, Rc::new(e))
    }

    pub fn dyn_of(callees: BTreeSet<Callee>) -> Av {
        Av::Dyn(Rc::new(callees))
    }

    /// Every callee inside this value (closures, including those in closure environments, and
    /// primitives).
    pub fn callees(&self, out: &mut BTreeSet<Callee>) {
        match self {
            Av::Prim(p) => {
                out.insert(Callee::Prim(*p));
            }
            Av::Pair(_, a, b) | Av::Bundle(a, b) => {
                a.callees(out);
                b.callees(out);
            }
            Av::Closure(c, env) => {
                out.insert(Callee::Code(*c));
                for x in env.iter() {
                    x.callees(out);
                }
            }
            Av::Array(_, e) | Av::Tagged(_, e) | Av::Zero(e) => e.callees(out),
            Av::Dyn(s) => out.extend(s.iter().copied()),
            Av::Bottom | Av::Nil | Av::Bool(_) | Av::Real(_) => {}
        }
    }

    /// This value boxed: `Dyn` with its callees.
    pub fn boxed(&self) -> Av {
        let mut s = BTreeSet::new();
        self.callees(&mut s);
        Av::dyn_of(s)
    }

    /// The least upper bound, widened: reals and booleans that differ become unknown, values of
    /// different shapes are boxed.
    pub fn join(&self, other: &Av) -> Av {
        if self == other {
            return self.clone();
        }
        match (self, other) {
            (Av::Bottom, x) | (x, Av::Bottom) => x.clone(),
            (Av::Real(_), Av::Real(_)) => Av::real(),
            (Av::Bool(_), Av::Bool(_)) => Av::Bool(None),
            (Av::Pair(t1, a1, d1), Av::Pair(t2, a2, d2)) if t1 == t2 => {
                Av::tagged_pair(*t1, a1.join(a2), d1.join(d2))
            }
            (Av::Bundle(a1, d1), Av::Bundle(a2, d2)) => Av::bundle(a1.join(a2), d1.join(d2)),
            (Av::Tagged(t1, x), Av::Tagged(t2, y)) if t1 == t2 => Av::tagged(*t1, x.join(y)),
            (Av::Zero(x), Av::Zero(y)) => Av::Zero(Rc::new(x.join(y))),
            (Av::Closure(c1, e1), Av::Closure(c2, e2)) if c1 == c2 => Av::Closure(
                *c1,
                e1.iter().zip(e2.iter()).map(|(x, y)| x.join(y)).collect(),
            ),
            (Av::Array(t1, x), Av::Array(t2, y)) if t1 == t2 => Av::array(*t1, x.join(y)),
            _ => {
                let mut s = BTreeSet::new();
                self.callees(&mut s);
                other.callees(&mut s);
                Av::dyn_of(s)
            }
        }
    }

    /// The value with every constant forgotten (its shape): loop counters that differ only in
    /// their values have the same shape.
    pub fn shape(&self) -> Av {
        match self {
            Av::Real(_) => Av::real(),
            Av::Bool(_) => Av::Bool(None),
            Av::Pair(t, a, b) => Av::tagged_pair(*t, a.shape(), b.shape()),
            Av::Bundle(a, b) => Av::bundle(a.shape(), b.shape()),
            Av::Closure(c, env) => Av::Closure(*c, env.iter().map(Av::shape).collect()),
            Av::Array(t, e) => Av::array(*t, e.shape()),
            Av::Tagged(t, e) => Av::tagged(*t, e.shape()),
            Av::Zero(e) => Av::Zero(Rc::new(e.shape())),
            _ => self.clone(),
        }
    }

    /// Boxes what lies deeper than `depth` levels.
    pub fn limit_depth(&self, depth: usize) -> Av {
        let aggregate = matches!(
            self,
            Av::Pair(..)
                | Av::Closure(..)
                | Av::Array(..)
                | Av::Bundle(..)
                | Av::Tagged(..)
                | Av::Zero(_)
        );
        if !aggregate {
            return self.clone();
        }
        if depth == 0 && !matches!(self, Av::Bundle(..) | Av::Tagged(..)) {
            return self.boxed();
        }
        match self {
            Av::Pair(t, a, b) => {
                Av::tagged_pair(*t, a.limit_depth(depth - 1), b.limit_depth(depth - 1))
            }
            // AD wrappers do not count: their nesting is bounded by the tag depth anyway.
            Av::Bundle(a, b) => Av::bundle(a.limit_depth(depth), b.limit_depth(depth)),
            Av::Closure(c, env) => {
                Av::Closure(*c, env.iter().map(|x| x.limit_depth(depth - 1)).collect())
            }
            Av::Array(t, e) => Av::array(*t, e.limit_depth(depth - 1)),
            Av::Tagged(t, e) => Av::tagged(*t, e.limit_depth(depth)),
            Av::Zero(e) => Av::Zero(Rc::new(e.limit_depth(depth - 1))),
            _ => unreachable!("aggregates only"),
        }
    }
}
