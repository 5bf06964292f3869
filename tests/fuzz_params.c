/*
 * fuzz_params.c -- libFuzzer target over parameter validation:
 * sj_attention, sj_attention_workspace_size, sj_attention_reference and
 * (once the library has it) sj_attention_varlen and its workspace size.
 *
 * The calls go to compile-only contexts (no device, no cache; targets
 * sm_90a, sm_80 and compute_120), which validate their input and then
 * answer SJ_ERR_NO_DEVICE for a valid call.  Nothing is ever launched, so
 * the device pointers can be fake: they must never be dereferenced (ASan
 * reports it if they are).  Host-side inputs (the varlen host prefix sums)
 * are real heap arrays of exactly the documented length.
 *
 * An input is a list of mutations of a valid baseline call, so that the
 * fuzzer reaches every check, not only the first: one byte picks a field,
 * the next bytes its new value (sizes near overflow, garbage enums,
 * unaligned, NULL, aliased and near-the-top pointers, NaN scales...).
 *
 * Checked for every call, besides "no crash, no leak, no undefined
 * behaviour, no read of a fake pointer":
 *  - the status is a known sj_status, and one validation can give
 *    (INVALID_ARGUMENT, UNSUPPORTED, NO_DEVICE); never SJ_OK without a
 *    device;
 *  - an error comes with a non-empty sj_context_last_error();
 *  - the params struct is not modified (it is const);
 *  - the workspace size call agrees with the call itself (SJ_OK exactly
 *    when the call reached the device check), and the size it gives is at
 *    least the INT8 copies of Q and K, computed here in 128-bit arithmetic
 *    (a wrapped size_t would hand kernels a too-small workspace);
 *  - a call that passes validation satisfies the documented rules
 *    (sizes >= 1, heads_q a multiple of heads_kv, supported head_dim,
 *    aligned non-NULL tensors, sm_scale 0 or positive finite, ...),
 *    re-derived here independently of the library's code.
 *
 * sj_attention_varlen is referenced weakly: until the library defines it
 * the varlen half is skipped; SJ_ERR_UNSUPPORTED from it is tolerated.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "sagejit.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Weak references: NULL while the library does not define them. */
#pragma weak sj_attention_varlen
#pragma weak sj_attention_varlen_workspace_size
#pragma weak sj_varlen_params_init

/* Two library bugs this target found are fixed; their reproducers stay in
 * tests/fuzz-corpus/params/known-* as regression seeds:
 *  1. validate_varlen computed INT32_MAX / 2 - 128 * batch before checking
 *     batch (signed overflow for huge batches).
 *  2. make_layout sized the workspace in size_t without overflow checks,
 *     so inputs with zero batch/head strides at huge sizes wrapped.
 */

#define N_CTX 3
static sj_context *g_ctx[N_CTX];
static const char *const k_targets[N_CTX] = {"sm_90a", "sm_80",
                                             "compute_120"};

static void destroy_contexts(void) {
  for (int i = 0; i < N_CTX; i++)
    sj_context_destroy(g_ctx[i]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  for (int i = 0; i < N_CTX; i++) {
    sj_config cfg;
    sj_config_init(&cfg);
    cfg.device = SJ_DEVICE_NONE;
    cfg.target = k_targets[i];
    cfg.cache_disabled = 1;
    cfg.log_level = SJ_LOG_OFF;
    if (sj_context_create(&g_ctx[i], &cfg) != SJ_OK) {
      fprintf(stderr, "fuzz_params: context for %s: %s\n", k_targets[i],
              sj_context_create_error());
      abort();
    }
  }
  atexit(destroy_contexts);
  return 0;
}

/* ------------------------------------------------------------- decoding */

typedef struct rd {
  const uint8_t *p;
  size_t n;
} rd;

static uint8_t u8(rd *r) {
  if (!r->n)
    return 0;
  r->n--;
  return *r->p++;
}

static uint64_t uN(rd *r, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++)
    v |= (uint64_t)u8(r) << (8 * i);
  return v;
}

