// sj_attn_mma.cuh -- quantized attention on mma.sync tensor cores.
//
// S = Q8 K8^T with mma.m16n8k32.s8 (int32 accumulate), dequantized with one
// scalar per thread (the Q and K scale layouts follow the accumulator
// fragment), online softmax in exp2, then P.V:
//   FP16PV: P in fp16 (bf16 for bf16 input in fp32 mode), V read straight
//           from the caller's tensor, mma.m16n8k16;
//   FP8PV:  P in e4m3 offset so its max is 448, V pre-transposed to e4m3
//           with a per-channel scale, mma.m16n8k32.e4m3; or (ACC_PVI8) P
//           in u8, 255 at its row max in the step, V as u8 (s8 per channel
//           + 128), mma.m16n8k32.u8 into an exact s32 tile accumulator that
//           is folded into O without a conversion (fma_ieee, as the wgmma
//           family's fold_i8); ACC_PVI8_SPLITV holds that body and split
//           V's (ACC_FP32_FP32_SPLITV), each CTA running the one the
//           preprocessing chose for its (batch, kv head).
// One CTA computes BLK_Q = 128 query rows of one (batch, head); each warp
// owns WARP_Q rows (WARP_Q / 16 m-tiles) and walks the KV sequence in tiles
// of BLK_K = 64 keys, STAGES deep through cp.async.
#pragma once
#include "sj_abi.h"
#include "sj_common.cuh"
#include "sj_geom.cuh"

namespace sj {

// SPLIT (ACC_FP32_FP32_SPLITV): a V stage holds the D channel rows of the
// tile and then the D rows of its residual.
template <int FAM, int D, bool SPLIT = false> struct AttnSmem {
  static constexpr int Q_PITCH = D + 16;
  static constexpr int K_PITCH = D + 16;
  static constexpr int V_PITCH = FAM == FP8PV ? BLK_K + 16 : 2 * D + 16;
  static constexpr int Q_BYTES = BLK_Q * Q_PITCH;
  static constexpr int K_BYTES = BLK_K * K_PITCH;
  static constexpr int V_BYTES = FAM == FP8PV ? (SPLIT ? 2 : 1) * D * V_PITCH : BLK_K * V_PITCH;
};

// Where a CTA's K/V tiles come from (see sj_geom.cuh).
struct KvSrc {
  const u8 *k;  // k8 rows of this (b, kv head), tile 0
  const u8 *v;  // v8 channel rows (FP8) or the caller's V rows (FP16)
  i64 v_pitch;  // bytes between v rows (channels for FP8, tokens for FP16)
  i64 v_lo;     // split V: the residual's offset from v
  int len_kv;   // keys of this sequence
  const u8 *ks_base; // KS_SMEM: k_scale
  u32 ks;            // KS_SMEM: tile 0's four K scales, bytes from ks_base
};

// KV tiles -> shared memory with cp.async, in order (0, 1, 2, ...).  The
// loader keeps the next tile's pointers and walks each thread's chunks with
// one 64-bit add per pass: the per-chunk row products (a 64-bit multiply per
// row and tile) cost ~25 registers live across the loop and ~190
// instructions per tile.
// Where a tile's K scales come from shared memory (attn_mma's KS_SMEM):
// the shapes where it won, attention at 4K / 16K (D = 128 also 1K), on
// an H100 at D = 64 and 128 and an H200 at D = 32, 96, 256 (FP8PV's
// fp32, fp32+fp16, fp32+fp32; bench/NOTES.md m13), then on an H100 at
// every D (the rest; m14).
// FP8PV
//   fp32       D = 128 +8-10 % (causal +3-5 %), D = 64 +0-3 %, causal
//              D = 32 +4 %, causal D = 256 +2.5 %; not D = 96 (-1 to
//              -5 %) nor non-causal D = 32 / 256 (-1 to +2 %)
//   fp32+fp16  causal everywhere (+20 % at D = 32, +1.5-4 % elsewhere),
//              non-causal D = 96 +1 %, D = 256 +6 %; not non-causal D = 32,
//              64, 128 (-1.5 to 0 %)
//   fp32+fp32  D = 32 +9-14 %, D = 64 +0-4 %; not D = 128 (non-causal
//              -2 to -5 %) nor D = 96 / 256 (-1 to +1 %)
//   pvi8       D = 64 +3-5 % (also the pvi8 body of pvi8+splitv there);
//              not D = 128 (+1 % non-causal, -1 % causal)
//   split V (alone or in pvi8+splitv) never: pvi8+splitv D = 128 with
//              both bodies on measured 0 to +2 % non-causal, -3 % causal
//              at 1K
// FP16PV
//   fp32       causal D = 64 +2-4 %, non-causal D = 96 +2-4 %; not
//              non-causal D = 32 / 64 (-2.5 to -5.5 %), D = 128 (-1 %),
//              D = 256 (-0.7 to -1.6 %), nor the other causal D (-1 to +0.5 %)
//   fp16+fp32  D = 64 (+0-3 %, causal +5-6 %); not D = 128 (-1.6 to +1.3 %)
//   with TMA tiles (attn_mma's TMA: one 16-byte bulk copy on the tile's
//   mbarrier), D = 128, both modes (forty-eighth session, H100, attention
//   1K / 4K / 16K): fp32 +1.7 / +0.2 / +1.0 %, causal +3.3 / +3.6 / +2.0 %;
//   fp16+fp32 -0.3 / +1.4 / +0.4 %, causal +2.2 / +4.3 / +4.8 %.  FP8PV's
//   TMA shapes keep their cp.async choice: with TMA fp32+fp32 causal lost
//   4-5 %, pvi8+splitv 6-7 %, fp32+fp16 and fp32+fp32 non-causal +-1 %.
__host__ __device__ constexpr bool mma_ks_smem(int fam, int acc, int d, bool causal,
                                               bool tma) {
  if (fam == FP16PV)
    return (tma && d == 128) ||
           (acc == ACC_FP32 ? (causal ? d == 64 : d == 96) : acc == ACC_FP16_FP32 && d == 64);
  return acc == ACC_FP32       ? d == 64 || d == 128 || (causal && (d == 32 || d == 256))
         : acc == ACC_FP32_FP16 ? causal || d == 96 || d == 256
         : acc == ACC_FP32_FP32 ? d <= 64
         : acc == ACC_PVI8      ? d == 64
                                : false;
}

template <int FAM, int D, int NTHREADS, bool SPLIT, bool VFULL = false, bool KS_SMEM = false>
struct KvLoader {
  typedef AttnSmem<FAM, D, SPLIT> S;
  static constexpr bool F8 = FAM == FP8PV;
  static constexpr int K_CPR = D / 16, K_CH = BLK_K * K_CPR;
  static_assert(!KS_SMEM || S::K_PITCH - D >= 16,
                "KS_SMEM: a K row's padding holds the tile's K scales");
  // V chunks per row: BLK_K bytes of a channel row (FP8) or D 16-bit values
  // of a token row (FP16).
  static constexpr int V_CPR = F8 ? BLK_K / 16 : D / 8;
  static constexpr int V_ROWS = F8 ? (SPLIT ? 2 : 1) * D : BLK_K;
  static constexpr int V_CH = V_ROWS * V_CPR;
  static constexpr int V_PASSES = (V_CH + NTHREADS - 1) / NTHREADS;
  // Whole rows per pass (a thread keeps its column): the walk is one add.
  static constexpr bool V_WALK = NTHREADS % V_CPR == 0;
  static constexpr int V_RPI = NTHREADS / V_CPR; // rows per pass (V_WALK)
  const u8 *k;    // next tile's first K8 row
  const u8 *v;    // next tile's V: channel row 0 (FP8) or token row 0 (FP16)
  i64 v_pitch;    // bytes between V rows
  i64 v_lo;       // split V: the residual's offset from v
  int rows_left;  // FP16: keys of the sequence from the next tile on
  // KS_SMEM: the tile's four K scales (16 bytes) ride with its K tile, in
  // the padding of row 0; a 32-bit offset (k_scale is 16 bytes per tile
  // and KV head, far below 4 GiB while K itself is 4 D times larger).
  const u8 *ks_base;
  u32 ks; // bytes from ks_base to the next tile's K scales

  __device__ __forceinline__ void init(const KvSrc &src) {
    ks_base = src.ks_base;
    ks = src.ks;
    k = src.k;
    v = src.v;
    v_pitch = src.v_pitch;
    v_lo = src.v_lo;
    rows_left = src.len_kv;
  }

  template <bool FULL>
  __device__ __forceinline__ void v_chunk(u8 *sV, int r, int c, const u8 *src) {
    if (F8 || FULL) {
      cp_async16(sV + r * S::V_PITCH + c * 16, src, 16);
    } else {
      // token rows past the sequence are zero-filled, never read
      const bool in = r < rows_left;
      cp_async16(sV + r * S::V_PITCH + c * 16, in ? src : v, in ? 16 : 0);
    }
  }

