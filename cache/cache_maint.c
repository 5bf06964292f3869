/*
 * cache_maint.c -- maintenance of the cache file: stat, list, verify,
 * prune, clear, export and import, and the row helpers they share.
 *
 * Long walks (list, verify) go in key order in chunks, taking the mutex per
 * chunk, so that a verify of a large file never stalls other threads for
 * long and list never calls back with the mutex held.
 *
 * Export writes a fresh file next to the destination, fills it in one
 * transaction, fsyncs it and links it into place with RENAME_NOREPLACE: a
 * reader sees no file or the whole file, and an existing file is never
 * replaced.  Import reads a file as untrusted input (read-only connection,
 * defensive mode, no triggers/views/untrusted functions), checks its schema
 * version and every row, and merges inside one transaction of the cache
 * file that is rolled back at the first bad row.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache_impl.h"

#define CHUNK_ROWS 64

const char sjc_sql_all_columns[] =
    "key, target, kernel_name, lowered_name, nvrtc_version, options, kind,"
    " checksum, image_size, compile_ms, created, last_used, hits, canonical,"
    " image";

/* ------------------------------------------------------------------- rows */

static int col_text(sqlite3_stmt *st, int i, int nullable, const char **out) {
  *out = NULL;
  int type = sqlite3_column_type(st, i);
  if (type == SQLITE_NULL && nullable)
    return 0;
  if (type != SQLITE_TEXT)
    return -1;
  const char *s = (const char *)sqlite3_column_text(st, i);
  if (!s || strlen(s) != (size_t)sqlite3_column_bytes(st, i))
    return -1; /* NUL inside */
  *out = s;
  return 0;
}

static int col_blob(sqlite3_stmt *st, int i, const void **p, size_t *n) {
  if (sqlite3_column_type(st, i) != SQLITE_BLOB)
    return -1;
  *p = sqlite3_column_blob(st, i);
  *n = (size_t)sqlite3_column_bytes(st, i);
  return *n ? 0 : -1;
}

static int col_int(sqlite3_stmt *st, int i, int64_t *v) {
  if (sqlite3_column_type(st, i) != SQLITE_INTEGER)
    return -1;
  *v = sqlite3_column_int64(st, i);
  return 0;
}

int sjc_row_read(sqlite3_stmt *st, sjc_row_buf *r) {
  memset(r, 0, sizeof *r);
  sj_cache_row *w = &r->row;
  const void *key, *checksum, *canonical;
  const char *kind;
  size_t key_len;
  int64_t image_size;
  if (col_blob(st, 0, &key, &key_len) || key_len != SJ_KEY_BYTES ||
      col_text(st, 1, 0, &w->target) || col_text(st, 2, 1, &w->kernel_name) ||
      col_text(st, 3, 0, &w->lowered_name) ||
      col_text(st, 4, 1, &w->nvrtc_version) ||
      col_text(st, 5, 1, &w->options) || col_text(st, 6, 0, &kind) ||
      sjc_kind_parse(kind, &w->kind) ||
      col_blob(st, 7, &checksum, &r->checksum_len) ||
      col_int(st, 8, &image_size) || col_int(st, 10, &r->created) ||
      col_int(st, 11, &r->last_used) || col_int(st, 12, &r->hits) ||
      col_blob(st, 13, &canonical, &w->canonical_len) ||
      col_blob(st, 14, &w->image, &w->image_size))
    return -1;
  int t = sqlite3_column_type(st, 9);
  if (t != SQLITE_NULL && t != SQLITE_FLOAT && t != SQLITE_INTEGER)
    return -1;
  w->compile_ms = sqlite3_column_double(st, 9);
  if (image_size < 0 || (uint64_t)image_size != w->image_size)
    return -1;
  memcpy(w->key, key, SJ_KEY_BYTES);
  r->checksum = checksum;
  w->canonical = canonical;
  return 0;
}

