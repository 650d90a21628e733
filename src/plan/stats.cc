// plan_stats(): bytes, padding, FLOPs and the cost-model time of a plan (see PlanStats).
// padding_fraction weighs each item's wasted MMA rows by its KV tokens, i.e. it is the fraction
// of issued row x token work that falls on padding rows.
#include "treeattn/plan/stats.h"

#include <algorithm>

#include "treeattn/plan/cost/cost_model.h"

namespace treeattn {

PlanStats plan_stats(const PrefixTree& tree, const Plan& plan, const DeviceInfo& device) {
  validate_device(device);
  const PlanShape& s = plan.shape;
  const int64_t kvh = s.num_kv_heads, D = s.head_dim, dt = s.dtype_bytes;
  const int64_t kv_dt = s.kv_dtype_bytes;  // K/V elements (1 for fp8), Q/O in dt
  const int64_t group = s.group();
  PlanStats st;
  st.items = static_cast<int64_t>(plan.items.size());
  st.ctas = st.items * kvh;
  for (int c = 0; c < kNumTileClasses; ++c)
    st.launches += plan.class_begin[c + 1] > plan.class_begin[c];
  if (plan.num_slots > 0) ++st.launches;

  double issued = 0, real = 0;
  int64_t rows = 0;
  for (const WorkItem& it : plan.items) {
    st.kv_bytes_read += static_cast<int64_t>(it.kv_tokens) * kvh * D * 2 * kv_dt;
    rows += it.num_rows;
    const int64_t packed = it.num_rows * group;
    const ItemCost c =
        estimate_item(device, s, it.tile, static_cast<int32_t>(packed), it.kv_tokens, false);
    st.flops += c.flops * kvh;
    issued += static_cast<double>(issued_mma_rows(it.tile, packed)) * it.kv_tokens;
    real += static_cast<double>(packed) * it.kv_tokens;
  }
  st.unique_kv_bytes = unique_tokens(tree) * kvh * D * 2 * kv_dt;
  st.redundant_kv_bytes = st.kv_bytes_read - st.unique_kv_bytes;
  st.partial_bytes = 2 * static_cast<int64_t>(plan.num_slots) * s.num_qo_heads * (D * 4 + 4);
  st.qo_bytes = rows * s.num_qo_heads * D * dt +
                static_cast<int64_t>(s.num_queries) * s.num_qo_heads * D * dt;
  st.padding_fraction = issued > 0 ? std::max(0.0, 1.0 - real / issued) : 0.0;
  st.est_time_us = estimate_plan_us(device, plan);
  return st;
}

}  // namespace treeattn
