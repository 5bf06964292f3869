// sj_attn_wgmma.cuh -- quantized attention for sm_90a: wgmma + TMA, warp
// specialized.
//
// One CTA computes BLK_Q = 128 query rows of one (batch, head) with three
// warpgroups:
//   warpgroup 0, the producer: one thread issues TMA copies of the Q tile and
//     of STAGES-deep K and V tiles (BN keys each), completing on mbarriers;
//     it gives most of its registers back (setmaxnreg.dec);
//   warpgroups 1 and 2, the consumers (setmaxnreg.inc): 64 query rows each.
//     S = Q8 K8^T with wgmma m64nBNk32.s8 (both operands in swizzled shared
//     memory), dequantized with one scalar per thread and key block, online
//     softmax in exp2, P packed to e4m3 in registers, then O += P V8 with
//     wgmma m64nDk32.e4m3 (A from registers, V^T tile in shared memory; 64
//     channels at a time at D = 256).  Q.K^T of tile j + 1 is issued before
//     the softmax of tile j and runs under it; the P.V k-steps of the first
//     half of the keys are issued as soon as they are packed (ptxas moves
//     most of the second half's exps above them, which measured faster
//     than the source order: bench/NOTES.md).  Every
//     consumer thread arrives on a stage's `empty` barrier once its P.V has
//     completed, which frees the stage for the producer.
// With NC = 0 ("solo": D = 64, and D = 128 calls up to the lengths that
// sj_plan_for_length in runtime/spec.c routes to it) the CTA is one
// warpgroup of 64 rows with no producer: its thread 0 issues the first
// tile's copies at entry and the other stages' once that tile's Q.K^T is
// issued, refilling a stage once every thread has arrived on its `empty`
// barrier (with two or more stages, right after the next tile's Q.K^T is
// issued, so that neither the wait nor the copy holds the warpgroup's
// next wgmma back), and the tiles run one at a time (no Q.K^T ahead), in
// at most 168 registers (128 at D = 64): three or more CTAs share a
// multiprocessor, and each one's prologue and epilogue hide under the
// others' loops.
// The S accumulator of a warp has the mma.m16n8 layout (lane (g, t) holds
// keys 8j + 2t, 8j + 2t + 1 of rows g and g + 8), and the e4m3 A fragment
// of wgmma k32 the mma.m16n8k32 layout, so the V permutation of sj_quant.cuh
// and the Q/K scale layouts of the mma families carry over with WARP_Q = 16.
//
// Accumulation is two-level (ACC_FP32_FP32): each tile's P.V gets a fresh
// wgmma accumulator, added to O in fp32 registers; the tensor core's e4m3
// accumulator keeps too few bits to carry O across a long sequence.  Row
// sums of P come from the tensor core too (P times a block of ones).  With
// split V (ACC_FP32_FP32_SPLITV) every P.V k-step runs again on the
// residual V tile, into the same accumulator.  With 16-bit P.V
// (ACC_PV16) P and V^T are in the input's type, wgmma k16 accumulates
// straight into O (rescaled before the issue), with no tile accumulator.
// With INT8 P.V (ACC_PVI8) P is u8, scaled so that its row max in the tile
// is 255, V^T is u8 (s8 per channel + 128), and the tile accumulator is an
// exact s32 one, folded into O without a conversion (fold_i8).  The
// default, ACC_PVI8_SPLITV, runs the INT8 body or the split V body per
// (batch, kv head), as the preprocessing chose from V's statistics.
#pragma once
#include "sj_abi.h"
#include "sj_common.cuh"
#include "sj_geom.cuh"
#include "sj_wgmma_ops.cuh"

namespace sj {


// Shared memory of attn_wgmma (byte offsets from a 1024-aligned base).
// Rows wider than 128 bytes are split into 128-byte column chunks, each
// chunk a [rows][128] block: the shape of a TMA box and of a wgmma
// K-major swizzled operand.
// SPLIT: each V stage holds the V tile and then its residual tile.  V16:
// the V^T tile is 16-bit, as BN / 64 chunks of [D][128 bytes].  BQ: query
// rows per CTA (64 per consumer warpgroup).
template <int D, int BN, int STAGES, bool SPLIT, int BQ, bool V16> struct WgSmem {
  static constexpr int CH = D < 128 ? D : 128; // bytes per row chunk (Q, K)
  static constexpr int NCH = D / CH;
  static constexpr int Q_BYTES = BQ * D;
  static constexpr int K_BYTES = BN * D;
  static constexpr int V_BYTES = D * BN * (V16 ? 2 : 1);
  static constexpr int VS_BYTES = (SPLIT ? 2 : 1) * V_BYTES; // one V stage
  static constexpr int Q_OFF = 0;
  static constexpr int K_OFF = Q_OFF + Q_BYTES;
  static constexpr int V_OFF = K_OFF + STAGES * K_BYTES;
  static constexpr int ONES_OFF = V_OFF + STAGES * VS_BYTES; // 8 rows of ones (P's type)
  // the epilogue's per-channel V scale and V mean (fp32), loaded with Q
  static constexpr int SC_OFF = ONES_OFF + 1024;
  // barriers: q_full, k_full[STAGES], v_full[STAGES], empty[STAGES]; the
  // total size (plus 896 to align the base) is wgmma_smem in runtime/spec.c
  static constexpr int BAR_OFF = SC_OFF + 2 * D * 4;
  // per_block Q scales of the consumer warps (fused Q), after the barriers
  static constexpr int RED_OFF = BAR_OFF + 8 * (1 + 3 * STAGES);
  static constexpr int O_PITCH = 2 * D + 16; // epilogue staging, over Q/K/V
  static_assert(BQ * O_PITCH <= SC_OFF, "O staging must fit over the tiles");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// ----------------------------------------------------------------- wgmma
// (mbarrier and TMA helpers: sj_common.cuh)
__device__ __forceinline__ void wg_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Ties accumulator registers to this point: the compiler may not move
// their reads above a wgmma wait.
template <int N> __device__ __forceinline__ void reg_fence(i32 (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; i++)
    asm volatile("" : "+r"(r[i])::"memory");
}
template <int N> __device__ __forceinline__ void reg_fence(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; i++)
    asm volatile("" : "+f"(r[i])::"memory");
}
// wgmma shared-memory descriptor of a K-major operand whose rows are
// ROW_BYTES (64 or 128) wide, swizzled to match.  `e` is the start address
// >> 4 (shared addresses are < 2^18, so it fits the 14-bit field); the low
// word adds the leading offset 1 (unused for swizzled K-major), the high
// word is constant: the stride between 8-row groups and the swizzle mode
// (1 = 128 B, 2 = 64 B).  Callers keep `e` and add k-step offsets to it, so
// a descriptor costs one integer add.
template <int ROW_BYTES> __device__ __forceinline__ u64 wg_desc(u32 e) {
  constexpr u32 HI = ((8u * ROW_BYTES) >> 4) | ((ROW_BYTES == 128 ? 1u : 2u) << 30);
  u64 d;
  asm("mov.b64 %0, {%1, %2};" : "=l"(d) : "r"(e + 0x10000u), "n"(HI));
  return d;
}
// 64-row consumer warpgroups of a CTA: NC, or one for the solo CTA (NC = 0)
__host__ __device__ constexpr int wg_groups(int nc) { return nc ? nc : 1; }
// the first consumer thread: after the producer warpgroup, if there is one
__host__ __device__ constexpr int wg_ct0(int nc) { return nc ? 128 : 0; }
template <int NC> __device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(wg_groups(NC) * 128) : "memory");
}

