/*
 * cache.c -- the kernel cache: opening (and degrading), get, put, drop and
 * the deferred hit counts.  See cache.h for the contract, docs/cache.md for
 * the operator's view, cache_impl.h for how the files divide the work.
 *
 * Opening decides the mode once:
 *   READWRITE  the directory and file are ours and writable
 *   READONLY   the file is readable but cannot (or must not) be written:
 *              read-only directory or file system, or a newer schema
 *   MEMORY     nothing on disk can be used (or trusted); layers still are
 *   DISABLED   the caller asked for no cache
 * Each degradation logs one warning; later puts are silent no-ops.
 *
 * A get is a single indexed SELECT.  Its hit is remembered in a small hash
 * table and written back (hits, last_used) in one transaction at most once
 * a minute and at close, so reads never write.
 */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache_impl.h"

/* ---------------------------------------------------------------- logging */

void sjc_log(sj_cache *c, int level, const char *fmt, ...) {
  if (!c->log_fn)
    return;
  char line[1536];
  int n = snprintf(line, sizeof line, "cache: ");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  c->log_fn(c->log_user, level, line);
}

void sjc_db_error(sj_cache *c, sqlite3 *db, int rc, const char *what) {
  c->ctr.errors++;
  int level = c->error_logged ? SJ_CACHE_LOG_DEBUG : SJ_CACHE_LOG_WARN;
  c->error_logged = 1;
  const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  sjc_log(c, level, "%s failed: %s (%d)", what, msg, rc);
}

int64_t sjc_now_s(void) {
  return (int64_t)time(NULL);
}

int64_t sjc_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *dup_string(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d)
    memcpy(d, s, n);
  return d;
}

/* ------------------------------------------------------------ pending hits */

static size_t slot_of(const uint8_t key[SJ_KEY_BYTES], size_t cap) {
  uint64_t h = 0;
  memcpy(&h, key + 8, sizeof h); /* the key is a hash already */
  return (size_t)h & (cap - 1);
}

static sjc_pending *pend_find(sj_cache *c, const uint8_t key[SJ_KEY_BYTES],
                              int insert) {
  if (!c->pend_cap)
    return NULL;
  for (size_t i = slot_of(key, c->pend_cap);; i = (i + 1) & (c->pend_cap - 1)) {
    sjc_pending *p = &c->pend[i];
    if (!p->used) {
      if (!insert)
        return NULL;
      memcpy(p->key, key, SJ_KEY_BYTES);
      p->used = 1;
      c->pend_n++;
      return p;
    }
    if (memcmp(p->key, key, SJ_KEY_BYTES) == 0)
      return p;
  }
}

static int pend_grow(sj_cache *c) {
  size_t cap = c->pend_cap ? c->pend_cap * 2 : 64;
  sjc_pending *old = c->pend, *tab = calloc(cap, sizeof *tab);
  size_t old_cap = c->pend_cap;
  if (!tab)
    return -1;
  c->pend = tab;
  c->pend_cap = cap;
  c->pend_n = 0;
  for (size_t i = 0; i < old_cap; i++) {
    if (!old[i].used)
      continue;
    sjc_pending *p = pend_find(c, old[i].key, 1);
    p->hits = old[i].hits;
    p->last_used = old[i].last_used;
  }
  free(old);
  return 0;
}

static void pend_clear(sj_cache *c) {
  if (c->pend)
    memset(c->pend, 0, c->pend_cap * sizeof *c->pend);
  c->pend_n = 0;
}

/* Forgets one key (open addressing: re-inserts the rest of its cluster). */
static void pend_remove(sj_cache *c, const uint8_t key[SJ_KEY_BYTES]) {
  sjc_pending *p = pend_find(c, key, 0);
  if (!p)
    return;
  size_t mask = c->pend_cap - 1, i = (size_t)(p - c->pend);
  p->used = 0;
  c->pend_n--;
  for (i = (i + 1) & mask; c->pend[i].used; i = (i + 1) & mask) {
    sjc_pending e = c->pend[i];
    c->pend[i].used = 0;
    c->pend_n--;
    sjc_pending *q = pend_find(c, e.key, 1);
    q->hits = e.hits;
    q->last_used = e.last_used;
  }
}

