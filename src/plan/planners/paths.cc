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
//
// Planner `paths-split` (ours): the same groups, each group's tokens (its nodes in preorder) cut
// into near-equal KV pieces, an item each over the group's rows that see some of its tokens (the
// masks renumbered to those rows); queries with rows in several pieces write partials that the
// merge combines. The piece length spreads the cut's KV over 1/2, 1, 2 or 4 waves of the device's
// CTA slots, the cheapest under the model, at each k it tries. It reads a shared node once per
// group like paths, but over as many CTAs as the device has slots, where paths has one per group.
//
// Under auto, the search (PathsSearch) gets the cost its plan has to get below (PlannerSearch): it
// skips cuts whose KV read or summary already passes that bound, and leaves its choice, which
// auto's full build of the winner replays instead of searching again. The choice below the bound
// is the one the search makes without it.
#include <algorithm>
#include <bitset>
#include <cmath>
#include <limits>
#include <vector>

#include "plan_builder.h"
#include "planner_util.h"
#include "planners.h"

namespace treeattn::planners {
namespace {

class PathGrouper {
  /// A node of a group's paths (PathGrouper::load, emit).
  struct GroupNode {
    int32_t v = 0, tokens = 0;
    uint64_t bits = 0;  ///< the group's rows whose path holds v
    bool priv = false;  ///< only the group's queries use v
  };

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

  /// Loads a cut's groups (`starts`, as cut() gives them; kept until a call with another cut):
  /// each group's KV tokens (its nodes counted once) and, while their count stays within
  /// kCachedNodesPerTreeNode x the tree's nodes and queries (deep trees cut into small groups
  /// repeat their shared paths in every group), each group's nodes in preorder, with the bits of
  /// the rows whose path holds each and whether only the group reads it; past that, emit() collects
  /// each group again.
  void load(const std::vector<int32_t>& starts) {
    if (starts == loaded_) return;
    loaded_ = starts;
    seg_.clear();
    group_end_.clear();
    group_tokens_.clear();
    total_tokens_ = 0;
    const size_t cap = kCachedNodesPerTreeNode * (tree_.nodes.size() + order_.size());
    cached_ = true;
    for (size_t g = 0; g + 1 < starts.size(); ++g) {
      collect(starts[g], starts[g + 1]);
      int64_t t = 0;
      for (const int32_t v : nodes_) t += tree_.nodes[v].tokens;
      group_tokens_.push_back(t);
      total_tokens_ += t;
      cached_ = cached_ && seg_.size() + nodes_.size() <= cap;
      if (!cached_) continue;
      append_collected(&seg_);
      group_end_.push_back(seg_.size());
    }
    if (!cached_) seg_ = std::vector<GroupNode>();
  }
  /// The loaded cut's groups' KV tokens, and their sum.
  const std::vector<int64_t>& group_tokens() const { return group_tokens_; }
  int64_t total_tokens() const { return total_tokens_; }

