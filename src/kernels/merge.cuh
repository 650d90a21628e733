// The merge kernel: combines each query's partial outputs (O in fp32 or the dtype, see
// PartialPrecision, and the natural-log LSE per slot and qo head, written by the attention
// kernels) into its final output row, in the order of its merge list (deterministic, no atomics).
//
// Grid (query capacity, ceil(num_qo_heads / heads per CTA)); past the plan's queries the merge
// list is empty and the CTA waits (as every CTA does: the grid's end stays the attention kernels'
// end) and exits. The merge list and the slot ids of its first chunk are read before
// griddepcontrol.wait (they are plan metadata), so that once the attention kernels are done one
// round of loads remains. A CTA takes its query's slots in chunks of kMergeChunk ids staged in
// shared memory; each (head, 8-element chunk of head_dim) pair is summed by SPLIT adjacent
// threads, thread `part` taking every SPLIT-th slot (the two variants, SPLIT 1 and 4, are
// described and chosen in tile_policy.h). A thread loads the LSEs and partial outputs of BATCH of
// its slots at once, then folds them into its own online state (max, weight sum, weighted O); at
// the end the split's states are put on their common max and added with xor shuffles (the same
// bits in every lane).
#pragma once

#include <cstdint>

#include "decode_params.h"
#include "epilogue.cuh"
#include "kernel_common.cuh"
#include "ptx.cuh"
#include "timeline.cuh"
#include "treeattn/plan/tile_policy.h"

