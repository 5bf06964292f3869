/* status.c -- status texts, versions and small utilities. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "internal.h"

const char *sj_status_string(sj_status st) {
  switch (st) {
#define SJ_X_(name, value, text)                                               \
  case name:                                                                   \
    return text;
    SJ_STATUS_MAP(SJ_X_)
#undef SJ_X_
  }
  return "unknown status";
}

const char *sj_status_name(sj_status st) {
  switch (st) {
#define SJ_X_(name, value, text)                                               \
  case name:                                                                   \
    return #name;
    SJ_STATUS_MAP(SJ_X_)
#undef SJ_X_
  }
  return "SJ_UNKNOWN";
}

int sj_version_number(void) { return SAGEJIT_VERSION_NUMBER; }
const char *sj_version(void) { return SAGEJIT_VERSION_STRING; }

double sj_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void sj_strlcpy(char *dst, const char *src, size_t size) {
  if (!size)
    return;
  size_t n = src ? strlen(src) : 0;
  if (n >= size)
    n = size - 1;
  if (n)
    memcpy(dst, src, n);
  dst[n] = 0;
}

int sj_env_flag(const char *name) {
  const char *v = getenv(name);
  if (!v)
    return 0;
  return !strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
         !strcasecmp(v, "on");
}
