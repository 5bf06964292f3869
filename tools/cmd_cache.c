/*
 * cmd_cache.c -- `sagejit cache ACTION`: stats, ls, verify, prune, clear,
 * export and import on the kernel cache.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

typedef struct cache_opts {
  cli_common common;
  const char *max_bytes;
  const char *arch;
  /* validated before the cache is opened */
  int64_t max_bytes_v;
  cli_list archs;
} cache_opts;

typedef int (*action_fn)(const cli_command *cmd, cache_opts *o,
                         sj_context *ctx);

typedef struct action {
  cli_command cmd;
  action_fn run;
} action;

/* ------------------------------------------------------------------ stats */

typedef struct target_count {
  char target[32];
  int64_t count, bytes;
} target_count;

typedef struct stats_acc {
  target_count *rows;
  size_t n, cap;
  int oom;
} stats_acc;

static int stats_cb(void *user, const sj_cache_entry *e) {
  stats_acc *a = user;
  const char *t = e->target ? e->target : "";
  for (size_t i = 0; i < a->n; i++)
    if (!strcmp(a->rows[i].target, t)) {
      a->rows[i].count++;
      a->rows[i].bytes += e->image_bytes;
      return 0;
    }
  if (a->n == a->cap) {
    size_t nc = a->cap ? a->cap * 2 : 8;
    target_count *nr = realloc(a->rows, nc * sizeof *nr);
    if (!nr) {
      a->oom = 1;
      return 1;
    }
    a->rows = nr;
    a->cap = nc;
  }
  target_count *r = &a->rows[a->n++];
  snprintf(r->target, sizeof r->target, "%s", t);
  r->count = 1;
  r->bytes = e->image_bytes;
  return 0;
}

static int lib_error(sj_context *ctx, const char *what, sj_status st) {
  cli_err("%s: %s: %s", what, sj_status_string(st),
          sj_context_last_error(ctx));
  int rc = cli_exit_for_status(st);
  return rc == CLI_EXIT_OK || rc == CLI_EXIT_FAILED ? CLI_EXIT_ERROR : rc;
}

static int do_stats(const cli_command *cmd, cache_opts *o, sj_context *ctx) {
  (void)cmd;
  sj_cache_info ci;
  sj_status st = sj_cache_get_info(ctx, &ci);
  if (st != SJ_OK)
    return lib_error(ctx, "reading the cache", st);
  stats_acc a;
  memset(&a, 0, sizeof a);
  st = sj_cache_list(ctx, stats_cb, &a);
  if (st != SJ_OK || a.oom) {
    free(a.rows);
    return lib_error(ctx, "listing the cache",
                     st != SJ_OK ? st : SJ_ERR_OUT_OF_MEMORY);
  }
  int rc = CLI_EXIT_OK;
  if (o->common.json) {
    cli_json j;
    cj_init(&j);
    cj_obj_begin(&j, NULL);
    cj_str(&j, "path", ci.path);
    cj_bool(&j, "writable", ci.writable);
    cj_int(&j, "schema_version", ci.schema_version);
    cj_int(&j, "entries", ci.entries);
    cj_int(&j, "bytes", ci.bytes);
    cj_obj_begin(&j, "by_target");
    for (size_t i = 0; i < a.n; i++)
      cj_int(&j, a.rows[i].target, a.rows[i].count);
    cj_obj_end(&j);
    cj_obj_begin(&j, "bytes_by_target");
    for (size_t i = 0; i < a.n; i++)
      cj_int(&j, a.rows[i].target, a.rows[i].bytes);
    cj_obj_end(&j);
    cj_obj_end(&j);
    rc = cj_print(&j) == 0 ? CLI_EXIT_OK : CLI_EXIT_ERROR;
    cj_free(&j);
  } else {
    char b[32];
    cli_format_bytes(ci.bytes, b, sizeof b);
    printf("path      %s\n", ci.path);
    printf("writable  %s\n", ci.writable ? "yes" : "no");
    printf("schema    %d\n", ci.schema_version);
    printf("entries   %lld\n", (long long)ci.entries);
    printf("bytes     %lld (%s)\n", (long long)ci.bytes, b);
    for (size_t i = 0; i < a.n; i++) {
      cli_format_bytes(a.rows[i].bytes, b, sizeof b);
      printf("  %-12s %6lld entr%s  %s\n", a.rows[i].target,
             (long long)a.rows[i].count, a.rows[i].count == 1 ? "y  " : "ies",
             b);
    }
    fflush(stdout);
  }
  free(a.rows);
  return rc;
}