  // The next tile into (sK, sV).  VFULL, FP16 V: a tile whose 64 rows
  // are all inside the sequence is copied without the per-chunk bound (a
  // warp-uniform branch; see LEAN in attn_mma).
  __device__ __forceinline__ void load(u8 *sK, u8 *sV) {
    if (VFULL && !F8 && rows_left >= BLK_K)
      load_impl<true>(sK, sV);
    else
      load_impl<false>(sK, sV);
  }
  template <bool FULL> __device__ __forceinline__ void load_impl(u8 *sK, u8 *sV) {
#pragma unroll
    for (int it = 0; it < (K_CH + NTHREADS - 1) / NTHREADS; it++) {
      const int i = it * NTHREADS + threadIdx.x;
      if (K_CH % NTHREADS == 0 || i < K_CH)
        cp_async16(sK + 16 * (i + i / K_CPR), k + 16 * i, 16);
    }
    if (V_WALK && (!SPLIT || D % V_RPI == 0)) {
      const int r0 = threadIdx.x / V_CPR, c = threadIdx.x % V_CPR;
      const u8 *p = v + r0 * v_pitch + c * 16;
      const i64 step = V_RPI * v_pitch;
#pragma unroll
      for (int it = 0; it < V_PASSES; it++) {
        const int r = r0 + it * V_RPI;
        if (V_CH % NTHREADS != 0 && r >= V_ROWS)
          break;
        if (SPLIT && it * V_RPI == D)
          p = v + v_lo + r0 * v_pitch + c * 16; // the residual's rows
        v_chunk<FULL>(sV, r, c, p);
        p += step;
      }
    } else {
#pragma unroll
      for (int it = 0; it < V_PASSES; it++) {
        const int i = it * NTHREADS + threadIdx.x;
        if (V_CH % NTHREADS == 0 || i < V_CH) {
          const int r = i / V_CPR, c = i % V_CPR;
          const u8 *row = SPLIT && r >= D ? v + v_lo + (r - D) * v_pitch : v + r * v_pitch;
          v_chunk<FULL>(sV, r, c, row + c * 16);
        }
      }
    }
    if (KS_SMEM) {
      if (threadIdx.x == NTHREADS - 1)
        cp_async16(sK + D, ks_base + ks, 16); // row 0's padding: never read by ldmatrix
      ks += 16;
    }
    k += BLK_K * D;
    v += F8 ? (i64)BLK_K : BLK_K * v_pitch;
    rows_left -= BLK_K;
  }
};

// TMA tiles' swizzle (attn_mma): the 16-byte chunk c of a row of ROW
// bytes (128, 64 or 32) whose index within its 1024-byte block has
// r % 8 = r8 lands at chunk c ^ r8 (128-byte rows), c ^ (r8 / 2 % 4)
// (64-byte rows) or c ^ (r8 / 4 % 2) (32-byte rows): the swizzle XORs the
// address's bits 4-6 (4-5, 4) with its bits 7-9 (7-8, 7).
template <int ROW> __device__ __forceinline__ int swz_chunk(int c, int r8) {
  static_assert(ROW == 128 || ROW == 64 || ROW == 32, "128-, 64- or 32-byte swizzle");
  return ROW == 128 ? c ^ r8 : ROW == 64 ? c ^ ((r8 >> 1) & 3) : c ^ ((r8 >> 2) & 1);
}
// The K fragment address of a TMA K tile (its boxes: SJ_TMA_KROW in
// sj_abi.h, shared with the host's maps): key row `key` (key % 8 = r8),
// byte column `col`; rows of D bytes, or D / KROW boxes of 64 rows of KROW
// bytes one after the other (D = 96: three of 32, D = 256: two of 128).
template <int D, int KROW>
__device__ __forceinline__ u8 *tma_k_row(u8 *sK, int key, int col, int r8) {
  if constexpr (D > KROW)
    return sK + col / KROW * (BLK_K * KROW) + key * KROW +
           (swz_chunk<KROW>(col % KROW >> 4, r8) << 4);
  else
    return sK + key * D + (swz_chunk<KROW>(col >> 4, r8) << 4);
}

// attn_mma's kernel argument: sj_attn_args, or with TMA tiles the block
// that puts its two tensor maps (tk, tv) in front of it (sj_abi.h).
// (Both have the attention arguments as `a`; sj_attn_args' bytes alone
// without TMA.  The kernel reads p.a itself: through an inlined accessor
// ptxas scheduled the pvi8+splitv kernels differently.)
struct MmaArgsPlain {
  sj_attn_args a;
};
template <bool TMA> struct MmaArgs {
  typedef MmaArgsPlain type;
  static __device__ __forceinline__ const sj_tmap *maps(const type &) { return nullptr; }
};
template <> struct MmaArgs<true> {
  typedef sj_wgmma_args type;
  static __device__ __forceinline__ const sj_tmap *maps(const type &p) { return &p.tk; }
};

// Where a CTA's tiles start in its tensor maps (mma_tma_tile).
struct TmaCoord {
  int k_row;  // k8 row of tile 0
  int v0, v1; // FP8: v8 column (token) and channel row; FP16: -, token
  int hk, b;  // FP16: kv head and batch coordinates
};
__device__ __forceinline__ TmaCoord tma_coord(bool f8, int d, const sj_geom &G, const Seq &sk,
                                              int b, int hk) {
  TmaCoord c;
  c.k_row = (int)k8_row0(G, sk, b, hk);
  c.v0 = f8 && G.cu_kv ? (int)(((sk.tok + 15) / 16) * 16 + (i64)V8_GAP * b) : 0;
  c.v1 = f8 ? (G.cu_kv ? hk * d : (b * G.heads_kv + hk) * d) : (G.cu_kv ? (int)sk.tok : 0);
  c.hk = hk;
  c.b = G.cu_kv ? 0 : b;
  return c;
}

// attn_mma's TMA tiles (TMA in attn_mma_body): tile jt into stage
// jt % STAGES, issued by one thread.  Coordinates: the k8 row; FP16 V
// (channel, token, kv head, batch), a packed call's tokens in one sequence
// of its map; FP8 v8 (token column, channel row).  KS_SMEM: the tile's four
// K scales (16 bytes from ks) into the stage's slot after the mbarriers.
template <bool F8, int D, int STAGES, bool KS_SMEM>
__device__ __forceinline__ void mma_tma_tile(const sj_tmap *tm, const TmaCoord &tc, u32 bar0,
                                             u8 *sK0, u8 *sV0, u8 *sKs0, const u8 *ks,
                                             int jt) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int TK_BYTES = BLK_K * D, TV_BYTES = F8 ? D * BLK_K : BLK_K * 2 * D;
  constexpr int KROW = SJ_TMA_KROW(D), VCH = SJ_TMA_VCH(D);
  const int ts = jt % STAGES;
  const u32 bar = bar0 + 8 * ts;
  const u32 dk = smem_addr(sK0 + ts * TK_BYTES), dv = smem_addr(sV0 + ts * TV_BYTES);
  mbar_expect_tx(bar, TK_BYTES + TV_BYTES + (KS_SMEM ? 16 : 0));
#pragma unroll
  for (int c = 0; c < D / KROW; c++)
    tma_load_2d(dk + c * (BLK_K * KROW), tm, c * KROW, tc.k_row + jt * BLK_K, bar);
  if (F8) {
    tma_load_2d(dv, tm + 1, tc.v0 + jt * BLK_K, tc.v1, bar);
  } else {
#pragma unroll
    for (int c = 0; c < D / VCH; c++)
      tma_load_4d(dv + c * (BLK_K * 2 * VCH), tm + 1, c * VCH, tc.v1 + jt * BLK_K, tc.hk, tc.b,
                  bar);
  }
  if (KS_SMEM)
    bulk_load(smem_addr(sKs0 + 16 * ts), ks + 16 * jt, 16, bar);
#endif
}

// Channel n-tile pairs accumulated together in the two-level modes: enough
// independent mma chains to hide the tensor-core latency, few enough that
// the per-tile accumulators fit in registers next to O.
template <int MT, int DN> struct PvGroup {
  static constexpr int TARGET = MT == 1 ? 4 : 2;
  static constexpr int PAIRS = DN / 2;
  static constexpr int GP = PAIRS % TARGET == 0 ? TARGET : (PAIRS % 2 == 0 ? 2 : 1);
};

// KSUB: keys per compute step (32 or 64).  Tiles are loaded BLK_K = 64 keys
// at a time; with KSUB = 32 each tile is processed as two online-softmax
// steps, which halves the score registers (for WARP_Q = 32 at large D).
// The Q/K scale granularity is the argument a.quant (SJ_QUANT_*), not a
// template parameter: it only picks the Q scale's index and the fused
// quantizer's row group, once per CTA, and every granularity's K scales are
// laid out as per_thread's (quant_qkv), so the key loop is the same code.
//
// The kernel's body, inlined into attn_mma below.  PRE: the caller has
// loaded the fused Q rows into qraw and waited for the quantizer already
// (pvi8+splitv, which reads kv_finalize's choice before it picks a body).
template <int FAM, int DT, int D, bool CAUSAL, int ACC, int WARP_Q, int STAGES, int KSUB,
          bool PRE, bool TMA, bool VH = false>
