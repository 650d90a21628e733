// Shared planner helpers (see planner_util.h): the PlanAssembler that turns collected items into
// a finished Plan (slots, merge lists, finalize_plan), group emission with query chunking and KV
// splitting, and small helpers.
#include "planner_util.h"

#include <algorithm>

#include "treeattn/common/error.h"

namespace treeattn::planners {

PlanShape plan_shape(const PrefixTree& tree, const PlanOptions& opts) {
  PlanShape s;
  s.num_queries = tree.num_queries();
  s.num_qo_heads = opts.num_qo_heads;
  s.num_kv_heads = opts.num_kv_heads;
  s.head_dim = opts.head_dim;
  s.page_size = tree.page_size;
  s.dtype_bytes = opts.dtype_bytes;
  return s;
}

int32_t max_queries_per_item(const PlanOptions& opts, bool masked) {
  const int32_t group = std::max(1, opts.num_qo_heads / std::max(1, opts.num_kv_heads));
  int32_t cap = std::max(1, 128 / group);
  if (masked) cap = std::min(cap, kMaxMaskedRows);
  return cap;
}

int64_t device_slots(const DeviceInfo& dev) {
  return std::max<int64_t>(1, static_cast<int64_t>(dev.num_sms) * dev.ctas_per_sm);
}

int32_t even_block_tokens(int64_t total_tokens, const PlanOptions& opts) {
  const int64_t want_ctas = 2 * device_slots(opts.device);
  const int64_t blocks = std::max<int64_t>(1, cdiv(want_ctas, std::max(1, opts.num_kv_heads)));
  const int64_t b = cdiv(cdiv(std::max<int64_t>(total_tokens, 1), blocks), 32) * 32;
  return static_cast<int32_t>(std::min<int64_t>(std::max<int64_t>(64, b), 1 << 30));
}

int64_t used_tokens(const PrefixTree& tree, const TreeIndex& index) {
  int64_t t = 0;
  for (const int32_t v : index.preorder)
    if (!index.queries_below[v].empty()) t += tree.nodes[v].tokens;
  return t;
}

PlanAssembler::PlanAssembler(const PrefixTree& tree, const PlanOptions& opts, const char* planner)
    : tree_(tree) {
  plan_.planner = planner;
  plan_.shape = plan_shape(tree, opts);
  group_ = plan_.shape.group();
  node_page_base_.assign(tree.nodes.size(), -1);
  plan_.rows.reserve(static_cast<size_t>(tree.num_queries()) * 4);
  plan_.items.reserve(static_cast<size_t>(tree.num_queries()) * 2);
  plan_.ranges.reserve(static_cast<size_t>(tree.num_queries()) * 3);
}

void PlanAssembler::begin_item() {
  WorkItem it;
  it.row_begin = static_cast<int32_t>(plan_.rows.size());
  it.range_begin = static_cast<int32_t>(plan_.ranges.size());
  plan_.items.push_back(it);
  item_masks_.clear();
  item_masked_ = false;
}

void PlanAssembler::add_row(int32_t query) {
  plan_.rows.push_back(PlanRow{query, kFinalOutput});
  ++plan_.items.back().num_rows;
}

void PlanAssembler::add_range(int32_t node, int32_t begin, int32_t end) {
  add_masked_range(node, begin, end, ~0ull);  // an all-rows mask does not make the item masked
}

void PlanAssembler::add_masked_range(int32_t node, int32_t begin, int32_t end, uint64_t mask) {
  if (end <= begin || mask == 0) return;
  WorkItem& it = plan_.items.back();
  plan_.ranges.push_back(make_range(tree_, node, begin, end, &plan_, &node_page_base_));
  ++it.num_ranges;
  it.kv_tokens += end - begin;
  item_masks_.push_back(mask);
  if (mask != ~0ull) item_masked_ = true;
}

void PlanAssembler::end_item(TileClass min_tile) {
  WorkItem& it = plan_.items.back();
  if (it.num_rows == 0 || it.num_ranges == 0) {
    plan_.rows.resize(it.row_begin);
    plan_.ranges.resize(it.range_begin);
    plan_.items.pop_back();
    return;
  }
  if (item_masked_) {
    TA_CHECK_INTERNAL(it.num_rows <= kMaxMaskedRows, "masked item with ", it.num_rows, " rows");
    const uint64_t valid = it.num_rows == 64 ? ~0ull : ((1ull << it.num_rows) - 1ull);
    bool all_full = true;
    for (uint64_t& m : item_masks_) {
      m &= valid;
      all_full = all_full && m == valid;
    }
    if (!all_full) {
      it.mask_begin = static_cast<int32_t>(plan_.masks.size());
      plan_.masks.insert(plan_.masks.end(), item_masks_.begin(), item_masks_.end());
    }
  }
  const TileClass need = tile_class_for_rows(it.num_rows * group_);
  it.tile = std::max(need, min_tile);
}

void PlanAssembler::emit_group(const int32_t* queries, int32_t num_queries, const Seg* segs,
                               int32_t num_segs, int32_t cap, int32_t kv_parts,
                               TileClass min_tile) {
  if (num_queries <= 0 || num_segs <= 0) return;
  cap = std::max(1, cap);
  int64_t total = 0;
  for (int32_t j = 0; j < num_segs; ++j) total += segs[j].len();
  if (total <= 0) return;
  kv_parts = static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(kv_parts, total)));
  for (int32_t q0 = 0; q0 < num_queries; q0 += cap) {
    const int32_t q1 = std::min(num_queries, q0 + cap);
    // Piece p covers chain tokens [p * total / parts, (p + 1) * total / parts).
    int32_t j = 0;
    int64_t chain_pos = 0;  // chain offset of segs[j].begin
    for (int32_t p = 0; p < kv_parts; ++p) {
      const int64_t lo = total * p / kv_parts, hi = total * (p + 1) / kv_parts;
      begin_item();
      for (int32_t q = q0; q < q1; ++q) add_row(queries[q]);
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

Plan PlanAssembler::finish() {
  const int32_t nq = plan_.shape.num_queries;
  std::vector<int32_t> count(nq, 0);
  for (const PlanRow& r : plan_.rows) ++count[r.query];
  plan_.merge_indptr.assign(nq + 1, 0);
  for (int32_t q = 0; q < nq; ++q)
    plan_.merge_indptr[q + 1] = plan_.merge_indptr[q] + (count[q] > 1 ? count[q] : 0);
  plan_.merge_slots.assign(plan_.merge_indptr[nq], -1);
  std::vector<int32_t> fill(plan_.merge_indptr.begin(), plan_.merge_indptr.end() - 1);
  int32_t next_slot = 0;
  for (const WorkItem& it : plan_.items) {
    for (int32_t r = it.row_begin; r < it.row_begin + it.num_rows; ++r) {
      PlanRow& row = plan_.rows[r];
      if (count[row.query] <= 1) {
        row.slot = kFinalOutput;
      } else {
        row.slot = next_slot++;
        plan_.merge_slots[fill[row.query]++] = row.slot;
      }
    }
  }
  plan_.num_slots = next_slot;
  finalize_plan(&plan_);
  return std::move(plan_);
}

void split_chain(const Seg* segs, int32_t num_segs, int32_t parts, std::vector<Seg>* out,
                 std::vector<int32_t>* piece_begin) {
  int64_t total = 0;
  for (int32_t j = 0; j < num_segs; ++j) total += segs[j].len();
  parts = static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(parts, total)));
  int32_t j = 0;
  int64_t chain_pos = 0;
  for (int32_t p = 0; p < parts; ++p) {
    piece_begin->push_back(static_cast<int32_t>(out->size()));
    const int64_t lo = total * p / parts, hi = total * (p + 1) / parts;
    int64_t pos = lo;
    while (pos < hi) {
      while (chain_pos + segs[j].len() <= pos) chain_pos += segs[j++].len();
      const int64_t take = std::min<int64_t>(hi, chain_pos + segs[j].len()) - pos;
      const int32_t b = segs[j].begin + static_cast<int32_t>(pos - chain_pos);
      out->push_back(Seg{segs[j].node, b, b + static_cast<int32_t>(take)});
      pos += take;
    }
  }
  piece_begin->push_back(static_cast<int32_t>(out->size()));
}

