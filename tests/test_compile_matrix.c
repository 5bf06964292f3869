/*
 * test_compile_matrix.c -- the full option matrix of each mma.sync family
 * compiles with NVRTC on this GPU-less machine, through sj_warm into a
 * cache, for one target per family: FP16PV on sm_80, FP8PV on sm_89; every
 * dtype, head dim, causal mode, granularity and accumulation the family
 * offers.  The granularity is a kernel argument, not a template parameter:
 * the three granularities share every kernel (attention and quantizer), so
 * the attention count below has no factor 3 and a warm of one granularity
 * finds the whole matrix's kernels cached.  The
 * WGMMA family's full matrix on sm_90a (the same 78 attention kernels
 * sj_warm would compile: 60 plus the 18 of short and solo sequences) is
 * compiled by test_spills, which also reads ptxas's report of
 * each, so it is not compiled twice.  (test_compile covers the default
 * matrix of every target through sj_warm, sm_90a's short and solo kernels
 * included.)  test_tma_kernels_compile compiles attn_mma's TMA form on
 * sm_90a wherever the template has it, which no default matrix above
 * reaches (sm_90 only; runtime/spec.c mma_tma).  Slow (minutes of NVRTC on
 * two cores), so it carries its own
 * ctest label and the sanitizer passes leave it out.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"
#include "testutil.h"

/* Kernels of `target` whose name starts with `prefix` and, if `suffix` is
 * set, ends with it (",true>": attn_mma's TMA tiles, its ninth argument). */
typedef struct attn_count {
  const char *target, *prefix, *suffix;
  int64_t n;
} attn_count;

static int count_attn(void *user, const sj_cache_entry *e) {
  attn_count *c = user;
  const size_t n = strlen(e->kernel), ns = c->suffix ? strlen(c->suffix) : 0;
  if (!strcmp(e->target, c->target) &&
      !strncmp(e->kernel, c->prefix, strlen(c->prefix)) &&
      (!c->suffix || (n >= ns && !strcmp(e->kernel + n - ns, c->suffix))))
    c->n++;
  return 0;
}

/* A compile-only context (sm_90a default target) on a fresh cache in dir. */
static sj_context *compile_ctx(const char *tag, char *dir, size_t size) {
  assert_int_equal(tu_mkdtemp(tag, dir, size), 0);
  sj_config cfg;
  sj_config_init(&cfg);
  cfg.device = SJ_DEVICE_NONE;
  cfg.target = "sm_90a";
  cfg.cache_dir = dir;
  sj_context *ctx = NULL;
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_OK);
  return ctx;
}