/* --------------------------------------------------------------------- ls */

typedef struct ls_state {
  cli_json *j; /* NULL: human output */
  int64_t n;
} ls_state;

static void format_time(int64_t t, char *buf, size_t size) {
  if (t <= 0) {
    snprintf(buf, size, "-");
    return;
  }
  time_t tt = (time_t)t;
  struct tm tm;
  if (!localtime_r(&tt, &tm) || !strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm))
    snprintf(buf, size, "%lld", (long long)t);
}

static int ls_cb(void *user, const sj_cache_entry *e) {
  ls_state *s = user;
  s->n++;
  if (s->j) {
    cli_json *j = s->j;
    cj_obj_begin(j, NULL);
    cj_str(j, "key", e->key);
    cj_str(j, "target", e->target);
    cj_str(j, "kernel", e->kernel);
    cj_str(j, "kind", e->kind);
    cj_int(j, "bytes", e->image_bytes);
    cj_num(j, "compile_ms", e->compile_ms);
    cj_int(j, "created", e->created);
    cj_int(j, "last_used", e->last_used);
    cj_int(j, "hits", e->hits);
    cj_obj_end(j);
    return j->oom;
  }
  char when[32];
  format_time(e->last_used, when, sizeof when);
  printf("%-32s  %-10s %-5s %10lld %6lld  %-19s  %s\n", e->key,
         e->target ? e->target : "", e->kind ? e->kind : "",
         (long long)e->image_bytes, (long long)e->hits, when,
         e->kernel ? e->kernel : "");
  return 0;
}

static int do_ls(const cli_command *cmd, cache_opts *o, sj_context *ctx) {
  (void)cmd;
  ls_state s;
  memset(&s, 0, sizeof s);
  cli_json j;
  cj_init(&j);
  if (o->common.json) {
    s.j = &j;
    cj_obj_begin(&j, NULL);
    cj_arr_begin(&j, "entries");
  } else {
    printf("%-32s  %-10s %-5s %10s %6s  %-19s  %s\n", "KEY", "TARGET", "KIND",
           "BYTES", "HITS", "LAST USED", "KERNEL");
  }
  sj_status st = sj_cache_list(ctx, ls_cb, &s);
  int rc = CLI_EXIT_OK;
  if (st != SJ_OK) {
    rc = lib_error(ctx, "listing the cache", st);
  } else if (o->common.json) {
    cj_arr_end(&j);
    cj_int(&j, "count", s.n);
    cj_obj_end(&j);
    rc = cj_print(&j) == 0 ? CLI_EXIT_OK : CLI_EXIT_ERROR;
  } else {
    printf("%lld entr%s\n", (long long)s.n, s.n == 1 ? "y" : "ies");
  }
  fflush(stdout);
  cj_free(&j);
  return rc;
}

/* ----------------------------------------------------------------- verify */

static int do_verify(const cli_command *cmd, cache_opts *o, sj_context *ctx) {
  (void)cmd;
  int64_t checked = 0, ok = 0, corrupt = 0;
  sj_status st = sj_cache_verify(ctx, &checked, &ok, &corrupt);
  if (st != SJ_OK)
    return lib_error(ctx, "verifying the cache", st);
  if (o->common.json) {
    cli_json j;
    cj_init(&j);
    cj_obj_begin(&j, NULL);
    cj_int(&j, "checked", checked);
    cj_int(&j, "ok", ok);
    cj_int(&j, "corrupt", corrupt);
    cj_obj_end(&j);
    int prc = cj_print(&j);
    cj_free(&j);
    if (prc != 0)
      return CLI_EXIT_ERROR;
  } else {
    printf("verify: %lld checked, %lld ok, %lld corrupt%s\n",
           (long long)checked, (long long)ok, (long long)corrupt,
           corrupt ? " (removed)" : "");
    fflush(stdout);
  }
  if (corrupt > 0) {
    cli_note("%lld corrupt entr%s removed from the cache", (long long)corrupt,
             corrupt == 1 ? "y was" : "ies were");
    return CLI_EXIT_FAILED;
  }
  return CLI_EXIT_OK;
}