__device__ __forceinline__ void attn_mma_body(const sj_attn_args &a,
                                              u32x4 (&qraw_pre)[WARP_Q / 8][D / 32],
                                              const sj_tmap *tm) {
  constexpr int NWARPS = BLK_Q / WARP_Q;
  constexpr int NTHREADS = NWARPS * 32;
  constexpr int MT = WARP_Q / 16;  // m-tiles per warp
  constexpr int NT = KSUB / 8;     // n-tiles of S per m-tile
  constexpr int KS = D / 32;       // k-steps of Q.K^T
  constexpr int DN = D / 8;        // n-tiles of O
  constexpr bool F8 = FAM == FP8PV;
  constexpr bool PV_BF16 = !F8 && DT == BF16 && ACC == ACC_FP32;
  constexpr bool TWO_LEVEL = ACC != ACC_FP32;
  // Split V: each P.V mma runs twice, on V and on its residual.
  constexpr bool SPLIT = F8 && ACC == ACC_FP32_FP32_SPLITV;
  constexpr bool TILE_F16 = ACC == ACC_FP16_FP32 || ACC == ACC_FP32_FP16;
  // INT8 P.V: O and d are kept in units of 2^(I8_EXP - 149); the fold's
  // factor beta = 2^(step max - m + I8_EXP) <= 2^(TAU + I8_EXP) stays
  // finite, and a step's s32 sums (< 64 * 255 * 255 < 2^23) are exact
  // subnormals.
  constexpr bool I8 = F8 && ACC == ACC_PVI8;
  constexpr float I8_EXP = 120.f;
  // Row sums of P on the tensor core (see the step): FP8PV everywhere
  // (H100, where its mma is emulated: −2 to +14 %; native on sm89+);
  // FP16PV at D = 128 without the causal mask (+6-8 %; at D = 64 and
  // under the mask the extra mma chains cost 1-6 %, at D = 96 0.7-1.1 %,
  // at D = 256, 16-row warps, 5-6 %).  bench/NOTES.md m3, m9.
  // HSUM: FP16PV's fp32 mode with fp16 input at D = 64 without the mask
  // (sm_90): the step's row sums as f16x2 adds of the packed P (the P that
  // P.V multiplies; P <= 2^TAU, so a lane's 16 keys of a row sum to at
  // most 2^12, with a rounding of 2^-11 per add) into a lane's partial,
  // instead of an FADD per score: 7 HADD2 per row and m-tile in place of
  // 16 FADD.  Attention +1.2 / +3.4 / +4.9 % at 1K / 4K / 16K (H100).  It
  // lost in the chunked steps (causal D = 64: -4 to -8 %), against the
  // tensor core's sums at D = 128 (-1 to -3 %), in FP8PV's VH modes (0 to
  // -3.6 %) and at non-causal D = 32 and 256 (-2 to -6 %): bench/NOTES.md
  // hs, hsx.  bf16's 8-bit adds would cost accuracy; the other targets
  // were not measured and keep their cubins.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
  constexpr bool HSUM = !F8 && DT == FP16 && ACC == ACC_FP32 && D == 64 && !CAUSAL;
#else
  constexpr bool HSUM = false;
#endif
  constexpr bool TC_SUM = !HSUM && (F8 || (D == 128 && !CAUSAL));
  // FP16PV causal at D = 128: row sums on the tensor core in the unmasked
  // steps only, FADDs (quad-reduced) in the masked ones, so d holds whole
  // row sums either way: +0.9-1.4 % at 1K-16K, and 40 bytes fewer spills
  // (sm_90a 120 / 124 -> 80 / 72).  At D = 96 -2-3.5 %, at D = 256 -7 %.
  constexpr bool TC_HYB = !HSUM && !F8 && D == 128 && CAUSAL;
  constexpr bool D_FULL = TC_SUM || TC_HYB;
  // Where the O rescale (O *= o_scale when a row max moved; the fp32 mode
  // only) is decided: before the exps (EARLY_RESCALE) or after the packing
  // of P, just before P.V.  Its branch ends a basic block, so placed late
  // it keeps ptxas from issuing P.V's first mma under the last exps and
  // packs; placed early, FP16PV causal D = 128 ran +5-7 % (attention,
  // 1K-16K, H200), with 40 bytes fewer spills, and non-causal D = 128 -1 %
  // (60 / 112 bytes of new spills), D = 64 +-0.2 % but causal 1K +1.4 %
  // (bench/NOTES.md, m10).  With TMA tiles (fifty-first session, H100)
  // non-causal D = 128 spills 20 / 36 bytes with it and runs +2.1 / +3.0 /
  // +1.4 % at 1K / 4K / 16K (the er128 row), so it is on there too where
  // the tiles come by TMA (cp.async kernels, the other targets', as m10
  // left them).  FP8PV's fp32 mode (opt-in) was not measured.
  constexpr bool EARLY_RESCALE = !F8 && !TWO_LEVEL && D == 128 && (CAUSAL || TMA);
  // FP16PV at D = 32, 64 and 256, fp32 mode: each tile's k_scale loaded
  // one tile ahead (at the top of its own tile the load's latency runs into
  // the first Q.K^T), and full FP16 V tiles copied without the per-chunk
  // bound (KvLoader VFULL).  End to end at 1K / 4K / 16K (H200): D = 64
  // +5.6 / +6.2 / +5.7 % (causal +1.8 / +1.3 / +0.2 %), D = 32 +7.1 / +12.0
  // / +9.4 % (causal +0.2-1.7 %), D = 256 +3.4-4.9 % (causal +2.2-4.0 %).
  // At D = 128 both cost 4-7 % (the early load alone 2-6 %), at D = 96
  // -1.2 to +2.2 %: bench/NOTES.md m11, m12.
  constexpr bool LEAN = !F8 && !TWO_LEVEL && (D == 32 || D == 64 || D == 256);
  // KS_SMEM: a tile's K scales come from shared memory (KvLoader copies
  // them into the padding of the K tile's row 0, which ldmatrix never
  // reads), read after the barrier that publishes the tile, instead of an
  // LDG from L2 right before the first Q.K^T (ncu, FP16PV D = 128: 2.4 %
  // of the stall samples waited on it).  The gain or loss is the
  // register allocation's more than the load's, so it is chosen per
  // shape from the A/B (attention, 4K / 16K; bench/NOTES.md m13): see
  // mma_ks_smem.
  constexpr bool KS_SMEM = !SPLIT && mma_ks_smem(FAM, ACC, D, CAUSAL, TMA);
  // TMA (a template argument, runtime/spec.c mma_tma): the K and V tiles by
  // tensor copies that thread 0 issues, completing on the stage's mbarrier,
  // into unpadded stages with the hardware swizzle (chunk c of a row at
  // c ^ (row % 8) in 128-byte rows, c ^ (row / 2 % 4) in 64-byte rows,
  // c ^ (row / 4 % 2) in 32-byte rows: swz_chunk) that
  // every K and V ldmatrix address below undoes; the K scales (KS_SMEM) by
  // a 16-byte bulk copy on the same barrier.  K: 64 k8 rows of D bytes (at
  // D = 96 and 256 in boxes of 32- and 128-byte rows); V:
  // the caller's 16-bit rows in boxes of 64 tokens x 64 channels (D = 32
  // and 96: 32 channels; FP16PV,
  // through a 4-D map that zero-fills rows past a dense sequence; in a
  // packed call's last tile stores zero them) or D channel rows of 64 bytes
  // of v8 (FP8PV).  The cp.async copies cost the FP16PV
  // kernel 4-7 % (bench/NOTES.md l2h); 128 bulk row copies per tile lost
  // 11-46 % (bulk); these three copies per tile gained (tma).
  static_assert(!TMA || (SJ_TMA_HAS_DIM(D) && STAGES >= 2 && !SPLIT),
                "TMA tiles: D = 32, 64, 96, 128 or 256, two or more stages, no split V");
  // a TMA K box's row bytes (its swizzle); at D = 96 and 256 a K tile is
  // three boxes of 64 rows x 32 bytes or two of 64 x 128, one after the
  // other; FP16 V's boxes of TMA_VCH = 2^TMA_VLOG channels in rows of 2
  // TMA_VCH bytes (each box row conflict-free for ldmatrix under its swizzle)
  constexpr int TMA_KROW = SJ_TMA_KROW(D), TMA_VCH = SJ_TMA_VCH(D), TMA_VROW = 2 * TMA_VCH;
  constexpr int TMA_VLOG = TMA_VCH == 64 ? 6 : 5;
  static_assert(TMA_VCH == 1 << TMA_VLOG, "TMA_VLOG");
  // CHUNKED: the fp32 mode's exps, packing, row sums and P.V in k-chunk
  // order (16 keys; an FP8 arm of 32 keys for e4m3 mma is written but no
  // default compiles or tests it): chunk kc's P.V issued in source order
  // right after its exps, so that the MUFU work of chunk kc + 1 can go
  // under the HMMA of chunk kc, and the scores die chunk by chunk.  The O
  // rescale comes first (as EARLY_RESCALE).  FP16PV causal, end to end at
  // 1K / 4K / 16K (H200): D = 32 +2.8 / +5.6 / +7.4 % over LEAN alone, D = 64
  // +3.1-3.5 % (+3.2-5.2 % with LEAN), D = 96 +1.3 / +2.3 / +2.8 %.  Not
  // at D = 256 causal (-0.5 to -0.8 % against LEAN alone), non-causal D = 64
  // (-2.0 to -4.5 %) or D = 128 (-1.5 to -2.8 %): bench/NOTES.md m12.  With
  // TMA tiles, non-causal D = 128 gained (attention +2.1 / +1.7 / -0.2 %,
  // end to end +1.2 / -0.3 / -0.1 %, H100; spills 20 / 36 -> 16 / 20
  // bytes): bench/NOTES.md chk128.  Causal D = 128 with TMA lost 0.6-1.2 %
  // (er128), so it keeps the hybrid row sums there.  FP8PV's fp32 mode
  // with VH (sm_90) runs it too, with 16-key chunks of fp16 P rounded to
  // e4m3.  At D = 128: attention +2.6 / +3.5 / +2.7 % (non-causal, with
  // VOTE1 +2.6 / +4.4 / +4.0 %), causal 0.0 / +2.2 / +4.7 % at 1K / 4K /
  // 16K, `check` output identical (H100; bench/NOTES.md c8).  At the other
  // VH head dims (c8x, with VOTE1 without the mask): D = 64 +7.6 / +7.9 /
  // +8.6 %, D = 96 +7.6 / +9.1 / +7.7 %, D = 256 +6.0 / +6.4 / +6.0 %
  // (causal +5.4-5.6 %); not D = 96 causal (-0.4 to -0.6 %).
  constexpr bool CHUNKED =
      (!F8 && !TWO_LEVEL &&
       ((CAUSAL && (D == 32 || D == 64 || D == 96)) || (!CAUSAL && D == 128 && TMA))) ||
      (F8 && VH && ACC == ACC_FP32 && (D != 96 || !CAUSAL));
  // The chunked step has no split-V pass, no INT8 P, no bf16 -> fp16 V and
  // no two-level fold: it must stay in the fp32 mode.
  static_assert(!CHUNKED || !TWO_LEVEL, "CHUNKED is written for the fp32 mode only");
  static_assert(!HSUM || (!CHUNKED && !VH && !D_FULL), "HSUM: the unchunked fp16 P of FP16PV");
  // Row max on the scores' bits (tree_imax): everywhere but FP8PV at
  // D <= 64 without the mask, which measured 2 % slower (H200; causal
  // +4-14 %, FP16PV +0-14 %, FP8PV D = 128 +1-6 %: bench/NOTES.md m6).
  constexpr bool IMAX = !(F8 && D <= 64 && !CAUSAL);
  // VOTE1: each step first votes across the warp whether any lane's own
  // row max passes its row's reference max + TAU; when none does (every
  // step once the maxima settle) the quad's max shuffles, the o_scale
  // exps and the rescale's vote are skipped, and the exps' offsets come
  // from the reference maxima alone.  Bit for bit the same output: a
  // quad's max passes the bound exactly when one of its lanes' does (the
  // `check` JSON of 132 cases identical field for field).  DEFER: some
  // exps are taken from the reference maxima before the step branches on
  // the vote, and again in the branch where a row max moved, so the MUFU
  // work starts under the vote: the first NDEF chunks' in the chunked
  // steps, the first row's in the others.  H100, attention at 1K / 4K /
  // 16K against the tree before (bench/NOTES.md vote, vote2): FP16PV fp32
  // chunked at non-causal D = 128 +0.0 / +3.8 / +2.4 %, causal D = 32
  // +1.1 / +5.5 / +6.3 %, causal D = 96 +1.8 / +3.4 / +3.4 %; unchunked
  // at non-causal D = 64 +5.3 / +6.3 / +6.8 %, D = 96 +4.0 / +3.9 /
  // +2.0 %, D = 256 +1.2 / +1.7 / +1.9 % (causal +3.9 / +3.4 / +5.4 %);
  // the vote alone at non-causal D = 32 +4.2 / +5.1 / +4.6 %; FP8PV
  // fp32+fp16 causal D = 128 +0.2 / +1.2 / +2.2 %; FP8PV's chunked fp32
  // mode without the mask at D = 128 (c8v) +0.0 / +1.0 / +1.1 % over
  // CHUNKED alone, with it -2.5 / -2.0 / -1.6 % (not there; at D = 64, 96
  // and 256 timed only together with CHUNKED, c8x).  Elsewhere they lost
  // (FP16PV causal D = 64 and 128 -1 to -3 %, FP8PV fp32+fp16 without the
  // mask -2 %, pvi8+splitv's split body -10 %) or tied (FP8PV fp32+fp32).
  // Not for INT8 P, whose scale is the step's own max; the other targets
  // were not measured and keep their cubins.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
  constexpr bool VOTE1 =
      (!F8 && ACC == ACC_FP32 &&
       (CHUNKED ? D != 64 : (!CAUSAL && (D == 32 || D == 64 || D == 96)) || D == 256)) ||
      (F8 && ACC == ACC_FP32_FP16 && CAUSAL && D == 128) || (F8 && CHUNKED && !CAUSAL);
#else
  constexpr bool VOTE1 = false;
#endif
  constexpr bool DEFER = VOTE1 && (CHUNKED || D != 32);
  // NDEF: the chunks whose exps DEFER takes before the branch.  Two for
  // FP8PV at D = 64 (its chunked fp32 mode without the mask): attention
  // +2.1 / +3.2 / +2.6 % at 1K / 4K / 16K against one; at D = 96 -1.4 to
  // -2.6 %, at D = 128 -7 to -8.5 % (60 / 80 bytes of spills instead of
  // 16 / 32), H100, bench/NOTES.md nd2; FP16PV's two at D = 128 lost (df2).
  constexpr int NDEF = F8 && D == 64 ? 2 : 1;
  // Q fragments stay in registers when they are few; else they are re-read
  // from shared memory for every KV tile (registers go to O and S).
  constexpr bool Q_REGS = MT * KS <= 4;
  // One channel pair per P.V pass instead of PvGroup's two, on sm_90 at
  // D = 128, where it measured faster: FP8PV fp32+fp16 without the mask
  // (TMA tiles; +2.6 / +4.3 / +3.6 % attention at 1K / 4K / 16K, spills
  // 148 / 152 -> 124 / 128 bytes) and the pvi8+splitv kernel under the
  // mask, both bodies (+2.7 / +3.7 / +3.3 %).  Elsewhere it lost: fp32+fp16
  // causal -1 %, pvi8+splitv without the mask -3 %, fp32+fp32 -1 %, FP16PV
  // fp16+fp32 causal -3 to -4 % (H100; bench/NOTES.md, gp).  The other
  // targets were not measured and keep their cubins.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
  constexpr bool GP_ONE =
      D == 128 && MT == 2 && ((ACC == ACC_FP32_FP16 && !CAUSAL && TMA) || (PRE && CAUSAL));
#else
  constexpr bool GP_ONE = false;
#endif
  constexpr int GP = GP_ONE ? 1 : PvGroup<MT, DN>::GP;
  // VH (a template argument; runtime/spec.c mma_vh sets it on sm_90):
  // FP8PV's e4m3 P.V as the fp16 mma it is there.  sm_90 has no e4m3
  // mma.sync: ptxas lowers each m16n8k32.e4m3 to two HMMA.16816 and
  // converts both fragments to fp16 first, so every warp converted every
  // V fragment of every tile (128 conversions per 64-key step and thread
  // at D = 128; the cubin's F2FP count 450 -> 256 with VH).  With VH the
  // CTA converts each V tile once, a tile ahead, into one of two fp16
  // copies (D channel rows of 128 bytes in token order, the 128-byte
  // swizzle: chunk c of row r at c ^ (r % 8)); P keeps its e4m3 rounding
  // (packed to e4m3, then widened exactly), V its e4m3 values, so the
  // products are the same and only the grouping of the fp16 MMAs' k-chunks
  // differs.  The copies take 2 D BLK_K 2 bytes past the TMA stages, which
  // the runtime adds to the launch (runtime/spec.c sj_spec_shape).
  static_assert(!VH || (F8 && TMA && !I8 && !SPLIT), "VH: FP8PV's e4m3 modes with TMA tiles");
  constexpr int VH_BYTES = D * BLK_K * 2; // one fp16 copy of a V tile
  constexpr int KC = F8 && !VH ? KSUB / 32 : KSUB / 16; // k-chunks of P.V
  // int32 -> float without the quarter-rate I2F: for |x| < 2^22,
  // float_bits(0x4B400000 + x) == 12582912 + x exactly (|S| <= 127*127*256).
  // Lazy-rescale threshold (log2 units) and the FP8 offset that keeps
  // P <= 448 with it.  fp16 tile accumulators (fp16+fp32) need P <= 1.
  // INT8 P is scaled by its row max in the step, not by the running max,
  // so the lazy rescale costs it no bits.
  constexpr float TAU = F8 ? 4.0f : (ACC == ACC_FP16_FP32 ? 0.0f : 8.0f);
  constexpr float P_OFFSET = I8 ? U8_P_OFFSET : FP8_P_OFFSET - (F8 ? TAU : 0.0f);
  // log2 of d's unit against the exps' (the LSE)
  constexpr float L_OFFSET = I8 ? U8_P_OFFSET + I8_EXP - 149.f : (F8 ? P_OFFSET : 0.f);
  constexpr int MAGIC_I = 0x4B400000;
  constexpr float MAGIC_F = 12582912.0f;
  typedef AttnSmem<FAM, D, SPLIT> S;

  extern __shared__ __align__(128) u8 smem[];
  u8 *sQ = smem;
  u8 *sK0 = smem + S::Q_BYTES;
  u8 *sV0 = sK0 + STAGES * S::K_BYTES;
  // TMA: the stages from the first 1024-byte boundary after the padded Q
  // tile (the swizzle follows the address bits), then the mbarriers and the
  // stages' K scales; within the bytes the runtime sizes for the padded
  // stages (attn_smem) and past the epilogue's O staging.
  constexpr int TK_BYTES = BLK_K * D, TV_BYTES = F8 ? D * BLK_K : BLK_K * 2 * D;
  constexpr int KST = TMA ? TK_BYTES : S::K_BYTES, VST = TMA ? TV_BYTES : S::V_BYTES;
  static_assert(!TMA || S::Q_BYTES + 1023 + STAGES * (TK_BYTES + TV_BYTES) + 32 + 16 * STAGES <=
                            S::Q_BYTES + STAGES * (S::K_BYTES + S::V_BYTES),
                "TMA: the swizzled stages fit the padded layout's bytes");
  static_assert(!TMA || S::Q_BYTES + STAGES * (TK_BYTES + TV_BYTES) >= BLK_Q * (2 * D + 16),
                "TMA: the epilogue's O staging stays below the mbarriers");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static_assert(!TMA, "TMA tiles need sm_90 or later");
#endif
  u32 tbar0 = 0;         // TMA: the stages' mbarriers (8 bytes each)
  u8 *sKs0 = nullptr;    // TMA and KS_SMEM: the stages' K scales (16 bytes each)
  u8 *sVh0 = nullptr;    // VH: the two fp16 copies of V tiles
  if constexpr (TMA) {
    const u32 base = smem_addr(smem);
    const u32 k0 = (base + S::Q_BYTES + 1023u) & ~1023u;
    sK0 = smem + (k0 - base);
    sV0 = sK0 + STAGES * TK_BYTES;
    tbar0 = smem_addr(sV0 + STAGES * TV_BYTES);
    sKs0 = sV0 + STAGES * TV_BYTES + 32;
    sVh0 = sV0 + STAGES * TV_BYTES + 1024; // 1024-aligned: sV0 and the stages are
  }
  static_assert(!VH || 32 + 16 * STAGES <= 1024, "VH: the mbarriers and K scales below the copies");

  // Causal: the heaviest Q blocks first (blocks run in launch order, so
  // the short diagonal ones fill the tail), one head after another or
  // every head's at once (SJ_F_HEADS_FIRST; sj_geom.cuh).
  // REREAD: at D >= 96, the kernels at 255 registers, and up to sm_90.
  // At D <= 64, where registers are free, the second read cost FP16PV 2 %
  // (bench/NOTES.md m8); on sm_100 and sm_120 ptxas spills 10-70 bytes
  // more with it than with cta_coord, which spills what one head at a
  // time did (ptxas -v, the default modes at D = 128).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
  constexpr bool REREAD = false;
#else
  constexpr bool REREAD = CAUSAL && D >= 96;
#endif
  const CtaCoord cc = REREAD ? cta_coord_reread(a, true) : cta_coord(a, CAUSAL);
  const int qblk = cc.qblk, h = cc.h, b = cc.b;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int mi = lane / 8, lr = lane % 8; // ldmatrix matrix and row
  const sj_geom &G = a.g;
  const int hk = h / (G.heads_q / G.heads_kv);
  const i64 bh = (i64)b * G.heads_q + h;
  const i64 bhk = (i64)b * G.heads_kv + hk;
  const int q0 = qblk * BLK_Q;
  const Seq sq = seq_q(G, b), sk = seq_kv(G, b);
  if (q0 >= sq.len)
    return; // a varlen sequence shorter than the longest: nothing here
  // Fused Q (SJ_F_Q_FUSED, per_thread and per_warp): each warp quantizes
  // its own rows (fq_* in sj_geom.cuh), lane (g, t) rows g + 8 k.  The
  // loads go out first: Q is the caller's input, complete before this
  // call's first kernel, so before any of its kernels.
  constexpr int RPT = WARP_Q / 8;
  // (per_block's 128-row group spans the warps: the runtime leaves it to
  // quant_qkv)
  const int qg = a.quant;
  const bool q_fused = qg != PER_BLOCK && (a.flags & SJ_F_Q_FUSED) != 0;
  u32x4 qraw_own[RPT][D / 32];
  u32x4(&qraw)[RPT][D / 32] = PRE ? qraw_pre : qraw_own;
  if constexpr (!PRE) {
    if (q_fused)
      fq_load<D, RPT>(a, sq, b, h, q0 + warp * WARP_Q, lane, qraw);
    pdl_wait(); // everything the quantizer wrote
  }
  const int len_q = sq.len, len_kv = sk.len;
  const int causal_offset = (a.flags & SJ_F_CAUSAL_BR) ? len_kv - len_q : 0;
  KvSrc src;
  src.k = (const u8 *)a.k8 + k8_row0(G, sk, b, hk) * D;
  src.len_kv = len_kv;
  if (F8) {
    src.v = (const u8 *)a.v8 + v8_base(G, sk, b, hk, D);
    src.v_pitch = v8_pitch(G);
    src.v_lo = v8_lo_offset(G, D);
  } else {
    src.v = (const u8 *)a.v +
            (user_base(G.cu_kv != 0, sk, b, a.v_sb, a.v_sn) + (i64)hk * a.v_sh) * 2;
    src.v_pitch = a.v_sn * 2;
    src.v_lo = 0;
  }

  // Number of KV tiles this CTA visits.
  int n_tiles = (len_kv + BLK_K - 1) / BLK_K;
  if (CAUSAL) {
    const int last = q0 + BLK_Q - 1 + causal_offset; // last visible key
    const int lim = last < 0 ? 0 : last / BLK_K + 1;
    n_tiles = min(n_tiles, lim);
  }

  // ---- Q tile -> shared memory (and registers)
  if (!q_fused) {
    const u8 *q = (const u8 *)a.q8 + (q8_row0(G, sq, b, h) + q0) * (i64)D;
    constexpr int CPR = D / 16, QCH = BLK_Q * CPR;
#pragma unroll
    for (int it = 0; it < (QCH + NTHREADS - 1) / NTHREADS; it++) {
      const int i = it * NTHREADS + threadIdx.x;
      if (QCH % NTHREADS == 0 || i < QCH)
        cp_async16(sQ + 16 * (i + i / CPR), q + 16 * i, 16);
    }
    cp_async_commit();
  }
  src.ks_base = (const u8 *)a.k_scale;
  src.ks = (u32)(bhk * G.n_kblk * 16);
  KvLoader<FAM, D, NTHREADS, SPLIT, LEAN, KS_SMEM> ld;
  ld.init(src);
  TmaCoord tc = {};
  if constexpr (TMA) {
    tc = tma_coord(F8, D, G, sk, b, hk);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0) {
      tma_prefetch_map(tm);
      tma_prefetch_map(tm + 1);
#pragma unroll
      for (int ts = 0; ts < STAGES; ts++)
        mbar_init(tbar0 + 8 * ts, 1);
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#pragma unroll
      for (int jt = 0; jt < STAGES - 1; jt++)
        if (jt < n_tiles)
          mma_tma_tile<F8, D, STAGES, KS_SMEM>(tm, tc, tbar0, sK0, sV0, sKs0,
                                               src.ks_base + src.ks, jt);
    }
#endif
  } else {
    if (n_tiles > 0) {
      ld.load(sK0, sV0);
      cp_async_commit();
    }
    if (STAGES >= 3 && n_tiles > 1) {
      ld.load(sK0 + S::K_BYTES, sV0 + S::V_BYTES);
      cp_async_commit();
    }
  }
  float q_scale;
  if (q_fused) {
    // rows g + 8k (the quad), or the warp's rows
    const float lane_amax = fq_amax<DT, D, RPT>(a, qraw);
    float amax = group_max<4>(lane_amax);
    if (qg == PER_WARP)
      amax = group_max<32>(amax);
    q_scale = amax / 127.f;
    const float inv = q_scale > 0.f ? 1.0f / q_scale : 0.f;
#pragma unroll
    for (int k = 0; k < RPT; k++)
#pragma unroll
      for (int i = 0; i < D / 32; i++)
        *(uint2 *)(sQ + (warp * WARP_Q + g + 8 * k) * S::Q_PITCH + (i * 4 + t) * 8) =
            fq_pack<DT>(a, qraw[k][i], inv);
    fq_qk<DT, D, RPT>(a, qraw, sq, lse_row0(G, sq, b, h), q0 + warp * WARP_Q, bhk, lane);
  } else {
    const float *qs = (const float *)a.q_scale;
    const i64 base = bh * G.n_qblk + qblk;
    if (qg == PER_BLOCK)
      q_scale = qs[base];
    else if (qg == PER_WARP)
      q_scale = qs[base * NWARPS + warp];
    else
      q_scale = qs[(base * NWARPS + warp) * 8 + g];
  }
  cp_async_wait<0>();
  __syncthreads(); // the Q tile (copied or stored) and the first K/V tiles
  // VH: tile jt's e4m3 V^T (D rows of 64 bytes, the 64-byte swizzle,
  // tokens permuted in groups of 16) into fp16 copy jt % 2 in token order,
  // each thread 16-byte chunks of it: four e4m3 words in, two 16-byte fp16
  // chunks out (both conflict-free: eight threads read two whole rows, and
  // write even chunks of one row, odd of the next)
  auto vh_convert = [&](const int jt) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const u8 *src = sV0 + (jt % STAGES) * TV_BYTES;
    u8 *dst = sVh0 + (jt & 1) * VH_BYTES;
