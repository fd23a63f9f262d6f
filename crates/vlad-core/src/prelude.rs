//! The AD prelude as Core: the lambdas that define the forward and reverse versions of the
//! primitives, and the untransformed definitions of the primitives written in VLAD (`build`,
//! `ifold`).
//!
//! The prelude is written in VLAD and expanded by the `vlad-prelude` crate (it needs the
//! expander); this is only what the evaluator and the flow analysis share of it, so that the two
//! engines, which are peers, agree on which code is which primitive's version: bundling a
//! primitive gives a closure over `forward[p]` in both, and transforming that closure again is
//! the ordinary closure transform.

use crate::{ExprId, Prim, Tag};
use std::collections::HashMap;

/// The prelude's lambdas, in one arena (the program's).
#[derive(Clone, Debug, Default)]
pub struct Prelude {
    /// The forward version of each primitive (a lambda whose parameter is forward-tagged).
    pub forward: HashMap<Prim, ExprId>,
    /// The reverse version of each primitive (a lambda whose parameter is reverse-tagged).
    pub reverse: HashMap<Prim, ExprId>,
    /// The untransformed definitions of the primitives defined in VLAD (`build`, `ifold`).
    pub base: HashMap<Prim, ExprId>,
    /// Which version of which primitive each of the lambdas above is.
    pub versions: HashMap<ExprId, (Tag, Prim)>,
}

impl Prelude {
    /// The lambda of the `tag` version of `p`, if it has one.
    pub fn version(&self, p: Prim, tag: Tag) -> Option<ExprId> {
        match tag {
            Tag::Forward => self.forward.get(&p).copied(),
            Tag::Reverse => self.reverse.get(&p).copied(),
            _ => None,
        }
    }

    /// Which version of which primitive the lambda `lam` is, if it is one of the prelude's.
    pub fn version_of(&self, lam: ExprId) -> Option<(Tag, Prim)> {
        self.versions.get(&lam).copied()
    }
}
