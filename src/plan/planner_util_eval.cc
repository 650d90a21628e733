// The cost model's plan makespan for planners that compare many candidate plans: items_cost_us()
// over a light item list (plan_builder.h; PlanBuilder's cost-only mode feeds it directly) and
// fast_plan_us() over a finished Plan (planner_util.h). Both forward to estimate_items_us()
// (cost_model.cc), the one implementation of the documented model.
#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "planner_util.h"

namespace treeattn::planners {

double items_cost_us(const DeviceInfo& dev, const PlanShape& s, const CostItem* items,
                     size_t num_items, int64_t num_slots, int64_t merged_queries,
                     double prune_above) {
  // One cost path: the model lives in cost_model.cc (estimate_items_us).
  thread_local std::vector<ItemSummary> sum;
  sum.resize(num_items);
  for (size_t i = 0; i < num_items; ++i) {
    sum[i].rows = items[i].rows;
    sum[i].partial_rows = items[i].partial_rows;
    sum[i].kv_tokens = items[i].kv_tokens;
    sum[i].tile = items[i].tile;
    sum[i].count = items[i].count;
    sum[i].masked = items[i].masked;
  }
  return estimate_items_us(dev, s, sum.data(), num_items, num_slots, merged_queries, prune_above);
}

double fast_plan_us(const DeviceInfo& dev, const Plan& plan) {
  return estimate_plan_us(dev, plan);  // one summary of a full plan, kept in cost_model.cc
}

}  // namespace treeattn::planners
