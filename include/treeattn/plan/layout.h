// The device-side layout of a Plan (src/plan/layout.cc). One function computes the workspace
// size and every buffer's offset, so the two cannot disagree. All offsets are 256-byte aligned
// from the workspace base.
#pragma once

#include <cstdint>
#include <vector>

#include "treeattn/plan/plan.h"

namespace treeattn {

/// POD copies of the plan arrays as the kernels read them.
struct DeviceItem {
  int32_t row_begin, num_rows, range_begin, num_ranges, mask_begin, kv_tokens;
};
struct DeviceRange {
  int32_t page_begin, page_offset, len, token_begin;  ///< token_begin: prefix sum within the item
};

/// The record of a kM16 item (tile class 0): everything its CTA needs before its first K/V tile,
/// at a fixed stride from the item's slot, so that the CTA fetches it in one round with no load
/// that waits on another. `head` (32 bytes), then at kRecordRowsOff the item's rows (query, slot)
/// as int32 pairs, at kRecordRangesOff its first `head.inline_ranges` ranges (DeviceRange, with
/// page_begin indexing the record's own page list), at kRecordPagesOff those ranges' page ids.
/// Tokens [0, head.inline_tokens) of the item are found from the record alone; later ones from the
/// plan's ranges and page ids.
struct DeviceRecordHead {
  DeviceItem item;
  int32_t inline_tokens, inline_ranges;
};
inline constexpr int kRecordRows = 16;  ///< a kM16 item has at most 16 packed rows
inline constexpr int kRecordRanges = 8;
inline constexpr int kRecordRowsOff = 32;
inline constexpr int kRecordRangesOff = kRecordRowsOff + 8 * kRecordRows;
inline constexpr int kRecordPagesOff = kRecordRangesOff + 16 * kRecordRanges;
inline constexpr int kRecordMaxBytes = 1024;
/// Bytes of a record for a cache of `page_size` tokens a page: 512 (56 page ids) from 4 tokens a
/// page, else 1024 (184), so that a record covers at least the deep kM16 prologue's 128 tokens.
constexpr int record_bytes(int page_size) { return page_size >= 4 ? 512 : kRecordMaxBytes; }
constexpr int record_pages(int page_size) {
  return (record_bytes(page_size) - kRecordPagesOff) / 4;
}
static_assert(sizeof(DeviceRecordHead) == kRecordRowsOff, "record head");
static_assert(record_pages(1) >= 128 + kRecordRanges && record_pages(4) * 4 >= 128 + 4 * 8,
              "a record covers the deep kM16 prologue");
struct PlanLayout {
  PlanShape shape;  ///< heads, head_dim, page_size, dtype size the workspace was laid out for
  // capacities the layout was sized for (>= the plan's counts; graphs reuse a layout). The
  // items of class c sit at [class_item_off[c], class_item_off[c] + class_items[c]) of the item
  // array, the plan's first and zeroed entries (num_rows 0) after them. The kernels launch
  // class_items[c] CTAs per KV head for class c and a CTA whose item is empty exits, so a captured
  // graph stays valid for any later plan that fits, with no count to read first.
  int64_t class_items[kNumTileClasses] = {0, 0, 0};
  int64_t class_item_off[kNumTileClasses] = {0, 0, 0};
  /// kM16 items of the plan (headroom not applied): plan_layout sets it, DevicePlan::upload
  /// updates it for every plan it uploads. The launcher picks the kM16 config (wide or deep) and
  /// its KV heads per CTA from this count, never from the capacity, so the output bits depend on
  /// the plan, not on the headroom (a captured graph keeps the config of its capture).
  int64_t m16_items_planned = 0;
  /// Per tile class, the plan's items and the sum of their kv_tokens (headroom not applied; set
  /// with m16_items_planned by set_planned_counts). GroupedKernel::kAuto picks the kernel of each
  /// grouped class from them (tile::ws_pays_off), so the choice follows the plan, never the
  /// headroom, and a captured graph keeps the choice of its capture.
  int64_t class_items_planned[kNumTileClasses] = {0, 0, 0};
  int64_t class_kv_tokens_planned[kNumTileClasses] = {0, 0, 0};
  /// The plan's queries with merge slots and its merge slots (headroom not applied; set by
  /// set_planned_counts): the merge variant (tile::use_deep_merge) follows them.
  int64_t merge_queries_planned = 0, merge_slots_planned = 0;
  int64_t queries_planned = 0;  ///< the plan's queries (set_planned_counts)
  int64_t items = 0, rows = 0, ranges = 0, page_ids = 0, masks = 0, slots = 0, queries = 0;
  int32_t num_qo_heads = 0, head_dim = 0;
  // byte offsets into the workspace
  int64_t items_off = 0, rows_off = 0, ranges_off = 0, page_ids_off = 0, records_off = 0,
          masks_off = 0, merge_indptr_off = 0, merge_slots_off = 0, partial_o_off = 0,
          partial_lse_off = 0;
  /// bytes of each kM16 item's record (record_bytes(page_size)); class 0's slots have one each,
  /// item slot j of the class at records_off + j * record_bytes
  int32_t record_bytes = 0;
  int64_t metadata_bytes = 0;  ///< [0, metadata_bytes) is plan metadata, copied host -> device
  int64_t total_bytes = 0;     ///< whole workspace (metadata + fp32 partials)
};

/// Capacities a layout keeps whatever plan it is laid out from (graph_reserve() in planner.h
/// gives the ones that hold every later plan of a CUDA-graph step); zeros reserve nothing.
struct LayoutReserve {
  int64_t class_items[kNumTileClasses] = {0, 0, 0};
  int64_t rows = 0, ranges = 0, page_ids = 0, masks = 0, slots = 0, queries = 0;
};

/// Headroom > 1 sizes every capacity up (for graph replay over later, larger plans); `reserve`
/// (optional) raises each capacity to at least its value.
PlanLayout plan_layout(const Plan& plan, double headroom = 1.0,
                       const LayoutReserve* reserve = nullptr);
/// Sets the layout's counts of the plan it runs (m16_items_planned, class_items_planned,
/// class_kv_tokens_planned, merge_queries_planned, merge_slots_planned, queries_planned) from
/// `plan`: plan_layout sets them for its own plan, DevicePlan::upload for every plan it uploads
/// into an existing layout.
void set_planned_counts(const Plan& plan, PlanLayout* layout);
/// True when `plan` can be packed into `layout` (a workspace laid out for an earlier plan): same
/// heads, head_dim and page size, and every count within the layout's capacities.
bool plan_fits(const Plan& plan, const PlanLayout& layout);

/// Writes the plan's metadata into host memory laid out as `layout` ([0, layout.metadata_bytes)).
/// Throws std::invalid_argument naming "layout" if the plan exceeds its capacities.
void pack_plan(const Plan& plan, const PlanLayout& layout, void* host_metadata);
/// The page ids that the kM16 records of metadata packed by pack_plan copy: flat pairs (position
/// in the plan's page ids, the copy's position counted in int32 words from the page ids' start),
/// record by record. A later rewrite of a page id (DevicePlan::resolve_pages) rewrites its copies
/// too.
std::vector<int32_t> record_page_copies(const PlanLayout& layout, const void* host_metadata);

}  // namespace treeattn
