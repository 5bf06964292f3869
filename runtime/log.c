/* log.c -- the library's only way to say something: a callback, or stderr
 * when the user set SAGEJIT_LOG.  Never prints otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

sj_log_level sj_env_log_level(void) {
  const char *v = getenv("SAGEJIT_LOG");
  if (!v || !*v)
    return SJ_LOG_OFF;
  if (!strcasecmp(v, "error"))
    return SJ_LOG_ERROR;
  if (!strcasecmp(v, "warn") || !strcasecmp(v, "warning"))
    return SJ_LOG_WARN;
  if (!strcasecmp(v, "info") || !strcmp(v, "1"))
    return SJ_LOG_INFO;
  if (!strcasecmp(v, "debug"))
    return SJ_LOG_DEBUG;
  return SJ_LOG_OFF;
}

static void stderr_sink(void *user, sj_log_level lv, const char *line) {
  static const char *names[] = {"", "error", "warn", "info", "debug"};
  (void)user;
  fprintf(stderr, "sagejit: %s: %s\n", names[lv], line);
}

void sj_logger_init(sj_logger *lg, sj_log_fn fn, void *user,
                    sj_log_level lv) {
  pthread_mutex_init(&lg->lock, NULL);
  if (fn) {
    lg->fn = fn;
    lg->user = user;
    lg->level = lv;
  } else {
    sj_log_level env = sj_env_log_level();
    lg->fn = env != SJ_LOG_OFF ? stderr_sink : NULL;
    lg->user = NULL;
    lg->level = env;
  }
}

void sj_logger_destroy(sj_logger *lg) { pthread_mutex_destroy(&lg->lock); }

void sj_vlog(sj_logger *lg, sj_log_level lv, const char *fmt, va_list ap) {
  if (!lg || !lg->fn || lv > lg->level || lv == SJ_LOG_OFF)
    return;
  char line[2048];
  vsnprintf(line, sizeof line, fmt, ap);
  pthread_mutex_lock(&lg->lock);
  lg->fn(lg->user, lv, line);
  pthread_mutex_unlock(&lg->lock);
}

void sj_log(sj_logger *lg, sj_log_level lv, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sj_vlog(lg, lv, fmt, ap);
  va_end(ap);
}

void sj_logger_cache_cb(void *user, int level, const char *line) {
  sj_log((sj_logger *)user, (sj_log_level)level, "%s", line);
}
