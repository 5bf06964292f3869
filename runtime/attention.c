/*
 * attention.c -- sj_attention: validate, plan, get kernels, lay out the
 * workspace and launch the preprocessing and attention kernels.
 *
 * Nothing is launched until every check has passed and every kernel is
 * loaded, so a failing call never leaves a half-written output.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "sj_abi.h"

#define BLK_Q 128
#define BLK_K 64
#define WS_ALIGN 256

/* ---------------------------------------------------------------- checks */

static int mul_ok(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}
static int add_ok(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

typedef struct view {
  const char *name;
  uintptr_t ptr;
  int64_t size[3]; /* batch, head, seq */
  int64_t stride[3];
  int64_t lo, hi; /* byte range touched: [lo, hi) */
} view;

static sj_status check_view(sj_context *ctx, view *v, int64_t d,
                            int must_be_injective) {
  if (!v->ptr)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "%s is NULL", v->name);
  if (v->ptr % 16)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "%s is not 16-byte aligned (%#lx)", v->name,
                   (unsigned long)v->ptr);
  int64_t extent = d; /* elements from the first to one past the last */
  for (int i = 0; i < 3; i++) {
    if (v->stride[i] < 0)
      return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                     "%s has a negative stride (%lld)", v->name,
                     (long long)v->stride[i]);
    if (v->size[i] > 1 && v->stride[i] % 8)
      return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                     "%s strides must be multiples of 8 elements (16 bytes); "
                     "got %lld", v->name, (long long)v->stride[i]);
    int64_t span;
    if (!mul_ok(v->size[i] - 1, v->stride[i], &span) ||
        !add_ok(extent, span, &extent))
      return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                     "%s: sizes times strides overflow 64 bits", v->name);
  }
  int64_t bytes;
  if (!mul_ok(extent, 2, &bytes) || (uint64_t)bytes > UINTPTR_MAX - v->ptr)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "%s: the view extends past the address space", v->name);
  v->lo = (int64_t)v->ptr;
  v->hi = (int64_t)(v->ptr + (uintptr_t)bytes);
  if (must_be_injective) {
    /* Sort the non-trivial dims by stride; each must clear the span of the
     * dims inside it, or two elements share an address. */
    int idx[3], n = 0;
    for (int i = 0; i < 3; i++)
      if (v->size[i] > 1)
        idx[n++] = i;
    for (int a = 0; a < n; a++)
      for (int b = a + 1; b < n; b++)
        if (v->stride[idx[b]] < v->stride[idx[a]]) {
          int t = idx[a];
          idx[a] = idx[b];
          idx[b] = t;
        }
    int64_t span = d;
    for (int a = 0; a < n; a++) {
      const int i = idx[a];
      if (v->stride[i] < span)
        return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                       "%s strides overlap: two output elements would share "
                       "an address", v->name);
      span = v->stride[i] * (v->size[i] - 1) + span;
    }
  }
  return SJ_OK;
}

static int overlaps(const view *a, const view *b) {
  return a->lo < b->hi && b->lo < a->hi;
}

static void default_strides(const sj_attention_params *p, sj_strides *s,
                            int64_t heads, int64_t seq) {
  if (s->batch || s->head || s->seq)
    return;
  const int64_t d = p->head_dim;
  if (p->layout == SJ_LAYOUT_NHD) {
    s->seq = heads * d;
    s->head = d;
    s->batch = seq * heads * d;
  } else {
    s->seq = d;
    s->head = seq * d;
    s->batch = heads * seq * d;
  }
}

/* The checked, resolved form of a call. */
typedef struct call {
  sj_attention_params p; /* with default strides filled */
  sj_plan plan;
  float sm_scale;
  int causal_offset;
} call;

