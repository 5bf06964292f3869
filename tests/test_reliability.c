/*
 * test_reliability.c -- the kernel cache and the CLI under concurrency and
 * crashes, at the process level (issue 6).  CPU only: kernels are
 * compiled with NVRTC for targets this machine need not have.
 *
 *  - 16 `sagejit warm` processes with overlapping kernel sets start at once
 *    on one empty cache directory: all exit 0, one row per key, the file
 *    passes integrity_check, the rows are exactly those of sequential
 *    warms of the same sets, and every kernel was compiled by exactly one
 *    process (compile leases).
 *  - 8 processes warming the same kernels at the same moment: the
 *    "compiled" counts of their JSON sum to the number of distinct
 *    kernels (one compile each; the others waited on the lease).
 *  - Threads of one process calling sj_warm on one compile-only context:
 *    each kernel compiled once (sj_stats.compiles).
 *  - `sagejit warm` killed with SIGKILL at random moments, >= 20 times, on
 *    one cache (while creating the file, mid-compile, holding a lease,
 *    while storing, while flushing hit counts): integrity_check ok,
 *    `sagejit cache verify` finds nothing corrupt, nothing was moved aside
 *    as corrupt, and a final warm completes promptly (the dead holder's
 *    lease is taken over, not waited out).
 *  - A lease holder that exited but was not yet reaped (a zombie) is dead:
 *    its lease is taken over at once.
 *
 * SJ_TEST_SEED=<n> replays the random delays of the kill test;
 * SJ_TEST_KEEP=1 keeps the directories; an argument runs only the tests
 * whose name contains it (test_reliability sigkill).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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
#include "sagejit.h"
#include "test_cache_util.h"
#include "testutil.h"

#ifndef SJ_CLI_PATH
#error "SJ_CLI_PATH must name the sagejit executable"
#endif

static char g_base[512]; /* everything of this suite lives under it */
static uint64_t g_seed;

/* ----------------------------------------------------------------- helpers */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void path_in(char *buf, size_t size, const char *name) {
  int n = snprintf(buf, size, "%s/%s", g_base, name);
  assert_true(n > 0 && (size_t)n < size);
}

/* The integer after "key": in the CLI's JSON; -1 when absent. */
static int64_t json_int(const char *s, const char *key) {
  if (!s)
    return -1;
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(s, pat);
  if (!p)
    return -1;
  p += strlen(pat);
  while (*p == ' ')
    p++;
  char *end;
  long long v = strtoll(p, &end, 10);
  return end == p ? -1 : (int64_t)v;
}

/* argv of a `sagejit warm` over one set, with --json. */
typedef struct warm_set {
  const char *arch, *dims, *dtypes, *causal, *jobs;
} warm_set;

typedef struct argv_buf {
  char *v[24];
} argv_buf;

static void warm_argv(argv_buf *a, const warm_set *s, const char *dir) {
  int n = 0;
  a->v[n++] = (char *)SJ_CLI_PATH;
  a->v[n++] = (char *)"warm";
  a->v[n++] = (char *)"--arch";
  a->v[n++] = (char *)s->arch;
  a->v[n++] = (char *)"--head-dim";
  a->v[n++] = (char *)s->dims;
  a->v[n++] = (char *)"--dtype";
  a->v[n++] = (char *)s->dtypes;
  a->v[n++] = (char *)"--causal";
  a->v[n++] = (char *)s->causal;
  a->v[n++] = (char *)"--jobs";
  a->v[n++] = (char *)(s->jobs ? s->jobs : "1");
  a->v[n++] = (char *)"--json";
  a->v[n++] = (char *)"--no-progress";
  a->v[n++] = (char *)"--cache-dir";
  a->v[n++] = (char *)dir;
  a->v[n] = NULL;
}

/* Forks a child that waits on the gate (until every writer of the pipe
 * has closed it), sends stdout to out_path and stderr to out_path.err,
 * and execs argv.  gate may be NULL: start at once. */
