/*
 * test_runtime.c -- CPU tests of the runtime: targets, specs, plans,
 * contexts, parameter validation, status texts, and the library's silence.
 * None of these needs a GPU.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "testutil.h"

/* ----------------------------------------------------------------- targets */

static void test_target_table(void **state) {
  (void)state;
  static const int all[] = {75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121};
  const struct {
    int maj, min;
    const char *name;
    sj_family fam;
  } cases[] = {{8, 0, "sm_80", SJ_FAMILY_FP16PV},   {8, 6, "sm_86", SJ_FAMILY_FP16PV},
               {8, 7, "sm_87", SJ_FAMILY_FP16PV},   {8, 9, "sm_89", SJ_FAMILY_FP8PV},
               {9, 0, "sm_90a", SJ_FAMILY_WGMMA},   {10, 0, "sm_100a", SJ_FAMILY_FP8PV},
               {10, 3, "sm_103a", SJ_FAMILY_FP8PV}, {11, 0, "sm_110a", SJ_FAMILY_FP8PV},
               {12, 0, "sm_120a", SJ_FAMILY_FP8PV}, {12, 1, "sm_121a", SJ_FAMILY_FP8PV}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    sj_target t;
    char note[256];
    assert_int_equal(sj_target_for_device(cases[i].maj, cases[i].min, all, 12,
                                          &t, note, sizeof note),
                     0);
    assert_string_equal(t.name, cases[i].name);
    assert_int_equal(t.is_ptx, 0);
    assert_int_equal(t.family, cases[i].fam);
    assert_string_equal(note, "");
  }
}

static void test_target_newer_than_nvrtc(void **state) {
  (void)state;
  /* NVRTC 12.4 knew up to sm_90: a Blackwell device gets PTX for 90. */
  static const int old[] = {80, 86, 87, 89, 90};
  sj_target t;
  char note[256];
  assert_int_equal(sj_target_for_device(10, 0, old, 5, &t, note, sizeof note), 0);
  assert_string_equal(t.name, "compute_90");
  assert_int_equal(t.is_ptx, 1);
  assert_non_null(strstr(note, "PTX"));
  /* A device sagejit has never heard of (sm_130) with a newer NVRTC. */
  static const int future[] = {80, 90, 120, 130};
  assert_int_equal(sj_target_for_device(13, 0, future, 4, &t, note, sizeof note), 0);
  assert_string_equal(t.name, "compute_130");
  /* Older than Ampere: refused with a reason. */
  assert_int_equal(sj_target_for_device(7, 5, future, 4, &t, note, sizeof note), -1);
  assert_non_null(strstr(note, "sm_80"));
}

static void test_target_parse(void **state) {
  (void)state;
  sj_target t;
  assert_int_equal(sj_target_parse("sm_90a", &t), 0);
  assert_string_equal(t.name, "sm_90a");
  assert_int_equal(t.sm, 90);
  assert_int_equal(sj_target_parse("compute_120", &t), 0);
  assert_int_equal(t.is_ptx, 1);
  assert_int_equal(t.sm, 120);
  assert_int_equal(sj_target_parse("89", &t), 0);
  assert_string_equal(t.name, "sm_89");
  assert_int_equal(sj_target_parse("sm_75", &t), -1);
  assert_int_equal(sj_target_parse("sm_9x", &t), -1);
  assert_int_equal(sj_target_parse("", &t), -1);
  assert_int_equal(sj_target_parse(NULL, &t), -1);
  assert_int_equal(sj_target_parse("gfx90a", &t), -1);
}

/* ------------------------------------------------------------------ plans */

/* The plan AUTO makes on t (default granularity and smoothing); it must
 * succeed. */
static sj_plan auto_plan(const sj_target *t, sj_dtype dt, int d, int causal,
                         sj_pv_accum acc) {
  sj_plan p;
  char msg[256];
  assert_int_equal(sj_plan_make(t, SJ_FAMILY_AUTO, dt, d, causal, 0, acc, -1, -1, &p,
                                msg, sizeof msg),
                   SJ_OK);
  return p;
}

/* A length route (sj_plan_short, sj_plan_solo) leaves each of these plans
 * as it is and says so; the last one is for t_last (another target). */
static void unrouted(int (*route)(sj_plan *, const sj_target *), const sj_plan *plans,
                     size_t n, const sj_target *t, const sj_target *t_last) {
  for (size_t i = 0; i < n; i++) {
    sj_plan q = plans[i];
    assert_int_equal(route(&q, i == n - 1 ? t_last : t), 0);
    assert_memory_equal(&q, &plans[i], sizeof q);
  }
}

