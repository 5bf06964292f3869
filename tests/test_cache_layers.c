/*
 * test_cache_layers.c -- read-only layers, files of a newer schema, the
 * size limit (eviction), and the trust rules for directories and files
 * owned by others or writable by group/others.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache.h"
#include "key.h"
#include "test_cache_util.h"
#include "testutil.h"

#define NOBODY 65534

typedef struct fx {
  char root[4096];
  char main_dir[4200], main_db[4300];
  char src_dir[4200], src_db[4300];
  tcu_log log;
  sj_cache_opts o;
} fx;

static int setup(void **state) {
  fx *f = calloc(1, sizeof *f);
  if (!f || tu_mkdtemp("layers", f->root, sizeof f->root) != 0)
    return -1;
  snprintf(f->main_dir, sizeof f->main_dir, "%s/main", f->root);
  snprintf(f->src_dir, sizeof f->src_dir, "%s/src", f->root);
  tcu_db_path(f->main_db, sizeof f->main_db, f->main_dir);
  tcu_db_path(f->src_db, sizeof f->src_db, f->src_dir);
  tcu_opts(&f->o, f->main_dir, &f->log);
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

static void img_make(img *m, int i, uint64_t seed) {
  char name[32];
  snprintf(name, sizeof name, "k<%d>", i);
  tcu_key(&m->key, name, "sm_90a");
  m->data = tcu_fake_cubin(90, 8, 0, 1000, seed, &m->size);
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

/* 1: hit with m's bytes; 0: miss; -1: hit with other bytes. */
static int img_get(sj_cache *c, const img *m) {
  sj_cache_image out;
  if (sj_cache_get(c, &m->key, "sm_90a", &out) != SJ_CACHE_HIT)
    return 0;
  int same = out.size == m->size && memcmp(out.data, m->data, m->size) == 0;
  sj_cache_image_free(&out);
  return same ? 1 : -1;
}

/* A cache in dir holding rows 0..n-1 (image seeds seed+i). */
static void fill(const char *dir, int n, uint64_t seed) {
  sj_cache_opts o;
  tcu_opts(&o, dir, NULL);
  sj_cache *c = sj_cache_open(&o);
  assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_READWRITE);
  for (int i = 0; i < n; i++) {
    img m;
    img_make(&m, i, seed + (uint64_t)i);
    assert_int_equal(img_put(c, &m), 0);
    img_free(&m);
  }
  sj_cache_close(c);
}

/* A standalone export of rows 0..n-1 at path. */
static void make_layer(fx *f, const char *path, int n, uint64_t seed) {
  tu_rmrf(f->src_dir);
  fill(f->src_dir, n, seed);
  sj_cache_opts o;
  tcu_opts(&o, f->src_dir, NULL);
  sj_cache *c = sj_cache_open(&o);
  int64_t k;
  assert_int_equal(sj_cache_db_export(c, path, NULL, 0, &k), 0);
  assert_int_equal(k, n);
  sj_cache_close(c);
}

/* ----------------------------------------------------------------- layers */

static void test_layer_hit_is_not_copied(void **state) {
  fx *f = *state;
  char layer[4300];
  snprintf(layer, sizeof layer, "%s/warm.sjcache", f->root);
  make_layer(f, layer, 4, 100);
  uint8_t before[16], after[16];
  assert_int_equal(tcu_file_hash(layer, before), 0);
  f->o.layers = layer;
  sj_cache *c = sj_cache_open(&f->o);
  assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_READWRITE);
  for (int i = 0; i < 4; i++) {
    img m;
    img_make(&m, i, 100 + (uint64_t)i);
    assert_int_equal(img_get(c, &m), 1);
    img_free(&m);
  }
  sj_cache_counters n;
  sj_cache_get_counters(c, &n);
  assert_int_equal(n.hits, 4);
  sj_cache_close(c);
  assert_int_equal(tcu_sql_int(f->main_db, "SELECT count(*) FROM kernels"), 0);
  assert_int_equal(tcu_file_hash(layer, after), 0);
  assert_memory_equal(before, after, 16);
  assert_int_equal(f->log.n[SJ_CACHE_LOG_WARN], 0);
}

