// sj_geom.cuh -- where a sequence lives: dense batches and packed
// (varlen) sequences behind one set of helpers (layouts in sj_abi.h).
#pragma once
#include "sj_abi.h"
#include "sj_common.cuh"

namespace sj {

inline constexpr int V8_GAP = SJ_V8_GAP; // varlen v8: room between sequences

__device__ __forceinline__ int clampi(int x, int lo, int hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

// One sequence of a call: its length and (varlen) first token.  Prefix sums
// are clamped so that wrong ones can never index out of bounds.
struct Seq {
  int len;
  i64 tok;
};

// From a prefix-sum array (0 for dense calls: every sequence has maxlen).
__device__ __forceinline__ Seq seq_at(sj_ptr cu_p, int b, int total, int maxlen) {
  Seq s;
  if (!cu_p) {
    s.len = maxlen;
    s.tok = 0;
  } else {
    const int *cu = (const int *)cu_p;
    const int a = clampi(cu[b], 0, total), e = clampi(cu[b + 1], a, total);
    s.len = min(e - a, maxlen);
    s.tok = a;
  }
  return s;
}
__device__ __forceinline__ Seq seq_q(const sj_geom &g, int b) {
  return seq_at(g.cu_q, b, g.total_q, g.seq_q);
}
__device__ __forceinline__ Seq seq_kv(const sj_geom &g, int b) {
  return seq_at(g.cu_kv, b, g.total_kv, g.seq_kv);
}

// The Q block, head and batch of this CTA.  Non-causal: the grid is (Q
// blocks, heads, batch).  Causal CTAs see more keys the later their Q
// block, and CTAs start in launch order, so the heaviest go first (list
// scheduling, longest first: the tail is then short CTAs): the Q blocks
// count down, one head at a time, or with SJ_F_HEADS_FIRST (the grid is
// then (heads, Q blocks, batch)) every head's last Q block, then every
// head's one before, ... (attention.c: causal_heads_first).  Plain
// blockIdx arithmetic, which the compiler re-reads where it needs it
// rather than holding it across the loop: an earlier form with divisions
// spilled 236 bytes in the causal solo kernel and ran 15 % slower.
struct CtaCoord {
  int qblk, h, b;
};
__device__ __forceinline__ CtaCoord cta_coord(const sj_attn_args &a, bool causal) {
  CtaCoord c;
  c.b = (int)blockIdx.z;
  if (!causal) {
    c.qblk = (int)blockIdx.x;
    c.h = (int)blockIdx.y;
  } else if (a.flags & SJ_F_HEADS_FIRST) {
    c.qblk = (int)(gridDim.y - 1 - blockIdx.y);
    c.h = (int)blockIdx.x;
  } else {
    c.qblk = (int)(gridDim.x - 1 - blockIdx.x);
    c.h = (int)blockIdx.y;
  }
  return c;
}

// The same, from special registers read by volatile asm: attn_mma calls
// it at entry and again in its epilogue, and each call reads the grid
// afresh.  With cta_coord the compiler keeps the order's select (or what
// it feeds) live across the loop of the 255-register kernels: 50-80
// bytes more spills; with the second read the default causal D = 128
// kernels spill 0-60 bytes less than one head at a time did on sm_80,
// sm_89 and sm_90a, but 10-70 more on sm_100 and sm_120 (ptxas -v), where
// attn_mma uses cta_coord (its REREAD).
__device__ __forceinline__ u32 ctaid_x() { u32 r; asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(r)); return r; }
__device__ __forceinline__ u32 ctaid_y() { u32 r; asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(r)); return r; }
__device__ __forceinline__ u32 ctaid_z() { u32 r; asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(r)); return r; }
__device__ __forceinline__ u32 nctaid_x() { u32 r; asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(r)); return r; }
__device__ __forceinline__ u32 nctaid_y() { u32 r; asm volatile("mov.u32 %0, %%nctaid.y;" : "=r"(r)); return r; }
__device__ __forceinline__ CtaCoord cta_coord_reread(const sj_attn_args &a, bool causal) {
  CtaCoord c;
  c.b = (int)ctaid_z();
  if (!causal) {
    c.qblk = (int)ctaid_x();
    c.h = (int)ctaid_y();
  } else if (a.flags & SJ_F_HEADS_FIRST) {
    c.qblk = (int)(nctaid_y() - 1 - ctaid_y());
    c.h = (int)ctaid_x();
  } else {
    c.qblk = (int)(nctaid_x() - 1 - ctaid_x());
    c.h = (int)ctaid_y();
  }
  return c;
}

