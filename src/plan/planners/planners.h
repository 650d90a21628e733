// The planner algorithms, one entry point per file of this folder, and the planner table
// (planners.cc) from which make_plan() (../planner.cc), planner_names() and auto's candidate list
// are derived. An item-emitting planner writes into a PlanBuilder (plan_builder.h) in either
// mode; `auto` (auto.cc) scores candidates with cost-only builders and returns its plan. Not
// installed.
#pragma once

#include <string>
#include <vector>

#include "plan_builder.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn::planners {

/// Emits a planner's items into `b` (either builder mode).
using PlannerFn = void (*)(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts,
                           PlanBuilder* b);

void query(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts, PlanBuilder* b);
void node(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts, PlanBuilder* b);
void node_chunk(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts,
                PlanBuilder* b);
void flatten(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts,
             PlanBuilder* b);
/// Most KV ranges flatten may emit; flatten throws (naming "planner") on trees that need more.
inline constexpr int64_t kMaxFlattenRanges = int64_t{1} << 22;
/// Whether flatten's ranges stay within kMaxFlattenRanges (auto skips flatten otherwise).
bool flatten_fits(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts);
void fasttree(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts,
              PlanBuilder* b);
void pat(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts, PlanBuilder* b);
void forge(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts, PlanBuilder* b);
void paths(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts, PlanBuilder* b);
void paths_split(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts,
                 PlanBuilder* b);
Plan auto_plan(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts);

/// One row of the planner table.
struct PlannerEntry {
  const char* name;
  PlannerFn fn;     ///< nullptr for auto (auto_plan)
  SlotOrder order;  ///< slot numbering of the planner's plans
  /// Position among auto's candidates (auto scores them in this order; on equal cost the first
  /// wins), or -1 for auto itself.
  int32_t auto_rank;
  /// auto takes this candidate only where the model puts it this share below every other
  /// candidate (its cost is scored as cost / (1 - auto_margin)): for the paths-split planner,
  /// whose chosen plans the model under-estimates more than the others' (bench/NOTES.md, stop 43).
  double auto_margin = 0.0;
};
/// Every planner in display order (planner_names()): query, node, node-chunk, flatten, fasttree,
/// pat, forge, paths, paths-split, auto.
const std::vector<PlannerEntry>& planner_table();
/// The entry named `name`, or nullptr for unknown names.
const PlannerEntry* find_planner(const std::string& name);
/// The item-emitting planners in auto's candidate order.
const std::vector<const PlannerEntry*>& auto_candidates();
/// Runs an item-emitting `entry` into a full PlanBuilder and returns the finished plan; with
/// `search`, the builder starts from it (a cost-only run's choice, replayed without a search).
Plan run_planner(const PlannerEntry& entry, const PrefixTree& tree, const TreeIndex& index,
                 const PlanOptions& opts, const PlannerSearch* search = nullptr);

}  // namespace treeattn::planners
