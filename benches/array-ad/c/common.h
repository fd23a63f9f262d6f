/* benches/array-ad/c/common.h -- shared by the hand-written C baselines of benches/array-ad/.
 *
 * Each baseline reads what its VLAD program reads (sizes, a mode, reps) from standard input,
 * builds the same data and the same point for each repetition r, computes the same thing
 * (derivatives written by hand), and prints the same checksums, in the order and with the
 * rounding of the VLAD program's sums, so that the two agree to about 1e-12.  Mode 9 checks
 * the hand-written derivatives against central finite differences of the primal at the point
 * of repetition 0 and exits 1 if they differ.
 *
 * Compiled as vlad compiles its C: cc -O3 -march=native -ffp-contract=off. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double rd(void) {
  double x;
  if (scanf("%lf", &x) != 1) {
    fprintf(stderr, "expected a number on standard input\n");
    exit(2);
  }
  return x;
}

static double *vec(long n) {
  double *p = calloc(n > 0 ? (size_t)n : 1, sizeof(double));
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(3);
  }
  return p;
}

/* Prints (a b c ...), as VLAD prints a list of reals (to the last bit, in another notation). */
static void print_list(int k, const double *v) {
  putchar('(');
  for (int i = 0; i < k; i++) printf(i ? " %.17g" : "%.17g", v[i]);
  puts(")");
}

/* vector-sum and vector-dot of lib/array.vlad: from 0, left to right. */
static double vsum(const double *v, long n) {
  double s = 0;
  for (long i = 0; i < n; i++) s += v[i];
  return s;
}
static double vdot(const double *u, const double *v, long n) {
  double s = 0;
  for (long i = 0; i < n; i++) s += u[i] * v[i];
  return s;
}
/* matrix-sum of a rows x cols row-major matrix: the sum of its row sums. */
static double msum(const double *m, long rows, long cols) {
  double s = 0;
  for (long i = 0; i < rows; i++) s += vsum(m + i * cols, cols);
  return s;
}

/* An optimisation barrier, at the end of each repetition: the C compiler must assume that any
   memory may have changed, so that it cannot hoist work that does not depend on the
   repetition (the sum of the gradient of x.v, which is v) out of the repetition loop. */
static inline void clobber(void) { __asm__ volatile("" ::: "memory"); }

/* Finite differences: the step, and the error measure of one check (the largest difference
   relative to the largest derivative, at least 1). */
#define FD_H 1e-6
#define FD_TOL 1e-7
typedef struct {
  double err, scale;
  long count;
} fd_t;
static void fd_add(fd_t *c, double exact, double approx) {
  double e = fabs(exact - approx);
  if (e > c->err) c->err = e;
  if (fabs(exact) > c->scale) c->scale = fabs(exact);
  c->count++;
}
static int fd_report(const char *what, const fd_t *c) {
  double rel = c->err / (c->scale > 1 ? c->scale : 1);
  int bad = !(rel <= FD_TOL);
  printf("%s: %ld derivatives, largest difference from central differences %.2e (relative %.2e)%s\n",
         what, c->count, c->err, rel, bad ? "  FAILED" : "");
  return bad;
}
