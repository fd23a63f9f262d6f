/* benches/array-ad/c/gmm.c -- the hand-written baseline of gmm.vlad (see there): ADBench's
 * GMM objective and its gradient by hand (the adjoints of benches/gradbench/driver's Rust
 * reference: for each point the softmax weights w_j of the components, then the adjoints of
 * z = Q_j (x - mu_j): dQ_j -= w_j z v^T on the lower triangle, dmu_j += w_j Q_j^T z). */
#include "common.h"

typedef struct {
  long d, k, n, tri;
  const double *x;
} gmm_t;

/* The parameters, each a flat row-major array: alpha k, mu k x d, q k x d, l k x tri. */
typedef struct {
  double *alpha, *mu, *q, *l;
} params_t;

static params_t params_new(const gmm_t *g) {
  params_t p = {vec(g->k), vec(g->k * g->d), vec(g->k * g->d), vec(g->k * g->tri)};
  return p;
}

static void params_at(const gmm_t *g, double r, params_t *p) {
  long d = g->d, k = g->k, tri = g->tri;
  for (long j = 0; j < k; j++) p->alpha[j] = 0.1 * sin((double)j + r);
  for (long j = 0; j < k; j++)
    for (long c = 0; c < d; c++) p->mu[j * d + c] = 0.5 * cos((double)(d * j) + (double)c + r);
  for (long j = 0; j < k; j++)
    for (long c = 0; c < d; c++) p->q[j * d + c] = 0.1 * sin((double)(d * j) + (double)c + r + 0.5);
  for (long j = 0; j < k; j++)
    for (long e = 0; e < tri; e++) p->l[j * tri + e] = 0.1 * cos((double)(tri * j) + (double)e + r + 0.5);
}

static double logsumexp(const double *v, long n) {
  double m = v[0];
  for (long i = 0; i < n; i++)
    if (v[i] > m) m = v[i];
  double s = 0;
  for (long i = 0; i < n; i++) s += exp(v[i] - m);
  return m + log(s);
}

/* Q_j as a dense lower-triangular d x d matrix (l holds the strict lower triangle column by
   column). */
static void qmat(const gmm_t *g, const double *q, const double *l, double *m) {
  long d = g->d, at = 0;
  memset(m, 0, d * d * sizeof(double));
  for (long c = 0; c < d; c++) {
    m[c * d + c] = exp(q[c]);
    for (long r = c + 1; r < d; r++) m[r * d + c] = l[at++];
  }
}

/* The terms that do not depend on the points: -n d/2 log(2 pi) - k C (gmm.vlad's `constant`
   and `k c`, computed apart). */
static double constant(const gmm_t *g) {
  double d = (double)g->d, pi = 4 * atan2(1, 1);
  double nw = d + (0 + 1); /* m = 0 */
  double multi = 0.25 * (d * ((d - 1) * log(pi)));
  double s = 0;
  for (long j = 0; j < g->d; j++) s += lgamma(0.5 * nw - 0.5 * (double)j);
  double c = nw * (d * (log(1.0) - 0.5 * log(2.0))) - (multi + s);
  return (double)g->k * c;
}

static double objective(const gmm_t *g, const params_t *p, double *qs, double *t, double *v) {
  long d = g->d, k = g->k, n = g->n, tri = g->tri;
  double pi = 4 * atan2(1, 1);
  for (long j = 0; j < k; j++) qmat(g, p->q + j * d, p->l + j * tri, qs + j * d * d);
  double slse = 0;
  for (long i = 0; i < n; i++) {
    const double *xi = g->x + i * d;
    for (long j = 0; j < k; j++) {
      const double *mu = p->mu + j * d, *qm = qs + j * d * d;
      for (long c = 0; c < d; c++) v[c] = xi[c] - mu[c];
      double z2 = 0;
      for (long r = 0; r < d; r++) {
        double z = qm[r * d + r] * v[r];
        for (long c = 0; c < r; c++) z += qm[r * d + c] * v[c];
        z2 += z * z;
      }
      t[j] = (p->alpha[j] + vsum(p->q + j * d, d)) - 0.5 * z2;
    }
    slse += logsumexp(t, k);
  }
  double cst = 0 - (double)n * ((double)d * (0.5 * log(2 * pi)));
  double prior = 0;
  for (long j = 0; j < k; j++) {
    double eq = 0;
    for (long c = 0; c < d; c++) eq += exp(p->q[j * d + c]) * exp(p->q[j * d + c]);
    double ll = vdot(p->l + j * tri, p->l + j * tri, tri);
    prior += 0.5 * (1.0 * (eq + ll)) - 0 * vsum(p->q + j * d, d); /* gamma = 1, m = 0 */
  }
  return ((cst + slse) - (double)n * logsumexp(p->alpha, k)) + (prior - constant(g));
}

