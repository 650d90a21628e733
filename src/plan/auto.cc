// auto (ours): choose groups, KV splits and tiles to minimise the cost model's makespan
// (estimate_plan_us on opts.device: HBM bytes unique/redundant/partial, tensor-core time with
// tile padding, per-CTA fixed cost, LPT over the CTA slots, launches and the merge pass).
//  1. Grouping, PAT's profit rule with the real cost model: nodes parent before child; node u
//     holds a chain (its KV, plus its parent's chain when u was folded into it). For each child c
//     compare, in CTA-time summed over the kv_heads CTAs and divided by the slots, plus the merge
//     pass's extra partial reads:
//       keep separate: T(rest, chain_u) + T(s_c, len_c)  + merge reads of s_c partials
//       fold c into u: T(rest - s_c, chain_u) + T(s_c, chain_u + len_c)
//     with T(s, L) the estimate_item time of s queries over L tokens in chunks of 128 packed rows.
//     Folding removes c's queries from u's items (fewer rows, maybe one chunk fewer) at the price
//     of re-reading u's chain in c's items.
//  2. Balance: KV splits per group for several per-slot work shares (no split, and the total work
//     spread over 1/2, 1, 2, 4 waves of slots); each candidate is scored by the cost model.
//  3. Guarantee: the other planners' plans are scored too and the cheapest plan wins, so under its
//     own cost model auto is never worse than any of them.
#include <algorithm>
#include <limits>
#include <vector>

#include "planner_util.h"
#include "planners.h"

namespace treeattn::planners {
namespace {

class AutoPlanner {
 public:
  AutoPlanner(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts)
      : tree_(tree),
        index_(index),
        opts_(opts),
        shape_(plan_shape(tree, opts)),
        cap_(max_queries_per_item(opts, false)),
        group_(shape_.group()) {}

  /// Time of s queries over L tokens: CTA-us of its chunks x kv_heads / slots.
  double T(int64_t s, int64_t L) const {
    if (s <= 0 || L <= 0) return 0;
    const int64_t full = s / cap_, rem = s % cap_;
    double us = 0;
    if (full > 0) us += full * item_us(cap_ * group_, L);
    if (rem > 0) us += item_us(static_cast<int32_t>(rem * group_), L);
    return us * opts_.num_kv_heads / static_cast<double>(device_slots(opts_.device));
  }

  ChainGroups group() const {
    const int32_t n = static_cast<int32_t>(tree_.nodes.size());
    std::vector<int64_t> chain(n, 0);
    std::vector<char> merged(n, 0);
    const double merge_read_us = static_cast<double>(shape_.num_qo_heads) *
                                 (shape_.head_dim * 4.0 + 4.0) / (opts_.device.hbm_read_GBps * 1e3);
    for (const int32_t u : index_.preorder) {
      int64_t rest = static_cast<int64_t>(index_.queries_below[u].size());
      if (rest == 0) continue;
      const int32_t p = tree_.nodes[u].parent;
      chain[u] = tree_.nodes[u].tokens + (p != kNoParent && merged[u] ? chain[p] : 0);
      for (const int32_t c : index_.children[u]) {
        const int64_t s_c = static_cast<int64_t>(index_.queries_below[c].size());
        if (s_c == 0) continue;
        const int64_t len_c = tree_.nodes[c].tokens;
        const double keep = T(rest, chain[u]) + T(s_c, len_c) + s_c * merge_read_us;
        const double fold = T(rest - s_c, chain[u]) + T(s_c, chain[u] + len_c);
        if (fold < keep) {
          merged[c] = 1;
          rest -= s_c;
        }
      }
    }
    return chain_groups(tree_, index_, merged);
  }

  /// Plan of the groups with every chain longer than `thr` tokens split into pieces <= thr.
  Plan emit(const ChainGroups& cg, int64_t thr) const {
    PlanAssembler as(tree_, opts_, "auto");
    std::vector<Seg> segs;
    for (const ChainGroups::Group& g : cg.groups) {
      segs.clear();
      chain_segs(tree_, g, &segs);
      const int32_t parts = static_cast<int32_t>(g.len > thr ? cdiv(g.len, thr) : 1);
      as.emit_group(cg.queries.data() + g.q_begin, g.num_queries(), segs.data(),
                    static_cast<int32_t>(segs.size()), cap_, parts);
    }
    return as.finish();
  }

  Plan run() {
    const ChainGroups cg = group();
    int64_t work = 0;
    for (const ChainGroups::Group& g : cg.groups) work += cdiv(g.num_queries(), cap_) * g.len;
    const int64_t share = work * opts_.num_kv_heads;
    const int64_t slots = device_slots(opts_.device);
    consider(emit(cg, std::numeric_limits<int64_t>::max()));
    static constexpr double kWaves[] = {0.5, 1.0, 2.0, 4.0};
    int64_t last_thr = -1;
    for (const double w : kWaves) {
      const int64_t thr =
          std::max<int64_t>(32, static_cast<int64_t>(share / (w * static_cast<double>(slots))));
      if (thr == last_thr) continue;
      last_thr = thr;
      consider(emit(cg, thr));
    }
    consider(pat(tree_, index_, opts_));
    consider(fasttree(tree_, index_, opts_));
    consider(node(tree_, index_, opts_));
    consider(forge(tree_, index_, opts_));
    consider(query(tree_, index_, opts_));
    consider(node_chunk(tree_, index_, opts_));
    consider(flatten(tree_, index_, opts_));
    best_.planner = "auto";
    return std::move(best_);
  }

 private:
  double item_us(int32_t packed_rows, int64_t kv) const {
    return estimate_item(opts_.device, shape_, tile_class_for_rows(packed_rows), packed_rows, kv,
                         true)
        .us;
  }

  void consider(Plan p) {
    const double us = fast_plan_us(opts_.device, p);
    if (best_us_ < 0 || us < best_us_) {
      best_us_ = us;
      best_ = std::move(p);
    }
  }

  const PrefixTree& tree_;
  const TreeIndex& index_;
  const PlanOptions& opts_;
  PlanShape shape_;
  int32_t cap_, group_;
  Plan best_;
  double best_us_ = -1;
};

}  // namespace

Plan auto_plan(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts) {
  return AutoPlanner(tree, index, opts).run();
}

}  // namespace treeattn::planners
