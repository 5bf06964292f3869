#!/usr/bin/env python3
"""make_templates.py SRC DST -- a copy of kernel_templates/ (SRC) in DST whose
wgmma attention kernel records a per-CTA timeline (bench/NOTES.md, the
timeline row of the twenty-third session).

For measurement only: run with SAGEJIT_TEMPLATE_DIR=DST (the template hash is
in every cache key, so these kernels never mix with the real ones) and read
the stamps back with cta_timeline.py.  Each CTA overwrites the first 64 bytes
of its first output row with 16 u32 words, so the output is wrong there:

  0 entry   1 first Q.K^T done   2 loop done   3 before the O store
  4 %smid   5-7 blockIdx.x/y/z
  8-14 thread 0 after: the barrier set-up's __syncthreads, pdl_wait, its
       first tile's copies issued (solo CTAs), the fused Q, the ones block's
       sync, the q_full wait, the first K tile's wait

All are the low 32 bits of %globaltimer (ns).  Stamps 8-14 go through the
fused-Q scale scratch (RED_OFF), so per_block Q is not supported; the default
per_thread is.  Exits 1, naming the anchor, when the templates no longer
match what this script expects.
"""
import os
import shutil
import sys

src, dst = sys.argv[1], sys.argv[2]
if os.path.exists(dst):
    shutil.rmtree(dst)
shutil.copytree(src, dst)
path = os.path.join(dst, "sj_attn_wgmma.cuh")
s = open(path).read()


def rep(old, new, count=1):
    global s
    n = s.count(old)
    if n != count:
        sys.exit(f"make_templates.py: expected {count} of this anchor, found {n}:\n{old}")
    s = s.replace(old, new)


# the clock, ahead of the body's template line
rep('''template <int DT, int D, bool CAUSAL, int ACC, int STAGES, int BN, int NC, bool PRE>
__device__ __forceinline__ void attn_wgmma_body(const sj_wgmma_args &w,
                                                u32x4 (&qraw)[2][D / 32]) {''',
    '''__device__ __forceinline__ u32 tl_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return (u32)t;
}
template <int DT, int D, bool CAUSAL, int ACC, int STAGES, int BN, int NC, bool PRE>
__device__ __forceinline__ void attn_wgmma_body(const sj_wgmma_args &w,
                                                u32x4 (&qraw)[2][D / 32], u32 tl_e) {''')
rep("(w, qraw);", "(w, qraw, tl_e);", 3)
rep('''#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  u32x4 qraw[2][D / 32];''', '''#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const u32 tl_e = tl_now();
  u32x4 qraw[2][D / 32];''')
# thread 0's prologue steps, into the fused-Q scratch
rep('''  __syncthreads();
  if (!PRE)
    pdl_wait(); // everything the quantizer wrote
''', '''  __syncthreads();
  u32 *tl_w = (u32 *)(smem + S::RED_OFF);
  if (threadIdx.x == 0)
    tl_w[0] = tl_now();
  if (!PRE)
    pdl_wait(); // everything the quantizer wrote
  if (threadIdx.x == 0)
    tl_w[1] = tl_now();
''')
rep('''      if (n_tiles > 0)
        load_tile(solo_rows, 0);
    }''', '''      if (n_tiles > 0)
        load_tile(solo_rows, 0);
      tl_w[2] = tl_now();
    }''')
rep('''                                        (float *)(smem + S::RED_OFF));''',
    '''                                        (float *)(smem + S::RED_OFF));
    if (threadIdx.x == 0)
      tl_w[3] = tl_now();''')
rep('''  consumer_sync<NC>();
  load_kscale(0);
  mbar_wait(q_full, 0);''', '''  consumer_sync<NC>();
  if (threadIdx.x == 0)
    tl_w[4] = tl_now();
  load_kscale(0);
  mbar_wait(q_full, 0);
  if (threadIdx.x == 0)
    tl_w[5] = tl_now();''')
rep('''  if (n_tiles > 0) {
    qk_start(0, 0);''', '''  u32 tl_p = 0, tl_l = 0;
  if (n_tiles > 0) {
    mbar_wait(SJ_K_FULL(0), 0);
    if (threadIdx.x == 0)
      tl_w[6] = tl_now();
    qk_start(0, 0);''')
rep('''        load_tile(solo_rows, j);
    qk_done();''', '''        load_tile(solo_rows, j);
    qk_done();
    tl_p = tl_now();''')
rep('''  // ---- epilogue: normalize, undo V scaling, stage, store whole rows
  consumer_sync<NC>(); // every consumer is done with every tile''',
    '''  // ---- epilogue: normalize, undo V scaling, stage, store whole rows
  tl_l = tl_now();
  consumer_sync<NC>(); // every consumer is done with every tile''')
# the words over the staged first row, before the store
rep('''  consumer_sync<NC>();
  store_o_rows<D, BQ>(a, sq, b, h, q0, smem, S::O_PITCH, threadIdx.x - CT0, NCC * 128);''',
    '''  __syncwarp();
  if (threadIdx.x == CT0) {
    u32 sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    u32 *tw = (u32 *)smem;
    tw[0] = tl_e;
    tw[1] = tl_p;
    tw[2] = tl_l;
    tw[3] = tl_now();
    tw[4] = sm;
    tw[5] = blockIdx.x;
    tw[6] = blockIdx.y;
    tw[7] = blockIdx.z;
    for (int i = 0; i < 7; i++)
      tw[8 + i] = tl_w[i];
  }
  consumer_sync<NC>();
  store_o_rows<D, BQ>(a, sq, b, h, q0, smem, S::O_PITCH, threadIdx.x - CT0, NCC * 128);''')
open(path, "w").write(s)
print(f"timeline templates in {dst}")