int sjc_flush_hits_locked(sj_cache *c) {
  c->last_flush_ms = mono_ms();
  if (!c->pend_n)
    return 0;
  if (!c->main.db || !c->main.writable || !c->hit) {
    pend_clear(c);
    return 0;
  }
  sqlite3 *db = c->main.db;
  /* never stall a close for long on a busy file: counts are best effort */
  sqlite3_busy_timeout(db, c->busy_ms < 1000 ? c->busy_ms : 1000);
  int rc = sjc_begin(db);
  for (size_t i = 0; rc == SQLITE_OK && i < c->pend_cap; i++) {
    const sjc_pending *p = &c->pend[i];
    if (!p->used)
      continue;
    sqlite3_bind_blob(c->hit, 1, p->key, SJ_KEY_BYTES, SQLITE_STATIC);
    sqlite3_bind_int64(c->hit, 2, p->hits);
    sqlite3_bind_int64(c->hit, 3, p->last_used);
    rc = sqlite3_step(c->hit);
    rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    sqlite3_reset(c->hit);
  }
  if (rc == SQLITE_OK)
    rc = sjc_commit(db);
  else
    sjc_rollback(db);
  sqlite3_busy_timeout(db, c->busy_ms);
  if (rc != SQLITE_OK) {
    sjc_log(c, SJ_CACHE_LOG_DEBUG, "hit counts not written: %s",
            sqlite3_errstr(rc));
    return -1;
  }
  pend_clear(c);
  return 0;
}

static void note_hit(sj_cache *c, const uint8_t key[SJ_KEY_BYTES]) {
  if (c->pend_n * 2 >= c->pend_cap && pend_grow(c) != 0)
    return; /* out of memory: the count is only advisory */
  sjc_pending *p = pend_find(c, key, 1);
  p->hits++;
  p->last_used = sjc_now_s();
  if (c->pend_n >= 4096 ||
      mono_ms() - c->last_flush_ms >= SJC_FLUSH_INTERVAL_MS)
    sjc_flush_hits_locked(c);
}

/* --------------------------------------------------------------- denylist */

static int denied(const sjc_src *s, const uint8_t key[SJ_KEY_BYTES]) {
  for (size_t i = 0; i < s->n_deny; i++)
    if (memcmp(s->deny[i], key, SJ_KEY_BYTES) == 0)
      return 1;
  return 0;
}

static void deny(sjc_src *s, const uint8_t key[SJ_KEY_BYTES]) {
  if (denied(s, key))
    return;
  if (s->n_deny == s->cap_deny) {
    size_t cap = s->cap_deny ? s->cap_deny * 2 : 8;
    void *p = realloc(s->deny, cap * sizeof *s->deny);
    if (!p)
      return; /* then the row is only checked (and refused) again */
    s->deny = p;
    s->cap_deny = cap;
  }
  memcpy(s->deny[s->n_deny++], key, SJ_KEY_BYTES);
}

/* ---------------------------------------------------------------- sources */

static void src_close(sjc_src *s) {
  sqlite3_finalize(s->get);
  sqlite3_close_v2(s->db);
  free(s->path);
  free(s->deny);
  memset(s, 0, sizeof *s);
}

static void main_close(sj_cache *c) {
  sqlite3_finalize(c->put);
  sqlite3_finalize(c->del);
  sqlite3_finalize(c->hit);
  c->put = c->del = c->hit = NULL;
  src_close(&c->main);
}

static int src_init(sjc_src *s, sqlite3 *db, const char *path, int writable) {
  memset(s, 0, sizeof *s);
  s->db = db;
  s->writable = writable;
  s->path = dup_string(path);
  if (!s->path || sjc_prepare(db, sjc_sql_get, &s->get) != SQLITE_OK) {
    src_close(s);
    return -1;
  }
  return 0;
}

static int main_prepare_writes(sj_cache *c) {
  sqlite3 *db = c->main.db;
  if (sjc_prepare(db, sjc_sql_put, &c->put) != SQLITE_OK ||
      sjc_prepare(db, "DELETE FROM kernels WHERE key = ?1", &c->del) !=
          SQLITE_OK ||
      sjc_prepare(db,
                  "UPDATE kernels SET hits = hits + ?2,"
                  " last_used = max(last_used, ?3) WHERE key = ?1",
                  &c->hit) != SQLITE_OK)
    return -1;
  return 0;
}

