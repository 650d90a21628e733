// The paged K/V loader of the attention kernel (decode_kernel.cuh) and its fp8 stage conversion.
//
// PagedKvLoader: per pass of a tile, each warp copies 32 / LCPT token rows by cp.async (lane / LCPT
// picks the row, lane % LCPT its 16-byte column: 8 dtype or 16 fp8 elements). A row's address
// chain (range seek, page id, mask word) runs once, in one lane of the warp, and reaches the row's
// other lanes by a shuffle: lane i < WROWS computes the warp's i-th row of the tile. In the kM16
// configs a token of the prologue's tiles that the item's record covers (its first inline_tokens)
// finds its range and page id in the record, in shared memory; every other token in the plan's
// arrays.
// Offsets are in elements from pointers at this thread's KV head and 16-byte column. A row past the
// item re-reads the item's last token: its scores are hidden (the tail test, or a zero mask word),
// so its P is 0, and every copy is a full 16 bytes with no per-row predicate. Masked items also
// store each row's mask word in the stage's sMask slots.
//
// convert_fp8_stage: an fp8 cache's stage -> the dtype tile(s) the MMAs read, in 16-byte units (16
// fp8 elements -> two dtype chunks); V only under KREG, whose K the MMAs convert in registers.
// Included only by decode_kernel.cuh; everything is inlined into the kernel.
#pragma once

#include <cstddef>
#include <cstdint>

#include "decode_params.h"
#include "kernel_common.cuh"
#include "ptx.cuh"

namespace treeattn::cuda_detail {

template <class C, class KvT>
struct PagedKvLoader {
  static constexpr int HD = C::HD, BN = C::BN;
  static constexpr int LCPT = C::KV8 ? HD / 16 : C::CPT;  ///< 16-byte columns of a K/V row
  static constexpr int LRPP = C::THREADS / LCPT;          ///< rows one loader pass covers
  static constexpr int RPW = 32 / LCPT;                   ///< rows per warp per pass
  static constexpr int PASSES = BN / LRPP;                ///< passes per tile
  static constexpr int WROWS = PASSES * RPW;              ///< rows per warp per tile
  static_assert(C::THREADS % LCPT == 0 && BN % LRPP == 0, "loader passes");
  static_assert(32 % LCPT == 0 && WROWS <= 32, "one lane per row of the warp's tile share");

  const KernelParams& p;
  const DeviceItem& item;
  uint64_t* sMask;
  uint32_t s_base;
  bool masked;
  int tid, lane, lc, lane_row;
  const KvT* gk;
  const KvT* gv;
  RangeCursor cursor;  ///< over the plan's ranges and page ids
  int rec_idx = 0;     ///< the range of the record's (C::RECORD) that the last inline token was in

  /// In the kM16 configs (C::RECORD) the item's record (DeviceRecordHead) is in shared memory at
  /// s_base_ + C::ROWINFO_OFF.
  __device__ __forceinline__ PagedKvLoader(const KernelParams& p_, const DeviceItem& item_,
                                           int kv_head, uint32_t s_base_, uint64_t* sMask_,
                                           bool masked_, int tid_, int lane_, int warp)
      : p(p_),
        item(item_),
        sMask(sMask_),
        s_base(s_base_),
        masked(masked_),
        tid(tid_),
        lane(lane_) {
    lc = tid % LCPT;
    const int64_t head_off = kv_head * p.head_stride + lc * (16 / sizeof(KvT));
    gk = static_cast<const KvT*>(p.k) + head_off;
    gv = static_cast<const KvT*>(p.v) + head_off;
    lane_row = (lane / RPW) * LRPP + warp * RPW + lane % RPW;
    cursor.init(p.ranges + item.range_begin, item.num_ranges);
  }

  /// Element offset of the page slot of token `pos` < the record's inline_tokens, from the
  /// record's ranges and page ids (shared memory; only rec_idx stays in registers). Requires pos
  /// to be non-decreasing between calls.
  __device__ __forceinline__ long long record_slot_offset(int pos) {
    const uint32_t rec = s_base + C::ROWINFO_OFF;
    uint4 r = ld_shared_u4(rec + kRecordRangesOff + 16 * rec_idx);  // DeviceRange's four fields
    while (pos >= static_cast<int>(r.w + r.z))
      r = ld_shared_u4(rec + kRecordRangesOff + 16 * ++rec_idx);
    return range_slot_offset(p, static_cast<int>(r.x), static_cast<int>(r.y), static_cast<int>(r.w),
                             pos,
                             [rec](int i) { return ld_shared_s32(rec + kRecordPagesOff + 4 * i); });
  }

