// sj_quant.cuh -- preprocessing: K/V statistics, Q/K INT8 quantization and
// V transpose + permute + e4m3 quantization.
//
// Pass 1 (kv_stats): per (batch, kv head, chunk of tokens) partial sums of K
//   and V and the max/min of V, per channel, and the sum of V^2.
// Pass 2 (kv_finalize): per (batch, kv head) the K mean, V mean and V scale
//   (and under pvi8+splitv the choice of V's format).  By default pass 1
//   does it (SJ_F_FINALIZE): the last chunk of each head to finish.
// Pass 3 (quant_qkv): one launch quantizes Q blocks, K blocks and V blocks.
#pragma once
#include "sj_abi.h"
#include "sj_common.cuh"
#include "sj_geom.cuh"

namespace sj {

// Threads per row when each thread owns 8 consecutive channels (16 bytes),
// rounded up to a power of two so that a row's lanes form a shuffle group.
template <int D> struct RowMap {
  static constexpr int CHUNKS = D / 8;
  static constexpr int TPR =
      CHUNKS <= 4 ? 4 : (CHUNKS <= 8 ? 8 : (CHUNKS <= 16 ? 16 : 32));
};

// ------------------------------------------------------------------ pass 1
// The keys of a sequence of len that K's mean covers: every stride-th.
__device__ __forceinline__ int k_stride(int len, int k_sample) {
  return k_sample > 1 && len >= SJ_K_SAMPLE_MIN * k_sample ? k_sample : 1;
}

inline constexpr int STATS_THREADS = 256;
inline constexpr int STATS_MIN_CTAS = SJ_STATS_CTAS; // the host sizes the grid to one wave
// Rows stream through shared memory with cp.async: STATS_STAGES stages of
// STATS_UNROLL passes (a pass is a row per thread group), two stages in
// flight while the thread sums the third.  Registers held the loads
// before (80 registers and spills at three CTAs per multiprocessor, a
// bubble between each round of loads and its use: 1.6-2.1 TB/s).
inline constexpr int STATS_STAGES = 3;
inline constexpr int STATS_UNROLL = 2;

// Shared memory of stats_chunk: the stages, and the reduction after them.
template <int D> struct StatsSmem {
  static constexpr int ROWS = STATS_THREADS / RowMap<D>::TPR;
  static constexpr int STAGE_BYTES = STATS_STAGES * 2 * STATS_UNROLL * STATS_THREADS * 16;
  static constexpr int RED_BYTES = ROWS * (D + 1) * 4;
  static constexpr int BYTES = STAGE_BYTES > RED_BYTES ? STAGE_BYTES : RED_BYTES;
};

// The partial statistics of chunk c of (batch b, kv head h), as described
// in sj_abi.h.  smem: StatsSmem<D>::BYTES, 16-byte aligned.
template <int DT, int D>
__device__ __forceinline__ void stats_chunk(const sj_stats_args &a, int c, int h, int b,
                                            u8 *smem) {
  typedef RowMap<D> M;
  constexpr int ROWS = STATS_THREADS / M::TPR;
  constexpr int PER_STAGE = STATS_UNROLL * ROWS;
  // A thread reads back only the pieces it copied itself, so the stages
  // need no barrier (cp.async.wait_group is per thread); the reduction at
  // the end reuses the memory.
  typedef u32x4 Stage[2][STATS_UNROLL][STATS_THREADS]; // [0: K, 1: V]
  Stage *st = (Stage *)smem;
  const int lane_c = threadIdx.x % M::TPR, row0 = threadIdx.x / M::TPR;
  const bool active = lane_c < M::CHUNKS;
  const Seq sq = seq_at(a.cu_kv, b, a.total_kv, a.seq_kv);
  const bool varlen = a.cu_kv != 0;
  const int n0 = c * a.chunk;
  const int n1 = min(sq.len, n0 + a.chunk);
  const u8 *kb = (const u8 *)a.k + (user_base(varlen, sq, b, a.k_sb, a.k_sn) + (i64)h * a.k_sh) * 2;
  const u8 *vb = (const u8 *)a.v + (user_base(varlen, sq, b, a.v_sb, a.v_sn) + (i64)h * a.v_sh) * 2;

  float ks[8], vs[8];
  // V's max and min in the input type, two channels a word (the max of
  // 16-bit values is one of them: exact, and 8 registers fewer)
  u32 vmax[4], vmin[4];
  float vsq = 0.f; // sum of V^2 over the thread's rows and 8 channels
#pragma unroll
  for (int i = 0; i < 8; i++) {
    ks[i] = 0.f;
    vs[i] = 0.f;
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    vmax[i] = DT == BF16 ? 0xff80ff80u : 0xfc00fc00u; // -inf
    vmin[i] = vmax[i] ^ 0x80008000u;                  // +inf
  }
  const bool do_k = (a.flags & SJ_F_K_STATS) != 0, do_v = (a.flags & SJ_F_V_STATS) != 0;
  // K's mean from every k_sample-th key (SJ_K_SAMPLE_MIN): a quarter of
  // K's reads (chunks start at multiples of 64, so the keys are the same
  // whatever the chunking)
  const int kmask = k_stride(sq.len, a.k_sample) - 1;
  // The thread's rows, in order: n0 + row0 + ROWS j (as summed before the
  // staging, so the sums are the same bit for bit)
  const int nst = n1 > n0 ? (n1 - n0 + PER_STAGE - 1) / PER_STAGE : 0;
  // SJ_F_L2_KEEP_V: V stays in the L2 for quant_qkv's read of it (at 1K,
  // D = 128, B = 4, H = 32 V is 33.5 MB of the H100's 50 MB), and K's
  // sampled rows do not push it out (bench/NOTES.md, p18)
  const bool keep = (a.flags & SJ_F_L2_KEEP_V) != 0;
  const unsigned long long pol_v = l2_policy(keep, true), pol_k = l2_policy(keep, false);
  auto issue = [&](int t) { // stage t's copies as one group (maybe empty)
    const int slot = t % STATS_STAGES;
#pragma unroll
    for (int u = 0; u < STATS_UNROLL; u++) {
      const int m = n0 + t * PER_STAGE + u * ROWS + row0;
      if (active && m < n1) {
        if (do_k && (m & kmask) == 0)
          cp_async16_hint(&st[slot][0][u][threadIdx.x], kb + (i64)m * a.k_sn * 2 + lane_c * 16,
                          16, pol_k);
        if (do_v)
          cp_async16_hint(&st[slot][1][u][threadIdx.x], vb + (i64)m * a.v_sn * 2 + lane_c * 16,
                          16, pol_v);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int t = 0; t < STATS_STAGES - 1; t++)
    issue(t);
  for (int t = 0; t < nst; t++) {
    issue(t + STATS_STAGES - 1); // into the slot summed at t - 1
    cp_async_wait<STATS_STAGES - 1>();
    if (!active)
      continue;
    const int slot = t % STATS_STAGES;
#pragma unroll
    for (int u = 0; u < STATS_UNROLL; u++) {
      const int m = n0 + t * PER_STAGE + u * ROWS + row0;
      if (m >= n1)
        break;
      float x[8];
      if (do_k && (m & kmask) == 0) { // unsampled rows would add zeros
        unpack8<DT>(st[slot][0][u][threadIdx.x], x);
#pragma unroll
        for (int i = 0; i < 8; i++)
          ks[i] += x[i];
      }
      if (do_v) {
        const u32x4 w = st[slot][1][u][threadIdx.x];
        const u32 wv[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
          vmax[i] = max2<DT>(vmax[i], wv[i]);
          vmin[i] = min2<DT>(vmin[i], wv[i]);
        }
        unpack8<DT>(w, x);
#pragma unroll
        for (int i = 0; i < 8; i++) {
          vs[i] += x[i];
          vsq = fmaf(x[i], x[i], vsq);
        }
      }
    }
  }
  cp_async_wait<0>(); // (the groups past the last stage are empty)
  __syncthreads();    // every stage read before red overwrites it
  float (&red)[ROWS][D + 1] = *(float (*)[ROWS][D + 1])smem;
  float *out = (float *)a.partial +
               ((((i64)b * a.heads_kv + h) * a.nchunk + c) * SJ_STATS_ROWS) * D;
  // Reduce the statistics one after another through shared memory (the
  // sum of squares per group of 8 channels, at the group's first entry).
#pragma unroll
  for (int s = 0; s < SJ_STATS_ROWS; s++) {
    if (active) {
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const u32 mw = s == 2 ? vmax[i / 2] : vmin[i / 2];
        const float mm = to_f32<DT>((u16)(i % 2 ? mw >> 16 : mw & 0xffffu));
        float v = s == 0   ? ks[i]
                  : s == 1 ? vs[i]
                  : s <= 3 ? mm
                           : (i == 0 ? vsq : 0.f);
        red[row0][lane_c * 8 + i] = v;
      }
    }
    __syncthreads();
    for (int ch = threadIdx.x; ch < D; ch += STATS_THREADS) {
      float acc = s == 2 ? neg_inf() : (s == 3 ? -neg_inf() : 0.f);
      for (int r = 0; r < ROWS; r++) {
        float v = red[r][ch];
        acc = s == 2 ? fmaxf(acc, v) : (s == 3 ? fminf(acc, v) : acc + v);
      }
      out[s * D + ch] = acc;
    }
    __syncthreads();
  }
}

template <int D>
__device__ __forceinline__ void finalize_head(const sj_finalize_args &a, int h, int b,
                                              float (*red)[8], int *s_i8);

// SJ_F_FINALIZE: the chunk that finishes its head's count reduces the
// head's partials (the other chunks' writes made visible by the fences
// around the count, the partials read through L2) and zeroes the count.
template <int DT, int D>
__global__ void __launch_bounds__(STATS_THREADS, STATS_MIN_CTAS)
    kv_stats(const sj_stats_args a) {
  typedef StatsSmem<D> S;
  static_assert(S::BYTES >= 2 * 8 * 4 + 4, "finalize_head's scratch");
  static_assert(S::BYTES == SJ_STATS_SMEM, "the runtime's wave size");
  __shared__ __align__(16) u8 smem[S::BYTES];
  pdl_wait();
  pdl_launch_next();
  const int h = blockIdx.y, b = blockIdx.z;
  stats_chunk<DT, D>(a, blockIdx.x, h, b, smem); // ends in a barrier
  if (!(a.flags & SJ_F_FINALIZE))
    return;
  u32 *count = (u32 *)a.ticket + ((i64)b * a.heads_kv + h);
  int *s_last = (int *)smem + 16;
  if (threadIdx.x == 0) {
    __threadfence(); // this chunk's partials before its count
    *s_last = atomicAdd(count, 1u) == (u32)(a.nchunk - 1);
  }
  __syncthreads();
  if (!*s_last)
    return;
  __threadfence(); // the other chunks' partials after their counts
  if (threadIdx.x == 0)
    *count = 0u; // every chunk has counted: zero for the next launch
  finalize_head<D>(a.fin, h, b, (float (*)[8])smem, (int *)smem + 17);
}

// ------------------------------------------------------------------ pass 2
// The reduction of one (batch, kv head), a thread per channel; red, s_i8:
// shared scratch of 16 floats and an int.  The partials are read through
// L2 (ld.cg): under SJ_F_FINALIZE other CTAs of the same launch wrote them.
template <int D>
__device__ __forceinline__ void finalize_head(const sj_finalize_args &a, int h, int b,
                                              float (*red)[8], int *s_i8) {
  static_assert(D <= 256, "a thread per channel");
  const int ch = threadIdx.x;
  const i64 bh = (i64)b * a.heads_kv + h;
  const float *p = (const float *)a.partial + bh * a.nchunk * SJ_STATS_ROWS * D;
  const int len = seq_at(a.cu_kv, b, a.total_kv, a.seq_kv).len;
  const float inv_n = len > 0 ? 1.0f / (float)len : 0.f;
  const int kst = k_stride(len, a.k_sample); // K's mean: every kst-th key
  const int ks_n = (len + kst - 1) / kst;
  const float inv_kn = ks_n > 0 ? 1.0f / (float)ks_n : 0.f;
  const bool v_auto = (a.flags & SJ_F_V_AUTO) != 0;
  float amax = 0.f, vsq = 0.f;
  if (ch < D) {
    float ks = 0.f, vs = 0.f, vmax = neg_inf(), vmin = -neg_inf();
    for (int c = 0; c < a.nchunk; c++) {
      const float *q = p + (i64)c * SJ_STATS_ROWS * D;
      ks += __ldcg(q + ch);
      vs += __ldcg(q + D + ch);
      vmax = fmaxf(vmax, __ldcg(q + 2 * D + ch));
      vmin = fminf(vmin, __ldcg(q + 3 * D + ch));
      vsq += __ldcg(q + 4 * D + ch);
    }
    if (a.flags & SJ_F_SMOOTH_K)
      ((float *)a.k_mean)[bh * D + ch] = ks * inv_kn;
    if (a.flags & SJ_F_V_STATS) {
      float mean = (a.flags & SJ_F_SMOOTH_V) ? vs * inv_n : 0.f;
      amax = fmaxf(vmax - mean, mean - vmin);
      // A NaN or Inf in V makes the scale non-finite; the output then shows
      // it (documented), it never reads out of bounds.
      amax = fmaxf(amax, 1e-7f);
      if (a.flags & SJ_F_SMOOTH_V)
        ((float *)a.v_mean)[bh * D + ch] = mean;
    }
  }
  if (!(a.flags & SJ_F_V_STATS))
    return;
  float vmax_v = a.v_scale_max;
  if (v_auto) {
    // R = sum_c amax_c^2 / sum_c mean(v_c^2) over the head (PVI8_R_MAX);
    // an empty sequence or a non-finite V gives no finite R: split V
    float num = amax * amax, den = vsq;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      num += __shfl_xor_sync(0xffffffffu, num, o);
      den += __shfl_xor_sync(0xffffffffu, den, o);
    }
    if (ch % 32 == 0) {
      red[0][ch / 32] = num;
      red[1][ch / 32] = den;
    }
    __syncthreads();
    if (ch == 0) {
      float n = 0.f, d = 0.f;
      for (int w = 0; w < 8; w++) { // in order: the same R every call
        n += red[0][w];
        d += red[1][w];
      }
      const float r = n / (d * inv_n);
      *s_i8 = r <= PVI8_R_MAX ? 1 : 0; // false for NaN
      ((u8 *)a.v_mode)[bh] = (u8)*s_i8;
    }
    __syncthreads();
    vmax_v = *s_i8 ? 127.f : 448.f;
  }
  if (ch < D)
    ((float *)a.v_scale)[bh * D + ch] = amax / vmax_v;
}

// One CTA per (batch, kv head), a thread per channel.
template <int D>
__global__ void __launch_bounds__(256) kv_finalize(const sj_finalize_args a) {
  __shared__ float red[2][8];
  __shared__ int s_i8;
  pdl_wait(); // the partial sums of kv_stats
  pdl_launch_next();
  finalize_head<D>(a, blockIdx.x, blockIdx.y, red, &s_i8);
}

// ------------------------------------------------------------------ pass 3
inline constexpr int QUANT_THREADS = 256;
// Four CTAs per multiprocessor (64 registers): each CTA has one round of
// loads in flight, so occupancy is what keeps DRAM busy (73 registers and
// three CTAs left it at 71 % of a device copy).
inline constexpr int QUANT_MIN_CTAS = 4;
// Five (48 registers) where measured faster: D <= 64 (no spills; H200
// prep at 1K / 4K / 16K -10 / -7 / -9 %) and D = 128 on sm_90 (80 bytes of
// spills, yet prep -4 / -5 % at 1K / 4K: occupancy pays more than the
// spills cost there; bench/NOTES.md p13).
template <int D> struct QuantMinCtas {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
  static constexpr int value = D <= 128 && D != 96 ? 5 : QUANT_MIN_CTAS;
#else
  static constexpr int value = D <= 64 ? 5 : QUANT_MIN_CTAS;
#endif
};

// The Q/K scale granularity qg (SJ_QUANT_*) is sj_quant_args.quant, a
// kernel argument like the attention kernels' (one quantizer serves the
// three; it changes only the group bookkeeping below, once per block).
// Scale groups of a Q block (WARP_Q-row warps) or of a 64-key K block.
template <int WARP_Q, bool IS_K> __device__ constexpr int n_groups(int qg) {
  if (IS_K)
    return qg == PER_THREAD ? 4 : 1;
  return qg == PER_BLOCK ? 1 : (qg == PER_WARP ? BLK_Q / WARP_Q : BLK_Q / WARP_Q * 8);
}
// Scale group of row r inside its block (see docs/kernels.md).
template <int WARP_Q, bool IS_K> __device__ __forceinline__ int row_group(int qg, int r) {
  if (IS_K)
    return qg == PER_THREAD ? (r % 8) / 2 : 0;
  if (qg == PER_BLOCK)
    return 0;
  if (qg == PER_WARP)
    return r / WARP_Q;
  return (r / WARP_Q) * 8 + (r % 8);
}
// Row k (0 <= k < ROWS / groups) of scale group g: the inverse of
// row_group above.
template <int WARP_Q, bool IS_K>
__device__ __forceinline__ int group_row(int qg, int g, int k) {
  if (IS_K)
    return qg == PER_THREAD ? 8 * (k / 2) + 2 * g + (k % 2) : k;
  if (qg == PER_BLOCK)
    return k;
  if (qg == PER_WARP)
    return g * WARP_Q + k;
  return (g / 8) * WARP_Q + g % 8 + 8 * k;
}

// Group scales of one block for granularity QG: amax / 127 over the rows
// of each group, TPG threads per group each taking a strided share of its
// rows, then a shuffle max (a single thread walking all rows cost ~2 us
// per block).  Writes each group's inverse scale to s_scale and its scale
// to the block's place in scales (block index blk_i): Q's NGROUPS per
// block, K's four per 64-key block whatever the granularity (the
// attention kernels read lane t's at 4 blk + t; a coarser one repeats its
// own).
template <int QG, int WARP_Q, int ROWS, bool IS_K>
__device__ __forceinline__ void group_scales(const float *s_amax, float *s_scale,
                                             float *scales, i64 blk_i) {
  constexpr int NGROUPS = n_groups<WARP_Q, IS_K>(QG);
  float *dst = scales + blk_i * (IS_K ? 4 : NGROUPS);
  constexpr int RPG = ROWS / NGROUPS; // rows per group
  constexpr int TPG0 = QUANT_THREADS / NGROUPS;
  constexpr int TPG = TPG0 > 32 ? 32 : TPG0;
  const int g = threadIdx.x / TPG, li = threadIdx.x % TPG;
  float m = 0.f;
  if (g < NGROUPS) {
#pragma unroll
    for (int k = li; k < RPG; k += TPG)
      m = fmaxf(m, s_amax[group_row<WARP_Q, IS_K>(QG, g, k)]);
  }
  m = group_max<TPG>(m);
  if (g < NGROUPS && li == 0) {
    const float scale = m / 127.f;
    s_scale[g] = scale > 0.f ? 1.0f / scale : 0.f; // its inverse, once per group
    if (IS_K) {
#pragma unroll
      for (int c = g; c < 4; c += NGROUPS)
        dst[c] = scale;
    } else {
      dst[g] = scale;
    }
  }
}

// Quantizes one block of ROWS rows of Q (IS_K false) or K (IS_K true).
template <int DT, int D, int WARP_Q, int ROWS, bool IS_K>
__device__ __forceinline__ void quant_rows(const sj_quant_args &a, int blk,
                                           int h, int b, float *s_amax,
                                           float *s_scale) {
  typedef RowMap<D> M;
  constexpr int RPP = QUANT_THREADS / M::TPR; // rows per pass
  constexpr int ITER = (ROWS + RPP - 1) / RPP;
  const int qg = a.quant;

  const int lane_c = threadIdx.x % M::TPR, rsub = threadIdx.x / M::TPR;
  const bool active = lane_c < M::CHUNKS;
  const sj_geom &G = a.g;
  const Seq sq = IS_K ? seq_kv(G, b) : seq_q(G, b);
  const bool varlen = (IS_K ? G.cu_kv : G.cu_q) != 0;
  const int seq = sq.len;
  const int seq_pad = (seq + ROWS - 1) / ROWS * ROWS;
  const int r0 = blk * ROWS;
  if (r0 >= seq_pad)
    return; // past this sequence (varlen); uniform over the CTA
  const int heads = IS_K ? G.heads_kv : G.heads_q;
  const i64 bh = (i64)b * heads + h;
  const int kvh = IS_K ? h : h / (G.heads_q / G.heads_kv);
  const i64 bhk = (i64)b * G.heads_kv + kvh;
  const u8 *src = IS_K ? (const u8 *)a.k + (user_base(varlen, sq, b, a.k_sb, a.k_sn) + (i64)h * a.k_sh) * 2
                       : (const u8 *)a.q + (user_base(varlen, sq, b, a.q_sb, a.q_sn) + (i64)h * a.q_sh) * 2;
  const i64 src_sn = (IS_K ? a.k_sn : a.q_sn) * 2;
  const i64 stat0 = IS_K ? 0 : lse_row0(G, sq, b, h);

  // The K mean of this (batch, kv head), for the thread's 8 channels.
  float mean[8];
  const bool smooth = (a.flags & SJ_F_SMOOTH_K) != 0;
  if (smooth && active) {
    load8_f32((const float *)a.k_mean + bhk * D + lane_c * 8, mean);
  } else {
#pragma unroll
    for (int i = 0; i < 8; i++)
      mean[i] = 0.f;
  }

  // The thread's piece of its first row, RPP rows further each pass (a
  // 64-bit product per row cost ~30 instructions of address arithmetic)
  const u8 *rp = src + (i64)(r0 + rsub) * src_sn + lane_c * 16;
  const i64 rstep = (i64)RPP * src_sn;
  u32x4 raw[ITER];
#pragma unroll
  for (int it = 0; it < ITER; it++, rp += rstep) {
    const int r = it * RPP + rsub;
    const int n = r0 + r;
    float amax = 0.f, dot = 0.f;
    raw[it].x = raw[it].y = raw[it].z = raw[it].w = 0u;
    if (active && r < ROWS && n < seq) {
      // K's last read: evict_first under SJ_F_L2_KEEP_V
      raw[it] = IS_K ? ld_global16_hint(rp, l2_policy((a.flags & SJ_F_L2_KEEP_V) != 0, false))
                     : ld_global16(rp);
      float x[8];
      unpack8<DT>(raw[it], x);
#pragma unroll
      for (int i = 0; i < 8; i++) {
        float v = IS_K ? x[i] - mean[i] : x[i] * a.q_prescale;
        amax = fmaxf(amax, fabsf(v));
        dot += x[i] * mean[i];
      }
    }
    amax = group_max<M::TPR>(amax);
    if (r < ROWS && lane_c == 0)
      s_amax[r] = amax;
    if (!IS_K && smooth && (a.flags & SJ_F_LSE)) {
      dot = group_sum<M::TPR>(dot);
      if (lane_c == 0 && r < ROWS && n < seq)
        ((float *)a.qk_mean)[stat0 + n] = dot;
    }
  }
  __syncthreads();
  // Group scales, specialized per granularity (a uniform switch: with
  // the group count a run-time value this section cost the quantizer 2-5 %
  // at D = 64 on the H200)
  {
    float *sc = (float *)(IS_K ? a.k_scale : a.q_scale);
    const i64 blk_i = bh * (IS_K ? G.n_kblk : G.n_qblk) + blk;
    if (IS_K) {
      if (qg == PER_THREAD)
        group_scales<PER_THREAD, WARP_Q, ROWS, true>(s_amax, s_scale, sc, blk_i);
      else
        group_scales<PER_BLOCK, WARP_Q, ROWS, true>(s_amax, s_scale, sc, blk_i);
    } else if (qg == PER_THREAD) {
      group_scales<PER_THREAD, WARP_Q, ROWS, false>(s_amax, s_scale, sc, blk_i);
    } else if (qg == PER_WARP) {
      group_scales<PER_WARP, WARP_Q, ROWS, false>(s_amax, s_scale, sc, blk_i);
    } else {
      group_scales<PER_BLOCK, WARP_Q, ROWS, false>(s_amax, s_scale, sc, blk_i);
    }
  }
  __syncthreads();
  i8 *out = (i8 *)(IS_K ? a.k8 : a.q8) +
            ((IS_K ? k8_row0(G, sq, b, h) : q8_row0(G, sq, b, h)) + r0 + rsub) * D +
            lane_c * 8;
#pragma unroll
  for (int it = 0; it < ITER; it++, out += RPP * D) {
    const int r = it * RPP + rsub;
    const int n = r0 + r;
    if (!active || r >= ROWS || n >= seq_pad)
      continue;
    const int g = row_group<WARP_Q, IS_K>(qg, r);
    const float inv = s_scale[g];
    float x[8];
    unpack8<DT>(raw[it], x);
    u32 lo = 0, hi = 0;
    if (n < seq) {
      // |v| <= the group's amax, so |v * inv| <= 127 up to rounding (s8_bits)
      u32 q[8];
#pragma unroll
      for (int i = 0; i < 8; i++)
        q[i] = s8_bits(IS_K ? x[i] - mean[i] : __fmul_rn(x[i], a.q_prescale), inv);
      lo = pack4_lo(q[0], q[1], q[2], q[3]);
      hi = pack4_lo(q[4], q[5], q[6], q[7]);
    }
    // one 8-byte store (two 4-byte ones fetched every sector twice)
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(out),
                 "r"(lo), "r"(hi)
                 : "memory");
  }
}

