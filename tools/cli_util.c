/*
 * cli_util.c -- option parsing, diagnostics, progress bar, JSON writer and
 * list parsing shared by the subcommands of the sagejit CLI.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* ------------------------------------------------------------- exit codes */

int cli_exit_for_status(sj_status st) {
  switch (st) {
  case SJ_OK:
    return CLI_EXIT_OK;
  case SJ_ERR_INVALID_ARGUMENT:
  case SJ_ERR_UNSUPPORTED:
  case SJ_ERR_NO_DRIVER:
  case SJ_ERR_NO_NVRTC:
  case SJ_ERR_NO_DEVICE:
    return CLI_EXIT_USAGE;
  case SJ_ERR_COMPILE:
    return CLI_EXIT_FAILED;
  default:
    return CLI_EXIT_ERROR;
  }
}

/* ------------------------------------------------------------ diagnostics */

static pthread_mutex_t g_err_lock = PTHREAD_MUTEX_INITIALIZER;
static cli_common g_common;
static cli_progress *g_bar; /* the bar on screen, if any */

void cli_set_common(const cli_common *g) { g_common = *g; }

int cli_start(const cli_command *cmd, int argc, char **argv, void *dest) {
  const int rc = cli_parse(cmd, argc, argv, dest);
  if (rc)
    return rc;
  const cli_common *common = dest; /* the first member of every option set */
  if (common->help) {
    cli_usage(cmd, stdout);
    return CLI_EXIT_OK;
  }
  cli_set_common(common);
  return CLI_CONTINUE;
}

static void clear_bar_locked(void) {
  if (g_bar && g_bar->drawn) {
    fputs("\r\033[K", stderr);
    g_bar->drawn = 0;
  }
}

static void vmsg(const char *prefix, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static void vmsg(const char *prefix, const char *fmt, va_list ap) {
  pthread_mutex_lock(&g_err_lock);
  clear_bar_locked();
  fputs("sagejit: ", stderr);
  if (prefix)
    fputs(prefix, stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  fflush(stderr);
  pthread_mutex_unlock(&g_err_lock);
}

void cli_err(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vmsg("error: ", fmt, ap);
  va_end(ap);
}

void cli_note(const char *fmt, ...) {
  if (g_common.quiet)
    return;
  va_list ap;
  va_start(ap, fmt);
  vmsg(NULL, fmt, ap);
  va_end(ap);
}

void cli_errx(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&g_err_lock);
  clear_bar_locked();
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  fflush(stderr);
  pthread_mutex_unlock(&g_err_lock);
  va_end(ap);
}

void cli_verbose(const char *fmt, ...) {
  if (!g_common.verbose || g_common.quiet)
    return;
  va_list ap;
  va_start(ap, fmt);
  vmsg(NULL, fmt, ap);
  va_end(ap);
}

static void log_cb(void *user, sj_log_level lv, const char *line) {
  static const char *const names[] = {"", "error", "warn", "info", "debug"};
  (void)user;
  pthread_mutex_lock(&g_err_lock);
  clear_bar_locked();
  fprintf(stderr, "sagejit: %s: %s\n",
          lv >= SJ_LOG_ERROR && lv <= SJ_LOG_DEBUG ? names[lv] : "log", line);
  fflush(stderr);
  pthread_mutex_unlock(&g_err_lock);
}

static sj_log_level env_log_level(void) {
  const char *v = getenv("SAGEJIT_LOG");
  if (!v || !*v)
    return SJ_LOG_WARN;
  if (!strcasecmp(v, "off") || !strcmp(v, "0"))
    return SJ_LOG_OFF;
  if (!strcasecmp(v, "error"))
    return SJ_LOG_ERROR;
  if (!strcasecmp(v, "info") || !strcmp(v, "1"))
    return SJ_LOG_INFO;
  if (!strcasecmp(v, "debug"))
    return SJ_LOG_DEBUG;
  return SJ_LOG_WARN;
}

void cli_config(sj_config *cfg, const cli_common *g, int device,
                const char *target) {
  sj_config_init(cfg);
  cfg->cache_dir = g->cache_dir;
  cfg->device = device;
  cfg->target = target;
  cfg->log_fn = log_cb;
  cfg->log_user = NULL;
  if (g->quiet)
    cfg->log_level = SJ_LOG_ERROR;
  else if (g->verbose >= 2)
    cfg->log_level = SJ_LOG_DEBUG;
  else if (g->verbose == 1)
    cfg->log_level = SJ_LOG_INFO;
  else
    cfg->log_level = env_log_level();
}

sj_status cli_context_create(sj_context **out, const sj_config *cfg) {
  sj_status st = sj_context_create(out, cfg);
  if (st != SJ_OK) {
    const char *why = sj_context_create_error();
    cli_err("cannot create a sagejit context: %s%s%s", sj_status_string(st),
            why && *why ? ": " : "", why ? why : "");
  }
  return st;
}

sj_status cli_cache_context(sj_context **out, const cli_common *g,
                            const char *target) {
  sj_config cfg;
  cli_config(&cfg, g, SJ_DEVICE_NONE, target ? target : "sm_80");
  /* The family does not matter to the cache; pin one every target has so
   * that $SAGEJIT_FAMILY cannot make the context fail. */
  cfg.family = SJ_FAMILY_FP16PV;
  return cli_context_create(out, &cfg);
}

int cli_require_gpu(const char *what, int *device_count) {
  int version = 0, count = 0;
  sj_status st = sj_driver_info(&version, &count);
  if (st != SJ_OK) {
    cli_errx("sagejit %s needs a CUDA GPU: %s (%s)", what,
            sj_status_string(st), sj_status_name(st));
    return CLI_EXIT_USAGE;
  }
  if (count <= 0) {
    cli_errx("sagejit %s needs a CUDA GPU: the CUDA driver %d.%d reports no "
            "device", what, version / 1000, (version % 1000) / 10);
    return CLI_EXIT_USAGE;
  }
  if (device_count)
    *device_count = count;
  return 0;
}

/* ---------------------------------------------------------------- options */

static const cli_opt *find_long(const cli_opt *t, const char *name,
                                size_t len) {
  for (; t->kind != CLI_OPT_END; t++)
    if (strlen(t->lname) == len && !strncmp(t->lname, name, len))
      return t;
  return NULL;
}

static const cli_opt *find_short(const cli_opt *t, char c) {
  for (; t->kind != CLI_OPT_END; t++)
    if (t->sname && t->sname == c)
      return t;
  return NULL;
}

int cli_usage_error(const cli_command *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&g_err_lock);
  fprintf(stderr, "sagejit %s: ", cmd->name);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nTry 'sagejit %s --help'.\n", cmd->name);
  fflush(stderr);
  pthread_mutex_unlock(&g_err_lock);
  va_end(ap);
  return CLI_EXIT_USAGE;
}

