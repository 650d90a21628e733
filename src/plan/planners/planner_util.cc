// Shared planner helpers (see planner_util.h): chain groups (FastTree / PAT / auto grouping), DeFT
// block sizes and device slots.
#include "planner_util.h"

#include <algorithm>

#include "treeattn/common/error.h"

namespace treeattn::planners {

int64_t device_slots(const DeviceInfo& dev) {
  return std::max<int64_t>(1, static_cast<int64_t>(dev.num_sms) * dev.ctas_per_sm);
}

int32_t even_block_tokens(int64_t total_tokens, const PlanOptions& opts) {
  const int64_t want_ctas = 2 * device_slots(opts.device);
  const int64_t blocks = std::max<int64_t>(1, ceil_div(want_ctas, std::max(1, opts.num_kv_heads)));
  const int64_t b = ceil_div(ceil_div(std::max<int64_t>(total_tokens, 1), blocks), 32) * 32;
  return static_cast<int32_t>(std::min<int64_t>(std::max<int64_t>(64, b), 1 << 30));
}

int64_t used_tokens(const PrefixTree& tree, const TreeIndex& index) {
  int64_t t = 0;
  for (const int32_t v : index.preorder)
    if (!index.queries_below(v).empty()) t += tree.nodes[v].tokens;
  return t;
}

ChainGroups chain_groups(const PrefixTree& tree, const TreeIndex& index,
                         const std::vector<char>& merged) {
  ChainGroups out;
  const int32_t n = static_cast<int32_t>(tree.nodes.size());
  const int32_t nq = tree.num_queries();
  std::vector<int32_t> top(n, -1);
  std::vector<int64_t> len(n, 0);
  out.queries.reserve(static_cast<size_t>(nq) * 2);
  out.groups.reserve(index.preorder.size());
  for (const int32_t v : index.preorder) {
    if (index.queries_below(v).empty()) continue;
    const int32_t p = tree.nodes[v].parent;
    const bool m = p != kNoParent && merged[v];
    top[v] = m ? top[p] : v;
    len[v] = (m ? len[p] : 0) + tree.nodes[v].tokens;
    ChainGroups::Group g;
    g.node = v;
    g.top = top[v];
    g.len = len[v];
    g.q_begin = static_cast<int32_t>(out.queries.size());
    // Element-wise appends: the spans are mostly short (often one leaf query), where a range
    // insert's fixed cost dominates (measured faster on both short and long spans here).
    for (const int32_t q : index.own_queries(v)) out.queries.push_back(q);
    for (const int32_t c : index.children(v))
      if (!merged[c])
        for (const int32_t q : index.queries_below(c)) out.queries.push_back(q);
    g.q_end = static_cast<int32_t>(out.queries.size());
    if (g.q_end > g.q_begin) out.groups.push_back(g);
  }
  return out;
}

}  // namespace treeattn::planners
