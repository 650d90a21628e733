// Hopper (sm_90a) warpgroup MMA wrappers: shared-memory matrix descriptors for the 128-byte-
// swizzled tile layout, the fence / commit / wait of wgmma, and D(64 x N, fp32) (+)= A(64 x 16) *
// B(16 x N) for N = 64 and 128, with A from registers (RS) or from shared memory (SS).
//
// Tile layout (K, V and Q, and what the descriptors describe): a [rows][head_dim] dtype tile is
// stored as head_dim / 64 column blocks of [rows][64] elements (128 bytes a row); the 16-byte
// chunk c of row r sits at chunk (c ^ (r & 7)) of its row (block_swz in kernel_common.cuh: the
// hardware's 128-byte swizzle, so the tile must start at a 1024-byte boundary).
//  * K (B of S = Q K^T, K-major), and Q as the A of an SS wgmma: descriptor per k16 step: start =
//    column block (k / 4) + 32 bytes x (k % 4) (+ 128 bytes per row of an A that starts at a
//    later multiple of 8 rows), stride between 8-row groups (SBO) 1024 bytes.
//  * V (B of O = P V, MN-major, transposed): start = token 16 k, SBO 1024 bytes (8 tokens), LBO =
//    one column block (rows x 128 bytes).
// A from registers uses the mma.sync m16n8k16 A-fragment layout (warp w of the warpgroup holds
// rows 16 w .. 16 w + 15), and D is returned in the m16n8 C-fragment layout per warp, so the
// softmax reads S and writes P as on the mma.sync path.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ptx_sm90.cuh"
#include "treeattn/kernels/decode.h"

namespace treeattn::cuda_detail {

/// Shared-memory matrix descriptor, 128-byte swizzle; byte offsets are multiples of 16. Built once
/// per tile; at(off) is the descriptor of the matrix `off` bytes further, one 32-bit add (the
/// start field, address / 16 < 2^14 for any shared-memory address, never carries into LBO).
struct WgmmaDesc {
  uint32_t lo, hi;
  __device__ __forceinline__ uint64_t at(uint32_t off_bytes) const {
    return (static_cast<uint64_t>(hi) << 32) | (lo + (off_bytes >> 4));
  }
};
__device__ __forceinline__ WgmmaDesc wgmma_desc(uint32_t smem_addr, uint32_t lbo_bytes,
                                                uint32_t sbo_bytes) {
  return {((smem_addr & 0x3FFFF) >> 4) | ((lbo_bytes >> 4) << 16), (sbo_bytes >> 4) | (1u << 30)};
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/// Pins registers the async wgmma reads or writes: the compiler may neither move their other uses
/// across this point nor reuse them while a wgmma is in flight (call after wgmma_wait, and on the
/// A fragments and accumulators before the MMAs are issued).
template <class E, int N, int K>
__device__ __forceinline__ void wgmma_fence_regs(E (&r)[N][K]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < K; ++j) {
      if constexpr (std::is_same_v<E, float>)
        asm volatile("" : "+f"(r[i][j])::"memory");
      else
        asm volatile("" : "+r"(r[i][j])::"memory");
    }
}

// Operand strings: the accumulators of m64n64 (32 registers a thread) and m64n128 (64), then
// RS: A registers, desc B, scale-d p, scales 1 1, transpose B; SS: desc A, desc B, scale-d p,
// scales 1 1, transposes 0 0 (both K-major). p is set from the operand after the list.
#define TREEATTN_WGMMA_ACC64                                                                    \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define TREEATTN_WGMMA_ACC128                                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"
#define TREEATTN_WGMMA_RS64 TREEATTN_WGMMA_ACC64 ", {%32, %33, %34, %35}, %36, p, 1, 1, %37"
#define TREEATTN_WGMMA_RS128 TREEATTN_WGMMA_ACC128 ", {%64, %65, %66, %67}, %68, p, 1, 1, %69"
#define TREEATTN_WGMMA_SS64 TREEATTN_WGMMA_ACC64 ", %32, %33, p, 1, 1, 0, 0"
#define TREEATTN_WGMMA_SS128 TREEATTN_WGMMA_ACC128 ", %64, %65, p, 1, 1, 0, 0"
#define TREEATTN_WGMMA_OPS64                                                                    \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),     \
      "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
      "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), \
      "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
      "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), \
      "+f"(d[7][2]), "+f"(d[7][3])
#define TREEATTN_WGMMA_OPS128                                                                      \
  TREEATTN_WGMMA_OPS64, "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), \
      "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), \
      "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),              \
      "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]),              \
      "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]),              \
      "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]),              \
      "+f"(d[15][3])
#define TREEATTN_WGMMA_RS(N, DT)                                                           \
  asm volatile(                                                                            \
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                           \
      "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." DT "." DT " " TREEATTN_WGMMA_RS##N \
      ";\n}\n"                                                                             \
      : TREEATTN_WGMMA_OPS##N                                                              \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kTransB))
// The SS scale-d operand follows desc A and desc B: %34 (m64n64) or %66 (m64n128).
#define TREEATTN_WGMMA_SS(N, DT, SCALE_D)                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE_D                 \
               ", 0;\n"                                                    \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." DT "." DT \
               " " TREEATTN_WGMMA_SS##N ";\n}\n"                           \
               : TREEATTN_WGMMA_OPS##N                                     \
               : "l"(desc_a), "l"(desc_b), "n"(kAccumulate))

/// d += a * B, with a the thread's m16n8k16 A fragment and B described by desc_b;
/// kTransB = 1 for an MN-major B (V).
template <DType kDType, int N, int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4],
                                         uint64_t desc_b) {
  static_assert(N == 64 || N == 128, "wgmma_rs: N");
  constexpr bool kF16 = kDType == DType::kFloat16;
  if constexpr (kF16 && N == 64) {
    TREEATTN_WGMMA_RS(64, "f16");
  } else if constexpr (!kF16 && N == 64) {
    TREEATTN_WGMMA_RS(64, "bf16");
  } else if constexpr (kF16 && N == 128) {
    TREEATTN_WGMMA_RS(128, "f16");
  } else {
    TREEATTN_WGMMA_RS(128, "bf16");
  }
}

/// d = A * B (kAccumulate = 0: d's old values are ignored) or d += A * B (kAccumulate = 1), with A
/// (64 x 16) and B (16 x N) both K-major in shared memory, described by desc_a and desc_b.
template <DType kDType, int N, int kAccumulate>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b) {
  static_assert(N == 64 || N == 128, "wgmma_ss: N");
  static_assert(kAccumulate == 0 || kAccumulate == 1, "wgmma_ss: kAccumulate");
  constexpr bool kF16 = kDType == DType::kFloat16;
  if constexpr (kF16 && N == 64) {
    TREEATTN_WGMMA_SS(64, "f16", "%34");
  } else if constexpr (!kF16 && N == 64) {
    TREEATTN_WGMMA_SS(64, "bf16", "%34");
  } else if constexpr (kF16 && N == 128) {
    TREEATTN_WGMMA_SS(128, "f16", "%66");
  } else {
    TREEATTN_WGMMA_SS(128, "bf16", "%66");
  }
}

}  // namespace treeattn::cuda_detail