static int store(const cli_command *cmd, const cli_opt *o, const char *shown,
                 const char *value, void *dest) {
  char *p = (char *)dest + o->offset;
  switch (o->kind) {
  case CLI_OPT_FLAG:
    *(int *)(void *)p = 1;
    return 0;
  case CLI_OPT_COUNT:
    (*(int *)(void *)p)++;
    return 0;
  case CLI_OPT_STR:
    *(const char **)(void *)p = value;
    return 0;
  case CLI_OPT_INT: {
    errno = 0;
    char *end = NULL;
    long long v = strtoll(value, &end, 10);
    if (errno || end == value || *end)
      return cli_usage_error(cmd, "invalid value '%s' for %s (expected an "
                             "integer)", value, shown);
    *(long long *)(void *)p = v;
    return 0;
  }
  case CLI_OPT_END:
    break;
  }
  return CLI_EXIT_USAGE;
}

static int takes_value(const cli_opt *o) {
  return o->kind == CLI_OPT_STR || o->kind == CLI_OPT_INT;
}

int cli_parse(const cli_command *cmd, int argc, char **argv, void *dest) {
  cli_common *g = dest;
  int only_pos = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (only_pos || a[0] != '-' || a[1] == 0) {
      if (g->n_pos >= cmd->max_pos || g->n_pos >= CLI_MAX_POSITIONAL)
        return cli_usage_error(cmd, "unexpected argument '%s'", a);
      g->pos[g->n_pos++] = a;
      continue;
    }
    if (!strcmp(a, "--")) {
      only_pos = 1;
      continue;
    }
    if (a[1] == '-') {
      const char *name = a + 2;
      const char *eq = strchr(name, '=');
      size_t len = eq ? (size_t)(eq - name) : strlen(name);
      const cli_opt *o = find_long(cmd->opts, name, len);
      if (!o)
        return cli_usage_error(cmd, "unknown option '%.*s'", (int)len + 2, a);
      char shown[64];
      snprintf(shown, sizeof shown, "--%s", o->lname);
      const char *value = NULL;
      if (takes_value(o)) {
        if (eq)
          value = eq + 1;
        else if (i + 1 < argc)
          value = argv[++i];
        else
          return cli_usage_error(cmd, "option %s needs an argument (%s)",
                                 shown, o->meta ? o->meta : "VALUE");
      } else if (eq) {
        return cli_usage_error(cmd, "option %s takes no argument", shown);
      }
      int rc = store(cmd, o, shown, value, dest);
      if (rc)
        return rc;
      continue;
    }
    /* a cluster of short options: -qv, -j4, -j 4 */
    for (const char *c = a + 1; *c; c++) {
      const cli_opt *o = find_short(cmd->opts, *c);
      if (!o)
        return cli_usage_error(cmd, "unknown option '-%c'", *c);
      char shown[8];
      snprintf(shown, sizeof shown, "-%c", *c);
      const char *value = NULL;
      if (takes_value(o)) {
        if (c[1])
          value = c + 1;
        else if (i + 1 < argc)
          value = argv[++i];
        else
          return cli_usage_error(cmd, "option %s needs an argument (%s)",
                                 shown, o->meta ? o->meta : "VALUE");
      }
      int rc = store(cmd, o, shown, value, dest);
      if (rc)
        return rc;
      if (value)
        break;
    }
  }
  return 0;
}

