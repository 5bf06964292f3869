/*
 * test_gpu_faults.c -- faults at the GPU boundary (issue 6).  The GPU
 * tests skip() without a usable CUDA device; the first test runs anywhere
 * (NVRTC only).
 *
 *  - Non-finite inputs (docs/api.md, "Non-finite inputs"): NaN or Inf in
 *    the Q, K or V of ONE (batch, kv head) must not hang and must not write
 *    outside the output and LSE (guard zones around both stay intact); the
 *    output and LSE of every (batch, query head) that does not read that
 *    kv head are bit for bit those of a clean run on the same data; and a
 *    clean run after the poisoned one is bit for bit the first clean run
 *    (no poison survives in a context's workspace).  Every family and
 *    accumulation mode, head dims 64 and 128, causal both ways, GQA.
 *  - Padding never contributes: NaN in the stride gaps and the rows past
 *    seq_kv of padded views gives bit for bit the output of zeros there,
 *    and the gaps of a padded output are never written.
 *  - A cached image the driver rejects (one that passes every cache check:
 *    right checksum, a real cubin for the right SM, or PTX whose .target is
 *    right): the call still returns the right answer, driver_rejects is
 *    counted, the row is replaced by a good one and the next process loads
 *    it.  Two substitutes: another kernel's real cubin (the name lookup
 *    fails) and PTX the driver's JIT refuses.
 *
 * A kernel that does not finish within WATCHDOG_S seconds ends the test
 * binary with a message (a hang is a failure, not a timeout of ctest).
 */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "test_cache_util.h"
#include "testutil.h"

#define WATCHDOG_S 60
#define GUARD_BYTES 65536
#define GUARD_FILL 0xA5

/* ------------------------------------------------------------ watchdog */

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_gpu_faults: a kernel did not finish within "
                            "the watchdog time: a hang\n";
  if (write(2, msg, sizeof msg - 1) < 0) {
  }
  _exit(3);
}

static void sync_or_die(const sj_cuda_api *cu) {
  alarm(WATCHDOG_S);
  const CUresult r = cu->CtxSynchronize();
  alarm(0);
  if (r != CUDA_SUCCESS) {
    char err[256];
    fail_msg("cuCtxSynchronize: %s (a fault in a kernel?)",
             sj_cuda_error_text(r, err, sizeof err));
  }
}

/* -------------------------------------------------------- host numbers */

static uint16_t to16(sj_dtype dt, float f) {
  return dt == SJ_DTYPE_BF16 ? tu_f32_to_bf16(f) : tu_f32_to_f16(f);
}

static uint16_t nan16(sj_dtype dt) {
  return dt == SJ_DTYPE_BF16 ? 0x7fc0u : 0x7e00u;
}
static uint16_t pinf16(sj_dtype dt) {
  return dt == SJ_DTYPE_BF16 ? 0x7f80u : 0x7c00u;
}
static uint16_t ninf16(sj_dtype dt) {
  return dt == SJ_DTYPE_BF16 ? 0xff80u : 0xfc00u;
}

/* ------------------------------------------------------ device buffers */

/* A device buffer with GUARD_BYTES of GUARD_FILL on both sides. */
typedef struct gbuf {
  CUdeviceptr base, p;
  size_t bytes;
} gbuf;

static void galloc(const sj_cuda_api *cu, gbuf *b, size_t bytes) {
  b->bytes = bytes;
  assert_int_equal(cu->MemAlloc(&b->base, bytes + 2 * GUARD_BYTES),
                   CUDA_SUCCESS);
  b->p = b->base + GUARD_BYTES;
  assert_int_equal(cu->MemsetD8(b->base, GUARD_FILL, bytes + 2 * GUARD_BYTES),
                   CUDA_SUCCESS);
}

static void gfill(const sj_cuda_api *cu, gbuf *b) {
  assert_int_equal(
      cu->MemsetD8(b->base, GUARD_FILL, b->bytes + 2 * GUARD_BYTES),
      CUDA_SUCCESS);
}

/* 1 when both guard zones still hold GUARD_FILL. */
static int guards_intact(const sj_cuda_api *cu, const gbuf *b) {
  uint8_t *h = malloc(GUARD_BYTES);
  assert_non_null(h);
  int ok = 1;
  for (int side = 0; side < 2 && ok; side++) {
    const CUdeviceptr at = side ? b->p + b->bytes : b->base;
    assert_int_equal(cu->MemcpyDtoH(h, at, GUARD_BYTES), CUDA_SUCCESS);
    for (size_t i = 0; i < GUARD_BYTES; i++)
      if (h[i] != GUARD_FILL) {
        print_message("guard %s the buffer overwritten at byte %zu\n",
                      side ? "after" : "before", i);
        ok = 0;
        break;
      }
  }
  free(h);
  return ok;
}

