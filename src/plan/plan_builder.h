// Internal building blocks for the planners (src/plan/*.cc). A planner typically:
//
//   Plan plan = begin_plan(tree, opts, "name");
//   std::vector<int32_t> page_base;                      // memo for make_range (planner.h)
//   for (...) {
//     std::vector<KvRange> ranges;                        // make_range / append_path_ranges
//     add_item(&plan, queries, ranges);                   // rows get placeholder slots
//   }
//   assign_slots(&plan);   // kFinalOutput for single-row queries, dense slots + merge lists else
//   finalize_plan(&plan);  // sort by tile class, fill class_begin
//
// make_plan() validates the result with validate_plan() afterwards.
#pragma once

#include <cstdint>
#include <vector>

#include "treeattn/plan/planner.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn::planners {

/// An empty plan with `planner` = name and the shape taken from opts and the tree
/// (num_queries, heads, head_dim, page size, dtype bytes).
Plan begin_plan(const PrefixTree& tree, const PlanOptions& opts, const char* name);

/// Appends one work item: rows for `queries` (in that order, slot left as a placeholder for
/// assign_slots), `ranges` appended to plan->ranges, optional `masks` (one per range, bit r =
/// row r; requires queries.size() <= 64). Sets kv_tokens and the smallest tile class holding
/// queries.size() x group packed rows (throws std::invalid_argument if > 128). Returns the item
/// index (before finalize_plan reorders items).
int32_t add_item(Plan* plan, const std::vector<int32_t>& queries,
                 const std::vector<KvRange>& ranges, const std::vector<uint64_t>* masks = nullptr);

/// Slots and merge lists from the rows: a query with exactly one row in the whole plan gets
/// kFinalOutput and an empty merge list; the rows of every other query get dense slots
/// 0..num_slots-1, numbered query by query (so a query's slots are contiguous) in row order, and
/// merge_indptr / merge_slots list them. Overwrites any slot values already in the rows.
void assign_slots(Plan* plan);

/// Appends to `out` the ranges covering tokens [tok_begin, tok_end) of the concatenation of the
/// nodes in `path` (root first, e.g. query_path()); a sub-range may start or end mid-node.
void append_path_ranges(const PrefixTree& tree, const std::vector<int32_t>& path, int64_t tok_begin,
                        int64_t tok_end, Plan* plan, std::vector<int32_t>* node_page_base,
                        std::vector<KvRange>* out);

/// Max queries per item so that queries x group <= 128 packed rows (>= 1).
inline int32_t row_cap_queries(const PlanShape& shape) {
  const int32_t g = shape.group();
  return g >= 128 ? 1 : 128 / g;
}

}  // namespace treeattn::planners