static void test_layer_order(void **state) {
  fx *f = *state;
  char l1[4300], l2dir[4300], l2[4400];
  snprintf(l1, sizeof l1, "%s/one.sjcache", f->root);
  snprintf(l2dir, sizeof l2dir, "%s/two", f->root);
  assert_int_equal(mkdir(l2dir, 0700), 0);
  tcu_db_path(l2, sizeof l2, l2dir);
  make_layer(f, l1, 2, 1000); /* rows 0, 1 */
  make_layer(f, l2, 3, 2000); /* rows 0, 1, 2 with other bytes */
  fill(f->main_dir, 1, 3000); /* row 0 with yet other bytes */
  char layers[13000];
  snprintf(layers, sizeof layers, "%s/missing:%s::%s", f->root, l1, l2dir);
  f->o.layers = layers;
  sj_cache *c = sj_cache_open(&f->o);
  img m;
  img_make(&m, 0, 3000); /* the writable file first */
  assert_int_equal(img_get(c, &m), 1);
  img_free(&m);
  img_make(&m, 1, 1001); /* then the layers in order */
  assert_int_equal(img_get(c, &m), 1);
  img_free(&m);
  img_make(&m, 2, 2002);
  assert_int_equal(img_get(c, &m), 1);
  img_free(&m);
  img_make(&m, 3, 0);
  assert_int_equal(img_get(c, &m), 0);
  img_free(&m);
  sj_cache_close(c);
  assert_int_equal(f->log.n[SJ_CACHE_LOG_WARN], 0); /* missing: quiet */
}

static void test_layer_bad_row_skipped(void **state) {
  fx *f = *state;
  char l1[4300], l2[4300];
  snprintf(l1, sizeof l1, "%s/one.sjcache", f->root);
  snprintf(l2, sizeof l2, "%s/two.sjcache", f->root);
  make_layer(f, l1, 2, 10);
  make_layer(f, l2, 2, 10);
  img m;
  img_make(&m, 1, 11);
  assert_int_equal(tcu_sql_blobs(l1,
                                 "UPDATE kernels SET image = "
                                 "zeroblob(length(image)) WHERE key = ?1",
                                 m.key.bytes, 16, NULL, 0),
                   0);
  uint8_t before[16], after[16];
  assert_int_equal(tcu_file_hash(l1, before), 0);
  char layers[9000];
  snprintf(layers, sizeof layers, "%s:%s", l1, l2);
  f->o.layers = layers;
  sj_cache *c = sj_cache_open(&f->o);
  assert_int_equal(img_get(c, &m), 1); /* from the second layer */
  sj_cache_counters n;
  sj_cache_get_counters(c, &n);
  assert_int_equal(n.corrupt, 1);
  assert_int_equal(f->log.n[SJ_CACHE_LOG_WARN], 1);
  /* the driver rejects it too: no layer serves it any more */
  assert_int_equal(sj_cache_drop(c, m.key.bytes), 0);
  assert_int_equal(img_get(c, &m), 0);
  sj_cache_close(c);
  assert_int_equal(tcu_file_hash(l1, after), 0);
  assert_memory_equal(before, after, 16);
  img_free(&m);
}

