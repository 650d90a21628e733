// The one building-block API every planner (src/plan/planners/*.cc) uses to emit a Plan:
//
//   PlanBuilder b(tree, opts, "name");
//   b.begin_item();
//   b.add_row(q) ...;                            // the item's queries (rows), in order
//   b.add_range(node, begin, end) ...;           // node slices every row sees, or
//   b.add_masked_range(node, begin, end, mask);  // slices only some rows see (DeFT masks)
//   b.end_item();                                // tile class from the packed rows
//   ...
//   Plan plan = b.finish();  // slots + merge lists, finalize_plan()
//
// plus emit_group() (queries in chunks x a chain of slices cut into KV pieces, the shape of most
// planners' items) and add_path_ranges() (a token window of a root path).
//
// A builder made with Mode::kCostOnly records only what the cost model reads (an ItemSummary per
// item, and the rows' queries) and skips ranges, page ids and mask words; cost_us() then returns
// exactly estimate_plan_us() of the plan the same calls would have built (auto scores its
// candidates this way and materialises only the winner).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "treeattn/common/int_math.h"
#include "treeattn/plan/cost/cost_model.h"
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

/// The PlanShape the options describe for `tree`.
PlanShape plan_shape(const PrefixTree& tree, const PlanOptions& opts);

/// Most queries one item may hold: packed rows (queries x group) <= 128, and at most
/// kMaxMaskedRows rows when the item carries masks. Always >= 1 (group <= 128 is validated).
int32_t max_queries_per_item(const PlanOptions& opts, bool masked);

/// How finish() numbers the partial slots of queries with more than one row.
enum class SlotOrder {
  kByRow,    ///< in row order over the items as emitted; merge lists list them in that order
  kByQuery,  ///< query by query (a query's slots are contiguous), merge_slots[s] == s
};

/// A chain of `total` tokens cut into `parts` near-equal KV pieces (parts clamped to
/// [1, total]): piece p covers chain tokens [begin(p), begin(p + 1)), begin(p) = total * p /
/// parts, so `rem` pieces hold base + 1 tokens and the other parts - rem pieces base tokens.
struct KvPieces {
  int64_t total = 0, base = 0, rem = 0;
  int32_t parts = 1;
  int64_t begin(int32_t p) const { return total * p / parts; }
};
/// The pieces emit_group() cuts a chain of `total` >= 1 tokens into.
inline KvPieces split_pieces(int64_t total, int32_t parts) {
  KvPieces k;
  k.total = total;
  k.parts = static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(parts, total)));
  k.base = total / k.parts;
  k.rem = total % k.parts;
  return k;
}
/// How many pieces to cut a chain of `len` tokens into so that none is longer than `max_len`
/// (1 when the chain already fits).
inline int32_t pieces_at_most(int64_t len, int64_t max_len) {
  return static_cast<int32_t>(len > max_len ? ceil_div(len, max_len) : 1);
}
/// Appends the cost model's summaries of one query chunk over every piece: `item` (rows, tile,
/// partial rows) with kv_tokens = base + 1 for `rem` pieces, then base for the others (empty
/// counts left out; the cost does not depend on the pieces' order). Returns the entries added.
inline int32_t append_piece_summaries(const KvPieces& pieces, ItemSummary item,
                                      std::vector<ItemSummary>* out) {
  int32_t added = 0;
  if (pieces.rem > 0) {
    item.kv_tokens = static_cast<int32_t>(pieces.base + 1);
    item.count = pieces.rem;
    out->push_back(item);
    ++added;
  }
  if (pieces.base > 0) {
    item.kv_tokens = static_cast<int32_t>(pieces.base);
    item.count = pieces.parts - pieces.rem;
    out->push_back(item);
    ++added;
  }
  return added;
}

/// What auto and a searching planner (paths, paths-split) exchange through the builder. auto sets
/// `bound_us` on a candidate's cost-only builder: a cost at or above it loses, so the search need
/// not rank plans that cannot get below it (it still emits a plan that costs at least the bound).
/// The search leaves its choice (`chosen`), which auto hands to the winner's full build so that
/// it builds that plan without searching again.
struct PlannerSearch {
  double bound_us = std::numeric_limits<double>::infinity();
  bool chosen = false;       ///< the fields below hold a search's choice
  int32_t group = 0;         ///< paths: queries per group (k)
  bool aligned = false;      ///< paths: the aligned cut of that k, not the plain one
  int64_t piece_tokens = 0;  ///< paths-split: the KV piece length (0: whole groups)
};

class PlanBuilder {
 public:
  enum class Mode { kPlan, kCostOnly };

  PlanBuilder(const PrefixTree& tree, const PlanOptions& opts, const char* planner,
              Mode mode = Mode::kPlan);
  /// With `shape` = plan_shape(tree, opts) already at hand (auto builds many candidates).
  PlanBuilder(const PrefixTree& tree, const PlanOptions& opts, const PlanShape& shape,
              const char* planner, Mode mode = Mode::kPlan);

  const PlanShape& shape() const { return plan_.shape; }

