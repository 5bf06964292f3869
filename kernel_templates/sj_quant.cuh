// sj_quant.cuh -- preprocessing: K/V statistics, Q/K INT8 quantization and
// V transpose + permute + e4m3 quantization.
//
// Pass 1 (kv_stats): per (batch, kv head, chunk of tokens) partial sums of K
//   and V and the max/min of V, per channel.
// Pass 2 (kv_finalize): per (batch, kv head) the K mean, V mean and V scale.
// Pass 3 (quant_qkv): one launch quantizes Q blocks, K blocks and V blocks.
#pragma once
#include "sj_abi.h"
#include "sj_common.cuh"

namespace sj {

// Threads per row when each thread owns 8 consecutive channels (16 bytes),
// rounded up to a power of two so that a row's lanes form a shuffle group.
template <int D> struct RowMap {
  static constexpr int CHUNKS = D / 8;
  static constexpr int TPR =
      CHUNKS <= 4 ? 4 : (CHUNKS <= 8 ? 8 : (CHUNKS <= 16 ? 16 : 32));
};

template <int DT>
__device__ __forceinline__ void load8(const void *p, float *x) {
  u32x4 w = ld_global16(p);
  unpack2<DT>(w.x, x[0], x[1]);
  unpack2<DT>(w.y, x[2], x[3]);
  unpack2<DT>(w.z, x[4], x[5]);
  unpack2<DT>(w.w, x[6], x[7]);
}

__device__ __forceinline__ const u8 *row_ptr(sj_ptr base, i64 sb, i64 sh,
                                             i64 sn, int b, int h, int n,
                                             int elem_bytes) {
  return (const u8 *)base + ((i64)b * sb + (i64)h * sh + (i64)n * sn) *
                                elem_bytes;
}

// ------------------------------------------------------------------ pass 1
constexpr int STATS_THREADS = 256;

template <int DT, int D>
__global__ void __launch_bounds__(STATS_THREADS)
    kv_stats(const sj_stats_args a) {
  typedef RowMap<D> M;
  constexpr int ROWS = STATS_THREADS / M::TPR;
  __shared__ float red[ROWS][D + 1];

  const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int lane_c = threadIdx.x % M::TPR, row0 = threadIdx.x / M::TPR;
  const bool active = lane_c < M::CHUNKS;
  const int n0 = c * a.chunk;
  const int n1 = min(a.seq_kv, n0 + a.chunk);

  float ks[8], vs[8], vmax[8], vmin[8];
#pragma unroll
  for (int i = 0; i < 8; i++) {
    ks[i] = 0.f;
    vs[i] = 0.f;
    vmax[i] = neg_inf();
    vmin[i] = -neg_inf();
  }
  if (active) {
    for (int n = n0 + row0; n < n1; n += ROWS) {
      float x[8];
      if (a.flags & SJ_F_K_STATS) {
        load8<DT>(row_ptr(a.k, a.k_sb, a.k_sh, a.k_sn, b, h, n, 2) + lane_c * 16,
                  x);
#pragma unroll
        for (int i = 0; i < 8; i++)
          ks[i] += x[i];
      }
      if (a.flags & SJ_F_V_STATS) {
        load8<DT>(row_ptr(a.v, a.v_sb, a.v_sh, a.v_sn, b, h, n, 2) + lane_c * 16,
                  x);
#pragma unroll
        for (int i = 0; i < 8; i++) {
          vs[i] += x[i];
          vmax[i] = fmaxf(vmax[i], x[i]);
          vmin[i] = fminf(vmin[i], x[i]);
        }
      }
    }
  }
  float *out = (float *)a.partial +
               ((((i64)b * a.heads_kv + h) * a.nchunk + c) * 4) * D;
  // Reduce the four statistics one after another through shared memory.
#pragma unroll
  for (int s = 0; s < 4; s++) {
    if (active) {
#pragma unroll
      for (int i = 0; i < 8; i++) {
        float v = s == 0 ? ks[i] : s == 1 ? vs[i] : s == 2 ? vmax[i] : vmin[i];
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

// ------------------------------------------------------------------ pass 2
template <int D>
__global__ void __launch_bounds__(256) kv_finalize(const sj_finalize_args a) {
  const int h = blockIdx.x, b = blockIdx.y;
  const i64 bh = (i64)b * a.heads_kv + h;
  const float *p = (const float *)a.partial + bh * a.nchunk * 4 * D;
  const float inv_n = 1.0f / (float)a.seq_kv;
  for (int ch = threadIdx.x; ch < D; ch += blockDim.x) {
    float ks = 0.f, vs = 0.f, vmax = neg_inf(), vmin = -neg_inf();
    for (int c = 0; c < a.nchunk; c++) {
      const float *q = p + (i64)c * 4 * D;
      ks += q[ch];
      vs += q[D + ch];
      vmax = fmaxf(vmax, q[2 * D + ch]);
      vmin = fminf(vmin, q[3 * D + ch]);
    }
    if (a.flags & SJ_F_SMOOTH_K)
      ((float *)a.k_mean)[bh * D + ch] = ks * inv_n;
    if (a.flags & SJ_F_V_STATS) {
      float mean = (a.flags & SJ_F_SMOOTH_V) ? vs * inv_n : 0.f;
      float amax = fmaxf(vmax - mean, mean - vmin);
      // A NaN or Inf in V makes the scale non-finite; the output then shows
      // it (documented), it never reads out of bounds.
      amax = fmaxf(amax, 1e-7f);
      if (a.flags & SJ_F_SMOOTH_V)
        ((float *)a.v_mean)[bh * D + ch] = mean;
      ((float *)a.v_scale)[bh * D + ch] = amax / a.v_scale_max;
    }
  }
}

// ------------------------------------------------------------------ pass 3
constexpr int QUANT_THREADS = 256;

// Scale group of row r inside a Q block (see docs/kernels.md).
template <int QG, int WARP_Q> __device__ __forceinline__ int q_group(int r) {
  if (QG == PER_BLOCK)
    return 0;
  if (QG == PER_WARP)
    return r / WARP_Q;
  return (r / WARP_Q) * 8 + (r % 8);
}
template <int QG, int WARP_Q> struct QScales {
  static constexpr int PER_BLK =
      QG == PER_BLOCK ? 1 : (QG == PER_WARP ? BLK_Q / WARP_Q : BLK_Q / WARP_Q * 8);
};
template <int QG> __device__ __forceinline__ int k_group(int r) {
  return QG == PER_THREAD ? (r % 8) / 2 : 0;
}
template <int QG> struct KScales {
  static constexpr int PER_BLK = QG == PER_THREAD ? 4 : 1;
};

// Quantizes one block of ROWS rows of Q (IS_K false) or K (IS_K true).
template <int DT, int D, int QG, int WARP_Q, int ROWS, bool IS_K>
__device__ __forceinline__ void quant_rows(const sj_quant_args &a, int blk,
                                           int h, int b, float *s_amax,
                                           float *s_scale) {
  typedef RowMap<D> M;
  constexpr int RPP = QUANT_THREADS / M::TPR; // rows per pass
  constexpr int ITER = (ROWS + RPP - 1) / RPP;
  constexpr int NGROUPS =
      IS_K ? KScales<QG>::PER_BLK : QScales<QG, WARP_Q>::PER_BLK;

  const int lane_c = threadIdx.x % M::TPR, rsub = threadIdx.x / M::TPR;
  const bool active = lane_c < M::CHUNKS;
  const int seq = IS_K ? a.seq_kv : a.seq_q;
  const int seq_pad = IS_K ? a.seq_kv_pad : a.seq_q_pad;
  const int heads = IS_K ? a.heads_kv : a.heads_q;
  const i64 bh = (i64)b * heads + h;
  const int kvh = IS_K ? h : h / (a.heads_q / a.heads_kv);
  const i64 bhk = (i64)b * a.heads_kv + kvh;
  const int r0 = blk * ROWS;

  // The K mean of this (batch, kv head), for the thread's 8 channels.
  float mean[8];
  const bool smooth = (a.flags & SJ_F_SMOOTH_K) != 0;
#pragma unroll
  for (int i = 0; i < 8; i++)
    mean[i] = (smooth && active) ? ((const float *)a.k_mean)[bhk * D + lane_c * 8 + i]
                                 : 0.f;

  u32x4 raw[ITER];
#pragma unroll
  for (int it = 0; it < ITER; it++) {
    const int r = it * RPP + rsub;
    const int n = r0 + r;
    float amax = 0.f, dot = 0.f;
    raw[it].x = raw[it].y = raw[it].z = raw[it].w = 0u;
    if (active && r < ROWS && n < seq) {
      const u8 *p = IS_K ? row_ptr(a.k, a.k_sb, a.k_sh, a.k_sn, b, h, n, 2)
                         : row_ptr(a.q, a.q_sb, a.q_sh, a.q_sn, b, h, n, 2);
      raw[it] = ld_global16(p + lane_c * 16);
      float x[8];
      unpack2<DT>(raw[it].x, x[0], x[1]);
      unpack2<DT>(raw[it].y, x[2], x[3]);
      unpack2<DT>(raw[it].z, x[4], x[5]);
      unpack2<DT>(raw[it].w, x[6], x[7]);
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
        ((float *)a.qk_mean)[bh * seq + n] = dot;
    }
  }
  __syncthreads();
  // Group scales: amax / 127 over the rows of each group.
  for (int g = threadIdx.x; g < NGROUPS; g += QUANT_THREADS) {
    float m = 0.f;
    for (int r = 0; r < ROWS; r++) {
      int gr = IS_K ? k_group<QG>(r) : q_group<QG, WARP_Q>(r);
      if (gr == g)
        m = fmaxf(m, s_amax[r]);
    }
    const float scale = m / 127.f;
    s_scale[g] = scale;
    float *dst = (float *)(IS_K ? a.k_scale : a.q_scale);
    dst[(bh * (IS_K ? a.n_kblk : a.n_qblk) + blk) * NGROUPS + g] = scale;
  }
  __syncthreads();
  i8 *out = (i8 *)(IS_K ? a.k8 : a.q8) + bh * (i64)seq_pad * D;
#pragma unroll
  for (int it = 0; it < ITER; it++) {
    const int r = it * RPP + rsub;
    const int n = r0 + r;
    if (!active || r >= ROWS || n >= seq_pad)
      continue;
    const int g = IS_K ? k_group<QG>(r) : q_group<QG, WARP_Q>(r);
    const float s = s_scale[g];
    const float inv = s > 0.f ? 1.0f / s : 0.f;
    float x[8];
    unpack2<DT>(raw[it].x, x[0], x[1]);
    unpack2<DT>(raw[it].y, x[2], x[3]);
    unpack2<DT>(raw[it].z, x[4], x[5]);
    unpack2<DT>(raw[it].w, x[6], x[7]);
    u32 lo = 0, hi = 0;
    if (n < seq) {
#pragma unroll
      for (int i = 0; i < 8; i++) {
        float v = IS_K ? x[i] - mean[i] : x[i] * a.q_prescale;
        u32 q = (u32)(quant_s8(v * inv) & 0xff);
        if (i < 4)
          lo |= q << (8 * i);
        else
          hi |= q << (8 * (i - 4));
      }
    }
    u32 *dst = (u32 *)(out + (i64)n * D + lane_c * 8);
    dst[0] = lo;
    dst[1] = hi;
  }
}

// Position of token tk (0..15) inside its group of 16 in the permuted V
// layout: the score fragment of lane (g, t) holds keys {2t, 2t+1, 8+2t,
// 9+2t}, which become the 4 consecutive k-bytes 4t..4t+3 of the e4m3 A
// operand of mma.m16n8k32.
__device__ __forceinline__ int v_perm_pos(int tk) {
  return 4 * ((tk % 8) / 2) + (tk % 2) + 2 * (tk / 8);
}

template <int DT, int D>
__device__ __forceinline__ void quant_v_block(const sj_quant_args &a, int blk,
                                              int h, int b, u8 *s_t) {
  typedef RowMap<D> M;
  constexpr int PITCH = BLK_K + 16;
  constexpr int RPP = QUANT_THREADS / M::TPR;
  const int lane_c = threadIdx.x % M::TPR, rsub = threadIdx.x / M::TPR;
  const bool active = lane_c < M::CHUNKS;
  const i64 bh = (i64)b * a.heads_kv + h;
  const int n0 = blk * BLK_K;
  const bool smooth = (a.flags & SJ_F_SMOOTH_V) != 0;
  float inv[8], mean[8];
#pragma unroll
  for (int i = 0; i < 8; i++) {
    if (active) {
      float s = ((const float *)a.v_scale)[bh * D + lane_c * 8 + i];
      inv[i] = 1.0f / s;
      mean[i] = smooth ? ((const float *)a.v_mean)[bh * D + lane_c * 8 + i] : 0.f;
    } else {
      inv[i] = 0.f;
      mean[i] = 0.f;
    }
  }
  for (int r = rsub; r < BLK_K; r += RPP) {
    if (!active)
      continue;
    const int n = n0 + r;
    float x[8];
    if (n < a.seq_kv) {
      load8<DT>(row_ptr(a.v, a.v_sb, a.v_sh, a.v_sn, b, h, n, 2) + lane_c * 16, x);
#pragma unroll
      for (int i = 0; i < 8; i++)
        x[i] = (x[i] - mean[i]) * inv[i];
    } else {
#pragma unroll
      for (int i = 0; i < 8; i++)
        x[i] = 0.f;
    }
    const int pos = (r / 16) * 16 + v_perm_pos(r % 16);
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      u16 two = pack_e4m3x2(x[i], x[i + 1]);
      s_t[(lane_c * 8 + i) * PITCH + pos] = (u8)(two & 0xff);
      s_t[(lane_c * 8 + i + 1) * PITCH + pos] = (u8)(two >> 8);
    }
  }
  __syncthreads();
  // Each channel row of the tile is 64 bytes = 4 chunks of 16.
  u8 *out = (u8 *)a.v8 + bh * (i64)D * a.seq_kv_pad;
  for (int i = threadIdx.x; i < D * 4; i += QUANT_THREADS) {
    const int ch = i / 4, part = i % 4;
    const u32 *src = (const u32 *)(s_t + ch * PITCH + part * 16);
    u32x4 w;
    w.x = src[0];
    w.y = src[1];
    w.z = src[2];
    w.w = src[3];
    *(u32x4 *)(out + (i64)ch * a.seq_kv_pad + n0 + part * 16) = w;
  }
}

template <int DT, int D, int QG, int WARP_Q>
__global__ void __launch_bounds__(QUANT_THREADS) quant_qkv(const sj_quant_args a) {
  __shared__ float s_amax[BLK_Q];
  __shared__ float s_scale[BLK_Q];
  __shared__ __align__(16) u8 s_t[D * (BLK_K + 16)];
  const int x = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  if (x < a.n_qblk) {
    quant_rows<DT, D, QG, WARP_Q, BLK_Q, false>(a, x, h, b, s_amax, s_scale);
  } else if (x < a.n_qblk + a.n_kblk) {
    if (h < a.heads_kv)
      quant_rows<DT, D, QG, WARP_Q, BLK_K, true>(a, x - a.n_qblk, h, b, s_amax,
                                                 s_scale);
  } else if (h < a.heads_kv && (a.flags & SJ_F_QUANT_V)) {
    quant_v_block<DT, D>(a, x - a.n_qblk - a.n_kblk, h, b, s_t);
  }
}

} // namespace sj
