/*
 * sagejit.h -- the public API of sagejit.
 *
 * If a function, type or macro does not appear in this file, it is not a
 * published API.  Everything here is C11, needs no CUDA header to compile
 * (streams are declared as `struct CUstream_st *`, the same type as CUstream
 * and cudaStream_t), and has no link-time dependency on libcuda or libnvrtc:
 * both are opened at run time.
 *
 * Conventions
 *  - Every call returns an sj_status.  SJ_OK is 0; everything else is an error
 *    whose text sj_status_string() gives.  When a call fails, its outputs are
 *    left untouched, nothing is launched on any stream and no cache row is
 *    written, unless the function's comment says otherwise.
 *  - The detail of the last error of a context is kept in that context:
 *    sj_context_last_error().  The string stays valid until the next call on
 *    the same context from the same thread... or any thread: copy it if you
 *    need it later.
 *  - A context is thread-safe.  Several threads may call sj_attention() on one
 *    context at once; a kernel that two threads need is compiled once.
 *  - The library never prints, never exits and never aborts.  Diagnostics go
 *    to the log callback of the config, or to stderr only when the
 *    environment variable SAGEJIT_LOG is set (error|warn|info|debug).
 */
#ifndef SAGEJIT_H
#define SAGEJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA stream type (CUstream and cudaStream_t are pointers to it). */
struct CUstream_st;

#if defined(_WIN32)
#define SJ_API __declspec(dllexport)
#elif defined(__GNUC__)
#define SJ_API __attribute__((visibility("default")))
#else
#define SJ_API
#endif

/* ---------------------------------------------------------------- versions */

#define SAGEJIT_VERSION_MAJOR 0
#define SAGEJIT_VERSION_MINOR 1
#define SAGEJIT_VERSION_PATCH 0
#define SAGEJIT_VERSION_STRING "0.1.0"
/* major * 1000000 + minor * 1000 + patch */
#define SAGEJIT_VERSION_NUMBER                                                 \
  (SAGEJIT_VERSION_MAJOR * 1000000 + SAGEJIT_VERSION_MINOR * 1000 +            \
   SAGEJIT_VERSION_PATCH)

/* The library's own version, to detect a header/library mismatch. */
SJ_API int sj_version_number(void);
SJ_API const char *sj_version(void);

/* ------------------------------------------------------------------ status */

/* X(name, value, text).  The values are stable: they never change meaning. */
#define SJ_STATUS_MAP(X)                                                       \
  X(SJ_OK, 0, "success")                                                       \
  X(SJ_ERR_INVALID_ARGUMENT, 1, "invalid argument")                            \
  X(SJ_ERR_UNSUPPORTED, 2, "valid but not supported by this build or device")  \
  X(SJ_ERR_NO_DRIVER, 3, "CUDA driver library not found or unusable")          \
  X(SJ_ERR_NO_NVRTC, 4, "NVRTC library not found or unusable")                 \
  X(SJ_ERR_NO_DEVICE, 5, "no such CUDA device")                                \
  X(SJ_ERR_CUDA, 6, "a CUDA driver call failed")                               \
  X(SJ_ERR_COMPILE, 7, "kernel compilation failed")                            \
  X(SJ_ERR_OUT_OF_MEMORY, 8, "out of memory")                                  \
  X(SJ_ERR_CACHE, 9, "kernel cache unavailable or failed")                     \
  X(SJ_ERR_IO, 10, "file input/output failed")                                 \
  X(SJ_ERR_MISUSE, 11, "API misuse")                                           \
  X(SJ_ERR_WORKSPACE, 12, "workspace too small or misaligned")                 \
  X(SJ_ERR_INTERNAL, 13, "internal error")                                     \
  X(SJ_ERR_BAD_FILE, 14, "malformed or untrusted file")

typedef enum sj_status {
#define SJ_X_(name, value, text) name = value,
  SJ_STATUS_MAP(SJ_X_)
#undef SJ_X_
} sj_status;

/* Static text of a status; never NULL ("unknown status" for unknown codes). */
SJ_API const char *sj_status_string(sj_status st);
/* The enumerator's name ("SJ_ERR_CUDA"); never NULL. */
SJ_API const char *sj_status_name(sj_status st);

/* ----------------------------------------------------------------- logging */

typedef enum sj_log_level {
  SJ_LOG_OFF = 0,
  SJ_LOG_ERROR = 1,
  SJ_LOG_WARN = 2,
  SJ_LOG_INFO = 3,
  SJ_LOG_DEBUG = 4
} sj_log_level;

