// Planner `paths` (ours): groups of queries over the union of their root paths, with no partials
// and no merge. The queries are taken in the tree's preorder (a subtree's queries are adjacent)
// and cut into groups of at most k consecutive ones (PathGrouper::cut): plain, k at a time, or
// aligned, which also starts a group before a subtree of more than k queries where the open group
// holds queries of a subtree already left. Each group is one item whose ranges are the nodes on
// any of its queries' paths, in preorder, each seen only by the rows whose path holds it (DeFT's
// bit mask, over whole root paths). A node the group shares is read once per group instead of
// once per query, and each row's whole context is in its item, so every row writes its final
// output: the call is one launch. k is the caller's (PlanOptions::paths_group, lowered to the
// masked items' query cap) or the cheapest plain cut under the cost model (cost-only builders) of
// 1, 2, 4, ... up to the cap; at that k the aligned cut replaces the plain one where it differs and
// the model finds it cheaper. k = 1 is the query plan without its KV splits.
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

  /// Cuts the queries, in preorder, into groups of at most `k`: `starts` gets the groups' first
  /// positions in the preorder of the queries, then their count. A new group where the open one
  /// is full and, when `aligned`, before a subtree of more than k queries where the open
  /// group holds queries of a subtree already left (queries at the subtree's ancestors, on its
  /// path, it may join): then a group does not hold the tail of one large subtree and the head of
  /// the next, which read two sets of nodes each seen by part of the rows.
  void cut(int32_t k, bool aligned, std::vector<int32_t>* starts) {
    const int32_t nq = static_cast<int32_t>(order_.size());
    starts->clear();
    path_.clear();
    int32_t pos = 0, cur = 0;  // queries placed; of them, in the open group
    int32_t done_end = 0;      // the end of the queries of the subtrees already left
    const auto open = [&] {
      starts->push_back(pos);
      cur = 0;
    };
    for (const int32_t v : index_.preorder) {
      const int64_t below = static_cast<int64_t>(index_.queries_below(v).size());
      if (below == 0) continue;
      // leave the subtrees that v is not in (the nodes on the stack hold queries)
      while (!path_.empty() && path_.back() != tree_.nodes[v].parent) {
        path_.pop_back();
        done_end = pos;
      }
      path_.push_back(v);
      if (aligned && cur > 0 && below > k && done_end > starts->back()) open();
      for (size_t j = 0; j < index_.own_queries(v).size(); ++j, ++pos, ++cur)
        if (cur == k || pos == 0) open();
    }
    starts->push_back(nq);
  }

  /// The KV tokens of each of a cut's groups (its nodes counted once) into `tokens`; returns their
  /// sum.
  int64_t tokens(const std::vector<int32_t>& starts, std::vector<int64_t>* tokens) {
    tokens->clear();
    int64_t total = 0;
    for (size_t g = 0; g + 1 < starts.size(); ++g) {
      collect(starts[g], starts[g + 1]);
      int64_t t = 0;
      for (const int32_t v : nodes_) t += tree_.nodes[v].tokens;
      tokens->push_back(t);
      total += t;
    }
    return total;
  }

  /// Emits the items of a cut's groups (`starts`, as cut() gives them) into `b`: one item a group
  /// when `piece_tokens` is 0, else each group's tokens cut into near-equal KV pieces of at most
  /// `piece_tokens`, an item each over the rows that see some of its tokens.
  void emit(const std::vector<int32_t>& starts, int64_t piece_tokens, PlanBuilder* b) {
    for (size_t g = 0; g + 1 < starts.size(); ++g) {
      const int32_t g0 = starts[g], g1 = starts[g + 1];
      collect(g0, g1);
      if (piece_tokens <= 0) {
        b->begin_item();
        b->add_rows(order_.data() + g0, g1 - g0);
        int32_t priv = 0;  // tokens of the nodes whose every query is in this group
        for (const int32_t v : nodes_) {
          b->add_masked_range(v, 0, tree_.nodes[v].tokens, bits_[v]);
          if (group_private(v)) priv += tree_.nodes[v].tokens;
        }
        b->mark_path_masks(priv);
        b->end_item();
        continue;
      }
      int64_t total = 0;
      for (const int32_t v : nodes_) total += tree_.nodes[v].tokens;
      const KvPieces pieces = split_pieces(total, pieces_at_most(total, piece_tokens));
      size_t j = 0;     // the first node that reaches into the current piece
      int64_t pos = 0;  // its first token's position in the group's concatenation
      for (int32_t p = 0; p < pieces.parts; ++p) {
        const int64_t pb = pieces.begin(p), pe = pieces.begin(p + 1);
        while (pos + tree_.nodes[nodes_[j]].tokens <= pb) pos += tree_.nodes[nodes_[j++]].tokens;
        uint64_t present = 0;  // the group's rows that see some token of the piece
        for (size_t i = j, at = pos; i < nodes_.size() && static_cast<int64_t>(at) < pe;
             at += tree_.nodes[nodes_[i++]].tokens)
          present |= bits_[nodes_[i]];
        rows_.clear();
        for (uint64_t m = present; m != 0; m &= m - 1)
          rows_.push_back(order_[g0 + __builtin_ctzll(m)]);
        b->begin_item();
        b->add_rows(rows_.data(), static_cast<int32_t>(rows_.size()));
        int64_t priv = 0, at = pos;
        for (size_t i = j; i < nodes_.size() && at < pe; at += tree_.nodes[nodes_[i++]].tokens) {
          const int32_t v = nodes_[i];
          const int64_t b0 = std::max(pb, at), b1 = std::min(pe, at + tree_.nodes[v].tokens);
          b->add_masked_range(v, static_cast<int32_t>(b0 - at), static_cast<int32_t>(b1 - at),
                              compress(bits_[v], present));
          if (group_private(v)) priv += b1 - b0;
        }
        b->mark_path_masks(static_cast<int32_t>(priv));
        b->end_item();
      }
    }
  }

 private:
  /// The nodes on the paths of the group's queries [g0, g1) (in the preorder of the queries) into
  /// nodes_, in preorder, each with bits_ = the group's rows whose path holds it.
  void collect(int32_t g0, int32_t g1) {
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
  }
  /// Whether every query below node v (of the current group's nodes) is in the group: then no
  /// other group reads v.
  bool group_private(int32_t v) const {
    return std::bitset<64>(bits_[v]).count() == index_.queries_below(v).size();
  }
  /// The bits of `mask` at the positions of the set bits of `present`, packed from bit 0 (row r of
  /// the group -> its position among the present rows).
  static uint64_t compress(uint64_t mask, uint64_t present) {
    uint64_t out = 0;
    int32_t r = 0;
    for (uint64_t m = present; m != 0; m &= m - 1, ++r)
      if (mask & (m & (~m + 1))) out |= 1ull << r;
    return out;
  }

  const PrefixTree& tree_;
  const TreeIndex& index_;
  std::vector<int32_t> order_;    ///< queries in the preorder of their nodes
  std::vector<int32_t> pre_pos_;  ///< node -> its position in the preorder
  std::vector<int64_t> stamp_;    ///< node -> the last group that reached it
  std::vector<uint64_t> bits_;    ///< node -> the group's rows whose path holds it
  std::vector<int32_t> nodes_;    ///< the current group's nodes
  std::vector<int32_t> rows_;     ///< emit: the queries of the current piece
  std::vector<int32_t> path_;     ///< cut's walk: from a root to here, nodes with queries below
  int64_t epoch_ = 0;
};

}  // namespace

