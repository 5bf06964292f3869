/*
 * spec.c -- kernel specs: what a call needs (the plan), the name expression
 * that instantiates each template, its launch shape and NVRTC options.
 *
 * The name expression and the options are everything that shapes a binary
 * besides the template sources and the target, so together they go into the
 * cache key (see sj_spec_key in compile.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "sj_abi.h"

/* Tile constants of the templates (kernel_templates/sj_common.cuh). */
#define BLK_Q 128
#define BLK_K 64

static const char *dtype_name(sj_dtype d) {
  return d == SJ_DTYPE_BF16 ? "sj::BF16" : "sj::FP16";
}
static const char *family_name(sj_family f) {
  return f == SJ_FAMILY_FP8PV ? "sj::FP8PV" : "sj::FP16PV";
}
const char *sj_family_str(sj_family f) {
  switch (f) {
  case SJ_FAMILY_FP16PV:
    return "fp16pv";
  case SJ_FAMILY_FP8PV:
    return "fp8pv";
  case SJ_FAMILY_WGMMA:
    return "wgmma";
  default:
    return "auto";
  }
}
int sj_v_mode(sj_pv_accum a) {
  switch (a) {
  case SJ_ACCUM_FP32_FP32_SPLITV:
    return 1;
  case SJ_ACCUM_PV16:
    return 2;
  case SJ_ACCUM_PVI8:
    return 3;
  case SJ_ACCUM_PVI8_SPLITV:
    return 4;
  default:
    return 0;
  }
}
int sj_v_bytes(int v_mode) { return v_mode == 1 || v_mode == 2 || v_mode == 4 ? 2 : 1; }
const char *sj_pv_accum_name(sj_pv_accum a) {
  static const char *const names[] = {"default",          "fp32",
                                      "fp32+fp32",        "fp16+fp32",
                                      "fp32+fp16",        "fp32+fp32+splitv",
                                      "pv16",             "pvi8",
                                      "pvi8+splitv"};
  return (unsigned)a < sizeof names / sizeof *names ? names[a] : "?";
}
static const char *accum_name(sj_pv_accum a) {
  switch (a) {
  case SJ_ACCUM_FP32_FP32:
    return "sj::ACC_FP32_FP32";
  case SJ_ACCUM_FP16_FP32:
    return "sj::ACC_FP16_FP32";
  case SJ_ACCUM_FP32_FP16:
    return "sj::ACC_FP32_FP16";
  case SJ_ACCUM_FP32_FP32_SPLITV:
    return "sj::ACC_FP32_FP32_SPLITV";
  case SJ_ACCUM_PV16:
    return "sj::ACC_PV16";
  case SJ_ACCUM_PVI8:
    return "sj::ACC_PVI8";
  case SJ_ACCUM_PVI8_SPLITV:
    return "sj::ACC_PVI8_SPLITV";
  default:
    return "sj::ACC_FP32";
  }
}

int sj_spec_name(const sj_spec *s, char *buf, size_t size) {
  int n = -1;
  switch (s->kind) {
  case SJ_KERNEL_STATS:
    n = snprintf(buf, size, "sj::kv_stats<%s,%d>", dtype_name(s->dtype),
                 s->head_dim);
    break;
  case SJ_KERNEL_FINALIZE:
    n = snprintf(buf, size, "sj::kv_finalize<%d>", s->head_dim);
    break;
  case SJ_KERNEL_QUANT:
    /* (the granularity is the kernel argument sj_quant_args.quant) */
    n = snprintf(buf, size, "sj::quant_qkv<%s,%d,%d,%d>",
                 dtype_name(s->dtype), s->head_dim, s->warp_q,
                 sj_v_mode(s->accum));
    break;
  case SJ_KERNEL_ATTN:
    if (s->family == SJ_FAMILY_WGMMA) { /* ksub holds the keys per tile */
      n = snprintf(buf, size, "sj::attn_wgmma<%s,%d,%s,%s,%d,%d,%d>",
                   dtype_name(s->dtype), s->head_dim,
                   s->causal ? "true" : "false",
                   accum_name(s->accum), s->stages, s->ksub,
                   s->wg_consumers);
      break;
    }
    /* (the granularity is the kernel argument sj_attn_args.quant) */
    /* (TMA tiles: a ninth argument, true, and VH a tenth; the others keep
     * their defaults) */
    n = snprintf(buf, size, "sj::attn_mma<%s,%s,%d,%s,%s,%d,%d,%d%s>",
                 family_name(s->family), dtype_name(s->dtype), s->head_dim,
                 s->causal ? "true" : "false",
                 accum_name(s->accum), s->warp_q, s->stages, s->ksub,
                 s->tma ? (s->vh ? ",true,true" : ",true") : "");
    break;
  case SJ_KERNEL_REFERENCE:
    n = snprintf(buf, size, "sj::reference_attn<%s,%d>", dtype_name(s->dtype),
                 s->head_dim);
    break;
  }
  return (n < 0 || (size_t)n >= size) ? -1 : 0;
}

/* attn_mma's V tiles carry V's e4m3 residual: split V, and pvi8+splitv,
 * whose one kernel holds both bodies and sizes its stages for the larger */
static int mma_split_v(sj_pv_accum a) {
  return a == SJ_ACCUM_FP32_FP32_SPLITV || a == SJ_ACCUM_PVI8_SPLITV;
}

/* Dynamic shared memory of the attention kernel (sj_attn_mma.cuh).  Split
 * V keeps the residual tile next to each V tile. */
