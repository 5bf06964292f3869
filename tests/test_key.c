/*
 * test_key.c -- the cache key (cache/key.h).
 *
 * Expected bytes are written out by hand from the layout documented in
 * key.h, and hashes come from libxxhash directly, never from key.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "key.h"

/* The canonical string of base_input(), byte for byte. */
static const uint8_t base_canonical[] = {
    'S', 'J', 'K', '1', 1, 0, 0, 0,
    /* tag 1: library version */
    1, 5, 0, 0, 0, '0', '.', '1', '.', '0',
    /* tag 2: template hash */
    2, 16, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
    /* tag 3: name expression */
    3, 12, 0, 0, 0, 's', 'j', ':', ':', 'a', 't', 't', 'n', '<', '6', '4', '>',
    /* tag 4: NVRTC 13.0 */
    4, 8, 0, 0, 0, 13, 0, 0, 0, 0, 0, 0, 0,
    /* tag 5: the first option */
    5, 3, 0, 0, 0, '-', 'O', '3',
    /* tag 5: the second option */
    5, 11, 0, 0, 0, '-', '-', 's', 't', 'd', '=', 'c', '+', '+', '1', '7',
    /* tag 6: target */
    6, 6, 0, 0, 0, 's', 'm', '_', '9', '0', 'a'};

/* The key of base_input().  Pinned: it changes only when the canonical
 * layout changes, which is a deliberate event -- bump SJ_KEY_SCHEMA, update
 * this literal and base_canonical, and say so in docs/cache.md (every
 * cached kernel is then compiled again). */
static const char pinned_hex[] = "cb0de3192bffe236601314710922aabe";

static const char *const base_options[] = {"-O3", "--std=c++17"};

static sj_key_input base_input(void) {
  sj_key_input in;
  memset(&in, 0, sizeof in);
  in.library_version = "0.1.0";
  for (int i = 0; i < 16; i++)
    in.template_hash[i] = (uint8_t)i;
  in.name_expr = "sj::attn<64>";
  in.nvrtc_major = 13;
  in.nvrtc_minor = 0;
  in.options = base_options;
  in.n_options = 2;
  in.target = "sm_90a";
  return in;
}

static void make(const sj_key_input *in, sj_key *k) {
  assert_int_equal(sj_key_make(in, k), 0);
}

static void xxh_be(const void *p, size_t n, uint8_t out[16]) {
  XXH128_hash_t h = XXH3_128bits(p, n);
  for (int i = 0; i < 8; i++) {
    out[i] = (uint8_t)(h.high64 >> (56 - 8 * i));
    out[8 + i] = (uint8_t)(h.low64 >> (56 - 8 * i));
  }
}

static void test_canonical_layout(void **state) {
  (void)state;
  sj_key_input in = base_input();
  sj_key k;
  make(&in, &k);
  assert_int_equal(k.canonical_len, sizeof base_canonical);
  assert_memory_equal(k.canonical, base_canonical, sizeof base_canonical);
  uint8_t h[16];
  xxh_be(base_canonical, sizeof base_canonical, h);
  assert_memory_equal(k.bytes, h, 16);
  sj_key_free(&k);
}

static void test_pinned_key(void **state) {
  (void)state;
  sj_key_input in = base_input();
  sj_key k;
  make(&in, &k);
  char hex[SJ_KEY_HEX];
  sj_key_hex(k.bytes, hex);
  assert_string_equal(hex, pinned_hex);
  sj_key_free(&k);
}

static void test_equal_inputs_equal_keys(void **state) {
  (void)state;
  /* same values from different storage */
  char lib[] = "0.1.0", name[] = "sj::attn<64>", target[] = "sm_90a";
  char o1[] = "-O3", o2[] = "--std=c++17";
  const char *opts[] = {o1, o2};
  sj_key_input a = base_input(), b = base_input();
  b.library_version = lib;
  b.name_expr = name;
  b.target = target;
  b.options = opts;
  sj_key ka, kb;
  make(&a, &ka);
  make(&b, &kb);
  assert_memory_equal(ka.bytes, kb.bytes, 16);
  assert_int_equal(ka.canonical_len, kb.canonical_len);
  assert_memory_equal(ka.canonical, kb.canonical, ka.canonical_len);
  sj_key_free(&ka);
  sj_key_free(&kb);
}

