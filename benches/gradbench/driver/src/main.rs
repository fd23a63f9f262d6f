//! The GradBench modules of `vlad gradbench` against hand-written Rust, side by side
//! (benches/gradbench/run.sh; issue 26).
//!
//!     gradbench-driver VLAD RUNS [MODULE...]
//!
//! Starts `VLAD gradbench`, defines each module, and for each function of the table below
//! sends one `evaluate` with `min_runs` RUNS (and `min_seconds` 0); then times RUNS calls of the
//! hand-written Rust function on the same input in this process, each call alone, as the tool
//! times its calls. Prints a Markdown table of the medians, their ratio, and the largest
//! difference between the two outputs by GradBench's measure |x - y| / max(1, |x| + |y|)
//! (GradBench accepts up to 1e-4); a difference above 1e-8 fails the run.
//!
//! The baselines: hello, lse, llsq, kmeans by their formulas; det by the same expansion by
//! minors with its reverse sweep fused into the recursion (each minor's adjoint is known on the
//! way down); ode by RK4 and its adjoint (the reverse sweep over the stored stages); saddle and
//! particle are benches/saddle-particle/baseline (dual numbers and a tape, the same optimiser
//! as lib/ad.vlad), included as a module.

// The numeric kernels index several arrays with one loop variable, as the formulas do.
#![allow(clippy::needless_range_loop)]

use serde_json::{json, Value as Json};
use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

#[allow(dead_code, clippy::all)]
#[path = "../../../saddle-particle/baseline/src/main.rs"]
mod sp;

fn reals(seed: u64, n: usize) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

// --- lse ---------------------------------------------------------------------------------

fn lse(x: &[f64]) -> f64 {
    let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    m + x.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
}
fn lse_gradient(x: &[f64]) -> Vec<f64> {
    let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = x.iter().map(|v| (v - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|v| v / s).collect()
}

// --- llsq --------------------------------------------------------------------------------

fn llsq_residuals(x: &[f64], n: usize) -> impl Iterator<Item = (f64, f64)> + '_ {
    (0..n).map(move |i| {
        let t = -1.0 + 2.0 * i as f64 / (n - 1) as f64;
        let s = f64::from(t > 0.0) - f64::from(t < 0.0);
        let (mut p, mut tj) = (0.0, 1.0);
        for xj in x {
            p += xj * tj;
            tj *= t;
        }
        (t, s - p)
    })
}
fn llsq(x: &[f64], n: usize) -> f64 {
    0.5 * llsq_residuals(x, n).map(|(_, r)| r * r).sum::<f64>()
}
fn llsq_gradient(x: &[f64], n: usize) -> Vec<f64> {
    let mut g = vec![0.0; x.len()];
    for (t, r) in llsq_residuals(x, n) {
        let mut tj = 1.0;
        for gj in g.iter_mut() {
            *gj -= r * tj;
            tj *= t;
        }
    }
    g
}

// --- det ---------------------------------------------------------------------------------

fn det_minor(a: &[f64], l: usize, r: usize, used: &mut [bool]) -> f64 {
    if r == l {
        return 1.0;
    }
    let (mut acc, mut sign) = (0.0, 1.0);
    for k in 0..l {
        if !used[k] {
            used[k] = true;
            acc += sign * a[r * l + k] * det_minor(a, l, r + 1, used);
            used[k] = false;
            sign = -sign;
        }
    }
    acc
}
/// The minor's value; adds `seed` times its gradient to `g`.
fn det_minor_gradient(
    a: &[f64],
    l: usize,
    r: usize,
    used: &mut [bool],
    seed: f64,
    g: &mut [f64],
) -> f64 {
    if r == l {
        return 1.0;
    }
    let (mut acc, mut sign) = (0.0, 1.0);
    for k in 0..l {
        if !used[k] {
            used[k] = true;
            let sub = det_minor_gradient(a, l, r + 1, used, seed * sign * a[r * l + k], g);
            used[k] = false;
            g[r * l + k] += seed * sign * sub;
            acc += sign * a[r * l + k] * sub;
            sign = -sign;
        }
    }
    acc
}

// --- ode ---------------------------------------------------------------------------------

