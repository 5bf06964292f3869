/*
 * test_cli.c -- the `sagejit` command-line tool, run as a program: exit
 * codes, JSON output (checked by a small strict JSON parser), the cache
 * commands end to end, usage errors, TTY-only progress, and concurrent
 * warm processes on one cache.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pty.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "sagejit.h"
#include "testutil.h"

#ifndef SJ_CLI_PATH
#error "SJ_CLI_PATH must name the sagejit executable"
#endif

#define RUN_TIMEOUT 600

/* ===================================================== a strict JSON parser */

typedef enum jv_type { JV_NULL, JV_BOOL, JV_NUM, JV_STR, JV_ARR, JV_OBJ } jv_type;

typedef struct jv {
  jv_type t;
  int b;
  double num;
  char *str;        /* JV_STR */
  struct jv **items; /* JV_ARR, JV_OBJ values */
  char **keys;       /* JV_OBJ */
  size_t n;
} jv;

typedef struct jparser {
  const char *p;
  int depth;
  int err;
} jparser;

static void jv_free(jv *v) {
  if (!v)
    return;
  for (size_t i = 0; i < v->n; i++) {
    jv_free(v->items[i]);
    if (v->keys)
      free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->str);
  free(v);
}

static void jws(jparser *jp) {
  while (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' || *jp->p == '\r')
    jp->p++;
}

static jv *jnew(jv_type t) {
  jv *v = calloc(1, sizeof *v);
  if (v)
    v->t = t;
  return v;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* A string at jp->p (at the quote); malloc'ed, \u escapes kept only as
 * ASCII when < 0x80, else '?'. */
static char *jstring(jparser *jp) {
  if (*jp->p != '"') {
    jp->err = 1;
    return NULL;
  }
  jp->p++;
  size_t cap = 32, len = 0;
  char *s = malloc(cap);
  if (!s) {
    jp->err = 1;
    return NULL;
  }
  for (;;) {
    unsigned char c = (unsigned char)*jp->p;
    if (c == 0 || c < 0x20) {
      jp->err = 1;
      free(s);
      return NULL;
    }
    jp->p++;
    if (c == '"')
      break;
    char out = (char)c;
    if (c == '\\') {
      char e = *jp->p++;
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out = e;
        break;
      case 'b':
        out = '\b';
        break;
      case 'f':
        out = '\f';
        break;
      case 'n':
        out = '\n';
        break;
      case 'r':
        out = '\r';
        break;
      case 't':
        out = '\t';
        break;
      case 'u': {
        int v = 0;
        for (int i = 0; i < 4; i++) {
          int h = hexval(jp->p[i]);
          if (h < 0) {
            jp->err = 1;
            free(s);
            return NULL;
          }
          v = v * 16 + h;
        }
        jp->p += 4;
        out = v < 0x80 ? (char)v : '?';
        break;
      }
      default:
        jp->err = 1;
        free(s);
        return NULL;
      }
    }
    if (len + 2 > cap) {
      cap *= 2;
      char *ns = realloc(s, cap);
      if (!ns) {
        free(s);
        jp->err = 1;
        return NULL;
      }
      s = ns;
    }
    s[len++] = out;
  }
  s[len] = 0;
  return s;
}

static int jdigits(jparser *jp) {
  int n = 0;
  while (*jp->p >= '0' && *jp->p <= '9') {
    jp->p++;
    n++;
  }
  return n;
}

static jv *jvalue(jparser *jp);

static int jpush(jv *v, char *key, jv *item) {
  jv **ni = realloc(v->items, (v->n + 1) * sizeof *ni);
  if (!ni)
    return -1;
  v->items = ni;
  if (v->t == JV_OBJ) {
    char **nk = realloc(v->keys, (v->n + 1) * sizeof *nk);
    if (!nk)
      return -1;
    v->keys = nk;
    v->keys[v->n] = key;
  }
  v->items[v->n++] = item;
  return 0;
}

static jv *jcontainer(jparser *jp, int obj) {
  jv *v = jnew(obj ? JV_OBJ : JV_ARR);
  if (!v || ++jp->depth > 64) {
    jp->err = 1;
    free(v);
    return NULL;
  }
  jp->p++; /* [ or { */
  jws(jp);
  const char close = obj ? '}' : ']';
  if (*jp->p == close) {
    jp->p++;
    jp->depth--;
    return v;
  }
  for (;;) {
    char *key = NULL;
    jws(jp);
    if (obj) {
      key = jstring(jp);
      if (jp->err)
        break;
      for (size_t i = 0; i < v->n; i++)
        if (!strcmp(v->keys[i], key))
          jp->err = 1; /* duplicate key */
      jws(jp);
      if (jp->err || *jp->p != ':') {
        jp->err = 1;
        free(key);
        break;
      }
      jp->p++;
    }
    jv *item = jvalue(jp);
    if (jp->err || jpush(v, key, item) != 0) {
      jp->err = 1;
      free(key);
      jv_free(item);
      break;
    }
    jws(jp);
    if (*jp->p == ',') {
      jp->p++;
      continue;
    }
    if (*jp->p == close) {
      jp->p++;
      jp->depth--;
      return v;
    }
    jp->err = 1;
    break;
  }
  jv_free(v);
  return NULL;
}

static jv *jvalue(jparser *jp) {
  jws(jp);
  const char *p = jp->p;
  if (*p == '{' || *p == '[')
    return jcontainer(jp, *p == '{');
  if (*p == '"') {
    jv *v = jnew(JV_STR);
    if (!v) {
      jp->err = 1;
      return NULL;
    }
    v->str = jstring(jp);
    if (jp->err) {
      jv_free(v);
      return NULL;
    }
    return v;
  }
  if (!strncmp(p, "true", 4) || !strncmp(p, "false", 5)) {
    jv *v = jnew(JV_BOOL);
    if (!v) {
      jp->err = 1;
      return NULL;
    }
    v->b = *p == 't';
    jp->p += v->b ? 4 : 5;
    return v;
  }
  if (!strncmp(p, "null", 4)) {
    jp->p += 4;
    jv *v = jnew(JV_NULL);
    if (!v)
      jp->err = 1;
    return v;
  }
  /* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
  if (*p == '-')
    jp->p++;
  if (*jp->p == '0') {
    jp->p++;
  } else if (*jp->p >= '1' && *jp->p <= '9') {
    jdigits(jp);
  } else {
    jp->err = 1;
    return NULL;
  }
  if (*jp->p == '.') {
    jp->p++;
    if (!jdigits(jp)) {
      jp->err = 1;
      return NULL;
    }
  }
  if (*jp->p == 'e' || *jp->p == 'E') {
    jp->p++;
    if (*jp->p == '+' || *jp->p == '-')
      jp->p++;
    if (!jdigits(jp)) {
      jp->err = 1;
      return NULL;
    }
  }
  jv *v = jnew(JV_NUM);
  if (!v) {
    jp->err = 1;
    return NULL;
  }
  v->num = strtod(p, NULL);
  return v;
}

/* The whole text must be one JSON value (surrounding blanks allowed). */
static jv *jv_parse(const char *s) {
  jparser jp = {s, 0, 0};
  jv *v = jvalue(&jp);
  if (!jp.err) {
    jws(&jp);
    if (*jp.p)
      jp.err = 1;
  }
  if (jp.err) {
    jv_free(v);
    return NULL;
  }
  return v;
}

static const jv *jv_get(const jv *o, const char *key) {
  if (!o || o->t != JV_OBJ)
    return NULL;
  for (size_t i = 0; i < o->n; i++)
    if (!strcmp(o->keys[i], key))
      return o->items[i];
  return NULL;
}

/* A numeric member that must exist. */
static int64_t jv_int(const jv *o, const char *key) {
  const jv *v = jv_get(o, key);
  if (!v || v->t != JV_NUM)
    fail_msg("JSON member \"%s\" missing or not a number", key);
  return (int64_t)v->num;
}

static const char *jv_str(const jv *o, const char *key) {
  const jv *v = jv_get(o, key);
  if (!v || v->t != JV_STR)
    fail_msg("JSON member \"%s\" missing or not a string", key);
  return v->str;
}

/* =================================================================== runs */

typedef struct run_out {
  int rc;
  char *out, *err;
} run_out;

static void run_free(run_out *r) {
  free(r->out);
  free(r->err);
  memset(r, 0, sizeof *r);
}

/* Runs the CLI with a NULL-terminated argument list and extra env. */
static run_out run_env(char *const env[], const char *first, ...) {
  char *argv[64];
  int n = 0;
  argv[n++] = (char *)SJ_CLI_PATH;
  va_list ap;
  va_start(ap, first);
  for (const char *a = first; a && n < 63; a = va_arg(ap, const char *))
    argv[n++] = (char *)a;
  va_end(ap);
  argv[n] = NULL;
  run_out r;
  memset(&r, 0, sizeof r);
  r.rc = tu_run(argv, env, &r.out, &r.err, RUN_TIMEOUT);
  if (!r.out)
    r.out = strdup("");
  if (!r.err)
    r.err = strdup("");
  return r;
}
#define RUN(...) run_env(NULL, __VA_ARGS__, (const char *)NULL)
#define RUN_ENV(env, ...) run_env(env, __VA_ARGS__, (const char *)NULL)

static void dump(const run_out *r) {
  print_message("exit %d\n--- stdout ---\n%s\n--- stderr ---\n%s\n", r->rc,
                r->out, r->err);
}

/* Asserts the --json contract on stdout: it ends with one line that is a
 * JSON object, and no other line of stdout is one.  Returns the parse. */
static jv *json_of(const run_out *r) {
  const char *s = r->out;
  size_t len = strlen(s);
  if (len == 0 || s[len - 1] != '\n') {
    dump(r);
    fail_msg("stdout does not end with a newline-terminated JSON line");
  }
  jv *last = NULL;
  int objects = 0;
  const char *line = s;
  while (*line) {
    const char *nl = strchr(line, '\n');
    size_t n = nl ? (size_t)(nl - line) : strlen(line);
    char *copy = strndup(line, n);
    assert_non_null(copy);
    jv *v = copy[0] == '{' ? jv_parse(copy) : NULL;
    if (copy[0] == '{')
      objects++;
    free(copy);
    const int is_last = !nl || !nl[1];
    if (is_last) {
      last = v;
    } else {
      jv_free(v);
    }
    line = nl ? nl + 1 : line + n;
  }
  if (!last || last->t != JV_OBJ || objects != 1) {
    dump(r);
    jv_free(last);
    fail_msg("expected exactly one JSON object line, the last (found %d)",
             objects);
  }
  return last;
}

/* ===================================================== files and fixtures */

static char g_base[512];    /* everything of this suite lives under it */
static char g_seed[1024];   /* a cache dir warmed with the small matrix */
static int64_t g_n;         /* entries of the small matrix (sm_80) */
static int g_gpu;
static int g_serial;
static run_out g_seed_run;  /* the first warm of g_seed */

#define SMALL_MATRIX "--head-dim", "64", "--causal", "0", "--dtype", "fp16"

static void new_dir(const char *tag, char *buf, size_t size) {
  int n = snprintf(buf, size, "%s/%s-%d", g_base, tag, ++g_serial);
  assert_true(n > 0 && (size_t)n < size);
  assert_int_equal(mkdir(buf, 0700), 0);
}

static void copy_file(const char *src, const char *dst) {
  int in = open(src, O_RDONLY);
  assert_true(in >= 0);
  int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(out >= 0);
  char buf[65536];
  for (;;) {
    ssize_t r = read(in, buf, sizeof buf);
    assert_true(r >= 0);
    if (r == 0)
      break;
    assert_int_equal(write(out, buf, (size_t)r), r);
  }
  close(in);
  assert_int_equal(close(out), 0);
}

/* A copy of the seeded cache in a new dir. */
static void seeded_copy(char *buf, size_t size) {
  new_dir("copy", buf, size);
  DIR *d = opendir(g_seed);
  assert_non_null(d);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char s[2048], t[2048];
    snprintf(s, sizeof s, "%s/%s", g_seed, e->d_name);
    snprintf(t, sizeof t, "%s/%s", buf, e->d_name);
    struct stat st;
    if (lstat(s, &st) == 0 && S_ISREG(st.st_mode))
      copy_file(s, t);
  }
  closedir(d);
}

static jv *stats_of(const char *dir) {
  run_out r = RUN("cache", "stats", "--json", "--cache-dir", dir);
  if (r.rc != 0)
    dump(&r);
  assert_int_equal(r.rc, 0);
  jv *v = json_of(&r);
  run_free(&r);
  return v;
}

static int64_t entries_of(const char *dir) {
  jv *v = stats_of(dir);
  int64_t n = jv_int(v, "entries");
  jv_free(v);
  return n;
}

static int group_setup(void **state) {
  (void)state;
  if (tu_mkdtemp("cli", g_base, sizeof g_base) != 0)
    return -1;
  g_gpu = tu_have_gpu();
  snprintf(g_seed, sizeof g_seed, "%s/seed", g_base);
  if (mkdir(g_seed, 0700) != 0)
    return -1;
  g_seed_run = RUN("warm", "--arch", "sm_80", SMALL_MATRIX, "--json",
                   "--cache-dir", g_seed);
  if (g_seed_run.rc != 0) {
    dump(&g_seed_run);
    return -1;
  }
  jv *v = jv_parse(strrchr(g_seed_run.out, '{'));
  if (!v)
    return -1;
  const jv *c = jv_get(v, "compiled");
  g_n = c && c->t == JV_NUM ? (int64_t)c->num : -1;
  jv_free(v);
  return g_n > 0 ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  run_free(&g_seed_run);
  if (g_base[0])
    tu_rmrf(g_base);
  return 0;
}

/* ================================================================== tests */

static void test_version(void **state) {
  (void)state;
  run_out r = RUN("--version");
  assert_int_equal(r.rc, 0);
  char want[64];
  snprintf(want, sizeof want, "sagejit %s", sj_version());
  assert_non_null(strstr(r.out, want));
  run_free(&r);
}

static void test_info(void **state) {
  (void)state;
  char dir[1024];
  new_dir("info", dir, sizeof dir);
  run_out r = RUN("info", "--json", "--cache-dir", dir);
  if (r.rc != 0)
    dump(&r);
  assert_int_equal(r.rc, 0);
  jv *v = json_of(&r);
  assert_string_equal(jv_str(v, "version"), sj_version());
  assert_int_equal(jv_int(v, "version_number"), sj_version_number());
  const int64_t devices = jv_int(v, "device_count");
  if (g_gpu)
    assert_true(devices > 0);
  else
    assert_int_equal(devices, 0);
  const jv *devs = jv_get(v, "devices");
  assert_non_null(devs);
  assert_int_equal(devs->t, JV_ARR);
  assert_int_equal((int64_t)devs->n, devices);
  const jv *nv = jv_get(v, "nvrtc");
  assert_non_null(jv_get(nv, "found"));
  assert_int_equal(jv_get(nv, "found")->t, JV_BOOL);
  const jv *cache = jv_get(v, "cache");
  assert_non_null(cache);
  assert_true(!strncmp(jv_str(cache, "path"), dir, strlen(dir)));
  assert_true(jv_get(cache, "writable")->b);
  assert_int_equal(jv_int(cache, "entries"), 0);
  jv_free(v);
  run_free(&r);

  /* the human form: results on stdout, exit 0 without a GPU too */
  r = RUN("info", "--cache-dir", dir);
  assert_int_equal(r.rc, 0);
  assert_non_null(strstr(r.out, sj_version()));
  assert_non_null(strstr(r.out, "NVRTC"));
  assert_non_null(strstr(r.out, dir));
  assert_null(strchr(r.out, '{'));
  run_free(&r);
}

static void test_info_env_cache_dir(void **state) {
  (void)state;
  char dir[1024], env[1100];
  new_dir("envdir", dir, sizeof dir);
  snprintf(env, sizeof env, "SAGEJIT_CACHE_DIR=%s", dir);
  char *envv[] = {env, NULL};
  run_out r = RUN_ENV(envv, "cache", "stats", "--json");
  assert_int_equal(r.rc, 0);
  jv *v = json_of(&r);
  assert_true(!strncmp(jv_str(v, "path"), dir, strlen(dir)));
  jv_free(v);
  run_free(&r);
}

static void test_warm_then_cached(void **state) {
  (void)state;
  /* the first run (group setup) compiled everything */
  jv *v = json_of(&g_seed_run);
  assert_true(jv_int(v, "compiled") > 0);
  assert_int_equal(jv_int(v, "failed"), 0);
  assert_int_equal(jv_int(v, "cached"), 0);
  assert_int_equal(jv_int(v, "total"), g_n);
  const jv *t = jv_get(v, "targets");
  assert_true(t && t->t == JV_ARR && t->n == 1);
  assert_string_equal(t->items[0]->str, "sm_80");
  jv_free(v);

  /* again: nothing to compile */
  run_out r = RUN("warm", "--arch", "sm_80", SMALL_MATRIX, "--json",
                  "--cache-dir", g_seed);
  assert_int_equal(r.rc, 0);
  v = json_of(&r);
  assert_int_equal(jv_int(v, "compiled"), 0);
  assert_int_equal(jv_int(v, "cached"), g_n);
  assert_int_equal(jv_int(v, "failed"), 0);
  assert_int_equal(jv_int(v, "total"), g_n);
  jv_free(v);
  run_free(&r);

  /* the cache holds exactly those, all for sm_80 */
  v = stats_of(g_seed);
  assert_int_equal(jv_int(v, "entries"), g_n);
  assert_true(jv_int(v, "bytes") > 0);
  const jv *bt = jv_get(v, "by_target");
  assert_non_null(bt);
  assert_int_equal(bt->t, JV_OBJ);
  assert_int_equal(bt->n, 1);
  assert_int_equal(jv_int(bt, "sm_80"), g_n);
  jv_free(v);

  /* human summary */
  r = RUN("warm", "--arch", "sm_80", SMALL_MATRIX, "--cache-dir", g_seed);
  assert_int_equal(r.rc, 0);
  assert_non_null(strstr(r.out, "0 compiled"));
  run_free(&r);
}

static void test_warm_two_archs(void **state) {
  (void)state;
  char dir[1024];
  seeded_copy(dir, sizeof dir);
  run_out r = RUN("warm", "--arch", "sm_80,sm_90a", SMALL_MATRIX, "--json",
                  "--cache-dir", dir);
  if (r.rc != 0)
    dump(&r);
  assert_int_equal(r.rc, 0);
  jv *v = json_of(&r);
  const int64_t compiled = jv_int(v, "compiled");
  assert_int_equal(jv_int(v, "cached"), g_n);
  assert_true(compiled > 0);
  assert_int_equal(jv_int(v, "failed"), 0);
  assert_int_equal(jv_int(v, "total"), g_n + compiled);
  const jv *t = jv_get(v, "targets");
  assert_true(t && t->n == 2);
  jv_free(v);
  run_free(&r);

  v = stats_of(dir);
  const jv *bt = jv_get(v, "by_target");
  assert_non_null(bt);
  assert_int_equal(bt->n, 2);
  assert_int_equal(jv_int(bt, "sm_80"), g_n);
  assert_int_equal(jv_int(bt, "sm_90a"), compiled);
  assert_int_equal(jv_int(v, "entries"), g_n + compiled);
  jv_free(v);
}

/* A target NVRTC refuses: the run goes on, reports, and exits 1. */
static void test_warm_failure(void **state) {
  (void)state;
  char dir[1024];
  seeded_copy(dir, sizeof dir);
  run_out r = RUN("warm", "--arch", "sm_80,sm_95", SMALL_MATRIX, "--json",
                  "--cache-dir", dir);
  if (r.rc != 1)
    dump(&r);
  assert_int_equal(r.rc, 1);
  assert_true(strlen(r.err) > 0);
  jv *v = json_of(&r);
  const int64_t failed = jv_int(v, "failed");
  assert_true(failed > 0);
  assert_int_equal(jv_int(v, "cached"), g_n);
  assert_int_equal(jv_int(v, "total"), g_n + failed);
  const jv *f = jv_get(v, "failures");
  assert_true(f && f->t == JV_ARR && (int64_t)f->n == failed);
  assert_string_equal(jv_str(f->items[0], "target"), "sm_95");
  assert_string_equal(jv_str(f->items[0], "status"), "SJ_ERR_COMPILE");
  jv_free(v);
  run_free(&r);
  v = stats_of(dir);
  assert_null(jv_get(jv_get(v, "by_target"), "sm_95"));
  assert_int_equal(jv_int(v, "entries"), g_n);
  jv_free(v);
}

static void test_warm_verbose_quiet(void **state) {
  (void)state;
  /* -v: one line per kernel on stderr; -q: nothing on stderr */
  run_out r = RUN("warm", "-v", "--arch", "sm_80", SMALL_MATRIX,
                  "--cache-dir", g_seed);
  assert_int_equal(r.rc, 0);
  char want[64];
  snprintf(want, sizeof want, "[%lld/%lld]", (long long)g_n, (long long)g_n);
  assert_non_null(strstr(r.err, want));
  run_free(&r);
  r = RUN("warm", "-q", "--arch", "sm_80", SMALL_MATRIX, "--cache-dir",
          g_seed);
  assert_int_equal(r.rc, 0);
  assert_string_equal(r.err, "");
  assert_non_null(strstr(r.out, "cached"));
  run_free(&r);
}

static void test_cache_ls(void **state) {
  (void)state;
  run_out r = RUN("cache", "ls", "--json", "--cache-dir", g_seed);
  assert_int_equal(r.rc, 0);
  jv *v = json_of(&r);
  const jv *e = jv_get(v, "entries");
  assert_non_null(e);
  assert_int_equal(e->t, JV_ARR);
  assert_int_equal((int64_t)e->n, g_n);
  for (size_t i = 0; i < e->n; i++) {
    const jv *row = e->items[i];
    assert_true(strlen(jv_str(row, "kernel")) > 0);
    assert_string_equal(jv_str(row, "target"), "sm_80");
    assert_int_equal(strlen(jv_str(row, "key")), 32);
    assert_true(jv_int(row, "bytes") > 0);
    const char *kind = jv_str(row, "kind");
    assert_true(!strcmp(kind, "cubin") || !strcmp(kind, "ptx"));
    assert_non_null(jv_get(row, "hits"));
    assert_non_null(jv_get(row, "last_used"));
  }
  jv_free(v);
  run_free(&r);

  r = RUN("cache", "ls", "--cache-dir", g_seed);
  assert_int_equal(r.rc, 0);
  assert_non_null(strstr(r.out, "sm_80"));
  assert_non_null(strstr(r.out, "KERNEL"));
  run_free(&r);
}

/* Flips one byte in the middle of one image, with raw SQL. */
static void corrupt_one(const char *db_path) {
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL),
                   SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);
  sqlite3_stmt *st = NULL;
  assert_int_equal(sqlite3_prepare_v2(db,
                                      "SELECT key, image FROM kernels "
                                      "ORDER BY key LIMIT 1",
                                      -1, &st, NULL),
                   SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  const int klen = sqlite3_column_bytes(st, 0);
  unsigned char key[64];
  assert_true(klen > 0 && klen <= (int)sizeof key);
  memcpy(key, sqlite3_column_blob(st, 0), (size_t)klen);
  const int n = sqlite3_column_bytes(st, 1);
  assert_true(n > 16);
  unsigned char *img = malloc((size_t)n);
  assert_non_null(img);
  memcpy(img, sqlite3_column_blob(st, 1), (size_t)n);
  sqlite3_finalize(st);
  img[n / 2] ^= 0x5a;
  assert_int_equal(sqlite3_prepare_v2(db,
                                      "UPDATE kernels SET image = ?1 "
                                      "WHERE key = ?2",
                                      -1, &st, NULL),
                   SQLITE_OK);
  sqlite3_bind_blob(st, 1, img, n, SQLITE_TRANSIENT);
  sqlite3_bind_blob(st, 2, key, klen, SQLITE_TRANSIENT);
  assert_int_equal(sqlite3_step(st), SQLITE_DONE);
  assert_int_equal(sqlite3_changes(db), 1);
  sqlite3_finalize(st);
  free(img);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void test_cache_verify(void **state) {
  (void)state;
  char dir[1024];
  seeded_copy(dir, sizeof dir);
  run_out r = RUN("cache", "verify", "--json", "--cache-dir", dir);
  assert_int_equal(r.rc, 0);
  jv *v = json_of(&r);
  assert_int_equal(jv_int(v, "checked"), g_n);
  assert_int_equal(jv_int(v, "ok"), g_n);
  assert_int_equal(jv_int(v, "corrupt"), 0);
  jv_free(v);
  run_free(&r);

  v = stats_of(dir);
  char path[2048];
  snprintf(path, sizeof path, "%s", jv_str(v, "path"));
  jv_free(v);
  corrupt_one(path);

  r = RUN("cache", "verify", "--json", "--cache-dir", dir);
  if (r.rc != 1)
    dump(&r);
  assert_int_equal(r.rc, 1);
  v = json_of(&r);
  assert_int_equal(jv_int(v, "checked"), g_n);
  assert_int_equal(jv_int(v, "corrupt"), 1);
  assert_int_equal(jv_int(v, "ok"), g_n - 1);
  jv_free(v);
  run_free(&r);
  assert_int_equal(entries_of(dir), g_n - 1);

  /* the bad row is gone: healthy again */
  r = RUN("cache", "verify", "--cache-dir", dir);
  assert_int_equal(r.rc, 0);
  assert_non_null(strstr(r.out, "0 corrupt"));
  run_free(&r);
}

static void test_cache_prune_clear(void **state) {
  (void)state;
  char dir[1024];
  seeded_copy(dir, sizeof dir);
  run_out r = RUN("cache", "prune", "--max-bytes", "1G", "--json",
                  "--cache-dir", dir);
  assert_int_equal(r.rc, 0);
  jv *v = json_of(&r);
  assert_int_equal(jv_int(v, "removed"), 0);
  assert_int_equal(jv_int(v, "max_bytes"), 1024LL * 1024 * 1024);
  jv_free(v);
  run_free(&r);
  assert_int_equal(entries_of(dir), g_n);

  r = RUN("cache", "prune", "--max-bytes", "1", "--json", "--cache-dir", dir);
  assert_int_equal(r.rc, 0);
  v = json_of(&r);
  assert_int_equal(jv_int(v, "removed"), g_n);
  assert_int_equal(jv_int(v, "entries"), 0);
  jv_free(v);
  run_free(&r);
  assert_int_equal(entries_of(dir), 0);

  seeded_copy(dir, sizeof dir);
  r = RUN("cache", "clear", "--json", "--cache-dir", dir);
  assert_int_equal(r.rc, 0);
  v = json_of(&r);
  assert_int_equal(jv_int(v, "removed"), g_n);
  jv_free(v);
  run_free(&r);
  assert_int_equal(entries_of(dir), 0);
}

static void test_cache_export_import(void **state) {
  (void)state;
  char dir[1024], file[1200];
  new_dir("export", dir, sizeof dir);
  snprintf(file, sizeof file, "%s/exported.db", dir);
  run_out r = RUN("cache", "export", file, "--json", "--cache-dir", g_seed);
  if (r.rc != 0)
    dump(&r);
  assert_int_equal(r.rc, 0);
  jv *v = json_of(&r);
  assert_int_equal(jv_int(v, "exported"), g_n);
  jv_free(v);
  run_free(&r);
  struct stat st;
  assert_int_equal(stat(file, &st), 0);

  /* never overwrites */
  r = RUN("cache", "export", file, "--cache-dir", g_seed);
  assert_int_equal(r.rc, 3);
  assert_true(strlen(r.err) > 0);
  run_free(&r);

  char dst[1024];
  new_dir("import", dst, sizeof dst);
  r = RUN("cache", "import", file, "--json", "--cache-dir", dst);
  if (r.rc != 0)
    dump(&r);
  assert_int_equal(r.rc, 0);
  v = json_of(&r);
  assert_int_equal(jv_int(v, "imported"), g_n);
  assert_int_equal(jv_int(v, "skipped"), 0);
  jv_free(v);
  run_free(&r);
  assert_int_equal(entries_of(dst), g_n);

  /* a second import adds nothing */
  r = RUN("cache", "import", file, "--json", "--cache-dir", dst);
  assert_int_equal(r.rc, 0);
  v = json_of(&r);
  assert_int_equal(jv_int(v, "imported"), 0);
  assert_int_equal(jv_int(v, "skipped"), g_n);
  jv_free(v);
  run_free(&r);
  assert_int_equal(entries_of(dst), g_n);

  /* the imported cache serves warm without compiling */
  r = RUN("warm", "--arch", "sm_80", SMALL_MATRIX, "--json", "--cache-dir",
          dst);
  assert_int_equal(r.rc, 0);
  v = json_of(&r);
  assert_int_equal(jv_int(v, "compiled"), 0);
  assert_int_equal(jv_int(v, "cached"), g_n);
  jv_free(v);
  run_free(&r);
}

static void test_cache_export_arch(void **state) {
  (void)state;
  char dir[1024], f1[1200], f2[1200];
  new_dir("exparch", dir, sizeof dir);
  snprintf(f1, sizeof f1, "%s/a.db", dir);
  snprintf(f2, sizeof f2, "%s/b.db", dir);
  run_out r = RUN("cache", "export", f1, "--arch", "sm_80", "--json",
                  "--cache-dir", g_seed);
  assert_int_equal(r.rc, 0);
  jv *v = json_of(&r);
  assert_int_equal(jv_int(v, "exported"), g_n);
  jv_free(v);
  run_free(&r);
  r = RUN("cache", "export", f2, "--arch", "sm_90a", "--json", "--cache-dir",
          g_seed);
  assert_int_equal(r.rc, 0);
  v = json_of(&r);
  assert_int_equal(jv_int(v, "exported"), 0);
  jv_free(v);
  run_free(&r);
}

static void test_cache_import_garbage(void **state) {
  (void)state;
  char dir[1024], file[1200], dst[1024];
  new_dir("garbage", dir, sizeof dir);
  snprintf(file, sizeof file, "%s/garbage.db", dir);
  static const char junk[] = "this is not a sagejit cache\n";
  assert_int_equal(tu_write_file(file, junk, sizeof junk - 1), 0);
  new_dir("garbage-dst", dst, sizeof dst);
  run_out r = RUN("cache", "import", file, "--json", "--cache-dir", dst);
  assert_int_equal(r.rc, 3);
  assert_true(strlen(r.err) > 0);
  assert_null(strchr(r.out, '{'));
  run_free(&r);
  assert_int_equal(entries_of(dst), 0);

  /* a real export with one bad row is rejected whole */
  char good[1200], bad_dst[1024];
  snprintf(good, sizeof good, "%s/one-bad.db", dir);
  r = RUN("cache", "export", good, "--cache-dir", g_seed);
  assert_int_equal(r.rc, 0);
  run_free(&r);
  corrupt_one(good);
  new_dir("bad-dst", bad_dst, sizeof bad_dst);
  r = RUN("cache", "import", good, "--cache-dir", bad_dst);
  assert_int_equal(r.rc, 3);
  run_free(&r);
  assert_int_equal(entries_of(bad_dst), 0);

  /* a missing file */
  char missing[1200];
  snprintf(missing, sizeof missing, "%s/missing.db", dir);
  r = RUN("cache", "import", missing, "--cache-dir", dst);
  assert_int_equal(r.rc, 3);
  run_free(&r);
}

/* Without NVRTC: warm is a missing requirement (2); info and the cache
 * commands still work. */
static void test_no_nvrtc(void **state) {
  (void)state;
  char *env[] = {(char *)"SAGEJIT_NVRTC=/nonexistent/libnvrtc.so.13", NULL};
  char dir[1024];
  seeded_copy(dir, sizeof dir);
  run_out r = RUN_ENV(env, "warm", "--arch", "sm_80", "--cache-dir", dir);
  assert_int_equal(r.rc, 2);
  assert_non_null(strstr(r.err, "NVRTC"));
  run_free(&r);
  r = RUN_ENV(env, "info", "--json", "--cache-dir", dir);
  assert_int_equal(r.rc, 0);
  jv *v = json_of(&r);
  assert_false(jv_get(jv_get(v, "nvrtc"), "found")->b);
  assert_int_equal(jv_int(jv_get(v, "cache"), "entries"), g_n);
  jv_free(v);
  run_free(&r);
  r = RUN_ENV(env, "cache", "verify", "--json", "--cache-dir", dir);
  assert_int_equal(r.rc, 0);
  v = json_of(&r);
  assert_int_equal(jv_int(v, "ok"), g_n);
  jv_free(v);
  run_free(&r);
}

static void test_check_bench(void **state) {
  (void)state;
  char dir[1024];
  new_dir("gpu", dir, sizeof dir);
  if (!g_gpu) {
    run_out r = RUN("check", "--cache-dir", dir);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "sagejit check needs a CUDA GPU"));
    assert_string_equal(r.out, "");
    run_free(&r);
    r = RUN("check", "--quick", "--json", "--cache-dir", dir);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "needs a CUDA GPU"));
    run_free(&r);
    r = RUN("bench", "--cache-dir", dir);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "sagejit bench needs a CUDA GPU"));
    run_free(&r);
    r = RUN("bench", "--first-call", "--json", "--cache-dir", dir);
    assert_int_equal(r.rc, 2);
    run_free(&r);
    /* usage errors still win over the missing GPU */
    r = RUN("check", "--dtype", "fp64", "--cache-dir", dir);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "fp64"));
    run_free(&r);
    return;
  }
  run_out r = RUN("check", "--quick", "--json", "--cache-dir", dir);
  if (r.rc != 0)
    dump(&r);
  assert_int_equal(r.rc, 0);
  jv *v = json_of(&r);
  assert_true(jv_int(v, "cases") > 0);
  assert_int_equal(jv_int(v, "failed"), 0);
  assert_int_equal(jv_int(v, "passed") + jv_int(v, "skipped"),
                   jv_int(v, "cases"));
  const jv *res = jv_get(v, "results");
  assert_true(res && res->t == JV_ARR &&
              (int64_t)res->n == jv_int(v, "cases"));
  jv_free(v);
  run_free(&r);
  r = RUN("bench", "--seq", "1024", "--head-dim", "64", "--causal", "0",
          "--batch", "1", "--heads", "8", "--iters", "3", "--json",
          "--cache-dir", dir);
  if (r.rc != 0)
    dump(&r);
  assert_int_equal(r.rc, 0);
  v = json_of(&r);
  res = jv_get(v, "results");
  assert_true(res && res->t == JV_ARR && res->n == 1);
  assert_true(jv_get(res->items[0], "attn_tops")->num > 0);
  jv_free(v);
  run_free(&r);
}

