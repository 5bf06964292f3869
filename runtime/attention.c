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

/* The checked, resolved form of a call: dense batches and packed (varlen)
 * sequences alike.  Strides are in elements; for varlen calls the batch
 * stride is unused and the token stride plays the seq stride's role. */
typedef struct call {
  sj_dtype dtype;
  int varlen;
  int64_t batch, heads_q, heads_kv, head_dim;
  int64_t seq_q, seq_kv;     /* dense lengths, or varlen maxima */
  int64_t total_q, total_kv; /* varlen token totals */
  const int32_t *cu_q, *cu_kv;
  const void *q, *k, *v;
  void *o;
  float *lse;
  int64_t q_sb, q_sh, q_sn, k_sb, k_sh, k_sn, v_sb, v_sh, v_sn, o_sb, o_sh,
      o_sn;
  int causal;
  sj_causal_align align;
  float sm_scale;
  void *workspace;
  size_t workspace_size;
  sj_plan plan;
} call;

typedef struct options {
  sj_family family;
  sj_quant_gran quant;
  sj_pv_accum accum;
  int smooth_k, smooth_v;
} options;

static sj_status check_common(sj_context *ctx, sj_dtype dtype, int causal,
                              sj_causal_align align, const options *o,
                              float sm_scale, const float *lse) {
  if (dtype != SJ_DTYPE_FP16 && dtype != SJ_DTYPE_BF16)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "unknown dtype %d (SJ_DTYPE_FP16 or SJ_DTYPE_BF16)",
                   (int)dtype);
  if (causal != 0 && causal != 1)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "causal must be 0 or 1");
  if (align != SJ_CAUSAL_TOP_LEFT && align != SJ_CAUSAL_BOTTOM_RIGHT)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "unknown causal_align %d",
                   (int)align);
  if ((int)o->family < 0 || o->family > SJ_FAMILY_WGMMA)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "unknown family %d",
                   (int)o->family);
  if ((int)o->quant < 0 || o->quant > SJ_QUANT_PER_THREAD)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "unknown qk_quant %d",
                   (int)o->quant);
  if ((int)o->accum < 0 || o->accum > SJ_ACCUM_PVI8_SPLITV)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "unknown pv_accum %d",
                   (int)o->accum);
  if (o->smooth_k < -1 || o->smooth_k > 1 || o->smooth_v < -1 ||
      o->smooth_v > 1)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "smooth_k and smooth_v must be -1, 0 or 1");
  if (sm_scale != 0.f && !(isfinite(sm_scale) && sm_scale > 0.f))
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "sm_scale must be a positive finite number (0: default)");
  if (lse && ((uintptr_t)lse % 4))
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "lse is not 4-byte aligned");
  return SJ_OK;
}

typedef struct size_rule {
  const char *name;
  int64_t v, min, max;
} size_rule;

static sj_status check_sizes(sj_context *ctx, const size_rule *r, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (r[i].v < r[i].min)
      return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                     "%s must be >= %lld (got %lld)", r[i].name,
                     (long long)r[i].min, (long long)r[i].v);
    if (r[i].v > r[i].max)
      return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "%s %lld exceeds %lld",
                     r[i].name, (long long)r[i].v, (long long)r[i].max);
  }
  return SJ_OK;
}

/* Checks the four views, output injectivity and aliasing. */
static sj_status check_views(sj_context *ctx, call *c, int64_t nq, int64_t nk,
                             int64_t bq, int for_reference) {
  view vq = {"q", (uintptr_t)c->q, {bq, c->heads_q, nq},
             {c->q_sb, c->q_sh, c->q_sn}, 0, 0};
  view vk = {"k", (uintptr_t)c->k, {bq, c->heads_kv, nk},
             {c->k_sb, c->k_sh, c->k_sn}, 0, 0};
  view vv = {"v", (uintptr_t)c->v, {bq, c->heads_kv, nk},
             {c->v_sb, c->v_sh, c->v_sn}, 0, 0};
  view vo = {"o", (uintptr_t)c->o, {bq, c->heads_q, nq},
             {c->o_sb, c->o_sh, c->o_sn}, 0, 0};
  SJ_FORWARD(check_view(ctx, &vq, c->head_dim, 0));
  SJ_FORWARD(check_view(ctx, &vk, c->head_dim, 0));
  SJ_FORWARD(check_view(ctx, &vv, c->head_dim, 0));
  if (!for_reference) {
    SJ_FORWARD(check_view(ctx, &vo, c->head_dim, 1));
    if (overlaps(&vo, &vq) || overlaps(&vo, &vk) || overlaps(&vo, &vv))
      return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                     "o overlaps q, k or v (in-place attention is not "
                     "supported)");
  }
  return SJ_OK;
}

/* The plan of a call with these options: the family it asked for resolved
 * against the context, then sj_plan_make's defaults and checks. */
static sj_status plan_options(sj_context *ctx, const options *o, sj_dtype dt,
                              int head_dim, int causal, sj_plan *out) {
  char msg[512];
  /* AUTO stays AUTO unless the context was given a family, so that the
   * plan may fall back from wgmma for what that family does not offer.  A
   * driver without cuTensorMapEncodeTiled cannot run wgmma at all. */
  sj_family fam = o->family ? o->family
                            : (ctx->family_explicit ? ctx->family
                                                    : SJ_FAMILY_AUTO);
  if (fam == SJ_FAMILY_AUTO && ctx->target.family == SJ_FAMILY_WGMMA &&
      ctx->cu && !ctx->cu->TensorMapEncodeTiled)
    fam = SJ_FAMILY_FP8PV;
  if (fam == SJ_FAMILY_WGMMA && ctx->cu && !ctx->cu->TensorMapEncodeTiled)
    return sj_fail(ctx, SJ_ERR_UNSUPPORTED,
                   "the wgmma family needs cuTensorMapEncodeTiled, which "
                   "this CUDA driver lacks; use the fp8pv family");
  sj_status st = sj_plan_make(&ctx->target, fam, dt, head_dim, causal, o->quant,
                              o->accum, o->smooth_k, o->smooth_v, out, msg,
                              sizeof msg);
  if (st != SJ_OK)
    return sj_fail(ctx, st, "%s", msg);
  /* attn_mma's TMA tiles need the same driver entry point: without it the
   * cp.async form of the kernel */
  if (out->tma && ctx->cu && !ctx->cu->TensorMapEncodeTiled)
    out->tma = out->specs[3].tma = out->specs[3].vh = 0;
  return SJ_OK;
}

static sj_status plan_call(sj_context *ctx, call *c, const options *o) {
  SJ_FORWARD(plan_options(ctx, o, c->dtype, (int)c->head_dim, c->causal,
                          &c->plan));
  sj_plan_for_length(&c->plan, &ctx->target, c->seq_q, c->seq_kv);
  return SJ_OK;
}

