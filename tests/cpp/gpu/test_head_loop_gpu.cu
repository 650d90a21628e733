// GPU tests of the kM16 head loop (one CTA walks several KV heads of an item): level trees with
// thousands of short leaves, so that the kM16 launch is many waves deep and the launcher gives
// each CTA several heads, over head dims 64/128/256, fp16/bf16, head counts that the heads per
// CTA divide and do not divide, leaves of one and of several KV tiles per head, and page sizes
// that split tiles across pages. Checked element-wise against the float64 oracle
// (plan_run_check).
#include <gtest/gtest.h>

#include <string>

#include "gpu_test_util.h"
#include "treeattn/tree/builders.h"

namespace treeattn::gpu_test {
namespace {

struct HeadLoopCase {
  const char* levels;
  const char* planner;
  bool bf16;
};

// 3 KV heads cannot be split evenly; 40-token leaves take two 32-token tiles per head.
constexpr HeadLoopCase kCases[] = {
    {"N=1,4096 C=32,12 heads=32/8 dim=128 page=16", "query", false},
    {"N=1,4096 C=32,12 heads=32/8 dim=128 page=16", "fasttree", true},
    {"N=1,2048 C=64,40 heads=24/3 dim=64 page=1", "query", true},
    {"N=1,2048 C=64,40 heads=24/3 dim=64 page=32", "node", false},
    {"N=1,4,4096 C=16,16,9 heads=32/32 dim=64 page=16", "pat", false},
    {"N=1,2048 C=32,40 heads=16/4 dim=256 page=64", "query", false},
    {"N=1,2048 C=32,40 heads=16/4 dim=256 page=256", "auto", true},
};

TEST(DecodeGpu, HeadLoopManyShortLeaves) {
  TA_REQUIRE_GPU();
  int idx = 0;
  for (const HeadLoopCase& hc : kCases) {
    const LevelSpec spec = parse_levels(hc.levels);
    const PrefixTree tree = tree_from_levels(spec, PageLayout::kShuffled, 311 + idx);
    Case c;
    c.planner = hc.planner;
    c.bf16 = hc.bf16;
    c.num_qo_heads = spec.shape.num_qo_heads;
    c.num_kv_heads = spec.shape.num_kv_heads;
    c.head_dim = spec.shape.head_dim;
    c.seed = 41000 + idx++;
    c.sample_queries = 24;
    SCOPED_TRACE(std::string(hc.levels) + " planner=" + hc.planner);
    plan_run_check(tree, c);
  }
}

}  // namespace
}  // namespace treeattn::gpu_test