/* ------------------------------------------------------------ prune/clear */

static int after_counts(sj_context *ctx, int64_t *entries, int64_t *bytes) {
  sj_cache_info ci;
  if (sj_cache_get_info(ctx, &ci) != SJ_OK)
    return -1;
  *entries = ci.entries;
  *bytes = ci.bytes;
  return 0;
}

static int do_prune(const cli_command *cmd, cache_opts *o, sj_context *ctx) {
  (void)cmd;
  const int64_t max = o->max_bytes_v;
  int64_t removed = 0;
  sj_status st = sj_cache_prune(ctx, max, &removed);
  if (st != SJ_OK)
    return lib_error(ctx, "pruning the cache", st);
  int64_t entries = -1, bytes = -1;
  after_counts(ctx, &entries, &bytes);
  if (o->common.json) {
    cli_json j;
    cj_init(&j);
    cj_obj_begin(&j, NULL);
    cj_int(&j, "removed", removed);
    cj_int(&j, "max_bytes", max);
    cj_int(&j, "entries", entries);
    cj_int(&j, "bytes", bytes);
    cj_obj_end(&j);
    int prc = cj_print(&j);
    cj_free(&j);
    return prc == 0 ? CLI_EXIT_OK : CLI_EXIT_ERROR;
  }
  char b[32];
  cli_format_bytes(bytes, b, sizeof b);
  printf("prune: removed %lld entr%s; %lld left (%s)\n", (long long)removed,
         removed == 1 ? "y" : "ies", (long long)entries, b);
  fflush(stdout);
  return CLI_EXIT_OK;
}

static int do_clear(const cli_command *cmd, cache_opts *o, sj_context *ctx) {
  (void)cmd;
  int64_t removed = 0;
  sj_status st = sj_cache_clear(ctx, &removed);
  if (st != SJ_OK)
    return lib_error(ctx, "clearing the cache", st);
  if (o->common.json) {
    cli_json j;
    cj_init(&j);
    cj_obj_begin(&j, NULL);
    cj_int(&j, "removed", removed);
    cj_obj_end(&j);
    int prc = cj_print(&j);
    cj_free(&j);
    return prc == 0 ? CLI_EXIT_OK : CLI_EXIT_ERROR;
  }
  printf("clear: removed %lld entr%s\n", (long long)removed,
         removed == 1 ? "y" : "ies");
  fflush(stdout);
  return CLI_EXIT_OK;
}

/* ---------------------------------------------------------- export/import */

static int do_export(const cli_command *cmd, cache_opts *o, sj_context *ctx) {
  (void)cmd;
  const char *path = o->common.pos[0];
  const cli_list *archs = &o->archs;
  int rc = CLI_EXIT_OK;
  if (access(path, F_OK) == 0) {
    cli_err("cache export: %s exists; not overwriting it", path);
    return CLI_EXIT_ERROR;
  }
  int64_t exported = 0;
  sj_status st = sj_cache_export(ctx, path, archs->n ? archs->item : NULL,
                                 archs->n, &exported);
  if (st != SJ_OK) {
    rc = lib_error(ctx, "cache export", st);
  } else if (o->common.json) {
    cli_json j;
    cj_init(&j);
    cj_obj_begin(&j, NULL);
    cj_int(&j, "exported", exported);
    cj_str(&j, "path", path);
    cj_arr_begin(&j, "targets");
    for (size_t i = 0; i < archs->n; i++)
      cj_str(&j, NULL, archs->item[i]);
    cj_arr_end(&j);
    cj_obj_end(&j);
    rc = cj_print(&j) == 0 ? CLI_EXIT_OK : CLI_EXIT_ERROR;
    cj_free(&j);
  } else {
    printf("export: %lld entr%s written to %s\n", (long long)exported,
           exported == 1 ? "y" : "ies", path);
    fflush(stdout);
  }
  return rc;
}

