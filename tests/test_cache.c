/*
 * test_cache.c -- the kernel cache in one process: get/put, the integrity
 * gates (canonical bytes, checksum, image header), bad files, hit counts,
 * and the maintenance calls (stat, list, verify, prune, clear, export,
 * import).  Cross-process and cross-user behaviour is in
 * test_cache_proc.c; layers, limits and trust in test_cache_layers.c.
 *
 * Rows are damaged with raw SQL through a separate connection, as a bad disk
 * or a stray tool would.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache.h"
#include "key.h"
#include "test_cache_util.h"
#include "testutil.h"

typedef struct fx {
  char dir[4096];
  char db[4200];
  tcu_log log;
  sj_cache_opts o;
} fx;

static int setup(void **state) {
  fx *f = calloc(1, sizeof *f);
  if (!f || tu_mkdtemp("cache", f->dir, sizeof f->dir) != 0)
    return -1;
  tcu_db_path(f->db, sizeof f->db, f->dir);
  tcu_opts(&f->o, f->dir, &f->log);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx *f = *state;
  tu_rmrf(f->dir);
  free(f);
  return 0;
}

/* A stored cubin row with everything the test needs to check it. */
typedef struct entry {
  sj_key key;
  uint8_t *image;
  size_t size;
  const char *target;
} entry;

static void entry_make(entry *e, const char *name, const char *target,
                       uint64_t seed) {
  tcu_key(&e->key, name, target);
  e->target = target;
  e->image = tcu_fake_cubin_for(target, seed, &e->size);
}

static void entry_free(entry *e) {
  sj_key_free(&e->key);
  free(e->image);
}

static int entry_put(sj_cache *c, const entry *e) {
  sj_cache_row r;
  tcu_row(&r, &e->key, e->target, e->image, e->size, SJ_IMAGE_CUBIN);
  return sj_cache_put(c, &r);
}

/* Asserts a hit with exactly e's bytes. */
static void expect_hit(sj_cache *c, const entry *e) {
  sj_cache_image img;
  assert_int_equal(sj_cache_get(c, &e->key, e->target, &img), SJ_CACHE_HIT);
  assert_int_equal(img.size, e->size);
  assert_memory_equal(img.data, e->image, e->size);
  assert_int_equal(img.kind, SJ_IMAGE_CUBIN);
  assert_string_equal(img.lowered_name, "_ZN2sj11test_kernelILi1EEEvv");
  sj_cache_image_free(&img);
}

static void expect_miss(sj_cache *c, const sj_key *k, const char *target) {
  sj_cache_image img;
  assert_int_equal(sj_cache_get(c, k, target, &img), SJ_CACHE_MISS);
  assert_null(img.data);
}

static int64_t rows(const fx *f) {
  return tcu_sql_int(f->db, "SELECT count(*) FROM kernels");
}

/* ------------------------------------------------------------- get / put */