#pragma unroll
    for (int it = 0; it < (D * 4 + NTHREADS - 1) / NTHREADS; it++) {
      const int q = it * NTHREADS + threadIdx.x;
      if ((D * 4) % NTHREADS == 0 || q < D * 4) {
        const int r = q >> 2, c = q & 3, r8 = r & 7;
        const uint4 w = *(const uint4 *)(src + r * BLK_K + (swz_chunk<BLK_K>(c, r8) << 4));
        // word a of a permuted group of 16 tokens holds tokens 2a, 2a + 1,
        // 8 + 2a, 9 + 2a (sj_quant.cuh v_perm_pos): its first pair goes to
        // the chunk of tokens 0-7, its second to that of tokens 8-15
        uint4 h0, h1;
        e4m3x4_to_f16(w.x, h0.x, h1.x);
        e4m3x4_to_f16(w.y, h0.y, h1.y);
        e4m3x4_to_f16(w.z, h0.z, h1.z);
        e4m3x4_to_f16(w.w, h0.w, h1.w);
        *(uint4 *)(dst + r * 128 + (((2 * c) ^ r8) << 4)) = h0;
        *(uint4 *)(dst + r * 128 + (((2 * c + 1) ^ r8) << 4)) = h1;
      }
    }
#endif
  };
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (VH) {
    if (n_tiles > 0) {
      mbar_wait(tbar0, 0);
      vh_convert(0);
      __syncthreads(); // copy 0 for every warp
    }
  }
