/*
 * fuzz_cache_import.c -- libFuzzer target: sj_cache_db_import of arbitrary
 * bytes into a fresh cache.
 *
 * Each input is written to a file and imported into a newly created cache.
 * Besides "no crash, no leak, no undefined behaviour", it checks the
 * import contract: a file is merged whole or not at all, and whatever is
 * merged passes verify.
 *
 * With SJ_FUZZ_SEED_DIR set, LLVMFuzzerInitialize first writes a valid
 * export (cubin and PTX rows) there, so the fuzzer starts from a real file
 * instead of having to discover the SQLite format from nothing.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "key.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_work[4096];

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    char p[8192];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

/* ---- a valid seed ---- */

static void put16(uint8_t *p, unsigned v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

/* A minimal CUDA 13 style cubin for sm (ELF64, EM_CUDA, one section). */
static uint8_t *seed_cubin(unsigned sm, size_t *size) {
  size_t n = 64 + 64 + 2 * 64;
  uint8_t *p = calloc(1, n);
  if (!p)
    return NULL;
  memcpy(p, "\177ELF\2\1\1\x41\x08", 9);
  put16(p + 16, 2);
  put16(p + 18, 190);
  p[20] = 1;
  p[40] = 128; /* e_shoff */
  uint32_t flags = 0x06000000u | sm << 8 | 0x04u;
  memcpy(p + 48, &flags, 4);
  put16(p + 52, 64);
  put16(p + 54, 56);
  put16(p + 58, 64);
  put16(p + 60, 2);
  for (size_t i = 64; i < 128; i++)
    p[i] = (uint8_t)(i * 13);
  *size = n;
  return p;
}

static void seed_row(sj_cache *c, const char *name, const char *target,
                     const void *image, size_t size, sj_image_kind kind) {
  static const char *const opts[] = {"-O3"};
  sj_key_input in;
  memset(&in, 0, sizeof in);
  in.library_version = "0.1.0";
  in.name_expr = name;
  in.nvrtc_major = 13;
  in.options = opts;
  in.n_options = 1;
  in.target = target;
  sj_key k;
  if (sj_key_make(&in, &k) != 0)
    return;
  sj_cache_row r;
  memset(&r, 0, sizeof r);
  memcpy(r.key, k.bytes, SJ_KEY_BYTES);
  r.canonical = k.canonical;
  r.canonical_len = k.canonical_len;
  r.target = target;
  r.kernel_name = name;
  r.lowered_name = "k";
  r.image = image;
  r.image_size = size;
  r.kind = kind;
  sj_cache_put(c, &r);
  sj_key_free(&k);
}

static void write_seed(const char *seed_dir) {
  char dir[4200], path[4300];
  snprintf(dir, sizeof dir, "%s/seed-src", g_work);
  snprintf(path, sizeof path, "%s/seed-valid.sjcache", seed_dir);
  sj_cache_opts o;
  memset(&o, 0, sizeof o);
  o.dir = dir;
  sj_cache *c = sj_cache_open(&o);
  size_t n;
  uint8_t *cubin = seed_cubin(90, &n);
  if (cubin) {
    seed_row(c, "a<1>", "sm_90a", cubin, n, SJ_IMAGE_CUBIN);
    free(cubin);
  }
  cubin = seed_cubin(80, &n);
  if (cubin) {
    seed_row(c, "a<2>", "sm_80", cubin, n, SJ_IMAGE_CUBIN);
    free(cubin);
  }
  static const char ptx[] = ".version 9.0\n.target sm_120\n.address_size 64\n";
  seed_row(c, "a<3>", "compute_120", ptx, sizeof ptx - 1, SJ_IMAGE_PTX);
  int64_t exported;
  sj_cache_db_export(c, path, NULL, 0, &exported); /* -2 if already there */
  sj_cache_close(c);
  remove_tree(dir);
}

static void clean_work(void);

static void remove_work(void) {
  clean_work();
  rmdir(g_work);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *tmp = getenv("TMPDIR");
  snprintf(g_work, sizeof g_work, "%s/sjfuzz-XXXXXX",
           tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(g_work))
    abort();
  atexit(remove_work);
  const char *seed = getenv("SJ_FUZZ_SEED_DIR");
  if (seed && *seed) {
    mkdir(seed, 0700);
    write_seed(seed);
  }
  return 0;
}

/* ---- one input ---- */

static void clean_work(void) {
  char p[4300];
  static const char *const names[] = {"in.db", "in.db-wal", "in.db-shm",
                                      "in.db-journal"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    snprintf(p, sizeof p, "%s/%s", g_work, names[i]);
    unlink(p);
  }
  snprintf(p, sizeof p, "%s/cache", g_work);
  remove_tree(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char in[4300], dir[4300];
  snprintf(in, sizeof in, "%s/in.db", g_work);
  snprintf(dir, sizeof dir, "%s/cache", g_work);
  clean_work();
  int fd = open(in, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    abort();
  if (size && write(fd, data, size) != (ssize_t)size)
    abort();
  close(fd);

  sj_cache_opts o;
  memset(&o, 0, sizeof o);
  o.dir = dir;
  sj_cache *c = sj_cache_open(&o);
  if (!c || sj_cache_get_mode(c) != SJ_CACHE_MODE_READWRITE)
    abort();
  int64_t imported = -1, skipped = -1;
  int rc = sj_cache_db_import(c, in, &imported, &skipped);
  sj_cache_stat st;
  if (sj_cache_stat_get(c, &st) != 0)
    abort();
  if (rc != 0 && (imported != 0 || skipped != 0 || st.entries != 0))
    abort(); /* a rejected file must leave nothing behind */
  if (rc == 0) {
    int64_t checked, ok, bad;
    if (st.entries != imported || sj_cache_db_verify(c, &checked, &ok, &bad))
      abort();
    if (bad != 0 || checked != imported)
      abort(); /* import merged a row that verify refuses */
  }
  sj_cache_close(c);
  clean_work();
  return 0;
}
