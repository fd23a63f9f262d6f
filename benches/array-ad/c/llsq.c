/* benches/array-ad/c/llsq.c -- the hand-written baseline of llsq.vlad (see there):
 * f(x) = |A x - b|^2 and its gradient 2 A^T (A x - b), one pass over A each. */
#include "common.h"

static double llsq(const double *a, const double *b, const double *x, long n, long d) {
  double acc = 0;
  for (long i = 0; i < n; i++) {
    double e = vdot(a + i * d, x, d) - b[i];
    acc += e * e;
  }
  return acc;
}

static void llsq_grad(const double *a, const double *b, const double *x, long n, long d, double *g) {
  memset(g, 0, d * sizeof(double));
  for (long i = 0; i < n; i++) {
    const double *ai = a + i * d;
    double e2 = 2 * (vdot(ai, x, d) - b[i]);
    for (long j = 0; j < d; j++) g[j] += e2 * ai[j];
  }
}

int main(void) {
  long n = (long)rd(), d = (long)rd();
  int mode = (int)rd();
  long reps = (long)rd();
  double *a = vec(n * d), *b = vec(n), *x = vec(d), *g = vec(d);
  for (long i = 0; i < n; i++)
    for (long j = 0; j < d; j++) a[i * d + j] = sin((double)(d * i) + (double)j);
  for (long i = 0; i < n; i++) b[i] = cos((double)i);
  double out[3] = {msum(a, n, d) + vsum(b, n), 0, 0};
  if (mode == 9) {
    fd_t c = {0};
    for (long j = 0; j < d; j++) x[j] = cos((double)j);
    llsq_grad(a, b, x, n, d, g);
    for (long j = 0; j < d; j++) {
      double xj = x[j];
      x[j] = xj + FD_H;
      double fp = llsq(a, b, x, n, d);
      x[j] = xj - FD_H;
      double fm = llsq(a, b, x, n, d);
      x[j] = xj;
      fd_add(&c, g[j], (fp - fm) / (2 * FD_H));
    }
    return fd_report("llsq gradient", &c);
  }
  for (long r = 0; r < reps; r++) {
    for (long j = 0; j < d; j++) x[j] = cos((double)j + (double)r);
    if (mode == 1) {
      out[1] += llsq(a, b, x, n, d);
    } else {
      llsq_grad(a, b, x, n, d, g);
      out[1] += vsum(g, d);
      out[2] += g[d - 1];
    }
    clobber();
  }
  print_list(mode == 1 ? 2 : 3, out);
  return 0;
}