// Fused Q (SJ_F_Q_FUSED): a consumer warp quantizes its own 16 query rows
// (fq_* in sj_geom.cuh).  The scale groups are the quantizer's
// (docs/kernels.md): per_thread rows g and g + 8 of the warp, per_warp its
// 16 rows, per_block the CTA's rows.  The INT8 rows go into shared memory
// with the swizzle the TMA would have applied (16-byte unit u of row r at
// u ^ (r mod 8) for 128-byte rows, u ^ ((r / 2) mod 4) for 64-byte rows).
// Returns the lane's Q scale (and stores the LSE's q.mean_k, fq_qk).  The
// caller fences the stores for the async proxy and syncs the consumers.
template <int DT, int D, int BQ, int NC>
__device__ __forceinline__ float fuse_q(const sj_attn_args &a, const u32x4 (&raw)[2][D / 32],
                                        const Seq &sq, int b, int h, int q0, i64 bhk, int cw,
                                        int lane, u8 *s_q, float *s_red) {
  constexpr int CH = D < 128 ? D : 128; // bytes per row chunk
  constexpr int SWZ = CH == 128 ? 7 : 3;
  const int g = lane / 4, t = lane % 4;
  // rows g and g + 8 (the quad), or the warp's 16 rows
  const float lane_amax = fq_amax<DT, D, 2>(a, raw);
  const int qg = a.quant; // uniform: the per_block branch's barrier is safe
  float amax = group_max<4>(lane_amax);
  if (qg != PER_THREAD)
    amax = group_max<32>(amax);
  if (qg == PER_BLOCK) {
    if (lane == 0)
      s_red[cw] = amax;
    consumer_sync<NC>();
#pragma unroll
    for (int k = 0; k < wg_groups(NC) * 4; k++)
      amax = fmaxf(amax, s_red[k]);
  }
  const float scale = amax / 127.f;
  const float inv = scale > 0.f ? 1.0f / scale : 0.f;
#pragma unroll
  for (int hf = 0; hf < 2; hf++) {
    const int lrow = cw * 16 + g + 8 * hf;
#pragma unroll
    for (int i = 0; i < D / 32; i++) {
      const int col = (i * 4 + t) * 8;
      const int off = lrow * CH + col % CH;
      const int phys = off ^ (((off >> 7) & SWZ) << 4);
      *(uint2 *)(s_q + (col / CH) * (BQ * CH) + phys) = fq_pack<DT>(a, raw[hf][i], inv);
    }
  }
  fq_qk<DT, D, 2>(a, raw, sq, lse_row0(a.g, sq, b, h), q0 + cw * 16, bhk, lane);
  return scale;
}

template <int N>
__device__ __forceinline__ void wgmma_s8(i32 (&d)[N / 2], u64 da, u64 db, int sc);
template <> __device__ __forceinline__ void wgmma_s8<64>(i32 (&d)[32], u64 da, u64 db, int sc) {
  wgmma_s8_n64(d, da, db, sc);
}
template <> __device__ __forceinline__ void wgmma_s8<128>(i32 (&d)[64], u64 da, u64 db, int sc) {
  wgmma_s8_n128(d, da, db, sc);
}
template <int N>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[N / 2], const u32 (&a)[4], u64 db,
                                           int sc);
template <>
__device__ __forceinline__ void wgmma_e4m3<8>(float (&d)[4], const u32 (&a)[4], u64 db,
                                              int sc) {
  wgmma_e4m3_n8(d, a, db, sc);
}
template <>
__device__ __forceinline__ void wgmma_e4m3<64>(float (&d)[32], const u32 (&a)[4], u64 db,
                                               int sc) {
  wgmma_e4m3_n64(d, a, db, sc);
}
template <>
__device__ __forceinline__ void wgmma_e4m3<128>(float (&d)[64], const u32 (&a)[4], u64 db,
                                                int sc) {
  wgmma_e4m3_n128(d, a, db, sc);
}

// INT8 P.V (ACC_PVI8): P u8 from registers, V^T u8 from shared memory.
template <int N>
__device__ __forceinline__ void wgmma_u8(i32 (&d)[N / 2], const u32 (&a)[4], u64 db, int sc) {
  if constexpr (N == 8)
    wgmma_u8_n8(d, a, db, sc);
  else if constexpr (N == 64)
    wgmma_u8_n64(d, a, db, sc);
  else
    wgmma_u8_n128(d, a, db, sc);
}

// 16-bit P.V (ACC_PV16): P and V in the input dtype (fp16 or bf16), k16.
template <int DT, int N>
__device__ __forceinline__ void wgmma_h(float (&d)[N / 2], const u32 (&a)[4], u64 db,
                                        int sc) {
  if constexpr (DT == FP16) {
    if constexpr (N == 8)
      wgmma_f16_n8(d, a, db, sc);
    else if constexpr (N == 64)
      wgmma_f16_n64(d, a, db, sc);
    else
      wgmma_f16_n128(d, a, db, sc);
  } else {
    if constexpr (N == 8)
      wgmma_bf16_n8(d, a, db, sc);
    else if constexpr (N == 64)
      wgmma_bf16_n64(d, a, db, sc);
    else
      wgmma_bf16_n128(d, a, db, sc);
  }
}
// The 16-bit V^T tile is stored as 64-key column chunks, each [D rows][128
// bytes] (a TMA box, 128-byte swizzle): k16 step kc lies in chunk kc / 4 at
// byte 32 (kc % 4) of each row.
template <int D> __device__ __forceinline__ u32 v16_step(int kc) {
  return (kc / 4) * (D * 128 / 16) + (kc % 4) * 2;
}
template <int DT, int D, int DC, int KP, int K0, int K1>
__device__ __forceinline__ void pv_chunk16(float (&d)[DC / 2], const u32 (&pa)[KP][4],
                                           u32 ev, bool add) {
#pragma unroll
  for (int kc = K0; kc < K1; kc++)
    wgmma_h<DT, DC>(d, pa[kc], wg_desc<128>(ev + v16_step<D>(kc)), add || kc > 0);
}
template <int DT, int KP, int K0, int K1>
__device__ __forceinline__ void rowsum16(float (&d)[4], const u32 (&pa)[KP][4], u32 e_ones,
                                         bool add) {
#pragma unroll
  for (int kc = K0; kc < K1; kc++)
    wgmma_h<DT, 8>(d, pa[kc], wg_desc<128>(e_ones + (kc % 4) * 2), add || kc > 0);
}

