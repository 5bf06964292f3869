/*
 * test_spills.c -- every WGMMA attention kernel compiles, and ptxas keeps it
 * in registers.  This is also the CI's full-option-matrix compile of the
 * WGMMA family (test_compile_matrix covers the mma.sync families).
 *
 * Each of the 60 sm_90a instantiations (2 dtypes x head dims 64, 128, 256
 * x causal x 5 P.V modes), the 6 of short causal sequences (sj_plan_short:
 * 2 dtypes x the default and its two bodies, pvi8 and split V) and the 12
 * of solo sequences (sj_plan_solo: the same x causal) is compiled with
 * NVRTC and
 * ptxas's resource report ("--ptxas-options=-v", which the cache key never
 * sees), and its spill and stack bytes are read from the log.  The loop is
 * latency-bound: a change that looked harmless once spilled 844 bytes per
 * thread and ran 36 % slower (bench/NOTES.md, tenth session), and nothing
 * else would have said so before a device run.  Allowed: none, except
 * bf16 at D = 256 (one or two words, 8 bytes at most, present since those
 * kernels exist; docs/kernels.md, Resources).  Each kernel's registers and
 * shared memory must also let as many CTAs share a multiprocessor as the
 * host sized its stages for (three solo CTAs, four on the short causal
 * route, ...): a template change that took the short kernel back to 168
 * registers would otherwise run three CTAs in silence.  CPU only; label `compile`
 * like test_compile_matrix (a minute of NVRTC on two cores).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"

/* The granularity is a kernel argument (one kernel serves all three), so
 * the cases have no granularity axis; each plan asks for per_thread. */
#define N_CASES (2 * 3 * 2 * 5 + 2 * 3 + 2 * 3 * 2)

typedef struct spill_case {
  sj_dtype dtype;
  int head_dim, causal;
  sj_quant_gran quant;
  sj_pv_accum accum;
  int short_seq; /* 1: the kernel of short sequences (sj_plan_short), 2:
                   of solo sequences (sj_plan_solo) */
  /* results */
  sj_status st;
  int parsed; /* the report's three numbers and the register count read */
  int stack, stores, loads, regs;
  int threads, smem, nc, bn; /* the launch: block size, dynamic shared
                                memory, consumer warpgroups, keys per tile */
  char msg[256];
} spill_case;

typedef struct work {
  spill_case *cases;
  int n, next;
  pthread_mutex_t lock;
  sj_target target;
} work;

/* Reads "N bytes stack frame, S bytes spill stores, L bytes spill loads"
 * and "Used R registers" from a ptxas report of one entry function. */
static int parse_report(const char *log, spill_case *c) {
  const char *p = log ? strstr(log, "bytes stack frame") : NULL;
  if (!p)
    return 0;
  while (p > log && p[-1] != '.' && p[-1] != '\n')
    p--; /* back to the number after "ptxas         ." */
  if (sscanf(
          p,
          " %d bytes stack frame, %d bytes spill stores, %d bytes spill loads",
          &c->stack, &c->stores, &c->loads) != 3)
    return 0;
  const char *u = strstr(log, "Used ");
  return u && sscanf(u, "Used %d registers", &c->regs) == 1;
}

static void run_case(const sj_target *t, spill_case *c) {
  sj_plan plan;
  c->st = sj_plan_make(t, SJ_FAMILY_WGMMA, c->dtype, c->head_dim, c->causal,
                       c->quant, c->accum, 1, 0, &plan, c->msg, sizeof c->msg);
  if (c->st != SJ_OK)
    return;
  if ((c->short_seq == 1 && !sj_plan_short(&plan, t)) ||
      (c->short_seq == 2 && !sj_plan_solo(&plan, t))) {
    c->st = SJ_ERR_INTERNAL;
    snprintf(c->msg, sizeof c->msg, "plan has no short-sequence kernel");
    return;
  }
  const sj_spec *attn = NULL;
  for (int i = 0; i < plan.n_specs; i++)
    if (plan.specs[i].kind == SJ_KERNEL_ATTN)
      attn = &plan.specs[i];
  if (!attn) {
    c->st = SJ_ERR_INTERNAL;
    snprintf(c->msg, sizeof c->msg, "plan has no attention kernel");
    return;
  }
  const sj_launch_shape sh = sj_spec_shape(attn);
  c->threads = sh.threads;
  c->smem = sh.smem_bytes;
  c->nc = attn->wg_consumers;
  c->bn = attn->ksub;
  sj_compiled out;
  c->st = sj_compile_opt(attn, t, "--ptxas-options=-v", &out, c->msg,
                         sizeof c->msg);
  if (c->st == SJ_OK)
    c->parsed = parse_report(out.log, c);
  sj_compiled_free(&out); /* the log too */
}

