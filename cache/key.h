/*
 * key.h -- the cache key of a compiled kernel.
 *
 * The key is XXH3-128 over a canonical byte string of everything that shapes
 * the binary.  The canonical string is versioned (SJ_KEY_SCHEMA); changing its
 * layout is a deliberate event: bump SJ_KEY_SCHEMA and the pinned key in
 * tests/test_key.c, and say so in docs/cache.md.
 *
 * Canonical layout (all integers little-endian, no padding):
 *   "SJK1"                                  4 magic bytes
 *   u32 schema                              SJ_KEY_SCHEMA
 *   then each field as: u8 tag, u32 length, bytes
 *     tag 1: library version string         e.g. "0.1.0"
 *     tag 2: template hash                  16 bytes
 *     tag 3: name expression                e.g. "sj::attn_mma<...>"
 *     tag 4: NVRTC version                  8 bytes: u32 major, u32 minor
 *     tag 5: option (one field per option, in order)
 *     tag 6: target                         e.g. "sm_90a"
 */
#ifndef SJ_CACHE_KEY_H
#define SJ_CACHE_KEY_H

#include <stddef.h>
#include <stdint.h>

#define SJ_KEY_SCHEMA 1u
#define SJ_KEY_BYTES 16
#define SJ_KEY_HEX 33 /* 32 hex digits + NUL */

typedef struct sj_key_input {
  const char *library_version;
  uint8_t template_hash[16];
  const char *name_expr;
  int nvrtc_major, nvrtc_minor;
  const char *const *options;
  size_t n_options;
  const char *target;
} sj_key_input;

typedef struct sj_key {
  uint8_t bytes[SJ_KEY_BYTES];
  uint8_t *canonical; /* malloc'ed canonical string */
  size_t canonical_len;
} sj_key;

/* Builds the canonical string and its hash.  Returns 0, or -1 on OOM/bad
 * input (NULL strings).  Free with sj_key_free. */
int sj_key_make(const sj_key_input *in, sj_key *out);
void sj_key_free(sj_key *k);
/* Lower-case hex of 16 bytes into out[33]. */
void sj_key_hex(const uint8_t bytes[SJ_KEY_BYTES], char out[SJ_KEY_HEX]);
/* XXH3-128 of data, written big-endian (high64 then low64) into out. */
void sj_hash128(const void *data, size_t len, uint8_t out[16]);
/* Checks that canonical is a well-formed canonical string of this
 * SJ_KEY_SCHEMA and, if buf is not NULL, copies its target field into buf
 * (NUL-terminated).  Returns 0, or -1 if malformed or buf is too small. */
int sj_key_canonical_target(const uint8_t *canonical, size_t len, char *buf,
                            size_t size);

#endif
