/* benches/array-ad/c/kmeans.c -- the hand-written baseline of kmeans.vlad (see there): the
 * k-means cost, its gradient 2 (C_j - P_i) summed over the points i nearest to C_j, and the
 * Hessian-vector product with all ones (2 times the number of points nearest to C_j). */
#include "common.h"

static double dist2(const double *p, const double *c, long d) {
  double s = 0;
  for (long i = 0; i < d; i++) {
    double e = p[i] - c[i];
    s += e * e;
  }
  return s;
}

/* The nearest centre to p (the first on ties) and its squared distance. */
static long nearest(const double *p, const double *cs, long k, long d, double *dist) {
  double m = dist2(p, cs, d);
  long best = 0;
  for (long j = 0; j < k; j++) {
    double e = dist2(p, cs + j * d, d);
    if (e < m) m = e, best = j;
  }
  *dist = m;
  return best;
}

static double cost(const double *ps, const double *cs, long n, long k, long d) {
  double acc = 0, m;
  for (long i = 0; i < n; i++) {
    nearest(ps + i * d, cs, k, d, &m);
    acc += m;
  }
  return acc;
}

/* The gradient G, and in h (if not null) the Hessian times all ones. */
static void grad(const double *ps, const double *cs, long n, long k, long d, double *g, double *h) {
  memset(g, 0, k * d * sizeof(double));
  if (h) memset(h, 0, k * d * sizeof(double));
  double m;
  for (long i = 0; i < n; i++) {
    const double *p = ps + i * d;
    long j = nearest(p, cs, k, d, &m);
    for (long c = 0; c < d; c++) g[j * d + c] += 2 * (cs[j * d + c] - p[c]);
    if (h)
      for (long c = 0; c < d; c++) h[j * d + c] += 2;
  }
}

int main(void) {
  long n = (long)rd(), k = (long)rd(), d = (long)rd();
  int mode = (int)rd();
  long reps = (long)rd();
  double *ps = vec(n * d), *cs = vec(k * d), *g = vec(k * d), *h = vec(k * d);
  for (long i = 0; i < n; i++)
    for (long c = 0; c < d; c++) ps[i * d + c] = sin((double)(d * i) + (double)c);
  double out[3] = {msum(ps, n, d), 0, 0};
  if (mode == 9) {
    fd_t cg = {0}, ch = {0};
    double *gp = vec(k * d), *gm = vec(k * d);
    for (long j = 0; j < k; j++)
      for (long c = 0; c < d; c++) cs[j * d + c] = cos((double)(d * j) + (double)c);
    grad(ps, cs, n, k, d, g, h);
    for (long e = 0; e < k * d; e++) {
      double ce = cs[e];
      cs[e] = ce + FD_H;
      double fp = cost(ps, cs, n, k, d);
      cs[e] = ce - FD_H;
      double fm = cost(ps, cs, n, k, d);
      cs[e] = ce;
      fd_add(&cg, g[e], (fp - fm) / (2 * FD_H));
    }
    for (long e = 0; e < k * d; e++) cs[e] += FD_H;
    grad(ps, cs, n, k, d, gp, 0);
    for (long e = 0; e < k * d; e++) cs[e] -= 2 * FD_H;
    grad(ps, cs, n, k, d, gm, 0);
    for (long e = 0; e < k * d; e++) fd_add(&ch, h[e], (gp[e] - gm[e]) / (2 * FD_H));
    return fd_report("kmeans gradient", &cg) | fd_report("kmeans Hessian times ones", &ch);
  }
  for (long r = 0; r < reps; r++) {
    for (long j = 0; j < k; j++)
      for (long c = 0; c < d; c++) cs[j * d + c] = cos((double)(d * j) + (double)c + (double)r);
    if (mode == 1) {
      out[1] += cost(ps, cs, n, k, d);
    } else if (mode == 2 || mode == 4) {
      grad(ps, cs, n, k, d, g, 0);
      out[1] += msum(g, k, d);
      out[2] += g[k * d - 1];
    } else {
      grad(ps, cs, n, k, d, g, h);
      out[1] += msum(g, k, d);
      out[2] += msum(h, k, d);
    }
    clobber();
  }
  print_list(mode == 1 ? 2 : 3, out);
  return 0;
}