/* The CTAs per multiprocessor the host sizes a kernel's stages for
 * (wgmma_stages in runtime/spec.c; the launch bounds ask for the same). */
static int intended_ctas(const spill_case *c) {
  return sj_wgmma_ctas_per_sm(c->head_dim, c->bn, c->nc);
}

/* How many the registers (64K per multiprocessor, allocated per warp in
 * units of 256) and the shared memory (the opt-in limit plus the 1 KB each
 * CTA keeps for the system) allow. */
static int resident_ctas(const spill_case *c, const sj_target *t) {
  const int per_warp = (c->regs * 32 + 255) / 256 * 256;
  const int by_regs = 65536 / (per_warp * (c->threads / 32));
  const int by_smem = (t->smem_optin + 1024) / (c->smem + 1024);
  return by_regs < by_smem ? by_regs : by_smem;
}

static void *worker(void *arg) {
  work *w = arg;
  for (;;) {
    pthread_mutex_lock(&w->lock);
    const int i = w->next++;
    pthread_mutex_unlock(&w->lock);
    if (i >= w->n)
      return NULL;
    run_case(&w->target, &w->cases[i]);
  }
}

static void test_occupancy_rule(void **state) {
  (void)state;
  /* the rule on resources worked out by hand (sm_90a: 232448 bytes opt-in) */
  sj_target t;
  assert_int_equal(sj_target_parse("sm_90a", &t), 0);
  spill_case c;
  memset(&c, 0, sizeof c);
  c.head_dim = 128;
  c.bn = 64;
  c.threads = 128;
  c.regs = 128;
  c.smem = 43992; /* four of 45016 in 233472 */
  assert_int_equal(intended_ctas(&c), 4);
  assert_int_equal(resident_ctas(&c, &t), 4);
  c.regs = 168; /* 168 x 128 x 4 > 64K: three */
  assert_int_equal(resident_ctas(&c, &t), 3);
  c.regs = 128;
  c.smem = 60400; /* three stages: three of 61424 */
  assert_int_equal(resident_ctas(&c, &t), 3);
  c.bn = 128;
  c.regs = 168;
  c.smem = 76760;
  assert_int_equal(intended_ctas(&c), 3);
  assert_int_equal(resident_ctas(&c, &t), 3);
  c.nc = 2;
  c.threads = 384;
  c.smem = 117592;
  assert_int_equal(intended_ctas(&c), 1);
  assert_int_equal(resident_ctas(&c, &t), 1);
}

static void test_parse_report(void **state) {
  (void)state;
  /* the report's shape as ptxas 13.0 prints it, and what must not pass */
  spill_case c;
  memset(&c, 0, sizeof c);
  const char *ok =
      "ptxas info    : Function properties for _ZN2sj10attn_wgmma\n"
      "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes "
      "spill loads\n"
      "ptxas info    : Used 168 registers, used 2 barriers\n";
  assert_int_equal(parse_report(ok, &c), 1);
  assert_int_equal(c.stack, 8);
  assert_int_equal(c.stores, 4);
  assert_int_equal(c.loads, 12);
  assert_int_equal(c.regs, 168);
  assert_int_equal(parse_report("ptxas info    : Used 168 registers\n", &c), 0);
  assert_int_equal(parse_report(NULL, &c), 0);
}