static pid_t spawn(char *const argv[], const char *out_path,
                   const int gate[2]) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  if (gate) {
    close(gate[1]);
    char c;
    while (read(gate[0], &c, 1) < 0 && errno == EINTR) {
    }
    close(gate[0]);
  }
  char err_path[1400];
  if (snprintf(err_path, sizeof err_path, "%s.err", out_path) >=
      (int)sizeof err_path)
    _exit(126);
  int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  int nul = open("/dev/null", O_RDONLY);
  if (out < 0 || err < 0 || nul < 0)
    _exit(126);
  dup2(nul, 0);
  dup2(out, 1);
  dup2(err, 2);
  execv(argv[0], argv);
  _exit(127);
}

/* Waits for pid; returns its exit code, 128+signal, or 124 after
 * timeout_s (the child is then killed). */
static int wait_child(pid_t pid, int timeout_s) {
  const double end = now_s() + timeout_s;
  for (;;) {
    int status = 0;
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status)
                               : 128 + (WIFSIGNALED(status) ? WTERMSIG(status)
                                                            : 0);
    if (w < 0 && errno != EINTR)
      return -1;
    if (now_s() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      return 124;
    }
    sleep_ms(5);
  }
}

/* Prints a child's output files (on failure). */
static void dump_output(const char *out_path) {
  char err_path[1400];
  if (snprintf(err_path, sizeof err_path, "%s.err", out_path) >=
      (int)sizeof err_path)
    err_path[0] = 0;
  char *o = tu_read_file(out_path, NULL),
       *e = err_path[0] ? tu_read_file(err_path, NULL) : NULL;
  print_message("--- %s\nstdout: %s\nstderr: %s\n", out_path, o ? o : "",
                e ? e : "");
  free(o);
  free(e);
}

/* Runs one warm to completion; returns its stdout (malloc'ed). */
static char *warm_once(const warm_set *s, const char *dir, int timeout_s,
                       int *rc) {
  argv_buf a;
  warm_argv(&a, s, dir);
  char *out = NULL, *err = NULL;
  *rc = tu_run(a.v, NULL, &out, &err, timeout_s);
  if (*rc != 0)
    print_message("warm --arch %s --head-dim %s --dtype %s --causal %s: rc "
                  "%d\nstdout: %s\nstderr: %s\n",
                  s->arch, s->dims, s->dtypes, s->causal, *rc,
                  out ? out : "", err ? err : "");
  free(err);
  return out;
}

static void db_of(char *buf, size_t size, const char *dir) {
  tcu_db_path(buf, size, dir);
}

/* The sorted keys of a cache, as one hex string (malloc'ed). */
static char *keys_of(const char *dir) {
  char db[1200];
  db_of(db, sizeof db, dir);
  return tcu_sql_text(db, "SELECT group_concat(h, ',') FROM (SELECT "
                          "hex(key) AS h FROM kernels ORDER BY key)");
}

static void assert_sane_cache(const char *dir, int64_t entries) {
  char db[1200];
  db_of(db, sizeof db, dir);
  char *ic = tcu_sql_text(db, "PRAGMA integrity_check");
  assert_non_null(ic);
  assert_string_equal(ic, "ok");
  free(ic);
  assert_int_equal(tcu_sql_int(db, "SELECT count(*) FROM kernels"), entries);
  assert_int_equal(tcu_sql_int(db, "SELECT count(DISTINCT key) FROM kernels"),
                   entries);
  assert_int_equal(tcu_sql_int(db, "SELECT count(*) FROM leases"), 0);
  assert_int_equal(tcu_count_prefix(dir, "kernels.db.corrupt"), 0);
}

