// plan_stats() (src/plan/stats.cc): bytes, padding, FLOPs and the cost-model time of a plan.
#pragma once

#include <cstdint>

#include "treeattn/plan/cost/device_info.h"
#include "treeattn/plan/plan.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

struct PlanStats {
  int64_t items = 0, ctas = 0, launches = 0;
  int64_t kv_bytes_read = 0;  ///< sum over items of kv_tokens x kv_heads x head_dim x 2 x kv dtype
  int64_t unique_kv_bytes = 0;     ///< each used token once
  int64_t redundant_kv_bytes = 0;  ///< kv_bytes_read - unique_kv_bytes
  int64_t partial_bytes = 0;       ///< partial O + LSE written and read back by the merge
  int64_t qo_bytes = 0;            ///< Q read (per item row) + O written
  double padding_fraction = 0;     ///< wasted MMA rows / issued rows (tile padding)
  double flops = 0;                ///< tensor-core FLOPs issued, padding included
  double est_time_us = 0;          ///< cost-model makespan on the DeviceInfo
};

/// Plan statistics, est_time_us from the cost model on `device`.
PlanStats plan_stats(const PrefixTree& tree, const Plan& plan, const DeviceInfo& device);

}  // namespace treeattn