/* --------------------------------------------------------------- opening */

static void degrade(sj_cache *c, sj_cache_mode mode, const char *fmt, ...)
    SJC_PRINTF(3, 4);

static void degrade(sj_cache *c, sj_cache_mode mode, const char *fmt, ...) {
  c->mode = mode;
  if (!c->log_fn)
    return;
  char msg[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  sjc_log(c, SJ_CACHE_LOG_WARN, "%s; %s", msg,
          mode == SJ_CACHE_MODE_READONLY
              ? "loading kernels from it but not storing new ones"
              : "kernels will not be stored on disk");
}

static int is_writable(const char *path) {
  return faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) == 0;
}

static int is_readable(const char *path) {
  return faccessat(AT_FDCWD, path, R_OK, AT_EACCESS) == 0;
}

/* The file and the SQLite files beside it must be ours to be trusted. */
static int file_trusted(sj_cache *c, const char *path) {
  static const char *const suffixes[] = {"", "-wal", "-shm"};
  for (size_t i = 0; i < 3; i++) {
    char p[4200], why[160];
    struct stat st;
    snprintf(p, sizeof p, "%s%s", path, suffixes[i]);
    if (stat(p, &st) != 0)
      continue;
    if (i == 0 && !S_ISREG(st.st_mode)) {
      degrade(c, SJ_CACHE_MODE_MEMORY, "%s is not a regular file", p);
      return 0;
    }
    if (!c->trust_foreign && sjc_check_trust(&st, why, sizeof why) != 0) {
      degrade(c, SJ_CACHE_MODE_MEMORY,
              "not loading from %s: it is %s (SAGEJIT_CACHE_TRUST=1 "
              "overrides)",
              p, why);
      return 0;
    }
  }
  return 1;
}

static void use_main(sj_cache *c, sqlite3 *db, const char *path, int writable) {
  if (src_init(&c->main, db, path, writable) != 0 ||
      (writable && main_prepare_writes(c) != 0)) {
    main_close(c);
    degrade(c, SJ_CACHE_MODE_MEMORY, "cannot prepare statements on %s", path);
    return;
  }
  c->mode = writable ? SJ_CACHE_MODE_READWRITE : SJ_CACHE_MODE_READONLY;
}

/* Read-write open with one quarantine-and-retry for a bad file.  Returns
 * the last SQLite code (SQLITE_OK: c->main is set). */
static int try_open_rw(sj_cache *c, const char *path) {
  int rc = SQLITE_OK;
  for (int attempt = 0; attempt < 2; attempt++) {
    sqlite3 *db;
    struct stat seen;
    rc = sjc_open_rw(c, path, &db, &seen);
    if (rc == SQLITE_OK) {
      use_main(c, db, path, 1); /* sets the mode, degraded or not */
      return SQLITE_OK;
    }
    if (!sjc_is_corrupt(rc) || sjc_quarantine(c, path, &seen) != 0)
      break;
  }
  return rc;
}

/* Why sjc_open_ro failed, in words. */
static const char *ro_problem(int rc) {
  if ((rc & 0xff) == SQLITE_ERROR)
    return "it lacks the kernels columns this version reads";
  return sqlite3_errstr(rc);
}

static void open_readonly(sj_cache *c, const char *path, const char *why) {
  sqlite3 *db;
  int version;
  int rc = sjc_open_ro(c, path, &db, &version);
  if (rc != SQLITE_OK) {
    degrade(c, SJ_CACHE_MODE_MEMORY, "%s, and it cannot be read: %s", why,
            ro_problem(rc));
    return;
  }
  use_main(c, db, path, 0);
  if (c->main.db)
    degrade(c, SJ_CACHE_MODE_READONLY, "%s", why);
}

