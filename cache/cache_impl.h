/*
 * cache_impl.h -- internals shared by the cache .c files.  Not an API.
 *
 *   cache.c        open/close, degrade decisions, get/put/drop, hit counts
 *   cache_db.c     SQLite plumbing: connections, schema, quarantine, trust
 *   cache_image.c  sj_image_check (CUDA ELF and PTX headers)
 *   cache_maint.c  stat/list/verify/prune/clear/export/import
 *   cache_lease.c  cross-process compile leases
 *
 * Locking: every public entry point takes c->mu and releases it before it
 * returns (sj_cache_db_list also before calling back).  Functions named
 * sjc_*_locked expect the caller to hold it.
 */
#ifndef SJ_CACHE_IMPL_H
#define SJ_CACHE_IMPL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/stat.h>

#include "cache.h"

#if defined(__GNUC__)
#define SJC_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SJC_PRINTF(f, a)
#endif

#define SJC_DEFAULT_BUSY_MS 10000
#define SJC_FLUSH_INTERVAL_MS 60000
#define SJC_EVICT_CHECK_EVERY 64 /* puts between exact size re-checks */
#define SJC_DEFAULT_LEASE_MS 120000

/* One SQLite file that rows are read from. */
typedef struct sjc_src {
  sqlite3 *db;
  sqlite3_stmt *get; /* canonical, checksum, kind, lowered_name, image */
  char *path;
  int writable;
  /* keys this read-only source must not serve (bad rows, driver rejects) */
  uint8_t (*deny)[SJ_KEY_BYTES];
  size_t n_deny, cap_deny;
} sjc_src;

/* A key with hits not yet written back. */
typedef struct sjc_pending {
  uint8_t key[SJ_KEY_BYTES];
  uint32_t hits;
  int64_t last_used;
  int used;
} sjc_pending;

struct sj_cache {
  pthread_mutex_t mu;
  sj_cache_mode mode;
  sj_cache_log_fn log_fn;
  void *log_user;
  int busy_ms;
  int trust_foreign;
  int64_t max_bytes;   /* < 0: no limit */
  char *dir;           /* NULL when no directory is used */
  char path_buf[4200]; /* dir/kernels.db, set once at open */

  sjc_src main; /* db NULL in MEMORY and DISABLED modes */
  sqlite3_stmt *put, *del, *hit;
  sjc_src *layers;
  size_t n_layers;

  sj_cache_counters ctr;

  sjc_pending *pend; /* open addressing, cap a power of two */
  size_t pend_cap, pend_n;
  int64_t last_flush_ms; /* monotonic */

  int64_t total_bytes; /* sum of image sizes in main; -1 unknown */
  unsigned puts_since_check;

  int error_logged; /* first absorbed error logs at WARN, then DEBUG */
};

/* ---- cache.c ---- */
void sjc_log(sj_cache *c, int level, const char *fmt, ...) SJC_PRINTF(3, 4);
/* Counts an absorbed SQLite error of db and logs it. */
void sjc_db_error(sj_cache *c, sqlite3 *db, int rc, const char *what);
int64_t sjc_now_s(void);
int64_t sjc_now_ms(void); /* wall clock, milliseconds */
int sjc_flush_hits_locked(sj_cache *c);
/* After a main-file error: quarantine and reopen on corruption, degrade to
 * READONLY on a read-only file. */
void sjc_handle_main_error_locked(sj_cache *c, int rc);
/* Evicts if the running total passed the limit (or every N puts). */
void sjc_maybe_evict_locked(sj_cache *c, int64_t added);
int sjc_prune_locked(sj_cache *c, int64_t max_bytes, int64_t *removed);

/* ---- cache_db.c ---- */
/* Escapes path into a "file:" URI with the given query (may be ""). */
char *sjc_uri(const char *path, const char *query);
/* Opens path read-write, creating it 0600 and the schema if needed; *seen
 * gets the file's stat (for sjc_quarantine).  Returns SQLITE_OK,
 * SQLITE_NOTADB/SQLITE_CORRUPT (the file is bad: quarantine it), SJC_NEWER
 * (its user_version is newer than this build: read it only), or another
 * SQLite code.  Logs nothing. */
#define SJC_NEWER (-100)
int sjc_open_rw(sj_cache *c, const char *path, sqlite3 **out,
                struct stat *seen);
/* Opens path read-only (mode=ro, else immutable=1) and checks that it has
 * the kernels columns this build reads.  Returns an SQLite code and the
 * file's user_version.  Logs nothing. */
int sjc_open_ro(sj_cache *c, const char *path, sqlite3 **out, int *version);
/* Creates path (which must not exist) 0600 as an empty database without a
 * journal, for export. */
int sjc_open_new(sj_cache *c, const char *path, sqlite3 **out);
/* Renames a bad file aside (kernels.db.corrupt-<time>-<pid>) and removes
 * its -wal/-shm, unless another process already replaced it. */
int sjc_quarantine(sj_cache *c, const char *path, const struct stat *seen);
/* 0 if st may be trusted (ours or root's, not group/other-writable);
 * else -1 and a reason in why. */
int sjc_check_trust(const struct stat *st, char *why, size_t size);
int sjc_mkdirs(const char *dir);
int sjc_exec(sqlite3 *db, const char *sql);
int sjc_user_version(sqlite3 *db, int *out);
int sjc_begin(sqlite3 *db);  /* BEGIN IMMEDIATE */
int sjc_commit(sqlite3 *db); /* COMMIT, or ROLLBACK when that fails */
void sjc_rollback(sqlite3 *db);
/* Creates the tables in an empty database (inside the caller's
 * transaction). */
int sjc_create_schema(sqlite3 *db);
int sjc_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st);
int sjc_is_corrupt(int rc);
int sjc_is_readonly(int rc);

extern const char sjc_sql_get[];
extern const char sjc_sql_put[];

/* ---- rows (cache_maint.c) ---- */
/* A row read back in full, for verify/export/import. */
typedef struct sjc_row_buf {
  sj_cache_row row;
  const uint8_t *checksum;
  size_t checksum_len;
  int64_t created, last_used, hits;
} sjc_row_buf;
/* Reads the columns of sjc_sql_all_columns; -1 if a column has the wrong
 * type (pointers borrow from the statement). */
int sjc_row_read(sqlite3_stmt *st, sjc_row_buf *r);
/* Checks a row fully: key == hash(canonical), canonical well formed with
 * the row's target, checksum, image header.  Returns NULL if good, else a
 * static reason. */
const char *sjc_row_problem(const sjc_row_buf *r);
/* Binds r to a statement prepared from sjc_sql_put. */
int sjc_row_bind(sqlite3_stmt *st, const sj_cache_row *r,
                 const uint8_t checksum[16], int64_t created, int64_t last_used,
                 int64_t hits);
extern const char sjc_sql_all_columns[];

/* ---- cache_image.c ---- */
const char *sjc_kind_name(sj_image_kind k);
int sjc_kind_parse(const char *s, sj_image_kind *out);

#endif