// P.V with P in 8 bits from registers: the accumulator's type picks the
// instruction, e4m3 into fp32 or u8 (INT8 P.V) into an exact s32.
template <int N>
__device__ __forceinline__ void wgmma_p8(float (&d)[N / 2], const u32 (&a)[4], u64 db,
                                         int sc) {
  wgmma_e4m3<N>(d, a, db, sc);
}
template <int N>
__device__ __forceinline__ void wgmma_p8(i32 (&d)[N / 2], const u32 (&a)[4], u64 db, int sc) {
  wgmma_u8<N>(d, a, db, sc);
}
// P.V for DC channels starting at the V tile row `sv`, all KC k-steps (V
// columns past a sequence are zeros: see sj_quant.cuh).  `add`: accumulate
// into d, else start fresh.
template <int DC, int KC, int BN, int K0 = 0, int K1 = KC, class T>
__device__ __forceinline__ void pv_chunk(T (&d)[DC / 2], const u32 (&pa)[KC][4], u32 ev,
                                         bool add) {
#pragma unroll
  for (int kc = K0; kc < K1; kc++)
    wgmma_p8<DC>(d, pa[kc], wg_desc<BN>(ev + kc * 2), add || kc > 0);
}
// Row sums of P through the tensor core: P times an 8-row block of ones.
// Lane (g, t) gets sum(P[g]) in d[0], d[1] and sum(P[g + 8]) in d[2], d[3]:
// the sum of the 8-bit P that P.V uses, with no FADD chain in the softmax.
template <int KC, int BN, int K0 = 0, int K1 = KC, class T>
__device__ __forceinline__ void rowsum_p(T (&d)[4], const u32 (&pa)[KC][4], u32 e_ones,
                                         bool add) {
#pragma unroll
  for (int kc = K0; kc < K1; kc++)
    wgmma_p8<8>(d, pa[kc], wg_desc<BN>(e_ones + kc * 2), add || kc > 0);
}
// The epilogue's per-channel factors (V scale, V mean) of the channel
// pairs 8 c + 2 t, 8 c + 2 t + 1 that lane t holds, for c in [c0, c0 + N),
// read ahead of the staging stores that use them.  (Read from global memory
// inside the store loop, each load waited behind the previous store, which
// might alias it: an L2 round trip per 8 channels, 5 us of a 23 us CTA at
// N = 1K; bench/NOTES.md w12.)
template <int N>
__device__ __forceinline__ void load_chan2(float2 (&x)[N], const u8 *p, int c0, int t) {
#pragma unroll
  for (int i = 0; i < N; i++)
    x[i] = *((const float2 *)p + 4 * (c0 + i) + t);
}
// Two-level accumulation: O = O * o_scale(row) + tile result.
template <int N>
__device__ __forceinline__ void fold(float (&o)[N], const float (&acc)[N],
                                     const float (&o_scale)[2]) {
  if (__any_sync(0xffffffffu, o_scale[0] != 1.f || o_scale[1] != 1.f)) {
#pragma unroll
    for (int i = 0; i < N; i++)
      o[i] = fmaf(o[i], o_scale[(i >> 1) & 1], acc[i]);
  } else {
#pragma unroll
    for (int i = 0; i < N; i++)
      o[i] += acc[i];
  }
}

// INT8 P.V's fold, with no int -> float conversion.  V is stored as u8
// (s8 + 128), so every tile sum is >= 0, and < 128 * 255 * 255 < 2^23: its
// bits read as a float are the subnormal acc * 2^-149, exact.  One FFMA
// (IEEE, no flush to zero) scales it by beta = 2^(tile max - m + I8_EXP)
// and adds it to O, which is kept in units of 2^(I8_EXP - 149).  The row
// sums get the same treatment, so O / l is unaffected, and O / l - 128 is
// the s8 result: the offset costs nothing but a subtraction per output.
// (fma_ieee: sj_common.cuh)
template <int N>
__device__ __forceinline__ void fold_i8(float (&o)[N], const i32 (&acc)[N],
                                        const float (&alpha)[2], const float (&beta)[2],
                                        bool rescale) {
  if (rescale) {
#pragma unroll
    for (int i = 0; i < N; i++)
      o[i] = fma_ieee(__int_as_float(acc[i]), beta[(i >> 1) & 1], o[i] * alpha[(i >> 1) & 1]);
  } else {
#pragma unroll
    for (int i = 0; i < N; i++)
      o[i] = fma_ieee(__int_as_float(acc[i]), beta[(i >> 1) & 1], o[i]);
  }
}

#endif // __CUDA_ARCH_FEAT_SM90_ALL

// The kernel's body, inlined into attn_wgmma below.  PRE: the caller has
// loaded the fused Q rows into qraw and waited for the quantizer already
// (pvi8+splitv, which reads kv_finalize's choice before it picks a body).
template <int DT, int D, bool CAUSAL, int ACC, int STAGES, int BN, int NC, bool PRE>
__device__ __forceinline__ void attn_wgmma_body(const sj_wgmma_args &w,
                                                u32x4 (&qraw)[2][D / 32]) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // Split V (ACC_FP32_FP32_SPLITV): every P.V k-step runs twice, on the V
  // tile and on its residual, into the same accumulator.
  constexpr bool SPLIT = ACC == ACC_FP32_FP32_SPLITV;
  // 16-bit P.V (ACC_PV16): P and V^T in the input dtype, wgmma k16,
  // accumulating in fp32 straight into O (the tensor core's fp32 is exact
  // enough here, unlike its e4m3 path); no V scale.
  constexpr bool V16 = ACC == ACC_PV16;
  // INT8 P.V (ACC_PVI8): u8 P scaled per tile and row, u8 V (s8 + 128),
  // exact s32 tile accumulation (fold_i8).
  constexpr bool I8 = ACC == ACC_PVI8;
  constexpr int KP = V16 ? BN / 16 : BN / 32; // k-steps of P.V
  constexpr int GPK = V16 ? 2 : 4;            // n8 column groups per k-step
  // NC = 0 (solo): one warpgroup of 64 rows and no producer; its thread 0
  // issues the TMA copies, three CTAs share a multiprocessor.
  constexpr bool SOLO = NC == 0;
  constexpr int NCC = wg_groups(NC); // consumer warpgroups
  constexpr int CT0 = wg_ct0(NC);     // first consumer thread
  constexpr int BQ = 64 * NCC; // query rows per CTA
  static_assert(NC == 0 || NC == 1 || NC == 2, "consumer warpgroups");
  typedef WgSmem<D, BN, STAGES, SPLIT, BQ, V16> S;
  constexpr int CH = S::CH, NCH = S::NCH;
  constexpr int NS = BN / 8;        // n8 column groups of S
  // Channels per P.V wgmma: the whole head up to 128; at D = 256, 64 (O,
  // S and the tile accumulator must share 240 registers); solo 64-key
  // tiles at D = 128 take 64 too, so that the tile accumulator needs no
  // more registers than S (32) and the CTA fits 128: four per
  // multiprocessor (solo_ctas below).
  constexpr int DC = D < 128 ? D : (D == 256 || (SOLO && D == 128 && BN == 64) ? 64 : 128);
  constexpr int NDC = D / DC;
  constexpr int KB = BN / BLK_K;    // K scale blocks per tile
  // Only two-level accumulation: the tensor core's e4m3 accumulator keeps
  // too few bits to carry O across a long sequence (accumulating in it
  // directly measured relative L2 3.2e-1 at N = 16K; bench/NOTES.md).
  static_assert(ACC == ACC_FP32_FP32 || SPLIT || V16 || I8,
                "the wgmma family accumulates fp32+fp32 (or 16-bit or INT8 P.V)");
  constexpr float TAU = 4.0f;       // lazy rescale threshold (log2 units)
  // INT8 P.V: O and l are kept in units of 2^(I8_EXP - 149) (fold_i8);
  // beta <= 2^(TAU + I8_EXP) stays finite.
  constexpr float I8_EXP = 120.f;
  // log2 of P's largest value.  INT8 P is scaled by its row max in the
  // tile, not by the running max, so the lazy rescale costs it no bits.
  constexpr float P_OFFSET = I8 ? U8_P_OFFSET : FP8_P_OFFSET - TAU;
  // log2 of l's unit against the exps' (the LSE)
  constexpr float L_OFFSET = I8 ? P_OFFSET + I8_EXP - 149.f : P_OFFSET;
  constexpr int MAGIC_I = 0x4B400000;
  constexpr float MAGIC_F = 12582912.0f;
  // POLY: one n8 column group of S in every POLY takes its exps from
  // poly_exp2 on the FMA pipes instead of the MUFU (0: none).  In the
  // default's two bodies (pvi8 and split V, also when either is asked for
  // alone) at D = 64 without the mask, where a score's 256 tensor ops take
  // less time than its exp on the MUFU: one in eight, +2-4 % end to end
  // (H200, 1K-16K).  One in four or two costs more issue slots than it
  // frees (-1 to -20 %); at D = 128 and under the mask even one in eight
  // ties or loses (bench/NOTES.md, w27).
  constexpr int POLY = (I8 || SPLIT) && D == 64 && !CAUSAL ? 8 : 0;
  static_assert(BN == 64 || BN == 128, "BN");
  static_assert(D == 64 || D == 128 || D == 256, "head dim");

  const sj_attn_args &a = w.a;
  const sj_geom &G = a.g;
  // The 128-byte swizzled tiles need a 1024-byte aligned base; the
  // declared alignment makes the base 128-byte aligned, so 896 bytes of
  // the allocation (wgmma_smem in runtime/spec.c) cover the round-up.
  extern __shared__ __align__(128) u8 smem_raw[];
  u8 *smem = (u8 *)(((unsigned long long)smem_raw + 1023) & ~1023ull);
  const u32 s_base = smem_addr(smem);
  const u32 sQ = s_base + S::Q_OFF, sK0 = s_base + S::K_OFF, sV0 = s_base + S::V_OFF;
  const u32 bar0 = s_base + S::BAR_OFF;
  // barriers: q_full, k_full[STAGES], v_full[STAGES], empty[STAGES]
  const u32 q_full = bar0;
