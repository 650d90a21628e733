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
// Speed: candidates are scored with cost-only PlanBuilders (items' rows, KV tokens and tiles; no
// ranges or pages), whose cost equals fast_plan_us of the full plan; a candidate whose lower bound
// (longest CTA, CTA time / slots, global bytes and FLOPs) cannot beat the best so far skips its
// LPT. Only the winner is built as a full Plan.
#include <algorithm>
#include <limits>
#include <vector>

#include "planner_util.h"
#include "planners.h"

namespace treeattn::planners {
namespace {

class AutoPlanner {
 public:
  AutoPlanner(const PrefixTree& tree, const PlanIndex& index, const PlanOptions& opts)
      : tree_(tree),
        index_(index),
        opts_(opts),
        shape_(plan_shape(tree, opts)),
        cap_(max_queries_per_item(opts, false)),
        group_(shape_.group()),
        wide_(model_uses_wide_m16(opts.device,
                                  static_cast<int64_t>(tree.num_queries()) * opts.num_kv_heads)) {}

  /// Time of s queries over L tokens: CTA-us of its chunks x kv_heads / slots.
  double T(int64_t s, int64_t L) const {
    if (s <= 0 || L <= 0) return 0;
    const int64_t full = s / cap_, rem = s % cap_;
    double us = 0;
    if (full > 0) us += full * item_us(cap_, L);
    if (rem > 0) us += item_us(rem, L);
    return us * opts_.num_kv_heads / static_cast<double>(device_slots(opts_.device));
  }