static void test_plan_defaults(void **state) {
  (void)state;
  sj_target t80, t89, t90;
  sj_target_parse("sm_80", &t80);
  sj_target_parse("sm_89", &t89);
  sj_target_parse("sm_90a", &t90);
  sj_plan p;
  char msg[256];
  p = auto_plan(&t80, SJ_DTYPE_FP16, 128, 0, SJ_ACCUM_DEFAULT);
  assert_int_equal(p.family, SJ_FAMILY_FP16PV);
  assert_int_equal(p.quant, SJ_QUANT_PER_THREAD);
  assert_int_equal(p.accum, SJ_ACCUM_FP32);
  assert_int_equal(p.smooth_k, 1);
  assert_int_equal(p.smooth_v, 0);
  /* attn_mma: three K/V stages while two CTAs fit a multiprocessor (98304
   * bytes each at D = 128: not on the A100's 163 KB), but two at D = 64
   * (measured faster there, bench/NOTES.md) */
  assert_int_equal(p.stages, 2);
  p = auto_plan(&t80, SJ_DTYPE_FP16, 96, 1, SJ_ACCUM_DEFAULT);
  assert_int_equal(p.stages, 3);
  p = auto_plan(&t80, SJ_DTYPE_FP16, 64, 0, SJ_ACCUM_DEFAULT);
  assert_int_equal(p.stages, 2);
  p = auto_plan(&t80, SJ_DTYPE_FP16, 32, 0, SJ_ACCUM_DEFAULT);
  assert_int_equal(p.stages, 3);
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_FP16PV, SJ_DTYPE_FP16, 128, 0, 0,
                                SJ_ACCUM_DEFAULT, -1, -1, &p, msg, sizeof msg),
                   SJ_OK);
  assert_int_equal(p.stages, 3);
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_FP8PV, SJ_DTYPE_FP16, 64, 1, 0,
                                SJ_ACCUM_DEFAULT, -1, -1, &p, msg, sizeof msg),
                   SJ_OK);
  assert_int_equal(p.stages, 2);
  /* causal calls on sm_90: two stages at D = 32, at D = 96 where the
   * tiles come by TMA (measured faster there, bench/NOTES.md st2), and at
   * D = 128 for FP16PV fp32 and fp16+fp32 and FP8PV pvi8+splitv, in TMA
   * tiles (st128); three without the mask, for D = 96's cp.async mode
   * (split V),
   * D = 128's other modes and on other targets (sm_80 and sm_89 have room
   * for two stages only at D = 128) */
  {
    const struct {
      const sj_target *t;
      sj_family fam;
      sj_pv_accum acc;
      int d, causal, stages, tma;
    } st[] = {
        {&t90, SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV, 96, 1, 2, 1},
        {&t90, SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV, 96, 0, 3, 1},
        {&t90, SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 96, 1, 2, 1},
        {&t90, SJ_FAMILY_FP8PV, SJ_ACCUM_FP32, 96, 1, 2, 1},
        {&t90, SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32, 96, 1, 2, 1},
        {&t90, SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32_SPLITV, 96, 1, 3, 0},
        {&t90, SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 32, 1, 2, 0},
        {&t90, SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 32, 0, 3, 0},
        {&t90, SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32, 32, 1, 2, 1},
        {&t90, SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV, 32, 1, 2, 0},
        {&t90, SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV, 32, 0, 3, 1},
        {&t89, SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP16, 32, 1, 3, 0},
        {&t80, SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 96, 1, 3, 0},
        /* D = 128: two TMA stages for the causal cells of mma_st2_128 */
        {&t90, SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 128, 1, 2, 1},
        {&t90, SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 128, 0, 3, 1},
        {&t90, SJ_FAMILY_FP16PV, SJ_ACCUM_FP16_FP32, 128, 1, 2, 1},
        {&t90, SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV, 128, 1, 2, 1},
        {&t90, SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV, 128, 0, 3, 1},
        {&t90, SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32, 128, 1, 3, 1},
        {&t90, SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP16, 128, 1, 3, 1},
        {&t90, SJ_FAMILY_FP8PV, SJ_ACCUM_FP32, 128, 1, 3, 1},
        {&t90, SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8, 128, 1, 3, 0},
        {&t89, SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV, 128, 1, 2, 0},
        {&t80, SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 128, 1, 2, 0},
    };
    for (size_t i = 0; i < sizeof st / sizeof *st; i++) {
      assert_int_equal(sj_plan_make(st[i].t, st[i].fam, SJ_DTYPE_FP16, st[i].d, st[i].causal,
                                    0, st[i].acc, -1, -1, &p, msg, sizeof msg),
                       SJ_OK);
      if (p.stages != st[i].stages || p.tma != st[i].tma)
        fail_msg("stages case %zu: %d stages, tma %d; want %d, %d", i, p.stages, p.tma,
                 st[i].stages, st[i].tma);
      assert_int_equal(p.specs[3].stages, p.stages);
    }
  }
  p = auto_plan(&t89, SJ_DTYPE_BF16, 64, 1, SJ_ACCUM_DEFAULT);
  assert_int_equal(p.family, SJ_FAMILY_FP8PV);
  assert_int_equal(p.accum, SJ_ACCUM_FP32_FP16);
  p = auto_plan(&t90, SJ_DTYPE_FP16, 128, 0, SJ_ACCUM_DEFAULT);
  assert_int_equal(p.family, SJ_FAMILY_WGMMA);
  /* pvi8 or split V per (batch, kv head), chosen by the preprocessing */
  assert_int_equal(p.accum, SJ_ACCUM_PVI8_SPLITV);
  assert_int_equal(p.warp_q, 16); /* the quantizer's scale layout */
  assert_int_equal(p.n_specs, 4);
  assert_int_equal(p.wg_consumers, 2);
  assert_int_equal(sj_spec_shape(&p.specs[3]).threads, 384);
  /* D = 64: one warpgroup and no producer, three CTAs per multiprocessor
   * (each within a third of the shared memory), two stages for split V */
  p = auto_plan(&t90, SJ_DTYPE_FP16, 64, 0, SJ_ACCUM_DEFAULT);
  assert_int_equal(p.wg_consumers, 0);
  assert_int_equal(sj_spec_shape(&p.specs[3]).threads, 128);
  assert_int_equal(p.stages, 2);
  assert_true(3 * (sj_spec_shape(&p.specs[3]).smem_bytes + 1024) <=
              t90.smem_optin + 1024);
  /* pv16 keeps one consumer and its producer (two CTAs) */
  p = auto_plan(&t90, SJ_DTYPE_FP16, 64, 0, SJ_ACCUM_PV16);
  assert_int_equal(p.wg_consumers, 1);
  assert_int_equal(sj_spec_shape(&p.specs[3]).threads, 256);
  /* pvi8 alone (one V byte) keeps three stages */
  p = auto_plan(&t90, SJ_DTYPE_FP16, 64, 0, SJ_ACCUM_PVI8);
  assert_int_equal(p.stages, 3);
  assert_true(3 * (sj_spec_shape(&p.specs[3]).smem_bytes + 1024) <=
              t90.smem_optin + 1024);
  /* Short causal sequences at D = 128: solo CTAs with 64-key tiles
   * (sj_plan_short), a kernel of its own in the cache, four per
   * multiprocessor (solo_ctas in sj_attn_wgmma.cuh): the pvi8 body in two
   * stages, split V's in one */
  p = auto_plan(&t90, SJ_DTYPE_FP16, 128, 1, SJ_ACCUM_DEFAULT);
  sj_plan q = p;
  assert_int_equal(sj_plan_short(&q, &t90), 1);
  assert_int_equal(q.wg_consumers, 0);
  assert_int_equal(q.ksub, 64);
  assert_int_equal(q.stages, 2);
  assert_int_equal(q.specs[3].wg_consumers, 0);
  assert_int_equal(q.specs[3].ksub, 64);
  assert_int_equal(sj_spec_shape(&q.specs[3]).threads, 128);
  assert_true(4 * (sj_spec_shape(&q.specs[3]).smem_bytes + 1024) <=
              t90.smem_optin + 1024);
  char n_long[256], n_short[256];
  assert_true(sj_spec_name(&p.specs[3], n_long, sizeof n_long) == 0);
  assert_true(sj_spec_name(&q.specs[3], n_short, sizeof n_short) == 0);
  assert_string_not_equal(n_long, n_short);
  assert_memory_equal(&q.specs[2], &p.specs[2], sizeof p.specs[2]);
  /* the default's two bodies alone take the same shape (the default is
   * bit for bit the mode it picks per head) */
  static const sj_pv_accum bodies[] = {SJ_ACCUM_PVI8, SJ_ACCUM_FP32_FP32_SPLITV};
  static const int body_stages[] = {2, 1};
  for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
    sj_plan r = auto_plan(&t90, SJ_DTYPE_BF16, 128, 1, bodies[i]);
    assert_int_equal(sj_plan_short(&r, &t90), 1);
    assert_int_equal(r.specs[3].wg_consumers, 0);
    assert_int_equal(r.specs[3].ksub, 64);
    assert_int_equal(r.specs[3].accum, bodies[i]);
    assert_int_equal(r.stages, body_stages[i]);
    assert_true(4 * (sj_spec_shape(&r.specs[3]).smem_bytes + 1024) <=
                t90.smem_optin + 1024);
  }
  /* the default's launch holds its pvi8 body's two stages (split V's one
   * stage is smaller) */
  {
    sj_plan i8 = auto_plan(&t90, SJ_DTYPE_FP16, 128, 1, SJ_ACCUM_PVI8);
    assert_int_equal(sj_plan_short(&i8, &t90), 1);
    assert_int_equal(sj_spec_shape(&q.specs[3]).smem_bytes,
                     sj_spec_shape(&i8.specs[3]).smem_bytes);
  }
  /* Longer sequences up to SJ_SOLO_SEQ: solo CTAs with 128-key tiles, three
   * per multiprocessor; the default's pvi8 body in two stages, its split V
   * body (and split V alone) in one */
  static const sj_pv_accum solo_modes[] = {SJ_ACCUM_DEFAULT, SJ_ACCUM_PVI8,
                                           SJ_ACCUM_FP32_FP32_SPLITV};
  static const int solo_stages[] = {2, 2, 1};
  for (size_t i = 0; i < 3; i++)
    for (int causal = 0; causal < 2; causal++) {
      sj_plan r = auto_plan(&t90, SJ_DTYPE_FP16, 128, causal, solo_modes[i]);
      const sj_plan before = r;
      assert_int_equal(sj_plan_solo(&r, &t90), 1);
      assert_int_equal(r.specs[3].wg_consumers, 0);
      assert_int_equal(r.specs[3].ksub, 128);
      assert_int_equal(r.specs[3].stages, solo_stages[i]);
      assert_int_equal(sj_spec_shape(&r.specs[3]).threads, 128);
      assert_true(3 * (sj_spec_shape(&r.specs[3]).smem_bytes + 1024) <=
                  t90.smem_optin + 1024);
      char n_solo[256], n_two[256];
      assert_true(sj_spec_name(&r.specs[3], n_solo, sizeof n_solo) == 0);
      assert_true(sj_spec_name(&before.specs[3], n_two, sizeof n_two) == 0);
      assert_string_not_equal(n_solo, n_two);
      assert_memory_equal(&r.specs[2], &before.specs[2], sizeof r.specs[2]);
    }
  /* the default's launch holds the larger of its two bodies: pvi8 in two
   * stages, split V in one */
  {
    sj_plan r = auto_plan(&t90, SJ_DTYPE_FP16, 128, 0, SJ_ACCUM_DEFAULT);
    sj_plan i8 = auto_plan(&t90, SJ_DTYPE_FP16, 128, 0, SJ_ACCUM_PVI8);
    sj_plan sv = auto_plan(&t90, SJ_DTYPE_FP16, 128, 0, SJ_ACCUM_FP32_FP32_SPLITV);
    assert_int_equal(sj_plan_solo(&r, &t90), 1);
    assert_int_equal(sj_plan_solo(&i8, &t90), 1);
    assert_int_equal(sj_plan_solo(&sv, &t90), 1);
    const int m = sj_spec_shape(&r.specs[3]).smem_bytes;
    const int a = sj_spec_shape(&i8.specs[3]).smem_bytes;
    const int b = sj_spec_shape(&sv.specs[3]).smem_bytes;
    assert_int_equal(m, a > b ? a : b);
    assert_true(a > b);
  }
  /* ... and nothing else: non-causal, D = 64, another mode, another family */
  const sj_plan others[] = {
      auto_plan(&t90, SJ_DTYPE_FP16, 128, 0, SJ_ACCUM_DEFAULT),
      auto_plan(&t90, SJ_DTYPE_FP16, 64, 1, SJ_ACCUM_DEFAULT),
      auto_plan(&t90, SJ_DTYPE_FP16, 128, 1, SJ_ACCUM_FP32_FP32),
      auto_plan(&t90, SJ_DTYPE_FP16, 128, 1, SJ_ACCUM_PV16),
      auto_plan(&t89, SJ_DTYPE_FP16, 128, 1, SJ_ACCUM_DEFAULT)};
  unrouted(sj_plan_short, others, sizeof others / sizeof *others, &t90, &t89);
  /* solo: not at D = 64 (solo already), 256, nor for fp32+fp32, pv16 or
   * another family */
  const sj_plan not_solo[] = {
      auto_plan(&t90, SJ_DTYPE_FP16, 64, 0, SJ_ACCUM_DEFAULT),
      auto_plan(&t90, SJ_DTYPE_FP16, 256, 0, SJ_ACCUM_DEFAULT),
      auto_plan(&t90, SJ_DTYPE_FP16, 128, 0, SJ_ACCUM_FP32_FP32),
      auto_plan(&t90, SJ_DTYPE_FP16, 128, 1, SJ_ACCUM_PV16),
      auto_plan(&t89, SJ_DTYPE_FP16, 128, 0, SJ_ACCUM_DEFAULT)};
  unrouted(sj_plan_solo, not_solo, sizeof not_solo / sizeof *not_solo, &t90, &t89);
  /* What wgmma does not offer falls back to fp8pv under AUTO ... */
  p = auto_plan(&t90, SJ_DTYPE_FP16, 96, 0, SJ_ACCUM_DEFAULT);
  assert_int_equal(p.family, SJ_FAMILY_FP8PV);
  /* ... with the WGMMA default's per-head choice on Hopper (mma.sync e4m3
   * is emulated there, u8 native), as on plain sm_90; Blackwell's data
   * centre parts keep fp32+fp32, sm_89 fp32+fp16 (above) */
  assert_int_equal(p.accum, SJ_ACCUM_PVI8_SPLITV);
  assert_int_equal(p.stages, 3);
  {
    sj_target t90p, t100;
    sj_target_parse("sm_90", &t90p);
    sj_target_parse("sm_100a", &t100);
    p = auto_plan(&t90p, SJ_DTYPE_BF16, 128, 1, SJ_ACCUM_DEFAULT);
    assert_int_equal(p.family, SJ_FAMILY_FP8PV);
    assert_int_equal(p.accum, SJ_ACCUM_PVI8_SPLITV);
    p = auto_plan(&t100, SJ_DTYPE_FP16, 32, 0, SJ_ACCUM_DEFAULT);
    assert_int_equal(p.family, SJ_FAMILY_FP8PV);
    assert_int_equal(p.accum, SJ_ACCUM_FP32_FP32);
  }
  p = auto_plan(&t90, SJ_DTYPE_FP16, 64, 0, SJ_ACCUM_FP32_FP16);
  assert_int_equal(p.family, SJ_FAMILY_FP8PV);
  assert_int_equal(p.accum, SJ_ACCUM_FP32_FP16);
  /* pvi8 where wgmma has no kernel (D = 96), and on sm_89 (no wgmma):
   * fp8pv's pvi8 */
  p = auto_plan(&t90, SJ_DTYPE_FP16, 96, 0, SJ_ACCUM_PVI8);
  assert_int_equal(p.family, SJ_FAMILY_FP8PV);
  assert_int_equal(p.accum, SJ_ACCUM_PVI8);
  p = auto_plan(&t89, SJ_DTYPE_BF16, 64, 1, SJ_ACCUM_PVI8);
  assert_int_equal(p.family, SJ_FAMILY_FP8PV);
  assert_int_equal(p.accum, SJ_ACCUM_PVI8);
  /* ... and the plain sm_90 target (no wgmma) defaults to fp8pv. */
  sj_target t90p;
  assert_int_equal(sj_target_parse("sm_90", &t90p), 0);
  assert_int_equal(t90p.family, SJ_FAMILY_FP8PV);
  char name[256];
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_WGMMA, SJ_DTYPE_BF16, 256, 1,
                                SJ_QUANT_PER_WARP, SJ_ACCUM_FP32_FP32, -1, 1, &p,
                                msg, sizeof msg),
                   SJ_OK);
  assert_int_equal(p.smooth_v, 1);
  assert_int_equal(sj_spec_name(&p.specs[3], name, sizeof name), 0);
  assert_string_equal(name, "sj::attn_wgmma<sj::BF16,256,true,"
                            "sj::ACC_FP32_FP32,3,64,2>");
  /* The granularity is a kernel argument, not part of a name: the
   * per_thread plan shares both the quantizer and the attention kernel. */
  {
    sj_plan pt;
    char name_pt[256], qn[256], qn_pt[256];
    assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_WGMMA, SJ_DTYPE_BF16, 256, 1,
                                  SJ_QUANT_PER_THREAD, SJ_ACCUM_FP32_FP32, -1, 1,
                                  &pt, msg, sizeof msg),
                     SJ_OK);
    assert_int_equal(pt.quant, SJ_QUANT_PER_THREAD);
    assert_int_equal(p.quant, SJ_QUANT_PER_WARP);
    assert_int_equal(sj_spec_name(&pt.specs[3], name_pt, sizeof name_pt), 0);
    assert_string_equal(name_pt, name);
    assert_int_equal(sj_spec_name(&p.specs[2], qn, sizeof qn), 0);
    assert_int_equal(sj_spec_name(&pt.specs[2], qn_pt, sizeof qn_pt), 0);
    assert_string_equal(qn_pt, qn);
    assert_null(strstr(qn, "PER_"));
  }
  /* fp32 (accumulating in the tensor core) goes to fp8pv under AUTO */
  p = auto_plan(&t90, SJ_DTYPE_FP16, 128, 0, SJ_ACCUM_FP32);
  assert_int_equal(p.family, SJ_FAMILY_FP8PV);
  /* Split V stays on wgmma under AUTO; its quantizer writes the residual
   * (a distinct instantiation) and its kernel holds one more V tile per
   * stage. */
  sj_plan plain;
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_AUTO, SJ_DTYPE_FP16, 128, 0, 0,
                                SJ_ACCUM_FP32_FP32, -1, -1, &plain, msg,
                                sizeof msg),
                   SJ_OK);
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_AUTO, SJ_DTYPE_FP16, 128, 0, 0,
                                SJ_ACCUM_FP32_FP32_SPLITV, -1, 1, &p, msg,
                                sizeof msg),
                   SJ_OK);
  assert_int_equal(p.family, SJ_FAMILY_WGMMA);
  assert_int_equal(p.accum, SJ_ACCUM_FP32_FP32_SPLITV);
  assert_int_equal(sj_spec_name(&p.specs[2], name, sizeof name), 0);
  assert_string_equal(name, "sj::quant_qkv<sj::FP16,128,16,1>");
  assert_int_equal(sj_spec_name(&plain.specs[2], name, sizeof name), 0);
  assert_string_equal(name, "sj::quant_qkv<sj::FP16,128,16,0>");
  assert_int_equal(sj_spec_shape(&p.specs[3]).smem_bytes -
                       sj_spec_shape(&plain.specs[3]).smem_bytes,
                   p.stages * 128 * 128);
  /* fp8pv (mma.sync) offers it too, with one residual tile per stage */
  assert_int_equal(sj_plan_make(&t89, SJ_FAMILY_FP8PV, SJ_DTYPE_BF16, 64, 1, 0,
                                SJ_ACCUM_FP32_FP32_SPLITV, -1, -1, &p, msg,
                                sizeof msg),
                   SJ_OK);
  assert_int_equal(sj_spec_name(&p.specs[3], name, sizeof name), 0);
  assert_non_null(strstr(name, "sj::FP8PV"));
  assert_non_null(strstr(name, "sj::ACC_FP32_FP32_SPLITV"));
  /* 16-bit P.V is a wgmma mode: its quantizer writes 16-bit V^T (twice
   * the e4m3 bytes per stage, as split V) */
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_AUTO, SJ_DTYPE_BF16, 128, 1, 0,
                                SJ_ACCUM_PV16, -1, 1, &p, msg, sizeof msg),
                   SJ_OK);
  assert_int_equal(p.family, SJ_FAMILY_WGMMA);
  assert_int_equal(sj_spec_name(&p.specs[2], name, sizeof name), 0);
  assert_string_equal(name, "sj::quant_qkv<sj::BF16,128,16,2>");
  assert_int_equal(sj_spec_shape(&p.specs[3]).smem_bytes,
                   sj_spec_shape(&plain.specs[3]).smem_bytes +
                       p.stages * 128 * 128);
  assert_int_equal(sj_plan_make(&t89, SJ_FAMILY_FP8PV, SJ_DTYPE_FP16, 128, 0, 0,
                                SJ_ACCUM_PV16, -1, -1, &p, msg, sizeof msg),
                   SJ_ERR_UNSUPPORTED);
  assert_non_null(strstr(msg, "pv_accum pv16 (6) is not offered by the fp8pv family"));
  /* INT8 P.V is a wgmma mode too (AUTO keeps it there, smooth_v allowed):
   * its quantizer writes u8 V (one byte per value, as e4m3) */
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_AUTO, SJ_DTYPE_FP16, 64, 1, 0,
                                SJ_ACCUM_PVI8, -1, 1, &p, msg, sizeof msg),
                   SJ_OK);
  assert_int_equal(p.family, SJ_FAMILY_WGMMA);
  assert_int_equal(p.accum, SJ_ACCUM_PVI8);
  assert_int_equal(sj_spec_name(&p.specs[2], name, sizeof name), 0);
  assert_string_equal(name, "sj::quant_qkv<sj::FP16,64,16,3>");
  assert_int_equal(sj_spec_name(&p.specs[3], name, sizeof name), 0);
  assert_non_null(strstr(name, "sj::ACC_PVI8"));
  p = auto_plan(&t90, SJ_DTYPE_FP16, 128, 0, SJ_ACCUM_PVI8);
  assert_int_equal(sj_spec_shape(&p.specs[3]).smem_bytes,
                   sj_spec_shape(&plain.specs[3]).smem_bytes);
  /* and of the fp8pv family (mma.m16n8k32.u8), with the same quantizer:
   * u8 V, one byte per value, so e4m3's stage count */
  sj_plan fp8plain;
  assert_int_equal(sj_plan_make(&t89, SJ_FAMILY_FP8PV, SJ_DTYPE_FP16, 128, 0, 0,
                                SJ_ACCUM_FP32_FP32, -1, -1, &fp8plain, msg, sizeof msg),
                   SJ_OK);
  assert_int_equal(sj_plan_make(&t89, SJ_FAMILY_FP8PV, SJ_DTYPE_FP16, 128, 0, 0,
                                SJ_ACCUM_PVI8, -1, 1, &p, msg, sizeof msg),
                   SJ_OK);
  assert_int_equal(p.family, SJ_FAMILY_FP8PV);
  assert_int_equal(p.stages, fp8plain.stages);
  assert_int_equal(sj_spec_name(&p.specs[2], name, sizeof name), 0);
  assert_string_equal(name, "sj::quant_qkv<sj::FP16,128,32,3>");
  /* the fp32+fp32 kernel's name but for the mode */
  {
    char plain_name[256], want[256];
    assert_int_equal(sj_spec_name(&fp8plain.specs[3], plain_name, sizeof plain_name), 0);
    char *at = strstr(plain_name, "sj::ACC_FP32_FP32,");
    assert_non_null(at);
    snprintf(want, sizeof want, "%.*ssj::ACC_PVI8,%s", (int)(at - plain_name), plain_name,
             at + strlen("sj::ACC_FP32_FP32,"));
    assert_int_equal(sj_spec_name(&p.specs[3], name, sizeof name), 0);
    assert_string_equal(name, want);
  }
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_FP16PV, SJ_DTYPE_FP16, 128, 0, 0,
                                SJ_ACCUM_PVI8, -1, -1, &p, msg, sizeof msg),
                   SJ_ERR_UNSUPPORTED);
  /* pvi8+splitv (the wgmma default): the quantizer's V mode 4 writes
   * either format, in split V's room (two bytes per value, both in the
   * workspace and per stage); the same stage count as split V */
  sj_plan split;
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_AUTO, SJ_DTYPE_FP16, 128, 0, 0,
                                SJ_ACCUM_FP32_FP32_SPLITV, -1, -1, &split, msg,
                                sizeof msg),
                   SJ_OK);
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_AUTO, SJ_DTYPE_FP16, 128, 0, 0,
                                SJ_ACCUM_PVI8_SPLITV, -1, 1, &p, msg, sizeof msg),
                   SJ_OK);
  assert_int_equal(p.family, SJ_FAMILY_WGMMA);
  assert_int_equal(p.accum, SJ_ACCUM_PVI8_SPLITV);
  assert_int_equal(p.stages, split.stages);
  assert_int_equal(sj_spec_name(&p.specs[2], name, sizeof name), 0);
  assert_string_equal(name, "sj::quant_qkv<sj::FP16,128,16,4>");
  assert_int_equal(sj_spec_name(&p.specs[3], name, sizeof name), 0);
  assert_non_null(strstr(name, "sj::ACC_PVI8_SPLITV"));
  assert_int_equal(sj_spec_shape(&p.specs[3]).smem_bytes,
                   sj_spec_shape(&split.specs[3]).smem_bytes);
  /* FP8PV too (attn_mma with both bodies): split V's stages and shared
   * memory, whichever body a head takes, and the same quantizer mode */
  sj_plan split89;
  assert_int_equal(sj_plan_make(&t89, SJ_FAMILY_FP8PV, SJ_DTYPE_FP16, 128, 0, 0,
                                SJ_ACCUM_FP32_FP32_SPLITV, -1, -1, &split89, msg,
                                sizeof msg),
                   SJ_OK);
  assert_int_equal(sj_plan_make(&t89, SJ_FAMILY_FP8PV, SJ_DTYPE_FP16, 128, 0, 0,
                                SJ_ACCUM_PVI8_SPLITV, -1, -1, &p, msg, sizeof msg),
                   SJ_OK);
  assert_int_equal(p.accum, SJ_ACCUM_PVI8_SPLITV);
  assert_int_equal(p.stages, split89.stages);
  assert_int_equal(sj_spec_name(&p.specs[2], name, sizeof name), 0);
  assert_string_equal(name, "sj::quant_qkv<sj::FP16,128,32,4>");
  assert_int_equal(sj_spec_name(&p.specs[3], name, sizeof name), 0);
  assert_non_null(strstr(name, "sj::attn_mma<sj::FP8PV,"));
  assert_non_null(strstr(name, "sj::ACC_PVI8_SPLITV"));
  assert_int_equal(sj_spec_shape(&p.specs[3]).smem_bytes,
                   sj_spec_shape(&split89.specs[3]).smem_bytes);
  /* D = 96 under AUTO on sm_90a: FP8PV (wgmma has no D = 96), same mode */
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_AUTO, SJ_DTYPE_FP16, 96, 1, 0,
                                SJ_ACCUM_PVI8_SPLITV, -1, -1, &p, msg, sizeof msg),
                   SJ_OK);
  assert_int_equal(p.family, SJ_FAMILY_FP8PV);
  assert_int_equal(p.accum, SJ_ACCUM_PVI8_SPLITV);
  assert_int_equal(sj_plan_make(&t89, SJ_FAMILY_FP16PV, SJ_DTYPE_FP16, 128, 0, 0,
                                SJ_ACCUM_PVI8_SPLITV, -1, -1, &p, msg, sizeof msg),
                   SJ_ERR_UNSUPPORTED);
  assert_non_null(
      strstr(msg, "pv_accum pvi8+splitv (8) is not offered by the fp16pv family"));
}

