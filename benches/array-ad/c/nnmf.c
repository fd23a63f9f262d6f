/* benches/array-ad/c/nnmf.c -- the hand-written baseline of nnmf.vlad (see there): the NNMF
 * objective D(u, v) = sum_ij log(x_ij) + A_ij / x_ij with x_ij = u_i v_j, in one pass over A,
 * and its gradient with respect to v by the update formula of paper 002 section 5,
 * g = u^T (1/x - A/x^2): g_j = sum_i u_i (1/x_ij - A_ij/x_ij^2), also in one pass over A. */
#include "common.h"

static double objective(const double *a, const double *u, const double *v, long m, long n) {
  double s = 0;
  for (long i = 0; i < m; i++) {
    const double *ai = a + i * n;
    double row = 0;
    for (long j = 0; j < n; j++) {
      double x = v[j] * u[i];
      row += log(x) + ai[j] / x;
    }
    s += row;
  }
  return s;
}

static void gradient(const double *a, const double *u, const double *v, long m, long n,
                     double *g) {
  memset(g, 0, n * sizeof(double));
  for (long i = 0; i < m; i++) {
    const double *ai = a + i * n;
    double ui = u[i];
    for (long j = 0; j < n; j++) {
      double x = v[j] * ui;
      g[j] += ui * (1 / x - ai[j] / (x * x));
    }
  }
}

int main(void) {
  (void)rd(); /* the form of nnmf.vlad's objective: both compute the same sums */
  long m = (long)rd();
  long n = (long)rd();
  int mode = (int)rd();
  long reps = (long)rd();
  double *a = vec(m * n), *u = vec(m), *v = vec(n), *g = vec(n);
  for (long i = 0; i < m; i++)
    for (long j = 0; j < n; j++) {
      double s = sin((double)(n * i) + (double)j);
      a[i * n + j] = 1 + s * s;
    }
  for (long i = 0; i < m; i++) u[i] = 1 + 0.5 * sin((double)i);
  double out[3] = {msum(a, m, n) + vsum(u, m), 0, 0};
  if (mode == 9) {
    fd_t c = {0};
    for (long j = 0; j < n; j++) v[j] = 1 + 0.5 * cos((double)j);
    gradient(a, u, v, m, n, g);
    for (long j = 0; j < n; j++) {
      double vj = v[j];
      v[j] = vj + FD_H;
      double fp = objective(a, u, v, m, n);
      v[j] = vj - FD_H;
      double fm = objective(a, u, v, m, n);
      v[j] = vj;
      fd_add(&c, g[j], (fp - fm) / (2 * FD_H));
    }
    return fd_report("nnmf gradient", &c);
  }
  for (long r = 0; r < reps; r++) {
    for (long j = 0; j < n; j++) v[j] = 1 + 0.5 * cos((double)j + (double)r);
    if (mode == 1) {
      out[1] += objective(a, u, v, m, n);
    } else {
      gradient(a, u, v, m, n, g);
      out[1] += vsum(g, n);
      out[2] += g[n - 1];
    }
    clobber();
  }
  print_list(mode == 1 ? 2 : 3, out);
  return 0;
}