/* `sagejit cache verify --json` on dir: every row ok, none corrupt. */
static void assert_verify_clean(const char *dir, int64_t entries) {
  char *argv[] = {(char *)SJ_CLI_PATH, (char *)"cache", (char *)"verify",
                  (char *)"--json", (char *)"--cache-dir", (char *)dir, NULL};
  char *out = NULL, *err = NULL;
  int rc = tu_run(argv, NULL, &out, &err, 300);
  if (rc != 0 || json_int(out, "corrupt") != 0)
    print_message("cache verify: rc %d\nstdout: %s\nstderr: %s\n", rc,
                  out ? out : "", err ? err : "");
  assert_int_equal(rc, 0);
  assert_int_equal(json_int(out, "corrupt"), 0);
  assert_int_equal(json_int(out, "checked"), entries);
  assert_int_equal(json_int(out, "ok"), entries);
  free(out);
  free(err);
}

/* ------------------------------------- 16 processes, overlapping kernel sets */

enum { N_PROCS = 16 };

/* Process i's set: every axis a different subset, so that the sets
 * overlap (kv_finalize, kv_stats and quant kernels are shared by many
 * attention variants) without being equal.  Head dims 32 and 64: the
 * cheapest kernels to compile (a D = 128 set takes twice D = 64's NVRTC
 * time), since this file runs in the plain suite and both sanitizer
 * passes of .ci/run, and what it tests does not depend on the kernels. */
static void overlap_set(int i, warm_set *s) {
  static const char *const archs[] = {"sm_80", "sm_86", "sm_80,sm_86"};
  static const char *const dims[] = {"32", "64", "32,64"};
  static const char *const dts[] = {"fp16", "bf16", "fp16,bf16"};
  static const char *const cs[] = {"0", "1", "0,1"};
  s->arch = archs[i % 3];
  s->dims = dims[(i / 3) % 3];
  s->dtypes = dts[(i + i / 9) % 3];
  s->causal = cs[(i / 2) % 3];
  s->jobs = i % 4 == 0 ? "2" : "1";
}

