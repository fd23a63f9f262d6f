/* benches/array-ad/c/logreg.c -- the hand-written baseline of logreg.vlad (see there): the
 * logistic loss (1/n) sum_i log(1 + exp(u_i)), u_i = -y_i X_i.w, its gradient
 * sum_i c_i X_i with c_i = -y_i sigma(u_i)/n, its Hessian sum_i h_i X_i X_i^T with
 * h_i = sigma(u_i)(1 - sigma(u_i))/n, and gradient descent with that gradient. */
#include "common.h"

static double loss(const double *x, const double *y, const double *w, long n, long d) {
  double acc = 0;
  for (long i = 0; i < n; i++) acc += log(1 + exp(0 - y[i] * vdot(x + i * d, w, d)));
  return acc / (double)n;
}

static void grad(const double *x, const double *y, const double *w, long n, long d, double *g) {
  memset(g, 0, d * sizeof(double));
  for (long i = 0; i < n; i++) {
    const double *xi = x + i * d;
    double e = exp(0 - y[i] * vdot(xi, w, d));
    double c = -y[i] * (e / (1 + e)) / (double)n;
    for (long j = 0; j < d; j++) g[j] += c * xi[j];
  }
}

static void hessian(const double *x, const double *y, const double *w, long n, long d, double *h) {
  memset(h, 0, d * d * sizeof(double));
  for (long i = 0; i < n; i++) {
    const double *xi = x + i * d;
    double e = exp(0 - y[i] * vdot(xi, w, d));
    double c = e / ((1 + e) * (1 + e)) / (double)n;
    for (long j = 0; j < d; j++) {
      double cj = c * xi[j];
      for (long k = 0; k < d; k++) h[j * d + k] += cj * xi[k];
    }
  }
}

int main(void) {
  long n = (long)rd(), d = (long)rd();
  int mode = (int)rd();
  long reps = (long)rd();
  double *x = vec(n * d), *y = vec(n), *ws = vec(d), *w = vec(d), *g = vec(d), *h = vec(d * d);
  for (long i = 0; i < n; i++)
    for (long j = 0; j < d; j++) x[i * d + j] = sin((double)(d * i) + (double)j);
  for (long j = 0; j < d; j++) ws[j] = cos((double)j);
  for (long i = 0; i < n; i++) y[i] = vdot(x + i * d, ws, d) + 0.5 * sin(5 * (double)i) > 0 ? 1 : -1;
  double out[3] = {msum(x, n, d) + vsum(y, n), 0, 0};
  if (mode == 9) {
    fd_t cg = {0}, ch = {0};
    double *gp = vec(d), *gm = vec(d);
    for (long j = 0; j < d; j++) w[j] = 0.1 * cos((double)j);
    grad(x, y, w, n, d, g);
    hessian(x, y, w, n, d, h);
    for (long j = 0; j < d; j++) {
      double wj = w[j];
      w[j] = wj + FD_H;
      double fp = loss(x, y, w, n, d);
      grad(x, y, w, n, d, gp);
      w[j] = wj - FD_H;
      double fm = loss(x, y, w, n, d);
      grad(x, y, w, n, d, gm);
      w[j] = wj;
      fd_add(&cg, g[j], (fp - fm) / (2 * FD_H));
      for (long k = 0; k < d; k++) fd_add(&ch, h[k * d + j], (gp[k] - gm[k]) / (2 * FD_H));
    }
    return fd_report("logreg gradient", &cg) | fd_report("logreg Hessian", &ch);
  }
  if (mode == 4) {
    for (long step = 0; step < reps; step++) {
      grad(x, y, w, n, d, g);
      for (long j = 0; j < d; j++) w[j] = w[j] - g[j] * 0.5;
    }
    out[1] = loss(x, y, w, n, d);
    out[2] = vsum(w, d);
    print_list(3, out);
    return 0;
  }
  for (long r = 0; r < reps; r++) {
    for (long j = 0; j < d; j++) w[j] = 0.1 * cos((double)j + (double)r);
    if (mode == 1) {
      out[1] += loss(x, y, w, n, d);
    } else if (mode == 2 || mode == 3) {
      grad(x, y, w, n, d, g);
      out[1] += vsum(g, d);
      out[2] += g[d - 1];
    } else {
      hessian(x, y, w, n, d, h);
      out[1] += msum(h, d, d);
      out[2] += h[d * d - 1];
    }
    clobber();
  }
  print_list(mode == 1 ? 2 : 3, out);
  return 0;
}