const char *sjc_row_problem(const sjc_row_buf *r) {
  const sj_cache_row *w = &r->row;
  uint8_t h[16];
  sj_hash128(w->canonical, w->canonical_len, h);
  if (memcmp(h, w->key, SJ_KEY_BYTES) != 0)
    return "key is not the hash of the canonical string";
  char target[64];
  if (sj_key_canonical_target(w->canonical, w->canonical_len, target,
                              sizeof target) != 0 ||
      strcmp(target, w->target) != 0)
    return "canonical string malformed or for another target";
  sj_hash128(w->image, w->image_size, h);
  if (r->checksum_len != sizeof h || memcmp(h, r->checksum, sizeof h) != 0)
    return "checksum mismatch";
  if (sj_image_check(w->image, w->image_size, w->kind, w->target) != 0)
    return "image header does not match the target";
  return NULL;
}

static int bind_text(sqlite3_stmt *st, int i, const char *s) {
  if (!s)
    return sqlite3_bind_null(st, i);
  return sqlite3_bind_text64(st, i, s, strlen(s), SQLITE_STATIC, SQLITE_UTF8);
}

int sjc_row_bind(sqlite3_stmt *st, const sj_cache_row *r,
                 const uint8_t checksum[16], int64_t created, int64_t last_used,
                 int64_t hits) {
  int rc = sqlite3_bind_blob(st, 1, r->key, SJ_KEY_BYTES, SQLITE_STATIC);
  rc = rc ? rc : bind_text(st, 2, r->target);
  rc = rc ? rc : bind_text(st, 3, r->kernel_name);
  rc = rc ? rc : bind_text(st, 4, r->lowered_name);
  rc = rc ? rc : bind_text(st, 5, r->nvrtc_version);
  rc = rc ? rc : bind_text(st, 6, r->options);
  rc = rc ? rc : bind_text(st, 7, sjc_kind_name(r->kind));
  rc = rc ? rc : sqlite3_bind_blob(st, 8, checksum, 16, SQLITE_STATIC);
  rc = rc ? rc : sqlite3_bind_int64(st, 9, (sqlite3_int64)r->image_size);
  rc = rc ? rc : sqlite3_bind_double(st, 10, r->compile_ms);
  rc = rc ? rc : sqlite3_bind_int64(st, 11, created);
  rc = rc ? rc : sqlite3_bind_int64(st, 12, last_used);
  rc = rc ? rc : sqlite3_bind_int64(st, 13, hits);
  rc = rc ? rc
          : sqlite3_bind_blob64(st, 14, r->canonical, r->canonical_len,
                                SQLITE_STATIC);
  rc = rc ? rc
          : sqlite3_bind_blob64(st, 15, r->image, r->image_size, SQLITE_STATIC);
  return rc;
}

/* ------------------------------------------------------------------ stat */

int sj_cache_stat_get(sj_cache *c, sj_cache_stat *out) {
  if (!c || !out)
    return -1;
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&c->mu);
  int rc = SQLITE_OK;
  if (c->main.db) {
    sqlite3_stmt *st;
    rc = sjc_prepare(c->main.db,
                     "SELECT count(*), coalesce(sum(image_size), 0)"
                     " FROM kernels",
                     &st);
    if (rc == SQLITE_OK) {
      rc = sqlite3_step(st);
      if (rc == SQLITE_ROW) {
        out->entries = sqlite3_column_int64(st, 0);
        out->bytes = sqlite3_column_int64(st, 1);
        rc = SQLITE_OK;
      }
      sqlite3_finalize(st);
    }
    if (rc == SQLITE_OK)
      rc = sjc_user_version(c->main.db, &out->schema_version);
    if (rc != SQLITE_OK)
      sjc_db_error(c, c->main.db, rc, "cache stat");
  }
  pthread_mutex_unlock(&c->mu);
  return rc == SQLITE_OK ? 0 : -1;
}

/* ------------------------------------------------------------------ list */

typedef struct list_item {
  sj_cache_list_entry e;
  char *strings; /* target \0 kernel_name \0 kind \0 */
} list_item;

static void free_items(list_item *items, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(items[i].strings);
}