static void open_main(sj_cache *c) {
  char why[4400];
  const char *dir = c->dir;
  if (sjc_mkdirs(dir) != 0) {
    degrade(c, SJ_CACHE_MODE_MEMORY, "cannot create cache directory %s: %s",
            dir, strerror(errno));
    return;
  }
  struct stat st;
  if (stat(dir, &st) == 0 && !c->trust_foreign &&
      sjc_check_trust(&st, why, sizeof why) != 0) {
    degrade(c, SJ_CACHE_MODE_MEMORY,
            "not using cache directory %s: it is %s (SAGEJIT_CACHE_TRUST=1 "
            "overrides)",
            dir, why);
    return;
  }
  snprintf(c->path_buf, sizeof c->path_buf, "%s/%s", dir, SJ_CACHE_FILE);
  const char *path = c->path_buf;
  if (!file_trusted(c, path))
    return;
  int exists = stat(path, &st) == 0;
  int dir_ok = is_writable(dir), dir_errno = errno;
  if (dir_ok && (!exists || is_writable(path))) {
    int rc = try_open_rw(c, path);
    if (rc == SQLITE_OK)
      return;
    if (rc == SJC_NEWER) {
      snprintf(why, sizeof why,
               "%s was written by a newer sagejit (schema newer than %d)", path,
               SJ_CACHE_SCHEMA);
      open_readonly(c, path, why);
      return;
    }
    if (!sjc_is_readonly(rc)) {
      degrade(c, SJ_CACHE_MODE_MEMORY, "cannot open %s: %s", path,
              rc < 0 ? "unusable" : sqlite3_errstr(rc));
      return;
    }
    exists = stat(path, &st) == 0;
  }
  if (!dir_ok)
    snprintf(why, sizeof why, "cache directory %s is not writable (%s)", dir,
             strerror(dir_errno));
  else
    snprintf(why, sizeof why, "%s is not writable", path);
  if (exists && is_readable(path))
    open_readonly(c, path, why);
  else
    degrade(c, SJ_CACHE_MODE_MEMORY, "%s", why);
}

/* Takes db over (closed on failure). */
static int add_layer(sj_cache *c, sqlite3 *db, const char *path) {
  sjc_src *l = realloc(c->layers, (c->n_layers + 1) * sizeof *l);
  if (!l) {
    sqlite3_close_v2(db);
    return -1;
  }
  c->layers = l;
  if (src_init(&l[c->n_layers], db, path, 0) != 0)
    return -1;
  c->n_layers++;
  return 0;
}

static void open_layer(sj_cache *c, const char *entry) {
  char path[4200], why[160];
  struct stat st, mst;
  if (stat(entry, &st) != 0) {
    sjc_log(c, SJ_CACHE_LOG_DEBUG, "layer %s: %s", entry, strerror(errno));
    return;
  }
  snprintf(path, sizeof path, "%s%s%s", entry, S_ISDIR(st.st_mode) ? "/" : "",
           S_ISDIR(st.st_mode) ? SJ_CACHE_FILE : "");
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
    sjc_log(c, SJ_CACHE_LOG_DEBUG, "layer %s: no cache file", path);
    return;
  }
  if (c->main.path && stat(c->main.path, &mst) == 0 &&
      mst.st_dev == st.st_dev && mst.st_ino == st.st_ino)
    return; /* the writable file itself */
  if (!c->trust_foreign && sjc_check_trust(&st, why, sizeof why) != 0) {
    sjc_log(c, SJ_CACHE_LOG_WARN,
            "not loading from layer %s: it is %s (SAGEJIT_CACHE_TRUST=1 "
            "overrides)",
            path, why);
    return;
  }
  sqlite3 *db;
  int version;
  int rc = sjc_open_ro(c, path, &db, &version);
  if (rc != SQLITE_OK) {
    sjc_log(c, SJ_CACHE_LOG_WARN, "ignoring layer %s: %s", path,
            ro_problem(rc));
    return;
  }
  if (add_layer(c, db, path) != 0)
    sjc_log(c, SJ_CACHE_LOG_WARN, "ignoring layer %s: out of memory", path);
}

static void open_layers(sj_cache *c, const char *layers) {
  const char *p = layers;
  while (p && *p) {
    const char *end = strchr(p, ':');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n > 0 && n < 4096) {
      char entry[4096];
      memcpy(entry, p, n);
      entry[n] = 0;
      open_layer(c, entry);
    }
    p = end ? end + 1 : NULL;
  }
}