static void test_miss_put_hit(void **state) {
  fx *f = *state;
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/a/b/cache", f->dir);
  f->o.dir = dir;
  mode_t old = umask(0); /* created modes must not depend on the umask */
  sj_cache *c = sj_cache_open(&f->o);
  umask(old);
  assert_non_null(c);
  assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_READWRITE);
  char db[4300];
  tcu_db_path(db, sizeof db, dir);
  assert_string_equal(sj_cache_path(c), db);
  struct stat st;
  assert_int_equal(stat(dir, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0700);
  assert_int_equal(stat(db, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0600);

  entry e;
  entry_make(&e, "k<1>", "sm_90a", 1);
  expect_miss(c, &e.key, e.target);
  assert_int_equal(entry_put(c, &e), 0);
  expect_hit(c, &e);
  sj_cache_counters n;
  sj_cache_get_counters(c, &n);
  assert_int_equal(n.hits, 1);
  assert_int_equal(n.misses, 1);
  assert_int_equal(n.puts, 1);
  assert_int_equal(n.errors, 0);
  assert_int_equal(n.corrupt, 0);
  sj_cache_close(c);

  c = sj_cache_open(&f->o); /* persisted */
  expect_hit(c, &e);
  sj_cache_close(c);
  assert_int_equal(f->log.n[SJ_CACHE_LOG_WARN], 0);
  assert_int_equal(f->log.n[SJ_CACHE_LOG_ERROR], 0);
  entry_free(&e);
}

static void test_ptx_nul_terminated(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  sj_key k;
  tcu_key(&k, "k<ptx>", "compute_90a");
  size_t n;
  char *ptx = tcu_fake_ptx("sm_90a", 7, &n);
  sj_cache_row r;
  /* as nvrtcGetPTXSize reports it: the NUL counted */
  tcu_row(&r, &k, "compute_90a", ptx, n + 1, SJ_IMAGE_PTX);
  assert_int_equal(sj_cache_put(c, &r), 0);
  sj_cache_image img;
  assert_int_equal(sj_cache_get(c, &k, "compute_90a", &img), SJ_CACHE_HIT);
  assert_int_equal(img.kind, SJ_IMAGE_PTX);
  assert_int_equal(img.size, n);
  assert_memory_equal(img.data, ptx, n);
  assert_int_equal(((char *)img.data)[n], 0);
  sj_cache_image_free(&img);
  sj_cache_close(c);
  free(ptx);
  sj_key_free(&k);
}

static void test_put_same_key_twice(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  entry e, other;
  entry_make(&e, "k<1>", "sm_80", 1);
  entry_make(&other, "k<1>", "sm_80", 2); /* same key, other bytes */
  assert_int_equal(entry_put(c, &e), 0);
  assert_int_equal(entry_put(c, &other), 0);
  assert_int_equal(rows(f), 1);
  expect_hit(c, &e); /* the first one stays */
  sj_cache_counters n;
  sj_cache_get_counters(c, &n);
  assert_int_equal(n.puts, 1);
  sj_cache_close(c);
  entry_free(&e);
  entry_free(&other);
}

static void test_put_rejects_inconsistent_rows(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  entry e, wrong;
  entry_make(&e, "k<1>", "sm_90a", 1);
  entry_make(&wrong, "k<1>", "sm_80", 1);
  sj_cache_row r;
  tcu_row(&r, &e.key, e.target, e.image, e.size, SJ_IMAGE_CUBIN);
  r.key[0] ^= 1; /* key is not the hash of the canonical string */
  assert_int_equal(sj_cache_put(c, &r), -1);
  tcu_row(&r, &e.key, e.target, wrong.image, wrong.size, SJ_IMAGE_CUBIN);
  assert_int_equal(sj_cache_put(c, &r), -1); /* an sm_80 image */
  tcu_row(&r, &e.key, "sm_80", wrong.image, wrong.size, SJ_IMAGE_CUBIN);
  assert_int_equal(sj_cache_put(c, &r), -1); /* key says sm_90a */
  tcu_row(&r, &e.key, e.target, e.image, e.size, SJ_IMAGE_CUBIN);
  r.lowered_name = NULL;
  assert_int_equal(sj_cache_put(c, &r), -1);
  tcu_row(&r, &e.key, e.target, e.image, e.size, SJ_IMAGE_PTX);
  assert_int_equal(sj_cache_put(c, &r), -1); /* a cubin is no PTX */
  assert_int_equal(rows(f), 0);
  sj_cache_counters n;
  sj_cache_get_counters(c, &n);
  assert_int_equal(n.errors, 0);
  sj_cache_close(c);
  entry_free(&e);
  entry_free(&wrong);
}

static void test_disabled(void **state) {
  fx *f = *state;
  f->o.disabled = 1;
  sj_cache *c = sj_cache_open(&f->o);
  assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_DISABLED);
  assert_string_equal(sj_cache_path(c), "");
  entry e;
  entry_make(&e, "k<1>", "sm_90a", 1);
  assert_int_equal(entry_put(c, &e), 0);
  expect_miss(c, &e.key, e.target);
  sj_cache_close(c);
  assert_int_equal(access(f->db, F_OK), -1); /* no file made */
  entry_free(&e);
  sj_cache_close(NULL);
}

/* ------------------------------------------------------ integrity gates */

/* Same 128-bit key, different canonical string: a collision must miss. */
static void test_canonical_mismatch(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  entry e;
  entry_make(&e, "k<1>", "sm_90a", 1);
  assert_int_equal(entry_put(c, &e), 0);
  sj_key other;
  tcu_key(&other, "k<2>", "sm_90a");
  sj_key forged = other;
  memcpy(forged.bytes, e.key.bytes, SJ_KEY_BYTES);
  expect_miss(c, &forged, "sm_90a");
  sj_cache_counters n;
  sj_cache_get_counters(c, &n);
  assert_int_equal(n.corrupt, 1);
  assert_int_equal(n.hits, 0);
  assert_int_equal(rows(f), 0); /* the row is gone */
  assert_int_equal(f->log.n[SJ_CACHE_LOG_WARN], 1);
  sj_cache_close(c);
  sj_key_free(&other);
  entry_free(&e);
}

static void test_flipped_byte(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  entry e;
  entry_make(&e, "k<1>", "sm_90a", 1);
  assert_int_equal(entry_put(c, &e), 0);
  size_t n;
  uint8_t *img = tcu_sql_blob(f->db, "SELECT image FROM kernels", NULL, 0, &n);
  assert_int_equal(n, e.size);
  img[n / 2] ^= 0x10;
  assert_int_equal(
      tcu_sql_blobs(f->db, "UPDATE kernels SET image = ?1", img, n, NULL, 0),
      0);
  expect_miss(c, &e.key, e.target);
  sj_cache_counters ctr;
  sj_cache_get_counters(c, &ctr);
  assert_int_equal(ctr.corrupt, 1);
  assert_int_equal(rows(f), 0);
  assert_int_equal(f->log.n[SJ_CACHE_LOG_WARN], 1);
  assert_non_null(strstr(f->log.last, "checksum"));
  /* and it can be stored again */
  assert_int_equal(entry_put(c, &e), 0);
  expect_hit(c, &e);
  sj_cache_close(c);
  free(img);
  entry_free(&e);
}

static void test_truncated_image(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  entry e;
  entry_make(&e, "k<1>", "sm_90a", 1);
  /* 1: truncated, checksum left alone */
  assert_int_equal(entry_put(c, &e), 0);
  assert_int_equal(
      tcu_sql(f->db, "UPDATE kernels SET image = substr(image, 1, 100)"), 0);
  expect_miss(c, &e.key, e.target);
  assert_int_equal(rows(f), 0);
  /* 2: truncated so that the section headers fall off the end, with the
   * checksum and size made to match: only the ELF bounds check can tell */
  assert_int_equal(entry_put(c, &e), 0);
  size_t cut = e.size - 64;
  uint8_t sum[16];
  tcu_xxh128(e.image, cut, sum);
  assert_int_equal(tcu_sql_blobs(f->db,
                                 "UPDATE kernels SET image = ?1,"
                                 " checksum = ?2, image_size = length(?1)",
                                 e.image, cut, sum, 16),
                   0);
  expect_miss(c, &e.key, e.target);
  assert_int_equal(rows(f), 0);
  sj_cache_counters n;
  sj_cache_get_counters(c, &n);
  assert_int_equal(n.corrupt, 2);
  sj_cache_close(c);
  entry_free(&e);
}

