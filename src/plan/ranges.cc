// make_range() (treeattn/plan/ranges.h): a token sub-range of a tree node as a KvRange over the
// plan's page list, appending the node's pages once per node.
#include "treeattn/plan/ranges.h"

#include "treeattn/common/error.h"

namespace treeattn {

KvRange make_range(const PrefixTree& tree, int32_t node, int32_t tok_begin, int32_t tok_end,
                   Plan* plan, std::vector<int32_t>* node_page_base) {
  TA_CHECK_ARG(plan != nullptr && node_page_base != nullptr, "plan", "null output");
  TA_CHECK_ARG(node >= 0 && node < static_cast<int32_t>(tree.nodes.size()), "node", "index ", node,
               " out of range");
  const TreeNode& n = tree.nodes[node];
  TA_CHECK_ARG(0 <= tok_begin && tok_begin < tok_end && tok_end <= n.tokens, "tok_begin", "[",
               tok_begin, ", ", tok_end, ") is not a non-empty sub-range of node ", node, " with ",
               n.tokens, " tokens");
  if (node_page_base->size() < tree.nodes.size()) node_page_base->resize(tree.nodes.size(), -1);
  int32_t& base = (*node_page_base)[node];
  if (base < 0) {
    base = static_cast<int32_t>(plan->page_ids.size());
    plan->page_ids.insert(plan->page_ids.end(), n.pages.begin(), n.pages.end());
  }
  const int32_t P = tree.page_size;
  const int32_t first = n.page_offset + tok_begin;  // slot position within the node's page list
  KvRange r;
  r.page_begin = base + first / P;
  r.page_offset = first % P;
  r.len = tok_end - tok_begin;
  r.node = node;
  return r;
}

}  // namespace treeattn
