/* benches/array-ad/c/micro.c -- the hand-written baseline of micro.vlad (see there): paper
 * 002's four vector expressions and their Jacobians, written as one would by hand (the
 * gradient of x.v is v, of max the one-hot vector, of x + v the identity, of x s with
 * respect to s the vector x).  The forward and reverse modes of micro.vlad compute the same
 * Jacobian, so modes 2 and 3 run the same code here, and so do 4 and 5 where the products
 * coincide. */
#include "common.h"

static long argmax(const double *x, long n) {
  long k = 0;
  double m = x[0];
  for (long i = 0; i < n; i++)
    if (x[i] > m) m = x[i], k = i;
  return k;
}

/* The checksums of micro.vlad: a real (x, 0), a vector (sum, last), a matrix (sum, last). */
static void add_real(double *out, double x) { out[0] += x; }
static void add_vector(double *out, const double *g, long n) {
  out[0] += vsum(g, n);
  out[1] += g[n - 1];
}

int main(void) {
  int op = (int)rd();
  long n = (long)rd();
  int mode = (int)rd();
  long reps = (long)rd();
  double *u = vec(n), *v = vec(n), *w = vec(n), *x = vec(n), *g = vec(n);
  for (long i = 0; i < n; i++) u[i] = sin((double)i);
  for (long i = 0; i < n; i++) v[i] = cos((double)i);
  for (long i = 0; i < n; i++) w[i] = sin(2 * (double)i);
  double out[3] = {vsum(u, n) + (vsum(v, n) + vsum(w, n)), 0, 0};
  double *sum = out + 1;
  double *jac = 0; /* the n x n Jacobian of add */
  if (op == 3 && (mode == 2 || mode == 3)) jac = vec(n * n);
  if (mode == 9) {
    /* The hand-written derivatives against central differences of the primal. */
    fd_t c = {0};
    for (long i = 0; i < n; i++) x[i] = u[i];
    long k = argmax(x, n);
    for (long j = 0; j < n; j++) {
      double xj = x[j];
      x[j] = xj + FD_H;
      double dp = vdot(x, v, n), mp = x[argmax(x, n)];
      x[j] = xj - FD_H;
      double dm = vdot(x, v, n), mm = x[argmax(x, n)];
      x[j] = xj;
      fd_add(&c, v[j], (dp - dm) / (2 * FD_H));           /* d(x.v)/dx_j = v_j */
      fd_add(&c, j == k, (mp - mm) / (2 * FD_H));         /* d max/dx_j = [j = argmax] */
      for (long i = 0; i < n; i++)                        /* d(x + v)_i/dx_j = [i = j] */
        fd_add(&c, i == j, (((i == j ? xj + FD_H : x[i]) + v[i]) - ((i == j ? xj - FD_H : x[i]) + v[i])) / (2 * FD_H));
    }
    for (long i = 0; i < n; i++)                          /* d(x s)_i/ds = x_i */
      fd_add(&c, x[i], (x[i] * (1.5 + FD_H) - x[i] * (1.5 - FD_H)) / (2 * FD_H));
    return fd_report("micro Jacobians", &c);
  }
  for (long r = 0; r < reps; r++) {
    double cr = 0.001 * (double)r, s = 1.5 + 0.001 * (double)r;
    for (long i = 0; i < n; i++) x[i] = u[i] + cr;
    if (op == 1) { /* dot */
      if (mode == 1) add_real(sum, vdot(x, v, n));
      else if (mode == 5) add_real(sum, vdot(w, v, n));
      else { /* the gradient is v; a vjp with 1 too */
        memcpy(g, v, n * sizeof(double));
        add_vector(sum, g, n);
      }
    } else if (op == 2) { /* max */
      long k = argmax(x, n);
      if (mode == 1) add_real(sum, x[k]);
      else if (mode == 5) add_real(sum, w[k]);
      else {
        memset(g, 0, n * sizeof(double));
        g[k] = 1;
        add_vector(sum, g, n);
      }
    } else if (op == 3) { /* add */
      if (mode == 1) {
        for (long i = 0; i < n; i++) g[i] = x[i] + v[i];
        add_vector(sum, g, n);
      } else if (mode == 2 || mode == 3) {
        memset(jac, 0, n * n * sizeof(double));
        for (long i = 0; i < n; i++) jac[i * n + i] = 1;
        sum[0] += msum(jac, n, n);
        sum[1] += jac[n * n - 1];
      } else {
        memcpy(g, w, n * sizeof(double)); /* the vjp and the jvp with w are w */
        add_vector(sum, g, n);
      }
    } else { /* smul */
      if (mode == 1) {
        for (long i = 0; i < n; i++) g[i] = x[i] * s;
        add_vector(sum, g, n);
      } else if (mode == 4) {
        add_real(sum, vdot(w, x, n));
      } else {
        memcpy(g, x, n * sizeof(double)); /* the Jacobian column is x */
        add_vector(sum, g, n);
      }
    }
    clobber();
  }
  print_list(3, out);
  return 0;
}