static void test_layer_trust(void **state) {
  fx *f = *state;
  char layer[4300];
  snprintf(layer, sizeof layer, "%s/warm.sjcache", f->root);
  make_layer(f, layer, 1, 5);
  img m;
  img_make(&m, 0, 5);
  f->o.layers = layer;
  assert_int_equal(chmod(layer, 0664), 0); /* group-writable */
  sj_cache *c = sj_cache_open(&f->o);
  assert_int_equal(img_get(c, &m), 0);
  assert_int_equal(f->log.n[SJ_CACHE_LOG_WARN], 1);
  sj_cache_close(c);
  f->o.trust_foreign = 1;
  c = sj_cache_open(&f->o);
  assert_int_equal(img_get(c, &m), 1);
  sj_cache_close(c);
  f->o.trust_foreign = 0;
  assert_int_equal(chmod(layer, 0644), 0);
  if (geteuid() == 0) {
    assert_int_equal(chown(layer, NOBODY, NOBODY), 0); /* someone else's */
    memset(&f->log, 0, sizeof f->log);
    c = sj_cache_open(&f->o);
    assert_int_equal(img_get(c, &m), 0);
    assert_int_equal(f->log.n[SJ_CACHE_LOG_WARN], 1);
    sj_cache_close(c);
  }
  img_free(&m);
}

static void test_layer_schemas(void **state) {
  fx *f = *state;
  char newer[4300], alien[4300], junk[4300];
  snprintf(newer, sizeof newer, "%s/newer.sjcache", f->root);
  snprintf(alien, sizeof alien, "%s/alien.sjcache", f->root);
  snprintf(junk, sizeof junk, "%s/junk.sjcache", f->root);
  make_layer(f, newer, 1, 7);
  /* a future schema that kept the columns: readable */
  assert_int_equal(tcu_sql(newer, "ALTER TABLE kernels ADD COLUMN extra;"
                                  "PRAGMA user_version = 7"),
                   0);
  /* a future schema without them, and a file that is no database */
  assert_int_equal(tu_write_file(alien, "", 0), 0);
  assert_int_equal(tcu_sql(alien, "CREATE TABLE kernels(x);"
                                  "PRAGMA user_version = 9"),
                   0);
  assert_int_equal(tu_write_file(junk, "not a database at all", 21), 0);
  uint8_t h1[16], h2[16];
  assert_int_equal(tcu_file_hash(alien, h1), 0);
  char layers[13000];
  snprintf(layers, sizeof layers, "%s:%s:%s", junk, alien, newer);
  f->o.layers = layers;
  sj_cache *c = sj_cache_open(&f->o);
  assert_int_equal(f->log.n[SJ_CACHE_LOG_WARN], 2); /* junk and alien */
  img m;
  img_make(&m, 0, 7);
  assert_int_equal(img_get(c, &m), 1);
  img_free(&m);
  sj_cache_close(c);
  assert_int_equal(tcu_file_hash(alien, h2), 0);
  assert_memory_equal(h1, h2, 16);
  assert_int_equal(tcu_sql_int(newer, "PRAGMA user_version"), 7);
}

/* ------------------------------------------------- a newer main file */

static void test_main_newer_schema_read_only(void **state) {
  fx *f = *state;
  fill(f->main_dir, 3, 50);
  assert_int_equal(tcu_sql(f->main_db, "PRAGMA user_version = 2"), 0);
  sj_cache *c = sj_cache_open(&f->o);
  assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_READONLY);
  assert_int_equal(f->log.n[SJ_CACHE_LOG_WARN], 1);
  img m;
  img_make(&m, 1, 51);
  assert_int_equal(img_get(c, &m), 1);
  img_free(&m);
  img_make(&m, 9, 9);
  assert_int_equal(img_put(c, &m), 0); /* goes nowhere */
  assert_int_equal(img_get(c, &m), 0);
  img_free(&m);
  sj_cache_close(c);
  assert_int_equal(f->log.n[SJ_CACHE_LOG_WARN], 1);
  assert_int_equal(tcu_sql_int(f->main_db, "PRAGMA user_version"), 2);
  assert_int_equal(tcu_sql_int(f->main_db, "SELECT count(*) FROM kernels"), 3);
  assert_int_equal(tcu_count_prefix(f->main_dir, "kernels.db.corrupt"), 0);
}

