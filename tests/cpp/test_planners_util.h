// Helpers shared by the planner and cost-model tests: the planner list, GQA shapes, plan shapes
// and cost-model item summaries, and a float64 check of a plan on the CPU executor for a sample of
// queries.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "treeattn/cpu/compare.h"
#include "treeattn/cpu/executor.h"
#include "treeattn/cpu/random_inputs.h"
#include "treeattn/cpu/reference.h"
#include "treeattn/plan/cost/cost_model.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn::testing_util {

/// Every planner except auto, then auto.
inline std::vector<std::string> all_planners() { return planner_names(); }

struct Gqa {
  int32_t qo, kv;
};
inline const std::vector<Gqa>& gqa_shapes() {
  static const std::vector<Gqa> s = {{32, 8}, {32, 32}, {16, 1}, {28, 4}, {64, 8}};
  return s;
}

/// A PlanShape of `qo` / `kv` heads and `head_dim` (the other fields at their defaults).
inline PlanShape plan_shape(int32_t qo, int32_t kv, int32_t head_dim) {
  PlanShape s;
  s.num_qo_heads = qo;
  s.num_kv_heads = kv;
  s.head_dim = head_dim;
  return s;
}

/// `count` identical cost-model items of `rows` queries over `kv` tokens in tile class `tile`.
inline ItemSummary item_summary(TileClass tile, int32_t rows, int32_t kv, int64_t count) {
  ItemSummary it;
  it.rows = rows;
  it.kv_tokens = kv;
  it.tile = tile;
  it.count = count;
  return it;
}

/// Runs `plan` on the CPU executor for `sample` random queries (all when the tree has fewer) and
/// checks out and lse against the float64 oracle with compare_to_oracle's rule.
/// `inp` from random_inputs() for the plan's shape (generated once per tree and shape).
inline void expect_plan_matches_reference(const PrefixTree& tree, const Plan& plan,
                                          const RandomInputs& inp, int32_t sample, uint64_t seed) {
  const PlanShape& s = plan.shape;
  const HostAttentionInputs in = host_inputs(inp, s.num_qo_heads, s.num_kv_heads, s.head_dim);
  std::vector<int32_t> qs;
  const int32_t nq = tree.num_queries();
  if (nq <= sample) {
    for (int32_t q = 0; q < nq; ++q) qs.push_back(q);
  } else {
    std::mt19937_64 rng(seed);
    std::vector<char> picked(nq, 0);
    while (static_cast<int32_t>(qs.size()) < sample) {
      const int32_t q = static_cast<int32_t>(rng() % static_cast<uint64_t>(nq));
      if (!picked[q]) {
        picked[q] = 1;
        qs.push_back(q);
      }
    }
  }
  const int64_t row = static_cast<int64_t>(s.num_qo_heads) * s.head_dim;
  std::vector<double> ref(nq * row, 0.0), ref_lse(static_cast<size_t>(nq) * s.num_qo_heads, 0.0);
  std::vector<float> out(nq * row, std::nanf("")), lse(ref_lse.size(), std::nanf(""));
  reference_attention(tree, in, qs, ref.data(), ref_lse.data());
  execute_plan_cpu(plan, in, qs, out.data(), lse.data());
  const OracleComparison c = compare_to_oracle(ref.data(), ref_lse.data(), out.data(), lse.data(),
                                               s.num_qo_heads, s.head_dim, qs, OutputDtype::kFp32);
  EXPECT_TRUE(c.pass) << plan.planner << ": " << c.describe();
}

/// Same, generating the inputs.
inline void expect_plan_matches_reference(const PrefixTree& tree, const Plan& plan, int32_t sample,
                                          uint64_t seed) {
  const PlanShape& s = plan.shape;
  expect_plan_matches_reference(
      tree, plan,
      random_inputs(tree, s.num_qo_heads, s.num_kv_heads, s.head_dim, /*bf16=*/false, seed), sample,
      seed);
}

}  // namespace treeattn::testing_util
