/*
 * cmd_bench.c -- `sagejit bench`: throughput per shape (sj_bench) and, with
 * --first-call, the JIT latency of a new process on an empty and on a warm
 * cache.  Each first-call measurement is a fresh process: this executable
 * re-run with the hidden option --_first-call-child.
 */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

typedef struct bench_opts {
  cli_common common;
  const char *head_dim, *seq, *causal, *dtype, *family, *quant, *accum;
  long long batch, heads, heads_kv, iters, warmup, device;
  int first_call, child, sync_each;
} bench_opts;

static const cli_opt k_opts[] = {
    CLI_OPT("head-dim", 0, CLI_OPT_STR, bench_opts, head_dim, "LIST",
            "head dimensions (default 64,128)"),
    CLI_OPT("seq", 0, CLI_OPT_STR, bench_opts, seq, "LIST",
            "sequence lengths, seq_q = seq_kv (default 1024,4096,16384)"),
    CLI_OPT("batch", 0, CLI_OPT_INT, bench_opts, batch, "N",
            "batch size (default 4; 1 with --first-call)"),
    CLI_OPT("heads", 0, CLI_OPT_INT, bench_opts, heads, "N",
            "query heads (default 32; 8 with --first-call)"),
    CLI_OPT("heads-kv", 0, CLI_OPT_INT, bench_opts, heads_kv, "N",
            "key/value heads (default: --heads)"),
    CLI_OPT("causal", 0, CLI_OPT_STR, bench_opts, causal, "LIST",
            "0,1 (default both)"),
    CLI_OPT("dtype", 0, CLI_OPT_STR, bench_opts, dtype, "LIST",
            "fp16,bf16 (default fp16)"),
    CLI_OPT("family", 0, CLI_OPT_STR, bench_opts, family, "LIST",
            "auto,fp16pv,fp8pv,wgmma (default auto)"),
    CLI_OPT("quant", 0, CLI_OPT_STR, bench_opts, quant, "LIST",
            "per_block,per_warp,per_thread (default: the family's)"),
    CLI_OPT("accum", 0, CLI_OPT_STR, bench_opts, accum, "LIST",
            "fp32,fp32+fp32,fp16+fp32,fp32+fp16,fp32+fp32+splitv,"
            "pv16,pvi8,pvi8+splitv "
            "(default: the family's)"),
    CLI_OPT("iters", 0, CLI_OPT_INT, bench_opts, iters, "N",
            "timed calls per shape (default 20)"),
    CLI_OPT("warmup", 0, CLI_OPT_INT, bench_opts, warmup, "N",
            "untimed calls first (default 5)"),
    CLI_OPT("sync-each", 0, CLI_OPT_FLAG, bench_opts, sync_each, NULL,
            "wait for each timed call before queuing the next, so that its "
            "time includes the host's launch latency (default: calls back to "
            "back, GPU time)"),
    CLI_OPT("first-call", 0, CLI_OPT_FLAG, bench_opts, first_call, NULL,
            "measure the first-call latency of a new process instead, with "
            "an empty and with a warm cache, and the host time per call "
            "(first value of each list)"),
    CLI_OPT("device", 0, CLI_OPT_INT, bench_opts, device, "N",
            "CUDA device ordinal (default 0)"),
    CLI_OPT("_first-call-child", 0, CLI_OPT_FLAG, bench_opts, child, NULL,
            NULL),
    CLI_COMMON_OPTS,
    CLI_OPT_TABLE_END};