sj_status sj_context_resolve(sj_context *ctx, sj_family family, int head_dim,
                             sj_pv_accum accum, sj_family *family_out,
                             sj_pv_accum *accum_out) {
  if (!ctx)
    return SJ_ERR_INVALID_ARGUMENT;
  if (!family_out || !accum_out)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "family_out or accum_out is NULL");
  /* Neither the dtype nor the mask changes the family or the accumulation
   * a call gets (sj_plan_make); check_common vets the two enums. */
  const options o = {family, SJ_QUANT_DEFAULT, accum, -1, -1};
  SJ_FORWARD(check_common(ctx, SJ_DTYPE_FP16, 0, SJ_CAUSAL_TOP_LEFT, &o, 0.f, NULL));
  sj_plan pl;
  SJ_FORWARD(plan_options(ctx, &o, SJ_DTYPE_FP16, head_dim, 0, &pl));
  *family_out = pl.family;
  *accum_out = pl.accum;
  return SJ_OK;
}

static sj_status validate(sj_context *ctx, const sj_attention_params *in,
                          call *c, int for_reference) {
  if (!in)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "params is NULL");
  memset(c, 0, sizeof *c);
  sj_attention_params p = *in;
  options o = {p.family, p.qk_quant, p.pv_accum, p.smooth_k, p.smooth_v};
  SJ_FORWARD(check_common(ctx, p.dtype, p.causal, p.causal_align, &o,
                          p.sm_scale, p.lse));
  if (p.layout != SJ_LAYOUT_HND && p.layout != SJ_LAYOUT_NHD)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "unknown layout %d (SJ_LAYOUT_HND or SJ_LAYOUT_NHD)",
                   (int)p.layout);
  const size_rule sizes[] = {{"batch", p.batch, 1, 65535},
                             {"heads_q", p.heads_q, 1, 65535},
                             {"heads_kv", p.heads_kv, 1, 65535},
                             {"seq_q", p.seq_q, 1, INT32_MAX / 2},
                             {"seq_kv", p.seq_kv, 1, INT32_MAX / 2},
                             {"head_dim", p.head_dim, 1, 1 << 16}};
  SJ_FORWARD(check_sizes(ctx, sizes, sizeof sizes / sizeof *sizes));
  if (p.heads_q % p.heads_kv)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "heads_q (%lld) must be a multiple of heads_kv (%lld)",
                   (long long)p.heads_q, (long long)p.heads_kv);
  default_strides(&p, &p.q_stride, p.heads_q, p.seq_q);
  default_strides(&p, &p.k_stride, p.heads_kv, p.seq_kv);
  default_strides(&p, &p.v_stride, p.heads_kv, p.seq_kv);
  default_strides(&p, &p.o_stride, p.heads_q, p.seq_q);
  c->dtype = p.dtype;
  c->batch = p.batch;
  c->heads_q = p.heads_q;
  c->heads_kv = p.heads_kv;
  c->head_dim = p.head_dim;
  c->seq_q = p.seq_q;
  c->seq_kv = p.seq_kv;
  c->q = p.q;
  c->k = p.k;
  c->v = p.v;
  c->o = p.o;
  c->lse = p.lse;
  c->q_sb = p.q_stride.batch;
  c->q_sh = p.q_stride.head;
  c->q_sn = p.q_stride.seq;
  c->k_sb = p.k_stride.batch;
  c->k_sh = p.k_stride.head;
  c->k_sn = p.k_stride.seq;
  c->v_sb = p.v_stride.batch;
  c->v_sh = p.v_stride.head;
  c->v_sn = p.v_stride.seq;
  c->o_sb = p.o_stride.batch;
  c->o_sh = p.o_stride.head;
  c->o_sn = p.o_stride.seq;
  c->causal = p.causal;
  c->align = p.causal_align;
  c->sm_scale = p.sm_scale != 0.f ? p.sm_scale
                                  : (float)(1.0 / sqrt((double)p.head_dim));
  c->workspace = p.workspace;
  c->workspace_size = p.workspace_size;
  SJ_FORWARD(check_views(ctx, c, p.seq_q, p.seq_kv, p.batch, for_reference));
  if (for_reference) {
    if (p.head_dim % 32 || p.head_dim > 256)
      return sj_fail(ctx, SJ_ERR_UNSUPPORTED,
                     "the reference kernel needs head_dim a multiple of 32 "
                     "up to 256");
    return SJ_OK;
  }
  return plan_call(ctx, c, &o);
}

/* Validates a prefix-sum array: first 0, monotone, last = total, no length
 * above max. */
static sj_status check_cu(sj_context *ctx, const char *name, const int32_t *cu,
                          int64_t batch, int64_t total, int64_t max) {
  if (cu[0] != 0)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "%s[0] is %d, not 0", name,
                   cu[0]);
  for (int64_t i = 0; i < batch; i++) {
    const int64_t len = (int64_t)cu[i + 1] - cu[i];
    if (len < 0)
      return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                     "%s is not monotone: [%lld] = %d > [%lld] = %d", name,
                     (long long)i, cu[i], (long long)(i + 1), cu[i + 1]);
    if (len > max)
      return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                     "%s: sequence %lld has %lld tokens, above the max %lld",
                     name, (long long)i, (long long)len, (long long)max);
  }
  if (cu[batch] != total)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "%s[%lld] is %d, not the total %lld", name,
                   (long long)batch, cu[batch], (long long)total);
  return SJ_OK;
}

static sj_status fetch_cu(sj_context *ctx, CUstream stream, const int32_t *dev,
                          int32_t *host, int64_t n) {
  char err[256];
  CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
  if (ctx->cu->StreamIsCapturing(stream, &cap) == CUDA_SUCCESS &&
      cap != CU_STREAM_CAPTURE_STATUS_NONE)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "validating device cu_seqlens needs a copy to the host, "
                   "which a capturing stream cannot do: pass host copies or "
                   "set trust_cu_seqlens");
  CUresult r = ctx->cu->CtxPushCurrent(ctx->cuctx);
  if (r == CUDA_SUCCESS) {
    r = ctx->cu->StreamSynchronize(stream);
    if (r == CUDA_SUCCESS)
      r = ctx->cu->MemcpyDtoH(host, (CUdeviceptr)(uintptr_t)dev,
                              (size_t)n * sizeof *host);
    CUcontext dummy;
    ctx->cu->CtxPopCurrent(&dummy);
  }
  if (r != CUDA_SUCCESS)
    return sj_fail(ctx, SJ_ERR_CUDA, "reading cu_seqlens: %s",
                   sj_cuda_error_text(r, err, sizeof err));
  return SJ_OK;
}

