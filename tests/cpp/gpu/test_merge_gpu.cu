// GPU test of the LSE merge against the CPU executor's AttentionState merge, with empty partial
// states: a node-planner plan (every query merges a root partial and a leaf partial) whose items
// are then masked so that query 0's root partial and query 2's leaf partial are empty (each result
// is the other partial alone) and query 1's partials are all empty (its result must be exactly
// o = 0, lse = -inf; the executor refuses such a query, so its reference is set by hand).
// Partials and outputs are poisoned before the run; compare_to_oracle checks every element.
// Determinism: the same bits run after run and for two grid sizes (workspaces laid out with
// headroom 1 and 3, so every launch has 1x or 3x the CTAs). Deep paths: queries with more merge
// slots than the merge stages in shared memory at a time (kMergeChunk), for head counts that
// leave the last head block of a merge CTA partly empty. Partial precisions: fp32 and half
// partials (set_partial_precision) on deep, wide and masked plans, each against the oracle on every
// query, deterministic, and the switch refusing unknown values.
// A NaN in K of the shared root: the rows that attend it get a NaN LSE in their root partial, and
// the merge (both partial precisions) gives those rows o = lse = NaN in every element, the other
// heads stay finite; the query planner's unmerged plan gives the same.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "treeattn/cpu/compare.h"
#include "treeattn/cpu/executor.h"
#include "treeattn/cpu/random_inputs.h"
#include "treeattn/kernels/decode.h"
#include "treeattn/kernels/device_plan.h"
#include "treeattn/plan/layout.h"
#include "treeattn/plan/tile_policy.h"
#include "treeattn/tree/levels.h"