#endif
  u32 qf[Q_REGS ? MT : 1][Q_REGS ? KS : 1][4];
  if (Q_REGS) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int kk = 0; kk < KS; kk++) {
        const int row = warp * WARP_Q + mt * 16 + (mi & 1) * 8 + lr;
        const int col = kk * 32 + (mi >> 1) * 16;
        ldmatrix_x4(qf[Q_REGS ? mt : 0][Q_REGS ? kk : 0][0],
                    qf[Q_REGS ? mt : 0][Q_REGS ? kk : 0][1],
                    qf[Q_REGS ? mt : 0][Q_REGS ? kk : 0][2],
                    qf[Q_REGS ? mt : 0][Q_REGS ? kk : 0][3],
                    sQ + row * S::Q_PITCH + col);
      }
  }

  // ---- per-thread Q scale (one scalar for every row the thread holds)
  const float q_mult = q_scale * a.sm_scale_log2;

  float o[MT][DN][4];
  float m[MT][2], d[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
#pragma unroll
    for (int nt = 0; nt < DN; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++)
        o[mt][nt][e] = 0.f;
    m[mt][0] = m[mt][1] = neg_inf();
    d[mt][0] = d[mt][1] = 0.f;
  }

  const int row_base = q0 + warp * WARP_Q; // first query row of the warp
  // k_scale is per 64-key block: shared by a tile's sub-steps (four per
  // block whatever the granularity; the coarser ones repeat theirs)
  auto k_scale_at = [&](int j) {
    const float *ks = (const float *)a.k_scale;
    const i64 base = bhk * G.n_kblk + j;
    return ks[base * 4 + t];
  };
  float k_scale_next = 0.f; // LEAN: the next tile's
  if (LEAN && !KS_SMEM && n_tiles > 0)
    k_scale_next = k_scale_at(0);
  for (int j = 0; j < n_tiles; j++) {
    const int st = STAGES > 1 ? j % STAGES : 0;
    u8 *sK = sK0 + st * KST;
    u8 *sV = sV0 + st * VST;
    const u8 *sVh = VH ? sVh0 + (j & 1) * VH_BYTES : nullptr; // VH: this tile's fp16 V copy
    if constexpr (TMA) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      // the barrier proves every warp done with tile j - 1, whose stage
      // takes tile j + STAGES - 1
      if (j > 0)
        __syncthreads();
      if (threadIdx.x == 0 && j + STAGES - 1 < n_tiles)
        mma_tma_tile<F8, D, STAGES, KS_SMEM>(tm, tc, tbar0, sK0, sV0, sKs0,
                                             src.ks_base + src.ks, j + STAGES - 1);
      mbar_wait(tbar0 + 8 * st, (j / STAGES) & 1);
      if (!F8 && G.cu_kv && len_kv - j * BLK_K < BLK_K) {
        // A packed call's map runs on into the next sequence, whose V rows
        // (finite or not) must not meet P = 0: zero them, as the cp.async
        // form does (the dense map's zero fill does it there).
        const int rows = len_kv - j * BLK_K;
        for (int i = threadIdx.x; i < (BLK_K - rows) * (D / 8); i += NTHREADS) {
          const int r = rows + i / (D / 8), c = i % (D / 8); // (row, 16-byte chunk)
          constexpr int LC = TMA_VLOG - 3; // log2 of a box row's 16-byte chunks
          *(uint4 *)(sV + (c >> LC) * (BLK_K * TMA_VROW) + r * TMA_VROW +
                     (c & ((1 << LC) - 1)) * 16) = make_uint4(0u, 0u, 0u, 0u);
        }
        __syncthreads();
      }
#endif
    } else if (STAGES >= 3) {
      // Three buffers, one barrier per tile: the barrier that publishes
      // tile j also proves every warp is done with tile j - 1, whose
      // buffer then takes tile j + 2.
      if (j > 0) {
        if (j + 1 < n_tiles)
          cp_async_wait<1>();
        else
          cp_async_wait<0>();
        __syncthreads();
      }
      if (j + 2 < n_tiles) {
        ld.load(sK0 + ((j + 2) % STAGES) * S::K_BYTES, sV0 + ((j + 2) % STAGES) * S::V_BYTES);
        cp_async_commit();
      }
    } else if (STAGES > 1) {
      if (j + 1 < n_tiles) {
        ld.load(sK0 + ((j + 1) % STAGES) * S::K_BYTES, sV0 + ((j + 1) % STAGES) * S::V_BYTES);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
    } else if (j > 0) {
      ld.load(sK, sV);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
    }

    float k_scale;
    if (KS_SMEM) {
      k_scale = ((const float *)(TMA ? sKs0 + 16 * st : sK + D))[t];
    } else if (LEAN) {
      k_scale = k_scale_next;
      if (j + 1 < n_tiles)
        k_scale_next = k_scale_at(j + 1);
    } else {
      k_scale = k_scale_at(j);
    }
    // One step of KSUB keys: Q.K^T, softmax, P.V.  Called with a literal
    // `mask` at two sites, so each inlined copy is specialized: the common
    // path carries no per-score compare and select (a mask inside the step
    // is if-converted by ptxas, ~50 instructions per step, whatever its
    // form).
    auto step = [&](const int sub, const bool mask) {
    const int koff = sub * KSUB;
    const bool tc = TC_SUM || (TC_HYB && !mask); // row sums on the tensor core
    // ---- S = Q K^T (int32); each K fragment feeds 2 * MT mma
    // The first k-step starts the accumulators at MAGIC_I (the int->float
    // offset below), so the scores need no add of their own.
    i32 si[MT][NT][4];
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
      u32 qa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        if (Q_REGS) {
#pragma unroll
          for (int e = 0; e < 4; e++)
            qa[mt][e] = qf[Q_REGS ? mt : 0][Q_REGS ? kk : 0][e];
        } else {
          const int row = warp * WARP_Q + mt * 16 + (mi & 1) * 8 + lr;
          const int col = kk * 32 + (mi >> 1) * 16;
          ldmatrix_x4(qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3],
                      sQ + row * S::Q_PITCH + col);
        }
      }