  /// Emits the items of a cut's groups into `b` (loading the cut): one item a group when
  /// `piece_tokens` is 0, else each group's tokens cut into near-equal KV pieces of at most
  /// `piece_tokens`, an item each over the rows that see some of its tokens.
  void emit(const std::vector<int32_t>& starts, int64_t piece_tokens, PlanBuilder* b) {
    load(starts);
    for (size_t g = 0; g + 1 < starts.size(); ++g) {
      const int32_t g0 = starts[g], g1 = starts[g + 1];
      const GroupNode* nodes = seg_.data();
      size_t n = 0;
      if (cached_) {
        nodes += g == 0 ? 0 : group_end_[g - 1];
        n = group_end_[g] - (g == 0 ? 0 : group_end_[g - 1]);
      } else {  // collected again, into one group's buffer
        collect(g0, g1);
        one_group_.clear();
        append_collected(&one_group_);
        nodes = one_group_.data();
        n = one_group_.size();
      }
      // a whole group is one piece, over all its rows
      const int64_t total = group_tokens_[g];
      const KvPieces pieces =
          split_pieces(total, piece_tokens > 0 ? pieces_at_most(total, piece_tokens) : 1);
      size_t j = 0;     // the first node that reaches into the current piece
      int64_t pos = 0;  // its first token's position in the group's concatenation
      for (int32_t p = 0; p < pieces.parts; ++p) {
        const int64_t pb = pieces.begin(p), pe = pieces.begin(p + 1);
        while (pos + nodes[j].tokens <= pb) pos += nodes[j++].tokens;
        uint64_t present = 0;  // the group's rows that see some token of the piece
        for (size_t i = j, at = pos; i < n && static_cast<int64_t>(at) < pe;
             at += nodes[i++].tokens)
          present |= nodes[i].bits;
        rows_.clear();
        for (uint64_t m = present; m != 0; m &= m - 1)
          rows_.push_back(order_[g0 + __builtin_ctzll(m)]);
        b->begin_item();
        b->add_rows(rows_.data(), static_cast<int32_t>(rows_.size()));
        int64_t priv = 0, at = pos;  // priv: tokens of nodes whose every query is in the group
        for (size_t i = j; i < n && at < pe; at += nodes[i++].tokens) {
          const int64_t b0 = std::max(pb, at), b1 = std::min(pe, at + nodes[i].tokens);
          b->add_masked_range(nodes[i].v, static_cast<int32_t>(b0 - at),
                              static_cast<int32_t>(b1 - at), compress(nodes[i].bits, present));
          if (nodes[i].priv) priv += b1 - b0;
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
  /// Appends collect()'s nodes, with their tokens, bits and whether only the group reads them.
  void append_collected(std::vector<GroupNode>* out) const {
    for (const int32_t v : nodes_)
      out->push_back(GroupNode{v, tree_.nodes[v].tokens, bits_[v], group_private(v)});
  }
  /// The bits of `mask` at the positions of the set bits of `present`, packed from bit 0 (row r of
  /// the group -> its position among the present rows).
  static uint64_t compress(uint64_t mask, uint64_t present) {
    if ((present & (present + 1)) == 0) return mask & present;  // rows 0 .. r: no gaps
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
  /// The loaded cut (load()): its starts, its groups' nodes (group g's end at group_end_[g]) and
  /// KV tokens.
  static constexpr size_t kCachedNodesPerTreeNode = 8;
  std::vector<int32_t> loaded_;
  bool cached_ = false;
  std::vector<GroupNode> seg_, one_group_;
  std::vector<size_t> group_end_;
  std::vector<int64_t> group_tokens_;
  int64_t total_tokens_ = 0;
  std::vector<int32_t> path_;  ///< cut's walk: from a root to here, nodes with queries below
  int64_t epoch_ = 0;
};

/// The paths planners' search (plan_paths): the group size k, plain or aligned cut, and (split)
/// the piece length, each cut priced by cost-only builders.
class PathsSearch {
 public:
  PathsSearch(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts, bool split)
      : tree_(tree),
        opts_(opts),
        shape_(plan_shape(tree, opts)),
        split_(split),
        slots_(device_slots(opts.device)),
        grouper_(tree, index) {}

  PathGrouper& grouper() { return grouper_; }

  /// The choice of the search without a bound, when its cost is below `bound`
  /// (PlannerSearch::bound_us; `chosen` set). Otherwise, when that choice costs at least
  /// `bound`: one of its candidates, which costs at least as much (`chosen` false), or nothing
  /// (`group` 0) where telling so takes the unbounded search (search(inf) then).
  ///
  /// k: the caller's, or the cheapest plain cut under the cost model of 1, 2, 4, ... up to the
  /// cap; then that k's aligned cut where its groups differ and the model finds it cheaper. (The
  /// aligned cuts of the other k are not candidates: fewer, larger masked groups that the model
  /// prices too low, measured slower on the DeFT set's tree-of-thought lines, bench/NOTES.md.)
  /// A bound changes which cuts are priced in full, never the choice below it: a cut whose KV
  /// read (kv_read_floor_us) or summary (the builder's prune) already passes it is not ranked.
  PlannerSearch search(double bound) {
    PlannerSearch out;
    std::vector<int32_t> plain, trial, aligned;  // the plain cut of the chosen k, and its aligned
    int32_t k = opts_.paths_group > 0 ? fixed_paths_group(opts_) : 0;
    const bool search_k = k == 0;  // the search prices plain_us; a caller's k is priced below
    double plain_us = bound;       // the chosen plain cut's cost once below the bound
    int64_t piece = 0, trial_piece = 0;
    if (search_k) {
      const int32_t cap = max_queries_per_item(opts_, /*masked=*/true);
      // The cap's cut first: a size whose cut reads more KV than the cap's costs in all
      // (kv_read_floor_us), or than the bound, is not the cheapest below the bound, and is
      // skipped without summarizing its items.
      grouper_.cut(cap, /*aligned=*/false, &trial);
      int64_t cap_piece = 0;
      const double cap_us = cost(trial, bound, &cap_piece);
      for (const int32_t c : group_sizes(cap)) {
        grouper_.cut(c, /*aligned=*/false, &trial);
        double us = cap_us;
        trial_piece = cap_piece;
        if (c != cap) {
          if (kv_floor_us(trial) > std::min(cap_us, bound)) continue;
          us = cost(trial, plain_us, &trial_piece);
        }
        if (us < plain_us) {
          plain_us = us;
          k = c;
          piece = trial_piece;
          plain.swap(trial);
        }
      }
      if (k == 0) {
        // No plain cut below the bound. The unbounded search takes the aligned cut of its
        // cheapest plain cut's k where cheaper; unless no k's aligned cut gets below the bound,
        // only that search can tell which.
        for (const int32_t c : group_sizes(cap)) {
          grouper_.cut(c, /*aligned=*/false, &plain);
          grouper_.cut(c, /*aligned=*/true, &aligned);
          if (aligned != plain && kv_floor_us(aligned) <= bound &&
              cost(aligned, bound, &trial_piece) < bound)
            return out;
        }
        out.group = cap;  // the cap's plain cut: one of the candidates, at least the bound
        out.piece_tokens = cap_piece;
        return out;
      }
    } else {
      grouper_.cut(k, /*aligned=*/false, &plain);
    }
    // A caller's k without a bound is chosen whatever it costs; its pieces still need pricing.
    const bool unbounded = std::isinf(bound);
    grouper_.cut(k, /*aligned=*/true, &aligned);
    if (aligned != plain) {
      if (!search_k) plain_us = cost(plain, bound, &piece);
      const double limit = std::min(plain_us, bound);
      out.aligned = cost(aligned, limit, &trial_piece) < limit;
      if (out.aligned) piece = trial_piece;
    } else if (!search_k && (split_ || !unbounded)) {
      plain_us = cost(plain, bound, &piece);
    }
    out.group = k;
    out.piece_tokens = piece;
    out.chosen = unbounded || out.aligned || plain_us < bound;
    return out;
  }

 private:
  /// The group sizes the search tries: 1, 2, 4, ... up to `cap`, which ends the list.
  static std::vector<int32_t> group_sizes(int32_t cap) {
    std::vector<int32_t> out;
    for (int32_t c = 1; c < cap; c *= 2) out.push_back(c);
    out.push_back(cap);
    return out;
  }
  /// kv_read_floor_us of a cut's KV tokens (loading the cut): no plan of it costs less.
  double kv_floor_us(const std::vector<int32_t>& cut) {
    grouper_.load(cut);
    return kv_read_floor_us(opts_.device, shape_, grouper_.total_tokens());
  }
  /// A cut's cost: whole groups, or (split) the cheapest of its groups cut into pieces of at most
  /// the tokens that spread its KV over 1/2, 1, 2 or 4 waves of the device's CTA slots (multiples
  /// of 64 tokens, at least 64). Below `prune`, the cost and, in `piece`, that length (0: whole
  /// groups); otherwise a value of at least `prune` and the first length tried.
  double cost(const std::vector<int32_t>& starts, double prune, int64_t* piece) {
    const auto one = [&](int64_t piece_tokens, double bound) {
      PlanBuilder b(tree_, opts_, shape_, split_ ? "paths-split" : "paths",
                    PlanBuilder::Mode::kCostOnly);
      grouper_.emit(starts, piece_tokens, &b);
      return b.cost_us(opts_.device, bound);
    };
    *piece = 0;
    if (!split_) return one(0, prune);
    grouper_.load(starts);
    const int64_t work = grouper_.total_tokens() * opts_.num_kv_heads;
    double best = prune;
    parts_.clear();
    static constexpr double kWaves[] = {0.5, 1.0, 2.0, 4.0};
    for (const double w : kWaves) {
      const int64_t len = std::max<int64_t>(
          64, 64 * ceil_div(static_cast<int64_t>(work / (w * static_cast<double>(slots_))), 64));
      // a length that cuts every group into as many pieces as the previous one makes its plan
      next_parts_.clear();
      for (const int64_t t : grouper_.group_tokens())
        next_parts_.push_back(split_pieces(t, pieces_at_most(t, len)).parts);
      if (next_parts_ == parts_) continue;
      parts_.swap(next_parts_);
      if (*piece == 0) *piece = len;
      const double us = one(len, best);
      if (us < best) {
        best = us;
        *piece = len;
      }
    }
    return best;
  }

  const PrefixTree& tree_;
  const PlanOptions& opts_;
  const PlanShape shape_;
  const bool split_;
  const int64_t slots_;
  PathGrouper grouper_;
  std::vector<int32_t> parts_, next_parts_;  ///< cost(): pieces per group, previous and next length
};

/// The paths planners: `split` cuts each group into KV pieces (paths_split), else one item a group
/// (paths). A builder that holds a search's choice (auto's full build of the winner) builds it;
/// otherwise the search runs under the builder's bound and leaves its choice there.
void plan_paths(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts, bool split,
                PlanBuilder* b) {
  PathsSearch s(tree, index, opts, split);
  PlannerSearch& choice = b->search();
  if (!choice.chosen) {
    choice = s.search(choice.bound_us);
    if (choice.group == 0) choice = s.search(std::numeric_limits<double>::infinity());
  }
  std::vector<int32_t> cut;
  s.grouper().cut(choice.group, choice.aligned, &cut);
  s.grouper().emit(cut, choice.piece_tokens, b);
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