static int64_t dec_size(rd *r) {
  static const int64_t interesting[] = {
      0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129,
      255, 256, 257, 1000, 4095, 4096, 4097, 32767, 32768, 65535, 65536,
      65537, INT32_MAX / 2 - 1, INT32_MAX / 2, INT32_MAX / 2 + 1,
      INT32_MAX - 1024, INT32_MAX - 1023, INT32_MAX, (int64_t)INT32_MAX + 1,
      (int64_t)1 << 32, (int64_t)1 << 40, (int64_t)1 << 48, (int64_t)1 << 56,
      (int64_t)1 << 62, INT64_MAX / 2, INT64_MAX - 7, INT64_MAX, -1, -2, -8,
      -128, INT32_MIN, INT64_MIN, INT64_MIN + 1};
  const uint8_t sel = u8(r);
  switch (sel % 6) {
  case 0:
    return interesting[u8(r) % (sizeof interesting / sizeof *interesting)];
  case 1:
    return (int64_t)u8(r) - 2;
  case 2:
    return (int64_t)uN(r, 2);
  case 3:
    return (int64_t)uN(r, 8);
  case 4:
    return (int64_t)((uint64_t)1 << (u8(r) % 63));
  default: { /* around a power of two, a multiple of 8 more often than not */
    const int64_t base = (int64_t)((uint64_t)1 << (u8(r) % 62));
    const int64_t d = (int64_t)(int8_t)u8(r);
    return base + (sel & 0x40 ? d * 8 : d);
  }
  }
}

static int dec_enum(rd *r) {
  const uint8_t sel = u8(r);
  if (sel % 4)
    return (int)(sel >> 2) % 9 - 2; /* -2 .. 6 */
  return (int)(uint32_t)uN(r, 4);
}