static void test_plan_rejects(void **state) {
  (void)state;
  sj_target t80, t90;
  sj_target_parse("sm_80", &t80);
  sj_target_parse("sm_90a", &t90);
  sj_plan p;
  char msg[256];
  /* FP8 P.V needs sm_89 */
  assert_int_equal(sj_plan_make(&t80, SJ_FAMILY_FP8PV, SJ_DTYPE_FP16, 128, 0, 0, 0,
                                -1, -1, &p, msg, sizeof msg),
                   SJ_ERR_UNSUPPORTED);
  assert_non_null(strstr(msg, "sm_89"));
  /* head dims */
  assert_int_equal(sj_plan_make(&t90, 0, SJ_DTYPE_FP16, 80, 0, 0, 0, -1, -1, &p, msg,
                                sizeof msg),
                   SJ_ERR_UNSUPPORTED);
  assert_non_null(strstr(msg, "head_dim 80"));
  /* accumulation a family does not offer */
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_FP16PV, SJ_DTYPE_FP16, 64, 0, 0,
                                SJ_ACCUM_FP32_FP16, -1, -1, &p, msg, sizeof msg),
                   SJ_ERR_UNSUPPORTED);
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_FP8PV, SJ_DTYPE_FP16, 64, 0, 0,
                                SJ_ACCUM_FP16_FP32, -1, -1, &p, msg, sizeof msg),
                   SJ_ERR_UNSUPPORTED);
  /* split V is an e4m3 V: not for fp16pv, nor for the sm_80 target */
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_FP16PV, SJ_DTYPE_FP16, 64, 0, 0,
                                SJ_ACCUM_FP32_FP32_SPLITV, -1, -1, &p, msg,
                                sizeof msg),
                   SJ_ERR_UNSUPPORTED);
  assert_non_null(strstr(msg, "fp16pv"));
  assert_int_equal(sj_plan_make(&t80, SJ_FAMILY_AUTO, SJ_DTYPE_FP16, 64, 0, 0,
                                SJ_ACCUM_FP32_FP32_SPLITV, -1, -1, &p, msg,
                                sizeof msg),
                   SJ_ERR_UNSUPPORTED);
  /* smooth_v only with fp8 and an fp32 accumulation */
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_FP16PV, SJ_DTYPE_FP16, 64, 0, 0, 0,
                                -1, 1, &p, msg, sizeof msg),
                   SJ_ERR_UNSUPPORTED);
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_FP8PV, SJ_DTYPE_FP16, 64, 0, 0,
                                SJ_ACCUM_FP32_FP16, -1, 1, &p, msg, sizeof msg),
                   SJ_ERR_UNSUPPORTED);
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_FP8PV, SJ_DTYPE_FP16, 64, 0, 0,
                                SJ_ACCUM_FP32_FP32, -1, 1, &p, msg, sizeof msg),
                   SJ_OK);
  /* wgmma: sm_90a only, its head dims and accumulations only */
  sj_target t89, t90p;
  sj_target_parse("sm_89", &t89);
  sj_target_parse("sm_90", &t90p);
  assert_int_equal(sj_plan_make(&t89, SJ_FAMILY_WGMMA, SJ_DTYPE_FP16, 128, 0, 0,
                                0, -1, -1, &p, msg, sizeof msg),
                   SJ_ERR_UNSUPPORTED);
  assert_non_null(strstr(msg, "sm_90a"));
  assert_int_equal(sj_plan_make(&t90p, SJ_FAMILY_WGMMA, SJ_DTYPE_FP16, 128, 0,
                                0, 0, -1, -1, &p, msg, sizeof msg),
                   SJ_ERR_UNSUPPORTED);
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_WGMMA, SJ_DTYPE_FP16, 96, 0, 0,
                                0, -1, -1, &p, msg, sizeof msg),
                   SJ_ERR_UNSUPPORTED);
  assert_non_null(strstr(msg, "head dims 64, 128 and 256"));
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_WGMMA, SJ_DTYPE_FP16, 128, 0, 0,
                                SJ_ACCUM_FP32_FP16, -1, -1, &p, msg, sizeof msg),
                   SJ_ERR_UNSUPPORTED);
  assert_non_null(strstr(msg, "wgmma"));
  assert_int_equal(sj_plan_make(&t90, SJ_FAMILY_WGMMA, SJ_DTYPE_FP16, 128, 0, 0,
                                SJ_ACCUM_FP32, -1, -1, &p, msg, sizeof msg),
                   SJ_ERR_UNSUPPORTED);
}

