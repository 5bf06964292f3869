/*
 * cmd_warm.c -- `sagejit warm`: precompile a matrix of kernels into the
 * cache with a compile-only context (no GPU needed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct warm_opts {
  cli_common common;
  const char *arch, *head_dim, *causal, *dtype, *family, *quant, *accum;
  long long jobs;
} warm_opts;

static const cli_opt k_opts[] = {
    CLI_OPT("arch", 0, CLI_OPT_STR, warm_opts, arch, "LIST",
            "targets, e.g. sm_80,sm_90a,compute_120 (default: the devices "
            "present, else sm_80,sm_86,sm_89,sm_90a,sm_100a,sm_103a,"
            "sm_120a)"),
    CLI_OPT("head-dim", 0, CLI_OPT_STR, warm_opts, head_dim, "LIST",
            "head dimensions (default 64,128)"),
    CLI_OPT("causal", 0, CLI_OPT_STR, warm_opts, causal, "LIST",
            "0,1 / false,true (default both)"),
    CLI_OPT("dtype", 0, CLI_OPT_STR, warm_opts, dtype, "LIST",
            "fp16,bf16 (default both)"),
    CLI_OPT("family", 0, CLI_OPT_STR, warm_opts, family, "LIST",
            "auto,fp16pv,fp8pv,wgmma (default: the target's)"),
    CLI_OPT("quant", 0, CLI_OPT_STR, warm_opts, quant, "LIST",
            "per_block,per_warp,per_thread (default: the family's)"),
    CLI_OPT("accum", 0, CLI_OPT_STR, warm_opts, accum, "LIST",
            "fp32,fp32+fp32,fp16+fp32,fp32+fp16,fp32+fp32+splitv,"
            "pv16,pvi8,pvi8+splitv "
            "(default: the family's)"),
    CLI_OPT("jobs", 'j', CLI_OPT_INT, warm_opts, jobs, "N",
            "compiler threads (default: number of CPUs)"),
    CLI_COMMON_OPTS,
    CLI_OPT_TABLE_END};

static const cli_command k_cmd = {
    "warm", "[--arch LIST] [--head-dim LIST] [--causal LIST]\n"
            "       [--dtype LIST] [--family LIST] [--quant LIST] "
            "[--accum LIST]\n"
            "       [--jobs N] [--json]",
    "Compiles every kernel sagejit could need for the matrix of options into\n"
    "the cache (no GPU needed; NVRTC is).  What is cached already is counted,\n"
    "not redone; combinations a family does not offer are skipped.",
    "JSON: {\"compiled\", \"cached\", \"failed\", \"skipped\", \"total\", "
    "\"seconds\",\n"
    "  \"targets\": [...], \"cache\": PATH, \"failures\": [{\"target\", "
    "\"kernel\", \"status\"}]}\n"
    "Exits 1 if any kernel failed to compile.\n",
    k_opts, 0};

/* Compute capabilities of the default targets without a GPU; each is
 * mapped through sj_target_for_cc so an older NVRTC gets what it can. */
static const int k_default_ccs[][2] = {{8, 0},  {8, 6},  {8, 9}, {9, 0},
                                       {10, 0}, {10, 3}, {12, 0}};

typedef struct failure {
  char target[24];
  char kernel[232];
  sj_status st;
} failure;

typedef struct warm_ui {
  cli_progress bar;
  failure *fails;
  size_t n_fails, cap_fails;
} warm_ui;

/* Called from worker threads, serialized by the library. */
static void on_progress(void *user, int64_t done, int64_t total,
                        const char *target, const char *kernel,
                        sj_status st) {
  warm_ui *ui = user;
  char what[256];
  snprintf(what, sizeof what, "%s %s", target ? target : "",
           kernel ? kernel : "");
  if (st != SJ_OK) {
    if (ui->n_fails == ui->cap_fails) {
      size_t nc = ui->cap_fails ? ui->cap_fails * 2 : 16;
      failure *nf = realloc(ui->fails, nc * sizeof *nf);
      if (nf) {
        ui->fails = nf;
        ui->cap_fails = nc;
      }
    }
    if (ui->n_fails < ui->cap_fails) {
      failure *f = &ui->fails[ui->n_fails++];
      snprintf(f->target, sizeof f->target, "%s", target ? target : "");
      snprintf(f->kernel, sizeof f->kernel, "%s", kernel ? kernel : "");
      f->st = st;
    }
  }
  cli_verbose("[%lld/%lld] %s: %s", (long long)done, (long long)total, what,
              st == SJ_OK ? "ok" : sj_status_name(st));
  cli_progress_update(&ui->bar, done, total, what);
}

