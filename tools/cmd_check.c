/*
 * cmd_check.c -- `sagejit check`: the accuracy self-check.  Runs sj_check
 * over a matrix of shapes and options on fresh random data and gates each
 * case against the FP32 reference.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct check_opts {
  cli_common common;
  int quick;
  const char *head_dim, *dtype, *family, *quant, *accum;
  long long seed, device;
} check_opts;

static const cli_opt k_opts[] = {
    CLI_OPT("quick", 0, CLI_OPT_FLAG, check_opts, quick, NULL,
            "a small subset (first head dim and dtype, a few shapes)"),
    CLI_OPT("head-dim", 0, CLI_OPT_STR, check_opts, head_dim, "LIST",
            "head dimensions (default 64,128)"),
    CLI_OPT("dtype", 0, CLI_OPT_STR, check_opts, dtype, "LIST",
            "fp16,bf16 (default both)"),
    CLI_OPT("family", 0, CLI_OPT_STR, check_opts, family, "LIST",
            "auto,fp16pv,fp8pv,wgmma (default auto: the device's)"),
    CLI_OPT("quant", 0, CLI_OPT_STR, check_opts, quant, "LIST",
            "per_block,per_warp,per_thread (default: the family's)"),
    CLI_OPT("accum", 0, CLI_OPT_STR, check_opts, accum, "LIST",
            "fp32,fp32+fp32,fp16+fp32,fp32+fp16,fp32+fp32+splitv,"
            "pv16,pvi8,pvi8+splitv "
            "(default: the family's)"),
    CLI_OPT("seed", 0, CLI_OPT_INT, check_opts, seed, "N",
            "base seed of the random data (default 1)"),
    CLI_OPT("device", 0, CLI_OPT_INT, check_opts, device, "N",
            "CUDA device ordinal (default 0)"),
    CLI_COMMON_OPTS,
    CLI_OPT_TABLE_END};

static const cli_command k_cmd = {
    "check", "[--quick] [--head-dim LIST] [--dtype LIST] [--family LIST]\n"
             "       [--quant LIST] [--accum LIST] [--seed N] [--device N] "
             "[--json]",
    "Runs sagejit and the FP32 reference attention on the same random data\n"
    "(K with a per-channel bias) over a matrix of shapes -- both layouts,\n"
    "causal both ways and both diagonal alignments, GQA, odd and unequal\n"
    "lengths, padded strides -- and compares.  Needs a CUDA GPU.",
    "Gate per case: rel L2 < 2e-2 and cosine > 0.9998 (fp16pv, pv16), rel L2 < "
    "5e-2 and\ncosine > 0.998 (fp8pv, wgmma; rel L2 < 3.5e-2 with "
    "fp32+fp32+splitv,\npvi8 and pvi8+splitv, the default of wgmma and of fp8pv on "
    "sm_90); no NaN/Inf;\nLSE error < 5e-2 and no "
    "LSE mismatch.\nA combination the family or device does not offer is "
    "SKIP, not FAIL.\n"
    "JSON: {\"cases\", \"passed\", \"failed\", \"skipped\", \"device\", "
    "\"target\",\n"
    "  \"auto_family\", \"stats\": {\"compiles\", \"disk_hits\", "
    "\"misses\", ...},\n"
    "  \"results\": [{shape, options, \"status\": "
    "PASS|FAIL|SKIP,\n  \"rel_l2\", \"cosine\", ...}]}\n"
    "Exits 1 if any case fails, 2 without a GPU.\n",
    k_opts, 0};

/* One shape of the matrix. */
typedef struct shape {
  int64_t batch, heads_q, heads_kv, seq_q, seq_kv;
  int pad; /* padded strides */
  int quick;
} shape;

/* B=1, H=8 for the 4096-long ones keeps the FP32 reference cheap. */
static const shape k_shapes[] = {
    {2, 4, 4, 1, 1, 0, 0},       {2, 8, 2, 17, 17, 0, 1},
    {1, 4, 4, 127, 127, 1, 1},   {2, 8, 8, 1000, 1000, 0, 0},
    {1, 8, 8, 4096, 4096, 0, 0}, {1, 8, 2, 17, 1000, 0, 1},
    {2, 4, 4, 1000, 127, 1, 0},  {1, 4, 1, 1, 4096, 0, 0},
    {1, 8, 2, 127, 4096, 1, 0},
};
#define N_SHAPES (sizeof k_shapes / sizeof k_shapes[0])

