// PAT (ASPLOS 2026): pack scheduler, tile selector and long-KV split.
//  * Pack scheduler (TreeHeuristic, Algorithm 1): nodes parent before child; node u carries the
//    KV chain it packs (its own blocks, plus its parent's chain when u was merged). For each child
//    c, merge c into u's CTA (c's queries take u's chain into their own CTA, u loses them) when
//    the profit rule holds: 4 * queries(c) > tokens(u's chain). Generalised to the per-CTA query
//    cap Q = 128 / G (GQA ratio G; packed rows <= 128): merging changes the number of CTAs that
//    read u's chain by extra = ceil(s_c/Q) + ceil((s_u - s_c)/Q) - ceil(s_u/Q) (0 or 1), so the
//    rule is 4 * s_c > extra * len(u's chain); extra = 0 (e.g. the last queries of a chain) always
//    merges. u's remaining queries are packed over its chain, Q queries per CTA.
//  * Tile selector: round the CTA's packed rows up to the next tile class (kM16/kM64/kM128). Our
//    kernels choose the KV tile themselves, so the KV-tile half of the selector has no plan field.
//  * Long-KV split: CTAs longer than the mean KV length of all CTAs are split into equal parts
//    no longer than the mean.
#include <algorithm>
#include <vector>

#include "planner_util.h"
#include "planners.h"

namespace treeattn::planners {

void pat(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts, PlanBuilder* b) {
  const int64_t cap = max_queries_per_item(opts, /*masked=*/false);
  // Fold c into u when 4 * s_c > extra * len(u's chain), extra = CTAs added by the fold.
  const ChainGroups cg =
      fold_chains(tree, index, [cap](int64_t rest, int64_t chain_u, int64_t s_c, int64_t) {
        const int64_t extra = ceil_div(s_c, cap) + ceil_div(rest - s_c, cap) - ceil_div(rest, cap);
        return 4 * s_c > extra * chain_u;
      });

  // Long-KV split against the mean KV length over all CTAs.
  int64_t ctas = 0, kv = 0;
  for (const ChainGroups::Group& g : cg.groups) {
    const int64_t k = ceil_div(g.num_queries(), cap);
    ctas += k;
    kv += k * g.len;
  }
  const int64_t mean = std::max<int64_t>(1, ceil_div(kv, std::max<int64_t>(ctas, 1)));

  for (const ChainGroups::Group& g : cg.groups) {
    const int32_t parts = pieces_at_most(g.len, mean);
    b->emit_chain(g.node, g.top, g.len, cg.queries.data() + g.q_begin, g.num_queries(),
                  static_cast<int32_t>(cap), parts);
  }
}

}  // namespace treeattn::planners
