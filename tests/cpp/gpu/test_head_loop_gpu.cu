// GPU tests of the kM16 head loop (one CTA walks several KV heads of an item, one after the
// other): heads per CTA forced through set_kv_heads_per_cta (dividing and not dividing the KV
// head count, up to all heads) and chosen by the tile policy on trees with thousands of short
// leaves; head dims 64/128/256, fp16/bf16, leaves of one and of several KV tiles per head, page
// sizes that split tiles across pages. Checked element-wise against the float64 oracle
// (plan_run_check). HeadLoopSmall is sized for compute-sanitizer.
#include <gtest/gtest.h>

#include <string>

#include "gpu_test_util.h"
#include "treeattn/kernels/decode.h"

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

}  // namespace
}  // namespace treeattn::gpu_test
