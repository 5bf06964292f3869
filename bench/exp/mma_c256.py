#!/usr/bin/env python3
"""bench/exp/mma_c256.py TEMPLATE_DIR -- throwaway variant (forty-sixth
session): FP16PV fp32 non-causal D = 128 in 256-row CTAs of eight warps
(32 rows each) that read every K/V tile once for 256 rows instead of 128.

Timed through SAGEJIT_TUNE=warp_q=16, which makes the runtime launch eight
warps per CTA and compile the WARP_Q = 16 instance; in this variant that
instance of the one shape above runs 32 rows per warp: the even Q blocks'
CTAs take their block and the next, the odd ones return at once.  The
runtime sizes the shared memory for a 128-row Q tile and three stages; a
256-row Q tile and two stages fit the same bytes.  Every other instance is
unchanged."""
import sys

p = sys.argv[1] + "/sj_attn_mma.cuh"
s = open(p).read()
edits = [
    # the body's template parameters as given, then the effective ones
    ("template <int FAM, int DT, int D, bool CAUSAL, int ACC, int WARP_Q, int STAGES, int KSUB,\n"
     "          bool PRE>\n"
     "__device__ __forceinline__ void attn_mma_body(const sj_attn_args &a,\n"
     "                                              u32x4 (&qraw_pre)[WARP_Q / 8][D / 32]) {\n"
     "  constexpr int NWARPS = BLK_Q / WARP_Q;\n",
     "template <int FAM, int DT, int D, bool CAUSAL, int ACC, int WARP_Q_T, int STAGES_T, int KSUB,\n"
     "          bool PRE>\n"
     "__device__ __forceinline__ void attn_mma_body(const sj_attn_args &a,\n"
     "                                              u32x4 (&qraw_pre)[WARP_Q_T / 8][D / 32]) {\n"
     "  constexpr bool C256 = FAM == FP16PV && D == 128 && !CAUSAL && ACC == ACC_FP32 &&\n"
     "                        WARP_Q_T == 16 && !PRE;\n"
     "  constexpr int WARP_Q = C256 ? 32 : WARP_Q_T;\n"
     "  constexpr int STAGES = C256 ? 2 : STAGES_T;\n"
     "  constexpr int CTA_Q = C256 ? 256 : BLK_Q;\n"
     "  constexpr int NWARPS = CTA_Q / WARP_Q;\n"),
    ("  u8 *sK0 = smem + S::Q_BYTES;\n",
     "  u8 *sK0 = smem + CTA_Q * S::Q_PITCH;\n"),
    ("  const int q0 = qblk * BLK_Q;\n  const Seq sq = seq_q(G, b), sk = seq_kv(G, b);\n"
     "  if (q0 >= sq.len)\n",
     "  const int q0 = qblk * BLK_Q;\n  const Seq sq = seq_q(G, b), sk = seq_kv(G, b);\n"
     "  if (C256 && (qblk & 1))\n    return;\n"
     "  if (q0 >= sq.len)\n"),
    ("  u32x4(&qraw)[RPT][D / 32] = PRE ? qraw_pre : qraw_own;\n",
     "  auto &qraw = c256_pick<PRE>(qraw_pre, qraw_own); // (C256 has no PRE)\n"),
    ("template <int FAM, int DT, int D, bool CAUSAL, int ACC, int WARP_Q_T,",
     "template <bool P, class A, class B> __device__ __forceinline__ auto &c256_pick(A &x, B &y) {\n"
     "  if constexpr (P)\n    return x;\n  else\n    return y;\n}\n"
     "template <int FAM, int DT, int D, bool CAUSAL, int ACC, int WARP_Q_T,"),
    ("    const int last = q0 + BLK_Q - 1 + causal_offset; // last visible key\n"
     "    const int lim",
     "    const int last = q0 + CTA_Q - 1 + causal_offset; // last visible key\n"
     "    const int lim"),
    ("    constexpr int CPR = D / 16, QCH = BLK_Q * CPR;\n",
     "    constexpr int CPR = D / 16, QCH = CTA_Q * CPR;\n"),
    ("    const i64 base = bh * G.n_qblk + qblk;\n",
     "    const i64 base = bh * G.n_qblk + qblk + (C256 ? warp / 4 : 0);\n"),
    ("      q_scale = qs[base * NWARPS + warp];\n    else\n      q_scale = qs[(base * NWARPS + warp) * 8 + g];\n",
     "      q_scale = qs[base * (BLK_Q / WARP_Q) + warp % (BLK_Q / WARP_Q)];\n"
     "    else\n      q_scale = qs[(base * (BLK_Q / WARP_Q) + warp % (BLK_Q / WARP_Q)) * 8 + g];\n"),
    ("  store_o_rows<D>(a, esq, ce.b, ce.h, eq0, sO, O_PITCH, threadIdx.x, NTHREADS);\n",
     "  store_o_rows<D, CTA_Q>(a, esq, ce.b, ce.h, eq0, sO, O_PITCH, threadIdx.x, NTHREADS);\n"),
]
for old, new in edits:
    if s.count(old) != 1:
        sys.exit("mma_c256: the template no longer has: " + old.splitlines()[0])
    s = s.replace(old, new)
open(p, "w").write(s)