sj_cache *sj_cache_open(const sj_cache_opts *opts) {
  static const sj_cache_opts defaults;
  if (!opts)
    opts = &defaults;
  sj_cache *c = calloc(1, sizeof *c);
  if (!c || pthread_mutex_init(&c->mu, NULL) != 0) {
    free(c);
    return NULL;
  }
  c->log_fn = opts->log_fn;
  c->log_user = opts->log_user;
  c->busy_ms =
      opts->busy_timeout_ms > 0 ? opts->busy_timeout_ms : SJC_DEFAULT_BUSY_MS;
  c->trust_foreign = opts->trust_foreign;
  c->max_bytes =
      opts->max_bytes == 0 ? SJ_CACHE_DEFAULT_MAX_BYTES : opts->max_bytes;
  c->total_bytes = -1;
  c->last_flush_ms = mono_ms();
  if (opts->disabled) {
    c->mode = SJ_CACHE_MODE_DISABLED;
    return c;
  }
  char dir[4096];
  if (opts->dir && *opts->dir)
    c->dir = dup_string(opts->dir);
  else if (sj_cache_default_dir(dir, sizeof dir) == 0)
    c->dir = dup_string(dir);
  if (c->dir)
    open_main(c);
  else
    degrade(c, SJ_CACHE_MODE_MEMORY, "no cache directory (HOME unset)");
  open_layers(c, opts->layers);
  return c;
}

