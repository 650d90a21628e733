// The planner table (planners.h): names, entry points, slot orders and auto's candidate order.
#include "planners.h"

#include <algorithm>

namespace treeattn::planners {

const std::vector<PlannerEntry>& planner_table() {
  static const std::vector<PlannerEntry> table = {
      {"query", query, SlotOrder::kByQuery, 4},
      {"node", node, SlotOrder::kByQuery, 2},
      {"node-chunk", node_chunk, SlotOrder::kByRow, 5},
      {"flatten", flatten, SlotOrder::kByRow, 6},
      {"fasttree", fasttree, SlotOrder::kByRow, 1},
      {"pat", pat, SlotOrder::kByRow, 0},
      {"forge", forge, SlotOrder::kByRow, 3},
      {"paths", paths, SlotOrder::kByRow, 7},
      {"paths-split", paths_split, SlotOrder::kByRow, 8, 0.05},
      {"auto", nullptr, SlotOrder::kByRow, -1}};
  return table;
}

const PlannerEntry* find_planner(const std::string& name) {
  for (const PlannerEntry& e : planner_table())
    if (name == e.name) return &e;
  return nullptr;
}

const std::vector<const PlannerEntry*>& auto_candidates() {
  static const std::vector<const PlannerEntry*> list = [] {
    std::vector<const PlannerEntry*> l;
    for (const PlannerEntry& e : planner_table())
      if (e.fn != nullptr && e.auto_rank >= 0) l.push_back(&e);
    std::sort(l.begin(), l.end(), [](const PlannerEntry* a, const PlannerEntry* b) {
      return a->auto_rank < b->auto_rank;
    });
    return l;
  }();
  return list;
}

Plan run_planner(const PlannerEntry& entry, const PrefixTree& tree, const TreeIndex& index,
                 const PlanOptions& opts, const PlannerSearch* search) {
  PlanBuilder b(tree, opts, entry.name);
  if (search != nullptr) b.search() = *search;
  entry.fn(tree, index, opts, &b);
  return b.finish(entry.order);
}

}  // namespace treeattn::planners
