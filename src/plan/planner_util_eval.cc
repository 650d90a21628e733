// The cost model's plan makespan for planners that compare many candidate plans: items_cost_us()
// over a light item list (plan_builder.h; PlanBuilder's cost-only mode feeds it directly) and
// fast_plan_us() over a finished Plan (planner_util.h). Same documented model as
// estimate_plan_us() (cost_model.cc).
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

namespace {

/// LPT makespan of `runs` (CTA time, how many CTAs) over `slots` identical slots: longest first
/// onto the least-loaded slot. A min-heap of slot loads; once every slot is busy each CTA replaces
/// the top and sifts it down.
double lpt_makespan(std::vector<std::pair<double, int64_t>>* runs, int64_t slots) {
  std::sort(runs->begin(), runs->end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  thread_local std::vector<double> heap;
  heap.clear();
  double makespan = 0;
  const auto greater = std::greater<double>();
  for (const auto& [us, n] : *runs) {
    for (int64_t k = 0; k < n; ++k) {
      if (static_cast<int64_t>(heap.size()) < slots) {
        heap.push_back(us);
        std::push_heap(heap.begin(), heap.end(), greater);
        makespan = std::max(makespan, us);
        continue;
      }
      const double end = heap[0] + us;
      makespan = std::max(makespan, end);
      // Replace the least-loaded slot's load by `end` and restore the min-heap.
      const size_t size = heap.size();
      size_t i = 0;
      for (;;) {
        size_t c = 2 * i + 1;
        if (c >= size) break;
        if (c + 1 < size && heap[c + 1] < heap[c]) ++c;
        if (!(heap[c] < end)) break;
        heap[i] = heap[c];
        i = c;
      }
      heap[i] = end;
    }
  }
  return makespan;
}

}  // namespace

double items_cost_us(const DeviceInfo& dev, const PlanShape& s, const CostItem* items,
                     size_t num_items, int64_t num_slots, int64_t merged_queries,
                     double prune_above) {
  const int64_t kv_heads = s.num_kv_heads;
  const int64_t nslots = device_slots(dev);
  const CtaCost cost(dev, s);
  thread_local std::vector<std::pair<double, int64_t>> runs;  // (CTA us, items)
  runs.clear();
  // Totals of integer-valued doubles (exact below 2^53), so they do not depend on item order.
  double total_bytes = 0, total_flops = 0, sum_us = 0, max_us = 0;
  bool used_class[kNumTileClasses] = {false, false, false};
  const CostItem* prev = nullptr;
  double bytes = 0, flops = 0, us = 0;
  for (size_t i = 0; i < num_items; ++i) {
    const CostItem& it = items[i];
    if (prev == nullptr || it.rows != prev->rows || it.partial_rows != prev->partial_rows ||
        it.kv_tokens != prev->kv_tokens || it.tile != prev->tile) {
      cost.eval(it.rows, it.partial_rows, it.kv_tokens, it.tile, &bytes, &flops, &us);
      runs.emplace_back(us, 0);
      used_class[static_cast<int>(it.tile)] = true;
      max_us = std::max(max_us, us);
      prev = &it;
    }
    runs.back().second += it.count;
    sum_us += us * it.count;
    total_bytes += bytes * kv_heads * it.count;
    total_flops += flops * kv_heads * it.count;
  }
  const double bw = dev.hbm_read_GBps * 1e3;
  const double rate = dev.tc_TFLOPs * 1e6 * dev.mma_efficiency;
  int launches = 0;
  for (bool u : used_class) launches += u;
  double merge_us = 0;
  if (num_slots > 0) {
    ++launches;
    const double bytes =
        static_cast<double>(num_slots) * s.num_qo_heads * (s.head_dim * 4.0 + 4.0) +
        static_cast<double>(merged_queries) * s.num_qo_heads * s.head_dim * s.dtype_bytes;
    merge_us = bytes / bw;
  }
  const double fixed = merge_us + launches * dev.launch_overhead_us;
  // LPT makespan >= max(longest CTA, total CTA time / slots): skip the LPT when even that bound
  // cannot beat prune_above.
  const double bound = std::max({max_us, sum_us * static_cast<double>(kv_heads) / nslots,
                                 total_bytes / bw, total_flops / rate}) +
                       fixed;
  if (bound > prune_above * (1 + 1e-9)) return bound;

  // With kv_heads dividing the slots, the kv_heads copies of every item land on identical slot
  // groups: LPT over slots / kv_heads groups, one copy each, is exact.
  const bool grouped = nslots % kv_heads == 0;
  if (!grouped)
    for (auto& run : runs) run.second *= kv_heads;
  double makespan = lpt_makespan(&runs, grouped ? nslots / kv_heads : nslots);
  makespan = std::max({makespan, total_bytes / bw, total_flops / rate});
  return makespan + merge_us + launches * dev.launch_overhead_us;
}

double fast_plan_us(const DeviceInfo& dev, const Plan& plan) {
  std::vector<CostItem> items(plan.items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const WorkItem& it = plan.items[i];
    items[i].rows = it.num_rows;
    items[i].kv_tokens = it.kv_tokens;
    items[i].tile = it.tile;
    for (int32_t r = 0; r < it.num_rows; ++r)
      items[i].partial_rows += plan.rows[it.row_begin + r].slot != kFinalOutput;
  }
  int64_t merged_queries = 0;
  for (size_t q = 0; q + 1 < plan.merge_indptr.size(); ++q)
    merged_queries += plan.merge_indptr[q + 1] > plan.merge_indptr[q];
  return items_cost_us(dev, plan.shape, items.data(), items.size(), plan.num_slots, merged_queries);
}

}  // namespace treeattn::planners