static void test_wgmma_kernels_do_not_spill(void **state) {
  (void)state;
  if (sj_nvrtc_version(NULL, NULL) != SJ_OK)
    skip();
  static const sj_dtype dtypes[] = {SJ_DTYPE_FP16, SJ_DTYPE_BF16};
  static const int dims[] = {64, 128, 256};
  static const sj_pv_accum accums[] = {SJ_ACCUM_FP32_FP32,
                                       SJ_ACCUM_FP32_FP32_SPLITV, SJ_ACCUM_PV16,
                                       SJ_ACCUM_PVI8, SJ_ACCUM_PVI8_SPLITV};
  static spill_case cases[N_CASES];
  int n = 0;
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 2; c++)
        for (int e = 0; e < 5; e++) {
          memset(&cases[n], 0, sizeof cases[n]);
          cases[n].dtype = dtypes[a];
          cases[n].head_dim = dims[b];
          cases[n].causal = c;
          cases[n].quant = SJ_QUANT_PER_THREAD;
          cases[n].accum = accums[e];
          n++;
        }
  /* the length-routed kernels: short (causal only) and solo (both) */
  static const sj_pv_accum routed_accums[] = {
      SJ_ACCUM_PVI8_SPLITV, SJ_ACCUM_PVI8, SJ_ACCUM_FP32_FP32_SPLITV};
  for (int route = 1; route <= 2; route++)
    for (int a = 0; a < 2; a++)
      for (int e = 0; e < 3; e++)
        for (int c = route == 1; c < 2; c++) {
          memset(&cases[n], 0, sizeof cases[n]);
          cases[n].dtype = dtypes[a];
          cases[n].head_dim = 128;
          cases[n].causal = c;
          cases[n].quant = SJ_QUANT_PER_THREAD;
          cases[n].accum = routed_accums[e];
          cases[n].short_seq = route;
          n++;
        }
  assert_int_equal(n, N_CASES);

  work w;
  memset(&w, 0, sizeof w);
  w.cases = cases;
  w.n = n;
  pthread_mutex_init(&w.lock, NULL);
  assert_int_equal(sj_target_parse("sm_90a", &w.target), 0);
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&th[i], NULL, worker, &w), 0);
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  pthread_mutex_destroy(&w.lock);

  int clean = 0, allowed = 0, bad = 0;
  for (int i = 0; i < n; i++) {
    const spill_case *c = &cases[i];
    char what[96];
    const char *aname = c->accum == SJ_ACCUM_FP32_FP32          ? "fp32+fp32"
                        : c->accum == SJ_ACCUM_FP32_FP32_SPLITV ? "splitv"
                        : c->accum == SJ_ACCUM_PV16             ? "pv16"
                        : c->accum == SJ_ACCUM_PVI8             ? "pvi8"
                                                                : "pvi8+splitv";
    snprintf(what, sizeof what, "%s D%d %s %s%s",
             c->dtype == SJ_DTYPE_BF16 ? "bf16" : "fp16", c->head_dim,
             c->causal ? "causal" : "dense", aname,
             c->short_seq == 1 ? " (short)" : (c->short_seq == 2 ? " (solo)" : ""));
    if (c->st != SJ_OK) {
      print_error("%s: %s: %s\n", what, sj_status_name(c->st), c->msg);
      bad++;
      continue;
    }
    if (!c->parsed) {
      print_error("%s: no resource report in the NVRTC log\n", what);
      bad++;
      continue;
    }
    const int limit = c->dtype == SJ_DTYPE_BF16 && c->head_dim == 256 ? 8 : 0;
    if (c->stack > limit || c->stores > limit || c->loads > limit) {
      print_error("%s: %d bytes stack, %d spill stores, %d spill loads "
                  "(at most %d), %d registers\n",
                  what, c->stack, c->stores, c->loads, limit, c->regs);
      bad++;
    } else if (resident_ctas(c, &w.target) < intended_ctas(c)) {
      print_error("%s: %d registers x %d threads and %d bytes of shared memory "
                  "fit %d CTAs per multiprocessor, not the %d its stages are "
                  "sized for\n",
                  what, c->regs, c->threads, c->smem, resident_ctas(c, &w.target),
                  intended_ctas(c));
      bad++;
    } else if (c->stores || c->loads) {
      allowed++;
    } else {
      clean++;
    }
  }
  print_message("%d wgmma kernels: %d without spills, %d within the bf16 "
                "D = 256 allowance, %d over\n",
                n, clean, allowed, bad);
  assert_int_equal(bad, 0);
  assert_int_equal(clean + allowed, N_CASES);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_report),
      cmocka_unit_test(test_occupancy_rule),
      cmocka_unit_test(test_wgmma_kernels_do_not_spill),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