static const char *const k_help_cmds[][3] = {
    {"info", NULL, NULL},          {"warm", NULL, NULL},
    {"cache", NULL, NULL},         {"cache", "stats", NULL},
    {"cache", "ls", NULL},         {"cache", "verify", NULL},
    {"cache", "prune", NULL},      {"cache", "clear", NULL},
    {"cache", "export", NULL},     {"cache", "import", NULL},
    {"check", NULL, NULL},         {"bench", NULL, NULL},
};

static void test_help(void **state) {
  (void)state;
  run_out r = RUN("--help");
  assert_int_equal(r.rc, 0);
  assert_non_null(strstr(r.out, "Usage: sagejit"));
  assert_non_null(strstr(r.out, "Exit status"));
  assert_string_equal(r.err, "");
  run_free(&r);
  for (size_t i = 0; i < sizeof k_help_cmds / sizeof k_help_cmds[0]; i++) {
    for (int h = 0; h < 2; h++) {
      const char *flag = h ? "-h" : "--help";
      const char *a = k_help_cmds[i][0], *b = k_help_cmds[i][1];
      r = b ? RUN(a, b, flag) : RUN(a, flag);
      if (r.rc != 0 || !strstr(r.out, "Usage: sagejit"))
        dump(&r);
      assert_int_equal(r.rc, 0);
      assert_non_null(strstr(r.out, "Usage: sagejit"));
      assert_non_null(strstr(r.out, a));
      assert_string_equal(r.err, "");
      if (strcmp(a, "cache") || b)
        assert_non_null(strstr(r.out, "--cache-dir"));
      run_free(&r);
    }
  }
  r = RUN("help", "warm");
  assert_int_equal(r.rc, 0);
  assert_non_null(strstr(r.out, "--head-dim"));
  run_free(&r);
}

