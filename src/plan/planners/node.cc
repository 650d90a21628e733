// Planner `node` (DeFT-Node): one work item per live node with all the queries below it, so every
// node's KV is read once per (node, query group). Items hold at most 128 packed rows
// (queries x group); a node with more queries gets several items over the same KV, with the
// queries split into near-equal groups. Each query gets one partial per node on its path, or
// writes its output directly when its path yields exactly one row.
#include <algorithm>

#include "plan_builder.h"
#include "planner_util.h"
#include "planners.h"

namespace treeattn::planners {

void node(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts, PlanBuilder* b) {
  const int64_t cap = max_queries_per_item(opts, /*masked=*/false);
  for (const int32_t n : index.preorder) {
    const IdSpan qs = index.queries_below(n);
    if (qs.empty()) continue;
    const int64_t m = static_cast<int64_t>(qs.size());
    const int64_t parts = ceil_div(m, cap);
    for (int64_t p = 0; p < parts; ++p) {
      const int64_t q0 = p * m / parts, q1 = (p + 1) * m / parts;
      b->begin_item();
      b->add_rows(qs.data() + q0, static_cast<int32_t>(q1 - q0));
      b->add_range(n, 0, tree.nodes[n].tokens);
      b->end_item();
    }
  }
}

}  // namespace treeattn::planners
