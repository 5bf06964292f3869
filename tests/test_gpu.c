/*
 * test_gpu.c -- numerics and JIT behaviour on a real GPU; every test
 * skip()s when no CUDA device is usable.
 *
 * Chain of trust: the FP32 reference kernel is first checked against an
 * fp64 CPU computation on small shapes; sj_attention is then checked
 * against the reference kernel (through sj_check: seeded random inputs,
 * K with a per-channel bias, NaN-poisoned output, NaN-poisoned stride gaps
 * and tails) over the option and shape matrix.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "testutil.h"

static char g_self[4096];
static char g_cache_dir[512];

static sj_context *gpu_ctx(sj_family fam) {
  sj_config cfg;
  sj_config_init(&cfg);
  cfg.cache_dir = g_cache_dir;
  cfg.family = fam;
  sj_context *ctx = NULL;
  sj_status st = sj_context_create(&ctx, &cfg);
  if (st != SJ_OK)
    fail_msg("context: %s", sj_context_create_error());
  return ctx;
}

/* A context whose device runs the wgmma family (sm_90a); else the test
 * skips. */
static sj_context *hopper_ctx(void) {
  if (!tu_have_gpu())
    skip();
  sj_context *ctx = gpu_ctx(SJ_FAMILY_AUTO);
  if (strcmp(ctx->target.name, "sm_90a") != 0) {
    sj_context_destroy(ctx);
    skip();
  }
  return ctx;
}

/* A context on a device with FP8PV (sm_89 or newer), else skip; *wg: the
 * device also has the wgmma family (sm_90a). */
static sj_context *fp8_ctx(int *wg) {
  if (!tu_have_gpu())
    skip();
  sj_context *ctx = gpu_ctx(SJ_FAMILY_AUTO);
  if (ctx->target.sm < 89) {
    sj_context_destroy(ctx);
    skip();
  }
  *wg = strcmp(ctx->target.name, "sm_90a") == 0;
  return ctx;
}

static int setup_gpu(void **state) {
  (void)state;
  return 0;
}

/* ----------------------------------------------------- reference vs CPU */

typedef struct refcase {
  int b, hq, hk, nq, nk, d, causal;
  sj_causal_align align;
  sj_layout layout;
} refcase;

static void run_ref_case(sj_context *ctx, const refcase *rc, uint64_t seed) {
  const sj_cuda_api *cu = ctx->cu;
  const size_t nq = (size_t)rc->b * rc->hq * rc->nq * rc->d;
  const size_t nk = (size_t)rc->b * rc->hk * rc->nk * rc->d;
  uint16_t *q = malloc(nq * 2), *k = malloc(nk * 2), *v = malloc(nk * 2);
  float *out = malloc(nq * 4), *lse = malloc((size_t)rc->b * rc->hq * rc->nq * 4);
  assert_non_null(q);
  assert_non_null(out);
  for (size_t i = 0; i < nq; i++)
    q[i] = tu_f32_to_f16((float)tu_rand_normal(&seed));
  for (size_t i = 0; i < nk; i++) {
    k[i] = tu_f32_to_f16((float)tu_rand_normal(&seed) + 1.5f);
    v[i] = tu_f32_to_f16((float)tu_rand_normal(&seed));
  }
  assert_int_equal(cu->CtxPushCurrent(ctx->cuctx), CUDA_SUCCESS);
  CUdeviceptr dq, dk, dv, dout, dlse;
  assert_int_equal(cu->MemAlloc(&dq, nq * 2), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&dk, nk * 2), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&dv, nk * 2), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&dout, nq * 4), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&dlse, (size_t)rc->b * rc->hq * rc->nq * 4),
                   CUDA_SUCCESS);
  cu->MemcpyHtoD(dq, q, nq * 2);
  cu->MemcpyHtoD(dk, k, nk * 2);
  cu->MemcpyHtoD(dv, v, nk * 2);
  cu->MemsetD8(dout, 0xff, nq * 4);
  sj_attention_params p;
  sj_attention_params_init(&p);
  p.layout = rc->layout;
  p.batch = rc->b;
  p.heads_q = rc->hq;
  p.heads_kv = rc->hk;
  p.seq_q = rc->nq;
  p.seq_kv = rc->nk;
  p.head_dim = rc->d;
  p.causal = rc->causal;
  p.causal_align = rc->align;
  p.q = (void *)(uintptr_t)dq;
  p.k = (void *)(uintptr_t)dk;
  p.v = (void *)(uintptr_t)dv;
  p.lse = (float *)(uintptr_t)dlse;
  sj_status st = sj_attention_reference(ctx, &p, (float *)(uintptr_t)dout, NULL);
  if (st != SJ_OK)
    fail_msg("reference: %s", sj_context_last_error(ctx));
  assert_int_equal(cu->CtxSynchronize(), CUDA_SUCCESS);
  cu->MemcpyDtoH(out, dout, nq * 4);
  cu->MemcpyDtoH(lse, dlse, (size_t)rc->b * rc->hq * rc->nq * 4);
  cu->MemFree(dq);
  cu->MemFree(dk);
  cu->MemFree(dv);
  cu->MemFree(dout);
  cu->MemFree(dlse);
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);

  /* fp64 CPU attention over the same fp16 values */
  const int D = rc->d, grp = rc->hq / rc->hk;
  const double scale = 1.0 / sqrt((double)D);
  const int off = rc->causal && rc->align == SJ_CAUSAL_BOTTOM_RIGHT ? rc->nk - rc->nq : 0;
  double *s = malloc((size_t)rc->nk * sizeof *s);
  double maxerr = 0, maxlse = 0;
#define IDX(t, b, h, n, H, N)                                                  \
  (rc->layout == SJ_LAYOUT_HND ? ((((size_t)(b) * (H) + (h)) * (N) + (n)) * D)   \
                               : ((((size_t)(b) * (N) + (n)) * (H) + (h)) * D))
  for (int b = 0; b < rc->b; b++)
    for (int h = 0; h < rc->hq; h++)
      for (int i = 0; i < rc->nq; i++) {
        const int hk = h / grp;
        double m = -INFINITY;
        int last = rc->nk - 1;
        if (rc->causal && i + off < last)
          last = i + off;
        for (int j = 0; j <= last; j++) {
          double dot = 0;
          for (int c = 0; c < D; c++)
            dot += (double)tu_f16_to_f32(q[IDX(q, b, h, i, rc->hq, rc->nq) + c]) *
                   tu_f16_to_f32(k[IDX(k, b, hk, j, rc->hk, rc->nk) + c]);
          s[j] = dot * scale;
          if (s[j] > m)
            m = s[j];
        }
        double l = 0;
        for (int j = 0; j <= last; j++)
          l += exp(s[j] - m);
        const size_t orow = (((size_t)b * rc->hq + h) * rc->nq + i) * D;
        for (int c = 0; c < D; c++) {
          double acc = 0;
          for (int j = 0; j <= last; j++)
            acc += exp(s[j] - m) * tu_f16_to_f32(v[IDX(v, b, hk, j, rc->hk, rc->nk) + c]);
          const double want = last >= 0 ? acc / l : 0.0;
          const double e = fabs(out[orow + c] - want);
          if (!(e <= maxerr))
            maxerr = isnan(e) ? INFINITY : e;
        }
        const double want_lse = last >= 0 ? m + log(l) : -INFINITY;
        const float got = lse[((size_t)b * rc->hq + h) * rc->nq + i];
        if (last < 0) {
          assert_true(isinf(got) && got < 0);
        } else {
          const double e = fabs(got - want_lse);
          if (!(e <= maxlse))
            maxlse = isnan(e) ? INFINITY : e;
        }
      }
#undef IDX
  if (maxerr > 2e-5 || maxlse > 1e-4)
    fail_msg("reference vs fp64: max abs err %.3g, lse err %.3g (b%d hq%d hk%d "
             "nq%d nk%d d%d causal%d align%d layout%d)",
             maxerr, maxlse, rc->b, rc->hq, rc->hk, rc->nq, rc->nk, rc->d,
             rc->causal, (int)rc->align, (int)rc->layout);
  free(s);
  free(q);
  free(k);
  free(v);
  free(out);
  free(lse);
}