static void expect_usage(run_out r, const char *in_err) {
  if (r.rc != 2 || (in_err && !strstr(r.err, in_err)))
    dump(&r);
  assert_int_equal(r.rc, 2);
  assert_true(strlen(r.err) > 0);
  if (in_err)
    assert_non_null(strstr(r.err, in_err));
  assert_string_equal(r.out, "");
  run_free(&r);
}

static void test_usage_errors(void **state) {
  (void)state;
  /* a usage error touches nothing: not even the default cache dir */
  char untouched[1024], env_dir[1100];
  snprintf(untouched, sizeof untouched, "%s/must-not-exist", g_base);
  snprintf(env_dir, sizeof env_dir, "SAGEJIT_CACHE_DIR=%s", untouched);
  char *env[] = {env_dir, NULL};
#define U(in_err, ...) expect_usage(RUN_ENV(env, __VA_ARGS__), in_err)
  for (size_t i = 0; i < sizeof k_help_cmds / sizeof k_help_cmds[0]; i++) {
    const char *a = k_help_cmds[i][0], *b = k_help_cmds[i][1];
    if (b)
      U("--no-such-flag", a, b, "--no-such-flag");
    else
      U("--no-such-flag", a, "--no-such-flag");
  }
  U("frobnicate", "frobnicate");
  U("frobnicate", "cache", "frobnicate");
  U(NULL, "cache");
  expect_usage(RUN_ENV(env, (const char *)NULL), NULL);
  U("extra-argument", "info", "extra-argument");
  U("fp64", "warm", "--dtype", "fp64");
  U("sm_75", "warm", "--arch", "sm_75");
  U("--arch", "warm", "--arch", "sm_80,,sm_90a");
  U("sixty-four", "warm", "--head-dim", "sixty-four");
  U("--causal", "warm", "--causal", "2");
  U("fp4pv", "warm", "--family", "fp4pv");
  U("per_tensor", "warm", "--quant", "per_tensor");
  U("--accum", "warm", "--accum", "fp64");
  U("--jobs", "warm", "--jobs", "many");
  U("--jobs", "warm", "--jobs");
  U("--json", "warm", "--json=yes");
  U("--max-bytes", "cache", "prune");
  U("12Q", "cache", "prune", "--max-bytes", "12Q");
  U("FILE", "cache", "export");
  U("sm_7", "cache", "export", "/nonexistent/x.db", "--arch", "sm_7");
  U("FILE", "cache", "import");
  U("extra", "cache", "stats", "extra");
  U("--heads", "bench", "--heads", "0");
  U("--heads-kv", "bench", "--heads", "8", "--heads-kv", "3");
  U("--seq", "bench", "--seq", "0");
  U("--seed", "check", "--seed", "-1");
#undef U
  struct stat st;
  assert_int_equal(stat(untouched, &st), -1);
  assert_int_equal(errno, ENOENT);
}