  /// Starts an item; rows and ranges added next belong to it.
  void begin_item();
  void add_row(int32_t query);
  void add_rows(const int32_t* queries, int32_t n);
  /// Adds node slice [begin, end) as one range seen by every row (ignored when empty).
  void add_range(int32_t node, int32_t begin, int32_t end) {
    add_masked_range(node, begin, end, ~0ull);
  }
  /// Adds a range seen only by the rows whose bit is set in `mask` (bit r = item row r); ignored
  /// when empty or mask == 0. Any partial mask makes the whole item masked (<= kMaxMaskedRows
  /// rows); unmasked ranges of a masked item get an all-rows mask. Items whose masks all end up
  /// covering every row carry no masks.
  void add_masked_range(int32_t node, int32_t begin, int32_t end, uint64_t mask);
  /// Adds an already made range (make_range() over plan()/page_memo(), for tests and tools).
  void add_kv_range(const KvRange& r, uint64_t mask = ~0ull);
  /// Marks the open item as path-shaped (WorkItem::path_masks) with `private_tokens` of
  /// its KV read by no other item (WorkItem::private_tokens); call after its ranges.
  void mark_path_masks(int32_t private_tokens);
  /// Adds the ranges covering tokens [tok_begin, tok_end) of the concatenation of the nodes
  /// path[0..n) (root first); a range may start or end mid-node.
  void add_path_ranges(const int32_t* path, int32_t n, int64_t tok_begin, int64_t tok_end);
  /// Closes the item with tile class max(min_tile, class for its packed rows) and returns its
  /// index (before finish() reorders items), or -1 when it had no rows or no ranges (dropped).
  /// Throws std::invalid_argument when the packed rows exceed 128.
  int32_t end_item(TileClass min_tile = TileClass::kM16);

  /// Emits the items of one group: `queries` in chunks of at most `cap` (filled greedily), each
  /// chunk over the chain `segs`, cut into `kv_parts` near-equal pieces along the KV.
  void emit_group(const int32_t* queries, int32_t num_queries, const Seg* segs, int32_t num_segs,
                  int32_t cap, int32_t kv_parts, TileClass min_tile = TileClass::kM16);

  /// emit_group() over the chain of nodes top .. node (top an ancestor of node, or node itself;
  /// `len` = the chain's tokens), whole nodes, root first. A cost-only builder never walks the
  /// chain.
  void emit_chain(int32_t node, int32_t top, int64_t len, const int32_t* queries,
                  int32_t num_queries, int32_t cap, int32_t kv_parts,
                  TileClass min_tile = TileClass::kM16);

  int32_t num_items() const {
    return static_cast<int32_t>(cost_only_ ? cost_items_.size() : plan_.items.size());
  }
  /// The plan under construction and the per-node page memo of make_range (kPlan mode).
  Plan& plan() { return plan_; }
  std::vector<int32_t>* page_memo() { return &node_page_base_; }

  /// Assigns slots and merge lists (see SlotOrder), calls finalize_plan() and returns the plan.
  /// kPlan mode only (a cost-only builder keeps no plan: plan() stays empty).
  Plan finish(SlotOrder order = SlotOrder::kByRow);
  /// estimate_plan_us() of the plan a kPlan builder would finish() with the same calls
  /// (kCostOnly mode only; see estimate_items_us for prune_above).
  double cost_us(const DeviceInfo& dev,
                 double prune_above = std::numeric_limits<double>::infinity());
  /// auto's bound and a search's choice (PlannerSearch).
  PlannerSearch& search() { return search_; }

 private:
  /// Cost-only emit_group over a chain cut into `pieces`.
  void emit_chunks_cost(const int32_t* queries, int32_t num_queries, const KvPieces& pieces,
                        int32_t cap, TileClass min_tile);
  /// Clips the open item's masks to its `rows` rows (throws past kMaxMaskedRows); true when one
  /// of them still leaves a row out, i.e. the item is masked.
  bool clip_item_masks(int32_t rows);
  /// Tile class of an item of `rows` queries (throws past 128 packed rows).
  TileClass tile_for(int32_t rows) const {
    const int32_t packed = rows * group_;
    if (packed >= 1 && packed <= 16) return TileClass::kM16;
    if (packed > 16 && packed <= 64) return TileClass::kM64;
    return tile_class_for_rows(packed);
  }
  /// Throws std::invalid_argument when `entries` (the size of a plan array) passes INT32_MAX:
  /// plans index rows, ranges, page ids and masks with int32.
  void check_int32_sizes(size_t entries) const;
  /// Rows per query over the whole plan.
  void count_rows(std::vector<int32_t>* count) const;

  const PrefixTree& tree_;
  Plan plan_;
  PlannerSearch search_;
  bool cost_only_ = false;
  int32_t group_ = 1;
  bool warpgroup_mma_ = false;  ///< opts.device.warpgroup_mma (masked items' MMA slabs)
  std::vector<int32_t> node_page_base_;
  std::vector<uint64_t> item_masks_;  // masks of the open item, one per range (both modes)
  std::vector<int32_t> cost_lens_;    // kCostOnly: the open item's range lengths (item_masks_)
  std::vector<Seg> segs_;             // emit_chain
  bool item_masked_ = false;
  // kCostOnly: items as ItemSummaries (cost_items_, with the row block of each in item_block_);
  // their rows in blocks of row_query_ (emit_group stores a chunk's rows once for all its KV
  // pieces: `copies` items share the block).
  struct RowBlock {
    int32_t begin = 0, size = 0, copies = 1;
    int32_t partial = 0;  ///< rows whose query writes partials (cost_us)
  };
  std::vector<int32_t> row_query_;
  std::vector<RowBlock> blocks_;
  std::vector<ItemSummary> cost_items_;
  std::vector<int32_t> item_block_;
  std::vector<int32_t> count_scratch_;
};

}  // namespace treeattn::planners
