// Planner `query`: query-centric decoding (FlashDecoding-style). One work item per query over its
// whole root path, so shared prefixes are read once per query. When num_queries x num_kv_heads
// CTAs would fill less than two waves of the device (num_sms x ctas_per_sm slots per wave), each
// query's KV is split into up to k equal chunks (k = ceil(2 waves / CTAs), every chunk >= 256
// tokens; a chunk may start or end mid-node) whose partials the merge combines.
#include <algorithm>

#include "plan_builder.h"
#include "planner_util.h"
#include "planners.h"

namespace treeattn::planners {

namespace {
constexpr int64_t kMinChunkTokens = 256;
constexpr int64_t kTargetWaves = 2;
}  // namespace

void query(const PrefixTree& tree, const TreeIndex& /*index*/, const PlanOptions& opts,
           PlanBuilder* b) {
  const int64_t nq = tree.num_queries();
  const int64_t ctas = nq * opts.num_kv_heads;
  const int64_t target =
      kTargetWaves * static_cast<int64_t>(opts.device.num_sms) * opts.device.ctas_per_sm;
  const int64_t want_splits = ctas >= target ? 1 : (target + ctas - 1) / ctas;

  std::vector<int32_t> path;  // root first
  for (int32_t q = 0; q < nq; ++q) {
    path.clear();
    int64_t ctx = 0;
    for (int32_t v = tree.query_node[q]; v != kNoParent; v = tree.nodes[v].parent) {
      path.push_back(v);
      ctx += tree.nodes[v].tokens;
    }
    std::reverse(path.begin(), path.end());
    const int32_t len = static_cast<int32_t>(path.size());
    const int64_t k = std::max<int64_t>(1, std::min(want_splits, ctx / kMinChunkTokens));
    for (int64_t c = 0; c < k; ++c) {
      b->begin_item();
      b->add_row(q);
      b->add_path_ranges(path.data(), len, c * ctx / k, (c + 1) * ctx / k);
      b->end_item();
    }
  }
}

}  // namespace treeattn::planners
