// DeFT-Flatten: the tree's KV flattened depth-first (preorder, so a subtree's KV is contiguous
// and a block's queries are few) and cut into equal blocks of even_block_tokens() tokens; a block
// holds slices of one or more nodes. Its queries are the union of the queries below those nodes,
// in chunks of at most kMaxMaskedRows rows (and 128 packed rows), one item per chunk over the
// whole block, with a bit mask per (item, slice) saying which rows see that slice (DeFT's
// KV-guided bit causal mask). Blocks whose queries all see every slice carry no mask.
// A block's ranges are its slices x its query chunks, which grows as slices x queries on wide
// trees (many one-token leaves under a shared root): flatten_fits() counts them first (stopping
// once over kMaxFlattenRanges) and flatten refuses such trees; auto leaves flatten out for them.
#include <algorithm>
#include <limits>
#include <vector>

#include "planner_util.h"
#include "planners.h"
#include "treeattn/common/error.h"

namespace treeattn::planners {
namespace {

class Flattener {
 public:
  Flattener(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts, PlanBuilder* b)
      : tree_(tree),
        index_(index),
        b_(b),
        cap_masked_(max_queries_per_item(opts, true)),
        cap_full_(max_queries_per_item(opts, false)),
        stamp_(tree.num_queries(), -1),
        pos_(tree.num_queries(), 0) {}

  /// Counting mode: flush() only counts the ranges a block would emit, up to `limit`.
  void count_only(int64_t limit) {
    count_only_ = true;
    limit_ = limit;
  }
  int64_t ranges() const { return ranges_; }

  /// Walks the used nodes in preorder, cutting their tokens into blocks of `block` tokens.
  void flatten(int32_t block) {
    int32_t fill = 0;
    for (const int32_t v : index_.preorder) {
      if (ranges_ > limit_) return;
      if (index_.queries_below(v).empty()) continue;
      const int32_t tokens = tree_.nodes[v].tokens;
      int32_t pos = 0;
      while (pos < tokens) {
        const int32_t take = std::min(block - fill, tokens - pos);
        slices_.push_back(Seg{v, pos, pos + take});
        pos += take;
        fill += take;
        if (fill == block) {
          flush();
          fill = 0;
        }
      }
    }
    if (!slices_.empty()) flush();
  }

 private:
  /// Emits the items of the current block and clears it.
  void flush() {
    ++block_id_;
    // Union of the queries below the block's nodes, in first-seen order.
    uni_.clear();
    bool all_see_all = true;
    const int64_t ns64 = static_cast<int64_t>(slices_.size());
    for (const Seg& s : slices_) {
      for (const int32_t q : index_.queries_below(s.node)) {
        if (stamp_[q] != block_id_) {
          stamp_[q] = block_id_;
          pos_[q] = static_cast<int32_t>(uni_.size());
          uni_.push_back(q);
        }
      }
      // At least slices x chunks of the queries so far (stops early on hopeless blocks).
      if (count_only_ &&
          ranges_ + ns64 * ceil_div(static_cast<int64_t>(uni_.size()), cap_full_) > limit_) {
        ranges_ = limit_ + 1;
        slices_.clear();
        return;
      }
    }
    for (const Seg& s : slices_)
      all_see_all = all_see_all && index_.queries_below(s.node).size() == uni_.size();
    const int32_t nq = static_cast<int32_t>(uni_.size());
    if (count_only_) {
      ranges_ += ns64 * ceil_div(static_cast<int64_t>(nq), all_see_all ? cap_full_ : cap_masked_);
      slices_.clear();
      return;
    }
    if (all_see_all) {
      b_->emit_group(uni_.data(), nq, slices_.data(), static_cast<int32_t>(slices_.size()),
                     cap_full_, 1);
    } else {
      const int32_t cap = cap_masked_;
      const int32_t chunks = static_cast<int32_t>(ceil_div(nq, cap));
      const int32_t ns = static_cast<int32_t>(slices_.size());
      bits_.assign(static_cast<size_t>(ns) * chunks, 0);
      for (int32_t j = 0; j < ns; ++j)
        for (const int32_t q : index_.queries_below(slices_[j].node))
          bits_[static_cast<size_t>(j) * chunks + pos_[q] / cap] |= 1ull << (pos_[q] % cap);
      for (int32_t c = 0; c < chunks; ++c) {
        b_->begin_item();
        b_->add_rows(uni_.data() + c * cap, std::min(nq, (c + 1) * cap) - c * cap);
        for (int32_t j = 0; j < ns; ++j)
          b_->add_masked_range(slices_[j].node, slices_[j].begin, slices_[j].end,
                               bits_[static_cast<size_t>(j) * chunks + c]);
        b_->end_item();
      }
    }
    slices_.clear();
  }

  const PrefixTree& tree_;
  const TreeIndex& index_;
  PlanBuilder* b_;  // null in counting mode
  int32_t cap_masked_, cap_full_;
  std::vector<int32_t> stamp_, pos_, uni_;
  std::vector<Seg> slices_;
  std::vector<uint64_t> bits_;
  int32_t block_id_ = 0;
  bool count_only_ = false;
  int64_t ranges_ = 0, limit_ = std::numeric_limits<int64_t>::max();
};

}  // namespace

bool flatten_fits(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts) {
  const int64_t total = used_tokens(tree, index);
  const int32_t block = even_block_tokens(total, opts);
  // Quick bound: slices <= used nodes + blocks (a block edge cuts one node), chunks per block
  // <= all queries / the smaller chunk size. Only trees failing it are walked and counted.
  int64_t slices = ceil_div(total, block) + 1;
  for (const int32_t v : index.preorder) slices += !index.queries_below(v).empty();
  const int32_t cap = std::min(max_queries_per_item(opts, true), max_queries_per_item(opts, false));
  if (slices * ceil_div(static_cast<int64_t>(tree.num_queries()), cap) <= kMaxFlattenRanges)
    return true;
  Flattener f(tree, index, opts, nullptr);
  f.count_only(kMaxFlattenRanges);
  f.flatten(block);
  return f.ranges() <= kMaxFlattenRanges;
}

void flatten(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts,
             PlanBuilder* b) {
  TA_CHECK_ARG(flatten_fits(tree, index, opts), "planner",
               "flatten would emit more than kMaxFlattenRanges=", kMaxFlattenRanges,
               " KV ranges (its blocks' slices x query chunks: a wide tree of short nodes under a "
               "shared prefix); use another planner (auto leaves flatten out here)");
  Flattener f(tree, index, opts, b);
  f.flatten(even_block_tokens(used_tokens(tree, index), opts));
}

}  // namespace treeattn::planners
