// sj_reference.cuh -- FP32 reference attention, used by the tests and by
// `sagejit check`.  No quantization; inputs are converted exactly to fp32,
// scores, softmax (expf) and the weighted sum are fp32.  Slow by design.
//
// A CTA of REF_WARPS warps handles REF_WARPS * REF_ROWS query rows of one
// (batch, head); K and V tiles of REF_TILE keys are staged in shared memory
// as fp32.  Each warp keeps REF_ROWS rows, each lane D/32 channels of them.
#pragma once
#include "sj_abi.h"
#include "sj_common.cuh"

namespace sj {

inline constexpr int REF_WARPS = 4;
inline constexpr int REF_ROWS = 4;
inline constexpr int REF_TILE = 32;
inline constexpr int REF_MAX_D = 256;

template <int DT, int D>
__global__ void __launch_bounds__(REF_WARPS * 32) reference_attn(const sj_ref_args a) {
  static_assert(D % 32 == 0 && D <= REF_MAX_D, "head dim");
  constexpr int CPL = D / 32; // channels per lane
  __shared__ float sk[REF_TILE][D + 1];
  __shared__ float sv[REF_TILE][D + 1];
  const int h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (a.heads_q / a.heads_kv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * REF_WARPS + warp) * REF_ROWS;

  float q[REF_ROWS][CPL], o[REF_ROWS][CPL];
  float m[REF_ROWS], l[REF_ROWS];
  int last_key[REF_ROWS];
#pragma unroll
  for (int r = 0; r < REF_ROWS; r++) {
    const int row = row0 + r;
    m[r] = neg_inf();
    l[r] = 0.f;
    last_key[r] = a.seq_kv - 1;
    if (a.causal)
      last_key[r] = min(last_key[r], row + a.causal_offset);
    #pragma unroll
    for (int c = 0; c < CPL; c++) {
      const int ch = c * 32 + lane;
      float x = 0.f;
      if (row < a.seq_q) {
        const u16 *p = (const u16 *)a.q +
                       ((i64)b * a.q_sb + (i64)h * a.q_sh + (i64)row * a.q_sn);
        x = to_f32<DT>(p[ch]);
      }
      q[r][c] = x;
      o[r][c] = 0.f;
    }
  }
  for (int k0 = 0; k0 < a.seq_kv; k0 += REF_TILE) {
    __syncthreads();
    for (int i = threadIdx.x; i < REF_TILE * D; i += REF_WARPS * 32) {
      const int kr = i / D, ch = i % D, n = k0 + kr;
      float kx = 0.f, vx = 0.f;
      if (n < a.seq_kv) {
        const u16 *kp = (const u16 *)a.k +
                        ((i64)b * a.k_sb + (i64)hk * a.k_sh + (i64)n * a.k_sn);
        const u16 *vp = (const u16 *)a.v +
                        ((i64)b * a.v_sb + (i64)hk * a.v_sh + (i64)n * a.v_sn);
        kx = to_f32<DT>(kp[ch]);
        vx = to_f32<DT>(vp[ch]);
      }
      sk[kr][ch] = kx;
      sv[kr][ch] = vx;
    }
    __syncthreads();
    const int kend = min(REF_TILE, a.seq_kv - k0);
    for (int kr = 0; kr < kend; kr++) {
      const int n = k0 + kr;
    #pragma unroll
  for (int r = 0; r < REF_ROWS; r++) {
        if (n > last_key[r])
          continue; // uniform across the warp
        float dot = 0.f;
#pragma unroll
        for (int c = 0; c < CPL; c++)
          dot += q[r][c] * sk[kr][c * 32 + lane];
        dot = group_sum<32>(dot) * a.sm_scale;
        const float m_new = fmaxf(m[r], dot);
        const float corr = expf(m[r] - m_new);
        const float p = expf(dot - m_new);
        l[r] = l[r] * corr + p;
#pragma unroll
        for (int c = 0; c < CPL; c++)
          o[r][c] = o[r][c] * corr + p * sv[kr][c * 32 + lane];
        m[r] = m_new;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < REF_ROWS; r++) {
    const int row = row0 + r;
    if (row >= a.seq_q)
      continue;
    const i64 bh = (i64)b * a.heads_q + h;
    float *out = (float *)a.o + (bh * a.seq_q + row) * (i64)D;
    const float inv = l[r] > 0.f ? 1.0f / l[r] : 0.f;
#pragma unroll
    for (int c = 0; c < CPL; c++)
      out[c * 32 + lane] = o[r][c] * inv;
    if (a.lse && lane == 0)
      ((float *)a.lse)[bh * a.seq_q + row] = l[r] > 0.f ? m[r] + logf(l[r]) : neg_inf();
  }
}

} // namespace sj
