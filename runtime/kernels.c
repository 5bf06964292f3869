/*
 * kernels.c -- from a spec to a CUfunction: the context's in-memory map,
 * then the cache, then NVRTC.
 *
 * Single flight: the first thread that misses a spec inserts a BUSY entry
 * and does the work without holding the context lock; other threads wanting
 * the same spec wait on the context's condition variable.  Across processes
 * a short lease row in the cache lets one process compile a key while the
 * others poll for the row (sj_cache_lease_acquire).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

enum { K_BUSY = 0, K_READY = 1, K_FAILED = 2 };

struct sj_kernel {
  sj_spec spec;
  int state;
  sj_status status;
  char *error;
  CUmodule module;
  CUfunction fn;
  sj_kernel *next;
};

#define LEASE_TTL_MS 120000
#define LEASE_POLL_MS 20

static unsigned spec_hash(const sj_spec *s) {
  const unsigned char *p = (const unsigned char *)s;
  unsigned h = 2166136261u;
  for (size_t i = 0; i < sizeof *s; i++)
    h = (h ^ p[i]) * 16777619u;
  return h;
}

static sj_kernel *map_find(sj_context *ctx, const sj_spec *s) {
  if (!ctx->buckets)
    return NULL;
  sj_kernel *k = ctx->buckets[spec_hash(s) % ctx->n_buckets];
  for (; k; k = k->next)
    if (!memcmp(&k->spec, s, sizeof *s))
      return k;
  return NULL;
}

static int map_insert(sj_context *ctx, sj_kernel *k) {
  if (!ctx->buckets) {
    ctx->n_buckets = 256;
    ctx->buckets = calloc(ctx->n_buckets, sizeof *ctx->buckets);
    if (!ctx->buckets)
      return -1;
  }
  unsigned b = spec_hash(&k->spec) % ctx->n_buckets;
  k->next = ctx->buckets[b];
  ctx->buckets[b] = k;
  return 0;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int is_driver_reject(CUresult r) {
  return r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_NO_BINARY_FOR_GPU ||
         r == CUDA_ERROR_INVALID_PTX || r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION ||
         r == CUDA_ERROR_INVALID_SOURCE || r == CUDA_ERROR_NOT_FOUND ||
         r == CUDA_ERROR_JIT_COMPILER_NOT_FOUND ||
         r == CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND;
}

/* Loads an image into the context's CUDA context. */
static CUresult load_image(sj_context *ctx, const void *image,
                           const char *lowered, const sj_spec *s,
                           CUmodule *mod, CUfunction *fn) {
  const sj_cuda_api *cu = ctx->cu;
  CUresult r = cu->CtxPushCurrent(ctx->cuctx);
  if (r != CUDA_SUCCESS)
    return r;
  const double t0 = sj_now_ms();
  *mod = NULL;
  r = cu->ModuleLoadDataEx(mod, image, 0, NULL, NULL);
  if (r == CUDA_SUCCESS)
    r = cu->ModuleGetFunction(fn, *mod, lowered);
  if (r == CUDA_SUCCESS) {
    sj_launch_shape sh = sj_spec_shape(s);
    if (sh.smem_bytes > 48 * 1024)
      r = cu->FuncSetAttribute(*fn,
                               CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               sh.smem_bytes);
  }
  if (r != CUDA_SUCCESS && *mod) {
    cu->ModuleUnload(*mod);
    *mod = NULL;
  }
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);
  const double dt = sj_now_ms() - t0;
  pthread_mutex_lock(&ctx->lock);
  ctx->stats.load_ms += dt;
  pthread_mutex_unlock(&ctx->lock);
  return r;
}

static void count(sj_context *ctx, uint64_t *field, double *ms, double add) {
  pthread_mutex_lock(&ctx->lock);
  if (field)
    (*field)++;
  if (ms)
    *ms += add;
  pthread_mutex_unlock(&ctx->lock);
}

