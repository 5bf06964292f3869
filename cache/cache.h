/*
 * cache.h -- the on-disk kernel store (SQLite).  Internal; not public API.
 *
 * The cache knows nothing about attention: it stores compiled images under a
 * 128-bit key (key.h) and promises that a caller is never handed bytes that
 * fail their checksum, ELF header or target check.  It is an accelerator and
 * never a point of failure: every function degrades (read-only, in-memory,
 * disabled) and reports through the log callback; none of them aborts.
 *
 * Thread safety: one sj_cache may be used from several threads; calls are
 * serialized by an internal mutex.  No call holds the mutex or a SQLite
 * transaction while the caller compiles.  log_fn is called with the mutex
 * held and must not call back into the same sj_cache.  An sj_cache must not
 * be used in a child after fork(): open a new one there.
 */
#ifndef SJ_CACHE_CACHE_H
#define SJ_CACHE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "key.h"

#define SJ_CACHE_SCHEMA 1 /* PRAGMA user_version written by this build */
#define SJ_CACHE_FILE "kernels.db"
#define SJ_CACHE_DEFAULT_MAX_BYTES (4LL << 30)

typedef enum sj_cache_log_level {
  SJ_CACHE_LOG_ERROR = 1,
  SJ_CACHE_LOG_WARN = 2,
  SJ_CACHE_LOG_INFO = 3,
  SJ_CACHE_LOG_DEBUG = 4
} sj_cache_log_level;

typedef void (*sj_cache_log_fn)(void *user, int level, const char *line);

typedef enum sj_cache_mode {
  SJ_CACHE_MODE_READWRITE = 0, /* normal */
  SJ_CACHE_MODE_READONLY = 1,  /* loads only (read-only file, newer schema) */
  SJ_CACHE_MODE_MEMORY = 2,    /* nothing on disk could be used */
  SJ_CACHE_MODE_DISABLED = 3   /* asked for no cache */
} sj_cache_mode;

typedef enum sj_image_kind {
  SJ_IMAGE_CUBIN = 0,
  SJ_IMAGE_PTX = 1
} sj_image_kind;

typedef struct sj_cache_opts {
  const char *dir;       /* directory of kernels.db; created 0700 */
  int disabled;          /* SJ_CACHE_MODE_DISABLED */
  /* Colon-separated read-only cache files or directories searched after the
   * writable one (SAGEJIT_CACHE_PATH); NULL for none. */
  const char *layers;
  int trust_foreign;     /* load from files owned by others / group-writable */
  int64_t max_bytes;     /* eviction limit: 0 = SJ_CACHE_DEFAULT_MAX_BYTES,
                            < 0 = none */
  int busy_timeout_ms;   /* 0 = default (10000) */
  sj_cache_log_fn log_fn;
  void *log_user;
} sj_cache_opts;

/* A row as stored.  Strings are NUL-terminated. */
typedef struct sj_cache_row {
  uint8_t key[SJ_KEY_BYTES];
  const uint8_t *canonical;
  size_t canonical_len;
  const char *target;       /* "sm_90a", "compute_120" */
  const char *kernel_name;  /* name expression */
  const char *lowered_name; /* mangled name to look up in the module */
  const char *nvrtc_version;/* "13.0" */
  const char *options;      /* options joined by '\n' */
  const void *image;
  size_t image_size;
  sj_image_kind kind;
  double compile_ms;
} sj_cache_row;

/* What sj_cache_get hands back; free with sj_cache_image_free. */
typedef struct sj_cache_image {
  void *data; /* for PTX, NUL-terminated (image_size excludes the NUL) */
  size_t size;
  sj_image_kind kind;
  char *lowered_name;
} sj_cache_image;

typedef struct sj_cache_counters {
  uint64_t hits, misses;
  uint64_t corrupt;   /* rows found bad (checksum, ELF, target) and removed */
  uint64_t errors;    /* SQLite/IO errors absorbed */
  uint64_t puts;
  uint64_t evicted;
} sj_cache_counters;

typedef struct sj_cache sj_cache;

/* Opens (or degrades).  Always returns a usable object unless out of memory
 * (then returns NULL).  Reasons for degrading are logged once. */
sj_cache *sj_cache_open(const sj_cache_opts *opts);
void sj_cache_close(sj_cache *c); /* flushes pending hit counts; NULL ok */

sj_cache_mode sj_cache_get_mode(const sj_cache *c);
const char *sj_cache_path(const sj_cache *c); /* "" when none */

typedef enum sj_cache_result {
  SJ_CACHE_HIT = 0,
  SJ_CACHE_MISS = 1 /* includes "found but bad, removed" (counted corrupt) */
} sj_cache_result;

