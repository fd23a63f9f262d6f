//! Run-time values of the evaluator.
//!
//! Values are the paper's: `()`, booleans, reals, primitives, pairs and closures, plus the AD
//! values: bundles (`forward`, paper 001) and scalars tagged `perturbation`, `sensitivity` or
//! `reverse`. Aggregates are tagged *structurally*: a pair carries the tag stack of the AD
//! transforms applied to it, and a closure's tags are those of its (transformed) lambda
//! expression, so `(perturb (cons 1 2))` is a perturbation-tagged pair of perturbation-tagged
//! reals, exactly as the reference implementation represents it.

use crate::code::Group;
use std::cell::RefCell;
use std::rc::Rc;
use vlad_core::{Prim, Tag, Tags};

#[derive(Clone)]
pub enum Value {
    Nil,
    Bool(bool),
    Real(f64),
    Prim(Prim),
    Pair(Rc<Pair>),
    Closure(Rc<Closure>),
    /// `(forward primal tangent)` for a scalar primal (aggregates interleave instead).
    Bundle(Rc<Bundle>),
    /// A scalar tagged `perturbation`, `sensitivity` or `reverse`.
    Tagged(Rc<Tagged>),
    /// A lazy zero sensitivity: `(sensitize (zero (*j-inverse of)))`, built in O(1) by reverse
    /// mode code for sensitivities nothing has flowed into. `plus` treats it as the identity;
    /// anything that looks inside it materialises it one level at a time.
    Zero(Rc<ZeroOf>),
    /// An array (paper 002), tagged structurally like a pair: its tag stack, and elements that
    /// carry those tags themselves.
    Array(Rc<Array>),
    /// A lazy sensitivity of an array: a sum of sparse contributions (reverse-mode `get` makes
    /// one-hot ones) computed into a dense array only when something looks inside. This is what
    /// makes a gradient through n reads of an n-array cost O(n), not O(n^2) (paper 004 §6-7).
    SensArray(Rc<SensArray>),
}

pub struct Array {
    pub tags: Tags,
    /// Shared, so that retagging only the top (the shallow primal) is O(1).
    pub elems: Rc<[Value]>,
}

pub struct SensArray {
    pub tags: Tags,
    pub len: usize,
    pub node: RefCell<SensNode>,
}

pub enum SensNode {
    /// `value` at `index`, the zero sensitivity of the element of the reverse array `of`
    /// everywhere else.
    OneHot {
        of: Value,
        index: usize,
        value: Value,
    },
    /// The sum of two sensitivities of the same array (each an `Array`, a `SensArray` or a lazy
    /// zero).
    Sum(Value, Value),
    /// The dense array, once computed.
    Forced(Value),
}

pub struct ZeroOf {
    /// The reverse value whose primal's zero sensitivity this is.
    pub of: Value,
}

pub struct Pair {
    pub tags: Tags,
    pub car: Value,
    pub cdr: Value,
}

/// A closure of one member of a `letrec` group (a plain lambda is a group of one). Members of
/// one group share one environment, so recursive closures need no cycles.
pub struct Closure {
    pub group: Rc<Group>,
    pub index: u32,
    pub env: Rc<Env>,
}

/// A closure environment, laid out in the group's free-variable order.
pub struct Env(pub Vec<Value>);

pub struct Bundle {
    pub primal: Value,
    pub tangent: Value,
}

pub struct Tagged {
    pub tag: Tag,
    pub value: Value,
}

impl Value {
    pub fn pair(tags: Tags, car: Value, cdr: Value) -> Value {
        Value::Pair(Rc::new(Pair { tags, car, cdr }))
    }

    pub fn tagged(tag: Tag, value: Value) -> Value {
        Value::Tagged(Rc::new(Tagged { tag, value }))
    }

    pub fn zero_of(of: Value) -> Value {
        Value::Zero(Rc::new(ZeroOf { of }))
    }

    pub fn array(tags: Tags, elems: impl Into<Rc<[Value]>>) -> Value {
        Value::Array(Rc::new(Array {
            tags,
            elems: elems.into(),
        }))
    }

