// Cost model shared by every planner and the statistics: per-item time on one SM from HBM bytes,
// tensor-core FLOPs with tile padding and a fixed per-CTA cost; makespan by LPT over the SMs'
// CTA slots; plus launches and the merge pass.
#pragma once

#include <vector>

#include "treeattn/plan/device_info.h"
#include "treeattn/plan/plan.h"

namespace treeattn {

struct ItemCost {
  double bytes = 0;  ///< KV + Q + output/partial bytes this CTA moves
  double flops = 0;  ///< padded tensor-core FLOPs
  double us = 0;     ///< estimated CTA time in microseconds
};

/// Cost of one CTA processing `packed_rows` rows (queries x group) against `kv_tokens` tokens of
/// one KV head with tile class `tile`; `writes_partial` adds the fp32 partial write.
ItemCost estimate_item(const DeviceInfo& dev, const PlanShape& shape, TileClass tile,
                       int32_t packed_rows, int64_t kv_tokens, bool writes_partial);

/// Makespan in microseconds of a whole plan: LPT over num_sms * ctas_per_sm slots with per-slot
/// bandwidth share, plus launches and the merge.
double estimate_plan_us(const DeviceInfo& dev, const Plan& plan);

}  // namespace treeattn
