/*
 * test_cache_util.h -- helpers shared by the cache test suites.
 *
 * Fake images are built here from the formats as documented (ELF64 header
 * layout, CUDA e_flags as found in cache_image.c's comment, PTX text), not
 * with the code under test, so a check that drifts from the format fails.
 */
#ifndef SJ_TEST_CACHE_UTIL_H
#define SJ_TEST_CACHE_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache.h"
#include "key.h"

/* ---- log capture ---- */
typedef struct tcu_log {
  int n[5]; /* by level: [SJ_CACHE_LOG_WARN] etc. */
  char last[1024];
} tcu_log;
void tcu_log_fn(void *user, int level, const char *line);
/* Options for dir with the capture log (log may be NULL: silent). */
void tcu_opts(sj_cache_opts *o, const char *dir, tcu_log *log);

/* ---- keys and rows ---- */
/* A key for (name, target) with fixed other fields. */
void tcu_key(sj_key *k, const char *name, const char *target);
void tcu_row(sj_cache_row *r, const sj_key *k, const char *target,
             const void *image, size_t size, sj_image_kind kind);

/* ---- images ---- */
/* ELF64 CUDA image for sm (e.g. 90), laid out like a cubin of the given ABI
 * version (8: CUDA 13 layout, 7: older), with payload pseudo-random bytes
 * from seed.  accel sets the 'a' flag of that layout.  malloc'ed. */
uint8_t *tcu_fake_cubin(unsigned sm, int abi, int accel, size_t payload,
                        uint64_t seed, size_t *size);
/* Fake cubin for a target string "sm_90a" (ABI 8). */
uint8_t *tcu_fake_cubin_for(const char *target, uint64_t seed, size_t *size);
/* PTX text (no NUL counted in size) with ".target <ptx_target>". */
char *tcu_fake_ptx(const char *ptx_target, uint64_t seed, size_t *size);
/* Compiles a tiny kernel with NVRTC (dlopen'ed) for target ("sm_80" gives a
 * cubin, "compute_80" PTX).  NULL if NVRTC is unavailable or fails. */
uint8_t *tcu_nvrtc_compile(const char *target, size_t *size);
/* XXH3-128 big-endian, straight from libxxhash. */
void tcu_xxh128(const void *p, size_t n, uint8_t out[16]);

/* ---- raw SQL on a cache file (a separate connection) ---- */
int tcu_sql(const char *db, const char *sql);
/* Runs sql with ?1 bound to blob a (may be NULL) and ?2 to blob b. */
int tcu_sql_blobs(const char *db, const char *sql, const void *a, size_t na,
                  const void *b, size_t nb);
int64_t tcu_sql_int(const char *db, const char *sql); /* -1 on error */
/* First column of the first row as malloc'ed text (NULL on error). */
char *tcu_sql_text(const char *db, const char *sql);
/* First column of the first row whose ?1 is blob a, as malloc'ed bytes. */
void *tcu_sql_blob(const char *db, const char *sql, const void *a, size_t na,
                   size_t *size);

/* ---- files and processes ---- */
/* path = dir/kernels.db */
void tcu_db_path(char *buf, size_t size, const char *dir);
/* Runs fn(arg) in a child process as uid/gid (after dropping root); returns
 * its exit status (fn's return value), 128+signal, or -1. */
int tcu_run_as(uid_t uid, gid_t gid, int (*fn)(void *), void *arg);
/* Number of entries in dir whose name starts with prefix. */
int tcu_count_prefix(const char *dir, const char *prefix);
/* The path of the first entry of dir whose name starts with prefix. */
int tcu_find_prefix(const char *dir, const char *prefix, char *buf,
                    size_t size);
/* Whole file hash (tcu_xxh128); -1 if unreadable. */
int tcu_file_hash(const char *path, uint8_t out[16]);

#endif