/* A real NVRTC cubin for sm_80 filed under sm_90a (with a checksum that
 * matches it) must not come back. */
static void test_wrong_target_real_cubin(void **state) {
  fx *f = *state;
  size_t n80;
  uint8_t *sm80 = tcu_nvrtc_compile("sm_80", &n80);
  if (!sm80)
    skip();
  sj_cache *c = sj_cache_open(&f->o);
  /* positive control: under its own target it is a hit */
  sj_key k80;
  tcu_key(&k80, "k<1>", "sm_80");
  sj_cache_row r;
  tcu_row(&r, &k80, "sm_80", sm80, n80, SJ_IMAGE_CUBIN);
  assert_int_equal(sj_cache_put(c, &r), 0);
  sj_cache_image img;
  assert_int_equal(sj_cache_get(c, &k80, "sm_80", &img), SJ_CACHE_HIT);
  assert_memory_equal(img.data, sm80, n80);
  sj_cache_image_free(&img);
  /* put refuses it for sm_90a */
  entry e;
  entry_make(&e, "k<1>", "sm_90a", 1);
  tcu_row(&r, &e.key, "sm_90a", sm80, n80, SJ_IMAGE_CUBIN);
  assert_int_equal(sj_cache_put(c, &r), -1);
  /* planted behind its back, get refuses it */
  assert_int_equal(entry_put(c, &e), 0);
  uint8_t sum[16];
  tcu_xxh128(sm80, n80, sum);
  assert_int_equal(tcu_sql_blobs(f->db,
                                 "UPDATE kernels SET image = ?1, checksum = "
                                 "?2, image_size = length(?1)"
                                 " WHERE target = 'sm_90a'",
                                 sm80, n80, sum, 16),
                   0);
  expect_miss(c, &e.key, "sm_90a");
  sj_cache_counters ctr;
  sj_cache_get_counters(c, &ctr);
  assert_int_equal(ctr.corrupt, 1);
  assert_int_equal(tcu_sql_int(f->db,
                               "SELECT count(*) FROM kernels WHERE target = "
                               "'sm_90a'"),
                   0);
  sj_cache_close(c);
  sj_key_free(&k80);
  entry_free(&e);
  free(sm80);
}

/* Asking with a target other than the key's is a caller's mistake: a miss,
 * and the good row stays. */
static void test_get_other_target_keeps_row(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  entry e;
  entry_make(&e, "k<1>", "sm_90a", 1);
  assert_int_equal(entry_put(c, &e), 0);
  expect_miss(c, &e.key, "sm_80");
  expect_miss(c, &e.key, "sm_90");
  assert_int_equal(rows(f), 1);
  expect_hit(c, &e);
  sj_cache_counters n;
  sj_cache_get_counters(c, &n);
  assert_int_equal(n.corrupt, 0);
  sj_cache_close(c);
  entry_free(&e);
}

static void test_drop(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  entry e;
  entry_make(&e, "k<1>", "sm_90a", 1);
  assert_int_equal(entry_put(c, &e), 0);
  assert_int_equal(sj_cache_drop(c, e.key.bytes), 0);
  expect_miss(c, &e.key, e.target);
  assert_int_equal(rows(f), 0);
  sj_cache_counters n;
  sj_cache_get_counters(c, &n);
  assert_int_equal(n.corrupt, 1);
  sj_cache_close(c);
  entry_free(&e);
}

/* ------------------------------------------------------------ bad files */

static void test_garbage_file(void **state) {
  fx *f = *state;
  char garbage[8192];
  for (size_t i = 0; i < sizeof garbage; i++)
    garbage[i] = "this is not a database, "[i % 24];
  assert_int_equal(tu_write_file(f->db, garbage, sizeof garbage), 0);
  char wal[4300], shm[4300];
  snprintf(wal, sizeof wal, "%s-wal", f->db);
  snprintf(shm, sizeof shm, "%s-shm", f->db);
  assert_int_equal(tu_write_file(wal, garbage, 1000), 0);
  assert_int_equal(tu_write_file(shm, garbage, 1000), 0);

  sj_cache *c = sj_cache_open(&f->o);
  assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_READWRITE);
  assert_int_equal(f->log.n[SJ_CACHE_LOG_WARN], 1);
  assert_int_equal(tcu_count_prefix(f->dir, "kernels.db.corrupt-"), 1);
  /* the old bytes are kept aside, untouched */
  char aside[4300];
  assert_int_equal(
      tcu_find_prefix(f->dir, "kernels.db.corrupt-", aside, sizeof aside), 0);
  size_t len = 0;
  char *old = tu_read_file(aside, &len);
  assert_non_null(old);
  assert_int_equal(len, sizeof garbage);
  assert_memory_equal(old, garbage, sizeof garbage);
  free(old);
  /* the garbage -wal went with it: whatever -wal exists now is SQLite's */
  char *w = tu_read_file(wal, &len);
  assert_true(!w || len == 0 || memcmp(w, garbage, len < 1000 ? len : 1000));
  free(w);

  entry e;
  entry_make(&e, "k<1>", "sm_90a", 1);
  assert_int_equal(entry_put(c, &e), 0);
  expect_hit(c, &e);
  sj_cache_close(c);
  /* the new file is fine: no second quarantine */
  memset(&f->log, 0, sizeof f->log);
  c = sj_cache_open(&f->o);
  expect_hit(c, &e);
  sj_cache_close(c);
  assert_int_equal(f->log.n[SJ_CACHE_LOG_WARN], 0);
  assert_int_equal(tcu_count_prefix(f->dir, "kernels.db.corrupt-"), 1);
  entry_free(&e);
}

