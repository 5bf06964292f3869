// sj_attn_mma.cuh -- quantized attention on mma.sync tensor cores.
//
// S = Q8 K8^T with mma.m16n8k32.s8 (int32 accumulate), dequantized with one
// scalar per thread (the Q and K scale layouts follow the accumulator
// fragment), online softmax in exp2, then P.V:
//   FP16PV: P in fp16 (bf16 for bf16 input in fp32 mode), V read straight
//           from the caller's tensor, mma.m16n8k16;
//   FP8PV:  P in e4m3 offset so its max is 448, V pre-transposed to e4m3
//           with a per-channel scale, mma.m16n8k32.e4m3.
// One CTA computes BLK_Q = 128 query rows of one (batch, head); each warp
// owns WARP_Q rows (WARP_Q / 16 m-tiles) and walks the KV sequence in tiles
// of BLK_K = 64 keys, STAGES deep through cp.async.
#pragma once
#include "sj_abi.h"
#include "sj_common.cuh"

namespace sj {

constexpr float FP8_P_OFFSET = 8.807354922057604f; // log2(448)

template <int FAM, int D> struct AttnSmem {
  static constexpr int Q_PITCH = D + 16;
  static constexpr int K_PITCH = D + 16;
  static constexpr int V_PITCH = FAM == FP8PV ? BLK_K + 16 : 2 * D + 16;
  static constexpr int Q_BYTES = BLK_Q * Q_PITCH;
  static constexpr int K_BYTES = BLK_K * K_PITCH;
  static constexpr int V_BYTES = FAM == FP8PV ? D * V_PITCH : BLK_K * V_PITCH;
};

template <int FAM, int DT, int D, int NTHREADS>
__device__ __forceinline__ void load_kv_tile(const sj_attn_args &a, int j,
                                             i64 bhk, int b, int hk, u8 *sK,
                                             u8 *sV) {
  typedef AttnSmem<FAM, D> S;
  // K: BLK_K rows of D bytes (zero padded rows already in K8).
  const u8 *k = (const u8 *)a.k8 + (bhk * a.seq_kv_pad + (i64)j * BLK_K) * D;
  constexpr int KCH = BLK_K * D / 16;
  for (int i = threadIdx.x; i < KCH; i += NTHREADS) {
    const int r = i / (D / 16), c = i % (D / 16);
    cp_async16(sK + r * S::K_PITCH + c * 16, k + (i64)r * D + c * 16, 16);
  }
  if (FAM == FP8PV) {
    // V^T: D channel rows of BLK_K bytes.
    const u8 *v = (const u8 *)a.v8 + bhk * (i64)D * a.seq_kv_pad + (i64)j * BLK_K;
    constexpr int VCH = D * BLK_K / 16;
    for (int i = threadIdx.x; i < VCH; i += NTHREADS) {
      const int r = i / (BLK_K / 16), c = i % (BLK_K / 16);
      cp_async16(sV + r * S::V_PITCH + c * 16, v + (i64)r * a.seq_kv_pad + c * 16,
                 16);
    }
  } else {
    // V: BLK_K token rows of D 16-bit values, from the caller's tensor;
    // rows past seq_kv are zero-filled, never read.
    constexpr int VCH = BLK_K * D * 2 / 16;
    for (int i = threadIdx.x; i < VCH; i += NTHREADS) {
      const int r = i / (D / 8), c = i % (D / 8);
      const int n = j * BLK_K + r;
      const bool in = n < a.seq_kv;
      const u8 *src = (const u8 *)a.v +
                      ((i64)b * a.v_sb + (i64)hk * a.v_sh + (i64)(in ? n : 0) * a.v_sn) * 2 +
                      c * 16;
      cp_async16(sV + r * S::V_PITCH + c * 16, src, in ? 16 : 0);
    }
  }
}

template <int FAM, int DT, int D, bool CAUSAL, int QG, int ACC, int WARP_Q,
          int STAGES>
__global__ void __launch_bounds__(BLK_Q / WARP_Q * 32)
    attn_mma(const sj_attn_args a) {
  constexpr int NWARPS = BLK_Q / WARP_Q;
  constexpr int NTHREADS = NWARPS * 32;
  constexpr int MT = WARP_Q / 16;  // m-tiles per warp
  constexpr int NT = BLK_K / 8;    // n-tiles of S per m-tile
  constexpr int KS = D / 32;       // k-steps of Q.K^T
  constexpr int DN = D / 8;        // n-tiles of O
  constexpr bool F8 = FAM == FP8PV;
  constexpr bool PV_BF16 = !F8 && DT == BF16 && ACC == ACC_FP32;
  constexpr bool TWO_LEVEL = ACC != ACC_FP32;
  constexpr bool TILE_F16 = ACC == ACC_FP16_FP32 || ACC == ACC_FP32_FP16;
  typedef AttnSmem<FAM, D> S;

  extern __shared__ __align__(128) u8 smem[];
  u8 *sQ = smem;
  u8 *sK0 = smem + S::Q_BYTES;
  u8 *sV0 = sK0 + STAGES * S::K_BYTES;

  const int qblk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int hk = h / (a.heads_q / a.heads_kv);
  const i64 bh = (i64)b * a.heads_q + h;
  const i64 bhk = (i64)b * a.heads_kv + hk;
  const int q0 = qblk * BLK_Q;
  const int n_qblk = a.seq_q_pad / BLK_Q;
  const int n_kblk = a.seq_kv_pad / BLK_K;

  // Number of KV tiles this CTA visits.
  int n_tiles = (a.seq_kv + BLK_K - 1) / BLK_K;
  if (CAUSAL) {
    const int last = q0 + BLK_Q - 1 + a.causal_offset; // last visible key
    const int lim = last < 0 ? 0 : last / BLK_K + 1;
    n_tiles = min(n_tiles, lim);
  }

  // ---- Q tile -> registers
  {
    const u8 *q = (const u8 *)a.q8 + (bh * a.seq_q_pad + q0) * (i64)D;
    constexpr int QCH = BLK_Q * D / 16;
    for (int i = threadIdx.x; i < QCH; i += NTHREADS) {
      const int r = i / (D / 16), c = i % (D / 16);
      cp_async16(sQ + r * S::Q_PITCH + c * 16, q + (i64)r * D + c * 16, 16);
    }
    cp_async_commit();
  }
  if (n_tiles > 0) {
    load_kv_tile<FAM, DT, D, NTHREADS>(a, 0, bhk, b, hk, sK0, sV0);
    cp_async_commit();
  }
  cp_async_wait<0>();
  __syncthreads();
  u32 qf[MT][KS][4];
  {
    const int mi = lane / 8, r = lane % 8;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int kk = 0; kk < KS; kk++) {
        const int row = warp * WARP_Q + mt * 16 + (mi & 1) * 8 + r;
        const int col = kk * 32 + (mi >> 1) * 16;
        ldmatrix_x4(qf[mt][kk][0], qf[mt][kk][1], qf[mt][kk][2], qf[mt][kk][3],
                    sQ + row * S::Q_PITCH + col);
      }
  }