namespace treeattn::cuda_detail {

using tile::kMergeThreads;
constexpr int kMergeChunk = 128;  ///< slots staged in shared memory at a time

/// The 8 fp32 elements at `src` (16-byte aligned) as two float4 loads.
__device__ __forceinline__ void load_fp32_chunk(const float* src, float (&x)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(src);
  const float4 b = *reinterpret_cast<const float4*>(src + 4);
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

/// One merge thread's online state over its slots: running max m (natural log), weight sum, the
/// weighted sum of the partial outputs, and whether a NaN LSE (a NaN in K) was seen.
struct MergeState {
  float m = -INFINITY, sum = 0.f;
  float o[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  bool nan = false;
};

/// Folds slots part, part + SPLIT, ... < n of `slot` (a staged chunk of the merge list) into `st`,
/// for one (head, 8-element chunk c) pair. kHalf: the partials are in the dtype (kept packed until
/// used). Each batch issues all of its LSE and partial loads before it uses any.
template <class Traits, int kHeadDim, int SPLIT, bool kHalf>
__device__ __forceinline__ void merge_chunk(const KernelParams& p, const int* slot, int n, int part,
                                            int head, int c, MergeState& st) {
  constexpr int BATCH = 4;
  const int H = p.num_qo_heads;
  for (int i0 = part; i0 < n; i0 += BATCH * SPLIT) {
    float lse[BATCH];
    uint4 raw[kHalf ? BATCH : 1];
    float x[kHalf ? 1 : BATCH][8];
#pragma unroll
    for (int j = 0; j < BATCH; ++j) {
      const int i = i0 + j * SPLIT;
      lse[j] = -INFINITY;
      if (i < n) {
        lse[j] = p.partial_lse[static_cast<int64_t>(slot[i]) * H + head];
        const int64_t off = partial_offset<kHeadDim>(p, slot[i], head, c);
        if constexpr (kHalf)
          raw[j] = *reinterpret_cast<const uint4*>(
              reinterpret_cast<const typename Traits::T*>(p.partial_o) + off);
        else
          load_fp32_chunk(p.partial_o + off, x[j]);
      }
    }
    float bm = -INFINITY;
#pragma unroll
    for (int j = 0; j < BATCH; ++j) {
      bm = fmaxf(bm, lse[j]);  // fmaxf ignores a NaN: `nan` records it
      st.nan |= lse[j] != lse[j];
    }
    if (bm > st.m) {  // rescale what was summed under the old max (exp(-inf) = 0 at the start)
      const float s = expf(st.m - bm);
      st.sum *= s;
#pragma unroll
      for (int e = 0; e < 8; ++e) st.o[e] *= s;
      st.m = bm;
    }
    if (st.m == -INFINITY) continue;  // only empty partials so far
#pragma unroll
    for (int j = 0; j < BATCH; ++j) {
      const float w = expf(lse[j] - st.m);  // 0 for empty partials: their O is not added
      if (w != 0.f) {
        st.sum += w;
        if constexpr (kHalf) {
          const uint32_t u[4] = {raw[j].x, raw[j].y, raw[j].z, raw[j].w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 v = Traits::unpack(u[e]);
            st.o[2 * e] += w * v.x;
            st.o[2 * e + 1] += w * v.y;
          }
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e) st.o[e] += w * x[j][e];
        }
      }
    }
  }
}

/// Queries without merge slots were written by the attention kernel. Empty partials (lse = -inf)
/// get weight 0: their O (never written, so any bits) is loaded with the others but never added;
/// a query whose partials are all empty gets the empty state (o = 0, lse = -inf), never NaN; a
/// NaN LSE (a NaN in K) gives o = lse = NaN.
/// kHalf: p.half_partials (the partials in the dtype), a template argument so that each kernel
/// holds one load path and stays within the registers of 4 CTAs an SM.
template <DType kDType, int kHeadDim, int SPLIT, bool kHalf>
__global__ void __launch_bounds__(kMergeThreads, 4) decode_merge_kernel(const KernelParams p) {
  using Traits = DTypeTraits<kDType>;
  constexpr int CPT = kHeadDim / 8;
  constexpr int HEADS = tile::merge_heads_per_cta(kHeadDim, SPLIT);
  static_assert(kMergeThreads % 32 == 0 && 32 % SPLIT == 0, "split groups stay in a warp");
  __shared__ int s_slot[kMergeChunk];

  const bool stamps = blockIdx.y == 0;  // one timeline record per query: head block 0's
  const auto tl_rec = [&p] { return p.timeline_merge_base + blockIdx.x; };
  if (stamps) timeline_begin(p, tl_rec, kTlMergeConfig);
  pdl_launch_dependents();
  // The merge list and the first chunk's slot ids are plan metadata, uploaded before the call:
  // they are read while the attention kernels still run, so that after the wait only the
  // partials' own loads are left.
  const int query = blockIdx.x;
  // past the plan's queries merge_indptr is zero, so begin >= end there too
  const int begin = p.merge_indptr[query], end = p.merge_indptr[query + 1];
  if (begin >= end) {
    pdl_wait();  // as every CTA of the grid: its end still means the attention kernels' end
    return;
  }
  for (int i = threadIdx.x; i < min(kMergeChunk, end - begin); i += kMergeThreads)
    s_slot[i] = p.merge_slots[begin + i];
  if (stamps) timeline_stamp(p, tl_rec, kTlClockItem);
  pdl_wait();  // partials come from the attention kernels before us
  if (stamps) timeline_stamp(p, tl_rec, kTlClockKv);

  const int H = p.num_qo_heads;
  const int head0 = blockIdx.y * HEADS;
  const int pair = threadIdx.x / SPLIT, part = threadIdx.x % SPLIT;
  const int hl = pair / CPT, c = pair - hl * CPT;
  const bool active = hl < HEADS && head0 + hl < H;  // the same for the pair's threads
  const int head = head0 + hl;

  // this thread's running max, weight sum and weighted output over its slots
  MergeState st;
  for (int c0 = begin; c0 < end; c0 += kMergeChunk) {
    const int n = min(kMergeChunk, end - c0);
    if (c0 != begin) {  // a long list's next chunk of slot ids
      __syncthreads();  // the last chunk's readers are done with s_slot
      for (int i = threadIdx.x; i < n; i += kMergeThreads) s_slot[i] = p.merge_slots[c0 + i];
    }
    __syncthreads();
    if (!active) continue;
    merge_chunk<Traits, kHeadDim, SPLIT, kHalf>(p, s_slot, n, part, head, c, st);
  }
  float m = st.m, sum = st.sum;
  bool nan = st.nan;
  float(&o)[8] = st.o;
  // the split's states onto their common max, then summed: a + b, then (a + b) + (c + d), the
  // same bits in each of its lanes
  if constexpr (SPLIT > 1) {
    float mm = m;
#pragma unroll
    for (int off = 1; off < SPLIT; off <<= 1) mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, off));
    const float s = m == -INFINITY ? 0.f : expf(m - mm);
    sum *= s;
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] *= s;
    m = mm;
#pragma unroll
    for (int off = 1; off < SPLIT; off <<= 1) {
      sum += __shfl_xor_sync(0xffffffffu, sum, off);
      nan |= __shfl_xor_sync(0xffffffffu, static_cast<int>(nan), off) != 0;
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] += __shfl_xor_sync(0xffffffffu, o[e], off);
    }
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
