// DeFT-Node-Chunk: DeFT-Node (one group per node with every query below it, KV read once per
// group) with nodes longer than a chunk cut into chunks, a weak load-balancing fix for trees with
// one huge node. The chunk size is the DeFT-Flatten block size (even_block_tokens), so a giant
// prefix is cut into enough pieces to fill the device.
#include "planner_util.h"
#include "planners.h"

namespace treeattn::planners {

void node_chunk(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts,
                PlanBuilder* b) {
  const int32_t chunk = even_block_tokens(used_tokens(tree, index), opts);
  const int32_t cap = max_queries_per_item(opts, /*masked=*/false);
  for (const int32_t v : index.preorder) {
    const IdSpan qs = index.queries_below(v);
    if (qs.empty()) continue;
    const int32_t tokens = tree.nodes[v].tokens;
    const Seg seg{v, 0, tokens};
    b->emit_group(qs.data(), static_cast<int32_t>(qs.size()), &seg, 1, cap,
                  static_cast<int32_t>(ceil_div(tokens, chunk)));
  }
}

}  // namespace treeattn::planners
