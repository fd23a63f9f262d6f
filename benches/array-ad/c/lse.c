/* benches/array-ad/c/lse.c -- the hand-written baseline of lse.vlad (see there): log-sum-exp,
 * its gradient (the softmax p) and the Hessian-vector product H v = p (v - p.v). */
#include "common.h"

static double lse(const double *x, long n) {
  double m = x[0];
  for (long i = 0; i < n; i++)
    if (x[i] > m) m = x[i];
  double s = 0;
  for (long i = 0; i < n; i++) s += exp(x[i] - m);
  return m + log(s);
}

static void lse_grad(const double *x, long n, double *g) {
  double m = x[0];
  for (long i = 0; i < n; i++)
    if (x[i] > m) m = x[i];
  double s = 0;
  for (long i = 0; i < n; i++) s += (g[i] = exp(x[i] - m));
  double inv = 1 / s;
  for (long i = 0; i < n; i++) g[i] *= inv;
}

static void lse_hvp(const double *x, const double *v, long n, double *h) {
  lse_grad(x, n, h);
  double pv = vdot(h, v, n);
  for (long i = 0; i < n; i++) h[i] = h[i] * (v[i] - pv);
}

int main(void) {
  long n = (long)rd();
  int mode = (int)rd();
  long reps = (long)rd();
  double *t = vec(n), *v = vec(n), *x = vec(n), *g = vec(n);
  for (long i = 0; i < n; i++) t[i] = sin((double)i);
  for (long i = 0; i < n; i++) v[i] = cos((double)i);
  double out[3] = {vsum(t, n) + vsum(v, n), 0, 0};
  if (mode == 9) {
    fd_t cg = {0}, ch = {0};
    double *gp = vec(n), *gm = vec(n);
    for (long i = 0; i < n; i++) x[i] = t[i];
    lse_grad(x, n, g);
    for (long i = 0; i < n; i++) {
      double xi = x[i];
      x[i] = xi + FD_H;
      double fp = lse(x, n);
      x[i] = xi - FD_H;
      double fm = lse(x, n);
      x[i] = xi;
      fd_add(&cg, g[i], (fp - fm) / (2 * FD_H));
    }
    lse_hvp(x, v, n, g);
    for (long i = 0; i < n; i++) x[i] = t[i] + FD_H * v[i];
    lse_grad(x, n, gp);
    for (long i = 0; i < n; i++) x[i] = t[i] - FD_H * v[i];
    lse_grad(x, n, gm);
    for (long i = 0; i < n; i++) fd_add(&ch, g[i], (gp[i] - gm[i]) / (2 * FD_H));
    return fd_report("lse gradient", &cg) | fd_report("lse Hessian-vector product", &ch);
  }
  for (long r = 0; r < reps; r++) {
    double s = 1 + 0.001 * (double)r;
    for (long i = 0; i < n; i++) x[i] = s * t[i];
    if (mode == 1) {
      out[1] += lse(x, n);
    } else {
      if (mode == 2 || mode == 3) lse_grad(x, n, g);
      else lse_hvp(x, v, n, g);
      out[1] += vdot(g, t, n);
      out[2] += g[n - 1];
    }
    clobber();
  }
  print_list(mode == 1 ? 2 : 3, out);
  return 0;
}