/* Compiles spec for target and stores the result in the cache. */
static sj_status compile_and_put(sj_context *ctx, const sj_spec *s,
                                 const sj_target *t, const sj_key *key,
                                 sj_compiled *out, char *msg, size_t msg_size) {
  sj_status st = sj_compile(s, t, out, msg, msg_size);
  if (st != SJ_OK) {
    count(ctx, &ctx->stats.compile_failures, NULL, 0);
    if (out->log)
      sj_log(&ctx->log, SJ_LOG_DEBUG, "NVRTC log:\n%s", out->log);
    return st;
  }
  count(ctx, &ctx->stats.compiles, &ctx->stats.compile_ms, out->ms);
  char name[256], opts[16][64], joined[1024] = "";
  sj_spec_name(s, name, sizeof name);
  int n = sj_spec_options(s, t, opts, 16);
  for (int i = 0; i < n; i++) {
    if (i)
      strncat(joined, "\n", sizeof joined - strlen(joined) - 1);
    strncat(joined, opts[i], sizeof joined - strlen(joined) - 1);
  }
  int maj = 0, min = 0;
  sj_nvrtc_version(&maj, &min);
  char ver[32];
  snprintf(ver, sizeof ver, "%d.%d", maj, min);
  sj_cache_row row;
  memset(&row, 0, sizeof row);
  memcpy(row.key, key->bytes, sizeof row.key);
  row.canonical = key->canonical;
  row.canonical_len = key->canonical_len;
  row.target = t->name;
  row.kernel_name = name;
  row.lowered_name = out->lowered;
  row.nvrtc_version = ver;
  row.options = joined;
  row.image = out->image;
  row.image_size = out->size;
  row.kind = out->is_ptx ? SJ_IMAGE_PTX : SJ_IMAGE_CUBIN;
  row.compile_ms = out->ms;
  sj_cache_put(ctx->cache, &row); /* failure is logged by the cache */
  sj_log(&ctx->log, SJ_LOG_DEBUG, "compiled %s for %s in %.0f ms (%zu bytes)",
         name, t->name, out->ms, out->size);
  return SJ_OK;
}

/* Looks the key up, waiting for another process's compile when it holds
 * the lease.  Returns 1 on a hit (img filled), 0 on a miss (and then this
 * process holds the lease if *leased). */
static int get_or_lease(sj_context *ctx, const sj_key *key, const sj_target *t,
                        sj_cache_image *img, int *leased) {
  *leased = 0;
  const double start = sj_now_ms();
  for (;;) {
    if (sj_cache_get(ctx->cache, key, t->name, img) == SJ_CACHE_HIT)
      return 1;
    int r = sj_cache_lease_acquire(ctx->cache, key->bytes, LEASE_TTL_MS);
    if (r == 1) {
      *leased = 1;
      /* The holder may have finished between our get and acquire. */
      if (sj_cache_get(ctx->cache, key, t->name, img) == SJ_CACHE_HIT) {
        sj_cache_lease_release(ctx->cache, key->bytes);
        *leased = 0;
        return 1;
      }
      return 0;
    }
    if (r < 0 || sj_now_ms() - start > LEASE_TTL_MS)
      return 0;
    sleep_ms(LEASE_POLL_MS);
  }
}

/* The slow path of sj_kernel_get: cache, else compile; then load. */
static sj_status resolve(sj_context *ctx, const sj_spec *s, CUmodule *mod,
                         CUfunction *fn, char *msg, size_t msg_size) {
  sj_key key;
  memset(&key, 0, sizeof key);
  sj_status st = sj_spec_key(s, &ctx->target, &key, msg, msg_size);
  if (st != SJ_OK)
    return st;
  sj_cache_image img;
  memset(&img, 0, sizeof img);
  int leased = 0;
  int hit = get_or_lease(ctx, &key, &ctx->target, &img, &leased);
  char err[256];
  if (hit) {
    CUresult r = load_image(ctx, img.data, img.lowered_name, s, mod, fn);
    if (r == CUDA_SUCCESS) {
      count(ctx, &ctx->stats.disk_hits, NULL, 0);
      sj_cache_image_free(&img);
      sj_key_free(&key);
      return SJ_OK;
    }
    sj_cache_image_free(&img);
    if (!is_driver_reject(r)) {
      snprintf(msg, msg_size, "loading a cached kernel: %s",
               sj_cuda_error_text(r, err, sizeof err));
      sj_key_free(&key);
      return SJ_ERR_CUDA;
    }
    /* The driver refused the cached image: drop it, compile once. */
    sj_log(&ctx->log, SJ_LOG_WARN,
           "the driver rejected a cached kernel (%s); recompiling",
           sj_cuda_error_text(r, err, sizeof err));
    count(ctx, &ctx->stats.driver_rejects, NULL, 0);
    sj_cache_drop(ctx->cache, key.bytes);
  } else {
    count(ctx, &ctx->stats.misses, NULL, 0);
  }
  sj_compiled c;
  st = compile_and_put(ctx, s, &ctx->target, &key, &c, msg, msg_size);
  if (leased)
    sj_cache_lease_release(ctx->cache, key.bytes);
  sj_key_free(&key);
  if (st != SJ_OK) {
    sj_compiled_free(&c);
    return st;
  }
  CUresult r = load_image(ctx, c.image, c.lowered, s, mod, fn);
  sj_compiled_free(&c);
  if (r != CUDA_SUCCESS) {
    snprintf(msg, msg_size, "the driver rejected a freshly compiled kernel "
             "for %s: %s", ctx->target.name,
             sj_cuda_error_text(r, err, sizeof err));
    return SJ_ERR_CUDA;
  }
  return SJ_OK;
}

