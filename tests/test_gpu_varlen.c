/*
 * test_gpu_varlen.c -- sj_attention_varlen against the FP32 reference run on
 * each sequence alone (dense sj_attention_reference on views into the
 * packed tensors).  Every test skip()s without a GPU.
 *
 * Each sequence gets its own K bias, so a K mean shared across the batch
 * would leave large quantization errors and a wrong LSE correction; lengths
 * include 0, 1, tile-unaligned and very unequal ones (1 and 32768).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"
#include "testutil.h"

typedef struct vcase {
  const int *lens_q, *lens_kv;
  int n;
  int hq, hk, d, causal;
  sj_causal_align align;
  sj_family fam;
  sj_quant_gran qg;
  sj_pv_accum acc;
  sj_dtype dt;
  int host_cu; /* pass host copies of the prefix sums */
  /* V of the (sequence, kv head) pairs with s + h odd gets outlier tokens
   * (one in 97 times 40), so that pvi8+splitv takes split V for them */
  int v_outliers;
} vcase;

typedef struct result {
  double rel_l2, cosine, lse_err;
  long long nonfinite, lse_mismatch;
} result;

static result run_varlen(sj_context *ctx, const vcase *vc, uint64_t seed) {
  const sj_cuda_api *cu = ctx->cu;
  const int B = vc->n, HQ = vc->hq, HK = vc->hk, D = vc->d;
  int32_t *cq = calloc((size_t)B + 1, 4), *ck = calloc((size_t)B + 1, 4);
  int maxq = 0, maxk = 0;
  for (int i = 0; i < B; i++) {
    cq[i + 1] = cq[i] + vc->lens_q[i];
    ck[i + 1] = ck[i] + vc->lens_kv[i];
    if (vc->lens_q[i] > maxq)
      maxq = vc->lens_q[i];
    if (vc->lens_kv[i] > maxk)
      maxk = vc->lens_kv[i];
  }
  const int TQ = cq[B], TK = ck[B];
  const size_t nq = (size_t)TQ * HQ * D, nk = (size_t)TK * HK * D;
  uint16_t *q = malloc((nq ? nq : 1) * 2), *k = malloc((nk ? nk : 1) * 2),
           *v = malloc((nk ? nk : 1) * 2), *o = malloc((nq ? nq : 1) * 2);
  float *ref = malloc((nq ? nq : 1) * 4), *lse = malloc(((size_t)HQ * TQ + 1) * 4),
        *lse_ref = malloc(((size_t)HQ * TQ + 1) * 4);
  assert_non_null(q);
  assert_non_null(ref);
  const int bf = vc->dt == SJ_DTYPE_BF16;
  for (size_t i = 0; i < nq; i++) {
    const float x = (float)tu_rand_normal(&seed);
    q[i] = bf ? tu_f32_to_bf16(x) : tu_f32_to_f16(x);
  }
  for (int s = 0; s < B; s++) {
    /* a bias per sequence and channel */
    float bias[256];
    for (int c = 0; c < D; c++)
      bias[c] = (float)(3.0 * tu_rand_normal(&seed) + (s % 3) * 2.0);
    for (int t = ck[s]; t < ck[s + 1]; t++)
      for (int h = 0; h < HK; h++)
        for (int c = 0; c < D; c++) {
          const size_t i = ((size_t)t * HK + h) * D + c;
          const float kx = (float)tu_rand_normal(&seed) + bias[c];
          float vx = (float)tu_rand_normal(&seed);
          if (vc->v_outliers && (s + h) % 2 == 1 && (t - ck[s]) % 97 == 5)
            vx *= 40.f;
          k[i] = bf ? tu_f32_to_bf16(kx) : tu_f32_to_f16(kx);
          v[i] = bf ? tu_f32_to_bf16(vx) : tu_f32_to_f16(vx);
        }
  }

  assert_int_equal(cu->CtxPushCurrent(ctx->cuctx), CUDA_SUCCESS);
  CUdeviceptr dq, dk, dv, dout, dref, dlse, dlse_ref, dcq, dck;
  assert_int_equal(cu->MemAlloc(&dq, nq * 2 + 64), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&dk, nk * 2 + 64), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&dv, nk * 2 + 64), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&dout, nq * 2 + 64), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&dref, nq * 4 + 64), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&dlse, (size_t)HQ * TQ * 4 + 64), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&dlse_ref, (size_t)HQ * TQ * 4 + 64), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&dcq, ((size_t)B + 1) * 4), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&dck, ((size_t)B + 1) * 4), CUDA_SUCCESS);
  if (nq)
    cu->MemcpyHtoD(dq, q, nq * 2);
  if (nk) {
    cu->MemcpyHtoD(dk, k, nk * 2);
    cu->MemcpyHtoD(dv, v, nk * 2);
  }
  cu->MemcpyHtoD(dcq, cq, ((size_t)B + 1) * 4);
  cu->MemcpyHtoD(dck, ck, ((size_t)B + 1) * 4);
  cu->MemsetD8(dout, 0xff, nq * 2 + 64); /* NaN poison */
  cu->MemsetD8(dlse, 0xff, (size_t)HQ * TQ * 4 + 64);

  sj_varlen_params p;
  sj_varlen_params_init(&p);
  p.dtype = vc->dt;
  p.batch = B;
  p.heads_q = HQ;
  p.heads_kv = HK;
  p.head_dim = D;
  p.total_q = TQ;
  p.total_kv = TK;
  p.max_seqlen_q = maxq;
  p.max_seqlen_kv = maxk;
  p.cu_seqlens_q = (const int32_t *)(uintptr_t)dcq;
  p.cu_seqlens_kv = (const int32_t *)(uintptr_t)dck;
  if (vc->host_cu) {
    p.cu_seqlens_q_host = cq;
    p.cu_seqlens_kv_host = ck;
  }
  p.q = (void *)(uintptr_t)dq;
  p.k = (void *)(uintptr_t)dk;
  p.v = (void *)(uintptr_t)dv;
  p.o = (void *)(uintptr_t)dout;
  p.causal = vc->causal;
  p.causal_align = vc->align;
  p.lse = (float *)(uintptr_t)dlse;
  p.family = vc->fam;
  p.qk_quant = vc->qg;
  p.pv_accum = vc->acc;
  sj_status st = sj_attention_varlen(ctx, &p, NULL);
  if (st != SJ_OK)
    fail_msg("varlen: %s: %s", sj_status_name(st), sj_context_last_error(ctx));

  /* the reference, one sequence at a time */
  for (int s = 0; s < B; s++) {
    const int lq = vc->lens_q[s], lk = vc->lens_kv[s];
    if (!lq || !lk)
      continue;
    sj_attention_params r;
    sj_attention_params_init(&r);
    r.dtype = vc->dt;
    r.batch = 1;
    r.heads_q = HQ;
    r.heads_kv = HK;
    r.seq_q = lq;
    r.seq_kv = lk;
    r.head_dim = D;
    r.q = (void *)(uintptr_t)(dq + (size_t)cq[s] * HQ * D * 2);
    r.k = (void *)(uintptr_t)(dk + (size_t)ck[s] * HK * D * 2);
    r.v = (void *)(uintptr_t)(dv + (size_t)ck[s] * HK * D * 2);
    r.q_stride = (sj_strides){(int64_t)lq * HQ * D, D, (int64_t)HQ * D};
    r.k_stride = (sj_strides){(int64_t)lk * HK * D, D, (int64_t)HK * D};
    r.v_stride = r.k_stride;
    r.causal = vc->causal;
    r.causal_align = vc->align;
    float *lse_scratch = NULL;
    CUdeviceptr dl;
    assert_int_equal(cu->MemAlloc(&dl, (size_t)HQ * lq * 4), CUDA_SUCCESS);
    r.lse = (float *)(uintptr_t)dl;
    CUdeviceptr dr;
    assert_int_equal(cu->MemAlloc(&dr, (size_t)HQ * lq * D * 4), CUDA_SUCCESS);
    st = sj_attention_reference(ctx, &r, (float *)(uintptr_t)dr, NULL);
    if (st != SJ_OK)
      fail_msg("reference: %s", sj_context_last_error(ctx));
    cu->CtxSynchronize();
    /* reference is [1][HQ][lq][D]; scatter into packed [token][h][d] */
    float *tmp = malloc((size_t)HQ * lq * D * 4);
    lse_scratch = malloc((size_t)HQ * lq * 4);
    cu->MemcpyDtoH(tmp, dr, (size_t)HQ * lq * D * 4);
    cu->MemcpyDtoH(lse_scratch, dl, (size_t)HQ * lq * 4);
    for (int h = 0; h < HQ; h++)
      for (int t = 0; t < lq; t++) {
        memcpy(ref + ((size_t)(cq[s] + t) * HQ + h) * D,
               tmp + ((size_t)h * lq + t) * D, (size_t)D * 4);
        lse_ref[(size_t)h * TQ + cq[s] + t] = lse_scratch[(size_t)h * lq + t];
      }
    free(tmp);
    free(lse_scratch);
    cu->MemFree(dr);
    cu->MemFree(dl);
  }
  /* sequences without keys: zero output, LSE -inf */
  for (int s = 0; s < B; s++)
    if (vc->lens_q[s] && !vc->lens_kv[s])
      for (int t = cq[s]; t < cq[s + 1]; t++)
        for (int h = 0; h < HQ; h++) {
          memset(ref + ((size_t)t * HQ + h) * D, 0, (size_t)D * 4);
          lse_ref[(size_t)h * TQ + t] = -INFINITY;
        }
  assert_int_equal(cu->CtxSynchronize(), CUDA_SUCCESS);
  if (nq)
    cu->MemcpyDtoH(o, dout, nq * 2);
  if (TQ)
    cu->MemcpyDtoH(lse, dlse, (size_t)HQ * TQ * 4);
  /* nothing past the output was written */
  uint16_t tail[32];
  cu->MemcpyDtoH(tail, dout + nq * 2, 64);
  for (int i = 0; i < 32; i++)
    assert_int_equal(tail[i], 0xffff);

  result r = {0};
  double num = 0, den = 0, dot = 0, on = 0;
  for (size_t i = 0; i < nq; i++) {
    const double x = bf ? tu_bf16_to_f32(o[i]) : tu_f16_to_f32(o[i]), y = ref[i];
    if (!isfinite(x)) {
      r.nonfinite++;
      continue;
    }
    num += (x - y) * (x - y);
    den += y * y;
    dot += x * y;
    on += x * x;
  }
  r.rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
  r.cosine = on > 0 && den > 0 ? dot / sqrt(on * den) : 1.0;
  for (size_t i = 0; i < (size_t)HQ * TQ; i++) {
    const int fa = isfinite(lse[i]), fb = isfinite(lse_ref[i]);
    if (fa != fb) {
      if (!(isinf(lse[i]) && lse[i] < 0 && isinf(lse_ref[i]) && lse_ref[i] < 0))
        r.lse_mismatch++;
    } else if (fa && fabs((double)lse[i] - lse_ref[i]) > r.lse_err) {
      r.lse_err = fabs((double)lse[i] - lse_ref[i]);
    }
  }
  cu->MemFree(dq);
  cu->MemFree(dk);
  cu->MemFree(dv);
  cu->MemFree(dout);
  cu->MemFree(dref);
  cu->MemFree(dlse);
  cu->MemFree(dlse_ref);
  cu->MemFree(dcq);
  cu->MemFree(dck);
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);
  free(q);
  free(k);
  free(v);
  free(o);
  free(ref);
  free(lse);
  free(lse_ref);
  free(cq);
  free(ck);
  return r;
}

