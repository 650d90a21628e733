// The merge kernel: combines each query's partial outputs (O in fp32 or the dtype, see
// PartialPrecision, and the natural-log LSE per slot and qo head, written by the attention
// kernels) into its final output row, in the order of its merge list (deterministic, no atomics).
//
// Grid (query capacity, ceil(num_qo_heads / heads per CTA)); past the plan's queries the merge
// list is empty and the CTA exits. A CTA takes its query's slots in chunks of kMergeChunk: the
// chunk's slot ids, then the LSEs of its heads for those slots, land in shared memory with loads
// that do not depend on each other; each (head, 8-element chunk of head_dim) pair is summed by
// SPLIT adjacent threads, thread `part` taking every SPLIT-th slot, so a deep query's
// partial-output loads are spread over threads and unrolled (the two variants, SPLIT 1 and 4,
// are described and chosen in tile_policy.h). The running max is shared by the pair's threads (a
// max across them per chunk, exact in any order) and the weighted sums are rescaled when it
// grows; the threads' sums are added with xor shuffles at the end (the same bits in every lane).
#pragma once

#include <cstdint>

#include "decode_params.h"
#include "kernel_common.cuh"
#include "ptx.cuh"
#include "treeattn/plan/tile_policy.h"

namespace treeattn::cuda_detail {

using tile::kMergeThreads;
constexpr int kMergeChunk = 128;  ///< slots staged in shared memory at a time

/// Queries without merge slots were written by the attention kernel. Empty partials (lse = -inf)
/// get weight 0 and their O is never read; a query whose partials are all empty gets the empty
/// state (o = 0, lse = -inf), never NaN; a NaN LSE (a NaN in K) gives o = lse = NaN.
template <DType kDType, int kHeadDim, int SPLIT>
__global__ void __launch_bounds__(kMergeThreads) decode_merge_kernel(const KernelParams p) {
  using Traits = DTypeTraits<kDType>;
  constexpr int CPT = kHeadDim / 8;
  constexpr int HEADS = tile::merge_heads_per_cta(kHeadDim, SPLIT);
  static_assert(kMergeThreads % 32 == 0 && 32 % SPLIT == 0, "split groups stay in a warp");
  __shared__ int s_slot[kMergeChunk];
  __shared__ float s_lse[HEADS][kMergeChunk];

  const bool stamps = blockIdx.y == 0;  // one timeline record per query: head block 0's
  const auto tl_rec = [&p] { return p.timeline_merge_base + blockIdx.x; };
  if (stamps) timeline_begin(p, tl_rec, kTlMergeConfig);
  pdl_launch_dependents();
  pdl_wait();  // partials come from the attention kernels before us
  if (stamps) timeline_stamp(p, tl_rec, kTlClockKv);
  const int query = blockIdx.x;
  // past the plan's queries merge_indptr is zero, so begin >= end there too
  const int begin = p.merge_indptr[query], end = p.merge_indptr[query + 1];
  if (begin >= end) return;
  if (stamps) timeline_stamp(p, tl_rec, kTlClockItem);

  const int H = p.num_qo_heads;
  const int head0 = blockIdx.y * HEADS;
  const int pair = threadIdx.x / SPLIT, part = threadIdx.x % SPLIT;
  const int hl = pair / CPT, c = pair - hl * CPT;
  const bool active = hl < HEADS && head0 + hl < H;  // the same for the pair's threads
  const int head = head0 + hl;

  float m = -INFINITY, sum = 0.f;
  float o[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  bool nan = false;  // a NaN partial (a NaN in K) makes the query's output NaN
  for (int c0 = begin; c0 < end; c0 += kMergeChunk) {
    const int n = min(kMergeChunk, end - c0);
    if (c0 != begin) __syncthreads();  // the last chunk's readers are done with shared memory
    for (int i = threadIdx.x; i < n; i += kMergeThreads) s_slot[i] = p.merge_slots[c0 + i];
    __syncthreads();
    for (int k = threadIdx.x; k < HEADS * n; k += kMergeThreads) {
      const int h = k / n, i = k - h * n;
      s_lse[h][i] = head0 + h < H ? p.partial_lse[static_cast<int64_t>(s_slot[i]) * H + head0 + h]
                                  : -INFINITY;
    }
    __syncthreads();
    float mc = -INFINITY;
    if (active)
      for (int i = part; i < n; i += SPLIT) {
        const float x = s_lse[hl][i];
        mc = fmaxf(mc, x);  // fmaxf ignores a NaN: `nan` records it
        nan |= x != x;
      }
#pragma unroll
    for (int off = 1; off < SPLIT; off <<= 1) mc = fmaxf(mc, __shfl_xor_sync(0xffffffffu, mc, off));
    if (mc > m) {  // rescale what was summed under the old max (exp(-inf) = 0 at the start)
      const float s = expf(m - mc);
      sum *= s;
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] *= s;
      m = mc;
    }
    if (active && m != -INFINITY) {
#pragma unroll 8
      for (int i = part; i < n; i += SPLIT) {
        const float w = expf(s_lse[hl][i] - m);  // 0 for empty partials: never read
        if (w != 0.f) {
          float x[8];
          load_partial_chunk<Traits, kHeadDim>(p, s_slot[i], head, c, x);
          sum += w;
#pragma unroll
          for (int e = 0; e < 8; ++e) o[e] += w * x[e];
        }
      }
    }
  }
  // the split's sums: a + b, then (a + b) + (c + d), the same bits in each of its lanes
#pragma unroll
  for (int off = 1; off < SPLIT; off <<= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, off);
    nan |= __shfl_xor_sync(0xffffffffu, static_cast<int>(nan), off) != 0;
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] += __shfl_xor_sync(0xffffffffu, o[e], off);
  }
  if (active && part == 0) {
    float lse = -INFINITY;
    if (nan) {
      lse = NAN;
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = NAN;
    } else if (m != -INFINITY) {
      const float inv = 1.f / sum;  // sum >= 1: the max slot has weight 1
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] *= inv;
      lse = m + logf(sum);
    }
    store_output_chunk<Traits>(p, query, head, c, o, lse);
  }
  if (stamps) timeline_end(p, tl_rec);
}

}  // namespace treeattn::cuda_detail