namespace treeattn::gpu_test {
namespace {

/// Masks item `i` of `plan`: row r stays visible iff keep(query of row r).
template <typename Keep>
void mask_item(Plan* plan, size_t i, Keep keep) {
  WorkItem& it = plan->items[i];
  uint64_t bits = 0;
  for (int32_t r = 0; r < it.num_rows; ++r)
    if (keep(plan->rows[it.row_begin + r].query)) bits |= 1ull << r;
  it.mask_begin = static_cast<int32_t>(plan->masks.size());
  for (int32_t j = 0; j < it.num_ranges; ++j) plan->masks.push_back(bits);
}

TEST(DecodeGpu, MergeWithEmptyPartials) {
  TA_REQUIRE_GPU();
  for (bool bf16 : {false, true}) {
    const PrefixTree tree = tree_from_levels(
        parse_levels("N=1,4 C=40,20 heads=8/2 dim=128 page=16"), PageLayout::kShuffled, 5);
    Case c;
    c.planner = "node";
    c.bf16 = bf16;
    c.num_qo_heads = 8;
    c.num_kv_heads = 2;
    c.head_dim = 128;
    SCOPED_TRACE(c.describe());
    Plan plan = make_case_plan(tree, c);
    ASSERT_GT(plan.num_slots, 0) << "the node planner should merge root and leaf partials";
    for (size_t i = 0; i < plan.items.size(); ++i) {
      if (plan.items[i].num_rows > 1) {
        mask_item(&plan, i, [](int32_t q) { return q != 0 && q != 1; });  // the shared root
      } else {
        const int32_t q = plan.rows[plan.items[i].row_begin].query;
        if (q == 1 || q == 2) mask_item(&plan, i, [](int32_t) { return false; });  // a leaf
      }
    }
    validate_plan(plan);

    CaseInputs in;
    fill_inputs(tree, c, 777, &in);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    std::vector<uint16_t> out_bits;
    std::vector<float> lse;
    DevicePlan dp;
    dp.upload(plan, nullptr);
    run_and_fetch(dp, in, nullptr, nullptr, &out_bits, &lse);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());

    const int64_t nq = tree.num_queries(), H = c.num_qo_heads, D = c.head_dim;
    std::vector<float> ref(nq * H * D, 0.f), ref_lse(nq * H, -INFINITY);  // query 1: empty
    const RandomInputs host =  // the values fill_inputs wrote on the device
        random_inputs(tree, c.num_qo_heads, c.num_kv_heads, c.head_dim, bf16, in.spec().seed);
    execute_plan_cpu(plan, host_inputs(host, c.num_qo_heads, c.num_kv_heads, c.head_dim), {0, 2, 3},
                     ref.data(), ref_lse.data());
    const std::vector<double> ref64(ref.begin(), ref.end()),
        ref_lse64(ref_lse.begin(), ref_lse.end());
    const std::vector<float> out = from_bits(out_bits, bf16);
    const OracleComparison r =
        compare_to_oracle(ref64.data(), ref_lse64.data(), out.data(), lse.data(), H, D,
                          sample_queries(static_cast<int32_t>(nq), static_cast<int32_t>(nq)),
                          bf16 ? OutputDtype::kBf16 : OutputDtype::kFp16);
    EXPECT_TRUE(r.pass) << r.describe();
    EXPECT_EQ(r.empty_rows, H) << "query 1's heads must all be empty";
  }
}

TEST(DecodeGpu, NanInKeyReachesMergedRows) {
  TA_REQUIRE_GPU();
  struct Restore {
    PartialPrecision p = partial_precision();
    ~Restore() { set_partial_precision(p); }
  } restore;
  for (PartialPrecision pp : {PartialPrecision::kFloat32, PartialPrecision::kHalf}) {
    for (const char* planner : {"node", "fasttree", "query"}) {
      SCOPED_TRACE(std::string(planner) + (pp == PartialPrecision::kHalf ? " half" : " fp32"));
      set_partial_precision(pp);
      // contiguous pages: the root's first token is page 0, slot 0 (8 queries share it)
      const PrefixTree tree = tree_from_levels(
          parse_levels("N=1,8 C=40,20 heads=8/2 dim=128 page=16"), PageLayout::kContiguous, 0);
      Case c;
      c.planner = planner;
      c.num_qo_heads = 8;
      c.num_kv_heads = 2;
      c.head_dim = 128;
      const Plan plan = make_case_plan(tree, c);
      if (std::string(planner) != "query") ASSERT_GT(plan.num_slots, 0) << "a merged plan";
      CaseInputs in;
      fill_inputs(tree, c, 13, &in);
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
      // K of token 0, kv head 1, element 5 := NaN (split layout: [pages, P, kv heads, D], fp16)
      const uint16_t nan_bits = 0x7E00;
      TA_CUDA_OK(cudaMemcpy(static_cast<uint16_t*>(const_cast<void*>(in.args.k)) + 1 * 128 + 5,
                            &nan_bits, sizeof nan_bits, cudaMemcpyHostToDevice));
      DevicePlan dp;
      dp.upload(plan, nullptr);
      std::vector<uint16_t> out_bits;
      std::vector<float> lse;
      run_and_fetch(dp, in, nullptr, nullptr, &out_bits, &lse);
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
      const std::vector<float> out = from_bits(out_bits, false);
      for (int q = 0; q < tree.num_queries(); ++q) {
        for (int h = 0; h < 8; ++h) {
          const bool attends = h / 4 == 1;  // qo heads 4..7 read kv head 1
          const float l = lse[static_cast<size_t>(q) * 8 + h];
          ASSERT_EQ(std::isnan(l), attends) << "lse of query " << q << " head " << h;
          for (int d = 0; d < 128; ++d) {
            const float x = out[(static_cast<size_t>(q) * 8 + h) * 128 + d];
            if (attends)
              ASSERT_TRUE(std::isnan(x)) << "query " << q << " head " << h << " elem " << d;
            else
              ASSERT_TRUE(std::isfinite(x)) << "query " << q << " head " << h << " elem " << d;
          }
        }
      }
    }
  }
}

TEST(DecodeGpu, DeterministicAcrossRunsAndGridSizes) {
  TA_REQUIRE_GPU();
  struct Line {
    const char* levels;
    const char* planner;
    bool bf16;
  };
  // many slots per query, several tile classes, one KV head (16/1), masked items, a flatten
  // line whose kM16 config is wide at headroom 3 if taken from the capacity (deep as planned), and
  // paths-split's pieces of masked root-path groups
  const Line lines[] = {
      {"N=1,4,16,64 C=300,100,50,20 heads=32/8 dim=128 page=16", "fasttree", false},
      {"N=1,4,16,64 C=300,100,50,20 heads=32/8 dim=128 page=16", "pat", false},
      {"N=1,2,8,128 C=700,64,40,9 heads=16/1 dim=64 page=1", "node-chunk", true},
      {"N=1,32 C=2000,30 heads=32/32 dim=128 page=32", "flatten", true},
      {"N=1,4,16,64 C=300,100,50,20 heads=32/8 dim=128 page=16", "paths-split", false},
      {"N=1,2,8,128 C=700,64,40,9 heads=16/1 dim=64 page=1", "paths-split", true}};
  for (const Line& line : lines) {
    LevelsCase lc = levels_case(line.levels, line.planner, line.bf16, 3);
    const PrefixTree& tree = lc.tree;
    Case& c = lc.c;
    c.sample_queries = 1 << 20;  // every query
    SCOPED_TRACE(c.describe() + " " + line.levels);
    const Plan plan = make_case_plan(tree, c);
    ASSERT_GT(plan.num_slots, 0) << "the line must merge partials";
    expect_deterministic(tree, c, plan, 20);
  }
}

TEST(DecodeGpu, MergeOfDeepPathsAcrossSlotChunks) {
  TA_REQUIRE_GPU();
  // a chain of 299 one-page nodes above 4 leaves: the node planner gives every query a partial
  // per node on its path (300 slots: three shared-memory chunks of the merge)
  std::string counts = "N=1", tokens = "C=3";
  for (int i = 1; i < 299; ++i) {
    counts += ",1";
    tokens += ",2";
  }
  counts += ",4";
  tokens += ",5";
  struct Shape {
    const char* heads;
    int dim;
    bool bf16;
  };
  // merge CTAs cover 8 / 4 / 2 heads (deep) or 32 / 16 / 8 (wide) at head_dim 64 / 128 / 256:
  // 12, 6 and 3 heads end on a partly empty head block of the deep variant
  for (const Shape& sh :
       {Shape{"12/4", 64, false}, Shape{"6/2", 128, true}, Shape{"3/1", 256, false}}) {
    const std::string spec =
        counts + " " + tokens + " heads=" + sh.heads + " dim=" + std::to_string(sh.dim) + " page=2";
    // alone (deep merge: few queries), then with 300 queries on the root's child (two slots
    // each): the mean list is short and the queries many, so the wide merge walks the 300-slot
    // lists of the deep queries
    for (bool mixed : {false, true}) {
      LevelsCase lc = levels_case(spec.c_str(), "node", sh.bf16, 11);
      if (mixed) {
        int32_t child = -1;
        for (size_t v = 0; v < lc.tree.nodes.size() && child < 0; ++v)
          if (lc.tree.nodes[v].alive && lc.tree.nodes[v].parent == 0)
            child = static_cast<int32_t>(v);
        ASSERT_GE(child, 0);
        for (int i = 0; i < 300; ++i) lc.tree.add_query(child);
      }
      lc.c.sample_queries = 1 << 20;  // every query
      SCOPED_TRACE(lc.c.describe() + (mixed ? " mixed" : " deep"));
      const Plan plan = make_case_plan(lc.tree, lc.c);
      int32_t most = 0;
      for (size_t q = 0; q + 1 < plan.merge_indptr.size(); ++q)
        most = std::max(most, plan.merge_indptr[q + 1] - plan.merge_indptr[q]);
      ASSERT_GT(most, 256) << "some query should merge more than two chunks of slots";
      const PlanLayout layout = plan_layout(plan);
      int sms = 0;
      ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
      EXPECT_EQ(tile::use_deep_merge(layout.merge_queries_planned, layout.merge_slots_planned,
                                     lc.c.num_qo_heads, lc.c.head_dim, sms),
                !mixed)
          << "the case should run the " << (mixed ? "wide" : "deep") << " merge";
      expect_deterministic(lc.tree, lc.c, plan, 3);
    }
  }
}

TEST(DecodeGpu, PartialPrecisions) {
  EXPECT_THROW(set_partial_precision(static_cast<PartialPrecision>(2)), std::invalid_argument);
  TA_REQUIRE_GPU();
  const PartialPrecision before = partial_precision();
  struct Restore {
    PartialPrecision p;
    ~Restore() { set_partial_precision(p); }
  } restore{before};
  struct Line {
    const char* levels;
    const char* planner;
  };
  // a deep chain (64 partials a query), many short partials under one root (flatten, masked),
  // a multi-level tree, one KV head, head dims 64 / 128 / 256
  std::string chain = "N=1", tokens = "C=40";
  for (int i = 1; i < 63; ++i) {
    chain += ",1";
    tokens += ",9";
  }
  const std::string deep = chain + ",4 " + tokens + ",7 heads=16/4 dim=128 page=4";
  const Line lines[] = {{deep.c_str(), "node"},
                        {"N=1,256 C=256,32 heads=32/8 dim=128 page=32", "flatten"},
                        {"N=1,4,16,64 C=300,100,50,20 heads=32/8 dim=64 page=16", "fasttree"},
                        {"N=1,2,8,128 C=700,64,40,9 heads=16/1 dim=256 page=1", "node-chunk"},
                        {"N=1,16,64 C=1024,256,32 heads=16/1 dim=128 page=16", "auto"}};
  for (PartialPrecision pp : {PartialPrecision::kFloat32, PartialPrecision::kHalf}) {
    set_partial_precision(pp);
    for (const Line& line : lines) {
      for (bool bf16 : {false, true}) {
        LevelsCase lc = levels_case(line.levels, line.planner, bf16, 17);
        lc.c.sample_queries = 1 << 20;  // every query
        SCOPED_TRACE(lc.c.describe() + " " + line.levels +
                     (pp == PartialPrecision::kHalf ? " half partials" : " fp32 partials"));
        const Plan plan = make_case_plan(lc.tree, lc.c);
        ASSERT_GT(plan.num_slots, 0) << "the line must merge partials";
        expect_deterministic(lc.tree, lc.c, plan, 2);
      }
    }
  }
}

}  // namespace
}  // namespace treeattn::gpu_test