#define K_BIAS 4.0f

typedef struct gate {
  double rel_l2, cosine;
} gate;

/* f and a are what the call ran, as sj_context_resolve says: the tighter
 * 8-bit gate for split V, pvi8 and pvi8+splitv (docs/kernels.md). */
static gate gate_for(sj_family f, sj_pv_accum a) {
  gate g = {2e-2, 0.9998};
  const int split = a == SJ_ACCUM_FP32_FP32_SPLITV || a == SJ_ACCUM_PVI8 ||
                    a == SJ_ACCUM_PVI8_SPLITV;
  if (a == SJ_ACCUM_PV16) /* 16-bit P.V: fp16pv's gate */
    return g;
  if (f == SJ_FAMILY_FP8PV || f == SJ_FAMILY_WGMMA) {
    g.rel_l2 = split ? 3.5e-2 : 5e-2;
    g.cosine = 0.998;
  }
  return g;
}

enum { CASE_PASS, CASE_FAIL, CASE_SKIP };
static const char *const k_verdict[] = {"PASS", "FAIL", "SKIP"};

typedef struct case_out {
  sj_check_case c;
  sj_family family;  /* resolved (sj_context_resolve) */
  sj_pv_accum accum; /* resolved */
  sj_status st;
  sj_check_result r;
  int verdict;
  char why[256];
} case_out;

static int judge(case_out *co) {
  if (co->st == SJ_ERR_UNSUPPORTED) {
    snprintf(co->why, sizeof co->why, "unsupported");
    return CASE_SKIP;
  }
  if (co->st != SJ_OK)
    return CASE_FAIL; /* why already set */
  const sj_check_result *r = &co->r;
  gate g = gate_for(co->family, co->accum);
  co->why[0] = 0;
  if (r->nonfinite != 0)
    snprintf(co->why, sizeof co->why, "%lld non-finite outputs",
             (long long)r->nonfinite);
  else if (!(r->rel_l2 < g.rel_l2))
    snprintf(co->why, sizeof co->why, "rel L2 %.3g >= %.3g", r->rel_l2,
             g.rel_l2);
  else if (!(r->cosine > g.cosine))
    snprintf(co->why, sizeof co->why, "cosine %.6f <= %.6g", r->cosine,
             g.cosine);
  else if (co->c.with_lse && r->lse_mismatch != 0)
    snprintf(co->why, sizeof co->why, "%lld LSE rows finite/infinite "
             "mismatch", (long long)r->lse_mismatch);
  else if (co->c.with_lse && !(r->lse_max_abs_err < 5e-2))
    snprintf(co->why, sizeof co->why, "LSE error %.3g >= 0.05",
             r->lse_max_abs_err);
  return co->why[0] ? CASE_FAIL : CASE_PASS;
}

static void describe(const sj_check_case *c, char *buf, size_t size) {
  const sj_attention_params *p = &c->params;
  snprintf(buf, size, "%s %s B%lld Hq%lld/Hkv%lld Nq%lld/Nkv%lld D%lld %s%s",
           cli_layout_name(p->layout), cli_dtype_name(p->dtype),
           (long long)p->batch, (long long)p->heads_q, (long long)p->heads_kv,
           (long long)p->seq_q, (long long)p->seq_kv, (long long)p->head_dim,
           p->causal ? (p->causal_align == SJ_CAUSAL_BOTTOM_RIGHT ? "causal-br"
                                                                   : "causal")
                     : "full",
           c->pad_strides ? " pad" : "");
}