static void test_concurrent_overlapping_warm(void **state) {
  (void)state;
  char seq_dir[1024], conc_dir[1024];
  path_in(seq_dir, sizeof seq_dir, "sequential");
  path_in(conc_dir, sizeof conc_dir, "concurrent");

  /* The reference: the same sets, one after the other. */
  int64_t seq_compiled = 0;
  for (int i = 0; i < N_PROCS; i++) {
    warm_set s;
    overlap_set(i, &s);
    int rc;
    char *out = warm_once(&s, seq_dir, 600, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(json_int(out, "failed"), 0);
    seq_compiled += json_int(out, "compiled");
    free(out);
  }
  char seq_db[1200];
  db_of(seq_db, sizeof seq_db, seq_dir);
  const int64_t n_union = tcu_sql_int(seq_db, "SELECT count(*) FROM kernels");
  assert_true(n_union > 0);
  assert_int_equal(seq_compiled, n_union);

  /* All at once on an empty directory (that does not exist yet). */
  int gate[2];
  assert_int_equal(pipe(gate), 0);
  pid_t pids[N_PROCS];
  char outs[N_PROCS][1200];
  argv_buf args[N_PROCS];
  warm_set sets[N_PROCS];
  for (int i = 0; i < N_PROCS; i++) {
    overlap_set(i, &sets[i]);
    warm_argv(&args[i], &sets[i], conc_dir);
    snprintf(outs[i], sizeof outs[i], "%s/concurrent-%d.out", g_base, i);
    pids[i] = spawn(args[i].v, outs[i], gate);
    assert_true(pids[i] > 0);
  }
  const double t0 = now_s();
  close(gate[0]);
  close(gate[1]); /* go */
  int64_t compiled = 0, totals = 0;
  int bad = 0;
  for (int i = 0; i < N_PROCS; i++) {
    const int rc = wait_child(pids[i], 600);
    char *out = tu_read_file(outs[i], NULL);
    const int64_t c = json_int(out, "compiled"), k = json_int(out, "cached"),
                  t = json_int(out, "total"), f = json_int(out, "failed");
    if (rc != 0 || f != 0 || c < 0 || k < 0 || c + k != t) {
      dump_output(outs[i]);
      bad++;
    }
    compiled += c;
    totals += t;
    free(out);
  }
  print_message("%d processes, %lld kernels requested, %lld distinct, %lld "
                "compiled, %.1f s\n",
                N_PROCS, (long long)totals, (long long)n_union,
                (long long)compiled, now_s() - t0);
  assert_int_equal(bad, 0);
  /* one compile per distinct kernel: the leases worked */
  assert_int_equal(compiled, n_union);
  assert_true(totals > n_union); /* the sets did overlap */
  assert_sane_cache(conc_dir, n_union);
  char *a = keys_of(seq_dir), *b = keys_of(conc_dir);
  assert_non_null(a);
  assert_non_null(b);
  assert_string_equal(a, b);
  free(a);
  free(b);
  assert_verify_clean(conc_dir, n_union);
}

/* --------------------------------- the same kernels, 8 processes at once */

static void test_leases_same_kernels(void **state) {
  (void)state;
  enum { N = 8 };
  char dir[1024];
  path_in(dir, sizeof dir, "same");
  const warm_set s = {"sm_80", "64", "fp16", "0", "1"};
  int gate[2];
  assert_int_equal(pipe(gate), 0);
  pid_t pids[N];
  char outs[N][1200];
  argv_buf a;
  warm_argv(&a, &s, dir);
  for (int i = 0; i < N; i++) {
    snprintf(outs[i], sizeof outs[i], "%s/same-%d.out", g_base, i);
    pids[i] = spawn(a.v, outs[i], gate);
    assert_true(pids[i] > 0);
  }
  close(gate[0]);
  close(gate[1]);
  int64_t compiled = 0, total = -1;
  int bad = 0;
  for (int i = 0; i < N; i++) {
    const int rc = wait_child(pids[i], 600);
    char *out = tu_read_file(outs[i], NULL);
    const int64_t t = json_int(out, "total");
    if (rc != 0 || json_int(out, "failed") != 0 ||
        json_int(out, "compiled") + json_int(out, "cached") != t ||
        (total >= 0 && t != total)) {
      dump_output(outs[i]);
      bad++;
    }
    total = t;
    compiled += json_int(out, "compiled");
    free(out);
  }
  print_message("%d processes x %lld kernels: %lld compiles\n", N,
                (long long)total, (long long)compiled);
  assert_int_equal(bad, 0);
  assert_true(total > 0);
  assert_int_equal(compiled, total);
  assert_sane_cache(dir, total);
}

/* ------------------------------------------- threads of one process, one ctx */

typedef struct warm_thread {
  sj_context *ctx;
  const sj_warm_request *req;
  pthread_barrier_t *go;
  sj_warm_result res;
  sj_status st;
} warm_thread;

static void *warm_thread_fn(void *p) {
  warm_thread *w = p;
  pthread_barrier_wait(w->go);
  w->st = sj_warm(w->ctx, w->req, &w->res);
  return NULL;
}

static sj_context *compile_only_ctx(const char *dir, const char *target) {
  sj_config cfg;
  sj_config_init(&cfg);
  cfg.device = SJ_DEVICE_NONE;
  cfg.target = target;
  cfg.cache_dir = dir;
  sj_context *ctx = NULL;
  if (sj_context_create(&ctx, &cfg) != SJ_OK)
    fail_msg("context: %s", sj_context_create_error());
  return ctx;
}

static void test_threads_single_flight(void **state) {
  (void)state;
  enum { THREADS = 6 };
  char dir[1024];
  path_in(dir, sizeof dir, "threads");
  sj_context *ctx = compile_only_ctx(dir, "sm_80");
  static const int dims[] = {32, 64}; /* the cheapest (overlap_set) */
  static const int causal[] = {0, 1};
  static const sj_dtype dts[] = {SJ_DTYPE_FP16, SJ_DTYPE_BF16};
  sj_warm_request req;
  memset(&req, 0, sizeof req);
  req.head_dims = dims;
  req.n_head_dims = 2;
  req.causal = causal;
  req.n_causal = 2;
  req.dtypes = dts;
  req.n_dtypes = 2;
  req.jobs = 2;
  pthread_barrier_t go;
  assert_int_equal(pthread_barrier_init(&go, NULL, THREADS), 0);
  warm_thread w[THREADS];
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].ctx = ctx;
    w[i].req = &req;
    w[i].go = &go;
    assert_int_equal(pthread_create(&th[i], NULL, warm_thread_fn, &w[i]), 0);
  }
  int64_t compiled = 0;
  for (int i = 0; i < THREADS; i++) {
    assert_int_equal(pthread_join(th[i], NULL), 0);
    if (w[i].st != SJ_OK)
      fail_msg("thread %d: %s: %s", i, sj_status_name(w[i].st),
               sj_context_last_error(ctx));
    assert_int_equal(w[i].res.failed, 0);
    assert_int_equal(w[i].res.total, w[0].res.total);
    assert_int_equal(w[i].res.compiled + w[i].res.cached, w[i].res.total);
    compiled += w[i].res.compiled;
  }
  pthread_barrier_destroy(&go);
  const int64_t distinct = w[0].res.total;
  sj_stats st;
  assert_int_equal(sj_context_get_stats(ctx, &st), SJ_OK);
  print_message("%d threads x %lld kernels: %llu compiles, %llu misses\n",
                THREADS, (long long)distinct,
                (unsigned long long)st.compiles,
                (unsigned long long)st.misses);
  assert_true(distinct > 0);
  assert_int_equal(st.compiles, (uint64_t)distinct);
  assert_int_equal(st.misses, (uint64_t)distinct);
  assert_int_equal(st.compile_failures, 0);
  assert_int_equal(st.cache_errors, 0);
  assert_int_equal(st.corrupt_entries, 0);
  assert_int_equal(compiled, distinct);
  sj_context_destroy(ctx);
  assert_sane_cache(dir, distinct);

  /* a second context finds them all */
  ctx = compile_only_ctx(dir, "sm_80");
  sj_warm_result r;
  assert_int_equal(sj_warm(ctx, &req, &r), SJ_OK);
  assert_int_equal(r.compiled, 0);
  assert_int_equal(r.cached, distinct);
  assert_int_equal(sj_context_get_stats(ctx, &st), SJ_OK);
  assert_int_equal(st.compiles, 0);
  sj_context_destroy(ctx);
}

