// Planner `query`: query-centric decoding (FlashDecoding-style). One work item per query over its
// whole root path, so shared prefixes are read once per query. When num_queries x num_kv_heads
// CTAs would fill less than two waves of the device (num_sms x ctas_per_sm slots per wave), each
// query's KV is split into up to k equal chunks (k = ceil(2 waves / CTAs), every chunk >= 256
// tokens; a chunk may start or end mid-node) whose partials the merge combines. graph_reserve()
// bounds this planner's plans (the serving core's fallback under CUDA graphs).
#include <algorithm>

#include "plan_builder.h"
#include "planner_util.h"
#include "planners.h"
#include "treeattn/common/error.h"
#include "treeattn/plan/layout.h"
#include "treeattn/plan/planner.h"

namespace treeattn::planners {

constexpr int64_t kMinChunkTokens = 256;
constexpr int64_t kTargetWaves = 2;

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

namespace treeattn {

LayoutReserve graph_reserve(const PlanOptions& opts, int64_t rows, int64_t pages_per_row,
                            int32_t page_size) {
  TA_CHECK_ARG(rows >= 1, "rows", "must be >= 1, got ", rows);
  TA_CHECK_ARG(pages_per_row >= 1, "pages_per_row", "must be >= 1, got ", pages_per_row);
  TA_CHECK_ARG(page_size >= 1, "page_size", "must be >= 1, got ", page_size);
  constexpr int64_t kCap = 2147483647;
  // every capacity below stays <= 2^31-1 (int32 device indices): rows x 8 rows and slots, and
  // rows x pages_per_row page entries
  TA_CHECK_ARG(rows <= kCap / kGraphRowsPerQuery, "rows", rows, " rows need ", kGraphRowsPerQuery,
               " plan rows each, above 2^31-1 in all");
  TA_CHECK_ARG(pages_per_row <= kCap / rows, "pages_per_row", rows, " rows x ", pages_per_row,
               " pages exceed 2^31-1 page entries");
  const int64_t kv_heads = opts.num_kv_heads;
  const int64_t target =
      planners::kTargetWaves * static_cast<int64_t>(opts.device.num_sms) * opts.device.ctas_per_sm;
  // query(): k_q = max(1, min(ceil(target / (nq kv_heads)), ctx_q / 256)) items per query, so
  // sum k_q <= nq + ceil(target / kv_heads) and <= nq * max(1, tokens / 256)
  const double tokens = static_cast<double>(pages_per_row) * page_size;
  const int64_t per_query = std::max<int64_t>(
      1, static_cast<int64_t>(std::min(tokens / planners::kMinChunkTokens, 1e12)));
  const int64_t items =
      std::min<double>(static_cast<double>(rows) * per_query,
                       static_cast<double>(rows + (target + kv_heads - 1) / kv_heads));
  // a query's chunks list its path's nodes (<= pages) once, plus one more range and page per
  // chunk boundary inside a node
  const double entries = static_cast<double>(rows) * pages_per_row + items;
  TA_CHECK_ARG(entries <= kCap, "pages_per_row", "the reserve needs ", entries,
               " page entries, above 2^31-1");
  LayoutReserve r;
  const int c = static_cast<int>(
      tile_class_for_rows(opts.num_qo_heads / opts.num_kv_heads));  // one query's packed rows
  // a grouped item packs more than 16 rows (queries x group): none when all rows fit 16, none
  // of kM128 when they fit 64
  const int64_t packed = rows * (opts.num_qo_heads / opts.num_kv_heads);
  const int64_t grouped = kGraphWaves * ((opts.device.num_sms + kv_heads - 1) / kv_heads);
  r.class_items[1] = packed > 16 ? grouped : 0;
  r.class_items[2] = packed > 64 ? grouped : 0;
  r.class_items[c] = std::max({r.class_items[c], items, rows * kGraphItemsPerQuery});
  const int64_t budget = std::max<int64_t>(items, rows * kGraphRowsPerQuery);
  r.rows = budget;
  r.slots = budget;
  r.ranges = static_cast<int64_t>(entries);
  r.page_ids = static_cast<int64_t>(entries);
  r.masks = 0;
  r.queries = rows;
  return r;
}

}  // namespace treeattn
