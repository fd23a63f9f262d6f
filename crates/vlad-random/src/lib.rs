//! Random VLAD programs from a seeded grammar, for differential tests of the faster paths
//! (the specialised program, native code) against the evaluator, the oracle: real-valued
//! expressions over closures, pairs, conditionals, loops with known or unknown trip counts,
//! non-tail recursion, `real`, lists of unknown length, `write-real`, forward and reverse
//! derivatives (nested; of functions of pairs and lists, of procedure-valued functions,
//! through procedures passed to procedures), booleans known only at run time in the AD
//! operators (`plus`, `bundle`, a pair holding one differentiated) and, on request, arrays.
//! The grammar keeps domains safe and trip counts small, so that most programs run without
//! error and quickly. `array_kernels` writes programs of another kind: numerical kernels over
//! arrays and their derivatives, at vectors with ties, zeros, infinities.

/// A program of one expression `depth` levels deep, over `lib/ad.vlad` (`(include "ad")`,
/// with the library directory on the include path).
pub fn program(rng: &mut Rng, depth: u32) -> String {
    expression(rng, depth, Arrays::None)
}

/// Where a program may use arrays (`build`, `get`, `ifold`, `array-length`, and loops that
/// carry an array from one step to the next).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Arrays {
    None,
    /// Not inside the procedures a derivative is taken of.
    OutsideDerivatives,
    /// Not inside the procedures a reverse derivative is taken of (nor inside those of a
    /// forward derivative taken inside one).
    OutsideReverse,
    Everywhere,
}

/// A program as `program`, with arrays where `arrays` says.
pub fn expression(rng: &mut Rng, depth: u32, arrays: Arrays) -> String {
    expression_counted(rng, depth, arrays).0
}

/// How many array forms a program has inside procedures a derivative is taken of, and how
/// many `(read-real)`s it has.
#[derive(Clone, Copy, Debug, Default)]
pub struct ArrayCounts {
    /// Inside a forward derivative.
    pub forward: usize,
    /// Inside a reverse derivative.
    pub reverse: usize,
    /// `(read-real)` forms (`expression_reading`).
    pub reads: usize,
}

/// `expression`, and where its array forms are.
pub fn expression_counted(rng: &mut Rng, depth: u32, arrays: Arrays) -> (String, ArrayCounts) {
    expression_reading(rng, depth, arrays, false)
}

/// `expression_counted`, with `(read-real)` among the leaves if `reads`: one in seven of the
/// `(real k)` leaves reads its real instead (the same random choices otherwise, so the
/// programs are those of `expression_counted`). Run such programs with an `input` on
/// standard input.
pub fn expression_reading(
    rng: &mut Rng,
    depth: u32,
    arrays: Arrays,
    reads: bool,
) -> (String, ArrayCounts) {
    let mut cx = Cx {
        fresh: 0,
        arrays: arrays != Arrays::None,
        policy: arrays,
        in_forward: false,
        in_reverse: false,
        counts: ArrayCounts::default(),
        reads,
    };
    let e = real(rng, &mut Vec::new(), depth, &mut cx);
    (format!("(include \"ad\")\n{e}\n"), cx.counts)
}

/// What the grammar threads through: the last fresh name's number, whether array forms may
/// be generated here, where they may be, whether this is inside a forward or a reverse
/// derivative, and how many array forms were generated inside each.
struct Cx {
    fresh: u32,
    arrays: bool,
    policy: Arrays,
    in_forward: bool,
    in_reverse: bool,
    counts: ArrayCounts,
    /// `(read-real)` may stand for `(real -1)`.
    reads: bool,
}

/// `n` numerals for `read-real`, separated by assorted whitespace: the reals the grammar's
/// `(real k)` leaves hold (-1 to 2 by halves), each spelled one of the ways the reader's
/// numeral syntax allows (signs, leading and trailing zeros, exponents, radix prefixes for
/// integers, hundreds of digits), so that a differential test reads them through each
/// engine's reader of numbers.
pub fn input(rng: &mut Rng, n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        if i > 0 {
            s.push_str([" ", "\n", "\t", "  ", "\r\n", " \u{b}", "\u{c}"][rng.below(7)]);
        }
        let halves = rng.below(7) as i64 - 2;
        s.push_str(&spell(rng, halves));
    }
    s.push('\n');
    s
}