static void gfree(const sj_cuda_api *cu, gbuf *b) {
  if (b->base)
    cu->MemFree(b->base);
  b->base = b->p = 0;
}

static char g_cache_dir[512];

static sj_context *gpu_ctx(void) {
  sj_config cfg;
  sj_config_init(&cfg);
  cfg.cache_dir = g_cache_dir;
  sj_context *ctx = NULL;
  if (sj_context_create(&ctx, &cfg) != SJ_OK)
    fail_msg("context: %s", sj_context_create_error());
  return ctx;
}

/* ================================================== non-finite inputs */

enum { NB = 2, NHQ = 4, NHK = 2, NQ = 200, NK = 333 };
enum { BAD_B = 1, BAD_KVH = 0 }; /* the poisoned (batch, kv head) */
#define GRP (NHQ / NHK)

typedef struct nf_case {
  sj_family fam;
  sj_pv_accum acc;
  int d, causal, smooth_v;
  sj_causal_align align;
  sj_dtype dt;
} nf_case;

typedef enum poison {
  P_MIXED,   /* a NaN in K, +Inf in V, -Inf and NaN in two query heads */
  P_K_INF,   /* all of K +Inf */
  P_V_NAN,   /* V's last row (the tail) NaN */
  P_Q_INF,   /* one channel of a query head +Inf in every row */
  N_POISON
} poison;

static size_t qi(int b, int h, int n, int c, int d) {
  return (((size_t)b * NHQ + (size_t)h) * NQ + (size_t)n) * (size_t)d +
         (size_t)c;
}
static size_t ki(int b, int h, int n, int c, int d) {
  return (((size_t)b * NHK + (size_t)h) * NK + (size_t)n) * (size_t)d +
         (size_t)c;
}

static void apply_poison(poison m, sj_dtype dt, int d, uint16_t *q,
                         uint16_t *k, uint16_t *v) {
  const int h0 = BAD_KVH * GRP, h1 = BAD_KVH * GRP + GRP - 1;
  switch (m) {
  case P_MIXED:
    k[ki(BAD_B, BAD_KVH, 5, 3, d)] = nan16(dt);
    v[ki(BAD_B, BAD_KVH, 100, 7, d)] = pinf16(dt);
    q[qi(BAD_B, h0, 17, 0, d)] = ninf16(dt);
    q[qi(BAD_B, h1, NQ - 1, d - 1, d)] = nan16(dt);
    break;
  case P_K_INF:
    for (int n = 0; n < NK; n++)
      for (int c = 0; c < d; c++)
        k[ki(BAD_B, BAD_KVH, n, c, d)] = pinf16(dt);
    break;
  case P_V_NAN:
    for (int c = 0; c < d; c++)
      v[ki(BAD_B, BAD_KVH, NK - 1, c, d)] = nan16(dt);
    break;
  default:
    for (int n = 0; n < NQ; n++)
      q[qi(BAD_B, h0, n, 0, d)] = pinf16(dt);
    break;
  }
}

typedef struct nf_bufs {
  CUdeviceptr q, k, v;
  gbuf o, lse;
} nf_bufs;

/* One call; returns SJ_OK or SJ_ERR_UNSUPPORTED (then nothing ran). */
static sj_status nf_run(sj_context *ctx, const nf_case *c, nf_bufs *b,
                        uint16_t *o_host, float *lse_host) {
  const sj_cuda_api *cu = ctx->cu;
  gfill(cu, &b->o);
  gfill(cu, &b->lse);
  sj_attention_params p;
  sj_attention_params_init(&p);
  p.dtype = c->dt;
  p.batch = NB;
  p.heads_q = NHQ;
  p.heads_kv = NHK;
  p.seq_q = NQ;
  p.seq_kv = NK;
  p.head_dim = c->d;
  p.causal = c->causal;
  p.causal_align = c->align;
  p.family = c->fam;
  p.pv_accum = c->acc;
  p.smooth_v = c->smooth_v;
  p.q = (const void *)(uintptr_t)b->q;
  p.k = (const void *)(uintptr_t)b->k;
  p.v = (const void *)(uintptr_t)b->v;
  p.o = (void *)(uintptr_t)b->o.p;
  p.lse = (float *)(uintptr_t)b->lse.p;
  const sj_status st = sj_attention(ctx, &p, NULL);
  if (st == SJ_ERR_UNSUPPORTED)
    return st;
  if (st != SJ_OK)
    fail_msg("sj_attention: %s: %s", sj_status_name(st),
             sj_context_last_error(ctx));
  sync_or_die(cu);
  assert_true(guards_intact(cu, &b->o));
  assert_true(guards_intact(cu, &b->lse));
  assert_int_equal(cu->MemcpyDtoH(o_host, b->o.p, b->o.bytes), CUDA_SUCCESS);
  assert_int_equal(cu->MemcpyDtoH(lse_host, b->lse.p, b->lse.bytes),
                   CUDA_SUCCESS);
  return SJ_OK;
}