ChainGroups chain_groups(const PrefixTree& tree, const TreeIndex& index,
                         const std::vector<char>& merged) {
  ChainGroups out;
  const int32_t n = static_cast<int32_t>(tree.nodes.size());
  std::vector<int32_t> top(n, -1);
  std::vector<int64_t> len(n, 0);
  std::vector<int32_t> own_begin(n + 1, 0), own(tree.num_queries());
  for (int32_t q = 0; q < tree.num_queries(); ++q) ++own_begin[tree.query_node[q] + 1];
  for (int32_t v = 0; v < n; ++v) own_begin[v + 1] += own_begin[v];
  {
    std::vector<int32_t> fill(own_begin.begin(), own_begin.end() - 1);
    for (int32_t q = 0; q < tree.num_queries(); ++q) own[fill[tree.query_node[q]]++] = q;
  }
  out.queries.reserve(tree.num_queries() * 2);
  for (const int32_t v : index.preorder) {
    if (index.queries_below[v].empty()) continue;
    const int32_t p = tree.nodes[v].parent;
    const bool m = p != kNoParent && merged[v];
    top[v] = m ? top[p] : v;
    len[v] = (m ? len[p] : 0) + tree.nodes[v].tokens;
    ChainGroups::Group g;
    g.node = v;
    g.top = top[v];
    g.len = len[v];
    g.q_begin = static_cast<int32_t>(out.queries.size());
    out.queries.insert(out.queries.end(), own.begin() + own_begin[v],
                       own.begin() + own_begin[v + 1]);
    for (const int32_t c : index.children[v])
      if (!merged[c])
        out.queries.insert(out.queries.end(), index.queries_below[c].begin(),
                           index.queries_below[c].end());
    g.q_end = static_cast<int32_t>(out.queries.size());
    if (g.q_end > g.q_begin) out.groups.push_back(g);
  }
  return out;
}

void chain_segs(const PrefixTree& tree, const ChainGroups::Group& g, std::vector<Seg>* out) {
  const size_t first = out->size();
  for (int32_t v = g.node;; v = tree.nodes[v].parent) {
    out->push_back(Seg{v, 0, tree.nodes[v].tokens});
    if (v == g.top) break;
  }
  std::reverse(out->begin() + first, out->end());
}

std::vector<std::vector<int32_t>> own_queries(const PrefixTree& tree) {
  std::vector<std::vector<int32_t>> own(tree.nodes.size());
  for (int32_t q = 0; q < tree.num_queries(); ++q) own[tree.query_node[q]].push_back(q);
  return own;
}

}  // namespace treeattn::planners