static int attn_smem(sj_family fam, int d, int stages, int split) {
  const int q = BLK_Q * (d + 16);
  const int k = BLK_K * (d + 16);
  const int v = fam == SJ_FAMILY_FP8PV ? (split ? 2 : 1) * d * (BLK_K + 16)
                                       : BLK_K * (2 * d + 16);
  return q + stages * (k + v);
}

/* The two fp16 copies of V tiles that attn_mma's VH keeps past its TMA
 * stages (sj_attn_mma.cuh): D channel rows of BLK_K 16-bit tokens each. */
static int vh_bytes(int d) { return 2 * d * BLK_K * 2; }
static int vh_smem(const sj_spec *s) { return s->tma && s->vh ? vh_bytes(s->head_dim) : 0; }

/* Dynamic shared memory of attn_wgmma (WgSmem in sj_attn_wgmma.cuh), plus
 * room to round its base up to 1024 bytes: the kernel declares the buffer
 * 128-byte aligned, so 896 bytes suffice.  (With 1024 the solo D = 128
 * kernel of two stages came to 76888 bytes, 88 over the 76800 that three
 * CTAs per multiprocessor allow, and ran two.)  nc consumer warpgroups of
 * 64 rows, V written in v_mode (sj_v_mode). */
static int wgmma_smem(int d, int bn, int stages, int v_mode, int nc) {
  return 64 * sj_wg_groups(nc) * d + stages * (1 + sj_v_bytes(v_mode)) * bn * d +
         1024 /* ones */ + 8 * d /* V scale, mean */ + 8 * (1 + 3 * stages) +
         32 /* fused Q: per_block scales of 8 warps */ + 896 /* alignment */;
}

/* The same, for an attention kernel's accumulation mode: the split V body
 * of a solo pvi8+splitv kernel at D = 128 keeps one stage fewer than its
 * pvi8 body (solo_split_stages in sj_attn_wgmma.cuh), and the launch
 * takes the larger of the two. */
static int wgmma_attn_smem(int d, int bn, int stages, sj_pv_accum acc, int nc) {
  if (nc == 0 && acc == SJ_ACCUM_PVI8_SPLITV && d == 128 && stages > 1) {
    const int a = wgmma_smem(d, bn, stages, sj_v_mode(SJ_ACCUM_PVI8), 0);
    const int b = wgmma_smem(d, bn, stages - 1, sj_v_mode(SJ_ACCUM_FP32_FP32_SPLITV), 0);
    return a > b ? a : b;
  }
  return wgmma_smem(d, bn, stages, sj_v_mode(acc), nc);
}

sj_launch_shape sj_spec_shape(const sj_spec *s) {
  sj_launch_shape sh = {256, 0};
  switch (s->kind) {
  case SJ_KERNEL_ATTN:
    if (s->family == SJ_FAMILY_WGMMA) {
      sh.threads = s->wg_consumers ? 128 * (s->wg_consumers + 1) : 128;
      sh.smem_bytes = wgmma_attn_smem(s->head_dim, s->ksub, s->stages, s->accum,
                                      s->wg_consumers);
      break;
    }
    sh.threads = BLK_Q / s->warp_q * 32;
    sh.smem_bytes = attn_smem(s->family, s->head_dim, s->stages, mma_split_v(s->accum)) +
                    vh_smem(s);
    break;
  case SJ_KERNEL_REFERENCE:
    sh.threads = 128;
    break;
  default:
    break;
  }
  return sh;
}

/* ptxas's --register-usage-level for a kernel (0-10, how far its
 * optimizations may raise register use; -1: no option, i.e. its default,
 * 5).  On sm_90a the attention kernels compile one way at 0-3, another at
 * 4-5 and a third at 6-10.  8 where it won (H100, attention against the
 * default, two calls of two rounds, 1K / 4K / 16K; bench/NOTES.md rul):
 * FP8PV's pvi8+splitv under the causal mask at D = 128, +2.8 / +4.0 /
 * +5.4 % and +2.7 / +3.5 / +4.6 % (spills 260 / 276 -> 212 / 228 bytes).
 * Elsewhere 8 tied or lost: pvi8+splitv at D = 32, 256 and non-causal
 * D = 128 within +-0.6 %, causal D = 64 and 96 -2 to -3 %; FP8PV
 * fp32+fp16 -0.6 to +0.1 %; FP16PV fp32 D = 128 -0.5 to +1.4 %; WGMMA
 * D = 128 at 16K -1.9 / -2.5 %, D = 64 0 to -1 %.  Level 2 lost up to
 * 27 %.  The other targets were not measured.  Development knob:
 * SAGEJIT_TUNE "rul=N" forces level N (0-10) for every kernel; rul=5
 * means no option. */
static int spec_rul(const sj_spec *s, const sj_target *t) {
  const char *v = getenv("SAGEJIT_TUNE");
  const char *w = v ? strstr(v, "rul=") : NULL;
  if (w && w[4] >= '0' && w[4] <= '9') {
    const int x = atoi(w + 4);
    if (x <= 10)
      return x == 5 ? -1 : x;
  }
  if (t->sm == 90 && !t->is_ptx && s->kind == SJ_KERNEL_ATTN &&
      s->family == SJ_FAMILY_FP8PV && s->accum == SJ_ACCUM_PVI8_SPLITV && s->causal &&
      s->head_dim == 128)
    return 8;
  return -1;
}

int sj_spec_options(const sj_spec *s, const sj_target *t, char opts[][64],
                    int max) {
  int n = 0;
  if (max < 2)
    return -1;
  snprintf(opts[n++], 64, "--gpu-architecture=%s", t->name);
  snprintf(opts[n++], 64, "-std=c++17");
  /* (every option is part of the cache key) */
  const int rul = spec_rul(s, t);
  if (rul >= 0 && n < max)
    snprintf(opts[n++], 64, "--ptxas-options=--register-usage-level=%d", rul);
  return n;
}

