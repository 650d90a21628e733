// The planners' building blocks (plan_builder.h): PlanBuilder collects items and turns them into a
// finished Plan (or, in cost-only mode, into the cost model's estimate of that plan); KV pieces
// of a chain (split_pieces) for both modes.
#include "plan_builder.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "treeattn/common/error.h"
#include "treeattn/plan/ranges.h"

namespace treeattn::planners {

PlanShape plan_shape(const PrefixTree& tree, const PlanOptions& opts) {
  PlanShape s;
  s.num_queries = tree.num_queries();
  s.num_qo_heads = opts.num_qo_heads;
  s.num_kv_heads = opts.num_kv_heads;
  s.head_dim = opts.head_dim;
  s.page_size = tree.page_size;
  s.dtype_bytes = opts.dtype_bytes;
  s.kv_dtype_bytes = opts.kv_dtype_bytes > 0 ? opts.kv_dtype_bytes : opts.dtype_bytes;
  s.unique_kv_tokens = unique_tokens(tree);  // tokens on some query's path
  return s;
}

int32_t max_queries_per_item(const PlanOptions& opts, bool masked) {
  const int32_t group = std::max(1, opts.num_qo_heads / std::max(1, opts.num_kv_heads));
  int32_t cap = std::max(1, 128 / group);
  if (masked) cap = std::min(cap, kMaxMaskedRows);
  return cap;
}

PlanBuilder::PlanBuilder(const PrefixTree& tree, const PlanOptions& opts, const char* planner,
                         Mode mode)
    : PlanBuilder(tree, opts, plan_shape(tree, opts), planner, mode) {}

PlanBuilder::PlanBuilder(const PrefixTree& tree, const PlanOptions& opts, const PlanShape& shape,
                         const char* planner, Mode mode)
    : tree_(tree), cost_only_(mode == Mode::kCostOnly) {
  plan_.planner = planner;
  plan_.chosen_planner = planner;
  plan_.shape = shape;
  group_ = plan_.shape.group();
  warpgroup_mma_ = opts.device.warpgroup_mma;
  const size_t nq = static_cast<size_t>(tree.num_queries());
  if (cost_only_) {
    row_query_.reserve(nq * 2);
    blocks_.reserve(nq * 2);
    cost_items_.reserve(nq * 2);
    item_block_.reserve(nq * 2);
  } else {
    plan_.items.reserve(nq * 2);
    plan_.rows.reserve(nq * 4);
    node_page_base_.assign(tree.nodes.size(), -1);
    plan_.ranges.reserve(nq * 3);
    plan_.page_ids.reserve(nq * 4);
  }
}

void PlanBuilder::begin_item() {
  if (cost_only_) {
    blocks_.push_back(RowBlock{static_cast<int32_t>(row_query_.size()), 0, 1});
    cost_items_.emplace_back();
    item_block_.push_back(static_cast<int32_t>(blocks_.size()) - 1);
    item_masked_ = false;
    item_masks_.clear();
    cost_lens_.clear();
    return;
  }
  WorkItem it;
  it.row_begin = static_cast<int32_t>(plan_.rows.size());
  it.range_begin = static_cast<int32_t>(plan_.ranges.size());
  plan_.items.push_back(it);
  item_masks_.clear();
  item_masked_ = false;
}

void PlanBuilder::add_row(int32_t query) { add_rows(&query, 1); }

void PlanBuilder::add_rows(const int32_t* queries, int32_t n) {
  if (cost_only_) {
    row_query_.insert(row_query_.end(), queries, queries + n);
    blocks_.back().size += n;
    cost_items_.back().rows += n;
    return;
  }
  plan_.items.back().num_rows += n;
  const size_t base = plan_.rows.size();
  plan_.rows.resize(base + n);
  PlanRow* rows = plan_.rows.data() + base;
  for (int32_t k = 0; k < n; ++k) rows[k].query = queries[k];  // slot: kFinalOutput (default)
}

void PlanBuilder::add_masked_range(int32_t node, int32_t begin, int32_t end, uint64_t mask) {
  if (end <= begin || mask == 0) return;
  if (cost_only_) {  // what the cost model reads: KV tokens and whether the item is masked
    cost_items_.back().kv_tokens += end - begin;
    item_masks_.push_back(mask);
    cost_lens_.push_back(end - begin);
    if (mask != ~0ull) item_masked_ = true;
    return;
  }
  add_kv_range(make_range(tree_, node, begin, end, &plan_, &node_page_base_), mask);
}

void PlanBuilder::add_kv_range(const KvRange& r, uint64_t mask) {
  if (cost_only_) {
    add_masked_range(r.node, 0, r.len, mask);
    return;
  }
  WorkItem& it = plan_.items.back();
  TA_CHECK_ARG(static_cast<int64_t>(it.kv_tokens) + r.len <= INT32_MAX, "ranges", "item of ",
               static_cast<int64_t>(it.kv_tokens) + r.len, " tokens is too long");
  ++it.num_ranges;
  it.kv_tokens += r.len;
  plan_.ranges.push_back(r);
  item_masks_.push_back(mask);
  if (mask != ~0ull) item_masked_ = true;
}

void PlanBuilder::mark_path_masks(int32_t private_tokens) {
  TA_CHECK_INTERNAL(cost_only_ ? !cost_items_.empty() : !plan_.items.empty(),
                    "mark_path_masks without an open item");
  const int32_t kv = cost_only_ ? cost_items_.back().kv_tokens : plan_.items.back().kv_tokens;
  TA_CHECK_INTERNAL(private_tokens >= 0 && private_tokens <= kv, "private_tokens ", private_tokens,
                    " outside the open item's [0, ", kv, "]");
  if (cost_only_) {
    cost_items_.back().private_tokens = private_tokens;
    cost_items_.back().path_masks = true;
  } else {
    plan_.items.back().private_tokens = private_tokens;
    plan_.items.back().path_masks = true;
  }
}

void PlanBuilder::add_path_ranges(const int32_t* path, int32_t n, int64_t tok_begin,
                                  int64_t tok_end) {
  int64_t pos = 0;  // path position of the current node's token 0
  for (int32_t k = 0; k < n && pos < tok_end; ++k) {
    const int64_t len = tree_.nodes[path[k]].tokens;
    const int64_t b = std::max(tok_begin, pos), e = std::min(tok_end, pos + len);
    if (b < e) add_range(path[k], static_cast<int32_t>(b - pos), static_cast<int32_t>(e - pos));
    pos += len;
  }
}

bool PlanBuilder::clip_item_masks(int32_t rows) {
  TA_CHECK_ARG(rows <= kMaxMaskedRows, "masks", "masked items hold at most ", kMaxMaskedRows,
               " rows, got ", rows);
  const uint64_t valid = rows == 64 ? ~0ull : ((1ull << rows) - 1ull);
  bool all_full = true;
  for (uint64_t& m : item_masks_) {
    m &= valid;
    all_full = all_full && m == valid;
  }
  return !all_full;
}

int32_t PlanBuilder::end_item(TileClass min_tile) {
  if (cost_only_) {
    ItemSummary& c = cost_items_.back();
    if (c.rows == 0 || c.kv_tokens == 0) {
      row_query_.resize(blocks_.back().begin);
      blocks_.pop_back();
      cost_items_.pop_back();
      item_block_.pop_back();
      return -1;
    }
    c.masked = item_masked_ && clip_item_masks(c.rows);
    c.tile = std::max(tile_for(c.rows), min_tile);
    if (c.masked)
      set_masked_work(&c, group_, plan_.shape.head_dim, cost_lens_.data(), item_masks_.data(),
                      cost_lens_.size(), warpgroup_mma_);
    return num_items() - 1;
  }
  WorkItem& it = plan_.items.back();
  if (it.num_rows == 0 || it.num_ranges == 0) {
    plan_.rows.resize(it.row_begin);
    plan_.ranges.resize(it.range_begin);
    plan_.items.pop_back();
    return -1;
  }
  if (item_masked_ && clip_item_masks(it.num_rows)) {
    it.mask_begin = static_cast<int32_t>(plan_.masks.size());
    plan_.masks.insert(plan_.masks.end(), item_masks_.begin(), item_masks_.end());
  }
  it.tile = std::max(tile_for(it.num_rows), min_tile);
  return num_items() - 1;
}

void PlanBuilder::emit_group(const int32_t* queries, int32_t num_queries, const Seg* segs,
                             int32_t num_segs, int32_t cap, int32_t kv_parts, TileClass min_tile) {
  if (num_queries <= 0 || num_segs <= 0) return;
  cap = std::max(1, cap);
  int64_t total = 0;
  for (int32_t j = 0; j < num_segs; ++j) total += segs[j].len();
  if (total <= 0) return;
  const KvPieces pieces = split_pieces(total, kv_parts);
  if (cost_only_) {
    emit_chunks_cost(queries, num_queries, pieces, cap, min_tile);
    return;
  }
  for (int32_t q0 = 0; q0 < num_queries; q0 += cap) {
    const int32_t q1 = std::min(num_queries, q0 + cap);
    int32_t j = 0;
    int64_t chain_pos = 0;  // chain offset of segs[j].begin
    for (int32_t p = 0; p < pieces.parts; ++p) {
      const int64_t lo = pieces.begin(p), hi = pieces.begin(p + 1);
      begin_item();
      add_rows(queries + q0, q1 - q0);
      int64_t pos = lo;
      while (pos < hi) {
        while (chain_pos + segs[j].len() <= pos) chain_pos += segs[j++].len();
        const int64_t take = std::min<int64_t>(hi, chain_pos + segs[j].len()) - pos;
        const int32_t b = segs[j].begin + static_cast<int32_t>(pos - chain_pos);
        add_range(segs[j].node, b, b + static_cast<int32_t>(take));
        pos += take;
      }
      end_item(min_tile);
    }
  }
}

void PlanBuilder::emit_chain(int32_t node, int32_t top, int64_t len, const int32_t* queries,
                             int32_t num_queries, int32_t cap, int32_t kv_parts,
                             TileClass min_tile) {
  if (cost_only_) {
    if (num_queries <= 0 || len <= 0) return;
    emit_chunks_cost(queries, num_queries, split_pieces(len, kv_parts), std::max(1, cap), min_tile);
    return;
  }
  segs_.clear();
  for (int32_t v = node;; v = tree_.nodes[v].parent) {
    segs_.push_back(Seg{v, 0, tree_.nodes[v].tokens});
    if (v == top) break;
  }
  std::reverse(segs_.begin(), segs_.end());
  emit_group(queries, num_queries, segs_.data(), static_cast<int32_t>(segs_.size()), cap, kv_parts,
             min_tile);
}

void PlanBuilder::emit_chunks_cost(const int32_t* queries, int32_t num_queries,
                                   const KvPieces& pieces, int32_t cap, TileClass min_tile) {
  // Each chunk's rows are stored once, in a block shared by its pieces.
  for (int32_t q0 = 0; q0 < num_queries; q0 += cap) {
    const int32_t n = std::min(num_queries, q0 + cap) - q0;
    blocks_.push_back(RowBlock{static_cast<int32_t>(row_query_.size()), n, pieces.parts});
    if (n == 1) {
      row_query_.push_back(queries[q0]);
    } else {
      row_query_.insert(row_query_.end(), queries + q0, queries + q0 + n);
    }
    ItemSummary c;
    c.rows = n;
    c.tile = std::max(tile_for(n), min_tile);
    const int32_t added = append_piece_summaries(pieces, c, &cost_items_);
    for (int32_t k = 0; k < added; ++k)
      item_block_.push_back(static_cast<int32_t>(blocks_.size()) - 1);
  }
}

void PlanBuilder::check_int32_sizes(size_t entries) const {
  TA_CHECK_ARG(entries <= static_cast<size_t>(INT32_MAX), "tree", "the ", plan_.planner,
               " plan would hold ", entries,
               " rows, ranges, page ids or masks; plans index them with int32");
}

void PlanBuilder::count_rows(std::vector<int32_t>* count) const {
  const int32_t nq = plan_.shape.num_queries;
  count->assign(nq, 0);
  int32_t* const c = count->data();
  const auto tally = [&](int32_t q, int32_t copies) {
    TA_CHECK_INTERNAL(q >= 0 && q < nq, "row query ", q, " out of range");
    c[q] += copies;
  };
  if (cost_only_) {
    for (const RowBlock& b : blocks_)
      for (int32_t r = b.begin; r < b.begin + b.size; ++r) tally(row_query_[r], b.copies);
  } else {
    for (const PlanRow& r : plan_.rows) tally(r.query, 1);
  }
}

Plan PlanBuilder::finish(SlotOrder order) {
  TA_CHECK_INTERNAL(!cost_only_, "finish() on a cost-only PlanBuilder");
  // Offsets taken while building wrap past INT32_MAX; such a plan never leaves the builder.
  check_int32_sizes(std::max({plan_.items.size(), plan_.rows.size(), plan_.ranges.size(),
                              plan_.page_ids.size(), plan_.masks.size()}));
  const int32_t nq = plan_.shape.num_queries;
  std::vector<int32_t> count;
  count_rows(&count);
  plan_.merge_indptr.assign(nq + 1, 0);
  for (int32_t q = 0; q < nq; ++q)
    plan_.merge_indptr[q + 1] = plan_.merge_indptr[q] + (count[q] > 1 ? count[q] : 0);
  plan_.num_slots = plan_.merge_indptr[nq];
  plan_.merge_slots.assign(plan_.num_slots, -1);
  // `fill` = next merge-list position of each query; rows are visited in item (emission) order.
  std::vector<int32_t> fill(plan_.merge_indptr.begin(), plan_.merge_indptr.end() - 1);
  int32_t next_slot = 0;
  for (const WorkItem& it : plan_.items) {
    for (int32_t r = it.row_begin; r < it.row_begin + it.num_rows; ++r) {
      PlanRow& row = plan_.rows[r];
      if (count[row.query] <= 1) {
        row.slot = kFinalOutput;
        continue;
      }
      const int32_t pos = fill[row.query]++;
      row.slot = order == SlotOrder::kByRow ? next_slot++ : pos;
      plan_.merge_slots[pos] = row.slot;
    }
  }
  finalize_plan(&plan_);
  return std::move(plan_);
}

double PlanBuilder::cost_us(const DeviceInfo& dev, double prune_above) {
  TA_CHECK_INTERNAL(cost_only_, "cost_us() on a full PlanBuilder (use estimate_plan_us)");
  check_int32_sizes(std::max({row_query_.size(), blocks_.size(), cost_items_.size()}));
  std::vector<int32_t>& count = count_scratch_;
  count_rows(&count);
  MergeSummary merge;
  for (const int32_t c : count)
    if (c > 1) merge.add_list(c);
  // A row writes a partial when its query has more than one row in the plan.
  for (RowBlock& b : blocks_) {
    b.partial = 0;
    for (int32_t r = b.begin; r < b.begin + b.size; ++r) b.partial += count[row_query_[r]] > 1;
  }
  for (size_t i = 0; i < cost_items_.size(); ++i)
    cost_items_[i].partial_rows = blocks_[item_block_[i]].partial;
  return estimate_items_us(dev, plan_.shape, cost_items_.data(), cost_items_.size(), merge,
                           prune_above);
}

}  // namespace treeattn::planners
