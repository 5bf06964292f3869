/*
 * warm.c -- precompile every kernel sj_attention could need for a matrix
 * of options, for any targets (also ones this machine does not have), in
 * parallel, idempotently: what is cached already is counted, not redone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

typedef struct work {
  sj_spec spec;
  sj_target target;
} work;

typedef struct warm_state {
  sj_context *ctx;
  const sj_warm_request *req;
  work *items;
  int64_t n;
  int64_t next, done, compiled, cached, failed;
  sj_status first_status; /* of the first failure, with its message */
  char first_error[1024];
  pthread_mutex_t lock;
} warm_state;

static void *worker(void *arg) {
  warm_state *ws = arg;
  for (;;) {
    pthread_mutex_lock(&ws->lock);
    int64_t i = ws->next < ws->n ? ws->next++ : -1;
    pthread_mutex_unlock(&ws->lock);
    if (i < 0)
      return NULL;
    int compiled = 0;
    char msg[1024];
    sj_status st = sj_kernel_ensure_cached(ws->ctx, &ws->items[i].spec,
                                           &ws->items[i].target, &compiled,
                                           msg, sizeof msg);
    char name[256];
    sj_spec_name(&ws->items[i].spec, name, sizeof name);
    pthread_mutex_lock(&ws->lock);
    ws->done++;
    if (st != SJ_OK) {
      if (!ws->failed++) {
        ws->first_status = st;
        sj_strlcpy(ws->first_error, msg, sizeof ws->first_error);
      }
    } else if (compiled) {
      ws->compiled++;
    } else {
      ws->cached++;
    }
    if (ws->req->progress)
      ws->req->progress(ws->req->progress_user, ws->done, ws->n,
                        ws->items[i].target.name, name, st);
    pthread_mutex_unlock(&ws->lock);
    if (st != SJ_OK)
      sj_log(&ws->ctx->log, SJ_LOG_ERROR, "warm: %s for %s: %s", name,
             ws->items[i].target.name, msg);
  }
}

static int add_item(work **items, int64_t *n, int64_t *cap, const sj_spec *s,
                    const sj_target *t) {
  for (int64_t i = 0; i < *n; i++)
    if (!memcmp(&(*items)[i].spec, s, sizeof *s) &&
        !strcmp((*items)[i].target.name, t->name))
      return 0;
  if (*n == *cap) {
    int64_t nc = *cap ? *cap * 2 : 64;
    work *ni = realloc(*items, (size_t)nc * sizeof *ni);
    if (!ni)
      return -1;
    *items = ni;
    *cap = nc;
  }
  (*items)[*n].spec = *s;
  (*items)[*n].target = *t;
  (*n)++;
  return 0;
}

