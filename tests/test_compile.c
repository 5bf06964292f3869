/*
 * test_compile.c -- every kernel template compiles with NVRTC for every
 * target sagejit compiles for (the seven of the default warm set, and
 * sm_87, sm_88, sm_110a and sm_121a, which a warm compiles when asked) on
 * this GPU-less machine, the images land in the cache, and each image is a
 * valid binary for its target.
 *
 * SJ_TEST_TARGETS=sm_80,sm_90a (a subset of those targets) limits the
 * compiling tests to them.  The ASan pass of .ci/run sets it to sm_89
 * and sm_90a (attn_mma and attn_wgmma): the library code it checks is the
 * same for every target, and under its allocator each NVRTC compile
 * costs twice its time (the plain suite compiles every target).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "internal.h"
#include "testutil.h"

/* Every cubin target of runtime/arch.c (test_target_list_complete). */
static const char *const k_all_targets[] = {
    "sm_80",   "sm_86",   "sm_87",   "sm_88",   "sm_89",  "sm_90a",
    "sm_100a", "sm_103a", "sm_110a", "sm_120a", "sm_121a"};
#define N_ALL (sizeof k_all_targets / sizeof *k_all_targets)
/* The targets under test: all of them, or those SJ_TEST_TARGETS names. */
static const char *k_targets[N_ALL];
static size_t g_n_targets;

/* The index in k_all_targets of the name s[0..len), or N_ALL. */
static size_t target_index(const char *s, size_t len) {
  size_t i = 0;
  while (i < N_ALL &&
         (strlen(k_all_targets[i]) != len || strncmp(s, k_all_targets[i], len)))
    i++;
  return i;
}

/* Fills k_targets; -1 when SJ_TEST_TARGETS lists a name that is not one
 * of k_all_targets, or one twice. */
static int pick_targets(void) {
  const char *env = getenv("SJ_TEST_TARGETS");
  g_n_targets = 0;
  if (!env || !*env) {
    for (size_t i = 0; i < N_ALL; i++)
      k_targets[g_n_targets++] = k_all_targets[i];
    return 0;
  }
  for (const char *p = env; *p;) {
    const char *comma = strchr(p, ',');
    const size_t n = comma ? (size_t)(comma - p) : strlen(p);
    const size_t i = target_index(p, n);
    if (i == N_ALL)
      return -1;
    for (size_t j = 0; j < g_n_targets; j++)
      if (k_targets[j] == k_all_targets[i])
        return -1;
    k_targets[g_n_targets++] = k_all_targets[i];
    p += n + (comma != NULL);
  }
  return g_n_targets ? 0 : -1;
}

typedef struct counts {
  int64_t rows;
  int64_t by_target[N_ALL];
} counts;

static int count_row(void *user, const sj_cache_entry *e) {
  counts *c = user;
  c->rows++;
  for (size_t i = 0; i < g_n_targets; i++)
    if (!strcmp(e->target, k_targets[i]))
      c->by_target[i]++;
  return 0;
}

/* Every compute capability from 8.0 to 12.9 that the library maps to a
 * cubin target maps to one of k_all_targets: a target added to
 * runtime/arch.c fails here until this file compiles for it too. */
static void test_target_list_complete(void **state) {
  (void)state;
  if (sj_nvrtc_version(NULL, NULL) != SJ_OK)
    skip();
  int seen[N_ALL] = {0};
  for (int major = 8; major <= 12; major++)
    for (int minor = 0; minor <= 9; minor++) {
      char name[32];
      if (sj_target_for_cc(major, minor, name, sizeof name) != SJ_OK ||
          strncmp(name, "sm_", 3))
        continue; /* unknown, or PTX for a device newer than NVRTC */
      const size_t i = target_index(name, strlen(name));
      if (i == N_ALL)
        fail_msg("compute capability %d.%d runs %s, which this file does "
                 "not compile for",
                 major, minor, name);
      seen[i] = 1;
    }
  for (size_t i = 0; i < N_ALL; i++)
    if (!seen[i])
      fail_msg("%s: no compute capability maps to it", k_all_targets[i]);
}

/* The default warm matrix, for all the targets under test: {fp16, bf16} x
 * {64, 128} x {causal 0, 1} with each target's default family.  Per target:
 * kv_stats (2 dtypes x 2 dims) + kv_finalize (2 dims) + quant (4) + attention
 * (8) = 18 distinct kernels; sm_90a adds, at D = 128, the attention
 * kernels of short causal sequences (sj_plan_short), one per dtype, and of
 * solo sequences (sj_plan_solo), one per dtype and causal setting. */
static int expected_kernels(const char *target) {
  return 18 + (strcmp(target, "sm_90a") == 0 ? 2 + 4 : 0);
}

