/*
 * key.c -- the cache key of a compiled kernel (see key.h for the layout).
 *
 * The canonical string is built in two passes: the first measures, the
 * second writes, so there is exactly one allocation and no realloc dance.
 * The key is XXH3-128 of the canonical string, written big-endian (high 64
 * bits first, then low 64 bits), which is also XXH128_canonical_t's order.
 */
#include "key.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

enum {
  TAG_LIBRARY = 1,
  TAG_TEMPLATE = 2,
  TAG_NAME = 3,
  TAG_NVRTC = 4,
  TAG_OPTION = 5,
  TAG_TARGET = 6
};

static const uint8_t key_magic[4] = {'S', 'J', 'K', '1'};

/* A writer that only counts when buf is NULL. */
typedef struct writer {
  uint8_t *buf;
  size_t len;
} writer;

static void put_bytes(writer *w, const void *p, size_t n) {
  if (w->buf && n)
    memcpy(w->buf + w->len, p, n);
  w->len += n;
}

static void put_u32(writer *w, uint32_t v) {
  uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
                  (uint8_t)(v >> 24)};
  put_bytes(w, b, 4);
}

static void put_field(writer *w, uint8_t tag, const void *p, size_t n) {
  put_bytes(w, &tag, 1);
  put_u32(w, (uint32_t)n);
  put_bytes(w, p, n);
}

static void put_string(writer *w, uint8_t tag, const char *s) {
  put_field(w, tag, s, strlen(s));
}

static void write_canonical(writer *w, const sj_key_input *in) {
  uint8_t ver[8];
  writer vw = {ver, 0};
  put_u32(&vw, (uint32_t)in->nvrtc_major);
  put_u32(&vw, (uint32_t)in->nvrtc_minor);

  put_bytes(w, key_magic, sizeof key_magic);
  put_u32(w, SJ_KEY_SCHEMA);
  put_string(w, TAG_LIBRARY, in->library_version);
  put_field(w, TAG_TEMPLATE, in->template_hash, sizeof in->template_hash);
  put_string(w, TAG_NAME, in->name_expr);
  put_field(w, TAG_NVRTC, ver, sizeof ver);
  for (size_t i = 0; i < in->n_options; i++)
    put_string(w, TAG_OPTION, in->options[i]);
  put_string(w, TAG_TARGET, in->target);
}

/* Strings must exist and fit a u32 length. */
static int string_ok(const char *s) {
  return s && strlen(s) <= UINT32_MAX;
}

static int input_ok(const sj_key_input *in) {
  if (!in || !string_ok(in->library_version) || !string_ok(in->name_expr) ||
      !string_ok(in->target))
    return 0;
  if (in->nvrtc_major < 0 || in->nvrtc_minor < 0)
    return 0;
  if (in->n_options && !in->options)
    return 0;
  for (size_t i = 0; i < in->n_options; i++)
    if (!string_ok(in->options[i]))
      return 0;
  return 1;
}

int sj_key_make(const sj_key_input *in, sj_key *out) {
  if (!out)
    return -1;
  memset(out, 0, sizeof *out);
  if (!input_ok(in))
    return -1;
  writer w = {NULL, 0};
  write_canonical(&w, in);
  uint8_t *buf = malloc(w.len);
  if (!buf)
    return -1;
  size_t len = w.len;
  w.buf = buf;
  w.len = 0;
  write_canonical(&w, in);
  out->canonical = buf;
  out->canonical_len = len;
  sj_hash128(buf, len, out->bytes);
  return 0;
}

void sj_key_free(sj_key *k) {
  if (!k)
    return;
  free(k->canonical);
  k->canonical = NULL;
  k->canonical_len = 0;
}

void sj_key_hex(const uint8_t bytes[SJ_KEY_BYTES], char out[SJ_KEY_HEX]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < SJ_KEY_BYTES; i++) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  out[2 * SJ_KEY_BYTES] = 0;
}

static void store_be64(uint8_t *p, uint64_t v) {
  for (int i = 7; i >= 0; i--) {
    p[i] = (uint8_t)v;
    v >>= 8;
  }
}

void sj_hash128(const void *data, size_t len, uint8_t out[16]) {
  static const uint8_t empty = 0;
  XXH128_hash_t h = XXH3_128bits(data ? data : &empty, data ? len : 0);
  store_be64(out, h.high64);
  store_be64(out + 8, h.low64);
}

/* ---- parsing (used to cross-check stored rows) ---- */

static uint32_t load_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

/* Walks the fields of a canonical string whose 8-byte header was checked.
 * Tags 1..4 come once each in order, then any number of 5, then one 6, and
 * nothing after it.  Returns 0 when well formed (and the target's span). */
static int parse_fields(const uint8_t *c, size_t len, const uint8_t **target,
                        size_t *target_len) {
  size_t pos = 8;
  int expect = TAG_LIBRARY;
  while (pos < len) {
    if (len - pos < 5)
      return -1;
    int tag = c[pos];
    uint32_t n = load_le32(c + pos + 1);
    pos += 5;
    if (n > len - pos)
      return -1;
    if (expect < TAG_OPTION && tag == expect)
      expect++;
    else if (expect == TAG_OPTION && tag == TAG_TARGET)
      expect = TAG_TARGET + 1;
    else if (!(expect == TAG_OPTION && tag == TAG_OPTION))
      return -1;
    if ((tag == TAG_TEMPLATE && n != 16) || (tag == TAG_NVRTC && n != 8))
      return -1;
    if (tag == TAG_TARGET) {
      *target = c + pos;
      *target_len = n;
    }
    pos += n;
  }
  return expect == TAG_TARGET + 1 ? 0 : -1;
}

int sj_key_canonical_target(const uint8_t *canonical, size_t len, char *buf,
                            size_t size) {
  if (!canonical || len < 8 || memcmp(canonical, key_magic, 4) != 0)
    return -1;
  if (load_le32(canonical + 4) != SJ_KEY_SCHEMA)
    return -1;
  const uint8_t *t = NULL;
  size_t tn = 0;
  if (parse_fields(canonical, len, &t, &tn) != 0)
    return -1;
  if (!buf)
    return 0;
  if (tn >= size || memchr(t, 0, tn))
    return -1;
  memcpy(buf, t, tn);
  buf[tn] = 0;
  return 0;
}
