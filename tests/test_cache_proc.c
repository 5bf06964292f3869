/*
 * test_cache_proc.c -- the cache across processes and users: many writers
 * on one fresh directory, read-only and unwritable directories (as a real
 * unprivileged user: the tests run as root, which ignores permission bits,
 * so a forked child drops to nobody), and compile leases.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache.h"
#include "key.h"
#include "test_cache_util.h"
#include "testutil.h"

#define NOBODY 65534

/* In a child: report and fail without cmocka. */
#define CHILD_CHECK(cond)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "child check failed: %s (line %d)\n", #cond, __LINE__);  \
      return 1;                                                                \
    }                                                                          \
  } while (0)

typedef struct fx {
  char root[4096]; /* traversable by nobody */
  char dir[4200];  /* the cache directory */
  char db[4300];
} fx;

static int setup(void **state) {
  fx *f = calloc(1, sizeof *f);
  if (!f || tu_mkdtemp("proc", f->root, sizeof f->root) != 0 ||
      chmod(f->root, 0755) != 0)
    return -1;
  snprintf(f->dir, sizeof f->dir, "%s/cache", f->root);
  tcu_db_path(f->db, sizeof f->db, f->dir);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx *f = *state;
  tu_rmrf(f->root);
  free(f);
  return 0;
}

typedef struct img {
  sj_key key;
  uint8_t *data;
  size_t size;
} img;

static void img_make(img *m, int i) {
  char name[32];
  snprintf(name, sizeof name, "k<%d>", i);
  tcu_key(&m->key, name, "sm_90a");
  m->data = tcu_fake_cubin_for("sm_90a", (uint64_t)i, &m->size);
}

static void img_free(img *m) {
  sj_key_free(&m->key);
  free(m->data);
}

static int img_put(sj_cache *c, const img *m) {
  sj_cache_row r;
  tcu_row(&r, &m->key, "sm_90a", m->data, m->size, SJ_IMAGE_CUBIN);
  return sj_cache_put(c, &r);
}

/* 1 if c returns m's exact bytes. */
static int img_hit(sj_cache *c, const img *m) {
  sj_cache_image out;
  if (sj_cache_get(c, &m->key, "sm_90a", &out) != SJ_CACHE_HIT)
    return 0;
  int ok = out.size == m->size && memcmp(out.data, m->data, m->size) == 0;
  sj_cache_image_free(&out);
  return ok;
}

static void fill(const char *dir, int n) {
  sj_cache_opts o;
  tcu_opts(&o, dir, NULL);
  sj_cache *c = sj_cache_open(&o);
  assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_READWRITE);
  for (int i = 0; i < n; i++) {
    img m;
    img_make(&m, i);
    assert_int_equal(img_put(c, &m), 0);
    img_free(&m);
  }
  sj_cache_close(c);
}

/* ----------------------------------------------------- concurrent writers */

enum { WRITERS = 8, KEYS = 120 };

static int writer(const char *dir, int p, int gate) {
  char go;
  if (read(gate, &go, 1) < 0) /* returns 0 when the parent opens the gate */
    return 2;
  tcu_log log;
  sj_cache_opts o;
  tcu_opts(&o, dir, &log);
  sj_cache *c = sj_cache_open(&o);
  CHILD_CHECK(c && sj_cache_get_mode(c) == SJ_CACHE_MODE_READWRITE);
  for (int i = 0; i < KEYS; i++) {
    if ((i + p) % 4 == 0) /* every key is written by 6 of the 8 */
      continue;
    img m;
    img_make(&m, i);
    CHILD_CHECK(img_put(c, &m) == 0);
    CHILD_CHECK(img_hit(c, &m));
    img_free(&m);
  }
  sj_cache_counters n;
  sj_cache_get_counters(c, &n);
  CHILD_CHECK(n.errors == 0 && n.corrupt == 0);
  CHILD_CHECK(log.n[SJ_CACHE_LOG_WARN] == 0 && log.n[SJ_CACHE_LOG_ERROR] == 0);
  sj_cache_close(c);
  return 0;
}