static void test_reference_vs_cpu(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  sj_context *ctx = gpu_ctx(SJ_FAMILY_AUTO);
  const refcase cases[] = {
      {1, 2, 1, 17, 33, 64, 1, SJ_CAUSAL_TOP_LEFT, SJ_LAYOUT_HND},
      {2, 4, 4, 70, 70, 128, 0, SJ_CAUSAL_TOP_LEFT, SJ_LAYOUT_NHD},
      {1, 2, 2, 40, 20, 64, 1, SJ_CAUSAL_BOTTOM_RIGHT, SJ_LAYOUT_HND},
      {1, 4, 2, 1, 129, 128, 1, SJ_CAUSAL_BOTTOM_RIGHT, SJ_LAYOUT_NHD},
      {1, 1, 1, 65, 100, 32, 0, SJ_CAUSAL_TOP_LEFT, SJ_LAYOUT_HND},
      {1, 2, 1, 33, 47, 96, 1, SJ_CAUSAL_TOP_LEFT, SJ_LAYOUT_NHD},
      {1, 1, 1, 20, 80, 256, 0, SJ_CAUSAL_TOP_LEFT, SJ_LAYOUT_HND},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    run_ref_case(ctx, &cases[i], 1000 + i);
  sj_context_destroy(ctx);
}

/* ------------------------------------------------- attention vs reference */

typedef struct shape {
  int b, hq, hk, nq, nk;
} shape;

static const shape k_shapes[] = {
    {1, 2, 2, 1, 1},      {2, 4, 2, 17, 17},     {1, 4, 1, 127, 300},
    {1, 2, 2, 1000, 1000}, {1, 8, 8, 4096, 4096}, {1, 4, 2, 300, 127},
    {2, 2, 1, 129, 1000},
};
#define N_SHAPES (sizeof k_shapes / sizeof *k_shapes)

typedef struct gate {
  double rel_l2, cosine;
} gate;

/* FP16 P.V: relative L2 <= 1.5e-2 and cosine >= 0.9998.  FP8 P.V: e4m3 P
 * times e4m3 V puts a floor of about 3.5-4e-2 on zero-mean Gaussian V (each
 * rounding is ~2.5% rms; docs/kernels.md has the simulation), so the gate
 * is 5e-2 with cosine >= 0.999; the measured values are printed.  Split V
 * leaves P's rounding alone: the FP8 gate, 3.5e-2. */
static double g_fp8_worst, g_wgmma_worst, g_split_worst;
/* Split V asked for: the FP8 gate. */
static int is_split(sj_family fam, sj_pv_accum acc) {
  (void)fam;
  return acc == SJ_ACCUM_FP32_FP32_SPLITV;
}
static gate gate_for(sj_family fam, sj_pv_accum acc) {
  gate g = {1.5e-2, 0.9998};
  /* wgmma pv16 takes P in the input's type: bf16 P has 8 mantissa bits
   * (as in FP16PV's fp32 mode for bf16 input); measured up to 1.56e-2 */
  if (fam == SJ_FAMILY_WGMMA && acc == SJ_ACCUM_PV16)
    g.rel_l2 = 2e-2;
  /* INT8 P.V: u8 P per tile and row, u8 V per channel; ~1.8e-2 measured
   * on this data (docs/kernels.md), well under split V's 2.9e-2.  The
   * wgmma default, pvi8+splitv (test_runtime checks the plan), takes pvi8
   * for every head of this Gaussian data (R ~ 10-20; measured worst
   * 1.67e-2), so pvi8's gate; test_v_auto covers its split V heads. */
  else if ((fam == SJ_FAMILY_WGMMA &&
            (acc == SJ_ACCUM_PVI8 || acc == SJ_ACCUM_PVI8_SPLITV || acc == SJ_ACCUM_DEFAULT)) ||
           (fam == SJ_FAMILY_FP8PV &&
            (acc == SJ_ACCUM_PVI8 || acc == SJ_ACCUM_PVI8_SPLITV))) {
    g.rel_l2 = 2.5e-2;
    g.cosine = 0.9995;
  } else if (fam == SJ_FAMILY_FP8PV || fam == SJ_FAMILY_WGMMA) {
    g.rel_l2 = is_split(fam, acc) ? 3.5e-2 : 5e-2;
    g.cosine = 0.999;
  }
  return g;
}

/* Runs one case through sj_check against the gate of its family and mode:
 * 1 passed, -1 failed, 0 not offered.  *rel gets the relative L2. */
static int run_case_r(sj_context *ctx, sj_family fam, const shape *s, int d,
                      sj_dtype dt, sj_layout lay, int causal,
                      sj_causal_align al, sj_quant_gran qg, sj_pv_accum acc,
                      int smooth_v, int pad, uint64_t seed, int verbose,
                      double *rel) {
  sj_check_case cc;
  memset(&cc, 0, sizeof cc);
  sj_attention_params_init(&cc.params);
  cc.params.dtype = dt;
  cc.params.layout = lay;
  cc.params.batch = s->b;
  cc.params.heads_q = s->hq;
  cc.params.heads_kv = s->hk;
  cc.params.seq_q = s->nq;
  cc.params.seq_kv = s->nk;
  cc.params.head_dim = d;
  cc.params.causal = causal;
  cc.params.causal_align = al;
  cc.params.family = fam;
  cc.params.qk_quant = qg;
  cc.params.pv_accum = acc;
  cc.params.smooth_v = smooth_v;
  cc.seed = seed;
  cc.k_bias = 4.0f;
  cc.pad_strides = pad;
  cc.with_lse = 1;
  sj_check_result r;
  sj_status st = sj_check(ctx, &cc, &r);
  if (st == SJ_ERR_UNSUPPORTED)
    return 0;
  if (st != SJ_OK)
    fail_msg("sj_check: %s: %s", sj_status_name(st), sj_context_last_error(ctx));
  gate g = gate_for(fam, acc);
  *rel = r.rel_l2;
  const int ok = r.rel_l2 <= g.rel_l2 && r.cosine >= g.cosine &&
                 r.nonfinite == 0 && r.lse_mismatch == 0 &&
                 r.lse_max_abs_err < 5e-2;
  if (fam == SJ_FAMILY_FP8PV && r.rel_l2 > g_fp8_worst)
    g_fp8_worst = r.rel_l2;
  if (fam == SJ_FAMILY_WGMMA && r.rel_l2 > g_wgmma_worst)
    g_wgmma_worst = r.rel_l2;
  if (is_split(fam, acc) && r.rel_l2 > g_split_worst)
    g_split_worst = r.rel_l2;
  if (verbose || !ok)
    print_message("%s fam%d d%d dt%d lay%d causal%d/%d q%d acc%d sv%d pad%d "
                  "[%d,%d,%d,%d,%d]: rel_l2 %.4g cos %.6f max %.3g lse %.3g "
                  "nonfinite %lld lse_mismatch %lld\n",
                  ok ? "ok  " : "FAIL", (int)fam, d, (int)dt, (int)lay, causal,
                  (int)al, (int)qg, (int)acc, smooth_v, pad, s->b, s->hq, s->hk,
                  s->nq, s->nk, r.rel_l2, r.cosine, r.max_abs_err,
                  r.lse_max_abs_err, (long long)r.nonfinite,
                  (long long)r.lse_mismatch);
  return ok ? 1 : -1;
}

static int run_case(sj_context *ctx, sj_family fam, const shape *s, int d,
                    sj_dtype dt, sj_layout lay, int causal, sj_causal_align al,
                    sj_quant_gran qg, sj_pv_accum acc, int smooth_v, int pad,
                    uint64_t seed, int verbose) {
  double rel;
  return run_case_r(ctx, fam, s, d, dt, lay, causal, al, qg, acc, smooth_v,
                    pad, seed, verbose, &rel);
}

/* Every family x accumulation x granularity, over all shapes, rotating the
 * dtype, layout, causal mode, padding and head dim so that each value of
 * each axis meets many others. */
static void test_attention_matrix(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  static const struct {
    sj_family fam;
    sj_pv_accum acc;
  } modes[] = {{SJ_FAMILY_FP16PV, SJ_ACCUM_FP32},
               {SJ_FAMILY_FP16PV, SJ_ACCUM_FP16_FP32},
               {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32},
               {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32},
               {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP16},
               {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32_SPLITV},
               {SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8},
               {SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV}};
  static const int dims[] = {64, 128, 32, 96, 256};
  int failures = 0, ran = 0;
  const size_t n_modes = sizeof modes / sizeof *modes;
  /* the newest mode (the last) first; each mode's cases are fixed by its
   * place in the list, whatever the order they run in */
  for (size_t mi = 0; mi < n_modes; mi++) {
    const size_t m = (mi + n_modes - 1) % n_modes;
    sj_context *ctx = gpu_ctx(SJ_FAMILY_AUTO);
    for (int qg = 1; qg <= 3; qg++)
      for (size_t si = 0; si < N_SHAPES; si++) {
        const size_t idx = (m * 3 + (size_t)(qg - 1)) * N_SHAPES + si;
        const int d = dims[idx % 5 < 3 ? idx % 2 : 2 + (idx / 2) % 3];
        const sj_dtype dt = (idx / 3) % 2 ? SJ_DTYPE_BF16 : SJ_DTYPE_FP16;
        const sj_layout lay = idx % 2 ? SJ_LAYOUT_NHD : SJ_LAYOUT_HND;
        const int causal = (idx / 2) % 2;
        const sj_causal_align al = (idx / 4) % 2 ? SJ_CAUSAL_BOTTOM_RIGHT
                                                 : SJ_CAUSAL_TOP_LEFT;
        const int smooth_v = modes[m].fam == SJ_FAMILY_FP8PV &&
                             modes[m].acc != SJ_ACCUM_FP32_FP16 && idx % 3 == 0;
        const int r = run_case(ctx, modes[m].fam, &k_shapes[si], d, dt, lay,
                               causal, al, (sj_quant_gran)qg, modes[m].acc,
                               smooth_v, idx % 4 == 1, 77 + (uint64_t)idx, 1);
        ran += r != 0;
        failures += r < 0;
      }
    sj_context_destroy(ctx);
  }
  print_message("%d cases, %d failed; worst fp8pv relative L2 %.4g (split V "
                "%.4g)\n",
                ran, failures, g_fp8_worst, g_split_worst);
  assert_true(ran > 110);
  assert_int_equal(failures, 0);
}

/* The wgmma family (sm_90a only): three granularities over all shapes for
 * each mode (fp32+fp32, the default, split V asked for, pv16, pvi8), rotating
 * head dim (64, 128, 256), dtype, layout, causal mode and alignment,
 * smooth_v (every head dim: the epilogue's V means are a bulk copy of
 * D floats) and padded strides. */
static void test_wgmma_matrix(void **state) {
  (void)state;
  sj_context *ctx = hopper_ctx();
  static const sj_pv_accum accs[] = {SJ_ACCUM_FP32_FP32, SJ_ACCUM_DEFAULT,
                                     SJ_ACCUM_FP32_FP32_SPLITV, SJ_ACCUM_PV16,
                                     SJ_ACCUM_PVI8};
  static const int dims[] = {128, 64, 256};
  int failures = 0, ran = 0, idx = 0;
  for (size_t m = 0; m < 5; m++)
    for (int qg = 1; qg <= 3; qg++)
      for (size_t si = 0; si < N_SHAPES; si++, idx++) {
        const int d = dims[idx % 3];
        const sj_dtype dt = (idx / 3) % 2 ? SJ_DTYPE_BF16 : SJ_DTYPE_FP16;
        const sj_layout lay = (idx / 2) % 2 ? SJ_LAYOUT_NHD : SJ_LAYOUT_HND;
        const int causal = idx % 2;
        const sj_causal_align al = (idx / 4) % 2 ? SJ_CAUSAL_BOTTOM_RIGHT
                                                 : SJ_CAUSAL_TOP_LEFT;
        const int r = run_case(ctx, SJ_FAMILY_WGMMA, &k_shapes[si], d, dt, lay,
                               causal, al, (sj_quant_gran)qg, accs[m],
                               idx % 5 == 1, idx % 4 == 1, 300 + (uint64_t)idx, 1);
        ran += r != 0;
        failures += r < 0;
      }
  sj_context_destroy(ctx);
  print_message("%d wgmma cases, %d failed; worst relative L2 %.4g\n", ran,
                failures, g_wgmma_worst);
  assert_int_equal(ran, 5 * 3 * (int)N_SHAPES);
  assert_int_equal(failures, 0);
}

/* Split V must buy what it costs: on the same data, its error is well
 * below plain fp32+fp32's (the V rounding term gone: about 2.7e-2 against
 * 3.9e-2 on Gaussian V), for both FP8 families, on a long and a ragged
 * shape.  INT8 P.V (both families) must in turn beat split V on this data (P's
 * e4m3 rounding gone too: about 1.7e-2). */
static void test_splitv_gain(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  sj_context *ctx = gpu_ctx(SJ_FAMILY_AUTO);
  if (ctx->target.sm < 89) { /* no e4m3 mma */
    sj_context_destroy(ctx);
    skip();
  }
  const int wg = strcmp(ctx->target.name, "sm_90a") == 0;
  const sj_family fams[] = {SJ_FAMILY_FP8PV, SJ_FAMILY_WGMMA};
  const shape shapes[] = {{1, 8, 8, 4096, 4096}, {2, 2, 1, 129, 1000}};
  int ran = 0;
  for (int f = 0; f < (wg ? 2 : 1); f++)
    for (int d = 64; d <= 128; d += 64)
      for (int si = 0; si < 2; si++)
        for (int causal = 0; causal <= 1; causal++) {
          double plain = 0, split = 0;
          const uint64_t seed = 900 + (uint64_t)(d + 2 * si + causal);
          assert_int_equal(run_case_r(ctx, fams[f], &shapes[si], d,
                                      SJ_DTYPE_FP16, SJ_LAYOUT_HND, causal,
                                      SJ_CAUSAL_TOP_LEFT, SJ_QUANT_PER_THREAD,
                                      SJ_ACCUM_FP32_FP32, 0, 0, seed, 0,
                                      &plain),
                           1);
          assert_int_equal(run_case_r(ctx, fams[f], &shapes[si], d,
                                      SJ_DTYPE_FP16, SJ_LAYOUT_HND, causal,
                                      SJ_CAUSAL_TOP_LEFT, SJ_QUANT_PER_THREAD,
                                      SJ_ACCUM_FP32_FP32_SPLITV, 0, 0, seed, 0,
                                      &split),
                           1);
          print_message("split V %s d%d shape%d causal%d: %.4g -> %.4g\n",
                        f ? "wgmma" : "fp8pv", d, si, causal, plain, split);
          assert_true(split <= 0.8 * plain);
          {
            double i8;
            assert_int_equal(run_case_r(ctx, fams[f], &shapes[si], d,
                                        SJ_DTYPE_FP16, SJ_LAYOUT_HND, causal,
                                        SJ_CAUSAL_TOP_LEFT, SJ_QUANT_PER_THREAD,
                                        SJ_ACCUM_PVI8, 0, 0, seed, 0, &i8),
                             1);
            print_message("pvi8 %s d%d shape%d causal%d: %.4g\n", f ? "wgmma" : "fp8pv", d,
                          si, causal, i8);
            assert_true(i8 <= 0.8 * split);
          }
          ran++;
        }
  sj_context_destroy(ctx);
  assert_int_equal(ran, wg ? 16 : 8);
}

/* smooth_k's mean from every fourth key (SJ_K_SAMPLE_MIN, from 1024 keys
 * on): on K with a strong per-channel bias (8 sigma) at N = 4096, every
 * family's default mode must be as accurate (within 3 % + 2e-4 relative
 * L2, and its LSE as close) as with the mean over every key (SAGEJIT_TUNE
 * "ks=1"), which must in turn beat smooth_k off by 1.2x, so that the data
 * exercises the mean at all.  A wrong count (the sum over a quarter of the
 * keys divided by all of them) leaves 3/4 of the bias and fails. */
static void test_k_mean_sampled(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  sj_context *ctx = gpu_ctx(SJ_FAMILY_AUTO);
  const int wg = strcmp(ctx->target.name, "sm_90a") == 0;
  const char *tune0 = getenv("SAGEJIT_TUNE");
  char saved[256] = "";
  if (tune0)
    snprintf(saved, sizeof saved, "%s", tune0);
  static const sj_family fams[] = {SJ_FAMILY_FP16PV, SJ_FAMILY_FP8PV, SJ_FAMILY_WGMMA};
  int ran = 0;
  for (size_t f = 0; f < sizeof fams / sizeof *fams; f++) {
    if (fams[f] == SJ_FAMILY_WGMMA && !wg)
      continue;
    if (fams[f] == SJ_FAMILY_FP8PV && ctx->target.sm < 89)
      continue;
    for (int causal = 0; causal <= 1; causal++) {
      double err[3], lse[3];
      for (int k = 0; k < 3; k++) { /* sampled, every key, smooth_k off */
        sj_check_case cc;
        memset(&cc, 0, sizeof cc);
        sj_attention_params_init(&cc.params);
        cc.params.batch = 1;
        cc.params.heads_q = 8;
        cc.params.heads_kv = 4;
        cc.params.seq_q = 1000;
        cc.params.seq_kv = 4096;
        cc.params.head_dim = 128;
        cc.params.causal = causal;
        cc.params.causal_align = SJ_CAUSAL_BOTTOM_RIGHT;
        cc.params.family = fams[f];
        cc.params.smooth_k = k == 2 ? 0 : 1;
        cc.seed = 77 + (uint64_t)causal;
        cc.k_bias = 8.0f;
        cc.with_lse = 1;
        if (k == 1)
          setenv("SAGEJIT_TUNE", "ks=1", 1);
        else
          unsetenv("SAGEJIT_TUNE");
        sj_check_result r;
        const sj_status st = sj_check(ctx, &cc, &r);
        unsetenv("SAGEJIT_TUNE");
        if (st != SJ_OK)
          fail_msg("sj_check: %s", sj_context_last_error(ctx));
        assert_int_equal(r.nonfinite, 0);
        assert_int_equal(r.lse_mismatch, 0);
        err[k] = r.rel_l2;
        lse[k] = r.lse_max_abs_err;
      }
      print_message("k mean fam%d causal%d: rel L2 sampled %.4g, every key %.4g, off %.4g; "
                    "LSE max err %.3g / %.3g / %.3g\n",
                    (int)fams[f], causal, err[0], err[1], err[2], lse[0], lse[1], lse[2]);
      assert_true(err[0] <= 1.03 * err[1] + 2e-4);
      assert_true(lse[0] <= 1.5 * lse[1] + 1e-3);
      assert_true(err[2] >= 1.2 * err[1]);
      ran++;
    }
  }
  if (tune0)
    setenv("SAGEJIT_TUNE", saved, 1);
  const int want = wg ? 6 : (ctx->target.sm >= 89 ? 4 : 2);
  sj_context_destroy(ctx);
  assert_int_equal(ran, want);
}

/* INT8 P.V with large scores: P is packed as u8 with 255 at the row's max,
 * after an exp2 whose subtrahend rounds at half an ulp of MAGIC_F * mult;
 * once |Q|max |K|max sm_scale is large (mult >~ 5e-3), that rounding alone
 * could take the max past 255.4375, which packs to 0 (the dominant key of
 * a row dropped).  The kernels round the row max, its offset and the
 * subtrahend upward (u8_bound, at pack4_u8 in sj_common.cuh); the
 * templates of 0ef6dc2, which rounded to nearest, fail this test on the
 * H100 (rel. L2 0.127 against fp32+fp32's 0.062).  With sm_scale 4 and 8 the attention is nearly one-hot,
 * so a dropped max destroys a row: pvi8 (and the wgmma default) must stay
 * within 1.5x fp32+fp32's error (+ 5e-3) on the same data, where fp32+fp32's
 * e4m3 P saturates instead. */
static void test_pvi8_large_scores(void **state) {
  (void)state;
  int wg;
  sj_context *ctx = fp8_ctx(&wg);
  static const struct {
    sj_family fam;
    sj_pv_accum acc;
  } modes[] = {{SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8},
               {SJ_FAMILY_WGMMA, SJ_ACCUM_PVI8},
               {SJ_FAMILY_WGMMA, SJ_ACCUM_PVI8_SPLITV}};
  const shape sh = {1, 4, 2, 300, 1000};
  int ran = 0;
  for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
    if (modes[m].fam == SJ_FAMILY_WGMMA && !wg)
      continue;
    for (int d = 64; d <= 128; d += 64)
      for (int causal = 0; causal <= 1; causal++)
        for (int k = 0; k < 2; k++) {
          const float sm_scale = k ? 8.f : 4.f;
          double err[2];
          for (int plain = 0; plain < 2; plain++) {
            sj_check_case cc;
            memset(&cc, 0, sizeof cc);
            sj_attention_params_init(&cc.params);
            cc.params.dtype = SJ_DTYPE_FP16;
            cc.params.layout = SJ_LAYOUT_HND;
            cc.params.batch = sh.b;
            cc.params.heads_q = sh.hq;
            cc.params.heads_kv = sh.hk;
            cc.params.seq_q = sh.nq;
            cc.params.seq_kv = sh.nk;
            cc.params.head_dim = d;
            cc.params.causal = causal;
            cc.params.family = modes[m].fam;
            cc.params.pv_accum = plain ? SJ_ACCUM_FP32_FP32 : modes[m].acc;
            cc.params.sm_scale = sm_scale;
            cc.seed = 31 + (uint64_t)(d + causal + 2 * k);
            cc.k_bias = 4.0f;
            sj_check_result r;
            if (sj_check(ctx, &cc, &r) != SJ_OK)
              fail_msg("sj_check: %s", sj_context_last_error(ctx));
            assert_int_equal(r.nonfinite, 0);
            err[plain] = r.rel_l2;
          }
          print_message("large scores: fam%d acc%d d%d causal%d sm_scale %g: rel L2 %.4g "
                        "(fp32+fp32 %.4g)\n",
                        (int)modes[m].fam, (int)modes[m].acc, d, causal, (double)sm_scale,
                        err[0], err[1]);
          assert_true(err[0] <= 1.5 * err[1] + 5e-3);
          ran++;
        }
  }
  sj_context_destroy(ctx);
  assert_int_equal(ran, wg ? 24 : 8);
}

