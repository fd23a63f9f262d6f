/* benches/array-ad/c/ba.c -- the hand-written baseline of ba.vlad (see there): ADBench's
 * bundle-adjustment reprojection errors, and each observation's 2 x 15 Jacobian block by a
 * hand-written forward mode over all 15 directions at once (a number carries its value and
 * its 15 partial derivatives, as benches/gradbench/driver's Rust reference does).  ba.vlad's
 * reverse and forward modes compute the same blocks, so modes 2 and 3 run the same code. */
#include "common.h"

#define ND 15
typedef struct {
  double v, d[ND];
} dn; /* a value and its derivatives with respect to the 15 inputs */

static inline dn dconst(double v) {
  dn r = {v, {0}};
  return r;
}
static inline dn dadd(dn a, dn b) {
  dn r;
  r.v = a.v + b.v;
  for (int i = 0; i < ND; i++) r.d[i] = a.d[i] + b.d[i];
  return r;
}
static inline dn dsub(dn a, dn b) {
  dn r;
  r.v = a.v - b.v;
  for (int i = 0; i < ND; i++) r.d[i] = a.d[i] - b.d[i];
  return r;
}
static inline dn dmul(dn a, dn b) {
  dn r;
  r.v = a.v * b.v;
  for (int i = 0; i < ND; i++) r.d[i] = a.d[i] * b.v + a.v * b.d[i];
  return r;
}
static inline dn ddiv(dn a, dn b) {
  dn r;
  r.v = a.v / b.v;
  double inv = 1 / b.v;
  for (int i = 0; i < ND; i++) r.d[i] = (a.d[i] - r.v * b.d[i]) * inv;
  return r;
}
static inline dn dfun(dn a, double v, double dv) { /* f(a) with f(a.v) = v, f'(a.v) = dv */
  dn r;
  r.v = v;
  for (int i = 0; i < ND; i++) r.d[i] = dv * a.d[i];
  return r;
}
static inline dn dsqrt(dn a) { double s = sqrt(a.v); return dfun(a, s, 0.5 / s); }
static inline dn dsin(dn a) { return dfun(a, sin(a.v), cos(a.v)); }
static inline dn dcos(dn a) { return dfun(a, cos(a.v), -sin(a.v)); }

/* The projection, written once for plain doubles (T = double) and once for dn. */
#define PROJECT(NAME, T, ADD, SUB, MUL, DIV, SQRT, SIN, COS, K)                                  \
  static void NAME(const T *cam, const T *x, T w, const double *feat, T *err) {                 \
    T r[3] = {cam[0], cam[1], cam[2]}, y[3], xc[3];                                              \
    for (int i = 0; i < 3; i++) y[i] = SUB(x[i], cam[3 + i]);                                    \
    T sq = ADD(ADD(MUL(r[0], r[0]), MUL(r[1], r[1])), MUL(r[2], r[2]));                          \
    if (VAL(sq) == 0) {                                                                          \
      xc[0] = ADD(y[0], SUB(MUL(r[1], y[2]), MUL(r[2], y[1])));                                  \
      xc[1] = ADD(y[1], SUB(MUL(r[2], y[0]), MUL(r[0], y[2])));                                  \
      xc[2] = ADD(y[2], SUB(MUL(r[0], y[1]), MUL(r[1], y[0])));                                  \
    } else {                                                                                     \
      T theta = SQRT(sq), c = COS(theta), s = SIN(theta), inv = DIV(K(1), theta), u[3];          \
      for (int i = 0; i < 3; i++) u[i] = MUL(r[i], inv);                                         \
      T cr[3] = {SUB(MUL(u[1], y[2]), MUL(u[2], y[1])), SUB(MUL(u[2], y[0]), MUL(u[0], y[2])),   \
                 SUB(MUL(u[0], y[1]), MUL(u[1], y[0]))};                                         \
      T tmp = MUL(ADD(ADD(MUL(u[0], y[0]), MUL(u[1], y[1])), MUL(u[2], y[2])), SUB(K(1), c));    \
      for (int i = 0; i < 3; i++) xc[i] = ADD(ADD(MUL(y[i], c), MUL(cr[i], s)), MUL(u[i], tmp)); \
    }                                                                                            \
    T iz = DIV(K(1), xc[2]), p0 = MUL(xc[0], iz), p1 = MUL(xc[1], iz);                           \
    T rsq = ADD(MUL(p0, p0), MUL(p1, p1));                                                       \
    T l = ADD(K(1), ADD(MUL(cam[9], rsq), MUL(cam[10], MUL(rsq, rsq))));                         \
    err[0] = MUL(w, SUB(ADD(MUL(MUL(p0, l), cam[6]), cam[7]), K(feat[0])));                      \
    err[1] = MUL(w, SUB(ADD(MUL(MUL(p1, l), cam[6]), cam[8]), K(feat[1])));                      \
  }
