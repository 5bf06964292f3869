/*
 * cache_lease.c -- cross-process single flight for compiles.
 *
 * A lease is a row (key, pid, host, expires_ms) in the leases table of the
 * writable cache file.  Acquire runs in one BEGIN IMMEDIATE transaction, so
 * two processes cannot both see the key free.  It takes the lease when no
 * row exists, the row has expired, or the holder is a process of this host
 * that no longer exists (kill(pid, 0) fails with ESRCH, or the process is
 * a zombie nobody has reaped yet): a compiler that was SIGKILLed is
 * replaced at once instead of after its time to live.  A lease this
 * process already holds is renewed.
 *
 * "This host" is the hostname plus the kernel's boot id and the pid
 * namespace, so that a pid is only ever interpreted in the namespace that
 * issued it (containers sharing a cache directory, a reboot).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cache_impl.h"

static void read_line(const char *path, char *buf, size_t size) {
  buf[0] = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  buf[n > 0 ? n : 0] = 0;
  buf[strcspn(buf, "\n")] = 0;
}

static void host_id(char *buf, size_t size) {
  char host[256] = "", boot[64], ns[64] = "";
  if (gethostname(host, sizeof host - 1) != 0)
    host[0] = 0;
  host[sizeof host - 1] = 0;
  read_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
  ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  ns[n > 0 ? n : 0] = 0;
  snprintf(buf, size, "%s/%s/%s", host, boot, ns);
}

/* 1 if pid is a zombie: it exited but its parent has not reaped it yet
 * (kill(pid, 0) still succeeds then).  A holder killed with SIGKILL stays
 * a zombie for as long as its parent is busy, or forever under a container
 * init that does not reap, and it will never release its lease. */
static int pid_is_zombie(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  read_line(path, buf, sizeof buf);
  /* "pid (comm) S ...": comm may hold spaces and parentheses; the state
   * follows the last ')' */
  const char *p = strrchr(buf, ')');
  return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

static int holder_gone(const char *host, int64_t pid, const char *me) {
  if (strcmp(host, me) != 0 || pid <= 0 || pid > INT32_MAX)
    return 0;
  if (kill((pid_t)pid, 0) != 0)
    return errno == ESRCH;
  return pid_is_zombie((pid_t)pid);
}

/* Within the caller's transaction: 1 if the lease is free for us. */
static int lease_free(sqlite3 *db, const uint8_t *key, const char *me,
                      int64_t now, int *rc) {
  sqlite3_stmt *st;
  *rc = sjc_prepare(
      db, "SELECT pid, host, expires_ms FROM leases WHERE key = ?1", &st);
  if (*rc != SQLITE_OK)
    return 0;
  sqlite3_bind_blob(st, 1, key, SJ_KEY_BYTES, SQLITE_STATIC);
  int free_ = 1;
  *rc = sqlite3_step(st);
  if (*rc == SQLITE_ROW) {
    int64_t pid = sqlite3_column_int64(st, 0);
    const char *host = (const char *)sqlite3_column_text(st, 1);
    int64_t expires = sqlite3_column_int64(st, 2);
    int mine = host && strcmp(host, me) == 0 && pid == (int64_t)getpid();
    free_ = mine || expires <= now || (host && holder_gone(host, pid, me));
    *rc = SQLITE_OK;
  } else if (*rc == SQLITE_DONE) {
    *rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  return free_;
}

/* Takes the lease, and forgets leases that lapsed an hour ago (holders
 * that died without anyone wanting their key since). */
static int lease_write(sqlite3 *db, const uint8_t *key, const char *me,
                       int64_t now, int64_t expires) {
  sqlite3_stmt *st;
  int rc = sjc_prepare(db, "DELETE FROM leases WHERE expires_ms < ?1", &st);
  if (rc != SQLITE_OK)
    return rc;
  sqlite3_bind_int64(st, 1, now - 3600 * 1000);
  rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return rc;
  rc = sjc_prepare(db,
                   "INSERT OR REPLACE INTO leases(key, pid, host,"
                   " expires_ms) VALUES(?1, ?2, ?3, ?4)",
                   &st);
  if (rc != SQLITE_OK)
    return rc;
  sqlite3_bind_blob(st, 1, key, SJ_KEY_BYTES, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, (int64_t)getpid());
  sqlite3_bind_text(st, 3, me, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 4, expires);
  rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int sj_cache_lease_acquire(sj_cache *c, const uint8_t key[SJ_KEY_BYTES],
                           int ttl_ms) {
  if (!c || !key)
    return -1;
  char me[512];
  host_id(me, sizeof me);
  if (ttl_ms <= 0)
    ttl_ms = SJC_DEFAULT_LEASE_MS;
  pthread_mutex_lock(&c->mu);
  int result = -1;
  if (c->mode == SJ_CACHE_MODE_READWRITE && c->main.writable) {
    sqlite3 *db = c->main.db;
    int64_t now = sjc_now_ms();
    int rc = sjc_begin(db), free_ = 0;
    if (rc == SQLITE_OK)
      free_ = lease_free(db, key, me, now, &rc);
    if (rc == SQLITE_OK && free_)
      rc = lease_write(db, key, me, now, now + ttl_ms);
    rc = rc == SQLITE_OK ? sjc_commit(db) : rc;
    if (rc == SQLITE_OK) {
      result = free_;
    } else {
      sjc_rollback(db);
      sjc_db_error(c, db, rc, "lease");
    }
  }
  pthread_mutex_unlock(&c->mu);
  return result;
}

void sj_cache_lease_release(sj_cache *c, const uint8_t key[SJ_KEY_BYTES]) {
  if (!c || !key)
    return;
  char me[512];
  host_id(me, sizeof me);
  pthread_mutex_lock(&c->mu);
  if (c->mode == SJ_CACHE_MODE_READWRITE && c->main.writable) {
    sqlite3 *db = c->main.db;
    sqlite3_stmt *st = NULL;
    int rc = sjc_prepare(db,
                         "DELETE FROM leases WHERE key = ?1 AND pid = ?2"
                         " AND host = ?3",
                         &st);
    rc = rc == SQLITE_OK ? sjc_begin(db) : rc;
    if (rc == SQLITE_OK) {
      sqlite3_bind_blob(st, 1, key, SJ_KEY_BYTES, SQLITE_STATIC);
      sqlite3_bind_int64(st, 2, (int64_t)getpid());
      sqlite3_bind_text(st, 3, me, -1, SQLITE_STATIC);
      rc = sqlite3_step(st);
      rc = rc == SQLITE_DONE ? sjc_commit(db) : rc;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_OK) {
      sjc_rollback(db);
      sjc_db_error(c, db, rc, "lease release");
    }
  }
  pthread_mutex_unlock(&c->mu);
}
