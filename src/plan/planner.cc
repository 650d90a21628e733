// make_plan(): validates the tree and the options, builds the PlanIndex once, dispatches to the
// named planner (src/plan/planners.h: the planner table) and checks the result's internal
// consistency.
#include "treeattn/plan/planner.h"

#include <algorithm>

#include "planners.h"
#include "treeattn/common/error.h"

namespace treeattn {

namespace planners {

const std::vector<PlannerEntry>& planner_table() {
  static const std::vector<PlannerEntry> table = {{"query", query, SlotOrder::kByQuery},
                                                  {"node", node, SlotOrder::kByQuery},
                                                  {"node-chunk", node_chunk, SlotOrder::kByRow},
                                                  {"flatten", flatten, SlotOrder::kByRow},
                                                  {"fasttree", fasttree, SlotOrder::kByRow},
                                                  {"pat", pat, SlotOrder::kByRow},
                                                  {"forge", forge, SlotOrder::kByRow}};
  return table;
}

const PlannerEntry* find_planner(const std::string& name) {
  for (const PlannerEntry& e : planner_table())
    if (name == e.name) return &e;
  return nullptr;
}

Plan run_planner(const PlannerEntry& entry, const PrefixTree& tree, const PlanIndex& index,
                 const PlanOptions& opts) {
  PlanBuilder b(tree, opts, entry.name);
  entry.fn(tree, index, opts, &b);
  return b.finish(entry.order);
}

}  // namespace planners

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
  validate_device(opts.device);
  validate(tree);
  const planners::PlanIndex index = planners::build_plan_index(tree);

  const std::string& p = opts.planner;
  const planners::PlannerEntry* entry = planners::find_planner(p);
  Plan plan = entry != nullptr ? planners::run_planner(*entry, tree, index, opts)
                               : planners::auto_plan(tree, index, opts);
  plan.planner = p;
  plan.tree_version = tree.version;
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