static int fill_item(sqlite3_stmt *st, list_item *it) {
  const char *s[3];
  size_t len[3], total = 0;
  for (int i = 0; i < 3; i++) {
    s[i] = (const char *)sqlite3_column_text(st, 1 + i);
    s[i] = s[i] ? s[i] : "";
    len[i] = strlen(s[i]) + 1;
    total += len[i];
  }
  char *p = malloc(total);
  if (!p)
    return -1;
  it->strings = p;
  it->e.target = p;
  it->e.kernel_name = p + len[0];
  it->e.kind = p + len[0] + len[1];
  for (int i = 0; i < 3; i++) {
    memcpy(p, s[i], len[i]);
    p += len[i];
  }
  const void *k = sqlite3_column_blob(st, 0);
  memset(it->e.key, 0, SJ_KEY_BYTES);
  if (k && sqlite3_column_bytes(st, 0) == SJ_KEY_BYTES)
    memcpy(it->e.key, k, SJ_KEY_BYTES);
  it->e.image_bytes = sqlite3_column_int64(st, 4);
  it->e.compile_ms = sqlite3_column_double(st, 5);
  it->e.created = sqlite3_column_int64(st, 6);
  it->e.last_used = sqlite3_column_int64(st, 7);
  it->e.hits = sqlite3_column_int64(st, 8);
  return 0;
}

/* Reads up to CHUNK_ROWS entries after *last; returns the count or -1. */
static int list_chunk(sj_cache *c, uint8_t *last, size_t *last_len,
                      list_item *items) {
  sqlite3_stmt *st;
  int rc = sjc_prepare(c->main.db,
                       "SELECT key, target, kernel_name, kind, image_size,"
                       " compile_ms, created, last_used, hits FROM kernels"
                       " WHERE key > ?1 ORDER BY key LIMIT 64",
                       &st);
  int n = 0;
  if (rc == SQLITE_OK) {
    sqlite3_bind_blob(st, 1, last, (int)*last_len, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && n < CHUNK_ROWS) {
      if (fill_item(st, &items[n]) != 0) {
        rc = SQLITE_NOMEM;
        break;
      }
      memcpy(last, items[n].e.key, SJ_KEY_BYTES);
      *last_len = SJ_KEY_BYTES;
      n++;
    }
    sqlite3_finalize(st);
  }
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
    sjc_db_error(c, c->main.db, rc, "cache list");
    free_items(items, (size_t)n);
    return -1;
  }
  return n;
}

int sj_cache_db_list(sj_cache *c,
                     int (*fn)(void *user, const sj_cache_list_entry *e),
                     void *user) {
  if (!c || !fn)
    return -1;
  list_item items[CHUNK_ROWS];
  uint8_t last[SJ_KEY_BYTES];
  size_t last_len = 0;
  for (;;) {
    pthread_mutex_lock(&c->mu);
    int n = c->main.db ? list_chunk(c, last, &last_len, items) : 0;
    pthread_mutex_unlock(&c->mu);
    if (n <= 0)
      return n;
    int stop = 0;
    for (int i = 0; i < n && !stop; i++)
      stop = fn(user, &items[i].e);
    free_items(items, (size_t)n);
    if (stop || n < CHUNK_ROWS)
      return 0;
  }
}

/* ---------------------------------------------------------------- verify */

/* Deletes keys from the writable file in one transaction. */
static int delete_keys(sj_cache *c, uint8_t (*keys)[SJ_KEY_BYTES], int n) {
  sqlite3 *db = c->main.db;
  int rc = sjc_begin(db);
  for (int i = 0; rc == SQLITE_OK && i < n; i++) {
    sqlite3_bind_blob(c->del, 1, keys[i], SJ_KEY_BYTES, SQLITE_STATIC);
    rc = sqlite3_step(c->del);
    rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    sqlite3_reset(c->del);
  }
  rc = rc == SQLITE_OK ? sjc_commit(db) : rc;
  if (rc != SQLITE_OK) {
    sjc_rollback(db);
    sjc_db_error(c, db, rc, "removing bad rows");
    return -1;
  }
  c->total_bytes = -1;
  return 0;
}

typedef struct verify_tally {
  int64_t checked, ok, corrupt;
} verify_tally;

