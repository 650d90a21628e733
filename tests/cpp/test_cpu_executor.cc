// The query and node planners end to end on the CPU: check_coverage() passes and the float32
// executor matches the float64 oracle (compare_to_oracle, out and lse) for random trees (deep
// chains, fan-out, one-token nodes, many roots, internal queries), a few workload lines, GQA
// ratios 1, 4, 7, 16, 32 (MQA), head dims 64/128/256, fp16 and bf16 inputs; plus the executor's
// query filter and its detection of empty rows, the random inputs' value stream, and the oracle
// on a sample of queries (oracle_sample) against the full one.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_tree_util.h"
#include "treeattn/common/half.h"
#include "treeattn/cpu/compare.h"
#include "treeattn/cpu/executor.h"
#include "treeattn/cpu/random_inputs.h"
#include "treeattn/cpu/reference.h"
#include "treeattn/plan/coverage.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/levels.h"
#include "treeattn/tree/random_tree.h"
#include "treeattn/tree/workloads.h"

namespace treeattn {
namespace {

struct Shape {
  int qo, kv, dim;
};

PlanOptions options(const std::string& planner, Shape s) {
  PlanOptions o;
  o.planner = planner;
  o.num_qo_heads = s.qo;
  o.num_kv_heads = s.kv;
  o.head_dim = s.dim;
  return o;
}

/// Plans `t`, checks coverage, runs executor and oracle on fresh inputs, compares every element.
void check_planner(const PrefixTree& t, const std::string& planner, Shape s, uint64_t seed,
                   bool bf16 = false, const std::vector<int32_t>& sample = {}) {
  SCOPED_TRACE(planner + " heads " + std::to_string(s.qo) + "/" + std::to_string(s.kv) + " dim " +
               std::to_string(s.dim) + " seed " + std::to_string(seed));
  const Plan plan = make_plan(t, options(planner, s));
  ASSERT_NO_THROW(check_coverage(t, plan));
  const RandomInputs data = random_inputs(t, s.qo, s.kv, s.dim, bf16, seed);
  const HostAttentionInputs in = host_inputs(data, s.qo, s.kv, s.dim);
  const size_t n = static_cast<size_t>(t.num_queries()) * s.qo * s.dim;
  std::vector<double> ref(n, 0.0), ref_lse(static_cast<size_t>(t.num_queries()) * s.qo, 0.0);
  reference_attention(t, in, sample, ref.data(), ref_lse.data());
  std::vector<float> out(n, NAN), lse(ref_lse.size(), NAN);  // poisoned
  execute_plan_cpu(plan, in, sample, out.data(), lse.data());
  std::vector<int32_t> qs = sample;
  if (qs.empty())
    for (int32_t q = 0; q < t.num_queries(); ++q) qs.push_back(q);
  const OracleComparison c = compare_to_oracle(ref.data(), ref_lse.data(), out.data(), lse.data(),
                                               s.qo, s.dim, qs, OutputDtype::kFp32);
  EXPECT_TRUE(c.pass) << c.describe();
  if (!sample.empty()) {  // rows outside the sample are left untouched (still NaN)
    std::vector<char> in_sample(t.num_queries(), 0);
    for (const int32_t q : sample) in_sample[q] = 1;
    for (int32_t q = 0; q < t.num_queries(); ++q)
      if (!in_sample[q]) EXPECT_TRUE(std::isnan(out[static_cast<size_t>(q) * s.qo * s.dim]));
  }
}

RandomTreeOptions small_opts() {
  RandomTreeOptions r;
  r.max_nodes = 24;
  r.max_queries = 12;
  r.max_tokens_per_node = 140;
  return r;
}

TEST(CpuExecutor, RandomTreesQueryAndNode) {
  const Shape shapes[] = {{4, 4, 64}, {8, 2, 64}, {28, 4, 64}, {16, 1, 64}, {32, 1, 64}};
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const PrefixTree t = random_tree(seed, small_opts());
    const Shape s = shapes[seed % 5];
    check_planner(t, "query", s, seed);
    check_planner(t, "node", s, seed + 1000);
  }
}

TEST(CpuExecutor, HeadDimsAndBf16) {
  const PrefixTree t = random_tree(77, small_opts());
  for (const int dim : {64, 128, 256}) {
    check_planner(t, "node", {8, 2, dim}, dim);
    check_planner(t, "query", {7, 1, dim}, dim + 1, /*bf16=*/true);
  }
}

TEST(CpuExecutor, PageSizesAndTileEdges) {
  for (const int page : {1, 16, 32}) {
    const std::string spec = "N=1,3,5 C=127,17,129 heads=8/2 page=" + std::to_string(page);
    const PrefixTree t = tree_from_levels(parse_levels(spec), PageLayout::kShuffled, 3);
    check_planner(t, "query", {8, 2, 64}, page);
    check_planner(t, "node", {8, 2, 64}, page + 1);
  }
}

TEST(CpuExecutor, QuerySplitKvAndNodeRowCaps) {
  // 2 queries x 1 KV head -> the query planner splits each ~4.3K-token path into chunks.
  const PrefixTree t = tree_from_levels(parse_levels("N=1,2 C=4000,300"));
  PlanOptions o = options("query", {4, 1, 64});
  const Plan p = make_plan(t, o);
  EXPECT_GT(p.items.size(), 2u);
  EXPECT_GT(p.num_slots, 0);
  for (const WorkItem& it : p.items) EXPECT_GE(it.kv_tokens, 256);
  check_planner(t, "query", {4, 1, 64}, 5);
  // 40 queries under one root with group 16: at most 8 queries per item.
  const PrefixTree wide = tree_from_levels(parse_levels("N=1,40 C=100,20"));
  o.planner = "node";
  o.num_qo_heads = 16;
  const Plan pn = make_plan(wide, o);
  for (const WorkItem& it : pn.items) EXPECT_LE(it.num_rows * 16, 128);
  check_planner(wide, "node", {16, 1, 64}, 6);
}

TEST(CpuExecutor, WorkloadLinesSampled) {
  for (const char* key : {"fasttree:0", "pat:17", "deft:0"}) {
    Workload w = find_workload(key);
    const PrefixTree t = build_workload(w, PageLayout::kShuffled, 1);
    std::vector<int32_t> sample;
    for (int32_t q = 0; q < t.num_queries(); q += std::max(1, t.num_queries() / 5))
      sample.push_back(q);
    check_planner(t, "node", {4, 1, 64}, 11, false, sample);
    check_planner(t, "query", {4, 1, 64}, 12, false, sample);
  }
}

TEST(CpuExecutor, EmptyFinalRowIsAPlannerBug) {
  const PrefixTree t = tree_from_levels(parse_levels("N=1,2 C=40,20"));
  Plan p = make_plan(t, options("query", {4, 1, 64}));
  // Mask every range away from every row: rows see no token.
  p.masks.assign(p.ranges.size(), 0);
  for (WorkItem& it : p.items) it.mask_begin = it.range_begin;
  const RandomInputs d = random_inputs(t, 4, 1, 64, false, 1);
  HostAttentionInputs in = host_inputs(d, 4, 1, 64);
  std::vector<float> out(2 * 4 * 64);
  EXPECT_THROW(execute_plan_cpu(p, in, out.data(), nullptr), std::logic_error);
  in.num_kv_heads = 2;
  in.num_qo_heads = 8;
  EXPECT_THROW(execute_plan_cpu(p, in, out.data(), nullptr), std::invalid_argument);
}

// sm_scale: 0 means 1/sqrt(head_dim); otherwise finite and > 0 (the kernels take the row max on
// raw scores), for the executor and the oracle alike.
TEST(CpuExecutor, SmScaleMustBeZeroOrPositiveAndFinite) {
  const PrefixTree t = tree_from_levels(parse_levels("N=1,2 C=40,20"));
  const Plan p = make_plan(t, options("node", {4, 1, 64}));
  const RandomInputs d = random_inputs(t, 4, 1, 64, false, 2);
  std::vector<float> out(2 * 4 * 64);
  std::vector<double> ref(out.size()), ref_lse(2 * 4);
  for (const float bad : {-1.f, -1e-30f, NAN, INFINITY, -INFINITY}) {
    HostAttentionInputs in = host_inputs(d, 4, 1, 64);
    in.sm_scale = bad;
    for (int which = 0; which < 2; ++which) {
      try {
        if (which == 0)
          execute_plan_cpu(p, in, out.data(), nullptr);
        else
          reference_attention(t, in, {}, ref.data(), ref_lse.data());
        ADD_FAILURE() << "sm_scale " << bad << " accepted";
      } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()).rfind("sm_scale: ", 0), 0u) << e.what();
      }
    }
  }
  HostAttentionInputs in = host_inputs(d, 4, 1, 64);
  in.sm_scale = 0.125f;  // == the default for head_dim 64: the same bits
  std::vector<float> given(out.size());
  execute_plan_cpu(p, in, given.data(), nullptr);
  in.sm_scale = 0.f;
  execute_plan_cpu(p, in, out.data(), nullptr);
  EXPECT_EQ(given, out);
}

