// In-run baseline: SageAttention2's own sm90 (wgmma + TMA) attention kernel,
// timed with CUDA events on the same GPU / in the same device call as
// sagejit's kernels. Build with bench/sa2/build.sh SA2_CSRC_DIR OUTDIR.
//
// Configuration = what SA2's python `sageattn()` picks on an sm90 GPU:
//   sageattn_qk_int8_pv_fp8_cuda_sm90(pv_accum_dtype="fp32+fp32",
//   qk_quant_gran="per_thread") -> _qattn_sm90.
//   qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf ->
//   SageAttentionSM90Dispatched<CTA_Q=64, CTA_K=128, NUM_THREADS=128, D,
//   qk_quant_gran=3 (kPerThread), half, is_causal, return_lse=false,
//   fuse_v_scale=true>.
// Layouts (tensor_layout "HND"):
//   Q, K: int8 [B, H, N, D]; O: fp16 [B, H, N, D]
//   V:   fp8 e4m3 [B, H, D, Np], Np = N rounded up to 128 (python pads V to a
//        multiple of 128, then per_channel_fp8 pads to 64), tokens permuted in
//        groups of 16 (see sa2_common.cuh), padded tokens zero.
//   Q scale: fp32 [B, H, ceil(N/64) * 4 * 8]; K scale: fp32 [B, H, ceil(N/128) * 4];
//   V scale: fp32 [B, H, D].
#include "qattn/qk_int_sv_f8_cuda_sm90.cuh"

#include "sa2_common.cuh"

using namespace sa2b;

namespace {

constexpr int kCtaQ = 64, kWarpQ = 16, kCtaK = 128, kThreads = 128;

struct Buffers {
  int B = 0, H = 0, N = 0, D = 0, Np = 0;
  int8_t* q = nullptr;
  int8_t* k = nullptr;
  __nv_fp8_e4m3* v = nullptr;
  half* o = nullptr;
  float *qs = nullptr, *ks = nullptr, *vs = nullptr;
  size_t nq = 0, nv = 0, nqs = 0, nks = 0, nvs = 0;

  void alloc(int B_, int H_, int N_, int D_) {
    B = B_; H = H_; N = N_; D = D_;
    Np = (int)round_up(N, kCtaK);
    nq = (size_t)B * H * N * D;
    nv = (size_t)B * H * D * Np;
    nqs = q_scale_count(B, H, N, kCtaQ, kWarpQ);
    nks = k_scale_count(B, H, N, kCtaK);
    nvs = (size_t)B * H * D;
    SA2B_CHECK(cudaMalloc(&q, nq));
    SA2B_CHECK(cudaMalloc(&k, nq));
    SA2B_CHECK(cudaMalloc(&v, nv));
    SA2B_CHECK(cudaMalloc(&o, nq * sizeof(half)));
    SA2B_CHECK(cudaMalloc(&qs, nqs * sizeof(float)));
    SA2B_CHECK(cudaMalloc(&ks, nks * sizeof(float)));
    SA2B_CHECK(cudaMalloc(&vs, nvs * sizeof(float)));
    SA2B_CHECK(cudaMemset(o, 0, nq * sizeof(half)));
  }
  void fill(uint64_t seed) {
    const float v_amax = 448.0f;  // per_channel_fp8 scale_max on sm90
    fill_i8(q, nq, seed + 1);
    fill_i8(k, nq, seed + 2);
    fill_vt_fp8(v, nv, (uint32_t)Np, (uint32_t)N, seed + 3, v_amax);
    fill_scale(qs, nqs, seed + 4, 0.5f * kQKScaleBase, 1.5f * kQKScaleBase);
    fill_scale(ks, nks, seed + 5, 0.5f * kQKScaleBase, 1.5f * kQKScaleBase);
    fill_scale(vs, nvs, seed + 6, 0.5f / v_amax, 1.5f / v_amax);
    SA2B_CHECK(cudaDeviceSynchronize());
  }
  void release() {
    cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o);
    cudaFree(qs); cudaFree(ks); cudaFree(vs);
    q = k = nullptr; v = nullptr; o = nullptr; qs = ks = vs = nullptr;
  }
};

template <int D, bool CAUSAL>
void run_sa2(const Buffers& b, float sm_scale) {
  const uint32_t sq = (uint32_t)D, sh = (uint32_t)b.N * D, sb = (uint32_t)b.H * b.N * D;
  const uint32_t sv_d = (uint32_t)b.Np, sv_h = (uint32_t)D * b.Np, sv_b = (uint32_t)b.H * D * b.Np;
  SageAttentionSM90Dispatched<kCtaQ, kCtaK, kThreads, D, 3, half, CAUSAL, false, true>(
      b.q, b.k, b.v, b.o, nullptr, b.qs, b.ks, b.vs,
      (uint32_t)b.B, (uint32_t)b.N, (uint32_t)b.N, (uint32_t)b.Np, (uint32_t)b.H, (uint32_t)b.H,
      sb, sq, sh,            // Q: stride_bz, stride_seq, stride_h
      sb, sq, sh,            // K
      sv_b, sv_h, sv_d,      // V: stride_bz, stride_h, stride_d
      sb, sq, sh,            // O
      sm_scale, 0);
}

