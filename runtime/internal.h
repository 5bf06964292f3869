/*
 * internal.h -- declarations shared inside the library.  Not public API.
 */
#ifndef SJ_INTERNAL_H
#define SJ_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include "cache.h"
#include "sagejit.h"

/* ------------------------------------------------------------------ errors */
/* RETURN_IF(cond, ctx, status, fmt, ...): record the message and return. */
#define SJ_RETURN_IF(cond, ctx, st, ...)                                       \
  do {                                                                         \
    if (cond)                                                                  \
      return sj_fail((ctx), (st), __VA_ARGS__);                                \
  } while (0)
#define SJ_FORWARD(expr)                                                       \
  do {                                                                         \
    sj_status sj_fwd_ = (expr);                                                \
    if (sj_fwd_ != SJ_OK)                                                      \
      return sj_fwd_;                                                          \
  } while (0)

/* ----------------------------------------------------------------- logging */
typedef struct sj_logger {
  sj_log_fn fn;
  void *user;
  sj_log_level level;
  pthread_mutex_t lock;
} sj_logger;

void sj_logger_init(sj_logger *lg, sj_log_fn fn, void *user, sj_log_level lv);
void sj_logger_destroy(sj_logger *lg);
void sj_log(sj_logger *lg, sj_log_level lv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void sj_vlog(sj_logger *lg, sj_log_level lv, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* Level from $SAGEJIT_LOG (OFF when unset). */
sj_log_level sj_env_log_level(void);
/* Adapter for the cache's log callback; user is an sj_logger. */
void sj_logger_cache_cb(void *user, int level, const char *line);

/* ------------------------------------------------------------------ loader */
/* The CUDA driver API, opened with dlopen.  Field names drop the "cu". */
typedef struct sj_cuda_api {
  CUresult (*Init)(unsigned);
  CUresult (*DriverGetVersion)(int *);
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetName)(char *, int, CUdevice);
  CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*DeviceTotalMem)(size_t *, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext *);
  CUresult (*CtxSynchronize)(void);
  CUresult (*ModuleLoadDataEx)(CUmodule *, const void *, unsigned,
                               CUjit_option *, void **);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*FuncGetAttribute)(int *, CUfunction_attribute, CUfunction);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, unsigned, CUstream, void **,
                           void **);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*MemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*StreamCreate)(CUstream *, unsigned);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*StreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
  CUresult (*EventCreate)(CUevent *, unsigned);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*GetErrorString)(CUresult, const char **);
  CUresult (*GetErrorName)(CUresult, const char **);
  CUresult (*PointerGetAttribute)(void *, CUpointer_attribute, CUdeviceptr);
  /* optional (NULL when the driver lacks them) */
  CUresult (*TensorMapEncodeTiled)(void *, int, unsigned, void *,
                                   const uint64_t *, const uint64_t *,
                                   const unsigned *, const unsigned *, int,
                                   int, int, int);
  CUresult (*LaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **,
                             void **);
} sj_cuda_api;

/* Loads libcuda and calls cuInit once.  Returns SJ_OK or SJ_ERR_NO_DRIVER /
 * SJ_ERR_NO_DEVICE with *why set to static text. */
sj_status sj_cuda_load(const sj_cuda_api **api, const char **why);
/* Text for a CUresult ("CUDA_ERROR_X: text"). */
const char *sj_cuda_error_text(CUresult r, char *buf, size_t size);

typedef int nvrtcResult_;
typedef struct _nvrtcProgram *nvrtcProgram_;
typedef struct sj_nvrtc_api {
  int major, minor;
  int supported[64];
  int n_supported;
  const char *path;
  nvrtcResult_ (*Version)(int *, int *);
  nvrtcResult_ (*GetNumSupportedArchs)(int *);
  nvrtcResult_ (*GetSupportedArchs)(int *);
  nvrtcResult_ (*CreateProgram)(nvrtcProgram_ *, const char *, const char *,
                                int, const char *const *, const char *const *);
  nvrtcResult_ (*DestroyProgram)(nvrtcProgram_ *);
  nvrtcResult_ (*CompileProgram)(nvrtcProgram_, int, const char *const *);
  nvrtcResult_ (*GetProgramLogSize)(nvrtcProgram_, size_t *);
  nvrtcResult_ (*GetProgramLog)(nvrtcProgram_, char *);
  nvrtcResult_ (*GetCUBINSize)(nvrtcProgram_, size_t *);
  nvrtcResult_ (*GetCUBIN)(nvrtcProgram_, char *);
  nvrtcResult_ (*GetPTXSize)(nvrtcProgram_, size_t *);
  nvrtcResult_ (*GetPTX)(nvrtcProgram_, char *);
  nvrtcResult_ (*AddNameExpression)(nvrtcProgram_, const char *);
  nvrtcResult_ (*GetLoweredName)(nvrtcProgram_, const char *, const char **);
  const char *(*GetErrorString)(nvrtcResult_);
} sj_nvrtc_api;

