//! Hand-written Rust baselines for benches/saddle-particle/*.vlad (issue 7).
//!
//!     echo N | baseline saddle-FF      (also saddle-FR, saddle-RF, saddle-RR,
//!                                       particle-FF, particle-FR, particle-RF, particle-RR)
//!
//! The same algorithm as the VLAD programs and lib/ad.vlad, written the way a Rust programmer
//! would: one generic scalar trait `Real`; forward mode by dual numbers `Dual<T>` (nested
//! forward over forward is `Dual<Dual<f64>>`); reverse mode by a tape (Wengert list) `Tape<T>`
//! whose variables `Rv<T>` hold their value and their index in the tape, and whose reverse
//! sweep runs in `T` arithmetic, so that any mode nests over any other (`Rv<Dual<f64>>`,
//! `Dual<Rv<f64>>`, `Rv<Rv<f64>>`).  The optimiser is lib/ad.vlad's multivariate-argmin
//! (adaptive naive gradient descent of paper 001, Fig. 1) step for step: eta = 1e-5, stop when
//! |grad| <= 1e-5 or |x - x'| <= 1e-5, double eta after 10 accepted steps, halve it on a
//! rejected step; the objective and its gradient are evaluated separately, as there.
//!
//! Repetition i (from 0) starts the searches from 1 + i 1e-12 (saddle) or w = i 1e-12
//! (particle), as the VLAD programs do; the last repetition's result is printed in VLAD's
//! format.
//!
//! Numerically the same operations as VLAD in the same order (tangent rules as VLAD's forward
//! prelude), with these differences in the last bits only: the tape stores local partials and
//! accumulates `adj += a * partial` (VLAD's reverse rules divide: `s / x2` here is
//! `s * (1 / x2)`); `-f` for `(- 0 f)`; no `0 +` in front of the sums that VLAD's `reduce`
//! starts from 0; the stopping tests use the primal values (as VLAD's comparisons do).

use std::cell::{Cell, RefCell, UnsafeCell};
use std::mem::MaybeUninit;
use std::hint::black_box;
use std::io::Read;
use std::marker::PhantomData;
use std::ops::{Add, Div, Mul, Neg, Sub};

// ---------------------------------------------------------------------------------------------
// Scalars

pub trait Real:
    Copy
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    /// A constant (zero derivative at every level).
    fn cst(x: f64) -> Self;
    fn sqrt(self) -> Self;
    /// The innermost primal value, for comparisons.
    fn val(&self) -> f64;
    /// Whether this is a constant exactly zero (lets the reverse sweep skip dead adjoints).
    fn is_zero(&self) -> bool;
}

impl Real for f64 {
    #[inline(always)]
    fn cst(x: f64) -> Self {
        x
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    #[inline(always)]
    fn val(&self) -> f64 {
        *self
    }
    #[inline(always)]
    fn is_zero(&self) -> bool {
        *self == 0.0
    }
}

// ---------------------------------------------------------------------------------------------
// Forward mode: dual numbers.  Tangent rules as VLAD's (crates/vlad-eval/src/ad.rs):
// d(a b) = b da + a db, d(a / b) = (b da - a db) / (b b), d sqrt a = da / (y + y).

#[derive(Clone, Copy, Debug)]
pub struct Dual<T> {
    pub v: T,
    pub d: T,
}

impl<T: Real> Dual<T> {
    #[inline(always)]
    pub fn lift(v: T) -> Self {
        Dual { v, d: T::cst(0.0) }
    }
}

impl<T: Real> Add for Dual<T> {
    type Output = Self;
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        Dual { v: self.v + b.v, d: self.d + b.d }
    }
}
impl<T: Real> Sub for Dual<T> {
    type Output = Self;
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        Dual { v: self.v - b.v, d: self.d - b.d }
    }
}
impl<T: Real> Mul for Dual<T> {
    type Output = Self;
    #[inline(always)]
    fn mul(self, b: Self) -> Self {
        Dual { v: self.v * b.v, d: b.v * self.d + self.v * b.d }
    }
}
impl<T: Real> Div for Dual<T> {
    type Output = Self;
    #[inline(always)]
    fn div(self, b: Self) -> Self {
        Dual { v: self.v / b.v, d: (b.v * self.d - self.v * b.d) / (b.v * b.v) }
    }
}
impl<T: Real> Neg for Dual<T> {
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        Dual { v: -self.v, d: -self.d }
    }
}
impl<T: Real> Real for Dual<T> {
    #[inline(always)]
    fn cst(x: f64) -> Self {
        Dual::lift(T::cst(x))
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        let y = self.v.sqrt();
        Dual { v: y, d: self.d / (y + y) }
    }
    #[inline(always)]
    fn val(&self) -> f64 {
        self.v.val()
    }
    #[inline(always)]
    fn is_zero(&self) -> bool {
        self.v.is_zero() && self.d.is_zero()
    }
}