static void print_wrapped(FILE *f, const char *text, int indent, int col) {
  /* greedy wrap at 79 columns, continuation lines at `indent` */
  int pos = col;
  const char *p = text;
  while (*p) {
    const char *w = p;
    while (*w && *w != ' ')
      w++;
    int wl = (int)(w - p);
    if (pos > indent && pos + 1 + wl > 79) {
      fprintf(f, "\n%*s", indent, "");
      pos = indent;
    } else if (pos > indent) {
      fputc(' ', f);
      pos++;
    }
    fwrite(p, 1, (size_t)wl, f);
    pos += wl;
    p = w;
    while (*p == ' ')
      p++;
  }
  fputc('\n', f);
}

void cli_usage(const cli_command *cmd, FILE *f) {
  fprintf(f, "Usage: sagejit %s %s\n\n%s\n\nOptions:\n", cmd->name,
          cmd->synopsis, cmd->summary);
  for (const cli_opt *o = cmd->opts; o->kind != CLI_OPT_END; o++) {
    if (!o->help)
      continue;
    char left[64];
    int n;
    if (o->sname)
      n = snprintf(left, sizeof left, "  -%c, --%s%s%s", o->sname, o->lname,
                   o->meta ? " " : "", o->meta ? o->meta : "");
    else
      n = snprintf(left, sizeof left, "      --%s%s%s", o->lname,
                   o->meta ? " " : "", o->meta ? o->meta : "");
    fputs(left, f);
    const int indent = 26;
    if (n >= indent - 1) {
      fprintf(f, "\n%*s", indent, "");
      n = indent;
    } else {
      fprintf(f, "%*s", indent - n, "");
      n = indent;
    }
    print_wrapped(f, o->help, indent, n);
  }
  if (cmd->details)
    fprintf(f, "\n%s", cmd->details);
  fputs("\nExit status: 0 success; 1 ran but something failed; 2 usage error "
        "or missing\nrequirement (GPU, NVRTC); 3 library or I/O error.\n",
        f);
}

/* --------------------------------------------------------------- progress */

double cli_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void cli_progress_init(cli_progress *p, const cli_common *g,
                       const char *label) {
  memset(p, 0, sizeof *p);
  p->enabled = !g->no_progress && !g->quiet && isatty(STDERR_FILENO);
  p->last_ms = -1e9;
  snprintf(p->label, sizeof p->label, "%s", label ? label : "");
  if (p->enabled) {
    pthread_mutex_lock(&g_err_lock);
    g_bar = p;
    pthread_mutex_unlock(&g_err_lock);
  }
}

static int term_cols(void) {
  struct winsize ws;
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40)
    return ws.ws_col;
  return 80;
}