sj_status sj_warm(sj_context *ctx, const sj_warm_request *req,
                  sj_warm_result *out) {
  if (!ctx || !req)
    return SJ_ERR_INVALID_ARGUMENT;
  const double t0 = sj_now_ms();
  static const int def_dims[] = {64, 128};
  static const int def_causal[] = {0, 1};
  static const sj_dtype def_dtypes[] = {SJ_DTYPE_FP16, SJ_DTYPE_BF16};
  static const sj_family def_fam[] = {SJ_FAMILY_AUTO};
  static const sj_quant_gran def_quant[] = {SJ_QUANT_DEFAULT};
  static const sj_pv_accum def_accum[] = {SJ_ACCUM_DEFAULT};
#define AXIS(field, nfield, def)                                               \
  const size_t n_##field = req->nfield ? req->nfield : sizeof def / sizeof *def; \
  const void *field##_src = req->nfield ? (const void *)req->field : (const void *)def
  AXIS(head_dims, n_head_dims, def_dims);
  AXIS(causal, n_causal, def_causal);
  AXIS(dtypes, n_dtypes, def_dtypes);
  AXIS(families, n_families, def_fam);
  AXIS(quant, n_quant, def_quant);
  AXIS(accum, n_accum, def_accum);
#undef AXIS
  const int *dims = head_dims_src;
  const int *causals = causal_src;
  const sj_dtype *dts = dtypes_src;
  const sj_family *fams = families_src;
  const sj_quant_gran *qgs = quant_src;
  const sj_pv_accum *accs = accum_src;

  size_t n_targets = req->n_targets ? req->n_targets : 1;
  sj_target *targets = calloc(n_targets, sizeof *targets);
  if (!targets)
    return sj_fail(ctx, SJ_ERR_OUT_OF_MEMORY, "out of memory");
  for (size_t i = 0; i < n_targets; i++) {
    if (!req->n_targets) {
      targets[i] = ctx->target;
    } else if (!req->targets || !req->targets[i] ||
               sj_target_parse(req->targets[i], &targets[i]) != 0) {
      free(targets);
      return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "unknown target '%s'",
                     req->targets && req->targets[i] ? req->targets[i] : "");
    }
  }
  for (size_t i = 0; i < n_dtypes; i++)
    if (dts[i] != SJ_DTYPE_FP16 && dts[i] != SJ_DTYPE_BF16) {
      free(targets);
      return sj_fail(ctx, SJ_ERR_INVALID_ARGUMENT, "unknown dtype %d",
                     (int)dts[i]);
    }

  work *items = NULL;
  int64_t n = 0, cap = 0, skipped = 0;
  for (size_t ti = 0; ti < n_targets; ti++)
    for (size_t fi = 0; fi < n_families; fi++)
      for (size_t di = 0; di < n_dtypes; di++)
        for (size_t hi = 0; hi < n_head_dims; hi++)
          for (size_t ci = 0; ci < n_causal; ci++)
            for (size_t qi = 0; qi < n_quant; qi++)
              for (size_t ai = 0; ai < n_accum; ai++) {
                sj_plan plan;
                char msg[256];
                if (sj_plan_make(&targets[ti], fams[fi], dts[di], dims[hi],
                                 causals[ci], qgs[qi], accs[ai], -1, -1, &plan,
                                 msg, sizeof msg) != SJ_OK) {
                  skipped++;
                  continue;
                }
                /* and the attention kernels the call's length may pick
                 * instead (add_item drops repeats) */
                sj_plan by_len[2] = {plan, plan};
                sj_plan_for_length(&by_len[0], &targets[ti], SJ_SHORT_SEQ, SJ_SHORT_SEQ);
                sj_plan_for_length(&by_len[1], &targets[ti], SJ_SOLO_SEQ, SJ_SOLO_SEQ);
                for (int s = 0; s < plan.n_specs + 2; s++)
                  if (add_item(&items, &n, &cap,
                               s < plan.n_specs ? &plan.specs[s]
                                                : &by_len[s - plan.n_specs].specs[3],
                               &targets[ti]) != 0) {
                    free(items);
                    free(targets);
                    return sj_fail(ctx, SJ_ERR_OUT_OF_MEMORY, "out of memory");
                  }
              }
  free(targets);

  warm_state ws;
  memset(&ws, 0, sizeof ws);
  ws.ctx = ctx;
  ws.req = req;
  ws.items = items;
  ws.n = n;
  pthread_mutex_init(&ws.lock, NULL);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int jobs = req->jobs > 0 ? req->jobs : (ncpu > 0 ? (int)ncpu : 1);
  if (jobs > 64)
    jobs = 64;
  if (jobs > n)
    jobs = n > 0 ? (int)n : 1;
  pthread_t th[64];
  int started = 0;
  for (int i = 1; i < jobs; i++) {
    if (pthread_create(&th[started], NULL, worker, &ws) != 0)
      break; /* fewer threads is fine */
    started++;
  }
  worker(&ws);
  for (int i = 0; i < started; i++)
    pthread_join(th[i], NULL);
  pthread_mutex_destroy(&ws.lock);
  free(items);

  sj_warm_result r;
  memset(&r, 0, sizeof r);
  r.total = n;
  r.compiled = ws.compiled;
  r.cached = ws.cached;
  r.failed = ws.failed;
  r.skipped = skipped;
  r.seconds = (sj_now_ms() - t0) / 1000.0;
  if (out)
    *out = r;
  if (r.failed)
    return sj_fail(ctx, ws.first_status == SJ_ERR_NO_NVRTC ? SJ_ERR_NO_NVRTC
                                                          : SJ_ERR_COMPILE,
                   "%lld of %lld kernels failed to compile; the first: %s",
                   (long long)r.failed, (long long)r.total, ws.first_error);
  return SJ_OK;
}