// ---------------------------------------------------------------------------------------------
// Reverse mode: a tape of nodes, each with up to two parents and the local partial derivatives.

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Node<T> {
    parent: [u32; 2],
    partial: [T; 2],
}

/// Nodes kept inline in the tape before it spills to the heap: the inner gradients here record
/// 7 (saddle) or 17 (particle) nodes, so they never allocate; outer tapes (RF, RR) grow in `spill`.
const INLINE: usize = 32;

pub struct Tape<T> {
    len: Cell<usize>,
    inline: UnsafeCell<[MaybeUninit<Node<T>>; INLINE]>,
    spill: RefCell<Vec<Node<T>>>,
}

#[derive(Clone, Copy)]
pub struct Rv<'t, T> {
    pub v: T,
    idx: u32,
    tape: Option<&'t Tape<T>>, // None: a constant
}

impl<T: Real> Tape<T> {
    pub fn new() -> Self {
        Tape {
            len: Cell::new(0),
            inline: UnsafeCell::new([const { MaybeUninit::uninit() }; INLINE]),
            spill: RefCell::new(Vec::new()),
        }
    }
    #[inline(always)]
    fn push(&self, parent: [u32; 2], partial: [T; 2]) -> u32 {
        let i = self.len.get();
        let node = Node { parent, partial };
        if i < INLINE {
            // SAFETY: slot i < INLINE is in bounds; no reference into `inline` is live here
            // (`node` reads them only by value).
            unsafe { (*self.inline.get())[i] = MaybeUninit::new(node) };
        } else {
            self.spill.borrow_mut().push(node);
        }
        self.len.set(i + 1);
        i as u32
    }
    #[inline(always)]
    fn node(&self, i: usize) -> Node<T> {
        if i < INLINE {
            // SAFETY: slots below len were written by push.
            unsafe { (*self.inline.get())[i].assume_init() }
        } else {
            self.spill.borrow()[i - INLINE]
        }
    }
    /// An independent variable.
    pub fn var(&self, v: T) -> Rv<'_, T> {
        let idx = self.push([NONE, NONE], [T::cst(0.0), T::cst(0.0)]);
        Rv { v, idx, tape: Some(self) }
    }
    /// The reverse sweep: the adjoints of the first `N` nodes (the variables) for d y.  The
    /// adjoints live on the stack when the tape is short (the inner gradients).
    pub fn gradient<const N: usize>(&self, y: Rv<'_, T>) -> [T; N] {
        if y.tape.is_none() {
            return [T::cst(0.0); N];
        }
        let len = y.idx as usize + 1;
        if len <= INLINE {
            let mut adj = [T::cst(0.0); INLINE];
            self.sweep(&mut adj[..len]);
            std::array::from_fn(|j| adj[j])
        } else {
            let mut adj = vec![T::cst(0.0); len];
            self.sweep(&mut adj);
            std::array::from_fn(|j| adj[j])
        }
    }
    #[inline(always)]
    fn sweep(&self, adj: &mut [T]) {
        let last = adj.len() - 1;
        adj[last] = T::cst(1.0);
        for i in (0..=last).rev() {
            let a = adj[i];
            if a.is_zero() {
                continue;
            }
            let node = self.node(i);
            for k in 0..2 {
                let p = node.parent[k];
                if p != NONE {
                    adj[p as usize] = adj[p as usize] + a * node.partial[k];
                }
            }
        }
    }
}

