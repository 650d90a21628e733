// Internal: one function per planner, each in its own file under src/plan/. make_plan()
// (planner.cc) validates the inputs, builds the PlanIndex once and runs the planner's entry of
// planner_table() into a PlanBuilder (plan_builder.h), then finishes the plan with the entry's
// slot order. `auto` (auto.cc) scores candidates with cost-only builders and returns its plan.
#pragma once

#include "plan_builder.h"
#include "planner_util.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn::planners {

/// Emits a planner's items into `b` (either builder mode).
using PlannerFn = void (*)(const PrefixTree& tree, const PlanIndex& index, const PlanOptions& opts,
                           PlanBuilder* b);

void query(const PrefixTree& tree, const PlanIndex& index, const PlanOptions& opts, PlanBuilder* b);
void node(const PrefixTree& tree, const PlanIndex& index, const PlanOptions& opts, PlanBuilder* b);
void node_chunk(const PrefixTree& tree, const PlanIndex& index, const PlanOptions& opts,
                PlanBuilder* b);
void flatten(const PrefixTree& tree, const PlanIndex& index, const PlanOptions& opts,
             PlanBuilder* b);
/// Most KV ranges flatten may emit; flatten throws (naming "planner") on trees that need more.
inline constexpr int64_t kMaxFlattenRanges = int64_t{1} << 22;
/// Whether flatten's ranges stay within kMaxFlattenRanges (auto skips flatten otherwise).
bool flatten_fits(const PrefixTree& tree, const PlanIndex& index, const PlanOptions& opts);
void fasttree(const PrefixTree& tree, const PlanIndex& index, const PlanOptions& opts,
              PlanBuilder* b);
void pat(const PrefixTree& tree, const PlanIndex& index, const PlanOptions& opts, PlanBuilder* b);
void forge(const PrefixTree& tree, const PlanIndex& index, const PlanOptions& opts, PlanBuilder* b);
Plan auto_plan(const PrefixTree& tree, const PlanIndex& index, const PlanOptions& opts);

/// The seven item-emitting planners with the slot numbering each one's plans use.
struct PlannerEntry {
  const char* name;
  PlannerFn fn;
  SlotOrder order;
};
/// query, node, node-chunk, flatten, fasttree, pat, forge (planner_names() order).
const std::vector<PlannerEntry>& planner_table();
/// The entry named `name`, or nullptr (auto, unknown names).
const PlannerEntry* find_planner(const std::string& name);
/// Runs `entry` into a full PlanBuilder and returns the finished plan.
Plan run_planner(const PlannerEntry& entry, const PrefixTree& tree, const PlanIndex& index,
                 const PlanOptions& opts);

}  // namespace treeattn::planners
