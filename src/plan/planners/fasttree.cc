// FastTree (MLSys 2025): context-queries grouping as a binary edge assignment.
//  * Greedy (Algorithm 1): nodes in parent-before-child order; for node v with nQ_curr queries
//    still grouped at v and accumulated context len_v, each child l (nQ_l queries, context len_l)
//    is concatenated with v (edge = 1: l's queries take v's chain into their own group) when
//    SplitKVCost > SplitQCost, with
//      C_P(nQ, len)  = alpha * Pad(TSq, nQ) * len * d + beta * nQ * Pad(TSc, min(len, TSc)) * d
//      SplitKVCost   = C_P(nQ_curr, len_v) + C_P(nQ_l, len_l) + gamma * nQ_l * d
//      SplitQCost    = C_P(nQ_curr - nQ_l, len_v) + C_P(nQ_l, len_v + len_l)
//    Pad(TS, N) = TS - ((N - 1) % TS + 1); artifact defaults alpha 0.66, beta 0.33, gamma 0.1;
//    TSc = 32 (KV tile); TSq = 64/G queries for groups in the large-tile phase, 16/G otherwise.
//  * Two Q-tile phases: groups with more than 16/G queries run with Q tiles of 64/G queries
//    (tile class kM64; kM128 only when one query's G heads exceed 64), the rest with 16/G
//    (kM16).
//  * Long-context splitting: a group whose context exceeds the per-slot share of the whole work
//    (total chunk-tokens x kv_heads / CTA slots, at least 256 tokens) is split along the KV into
//    pieces under that share, fixing both too few CTAs and the long tail.
#include <algorithm>
#include <vector>

#include "planner_util.h"
#include "planners.h"

namespace treeattn::planners {
namespace {

constexpr double kAlpha = 0.66, kBeta = 0.33, kGamma = 0.1;
constexpr int64_t kKvTile = 32;
constexpr int64_t kMinSplitTokens = 256;

int64_t pad(int64_t ts, int64_t n) { return n <= 0 ? 0 : ts - ((n - 1) % ts + 1); }

struct CostModel {
  int64_t qt64, qt16, d;
  int64_t tsq(int64_t nq) const { return nq <= qt16 ? qt16 : qt64; }
  double cp(int64_t nq, int64_t len) const {
    if (nq <= 0) return 0;
    return kAlpha * static_cast<double>(pad(tsq(nq), nq)) * len * d +
           kBeta * static_cast<double>(nq) * pad(kKvTile, std::min(len, kKvTile)) * d;
  }
};

}  // namespace

void fasttree(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts,
              PlanBuilder* b) {
  const int32_t group = std::max(1, opts.num_qo_heads / opts.num_kv_heads);
  CostModel cm{std::max(1, 64 / group), std::max(1, 16 / group), opts.head_dim};
  const ChainGroups cg =
      fold_chains(tree, index, [&cm](int64_t nq_curr, int64_t len_v, int64_t nq_l, int64_t len_l) {
        const double c0 = cm.cp(nq_curr, len_v) + cm.cp(nq_l, len_l) + kGamma * nq_l * cm.d;
        const double c1 = cm.cp(nq_curr - nq_l, len_v) + cm.cp(nq_l, len_v + len_l);
        return c0 > c1;
      });

  // Phases and long-context splitting.
  const int64_t kv_heads = opts.num_kv_heads;
  std::vector<int32_t> cap(cg.groups.size());
  int64_t work = 0;
  for (size_t i = 0; i < cg.groups.size(); ++i) {
    const int32_t nq = cg.groups[i].num_queries();
    cap[i] = static_cast<int32_t>(nq <= cm.qt16 ? cm.qt16 : cm.qt64);
    work += ceil_div(nq, cap[i]) * cg.groups[i].len;
  }
  const int64_t thr =
      std::max<int64_t>(kMinSplitTokens, ceil_div(work * kv_heads, device_slots(opts.device)));

  for (size_t i = 0; i < cg.groups.size(); ++i) {
    const ChainGroups::Group& g = cg.groups[i];
    const int32_t parts = pieces_at_most(g.len, thr);
    const TileClass min_tile =
        cap[i] == cm.qt16 && g.num_queries() <= cm.qt16 ? TileClass::kM16 : TileClass::kM64;
    b->emit_chain(g.node, g.top, g.len, cg.queries.data() + g.q_begin, g.num_queries(), cap[i],
                  parts, min_tile);
  }
}

}  // namespace treeattn::planners