static sj_status no_load(sj_context *ctx) {
  return sj_fail(ctx, SJ_ERR_NO_DEVICE, "this context cannot run kernels (%s)",
                 ctx->device == SJ_DEVICE_NONE
                     ? "it was created without a device"
                     : "its target does not run on the device");
}

/* Under the lock: a READY entry's function (1), a FAILED entry's error
 * (-1, *st and copy filled), or no entry (0, a BUSY one inserted in *out,
 * this thread to resolve it).  An entry another thread is resolving is
 * waited for if may_wait, else returned as 2: a thread that holds BUSY
 * entries of its own never waits (two such threads could wait on each
 * other). */
static int claim(sj_context *ctx, const sj_spec *s, int may_wait,
                 CUfunction *fn, sj_kernel **out, sj_status *st, char *copy,
                 size_t copy_size) {
  *out = NULL;
  for (;;) {
    sj_kernel *k = map_find(ctx, s);
    if (!k)
      break;
    if (k->state == K_READY) {
      ctx->stats.mem_hits++;
      *fn = k->fn;
      return 1;
    }
    if (k->state == K_FAILED) {
      *st = k->status;
      sj_strlcpy(copy, k->error ? k->error : "", copy_size);
      return -1;
    }
    if (!may_wait)
      return 2;
    pthread_cond_wait(&ctx->cond, &ctx->lock);
  }
  sj_kernel *k = calloc(1, sizeof *k);
  if (k) {
    k->spec = *s; /* before inserting: the bucket is the spec's hash */
    k->state = K_BUSY;
  }
  if (!k || map_insert(ctx, k) != 0) {
    free(k);
    *st = SJ_ERR_OUT_OF_MEMORY;
    sj_strlcpy(copy, "out of memory", copy_size);
    return -1;
  }
  *out = k;
  return 0;
}

/* Publishes the outcome of resolving a claimed entry and wakes waiters. */
static void settle(sj_context *ctx, sj_kernel *k, sj_status st, CUmodule mod,
                   CUfunction f, const char *msg) {
  pthread_mutex_lock(&ctx->lock);
  if (st == SJ_OK) {
    k->module = mod;
    k->fn = f;
    k->state = K_READY;
  } else if (st == SJ_ERR_COMPILE || st == SJ_ERR_UNSUPPORTED) {
    /* Deterministic failures are remembered; others are retried. */
    k->status = st;
    k->error = strdup(msg);
    k->state = K_FAILED;
  } else {
    /* unlink and free the BUSY entry so that a later call retries */
    unsigned b = spec_hash(&k->spec) % ctx->n_buckets;
    for (sj_kernel **pp = &ctx->buckets[b]; *pp; pp = &(*pp)->next)
      if (*pp == k) {
        *pp = k->next;
        break;
      }
    free(k);
  }
  pthread_cond_broadcast(&ctx->cond);
  pthread_mutex_unlock(&ctx->lock);
}

sj_status sj_kernel_get(sj_context *ctx, const sj_spec *s, CUfunction *fn) {
  return sj_kernels_get(ctx, s, 1, fn);
}

/* One claimed spec, resolved on its own thread (or the caller's). */
typedef struct {
  sj_context *ctx;
  sj_kernel *k;
  CUmodule mod;
  CUfunction fn;
  sj_status st;
  char msg[1024];
} resolve_job;

static void *resolve_worker(void *arg) {
  resolve_job *j = arg;
  j->st = resolve(j->ctx, &j->k->spec, &j->mod, &j->fn, j->msg, sizeof j->msg);
  return NULL;
}