/* ptxas's --register-usage-level (runtime/spec.c spec_rul): level 8 for
 * the one cell where the A/B won (sm_90a, FP8PV pvi8+splitv, causal,
 * D = 128), no option elsewhere or on other targets; SAGEJIT_TUNE "rul=N"
 * forces N (0-10) for every kernel, "rul=5" (ptxas's default) no option.
 * The option is in the compile options, hence in the cache key. */
static const sj_spec *attn_spec(const char *arch, sj_family fam, int d, int causal,
                                sj_pv_accum acc, sj_plan *p, sj_target *t) {
  char msg[256];
  sj_target_parse(arch, t);
  assert_int_equal(sj_plan_make(t, fam, SJ_DTYPE_FP16, d, causal, 0, acc, -1, -1, p, msg,
                                sizeof msg),
                   SJ_OK);
  for (int i = 0; i < p->n_specs; i++)
    if (p->specs[i].kind == SJ_KERNEL_ATTN)
      return &p->specs[i];
  fail_msg("no attention kernel in the plan");
  return NULL;
}

/* the level in the options (-1: none), and the key */
static int rul_of(const sj_spec *s, const sj_target *t, const char *tune,
                  uint8_t out[SJ_KEY_BYTES]) {
  if (tune)
    setenv("SAGEJIT_TUNE", tune, 1);
  else
    unsetenv("SAGEJIT_TUNE");
  char opts[16][64], msg[256];
  const int n = sj_spec_options(s, t, opts, 16);
  int level = -1, found = 0;
  for (int k = 0; k < n; k++)
    if (strstr(opts[k], "register-usage-level")) {
      assert_int_equal(sscanf(opts[k], "--ptxas-options=--register-usage-level=%d", &level), 1);
      found++;
    }
  assert_true(found <= 1);
  assert_int_equal(n, 2 + found);
  sj_key key;
  assert_int_equal(sj_spec_key(s, t, &key, msg, sizeof msg), SJ_OK);
  memcpy(out, key.bytes, SJ_KEY_BYTES);
  sj_key_free(&key);
  unsetenv("SAGEJIT_TUNE");
  return level;
}

