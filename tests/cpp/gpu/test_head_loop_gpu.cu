// GPU tests of the kM16 head loop (one CTA walks several KV heads of an item, one after the
// other): heads per CTA forced through set_kv_heads_per_cta (dividing and not dividing the KV
// head count, up to all heads) and chosen by the tile policy on trees with thousands of short
// leaves; head dims 64/128/256, fp16/bf16, leaves of one and of several KV tiles per head, page
// sizes that split tiles across pages. Checked element-wise against the float64 oracle
// (plan_run_check). HeadLoopSmall is sized for compute-sanitizer. The short kM16 config (2
// stages): plans of short leaves that run it, against the oracle, and bit for bit the output of
// the wide config (set_short_m16(false)), which computes the same tiles in the same order; with a
// forced head loop, head dims 64/128/256, fp16/bf16 and an fp8 cache.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "treeattn/kernels/decode.h"
#include "treeattn/kernels/device_plan.h"
#include "treeattn/plan/layout.h"
#include "treeattn/plan/tile_policy.h"

namespace treeattn::gpu_test {
namespace {

struct HeadLoopCase {
  const char* levels;
  const char* planner;
  bool bf16;
  int heads_per_cta;  ///< 0: the tile policy's choice
};

/// Restores the automatic choice when a test ends, however it ends.
struct ForcedHeadsPerCta {
  ~ForcedHeadsPerCta() { set_kv_heads_per_cta(0); }
};

void run_cases(const HeadLoopCase* cases, size_t n, uint64_t seed0) {
  ForcedHeadsPerCta restore;
  for (size_t i = 0; i < n; ++i) {
    const HeadLoopCase& hc = cases[i];
    set_kv_heads_per_cta(hc.heads_per_cta);
    SCOPED_TRACE(std::string(hc.levels) + " planner=" + hc.planner +
                 " heads_per_cta=" + std::to_string(hc.heads_per_cta));
    levels_run_check(hc.levels, hc.planner, hc.bf16, seed0 + i, seed0 + 1000 + i, 24);
  }
}

TEST(DecodeGpu, HeadLoopManyShortLeaves) {
  TA_REQUIRE_GPU();
  // 40-token leaves take two 32-token tiles per head; 3 of 8 and 2 of 3 heads leave a remainder.
  constexpr HeadLoopCase kCases[] = {
      {"N=1,4096 C=32,12 heads=32/8 dim=128 page=16", "query", false, 0},
      {"N=1,4096 C=32,12 heads=32/8 dim=128 page=16", "fasttree", true, 0},
      {"N=1,4,2048 C=16,16,9 heads=32/32 dim=64 page=16", "pat", false, 0},
      {"N=1,256 C=64,40 heads=32/8 dim=128 page=16", "query", false, 3},
      {"N=1,256 C=64,40 heads=24/3 dim=64 page=1", "query", true, 2},
      {"N=1,256 C=64,40 heads=24/3 dim=64 page=32", "node", false, 3},
      {"N=1,128 C=32,40 heads=16/4 dim=256 page=64", "query", false, 4},
      {"N=1,128 C=32,40 heads=16/4 dim=256 page=256", "auto", true, 3},
      {"N=1,4,64 C=100,16,70 heads=32/32 dim=128 page=32", "forge", true, 32},
  };
  run_cases(kCases, sizeof(kCases) / sizeof(kCases[0]), 52000);
}

TEST(DecodeGpu, HeadLoopSmall) {
  TA_REQUIRE_GPU();
  constexpr HeadLoopCase kCases[] = {
      {"N=1,16 C=32,40 heads=32/8 dim=128 page=16", "query", false, 3},
      {"N=1,16 C=32,40 heads=12/3 dim=64 page=32", "fasttree", true, 2},
  };
  run_cases(kCases, sizeof(kCases) / sizeof(kCases[0]), 53000);
}

TEST(DecodeGpu, ShortM16MatchesWideBitwise) {
  TA_REQUIRE_GPU();
  struct Restore {
    bool on = short_m16();
    ~Restore() {
      set_short_m16(on);
      set_kv_heads_per_cta(0);
    }
  } restore;
  struct ShortCase {
    const char* levels;
    const char* planner;
    bool bf16;
    KvDType kv;
    int heads_per_cta;
  };
  // leaves of 1-2 wide tiles (32 tokens) under shared nodes: the kM16 items are short and many
  const ShortCase cases[] = {
      {"N=1,512 C=256,32 heads=32/8 dim=128 page=16", "node", false, KvDType::kSame, 0},
      {"N=1,4,512 C=200,64,20 heads=16/1 dim=64 page=1", "fasttree", true, KvDType::kSame, 0},
      {"N=1,512 C=300,40 heads=16/4 dim=256 page=32", "node", false, KvDType::kSame, 2},
      {"N=1,16,512 C=100,50,17 heads=32/8 dim=128 page=8", "fasttree", true, KvDType::kSame, 3},
      {"N=1,512 C=256,32 heads=32/8 dim=128 page=16", "node", true, KvDType::kFloat8E4M3, 0},
      {"N=1,512 C=128,61 heads=16/2 dim=64 page=16", "node", false, KvDType::kFloat8E5M2, 0},
      // fp8 with a forced head loop: the next head's Q lands where the last head's V tile was
      {"N=1,512 C=256,32 heads=32/8 dim=128 page=16", "node", false, KvDType::kFloat8E4M3, 3},
      {"N=1,512 C=128,61 heads=16/2 dim=64 page=16", "node", true, KvDType::kFloat8E5M2, 2},
  };
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  uint64_t seed = 2100;
  for (const ShortCase& sc : cases) {
    LevelsCase lc = levels_case(sc.levels, sc.planner, sc.bf16, seed);
    lc.c.seed = seed++;
    lc.c.kv_dtype = sc.kv;
    lc.c.sample_queries = 48;
    SCOPED_TRACE(lc.c.describe() + " " + sc.levels);
    set_kv_heads_per_cta(sc.heads_per_cta);
    const Plan plan = make_case_plan(lc.tree, lc.c);
    const PlanLayout layout = plan_layout(plan);
    ASSERT_TRUE(
        tile::use_wide_m16(layout.m16_items_planned * lc.c.num_kv_heads, sms) &&
        tile::use_short_m16(layout.class_items_planned[0], layout.class_kv_tokens_planned[0]))
        << "the case should run the short kM16 config";
    CaseInputs in;
    fill_inputs(lc.tree, lc.c, lc.c.seed, &in);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    DevicePlan dp;
    dp.upload(plan, nullptr);
    std::vector<uint16_t> out_short, out_wide;
    std::vector<float> lse_short, lse_wide;
    set_short_m16(true);
    run_and_fetch(dp, in, nullptr, nullptr, &out_short, &lse_short);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    expect_matches_oracle(lc.tree, lc.c, in, out_short, lse_short);
    set_short_m16(false);
    run_and_fetch(dp, in, nullptr, nullptr, &out_wide, &lse_wide);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    EXPECT_EQ(out_short, out_wide) << "the short and wide configs' output bits differ";
    EXPECT_EQ(0, std::memcmp(lse_short.data(), lse_wide.data(), lse_short.size() * sizeof(float)))
        << "the short and wide configs' LSE bits differ";
  }
}

}  // namespace
}  // namespace treeattn::gpu_test