/* The unique targets of the devices present; 0 when there are none. */
static size_t device_targets(char out[][24], size_t max) {
  int version = 0, count = 0;
  if (sj_driver_info(&version, &count) != SJ_OK)
    return 0;
  size_t n = 0;
  for (int i = 0; i < count && n < max; i++) {
    sj_device_info di;
    if (sj_device_get_info(i, &di) != SJ_OK ||
        (strncmp(di.target, "sm_", 3) && strncmp(di.target, "compute_", 8)))
      continue;
    int dup = 0;
    for (size_t k = 0; k < n; k++)
      dup |= !strcmp(out[k], di.target);
    if (!dup)
      snprintf(out[n++], 24, "%s", di.target);
  }
  return n;
}

static size_t default_targets(char out[][24], size_t max) {
  size_t n = 0;
  for (size_t i = 0;
       i < sizeof k_default_ccs / sizeof k_default_ccs[0] && n < max; i++) {
    char t[24];
    if (sj_target_for_cc(k_default_ccs[i][0], k_default_ccs[i][1], t,
                         sizeof t) != SJ_OK)
      continue;
    int dup = 0;
    for (size_t k = 0; k < n; k++)
      dup |= !strcmp(out[k], t);
    if (!dup)
      snprintf(out[n++], 24, "%s", t);
  }
  return n;
}

