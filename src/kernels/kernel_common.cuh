// Pieces shared by the decode attention kernels (the mma.sync/wgmma kernel of decode_kernel.cuh
// and the warp-specialized Hopper kernel of src/kernels/sm90/): dtype traits, the fp8 -> dtype
// conversion of an fp8 KV cache's elements and where its K and V scales apply, the column-block
// tile layout that wgmma's 128-byte swizzle reads, the cursor over an item's KV ranges, and the
// copies of an item's Q rows and row list into shared memory. Their epilogue is epilogue.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "decode_params.h"
#include "ptx.cuh"
#include "treeattn/common/fp8.h"
#include "treeattn/common/int_math.h"

namespace treeattn::cuda_detail {

constexpr float kLn2 = 0.69314718055994530942f;

template <DType kDType>
struct DTypeTraits;
template <>
struct DTypeTraits<DType::kFloat16> {
  using T = __half;
  using T2 = __half2;
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return __half22float2(*reinterpret_cast<__half2*>(&u));
  }
};
template <>
struct DTypeTraits<DType::kBFloat16> {
  using T = __nv_bfloat16;
  using T2 = __nv_bfloat162;
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&u));
  }
};

/// Two fp8 elements of type kKv (the low byte of `pair` first) as two values of the dtype (the
/// first in the low half): exact, both fp8 types being subsets of fp16 and bf16. sm_89+ converts
/// with cvt.rn.f16x2.{e4m3,e5m2}x2 (bf16 through float); older targets decode each byte in
/// software (fp8.h).
template <class Traits, KvDType kKv>
__device__ __forceinline__ uint32_t fp8x2_to_dtype(uint16_t pair) {
  static_assert(is_fp8(kKv), "fp8 types only");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t h2;
  if constexpr (kKv == KvDType::kFloat8E4M3)
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(pair));
  else
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;\n" : "=r"(h2) : "h"(pair));
  if constexpr (std::is_same_v<typename Traits::T, __half>) return h2;
  const float2 f = __half22float2(*reinterpret_cast<__half2*>(&h2));
  return Traits::pack(f.x, f.y);
#else
  return Traits::pack(fp8_bits_to_float(static_cast<uint8_t>(pair & 0xFF), kKv),
                      fp8_bits_to_float(static_cast<uint8_t>(pair >> 8), kKv));
#endif
}

/// Eight fp8 elements (bytes of `x`, first element in the lowest byte) as eight dtype values
/// (first in the low half of .x).
template <class Traits, KvDType kKv>
__device__ __forceinline__ uint4 fp8x8_to_dtype(uint2 x) {
  const auto cvt = [](uint32_t w, int half) {
    return fp8x2_to_dtype<Traits, kKv>(static_cast<uint16_t>(w >> (16 * half)));
  };
  return make_uint4(cvt(x.x, 0), cvt(x.x, 1), cvt(x.y, 0), cvt(x.y, 1));
}

/// The logit scale (exp2 domain) of a kernel with an fp8 cache (kKv8) or not: an fp8 cache's K
/// scale joins it, s = (q . k8) x sm_scale x k_scale.
template <bool kKv8>
__device__ __forceinline__ float logit_scale_log2(const KernelParams& p) {
  return kKv8 && p.k_scale != nullptr ? p.scale_log2 * *p.k_scale : p.scale_log2;
}
/// The factor the epilogue applies to O with the softmax normalization: an fp8 cache's V scale
/// (kept out of the LSE), else 1.
template <bool kKv8>
__device__ __forceinline__ float output_v_scale(const KernelParams& p) {
  return kKv8 && p.v_scale != nullptr ? *p.v_scale : 1.f;
}

