// The two MMA paths of the paged attention kernel (decode_kernel.cuh), one struct each with the
// same steps per KV tile, so that the kernel's mainloop names the path once instead of
// interleaving both:
//   tile_ready()  what the path needs once a tile's shared-memory writes are done (wgmma reads
//                 shared memory through the async proxy: a proxy fence; mma.sync: nothing)
//   qk()          S = Q K^T for the path's rows (a warp's 16, a warpgroup's 64) and tokens
//   pv()          O += P V over the same tokens, P from the softmax's registers
// MmaSyncPath runs mma.sync m16n8k16 per warp (every target; the kM16 configs, head_dim 256 and
// sm_80), Q from registers or (head_dim 256) from shared memory, K and V by ldmatrix; under
// AttnConfig::KREG (fp8 cache, kM16) K comes from the fp8 stage and is converted in registers.
// WgmmaPath runs wgmma per warpgroup of 64 rows (sm_90a, the block-layout configs kM64 / kM128 up
// to head_dim 128): Q and P from registers as A, K and V from shared memory by descriptors.
// Included only by decode_kernel.cuh; every function is inlined into the kernel.
#pragma once

#include <cstdint>

#include "kernel_common.cuh"
#include "ptx.cuh"
#include "sm90/ptx_sm90.cuh"
#include "sm90/wgmma.cuh"

namespace treeattn::cuda_detail {

template <DType kDType, class C, KvDType kKv>
struct MmaSyncPath {
  using Traits = typename C::Traits;
  static constexpr int HD = C::HD, BN = C::BN, BNW = C::BNW, KS = HD / 16;

  static __device__ __forceinline__ void tile_ready() {}

  /// S = Q K^T [16 x BNW]. sK: the tile's dtype K; s8K: its fp8 stage (KREG).
  template <int NT_S, int QF>
  static __device__ __forceinline__ void qk(float (&s_acc)[NT_S][4], uint32_t (&q_frag)[QF][4],
                                            uint32_t /*q_zero*/, uint32_t sQ, uint32_t sK,
                                            uint32_t s8K, int wm, int wtok, int lane) {
    if constexpr (C::KREG) {
      // K from the fp8 stage: one ldmatrix.x4 per two k16 steps gives each thread the four fp8
      // of its token row (g) at head dims 16 ks + 4 t4 .. + 3 for both 8-token halves of the
      // warp's 16; the low pair is the B fragment's b0, the high pair b1 (q_frag's k order
      // in the kernel).
      static_assert(BNW == 16 && KS % 2 == 0, "KREG: 16 tokens a warp, whole k32 steps");
      const int mi = lane >> 3;
      const int krow = wtok + 8 * (mi & 1) + (lane & 7);
#pragma unroll
      for (int ks = 0; ks < KS; ks += 2) {
        uint32_t r[4];  // [k step ks + h][token half n] at r[2 h + n]
        ldmatrix_x4(r, s8K + C::k8_swz(krow, ks + (mi >> 1)));
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int n = 0; n < 2; ++n) {
            const uint32_t w = r[2 * h + n];
            mma16816<kDType>(s_acc[n], q_frag[ks + h],
                             fp8x2_to_dtype<Traits, kKv>(static_cast<uint16_t>(w & 0xffffu)),
                             fp8x2_to_dtype<Traits, kKv>(static_cast<uint16_t>(w >> 16)));
          }
      }
    } else {
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        uint32_t a[4];
        if constexpr (C::Q_IN_REGS) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[e] = q_frag[ks][e];
        } else {
          const int mi = lane >> 3;
          ldmatrix_x4(a, sQ + C::template swz<C::ROWS>(16 * wm + (lane & 7) + (mi & 1) * 8,
                                                       2 * ks + (mi >> 1)));
        }
#pragma unroll
        for (int np = 0; np < NT_S / 2; ++np) {
          uint32_t b[4];
          const int mi = lane >> 3;
          ldmatrix_x4(b, sK + C::template swz<BN>(wtok + 16 * np + (lane & 7) + (mi >> 1) * 8,
                                                  2 * ks + (mi & 1)));
          mma16816<kDType>(s_acc[2 * np], a, b[0], b[1]);
          mma16816<kDType>(s_acc[2 * np + 1], a, b[2], b[3]);
        }
      }
    }
  }

  /// O += P V [16 x HD], k = the warp's BNW tokens.
  template <int NT_O, int NT_S>
  static __device__ __forceinline__ void pv(float (&o_acc)[NT_O][4], uint32_t (&p_frag)[NT_S][2],
                                            uint32_t sV, int wtok, int lane) {
#pragma unroll
    for (int kk = 0; kk < BNW / 16; ++kk) {
      const uint32_t a[4] = {p_frag[2 * kk][0], p_frag[2 * kk][1], p_frag[2 * kk + 1][0],
                             p_frag[2 * kk + 1][1]};
#pragma unroll
      for (int dp = 0; dp < NT_O / 2; ++dp) {
        uint32_t b[4];
        const int mi = lane >> 3;
        ldmatrix_x4_trans(b, sV + C::template swz<BN>(wtok + 16 * kk + (lane & 7) + (mi & 1) * 8,
                                                      2 * dp + (mi >> 1)));
        mma16816<kDType>(o_acc[2 * dp], a, b[0], b[1]);
        mma16816<kDType>(o_acc[2 * dp + 1], a, b[2], b[3]);
      }
    }
  }
};

