// IncrementalPlanner (include/treeattn/plan/incremental.h): plan updates after decode steps
// without replanning where the tree's structure is unchanged.
#include "treeattn/plan/incremental.h"

#include <algorithm>
#include <utility>

#include "treeattn/common/error.h"

namespace treeattn {

IncrementalPlanner::IncrementalPlanner(PrefixTree tree, PlanOptions opts, int32_t replan_every)
    : tree_(std::move(tree)), opts_(std::move(opts)), replan_every_(std::max(0, replan_every)) {
  replan();
}

void IncrementalPlanner::replan() {
  plan_ = make_plan(tree_, opts_);
  ++full_replans_;
  since_replan_ = 0;
  unused_pages_ = 0;
  index_plan();
}

void IncrementalPlanner::index_plan() {
  const int32_t n = static_cast<int32_t>(tree_.nodes.size());
  const int32_t nr = static_cast<int32_t>(plan_.ranges.size());
  const int32_t P = tree_.page_size;
  range_item_.assign(nr, -1);
  for (int32_t i = 0; i < static_cast<int32_t>(plan_.items.size()); ++i) {
    const WorkItem& it = plan_.items[i];
    for (int32_t r = it.range_begin; r < it.range_begin + it.num_ranges; ++r) range_item_[r] = i;
  }
  node_ranges_ptr_.assign(n + 1, 0);
  for (const KvRange& r : plan_.ranges) ++node_ranges_ptr_[r.node + 1];
  for (int32_t v = 0; v < n; ++v) node_ranges_ptr_[v + 1] += node_ranges_ptr_[v];
  node_ranges_.assign(nr, 0);
  {
    std::vector<int32_t> fill(node_ranges_ptr_.begin(), node_ranges_ptr_.end() - 1);
    for (int32_t r = 0; r < nr; ++r) node_ranges_[fill[plan_.ranges[r].node]++] = r;
  }
  // Where each node's pages sit in page_ids: every range of a node must index one contiguous
  // copy of the node's page list.
  node_base_.assign(n, -1);
  std::vector<char> bad(n, 0);
  for (int32_t v = 0; v < n; ++v) {
    const TreeNode& nd = tree_.nodes[v];
    for (int32_t k = node_ranges_ptr_[v]; k < node_ranges_ptr_[v + 1] && !bad[v]; ++k) {
      const KvRange& r = plan_.ranges[node_ranges_[k]];
      const auto pos = std::find(nd.pages.begin(), nd.pages.end(), plan_.page_ids[r.page_begin]);
      const int32_t base =
          pos == nd.pages.end() ? -1 : r.page_begin - static_cast<int32_t>(pos - nd.pages.begin());
      if (base < 0 || (node_base_[v] >= 0 && base != node_base_[v])) bad[v] = 1;
      node_base_[v] = base;
    }
    if (node_base_[v] >= 0 && !bad[v]) {
      const int64_t np = static_cast<int64_t>(nd.pages.size());
      if (node_base_[v] + np > static_cast<int64_t>(plan_.page_ids.size()) ||
          !std::equal(nd.pages.begin(), nd.pages.end(), plan_.page_ids.begin() + node_base_[v]))
        bad[v] = 1;
    }
    if (bad[v]) node_base_[v] = -1;
  }
  node_cap_.assign(n, 0);
  for (int32_t v = 0; v < n; ++v)
    if (node_base_[v] >= 0) node_cap_[v] = static_cast<int32_t>(tree_.nodes[v].pages.size());
  all_nodes_known_ = true;
  for (int32_t v = 0; v < n; ++v)
    if (node_ranges_ptr_[v + 1] > node_ranges_ptr_[v] && node_base_[v] < 0)
      all_nodes_known_ = false;
  // Fast path: every query alone on a leaf whose last token is in one known range.
  std::vector<int32_t> children(n, 0), queries(n, 0);
  for (const TreeNode& nd : tree_.nodes)
    if (nd.alive && nd.parent != kNoParent) ++children[nd.parent];
  for (const int32_t v : tree_.query_node) ++queries[v];
  const int32_t nq = tree_.num_queries();
  tail_range_.assign(nq, -1);
  fast_ok_ = true;
  for (int32_t q = 0; q < nq && fast_ok_; ++q) {
    const int32_t v = tree_.query_node[q];
    const TreeNode& nd = tree_.nodes[v];
    if (children[v] != 0 || queries[v] != 1 || node_base_[v] < 0) {
      fast_ok_ = false;
      break;
    }
    for (int32_t k = node_ranges_ptr_[v]; k < node_ranges_ptr_[v + 1]; ++k) {
      const KvRange& r = plan_.ranges[node_ranges_[k]];
      const int64_t begin =
          static_cast<int64_t>(r.page_begin - node_base_[v]) * P + r.page_offset - nd.page_offset;
      if (begin + r.len == nd.tokens) tail_range_[q] = node_ranges_[k];
    }
    fast_ok_ = tail_range_[q] >= 0;
  }
}

// A node's copy in page_ids has node_cap_[v] slots (its pages, then padding repeating its last
// page, never read by a range). A new page fills the next slot; a full copy grows in place when it
// is last in page_ids, else moves to the end with twice the room, so every page is copied O(1)
// times amortised (moving the whole list for every new page made a step quadratic in the leaves'
// lengths).
void IncrementalPlanner::move_node_pages(int32_t v) {
  const TreeNode& nd = tree_.nodes[v];
  const int32_t np = static_cast<int32_t>(nd.pages.size());  // the new page included
  const int32_t old_base = node_base_[v], old_cap = node_cap_[v];
  if (np <= old_cap) {
    plan_.page_ids[old_base + np - 1] = nd.pages.back();
    return;
  }
  const int32_t new_cap = 2 * np;
  if (old_base + old_cap == static_cast<int32_t>(plan_.page_ids.size())) {
    plan_.page_ids.resize(old_base + new_cap, nd.pages.back());  // last: grow in place
    node_cap_[v] = new_cap;
    return;
  }
  const int32_t new_base = static_cast<int32_t>(plan_.page_ids.size());
  plan_.page_ids.insert(plan_.page_ids.end(), nd.pages.begin(), nd.pages.end());
  plan_.page_ids.resize(new_base + new_cap, nd.pages.back());
  for (int32_t k = node_ranges_ptr_[v]; k < node_ranges_ptr_[v + 1]; ++k)
    plan_.ranges[node_ranges_[k]].page_begin += new_base - old_base;
  node_base_[v] = new_base;
  node_cap_[v] = new_cap;
  unused_pages_ += old_cap;
}

bool IncrementalPlanner::step() {
  const int32_t nq = tree_.num_queries();
  const int32_t P = tree_.page_size;
  if (!fast_ok_ || (replan_every_ > 0 && since_replan_ >= replan_every_)) {
    for (int32_t q = 0; q < nq; ++q) tree_.append_tokens(q, 1);
    replan();
    return false;
  }
  // Pages needed first, so that running out leaves tree and plan untouched.
  int64_t need = 0;
  for (int32_t q = 0; q < nq; ++q) {
    const TreeNode& nd = tree_.nodes[tree_.query_node[q]];
    need += (nd.page_offset + nd.tokens) % P == 0;
  }
  TA_CHECK_ARG(static_cast<int64_t>(tree_.free_pages.size()) >= need, "new_pages",
               "not given and the free-page pool holds ", tree_.free_pages.size(), " pages, need ",
               need);
  for (int32_t q = 0; q < nq; ++q) {
    const int32_t v = tree_.query_node[q];
    TreeNode& nd = tree_.nodes[v];
    const bool new_page = (nd.page_offset + nd.tokens) % P == 0;
    ++nd.tokens;
    KvRange& r = plan_.ranges[tail_range_[q]];
    ++r.len;
    ++plan_.items[range_item_[tail_range_[q]]].kv_tokens;
    if (new_page) {
      nd.pages.push_back(tree_.free_pages.back());
      tree_.free_pages.pop_back();
      move_node_pages(v);
    }
  }
  ++incremental_steps_;
  ++since_replan_;
  if (2 * unused_pages_ > static_cast<int64_t>(plan_.page_ids.size())) {
    if (all_nodes_known_) {
      compact_pages();
    } else {
      replan();
    }
  }
  return true;
}

void IncrementalPlanner::compact_pages() {
  std::vector<int32_t> ids;
  ids.reserve(plan_.page_ids.size() - unused_pages_);
  for (int32_t v = 0; v < static_cast<int32_t>(node_base_.size()); ++v) {
    if (node_base_[v] < 0) continue;
    const int32_t new_base = static_cast<int32_t>(ids.size());
    const std::vector<int32_t>& pages = tree_.nodes[v].pages;
    ids.insert(ids.end(), pages.begin(), pages.end());
    ids.resize(new_base + std::max<int32_t>(node_cap_[v], static_cast<int32_t>(pages.size())),
               pages.back());  // keep the room to grow
    for (int32_t k = node_ranges_ptr_[v]; k < node_ranges_ptr_[v + 1]; ++k)
      plan_.ranges[node_ranges_[k]].page_begin += new_base - node_base_[v];
    node_base_[v] = new_base;
  }
  plan_.page_ids = std::move(ids);
  unused_pages_ = 0;
}

int32_t IncrementalPlanner::add_request(int32_t node) {
  const int32_t q = tree_.add_query(node);
  replan();
  return q;
}

void IncrementalPlanner::remove_request(int32_t q) {
  tree_.remove_query(q);
  replan();
}

int32_t IncrementalPlanner::fork_request(int32_t q, int32_t n) {
  const int32_t first = tree_.fork_query(q, n);
  replan();
  return first;
}

}  // namespace treeattn