static void test_json_contract(void **state) {
  (void)state;
  /* the last stdout line is the one JSON object (json_of asserts it),
   * also with -v (library lines go to stderr) */
  char dir[1024];
  seeded_copy(dir, sizeof dir);
  const char *const cmds[][4] = {
      {"info", NULL, NULL, NULL},
      {"warm", "-v", "--arch", "sm_80"},
      {"cache", "stats", NULL, NULL},
      {"cache", "ls", NULL, NULL},
      {"cache", "verify", "-v", NULL},
      {"cache", "prune", "--max-bytes", "1T"},
  };
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    const char *argv[12];
    int n = 0;
    for (int k = 0; k < 4 && cmds[i][k]; k++)
      argv[n++] = cmds[i][k];
    argv[n++] = "--json";
    argv[n++] = "--cache-dir";
    argv[n++] = dir;
    while (n < 11)
      argv[n++] = NULL;
    run_out r = run_env(NULL, argv[0], argv[1], argv[2], argv[3], argv[4],
                        argv[5], argv[6], argv[7], argv[8], argv[9],
                        (const char *)NULL);
    if (r.rc != 0)
      dump(&r);
    assert_int_equal(r.rc, 0);
    jv *v = json_of(&r);
    jv_free(v);
    /* nothing but the JSON line: no text before it on stdout */
    assert_int_equal(r.out[0], '{');
    run_free(&r);
  }
}