/* Checks up to CHUNK_ROWS rows after *last.  Returns the rows read or -1. */
static int verify_chunk(sj_cache *c, uint8_t *last, size_t *last_len,
                        verify_tally *t) {
  static const char fmt[] = "SELECT %s FROM kernels WHERE key > ?1"
                            " ORDER BY key LIMIT %d";
  char sql[512];
  snprintf(sql, sizeof sql, fmt, sjc_sql_all_columns, CHUNK_ROWS);
  sqlite3_stmt *st;
  int rc = sjc_prepare(c->main.db, sql, &st);
  uint8_t bad[CHUNK_ROWS][SJ_KEY_BYTES];
  int n = 0, n_bad = 0;
  if (rc == SQLITE_OK) {
    sqlite3_bind_blob(st, 1, last, (int)*last_len, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      sjc_row_buf r;
      const char *problem = sjc_row_read(st, &r) ? "malformed row" : NULL;
      problem = problem ? problem : sjc_row_problem(&r);
      const void *k = sqlite3_column_blob(st, 0);
      if (k && sqlite3_column_bytes(st, 0) == SJ_KEY_BYTES) {
        memcpy(last, k, SJ_KEY_BYTES);
        *last_len = SJ_KEY_BYTES;
      }
      n++;
      t->checked++;
      if (!problem) {
        t->ok++;
        continue;
      }
      char hex[SJ_KEY_HEX];
      sj_key_hex(last, hex);
      sjc_log(c, SJ_CACHE_LOG_WARN, "verify: entry %s is bad (%s)", hex,
              problem);
      memcpy(bad[n_bad++], last, SJ_KEY_BYTES);
    }
    sqlite3_finalize(st);
  }
  if (rc != SQLITE_DONE) {
    sjc_db_error(c, c->main.db, rc, "cache verify");
    return -1;
  }
  t->corrupt += n_bad;
  c->ctr.corrupt += (uint64_t)n_bad;
  if (n_bad && c->main.writable && delete_keys(c, bad, n_bad) != 0)
    return -1;
  return n;
}

int sj_cache_db_verify(sj_cache *c, int64_t *checked, int64_t *ok,
                       int64_t *corrupt) {
  verify_tally t = {0, 0, 0};
  int rc = c ? 0 : -1;
  uint8_t last[SJ_KEY_BYTES];
  size_t last_len = 0;
  while (rc == 0) {
    pthread_mutex_lock(&c->mu);
    int n = c->main.db ? verify_chunk(c, last, &last_len, &t) : 0;
    pthread_mutex_unlock(&c->mu);
    if (n < 0)
      rc = -1;
    if (n < CHUNK_ROWS)
      break;
  }
  if (checked)
    *checked = t.checked;
  if (ok)
    *ok = t.ok;
  if (corrupt)
    *corrupt = t.corrupt;
  return rc;
}

/* -------------------------------------------------------- prune and clear */

static int writable_or_log(sj_cache *c, const char *what) {
  if (c->mode == SJ_CACHE_MODE_READWRITE && c->main.writable)
    return 1;
  sjc_log(c, SJ_CACHE_LOG_WARN, "%s: the cache is not writable", what);
  return 0;
}

/* Gives freed pages back to the file system (auto_vacuum=INCREMENTAL). */
static void give_back_pages(sj_cache *c) {
  sjc_exec(c->main.db, "PRAGMA incremental_vacuum");
}

int sjc_prune_locked(sj_cache *c, int64_t max_bytes, int64_t *removed) {
  /* Keeps the most recently used rows whose sizes add up to max_bytes.
   * Times are in seconds; within one second the later insert (rowid) is
   * the more recent. */
  static const char sql[] =
      "DELETE FROM kernels WHERE rowid IN ("
      " SELECT rowid FROM (SELECT rowid, sum(image_size) OVER ("
      "  ORDER BY last_used DESC, created DESC, rowid DESC"
      "  ROWS UNBOUNDED PRECEDING) AS running FROM kernels)"
      " WHERE running > ?1)";
  sqlite3 *db = c->main.db;
  sqlite3_stmt *st = NULL;
  sjc_flush_hits_locked(c);
  int rc = sjc_prepare(db, sql, &st);
  rc = rc == SQLITE_OK ? sjc_begin(db) : rc;
  int64_t n = 0;
  if (rc == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, max_bytes);
    rc = sqlite3_step(st);
    rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    n = sqlite3_changes(db);
    rc = rc == SQLITE_OK ? sjc_commit(db) : rc;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_OK) {
    sjc_rollback(db);
    sjc_db_error(c, db, rc, "cache prune");
    return -1;
  }
  c->ctr.evicted += (uint64_t)n;
  c->total_bytes = -1;
  if (n)
    give_back_pages(c);
  if (removed)
    *removed = n;
  return 0;
}

