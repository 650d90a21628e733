// Internal helpers shared by the paper planners (node-chunk, flatten, fasttree, pat, forge) and
// auto: a PlanAssembler that collects items (rows, ranges, optional masks) and then assigns
// final-output rows / partial slots / merge lists and calls finalize_plan(); "groups" (a set of
// queries over a chain of node slices) emitted as items with query chunking and KV splitting;
// and small numeric helpers. Not installed.
#pragma once

#include <cstdint>
#include <vector>

#include "treeattn/plan/cost_model.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn::planners {

/// Token slice [begin, end) of tree node `node`.
struct Seg {
  int32_t node = -1;
  int32_t begin = 0;
  int32_t end = 0;
  int32_t len() const { return end - begin; }
};

/// ceil(a / b) for a >= 0, b >= 1.
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The PlanShape the options describe for `tree`.
PlanShape plan_shape(const PrefixTree& tree, const PlanOptions& opts);

/// Most queries one item may hold: packed rows (queries x group) <= 128, and at most
/// kMaxMaskedRows rows when the item carries masks. Always >= 1 (group <= 128 is validated).
int32_t max_queries_per_item(const PlanOptions& opts, bool masked);

/// CTA slots of the device: num_sms x ctas_per_sm.
int64_t device_slots(const DeviceInfo& dev);

/// DeFT block size: the smallest multiple of 32 tokens (at least 64) that cuts `total_tokens` into
/// enough blocks for blocks x kv_heads to fill two waves of CTA slots.
int32_t even_block_tokens(int64_t total_tokens, const PlanOptions& opts);

/// Tokens of the live nodes some query uses, and those nodes' count.
int64_t used_tokens(const PrefixTree& tree, const TreeIndex& index);

/// Collects work items and turns them into a finished Plan. Rows get their slots in finish():
/// a query with exactly one row writes the final output, otherwise every row gets a fresh dense
/// partial slot, listed in the query's merge list in item order.
class PlanAssembler {
 public:
  PlanAssembler(const PrefixTree& tree, const PlanOptions& opts, const char* planner);

  /// Starts an item; rows, ranges (and masks) added next belong to it.
  void begin_item();
  void add_row(int32_t query);
  /// Adds node slice [begin, end) (non-empty) as one range seen by every row.
  void add_range(int32_t node, int32_t begin, int32_t end);
  /// Adds a range seen only by the rows whose bit is set in `mask` (bit r = item row r). Any
  /// masked range makes the whole item masked (<= kMaxMaskedRows rows); unmasked ranges of a
  /// masked item get an all-rows mask.
  void add_masked_range(int32_t node, int32_t begin, int32_t end, uint64_t mask);
  /// Closes the item with tile class max(min_tile, class for its packed rows). An item without
  /// rows or ranges is dropped.
  void end_item(TileClass min_tile = TileClass::kM16);

  /// Emits the items of one group: `queries` in chunks of at most `cap` (filled greedily), each
  /// chunk over the chain `segs`, cut into `kv_parts` near-equal pieces along the KV.
  void emit_group(const int32_t* queries, int32_t num_queries, const Seg* segs, int32_t num_segs,
                  int32_t cap, int32_t kv_parts, TileClass min_tile = TileClass::kM16);

  int32_t num_items() const { return static_cast<int32_t>(plan_.items.size()); }
  Plan& plan() { return plan_; }

  /// Assigns slots and merge lists, calls finalize_plan() and returns the plan.
  Plan finish();

 private:
  const PrefixTree& tree_;
  Plan plan_;
  std::vector<int32_t> node_page_base_;
  std::vector<uint64_t> item_masks_;  // masks of the open item, one per range
  bool item_masked_ = false;
  int32_t group_ = 1;
};

/// Cuts the chain `segs` (total T tokens) into `parts` pieces of near-equal token counts and
/// appends each piece's slices to `out`, with `piece_begin` receiving the index in `out` where
/// each piece starts (parts + 1 entries).
void split_chain(const Seg* segs, int32_t num_segs, int32_t parts, std::vector<Seg>* out,
                 std::vector<int32_t>* piece_begin);

/// Queries attached directly to each node (index by node).
std::vector<std::vector<int32_t>> own_queries(const PrefixTree& tree);

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
/// The chain top .. node of a group as slices, root first (appended to `out`).
void chain_segs(const PrefixTree& tree, const ChainGroups::Group& g, std::vector<Seg>* out);

}  // namespace treeattn::planners

namespace treeattn::planners {

/// estimate_plan_us() computed faster for planners that score many candidate plans: the same
/// documented model (cost_model.h / cost_model.cc: per-CTA time, LPT over the CTA slots raised to
/// the global bandwidth / tensor-core bounds, launches, merge pass), with the LPT run over
/// slots / kv_heads slot groups when kv_heads divides the slot count (then the kv_heads copies of
/// every item land on identical slots, so the result is exact). A test checks it against
/// estimate_plan_us.
double fast_plan_us(const DeviceInfo& dev, const Plan& plan);

}  // namespace treeattn::planners