static void json_case(cli_json *j, const case_out *co) {
  const sj_attention_params *p = &co->c.params;
  cj_obj_begin(j, NULL);
  cj_int(j, "batch", p->batch);
  cj_int(j, "heads_q", p->heads_q);
  cj_int(j, "heads_kv", p->heads_kv);
  cj_int(j, "seq_q", p->seq_q);
  cj_int(j, "seq_kv", p->seq_kv);
  cj_int(j, "head_dim", p->head_dim);
  cj_str(j, "dtype", cli_dtype_name(p->dtype));
  cj_str(j, "layout", cli_layout_name(p->layout));
  cj_bool(j, "causal", p->causal);
  cj_str(j, "causal_align", p->causal_align == SJ_CAUSAL_BOTTOM_RIGHT
                                ? "bottom_right"
                                : "top_left");
  cj_str(j, "family", cli_family_name(co->family));
  cj_str(j, "quant", cli_quant_name(p->qk_quant));
  cj_str(j, "accum", sj_pv_accum_name(co->accum)); /* as the family: what ran */
  cj_bool(j, "pad_strides", co->c.pad_strides);
  cj_num(j, "k_bias", co->c.k_bias);
  cj_bool(j, "with_lse", co->c.with_lse);
  cj_int(j, "seed", (int64_t)co->c.seed);
  cj_str(j, "status", k_verdict[co->verdict]);
  if (co->st == SJ_OK) {
    cj_num(j, "rel_l2", co->r.rel_l2);
    cj_num(j, "cosine", co->r.cosine);
    cj_num(j, "max_abs_err", co->r.max_abs_err);
    cj_num(j, "lse_max_abs_err", co->r.lse_max_abs_err);
    cj_int(j, "nonfinite", co->r.nonfinite);
    cj_int(j, "lse_mismatch", co->r.lse_mismatch);
    cj_int(j, "elements", co->r.elements);
  } else {
    cj_str(j, "error", sj_status_name(co->st));
  }
  if (co->why[0])
    cj_str(j, "reason", co->why);
  cj_obj_end(j);
}

/* The case list, built once; returns the count or -1. */
static int64_t build_cases(const check_opts *o, const int *dims, size_t n_dims,
                           const sj_dtype *dts, size_t n_dts,
                           const sj_family *fams, size_t n_fams,
                           const sj_quant_gran *qs, size_t n_qs,
                           const sj_pv_accum *accs, size_t n_accs,
                           case_out **out) {
  size_t cap = 64, n = 0;
  case_out *v = calloc(cap, sizeof *v);
  if (!v)
    return -1;
  uint64_t seed = (uint64_t)o->seed;
  size_t nd = o->quick ? 1 : n_dims, nt = o->quick ? 1 : n_dts;
  for (size_t fi = 0; fi < n_fams; fi++)
    for (size_t qi = 0; qi < n_qs; qi++)
      for (size_t ai = 0; ai < n_accs; ai++)
        for (size_t di = 0; di < nd; di++)
          for (size_t ti = 0; ti < nt; ti++)
            for (int causal = 0; causal <= 1; causal++)
              for (size_t si = 0; si < N_SHAPES; si++) {
                const shape *s = &k_shapes[si];
                if (o->quick && !s->quick)
                  continue;
                int n_align = causal && s->seq_q != s->seq_kv ? 2 : 1;
                for (int al = 0; al < n_align; al++) {
                  if (n == cap) {
                    cap *= 2;
                    case_out *nv = realloc(v, cap * sizeof *nv);
                    if (!nv) {
                      free(v);
                      return -1;
                    }
                    v = nv;
                  }
                  case_out *co = &v[n];
                  memset(co, 0, sizeof *co);
                  sj_attention_params *p = &co->c.params;
                  sj_attention_params_init(p);
                  p->dtype = dts[ti];
                  /* both layouts over each shape as the other axes turn */
                  p->layout = (si + ti + (size_t)causal + al) % 2
                                  ? SJ_LAYOUT_NHD
                                  : SJ_LAYOUT_HND;
                  p->batch = s->batch;
                  p->heads_q = s->heads_q;
                  p->heads_kv = s->heads_kv;
                  p->seq_q = s->seq_q;
                  p->seq_kv = s->seq_kv;
                  p->head_dim = dims[di];
                  p->causal = causal;
                  p->causal_align =
                      al ? SJ_CAUSAL_BOTTOM_RIGHT : SJ_CAUSAL_TOP_LEFT;
                  p->family = fams[fi];
                  p->qk_quant = qs[qi];
                  p->pv_accum = accs[ai];
                  co->c.seed = seed + n;
                  co->c.k_bias = K_BIAS;
                  co->c.pad_strides = s->pad;
                  co->c.with_lse = 1;
                  n++;
                }
              }
  *out = v;
  return (int64_t)n;
}

