// make_range() (src/plan/ranges.cc): a token sub-range of a tree node as a KvRange over a plan's
// page list; the building block of every planner's ranges (and of hand-made plans in tests).
#pragma once

#include <cstdint>
#include <vector>

#include "treeattn/plan/plan.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

/// Range over tokens [tok_begin, tok_end) of node `node`; appends the node's pages to
/// plan->page_ids once per node (memoised in `node_page_base`, sized nodes.size(), -1 = none).
KvRange make_range(const PrefixTree& tree, int32_t node, int32_t tok_begin, int32_t tok_end,
                   Plan* plan, std::vector<int32_t>* node_page_base);

}  // namespace treeattn