static const cli_command k_cmd = {
    "bench", "[--head-dim LIST] [--seq LIST] [--batch N] [--heads N]\n"
             "       [--heads-kv N] [--causal LIST] [--dtype LIST] "
             "[--family LIST]\n"
             "       [--quant LIST] [--accum LIST] [--iters N] [--warmup N]\n"
             "       [--sync-each] [--first-call] [--device N] [--json]",
    "Times sagejit on the GPU with CUDA events, for every combination of the\n"
    "lists: attention-kernel TOPS, end-to-end TOPS (quantization included),\n"
    "preprocessing ms and host microseconds per call (medians).  The timed\n"
    "calls are queued back to back, each between its own events (GPU time);\n"
    "--sync-each waits for every call (host launch latency included).  Needs a "
    "CUDA GPU.",
    "JSON: {\"results\": [{\"batch\", \"heads_q\", \"heads_kv\", \"seq\", "
    "\"head_dim\",\n"
    "  \"causal\", \"dtype\", \"family\", \"quant\", \"accum\", \"status\", "
    "\"attn_tops\",\n"
    "  \"e2e_tops\", \"attn_ms\", \"e2e_ms\", \"preprocess_ms\", "
    "\"host_us\", \"flops\"}]}\n"
    "With --first-call: {\"first_call\": {\"cold_ms\", \"disk_hit_ms\", "
    "\"host_us\",\n"
    "  \"cold\": {...}, \"disk_hit\": {...}, shape}, \"results\": []}\n"
    "Exits 1 if a shape fails, 2 without a GPU.\n",
    k_opts, 0};

/* The parsed axes. */
typedef struct axes {
  int dims[CLI_MAX_LIST], seqs[CLI_MAX_LIST], causal[CLI_MAX_LIST];
  sj_dtype dts[CLI_MAX_LIST];
  sj_family fams[CLI_MAX_LIST];
  sj_quant_gran qs[CLI_MAX_LIST];
  sj_pv_accum accs[CLI_MAX_LIST];
  size_t n_dims, n_seqs, n_causal, n_dts, n_fams, n_qs, n_accs;
} axes;

static int parse_axes(const bench_opts *o, axes *a) {
  memset(a, 0, sizeof *a);
  a->dims[0] = 64;
  a->dims[1] = 128;
  a->n_dims = 2;
  a->seqs[0] = 1024;
  a->seqs[1] = 4096;
  a->seqs[2] = 16384;
  a->n_seqs = 3;
  a->causal[0] = 0;
  a->causal[1] = 1;
  a->n_causal = 2;
  a->dts[0] = SJ_DTYPE_FP16;
  a->n_dts = 1;
  a->fams[0] = SJ_FAMILY_AUTO;
  a->n_fams = 1;
  a->qs[0] = SJ_QUANT_DEFAULT;
  a->n_qs = 1;
  a->accs[0] = SJ_ACCUM_DEFAULT;
  a->n_accs = 1;
  int rc = 0;
  if ((o->head_dim && (rc = cli_parse_ints(&k_cmd, "--head-dim", o->head_dim,
                                           1, 1024, a->dims, &a->n_dims))) ||
      (o->seq && (rc = cli_parse_ints(&k_cmd, "--seq", o->seq, 1, 1 << 24,
                                      a->seqs, &a->n_seqs))) ||
      (o->causal && (rc = cli_parse_bools(&k_cmd, "--causal", o->causal,
                                          a->causal, &a->n_causal))) ||
      (o->dtype && (rc = cli_parse_dtypes(&k_cmd, o->dtype, a->dts,
                                          &a->n_dts))) ||
      (o->family && (rc = cli_parse_families(&k_cmd, o->family, a->fams,
                                             &a->n_fams))) ||
      (o->quant && (rc = cli_parse_quants(&k_cmd, o->quant, a->qs,
                                          &a->n_qs))) ||
      (o->accum && (rc = cli_parse_accums(&k_cmd, o->accum, a->accs,
                                          &a->n_accs))))
    return rc;
  return 0;
}

static void fill_params(sj_attention_params *p, const bench_opts *o, int dim,
                        int seq, int causal, sj_dtype dt, sj_family fam,
                        sj_quant_gran q, sj_pv_accum acc) {
  sj_attention_params_init(p);
  p->dtype = dt;
  p->layout = SJ_LAYOUT_HND;
  p->batch = o->batch;
  p->heads_q = o->heads;
  p->heads_kv = o->heads_kv;
  p->seq_q = seq;
  p->seq_kv = seq;
  p->head_dim = dim;
  p->causal = causal;
  p->family = fam;
  p->qk_quant = q;
  p->pv_accum = acc;
}