/* A file with a valid header whose pages are damaged. */
static void test_damaged_pages(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  entry e[8];
  for (int i = 0; i < 8; i++) {
    char name[32];
    snprintf(name, sizeof name, "k<%d>", i);
    entry_make(&e[i], name, "sm_90a", (uint64_t)i);
    assert_int_equal(entry_put(c, &e[i]), 0);
  }
  sj_cache_close(c);
  /* keep page 1 (the header and schema), smash every page after it */
  size_t len;
  char *bytes = tu_read_file(f->db, &len);
  assert_non_null(bytes);
  free(bytes);
  struct stat st;
  assert_int_equal(stat(f->db, &st), 0);
  FILE *fp = fopen(f->db, "r+b");
  assert_non_null(fp);
  assert_int_equal(fseek(fp, 4096, SEEK_SET), 0);
  for (off_t i = 4096; i < st.st_size; i++)
    fputc(0xa5, fp);
  fclose(fp);

  c = sj_cache_open(&f->o);
  for (int i = 0; i < 8; i++)
    expect_miss(c, &e[i].key, "sm_90a");
  assert_int_equal(tcu_count_prefix(f->dir, "kernels.db.corrupt-"), 1);
  /* and the cache works again */
  assert_int_equal(entry_put(c, &e[0]), 0);
  expect_hit(c, &e[0]);
  sj_cache_close(c);
  for (int i = 0; i < 8; i++)
    entry_free(&e[i]);
}

/* Pages damaged while a cache has the file open: the first read that hits
 * them moves the file aside, and the cache goes on with a fresh one. */
static void test_damaged_while_open(void **state) {
  fx *f = *state;
  enum { N = 300 };
  sj_cache *c = sj_cache_open(&f->o);
  for (int i = 0; i < N; i++) {
    entry e;
    char name[32];
    snprintf(name, sizeof name, "k<%d>", i);
    entry_make(&e, name, "sm_90a", (uint64_t)i);
    assert_int_equal(entry_put(c, &e), 0);
    entry_free(&e);
  }
  sj_cache_close(c); /* everything checkpointed into kernels.db */
  c = sj_cache_open(&f->o);
  struct stat st;
  assert_int_equal(stat(f->db, &st), 0);
  FILE *fp = fopen(f->db, "r+b");
  assert_non_null(fp);
  assert_int_equal(fseek(fp, 16 * 4096, SEEK_SET), 0);
  for (off_t i = 16 * 4096; i < st.st_size; i++)
    fputc(0xa5, fp);
  fclose(fp);
  int hits = 0;
  for (int i = 0; i < N; i++) {
    entry e;
    char name[32];
    snprintf(name, sizeof name, "k<%d>", i);
    entry_make(&e, name, "sm_90a", (uint64_t)i);
    sj_cache_image img;
    if (sj_cache_get(c, &e.key, "sm_90a", &img) == SJ_CACHE_HIT) {
      assert_memory_equal(img.data, e.image, e.size); /* never bad bytes */
      hits++;
    }
    sj_cache_image_free(&img);
    entry_free(&e);
  }
  assert_true(hits < N);
  assert_int_equal(tcu_count_prefix(f->dir, "kernels.db.corrupt-"), 1);
  assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_READWRITE);
  entry e;
  entry_make(&e, "k<new>", "sm_90a", 1);
  assert_int_equal(entry_put(c, &e), 0);
  expect_hit(c, &e);
  sj_cache_close(c);
  char *ic = tcu_sql_text(f->db, "PRAGMA integrity_check");
  assert_string_equal(ic, "ok");
  free(ic);
  entry_free(&e);
}

/* A SQLite database of some other program under our name. */
static void test_foreign_database(void **state) {
  fx *f = *state;
  assert_int_equal(tu_write_file(f->db, "", 0), 0);
  assert_int_equal(
      tcu_sql(f->db, "CREATE TABLE t(x); INSERT INTO t VALUES(42);"), 0);
  sj_cache *c = sj_cache_open(&f->o);
  assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_READWRITE);
  assert_int_equal(tcu_count_prefix(f->dir, "kernels.db.corrupt-"), 1);
  entry e;
  entry_make(&e, "k<1>", "sm_90a", 1);
  assert_int_equal(entry_put(c, &e), 0);
  expect_hit(c, &e);
  sj_cache_close(c);
  entry_free(&e);
}

/* ------------------------------------------------------------ hit counts */