/* Counts the (batch, head) blocks of o/lse that differ between a and b,
 * separately for the heads that read the bad kv head and the others. */
static int nonfinite16(sj_dtype dt, uint16_t x) {
  const uint16_t e = dt == SJ_DTYPE_BF16 ? 0x7f80u : 0x7c00u;
  return (x & e) == e;
}

static void compare_heads(sj_dtype dt, int d, const uint16_t *oa,
                          const uint16_t *ob,
                          const float *la, const float *lb, int *diff_bad,
                          int *diff_other, int64_t *nonfinite_other) {
  *diff_bad = *diff_other = 0;
  *nonfinite_other = 0;
  const size_t per_head = (size_t)NQ * (size_t)d;
  for (int b = 0; b < NB; b++)
    for (int h = 0; h < NHQ; h++) {
      const int bad = b == BAD_B && h / GRP == BAD_KVH;
      const size_t o0 = ((size_t)b * NHQ + (size_t)h) * per_head;
      const size_t l0 = ((size_t)b * NHQ + (size_t)h) * NQ;
      const int differ = memcmp(oa + o0, ob + o0, per_head * 2) != 0 ||
                         memcmp(la + l0, lb + l0, (size_t)NQ * 4) != 0;
      if (bad)
        *diff_bad += differ;
      else
        *diff_other += differ;
      if (!bad)
        for (size_t i = 0; i < per_head; i++)
          *nonfinite_other += nonfinite16(dt, ob[o0 + i]);
    }
}

static int run_nf_config(sj_context *ctx, const nf_case *c, uint64_t seed) {
  const sj_cuda_api *cu = ctx->cu;
  const int d = c->d;
  const size_t nq = (size_t)NB * NHQ * NQ * (size_t)d,
               nk = (size_t)NB * NHK * NK * (size_t)d,
               nl = (size_t)NB * NHQ * NQ;
  uint16_t *q = malloc(nq * 2), *k = malloc(nk * 2), *v = malloc(nk * 2);
  uint16_t *pq = malloc(nq * 2), *pk = malloc(nk * 2), *pv = malloc(nk * 2);
  uint16_t *o_clean = malloc(nq * 2), *o_bad = malloc(nq * 2),
           *o_again = malloc(nq * 2);
  float *l_clean = malloc(nl * 4), *l_bad = malloc(nl * 4),
        *l_again = malloc(nl * 4);
  assert_true(q && k && v && pq && pk && pv && o_clean && o_bad && o_again &&
              l_clean && l_bad && l_again);
  for (size_t i = 0; i < nq; i++)
    q[i] = to16(c->dt, (float)tu_rand_normal(&seed));
  for (size_t i = 0; i < nk; i++) {
    k[i] = to16(c->dt, (float)tu_rand_normal(&seed) + 2.0f);
    v[i] = to16(c->dt, (float)tu_rand_normal(&seed));
  }
  nf_bufs b;
  memset(&b, 0, sizeof b);
  assert_int_equal(cu->MemAlloc(&b.q, nq * 2), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&b.k, nk * 2), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&b.v, nk * 2), CUDA_SUCCESS);
  galloc(cu, &b.o, nq * 2);
  galloc(cu, &b.lse, nl * 4);
  cu->MemcpyHtoD(b.q, q, nq * 2);
  cu->MemcpyHtoD(b.k, k, nk * 2);
  cu->MemcpyHtoD(b.v, v, nk * 2);
  int ran = 0;
  if (nf_run(ctx, c, &b, o_clean, l_clean) == SJ_OK) {
    ran = 1;
    /* the clean run is clean: every row sees at least one key */
    for (size_t i = 0; i < nq; i++)
      if (nonfinite16(c->dt, o_clean[i]))
        fail_msg("clean run: non-finite output at %zu", i);
    for (size_t i = 0; i < nl; i++)
      if (!isfinite(l_clean[i]))
        fail_msg("clean run: non-finite LSE at %zu", i);
    for (int m = 0; m < N_POISON; m++) {
      memcpy(pq, q, nq * 2);
      memcpy(pk, k, nk * 2);
      memcpy(pv, v, nk * 2);
      apply_poison((poison)m, c->dt, d, pq, pk, pv);
      cu->MemcpyHtoD(b.q, pq, nq * 2);
      cu->MemcpyHtoD(b.k, pk, nk * 2);
      cu->MemcpyHtoD(b.v, pv, nk * 2);
      assert_int_equal(nf_run(ctx, c, &b, o_bad, l_bad), SJ_OK);
      int diff_bad, diff_other;
      int64_t nonfinite_other;
      compare_heads(c->dt, d, o_clean, o_bad, l_clean, l_bad, &diff_bad, &diff_other,
                    &nonfinite_other);
      if (diff_other)
        fail_msg("poison %d (fam %d acc %d d %d dt %d causal %d/%d sv %d): "
                 "%d clean (batch, head) outputs changed",
                 m, (int)c->fam, (int)c->acc, d, (int)c->dt, c->causal,
                 (int)c->align, c->smooth_v, diff_other);
      assert_int_equal(nonfinite_other, 0);
      /* clean data again: the same bits as the first clean run */
      cu->MemcpyHtoD(b.q, q, nq * 2);
      cu->MemcpyHtoD(b.k, k, nk * 2);
      cu->MemcpyHtoD(b.v, v, nk * 2);
      assert_int_equal(nf_run(ctx, c, &b, o_again, l_again), SJ_OK);
      if (memcmp(o_clean, o_again, nq * 2) || memcmp(l_clean, l_again, nl * 4))
        fail_msg("poison %d (fam %d acc %d d %d): a clean run after it "
                 "differs from the first clean run",
                 m, (int)c->fam, (int)c->acc, d);
    }
  }
  cu->MemFree(b.q);
  cu->MemFree(b.k);
  cu->MemFree(b.v);
  gfree(cu, &b.o);
  gfree(cu, &b.lse);
  free(q);
  free(k);
  free(v);
  free(pq);
  free(pk);
  free(pv);
  free(o_clean);
  free(o_bad);
  free(o_again);
  free(l_clean);
  free(l_bad);
  free(l_again);
  return ran;
}