void cli_progress_update(cli_progress *p, int64_t done, int64_t total,
                         const char *what) {
  if (!p->enabled)
    return;
  const double now = cli_now_ms();
  if (done < total && now - p->last_ms < 1000.0 / 6.0)
    return;
  p->last_ms = now;
  const int width = 24;
  const double frac = total > 0 ? (double)done / (double)total : 1.0;
  const int fill = (int)(frac * width + 0.5);
  char bar[64];
  for (int i = 0; i < width; i++)
    bar[i] = i < fill ? '#' : '.';
  bar[width] = 0;
  char head[160];
  int n = snprintf(head, sizeof head, "%s [%s] %3d%% %lld/%lld ", p->label,
                   bar, (int)(frac * 100.0), (long long)done,
                   (long long)total);
  int room = term_cols() - 1 - (n > 0 ? n : 0);
  if (room < 0)
    room = 0;
  pthread_mutex_lock(&g_err_lock);
  fprintf(stderr, "\r%s%.*s\033[K", head, room, what ? what : "");
  fflush(stderr);
  p->drawn = 1;
  pthread_mutex_unlock(&g_err_lock);
}

void cli_progress_clear(cli_progress *p) {
  if (!p->enabled)
    return;
  pthread_mutex_lock(&g_err_lock);
  if (p->drawn) {
    fputs("\r\033[K", stderr);
    fflush(stderr);
    p->drawn = 0;
  }
  pthread_mutex_unlock(&g_err_lock);
}

void cli_progress_done(cli_progress *p) {
  cli_progress_clear(p);
  pthread_mutex_lock(&g_err_lock);
  if (g_bar == p)
    g_bar = NULL;
  pthread_mutex_unlock(&g_err_lock);
  p->enabled = 0;
}

/* ------------------------------------------------------------------- JSON */

void cj_init(cli_json *j) {
  memset(j, 0, sizeof *j);
  j->first[0] = 1;
}

void cj_free(cli_json *j) {
  free(j->buf);
  memset(j, 0, sizeof *j);
}

static void put(cli_json *j, const char *s, size_t n) {
  if (j->oom)
    return;
  if (j->len + n + 1 > j->cap) {
    size_t cap = j->cap ? j->cap : 256;
    while (j->len + n + 1 > cap)
      cap *= 2;
    char *nb = realloc(j->buf, cap);
    if (!nb) {
      j->oom = 1;
      return;
    }
    j->buf = nb;
    j->cap = cap;
  }
  memcpy(j->buf + j->len, s, n);
  j->len += n;
  j->buf[j->len] = 0;
}

static void puts_(cli_json *j, const char *s) { put(j, s, strlen(s)); }

static void put_string(cli_json *j, const char *s) {
  put(j, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char esc[8];
    switch (*p) {
    case '"':
      puts_(j, "\\\"");
      break;
    case '\\':
      puts_(j, "\\\\");
      break;
    case '\n':
      puts_(j, "\\n");
      break;
    case '\r':
      puts_(j, "\\r");
      break;
    case '\t':
      puts_(j, "\\t");
      break;
    default:
      if (*p < 0x20 || *p == 0x7f) {
        snprintf(esc, sizeof esc, "\\u%04x", *p);
        puts_(j, esc);
      } else {
        put(j, (const char *)p, 1);
      }
    }
  }
  put(j, "\"", 1);
}

/* separator and key before a value at the current depth */
static void member(cli_json *j, const char *key) {
  if (j->depth > 0 && j->depth < (int)sizeof j->first) {
    if (!j->first[j->depth])
      puts_(j, ", ");
    j->first[j->depth] = 0;
  }
  if (key) {
    put_string(j, key);
    puts_(j, ": ");
  }
}

static void open_(cli_json *j, const char *key, const char *br) {
  member(j, key);
  puts_(j, br);
  if (j->depth + 1 < (int)sizeof j->first)
    j->depth++;
  j->first[j->depth] = 1;
}

static void close_(cli_json *j, const char *br) {
  if (j->depth > 0)
    j->depth--;
  puts_(j, br);
}

void cj_obj_begin(cli_json *j, const char *key) { open_(j, key, "{"); }
void cj_obj_end(cli_json *j) { close_(j, "}"); }
void cj_arr_begin(cli_json *j, const char *key) { open_(j, key, "["); }
void cj_arr_end(cli_json *j) { close_(j, "]"); }