/* Called with one complete line (no trailing newline).  May be called from
 * any thread that uses the context, including warm worker threads and the
 * threads a call resolves its missing kernels on; calls are serialized per
 * context. */
typedef void (*sj_log_fn)(void *user, sj_log_level level, const char *line);

/* ------------------------------------------------------------------- enums */

typedef enum sj_dtype { SJ_DTYPE_FP16 = 1, SJ_DTYPE_BF16 = 2 } sj_dtype;

/* HND = [batch, heads, seq, dim]; NHD = [batch, seq, heads, dim].  The layout
 * only gives the default strides; explicit strides override it. */
typedef enum sj_layout { SJ_LAYOUT_HND = 1, SJ_LAYOUT_NHD = 2 } sj_layout;

/* Kernel families.  AUTO picks the default for the device (docs/kernels.md).
 *  FP16PV: INT8 Q.K^T + FP16 P.V, mma.sync (default on sm80/86/87/88)
 *  FP8PV:  INT8 Q.K^T + FP8 e4m3 P.V, mma.sync (default on sm89, sm100,
 *          sm103, sm110, sm120, sm121; needs sm89 or newer)
 *  WGMMA:  INT8 Q.K^T + INT8 or FP8 e4m3 P.V, wgmma + TMA, warp
 *          specialized (default on sm90; sm_90a only).  Head dims 64, 128,
 *          256; fp32+fp32, fp32+fp32+splitv, pv16, pvi8 and pvi8+splitv
 *          (its default) accumulation; under AUTO other combinations fall
 *          back to FP8PV. */
typedef enum sj_family {
  SJ_FAMILY_AUTO = 0,
  SJ_FAMILY_FP16PV = 1,
  SJ_FAMILY_FP8PV = 2,
  SJ_FAMILY_WGMMA = 3
} sj_family;

/* Q/K INT8 quantization granularity (docs/kernels.md). */
typedef enum sj_quant_gran {
  SJ_QUANT_DEFAULT = 0,
  SJ_QUANT_PER_BLOCK = 1,
  SJ_QUANT_PER_WARP = 2,
  SJ_QUANT_PER_THREAD = 3
} sj_quant_gran;

/* P.V accumulation.  "A+B": a fresh A-precision buffer per KV tile, added
 * into a persistent B-precision accumulator. */
typedef enum sj_pv_accum {
  SJ_ACCUM_DEFAULT = 0,
  SJ_ACCUM_FP32 = 1,      /* both families */
  SJ_ACCUM_FP32_FP32 = 2, /* FP8PV */
  SJ_ACCUM_FP16_FP32 = 3, /* FP16PV */
  SJ_ACCUM_FP32_FP16 = 4, /* FP8PV: fp16 tile buffer, narrowed V range */
  /* FP8PV and WGMMA: fp32+fp32 with V as two e4m3 terms, V = hi + lo, lo
   * the e4m3 residual of hi.  P.V runs twice per tile and its error is
   * P's rounding alone (docs/kernels.md: accuracy and cost). */
  SJ_ACCUM_FP32_FP32_SPLITV = 5,
  /* WGMMA: P and V in the input's 16-bit type (fp16, or bf16 for bf16
   * input), accumulating in fp32 straight into O: the FP16PV family's
   * numerics on wgmma (docs/kernels.md). */
  SJ_ACCUM_PV16 = 6,
  /* WGMMA and FP8PV: INT8 P.V.  P as u8 scaled per tile and row, V as s8
   * per channel (stored + 128), exact s32 accumulation of a tile, fp32 across
   * tiles: plain FP8's tensor work with about half split V's error, but
   * a worse one than split V's when a few tokens of V are far larger than
   * the rest (docs/kernels.md); opt-in. */
  SJ_ACCUM_PVI8 = 7,
  /* WGMMA (the default on sm90) and FP8PV (its default on sm90 too): pvi8
   * for each (batch, kv head) whose V is spread evenly enough for s8 per
   * channel, split V for the others (a few tokens far larger than the
   * rest).  The preprocessing chooses per call from V's statistics
   * (docs/kernels.md). */
  SJ_ACCUM_PVI8_SPLITV = 8
} sj_pv_accum;
/* The mode's name as the CLI and the Python package spell it ("fp32+fp32",
 * "pvi8+splitv", "default"); "?" for an unknown value, never NULL. */