static void test_warm_default_matrix_all_targets(void **state) {
  (void)state;
  if (sj_nvrtc_version(NULL, NULL) != SJ_OK)
    skip();
  char dir[512];
  assert_int_equal(tu_mkdtemp("compile", dir, sizeof dir), 0);
  sj_config cfg;
  sj_config_init(&cfg);
  cfg.device = SJ_DEVICE_NONE;
  cfg.target = "sm_80";
  cfg.cache_dir = dir;
  sj_context *ctx = NULL;
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_OK);

  sj_warm_request req;
  memset(&req, 0, sizeof req);
  req.targets = k_targets;
  req.n_targets = g_n_targets;
  req.jobs = 2;
  sj_warm_result r;
  sj_status st = sj_warm(ctx, &req, &r);
  if (st != SJ_OK)
    fail_msg("warm: %s", sj_context_last_error(ctx));
  assert_int_equal(r.failed, 0);
  int64_t want = 0;
  for (size_t i = 0; i < g_n_targets; i++)
    want += expected_kernels(k_targets[i]);
  assert_int_equal(r.total, want);
  assert_int_equal(r.compiled, r.total);
  assert_int_equal(r.cached, 0);

  counts c;
  memset(&c, 0, sizeof c);
  assert_int_equal(sj_cache_list(ctx, count_row, &c), SJ_OK);
  assert_int_equal(c.rows, r.total);
  for (size_t i = 0; i < g_n_targets; i++)
    assert_int_equal(c.by_target[i], expected_kernels(k_targets[i]));

  /* Every stored image passes the checksum and ELF/target checks. */
  int64_t checked = 0, ok = 0, corrupt = 0;
  assert_int_equal(sj_cache_verify(ctx, &checked, &ok, &corrupt), SJ_OK);
  assert_int_equal(checked, r.total);
  assert_int_equal(ok, r.total);
  assert_int_equal(corrupt, 0);

  /* Idempotent: a second warm compiles nothing. */
  sj_warm_result r2;
  assert_int_equal(sj_warm(ctx, &req, &r2), SJ_OK);
  assert_int_equal(r2.compiled, 0);
  assert_int_equal(r2.cached, r.total);
  sj_context_destroy(ctx);
  tu_rmrf(dir);
}

/* The reference kernel (not part of warm) and the non-default family and
 * head dims compile where the family exists. */
static void test_other_kernels_compile(void **state) {
  (void)state;
  if (sj_nvrtc_version(NULL, NULL) != SJ_OK)
    skip();
  sj_config cfg;
  sj_config_init(&cfg);
  cfg.device = SJ_DEVICE_NONE;
  cfg.target = "sm_90a";
  cfg.cache_disabled = 1;
  sj_context *ctx = NULL;
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_OK);
  for (size_t ti = 0; ti < g_n_targets; ti++) {
    sj_target t;
    assert_int_equal(sj_target_parse(k_targets[ti], &t), 0);
    for (int dt = 1; dt <= 2; dt++) {
      sj_spec s;
      memset(&s, 0, sizeof s);
      s.kind = SJ_KERNEL_REFERENCE;
      s.dtype = (sj_dtype)dt;
      s.head_dim = 128;
      int compiled = 0;
      char msg[1024];
      sj_status st = sj_kernel_ensure_cached(ctx, &s, &t, &compiled, msg,
                                             sizeof msg);
      if (st != SJ_OK)
        fail_msg("reference for %s: %s", t.name, msg);
      assert_int_equal(compiled, 1);
    }
  }
  sj_context_destroy(ctx);
}

/* A kernel's image depends only on what its cache key hashes: the same
 * spec compiled twice, more than a second apart, gives the same bytes.
 * (Namespace-scope constants of internal linkage once made NVRTC emit
 * symbols named after a hash of the compile's time: kernel_templates/
 * sj_common.cuh.)  kv_finalize and the FP32 reference kernel: both are
 * compiled from the whole translation unit, so a constant of internal
 * linkage in any header would show in either. */
static void test_image_deterministic(void **state) {
  (void)state;
  if (sj_nvrtc_version(NULL, NULL) != SJ_OK)
    skip();
  sj_target t;
  assert_int_equal(sj_target_parse("sm_90a", &t), 0);
  sj_spec specs[2];
  memset(specs, 0, sizeof specs);
  specs[0].kind = SJ_KERNEL_FINALIZE;
  specs[0].head_dim = 64;
  specs[1].kind = SJ_KERNEL_REFERENCE;
  specs[1].dtype = SJ_DTYPE_FP16;
  specs[1].head_dim = 64;
  for (int i = 0; i < 2; i++) {
    sj_compiled a, b;
    char msg[1024];
    if (sj_compile(&specs[i], &t, &a, msg, sizeof msg) != SJ_OK)
      fail_msg("first compile of spec %d: %s", i, msg);
    struct timespec ts = {1, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    if (sj_compile(&specs[i], &t, &b, msg, sizeof msg) != SJ_OK)
      fail_msg("second compile of spec %d: %s", i, msg);
    assert_true(a.size > 0);
    assert_int_equal(a.size, b.size);
    assert_memory_equal(a.image, b.image, a.size);
    sj_compiled_free(&a);
    sj_compiled_free(&b);
  }
}

int main(void) {
  if (pick_targets() != 0) {
    fprintf(stderr, "SJ_TEST_TARGETS=%s: not a list of targets of this file\n",
            getenv("SJ_TEST_TARGETS"));
    return 2;
  }
  if (g_n_targets < N_ALL)
    printf("test_compile: %zu of %zu targets (SJ_TEST_TARGETS)\n", g_n_targets,
           N_ALL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_target_list_complete),
      cmocka_unit_test(test_warm_default_matrix_all_targets),
      cmocka_unit_test(test_other_kernels_compile),
      cmocka_unit_test(test_image_deterministic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