static void test_nonfinite_confined(void **state) {
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
               {SJ_FAMILY_WGMMA, SJ_ACCUM_FP32_FP32},
               {SJ_FAMILY_WGMMA, SJ_ACCUM_FP32_FP32_SPLITV},
               {SJ_FAMILY_WGMMA, SJ_ACCUM_PV16},
               {SJ_FAMILY_WGMMA, SJ_ACCUM_PVI8},
               {SJ_FAMILY_WGMMA, SJ_ACCUM_PVI8_SPLITV}};
  sj_context *ctx = gpu_ctx();
  assert_int_equal(ctx->cu->CtxPushCurrent(ctx->cuctx), CUDA_SUCCESS);
  int ran = 0, idx = 0;
  for (size_t m = 0; m < sizeof modes / sizeof *modes; m++)
    for (int d = 64; d <= 128; d += 64)
      for (int causal = 0; causal <= 1; causal++, idx++) {
        nf_case c;
        memset(&c, 0, sizeof c);
        c.fam = modes[m].fam;
        c.acc = modes[m].acc;
        c.d = d;
        c.causal = causal;
        c.align = idx % 4 == 3 ? SJ_CAUSAL_BOTTOM_RIGHT : SJ_CAUSAL_TOP_LEFT;
        c.dt = idx % 2 ? SJ_DTYPE_BF16 : SJ_DTYPE_FP16;
        c.smooth_v = c.fam != SJ_FAMILY_FP16PV && c.acc != SJ_ACCUM_FP32_FP16 &&
                             idx % 3 == 0
                         ? 1
                         : -1;
        ran += run_nf_config(ctx, &c, 4242 + (uint64_t)idx);
      }
  print_message("%d configurations x %d poisons ran (others unsupported "
                "here)\n",
                ran, (int)N_POISON);
  assert_true(ran >= 4); /* at least one family on any supported GPU */
  CUcontext dummy;
  ctx->cu->CtxPopCurrent(&dummy);
  sj_context_destroy(ctx);
}

/* ======================================================== padded views */

/* [b][h][n][c] with padded strides; the padding holds `pad` values. */
typedef struct pview {
  int64_t sb, sh, sn, rows; /* rows per head allocated (>= n) */
  size_t elems;
} pview;

static void pview_init(pview *v, int heads, int n, int d) {
  v->sn = d + 8;
  v->rows = n + 13;
  v->sh = v->rows * v->sn;
  v->sb = heads * v->sh + 64;
  v->elems = (size_t)(NB * v->sb);
}

static size_t pv_at(const pview *v, int b, int h, int n, int c) {
  return (size_t)(b * v->sb + h * v->sh + n * v->sn + c);
}