fn field(x: &[f64], y: &[f64], out: &mut [f64]) {
    out[0] = x[0];
    for i in 1..x.len() {
        out[i] = x[i] * y[i - 1];
    }
}
/// Adds the adjoint of `field(x, y)` with output adjoint `kb` to `xb` and `yb`.
fn field_adjoint(x: &[f64], y: &[f64], kb: &[f64], xb: &mut [f64], yb: &mut [f64]) {
    xb[0] += kb[0];
    for i in 1..x.len() {
        xb[i] += kb[i] * y[i - 1];
        yb[i - 1] += kb[i] * x[i];
    }
}
/// The RK4 states: y at each step and the inputs of stages 2, 3, 4.
fn ode_states(x: &[f64], s: usize) -> Vec<[Vec<f64>; 4]> {
    let n = x.len();
    let h = 2.0 / s as f64;
    let mut y = vec![0.0; n];
    let (mut k1, mut k2, mut k3, mut k4) = (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    let mut states = Vec::with_capacity(s + 1);
    for _ in 0..s {
        field(x, &y, &mut k1);
        let y2: Vec<f64> = (0..n).map(|i| y[i] + h / 2.0 * k1[i]).collect();
        field(x, &y2, &mut k2);
        let y3: Vec<f64> = (0..n).map(|i| y[i] + h / 2.0 * k2[i]).collect();
        field(x, &y3, &mut k3);
        let y4: Vec<f64> = (0..n).map(|i| y[i] + h * k3[i]).collect();
        field(x, &y4, &mut k4);
        let next = (0..n)
            .map(|i| y[i] + h / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]))
            .collect();
        states.push([std::mem::replace(&mut y, next), y2, y3, y4]);
    }
    states.push([y, vec![], vec![], vec![]]);
    states
}
fn ode_gradient(x: &[f64], s: usize) -> Vec<f64> {
    let n = x.len();
    let h = 2.0 / s as f64;
    let states = ode_states(x, s);
    let mut xb = vec![0.0; n];
    let mut yb = vec![0.0; n];
    yb[n - 1] = 1.0;
    for [y, y2, y3, y4] in states[..s].iter().rev() {
        let (mut y2b, mut y3b, mut y4b) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        let k4b: Vec<f64> = yb.iter().map(|b| h / 6.0 * b).collect();
        let mut k3b: Vec<f64> = yb.iter().map(|b| h / 3.0 * b).collect();
        let mut k2b = k3b.clone();
        let mut k1b: Vec<f64> = k4b.clone();
        let mut ybn = yb.clone();
        field_adjoint(x, y4, &k4b, &mut xb, &mut y4b);
        for i in 0..n {
            ybn[i] += y4b[i];
            k3b[i] += h * y4b[i];
        }
        field_adjoint(x, y3, &k3b, &mut xb, &mut y3b);
        for i in 0..n {
            ybn[i] += y3b[i];
            k2b[i] += h / 2.0 * y3b[i];
        }
        field_adjoint(x, y2, &k2b, &mut xb, &mut y2b);
        for i in 0..n {
            ybn[i] += y2b[i];
            k1b[i] += h / 2.0 * y2b[i];
        }
        let mut yb1 = vec![0.0; n];
        field_adjoint(x, y, &k1b, &mut xb, &mut yb1);
        for i in 0..n {
            ybn[i] += yb1[i];
        }
        yb = ybn;
    }
    xb
}

// --- kmeans ------------------------------------------------------------------------------

fn nearest(p: &[f64], c: &[Vec<f64>]) -> (usize, f64) {
    let d = |c: &[f64]| p.iter().zip(c).map(|(a, b)| (a - b) * (a - b)).sum::<f64>();
    let mut best = (0, d(&c[0]));
    for (j, cj) in c.iter().enumerate().skip(1) {
        let e = d(cj);
        if e < best.1 {
            best = (j, e);
        }
    }
    best
}
fn kmeans_cost(p: &[Vec<f64>], c: &[Vec<f64>]) -> f64 {
    p.iter().map(|p| nearest(p, c).1).sum()
}
fn kmeans_dir(p: &[Vec<f64>], c: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let mut g = vec![vec![0.0; c[0].len()]; c.len()];
    let mut count = vec![0.0; c.len()];
    for p in p {
        let j = nearest(p, c).0;
        count[j] += 2.0;
        for (e, gje) in g[j].iter_mut().enumerate() {
            *gje += 2.0 * (c[j][e] - p[e]);
        }
    }
    g.iter()
        .zip(&count)
        .map(|(gj, h)| gj.iter().map(|x| x / h).collect())
        .collect()
}

