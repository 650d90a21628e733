// Planner `node` (DeFT-Node): one work item per live node with all the queries below it, so every
// node's KV is read once per (node, query group). Items hold at most 128 packed rows
// (queries x group); a node with more queries gets several items over the same KV, with the
// queries split into near-equal groups. Each query gets one partial per node on its path, or
// writes its output directly when its path yields exactly one row.
#include <algorithm>

#include "plan_builder.h"
#include "planners.h"

namespace treeattn::planners {

Plan node(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts) {
  Plan plan = begin_plan(tree, opts, "node");
  const int64_t cap = row_cap_queries(plan.shape);
  std::vector<int32_t> page_base(tree.nodes.size(), -1);
  std::vector<int32_t> group;
  for (const int32_t n : index.preorder) {
    const std::vector<int32_t>& qs = index.queries_below[n];
    if (qs.empty()) continue;
    const KvRange r = make_range(tree, n, 0, tree.nodes[n].tokens, &plan, &page_base);
    const int64_t m = static_cast<int64_t>(qs.size());
    const int64_t parts = (m + cap - 1) / cap;
    for (int64_t p = 0; p < parts; ++p) {
      group.assign(qs.begin() + p * m / parts, qs.begin() + (p + 1) * m / parts);
      add_item(&plan, group, {r});
    }
  }
  assign_slots(&plan);
  finalize_plan(&plan);
  return plan;
}

}  // namespace treeattn::planners