static void fill_padded(const pview *v, uint16_t *dst, int heads, int n,
                        int d, sj_dtype dt, uint16_t pad, uint64_t seed,
                        float bias) {
  for (size_t i = 0; i < v->elems; i++)
    dst[i] = pad;
  for (int b = 0; b < NB; b++)
    for (int h = 0; h < heads; h++)
      for (int r = 0; r < n; r++)
        for (int c = 0; c < d; c++)
          dst[pv_at(v, b, h, r, c)] =
              to16(dt, (float)tu_rand_normal(&seed) + bias);
}

static void test_padding_never_read(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  sj_context *ctx = gpu_ctx();
  const sj_cuda_api *cu = ctx->cu;
  assert_int_equal(cu->CtxPushCurrent(ctx->cuctx), CUDA_SUCCESS);
  int ran = 0;
  for (int fam = SJ_FAMILY_FP16PV; fam <= SJ_FAMILY_WGMMA; fam++)
    for (int d = 64; d <= 128; d += 64) {
      const int nq = 130, nk = 333, causal = d == 128;
      const sj_dtype dt = fam != SJ_FAMILY_FP16PV ? SJ_DTYPE_BF16 : SJ_DTYPE_FP16;
      pview vq, vk, vo;
      pview_init(&vq, NHQ, nq, d);
      pview_init(&vk, NHK, nk, d);
      pview_init(&vo, NHQ, nq, d);
      uint16_t *hq = malloc(vq.elems * 2), *hk = malloc(vk.elems * 2),
               *hv = malloc(vk.elems * 2);
      uint16_t *out[2] = {malloc(vo.elems * 2), malloc(vo.elems * 2)};
      assert_true(hq && hk && hv && out[0] && out[1]);
      CUdeviceptr q, k, v;
      gbuf o;
      assert_int_equal(cu->MemAlloc(&q, vq.elems * 2), CUDA_SUCCESS);
      assert_int_equal(cu->MemAlloc(&k, vk.elems * 2), CUDA_SUCCESS);
      assert_int_equal(cu->MemAlloc(&v, vk.elems * 2), CUDA_SUCCESS);
      galloc(cu, &o, vo.elems * 2);
      sj_status st = SJ_OK;
      for (int run = 0; run < 2 && st == SJ_OK; run++) {
        /* run 0: padding NaN; run 1: padding zero */
        const uint16_t pad = run == 0 ? nan16(dt) : 0;
        fill_padded(&vq, hq, NHQ, nq, d, dt, pad, 11, 0.f);
        fill_padded(&vk, hk, NHK, nk, d, dt, pad, 12, 2.f);
        fill_padded(&vk, hv, NHK, nk, d, dt, pad, 13, 0.f);
        cu->MemcpyHtoD(q, hq, vq.elems * 2);
        cu->MemcpyHtoD(k, hk, vk.elems * 2);
        cu->MemcpyHtoD(v, hv, vk.elems * 2);
        gfill(cu, &o);
        sj_attention_params p;
        sj_attention_params_init(&p);
        p.dtype = dt;
        p.batch = NB;
        p.heads_q = NHQ;
        p.heads_kv = NHK;
        p.seq_q = nq;
        p.seq_kv = nk;
        p.head_dim = d;
        p.causal = causal;
        p.family = (sj_family)fam;
        p.q = (const void *)(uintptr_t)q;
        p.k = (const void *)(uintptr_t)k;
        p.v = (const void *)(uintptr_t)v;
        p.o = (void *)(uintptr_t)o.p;
        p.q_stride = (sj_strides){vq.sb, vq.sh, vq.sn};
        p.k_stride = (sj_strides){vk.sb, vk.sh, vk.sn};
        p.v_stride = (sj_strides){vk.sb, vk.sh, vk.sn};
        p.o_stride = (sj_strides){vo.sb, vo.sh, vo.sn};
        st = sj_attention(ctx, &p, NULL);
        if (st == SJ_ERR_UNSUPPORTED)
          break;
        if (st != SJ_OK)
          fail_msg("sj_attention: %s: %s", sj_status_name(st),
                   sj_context_last_error(ctx));
        sync_or_die(cu);
        assert_true(guards_intact(cu, &o));
        assert_int_equal(cu->MemcpyDtoH(out[run], o.p, vo.elems * 2),
                         CUDA_SUCCESS);
      }
      if (st == SJ_OK) {
        ran++;
        size_t gaps_written = 0, differ = 0;
        for (size_t i = 0; i < vo.elems; i++) {
          const int64_t off = (int64_t)i % vo.sb, h = off / vo.sh,
                        r = (off % vo.sh) / vo.sn, c = (off % vo.sh) % vo.sn;
          const int valid = h < NHQ && r < nq && c < d;
          if (!valid)
            gaps_written += out[0][i] != (GUARD_FILL << 8 | GUARD_FILL) ||
                            out[1][i] != (GUARD_FILL << 8 | GUARD_FILL);
          else
            differ += out[0][i] != out[1][i];
        }
        if (gaps_written || differ)
          fail_msg("family %d d %d: %zu output gap elements written, %zu "
                   "outputs depend on the padding",
                   fam, d, gaps_written, differ);
      }
      cu->MemFree(q);
      cu->MemFree(k);
      cu->MemFree(v);
      gfree(cu, &o);
      free(hq);
      free(hk);
      free(hv);
      free(out[0]);
      free(out[1]);
    }
  print_message("%d padded configurations ran\n", ran);
  assert_true(ran >= 2);
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);
  sj_context_destroy(ctx);
}

