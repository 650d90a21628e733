// Cost model shared by every planner and the statistics: per-item time on one SM from HBM bytes,
// tensor-core FLOPs with tile padding and a fixed per-CTA cost; makespan by LPT over the SMs' CTA
// slots, with kM128 CTAs that fill an SM scheduled last onto drained SMs; plus launches and the
// merge pass.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

#include "treeattn/plan/cost/device_info.h"
#include "treeattn/plan/plan.h"

namespace treeattn {

struct ItemCost {
  double bytes = 0;     ///< KV + Q + output/partial bytes this CTA moves
  double kv_bytes = 0;  ///< of them, K and V
  double flops = 0;     ///< padded tensor-core FLOPs
  double us = 0;        ///< estimated CTA time in microseconds
};

/// Rows the tensor-core MMA issues for `packed_rows` rows of tile class `tile`: kM16 always 16,
/// kM64/kM128 whole m16 slabs (warps without rows skip), at least 16.
inline int64_t issued_mma_rows(TileClass tile, int64_t packed_rows) {
  return tile == TileClass::kM16 ? 16 : std::max<int64_t>(16, (packed_rows + 15) / 16 * 16);
}

/// Cost of one CTA processing `packed_rows` rows (queries x group) against `kv_tokens` tokens of
/// one KV head with tile class `tile`; `writes_partial` adds the fp32 partial write.
ItemCost estimate_item(const DeviceInfo& dev, const PlanShape& shape, TileClass tile,
                       int32_t packed_rows, int64_t kv_tokens, bool writes_partial);

/// What the kernels run of a masked item's (warp slab, KV slice) pairs.
struct MaskedWork {
  /// The pairs whose MMAs run: some row of the slab sees some token of the slice.
  double mma_fraction = 1.0;
  /// Of those, the pairs that test every score against the mask: not every row of the slab sees
  /// every token of the slice (a slice that the item's end cuts short always tests). A shared
  /// node that every row of a slab sees runs unmasked (the kernels' SliceSeen::full).
  double tested_fraction = 1.0;
  bool operator==(const MaskedWork& o) const {
    return mma_fraction == o.mma_fraction && tested_fraction == o.tested_fraction;
  }
  bool operator!=(const MaskedWork& o) const { return !(*this == o); }
};

/// What the plan-level model reads of one work item: the one cost path that estimate_plan_us and
/// the planners' cost-only scoring (PlanBuilder's cost-only mode, auto) share.
struct ItemSummary {
  int32_t rows = 0;          ///< queries (unpacked rows)
  int32_t partial_rows = 0;  ///< of them, rows writing a partial slot
  int32_t kv_tokens = 0;
  int32_t private_tokens = 0;  ///< of kv_tokens, read by no other item (WorkItem::private_tokens)
  bool path_masks = false;     ///< WorkItem::path_masks: the path mask penalties
  TileClass tile = TileClass::kM16;
  int64_t count = 1;  ///< identical items this entry stands for
  /// The item carries DeFT masks (WorkItem::mask_begin >= 0); its CTA time is scaled by
  /// 1 + DeviceInfo::mask_penalty x work.tested_fraction (kM64/kM128) or 1 + mask_penalty_m16 x
  /// work.tested_fraction (kM16), or by the path_mask_penalty terms when path_masks.
  bool masked = false;
  /// Masked items: the share of (MMA slab x KV slice) pairs the kernel computes (a warp or
  /// warpgroup skips the slices none of its rows sees) and, of those, the share that runs the
  /// per-score mask test (the mask penalty scales with it); both 1 otherwise.
  MaskedWork work;
  /// Masked kM128 items: the same on the warp-specialized kernel's 128-token tiles, which the
  /// model takes where the plan's kM128 class runs there (masked_work's `ws`); `work` otherwise.
  MaskedWork ws_work;
};

/// The MaskedWork of an item of `rows` queries of `group` packed rows each and `n` ranges of
/// lens[j] tokens seen by the rows whose bit is set in masks[j]. A slab is tile::mma_slab_rows
/// packed rows (16; 64 for kM64/kM128 up to head_dim 128 when `wgmma`); a slice is the tokens one
/// warp takes of a KV tile (tile_policy.h: 16 for kM16, the whole tile for kM64/kM128), or with
/// `ws` (a wgmma kM64/kM128 item on the warp-specialized kernel) its tile, tile::ws_kv_tile.
MaskedWork masked_work(TileClass tile, int group, int head_dim, int rows, const int32_t* lens,
                       const uint64_t* masks, size_t n, bool wgmma, bool ws = false);
/// ItemSummary::work and ws_work of a masked item (masked_work, and on the ws kM128 tiles).
void set_masked_work(ItemSummary* it, int group, int head_dim, const int32_t* lens,
                     const uint64_t* masks, size_t n, bool wgmma);

/// True when the kernel runs the kM16 launch of a plan with `m16_ctas` kM16 CTAs (items x KV
/// heads) in its wide variant (treeattn/plan/tile_policy.h, use_wide_m16), as the model assumes.
bool model_uses_wide_m16(const DeviceInfo& dev, int64_t m16_ctas);

/// Cost of one CTA as in estimate_plan_us (`wide`: kM16 run as the wide variant; counts are
/// packed rows), for planners that evaluate many items.
ItemCost estimate_cta(const DeviceInfo& dev, const PlanShape& shape, TileClass tile, bool wide,
                      int64_t packed_rows, int64_t partial_packed_rows, int64_t kv_tokens);

/// What the model reads of a plan's merge: partial slots, queries with a merge list, and the
/// longest list (the merge's critical path under DeviceInfo::latency_terms).
struct MergeSummary {
  int64_t slots = 0;
  int64_t queries = 0;
  int64_t longest = 0;
  /// Counts a query whose merge list has `len` slots (none when len is 0).
  void add_list(int64_t len) {
    if (len <= 0) return;
    slots += len;
    ++queries;
    longest = std::max(longest, len);
  }
};

/// estimate_plan_us over item summaries and the plan's merge. When a lower bound of the result
/// already exceeds `prune_above` (by a relative 1e-9), that bound is returned without the
/// scheduling (still > prune_above).
double estimate_items_us(const DeviceInfo& dev, const PlanShape& shape, const ItemSummary* items,
                         size_t num_items, const MergeSummary& merge,
                         double prune_above = std::numeric_limits<double>::infinity());

/// A lower bound of estimate_items_us for any plan of `shape` with at least one item whose items
/// read `kv_tokens` KV tokens in all (per KV head, re-reads counted): their K and V bytes over
/// DeviceInfo::l2_read_GBps (0 there: no term), plus one attention launch. Lets a planner skip a
/// candidate without summarizing its items.
double kv_read_floor_us(const DeviceInfo& dev, const PlanShape& shape, int64_t kv_tokens);

/// Makespan in microseconds of a whole plan: LPT over num_sms x slots-per-SM slots (kM128 CTAs
/// that fill an SM after all others, each onto the SM that drains first) with per-slot
/// bandwidth share, plus launches and the merge (or, with DeviceInfo::latency_terms, the call's
/// critical path: first launch, the attention kernels overlapped by PDL, the dependent merge).
double estimate_plan_us(const DeviceInfo& dev, const Plan& plan);

}  // namespace treeattn