static int do_import(const cli_command *cmd, cache_opts *o, sj_context *ctx) {
  (void)cmd;
  const char *path = o->common.pos[0];
  if (access(path, R_OK) != 0) {
    cli_err("cache import: cannot read %s: %s", path, strerror(errno));
    return CLI_EXIT_ERROR;
  }
  int64_t imported = 0, skipped = 0;
  sj_status st = sj_cache_import(ctx, path, &imported, &skipped);
  if (st != SJ_OK)
    return lib_error(ctx, "cache import", st);
  if (o->common.json) {
    cli_json j;
    cj_init(&j);
    cj_obj_begin(&j, NULL);
    cj_int(&j, "imported", imported);
    cj_int(&j, "skipped", skipped);
    cj_obj_end(&j);
    int prc = cj_print(&j);
    cj_free(&j);
    return prc == 0 ? CLI_EXIT_OK : CLI_EXIT_ERROR;
  }
  printf("import: %lld entr%s imported, %lld skipped (already present)\n",
         (long long)imported, imported == 1 ? "y" : "ies",
         (long long)skipped);
  fflush(stdout);
  return CLI_EXIT_OK;
}

/* ---------------------------------------------------------------- tables */

static const cli_opt k_plain_opts[] = {CLI_COMMON_OPTS, CLI_OPT_TABLE_END};

static const cli_opt k_prune_opts[] = {
    CLI_OPT("max-bytes", 0, CLI_OPT_STR, cache_opts, max_bytes, "SIZE",
            "evict least-recently-used entries until the images total at "
            "most SIZE bytes (suffixes K, M, G, T: powers of 1024)"),
    CLI_COMMON_OPTS, CLI_OPT_TABLE_END};

static const cli_opt k_export_opts[] = {
    CLI_OPT("arch", 0, CLI_OPT_STR, cache_opts, arch, "LIST",
            "only the entries of these targets (default: all)"),
    CLI_COMMON_OPTS, CLI_OPT_TABLE_END};

/* Each action's name is "cache <action>"; `name + 6` is the action. */
static const action k_actions[] = {
    {{"cache stats", "[--json]",
      "Shows the cache file, whether it is writable, its schema version, its\n"
      "entries and bytes, and the entries per target.",
      "JSON: {\"path\", \"writable\", \"schema_version\", \"entries\", "
      "\"bytes\",\n"
      "  \"by_target\": {TARGET: COUNT}, \"bytes_by_target\": {TARGET: "
      "BYTES}}\n",
      k_plain_opts, 0},
     do_stats},
    {{"cache ls", "[--json]",
      "Lists the entries: key, target, kind, bytes, hits, last use, kernel.",
      "JSON: {\"entries\": [{\"key\", \"target\", \"kernel\", \"kind\", "
      "\"bytes\",\n"
      "  \"compile_ms\", \"created\", \"last_used\", \"hits\"}], "
      "\"count\"}\n",
      k_plain_opts, 0},
     do_ls},
    {{"cache verify", "[--json]",
      "Checks every image against its checksum and header; removes bad "
      "rows.",
      "JSON: {\"checked\", \"ok\", \"corrupt\"}.  Exits 1 if any row was "
      "corrupt.\n",
      k_plain_opts, 0},
     do_verify},
    {{"cache prune", "--max-bytes SIZE [--json]",
      "Evicts least-recently-used entries until the images total at most "
      "SIZE.",
      "JSON: {\"removed\", \"max_bytes\", \"entries\", \"bytes\"} (after "
      "pruning).\n",
      k_prune_opts, 0},
     do_prune},
    {{"cache clear", "[--json]", "Removes every entry.",
      "JSON: {\"removed\"}\n", k_plain_opts, 0},
     do_clear},
    {{"cache export", "FILE [--arch LIST] [--json]",
      "Writes a standalone cache file with the entries (of the targets "
      "given).\nFILE must not exist (exit 3 if it does).",
      "JSON: {\"exported\", \"path\", \"targets\"}\n", k_export_opts, 1},
     do_export},
    {{"cache import", "FILE [--json]",
      "Verifies a cache file whole and merges its entries; a file with any\n"
      "bad row is rejected whole (exit 3) and nothing is imported.",
      "JSON: {\"imported\", \"skipped\"}\n", k_plain_opts, 1},
     do_import},
};
#define N_ACTIONS (sizeof k_actions / sizeof k_actions[0])