/* poly_exp2 (sj_common.cuh), the FMA-pipe exp2 that some wgmma kernels
 * use for a share of their scores, evaluated on the device over [-130, 24]
 * in steps of 2^-10, at every integer, just below every integer and at
 * -inf and -FLT_MAX, against exp2 in double.  The end-to-end gates would
 * not see a wrong coefficient: it would move only that share of P by a few
 * per cent.  Asserted: relative error <= 1e-4 from -126 up (the fit's
 * bound is 8.6e-5), exact powers of two at the integers (p(0) = 1), the
 * clamp value 2^-126 below -126, and a monotone result. */
static void test_poly_exp2(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  sj_context *ctx = gpu_ctx(SJ_FAMILY_AUTO);
  const sj_cuda_api *cu = ctx->cu;
  const sj_nvrtc_api *nv = NULL;
  const sj_sources *src = NULL;
  const char *why = NULL;
  assert_int_equal(sj_nvrtc_load(&nv, &why), SJ_OK);
  assert_int_equal(sj_sources_get(&src, &why), SJ_OK);
  static const char prog_src[] =
      "#include \"sj_common.cuh\"\n"
      "extern \"C\" __global__ void probe(const float *x, float *y, int n) {\n"
      "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < n)\n"
      "    y[i] = sj::poly_exp2(x[i]);\n"
      "}\n";
  const char *names[64], *datas[64];
  assert_true(src->count <= 64);
  for (unsigned i = 0; i < src->count; i++) {
    names[i] = src->files[i].name;
    datas[i] = src->files[i].data;
  }
  nvrtcProgram_ prog;
  assert_int_equal(nv->CreateProgram(&prog, prog_src, "probe.cu", (int)src->count, datas, names),
                   0);
  char arch[64];
  snprintf(arch, sizeof arch, "--gpu-architecture=%s", ctx->target.name);
  const char *opts[] = {arch, "-std=c++17"};
  const int rc = nv->CompileProgram(prog, 2, opts);
  if (rc != 0) {
    size_t n = 0;
    nv->GetProgramLogSize(prog, &n);
    char *log = calloc(1, n + 1);
    nv->GetProgramLog(prog, log);
    fail_msg("NVRTC: %s", log);
  }
  size_t isz = 0;
  const int ptx = ctx->target.is_ptx;
  assert_int_equal(ptx ? nv->GetPTXSize(prog, &isz) : nv->GetCUBINSize(prog, &isz), 0);
  char *image = malloc(isz);
  assert_non_null(image);
  assert_int_equal(ptx ? nv->GetPTX(prog, image) : nv->GetCUBIN(prog, image), 0);
  nv->DestroyProgram(&prog);

  /* the inputs, in increasing order: -inf, -FLT_MAX, then the grid with
   * the integers and their float predecessors merged in */
  const int lo = -130, hi = 24, per = 1024;
  const int n_grid = (hi - lo) * per + 1;
  const int cap = n_grid + 2 * (hi - lo + 1) + 2;
  float *x = malloc((size_t)cap * 4), *y = malloc((size_t)cap * 4);
  assert_non_null(x);
  assert_non_null(y);
  int n = 0;
  x[n++] = -INFINITY;
  x[n++] = -3.4028235e38f;
  for (int i = 0; i < n_grid; i++) {
    const float v = (float)lo + (float)i / (float)per;
    if (i % per == 0 && i > 0)
      x[n++] = nextafterf(v, -INFINITY); /* just below the integer */
    x[n++] = v;
  }
  assert_int_equal(cu->CtxPushCurrent(ctx->cuctx), CUDA_SUCCESS);
  CUmodule mod;
  CUfunction fn;
  assert_int_equal(cu->ModuleLoadDataEx(&mod, image, 0, NULL, NULL), CUDA_SUCCESS);
  assert_int_equal(cu->ModuleGetFunction(&fn, mod, "probe"), CUDA_SUCCESS);
  CUdeviceptr dx, dy;
  assert_int_equal(cu->MemAlloc(&dx, (size_t)n * 4), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&dy, (size_t)n * 4), CUDA_SUCCESS);
  assert_int_equal(cu->MemcpyHtoD(dx, x, (size_t)n * 4), CUDA_SUCCESS);
  assert_int_equal(cu->MemsetD8(dy, 0xff, (size_t)n * 4), CUDA_SUCCESS); /* NaN */
  void *args[] = {&dx, &dy, &n};
  assert_int_equal(cu->LaunchKernel(fn, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL,
                                    args, NULL),
                   CUDA_SUCCESS);
  assert_int_equal(cu->CtxSynchronize(), CUDA_SUCCESS);
  assert_int_equal(cu->MemcpyDtoH(y, dy, (size_t)n * 4), CUDA_SUCCESS);
  cu->MemFree(dx);
  cu->MemFree(dy);
  cu->ModuleUnload(mod);
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);

  const float clamp = ldexpf(1.f, -126);
  double worst = 0;
  int n_int = 0;
  for (int i = 0; i < n; i++) {
    if (!isfinite(y[i]) || y[i] <= 0.f)
      fail_msg("poly_exp2(%.9g) = %.9g", (double)x[i], (double)y[i]);
    if (i > 0 && y[i] < y[i - 1])
      fail_msg("not monotone: poly_exp2(%.9g) = %.9g < poly_exp2(%.9g) = %.9g",
               (double)x[i], (double)y[i], (double)x[i - 1], (double)y[i - 1]);
    if (x[i] < -126.f) {
      if (y[i] != clamp)
        fail_msg("poly_exp2(%.9g) = %.9g, not the clamp 2^-126", (double)x[i], (double)y[i]);
      continue;
    }
    if (x[i] == floorf(x[i])) {
      n_int++;
      if (y[i] != ldexpf(1.f, (int)x[i]))
        fail_msg("poly_exp2(%d) = %.9g, not a power of two", (int)x[i], (double)y[i]);
    }
    const double want = exp2((double)x[i]);
    const double e = fabs((double)y[i] - want) / want;
    if (e > worst)
      worst = e;
  }
  print_message("poly_exp2: %d points, worst relative error %.3g\n", n, worst);
  assert_int_equal(n_int, hi + 126 + 1);
  assert_true(worst <= 1e-4);
  free(x);
  free(y);
  free(image);
  sj_context_destroy(ctx);
}

/* Both layouts x both dtypes x causal both ways x head dims 64/128 for the
 * default options, on a tail-heavy shape: the core matrix, whole. */
static void test_core_matrix_full(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  int failures = 0, ran = 0;
  const shape s = {2, 4, 2, 200, 333};
  int fams = 2;
  for (int fam = 1; fam <= 3; fam++) {
    sj_context *ctx = gpu_ctx(SJ_FAMILY_AUTO);
    if (fam == 3) {
      if (strcmp(ctx->target.name, "sm_90a") != 0) {
        sj_context_destroy(ctx);
        break;
      }
      fams = 3;
    }
    for (int d = 64; d <= 128; d += 64)
      for (int dt = 1; dt <= 2; dt++)
        for (int lay = 1; lay <= 2; lay++)
          for (int c = 0; c < 3; c++) {
            const int r = run_case(ctx, (sj_family)fam, &s, d, (sj_dtype)dt,
                                   (sj_layout)lay, c > 0,
                                   c == 2 ? SJ_CAUSAL_BOTTOM_RIGHT
                                          : SJ_CAUSAL_TOP_LEFT,
                                   0, 0, -1, c == 1, 5 + (uint64_t)ran, 0);
            ran += r != 0;
            failures += r < 0;
          }
    sj_context_destroy(ctx);
  }
  assert_int_equal(ran, 24 * fams);
  assert_int_equal(failures, 0);
}

/* ------------------------------------------------ workspaces and threads */

static void fill_params(sj_attention_params *p, CUdeviceptr q, CUdeviceptr k,
                        CUdeviceptr v, CUdeviceptr o) {
  sj_attention_params_init(p);
  p->batch = 1;
  p->heads_q = 4;
  p->heads_kv = 4;
  p->seq_q = 300;
  p->seq_kv = 300;
  p->head_dim = 128;
  p->q = (void *)(uintptr_t)q;
  p->k = (void *)(uintptr_t)k;
  p->v = (void *)(uintptr_t)v;
  p->o = (void *)(uintptr_t)o;
}

/* Device copies of host fp16 Q, K and V (nq, nk, nk elements) and an O
 * of nq elements, for the tests that build their own inputs. */
typedef struct dev_qkvo {
  CUdeviceptr q, k, v, o;
} dev_qkvo;

static dev_qkvo dev_qkvo_upload(const sj_cuda_api *cu, const uint16_t *hq, const uint16_t *hk,
                                const uint16_t *hv, size_t nq, size_t nk) {
  dev_qkvo b;
  assert_int_equal(cu->MemAlloc(&b.q, nq * 2), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&b.k, nk * 2), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&b.v, nk * 2), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&b.o, nq * 2), CUDA_SUCCESS);
  assert_int_equal(cu->MemcpyHtoD(b.q, hq, nq * 2), CUDA_SUCCESS);
  assert_int_equal(cu->MemcpyHtoD(b.k, hk, nk * 2), CUDA_SUCCESS);
  assert_int_equal(cu->MemcpyHtoD(b.v, hv, nk * 2), CUDA_SUCCESS);
  return b;
}

static void dev_qkvo_free(const sj_cuda_api *cu, const dev_qkvo *b) {
  cu->MemFree(b->q);
  cu->MemFree(b->k);
  cu->MemFree(b->v);
  cu->MemFree(b->o);
}