  // ---- per-thread Q scale (one scalar for every row the thread holds)
  float q_scale;
  {
    const float *qs = (const float *)a.q_scale;
    const i64 base = bh * n_qblk + qblk;
    if (QG == PER_BLOCK)
      q_scale = qs[base];
    else if (QG == PER_WARP)
      q_scale = qs[base * NWARPS + warp];
    else
      q_scale = qs[(base * NWARPS + warp) * 8 + g];
  }

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
  for (int j = 0; j < n_tiles; j++) {
    const int st = STAGES > 1 ? j % STAGES : 0;
    u8 *sK = sK0 + st * S::K_BYTES;
    u8 *sV = sV0 + st * S::V_BYTES;
    if (STAGES > 1) {
      if (j + 1 < n_tiles) {
        load_kv_tile<FAM, DT, D, NTHREADS>(a, j + 1, bhk, b, hk,
                                           sK0 + ((j + 1) % STAGES) * S::K_BYTES,
                                           sV0 + ((j + 1) % STAGES) * S::V_BYTES);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
    } else if (j > 0) {
      load_kv_tile<FAM, DT, D, NTHREADS>(a, j, bhk, b, hk, sK, sV);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
    }

    // ---- S = Q K^T (int32)
    i32 si[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          si[mt][nt][e] = 0;
    {
      const int mi = lane / 8, r = lane % 8;
#pragma unroll
      for (int kk = 0; kk < KS; kk++)
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
          u32 b0, b1, b2, b3;
          const int key = np * 16 + (mi >> 1) * 8 + r;
          const int col = kk * 32 + (mi & 1) * 16;
          ldmatrix_x4(b0, b1, b2, b3, sK + key * S::K_PITCH + col);
#pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            mma_s8(si[mt][2 * np], qf[mt][kk], b0, b1);
            mma_s8(si[mt][2 * np + 1], qf[mt][kk], b2, b3);
          }
        }
    }

    // ---- dequantize, mask, online softmax
    float k_scale;
    {
      const float *ks = (const float *)a.k_scale;
      const i64 base = bhk * n_kblk + j;
      k_scale = QG == PER_THREAD ? ks[base * 4 + t] : ks[base];
    }
    const float mult = q_scale * k_scale * a.sm_scale_log2;
    const int key0 = j * BLK_K;
    const bool need_mask =
        key0 + BLK_K > a.seq_kv ||
        (CAUSAL && key0 + BLK_K - 1 > q0 + a.causal_offset);
    float sf[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          float v = (float)si[mt][nt][e] * mult;
          if (need_mask) {
            const int key = key0 + nt * 8 + 2 * t + (e & 1);
            const int row = row_base + mt * 16 + g + 8 * (e >> 1);
            if (key >= a.seq_kv || (CAUSAL && key > row + a.causal_offset))
              v = neg_inf();
          }
          sf[mt][nt][e] = v;
        }

    float o_scale[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int hf = 0; hf < 2; hf++) {
        float mx = neg_inf();
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
          mx = fmaxf(mx, fmaxf(sf[mt][nt][2 * hf], sf[mt][nt][2 * hf + 1]));
        mx = quad_max(mx);
        const float m_new = fmaxf(m[mt][hf], mx);
        // A row that has seen no key yet keeps m = -inf; use 0 as the
        // reference so that exp2 gives 0, never NaN.
        const float m_ref = m_new == neg_inf() ? 0.f : m_new;
        o_scale[mt][hf] = fast_exp2(m[mt][hf] - m_ref);
        m[mt][hf] = m_new;
        const float sub = F8 ? m_ref - FP8_P_OFFSET : m_ref;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const float p = fast_exp2(sf[mt][nt][2 * hf + e] - sub);
            sf[mt][nt][2 * hf + e] = p;
            sum += p;
          }
        d[mt][hf] = d[mt][hf] * o_scale[mt][hf] + sum;
      }

