//! One table of partial derivatives (Futhark's `AD/Derivatives.hs` is the model): each
//! differentiable primitive with its partial derivatives, from which both the forward version
//! (the tangent is the sum of the partials applied to the argument tangents, paper 001 §4) and
//! the reverse version (each argument's sensitivity is its partial applied to the result's
//! sensitivity, paper 003 §4) are written. A rule is written once, for both modes and both
//! engines.
//!
//! A partial is written applied to a *seed* `$` (the tangent or the sensitivity it scales), in
//! the order of operations that fixes the last bits of the result. Where the sum of the
//! partials would round differently from the tangent the forward version has always computed
//! (a difference of two products rather than a sum with a negation, which also differs in the
//! sign of zero), the rule carries that tangent itself (`tangent`).

use vlad_core::Prim;

/// The derivative rule of one primitive of one or two real arguments.
pub struct Derivative {
    pub prim: Prim,
    /// The primal result, over the arguments (`p`, or `x1` and `x2`).
    pub result: &'static str,
    /// Whether the partials use the result, as `y` (it is then bound once, before both).
    pub uses_result: bool,
    /// Bindings the reverse partials share (computed once per backpropagator call).
    pub shared: &'static [(&'static str, &'static str)],
    /// Each argument's partial derivative applied to the seed `$`.
    pub partials: &'static [&'static str],
    /// The tangent (over `d`, or `d1` and `d2`), where it is not the sum of the partials.
    pub tangent: Option<&'static str>,
}

const fn binary(
    prim: Prim,
    result: &'static str,
    shared: &'static [(&'static str, &'static str)],
    partials: &'static [&'static str; 2],
    tangent: Option<&'static str>,
) -> Derivative {
    Derivative {
        prim,
        result,
        uses_result: false,
        shared,
        partials,
        tangent,
    }
}

const fn unary(
    prim: Prim,
    result: &'static str,
    uses_result: bool,
    partial: &'static [&'static str; 1],
) -> Derivative {
    Derivative {
        prim,
        result,
        uses_result,
        shared: &[],
        partials: partial,
        tangent: None,
    }
}

/// The rules. `real` is the identity that hides its value from the flow analysis: its
/// derivative is the seed.
pub const DERIVATIVES: &[Derivative] = &[
    binary(Prim::Add, "(+ x1 x2)", &[], &["$", "$"], None),
    binary(
        Prim::Sub,
        "(- x1 x2)",
        &[],
        &["$", "(- 0 $)"],
        Some("(- d1 d2)"),
    ),
    binary(Prim::Mul, "(* x1 x2)", &[], &["(* x2 $)", "(* x1 $)"], None),
    binary(
        Prim::Div,
        "(/ x1 x2)",
        &[],
        &["(/ $ x2)", "(- 0 (/ (* x1 $) (* x2 x2)))"],
        Some("(/ (- (* x2 d1) (* x1 d2)) (* x2 x2))"),
    ),
    binary(
        Prim::Atan,
        "(atan x1 x2)",
        &[("d", "(+ (* x1 x1) (* x2 x2))")],
        &["(/ (* x2 $) d)", "(/ (- 0 (* x1 $)) d)"],
        Some("(/ (- (* x2 d1) (* x1 d2)) (+ (* x1 x1) (* x2 x2)))"),
    ),
    unary(Prim::Sqrt, "(sqrt p)", true, &["(/ $ (+ y y))"]),
    unary(Prim::Exp, "(exp p)", true, &["(* y $)"]),
    unary(Prim::Log, "(log p)", false, &["(/ $ p)"]),
    unary(Prim::Sin, "(sin p)", false, &["(* (cos p) $)"]),
    unary(Prim::Cos, "(cos p)", false, &["(- 0 (* (sin p) $))"]),
    unary(Prim::Real, "(real p)", false, &["$"]),
];

/// A partial applied to the seed `seed`.
fn apply(partial: &str, seed: &str) -> String {
    partial.replace('$', seed)
}

impl Derivative {
    fn is_binary(&self) -> bool {
        self.partials.len() == 2
    }

    /// The body of the primal: the result bound to `y` where the partials use it, then `k`
    /// applied to the result's expression.
    fn with_result(&self, k: impl FnOnce(&str) -> String) -> String {
        if self.uses_result {
            format!("(let ((y {})) {})", self.result, k("y"))
        } else {
            k(self.result)
        }
    }