static sj_status open_device_ctx(const bench_opts *o, sj_context **ctx) {
  sj_config cfg;
  cli_config(&cfg, &o->common, (int)o->device, NULL);
  return cli_context_create(ctx, &cfg);
}

static int exit_for(sj_status st) {
  int rc = cli_exit_for_status(st);
  return rc == CLI_EXIT_FAILED ? CLI_EXIT_ERROR : rc;
}

/* ---------------------------------------------------------- the matrix */

static void json_shape(cli_json *j, const sj_attention_params *p,
                       sj_family fam) {
  cj_int(j, "batch", p->batch);
  cj_int(j, "heads_q", p->heads_q);
  cj_int(j, "heads_kv", p->heads_kv);
  cj_int(j, "seq", p->seq_q);
  cj_int(j, "head_dim", p->head_dim);
  cj_bool(j, "causal", p->causal);
  cj_str(j, "dtype", cli_dtype_name(p->dtype));
  cj_str(j, "family", cli_family_name(fam));
  cj_str(j, "quant", cli_quant_name(p->qk_quant));
  cj_str(j, "accum", sj_pv_accum_name(p->pv_accum));
}

static int run_matrix(const bench_opts *o, const axes *a) {
  sj_context *ctx = NULL;
  sj_status st = open_device_ctx(o, &ctx);
  if (st != SJ_OK)
    return exit_for(st);
  const sj_family ctx_family = sj_context_family(ctx);
  const size_t total = a->n_fams * a->n_qs * a->n_accs * a->n_dts *
                       a->n_dims * a->n_seqs * a->n_causal;
  cli_json j;
  cj_init(&j);
  cj_obj_begin(&j, NULL);
  cj_str(&j, "target", sj_context_target(ctx));
  cj_str(&j, "timing", o->sync_each ? "sync_each" : "back_to_back");
  cj_arr_begin(&j, "results");
  if (!o->common.json) {
    printf("sagejit bench on %s: B=%lld Hq=%lld Hkv=%lld, %d warmup, %d "
           "timed calls (medians, %s)\n",
           sj_context_target(ctx), o->batch, o->heads, o->heads_kv,
           o->warmup ? (int)o->warmup : 5, o->iters ? (int)o->iters : 20,
           o->sync_each ? "each call synchronized" : "back to back");
    printf("%6s %4s %6s %-5s %-7s %-21s %10s %10s %10s %9s\n", "seq", "dim",
           "causal", "dtype", "family", "quant/accum", "attn TOPS",
           "e2e TOPS", "prep ms", "host us");
    fflush(stdout);
  }
  cli_progress bar;
  cli_progress_init(&bar, &o->common, "bench");
  size_t done = 0;
  int64_t failed = 0;
  for (size_t fi = 0; fi < a->n_fams; fi++)
    for (size_t qi = 0; qi < a->n_qs; qi++)
      for (size_t ai = 0; ai < a->n_accs; ai++)
        for (size_t ti = 0; ti < a->n_dts; ti++)
          for (size_t di = 0; di < a->n_dims; di++)
            for (size_t si = 0; si < a->n_seqs; si++)
              for (size_t ci = 0; ci < a->n_causal; ci++) {
                sj_bench_case c;
                memset(&c, 0, sizeof c);
                fill_params(&c.params, o, a->dims[di], a->seqs[si],
                            a->causal[ci], a->dts[ti], a->fams[fi], a->qs[qi],
                            a->accs[ai]);
                c.warmup = (int)o->warmup;
                c.iters = (int)o->iters;
                c.sync_each = o->sync_each;
                const sj_family fam = a->fams[fi] == SJ_FAMILY_AUTO
                                          ? ctx_family
                                          : a->fams[fi];
                char what[96];
                snprintf(what, sizeof what, "N=%d D=%d causal=%d %s",
                         a->seqs[si], a->dims[di], a->causal[ci],
                         cli_dtype_name(a->dts[ti]));
                cli_progress_update(&bar, (int64_t)done, (int64_t)total,
                                    what);
                sj_bench_result r;
                memset(&r, 0, sizeof r);
                st = sj_bench(ctx, &c, &r);
                done++;
                const char *status =
                    st == SJ_OK ? "ok"
                                : st == SJ_ERR_UNSUPPORTED ? "skipped"
                                                           : "error";
                if (st != SJ_OK && st != SJ_ERR_UNSUPPORTED)
                  failed++;
                char qa[32];
                snprintf(qa, sizeof qa, "%s/%s", cli_quant_name(a->qs[qi]),
                         sj_pv_accum_name(a->accs[ai]));
                if (o->common.json) {
                  cj_obj_begin(&j, NULL);
                  json_shape(&j, &c.params, fam);
                  cj_str(&j, "status", status);
                  if (st == SJ_OK) {
                    cj_num(&j, "attn_tops", r.attn_tops);
                    cj_num(&j, "e2e_tops", r.e2e_tops);
                    cj_num(&j, "attn_ms", r.attn_ms);
                    cj_num(&j, "e2e_ms", r.e2e_ms);
                    cj_num(&j, "preprocess_ms", r.preprocess_ms);
                    cj_num(&j, "host_us", r.host_us);
                    cj_num(&j, "flops", r.flops);
                  } else {
                    cj_str(&j, "error", sj_status_name(st));
                    cj_str(&j, "message", sj_context_last_error(ctx));
                  }
                  cj_obj_end(&j);
                } else {
                  cli_progress_clear(&bar);
                  if (st == SJ_OK)
                    printf("%6d %4d %6d %-5s %-7s %-21s %10.1f %10.1f %10.3f "
                           "%9.1f\n",
                           a->seqs[si], a->dims[di], a->causal[ci],
                           cli_dtype_name(a->dts[ti]), cli_family_name(fam),
                           qa, r.attn_tops, r.e2e_tops, r.preprocess_ms,
                           r.host_us);
                  else
                    printf("%6d %4d %6d %-5s %-7s %-21s %s: %s\n", a->seqs[si],
                           a->dims[di], a->causal[ci],
                           cli_dtype_name(a->dts[ti]), cli_family_name(fam),
                           qa, status, sj_context_last_error(ctx));
                  fflush(stdout);
                }
              }
  cli_progress_done(&bar);
  cj_arr_end(&j);
  cj_int(&j, "failed", failed);
  cj_obj_end(&j);
  int rc = failed ? CLI_EXIT_FAILED : CLI_EXIT_OK;
  if (o->common.json && cj_print(&j) != 0)
    rc = CLI_EXIT_ERROR;
  cj_free(&j);
  sj_context_destroy(ctx);
  return rc;
}

