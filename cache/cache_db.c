/*
 * cache_db.c -- SQLite plumbing of the cache: connections, schema, the
 * quarantine of bad files, and the trust checks on files and directories.
 *
 * Every file is opened through a "file:" URI (this SQLite is built with
 * USE_URI, so a plain name that happens to start with "file:" would be
 * parsed as one anyway); paths are percent-escaped.
 *
 * A writable file is set up as: auto_vacuum=INCREMENTAL (before the first
 * table, so that prune can give pages back), journal_mode=WAL,
 * synchronous=NORMAL, a busy timeout, and the schema plus user_version in
 * one BEGIN IMMEDIATE transaction, so that a file either has the whole
 * schema or none of it.
 *
 * Needs SQLite 3.25 or newer (window functions in prune; read-only WAL
 * files without -shm need 3.22).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache_impl.h"

/* The row columns, small ones first: SQLite stores a record's columns in
 * order, and anything after a large blob lives in its overflow chain. */
static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS kernels("
    " key BLOB PRIMARY KEY NOT NULL CHECK(length(key) = 16),"
    " target TEXT NOT NULL,"
    " kernel_name TEXT,"
    " lowered_name TEXT NOT NULL,"
    " nvrtc_version TEXT,"
    " options TEXT,"
    " kind TEXT NOT NULL CHECK(kind IN ('cubin', 'ptx')),"
    " checksum BLOB NOT NULL,"
    " image_size INTEGER NOT NULL,"
    " compile_ms REAL,"
    " created INTEGER NOT NULL,"
    " last_used INTEGER NOT NULL,"
    " hits INTEGER NOT NULL DEFAULT 0,"
    " canonical BLOB NOT NULL,"
    " image BLOB NOT NULL);"
    "CREATE INDEX IF NOT EXISTS kernels_lru ON kernels(last_used, created);"
    "CREATE TABLE IF NOT EXISTS leases("
    " key BLOB PRIMARY KEY NOT NULL,"
    " pid INTEGER NOT NULL,"
    " host TEXT NOT NULL,"
    " expires_ms INTEGER NOT NULL) WITHOUT ROWID;";

const char sjc_sql_get[] =
    "SELECT canonical, checksum, kind, lowered_name, image"
    " FROM kernels WHERE key = ?1";

const char sjc_sql_put[] =
    "INSERT OR IGNORE INTO kernels(key, target, kernel_name, lowered_name,"
    " nvrtc_version, options, kind, checksum, image_size, compile_ms,"
    " created, last_used, hits, canonical, image)"
    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
    " ?15)";

/* ------------------------------------------------------------ small tools */

int sjc_is_corrupt(int rc) {
  rc &= 0xff;
  return rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB;
}

int sjc_is_readonly(int rc) {
  rc &= 0xff;
  return rc == SQLITE_READONLY || rc == SQLITE_CANTOPEN || rc == SQLITE_PERM ||
         rc == SQLITE_AUTH;
}

int sjc_exec(sqlite3 *db, const char *sql) {
  return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

int sjc_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st) {
  return sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL);
}

int sjc_begin(sqlite3 *db) {
  return sjc_exec(db, "BEGIN IMMEDIATE");
}

void sjc_rollback(sqlite3 *db) {
  if (!sqlite3_get_autocommit(db))
    sjc_exec(db, "ROLLBACK");
}

int sjc_commit(sqlite3 *db) {
  int rc = sjc_exec(db, "COMMIT");
  if (rc != SQLITE_OK)
    sjc_rollback(db);
  return rc;
}

/* Runs a one-value query ("PRAGMA x") and returns its integer. */
static int query_int(sqlite3 *db, const char *sql, int64_t *out) {
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  if (rc != SQLITE_OK)
    return rc;
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *out = sqlite3_column_int64(st, 0);
    rc = SQLITE_OK;
  } else if (rc == SQLITE_DONE) {
    rc = SQLITE_ERROR;
  }
  sqlite3_finalize(st);
  return rc;
}

