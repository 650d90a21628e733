// Incremental planning: keep a tree and its plan together and update the plan after a decode
// step (one token appended to every query) without replanning where the tree's structure does not
// change, falling back to a full make_plan() where it does (a fork, a request joining or leaving).
//
// Fast path (a step where every query sits alone on a leaf, so each leaf only grows): the leaf's
// last range grows by one token and its item's kv_tokens by one; when the leaf needs a new page it
// is taken from the tree's free-page pool exactly as PrefixTree::append_tokens does, and the leaf's
// page list in plan.page_ids is extended in place (when it is last) or moved to the end (the old
// copy becomes unused; page_ids is compacted once more than half of it is unused). A moved list
// gets room to grow (padding that repeats its last page and no range reads), so each page is
// copied O(1) times amortised. The
// plan then covers the grown tree exactly like a rebuild by the same planner (same coverage, same
// outputs); its items are those of the plan before the step, so splits and groups chosen for the
// older lengths stay until the next full replan (set replan_every to bound that drift).
#pragma once

#include <cstdint>

#include "treeattn/plan/planner.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

/// Thread safety: one thread at a time (every non-const member updates the tree and the plan);
/// to run its plans on other threads, hand each step's plan to a SharedPlan.
class IncrementalPlanner {
 public:
  /// Plans `tree` with `opts` (make_plan; throws what it throws). `replan_every` > 0 forces a
  /// full replan after that many incremental steps (0 = only when the structure changes).
  IncrementalPlanner(PrefixTree tree, PlanOptions opts, int32_t replan_every = 0);

  const PrefixTree& tree() const { return tree_; }
  const Plan& plan() const { return plan_; }
  const PlanOptions& options() const { return opts_; }

  /// One decode step: one token appended to every query (pages from the tree's free pool).
  /// Returns true when the plan was updated incrementally, false after a full replan. Throws
  /// std::invalid_argument naming "new_pages" when the pool runs out (tree and plan unchanged).
  bool step();
  /// A request joining on node index `node` (PrefixTree::add_query); full replan. Returns its
  /// query index.
  int32_t add_request(int32_t node);
  /// A request leaving (PrefixTree::remove_query); full replan.
  void remove_request(int32_t q);
  /// Forks query q into n (PrefixTree::fork_query); full replan. Returns the first new query.
  int32_t fork_request(int32_t q, int32_t n);
  /// Rebuilds the plan from scratch.
  void replan();

  int64_t full_replans() const { return full_replans_; }
  int64_t incremental_steps() const { return incremental_steps_; }

 private:
  void index_plan();
  void move_node_pages(int32_t node);
  void compact_pages();

  PrefixTree tree_;
  PlanOptions opts_;
  Plan plan_;
  int32_t replan_every_ = 0;
  int64_t full_replans_ = 0, incremental_steps_ = 0, since_replan_ = 0;
  bool fast_ok_ = false;                  ///< every query alone on a leaf with a known tail range
  std::vector<int32_t> tail_range_;       ///< per query: range holding its leaf's last token
  std::vector<int32_t> range_item_;       ///< per range: its item
  std::vector<int32_t> node_base_;        ///< per node: start of its pages in plan.page_ids, -1
  std::vector<int32_t> node_cap_;         ///< per node: page_ids slots reserved at node_base_
  std::vector<int32_t> node_ranges_ptr_;  ///< CSR: ranges of each node
  std::vector<int32_t> node_ranges_;
  bool all_nodes_known_ = false;  ///< node_base_ known for every node with ranges
  int64_t unused_pages_ = 0;      ///< stale page_ids entries left by moves
};

}  // namespace treeattn