/* Every field, changed alone, changes the key (and no two variants
 * collide with each other). */
static void test_every_field_matters(void **state) {
  (void)state;
  enum { N = 12 };
  sj_key keys[N];
  sj_key_input v[N];
  const char *one_opt[] = {"-O3"};
  const char *three_opts[] = {"-O3", "--std=c++17", "-G"};
  const char *changed_opt[] = {"-O3", "--std=c++20"};
  const char *joined_opt[] = {"-O3--std=c++17"};
  for (int i = 0; i < N; i++)
    v[i] = base_input();
  v[1].library_version = "0.1.1";
  v[2].template_hash[15] ^= 1;
  v[3].name_expr = "sj::attn<128>";
  v[4].nvrtc_major = 12;
  v[5].nvrtc_minor = 1;
  v[6].options = one_opt;
  v[6].n_options = 1;
  v[7].options = three_opts;
  v[7].n_options = 3;
  v[8].options = changed_opt;
  v[9].target = "sm_90";
  v[10].options = joined_opt; /* same bytes, different split */
  v[10].n_options = 1;
  v[11].n_options = 0;
  for (int i = 0; i < N; i++)
    make(&v[i], &keys[i]);
  for (int i = 0; i < N; i++)
    for (int j = i + 1; j < N; j++) {
      if (memcmp(keys[i].bytes, keys[j].bytes, 16) == 0)
        fail_msg("variants %d and %d give the same key", i, j);
    }
  for (int i = 0; i < N; i++)
    sj_key_free(&keys[i]);
}

static void test_option_order_matters(void **state) {
  (void)state;
  const char *ab[] = {"-DA=1", "-DB=2"}, *ba[] = {"-DB=2", "-DA=1"};
  sj_key_input a = base_input(), b = base_input();
  a.options = ab;
  b.options = ba;
  sj_key ka, kb;
  make(&a, &ka);
  make(&b, &kb);
  assert_memory_not_equal(ka.bytes, kb.bytes, 16);
  sj_key_free(&ka);
  sj_key_free(&kb);
}

/* A child process (fresh address space, no shared state) computes the same
 * key for the same input. */
static void test_same_key_across_processes(void **state) {
  (void)state;
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fd[0]);
    sj_key_input in = base_input();
    sj_key k;
    char hex[SJ_KEY_HEX];
    if (sj_key_make(&in, &k) != 0)
      _exit(1);
    sj_key_hex(k.bytes, hex);
    ssize_t w = write(fd[1], hex, 32);
    _exit(w == 32 ? 0 : 2);
  }
  close(fd[1]);
  char got[SJ_KEY_HEX] = {0};
  size_t n = 0;
  while (n < 32) {
    ssize_t r = read(fd[0], got + n, 32 - n);
    if (r <= 0)
      break;
    n += (size_t)r;
  }
  close(fd[0]);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  sj_key_input in = base_input();
  sj_key k;
  make(&in, &k);
  char hex[SJ_KEY_HEX];
  sj_key_hex(k.bytes, hex);
  assert_string_equal(got, hex);
  sj_key_free(&k);
}