// Position of token tk (0..15) inside its group of 16 in the permuted V
// layout: the score fragment of lane (g, t) holds keys {2t, 2t+1, 8+2t,
// 9+2t}, which become the 4 consecutive k-bytes 4t..4t+3 of the e4m3 A
// operand of mma.m16n8k32.
__device__ __forceinline__ int v_perm_pos(int tk) {
  return 4 * ((tk % 8) / 2) + (tk % 2) + 2 * (tk / 8);
}

// Copies a V tile staged in shared memory to its channel rows in global
// memory: `rows` rows (a multiple of 16) of CPR 16-byte chunks, PITCH bytes
// apart in s_t and `pitch` apart at `out` (rows from `far_row` on go
// `far_off` further).  Each lane moves 8 bytes; a half-warp reads rows r and
// r + 8 of a group of 16, which share no bank when PITCH is 72 (e4m3 tiles)
// and fill every bank once when a row is 128 bytes (16-bit tiles).
template <int CPR, int PITCH>
__device__ __forceinline__ void store_v_rows(const u8 *s_t, int rows, u8 *out, i64 pitch,
                                             int far_row, i64 far_off) {
  constexpr int PPR = 2 * CPR; // 8-byte pieces per row
  constexpr int STEP = QUANT_THREADS / PPR; // rows per pass, a multiple of 16
  static_assert(QUANT_THREADS % PPR == 0 && STEP % 16 == 0, "row passes");
  // The thread's piece is the same in every pass and its row moves by
  // STEP, so its two addresses advance by constants.
  const int j = threadIdx.x / PPR, piece = threadIdx.x % PPR;
  int ch = (j & ~15) + (j & 1) * 8 + (j & 15) / 2;
  const u8 *sp = s_t + ch * PITCH + piece * 8;
  u8 *gp = out + (i64)ch * pitch + piece * 8;
  for (; ch < rows; ch += STEP, sp += STEP * PITCH, gp += STEP * pitch)
    *(uint2 *)(gp + (ch >= far_row ? far_off : 0)) = *(const uint2 *)sp;
}