void sj_cache_close(sj_cache *c) {
  if (!c)
    return;
  pthread_mutex_lock(&c->mu);
  sjc_flush_hits_locked(c);
  main_close(c);
  for (size_t i = 0; i < c->n_layers; i++)
    src_close(&c->layers[i]);
  free(c->layers);
  free(c->pend);
  free(c->dir);
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

sj_cache_mode sj_cache_get_mode(const sj_cache *c) {
  if (!c)
    return SJ_CACHE_MODE_DISABLED;
  sj_cache *m = (sj_cache *)c;
  pthread_mutex_lock(&m->mu);
  sj_cache_mode mode = m->mode;
  pthread_mutex_unlock(&m->mu);
  return mode;
}

const char *sj_cache_path(const sj_cache *c) {
  if (!c)
    return "";
  /* path_buf is written once, in sj_cache_open, and never changes */
  sj_cache *m = (sj_cache *)c;
  pthread_mutex_lock(&m->mu);
  const char *p = m->main.db ? m->path_buf : "";
  pthread_mutex_unlock(&m->mu);
  return p;
}

/* ------------------------------------------------------- error handling */

void sjc_handle_main_error_locked(sj_cache *c, int rc) {
  if (c->mode != SJ_CACHE_MODE_READWRITE)
    return;
  if (sjc_is_corrupt(rc)) {
    struct stat seen;
    char *path = dup_string(c->main.path);
    int have = path && stat(path, &seen) == 0;
    main_close(c);
    c->total_bytes = -1;
    pend_clear(c);
    if (have && sjc_quarantine(c, path, &seen) == 0)
      open_main(c);
    else
      degrade(c, SJ_CACHE_MODE_MEMORY, "cache file %s is corrupt",
              path ? path : "?");
    free(path);
  } else if (sjc_is_readonly(rc)) {
    sqlite3_finalize(c->put);
    sqlite3_finalize(c->del);
    sqlite3_finalize(c->hit);
    c->put = c->del = c->hit = NULL;
    c->main.writable = 0;
    pend_clear(c);
    degrade(c, SJ_CACHE_MODE_READONLY, "%s became read-only", c->main.path);
  }
}

/* -------------------------------------------------------------------- get */

static int blob_eq(sqlite3_stmt *st, int col, const void *p, size_t n) {
  if (sqlite3_column_type(st, col) != SQLITE_BLOB)
    return 0;
  const void *b = sqlite3_column_blob(st, col);
  return (size_t)sqlite3_column_bytes(st, col) == n &&
         (n == 0 || memcmp(b, p, n) == 0);
}

/* Why the row under st is not a valid hit for key/target, or NULL. */
static const char *hit_problem(sqlite3_stmt *st, const sj_key *key,
                               const char *target, sj_image_kind *kind) {
  if (!blob_eq(st, 0, key->canonical, key->canonical_len))
    return "canonical string differs (hash collision?)";
  const void *image = sqlite3_column_blob(st, 4);
  size_t size = (size_t)sqlite3_column_bytes(st, 4);
  if (sqlite3_column_type(st, 4) != SQLITE_BLOB || size == 0)
    return "image missing";
  uint8_t sum[16];
  sj_hash128(image, size, sum);
  if (!blob_eq(st, 1, sum, sizeof sum))
    return "checksum mismatch";
  if (sqlite3_column_type(st, 2) != SQLITE_TEXT ||
      sjc_kind_parse((const char *)sqlite3_column_text(st, 2), kind) != 0)
    return "unknown image kind";
  const char *lowered = (const char *)sqlite3_column_text(st, 3);
  if (sqlite3_column_type(st, 3) != SQLITE_TEXT || !lowered ||
      strlen(lowered) != (size_t)sqlite3_column_bytes(st, 3))
    return "lowered name missing";
  if (sj_image_check(image, size, *kind, target) != 0)
    return "image header does not match the target";
  return NULL;
}

static int copy_hit(sqlite3_stmt *st, sj_image_kind kind, sj_cache_image *out) {
  size_t size = (size_t)sqlite3_column_bytes(st, 4);
  out->data = malloc(size + 1);
  out->lowered_name = dup_string((const char *)sqlite3_column_text(st, 3));
  if (!out->data || !out->lowered_name) {
    sj_cache_image_free(out);
    return -1;
  }
  memcpy(out->data, sqlite3_column_blob(st, 4), size);
  ((char *)out->data)[size] = 0; /* PTX is handed out NUL-terminated */
  out->size = size;
  out->kind = kind;
  return 0;
}

/* Deletes a bad row from the writable file. */
static void remove_row(sj_cache *c, const uint8_t key[SJ_KEY_BYTES]) {
  pend_remove(c, key);
  if (!c->main.writable || !c->del)
    return;
  int rc = sjc_begin(c->main.db);
  if (rc == SQLITE_OK) {
    sqlite3_bind_blob(c->del, 1, key, SJ_KEY_BYTES, SQLITE_STATIC);
    rc = sqlite3_step(c->del);
    rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    sqlite3_reset(c->del);
    rc = rc == SQLITE_OK ? sjc_commit(c->main.db) : rc;
  }
  if (rc != SQLITE_OK) {
    sjc_rollback(c->main.db);
    sjc_db_error(c, c->main.db, rc, "removing a bad row");
    sjc_handle_main_error_locked(c, rc);
  } else {
    c->total_bytes = -1;
  }
}

static sj_cache_result get_from(sj_cache *c, sjc_src *s, const sj_key *key,
                                const char *target, sj_cache_image *out) {
  if (!s->writable && denied(s, key->bytes))
    return SJ_CACHE_MISS;
  sqlite3_stmt *st = s->get;
  sqlite3_bind_blob(st, 1, key->bytes, SJ_KEY_BYTES, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
      sjc_db_error(c, s->db, rc, "cache lookup");
      if (s == &c->main)
        sjc_handle_main_error_locked(c, rc);
    }
    return SJ_CACHE_MISS;
  }
  sj_image_kind kind = SJ_IMAGE_CUBIN;
  const char *problem = hit_problem(st, key, target, &kind);
  int ok = !problem && copy_hit(st, kind, out) == 0;
  sqlite3_reset(st);
  if (problem) {
    char hex[SJ_KEY_HEX];
    sj_key_hex(key->bytes, hex);
    c->ctr.corrupt++;
    sjc_log(c, SJ_CACHE_LOG_WARN, "entry %s in %s is bad (%s); %s", hex,
            s->path, problem, s->writable ? "removed it" : "ignoring it");
    if (s->writable)
      remove_row(c, key->bytes);
    else
      deny(s, key->bytes);
    return SJ_CACHE_MISS;
  }
  if (!ok)
    return SJ_CACHE_MISS; /* out of memory */
  if (s->writable)
    note_hit(c, key->bytes);
  return SJ_CACHE_HIT;
}

