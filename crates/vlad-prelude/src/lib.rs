//! The AD prelude: the forward and reverse versions of the primitives, as Core.
//!
//! A primitive bundled (`j*`) or reverse-transformed (`*j`) becomes a closure over its
//! *version*, a lambda written in VLAD: base-level code whose parameter carries the tag, so that
//! the closure is a value of its level, and transforming it again is the ordinary closure
//! transform (nesting needs no special case; docs/decisions.md). The versions of the
//! differentiable primitives are generated from one table of partial derivatives
//! (`derivatives`); those of the I/O and array primitives and the AD operators, which only
//! rearrange data, are written out below or generated from their kind. `build` and `ifold` are
//! defined in VLAD (`ARRAY_DEFINITIONS`), and their versions are the transforms of those
//! definitions.
//!
//! [`load`] expands all of it into a program's arena once; the evaluator and the flow analysis
//! share the result (`vlad_core::Prelude`), so that both name the same code for the same
//! primitive's version.

pub mod derivatives;

use derivatives::DERIVATIVES;
use std::collections::HashMap;
use vlad_core::{Arena, ExprId, Prelude, Prim, Tag, Tags};

/// The forward versions of the primitives that are not differentiable functions of reals, in
/// VLAD. Each takes the forward-tagged argument `x`; the rearranging operators follow
/// `((j* f) x) = (bundle (f (primal x)) (f (tangent x)))` (`REARRANGING`).
const FORWARD_STRUCTURAL: &str = r#"
(define write-real (lambda (x) (let ((p (write-real (primal x)))) x)))
(define write (lambda (x) (let ((p (write (primal x)))) x)))
(define read-real (lambda (x) (let ((r (read-real))) (bundle r (perturb 0)))))
(define get (lambda ((%forward-cons a i)) (get a (primal i))))
(define array-length (lambda (a) (bundle (array-length a) (perturb 0))))
(define %build-length (lambda (n) (%build-length n)))
(define %ifold-count (lambda (n) (%ifold-count n)))
(define %list->array-rev (lambda (l) (%list->array-rev l)))
(define %array->list-rev (lambda (a) (%array->list-rev a)))
(define %onehot-sensitivity (lambda ((%forward-cons a (%forward-cons k s))) (let ((j (primal k)))
  (bundle (%onehot-sensitivity (primal a) j (primal s))
          (perturb (%onehot-sensitivity (unperturb (tangent a)) j (unperturb (tangent s))))))))
;; The call stays a `checkpoint`, so that reverse mode over forward mode still recomputes it.
(define checkpoint (lambda ((%forward-cons f x)) (checkpoint f x)))
;; A tangent is zero if both its parts are. Only the forward derivative rules ask, to skip a
;; zero tangent, and only in an `if`: the answer is a plain boolean in every version and at
;; every level of nesting, never a forward value (a bundle of booleans would cost a test of its
;; shape at every step of nested forward mode).
(define %zero-tangent? (lambda (x)
  (let ((r (%zero-tangent? (primal x)))) (if r (%zero-tangent? (unperturb (tangent x))) r))))
