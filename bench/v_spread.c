/*
 * v_spread.c -- the statistic that would choose pvi8 or split V per head
 * (bench/NOTES.md, "Where to look next", item 000), on the V data of
 * bench/long_accuracy.py.
 *
 *     cc -O2 -o /tmp/v_spread bench/v_spread.c -lm && /tmp/v_spread
 *
 * pvi8 stores V as s8 per channel: step max_c / 127, rounding error
 * step / sqrt(12), so V's relative error per element is about
 * sqrt(R / 12) / 127 with R = sum_c max_c^2 / sum_c rms_c^2.  Split V's
 * output error is P's e4m3 rounding, ~2.6-2.9e-2 whatever V is; pvi8 with
 * its u8 P and INT8 Q.K^T (~1.2e-2) stays below that while the V term is
 * below ~2.4e-2, i.e. R <= ~100.  Data (one (batch, head) of D = 128
 * channels, N tokens, seeded): Gaussian V; "v-outliers", 0.1 % of the
 * tokens x 20; "v-offset", a per-channel offset 2 N(0, 1); and
 * Student-t(3) V, heavy-tailed.  Measured on the H200 for the first three
 * (long_accuracy, whole output): pvi8 1.5e-2, 5.7-8.4e-2, 2.4-5.9e-4.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define D 128

static unsigned long long rng = 88172645463325252ull;

static double uniform(void) { /* xorshift64*, (0, 1) */
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return ((rng * 2685821657736338717ull >> 11) + 0.5) / 9007199254740992.0;
}

static double gauss(void) {
  return sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform());
}

static double student3(void) { /* t with 3 degrees of freedom */
  double chi = 0.0;
  for (int i = 0; i < 3; i++) {
    const double z = gauss();
    chi += z * z;
  }
  return gauss() / sqrt(chi / 3.0);
}

enum { GAUSS, OUTLIERS, OFFSET, STUDENT3, N_DATA };
static const char *data_name[N_DATA] = {"gauss", "v-outliers", "v-offset",
                                        "student-t3"};

int main(void) {
  static const int seqs[] = {4096, 16384};
  printf("%-11s %6s %8s  %s\n", "data", "N", "R", "pvi8 V error (rel., per element)");
  for (int data = 0; data < N_DATA; data++)
    for (int si = 0; si < 2; si++) {
      const int n = seqs[si];
      rng = 88172645463325252ull + 7919ull * (unsigned)(data * 2 + si);
      double off[D], amax[D], sq[D];
      for (int c = 0; c < D; c++) {
        off[c] = data == OFFSET ? 2.0 * gauss() : 0.0;
        amax[c] = 0.0;
        sq[c] = 0.0;
      }
      for (int k = 0; k < n; k++) {
        const int outlier = data == OUTLIERS && uniform() < 1e-3;
        for (int c = 0; c < D; c++) {
          double v = data == STUDENT3 ? student3() : gauss();
          if (outlier)
            v *= 20.0;
          v += off[c];
          if (fabs(v) > amax[c])
            amax[c] = fabs(v);
          sq[c] += v * v;
        }
      }
      double num = 0.0, den = 0.0;
      for (int c = 0; c < D; c++) {
        num += amax[c] * amax[c];
        den += sq[c] / n;
      }
      const double r = num / den;
      printf("%-11s %6d %8.1f  %.2e%s\n", data_name[data], n, r,
             sqrt(r / 12.0) / 127.0, r <= 100.0 ? "  -> pvi8" : "  -> split V");
    }
  return 0;
}