int sj_cache_db_prune(sj_cache *c, int64_t max_bytes, int64_t *removed) {
  if (removed)
    *removed = 0;
  if (!c || max_bytes < 0)
    return -1;
  pthread_mutex_lock(&c->mu);
  int rc = -1;
  if (writable_or_log(c, "prune"))
    rc = sjc_prune_locked(c, max_bytes, removed);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int sj_cache_db_clear(sj_cache *c, int64_t *removed) {
  if (removed)
    *removed = 0;
  if (!c)
    return -1;
  pthread_mutex_lock(&c->mu);
  int rc = -1;
  if (writable_or_log(c, "clear")) {
    sjc_flush_hits_locked(c);
    sqlite3 *db = c->main.db;
    int64_t n = 0;
    rc = sjc_begin(db);
    if (rc == SQLITE_OK)
      rc = sjc_exec(db, "DELETE FROM kernels");
    if (rc == SQLITE_OK) {
      n = sqlite3_changes(db);
      rc = sjc_exec(db, "DELETE FROM leases");
    }
    rc = rc == SQLITE_OK ? sjc_commit(db) : rc;
    if (rc == SQLITE_OK) {
      give_back_pages(c);
      c->total_bytes = 0;
      if (removed)
        *removed = n;
    } else {
      sjc_rollback(db);
      sjc_db_error(c, db, rc, "cache clear");
    }
    rc = rc == SQLITE_OK ? 0 : -1;
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* ---------------------------------------------------------------- export */

static int target_wanted(const char *t, const char *const *targets, size_t n) {
  if (n == 0)
    return 1;
  for (size_t i = 0; i < n; i++)
    if (targets[i] && strcmp(targets[i], t) == 0)
      return 1;
  return 0;
}

/* Copies the wanted good rows of the cache file into out (in a transaction
 * the caller opened).  Returns an SQLite code. */
static int copy_rows(sj_cache *c, sqlite3 *out, const char *const *targets,
                     size_t n_targets, int64_t *exported) {
  char sql[512];
  snprintf(sql, sizeof sql, "SELECT %s FROM kernels ORDER BY key",
           sjc_sql_all_columns);
  sqlite3_stmt *src = NULL, *dst = NULL;
  int rc = sjc_prepare(c->main.db, sql, &src);
  rc = rc == SQLITE_OK ? sjc_prepare(out, sjc_sql_put, &dst) : rc;
  while (rc == SQLITE_OK && (rc = sqlite3_step(src)) == SQLITE_ROW) {
    sjc_row_buf r;
    rc = SQLITE_OK;
    if (sjc_row_read(src, &r) != 0 || sjc_row_problem(&r) != NULL) {
      sjc_log(c, SJ_CACHE_LOG_WARN, "export: skipping a bad row");
      continue;
    }
    if (!target_wanted(r.row.target, targets, n_targets))
      continue;
    rc = sjc_row_bind(dst, &r.row, r.checksum, r.created, r.last_used, 0);
    if (rc == SQLITE_OK)
      rc = sqlite3_step(dst);
    rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    sqlite3_reset(dst);
    if (rc == SQLITE_OK)
      (*exported)++;
  }
  rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
  sqlite3_finalize(src);
  sqlite3_finalize(dst);
  return rc;
}

static int fsync_path(const char *path, int flags) {
  int fd = open(path, flags | O_CLOEXEC);
  if (fd < 0)
    return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

/* Moves tmp to path unless path exists.  Returns 0, -1 or -2 (exists). */
static int link_into_place(const char *tmp, const char *path) {
  if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0)
    return 0;
  if (errno == EEXIST)
    return -2;
  /* file systems without RENAME_NOREPLACE: link() also refuses to replace */
  if (link(tmp, path) == 0) {
    unlink(tmp);
    return 0;
  }
  return errno == EEXIST ? -2 : -1;
}

static void dir_of(const char *path, char *buf, size_t size) {
  const char *slash = strrchr(path, '/');
  size_t n = slash ? (size_t)(slash - path) : 0;
  if (!slash)
    snprintf(buf, size, ".");
  else
    snprintf(buf, size, "%.*s", (int)(n ? n : 1), path);
}

static int export_locked(sj_cache *c, const char *path, const char *tmp,
                         const char *const *targets, size_t n_targets,
                         int64_t *exported) {
  sqlite3 *out;
  int rc = sjc_open_new(c, tmp, &out);
  if (rc == SQLITE_OK) {
    rc = sjc_exec(out, "BEGIN");
    rc = rc == SQLITE_OK ? sjc_create_schema(out) : rc;
    if (rc == SQLITE_OK) {
      char sql[64];
      snprintf(sql, sizeof sql, "PRAGMA user_version = %d", SJ_CACHE_SCHEMA);
      rc = sjc_exec(out, sql);
    }
    rc = rc == SQLITE_OK ? copy_rows(c, out, targets, n_targets, exported) : rc;
    rc = rc == SQLITE_OK ? sjc_exec(out, "COMMIT") : rc;
    if (sqlite3_close(out) != SQLITE_OK && rc == SQLITE_OK)
      rc = SQLITE_ERROR;
  }
  if (rc != SQLITE_OK) {
    sjc_log(c, SJ_CACHE_LOG_WARN, "export to %s failed: %s", path,
            sqlite3_errstr(rc));
    return -1;
  }
  char dir[4096];
  dir_of(path, dir, sizeof dir);
  if (fsync_path(tmp, O_RDONLY) != 0)
    return -1;
  int r = link_into_place(tmp, path);
  if (r == 0)
    fsync_path(dir, O_RDONLY | O_DIRECTORY);
  return r;
}

int sj_cache_db_export(sj_cache *c, const char *path,
                       const char *const *targets, size_t n_targets,
                       int64_t *exported) {
  int64_t n = 0;
  if (exported)
    *exported = 0;
  if (!c || !path || !*path || (n_targets && !targets))
    return -1;
  struct stat st;
  if (lstat(path, &st) == 0)
    return -2;
  char tmp[4200];
  static unsigned seq;
  snprintf(tmp, sizeof tmp, "%s.tmp-%ld-%u", path, (long)getpid(),
           __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
  pthread_mutex_lock(&c->mu);
  int rc = -1;
  if (c->main.db)
    rc = export_locked(c, path, tmp, targets, n_targets, &n);
  else
    sjc_log(c, SJ_CACHE_LOG_WARN, "export: there is no cache file");
  pthread_mutex_unlock(&c->mu);
  unlink(tmp); /* gone already when it was linked into place by rename */
  if (rc == 0 && exported)
    *exported = n;
  return rc;
}

/* ---------------------------------------------------------------- import */

typedef struct import_state {
  int64_t imported, skipped;
  const char *problem; /* set: the file is malformed */
  char key_hex[SJ_KEY_HEX];
} import_state;

/* The file as a whole: schema version, kernels is a table, quick_check. */
static const char *file_problem(sqlite3 *db, int version) {
  if (version != SJ_CACHE_SCHEMA)
    return "unsupported schema version";
  sqlite3_stmt *st;
  const char *problem = "no kernels table";
  if (sqlite3_prepare_v2(db,
                         "SELECT type FROM sqlite_master WHERE name = "
                         "'kernels'",
                         -1, &st, NULL) == SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) &&
        strcmp((const char *)sqlite3_column_text(st, 0), "table") == 0)
      problem = NULL;
    sqlite3_finalize(st);
  }
  if (problem)
    return problem;
  problem = "integrity check failed";
  if (sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &st, NULL) ==
      SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) &&
        strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0)
      problem = NULL;
    sqlite3_finalize(st);
  }
  return problem;
}