static void test_main_newer_schema_unknown_columns(void **state) {
  fx *f = *state;
  assert_int_equal(mkdir(f->main_dir, 0700), 0);
  assert_int_equal(tu_write_file(f->main_db, "", 0), 0);
  assert_int_equal(tcu_sql(f->main_db, "CREATE TABLE kernels(blob);"
                                       "PRAGMA user_version = 5"),
                   0);
  uint8_t h1[16], h2[16];
  assert_int_equal(tcu_file_hash(f->main_db, h1), 0);
  sj_cache *c = sj_cache_open(&f->o);
  assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_MEMORY);
  assert_int_equal(f->log.n[SJ_CACHE_LOG_WARN], 1);
  img m;
  img_make(&m, 0, 1);
  assert_int_equal(img_put(c, &m), 0);
  assert_int_equal(img_get(c, &m), 0);
  img_free(&m);
  sj_cache_close(c);
  assert_int_equal(tcu_file_hash(f->main_db, h2), 0);
  assert_memory_equal(h1, h2, 16); /* never migrated, never moved */
  assert_int_equal(tcu_count_prefix(f->main_dir, "kernels.db.corrupt"), 0);
}

/* --------------------------------------------------------------- eviction */

static void test_eviction_keeps_limit(void **state) {
  fx *f = *state;
  img probe;
  img_make(&probe, 0, 0);
  int64_t size = (int64_t)probe.size;
  img_free(&probe);
  f->o.max_bytes = 20 * size;
  sj_cache *c = sj_cache_open(&f->o);
  enum { N = 100 };
  for (int i = 0; i < N; i++) {
    img m;
    img_make(&m, i, (uint64_t)i);
    assert_int_equal(img_put(c, &m), 0);
    img_free(&m);
    sj_cache_stat st;
    assert_int_equal(sj_cache_stat_get(c, &st), 0);
    assert_true(st.bytes <= f->o.max_bytes);
  }
  sj_cache_counters n;
  sj_cache_get_counters(c, &n);
  assert_true(n.evicted >= N - 20);
  assert_int_equal(n.puts, N);
  assert_int_equal(n.errors, 0);
  for (int i = N - 10; i < N; i++) { /* the newest survive */
    img m;
    img_make(&m, i, (uint64_t)i);
    assert_int_equal(img_get(c, &m), 1);
    img_free(&m);
  }
  sj_cache_close(c);
}

static void test_eviction_default_and_off(void **state) {
  fx *f = *state;
  img probe;
  img_make(&probe, 0, 0);
  int64_t size = (int64_t)probe.size;
  img_free(&probe);
  f->o.max_bytes = -1; /* no limit */
  sj_cache *c = sj_cache_open(&f->o);
  for (int i = 0; i < 30; i++) {
    img m;
    img_make(&m, i, (uint64_t)i);
    assert_int_equal(img_put(c, &m), 0);
    img_free(&m);
  }
  sj_cache_close(c);
  assert_int_equal(tcu_sql_int(f->main_db, "SELECT count(*) FROM kernels"), 30);
  /* a smaller limit on the next open trims the file on the next put */
  f->o.max_bytes = 10 * size;
  c = sj_cache_open(&f->o);
  img m;
  img_make(&m, 99, 99);
  assert_int_equal(img_put(c, &m), 0);
  assert_int_equal(img_get(c, &m), 1);
  img_free(&m);
  sj_cache_stat st;
  assert_int_equal(sj_cache_stat_get(c, &st), 0);
  assert_true(st.bytes <= 10 * size);
  sj_cache_close(c);
  /* 0 means the 4 GiB default: nothing evicted */
  f->o.max_bytes = 0;
  c = sj_cache_open(&f->o);
  img_make(&m, 100, 100);
  assert_int_equal(img_put(c, &m), 0);
  img_free(&m);
  sj_cache_counters n;
  sj_cache_get_counters(c, &n);
  assert_int_equal(n.evicted, 0);
  sj_cache_close(c);
}

/* ------------------------------------------------------------------ trust */