/* The causal cells of attn_mma at D = 128 that take two TMA stages on
 * sm_90 (sj_plan_make's stage rule): H100, one call, two rounds, attention
 * (end to end) 1K / 4K / 16K against three stages, TMA or cp.async as
 * before (bench/NOTES.md st128): FP16PV fp32 +4.2 / +4.9 / +4.1 % (+2.9 /
 * +4.5 / +4.2 %), fp16+fp32 +2.5 / +1.8 / +1.4 % (+0.9 / +2.5 / +1.4 %),
 * FP8PV pvi8+splitv (cp.async before) +2.9 / +2.3 / +2.8 % (+0.5 / +2.2 /
 * +3.2 %).  Not fp32+fp32 (+0.5 / +1.0 / +2.6 %), fp32+fp16 (+0.6 / +0.5
 * / -3.0 %), fp32 (cp.async before: -2.8 / +0.3 / +1.2 %), nor any cell
 * without the mask (FP16PV fp32 +0.1 / -0.4 / -1.0 %, FP8PV fp32 -7 to
 * -8 %, the rest -0.8 to +1.3 %). */
static int mma_st2_128(sj_family fam, sj_pv_accum acc) {
  return fam == SJ_FAMILY_FP16PV ? acc == SJ_ACCUM_FP32 || acc == SJ_ACCUM_FP16_FP32
                                 : acc == SJ_ACCUM_PVI8_SPLITV;
}

/* attn_mma's K/V tiles by TMA tensor copies (TMA in sj_attn_mma.cuh): three
 * copies per tile that thread 0 issues, where cp.async had every thread
 * issue 12 (D = 128).  The template has the form for D = 32, 64, 96, 128
 * and 256 with two or more stages and without split V, on sm_90 and later;
 * it is on where it was measured to win, on sm_90 (H100, attention against the
 * cp.async form in the same call, 1K / 4K / 16K; bench/NOTES.md tma,
 * forty-seventh session, and tma256, forty-ninth).  32-row warps, D = 128
 * in three stages and D = 64 in two:
 *   FP16PV fp32       D = 128 +10-12 %, causal +3 / +5 / +7 %
 *                     (not D = 64: -2 to +2.6 %)
 *   FP16PV fp16+fp32  D = 128 +17-18 %, causal +9-10 %; D = 64 +11 / +16 /
 *                     +16 %, causal +10 / +16 / +18 %
 *   FP8PV fp32+fp32   D = 128 +7-8 %, causal +8 / +10 / +10 %; D = 64
 *                     causal +10 / +12 / +10 % (not non-causal: +-0.6 %)
 *   FP8PV fp32+fp16   D = 128 +6-8 %, causal +3 / +4 / +7 % (not D = 64)
 *   FP8PV pvi8        D = 128 +4 / +4 / +6 % (not causal, not D = 64)
 *   FP8PV pvi8+splitv D = 128 +9-14 % (its pvi8 body; not causal: -5 to
 *                     -8 %, 352 bytes of spills; not D = 64)
 *   FP8PV fp32        never (-2 to -8 %)
 * D = 256 (16-row warps, two stages, K in two 128-byte boxes per tile):
 * every mode gained, both ways: FP16PV fp32 +13 / +16 / +17 % (causal +12
 * / +15 / +16 %), fp16+fp32 +15 / +17 / +18 % (+13 / +15 / +17 %); FP8PV
 * fp32 +6-9 %, fp32+fp16 +6-10 %, fp32+fp32 +8-13 %, pvi8 +5.5-7 % (causal
 * +20-24 %), pvi8+splitv +7-8 % (causal +4-5 %).
 * D = 96 (K in three 32-byte boxes, FP16 V in 32-channel boxes; bench/NOTES.md
 * tma96): FP16PV fp32 +14 / +13 / +14 % (causal +15 / +16 / +17 %),
 * fp16+fp32 +18 / +21 / +21 % (+12 / +14 / +14 %); FP8PV pvi8 +10-11 %
 * (causal +6-9 %), pvi8+splitv +8-10 % (+5-8 %), fp32+fp16 and fp32+fp32
 * +6.5-8 % and +8-10 % (not causal: 0 to +2 % and +1 to +4 %), fp32 never
 * (-0.5 to +3 %); those cells take it (test_gpu, test_gpu_varlen and the
 * sanitizers ran with it on the H100, fiftieth session).
 * D = 32 (K in one 32-byte box, FP16 V in one 32-channel box; bench/NOTES.md
 * tma32, fiftieth session): FP8PV fp32 +13 / +15 / +12 % (causal +5 / +9 /
 * +8 %), fp32+fp32 +4 / +5 / +5 % (+3 / +9 / +8 %), pvi8+splitv +4 / +7 /
 * +5 % (not causal: -0.3 to -1.2 %), pvi8 causal +8 / +14 / +14 % (not
 * without the mask: -0.2 to -1.6 %), FP16PV fp16+fp32 +5 / +9 / +6 % (not
 * causal: -3 to -5 %); FP16PV fp32 +1.6-2.8 % (causal -3 to -7 %) and
 * FP8PV fp32+fp16 (-2 to -4 %) keep cp.async.
 * SAGEJIT_TUNE "tma=0" / "tma=1" forces it off / on wherever the template
 * has it (A/B runs; in the name expression, hence in the cache key).
 * Blackwell has TMA too but was not measured: off there. */