// V as 16-bit V^T (ACC_PV16): [channel][token] in the input dtype, tokens
// in order, not scaled (minus the mean under smooth_v); each channel row of
// the v8 buffer holds 2 v8_pitch bytes.  s_t holds D rows of 64 tokens.
template <int DT, int D>
__device__ __forceinline__ void quant_v16_block(const sj_quant_args &a, int blk, int h,
                                                int b, u8 *s_t) {
  typedef RowMap<D> M;
  constexpr int PITCH = 2 * BLK_K + 16;
  const sj_geom &G = a.g;
  const Seq sk = seq_kv(G, b);
  const int n0 = blk * BLK_K;
  const int limit = G.cu_kv ? round_up(sk.len, 128) : sk.len; // as quant_v_block
  if (n0 >= limit)
    return;
  const i64 bh = (i64)b * G.heads_kv + h;
  const u8 *src = (const u8 *)a.v +
                  (user_base(G.cu_kv != 0, sk, b, a.v_sb, a.v_sn) + (i64)h * a.v_sh) * 2;
  const bool smooth = (a.flags & SJ_F_SMOOTH_V) != 0;
  // Work item: one token x one chunk of 8 channels (16 bytes in, 8 2-byte
  // stores into the channel rows).
  for (int w = threadIdx.x; w < M::CHUNKS * BLK_K; w += QUANT_THREADS) {
    const int tk = w % BLK_K, c = w / BLK_K, n = n0 + tk;
    u32x4 raw;
    raw.x = raw.y = raw.z = raw.w = 0u;
    if (n < sk.len) // V's last read (pv16 with smooth_v: kv_stats kept it)
      raw = ld_global16_hint(src + (i64)n * a.v_sn * 2 + c * 16,
                             l2_policy((a.flags & SJ_F_L2_KEEP_V) != 0, false));
    u32 wd[4] = {raw.x, raw.y, raw.z, raw.w};
    if (smooth && n < sk.len) {
      float mean[8];
      load8_f32((const float *)a.v_mean + bh * D + c * 8, mean);
#pragma unroll
      for (int i = 0; i < 4; i++) {
        float x0, x1;
        unpack2<DT>(wd[i], x0, x1);
        wd[i] = pack2<DT>(x0 - mean[2 * i], x1 - mean[2 * i + 1]);
      }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
      *(u16 *)(s_t + (c * 8 + 2 * i) * PITCH + tk * 2) = (u16)(wd[i] & 0xffffu);
      *(u16 *)(s_t + (c * 8 + 2 * i + 1) * PITCH + tk * 2) = (u16)(wd[i] >> 16);
    }
  }
  __syncthreads();
  // Each channel row of the tile is 128 bytes = 8 chunks of 16.
  store_v_rows<8, PITCH>(s_t, D, (u8 *)a.v8 + 2 * (v8_base(G, sk, b, h, D) + n0),
                         2 * v8_pitch(G), D, 0);
}