sj_status sj_nvrtc_load(const sj_nvrtc_api **api, const char **why);

/* -------------------------------------------------------------- templates */
#include "templates.h"
/* Sources NVRTC compiles: the embedded templates, or the files of
 * $SAGEJIT_TEMPLATE_DIR when set (development).  Loaded once. */
typedef struct sj_sources {
  const sj_template_file *files;
  unsigned count;
  const char *main_name; /* "sj_kernels.cu" */
  uint8_t hash[16];      /* XXH3-128 over names and bytes */
  int overridden;
} sj_sources;
sj_status sj_sources_get(const sj_sources **out, const char **why);

/* ------------------------------------------------------------------ arch */
typedef struct sj_target {
  char name[24];     /* "sm_90a", "compute_120" */
  int sm;            /* 90, 120, ... (compute capability * 10) */
  int is_ptx;        /* compute_XX */
  int smem_optin;    /* max dynamic shared memory per block, bytes */
  sj_family family;  /* default family */
} sj_target;

/* Parses "sm_90a"/"compute_120"/"90"; returns 0 or -1. */
int sj_target_parse(const char *s, sj_target *out);
/* Chooses the target for a compute capability given NVRTC's list; writes a
 * log-worthy note into note (may be empty). */
int sj_target_for_device(int major, int minor, const int *supported, int n,
                         sj_target *out, char *note, size_t note_size);
/* 1 if the family's instructions exist on the target. */
int sj_family_supported(sj_family fam, const sj_target *t);
/* "fp16pv", "fp8pv", "wgmma" or "auto". */
const char *sj_family_str(sj_family f);
/* How an accumulation mode has the quantizer write V (quant_qkv's VM):
 * 0 e4m3, 1 e4m3 and its e4m3 residual (split V), 2 16-bit (pv16), 3 s8
 * (pvi8), 4 mode 3 or 1 per (batch, kv head) (pvi8+splitv). */
int sj_v_mode(sj_pv_accum a);
/* Bytes per V value of a V mode: 2 for modes 1, 2 and 4 (in the workspace
 * and per stage), else 1. */
int sj_v_bytes(int v_mode);

/* ------------------------------------------------------------------ specs */
typedef enum sj_kernel_kind {
  SJ_KERNEL_STATS = 1,
  SJ_KERNEL_FINALIZE = 2,
  SJ_KERNEL_QUANT = 3,
  SJ_KERNEL_ATTN = 4,
  SJ_KERNEL_REFERENCE = 5
} sj_kernel_kind;

/* Everything that selects a template instantiation. */
typedef struct sj_spec {
  sj_kernel_kind kind;
  sj_family family;
  sj_dtype dtype;
  int head_dim;
  int causal;
  sj_pv_accum accum; /* (the granularity is a kernel argument: no field) */
  int warp_q;
  int stages;
  int ksub;
  int wg_consumers; /* wgmma: consumer warpgroups per CTA (64 rows each; 0:
                       one, without a producer warpgroup) */
  int tma;          /* attn_mma: K/V tiles by TMA (the kernel takes
                       sj_wgmma_args); see sj_plan.tma */
  int vh;           /* attn_mma with TMA tiles, FP8PV's e4m3 modes: P.V as
                       fp16 mma on e4m3 values, V converted once per CTA
                       and tile (runtime/spec.c mma_vh) */
} sj_spec;

/* 64-row consumer warpgroups of a wgmma CTA (wg_consumers 0, "solo", is
 * one warpgroup without a producer). */
static inline int sj_wg_groups(int wg_consumers) {
  return wg_consumers ? wg_consumers : 1;
}

/* Launch shape that goes with a spec (threads, dynamic shared memory). */
typedef struct sj_launch_shape {
  int threads;
  int smem_bytes;
} sj_launch_shape;

int sj_spec_name(const sj_spec *s, char *buf, size_t size);
sj_launch_shape sj_spec_shape(const sj_spec *s);
/* CTAs per multiprocessor that attn_wgmma's launch bounds ask for and its
 * stages are sized for: one with two consumer warpgroups, two with one;
 * solo (nc = 0) three, four at D = 128 with 64-key tiles (solo_ctas in
 * sj_attn_wgmma.cuh). */
int sj_wgmma_ctas_per_sm(int head_dim, int bn, int nc);
/* Whether V's 16-bit bytes fit the L2 well enough for kv_stats to keep
 * them there for quant_qkv (SJ_F_L2_KEEP_V): at most 3/4 of it (l2_bytes
 * 0, unknown: no). */