/* Progress goes to a TTY only: run warm on a pseudo-terminal. */
static char *run_on_pty(const char *const *args) {
  int master = -1;
  pid_t pid = forkpty(&master, NULL, NULL, NULL);
  assert_true(pid >= 0);
  if (pid == 0) {
    /* stdout to /dev/null: only stderr stays on the terminal */
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0)
      dup2(devnull, STDOUT_FILENO);
    execv(SJ_CLI_PATH, (char *const *)args);
    _exit(127);
  }
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  assert_non_null(buf);
  for (;;) {
    struct pollfd p = {master, POLLIN, 0};
    int pr = poll(&p, 1, 120000);
    if (pr <= 0)
      break;
    ssize_t r = read(master, buf + len, cap - 1 - len);
    if (r <= 0)
      break; /* EIO once the child closed the terminal */
    len += (size_t)r;
    if (len >= cap - 1)
      break;
  }
  buf[len] = 0;
  int status = 0;
  waitpid(pid, &status, 0);
  close(master);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  return buf;
}

static void test_progress_tty_only(void **state) {
  (void)state;
  const char *with[] = {SJ_CLI_PATH, "warm", "--arch", "sm_80", SMALL_MATRIX,
                        "--cache-dir", g_seed, NULL};
  char *tty = run_on_pty(with);
  assert_non_null(strstr(tty, "warm ["));
  assert_non_null(strchr(tty, '\r'));
  free(tty);
  const char *without[] = {SJ_CLI_PATH, "warm", "--no-progress", "--arch",
                           "sm_80", SMALL_MATRIX, "--cache-dir", g_seed,
                           NULL};
  tty = run_on_pty(without);
  assert_null(strstr(tty, "warm ["));
  free(tty);
  /* not a TTY: no bar */
  run_out r = RUN("warm", "--arch", "sm_80", SMALL_MATRIX, "--cache-dir",
                  g_seed);
  assert_int_equal(r.rc, 0);
  assert_null(strchr(r.err, '\r'));
  assert_null(strstr(r.err, "warm ["));
  run_free(&r);
}