void cj_str(cli_json *j, const char *key, const char *v) {
  member(j, key);
  if (v)
    put_string(j, v);
  else
    puts_(j, "null");
}

void cj_int(cli_json *j, const char *key, int64_t v) {
  char b[32];
  snprintf(b, sizeof b, "%lld", (long long)v);
  member(j, key);
  puts_(j, b);
}

void cj_num(cli_json *j, const char *key, double v) {
  member(j, key);
  if (!isfinite(v)) {
    puts_(j, "null");
    return;
  }
  char b[40];
  snprintf(b, sizeof b, "%.7g", v);
  puts_(j, b);
}

void cj_bool(cli_json *j, const char *key, int v) {
  member(j, key);
  puts_(j, v ? "true" : "false");
}

void cj_null(cli_json *j, const char *key) {
  member(j, key);
  puts_(j, "null");
}

int cj_print(cli_json *j) {
  if (j->oom || !j->buf) {
    cli_err("out of memory writing the JSON output");
    return -1;
  }
  fflush(stdout);
  if (fputs(j->buf, stdout) < 0 || fputc('\n', stdout) < 0 ||
      fflush(stdout) != 0)
    return -1;
  return 0;
}

/* ------------------------------------------------------------------ lists */

int cli_list_split(cli_list *l, const char *s, char *err, size_t err_size) {
  memset(l, 0, sizeof *l);
  l->buf = strdup(s);
  if (!l->buf) {
    snprintf(err, err_size, "out of memory");
    return -1;
  }
  char *p = l->buf;
  for (;;) {
    char *comma = strchr(p, ',');
    if (comma)
      *comma = 0;
    /* trim blanks */
    while (isspace((unsigned char)*p))
      p++;
    char *e = p + strlen(p);
    while (e > p && isspace((unsigned char)e[-1]))
      *--e = 0;
    if (!*p) {
      snprintf(err, err_size, "empty item in list '%s'", s);
      cli_list_free(l);
      return -1;
    }
    if (l->n >= CLI_MAX_LIST) {
      snprintf(err, err_size, "more than %d items in list", CLI_MAX_LIST);
      cli_list_free(l);
      return -1;
    }
    l->item[l->n++] = p;
    if (!comma)
      break;
    p = comma + 1;
  }
  return 0;
}

void cli_list_free(cli_list *l) {
  free(l->buf);
  memset(l, 0, sizeof *l);
}

static int split_or_usage(const cli_command *cmd, const char *opt,
                          const char *s, cli_list *l) {
  char err[128];
  if (cli_list_split(l, s, err, sizeof err) != 0)
    return cli_usage_error(cmd, "invalid %s '%s': %s", opt, s, err);
  return 0;
}

static int valid_arch(const char *s) {
  const char *p;
  if (!strncmp(s, "sm_", 3))
    p = s + 3;
  else if (!strncmp(s, "compute_", 8))
    p = s + 8;
  else
    return 0;
  int digits = 0;
  long v = 0;
  while (isdigit((unsigned char)*p)) {
    v = v * 10 + (*p - '0');
    p++;
    digits++;
  }
  if (digits < 2 || digits > 3 || v < 80)
    return 0;
  if (*p == 'a' || *p == 'f')
    p++;
  return *p == 0;
}

int cli_parse_archs(const cli_command *cmd, const char *opt, const char *s,
                    cli_list *out) {
  memset(out, 0, sizeof *out);
  if (!s)
    return 0;
  int rc = split_or_usage(cmd, opt, s, out);
  if (rc)
    return rc;
  size_t k = 0;
  for (size_t i = 0; i < out->n; i++) {
    if (!valid_arch(out->item[i])) {
      rc = cli_usage_error(cmd, "invalid target '%s' in %s (expected e.g. "
                           "sm_80, sm_90a, compute_120; sm_80 or newer)",
                           out->item[i], opt);
      cli_list_free(out);
      return rc;
    }
    int dup = 0;
    for (size_t j = 0; j < k; j++)
      if (!strcmp(out->item[j], out->item[i]))
        dup = 1;
    if (!dup)
      out->item[k++] = out->item[i];
  }
  out->n = k;
  return 0;
}