SJ_API const char *sj_pv_accum_name(sj_pv_accum a);

/* Where the causal diagonal sits when seq_q != seq_kv.
 *  TOP_LEFT: query i sees keys j <= i (SageAttention, PyTorch is_causal).
 *  BOTTOM_RIGHT: query i sees keys j <= i + seq_kv - seq_q (FlashAttention);
 *  a query row that sees no key gets a zero output and an LSE of -inf. */
typedef enum sj_causal_align {
  SJ_CAUSAL_TOP_LEFT = 0,
  SJ_CAUSAL_BOTTOM_RIGHT = 1
} sj_causal_align;

/* ----------------------------------------------------------------- context */

typedef struct sj_context sj_context;

#define SJ_DEVICE_NONE (-1) /* compile-only context: no driver needed */

typedef struct sj_config {
  /* Cache directory.  NULL: $SAGEJIT_CACHE_DIR, else $XDG_CACHE_HOME/sagejit,
   * else ~/.cache/sagejit.  Created with mode 0700 if missing. */
  const char *cache_dir;
  /* Disable the on-disk cache (kernels still live in memory). */
  int cache_disabled;
  /* CUDA device ordinal, or SJ_DEVICE_NONE for a compile-only context. */
  int device;
  /* Compile target override ("sm_90a", "compute_120", ...).  NULL: the
   * environment's SAGEJIT_ARCH, else the device's own target. */
  const char *target;
  /* Default family for calls that say SJ_FAMILY_AUTO.  SJ_FAMILY_AUTO here:
   * the environment's SAGEJIT_FAMILY (fp16pv|fp8pv|wgmma), else the
   * target's. */
  sj_family family;
  sj_log_fn log_fn;
  void *log_user;
  sj_log_level log_level; /* messages above this level are dropped */
} sj_config;

/* Fills the defaults: device 0, everything else from the environment. */
SJ_API void sj_config_init(sj_config *cfg);

/* Creates a context.  cfg may be NULL (defaults).  On error *out is NULL and
 * the message is given to the log callback; sj_context_create_error() gives
 * the text of the last failed create in this thread. */
SJ_API sj_status sj_context_create(sj_context **out, const sj_config *cfg);
SJ_API const char *sj_context_create_error(void);
/* Waits for nothing; the caller must make sure no work of this context is
 * still running on its streams.  NULL is a harmless no-op. */
SJ_API void sj_context_destroy(sj_context *ctx);
/* Detail of the last error on this context; "" if none. */
SJ_API const char *sj_context_last_error(const sj_context *ctx);
/* The compile target of the context ("sm_90a"); NULL for a NULL ctx. */
SJ_API const char *sj_context_target(const sj_context *ctx);
/* The family AUTO resolves to on this context. */
SJ_API sj_family sj_context_family(const sj_context *ctx);
/* What a call on this context asking for `family` and `accum` at `head_dim`
 * runs: the family (SJ_FAMILY_AUTO resolved as sj_attention resolves it,
 * with the WGMMA family's fallback to FP8PV) and the P.V accumulation
 * (SJ_ACCUM_DEFAULT resolved to that family's default on the target).
 * Neither depends on the dtype, the mask or the shape.  SJ_ERR_UNSUPPORTED
 * (message in sj_context_last_error) where the target does not offer the
 * combination, SJ_ERR_INVALID_ARGUMENT for a NULL pointer or an unknown
 * enum value. */
SJ_API sj_status sj_context_resolve(sj_context *ctx, sj_family family,
                                    int head_dim, sj_pv_accum accum,
                                    sj_family *family_out,
                                    sj_pv_accum *accum_out);
/* The cache file in use ("" when the cache is disabled or in memory). */
SJ_API const char *sj_context_cache_path(const sj_context *ctx);

/* ---------------------------------------------------------------- counters */

typedef struct sj_stats {
  uint64_t mem_hits;        /* kernel found in the context's map */
  uint64_t disk_hits;       /* kernel loaded from the cache file */
  uint64_t misses;          /* kernel not in memory nor on disk */
  uint64_t compiles;        /* NVRTC compilations that succeeded */
  uint64_t compile_failures;
  double compile_ms;        /* wall time spent in NVRTC */
  double load_ms;           /* wall time in cuModuleLoadData */
  uint64_t corrupt_entries; /* cache rows found bad and removed */
  uint64_t driver_rejects;  /* images the driver refused (recompiled once) */
  uint64_t cache_errors;    /* cache operations that failed (degraded) */
  uint64_t launches;        /* kernels launched */
} sj_stats;

