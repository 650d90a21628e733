// Plan: the named, versioned description of one tree-attention call. Work items read KV token
// ranges (page-list slices) for a set of queries; each (item, query) row writes either the final
// output or a partial (fp32 output + log-sum-exp) slot; per query, the slots to merge.
//
// Execution model (shared by the CPU executor and the CUDA kernels):
//  * An item applies to every KV head: the GPU runs it for each KV head (a kM16 CTA walks several
//    KV heads of its item one after the other, a kM64/kM128 CTA takes one), packing the
//    `group = num_qo_heads / num_kv_heads` query heads of each of its queries into the MMA M
//    dimension (row r*group + h <-> query rows[row_begin + r], qo head kv_head*group + h), on
//    mma.sync, on wgmma per warpgroup (sm_90a), or on the warp-specialized Hopper kernel for long
//    grouped items (include/treeattn/kernels/decode.h, GroupedKernel).
//  * Every row of an item attends every token of every range of the item, except where the item
//    has masks: then range j is seen only by rows whose bit is set in masks[mask_begin + j]
//    (bit r = item row r; items with masks have at most 64 rows).
//  * Row with slot == kFinalOutput writes out[query] directly (the query has exactly one row in
//    the whole plan); otherwise it writes partial slot `slot`, and merge_slots lists the query's
//    slots, merged by log-sum-exp (natural log of the softmax denominator, scaled logits).
//
// Thread safety: a Plan is plain data. Any number of threads may read one (run it, upload it,
// take its statistics) at once; writing it while another thread reads it needs the caller's
// synchronisation. To replace a plan that other threads are running, share it through
// SharedPlan (treeattn/plan/shared_plan.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace treeattn {

inline constexpr int32_t kPlanVersion = 1;
inline constexpr int32_t kFinalOutput = -1;
inline constexpr int32_t kMaxMaskedRows = 64;

/// Kernel tile classes: the number of packed (query x head) rows one CTA holds. Order matters:
/// items are sorted by class, one launch per class.
enum class TileClass : uint8_t { kM16 = 0, kM64 = 1, kM128 = 2 };
inline constexpr int kNumTileClasses = 3;
constexpr int tile_rows(TileClass c) {
  return c == TileClass::kM16 ? 16 : c == TileClass::kM64 ? 64 : 128;
}
/// Smallest class holding `packed_rows` rows; throws std::invalid_argument if > 128.
TileClass tile_class_for_rows(int32_t packed_rows);

/// KV token range: `len` tokens starting at slot `page_offset` of page page_ids[page_begin], then
/// continuing through page_ids[page_begin + 1], ... (token i -> page_ids[page_begin + (page_offset
/// + i) / P], slot (page_offset + i) % P).
struct KvRange {
  int32_t page_begin = 0;
  int32_t page_offset = 0;
  int32_t len = 0;
  int32_t node = -1;  ///< tree node it comes from (stats, debugging)
};

struct PlanRow {
  int32_t query = 0;
  int32_t slot = kFinalOutput;
};

struct WorkItem {
  int32_t row_begin = 0, num_rows = 0;      ///< into Plan::rows
  int32_t range_begin = 0, num_ranges = 0;  ///< into Plan::ranges
  int32_t mask_begin = -1;                  ///< into Plan::masks (one per range), -1 = no masks
  TileClass tile = TileClass::kM16;
  int32_t kv_tokens = 0;  ///< sum of the ranges' len
  /// Of kv_tokens, those no other item of the plan reads (per KV head): counted by the planners
  /// that know it (paths, paths-split), 0 otherwise. The cost model prices them at the CTA's share
  /// of HBM bandwidth, since no L2 re-read can serve them.
  int32_t private_tokens = 0;
  /// The item's ranges are nodes of its rows' root paths, each seen by the rows whose path holds
  /// it (the paths planners' groups: whole, where every row writes its final output, or cut into
  /// KV pieces): its masks leave mostly whole tiles, so a masked one pays the cost model's
  /// path_mask_penalty instead of flatten's mask_penalty.
  bool path_masks = false;
};

struct PlanShape {
  int32_t num_queries = 0;
  int32_t num_qo_heads = 32;
  int32_t num_kv_heads = 8;
  int32_t head_dim = 128;
  int32_t page_size = 16;
  int32_t dtype_bytes = 2;     ///< Q/O element size (fp16/bf16)
  int32_t kv_dtype_bytes = 2;  ///< K/V element size: dtype_bytes, or 1 for an fp8 cache
  /// KV tokens of the tree's nodes that some query attends: every plan reads them at least once,
  /// so they bound its HBM traffic from below (re-reads of them may hit L2). 0 = unknown.
  int64_t unique_kv_tokens = 0;
  int32_t group() const { return num_qo_heads / num_kv_heads; }
};

/// A plan: plain data (thread safety in the file comment).
struct Plan {
  int32_t version = kPlanVersion;
  uint64_t tree_version = 0;  ///< PrefixTree::version of the tree it was made from
  std::string planner;        ///< the planner asked for (PlanOptions::planner)
  /// The planner whose items these are: the one asked for, or for `auto` the candidate it chose
  /// ("auto" when its own grouping won, else e.g. "fasttree"). Filled by the PlanBuilder.
  std::string chosen_planner;
  PlanShape shape;
  std::vector<WorkItem> items;  ///< sorted by tile class (then by decreasing cost)
  std::vector<PlanRow> rows;
  std::vector<KvRange> ranges;
  std::vector<int32_t> page_ids;
  std::vector<uint64_t> masks;
  int32_t num_slots = 0;  ///< partial slots: [num_qo_heads, head_dim] (fp32-sized) + LSE each
  std::vector<int32_t>
      merge_indptr;  ///< num_queries + 1; query q merges merge_slots[indptr[q]..indptr[q+1])
  std::vector<int32_t> merge_slots;  ///< empty range for queries written directly
  int32_t class_begin[kNumTileClasses + 1] = {0, 0, 0,
                                              0};  ///< items of class c: [begin[c], begin[c+1])
};

/// Throws std::logic_error if the plan is internally inconsistent (indices out of range, a query
/// with kFinalOutput and other rows, slots written twice, class_begin not matching items, ...).
/// Does not need the tree; coverage against a tree is checked by check_coverage().
void validate_plan(const Plan& plan);

/// Fills class_begin and sorts items by class (stable); call at the end of every planner.
void finalize_plan(Plan* plan);

}  // namespace treeattn