int cli_parse_ints(const cli_command *cmd, const char *opt, const char *s,
                   int lo, int hi, int *out, size_t *n) {
  *n = 0;
  if (!s)
    return 0;
  cli_list l;
  int rc = split_or_usage(cmd, opt, s, &l);
  if (rc)
    return rc;
  for (size_t i = 0; i < l.n; i++) {
    errno = 0;
    char *end = NULL;
    long v = strtol(l.item[i], &end, 10);
    if (errno || end == l.item[i] || *end || v < lo || v > hi) {
      rc = cli_usage_error(cmd, "invalid value '%s' in %s (expected an "
                           "integer in %d..%d)", l.item[i], opt, lo, hi);
      cli_list_free(&l);
      return rc;
    }
    out[(*n)++] = (int)v;
  }
  cli_list_free(&l);
  return 0;
}

/* Generic name -> value lookup for the enum lists. */
typedef struct name_val {
  const char *name;
  int value;
} name_val;

static int parse_enum_list(const cli_command *cmd, const char *opt,
                           const char *s, const name_val *names,
                           const char *expected, int *out, size_t *n) {
  *n = 0;
  if (!s)
    return 0;
  cli_list l;
  int rc = split_or_usage(cmd, opt, s, &l);
  if (rc)
    return rc;
  for (size_t i = 0; i < l.n; i++) {
    const name_val *nv = names;
    while (nv->name && strcasecmp(nv->name, l.item[i]))
      nv++;
    if (!nv->name) {
      rc = cli_usage_error(cmd, "invalid value '%s' in %s (expected %s)",
                           l.item[i], opt, expected);
      cli_list_free(&l);
      return rc;
    }
    out[(*n)++] = nv->value;
  }
  cli_list_free(&l);
  return 0;
}

int cli_parse_bools(const cli_command *cmd, const char *opt, const char *s,
                    int *out, size_t *n) {
  static const name_val names[] = {{"0", 0},     {"1", 1},    {"false", 0},
                                   {"true", 1},  {"no", 0},   {"yes", 1},
                                   {"off", 0},   {"on", 1},   {NULL, 0}};
  return parse_enum_list(cmd, opt, s, names, "0, 1, true or false", out, n);
}

/* The enum axes go through an int buffer: the enums are int-sized but not
 * necessarily int. */
#define ENUM_LIST(fn, type, opt, names, expected)                              \
  int fn(const cli_command *cmd, const char *s, type *out, size_t *n) {        \
    int tmp[CLI_MAX_LIST];                                                     \
    int rc = parse_enum_list(cmd, opt, s, names, expected, tmp, n);            \
    for (size_t i = 0; !rc && i < *n; i++)                                     \
      out[i] = (type)tmp[i];                                                   \
    return rc;                                                                 \
  }

static const name_val k_dtypes[] = {{"fp16", SJ_DTYPE_FP16},
                                    {"half", SJ_DTYPE_FP16},
                                    {"float16", SJ_DTYPE_FP16},
                                    {"bf16", SJ_DTYPE_BF16},
                                    {"bfloat16", SJ_DTYPE_BF16},
                                    {NULL, 0}};
static const name_val k_families[] = {{"auto", SJ_FAMILY_AUTO},
                                      {"fp16pv", SJ_FAMILY_FP16PV},
                                      {"fp16", SJ_FAMILY_FP16PV},
                                      {"fp8pv", SJ_FAMILY_FP8PV},
                                      {"fp8", SJ_FAMILY_FP8PV},
                                      {"wgmma", SJ_FAMILY_WGMMA},
                                      {"sm90", SJ_FAMILY_WGMMA},
                                      {NULL, 0}};
static const name_val k_quants[] = {{"default", SJ_QUANT_DEFAULT},
                                    {"per_block", SJ_QUANT_PER_BLOCK},
                                    {"per-block", SJ_QUANT_PER_BLOCK},
                                    {"per_warp", SJ_QUANT_PER_WARP},
                                    {"per-warp", SJ_QUANT_PER_WARP},
                                    {"per_thread", SJ_QUANT_PER_THREAD},
                                    {"per-thread", SJ_QUANT_PER_THREAD},
                                    {NULL, 0}};