static sj_status validate_varlen(sj_context *ctx, const sj_varlen_params *p,
                                 call *c, CUstream stream) {
  if (!p)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "params is NULL");
  memset(c, 0, sizeof *c);
  options o = {p->family, p->qk_quant, p->pv_accum, p->smooth_k, p->smooth_v};
  SJ_FORWARD(check_common(ctx, p->dtype, p->causal, p->causal_align, &o,
                          p->sm_scale, p->lse));
  const size_rule sizes[] = {{"batch", p->batch, 1, 65535},
                             {"heads_q", p->heads_q, 1, 65535},
                             {"heads_kv", p->heads_kv, 1, 65535},
                             {"head_dim", p->head_dim, 1, 1 << 16},
                             {"max_seqlen_q", p->max_seqlen_q, 0, INT32_MAX / 2},
                             {"max_seqlen_kv", p->max_seqlen_kv, 0,
                              INT32_MAX / 2}};
  SJ_FORWARD(check_sizes(ctx, sizes, sizeof sizes / sizeof *sizes));
  /* Padded rows (128 per sequence; v8 columns SJ_V8_GAP + 16) must still
   * fit the kernels' int. */
  const int64_t tmax = INT32_MAX / 2 - (SJ_V8_GAP + 16) * p->batch;
  const size_rule totals[] = {{"total_q", p->total_q, 0, tmax},
                              {"total_kv", p->total_kv, 0, tmax}};
  SJ_FORWARD(check_sizes(ctx, totals, sizeof totals / sizeof *totals));
  if (p->heads_q % p->heads_kv)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "heads_q (%lld) must be a multiple of heads_kv (%lld)",
                   (long long)p->heads_q, (long long)p->heads_kv);
  if (!p->cu_seqlens_q || !p->cu_seqlens_kv)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "cu_seqlens_%s is NULL",
                   p->cu_seqlens_q ? "kv" : "q");
  if ((uintptr_t)p->cu_seqlens_q % 4 || (uintptr_t)p->cu_seqlens_kv % 4)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "cu_seqlens must be 4-byte aligned int32 arrays");
  const int64_t hd = p->head_dim;
  c->dtype = p->dtype;
  c->varlen = 1;
  c->batch = p->batch;
  c->heads_q = p->heads_q;
  c->heads_kv = p->heads_kv;
  c->head_dim = hd;
  c->seq_q = p->max_seqlen_q;
  c->seq_kv = p->max_seqlen_kv;
  c->total_q = p->total_q;
  c->total_kv = p->total_kv;
  c->cu_q = p->cu_seqlens_q;
  c->cu_kv = p->cu_seqlens_kv;
  c->q = p->q;
  c->k = p->k;
  c->v = p->v;
  c->o = p->o;
  c->lse = p->lse;
#define TOKEN_STRIDES(x, heads)                                                \
  c->x##_sn = p->x##_stride_token ? p->x##_stride_token : (heads) * hd;        \
  c->x##_sh = p->x##_stride_head ? p->x##_stride_head : hd
  TOKEN_STRIDES(q, p->heads_q);
  TOKEN_STRIDES(k, p->heads_kv);
  TOKEN_STRIDES(v, p->heads_kv);
  TOKEN_STRIDES(o, p->heads_q);
#undef TOKEN_STRIDES
  c->causal = p->causal;
  c->align = p->causal_align;
  c->sm_scale = p->sm_scale != 0.f ? p->sm_scale
                                   : (float)(1.0 / sqrt((double)hd));
  c->workspace = p->workspace;
  c->workspace_size = p->workspace_size;
  /* Views over all tokens: one "batch" of total rows. */
  SJ_FORWARD(check_views(ctx, c, p->total_q > 0 ? p->total_q : 1,
                         p->total_kv > 0 ? p->total_kv : 1, 1, 0));
  SJ_FORWARD(plan_call(ctx, c, &o));
  if (p->trust_cu_seqlens && !p->cu_seqlens_q_host && !p->cu_seqlens_kv_host)
    return SJ_OK;
  const int64_t n = p->batch + 1;
  int32_t *hq = (int32_t *)p->cu_seqlens_q_host, *hk = (int32_t *)p->cu_seqlens_kv_host;
  int32_t *tmp = NULL;
  if (!hq || !hk) {
    if (stream == (CUstream)-1) /* sizing only: nothing to read yet */
      return SJ_OK;
    if (!ctx->can_load)
      return sj_fail(ctx, SJ_ERR_NO_DEVICE,
                     "this context has no device to read cu_seqlens from");
    tmp = malloc((size_t)n * 2 * sizeof *tmp);
    if (!tmp)
      return sj_fail(ctx, SJ_ERR_OUT_OF_MEMORY, "out of memory");
    sj_status st = SJ_OK;
    if (!hq)
      st = fetch_cu(ctx, stream, p->cu_seqlens_q, hq = tmp, n);
    if (st == SJ_OK && !hk)
      st = fetch_cu(ctx, stream, p->cu_seqlens_kv, hk = tmp + n, n);
    if (st != SJ_OK) {
      free(tmp);
      return st;
    }
  }
  sj_status st = check_cu(ctx, "cu_seqlens_q", hq, p->batch, p->total_q,
                          p->max_seqlen_q);
  if (st == SJ_OK)
    st = check_cu(ctx, "cu_seqlens_kv", hk, p->batch, p->total_kv,
                  p->max_seqlen_kv);
  free(tmp);
  return st;
}

/* -------------------------------------------------------------- workspace */

typedef struct layout {
  sj_geom g;
  int nchunk, chunk;
  size_t ctl_bytes; /* kv_stats' counts (SJ_F_FINALIZE), at offset 0 */
  size_t q8, k8, v8, q_scale, k_scale, v_scale, v_mean, k_mean, qk_mean,
      partial, v_mode, total;
} layout;

/* Size arithmetic of the layout, with overflow recorded rather than
 * wrapped: a call whose workspace does not fit in 64 bits is refused. */
typedef struct sizer {
  size_t off;
  int overflow;
} sizer;

static size_t mulz(sizer *z, size_t a, size_t b) {
  size_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    z->overflow = 1;
    return 0;
  }
  return r;
}

static size_t take(sizer *z, size_t bytes) {
  size_t at = z->off, padded;
  if (__builtin_add_overflow(bytes, (size_t)WS_ALIGN - 1, &padded) ||
      __builtin_add_overflow(z->off, padded / WS_ALIGN * WS_ALIGN, &z->off))
    z->overflow = 1;
  return at;
}

static size_t mul4(sizer *z, size_t a, size_t b, size_t c, size_t d) {
  return mulz(z, mulz(z, a, b), mulz(z, c, d));
}