void run(const Buffers& b, bool causal, float sm_scale) {
  if (b.D == 128) {
    if (causal) run_sa2<128, true>(b, sm_scale); else run_sa2<128, false>(b, sm_scale);
  } else {
    if (causal) run_sa2<64, true>(b, sm_scale); else run_sa2<64, false>(b, sm_scale);
  }
}

bool sanity_check(const Args& a) {
  bool ok = true;
  for (int D : a.head_dims)
    for (int N : {300, 1024})
      for (int causal : {0, 1}) {
        const int B = 1, H = 2;
        const float sm_scale = 1.0f / std::sqrt((float)D);
        Buffers b;
        b.alloc(B, H, N, D);
        b.fill(0x5A2000ull + (uint64_t)N * 7 + D + causal);
        run(b, causal != 0, sm_scale);
        SA2B_CHECK(cudaGetLastError());
        SA2B_CHECK(cudaDeviceSynchronize());

        std::vector<int8_t> hq(b.nq), hk(b.nq);
        std::vector<__nv_fp8_e4m3> hv(b.nv);
        std::vector<float> hqs(b.nqs), hks(b.nks), hvs(b.nvs);
        std::vector<half> ho(b.nq);
        SA2B_CHECK(cudaMemcpy(hq.data(), b.q, b.nq, cudaMemcpyDeviceToHost));
        SA2B_CHECK(cudaMemcpy(hk.data(), b.k, b.nq, cudaMemcpyDeviceToHost));
        SA2B_CHECK(cudaMemcpy(hv.data(), b.v, b.nv, cudaMemcpyDeviceToHost));
        SA2B_CHECK(cudaMemcpy(hqs.data(), b.qs, b.nqs * 4, cudaMemcpyDeviceToHost));
        SA2B_CHECK(cudaMemcpy(hks.data(), b.ks, b.nks * 4, cudaMemcpyDeviceToHost));
        SA2B_CHECK(cudaMemcpy(hvs.data(), b.vs, b.nvs * 4, cudaMemcpyDeviceToHost));
        SA2B_CHECK(cudaMemcpy(ho.data(), b.o, b.nq * sizeof(half), cudaMemcpyDeviceToHost));

        HostProblem P;
        P.B = B; P.H = H; P.Hk = H; P.N = N; P.D = D;
        P.q.resize(b.nq); P.k.resize(b.nq); P.v.resize(b.nq);
        for (int bb = 0; bb < B; ++bb)
          for (int h = 0; h < H; ++h)
            for (int n = 0; n < N; ++n) {
              const float qsc = hqs[q_scale_index(bb, h, n, H, N, kCtaQ, kWarpQ)];
              const float ksc = hks[k_scale_index(bb, h, n, H, N, kCtaK)];
              const size_t pos = v_perm_pos_of_tok((uint32_t)n);
              for (int d = 0; d < D; ++d) {
                const size_t i = (((size_t)bb * H + h) * N + n) * D + d;
                P.q[i] = (float)hq[i] * qsc;
                P.k[i] = (float)hk[i] * ksc;
                const size_t vi = (((size_t)bb * H + h) * D + d) * b.Np + pos;
                P.v[i] = fp8_to_float(hv[vi]) * hvs[((size_t)bb * H + h) * D + d];
              }
            }
        CheckStats st = compare_with_reference(P, causal != 0, sm_scale, ho);
        const bool pass = st.cos >= 0.99 && st.n > 0;
        ok = ok && pass;
        std::printf("check sa2_sm90 D=%d N=%d causal=%d B=%d H=%d rel_l2=%.5f cos=%.6f max_abs=%.4g n=%zu nonfinite=%zu %s\n",
                    D, N, causal, B, H, st.rel_l2, st.cos, st.max_abs, st.n, st.nonfinite, pass ? "PASS" : "FAIL");
        std::fflush(stdout);
        b.release();
      }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse_args(argc, argv, false);
  print_device_header("sa2_sm90", a);
  std::printf("# SageAttentionSM90Dispatched<64,128,128,D,kPerThread,half,causal,lse=0,fuse_v_scale=1> "
              "(sageattn() default on sm90: per_thread QK int8, PV fp8 'fp32+fp32')\n");

  if (a.check) {
    if (!sanity_check(a)) {
      std::printf("sa2_sm90 sanity check FAILED\n");
      return 1;
    }
  }
  if (a.check_only) return 0;

  int rc = 0;
  for (int D : a.head_dims)
    for (int N : a.seqs) {
      Buffers b;
      b.alloc(a.batch, a.heads, N, D);
      b.fill(0xB0B0ull + (uint64_t)N + D);
      const float sm_scale = 1.0f / std::sqrt((float)D);
      for (int causal : a.causals) {
        float ms = time_median_ms([&] { run(b, causal != 0, sm_scale); }, a.warmup, a.iters);
        unsigned long long bad = count_nonfinite(b.o, b.nq);
        double tops = attn_flops(a.batch, a.heads, N, D, causal != 0) / (ms * 1e-3) / 1e12;
        std::printf("sa2_sm90 D=%d N=%d causal=%d ms=%.4f TOPS=%.1f\n", D, N, causal, ms, tops);
        if (bad) {
          std::printf("# warning: sa2_sm90 D=%d N=%d causal=%d output has %llu non-finite values\n", D, N, causal, bad);
          rc = 3;
        }
        std::fflush(stdout);
      }
      b.release();
    }
  return rc;
}