sj_status sj_kernels_get(sj_context *ctx, const sj_spec *specs, int n,
                         CUfunction *fn) {
  if (!ctx->can_load)
    return no_load(ctx);
  if (n == 0)
    return SJ_OK;
  if (n < 0 || n > SJ_KERNELS_MAX)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "%d kernels at once", n);
  resolve_job jobs[SJ_KERNELS_MAX];
  int job_of[SJ_KERNELS_MAX], later[SJ_KERNELS_MAX] = {0}, nj = 0;
  for (int i = 0; i < SJ_KERNELS_MAX; i++)
    job_of[i] = -1;
  sj_status first = SJ_OK;
  char first_msg[1024] = "";
  pthread_mutex_lock(&ctx->lock);
  for (int i = 0; i < n; i++) {
    sj_kernel *k;
    sj_status st = SJ_OK;
    int r = claim(ctx, &specs[i], nj == 0, &fn[i], &k, &st, first_msg,
                  sizeof first_msg);
    if (r < 0) {
      first = st;
      break; /* first_msg holds the error; the claimed ones run below */
    }
    if (r == 2)
      later[i] = 1; /* busy elsewhere (or listed twice): after ours */
    if (r == 0) {
      job_of[i] = nj;
      memset(&jobs[nj], 0, sizeof jobs[nj]);
      jobs[nj].ctx = ctx;
      jobs[nj].k = k;
      nj++;
    }
  }
  pthread_mutex_unlock(&ctx->lock);

  /* A first call compiles or loads several kernels: one thread each (the
   * caller's for the first), so a cold call costs about its slowest
   * compile rather than their sum.  A thread that cannot start runs its
   * job here. */
  pthread_t th[SJ_KERNELS_MAX];
  int started[SJ_KERNELS_MAX] = {0};
  for (int j = 1; j < nj; j++)
    started[j] = pthread_create(&th[j], NULL, resolve_worker, &jobs[j]) == 0;
  if (nj > 0)
    resolve_worker(&jobs[0]);
  for (int j = 1; j < nj; j++) {
    if (started[j])
      pthread_join(th[j], NULL);
    else
      resolve_worker(&jobs[j]);
  }
  for (int j = 0; j < nj; j++) {
    resolve_job *jb = &jobs[j];
    settle(ctx, jb->k, jb->st, jb->mod, jb->fn, jb->msg);
  }
  if (first != SJ_OK)
    return sj_fail(ctx, first, "%s", first_msg);
  for (int i = 0; i < n; i++) {
    const int j = job_of[i];
    if (j >= 0) {
      if (jobs[j].st != SJ_OK)
        return sj_fail(ctx, jobs[j].st, "%s", jobs[j].msg);
      fn[i] = jobs[j].fn;
    } else if (later[i]) {
      /* this thread holds nothing now: waiting is safe */
      sj_status st = sj_kernels_get(ctx, &specs[i], 1, &fn[i]);
      if (st != SJ_OK)
        return st;
    }
  }
  return SJ_OK;
}

/* In-process single flight for compile-only requests (warm): keys being
 * compiled by some thread of this context. */
struct sj_inflight {
  uint8_t key[SJ_KEY_BYTES];
  sj_inflight *next;
};

static int inflight_has(sj_context *ctx, const uint8_t *key) {
  for (sj_inflight *f = ctx->inflight; f; f = f->next)
    if (!memcmp(f->key, key, SJ_KEY_BYTES))
      return 1;
  return 0;
}

static void inflight_remove(sj_context *ctx, const uint8_t *key) {
  pthread_mutex_lock(&ctx->lock);
  for (sj_inflight **pp = &ctx->inflight; *pp; pp = &(*pp)->next)
    if (!memcmp((*pp)->key, key, SJ_KEY_BYTES)) {
      sj_inflight *f = *pp;
      *pp = f->next;
      free(f);
      break;
    }
  pthread_cond_broadcast(&ctx->cond);
  pthread_mutex_unlock(&ctx->lock);
}

sj_status sj_kernel_ensure_cached(sj_context *ctx, const sj_spec *s,
                                  const sj_target *t, int *compiled, char *msg,
                                  size_t msg_size) {
  *compiled = 0;
  if (msg_size)
    msg[0] = 0;
  sj_key key;
  memset(&key, 0, sizeof key);
  sj_status st = sj_spec_key(s, t, &key, msg, msg_size);
  if (st != SJ_OK)
    return st;
  /* Wait while another thread of this context compiles the same key. */
  sj_inflight *mine = calloc(1, sizeof *mine);
  if (!mine) {
    sj_key_free(&key);
    snprintf(msg, msg_size, "out of memory");
    return SJ_ERR_OUT_OF_MEMORY;
  }
  memcpy(mine->key, key.bytes, SJ_KEY_BYTES);
  pthread_mutex_lock(&ctx->lock);
  while (inflight_has(ctx, key.bytes))
    pthread_cond_wait(&ctx->cond, &ctx->lock);
  mine->next = ctx->inflight;
  ctx->inflight = mine;
  pthread_mutex_unlock(&ctx->lock);

  sj_cache_image img;
  memset(&img, 0, sizeof img);
  int leased = 0;
  if (get_or_lease(ctx, &key, t, &img, &leased)) {
    sj_cache_image_free(&img);
    inflight_remove(ctx, key.bytes);
    sj_key_free(&key);
    return SJ_OK;
  }
  count(ctx, &ctx->stats.misses, NULL, 0);
  sj_compiled c;
  st = compile_and_put(ctx, s, t, &key, &c, msg, msg_size);
  if (leased)
    sj_cache_lease_release(ctx->cache, key.bytes);
  inflight_remove(ctx, key.bytes);
  sj_key_free(&key);
  sj_compiled_free(&c);
  if (st != SJ_OK)
    return st;
  *compiled = 1;
  return SJ_OK;
}