    /// The tangent of the result, over the argument tangents `d` or `d1`, `d2`.
    fn tangent(&self) -> String {
        if let Some(t) = self.tangent {
            return t.to_string();
        }
        match self.partials {
            [p] => apply(p, "d"),
            [p1, p2] => format!("(+ {} {})", apply(p1, "d1"), apply(p2, "d2")),
            _ => unreachable!("one or two arguments"),
        }
    }

    /// Whether the forward version skips zero tangents: a zero tangent contributes nothing to
    /// the result's, where IEEE arithmetic would make its product with an infinite or NaN
    /// partial a NaN (docs/decisions.md, "A zero tangent contributes nothing"). Sums and
    /// differences of tangents (`+`, `-`, `real`) need no test: zeros give zero there.
    fn skips_zero_tangents(&self) -> bool {
        !matches!(self.prim, Prim::Add | Prim::Sub | Prim::Real)
    }

    /// A binary rule's tangent when only `d1` is not zero, and when only `d2` is not: that
    /// argument's partial applied to its tangent (the shared bindings written out).
    fn one_sided(&self) -> [String; 2] {
        let [p1, p2] = self.partials else {
            unreachable!("a binary rule")
        };
        [apply(p1, "d1"), apply(p2, "d2")].map(|t| {
            let mut t = parse(&t);
            for (name, e) in self.shared {
                t = t.substituted(name, &parse(e));
            }
            t.to_string()
        })
    }

    /// The forward version's tangent: `tangent`, with the zero tangents' terms skipped where
    /// the rule multiplies or divides (the zero itself where every tangent is zero).
    fn forward_tangent(&self) -> String {
        let full = self.tangent();
        if !self.skips_zero_tangents() {
            return full;
        }
        let mut forms = if self.is_binary() {
            let [t1, t2] = self.one_sided();
            vec![t1, t2, full]
        } else {
            vec![full]
        };
        // What the tangent computes from the primal alone is bound once, before the tests:
        // the forms that use it share it (`x2 x2` of `/`), and it is dead code where every
        // tangent is known zero.
        let mut shared: Vec<String> = Vec::new();
        for f in &forms {
            parse(f).primal_only(&mut shared);
        }
        shared.sort_by_key(|t| std::cmp::Reverse(t.len()));
        let names: Vec<String> = (0..shared.len()).map(|i| format!("k{i}")).collect();
        for f in forms.iter_mut() {
            for (t, name) in shared.iter().zip(&names) {
                *f = f.replace(t.as_str(), name);
            }
        }
        let tests = match forms.as_slice() {
            [t1, t2, full] => format!(
                "(if (%zero-tangent? d1) (if (%zero-tangent? d2) d1 {t2}) \
                 (if (%zero-tangent? d2) {t1} {full}))"
            ),
            [full] => format!("(if (%zero-tangent? d) d {full})"),
            _ => unreachable!("one or three forms"),
        };
        if shared.is_empty() {
            return tests;
        }
        let bindings: Vec<String> = names
            .iter()
            .zip(&shared)
            .map(|(n, t)| format!("({n} {t})"))
            .collect();
        format!("(let ({}) {tests})", bindings.join(" "))
    }

    /// `(define PRIM (lambda (x) ...))`: the forward version, which takes a forward value.
    pub fn forward_definition(&self) -> String {
        let unpack = if self.is_binary() {
            "((cons x1 x2) (primal x)) ((cons d1 d2) (unperturb (tangent x)))"
        } else {
            "(p (primal x)) (d (unperturb (tangent x)))"
        };
        let tangent = self.forward_tangent();
        let body = self.with_result(|y| format!("(bundle {y} (perturb {tangent}))"));
        format!(
            "(define {} (lambda (x) (let ({unpack}) {body})))\n",
            self.prim.name()
        )
    }