static void test_spec_options_rul(void **state) {
  (void)state;
  sj_plan p1, p2, p3, p4;
  sj_target t1, t2, t3, t4;
  const sj_spec *fp16 = attn_spec("sm_90a", SJ_FAMILY_FP16PV, 128, 0, SJ_ACCUM_FP32, &p1, &t1);
  const sj_spec *pv = attn_spec("sm_90a", SJ_FAMILY_FP8PV, 128, 1, SJ_ACCUM_PVI8_SPLITV, &p2, &t2);
  const sj_spec *pv89 =
      attn_spec("sm_89", SJ_FAMILY_FP8PV, 128, 1, SJ_ACCUM_PVI8_SPLITV, &p3, &t3);
  const sj_spec *pv64 =
      attn_spec("sm_90a", SJ_FAMILY_FP8PV, 64, 1, SJ_ACCUM_PVI8_SPLITV, &p4, &t4);
  uint8_t k0[SJ_KEY_BYTES], k[SJ_KEY_BYTES], k8[SJ_KEY_BYTES], k2[SJ_KEY_BYTES];

  /* a cell without the option: forced levels only */
  assert_int_equal(rul_of(fp16, &t1, NULL, k0), -1);
  assert_int_equal(rul_of(fp16, &t1, "rul=8", k8), 8);
  assert_memory_not_equal(k8, k0, SJ_KEY_BYTES);
  assert_int_equal(rul_of(fp16, &t1, "tma=1,rul=2", k2), 2);
  assert_memory_not_equal(k2, k0, SJ_KEY_BYTES);
  assert_memory_not_equal(k2, k8, SJ_KEY_BYTES);
  assert_int_equal(rul_of(fp16, &t1, "rul=0", k), 0);
  assert_memory_not_equal(k, k0, SJ_KEY_BYTES);
  static const char *none[] = {"rul=5", "rul=11", "rul=", "rul=x", "warp_q=32"};
  for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
    assert_int_equal(rul_of(fp16, &t1, none[i], k), -1);
    assert_memory_equal(k, k0, SJ_KEY_BYTES);
  }

  /* the cell with it: 8 by default, the same kernel as forced 8; rul=5
   * gives ptxas's default */
  assert_int_equal(rul_of(pv, &t2, NULL, k0), 8);
  assert_int_equal(rul_of(pv, &t2, "rul=8", k), 8);
  assert_memory_equal(k, k0, SJ_KEY_BYTES);
  assert_int_equal(rul_of(pv, &t2, "rul=5", k), -1);
  assert_memory_not_equal(k, k0, SJ_KEY_BYTES);
  /* not on other targets or head dims */
  assert_int_equal(rul_of(pv89, &t3, NULL, k), -1);
  assert_int_equal(rul_of(pv64, &t4, NULL, k), -1);
}

/* attn_mma's TMA tiles (runtime/spec.c mma_tma): on sm_90 where the A/B
 * won, nowhere else, and SAGEJIT_TUNE forces them for A/B runs; the spec's
 * name carries the ninth template argument only when they are on (every
 * other name, hence cache key layout, is as before), and the tenth, VH
 * (mma_vh), only when that is on too. */
static void test_plan_tma(void **state) {
  (void)state;
  sj_target t80, t89, t90, t100, t120;
  sj_target_parse("sm_80", &t80);
  sj_target_parse("sm_89", &t89);
  sj_target_parse("sm_90a", &t90);
  sj_target_parse("sm_100a", &t100);
  sj_target_parse("sm_120a", &t120);
  unsetenv("SAGEJIT_TUNE");
  static const struct {
    sj_family fam;
    sj_pv_accum acc;
    int d, causal, tma, vh;
  } want[] = {
      {SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 128, 0, 1, 0},
      {SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 128, 1, 1, 0},
      {SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 64, 0, 0, 0},
      {SJ_FAMILY_FP16PV, SJ_ACCUM_FP16_FP32, 64, 1, 1, 0},
      {SJ_FAMILY_FP16PV, SJ_ACCUM_FP16_FP32, 128, 0, 1, 0},
      {SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 32, 0, 0, 0},
      {SJ_FAMILY_FP16PV, SJ_ACCUM_FP16_FP32, 32, 0, 1, 0},
      {SJ_FAMILY_FP16PV, SJ_ACCUM_FP16_FP32, 32, 1, 0, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32, 32, 1, 1, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32, 32, 0, 1, 1}, /* vh32 */
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP16, 32, 0, 0, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32, 32, 1, 1, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8, 32, 0, 0, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8, 32, 1, 1, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV, 32, 0, 1, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV, 32, 1, 0, 0},
      {SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 96, 0, 1, 0},
      {SJ_FAMILY_FP16PV, SJ_ACCUM_FP16_FP32, 96, 1, 1, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV, 96, 0, 1, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8, 96, 1, 1, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32, 96, 0, 1, 1},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP16, 96, 0, 1, 1},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP16, 96, 1, 1, 1},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32, 96, 0, 1, 1},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32, 96, 1, 1, 1},
      {SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 256, 0, 1, 0},
      {SJ_FAMILY_FP16PV, SJ_ACCUM_FP16_FP32, 256, 1, 1, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32, 256, 0, 1, 1},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV, 256, 1, 1, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32_SPLITV, 256, 0, 0, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32, 128, 0, 1, 1},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32, 128, 1, 1, 1},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32, 64, 1, 1, 1},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32, 64, 0, 1, 1},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP16, 128, 1, 1, 1},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP16, 64, 0, 0, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8, 128, 0, 1, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8, 128, 1, 0, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV, 128, 0, 1, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV, 128, 1, 1, 0}, /* in two stages */
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32_SPLITV, 128, 0, 0, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV, 64, 0, 0, 0},
      {SJ_FAMILY_WGMMA, SJ_ACCUM_PVI8_SPLITV, 128, 0, 0, 0},
      /* VH (mma_vh) */
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP16, 32, 1, 1, 1},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32, 64, 0, 1, 1},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32, 64, 1, 1, 1}, /* vh64c */
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP16, 128, 0, 1, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP16, 256, 1, 1, 0},
      {SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32, 256, 0, 1, 0},
  };
  char msg[256], name[160];
  sj_plan p;
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    assert_int_equal(sj_plan_make(&t90, want[i].fam, SJ_DTYPE_FP16, want[i].d,
                                  want[i].causal, 0, want[i].acc, -1, -1, &p, msg,
                                  sizeof msg),
                     SJ_OK);
    if (p.tma != want[i].tma)
      fail_msg("case %zu: tma %d, want %d", i, p.tma, want[i].tma);
    assert_int_equal(p.specs[3].tma, p.tma);
    for (int k = 0; k < 3; k++)
      assert_int_equal(p.specs[k].tma, 0);
    assert_int_equal(sj_spec_name(&p.specs[3], name, sizeof name), 0);
    const char *tail = strrchr(name, ',');
    assert_non_null(tail);
    if (p.specs[3].vh != want[i].vh)
      fail_msg("case %zu: vh %d, want %d", i, p.specs[3].vh, want[i].vh);
    for (int k = 0; k < 3; k++)
      assert_int_equal(p.specs[k].vh, 0);
    if (want[i].fam != SJ_FAMILY_WGMMA) {
      assert_int_equal(!strcmp(tail, ",true>"), want[i].tma);
      assert_int_equal(strstr(name, ",true,true>") != NULL, want[i].vh);
    }
    /* the same shared memory either way (the swizzled stages fit the
     * padded ones' bytes), and VH's two fp16 V copies on top */
    sj_plan q = p;
    q.specs[3].tma = 0;
    assert_int_equal(sj_spec_shape(&p.specs[3]).smem_bytes,
                     sj_spec_shape(&q.specs[3]).smem_bytes + want[i].vh * 2 * want[i].d * 64 * 2);
  }
  /* no other target takes it by default */
  const sj_target *others[] = {&t80, &t89, &t100, &t120};
  for (size_t i = 0; i < 4; i++) {
    sj_family fam = others[i]->sm >= 89 ? SJ_FAMILY_FP8PV : SJ_FAMILY_FP16PV;
    sj_pv_accum acc = fam == SJ_FAMILY_FP8PV ? SJ_ACCUM_FP32_FP32 : SJ_ACCUM_FP32;
    assert_int_equal(sj_plan_make(others[i], fam, SJ_DTYPE_FP16, 128, 0, 0, acc, -1, -1,
                                  &p, msg, sizeof msg),
                     SJ_OK);
    assert_int_equal(p.tma, 0);
  }
  /* forced: on wherever the template has the form (sm_90+, D = 32, 64, 96,
   * 128 or 256, no split V), off on request, never below sm_90 */
  const struct {
    const char *tune;
    const sj_target *t;
    sj_family fam;
    sj_pv_accum acc;
    int d, tma;
  } forced[] = {
      {"tma=1", &t90, SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8, 64, 1},
      {"tma=1", &t100, SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP16, 128, 1},
      {"tma=1", &t90, SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32_SPLITV, 128, 0},
      {"tma=1", &t90, SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 96, 1},
      {"tma=1", &t90, SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP16, 96, 1},
      {"tma=1", &t90, SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 32, 1},
      {"tma=1", &t90, SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV, 32, 1},
      {"tma=1", &t90, SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 256, 1},
      {"tma=1", &t90, SJ_FAMILY_FP8PV, SJ_ACCUM_PVI8_SPLITV, 256, 1},
      {"tma=1", &t89, SJ_FAMILY_FP8PV, SJ_ACCUM_FP32_FP32, 128, 0},
      {"tma=0", &t90, SJ_FAMILY_FP16PV, SJ_ACCUM_FP32, 128, 0},
  };
  for (size_t i = 0; i < sizeof forced / sizeof *forced; i++) {
    setenv("SAGEJIT_TUNE", forced[i].tune, 1);
    assert_int_equal(sj_plan_make(forced[i].t, forced[i].fam, SJ_DTYPE_FP16, forced[i].d, 0,
                                  0, forced[i].acc, -1, -1, &p, msg, sizeof msg),
                     SJ_OK);
    if (p.tma != forced[i].tma)
      fail_msg("forced case %zu (%s): tma %d, want %d", i, forced[i].tune, p.tma,
               forced[i].tma);
  }
  /* VH forced (an A/B knob): on wherever the template has it (FP8PV's e4m3
   * modes with TMA tiles, any target that has TMA), off on request */
  const struct {
    const char *tune;
    const sj_target *t;
    sj_pv_accum acc;
    int d, vh;
  } fvh[] = {
      {"vh=0", &t90, SJ_ACCUM_FP32_FP32, 128, 0},
      {"vh=1", &t90, SJ_ACCUM_FP32_FP16, 128, 1},
      {"tma=1,vh=1", &t100, SJ_ACCUM_FP32, 128, 1},
      {"vh=1", &t90, SJ_ACCUM_PVI8, 128, 0},     /* INT8 P.V */
      {"vh=1", &t90, SJ_ACCUM_FP32_FP16, 64, 0}, /* cp.async tiles */
      {"vh=1", &t89, SJ_ACCUM_FP32_FP32, 128, 0},
  };
  for (size_t i = 0; i < sizeof fvh / sizeof *fvh; i++) {
    setenv("SAGEJIT_TUNE", fvh[i].tune, 1);
    assert_int_equal(sj_plan_make(fvh[i].t, SJ_FAMILY_FP8PV, SJ_DTYPE_FP16, fvh[i].d, 0, 0,
                                  fvh[i].acc, -1, -1, &p, msg, sizeof msg),
                     SJ_OK);
    if (p.specs[3].vh != fvh[i].vh)
      fail_msg("forced VH case %zu (%s): vh %d, want %d", i, fvh[i].tune, p.specs[3].vh,
               fvh[i].vh);
  }
  unsetenv("SAGEJIT_TUNE");
  /* four stages (an A/B knob): only with TMA tiles, else back to three */
  const struct {
    const sj_target *t;
    sj_pv_accum acc;
    int stages, tma;
  } four[] = {
      {&t90, SJ_ACCUM_FP32_FP16, 4, 1},
      {&t90, SJ_ACCUM_PVI8, 4, 1},
      {&t90, SJ_ACCUM_FP32_FP32_SPLITV, 3, 0}, /* split V: no TMA */
      {&t89, SJ_ACCUM_FP32_FP32, 3, 0}, /* no TMA below sm_90 */
  };
  setenv("SAGEJIT_TUNE", "stages=4", 1);
  for (size_t i = 0; i < sizeof four / sizeof *four; i++) {
    assert_int_equal(sj_plan_make(four[i].t, SJ_FAMILY_FP8PV, SJ_DTYPE_FP16, 128, 0, 0,
                                  four[i].acc, -1, -1, &p, msg, sizeof msg),
                     SJ_OK);
    if (p.stages != four[i].stages || p.tma != four[i].tma)
      fail_msg("stages=4 case %zu: stages %d tma %d, want %d and %d", i, p.stages, p.tma,
               four[i].stages, four[i].tma);
    assert_int_equal(p.specs[3].stages, p.stages);
  }
  unsetenv("SAGEJIT_TUNE");
}