static sj_status validate(sj_context *ctx, const sj_attention_params *in,
                          call *c, int for_reference) {
  if (!in)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "params is NULL");
  c->p = *in;
  sj_attention_params *p = &c->p;
  if (p->dtype != SJ_DTYPE_FP16 && p->dtype != SJ_DTYPE_BF16)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "unknown dtype %d (SJ_DTYPE_FP16 or SJ_DTYPE_BF16)",
                   (int)p->dtype);
  if (p->layout != SJ_LAYOUT_HND && p->layout != SJ_LAYOUT_NHD)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "unknown layout %d (SJ_LAYOUT_HND or SJ_LAYOUT_NHD)",
                   (int)p->layout);
  if (p->causal != 0 && p->causal != 1)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "causal must be 0 or 1");
  if (p->causal_align != SJ_CAUSAL_TOP_LEFT &&
      p->causal_align != SJ_CAUSAL_BOTTOM_RIGHT)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "unknown causal_align %d",
                   (int)p->causal_align);
  if ((int)p->family < 0 || p->family > SJ_FAMILY_FP8PV)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "unknown family %d",
                   (int)p->family);
  if ((int)p->qk_quant < 0 || p->qk_quant > SJ_QUANT_PER_THREAD)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "unknown qk_quant %d",
                   (int)p->qk_quant);
  if ((int)p->pv_accum < 0 || p->pv_accum > SJ_ACCUM_FP32_FP16)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "unknown pv_accum %d",
                   (int)p->pv_accum);
  if (p->smooth_k < -1 || p->smooth_k > 1 || p->smooth_v < -1 ||
      p->smooth_v > 1)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "smooth_k and smooth_v must be -1, 0 or 1");
  const struct {
    const char *name;
    int64_t v, max;
  } sizes[] = {{"batch", p->batch, 65535},
               {"heads_q", p->heads_q, 65535},
               {"heads_kv", p->heads_kv, 65535},
               {"seq_q", p->seq_q, INT32_MAX - 1024},
               {"seq_kv", p->seq_kv, INT32_MAX - 1024},
               {"head_dim", p->head_dim, 1 << 16}};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    if (sizes[i].v < 1)
      return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "%s must be >= 1 (got %lld)",
                     sizes[i].name, (long long)sizes[i].v);
    if (sizes[i].v > sizes[i].max)
      return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "%s %lld exceeds %lld",
                     sizes[i].name, (long long)sizes[i].v,
                     (long long)sizes[i].max);
  }
  if (p->heads_q % p->heads_kv)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "heads_q (%lld) must be a multiple of heads_kv (%lld)",
                   (long long)p->heads_q, (long long)p->heads_kv);
  if (p->sm_scale != 0.f && !(isfinite(p->sm_scale) && p->sm_scale > 0.f))
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "sm_scale must be a positive finite number (0: default)");
  c->sm_scale = p->sm_scale != 0.f ? p->sm_scale
                                   : (float)(1.0 / sqrt((double)p->head_dim));
  if (p->lse && ((uintptr_t)p->lse % 4))
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "lse is not 4-byte aligned");

  default_strides(p, &p->q_stride, p->heads_q, p->seq_q);
  default_strides(p, &p->k_stride, p->heads_kv, p->seq_kv);
  default_strides(p, &p->v_stride, p->heads_kv, p->seq_kv);
  default_strides(p, &p->o_stride, p->heads_q, p->seq_q);
  view vq = {"q", (uintptr_t)p->q, {p->batch, p->heads_q, p->seq_q},
             {p->q_stride.batch, p->q_stride.head, p->q_stride.seq}, 0, 0};
  view vk = {"k", (uintptr_t)p->k, {p->batch, p->heads_kv, p->seq_kv},
             {p->k_stride.batch, p->k_stride.head, p->k_stride.seq}, 0, 0};
  view vv = {"v", (uintptr_t)p->v, {p->batch, p->heads_kv, p->seq_kv},
             {p->v_stride.batch, p->v_stride.head, p->v_stride.seq}, 0, 0};
  view vo = {"o", (uintptr_t)p->o, {p->batch, p->heads_q, p->seq_q},
             {p->o_stride.batch, p->o_stride.head, p->o_stride.seq}, 0, 0};
  SJ_FORWARD(check_view(ctx, &vq, p->head_dim, 0));
  SJ_FORWARD(check_view(ctx, &vk, p->head_dim, 0));
  SJ_FORWARD(check_view(ctx, &vv, p->head_dim, 0));
  if (!for_reference) {
    SJ_FORWARD(check_view(ctx, &vo, p->head_dim, 1));
    if (overlaps(&vo, &vq) || overlaps(&vo, &vk) || overlaps(&vo, &vv))
      return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                     "o overlaps q, k or v (in-place attention is not "
                     "supported)");
  }
  c->causal_offset = 0;
  if (p->causal && p->causal_align == SJ_CAUSAL_BOTTOM_RIGHT)
    c->causal_offset = (int)(p->seq_kv - p->seq_q);

  if (for_reference) {
    if (p->head_dim % 32 || p->head_dim > 256)
      return sj_fail(ctx, SJ_ERR_UNSUPPORTED,
                     "the reference kernel needs head_dim a multiple of 32 "
                     "up to 256");
    return SJ_OK;
  }
  char msg[512];
  sj_status st = sj_plan_make(&ctx->target,
                              p->family ? p->family : ctx->family, p->dtype,
                              (int)p->head_dim, p->causal, p->qk_quant,
                              p->pv_accum, p->smooth_k, p->smooth_v, &c->plan,
                              msg, sizeof msg);
  if (st != SJ_OK)
    return sj_fail(ctx, st, "%s", msg);
  return SJ_OK;
}