TEST(CpuExecutor, RandomInputsAreFreshAndRounded) {
  const PrefixTree t = tree_from_levels(parse_levels("N=1,2 C=40,20"));
  const RandomInputs a = random_inputs(t, 4, 1, 64, false, 1);
  const RandomInputs b = random_inputs(t, 4, 1, 64, false, 2);
  const RandomInputs a2 = random_inputs(t, 4, 1, 64, false, 1);
  EXPECT_EQ(a.k.size(), static_cast<size_t>(t.num_pages) * t.page_size * 64);
  EXPECT_EQ(a.q.size(), 2u * 4 * 64);
  EXPECT_NE(a.k, b.k);
  EXPECT_EQ(a.k, a2.k);
  int zeros = 0;
  for (const float x : a.v) {
    EXPECT_GE(x, -1.f);
    EXPECT_LE(x, 1.f);
    zeros += x == 0.f;
  }
  EXPECT_LT(zeros, 10);
}

TEST(RandomInputs, OneSplitmixSequenceOverQThenKThenV) {
  // The documented stream (random_values.h): the generator's outputs in order, q scaled by 4.
  const PrefixTree t = tree_from_levels(parse_levels("N=1,3 C=21,9 page=8"));
  const uint64_t seed = 77;
  uint64_t state = seed * 0xD1B54A32D192ED03ull + 0x5DEECE66Dull;
  auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<float>((z ^ (z >> 31)) >> 40) * 0x1.0p-23f - 1.0f;
  };
  for (const bool bf16 : {false, true}) {
    const RandomInputs r = random_inputs(t, 4, 2, 8, bf16, seed);
    auto round = [bf16](float x) { return bf16 ? round_to_bf16(x) : round_to_fp16(x); };
    state = seed * 0xD1B54A32D192ED03ull + 0x5DEECE66Dull;
    for (const float x : r.q) ASSERT_EQ(x, round(4.0f * next()));
    for (const float x : r.k) ASSERT_EQ(x, round(next()));
    for (const float x : r.v) ASSERT_EQ(x, round(next()));
  }
}