;; A lazy zero only if both parts are: a sweep skipped on it must not drop a tangent.
(define %lazy-zero? (lambda (x)
  (let ((r (if (%lazy-zero? (primal x)) (%lazy-zero? (unperturb (tangent x))) #f)))
    (bundle r (perturb (zero r))))))
(define %ifold-tape (lambda ((%forward-cons f (%forward-cons init n)))
  (let* (((cons acc outs)
          (%ifold-tape (lambda (acc i)
                         (let (((%forward-cons next out) (f (%forward-cons acc (bundle i (perturb 0))))))
                           (cons next out)))
                       init (primal n)))
         (m (array-length outs)))
    (%forward-cons acc (bundle (build m (lambda (k) (primal (get outs k))))
                               (perturb (build m (lambda (k) (unperturb (tangent (get outs k)))))))))))
"#;

/// The reverse versions of the primitives that are not differentiable functions of reals (paper
/// 003 §4), in VLAD. Each takes the reverse-tagged argument `x` and returns `(cons y~
/// backpropagator)`; a backpropagator takes the sensitivity of the result and returns the
/// sensitivity-tagged `(cons '() x-bar)` (a primitive closes over nothing).
const REVERSE_STRUCTURAL: &str = r#"
(define write-real (lambda (x) (let ((w (write-real (*j-inverse x))))
  (cons x (lambda (sy) (sensitize (cons '() (unsensitize sy))))))))
(define write (lambda (x) (let ((w (write (*j-inverse x))))
  (cons x (lambda (sy) (sensitize (cons '() (unsensitize sy))))))))
(define read-real (lambda (x) (let ((r (read-real)))
  (cons (*j r) (lambda (sy) (sensitize (cons '() '())))))))
(define zero (lambda (x) (let ((p (*j-inverse x)))
  (cons (*j (zero p)) (lambda (sy) (sensitize (cons '() (%sensitivity-zero p))))))))
(define %sensitivity-zero (lambda (x) (let ((p (*j-inverse x)))
  (cons (*j (%sensitivity-zero p)) (lambda (sy) (sensitize (cons '() (%sensitivity-zero p))))))))
(define %zero-sensitivity (lambda (x) (let ((p (*j-inverse x)))
  (cons (*j (%zero-sensitivity p)) (lambda (sy) (sensitize (cons '() (%sensitivity-zero p))))))))
(define plus (lambda (x) (let (((cons a b) (*j-inverse x)))
  (cons (*j (plus a b)) (lambda (sy) (let ((s (unsensitize sy))) (sensitize (cons '() (cons s s)))))))))
(define *j (lambda (x) (let ((p (*j-inverse x)))
  (cons (*j (*j p)) (lambda (sy) (sensitize (cons '() (*j-inverse (unsensitize sy)))))))))
(define *j-inverse (lambda (x) (let ((p (*j-inverse x)))
  (cons (*j (*j-inverse p)) (lambda (sy) (sensitize (cons '() (*j (unsensitize sy)))))))))
(define perturb (lambda (x) (let ((p (*j-inverse x)))
  (cons (*j (perturb p)) (lambda (sy) (sensitize (cons '() (unperturb (unsensitize sy)))))))))
(define unperturb (lambda (x) (let ((p (*j-inverse x)))
  (cons (*j (unperturb p)) (lambda (sy) (sensitize (cons '() (perturb (unsensitize sy)))))))))
(define sensitize (lambda (x) (let ((p (*j-inverse x)))
  (cons (*j (sensitize p)) (lambda (sy) (sensitize (cons '() (unsensitize (unsensitize sy)))))))))
(define unsensitize (lambda (x) (let ((p (*j-inverse x)))
  (cons (*j (unsensitize p)) (lambda (sy) (sensitize (cons '() (sensitize (unsensitize sy)))))))))
(define primal (lambda (x) (let ((p (*j-inverse x)))
  (cons (*j (primal p))
        (lambda (sy) (sensitize (cons '() (bundle (unsensitize sy) (%sensitivity-zero (tangent p))))))))))
(define tangent (lambda (x) (let ((p (*j-inverse x)))
  (cons (*j (tangent p))
        (lambda (sy) (sensitize (cons '() (bundle (%sensitivity-zero (primal p)) (unsensitize sy)))))))))
(define if-procedure
  (lambda ((%reverse-cons c (%reverse-cons t e)))
    (if c
        (let (((cons y bp) (t (*j '()))))
          (cons y (lambda (sy)
                    (let (((%sensitivity-cons tbar ubar) (bp sy)))
                      (%sensitivity-cons (sensitize '())
                        (%sensitivity-cons (%zero-sensitivity c)
                          (%sensitivity-cons tbar (%zero-sensitivity e))))))))
        (let (((cons y bp) (e (*j '()))))
          (cons y (lambda (sy)
                    (let (((%sensitivity-cons ebar ubar) (bp sy)))
                      (%sensitivity-cons (sensitize '())
                        (%sensitivity-cons (%zero-sensitivity c)
                          (%sensitivity-cons (%zero-sensitivity t) ebar))))))))))
(define %shallow-primal (lambda (x)
  (cons (*j (%shallow-primal (*j-inverse x)))
        (lambda (sy) (%sensitivity-cons (sensitize '()) (%zero-sensitivity x))))))
(define get (lambda ((%reverse-cons a i)) (let ((k (*j-inverse i)))
  (cons (get a k)
        (lambda (sy) (%sensitivity-cons (sensitize '())
                       (%sensitivity-cons (%onehot-sensitivity a k sy) (%zero-sensitivity i))))))))
(define array-length (lambda (a)
  (cons (*j (array-length a)) (lambda (sy) (%sensitivity-cons (sensitize '()) (%zero-sensitivity a))))))
(define %build-length (lambda (n)
  (cons (%build-length n) (lambda (sy) (%sensitivity-cons (sensitize '()) sy)))))
(define %ifold-count (lambda (n)
  (cons (%ifold-count n) (lambda (sy) (%sensitivity-cons (sensitize '()) sy)))))
(define %list->array-rev (lambda (l)
  (cons (%list->array-rev l) (lambda (sy) (%sensitivity-cons (sensitize '()) (%array->list-rev sy))))))
(define %array->list-rev (lambda (a)
  (cons (%array->list-rev a) (lambda (sy) (%sensitivity-cons (sensitize '()) (%list->array-rev sy))))))
(define %lazy-zero? (lambda (x)
  (cons (*j (%lazy-zero? (*j-inverse x))) (lambda (sy) (%sensitivity-cons (sensitize '()) (%zero-sensitivity x))))))
(define %onehot-sensitivity (lambda ((%reverse-cons a (%reverse-cons k s))) (let ((j (*j-inverse k)))
  (cons (*j (%onehot-sensitivity (*j-inverse a) j (*j-inverse s)))
        (lambda (ss) (%sensitivity-cons (sensitize '())
                       (%sensitivity-cons (%zero-sensitivity a)
                         (%sensitivity-cons (%zero-sensitivity k) (get ss j)))))))))
;; The result computed by the primal procedure, keeping no tape; the backpropagator runs the
;; reverse procedure again (its tape made then, and dropped once swept).
(define checkpoint (lambda ((%reverse-cons f x))
  (cons (*j (checkpoint (*j-inverse f) (*j-inverse x)))
        (lambda (sy) (let (((cons y bp) (f x))) (%sensitivity-cons (sensitize '()) (bp sy)))))))
(define bundle (lambda (x) (let (((cons a t) (*j-inverse x)))
  (cons (*j (bundle a t))
        (lambda (sy) (let ((s (unsensitize sy))) (sensitize (cons '() (cons (primal s) (tangent s))))))))))
(define %accumulate (lambda (x) (let (((cons a b) (*j-inverse x)))
  (cons (*j (%accumulate a b)) (lambda (sy) (let ((s (unsensitize sy))) (sensitize (cons '() (cons s s)))))))))
(define %dense (lambda (x) (let ((p (*j-inverse x)))
  (cons (*j (%dense p)) (lambda (sy) (sensitize (cons '() (unsensitize sy))))))))
(define build (lambda ((%reverse-cons n f))
  (let* ((m (*j-inverse (%build-length n)))
         (tape (build m (lambda (i) (f (*j i))))))
    (cons (*j (build m (lambda (i) (let (((cons y bp) (get tape i))) (*j-inverse y)))))
          (lambda (sy)
            (if (%lazy-zero? sy)
                (%sensitivity-cons (sensitize '())
                  (%sensitivity-cons (%zero-sensitivity n) (%zero-sensitivity f)))
                (let ((sy (%dense sy)))
                  (%sensitivity-cons (sensitize '())
                    (%sensitivity-cons (%zero-sensitivity n)
                      (ifold (lambda (fbar k)
                               (let* ((i (- (- m 1) k))
                                      ((cons y bp) (get tape i))
                                      ((%sensitivity-cons fb ib) (bp (get sy i))))
                                 (%accumulate fbar fb)))
                             (%zero-sensitivity f) m))))))))))
(define ifold (lambda ((%reverse-cons f (%reverse-cons init n)))
  (let* ((m (*j-inverse (%ifold-count n)))
         ((cons acc tape) (%ifold-tape (lambda (acc i) (f (%reverse-cons acc (*j i)))) init m)))
    (cons acc
          (lambda (sy)
            (if (%lazy-zero? sy)
                (%sensitivity-cons (sensitize '())
                  (%sensitivity-cons (%zero-sensitivity f)
                    (%sensitivity-cons (%zero-sensitivity init) (%zero-sensitivity n))))
                (let (((cons fbar abar)
                       (ifold (lambda ((cons fbar abar) k)
                                (let* (((%sensitivity-cons fb xb) ((get tape (- (- m 1) k)) abar))
                                       ((%sensitivity-cons ab ib) xb))
                                  (cons (%accumulate fbar fb) ab)))
                              (cons (%zero-sensitivity f) sy) m)))
                  (%sensitivity-cons (sensitize '())
                    (%sensitivity-cons fbar (%sensitivity-cons abar (%zero-sensitivity n)))))))))))
(define %ifold-tape (lambda ((%reverse-cons f (%reverse-cons init n)))
  (let* ((m (*j-inverse (%ifold-count n)))
         ((cons acc tape)
          (%ifold-tape (lambda (acc i)
                         (let* (((cons r bp) (f (%reverse-cons acc (*j i))))
                                ((%reverse-cons next out) r))
                           (cons next (cons out bp))))
                       init m)))
    (cons (%reverse-cons acc (*j (build m (lambda (k) (let (((cons out bp) (get tape k))) (*j-inverse out))))))
          (lambda (sy)
            (if (%lazy-zero? sy)
                (%sensitivity-cons (sensitize '())
                  (%sensitivity-cons (%zero-sensitivity f)
                    (%sensitivity-cons (%zero-sensitivity init) (%zero-sensitivity n))))
                (let* (((%sensitivity-cons sacc souts) sy)
                       (souts (%dense souts))
                       ((cons fbar abar)
                        (ifold (lambda ((cons fbar abar) k)
                                 (let* ((i (- (- m 1) k))
                                        ((cons out bp) (get tape i))
                                        ((%sensitivity-cons fb xb) (bp (%sensitivity-cons abar (get souts i))))
                                        ((%sensitivity-cons ab ib) xb))
                                   (cons (%accumulate fbar fb) ab)))
                               (cons (%zero-sensitivity f) sacc) m)))
                  (%sensitivity-cons (sensitize '())
                    (%sensitivity-cons fbar (%sensitivity-cons abar (%zero-sensitivity n)))))))))))
"#;

/// `build` and `ifold` (paper 002), defined in VLAD: loops that call the argument procedure in
/// index order. Their forward and reverse versions are the transforms of these definitions, so
/// D-Build and D-IFold of paper 002 Fig. 6 (and their reverse counterparts) are not special
/// cases anywhere. `build` accumulates `(f i)` on a list, last first, and turns it into an
/// array at the end.
pub const ARRAY_DEFINITIONS: &str = r#"
(define build (lambda ((cons n f))
  (let ((m (%build-length n)))
    (letrec ((loop (lambda ((cons i acc))
                     (if (< i m) (loop (cons (+ i 1) (cons (f i) acc))) acc))))
      (%list->array-rev (loop (cons 0 '())))))))
(define ifold (lambda ((cons f (cons init n)))
  (let ((m (%ifold-count n)))
    (letrec ((loop (lambda ((cons acc i))
                     (if (< i m) (loop (cons (f acc i) (+ i 1))) acc))))
      (loop (cons init 0))))))
(define %ifold-tape (lambda ((cons f (cons init n)))
  (let ((m (%ifold-count n)))
    (letrec ((loop (lambda ((cons acc (cons i outs)))
                     (if (< i m)
                         (let (((cons next out) (f acc i)))
                           (loop (cons next (cons (+ i 1) (cons out outs)))))
                         (cons acc (%list->array-rev outs))))))
      (loop (cons init (cons 0 '())))))))
"#;

/// Primitives whose forward version is `j*` of the primitive applied to the primal: the
/// comparisons and predicates, which see only the primal and give no tangent.
pub const PRIMAL_ONLY: &[Prim] = &[
    Prim::Eq,
    Prim::Lt,
    Prim::Gt,
    Prim::Le,
    Prim::Ge,
    Prim::IsZero,
    Prim::IsPositive,
    Prim::IsNegative,
    Prim::IsNull,
    Prim::IsBoolean,
    Prim::IsReal,
    Prim::IsPair,
    Prim::IsProcedure,
    Prim::IsPerturbation,
    Prim::IsForward,
    Prim::IsSensitivity,
    Prim::IsReverse,
];

/// The AD operators, which only rearrange data: their forward version applies them to the primal
/// and to the tangent.
pub const REARRANGING: &[Prim] = &[
    Prim::Zero,
    Prim::Perturb,
    Prim::Unperturb,
    Prim::Primal,
    Prim::Tangent,
    Prim::Bundle,
    Prim::Sensitize,
    Prim::Unsensitize,
    Prim::Plus,
    Prim::StarJ,
    Prim::StarJInverse,
    Prim::ZeroSensR,
    Prim::SZero,
    Prim::ShallowPrimal,
    Prim::Dense,
    Prim::Accumulate,
];

/// The text of the forward prelude: the derivative rules, the structural versions, and the
/// generated ones.
pub fn forward_text() -> String {
    let mut text: String = DERIVATIVES.iter().map(|d| d.forward_definition()).collect();
    text.push_str(FORWARD_STRUCTURAL);
    for p in PRIMAL_ONLY {
        let call = primal_only_call(*p);
        // A predicate needs only the top of its argument's primal: taking the whole primal of a
        // bundled list would cost its length at every test.
        let unwrap = if p.is_comparison() {
            "primal"
        } else {
            "%shallow-primal"
        };
        text.push_str(&format!(
            "(define {} (lambda (x) (let ((p ({unwrap} x))) (let ((r {call})) (bundle r (perturb (zero r)))))))\n",
            p.name()
        ));
    }
    for p in REARRANGING {
        text.push_str(&format!(
            "(define {n} (lambda (x) (bundle ({n} (primal x)) (perturb ({n} (unperturb (tangent x)))))))\n",
            n = p.name()
        ));
    }
    // if-procedure only rearranges and calls: its forward version is the forward transform of
    // its definition in VLAD (`load` transforms it). Its reverse version is written out in
    // REVERSE_STRUCTURAL: the reverse transform turns `if` into calls of the reverse
    // if-procedure itself.
    text.push_str("(define if-procedure (lambda ((cons c (cons t e))) (if c (t) (e))))\n");
    text
}

/// The text of the reverse prelude.
pub fn reverse_text() -> String {
    let mut text: String = DERIVATIVES.iter().map(|d| d.reverse_definition()).collect();
    text.push_str(REVERSE_STRUCTURAL);
    for p in PRIMAL_ONLY {
        let call = primal_only_call(*p);
        // A type predicate looks only at the top of its argument: strip one reverse tag there,
        // not through the whole value (which would cost its size at every test).
        let unwrap = if p.is_comparison() {
            "*j-inverse"
        } else {
            "%shallow-primal"
        };
        text.push_str(&format!(
            "(define {} (lambda (x) (let ((p ({unwrap} x))) (cons (*j {call}) (lambda (sy) (%sensitivity-cons (sensitize '()) (%zero-sensitivity x)))))))\n",
            p.name()
        ));
    }
    // A plain boolean, as in the forward prelude.
    text.push_str(
        "(define %zero-tangent? (lambda (x) (cons (%zero-tangent? (%shallow-primal x)) (lambda (sy) (%sensitivity-cons (sensitize '()) (%zero-sensitivity x))))))\n",
    );
    text
}

/// The primitive applied to the primal `p` (a comparison to its two parts).
fn primal_only_call(p: Prim) -> String {
    let call = if p.is_comparison() {
        "(let (((cons a b) p)) (NAME a b))"
    } else {
        "(NAME p)"
    };
    call.replace("NAME", p.name())
}

/// Expands the prelude into `arena`: the lambdas of every primitive's forward and reverse
/// version, and the definitions of `build` and `ifold`. An error is an internal error (the
/// prelude is fixed text).
pub fn load(arena: &mut Arena) -> Result<Prelude, String> {
    let internal = |m: String| format!("internal error in the prelude: {m}");
    let mut prelude = Prelude::default();
    for (text, tag) in [
        (forward_text(), Tag::Forward),
        (reverse_text(), Tag::Reverse),
    ] {
        for (prim, lam) in expand(arena, &text)? {
            let lam = if prim == Prim::IfProcedure && tag == Tag::Forward {
                arena
                    .transform(lam, tag)
                    .map_err(|e| internal(e.to_string()))?
            } else {
                // Base-level code taking `tag` values: its parameter carries the tag (so its
                // closures are `tag` values), its operations stay at base level.
                let l = arena
                    .retag_parameter(lam, tag)
                    .map_err(|e| internal(e.to_string()))?;
                arena.set_code_level(l, Tags::EMPTY);
                l
            };
            insert(&mut prelude, prim, tag, lam);
        }
    }
    // The versions of the primitives defined in VLAD are the transforms of their definitions,
    // unless the texts above write them out: the reverse `build` and `ifold`, whose transformed
    // definitions would chain one backpropagator per element into the next (a list that the
    // compiled code boxes), keep their elements' backpropagators in an array instead (a
    // `build`, a `%ifold-tape`) and sweep it with an `ifold`; `%ifold-tape`'s versions are
    // written the same way.
    for (prim, lam) in expand(arena, ARRAY_DEFINITIONS)? {
        prelude.base.insert(prim, lam);
        if !prelude.forward.contains_key(&prim) {
            let f = arena
                .transform(lam, Tag::Forward)
                .map_err(|e| internal(e.to_string()))?;
            insert(&mut prelude, prim, Tag::Forward, f);
        }
        if !prelude.reverse.contains_key(&prim) {
            let r = arena
                .reverse_transform(lam, &[], &[])
                .map_err(|e| internal(e.to_string()))?;
            insert(&mut prelude, prim, Tag::Reverse, r);
        }
    }
    Ok(prelude)
}

fn insert(prelude: &mut Prelude, prim: Prim, tag: Tag, lam: ExprId) {
    prelude.versions.insert(lam, (tag, prim));
    match tag {
        Tag::Forward => prelude.forward.insert(prim, lam),
        _ => prelude.reverse.insert(prim, lam),
    };
}

/// The lambdas of the `(define prim (lambda ...))` forms of `text`, untransformed.
fn expand(arena: &mut Arena, text: &str) -> Result<Vec<(Prim, ExprId)>, String> {
    let internal = |m: String| format!("internal error in the prelude: {m}");
    let mut sources = vlad_syntax::SourceMap::builtin();
    let path = std::path::Path::new("<prelude>");
    let forms = vlad_syntax::program::load_str(&mut sources, path, text, &[])
        .map_err(|d| internal(d.message))?;
    let mut out = Vec::new();
    let mut seen = HashMap::new();
    for f in forms {
        let vlad_syntax::program::TopForm::Define(d) = f else {
            continue;
        };
        let items = d.list().ok_or_else(|| internal("a define form".into()))?;
        let name = items[1].symbol().map(String::from).unwrap_or_default();
        let prim = Prim::from_name_internal(&name)
            .ok_or_else(|| internal(format!("`{name}` is not a primitive")))?;
        if seen.insert(prim, ()).is_some() {
            return Err(internal(format!("`{name}` is defined twice")));
        }
        let mut ex = vlad_syntax::expand::Expander::new(arena);
        ex.internal = true;
        let (_, _, lam) = ex.define(items, d.span).map_err(|d| internal(d.message))?;
        out.push((prim, lam));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_primitive_but_the_higher_order_ones_has_both_versions() {
        let mut arena = Arena::default();
        let p = load(&mut arena).expect("the prelude loads");
        for prim in Prim::ALL {
            assert!(p.forward.contains_key(prim), "forward {}", prim.name());
            assert!(p.reverse.contains_key(prim), "reverse {}", prim.name());
            for tag in [Tag::Forward, Tag::Reverse] {
                let lam = p.version(*prim, tag).unwrap();
                assert_eq!(p.version_of(lam), Some((tag, *prim)));
            }
        }
        assert_eq!(p.base.len(), 3);
    }
}