int sjc_user_version(sqlite3 *db, int *out) {
  int64_t v = 0;
  int rc = query_int(db, "PRAGMA user_version", &v);
  *out = (int)v;
  return rc;
}

int sjc_create_schema(sqlite3 *db) {
  return sjc_exec(db, schema_sql);
}

char *sjc_uri(const char *path, const char *query) {
  static const char hex[] = "0123456789ABCDEF";
  size_t n = strlen(path), q = strlen(query);
  char *s = malloc(5 + 3 * n + 2 + q + 1);
  if (!s)
    return NULL;
  char *o = s;
  memcpy(o, "file:", 5);
  o += 5;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)path[i];
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
        (ch >= '0' && ch <= '9') || strchr("/-_.~", ch)) {
      *o++ = (char)ch;
    } else {
      *o++ = '%';
      *o++ = hex[ch >> 4];
      *o++ = hex[ch & 15];
    }
  }
  if (q) {
    *o++ = '?';
    memcpy(o, query, q);
    o += q;
  }
  *o = 0;
  return s;
}

/* Settings for every connection, including those to files we import:
 * nothing in a file's schema may run anything with side effects. */
static void harden(sqlite3 *db, int busy_ms) {
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, busy_ms);
  sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL);
#ifdef SQLITE_DBCONFIG_TRUSTED_SCHEMA /* 3.31 */
  sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)NULL);
#endif
  sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, (int *)NULL);
#ifdef SQLITE_DBCONFIG_ENABLE_VIEW /* 3.35 */
  sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_VIEW, 0, (int *)NULL);
#endif
  sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, (int *)NULL);
  sjc_exec(db, "PRAGMA cell_size_check = ON");
}