sj_cache_result sj_cache_get(sj_cache *c, const sj_key *key, const char *target,
                             sj_cache_image *out) {
  if (out)
    memset(out, 0, sizeof *out);
  if (!c || !key || !key->canonical || !target || !out)
    return SJ_CACHE_MISS;
  /* The key names its target; a lookup for another one is the caller's
   * mistake and must not condemn a good row. */
  char key_target[64];
  int target_ok = sj_key_canonical_target(key->canonical, key->canonical_len,
                                          key_target, sizeof key_target) == 0 &&
                  strcmp(key_target, target) == 0;
  pthread_mutex_lock(&c->mu);
  sj_cache_result r = SJ_CACHE_MISS;
  if (!target_ok)
    sjc_log(c, SJ_CACHE_LOG_DEBUG, "lookup for %s with another's key", target);
  else if (c->mode != SJ_CACHE_MODE_DISABLED) {
    if (c->main.db)
      r = get_from(c, &c->main, key, target, out);
    for (size_t i = 0; r == SJ_CACHE_MISS && i < c->n_layers; i++)
      r = get_from(c, &c->layers[i], key, target, out);
  }
  if (r == SJ_CACHE_HIT)
    c->ctr.hits++;
  else
    c->ctr.misses++;
  pthread_mutex_unlock(&c->mu);
  return r;
}

void sj_cache_image_free(sj_cache_image *img) {
  if (!img)
    return;
  free(img->data);
  free(img->lowered_name);
  memset(img, 0, sizeof *img);
}

/* -------------------------------------------------------------------- put */

/* Why a row offered to put cannot be stored, or NULL. */
static const char *put_problem(const sj_cache_row *r, size_t *size) {
  if (!r->canonical || !r->canonical_len || !r->target || !r->lowered_name ||
      !r->image)
    return "missing field";
  uint8_t k[SJ_KEY_BYTES];
  sj_hash128(r->canonical, r->canonical_len, k);
  if (memcmp(k, r->key, SJ_KEY_BYTES) != 0)
    return "key is not the hash of the canonical string";
  char t[64];
  if (sj_key_canonical_target(r->canonical, r->canonical_len, t, sizeof t) !=
          0 ||
      strcmp(t, r->target) != 0)
    return "canonical string malformed or for another target";
  size_t n = r->image_size;
  if (r->kind == SJ_IMAGE_PTX) /* nvrtcGetPTXSize counts the NUL */
    while (n && ((const char *)r->image)[n - 1] == 0)
      n--;
  if (sj_image_check(r->image, n, r->kind, r->target) != 0)
    return "image header does not match the target";
  *size = n;
  return NULL;
}

