// sj_geom.cuh -- where a sequence lives: dense batches and packed
// (varlen) sequences behind one set of helpers (layouts in sj_abi.h).
#pragma once
#include "sj_abi.h"
#include "sj_common.cuh"

namespace sj {

constexpr int V8_GAP = SJ_V8_GAP; // varlen v8: room between sequences

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

} // namespace sj
