// The launch floor of `treeattn bench`'s timing, measured the way bench.cu times a decode call:
// an L2 flush (cudaMemsetAsync over 3x L2) outside the events, then CUDA events around the
// launches alone, median of 200 runs; each case also warm (a 30 us spin kernel instead of the
// flush). Kernels that do nothing but exit (or one global load and store per CTA), 64 CTAs of 128
// threads, with and without 100 KB of dynamic shared memory, with and without the
// programmatic-serialization attribute the decode kernels launch with, one or two of them in a
// row: what a decode call pays before any work of its own; and kernels of 4-64 KB of
// straight-line code, and the same arithmetic as loops over 4 and 16 KB of it: what fetching cold
// instructions costs.
//   nvcc -O3 -arch=sm_90a -o /tmp/launch_floor bench/ab/launch_floor.cu && /tmp/launch_floor
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#define CK(x)                                              \
  do {                                                     \
    cudaError_t e_ = (x);                                  \
    if (e_ != cudaSuccess) {                               \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e_)); \
      return 1;                                            \
    }                                                      \
  } while (0)

__global__ void empty_kernel() {}

/// Holds the stream for `ns` on one thread, touching no memory: the warm runs' stand-in for the
/// flush, so the launches queue behind it and the events time the GPU, not the host's calls.
__global__ void spin_kernel(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

__global__ void touch_kernel(const int* in, int* out) {
  if (threadIdx.x == 0) out[blockIdx.x] = in[blockIdx.x];
}

/// `kInstr` dependent-free FMAs of straight-line code (16 bytes each), then one store per CTA: the
/// cost of fetching a kernel's instructions after the flush evicted them from L2.
template <int kInstr>
__global__ void code_kernel(const int* in, int* out) {
  float a = static_cast<float>(in[blockIdx.x]), b = a + 1.f, c = a + 2.f, d = a + 3.f;
#pragma unroll
  for (int i = 0; i < kInstr / 4; ++i) {
    asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(a));
    asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(b));
    asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(c));
    asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(d));
  }
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int>(a + b + c + d);
}

/// The same `kInstr` FMAs as code_kernel, as a loop of `kReps` turns over kInstr / kReps FMAs of
/// straight-line code: the arithmetic of code_kernel<kInstr> with 1 / kReps of its code, so that
/// the difference between the two is what fetching the rest of the code costs.
template <int kInstr, int kReps>
__global__ void loop_kernel(const int* in, int* out) {
  float a = static_cast<float>(in[blockIdx.x]), b = a + 1.f, c = a + 2.f, d = a + 3.f;
#pragma unroll 1
  for (int r = 0; r < kReps; ++r) {
#pragma unroll
    for (int i = 0; i < kInstr / kReps / 4; ++i) {
      asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(a));
      asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(b));
      asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(c));
      asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(d));
    }
  }
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int>(a + b + c + d);
}

__global__ void pdl_kernel(const int* in, int* out) {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  if (threadIdx.x == 0) out[blockIdx.x] = in[blockIdx.x];
}

int main() {
  int dev = 0;
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  const size_t flush_bytes =
      std::max<size_t>(static_cast<size_t>(prop.l2CacheSize) * 3, 256u << 20);
  void* flush = nullptr;
  int *in = nullptr, *out = nullptr;
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMalloc(&in, 4096));
  CK(cudaMalloc(&out, 4096));
  CK(cudaMemset(in, 0, 4096));
  const int big = 100 * 1024;
  CK(cudaFuncSetAttribute(touch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
  CK(cudaFuncSetAttribute(pdl_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  auto launch_pdl = [&](int smem) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(64);
    cfg.blockDim = dim3(128);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, pdl_kernel, static_cast<const int*>(in), out);
  };
  struct Case {
    const char* name;
    int variant;
  };
  const Case cases[] = {
      {"nothing between the events", 0},
      {"empty kernel, no shared memory", 1},
      {"one load + store per CTA, no shared memory", 2},
      {"one load + store per CTA, 100 KB shared memory", 3},
      {"PDL kernel (launch_dependents + wait), 100 KB shared memory", 4},
      {"two PDL kernels in a row, 100 KB shared memory", 5},
      {"two plain kernels in a row, 100 KB shared memory", 6},
      {"256 FMAs of straight-line code (4 KB)", 7},
      {"1024 FMAs of straight-line code (16 KB)", 8},
      {"4096 FMAs of straight-line code (64 KB)", 9},
      {"4096 FMAs, a loop of 16 x 256 (4 KB of code)", 10},
      {"4096 FMAs, a loop of 4 x 1024 (16 KB of code)", 11},
  };
  std::printf(
      "device %s; median of 200 runs, events around the launches; after an L2 flush, and "
      "warm (the same launches just before, no flush)\n",
      prop.name);
  for (const Case& c : cases)
    for (const bool flushed : {true, false}) {
      std::vector<float> ms;
      for (int r = 0; r < 210; ++r) {
        if (flushed)
          CK(cudaMemsetAsync(flush, r & 0xff, flush_bytes, s));
        else
          spin_kernel<<<1, 1, 0, s>>>(30000);
        CK(cudaEventRecord(e0, s));
        switch (c.variant) {
          case 1:
            empty_kernel<<<64, 128, 0, s>>>();
            break;
          case 2:
            touch_kernel<<<64, 128, 0, s>>>(in, out);
            break;
          case 3:
            touch_kernel<<<64, 128, big, s>>>(in, out);
            break;
          case 4:
            CK(launch_pdl(big));
            break;
          case 5:
            CK(launch_pdl(big));
            CK(launch_pdl(big));
            break;
          case 6:
            touch_kernel<<<64, 128, big, s>>>(in, out);
            touch_kernel<<<64, 128, big, s>>>(in, out);
            break;
          case 7:
            code_kernel<256><<<64, 128, 0, s>>>(in, out);
            break;
          case 8:
            code_kernel<1024><<<64, 128, 0, s>>>(in, out);
            break;
          case 9:
            code_kernel<4096><<<64, 128, 0, s>>>(in, out);
            break;
          case 10:
            loop_kernel<4096, 16><<<64, 128, 0, s>>>(in, out);
            break;
          case 11:
            loop_kernel<4096, 4><<<64, 128, 0, s>>>(in, out);
            break;
          default:
            break;
        }
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float t = 0;
        CK(cudaEventElapsedTime(&t, e0, e1));
        if (r >= 10) ms.push_back(t);
      }
      CK(cudaGetLastError());
      std::sort(ms.begin(), ms.end());
      std::printf("  %-62s %-7s median %6.2f us  p10 %6.2f  p90 %6.2f\n", c.name,
                  flushed ? "flushed" : "warm", ms[ms.size() / 2] * 1e3, ms[ms.size() / 10] * 1e3,
                  ms[ms.size() * 9 / 10] * 1e3);
    }
  return 0;
}