#define SJ_K_FULL(s) (bar0 + 8 * (1 + (s)))
#define SJ_V_FULL(s) (bar0 + 8 * (1 + STAGES + (s)))
  // A stage's V tiles complete on its K barrier, so that a consumer waits
  // once per tile (before the Q.K^T of the next): the wait loop inside
  // softmax_pv cost 2-5 % (fp32+fp32), 5-14 % (pvi8 at D = 128).  Split V
  // at D >= 128 keeps its own V barrier: its stage is 48 KB at D = 128,
  // and waiting for all of it a tile ahead measured 0.3-1.6 % slower.
  constexpr bool V_ON_K = !(SPLIT && D >= 128);
  const u32 v_bar0 = V_ON_K ? SJ_K_FULL(0) : SJ_V_FULL(0);
#define SJ_V_BAR(s) (v_bar0 + 8 * (s))
#define SJ_EMPTY(s) (bar0 + 8 * (1 + 2 * STAGES + (s)))

  // Causal CTAs see more keys the later their block: start those first.
  const CtaCoord cc = cta_coord(a, CAUSAL);
  const int qblk = cc.qblk, h = cc.h, b = cc.b;
  const int hk = h / (G.heads_q / G.heads_kv);
  const i64 bh = (i64)b * G.heads_q + h;
  const i64 bhk = (i64)b * G.heads_kv + hk;
  const int q0 = qblk * BQ;
  const Seq sq = seq_q(G, b), sk = seq_kv(G, b);
  if (q0 >= sq.len)
    return; // uniform over the CTA, before any barrier
  const int len_q = sq.len, len_kv = sk.len;
  const int causal_offset = (a.flags & SJ_F_CAUSAL_BR) ? len_kv - len_q : 0;
  int n_tiles = (len_kv + BN - 1) / BN;
  if (CAUSAL) {
    const int last = q0 + BQ - 1 + causal_offset; // last visible key
    n_tiles = min(n_tiles, last < 0 ? 0 : last / BN + 1);
  }

  // Fused Q: the consumer threads start loading their Q rows before the
  // prologue and the wait for the quantizer, so that the loads' latency
  // runs under both.  Q is the caller's input: complete before this call's
  // first kernel started, so before any of its kernels.
  if (!PRE && (a.flags & SJ_F_Q_FUSED) && (CT0 == 0 || threadIdx.x >= CT0))
    fq_load<D, 2>(a, sq, b, h, q0 + (int)(threadIdx.x - CT0) / 32 * 16, threadIdx.x % 32, qraw);

  if (threadIdx.x == 0) {
    // The tensor maps' first use below would fetch them from memory.
    tma_prefetch_map(&w.tq);
    tma_prefetch_map(&w.tk);
    tma_prefetch_map(&w.tv);
    mbar_init(q_full, 1);
#pragma unroll
    for (int s = 0; s < STAGES; s++) {
      mbar_init(SJ_K_FULL(s), 1);
      mbar_init(SJ_V_FULL(s), 1);
      mbar_init(SJ_EMPTY(s), NCC * 128); // every consumer thread arrives
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (!PRE)
    pdl_wait(); // everything the quantizer wrote

  // ------------------------------------------------------- producer
  // (the producer warpgroup's thread 0, or the solo CTA's; what they need
  // is computed after the producer's setmaxnreg.dec: live across it, it
  // spilled)
  struct TileRows {
    int k_row, v_row, v_col, v_lo_row;
  };
  auto tile_rows = [&]() {
    TileRows r;
    r.k_row = (int)k8_row0(G, sk, b, hk);
    // v8: channel row and first column of this (b, kv head).  Dense: the
    // head's D rows from column 0, without a 64-bit division (with one
    // stage, where thread 0 refills inside the loop, the extra branch cost
    // solo split V 20-76 bytes of spills: the division stays there).
    if (STAGES > 1 && !G.cu_kv) {
      r.v_row = (int)(bhk * D);
      r.v_col = 0;
    } else {
      const i64 vb = v8_base(G, sk, b, hk, D), vp = v8_pitch(G);
      r.v_row = (int)(vb / vp);
      r.v_col = (int)(vb % vp);
    }
    r.v_lo_row = r.v_row + (int)v8_rows(G, D); // the residual's rows
    return r;
  };
  auto load_head = [&]() {
    const int q_row = (int)(q8_row0(G, sq, b, h) + q0);
    // Q, and the V scale and mean of this kv head for the epilogue (read
    // from global memory there, they cost an L2 round trip per CTA)
    // (the consumers quantize Q themselves under SJ_F_Q_FUSED)
    constexpr u32 SC_BYTES = D * 4;
    const bool smooth_v = (a.flags & SJ_F_SMOOTH_V) != 0;
    const bool q_fused = (a.flags & SJ_F_Q_FUSED) != 0;
    mbar_expect_tx(q_full, (q_fused ? 0 : S::Q_BYTES) + (V16 ? 0 : SC_BYTES) +
                               (smooth_v ? SC_BYTES : 0));
    if (!q_fused) {
#pragma unroll
      for (int c = 0; c < NCH; c++)
        tma_load_2d(sQ + c * BQ * CH, &w.tq, c * CH, q_row, q_full);
    }
    if (!V16)
      bulk_load(s_base + S::SC_OFF, (const float *)a.v_scale + bhk * D, SC_BYTES, q_full);
    if (smooth_v)
      bulk_load(s_base + S::SC_OFF + SC_BYTES, (const float *)a.v_mean + bhk * D, SC_BYTES,
                q_full);
  };
  // K and V of tile j into its stage (free: the caller waited for it)
  auto load_tile = [&](const TileRows &r, int j) {
    const int st = j % STAGES;
    const int k_row = r.k_row, v_row = r.v_row, v_col = r.v_col, v_lo_row = r.v_lo_row;
    mbar_expect_tx(SJ_K_FULL(st), S::K_BYTES + (V_ON_K ? S::VS_BYTES : 0));
#pragma unroll
    for (int c = 0; c < NCH; c++)
      tma_load_2d(sK0 + st * S::K_BYTES + c * BN * CH, &w.tk, c * CH, k_row + j * BN,
                  SJ_K_FULL(st));
    if (!V_ON_K)
      mbar_expect_tx(SJ_V_FULL(st), S::VS_BYTES);
    if (V16) {
#pragma unroll
      for (int c = 0; c < BN / 64; c++) // byte columns of 16-bit V^T
        tma_load_2d(sV0 + st * S::VS_BYTES + c * D * 128, &w.tv,
                    (v_col + j * BN) * 2 + c * 128, v_row, SJ_V_BAR(st));
    } else {
      tma_load_2d(sV0 + st * S::VS_BYTES, &w.tv, v_col + j * BN, v_row, SJ_V_BAR(st));
    }
    if (SPLIT)
      tma_load_2d(sV0 + st * S::VS_BYTES + S::V_BYTES, &w.tv, v_col + j * BN, v_lo_row,
                  SJ_V_BAR(st));
  };
  // the solo CTA's rows, once (their 64-bit divisions in the loop, on the
  // refilling warp's path, cost 10-18 %)
  TileRows solo_rows{};
  if (SOLO) {
    solo_rows = tile_rows();
    // Only the first tile here: the others follow once its Q.K^T is
    // issued (below).  A wave's CTAs start together, three per
    // multiprocessor, and each one's whole set of stages in flight at
    // once held up the one tile the first Q.K^T needs (+0.3-1 % at
    // D = 128; bench/NOTES.md, p16).
    if (threadIdx.x == 0) {
      load_head();
      if (n_tiles > 0)
        load_tile(solo_rows, 0);
    }
  } else if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
    if (threadIdx.x == 0) {
      load_head();
      const TileRows r = tile_rows();
      for (int j = 0; j < n_tiles; j++) {
        if (j >= STAGES)
          mbar_wait(SJ_EMPTY(j % STAGES), ((j / STAGES) - 1) & 1);
        load_tile(r, j);
      }
    }
    return;
  }

  // --------------------------------------------------------- consumers
  if (NC == 1)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  else if (NC == 2)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
  const int cg = SOLO ? 0 : (int)(threadIdx.x / 128) - 1; // consumer warpgroup: 64 rows
  const int wl = (threadIdx.x / 32) % 4;    // warp within the warpgroup
  const int cw = cg * 4 + wl;               // consumer warp: 16 rows
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int row_base = q0 + cw * 16;        // first query row of the warp

  float q_scale;
  if (a.flags & SJ_F_Q_FUSED) {
    q_scale = fuse_q<DT, D, BQ, NC>(a, qraw, sq, b, h, q0, bhk, cw, lane, smem + S::Q_OFF,
                                        (float *)(smem + S::RED_OFF));
  } else {
    // the quantizer's groups: 128-row blocks of 8 warps of 16 rows
    const float *qs = (const float *)a.q_scale;
    const i64 base = bh * G.n_qblk + q0 / BLK_Q;
    const int qw = (q0 % BLK_Q) / 16 + cw;
    if (a.quant == PER_BLOCK)
      q_scale = qs[base];
    else if (a.quant == PER_WARP)
      q_scale = qs[base * 8 + qw];
    else
      q_scale = qs[(base * 8 + qw) * 8 + g];
  }
  const float q_mult = q_scale * a.sm_scale_log2;

  float o[NDC][DC / 2];
#pragma unroll
  for (int dc = 0; dc < NDC; dc++)
#pragma unroll
    for (int i = 0; i < DC / 2; i++)
      o[dc][i] = 0.f;
  float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.f, 0.f};

  // Q.K^T of tile j + 1 runs while the softmax of tile j does (registers:
  // O, S in flight, the float scores and P, about 210 of 240); the two
  // consumers also overlap each other.  (Forced turns through named
  // barriers, as FlashAttention-3 does, measured 3-8 % slower here:
  // bench/NOTES.md.)  Every wgmma is issued on a straight path (no
  // data-dependent branch around one), else ptxas serializes them.
  float o_scale[2] = {1.f, 1.f}; // rescale of the tile whose P is held
  u32 pa[KP][4];                 // P of the previous tile, e4m3 or 16-bit
  i32 s[BN / 2];
  float acc[(V16 || I8) ? 1 : DC / 2]; // P.V of one tile (V16: O itself)
  float lsum[4] = {0.f, 0.f, 0.f, 0.f}; // its row sums (rowsum_p)
  // INT8 P.V: the s32 tile accumulator and row sums (fold_i8), and the
  // tile's row factors
  i32 acci[I8 ? DC / 2 : 1], lsumi[4];
  // INT8 P.V in solo CTAs with 128-key tiles (DP4A_SUM): the row sums are
  // the lane's own keys' u8 P summed by dp4a on the packed P while the
  // P.V runs (at most 32 * 255 per tile: an exact subnormal for fold_i8),
  // quad-summed in the epilogue, instead of four m64n8k32 wgmmas on the
  // P.V chain.  +1.0-1.7 % there; the two-consumer kernels and the 64-key
  // short route lost 0.8-1.6 % with it (H100; bench/NOTES.md, w28).
  constexpr bool DP4A_SUM = I8 && SOLO && BN == 128;
  u32 lsp[2] = {0u, 0u};
  float beta[2] = {0.f, 0.f};
  // Encoded (>> 4) shared addresses for the wgmma descriptors.
  const u32 e_ones = (s_base + S::ONES_OFF) >> 4;
  const u32 eQ = (sQ >> 4) + cg * (64 * CH / 16), eK0 = sK0 >> 4, eV0 = sV0 >> 4;

  auto issue_qk = [&](int stage) {
    const u32 eK = eK0 + stage * (S::K_BYTES / 16);
#pragma unroll
    for (int kk = 0; kk < D / 32; kk++) {
      const int c = kk * 32 / CH, in = kk * 32 % CH;
      const u64 da = wg_desc<CH>(eQ + (c * BQ * CH + in) / 16);
      const u64 db = wg_desc<CH>(eK + (c * BN * CH + in) / 16);
      wgmma_s8<BN>(s, da, db, kk > 0);
    }
  };
  // P.V of the held P: the first channel chunk (two-level) or all of them
  // (O in the tensor core); not committed.
  // P.V k-steps of the first (lo) or second (hi) half of the keys, first
  // channel chunk, and their row sums.  (NVRTC has no generic lambdas: two
  // lambdas rather than one over a compile-time range.)
  // Split V: the same k-steps again on the residual tile.
  constexpr u32 E_VLO = S::V_BYTES / 16;
  auto issue_pv_lo = [&](int stage) {
    const u32 ev = eV0 + stage * (S::VS_BYTES / 16);
    if constexpr (V16) {
      // every channel chunk at once: each accumulates into its own O
#pragma unroll
      for (int dc = 0; dc < NDC; dc++)
        pv_chunk16<DT, D, DC, KP, 0, KP / 2>(o[dc], pa, ev + dc * (DC * 128 / 16), true);
      rowsum16<DT, KP, 0, KP / 2>(lsum, pa, e_ones, false);
    } else if constexpr (I8) {
      pv_chunk<DC, KP, BN, 0, KP / 2>(acci, pa, ev, false);
      if constexpr (!DP4A_SUM)
        rowsum_p<KP, BN, 0, KP / 2>(lsumi, pa, e_ones, false);
    } else {
      pv_chunk<DC, KP, BN, 0, KP / 2>(acc, pa, ev, false);
      if (SPLIT)
        pv_chunk<DC, KP, BN, 0, KP / 2>(acc, pa, ev + E_VLO, true);
      rowsum_p<KP, BN, 0, KP / 2>(lsum, pa, e_ones, false);
    }
  };
  auto issue_pv_hi = [&](int stage) {
    const u32 ev = eV0 + stage * (S::VS_BYTES / 16);
    if constexpr (V16) {
#pragma unroll
      for (int dc = 0; dc < NDC; dc++)
        pv_chunk16<DT, D, DC, KP, KP / 2, KP>(o[dc], pa, ev + dc * (DC * 128 / 16), true);
      rowsum16<DT, KP, KP / 2, KP>(lsum, pa, e_ones, false);
    } else if constexpr (I8) {
      pv_chunk<DC, KP, BN, KP / 2, KP>(acci, pa, ev, false);
      if constexpr (!DP4A_SUM)
        rowsum_p<KP, BN, KP / 2, KP>(lsumi, pa, e_ones, false);
    } else {
      pv_chunk<DC, KP, BN, KP / 2, KP>(acc, pa, ev, false);
      if (SPLIT)
        pv_chunk<DC, KP, BN, KP / 2, KP>(acc, pa, ev + E_VLO, true);
      rowsum_p<KP, BN, KP / 2, KP>(lsum, pa, e_ones, false);
    }
  };
  // After the wait: fold the P.V result into O (and run the remaining
  // channel chunks of a wide head), then free the stage.
  auto finish_pv = [&](int stage) {
    if constexpr (I8) {
      // (DP4A_SUM: the lane's share of the row sums, quad-summed in the
      // epilogue)
      if constexpr (!DP4A_SUM)
        reg_fence(lsumi);
#pragma unroll
      for (int hf = 0; hf < 2; hf++) {
        const float ls = DP4A_SUM ? __uint_as_float(lsp[hf]) : __int_as_float(lsumi[2 * hf]);
        l[hf] = fma_ieee(ls, beta[hf], l[hf] * o_scale[hf]);
      }
      const bool rescale = __any_sync(0xffffffffu, o_scale[0] != 1.f || o_scale[1] != 1.f);
      reg_fence(acci);
      fold_i8(o[0], acci, o_scale, beta, rescale);
#pragma unroll
      for (int dc = 1; dc < NDC; dc++) {
        wg_fence();
        pv_chunk<DC, KP, BN>(acci, pa, eV0 + (stage * S::VS_BYTES + dc * DC * BN) / 16, false);
        wg_commit();
        wg_wait<0>();
        reg_fence(acci);
        fold_i8(o[dc], acci, o_scale, beta, rescale);
      }
    } else {
      reg_fence(lsum);
      l[0] = fmaf(l[0], o_scale[0], lsum[0]);
      l[1] = fmaf(l[1], o_scale[1], lsum[2]);
      if constexpr (V16) {
#pragma unroll
        for (int dc = 0; dc < NDC; dc++)
          reg_fence(o[dc]); // written by the wgmmas just waited for
      } else {
        reg_fence(acc);
        fold(o[0], acc, o_scale);
#pragma unroll
        for (int dc = 1; dc < NDC; dc++) {
          wg_fence();
          const u32 ev = eV0 + (stage * S::VS_BYTES + dc * DC * BN) / 16;
          pv_chunk<DC, KP, BN>(acc, pa, ev, false);
          if (SPLIT)
            pv_chunk<DC, KP, BN>(acc, pa, ev + E_VLO, true);
          wg_commit();
          wg_wait<0>();
          reg_fence(acc);
          fold(o[dc], acc, o_scale);
        }
      }
    }
    mbar_arrive(SJ_EMPTY(stage)); // this thread is done with the stage
  };
  // Dequantize, mask, online softmax (rows g and g + 8), P -> e4m3.
  // K scales are loaded one tile ahead: a global load right after the
  // GEMM wait would stall the softmax for its whole latency.
  // (The head's first scale and its last block are CTA-uniform, formed
  // once: a 64-bit row product and a reload of n_kblk every tile cost
  // 0.1-4 %; bench/NOTES.md, w26.)
  float ksc[KB];
  // (four per 64-key block whatever the granularity: quant_qkv repeats
  // a coarser one's, so this loop is the same code for all three)
  const float *ks_head = (const float *)a.k_scale + bhk * G.n_kblk * 4;
  const int ks_last = G.n_kblk - 1;
  auto load_kscale = [&](int j) {
#pragma unroll
    for (int kb = 0; kb < KB; kb++) {
      // A block past the key range has no scale; its keys are masked.
      const int blk = min(j * KB + kb, ks_last);
      ksc[kb] = ks_head[blk * 4 + t];
    }
  };
  // S (int32) -> sf (float, masked); frees s for the next Q.K^T.  Called
  // with a literal `mask` at two sites, so each inlined copy is specialized
  // and the common path carries no per-score compare and select.
  float sf[BN / 2], mult[KB];
  auto convert = [&](int j, bool mask) {
#pragma unroll
    for (int kb = 0; kb < KB; kb++)
      mult[kb] = fmaxf(q_mult * ksc[kb], 1e-30f); // never 0 or NaN
    load_kscale(j + 1);
    const int key0 = j * BN;
#pragma unroll
    for (int i = 0; i < BN / 2; i++) {
      // 2^23 + 2^22 + s as a float: exact, and ordered like s.  The
      // subtraction of that offset is folded into the softmax's FFMA.
      float v = __int_as_float(s[i] + MAGIC_I);
      if (mask) {
        const int key = key0 + (i / 4) * 8 + 2 * t + (i & 1);
        const int row = row_base + g + 8 * ((i >> 1) & 1);
        if (key >= len_kv || (CAUSAL && key > row + causal_offset))
          v = neg_inf();
      }
      sf[i] = v;
    }
  };
  auto convert_tile = [&](int j) {
    const int key0 = j * BN;
    if (key0 + BN > len_kv || (CAUSAL && key0 + BN - 1 > row_base + causal_offset))
      convert(j, true);
    else
      convert(j, false);
  };
  // Softmax of tile j, then its P.V: the exps and packing of the first
  // half of the keys, their P.V k-steps issued, then the second half.
  // (ptxas hoists most of the second half's exps above the first issue;
  // forcing this order measured 2-33 % slower: bench/NOTES.md.)
  auto softmax_pv = [&](int stage, int par) {
    float c[2][KB];
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
      float mx = neg_inf();
#pragma unroll
      for (int kb = 0; kb < KB; kb++) {
        constexpr int NB = NS / KB; // column groups per K scale block
        int v[2 * NB]; // the offset scores' bits (tree_imax)
#pragma unroll
        for (int n = 0; n < NB; n++) {
          v[2 * n] = __float_as_int(sf[4 * (kb * NB + n) + 2 * hf]);
          v[2 * n + 1] = __float_as_int(sf[4 * (kb * NB + n) + 2 * hf + 1]);
        }
        // (INT8 P: rounded up, so that mx bounds every score of the tile)
        const float xm = __int_as_float(tree_imax<2 * NB>(v)) - MAGIC_F;
        mx = fmaxf(mx, I8 ? __fmul_ru(xm, mult[kb]) : xm * mult[kb]);
      }
      mx = quad_max(mx);
      const float m_old = m[hf];
      const bool upd = mx > m_old + TAU;
      const float m_new = upd ? mx : m_old;
      const float m_ref = m_new == neg_inf() ? 0.f : m_new;
      o_scale[hf] = upd ? fast_exp2(m_old - m_ref) : 1.f;
      m[hf] = m_new;
      // INT8 P: 255 at the row's max in this tile; the tile's P.V and row
      // sum carry the factor beta to the running max (<= 2^TAU).  (A fully
      // masked row: mx = -inf, P = 0, beta = 0.)
      if constexpr (I8)
        beta[hf] = fast_exp2(mx - m_ref + I8_EXP);
      const float m_p = !I8 ? m_ref : (mx == neg_inf() ? 0.f : mx);
      // p = 2^((x - MAGIC_F) mult - m_ref + P_OFFSET) = 2^(x mult - c): one
      // FFMA.  x mult rounds at 2^-24 of MAGIC_F mult, about 1e-5 in log2
      // units for real scales: far below the INT8 score error.  INT8 P
      // rounds mx, sub and c up (u8_bound), so its max never passes 255,
      // and returns it times 2^-24 (U8_P_EXP), as pack4_u8_sub takes it.
      const float sub = I8 ? __fsub_ru(m_p, U8_P_EXP) : m_p - P_OFFSET;
#pragma unroll
      for (int kb = 0; kb < KB; kb++)
        c[hf][kb] = I8 ? __fmaf_ru(MAGIC_F, mult[kb], sub) : fmaf(MAGIC_F, mult[kb], sub);
    }
    // 16-bit P.V accumulates into O itself: rescale O first (its last
    // P.V was waited for at the end of the previous step).
    if constexpr (V16) {
      if (__any_sync(0xffffffffu, o_scale[0] != 1.f || o_scale[1] != 1.f)) {
#pragma unroll
        for (int dc = 0; dc < NDC; dc++)
#pragma unroll
          for (int i = 0; i < DC / 2; i++)
            o[dc][i] *= o_scale[(i >> 1) & 1];
      }
    }
    // exps + packing of k-steps [K0, K1) (column groups GPK K0 .. GPK K1 - 1)
    // (called with literal bounds: inlined, the loops unroll fully)
    auto exp_pack = [&](const int K0, const int K1) {
#pragma unroll
      for (int n = GPK * K0; n < GPK * K1; n++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const float x =
                fmaf(sf[4 * n + 2 * hf + e], mult[n / (NS / KB)], -c[hf][n / (NS / KB)]);
            sf[4 * n + 2 * hf + e] = POLY && n % POLY == POLY - 1 ? poly_exp2(x) : fast_exp2(x);
          }
#pragma unroll
      for (int kc = K0; kc < K1; kc++) {
        if constexpr (V16) {
          // k16 A fragment: keys 2t, 2t+1 (group 2kc) and 8+2t, 9+2t
          // (group 2kc+1) of rows g and g+8
          const float *s0 = sf + 8 * kc, *s1 = s0 + 4;
          pa[kc][0] = pack2<DT>(s0[0], s0[1]);
          pa[kc][1] = pack2<DT>(s0[2], s0[3]);
          pa[kc][2] = pack2<DT>(s1[0], s1[1]);
          pa[kc][3] = pack2<DT>(s1[2], s1[3]);
        } else if constexpr (I8) {
          const float *s0 = sf + 16 * kc, *s1 = s0 + 4, *s2 = s0 + 8, *s3 = s0 + 12;
          pa[kc][0] = pack4_u8_sub(s0[0], s0[1], s1[0], s1[1]);
          pa[kc][1] = pack4_u8_sub(s0[2], s0[3], s1[2], s1[3]);
          pa[kc][2] = pack4_u8_sub(s2[0], s2[1], s3[0], s3[1]);
          pa[kc][3] = pack4_u8_sub(s2[2], s2[3], s3[2], s3[3]);
        } else {
          const float *s0 = sf + 16 * kc, *s1 = s0 + 4, *s2 = s0 + 8, *s3 = s0 + 12;
          pa[kc][0] = pack4_e4m3(s0[0], s0[1], s1[0], s1[1]);
          pa[kc][1] = pack4_e4m3(s0[2], s0[3], s1[2], s1[3]);
          pa[kc][2] = pack4_e4m3(s2[0], s2[1], s3[0], s3[1]);
          pa[kc][3] = pack4_e4m3(s2[2], s2[3], s3[2], s3[3]);
        }
      }
    };
    if constexpr (SOLO) {
      // all of P first: the tile accumulator is not live next to the
      // scores (the solo CTA's register budget)
      exp_pack(0, KP / 2);
      exp_pack(KP / 2, KP);
      if (!V_ON_K)
        mbar_wait(SJ_V_FULL(stage), par);
      wg_fence();
      issue_pv_lo(stage);
      issue_pv_hi(stage);
      wg_commit();
    } else {
      exp_pack(0, KP / 2);
      if (!V_ON_K) // (else V came with K, waited for before this tile's Q.K^T)
        mbar_wait(SJ_V_FULL(stage), par);
      wg_fence();
      issue_pv_lo(stage);
      exp_pack(KP / 2, KP);
      wg_fence();
      issue_pv_hi(stage);
      wg_commit();
    }
    if constexpr (DP4A_SUM) {
      // words 0 and 2 of a k-step's P hold row g, words 1 and 3 row g + 8
      u32 r0 = 0u, r1 = 0u;
#pragma unroll
      for (int kc = 0; kc < KP; kc++) {
        r0 = dp4a_u8_sum(pa[kc][0], r0);
        r0 = dp4a_u8_sum(pa[kc][2], r0);
        r1 = dp4a_u8_sum(pa[kc][1], r1);
        r1 = dp4a_u8_sum(pa[kc][3], r1);
      }
      lsp[0] = r0;
      lsp[1] = r1;
    }
  };

  // The ones block of rowsum_p, written once (generic-proxy stores that the
  // tensor core reads, like the fused Q's: fence, then a barrier among the
  // consumers).
  // ones: e4m3 0x38, u8 1, fp16 0x3C00, bf16 0x3F80
  constexpr u32 ONES = I8 ? 0x01010101u
                          : (!V16 ? 0x38383838u : (DT == FP16 ? 0x3C003C00u : 0x3F803F80u));
  for (int i = threadIdx.x - CT0; i < 256; i += NCC * 128)
    reinterpret_cast<u32 *>(smem + S::ONES_OFF)[i] = ONES;
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  consumer_sync<NC>();
  load_kscale(0);
  mbar_wait(q_full, 0);
  // Q.K^T of the tile in `stage`, issued once its K has landed; qk_done
  // waits for it (and for any wgmma issued before it)
  auto qk_start = [&](int stage, int parity) {
    mbar_wait(SJ_K_FULL(stage), parity);
    wg_fence();
    issue_qk(stage);
    wg_commit();
  };
  auto qk_done = [&]() {
    wg_wait<0>();
    reg_fence(s);
  };
  if (n_tiles > 0) {
    qk_start(0, 0);
    if (SOLO && threadIdx.x == 0) // the solo CTA's other stages (above)
      for (int j = 1; j < min(n_tiles, STAGES); j++)
        load_tile(solo_rows, j);
    qk_done();
    if constexpr (SOLO) {
      // One tile at a time (the registers of three CTAs per
      // multiprocessor); thread 0 refills the stage once every thread is
      // done with it (STAGES - 1 tiles in flight meanwhile).  With two or
      // more stages it does so after the next tile's Q.K^T is issued:
      // refilling first, its warp waited for the other three's folds and
      // then issued the copies while they waited for it at that wgmma
      // (+5-8 % at D = 128, +2-4 % at D = 64; bench/NOTES.md, w22).
      for (int j = 0; j < n_tiles - 1; j++) {
        const int st = j % STAGES, par = (j / STAGES) & 1;
        const int st1 = (j + 1) % STAGES, par1 = ((j + 1) / STAGES) & 1;
        convert_tile(j);
        softmax_pv(st, par);
        wg_wait<0>();
        finish_pv(st);
        auto refill = [&]() {
          if (threadIdx.x == 0 && j + STAGES < n_tiles) {
            mbar_wait(SJ_EMPTY(st), par);
            load_tile(solo_rows, j + STAGES);
          }
        };
        if constexpr (STAGES == 1)
          refill(); // the next tile goes into this stage
        qk_start(st1, par1);
        if constexpr (STAGES > 1)
          refill();
        qk_done();
      }
    } else {
    // Step j: S(j) -> sf; Q.K^T of tile j + 1 runs during the softmax of
      // tile j; then P.V of tile j, and both are waited for.  (Overlapping
      // P.V(j) with the conversion of S(j + 1) as well needs the tile
      // accumulator live next to S and the scores: it spilled.)
      for (int j = 0; j < n_tiles - 1; j++) {
        convert_tile(j);
        qk_start((j + 1) % STAGES, ((j + 1) / STAGES) & 1);
        const int st = j % STAGES, par = (j / STAGES) & 1;
        softmax_pv(st, par);
        qk_done(); // (and this tile's P.V)
        finish_pv(st);
      }
    }
    // the last tile: no Q.K^T to overlap
    const int j = n_tiles - 1, st = j % STAGES, par = (j / STAGES) & 1;
    convert_tile(j);
    softmax_pv(st, par);
    wg_wait<0>();
    finish_pv(st);
  }

  // ---- epilogue: normalize, undo V scaling, stage, store whole rows
  consumer_sync<NC>(); // every consumer is done with every tile
  const bool smooth_v = (a.flags & SJ_F_SMOOTH_V) != 0;
  const i64 lse0 = lse_row0(G, sq, b, h);
  float inv[2]; // l: the whole row's sum in every lane of the quad