/* ------------------------------------------------------- kill -9 in a loop */

enum { MIN_KILLS = 20, MAX_ITERS = 60 };

/* The sets the loop cycles through: 4 x 9 kernels (head dims 32 and 64,
 * as overlap_set's). */
static void kill_set(int i, warm_set *s) {
  static const char *const archs[] = {"sm_80", "sm_86"};
  static const char *const dims[] = {"32", "64"};
  s->arch = archs[i % 2];
  s->dims = dims[(i / 2) % 2];
  s->dtypes = "fp16,bf16";
  s->causal = "0,1";
  s->jobs = "2";
}

/* A set no loop iteration touches, for the last, lease-holding victim. */
static const warm_set k_lease_victim = {"sm_87", "64", "fp16,bf16", "0,1",
                                        "1"};

/* 1 once pid holds a lease row in dir's cache (polls up to timeout_ms). */
static int wait_for_lease(const char *dir, pid_t pid, int timeout_ms) {
  char db[1200], sql[128];
  db_of(db, sizeof db, dir);
  snprintf(sql, sizeof sql, "SELECT count(*) FROM leases WHERE pid = %d",
           (int)pid);
  const double end = now_s() + timeout_ms / 1000.0;
  while (now_s() < end) {
    if (tcu_sql_int(db, sql) > 0)
      return 1;
    if (waitpid(pid, NULL, WNOHANG) == pid)
      return -1; /* finished (and reaped) before taking one */
    sleep_ms(2);
  }
  return 0;
}