/* Four warm processes at once on one empty cache. */
static void test_concurrent_warm(void **state) {
  (void)state;
  char dir[1024];
  new_dir("concurrent", dir, sizeof dir);
  enum { N = 4 };
  pid_t pids[N];
  char outs[N][1200];
  for (int i = 0; i < N; i++) {
    snprintf(outs[i], sizeof outs[i], "%s.out%d", dir, i);
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) {
      int fd = open(outs[i], O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd < 0)
        _exit(126);
      dup2(fd, STDOUT_FILENO);
      const char *args[] = {SJ_CLI_PATH, "warm", "--arch", "sm_80",
                            SMALL_MATRIX, "--json", "--cache-dir", dir, NULL};
      execv(SJ_CLI_PATH, (char *const *)args);
      _exit(127);
    }
  }
  int64_t compiled = 0;
  for (int i = 0; i < N; i++) {
    int status = 0;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    char *out = tu_read_file(outs[i], NULL);
    assert_non_null(out);
    run_out r = {0, out, strdup("")};
    jv *v = json_of(&r);
    assert_int_equal(jv_int(v, "failed"), 0);
    assert_int_equal(jv_int(v, "total"), g_n);
    assert_int_equal(jv_int(v, "compiled") + jv_int(v, "cached"), g_n);
    compiled += jv_int(v, "compiled");
    jv_free(v);
    run_free(&r);
    unlink(outs[i]);
  }
  assert_true(compiled >= g_n);
  assert_int_equal(entries_of(dir), g_n);
  run_out r = RUN("cache", "verify", "--json", "--cache-dir", dir);
  assert_int_equal(r.rc, 0);
  jv *v = json_of(&r);
  assert_int_equal(jv_int(v, "ok"), g_n);
  jv_free(v);
  run_free(&r);
}