static void test_hits_deferred_and_flushed(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  entry e;
  entry_make(&e, "k<1>", "sm_90a", 1);
  assert_int_equal(entry_put(c, &e), 0);
  assert_int_equal(tcu_sql(f->db, "UPDATE kernels SET last_used = 1000"), 0);
  for (int i = 0; i < 3; i++)
    expect_hit(c, &e);
  /* a get does not write */
  assert_int_equal(tcu_sql_int(f->db, "SELECT hits FROM kernels"), 0);
  assert_int_equal(tcu_sql_int(f->db, "SELECT last_used FROM kernels"), 1000);
  sj_cache_close(c);
  assert_int_equal(tcu_sql_int(f->db, "SELECT hits FROM kernels"), 3);
  assert_true(tcu_sql_int(f->db, "SELECT last_used FROM kernels") >=
              (int64_t)time(NULL) - 60);
  entry_free(&e);
}

/* ----------------------------------------------------------- maintenance */

static int cmp_key(const void *a, const void *b) {
  return memcmp(a, b, SJ_KEY_BYTES);
}

typedef struct listed {
  uint8_t keys[16][SJ_KEY_BYTES];
  int64_t bytes[16];
  char targets[16][16];
  int n, stop_after;
} listed;

static int on_entry(void *user, const sj_cache_list_entry *e) {
  listed *l = user;
  if (l->n < 16) {
    memcpy(l->keys[l->n], e->key, SJ_KEY_BYTES);
    l->bytes[l->n] = e->image_bytes;
    snprintf(l->targets[l->n], 16, "%s", e->target);
  }
  l->n++;
  return l->stop_after && l->n >= l->stop_after;
}

static void test_stat_and_list(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  entry e[6];
  int64_t total = 0;
  uint8_t sorted[6][SJ_KEY_BYTES];
  for (int i = 0; i < 6; i++) {
    char name[32];
    snprintf(name, sizeof name, "k<%d>", i);
    entry_make(&e[i], name, i % 2 ? "sm_80" : "sm_90a", (uint64_t)i * 101);
    assert_int_equal(entry_put(c, &e[i]), 0);
    total += (int64_t)e[i].size;
    memcpy(sorted[i], e[i].key.bytes, SJ_KEY_BYTES);
  }
  qsort(sorted, 6, SJ_KEY_BYTES, cmp_key);
  sj_cache_stat st;
  assert_int_equal(sj_cache_stat_get(c, &st), 0);
  assert_int_equal(st.entries, 6);
  assert_int_equal(st.bytes, total);
  assert_int_equal(st.schema_version, SJ_CACHE_SCHEMA);
  listed l;
  memset(&l, 0, sizeof l);
  assert_int_equal(sj_cache_db_list(c, on_entry, &l), 0);
  assert_int_equal(l.n, 6);
  for (int i = 0; i < 6; i++) {
    assert_memory_equal(l.keys[i], sorted[i], SJ_KEY_BYTES);
    for (int j = 0; j < 6; j++)
      if (memcmp(e[j].key.bytes, sorted[i], SJ_KEY_BYTES) == 0) {
        assert_int_equal(l.bytes[i], e[j].size);
        assert_string_equal(l.targets[i], e[j].target);
      }
  }
  memset(&l, 0, sizeof l);
  l.stop_after = 2;
  assert_int_equal(sj_cache_db_list(c, on_entry, &l), 0);
  assert_int_equal(l.n, 2);
  sj_cache_close(c);
  for (int i = 0; i < 6; i++)
    entry_free(&e[i]);
}

static void test_list_many(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  enum { N = 150 }; /* more than one chunk */
  for (int i = 0; i < N; i++) {
    entry e;
    char name[32];
    snprintf(name, sizeof name, "k<%d>", i);
    entry_make(&e, name, "sm_90a", (uint64_t)i);
    assert_int_equal(entry_put(c, &e), 0);
    entry_free(&e);
  }
  listed l;
  memset(&l, 0, sizeof l);
  assert_int_equal(sj_cache_db_list(c, on_entry, &l), 0);
  assert_int_equal(l.n, N);
  int64_t checked, ok, bad;
  assert_int_equal(sj_cache_db_verify(c, &checked, &ok, &bad), 0);
  assert_int_equal(checked, N);
  assert_int_equal(ok, N);
  assert_int_equal(bad, 0);
  sj_cache_close(c);
}

static void test_verify(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  entry e[4];
  for (int i = 0; i < 4; i++) {
    char name[32];
    snprintf(name, sizeof name, "k<%d>", i);
    entry_make(&e[i], name, "sm_90a", (uint64_t)i);
    assert_int_equal(entry_put(c, &e[i]), 0);
  }
  assert_int_equal(tcu_sql_blobs(f->db,
                                 "UPDATE kernels SET image = "
                                 "zeroblob(length(image)) WHERE key = ?1",
                                 e[2].key.bytes, 16, NULL, 0),
                   0);
  int64_t checked, ok, bad;
  assert_int_equal(sj_cache_db_verify(c, &checked, &ok, &bad), 0);
  assert_int_equal(checked, 4);
  assert_int_equal(ok, 3);
  assert_int_equal(bad, 1);
  assert_int_equal(rows(f), 3);
  expect_miss(c, &e[2].key, "sm_90a");
  expect_hit(c, &e[1]);
  assert_int_equal(sj_cache_db_verify(c, &checked, &ok, &bad), 0);
  assert_int_equal(checked, 3);
  assert_int_equal(bad, 0);
  sj_cache_close(c);
  for (int i = 0; i < 4; i++)
    entry_free(&e[i]);
}

