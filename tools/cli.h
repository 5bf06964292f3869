/*
 * cli.h -- shared declarations of the `sagejit` command-line tool.
 *
 * The tool is a thin client of the public header sagejit.h: option parsing,
 * progress, printing.  Results go to stdout, progress and diagnostics to
 * stderr.  With --json, stdout is exactly one JSON object on one line.
 */
#ifndef SJ_CLI_H
#define SJ_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sagejit.h"

/* ------------------------------------------------------------- exit codes */
enum {
  CLI_EXIT_OK = 0,      /* success */
  CLI_EXIT_FAILED = 1,  /* ran, but something failed (compile, gate, verify) */
  CLI_EXIT_USAGE = 2,   /* bad usage or a missing requirement (GPU, NVRTC) */
  CLI_EXIT_ERROR = 3    /* library or I/O error (cache, files) */
};

/* The exit code for a library status that ends a command. */
int cli_exit_for_status(sj_status st);

/* ---------------------------------------------------------------- options */
#define CLI_MAX_POSITIONAL 4

/* Options every subcommand accepts.  Every subcommand's option struct starts
 * with this, so that the common option rows work for all of them. */
typedef struct cli_common {
  const char *cache_dir;
  int json;
  int quiet;
  int verbose;
  int no_progress;
  int help;
  const char *pos[CLI_MAX_POSITIONAL]; /* positional arguments */
  int n_pos;
} cli_common;

typedef enum cli_opt_kind {
  CLI_OPT_FLAG,  /* int, set to 1 */
  CLI_OPT_COUNT, /* int, incremented (-vv) */
  CLI_OPT_STR,   /* const char *, the argument itself (lists, paths) */
  CLI_OPT_INT,   /* long long, decimal */
  CLI_OPT_END
} cli_opt_kind;

typedef struct cli_opt {
  const char *lname; /* without "--" */
  char sname;        /* 0: none */
  cli_opt_kind kind;
  size_t offset; /* into the subcommand's option struct */
  const char *meta; /* argument name in the usage */
  const char *help; /* NULL: hidden */
} cli_opt;

#define CLI_OPT(l, s, k, type, field, meta, help)                              \
  { l, s, k, offsetof(type, field), meta, help }
#define CLI_OPT_TABLE_END { NULL, 0, CLI_OPT_END, 0, NULL, NULL }

/* The common rows; put them last in every table. */
#define CLI_COMMON_OPTS                                                        \
  CLI_OPT("cache-dir", 0, CLI_OPT_STR, cli_common, cache_dir, "DIR",           \
          "kernel cache directory (default: $SAGEJIT_CACHE_DIR, "             \
          "$XDG_CACHE_HOME/sagejit, ~/.cache/sagejit)"),                       \
  CLI_OPT("json", 0, CLI_OPT_FLAG, cli_common, json, NULL,                     \
          "print one JSON object as the last line of stdout"),                 \
  CLI_OPT("quiet", 'q', CLI_OPT_FLAG, cli_common, quiet, NULL,                 \
          "less output on stderr (errors only, no progress)"),                 \
  CLI_OPT("verbose", 'v', CLI_OPT_COUNT, cli_common, verbose, NULL,            \
          "print library log lines (-v info, -vv debug)"),                     \
  CLI_OPT("no-progress", 0, CLI_OPT_FLAG, cli_common, no_progress, NULL,       \
          "never draw a progress bar"),                                        \
  CLI_OPT("help", 'h', CLI_OPT_FLAG, cli_common, help, NULL,                   \
          "show this help and exit")

/* A subcommand's description for parsing and usage. */
typedef struct cli_command {
  const char *name;     /* "warm", "cache export", ... */
  const char *synopsis; /* after "sagejit <name> " */
  const char *summary;  /* one line */
  const char *details;  /* after the option list; may be NULL */
  const cli_opt *opts;
  int max_pos; /* positional arguments allowed */
} cli_command;

/* Parses argv[0..argc) (the arguments after the subcommand name) into the
 * option struct `dest` (whose first member is a cli_common).  Prints a
 * message to stderr and returns CLI_EXIT_USAGE on error; 0 on success. */
int cli_parse(const cli_command *cmd, int argc, char **argv, void *dest);
void cli_usage(const cli_command *cmd, FILE *f);
/* The start of every subcommand: cli_parse into `dest`, the usage on
 * --help, then cli_set_common.  Returns CLI_CONTINUE to go on, else the
 * exit code to return. */
