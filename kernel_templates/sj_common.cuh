// sj_common.cuh -- device building blocks shared by every sagejit kernel.
//
// Self-contained: no toolkit header is included (NVRTC gets these files from
// memory).  Conversions and tensor-core operations go through inline PTX so
// that one source compiles for every target from sm_80 on.
#pragma once

namespace sj {

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;

// Namespace-scope constants are `inline constexpr` throughout the templates:
// a plain constexpr variable has internal linkage, and NVRTC emits each one
// into every cubin as a symbol whose name carries a hash of the compile's
// time, so the same kernel compiled a second later came out different
// (and 1 KB larger).  Inline ones are folded and emitted nowhere: a
// kernel's image depends only on its sources and options (test_compile's
// test_image_deterministic).

// ------------------------------------------------------------ enumerations
// The integer values are part of the name expressions the runtime builds
// (runtime/spec.c); keep them in sync with include/sagejit.h.
enum Dtype { FP16 = 1, BF16 = 2 };
enum Family { FP16PV = 1, FP8PV = 2 };
enum QuantGran { PER_BLOCK = 1, PER_WARP = 2, PER_THREAD = 3 };
enum Accum {
  ACC_FP32 = 1,
  ACC_FP32_FP32 = 2,
  ACC_FP16_FP32 = 3,
  ACC_FP32_FP16 = 4,
  // fp32+fp32 with V as two e4m3 terms, V = hi + lo (lo the rounding
  // residual of hi): P.V costs two e4m3 products per tile and its error is
  // P's rounding alone
  ACC_FP32_FP32_SPLITV = 5,
  // wgmma only: P and V in the input's 16-bit type, fp32 accumulation
  // straight into O (the FP16PV family's numerics)
  ACC_PV16 = 6,
  // wgmma only: INT8 P.V.  P as u8 scaled per tile and row (its row max
  // in the tile is 255), V as s8 per channel stored + 128 (u8); exact s32
  // accumulation of a tile, folded into fp32 O with the row's factor
  ACC_PVI8 = 7,
  // ACC_PVI8 for the (batch, kv head) pairs whose V is spread evenly enough
  // for s8 per channel, ACC_FP32_FP32_SPLITV for the others (wgmma and
  // FP8PV); kv_finalize chooses (PVI8_R_MAX), the kernels follow its
  // v_mode byte
  ACC_PVI8_SPLITV = 8
};

// pvi8+splitv: a (batch, kv head) stores V as s8 when R = sum_c max_c^2 /
// sum_c mean_n(v_nc^2) <= PVI8_R_MAX.  max_c is the range s8 must cover
// (of V minus its mean under smooth_v) and the denominator V's own second
// moment (what the output carries, mean included), so R measures the
// rounding against the output's scale.  s8 per channel rounds V with an
// rms error of about sqrt(R / 12) / 127 of V's rms: 2.3e-2 at R = 100,
// where pvi8's whole output error meets split V's ~2.8e-2 (bench/v_spread.c;
// Gaussian V has R ~ 15, 0.1 % of tokens x 20 R ~ 700-1300).
inline constexpr float PVI8_R_MAX = 100.f;

// Tile sizes shared by the quantization and attention kernels.
inline constexpr int BLK_Q = 128; // query rows per attention CTA / Q quant block
inline constexpr int BLK_K = 64;  // keys per KV tile / K quant block

inline constexpr float FP8_P_OFFSET = 8.807354922057604f; // log2(448), the e4m3 max
inline constexpr float U8_P_OFFSET = 7.994353436858858f;  // log2(255), the u8 max
// INT8 P's exponent offset with pack4_u8_sub: log2(255) - 24, so that ex2
// returns the u8 value times 2^-24, the fp16 subnormal it packs
inline constexpr float U8_P_EXP = U8_P_OFFSET - 24.f;
inline constexpr float LOG2E = 1.4426950408889634f;
inline constexpr float LN2 = 0.6931471805599453f;
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// ------------------------------------------------------------ conversions
__device__ __forceinline__ float h2f(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ float bf2f(u16 h) {
  return __uint_as_float(((u32)h) << 16);
}
template <int DT> __device__ __forceinline__ float to_f32(u16 x) {
  return DT == FP16 ? h2f(x) : bf2f(x);
}
// Two packed 16-bit values (low half first) to floats.
template <int DT>
__device__ __forceinline__ void unpack2(u32 w, float &lo, float &hi) {
  lo = to_f32<DT>((u16)(w & 0xffffu));
  hi = to_f32<DT>((u16)(w >> 16));
}
// Lane-wise max / min of two words of two 16-bit values each (sm_80 and
// later); a NaN lane gives the other operand, as fmaxf / fminf.
template <int DT> __device__ __forceinline__ u32 max2(u32 a, u32 b) {
  u32 r;
  if (DT == BF16)
    asm("max.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  else
    asm("max.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
template <int DT> __device__ __forceinline__ u32 min2(u32 a, u32 b) {
  u32 r;
  if (DT == BF16)
    asm("min.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  else
    asm("min.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// float pair -> packed 16-bit pair, lo in the low half.
template <int DT> __device__ __forceinline__ u32 pack2(float lo, float hi) {
  u32 r;
  if (DT == FP16)
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// Saturating fp16 pair, used where bf16 data enters fp16 arithmetic.
__device__ __forceinline__ u32 pack2_f16_sat(float lo, float hi) {
  u32 r;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <int DT> __device__ __forceinline__ u16 from_f32(float x) {
  u16 r;
  if (DT == FP16)
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
  else
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
  return r;
}
// Two floats -> two e4m3 bytes (lo in the low byte), round to nearest,
// saturating to +-448.  Needs sm_89 or newer.
__device__ __forceinline__ u16 pack_e4m3x2(float lo, float hi) {
#if __CUDA_ARCH__ >= 890
  u16 r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return 0;
#endif
}
// Four floats -> four e4m3 bytes, x0 in the low byte: two conversions, the
// second merging into the first (F2FP ... MERGE_C), no masks or permutes.
// Needs sm_89 or newer.
__device__ __forceinline__ u32 pack4_e4m3(float x0, float x1, float x2, float x3) {
#if __CUDA_ARCH__ >= 890
  u32 r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}"
      : "=r"(r)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
#else
  return 0;
#endif
}
__device__ __forceinline__ float f16lo(u32 w) { return h2f((u16)(w & 0xffffu)); }
__device__ __forceinline__ float f16hi(u32 w) { return h2f((u16)(w >> 16)); }
// a + b on two fp16 pairs, rounded to nearest (no flush of subnormals)
__device__ __forceinline__ u32 hadd2_f16(u32 a, u32 b) {
  u32 r;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
// Four e4m3 bytes (the low byte first) -> two fp16 pairs, exactly: h0
// holds bytes 0 and 1, h1 bytes 2 and 3.  Needs sm_89 or newer.
__device__ __forceinline__ void e4m3x4_to_f16(u32 w, u32 &h0, u32 &h1) {
#if __CUDA_ARCH__ >= 890
  asm("{\n.reg .b16 lo, hi;\n"
      "mov.b32 {lo, hi}, %2;\n"
      "cvt.rn.f16x2.e4m3x2 %0, lo;\n"
      "cvt.rn.f16x2.e4m3x2 %1, hi;\n}"
      : "=r"(h0), "=r"(h1)
      : "r"(w));
#else
  h0 = h1 = 0u;
#endif
}
// Two floats rounded to e4m3 (nearest, saturating to +-448) and widened
// exactly to an fp16 pair, lo in the low half.  Needs sm_89 or newer.
__device__ __forceinline__ u32 e4m3_round_f16x2(float lo, float hi) {
#if __CUDA_ARCH__ >= 890
  u32 r;
  asm("{\n.reg .b16 e;\n"
      "cvt.rn.satfinite.e4m3x2.f32 e, %2, %1;\n"
      "cvt.rn.f16x2.e4m3x2 %0, e;\n}"
      : "=r"(r)
      : "f"(lo), "f"(hi));
  return r;
#else
  return 0u;
#endif
}
// Four e4m3 bytes (the low byte first) -> floats, exactly (every e4m3
// value is an fp16 value).  Needs sm_89 or newer.
__device__ __forceinline__ void unpack4_e4m3(u32 w, float (&x)[4]) {
#if __CUDA_ARCH__ >= 890
  u32 h0, h1;
  e4m3x4_to_f16(w, h0, h1);
  x[0] = f16lo(h0);
  x[1] = f16hi(h0);
  x[2] = f16lo(h1);
  x[3] = f16hi(h1);
#else
  x[0] = x[1] = x[2] = x[3] = 0.f;
#endif
}

// Four floats in [0, 255] -> four u8 bytes, x0 in the low byte, rounded
// to nearest: each pair to fp16 (exact to 1/16 here), plus 1024, which
// leaves round(x) in the low mantissa bits of each half (no quarter-rate
// F2I), then one byte permute: five instructions for four values.
// No saturation: 255.4375 and above pack as 0.  The INT8 P paths keep
// their exps at most 255 by rounding upward (u8_bound): the row max mx =
// RU((x - MAGIC_F) mult) bounds every score, sub = RU(mx - log2 255) and
// c = RU(MAGIC_F mult + sub), so x mult - c <= log2 255 in real
// arithmetic, and the exponent FFMA and ex2.approx add ~1e-6.  (Rounded
// to nearest, c alone is off by half its ulp: 0.004 log2 units, i.e.
// 256.0, once mult = q_scale k_scale sm_scale log2(e) passes ~5e-3.)
// FFMA.RP, FMUL.RP and FADD.RP cost what their RN forms do.
// (The mma.sync family's INT8 P; the WGMMA family packs with pack4_u8_sub.)
__device__ __forceinline__ u32 pack4_u8(float x0, float x1, float x2, float x3) {
  u32 lo, hi;
  asm("{\n.reg .b32 t;\n"
      "cvt.rn.f16x2.f32 t, %3, %2;\n"
      "add.rn.f16x2 %0, t, %6;\n"
      "cvt.rn.f16x2.f32 t, %5, %4;\n"
      "add.rn.f16x2 %1, t, %6;\n}"
      : "=r"(lo), "=r"(hi)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3), "r"(0x64006400u));
  return __byte_perm(lo, hi, 0x6420);
}

// The same for four floats x 2^-24 with x in [0, 255]: each pair to fp16,
// where x 2^-24 becomes the subnormal whose bits are round(x) (fp16
// subnormals are m 2^-24, m < 1024, and the conversion keeps them), then
// the byte permute: three instructions for four values and one rounding
// (to nearest even) instead of two.  The caller folds the 2^-24 into its
// exps' argument (U8_P_EXP in place of log2 255 in u8_bound above), so
// x 2^-24 is what ex2 returns; results below 2^-126, flushed by
// ex2.approx.ftz, round to 0 anyway.  255.5 and above pack wrong.
// (WGMMA family: +1-2 % at D = 128, bench/NOTES.md w23; in the mma.sync
// family's 255-register pvi8 kernel the same change measured 1-2.5 %
// slower, so it keeps pack4_u8.)
__device__ __forceinline__ u32 pack4_u8_sub(float x0, float x1, float x2, float x3) {
  u32 lo, hi;
  asm("cvt.rn.f16x2.f32 %0, %2, %1;" : "=r"(lo) : "f"(x0), "f"(x1));
  asm("cvt.rn.f16x2.f32 %0, %2, %1;" : "=r"(hi) : "f"(x2), "f"(x3));
  return __byte_perm(lo, hi, 0x6420);
}

// acc + the sum of the four unsigned bytes of p (one IDP4A): the row sums
// of INT8 P straight from its packed form.
__device__ __forceinline__ u32 dp4a_u8_sum(u32 p, u32 acc) {
  u32 d;
  asm("dp4a.u32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(p), "r"(0x01010101u), "r"(acc));
  return d;
}

// a * b + c in IEEE arithmetic, subnormal inputs included (no flush to
// zero): the INT8 P.V folds read an exact s32 tile sum as the subnormal
// float acc * 2^-149 (sj_attn_wgmma.cuh, fold_i8; sj_attn_mma.cuh).
__device__ __forceinline__ float fma_ieee(float a, float b, float c) {
  float d;
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
  return d;
}

// The INT8 of v * inv, round to nearest even, for |v * inv| <= 127 (every
// scale is the max |v| of its group / 127, so that holds up to rounding;
// no clamp), in the low byte: 1.5 * 2^23 + y holds round-to-nearest-even
// (y) in its low bits, two's complement, with no quarter-rate F2I.  The
// product and the sum are rounded separately (never one FMA), so the
// integer is F2I's of the rounded product, bit for bit.  A non-finite v
// gives an unspecified byte (its head's output is unspecified anyway,
// docs/api.md).
__device__ __forceinline__ u32 s8_bits(float v, float inv) {
  return __float_as_uint(__fadd_rn(__fmul_rn(v, inv), 12582912.0f));
}
// The low bytes of four such words, the first in the low byte.
__device__ __forceinline__ u32 pack4_lo(u32 a, u32 b, u32 c, u32 d) {
  return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

__device__ __forceinline__ float fast_exp2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// 2^x on the FMA and integer pipes instead of the MUFU (the trick of
// FlashAttention-4 on Blackwell), for kernels whose exps queue on the MUFU
// (16 per clock per multiprocessor): x = n + f with n = floor(x), taken by
// one FADD rounding down onto 1.5 * 2^23 (whose low mantissa bits then
// hold n in two's complement), 2^f by a degree-3 polynomial with p(0) = 1
// (relative error <= 8.6e-5 on [0, 1), fitted for this; monotone, and
// p(1-) < 2, so the whole function is monotone too), and n added to the
// exponent field (in unsigned arithmetic, where the shift is defined;
// 1.5 * 2^23's own bits shift out past bit 31).  x is clamped at -126 so
// that the result stays a normal float: -inf, every x below and NaN give
// 2^-126, which any 8- or 16-bit P rounds to 0 (a NaN score's head has no
// specified output anyway).  About eight instructions (FMNMX, FADD.RM, two
// FADD, three FFMA, a shift and an add) for one MUFU.EX2.
__device__ __forceinline__ float poly_exp2(float x) {
  x = fmaxf(x, -126.f);
  const float t = __fadd_rd(x, 12582912.f);
  const float f = x - (t - 12582912.f); // exact: t - 1.5 * 2^23 = floor(x)
  float p = fmaf(f, 7.706604153e-02f, 2.276460826e-01f);
  p = fmaf(p, f, 6.951165199e-01f);
  p = fmaf(p, f, 1.0f);
  return __int_as_float((int)((u32)__float_as_int(p) + ((u32)__float_as_int(t) << 23)));
}

// ------------------------------------------ programmatic dependent launch
// The kernels of one call after the first are launched with programmatic
// stream serialization on sm_90 and later targets (runtime/kernels.c): a
// kernel may start while its predecessor finishes, and waits here before it
// reads anything the predecessor wrote.  Both are no-ops for a plain launch.
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
// Lets the next kernel of the call launch once every CTA of this one has
// started (it still waits for this grid to complete before reading).
__device__ __forceinline__ void pdl_launch_next() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// --------------------------------------------------------- warp reductions
// Row max of the offset scores by their bits.  A score as a float is
// 2^23 + 2^22 + S (positive) or -inf (masked: a negative int), so the bits
// order as the floats do and the int max is the float max, bit for bit.
// max(max(a, b), c) on ints is one VIMNMX3 on sm_90 (a DPX instruction;
// two IMNMX elsewhere), where floats have only the two-input FMNMX, and
// the tree is shallower than a chain (bench/NOTES.md m6).
template <int N> __device__ __forceinline__ int tree_imax(const int *x) {
  if constexpr (N == 1)
    return x[0];
  else if constexpr (N == 2)
    return max(x[0], x[1]);
  else
    return max(max(tree_imax<N / 3>(x), tree_imax<(N - N / 3) / 2>(x + N / 3)),
               tree_imax<N - N / 3 - (N - N / 3) / 2>(x + N / 3 + (N - N / 3) / 2));
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  return v;
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}
// Max over groups of `width` consecutive lanes (width a power of two <= 32).
template <int WIDTH> __device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int o = WIDTH / 2; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <int WIDTH> __device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = WIDTH / 2; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// --------------------------------------------------------------- memory ops
__device__ __forceinline__ u32 smem_addr(const void *p) {
  return (u32)__cvta_generic_to_shared(p);
}
// 16-byte async copy global -> shared; src_bytes 0 writes zeros.
__device__ __forceinline__ void cp_async16(void *dst, const void *src,
                                           int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(src_bytes));
}
// mbarriers, TMA tensor copies and bulk copies (sm_90+): the wgmma
// family's pipeline and attn_mma's TMA tiles (sj_attn_mma.cuh).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void mbar_init(u32 bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, int parity) {
  u32 done;
  do {
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!done);
}
// 2-D tiled TMA load: box at (c0 = innermost coordinate, c1 = row).
__device__ __forceinline__ void tma_load_2d(u32 dst, const void *tmap, int c0,
                                            int c1, u32 bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
               "complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
               "l"(tmap), "r"(c0), "r"(c1), "r"(bar)
               : "memory");
}
// 1-D bulk copy of `bytes` (a multiple of 16, both addresses 16-aligned).
__device__ __forceinline__ void bulk_load(u32 dst, const void *src, u32 bytes, u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
               "[%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const void *tmap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmap) : "memory");
}
// 4-D tiled TMA load: box at (c0 innermost, c1, c2, c3).
__device__ __forceinline__ void tma_load_4d(u32 dst, const void *tmap, int c0, int c1,
                                            int c2, int c3, u32 bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::"
               "complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
               "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
               : "memory");
}
#endif // __CUDA_ARCH__ >= 900
// L2 eviction priorities (sm_80+): a policy for the cache_hint forms
// below, evict_last (keep) or evict_first (demote) where `hint`, else
// evict_normal, the priority of a plain access.
__device__ __forceinline__ unsigned long long l2_policy(bool hint, bool keep) {
  unsigned long long p;
  if (!hint)
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(p));
  else if (keep)
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  else
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ void cp_async16_hint(void *dst, const void *src, int src_bytes,
                                                unsigned long long pol) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(src_bytes), "l"(pol));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(u32 &r0, u32 &r1, u32 &r2, u32 &r3,
                                            const void *p) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
      : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 &r0, u32 &r1, u32 &r2,
                                                  u32 &r3, const void *p) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
      : "r"(smem_addr(p)));
}

struct alignas(16) u32x4 {
  u32 x, y, z, w;
};
__device__ __forceinline__ u32x4 ld_global16(const void *p) {
  u32x4 r;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

__device__ __forceinline__ u32x4 ld_global16_hint(const void *p, unsigned long long pol) {
  u32x4 r;
  asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p), "l"(pol));
  return r;
}

// Eight consecutive fp32 values (32-byte aligned) as two 16-byte loads.
__device__ __forceinline__ void load8_f32(const float *p, float *x) {
  const u32x4 a = ld_global16(p), b = ld_global16(p + 4);
  const u32 w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 8; i++)
    x[i] = __uint_as_float(w[i]);
}

template <int DT> __device__ __forceinline__ void unpack8(const u32x4 &w, float *x) {
  unpack2<DT>(w.x, x[0], x[1]);
  unpack2<DT>(w.y, x[2], x[3]);
  unpack2<DT>(w.z, x[4], x[5]);
  unpack2<DT>(w.w, x[6], x[7]);
}

// ------------------------------------------------------------ tensor cores
// D(16x8 s32) += A(16x32 s8, row) * B(32x8 s8, col)
__device__ __forceinline__ void mma_s8(i32 *d, const u32 *a, u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// D(16x8 s32) += A(16x32 u8, row) * B(32x8 u8, col): INT8 P.V (P and
// V + 128 both unsigned), the same fragments as the e4m3 P.V.
__device__ __forceinline__ void mma_u8(i32 *d, const u32 *a, u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// D(16x8 s32) = A(16x32 s8, row) * B(32x8 s8, col) + c (the same c in all
// four accumulators): the first k-step of a product that starts at c
// (ptxas fills one register quad with c for the C operand).
__device__ __forceinline__ void mma_s8_c(i32 *d, const u32 *a, u32 b0, u32 b1, i32 c) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c));
}
// D(16x8 f32) += A(16x16 f16) * B(16x8 f16)
__device__ __forceinline__ void mma_f16_f32(float *d, const u32 *a, u32 b0,
                                            u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// D(16x8 f32) += A(16x16 bf16) * B(16x8 bf16)
__device__ __forceinline__ void mma_bf16_f32(float *d, const u32 *a, u32 b0,
                                             u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// D(16x8 f16, two packed regs) += A(16x16 f16) * B(16x8 f16)
__device__ __forceinline__ void mma_f16_f16(u32 *d, const u32 *a, u32 b0,
                                            u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
               "{%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};\n"
               : "+r"(d[0]), "+r"(d[1])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// D(16x8 f32) += A(16x32 e4m3) * B(32x8 e4m3); sm_89+
__device__ __forceinline__ void mma_e4m3_f32(float *d, const u32 *a, u32 b0,
                                             u32 b1) {
#if __CUDA_ARCH__ >= 890
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
// D(16x8 f16) += A(16x32 e4m3) * B(32x8 e4m3); sm_89+, PTX 8.7
__device__ __forceinline__ void mma_e4m3_f16(u32 *d, const u32 *a, u32 b0,
                                             u32 b1) {
#if __CUDA_ARCH__ >= 890
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e4m3.f16 "
               "{%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};\n"
               : "+r"(d[0]), "+r"(d[1])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// ------------------------------------------------------------ tensor views
// A [batch, heads, seq, dim] view with element strides (dim contiguous).
struct View {
  const void *ptr;
  i64 sb, sh, sn;
};

__host__ __device__ constexpr int round_up(int x, int m) {
  return (x + m - 1) / m * m;
}
__device__ __forceinline__ int ceil_div(int a, int b) { return (a + b - 1) / b; }

} // namespace sj