/// Byte offset of 16-byte chunk `c` of row `r` in a [NR][head_dim] 16-bit tile stored as
/// head_dim / 64 column blocks of [NR][64] elements (128 bytes a row), chunk c of row r at chunk
/// (c ^ (r & 7)) of its row: the layout wgmma's 128-byte swizzle reads (sm90/wgmma.cuh). The
/// tile must start at a 1024-byte boundary.
template <int NR>
__device__ __forceinline__ uint32_t block_swz(int r, int c) {
  return static_cast<uint32_t>((c >> 3) * (NR * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/// Element offset (page * page_stride + slot * slot_stride) of token `pos` of range `r` (pos within
/// it), its page ids read by page_id(i) (i: r.page_begin + the page within the range): the plan's
/// page ids (RangeCursor) or a kM16 record's in shared memory (the loader's prologue).
template <class PageId>
__device__ __forceinline__ long long range_slot_offset(const KernelParams& p, int page_begin,
                                                       int page_offset, int token_begin, int pos,
                                                       PageId page_id) {
  const int in_range = page_offset + (pos - token_begin);
  const int page_local = p.page_shift >= 0 ? in_range >> p.page_shift : in_range / p.page_size;
  const int slot = in_range - page_local * p.page_size;
  const int page = page_id(page_begin + page_local);
  return page * p.page_stride + slot * p.slot_stride;
}

/// Forward-only cursor over an item's ranges: token position -> element offset of its page slot.
struct RangeCursor {
  const DeviceRange* ranges;
  int idx, num;
  DeviceRange cur;
  __device__ __forceinline__ void init(const DeviceRange* r, int n) {
    ranges = r;
    num = n;
    idx = 0;
    if (n > 0) cur = r[0];
  }
  /// Requires pos to be non-decreasing between calls and < the item's kv_tokens.
  __device__ __forceinline__ void seek(int pos) {
    while (pos >= cur.token_begin + cur.len && idx + 1 < num) cur = ranges[++idx];
  }
  /// Element offset (page * page_stride + slot * slot_stride) of token `pos` (seek first).
  __device__ __forceinline__ long long slot_offset(const KernelParams& p, int pos) const {
    return range_slot_offset(p, cur.page_begin, cur.page_offset, cur.token_begin, pos,
                             [&p](int i) { return p.page_ids[i]; });
  }
};

/// Copies the CTA's Q rows into shared memory with cp.async: packed row pr = r * group + h is the
/// query of the item's row r (item_rows[2 r]: the plan's rows from the item's row_begin, or a kM16
/// record's copy in shared memory), its qo head kv_head * group + h; rows past the item are
/// zero-filled. The calling thread copies 16-byte chunk `c` of rows prow, prow + RPP, ... < ROWS;
/// `swz(pr, c)` is the chunk's byte offset in the tile at sQ.
template <class T, int ROWS, int RPP, class Swz>
__device__ __forceinline__ void copy_q_rows(const KernelParams& p, const DeviceItem& item,
                                            const int32_t* item_rows, int kv_head, uint32_t sQ,
                                            int c, int prow, Swz swz) {
  const T* gq = static_cast<const T*>(p.q);
  const int group = p.group;
  const int packed_rows = item.num_rows * group;
#pragma unroll
  for (int pr0 = 0; pr0 < ROWS; pr0 += RPP) {
    const int pr = pr0 + prow;
    const T* src = gq;
    int bytes = 0;
    if (pr < packed_rows) {
      const int r = pr / group, h = pr - r * group;
      const int query = item_rows[2 * r];
      src = gq + query * p.q_stride_query + (kv_head * group + h) * p.q_stride_head + c * 8;
      bytes = 16;
    }
    cp_async16(sQ + swz(pr, c), src, bytes);
  }
}

/// Stages the item's rows (query, slot) in shared memory for the epilogue's writes, read at the
/// kernel's start beside Q's (the same lines), so that the epilogue makes no global load: thread
/// `tid` < num_rows writes sRows[tid]. Visible after the caller's next barrier.
__device__ __forceinline__ void stage_item_rows(const KernelParams& p, const DeviceItem& item,
                                                int2* sRows, int tid) {
  if (tid < item.num_rows)
    sRows[tid] =
        make_int2(p.rows[2 * (item.row_begin + tid)], p.rows[2 * (item.row_begin + tid) + 1]);
}

}  // namespace treeattn::cuda_detail