/* ============================================ images the driver rejects */

/* The key of the attention kernel sj_attention uses for (fp16, d 64, not
 * causal, default options) on target t with family fam. */
static void attn_key(const sj_target *t, sj_family fam, sj_key *key) {
  sj_plan plan;
  char msg[512];
  if (sj_plan_make(t, fam, SJ_DTYPE_FP16, 64, 0, SJ_QUANT_DEFAULT,
                   SJ_ACCUM_DEFAULT, -1, -1, &plan, msg,
                   sizeof msg) != SJ_OK)
    fail_msg("plan: %s", msg);
  assert_int_equal(plan.n_specs, 4);
  assert_int_equal(plan.specs[3].kind, SJ_KERNEL_ATTN);
  memset(key, 0, sizeof *key);
  if (sj_spec_key(&plan.specs[3], t, key, msg, sizeof msg) != SJ_OK)
    fail_msg("key: %s", msg);
}

#define ATTN_ROW "(kernel_name LIKE 'sj::attn\\_mma<%' ESCAPE '\\' OR kernel_name LIKE 'sj::attn\\_wgmma<%' ESCAPE '\\')"
#define FINALIZE_ROW "kernel_name LIKE 'sj::kv\\_finalize<%' ESCAPE '\\'"

typedef enum substitute {
  SUB_OTHER_KERNEL, /* kv_finalize's real cubin: the name lookup fails */
  SUB_BAD_PTX       /* PTX with the right .target that does not assemble */
} substitute;

/* Replaces the attention row's image with a substitute that passes every
 * cache check (its checksum recomputed); returns the substitute's
 * checksum (16 bytes) and writes its bytes to *img (malloc'ed). */
static void substitute_image(const char *dir, const char *target,
                             substitute s, uint8_t sum[16], void **img,
                             size_t *n) {
  char db[1200];
  tcu_db_path(db, sizeof db, dir);
  assert_int_equal(tcu_sql_int(db, "SELECT count(*) FROM kernels WHERE "
                   ATTN_ROW), 1);
  if (s == SUB_OTHER_KERNEL) {
    *img = tcu_sql_blob(db, "SELECT image FROM kernels WHERE " FINALIZE_ROW,
                        NULL, 0, n);
    assert_non_null(*img);
    assert_true(*n > 64);
    tcu_xxh128(*img, *n, sum);
    assert_int_equal(
        tcu_sql_blobs(db,
                      "UPDATE kernels SET image = ?1, checksum = ?2, "
                      "image_size = length(?1), kind = 'cubin' WHERE " ATTN_ROW,
                      *img, *n, sum, 16),
        0);
  } else {
    const char *sm = strncmp(target, "compute_", 8) == 0 ? target + 8
                                                         : target + 3;
    char *text = malloc(512);
    assert_non_null(text);
    snprintf(text, 512,
             "//\n// not a kernel: the driver's PTX JIT must refuse it\n//\n"
             ".version 8.0\n.target sm_%s\n.address_size 64\n\n"
             ".visible .entry broken(\n{\n  this is not ptx;\n  ret\n",
             sm);
    *img = text;
    *n = strlen(text);
    tcu_xxh128(text, *n, sum);
    assert_int_equal(
        tcu_sql_blobs(db,
                      "UPDATE kernels SET image = ?1, checksum = ?2, "
                      "image_size = length(?1), kind = 'ptx' WHERE " ATTN_ROW,
                      text, *n, sum, 16),
        0);
  }
}