static int mma_tma(const sj_target *t, sj_family fam, sj_pv_accum acc, int d,
                   int causal, int stages, int warp_q) {
  if (t->sm < 90 || !SJ_TMA_HAS_DIM(d) || stages < 2 ||
      acc == SJ_ACCUM_FP32_FP32_SPLITV)
    return 0;
  const int forced = sj_tune_int("tma=", 0, 1, -1);
  if (forced >= 0)
    return forced;
  if (t->sm >= 100)
    return 0;
  if (d == 256)
    return warp_q == 16 && stages == 2;
  if (warp_q != 32) /* D <= 128: 32-row warps only */
    return 0;
  if (d == 32) {
    switch (acc) {
    case SJ_ACCUM_FP32: /* FP8PV's; FP16PV's +2 % only, causal -3 to -7 % */
      return fam == SJ_FAMILY_FP8PV;
    case SJ_ACCUM_FP32_FP32:
      return 1;
    case SJ_ACCUM_FP16_FP32:
    case SJ_ACCUM_PVI8_SPLITV:
      return !causal;
    case SJ_ACCUM_PVI8:
      return causal;
    case SJ_ACCUM_FP32_FP16: /* causal with VH: +4.3-5.1 % (not without the
                                mask: -2 to -4 %, -5 % with VH) */
      return causal;
    default:
      return 0;
    }
  }
  if (d == 96) {
    switch (acc) {
    case SJ_ACCUM_FP32: /* FP16PV's default; FP8PV's with VH (without it a tie) */
    case SJ_ACCUM_FP16_FP32:
    case SJ_ACCUM_PVI8:
    case SJ_ACCUM_PVI8_SPLITV:
      return 1;
    case SJ_ACCUM_FP32_FP16: /* causal: with VH only */
    case SJ_ACCUM_FP32_FP32:
      return 1;
    default:
      return 0;
    }
  }
  if (d == 128 && stages == 2) /* the stage rule's causal cells */
    return causal && mma_st2_128(fam, acc);
  if (d == 128 ? stages < 3 : stages != 2)
    return 0;
  switch (acc) {
  case SJ_ACCUM_FP32: /* FP16PV's default; FP8PV's with VH (never without;
                         at causal D = 64 since the chunked step came with
                         VH: +3.3 / +1.2 / +1.4 %, bench/NOTES.md vh64c) */
    return d == 128 || fam == SJ_FAMILY_FP8PV;
  case SJ_ACCUM_FP16_FP32:
    return 1;
  case SJ_ACCUM_FP32_FP32: /* D = 64 without the mask: with VH */
    return 1;
  case SJ_ACCUM_FP32_FP16:
    return d == 128;
  case SJ_ACCUM_PVI8:
  case SJ_ACCUM_PVI8_SPLITV:
    return d == 128 && !causal;
  default:
    return 0;
  }
}

/* attn_mma's VH (sj_attn_mma.cuh): where FP8PV's e4m3 modes take their
 * P.V as fp16 mma on e4m3 values, the CTA converting each V tile once into
 * an fp16 copy, instead of ptxas's conversion of both fragments before
 * each HMMA pair of the emulated e4m3 mma (every warp, every tile).  On
 * sm_90 only (sm_89 and Blackwell have the e4m3 mma.sync), with TMA tiles
 * (the copies' addresses follow the TMA swizzle).  H100, one call, two
 * rounds, attention against the tree (which had cp.async where TMA is new
 * below; bench/NOTES.md vh), 4K / 16K (1K too at D = 128):
 *   fp32       D = 128 +20 / +24 / +25 % (causal +12 / +17 / +15 %), D = 96
 *              +16 / +16 % (+11 / +11 %), D = 256 +5 / +6 % (+7 / +8 %),
 *              D = 64 +5 / +5 % (causal -2 % unchunked, +3.3 / +1.2 /
 *              +1.4 % chunked: vh64c; D = 32 -3 to 0 %,
 *              but with the chunked step that VH brings since the c8x
 *              row, D = 32 without the mask +9 / +9 / +10 % at 1K / 4K /
 *              16K: bench/NOTES.md vh32)
 *   fp32+fp16  D = 128 causal +3.8 / +3.0 / +0.6 %, D = 96 +6 / +5 % (causal
 *              +13 / +15 %), D = 32 causal +5 / +5 %; not D = 128 without the
 *              mask (-3.5 to -4 %), D = 64 (-3.5 to -9.5 %), D = 256 (-1.5 %,
 *              causal -13 %), D = 32 without the mask (-5 %)
 *   fp32+fp32  D = 128 +7 / +8 / +8 % (causal +6 / +6 / +6 %), D = 96 +5 /
 *              +7 % (+9 / +8 %), D = 64 +5 / +5 % (+3 / +4 %); not D = 32 or
 *              256 (-2 to 0 %)
 * SAGEJIT_TUNE "vh=0" / "vh=1" forces it off / on wherever the template
 * has it (A/B runs; in the name expression, hence in the cache key). */