/* The quantizers round without a clamp (s8_bits in sj_common.cuh: the low
 * byte of 1.5 * 2^23 + y), relying on |y| <= 127 up to rounding because a
 * value never exceeds the amax its scale came from; a y that rounded to
 * 128 would wrap to -128.  Here every element of K sits at its block's
 * extreme (random signs: |k - mean| close to the amax everywhere), V holds
 * each channel's extreme at one token, and each query copies one key, so
 * the attention is one-hot (a score gap of 11-19 nats) and each output row
 * must reproduce one V row, its channel extreme included, to half of
 * pvi8's V step (INT8 V: FP8PV and WGMMA pvi8, and the WGMMA default, whose
 * choice here is pvi8 for head 0 and split V for head 1; FP16PV reads V
 * unquantized).  A wrapped K byte moves the winning score, a wrapped V
 * byte flips the extreme's sign: both miss by far more than the bound. */
static void test_quant_extremes(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  sj_context *ctx = gpu_ctx(SJ_FAMILY_AUTO);
  const int wg = strcmp(ctx->target.name, "sm_90a") == 0, fp8 = ctx->target.sm >= 89;
  static const struct {
    sj_family fam;
    sj_pv_accum acc;
  } modes[] = {{SJ_FAMILY_FP16PV, SJ_ACCUM_DEFAULT},
               {SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8},
               {SJ_FAMILY_WGMMA, SJ_ACCUM_PVI8},
               {SJ_FAMILY_WGMMA, SJ_ACCUM_DEFAULT}};
  enum { H = 2, NQ = 64, NK = 256 };
  const sj_cuda_api *cu = ctx->cu;
  assert_int_equal(cu->CtxPushCurrent(ctx->cuctx), CUDA_SUCCESS);
  int ran = 0;
  for (int d = 64; d <= 128; d += 64) {
    const size_t nq = (size_t)H * NQ * d, nk = (size_t)H * NK * d;
    uint16_t *hq = malloc(nq * 2), *hk = malloc(nk * 2), *hv = malloc(nk * 2),
             *ho = malloc(nq * 2);
    assert_true(hq && hk && hv && ho);
    uint64_t seed = 777 + (uint64_t)d;
    for (int h = 0; h < H; h++)
      for (int j = 0; j < NK; j++)
        for (int c = 0; c < d; c++) {
          const size_t at = ((size_t)h * NK + j) * d + c;
          hk[at] = tu_f32_to_f16(tu_rand_normal(&seed) < 0 ? -1.5f : 1.5f);
          float v = (float)tu_rand_normal(&seed);
          if (j == 2 * c) /* channel c's extreme, at token 2c */
            v = (c % 2 ? -12.f : 12.f) * (1.f + 0.25f * (float)h);
          hv[at] = tu_f32_to_f16(v);
        }
    for (int h = 0; h < H; h++) /* query i copies key 4i (channel 2i's extreme) */
      for (int i = 0; i < NQ; i++)
        memcpy(hq + ((size_t)h * NQ + i) * d, hk + ((size_t)h * NK + 4 * i) * d, (size_t)d * 2);
    dev_qkvo dv = dev_qkvo_upload(cu, hq, hk, hv, nq, nk);
    const CUdeviceptr q = dv.q, k = dv.k, v = dv.v, o = dv.o;
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
      if ((modes[m].fam == SJ_FAMILY_WGMMA && !wg) || (modes[m].fam == SJ_FAMILY_FP8PV && !fp8))
        continue;
      sj_attention_params p;
      fill_params(&p, q, k, v, o);
      p.heads_q = p.heads_kv = H;
      p.seq_q = NQ;
      p.seq_kv = NK;
      p.head_dim = d;
      p.family = modes[m].fam;
      p.pv_accum = modes[m].acc;
      cu->MemsetD8(o, 0xff, nq * 2);
      if (sj_attention(ctx, &p, NULL) != SJ_OK)
        fail_msg("sj_attention: %s", sj_context_last_error(ctx));
      assert_int_equal(cu->CtxSynchronize(), CUDA_SUCCESS);
      cu->MemcpyDtoH(ho, o, nq * 2);
      double worst = 0.0, worst_ext = 0.0, bound = 0.0;
      for (int h = 0; h < H; h++) {
        /* V's quantization step (pvi8: amax / 127, rounding half of it;
         * split V and FP16 P.V are finer) plus the P error of one-hot rows */
        const double lim = 12.0 * (1.0 + 0.25 * h) / 127.0 * 0.5 + 0.03;
        bound = lim > bound ? lim : bound;
        for (int i = 0; i < NQ; i++)
          for (int c = 0; c < d; c++) {
            const float got = tu_f16_to_f32(ho[((size_t)h * NQ + i) * d + c]);
            const float want = tu_f16_to_f32(hv[((size_t)h * NK + 4 * i) * d + c]);
            const double e = fabs((double)got - (double)want) / lim;
            if (!(e == e))
              fail_msg("d%d mode %zu: output (%d, %d, %d) not written or not finite", d, m,
                       h, i, c);
            worst = e > worst ? e : worst;
            if (c == 2 * i)
              worst_ext = e > worst_ext ? e : worst_ext;
          }
      }
      print_message("quant extremes d%d fam%d acc%d: worst |O - V| %.3f of the bound "
                    "(%.3f at the channel extremes; bound <= %.3f)\n",
                    d, (int)modes[m].fam, (int)modes[m].acc, worst, worst_ext, bound);
      assert_true(worst <= 1.0);
      ran++;
    }
    dev_qkvo_free(cu, &dv);
    free(hq);
    free(hk);
    free(hv);
    free(ho);
  }
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);
  sj_context_destroy(ctx);
  assert_int_equal(ran, 2 * (1 + (fp8 ? 1 : 0) + (wg ? 2 : 0)));
}

/* Row maxima that jump after the first tile.  The lazy rescale moves a
 * row's reference max, and rescales O and the row sums, only when a step's
 * max passes it by more than TAU; on random data that happens in a row's
 * first step and rarely after, so the matrices above barely run the later
 * rescales, where the steps that vote first (VOTE1 and DEFER in
 * sj_attn_mma.cuh) take their second branch with O already filled.  Here
 * four keys per head score 10, 16, 22 and 28 nats for every query (K rows
 * along a direction u that all queries share, at keys 100, 300, 600 and
 * 1000 of 1024), so each row's max jumps by 6 nats (8.7 in log2 units,
 * over FP16PV's TAU of 8 and FP8PV's 4) three times after its first
 * tiles, and the output mixes those V rows with weights e^-6 apart over
 * a background of ~1000 keys at ~1 nat.  Against the output in double on
 * the CPU: FP16PV fp32 and FP8PV fp32 (the chunked step with VH on
 * sm_90) at every head dim, FP8PV fp32+fp16 at D = 128, both masks
 * (bottom-right: every row sees the first three spikes, rows 232 on the
 * fourth); relative L2 below the families' gates.  O not rescaled at a
 * jump would weigh the earlier spikes as the newest: a relative L2 of
 * order 1. */
static void test_max_jumps(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  sj_context *ctx = gpu_ctx(SJ_FAMILY_AUTO);
  const int fp8 = ctx->target.sm >= 89;
  enum { H = 2, NQ = 256, NK = 1024, NSPIKE = 4 };
  static const int spike_at[NSPIKE] = {100, 300, 600, 1000};
  const sj_cuda_api *cu = ctx->cu;
  assert_int_equal(cu->CtxPushCurrent(ctx->cuctx), CUDA_SUCCESS);
  int ran = 0;
  static const int dims[] = {32, 64, 96, 128, 256};
  for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
    const int d = dims[di];
    const size_t nq = (size_t)H * NQ * d, nk = (size_t)H * NK * d;
    uint16_t *hq = malloc(nq * 2), *hk = malloc(nk * 2), *hv = malloc(nk * 2),
             *ho = malloc(nq * 2);
    float *u = malloc((size_t)d * sizeof *u);
    double *s = malloc(NK * sizeof *s), *want = malloc(2 * nq * sizeof *want);
    assert_true(hq && hk && hv && ho && u && s && want);
    uint64_t seed = 4242 + (uint64_t)d;
    for (int c = 0; c < d; c++)
      u[c] = tu_rand_normal(&seed) < 0 ? -1.f : 1.f;
    const float rs = 1.f / sqrtf((float)d); /* the default sm_scale */
    for (int h = 0; h < H; h++) {
      for (int i = 0; i < NQ; i++) /* q = u + noise: q.u ~ d */
        for (int c = 0; c < d; c++)
          hq[((size_t)h * NQ + i) * d + c] =
              tu_f32_to_f16(u[c] + 0.5f * (float)tu_rand_normal(&seed));
      for (int j = 0; j < NK; j++)
        for (int c = 0; c < d; c++) {
          const size_t at = ((size_t)h * NK + j) * d + c;
          hk[at] = tu_f32_to_f16((float)tu_rand_normal(&seed));
          hv[at] = tu_f32_to_f16((float)tu_rand_normal(&seed));
        }
      for (int k = 0; k < NSPIKE; k++) /* score ~ (10 + 6k) nats: k = beta u */
        for (int c = 0; c < d; c++)
          hk[((size_t)h * NK + spike_at[k]) * d + c] =
              tu_f32_to_f16((10.f + 6.f * (float)k) * rs * u[c]);
    }
    /* the reference from the fp16 inputs, in double, without and with
     * the mask (bottom-right: row i sees keys <= i + NK - NQ) */
    for (int h = 0; h < H; h++)
      for (int i = 0; i < NQ; i++) {
        const uint16_t *qi = hq + ((size_t)h * NQ + i) * d;
        for (int j = 0; j < NK; j++) {
          double dot = 0;
          for (int c = 0; c < d; c++)
            dot += (double)tu_f16_to_f32(qi[c]) * tu_f16_to_f32(hk[((size_t)h * NK + j) * d + c]);
          s[j] = dot * rs;
        }
        for (int causal = 0; causal < 2; causal++) {
          const int last = causal ? i + NK - NQ : NK - 1;
          double m = -INFINITY, l = 0;
          for (int j = 0; j <= last; j++)
            m = s[j] > m ? s[j] : m;
          double *w = want + (size_t)causal * nq + ((size_t)h * NQ + i) * d;
          for (int c = 0; c < d; c++)
            w[c] = 0;
          for (int j = 0; j <= last; j++) {
            const double e = exp(s[j] - m);
            l += e;
            for (int c = 0; c < d; c++)
              w[c] += e * tu_f16_to_f32(hv[((size_t)h * NK + j) * d + c]);
          }
          for (int c = 0; c < d; c++)
            w[c] /= l;
        }
      }
    dev_qkvo dv = dev_qkvo_upload(cu, hq, hk, hv, nq, nk);
    const CUdeviceptr q = dv.q, k = dv.k, v = dv.v, o = dv.o;
    /* FP16PV fp32 (every d), FP8PV fp32+fp16 (d = 128), FP8PV fp32
     * (every d: chunked on sm_90 where it has VH) */
    static const struct {
      sj_family fam;
      sj_pv_accum acc;
      int d128_only;
      const char *name;
      double lim;
    } modes[] = {
        {SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 0, "fp16pv fp32", 2e-2},
        {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP16, 1, "fp8pv fp32+fp16", 5e-2},
        {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32, 0, "fp8pv fp32", 5e-2},
    };
    for (size_t mi = 0; mi < sizeof modes / sizeof *modes; mi++) {
      if ((modes[mi].fam == SJ_FAMILY_FP8PV && !fp8) ||
          (modes[mi].d128_only && d != 128))
        continue;
      for (int causal = 0; causal < 2; causal++) {
        sj_attention_params p;
        fill_params(&p, q, k, v, o);
        p.heads_q = p.heads_kv = H;
        p.seq_q = NQ;
        p.seq_kv = NK;
        p.head_dim = d;
        p.causal = causal;
        p.causal_align = SJ_CAUSAL_BOTTOM_RIGHT;
        p.family = modes[mi].fam;
        p.pv_accum = modes[mi].acc;
        cu->MemsetD8(o, 0xff, nq * 2);
        if (sj_attention(ctx, &p, NULL) != SJ_OK)
          fail_msg("sj_attention: %s", sj_context_last_error(ctx));
        assert_int_equal(cu->CtxSynchronize(), CUDA_SUCCESS);
        cu->MemcpyDtoH(ho, o, nq * 2);
        double num = 0, den = 0;
        const double *wc = want + (size_t)causal * nq;
        for (int h = 0; h < H; h++)
          for (int i = 0; i < NQ; i++)
            for (int c = 0; c < d; c++) {
              const size_t at = ((size_t)h * NQ + i) * d + c;
              const double e = tu_f16_to_f32(ho[at]) - wc[at];
              if (!(e == e))
                fail_msg("d%d %s causal%d: output (%d, %d, %d) not written or not finite",
                         d, modes[mi].name, causal, h, i, c);
              num += e * e;
              den += wc[at] * wc[at];
            }
        const double rel = sqrt(num / den), lim = modes[mi].lim;
        print_message("max jumps d%d %s causal%d: rel L2 %.4g (gate %.0e)\n", d,
                      modes[mi].name, causal, rel, lim);
        assert_true(rel < lim);
        ran++;
      }
    }
    dev_qkvo_free(cu, &dv);
    free(hq);
    free(hk);
    free(hv);
    free(ho);
    free(u);
    free(s);
    free(want);
  }
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);
  sj_context_destroy(ctx);
  assert_int_equal(ran, 10 + (fp8 ? 2 + 10 : 0));
}