/* The substitute passes the cache: sj_cache_get hands its bytes out. */
static void assert_cache_serves(const char *dir, const sj_target *t,
                                sj_family fam, const void *img, size_t n) {
  sj_key key;
  attn_key(t, fam, &key);
  tcu_log log;
  sj_cache_opts o;
  tcu_opts(&o, dir, &log);
  sj_cache *c = sj_cache_open(&o);
  assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_READWRITE);
  sj_cache_image out;
  memset(&out, 0, sizeof out);
  assert_int_equal(sj_cache_get(c, &key, t->name, &out), SJ_CACHE_HIT);
  assert_int_equal(out.size, n);
  assert_memory_equal(out.data, img, n);
  sj_cache_image_free(&out);
  sj_cache_counters cc;
  sj_cache_get_counters(c, &cc);
  assert_int_equal(cc.corrupt, 0);
  sj_cache_close(c);
  sj_key_free(&key);
}

/* CPU: both substitutes pass every cache check, so only the driver (or the
 * name lookup) can catch them; this is the premise of the GPU test. */
static void test_substitutes_pass_cache_checks(void **state) {
  (void)state;
  int maj, min;
  if (sj_nvrtc_version(&maj, &min) != SJ_OK)
    skip();
  char dir[512];
  assert_int_equal(tu_mkdtemp("subst", dir, sizeof dir), 0);
  sj_config cfg;
  sj_config_init(&cfg);
  cfg.device = SJ_DEVICE_NONE;
  cfg.target = "sm_90a";
  cfg.cache_dir = dir;
  sj_context *ctx = NULL;
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_OK);
  static const int dims[] = {64};
  static const int causal[] = {0};
  static const sj_dtype dts[] = {SJ_DTYPE_FP16};
  sj_warm_request req;
  memset(&req, 0, sizeof req);
  req.head_dims = dims;
  req.n_head_dims = 1;
  req.causal = causal;
  req.n_causal = 1;
  req.dtypes = dts;
  req.n_dtypes = 1;
  sj_warm_result r;
  assert_int_equal(sj_warm(ctx, &req, &r), SJ_OK);
  assert_int_equal(r.total, 4);
  const sj_target t = ctx->target;
  const sj_family fam = ctx->family;
  sj_context_destroy(ctx);
  for (int s = SUB_OTHER_KERNEL; s <= SUB_BAD_PTX; s++) {
    uint8_t sum[16];
    void *img = NULL;
    size_t n = 0;
    substitute_image(dir, t.name, (substitute)s, sum, &img, &n);
    assert_cache_serves(dir, &t, fam, img, n);
    free(img);
  }
  tu_rmrf(dir);
}

/* One attention call on fixed data; the output to host. */
static void small_call(sj_context *ctx, uint16_t *o_host, size_t n_elems) {
  const sj_cuda_api *cu = ctx->cu;
  uint16_t *h = malloc(n_elems * 2);
  assert_non_null(h);
  uint64_t seed = 99;
  for (size_t i = 0; i < n_elems; i++)
    h[i] = to16(SJ_DTYPE_FP16, (float)tu_rand_normal(&seed));
  CUdeviceptr q, o;
  assert_int_equal(cu->MemAlloc(&q, n_elems * 2), CUDA_SUCCESS);
  assert_int_equal(cu->MemAlloc(&o, n_elems * 2), CUDA_SUCCESS);
  cu->MemcpyHtoD(q, h, n_elems * 2);
  cu->MemsetD8(o, 0xff, n_elems * 2);
  sj_attention_params p;
  sj_attention_params_init(&p);
  p.batch = 1;
  p.heads_q = 2;
  p.heads_kv = 2;
  p.seq_q = (int64_t)(n_elems / (2 * 64));
  p.seq_kv = p.seq_q;
  p.head_dim = 64;
  p.q = p.k = p.v = (const void *)(uintptr_t)q;
  p.o = (void *)(uintptr_t)o;
  const sj_status st = sj_attention(ctx, &p, NULL);
  if (st != SJ_OK)
    fail_msg("sj_attention: %s: %s", sj_status_name(st),
             sj_context_last_error(ctx));
  sync_or_die(cu);
  assert_int_equal(cu->MemcpyDtoH(o_host, o, n_elems * 2), CUDA_SUCCESS);
  cu->MemFree(q);
  cu->MemFree(o);
  free(h);
}