#pragma unroll
      for (int np = 0; np < NT / 2; np++) {
        u32 b0, b1, b2, b3;
        const int key = koff + np * 16 + (mi >> 1) * 8 + lr;
        const int col = kk * 32 + (mi & 1) * 16;
        // (TMA: key % 8 = lr)
        ldmatrix_x4(b0, b1, b2, b3,
                    TMA ? tma_k_row<D, TMA_KROW>(sK, key, col, lr)
                        : sK + key * S::K_PITCH + col);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          if (kk == 0) {
            mma_s8_c(si[mt][2 * np], qa[mt], b0, b1, MAGIC_I);
            mma_s8_c(si[mt][2 * np + 1], qa[mt], b2, b3, MAGIC_I);
          } else {
            mma_s8(si[mt][2 * np], qa[mt], b0, b1);
            mma_s8(si[mt][2 * np + 1], qa[mt], b2, b3);
          }
        }
      }
    }

    // ---- dequantize (one multiplier per thread), mask, online softmax
    // Never 0: -inf * 0 would be NaN for masked scores.
    const float mult = fmaxf(q_mult * k_scale, 1e-30f);
    const int key0 = j * BLK_K + koff;
    // S (int32) -> 2^23 + 2^22 + S as a float: exact and ordered like S;
    // the offset's subtraction is folded into the max and the exps' FFMA.
    // Called with a literal `mask` at two sites, so each inlined copy is
    // specialized and the common path carries no per-score compare and
    // select (as one loop the compiler if-converts the mask: ~50
    // instructions per step).
    float sf[MT][NT][4]; // offset scores, then P
    auto convert = [&](bool mask) {
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            float v = __int_as_float(si[mt][nt][e]); // 2^23 + 2^22 + S
            if (mask) {
              const int key = key0 + nt * 8 + 2 * t + (e & 1);
              const int row = row_base + mt * 16 + g + 8 * (e >> 1);
              if (key >= len_kv || (CAUSAL && key > row + causal_offset))
                v = neg_inf();
            }
            sf[mt][nt][e] = v;
          }
    };
    convert(mask);

    float o_scale[MT][2], beta[MT][2];
    // The step's exps and the row sums' update for rows (mt, hf), with c
    // from the max below.
    auto exps_row = [&](const int mt, const int hf, const float c, const float *pre = nullptr) {
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const float p = pre ? pre[2 * nt + e] : fast_exp2(fmaf(sf[mt][nt][2 * hf + e], mult, -c));
          sf[mt][nt][2 * hf + e] = p;
          if (!tc && !HSUM)
            sum += p;
        }
      d[mt][hf] = tc || HSUM ? d[mt][hf] * o_scale[mt][hf]
                             : d[mt][hf] * o_scale[mt][hf] + (D_FULL ? quad_sum(sum) : sum);
    };
    // O *= o_scale where a row max moved.  Once the row maxima settle,
    // o_scale is 1 for the whole warp: the multiply is skipped (a
    // warp-uniform branch; the two-level modes fold the scale into their
    // per-step fold instead).
    bool settled = false; // (VOTE1) no row's max moved in this step
    auto rescale_o = [&]() {
      if (VOTE1 && settled)
        return;
      bool rescale = false;
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
        rescale |= o_scale[mt][0] != 1.f || o_scale[mt][1] != 1.f;
      rescale = __any_sync(0xffffffffu, rescale);
      if (!TWO_LEVEL && rescale) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
          for (int nt = 0; nt < DN; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
              o[mt][nt][e] *= o_scale[mt][e >> 1];
      }
    };
    // The lane's max of row (mt, hf) in this step, scaled.  The multiplier
    // is positive, so the max commutes with it; the quad shares rows but
    // not k scales, so the scaling comes before the quad's shuffles.
    // (INT8 P rounds up here, in m_p and in c: see u8_bound)
    auto lane_max = [&](const int mt, const int hf) {
      float mx = neg_inf();
      if constexpr (IMAX) {
        int xi[2 * NT]; // the offset scores' bits
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
          xi[2 * nt] = __float_as_int(sf[mt][nt][2 * hf]);
          xi[2 * nt + 1] = __float_as_int(sf[mt][nt][2 * hf + 1]);
        }
        mx = __int_as_float(tree_imax<2 * NT>(xi));
      } else {
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
          mx = fmaxf(mx, fmaxf(sf[mt][nt][2 * hf], sf[mt][nt][2 * hf + 1]));
      }
      return I8 ? __fmul_ru(mx - MAGIC_F, mult) : (mx - MAGIC_F) * mult;
    };
    float c_row[MT][2];
    float vq[MT][2]; // (VOTE1) the lanes' row maxima, scaled
    // Row (mt, hf)'s reference max and exps offset from the quad's max mx.
    auto row_update = [&](const int mt, const int hf, const float mx) {
      // Lazy rescaling: the reference max moves only when the tile's max
      // exceeds it by more than TAU, so P <= 2^TAU (times the FP8 offset)
      // and most tiles skip the O rescale.
      const float m_old = m[mt][hf];
      const bool upd = mx > m_old + TAU;
      const float m_new = upd ? mx : m_old;
      // A row that has seen no key yet keeps m = -inf; use 0 as the
      // reference so that exp2 gives 0, never NaN.
      const float m_ref = m_new == neg_inf() ? 0.f : m_new;
      o_scale[mt][hf] = upd ? fast_exp2(m_old - m_ref) : 1.f;
      m[mt][hf] = m_new;
      // INT8 P: 255 at the row's max in this step (a row with no key
      // here: P = 0, beta = 0)
      if (I8)
        beta[mt][hf] = fast_exp2(mx - m_ref + I8_EXP);
      const float m_p = !I8 ? m_ref - P_OFFSET
                            : __fsub_ru(mx == neg_inf() ? 0.f : mx, P_OFFSET);
      // p = 2^((x - MAGIC_F) mult - sub) = 2^(x mult - c): one FFMA; x mult
      // rounds at 2^-24 of MAGIC_F mult, ~1e-5 in log2 units for real
      // scales, far below the INT8 score error.
      c_row[mt][hf] = I8 ? __fmaf_ru(MAGIC_F, mult, m_p) : fmaf(MAGIC_F, mult, F8 ? m_p : m_ref);
    };
    if (VOTE1) {
      // (see VOTE1) the warp votes first; the quad's shuffles and the
      // rescale run only where some lane's max passes its row's m + TAU
      bool up = false;
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
          vq[mt][hf] = lane_max(mt, hf);
          up |= vq[mt][hf] > m[mt][hf] + TAU;
        }
      settled = !__any_sync(0xffffffffu, up);
      // where no row's max passes m + TAU, row_update of a max of -inf
      // keeps every reference max (o_scale 1); a branch, so that the
      // settled steps skip the shuffles
      if (DEFER || settled) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
          for (int hf = 0; hf < 2; hf++)
            row_update(mt, hf, neg_inf());
      } else {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
          for (int hf = 0; hf < 2; hf++)
            row_update(mt, hf, quad_max(vq[mt][hf]));
      }
      // (DEFER: the chunked step takes the other branch after its first
      // chunks' exps)
      if (DEFER && !CHUNKED) {
        // (DEFER, unchunked) the first row's exps before the branch
        float pr[2 * NT];
        auto exps_pr = [&]() {
#pragma unroll
          for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++)
              pr[2 * nt + e] = fast_exp2(fmaf(sf[0][nt][e], mult, -c_row[0][0]));
        };
        exps_pr();
        if (!settled) {
#pragma unroll
          for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
              row_update(mt, hf, quad_max(vq[mt][hf]));
          if (EARLY_RESCALE)
            rescale_o();
          exps_pr();
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
          for (int hf = 0; hf < 2; hf++)
            exps_row(mt, hf, c_row[mt][hf], mt == 0 && hf == 0 ? pr : nullptr);
      } else if (!EARLY_RESCALE && !CHUNKED) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
          for (int hf = 0; hf < 2; hf++)
            exps_row(mt, hf, c_row[mt][hf]);
      }
    } else {
      // The loop as it was before VOTE1, written out rather than through
      // lane_max and row_update: the lambdas change ptxas's schedule, and
      // the kernels without the vote keep the code they were timed with.
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
          float mx = neg_inf();
          if constexpr (IMAX) {
            int xi[2 * NT]; // the offset scores' bits
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
              xi[2 * nt] = __float_as_int(sf[mt][nt][2 * hf]);
              xi[2 * nt + 1] = __float_as_int(sf[mt][nt][2 * hf + 1]);
            }
            mx = __int_as_float(tree_imax<2 * NT>(xi));
          } else {
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
              mx = fmaxf(mx, fmaxf(sf[mt][nt][2 * hf], sf[mt][nt][2 * hf + 1]));
          }
          // The multiplier is positive, so the max commutes with it; the quad
          // shares rows but not k scales, so scale before the shuffle.
          // (INT8 P rounds up here, in m_p and in c: see u8_bound)
          mx = quad_max(I8 ? __fmul_ru(mx - MAGIC_F, mult) : (mx - MAGIC_F) * mult);
          // Lazy rescaling: the reference max moves only when the tile's max
          // exceeds it by more than TAU, so P <= 2^TAU (times the FP8 offset)
          // and most tiles skip the O rescale.
          const float m_old = m[mt][hf];
          const bool upd = mx > m_old + TAU;
          const float m_new = upd ? mx : m_old;
          // A row that has seen no key yet keeps m = -inf; use 0 as the
          // reference so that exp2 gives 0, never NaN.
          const float m_ref = m_new == neg_inf() ? 0.f : m_new;
          o_scale[mt][hf] = upd ? fast_exp2(m_old - m_ref) : 1.f;
          m[mt][hf] = m_new;
          // INT8 P: 255 at the row's max in this step (a row with no key
          // here: P = 0, beta = 0)
          if (I8)
            beta[mt][hf] = fast_exp2(mx - m_ref + I8_EXP);
          const float m_p = !I8 ? m_ref - P_OFFSET
                                : __fsub_ru(mx == neg_inf() ? 0.f : mx, P_OFFSET);
          // p = 2^((x - MAGIC_F) mult - sub) = 2^(x mult - c): one FFMA; x mult
          // rounds at 2^-24 of MAGIC_F mult, ~1e-5 in log2 units for real
          // scales, far below the INT8 score error.
          c_row[mt][hf] = I8 ? __fmaf_ru(MAGIC_F, mult, m_p) : fmaf(MAGIC_F, mult, F8 ? m_p : m_ref);
          if (!EARLY_RESCALE && !CHUNKED)
            exps_row(mt, hf, c_row[mt][hf]);
        }
    }
    if (EARLY_RESCALE && !CHUNKED && !DEFER) {
      // the O rescale before the exps: the exps, the packing and P.V are
      // then one basic block (see EARLY_RESCALE)
      rescale_o();
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
          exps_row(mt, hf, c_row[mt][hf]);
    }

    // ---- P fragments (A operand of P.V), packed right away so that the
    // fp32 P values die here: 16-bit pairs or e4m3 quads.
    u32 pa[MT][KC][4];
    // P.V (and the row sums' P times ones) into fp32: the e4m3, bf16 or
    // fp16 mma of the family
    auto mma_p32 = [&](float *c, const u32 *pk, const u32 b0, const u32 b1) {
      if (F8 && !VH)
        mma_e4m3_f32(c, pk, b0, b1);
      else if (PV_BF16)
        mma_bf16_f32(c, pk, b0, b1);
      else
        mma_f16_f32(c, pk, b0, b1);
    };
    // P.V into an fp16 tile accumulator (fp32+fp16, fp16+fp32)
    auto mma_p16 = [&](u32 *c, const u32 *pk, const u32 b0, const u32 b1) {
      if (F8 && !VH)
        mma_e4m3_f16(c, pk, b0, b1);
      else
        mma_f16_f16(c, pk, b0, b1);
    };
    constexpr u32 P_ONES = F8 && !VH ? 0x38383838u : PV_BF16 ? 0x3F803F80u : 0x3C003C00u;
    // The B fragments of V for k-chunk kc and channel pair np: e4m3 V^T
    // rows (FP8) or 16-bit V rows transposed by ldmatrix
    auto v_frag = [&](const u8 *vb, const int kc, const int np, u32 &b0, u32 &b1, u32 &b2,
                      u32 &b3) {
      if (VH) {
        // fp16 V^T rows: b0 / b1 keys 0-7 / 8-15 of the chunk for channels
        // 0-7 of the pair, b2 / b3 for channels 8-15 (ch % 8 = lr)
        const int ch = np * 16 + (mi >> 1) * 8 + lr;
        const int c16 = ((koff + kc * 16) >> 3) + (mi & 1);
        ldmatrix_x4(b0, b1, b2, b3, sVh + ch * 128 + ((c16 ^ lr) << 4));
      } else if (F8) {
        const int ch = np * 16 + (mi >> 1) * 8 + lr;
        const int col = koff + kc * 32 + (mi & 1) * 16;
        // (TMA: 64-byte channel rows; ch % 8 = lr)
        ldmatrix_x4(b0, b1, b2, b3,
                    TMA ? vb + ch * BLK_K + (swz_chunk<BLK_K>(col >> 4, lr) << 4)
                        : vb + ch * S::V_PITCH + col);
      } else {
        const int tok = koff + kc * 16 + (mi & 1) * 8 + lr;
        const int ch = np * 16 + (mi >> 1) * 8;
        // (TMA: boxes of TMA_VCH channels in rows of TMA_VROW bytes;
        // tok % 8 = lr)
        ldmatrix_x4_trans(b0, b1, b2, b3,
                          TMA ? vb + (ch >> TMA_VLOG) * (BLK_K * TMA_VROW) +
                                    tok * TMA_VROW +
                                    (swz_chunk<TMA_VROW>((ch & (TMA_VCH - 1)) >> 3, lr) << 4)
                              : vb + tok * S::V_PITCH + ch * 2);
      }
    };
    auto pack_chunk = [&](const int mt, const int kc) {
      if (I8) {
        const float *s0 = sf[mt][4 * kc], *s1 = sf[mt][4 * kc + 1];
        const float *s2 = sf[mt][4 * kc + 2], *s3 = sf[mt][4 * kc + 3];
        pa[mt][kc][0] = pack4_u8(s0[0], s0[1], s1[0], s1[1]);
        pa[mt][kc][1] = pack4_u8(s0[2], s0[3], s1[2], s1[3]);
        pa[mt][kc][2] = pack4_u8(s2[0], s2[1], s3[0], s3[1]);
        pa[mt][kc][3] = pack4_u8(s2[2], s2[3], s3[2], s3[3]);
      } else if (VH) {
        // the fp16 A fragment of P rounded to e4m3 (exactly widened)
        const float *s0 = sf[mt][2 * kc], *s1 = sf[mt][2 * kc + 1];
        pa[mt][kc][0] = e4m3_round_f16x2(s0[0], s0[1]);
        pa[mt][kc][1] = e4m3_round_f16x2(s0[2], s0[3]);
        pa[mt][kc][2] = e4m3_round_f16x2(s1[0], s1[1]);
        pa[mt][kc][3] = e4m3_round_f16x2(s1[2], s1[3]);
      } else if (F8) {
        const float *s0 = sf[mt][4 * kc], *s1 = sf[mt][4 * kc + 1];
        const float *s2 = sf[mt][4 * kc + 2], *s3 = sf[mt][4 * kc + 3];
        pa[mt][kc][0] = (u32)pack_e4m3x2(s0[0], s0[1]) |
                        ((u32)pack_e4m3x2(s1[0], s1[1]) << 16);
        pa[mt][kc][1] = (u32)pack_e4m3x2(s0[2], s0[3]) |
                        ((u32)pack_e4m3x2(s1[2], s1[3]) << 16);
        pa[mt][kc][2] = (u32)pack_e4m3x2(s2[0], s2[1]) |
                        ((u32)pack_e4m3x2(s3[0], s3[1]) << 16);
        pa[mt][kc][3] = (u32)pack_e4m3x2(s2[2], s2[3]) |
                        ((u32)pack_e4m3x2(s3[2], s3[3]) << 16);
      } else {
        const float *s0 = sf[mt][2 * kc], *s1 = sf[mt][2 * kc + 1];
        if (PV_BF16) {
          pa[mt][kc][0] = pack2<BF16>(s0[0], s0[1]);
          pa[mt][kc][1] = pack2<BF16>(s0[2], s0[3]);
          pa[mt][kc][2] = pack2<BF16>(s1[0], s1[1]);
          pa[mt][kc][3] = pack2<BF16>(s1[2], s1[3]);
        } else {
          pa[mt][kc][0] = pack2<FP16>(s0[0], s0[1]);
          pa[mt][kc][1] = pack2<FP16>(s0[2], s0[3]);
          pa[mt][kc][2] = pack2<FP16>(s1[0], s1[1]);
          pa[mt][kc][3] = pack2<FP16>(s1[2], s1[3]);
        }
      }
    };
    if (!CHUNKED) {
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int kc = 0; kc < KC; kc++)
          pack_chunk(mt, kc);
      if (HSUM) {
        // (see HSUM) a row's fp16 P pairs: fragment registers hf and hf + 2
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
          for (int hf = 0; hf < 2; hf++) {
            u32 h = hadd2_f16(pa[mt][0][hf], pa[mt][0][hf + 2]);
#pragma unroll
            for (int kc = 1; kc < KC; kc++)
              h = hadd2_f16(h, hadd2_f16(pa[mt][kc][hf], pa[mt][kc][hf + 2]));
            d[mt][hf] += f16lo(h) + f16hi(h);
          }
      }
    }
    if (CHUNKED) {
      // exps, packing, row sums and P.V chunk by chunk (see CHUNKED)
      constexpr int NPK = NT / KC; // n-tiles of S per k-chunk (4 for e4m3 mma, else 2)
      // (DEFER) the first NDEF chunks' P, from the reference maxima before
      // the vote's branch and again after it where a row max moved
      constexpr int NP0 = DEFER ? NDEF * NPK : 1;
      float p0[DEFER ? MT : 1][NP0][4];
      auto exps0 = [&]() {
#pragma unroll
        for (int mt = 0; mt < (DEFER ? MT : 0); mt++)
#pragma unroll
          for (int nt = 0; nt < NP0; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
              p0[mt][nt][e] = fast_exp2(fmaf(sf[mt][nt][e], mult, -c_row[mt][e >> 1]));
      };
      if (DEFER) {
        exps0();
        if (!settled) {
#pragma unroll
          for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
              row_update(mt, hf, quad_max(vq[mt][hf]));
          rescale_o();
          exps0();
        }
      } else {
        rescale_o();
      }
      float rs[MT][2], dacc[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        rs[mt][0] = rs[mt][1] = 0.f;
        dacc[mt][0] = d[mt][0] * o_scale[mt][0];
        dacc[mt][2] = d[mt][1] * o_scale[mt][1];
        dacc[mt][1] = dacc[mt][3] = 0.f;
      }
#pragma unroll
      for (int kc = 0; kc < KC; kc++) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
#pragma unroll
          for (int q = 0; q < NPK; q++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
              const int nt = kc * NPK + q;
              const float p = DEFER && kc < NDEF
                                  ? p0[DEFER ? mt : 0][DEFER ? nt : 0][e]
                                  : fast_exp2(fmaf(sf[mt][nt][e], mult, -c_row[mt][e >> 1]));
              sf[mt][nt][e] = p;
              if (!tc)
                rs[mt][e >> 1] += p;
            }
          pack_chunk(mt, kc);
          if (tc)
            mma_p32(dacc[mt], pa[mt][kc], P_ONES, P_ONES);
        }
#pragma unroll
        for (int np = 0; np < DN / 2; np++) {
          u32 b0, b1, b2, b3;
          v_frag(sV, kc, np, b0, b1, b2, b3);
#pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            mma_p32(o[mt][2 * np], pa[mt][kc], b0, b1);
            mma_p32(o[mt][2 * np + 1], pa[mt][kc], b2, b3);
          }
        }
      }
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
          d[mt][hf] = tc ? dacc[mt][2 * hf]
                         : d[mt][hf] * o_scale[mt][hf] + (D_FULL ? quad_sum(rs[mt][hf]) : rs[mt][hf]);
    }

    // Row sums on the tensor core: P (as rounded for P.V) times a B of
    // ones gives the step's whole row sum in one mma per k-chunk and
    // m-tile, instead of an FADD per score and a quad sum at the end; the
    // denominator then sums exactly the P that the numerator multiplies.
    if (I8) {
      // the step's exact u8 row sums, folded into d like P.V into O
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        i32 acc[4] = {0, 0, 0, 0};
#pragma unroll
        for (int kc = 0; kc < KC; kc++)
          mma_u8(acc, pa[mt][kc], 0x01010101u, 0x01010101u);
        d[mt][0] = fma_ieee(__int_as_float(acc[0]), beta[mt][0], d[mt][0]);
        d[mt][1] = fma_ieee(__int_as_float(acc[2]), beta[mt][1], d[mt][1]);
      }
    } else if (tc && !CHUNKED) {
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        float acc[4] = {d[mt][0], 0.f, d[mt][1], 0.f};
#pragma unroll
        for (int kc = 0; kc < KC; kc++)
          mma_p32(acc, pa[mt][kc], P_ONES, P_ONES);
        d[mt][0] = acc[0];
        d[mt][1] = acc[2];
      }
    }

    // ---- O = O * o_scale + P V
    if (!EARLY_RESCALE && !CHUNKED)
      rescale_o();