static sj_status make_layout(sj_context *ctx, const call *c, layout *l) {
  const sj_plan *pl = &c->plan;
  const size_t B = (size_t)c->batch, HQ = (size_t)c->heads_q,
               HK = (size_t)c->heads_kv, D = (size_t)c->head_dim;
  memset(l, 0, sizeof *l);
  sj_geom *g = &l->g;
  g->batch = (int)c->batch;
  g->heads_q = (int)c->heads_q;
  g->heads_kv = (int)c->heads_kv;
  g->seq_q = (int)c->seq_q;
  g->seq_kv = (int)c->seq_kv;
  g->n_qblk = (int)((c->seq_q + BLK_Q - 1) / BLK_Q);
  g->n_kblk = (int)((c->seq_kv + BLK_K - 1) / BLK_K);
  size_t q_rows, kv_rows, v_cols, stat_rows;
  if (c->varlen) {
    g->cu_q = (sj_ptr)(uintptr_t)c->cu_q;
    g->cu_kv = (sj_ptr)(uintptr_t)c->cu_kv;
    g->total_q = (int)c->total_q;
    g->total_kv = (int)c->total_kv;
    g->rows_q = (int)(c->total_q + BLK_Q * c->batch);
    g->rows_kv = (int)(c->total_kv + BLK_K * c->batch);
    g->cols_kv = (int)((c->total_kv + SJ_V8_GAP * c->batch + 16 + 15) / 16 * 16);
    q_rows = (size_t)g->rows_q * HQ;
    kv_rows = (size_t)g->rows_kv * HK;
    v_cols = (size_t)g->cols_kv * HK;
    stat_rows = (size_t)c->total_q * HQ;
  } else {
    g->seq_q_pad = g->n_qblk * BLK_Q;
    g->seq_kv_pad = g->n_kblk * BLK_K;
    sizer z0 = {0, 0};
    q_rows = mulz(&z0, B * HQ, (size_t)g->seq_q_pad);
    kv_rows = mulz(&z0, B * HK, (size_t)g->seq_kv_pad);
    v_cols = kv_rows;
    stat_rows = mulz(&z0, B * HQ, (size_t)c->seq_q);
    if (z0.overflow)
      return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                     "the workspace this call needs does not fit in 64 bits");
  }
  /* kv_stats: as many chunks as one wave of its CTAs holds: three per
   * multiprocessor (its launch bounds), two where the shared memory does
   * not hold three of its 48 KB (sm_86, sm_89, sm_12x: 100 KB); one chunk
   * more per head would start a second, mostly idle wave. */
  const int sms = ctx->sm_count > 0 ? ctx->sm_count : 1;
  int per_sm = (ctx->target.smem_optin + 1024) / (SJ_STATS_SMEM + 1024);
  if (per_sm > SJ_STATS_CTAS)
    per_sm = SJ_STATS_CTAS;
  if (per_sm < 1)
    per_sm = 1;
  int64_t want = (per_sm * (int64_t)sms) / (int64_t)(B * HK);
  if (want < 1)
    want = 1;
  int64_t chunk = (c->seq_kv + want - 1) / want;
  chunk = (chunk + 63) / 64 * 64;
  if (chunk < 256)
    chunk = 256;
  l->chunk = (int)chunk;
  l->nchunk = (int)((c->seq_kv + chunk - 1) / chunk);
  if (l->nchunk < 1)
    l->nchunk = 1;
  const size_t qs = pl->quant == SJ_QUANT_PER_BLOCK
                        ? 1
                        : (pl->quant == SJ_QUANT_PER_WARP
                               ? (size_t)(BLK_Q / pl->warp_q)
                               : (size_t)(BLK_Q / pl->warp_q * 8));
  /* K: four per 64-key block for every granularity (per_block and
   * per_warp repeat theirs), so that the attention kernels' key loop reads
   * them alike and the granularity can be a kernel argument */
  const size_t ks = 4;
  sizer z = {0, 0};
  /* First, at a fixed place: a context's workspace keeps kv_stats' counts
   * zero from call to call (run_call) */
  l->ctl_bytes = mulz(&z, B * HK, 4);
  take(&z, l->ctl_bytes);
  l->q8 = take(&z, mulz(&z, q_rows, D));
  l->k8 = take(&z, mulz(&z, kv_rows, D));
  /* Split V: the residual buffer right after v8, same layout (one tensor
   * map of twice the rows covers both; v8_lo_offset in sj_geom.cuh).
   * 16-bit V (pv16): two bytes per value. */
  const size_t v_copies = (size_t)sj_v_bytes(sj_v_mode(pl->accum));
  l->v8 = pl->family != SJ_FAMILY_FP16PV
              ? take(&z, mul4(&z, v_cols, D, v_copies, 1))
              : 0;
  l->q_scale = take(&z, mul4(&z, B * HQ, (size_t)g->n_qblk, qs, 4));
  l->k_scale = take(&z, mul4(&z, B * HK, (size_t)g->n_kblk, ks, 4));
  l->v_scale = take(&z, mul4(&z, B, HK, D, 4));
  l->v_mean = take(&z, mul4(&z, B, HK, D, 4));
  l->k_mean = take(&z, mul4(&z, B, HK, D, 4));
  l->qk_mean = take(&z, mulz(&z, stat_rows, 4));
  l->partial = take(&z, mul4(&z, B * HK, (size_t)l->nchunk, SJ_STATS_ROWS * D, 4));
  l->v_mode = take(&z, B * HK); /* pvi8+splitv: a byte per (b, kv head) */
  l->total = z.off;
  if (z.overflow)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                   "the workspace this call needs does not fit in 64 bits");
  return SJ_OK;
}

sj_status sj_attention_workspace_size(sj_context *ctx,
                                      const sj_attention_params *p,
                                      size_t *bytes) {
  if (!ctx || !bytes)
    return SJ_ERR_INVALID_ARGUMENT;
  call c;
  SJ_FORWARD(validate(ctx, p, &c, 0));
  layout l;
  SJ_FORWARD(make_layout(ctx, &c, &l));
  *bytes = l.total;
  return SJ_OK;
}

sj_status sj_attention_varlen_workspace_size(sj_context *ctx,
                                             const sj_varlen_params *p,
                                             size_t *bytes) {
  if (!ctx || !bytes)
    return SJ_ERR_INVALID_ARGUMENT;
  call c;
  SJ_FORWARD(validate_varlen(ctx, p, &c, (CUstream)-1));
  layout l;
  SJ_FORWARD(make_layout(ctx, &c, &l));
  *bytes = l.total;
  return SJ_OK;
}

/* ------------------------------------------------------------------ launch */

/* cuTensorMapEncodeTiled enum values (cuda.h) used here. */
enum {
  TMAP_UINT8 = 0,
  TMAP_UINT16 = 1,
  TMAP_INTERLEAVE_NONE = 0,
  TMAP_SWIZZLE_32B = 1,
  TMAP_SWIZZLE_64B = 2,
  TMAP_SWIZZLE_128B = 3,
  TMAP_L2_128B = 2,
  TMAP_L2_256B = 3,
  TMAP_OOB_ZERO = 0
};

/* One tensor map of `rank` dimensions (innermost first; strides in bytes
 * for dimensions 1 and up), elements of type `type`, read in whole boxes
 * with element strides of 1 and the swizzle of box[0]'s bytes (32, 64 or
 * 128); out-of-range box parts read as zeros. */
static sj_status encode_tiled(sj_context *ctx, sj_tmap *m, int type, unsigned esize,
                              unsigned rank, const void *base, const uint64_t *dims,
                              const uint64_t *strides, const unsigned *box, int l2,
                              const char *what) {
  static const unsigned elem[5] = {1, 1, 1, 1, 1};
  CUresult r = ctx->cu->TensorMapEncodeTiled(
      m, type, rank, (void *)base, dims, strides, box, elem, TMAP_INTERLEAVE_NONE,
      box[0] * esize == 128 ? TMAP_SWIZZLE_128B
                            : (box[0] * esize == 64 ? TMAP_SWIZZLE_64B : TMAP_SWIZZLE_32B),
      l2, TMAP_OOB_ZERO);
  if (r != CUDA_SUCCESS) {
    char err[256];
    return sj_fail(ctx, SJ_ERR_CUDA,
                   "cuTensorMapEncodeTiled (%s: %llu x %llu, box %u x %u): %s",
                   what, (unsigned long long)dims[0], (unsigned long long)dims[1],
                   box[0], box[1], sj_cuda_error_text(r, err, sizeof err));
  }
  return SJ_OK;
}

/* One 2-D byte tensor map: `rows` rows of `width` bytes, `pitch` apart,
 * read in boxes of box_w bytes by box_h rows, swizzled to box_w (32, 64
 * or 128). */
