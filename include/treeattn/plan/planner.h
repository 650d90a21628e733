// Planners: turn a PrefixTree into a Plan. One entry point, make_plan() (src/plan/planner.cc),
// dispatches on the planner name; each planner lives in its own file under src/plan/planners/.
#pragma once

#include <string>
#include <vector>

#include "treeattn/plan/cost/device_info.h"
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

/// Names accepted by make_plan, in display order (the planner table, src/plan/planners/):
/// query, node, node-chunk, flatten, fasttree, pat, forge, auto.
const std::vector<std::string>& planner_names();

/// Validates the tree and the options (heads divisible, head_dim in {64,128,256}, group <= 128),
/// then runs the named planner. Throws std::invalid_argument naming "planner", "num_qo_heads",
/// "num_kv_heads", "head_dim" or the tree's offender.
/// Thread safety: every planner is reentrant. Any number of threads may call make_plan() at once,
/// on the same tree too (it only reads it); their one shared structure, FlashForge's profile
/// cache, is behind a mutex.
Plan make_plan(const PrefixTree& tree, const PlanOptions& opts);

}  // namespace treeattn