#define CLI_CONTINUE (-1)
int cli_start(const cli_command *cmd, int argc, char **argv, void *dest);
/* Prints "sagejit <name>: <message>" to stderr and returns CLI_EXIT_USAGE. */
int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------ diagnostics */
/* Call once per process with the parsed common options. */
void cli_set_common(const cli_common *g);
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The message as given, no prefix. */
void cli_errx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Only without -q. */
void cli_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Only with -v. */
void cli_verbose(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Fills a config: cache dir, log callback and level from the common
 * options, the given device and target, family AUTO. */
void cli_config(sj_config *cfg, const cli_common *g, int device,
                const char *target);
/* sj_context_create with an error message on failure. */
sj_status cli_context_create(sj_context **out, const sj_config *cfg);
/* A compile-only context for the cache commands and info. */
sj_status cli_cache_context(sj_context **out, const cli_common *g,
                            const char *target);
/* "sagejit <what> needs a CUDA GPU: <why>" check; returns 0 or
 * CLI_EXIT_USAGE after printing. */
int cli_require_gpu(const char *what, int *device_count);

/* --------------------------------------------------------------- progress */
typedef struct cli_progress {
  int enabled;
  double last_ms;
  int drawn;
  char label[32];
} cli_progress;

/* Enabled only when stderr is a TTY and neither --no-progress nor -q was
 * given (--json does not matter: the bar is on stderr). */
void cli_progress_init(cli_progress *p, const cli_common *g,
                       const char *label);
/* Redraws at most ~6 times a second, and always for done == total. */
void cli_progress_update(cli_progress *p, int64_t done, int64_t total,
                         const char *what);
/* Erases the bar (before printing anything else to stderr). */
void cli_progress_clear(cli_progress *p);
void cli_progress_done(cli_progress *p);

/* ------------------------------------------------------------------- JSON */
/* A one-line JSON writer.  key is NULL inside arrays and at the top. */
typedef struct cli_json {
  char *buf;
  size_t len, cap;
  int depth;
  unsigned char first[32]; /* per depth: no member written yet */
  int oom;
} cli_json;

void cj_init(cli_json *j);
void cj_free(cli_json *j);
void cj_obj_begin(cli_json *j, const char *key);
void cj_obj_end(cli_json *j);
void cj_arr_begin(cli_json *j, const char *key);
void cj_arr_end(cli_json *j);
void cj_str(cli_json *j, const char *key, const char *v); /* NULL: null */
void cj_int(cli_json *j, const char *key, int64_t v);
void cj_num(cli_json *j, const char *key, double v); /* non-finite: null */
void cj_bool(cli_json *j, const char *key, int v);
void cj_null(cli_json *j, const char *key);
/* Writes the object and a newline to stdout; returns 0 or -1. */
int cj_print(cli_json *j);

/* ------------------------------------------------------------------ lists */
#define CLI_MAX_LIST 32

/* A comma-separated list split in place in its own copy. */
typedef struct cli_list {
  char *buf;
  const char *item[CLI_MAX_LIST];
  size_t n;
} cli_list;

/* 0, or -1 with a message in err (empty items and too many are errors). */
int cli_list_split(cli_list *l, const char *s, char *err, size_t err_size);
void cli_list_free(cli_list *l);

/* Typed axis lists: each fills out[] (at most CLI_MAX_LIST) and *n, or
 * prints an error naming the option and returns CLI_EXIT_USAGE.  s NULL
 * leaves *n = 0 (the default). */
int cli_parse_archs(const cli_command *cmd, const char *opt, const char *s,
                    cli_list *out);
int cli_parse_ints(const cli_command *cmd, const char *opt, const char *s,
                   int lo, int hi, int *out, size_t *n);
int cli_parse_bools(const cli_command *cmd, const char *opt, const char *s,
                    int *out, size_t *n);
int cli_parse_dtypes(const cli_command *cmd, const char *s, sj_dtype *out,
                     size_t *n);
int cli_parse_families(const cli_command *cmd, const char *s, sj_family *out,
                       size_t *n);
int cli_parse_quants(const cli_command *cmd, const char *s,
                     sj_quant_gran *out, size_t *n);
int cli_parse_accums(const cli_command *cmd, const char *s, sj_pv_accum *out,
                     size_t *n);
/* "123", "64K", "1.5G" (1024-based, optional B/iB) -> bytes; -1 if bad. */
int64_t cli_parse_size(const char *s);
/* A range-checked integer option: returns CLI_EXIT_USAGE after a message. */
int cli_check_range(const cli_command *cmd, const char *opt, long long v,
                    long long lo, long long hi);

/* Names for printing. */
const char *cli_dtype_name(sj_dtype d);
const char *cli_family_name(sj_family f);
const char *cli_quant_name(sj_quant_gran q);
const char *cli_layout_name(sj_layout l);
/* "1.5 MiB" */
void cli_format_bytes(int64_t bytes, char *buf, size_t size);
double cli_now_ms(void);

/* ------------------------------------------------------------ subcommands */
int cmd_info(int argc, char **argv);
int cmd_warm(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif /* SJ_CLI_H */