/// A numeral for `halves / 2`, spelled at random.
fn spell(rng: &mut Rng, halves: i64) -> String {
    let x = halves as f64 / 2.0;
    let sign = if x < 0.0 {
        "-"
    } else {
        ["", "+"][rng.below(2)]
    };
    let (whole, half) = (halves.unsigned_abs() / 2, halves.unsigned_abs() % 2 == 1);
    let fraction = if half { "5" } else { "" };
    let zeros = |k: usize| "0".repeat(k);
    match rng.below(9) {
        // Plain decimal, as the evaluator prints it.
        0 => format!("{sign}{}", x.abs()),
        // Leading and trailing zeros, a bare point.
        1 => format!(
            "{sign}{}{whole}.{fraction}{}",
            zeros(rng.below(4)),
            zeros(rng.below(4))
        ),
        // No digit before the point.
        2 if whole == 0 => format!("{sign}.{}{fraction}", if half { "" } else { "0" }),
        // An exponent: 15e-1, 0.15E1.
        3 => format!(
            "{sign}{whole}{fraction}{}{}",
            ["e", "E"][rng.below(2)],
            if half { "-1" } else { "0" }
        ),
        4 if whole > 0 => format!("{sign}0.{whole}{fraction}e1"),
        // Hundreds of digits: zeros before the number, or after its point.
        5 => format!("{sign}{}{whole}.{fraction}", zeros(200 + rng.below(200))),
        6 => format!("{sign}{whole}.{fraction}{}", zeros(200 + rng.below(200))),
        // An integer in a radix, the sign after the prefix.
        7 if !half => {
            let (prefix, digits) = match rng.below(4) {
                0 => ("#x", format!("{whole:x}")),
                1 => ("#b", format!("{whole:b}")),
                2 => ("#o", format!("{whole:o}")),
                _ => ("#d", format!("{whole}")),
            };
            let prefix = if rng.below(2) == 0 {
                prefix.to_uppercase()
            } else {
                prefix.to_string()
            };
            format!("{prefix}{sign}{digits}")
        }
        _ => format!("{sign}{whole}{}", if half { ".5" } else { "" }),
    }
}

