//! The few operations Fortran needs that VLAD has no primitive for, written in VLAD and
//! expanded into the program's `letrec` when used.
//!
//! - `fortran-trunc`: truncation toward zero (INTEGER division, the DO trip count), from IEEE
//!   rounding: for |x| < 2^52, `(x + 2^52) - 2^52` is x rounded to an integer. Exact, and the
//!   C compiler keeps it (no `-ffast-math`).
//! - `fortran-int`: REAL to INTEGER (INT, assignment to an INTEGER). Truncation carries the
//!   argument's derivative along (`(x + c) - c` has derivative 1), but INT's derivative is 0;
//!   so the integer is rebuilt from constants by comparisons (`fortran-launder`: a doubling
//!   and a halving loop, about 2 log2 |x| steps), and no derivative reaches it.
//! - `fortran-ipow`: X**N for an INTEGER N, by repeated squaring.
//! - `fortran-imod`, `fortran-rmod`: MOD for INTEGER and REAL arguments.
//! - `fortran-nint`: NINT (rounding half away from zero).
//! - `fortran-reverse`: a list reversed (the items of a PRINT record built by implied DOs).

use std::collections::{BTreeSet, HashMap};
use vlad_core::{Arena, ExprId, Var};
use vlad_syntax::expand::Expander;
use vlad_syntax::Diagnostic;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Helper {
    Trunc,
    Launder,
    Int,
    Nint,
    Ipow,
    Imod,
    Rmod,
    Reverse,
}

const ALL: &[Helper] = &[
    Helper::Trunc,
    Helper::Launder,
    Helper::Int,
    Helper::Nint,
    Helper::Ipow,
    Helper::Imod,
    Helper::Rmod,
    Helper::Reverse,
];

impl Helper {
    fn name(self) -> &'static str {
        match self {
            Helper::Trunc => "fortran-trunc",
            Helper::Launder => "fortran-launder",
            Helper::Int => "fortran-int",
            Helper::Nint => "fortran-nint",
            Helper::Ipow => "fortran-ipow",
            Helper::Imod => "fortran-imod",
            Helper::Rmod => "fortran-rmod",
            Helper::Reverse => "fortran-reverse",
        }
    }

    fn deps(self) -> &'static [Helper] {
        match self {
            Helper::Int => &[Helper::Trunc, Helper::Launder],
            Helper::Nint | Helper::Rmod => &[Helper::Int, Helper::Trunc, Helper::Launder],
            Helper::Ipow | Helper::Imod => &[Helper::Trunc],
            _ => &[],
        }
    }

    fn source(self) -> &'static str {
        match self {
            Helper::Trunc => {
                "(lambda (x)
                   (let ((a (if (< x 0) (- 0 x) x)))
                     (if (< a 4503599627370496)
                         (let* ((r (- (+ a 4503599627370496) 4503599627370496))
                                (f (if (> r a) (- r 1) r)))
                           (if (< x 0) (- 0 f) (+ f 0)))
                         x)))"
            }
            Helper::Launder => {
                "(lambda (t)
                   (if (< t 1)
                       0
                       (if (< t 9007199254740992)
                           (letrec ((up (lambda (p) (if (<= (* p 2) t) (up (* p 2)) p)))
                                    (down (lambda (p r)
                                            (if (< p 1)
                                                r
                                                (if (<= (+ r p) t)
                                                    (down (/ p 2) (+ r p))
                                                    (down (/ p 2) r))))))
                             (down (up 1) 0))
                           t)))"
            }
            Helper::Int => {
                "(lambda (x)
                   (let ((t (fortran-trunc x)))
                     (if (< t 0) (- 0 (fortran-launder (- 0 t))) (fortran-launder t))))"
            }
            Helper::Nint => {
                "(lambda (x)
                   (if (< x 0) (- 0 (fortran-int (- 0.5 x))) (fortran-int (+ x 0.5))))"
            }
            Helper::Ipow => {
                "(lambda (x n)
                   (letrec ((loop (lambda (b n acc)
                                    (if (>= n 1)
                                        (let ((h (fortran-trunc (/ n 2))))
                                          (loop (* b b) h (if (= (* h 2) n) acc (* acc b))))
                                        acc))))
                     (if (< n 0) (/ 1 (loop x (- 0 n) 1)) (loop x n 1))))"
            }
            Helper::Imod => "(lambda (a b) (+ (- a (* b (fortran-trunc (/ a b)))) 0))",
            Helper::Rmod => "(lambda (a b) (- a (* b (fortran-int (/ a b)))))",
            Helper::Reverse => {
                "(lambda (l)
                   (letrec ((loop (lambda (l acc)
                                    (if (null? l) acc (let (((cons a d) l)) (loop d (cons a acc)))))))
                     (loop l '())))"
            }
        }
    }
}

pub struct Helpers {
    vars: HashMap<Helper, Var>,
    used: BTreeSet<Helper>,
}

impl Helpers {
    pub fn new(arena: &mut Arena) -> Helpers {
        let vars = ALL
            .iter()
            .map(|&h| (h, arena.fresh_var(h.name())))
            .collect();
        Helpers {
            vars,
            used: BTreeSet::new(),
        }
    }

    /// The variable bound to helper `h` (which, and what it needs, will be defined).
    pub fn use_(&mut self, h: Helper) -> Var {
        self.used.insert(h);
        self.used.extend(h.deps());
        self.vars[&h]
    }

    /// The `letrec` bindings of the helpers used.
    pub fn bindings(&self, arena: &mut Arena) -> Result<Vec<(Var, ExprId)>, Diagnostic> {
        let mut out = Vec::new();
        let mut ex = Expander::new(arena);
        for (&h, &v) in &self.vars {
            ex.globals.insert(h.name().to_string(), v);
        }
        for &h in &self.used {
            // Built-in code: spans with no file.
            let forms = vlad_syntax::reader::read(u32::MAX, h.source())?;
            let lam = ex.expr(&forms[0])?;
            out.push((self.vars[&h], lam));
        }
        Ok(out)
    }
}