static int mma_vh(const sj_target *t, sj_family fam, sj_pv_accum acc, int d, int causal,
                  int stages) {
  if (fam != SJ_FAMILY_FP8PV ||
      (acc != SJ_ACCUM_FP32 && acc != SJ_ACCUM_FP32_FP16 && acc != SJ_ACCUM_FP32_FP32) ||
      attn_smem(fam, d, stages, 0) + vh_bytes(d) > t->smem_optin)
    return 0;
  const int forced = sj_tune_int("vh=", 0, 1, -1);
  if (forced >= 0)
    return forced;
  if (t->sm != 90)
    return 0;
  switch (d) {
  case 32: /* the fp32 mode chunked (sj_attn_mma.cuh CHUNKED follows VH):
              +9.2 / +8.9 / +9.9 %, causal -1 to 0 % (bench/NOTES.md vh32) */
    return acc == SJ_ACCUM_FP32 ? !causal : acc == SJ_ACCUM_FP32_FP16 && causal;
  case 64:
    return acc == SJ_ACCUM_FP32 || acc == SJ_ACCUM_FP32_FP32;
  case 96:
    return 1;
  case 128:
    return acc != SJ_ACCUM_FP32_FP16 || causal;
  default: /* 256 */
    return acc == SJ_ACCUM_FP32;
  }
}

/* Development knob: SAGEJIT_TUNE="warp_q=32,ksub=32" overrides the rows per
 * warp (16 or 32) and the keys per compute step (32 or 64) of attn_mma;
 * "bn=64,nc=1,stages=2" the keys per tile, consumer warpgroups (0: one
 * warpgroup and no producer, 1 or 2 with a producer) and stages
 * of attn_wgmma.  All are in the name expression, hence in the cache key;
 * "ks=1" (smooth_k's mean over every key) is a kernel argument. */
int sj_tune_int(const char *name, int a, int b, int dflt) {
  const char *v = getenv("SAGEJIT_TUNE");
  const char *w = v ? strstr(v, name) : NULL;
  if (w) {
    int x = atoi(w + strlen(name));
    if (x == a || x == b)
      return x;
  }
  return dflt;
}

int sj_l2_keeps_v(int64_t l2_bytes, int64_t v_bytes) {
  return l2_bytes > 0 && v_bytes > 0 && v_bytes <= l2_bytes / 4 * 3;
}

/* CTAs per multiprocessor of attn_wgmma (internal.h). */
int sj_wgmma_ctas_per_sm(int head_dim, int bn, int nc) {
  if (nc)
    return nc == 1 ? 2 : 1;
  return head_dim == 128 && bn == 64 ? 4 : 3;
}

/* Stages of attn_wgmma: three where they fit the shared memory of one of
 * the CTAs a multiprocessor holds (each also keeps 1 KB for the system),
 * else two; solo CTAs take one where two do not fit either (split V alone
 * at D = 128 with 128-key tiles: three CTAs of one stage rather than two
 * of two). */
static int wgmma_stages(const sj_target *t, int head_dim, int bn, sj_pv_accum acc,
                        int nc) {
  const int per_sm = sj_wgmma_ctas_per_sm(head_dim, bn, nc);
  const int smem_cap = (t->smem_optin + 1024) / per_sm - 1024;
  int stages = sj_tune_int("stages=", 2, 3, 3);
  if (wgmma_attn_smem(head_dim, bn, stages, acc, nc) > smem_cap)
    stages = 2;
  if (nc == 0 && wgmma_attn_smem(head_dim, bn, stages, acc, nc) > smem_cap)
    stages = 1;
  return stages;
}

static int head_dim_ok(int d) {
  return d == 32 || d == 64 || d == 96 || d == 128 || d == 256;
}

/* What the wgmma family offers: AUTO falls back to fp8pv outside it, an
 * explicit request is refused (sj_plan_make).  Its tensor-core accumulator
 * cannot carry O across a long sequence (fp32 mode measured relative L2
 * 0.32 at N = 16K), so every mode is two-level, 16-bit or INT8. */
static int wgmma_head_dim(int d) { return d == 64 || d == 128 || d == 256; }
static int wgmma_accum(sj_pv_accum a) {
  return a == SJ_ACCUM_FP32_FP32 || a == SJ_ACCUM_FP32_FP32_SPLITV ||
         a == SJ_ACCUM_PV16 || a == SJ_ACCUM_PVI8 || a == SJ_ACCUM_PVI8_SPLITV;
}