    pub fn sens_array(tags: Tags, len: usize, node: SensNode) -> Value {
        Value::SensArray(Rc::new(SensArray {
            tags,
            len,
            node: RefCell::new(node),
        }))
    }

    pub fn bundle(primal: Value, tangent: Value) -> Value {
        Value::Bundle(Rc::new(Bundle { primal, tangent }))
    }

    /// The AD tag stack of this value (outermost first).
    pub fn tags(&self) -> Tags {
        match self {
            Value::Nil | Value::Bool(_) | Value::Real(_) | Value::Prim(_) => Tags::EMPTY,
            Value::Pair(p) => p.tags,
            Value::Array(a) => a.tags,
            Value::SensArray(a) => a.tags,
            Value::Closure(c) => c.group.tags,
            Value::Bundle(b) => b.primal.tags().push(Tag::Forward).unwrap_or(Tags::EMPTY),
            Value::Tagged(t) => t.value.tags().push(t.tag).unwrap_or(Tags::EMPTY),
            Value::Zero(z) => {
                z.of.tags()
                    .pop()
                    .push(Tag::Sensitivity)
                    .unwrap_or(Tags::EMPTY)
            }
        }
    }

    /// Truth for `if`: everything but `#f` is true, looking through AD tags (the transformed
    /// `if-procedure` tests the primal).
    pub fn is_true(&self) -> bool {
        let mut v = self;
        loop {
            match v {
                Value::Bool(b) => return *b,
                Value::Bundle(b) => v = &b.primal,
                Value::Tagged(t) => v = &t.value,
                _ => return true,
            }
        }
    }

    pub fn is_procedure(&self) -> bool {
        matches!(self, Value::Prim(_) | Value::Closure(_))
    }

    /// A short description for error messages.
    pub fn describe(&self) -> String {
        match self {
            Value::Nil => "()".into(),
            Value::Bool(_) | Value::Real(_) => crate::print::to_string(self),
            Value::Prim(p) => format!("the primitive `{}`", p.name()),
            Value::Pair(p) if p.tags.is_empty() => "a pair".into(),
            Value::Pair(p) => format!("a {} pair", p.tags.top().expect("tagged").name()),
            Value::Closure(_) => "a procedure".into(),
            Value::Zero(_) => "a zero sensitivity".into(),
            Value::Array(a) if a.tags.is_empty() => {
                format!("an array of length {}", a.elems.len())
            }
            Value::Array(a) => format!(
                "a {} array of length {}",
                a.tags.top().expect("tagged").name(),
                a.elems.len()
            ),
            Value::SensArray(a) => format!("a sensitivity array of length {}", a.len),
            Value::Bundle(_) | Value::Tagged(_) => {
                let s = crate::print::to_string(self);
                if s.len() > 60 {
                    format!("a {} value", self.tags().top().expect("tagged").name())
                } else {
                    s
                }
            }
        }
    }
}

// Dropping a long list or a long chain of closures must not recurse once per link: each drop
// below moves the children it owns alone into a work list and frees them in a loop.

fn take_children(v: &mut Value, out: &mut Vec<Value>) {
    match v {
        Value::Pair(rc) => {
            if let Some(p) = Rc::get_mut(rc) {
                out.push(std::mem::replace(&mut p.car, Value::Nil));
                out.push(std::mem::replace(&mut p.cdr, Value::Nil));
            }
        }
        Value::Closure(rc) => {
            if let Some(c) = Rc::get_mut(rc) {
                if let Some(env) = Rc::get_mut(&mut c.env) {
                    out.append(&mut env.0);
                }
            }
        }
        Value::Bundle(rc) => {
            if let Some(b) = Rc::get_mut(rc) {
                out.push(std::mem::replace(&mut b.primal, Value::Nil));
                out.push(std::mem::replace(&mut b.tangent, Value::Nil));
            }
        }
        Value::Tagged(rc) => {
            if let Some(t) = Rc::get_mut(rc) {
                out.push(std::mem::replace(&mut t.value, Value::Nil));
            }
        }
        Value::Zero(rc) => {
            if let Some(z) = Rc::get_mut(rc) {
                out.push(std::mem::replace(&mut z.of, Value::Nil));
            }
        }
        Value::Array(rc) => {
            if let Some(a) = Rc::get_mut(rc) {
                if let Some(elems) = Rc::get_mut(&mut a.elems) {
                    out.extend(elems.iter_mut().map(|x| std::mem::replace(x, Value::Nil)));
                }
            }
        }
        Value::SensArray(rc) => {
            if let Some(a) = Rc::get_mut(rc) {
                let node = std::mem::replace(a.node.get_mut(), SensNode::Forced(Value::Nil));
                node_children(node, out);
            }
        }
        _ => {}
    }
}

