// Planner `paths` (ours): groups of queries over the union of their root paths, with no partials
// and no merge. The queries are taken in the tree's preorder (a subtree's queries are adjacent)
// and cut into groups of k consecutive ones; each group is one item whose ranges are the nodes on
// any of its queries' paths, in preorder, each seen only by the rows whose path holds it (DeFT's
// bit mask, over whole root paths). A node the group shares is read once per group instead of
// once per query, and each row's whole context is in its item, so every row writes its final
// output: the call is one launch. k is the cheapest under the cost model (cost-only builders) of
// 1, 2, 4, ... up to the masked items' query cap, or PlanOptions::paths_group (lowered to the
// cap) where the caller fixes it; k = 1 is the query plan without its KV splits.
#include <algorithm>
#include <bitset>
#include <limits>
#include <vector>

#include "plan_builder.h"
#include "planner_util.h"
#include "planners.h"

namespace treeattn::planners {
namespace {

class PathGrouper {
 public:
  PathGrouper(const PrefixTree& tree, const TreeIndex& index)
      : tree_(tree),
        index_(index),
        pre_pos_(tree.nodes.size(), 0),
        stamp_(tree.nodes.size(), -1),
        bits_(tree.nodes.size(), 0) {
    order_.reserve(static_cast<size_t>(tree.num_queries()));
    for (size_t i = 0; i < index.preorder.size(); ++i) {
      const int32_t v = index.preorder[i];
      pre_pos_[v] = static_cast<int32_t>(i);
      for (const int32_t q : index.own_queries(v)) order_.push_back(q);
    }
  }

  /// Emits the items of groups of `k` queries into `b`.
  void emit(int32_t k, PlanBuilder* b) {
    const int32_t nq = static_cast<int32_t>(order_.size());
    for (int32_t g0 = 0; g0 < nq; g0 += k) {
      const int32_t g1 = std::min(nq, g0 + k);
      ++epoch_;
      nodes_.clear();
      for (int32_t i = g0; i < g1; ++i) {
        const uint64_t bit = 1ull << (i - g0);
        for (int32_t v = tree_.query_node[order_[i]]; v != kNoParent; v = tree_.nodes[v].parent) {
          if (stamp_[v] != epoch_) {
            stamp_[v] = epoch_;
            bits_[v] = 0;
            nodes_.push_back(v);
          }
          bits_[v] |= bit;
        }
      }
      std::sort(nodes_.begin(), nodes_.end(),
                [this](int32_t a, int32_t c) { return pre_pos_[a] < pre_pos_[c]; });
      b->begin_item();
      b->add_rows(order_.data() + g0, g1 - g0);
      int32_t priv = 0;  // tokens of the nodes whose every query is in this group (<= kv_tokens)
      for (const int32_t v : nodes_) {
        b->add_masked_range(v, 0, tree_.nodes[v].tokens, bits_[v]);
        if (std::bitset<64>(bits_[v]).count() == index_.queries_below(v).size())
          priv += tree_.nodes[v].tokens;
      }
      b->mark_whole_paths(priv);
      b->end_item();
    }
  }

 private:
  const PrefixTree& tree_;
  const TreeIndex& index_;
  std::vector<int32_t> order_;    ///< queries in the preorder of their nodes
  std::vector<int32_t> pre_pos_;  ///< node -> its position in the preorder
  std::vector<int64_t> stamp_;    ///< node -> the last group that reached it
  std::vector<uint64_t> bits_;    ///< node -> the group's rows whose path holds it
  std::vector<int32_t> nodes_;    ///< the current group's nodes
  int64_t epoch_ = 0;
};

}  // namespace

void paths(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts,
           PlanBuilder* b) {
  PathGrouper grouper(tree, index);
  if (opts.paths_group > 0) {
    grouper.emit(fixed_paths_group(opts), b);
    return;
  }
  const int32_t cap = max_queries_per_item(opts, /*masked=*/true);
  const PlanShape shape = plan_shape(tree, opts);
  int32_t best_k = 1;
  double best_us = std::numeric_limits<double>::infinity();
  for (int32_t k = 1;; k = std::min(cap, 2 * k)) {
    PlanBuilder cost(tree, opts, shape, "paths", PlanBuilder::Mode::kCostOnly);
    grouper.emit(k, &cost);
    const double us = cost.cost_us(opts.device, best_us);
    if (us < best_us) {
      best_us = us;
      best_k = k;
    }
    if (k == cap) break;
  }
  grouper.emit(best_k, b);
}

}  // namespace treeattn::planners