static sj_context *gpu_ctx(void) {
  sj_config cfg;
  sj_config_init(&cfg);
  sj_context *ctx = NULL;
  if (sj_context_create(&ctx, &cfg) != SJ_OK)
    fail_msg("context: %s", sj_context_create_error());
  return ctx;
}

static void test_varlen_matrix(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  static const int q1[] = {3, 70, 129, 64, 200}, k1[] = {3, 70, 129, 64, 200};
  static const int q2[] = {0, 1, 17, 0, 1000}, k2[] = {5, 1, 17, 0, 1000};
  static const int q3[] = {1, 32768}, k3[] = {1, 32768};
  static const int q4[] = {40, 300, 1}, k4[] = {100, 77, 513};
  static const struct {
    const int *q, *k;
    int n;
  } sets[] = {{q1, k1, 5}, {q2, k2, 5}, {q3, k3, 2}, {q4, k4, 3}};
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
               {SJ_FAMILY_WGMMA, SJ_ACCUM_FP32_FP32},
               {SJ_FAMILY_WGMMA, SJ_ACCUM_FP32_FP32_SPLITV},
               {SJ_FAMILY_WGMMA, SJ_ACCUM_PV16},
               {SJ_FAMILY_WGMMA, SJ_ACCUM_PVI8},
               {SJ_FAMILY_WGMMA, SJ_ACCUM_PVI8_SPLITV},
               {SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV}};
  static const int dims[] = {64, 128, 32, 96, 256};
  static const int wg_dims[] = {128, 64, 256};
  sj_context *ctx = gpu_ctx();
  const int have_wgmma = !strcmp(ctx->target.name, "sm_90a");
  int idx = 0, failures = 0;
  for (size_t m = 0; m < sizeof modes / sizeof *modes; m++)
    for (int qg = 1; qg <= 3; qg++)
      for (size_t si = 0; si < sizeof sets / sizeof *sets; si++, idx++) {
        if (si == 2 && qg != 3)
          continue; /* the 32768-token set once per mode bounds the time */
        const int wg = modes[m].fam == SJ_FAMILY_WGMMA;
        if (wg && !have_wgmma)
          continue; /* sm_90a only */
        vcase vc;
        memset(&vc, 0, sizeof vc);
        vc.lens_q = sets[si].q;
        vc.lens_kv = sets[si].k;
        vc.n = sets[si].n;
        vc.hq = idx % 2 ? 4 : 2;
        vc.hk = idx % 4 == 1 ? 1 : 2;
        if (vc.hq % vc.hk)
          vc.hk = 1;
        /* the 32768 set only at the smaller head dims, to bound the time */
        vc.d = si == 2 ? (idx % 2 ? 64 : 128) : wg ? wg_dims[idx % 3] : dims[idx % 5];
        vc.causal = (idx / 2) % 2;
        vc.align = (idx / 3) % 2 ? SJ_CAUSAL_BOTTOM_RIGHT : SJ_CAUSAL_TOP_LEFT;
        vc.fam = modes[m].fam;
        vc.acc = modes[m].acc;
        vc.qg = (sj_quant_gran)qg;
        vc.dt = (idx / 5) % 2 ? SJ_DTYPE_BF16 : SJ_DTYPE_FP16;
        vc.host_cu = idx % 2;
        /* FP8PV's pvi8+splitv: two granularities on V with outlier heads,
         * which take its split V body (split V's gate) */
        vc.v_outliers = vc.fam == SJ_FAMILY_FP8PV && vc.acc == SJ_ACCUM_PVI8_SPLITV && qg != 2;
        result r = run_varlen(ctx, &vc, 500 + (uint64_t)idx);
        const int f8 = vc.fam != SJ_FAMILY_FP16PV && vc.acc != SJ_ACCUM_PV16;
        /* pvi8+splitv takes pvi8 on this Gaussian V (an empty sequence
         * takes split V, and has no output) */
        const double gate = vc.v_outliers ? 3.5e-2
                            : vc.acc == SJ_ACCUM_PVI8 || vc.acc == SJ_ACCUM_PVI8_SPLITV
                                ? 2.5e-2
                            : vc.acc == SJ_ACCUM_FP32_FP32_SPLITV ? 3.5e-2
                            : f8                                  ? 5e-2
                                                                  : 1.5e-2;
        const double cgate = f8 ? 0.999 : 0.9998;
        const int ok = r.rel_l2 <= gate && r.cosine >= cgate && r.nonfinite == 0 &&
                       r.lse_mismatch == 0 && r.lse_err < 5e-2;
        failures += !ok;
        print_message("%s fam%d acc%d q%d set%zu d%d h%d/%d causal%d/%d dt%d "
                      "host%d%s: rel_l2 %.4g cos %.6f lse %.3g nonfinite %lld "
                      "lse_mismatch %lld\n",
                      ok ? "ok  " : "FAIL", (int)vc.fam, (int)vc.acc, qg, si,
                      vc.d, vc.hq, vc.hk, vc.causal, (int)vc.align, (int)vc.dt,
                      vc.host_cu, vc.v_outliers ? " v-outliers" : "", r.rel_l2,
                      r.cosine, r.lse_err, r.nonfinite, r.lse_mismatch);
      }
  sj_context_destroy(ctx);
  assert_int_equal(failures, 0);
}

