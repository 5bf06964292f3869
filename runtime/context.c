/*
 * context.c -- context lifetime, configuration, errors, counters and the
 * per-stream workspaces.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

static _Thread_local char tl_create_error[1024];

const char *sj_context_create_error(void) { return tl_create_error; }

void sj_config_init(sj_config *cfg) {
  if (!cfg)
    return;
  memset(cfg, 0, sizeof *cfg);
  cfg->device = 0;
  cfg->family = SJ_FAMILY_AUTO;
  cfg->log_level = SJ_LOG_WARN;
}

sj_status sj_fail(sj_context *ctx, sj_status st, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (ctx) {
    pthread_mutex_lock(&ctx->lock);
    sj_strlcpy(ctx->last_error, buf, sizeof ctx->last_error);
    pthread_mutex_unlock(&ctx->lock);
    sj_log(&ctx->log, SJ_LOG_DEBUG, "%s: %s", sj_status_name(st), buf);
  }
  return st;
}

void sj_clear_error(sj_context *ctx) {
  pthread_mutex_lock(&ctx->lock);
  ctx->last_error[0] = 0;
  pthread_mutex_unlock(&ctx->lock);
}

const char *sj_context_last_error(const sj_context *ctx) {
  return ctx ? ctx->last_error : "no context";
}

const char *sj_context_target(const sj_context *ctx) {
  return ctx ? ctx->target.name : NULL;
}

sj_family sj_context_family(const sj_context *ctx) {
  return ctx ? ctx->family : SJ_FAMILY_AUTO;
}

const char *sj_context_cache_path(const sj_context *ctx) {
  return ctx && ctx->cache ? sj_cache_path(ctx->cache) : "";
}

static sj_family env_family(void) {
  const char *v = getenv("SAGEJIT_FAMILY");
  if (!v || !*v)
    return SJ_FAMILY_AUTO;
  if (!strcasecmp(v, "fp16pv") || !strcasecmp(v, "fp16"))
    return SJ_FAMILY_FP16PV;
  if (!strcasecmp(v, "fp8pv") || !strcasecmp(v, "fp8"))
    return SJ_FAMILY_FP8PV;
  if (!strcasecmp(v, "wgmma") || !strcasecmp(v, "sm90"))
    return SJ_FAMILY_WGMMA;
  return (sj_family)-1;
}

static sj_status create_fail(sj_context *ctx, sj_status st, const char *fmt,
                             ...) __attribute__((format(printf, 3, 4)));
static sj_status create_fail(sj_context *ctx, sj_status st, const char *fmt,
                             ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_create_error, sizeof tl_create_error, fmt, ap);
  va_end(ap);
  if (ctx) {
    sj_log(&ctx->log, SJ_LOG_ERROR, "%s", tl_create_error);
    sj_context_destroy(ctx);
  }
  return st;
}

/* Device part of create: driver, device, primary context, target. */
static sj_status open_device(sj_context *ctx, const char *target_override) {
  const char *why = NULL;
  sj_status st = sj_cuda_load(&ctx->cu, &why);
  if (st != SJ_OK)
    return create_fail(ctx, st, "%s", why);
  const sj_cuda_api *cu = ctx->cu;
  int n = 0;
  char err[256];
  CUresult r = cu->DeviceGetCount(&n);
  if (r != CUDA_SUCCESS)
    return create_fail(ctx, SJ_ERR_CUDA, "cuDeviceGetCount: %s",
                       sj_cuda_error_text(r, err, sizeof err));
  if (ctx->device < 0 || ctx->device >= n)
    return create_fail(ctx, SJ_ERR_NO_DEVICE,
                       "device %d does not exist (%d device%s)", ctx->device,
                       n, n == 1 ? "" : "s");
  if ((r = cu->DeviceGet(&ctx->cudev, ctx->device)) != CUDA_SUCCESS ||
      (r = cu->DeviceGetAttribute(&ctx->cc_major,
                                  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                  ctx->cudev)) != CUDA_SUCCESS ||
      (r = cu->DeviceGetAttribute(&ctx->cc_minor,
                                  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                  ctx->cudev)) != CUDA_SUCCESS ||
      (r = cu->DeviceGetAttribute(&ctx->sm_count,
                                  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                  ctx->cudev)) != CUDA_SUCCESS)
    return create_fail(ctx, SJ_ERR_CUDA, "querying device %d: %s", ctx->device,
                       sj_cuda_error_text(r, err, sizeof err));
  r = cu->DevicePrimaryCtxRetain(&ctx->cuctx, ctx->cudev);
  if (r != CUDA_SUCCESS) {
    ctx->cuctx = NULL;
    return create_fail(ctx, SJ_ERR_CUDA, "retaining the primary context: %s",
                       sj_cuda_error_text(r, err, sizeof err));
  }
  int l2 = 0; /* launch-order heuristics only (attention.c): 0 if unknown */
  if (cu->DeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
                             ctx->cudev) == CUDA_SUCCESS &&
      l2 > 0)
    ctx->l2_bytes = l2;
  int optin = 0;
  cu->DeviceGetAttribute(&optin,
                         CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                         ctx->cudev);
  if (target_override) {
    ctx->can_load = 1; /* the driver decides; a refusal is a clear status */
    return SJ_OK;
  }
  const sj_nvrtc_api *nv = NULL;
  /* Without NVRTC we can still run fully cached kernels: assume our own
   * target table. */
  int supported[64], ns = 0;
  if (sj_nvrtc_load(&nv, NULL) == SJ_OK) {
    ns = nv->n_supported;
    memcpy(supported, nv->supported, (size_t)ns * sizeof(int));
  } else {
    supported[0] = ctx->cc_major * 10 + ctx->cc_minor;
    ns = 1;
  }
  char note[256];
  if (sj_target_for_device(ctx->cc_major, ctx->cc_minor, supported, ns,
                           &ctx->target, note, sizeof note) != 0)
    return create_fail(ctx, SJ_ERR_UNSUPPORTED, "%s", note);
  if (note[0])
    sj_log(&ctx->log, SJ_LOG_INFO, "%s", note);
  /* Plans use the target table's shared memory, so that a warmed cache and
   * a live call pick the same kernels; a device with less is refused by the
   * driver at load time with a clear status. */
  if (optin > 0 && optin < ctx->target.smem_optin)
    sj_log(&ctx->log, SJ_LOG_WARN,
           "device %d offers %d bytes of shared memory per block, less than "
           "%s usually has; large head dims may fail", ctx->device, optin,
           ctx->target.name);
  ctx->can_load = 1;
  return SJ_OK;
}