static float dec_float(rd *r) {
  static const float interesting[] = {0.f,      1.f,     0.125f, -0.125f,
                                      -0.f,     NAN,     -NAN,   INFINITY,
                                      -INFINITY, 1e-45f, 1.17549435e-38f,
                                      3.4028235e38f,     1e-30f, 1e30f};
  const uint8_t sel = u8(r);
  if (sel & 1)
    return interesting[(sel >> 1) % (sizeof interesting / sizeof *interesting)];
  uint32_t bits = (uint32_t)uN(r, 4);
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Fake device addresses, far apart, 256-byte aligned. */
#define FAKE(i) ((uintptr_t)0x100000000000ull * (uintptr_t)((i) + 1))

static const void *dec_ptr(rd *r, const void *const *others, int n_others) {
  const uint8_t sel = u8(r);
  switch (sel % 7) {
  case 0:
    return NULL;
  case 1:
    return (const void *)FAKE(u8(r) % 8);
  case 2: /* unaligned */
    return (const void *)(FAKE(u8(r) % 8) + 1 + u8(r) % 255);
  case 3: /* near the top of the address space */
    return (const void *)(UINTPTR_MAX - (uintptr_t)uN(r, 3));
  case 4:
    return (const void *)(uintptr_t)uN(r, 8);
  case 5: /* aliasing another tensor, at an offset */
    if (n_others)
      return (const void *)((uintptr_t)others[u8(r) % n_others] +
                            (uintptr_t)uN(r, 2) * 16);
    return (const void *)FAKE(7);
  default: /* small, aligned: the bottom of the address space */
    return (const void *)((uintptr_t)u8(r) * 16);
  }
}

/* --------------------------------------------------------------- checks */

static int known_status(sj_status st) {
#define SJ_X_(name, value, text) (st) == name ||
  return SJ_STATUS_MAP(SJ_X_) 0;
#undef SJ_X_
}

static void die(const char *what, sj_status st, const char *detail) {
  fprintf(stderr, "fuzz_params: %s: status %d (%s): '%s'\n", what, (int)st,
          sj_status_name(st), detail ? detail : "");
  abort();
}

/* A validation outcome: known, one of the three, and explained. */
static void check_outcome(sj_context *ctx, sj_status st, const char *what,
                          int allow_ok) {
  if (!known_status(st))
    die(what, st, "unknown status");
  if (st == SJ_OK) {
    if (!allow_ok)
      die(what, st, "SJ_OK from a context without a device");
    return;
  }
  if (st != SJ_ERR_INVALID_ARGUMENT && st != SJ_ERR_UNSUPPORTED &&
      st != SJ_ERR_NO_DEVICE)
    die(what, st, sj_context_last_error(ctx));
  const char *e = sj_context_last_error(ctx);
  if (!e || !*e)
    die(what, st, "empty last-error message");
  if (strlen(e) >= 1024)
    die(what, st, "unterminated last-error message");
}

static int head_dim_supported(int64_t d) {
  return d == 32 || d == 64 || d == 96 || d == 128 || d == 256;
}

static int aligned16(const void *p) {
  return p && (uintptr_t)p % 16 == 0;
}

/* The documented rules a dense call that passed validation satisfies. */
static void check_valid_dense(const sj_attention_params *p) {
  const int ok =
      (p->dtype == SJ_DTYPE_FP16 || p->dtype == SJ_DTYPE_BF16) &&
      (p->layout == SJ_LAYOUT_HND || p->layout == SJ_LAYOUT_NHD) &&
      p->batch >= 1 && p->batch <= 65535 && p->heads_q >= 1 &&
      p->heads_kv >= 1 && p->heads_q <= 65535 && p->heads_kv <= 65535 &&
      p->seq_q >= 1 && p->seq_kv >= 1 && p->seq_q <= INT32_MAX &&
      p->seq_kv <= INT32_MAX && p->heads_q % p->heads_kv == 0 &&
      head_dim_supported(p->head_dim) && aligned16(p->q) &&
      aligned16(p->k) && aligned16(p->v) && aligned16(p->o) &&
      (p->causal == 0 || p->causal == 1) &&
      (p->causal_align == SJ_CAUSAL_TOP_LEFT ||
       p->causal_align == SJ_CAUSAL_BOTTOM_RIGHT) &&
      (p->sm_scale == 0.f || (isfinite(p->sm_scale) && p->sm_scale > 0.f)) &&
      (!p->lse || (uintptr_t)p->lse % 4 == 0) && p->smooth_k >= -1 &&
      p->smooth_k <= 1 && p->smooth_v >= -1 && p->smooth_v <= 1 &&
      (int)p->family >= 0 && p->family <= SJ_FAMILY_WGMMA &&
      (int)p->qk_quant >= 0 && p->qk_quant <= SJ_QUANT_PER_THREAD &&
      (int)p->pv_accum >= 0 && p->pv_accum <= SJ_ACCUM_PVI8_SPLITV;
  if (!ok)
    die("sj_attention accepted a call that breaks a documented rule",
        SJ_ERR_NO_DEVICE, "");
}

/* The INT8 copies of Q and K alone: a floor for any workspace size. */
static void check_ws_floor(size_t bytes, int64_t rows_q, int64_t heads_q,
                           int64_t rows_kv, int64_t heads_kv, int64_t batch,
                           int64_t d, const char *what) {
  if (rows_q < 0 || rows_kv < 0 || heads_q < 0 || heads_kv < 0 || batch < 0 ||
      d < 0)
    die(what, SJ_OK, "negative size accepted");
  const unsigned __int128 floor =
      (unsigned __int128)batch * (uint64_t)heads_q * (uint64_t)rows_q *
          (uint64_t)d +
      (unsigned __int128)batch * (uint64_t)heads_kv * (uint64_t)rows_kv *
          (uint64_t)d;
  if ((unsigned __int128)bytes < floor) {
    char msg[160];
    snprintf(msg, sizeof msg,
             "workspace %zu bytes is below the INT8 Q and K alone "
             "(%.4g bytes): size arithmetic wrapped",
             bytes, (double)floor);
    die(what, SJ_OK, msg);
  }
}

/* ---------------------------------------------------------- dense calls */

static struct CUstream_st *dec_stream(rd *r) {
  switch (u8(r) % 4) {
  case 0:
    return NULL;
  case 1:
    return (struct CUstream_st *)(uintptr_t)1; /* CU_STREAM_LEGACY */
  case 2:
    return (struct CUstream_st *)(uintptr_t)2; /* CU_STREAM_PER_THREAD */
  default:
    return (struct CUstream_st *)(uintptr_t)(FAKE(9) + 0x40);
  }
}

static void dense_baseline(sj_attention_params *p) {
  sj_attention_params_init(p);
  p->batch = 2;
  p->heads_q = 8;
  p->heads_kv = 2;
  p->seq_q = 128;
  p->seq_kv = 320;
  p->head_dim = 128;
  p->q = (const void *)FAKE(0);
  p->k = (const void *)FAKE(1);
  p->v = (const void *)FAKE(2);
  p->o = (void *)FAKE(3);
}

static void mutate_dense(rd *r, sj_attention_params *p) {
  const void *others[4] = {p->q, p->k, p->v, p->o};
  sj_strides *strides[4] = {&p->q_stride, &p->k_stride, &p->v_stride,
                            &p->o_stride};
  const uint8_t field = u8(r);
  switch (field % 28) {
  case 0: p->dtype = (sj_dtype)dec_enum(r); break;
  case 1: p->layout = (sj_layout)dec_enum(r); break;
  case 2: p->batch = dec_size(r); break;
  case 3: p->heads_q = dec_size(r); break;
  case 4: p->heads_kv = dec_size(r); break;
  case 5: p->seq_q = dec_size(r); break;
  case 6: p->seq_kv = dec_size(r); break;
  case 7: p->head_dim = dec_size(r); break;
  case 8: p->q = dec_ptr(r, others, 4); break;
  case 9: p->k = dec_ptr(r, others, 4); break;
  case 10: p->v = dec_ptr(r, others, 4); break;
  case 11: p->o = (void *)(uintptr_t)dec_ptr(r, others, 4); break;
  case 12: case 13: case 14: case 15: { /* one stride of one tensor */
    sj_strides *s = strides[field % 4];
    const uint8_t which = u8(r);
    const int64_t v = dec_size(r);
    if (which % 3 == 0)
      s->batch = v;
    else if (which % 3 == 1)
      s->head = v;
    else
      s->seq = v;
    break;
  }
  case 16: { /* a whole plausible stride set: padded rows */
    sj_strides *s = strides[u8(r) % 4];
    const int64_t pad = (int64_t)(u8(r) % 4) * 8;
    const int64_t d = p->head_dim > 0 && p->head_dim < 4096 ? p->head_dim : 64;
    const int64_t n = p->seq_kv > 0 && p->seq_kv < 1 << 20 ? p->seq_kv : 64;
    s->seq = d + pad;
    s->head = (d + pad) * n;
    s->batch = s->head * 8;
    break;
  }
  case 17: p->causal = dec_enum(r); break;
  case 18: p->causal_align = (sj_causal_align)dec_enum(r); break;
  case 19: p->sm_scale = dec_float(r); break;
  case 20: p->lse = (float *)(uintptr_t)dec_ptr(r, others, 4); break;
  case 21: p->family = (sj_family)dec_enum(r); break;
  case 22: p->qk_quant = (sj_quant_gran)dec_enum(r); break;
  case 23: p->pv_accum = (sj_pv_accum)dec_enum(r); break;
  case 24: p->smooth_k = dec_enum(r); break;
  case 25: p->smooth_v = dec_enum(r); break;
  case 26: p->workspace = (void *)(uintptr_t)dec_ptr(r, others, 4); break;
  default: p->workspace_size = (size_t)uN(r, 1 + u8(r) % 8); break;
  }
}

static void run_dense(sj_context *ctx, rd *r) {
  sj_attention_params p;
  dense_baseline(&p);
  const int n_mut = u8(r) % 12;
  for (int i = 0; i < n_mut && r->n; i++)
    mutate_dense(r, &p);
  struct CUstream_st *stream = dec_stream(r);
  const sj_attention_params before = p;

  sj_clear_error(ctx);
  const sj_status st = sj_attention(ctx, &p, stream);
  check_outcome(ctx, st, "sj_attention", 0);
  if (memcmp(&before, &p, sizeof p))
    die("sj_attention modified its params", st, "");
  if (st == SJ_ERR_NO_DEVICE)
    check_valid_dense(&p);

  sj_clear_error(ctx);
  size_t bytes = 0;
  const sj_status ws = sj_attention_workspace_size(ctx, &p, &bytes);
  check_outcome(ctx, ws, "sj_attention_workspace_size", 1);
  if ((ws == SJ_OK) != (st == SJ_ERR_NO_DEVICE) ||
      (ws != SJ_OK && ws != st))
    die("sj_attention_workspace_size disagrees with sj_attention", ws,
        sj_status_name(st));
  if (ws == SJ_OK)
    check_ws_floor(bytes, p.seq_q, p.heads_q, p.seq_kv, p.heads_kv, p.batch,
                   p.head_dim, "sj_attention_workspace_size");

  sj_clear_error(ctx);
  float *out = (float *)(uintptr_t)FAKE(5);
  const sj_status rs = sj_attention_reference(ctx, &p, out, stream);
  check_outcome(ctx, rs, "sj_attention_reference", 0);
  if (memcmp(&before, &p, sizeof p))
    die("sj_attention_reference modified its params", rs, "");
}

/* --------------------------------------------------------- varlen calls */

typedef struct varlen_in {
  sj_varlen_params p;
  int32_t *hq, *hk; /* owned host prefix sums */
  int64_t n_hq, n_hk; /* their entries */
} varlen_in;

/* Host arrays the API may read: batch + 1 entries when batch is in range,
 * else one (the library must refuse the batch before reading more). */
static int64_t cu_entries(int64_t batch) {
  return batch >= 1 && batch <= 65535 ? batch + 1 : 1;
}

/* Resizes an owned array to n entries, repeating its last value. */
static int32_t *cu_resize(int32_t *cu, int64_t have, int64_t n) {
  int32_t *out = realloc(cu, (size_t)n * sizeof *out);
  if (!out)
    abort();
  for (int64_t i = have; i < n; i++)
    out[i] = have > 0 ? out[have - 1] : 0;
  return out;
}

/* A host prefix-sum array of exactly batch + 1 entries (one entry when
 * batch is out of range: the library must reject batch first). */
static int32_t *make_cu(rd *r, int64_t batch, int64_t max, int64_t *total) {
  const int64_t n = cu_entries(batch);
  int32_t *cu = malloc((size_t)n * sizeof *cu);
  if (!cu)
    abort();
  const uint8_t mode = u8(r);
  int64_t acc = 0;
  cu[0] = 0;
  for (int64_t i = 1; i < n; i++) {
    int64_t len;
    if (mode % 4 == 3) { /* garbage */
      cu[i] = (int32_t)(uint32_t)uN(r, 4);
      continue;
    }
    len = max > 0 ? (int64_t)(uN(r, 2) % ((uint64_t)max + 1)) : 0;
    if (mode % 4 == 2 && i == n / 2)
      len = -(int64_t)(u8(r) % 5) - 1; /* not monotone */
    acc += len;
    if (acc > INT32_MAX)
      acc = INT32_MAX;
    cu[i] = (int32_t)acc;
  }
  if (mode % 4 == 1 && n > 1)
    cu[0] = (int32_t)(u8(r) % 7) - 3; /* first entry not 0 */
  if (mode % 4 != 3 && total)
    *total = acc; /* consistent totals unless mutated later */
  return cu;
}

static void varlen_baseline(varlen_in *v) {
  sj_varlen_params *p = &v->p;
  sj_varlen_params_init(p);
  p->batch = 3;
  p->heads_q = 8;
  p->heads_kv = 2;
  p->head_dim = 64;
  p->total_q = 300;
  p->total_kv = 500;
  p->max_seqlen_q = 200;
  p->max_seqlen_kv = 250;
  p->cu_seqlens_q = (const int32_t *)FAKE(6);
  p->cu_seqlens_kv = (const int32_t *)(FAKE(6) + 0x1000);
  p->q = (const void *)FAKE(0);
  p->k = (const void *)FAKE(1);
  p->v = (const void *)FAKE(2);
  p->o = (void *)FAKE(3);
  v->hq = malloc(4 * sizeof *v->hq);
  v->hk = malloc(4 * sizeof *v->hk);
  if (!v->hq || !v->hk)
    abort();
  v->n_hq = v->n_hk = 4;
  const int32_t q[4] = {0, 100, 300, 300}, k[4] = {0, 250, 300, 500};
  memcpy(v->hq, q, sizeof q);
  memcpy(v->hk, k, sizeof k);
  p->cu_seqlens_q_host = v->hq;
  p->cu_seqlens_kv_host = v->hk;
}

static void mutate_varlen(rd *r, varlen_in *v) {
  sj_varlen_params *p = &v->p;
  const void *others[4] = {p->q, p->k, p->v, p->o};
  const uint8_t field = u8(r);
  switch (field % 34) {
  case 0: p->dtype = (sj_dtype)dec_enum(r); break;
  case 1: p->batch = dec_size(r); break;
  case 2: p->heads_q = dec_size(r); break;
  case 3: p->heads_kv = dec_size(r); break;
  case 4: p->head_dim = dec_size(r); break;
  case 5: p->total_q = dec_size(r); break;
  case 6: p->total_kv = dec_size(r); break;
  case 7: p->max_seqlen_q = dec_size(r); break;
  case 8: p->max_seqlen_kv = dec_size(r); break;
  case 9: p->cu_seqlens_q = dec_ptr(r, others, 4); break;
  case 10: p->cu_seqlens_kv = dec_ptr(r, others, 4); break;
  case 11: case 12: { /* new host arrays for the current batch */
    const int is_q = field % 34 == 11;
    int64_t total = 0;
    int32_t *cu = make_cu(r, p->batch,
                          is_q ? p->max_seqlen_q : p->max_seqlen_kv, &total);
    if (is_q) {
      free(v->hq);
      v->hq = cu;
      v->n_hq = cu_entries(p->batch);
      p->cu_seqlens_q_host = cu;
      p->total_q = total;
    } else {
      free(v->hk);
      v->hk = cu;
      v->n_hk = cu_entries(p->batch);
      p->cu_seqlens_kv_host = cu;
      p->total_kv = total;
    }
    break;
  }
  case 13: p->cu_seqlens_q_host = u8(r) % 2 ? v->hq : NULL; break;
  case 14: p->cu_seqlens_kv_host = u8(r) % 2 ? v->hk : NULL; break;
  case 15: p->trust_cu_seqlens = dec_enum(r); break;
  case 16: p->q = dec_ptr(r, others, 4); break;
  case 17: p->k = dec_ptr(r, others, 4); break;
  case 18: p->v = dec_ptr(r, others, 4); break;
  case 19: p->o = (void *)(uintptr_t)dec_ptr(r, others, 4); break;
  case 20: p->q_stride_token = dec_size(r); break;
  case 21: p->q_stride_head = dec_size(r); break;
  case 22: p->k_stride_token = dec_size(r); break;
  case 23: p->k_stride_head = dec_size(r); break;
  case 24: p->v_stride_token = dec_size(r); break;
  case 25: p->v_stride_head = dec_size(r); break;
  case 26: p->o_stride_token = dec_size(r); break;
  case 27: p->o_stride_head = dec_size(r); break;
  case 28: p->causal = dec_enum(r); break;
  case 29: p->causal_align = (sj_causal_align)dec_enum(r); break;
  case 30: p->sm_scale = dec_float(r); break;
  case 31: p->lse = (float *)(uintptr_t)dec_ptr(r, others, 4); break;
  case 32: {
    const uint8_t which = u8(r);
    const int e = dec_enum(r);
    if (which % 5 == 0)
      p->family = (sj_family)e;
    else if (which % 5 == 1)
      p->qk_quant = (sj_quant_gran)e;
    else if (which % 5 == 2)
      p->pv_accum = (sj_pv_accum)e;
    else if (which % 5 == 3)
      p->smooth_k = e;
    else
      p->smooth_v = e;
    break;
  }
  default:
    if (u8(r) % 2)
      p->workspace = (void *)(uintptr_t)dec_ptr(r, others, 4);
    else
      p->workspace_size = (size_t)uN(r, 1 + u8(r) % 8);
    break;
  }
}

static void run_varlen(sj_context *ctx, rd *r) {
  if (!sj_attention_varlen || !sj_attention_varlen_workspace_size ||
      !sj_varlen_params_init)
    return;
  varlen_in v;
  memset(&v, 0, sizeof v);
  varlen_baseline(&v);
  const int n_mut = u8(r) % 12;
  for (int i = 0; i < n_mut && r->n; i++)
    mutate_varlen(r, &v);
  /* The host arrays given hold exactly what the API may read. */
  const int64_t n_cu = cu_entries(v.p.batch);
  const int q_host = v.p.cu_seqlens_q_host == v.hq,
            k_host = v.p.cu_seqlens_kv_host == v.hk;
  if (v.n_hq != n_cu) {
    v.hq = cu_resize(v.hq, v.n_hq, n_cu);
    v.n_hq = n_cu;
  }
  if (v.n_hk != n_cu) {
    v.hk = cu_resize(v.hk, v.n_hk, n_cu);
    v.n_hk = n_cu;
  }
  v.p.cu_seqlens_q_host = q_host ? v.hq : NULL;
  v.p.cu_seqlens_kv_host = k_host ? v.hk : NULL;
  struct CUstream_st *stream = dec_stream(r);
  const sj_varlen_params before = v.p;
  /* detect writes through the const host pointers */
  const size_t hq_n = q_host ? (size_t)n_cu : 0;
  int32_t *hq_copy = hq_n ? malloc(hq_n * sizeof *hq_copy) : NULL;
  if (hq_copy)
    memcpy(hq_copy, v.hq, hq_n * sizeof *hq_copy);

  sj_clear_error(ctx);
  const sj_status st = sj_attention_varlen(ctx, &v.p, stream);
  check_outcome(ctx, st, "sj_attention_varlen", 0);
  if (memcmp(&before, &v.p, sizeof v.p))
    die("sj_attention_varlen modified its params", st, "");
  if (hq_copy && memcmp(hq_copy, v.hq, hq_n * sizeof *hq_copy))
    die("sj_attention_varlen wrote to cu_seqlens_q_host", st, "");

  sj_clear_error(ctx);
  size_t bytes = 0;
  const sj_status ws = sj_attention_varlen_workspace_size(ctx, &v.p, &bytes);
  check_outcome(ctx, ws, "sj_attention_varlen_workspace_size", 1);
  if (ws == SJ_OK)
    check_ws_floor(bytes, v.p.total_q, v.p.heads_q, v.p.total_kv,
                   v.p.heads_kv, 1, v.p.head_dim,
                   "sj_attention_varlen_workspace_size");
  /* Sizing reads no device memory, so it may accept what the call itself
   * could only refuse after reading device prefix sums; the reverse --
   * a call that got as far as the device check while sizing refuses --
   * must not happen. */
  if (st == SJ_ERR_NO_DEVICE && ws != SJ_OK && ws != SJ_ERR_UNSUPPORTED)
    die("sj_attention_varlen_workspace_size refuses a call that validated",
        ws, sj_context_last_error(ctx));
  free(hq_copy);
  free(v.hq);
  free(v.hk);
}

/* ---------------------------------------------------------------- entry */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rd r = {data, size};
  const uint8_t head = u8(&r);
  sj_context *ctx = g_ctx[head % N_CTX];
  /* status texts of any code, valid or not */
  const sj_status any = (sj_status)(int)(int32_t)uN(&r, 1);
  if (!sj_status_string(any) || !sj_status_name(any))
    abort();
  if (head & 0x80)
    run_varlen(ctx, &r);
  else
    run_dense(ctx, &r);
  return 0;
}
