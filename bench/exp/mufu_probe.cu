// bench/exp/mufu_probe.cu: MUFU throughput per instruction and per value for exp2 (f32, f16x2, bf16x2) and tanh (f16x2, bf16x2), by clock64 in one CTA of 1024 threads per multiprocessor, 8 independent chains per thread.
// nvcc -O3 -arch=sm_90a -o build-probe/mufu_probe bench/exp/mufu_probe.cu (the SASS: nvcc -cubin, then cuobjdump -sass on the device)
// Result on the H200 (thirty-sixth session, bench/NOTES.md): 16 values per clock per SM for every form; each packed form is two scalar MUFU ops and a PRMT.
#include <cstdio>
#include <cuda_runtime.h>
#define IT 2048
template <int V> __device__ __forceinline__ unsigned op(unsigned x) {
  unsigned y;
  if (V == 0) asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=r"(y) : "r"(x));
  if (V == 1) asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
  if (V == 2) asm volatile("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(y) : "r"(x));
  if (V == 3) asm volatile("tanh.approx.bf16x2 %0, %1;" : "=r"(y) : "r"(x));
  if (V == 4) asm volatile("tanh.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
template <int V> __global__ void k(unsigned *out, long long *cyc) {
  unsigned a[8];
  for (int i = 0; i < 8; i++) a[i] = out[threadIdx.x * 8 + i] ^ threadIdx.x;
  __syncthreads();
  long long t0 = clock64();
  for (int it = 0; it < IT; it++)
#pragma unroll
    for (int i = 0; i < 8; i++) a[i] = op<V>(a[i]) ^ 0x3c003c00u;
  __syncthreads();
  long long t1 = clock64();
  unsigned s = 0;
  for (int i = 0; i < 8; i++) s += a[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == 0) {
    unsigned sm;
    asm("mov.u32 %0, %%smid;" : "=r"(sm));
    cyc[2 * blockIdx.x] = t1 - t0;
    cyc[2 * blockIdx.x + 1] = sm;
  }
}
// As many CTAs as multiprocessors; each records its %smid, and a run
// where two shared one (and so its MUFU) is reported as such.
template <int V> void run(const char *name, int sms, unsigned *d, long long *c) {
  const int threads = 1024;
  k<V><<<sms, threads>>>(d, c); // warm-up
  k<V><<<sms, threads>>>(d, c);
  cudaDeviceSynchronize();
  long long h[2 * 1024];
  cudaMemcpy(h, c, 2 * sms * sizeof h[0], cudaMemcpyDeviceToHost);
  double avg = 0;
  bool seen[1024] = {false}, shared = false;
  for (int i = 0; i < sms; i++) {
    avg += h[2 * i] / (double)sms;
    const long long sm = h[2 * i + 1];
    shared |= sm < 0 || sm >= 1024 || seen[sm];
    if (sm >= 0 && sm < 1024) seen[sm] = true;
  }
  double ops = (double)threads * IT * 8; // instructions per CTA, i.e. per SM
  int vals = V == 0 ? 1 : 2;
  printf("%-8s %.2f instr/clk/SM  %.2f values/clk/SM (%s)%s\n", name, ops / avg, ops * vals / avg,
         cudaGetErrorString(cudaGetLastError()), shared ? " [two CTAs shared a multiprocessor: invalid]" : "");
}
int main() {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.multiProcessorCount > 1024)
    return 1;
  const int sms = prop.multiProcessorCount;
  unsigned *d; long long *c;
  cudaMalloc(&d, (size_t)sms * 1024 * 8 * 4); cudaMalloc(&c, 2 * sms * 8);
  cudaMemset(d, 0x3c, (size_t)sms * 1024 * 8 * 4);
  run<0>("f32", sms, d, c); run<1>("f16x2", sms, d, c); run<2>("bf16x2", sms, d, c);
  run<3>("tanhbf2", sms, d, c); run<4>("tanhh2", sms, d, c);
  return 0;
}