/// xorshift64*: tiny, deterministic.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// A random real-valued expression over the real variables `vars`, `depth` levels deep.
fn real(rng: &mut Rng, vars: &mut Vec<String>, depth: u32, fresh: &mut Cx) -> String {
    let leaf = depth == 0 || rng.below(5) == 0;
    if leaf {
        return match rng.below(3) {
            0 if !vars.is_empty() => vars[rng.below(vars.len())].clone(),
            1 => match rng.below(7) {
                0 if fresh.reads => {
                    fresh.counts.reads += 1;
                    "(read-real)".to_string()
                }
                k => format!("(real {})", k as f64 / 2.0 - 1.0),
            },
            _ => format!("{}", rng.below(9) as f64 / 4.0 - 0.5),
        };
    }
    let d = depth - 1;
    // Forms 14-17 are the array forms; 18-20 take derivatives of procedures over pairs or
    // procedures; 21 builds a list of unknown length, 22 prints; 23 and 24 put booleans known
    // only at run time through the AD operators.
    let form = if fresh.arrays {
        let form = rng.below(25);
        if (14..=17).contains(&form) {
            fresh.counts.forward += usize::from(fresh.in_forward);
            fresh.counts.reverse += usize::from(fresh.in_reverse);
        }
        form
    } else {
        match rng.below(21) {
            k @ 14.. => k + 4,
            k => k,
        }
    };
    match form {
        0 | 1 => {
            let op = ["+", "-", "*"][rng.below(3)];
            let a = real(rng, vars, d, fresh);
            let b = real(rng, vars, d, fresh);
            format!("({op} {a} {b})")
        }
        2 => {
            let op = ["sin", "cos", "exp"][rng.below(3)];
            let a = real(rng, vars, d, fresh);
            format!("({op} (* 0.1 {a}))")
        }
        3 => {
            let (a, b) = (real(rng, vars, d, fresh), real(rng, vars, d, fresh));
            let (x, y) = (real(rng, vars, d, fresh), real(rng, vars, d, fresh));
            format!("(if (< {a} {b}) {x} {y})")
        }
        4 => {
            let x = name("x", fresh);
            let e = real(rng, vars, d, fresh);
            vars.push(x.clone());
            let body = real(rng, vars, d, fresh);
            vars.pop();
            format!("(let (({x} {e})) {body})")
        }
        5 => {
            // A closure bound, then called (possibly twice: two arguments, one code).
            let (f, y) = (name("f", fresh), name("y", fresh));
            vars.push(y.clone());
            let body = real(rng, vars, d, fresh);
            vars.pop();
            let (a, b) = (real(rng, vars, d, fresh), real(rng, vars, d, fresh));
            format!("(let (({f} (lambda ({y}) {body}))) (+ ({f} {a}) ({f} {b})))")
        }
        6 => {
            let (a, b) = (real(rng, vars, d, fresh), real(rng, vars, d, fresh));
            let (p, q) = (name("p", fresh), name("q", fresh));
            vars.push(p.clone());
            vars.push(q.clone());
            let body = real(rng, vars, d, fresh);
            vars.pop();
            vars.pop();
            format!("(let (((cons {p} {q}) (cons {a} {b}))) {body})")
        }
        7 => {
            let (a, b) = (real(rng, vars, d, fresh), real(rng, vars, d, fresh));
            format!("({} (cons {a} {b}))", ["car", "cdr"][rng.below(2)])
        }
        8 | 9 => {
            // A loop: a known or unknown trip count, an accumulator updated by the body.
            let (lp, i, acc) = (name("loop", fresh), name("i", fresh), name("acc", fresh));
            let n = if rng.below(2) == 0 {
                format!("{}", rng.below(5))
            } else {
                format!("(real {})", rng.below(5))
            };
            let init = real(rng, vars, d, fresh);
            let step = body_over(rng, vars, &[&acc, &i], d, fresh, Body::Plain);
            format!(
                "(let {lp} (({i} 0) ({acc} {init})) (if (< {i} {n}) ({lp} (+ {i} 1) (* 0.5 {step})) {acc}))"
            )
        }
        10 => {
            // Non-tail recursion through a named procedure.
            let (r, k) = (name("r", fresh), name("k", fresh));
            let base = real(rng, vars, d, fresh);
            vars.push(k.clone());
            let step = real(rng, vars, d, fresh);
            vars.pop();
            format!(
                "(letrec (({r} (lambda ({k}) (if (< {k} 1) {base} (+ (* 0.5 {step}) ({r} (- {k} 1))))))) ({r} {}))",
                rng.below(4)
            )
        }
        11 | 12 => {
            let (mode, body) = [
                ("derivative-F", Body::Forward),
                ("derivative-R", Body::Reverse),
            ][rng.below(2)];
            let x = name("x", fresh);
            let body = body_over(rng, vars, &[&x], d, fresh, body);
            let at = real(rng, vars, d, fresh);
            format!("(({mode} (lambda ({x}) {body})) {at})")
        }
        14 => {
            // An element of an array built from a procedure of the index.
            let n = 1 + rng.below(4);
            let (j, e) = index_body(rng, vars, d, fresh);
            let k = rng.below(n);
            format!(
                "(get (build {} (lambda ({j}) {e})) {})",
                maybe_unknown(rng, n),
                maybe_unknown(rng, k)
            )
        }
        15 => {
            // A fold over the indices, the accumulator halved at each step.
            let (acc, j) = (name("acc", fresh), name("j", fresh));
            let init = real(rng, vars, d, fresh);
            let e = body_over(rng, vars, &[&acc, &j], d, fresh, Body::Plain);
            let n = rng.below(5);
            let n = maybe_unknown(rng, n);
            format!("(ifold (lambda ({acc} {j}) (+ (* 0.5 {acc}) {e})) {init} {n})")
        }
        16 => {
            // A loop carrying an array it builds at each step to the next.
            let (lp, i, v) = (name("loop", fresh), name("i", fresh), name("v", fresh));
            let (j, init) = index_body(rng, vars, d, fresh);
            let (j2, e) = index_body(rng, vars, d, fresh);
            let n = rng.below(4);
            let n = maybe_unknown(rng, n);
            let k = rng.below(3);
            format!(
                "(let {lp} (({i} 0) ({v} (build 3 (lambda ({j}) {init})))) (if (< {i} {n}) \
                 ({lp} (+ {i} 1) (build 3 (lambda ({j2}) (+ (* 0.5 (get {v} {j2})) {e})))) \
                 (get {v} {k})))"
            )
        }
        17 => {
            // The length of an array times a real.
            let (j, e) = index_body(rng, vars, d, fresh);
            let x = real(rng, vars, d, fresh);
            let n = rng.below(4);
            let n = maybe_unknown(rng, n);
            format!("(* (array-length (build {n} (lambda ({j}) {e}))) {x})")
        }
        18 => {
            // The gradient of a function of a pair, its two components combined.
            let [p, u, w, g] = ["p", "u", "w", "g"].map(|x| name(x, fresh));
            // gradient-F takes a list, gradient-R any value: here a pair.
            let (mode, make, second, body) = [
                ("gradient-F", "list", "cadr", Body::Forward),
                ("gradient-R", "cons", "cdr", Body::Reverse),
            ][rng.below(2)];
            let body = body_over(rng, vars, &[&u, &w], d, fresh, body);
            let (a, b) = (real(rng, vars, d, fresh), real(rng, vars, d, fresh));
            format!(
                "(let (({g} (({mode} (lambda ({p}) (let (({u} (car {p})) ({w} ({second} {p}))) \
                 {body}))) ({make} {a} {b})))) (+ (car {g}) (* 0.5 ({second} {g}))))"
            )
        }
        19 => {
            // The derivative of a procedure-valued function: a procedure, called.
            let (x, y) = (name("x", fresh), name("y", fresh));
            let body = body_over(rng, vars, &[&x, &y], d, fresh, Body::Forward);
            let (a, b) = (real(rng, vars, d, fresh), real(rng, vars, d, fresh));
            format!("(((derivative-F (lambda ({x}) (lambda ({y}) {body}))) {a}) {b})")
        }
        20 => {
            // A procedure passed to a procedure inside the function differentiated.
            let [x, y, ap, f] = ["x", "y", "ap", "f"].map(|v| name(v, fresh));
            let (mode, body) = [
                ("derivative-F", Body::Forward),
                ("derivative-R", Body::Reverse),
            ][rng.below(2)];
            let body = body_over(rng, vars, &[&x, &y], d, fresh, body);
            let a = real(rng, vars, d, fresh);
            format!(
                "(({mode} (lambda ({x}) (let (({ap} (lambda ({f}) ({f} (* 0.5 {x}))))) \
                 ({ap} (lambda ({y}) {body}))))) {a})"
            )
        }
        21 => {
            // A list whose length is known only at run time, built by a loop and summed by
            // another (the analysis boxes it); where arrays may be, half the time a list of
            // arrays (boxed arrays), summed by an element of each.
            let [lp, k, l, sm, m, acc] =
                ["loop", "k", "l", "sum", "m", "s"].map(|x| name(x, fresh));
            vars.push(k.clone());
            let (e, read) = if fresh.arrays && rng.below(2) == 0 {
                let (j, e) = index_body(rng, vars, d, fresh);
                let at = rng.below(2);
                let at = maybe_unknown(rng, at);
                (
                    format!("(build 2 (lambda ({j}) {e}))"),
                    format!("(get (car {m}) {at})"),
                )
            } else {
                (real(rng, vars, d, fresh), format!("(car {m})"))
            };
            vars.pop();
            format!(
                "(let {lp} (({k} (real {})) ({l} '())) (if (< {k} 1) \
                 (let {sm} (({m} {l}) ({acc} 0)) (if (null? {m}) {acc} \
                 ({sm} (cdr {m}) (+ (* 0.5 {acc}) {read})))) \
                 ({lp} (- {k} 1) (cons {e} {l}))))",
                rng.below(5)
            )
        }
        22 => {
            // Output: the value printed, then returned (inside derivatives too, where the
            // forward and reverse versions of `write-real` print the primal).
            let e = real(rng, vars, d, fresh);
            format!("(write-real {e})")
        }
        23 => {
            // A boolean inside a pair in a derivative: forward, it is bundled with its
            // tangent (itself); reverse, its sensitivity is itself, and `plus` joins the two
            // uses of the pair.
            let [p, x] = ["p", "x"].map(|v| name(v, fresh));
            let (mode, body) = [
                ("derivative-F", Body::Forward),
                ("derivative-R", Body::Reverse),
            ][rng.below(2)];
            let (a, b) = (
                body_over(rng, vars, &[&x], d, fresh, body),
                body_over(rng, vars, &[&x], d, fresh, body),
            );
            let at = real(rng, vars, d, fresh);
            format!(
                "(({mode} (lambda ({x}) (let (({p} (cons (< {x} (real 0.5)) {x}))) \
                 (if (car {p}) (* (cdr {p}) {a}) (+ (cdr {p}) {b}))))) {at})"
            )
        }
        24 => {
            // `plus` or `bundle` of two booleans known only at run time, computed twice from
            // one real: the runtime checks that they are equal (the analysis cannot know), as
            // the evaluator does. (Booleans that differ are an error in both engines; the
            // regression tests of tests/native.rs check that, since these programs must run.)
            let t = name("t", fresh);
            let a = real(rng, vars, d, fresh);
            let (x, y) = (real(rng, vars, d, fresh), real(rng, vars, d, fresh));
            let both = match rng.below(3) {
                0 => format!("(plus (< {t} 0.5) (< {t} 0.5))"),
                1 => format!("(primal (bundle (< {t} 0.5) (perturb (< {t} 0.5))))"),
                _ => format!("(car (plus (cons (< {t} 0.5) 1) (cons (< {t} 0.5) 2)))"),
            };
            format!("(let (({t} {a})) (if {both} {x} {y}))")
        }
        _ => {
            // A closure returned by a procedure and called later.
            let (mk, a, y) = (name("mk", fresh), name("a", fresh), name("y", fresh));
            vars.push(a.clone());
            vars.push(y.clone());
            let body = real(rng, vars, d, fresh);
            vars.pop();
            vars.pop();
            let (c, e) = (real(rng, vars, d, fresh), real(rng, vars, d, fresh));
            format!("(let (({mk} (lambda ({a}) (lambda ({y}) {body})))) (({mk} {c}) {e}))")
        }
    }
}