static void test_foreign_owned_file_not_loaded(void **state) {
  fx *f = *state;
  if (geteuid() != 0)
    skip();
  fill(f->main_dir, 2, 70);
  assert_int_equal(chown(f->main_db, NOBODY, NOBODY), 0);
  uint8_t h1[16], h2[16];
  assert_int_equal(tcu_file_hash(f->main_db, h1), 0);
  sj_cache *c = sj_cache_open(&f->o);
  assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_MEMORY);
  assert_string_equal(sj_cache_path(c), "");
  assert_int_equal(f->log.n[SJ_CACHE_LOG_WARN], 1);
  assert_non_null(strstr(f->log.last, "SAGEJIT_CACHE_TRUST"));
  img m;
  img_make(&m, 0, 70);
  assert_int_equal(img_get(c, &m), 0);
  assert_int_equal(img_put(c, &m), 0);
  sj_cache_close(c);
  assert_int_equal(tcu_file_hash(f->main_db, h2), 0);
  assert_memory_equal(h1, h2, 16);
  /* trusted on request */
  f->o.trust_foreign = 1;
  c = sj_cache_open(&f->o);
  assert_int_equal(img_get(c, &m), 1);
  sj_cache_close(c);
  img_free(&m);
}

static void test_unsafe_dirs_not_loaded(void **state) {
  fx *f = *state;
  fill(f->main_dir, 2, 80);
  img m;
  img_make(&m, 0, 80);
  static const mode_t modes[] = {0770, 0707, 0777};
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(chmod(f->main_dir, modes[i]), 0);
    memset(&f->log, 0, sizeof f->log);
    sj_cache *c = sj_cache_open(&f->o);
    assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_MEMORY);
    assert_int_equal(f->log.n[SJ_CACHE_LOG_WARN], 1);
    assert_int_equal(img_get(c, &m), 0);
    sj_cache_close(c);
  }
  if (geteuid() == 0) { /* a directory of another user */
    assert_int_equal(chmod(f->main_dir, 0700), 0);
    assert_int_equal(chown(f->main_dir, NOBODY, NOBODY), 0);
    sj_cache *c = sj_cache_open(&f->o);
    assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_MEMORY);
    assert_int_equal(img_get(c, &m), 0);
    sj_cache_close(c);
  }
  assert_int_equal(chmod(f->main_dir, 0700), 0);
  assert_int_equal(chown(f->main_dir, geteuid(), getegid()), 0);
  sj_cache *c = sj_cache_open(&f->o); /* fine again */
  assert_int_equal(sj_cache_get_mode(c), SJ_CACHE_MODE_READWRITE);
  assert_int_equal(img_get(c, &m), 1);
  sj_cache_close(c);
  img_free(&m);
}

static void test_new_files_private(void **state) {
  fx *f = *state;
  mode_t old = umask(0);
  sj_cache *c = sj_cache_open(&f->o);
  umask(old);
  img m;
  img_make(&m, 0, 1);
  assert_int_equal(img_put(c, &m), 0);
  img_free(&m);
  struct stat st;
  assert_int_equal(stat(f->main_dir, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0700);
  const char *suffix[] = {"", "-wal", "-shm"};
  for (int i = 0; i < 3; i++) {
    char p[4400];
    snprintf(p, sizeof p, "%s%s", f->main_db, suffix[i]);
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
  }
  sj_cache_close(c);
}

int main(void) {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_layer_hit_is_not_copied),
      T(test_layer_order),
      T(test_layer_bad_row_skipped),
      T(test_layer_trust),
      T(test_layer_schemas),
      T(test_main_newer_schema_read_only),
      T(test_main_newer_schema_unknown_columns),
      T(test_eviction_keeps_limit),
      T(test_eviction_default_and_off),
      T(test_foreign_owned_file_not_loaded),
      T(test_unsafe_dirs_not_loaded),
      T(test_new_files_private),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