static sj_status encode_map(sj_context *ctx, sj_tmap *m, CUdeviceptr base,
                            uint64_t width, uint64_t rows, uint64_t pitch,
                            unsigned box_w, unsigned box_h, int l2,
                            const char *what) {
  if (rows >= (1ull << 31) || width >= (1ull << 31))
    return sj_fail(ctx, SJ_ERR_UNSUPPORTED,
                   "the %s buffer of this call has more rows than a TMA "
                   "coordinate reaches (2^31)", what);
  const uint64_t dims[2] = {width, rows};
  const unsigned box[2] = {box_w, box_h};
  return encode_tiled(ctx, m, TMAP_UINT8, 1, 2, (const void *)(uintptr_t)base, dims,
                      &pitch, box, l2, what);
}

/* k8's rows (every (batch or sequence, kv head)'s padded keys), and v8's
 * channel rows and their pitch in bytes (split V: the residual rows after
 * them): the buffers quant_qkv writes, as both attention families read
 * them by TMA. */
static uint64_t k8_rows(const call *c, const sj_geom *g) {
  return c->varlen ? (uint64_t)g->rows_kv * (uint64_t)c->heads_kv
                   : (uint64_t)c->batch * (uint64_t)c->heads_kv * (uint64_t)g->seq_kv_pad;
}
static void v8_rows(const call *c, const sj_geom *g, uint64_t *rows, uint64_t *pitch) {
  const uint64_t D = (uint64_t)c->head_dim;
  *pitch = c->varlen ? (uint64_t)g->cols_kv : (uint64_t)g->seq_kv_pad;
  *rows = (uint64_t)c->heads_kv * D * (c->varlen ? 1 : (uint64_t)c->batch);
  if (sj_v_bytes(sj_v_mode(c->plan.accum)) == 2 && c->plan.accum != SJ_ACCUM_PV16)
    *rows *= 2; /* split V: the residual rows follow */
}

/* Encodes an attention kernel's maps with `fn`.  The driver checks the
 * addresses against the current context: a caller's thread need not have
 * ours current, so it is pushed around the encoding. */
typedef sj_status (*maps_fn)(sj_context *ctx, const call *c, const layout *l,
                             CUdeviceptr ws, sj_wgmma_args *wa);
static sj_status encode_maps(sj_context *ctx, const call *c, const layout *l,
                             CUdeviceptr ws, sj_wgmma_args *wa, maps_fn fn) {
  CUresult r = ctx->cu->CtxPushCurrent(ctx->cuctx);
  if (r != CUDA_SUCCESS) {
    char err[256];
    return sj_fail(ctx, SJ_ERR_CUDA, "cuCtxPushCurrent: %s",
                   sj_cuda_error_text(r, err, sizeof err));
  }
  sj_status st = fn(ctx, c, l, ws, wa);
  CUcontext dummy;
  ctx->cu->CtxPopCurrent(&dummy);
  return st;
}

/* The three TMA descriptors of the wgmma kernel (sj_abi.h). */
static sj_status wgmma_maps_current(sj_context *ctx, const call *c,
                                    const layout *l, CUdeviceptr ws,
                                    sj_wgmma_args *wa) {
  const sj_plan *pl = &c->plan;
  const uint64_t D = (uint64_t)c->head_dim;
  const unsigned ch = D < 128 ? (unsigned)D : 128, bn = (unsigned)pl->ksub;
  const sj_geom *g = &l->g;
  const uint64_t q_rows =
      c->varlen ? (uint64_t)g->rows_q * (uint64_t)c->heads_q
                : (uint64_t)c->batch * (uint64_t)c->heads_q * (uint64_t)g->seq_q_pad;
  uint64_t v_rows, v_pitch;
  v8_rows(c, g, &v_rows, &v_pitch);
  SJ_FORWARD(encode_map(ctx, &wa->tq, ws + l->q8, D, q_rows, D, ch,
                        64u * (unsigned)sj_wg_groups(pl->wg_consumers),
                        TMAP_L2_128B, "q8"));
  SJ_FORWARD(encode_map(ctx, &wa->tk, ws + l->k8, D, k8_rows(c, g), D, ch, bn,
                        TMAP_L2_256B, "k8"));
  if (pl->accum == SJ_ACCUM_PV16) /* 16-bit rows, read as 64-key boxes */
    SJ_FORWARD(encode_map(ctx, &wa->tv, ws + l->v8, 2 * v_pitch, v_rows,
                          2 * v_pitch, 128, (unsigned)D, TMAP_L2_256B, "v16"));
  else
    SJ_FORWARD(encode_map(ctx, &wa->tv, ws + l->v8, v_pitch, v_rows, v_pitch,
                          bn, (unsigned)D, TMAP_L2_256B, "v8"));
  return SJ_OK;
}

/* The two tensor maps of attn_mma with TMA tiles (sj_plan.tma), in
 * sj_wgmma_args's tk and tv: the k8 rows in 64-key boxes of D bytes
 * (swizzled to D: 128 or 64 bytes; D = 96 in three boxes of 32, D = 256
 * in two of 128), and V: FP16PV the caller's 16-bit
 * tensor as (channel, token, kv head, batch) in boxes of 64 channels x 64
 * tokens, 128-byte swizzled (D = 32 and 96: 32 x 64, 64-byte swizzled), which
 * zero-fill tokens past a dense sequence (a packed call's
 * map is one sequence of all its tokens: the rows after a sequence's last
 * are the next one's, which the kernel zeroes in its last tile); FP8PV
 * v8's channel rows (and split V's residual rows after them) in boxes of
 * 64 bytes by D rows, 64-byte swizzled.  The strides are multiples of 16
 * bytes (validate). */
static sj_status mma_tma_maps(sj_context *ctx, const call *c, const layout *l,
                              CUdeviceptr ws, sj_wgmma_args *wa) {
  const uint64_t D = (uint64_t)c->head_dim;
  const sj_geom *g = &l->g;
  const unsigned krow = (unsigned)SJ_TMA_KROW(D), vch = (unsigned)SJ_TMA_VCH(D);
  SJ_FORWARD(encode_map(ctx, &wa->tk, ws + l->k8, D, k8_rows(c, g), D, krow, BLK_K,
                        TMAP_L2_256B, "k8"));
  if (c->plan.family == SJ_FAMILY_FP8PV) {
    uint64_t rows, pitch;
    v8_rows(c, g, &rows, &pitch);
    return encode_map(ctx, &wa->tv, ws + l->v8, pitch, rows, pitch, BLK_K,
                      (unsigned)D, TMAP_L2_256B, "v8");
  }
  const uint64_t dims[4] = {D, (uint64_t)(c->varlen ? c->total_kv : c->seq_kv),
                            (uint64_t)c->heads_kv, (uint64_t)(c->varlen ? 1 : c->batch)};
  const uint64_t strides[3] = {(uint64_t)c->v_sn * 2, (uint64_t)c->v_sh * 2,
                               c->varlen ? (uint64_t)c->v_sn * 2 : (uint64_t)c->v_sb * 2};
  const unsigned box[4] = {vch, 64, 1, 1};
  return encode_tiled(ctx, &wa->tv, TMAP_UINT16, 2, 4, c->v, dims, strides, box,
                      TMAP_L2_256B, "v");
}