/* SJ_F_L2_KEEP_V: kv_stats keeps V in the L2 for quant_qkv when its 16-bit
 * bytes take at most 3/4 of it.  The H100 / H200 L2 (50 MiB) against the
 * table's shapes (B = 4, H = 32): D = 128 at 1K is 32 MiB, at 2K 64 MiB. */
static void test_l2_keeps_v(void **state) {
  (void)state;
  const int64_t l2 = (int64_t)50 << 20;
  const int64_t v_1k = (int64_t)4 * 32 * 1024 * 128 * 2;
  assert_true(sj_l2_keeps_v(l2, v_1k));
  assert_true(sj_l2_keeps_v(l2, v_1k / 2)); /* D = 64 */
  assert_false(sj_l2_keeps_v(l2, 2 * v_1k)); /* 2K */
  /* the boundary: 3/4 of the L2, not a byte more */
  assert_true(sj_l2_keeps_v(l2, l2 / 4 * 3));
  assert_false(sj_l2_keeps_v(l2, l2 / 4 * 3 + 1));
  /* an L2 the driver does not report, and an empty V */
  assert_false(sj_l2_keeps_v(0, v_1k));
  assert_false(sj_l2_keeps_v(l2, 0));
}

/* Every distinct spec a warm of a wide matrix produces has a distinct name:
 * two instantiations can never share a cache key by accident. */
static void test_spec_names_unique(void **state) {
  (void)state;
  sj_target t;
  sj_target_parse("sm_90a", &t);
  static const int dims[] = {32, 64, 96, 128, 256};
  char(*names)[256] = calloc(4096, 256);
  sj_spec *specs = calloc(4096, sizeof *specs);
  assert_non_null(names);
  assert_non_null(specs);
  int n = 0;
  for (int fam = 1; fam <= 2; fam++)
    for (int dt = 1; dt <= 2; dt++)
      for (int d = 0; d < 5; d++)
        for (int c = 0; c < 2; c++)
          for (int q = 1; q <= 3; q++)
            for (int a = 1; a <= 6; a++) {
              sj_plan p;
              char msg[256];
              if (sj_plan_make(&t, (sj_family)fam, (sj_dtype)dt, dims[d], c,
                               (sj_quant_gran)q, (sj_pv_accum)a, -1, -1, &p, msg,
                               sizeof msg) != SJ_OK)
                continue;
              for (int s = 0; s < p.n_specs; s++) {
                int dup = -1;
                for (int i = 0; i < n; i++)
                  if (!memcmp(&specs[i], &p.specs[s], sizeof specs[i]))
                    dup = i;
                char name[256];
                assert_int_equal(sj_spec_name(&p.specs[s], name, sizeof name), 0);
                if (dup >= 0) {
                  assert_string_equal(names[dup], name);
                  continue;
                }
                for (int i = 0; i < n; i++)
                  assert_string_not_equal(names[i], name);
                assert_true(n < 4096);
                specs[n] = p.specs[s];
                strcpy(names[n], name);
                n++;
              }
            }
  /* 2 families' worth of attention kernels plus shared preprocessing */
  assert_true(n > 100);
  free(names);
  free(specs);
}

/* ---------------------------------------------------------------- context */

static sj_context *compile_ctx(const char *target) {
  sj_config cfg;
  sj_config_init(&cfg);
  cfg.device = SJ_DEVICE_NONE;
  cfg.target = target;
  cfg.cache_disabled = 1;
  sj_context *ctx = NULL;
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_OK);
  assert_non_null(ctx);
  return ctx;
}

/* sj_context_resolve against the dispatch table of docs/kernels.md */
static void expect_resolve(const char *target, sj_family asked, int head_dim,
                           sj_pv_accum acc, sj_family fam_want,
                           sj_pv_accum acc_want) {
  sj_context *ctx = compile_ctx(target);
  sj_family fam = (sj_family)-1;
  sj_pv_accum got = (sj_pv_accum)-1;
  assert_int_equal(sj_context_resolve(ctx, asked, head_dim, acc, &fam, &got), SJ_OK);
  assert_int_equal(fam, fam_want);
  assert_int_equal(got, acc_want);
  sj_context_destroy(ctx);
}

static void test_context_resolve(void **state) {
  (void)state;
  unsetenv("SAGEJIT_FAMILY");
  expect_resolve("sm_80", SJ_FAMILY_AUTO, 128, SJ_ACCUM_DEFAULT, SJ_FAMILY_FP16PV,
                 SJ_ACCUM_FP32);
  expect_resolve("sm_86", SJ_FAMILY_AUTO, 64, SJ_ACCUM_DEFAULT, SJ_FAMILY_FP16PV,
                 SJ_ACCUM_FP32);
  expect_resolve("sm_89", SJ_FAMILY_AUTO, 128, SJ_ACCUM_DEFAULT, SJ_FAMILY_FP8PV,
                 SJ_ACCUM_FP32_FP16);
  expect_resolve("sm_120a", SJ_FAMILY_AUTO, 96, SJ_ACCUM_DEFAULT, SJ_FAMILY_FP8PV,
                 SJ_ACCUM_FP32_FP16);
  expect_resolve("sm_100a", SJ_FAMILY_AUTO, 128, SJ_ACCUM_DEFAULT, SJ_FAMILY_FP8PV,
                 SJ_ACCUM_FP32_FP32);
  /* sm_90a: wgmma where it has the head dim, else fp8pv, whose sm_90
   * default is pvi8+splitv too; an accumulation wgmma lacks goes to fp8pv */
  expect_resolve("sm_90a", SJ_FAMILY_AUTO, 128, SJ_ACCUM_DEFAULT, SJ_FAMILY_WGMMA,
                 SJ_ACCUM_PVI8_SPLITV);
  expect_resolve("sm_90a", SJ_FAMILY_AUTO, 32, SJ_ACCUM_DEFAULT, SJ_FAMILY_FP8PV,
                 SJ_ACCUM_PVI8_SPLITV);
  expect_resolve("sm_90a", SJ_FAMILY_AUTO, 96, SJ_ACCUM_DEFAULT, SJ_FAMILY_FP8PV,
                 SJ_ACCUM_PVI8_SPLITV);
  expect_resolve("sm_90a", SJ_FAMILY_AUTO, 128, SJ_ACCUM_FP32_FP16, SJ_FAMILY_FP8PV,
                 SJ_ACCUM_FP32_FP16);
  expect_resolve("sm_90a", SJ_FAMILY_FP16PV, 128, SJ_ACCUM_DEFAULT, SJ_FAMILY_FP16PV,
                 SJ_ACCUM_FP32);
  expect_resolve("sm_90a", SJ_FAMILY_WGMMA, 64, SJ_ACCUM_PV16, SJ_FAMILY_WGMMA,
                 SJ_ACCUM_PV16);
  expect_resolve("sm_90", SJ_FAMILY_AUTO, 128, SJ_ACCUM_DEFAULT, SJ_FAMILY_FP8PV,
                 SJ_ACCUM_PVI8_SPLITV);
  /* a context given a family: AUTO means it, with no fallback */
  setenv("SAGEJIT_FAMILY", "fp16pv", 1);
  expect_resolve("sm_90a", SJ_FAMILY_AUTO, 128, SJ_ACCUM_DEFAULT, SJ_FAMILY_FP16PV,
                 SJ_ACCUM_FP32);
  unsetenv("SAGEJIT_FAMILY");

  sj_context *ctx = compile_ctx("sm_89");
  sj_family fam = (sj_family)-1;
  sj_pv_accum acc = (sj_pv_accum)-1;
  assert_int_equal(sj_context_resolve(ctx, SJ_FAMILY_WGMMA, 128, SJ_ACCUM_DEFAULT, &fam, &acc),
                   SJ_ERR_UNSUPPORTED);
  assert_non_null(strstr(sj_context_last_error(ctx), "sm_90a"));
  assert_int_equal(sj_context_resolve(ctx, SJ_FAMILY_AUTO, 48, SJ_ACCUM_DEFAULT, &fam, &acc),
                   SJ_ERR_UNSUPPORTED);
  assert_non_null(strstr(sj_context_last_error(ctx), "48"));
  assert_int_equal(sj_context_resolve(ctx, SJ_FAMILY_FP16PV, 128, SJ_ACCUM_PVI8, &fam, &acc),
                   SJ_ERR_UNSUPPORTED);
  assert_int_equal(sj_context_resolve(ctx, (sj_family)7, 128, SJ_ACCUM_DEFAULT, &fam, &acc),
                   SJ_ERR_INVALID_ARGUMENT);
  assert_int_equal(sj_context_resolve(ctx, SJ_FAMILY_AUTO, 128, (sj_pv_accum)99, &fam, &acc),
                   SJ_ERR_INVALID_ARGUMENT);
  assert_int_equal(sj_context_resolve(ctx, SJ_FAMILY_AUTO, 128, SJ_ACCUM_DEFAULT, NULL, &acc),
                   SJ_ERR_INVALID_ARGUMENT);
  assert_int_equal(sj_context_resolve(ctx, SJ_FAMILY_AUTO, 128, SJ_ACCUM_DEFAULT, &fam, NULL),
                   SJ_ERR_INVALID_ARGUMENT);
  /* failures leave the outputs alone */
  assert_int_equal((int)fam, -1);
  assert_int_equal((int)acc, -1);
  sj_context_destroy(ctx);
  assert_int_equal(sj_context_resolve(NULL, SJ_FAMILY_AUTO, 128, SJ_ACCUM_DEFAULT, &fam, &acc),
                   SJ_ERR_INVALID_ARGUMENT);
}

