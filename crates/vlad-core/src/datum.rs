//! Constant data: what `quote` and numerals denote. Constants are first-order (no closures), so
//! they can live in Core and be hashed.

use std::hash::{Hash, Hasher};
use std::rc::Rc;

#[derive(Clone, Debug)]
pub enum Datum {
    Nil,
    Bool(bool),
    Real(f64),
    Pair(Rc<(Datum, Datum)>),
    /// A quoted array literal `#(...)`.
    Array(Rc<[Datum]>),
}

impl PartialEq for Datum {
    fn eq(&self, other: &Datum) -> bool {
        match (self, other) {
            (Datum::Nil, Datum::Nil) => true,
            (Datum::Bool(a), Datum::Bool(b)) => a == b,
            // Bitwise, so that hash-consing distinguishes 0 from -0 and NaN equals itself.
            (Datum::Real(a), Datum::Real(b)) => a.to_bits() == b.to_bits(),
            (Datum::Pair(a), Datum::Pair(b)) => a == b,
            (Datum::Array(a), Datum::Array(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Datum {}

impl Hash for Datum {
    fn hash<H: Hasher>(&self, h: &mut H) {
        match self {
            Datum::Nil => 0u8.hash(h),
            Datum::Bool(b) => (1u8, b).hash(h),
            Datum::Real(r) => (2u8, r.to_bits()).hash(h),
            Datum::Pair(p) => {
                3u8.hash(h);
                p.0.hash(h);
                p.1.hash(h);
            }
            Datum::Array(a) => {
                4u8.hash(h);
                a.len().hash(h);
                for x in a.iter() {
                    x.hash(h);
                }
            }
        }
    }
}