#pragma unroll
    for (int grp = 0; grp < (CHUNKED ? 0 : TWO_LEVEL ? DN / 2 / GP : 1); grp++) {
      constexpr int NPG = TWO_LEVEL ? GP : DN / 2; // pairs in this pass
      float acc[TWO_LEVEL && !I8 ? MT : 1][TWO_LEVEL && !I8 ? 2 * GP : 1][4];
      i32 acci[I8 ? MT : 1][I8 ? 2 * GP : 1][4];
      u32 acc16[TILE_F16 ? MT : 1][TILE_F16 ? 2 * GP : 1][2];
      if (TWO_LEVEL) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
          for (int x = 0; x < 2 * GP; x++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
              if (I8)
                acci[I8 ? mt : 0][I8 ? x : 0][e] = 0;
              else
                acc[TWO_LEVEL && !I8 ? mt : 0][TWO_LEVEL && !I8 ? x : 0][e] = 0.f;
            }
            if (TILE_F16)
              acc16[TILE_F16 ? mt : 0][TILE_F16 ? x : 0][0] =
                  acc16[TILE_F16 ? mt : 0][TILE_F16 ? x : 0][1] = 0u;
          }
      }
      // Split V: a second pass over the k-chunks with the residual rows
      // (the same registers as the first, so no more pressure).
