/*
 * pvi8_ref_model.c -- what accumulating INT8 P.V straight into an s32 O
 * (no per-tile fold) would cost in accuracy (bench/NOTES.md, "Where to
 * look next", twenty-fifth session, item 2).
 *
 *     cc -O2 -o /tmp/pvi8_ref_model bench/pvi8_ref_model.c -lm
 *     /tmp/pvi8_ref_model [N [ROWS [V_OUTLIER_FRACTION [Q_SCALE]]]]
 *
 * Q, K (+ a per-channel bias, smoothed by the mean over keys) and V are
 * Gaussian; Q is quantized to INT8 per row, K per 64-key block, V to s8
 * per channel (stored + 128, as the kernel does); 128-key tiles.  Three P
 * encodings, each against an fp64 attention of the unquantized data:
 *   tile max     u8 P with 255 at the row's max in each tile, each tile's
 *                sum folded with its own factor (the kernel's pvi8 today)
 *   int run max  u8 P relative to one integer reference per row (the
 *                ceiling of the running max), every tile summed into one
 *                s32 O, shifted right when the reference rises (no fold)
 *   exact P      unquantized P (the error of Q, K and V alone)
 * Measured (N = 1K / 4K / 16K, 64 rows): tile max 1.55e-2 / 1.54e-2 /
 * 1.67e-2, int run max 2.02e-2 / 2.57e-2 / 3.45e-2, exact P 1.38e-2 /
 * 1.39e-2 / 1.51e-2; the largest s32 O stays below 2^25.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { D = 128, BN = 128, BLK_K = 64 };

static double gauss(void) {
  const double u = (rand() + 1.0) / (RAND_MAX + 2.0), v = (rand() + 1.0) / (RAND_MAX + 2.0);
  return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

/* x[0], x[stride], ... x[(n - 1) stride] to INT8 with one scale, max |x| /
 * 127 (returned) */
static double quant_s8(const float *x, int n, int stride, signed char *out) {
  double mx = 0;
  for (int i = 0; i < n; i++)
    mx = fmax(mx, fabs(x[i * stride]));
  const double sc = mx / 127;
  for (int i = 0; i < n; i++)
    out[i * stride] = (signed char)lrint(x[i * stride] / sc);
  return sc;
}