/* ------------------------------------------------------------ first call */

/* The child: a new process that creates a context on its (empty or warm)
 * cache and runs the first shape twice, iters 1 and warmup 1 each.  The
 * first run includes the JIT; the second, identical but hot, is the cost
 * of the bench harness itself.  Then a normal run gives the host time. */
static int first_call_child(const bench_opts *o, const axes *a) {
  const double t0 = cli_now_ms();
  sj_context *ctx = NULL;
  sj_status st = open_device_ctx(o, &ctx);
  if (st != SJ_OK)
    return exit_for(st);
  const double t1 = cli_now_ms();
  sj_bench_case c;
  memset(&c, 0, sizeof c);
  fill_params(&c.params, o, a->dims[0], a->seqs[0], a->causal[0], a->dts[0],
              a->fams[0], a->qs[0], a->accs[0]);
  c.warmup = 1;
  c.iters = 1;
  c.sync_each = 1; /* a first call starts from an idle GPU */
  sj_bench_result r1, r2, r3;
  st = sj_bench(ctx, &c, &r1);
  const double t2 = cli_now_ms();
  sj_stats stats;
  memset(&stats, 0, sizeof stats);
  if (st == SJ_OK)
    sj_context_get_stats(ctx, &stats);
  if (st == SJ_OK)
    st = sj_bench(ctx, &c, &r2);
  const double t3 = cli_now_ms();
  if (st == SJ_OK) {
    c.warmup = (int)o->warmup;
    c.iters = (int)o->iters;
    st = sj_bench(ctx, &c, &r3);
  }
  if (st != SJ_OK) {
    cli_err("first-call measurement: %s: %s", sj_status_string(st),
            sj_context_last_error(ctx));
    sj_context_destroy(ctx);
    return exit_for(st);
  }
  const double hot = t3 - t2;
  cli_json j;
  cj_init(&j);
  cj_obj_begin(&j, NULL);
  cj_num(&j, "create_ms", t1 - t0);
  cj_num(&j, "first_ms", t2 - t0);
  cj_num(&j, "first_bench_ms", t2 - t1);
  cj_num(&j, "hot_bench_ms", hot);
  /* create + (first bench - identical hot bench) + one call */
  cj_num(&j, "first_call_ms", (t1 - t0) + (t2 - t1) - hot + r3.e2e_ms);
  cj_int(&j, "compiles", (int64_t)stats.compiles);
  cj_num(&j, "compile_ms", stats.compile_ms);
  cj_int(&j, "disk_hits", (int64_t)stats.disk_hits);
  cj_int(&j, "misses", (int64_t)stats.misses);
  cj_num(&j, "load_ms", stats.load_ms);
  cj_num(&j, "host_us", r3.host_us);
  cj_num(&j, "e2e_ms", r3.e2e_ms);
  cj_obj_end(&j);
  int rc = cj_print(&j) == 0 ? CLI_EXIT_OK : CLI_EXIT_ERROR;
  cj_free(&j);
  sj_context_destroy(ctx);
  return rc;
}

