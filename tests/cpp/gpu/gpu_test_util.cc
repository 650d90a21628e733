// GPU test helpers (see gpu_test_util.h): the shared check harness (DeviceInputs, oracle_sample,
// compare_to_sample: compare_to_oracle's rule, treeattn/cpu/compare.h: the fp16 / bf16 bound,
// empty rows exactly o = 0 and lse = -inf, NaN never passes) with failures reported to gtest,
// planned runs through DevicePlan, and the determinism check.
#include "gpu_test_util.h"

#include <cstring>
#include <sstream>

#include "treeattn/common/half.h"
#include "treeattn/tree/levels.h"

namespace treeattn::gpu_test {

std::string Case::describe() const {
  std::ostringstream os;
  os << "planner=" << planner << (bf16 ? " bf16" : " fp16") << " heads=" << num_qo_heads << "/"
     << num_kv_heads << " dim=" << head_dim << (combined_kv ? " combined-kv" : "")
     << " seed=" << seed;
  if (sm_scale != 0.f) os << " sm_scale=" << sm_scale;
  if (paths_group != 0) os << " paths_group=" << paths_group;
  if (kv_dtype != KvDType::kSame)
    os << " kv=" << kv_dtype_name(kv_dtype) << " k_scale=" << k_scale << " v_scale=" << v_scale;
  return os.str();
}

std::vector<float> from_bits(const std::vector<uint16_t>& b, bool bf16) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i)
    v[i] = bf16 ? bf16_bits_to_float(b[i]) : half_bits_to_float(b[i]);
  return v;
}

void fill_inputs(const PrefixTree& tree, const Case& c, uint64_t seed, CaseInputs* in) {
  try {
    RandomInputSpec spec{c.num_qo_heads, c.num_kv_heads, c.head_dim, c.bf16, seed};
    spec.kv_dtype = c.kv_dtype;
    spec.k_scale = c.k_scale;
    spec.v_scale = c.v_scale;
    spec.sm_scale = c.sm_scale;
    in->fill(tree, spec, c.combined_kv ? KvLayout::kCombined : KvLayout::kSplit, c.with_lse);
  } catch (const std::exception& e) {
    FAIL() << "DeviceInputs::fill threw: " << e.what();
  }
}

void run_and_fetch(const DevicePlan& dp, const CaseInputs& in, cudaStream_t stream,
                   cudaGraphExec_t graph, std::vector<uint16_t>* out, std::vector<float>* lse) {
  try {
    in.run_and_fetch(dp, in.args, stream, graph, out, lse);
  } catch (const std::exception& e) {
    FAIL() << "DeviceInputs::run_and_fetch threw: " << e.what();
  }
}

void expect_matches_oracle(const PrefixTree& tree, const Case& c, const CaseInputs& in,
                           const std::vector<uint16_t>& out, const std::vector<float>& lse) {
  try {
    const OracleSample ref = oracle_sample(tree, in.spec(), c.sample_queries);
    const OracleComparison r = compare_to_sample(ref, out, c.with_lse ? &lse : nullptr);
    EXPECT_TRUE(r.pass) << r.describe() << " (" << ref.queries.size() << " queries checked)";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the oracle check threw: " << e.what();
  }
}

Plan make_case_plan(const PrefixTree& tree, const Case& c) {
  PlanOptions o = make_plan_options(c.planner, c.num_qo_heads, c.num_kv_heads, c.head_dim);
  o.kv_dtype_bytes = is_fp8(c.kv_dtype) ? 1 : 2;
  o.paths_group = c.paths_group;
  return make_plan(tree, o);
}

void plan_run_check(const PrefixTree& tree, const Case& c) {
  SCOPED_TRACE(c.describe());
  Plan plan;
  try {
    plan = make_case_plan(tree, c);
  } catch (const std::exception& e) {
    FAIL() << "make_plan threw: " << e.what();
  }
  CaseInputs in;
  fill_inputs(tree, c, c.seed * 7919 + 13, &in);
  if (::testing::Test::HasFatalFailure()) return;
  std::vector<uint16_t> out;
  std::vector<float> lse;
  try {
    DevicePlan dp;
    dp.upload(plan, nullptr);
    run_and_fetch(dp, in, nullptr, nullptr, &out, &lse);
  } catch (const std::exception& e) {
    FAIL() << "DevicePlan threw: " << e.what();
  }
  if (::testing::Test::HasFatalFailure()) return;
  SCOPED_TRACE("items=" + std::to_string(plan.items.size()) +
               " slots=" + std::to_string(plan.num_slots));
  expect_matches_oracle(tree, c, in, out, lse);
}

void expect_deterministic(const PrefixTree& tree, const Case& c, const Plan& plan, int runs) {
  CaseInputs in;
  fill_inputs(tree, c, 99, &in);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  DevicePlan small, large;
  small.upload(plan, nullptr, 1.0);
  large.upload(plan, nullptr, 3.0);
  std::vector<uint16_t> ref_out, out;
  std::vector<float> ref_lse, lse;
  run_and_fetch(small, in, nullptr, nullptr, &ref_out, &ref_lse);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  expect_matches_oracle(tree, c, in, ref_out, ref_lse);
  for (int run = 0; run < runs; ++run) {
    for (const DevicePlan* dp : {&small, &large}) {
      run_and_fetch(*dp, in, nullptr, nullptr, &out, &lse);
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
      ASSERT_EQ(out, ref_out) << "output bits differ: run " << run
                              << (dp == &small ? " headroom 1" : " headroom 3");
      ASSERT_EQ(0, std::memcmp(lse.data(), ref_lse.data(), lse.size() * sizeof(float)))
          << "LSE bits differ: run " << run;
    }
  }
}

LevelsCase levels_case(const char* levels, const char* planner, bool bf16, uint64_t page_seed) {
  const LevelSpec spec = parse_levels(levels);
  LevelsCase lc{tree_from_levels(spec, PageLayout::kShuffled, page_seed), Case{}};
  lc.c.planner = planner;
  lc.c.bf16 = bf16;
  lc.c.num_qo_heads = spec.shape.num_qo_heads;
  lc.c.num_kv_heads = spec.shape.num_kv_heads;
  lc.c.head_dim = spec.shape.head_dim;
  return lc;
}

void levels_run_check(const char* levels, const char* planner, bool bf16, uint64_t page_seed,
                      uint64_t input_seed, int32_t sample_queries) {
  LevelsCase lc = levels_case(levels, planner, bf16, page_seed);
  lc.c.seed = input_seed;
  lc.c.sample_queries = sample_queries;
  plan_run_check(lc.tree, lc.c);
}

}  // namespace treeattn::gpu_test