sj_status sj_context_create(sj_context **out, const sj_config *cfg_in) {
  tl_create_error[0] = 0;
  if (!out) {
    snprintf(tl_create_error, sizeof tl_create_error, "out is NULL");
    return SJ_ERR_INVALID_ARGUMENT;
  }
  *out = NULL;
  sj_config cfg;
  if (cfg_in)
    cfg = *cfg_in;
  else
    sj_config_init(&cfg);
  if ((int)cfg.family < SJ_FAMILY_AUTO || cfg.family > SJ_FAMILY_WGMMA) {
    snprintf(tl_create_error, sizeof tl_create_error, "unknown family %d",
             (int)cfg.family);
    return SJ_ERR_INVALID_ARGUMENT;
  }
  if (cfg.log_level < SJ_LOG_OFF || cfg.log_level > SJ_LOG_DEBUG) {
    snprintf(tl_create_error, sizeof tl_create_error, "unknown log level %d",
             (int)cfg.log_level);
    return SJ_ERR_INVALID_ARGUMENT;
  }
  sj_context *ctx = calloc(1, sizeof *ctx);
  if (!ctx) {
    snprintf(tl_create_error, sizeof tl_create_error, "out of memory");
    return SJ_ERR_OUT_OF_MEMORY;
  }
  pthread_mutex_init(&ctx->lock, NULL);
  pthread_mutex_init(&ctx->ws_lock, NULL);
  pthread_cond_init(&ctx->cond, NULL);
  sj_logger_init(&ctx->log, cfg.log_fn, cfg.log_user, cfg.log_level);
  ctx->device = cfg.device;

  const char *target_override = cfg.target;
  if (!target_override || !*target_override) {
    const char *env = getenv("SAGEJIT_ARCH");
    target_override = env && *env ? env : NULL;
  }
  if (target_override && sj_target_parse(target_override, &ctx->target) != 0)
    return create_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                       "unknown target '%s' (expected e.g. sm_90a, "
                       "compute_120)", target_override);
  if (ctx->device != SJ_DEVICE_NONE) {
    sj_status st = open_device(ctx, target_override);
    if (st != SJ_OK)
      return st;
    /* Programmatic dependent launch between a call's kernels: their code
     * waits for it (pdl_wait) only when compiled for sm_90 or later. */
    const char *pdl = getenv("SAGEJIT_PDL");
    ctx->pdl = ctx->target.sm >= 90 && ctx->cu->LaunchKernelEx != NULL &&
               !(pdl && strcmp(pdl, "0") == 0);
    const char *qf = getenv("SAGEJIT_QFUSE");
    ctx->q_fuse = !(qf && strcmp(qf, "0") == 0);
    const char *pf = getenv("SAGEJIT_PREP");
    ctx->prep_fuse = !(pf && strcmp(pf, "0") == 0);
  } else if (!target_override) {
    return create_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                       "a context without a device needs a target "
                       "(config.target or SAGEJIT_ARCH)");
  }

  sj_family fam = cfg.family;
  if (fam == SJ_FAMILY_AUTO)
    fam = env_family();
  if ((int)fam < 0)
    return create_fail(ctx, SJ_ERR_INVALID_ARGUMENT,
                       "SAGEJIT_FAMILY must be fp16pv, fp8pv or wgmma");
  ctx->family_explicit = fam != SJ_FAMILY_AUTO;
  if (fam == SJ_FAMILY_AUTO)
    fam = ctx->target.family;
  if (!sj_family_supported(fam, &ctx->target))
    return create_fail(ctx, SJ_ERR_UNSUPPORTED,
                       "family %s needs %s; target is %s", sj_family_str(fam),
                       fam == SJ_FAMILY_WGMMA ? "the sm_90a target"
                                              : "sm_89 or newer",
                       ctx->target.name);
  ctx->family = fam;

  /* The cache never makes create fail: it degrades and logs. */
  if (cfg.cache_dir && *cfg.cache_dir)
    sj_strlcpy(ctx->cache_dir, cfg.cache_dir, sizeof ctx->cache_dir);
  else if (sj_cache_default_dir(ctx->cache_dir, sizeof ctx->cache_dir) != 0)
    ctx->cache_dir[0] = 0;
  sj_cache_opts co;
  memset(&co, 0, sizeof co);
  co.dir = ctx->cache_dir[0] ? ctx->cache_dir : NULL;
  co.disabled = cfg.cache_disabled || !ctx->cache_dir[0] ||
                sj_env_flag("SAGEJIT_CACHE_DISABLE");
  co.layers = getenv("SAGEJIT_CACHE_PATH");
  co.trust_foreign = sj_env_flag("SAGEJIT_CACHE_TRUST");
  const char *maxb = getenv("SAGEJIT_CACHE_MAX_BYTES");
  co.max_bytes = maxb && *maxb ? strtoll(maxb, NULL, 10) : 0;
  co.log_fn = sj_logger_cache_cb;
  co.log_user = &ctx->log;
  ctx->cache = sj_cache_open(&co);
  if (!ctx->cache)
    return create_fail(ctx, SJ_ERR_OUT_OF_MEMORY, "out of memory");
  *out = ctx;
  return SJ_OK;
}