/* -------------------------------------------------------------- workspace */

typedef struct layout {
  int nq_pad, nk_pad, n_qblk, n_kblk, nchunk, chunk;
  size_t q8, k8, v8, q_scale, k_scale, v_scale, v_mean, k_mean, qk_mean,
      partial, total;
} layout;

static size_t take(size_t *off, size_t bytes) {
  size_t at = *off;
  *off += (bytes + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
  return at;
}

static void make_layout(const sj_context *ctx, const call *c, layout *l) {
  const sj_attention_params *p = &c->p;
  const sj_plan *pl = &c->plan;
  const size_t B = (size_t)p->batch, HQ = (size_t)p->heads_q,
               HK = (size_t)p->heads_kv, D = (size_t)p->head_dim;
  l->n_qblk = (int)((p->seq_q + BLK_Q - 1) / BLK_Q);
  l->nq_pad = l->n_qblk * BLK_Q;
  l->n_kblk = (int)((p->seq_kv + BLK_K - 1) / BLK_K);
  l->nk_pad = l->n_kblk * BLK_K;
  /* Enough chunks for about two CTAs per multiprocessor. */
  const int sms = ctx->sm_count > 0 ? ctx->sm_count : 1;
  int64_t want = (2 * sms + (int64_t)(B * HK) - 1) / (int64_t)(B * HK);
  if (want < 1)
    want = 1;
  int64_t chunk = (p->seq_kv + want - 1) / want;
  chunk = (chunk + 63) / 64 * 64;
  if (chunk < 256)
    chunk = 256;
  l->chunk = (int)chunk;
  l->nchunk = (int)((p->seq_kv + chunk - 1) / chunk);
  const size_t qs = pl->quant == SJ_QUANT_PER_BLOCK
                        ? 1
                        : (pl->quant == SJ_QUANT_PER_WARP
                               ? (size_t)(BLK_Q / pl->warp_q)
                               : (size_t)(BLK_Q / pl->warp_q * 8));
  const size_t ks = pl->quant == SJ_QUANT_PER_THREAD ? 4 : 1;
  size_t off = 0;
  l->q8 = take(&off, B * HQ * (size_t)l->nq_pad * D);
  l->k8 = take(&off, B * HK * (size_t)l->nk_pad * D);
  l->v8 = pl->family == SJ_FAMILY_FP8PV
              ? take(&off, B * HK * D * (size_t)l->nk_pad)
              : 0;
  l->q_scale = take(&off, B * HQ * (size_t)l->n_qblk * qs * 4);
  l->k_scale = take(&off, B * HK * (size_t)l->n_kblk * ks * 4);
  l->v_scale = take(&off, B * HK * D * 4);
  l->v_mean = take(&off, B * HK * D * 4);
  l->k_mean = take(&off, B * HK * D * 4);
  l->qk_mean = take(&off, B * HQ * (size_t)p->seq_q * 4);
  l->partial = take(&off, B * HK * (size_t)l->nchunk * 4 * D * 4);
  l->total = off;
}

sj_status sj_attention_workspace_size(sj_context *ctx,
                                      const sj_attention_params *p,
                                      size_t *bytes) {
  if (!ctx || !bytes)
    return SJ_ERR_INVALID_ARGUMENT;
  call c;
  SJ_FORWARD(validate(ctx, p, &c, 0));
  layout l;
  make_layout(ctx, &c, &l);
  *bytes = l.total;
  return SJ_OK;
}

/* ------------------------------------------------------------------ launch */

sj_status sj_attention_run(sj_context *ctx, const sj_attention_params *params,
                           CUstream stream, int parts) {
  if (!ctx)
    return SJ_ERR_INVALID_ARGUMENT;
  call c;
  SJ_FORWARD(validate(ctx, params, &c, 0));
  if (!ctx->can_load)
    return sj_fail(ctx, SJ_ERR_NO_DEVICE,
                   "this context has no device (compile-only)");
  const sj_attention_params *p = &c.p;
  const sj_plan *pl = &c.plan;

  CUfunction fn[4];
  for (int i = 0; i < pl->n_specs; i++)
    SJ_FORWARD(sj_kernel_get(ctx, &pl->specs[i], &fn[i]));

  layout l;
  make_layout(ctx, &c, &l);
  CUdeviceptr ws = 0;
  int own_ws = 0;
  if (p->workspace) {
    if ((uintptr_t)p->workspace % WS_ALIGN)
      return sj_fail(ctx, SJ_ERR_WORKSPACE,
                     "workspace must be %d-byte aligned", WS_ALIGN);
    if (p->workspace_size < l.total)
      return sj_fail(ctx, SJ_ERR_WORKSPACE,
                     "workspace has %zu bytes; this call needs %zu",
                     p->workspace_size, l.total);
    ws = (CUdeviceptr)(uintptr_t)p->workspace;
  } else {
    pthread_mutex_lock(&ctx->ws_lock);
    own_ws = 1;
    sj_status st = sj_workspace_get(ctx, stream, l.total, &ws);
    if (st != SJ_OK) {
      pthread_mutex_unlock(&ctx->ws_lock);
      return st;
    }
  }

  const int fp8 = pl->family == SJ_FAMILY_FP8PV;
  const int need_stats = (pl->smooth_k || fp8) && (parts & SJ_PART_PRE);
  const int want_lse = p->lse != NULL;
  sj_status st = SJ_OK;
  if (need_stats) {
    sj_stats_args sa;
    memset(&sa, 0, sizeof sa);
    sa.k = (sj_ptr)(uintptr_t)p->k;
    sa.v = (sj_ptr)(uintptr_t)p->v;
    sa.partial = ws + l.partial;
    sa.k_sb = p->k_stride.batch;
    sa.k_sh = p->k_stride.head;
    sa.k_sn = p->k_stride.seq;
    sa.v_sb = p->v_stride.batch;
    sa.v_sh = p->v_stride.head;
    sa.v_sn = p->v_stride.seq;
    sa.batch = (int)p->batch;
    sa.heads_kv = (int)p->heads_kv;
    sa.seq_kv = (int)p->seq_kv;
    sa.head_dim = (int)p->head_dim;
    sa.nchunk = l.nchunk;
    sa.chunk = l.chunk;
    sa.flags = (pl->smooth_k ? SJ_F_K_STATS : 0) | (fp8 ? SJ_F_V_STATS : 0);
    sj_launch_shape sh = sj_spec_shape(&pl->specs[0]);
    st = sj_launch(ctx, fn[0], (unsigned)l.nchunk, (unsigned)p->heads_kv,
                   (unsigned)p->batch, &sh, stream, &sa, "kv_stats");
    if (st == SJ_OK) {
      sj_finalize_args fa;
      memset(&fa, 0, sizeof fa);
      fa.partial = ws + l.partial;
      fa.k_mean = ws + l.k_mean;
      fa.v_mean = ws + l.v_mean;
      fa.v_scale = ws + l.v_scale;
      fa.batch = (int)p->batch;
      fa.heads_kv = (int)p->heads_kv;
      fa.seq_kv = (int)p->seq_kv;
      fa.head_dim = (int)p->head_dim;
      fa.nchunk = l.nchunk;
      fa.flags = (pl->smooth_k ? SJ_F_SMOOTH_K : 0) |
                 (fp8 ? SJ_F_V_STATS : 0) | (pl->smooth_v ? SJ_F_SMOOTH_V : 0);
      fa.v_scale_max = pl->accum == SJ_ACCUM_FP32_FP16 ? 2.25f : 448.f;
      sh = sj_spec_shape(&pl->specs[1]);
      st = sj_launch(ctx, fn[1], (unsigned)p->heads_kv, (unsigned)p->batch, 1,
                     &sh, stream, &fa, "kv_finalize");
    }
  }
  if (st == SJ_OK && (parts & SJ_PART_PRE)) {
    sj_quant_args qa;
    memset(&qa, 0, sizeof qa);
    qa.q = (sj_ptr)(uintptr_t)p->q;
    qa.k = (sj_ptr)(uintptr_t)p->k;
    qa.v = (sj_ptr)(uintptr_t)p->v;
    qa.q_sb = p->q_stride.batch;
    qa.q_sh = p->q_stride.head;
    qa.q_sn = p->q_stride.seq;
    qa.k_sb = p->k_stride.batch;
    qa.k_sh = p->k_stride.head;
    qa.k_sn = p->k_stride.seq;
    qa.v_sb = p->v_stride.batch;
    qa.v_sh = p->v_stride.head;
    qa.v_sn = p->v_stride.seq;
    qa.q8 = ws + l.q8;
    qa.k8 = ws + l.k8;
    qa.v8 = fp8 ? ws + l.v8 : 0;
    qa.q_scale = ws + l.q_scale;
    qa.k_scale = ws + l.k_scale;
    qa.v_scale = ws + l.v_scale;
    qa.v_mean = ws + l.v_mean;
    qa.k_mean = ws + l.k_mean;
    qa.qk_mean = ws + l.qk_mean;
    qa.batch = (int)p->batch;
    qa.heads_q = (int)p->heads_q;
    qa.heads_kv = (int)p->heads_kv;
    qa.seq_q = (int)p->seq_q;
    qa.seq_kv = (int)p->seq_kv;
    qa.seq_q_pad = l.nq_pad;
    qa.seq_kv_pad = l.nk_pad;
    qa.n_qblk = l.n_qblk;
    qa.n_kblk = l.n_kblk;
    qa.n_vblk = fp8 ? l.n_kblk : 0;
    qa.flags = (pl->smooth_k ? SJ_F_SMOOTH_K : 0) |
               (pl->smooth_v ? SJ_F_SMOOTH_V : 0) | (fp8 ? SJ_F_QUANT_V : 0) |
               (want_lse ? SJ_F_LSE : 0);
    qa.q_prescale = 1.0f;
    sj_launch_shape sh = sj_spec_shape(&pl->specs[2]);
    st = sj_launch(ctx, fn[2], (unsigned)(qa.n_qblk + qa.n_kblk + qa.n_vblk),
                   (unsigned)p->heads_q, (unsigned)p->batch, &sh, stream, &qa,
                   "quant_qkv");
  }
  if (st == SJ_OK && (parts & SJ_PART_ATTN)) {
    sj_attn_args aa;
    memset(&aa, 0, sizeof aa);
    aa.q8 = ws + l.q8;
    aa.k8 = ws + l.k8;
    aa.v8 = fp8 ? ws + l.v8 : 0;
    aa.q_scale = ws + l.q_scale;
    aa.k_scale = ws + l.k_scale;
    aa.v_scale = ws + l.v_scale;
    aa.v_mean = ws + l.v_mean;
    aa.qk_mean = ws + l.qk_mean;
    aa.v = (sj_ptr)(uintptr_t)p->v;
    aa.o = (sj_ptr)(uintptr_t)p->o;
    aa.lse = (sj_ptr)(uintptr_t)p->lse;
    aa.v_sb = p->v_stride.batch;
    aa.v_sh = p->v_stride.head;
    aa.v_sn = p->v_stride.seq;
    aa.o_sb = p->o_stride.batch;
    aa.o_sh = p->o_stride.head;
    aa.o_sn = p->o_stride.seq;
    aa.batch = (int)p->batch;
    aa.heads_q = (int)p->heads_q;
    aa.heads_kv = (int)p->heads_kv;
    aa.seq_q = (int)p->seq_q;
    aa.seq_kv = (int)p->seq_kv;
    aa.seq_q_pad = l.nq_pad;
    aa.seq_kv_pad = l.nk_pad;
    aa.causal_offset = c.causal_offset;
    aa.sm_scale_log2 = c.sm_scale * 1.4426950408889634f;
    aa.lse_scale = 0.6931471805599453f;
    aa.flags = (pl->smooth_v ? SJ_F_SMOOTH_V : 0) |
               (want_lse ? SJ_F_LSE : 0) |
               (want_lse && pl->smooth_k ? SJ_F_SMOOTH_K : 0);
    sj_launch_shape sh = sj_spec_shape(&pl->specs[3]);
    st = sj_launch(ctx, fn[3], (unsigned)l.n_qblk, (unsigned)p->heads_q,
                   (unsigned)p->batch, &sh, stream, &aa, "attn_mma");
  }
  if (own_ws)
    pthread_mutex_unlock(&ctx->ws_lock);
  return st;
}

sj_status sj_attention(sj_context *ctx, const sj_attention_params *params,
                       struct CUstream_st *stream) {
  return sj_attention_run(ctx, params, stream, SJ_PART_PRE | SJ_PART_ATTN);
}

sj_status sj_attention_reference(sj_context *ctx,
                                 const sj_attention_params *params, float *out,
                                 struct CUstream_st *stream) {
  if (!ctx)
    return SJ_ERR_INVALID_ARGUMENT;
  if (!out)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "out is NULL");
  call c;
  SJ_FORWARD(validate(ctx, params, &c, 1));
  if (!ctx->can_load)
    return sj_fail(ctx, SJ_ERR_NO_DEVICE,
                   "this context has no device (compile-only)");
  const sj_attention_params *p = &c.p;
  sj_spec s;
  memset(&s, 0, sizeof s);
  s.kind = SJ_KERNEL_REFERENCE;
  s.dtype = p->dtype;
  s.head_dim = (int)p->head_dim;
  CUfunction fn;
  SJ_FORWARD(sj_kernel_get(ctx, &s, &fn));
  sj_ref_args ra;
  memset(&ra, 0, sizeof ra);
  ra.q = (sj_ptr)(uintptr_t)p->q;
  ra.k = (sj_ptr)(uintptr_t)p->k;
  ra.v = (sj_ptr)(uintptr_t)p->v;
  ra.o = (sj_ptr)(uintptr_t)out;
  ra.lse = (sj_ptr)(uintptr_t)p->lse;
  ra.q_sb = p->q_stride.batch;
  ra.q_sh = p->q_stride.head;
  ra.q_sn = p->q_stride.seq;
  ra.k_sb = p->k_stride.batch;
  ra.k_sh = p->k_stride.head;
  ra.k_sn = p->k_stride.seq;
  ra.v_sb = p->v_stride.batch;
  ra.v_sh = p->v_stride.head;
  ra.v_sn = p->v_stride.seq;
  ra.batch = (int)p->batch;
  ra.heads_q = (int)p->heads_q;
  ra.heads_kv = (int)p->heads_kv;
  ra.seq_q = (int)p->seq_q;
  ra.seq_kv = (int)p->seq_kv;
  ra.head_dim = (int)p->head_dim;
  ra.causal = p->causal;
  ra.causal_offset = c.causal_offset;
  ra.sm_scale = c.sm_scale;
  sj_launch_shape sh = sj_spec_shape(&s);
  const unsigned rows_per_cta = 16; /* REF_WARPS * REF_ROWS */
  return sj_launch(ctx, fn,
                   (unsigned)((p->seq_q + rows_per_cta - 1) / rows_per_cta),
                   (unsigned)p->heads_q, (unsigned)p->batch, &sh, stream, &ra,
                   "reference_attn");
}

void sj_attention_params_init(sj_attention_params *p) {
  if (!p)
    return;
  memset(p, 0, sizeof *p);
  p->dtype = SJ_DTYPE_FP16;
  p->layout = SJ_LAYOUT_HND;
  p->smooth_k = -1;
  p->smooth_v = -1;
}