static void reject_case(substitute s) {
  char dir[512];
  assert_int_equal(tu_mkdtemp("reject", dir, sizeof dir), 0);
  char db[1200];
  tcu_db_path(db, sizeof db, dir);
  enum { N = 2 * 100 * 64 };
  uint16_t *want = malloc(N * 2), *got = malloc(N * 2);
  assert_true(want && got);
  sj_config cfg;
  sj_config_init(&cfg);
  cfg.cache_dir = dir;
  sj_target t;
  sj_family fam;
  sj_stats st;

  /* 1. a cold call compiles and stores the four kernels */
  sj_context *ctx = NULL;
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_OK);
  assert_int_equal(ctx->cu->CtxPushCurrent(ctx->cuctx), CUDA_SUCCESS);
  small_call(ctx, want, N);
  sj_context_get_stats(ctx, &st);
  assert_int_equal(st.compiles, 4);
  t = ctx->target;
  fam = ctx->family;
  CUcontext dummy;
  ctx->cu->CtxPopCurrent(&dummy);
  sj_context_destroy(ctx);

  /* 2. the attention row now holds a substitute the cache accepts */
  uint8_t sum[16];
  void *img = NULL;
  size_t n = 0;
  substitute_image(dir, t.name, s, sum, &img, &n);
  assert_cache_serves(dir, &t, fam, img, n);

  /* 3. the driver (or the name lookup) refuses it: dropped, recompiled
   * once, the right answer all the same */
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_OK);
  assert_int_equal(ctx->cu->CtxPushCurrent(ctx->cuctx), CUDA_SUCCESS);
  small_call(ctx, got, N);
  assert_memory_equal(want, got, N * 2);
  sj_context_get_stats(ctx, &st);
  print_message("substitute %d: driver_rejects %llu, corrupt %llu, compiles "
                "%llu, disk hits %llu\n",
                (int)s, (unsigned long long)st.driver_rejects,
                (unsigned long long)st.corrupt_entries,
                (unsigned long long)st.compiles,
                (unsigned long long)st.disk_hits);
  assert_int_equal(st.driver_rejects, 1);
  assert_int_equal(st.compiles, 1);
  assert_int_equal(st.disk_hits, 3);
  ctx->cu->CtxPopCurrent(&dummy);
  sj_context_destroy(ctx);

  /* 4. the row was replaced by a good image */
  assert_int_equal(tcu_sql_int(db, "SELECT count(*) FROM kernels"), 4);
  assert_int_equal(tcu_sql_int(db, "SELECT count(*) FROM kernels WHERE "
                   ATTN_ROW " AND kind = 'cubin'"), 1);
  size_t now_n = 0;
  void *now = tcu_sql_blob(db, "SELECT checksum FROM kernels WHERE " ATTN_ROW,
                           NULL, 0, &now_n);
  assert_int_equal(now_n, 16);
  assert_memory_not_equal(now, sum, 16);
  free(now);

  /* 5. and the next process loads everything from disk */
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_OK);
  assert_int_equal(ctx->cu->CtxPushCurrent(ctx->cuctx), CUDA_SUCCESS);
  small_call(ctx, got, N);
  assert_memory_equal(want, got, N * 2);
  sj_context_get_stats(ctx, &st);
  assert_int_equal(st.compiles, 0);
  assert_int_equal(st.disk_hits, 4);
  assert_int_equal(st.driver_rejects, 0);
  ctx->cu->CtxPopCurrent(&dummy);
  sj_context_destroy(ctx);
  free(img);
  free(want);
  free(got);
  tu_rmrf(dir);
}

static void test_driver_rejects_other_kernel(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  reject_case(SUB_OTHER_KERNEL);
}

static void test_driver_rejects_bad_ptx(void **state) {
  (void)state;
  if (!tu_have_gpu())
    skip();
  reject_case(SUB_BAD_PTX);
}

/* test_gpu_faults [WORD]: only the tests whose name contains WORD (so that
 * bench/sanitize_gpu.sh can run the numerical ones under compute-sanitizer
 * without the deliberately rejected images). */
int main(int argc, char **argv) {
  signal(SIGALRM, on_alarm);
  const char *d = getenv("SAGEJIT_CACHE_DIR");
  snprintf(g_cache_dir, sizeof g_cache_dir, "%s",
           d && *d ? d : "/tmp/sjtest-gpu-faults");
  const struct CMUnitTest all[] = {
      cmocka_unit_test(test_substitutes_pass_cache_checks),
      cmocka_unit_test(test_nonfinite_confined),
      cmocka_unit_test(test_padding_never_read),
      cmocka_unit_test(test_driver_rejects_other_kernel),
      cmocka_unit_test(test_driver_rejects_bad_ptx),
  };
  struct CMUnitTest tests[sizeof all / sizeof *all];
  size_t n = 0;
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    if (argc < 2 || strstr(all[i].name, argv[1]))
      tests[n++] = all[i];
  if (n == 0) {
    fprintf(stderr, "test_gpu_faults: no test matches '%s'\n", argv[1]);
    return 2;
  }
  return _cmocka_run_group_tests("test_gpu_faults", tests, n, NULL, NULL);
}