int sj_l2_keeps_v(int64_t l2_bytes, int64_t v_bytes);
/* A development knob of SAGEJIT_TUNE for A/B runs: the integer after
 * `name` ("stages=") if it is a or b, else dflt (also when unset). */
int sj_tune_int(const char *name, int a, int b, int dflt);
/* NVRTC options for a spec on a target; returns the count (<= max). */
int sj_spec_options(const sj_spec *s, const sj_target *t, char opts[][64],
                    int max);

/* The resolved options of one attention call. */
typedef struct sj_plan {
  sj_family family;
  sj_dtype dtype;
  int head_dim, causal;
  sj_quant_gran quant;
  sj_pv_accum accum;
  int smooth_k, smooth_v;
  int warp_q, stages, ksub;
  int wg_consumers; /* wgmma: 64-row consumer warpgroups per CTA (1 or 2), or
                       0: one warpgroup and no producer (solo) */
  int k_sample;     /* K's mean from every k_sample-th key (1 or 4) */
  int tma;          /* attn_mma: K/V tiles by TMA tensor copies (sm_90 and
                       the shapes where it won; runtime/spec.c mma_tma) */
  sj_spec specs[4]; /* stats, finalize, quant, attention */
  int n_specs;
} sj_plan;

/* Resolves defaults and checks the combination for a target; fills specs.
 * On failure writes a message and returns SJ_ERR_UNSUPPORTED. */
sj_status sj_plan_make(const sj_target *t, sj_family fam, sj_dtype dt,
                       int head_dim, int causal, sj_quant_gran qg,
                       sj_pv_accum acc, int smooth_k, int smooth_v,
                       sj_plan *out, char *msg, size_t msg_size);
/* Calls whose seq_q and seq_kv are both at most SJ_SHORT_SEQ may run
 * another attention kernel: sj_plan_short rewrites a plan that has one
 * (wgmma, D = 128, causal, the default pvi8+splitv or one of its two
 * bodies alone, pvi8 and split V; no SAGEJIT_TUNE override of nc= or bn=)
 * to it and returns 1; other plans are left as they are (0).  `sagejit
 * warm` compiles every kernel a call may pick. */
#define SJ_SHORT_SEQ 1024
int sj_plan_short(sj_plan *pl, const sj_target *t);
/* Likewise for calls whose seq_q and seq_kv are both at most SJ_SOLO_SEQ
 * (non-causal) or SJ_SOLO_SEQ_CAUSAL (causal) and that sj_plan_short did
 * not take: sj_plan_solo (wgmma, D = 128, the default or one of its two
 * bodies alone; SAGEJIT_TUNE "solo=0" keeps the two-consumer kernel for A/B
 * runs).  SJ_SOLO_SEQ <= SJ_SOLO_SEQ_CAUSAL (warm.c asks for the plan at
 * SJ_SOLO_SEQ to enumerate the solo kernels of both). */
#define SJ_SOLO_SEQ 8192
#define SJ_SOLO_SEQ_CAUSAL 16384
int sj_plan_solo(sj_plan *pl, const sj_target *t);
/* The plan of a call of these lengths: sj_plan_short, else sj_plan_solo,
 * where they apply (the one place attention.c and warm.c take it from). */
void sj_plan_for_length(sj_plan *pl, const sj_target *t, int64_t seq_q,
                        int64_t seq_kv);

/* --------------------------------------------------------------- compile */
typedef struct sj_compiled {
  void *image;
  size_t size;
  int is_ptx;
  char *lowered;
  char *log; /* NVRTC log, may be NULL */
  double ms;
} sj_compiled;
sj_status sj_compile(const sj_spec *s, const sj_target *t, sj_compiled *out,
                     char *msg, size_t msg_size);
/* The same with one more NVRTC option that does not change the image (the
 * cache key never sees it), e.g. "--ptxas-options=-v" to get ptxas's
 * resource report in out->log (tests/test_spills.c). */
sj_status sj_compile_opt(const sj_spec *s, const sj_target *t,
                         const char *extra, sj_compiled *out, char *msg,
                         size_t msg_size);
void sj_compiled_free(sj_compiled *c);
/* The key of a spec on a target. */
sj_status sj_spec_key(const sj_spec *s, const sj_target *t, sj_key *out,
                      char *msg, size_t msg_size);

/* --------------------------------------------------------------- context */
typedef struct sj_kernel sj_kernel;
typedef struct sj_workspace sj_workspace;
typedef struct sj_inflight sj_inflight;