static inline double fadd(double a, double b) { return a + b; }
static inline double fsub(double a, double b) { return a - b; }
static inline double fmul(double a, double b) { return a * b; }
static inline double fdiv(double a, double b) { return a / b; }
static inline double fk(double a) { return a; }
#define VAL(a) (fk(a))
PROJECT(reproject, double, fadd, fsub, fmul, fdiv, sqrt, sin, cos, fk)
#undef VAL
static inline double dval(dn a) { return a.v; }
#define VAL(a) (dval(a))
PROJECT(reproject_d, dn, dadd, dsub, dmul, ddiv, dsqrt, dsin, dcos, dconst)
#undef VAL

/* The 2 x 15 block of one observation into block (row-major). */
static void jacobian_block(const double *cam, const double *x, double w, const double *feat,
                           double *block) {
  dn in[ND], err[2];
  for (int i = 0; i < ND; i++) {
    in[i] = dconst(i < 11 ? cam[i] : i < 14 ? x[i - 11] : w);
    in[i].d[i] = 1;
  }
  reproject_d(in, in + 11, in[14], feat, err);
  for (int i = 0; i < ND; i++) block[i] = err[0].d[i], block[ND + i] = err[1].d[i];
}

static const double base[11] = {0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0};
static const double scale[11] = {0.05, 0.05, 0.05, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.01, 0.01};

int main(void) {
  long ncam = (long)rd(), npt = (long)rd();
  int mode = (int)rd();
  long reps = (long)rd(), p = ncam * npt;
  double *pts = vec(npt * 3), *wts = vec(p), *feats = vec(p * 2), *cams = vec(ncam * 11);
  double *errs = vec(p * 2), *werrs = vec(p), *blocks = vec(p * 2 * ND);
  for (long s = 0; s < npt; s++) {
    pts[s * 3] = sin(3 * (double)s);
    pts[s * 3 + 1] = cos(3 * (double)s + 1);
    pts[s * 3 + 2] = 5 + 0.5 * sin((double)s);
  }
  for (long c = 0; c < ncam; c++)
    for (long s = 0; s < npt; s++) {
      double o = (double)(c * npt) + (double)s;
      wts[c * npt + s] = 1 + 0.1 * sin(o);
      for (int e = 0; e < 2; e++) feats[(c * npt + s) * 2 + e] = 0.1 * sin(2 * o + e);
    }
  double fsum = 0;
  for (long o = 0; o < p; o++) fsum += vsum(feats + 2 * o, 2);
  double out[3] = {fsum + (msum(pts, npt, 3) + msum(wts, ncam, npt)), 0, 0};
  if (mode == 9) {
    fd_t c = {0};
    double block[2 * ND], v[ND], ep[2], em[2];
    for (long cc = 0; cc < ncam; cc++)
      for (int e = 0; e < 11; e++) cams[cc * 11 + e] = base[e] + scale[e] * sin((double)(11 * cc + e));
    for (long o = 0; o < p; o++) {
      long cc = o / npt, s = o % npt;
      jacobian_block(cams + cc * 11, pts + s * 3, wts[o], feats + 2 * o, block);
      for (int i = 0; i < ND; i++) v[i] = i < 11 ? cams[cc * 11 + i] : i < 14 ? pts[s * 3 + i - 11] : wts[o];
      for (int i = 0; i < ND; i++) {
        double vi = v[i];
        v[i] = vi + FD_H;
        reproject(v, v + 11, v[14], feats + 2 * o, ep);
        v[i] = vi - FD_H;
        reproject(v, v + 11, v[14], feats + 2 * o, em);
        v[i] = vi;
        for (int k = 0; k < 2; k++) fd_add(&c, block[k * ND + i], (ep[k] - em[k]) / (2 * FD_H));
      }
      double w = wts[o];
      fd_add(&c, -2 * w, ((1 - (w + FD_H) * (w + FD_H)) - (1 - (w - FD_H) * (w - FD_H))) / (2 * FD_H));
    }
    return fd_report("ba Jacobian blocks", &c);
  }
  for (long r = 0; r < reps; r++) {
    for (long c = 0; c < ncam; c++)
      for (int e = 0; e < 11; e++)
        cams[c * 11 + e] = base[e] + scale[e] * sin((double)(11 * c + e) + (double)r);
    if (mode == 1) {
      for (long c = 0; c < ncam; c++)
        for (long s = 0; s < npt; s++) {
          long o = c * npt + s;
          reproject(cams + c * 11, pts + s * 3, wts[o], feats + 2 * o, errs + 2 * o);
          werrs[o] = 1 - wts[o] * wts[o];
        }
      double se = 0, sw = 0;
      for (long o = 0; o < p; o++) se += vsum(errs + 2 * o, 2);
      for (long o = 0; o < p; o++) sw += werrs[o];
      out[1] += se;
      out[2] += sw;
    } else {
      for (long c = 0; c < ncam; c++)
        for (long s = 0; s < npt; s++) {
          long o = c * npt + s;
          jacobian_block(cams + c * 11, pts + s * 3, wts[o], feats + 2 * o, blocks + o * 2 * ND);
          werrs[o] = -2 * wts[o];
        }
      double sb = 0, sw = 0;
      for (long o = 0; o < p; o++) sb += msum(blocks + o * 2 * ND, 2, ND);
      for (long o = 0; o < p; o++) sw += werrs[o];
      out[1] += sb;
      out[2] += sw;
    }
    clobber();
  }
  print_list(3, out);
  return 0;
}