static void test_user_workspace(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  sj_context *ctx = gpu_ctx(SJ_FAMILY_AUTO);
  const sj_cuda_api *cu = ctx->cu;
  const size_t n = 4 * 300 * 128;
  uint16_t *h = malloc(n * 2), *o1 = malloc(n * 2), *o2 = malloc(n * 2);
  uint64_t seed = 9;
  for (size_t i = 0; i < n; i++)
    h[i] = tu_f32_to_f16((float)tu_rand_normal(&seed));
  assert_int_equal(cu->CtxPushCurrent(ctx->cuctx), CUDA_SUCCESS);
  CUdeviceptr q, o, ws;
  assert_int_equal(cu->MemAlloc(&q, n * 2), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&o, n * 2), CUDA_SUCCESS);
  cu->MemcpyHtoD(q, h, n * 2);
  sj_attention_params p;
  fill_params(&p, q, q, q, o);
  size_t need = 0;
  assert_int_equal(sj_attention_workspace_size(ctx, &p, &need), SJ_OK);
  assert_int_equal(cu->MemAlloc(&ws, need), CUDA_SUCCESS);
  /* context-owned workspace */
  cu->MemsetD8(o, 0xff, n * 2);
  assert_int_equal(sj_attention(ctx, &p, NULL), SJ_OK);
  cu->CtxSynchronize();
  cu->MemcpyDtoH(o1, o, n * 2);
  /* caller's workspace: the same bits */
  cu->MemsetD8(o, 0xff, n * 2);
  p.workspace = (void *)(uintptr_t)ws;
  p.workspace_size = need;
  assert_int_equal(sj_attention(ctx, &p, NULL), SJ_OK);
  cu->CtxSynchronize();
  cu->MemcpyDtoH(o2, o, n * 2);
  assert_memory_equal(o1, o2, n * 2);
  size_t poisoned = 0;
  for (size_t i = 0; i < n; i++)
    poisoned += o1[i] == 0xffff;
  assert_int_equal(poisoned, 0);
  /* too small: a clear status and the output untouched */
  cu->MemsetD8(o, 0xff, n * 2);
  p.workspace_size = need - 1;
  assert_int_equal(sj_attention(ctx, &p, NULL), SJ_ERR_WORKSPACE);
  assert_non_null(strstr(sj_context_last_error(ctx), "needs"));
  cu->CtxSynchronize();
  cu->MemcpyDtoH(o2, o, n * 2);
  for (size_t i = 0; i < n; i++)
    assert_int_equal(o2[i], 0xffff);
  cu->MemFree(q);
  cu->MemFree(o);
  cu->MemFree(ws);
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);
  free(h);
  free(o1);
  free(o2);
  sj_context_destroy(ctx);
}

/* Programmatic dependent launch (sm_90 and later targets): a call's kernels
 * after the first start while their predecessor drains, and wait in
 * pdl_wait before reading its output.  Four calls are queued back to back
 * on one stream and one workspace, alternating two inputs, so that a kernel
 * reading before its predecessor finished would see the other input's
 * quantized Q, K or V; every output must equal, bit for bit, the same call
 * made with SAGEJIT_PDL=0 and a synchronize after each call. */
static void test_pdl_chain(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  const sj_family fams[] = {SJ_FAMILY_AUTO, SJ_FAMILY_FP8PV, SJ_FAMILY_FP16PV};
  const size_t n = (size_t)2 * 8 * 2048 * 128;
  uint16_t *h = malloc(n * 2), *ref[2], *got = malloc(n * 2);
  assert_non_null(h);
  assert_non_null(got);
  for (int f = 0; f < 3; f++) {
    setenv("SAGEJIT_PDL", "0", 1);
    sj_context *plain = gpu_ctx(fams[f]);
    unsetenv("SAGEJIT_PDL");
    sj_context *ctx = gpu_ctx(fams[f]);
    assert_int_equal(plain->pdl, 0);
    assert_int_equal(ctx->pdl, ctx->target.sm >= 90 && ctx->cu->LaunchKernelEx != NULL);
    if (ctx->family != fams[f] && fams[f] != SJ_FAMILY_AUTO) {
      sj_context_destroy(plain);
      sj_context_destroy(ctx);
      continue; /* the family does not run on this device */
    }
    const sj_cuda_api *cu = ctx->cu;
    assert_int_equal(cu->CtxPushCurrent(ctx->cuctx), CUDA_SUCCESS);
    CUdeviceptr qkv[2][3], o[4];
    uint64_t seed = 1234 + (uint64_t)f;
    for (int in = 0; in < 2; in++)
      for (int t = 0; t < 3; t++) {
        for (size_t i = 0; i < n; i++)
          h[i] = tu_f32_to_f16((float)tu_rand_normal(&seed) + (t == 1 ? 1.0f : 0.f));
        assert_int_equal(cu->MemAlloc(&qkv[in][t], n * 2), CUDA_SUCCESS);
        cu->MemcpyHtoD(qkv[in][t], h, n * 2);
      }
    for (int i = 0; i < 4; i++) {
      assert_int_equal(cu->MemAlloc(&o[i], n * 2), CUDA_SUCCESS);
      cu->MemsetD8(o[i], 0xff, n * 2);
    }
    sj_attention_params p;
    fill_params(&p, qkv[0][0], qkv[0][1], qkv[0][2], o[0]);
    p.batch = 2;
    p.heads_q = 8;
    p.heads_kv = 8;
    p.seq_q = 2048;
    p.seq_kv = 2048;
    for (int in = 0; in < 2; in++) {
      ref[in] = malloc(n * 2);
      assert_non_null(ref[in]);
      p.q = (void *)(uintptr_t)qkv[in][0];
      p.k = (void *)(uintptr_t)qkv[in][1];
      p.v = (void *)(uintptr_t)qkv[in][2];
      p.o = (void *)(uintptr_t)o[0];
      assert_int_equal(sj_attention(plain, &p, NULL), SJ_OK);
      assert_int_equal(cu->CtxSynchronize(), CUDA_SUCCESS);
      cu->MemcpyDtoH(ref[in], o[0], n * 2);
    }
    cu->MemsetD8(o[0], 0xff, n * 2);
    for (int i = 0; i < 4; i++) {
      p.q = (void *)(uintptr_t)qkv[i % 2][0];
      p.k = (void *)(uintptr_t)qkv[i % 2][1];
      p.v = (void *)(uintptr_t)qkv[i % 2][2];
      p.o = (void *)(uintptr_t)o[i];
      assert_int_equal(sj_attention(ctx, &p, NULL), SJ_OK);
    }
    assert_int_equal(cu->CtxSynchronize(), CUDA_SUCCESS);
    for (int i = 0; i < 4; i++) {
      cu->MemcpyDtoH(got, o[i], n * 2);
      assert_memory_equal(got, ref[i % 2], n * 2);
    }
    size_t poisoned = 0;
    for (size_t i = 0; i < n; i++)
      poisoned += ref[0][i] == 0xffff || ref[1][i] == 0xffff;
    assert_int_equal(poisoned, 0);
    assert_true(memcmp(ref[0], ref[1], n * 2) != 0);
    print_message("pdl chain (%s, pdl %d): 4 queued calls match\n",
                  sj_family_str(ctx->family), ctx->pdl);
    for (int in = 0; in < 2; in++) {
      free(ref[in]);
      for (int t = 0; t < 3; t++)
        cu->MemFree(qkv[in][t]);
    }
    for (int i = 0; i < 4; i++)
      cu->MemFree(o[i]);
    CUcontext dummy;
    cu->CtxPopCurrent(&dummy);
    sj_context_destroy(plain);
    sj_context_destroy(ctx);
  }
  free(h);
  free(got);
}

/* The attention kernels quantize their own Q rows by default
 * (SJ_F_Q_FUSED): the output must match, bit for bit, the one made from
 * quant_qkv's Q (SAGEJIT_QFUSE=0), and the LSE (q.mean_k summed in another
 * order) to rounding: every family, every granularity (per_block stays with
 * the quantizer where its rows span warps), both layouts, GQA, tails,
 * causal, head dims 32-256, bf16. */
static void test_q_fused(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  setenv("SAGEJIT_QFUSE", "0", 1);
  sj_context *plain = gpu_ctx(SJ_FAMILY_AUTO);
  unsetenv("SAGEJIT_QFUSE");
  sj_context *ctx = gpu_ctx(SJ_FAMILY_AUTO);
  assert_int_equal(plain->q_fuse, 0);
  assert_int_equal(ctx->q_fuse, 1);
  const int hopper = strcmp(ctx->target.name, "sm_90a") == 0;
  static const struct {
    sj_family fam;
    int b, hq, hk, nq, nk, d, causal;
    sj_layout lay;
    sj_quant_gran qg;
    sj_dtype dt;
  } cases[] = {
      {SJ_FAMILY_WGMMA, 2, 4, 4, 300, 300, 128, 0, SJ_LAYOUT_HND, SJ_QUANT_PER_THREAD, SJ_DTYPE_FP16},
      {SJ_FAMILY_WGMMA, 1, 8, 2, 1000, 777, 128, 1, SJ_LAYOUT_NHD, SJ_QUANT_PER_WARP, SJ_DTYPE_FP16},
      {SJ_FAMILY_WGMMA, 2, 4, 2, 257, 513, 128, 0, SJ_LAYOUT_NHD, SJ_QUANT_PER_BLOCK, SJ_DTYPE_BF16},
      {SJ_FAMILY_WGMMA, 1, 4, 4, 200, 333, 64, 1, SJ_LAYOUT_HND, SJ_QUANT_PER_THREAD, SJ_DTYPE_BF16},
      {SJ_FAMILY_WGMMA, 1, 4, 1, 129, 200, 64, 0, SJ_LAYOUT_NHD, SJ_QUANT_PER_WARP, SJ_DTYPE_FP16},
      {SJ_FAMILY_WGMMA, 1, 2, 2, 300, 300, 64, 0, SJ_LAYOUT_HND, SJ_QUANT_PER_BLOCK, SJ_DTYPE_FP16},
      {SJ_FAMILY_WGMMA, 1, 2, 2, 100, 190, 256, 1, SJ_LAYOUT_HND, SJ_QUANT_PER_THREAD, SJ_DTYPE_FP16},
      {SJ_FAMILY_FP16PV, 1, 8, 2, 1000, 777, 128, 1, SJ_LAYOUT_NHD, SJ_QUANT_PER_THREAD, SJ_DTYPE_FP16},
      {SJ_FAMILY_FP16PV, 2, 4, 4, 300, 300, 64, 0, SJ_LAYOUT_HND, SJ_QUANT_PER_WARP, SJ_DTYPE_BF16},
      {SJ_FAMILY_FP16PV, 1, 2, 2, 100, 190, 256, 0, SJ_LAYOUT_HND, SJ_QUANT_PER_THREAD, SJ_DTYPE_FP16},
      {SJ_FAMILY_FP8PV, 2, 4, 2, 257, 513, 128, 0, SJ_LAYOUT_NHD, SJ_QUANT_PER_THREAD, SJ_DTYPE_BF16},
      {SJ_FAMILY_FP8PV, 1, 4, 4, 200, 333, 96, 1, SJ_LAYOUT_HND, SJ_QUANT_PER_WARP, SJ_DTYPE_FP16},
      {SJ_FAMILY_FP8PV, 1, 4, 1, 129, 200, 32, 0, SJ_LAYOUT_NHD, SJ_QUANT_PER_THREAD, SJ_DTYPE_FP16},
      {SJ_FAMILY_FP8PV, 1, 4, 4, 300, 300, 128, 1, SJ_LAYOUT_HND, SJ_QUANT_PER_BLOCK, SJ_DTYPE_FP16},
  };
  int ran = 0;
  const sj_cuda_api *cu = ctx->cu;
  assert_int_equal(cu->CtxPushCurrent(ctx->cuctx), CUDA_SUCCESS);
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    if ((cases[ci].fam == SJ_FAMILY_WGMMA && !hopper) ||
        (cases[ci].fam == SJ_FAMILY_FP8PV && ctx->target.sm < 89))
      continue; /* the family needs sm_90a / sm_89 */
    ran++;
    const size_t nq = (size_t)cases[ci].b * cases[ci].hq * cases[ci].nq * cases[ci].d;
    const size_t nk = (size_t)cases[ci].b * cases[ci].hk * cases[ci].nk * cases[ci].d;
    const size_t nl = (size_t)cases[ci].b * cases[ci].hq * cases[ci].nq;
    const size_t sz[3] = {nq, nk, nk};
    uint16_t *h = malloc(nq * 2 > nk * 2 ? nq * 2 : nk * 2);
    uint16_t *o_ref = malloc(nq * 2), *o_got = malloc(nq * 2);
    float *l_ref = malloc(nl * 4), *l_got = malloc(nl * 4);
    assert_true(h && o_ref && o_got && l_ref && l_got);
    uint64_t seed = 4242 + ci;
    CUdeviceptr t[3], o, lse;
    for (int i = 0; i < 3; i++) {
      for (size_t j = 0; j < sz[i]; j++) {
        /* K gets a per-channel bias, as K smoothing expects */
        const float x = (float)tu_rand_normal(&seed) +
                        (i == 1 ? 0.5f * (float)(j % (size_t)cases[ci].d % 7) : 0.f);
        h[j] = cases[ci].dt == SJ_DTYPE_BF16 ? tu_f32_to_bf16(x) : tu_f32_to_f16(x);
      }
      assert_int_equal(cu->MemAlloc(&t[i], sz[i] * 2), CUDA_SUCCESS);
      cu->MemcpyHtoD(t[i], h, sz[i] * 2);
    }
    assert_int_equal(cu->MemAlloc(&o, nq * 2), CUDA_SUCCESS);
    assert_int_equal(cu->MemAlloc(&lse, nl * 4), CUDA_SUCCESS);
    sj_attention_params p;
    fill_params(&p, t[0], t[1], t[2], o);
    p.dtype = cases[ci].dt;
    p.layout = cases[ci].lay;
    p.batch = cases[ci].b;
    p.heads_q = cases[ci].hq;
    p.heads_kv = cases[ci].hk;
    p.seq_q = cases[ci].nq;
    p.seq_kv = cases[ci].nk;
    p.head_dim = cases[ci].d;
    p.causal = cases[ci].causal;
    p.qk_quant = cases[ci].qg;
    p.family = cases[ci].fam;
    p.lse = (float *)(uintptr_t)lse;
    for (int run = 0; run < 2; run++) {
      cu->MemsetD8(o, 0xff, nq * 2);
      cu->MemsetD8(lse, 0xff, nl * 4);
      assert_int_equal(sj_attention(run ? ctx : plain, &p, NULL), SJ_OK);
      assert_int_equal(cu->CtxSynchronize(), CUDA_SUCCESS);
      cu->MemcpyDtoH(run ? o_got : o_ref, o, nq * 2);
      cu->MemcpyDtoH(run ? l_got : l_ref, lse, nl * 4);
    }
    size_t poisoned = 0, lse_bad = 0;
    for (size_t j = 0; j < nq; j++)
      poisoned += o_ref[j] == 0xffff;
    for (size_t j = 0; j < nl; j++)
      lse_bad += !(fabsf(l_got[j] - l_ref[j]) <= 1e-4f * fmaxf(1.f, fabsf(l_ref[j])));
    assert_int_equal(poisoned, 0);
    assert_int_equal(lse_bad, 0);
    assert_memory_equal(o_got, o_ref, nq * 2);
    for (int i = 0; i < 3; i++)
      cu->MemFree(t[i]);
    cu->MemFree(o);
    cu->MemFree(lse);
    free(h);
    free(o_ref);
    free(o_got);
    free(l_ref);
    free(l_got);
  }
  print_message("fused Q: %d cases bit-identical to quant_qkv's Q\n", ran);
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);
  sj_context_destroy(plain);
  sj_context_destroy(ctx);
}