sj_status sj_plan_make(const sj_target *t, sj_family fam, sj_dtype dt,
                       int head_dim, int causal, sj_quant_gran qg,
                       sj_pv_accum acc, int smooth_k, int smooth_v,
                       sj_plan *out, char *msg, size_t msg_size) {
  memset(out, 0, sizeof *out);
  if (fam == SJ_FAMILY_AUTO) {
    fam = t->family;
    /* What the wgmma family does not offer goes to fp8pv. */
    if (fam == SJ_FAMILY_WGMMA &&
        (!wgmma_head_dim(head_dim) ||
         (acc != SJ_ACCUM_DEFAULT && !wgmma_accum(acc))))
      fam = SJ_FAMILY_FP8PV;
  }
  if (!sj_family_supported(fam, t)) {
    snprintf(msg, msg_size, "family %s needs %s; target is %s",
             sj_family_str(fam),
             fam == SJ_FAMILY_WGMMA ? "the sm_90a target" : "sm_89 or newer",
             t->name);
    return SJ_ERR_UNSUPPORTED;
  }
  if (fam == SJ_FAMILY_WGMMA && !wgmma_head_dim(head_dim)) {
    snprintf(msg, msg_size,
             "the wgmma family has head dims 64, 128 and 256 (got %d); "
             "fp8pv has the others",
             head_dim);
    return SJ_ERR_UNSUPPORTED;
  }
  if (!head_dim_ok(head_dim)) {
    snprintf(msg, msg_size,
             "head_dim %d is not supported (32, 64, 96, 128 or 256)", head_dim);
    return SJ_ERR_UNSUPPORTED;
  }
  if (qg == SJ_QUANT_DEFAULT)
    qg = SJ_QUANT_PER_THREAD;
  if (acc == SJ_ACCUM_DEFAULT) {
    if (fam == SJ_FAMILY_FP16PV)
      acc = SJ_ACCUM_FP32;
    else if (fam == SJ_FAMILY_WGMMA)
      /* pvi8 where V is spread evenly (~1.5e-2 relative L2, 5-30 % faster
       * than split V), split V where a few tokens dominate V (~2.9e-2,
       * where pvi8 would reach 6-8e-2): both under the 3.5e-2 gate
       * (docs/kernels.md) */
      acc = SJ_ACCUM_PVI8_SPLITV;
    else if (t->sm == 90)
      /* Hopper runs mma.sync e4m3 by emulation and u8 natively: the
       * WGMMA default's per-head choice, 8-39 % faster than fp32+fp32 on
       * the H100 and under the gate on outlier V (docs/kernels.md) */
      acc = SJ_ACCUM_PVI8_SPLITV;
    else /* consumer parts accumulate fp16 at twice the rate */
      acc = (t->sm == 89 || t->sm >= 120) ? SJ_ACCUM_FP32_FP16
                                          : SJ_ACCUM_FP32_FP32;
  }
  const int fp16_ok = acc == SJ_ACCUM_FP32 || acc == SJ_ACCUM_FP16_FP32;
  const int split = mma_split_v(acc);
  const int fp8_ok = acc == SJ_ACCUM_FP32 || acc == SJ_ACCUM_FP32_FP32 ||
                     acc == SJ_ACCUM_FP32_FP16 || split || acc == SJ_ACCUM_PVI8;
  const int wg_ok = wgmma_accum(acc);
  if ((fam == SJ_FAMILY_FP16PV && !fp16_ok) ||
      (fam == SJ_FAMILY_FP8PV && !fp8_ok) ||
      (fam == SJ_FAMILY_WGMMA && !wg_ok)) {
    snprintf(msg, msg_size,
             "pv_accum %s (%d) is not offered by the %s family (fp16pv: "
             "fp32, fp16+fp32; fp8pv: fp32, fp32+fp32, fp32+fp16, "
             "fp32+fp32+splitv, pvi8, pvi8+splitv; wgmma: fp32+fp32, fp32+fp32+splitv, "
             "pv16, pvi8, pvi8+splitv)",
             sj_pv_accum_name(acc), (int)acc, sj_family_str(fam));
    return SJ_ERR_UNSUPPORTED;
  }
  smooth_k = smooth_k < 0 ? 1 : smooth_k;
  smooth_v = smooth_v < 0 ? 0 : smooth_v;
  if (smooth_v && !((fam == SJ_FAMILY_FP8PV || fam == SJ_FAMILY_WGMMA) &&
                    acc != SJ_ACCUM_FP32_FP16)) {
    snprintf(msg, msg_size,
             "smooth_v applies to the fp8pv and wgmma families with fp32, "
             "fp32+fp32, fp32+fp32+splitv, pv16, pvi8 or pvi8+splitv "
             "accumulation only");
    return SJ_ERR_UNSUPPORTED;
  }
  out->family = fam;
  out->dtype = dt;
  out->head_dim = head_dim;
  out->causal = causal ? 1 : 0;
  out->quant = qg;
  out->accum = acc;
  out->smooth_k = smooth_k;
  out->smooth_v = smooth_v;
  /* smooth_k's mean from every fourth key once a sequence has 1024 (a
   * kernel argument, not in the cache key; SJ_K_SAMPLE_MIN): kv_stats
   * reads a quarter of K.  "ks=1" takes every key. */
  out->k_sample = sj_tune_int("ks=", 1, 4, 4);
  if (fam == SJ_FAMILY_WGMMA) {
    /* 16 rows per consumer warp (wgmma m64 over a warpgroup), so the Q
     * scale layout of the quantizer is its WARP_Q = 16 one.  128 keys per
     * tile; at D = 256 64, which keeps O, the tile accumulator and S in
     * the consumers' 240 registers.  Two stages, three at D <= 128. */
    out->warp_q = 16;
    out->ksub = sj_tune_int("bn=", 64, 128, head_dim == 256 ? 64 : 128);
    /* 64 query rows per consumer warpgroup.  At D = 128 and 256 two
     * consumers share each K/V tile with a producer warpgroup; one consumer
     * per CTA (two CTAs per multiprocessor) needs twice the K/V traffic
     * from L2 and measured 1-12 % slower (bench/NOTES.md, w10).  At D = 64
     * the CTA is one warpgroup with no producer (NC = 0, "solo": its
     * thread 0 issues the copies), three CTAs per multiprocessor (their
     * launch bounds in sj_attn_wgmma.cuh): +9-16 % at 1K, +8-11 % at 4K,
     * +6 % at 16K over one consumer with a producer (two CTAs), itself
     * +9-14 % over two consumers (w10, w19); pv16 keeps one consumer (not
     * measured solo).  At D = 128 calls of at most SJ_SOLO_SEQ keys
     * (causal: SJ_SOLO_SEQ_CAUSAL) take solo CTAs too (sj_plan_solo,
     * sj_plan_short); longer ones keep two consumers. */
    const int nc = sj_tune_int("nc=", 0, 1, -1); /* nc=0, 1 or 2 */
    out->wg_consumers =
        nc >= 0 ? nc
                : sj_tune_int("nc=", 2, 2,
                           head_dim == 64 ? (acc == SJ_ACCUM_PV16 ? 1 : 0) : 2);
    /* Several CTAs share a multiprocessor's shared memory (each also keeps
     * 1 KB for the system). */
    out->stages = wgmma_stages(t, head_dim, out->ksub, acc, out->wg_consumers);
  } else {
  /* 32 rows per warp share each K/V fragment between two m-tiles; at
   * D = 256 the O accumulator alone needs 128 registers per m-tile. */
  out->warp_q = sj_tune_int("warp_q=", 16, 32, head_dim <= 128 ? 32 : 16);
  /* One online-softmax step per 64-key tile: half the per-step work
   * (shuffles, rescale test, barrier waits) per key and twice the
   * independent mma chains.  At D = 128 it spills 0-80 bytes per thread
   * and still beats two 32-key steps by 10-20 % (bench/NOTES.md, m2);
   * D = 256 (16-row warps) keeps 32. */
  out->ksub = sj_tune_int("ksub=", 32, 64, head_dim > 128 ? 32 : 64);
  /* Three buffers (one barrier per tile) when two CTAs still fit on a
   * multiprocessor, else two, else one.  At D = 64 two (two barriers per
   * tile, the next tile's copies issued after the second): on the H200
   * +1.0-3.3 % over three in 17 of 18 cells (FP16PV, FP8PV fp32+fp16 and
   * pvi8, 1K-16K, causal or not; pvi8 causal 1K -1.1 %; bench/NOTES.md,
   * the knob row after m9).  D = 32 was not measured and keeps the rule. */
  int stages = head_dim != 64 && 2 * attn_smem(fam, head_dim, 3, split) <= t->smem_optin
                   ? 3
                   : (attn_smem(fam, head_dim, 2, split) <= t->smem_optin ? 2
                                                                          : 1);
  /* (four: TMA tiles only, A/B runs; the cp.async loop keeps two tiles
   * in flight whatever the stage count) */
  const int want = sj_tune_int("stages=", 2, 4, 0);
  if (want && attn_smem(fam, head_dim, want, split) <= t->smem_optin)
    stages = want;
  else if (!want && t->sm == 90 && out->causal && stages == 3 &&
           (head_dim == 32 ||
            (head_dim == 96 && mma_tma(t, fam, acc, 96, 1, 3, out->warp_q)) ||
            (head_dim == 128 && out->warp_q == 32 && mma_st2_128(fam, acc))))
    /* Causal calls on sm_90 at D = 32, and at D = 96 where the tiles come
     * by TMA, take two stages too: H100, attention against three, same
     * call, two rounds, 1K / 4K / 16K (bench/NOTES.md st2): D = 32
     * FP8PV fp32+fp32 +3.5 / +3.8 / +2.7 %, fp32 +1.7 / +2.8 / +1.4 %,
     * pvi8+splitv +1.9 / +1.3 / +1.2 %, FP16PV fp32 +2.7 / +2.1 / +1.2 %,
     * fp16+fp32 -0.6 / +1.3 / +1.8 %; D = 96 pvi8+splitv +0.3 / +4.1 /
     * +5.4 %, FP16PV fp32 -0.6 / +2.5 / +2.1 %, fp16+fp32 +0.7 / +2.2 /
     * +2.4 %.  Not without the mask (D = 32 FP16PV fp32 -3 %, D = 96 FP8PV
     * fp32 -2.4 to -3.2 %, elsewhere -0.8 to +0.9 %) nor D = 96's cp.async
     * cells under it (FP8PV fp32 -1 to -2 %).  At D = 128 the cells of
     * mma_st2_128, in two TMA stages. */
    stages = 2;
  out->stages = stages;
  out->tma = mma_tma(t, fam, acc, head_dim, out->causal, stages, out->warp_q);
  if (stages > 3 && !out->tma) {
    out->stages = 3;
    out->tma = mma_tma(t, fam, acc, head_dim, out->causal, 3, out->warp_q);
  }
  }
  if (fam != SJ_FAMILY_WGMMA &&
      attn_smem(fam, head_dim, out->stages, split) > t->smem_optin) {
    snprintf(msg, msg_size, "head_dim %d needs more shared memory than %s has",
             head_dim, t->name);
    return SJ_ERR_UNSUPPORTED;
  }

  sj_spec base;
  memset(&base, 0, sizeof base);
  base.family = fam;
  base.dtype = dt;
  base.head_dim = head_dim;
  base.accum = acc;
  base.warp_q = out->warp_q;
  base.stages = out->stages;
  base.ksub = out->ksub;
  base.wg_consumers = out->wg_consumers;
  base.tma = out->tma;
  base.causal = out->causal;
  sj_spec *sp = out->specs;
  /* stats + finalize: K mean and V scale (independent of accum) */
  sp[0] = base;
  sp[0].kind = SJ_KERNEL_STATS;
  sp[0].family = 0;
  sp[0].accum = 0;
  sp[0].causal = 0;
  sp[0].warp_q = 0;
  sp[0].stages = 0;
  sp[0].ksub = 0;
  sp[0].wg_consumers = 0;
  sp[0].tma = 0;
  sp[1] = sp[0];
  sp[1].kind = SJ_KERNEL_FINALIZE;
  sp[1].dtype = 0;
  sp[2] = sp[0];
  sp[2].kind = SJ_KERNEL_QUANT;
  sp[2].warp_q = out->warp_q;
  /* how the quantizer writes V (its name carries sj_v_mode) */
  sp[2].accum = sj_v_mode(acc) ? acc : 0;
  sp[3] = base;
  sp[3].kind = SJ_KERNEL_ATTN;
  sp[3].vh = fam != SJ_FAMILY_WGMMA && out->tma &&
             mma_vh(t, fam, acc, head_dim, out->causal, out->stages);
  /* one quantizer and one attention kernel serve the three granularities
   * (a kernel argument, sj_quant_args.quant and sj_attn_args.quant): they
   * differ only in the scale groups' bookkeeping, once per block, and in
   * where the attention kernel reads the Q scale, once per CTA; no spec
   * carries it */
  out->n_specs = 4;
  return SJ_OK;
}