fn node_children(node: SensNode, out: &mut Vec<Value>) {
    match node {
        SensNode::OneHot { of, value, .. } => {
            out.push(of);
            out.push(value);
        }
        SensNode::Sum(a, b) => {
            out.push(a);
            out.push(b);
        }
        SensNode::Forced(v) => out.push(v),
    }
}

/// Frees a lazy sensitivity node that was replaced by its dense value (the node may head a
/// long chain of sums).
pub(crate) fn drop_node(node: SensNode) {
    let mut work = Vec::new();
    node_children(node, &mut work);
    drain(work);
}

fn drain(mut work: Vec<Value>) {
    while let Some(mut v) = work.pop() {
        take_children(&mut v, &mut work);
    }
}

/// Would dropping `v` free a cell that owns further values (and so recurse)?
fn owns_chain(v: &Value) -> bool {
    match v {
        Value::Pair(rc) => Rc::strong_count(rc) == 1,
        Value::Closure(rc) => Rc::strong_count(rc) == 1 && Rc::strong_count(&rc.env) == 1,
        Value::Bundle(rc) => Rc::strong_count(rc) == 1,
        Value::Tagged(rc) => Rc::strong_count(rc) == 1,
        Value::Zero(rc) => Rc::strong_count(rc) == 1,
        Value::Array(rc) => Rc::strong_count(rc) == 1 && Rc::strong_count(&rc.elems) == 1,
        Value::SensArray(rc) => Rc::strong_count(rc) == 1,
        _ => false,
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        // The common case frees no chain: let the fields drop normally.
        if !owns_chain(&self.car) && !owns_chain(&self.cdr) {
            return;
        }
        drain(vec![
            std::mem::replace(&mut self.car, Value::Nil),
            std::mem::replace(&mut self.cdr, Value::Nil),
        ]);
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if !self.0.iter().any(owns_chain) {
            return;
        }
        if !self.0.is_empty() {
            drain(std::mem::take(&mut self.0));
        }
    }
}

impl Drop for Bundle {
    fn drop(&mut self) {
        if !owns_chain(&self.primal) && !owns_chain(&self.tangent) {
            return;
        }
        drain(vec![
            std::mem::replace(&mut self.primal, Value::Nil),
            std::mem::replace(&mut self.tangent, Value::Nil),
        ]);
    }
}

impl Drop for Tagged {
    fn drop(&mut self) {
        if !owns_chain(&self.value) {
            return;
        }
        drain(vec![std::mem::replace(&mut self.value, Value::Nil)]);
    }
}

impl Drop for Array {
    fn drop(&mut self) {
        if !self.elems.iter().any(owns_chain) {
            return;
        }
        if let Some(elems) = Rc::get_mut(&mut self.elems) {
            drain(
                elems
                    .iter_mut()
                    .map(|x| std::mem::replace(x, Value::Nil))
                    .collect(),
            );
        }
    }
}

impl Drop for SensArray {
    fn drop(&mut self) {
        let node = std::mem::replace(self.node.get_mut(), SensNode::Forced(Value::Nil));
        let chain = match &node {
            SensNode::OneHot { of, value, .. } => owns_chain(of) || owns_chain(value),
            SensNode::Sum(a, b) => owns_chain(a) || owns_chain(b),
            SensNode::Forced(v) => owns_chain(v),
        };
        if chain {
            drop_node(node);
        }
    }
}