void sj_kernels_destroy(sj_context *ctx) {
  if (!ctx->buckets)
    return;
  int pushed = ctx->cu && ctx->cuctx &&
               ctx->cu->CtxPushCurrent(ctx->cuctx) == CUDA_SUCCESS;
  for (unsigned b = 0; b < ctx->n_buckets; b++) {
    sj_kernel *k = ctx->buckets[b];
    while (k) {
      sj_kernel *next = k->next;
      if (k->module && pushed)
        ctx->cu->ModuleUnload(k->module);
      free(k->error);
      free(k);
      k = next;
    }
  }
  if (pushed) {
    CUcontext dummy;
    ctx->cu->CtxPopCurrent(&dummy);
  }
  free(ctx->buckets);
  ctx->buckets = NULL;
}

sj_status sj_launch(sj_context *ctx, CUfunction fn, unsigned gx, unsigned gy,
                    unsigned gz, const sj_launch_shape *sh, CUstream stream,
                    void *args, const char *what, int chained) {
  const sj_cuda_api *cu = ctx->cu;
  CUresult r = cu->CtxPushCurrent(ctx->cuctx);
  char err[256];
  if (r != CUDA_SUCCESS)
    return sj_fail(ctx, SJ_ERR_CUDA, "cuCtxPushCurrent: %s",
                   sj_cuda_error_text(r, err, sizeof err));
  void *params[] = {args};
  /* CUDA_ERROR_NOT_SUPPORTED below means "not tried yet" or "the driver
   * refused the attribute": both take the plain launch, where the kernel's
   * pdl_wait is a no-op and the stream orders it as before. */
  r = CUDA_ERROR_NOT_SUPPORTED;
  if (chained && ctx->pdl) {
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = gx;
    cfg.gridDimY = gy;
    cfg.gridDimZ = gz;
    cfg.blockDimX = (unsigned)sh->threads;
    cfg.blockDimY = 1;
    cfg.blockDimZ = 1;
    cfg.sharedMemBytes = (unsigned)sh->smem_bytes;
    cfg.hStream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    r = cu->LaunchKernelEx(&cfg, fn, params, NULL);
  }
  if (r == CUDA_ERROR_NOT_SUPPORTED)
    r = cu->LaunchKernel(fn, gx, gy, gz, (unsigned)sh->threads, 1, 1,
                         (unsigned)sh->smem_bytes, stream, params, NULL);
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);
  if (r != CUDA_SUCCESS)
    return sj_fail(ctx, SJ_ERR_CUDA, "launching %s (grid %ux%ux%u): %s", what,
                   gx, gy, gz, sj_cuda_error_text(r, err, sizeof err));
  pthread_mutex_lock(&ctx->lock);
  ctx->stats.launches++;
  pthread_mutex_unlock(&ctx->lock);
  return SJ_OK;
}

sj_status sj_memset32(sj_context *ctx, CUdeviceptr p, size_t words,
                      CUstream stream, const char *what) {
  const sj_cuda_api *cu = ctx->cu;
  char err[256];
  CUresult r = cu->CtxPushCurrent(ctx->cuctx);
  if (r != CUDA_SUCCESS)
    return sj_fail(ctx, SJ_ERR_CUDA, "cuCtxPushCurrent: %s",
                   sj_cuda_error_text(r, err, sizeof err));
  r = cu->MemsetD32Async(p, 0, words, stream);
  CUcontext dummy;
  cu->CtxPopCurrent(&dummy);
  if (r != CUDA_SUCCESS)
    return sj_fail(ctx, SJ_ERR_CUDA, "%s: %s", what,
                   sj_cuda_error_text(r, err, sizeof err));
  return SJ_OK;
}
