// Hopper (sm_90a) synchronization PTX wrappers of the decode kernels: the sm_90a feature flag,
// the generic -> async proxy fence that wgmma reads need, shared-memory mbarriers (init, arrive,
// parity wait, and the arrival a thread's cp.async copies trigger when they land), named barriers
// (bar.sync / bar.arrive over a subset of the CTA's warps) and setmaxnreg (moving registers
// between warpgroups). Only the sm_90a device pass calls them (TREEATTN_WGMMA).
#pragma once

#include <cstdint>

namespace treeattn::cuda_detail {

// 1 in the sm_90a device pass: the kernels branch on it (if constexpr / #if), so the wrappers of
// sm_90a-only instructions are only instantiated there.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TREEATTN_WGMMA 1
#else
#define TREEATTN_WGMMA 0
#endif

/// Orders this thread's generic-proxy shared-memory accesses (cp.async, st.shared, and those
/// made visible to it by a barrier or an mbarrier wait) before its later async-proxy accesses
/// (wgmma operand reads).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/// mbarrier at shared address `bar` expecting `count` arrivals per phase.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/// One arrival (release semantics: this thread's earlier memory accesses happen before the
/// phase completes for any waiter).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/// One arrival, triggered once every cp.async this thread issued before it has landed; the
/// barrier's expected count includes it (.noinc).
__device__ __forceinline__ void mbar_arrive_cp_async(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/// True once the phase of parity `parity` has completed (acquire semantics); may suspend the
/// thread for a while before returning false.
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
/// Waits for the completion of the phase of parity `parity`. A barrier starts in phase 0, so
/// use k of a stage waits with parity k & 1; the caller's protocol must keep the barrier within
/// one phase of that use (the pipeline's full/empty handshake does).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

/// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32): blocks
/// until that many threads have arrived or synced on it.
__device__ __forceinline__ void named_bar_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/// Counts this warp's threads on named barrier `id` without waiting.
__device__ __forceinline__ void named_bar_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// Lowers (kDec) or raises the calling warpgroup's per-thread register budget to kRegs; every warp
/// of the warpgroup executes the same one. Raising blocks until the CTA's pool has the registers.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: count");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: count");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace treeattn::cuda_detail