static int insert_row(sj_cache *c, const sj_cache_row *r, size_t size) {
  sj_cache_row row = *r;
  row.image_size = size;
  uint8_t sum[16];
  sj_hash128(r->image, size, sum);
  int64_t now = sjc_now_s();
  int rc = sjc_begin(c->main.db);
  if (rc == SQLITE_OK) {
    rc = sjc_row_bind(c->put, &row, sum, now, now, 0);
    if (rc == SQLITE_OK)
      rc = sqlite3_step(c->put);
    rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    sqlite3_reset(c->put);
    sqlite3_clear_bindings(c->put);
  }
  int stored = rc == SQLITE_OK && sqlite3_changes(c->main.db) == 1;
  /* The kernel is there now: its compile lease, whoever holds it, ends in
   * the same transaction.  (Released afterwards, a holder killed between
   * the two left a row no later call ever looked at again: every call
   * then hits the kernel and never asks for its lease.) */
  if (rc == SQLITE_OK) {
    sqlite3_stmt *st = NULL;
    rc = sjc_prepare(c->main.db, "DELETE FROM leases WHERE key = ?1", &st);
    if (rc == SQLITE_OK) {
      sqlite3_bind_blob(st, 1, r->key, SJ_KEY_BYTES, SQLITE_STATIC);
      rc = sqlite3_step(st);
      rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    sqlite3_finalize(st);
  }
  if (rc == SQLITE_OK)
    rc = sjc_commit(c->main.db);
  if (rc != SQLITE_OK) {
    sjc_rollback(c->main.db);
    sjc_db_error(c, c->main.db, rc, "storing a kernel");
    sjc_handle_main_error_locked(c, rc);
    return -1;
  }
  if (stored) {
    c->ctr.puts++;
    sjc_maybe_evict_locked(c, (int64_t)size);
  }
  return 0;
}

int sj_cache_put(sj_cache *c, const sj_cache_row *row) {
  if (!c || !row)
    return -1;
  pthread_mutex_lock(&c->mu);
  int rc = 0;
  if (c->mode == SJ_CACHE_MODE_READWRITE) {
    size_t size = 0;
    const char *problem = put_problem(row, &size);
    if (problem) {
      char hex[SJ_KEY_HEX];
      sj_key_hex(row->key, hex);
      sjc_log(c, SJ_CACHE_LOG_WARN, "not storing %s: %s", hex, problem);
      rc = -1;
    } else {
      rc = insert_row(c, row, size);
    }
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int sj_cache_drop(sj_cache *c, const uint8_t key[SJ_KEY_BYTES]) {
  if (!c || !key)
    return -1;
  pthread_mutex_lock(&c->mu);
  c->ctr.corrupt++;
  uint64_t errors = c->ctr.errors;
  if (c->main.db && c->main.writable)
    remove_row(c, key);
  else
    pend_remove(c, key);
  /* a read-only source cannot forget the row: skip it from now on */
  if (c->main.db && !c->main.writable)
    deny(&c->main, key);
  for (size_t i = 0; i < c->n_layers; i++)
    deny(&c->layers[i], key);
  int rc = c->ctr.errors == errors ? 0 : -1;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

void sj_cache_get_counters(sj_cache *c, sj_cache_counters *out) {
  if (!out)
    return;
  memset(out, 0, sizeof *out);
  if (!c)
    return;
  pthread_mutex_lock(&c->mu);
  *out = c->ctr;
  pthread_mutex_unlock(&c->mu);
}

/* ---------------------------------------------------------------- eviction */

void sjc_maybe_evict_locked(sj_cache *c, int64_t added) {
  if (c->max_bytes < 0 || !c->main.writable)
    return;
  if (c->total_bytes >= 0)
    c->total_bytes += added;
  if (c->total_bytes >= 0 && c->total_bytes <= c->max_bytes &&
      ++c->puts_since_check < SJC_EVICT_CHECK_EVERY)
    return;
  c->puts_since_check = 0;
  sqlite3_stmt *st;
  int rc = sjc_prepare(c->main.db,
                       "SELECT coalesce(sum(image_size), 0) FROM kernels", &st);
  if (rc == SQLITE_OK) {
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
      c->total_bytes = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  if (rc != SQLITE_ROW || c->total_bytes <= c->max_bytes)
    return;
  /* down to 90% so that the next puts do not each evict again */
  int64_t removed = 0;
  sjc_flush_hits_locked(c);
  if (sjc_prune_locked(c, c->max_bytes - c->max_bytes / 10, &removed) == 0)
    sjc_log(c, SJ_CACHE_LOG_INFO,
            "evicted %lld least recently used kernels (limit %lld bytes)",
            (long long)removed, (long long)c->max_bytes);
}

/* ------------------------------------------------------------- directory */

static int copy_path(char *buf, size_t size, const char *a, const char *b) {
  int n = snprintf(buf, size, "%s%s", a, b);
  return n >= 0 && (size_t)n < size ? 0 : -1;
}

int sj_cache_default_dir(char *buf, size_t size) {
  if (!buf || size == 0)
    return -1;
  const char *e = getenv("SAGEJIT_CACHE_DIR");
  if (e && *e)
    return copy_path(buf, size, e, "");
  e = getenv("XDG_CACHE_HOME");
  if (e && e[0] == '/') /* the XDG spec ignores relative paths */
    return copy_path(buf, size, e, "/sagejit");
  const char *home = getenv("HOME");
  char pwbuf[4096];
  struct passwd pw, *res = NULL;
  if ((!home || !*home) &&
      getpwuid_r(geteuid(), &pw, pwbuf, sizeof pwbuf, &res) == 0 && res)
    home = res->pw_dir;
  if (!home || !*home)
    return -1;
  return copy_path(buf, size, home, "/.cache/sagejit");
}