static void test_bad_input(void **state) {
  (void)state;
  sj_key k;
  sj_key_input in = base_input();
  in.target = NULL;
  assert_int_equal(sj_key_make(&in, &k), -1);
  assert_null(k.canonical);
  in = base_input();
  in.library_version = NULL;
  assert_int_equal(sj_key_make(&in, &k), -1);
  in = base_input();
  in.name_expr = NULL;
  assert_int_equal(sj_key_make(&in, &k), -1);
  const char *holes[] = {"-O3", NULL};
  in = base_input();
  in.options = holes;
  assert_int_equal(sj_key_make(&in, &k), -1);
  in = base_input();
  in.options = NULL;
  assert_int_equal(sj_key_make(&in, &k), -1);
  in = base_input();
  in.nvrtc_major = -1;
  assert_int_equal(sj_key_make(&in, &k), -1);
  assert_int_equal(sj_key_make(NULL, &k), -1);
  sj_key_free(&k); /* harmless on a failed key */
  sj_key_free(NULL);
}

static void test_hash128_known_answers(void **state) {
  (void)state;
  /* published XXH3-128 of "" (seed 0), in canonical big-endian order */
  static const uint8_t empty[16] = {0x99, 0xaa, 0x06, 0xd3, 0x01, 0x47,
                                    0x98, 0xd8, 0x60, 0x01, 0xc3, 0x24,
                                    0x46, 0x8d, 0x49, 0x7f};
  uint8_t h[16], want[16];
  sj_hash128("", 0, h);
  assert_memory_equal(h, empty, 16);
  sj_hash128(NULL, 0, h);
  assert_memory_equal(h, empty, 16);
  uint8_t big[3000];
  for (size_t i = 0; i < sizeof big; i++)
    big[i] = (uint8_t)(i * 31 + 7);
  sj_hash128(big, sizeof big, h);
  xxh_be(big, sizeof big, want);
  assert_memory_equal(h, want, 16);
}

static void test_hex(void **state) {
  (void)state;
  uint8_t b[16];
  for (int i = 0; i < 16; i++)
    b[i] = (uint8_t)(i * 17);
  char hex[SJ_KEY_HEX];
  sj_key_hex(b, hex);
  assert_string_equal(hex, "00112233445566778899aabbccddeeff");
}

static void test_canonical_target_parse(void **state) {
  (void)state;
  char t[32];
  assert_int_equal(sj_key_canonical_target(base_canonical,
                                           sizeof base_canonical, t, sizeof t),
                   0);
  assert_string_equal(t, "sm_90a");
  /* too small a buffer */
  assert_int_equal(
      sj_key_canonical_target(base_canonical, sizeof base_canonical, t, 6), -1);
  /* truncated anywhere: malformed */
  for (size_t n = 0; n < sizeof base_canonical; n++)
    assert_int_equal(sj_key_canonical_target(base_canonical, n, t, sizeof t),
                     -1);
  uint8_t c[sizeof base_canonical + 6];
  /* a trailing field after the target */
  memcpy(c, base_canonical, sizeof base_canonical);
  memcpy(c + sizeof base_canonical, "\x05\x01\x00\x00\x00x", 6);
  assert_int_equal(sj_key_canonical_target(c, sizeof c, t, sizeof t), -1);
  /* wrong magic, wrong schema */
  memcpy(c, base_canonical, sizeof base_canonical);
  c[3] = '2';
  assert_int_equal(
      sj_key_canonical_target(c, sizeof base_canonical, t, sizeof t), -1);
  memcpy(c, base_canonical, sizeof base_canonical);
  c[4] = 2;
  assert_int_equal(
      sj_key_canonical_target(c, sizeof base_canonical, t, sizeof t), -1);
  /* a key without options is well formed too */
  sj_key_input in = base_input();
  in.n_options = 0;
  sj_key k;
  make(&in, &k);
  assert_int_equal(
      sj_key_canonical_target(k.canonical, k.canonical_len, t, sizeof t), 0);
  sj_key_free(&k);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_canonical_layout),
      cmocka_unit_test(test_pinned_key),
      cmocka_unit_test(test_equal_inputs_equal_keys),
      cmocka_unit_test(test_every_field_matters),
      cmocka_unit_test(test_option_order_matters),
      cmocka_unit_test(test_same_key_across_processes),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_hash128_known_answers),
      cmocka_unit_test(test_hex),
      cmocka_unit_test(test_canonical_target_parse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
