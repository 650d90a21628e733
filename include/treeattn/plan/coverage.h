// check_coverage() (src/plan/coverage.cc): the planner invariant, checked against the tree.
#pragma once

#include "treeattn/plan/plan.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

/// Checks that every (query, KV token of its path) pair is covered exactly once by the plan's
/// unmasked rows/ranges, that no other pair is covered, that every query's output is produced
/// (directly or through merge slots), and that no slot is written twice. Throws std::logic_error
/// describing the first violation.
void check_coverage(const PrefixTree& tree, const Plan& plan);

}  // namespace treeattn