  /// Issues the cp.async copies of KV tile `tile` into stage `stage` (no commit). kPrologue: a
  /// tile of the CTA's prologue, whose tokens the record covers are found there (C::RECORD); the
  /// mainloop's tiles, issued a tile ahead of their use, read the plan's arrays, whose cursor keeps
  /// its range in registers and finds its page ids in L1 (fewer dependent steps a tile than the
  /// record's shared-memory walk).
  template <bool kPrologue>
  __device__ __forceinline__ void load(int tile, int stage) {
    const uint32_t sK =
        s_base + (C::KV8 ? C::KV8_OFF + stage * C::STAGE8_BYTES : stage * C::STAGE_BYTES);
    const uint32_t sV = sK + (C::KV8 ? C::TILE8_BYTES : C::TILE_BYTES);
    // element offset of row lane_row's page slot (without the head and chunk)
    long long row_off = 0;
    if (lane < WROWS) {
      const int raw = tile * BN + lane_row;
      const int pos = min(raw, item.kv_tokens - 1);
      int range_idx;
      if (C::RECORD && kPrologue &&
          pos <
              ld_shared_s32(s_base + C::ROWINFO_OFF + offsetof(DeviceRecordHead, inline_tokens))) {
        row_off = record_slot_offset(pos);
        range_idx = rec_idx;
      } else {
        cursor.seek(pos);
        row_off = cursor.slot_offset(p, pos);
        range_idx = cursor.idx;
      }
      if (masked)
        sMask[stage * BN + lane_row] =
            raw < item.kv_tokens ? p.masks[item.mask_begin + range_idx] : 0ull;
    }
#pragma unroll
    for (int k = 0; k < PASSES; ++k) {
      const long long off = __shfl_sync(0xffffffffu, row_off, k * RPW + lane / LCPT);
      const int j = k * LRPP + tid / LCPT;
      if constexpr (C::KV8) {  // rows of HD bytes (K swizzled under KREG)
        cp_async16(sK + (C::KREG ? C::k8_swz(j, lc) : j * HD + 16 * lc), gk + off);
        cp_async16(sV + j * HD + 16 * lc, gv + off);
      } else {
        cp_async16(sK + C::template swz<BN>(j, lc), gk + off);
        cp_async16(sV + C::template swz<BN>(j, lc), gv + off);
      }
    }
  }
};

/// Converts stage `stage` of an fp8 cache into the dtype tile(s). With one warp along the rows
/// (kM16) each warp converts the token slice only it reads (kWarpLocal: the caller orders it with
/// a warp barrier); otherwise the CTA converts the whole tile (a CTA barrier). The caller makes
/// sure the previous tile's MMAs on the dtype tile are done.
template <class C, class Traits, KvDType kKv>
__device__ __forceinline__ void convert_fp8_stage(uint32_t s_base, int stage, int wn, int lane,
                                                  int tid) {
  constexpr int HD = C::HD, BN = C::BN, BNW = C::BNW;
  constexpr bool kWarpLocal = C::FP8_WARP_LOCAL;
  constexpr int U = HD / 16;  // units of a K/V row
  constexpr int UNITS = (kWarpLocal ? BNW : BN) * U;
  const int first_row = kWarpLocal ? wn * BNW : 0;
  const int t0 = kWarpLocal ? lane : tid;
  constexpr int STEP = kWarpLocal ? 32 : C::THREADS;
  static_assert(UNITS % STEP == 0, "whole conversion passes");
  const uint32_t s8 = s_base + C::KV8_OFF + stage * C::STAGE8_BYTES;
#pragma unroll
  for (int kv = C::KREG ? 1 : 0; kv < 2; ++kv) {
#pragma unroll
    for (int u = t0; u < UNITS; u += STEP) {
      const int j = first_row + u / U, c8 = u % U;
      const uint4 x = ld_shared_u4(s8 + kv * C::TILE8_BYTES + j * HD + 16 * c8);
      const uint32_t dst = s_base + (C::KREG ? 0 : kv * C::TILE_BYTES);
      st_shared_u4(dst + C::template swz<BN>(j, 2 * c8),
                   fp8x8_to_dtype<Traits, kKv>(make_uint2(x.x, x.y)));
      st_shared_u4(dst + C::template swz<BN>(j, 2 * c8 + 1),
                   fp8x8_to_dtype<Traits, kKv>(make_uint2(x.z, x.w)));
    }
  }
}

}  // namespace treeattn::cuda_detail