TEST(OracleSample, EqualsTheFullOracleOnTheSampledQueries) {
  RandomTreeOptions ro = small_opts();
  ro.shuffle_pages = true;
  const std::vector<PrefixTree> trees = {
      tree_from_levels(parse_levels("N=1,4,16 C=37,21,5 page=16"), PageLayout::kShuffled, 3),
      random_tree(5, ro), random_tree(6, ro)};
  for (const PrefixTree& t : trees)
    for (const bool bf16 : {false, true}) {
      const RandomInputSpec spec{8, 2, 64, bf16, 19};
      const OracleSample s = oracle_sample(t, spec, 5);
      EXPECT_EQ(s.queries, sample_queries(t.num_queries(), 5));
      EXPECT_EQ(s.bf16, bf16);
      const RandomInputs data = random_inputs(t, 8, 2, 64, bf16, 19);
      const size_t row = 8 * 64;
      std::vector<double> ref(t.num_queries() * row), ref_lse(t.num_queries() * 8);
      reference_attention(t, host_inputs(data, 8, 2, 64), s.queries, ref.data(), ref_lse.data());
      ASSERT_EQ(s.out.size(), s.queries.size() * row);
      for (size_t i = 0; i < s.queries.size(); ++i) {
        const size_t q = static_cast<size_t>(s.queries[i]);
        for (size_t e = 0; e < row; ++e) ASSERT_EQ(s.out[i * row + e], ref[q * row + e]) << q;
        for (size_t h = 0; h < 8; ++h) ASSERT_EQ(s.lse[i * 8 + h], ref_lse[q * 8 + h]) << q;
      }
    }
}

