//! AD tags. Every value and every transformed variable, pattern and `cons` carries a stack of tags
//! saying which AD transforms produced it (paper 001 §4.1 bundles, paper 003 §4 reverse values).
//! Tags nest, so inner and outer derivatives can never be confused: an operator only ever looks at
//! the outermost tag.

use std::fmt;

/// One level of AD tagging.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tag {
    /// A bundle of a primal and a perturbation (forward mode), printed `(forward P T)`.
    Forward = 0,
    /// A tangent, printed `(perturbation X)`.
    Perturbation = 1,
    /// A cotangent, printed `(sensitivity X)`.
    Sensitivity = 2,
    /// A reverse-mode value, printed `(reverse X)`.
    Reverse = 3,
}

impl Tag {
    pub fn name(self) -> &'static str {
        match self {
            Tag::Forward => "forward",
            Tag::Perturbation => "perturbation",
            Tag::Sensitivity => "sensitivity",
            Tag::Reverse => "reverse",
        }
    }

    fn from_bits(b: u32) -> Tag {
        match b & 3 {
            0 => Tag::Forward,
            1 => Tag::Perturbation,
            2 => Tag::Sensitivity,
            _ => Tag::Reverse,
        }
    }
}

/// A stack of tags packed in a `u32`: 4 bits of depth, 2 bits per tag, outermost tag in the low
/// bits. Copyable and cheap, because every pair carries one.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Tags(u32);

/// The deepest AD nesting supported (each level is one applied transform).
pub const MAX_TAG_DEPTH: u32 = 14;

impl Tags {
    pub const EMPTY: Tags = Tags(0);

    /// The packed representation (depth and tags), for code generators that store tags.
    pub fn bits(self) -> u32 {
        self.0
    }

    pub fn depth(self) -> u32 {
        self.0 >> 28
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The outermost tag, if any.
    pub fn top(self) -> Option<Tag> {
        if self.is_empty() {
            None
        } else {
            Some(Tag::from_bits(self.0))
        }
    }

    /// The stack with `tag` pushed on the outside; `None` when nesting would exceed
    /// [`MAX_TAG_DEPTH`].
    pub fn push(self, tag: Tag) -> Option<Tags> {
        let d = self.depth();
        if d >= MAX_TAG_DEPTH {
            return None;
        }
        let body = self.0 & 0x0fff_ffff;
        Some(Tags(((d + 1) << 28) | (body << 2) | tag as u32))
    }

    /// The stack without its outermost tag (empty stays empty).
    pub fn pop(self) -> Tags {
        let d = self.depth();
        if d == 0 {
            return self;
        }
        let body = (self.0 & 0x0fff_ffff) >> 2;
        Tags(((d - 1) << 28) | body)
    }

    /// Tags from outermost to innermost.
    pub fn iter(self) -> impl Iterator<Item = Tag> {
        let mut t = self;
        std::iter::from_fn(move || {
            let top = t.top()?;
            t = t.pop();
            Some(top)
        })
    }
}

impl fmt::Debug for Tags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_pop_round_trip() {
        let t = Tags::EMPTY
            .push(Tag::Forward)
            .unwrap()
            .push(Tag::Reverse)
            .unwrap();
        assert_eq!(t.depth(), 2);
        assert_eq!(t.top(), Some(Tag::Reverse));
        assert_eq!(t.pop().top(), Some(Tag::Forward));
        assert_eq!(t.pop().pop(), Tags::EMPTY);
        assert_eq!(
            t.iter().collect::<Vec<_>>(),
            vec![Tag::Reverse, Tag::Forward]
        );
    }

    #[test]
    fn depth_is_bounded() {
        let mut t = Tags::EMPTY;
        for _ in 0..MAX_TAG_DEPTH {
            t = t.push(Tag::Sensitivity).unwrap();
        }
        assert!(t.push(Tag::Forward).is_none());
        assert!(t.iter().all(|x| x == Tag::Sensitivity));
    }
}
