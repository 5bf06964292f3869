/*
 * sj_abi.h -- kernel argument blocks, shared by the C runtime and the CUDA
 * templates.  Written in the common subset of C and C++: fixed-width scalar
 * fields only (pointers travel as 64-bit integers), so both compilers lay
 * the structs out identically.  Each kernel takes its block by value.
 * Changing a struct changes the template hash and therefore every cache key.
 */
#ifndef SJ_ABI_H
#define SJ_ABI_H

typedef unsigned long long sj_ptr;
typedef long long sj_i64;

/* Sequences.  Dense calls: every sequence has seq_q / seq_kv tokens and
 * sequence b of a user tensor starts at element b * stride_batch.  Varlen
 * calls (cu_q, cu_kv non-zero: int32 prefix sums on the device): sequence b
 * has cu[b+1] - cu[b] tokens (clamped to [0, max]) starting at token cu[b],
 * and seq_q / seq_kv hold the maxima.  Internal buffers give each sequence
 * its own padded rows (see sj_quant.cuh), so no tile mixes two sequences. */

/* Reduces the partials (below): k_mean, v_mean, v_scale [batch][heads_kv][dim].
 * SJ_F_V_AUTO (pvi8+splitv): also chooses how each (batch, kv head) stores
 * V, written to v_mode [batch][heads_kv] (one byte: 1 s8, 0 split e4m3),
 * and scales V for it (127 or 448; v_scale_max is then unused). */
typedef struct sj_finalize_args {
  sj_ptr partial, k_mean, v_mean, v_scale, cu_kv;
  int batch, heads_kv, seq_kv, head_dim, nchunk, flags;
  float v_scale_max; /* V range: e4m3 448, 2.25 for fp32+fp16, s8 127 for pvi8 */
  int total_kv;
  sj_ptr v_mode;
  int k_sample; /* as kv_stats' */
} sj_finalize_args;

/* Per-chunk partial statistics of K and V over the sequence.
 * partial: float [batch][heads_kv][nchunk][SJ_STATS_ROWS][head_dim] with
 * rows (sum K, sum V, max V, min V, sum V^2); the last row holds the sum of
 * V^2 over groups of 8 channels at every 8th entry (zeros between): only
 * its total over the channels is used (kv_finalize's SJ_F_V_AUTO).
 * K's sum covers every k_sample-th key (k_sample 1 or 4) of a sequence with
 * at least SJ_K_SAMPLE_MIN * k_sample keys, every key of a shorter one:
 * smooth_k subtracts any per-channel constant exactly (each score row
 * shifts by one number, which the softmax ignores and the LSE adds back),
 * so the mean only has to be close, and 256 or more keys make it so. */
#define SJ_STATS_ROWS 5
#define SJ_K_SAMPLE_MIN 256
/* kv_stats' static shared memory and the CTAs per multiprocessor its
 * launch bounds promise: the runtime sizes its grid to one wave of them
 * (fewer where the shared memory does not hold that many) */
#define SJ_STATS_SMEM 49152
#define SJ_STATS_CTAS 3
typedef struct sj_stats_args {
  sj_ptr k, v, partial, cu_kv;
  sj_i64 k_sb, k_sh, k_sn, v_sb, v_sh, v_sn;
  int batch, heads_kv, seq_kv, head_dim, nchunk, chunk;
  int flags; /* SJ_F_* */
  int total_kv;
  int k_sample; /* 1 or 4: see SJ_K_SAMPLE_MIN */
  /* SJ_F_FINALIZE: the last chunk of each (batch, kv head) to finish
   * reduces them all as kv_finalize would (fin), with one launch less.
   * ticket: u32 [batch][heads_kv], zero at launch; each chunk counts itself
   * there and the last one zeroes it again. */
  sj_ptr ticket;
  sj_finalize_args fin;
} sj_stats_args;

