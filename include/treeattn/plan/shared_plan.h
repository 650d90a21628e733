// SharedPlan: a plan that several threads run while another thread replaces it, e.g. a serving
// loop planning step n+1 while step n still decodes.
//
// Each run holds a snapshot: a std::shared_ptr to an immutable PlanState (the plan, the tree it
// was made from, the largest page id it reads), taken under a small mutex. replace() gets a
// state that was built in full beforehand and swaps the pointer under the same mutex; a run that
// took the old snapshot finishes on the old state, which is freed when its last holder lets go.
// Readers never wait for planning, and no run ever sees a half-replaced plan (the shape checks
// of a call and its execution use the same snapshot).
//
// Thread safety: every member function but the destructor may be called from any thread at any
// time. The states themselves are never modified after make_plan_state() returns.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "treeattn/plan/plan.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

/// A plan together with the tree it was made from; immutable once made (always held as
/// std::shared_ptr<const PlanState>).
struct PlanState {
  PrefixTree tree;
  Plan plan;
  int32_t max_page_id = -1;  ///< largest entry of plan.page_ids (-1: none)
};

/// The largest entry of plan.page_ids (-1: none): PlanState::max_page_id.
int32_t max_page_id(const Plan& plan);

/// Plans `tree` with make_plan(tree, opts) and keeps the tree (moved in: pass a copy to keep
/// yours). Throws what make_plan throws.
std::shared_ptr<const PlanState> make_plan_state(PrefixTree tree, const PlanOptions& opts);

/// The current PlanState of a plan shared between threads (see the file comment).
class SharedPlan {
 public:
  /// Throws std::invalid_argument naming "plan" when `state` is null.
  explicit SharedPlan(std::shared_ptr<const PlanState> state);
  SharedPlan(const SharedPlan&) = delete;
  SharedPlan& operator=(const SharedPlan&) = delete;

  /// The current state; it stays valid (and unchanged) for as long as the caller holds it.
  std::shared_ptr<const PlanState> snapshot() const;
  /// Makes `next` the current state. It must describe the same attention shape: throws
  /// std::invalid_argument naming "plan" (state unchanged) when `next` is null or
  /// check_replaceable() refuses it.
  void replace(std::shared_ptr<const PlanState> next);

  /// Throws std::invalid_argument naming "plan" unless `next` is for the heads, head_dim and page
  /// size of `current` (the caller's tensors and any device layout stay valid across the swap).
  static void check_replaceable(const Plan& current, const Plan& next);

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const PlanState> state_;
};

}  // namespace treeattn
