#!/usr/bin/env python3
"""bench/exp/mma_bulk.py TEMPLATE_DIR -- throwaway variant (forty-sixth
session; on the H100 it lost 11-45 %, bench/NOTES.md bulk): FP16PV's K/V tiles by `cp.async.bulk` row copies
on sm_90+ (`BULK`), where attn_mma runs three stages (D = 32, 96, 128).

The l2h row of bench/NOTES.md says the cp.async copies cost the FP16PV
kernel 4-7 %.  Each thread issues 4 (K) + 8 (V) 16-byte cp.async per tile
at D = 128 with their address arithmetic, through the same MIO queue as
the ldmatrix loads.  Here each of the CTA's 128 threads issues one bulk
copy per tile instead: threads 0-63 a K row (D bytes), threads 64-127 a V
row (2 D bytes, the caller's FP16 row); both complete on the stage's
mbarrier (in the padding of Q rows 0-2, never read by ldmatrix), whose
expected bytes thread 0 sets.  V rows past the sequence are zero-filled
by plain stores (published by the next tiles' barriers); K's tail rows
exist in the quantizer's padded K8, as for cp.async.  A thread waits on
the tile's mbarrier, then the one __syncthreads per tile as before.  The
bytes are the same: this cuts the issue side of l2h's gain only.

The bk_* helpers repeat the wgmma family's mbar_* / bulk_load under an
arch guard (those are sm_90a-only): if BULK ships, move one set into
sj_common.cuh for both families."""
import sys

p = sys.argv[1] + "/sj_attn_mma.cuh"
s = open(p).read()
helpers = '''
// BULK (bench/exp/mma_bulk.py): one-dimensional bulk copies completing on
// an mbarrier (sm_90+; the other targets never call these).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define SJ_HAS_BULK 1
#else
#define SJ_HAS_BULK 0
#endif
__device__ __forceinline__ void bk_init(u32 bar, int count) {
#if SJ_HAS_BULK
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\\n" ::"r"(bar), "r"(count));
#endif
}
__device__ __forceinline__ void bk_fence_init() {
#if SJ_HAS_BULK
  asm volatile("fence.mbarrier_init.release.cluster;\\n" ::: "memory");
#endif
}
__device__ __forceinline__ void bk_inval(u32 bar) {
#if SJ_HAS_BULK
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\\n" ::"r"(bar) : "memory");
#endif
}
__device__ __forceinline__ void bk_expect_tx(u32 bar, u32 bytes) {
#if SJ_HAS_BULK
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
#endif
}
__device__ __forceinline__ void bk_copy(u32 dst, const void *src, u32 bytes, u32 bar) {
#if SJ_HAS_BULK
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
               "[%0], [%1], %2, [%3];\\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#endif
}
__device__ __forceinline__ void bk_wait(u32 bar, int parity) {
#if SJ_HAS_BULK
  u32 done;
  do {
    asm volatile("{\\n.reg .pred p;\\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\n"
                 "selp.u32 %0, 1, 0, p;\\n}\\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!done);
#endif
}

template <int FAM, int D, int NTHREADS, bool SPLIT, bool VFULL = false, bool KS_SMEM = false>
struct KvLoader {'''
bulk_method = '''  // BULK: the next tile by one bulk copy per thread (128 threads: K row
  // t, or V row t - 64), completing on `bar`; FP16 V rows past the
  // sequence zero-filled by plain stores.
  __device__ __forceinline__ void bulk(u8 *sK, u8 *sV, u32 bar) {
    static_assert(NTHREADS == 128 && !F8, "BULK: FP16PV, four warps");
    const int r = threadIdx.x % BLK_K;
    const int rows_in = rows_left < BLK_K ? rows_left : BLK_K;
    if (threadIdx.x == 0)
      bk_expect_tx(bar, BLK_K * D + rows_in * 2 * D + (KS_SMEM ? 16 : 0));
    if (threadIdx.x < BLK_K) {
      bk_copy(smem_addr(sK + r * S::K_PITCH), k + r * D, D, bar);
    } else if (r < rows_in) {
      bk_copy(smem_addr(sV + r * S::V_PITCH), v + r * v_pitch, 2 * D, bar);
    } else {
#pragma unroll
      for (int c = 0; c < 2 * D / 16; c++)
        *(uint4 *)(sV + r * S::V_PITCH + 16 * c) = make_uint4(0u, 0u, 0u, 0u);
    }
    if (KS_SMEM) {
      if (threadIdx.x == NTHREADS - 1)
        bk_copy(smem_addr(sK + D), ks_base + ks, 16, bar);
      ks += 16;
    }
    k += BLK_K * D;
    v += BLK_K * v_pitch;
    rows_left -= BLK_K;
  }
  template <bool FULL> __device__ __forceinline__ void load_impl(u8 *sK, u8 *sV) {'''
