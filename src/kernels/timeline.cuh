// Per-CTA phase stamps of the decode kernels (DecodeArgs::timeline, `treeattn bench --timeline`):
// thread 0 of a CTA stamps the words of its record; with p.timeline null every stamp is one
// predicated branch on a kernel parameter (no loads). The record index is computed only when a
// stamp is written, so nothing stays live across the kernel for it. Used by the attention kernels
// (decode_kernel.cuh, sm90/kernel.cuh) and the merge (merge.cuh).
#pragma once

#include <cstdint>

#include "decode_params.h"

namespace treeattn::cuda_detail {

/// Writes word `w` (TimelineWord) of record rec(): %globaltimer for the two global words, clock64
/// otherwise. The "memory" clobber keeps the compiler from moving loads and stores across it.
template <class Rec>
__device__ __forceinline__ void timeline_stamp(const KernelParams& p, Rec rec, int w) {
  if (p.timeline == nullptr || threadIdx.x != 0) return;
  uint64_t v;
  if (w == kTlGlobalStart || w == kTlGlobalEnd)
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(v)::"memory");
  else
    asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(v)::"memory");
  p.timeline[rec() * kTimelineWords + w] = v;
}
/// The record's first words (global start, clock start) and its tag (kernel config `cfg`).
template <class Rec>
__device__ __forceinline__ void timeline_begin(const KernelParams& p, Rec rec, int cfg) {
  if (p.timeline == nullptr || threadIdx.x != 0) return;
  timeline_stamp(p, rec, kTlGlobalStart);
  timeline_stamp(p, rec, kTlClockStart);
  uint32_t sm;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
  p.timeline[rec() * kTimelineWords + kTlTag] =
      (1ull << 63) | (static_cast<uint64_t>(blockIdx.y & 0xfffffu) << 20) |
      (static_cast<uint64_t>(cfg & 15) << 16) | (sm & 0xffffu);
}
/// The record's end words, once every thread of the CTA issued its output stores.
template <class Rec>
__device__ __forceinline__ void timeline_end(const KernelParams& p, Rec rec) {
  if (p.timeline == nullptr) return;
  __syncthreads();
  timeline_stamp(p, rec, kTlClockEnd);
  timeline_stamp(p, rec, kTlGlobalEnd);
}

}  // namespace treeattn::cuda_detail