/* kv_finalize folded into kv_stats (SJ_F_FINALIZE, the default on a
 * context's workspace): the same reduction in the same order, so the
 * output and the LSE must equal, bit for bit, those of the separate
 * kv_finalize launch (SAGEJIT_PREP=0), as must those of a caller's
 * workspace full of 0xff bytes (the separate launch again, with nothing
 * left of the garbage).  Each context makes two calls, on inputs with
 * different statistics, on one stream without a synchronize, so the second
 * launch reads the counts the first one left (a count left non-zero would
 * skip a head's reduction and keep the first input's means and scales).
 * Cases: every family, the wgmma default's per-head choice of V
 * (pvi8+splitv: the reduction decides it), per_block, smooth_v, GQA,
 * several chunks per head, K sampling, tails, causal, D 32-256, bf16. */
static void test_prep_fused(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  enum { NCTX = 2 };
  sj_context *ctx[NCTX];
  setenv("SAGEJIT_PREP", "0", 1);
  ctx[0] = gpu_ctx(SJ_FAMILY_AUTO);
  unsetenv("SAGEJIT_PREP");
  ctx[1] = gpu_ctx(SJ_FAMILY_AUTO);
  assert_int_equal(ctx[0]->prep_fuse, 0);
  assert_int_equal(ctx[1]->prep_fuse, 1);
  const int hopper = strcmp(ctx[0]->target.name, "sm_90a") == 0;
  static const struct {
    sj_family fam;
    int b, hq, hk, nq, nk, d, causal, smooth_v;
    sj_quant_gran qg;
    sj_pv_accum acc;
    sj_dtype dt;
  } cases[] = {
      {SJ_FAMILY_WGMMA, 2, 4, 4, 1000, 3000, 128, 0, 0, SJ_QUANT_PER_THREAD, SJ_ACCUM_DEFAULT, SJ_DTYPE_FP16},
      {SJ_FAMILY_WGMMA, 1, 8, 2, 1500, 1500, 64, 1, 0, SJ_QUANT_PER_WARP, SJ_ACCUM_DEFAULT, SJ_DTYPE_BF16},
      {SJ_FAMILY_WGMMA, 1, 2, 2, 300, 2200, 64, 0, 0, SJ_QUANT_PER_BLOCK, SJ_ACCUM_DEFAULT, SJ_DTYPE_FP16},
      {SJ_FAMILY_WGMMA, 1, 2, 1, 200, 700, 256, 1, 0, SJ_QUANT_PER_THREAD, SJ_ACCUM_FP32_FP32, SJ_DTYPE_FP16},
      {SJ_FAMILY_FP16PV, 1, 8, 2, 800, 2500, 128, 1, 0, SJ_QUANT_PER_THREAD, SJ_ACCUM_DEFAULT, SJ_DTYPE_FP16},
      {SJ_FAMILY_FP16PV, 2, 4, 4, 300, 1300, 64, 0, 0, SJ_QUANT_PER_BLOCK, SJ_ACCUM_DEFAULT, SJ_DTYPE_BF16},
      {SJ_FAMILY_FP8PV, 2, 4, 2, 700, 2100, 96, 0, 1, SJ_QUANT_PER_WARP, SJ_ACCUM_FP32_FP32, SJ_DTYPE_FP16},
      {SJ_FAMILY_FP8PV, 1, 4, 4, 500, 1100, 32, 1, 0, SJ_QUANT_PER_THREAD, SJ_ACCUM_FP32_FP16, SJ_DTYPE_FP16},
      {SJ_FAMILY_FP8PV, 1, 2, 2, 300, 600, 256, 0, 0, SJ_QUANT_PER_BLOCK, SJ_ACCUM_DEFAULT, SJ_DTYPE_BF16},
  };
  int ran = 0;
  const sj_cuda_api *cu = ctx[0]->cu;
  assert_int_equal(cu->CtxPushCurrent(ctx[0]->cuctx), CUDA_SUCCESS);
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    if ((cases[ci].fam == SJ_FAMILY_WGMMA && !hopper) ||
        (cases[ci].fam == SJ_FAMILY_FP8PV && ctx[0]->target.sm < 89))
      continue; /* the family needs sm_90a / sm_89 */
    ran++;
    const size_t nq = (size_t)cases[ci].b * cases[ci].hq * cases[ci].nq * cases[ci].d;
    const size_t nk = (size_t)cases[ci].b * cases[ci].hk * cases[ci].nk * cases[ci].d;
    const size_t nl = (size_t)cases[ci].b * cases[ci].hq * cases[ci].nq;
    const size_t sz[3] = {nq, nk, nk};
    uint16_t *h = malloc(nq * 2 > nk * 2 ? nq * 2 : nk * 2);
    uint16_t *o_ref[2] = {malloc(nq * 2), malloc(nq * 2)}, *o_got = malloc(nq * 2);
    float *l_ref[2] = {malloc(nl * 4), malloc(nl * 4)}, *l_got = malloc(nl * 4);
    assert_true(h && o_ref[0] && o_ref[1] && o_got && l_ref[0] && l_ref[1] && l_got);
    uint64_t seed = 5150 + ci;
    /* two inputs with different statistics, so that a call reading the
     * previous call's means and scales (a count left non-zero skips the
     * reduction) cannot match */
    CUdeviceptr t[2][3], o[2], lse[2], ws = 0;
    for (int in = 0; in < 2; in++)
      for (int i = 0; i < 3; i++) {
        for (size_t j = 0; j < sz[i]; j++) {
          /* K with a per-channel bias; V with outlier tokens in odd heads
           * (the wgmma default then splits V there, pvi8 elsewhere) */
          const size_t d = (size_t)cases[ci].d, tok = j / d;
          float x = (float)tu_rand_normal(&seed);
          if (i == 1)
            x += (0.5f + (float)in) * (float)(j % d % 7);
          if (i == 2 && tok % 97 == 5 && (tok / (size_t)cases[ci].nk) % 2 == 1)
            x *= 40.f;
          if (i == 2 && in == 1)
            x = 1.5f * x + 0.25f;
          h[j] = cases[ci].dt == SJ_DTYPE_BF16 ? tu_f32_to_bf16(x) : tu_f32_to_f16(x);
        }
        assert_int_equal(cu->MemAlloc(&t[in][i], sz[i] * 2), CUDA_SUCCESS);
        cu->MemcpyHtoD(t[in][i], h, sz[i] * 2);
      }
    for (int r = 0; r < 2; r++) {
      assert_int_equal(cu->MemAlloc(&o[r], nq * 2), CUDA_SUCCESS);
      assert_int_equal(cu->MemAlloc(&lse[r], nl * 4), CUDA_SUCCESS);
    }
    sj_attention_params p;
    fill_params(&p, t[0][0], t[0][1], t[0][2], o[0]);
    p.dtype = cases[ci].dt;
    p.batch = cases[ci].b;
    p.heads_q = cases[ci].hq;
    p.heads_kv = cases[ci].hk;
    p.seq_q = cases[ci].nq;
    p.seq_kv = cases[ci].nk;
    p.head_dim = cases[ci].d;
    p.causal = cases[ci].causal;
    p.qk_quant = cases[ci].qg;
    p.pv_accum = cases[ci].acc;
    p.smooth_v = cases[ci].smooth_v;
    p.family = cases[ci].fam;
    size_t ws_bytes = 0;
    assert_int_equal(sj_attention_workspace_size(ctx[1], &p, &ws_bytes), SJ_OK);
    assert_int_equal(cu->MemAlloc(&ws, ws_bytes), CUDA_SUCCESS);
    /* runs: each context, then context 1 on the caller's workspace; each
     * run queues the two inputs' calls back to back */
    for (int run = 0; run <= NCTX; run++) {
      sj_context *c = ctx[run < NCTX ? run : 1];
      p.workspace = run == NCTX ? (void *)(uintptr_t)ws : NULL;
      p.workspace_size = run == NCTX ? ws_bytes : 0;
      if (run == NCTX)
        cu->MemsetD8(ws, 0xff, ws_bytes);
      for (int r = 0; r < 2; r++) {
        cu->MemsetD8(o[r], 0xff, nq * 2);
        cu->MemsetD8(lse[r], 0xff, nl * 4);
      }
      for (int r = 0; r < 2; r++) {
        p.q = (void *)(uintptr_t)t[r][0];
        p.k = (void *)(uintptr_t)t[r][1];
        p.v = (void *)(uintptr_t)t[r][2];
        p.o = (void *)(uintptr_t)o[r];
        p.lse = (float *)(uintptr_t)lse[r];
        const sj_status st = sj_attention(c, &p, NULL);
        if (st != SJ_OK)
          fail_msg("case %zu run %d: %s (%s)", ci, run, sj_status_name(st),
                   sj_context_last_error(c));
      }
      assert_int_equal(cu->CtxSynchronize(), CUDA_SUCCESS);
      for (int r = 0; r < 2; r++) {
        cu->MemcpyDtoH(run ? o_got : o_ref[r], o[r], nq * 2);
        cu->MemcpyDtoH(run ? l_got : l_ref[r], lse[r], nl * 4);
        if (run == 0) {
          size_t poisoned = 0;
          for (size_t j = 0; j < nq; j++)
            poisoned += o_ref[r][j] == 0xffff;
          for (size_t j = 0; j < nl; j++)
            poisoned += !isfinite(l_ref[r][j]);
          assert_int_equal(poisoned, 0);
          continue;
        }
        if (memcmp(o_got, o_ref[r], nq * 2) != 0 || memcmp(l_got, l_ref[r], nl * 4) != 0) {
          size_t diff = 0;
          for (size_t j = 0; j < nq; j++)
            diff += o_got[j] != o_ref[r][j];
          fail_msg("case %zu (family %s, D %d): run %d call %d differs from the "
                   "kv_finalize launch in %zu of %zu outputs",
                   ci, sj_family_str(cases[ci].fam), cases[ci].d, run, r, diff, nq);
        }
      }
    }
    assert_true(memcmp(o_ref[0], o_ref[1], nq * 2) != 0);
    for (int in = 0; in < 2; in++)
      for (int i = 0; i < 3; i++)
        cu->MemFree(t[in][i]);
    for (int r = 0; r < 2; r++) {
      cu->MemFree(o[r]);
      cu->MemFree(lse[r]);
      free(o_ref[r]);
      free(l_ref[r]);
    }
    cu->MemFree(ws);
    free(h);
    free(o_got);
    free(l_got);
  }
  print_message("kv_finalize in kv_stats: %d cases x 2 queued inputs, the context's "
                "and a caller's workspace, bit-identical to its own launch\n", ran);
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);
  for (int c = 0; c < NCTX; c++)
    sj_context_destroy(ctx[c]);
}

/* Causal launch order of the attention kernels (sj::cta_coord,
 * sj::cta_coord_reread): one head at a time or, with SJ_F_HEADS_FIRST, a
 * grid of (heads, Q blocks, batch) that starts every head's heaviest Q
 * block first (attention.c: causal_heads_first; SAGEJIT_TUNE "order=0" /
 * "order=1" forces it).  The order must only permute the CTAs: both must
 * give the same output and LSE bit for bit, with nothing left of the
 * poison, on both alignments, GQA, both layouts, tails, the short, solo
 * and two-consumer wgmma kernels (sm_90a only) and attn_mma's FP16PV and
 * FP8PV bodies (16- and 32-row warps, 32- and 64-key steps, pvi8); and
 * the default must be one of them. */
