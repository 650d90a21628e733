// Building blocks shared by the planners: make_range() turns a token sub-range of a tree node
// into a KvRange over the plan's page list (appending the node's pages once per node); the
// helpers of plan_builder.h (begin_plan, add_item, assign_slots, append_path_ranges).
#include "plan_builder.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "treeattn/common/error.h"
#include "treeattn/plan/planner.h"

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

// ---- planner building blocks (src/plan/plan_builder.h)

namespace treeattn::planners {

Plan begin_plan(const PrefixTree& tree, const PlanOptions& opts, const char* name) {
  Plan plan;
  plan.planner = name;
  plan.shape.num_queries = tree.num_queries();
  plan.shape.num_qo_heads = opts.num_qo_heads;
  plan.shape.num_kv_heads = opts.num_kv_heads;
  plan.shape.head_dim = opts.head_dim;
  plan.shape.page_size = tree.page_size;
  plan.shape.dtype_bytes = opts.dtype_bytes;
  return plan;
}

int32_t add_item(Plan* plan, const std::vector<int32_t>& queries,
                 const std::vector<KvRange>& ranges, const std::vector<uint64_t>* masks) {
  TA_CHECK_ARG(!queries.empty(), "queries", "a work item needs at least one row");
  TA_CHECK_ARG(!ranges.empty(), "ranges", "a work item needs at least one KV range");
  WorkItem it;
  it.row_begin = static_cast<int32_t>(plan->rows.size());
  it.num_rows = static_cast<int32_t>(queries.size());
  it.range_begin = static_cast<int32_t>(plan->ranges.size());
  it.num_ranges = static_cast<int32_t>(ranges.size());
  it.tile = tile_class_for_rows(it.num_rows * plan->shape.group());
  int64_t kv = 0;
  for (const KvRange& r : ranges) kv += r.len;
  TA_CHECK_ARG(kv <= INT32_MAX, "ranges", "item of ", kv, " tokens is too long");
  it.kv_tokens = static_cast<int32_t>(kv);
  if (masks != nullptr) {
    TA_CHECK_ARG(masks->size() == ranges.size(), "masks", "need one mask per range");
    TA_CHECK_ARG(it.num_rows <= kMaxMaskedRows, "masks", "masked items hold at most ",
                 kMaxMaskedRows, " rows, got ", it.num_rows);
    it.mask_begin = static_cast<int32_t>(plan->masks.size());
    plan->masks.insert(plan->masks.end(), masks->begin(), masks->end());
  }
  for (const int32_t q : queries) plan->rows.push_back(PlanRow{q, kFinalOutput});
  plan->ranges.insert(plan->ranges.end(), ranges.begin(), ranges.end());
  plan->items.push_back(it);
  return static_cast<int32_t>(plan->items.size()) - 1;
}

void assign_slots(Plan* plan) {
  const int32_t nq = plan->shape.num_queries;
  std::vector<int32_t> count(nq, 0);
  for (const PlanRow& r : plan->rows) {
    TA_CHECK_INTERNAL(r.query >= 0 && r.query < nq, "row query ", r.query, " out of range");
    ++count[r.query];
  }
  plan->merge_indptr.assign(nq + 1, 0);
  for (int32_t q = 0; q < nq; ++q)
    plan->merge_indptr[q + 1] = plan->merge_indptr[q] + (count[q] > 1 ? count[q] : 0);
  plan->num_slots = plan->merge_indptr[nq];
  plan->merge_slots.resize(plan->num_slots);
  std::vector<int32_t> next(plan->merge_indptr.begin(), plan->merge_indptr.end() - 1);
  // Rows are visited in item order, so slot numbers follow the planner's emission order.
  for (const WorkItem& it : plan->items)
    for (int32_t k = 0; k < it.num_rows; ++k) {
      PlanRow& r = plan->rows[it.row_begin + k];
      if (count[r.query] == 1) {
        r.slot = kFinalOutput;
      } else {
        r.slot = next[r.query]++;
        plan->merge_slots[r.slot] = r.slot;
      }
    }
}

void append_path_ranges(const PrefixTree& tree, const std::vector<int32_t>& path, int64_t tok_begin,
                        int64_t tok_end, Plan* plan, std::vector<int32_t>* node_page_base,
                        std::vector<KvRange>* out) {
  int64_t pos = 0;  // path position of the current node's token 0
  for (const int32_t n : path) {
    const int64_t len = tree.nodes[n].tokens;
    const int64_t b = std::max(tok_begin, pos), e = std::min(tok_end, pos + len);
    if (b < e)
      out->push_back(make_range(tree, n, static_cast<int32_t>(b - pos),
                                static_cast<int32_t>(e - pos), plan, node_page_base));
    pos += len;
    if (pos >= tok_end) break;
  }
}

}  // namespace treeattn::planners