/* A numeric field of the flat JSON object the child prints. */
static double json_field(const char *s, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *p = strstr(s, pat);
  if (!p)
    return NAN;
  p += strlen(pat);
  char *end = NULL;
  double v = strtod(p, &end);
  return end == p ? NAN : v;
}

typedef struct child_run {
  double wall_ms; /* spawn to exit */
  char line[8192]; /* its JSON line */
} child_run;

static int rm_entry(const char *path, const struct stat *sb, int flag,
                    struct FTW *ftw) {
  (void)sb;
  (void)ftw;
  return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static int spawn_child(const bench_opts *o, const char *dir, child_run *out) {
  char b[24], h[24], hk[24], it[24], wu[24], dev[24];
  snprintf(b, sizeof b, "%lld", o->batch);
  snprintf(h, sizeof h, "%lld", o->heads);
  snprintf(hk, sizeof hk, "%lld", o->heads_kv);
  snprintf(it, sizeof it, "%lld", o->iters);
  snprintf(wu, sizeof wu, "%lld", o->warmup);
  snprintf(dev, sizeof dev, "%lld", o->device);
  const char *argv[40];
  int n = 0;
  argv[n++] = "sagejit";
  argv[n++] = "bench";
  argv[n++] = "--_first-call-child";
  argv[n++] = "--no-progress";
  argv[n++] = "--cache-dir";
  argv[n++] = dir;
  argv[n++] = "--batch";
  argv[n++] = b;
  argv[n++] = "--heads";
  argv[n++] = h;
  argv[n++] = "--heads-kv";
  argv[n++] = hk;
  argv[n++] = "--iters";
  argv[n++] = it;
  argv[n++] = "--warmup";
  argv[n++] = wu;
  argv[n++] = "--device";
  argv[n++] = dev;
  const char *const lists[][2] = {
      {"--head-dim", o->head_dim}, {"--seq", o->seq},
      {"--causal", o->causal},     {"--dtype", o->dtype},
      {"--family", o->family},     {"--quant", o->quant},
      {"--accum", o->accum}};
  for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
    if (lists[i][1]) {
      argv[n++] = lists[i][0];
      argv[n++] = lists[i][1];
    }
  if (o->common.quiet)
    argv[n++] = "-q";
  for (int v = 0; v < o->common.verbose && v < 2; v++)
    argv[n++] = "-v";
  argv[n] = NULL;

  int fds[2];
  if (pipe(fds) != 0) {
    cli_err("pipe: %s", strerror(errno));
    return CLI_EXIT_ERROR;
  }
  fflush(stdout);
  fflush(stderr);
  const double t0 = cli_now_ms();
  pid_t pid = fork();
  if (pid < 0) {
    cli_err("fork: %s", strerror(errno));
    close(fds[0]);
    close(fds[1]);
    return CLI_EXIT_ERROR;
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    /* no other cache layer may turn the cold run warm */
    unsetenv("SAGEJIT_CACHE_PATH");
    unsetenv("SAGEJIT_CACHE_DISABLE");
    execv("/proc/self/exe", (char *const *)argv);
    _exit(127);
  }
  close(fds[1]);
  size_t len = 0;
  char buf[8192];
  for (;;) {
    ssize_t r = read(fds[0], buf + len, sizeof buf - 1 - len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    len += (size_t)r;
    if (len == sizeof buf - 1) /* keep the tail */
      len = 0;
  }
  buf[len] = 0;
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  out->wall_ms = cli_now_ms() - t0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    cli_err("the first-call measurement process failed (%s %d)",
            WIFEXITED(status) ? "exit status" : "signal",
            WIFEXITED(status) ? code : WTERMSIG(status));
    if (code == 127)
      return CLI_EXIT_ERROR;
    return code == CLI_EXIT_USAGE ? CLI_EXIT_USAGE : CLI_EXIT_ERROR;
  }
  /* the last line */
  while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
    buf[--len] = 0;
  const char *line = strrchr(buf, '\n');
  line = line ? line + 1 : buf;
  snprintf(out->line, sizeof out->line, "%s", line);
  if (out->line[0] != '{') {
    cli_err("the first-call measurement process printed no result");
    return CLI_EXIT_ERROR;
  }
  return 0;
}

static void json_child(cli_json *j, const char *key, const child_run *r) {
  static const char *const keys[] = {
      "create_ms", "first_ms",   "first_bench_ms", "hot_bench_ms",
      "first_call_ms", "compiles", "compile_ms", "disk_hits", "misses",
      "load_ms",   "host_us",    "e2e_ms"};
  cj_obj_begin(j, key);
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    cj_num(j, keys[i], json_field(r->line, keys[i]));
  cj_num(j, "process_ms", r->wall_ms);
  cj_obj_end(j);
}

static int run_first_call(const bench_opts *o, const axes *a) {
  const char *tmp = getenv("TMPDIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/sagejit-first-call-XXXXXX",
           tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    cli_err("creating a temporary cache directory: %s", strerror(errno));
    return CLI_EXIT_ERROR;
  }
  child_run cold, hit;
  memset(&cold, 0, sizeof cold);
  memset(&hit, 0, sizeof hit);
  cli_note("first call with an empty cache (compiles kernels)...");
  int rc = spawn_child(o, dir, &cold);
  if (!rc) {
    cli_note("first call with the warm cache...");
    rc = spawn_child(o, dir, &hit);
  }
  nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (rc)
    return rc;

  /* The headline: sj_context_create + the first sj_attention + one call,
   * i.e. without the bench harness's own tensor setup (see the child). */
  const double cold_ms = json_field(cold.line, "first_call_ms");
  const double hit_ms = json_field(hit.line, "first_call_ms");
  const double host_us = json_field(hit.line, "host_us");
  if (o->common.json) {
    cli_json j;
    cj_init(&j);
    cj_obj_begin(&j, NULL);
    cj_obj_begin(&j, "first_call");
    cj_int(&j, "batch", o->batch);
    cj_int(&j, "heads_q", o->heads);
    cj_int(&j, "heads_kv", o->heads_kv);
    cj_int(&j, "seq", a->seqs[0]);
    cj_int(&j, "head_dim", a->dims[0]);
    cj_bool(&j, "causal", a->causal[0]);
    cj_str(&j, "dtype", cli_dtype_name(a->dts[0]));
    cj_num(&j, "cold_ms", cold_ms);
    cj_num(&j, "disk_hit_ms", hit_ms);
    cj_num(&j, "host_us", host_us);
    cj_num(&j, "cold_wall_ms", json_field(cold.line, "first_ms"));
    cj_num(&j, "disk_hit_wall_ms", json_field(hit.line, "first_ms"));
    json_child(&j, "cold", &cold);
    json_child(&j, "disk_hit", &hit);
    cj_obj_end(&j);
    cj_arr_begin(&j, "results");
    cj_arr_end(&j);
    cj_obj_end(&j);
    rc = cj_print(&j) == 0 ? CLI_EXIT_OK : CLI_EXIT_ERROR;
    cj_free(&j);
    return rc;
  }
  printf("first call: B=%lld Hq=%lld Hkv=%lld N=%d D=%d causal=%d %s, each "
         "in a new process\n",
         o->batch, o->heads, o->heads_kv, a->seqs[0], a->dims[0],
         a->causal[0], cli_dtype_name(a->dts[0]));
  printf("  cold (empty cache):  %10.1f ms  (context %.1f ms; %.0f compiles, "
         "%.1f ms in NVRTC)\n",
         cold_ms, json_field(cold.line, "create_ms"),
         json_field(cold.line, "compiles"),
         json_field(cold.line, "compile_ms"));
  printf("  disk hit (warm):     %10.1f ms  (context %.1f ms; %.0f disk hits, "
         "%.1f ms loading)\n",
         hit_ms, json_field(hit.line, "create_ms"),
         json_field(hit.line, "disk_hits"), json_field(hit.line, "load_ms"));
  printf("  host time per call:  %10.1f us\n", host_us);
  printf("first call = sj_context_create + the first sj_attention + one "
         "call, without\nthe bench's tensor setup; wall time from create "
         "to the end of the first\nbench: %.1f / %.1f ms; whole processes: "
         "%.0f / %.0f ms\n",
         json_field(cold.line, "first_ms"), json_field(hit.line, "first_ms"),
         cold.wall_ms, hit.wall_ms);
  fflush(stdout);
  return CLI_EXIT_OK;
}

int cmd_bench(int argc, char **argv) {
  bench_opts o;
  memset(&o, 0, sizeof o);
  /* unset: the defaults depend on the mode */
  o.batch = o.heads = o.heads_kv = LLONG_MIN;
  int rc = cli_start(&k_cmd, argc, argv, &o);
  if (rc != CLI_CONTINUE)
    return rc;
  /* The JIT cost does not depend on B and H: --first-call defaults to small
   * tensors so that the harness's own setup stays out of the figures. */
  const int small = o.first_call || o.child;
  if (o.batch == LLONG_MIN)
    o.batch = small ? 1 : 4;
  if (o.heads == LLONG_MIN)
    o.heads = small ? 8 : 32;
  if (o.heads_kv == LLONG_MIN)
    o.heads_kv = o.heads;
  if ((rc = cli_check_range(&k_cmd, "--batch", o.batch, 1, 1 << 20)) ||
      (rc = cli_check_range(&k_cmd, "--heads", o.heads, 1, 4096)) ||
      (rc = cli_check_range(&k_cmd, "--heads-kv", o.heads_kv, 1, o.heads)) ||
      (rc = cli_check_range(&k_cmd, "--iters", o.iters, 0, 1000000)) ||
      (rc = cli_check_range(&k_cmd, "--warmup", o.warmup, 0, 1000000)) ||
      (rc = cli_check_range(&k_cmd, "--device", o.device, 0, 1023)))
    return rc;
  if (o.heads % o.heads_kv != 0)
    return cli_usage_error(&k_cmd, "--heads (%lld) must be a multiple of "
                           "--heads-kv (%lld)", o.heads, o.heads_kv);
  axes a;
  if ((rc = parse_axes(&o, &a)) != 0)
    return rc;
  int n_dev = 0;
  if ((rc = cli_require_gpu("bench", &n_dev)) != 0)
    return rc;
  if (o.device >= n_dev)
    return cli_usage_error(&k_cmd, "--device %lld does not exist (%d "
                           "device%s)", o.device, n_dev, n_dev == 1 ? "" : "s");
  if (o.child)
    return first_call_child(&o, &a);
  if (o.first_call)
    return run_first_call(&o, &a);
  return run_matrix(&o, &a);
}