SJ_API sj_status sj_context_get_stats(sj_context *ctx, sj_stats *out);
SJ_API sj_status sj_context_reset_stats(sj_context *ctx);

/* --------------------------------------------------------------- attention */

/* Strides in elements, for a [batch, heads, seq, dim] view; dim is always
 * contiguous (stride 1).  All three zero: contiguous in the params' layout. */
typedef struct sj_strides {
  int64_t batch, head, seq;
} sj_strides;

typedef struct sj_attention_params {
  sj_dtype dtype;   /* of q, k, v and o */
  sj_layout layout; /* default strides */
  int64_t batch, heads_q, heads_kv, seq_q, seq_kv, head_dim;
  const void *q, *k, *v; /* device pointers */
  void *o;               /* device pointer, written in dtype */
  sj_strides q_stride, k_stride, v_stride, o_stride;
  int causal;                   /* 0 or 1 */
  sj_causal_align causal_align; /* when causal */
  float sm_scale;               /* > 0, or 0 for 1/sqrt(head_dim) */
  /* Optional: fp32 [batch, heads_q, seq_q] contiguous, natural-log
   * log-sum-exp of the scaled scores, corrected for K smoothing. */
  float *lse;
  /* Options; zero means the family's default. */
  sj_family family;
  sj_quant_gran qk_quant;
  sj_pv_accum pv_accum;
  int smooth_k; /* -1 default (on), 0 off, 1 on */
  int smooth_v; /* -1 default (off), 0 off, 1 on (fp32 accumulations only) */
  /* Optional device workspace of at least sj_attention_workspace_size()
   * bytes, 256-byte aligned.  NULL: the context keeps one per stream (do pass
   * one when capturing CUDA graphs). */
  void *workspace;
  size_t workspace_size;
} sj_attention_params;

/* Zeroes p and sets dtype FP16, layout HND, smooth_k -1, smooth_v -1. */
SJ_API void sj_attention_params_init(sj_attention_params *p);

/* Validates p and runs attention on `stream`.  Compiles or loads kernels on
 * first use.  On any error nothing is launched and o is untouched. */
SJ_API sj_status sj_attention(sj_context *ctx, const sj_attention_params *p,
                              struct CUstream_st *stream);

/* Workspace bytes sj_attention(p) needs (validates p like sj_attention). */
SJ_API sj_status sj_attention_workspace_size(sj_context *ctx,
                                             const sj_attention_params *p,
                                             size_t *bytes);

/* FP32 reference attention (no quantization, fp32 arithmetic): writes
 * out[batch, heads_q, seq_q, head_dim] fp32 contiguous and, if p->lse, the
 * LSE.  The quantization options of p are ignored.  Slow; for tests. */
SJ_API sj_status sj_attention_reference(sj_context *ctx,
                                        const sj_attention_params *p,
                                        float *out,
                                        struct CUstream_st *stream);

/* -------------------------------------------------- variable-length batches */

/* Packed sequences, as FlashAttention's flash_attn_varlen_func: q is
 * [total_q, heads_q, head_dim], k and v [total_kv, heads_kv, head_dim]
 * (strides below; dim contiguous), sequence i owning rows
 * cu_seqlens_q[i] .. cu_seqlens_q[i+1]-1.  Every sequence is attended on its
 * own: K smoothing uses each sequence's own K mean, quantization blocks never
 * mix two sequences, causal masks are per sequence. */
