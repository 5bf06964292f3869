/*
 * templates.c -- the sources NVRTC compiles.  Normally the templates
 * embedded at build time; with $SAGEJIT_TEMPLATE_DIR set (development), the
 * same file names read from that directory instead.  Either way the set is
 * loaded once and hashed (names and bytes) into the template hash that every
 * cache key carries, so an edited template never hits a stale binary.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "key.h"

static sj_sources g_src;
static sj_template_file *g_override;
static sj_status g_src_status = SJ_ERR_INTERNAL;
static const char *g_src_why = "not loaded";
static pthread_once_t g_src_once = PTHREAD_ONCE_INIT;

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 1);
  while (buf) {
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (n < cap)
      break;
    char *nb = realloc(buf, cap * 2 + 1);
    if (!nb) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  int err = ferror(f);
  fclose(f);
  if (!buf || err) {
    free(buf);
    return NULL;
  }
  buf[n] = 0;
  *len = n;
  return buf;
}

static void hash_set(const sj_template_file *files, unsigned count,
                     uint8_t out[16]) {
  /* name, NUL, size as 8 bytes, bytes -- for each file in order */
  size_t total = 0;
  for (unsigned i = 0; i < count; i++)
    total += strlen(files[i].name) + 1 + 8 + files[i].size;
  uint8_t *buf = malloc(total ? total : 1);
  if (!buf) {
    memset(out, 0, 16);
    return;
  }
  size_t o = 0;
  for (unsigned i = 0; i < count; i++) {
    size_t nl = strlen(files[i].name) + 1;
    memcpy(buf + o, files[i].name, nl);
    o += nl;
    uint64_t sz = files[i].size;
    for (int b = 0; b < 8; b++)
      buf[o++] = (uint8_t)(sz >> (8 * b));
    memcpy(buf + o, files[i].data, files[i].size);
    o += files[i].size;
  }
  sj_hash128(buf, o, out);
  free(buf);
}

static void sources_once(void) {
  const char *dir = getenv("SAGEJIT_TEMPLATE_DIR");
  g_src.files = sj_templates;
  g_src.count = sj_template_count;
  g_src.main_name = "sj_kernels.cu";
  if (dir && *dir) {
    g_override = calloc(sj_template_count, sizeof *g_override);
    if (!g_override) {
      g_src_why = "out of memory";
      return;
    }
    for (unsigned i = 0; i < sj_template_count; i++) {
      char path[4096];
      size_t len = 0;
      snprintf(path, sizeof path, "%s/%s", dir, sj_templates[i].name);
      char *data = read_all(path, &len);
      if (!data) {
        g_src_why = "SAGEJIT_TEMPLATE_DIR lacks a template file";
        return;
      }
      g_override[i].name = sj_templates[i].name;
      g_override[i].data = data;
      g_override[i].size = len;
    }
    g_src.files = g_override;
    g_src.overridden = 1;
  }
  hash_set(g_src.files, g_src.count, g_src.hash);
  g_src_status = SJ_OK;
  g_src_why = "";
}

sj_status sj_sources_get(const sj_sources **out, const char **why) {
  pthread_once(&g_src_once, sources_once);
  if (why)
    *why = g_src_why;
  *out = g_src_status == SJ_OK ? &g_src : NULL;
  return g_src_status;
}