// SPLIT: also the residual V - e4m3(V), in e4m3, as the rows D .. 2D - 1
// of s_t and into the residual buffer (v8_lo_offset).  I8: u8 (s8 + 128)
// instead of e4m3 (ACC_PVI8; the scale maps the channel's max to 127).
template <int DT, int D, bool SPLIT, bool I8 = false>
__device__ __forceinline__ void quant_v_block(const sj_quant_args &a, int blk,
                                              int h, int b, u8 *s_t) {
  typedef RowMap<D> M;
  // 72: the two half-warps of a store below write channel rows 8 apart,
  // 144 words apart, so into opposite halves of the banks.
  constexpr int PITCH = BLK_K + 8;
  const sj_geom &G = a.g;
  const Seq sk = seq_kv(G, b);
  const int n0 = blk * BLK_K;
  // Blocks up to the sequence's end; varlen sequences also get zero blocks
  // up to the next multiple of 128 keys (inside SJ_V8_GAP), so that a
  // 128-key tile never reads stale bytes (an e4m3 NaN times P = 0 is NaN).
  // Dense tiles read zeros past seq_kv_pad from the TMA unit instead.
  const int limit = G.cu_kv ? round_up(sk.len, 128) : sk.len;
  if (n0 >= limit)
    return; // past this sequence: nothing to write
  const i64 bh = (i64)b * G.heads_kv + h;
  const u8 *src = (const u8 *)a.v +
                  (user_base(G.cu_kv != 0, sk, b, a.v_sb, a.v_sn) + (i64)h * a.v_sh) * 2;
  const bool smooth = (a.flags & SJ_F_SMOOTH_V) != 0;
  // The channels' inverse scales (one IEEE division per channel, not one
  // per channel and work item) and means.
  __shared__ __align__(16) float s_vinv[D], s_vmean[D];
  for (int ch = threadIdx.x; ch < D; ch += QUANT_THREADS) {
    s_vinv[ch] = 1.0f / ((const float *)a.v_scale)[bh * D + ch];
    s_vmean[ch] = smooth ? ((const float *)a.v_mean)[bh * D + ch] : 0.f;
  }
  __syncthreads();
  // Work item: one quad of tokens x one chunk of 8 channels.  The quad
  // {2m, 2m+1, 2m+8, 2m+9} of each group of 16 lands on the 4 consecutive
  // positions 4m..4m+3 (v_perm_pos), so each channel gets one 4-byte word.
  // Quads vary fastest across lanes: a warp's stores for one channel hit
  // 16 distinct banks (byte stores per token were 4-way conflicted).
  constexpr int NQ = BLK_K / 4;
  for (int w = threadIdx.x; w < M::CHUNKS * NQ; w += QUANT_THREADS) {
    const int q = w % NQ, c = w / NQ, grp = q / 4, mq = q % 4;
    float inv[8], mean[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
      inv[i] = s_vinv[c * 8 + i];
      mean[i] = s_vmean[c * 8 + i];
    }
    u32x4 raw[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
      const int n = n0 + grp * 16 + 2 * mq + (k & 1) + 8 * (k >> 1);
      raw[k].x = raw[k].y = raw[k].z = raw[k].w = 0u;
      // V's last read: evict_first under SJ_F_L2_KEEP_V, which demotes
      // the lines kv_stats kept
      if (n < sk.len)
        raw[k] = ld_global16_hint(src + (i64)n * a.v_sn * 2 + c * 16,
                                  l2_policy((a.flags & SJ_F_L2_KEEP_V) != 0, false));
    }
    float x[4][8];
#pragma unroll
    for (int k = 0; k < 4; k++) {
      unpack8<DT>(raw[k], x[k]);
      const bool in = n0 + grp * 16 + 2 * mq + (k & 1) + 8 * (k >> 1) < sk.len;
#pragma unroll
      for (int i = 0; i < 8; i++)
        x[k][i] = in ? __fmul_rn(x[k][i] - mean[i], inv[i]) : 0.f;
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {
      // u8 = s8 + 128: the sign bit of each byte flipped.  |x - mean| <=
      // the channel's amax (kv_finalize: the same rounded differences), so
      // |x| <= 127 up to rounding here (s8_bits with inv 1)
      const u32 hi = I8 ? pack4_lo(s8_bits(x[0][i], 1.f), s8_bits(x[1][i], 1.f),
                                   s8_bits(x[2][i], 1.f), s8_bits(x[3][i], 1.f)) ^
                              0x80808080u
                        : pack4_e4m3(x[0][i], x[1][i], x[2][i], x[3][i]);
      *(u32 *)(s_t + (c * 8 + i) * PITCH + grp * 16 + 4 * mq) = hi;
      if (SPLIT) {
        float r[4];
        unpack4_e4m3(hi, r);
        *(u32 *)(s_t + (D + c * 8 + i) * PITCH + grp * 16 + 4 * mq) =
            pack4_e4m3(x[0][i] - r[0], x[1][i] - r[1], x[2][i] - r[2], x[3][i] - r[3]);
      }
    }
  }
  __syncthreads();
  // Each channel row of the tile is 64 bytes = 4 chunks of 16; the
  // residual's rows (D .. 2D - 1 of s_t) go to the residual buffer.
  const i64 pitch = v8_pitch(G);
  store_v_rows<4, PITCH>(s_t, (SPLIT ? 2 : 1) * D,
                         (u8 *)a.v8 + v8_base(G, sk, b, h, D) + n0, pitch, D,
                         SPLIT ? v8_lo_offset(G, D) - D * pitch : 0);
}

// Rows [n0, n1) of a caller's tensor (row_bytes each, pitch apart) into
// L2, before the wait for the previous kernel: the call's inputs are
// complete before its first kernel starts, so the first wave's reads can
// run under that kernel's tail instead of after it.
__device__ __forceinline__ void prefetch_rows(const u8 *base, i64 pitch, int n0, int n1,
                                              int row_bytes) {
  const int lpr = (row_bytes + 127) / 128; // 128-byte lines per row
  for (int i = threadIdx.x; i < (n1 - n0) * lpr; i += QUANT_THREADS)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + (i64)(n0 + i / lpr) * pitch +
                                                   (i % lpr) * 128));
}

