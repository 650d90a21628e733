// Helpers shared by the planners beyond plan building (plan_builder.h): device slots, DeFT
// block sizes, and "chain groups" (a set of queries over a chain of node slices) with the one
// chain-folding walk that FastTree, PAT and auto run with their own fold rules. Not installed.
#pragma once

#include <cstdint>
#include <vector>

#include "plan_builder.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn::planners {

/// CTA slots of the device: num_sms x ctas_per_sm.
int64_t device_slots(const DeviceInfo& dev);

/// DeFT block size: the smallest multiple of 32 tokens (at least 64) that cuts `total_tokens` into
/// enough blocks for blocks x kv_heads to fill two waves of CTA slots.
int32_t even_block_tokens(int64_t total_tokens, const PlanOptions& opts);

/// Tokens of the live nodes some query uses.
int64_t used_tokens(const PrefixTree& tree, const TreeIndex& index);

/// Groups of a "binary edge assignment" (FastTree) / pack (PAT) decision: merged[v] = 1 when
/// node v's queries take v's parent chain into their own items (the edge parent -> v is
/// concatenated). Every used node u whose remaining queries (its own plus those below its
/// non-merged children) are non-empty gets one group over the chain top(u) .. u, where top(u) is
/// the highest ancestor reached through merged edges.
struct ChainGroups {
  struct Group {
    int32_t node = -1, top = -1;     ///< chain top(u) .. u
    int32_t q_begin = 0, q_end = 0;  ///< into queries
    int64_t len = 0;                 ///< chain tokens
    int32_t num_queries() const { return q_end - q_begin; }
  };
  std::vector<Group> groups;
  std::vector<int32_t> queries;
};
ChainGroups chain_groups(const PrefixTree& tree, const TreeIndex& index,
                         const std::vector<char>& merged);

/// The chain-folding walk: nodes parent before child; node u holds a chain of `chain_u` tokens
/// (its own, plus its parent's chain when u was folded into it) and `rest` of the queries below
/// it. Each child c with s_c > 0 queries below it and len_c tokens is folded into u (c's queries
/// take u's chain into their own items; u keeps rest - s_c) when
/// fold(rest, chain_u, s_c, len_c) returns true. Returns the chain groups of the decision.
template <typename FoldRule>
ChainGroups fold_chains(const PrefixTree& tree, const TreeIndex& index, FoldRule&& fold) {
  const size_t n = tree.nodes.size();
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
      if (fold(rest, chain[u], s_c, static_cast<int64_t>(tree.nodes[c].tokens))) {
        merged[c] = 1;
        rest -= s_c;
      }
    }
  }
  return chain_groups(tree, index, merged);
}

}  // namespace treeattn::planners
