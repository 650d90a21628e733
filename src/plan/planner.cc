// make_plan(): validates the tree and the options, builds the TreeIndex once, dispatches to the
// named planner (planners/planners.h: the planner table) and checks the result's internal
// consistency; planner_names() from the same table.
#include "treeattn/plan/planner.h"

#include <algorithm>

#include "planners/planners.h"
#include "treeattn/common/error.h"

namespace treeattn {

const std::vector<std::string>& planner_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const planners::PlannerEntry& e : planners::planner_table()) n.push_back(e.name);
    return n;
  }();
  return names;
}

namespace {

/// "query, node, ..., paths-split or auto": the accepted names for error messages.
std::string planner_list_text() {
  const std::vector<std::string>& names = planner_names();
  std::string s;
  for (size_t i = 0; i < names.size(); ++i)
    s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

}  // namespace

void validate_plan_options(const PlanOptions& opts) {
  TA_CHECK_ARG(planners::find_planner(opts.planner) != nullptr, "planner", "unknown planner '",
               opts.planner, "' (expected ", planner_list_text(), ")");
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
  TA_CHECK_ARG(opts.kv_dtype_bytes == 0 || opts.kv_dtype_bytes == 1 || opts.kv_dtype_bytes == 2 ||
                   opts.kv_dtype_bytes == 4,
               "kv_dtype_bytes", "must be 1, 2, 4 or 0 (= dtype_bytes), got ", opts.kv_dtype_bytes);
  TA_CHECK_ARG(opts.paths_group >= 0 && opts.paths_group <= kMaxMaskedRows, "paths_group",
               "must be 0 (chosen by the cost model) to ", kMaxMaskedRows, ", got ",
               opts.paths_group);
  validate_device(opts.device);
}

PlanOptions make_plan_options(const std::string& planner, int32_t num_qo_heads,
                              int32_t num_kv_heads, int32_t head_dim, const DeviceInfo& device,
                              int32_t dtype_bytes, int32_t kv_dtype_bytes, int32_t paths_group) {
  PlanOptions o;
  o.planner = planner;
  o.num_qo_heads = num_qo_heads;
  o.num_kv_heads = num_kv_heads;
  o.head_dim = head_dim;
  o.dtype_bytes = dtype_bytes;
  o.kv_dtype_bytes = kv_dtype_bytes;
  o.paths_group = paths_group;
  o.device = device;
  validate_plan_options(o);
  return o;
}

int32_t fixed_paths_group(const PlanOptions& opts) {
  return opts.paths_group > 0
             ? std::min(opts.paths_group, planners::max_queries_per_item(opts, /*masked=*/true))
             : 0;
}

Plan make_plan(const PrefixTree& tree, const PlanOptions& opts) {
  validate_plan_options(opts);
  TA_CHECK_ARG(tree.page_size >= 1, "page_size", "must be >= 1, got ", tree.page_size);
  validate(tree);
  const planners::PlannerEntry* entry = planners::find_planner(opts.planner);
  const TreeIndex index = build_index(tree);

  const std::string& p = opts.planner;
  Plan plan = entry->fn != nullptr ? planners::run_planner(*entry, tree, index, opts)
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