/* Merges every row of in (all checked) inside the caller's transaction.
 * Returns an SQLite code of the cache file; s->problem marks bad input. */
static int merge_rows(sj_cache *c, sqlite3 *in, import_state *s) {
  char sql[512];
  snprintf(sql, sizeof sql, "SELECT %s FROM kernels", sjc_sql_all_columns);
  sqlite3_stmt *src;
  if (sqlite3_prepare_v2(in, sql, -1, &src, NULL) != SQLITE_OK) {
    s->problem = "kernels table lacks columns";
    return SQLITE_OK;
  }
  int64_t now = sjc_now_s();
  int rc, src_rc;
  while ((src_rc = sqlite3_step(src)) == SQLITE_ROW) {
    sjc_row_buf r;
    s->problem = sjc_row_read(src, &r) ? "malformed row" : NULL;
    if (!s->problem)
      s->problem = sjc_row_problem(&r);
    if (s->problem) {
      const void *k = sqlite3_column_blob(src, 0);
      if (k && sqlite3_column_bytes(src, 0) == SJ_KEY_BYTES)
        sj_key_hex(k, s->key_hex);
      break;
    }
    rc = sjc_row_bind(c->put, &r.row, r.checksum, r.created, now, 0);
    if (rc == SQLITE_OK)
      rc = sqlite3_step(c->put);
    sqlite3_reset(c->put);
    sqlite3_clear_bindings(c->put);
    if (rc != SQLITE_DONE) {
      sqlite3_finalize(src);
      return rc;
    }
    if (sqlite3_changes(c->main.db) == 1)
      s->imported++;
    else
      s->skipped++;
  }
  if (!s->problem && src_rc != SQLITE_DONE)
    s->problem = "unreadable (corrupt) file";
  sqlite3_finalize(src);
  return SQLITE_OK;
}