// Element offset of (batch b, token 0) in a caller's tensor.
__device__ __forceinline__ i64 user_base(bool varlen, const Seq &s, int b,
                                         i64 sb, i64 sn) {
  return varlen ? s.tok * sn : (i64)b * sb;
}

// First row of (b, h) in q8 / k8, and the first LSE / qk_mean entry.
__device__ __forceinline__ i64 q8_row0(const sj_geom &g, const Seq &s, int b, int h) {
  return g.cu_q ? (i64)h * g.rows_q + s.tok + (i64)BLK_Q * b
                : ((i64)b * g.heads_q + h) * g.seq_q_pad;
}
__device__ __forceinline__ i64 k8_row0(const sj_geom &g, const Seq &s, int b, int h) {
  return g.cu_kv ? (i64)h * g.rows_kv + s.tok + (i64)BLK_K * b
                 : ((i64)b * g.heads_kv + h) * g.seq_kv_pad;
}
__device__ __forceinline__ i64 lse_row0(const sj_geom &g, const Seq &s, int b, int h) {
  return g.cu_q ? (i64)h * g.total_q + s.tok : ((i64)b * g.heads_q + h) * g.seq_q;
}
// v8: channel rows of `v8_pitch` bytes; (b, h, channel c, token 0) is at
// v8_base + c * v8_pitch.  Varlen columns start 16-byte aligned.
__device__ __forceinline__ i64 v8_pitch(const sj_geom &g) {
  return g.cu_kv ? g.cols_kv : g.seq_kv_pad;
}
__device__ __forceinline__ i64 v8_base(const sj_geom &g, const Seq &s, int b, int h,
                                       int d) {
  return g.cu_kv ? (i64)h * d * g.cols_kv + ((s.tok + 15) / 16) * 16 + (i64)V8_GAP * b
                 : ((i64)b * g.heads_kv + h) * d * g.seq_kv_pad;
}
// Channel rows of the whole v8 buffer.  Under ACC_FP32_FP32_SPLITV the
// residual buffer (same layout) follows it: v8 + v8_lo_offset.
__device__ __forceinline__ i64 v8_rows(const sj_geom &g, int d) {
  return g.cu_kv ? (i64)g.heads_kv * d : (i64)g.batch * g.heads_kv * d;
}
__device__ __forceinline__ i64 v8_lo_offset(const sj_geom &g, int d) {
  return v8_rows(g, d) * v8_pitch(g);
}