/// A fresh variable name.
fn name(prefix: &str, cx: &mut Cx) -> String {
    cx.fresh += 1;
    format!("{prefix}{}", cx.fresh)
}

/// A real expression over `vars` and the variables `names`; for `Body::Forward` and
/// `Body::Reverse`, the body of a procedure a derivative is taken of in that mode (arrays only
/// where `Arrays` allows them, inside every enclosing derivative).
fn body_over(
    rng: &mut Rng,
    vars: &mut Vec<String>,
    names: &[&String],
    depth: u32,
    cx: &mut Cx,
    body: Body,
) -> String {
    let (n, arrays, in_forward, in_reverse) = (vars.len(), cx.arrays, cx.in_forward, cx.in_reverse);
    cx.in_forward = in_forward || body == Body::Forward;
    cx.in_reverse = in_reverse || body == Body::Reverse;
    cx.arrays = arrays
        && matches!(
            (body, cx.policy),
            (Body::Plain, _) | (_, Arrays::Everywhere) | (Body::Forward, Arrays::OutsideReverse)
        );
    vars.extend(names.iter().map(|x| (*x).clone()));
    let e = real(rng, vars, depth, cx);
    vars.truncate(n);
    cx.arrays = arrays;
    cx.in_forward = in_forward;
    cx.in_reverse = in_reverse;
    e
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Body {
    Plain,
    Forward,
    Reverse,
}

/// An index variable and a real expression over it (and `vars`).
fn index_body(rng: &mut Rng, vars: &mut Vec<String>, depth: u32, cx: &mut Cx) -> (String, String) {
    let j = name("j", cx);
    let e = body_over(rng, vars, &[&j], depth, cx, Body::Plain);
    (j, e)
}

/// The count or index `n`, known at compile time or (half the time) only at run time.
fn maybe_unknown(rng: &mut Rng, n: usize) -> String {
    if rng.below(2) == 0 {
        n.to_string()
    } else {
        format!("(real {n})")
    }
}

/// What a program of `array_kernels` reads: the lengths 0 to 6.
pub const KERNEL_LENGTHS: &str = "0 1 2 3 4 5 6\n";

/// The numerical kernels of `array_kernels`: log-sum-exp, the maximum, sums of squares and
/// products, a softmax entry, a sum of nearest squared distances (a selection in a nested
/// fold), a logistic loss, the sum of a Gram matrix, and vector-valued ones (a vector scaled
/// by its maximum, a cross product, shifted and normalised exponentials, a softmax, a
/// matrix-vector product, a point rotated by a Rodrigues vector, zero or not, and its
/// distorted projection, as in bundle adjustment), written as numerical code writes them
/// (`lib/array.vlad`'s `vector-max`, `vector-dot`, `vector-smul`; folds over the length).
const KERNELS: &str = r#"(include "array")
(define (lse x)
  (let ((m (vector-max x)))
    (+ m (log (ifold (lambda (s i) (+ s (exp (- (get x i) m)))) 0 (array-length x))))))
(define (vmax x) (vector-max x))
(define (dot x) (vector-dot x x))
(define (prod x) (ifold (lambda (s i) (* s (get x i))) 1 (array-length x)))
(define (sumsq-shift x)
  (let ((m (get x 0)))
    (ifold (lambda (s i) (+ s (* (- (get x i) m) (- (get x i) m)))) 0 (array-length x))))
(define (softmax0 x)
  (let ((m (vector-max x)))
    (/ (exp (- (get x 0) m))
       (ifold (lambda (s i) (+ s (exp (- (get x i) m)))) 0 (array-length x)))))
(define (scale-max x) (vector-smul x (vector-max x)))
(define (shift x)
  (let ((m (vector-max x))) (build (array-length x) (lambda (i) (exp (- (get x i) m))))))
(define (normalise x)
  (let ((s (lse x))) (build (array-length x) (lambda (i) (exp (- (get x i) s))))))
(define (softmax x)
  (let* ((m (vector-max x))
         (s (ifold (lambda (s i) (+ s (exp (- (get x i) m)))) 0 (array-length x))))
    (build (array-length x) (lambda (i) (/ (exp (- (get x i) m)) s)))))
(define (cross3 a b)
  (build 3 (lambda (i)
             (cond ((= i 0) (- (* (get a 1) (get b 2)) (* (get a 2) (get b 1))))
                   ((= i 1) (- (* (get a 2) (get b 0)) (* (get a 0) (get b 2))))
                   (else (- (* (get a 0) (get b 1)) (* (get a 1) (get b 0))))))))
(define (cross x) (cross3 x (vector-smul x 2)))
(define (rotate r x)
  (let ((sqtheta (vector-dot r r)))
    (if (= sqtheta 0)
        (vector-add x (cross3 r x))
        (let* ((theta (sqrt sqtheta))
               (c (cos theta))
               (w (vector-smul r (/ 1 theta)))
               (tmp (* (vector-dot w x) (- 1 c))))
          (vector-add (vector-add (vector-smul x c) (vector-smul (cross3 w x) (sin theta)))
                      (vector-smul w tmp))))))
(define (rot6 v) (rotate (build 3 (lambda (i) (get v i))) (build 3 (lambda (i) (get v (+ i 3))))))
(define (project v)
  (let* ((x (rot6 v)) (p (vector-smul (build 2 (lambda (i) (get x i))) (/ 1 (get x 2)))))
    (build 2 (lambda (i) (* (get p i) (+ 1 (* 0.1 (vector-dot p p))))))))
(define (matvec v)
  (let ((n (array-length v)))
    (build n (lambda (i) (ifold (lambda (s j) (+ s (* (get v j) (- i j)))) 0 n)))))
(define (mindist v)
  (ifold (lambda (acc i)
           (+ acc (ifold (lambda (m j)
                           (let ((e (* (- (get v i) j) (- (get v i) j)))) (if (< e m) e m)))
                         (* (get v i) (get v i))
                         3)))
         0
         (array-length v)))
(define (logistic v)
  (ifold (lambda (s i) (+ s (log (+ 1 (exp (- 0 (* (get v i) (- i 1))))))))
         0
         (array-length v)))
(define (gram-sum v)
  (let ((n (array-length v)))
    (matrix-sum (build n (lambda (i) (build n (lambda (j) (* (get v i) (get v j)))))))))
"#;

/// A program of `count` expressions, one a line: an array kernel (`KERNELS`), or its
/// derivative by `grad`, `grad-R`, `jacob` or `jacob-R`, at a vector of up to 6 entries that
/// numerical code meets at its edges: ties (equal entries, all equal), zeros of both signs,
/// entries far apart (`exp` underflowing), infinities. The vector's length and entries are
/// constants the compiler knows, or hidden from it by `real` (the length, the entries, or
/// both; a length the program reads, `lengthN`, is unknown to the IR's passes too: run the
/// program with `KERNEL_LENGTHS` on standard input), so that the same kernel is compiled
/// unrolled at constant lengths and as loops.
/// Every expression has a value in the evaluator (no empty vector where a kernel reads entry
/// 0, a cross product of 3 entries, a rotation of 6).
pub fn array_kernels(rng: &mut Rng, count: usize) -> String {
    const ENTRIES: [&str; 10] = [
        "0", "1", "-1", "2", "0.5", "-0.0", "3", "-2.5", "700", "-700",
    ];
    const SPECIAL: [&str; 2] = ["(/ 1 0)", "(- 0 (/ 1 0))"];
    // Name, whether it is vector-valued, and its least and greatest lengths.
    const KINDS: [(&str, bool, usize, usize); 17] = [
        ("lse", false, 1, 6),
        ("vmax", false, 1, 6),
        ("dot", false, 0, 6),
        ("prod", false, 0, 6),
        ("sumsq-shift", false, 1, 6),
        ("softmax0", false, 1, 6),
        ("mindist", false, 1, 6),
        ("logistic", false, 0, 6),
        ("gram-sum", false, 0, 6),
        ("scale-max", true, 1, 6),
        ("cross", true, 3, 3),
        ("shift", true, 1, 6),
        ("normalise", true, 1, 6),
        ("softmax", true, 1, 6),
        ("matvec", true, 1, 6),
        ("rot6", true, 6, 6),
        ("project", true, 6, 6),
    ];
    let mut out = String::from(KERNELS);
    for n in 0..7 {
        out.push_str(&format!("(define length{n} (read-real))\n"));
    }
    for _ in 0..count {
        let (name, vector, least, most) = KINDS[rng.below(KINDS.len())];
        let n = least + rng.below(most - least + 1);
        let hidden_length = rng.below(2) == 0;
        let length = match rng.below(4) {
            _ if !hidden_length => n.to_string(),
            0 | 1 => format!("(real {n})"),
            _ => format!("length{n}"),
        };
        let arg = if rng.below(4) == 0 {
            // All entries equal.
            format!(
                "(build {length} (lambda (i) {}))",
                ENTRIES[rng.below(ENTRIES.len())]
            )
        } else {
            let mut es: Vec<&str> = Vec::new();
            for _ in 0..n {
                let e = match rng.below(20) {
                    0 => SPECIAL[rng.below(2)],
                    1..=7 if !es.is_empty() => es[rng.below(es.len())],
                    _ => ENTRIES[rng.below(ENTRIES.len())],
                };
                es.push(e);
            }
            if n == 6 && rng.below(3) == 0 {
                // A zero rotation (`rotate`'s first branch).
                es[..3].fill("0");
            }
            let entry = if hidden_length && rng.below(3) == 0 {
                "(list-ref v i)"
            } else if hidden_length {
                "(real (list-ref v i))"
            } else {
                "(list-ref v i)"
            };
            format!(
                "(let ((v (list {}))) (build {length} (lambda (i) {entry})))",
                es.join(" ")
            )
        };
        let op = match (vector, rng.below(8)) {
            (_, 0..=1) => None,
            (false, 2..=4) => Some("grad"),
            (false, _) => Some("grad-R"),
            (true, 2..=4) => Some("jacob"),
            (true, _) => Some("jacob-R"),
        };
        match op {
            Some(op) => out.push_str(&format!("(({op} {name}) {arg})\n")),
            None => out.push_str(&format!("({name} {arg})\n")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every numeral of `input` is one the reader reads, as the real it stands for.
    #[test]
    fn inputs_are_numerals_of_the_leaves_reals() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let text = input(&mut rng, 2000);
        let mut spellings = std::collections::HashSet::new();
        for tok in text.split(|c: char| c.is_ascii_whitespace() || c == '\u{b}') {
            if tok.is_empty() {
                continue;
            }
            let x = vlad_syntax::number::parse_number(tok)
                .unwrap_or_else(|| panic!("`{tok}` is not a numeral"));
            assert!(
                (x * 2.0).fract() == 0.0 && (-1.0..=2.0).contains(&x),
                "{tok}: {x}"
            );
            spellings.insert(
                tok.chars()
                    .filter(|c| !c.is_ascii_digit())
                    .collect::<String>(),
            );
        }
        assert!(spellings.len() >= 20, "{spellings:?}");
    }
}