typedef enum victim_mode {
  V_EARLY,   /* 0-60 ms: exec, NVRTC load, creating/opening the file */
  V_RANDOM,  /* 60-1500 ms: compiling, storing, flushing hits */
  V_LEASE    /* while it holds a compile lease */
} victim_mode;

/* Starts a warm, kills it per mode; returns 1 if it died of SIGKILL, 0 if
 * it had finished (exit 0) first. */
static int kill_one(const warm_set *s, const char *dir, victim_mode mode,
                    uint64_t *rng, int iter) {
  argv_buf a;
  warm_argv(&a, s, dir);
  char out[1200];
  snprintf(out, sizeof out, "%s/kill-%d.out", g_base, iter);
  pid_t pid = spawn(a.v, out, NULL);
  assert_true(pid > 0);
  int reaped = 0;
  if (mode == V_EARLY) {
    sleep_ms((long)(tu_rand_u64(rng) % 60));
  } else if (mode == V_RANDOM) {
    sleep_ms(60 + (long)(tu_rand_u64(rng) % 1440));
  } else {
    int r = wait_for_lease(dir, pid, 20000);
    reaped = r < 0;
    if (r > 0)
      sleep_ms((long)(tu_rand_u64(rng) % 20));
  }
  int status = 0;
  if (!reaped) {
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
  }
  if (reaped || WIFEXITED(status)) {
    /* finished first: it must have succeeded */
    if (!reaped && WEXITSTATUS(status) != 0) {
      dump_output(out);
      fail_msg("warm exited %d before it was killed", WEXITSTATUS(status));
    }
    return 0;
  }
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  return 1;
}

static void test_sigkill_warm_loop(void **state) {
  (void)state;
  char dir[1024], db[1200];
  path_in(dir, sizeof dir, "kill"); /* created by the first victim */
  db_of(db, sizeof db, dir);
  uint64_t rng = g_seed;
  int kills = 0, finished = 0, lease_kills = 0, it = 0;
  for (; it < MAX_ITERS && (kills < MIN_KILLS || it < 24); it++) {
    warm_set s;
    kill_set(it, &s);
    const victim_mode mode = it < 3 ? V_EARLY : (victim_mode)(it % 3);
    const int k = kill_one(&s, dir, mode, &rng, it);
    kills += k;
    finished += !k;
    lease_kills += k && mode == V_LEASE;
  }
  /* The last victim dies holding a lease on kernels nobody has compiled. */
  const int k = kill_one(&k_lease_victim, dir, V_LEASE, &rng, it);
  assert_int_equal(k, 1);
  kills++;
  lease_kills++;
  const int64_t stale = tcu_sql_int(db, "SELECT count(*) FROM leases");
  print_message("seed %llu: %d iterations, %d kills (%d holding a lease), %d "
                "finished first; %lld lease rows of dead holders\n",
                (unsigned long long)g_seed, it + 1, kills, lease_kills,
                finished, (long long)stale);
  assert_true(kills >= MIN_KILLS);
  assert_true(stale >= 1);

  char *ic = tcu_sql_text(db, "PRAGMA integrity_check");
  assert_non_null(ic);
  assert_string_equal(ic, "ok");
  free(ic);
  assert_int_equal(tcu_count_prefix(dir, "kernels.db.corrupt"), 0);
  assert_verify_clean(dir, tcu_sql_int(db, "SELECT count(*) FROM kernels"));

  /* The dead holder's lease is taken over at once: the victim's set
   * completes long before the lease's 120 s time to live. */
  const double t0 = now_s();
  int rc;
  char *out = warm_once(&k_lease_victim, dir, 100, &rc);
  const double dt = now_s() - t0;
  assert_int_equal(rc, 0);
  assert_int_equal(json_int(out, "failed"), 0);
  int64_t total = json_int(out, "total");
  print_message("final warm of the lease victim's set: %.1f s, %lld "
                "compiled\n",
                dt, (long long)json_int(out, "compiled"));
  assert_true(json_int(out, "compiled") >= 1);
  free(out);
  assert_true(dt < 100.0);
  /* and everything else completes too */
  for (int i = 0; i < 4; i++) {
    warm_set s;
    kill_set(i, &s);
    out = warm_once(&s, dir, 300, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(json_int(out, "failed"), 0);
    assert_int_equal(json_int(out, "compiled") + json_int(out, "cached"),
                     json_int(out, "total"));
    total += json_int(out, "total");
    free(out);
  }
  /* the five sets are disjoint (one target and head dim each), so the
   * cache holds exactly their kernels */
  assert_sane_cache(dir, total);
  assert_verify_clean(dir, total);
}

/* ------------------------------------------------- a zombie lease holder */

/* A holder that exited but has not been reaped (its parent is busy, or a
 * container's init does not reap) is dead: kill(pid, 0) still succeeds on
 * a zombie, so the lease code must look closer. */
static void test_lease_zombie_holder(void **state) {
  (void)state;
  char dir[1024];
  path_in(dir, sizeof dir, "zombie");
  sj_key key;
  tcu_key(&key, "k<zombie>", "sm_90a");
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    sj_cache_opts o;
    tcu_opts(&o, dir, NULL);
    sj_cache *c = sj_cache_open(&o);
    /* dies holding the lease, without closing anything */
    _exit(c && sj_cache_lease_acquire(c, key.bytes, 600000) == 1 ? 0 : 3);
  }
  siginfo_t info;
  memset(&info, 0, sizeof info);
  /* wait for the exit but leave the zombie in place */
  assert_int_equal(waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT), 0);
  assert_int_equal(info.si_code, CLD_EXITED);
  assert_int_equal(info.si_status, 0);
  assert_int_equal(kill(pid, 0), 0); /* still "exists" */

  sj_cache_opts o;
  tcu_opts(&o, dir, NULL);
  sj_cache *c = sj_cache_open(&o);
  assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_READWRITE);
  const int r = sj_cache_lease_acquire(c, key.bytes, 60000);
  assert_int_equal(waitpid(pid, NULL, 0), pid);
  assert_int_equal(r, 1);
  sj_cache_lease_release(c, key.bytes);
  sj_cache_close(c);
  sj_key_free(&key);
}