    /// `(define PRIM (lambda (x) ...))`: the reverse version, which takes a reverse value and
    /// returns the reverse result with its backpropagator.
    pub fn reverse_definition(&self) -> String {
        let unpack = if self.is_binary() {
            "((cons x1 x2) (*j-inverse x))"
        } else {
            "(p (*j-inverse x))"
        };
        let mut bindings = String::from("(s (unsensitize sy))");
        for (name, e) in self.shared {
            bindings.push_str(&format!(" ({name} {e})"));
        }
        let partials: Vec<String> = self.partials.iter().map(|p| apply(p, "s")).collect();
        let sens = match partials.as_slice() {
            [p] => p.clone(),
            [p1, p2] => format!("(cons {p1} {p2})"),
            _ => unreachable!("one or two arguments"),
        };
        let backprop = format!("(lambda (sy) (let ({bindings}) (sensitize (cons '() {sens}))))");
        let body = self.with_result(|y| format!("(cons (*j {y}) {backprop})"));
        format!(
            "(define {} (lambda (x) (let ({unpack}) {body})))\n",
            self.prim.name()
        )
    }
}

/// An expression of a rule, parsed to be evaluated on reals: the evaluator's fast path for
/// forward arithmetic on plain bundles of reals computes the same operations in the same order
/// as the forward version's code, from the same rule.
#[derive(Clone, Debug)]
enum Term {
    Num(f64),
    Var(&'static str),
    App(Prim, Vec<Term>),
}

/// Parses a rule's expression (its own small syntax: applications of arithmetic primitives to
/// numerals and names).
fn parse(text: &str) -> Term {
    fn go<'t>(toks: &mut std::iter::Peekable<impl Iterator<Item = &'t str>>) -> Term {
        match toks.next() {
            Some("(") => {
                let op = toks.next().expect("an operator");
                let prim = Prim::from_name(op).expect("a primitive");
                let mut args = Vec::new();
                while toks.peek() != Some(&")") {
                    args.push(go(toks));
                }
                toks.next();
                Term::App(prim, args)
            }
            Some(t) => match t.parse::<f64>() {
                Ok(x) => Term::Num(x),
                Err(_) => Term::Var(leak(t)),
            },
            None => panic!("a rule's expression ends early"),
        }
    }
    let spaced = text.replace('(', " ( ").replace(')', " ) ");
    let mut toks = spaced.split_whitespace().peekable();
    go(&mut toks)
}

/// Names live as long as the table (a handful, parsed once).
fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

impl std::fmt::Display for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Term::Num(x) => write!(f, "{x}"),
            Term::Var(v) => write!(f, "{v}"),
            Term::App(p, args) => {
                write!(f, "({}", p.name())?;
                for a in args {
                    write!(f, " {a}")?;
                }
                write!(f, ")")
            }
        }
    }
}

impl Term {
    /// Whether the name `name` occurs in `self`.
    fn mentions(&self, name: &str) -> bool {
        match self {
            Term::Num(_) => false,
            Term::Var(v) => *v == name,
            Term::App(_, args) => args.iter().any(|a| a.mentions(name)),
        }
    }

    /// `self` with the name `name` replaced by `by`.
    fn substituted(&self, name: &str, by: &Term) -> Term {
        match self {
            Term::Var(v) if *v == name => by.clone(),
            Term::App(p, args) => {
                Term::App(*p, args.iter().map(|a| a.substituted(name, by)).collect())
            }
            _ => self.clone(),
        }
    }

    fn reads_a_tangent(&self) -> bool {
        ["d", "d1", "d2"].iter().any(|d| self.mentions(d))
    }

    /// The largest applications in `self` that read no tangent, written out, added to `out`
    /// (once each).
    fn primal_only(&self, out: &mut Vec<String>) {
        let Term::App(_, args) = self else { return };
        if !self.reads_a_tangent() {
            let text = self.to_string();
            if !out.contains(&text) {
                out.push(text);
            }
        } else {
            for a in args {
                a.primal_only(out);
            }
        }
    }

    fn eval(&self, env: &[(&str, f64)]) -> f64 {
        match self {
            Term::Num(x) => *x,
            Term::Var(v) => env
                .iter()
                .rev()
                .find(|(n, _)| n == v)
                .map(|(_, x)| *x)
                .expect("a bound name"),
            Term::App(p, args) => {
                let x = args[0].eval(env);
                let y = args.get(1).map_or(0.0, |a| a.eval(env));
                match p {
                    // The identity that hides a value from the analysis.
                    Prim::Real => x,
                    _ => p.arith(x, y),
                }
            }
        }
    }
}

