// SharedPlan (treeattn/plan/shared_plan.h): immutable plan states behind a mutex-guarded
// std::shared_ptr, so that runs keep the snapshot they took while another thread replaces it.
#include "treeattn/plan/shared_plan.h"

#include <algorithm>
#include <utility>

#include "treeattn/common/error.h"

namespace treeattn {

int32_t max_page_id(const Plan& plan) {
  int32_t m = -1;
  for (const int32_t p : plan.page_ids) m = std::max(m, p);
  return m;
}

std::shared_ptr<const PlanState> make_plan_state(PrefixTree tree, const PlanOptions& opts) {
  auto s = std::make_shared<PlanState>();
  s->plan = make_plan(tree, opts);
  s->tree = std::move(tree);
  s->max_page_id = max_page_id(s->plan);
  return s;
}

SharedPlan::SharedPlan(std::shared_ptr<const PlanState> state) : state_(std::move(state)) {
  TA_CHECK_ARG(state_ != nullptr, "plan", "null plan state");
}

std::shared_ptr<const PlanState> SharedPlan::snapshot() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

void SharedPlan::check_replaceable(const Plan& current, const Plan& next) {
  const PlanShape &a = current.shape, &b = next.shape;
  TA_CHECK_ARG(a.num_qo_heads == b.num_qo_heads && a.num_kv_heads == b.num_kv_heads &&
                   a.head_dim == b.head_dim && a.page_size == b.page_size &&
                   a.kv_dtype_bytes == b.kv_dtype_bytes,
               "plan", "the new plan is for heads ", b.num_qo_heads, "/", b.num_kv_heads,
               ", head_dim ", b.head_dim, ", page_size ", b.page_size, ", KV bytes ",
               b.kv_dtype_bytes, "; this plan is for ", a.num_qo_heads, "/", a.num_kv_heads, ", ",
               a.head_dim, ", ", a.page_size, ", ", a.kv_dtype_bytes,
               " (update() keeps the shape: make a new plan instead)");
}

void SharedPlan::replace(std::shared_ptr<const PlanState> next) {
  TA_CHECK_ARG(next != nullptr, "plan", "null plan state");
  {
    const std::lock_guard<std::mutex> lock(mu_);
    check_replaceable(state_->plan, next->plan);
    state_.swap(next);
  }
  // `next` now holds the old state: when this was its last holder, it is freed here, outside
  // the lock.
}

}  // namespace treeattn