/* The padded internal buffers shared by quant_qkv and attn_mma.
 * Dense: q8 [b][hq][seq_q_pad][D], k8 [b][hk][seq_kv_pad][D] int8, v8
 * [b][hk][D][seq_kv_pad] e4m3 (tokens permuted inside groups of 16), qk_mean
 * and lse [b][hq][seq_q].  Varlen: q8 [hq][rows_q][D] with sequence b at
 * row cu_q[b] + 128 b, k8 [hk][rows_kv][D] at cu_kv[b] + 64 b, v8
 * [hk][D][cols_kv] at column 16-aligned(cu_kv[b]) + SJ_V8_GAP b, qk_mean and lse
 * [hq][total_q].  Scales fp32 [b][h][n_blk][group] (docs/kernels.md). */
typedef struct sj_geom {
  sj_ptr cu_q, cu_kv; /* 0 for dense calls */
  int batch, heads_q, heads_kv;
  int seq_q, seq_kv;         /* dense lengths, or varlen maxima */
  int seq_q_pad, seq_kv_pad; /* dense padded lengths */
  int total_q, total_kv;     /* varlen token totals */
  int rows_q, rows_kv, cols_kv; /* varlen padded extents */
  int n_qblk, n_kblk;        /* scale blocks per (b, h) */
} sj_geom;

/* Quantizes Q and K to INT8 (and V to e4m3 when SJ_F_QUANT_V). */
typedef struct sj_quant_args {
  sj_geom g;
  sj_ptr q, k, v;
  sj_i64 q_sb, q_sh, q_sn, k_sb, k_sh, k_sn, v_sb, v_sh, v_sn;
  sj_ptr q8, k8, v8, q_scale, k_scale, v_scale, v_mean, k_mean, qk_mean;
  int n_vblk, flags;
  float q_prescale; /* multiplies Q before quantization (1 or sm_scale*log2e) */
  int quant; /* the Q/K scale granularity, SJ_QUANT_* as sj_attn_args.quant:
                Q's scales per block (1, 128 / warp_q or 8 x that), K's
                four per 64-key block whatever it is */
  sj_ptr v_mode; /* pvi8+splitv: kv_finalize's choice per (batch, kv head) */
} sj_quant_args;

/* The attention kernel. */
typedef struct sj_attn_args {
  sj_geom g;
  sj_ptr q8, k8, v8, q_scale, k_scale, v_scale, v_mean, qk_mean;
  sj_ptr v;   /* user V, read directly by the FP16PV family */
  sj_ptr o;   /* user output */
  sj_ptr lse; /* fp32, see sj_geom, or 0 */
  sj_i64 v_sb, v_sh, v_sn, o_sb, o_sh, o_sn;
  float sm_scale_log2; /* sm_scale * log2(e), times 1/q_prescale */
  float lse_scale;     /* converts the log2-domain LSE to natural log */
  int flags;           /* causal: key j is visible to query i iff j <= i,
                          or j <= i + len_kv - len_q with SJ_F_CAUSAL_BR */
  int quant; /* the Q/K scale granularity, SJ_QUANT_* (1 per_block, 2
                per_warp, 3 per_thread): where the Q scale is read and
                which rows the fused Q quantizer shares it over.  K scales
                are four per 64-key block whatever it is. */
  /* SJ_F_Q_FUSED: the kernel quantizes Q itself, from the caller's tensor
   * (q, strides in elements, times q_prescale as quant_qkv would);
   * k_mean (fp32 [b][hk][D]) gives the LSE's q.mean_k under K smoothing. */
  sj_ptr q, k_mean;
  sj_i64 q_sb, q_sh, q_sn;
  float q_prescale;
  int pad2_;
  sj_ptr v_mode; /* pvi8+splitv: kv_finalize's choice per (batch, kv head) */
} sj_attn_args;