/* Device prefix sums that are wrong are caught by the host check (the
 * library reads them back) with a clear status. */
static void test_varlen_device_validation(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  sj_context *ctx = gpu_ctx();
  const sj_cuda_api *cu = ctx->cu;
  cu->CtxPushCurrent(ctx->cuctx);
  CUdeviceptr buf, dcq;
  cu->MemAlloc(&buf, 1 << 20);
  cu->MemAlloc(&dcq, 64);
  const int32_t bad[] = {0, 10, 5}; /* not monotone */
  cu->MemcpyHtoD(dcq, bad, sizeof bad);
  sj_varlen_params p;
  sj_varlen_params_init(&p);
  p.batch = 2;
  p.heads_q = p.heads_kv = 1;
  p.head_dim = 64;
  p.total_q = p.total_kv = 5;
  p.max_seqlen_q = p.max_seqlen_kv = 10;
  p.cu_seqlens_q = p.cu_seqlens_kv = (const int32_t *)(uintptr_t)dcq;
  p.q = p.k = p.v = (void *)(uintptr_t)buf;
  p.o = (void *)(uintptr_t)(buf + (1 << 19));
  assert_int_equal(sj_attention_varlen(ctx, &p, NULL), SJ_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(sj_context_last_error(ctx), "monotone"));
  cu->MemFree(buf);
  cu->MemFree(dcq);
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);
  sj_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_varlen_matrix),
      cmocka_unit_test(test_varlen_device_validation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