    // ---- P fragments (A operand of P.V)
    constexpr int KC = F8 ? BLK_K / 32 : BLK_K / 16; // k-chunks of P.V
    u32 pa[MT][KC][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int kc = 0; kc < KC; kc++) {
        if (F8) {
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
      }

    // ---- O = O * o_scale + P V, one pair of channel n-tiles at a time
    {
      const int mi = lane / 8, r = lane % 8;
#pragma unroll
      for (int np = 0; np < DN / 2; np++) {
        float acc[MT][2][4];
        u32 acc16[MT][2][2];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
          for (int x = 0; x < 2; x++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
              if (TWO_LEVEL)
                acc[mt][x][e] = 0.f;
              else
                o[mt][2 * np + x][e] *= o_scale[mt][e >> 1];
            }
            acc16[mt][x][0] = acc16[mt][x][1] = 0u;
          }
#pragma unroll
        for (int kc = 0; kc < KC; kc++) {
          u32 b0, b1, b2, b3;
          if (F8) {
            const int ch = np * 16 + (mi >> 1) * 8 + r;
            const int col = kc * 32 + (mi & 1) * 16;
            ldmatrix_x4(b0, b1, b2, b3, sV + ch * S::V_PITCH + col);
          } else {
            const int tok = kc * 16 + (mi & 1) * 8 + r;
            const int ch = np * 16 + (mi >> 1) * 8;
            ldmatrix_x4_trans(b0, b1, b2, b3, sV + tok * S::V_PITCH + ch * 2);
            if (DT == BF16 && !PV_BF16) {
              // bf16 V entering fp16 arithmetic (fp16+fp32 mode).
              b0 = pack2_f16_sat(bf2f((u16)(b0 & 0xffff)), bf2f((u16)(b0 >> 16)));
              b1 = pack2_f16_sat(bf2f((u16)(b1 & 0xffff)), bf2f((u16)(b1 >> 16)));
              b2 = pack2_f16_sat(bf2f((u16)(b2 & 0xffff)), bf2f((u16)(b2 >> 16)));
              b3 = pack2_f16_sat(bf2f((u16)(b3 & 0xffff)), bf2f((u16)(b3 >> 16)));
            }
          }
#pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            if (F8) {
              if (TILE_F16) {
                mma_e4m3_f16(acc16[mt][0], pa[mt][kc], b0, b1);
                mma_e4m3_f16(acc16[mt][1], pa[mt][kc], b2, b3);
              } else if (TWO_LEVEL) {
                mma_e4m3_f32(acc[mt][0], pa[mt][kc], b0, b1);
                mma_e4m3_f32(acc[mt][1], pa[mt][kc], b2, b3);
              } else {
                mma_e4m3_f32(o[mt][2 * np], pa[mt][kc], b0, b1);
                mma_e4m3_f32(o[mt][2 * np + 1], pa[mt][kc], b2, b3);
              }
            } else {
              if (TILE_F16) {
                mma_f16_f16(acc16[mt][0], pa[mt][kc], b0, b1);
                mma_f16_f16(acc16[mt][1], pa[mt][kc], b2, b3);
              } else if (PV_BF16) {
                mma_bf16_f32(o[mt][2 * np], pa[mt][kc], b0, b1);
                mma_bf16_f32(o[mt][2 * np + 1], pa[mt][kc], b2, b3);
              } else {
                mma_f16_f32(o[mt][2 * np], pa[mt][kc], b0, b1);
                mma_f16_f32(o[mt][2 * np + 1], pa[mt][kc], b2, b3);
              }
            }
          }
        }
        if (TWO_LEVEL) {
#pragma unroll
          for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int x = 0; x < 2; x++) {
              float tv[4];
              if (TILE_F16) {
                tv[0] = f16lo(acc16[mt][x][0]);
                tv[1] = f16hi(acc16[mt][x][0]);
                tv[2] = f16lo(acc16[mt][x][1]);
                tv[3] = f16hi(acc16[mt][x][1]);
              } else {
#pragma unroll
                for (int e = 0; e < 4; e++)
                  tv[e] = acc[mt][x][e];
              }
#pragma unroll
              for (int e = 0; e < 4; e++)
                o[mt][2 * np + x][e] =
                    o[mt][2 * np + x][e] * o_scale[mt][e >> 1] + tv[e];
            }
        }
      }
    }
    if (STAGES > 1 || j + 1 < n_tiles)
      __syncthreads(); // the stage read here is refilled next
  }

  // ---- epilogue: normalize, undo V scaling, store
  const bool smooth_v = (a.flags & SJ_F_SMOOTH_V) != 0;
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
      const float dsum = quad_sum(d[mt][hf]);
      const int row = row_base + mt * 16 + g + 8 * hf;
      const float inv = dsum > 0.f ? 1.0f / dsum : 0.f;
      if (row < a.seq_q) {
        u8 *orow = (u8 *)a.o +
                   ((i64)b * a.o_sb + (i64)h * a.o_sh + (i64)row * a.o_sn) * 2;
#pragma unroll
        for (int nt = 0; nt < DN; nt++) {
          const int ch = nt * 8 + 2 * t;
          float v0 = o[mt][nt][2 * hf] * inv, v1 = o[mt][nt][2 * hf + 1] * inv;
          if (F8) {
            const float *vs = (const float *)a.v_scale + bhk * D;
            v0 *= vs[ch];
            v1 *= vs[ch + 1];
          }
          if (smooth_v && dsum > 0.f) {
            const float *vm = (const float *)a.v_mean + bhk * D;
            v0 += vm[ch];
            v1 += vm[ch + 1];
          }
          *(u32 *)(orow + ch * 2) = pack2<DT>(v0, v1);
        }
        if ((a.flags & SJ_F_LSE) && t == 0) {
          float l;
          if (dsum > 0.f) {
            l = (m[mt][hf] + __log2f(dsum) - (F8 ? FP8_P_OFFSET : 0.f)) *
                a.lse_scale;
            if (a.flags & SJ_F_SMOOTH_K)
              l += a.sm_scale_log2 * LN2 * ((const float *)a.qk_mean)[bh * a.seq_q + row];
          } else {
            l = neg_inf();
          }
          ((float *)a.lse)[bh * a.seq_q + row] = l;
        }
      }
    }
}

} // namespace sj