// VM: how V is written.  0: e4m3; 1: e4m3 and its e4m3 residual
// (ACC_FP32_FP32_SPLITV); 2: 16-bit V^T (ACC_PV16); 3: s8 + 128 (ACC_PVI8);
// 4: 3 or 1 per (batch, kv head), as kv_finalize chose (ACC_PVI8_SPLITV).
template <int DT, int D, int WARP_Q, int VM>
__global__ void __launch_bounds__(QUANT_THREADS, QuantMinCtas<D>::value) quant_qkv(const sj_quant_args a) {
  __shared__ float s_amax[BLK_Q];
  __shared__ float s_scale[BLK_Q];
  // e4m3 tiles: D rows of BLK_K + 8 bytes (twice for split V); 16-bit
  // tiles: D rows of 2 BLK_K + 16 bytes, the same size.
  __shared__ __align__(16) u8 s_t[(VM == 1 || VM == 2 || VM == 4 ? 2 : 1) * D * (BLK_K + 8)];
  const sj_geom &G = a.g;
  // SJ_F_Q_FUSED: the attention kernel quantizes Q; the grid has no Q blocks
  const int x = blockIdx.x + ((a.flags & SJ_F_Q_FUSED) ? G.n_qblk : 0);
  // Heads in the reverse of kv_stats' order: the first blocks read the K/V
  // rows kv_stats read last (some still in L2), and the last ones write the
  // k8/v8 rows the attention kernel reads first (bench/NOTES.md, p3).
  const int h = gridDim.y - 1 - blockIdx.y, b = gridDim.z - 1 - blockIdx.z;
  // what this CTA does: Q block x, K block x - n_qblk, or V block beyond
  const bool is_q = x < G.n_qblk, is_k = !is_q && x < G.n_qblk + G.n_kblk;
  const bool is_v = !is_q && !is_k && (a.flags & SJ_F_QUANT_V) != 0;
  const int blk = is_q ? x : x - G.n_qblk - (is_k ? 0 : G.n_kblk);
  if (!is_q && h >= G.heads_kv)
    return; // K and V blocks exist for the kv heads only
  {
    // this block's rows, while kv_finalize may still run
    const Seq s = is_q ? seq_q(G, b) : seq_kv(G, b);
    const bool varlen = (is_q ? G.cu_q : G.cu_kv) != 0;
    const int rows = is_q ? BLK_Q : BLK_K, n0 = blk * rows;
    const i64 sb = is_q ? a.q_sb : (is_k ? a.k_sb : a.v_sb);
    const i64 sh = is_q ? a.q_sh : (is_k ? a.k_sh : a.v_sh);
    const i64 sn = is_q ? a.q_sn : (is_k ? a.k_sn : a.v_sn);
    const u8 *src = (const u8 *)(is_q ? a.q : (is_k ? a.k : a.v)) +
                    (user_base(varlen, s, b, sb, sn) + (i64)h * sh) * 2;
    if (is_q || is_k || is_v)
      prefetch_rows(src, sn * 2, n0, min(n0 + rows, s.len), D * 2);
  }
  pdl_wait(); // the K mean, V scale and V mean of kv_finalize
  pdl_launch_next();
  if (is_q) {
    quant_rows<DT, D, WARP_Q, BLK_Q, false>(a, blk, h, b, s_amax, s_scale);
  } else if (is_k) {
    quant_rows<DT, D, WARP_Q, BLK_K, true>(a, blk, h, b, s_amax, s_scale);
  } else if (is_v) {
    if (VM == 2)
      quant_v16_block<DT, D>(a, blk, h, b, s_t);
    else if (VM != 4)
      quant_v_block<DT, D, VM == 1, VM == 3>(a, blk, h, b, s_t);
    else if (((const u8 *)a.v_mode)[(i64)b * G.heads_kv + h]) // uniform
      quant_v_block<DT, D, false, true>(a, blk, h, b, s_t);
    else
      quant_v_block<DT, D, true, false>(a, blk, h, b, s_t);
  }
}

} // namespace sj