typedef struct sj_varlen_params {
  sj_dtype dtype;
  int64_t batch; /* number of sequences */
  int64_t heads_q, heads_kv, head_dim;
  int64_t total_q, total_kv;           /* rows of q and of k/v */
  int64_t max_seqlen_q, max_seqlen_kv; /* >= every sequence's length */
  /* int32 prefix sums on the device, batch + 1 entries each. */
  const int32_t *cu_seqlens_q, *cu_seqlens_kv;
  /* Optional host copies of the same prefix sums.  When given they are
   * validated on the host (monotone, first 0, last = total, no length above
   * the max) at no device cost; when NULL the library copies the device
   * arrays to the host (this synchronizes the stream) unless
   * trust_cu_seqlens is 1.  Kernels clamp every index, so even untrusted,
   * wrong prefix sums never read or write out of bounds. */
  const int32_t *cu_seqlens_q_host, *cu_seqlens_kv_host;
  int trust_cu_seqlens;
  const void *q, *k, *v;
  void *o; /* [total_q, heads_q, head_dim], written in dtype */
  /* Element strides of a row (token) and of a head; 0: contiguous. */
  int64_t q_stride_token, q_stride_head, k_stride_token, k_stride_head,
      v_stride_token, v_stride_head, o_stride_token, o_stride_head;
  int causal;
  sj_causal_align causal_align;
  float sm_scale;
  float *lse; /* optional fp32 [heads_q, total_q] */
  sj_family family;
  sj_quant_gran qk_quant;
  sj_pv_accum pv_accum;
  int smooth_k, smooth_v;
  void *workspace;
  size_t workspace_size;
} sj_varlen_params;

/* Zeroes p; dtype FP16, smooth_k and smooth_v -1. */
SJ_API void sj_varlen_params_init(sj_varlen_params *p);
SJ_API sj_status sj_attention_varlen(sj_context *ctx,
                                     const sj_varlen_params *p,
                                     struct CUstream_st *stream);
SJ_API sj_status sj_attention_varlen_workspace_size(sj_context *ctx,
                                                    const sj_varlen_params *p,
                                                    size_t *bytes);

/* ---------------------------------------------------- self-check and bench */

/* One accuracy case: the library allocates the tensors on the context's
 * device, fills them from a seeded normal distribution (K gets a
 * per-channel bias), poisons the output with NaN, runs sj_attention and the
 * FP32 reference on the same data and compares on the host. */
typedef struct sj_check_case {
  /* sizes, dtype, layout, causal, alignment and options; the pointers,
   * strides, lse and workspace fields are ignored */
  sj_attention_params params;
  uint64_t seed;
  float k_bias;    /* K[..., c] += k_bias * N(0,1)_c (0: none) */
  int pad_strides; /* 1: views with padded (non-contiguous) strides */
  int with_lse;    /* also compare the LSE */
} sj_check_case;

typedef struct sj_check_result {
  double rel_l2;          /* ||O - R|| / ||R|| over all elements */
  double cosine;          /* <O, R> / (||O|| ||R||) */
  double max_abs_err;
  double lse_max_abs_err; /* over rows with a finite reference LSE */
  int64_t nonfinite;      /* output elements that are NaN or Inf */
  int64_t elements;
  int64_t lse_mismatch;   /* rows where one LSE is finite and the other not */
} sj_check_result;

SJ_API sj_status sj_check(sj_context *ctx, const sj_check_case *c,
                          sj_check_result *out);

/* Timing with CUDA events: `warmup` calls, then `iters` timed calls each of
 * the whole pipeline, of the attention kernel alone and of the
 * preprocessing alone; medians.  By default the timed calls are queued back
 * to back, each between its own pair of events, and synchronized once at
 * the end: a call's time is its GPU time, the host's launch work overlapped
 * by the previous call (the method of FlashAttention's and SageAttention's
 * benchmarks).  With `sync_each` the host waits for every call before
 * queuing the next, so each time also holds the host's launch latency (a
 * call from an idle GPU). */
typedef struct sj_bench_case {
  sj_attention_params params; /* pointers, strides, workspace ignored */
  int warmup;                 /* 0: 5 */
  int iters;                  /* 0: 20 */
  int sync_each;              /* 0: back to back; 1: synchronize per call */
} sj_bench_case;

typedef struct sj_bench_result {
  double e2e_ms;        /* median, quantization included */
  double attn_ms;       /* median, attention kernel only */
  double preprocess_ms; /* median, quantization kernels only */
  double e2e_tops, attn_tops;
  double host_us;       /* median host time of one sj_attention call */
  double flops;         /* 4*B*Hq*Nq*Nk*D, causal counts visible pairs */
} sj_bench_result;

SJ_API sj_status sj_bench(sj_context *ctx, const sj_bench_case *c,
                          sj_bench_result *out);

/* ------------------------------------------------------- warm (precompile) */

typedef void (*sj_warm_progress_fn)(void *user, int64_t done, int64_t total,
                                    const char *target, const char *kernel,
                                    sj_status st);

/* A matrix of options; an empty list (NULL/0) means the default for that
 * axis: targets -> the context's target; head_dims -> {64, 128};
 * causal -> {0, 1}; dtypes -> {fp16, bf16}; families, quant and accum ->
 * the target's defaults.  The granularity is a kernel argument (one set of
 * kernels serves all three): quant is checked, and changes nothing that is
 * compiled. */
