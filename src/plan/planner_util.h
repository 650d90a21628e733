// Internal helpers shared by the planners beyond plan building (plan_builder.h): the flat tree
// index the planners read (PlanIndex), "chain groups" (a set of queries over a chain of node
// slices, the FastTree / PAT / auto grouping), chain splitting, DeFT block sizes, device slots and
// the fast plan-cost estimate. Not installed.
#pragma once

#include <cstdint>
#include <vector>

#include "plan_builder.h"
#include "treeattn/plan/cost_model.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn::planners {

/// A read-only run of int32 values (one row of a PlanIndex CSR array).
struct IdSpan {
  const int32_t* first = nullptr;
  const int32_t* last = nullptr;
  const int32_t* begin() const { return first; }
  const int32_t* end() const { return last; }
  const int32_t* data() const { return first; }
  size_t size() const { return static_cast<size_t>(last - first); }
  bool empty() const { return first == last; }
  int32_t operator[](size_t i) const { return first[i]; }
};

/// TreeIndex's views the planners need, in flat (CSR) arrays: a handful of allocations instead
/// of two vectors per node. Same orders as build_index(): preorder with children in index order,
/// children in index order, queries_below in query order.
struct PlanIndex {
  std::vector<int32_t> preorder;  ///< live nodes, parents before children
  std::vector<int32_t> child_ptr, child_ids, below_ptr, below_ids, own_ptr, own_ids;
  IdSpan children(int32_t v) const {
    return {child_ids.data() + child_ptr[v], child_ids.data() + child_ptr[v + 1]};
  }
  /// Queries attached to node v itself, in query order.
  IdSpan own_queries(int32_t v) const {
    return {own_ids.data() + own_ptr[v], own_ids.data() + own_ptr[v + 1]};
  }
  /// Queries whose path contains node v.
  IdSpan queries_below(int32_t v) const {
    return {below_ids.data() + below_ptr[v], below_ids.data() + below_ptr[v + 1]};
  }
};
/// The index of a validated tree.
PlanIndex build_plan_index(const PrefixTree& tree);

/// CTA slots of the device: num_sms x ctas_per_sm.
int64_t device_slots(const DeviceInfo& dev);

/// DeFT block size: the smallest multiple of 32 tokens (at least 64) that cuts `total_tokens` into
/// enough blocks for blocks x kv_heads to fill two waves of CTA slots.
int32_t even_block_tokens(int64_t total_tokens, const PlanOptions& opts);

/// Tokens of the live nodes some query uses.
int64_t used_tokens(const PrefixTree& tree, const PlanIndex& index);

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
ChainGroups chain_groups(const PrefixTree& tree, const PlanIndex& index,
                         const std::vector<char>& merged);

/// estimate_plan_us() computed faster for planners that score many candidate plans: the same
/// documented model (cost_model.h / cost_model.cc), via items_cost_us (plan_builder.h). A test
/// checks it against estimate_plan_us.
double fast_plan_us(const DeviceInfo& dev, const Plan& plan);

}  // namespace treeattn::planners
