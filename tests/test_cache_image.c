/*
 * test_cache_image.c -- sj_image_check: CUDA ELF headers (both e_flags
 * layouts), bounds, PTX .target lines, and real NVRTC output for every
 * target sagejit compiles for (skipped without NVRTC).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache.h"
#include "test_cache_util.h"

static const char *const targets[] = {
    "sm_80",   "sm_86",   "sm_87",   "sm_89",   "sm_90a",
    "sm_100a", "sm_103a", "sm_110a", "sm_120a", "sm_121a"};
#define N_TARGETS (sizeof targets / sizeof *targets)

static unsigned sm_of(const char *t) {
  return (unsigned)strtoul(strchr(t, '_') + 1, NULL, 10);
}

static int check(const void *p, size_t n, const char *target) {
  return sj_image_check(p, n, SJ_IMAGE_CUBIN, target);
}

/* Accepted for its own SM, rejected for every other. */
static void expect_only(const uint8_t *img, size_t n, const char *own) {
  for (size_t j = 0; j < N_TARGETS; j++) {
    int want = sm_of(targets[j]) == sm_of(own) ? 0 : -1;
    if (check(img, n, targets[j]) != want)
      fail_msg("image for %s checked against %s: expected %d", own, targets[j],
               want);
  }
}

static void test_fake_cubins_both_layouts(void **state) {
  (void)state;
  for (size_t i = 0; i < N_TARGETS; i++) {
    for (int abi = 7; abi <= 8; abi++) {
      size_t n;
      uint8_t *img = tcu_fake_cubin(sm_of(targets[i]), abi, 0, 300, i, &n);
      expect_only(img, n, targets[i]);
      /* the plain and 'f' names of the same SM too */
      char plain[16];
      snprintf(plain, sizeof plain, "sm_%u", sm_of(targets[i]));
      assert_int_equal(check(img, n, plain), 0);
      free(img);
    }
  }
}

static void test_accelerator_flag(void **state) {
  (void)state;
  for (int abi = 7; abi <= 8; abi++) {
    size_t n;
    uint8_t *img = tcu_fake_cubin(90, abi, 1, 100, 1, &n);
    assert_int_equal(check(img, n, "sm_90a"), 0);
    assert_int_equal(check(img, n, "sm_90"), -1);
    assert_int_equal(check(img, n, "sm_90f"), -1);
    free(img);
    img = tcu_fake_cubin(120, abi, 1, 100, 1, &n);
    assert_int_equal(check(img, n, "sm_120a"), 0);
    assert_int_equal(check(img, n, "sm_121a"), -1);
    assert_int_equal(check(img, n, "sm_120"), -1);
    free(img);
  }
}

/* Writes a little-endian value into a header field. */
static void poke(uint8_t *p, size_t off, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++)
    p[off + (size_t)i] = (uint8_t)(v >> (8 * i));
}

static void test_cubin_bounds_and_identity(void **state) {
  (void)state;
  size_t n;
  uint8_t *good = tcu_fake_cubin(90, 8, 0, 200, 3, &n);
  uint8_t *img = malloc(n);
  assert_int_equal(check(good, n, "sm_90a"), 0);
  /* short images: below the header, and without the section table */
  assert_int_equal(check(good, 63, "sm_90a"), -1);
  assert_int_equal(check(good, n - 1, "sm_90a"), -1);
  assert_int_equal(check(good, 0, "sm_90a"), -1);
  assert_int_equal(check(NULL, n, "sm_90a"), -1);
  struct {
    size_t off;
    uint64_t v;
    int bytes;
  } edits[] = {
      {0, 0x7e, 1},             /* magic */
      {4, 1, 1},                /* ELFCLASS32 */
      {5, 2, 1},                /* big-endian */
      {18, 62, 2},              /* EM_X86_64 */
      {40, UINT64_MAX - 10, 8}, /* e_shoff far out (overflow) */
      {40, 32, 8},              /* e_shoff inside the header */
      {60, 0, 2},               /* no sections */
      {60, 0xffff, 2},          /* too many sections */
      {58, 40, 2},              /* e_shentsize */
      {62, 2, 2},               /* e_shstrndx out of range */
      {52, 52, 2},              /* e_ehsize */
      {56, 3, 2},               /* program headers past the end */
  };
  for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
    memcpy(img, good, n);
    poke(img, edits[i].off, edits[i].v, edits[i].bytes);
    if (edits[i].off == 56)
      poke(img, 32, n - 56, 8); /* e_phoff: 3 * 56 bytes do not fit */
    if (check(img, n, "sm_90a") != -1)
      fail_msg("edit %zu (offset %zu) was accepted", i, edits[i].off);
  }
  /* a program header table that fits is fine */
  memcpy(img, good, n);
  poke(img, 56, 1, 2);
  poke(img, 54, 56, 2);
  poke(img, 32, 64, 8);
  assert_int_equal(check(img, n, "sm_90a"), 0);
  /* a cubin is never good for a PTX target */
  assert_int_equal(check(good, n, "compute_90a"), -1);
  /* malformed target names */
  const char *bad[] = {"",   "sm_",       "sm90",  "sm_x",
                       "90", "sm_90abcd", "SM_90", "sm_90 "};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    assert_int_equal(check(good, n, bad[i]), -1);
  assert_int_equal(check(good, n, NULL), -1);
  assert_int_equal(sj_image_check(good, n, (sj_image_kind)7, "sm_90a"), -1);
  free(img);
  free(good);
}