/* The plans a call's length may reroute (sj_plan_short, sj_plan_solo):
 * wgmma at D = 128 in the default pvi8+splitv or one of its two bodies
 * alone (pvi8, split V), so that the default stays bit for bit the mode it
 * picks for each head (test_gpu's test_v_auto), and no SAGEJIT_TUNE
 * override of nc= or bn= (nor `knob`, if given). */
static int length_routed(const sj_plan *pl, const char *knob) {
  const char *tune = getenv("SAGEJIT_TUNE");
  return pl->family == SJ_FAMILY_WGMMA && pl->head_dim == 128 &&
         (pl->accum == SJ_ACCUM_PVI8_SPLITV || pl->accum == SJ_ACCUM_PVI8 ||
          pl->accum == SJ_ACCUM_FP32_FP32_SPLITV) &&
         !(tune && (strstr(tune, "nc=") || strstr(tune, "bn=") ||
                    (knob && strstr(tune, knob))));
}

/* The plan's attention kernel as solo CTAs at its tile size (pl->ksub). */
static void make_solo(sj_plan *pl, const sj_target *t) {
  pl->wg_consumers = 0;
  pl->stages = wgmma_stages(t, pl->head_dim, pl->ksub, pl->accum, 0);
  pl->specs[3].wg_consumers = pl->wg_consumers;
  pl->specs[3].ksub = pl->ksub;
  pl->specs[3].stages = pl->stages;
}

