// check_coverage(): the planner invariant checked against the tree. Every (query, token of its
// root path) pair must be seen exactly once by the plan's rows, nothing else may be seen, and
// every query's output must be produced exactly once (validate_plan() covers rows, slots and
// merge lists).
//
// Method, in intervals rather than tokens: each range is mapped back to an interval of its node's
// tokens by locating its first page in the node's page list and checking every page it spans
// against the node's pages (so a range that points at the wrong pages fails); then each row
// contributes the intervals of the ranges it sees (honouring masks) to its query; per query the
// intervals, sorted by (node, begin), must tile [0, tokens) of exactly the nodes on its path.
#include "treeattn/plan/coverage.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "treeattn/common/error.h"

namespace treeattn {
namespace {

struct Interval {
  int32_t node, begin, end;
  bool operator<(const Interval& o) const {
    return node != o.node ? node < o.node : begin != o.begin ? begin < o.begin : end < o.end;
  }
};

}  // namespace

void check_coverage(const PrefixTree& tree, const Plan& plan) {
  validate_plan(plan);
  const int32_t nq = tree.num_queries();
  TA_CHECK_INTERNAL(plan.shape.num_queries == nq, "plan has ", plan.shape.num_queries,
                    " queries, tree has ", nq);
  TA_CHECK_INTERNAL(plan.shape.page_size == tree.page_size, "plan page size ", plan.shape.page_size,
                    " != tree page size ", tree.page_size);
  const int32_t P = tree.page_size;
  const int32_t nnodes = static_cast<int32_t>(tree.nodes.size());

  // Range -> node token interval, each range resolved once.
  std::vector<std::unordered_map<int32_t, int32_t>> page_index(nnodes);  // lazily built
  std::vector<char> indexed(nnodes, 0);
  std::vector<Interval> range_iv(plan.ranges.size());
  for (size_t r = 0; r < plan.ranges.size(); ++r) {
    const KvRange& g = plan.ranges[r];
    TA_CHECK_INTERNAL(g.node >= 0 && g.node < nnodes && tree.nodes[g.node].alive, "range ", r,
                      " names node ", g.node, " which is not a live node");
    const TreeNode& n = tree.nodes[g.node];
    if (!indexed[g.node]) {
      indexed[g.node] = 1;
      for (size_t k = n.pages.size(); k-- > 0;)
        page_index[g.node][n.pages[k]] = static_cast<int32_t>(k);
    }
    const auto hit = page_index[g.node].find(plan.page_ids[g.page_begin]);
    TA_CHECK_INTERNAL(hit != page_index[g.node].end(), "range ", r, " starts in page ",
                      plan.page_ids[g.page_begin], " which node ", g.node, " does not hold");
    const int64_t k = hit->second;
    const int64_t j0 = k * P + g.page_offset - n.page_offset;
    TA_CHECK_INTERNAL(j0 >= 0 && j0 + g.len <= n.tokens, "range ", r, " covers tokens [", j0, ", ",
                      j0 + g.len, ") outside node ", g.node, " (", n.tokens, " tokens)");
    const int64_t span = (static_cast<int64_t>(g.page_offset) + g.len + P - 1) / P;
    for (int64_t t = 0; t < span; ++t)
      TA_CHECK_INTERNAL(plan.page_ids[g.page_begin + t] == n.pages[k + t], "range ", r, " page ", t,
                        " is ", plan.page_ids[g.page_begin + t], ", node ", g.node, " has page ",
                        n.pages[k + t], " there");
    range_iv[r] = Interval{g.node, static_cast<int32_t>(j0), static_cast<int32_t>(j0 + g.len)};
  }

  // Per-query interval lists (CSR: count, then fill).
  std::vector<int64_t> start(nq + 1, 0);
  auto for_each_seen = [&](auto&& fn) {
    for (const WorkItem& it : plan.items)
      for (int32_t r = 0; r < it.num_rows; ++r) {
        const int32_t q = plan.rows[it.row_begin + r].query;
        for (int32_t j = 0; j < it.num_ranges; ++j) {
          if (it.mask_begin >= 0 && !((plan.masks[it.mask_begin + j] >> r) & 1ull)) continue;
          fn(q, it.range_begin + j);
        }
      }
  };
  for_each_seen([&](int32_t q, int32_t) { ++start[q + 1]; });
  for (int32_t q = 0; q < nq; ++q) start[q + 1] += start[q];
  std::vector<Interval> ivs(start[nq]);
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for_each_seen([&](int32_t q, int32_t rg) { ivs[fill[q]++] = range_iv[rg]; });

  std::vector<int32_t> path;
  for (int32_t q = 0; q < nq; ++q) {
    path = query_path(tree, q);
    std::sort(path.begin(), path.end());
    std::sort(ivs.begin() + start[q], ivs.begin() + start[q + 1]);
    int64_t i = start[q];
    for (const int32_t n : path) {
      int32_t cursor = 0;
      for (; i < start[q + 1] && ivs[i].node < n; ++i)
        TA_CHECK_INTERNAL(false, "query ", q, " sees tokens [", ivs[i].begin, ", ", ivs[i].end,
                          ") of node ", ivs[i].node, " which is not on its path");
      for (; i < start[q + 1] && ivs[i].node == n; ++i) {
        TA_CHECK_INTERNAL(ivs[i].begin <= cursor, "query ", q, " misses tokens [", cursor, ", ",
                          ivs[i].begin, ") of node ", n);
        TA_CHECK_INTERNAL(ivs[i].begin >= cursor, "query ", q, " sees tokens [", ivs[i].begin, ", ",
                          std::min(cursor, ivs[i].end), ") of node ", n, " more than once");
        cursor = ivs[i].end;
      }
      TA_CHECK_INTERNAL(cursor == tree.nodes[n].tokens, "query ", q, " misses tokens [", cursor,
                        ", ", tree.nodes[n].tokens, ") of node ", n);
    }
    TA_CHECK_INTERNAL(i == start[q + 1], "query ", q, " sees tokens of node ", ivs[i].node,
                      " which is not on its path");
  }
}

}  // namespace treeattn
