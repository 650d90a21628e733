// GPU tests of the deep kM16 config's cluster pairs (set_pair_m16, tile::use_pair_m16): two CTAs of
// a cluster split an item's KV tiles; the second stores its merged state into the first's shared
// memory, and the first merges it with its own and writes. Small trees whose plans run the pairs
// (the planners whose kM16 items are long enough: query and auto, fasttree, node, pat; final
// outputs, partial slots and the merge), fp16/bf16, head dims 64/128 (256 never pairs), page sizes
// 1-256, fp8 caches, items whose second half is empty or a tile shorter, a forced head loop; each
// checked element-wise against the float64 oracle with pairs on and off. Determinism with padding
// pairs (headroom 3); a captured graph of pairs replayed after the plan's update is
// DecodeGpu.GraphReplayAfterAppend's 16/1 case. PairM16Small is sized for compute-sanitizer.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "treeattn/kernels/decode.h"
#include "treeattn/kernels/device_plan.h"
#include "treeattn/plan/layout.h"
#include "treeattn/plan/tile_policy.h"
#include "treeattn/tree/levels.h"

namespace treeattn::gpu_test {
namespace {

/// Restores the pair and head-loop settings when a test ends, however it ends.
struct RestoreSettings {
  bool pair = pair_m16();
  ~RestoreSettings() {
    set_pair_m16(pair);
    set_kv_heads_per_cta(0);
  }
};

int sm_count() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  return sms;
}

int cc_major() {
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  return major;
}

/// True when the launcher runs `plan`'s kM16 items as cluster pairs with `hpc` KV heads per CTA
/// (set_pair_m16(true); the deep config: not wide).
bool runs_pairs(const Plan& plan, int kv_heads, int hpc) {
  const PlanLayout layout = plan_layout(plan);
  const int sms = sm_count();
  const int64_t ctas = layout.m16_items_planned * ((kv_heads + hpc - 1) / hpc);
  return cc_major() >= 9 && !tile::use_wide_m16(layout.m16_items_planned * kv_heads, sms) &&
         tile::use_pair_m16(ctas, layout.class_items_planned[0], layout.class_kv_tokens_planned[0],
                            sms, plan.shape.head_dim);
}

struct PairCase {
  const char* levels;
  const char* planner;
  bool bf16;
  KvDType kv;
  int heads_per_cta;  ///< 0: the tile policy's choice
};

void run_pair_cases(const PairCase* cases, size_t n, uint64_t seed0) {
  RestoreSettings restore;
  for (size_t i = 0; i < n; ++i) {
    const PairCase& pc = cases[i];
    LevelsCase lc = levels_case(pc.levels, pc.planner, pc.bf16, seed0 + i);
    lc.c.seed = seed0 + 1000 + i;
    lc.c.kv_dtype = pc.kv;
    lc.c.sample_queries = 64;
    SCOPED_TRACE(lc.c.describe() + " " + pc.levels);
    set_kv_heads_per_cta(pc.heads_per_cta);
    const Plan plan = make_case_plan(lc.tree, lc.c);
    const int hpc = pc.heads_per_cta > 0 ? std::min(pc.heads_per_cta, lc.c.num_kv_heads) : 1;
    ASSERT_TRUE(runs_pairs(plan, lc.c.num_kv_heads, hpc))
        << "the case should run the kM16 cluster pairs";
    CaseInputs in;
    fill_inputs(lc.tree, lc.c, lc.c.seed, &in);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    DevicePlan dp;
    dp.upload(plan, nullptr);
    for (const bool on : {true, false}) {
      SCOPED_TRACE(on ? "pairs on" : "pairs off");
      set_pair_m16(on);
      std::vector<uint16_t> out;
      std::vector<float> lse;
      run_and_fetch(dp, in, nullptr, nullptr, &out, &lse);
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
      expect_matches_oracle(lc.tree, lc.c, in, out, lse);
    }
  }
}

TEST(PairM16Gpu, EveryPlannerAgainstTheOracle) {
  TA_REQUIRE_GPU();
  if (cc_major() < 9) GTEST_SKIP() << "cluster pairs need sm_90";
  constexpr KvDType kSame = KvDType::kSame;
  const PairCase cases[] = {
      // the smallest FastTree line (auto takes the query plan: final outputs, no merge)
      {"N=1,2,64 C=8,256,32 heads=16/1 dim=128 page=16", "query", false, kSame, 0},
      {"N=1,2,64 C=8,256,32 heads=16/1 dim=128 page=16", "auto", true, kSame, 0},
      // partial slots and the merge: split-KV query items, shared nodes' items
      {"N=1,2 C=3000,100 heads=16/1 dim=128 page=16", "query", false, kSame, 0},
      {"N=1,2,2 C=400,300,200 heads=8/1 dim=64 page=16", "fasttree", true, kSame, 0},
      {"N=1,2,2 C=400,300,200 heads=8/1 dim=64 page=16", "pat", false, kSame, 0},
      // one-tile leaves beside long items: the second CTA of a leaf's pair has no tile
      {"N=1,2,4 C=1000,600,9 heads=8/1 dim=64 page=16", "node", true, kSame, 0},
      {"N=1,2,4 C=1000,600,9 heads=8/1 dim=64 page=16", "fasttree", false, kSame, 0},
      // odd tile counts (the second half one tile shorter), pages 1 to 256, head dim 64
      {"N=1,2 C=200,9 heads=8/1 dim=64 page=1", "query", false, kSame, 0},
      {"N=1,8 C=333,77 heads=8/1 dim=64 page=256", "query", true, kSame, 0},
      {"N=1,8 C=333,77 heads=8/1 dim=64 page=7", "query", false, kSame, 0},
      {"N=1,4 C=2000,100 heads=16/1 dim=128 page=64", "query", true, kSame, 0},
      // fp8 caches
      {"N=1,16 C=700,60 heads=16/1 dim=128 page=16", "query", false, KvDType::kFloat8E4M3, 0},
      {"N=1,8 C=333,77 heads=8/1 dim=64 page=32", "query", true, KvDType::kFloat8E5M2, 0},
      // a forced head loop: both CTAs of a pair walk the same KV heads, a pair barrier each
      {"N=1,8 C=500,30 heads=32/8 dim=128 page=16", "query", false, kSame, 4},
      {"N=1,8 C=500,30 heads=24/3 dim=64 page=16", "query", true, KvDType::kFloat8E4M3, 2},
  };
  run_pair_cases(cases, sizeof(cases) / sizeof(cases[0]), 61000);
}

TEST(PairM16Gpu, PairM16Small) {
  TA_REQUIRE_GPU();
  if (cc_major() < 9) GTEST_SKIP() << "cluster pairs need sm_90";
  const PairCase cases[] = {
      {"N=1,2,8 C=8,130,32 heads=16/1 dim=128 page=16", "query", false, KvDType::kSame, 0},
      {"N=1,2,4 C=1000,600,9 heads=8/1 dim=64 page=16", "node", true, KvDType::kSame, 0},
  };
  run_pair_cases(cases, sizeof(cases) / sizeof(cases[0]), 62000);
}

TEST(PairM16Gpu, DeterministicWithPaddingPairs) {
  TA_REQUIRE_GPU();
  if (cc_major() < 9) GTEST_SKIP() << "cluster pairs need sm_90";
  RestoreSettings restore;
  set_pair_m16(true);
  for (const auto& [levels, planner] :
       {std::pair<const char*, const char*>{"N=1,2,16 C=8,256,70 heads=16/1 dim=128 page=16",
                                            "query"},
        {"N=1,2,4 C=1000,600,9 heads=8/1 dim=64 page=16", "node"}}) {
    LevelsCase lc = levels_case(levels, planner, false, 77);
    lc.c.seed = 78;
    SCOPED_TRACE(lc.c.describe());
    const Plan plan = make_case_plan(lc.tree, lc.c);
    ASSERT_TRUE(runs_pairs(plan, lc.c.num_kv_heads, 1));
    expect_deterministic(lc.tree, lc.c, plan, 5);
  }
}

}  // namespace
}  // namespace treeattn::gpu_test