static void test_full_matrix_per_family(void **state) {
  (void)state;
  if (sj_nvrtc_version(NULL, NULL) != SJ_OK)
    skip();
  char dir[512];
  sj_context *ctx = compile_ctx("matrix", dir, sizeof dir);

  static const int dims[] = {32, 64, 96, 128, 256};
  static const int causal[] = {0, 1};
  static const sj_dtype dtypes[] = {SJ_DTYPE_FP16, SJ_DTYPE_BF16};
  static const sj_quant_gran quants[] = {SJ_QUANT_PER_BLOCK, SJ_QUANT_PER_WARP,
                                         SJ_QUANT_PER_THREAD};
  static const sj_pv_accum accums[] = {
      SJ_ACCUM_FP32, SJ_ACCUM_FP32_FP32, SJ_ACCUM_FP16_FP32,
      SJ_ACCUM_FP32_FP16, SJ_ACCUM_FP32_FP32_SPLITV, SJ_ACCUM_PV16, SJ_ACCUM_PVI8,
      SJ_ACCUM_PVI8_SPLITV};
  /* Attention kernels each family must produce (docs/kernels.md): the
   * accumulations it offers x 2 dtypes x its head dims x 2 causal modes;
   * one kernel serves every granularity.  (WGMMA: test_spills.) */
  static const struct {
    const char *target;
    sj_family fam;
    const char *prefix;
    int64_t want;
  } cases[] = {
      {"sm_80", SJ_FAMILY_FP16PV, "sj::attn_mma<sj::FP16PV,", 2 * 2 * 5 * 2},
      {"sm_89", SJ_FAMILY_FP8PV, "sj::attn_mma<sj::FP8PV,", 6 * 2 * 5 * 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    sj_warm_request req;
    memset(&req, 0, sizeof req);
    req.targets = &cases[i].target;
    req.n_targets = 1;
    req.head_dims = dims;
    req.n_head_dims = 5;
    req.causal = causal;
    req.n_causal = 2;
    req.dtypes = dtypes;
    req.n_dtypes = 2;
    req.families = &cases[i].fam;
    req.n_families = 1;
    req.quant = quants;
    req.n_quant = 3;
    req.accum = accums;
    req.n_accum = 8;
    req.jobs = 2;
    sj_warm_result r;
    sj_status st = sj_warm(ctx, &req, &r);
    if (st != SJ_OK)
      fail_msg("warm %s: %s", cases[i].target, sj_context_last_error(ctx));
    print_message("%s %s: %lld kernels compiled, %lld cached, %lld "
                  "combinations not offered, %.0f s\n",
                  cases[i].target, sj_family_str(cases[i].fam),
                  (long long)r.compiled, (long long)r.cached,
                  (long long)r.skipped, r.seconds);
    assert_int_equal(r.failed, 0);
    assert_int_equal(r.compiled + r.cached, r.total);
    /* The same matrix for one granularity: the same kernels, all cached. */
    static const sj_quant_gran one[] = {SJ_QUANT_PER_BLOCK};
    sj_warm_request req1 = req;
    req1.quant = one;
    req1.n_quant = 1;
    sj_warm_result r1;
    assert_int_equal(sj_warm(ctx, &req1, &r1), SJ_OK);
    assert_int_equal(r1.total, r.total);
    assert_int_equal(r1.cached, r.total);
    assert_int_equal(r1.compiled, 0);
    attn_count c = {cases[i].target, cases[i].prefix, NULL, 0};
    assert_int_equal(sj_cache_list(ctx, count_attn, &c), SJ_OK);
    assert_int_equal(c.n, cases[i].want);
  }
  /* Every stored image passes the checksum and ELF/target checks. */
  int64_t checked = 0, ok = 0, corrupt = 0;
  assert_int_equal(sj_cache_verify(ctx, &checked, &ok, &corrupt), SJ_OK);
  assert_int_equal(ok, checked);
  assert_int_equal(corrupt, 0);
  sj_context_destroy(ctx);
  tu_rmrf(dir);
}

/* attn_mma's TMA form (runtime/spec.c mma_tma) on sm_90a: every kernel the
 * template has it for (SAGEJIT_TUNE=tma=1: both families, D = 32, 64, 96,
 * 128 and 256, every mode but split V, both dtypes, causal both ways; 140
 * attention kernels, pvi8+splitv's pvi8 body with TMA next to split V's
 * without) compiles, and the default plans' TMA kernels (55 per dtype, the
 * table in spec.c: 8 at D = 32, 19 at D = 64 and 128, all 14 at D = 96 and
 * at D = 256; VH's among them, mma_vh) are among them: a warm without the
 * knob finds them cached. */
static void test_tma_kernels_compile(void **state) {
  (void)state;
  if (sj_nvrtc_version(NULL, NULL) != SJ_OK)
    skip();
  char dir[512];
  sj_context *ctx = compile_ctx("tma", dir, sizeof dir);
  static const int dims[] = {32, 64, 96, 128, 256}, causal[] = {0, 1};
  static const sj_dtype dtypes[] = {SJ_DTYPE_FP16, SJ_DTYPE_BF16};
  static const sj_quant_gran quants[] = {SJ_QUANT_PER_THREAD};
  static const sj_family fams[] = {SJ_FAMILY_FP16PV, SJ_FAMILY_FP8PV};
  static const sj_pv_accum accums[] = {SJ_ACCUM_FP32,      SJ_ACCUM_FP16_FP32,
                                       SJ_ACCUM_FP32_FP16, SJ_ACCUM_FP32_FP32,
                                       SJ_ACCUM_PVI8,      SJ_ACCUM_PVI8_SPLITV};
  const char *target = "sm_90a";
  sj_warm_request req;
  memset(&req, 0, sizeof req);
  req.targets = &target;
  req.n_targets = 1;
  req.head_dims = dims;
  req.n_head_dims = 5;
  req.causal = causal;
  req.n_causal = 2;
  req.dtypes = dtypes;
  req.n_dtypes = 2;
  req.families = fams;
  req.n_families = 2;
  req.quant = quants;
  req.n_quant = 1;
  req.accum = accums;
  req.n_accum = 6;
  req.jobs = 2;
  setenv("SAGEJIT_TUNE", "tma=1", 1);
  sj_warm_result r;
  sj_status st = sj_warm(ctx, &req, &r);
  unsetenv("SAGEJIT_TUNE");
  if (st != SJ_OK)
    fail_msg("warm: %s", sj_context_last_error(ctx));
  print_message("TMA forms: %lld kernels compiled in %.0f s\n", (long long)r.compiled,
                r.seconds);
  assert_int_equal(r.failed, 0);
  attn_count all = {target, "sj::attn_mma<", ",true>", 0};
  assert_int_equal(sj_cache_list(ctx, count_attn, &all), SJ_OK);
  assert_int_equal(all.n, 2 * 5 * 2 * (2 + 5));
  /* The default plans: 55 TMA kernels per dtype, all cached now (with
   * VH, mma_vh, the same names as forced: its rule does not look at the
   * knob), and the 15 per dtype without TMA (6 at D = 32, 9 at D = 64 and
   * 128) compiled (2 x 5 x 2 x 7 = 140 in all). */
  sj_warm_result r0;
  assert_int_equal(sj_warm(ctx, &req, &r0), SJ_OK);
  assert_int_equal(r0.failed, 0);
  attn_count tma = {target, "sj::attn_mma<", ",true>", 0};
  assert_int_equal(sj_cache_list(ctx, count_attn, &tma), SJ_OK);
  assert_int_equal(tma.n, 140);
  attn_count any = {target, "sj::attn_mma<", NULL, 0};
  assert_int_equal(sj_cache_list(ctx, count_attn, &any), SJ_OK);
  assert_int_equal(any.n, 140 + 2 * 15);
  assert_int_equal(r0.compiled, 2 * 15);
  sj_context_destroy(ctx);
  tu_rmrf(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full_matrix_per_family),
      cmocka_unit_test(test_tma_kernels_compile),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