  ChainGroups group() const {
    const int32_t n = static_cast<int32_t>(tree_.nodes.size());
    std::vector<int64_t> chain(n, 0);
    std::vector<char> merged(n, 0);
    // Keeping c apart gives each of its queries one more partial slot: its bytes in the merge
    // pass, and one more step of the merge CTAs' serial chain averaged over the queries.
    const int64_t passes =
        (static_cast<int64_t>(shape_.num_qo_heads) * shape_.head_dim / 8 + 127) / 128;
    const double merge_read_us = static_cast<double>(shape_.num_qo_heads) *
                                     (shape_.head_dim * 4.0 + 4.0) /
                                     (opts_.device.hbm_read_GBps * 1e3) +
                                 static_cast<double>(passes) * opts_.device.merge_slot_us /
                                     std::max<int64_t>(1, tree_.num_queries());
    for (const int32_t u : index_.preorder) {
      int64_t rest = static_cast<int64_t>(index_.queries_below(u).size());
      if (rest == 0) continue;
      const int32_t p = tree_.nodes[u].parent;
      chain[u] = tree_.nodes[u].tokens + (p != kNoParent && merged[u] ? chain[p] : 0);
      for (const int32_t c : index_.children(u)) {
        const int64_t s_c = static_cast<int64_t>(index_.queries_below(c).size());
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

  /// KV pieces of each group when chains longer than `thr` tokens are split into pieces <= thr.
  static void split_parts(const ChainGroups& cg, int64_t thr, std::vector<int32_t>* parts) {
    parts->resize(cg.groups.size());
    for (size_t i = 0; i < cg.groups.size(); ++i) {
      const int64_t len = cg.groups[i].len;
      (*parts)[i] = static_cast<int32_t>(len > thr ? cdiv(len, thr) : 1);
    }
  }

  /// Emits the groups, group i cut into parts[i] KV pieces.
  void emit(const ChainGroups& cg, const std::vector<int32_t>& parts, PlanBuilder* b) const {
    for (size_t i = 0; i < cg.groups.size(); ++i) {
      const ChainGroups::Group& g = cg.groups[i];
      b->emit_chain(g.node, g.top, g.len, cg.queries.data() + g.q_begin, g.num_queries(), cap_,
                    parts[i]);
    }
  }

  /// Scores every candidate with cost-only builders (a candidate whose lower bound already loses
  /// skips its LPT), then builds only the winner.
  Plan run() {
    const ChainGroups cg = group();
    int64_t work = 0;
    for (const ChainGroups::Group& g : cg.groups) work += cdiv(g.num_queries(), cap_) * g.len;
    const int64_t share = work * opts_.num_kv_heads;
    const int64_t slots = device_slots(opts_.device);
    // Own candidates: no split, then the total work spread over 1/2, 1, 2, 4 waves of slots.
    std::vector<int64_t> thresholds = {std::numeric_limits<int64_t>::max()};
    static constexpr double kWaves[] = {0.5, 1.0, 2.0, 4.0};
    for (const double w : kWaves) {
      const int64_t thr =
          std::max<int64_t>(32, static_cast<int64_t>(share / (w * static_cast<double>(slots))));
      if (thr != thresholds.back()) thresholds.push_back(thr);
    }
    // Thresholds fall, so parts only grow: a threshold splitting exactly like the previous one
    // builds the same plan (same cost, never strictly better) and is skipped.
    std::vector<int32_t> parts, prev_parts;
    for (size_t i = 0; i < thresholds.size(); ++i) {
      split_parts(cg, thresholds[i], &parts);
      if (i > 0 && parts == prev_parts) continue;
      prev_parts.swap(parts);
      PlanBuilder b(tree_, opts_, "auto", PlanBuilder::Mode::kCostOnly);
      emit(cg, prev_parts, &b);
      consider(b.cost_us(opts_.device, bound()), static_cast<int32_t>(i));
    }
    // The guarantee: every other planner is a candidate too.
    static const char* const kOthers[] = {"pat",   "fasttree",   "node",   "forge",
                                          "query", "node-chunk", "flatten"};
    std::vector<const PlannerEntry*> others;
    for (const char* name : kOthers) {
      others.push_back(find_planner(name));
      PlanBuilder b(tree_, opts_, name, PlanBuilder::Mode::kCostOnly);
      others.back()->fn(tree_, index_, opts_, &b);
      consider(b.cost_us(opts_.device, bound()), -static_cast<int32_t>(others.size()));
    }
    if (best_ >= 0) {
      PlanBuilder b(tree_, opts_, "auto");
      split_parts(cg, thresholds[best_], &parts);
      emit(cg, parts, &b);
      return b.finish();
    }
    Plan plan = run_planner(*others[-best_ - 1], tree_, index_, opts_);
    plan.planner = "auto";
    return plan;
  }

 private:
  /// estimate_item(...).us of `rows` queries writing partials over `kv` tokens.
  /// Memoised in a small direct-mapped table: the grouping pass asks for the same few (rows, kv)
  /// pairs over and over (sibling leaves), and each evaluation costs two divisions.
  double item_us(int64_t rows, int64_t kv) const {
    Memo& m = memo_[static_cast<size_t>(rows * 31 + kv * 131) % kMemo];
    if (m.rows == rows && m.kv == kv) return m.us;
    m.rows = rows;
    m.kv = kv;
    const TileClass tile = tile_class_for_rows(static_cast<int32_t>(rows * group_));
    m.us = estimate_cta(opts_.device, shape_, tile, wide_ && tile == TileClass::kM16, rows * group_,
                        rows * group_, kv)
               .us;
    return m.us;
  }

  double bound() const { return best_us_ < 0 ? std::numeric_limits<double>::infinity() : best_us_; }
  /// Candidate `id` (>= 0: own threshold index, < 0: -1 - index into the other planners).
  void consider(double us, int32_t id) {
    if (best_us_ < 0 || us < best_us_) {
      best_us_ = us;
      best_ = id;
    }
  }

  const PrefixTree& tree_;
  const PlanIndex& index_;
  const PlanOptions& opts_;
  PlanShape shape_;
  int32_t cap_, group_;
  bool wide_;  ///< the grouping pass assumes the kM16 variant of one item per query
  struct Memo {
    int64_t rows = -1, kv = -1;
    double us = 0;
  };
  static constexpr size_t kMemo = 64;
  mutable Memo memo_[kMemo];
  int32_t best_ = 0;
  double best_us_ = -1;
};

}  // namespace

Plan auto_plan(const PrefixTree& tree, const PlanIndex& index, const PlanOptions& opts) {
  return AutoPlanner(tree, index, opts).run();
}

}  // namespace treeattn::planners