/* The gradient into gp; qs, gq (k d x d), t, w (k), v, z (k d) are work space. */
static void gradient(const gmm_t *g, const params_t *p, params_t *gp, double *qs, double *gqm,
                     double *t, double *v, double *z) {
  long d = g->d, k = g->k, n = g->n, tri = g->tri;
  for (long j = 0; j < k; j++) qmat(g, p->q + j * d, p->l + j * tri, qs + j * d * d);
  memset(gp->alpha, 0, k * sizeof(double));
  memset(gp->mu, 0, k * d * sizeof(double));
  memset(gqm, 0, k * d * d * sizeof(double));
  for (long i = 0; i < n; i++) {
    const double *xi = g->x + i * d;
    for (long j = 0; j < k; j++) {
      const double *mu = p->mu + j * d, *qm = qs + j * d * d;
      double *vj = v + j * d, *zj = z + j * d;
      for (long c = 0; c < d; c++) vj[c] = xi[c] - mu[c];
      double z2 = 0;
      for (long r = 0; r < d; r++) {
        double s = qm[r * d + r] * vj[r];
        for (long c = 0; c < r; c++) s += qm[r * d + c] * vj[c];
        zj[r] = s;
        z2 += s * s;
      }
      t[j] = (p->alpha[j] + vsum(p->q + j * d, d)) - 0.5 * z2;
    }
    double m = t[0];
    for (long j = 0; j < k; j++)
      if (t[j] > m) m = t[j];
    double s = 0;
    for (long j = 0; j < k; j++) s += (t[j] = exp(t[j] - m));
    for (long j = 0; j < k; j++) {
      double w = t[j] / s;
      const double *qm = qs + j * d * d, *vj = v + j * d, *zj = z + j * d;
      double *gq = gqm + j * d * d, *gmu = gp->mu + j * d;
      gp->alpha[j] += w;
      for (long r = 0; r < d; r++) {
        double wz = w * zj[r];
        for (long c = 0; c <= r; c++) {
          gq[r * d + c] -= wz * vj[c];
          gmu[c] += wz * qm[r * d + c];
        }
      }
    }
  }
  double ma = p->alpha[0];
  for (long j = 0; j < k; j++)
    if (p->alpha[j] > ma) ma = p->alpha[j];
  double sa = 0;
  for (long j = 0; j < k; j++) sa += exp(p->alpha[j] - ma);
  for (long j = 0; j < k; j++) {
    const double *q = p->q + j * d, *l = p->l + j * tri, *gq = gqm + j * d * d;
    long at = 0;
    /* sum(q_j) enters every t_j with weight 1: its adjoint is alpha_j's (before -n lse). */
    for (long c = 0; c < d; c++) {
      double e = exp(q[c]);
      gp->q[j * d + c] = gq[c * d + c] * e + gp->alpha[j] + e * e; /* gamma = 1, m = 0 */
      for (long r = c + 1; r < d; r++, at++) gp->l[j * tri + at] = gq[r * d + c] + l[at];
    }
  }
  for (long j = 0; j < k; j++) gp->alpha[j] -= (double)n * (exp(p->alpha[j] - ma) / sa);
}

int main(void) {
  gmm_t g;
  g.d = (long)rd();
  g.k = (long)rd();
  g.n = (long)rd();
  int mode = (int)rd();
  long reps = (long)rd();
  long d = g.d, k = g.k, n = g.n;
  g.tri = d * (d - 1) / 2;
  double *x = vec(n * d);
  for (long i = 0; i < n; i++)
    for (long c = 0; c < d; c++) x[i * d + c] = sin((double)(d * i) + (double)c);
  g.x = x;
  params_t p = params_new(&g), gp = params_new(&g);
  double *qs = vec(k * d * d), *gqm = vec(k * d * d), *t = vec(k), *v = vec(k * d), *z = vec(k * d);
  double out[5] = {msum(x, n, d), 0, 0, 0, 0};
  if (mode == 9) {
    fd_t c = {0};
    params_at(&g, 0, &p);
    gradient(&g, &p, &gp, qs, gqm, t, v, z);
    double *parts[4][2] = {{p.alpha, gp.alpha}, {p.mu, gp.mu}, {p.q, gp.q}, {p.l, gp.l}};
    long sizes[4] = {k, k * d, k * d, k * g.tri};
    for (int part = 0; part < 4; part++)
      for (long e = 0; e < sizes[part]; e++) {
        double *a = parts[part][0], ae = a[e];
        a[e] = ae + FD_H;
        double fp = objective(&g, &p, qs, t, v);
        a[e] = ae - FD_H;
        double fm = objective(&g, &p, qs, t, v);
        a[e] = ae;
        fd_add(&c, parts[part][1][e], (fp - fm) / (2 * FD_H));
      }
    return fd_report("gmm gradient", &c);
  }
  for (long r = 0; r < reps; r++) {
    params_at(&g, (double)r, &p);
    if (mode == 1) {
      out[1] += objective(&g, &p, qs, t, v);
    } else {
      gradient(&g, &p, &gp, qs, gqm, t, v, z);
      out[1] += gp.alpha[k - 1];
      out[2] += msum(gp.mu, k, d);
      out[3] += msum(gp.q, k, d);
      out[4] += msum(gp.l, k, g.tri);
    }
    clobber();
  }
  print_list(mode == 1 ? 2 : 5, out);
  return 0;
}