/* Short causal sequences at D = 128: solo CTAs (64 rows, no producer) with
 * 64-key tiles.  A causal head of N <= 1K has few Q blocks, most of them
 * short, and each CTA's prologue and epilogue are a large part of its time;
 * three solo CTAs per multiprocessor overlap them, and 64-key tiles cut
 * the masked work on the diagonal.  H200, same call, attention (end to
 * end) against two consumers: +16-17 % (+12-14 %) at 512, +16 % (+10 %) at
 * 1K (bench/NOTES.md, w20).  Since w22, against the solo 128-key kernel
 * (H100): +0-1 % (+1-4 %) at 512 and 1K, but -9-10 % (-6-7 %) at 2K, so
 * SJ_SHORT_SEQ is 1024. */
int sj_plan_short(sj_plan *pl, const sj_target *t) {
  if (!pl->causal || !length_routed(pl, NULL))
    return 0;
  pl->ksub = 64;
  make_solo(pl, t);
  return 1;
}

/* Sequences of at most SJ_SOLO_SEQ (causal: SJ_SOLO_SEQ_CAUSAL) at D = 128
 * (those sj_plan_short does not take): solo CTAs with 128-key tiles, three
 * per multiprocessor, the pvi8 body in two stages and split V's in one
 * (wgmma_attn_smem).  H200,
 * same call, against the two-consumer kernel (SAGEJIT_TUNE=solo=0), the
 * default's attention at 1K / 2K / 4K: +6-8 / +8 / +5 %, causal 4K +9 %
 * (end to end +5 / +6-7 / +5 %, causal 4K +8 %; bench/NOTES.md, w21).
 * Since w22 (the solo refill after the next Q.K^T issue) also at 8K:
 * +1 % non-causal, +11-12 % causal.  Since w23 (pack4_u8_sub, which
 * gained the solo kernel more than the two-consumer one) also at 16K:
 * H200, same call, +1.8 % (end to end +2.8 %), causal +0.6 % (+1.6 %);
 * at 32K +0.6 % but causal -1.4 %, where the 64-row CTAs' doubled K/V
 * reads from L2 catch up with them, so longer calls keep two consumers.
 * Those reads cost power, not bandwidth: under a sustained load the board
 * holds its 700 W cap by its clock, and the solo kernel, with twice the
 * two-consumer kernel's L2 traffic, runs there at ~1830 MHz against ~1965
 * (nvidia-smi during the calls; under ncu, one launch alone, the two take
 * the same time).  H200, thirty-third session, two rounds, the solo kernel
 * against two consumers, attention after 10 s idle (then over 120-400
 * calls): non-causal 8K +0.2 % (-1.5 %), 16K -2.2 % (-3.4 %), causal 8K
 * +5.3 % (+2.3 %), 16K -0.4 % (-0.6 %); at 4K sustained the two tie
 * (796 / 790 TOPS), but solo leads by 7 % from idle (bench/NOTES.md, the
 * power rows).  So non-causal calls past 8K and causal past 16K keep two
 * consumers. */
int sj_plan_solo(sj_plan *pl, const sj_target *t) {
  if (pl->ksub != 128 || !length_routed(pl, "solo=0"))
    return 0;
  make_solo(pl, t);
  return 1;
}

void sj_plan_for_length(sj_plan *pl, const sj_target *t, int64_t seq_q,
                        int64_t seq_kv) {
  if (seq_q <= SJ_SHORT_SEQ && seq_kv <= SJ_SHORT_SEQ && sj_plan_short(pl, t))
    return;
  const int64_t solo = pl->causal ? SJ_SOLO_SEQ_CAUSAL : SJ_SOLO_SEQ;
  if (seq_q <= solo && seq_kv <= solo)
    (void)sj_plan_solo(pl, t);
}