int cmd_check(int argc, char **argv) {
  check_opts o;
  memset(&o, 0, sizeof o);
  o.seed = 1;
  int rc = cli_start(&k_cmd, argc, argv, &o);
  if (rc != CLI_CONTINUE)
    return rc;
  if ((rc = cli_check_range(&k_cmd, "--seed", o.seed, 0, INT64_MAX)) ||
      (rc = cli_check_range(&k_cmd, "--device", o.device, 0, 1023)))
    return rc;

  int dims[CLI_MAX_LIST] = {64, 128};
  size_t n_dims = 2;
  sj_dtype dts[CLI_MAX_LIST] = {SJ_DTYPE_FP16, SJ_DTYPE_BF16};
  size_t n_dts = 2;
  sj_family fams[CLI_MAX_LIST] = {SJ_FAMILY_AUTO};
  size_t n_fams = 1;
  sj_quant_gran qs[CLI_MAX_LIST] = {SJ_QUANT_DEFAULT};
  size_t n_qs = 1;
  sj_pv_accum accs[CLI_MAX_LIST] = {SJ_ACCUM_DEFAULT};
  size_t n_accs = 1;
  if ((o.head_dim && (rc = cli_parse_ints(&k_cmd, "--head-dim", o.head_dim,
                                          1, 1024, dims, &n_dims))) ||
      (o.dtype && (rc = cli_parse_dtypes(&k_cmd, o.dtype, dts, &n_dts))) ||
      (o.family &&
       (rc = cli_parse_families(&k_cmd, o.family, fams, &n_fams))) ||
      (o.quant && (rc = cli_parse_quants(&k_cmd, o.quant, qs, &n_qs))) ||
      (o.accum && (rc = cli_parse_accums(&k_cmd, o.accum, accs, &n_accs))))
    return rc;

  int n_dev = 0;
  if ((rc = cli_require_gpu("check", &n_dev)) != 0)
    return rc;
  if (o.device >= n_dev)
    return cli_usage_error(&k_cmd, "--device %lld does not exist (%d "
                           "device%s)", o.device, n_dev, n_dev == 1 ? "" : "s");

  sj_config cfg;
  cli_config(&cfg, &o.common, (int)o.device, NULL);
  sj_context *ctx = NULL;
  sj_status st = cli_context_create(&ctx, &cfg);
  if (st != SJ_OK) {
    rc = cli_exit_for_status(st);
    return rc == CLI_EXIT_FAILED ? CLI_EXIT_ERROR : rc;
  }
  const sj_family ctx_family = sj_context_family(ctx);

  case_out *cases = NULL;
  int64_t n = build_cases(&o, dims, n_dims, dts, n_dts, fams, n_fams, qs, n_qs,
                          accs, n_accs, &cases);
  if (n < 0) {
    cli_err("out of memory");
    sj_context_destroy(ctx);
    return CLI_EXIT_ERROR;
  }
  sj_device_info dev;
  memset(&dev, 0, sizeof dev);
  sj_device_get_info((int)o.device, &dev);
  if (!o.common.json) {
    printf("sagejit check on device %lld (%s, %s), %lld cases\n", o.device,
           dev.name, sj_context_target(ctx), (long long)n);
    printf("%-4s %-52s %-7s %9s %9s %9s %9s  %s\n", "#", "case", "family",
           "rel_l2", "cosine", "max_abs", "lse_err", "result");
    fflush(stdout);
  }

  cli_progress bar;
  cli_progress_init(&bar, &o.common, "check");
  int64_t passed = 0, failed = 0, skipped = 0;
  int fatal = 0, io_error = 0;
  for (int64_t i = 0; i < n; i++) {
    case_out *co = &cases[i];
    char desc[160];
    describe(&co->c, desc, sizeof desc);
    cli_progress_update(&bar, i, n, desc);
    co->accum = co->c.params.pv_accum; /* sj_context_resolve fills it on success */
    co->st = sj_context_resolve(ctx, co->c.params.family,
                                (int)co->c.params.head_dim,
                                co->c.params.pv_accum, &co->family, &co->accum);
    if (co->st == SJ_OK)
      co->st = sj_check(ctx, &co->c, &co->r);
    else /* what sj_check would answer; the row names the family asked for */
      co->family = co->c.params.family == SJ_FAMILY_AUTO ? ctx_family
                                                         : co->c.params.family;
    if (co->st != SJ_OK && co->st != SJ_ERR_UNSUPPORTED)
      snprintf(co->why, sizeof co->why, "%s: %s", sj_status_name(co->st),
               sj_context_last_error(ctx));
    co->verdict = judge(co);
    if (co->verdict == CASE_PASS)
      passed++;
    else if (co->verdict == CASE_FAIL)
      failed++;
    else
      skipped++;
    if (!o.common.json) {
      cli_progress_clear(&bar);
      char opts[64] = "";
      if (co->c.params.qk_quant || co->c.params.pv_accum)
        snprintf(opts, sizeof opts, " %s/%s",
                 cli_quant_name(co->c.params.qk_quant),
                 sj_pv_accum_name(co->c.params.pv_accum));
      char d2[200];
      snprintf(d2, sizeof d2, "%s%s", desc, opts);
      if (co->st == SJ_OK)
        printf("%-4lld %-52s %-7s %9.2e %9.6f %9.2e %9.2e  %s%s%s\n",
               (long long)i + 1, d2, cli_family_name(co->family),
               co->r.rel_l2, co->r.cosine, co->r.max_abs_err,
               co->r.lse_max_abs_err, k_verdict[co->verdict],
               co->why[0] ? ": " : "", co->why);
      else
        printf("%-4lld %-52s %-7s %9s %9s %9s %9s  %s: %s\n",
               (long long)i + 1, d2, cli_family_name(co->family), "-", "-",
               "-", "-", k_verdict[co->verdict], co->why);
      fflush(stdout);
    }
    /* A missing requirement ends the run: every later case would fail the
     * same way. */
    if (co->st == SJ_ERR_NO_NVRTC || co->st == SJ_ERR_NO_DRIVER ||
        co->st == SJ_ERR_NO_DEVICE) {
      cli_err("sagejit check cannot run: %s", co->why);
      fatal = 1;
      n = i + 1;
      break;
    }
  }
  cli_progress_done(&bar);

  if (o.common.json) {
    cli_json j;
    cj_init(&j);
    cj_obj_begin(&j, NULL);
    cj_int(&j, "cases", n);
    cj_int(&j, "passed", passed);
    cj_int(&j, "failed", failed);
    cj_int(&j, "skipped", skipped);
    cj_str(&j, "device", dev.name);
    cj_str(&j, "target", sj_context_target(ctx));
    cj_str(&j, "auto_family", cli_family_name(ctx_family));
    /* the library's counters over the whole run: a process that found
     * every kernel in the cache has "compiles": 0 */
    sj_stats stats;
    memset(&stats, 0, sizeof stats);
    sj_context_get_stats(ctx, &stats);
    cj_obj_begin(&j, "stats");
    cj_int(&j, "compiles", (int64_t)stats.compiles);
    cj_int(&j, "disk_hits", (int64_t)stats.disk_hits);
    cj_int(&j, "misses", (int64_t)stats.misses);
    cj_int(&j, "mem_hits", (int64_t)stats.mem_hits);
    cj_int(&j, "driver_rejects", (int64_t)stats.driver_rejects);
    cj_obj_end(&j);
    cj_arr_begin(&j, "results");
    for (int64_t i = 0; i < n; i++)
      json_case(&j, &cases[i]);
    cj_arr_end(&j);
    cj_obj_end(&j);
    if (cj_print(&j) != 0)
      io_error = 1;
    cj_free(&j);
  } else {
    printf("check: %lld cases, %lld passed, %lld failed, %lld skipped\n",
           (long long)n, (long long)passed, (long long)failed,
           (long long)skipped);
    fflush(stdout);
  }
  free(cases);
  sj_context_destroy(ctx);
  if (fatal)
    return CLI_EXIT_USAGE;
  if (io_error)
    return CLI_EXIT_ERROR;
  return failed ? CLI_EXIT_FAILED : CLI_EXIT_OK;
}