/* ------------------------------------------------------------------ main */

static int group_setup(void **state) {
  (void)state;
  if (tu_mkdtemp("rel", g_base, sizeof g_base) != 0)
    return -1;
  const char *s = getenv("SJ_TEST_SEED");
  g_seed = s && *s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL);
  print_message("SJ_TEST_SEED=%llu\n", (unsigned long long)g_seed);
  /* NVRTC is needed to compile; without it there is nothing to test. */
  int maj = 0, min = 0;
  if (sj_nvrtc_version(&maj, &min) != SJ_OK) {
    print_message("NVRTC not found\n");
    return -1;
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  if (g_base[0] && !getenv("SJ_TEST_KEEP"))
    tu_rmrf(g_base);
  return 0;
}

/* test_reliability [WORD]: only the tests whose name contains WORD. */
int main(int argc, char **argv) {
  const struct CMUnitTest all[] = {
      cmocka_unit_test(test_lease_zombie_holder),
      cmocka_unit_test(test_threads_single_flight),
      cmocka_unit_test(test_leases_same_kernels),
      cmocka_unit_test(test_concurrent_overlapping_warm),
      cmocka_unit_test(test_sigkill_warm_loop),
  };
  struct CMUnitTest tests[sizeof all / sizeof *all];
  size_t n = 0;
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    if (argc < 2 || strstr(all[i].name, argv[1]))
      tests[n++] = all[i];
  if (n == 0) {
    fprintf(stderr, "test_reliability: no test matches '%s'\n", argv[1]);
    return 2;
  }
  return _cmocka_run_group_tests("test_reliability", tests, n, group_setup,
                                 group_teardown);
}
