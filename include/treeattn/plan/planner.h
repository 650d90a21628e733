// Planners: turn a PrefixTree into a Plan. One entry point, make_plan(), dispatches on the
// planner name; each planner lives in its own file under src/plan/.
#pragma once

#include <string>
#include <vector>

#include "treeattn/plan/device_info.h"
#include "treeattn/plan/plan.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

struct PlanOptions {
  std::string planner = "auto";
  int32_t num_qo_heads = 32;
  int32_t num_kv_heads = 8;
  int32_t head_dim = 128;
  int32_t dtype_bytes = 2;
  DeviceInfo device;  ///< defaults to the H200 preset
};

/// Names accepted by make_plan, in display order:
/// query, node, node-chunk, flatten, fasttree, pat, forge, auto.
const std::vector<std::string>& planner_names();

/// Validates the tree and the options (heads divisible, head_dim in {64,128,256}, group <= 128),
/// then runs the named planner. Throws std::invalid_argument naming "planner", "num_qo_heads",
/// "num_kv_heads", "head_dim" or the tree's offender.
Plan make_plan(const PrefixTree& tree, const PlanOptions& opts);

/// Checks that every (query, KV token of its path) pair is covered exactly once by the plan's
/// unmasked rows/ranges, that no other pair is covered, that every query's output is produced
/// (directly or through merge slots), and that no slot is written twice. Throws std::logic_error
/// describing the first violation.
void check_coverage(const PrefixTree& tree, const Plan& plan);

/// Plan statistics, est_time_us from the cost model on `device`.
PlanStats plan_stats(const PrefixTree& tree, const Plan& plan, const DeviceInfo& device);

// ---- building blocks shared by the planners (src/plan/plan_builder.cc)

/// Range over tokens [tok_begin, tok_end) of node `node`; appends the node's pages to
/// plan->page_ids once per node (memoised in `node_page_base`, sized nodes.size(), -1 = none).
KvRange make_range(const PrefixTree& tree, int32_t node, int32_t tok_begin, int32_t tok_end,
                   Plan* plan, std::vector<int32_t>* node_page_base);

}  // namespace treeattn