// --------------------------------------------- fused Q (SJ_F_Q_FUSED)
// The attention kernels quantize their own Q rows in place of quant_qkv's Q
// blocks (which cost a read of Q, a write of q8 and its read back): same
// scale groups, values and rounding as quant_rows (docs/kernels.md).  Lane
// (g, t) of a warp holds rows row0 + g + 8 k (k < RPT) of the caller's Q,
// 16-byte pieces t, t + 4, ... of each, so a warp load covers 64
// contiguous bytes of 8 rows.  Rows past the sequence read as zeros.
template <int D, int RPT>
__device__ __forceinline__ void fq_load(const sj_attn_args &a, const Seq &sq, int b, int h,
                                        int row0, int lane, u32x4 (&raw)[RPT][D / 32]) {
  const int g = lane / 4, t = lane % 4;
  const u8 *src = (const u8 *)a.q +
                  (user_base(a.g.cu_q != 0, sq, b, a.q_sb, a.q_sn) + (i64)h * a.q_sh) * 2;
#pragma unroll
  for (int k = 0; k < RPT; k++) {
    const int row = row0 + g + 8 * k;
    // one row pointer, then a constant offset per load
    const u8 *rp = src + (i64)row * a.q_sn * 2 + t * 16;
    const bool in = row < sq.len;
#pragma unroll
    for (int i = 0; i < D / 32; i++) {
      raw[k][i].x = raw[k][i].y = raw[k][i].z = raw[k][i].w = 0u;
      if (in)
        raw[k][i] = ld_global16(rp + i * 64);
    }
  }
}
// The lane's max |q * q_prescale| (the caller reduces it over its group).
// The max is taken on the packed 16-bit magnitudes (one LOP and one HMNMX2
// per two values instead of a conversion, a product and a max per value)
// and scaled once: rounding is monotone, so rn(max |x| * |p|) is the max of
// the rn(|x| * |p|), the value quant_rows computes, bit for bit.  Like
// fmaxf, max.f16x2 and max.bf16x2 return the other operand for a NaN.
template <int DT, int D, int RPT>
__device__ __forceinline__ float fq_amax(const sj_attn_args &a,
                                         const u32x4 (&raw)[RPT][D / 32]) {
  u32 m = 0u; // +0, +0
#pragma unroll
  for (int k = 0; k < RPT; k++)
#pragma unroll
    for (int i = 0; i < D / 32; i++) {
      const u32 w[4] = {raw[k][i].x, raw[k][i].y, raw[k][i].z, raw[k][i].w};
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const u32 x = w[e] & 0x7fff7fffu;
        if (DT == FP16)
          asm("max.f16x2 %0, %0, %1;" : "+r"(m) : "r"(x));
        else
          asm("max.bf16x2 %0, %0, %1;" : "+r"(m) : "r"(x));
      }
    }
  float lo, hi;
  unpack2<DT>(m, lo, hi);
  return fmaxf(lo, hi) * fabsf(a.q_prescale);
}
// The INT8 of one piece (8 channels), as quant_rows rounds it (s8_bits:
// the product by q_prescale and the one by inv rounded separately).
template <int DT>
__device__ __forceinline__ uint2 fq_pack(const sj_attn_args &a, const u32x4 &raw, float inv) {
  float x[8];
  unpack8<DT>(raw, x);
  u32 q[8];
#pragma unroll
  for (int e = 0; e < 8; e++)
    q[e] = s8_bits(__fmul_rn(x[e], a.q_prescale), inv);
  return make_uint2(pack4_lo(q[0], q[1], q[2], q[3]), pack4_lo(q[4], q[5], q[6], q[7]));
}
// When the LSE needs it under K smoothing, q.mean_k of each of the lane's
// rows, summed over the quad and stored by lane t = 0 where quant_rows
// would have (qk_mean at lse0 + row; the epilogue's store_lse reads it back
// in the same thread).
template <int DT, int D, int RPT>
__device__ __forceinline__ void fq_qk(const sj_attn_args &a, const u32x4 (&raw)[RPT][D / 32],
                                      const Seq &sq, i64 lse0, int row0, i64 bhk, int lane) {
  if (!((a.flags & SJ_F_LSE) && (a.flags & SJ_F_SMOOTH_K)))
    return;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int k = 0; k < RPT; k++) {
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < D / 32; i++) {
      float x[8], mean[8];
      unpack8<DT>(raw[k][i], x);
      load8_f32((const float *)a.k_mean + bhk * D + (i * 4 + t) * 8, mean);
#pragma unroll
      for (int e = 0; e < 8; e++)
        dot += x[e] * mean[e];
    }
    dot = quad_sum(dot);
    const int row = row0 + g + 8 * k;
    if (t == 0 && row < sq.len)
      ((float *)a.qk_mean)[lse0 + row] = dot;
  }
}

// ---------------------------------------------- attention epilogue pieces
// Shared by attn_mma and attn_wgmma (sj_attn_args).

// Writes the natural-log LSE of query row `row` (if the call asked for it):
// m is the row's reference max and `off` the P offset in log2 units, dsum
// the row's sum of P; a row that saw no key gets -inf.  Under K smoothing
// the softmax ignored the constant q.mean_k, which the LSE adds back.
__device__ __forceinline__ void store_lse(const sj_attn_args &a, i64 lse0,
                                          int row, float m, float dsum,
                                          float off) {
  float l;
  if (dsum > 0.f) {
    l = (m + __log2f(dsum) - off) * a.lse_scale;
    if (a.flags & SJ_F_SMOOTH_K)
      l += a.sm_scale_log2 * LN2 * ((const float *)a.qk_mean)[lse0 + row];
  } else {
    l = neg_inf();
  }
  ((float *)a.lse)[lse0 + row] = l;
}

// Copies the ROWS output rows staged in shared memory (16-bit values,
// `pitch` bytes apart) to the caller's O in 16-byte chunks; `tid` of
// `nthreads` threads; rows past the sequence are not stored.
template <int D, int ROWS = BLK_Q>
__device__ __forceinline__ void store_o_rows(const sj_attn_args &a,
                                             const Seq &sq, int b, int h,
                                             int q0, const u8 *s_o, int pitch,
                                             int tid, int nthreads) {
  const sj_geom &G = a.g;
  const i64 o_base = user_base(G.cu_q != 0, sq, b, a.o_sb, a.o_sn) + (i64)h * a.o_sh;
  constexpr int CPR = D / 8; // 16-byte chunks per row
  for (int i = tid; i < ROWS * CPR; i += nthreads) {
    const int lrow = i / CPR, c = i % CPR;
    const int row = q0 + lrow;
    if (row >= sq.len)
      continue;
    const u32x4 w = *(const u32x4 *)(s_o + lrow * pitch + c * 16);
    *(u32x4 *)((u8 *)a.o + (o_base + (i64)row * a.o_sn) * 2 + c * 16) = w;
  }
}

} // namespace sj