/* Looks up key; a hit requires the canonical bytes to match exactly, the
 * checksum to verify, and for cubins the ELF header to be a CUDA ELF for
 * `target`.  Searches the writable file, then the layers. */
sj_cache_result sj_cache_get(sj_cache *c, const sj_key *key, const char *target,
                             sj_cache_image *out);
void sj_cache_image_free(sj_cache_image *img);

/* Stores a row (INSERT OR IGNORE in a BEGIN IMMEDIATE transaction).
 * Returns 0 when stored or already present, -1 when it could not (logged).
 * The row is checked first: key must be the hash of canonical, whose target
 * field must equal target, and the image must pass sj_image_check (-1 if
 * not).  Trailing NULs of a PTX image are not stored (nvrtcGetPTXSize
 * counts one).  In READONLY, MEMORY and DISABLED modes it stores nothing
 * and returns 0: a degraded cache is not an error. */
int sj_cache_put(sj_cache *c, const sj_cache_row *row);

/* Removes the row of key (e.g. the driver rejected its image); counted as
 * corrupt.  Rows of read-only sources (layers, a read-only file) cannot be
 * removed: the key is skipped in them for the life of this object.
 * Returns 0, or -1 if the delete failed (logged). */
int sj_cache_drop(sj_cache *c, const uint8_t key[SJ_KEY_BYTES]);

/* Cross-process single flight: a short lease row per key being compiled.
 * Returns 1 if this process now holds the lease (compile, put, release),
 * 0 if another live holder has it (poll sj_cache_get until it appears or the
 * lease expires), -1 if leases are unavailable (just compile).  A lease
 * held by this same process is renewed (1): threads and contexts of one
 * process must deduplicate among themselves.  A lease whose holder pid no
 * longer exists on this host is taken over at once.  ttl_ms <= 0: 120 s. */
int sj_cache_lease_acquire(sj_cache *c, const uint8_t key[SJ_KEY_BYTES],
                           int ttl_ms);
void sj_cache_lease_release(sj_cache *c, const uint8_t key[SJ_KEY_BYTES]);

void sj_cache_get_counters(sj_cache *c, sj_cache_counters *out);

/* ---- maintenance (writable file only unless stated) ----
 * These carry a _db_ infix because include/sagejit.h publishes sj_cache_list,
 * sj_cache_verify, ... with sj_context arguments; the names must not clash. */
typedef struct sj_cache_stat {
  int64_t entries, bytes;
  int schema_version;
} sj_cache_stat;
int sj_cache_stat_get(sj_cache *c, sj_cache_stat *out);

typedef struct sj_cache_list_entry {
  uint8_t key[SJ_KEY_BYTES];
  const char *target, *kernel_name, *kind;
  int64_t image_bytes;
  double compile_ms;
  int64_t created, last_used, hits;
} sj_cache_list_entry;
/* Calls fn for each row in key order; fn returns non-zero to stop.  Rows
 * are read in chunks and fn is called without the internal mutex held, so
 * it may call back into the cache. */
int sj_cache_db_list(sj_cache *c,
                     int (*fn)(void *user, const sj_cache_list_entry *e),
                     void *user);
/* Re-checks every row (as import does); removes bad ones when writable. */
int sj_cache_db_verify(sj_cache *c, int64_t *checked, int64_t *ok,
                       int64_t *corrupt);
int sj_cache_db_prune(sj_cache *c, int64_t max_bytes, int64_t *removed);
int sj_cache_db_clear(sj_cache *c, int64_t *removed);
/* Writes the rows of the cache file (READWRITE or READONLY) whose target
 * is in targets (all when n_targets is 0) to a new file.  Returns 0, -1
 * (error, logged), -2 (path exists). */
int sj_cache_db_export(sj_cache *c, const char *path,
                       const char *const *targets, size_t n_targets,
                       int64_t *exported);
/* Merges a cache file (READWRITE only).  Returns 0, -1 (IO/SQLite error or
 * cache not writable), -2 (malformed file: nothing merged). */
int sj_cache_db_import(sj_cache *c, const char *path, int64_t *imported,
                       int64_t *skipped);

/* Default directory: $SAGEJIT_CACHE_DIR, $XDG_CACHE_HOME/sagejit,
 * ~/.cache/sagejit.  Returns 0 or -1 (no HOME). */
int sj_cache_default_dir(char *buf, size_t size);

/* Checks that an image is a CUDA ELF built for target (cubins), or a
 * NUL-free PTX text with a matching .target line (PTX).  Returns 0 if ok. */
int sj_image_check(const void *image, size_t size, sj_image_kind kind,
                   const char *target);

#endif