impl<'t, T: Real> Rv<'t, T> {
    #[inline(always)]
    pub fn lift(v: T) -> Self {
        Rv { v, idx: NONE, tape: None }
    }
    /// A node for the result `v` of a binary operation with partials `da`, `db` (computed only
    /// for operands on the tape).
    #[inline(always)]
    fn binary(a: Self, b: Self, v: T, da: impl FnOnce() -> T, db: impl FnOnce() -> T) -> Self {
        match (a.tape, b.tape) {
            (None, None) => Rv::lift(v),
            (Some(t), None) => Rv { v, idx: t.push([a.idx, NONE], [da(), T::cst(0.0)]), tape: Some(t) },
            (None, Some(t)) => Rv { v, idx: t.push([b.idx, NONE], [db(), T::cst(0.0)]), tape: Some(t) },
            (Some(t), Some(_)) => Rv { v, idx: t.push([a.idx, b.idx], [da(), db()]), tape: Some(t) },
        }
    }
    #[inline(always)]
    fn unary(a: Self, v: T, da: impl FnOnce() -> T) -> Self {
        match a.tape {
            None => Rv::lift(v),
            Some(t) => Rv { v, idx: t.push([a.idx, NONE], [da(), T::cst(0.0)]), tape: Some(t) },
        }
    }
}

impl<'t, T: Real> Add for Rv<'t, T> {
    type Output = Self;
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        Rv::binary(self, b, self.v + b.v, || T::cst(1.0), || T::cst(1.0))
    }
}
impl<'t, T: Real> Sub for Rv<'t, T> {
    type Output = Self;
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        Rv::binary(self, b, self.v - b.v, || T::cst(1.0), || T::cst(-1.0))
    }
}
impl<'t, T: Real> Mul for Rv<'t, T> {
    type Output = Self;
    #[inline(always)]
    fn mul(self, b: Self) -> Self {
        Rv::binary(self, b, self.v * b.v, || b.v, || self.v)
    }
}
impl<'t, T: Real> Div for Rv<'t, T> {
    type Output = Self;
    #[inline(always)]
    fn div(self, b: Self) -> Self {
        let y = self.v / b.v;
        Rv::binary(self, b, y, || T::cst(1.0) / b.v, || -(y / b.v))
    }
}
impl<'t, T: Real> Neg for Rv<'t, T> {
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        Rv::unary(self, -self.v, || T::cst(-1.0))
    }
}
impl<'t, T: Real> Real for Rv<'t, T> {
    #[inline(always)]
    fn cst(x: f64) -> Self {
        Rv::lift(T::cst(x))
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        let y = self.v.sqrt();
        Rv::unary(self, y, || T::cst(1.0) / (y + y))
    }
    #[inline(always)]
    fn val(&self) -> f64 {
        self.v.val()
    }
    #[inline(always)]
    fn is_zero(&self) -> bool {
        self.tape.is_none() && self.v.is_zero()
    }
}

// ---------------------------------------------------------------------------------------------
// Objectives R^n -> R that can be evaluated at any scalar type S into which their captured
// values (of type T) are lifted by `lift`, and gradients in either mode.

pub trait Objective<T: Real, const N: usize> {
    fn eval<S: Real>(&self, x: &[S; N], lift: impl Fn(T) -> S + Copy) -> S;
}

pub trait Mode {
    fn gradient<T: Real, O: Objective<T, N>, const N: usize>(f: &O, x: &[T; N]) -> [T; N];
}

/// gradient-F: one forward pass per basis vector.
pub struct F;
/// gradient-R: one forward sweep recording the tape, one reverse sweep.
pub struct R;

impl Mode for F {
    fn gradient<T: Real, O: Objective<T, N>, const N: usize>(f: &O, x: &[T; N]) -> [T; N] {
        std::array::from_fn(|i| {
            let xs: [Dual<T>; N] =
                std::array::from_fn(|j| Dual { v: x[j], d: T::cst(if i == j { 1.0 } else { 0.0 }) });
            f.eval(&xs, Dual::lift).d
        })
    }
}