// --- gmm ---------------------------------------------------------------------------------

/// ADBench's GMM: the data and the prior's parameters.
struct Gmm {
    d: usize,
    k: usize,
    x: Vec<Vec<f64>>,
    m: f64,
    gamma: f64,
}

/// log Gamma(x) for a positive multiple of 1/2 (the prior's constant), by Gamma(x+1) = x Gamma(x).
fn ln_gamma_half(mut x: f64) -> f64 {
    let mut sum = 0.0;
    while x > 1.0 {
        x -= 1.0;
        sum += x.ln();
    }
    if x == 0.5 {
        sum + 0.5 * std::f64::consts::PI.ln()
    } else {
        sum
    }
}

type Params = (Vec<f64>, Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<Vec<f64>>);

impl Gmm {
    /// Q_j as a dense lower-triangular matrix (l column by column).
    fn qmat(&self, q: &[f64], l: &[f64]) -> Vec<Vec<f64>> {
        let d = self.d;
        let mut m = vec![vec![0.0; d]; d];
        let mut at = 0;
        for c in 0..d {
            m[c][c] = q[c].exp();
            for row in m.iter_mut().skip(c + 1) {
                row[c] = l[at];
                at += 1;
            }
        }
        m
    }

    fn constant(&self) -> f64 {
        let d = self.d;
        let n = self.x.len() as f64;
        let nw = d as f64 + self.m + 1.0;
        let multi_gamma = 0.25 * (d * (d - 1)) as f64 * std::f64::consts::PI.ln()
            + (1..=d)
                .map(|j| ln_gamma_half(0.5 * nw + 0.5 * (1.0 - j as f64)))
                .sum::<f64>();
        let c = nw * d as f64 * (self.gamma.ln() - 0.5 * 2f64.ln()) - multi_gamma;
        -n * d as f64 * 0.5 * (2.0 * std::f64::consts::PI).ln() - self.k as f64 * c
    }

    fn objective(&self, p: &Params) -> f64 {
        let (alpha, mu, q, l) = p;
        let (d, k) = (self.d, self.k);
        let qs: Vec<Vec<Vec<f64>>> = (0..k).map(|j| self.qmat(&q[j], &l[j])).collect();
        let sum_q: Vec<f64> = q.iter().map(|r| r.iter().sum()).collect();
        let mut total = self.constant();
        let mut t = vec![0.0; k];
        for xi in &self.x {
            for j in 0..k {
                let mut z2 = 0.0;
                for r in 0..d {
                    let z: f64 = (0..=r).map(|c| qs[j][r][c] * (xi[c] - mu[j][c])).sum();
                    z2 += z * z;
                }
                t[j] = alpha[j] + sum_q[j] - 0.5 * z2;
            }
            total += lse(&t);
        }
        total -= self.x.len() as f64 * lse(alpha);
        for j in 0..k {
            let frobenius: f64 = q[j].iter().map(|v| (2.0 * v).exp()).sum::<f64>()
                + l[j].iter().map(|v| v * v).sum::<f64>();
            total += 0.5 * self.gamma * self.gamma * frobenius - self.m * sum_q[j];
        }
        total
    }

