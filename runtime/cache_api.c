/*
 * cache_api.c -- the public cache maintenance calls (a thin layer over
 * cache/) and device queries, so that an embedding program can do what the
 * CLI does.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static sj_status need_cache(sj_context *ctx) {
  if (!ctx)
    return SJ_ERR_INVALID_ARGUMENT;
  sj_cache_mode m = sj_cache_get_mode(ctx->cache);
  if (m == SJ_CACHE_MODE_DISABLED || m == SJ_CACHE_MODE_MEMORY)
    return sj_fail(ctx, SJ_ERR_CACHE, "no cache file is in use (%s)",
                   m == SJ_CACHE_MODE_DISABLED ? "disabled" : "in memory");
  return SJ_OK;
}

static sj_status need_writable(sj_context *ctx) {
  SJ_FORWARD(need_cache(ctx));
  if (sj_cache_get_mode(ctx->cache) != SJ_CACHE_MODE_READWRITE)
    return sj_fail(ctx, SJ_ERR_CACHE, "the cache %s is read-only",
                   sj_cache_path(ctx->cache));
  return SJ_OK;
}

sj_status sj_cache_get_info(sj_context *ctx, sj_cache_info *out) {
  if (!ctx || !out)
    return SJ_ERR_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  sj_strlcpy(out->path, sj_cache_path(ctx->cache), sizeof out->path);
  sj_cache_mode m = sj_cache_get_mode(ctx->cache);
  out->writable = m == SJ_CACHE_MODE_READWRITE;
  if (m == SJ_CACHE_MODE_DISABLED || m == SJ_CACHE_MODE_MEMORY)
    return SJ_OK;
  sj_cache_stat st;
  if (sj_cache_stat_get(ctx->cache, &st) != 0)
    return sj_fail(ctx, SJ_ERR_CACHE, "reading the cache %s failed",
                   out->path);
  out->entries = st.entries;
  out->bytes = st.bytes;
  out->schema_version = st.schema_version;
  return SJ_OK;
}

typedef struct list_adapter {
  sj_cache_list_fn fn;
  void *user;
} list_adapter;

static int list_cb(void *user, const sj_cache_list_entry *e) {
  list_adapter *a = user;
  sj_cache_entry pe;
  memset(&pe, 0, sizeof pe);
  sj_key_hex(e->key, pe.key);
  pe.target = e->target;
  pe.kernel = e->kernel_name;
  pe.kind = e->kind;
  pe.image_bytes = e->image_bytes;
  pe.compile_ms = e->compile_ms;
  pe.created = e->created;
  pe.last_used = e->last_used;
  pe.hits = e->hits;
  return a->fn(a->user, &pe);
}

sj_status sj_cache_list(sj_context *ctx, sj_cache_list_fn fn, void *user) {
  SJ_FORWARD(need_cache(ctx));
  if (!fn)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "callback is NULL");
  list_adapter a = {fn, user};
  if (sj_cache_db_list(ctx->cache, list_cb, &a) != 0)
    return sj_fail(ctx, SJ_ERR_CACHE, "listing the cache failed");
  return SJ_OK;
}

sj_status sj_cache_verify(sj_context *ctx, int64_t *checked, int64_t *ok,
                          int64_t *corrupt) {
  SJ_FORWARD(need_cache(ctx));
  int64_t c = 0, o = 0, b = 0;
  if (sj_cache_db_verify(ctx->cache, &c, &o, &b) != 0)
    return sj_fail(ctx, SJ_ERR_CACHE, "verifying the cache failed");
  if (checked)
    *checked = c;
  if (ok)
    *ok = o;
  if (corrupt)
    *corrupt = b;
  return SJ_OK;
}

sj_status sj_cache_prune(sj_context *ctx, int64_t max_bytes,
                         int64_t *removed) {
  SJ_FORWARD(need_writable(ctx));
  if (max_bytes < 0)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "max_bytes must be >= 0");
  int64_t r = 0;
  if (sj_cache_db_prune(ctx->cache, max_bytes, &r) != 0)
    return sj_fail(ctx, SJ_ERR_CACHE, "pruning the cache failed");
  if (removed)
    *removed = r;
  return SJ_OK;
}

sj_status sj_cache_clear(sj_context *ctx, int64_t *removed) {
  SJ_FORWARD(need_writable(ctx));
  int64_t r = 0;
  if (sj_cache_db_clear(ctx->cache, &r) != 0)
    return sj_fail(ctx, SJ_ERR_CACHE, "clearing the cache failed");
  if (removed)
    *removed = r;
  return SJ_OK;
}

sj_status sj_cache_export(sj_context *ctx, const char *path,
                          const char *const *targets, size_t n_targets,
                          int64_t *exported) {
  SJ_FORWARD(need_cache(ctx));
  if (!path || !*path)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "path is empty");
  int64_t n = 0;
  int r = sj_cache_db_export(ctx->cache, path, targets, n_targets, &n);
  if (r == -2)
    return sj_fail(ctx, SJ_ERR_IO, "%s exists; not overwriting it", path);
  if (r != 0)
    return sj_fail(ctx, SJ_ERR_IO, "exporting to %s failed", path);
  if (exported)
    *exported = n;
  return SJ_OK;
}

sj_status sj_cache_import(sj_context *ctx, const char *path, int64_t *imported,
                          int64_t *skipped) {
  SJ_FORWARD(need_writable(ctx));
  if (!path || !*path)
    return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "path is empty");
  int64_t n = 0, s = 0;
  int r = sj_cache_db_import(ctx->cache, path, &n, &s);
  if (r == -2)
    return sj_fail(ctx, SJ_ERR_BAD_FILE,
                   "%s is not a valid sagejit cache (nothing imported)", path);
  if (r != 0)
    return sj_fail(ctx, SJ_ERR_IO, "importing %s failed", path);
  if (imported)
    *imported = n;
  if (skipped)
    *skipped = s;
  return SJ_OK;
}

sj_status sj_device_get_info(int ordinal, sj_device_info *out) {
  if (!out)
    return SJ_ERR_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  const sj_cuda_api *cu;
  SJ_FORWARD(sj_cuda_load(&cu, NULL));
  int n = 0;
  if (cu->DeviceGetCount(&n) != CUDA_SUCCESS)
    return SJ_ERR_CUDA;
  if (ordinal < 0 || ordinal >= n)
    return SJ_ERR_NO_DEVICE;
  CUdevice dev;
  if (cu->DeviceGet(&dev, ordinal) != CUDA_SUCCESS ||
      cu->DeviceGetName(out->name, (int)sizeof out->name, dev) !=
          CUDA_SUCCESS ||
      cu->DeviceGetAttribute(&out->cc_major,
                             CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                             dev) != CUDA_SUCCESS ||
      cu->DeviceGetAttribute(&out->cc_minor,
                             CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                             dev) != CUDA_SUCCESS ||
      cu->DeviceGetAttribute(&out->multiprocessors,
                             CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                             dev) != CUDA_SUCCESS ||
      cu->DeviceTotalMem(&out->total_memory, dev) != CUDA_SUCCESS)
    return SJ_ERR_CUDA;
  if (sj_target_for_cc(out->cc_major, out->cc_minor, out->target,
                       sizeof out->target) != SJ_OK)
    sj_strlcpy(out->target, "unsupported", sizeof out->target);
  return SJ_OK;
}