/* The sm_90a (wgmma) attention kernel: three TMA descriptors (CUtensorMap,
 * 128 opaque bytes each, built by cuTensorMapEncodeTiled) in front of the
 * common block.  Passed as one __grid_constant__ parameter so that the copy
 * engine reads the descriptors from parameter space.
 *   q: q8 as [rows][D] bytes; k: k8 as [rows][D]; v: v8 as [channel rows]
 *   [pitch].  Boxes are min(D, 128) bytes by 128 rows (q), by BN rows (k),
 *   and BN bytes by D rows (v), with the swizzle wgmma expects. */
#ifdef __cplusplus
#define SJ_ALIGNAS(n) alignas(n)
#else
#define SJ_ALIGNAS(n) _Alignas(n)
#endif
typedef struct sj_tmap {
  SJ_ALIGNAS(64) unsigned long long opaque[16];
} sj_tmap;
typedef struct sj_wgmma_args {
  sj_tmap tq, tk, tv;
  sj_attn_args a;
} sj_wgmma_args;

/* FP32 reference attention; o is fp32 [b][hq][seq_q][D]. */
typedef struct sj_ref_args {
  sj_ptr q, k, v, o, lse;
  sj_i64 q_sb, q_sh, q_sn, k_sb, k_sh, k_sn, v_sb, v_sh, v_sn;
  int batch, heads_q, heads_kv, seq_q, seq_kv, head_dim;
  int causal, causal_offset;
  float sm_scale;
  int pad_;
} sj_ref_args;

/* Varlen v8: columns between sequences, room for the 16-alignment of each
 * sequence's start and for the zero blocks written past its end, up to the
 * next multiple of 128 keys (the wgmma family's tile). */
#define SJ_V8_GAP 144

/* The head dims attn_mma has TMA tiles for (sj_attn_mma.cuh; runtime/spec.c
 * mma_tma offers them only there). */
#define SJ_TMA_HAS_DIM(d) ((d) == 32 || (d) == 64 || (d) == 96 || (d) == 128 || (d) == 256)

/* attn_mma's TMA boxes (sj_attn_mma.cuh; runtime/attention.c mma_tma_maps
 * encodes them): K rows of SJ_TMA_KROW(D) bytes, the widest swizzle that
 * divides D (D = 96: three boxes of 32 bytes; D = 256: two of 128), and
 * FP16 V's boxes of SJ_TMA_VCH(D) channels (D = 32 and 96: 32, in 64-byte
 * rows; else 64, in 128-byte rows). */
#define SJ_TMA_KROW(d) ((d) == 96 ? 32 : ((d) < 128 ? (d) : 128))
#define SJ_TMA_VCH(d) ((d) == 96 || (d) == 32 ? 32 : 64)

/* flags */
#define SJ_F_SMOOTH_K 1  /* subtract the K mean */
#define SJ_F_SMOOTH_V 2  /* subtract the V mean, add it back to O */
#define SJ_F_QUANT_V 4   /* produce e4m3 V (FP8PV) */
#define SJ_F_LSE 8       /* write the LSE (and the q.mean_k correction) */
#define SJ_F_K_STATS 16  /* stats: accumulate K sums */
#define SJ_F_V_STATS 32  /* stats: accumulate V sum/max/min */
#define SJ_F_CAUSAL_BR 64 /* causal diagonal at the bottom right */
#define SJ_F_Q_FUSED 128  /* attention quantizes Q itself; quant_qkv skips Q */
#define SJ_F_V_AUTO 256   /* finalize: choose s8 or split e4m3 V per head */
#define SJ_F_HEADS_FIRST 512 /* causal attention: the grid is (heads, Q
                                blocks, batch), see sj::cta_coord */
#define SJ_F_FINALIZE 1024 /* stats: finalize in the last chunk, see sj_stats_args */
#define SJ_F_L2_KEEP_V 2048 /* V fits the L2: kv_stats reads it evict_last,
                               quant_qkv reads K and V evict_first */

#endif