static int ptx(const char *text, const char *target) {
  return sj_image_check(text, strlen(text), SJ_IMAGE_PTX, target);
}

static void test_ptx(void **state) {
  (void)state;
  const char *p90a = ".version 9.0\n.target sm_90a\n.address_size 64\n";
  assert_int_equal(ptx(p90a, "compute_90a"), 0);
  assert_int_equal(ptx(p90a, "sm_90a"), 0);
  assert_int_equal(ptx(p90a, "compute_90"), -1);
  assert_int_equal(ptx(p90a, "compute_80"), -1);
  assert_int_equal(ptx(p90a, "compute_100a"), -1);
  const char *p120 = "//\n// c\n//\n\n.version 9.0\n\t.target  sm_120, debug"
                     "\n.address_size 64\n";
  assert_int_equal(ptx(p120, "compute_120"), 0);
  assert_int_equal(ptx(p120, "compute_12"), -1);
  assert_int_equal(ptx(p120, "compute_121"), -1);
  /* only a real directive counts, not a comment */
  const char *commented = "// .target sm_80\n.version 9.0\n.target sm_90\n";
  assert_int_equal(ptx(commented, "compute_90"), 0);
  assert_int_equal(ptx(commented, "compute_80"), -1);
  assert_int_equal(ptx(".version 9.0\n.address_size 64\n", "compute_90"), -1);
  assert_int_equal(ptx(".targets sm_90\n", "compute_90"), -1);
  assert_int_equal(ptx(".target\n", "compute_90"), -1);
  assert_int_equal(ptx(".target sm_90", "compute_90"), 0); /* no newline */
  /* a NUL inside the given size */
  char nul[] = ".version 9.0\n.target sm_90\n\0junk\n";
  assert_int_equal(
      sj_image_check(nul, sizeof nul - 1, SJ_IMAGE_PTX, "compute_90"), -1);
  assert_int_equal(sj_image_check(nul, 27, SJ_IMAGE_PTX, "compute_90"), 0);
}

/* The headers NVRTC really writes. */
static void test_real_nvrtc_cubins(void **state) {
  (void)state;
  size_t n;
  uint8_t *probe = tcu_nvrtc_compile("sm_80", &n);
  if (!probe)
    skip();
  free(probe);
  for (size_t i = 0; i < N_TARGETS; i++) {
    uint8_t *img = tcu_nvrtc_compile(targets[i], &n);
    if (!img)
      fail_msg("NVRTC could not compile for %s", targets[i]);
    expect_only(img, n, targets[i]);
    assert_int_equal(check(img, 63, targets[i]), -1);
    assert_int_equal(check(img, n / 2, targets[i]), -1); /* tables cut */
    free(img);
  }
  const char *ptx_targets[] = {"compute_80", "compute_90a", "compute_120"};
  for (size_t i = 0; i < 3; i++) {
    uint8_t *img = tcu_nvrtc_compile(ptx_targets[i], &n);
    assert_non_null(img);
    assert_int_equal(sj_image_check(img, n, SJ_IMAGE_PTX, ptx_targets[i]), 0);
    assert_int_equal(sj_image_check(img, n, SJ_IMAGE_PTX, "compute_89"), -1);
    assert_int_equal(sj_image_check(img, n, SJ_IMAGE_CUBIN, "sm_80"), -1);
    free(img);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fake_cubins_both_layouts),
      cmocka_unit_test(test_accelerator_flag),
      cmocka_unit_test(test_cubin_bounds_and_identity),
      cmocka_unit_test(test_ptx),
      cmocka_unit_test(test_real_nvrtc_cubins),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