static void test_concurrent_writers(void **state) {
  fx *f = *state;
  int gate[2];
  assert_int_equal(pipe(gate), 0);
  pid_t pids[WRITERS];
  fflush(NULL);
  for (int p = 0; p < WRITERS; p++) {
    pids[p] = fork();
    assert_true(pids[p] >= 0);
    if (pids[p] == 0) {
      close(gate[1]);
      _exit(writer(f->dir, p, gate[0]));
    }
  }
  close(gate[0]);
  close(gate[1]); /* all start at once on a directory that does not exist */
  for (int p = 0; p < WRITERS; p++) {
    int status;
    assert_int_equal(waitpid(pids[p], &status, 0), pids[p]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  assert_int_equal(tcu_sql_int(f->db, "SELECT count(*) FROM kernels"), KEYS);
  assert_int_equal(
      tcu_sql_int(f->db, "SELECT count(DISTINCT key) FROM kernels"), KEYS);
  char *ic = tcu_sql_text(f->db, "PRAGMA integrity_check");
  assert_string_equal(ic, "ok");
  free(ic);
  assert_int_equal(tcu_count_prefix(f->dir, "kernels.db.corrupt-"), 0);
  sj_cache_opts o;
  tcu_opts(&o, f->dir, NULL);
  sj_cache *c = sj_cache_open(&o);
  int64_t checked, ok, bad;
  assert_int_equal(sj_cache_db_verify(c, &checked, &ok, &bad), 0);
  assert_int_equal(checked, KEYS);
  assert_int_equal(bad, 0);
  for (int i = 0; i < KEYS; i++) {
    img m;
    img_make(&m, i);
    assert_true(img_hit(c, &m));
    img_free(&m);
  }
  sj_cache_close(c);
}

/* ------------------------------------------------------ read-only, nobody */

typedef struct ro_case {
  const char *dir;
  sj_cache_mode want_mode;
  int have; /* rows 0..have-1 exist */
} ro_case;

static int readonly_child(void *p) {
  const ro_case *rc = p;
  tcu_log log;
  sj_cache_opts o;
  tcu_opts(&o, rc->dir, &log);
  sj_cache *c = sj_cache_open(&o);
  CHILD_CHECK(c != NULL);
  CHILD_CHECK(sj_cache_get_mode(c) == rc->want_mode);
  CHILD_CHECK(log.n[SJ_CACHE_LOG_WARN] == 1);
  for (int i = 0; i < rc->have; i++) {
    img m;
    img_make(&m, i);
    CHILD_CHECK(img_hit(c, &m));
    img_free(&m);
  }
  img fresh;
  img_make(&fresh, 1000);
  CHILD_CHECK(img_put(c, &fresh) == 0); /* a silent no-op */
  CHILD_CHECK(!img_hit(c, &fresh));
  CHILD_CHECK(sj_cache_lease_acquire(c, fresh.key.bytes, 1000) == -1);
  img_free(&fresh);
  sj_cache_counters n;
  sj_cache_get_counters(c, &n);
  CHILD_CHECK(n.errors == 0 && n.corrupt == 0);
  CHILD_CHECK(n.hits == (uint64_t)rc->have);
  sj_cache_close(c);
  CHILD_CHECK(log.n[SJ_CACHE_LOG_WARN] == 1); /* one warning, ever */
  CHILD_CHECK(log.n[SJ_CACHE_LOG_ERROR] == 0);
  return 0;
}

static void need_root(void) {
  if (geteuid() != 0)
    skip(); /* cannot become another user */
}

static int chown_tree(const char *path, uid_t uid) {
  char cmd[8400];
  snprintf(cmd, sizeof cmd, "chown -R %d:%d '%s'", (int)uid, (int)uid, path);
  return system(cmd);
}

/* Our own cache directory made read-only (r-x, file r--). */
static void test_readonly_own_dir(void **state) {
  fx *f = *state;
  need_root();
  fill(f->dir, 5);
  assert_int_equal(chown_tree(f->dir, NOBODY), 0);
  assert_int_equal(chmod(f->db, 0400), 0);
  assert_int_equal(chmod(f->dir, 0500), 0);
  uint8_t before[16], after[16];
  assert_int_equal(tcu_file_hash(f->db, before), 0);
  ro_case rc = {f->dir, SJ_CACHE_MODE_READONLY, 5};
  assert_int_equal(tcu_run_as(NOBODY, NOBODY, readonly_child, &rc), 0);
  assert_int_equal(tcu_file_hash(f->db, after), 0);
  assert_memory_equal(before, after, 16);
  assert_int_equal(tcu_count_prefix(f->dir, "kernels.db-"), 0);
}

/* A read-only file in a writable directory of ours. */
static void test_readonly_file(void **state) {
  fx *f = *state;
  need_root();
  fill(f->dir, 3);
  assert_int_equal(chown_tree(f->dir, NOBODY), 0);
  assert_int_equal(chmod(f->db, 0400), 0);
  uint8_t before[16], after[16];
  assert_int_equal(tcu_file_hash(f->db, before), 0);
  ro_case rc = {f->dir, SJ_CACHE_MODE_READONLY, 3};
  assert_int_equal(tcu_run_as(NOBODY, NOBODY, readonly_child, &rc), 0);
  assert_int_equal(tcu_file_hash(f->db, after), 0);
  assert_memory_equal(before, after, 16);
}

/* A cache an administrator warmed (root's, 0755/0644) used by a user. */
static void test_readonly_system_cache(void **state) {
  fx *f = *state;
  need_root();
  fill(f->dir, 4);
  assert_int_equal(chmod(f->dir, 0755), 0);
  assert_int_equal(chmod(f->db, 0644), 0);
  ro_case rc = {f->dir, SJ_CACHE_MODE_READONLY, 4};
  assert_int_equal(tcu_run_as(NOBODY, NOBODY, readonly_child, &rc), 0);
}

/* No cache and no way to make one: memory mode, no crash, no file. */
static void test_unwritable_no_cache(void **state) {
  fx *f = *state;
  need_root();
  assert_int_equal(mkdir(f->dir, 0755), 0); /* root's, empty */
  ro_case rc = {f->dir, SJ_CACHE_MODE_MEMORY, 0};
  assert_int_equal(tcu_run_as(NOBODY, NOBODY, readonly_child, &rc), 0);
  assert_int_equal(access(f->db, F_OK), -1);
  /* a directory that cannot be created */
  char sub[4400];
  snprintf(sub, sizeof sub, "%s/a/b", f->dir);
  rc.dir = sub;
  assert_int_equal(tcu_run_as(NOBODY, NOBODY, readonly_child, &rc), 0);
  assert_int_equal(access(sub, F_OK), -1);
}

/* ----------------------------------------------------------------- leases */

static void test_lease_basics(void **state) {
  fx *f = *state;
  sj_cache_opts o;
  tcu_opts(&o, f->dir, NULL);
  sj_cache *c = sj_cache_open(&o);
  img m;
  img_make(&m, 1);
  assert_int_equal(sj_cache_lease_acquire(c, m.key.bytes, 60000), 1);
  /* this process holds it: acquiring again renews */
  assert_int_equal(sj_cache_lease_acquire(c, m.key.bytes, 60000), 1);
  sj_cache_lease_release(c, m.key.bytes);
  assert_int_equal(tcu_sql_int(f->db, "SELECT count(*) FROM leases"), 0);
  /* someone on another host, still valid: busy; expired: ours */
  int64_t far = (int64_t)time(NULL) * 1000 + 600000;
  char sql[512];
  snprintf(sql, sizeof sql,
           "INSERT INTO leases VALUES(?1, 1, 'elsewhere', %lld)",
           (long long)far);
  assert_int_equal(tcu_sql_blobs(f->db, sql, m.key.bytes, 16, NULL, 0), 0);
  assert_int_equal(sj_cache_lease_acquire(c, m.key.bytes, 60000), 0);
  sj_cache_lease_release(c, m.key.bytes); /* not ours: stays */
  assert_int_equal(tcu_sql_int(f->db, "SELECT count(*) FROM leases"), 1);
  assert_int_equal(tcu_sql(f->db, "UPDATE leases SET expires_ms = 1"), 0);
  assert_int_equal(sj_cache_lease_acquire(c, m.key.bytes, 60000), 1);
  assert_int_equal(tcu_sql_int(f->db, "SELECT pid FROM leases"),
                   (int64_t)getpid());
  /* storing the kernel ends its lease, whoever holds it (a holder killed
   * after the store and before its release leaves no row behind) */
  assert_int_equal(tcu_sql(f->db, "UPDATE leases SET pid = 1, host = 'elsewhere'"), 0);
  assert_int_equal(img_put(c, &m), 0);
  assert_int_equal(tcu_sql_int(f->db, "SELECT count(*) FROM leases"), 0);
  assert_int_equal(img_hit(c, &m), 1);
  sj_cache_close(c);
  img_free(&m);
  /* no file, no leases */
  tcu_opts(&o, f->dir, NULL);
  o.disabled = 1;
  c = sj_cache_open(&o);
  assert_int_equal(sj_cache_lease_acquire(c, m.key.bytes, 1000), -1);
  sj_cache_lease_release(c, m.key.bytes);
  sj_cache_close(c);
}

/* A child takes the lease and waits; ttl_ms decides when it lapses. */
static pid_t holder(const fx *f, const uint8_t *key, int ttl_ms) {
  int ready[2];
  if (pipe(ready) != 0)
    return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    sj_cache_opts o;
    tcu_opts(&o, f->dir, NULL);
    sj_cache *c = sj_cache_open(&o);
    char r = sj_cache_lease_acquire(c, key, ttl_ms) == 1 ? 'y' : 'n';
    if (write(ready[1], &r, 1) != 1)
      _exit(3);
    for (;;)
      pause();
  }
  close(ready[1]);
  char r = 0;
  if (pid < 0 || read(ready[0], &r, 1) != 1 || r != 'y') {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
    }
    pid = -1;
  }
  close(ready[0]);
  return pid;
}