/* Causal launch order of the attention kernels (sj::cta_coord in
 * sj_geom.cuh): the heaviest Q blocks start first, one head after
 * another, or with SJ_F_HEADS_FIRST every head's (of a batch) last block,
 * then every head's one before, ...  Longest first over all the heads
 * leaves a tail of short CTAs (list scheduling): a model of 2048 causal
 * CTAs at N = 1K on 396 slots ends 19 % past the ideal one head at a
 * time, 7 % with 32 heads.  The CTAs running at once then read the K/V
 * of all the heads, which must stay in L2: heads first only while a
 * batch's fits the device's L2 (50 MiB on the H100 and H200;
 * SJ_HEADS_FIRST_BYTES where the driver does not say).  H200, same call,
 * attention (end to end), B = 4, H = 32: wgmma D = 128 1K / 2K / 4K +3.9
 * / +4.4 / +1.9 % (+2.8 / +2.2 / +2.2 %), D = 64 1K / 2K / 4K / 8K +6.0
 * / +3.9 / +3.9 / +2.4 % (bench/NOTES.md, w24); attn_mma (m8) D = 128 1K
 * +14-22 %, 2K +7-9 %, 4K +0-5 %, D = 64 +9-11 / +7-9 / +4-5 %.  At 48
 * MiB every family still gains (+1.3-3.9 %: FP16PV D = 128 4K, FP8PV and
 * wgmma D = 128 6K, FP16PV D = 64 8K, wgmma D = 64 12K), at 64 MiB wgmma
 * D = 128 8K loses 5.2 %.  attn_mma keeps a gain up to about twice the
 * L2: its 128-row CTAs read each K/V tile for twice the rows of a 64-row
 * wgmma CTA, at half the speed.  Order 1 against order 0 there (H200,
 * same call, two rounds, D = 128): FP16PV 72 / 96 MiB +2.1-3.2 / +0.6 %
 * (end to end +2.4-3.3 / +1.6-2.2 %), 144 / 192 MiB -1.9 to -2.2 / -2.6
 * to -3.3 %; FP8PV fp32+fp16 and pvi8 at 64 / 96 / 128 MiB +0.5-1.2 %;
 * D = 64 at 64-96 MiB within 0.3 % (bench/NOTES.md, the budget rows after
 * m8).  SAGEJIT_TUNE "order=0" / "order=1" forces it off / on for A/B
 * runs. */
#define SJ_HEADS_FIRST_BYTES ((int64_t)32 << 20)

static int causal_heads_first(const sj_context *ctx, const call *c,
                              int64_t n_qblk) {
  if (!c->causal || n_qblk > 65535)
    return 0;
  const int forced = sj_tune_int("order=", 0, 1, -1);
  if (forced >= 0)
    return forced;
  /* INT8 K and 8-bit V (or 16-bit V^T for pv16, the caller's 16-bit V for
   * FP16PV, and for FP8PV what its V mode stores: e4m3 V and its residual
   * for split V and for pvi8+splitv, whose heads may all take split V) of
   * one batch's kv heads */
  const int64_t v_bytes =
      c->plan.accum == SJ_ACCUM_PV16 || c->plan.family == SJ_FAMILY_FP16PV ||
              (c->plan.family == SJ_FAMILY_FP8PV &&
               sj_v_bytes(sj_v_mode(c->plan.accum)) == 2)
          ? 2
          : 1;
  const int64_t l2 = ctx->l2_bytes > 0 ? ctx->l2_bytes : SJ_HEADS_FIRST_BYTES;
  const int64_t budget = c->plan.family == SJ_FAMILY_WGMMA ? l2 : 2 * l2;
  return c->heads_kv * c->seq_kv * c->head_dim * (1 + v_bytes) <= budget;
}

/* The attention kernel's grid x and y for nq Q blocks: (Q blocks, heads),
 * or in heads-first order (heads, Q blocks), for which it returns
 * SJ_F_HEADS_FIRST to add to the kernel's flags. */
static int attn_grid(const sj_context *ctx, const call *c, unsigned nq,
                     unsigned grid[2]) {
  const int hf = causal_heads_first(ctx, c, nq);
  grid[0] = hf ? (unsigned)c->heads_q : nq;
  grid[1] = hf ? nq : (unsigned)c->heads_q;
  return hf ? SJ_F_HEADS_FIRST : 0;
}