#pragma unroll
  for (int hf = 0; hf < 2; hf++) {
    if constexpr (DP4A_SUM)
      l[hf] = quad_sum(l[hf]); // (each lane summed its own keys)
    inv[hf] = l[hf] > 0.f ? 1.0f / l[hf] : 0.f;
  }
  // Channel groups of 8 (ch = 8 c8 + 2 t), CB at a time: their V scales and
  // means (in shared memory since the Q load) read first (16-bit V is not
  // scaled).
  constexpr int CB = D / 8 < 8 ? D / 8 : 8;
#pragma unroll
  for (int c0 = 0; c0 < D / 8; c0 += CB) {
    float2 sc[CB], mn[CB];
    if (!V16)
      load_chan2(sc, smem + S::SC_OFF, c0, t);
    if (smooth_v)
      load_chan2(mn, smem + S::SC_OFF + D * 4, c0, t);
#pragma unroll
    for (int i = 0; i < CB; i++) {
      const int c8 = c0 + i, dc = c8 / (DC / 8), n = c8 % (DC / 8);
#pragma unroll
      for (int hf = 0; hf < 2; hf++) {
        // (INT8 P.V: V was stored + 128, fold_i8; a row with no key
        // stays 0)
        const float off = I8 && l[hf] > 0.f ? -128.f : 0.f;
        float v0 = fmaf(o[dc][4 * n + 2 * hf], inv[hf], off);
        float v1 = fmaf(o[dc][4 * n + 2 * hf + 1], inv[hf], off);
        if (!V16) {
          v0 *= sc[i].x;
          v1 *= sc[i].y;
        }
        if (smooth_v && l[hf] > 0.f) {
          v0 += mn[i].x;
          v1 += mn[i].y;
        }
        const int lrow = cw * 16 + g + 8 * hf;
        *(u32 *)(smem + lrow * S::O_PITCH + c8 * 16 + t * 4) = pack2<DT>(v0, v1);
      }
    }
  }
  if ((a.flags & SJ_F_LSE) && t == 0) {
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
      const int row = q0 + cw * 16 + g + 8 * hf;
      if (row < len_q)
        store_lse(a, lse0, row, m[hf], l[hf], L_OFFSET);
    }
  }
  consumer_sync<NC>();
  store_o_rows<D, BQ>(a, sq, b, h, q0, smem, S::O_PITCH, threadIdx.x - CT0, NCC * 128);
