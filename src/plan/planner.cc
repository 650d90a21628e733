// make_plan(): validates the tree and the options, builds the TreeIndex once, dispatches to the
// named planner (src/plan/planners.h) and checks the result's internal consistency.
#include "treeattn/plan/planner.h"

#include <algorithm>

#include "planners.h"
#include "treeattn/common/error.h"

namespace treeattn {

const std::vector<std::string>& planner_names() {
  static const std::vector<std::string> names = {"query",    "node", "node-chunk", "flatten",
                                                 "fasttree", "pat",  "forge",      "auto"};
  return names;
}

Plan make_plan(const PrefixTree& tree, const PlanOptions& opts) {
  const auto& names = planner_names();
  TA_CHECK_ARG(std::find(names.begin(), names.end(), opts.planner) != names.end(), "planner",
               "unknown planner '", opts.planner,
               "' (expected query, node, node-chunk, flatten, fasttree, pat, forge or auto)");
  TA_CHECK_ARG(opts.num_qo_heads >= 1, "num_qo_heads", "must be >= 1, got ", opts.num_qo_heads);
  TA_CHECK_ARG(opts.num_kv_heads >= 1, "num_kv_heads", "must be >= 1, got ", opts.num_kv_heads);
  TA_CHECK_ARG(opts.num_qo_heads % opts.num_kv_heads == 0, "num_kv_heads", opts.num_kv_heads,
               " does not divide num_qo_heads ", opts.num_qo_heads);
  TA_CHECK_ARG(opts.num_qo_heads / opts.num_kv_heads <= 128, "num_qo_heads",
               "group num_qo_heads / num_kv_heads = ", opts.num_qo_heads / opts.num_kv_heads,
               " exceeds 128");
  TA_CHECK_ARG(opts.head_dim == 64 || opts.head_dim == 128 || opts.head_dim == 256, "head_dim",
               "must be 64, 128 or 256, got ", opts.head_dim);
  TA_CHECK_ARG(opts.dtype_bytes == 1 || opts.dtype_bytes == 2 || opts.dtype_bytes == 4,
               "dtype_bytes", "must be 1, 2 or 4, got ", opts.dtype_bytes);
  TA_CHECK_ARG(tree.page_size >= 1, "page_size", "must be >= 1, got ", tree.page_size);
  validate(tree);
  const TreeIndex index = build_index(tree);

  Plan plan;
  const std::string& p = opts.planner;
  if (p == "query") {
    plan = planners::query(tree, index, opts);
  } else if (p == "node") {
    plan = planners::node(tree, index, opts);
  } else if (p == "node-chunk") {
    plan = planners::node_chunk(tree, index, opts);
  } else if (p == "flatten") {
    plan = planners::flatten(tree, index, opts);
  } else if (p == "fasttree") {
    plan = planners::fasttree(tree, index, opts);
  } else if (p == "pat") {
    plan = planners::pat(tree, index, opts);
  } else if (p == "forge") {
    plan = planners::forge(tree, index, opts);
  } else {
    plan = planners::auto_plan(tree, index, opts);
  }
  plan.planner = p;
  TA_CHECK_INTERNAL(plan.shape.num_queries == tree.num_queries() &&
                        plan.shape.num_qo_heads == opts.num_qo_heads &&
                        plan.shape.num_kv_heads == opts.num_kv_heads &&
                        plan.shape.head_dim == opts.head_dim &&
                        plan.shape.page_size == tree.page_size,
                    "planner '", p, "' returned a plan with the wrong shape");
  validate_plan(plan);  // O(plan size): cheap next to planning itself
  return plan;
}

}  // namespace treeattn