    /// The gradient by hand: for each point, the softmax weights w of the components, then the
    /// adjoints of z = Q (x - mu): dQ = -w z v^T on the lower triangle, dmu = w Q^T z.
    fn gradient(&self, p: &Params) -> Params {
        let (alpha, mu, q, l) = p;
        let (d, k) = (self.d, self.k);
        let qs: Vec<Vec<Vec<f64>>> = (0..k).map(|j| self.qmat(&q[j], &l[j])).collect();
        let sum_q: Vec<f64> = q.iter().map(|r| r.iter().sum()).collect();
        let mut ga = vec![0.0; k];
        let mut gmu = vec![vec![0.0; d]; k];
        let mut gqm = vec![vec![vec![0.0; d]; d]; k];
        let mut zs = vec![vec![0.0; d]; k];
        let mut vs = vec![vec![0.0; d]; k];
        let mut t = vec![0.0; k];
        for xi in &self.x {
            for j in 0..k {
                for c in 0..d {
                    vs[j][c] = xi[c] - mu[j][c];
                }
                let mut z2 = 0.0;
                for r in 0..d {
                    zs[j][r] = (0..=r).map(|c| qs[j][r][c] * vs[j][c]).sum();
                    z2 += zs[j][r] * zs[j][r];
                }
                t[j] = alpha[j] + sum_q[j] - 0.5 * z2;
            }
            let m = t.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = t.iter().map(|v| (v - m).exp()).sum();
            for j in 0..k {
                let w = (t[j] - m).exp() / s;
                ga[j] += w;
                for r in 0..d {
                    for c in 0..=r {
                        gqm[j][r][c] -= w * zs[j][r] * vs[j][c];
                        gmu[j][c] += w * qs[j][r][c] * zs[j][r];
                    }
                }
            }
        }
        let n = self.x.len() as f64;
        let g2 = self.gamma * self.gamma;
        let sa = lse_gradient(alpha);
        let mut gq = vec![vec![0.0; d]; k];
        let mut gl = vec![vec![0.0; d * (d - 1) / 2]; k];
        for j in 0..k {
            // sum(q_j) enters t_j with weight 1: its adjoint is alpha_j's (before the -n lse).
            let gsum_q = ga[j];
            let mut at = 0;
            for c in 0..d {
                gq[j][c] =
                    gqm[j][c][c] * q[j][c].exp() + gsum_q + g2 * (2.0 * q[j][c]).exp() - self.m;
                for r in c + 1..d {
                    gl[j][at] = gqm[j][r][c] + g2 * l[j][at];
                    at += 1;
                }
            }
        }
        for j in 0..k {
            ga[j] -= n * sa[j];
        }
        (ga, gmu, gq, gl)
    }
}

// --- ba ----------------------------------------------------------------------------------

/// A number with a gradient of 15 entries (forward mode, all directions at once).
#[derive(Clone, Copy)]
struct D15 {
    v: f64,
    d: [f64; 15],
}

impl D15 {
    fn cst(v: f64) -> D15 {
        D15 { v, d: [0.0; 15] }
    }
    fn var(v: f64, i: usize) -> D15 {
        let mut d = [0.0; 15];
        d[i] = 1.0;
        D15 { v, d }
    }
    fn map(self, v: f64, dv: f64) -> D15 {
        let mut d = self.d;
        for x in d.iter_mut() {
            *x *= dv;
        }
        D15 { v, d }
    }
    fn add(self, o: D15) -> D15 {
        let mut d = self.d;
        for (x, y) in d.iter_mut().zip(o.d) {
            *x += y;
        }
        D15 { v: self.v + o.v, d }
    }
    fn sub(self, o: D15) -> D15 {
        self.add(o.scale(-1.0))
    }
    fn scale(self, k: f64) -> D15 {
        self.map(self.v * k, k)
    }
    fn mul(self, o: D15) -> D15 {
        let mut d = [0.0; 15];
        for i in 0..15 {
            d[i] = self.d[i] * o.v + self.v * o.d[i];
        }
        D15 { v: self.v * o.v, d }
    }
    fn recip(self) -> D15 {
        self.map(1.0 / self.v, -1.0 / (self.v * self.v))
    }
    fn sqrt(self) -> D15 {
        let r = self.v.sqrt();
        self.map(r, 0.5 / r)
    }
    fn sin(self) -> D15 {
        self.map(self.v.sin(), self.v.cos())
    }
    fn cos(self) -> D15 {
        self.map(self.v.cos(), -self.v.sin())
    }
}

/// An observation's reprojection error, as ADBench's project, of the camera (11), point (3) and
/// weight in `v`.
fn ba_reprojection(v: &[D15; 15], feat: &[f64]) -> [D15; 2] {
    let cross = |a: [D15; 3], b: [D15; 3]| {
        [
            a[1].mul(b[2]).sub(a[2].mul(b[1])),
            a[2].mul(b[0]).sub(a[0].mul(b[2])),
            a[0].mul(b[1]).sub(a[1].mul(b[0])),
        ]
    };
    let r = [v[0], v[1], v[2]];
    let y = [v[11].sub(v[3]), v[12].sub(v[4]), v[13].sub(v[5])];
    let sq = r[0].mul(r[0]).add(r[1].mul(r[1])).add(r[2].mul(r[2]));
    let z = if sq.v == 0.0 {
        let c = cross(r, y);
        [y[0].add(c[0]), y[1].add(c[1]), y[2].add(c[2])]
    } else {
        let theta = sq.sqrt();
        let (c, s, inv) = (theta.cos(), theta.sin(), theta.recip());
        let u = [r[0].mul(inv), r[1].mul(inv), r[2].mul(inv)];
        let uy = cross(u, y);
        let t = u[0]
            .mul(y[0])
            .add(u[1].mul(y[1]))
            .add(u[2].mul(y[2]))
            .mul(D15::cst(1.0).sub(c));
        [0, 1, 2].map(|i| y[i].mul(c).add(uy[i].mul(s)).add(u[i].mul(t)))
    };
    let iz = z[2].recip();
    let p = [z[0].mul(iz), z[1].mul(iz)];
    let rsq = p[0].mul(p[0]).add(p[1].mul(p[1]));
    let l = D15::cst(1.0)
        .add(v[9].mul(rsq))
        .add(v[10].mul(rsq.mul(rsq)));
    [0, 1].map(|i| v[14].mul(p[i].mul(l).mul(v[6]).add(v[7 + i]).sub(D15::cst(feat[i]))))
}

