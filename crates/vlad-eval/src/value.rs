//! Run-time values of the evaluator.
//!
//! Values are the paper's: `()`, booleans, reals, primitives, pairs and closures, plus the AD
//! values: bundles (`forward`, paper 001) and scalars tagged `perturbation`, `sensitivity` or
//! `reverse`. Aggregates are tagged *structurally*: a pair carries the tag stack of the AD
//! transforms applied to it, and a closure's tags are those of its (transformed) lambda
//! expression, so `(perturb (cons 1 2))` is a perturbation-tagged pair of perturbation-tagged
//! reals, exactly as the reference implementation represents it.

use crate::code::Group;
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

    pub fn bundle(primal: Value, tangent: Value) -> Value {
        Value::Bundle(Rc::new(Bundle { primal, tangent }))
    }

    /// The AD tag stack of this value (outermost first).
    pub fn tags(&self) -> Tags {
        match self {
            Value::Nil | Value::Bool(_) | Value::Real(_) | Value::Prim(_) => Tags::EMPTY,
            Value::Pair(p) => p.tags,
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
        _ => {}
    }
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