static sj_status run_call(sj_context *ctx, const call *c, CUstream stream,
                          int parts) {
  /* The layout is part of validation (a call whose workspace overflows is
   * refused the same way sj_attention_workspace_size refuses it). */
  layout l;
  SJ_FORWARD(make_layout(ctx, c, &l));
  if (!ctx->can_load)
    return sj_fail(ctx, SJ_ERR_NO_DEVICE,
                   "this context has no device (compile-only)");
  const sj_plan *pl = &c->plan;
  CUfunction fn[SJ_KERNELS_MAX];
  SJ_FORWARD(sj_kernels_get(ctx, pl->specs, pl->n_specs, fn));
  if (c->varlen && (c->total_q == 0))
    return SJ_OK; /* no query row: nothing to write */

  CUdeviceptr ws = 0;
  int own_ws = 0;
  size_t *ctl_zero = NULL; /* the context's workspace: its zero prefix */
  if (c->workspace) {
    if ((uintptr_t)c->workspace % WS_ALIGN)
      return sj_fail(ctx, SJ_ERR_WORKSPACE,
                     "workspace must be %d-byte aligned", WS_ALIGN);
    if (c->workspace_size < l.total)
      return sj_fail(ctx, SJ_ERR_WORKSPACE,
                     "workspace has %zu bytes; this call needs %zu",
                     c->workspace_size, l.total);
    ws = (CUdeviceptr)(uintptr_t)c->workspace;
  } else {
    pthread_mutex_lock(&ctx->ws_lock);
    own_ws = 1;
    sj_status st = sj_workspace_get(ctx, stream, l.total, &ws, &ctl_zero);
    if (st != SJ_OK) {
      pthread_mutex_unlock(&ctx->ws_lock);
      return st;
    }
  }

  const int fp8 = pl->family != SJ_FAMILY_FP16PV; /* V into the workspace */
  /* V statistics: the e4m3 scale, or the mean for smooth_v (16-bit V is
   * not scaled) */
  const int v_stats = fp8 && (pl->accum != SJ_ACCUM_PV16 || pl->smooth_v);
  const int need_stats = (pl->smooth_k || v_stats) && (parts & SJ_PART_PRE);
  const int want_lse = c->lse != NULL;
  /* The attention kernel quantizes its own Q rows (a read of Q instead of
   * a read of Q, a write of q8 and its read back): quant_qkv skips Q.  Not
   * for per_block where its 128-row group spans warps the kernel does not
   * reduce over: the mma families' warps, and the wgmma family's 64-row
   * CTAs (D = 64). */
  const int q_fused =
      ctx->q_fuse &&
      (pl->family == SJ_FAMILY_WGMMA
           ? !(pl->quant == SJ_QUANT_PER_BLOCK && pl->wg_consumers <= 1)
           : pl->quant != SJ_QUANT_PER_BLOCK);
  const sj_ptr cu_kv = (sj_ptr)(uintptr_t)c->cu_kv;
  sj_status st = SJ_OK;
  int chained = 0; /* a kernel of this call is queued: chain the next */
  /* kv_finalize folded into kv_stats (SJ_F_FINALIZE, unless SAGEJIT_PREP
   * is 0) needs its per-head counts zero at launch.  A context's workspace
   * keeps them so (each launch zeroes the counts it used; the bytes past
   * this call's counts may hold its data, so a call with more kv heads
   * zeroes them first).  A caller's workspace would need a memset every
   * call (the Python package passes a fresh one each time), and a captured
   * graph may replay after calls that wrote over them: those keep the
   * kv_finalize launch, which needs no zeroed memory. */
  int fold = need_stats && ctx->prep_fuse && ctl_zero != NULL;
  if (fold) {
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    if (ctx->cu->StreamIsCapturing(stream, &cap) != CUDA_SUCCESS ||
        cap != CU_STREAM_CAPTURE_STATUS_NONE)
      fold = 0;
  }
  if (fold && *ctl_zero < l.ctl_bytes)
    st = sj_memset32(ctx, ws, l.ctl_bytes / 4, stream,
                     "zeroing the statistics counts");
  if (ctl_zero)
    *ctl_zero = st != SJ_OK ? 0
                : fold      ? l.ctl_bytes
                            : (*ctl_zero < l.ctl_bytes ? *ctl_zero : l.ctl_bytes);
  /* V read twice (statistics, then quantization) and small enough to stay
   * in the L2 in between: kv_stats marks its V lines evict_last and
   * quant_qkv's last read of them is evict_first, meant to demote them
   * again.  At 1K (B = 4, H = 32) +0.8 % (D = 128) and +1.6 % (D = 64)
   * end to end on the H200, bit-identical output (bench/NOTES.md, p18).
   * SAGEJIT_TUNE "l2v=0" / "l2v=1" forces it off / on (where V statistics
   * run) for A/B runs. */
  const int keep_forced = sj_tune_int("l2v=", 0, 1, -1);
  const int keep_v =
      v_stats && (keep_forced >= 0
                      ? keep_forced
                      : sj_l2_keeps_v(ctx->l2_bytes,
                                      (c->varlen ? c->total_kv : c->batch * c->seq_kv) *
                                          c->heads_kv * c->head_dim * 2));
  if (need_stats && st == SJ_OK) {
    sj_stats_args sa;
    sj_finalize_args fa;
    memset(&sa, 0, sizeof sa);
    memset(&fa, 0, sizeof fa);
    sa.k = (sj_ptr)(uintptr_t)c->k;
    sa.v = (sj_ptr)(uintptr_t)c->v;
    sa.partial = ws + l.partial;
    sa.cu_kv = cu_kv;
    sa.k_sb = c->k_sb;
    sa.k_sh = c->k_sh;
    sa.k_sn = c->k_sn;
    sa.v_sb = c->v_sb;
    sa.v_sh = c->v_sh;
    sa.v_sn = c->v_sn;
    sa.batch = (int)c->batch;
    sa.heads_kv = (int)c->heads_kv;
    sa.seq_kv = (int)c->seq_kv;
    sa.total_kv = (int)c->total_kv;
    sa.head_dim = (int)c->head_dim;
    sa.nchunk = l.nchunk;
    sa.chunk = l.chunk;
    sa.flags = (pl->smooth_k ? SJ_F_K_STATS : 0) | (v_stats ? SJ_F_V_STATS : 0) |
               (keep_v ? SJ_F_L2_KEEP_V : 0);
    sa.k_sample = pl->k_sample;
    fa.partial = ws + l.partial;
    fa.k_mean = ws + l.k_mean;
    fa.v_mean = ws + l.v_mean;
    fa.v_scale = ws + l.v_scale;
    fa.cu_kv = cu_kv;
    fa.batch = (int)c->batch;
    fa.heads_kv = (int)c->heads_kv;
    fa.seq_kv = (int)c->seq_kv;
    fa.total_kv = (int)c->total_kv;
    fa.head_dim = (int)c->head_dim;
    fa.nchunk = l.nchunk;
    fa.v_mode = ws + l.v_mode;
    fa.k_sample = pl->k_sample;
    fa.flags = (pl->smooth_k ? SJ_F_SMOOTH_K : 0) |
               (v_stats ? SJ_F_V_STATS : 0) | (pl->smooth_v ? SJ_F_SMOOTH_V : 0) |
               (pl->accum == SJ_ACCUM_PVI8_SPLITV ? SJ_F_V_AUTO : 0);
    fa.v_scale_max = pl->accum == SJ_ACCUM_FP32_FP16
                         ? 2.25f
                         : (pl->accum == SJ_ACCUM_PVI8 ? 127.f : 448.f);
    if (fold) {
      sa.flags |= SJ_F_FINALIZE;
      sa.ticket = ws;
      sa.fin = fa;
    }
    sj_launch_shape sh = sj_spec_shape(&pl->specs[0]);
    st = sj_launch(ctx, fn[0], (unsigned)l.nchunk, (unsigned)c->heads_kv,
                   (unsigned)c->batch, &sh, stream, &sa, "kv_stats", chained);
    chained = 1;
    if (st == SJ_OK && !fold) {
      sh = sj_spec_shape(&pl->specs[1]);
      st = sj_launch(ctx, fn[1], (unsigned)c->heads_kv, (unsigned)c->batch, 1,
                     &sh, stream, &fa, "kv_finalize", chained);
    }
  }
  if (st == SJ_OK && (parts & SJ_PART_PRE)) {
    sj_quant_args qa;
    memset(&qa, 0, sizeof qa);
    qa.g = l.g;
    qa.q = (sj_ptr)(uintptr_t)c->q;
    qa.k = (sj_ptr)(uintptr_t)c->k;
    qa.v = (sj_ptr)(uintptr_t)c->v;
    qa.q_sb = c->q_sb;
    qa.q_sh = c->q_sh;
    qa.q_sn = c->q_sn;
    qa.k_sb = c->k_sb;
    qa.k_sh = c->k_sh;
    qa.k_sn = c->k_sn;
    qa.v_sb = c->v_sb;
    qa.v_sh = c->v_sh;
    qa.v_sn = c->v_sn;
    qa.q8 = ws + l.q8;
    qa.k8 = ws + l.k8;
    qa.v8 = fp8 ? ws + l.v8 : 0;
    qa.q_scale = ws + l.q_scale;
    qa.k_scale = ws + l.k_scale;
    qa.v_scale = ws + l.v_scale;
    qa.v_mean = ws + l.v_mean;
    qa.k_mean = ws + l.k_mean;
    qa.qk_mean = ws + l.qk_mean;
    qa.v_mode = ws + l.v_mode;
    /* varlen: one more V block, the zeros past the longest sequence */
    qa.n_vblk = fp8 ? l.g.n_kblk + (c->varlen ? 1 : 0) : 0;
    qa.flags = (pl->smooth_k ? SJ_F_SMOOTH_K : 0) |
               (pl->smooth_v ? SJ_F_SMOOTH_V : 0) | (fp8 ? SJ_F_QUANT_V : 0) |
               (want_lse ? SJ_F_LSE : 0) | (q_fused ? SJ_F_Q_FUSED : 0) |
               (keep_v ? SJ_F_L2_KEEP_V : 0);
    qa.q_prescale = 1.0f;
    qa.quant = (int)pl->quant;
    sj_launch_shape sh = sj_spec_shape(&pl->specs[2]);
    /* x: Q blocks (unless fused), K blocks, V blocks; y: query heads (only
     * the first heads_kv have K and V blocks) */
    st = sj_launch(ctx, fn[2],
                   (unsigned)((q_fused ? 0 : l.g.n_qblk) + l.g.n_kblk + qa.n_vblk),
                   (unsigned)(q_fused ? c->heads_kv : c->heads_q),
                   (unsigned)c->batch, &sh, stream, &qa, "quant_qkv", chained);
    chained = 1;
  }
  if (st == SJ_OK && (parts & SJ_PART_ATTN)) {
    sj_attn_args aa;
    memset(&aa, 0, sizeof aa);
    aa.g = l.g;
    aa.q8 = ws + l.q8;
    aa.k8 = ws + l.k8;
    aa.v8 = fp8 ? ws + l.v8 : 0;
    aa.q_scale = ws + l.q_scale;
    aa.k_scale = ws + l.k_scale;
    aa.v_scale = ws + l.v_scale;
    aa.v_mean = ws + l.v_mean;
    aa.qk_mean = ws + l.qk_mean;
    aa.v_mode = ws + l.v_mode;
    aa.v = (sj_ptr)(uintptr_t)c->v;
    aa.o = (sj_ptr)(uintptr_t)c->o;
    aa.lse = (sj_ptr)(uintptr_t)c->lse;
    aa.v_sb = c->v_sb;
    aa.v_sh = c->v_sh;
    aa.v_sn = c->v_sn;
    aa.o_sb = c->o_sb;
    aa.o_sh = c->o_sh;
    aa.o_sn = c->o_sn;
    if (q_fused) {
      aa.q = (sj_ptr)(uintptr_t)c->q;
      aa.q_sb = c->q_sb;
      aa.q_sh = c->q_sh;
      aa.q_sn = c->q_sn;
      aa.k_mean = ws + l.k_mean;
      aa.q_prescale = 1.0f; /* as quant_qkv's */
    }
    aa.sm_scale_log2 = c->sm_scale * 1.4426950408889634f;
    aa.lse_scale = 0.6931471805599453f;
    aa.quant = (int)pl->quant;
    aa.flags = (pl->smooth_v ? SJ_F_SMOOTH_V : 0) |
               (want_lse ? SJ_F_LSE : 0) |
               (want_lse && pl->smooth_k ? SJ_F_SMOOTH_K : 0) |
               (c->causal && c->align == SJ_CAUSAL_BOTTOM_RIGHT ? SJ_F_CAUSAL_BR
                                                                : 0) |
               (q_fused ? SJ_F_Q_FUSED : 0);
    sj_launch_shape sh = sj_spec_shape(&pl->specs[3]);
    if (pl->family == SJ_FAMILY_WGMMA) {
      sj_wgmma_args wa;
      memset(&wa, 0, sizeof wa);
      wa.a = aa;
      st = encode_maps(ctx, c, &l, ws, &wa, wgmma_maps_current);
      /* 64 query rows per consumer warpgroup */
      const int64_t bq = 64 * (int64_t)sj_wg_groups(pl->wg_consumers);
      unsigned grid[2];
      wa.a.flags |= attn_grid(ctx, c, (unsigned)((c->seq_q + bq - 1) / bq), grid);
      if (st == SJ_OK)
        st = sj_launch(ctx, fn[3], grid[0], grid[1], (unsigned)c->batch, &sh,
                       stream, &wa, "attn_wgmma", chained);
    } else {
      unsigned grid[2];
      aa.flags |= attn_grid(ctx, c, (unsigned)l.g.n_qblk, grid);
      /* TMA tiles: the kernel takes its two maps in front of the block */
      sj_wgmma_args wa;
      void *args = &aa;
      if (pl->tma) {
        memset(&wa, 0, sizeof wa);
        wa.a = aa;
        st = encode_maps(ctx, c, &l, ws, &wa, mma_tma_maps);
        args = &wa;
      }
      if (st == SJ_OK)
        st = sj_launch(ctx, fn[3], grid[0], grid[1], (unsigned)c->batch, &sh,
                       stream, args, "attn_mma", chained);
    }
  }
  if (own_ws)
    pthread_mutex_unlock(&ctx->ws_lock);
  return st;
}

