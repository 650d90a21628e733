// auto (ours): choose groups, KV splits and tiles to minimise the cost model's makespan
// (estimate_plan_us on opts.device: HBM bytes unique/redundant/partial, tensor-core time with
// tile padding, per-CTA fixed cost, the schedule over the CTA slots, launches and the merge pass).
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
//     own cost model auto is never worse than any of them; except that paths-split wins only
//     where it is estimated 5% below the rest (PlannerEntry::auto_margin), so auto may keep a
//     plan up to 1 / 0.95 - 1 = 5.3% above it.
//     Plan::chosen_planner says which plan won ("auto" for its own, else the candidate's name).
// Speed: the own split candidates share one list of query chunks and are scored straight from it
// (own_cost_us, the same items a cost-only builder would record); the other planners are scored
// with cost-only PlanBuilders (items' rows, KV tokens and tiles; no ranges or pages), whose cost
// equals estimate_plan_us of the full plan; a candidate whose lower bound
// (longest CTA, CTA time / slots, global bytes and FLOPs) cannot beat the best so far skips its
// schedule. Only the winner is built as a full Plan. The searching candidates (paths, paths-split)
// get the best cost so far as a bound for their own search and hand their choice to the winner's
// full build (PlannerSearch), which then does not search again.
#include <algorithm>
#include <limits>
#include <string>
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
    // Keeping c apart gives each of its queries one more partial slot: its bytes in the merge
    // pass, and one more step of the merge CTAs' serial chain averaged over the queries.
    const int64_t passes =
        (static_cast<int64_t>(shape_.num_qo_heads) * shape_.head_dim / 8 + 127) / 128;
    const double merge_read_us = static_cast<double>(shape_.num_qo_heads) *
                                     (shape_.head_dim * 4.0 + 4.0) /
                                     (opts_.device.hbm_read_GBps * 1e3) +
                                 static_cast<double>(passes) * opts_.device.merge_slot_us /
                                     std::max<int64_t>(1, tree_.num_queries());
    return fold_chains(tree_, index_,
                       [&](int64_t rest, int64_t chain_u, int64_t s_c, int64_t len_c) {
                         const double keep = T(rest, chain_u) + T(s_c, len_c) + s_c * merge_read_us;
                         const double fold = T(rest - s_c, chain_u) + T(s_c, chain_u + len_c);
                         return fold < keep;
                       });
  }

  /// KV pieces of each group when chains longer than `thr` tokens are split into pieces <= thr.
  static void split_parts(const ChainGroups& cg, int64_t thr, std::vector<int32_t>* parts) {
    parts->resize(cg.groups.size());
    for (size_t i = 0; i < cg.groups.size(); ++i)
      (*parts)[i] = pieces_at_most(cg.groups[i].len, thr);
  }

  /// Emits the groups, group i cut into parts[i] KV pieces.
  void emit(const ChainGroups& cg, const std::vector<int32_t>& parts, PlanBuilder* b) const {
    for (size_t i = 0; i < cg.groups.size(); ++i) {
      const ChainGroups::Group& g = cg.groups[i];
      b->emit_chain(g.node, g.top, g.len, cg.queries.data() + g.q_begin, g.num_queries(), cap_,
                    parts[i]);
    }
  }

  /// The cost-only PlanBuilder's cost_us(bound()) of emit(cg, parts) without building it: the
  /// candidates share the groups' query chunks and differ only in the KV pieces, so the chunks are
  /// listed once (chunks_) and each candidate only recounts rows per query and partial rows per
  /// chunk. Feeds estimate_items_us the same items (same fields, same order) as the builder.
  double own_cost_us(const ChainGroups& cg, const std::vector<int32_t>& parts) {
    if (chunks_.empty() && !cg.groups.empty()) list_chunks(cg);
    const int32_t nq = tree_.num_queries();
    count_.assign(static_cast<size_t>(nq), 0);
    for (size_t i = 0; i < cg.groups.size(); ++i) {
      const ChainGroups::Group& g = cg.groups[i];
      if (g.num_queries() <= 0 || g.len <= 0) continue;
      const int32_t kp = split_pieces(g.len, parts[i]).parts;
      for (int32_t k = g.q_begin; k < g.q_end; ++k) count_[cg.queries[k]] += kp;
    }
    MergeSummary merge;
    for (const int32_t c : count_)
      if (c > 1) merge.add_list(c);
    items_.clear();
    for (const Chunk& ch : chunks_) {
      const ChainGroups::Group& g = cg.groups[ch.group];
      ItemSummary it;
      it.rows = ch.rows;
      for (int32_t k = ch.q_begin; k < ch.q_begin + ch.rows; ++k)
        it.partial_rows += count_[cg.queries[k]] > 1;
      it.tile = ch.tile;
      append_piece_summaries(split_pieces(g.len, parts[ch.group]), it, &items_);
    }
    return estimate_items_us(opts_.device, shape_, items_.data(), items_.size(), merge, bound());
  }

  /// The query chunks emit() cuts every group into (cap_ queries each, filled greedily).
  void list_chunks(const ChainGroups& cg) {
    for (size_t i = 0; i < cg.groups.size(); ++i) {
      const ChainGroups::Group& g = cg.groups[i];
      if (g.num_queries() <= 0 || g.len <= 0) continue;
      for (int32_t q0 = 0; q0 < g.num_queries(); q0 += cap_) {
        Chunk ch;
        ch.group = static_cast<int32_t>(i);
        ch.q_begin = g.q_begin + q0;
        ch.rows = std::min(g.num_queries(), q0 + cap_) - q0;
        ch.tile = tile_class_for_rows(ch.rows * group_);
        chunks_.push_back(ch);
      }
    }
  }

  /// Scores every candidate with cost-only builders (a candidate whose lower bound already loses
  /// skips its schedule), then builds only the winner.
  Plan run() {
    const ChainGroups cg = group();
    int64_t work = 0;
    for (const ChainGroups::Group& g : cg.groups) work += ceil_div(g.num_queries(), cap_) * g.len;
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
      consider(own_cost_us(cg, prev_parts), static_cast<int32_t>(i));
    }
    // The guarantee: every other planner is a candidate too.
    // auto's candidates, less flatten where its ranges would pass kMaxFlattenRanges
    std::vector<const PlannerEntry*> others;
    for (const PlannerEntry* e : auto_candidates())
      if (std::string(e->name) != "flatten" || flatten_fits(tree_, index_, opts_))
        others.push_back(e);
    // A searching candidate (paths, paths-split) gets the cost it has to get below, so it need
    // not rank its plans above it, and leaves its choice for the winner's full build.
    std::vector<PlannerSearch> searches(others.size());
    for (size_t i = 0; i < others.size(); ++i) {
      PlanBuilder b(tree_, opts_, shape_, others[i]->name, PlanBuilder::Mode::kCostOnly);
      const double keep = 1.0 - others[i]->auto_margin;  // (PlannerEntry::auto_margin)
      // a hair above: a cost c with c / keep < bound() is below it whatever the rounding
      b.search().bound_us = bound() * keep * (1 + 1e-9);
      others[i]->fn(tree_, index_, opts_, &b);
      consider(b.cost_us(opts_.device, bound() * keep) / keep, -1 - static_cast<int32_t>(i));
      searches[i] = b.search();
    }
    if (best_ >= 0) {
      PlanBuilder b(tree_, opts_, shape_, "auto");
      split_parts(cg, thresholds[best_], &parts);
      emit(cg, parts, &b);
      return b.finish();  // chosen_planner "auto" (the builder's name)
    }
    PlannerSearch& won = searches[-best_ - 1];
    won.bound_us = std::numeric_limits<double>::infinity();  // (a search, should it still run)
    Plan plan = run_planner(*others[-best_ - 1], tree_, index_, opts_, &won);
    plan.planner = "auto";  // chosen_planner stays the candidate's name
    return plan;
  }

 private:
  /// estimate_item(...).us of `rows` queries writing partials over `kv` tokens.
  /// Memoised in a small direct-mapped table: the grouping pass asks for the same few (rows, kv)
  /// pairs over and over (sibling leaves), and each evaluation costs two divisions.
  double item_us(int64_t rows, int64_t kv) const {
    // Multiplicative hash, top bits: the old (rows * 31 + kv * 131) % 64 sent common pairs such
    // as (1, 32) and (1, 2080) to one slot and thrashed.
    const uint64_t h = static_cast<uint64_t>(rows) * 0x9E3779B97F4A7C15ull +
                       static_cast<uint64_t>(kv) * 0xC2B2AE3D27D4EB4Full;
    Memo& m = memo_[static_cast<size_t>(h >> (64 - kMemoBits))];
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
  const TreeIndex& index_;
  const PlanOptions& opts_;
  PlanShape shape_;
  int32_t cap_, group_;
  bool wide_;  ///< the grouping pass assumes the kM16 variant of one item per query
  struct Memo {
    int64_t rows = -1, kv = -1;
    double us = 0;
  };
  static constexpr int kMemoBits = 9;
  static constexpr size_t kMemo = size_t{1} << kMemoBits;
  mutable Memo memo_[kMemo];
  struct Chunk {
    int32_t group = 0, q_begin = 0, rows = 0;  ///< into cg.groups / cg.queries
    TileClass tile = TileClass::kM16;
  };
  std::vector<Chunk> chunks_;       ///< own_cost_us: the groups' query chunks, in emit order
  std::vector<int32_t> count_;      ///< own_cost_us: rows per query
  std::vector<ItemSummary> items_;  ///< own_cost_us: the candidate's items
  int32_t best_ = 0;
  double best_us_ = -1;
};

}  // namespace

Plan auto_plan(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts) {
  return AutoPlanner(tree, index, opts).run();
}

}  // namespace treeattn::planners