static void test_context_create_errors(void **state) {
  (void)state;
  sj_config cfg;
  sj_context *ctx = (sj_context *)0x1;
  assert_int_equal(sj_context_create(NULL, NULL), SJ_ERR_INVALID_ARGUMENT);
  sj_config_init(&cfg);
  cfg.device = SJ_DEVICE_NONE;
  unsetenv("SAGEJIT_ARCH");
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_ERR_INVALID_ARGUMENT);
  assert_null(ctx);
  assert_non_null(strstr(sj_context_create_error(), "target"));
  cfg.target = "sm_7x";
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(sj_context_create_error(), "sm_7x"));
  cfg.target = "sm_80";
  cfg.family = SJ_FAMILY_FP8PV;
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_ERR_UNSUPPORTED);
  cfg.family = (sj_family)7;
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_ERR_INVALID_ARGUMENT);
  /* the environment's family */
  cfg.family = SJ_FAMILY_AUTO;
  cfg.target = "sm_90a";
  cfg.cache_disabled = 1;
  setenv("SAGEJIT_FAMILY", "fp16pv", 1);
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_OK);
  assert_int_equal(sj_context_family(ctx), SJ_FAMILY_FP16PV);
  sj_context_destroy(ctx);
  setenv("SAGEJIT_FAMILY", "fp4", 1);
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_ERR_INVALID_ARGUMENT);
  unsetenv("SAGEJIT_FAMILY");
  /* SAGEJIT_ARCH stands in for cfg.target */
  cfg.target = NULL;
  setenv("SAGEJIT_ARCH", "sm_120a", 1);
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_OK);
  assert_string_equal(sj_context_target(ctx), "sm_120a");
  assert_int_equal(sj_context_family(ctx), SJ_FAMILY_FP8PV);
  sj_context_destroy(ctx);
  unsetenv("SAGEJIT_ARCH");
  sj_context_destroy(NULL); /* harmless */
}

static void test_context_without_gpu(void **state) {
  (void)state;
  if (tu_have_gpu())
    skip();
  sj_config cfg;
  sj_config_init(&cfg);
  cfg.cache_disabled = 1;
  sj_context *ctx = (sj_context *)0x1;
  sj_status st = sj_context_create(&ctx, &cfg);
  assert_true(st == SJ_ERR_NO_DRIVER || st == SJ_ERR_NO_DEVICE);
  assert_null(ctx);
  assert_true(strlen(sj_context_create_error()) > 0);
}

/* ------------------------------------------------------------ validation */

typedef struct fixture {
  sj_context *ctx;
  sj_attention_params p;
} fixture;

static int setup_params(void **state) {
  fixture *f = calloc(1, sizeof *f);
  f->ctx = compile_ctx("sm_90a");
  sj_attention_params_init(&f->p);
  f->p.batch = 2;
  f->p.heads_q = 8;
  f->p.heads_kv = 2;
  f->p.seq_q = 100;
  f->p.seq_kv = 300;
  f->p.head_dim = 128;
  /* Fake, aligned, far-apart device addresses: nothing is ever launched. */
  f->p.q = (void *)(uintptr_t)0x100000000ull;
  f->p.k = (void *)(uintptr_t)0x200000000ull;
  f->p.v = (void *)(uintptr_t)0x300000000ull;
  f->p.o = (void *)(uintptr_t)0x400000000ull;
  *state = f;
  return 0;
}

static int teardown_params(void **state) {
  fixture *f = *state;
  sj_context_destroy(f->ctx);
  free(f);
  return 0;
}

/* The valid baseline reaches the device check, so every rejection below is
 * caused by the one field it changes. */
static void expect(fixture *f, const sj_attention_params *p, sj_status want,
                   const char *substr) {
  sj_status st = sj_attention(f->ctx, p, NULL);
  if (st != want || (substr && !strstr(sj_context_last_error(f->ctx), substr)))
    fail_msg("got %s '%s', want %s '%s'", sj_status_name(st),
             sj_context_last_error(f->ctx), sj_status_name(want),
             substr ? substr : "");
  size_t bytes = 0;
  sj_status ws = sj_attention_workspace_size(f->ctx, p, &bytes);
  if (want == SJ_ERR_NO_DEVICE) {
    assert_int_equal(ws, SJ_OK);
    assert_true(bytes > 0);
  } else {
    assert_int_equal(ws, want);
  }
}

static void test_validation(void **state) {
  fixture *f = *state;
  sj_attention_params p = f->p;
  expect(f, &p, SJ_ERR_NO_DEVICE, "no device");
  assert_int_equal(sj_attention(NULL, &p, NULL), SJ_ERR_INVALID_ARGUMENT);
  assert_int_equal(sj_attention(f->ctx, NULL, NULL), SJ_ERR_INVALID_ARGUMENT);

#define CASE(field, value, status, text)                                       \
  do {                                                                         \
    p = f->p;                                                                  \
    p.field = value;                                                           \
    expect(f, &p, status, text);                                               \
  } while (0)
  CASE(q, NULL, SJ_ERR_INVALID_ARGUMENT, "q is NULL");
  CASE(k, NULL, SJ_ERR_INVALID_ARGUMENT, "k is NULL");
  CASE(v, NULL, SJ_ERR_INVALID_ARGUMENT, "v is NULL");
  CASE(o, NULL, SJ_ERR_INVALID_ARGUMENT, "o is NULL");
  CASE(q, (void *)(uintptr_t)0x100000002ull, SJ_ERR_INVALID_ARGUMENT, "aligned");
  CASE(batch, 0, SJ_ERR_INVALID_ARGUMENT, "batch must be >= 1");
  CASE(batch, -3, SJ_ERR_INVALID_ARGUMENT, "batch");
  CASE(heads_q, 0, SJ_ERR_INVALID_ARGUMENT, "heads_q");
  CASE(heads_kv, 0, SJ_ERR_INVALID_ARGUMENT, "heads_kv");
  CASE(heads_kv, 3, SJ_ERR_INVALID_ARGUMENT, "multiple");
  CASE(seq_q, 0, SJ_ERR_INVALID_ARGUMENT, "seq_q");
  CASE(seq_kv, -1, SJ_ERR_INVALID_ARGUMENT, "seq_kv");
  CASE(seq_q, (int64_t)1 << 40, SJ_ERR_INVALID_ARGUMENT, "exceeds");
  CASE(batch, 70000, SJ_ERR_INVALID_ARGUMENT, "exceeds");
  CASE(head_dim, 0, SJ_ERR_INVALID_ARGUMENT, "head_dim");
  CASE(head_dim, 80, SJ_ERR_UNSUPPORTED, "head_dim 80");
  CASE(head_dim, 512, SJ_ERR_UNSUPPORTED, "head_dim 512");
  CASE(dtype, (sj_dtype)0, SJ_ERR_INVALID_ARGUMENT, "dtype");
  CASE(dtype, (sj_dtype)9, SJ_ERR_INVALID_ARGUMENT, "dtype");
  CASE(layout, (sj_layout)3, SJ_ERR_INVALID_ARGUMENT, "layout");
  CASE(causal, 2, SJ_ERR_INVALID_ARGUMENT, "causal");
  CASE(causal_align, (sj_causal_align)5, SJ_ERR_INVALID_ARGUMENT, "causal_align");
  CASE(family, (sj_family)4, SJ_ERR_INVALID_ARGUMENT, "family");
  CASE(qk_quant, (sj_quant_gran)4, SJ_ERR_INVALID_ARGUMENT, "qk_quant");
  CASE(pv_accum, (sj_pv_accum)-1, SJ_ERR_INVALID_ARGUMENT, "pv_accum");
  CASE(pv_accum, (sj_pv_accum)9, SJ_ERR_INVALID_ARGUMENT, "pv_accum");
  CASE(smooth_k, 2, SJ_ERR_INVALID_ARGUMENT, "smooth_k");
  CASE(smooth_v, -2, SJ_ERR_INVALID_ARGUMENT, "smooth_v");
  CASE(sm_scale, 1.0f / 0.0f, SJ_ERR_INVALID_ARGUMENT, "sm_scale");
  CASE(sm_scale, -0.125f, SJ_ERR_INVALID_ARGUMENT, "sm_scale");
  CASE(lse, (float *)(uintptr_t)0x500000002ull, SJ_ERR_INVALID_ARGUMENT, "lse");
  CASE(pv_accum, SJ_ACCUM_FP16_FP32, SJ_ERR_UNSUPPORTED, "pv_accum");
  /* strides */
  CASE(q_stride.seq, 100, SJ_ERR_INVALID_ARGUMENT, "multiples of 8");
  CASE(k_stride.head, -128, SJ_ERR_INVALID_ARGUMENT, "negative");
  CASE(v_stride.batch, INT64_MAX - 7, SJ_ERR_INVALID_ARGUMENT, "overflow");
  p = f->p;
  p.o_stride = (sj_strides){8 * 100 * 128, 100 * 128, 64}; /* rows overlap */
  expect(f, &p, SJ_ERR_INVALID_ARGUMENT, "overlap");
  p = f->p;
  p.o_stride = (sj_strides){0, 100 * 128, 128}; /* batches alias */
  expect(f, &p, SJ_ERR_INVALID_ARGUMENT, "overlap");
  p = f->p;
  p.o = (void *)((uintptr_t)p.v + 4096); /* o inside v */
  expect(f, &p, SJ_ERR_INVALID_ARGUMENT, "overlaps");
  /* inputs may alias themselves (a shared K across the batch) */
  p = f->p;
  p.k_stride = (sj_strides){0, 300 * 128, 128};
  expect(f, &p, SJ_ERR_NO_DEVICE, NULL);
  /* NHD layout with default strides is valid */
  p = f->p;
  p.layout = SJ_LAYOUT_NHD;
  expect(f, &p, SJ_ERR_NO_DEVICE, NULL);
  /* the reference needs an output */
  assert_int_equal(sj_attention_reference(f->ctx, &f->p, NULL, NULL),
                   SJ_ERR_INVALID_ARGUMENT);
#undef CASE
}