namespace {

/// The paths planners: `split` cuts each group into KV pieces (paths_split), else one item a group
/// (paths).
void plan_paths(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts, bool split,
                PlanBuilder* b) {
  PathGrouper grouper(tree, index);
  const PlanShape shape = plan_shape(tree, opts);
  const char* name = split ? "paths-split" : "paths";
  // A cut's cost: whole groups, or (split) the cheapest of its groups cut into pieces of at most
  // the tokens that spread its KV over 1/2, 1, 2 or 4 waves of the device's CTA slots (multiples
  // of 64 tokens, at least 64); `piece` gets that length.
  const int64_t slots = device_slots(opts.device);
  std::vector<int64_t> group_tokens;  // cost_us: the cut's groups' tokens, pieces per group
  std::vector<int32_t> parts;
  const auto cost_us = [&](const std::vector<int32_t>& starts, double prune, int64_t* piece) {
    const auto one = [&](int64_t piece_tokens, double bound) {
      PlanBuilder cost(tree, opts, shape, name, PlanBuilder::Mode::kCostOnly);
      grouper.emit(starts, piece_tokens, &cost);
      return cost.cost_us(opts.device, bound);
    };
    *piece = 0;
    if (!split) return one(0, prune);
    const int64_t work = grouper.tokens(starts, &group_tokens) * opts.num_kv_heads;
    double best = prune;
    parts.clear();
    static constexpr double kWaves[] = {0.5, 1.0, 2.0, 4.0};
    for (const double w : kWaves) {
      const int64_t len = std::max<int64_t>(
          64, 64 * ceil_div(static_cast<int64_t>(work / (w * static_cast<double>(slots))), 64));
      // a length that cuts every group into as many pieces as the previous one makes its plan
      bool same = !parts.empty();
      for (size_t g = 0; g < group_tokens.size(); ++g) {
        const int32_t n = split_pieces(group_tokens[g], pieces_at_most(group_tokens[g], len)).parts;
        if (parts.size() < group_tokens.size()) {
          parts.push_back(n);
          same = false;
        } else if (parts[g] != n) {
          parts[g] = n;
          same = false;
        }
      }
      if (same) continue;
      const double us = one(len, best);
      if (us < best) {
        best = us;
        *piece = len;
      }
    }
    return best;
  };
  // k: the caller's, or the cheapest plain cut under the cost model of 1, 2, 4, ... up to the
  // cap; then that k's aligned cut where its groups differ and the model finds it cheaper. (The
  // aligned cuts of the other k are not candidates: fewer, larger masked groups that the model
  // prices too low, measured slower on the DeFT set's tree-of-thought lines, bench/NOTES.md.)
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<int32_t> plain, aligned;  // the plain cut of the chosen k, and its aligned cut
  int32_t k = opts.paths_group > 0 ? fixed_paths_group(opts) : 0;
  double plain_us = inf;
  int64_t piece = 0, trial_piece = 0;
  if (k == 0) {
    const int32_t cap = max_queries_per_item(opts, /*masked=*/true);
    std::vector<int32_t> trial;
    for (int32_t c = 1;; c = std::min(cap, 2 * c)) {
      grouper.cut(c, /*aligned=*/false, &trial);
      const double us = cost_us(trial, plain_us, &trial_piece);
      if (us < plain_us) {
        plain_us = us;
        k = c;
        piece = trial_piece;
        plain.swap(trial);
      }
      if (c == cap) break;
    }
  } else {
    grouper.cut(k, /*aligned=*/false, &plain);
  }
  grouper.cut(k, /*aligned=*/true, &aligned);
  if (aligned != plain) {
    if (plain_us == inf) plain_us = cost_us(plain, inf, &piece);
    if (cost_us(aligned, plain_us, &trial_piece) < plain_us) {
      plain.swap(aligned);
      piece = trial_piece;
    }
  } else if (split && plain_us == inf) {
    cost_us(plain, inf, &piece);
  }
  grouper.emit(plain, piece, b);
}

}  // namespace

void paths(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts,
           PlanBuilder* b) {
  plan_paths(tree, index, opts, /*split=*/false, b);
}

void paths_split(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts,
                 PlanBuilder* b) {
  plan_paths(tree, index, opts, /*split=*/true, b);
}

}  // namespace treeattn::planners