int cmd_warm(int argc, char **argv) {
  warm_opts o;
  memset(&o, 0, sizeof o);
  int rc = cli_start(&k_cmd, argc, argv, &o);
  if (rc != CLI_CONTINUE)
    return rc;
  if ((rc = cli_check_range(&k_cmd, "--jobs", o.jobs, 0, 1024)) != 0)
    return rc;

  int head_dims[CLI_MAX_LIST], causal[CLI_MAX_LIST];
  sj_dtype dtypes[CLI_MAX_LIST];
  sj_family families[CLI_MAX_LIST];
  sj_quant_gran quants[CLI_MAX_LIST];
  sj_pv_accum accums[CLI_MAX_LIST];
  size_t n_hd = 0, n_causal = 0, n_dt = 0, n_fam = 0, n_q = 0, n_acc = 0;
  cli_list archs;
  if ((rc = cli_parse_ints(&k_cmd, "--head-dim", o.head_dim, 1, 1024,
                           head_dims, &n_hd)) ||
      (rc = cli_parse_bools(&k_cmd, "--causal", o.causal, causal,
                            &n_causal)) ||
      (rc = cli_parse_dtypes(&k_cmd, o.dtype, dtypes, &n_dt)) ||
      (rc = cli_parse_families(&k_cmd, o.family, families, &n_fam)) ||
      (rc = cli_parse_quants(&k_cmd, o.quant, quants, &n_q)) ||
      (rc = cli_parse_accums(&k_cmd, o.accum, accums, &n_acc)))
    return rc;
  if ((rc = cli_parse_archs(&k_cmd, "--arch", o.arch, &archs)) != 0)
    return rc;

  int nv_major = 0, nv_minor = 0;
  sj_status st = sj_nvrtc_version(&nv_major, &nv_minor);
  if (st != SJ_OK) {
    cli_errx("sagejit warm needs NVRTC to compile kernels: %s (install "
             "CUDA's libnvrtc, or set SAGEJIT_NVRTC to its path)",
            sj_status_string(st));
    cli_list_free(&archs);
    return CLI_EXIT_USAGE;
  }

  char targets_buf[CLI_MAX_LIST][24];
  const char *targets[CLI_MAX_LIST];
  size_t n_targets = 0;
  if (archs.n) {
    for (size_t i = 0; i < archs.n; i++)
      targets[n_targets++] = archs.item[i];
  } else {
    size_t n = device_targets(targets_buf, CLI_MAX_LIST);
    if (n == 0)
      n = default_targets(targets_buf, CLI_MAX_LIST);
    for (size_t i = 0; i < n; i++)
      targets[n_targets++] = targets_buf[i];
  }
  if (n_targets == 0) {
    cli_err("no target to compile for (give --arch)");
    cli_list_free(&archs);
    return CLI_EXIT_USAGE;
  }

  sj_config cfg;
  cli_config(&cfg, &o.common, SJ_DEVICE_NONE, targets[0]);
  sj_context *ctx = NULL;
  st = cli_context_create(&ctx, &cfg);
  if (st != SJ_OK) {
    cli_list_free(&archs);
    return cli_exit_for_status(st);
  }
  const char *cache_path = sj_context_cache_path(ctx);
  if (!cache_path[0])
    cli_note("warning: no cache file is in use: the kernels are compiled "
             "but not kept");

  sj_warm_request req;
  memset(&req, 0, sizeof req);
  req.targets = targets;
  req.n_targets = n_targets;
  req.head_dims = n_hd ? head_dims : NULL;
  req.n_head_dims = n_hd;
  req.causal = n_causal ? causal : NULL;
  req.n_causal = n_causal;
  req.dtypes = n_dt ? dtypes : NULL;
  req.n_dtypes = n_dt;
  req.families = n_fam ? families : NULL;
  req.n_families = n_fam;
  req.quant = n_q ? quants : NULL;
  req.n_quant = n_q;
  req.accum = n_acc ? accums : NULL;
  req.n_accum = n_acc;
  req.jobs = (int)o.jobs;
  warm_ui ui;
  memset(&ui, 0, sizeof ui);
  cli_progress_init(&ui.bar, &o.common, "warm");
  req.progress = on_progress;
  req.progress_user = &ui;

  sj_warm_result r;
  memset(&r, 0, sizeof r);
  st = sj_warm(ctx, &req, &r);
  cli_progress_done(&ui.bar);

  if (st != SJ_OK && r.failed == 0) {
    /* the request itself was refused, or the library failed */
    cli_err("warm failed: %s: %s", sj_status_string(st),
            sj_context_last_error(ctx));
    rc = cli_exit_for_status(st);
    if (rc == CLI_EXIT_FAILED)
      rc = CLI_EXIT_ERROR;
  } else {
    rc = r.failed > 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
    if (r.total == 0)
      cli_note("warning: nothing to compile: every combination was skipped "
               "(%lld)", (long long)r.skipped);
    if (o.common.json) {
      cli_json j;
      cj_init(&j);
      cj_obj_begin(&j, NULL);
      cj_int(&j, "compiled", r.compiled);
      cj_int(&j, "cached", r.cached);
      cj_int(&j, "failed", r.failed);
      cj_int(&j, "skipped", r.skipped);
      cj_int(&j, "total", r.total);
      cj_num(&j, "seconds", r.seconds);
      cj_arr_begin(&j, "targets");
      for (size_t i = 0; i < n_targets; i++)
        cj_str(&j, NULL, targets[i]);
      cj_arr_end(&j);
      cj_str(&j, "cache", cache_path);
      cj_arr_begin(&j, "failures");
      for (size_t i = 0; i < ui.n_fails; i++) {
        cj_obj_begin(&j, NULL);
        cj_str(&j, "target", ui.fails[i].target);
        cj_str(&j, "kernel", ui.fails[i].kernel);
        cj_str(&j, "status", sj_status_name(ui.fails[i].st));
        cj_obj_end(&j);
      }
      cj_arr_end(&j);
      cj_obj_end(&j);
      if (cj_print(&j) != 0)
        rc = CLI_EXIT_ERROR;
      cj_free(&j);
    } else {
      printf("warm: %lld compiled, %lld cached, %lld failed, %lld skipped "
             "(%lld kernels) in %.1f s for ",
             (long long)r.compiled, (long long)r.cached, (long long)r.failed,
             (long long)r.skipped, (long long)r.total, r.seconds);
      for (size_t i = 0; i < n_targets; i++)
        printf("%s%s", i ? "," : "", targets[i]);
      printf("\n");
      for (size_t i = 0; i < ui.n_fails; i++)
        printf("failed: %s %s (%s)\n", ui.fails[i].target,
               ui.fails[i].kernel, sj_status_name(ui.fails[i].st));
      if (cache_path[0])
        printf("cache: %s\n", cache_path);
      fflush(stdout);
    }
  }
  free(ui.fails);
  sj_context_destroy(ctx);
  cli_list_free(&archs);
  return rc;
}