impl Mode for R {
    fn gradient<T: Real, O: Objective<T, N>, const N: usize>(f: &O, x: &[T; N]) -> [T; N] {
        let tape = Tape::new();
        let xs: [Rv<'_, T>; N] = std::array::from_fn(|j| tape.var(x[j]));
        let y = f.eval(&xs, Rv::lift);
        tape.gradient(y)
    }
}

fn magnitude(v: impl Iterator<Item = f64>) -> f64 {
    v.map(|a| a * a).sum::<f64>().sqrt()
}

/// lib/ad.vlad's multivariate-argmin-F / -R (the mode M gives the gradients).
pub fn argmin<M: Mode, T: Real, O: Objective<T, N>, const N: usize>(f: &O, x0: [T; N]) -> [T; N] {
    let eval = |x: &[T; N]| f.eval(x, |t| t);
    let mut x = x0;
    let mut fx = eval(&x);
    let mut gx = M::gradient(f, &x);
    let mut eta = 1e-5;
    let mut i = 0;
    loop {
        if magnitude(gx.iter().map(|g| g.val())) <= 1e-5 {
            return x;
        }
        if i == 10 {
            eta *= 2.0;
            i = 0;
            continue;
        }
        let xp: [T; N] = std::array::from_fn(|j| x[j] - T::cst(eta) * gx[j]);
        if magnitude(x.iter().zip(&xp).map(|(a, b)| a.val() - b.val())) <= 1e-5 {
            return x;
        }
        let fxp = eval(&xp);
        if fxp.val() < fx.val() {
            gx = M::gradient(f, &xp);
            x = xp;
            fx = fxp;
            i += 1;
        } else {
            eta /= 2.0;
            i = 0;
        }
    }
}

/// -f, for argmax.
struct Negated<'a, O>(&'a O);
impl<'a, T: Real, O: Objective<T, N>, const N: usize> Objective<T, N> for Negated<'a, O> {
    fn eval<S: Real>(&self, x: &[S; N], lift: impl Fn(T) -> S + Copy) -> S {
        -self.0.eval(x, lift)
    }
}

pub fn argmax<M: Mode, T: Real, O: Objective<T, N>, const N: usize>(f: &O, x0: [T; N]) -> [T; N] {
    argmin::<M, T, _, N>(&Negated(f), x0)
}

pub fn max<M: Mode, T: Real, O: Objective<T, N>, const N: usize>(f: &O, x0: [T; N]) -> T {
    let x = argmax::<M, T, O, N>(f, x0);
    f.eval(&x, |t| t)
}

// ---------------------------------------------------------------------------------------------
// Saddle: min over (x1, y1) of max over (x2, y2) of (x1^2 + y1^2) - (x2^2 + y2^2).

#[inline(always)]
fn saddle_f<S: Real>(x1: S, y1: S, x2: S, y2: S) -> S {
    (x1 * x1 + y1 * y1) - (x2 * x2 + y2 * y2)
}

/// (x2, y2) |-> f(x1, y1, x2, y2) for fixed (x1, y1).
struct SaddleInner<T> {
    x1: T,
    y1: T,
}
impl<T: Real> Objective<T, 2> for SaddleInner<T> {
    fn eval<S: Real>(&self, x: &[S; 2], lift: impl Fn(T) -> S + Copy) -> S {
        saddle_f(lift(self.x1), lift(self.y1), x[0], x[1])
    }
}

/// (x1, y1) |-> max over (x2, y2) of f(x1, y1, x2, y2), by the inner mode MI.
struct SaddleOuter<MI> {
    start: f64,
    _m: PhantomData<MI>,
}
impl<T: Real, MI: Mode> Objective<T, 2> for SaddleOuter<MI> {
    fn eval<S: Real>(&self, x: &[S; 2], _lift: impl Fn(T) -> S + Copy) -> S {
        let start = [S::cst(self.start), S::cst(self.start)];
        max::<MI, S, _, 2>(&SaddleInner { x1: x[0], y1: x[1] }, start)
    }
}

pub fn saddle<MO: Mode, MI: Mode>(i: usize) -> [f64; 4] {
    let s = 1.0 + (i as f64) * 1e-12;
    let outer = SaddleOuter::<MI> { start: s, _m: PhantomData };
    let xy1 = argmin::<MO, f64, _, 2>(&outer, [s, s]);
    let xy2 = argmax::<MI, f64, _, 2>(&SaddleInner { x1: xy1[0], y1: xy1[1] }, [s, s]);
    [xy1[0], xy1[1], xy2[0], xy2[1]]
}