/* Varlen: the same validation, plus the prefix sums (host copies are
 * checked on the host, without a device). */
static void test_varlen_validation(void **state) {
  fixture *f = *state;
  static const int32_t good[] = {0, 3, 10}, notzero[] = {1, 3, 10},
                       notmono[] = {0, 7, 5}, notlast[] = {0, 3, 9},
                       toolong[] = {0, 1, 10};
  sj_varlen_params p;
  sj_varlen_params_init(&p);
  p.batch = 2;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim = 64;
  p.total_q = p.total_kv = 10;
  p.max_seqlen_q = p.max_seqlen_kv = 7;
  p.cu_seqlens_q = p.cu_seqlens_kv = (const int32_t *)(uintptr_t)0x600000000ull;
  p.cu_seqlens_q_host = p.cu_seqlens_kv_host = good;
  p.q = f->p.q;
  p.k = f->p.k;
  p.v = f->p.v;
  p.o = f->p.o;
  size_t bytes = 0;
  assert_int_equal(sj_attention_varlen(f->ctx, &p, NULL), SJ_ERR_NO_DEVICE);
  assert_int_equal(sj_attention_varlen_workspace_size(f->ctx, &p, &bytes), SJ_OK);
  assert_true(bytes > 0);
  const struct {
    const int32_t *cu;
    const char *text;
  } bad[] = {{notzero, "not 0"},
             {notmono, "monotone"},
             {notlast, "not the total"},
             {toolong, "above the max"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    sj_varlen_params b = p;
    b.cu_seqlens_kv_host = bad[i].cu;
    assert_int_equal(sj_attention_varlen(f->ctx, &b, NULL),
                     SJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(sj_context_last_error(f->ctx), bad[i].text));
    assert_non_null(strstr(sj_context_last_error(f->ctx), "cu_seqlens_kv"));
  }
  sj_varlen_params b = p;
  b.cu_seqlens_q = NULL;
  assert_int_equal(sj_attention_varlen(f->ctx, &b, NULL), SJ_ERR_INVALID_ARGUMENT);
  b = p;
  b.total_q = -1;
  assert_int_equal(sj_attention_varlen(f->ctx, &b, NULL), SJ_ERR_INVALID_ARGUMENT);
  b = p;
  b.heads_kv = 3;
  assert_int_equal(sj_attention_varlen(f->ctx, &b, NULL), SJ_ERR_INVALID_ARGUMENT);
  b = p;
  b.q_stride_token = 100; /* not a multiple of 8 */
  assert_int_equal(sj_attention_varlen(f->ctx, &b, NULL), SJ_ERR_INVALID_ARGUMENT);
  b = p;
  b.o = (void *)((uintptr_t)p.q + 64); /* o inside q */
  assert_int_equal(sj_attention_varlen(f->ctx, &b, NULL), SJ_ERR_INVALID_ARGUMENT);
  /* without host copies a compile-only context cannot read them... */
  b = p;
  b.cu_seqlens_q_host = b.cu_seqlens_kv_host = NULL;
  assert_int_equal(sj_attention_varlen(f->ctx, &b, NULL), SJ_ERR_NO_DEVICE);
  /* ...unless told to trust them */
  b.trust_cu_seqlens = 1;
  assert_int_equal(sj_attention_varlen(f->ctx, &b, NULL), SJ_ERR_NO_DEVICE);
  assert_non_null(strstr(sj_context_last_error(f->ctx), "compile-only"));
}

/* The workspace a call needs grows with the problem and fits its parts. */
static void test_workspace_size(void **state) {
  fixture *f = *state;
  size_t a = 0, b = 0;
  sj_attention_params p = f->p;
  assert_int_equal(sj_attention_workspace_size(f->ctx, &p, &a), SJ_OK);
  /* at least the INT8 Q and K and the e4m3 V */
  const size_t q8 = 2 * 8 * 128 * 128, k8 = 2 * 2 * 320 * 128;
  assert_true(a >= q8 + 2 * k8);
  p.seq_kv *= 4;
  assert_int_equal(sj_attention_workspace_size(f->ctx, &p, &b), SJ_OK);
  assert_true(b > a);
  /* the FP16 family reads V in place: no e4m3 copy */
  p = f->p;
  p.family = SJ_FAMILY_FP16PV;
  assert_int_equal(sj_attention_workspace_size(f->ctx, &p, &b), SJ_OK);
  assert_true(b < a);
}

/* ----------------------------------------------------------- status texts */

static void test_status_strings(void **state) {
  (void)state;
  const char *seen[32] = {0};
  for (int s = 0; s <= SJ_ERR_BAD_FILE; s++) {
    const char *t = sj_status_string((sj_status)s);
    assert_non_null(t);
    assert_true(strlen(t) > 3);
    assert_string_not_equal(t, "unknown status");
    for (int i = 0; i < s; i++)
      assert_string_not_equal(seen[i], t);
    seen[s] = t;
    assert_true(!strncmp(sj_status_name((sj_status)s), "SJ_", 3));
  }
  assert_string_equal(sj_status_string((sj_status)999), "unknown status");
  /* accumulation modes by the names the CLI and Python accept */
  static const char *const accum[] = {"default",   "fp32",      "fp32+fp32",
                                      "fp16+fp32", "fp32+fp16", "fp32+fp32+splitv",
                                      "pv16",      "pvi8",      "pvi8+splitv"};
  for (int a = SJ_ACCUM_DEFAULT; a <= SJ_ACCUM_PVI8_SPLITV; a++)
    assert_string_equal(sj_pv_accum_name((sj_pv_accum)a), accum[a]);
  assert_string_equal(sj_pv_accum_name((sj_pv_accum)(SJ_ACCUM_PVI8_SPLITV + 1)), "?");
  assert_string_equal(sj_pv_accum_name((sj_pv_accum)-1), "?");
  assert_int_equal(sj_version_number(), SAGEJIT_VERSION_NUMBER);
  assert_string_equal(sj_version(), SAGEJIT_VERSION_STRING);
}

/* ------------------------------------------------------ silence and logs */

typedef struct logbuf {
  int lines;
  char last[512];
} logbuf;

static void capture(void *user, sj_log_level lv, const char *line) {
  logbuf *b = user;
  (void)lv;
  b->lines++;
  snprintf(b->last, sizeof b->last, "%s", line);
}

/* Without SAGEJIT_LOG and without a callback the library writes nothing to
 * stdout or stderr, even on errors; with a callback, lines go there. */
static void test_never_prints(void **state) {
  (void)state;
  int pipefd[2];
  assert_int_equal(pipe(pipefd), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(pipefd[1], 1);
    dup2(pipefd[1], 2);
    close(pipefd[0]);
    unsetenv("SAGEJIT_LOG");
    sj_config cfg;
    sj_config_init(&cfg);
    sj_context *ctx = NULL;
    sj_context_create(&ctx, &cfg); /* fails without a GPU */
    cfg.device = SJ_DEVICE_NONE;
    cfg.target = "sm_80";
    cfg.cache_dir = "/proc/definitely/not/writable";
    if (sj_context_create(&ctx, &cfg) != SJ_OK)
      _exit(3);
    sj_attention_params p;
    sj_attention_params_init(&p);
    sj_attention(ctx, &p, NULL);
    sj_context_destroy(ctx);
    _exit(0);
  }
  close(pipefd[1]);
  char buf[256];
  ssize_t n = read(pipefd[0], buf, sizeof buf);
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_int_equal(n, 0);

  /* the same faults reach a callback */
  logbuf lb = {0};
  sj_config cfg;
  sj_config_init(&cfg);
  cfg.device = SJ_DEVICE_NONE;
  cfg.target = "sm_80";
  cfg.cache_dir = "/proc/definitely/not/writable";
  cfg.log_fn = capture;
  cfg.log_user = &lb;
  cfg.log_level = SJ_LOG_DEBUG;
  sj_context *ctx = NULL;
  assert_int_equal(sj_context_create(&ctx, &cfg), SJ_OK);
  sj_attention_params p;
  sj_attention_params_init(&p);
  assert_int_equal(sj_attention(ctx, &p, NULL), SJ_ERR_INVALID_ARGUMENT);
  assert_true(lb.lines >= 1);
  sj_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_target_table),
      cmocka_unit_test(test_target_newer_than_nvrtc),
      cmocka_unit_test(test_target_parse),
      cmocka_unit_test(test_plan_defaults),
      cmocka_unit_test(test_plan_rejects),
      cmocka_unit_test(test_spec_names_unique),
      cmocka_unit_test(test_plan_tma),
      cmocka_unit_test(test_l2_keeps_v),
      cmocka_unit_test(test_context_create_errors),
      cmocka_unit_test(test_context_resolve),
      cmocka_unit_test(test_context_without_gpu),
      cmocka_unit_test_setup_teardown(test_validation, setup_params, teardown_params),
      cmocka_unit_test_setup_teardown(test_workspace_size, setup_params,
                                      teardown_params),
      cmocka_unit_test_setup_teardown(test_varlen_validation, setup_params,
                                      teardown_params),
      cmocka_unit_test(test_status_strings),
      cmocka_unit_test(test_spec_options_rul),
      cmocka_unit_test(test_never_prints),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