sj_status sj_attention_run(sj_context *ctx, const sj_attention_params *params,
                           CUstream stream, int parts) {
  if (!ctx)
    return SJ_ERR_INVALID_ARGUMENT;
  call c;
  SJ_FORWARD(validate(ctx, params, &c, 0));
  return run_call(ctx, &c, stream, parts);
}

sj_status sj_attention(sj_context *ctx, const sj_attention_params *params,
                       struct CUstream_st *stream) {
  return sj_attention_run(ctx, params, stream, SJ_PART_PRE | SJ_PART_ATTN);
}

sj_status sj_attention_varlen(sj_context *ctx, const sj_varlen_params *params,
                              struct CUstream_st *stream) {
  if (!ctx)
    return SJ_ERR_INVALID_ARGUMENT;
  call c;
  SJ_FORWARD(validate_varlen(ctx, params, &c, stream));
  return run_call(ctx, &c, stream, SJ_PART_PRE | SJ_PART_ATTN);
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
  sj_spec s;
  memset(&s, 0, sizeof s);
  s.kind = SJ_KERNEL_REFERENCE;
  s.dtype = c.dtype;
  s.head_dim = (int)c.head_dim;
  CUfunction fn;
  SJ_FORWARD(sj_kernel_get(ctx, &s, &fn));
  sj_ref_args ra;
  memset(&ra, 0, sizeof ra);
  ra.q = (sj_ptr)(uintptr_t)c.q;
  ra.k = (sj_ptr)(uintptr_t)c.k;
  ra.v = (sj_ptr)(uintptr_t)c.v;
  ra.o = (sj_ptr)(uintptr_t)out;
  ra.lse = (sj_ptr)(uintptr_t)c.lse;
  ra.q_sb = c.q_sb;
  ra.q_sh = c.q_sh;
  ra.q_sn = c.q_sn;
  ra.k_sb = c.k_sb;
  ra.k_sh = c.k_sh;
  ra.k_sn = c.k_sn;
  ra.v_sb = c.v_sb;
  ra.v_sh = c.v_sh;
  ra.v_sn = c.v_sn;
  ra.batch = (int)c.batch;
  ra.heads_q = (int)c.heads_q;
  ra.heads_kv = (int)c.heads_kv;
  ra.seq_q = (int)c.seq_q;
  ra.seq_kv = (int)c.seq_kv;
  ra.head_dim = (int)c.head_dim;
  ra.causal = c.causal;
  ra.causal_offset = c.causal && c.align == SJ_CAUSAL_BOTTOM_RIGHT
                         ? (int)(c.seq_kv - c.seq_q)
                         : 0;
  ra.sm_scale = c.sm_scale;
  sj_launch_shape sh = sj_spec_shape(&s);
  const unsigned rows_per_cta = 16; /* REF_WARPS * REF_ROWS */
  return sj_launch(ctx, fn,
                   (unsigned)((c.seq_q + rows_per_cta - 1) / rows_per_cta),
                   (unsigned)c.heads_q, (unsigned)c.batch, &sh, stream, &ra,
                   "reference_attn", 0);
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

void sj_varlen_params_init(sj_varlen_params *p) {
  if (!p)
    return;
  memset(p, 0, sizeof *p);
  p->dtype = SJ_DTYPE_FP16;
  p->smooth_k = -1;
  p->smooth_v = -1;
}