static const name_val k_accums[] = {{"default", SJ_ACCUM_DEFAULT},
                                    {"fp32", SJ_ACCUM_FP32},
                                    {"fp32+fp32", SJ_ACCUM_FP32_FP32},
                                    {"fp32_fp32", SJ_ACCUM_FP32_FP32},
                                    {"fp16+fp32", SJ_ACCUM_FP16_FP32},
                                    {"fp16_fp32", SJ_ACCUM_FP16_FP32},
                                    {"fp32+fp16", SJ_ACCUM_FP32_FP16},
                                    {"fp32_fp16", SJ_ACCUM_FP32_FP16},
                                    {"fp32+fp32+splitv", SJ_ACCUM_FP32_FP32_SPLITV},
                                    {"fp32_fp32_splitv", SJ_ACCUM_FP32_FP32_SPLITV},
                                    {"splitv", SJ_ACCUM_FP32_FP32_SPLITV},
                                    {"pv16", SJ_ACCUM_PV16},
                                    {"pvi8", SJ_ACCUM_PVI8},
                                    {"pvi8+splitv", SJ_ACCUM_PVI8_SPLITV},
                                    {"pvi8_splitv", SJ_ACCUM_PVI8_SPLITV},
                                    {NULL, 0}};

ENUM_LIST(cli_parse_dtypes, sj_dtype, "--dtype", k_dtypes, "fp16 or bf16")
ENUM_LIST(cli_parse_families, sj_family, "--family", k_families,
          "auto, fp16pv or fp8pv")
ENUM_LIST(cli_parse_quants, sj_quant_gran, "--quant", k_quants,
          "per_block, per_warp or per_thread")
ENUM_LIST(cli_parse_accums, sj_pv_accum, "--accum", k_accums,
          "fp32, fp32+fp32, fp16+fp32, fp32+fp16, fp32+fp32+splitv, pv16, "
          "pvi8 or pvi8+splitv")
#undef ENUM_LIST

int64_t cli_parse_size(const char *s) {
  if (!s || !*s)
    return -1;
  errno = 0;
  char *end = NULL;
  double v = strtod(s, &end);
  if (errno || end == s || v < 0 || !isfinite(v))
    return -1;
  double mul = 1;
  switch (toupper((unsigned char)*end)) {
  case 'K':
    mul = 1024.0;
    end++;
    break;
  case 'M':
    mul = 1024.0 * 1024.0;
    end++;
    break;
  case 'G':
    mul = 1024.0 * 1024.0 * 1024.0;
    end++;
    break;
  case 'T':
    mul = 1024.0 * 1024.0 * 1024.0 * 1024.0;
    end++;
    break;
  default:
    break;
  }
  if (mul > 1 && *end == 'i')
    end++;
  if (*end == 'B' || *end == 'b')
    end++;
  if (*end)
    return -1;
  double bytes = v * mul;
  if (bytes > 9.0e18)
    return -1;
  return (int64_t)bytes;
}

int cli_check_range(const cli_command *cmd, const char *opt, long long v,
                    long long lo, long long hi) {
  if (v < lo || v > hi)
    return cli_usage_error(cmd, "%s must be in %lld..%lld (got %lld)", opt,
                           lo, hi, v);
  return 0;
}

/* ------------------------------------------------------------------ names */

const char *cli_dtype_name(sj_dtype d) {
  return d == SJ_DTYPE_BF16 ? "bf16" : d == SJ_DTYPE_FP16 ? "fp16" : "?";
}

const char *cli_family_name(sj_family f) {
  switch (f) {
  case SJ_FAMILY_AUTO:
    return "auto";
  case SJ_FAMILY_FP16PV:
    return "fp16pv";
  case SJ_FAMILY_FP8PV:
    return "fp8pv";
  case SJ_FAMILY_WGMMA:
    return "wgmma";
  }
  return "?";
}

const char *cli_quant_name(sj_quant_gran q) {
  switch (q) {
  case SJ_QUANT_DEFAULT:
    return "default";
  case SJ_QUANT_PER_BLOCK:
    return "per_block";
  case SJ_QUANT_PER_WARP:
    return "per_warp";
  case SJ_QUANT_PER_THREAD:
    return "per_thread";
  }
  return "?";
}

const char *cli_layout_name(sj_layout l) {
  return l == SJ_LAYOUT_NHD ? "NHD" : "HND";
}

void cli_format_bytes(int64_t bytes, char *buf, size_t size) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, size, "%lld B", (long long)bytes);
  else
    snprintf(buf, size, "%.1f %s", v, units[u]);
}