static void test_prune_keeps_recently_used(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  sj_key k[4];
  uint8_t *img[4];
  size_t size = 0;
  for (int i = 0; i < 4; i++) {
    char name[32];
    snprintf(name, sizeof name, "k<%d>", i);
    tcu_key(&k[i], name, "sm_90a");
    img[i] = tcu_fake_cubin(90, 8, 0, 1000, (uint64_t)i, &size);
    sj_cache_row r;
    tcu_row(&r, &k[i], "sm_90a", img[i], size, SJ_IMAGE_CUBIN);
    assert_int_equal(sj_cache_put(c, &r), 0);
  }
  sj_cache_close(c);
  /* all old; then use 0 and 2 */
  assert_int_equal(tcu_sql(f->db, "UPDATE kernels SET last_used = 1000,"
                                  " created = 1000"),
                   0);
  c = sj_cache_open(&f->o);
  sj_cache_image out;
  for (int i = 0; i < 4; i += 2) {
    assert_int_equal(sj_cache_get(c, &k[i], "sm_90a", &out), SJ_CACHE_HIT);
    sj_cache_image_free(&out);
  }
  int64_t removed = -1;
  assert_int_equal(sj_cache_db_prune(c, (int64_t)size * 4, &removed), 0);
  assert_int_equal(removed, 0);
  assert_int_equal(sj_cache_db_prune(c, (int64_t)size * 2 + 10, &removed), 0);
  assert_int_equal(removed, 2);
  sj_cache_stat st;
  assert_int_equal(sj_cache_stat_get(c, &st), 0);
  assert_int_equal(st.entries, 2);
  assert_true(st.bytes <= (int64_t)size * 2 + 10);
  for (int i = 0; i < 4; i++) {
    sj_cache_result want = i % 2 == 0 ? SJ_CACHE_HIT : SJ_CACHE_MISS;
    assert_int_equal(sj_cache_get(c, &k[i], "sm_90a", &out), want);
    sj_cache_image_free(&out);
  }
  sj_cache_counters n;
  sj_cache_get_counters(c, &n);
  assert_int_equal(n.evicted, 2);
  assert_int_equal(sj_cache_db_prune(c, 0, &removed), 0);
  assert_int_equal(removed, 2);
  assert_int_equal(sj_cache_db_prune(c, -1, &removed), -1);
  sj_cache_close(c);
  for (int i = 0; i < 4; i++) {
    sj_key_free(&k[i]);
    free(img[i]);
  }
}

static void test_clear(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  entry e[3];
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "k<%d>", i);
    entry_make(&e[i], name, "sm_90a", (uint64_t)i);
    assert_int_equal(entry_put(c, &e[i]), 0);
  }
  int64_t removed = 0;
  assert_int_equal(sj_cache_db_clear(c, &removed), 0);
  assert_int_equal(removed, 3);
  assert_int_equal(rows(f), 0);
  expect_miss(c, &e[0].key, "sm_90a");
  sj_cache_close(c);
  for (int i = 0; i < 3; i++)
    entry_free(&e[i]);
}

/* ------------------------------------------------------- export / import */

typedef struct set {
  entry e[6];
  int n;
} set;

static void set_fill(sj_cache *c, set *s) {
  static const char *const targets[] = {"sm_80",  "sm_80",  "sm_80",
                                        "sm_90a", "sm_90a", "sm_120a"};
  s->n = 6;
  for (int i = 0; i < s->n; i++) {
    char name[32];
    snprintf(name, sizeof name, "k<%d>", i);
    entry_make(&s->e[i], name, targets[i], (uint64_t)i + 40);
    assert_int_equal(entry_put(c, &s->e[i]), 0);
  }
}

static void set_free(set *s) {
  for (int i = 0; i < s->n; i++)
    entry_free(&s->e[i]);
}

static sj_cache *open_other(fx *f, const char *name, sj_cache_opts *o) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/%s", f->dir, name);
  static char keep[4][4200];
  static int next;
  char *d = keep[next++ % 4];
  snprintf(d, 4200, "%s", dir);
  tcu_opts(o, d, NULL);
  return sj_cache_open(o);
}

