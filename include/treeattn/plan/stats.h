// plan_stats() (src/plan/stats.cc): bytes, padding, FLOPs and the cost-model time of a plan.
#pragma once

#include "treeattn/plan/device_info.h"
#include "treeattn/plan/plan.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

/// Plan statistics (PlanStats, plan.h), est_time_us from the cost model on `device`.
PlanStats plan_stats(const PrefixTree& tree, const Plan& plan, const DeviceInfo& device);

}  // namespace treeattn