struct sj_context {
  pthread_mutex_t lock; /* kernel map, workspaces, stats, last error */
  pthread_cond_t cond;  /* signalled when a compile finishes */
  /* Held from taking a context-owned workspace until the last launch that
   * uses it, so that growing it never frees memory another call is about to
   * launch with. */
  pthread_mutex_t ws_lock;
  sj_logger log;
  char last_error[1024];

  int device; /* ordinal or SJ_DEVICE_NONE */
  const sj_cuda_api *cu;
  CUdevice cudev;
  CUcontext cuctx; /* retained primary context */
  int cc_major, cc_minor, sm_count;
  int64_t l2_bytes; /* the device's L2 cache; 0 where the driver does not say */
  int can_load;    /* target's images load on this device */
  /* Chain a call's kernels with programmatic dependent launch: the target
   * is sm_90 or later (its kernels wait in pdl_wait), the driver has
   * cuLaunchKernelEx, and SAGEJIT_PDL is not 0. */
  int pdl;
  /* The wgmma kernel quantizes Q itself (SJ_F_Q_FUSED) unless
   * SAGEJIT_QFUSE is 0. */
  int q_fuse;
  /* kv_finalize folded into kv_stats (SJ_F_FINALIZE) unless SAGEJIT_PREP
   * is 0. */
  int prep_fuse;
  sj_target target;
  sj_family family; /* what AUTO means here */
  int family_explicit; /* family set by config or SAGEJIT_FAMILY */

  sj_cache *cache;
  char cache_dir[4096];

  sj_kernel **buckets; /* kernel map */
  sj_inflight *inflight; /* keys compiling for warm (single flight) */
  unsigned n_buckets;
  sj_workspace *workspaces;
  sj_stats stats;
};

/* Records a message as the context's last error, logs it, returns st. */
sj_status sj_fail(sj_context *ctx, sj_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void sj_clear_error(sj_context *ctx);

/* Returns the function of spec on the context's target, compiling or
 * loading it on first use (single flight).  Thread-safe. */
sj_status sj_kernel_get(sj_context *ctx, const sj_spec *s, CUfunction *fn);
/* The functions of n (<= SJ_KERNELS_MAX) specs: those missing from the
 * context are resolved (cache or NVRTC, then loaded) on one thread each,
 * so a cold first call costs about its slowest compile. */
#define SJ_KERNELS_MAX 4
sj_status sj_kernels_get(sj_context *ctx, const sj_spec *specs, int n,
                         CUfunction *fn);
/* Compiles (or finds in the cache) spec for target without loading it.
 * *compiled is 1 if NVRTC ran.  On failure the reason goes to msg (the
 * caller's buffer), not to the context's last error, so that warm's worker
 * threads never share a string.  Thread-safe; used by warm. */
sj_status sj_kernel_ensure_cached(sj_context *ctx, const sj_spec *s,
                                  const sj_target *t, int *compiled, char *msg,
                                  size_t msg_size);
void sj_kernels_destroy(sj_context *ctx);

/* Launch helper: push the context, launch, pop.  Counts launches.  With
 * `chained` (and ctx->pdl) the launch allows programmatic stream
 * serialization: the kernel may start before the previous kernel on the
 * stream completes, and must pdl_wait() before reading what it wrote.  Only
 * a call's second and later kernels are chained, so the first one always
 * waits for the caller's earlier work. */
sj_status sj_launch(sj_context *ctx, CUfunction fn, unsigned gx, unsigned gy,
                    unsigned gz, const sj_launch_shape *sh, CUstream stream,
                    void *args, const char *what, int chained);

/* Zeroes `words` 32-bit words at p, queued on stream. */
sj_status sj_memset32(sj_context *ctx, CUdeviceptr p, size_t words,
                      CUstream stream, const char *what);

/* Context-owned workspace for a stream, grown as needed; the caller holds
 * ctx->ws_lock until its launches are queued. */
sj_status sj_workspace_get(sj_context *ctx, CUstream stream, size_t bytes,
                           CUdeviceptr *out, size_t **ctl_zero);
void sj_workspaces_destroy(sj_context *ctx);
/* Frees the workspace of a stream (caller holds ctx->ws_lock). */
void sj_workspace_forget(sj_context *ctx, CUstream stream);

/* sj_attention in parts (bench): the preprocessing kernels, the attention
 * kernel, or both.  PRE fills the workspace that ATTN reads. */
#define SJ_PART_PRE 1
#define SJ_PART_ATTN 2
sj_status sj_attention_run(sj_context *ctx, const sj_attention_params *p,
                           CUstream stream, int parts);

double sj_now_ms(void);
/* Copies with truncation; always NUL-terminates. */
void sj_strlcpy(char *dst, const char *src, size_t size);
int sj_env_flag(const char *name); /* 1 when set to 1/true/yes/on */

#endif
