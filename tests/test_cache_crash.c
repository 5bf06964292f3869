/*
 * test_cache_crash.c -- writers killed with SIGKILL at random moments
 * (while opening a fresh file, in the middle of puts, evictions and
 * incremental vacuums) never leave a damaged cache behind.
 */
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache.h"
#include "key.h"
#include "test_cache_util.h"
#include "testutil.h"

enum { KILLS = 40 };

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* Puts rows forever (keys from base on), with a small size limit so that
 * evictions and vacuums happen too, and now and then a prune.  Writes one
 * byte to progress after each put. */
static void writer(const char *dir, int base, int progress) {
  sj_cache_opts o;
  memset(&o, 0, sizeof o);
  o.dir = dir;
  o.max_bytes = 200000;
  sj_cache *c = sj_cache_open(&o);
  for (int i = 0;; i++) {
    sj_key k;
    char name[32];
    snprintf(name, sizeof name, "k<%d>", base + i);
    tcu_key(&k, name, "sm_90a");
    size_t n;
    uint8_t *img = tcu_fake_cubin(90, 8, 0, 2000 + (size_t)(i % 7) * 1000,
                                  (uint64_t)(base + i), &n);
    sj_cache_row r;
    tcu_row(&r, &k, "sm_90a", img, n, SJ_IMAGE_CUBIN);
    sj_cache_put(c, &r);
    sj_cache_image out;
    if (sj_cache_get(c, &k, "sm_90a", &out) == SJ_CACHE_HIT)
      sj_cache_image_free(&out);
    if (i % 50 == 49) {
      int64_t removed;
      sj_cache_db_prune(c, 50000, &removed);
    }
    free(img);
    sj_key_free(&k);
    if (write(progress, "p", 1) != 1)
      _exit(3);
  }
}

/* Waits until the child reported `puts` puts (10 s at most). */
static int wait_progress(int fd, int puts) {
  int seen = 0;
  while (seen < puts) {
    struct pollfd p = {fd, POLLIN, 0};
    char buf[256];
    if (poll(&p, 1, 10000) != 1)
      return -1;
    ssize_t r = read(fd, buf, sizeof buf);
    if (r <= 0)
      return -1;
    seen += (int)r;
  }
  return 0;
}

static void test_sigkill_never_corrupts(void **state) {
  (void)state;
  char root[4096], dir[4200], db[4300];
  assert_int_equal(tu_mkdtemp("crash", root, sizeof root), 0);
  snprintf(dir, sizeof dir, "%s/cache", root);
  tcu_db_path(db, sizeof db, dir);
  uint64_t rng = 0x5eed;
  for (int k = 0; k < KILLS; k++) {
    int progress[2];
    assert_int_equal(pipe(progress), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      close(progress[0]);
      writer(dir, k * 100000, progress[1]);
      _exit(0);
    }
    close(progress[1]);
    /* the first few die while creating or opening the file; the others
     * after a random number of puts, at a random moment of the next ones
     * (puts, evictions, prunes, vacuums) */
    int ok = 0;
    if (k >= 4)
      ok = wait_progress(progress[0], (int)(tu_rand_u64(&rng) % 60));
    sleep_us((long)(tu_rand_u64(&rng) % 3000));
    kill(pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    close(progress[0]);
    assert_int_equal(ok, 0);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  }
  char *ic = tcu_sql_text(db, "PRAGMA integrity_check");
  assert_non_null(ic);
  assert_string_equal(ic, "ok");
  free(ic);
  tcu_log log;
  sj_cache_opts o;
  tcu_opts(&o, dir, &log);
  sj_cache *c = sj_cache_open(&o);
  assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_READWRITE);
  int64_t checked, ok, bad;
  assert_int_equal(sj_cache_db_verify(c, &checked, &ok, &bad), 0);
  sj_cache_counters n;
  sj_cache_get_counters(c, &n);
  sj_cache_close(c);
  print_message("%lld rows after %d kills\n", (long long)checked, KILLS);
  assert_true(checked > 0);
  assert_int_equal(bad, 0);
  assert_int_equal(ok, checked);
  assert_int_equal(n.errors, 0);
  assert_int_equal(log.n[SJ_CACHE_LOG_WARN], 0);
  assert_int_equal(tcu_count_prefix(dir, "kernels.db.corrupt"), 0);
  tu_rmrf(root);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sigkill_never_corrupts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
