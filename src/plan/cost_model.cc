// Analytic cost model shared by the planners and the statistics.
//
// One CTA = one (work item, KV head). Its time is
//   item_overhead_us + max(bytes / slot_bandwidth, flops / slot_flop_rate)
// where a CTA slot is one of the ctas_per_sm resident CTAs of an SM and gets 1/ctas_per_sm of
// that SM's share (1/num_sms) of the HBM bandwidth and of the tensor-core rate (tc_TFLOPs x
// mma_efficiency). Bytes: K and V of its tokens, Q of its packed rows, and either the fp16/bf16
// output or the fp32 partial (output + LSE) of each packed row. FLOPs: QK^T and PV, 2 x 2 x rows x
// tokens x head_dim, with the rows the MMA really issues (kM16 always issues 16 rows; kM64/kM128
// issue ceil(rows / 16) x 16 because warps without rows skip) and tokens rounded up to the KV
// tile of 64.
//
// A plan's time: LPT (longest CTA first onto the least-loaded slot, min-heap) over
// num_sms x ctas_per_sm slots gives the makespan; it is raised to the global bound
// max(total bytes / HBM bandwidth, total FLOPs / tensor-core rate); then launch_overhead_us per
// launch (one per non-empty tile class, plus one merge launch when there are partial slots) and
// the merge pass (partials read, merged outputs written, at full HBM bandwidth) are added.
// Deterministic, O(C log C) in the number of CTAs C.
#include "treeattn/plan/cost_model.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <vector>

#include "treeattn/common/error.h"

namespace treeattn {
namespace {

/// Rows the MMA issues for `packed_rows` real rows in tile class `tile`.
int64_t issued_rows(TileClass tile, int64_t packed_rows) {
  if (tile == TileClass::kM16) return 16;
  return std::max<int64_t>(16, (packed_rows + 15) / 16 * 16);
}

/// Cost with `partial_rows` of the packed rows writing fp32 partials (the rest write outputs).
ItemCost item_cost(const DeviceInfo& dev, const PlanShape& shape, TileClass tile,
                   int64_t packed_rows, int64_t kv_tokens, int64_t partial_rows) {
  const double D = shape.head_dim, dt = shape.dtype_bytes;
  ItemCost c;
  c.bytes = static_cast<double>(kv_tokens) * D * 2.0 * dt + packed_rows * D * dt +
            partial_rows * (D * 4.0 + 4.0) + (packed_rows - partial_rows) * D * dt;
  const double kv_padded = static_cast<double>((kv_tokens + 63) / 64 * 64);
  c.flops = 4.0 * static_cast<double>(issued_rows(tile, packed_rows)) * kv_padded * D;
  const double slots = static_cast<double>(dev.num_sms) * dev.ctas_per_sm;
  const double slot_bw = dev.hbm_read_GBps * 1e3 / slots;                      // bytes per us
  const double slot_flops = dev.tc_TFLOPs * 1e6 * dev.mma_efficiency / slots;  // FLOPs per us
  c.us = dev.item_overhead_us + std::max(c.bytes / slot_bw, c.flops / slot_flops);
  return c;
}

void check_device(const DeviceInfo& dev) {
  TA_CHECK_ARG(dev.num_sms >= 1 && dev.ctas_per_sm >= 1 && dev.hbm_read_GBps > 0 &&
                   dev.tc_TFLOPs > 0 && dev.mma_efficiency > 0,
               "device", "non-positive SM count, CTAs per SM, bandwidth or tensor-core rate");
}

}  // namespace

ItemCost estimate_item(const DeviceInfo& dev, const PlanShape& shape, TileClass tile,
                       int32_t packed_rows, int64_t kv_tokens, bool writes_partial) {
  check_device(dev);
  return item_cost(dev, shape, tile, packed_rows, kv_tokens, writes_partial ? packed_rows : 0);
}

double estimate_plan_us(const DeviceInfo& dev, const Plan& plan) {
  check_device(dev);
  const PlanShape& s = plan.shape;
  const int64_t group = s.group();
  const int64_t kv_heads = s.num_kv_heads;
  std::vector<double> cta_us;
  cta_us.reserve(plan.items.size());
  double total_bytes = 0, total_flops = 0;
  bool used_class[kNumTileClasses] = {false, false, false};
  for (const WorkItem& it : plan.items) {
    int64_t partial = 0;
    for (int32_t r = 0; r < it.num_rows; ++r)
      partial += plan.rows[it.row_begin + r].slot != kFinalOutput;
    const ItemCost c =
        item_cost(dev, s, it.tile, it.num_rows * group, it.kv_tokens, partial * group);
    cta_us.push_back(c.us);
    total_bytes += c.bytes * kv_heads;
    total_flops += c.flops * kv_heads;
    used_class[static_cast<int>(it.tile)] = true;
  }
  // LPT: every item contributes kv_heads identical CTAs.
  std::sort(cta_us.begin(), cta_us.end(), std::greater<double>());
  const int64_t nslots = static_cast<int64_t>(dev.num_sms) * dev.ctas_per_sm;
  std::priority_queue<double, std::vector<double>, std::greater<double>> heap;
  double makespan = 0;
  for (const double us : cta_us) {
    for (int64_t h = 0; h < kv_heads; ++h) {
      double start = 0;
      if (static_cast<int64_t>(heap.size()) == nslots) {
        start = heap.top();
        heap.pop();
      }
      heap.push(start + us);
      makespan = std::max(makespan, start + us);
    }
  }
  const double bw = dev.hbm_read_GBps * 1e3;                     // bytes per us
  const double rate = dev.tc_TFLOPs * 1e6 * dev.mma_efficiency;  // FLOPs per us
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

}  // namespace treeattn
