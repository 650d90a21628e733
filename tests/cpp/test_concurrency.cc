// Thread safety of the plan side, also built with ThreadSanitizer (TREEATTN_TSAN, tools/test.sh):
// SharedPlan::replace() on one thread while several threads run snapshots of the same SharedPlan
// on the CPU executor (every output bitwise equal to a single-threaded run of the snapshot's
// plan), make_plan() of every planner on one const tree from several threads (each plan runs
// bitwise like one made alone), and SharedPlan's refusals (another shape, null) leaving the state
// unchanged, with a held snapshot outliving the replace.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "treeattn/cpu/executor.h"
#include "treeattn/cpu/random_inputs.h"
#include "treeattn/plan/planner.h"
#include "treeattn/plan/shared_plan.h"
#include "treeattn/tree/levels.h"

namespace treeattn {
namespace {

constexpr int32_t kQo = 8, kKv = 1, kDim = 64;

PlanOptions options(const std::string& planner) { return PlanOptions{planner, kQo, kKv, kDim}; }

PrefixTree levels(const char* spec) { return tree_from_levels(parse_levels(spec)); }

/// out and lse of `plan` on `in`, as one buffer (out, then lse).
std::vector<float> run(const Plan& plan, const HostAttentionInputs& in) {
  const size_t n = static_cast<size_t>(plan.shape.num_queries) * kQo;
  std::vector<float> r(n * kDim + n);
  execute_plan_cpu(plan, in, r.data(), r.data() + n * kDim);
  return r;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The reproducer in C++: plans of 64 and 2 queries (8/1 heads, dim 64) swapped in and out
// by one thread while three threads decode the shared plan.
TEST(Concurrency, ReplaceWhileRunning) {
  const PrefixTree big = levels("N=1,64 C=96,8");
  PrefixTree small = levels("N=1,2 C=40,8");
  ASSERT_LE(small.num_pages, big.num_pages);  // one set of inputs serves both trees
  const std::shared_ptr<const PlanState> a = make_plan_state(big, options("auto"));
  const std::shared_ptr<const PlanState> b = make_plan_state(small, options("query"));
  const RandomInputs data = random_inputs(big, kQo, kKv, kDim, false, 7);
  const HostAttentionInputs in = host_inputs(data, kQo, kKv, kDim);
  const std::vector<float> want_a = run(a->plan, in), want_b = run(b->plan, in);

  SharedPlan shared(a);
  std::atomic<bool> stop{false};
  std::atomic<int> mismatches{0}, runs_a{0}, runs_b{0};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      shared.replace(i % 2 ? a : b);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t)
    readers.emplace_back([&] {
      for (int i = 0; i < 12; ++i) {
        const std::shared_ptr<const PlanState> s = shared.snapshot();
        const bool is_a = s == a;
        (is_a ? runs_a : runs_b).fetch_add(1);
        if (!bitwise_equal(run(s->plan, in), is_a ? want_a : want_b)) mismatches.fetch_add(1);
      }
    });
  for (std::thread& r : readers) r.join();
  stop.store(true);
  writer.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(runs_a.load() + runs_b.load(), 36);
}

// Planning is reentrant: every planner on one const tree from four threads at once.
TEST(Concurrency, PlannersOnOneTreeFromSeveralThreads) {
  const PrefixTree tree =
      tree_from_levels(parse_levels("N=1,3,12 C=80,30,9"), PageLayout::kShuffled, 3);
  const RandomInputs data = random_inputs(tree, kQo, kKv, kDim, false, 11);
  const HostAttentionInputs in = host_inputs(data, kQo, kKv, kDim);
  const std::vector<std::string>& names = planner_names();
  std::vector<std::vector<float>> want;
  std::vector<std::string> chosen;
  for (const std::string& p : names) {
    const Plan plan = make_plan(tree, options(p));
    want.push_back(run(plan, in));
    chosen.push_back(plan.chosen_planner);
  }
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < names.size(); ++k) {
        const size_t i = (k + static_cast<size_t>(t)) % names.size();  // different orders
        const Plan plan = make_plan(tree, options(names[i]));
        if (plan.chosen_planner != chosen[i] || !bitwise_equal(run(plan, in), want[i]))
          mismatches.fetch_add(1);
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Concurrency, ReplaceRefusesAnotherShapeAndKeepsSnapshots) {
  const PrefixTree tree = levels("N=1,4 C=64,16");
  const std::shared_ptr<const PlanState> a = make_plan_state(tree, options("node"));
  const std::shared_ptr<const PlanState> b = make_plan_state(tree, options("query"));
  PlanOptions wide = options("node");
  wide.num_qo_heads = 16;
  const std::shared_ptr<const PlanState> other = make_plan_state(tree, wide);
  EXPECT_EQ(a->tree.num_queries(), 4);
  EXPECT_EQ(a->max_page_id, tree.num_pages - 1);

  SharedPlan shared(a);
  std::shared_ptr<const PlanState> held = shared.snapshot();
  try {
    shared.replace(other);
    FAIL() << "a plan for 16/1 heads replaced one for 8/1";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("plan: the new plan is for heads 16/1", 0), 0u)
        << e.what();
  }
  EXPECT_THROW(shared.replace(nullptr), std::invalid_argument);
  EXPECT_EQ(shared.snapshot(), a);
  shared.replace(b);
  EXPECT_EQ(shared.snapshot(), b);
  EXPECT_EQ(held, a);  // the run holding the old snapshot keeps it
  EXPECT_EQ(held->plan.planner, "node");
  EXPECT_THROW(SharedPlan(nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace treeattn