static void test_lease_dead_holder_taken_over(void **state) {
  fx *f = *state;
  sj_cache_opts o;
  tcu_opts(&o, f->dir, NULL);
  sj_cache *c = sj_cache_open(&o);
  img m;
  img_make(&m, 2);
  pid_t pid = holder(f, m.key.bytes, 600000);
  assert_true(pid > 0);
  assert_int_equal(sj_cache_lease_acquire(c, m.key.bytes, 60000), 0);
  kill(pid, SIGKILL);
  assert_int_equal(waitpid(pid, NULL, 0), pid);
  /* the holder is dead on this host: taken over at once, long before its
   * ten minutes are up */
  assert_int_equal(sj_cache_lease_acquire(c, m.key.bytes, 60000), 1);
  assert_int_equal(tcu_sql_int(f->db, "SELECT pid FROM leases"),
                   (int64_t)getpid());
  sj_cache_close(c);
  img_free(&m);
}

static void test_lease_live_holder_expires(void **state) {
  fx *f = *state;
  sj_cache_opts o;
  tcu_opts(&o, f->dir, NULL);
  sj_cache *c = sj_cache_open(&o);
  img m;
  img_make(&m, 3);
  pid_t pid = holder(f, m.key.bytes, 400);
  assert_true(pid > 0);
  assert_int_equal(sj_cache_lease_acquire(c, m.key.bytes, 60000), 0);
  struct timespec ts = {0, 600 * 1000 * 1000};
  nanosleep(&ts, NULL);
  assert_int_equal(sj_cache_lease_acquire(c, m.key.bytes, 60000), 1);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  sj_cache_close(c);
  img_free(&m);
}

int main(void) {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_concurrent_writers),
      T(test_readonly_own_dir),
      T(test_readonly_file),
      T(test_readonly_system_cache),
      T(test_unwritable_no_cache),
      T(test_lease_basics),
      T(test_lease_dead_holder_taken_over),
      T(test_lease_live_holder_expires),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
