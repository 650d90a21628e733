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

void pat(const PrefixTree& tree, const PlanIndex& index, const PlanOptions& opts, PlanBuilder* b) {
  const int32_t n = static_cast<int32_t>(tree.nodes.size());
  const int64_t cap = max_queries_per_item(opts, /*masked=*/false);
  std::vector<int64_t> chain(n, 0);
  std::vector<char> merged(n, 0);
  for (const int32_t u : index.preorder) {
    int64_t rest = static_cast<int64_t>(index.queries_below(u).size());
    if (rest == 0) continue;
    const int32_t p = tree.nodes[u].parent;
    chain[u] = tree.nodes[u].tokens + (p != kNoParent && merged[u] ? chain[p] : 0);
    for (const int32_t c : index.children(u)) {
      const int64_t s_c = static_cast<int64_t>(index.queries_below(c).size());
      if (s_c == 0) continue;
      const int64_t extra = cdiv(s_c, cap) + cdiv(rest - s_c, cap) - cdiv(rest, cap);
      if (4 * s_c > extra * chain[u]) {
        merged[c] = 1;
        rest -= s_c;
      }
    }
  }
  const ChainGroups cg = chain_groups(tree, index, merged);

  // Long-KV split against the mean KV length over all CTAs.
  int64_t ctas = 0, kv = 0;
  for (const ChainGroups::Group& g : cg.groups) {
    const int64_t k = cdiv(g.num_queries(), cap);
    ctas += k;
    kv += k * g.len;
  }
  const int64_t mean = std::max<int64_t>(1, cdiv(kv, std::max<int64_t>(ctas, 1)));

  for (const ChainGroups::Group& g : cg.groups) {
    const int32_t parts = static_cast<int32_t>(g.len > mean ? cdiv(g.len, mean) : 1);
    b->emit_chain(g.node, g.top, g.len, cg.queries.data() + g.q_begin, g.num_queries(),
                  static_cast<int32_t>(cap), parts);
  }
}

}  // namespace treeattn::planners