int main(int argc, char **argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 4096, rows = argc > 2 ? atoi(argv[2]) : 64;
  const double v_out = argc > 3 ? atof(argv[3]) : 0.0; /* V entries x 20 */
  const double q_amp = argc > 4 ? atof(argv[4]) : 1.0; /* score sharpness */
  if (n < 1 || rows < 1)
    return 2;
  float *q = malloc(sizeof(float) * rows * D), *k = malloc(sizeof(float) * n * D),
        *v = malloc(sizeof(float) * n * D);
  signed char *k8 = malloc((size_t)n * D), *q8 = malloc((size_t)rows * D),
              *v8 = malloc((size_t)n * D);
  double *ks = malloc(sizeof(double) * n), *qs = malloc(sizeof(double) * rows);
  double *x = malloc(sizeof(double) * n);
  if (!q || !k || !v || !k8 || !q8 || !v8 || !ks || !qs || !x)
    return 1;
  srand(1);
  double bias[D], km[D] = {0}, vs[D];
  for (int i = 0; i < rows * D; i++)
    q[i] = (float)(gauss() * q_amp);
  for (int d = 0; d < D; d++)
    bias[d] = gauss() * 3;
  for (int j = 0; j < n; j++)
    for (int d = 0; d < D; d++)
      k[j * D + d] = (float)(gauss() + bias[d]);
  for (int i = 0; i < n * D; i++) {
    v[i] = (float)gauss();
    if (v_out > 0 && rand() < v_out * RAND_MAX)
      v[i] *= 20;
  }
  /* smooth K; INT8 K per 64-key block, Q per row; s8 V per channel */
  for (int j = 0; j < n; j++)
    for (int d = 0; d < D; d++)
      km[d] += k[j * D + d] / n;
  for (int b = 0; b < n; b += BLK_K) {
    const int e = b + BLK_K < n ? b + BLK_K : n;
    double mx = 0;
    for (int j = b; j < e; j++)
      for (int d = 0; d < D; d++)
        mx = fmax(mx, fabs(k[j * D + d] - km[d]));
    for (int j = b; j < e; j++) {
      ks[j] = mx / 127;
      for (int d = 0; d < D; d++)
        k8[j * D + d] = (signed char)lrint((k[j * D + d] - km[d]) / ks[j]);
    }
  }
  for (int r = 0; r < rows; r++)
    qs[r] = quant_s8(q + r * D, D, 1, q8 + r * D);
  for (int d = 0; d < D; d++)
    vs[d] = quant_s8(v + d, n, D, v8 + d);

  const double sm = 1 / sqrt(D), l2e = 1.4426950408889634;
  double err[3] = {0}, dot[3] = {0}, nrm[3] = {0}, ref2 = 0;
  long long max_o = 0, shifts = 0;
  for (int r = 0; r < rows; r++) {
    /* fp64 reference on the unquantized data */
    double ref[D] = {0}, mx = -HUGE_VAL, l = 0;
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int d = 0; d < D; d++)
        s += (double)q[r * D + d] * k[j * D + d];
      x[j] = s * sm;
      mx = fmax(mx, x[j]);
    }
    for (int j = 0; j < n; j++) {
      const double p = exp(x[j] - mx);
      l += p;
      for (int d = 0; d < D; d++)
        ref[d] += p * v[j * D + d];
    }
    for (int d = 0; d < D; d++)
      ref[d] /= l;
    /* the quantized scores, log2 units */
    for (int j = 0; j < n; j++) {
      long long s = 0;
      for (int d = 0; d < D; d++)
        s += q8[r * D + d] * k8[j * D + d];
      x[j] = (double)s * qs[r] * ks[j] * sm * l2e;
    }
    for (int mode = 0; mode < 3; mode++) {
      double o[D] = {0}, lf = 0, m = -HUGE_VAL;
      long long oi[D] = {0}, li = 0;
      int ref_i = -100000; /* int run max: the integer reference */
      for (int t0 = 0; t0 < n; t0 += BN) {
        const int t1 = t0 + BN < n ? t0 + BN : n;
        double tm = -HUGE_VAL;
        for (int j = t0; j < t1; j++)
          tm = fmax(tm, x[j]);
        if (mode != 1) { /* tile max (u8 P) or exact P, folded per tile */
          const double mn = fmax(m, tm), alpha = exp2(m - mn), beta = exp2(tm - mn);
          double acc[D] = {0}, ls = 0;
          for (int d = 0; d < D; d++)
            o[d] *= alpha;
          lf *= alpha;
          for (int j = t0; j < t1; j++) {
            const double pf = exp2(x[j] - tm);
            const double p = mode == 0 ? (double)llrint(255 * pf) : pf;
            ls += p;
            for (int d = 0; d < D; d++)
              acc[d] += p * (mode == 0 ? v8[j * D + d] + 128 : v8[j * D + d]);
          }
          for (int d = 0; d < D; d++)
            o[d] += beta * acc[d];
          lf += beta * ls;
          m = mn;
        } else { /* one s32 O, shifted when the reference rises */
          const int c = (int)ceil(tm);
          if (c > ref_i) {
            const int sh = c - ref_i > 62 ? 62 : c - ref_i;
            for (int d = 0; d < D; d++)
              oi[d] >>= sh;
            li >>= sh;
            ref_i = c;
            shifts++;
          }
          for (int j = t0; j < t1; j++) {
            const long long p = llrint(255 * exp2(x[j] - ref_i));
            li += p;
            for (int d = 0; d < D; d++)
              oi[d] += p * (v8[j * D + d] + 128);
          }
          for (int d = 0; d < D; d++)
            max_o = oi[d] > max_o ? oi[d] : max_o;
        }
      }
      for (int d = 0; d < D; d++) {
        const double got = mode == 1   ? ((double)oi[d] / (double)li - 128) * vs[d]
                           : mode == 0 ? (o[d] / lf - 128) * vs[d]
                                       : o[d] / lf * vs[d];
        err[mode] += (got - ref[d]) * (got - ref[d]);
        dot[mode] += got * ref[d];
        nrm[mode] += got * got;
        if (mode == 0)
          ref2 += ref[d] * ref[d];
      }
    }
  }
  static const char *names[3] = {"tile max   ", "int run max", "exact P    "};
  for (int mode = 0; mode < 3; mode++)
    printf("%s rel L2 %.4e cos %.6f\n", names[mode], sqrt(err[mode] / ref2),
           dot[mode] / sqrt(nrm[mode] * ref2));
  printf("max s32 O %lld (2^31 = %lld), reference rises per row %.2f\n", max_o, 1LL << 31,
         (double)shifts / rows);
  free(q), free(k), free(v), free(k8), free(q8), free(v8), free(ks), free(qs), free(x);
  return 0;
}