void sj_context_destroy(sj_context *ctx) {
  if (!ctx)
    return;
  sj_kernels_destroy(ctx);
  sj_workspaces_destroy(ctx);
  if (ctx->cuctx)
    ctx->cu->DevicePrimaryCtxRelease(ctx->cudev);
  sj_cache_close(ctx->cache);
  sj_logger_destroy(&ctx->log);
  pthread_cond_destroy(&ctx->cond);
  pthread_mutex_destroy(&ctx->ws_lock);
  pthread_mutex_destroy(&ctx->lock);
  free(ctx);
}

sj_status sj_context_get_stats(sj_context *ctx, sj_stats *out) {
  if (!ctx || !out)
    return SJ_ERR_INVALID_ARGUMENT;
  sj_cache_counters cc;
  memset(&cc, 0, sizeof cc);
  if (ctx->cache)
    sj_cache_get_counters(ctx->cache, &cc);
  pthread_mutex_lock(&ctx->lock);
  *out = ctx->stats;
  pthread_mutex_unlock(&ctx->lock);
  out->corrupt_entries = cc.corrupt;
  out->cache_errors = cc.errors;
  return SJ_OK;
}

sj_status sj_context_reset_stats(sj_context *ctx) {
  if (!ctx)
    return SJ_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&ctx->lock);
  memset(&ctx->stats, 0, sizeof ctx->stats);
  pthread_mutex_unlock(&ctx->lock);
  return SJ_OK;
}

/* ------------------------------------------------------------ workspaces */

struct sj_workspace {
  CUstream stream;
  CUdeviceptr ptr;
  size_t size;
  /* Bytes at the start known to be zero (kv_stats' counts under
   * SJ_F_FINALIZE: each such launch leaves its counts zero, and a call may
   * write anything past its own; see run_call) */
  size_t ctl_zero;
  sj_workspace *next;
};