fn ba_inputs(cam: &[f64], x: &[f64], w: f64, seed: impl Fn(f64, usize) -> D15) -> [D15; 15] {
    std::array::from_fn(|i| {
        let value = if i < 11 {
            cam[i]
        } else if i < 14 {
            x[i - 11]
        } else {
            w
        };
        seed(value, i)
    })
}

/// The p blocks (2 x 15) and the p derivatives of the weight errors, as vlad's `ba-jacobian`.
fn ba_jacobian(
    p: usize,
    cam: &[f64],
    x: &[f64],
    w: f64,
    feat: &[f64],
) -> (Vec<[[f64; 15]; 2]>, Vec<f64>) {
    let blocks = (0..p)
        .map(|_| {
            let e = ba_reprojection(&ba_inputs(cam, x, w, D15::var), feat);
            [e[0].d, e[1].d]
        })
        .collect();
    (blocks, vec![-2.0 * w; p])
}

/// The CSR form `vlad gradbench` writes (outside the timing on both sides).
fn ba_csr(n: usize, m: usize, blocks: &[[[f64; 15]; 2]], weights: &[f64]) -> Json {
    let (mut rows, mut cols, mut vals) = (vec![0usize], Vec::new(), Vec::new());
    for (i, block) in blocks.iter().enumerate() {
        for row in block {
            cols.extend(11 * (i % n)..11 * (i % n) + 11);
            cols.extend(11 * n + 3 * (i % m)..11 * n + 3 * (i % m) + 3);
            cols.push(11 * n + 3 * m + i);
            vals.extend(row);
            rows.push(cols.len());
        }
    }
    for (i, d) in weights.iter().enumerate() {
        cols.push(11 * n + 3 * m + i);
        vals.push(*d);
        rows.push(cols.len());
    }
    json!({"rows": rows, "cols": cols, "vals": vals})
}

// --- the table ---------------------------------------------------------------------------