static void test_causal_order(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  sj_context *ctx = gpu_ctx(SJ_FAMILY_AUTO);
  const int hopper = strcmp(ctx->target.name, "sm_90a") == 0;
  const char *tune0 = getenv("SAGEJIT_TUNE");
  char saved[256] = "";
  if (tune0)
    snprintf(saved, sizeof saved, "%s", tune0);
  static const struct {
    sj_family fam;
    int b, hq, hk, nq, nk, d;
    sj_causal_align align;
    sj_layout lay;
    const char *tune; /* prefix of SAGEJIT_TUNE */
    sj_pv_accum accum;
  } cases[] = {
      {SJ_FAMILY_WGMMA, 3, 5, 5, 1000, 1000, 128, SJ_CAUSAL_TOP_LEFT, SJ_LAYOUT_NHD, "", SJ_ACCUM_DEFAULT},
      {SJ_FAMILY_WGMMA, 2, 6, 2, 700, 2500, 128, SJ_CAUSAL_BOTTOM_RIGHT, SJ_LAYOUT_HND, "", SJ_ACCUM_DEFAULT},
      {SJ_FAMILY_WGMMA, 3, 5, 5, 1500, 1500, 128, SJ_CAUSAL_TOP_LEFT, SJ_LAYOUT_HND, "nc=2,", SJ_ACCUM_DEFAULT},
      {SJ_FAMILY_WGMMA, 3, 5, 1, 600, 600, 64, SJ_CAUSAL_TOP_LEFT, SJ_LAYOUT_NHD, "", SJ_ACCUM_DEFAULT},
      {SJ_FAMILY_WGMMA, 2, 4, 4, 900, 1100, 256, SJ_CAUSAL_BOTTOM_RIGHT, SJ_LAYOUT_NHD, "", SJ_ACCUM_DEFAULT},
      {SJ_FAMILY_FP16PV, 3, 5, 5, 1000, 1000, 128, SJ_CAUSAL_TOP_LEFT, SJ_LAYOUT_NHD, "", SJ_ACCUM_DEFAULT},
      {SJ_FAMILY_FP16PV, 2, 6, 2, 700, 2500, 64, SJ_CAUSAL_BOTTOM_RIGHT, SJ_LAYOUT_HND, "", SJ_ACCUM_DEFAULT},
      {SJ_FAMILY_FP16PV, 2, 4, 4, 500, 700, 256, SJ_CAUSAL_TOP_LEFT, SJ_LAYOUT_NHD, "", SJ_ACCUM_DEFAULT},
      {SJ_FAMILY_FP8PV, 3, 5, 1, 600, 600, 128, SJ_CAUSAL_TOP_LEFT, SJ_LAYOUT_HND, "", SJ_ACCUM_DEFAULT},
      {SJ_FAMILY_FP8PV, 2, 4, 4, 900, 1100, 96, SJ_CAUSAL_BOTTOM_RIGHT, SJ_LAYOUT_NHD, "ksub=32,", SJ_ACCUM_PVI8},
  };
  size_t n_run = 0;
  static const char *orders[] = {"order=0", "order=1", ""};
  const size_t n_orders = sizeof orders / sizeof *orders;
  const sj_cuda_api *cu = ctx->cu;
  assert_int_equal(cu->CtxPushCurrent(ctx->cuctx), CUDA_SUCCESS);
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    if (cases[ci].fam == SJ_FAMILY_WGMMA && !hopper)
      continue; /* attn_wgmma needs sm_90a */
    n_run++;
    const size_t nq = (size_t)cases[ci].b * cases[ci].hq * cases[ci].nq * cases[ci].d;
    const size_t nk = (size_t)cases[ci].b * cases[ci].hk * cases[ci].nk * cases[ci].d;
    const size_t nl = (size_t)cases[ci].b * cases[ci].hq * cases[ci].nq;
    const size_t sz[3] = {nq, nk, nk};
    uint16_t *h = malloc(nq * 2 > nk * 2 ? nq * 2 : nk * 2);
    uint16_t *o_ref = malloc(nq * 2), *o_got = malloc(nq * 2);
    float *l_ref = malloc(nl * 4), *l_got = malloc(nl * 4);
    assert_true(h && o_ref && o_got && l_ref && l_got);
    uint64_t seed = 5151 + ci;
    CUdeviceptr t[3], o, lse;
    for (int i = 0; i < 3; i++) {
      for (size_t j = 0; j < sz[i]; j++)
        h[j] = tu_f32_to_f16((float)tu_rand_normal(&seed) +
                             (i == 1 ? 0.5f * (float)(j % (size_t)cases[ci].d % 5) : 0.f));
      assert_int_equal(cu->MemAlloc(&t[i], sz[i] * 2), CUDA_SUCCESS);
      cu->MemcpyHtoD(t[i], h, sz[i] * 2);
    }
    assert_int_equal(cu->MemAlloc(&o, nq * 2), CUDA_SUCCESS);
    assert_int_equal(cu->MemAlloc(&lse, nl * 4), CUDA_SUCCESS);
    sj_attention_params p;
    fill_params(&p, t[0], t[1], t[2], o);
    p.layout = cases[ci].lay;
    p.batch = cases[ci].b;
    p.heads_q = cases[ci].hq;
    p.heads_kv = cases[ci].hk;
    p.seq_q = cases[ci].nq;
    p.seq_kv = cases[ci].nk;
    p.head_dim = cases[ci].d;
    p.causal = 1;
    p.causal_align = cases[ci].align;
    p.family = cases[ci].fam;
    p.pv_accum = cases[ci].accum;
    p.lse = (float *)(uintptr_t)lse;
    for (size_t r = 0; r < n_orders; r++) {
      char tune[64];
      snprintf(tune, sizeof tune, "%s%s", cases[ci].tune, orders[r]);
      setenv("SAGEJIT_TUNE", tune, 1);
      cu->MemsetD8(o, 0xff, nq * 2);
      cu->MemsetD8(lse, 0xff, nl * 4);
      const sj_status st = sj_attention(ctx, &p, NULL);
      unsetenv("SAGEJIT_TUNE");
      if (st != SJ_OK)
        fail_msg("case %zu %s: %s", ci, tune, sj_context_last_error(ctx));
      assert_int_equal(cu->CtxSynchronize(), CUDA_SUCCESS);
      cu->MemcpyDtoH(r ? o_got : o_ref, o, nq * 2);
      cu->MemcpyDtoH(r ? l_got : l_ref, lse, nl * 4);
      if (r == 0) {
        size_t poisoned = 0;
        for (size_t j = 0; j < nq; j++)
          poisoned += o_ref[j] == 0xffff;
        for (size_t j = 0; j < nl; j++)
          poisoned += !isfinite(l_ref[j]);
        assert_int_equal(poisoned, 0);
      } else {
        assert_memory_equal(o_got, o_ref, nq * 2);
        assert_memory_equal(l_got, l_ref, nl * 4);
      }
    }
    for (int i = 0; i < 3; i++)
      cu->MemFree(t[i]);
    cu->MemFree(o);
    cu->MemFree(lse);
    free(h);
    free(o_ref);
    free(o_got);
    free(l_ref);
    free(l_got);
  }
  if (tune0)
    setenv("SAGEJIT_TUNE", saved, 1);
  print_message("causal order: %zu cases, %zu orders each, bit-identical\n",
                n_run, n_orders);
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);
  sj_context_destroy(ctx);
}

/* pvi8+splitv (the wgmma default, test_runtime): kv_finalize picks pvi8 or split V per
 * (batch, kv head) from V's statistics, and quant_qkv and the attention
 * kernel follow.  One call on V whose odd kv heads carry outlier tokens
 * (one token in 97 times 40: R ~ 400-900) and whose even kv heads are
 * Gaussian (R ~ 10-20), odd and even counted as batch + kv head so that
 * the batch part of the choice's index is tested too, must give, head by
 * head and bit for bit, the output and LSE of pvi8 on the Gaussian heads
 * and of split V on the others.
 * Against the FP32 reference the mixed call must stay within the FP8 gate
 * (3.5e-2) on every head, where pvi8 alone exceeds it on outlier heads.  Both layouts, GQA, causal, smooth_v, head dims 64-256, bf16; each family
 * that offers the mode (wgmma on sm_90a, FP8PV from sm_89; D = 96 FP8PV only). */
static size_t o_index(sj_layout lay, int hq, int nq, int d, int b, int h, int n) {
  return lay == SJ_LAYOUT_NHD ? (((size_t)b * nq + n) * hq + h) * d
                              : (((size_t)b * hq + h) * nq + n) * d;
}

/* test_v_auto's three calls of one family on one case (the modes: pvi8+splitv,
 * pvi8, split V) and its head-by-head checks against the reference. */
static const sj_pv_accum v_auto_accs[3] = {SJ_ACCUM_PVI8_SPLITV, SJ_ACCUM_PVI8,
                                           SJ_ACCUM_FP32_FP32_SPLITV};
static void run_v_auto_family(sj_context *ctx, sj_attention_params *p, uint16_t *o[3],
                              float *l[3], CUdeviceptr od, CUdeviceptr lse, const float *ref,
                              size_t ci, double *worst_auto, double *worst_i8_outlier) {
  const sj_cuda_api *cu = ctx->cu;
  const char *fam = p->family == SJ_FAMILY_FP8PV ? "fp8pv" : "wgmma";
  const sj_pv_accum *accs = v_auto_accs;
  const int B = p->batch, HQ = p->heads_q, HK = p->heads_kv, NQ = p->seq_q, D = p->head_dim;
  const sj_layout lay = p->layout;
  const size_t nq = (size_t)B * HQ * NQ * D, nl = (size_t)B * HQ * NQ;
  for (int m = 0; m < 3; m++) {
    p->pv_accum = accs[m];
    cu->MemsetD8(od, 0xff, nq * 2);
    cu->MemsetD8(lse, 0xff, nl * 4);
    if (sj_attention(ctx, p, NULL) != SJ_OK)
      fail_msg("%s case %zu mode %d: %s", fam, ci, m, sj_context_last_error(ctx));
    assert_int_equal(cu->CtxSynchronize(), CUDA_SUCCESS);
    cu->MemcpyDtoH(o[m], od, nq * 2);
    cu->MemcpyDtoH(l[m], lse, nl * 4);
  }
  /* head by head: the mode the data asks for, bit for bit */
  for (int b = 0; b < B; b++)
    for (int hh = 0; hh < HQ; hh++) {
      const int hk = hh / (HQ / HK), want = (b + hk) % 2 ? 2 : 1;
      size_t same = 0, differs = 0, poisoned = 0;
      double err[3] = {0, 0, 0}, norm = 0;
      for (int n = 0; n < NQ; n++) {
        const size_t at = o_index(lay, HQ, NQ, D, b, hh, n);
        same += memcmp(o[0] + at, o[want] + at, (size_t)D * 2) == 0;
        differs += memcmp(o[1] + at, o[2] + at, (size_t)D * 2) != 0;
        const size_t li = ((size_t)b * HQ + hh) * NQ + n;
        uint32_t bits;
        memcpy(&bits, &l[0][li], 4);
        if (bits == 0xffffffffu) /* the poison: a row without its LSE */
          fail_msg("%s case %zu b%d h%d row %d: no LSE written", fam, ci, b, hh, n);
        if (memcmp(&l[0][li], &l[want][li], 4) != 0)
          fail_msg("%s case %zu b%d h%d row %d: LSE differs from mode %d's", fam, ci, b,
                   hh, n, want);
        for (int c = 0; c < D; c++) {
          const double r = ref[(((size_t)b * HQ + hh) * NQ + n) * D + c];
          norm += r * r;
          for (int m = 0; m < 3; m++) {
            const uint16_t u = o[m][at + c];
            poisoned += u == 0xffff;
            const double x = p->dtype == SJ_DTYPE_BF16 ? tu_bf16_to_f32(u)
                                                           : tu_f16_to_f32(u);
            err[m] += (x - r) * (x - r);
          }
        }
      }
      assert_int_equal(poisoned, 0);
      if (same != (size_t)NQ)
        fail_msg("%s case %zu b%d h%d (kv head %d): %zu of %d rows equal to mode %d's",
                 fam, ci, b, hh, hk, same, NQ, want);
      assert_true(differs > 0); /* the two modes are distinguishable here */
      for (int m = 0; m < 3; m++)
        err[m] = sqrt(err[m] / norm);
      print_message("%s case %zu b%d h%d %s: rel L2 pvi8+splitv %.4g, pvi8 %.4g, "
                    "split V %.4g\n",
                    fam, ci, b, hh, want == 2 ? "outliers" : "gaussian", err[0], err[1],
                    err[2]);
      assert_true(err[0] <= 3.5e-2);
      if (err[0] > *worst_auto)
        *worst_auto = err[0];
      if (want == 2 && err[1] > *worst_i8_outlier)
        *worst_i8_outlier = err[1];
    }
}