static int open_uri(sj_cache *c, const char *path, const char *query, int flags,
                    sqlite3 **out) {
  *out = NULL;
  char *uri = sjc_uri(path, query);
  if (!uri)
    return SQLITE_NOMEM;
  sqlite3 *db = NULL;
  int rc = sqlite3_open_v2(uri, &db,
                           flags | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
  free(uri);
  if (rc != SQLITE_OK) {
    sqlite3_close(db);
    return rc;
  }
  harden(db, c->busy_ms);
  *out = db;
  return SQLITE_OK;
}

/* ------------------------------------------------------------- read-write */

/* journal_mode=WAL needs a moment when no other connection reads; a busy
 * answer is retried until the busy timeout.  A file system that cannot do
 * WAL leaves the rollback journal, which is slower but just as correct. */
static int set_wal(sj_cache *c, sqlite3 *db) {
  for (int waited = 0;; waited += 10) {
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
    if (rc != SQLITE_OK)
      return rc;
    rc = sqlite3_step(st);
    const char *mode = (const char *)sqlite3_column_text(st, 0);
    int wal = rc == SQLITE_ROW && mode && strcmp(mode, "wal") == 0;
    sqlite3_finalize(st);
    if (wal)
      return SQLITE_OK;
    if (rc == SQLITE_ROW) {
      sjc_log(c, SJ_CACHE_LOG_INFO, "WAL unavailable; using journal %s",
              mode ? mode : "?");
      return SQLITE_OK;
    }
    if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED)
      return rc;
    if (waited >= c->busy_ms)
      return rc;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

/* 1 if the database has any schema object at all. */
static int has_objects(sqlite3 *db, int *rc) {
  int64_t n = 0;
  *rc = query_int(db, "SELECT count(*) FROM sqlite_master", &n);
  return n > 0;
}

/* Creates the schema unless another process did first. */
static int init_schema(sj_cache *c, sqlite3 *db) {
  int rc = sjc_exec(db, "PRAGMA auto_vacuum = INCREMENTAL");
  if (rc == SQLITE_OK)
    rc = set_wal(c, db);
  if (rc == SQLITE_OK)
    rc = sjc_begin(db);
  if (rc != SQLITE_OK)
    return rc;
  int v = 0;
  rc = sjc_user_version(db, &v);
  if (rc == SQLITE_OK && v == 0) {
    if (has_objects(db, &rc) && rc == SQLITE_OK)
      rc = SQLITE_NOTADB; /* some other program's database */
  }
  if (rc == SQLITE_OK && v == 0)
    rc = sjc_create_schema(db);
  if (rc == SQLITE_OK && v == 0) {
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", SJ_CACHE_SCHEMA);
    rc = sjc_exec(db, sql);
  }
  if (rc == SQLITE_OK && v > SJ_CACHE_SCHEMA)
    rc = SJC_NEWER;
  if (rc != SQLITE_OK) {
    sjc_rollback(db);
    return rc;
  }
  return sjc_commit(db);
}

/* Reads the kernels table once, so that a damaged root page or schema shows
 * up here rather than on the first get. */
static int probe(sqlite3 *db) {
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(db, sjc_sql_get, -1, &st, NULL);
  if (rc != SQLITE_OK)
    return rc;
  sqlite3_finalize(st);
  rc = sqlite3_prepare_v2(db, "SELECT key FROM kernels LIMIT 1", -1, &st, NULL);
  if (rc != SQLITE_OK)
    return rc;
  rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int setup_rw(sj_cache *c, sqlite3 *db) {
  int v = 0;
  int rc = sjc_user_version(db, &v);
  if (rc != SQLITE_OK)
    return rc;
  if (v > SJ_CACHE_SCHEMA)
    return SJC_NEWER;
  if (v < 0)
    return SQLITE_NOTADB;
  if (v == 0)
    rc = init_schema(c, db);
  else
    rc = set_wal(c, db);
  if (rc != SQLITE_OK)
    return rc;
  rc = sjc_exec(db, "PRAGMA synchronous = NORMAL;"
                    "PRAGMA journal_size_limit = 67108864");
  if (rc != SQLITE_OK)
    return rc;
  rc = probe(db);
  /* our schema version but not our columns: as good as corrupt */
  if ((rc & 0xff) == SQLITE_ERROR)
    rc = SQLITE_CORRUPT;
  return rc;
}

/* Creates path 0600 (umask-proof) if it does not exist. */
static int create_file(const char *path) {
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return errno == EEXIST ? 0 : -1;
  int rc = fchmod(fd, 0600);
  close(fd);
  return rc;
}

int sjc_open_rw(sj_cache *c, const char *path, sqlite3 **out,
                struct stat *seen) {
  *out = NULL;
  if (create_file(path) != 0 || stat(path, seen) != 0)
    return errno == EACCES || errno == EROFS || errno == EPERM
               ? SQLITE_READONLY
               : SQLITE_CANTOPEN;
  sqlite3 *db;
  int rc = open_uri(c, path, "", SQLITE_OPEN_READWRITE, &db);
  if (rc != SQLITE_OK)
    return rc;
  rc = setup_rw(c, db);
  if (rc != SQLITE_OK) {
    sqlite3_close(db);
    return rc;
  }
  *out = db;
  return SQLITE_OK;
}

/* A new standalone file for export: must not exist; no journal (a failed
 * export deletes the file) and no syncs until the caller's fsync. */
int sjc_open_new(sj_cache *c, const char *path, sqlite3 **out) {
  *out = NULL;
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return SQLITE_CANTOPEN;
  int rc = fchmod(fd, 0600);
  close(fd);
  if (rc != 0)
    return SQLITE_CANTOPEN;
  rc = open_uri(c, path, "", SQLITE_OPEN_READWRITE, out);
  if (rc == SQLITE_OK)
    rc = sjc_exec(*out, "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF");
  if (rc != SQLITE_OK) {
    sqlite3_close(*out);
    *out = NULL;
  }
  return rc;
}

/* -------------------------------------------------------------- read-only */

int sjc_open_ro(sj_cache *c, const char *path, sqlite3 **out, int *version) {
  /* mode=ro needs the -shm file of a WAL database (it creates it where the
   * directory allows); immutable=1 reads a file nobody can be writing. */
  static const char *const queries[] = {"mode=ro", "mode=ro&immutable=1"};
  int rc = SQLITE_CANTOPEN;
  *out = NULL;
  *version = 0;
  for (size_t i = 0; i < 2; i++) {
    sqlite3 *db;
    rc = open_uri(c, path, queries[i], SQLITE_OPEN_READONLY, &db);
    if (rc != SQLITE_OK)
      continue;
    rc = sjc_user_version(db, version);
    if (rc == SQLITE_OK)
      rc = probe(db);
    if (rc == SQLITE_OK) {
      *out = db;
      return SQLITE_OK;
    }
    sqlite3_close(db);
    if (sjc_is_corrupt(rc) || (rc & 0xff) == SQLITE_ERROR)
      break; /* not something immutable=1 would change */
  }
  return rc;
}

/* ------------------------------------------------------------- quarantine */

static void unlink_suffix(const char *path, const char *suffix) {
  char p[4096];
  if ((size_t)snprintf(p, sizeof p, "%s%s", path, suffix) < sizeof p)
    unlink(p);
}

/* The directory part of path into buf ("." if none). */
static void dir_of(const char *path, char *buf, size_t size) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    snprintf(buf, size, ".");
    return;
  }
  size_t n = (size_t)(slash - path);
  if (n == 0)
    n = 1; /* "/" */
  if (n >= size)
    n = size - 1;
  memcpy(buf, path, n);
  buf[n] = 0;
}

int sjc_quarantine(sj_cache *c, const char *path, const struct stat *seen) {
  char dir[4096], aside[4200];
  dir_of(path, dir, sizeof dir);
  /* Serialises the check-and-rename between processes: without it, two
   * processes that both found the file bad could move the fresh file one of
   * them just created. */
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0)
    while (flock(dfd, LOCK_EX) != 0 && errno == EINTR)
      ;
  int rc = 0;
  struct stat now;
  if (stat(path, &now) == 0 && now.st_dev == seen->st_dev &&
      now.st_ino == seen->st_ino) {
    snprintf(aside, sizeof aside, "%s.corrupt-%lld-%ld", path,
             (long long)time(NULL), (long)getpid());
    if (rename(path, aside) == 0) {
      unlink_suffix(path, "-wal");
      unlink_suffix(path, "-shm");
      sjc_log(c, SJ_CACHE_LOG_WARN,
              "%s is not a valid cache database; moved it to %s and "
              "started a new one",
              path, aside);
    } else {
      rc = -1;
      sjc_log(c, SJ_CACHE_LOG_WARN, "cannot move bad cache file %s: %s", path,
              strerror(errno));
    }
  }
  if (dfd >= 0) {
    flock(dfd, LOCK_UN);
    close(dfd);
  }
  return rc;
}

/* ------------------------------------------------------------------ trust */

int sjc_check_trust(const struct stat *st, char *why, size_t size) {
  uid_t me = geteuid();
  if (st->st_uid != me && st->st_uid != 0) {
    snprintf(why, size, "owned by uid %ld, not by uid %ld", (long)st->st_uid,
             (long)me);
    return -1;
  }
  if (st->st_mode & (S_IWGRP | S_IWOTH)) {
    snprintf(why, size, "writable by %s (mode %04o)",
             st->st_mode & S_IWOTH ? "others" : "its group",
             (unsigned)(st->st_mode & 07777));
    return -1;
  }
  return 0;
}

int sjc_mkdirs(const char *dir) {
  char p[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof p)
    return -1;
  memcpy(p, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (p[i] != '/' && p[i] != 0)
      continue;
    char saved = p[i];
    p[i] = 0;
    struct stat st;
    if (mkdir(p, 0700) == 0) {
      if (chmod(p, 0700) != 0)
        return -1;
    } else if (errno != EEXIST) {
      int err = errno; /* EACCES on an existing directory is fine */
      if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
        errno = err;
        return -1;
      }
    }
    p[i] = saved;
  }
  struct stat st;
  return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}