/// A baseline's result, converted to JSON after the timing.
enum Out {
    Real(f64),
    Reals(Vec<f64>),
    Rows(Vec<Vec<f64>>),
    Object(Vec<(&'static str, Json)>),
    /// ba's objective: the reprojection and weight errors, repeated p times.
    BaObjective([f64; 2], f64, usize),
    /// ba's blocks and weight derivatives, for n cameras and m points.
    Ba(usize, usize, Vec<[[f64; 15]; 2]>, Vec<f64>),
}

impl Out {
    fn json(&self) -> Json {
        match self {
            Out::Real(x) => json!(x),
            Out::Reals(x) => json!(x),
            Out::Rows(x) => json!(x),
            Out::BaObjective(e, w, p) => json!({
                "reproj_error": {"elements": e, "repeated": p},
                "w_err": {"element": w, "repeated": p},
            }),
            Out::Ba(n, m, blocks, weights) => ba_csr(*n, *m, blocks, weights),
            Out::Object(fields) => Json::Object(
                fields
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect(),
            ),
        }
    }
}

/// A hand-written function, its input already in Rust's arrays (as the tool's calls have theirs
/// already in the library's).
type Baseline = Box<dyn Fn() -> Out>;

fn cases() -> Vec<(&'static str, &'static str, Json, Baseline)> {
    let x_lse = reals(1, 100_000);
    let x_llsq = reals(2, 32);
    let (n_llsq, l, s) = (4096, 8, 100);
    let a_det = reals(3, l * l);
    // x_i = (i + 1)/2 (1 + v_i / 10), so that y_i(2) = prod_j (1 + v_j / 10) is of order 1 (with
    // x_i near 1, y(2)'s last component would be about 2^100/100!, and the comparison empty).
    let x_ode: Vec<f64> = reals(4, 100)
        .iter()
        .enumerate()
        .map(|(i, v)| (i + 1) as f64 / 2.0 * (1.0 + 0.1 * v))
        .collect();
    let points: Vec<Vec<f64>> = (0..1000).map(|i| reals(100 + i, 8)).collect();
    let centroids: Vec<Vec<f64>> = (0..16).map(|j| points[j * 50].clone()).collect();
    let lse_in = json!({"x": x_lse});
    let llsq_in = json!({"x": x_llsq, "n": n_llsq});
    let det_in = json!({"A": a_det, "ell": l});
    let ode_in = json!({"x": x_ode, "s": s});
    let kmeans_in = json!({"points": points, "centroids": centroids});
    let saddle_in = json!({"start": [1.0, 1.0]});
    let particle_in = json!({"w": 0.0});
    let x = 1.5;
    let (x1, x2, x3, x4) = (x_lse.clone(), x_llsq.clone(), a_det.clone(), x_ode.clone());
    let (p1, c1) = (points.clone(), centroids.clone());
    let (gd, gk, gn) = (5, 10, 500);
    let gmm = Gmm {
        d: gd,
        k: gk,
        x: (0..gn).map(|i| reals(200 + i as u64, gd)).collect(),
        m: 0.0,
        gamma: 1.0,
    };
    let rows = |seed: u64, len: usize| -> Vec<Vec<f64>> {
        (0..gk)
            .map(|j| {
                reals(seed + j as u64, len)
                    .iter()
                    .map(|v| 0.5 * v)
                    .collect()
            })
            .collect()
    };
    let params: Params = (
        reals(5, gk),
        rows(300, gd),
        rows(400, gd),
        rows(500, gd * (gd - 1) / 2),
    );
    let gmm_in = json!({"d": gd, "k": gk, "n": gn, "x": gmm.x, "m": gmm.m, "gamma": gmm.gamma,
                        "alpha": params.0, "mu": params.1, "q": params.2, "l": params.3});
    let (gmm, params) = (std::rc::Rc::new(gmm), std::rc::Rc::new(params));
    let (gmm2, params2) = (gmm.clone(), params.clone());
    let ba_cam = [0.1, -0.2, 0.3, 0.2, -0.1, -5.0, 2.0, 0.05, -0.1, 0.1, -0.05];
    let (ba_x, ba_w, ba_feat) = ([0.7, 0.4, 1.2], 0.8, [0.1, 0.2]);
    let (ba_n, ba_m, ba_p) = (100, 1000, 2000);
    let ba_in = json!({"n": ba_n, "m": ba_m, "p": ba_p, "cam": ba_cam, "x": ba_x, "w": ba_w, "feat": ba_feat});
    let mut cases: Vec<(&'static str, &'static str, Json, Baseline)> = vec![
        (
            "ba",
            "objective",
            ba_in.clone(),
            Box::new(move || {
                let e = ba_reprojection(
                    &ba_inputs(&ba_cam, &ba_x, ba_w, |v, _| D15::cst(v)),
                    &ba_feat,
                );
                Out::BaObjective([e[0].v, e[1].v], 1.0 - ba_w * ba_w, ba_p)
            }),
        ),
        (
            "ba",
            "jacobian",
            ba_in,
            Box::new(move || {
                let (blocks, weights) = ba_jacobian(ba_p, &ba_cam, &ba_x, ba_w, &ba_feat);
                Out::Ba(ba_n, ba_m, blocks, weights)
            }),
        ),
    ];
    let more: Vec<(&'static str, &'static str, Json, Baseline)> = vec![
        (
            "gmm",
            "objective",
            gmm_in.clone(),
            Box::new(move || Out::Real(gmm.objective(&params))),
        ),
        (
            "gmm",
            "jacobian",
            gmm_in,
            Box::new(move || {
                let (a, m, q, l) = gmm2.gradient(&params2);
                Out::Object(vec![
                    ("alpha", json!(a)),
                    ("mu", json!(m)),
                    ("q", json!(q)),
                    ("l", json!(l)),
                ])
            }),
        ),
        (
            "hello",
            "square",
            json!(x),
            Box::new(move || Out::Real(black_box(x) * black_box(x))),
        ),
        (
            "hello",
            "double",
            json!(x),
            Box::new(move || Out::Real(2.0 * black_box(x))),
        ),
        (
            "saddle",
            "ff",
            saddle_in.clone(),
            Box::new(|| Out::Reals(sp::saddle::<sp::F, sp::F>(0).to_vec())),
        ),
        (
            "saddle",
            "fr",
            saddle_in.clone(),
            Box::new(|| Out::Reals(sp::saddle::<sp::F, sp::R>(0).to_vec())),
        ),
        (
            "saddle",
            "rf",
            saddle_in.clone(),
            Box::new(|| Out::Reals(sp::saddle::<sp::R, sp::F>(0).to_vec())),
        ),
        (
            "saddle",
            "rr",
            saddle_in,
            Box::new(|| Out::Reals(sp::saddle::<sp::R, sp::R>(0).to_vec())),
        ),
        (
            "particle",
            "ff",
            particle_in.clone(),
            Box::new(|| Out::Real(sp::particle::<sp::F, sp::F>(0))),
        ),
        (
            "particle",
            "fr",
            particle_in.clone(),
            Box::new(|| Out::Real(sp::particle::<sp::F, sp::R>(0))),
        ),
        (
            "particle",
            "rf",
            particle_in.clone(),
            Box::new(|| Out::Real(sp::particle::<sp::R, sp::F>(0))),
        ),
        (
            "particle",
            "rr",
            particle_in,
            Box::new(|| Out::Real(sp::particle::<sp::R, sp::R>(0))),
        ),
        (
            "lse",
            "primal",
            lse_in.clone(),
            Box::new(move || Out::Real(lse(&x_lse))),
        ),
        (
            "lse",
            "gradient",
            lse_in,
            Box::new(move || Out::Reals(lse_gradient(&x1))),
        ),
        (
            "llsq",
            "primal",
            llsq_in.clone(),
            Box::new(move || Out::Real(llsq(&x_llsq, n_llsq))),
        ),
        (
            "llsq",
            "gradient",
            llsq_in,
            Box::new(move || Out::Reals(llsq_gradient(&x2, n_llsq))),
        ),
        (
            "det",
            "primal",
            det_in.clone(),
            Box::new(move || Out::Real(det_minor(&a_det, l, 0, &mut vec![false; l]))),
        ),
        (
            "det",
            "gradient",
            det_in,
            Box::new(move || {
                let mut g = vec![0.0; l * l];
                det_minor_gradient(&x3, l, 0, &mut vec![false; l], 1.0, &mut g);
                Out::Reals(g)
            }),
        ),
        (
            "ode",
            "primal",
            ode_in.clone(),
            Box::new(move || Out::Reals(ode_states(&x_ode, s).swap_remove(s)[0].clone())),
        ),
        (
            "ode",
            "gradient",
            ode_in,
            Box::new(move || Out::Reals(ode_gradient(&x4, s))),
        ),
        (
            "kmeans",
            "cost",
            kmeans_in.clone(),
            Box::new(move || Out::Real(kmeans_cost(&points, &centroids))),
        ),
        (
            "kmeans",
            "dir",
            kmeans_in,
            Box::new(move || Out::Rows(kmeans_dir(&p1, &c1))),
        ),
    ];
    cases.extend(more);
    cases
}

/// The size of an input, for the table.
fn size(module: &str, input: &Json) -> String {
    match module {
        "lse" => format!("n = {}", input["x"].as_array().unwrap().len()),
        "llsq" => format!(
            "m = {}, n = {}",
            input["x"].as_array().unwrap().len(),
            input["n"]
        ),
        "det" => format!("l = {}", input["ell"]),
        "ode" => format!(
            "n = {}, s = {}",
            input["x"].as_array().unwrap().len(),
            input["s"]
        ),
        "kmeans" => {
            let p = input["points"].as_array().unwrap();
            format!(
                "n = {}, k = {}, d = {}",
                p.len(),
                input["centroids"].as_array().unwrap().len(),
                p[0].as_array().unwrap().len()
            )
        }
        "saddle" => "start (1, 1)".into(),
        "particle" => "w = 0".into(),
        "ba" => format!("n = {}, m = {}, p = {}", input["n"], input["m"], input["p"]),
        "gmm" => format!("d = {}, k = {}, n = {}", input["d"], input["k"], input["n"]),
        _ => format!("x = {input}"),
    }
}

/// The largest difference between two outputs by GradBench's measure; infinite on a shape
/// mismatch.
fn difference(a: &Json, b: &Json) -> f64 {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() / (x.abs() + y.abs()).max(1.0)
        }
        (Json::Object(x), Json::Object(y)) if x.len() == y.len() => x
            .iter()
            .map(|(k, v)| y.get(k).map_or(f64::INFINITY, |w| difference(v, w)))
            .fold(0.0, f64::max),
        (Json::Array(x), Json::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .map(|(x, y)| difference(x, y))
            .fold(0.0, f64::max),
        _ => f64::INFINITY,
    }
}

fn median(mut ns: Vec<u64>) -> f64 {
    ns.sort_unstable();
    let m = ns.len() / 2;
    if ns.len() % 2 == 1 {
        ns[m] as f64
    } else {
        (ns[m - 1] + ns[m]) as f64 / 2.0
    }
}

fn ms(ns: f64) -> String {
    let ms = ns / 1e6;
    if ms >= 100.0 {
        format!("{ms:.0}")
    } else if ms >= 1.0 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.4}")
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: gradbench-driver VLAD RUNS [MODULE...]");
        std::process::exit(2);
    }
    let runs: u64 = args[2].parse().expect("RUNS: a number");
    let only: Vec<&str> = args[3..].iter().map(String::as_str).collect();
    let cases: Vec<_> = cases()
        .into_iter()
        .filter(|c| only.is_empty() || only.contains(&c.0))
        .collect();
    let mut tool = Command::new(&args[1])
        .arg("gradbench")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start vlad gradbench");
    let mut to = tool.stdin.take().unwrap();
    let mut from = BufReader::new(tool.stdout.take().unwrap());
    let mut id = 0;
    let mut ask = |message: Json| -> Json {
        id += 1;
        let mut message = message;
        message["id"] = json!(id);
        writeln!(to, "{message}").unwrap();
        to.flush().unwrap();
        let mut line = String::new();
        from.read_line(&mut line).unwrap();
        let answer: Json = serde_json::from_str(&line).expect("a JSON answer");
        assert_eq!(answer["id"], json!(id));
        answer
    };
    let mut defined = Vec::new();
    for (module, ..) in &cases {
        if !defined.contains(module) {
            let started = Instant::now();
            let a = ask(json!({"kind": "define", "module": module}));
            assert_eq!(a["success"], json!(true), "define {module}: {a}");
            eprintln!(
                "defined {module} in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            defined.push(module);
        }
    }
    println!("| module | function | input | vlad ms | Rust ms | vlad / Rust | difference |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let mut failed = false;
    for (module, function, input, baseline) in &cases {
        let mut timed = input.clone();
        if timed.is_object() {
            timed["min_runs"] = json!(runs);
            timed["min_seconds"] = json!(0);
        }
        let a = ask(
            json!({"kind": "evaluate", "module": module, "function": function, "input": timed}),
        );
        assert_eq!(a["success"], json!(true), "{module} {function}: {a}");
        let vlad: Vec<u64> = a["timings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["nanoseconds"].as_u64().unwrap())
            .collect();
        // hello's input is a number, which carries no min_runs: evaluate it RUNS times.
        let mut vlad = vlad;
        while (vlad.len() as u64) < runs {
            let a = ask(
                json!({"kind": "evaluate", "module": module, "function": function, "input": input}),
            );
            vlad.push(a["timings"][0]["nanoseconds"].as_u64().unwrap());
        }
        let mut rust = Vec::new();
        let mut out = None;
        for _ in 0..runs {
            let started = Instant::now();
            out = Some(black_box(baseline()));
            rust.push(started.elapsed().as_nanos() as u64);
        }
        let d = difference(&a["output"], &out.unwrap().json());
        failed |= d.is_nan() || d > 1e-8;
        let (v, r) = (median(vlad), median(rust));
        println!(
            "| {module} | {function} | {} | {} | {} | {:.2} | {d:.1e} |",
            size(module, input),
            ms(v),
            ms(r),
            v / r
        );
    }
    drop(to);
    let _ = tool.wait();
    if failed {
        eprintln!("gradbench-driver: an output differs from the baseline by more than 1e-8");
        std::process::exit(1);
    }
}