static void test_cache_unusable(void **state) {
  (void)state;
  /* the cache directory is a regular file: no cache can be opened there */
  char dir[1024], file[1200];
  new_dir("unusable", dir, sizeof dir);
  snprintf(file, sizeof file, "%s/not-a-dir", dir);
  assert_int_equal(tu_write_file(file, "x", 1), 0);
  run_out r = RUN("cache", "stats", "--json", "--cache-dir", file);
  assert_int_equal(r.rc, 3);
  assert_true(strlen(r.err) > 0);
  run_free(&r);
  /* info still reports, and exits 0 */
  r = RUN("info", "--json", "--cache-dir", file);
  assert_int_equal(r.rc, 0);
  jv *v = json_of(&r);
  const jv *cache = jv_get(v, "cache");
  assert_non_null(cache);
  assert_false(jv_get(cache, "usable")->b);
  jv_free(v);
  run_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_version),
      cmocka_unit_test(test_info),
      cmocka_unit_test(test_info_env_cache_dir),
      cmocka_unit_test(test_warm_then_cached),
      cmocka_unit_test(test_warm_two_archs),
      cmocka_unit_test(test_warm_failure),
      cmocka_unit_test(test_warm_verbose_quiet),
      cmocka_unit_test(test_cache_ls),
      cmocka_unit_test(test_cache_verify),
      cmocka_unit_test(test_cache_prune_clear),
      cmocka_unit_test(test_cache_export_import),
      cmocka_unit_test(test_cache_export_arch),
      cmocka_unit_test(test_cache_import_garbage),
      cmocka_unit_test(test_cache_unusable),
      cmocka_unit_test(test_no_nvrtc),
      cmocka_unit_test(test_check_bench),
      cmocka_unit_test(test_help),
      cmocka_unit_test(test_usage_errors),
      cmocka_unit_test(test_json_contract),
      cmocka_unit_test(test_progress_tty_only),
      cmocka_unit_test(test_concurrent_warm),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
