/*
 * selftest.c -- sj_check (accuracy against the FP32 reference on seeded
 * random data) and sj_bench (CUDA-event timings).  They live in the library
 * so that `sagejit check` / `sagejit bench` stay thin clients and an
 * embedding program can run the same self-check at start-up.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ------------------------------------------------------ host conversions */

static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;
  if (exp == 0xffu)
    return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0u));
  const int e = (int)exp - 127 + 15;
  if (e >= 31)
    return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10)
      return (uint16_t)sign;
    const uint32_t m = man | 0x800000u;
    const int shift = 14 - e;
    uint32_t h = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (h & 1u)))
      h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13);
  const uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
    h++;
  return (uint16_t)h;
}

static float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    float f = ldexpf((float)man, -24);
    memcpy(&x, &f, 4);
    x |= sign;
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (man << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static float bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t to16(sj_dtype dt, float f) {
  return dt == SJ_DTYPE_BF16 ? f32_to_bf16(f) : f32_to_f16(f);
}
static float from16(sj_dtype dt, uint16_t h) {
  return dt == SJ_DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}
static uint16_t nan16(sj_dtype dt) {
  return dt == SJ_DTYPE_BF16 ? 0x7fc0u : 0x7e00u;
}

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double rng_normal(uint64_t *s) {
  double u1 = ((double)(rng_next(s) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
  double u2 = (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ------------------------------------------------------------ device mem */

typedef struct dbuf {
  CUdeviceptr p;
  size_t bytes;
} dbuf;

static sj_status dalloc(sj_context *ctx, dbuf *b, size_t bytes) {
  char err[256];
  b->bytes = bytes;
  CUresult r = ctx->cu->MemAlloc(&b->p, bytes ? bytes : 1);
  if (r != CUDA_SUCCESS) {
    b->p = 0;
    return sj_fail(ctx,
                   r == CUDA_ERROR_OUT_OF_MEMORY ? SJ_ERR_OUT_OF_MEMORY
                                                 : SJ_ERR_CUDA,
                   "allocating %zu bytes: %s", bytes,
                   sj_cuda_error_text(r, err, sizeof err));
  }
  return SJ_OK;
}

static void dfree(sj_context *ctx, dbuf *b) {
  if (b->p)
    ctx->cu->MemFree(b->p);
  b->p = 0;
}

static sj_status cu_check(sj_context *ctx, CUresult r, const char *what) {
  char err[256];
  if (r == CUDA_SUCCESS)
    return SJ_OK;
  return sj_fail(ctx, SJ_ERR_CUDA, "%s: %s", what,
                 sj_cuda_error_text(r, err, sizeof err));
}

/* A [batch, heads, seq, D] tensor in host memory with the view's strides. */
typedef struct htensor {
  uint16_t *data;
  size_t elems; /* allocation, including a NaN guard tail */
  int64_t sb, sh, sn;
} htensor;

#define GUARD_ELEMS 256

static void strides_for(sj_layout layout, int pad, int64_t heads, int64_t seq,
                        int64_t d, int64_t *sb, int64_t *sh, int64_t *sn) {
  const int64_t extra = pad ? 8 : 0;
  if (layout == SJ_LAYOUT_NHD) {
    *sh = d;
    *sn = heads * d + extra;
    *sb = seq * *sn + extra;
  } else {
    *sn = d + extra;
    *sh = seq * *sn + extra;
    *sb = heads * *sh + extra;
  }
}

static int ht_init(htensor *t, sj_dtype dt, sj_layout layout, int pad,
                   int64_t b, int64_t h, int64_t n, int64_t d) {
  strides_for(layout, pad, h, n, d, &t->sb, &t->sh, &t->sn);
  t->elems = (size_t)((b - 1) * t->sb + (h - 1) * t->sh + (n - 1) * t->sn + d) +
             GUARD_ELEMS;
  t->data = malloc(t->elems * sizeof *t->data);
  if (!t->data)
    return -1;
  const uint16_t nan = nan16(dt);
  for (size_t i = 0; i < t->elems; i++)
    t->data[i] = nan; /* gaps and the tail stay NaN: reading them shows */
  return 0;
}

static size_t ht_at(const htensor *t, int64_t b, int64_t h, int64_t n,
                    int64_t c) {
  return (size_t)(b * t->sb + h * t->sh + n * t->sn + c);
}

/* ----------------------------------------------------------------- check */

sj_status sj_check(sj_context *ctx, const sj_check_case *cc,
                   sj_check_result *out) {
  if (!ctx || !cc || !out)
    return SJ_ERR_INVALID_ARGUMENT;
  if (!ctx->can_load)
    return sj_fail(ctx, SJ_ERR_NO_DEVICE, "sj_check needs a device");
  const sj_attention_params *in = &cc->params;
  const int64_t B = in->batch, HQ = in->heads_q, HK = in->heads_kv,
                NQ = in->seq_q, NK = in->seq_kv, D = in->head_dim;
  if (B < 1 || HQ < 1 || HK < 1 || NQ < 1 || NK < 1 || D < 1 || D > 1024 ||
      (double)B * (double)HQ * (double)(NQ > NK ? NQ : NK) * (double)D > 1.5e9)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "sj_check: sizes must be >= 1 and a tensor at most 1.5e9 "
                   "elements");
  const sj_dtype dt = in->dtype == SJ_DTYPE_BF16 ? SJ_DTYPE_BF16 : SJ_DTYPE_FP16;
  const sj_layout lay = in->layout == SJ_LAYOUT_NHD ? SJ_LAYOUT_NHD : SJ_LAYOUT_HND;
  memset(out, 0, sizeof *out);

  sj_status st = SJ_OK;
  htensor q = {0}, k = {0}, v = {0}, o = {0};
  float *ref = NULL, *lse = NULL, *lse_ref = NULL;
  dbuf dq = {0}, dk = {0}, dv = {0}, dout = {0}, dref = {0}, dlse = {0},
       dlse_ref = {0};
  const size_t ref_elems = (size_t)(B * HQ * NQ * D);
  const size_t rows = (size_t)(B * HQ * NQ);
  if (ht_init(&q, dt, lay, cc->pad_strides, B, HQ, NQ, D) ||
      ht_init(&k, dt, lay, cc->pad_strides, B, HK, NK, D) ||
      ht_init(&v, dt, lay, cc->pad_strides, B, HK, NK, D) ||
      ht_init(&o, dt, lay, cc->pad_strides, B, HQ, NQ, D) ||
      !(ref = malloc(ref_elems * sizeof *ref)) ||
      !(lse = malloc(rows * sizeof *lse)) ||
      !(lse_ref = malloc(rows * sizeof *lse_ref))) {
    st = sj_fail(ctx, SJ_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  uint64_t seed = cc->seed ? cc->seed : 0x5A6E17ull;
  double *bias = calloc((size_t)(HK * D), sizeof *bias);
  if (!bias) {
    st = sj_fail(ctx, SJ_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  for (int64_t i = 0; i < HK * D; i++)
    bias[i] = cc->k_bias * rng_normal(&seed);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < HQ; h++)
      for (int64_t n = 0; n < NQ; n++)
        for (int64_t c = 0; c < D; c++)
          q.data[ht_at(&q, b, h, n, c)] = to16(dt, (float)rng_normal(&seed));
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < HK; h++)
      for (int64_t n = 0; n < NK; n++)
        for (int64_t c = 0; c < D; c++) {
          k.data[ht_at(&k, b, h, n, c)] =
              to16(dt, (float)(rng_normal(&seed) + bias[h * D + c]));
          v.data[ht_at(&v, b, h, n, c)] = to16(dt, (float)rng_normal(&seed));
        }
  free(bias);

  CUresult r = ctx->cu->CtxPushCurrent(ctx->cuctx);
  if ((st = cu_check(ctx, r, "cuCtxPushCurrent")) != SJ_OK)
    goto done;
  if ((st = dalloc(ctx, &dq, q.elems * 2)) || (st = dalloc(ctx, &dk, k.elems * 2)) ||
      (st = dalloc(ctx, &dv, v.elems * 2)) ||
      (st = dalloc(ctx, &dout, o.elems * 2)) ||
      (st = dalloc(ctx, &dref, ref_elems * 4)) ||
      (st = dalloc(ctx, &dlse, rows * 4)) ||
      (st = dalloc(ctx, &dlse_ref, rows * 4)))
    goto pop;
  if ((st = cu_check(ctx, ctx->cu->MemcpyHtoD(dq.p, q.data, q.elems * 2), "copy q")) ||
      (st = cu_check(ctx, ctx->cu->MemcpyHtoD(dk.p, k.data, k.elems * 2), "copy k")) ||
      (st = cu_check(ctx, ctx->cu->MemcpyHtoD(dv.p, v.data, v.elems * 2), "copy v")) ||
      (st = cu_check(ctx, ctx->cu->MemcpyHtoD(dout.p, o.data, o.elems * 2), "poison o")) ||
      (st = cu_check(ctx, ctx->cu->MemsetD8(dlse.p, 0xff, rows * 4), "poison lse")) ||
      (st = cu_check(ctx, ctx->cu->MemsetD8(dref.p, 0xff, ref_elems * 4), "poison ref")))
    goto pop;

  sj_attention_params p = *in;
  p.dtype = dt;
  p.layout = lay;
  p.q = (void *)(uintptr_t)dq.p;
  p.k = (void *)(uintptr_t)dk.p;
  p.v = (void *)(uintptr_t)dv.p;
  p.o = (void *)(uintptr_t)dout.p;
  p.q_stride = (sj_strides){q.sb, q.sh, q.sn};
  p.k_stride = (sj_strides){k.sb, k.sh, k.sn};
  p.v_stride = (sj_strides){v.sb, v.sh, v.sn};
  p.o_stride = (sj_strides){o.sb, o.sh, o.sn};
  p.workspace = NULL;
  p.workspace_size = 0;
  p.lse = cc->with_lse ? (float *)(uintptr_t)dlse.p : NULL;
  if ((st = sj_attention(ctx, &p, NULL)) != SJ_OK)
    goto pop;
  p.lse = cc->with_lse ? (float *)(uintptr_t)dlse_ref.p : NULL;
  if ((st = sj_attention_reference(ctx, &p, (float *)(uintptr_t)dref.p, NULL)) !=
      SJ_OK)
    goto pop;
  if ((st = cu_check(ctx, ctx->cu->CtxSynchronize(), "running the kernels")) ||
      (st = cu_check(ctx, ctx->cu->MemcpyDtoH(o.data, dout.p, o.elems * 2), "copy o")) ||
      (st = cu_check(ctx, ctx->cu->MemcpyDtoH(ref, dref.p, ref_elems * 4), "copy ref")) ||
      (st = cu_check(ctx, ctx->cu->MemcpyDtoH(lse, dlse.p, rows * 4), "copy lse")) ||
      (st = cu_check(ctx, ctx->cu->MemcpyDtoH(lse_ref, dlse_ref.p, rows * 4), "copy lse ref")))
    goto pop;

  {
    double num = 0, den = 0, dot = 0, on = 0, maxerr = 0;
    int64_t nonfinite = 0;
    size_t ri = 0;
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < HQ; h++)
        for (int64_t n = 0; n < NQ; n++)
          for (int64_t c = 0; c < D; c++, ri++) {
            const double x = from16(dt, o.data[ht_at(&o, b, h, n, c)]);
            const double y = ref[ri];
            if (!isfinite(x)) {
              nonfinite++;
              continue;
            }
            num += (x - y) * (x - y);
            den += y * y;
            dot += x * y;
            on += x * x;
            if (fabs(x - y) > maxerr)
              maxerr = fabs(x - y);
          }
    out->elements = (int64_t)ref_elems;
    out->nonfinite = nonfinite;
    out->rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
    out->cosine = (on > 0 && den > 0) ? dot / sqrt(on * den) : (num == 0 ? 1 : 0);
    out->max_abs_err = maxerr;
    /* A case whose every output is non-finite must not pass by accident. */
    if (nonfinite == (int64_t)ref_elems) {
      out->rel_l2 = INFINITY;
      out->cosine = 0;
    }
    if (cc->with_lse) {
      double lerr = 0;
      int64_t mism = 0;
      for (size_t i = 0; i < rows; i++) {
        const int fa = isfinite(lse[i]), fb = isfinite(lse_ref[i]);
        if (fa != fb) {
          /* both -inf (a row that sees no key) is agreement */
          if (!(isinf(lse[i]) && lse[i] < 0 && isinf(lse_ref[i]) && lse_ref[i] < 0))
            mism++;
          continue;
        }
        if (fa && fabs((double)lse[i] - lse_ref[i]) > lerr)
          lerr = fabs((double)lse[i] - lse_ref[i]);
      }
      out->lse_max_abs_err = lerr;
      out->lse_mismatch = mism;
    }
  }
pop:
  dfree(ctx, &dq);
  dfree(ctx, &dk);
  dfree(ctx, &dv);
  dfree(ctx, &dout);
  dfree(ctx, &dref);
  dfree(ctx, &dlse);
  dfree(ctx, &dlse_ref);
  {
    CUcontext dummy;
    ctx->cu->CtxPopCurrent(&dummy);
  }
done:
  free(q.data);
  free(k.data);
  free(v.data);
  free(o.data);
  free(ref);
  free(lse);
  free(lse_ref);
  return st;
}

/* ----------------------------------------------------------------- bench */

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double flops_of(const sj_attention_params *p) {
  double pairs;
  if (!p->causal) {
    pairs = (double)p->seq_q * (double)p->seq_kv;
  } else {
    const int64_t off =
        p->causal_align == SJ_CAUSAL_BOTTOM_RIGHT ? p->seq_kv - p->seq_q : 0;
    pairs = 0;
    for (int64_t i = 0; i < p->seq_q; i++) {
      int64_t vis = i + off + 1;
      if (vis > p->seq_kv)
        vis = p->seq_kv;
      if (vis > 0)
        pairs += (double)vis;
    }
  }
  return 4.0 * (double)p->batch * (double)p->heads_q * (double)p->head_dim *
         pairs;
}

/* Times `iters` calls of sj_attention_run(parts), each between its own two
 * events; medians.  Back to back (sync_each 0), the host queues every call
 * and its events before waiting once, so each call starts when the previous
 * one ends and its time is GPU time; with sync_each it waits for each call,
 * which then also times the host's launch latency from an idle GPU.  The
 * first kernel of a part is never a programmatic dependent launch
 * (run_call), so back-to-back calls do not overlap each other. */
static sj_status time_parts(sj_context *ctx, const sj_attention_params *p,
                            CUstream s, int parts, int iters, int sync_each,
                            double *ms_out, double *host_us) {
  const int nev = sync_each ? 2 : 2 * iters;
  double *ms = malloc((size_t)iters * sizeof *ms);
  double *hu = malloc((size_t)iters * sizeof *hu);
  CUevent *ev = calloc((size_t)nev, sizeof *ev);
  sj_status st = SJ_OK;
  if (!ms || !hu || !ev)
    st = sj_fail(ctx, SJ_ERR_OUT_OF_MEMORY, "out of memory");
  for (int i = 0; i < nev && st == SJ_OK; i++)
    st = cu_check(ctx, ctx->cu->EventCreate(&ev[i], CU_EVENT_DEFAULT), "event");
  int queued = 0;
  for (int i = 0; i < iters && st == SJ_OK; i++) {
    const CUevent e0 = ev[sync_each ? 0 : 2 * i];
    const CUevent e1 = ev[sync_each ? 1 : 2 * i + 1];
    ctx->cu->EventRecord(e0, s);
    const double h0 = sj_now_ms();
    st = sj_attention_run(ctx, p, s, parts);
    hu[i] = (sj_now_ms() - h0) * 1e3;
    ctx->cu->EventRecord(e1, s);
    if (st != SJ_OK)
      break;
    queued = i + 1;
    if (sync_each) {
      float t = 0;
      st = cu_check(ctx, ctx->cu->EventSynchronize(e1), "timing");
      if (st == SJ_OK)
        st = cu_check(ctx, ctx->cu->EventElapsedTime(&t, e0, e1), "timing");
      ms[i] = t;
    }
  }
  if (!sync_each && queued > 0) {
    /* Wait for what was queued even after a failure: the events must not
     * be destroyed under pending work that records them. */
    const sj_status sst =
        cu_check(ctx, ctx->cu->EventSynchronize(ev[2 * queued - 1]), "timing");
    if (st == SJ_OK)
      st = sst;
    for (int i = 0; i < queued && st == SJ_OK; i++) {
      float t = 0;
      st = cu_check(ctx, ctx->cu->EventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]),
                    "timing");
      ms[i] = t;
    }
  }
  if (st == SJ_OK) {
    *ms_out = median(ms, iters);
    if (host_us)
      *host_us = median(hu, iters);
  }
  for (int i = 0; ev && i < nev; i++)
    if (ev[i])
      ctx->cu->EventDestroy(ev[i]);
  free(ev);
  free(ms);
  free(hu);
  return st;
}

sj_status sj_bench(sj_context *ctx, const sj_bench_case *bc,
                   sj_bench_result *out) {
  if (!ctx || !bc || !out)
    return SJ_ERR_INVALID_ARGUMENT;
  if (!ctx->can_load)
    return sj_fail(ctx, SJ_ERR_NO_DEVICE, "sj_bench needs a device");
  const sj_attention_params *in = &bc->params;
  if (in->batch < 1 || in->heads_q < 1 || in->heads_kv < 1 || in->seq_q < 1 ||
      in->seq_kv < 1 || in->head_dim < 1 || in->head_dim > 1024)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "sj_bench: bad sizes");
  const int warmup = bc->warmup > 0 ? bc->warmup : 5;
  const int iters = bc->iters > 0 ? bc->iters : 20;
  const int sync = bc->sync_each != 0;
  memset(out, 0, sizeof *out);
  const sj_dtype dt = in->dtype == SJ_DTYPE_BF16 ? SJ_DTYPE_BF16 : SJ_DTYPE_FP16;
  const size_t nq = (size_t)(in->batch * in->heads_q * in->seq_q * in->head_dim);
  const size_t nk = (size_t)(in->batch * in->heads_kv * in->seq_kv * in->head_dim);
  sj_status st = SJ_OK;
  dbuf dq = {0}, dk = {0}, dv = {0}, dout = {0};
  CUstream s = NULL;
  /* One random block, tiled over each tensor: timings do not depend on
   * values repeating (every address is distinct), and filling gigabytes
   * from the host RNG would take longer than the benchmark. */
  const size_t blk = (size_t)1 << 22;
  uint16_t *host = malloc(blk * 2);
  if (!host)
    return sj_fail(ctx, SJ_ERR_OUT_OF_MEMORY, "out of host memory");
  if ((st = cu_check(ctx, ctx->cu->CtxPushCurrent(ctx->cuctx), "push")) != SJ_OK) {
    free(host);
    return st;
  }
  uint64_t seed = 0xBE4C4ull;
  if ((st = dalloc(ctx, &dq, nq * 2)) || (st = dalloc(ctx, &dk, nk * 2)) ||
      (st = dalloc(ctx, &dv, nk * 2)) || (st = dalloc(ctx, &dout, nq * 2)))
    goto done;
  for (int t = 0; t < 3 && st == SJ_OK; t++) {
    const size_t n = t == 0 ? nq : nk;
    const CUdeviceptr dst = t == 0 ? dq.p : t == 1 ? dk.p : dv.p;
    for (size_t i = 0; i < blk; i++)
      host[i] = to16(dt, (float)rng_normal(&seed));
    for (size_t at = 0; at < n && st == SJ_OK; at += blk) {
      const size_t len = n - at < blk ? n - at : blk;
      st = cu_check(ctx, ctx->cu->MemcpyHtoD(dst + at * 2, host, len * 2),
                    "copy inputs");
    }
  }
  if (st != SJ_OK)
    goto done;
  if ((st = cu_check(ctx, ctx->cu->StreamCreate(&s, CU_STREAM_NON_BLOCKING),
                     "cuStreamCreate")))
    goto done;
  {
    sj_attention_params p = *in;
    p.dtype = dt;
    p.q = (void *)(uintptr_t)dq.p;
    p.k = (void *)(uintptr_t)dk.p;
    p.v = (void *)(uintptr_t)dv.p;
    p.o = (void *)(uintptr_t)dout.p;
    memset(&p.q_stride, 0, sizeof p.q_stride);
    memset(&p.k_stride, 0, sizeof p.k_stride);
    memset(&p.v_stride, 0, sizeof p.v_stride);
    memset(&p.o_stride, 0, sizeof p.o_stride);
    p.lse = NULL;
    p.workspace = NULL;
    const int all = SJ_PART_PRE | SJ_PART_ATTN;
    for (int i = 0; i < warmup && st == SJ_OK; i++)
      st = sj_attention_run(ctx, &p, s, all);
    if (st == SJ_OK)
      st = cu_check(ctx, ctx->cu->StreamSynchronize(s), "warm-up");
    if (st == SJ_OK)
      st = time_parts(ctx, &p, s, all, iters, sync, &out->e2e_ms,
                      &out->host_us);
    if (st == SJ_OK)
      st = time_parts(ctx, &p, s, SJ_PART_ATTN, iters, sync, &out->attn_ms,
                      NULL);
    if (st == SJ_OK)
      st = time_parts(ctx, &p, s, SJ_PART_PRE, iters, sync, &out->preprocess_ms,
                      NULL);
    if (st == SJ_OK) {
      out->flops = flops_of(&p);
      out->e2e_tops = out->flops / (out->e2e_ms * 1e-3) / 1e12;
      out->attn_tops = out->flops / (out->attn_ms * 1e-3) / 1e12;
    }
  }
done:
  if (s)
    ctx->cu->StreamSynchronize(s);
  dfree(ctx, &dq);
  dfree(ctx, &dk);
  dfree(ctx, &dv);
  dfree(ctx, &dout);
  /* The context's workspace for s is keyed by the stream handle; drop it
   * with the stream so a later stream reusing the handle starts clean. */
  if (s) {
    pthread_mutex_lock(&ctx->ws_lock);
    sj_workspace_forget(ctx, s);
    pthread_mutex_unlock(&ctx->ws_lock);
    ctx->cu->StreamDestroy(s);
  }
  {
    CUcontext dummy;
    ctx->cu->CtxPopCurrent(&dummy);
  }
  free(host);
  return st;
}