#pragma unroll
      for (int kv = 0; kv < (SPLIT ? 2 : 1) * KC; kv++) {
        const int kc = SPLIT ? kv % KC : kv;
        const u8 *sVp = SPLIT && kv >= KC ? sV + D * S::V_PITCH : sV;
#pragma unroll
        for (int pi = 0; pi < NPG; pi++) {
          const int np = grp * NPG + pi;
          u32 b0, b1, b2, b3;
          v_frag(sVp, kc, np, b0, b1, b2, b3); // sVp is sV unless split V
          if (!F8 && DT == BF16 && !PV_BF16) {
            // bf16 V entering fp16 arithmetic (fp16+fp32 mode).
            b0 = pack2_f16_sat(bf2f((u16)(b0 & 0xffff)), bf2f((u16)(b0 >> 16)));
            b1 = pack2_f16_sat(bf2f((u16)(b1 & 0xffff)), bf2f((u16)(b1 >> 16)));
            b2 = pack2_f16_sat(bf2f((u16)(b2 & 0xffff)), bf2f((u16)(b2 >> 16)));
            b3 = pack2_f16_sat(bf2f((u16)(b3 & 0xffff)), bf2f((u16)(b3 >> 16)));
          }
#pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            const int x0 = TWO_LEVEL ? 2 * pi : 0, x1 = TWO_LEVEL ? 2 * pi + 1 : 0;
            const int am = TWO_LEVEL ? mt : 0;
            if (I8) {
              mma_u8(acci[I8 ? mt : 0][I8 ? x0 : 0], pa[mt][kc], b0, b1);
              mma_u8(acci[I8 ? mt : 0][I8 ? x1 : 0], pa[mt][kc], b2, b3);
            } else if (TILE_F16) {
              mma_p16(acc16[TILE_F16 ? mt : 0][TILE_F16 ? 2 * pi : 0], pa[mt][kc], b0, b1);
              mma_p16(acc16[TILE_F16 ? mt : 0][TILE_F16 ? 2 * pi + 1 : 0], pa[mt][kc], b2, b3);
            } else if (TWO_LEVEL) { // (FP8PV's fp32+fp32)
              mma_p32(acc[TWO_LEVEL && !I8 ? am : 0][TWO_LEVEL && !I8 ? x0 : 0], pa[mt][kc], b0, b1);
              mma_p32(acc[TWO_LEVEL && !I8 ? am : 0][TWO_LEVEL && !I8 ? x1 : 0], pa[mt][kc], b2, b3);
            } else {
              mma_p32(o[mt][2 * np], pa[mt][kc], b0, b1);
              mma_p32(o[mt][2 * np + 1], pa[mt][kc], b2, b3);
            }
          }
        }
      }
      if (TWO_LEVEL) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
          for (int x = 0; x < 2 * GP; x++) {
            float tv[4];
            if (TILE_F16) {
              const u32 *a16 = acc16[TILE_F16 ? mt : 0][TILE_F16 ? x : 0];
              tv[0] = f16lo(a16[0]);
              tv[1] = f16hi(a16[0]);
              tv[2] = f16lo(a16[1]);
              tv[3] = f16hi(a16[1]);
            } else if (!I8) {
#pragma unroll
              for (int e = 0; e < 4; e++)
                tv[e] = acc[TWO_LEVEL && !I8 ? mt : 0][TWO_LEVEL && !I8 ? x : 0][e];
            }
            const int nt = grp * 2 * GP + x;
            if (I8) {
#pragma unroll
              for (int e = 0; e < 4; e++)
                o[mt][nt][e] = fma_ieee(__int_as_float(acci[I8 ? mt : 0][I8 ? x : 0][e]),
                                        beta[mt][e >> 1], o[mt][nt][e] * o_scale[mt][e >> 1]);
              continue;
            }
#pragma unroll
            for (int e = 0; e < 4; e++)
              o[mt][nt][e] = o[mt][nt][e] * o_scale[mt][e >> 1] + tv[e];
          }
      }
    }
    }; // step
#pragma unroll 1
    for (int sub = 0; sub < BLK_K / KSUB; sub++) {
      const int key0 = j * BLK_K + sub * KSUB;
      // Keys that no row of this warp sees (past the sequence, or after
      // the warp's last row under the causal mask): the step would leave
      // m, d and O as they are.  Warp-uniform, and the step has no barrier.
      if (key0 >= len_kv || (CAUSAL && key0 > row_base + WARP_Q - 1 + causal_offset))
        break;
      if (key0 + KSUB > len_kv || (CAUSAL && key0 + KSUB - 1 > row_base + causal_offset))
        step(sub, true);
      else
        step(sub, false);
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (VH) {
      // the next tile's fp16 V copy, published by the barrier at its top
      // (every warp is past the one of this tile, so done with the copy
      // of tile j - 1 that this one overwrites)
      if (j + 1 < n_tiles) {
        mbar_wait(tbar0 + 8 * ((j + 1) % STAGES), ((j + 1) / STAGES) & 1);
        vh_convert(j + 1);
      }
    }
#endif
    if (STAGES == 2 || (STAGES == 1 && j + 1 < n_tiles))
      __syncthreads(); // the stage read here is refilled next
  }

  // ---- epilogue: normalize, undo V scaling, stage in shared memory,
  // store 16-byte chunks of whole rows
  constexpr int O_PITCH = 2 * D + 16;
  __syncthreads(); // every warp is done with sQ/sK/sV
  u8 *sO = smem;
  const bool smooth_v = (a.flags & SJ_F_SMOOTH_V) != 0;
  // REREAD: the coordinates again, read afresh (cta_coord_reread), so
  // that nothing of them but row_base stays live across the loop.
  const CtaCoord ce = REREAD ? cta_coord_reread(a, true) : cc;
  const int eq0 = REREAD ? ce.qblk * BLK_Q : q0;
  const i64 ebhk = REREAD ? (i64)ce.b * G.heads_kv + ce.h / (G.heads_q / G.heads_kv) : bhk;
  const Seq esq = REREAD ? seq_q(G, ce.b) : sq;
  const i64 lse0 = lse_row0(G, esq, ce.b, ce.h);
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
      const float dsum = D_FULL ? d[mt][hf] : quad_sum(d[mt][hf]);
      const int lrow = warp * WARP_Q + mt * 16 + g + 8 * hf;
      const int row = eq0 + lrow;
      const float inv = dsum > 0.f ? 1.0f / dsum : 0.f;
#pragma unroll
      for (int nt = 0; nt < DN; nt++) {
        const int ch = nt * 8 + 2 * t;
        // (INT8 P.V: V was stored + 128; a row with no key stays 0)
        const float off = I8 && dsum > 0.f ? -128.f : 0.f;
        float v0 = fmaf(o[mt][nt][2 * hf], inv, off), v1 = fmaf(o[mt][nt][2 * hf + 1], inv, off);
        if (F8) {
          const float *vs = (const float *)a.v_scale + ebhk * D;
          v0 *= vs[ch];
          v1 *= vs[ch + 1];
        }
        if (smooth_v && dsum > 0.f) {
          const float *vm = (const float *)a.v_mean + ebhk * D;
          v0 += vm[ch];
          v1 += vm[ch + 1];
        }
        *(u32 *)(sO + lrow * O_PITCH + ch * 2) = pack2<DT>(v0, v1);
      }
      if ((a.flags & SJ_F_LSE) && t == 0 && row < esq.len)
        store_lse(a, lse0, row, m[mt][hf], dsum, L_OFFSET);
    }
  __syncthreads();
  store_o_rows<D>(a, esq, ce.b, ce.h, eq0, sO, O_PITCH, threadIdx.x, NTHREADS);
}

// ACC_PVI8_SPLITV (FP8PV) holds both the pvi8 and the split V body; each
// CTA runs the one kv_finalize chose for its (batch, kv head) (a uniform
// branch before the loop).  The runtime sizes the shared memory and the
// stages for split V's larger tiles (runtime/spec.c), which either body
// then uses with its own layout.
//
// At D = 32 the two bodies take 178 registers (causal 184) where pvi8 alone
// takes 160 (167): two CTAs per multiprocessor instead of three, 11-15 %
// slower than pvi8 alone on the H100.  Asking for three (168 registers,
// 56 / 64 bytes of spills) measured +10 to +16 % (forty-third session,
// bench/NOTES.md).  Every other instance gets 0, no minimum, which leaves
// its cubin as it was (an explicit 1 changes ptxas's allocation).
// The kernel takes sj_attn_args, or with TMA tiles sj_wgmma_args (the two
// tensor maps tk and tv in front of it; runtime/attention.c mma_tma_maps).
// VH (TMA tiles, FP8PV's e4m3 modes): P.V as fp16 mma on e4m3 values
// (attn_mma_body; runtime/spec.c mma_vh picks it, on sm_90).
template <int FAM, int DT, int D, bool CAUSAL, int ACC, int WARP_Q, int STAGES, int KSUB,
          bool TMA = false, bool VH = false>
__global__ void __launch_bounds__(BLK_Q / WARP_Q * 32,
                                  ACC == ACC_PVI8_SPLITV && D == 32 ? 3 : 0)
    attn_mma(const __grid_constant__ typename MmaArgs<TMA>::type p) {
  const sj_attn_args &a = p.a;
  const sj_tmap *tm = MmaArgs<TMA>::maps(p);
  u32x4 qraw[WARP_Q / 8][D / 32];
  if constexpr (ACC == ACC_PVI8_SPLITV) {
    static_assert(FAM == FP8PV, "pvi8+splitv is an FP8PV mode");
    const sj_geom &G = a.g;
    const CtaCoord cc = cta_coord(a, CAUSAL);
    const int q0 = cc.qblk * BLK_Q;
    const Seq sq = seq_q(G, cc.b);
    if (q0 >= sq.len)
      return; // uniform over the CTA, before any barrier
    if (a.quant != PER_BLOCK && (a.flags & SJ_F_Q_FUSED))
      fq_load<D, WARP_Q / 8>(a, sq, cc.b, cc.h, q0 + (int)threadIdx.x / 32 * WARP_Q,
                             threadIdx.x % 32, qraw);
    pdl_wait(); // kv_finalize's choice, and everything the quantizer wrote
    const int hk = cc.h / (G.heads_q / G.heads_kv);
    if (((const u8 *)a.v_mode)[(i64)cc.b * G.heads_kv + hk])
      attn_mma_body<FAM, DT, D, CAUSAL, ACC_PVI8, WARP_Q, STAGES, KSUB, true, TMA>(a, qraw, tm);
    else
      attn_mma_body<FAM, DT, D, CAUSAL, ACC_FP32_FP32_SPLITV, WARP_Q, STAGES, KSUB, true,
                    false>(a, qraw, tm);
  } else {
    attn_mma_body<FAM, DT, D, CAUSAL, ACC, WARP_Q, STAGES, KSUB, false, TMA, VH>(a, qraw, tm);
  }
}
} // namespace sj