static void cache_usage(FILE *f) {
  fputs("Usage: sagejit cache ACTION [options]\n\n"
        "Maintenance of the kernel cache (a SQLite file in the cache "
        "directory).\n\nActions:\n",
        f);
  for (size_t i = 0; i < N_ACTIONS; i++)
    fprintf(f, "  %-7s %s\n", k_actions[i].cmd.name + 6,
            k_actions[i].cmd.synopsis);
  fputs("\nOptions of every action:\n"
        "      --cache-dir DIR   kernel cache directory\n"
        "      --json            one JSON object as the last line of stdout\n"
        "  -q, --quiet / -v, --verbose / --no-progress / -h, --help\n\n"
        "Run 'sagejit cache ACTION --help' for an action's options.\n"
        "\nExit status: 0 success; 1 verify found corrupt rows; 2 usage "
        "error;\n3 library or I/O error (cache unusable, export target "
        "exists,\nmalformed import).\n",
        f);
}

int cmd_cache(int argc, char **argv) {
  if (argc < 1) {
    cache_usage(stderr);
    return CLI_EXIT_USAGE;
  }
  if (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
    cache_usage(stdout);
    return CLI_EXIT_OK;
  }
  const action *act = NULL;
  for (size_t i = 0; i < N_ACTIONS; i++)
    if (!strcmp(argv[0], k_actions[i].cmd.name + 6))
      act = &k_actions[i];
  if (!act) {
    fprintf(stderr, "sagejit cache: unknown action '%s'\n"
                    "Try 'sagejit cache --help'.\n", argv[0]);
    return CLI_EXIT_USAGE;
  }
  cache_opts o;
  memset(&o, 0, sizeof o);
  int rc = cli_start(&act->cmd, argc - 1, argv + 1, &o);
  if (rc != CLI_CONTINUE)
    return rc;
  if (o.common.n_pos < act->cmd.max_pos)
    return cli_usage_error(&act->cmd, "missing FILE");
  if (act->run == do_prune) {
    if (!o.max_bytes)
      return cli_usage_error(&act->cmd, "--max-bytes is required");
    o.max_bytes_v = cli_parse_size(o.max_bytes);
    if (o.max_bytes_v < 0)
      return cli_usage_error(&act->cmd, "invalid --max-bytes '%s' (expected "
                             "bytes with an optional K, M, G or T suffix)",
                             o.max_bytes);
  }
  if ((rc = cli_parse_archs(&act->cmd, "--arch", o.arch, &o.archs)) != 0)
    return rc;

  sj_context *ctx = NULL;
  sj_status st = cli_cache_context(&ctx, &o.common, NULL);
  if (st != SJ_OK) {
    cli_list_free(&o.archs);
    return CLI_EXIT_ERROR;
  }
  if (!sj_context_cache_path(ctx)[0]) {
    cli_err("the kernel cache is not usable: no cache file is open "
            "(disabled by SAGEJIT_CACHE_DISABLE, or the directory cannot "
            "be created or opened; -v shows why)");
    sj_context_destroy(ctx);
    cli_list_free(&o.archs);
    return CLI_EXIT_ERROR;
  }
  rc = act->run(&act->cmd, &o, ctx);
  sj_context_destroy(ctx);
  cli_list_free(&o.archs);
  return rc;
}