template <DType kDType, class C>
struct WgmmaPath {
  static constexpr int HD = C::HD, BN = C::BN, BNW = C::BNW, KS = HD / 16;

  static __device__ __forceinline__ void tile_ready() { fence_proxy_async(); }

  /// S = Q K^T [64 x BN] of the warpgroup; `q_zero` is 0, opaque to the compiler (below).
  template <int NT_S, int QF>
  static __device__ __forceinline__ void qk(float (&s_acc)[NT_S][4], uint32_t (&q_frag)[QF][4],
                                            uint32_t q_zero, uint32_t /*sQ*/, uint32_t sK,
                                            uint32_t /*s8K*/, int /*wm*/, int /*wtok*/,
                                            int /*lane*/) {
    // A fresh copy of Q per tile (q_frag ^ zero): with the loop-invariant fragment itself as the
    // A operand, ptxas reuses its registers after the first tile's MMAs (bench/NOTES.md,
    // Generation 1.2). All copies are made before the MMAs are issued.
    uint32_t qa[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
      for (int e = 0; e < 4; ++e) qa[ks][e] = q_frag[ks][e] ^ q_zero;
    wgmma_fence_regs(qa);
    wgmma_fence_regs(s_acc);
    wgmma_fence();
    const WgmmaDesc dk = wgmma_desc(sK, 16, 1024);
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
      wgmma_rs<kDType, BN, 0>(s_acc, qa[ks], dk.at((ks >> 2) * (BN * 128) + (ks & 3) * 32));
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_regs(s_acc);
  }

  /// O += P V [64 x HD] of the warpgroup, k = the tile's BN tokens.
  template <int NT_O, int NT_S>
  static __device__ __forceinline__ void pv(float (&o_acc)[NT_O][4], uint32_t (&p_frag)[NT_S][2],
                                            uint32_t sV, int /*wtok*/, int /*lane*/) {
    wgmma_fence_regs(p_frag);
    wgmma_fence_regs(o_acc);
    wgmma_fence();
    const WgmmaDesc dv = wgmma_desc(sV, BN * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < BNW / 16; ++kk) {
      const uint32_t a[4] = {p_frag[2 * kk][0], p_frag[2 * kk][1], p_frag[2 * kk + 1][0],
                             p_frag[2 * kk + 1][1]};
      wgmma_rs<kDType, HD, 1>(o_acc, a, dv.at(kk * 2048));
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_regs(o_acc);
    wgmma_fence_regs(p_frag);
  }
};

}  // namespace treeattn::cuda_detail
