// Internal: one function per planner, each in its own file under src/plan/. make_plan()
// (planner.cc) validates the inputs, builds the TreeIndex once and dispatches here; every
// planner ends with finalize_plan().
#pragma once

#include "treeattn/plan/planner.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn::planners {

Plan query(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts);
Plan node(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts);
Plan node_chunk(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts);
Plan flatten(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts);
Plan fasttree(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts);
Plan pat(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts);
Plan forge(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts);
Plan auto_plan(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts);

}  // namespace treeattn::planners