static void test_v_auto(void **state) {
  (void)state;
  int wg;
  sj_context *ctx = fp8_ctx(&wg);
  static const struct {
    int b, hq, hk, nq, nk, d, causal, smooth_v;
    sj_layout lay;
    sj_quant_gran qg;
    sj_dtype dt;
  } cases[] = {
      {2, 4, 2, 300, 1000, 128, 0, 0, SJ_LAYOUT_HND, SJ_QUANT_PER_THREAD, SJ_DTYPE_FP16},
      {1, 8, 4, 1000, 777, 128, 1, 0, SJ_LAYOUT_NHD, SJ_QUANT_PER_WARP, SJ_DTYPE_BF16},
      {1, 4, 4, 257, 513, 64, 1, 1, SJ_LAYOUT_NHD, SJ_QUANT_PER_THREAD, SJ_DTYPE_FP16},
      {2, 2, 2, 100, 190, 256, 0, 1, SJ_LAYOUT_HND, SJ_QUANT_PER_THREAD, SJ_DTYPE_BF16},
      {1, 4, 2, 333, 700, 96, 1, 0, SJ_LAYOUT_NHD, SJ_QUANT_PER_WARP, SJ_DTYPE_FP16},
      {2, 2, 2, 200, 450, 32, 0, 1, SJ_LAYOUT_HND, SJ_QUANT_PER_THREAD, SJ_DTYPE_BF16},
  };
  const sj_cuda_api *cu = ctx->cu;
  assert_int_equal(cu->CtxPushCurrent(ctx->cuctx), CUDA_SUCCESS);
  /* per family: wgmma, FP8PV */
  double worst_auto = 0, worst_i8_outlier[2] = {0, 0};
  int ran[2] = {0, 0};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const int B = cases[ci].b, HQ = cases[ci].hq, HK = cases[ci].hk;
    const int NQ = cases[ci].nq, NK = cases[ci].nk, D = cases[ci].d;
    const sj_layout lay = cases[ci].lay;
    const size_t nq = (size_t)B * HQ * NQ * D, nk = (size_t)B * HK * NK * D;
    const size_t nl = (size_t)B * HQ * NQ;
    const size_t sz[3] = {nq, nk, nk};
    uint16_t *h = malloc(nq > nk ? nq * 2 : nk * 2);
    uint16_t *o[3];
    float *l[3];
    float *ref = malloc(nq * 4);
    assert_non_null(h);
    assert_non_null(ref);
    for (int m = 0; m < 3; m++) {
      o[m] = malloc(nq * 2);
      l[m] = malloc(nl * 4);
      assert_true(o[m] && l[m]);
    }
    uint64_t seed = 5150 + ci;
    CUdeviceptr t[3], od, lse, refd;
    for (int i = 0; i < 3; i++) {
      const int heads = i == 0 ? HQ : HK, n_tok = i == 0 ? NQ : NK;
      for (size_t j = 0; j < sz[i]; j++) {
        /* (b, head, token) of element j in this layout */
        const size_t row = j / (size_t)D;
        const int bb = (int)(row / ((size_t)heads * (size_t)n_tok));
        const int hh = lay == SJ_LAYOUT_NHD ? (int)(row % (size_t)heads)
                                            : (int)(row / (size_t)n_tok % (size_t)heads);
        const int tok = lay == SJ_LAYOUT_NHD ? (int)(row / (size_t)heads % (size_t)n_tok)
                                             : (int)(row % (size_t)n_tok);
        float x = (float)tu_rand_normal(&seed);
        if (i == 1) /* K: a per-channel bias, as K smoothing expects */
          x += 0.5f * (float)(j % (size_t)D % 7);
        if (i == 2 && (bb + hh) % 2 == 1 && tok % 97 == 5) /* outlier tokens */
          x *= 40.f;
        h[j] = cases[ci].dt == SJ_DTYPE_BF16 ? tu_f32_to_bf16(x) : tu_f32_to_f16(x);
      }
      assert_int_equal(cu->MemAlloc(&t[i], sz[i] * 2), CUDA_SUCCESS);
      cu->MemcpyHtoD(t[i], h, sz[i] * 2);
    }
    assert_int_equal(cu->MemAlloc(&od, nq * 2), CUDA_SUCCESS);
    assert_int_equal(cu->MemAlloc(&lse, nl * 4), CUDA_SUCCESS);
    assert_int_equal(cu->MemAlloc(&refd, nq * 4), CUDA_SUCCESS);
    sj_attention_params p;
    fill_params(&p, t[0], t[1], t[2], od);
    p.dtype = cases[ci].dt;
    p.layout = lay;
    p.batch = B;
    p.heads_q = HQ;
    p.heads_kv = HK;
    p.seq_q = NQ;
    p.seq_kv = NK;
    p.head_dim = D;
    p.causal = cases[ci].causal;
    p.qk_quant = cases[ci].qg;
    p.smooth_v = cases[ci].smooth_v;
    p.lse = (float *)(uintptr_t)lse;
    assert_int_equal(sj_attention_reference(ctx, &p, (float *)(uintptr_t)refd, NULL), SJ_OK);
    assert_int_equal(cu->CtxSynchronize(), CUDA_SUCCESS);
    cu->MemcpyDtoH(ref, refd, nq * 4);
    /* the wgmma family (sm_90a; head dims 64, 128, 256), then FP8PV */
    for (int fi = 0; fi < 2; fi++) {
      p.family = fi ? SJ_FAMILY_FP8PV : SJ_FAMILY_WGMMA;
      if (!fi && (!wg || D == 32 || D == 96))
        continue;
      run_v_auto_family(ctx, &p, o, l, od, lse, ref, ci, &worst_auto, &worst_i8_outlier[fi]);
      ran[fi] = 1;
    }
    for (int i = 0; i < 3; i++)
      cu->MemFree(t[i]);
    cu->MemFree(od);
    cu->MemFree(lse);
    cu->MemFree(refd);
    free(h);
    free(ref);
    for (int m = 0; m < 3; m++) {
      free(o[m]);
      free(l[m]);
    }
  }
  print_message("pvi8+splitv: every head bit-identical to the mode its V asks for; "
                "worst rel L2 %.4g (pvi8 alone on the outlier heads up to %.4g on wgmma, "
                "%.4g on FP8PV)\n",
                worst_auto, worst_i8_outlier[0], worst_i8_outlier[1]);
  /* what the choice is for: pvi8 alone breaks the gate on the outlier
   * heads (about 5e-2 on the 1000-key case; on a few short ones, two
   * outliers in 190 keys, it can come out a little below split V, which
   * the R threshold does not resolve: both are within the gate there) */
  assert_true(ran[1]);
  for (int fi = 0; fi < 2; fi++)
    if (ran[fi])
      assert_true(worst_i8_outlier[fi] > 3.5e-2);
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);
  sj_context_destroy(ctx);
}

typedef struct thread_arg {
  sj_context *ctx;
  sj_attention_params p;
  sj_status st;
} thread_arg;

static void *call_thread(void *arg) {
  thread_arg *a = arg;
  a->st = sj_attention(a->ctx, &a->p, NULL);
  return NULL;
}

/* Eight threads ask one context for the same four missing kernels at once:
 * each is compiled exactly once. */
static void test_single_flight_threads(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  char dir[512];
  assert_int_equal(tu_mkdtemp("flight", dir, sizeof dir), 0);
  sj_config cfg;
  sj_config_init(&cfg);
  cfg.cache_dir = dir;
  sj_context *ctx = NULL;
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_OK);
  const sj_cuda_api *cu = ctx->cu;
  assert_int_equal(cu->CtxPushCurrent(ctx->cuctx), CUDA_SUCCESS);
  const size_t n = 4 * 300 * 128;
  CUdeviceptr q, o[8];
  assert_int_equal(cu->MemAlloc(&q, n * 2), CUDA_SUCCESS);
  cu->MemsetD8(q, 0x3c, n * 2);
  thread_arg args[8];
  pthread_t th[8];
  for (int i = 0; i < 8; i++) {
    assert_int_equal(cu->MemAlloc(&o[i], n * 2), CUDA_SUCCESS);
    args[i].ctx = ctx;
    fill_params(&args[i].p, q, q, q, o[i]);
    args[i].p.head_dim = 64;
  }
  for (int i = 0; i < 8; i++)
    pthread_create(&th[i], NULL, call_thread, &args[i]);
  for (int i = 0; i < 8; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(args[i].st, SJ_OK);
  }
  cu->CtxSynchronize();
  sj_stats st;
  sj_context_get_stats(ctx, &st);
  assert_int_equal(st.compiles, 4);
  assert_int_equal(st.misses, 4);
  assert_int_equal(st.mem_hits, 7 * 4);
  for (int i = 0; i < 8; i++)
    cu->MemFree(o[i]);
  cu->MemFree(q);
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);
  sj_context_destroy(ctx);
  tu_rmrf(dir);
}

/* ------------------------------------------------- a second process hits */

/* Child mode: one call on the shared cache; exit 0 iff nothing compiled and
 * every kernel came from disk. */
static int child_disk_hits(void) {
  sj_config cfg;
  sj_config_init(&cfg);
  cfg.cache_dir = getenv("SJ_TEST_CACHE");
  sj_context *ctx = NULL;
  if (sj_context_create(&ctx, &cfg) != SJ_OK)
    return 10;
  const sj_cuda_api *cu = ctx->cu;
  cu->CtxPushCurrent(ctx->cuctx);
  CUdeviceptr q, o;
  const size_t n = 4 * 300 * 128;
  cu->MemAlloc(&q, n * 2);
  cu->MemAlloc(&o, n * 2);
  cu->MemsetD8(q, 0x3c, n * 2);
  sj_attention_params p;
  fill_params(&p, q, q, q, o);
  const double t0 = sj_now_ms();
  if (sj_attention(ctx, &p, NULL) != SJ_OK || cu->CtxSynchronize() != CUDA_SUCCESS)
    return 11;
  const double ms = sj_now_ms() - t0;
  sj_stats st;
  sj_context_get_stats(ctx, &st);
  printf("child: first call %.1f ms, disk hits %llu, compiles %llu, misses "
         "%llu\n",
         ms, (unsigned long long)st.disk_hits, (unsigned long long)st.compiles,
         (unsigned long long)st.misses);
  cu->MemFree(q);
  cu->MemFree(o);
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);
  sj_context_destroy(ctx);
  return (st.compiles == 0 && st.misses == 0 && st.disk_hits == 4) ? 0 : 12;
}

static void test_second_process_all_disk_hits(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  char dir[512];
  assert_int_equal(tu_mkdtemp("second", dir, sizeof dir), 0);
  {
    sj_config cfg;
    sj_config_init(&cfg);
    cfg.cache_dir = dir;
    sj_context *ctx = NULL;
    assert_int_equal(sj_context_create(&ctx, &cfg), SJ_OK);
    const sj_cuda_api *cu = ctx->cu;
    cu->CtxPushCurrent(ctx->cuctx);
    CUdeviceptr q, o;
    const size_t n = 4 * 300 * 128;
    cu->MemAlloc(&q, n * 2);
    cu->MemAlloc(&o, n * 2);
    cu->MemsetD8(q, 0x3c, n * 2);
    sj_attention_params p;
    fill_params(&p, q, q, q, o);
    const double t0 = sj_now_ms();
    assert_int_equal(sj_attention(ctx, &p, NULL), SJ_OK);
    cu->CtxSynchronize();
    print_message("parent: cold first call %.1f ms\n", sj_now_ms() - t0);
    sj_stats st;
    sj_context_get_stats(ctx, &st);
    assert_int_equal(st.compiles, 4);
    cu->MemFree(q);
    cu->MemFree(o);
    CUcontext dummy;
    cu->CtxPopCurrent(&dummy);
    sj_context_destroy(ctx);
  }
  char env[600];
  snprintf(env, sizeof env, "SJ_TEST_CACHE=%s", dir);
  char *argv[] = {g_self, "--child-disk-hits", NULL};
  char *envs[] = {env, NULL};
  char *out = NULL, *err = NULL;
  int rc = tu_run(argv, envs, &out, &err, 120);
  print_message("%s%s", out ? out : "", err ? err : "");
  assert_int_equal(rc, 0);
  free(out);
  free(err);
  tu_rmrf(dir);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--child-disk-hits"))
    return child_disk_hits();
  if (argc > 1) /* a test name (or a pattern): run only the matching ones */
    cmocka_set_test_filter(argv[1]);
  if (!realpath("/proc/self/exe", g_self))
    snprintf(g_self, sizeof g_self, "%s", argv[0]);
  const char *d = getenv("SAGEJIT_CACHE_DIR");
  snprintf(g_cache_dir, sizeof g_cache_dir, "%s", d && *d ? d : "/tmp/sjtest-gpu");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_vs_cpu),
      cmocka_unit_test(test_core_matrix_full),
      cmocka_unit_test(test_attention_matrix),
      cmocka_unit_test(test_wgmma_matrix),
      cmocka_unit_test(test_splitv_gain),
      cmocka_unit_test(test_pvi8_large_scores),
      cmocka_unit_test(test_poly_exp2),
      cmocka_unit_test(test_quant_extremes),
      cmocka_unit_test(test_max_jumps),
      cmocka_unit_test(test_k_mean_sampled),
      cmocka_unit_test(test_user_workspace),
      cmocka_unit_test(test_pdl_chain),
      cmocka_unit_test(test_q_fused),
      cmocka_unit_test(test_prep_fused),
      cmocka_unit_test(test_causal_order),
      cmocka_unit_test(test_v_auto),
      cmocka_unit_test(test_single_flight_threads),
      cmocka_unit_test(test_second_process_all_disk_hits),
  };
  return cmocka_run_group_tests(tests, setup_gpu, NULL);
}