sj_status sj_workspace_get(sj_context *ctx, CUstream stream, size_t bytes,
                           CUdeviceptr *out, size_t **ctl_zero) {
  const sj_cuda_api *cu = ctx->cu;
  char err[256];
  pthread_mutex_lock(&ctx->lock);
  sj_workspace *w = ctx->workspaces;
  while (w && w->stream != stream)
    w = w->next;
  if (w && w->size >= bytes) {
    *out = w->ptr;
    *ctl_zero = &w->ctl_zero;
    pthread_mutex_unlock(&ctx->lock);
    return SJ_OK;
  }
  pthread_mutex_unlock(&ctx->lock);

  CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
  if (cu->StreamIsCapturing(stream, &cap) == CUDA_SUCCESS &&
      cap != CU_STREAM_CAPTURE_STATUS_NONE)
    return sj_fail(ctx, SJ_ERR_WORKSPACE,
                   "the stream is capturing a CUDA graph and the context's "
                   "workspace must grow to %zu bytes; pass a workspace "
                   "(sj_attention_workspace_size) when capturing", bytes);
  CUresult r = cu->CtxPushCurrent(ctx->cuctx);
  if (r != CUDA_SUCCESS)
    return sj_fail(ctx, SJ_ERR_CUDA, "cuCtxPushCurrent: %s",
                   sj_cuda_error_text(r, err, sizeof err));
  /* Grow by half again to avoid a reallocation per slightly larger call. */
  size_t want = bytes + bytes / 2;
  CUdeviceptr p = 0;
  r = cu->MemAlloc(&p, want);
  if (r != CUDA_SUCCESS) {
    want = bytes;
    r = cu->MemAlloc(&p, want);
  }
  if (r != CUDA_SUCCESS) {
    CUcontext dummy;
    cu->CtxPopCurrent(&dummy);
    return sj_fail(ctx, r == CUDA_ERROR_OUT_OF_MEMORY ? SJ_ERR_OUT_OF_MEMORY
                                                      : SJ_ERR_CUDA,
                   "allocating a %zu-byte workspace: %s", want,
                   sj_cuda_error_text(r, err, sizeof err));
  }
  pthread_mutex_lock(&ctx->lock);
  w = ctx->workspaces;
  while (w && w->stream != stream)
    w = w->next;
  CUdeviceptr old = 0;
  if (!w) {
    w = calloc(1, sizeof *w);
    if (!w) {
      pthread_mutex_unlock(&ctx->lock);
      cu->MemFree(p);
      CUcontext dummy;
      cu->CtxPopCurrent(&dummy);
      return sj_fail(ctx, SJ_ERR_OUT_OF_MEMORY, "out of memory");
    }
    w->stream = stream;
    w->next = ctx->workspaces;
    ctx->workspaces = w;
  } else {
    old = w->ptr;
  }
  w->ptr = p;
  w->size = want;
  w->ctl_zero = 0;
  *ctl_zero = &w->ctl_zero;
  pthread_mutex_unlock(&ctx->lock);
  if (old) {
    /* Work already queued on the stream may still use the old buffer. */
    cu->StreamSynchronize(stream);
    cu->MemFree(old);
  }
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);
  *out = p;
  return SJ_OK;
}

void sj_workspaces_destroy(sj_context *ctx) {
  sj_workspace *w = ctx->workspaces;
  int pushed = w && ctx->cu && ctx->cuctx &&
               ctx->cu->CtxPushCurrent(ctx->cuctx) == CUDA_SUCCESS;
  while (w) {
    sj_workspace *next = w->next;
    if (pushed)
      ctx->cu->MemFree(w->ptr);
    free(w);
    w = next;
  }
  if (pushed) {
    CUcontext dummy;
    ctx->cu->CtxPopCurrent(&dummy);
  }
  ctx->workspaces = NULL;
}

void sj_workspace_forget(sj_context *ctx, CUstream stream) {
  sj_workspace **pp = &ctx->workspaces;
  while (*pp && (*pp)->stream != stream)
    pp = &(*pp)->next;
  sj_workspace *w = *pp;
  if (!w)
    return;
  *pp = w->next;
  if (ctx->cu->CtxPushCurrent(ctx->cuctx) == CUDA_SUCCESS) {
    ctx->cu->StreamSynchronize(stream);
    ctx->cu->MemFree(w->ptr);
    CUcontext dummy;
    ctx->cu->CtxPopCurrent(&dummy);
  }
  free(w);
}
