// bench/exp/mufu_probe.cu: MUFU throughput per instruction and per value for exp2 (f32, f16x2, bf16x2) and tanh (f16x2, bf16x2), by clock64 over 132 CTAs of 1024 threads, 8 independent chains each; plus its SASS.
// nvcc -O3 -arch=sm_90a -o build-probe/mufu_probe bench/exp/mufu_probe.cu
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
  if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}
template <int V> void run(const char *name, unsigned *d, long long *c) {
  int threads = 1024;
  k<V><<<132, threads>>>(d, c);
  k<V><<<132, threads>>>(d, c);
  cudaDeviceSynchronize();
  long long h[132];
  cudaMemcpy(h, c, sizeof h, cudaMemcpyDeviceToHost);
  double avg = 0;
  for (int i = 0; i < 132; i++) avg += h[i] / 132.0;
  double ops = (double)threads * IT * 8; // instructions per SM
  int vals = V == 0 ? 1 : 2;
  printf("%-8s %.2f instr/clk/SM  %.2f values/clk/SM (%s)\n", name, ops / avg, ops * vals / avg,
         cudaGetErrorString(cudaGetLastError()));
}
int main() {
  unsigned *d; long long *c;
  cudaMalloc(&d, 132 * 1024 * 8 * 4); cudaMalloc(&c, 132 * 8);
  cudaMemset(d, 0x3c, 132 * 1024 * 8 * 4);
  run<0>("f32", d, c); run<1>("f16x2", d, c); run<2>("bf16x2", d, c);
  run<3>("tanhbf2", d, c); run<4>("tanhh2", d, c);
  return 0;
}
