/* testutil.h -- small helpers shared by the test suites. */
#ifndef SJ_TESTUTIL_H
#define SJ_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Creates a fresh empty directory under $TMPDIR (or /tmp) named after tag
 * and writes its path into buf.  Returns 0 or -1. */
int tu_mkdtemp(const char *tag, char *buf, size_t size);
/* rm -rf path (no symlink following).  Returns 0 or -1. */
int tu_rmrf(const char *path);
/* Runs argv (argv[0] a path) with extra environment entries "K=V" (NULL-
 * terminated, may be NULL), captures stdout and stderr (malloc'ed,
 * NUL-terminated; pass NULL to discard) and returns the exit status, or
 * -1 on spawn failure, or 128+signal.  timeout_s > 0 kills the child after
 * that many seconds (returns 124). */
int tu_run(char *const argv[], char *const extra_env[], char **out, char **err,
           int timeout_s);
/* Reads a whole file; malloc'ed, NUL-terminated; NULL on error. */
char *tu_read_file(const char *path, size_t *len);
int tu_write_file(const char *path, const void *data, size_t len);
/* The last non-empty line of s, copied into buf. */
void tu_last_line(const char *s, char *buf, size_t size);
/* Deterministic PRNG (splitmix64). */
uint64_t tu_rand_u64(uint64_t *state);
double tu_rand_uniform(uint64_t *state); /* [0, 1) */
double tu_rand_normal(uint64_t *state);
/* fp16 / bf16 <-> float on the host, round to nearest even. */
uint16_t tu_f32_to_f16(float f);
float tu_f16_to_f32(uint16_t h);
uint16_t tu_f32_to_bf16(float f);
float tu_bf16_to_f32(uint16_t h);
/* 1 when a CUDA device is usable (driver loads, >= 1 device). */
int tu_have_gpu(void);

#endif
