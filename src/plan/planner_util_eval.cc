// fast_plan_us(): the cost model's plan makespan (cost_model.cc) for planners that compare many
// candidate plans; see planner_util.h.
#include <algorithm>
#include <functional>
#include <queue>
#include <vector>

#include "planner_util.h"

namespace treeattn::planners {

double fast_plan_us(const DeviceInfo& dev, const Plan& plan) {
  const PlanShape& s = plan.shape;
  const int64_t group = s.group();
  const int64_t kv_heads = s.num_kv_heads;
  const double D = s.head_dim, dt = s.dtype_bytes;
  const int64_t nslots = device_slots(dev);
  const double slot_bw = dev.hbm_read_GBps * 1e3 / nslots;
  const double slot_flops = dev.tc_TFLOPs * 1e6 * dev.mma_efficiency / nslots;
  std::vector<double> cta_us;
  cta_us.reserve(plan.items.size());
  double total_bytes = 0, total_flops = 0;
  bool used_class[kNumTileClasses] = {false, false, false};
  for (const WorkItem& it : plan.items) {
    int64_t partial = 0;
    for (int32_t r = 0; r < it.num_rows; ++r)
      partial += plan.rows[it.row_begin + r].slot != kFinalOutput;
    const int64_t rows = it.num_rows * group, prow = partial * group;
    const double bytes = static_cast<double>(it.kv_tokens) * D * 2.0 * dt + rows * D * dt +
                         prow * (D * 4.0 + 4.0) + (rows - prow) * D * dt;
    const int64_t issued =
        it.tile == TileClass::kM16 ? 16 : std::max<int64_t>(16, (rows + 15) / 16 * 16);
    const double flops =
        4.0 * static_cast<double>(issued) * static_cast<double>((it.kv_tokens + 63) / 64 * 64) * D;
    cta_us.push_back(dev.item_overhead_us + std::max(bytes / slot_bw, flops / slot_flops));
    total_bytes += bytes * kv_heads;
    total_flops += flops * kv_heads;
    used_class[static_cast<int>(it.tile)] = true;
  }
  std::sort(cta_us.begin(), cta_us.end(), std::greater<double>());
  const bool grouped = nslots % kv_heads == 0;
  const int64_t slots = grouped ? nslots / kv_heads : nslots;
  const int64_t copies = grouped ? 1 : kv_heads;
  std::priority_queue<double, std::vector<double>, std::greater<double>> heap;
  double makespan = 0;
  for (const double us : cta_us) {
    for (int64_t h = 0; h < copies; ++h) {
      double start = 0;
      if (static_cast<int64_t>(heap.size()) == slots) {
        start = heap.top();
        heap.pop();
      }
      heap.push(start + us);
      makespan = std::max(makespan, start + us);
    }
  }
  const double bw = dev.hbm_read_GBps * 1e3;
  const double rate = dev.tc_TFLOPs * 1e6 * dev.mma_efficiency;
  makespan = std::max({makespan, total_bytes / bw, total_flops / rate});
  int launches = 0;
  for (bool u : used_class) launches += u;
  double merge_us = 0;
  if (plan.num_slots > 0) {
    ++launches;
    int64_t merged_queries = 0;
    for (int32_t q = 0; q + 1 < static_cast<int32_t>(plan.merge_indptr.size()); ++q)
      merged_queries += plan.merge_indptr[q + 1] > plan.merge_indptr[q];
    const double bytes =
        static_cast<double>(plan.num_slots) * s.num_qo_heads * (s.head_dim * 4.0 + 4.0) +
        static_cast<double>(merged_queries) * s.num_qo_heads * s.head_dim * s.dtype_bytes;
    merge_us = bytes / bw;
  }
  return makespan + merge_us + launches * dev.launch_overhead_us;
}

}  // namespace treeattn::planners