edits = [
    ("\ntemplate <int FAM, int D, int NTHREADS, bool SPLIT, bool VFULL = false, bool KS_SMEM = false>\n"
     "struct KvLoader {", helpers),
    ("  template <bool FULL> __device__ __forceinline__ void load_impl(u8 *sK, u8 *sV) {",
     bulk_method),
    ("  constexpr bool KS_SMEM = !SPLIT && mma_ks_smem(FAM, ACC, D, CAUSAL);\n",
     "  constexpr bool KS_SMEM = !SPLIT && mma_ks_smem(FAM, ACC, D, CAUSAL);\n"
     "  // BULK: FP16PV's tiles by bulk row copies (bench/exp/mma_bulk.py)\n"
     "  constexpr bool BULK = !F8 && STAGES >= 3 && BLK_Q / WARP_Q == 4 && SJ_HAS_BULK;\n"),
    ("  KvLoader<FAM, D, NTHREADS, SPLIT, LEAN, KS_SMEM> ld;\n  ld.init(src);\n"
     "  if (n_tiles > 0) {\n    ld.load(sK0, sV0);\n    cp_async_commit();\n  }\n"
     "  if (STAGES >= 3 && n_tiles > 1) {\n    ld.load(sK0 + S::K_BYTES, sV0 + S::V_BYTES);\n"
     "    cp_async_commit();\n  }\n",
     "  KvLoader<FAM, D, NTHREADS, SPLIT, LEAN, KS_SMEM> ld;\n  ld.init(src);\n"
     "  // BULK: the stages' mbarriers in the padding of Q rows 0-2\n"
     "  const u32 bk_bar0 = smem_addr(sQ + D);\n"
     "  if constexpr (BULK) {\n"
     "    if (threadIdx.x == 0) {\n"
     "#pragma unroll\n"
     "      for (int s = 0; s < 3; s++)\n"
     "        bk_init(bk_bar0 + s * S::Q_PITCH, 1);\n"
     "      bk_fence_init();\n"
     "    }\n"
     "    __syncthreads();\n"
     "    if (n_tiles > 0)\n      ld.bulk(sK0, sV0, bk_bar0);\n"
     "    if (n_tiles > 1)\n      ld.bulk(sK0 + S::K_BYTES, sV0 + S::V_BYTES, bk_bar0 + S::Q_PITCH);\n"
     "  } else {\n"
     "  if (n_tiles > 0) {\n    ld.load(sK0, sV0);\n    cp_async_commit();\n  }\n"
     "  if (STAGES >= 3 && n_tiles > 1) {\n    ld.load(sK0 + S::K_BYTES, sV0 + S::V_BYTES);\n"
     "    cp_async_commit();\n  }\n"
     "  }\n"),
    ("  cp_async_wait<0>();\n  __syncthreads(); // the Q tile (copied or stored) and the first K/V tiles\n",
     "  cp_async_wait<0>();\n"
     "  if (BULK && n_tiles > 0)\n    bk_wait(bk_bar0, 0);\n"
     "  __syncthreads(); // the Q tile (copied or stored) and the first K/V tiles\n"),
    ("      if (j > 0) {\n        if (j + 1 < n_tiles)\n          cp_async_wait<1>();\n"
     "        else\n          cp_async_wait<0>();\n        __syncthreads();\n      }\n"
     "      if (j + 2 < n_tiles) {\n"
     "        ld.load(sK0 + ((j + 2) % STAGES) * S::K_BYTES, sV0 + ((j + 2) % STAGES) * S::V_BYTES);\n"
     "        cp_async_commit();\n      }\n",
     "      if (j > 0) {\n"
     "        if (BULK)\n          bk_wait(bk_bar0 + (j % 3) * S::Q_PITCH, (j / 3) & 1);\n"
     "        else if (j + 1 < n_tiles)\n          cp_async_wait<1>();\n"
     "        else\n          cp_async_wait<0>();\n        __syncthreads();\n      }\n"
     "      if (j + 2 < n_tiles) {\n"
     "        if constexpr (BULK) {\n"
     "          ld.bulk(sK0 + ((j + 2) % STAGES) * S::K_BYTES, sV0 + ((j + 2) % STAGES) * S::V_BYTES,\n"
     "                  bk_bar0 + ((j + 2) % 3) * S::Q_PITCH);\n"
     "        } else {\n"
     "        ld.load(sK0 + ((j + 2) % STAGES) * S::K_BYTES, sV0 + ((j + 2) % STAGES) * S::V_BYTES);\n"
     "        cp_async_commit();\n        }\n      }\n"),
    ("  __syncthreads(); // every warp is done with sQ/sK/sV\n",
     "  if (BULK && threadIdx.x == 0) {\n"
     "#pragma unroll\n"
     "    for (int s = 0; s < 3; s++)\n"
     "      bk_inval(bk_bar0 + s * S::Q_PITCH); // the O staging writes over them\n"
     "  }\n"
     "  __syncthreads(); // every warp is done with sQ/sK/sV\n"),
]
for old, new in edits:
    if s.count(old) != 1:
        sys.exit("mma_bulk: the template no longer has: " + old.strip().splitlines()[0])
    s = s.replace(old, new)
open(p, "w").write(s)