#undef SJ_K_FULL
#undef SJ_V_FULL
#undef SJ_V_BAR
#undef SJ_EMPTY
#endif // __CUDA_ARCH_FEAT_SM90_ALL
}

// The split V body of a solo pvi8+splitv kernel at D = 128 keeps one
// stage fewer than the pvi8 body, so that three CTAs (128-key tiles) or
// four (64-key tiles) fit a multiprocessor (the pvi8 body's two stages,
// 76760 or 43992 bytes, are the larger; runtime/spec.c sizes the launch
// the same way).
__host__ __device__ constexpr int solo_split_stages(int d, int bn, int stages, int nc) {
  return nc == 0 && d == 128 && stages > 1 ? stages - 1 : stages;
}

// Solo CTAs per multiprocessor that the launch bounds ask for: four at
// D = 128 with 64-key tiles (the short causal route, sj_plan_short; P.V
// in 64-channel chunks, 128 registers), else three.  Four against three
// of the same tiles: causal 1K attention +8 % (H200; bench/NOTES.md,
// w25); 128-key tiles at D = 128 need 168 registers.
__host__ __device__ constexpr int solo_ctas(int d, int bn) {
  return d == 128 && bn == 64 ? 4 : 3;
}

// BN: keys per KV tile (64 or 128).  STAGES: K/V buffers in flight.  NC:
// consumer warpgroups, 64 query rows each; with NC = 1 two CTAs share a
// multiprocessor (the producer's registers go to the consumer: 24 + 232 =
// 2 x 128; 128 (NC + 1) threads: the producer warpgroup and NC consumers),
// so one CTA's prologue and epilogue run under the other's loop.  NC = 0:
// one warpgroup and no producer (128 threads), at least solo_ctas CTAs per
// multiprocessor (three: at most 168 registers, and at D = 64 ptxas uses
// 128; four: 128).
//
// ACC_PVI8_SPLITV holds both the pvi8 and the split V body; each CTA runs
// the one kv_finalize chose for its (batch, kv head) (a uniform branch
// outside the loop: the shared memory is sized for the larger body, split
// V's but in solo_split_stages' case, and either body uses the same
// registers per thread).
// The Q/K scale granularity is the argument a.quant (SJ_QUANT_*), not a
// template parameter (see attn_mma).
template <int DT, int D, bool CAUSAL, int ACC, int STAGES, int BN, int NC>
__global__ void __launch_bounds__(NC ? 128 * (NC + 1) : 128,
                                  NC == 1 ? 2 : (NC == 0 ? solo_ctas(D, BN) : 1))
    attn_wgmma(const __grid_constant__ sj_wgmma_args w) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  u32x4 qraw[2][D / 32];
  if constexpr (ACC == ACC_PVI8_SPLITV) {
    const sj_attn_args &a = w.a;
    const sj_geom &G = a.g;
    constexpr int BQ = 64 * wg_groups(NC), CT0 = wg_ct0(NC);
    const CtaCoord cc = cta_coord(a, CAUSAL);
    const int qblk = cc.qblk, h = cc.h, b = cc.b;
    const int q0 = qblk * BQ;
    const Seq sq = seq_q(G, b);
    if (q0 >= sq.len)
      return; // uniform over the CTA, before any barrier
    if ((a.flags & SJ_F_Q_FUSED) && (CT0 == 0 || threadIdx.x >= CT0))
      fq_load<D, 2>(a, sq, b, h, q0 + (int)(threadIdx.x - CT0) / 32 * 16, threadIdx.x % 32,
                    qraw);
    pdl_wait(); // kv_finalize's choice, and everything the quantizer wrote
    const int hk = h / (G.heads_q / G.heads_kv);
    if (((const u8 *)a.v_mode)[(i64)b * G.heads_kv + hk])
      attn_wgmma_body<DT, D, CAUSAL, ACC_PVI8, STAGES, BN, NC, true>(w, qraw);
    else
      attn_wgmma_body<DT, D, CAUSAL, ACC_FP32_FP32_SPLITV, solo_split_stages(D, BN, STAGES, NC),
                      BN, NC, true>(w, qraw);
  } else {
    attn_wgmma_body<DT, D, CAUSAL, ACC, STAGES, BN, NC, false>(w, qraw);
  }
#endif
}

} // namespace sj