/// A rule's forward computation, parsed: the result and its tangent (and, where the rule skips
/// zero tangents, its tangents from `d1` alone and from `d2` alone).
struct Forward {
    result: Term,
    tangent: Term,
    skips_zero_tangents: bool,
    one_sided: Option<[Term; 2]>,
}

fn forward_terms() -> &'static [(Prim, bool, Forward)] {
    static TERMS: std::sync::OnceLock<Vec<(Prim, bool, Forward)>> = std::sync::OnceLock::new();
    TERMS.get_or_init(|| {
        DERIVATIVES
            .iter()
            .map(|d| {
                let f = Forward {
                    result: parse(d.result),
                    tangent: parse(&d.tangent()),
                    skips_zero_tangents: d.skips_zero_tangents(),
                    one_sided: d.is_binary().then(|| d.one_sided().map(|t| parse(&t))),
                };
                (d.prim, d.uses_result, f)
            })
            .collect()
    })
}

/// The forward version of `p` on plain dual numbers (`(primal, tangent)` of each argument), as
/// the prelude computes it: the result and its tangent. `None` if `p` has no rule (or the
/// wrong number of arguments).
pub fn forward_dual(p: Prim, args: &[(f64, f64)]) -> Option<(f64, f64)> {
    let (_, uses_result, f) = forward_terms().iter().find(|(q, ..)| *q == p)?;
    let mut env: Vec<(&str, f64)> = match args {
        [(x, d)] => vec![("p", *x), ("d", *d)],
        [(x1, d1), (x2, d2)] => vec![("x1", *x1), ("x2", *x2), ("d1", *d1), ("d2", *d2)],
        _ => return None,
    };
    if (env.len() == 2) != (DERIVATIVES.iter().find(|d| d.prim == p)?.partials.len() == 1) {
        return None;
    }
    let y = f.result.eval(&env);
    if *uses_result {
        env.push(("y", y));
    }
    // The tests of the forward version, in its order.
    let tangent = match (f.skips_zero_tangents, args, &f.one_sided) {
        (true, [(_, d)], _) if *d == 0.0 => return Some((y, *d)),
        (true, [(_, d1), (_, d2)], Some([t1, t2])) => match (*d1 == 0.0, *d2 == 0.0) {
            (true, true) => return Some((y, *d1)),
            (true, false) => t2,
            (false, true) => t1,
            (false, false) => &f.tangent,
        },
        _ => &f.tangent,
    };
    Some((y, tangent.eval(&env)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_versions_come_from_one_rule() {
        let mul = DERIVATIVES.iter().find(|d| d.prim == Prim::Mul).unwrap();
        assert_eq!(
            mul.forward_definition(),
            "(define * (lambda (x) (let (((cons x1 x2) (primal x)) ((cons d1 d2) (unperturb \
             (tangent x)))) (bundle (* x1 x2) (perturb (if (%zero-tangent? d1) (if \
             (%zero-tangent? d2) d1 (* x1 d2)) (if (%zero-tangent? d2) (* x2 d1) (+ (* x2 d1) \
             (* x1 d2)))))))))\n"
        );
        assert_eq!(
            mul.reverse_definition(),
            "(define * (lambda (x) (let (((cons x1 x2) (*j-inverse x))) (cons (*j (* x1 x2)) \
             (lambda (sy) (let ((s (unsensitize sy))) (sensitize (cons '() (cons (* x2 s) \
             (* x1 s))))))))))\n"
        );
        let sqrt = DERIVATIVES.iter().find(|d| d.prim == Prim::Sqrt).unwrap();
        assert!(sqrt.forward_definition().contains(
            "(let ((y (sqrt p))) (bundle y (perturb (let ((k0 (+ y y))) (if (%zero-tangent? d) d (/ d k0))))))"
        ));
        assert!(sqrt
            .reverse_definition()
            .contains("(let ((y (sqrt p))) (cons (*j y) (lambda (sy) (let ((s (unsensitize sy))) (sensitize (cons '() (/ s (+ y y))))))))"));
    }

    #[test]
    fn the_fast_forward_path_computes_the_rule_in_its_order() {
        let (y, dy) = forward_dual(Prim::Div, &[(3.0, 0.5), (7.0, -2.0)]).unwrap();
        assert_eq!(y.to_bits(), (3.0f64 / 7.0).to_bits());
        assert_eq!(
            dy.to_bits(),
            ((7.0 * 0.5 - 3.0 * -2.0) / (7.0f64 * 7.0)).to_bits()
        );
        let (y, dy) = forward_dual(Prim::Sqrt, &[(2.0, 1.5)]).unwrap();
        assert_eq!(y, 2f64.sqrt());
        assert_eq!(dy.to_bits(), (1.5 / (2f64.sqrt() + 2f64.sqrt())).to_bits());
        // The sign of zero of a difference (`-0 - 0` is `-0`; `-0 + (0 - 0)` would be `0`).
        let (_, dy) = forward_dual(Prim::Sub, &[(1.0, -0.0), (1.0, 0.0)]).unwrap();
        assert!(dy == 0.0 && dy.is_sign_negative());
        assert_eq!(forward_dual(Prim::Sqrt, &[(1.0, 1.0), (1.0, 1.0)]), None);
        assert_eq!(forward_dual(Prim::Lt, &[(1.0, 1.0), (1.0, 1.0)]), None);
    }

    #[test]
    fn a_zero_tangent_contributes_nothing() {
        let inf = f64::INFINITY;
        // IEEE arithmetic would make `inf * 0` of the zero tangent a NaN.
        assert_eq!(
            forward_dual(Prim::Mul, &[(inf, 1.0), (2.0, 0.0)]),
            Some((inf, 2.0))
        );
        assert_eq!(
            forward_dual(Prim::Mul, &[(2.0, 0.0), (inf, 1.0)]),
            Some((inf, 2.0))
        );
        // One tangent: its partial alone (`d1 / x2`, not the two-sided quotient's inf / inf).
        assert_eq!(
            forward_dual(Prim::Div, &[(3.0, 1.0), (inf, 0.0)]),
            Some((0.0, 0.0))
        );
        // Every tangent zero: that zero, whatever the partials.
        let (_, d) = forward_dual(Prim::Log, &[(0.0, -0.0)]).unwrap();
        assert!(d == 0.0 && d.is_sign_negative());
        let (_, d) = forward_dual(Prim::Atan, &[(inf, 0.0), (inf, 0.0)]).unwrap();
        assert_eq!(d.to_bits(), 0f64.to_bits());
        // Sums need no test: a zero and a NaN tangent still give NaN.
        assert!(forward_dual(Prim::Add, &[(1.0, 0.0), (1.0, f64::NAN)])
            .unwrap()
            .1
            .is_nan());
        // Both tangents: the rule's own tangent, in its order.
        let (_, d) = forward_dual(Prim::Div, &[(3.0, 0.5), (7.0, -2.0)]).unwrap();
        assert_eq!(
            d.to_bits(),
            ((7.0 * 0.5 - 3.0 * -2.0) / (7.0f64 * 7.0)).to_bits()
        );
    }

    #[test]
    fn a_one_sided_tangent_reads_only_its_own_tangent() {
        for d in DERIVATIVES.iter().filter(|d| d.is_binary()) {
            let [t1, t2] = d.one_sided();
            let mentions = |t: &str, v: &str| parse(t).mentions(v);
            assert!(
                mentions(&t1, "d1") && !mentions(&t1, "d2"),
                "{}: {t1}",
                d.prim.name()
            );
            assert!(
                mentions(&t2, "d2") && !mentions(&t2, "d1"),
                "{}: {t2}",
                d.prim.name()
            );
            // Every name is bound (the shared bindings written out).
            for t in [&t1, &t2] {
                let env: Vec<(&str, f64)> =
                    ["x1", "x2", "d1", "d2"].iter().map(|n| (*n, 1.5)).collect();
                assert!(parse(t).eval(&env).is_finite(), "{}: {t}", d.prim.name());
            }
        }
    }

    #[test]
    fn every_real_function_has_a_rule() {
        for p in Prim::ALL {
            let has = DERIVATIVES.iter().filter(|d| d.prim == *p).count();
            let expected = usize::from(p.is_unary_real() || p.is_binary_real() || *p == Prim::Real);
            assert_eq!(has, expected, "{}", p.name());
        }
    }
}