// ---------------------------------------------------------------------------------------------
// Particle: the charged particle of examples/particle-*.vlad.

/// The potential p(x) = sum over the charges c of 1 / |x - c|, charges (10, 10 - w), (10, 0).
struct Potential<T> {
    cy: T, // 10 - w
}
impl<T: Real> Objective<T, 2> for Potential<T> {
    fn eval<S: Real>(&self, x: &[S; 2], lift: impl Fn(T) -> S + Copy) -> S {
        let ten = S::cst(10.0);
        let dist = |cx: S, cy: S| {
            let (a, b) = (x[0] - cx, x[1] - cy);
            (a * a + b * b).sqrt()
        };
        S::cst(1.0) / dist(ten, lift(self.cy)) + S::cst(1.0) / dist(ten, S::cst(0.0))
    }
}

/// Naive Euler integration until the particle crosses the x-axis; the force -grad p by MI.
fn naive_euler<MI: Mode, T: Real>(w: T) -> T {
    let p = Potential { cy: T::cst(10.0) - w };
    let dt = T::cst(0.1);
    let mut x = [T::cst(0.0), T::cst(8.0)];
    let mut xdot = [T::cst(0.75), T::cst(0.0)];
    loop {
        let g = MI::gradient(&p, &x);
        let xddot = [-g[0], -g[1]];
        let x_new = [x[0] + dt * xdot[0], x[1] + dt * xdot[1]];
        if x_new[1].val() > 0.0 {
            xdot = [xdot[0] + dt * xddot[0], xdot[1] + dt * xddot[1]];
            x = x_new;
        } else {
            let dt_f = -x[1] / xdot[1];
            let x_t_f0 = x[0] + dt_f * xdot[0];
            return x_t_f0 * x_t_f0;
        }
    }
}

struct ParticleCost<MI>(PhantomData<MI>);
impl<T: Real, MI: Mode> Objective<T, 1> for ParticleCost<MI> {
    fn eval<S: Real>(&self, x: &[S; 1], _lift: impl Fn(T) -> S + Copy) -> S {
        naive_euler::<MI, S>(x[0])
    }
}

pub fn particle<MO: Mode, MI: Mode>(i: usize) -> f64 {
    let w0 = (i as f64) * 1e-12;
    argmin::<MO, f64, _, 1>(&ParticleCost::<MI>(PhantomData), [w0])[0]
}

// ---------------------------------------------------------------------------------------------

/// VLAD's output format for reals (vlad-syntax format_real).
fn format_real(x: f64) -> String {
    if x.is_nan() {
        return "+nan.0".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "+inf.0".into() } else { "-inf.0".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let exp = x.abs().log10().floor();
    if (-5.0..21.0).contains(&exp) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

fn repeat<R: Copy>(n: usize, f: impl Fn(usize) -> R) -> R {
    let mut r = f(0);
    for i in 1..n {
        r = black_box(f(black_box(i)));
    }
    r
}

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).expect("reading stdin");
    let n: f64 = input.split_whitespace().next().and_then(|s| s.parse().ok()).expect("a number n on stdin");
    let n = (n as usize).max(1);
    let s = match name.as_str() {
        "saddle-FF" => Some(repeat(n, saddle::<F, F>)),
        "saddle-FR" => Some(repeat(n, saddle::<F, R>)),
        "saddle-RF" => Some(repeat(n, saddle::<R, F>)),
        "saddle-RR" => Some(repeat(n, saddle::<R, R>)),
        _ => None,
    };
    if let Some(r) = s {
        let r: Vec<String> = r.iter().map(|&x| format_real(x)).collect();
        for x in &r {
            println!("{x}");
        }
        println!("(({} {}) ({} {}))", r[0], r[1], r[2], r[3]);
        return;
    }
    let w = match name.as_str() {
        "particle-FF" => repeat(n, particle::<F, F>),
        "particle-FR" => repeat(n, particle::<F, R>),
        "particle-RF" => repeat(n, particle::<R, F>),
        "particle-RR" => repeat(n, particle::<R, R>),
        _ => {
            eprintln!("usage: echo N | baseline {{saddle,particle}}-{{FF,FR,RF,RR}}");
            std::process::exit(2);
        }
    };
    let w = format_real(w);
    println!("{w}\n({w})");
}