static void test_export_import_roundtrip(void **state) {
  fx *f = *state;
  sj_cache *a = sj_cache_open(&f->o);
  set s;
  set_fill(a, &s);
  char all[4300], some[4300];
  snprintf(all, sizeof all, "%s/all.sjcache", f->dir);
  snprintf(some, sizeof some, "%s/some.sjcache", f->dir);
  int64_t n = -1;
  assert_int_equal(sj_cache_db_export(a, all, NULL, 0, &n), 0);
  assert_int_equal(n, 6);
  const char *t90[] = {"sm_90a"};
  assert_int_equal(sj_cache_db_export(a, some, t90, 1, &n), 0);
  assert_int_equal(n, 2);
  sj_cache_close(a);
  struct stat st;
  assert_int_equal(stat(all, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  assert_int_equal(tcu_count_prefix(f->dir, "all.sjcache."), 0); /* no tmp */
  assert_int_equal(tcu_sql_int(all, "PRAGMA user_version"), SJ_CACHE_SCHEMA);
  char *jm = tcu_sql_text(all, "PRAGMA journal_mode");
  assert_string_equal(jm, "delete"); /* one self-contained file */
  free(jm);

  sj_cache_opts ob;
  sj_cache *b = open_other(f, "b", &ob);
  int64_t imported = -1, skipped = -1;
  assert_int_equal(sj_cache_db_import(b, all, &imported, &skipped), 0);
  assert_int_equal(imported, 6);
  assert_int_equal(skipped, 0);
  for (int i = 0; i < s.n; i++)
    expect_hit(b, &s.e[i]);
  assert_int_equal(sj_cache_db_import(b, all, &imported, &skipped), 0);
  assert_int_equal(imported, 0);
  assert_int_equal(skipped, 6);
  sj_cache_close(b);

  sj_cache_opts oc;
  sj_cache *c = open_other(f, "c", &oc);
  assert_int_equal(sj_cache_db_import(c, some, &imported, &skipped), 0);
  assert_int_equal(imported, 2);
  for (int i = 0; i < s.n; i++) {
    if (strcmp(s.e[i].target, "sm_90a") == 0)
      expect_hit(c, &s.e[i]);
    else
      expect_miss(c, &s.e[i].key, s.e[i].target);
  }
  sj_cache_close(c);
  set_free(&s);
}

static void test_export_existing_path_fails(void **state) {
  fx *f = *state;
  sj_cache *a = sj_cache_open(&f->o);
  set s;
  set_fill(a, &s);
  char path[4300];
  snprintf(path, sizeof path, "%s/exists.sjcache", f->dir);
  assert_int_equal(tu_write_file(path, "keep", 4), 0);
  int64_t n = -1;
  assert_int_equal(sj_cache_db_export(a, path, NULL, 0, &n), -2);
  assert_int_equal(n, 0);
  size_t len;
  char *got = tu_read_file(path, &len);
  assert_string_equal(got, "keep");
  free(got);
  assert_int_equal(tcu_count_prefix(f->dir, "exists.sjcache."), 0);
  /* a directory that does not exist: an error, and no file */
  snprintf(path, sizeof path, "%s/no/such/dir/x.sjcache", f->dir);
  assert_int_equal(sj_cache_db_export(a, path, NULL, 0, &n), -1);
  sj_cache_close(a);
  set_free(&s);
}

/* Exports the set, damages it with sql (?1 bound to the key of the last
 * row in key order, so that good rows come first), and checks that the
 * import rejects the whole file. */
static void import_rejects(fx *f, const char *name, const char *sql) {
  sj_cache *a = sj_cache_open(&f->o);
  set s;
  set_fill(a, &s);
  char path[4300];
  snprintf(path, sizeof path, "%s/%s.sjcache", f->dir, name);
  int64_t n;
  assert_int_equal(sj_cache_db_export(a, path, NULL, 0, &n), 0);
  sj_cache_close(a);
  size_t klen;
  uint8_t *last =
      tcu_sql_blob(path, "SELECT key FROM kernels ORDER BY key DESC LIMIT 1",
                   NULL, 0, &klen);
  assert_int_equal(klen, 16);
  assert_int_equal(tcu_sql_blobs(path, sql, last, 16, NULL, 0), 0);
  free(last);

  sj_cache_opts ob;
  sj_cache *b = open_other(f, name, &ob);
  int64_t imported = -1, skipped = -1;
  assert_int_equal(sj_cache_db_import(b, path, &imported, &skipped), -2);
  assert_int_equal(imported, 0);
  assert_int_equal(skipped, 0);
  sj_cache_stat st;
  assert_int_equal(sj_cache_stat_get(b, &st), 0);
  assert_int_equal(st.entries, 0); /* nothing merged */
  for (int i = 0; i < s.n; i++)
    expect_miss(b, &s.e[i].key, s.e[i].target);
  sj_cache_close(b);
  set_free(&s);
}

static void test_import_rejects_flipped_image(void **state) {
  import_rejects(*state, "flip",
                 "UPDATE kernels SET image = zeroblob(length(image))"
                 " WHERE key = ?1");
}

static void test_import_rejects_bad_key(void **state) {
  import_rejects(*state, "key",
                 "UPDATE kernels SET key = randomblob(16) WHERE key = ?1");
}

static void test_import_rejects_target_lie(void **state) {
  /* the row claims another target than its canonical string */
  import_rejects(*state, "target",
                 "UPDATE kernels SET target = CASE target WHEN 'sm_80'"
                 " THEN 'sm_90a' ELSE 'sm_80' END WHERE key = ?1");
}

static void test_import_rejects_bad_checksum(void **state) {
  import_rejects(*state, "sum",
                 "UPDATE kernels SET checksum = zeroblob(16) WHERE key = ?1");
}

static void test_import_rejects_bad_kind(void **state) {
  import_rejects(*state, "kind",
                 "UPDATE kernels SET kind = 'ptx' WHERE key = ?1");
}

static void test_import_rejects_newer_schema(void **state) {
  import_rejects(*state, "newer", "PRAGMA user_version = 99");
}

static void test_import_rejects_non_cache_files(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  char path[4300];
  int64_t imported, skipped;
  snprintf(path, sizeof path, "%s/missing.sjcache", f->dir);
  assert_int_equal(sj_cache_db_import(c, path, &imported, &skipped), -1);
  snprintf(path, sizeof path, "%s/garbage.sjcache", f->dir);
  char junk[5000];
  memset(junk, 'x', sizeof junk);
  assert_int_equal(tu_write_file(path, junk, sizeof junk), 0);
  assert_int_equal(sj_cache_db_import(c, path, &imported, &skipped), -2);
  snprintf(path, sizeof path, "%s/empty.sjcache", f->dir);
  assert_int_equal(tu_write_file(path, "", 0), 0);
  assert_int_equal(sj_cache_db_import(c, path, &imported, &skipped), -2);
  /* a database with a "kernels" table of other columns */
  snprintf(path, sizeof path, "%s/other.sjcache", f->dir);
  assert_int_equal(tu_write_file(path, "", 0), 0);
  assert_int_equal(tcu_sql(path, "CREATE TABLE kernels(a, b);"
                                 "INSERT INTO kernels VALUES(1, 2);"
                                 "PRAGMA user_version = 1"),
                   0);
  assert_int_equal(sj_cache_db_import(c, path, &imported, &skipped), -2);
  sj_cache_stat st;
  assert_int_equal(sj_cache_stat_get(c, &st), 0);
  assert_int_equal(st.entries, 0);
  sj_cache_close(c);
}

/* --------------------------------------------------------------- default */

static void test_default_dir(void **state) {
  (void)state;
  char *save[3];
  const char *names[3] = {"SAGEJIT_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  for (int i = 0; i < 3; i++) {
    const char *v = getenv(names[i]);
    save[i] = v ? strdup(v) : NULL;
  }
  char buf[4096];
  setenv("SAGEJIT_CACHE_DIR", "/x/explicit", 1);
  setenv("XDG_CACHE_HOME", "/x/xdg", 1);
  setenv("HOME", "/x/home", 1);
  assert_int_equal(sj_cache_default_dir(buf, sizeof buf), 0);
  assert_string_equal(buf, "/x/explicit");
  unsetenv("SAGEJIT_CACHE_DIR");
  assert_int_equal(sj_cache_default_dir(buf, sizeof buf), 0);
  assert_string_equal(buf, "/x/xdg/sagejit");
  setenv("XDG_CACHE_HOME", "relative", 1); /* ignored, per XDG */
  assert_int_equal(sj_cache_default_dir(buf, sizeof buf), 0);
  assert_string_equal(buf, "/x/home/.cache/sagejit");
  unsetenv("XDG_CACHE_HOME");
  assert_int_equal(sj_cache_default_dir(buf, sizeof buf), 0);
  assert_string_equal(buf, "/x/home/.cache/sagejit");
  unsetenv("HOME"); /* the password database's home */
  assert_int_equal(sj_cache_default_dir(buf, sizeof buf), 0);
  assert_non_null(strstr(buf, "/.cache/sagejit"));
  assert_int_equal(sj_cache_default_dir(buf, 4), -1); /* too small */
  for (int i = 0; i < 3; i++) {
    if (save[i])
      setenv(names[i], save[i], 1);
    else
      unsetenv(names[i]);
    free(save[i]);
  }
}

/* ---------------------------------------------------------------- threads */

typedef struct thread_arg {
  sj_cache *c;
  int id, failures;
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *a = p;
  for (int i = 0; i < 40; i++) {
    entry e;
    char name[32];
    snprintf(name, sizeof name, "k<%d>", (i + a->id * 10) % 60);
    entry_make(&e, name, "sm_90a", (uint64_t)((i + a->id * 10) % 60));
    sj_cache_image img;
    if (sj_cache_get(a->c, &e.key, "sm_90a", &img) == SJ_CACHE_HIT) {
      if (img.size != e.size || memcmp(img.data, e.image, e.size) != 0)
        a->failures++;
      sj_cache_image_free(&img);
    } else if (entry_put(a->c, &e) != 0) {
      a->failures++;
    }
    entry_free(&e);
  }
  return NULL;
}

static void test_threads_share_one_cache(void **state) {
  fx *f = *state;
  sj_cache *c = sj_cache_open(&f->o);
  pthread_t t[4];
  thread_arg a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = (thread_arg){c, i, 0};
    assert_int_equal(pthread_create(&t[i], NULL, thread_main, &a[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(a[i].failures, 0);
  }
  sj_cache_counters n;
  sj_cache_get_counters(c, &n);
  assert_int_equal(n.errors, 0);
  assert_int_equal(n.corrupt, 0);
  assert_int_equal(n.hits + n.misses, 160);
  sj_cache_close(c);
  assert_int_equal(rows(f), 60);
}

int main(void) {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_miss_put_hit),
      T(test_ptx_nul_terminated),
      T(test_put_same_key_twice),
      T(test_put_rejects_inconsistent_rows),
      T(test_disabled),
      T(test_canonical_mismatch),
      T(test_flipped_byte),
      T(test_truncated_image),
      T(test_wrong_target_real_cubin),
      T(test_get_other_target_keeps_row),
      T(test_drop),
      T(test_garbage_file),
      T(test_damaged_pages),
      T(test_damaged_while_open),
      T(test_foreign_database),
      T(test_hits_deferred_and_flushed),
      T(test_stat_and_list),
      T(test_list_many),
      T(test_verify),
      T(test_prune_keeps_recently_used),
      T(test_clear),
      T(test_export_import_roundtrip),
      T(test_export_existing_path_fails),
      T(test_import_rejects_flipped_image),
      T(test_import_rejects_bad_key),
      T(test_import_rejects_target_lie),
      T(test_import_rejects_bad_checksum),
      T(test_import_rejects_bad_kind),
      T(test_import_rejects_newer_schema),
      T(test_import_rejects_non_cache_files),
      T(test_default_dir),
      T(test_threads_share_one_cache),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