/* Returns 0, -1 or -2 (see cache.h). */
static int import_locked(sj_cache *c, const char *path, import_state *s) {
  sqlite3 *in;
  int version;
  int rc = sjc_open_ro(c, path, &in, &version);
  if (rc != SQLITE_OK) {
    int io = (rc & 0xff) == SQLITE_CANTOPEN || (rc & 0xff) == SQLITE_IOERR ||
             (rc & 0xff) == SQLITE_NOMEM || (rc & 0xff) == SQLITE_PERM;
    sjc_log(c, SJ_CACHE_LOG_WARN, "import: cannot read %s: %s", path,
            sqlite3_errstr(rc));
    return io ? -1 : -2;
  }
  s->problem = file_problem(in, version);
  rc = s->problem ? SQLITE_OK : sjc_begin(c->main.db);
  if (!s->problem && rc == SQLITE_OK)
    rc = merge_rows(c, in, s);
  sqlite3_close(in);
  if (s->problem || rc != SQLITE_OK) {
    sjc_rollback(c->main.db);
    s->imported = s->skipped = 0;
    if (s->problem) {
      sjc_log(c, SJ_CACHE_LOG_WARN, "import: rejected %s: %s%s%s", path,
              s->problem, s->key_hex[0] ? " in entry " : "", s->key_hex);
      return -2;
    }
    sjc_db_error(c, c->main.db, rc, "import");
    return -1;
  }
  rc = sjc_commit(c->main.db);
  if (rc != SQLITE_OK) {
    sjc_db_error(c, c->main.db, rc, "import commit");
    s->imported = s->skipped = 0;
    return -1;
  }
  c->total_bytes = -1;
  sjc_maybe_evict_locked(c, 0);
  return 0;
}

int sj_cache_db_import(sj_cache *c, const char *path, int64_t *imported,
                       int64_t *skipped) {
  import_state s;
  memset(&s, 0, sizeof s);
  if (imported)
    *imported = 0;
  if (skipped)
    *skipped = 0;
  if (!c || !path)
    return -1;
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
    return -1;
  pthread_mutex_lock(&c->mu);
  int rc = -1;
  if (writable_or_log(c, "import"))
    rc = import_locked(c, path, &s);
  pthread_mutex_unlock(&c->mu);
  if (imported)
    *imported = s.imported;
  if (skipped)
    *skipped = s.skipped;
  return rc;
}
