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

CtaCost::CtaCost(const DeviceInfo& dev, const PlanShape& shape)
    : group_(shape.group()),
      D_(shape.head_dim),
      dt_(shape.dtype_bytes),
      slot_bw_(dev.hbm_read_GBps * 1e3 / static_cast<double>(device_slots(dev))),
      slot_flops_(dev.tc_TFLOPs * 1e6 * dev.mma_efficiency /
                  static_cast<double>(device_slots(dev))),
      overhead_(dev.item_overhead_us) {}

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
  std::vector<CostItem> items(plan.items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const WorkItem& it = plan.items[i];
    items[i].rows = it.num_rows;
    items[i].kv_tokens = it.kv_tokens;
    items[i].tile = it.tile;
    items[i].masked = it.mask_begin >= 0;
    for (int32_t r = 0; r < it.num_rows; ++r)
      items[i].partial_rows += plan.rows[it.row_begin + r].slot != kFinalOutput;
  }
  int64_t merged_queries = 0;
  for (size_t q = 0; q + 1 < plan.merge_indptr.size(); ++q)
    merged_queries += plan.merge_indptr[q + 1] > plan.merge_indptr[q];
  return items_cost_us(dev, plan.shape, items.data(), items.size(), plan.num_slots, merged_queries);
}

}  // namespace treeattn::planners