typedef struct sj_warm_request {
  const char *const *targets;
  size_t n_targets;
  const int *head_dims;
  size_t n_head_dims;
  const int *causal;
  size_t n_causal;
  const sj_dtype *dtypes;
  size_t n_dtypes;
  const sj_family *families;
  size_t n_families;
  const sj_quant_gran *quant;
  size_t n_quant;
  const sj_pv_accum *accum;
  size_t n_accum;
  int jobs; /* worker threads; 0: number of CPUs */
  sj_warm_progress_fn progress;
  void *progress_user;
} sj_warm_request;

typedef struct sj_warm_result {
  int64_t total, compiled, cached, failed, skipped;
  double seconds;
} sj_warm_result;

/* Compiles every kernel sj_attention could need for the matrix into the
 * cache.  Combinations a family does not offer are skipped and counted.
 * Returns SJ_OK only if nothing failed. */
SJ_API sj_status sj_warm(sj_context *ctx, const sj_warm_request *req,
                         sj_warm_result *out);

/* -------------------------------------------------- environment and devices */

/* NVRTC's version; SJ_ERR_NO_NVRTC if it cannot be loaded. */
SJ_API sj_status sj_nvrtc_version(int *major, int *minor);
/* The driver's version (e.g. 13000) and device count; SJ_ERR_NO_DRIVER. */
SJ_API sj_status sj_driver_info(int *version, int *device_count);

typedef struct sj_device_info {
  char name[256];
  int cc_major, cc_minor;
  int multiprocessors;
  size_t total_memory;
  char target[24]; /* what sagejit compiles for it, e.g. "sm_90a" */
} sj_device_info;

SJ_API sj_status sj_device_get_info(int ordinal, sj_device_info *out);

/* The target for a compute capability given NVRTC's supported list; writes
 * e.g. "sm_90a", or "compute_120" (PTX) for a device newer than NVRTC. */
SJ_API sj_status sj_target_for_cc(int cc_major, int cc_minor, char *buf,
                                  size_t size);

/* ------------------------------------------------------------------- cache */

typedef struct sj_cache_info {
  char path[4096];
  int writable;       /* 0: read-only or in-memory */
  int schema_version; /* PRAGMA user_version of the file */
  int64_t entries;
  int64_t bytes; /* sum of image sizes */
} sj_cache_info;

typedef struct sj_cache_entry {
  char key[33]; /* hex of the 128-bit key */
  const char *target;
  const char *kernel; /* name expression */
  const char *kind;   /* "cubin" or "ptx" */
  int64_t image_bytes;
  double compile_ms;
  int64_t created, last_used; /* unix seconds */
  int64_t hits;
} sj_cache_entry;

/* Return non-zero to stop the iteration. */
typedef int (*sj_cache_list_fn)(void *user, const sj_cache_entry *e);

SJ_API sj_status sj_cache_get_info(sj_context *ctx, sj_cache_info *out);
/* Entries in key order; strings live until the callback returns. */
SJ_API sj_status sj_cache_list(sj_context *ctx, sj_cache_list_fn fn,
                               void *user);
/* Checks every image; removes bad rows. */
SJ_API sj_status sj_cache_verify(sj_context *ctx, int64_t *checked,
                                 int64_t *ok, int64_t *corrupt);
/* Evicts least-recently-used rows until the images total <= max_bytes. */
SJ_API sj_status sj_cache_prune(sj_context *ctx, int64_t max_bytes,
                                int64_t *removed);
SJ_API sj_status sj_cache_clear(sj_context *ctx, int64_t *removed);
/* Writes a standalone cache file (same schema) with the rows whose target is
 * in targets (all rows when n_targets is 0).  Fails if path exists. */
SJ_API sj_status sj_cache_export(sj_context *ctx, const char *path,
                                 const char *const *targets, size_t n_targets,
                                 int64_t *exported);
/* Verifies a cache file whole and merges its rows; a file with any bad row
 * is rejected whole (SJ_ERR_BAD_FILE) and nothing is merged. */
SJ_API sj_status sj_cache_import(sj_context *ctx, const char *path,
                                 int64_t *imported, int64_t *skipped);

#ifdef __cplusplus
}
#endif
#endif /* SAGEJIT_H */