TEST(OracleSample, UsesTheSpecsSoftmaxScale) {
  const PrefixTree t = tree_from_levels(parse_levels("N=1,4 C=70,9"));
  RandomInputSpec spec{8, 2, 64, false, 23};
  const RandomInputs data = random_inputs(t, 8, 2, 64, false, 23);
  for (const float scale : {0.f, 0.125f, 1.5f}) {
    spec.sm_scale = scale;
    const OracleSample s = oracle_sample(t, spec, 4);
    std::vector<double> ref(t.num_queries() * 8 * 64), ref_lse(t.num_queries() * 8);
    reference_attention(t,
                        host_inputs(data.q.data(), data.k.data(), data.v.data(), 8, 2, 64, scale),
                        s.queries, ref.data(), ref_lse.data());
    ASSERT_EQ(s.queries.size(), 4u);
    for (size_t i = 0; i < s.queries.size(); ++i) {
      const size_t q = static_cast<size_t>(s.queries[i]);
      for (size_t e = 0; e < 8 * 64; ++e) ASSERT_EQ(s.out[i * 8 * 64 + e], ref[q * 8 * 64 + e]);
      for (size_t h = 0; h < 8; ++h) ASSERT_EQ(s.lse[i * 8 + h], ref_lse[q * 8 + h]) << scale;
    }
  }
  // 1.5 is not the default 1/8: the LSEs differ
  spec.sm_scale = 0.f;
  const OracleSample d = oracle_sample(t, spec, 4);
  spec.sm_scale = 1.5f;
  EXPECT_NE(oracle_sample(t, spec, 4).lse, d.lse);
  for (const float bad : {-1.f, std::nanf(""), INFINITY}) {
    spec.sm_scale = bad;
    testing_util::expect_invalid([&] { oracle_sample(t, spec, 4); }, {"sm_scale"});
  }
}

TEST(OracleSample, StopsBeforeTheWorkBound) {
  const PrefixTree t = tree_from_levels(parse_levels("N=1,8 C=100,10"));
  const RandomInputSpec spec{4, 1, 64, false, 1};
  const double per_query = 110.0 * 4 * 64 * 2;  // context x heads x head_dim x 2
  EXPECT_EQ(oracle_sample(t, spec, 8).queries.size(), 8u);
  EXPECT_EQ(oracle_sample(t, spec, 8, 3 * per_query).queries.size(), 3u);
  EXPECT_EQ(oracle_sample(t, spec, 8, 1.0).queries, std::vector<int32_t>{0});  // one at least
  EXPECT_THROW(oracle_sample(t, spec, 0), std::invalid_argument);
  EXPECT_THROW(oracle_sample(t, RandomInputSpec{0, 1, 64, false, 1}, 8), std::invalid_argument);
}

}  // namespace
}  // namespace treeattn
