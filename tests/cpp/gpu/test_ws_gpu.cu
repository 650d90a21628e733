// GPU tests of the warp-specialized Hopper kernel of the grouped tile classes (src/kernels/sm90/),
// forced with set_grouped_kernel(kWarpSpecialized): every planner's plans of small level lines
// with fp16/bf16 x head_dim 64/128 x GQA ratios 32/8, 28/4, 32/1, 16/1, 64/8 x page sizes 1, 16,
// 256 (in two tests by ratio); masked (flatten) kM64/kM128 items; items shorter than a tile and at
// the tile boundaries; items long enough to wrap the stage ring more than twice; bitwise
// determinism across runs and grid sizes (headroom 1 and 3); kAuto's choice per class and a plan
// running on both kernels; a small case for compute-sanitizer (WsGpu.SanitizerSmall); an fp8 KV
// cache (the producer converts) on every grouped class, masked and wrapping the stage ring, with
// K/V scales that saturate e4m3 and large ones; large softmax scales, under which the lazy rescale
// of O runs mid-item, on both kernels. Every
// query's output is poisoned first and every element checked against the float64 oracle
// (compare_to_oracle: NaN fails). The suites skip where the kernel cannot run (no sm_90 device, or
// a build without sm_90a code).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "treeattn/kernels/decode.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/levels.h"

namespace treeattn::gpu_test {
namespace {

/// Runs the grouped classes on the warp-specialized kernel for the scope; back to kLegacy after.
struct ForceWs {
  ForceWs() { set_grouped_kernel(GroupedKernel::kWarpSpecialized); }
  ~ForceWs() { set_grouped_kernel(GroupedKernel::kLegacy); }
};

#define TA_REQUIRE_WS()                                                                    \
  do {                                                                                     \
    TA_REQUIRE_GPU();                                                                      \
    if (!grouped_kernel_supported(GroupedKernel::kWarpSpecialized))                        \
      GTEST_SKIP() << "the warp-specialized kernel needs an sm_90 device and sm_90a code " \
                      "(TREEATTN_CUDA_ARCHS with 90a); it did not run";                    \
  } while (0)

/// kM64 / kM128 items of a plan (masked ones counted separately): what the tests make sure the
/// warp-specialized kernel ran on.
struct GroupedItems {
  int m64 = 0, m128 = 0, masked = 0;
  void add(const Plan& plan) {
    for (const WorkItem& it : plan.items) {
      if (it.tile == TileClass::kM64) ++m64;
      if (it.tile == TileClass::kM128) ++m128;
      if (it.tile != TileClass::kM16 && it.mask_begin >= 0) ++masked;
    }
  }
};

/// plan_run_check of a level line on the grouped kernel set_grouped_kernel() chose, every query
/// checked, with softmax scale `sm_scale` (0: 1/sqrt(head_dim)).
void ws_levels_check(const std::string& levels, const std::string& planner, bool bf16,
                     uint64_t seed, GroupedItems* seen, float sm_scale = 0.f) {
  LevelsCase lc = levels_case(levels.c_str(), planner.c_str(), bf16, seed);
  lc.c.seed = seed + 5000;
  lc.c.sm_scale = sm_scale;
  lc.c.sample_queries = 1 << 20;  // every query, every element
  SCOPED_TRACE(levels + " planner=" + planner);
  if (seen != nullptr) seen->add(make_case_plan(lc.tree, lc.c));
  plan_run_check(lc.tree, lc.c);
}

std::string line(const char* nodes, int qo, int kv, int dim, int page) {
  return std::string(nodes) + " heads=" + std::to_string(qo) + "/" + std::to_string(kv) +
         " dim=" + std::to_string(dim) + " page=" + std::to_string(page);
}

TEST(WsGpu, SwitchRefusesUnknownKernels) {
  const GroupedKernel before = grouped_kernel();
  EXPECT_THROW(set_grouped_kernel(static_cast<GroupedKernel>(7)), std::invalid_argument);
  EXPECT_EQ(grouped_kernel(), before);  // a refused value changes nothing
  EXPECT_TRUE(grouped_kernel_supported(GroupedKernel::kLegacy));
  EXPECT_TRUE(grouped_kernel_supported(GroupedKernel::kAuto));
}

TEST(WsGpu, AutoPicksTheKernelPerClassFromThePlan) {
  TA_REQUIRE_WS();
  // the node planner: the root (600 tokens, 64 queries x 4 heads) in two kM128 items, long enough
  // for the warp-specialized kernel; four nodes of 16 queries in kM64 items of 40 tokens, too
  // short (tile::ws_pays_off); the leaves kM16
  LevelsCase lc = levels_case("N=1,4,64 C=600,40,5 heads=32/8 dim=128 page=16", "node", false, 31);
  lc.c.seed = 32;
  lc.c.sample_queries = 1 << 20;  // every query
  const Plan plan = make_case_plan(lc.tree, lc.c);
  const PlanLayout layout = plan_layout(plan, 2.0);
  ASSERT_GT(layout.class_items_planned[1], 0);
  ASSERT_GT(layout.class_items_planned[2], 0);
  struct Restore {
    ~Restore() { set_grouped_kernel(GroupedKernel::kLegacy); }
  } restore;
  set_grouped_kernel(GroupedKernel::kAuto);
  EXPECT_EQ(grouped_kernel_for(layout, TileClass::kM16), GroupedKernel::kLegacy);
  EXPECT_EQ(grouped_kernel_for(layout, TileClass::kM64), GroupedKernel::kLegacy);
  EXPECT_EQ(grouped_kernel_for(layout, TileClass::kM128), GroupedKernel::kWarpSpecialized);
  plan_run_check(lc.tree, lc.c);  // both kernels in one call
  set_grouped_kernel(GroupedKernel::kWarpSpecialized);
  EXPECT_EQ(grouped_kernel_for(layout, TileClass::kM64), GroupedKernel::kWarpSpecialized);
  set_grouped_kernel(GroupedKernel::kLegacy);
  EXPECT_EQ(grouped_kernel_for(layout, TileClass::kM128), GroupedKernel::kLegacy);
  EXPECT_THROW(grouped_kernel_for(layout, static_cast<TileClass>(3)), std::invalid_argument);
}

TEST(WsGpu, SanitizerSmall) {
  TA_REQUIRE_WS();
  ForceWs ws;
  // kM64 (split KV over the consumers, a tail tile), kM128 (rows of the second consumer partly
  // past the item), and both masked; fp16 and bf16, head_dim 64 and 128
  GroupedItems seen;
  ws_levels_check("N=1,16 C=150,5 heads=32/8 dim=128 page=16", "node", false, 61, &seen);
  ws_levels_check("N=1,24 C=200,7 heads=32/8 dim=64 page=16", "node", true, 62, &seen);
  ws_levels_check("N=1,2,64 C=130,40,9 heads=32/32 dim=64 page=16", "flatten", false, 63, &seen);
  ws_levels_check("N=1,2,64 C=130,40,9 heads=32/8 dim=128 page=32", "flatten", true, 64, &seen);
  // an fp8 cache (the producer converts): kM64, and masked kM64 + kM128 at both head dims
  // (heads 32/32 would plan no kM128 item: 9 kM16 + 4 kM64)
  for (const char* levels : {"N=1,16 C=150,5 heads=32/8 dim=128 page=16",
                             "N=1,2,64 C=130,40,9 heads=32/8 dim=64 page=16",
                             "N=1,2,64 C=130,40,9 heads=32/8 dim=128 page=32"}) {
    LevelsCase lc = levels_case(levels, levels[4] == '1' ? "node" : "flatten", false, 65);
    lc.c.kv_dtype = KvDType::kFloat8E4M3;
    lc.c.k_scale = 0.37f;
    lc.c.v_scale = 2.f;
    lc.c.sample_queries = 1 << 20;
    SCOPED_TRACE(std::string(levels) + " fp8_e4m3");
    seen.add(make_case_plan(lc.tree, lc.c));
    plan_run_check(lc.tree, lc.c);
  }
  EXPECT_GT(seen.m64, 0);
  EXPECT_GT(seen.m128, 0);
  EXPECT_GT(seen.masked, 0);
}

struct Ratio {
  int qo, kv;
};

/// The sweep over planners x fp16/bf16 x head_dim 64/128 x page sizes 1, 16, 256 at the GQA ratios
/// `ratios`: a root shared by 32 queries (kM128 items, or kM64 at 16/1 after splits), 4 nodes of 8
/// queries (kM64), leaves of one query; 300 and 70 tokens leave tail tiles of both tile sizes.
/// Each (dtype, head dim) cell takes two planners per (ratio, page), rotating through the list by
/// its own count, so its cases see every planner (some plan only kM64 items here, e.g. fasttree,
/// others only kM128 at some ratios, e.g. pat at 16/1); every cell must have run both classes.
/// Seeds from 700 + seed_index.
void planner_sweep(const std::vector<Ratio>& ratios, size_t seed_index) {
  constexpr int kPages[] = {1, 16, 256};
  const std::vector<std::string>& planners = planner_names();
  ASSERT_FALSE(planners.empty());
  const char* kNodes = "N=1,4,32 C=300,70,9";
  GroupedItems seen[2][2];  // [bf16][hd128]
  size_t cell_cases[2][2] = {};
  for (const Ratio& r : ratios)
    for (int page : kPages)
      for (bool bf16 : {false, true})
        for (int dim : {64, 128}) {
          size_t& n = cell_cases[bf16][dim == 128];
          for (size_t k : {n % planners.size(), (n + planners.size() / 2) % planners.size()})
            ws_levels_check(line(kNodes, r.qo, r.kv, dim, page), planners[k], bf16,
                            700 + seed_index, &seen[bf16][dim == 128]);
          ++n;
          ++seed_index;
        }
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 2; ++h) {
      EXPECT_GT(seen[b][h].m64, 0) << "bf16=" << b << " hd128=" << h;
      EXPECT_GT(seen[b][h].m128, 0) << "bf16=" << b << " hd128=" << h;
    }
}

// The sweep in two halves (two processes can run them side by side).
TEST(WsGpu, PlannersDtypesHeadDimsPagesGroups4To32) {
  TA_REQUIRE_WS();
  ForceWs ws;
  planner_sweep({{32, 8}, {28, 4}, {32, 1}}, 0);
}

TEST(WsGpu, PlannersDtypesHeadDimsPagesGroups16And8) {
  TA_REQUIRE_WS();
  ForceWs ws;
  planner_sweep({{16, 1}, {64, 8}}, 36);
}

TEST(WsGpu, EveryPlannerOnGroupedLines) {
  TA_REQUIRE_WS();
  ForceWs ws;
  // every planner on two lines with large shared nodes, both dtypes and head dims
  const char* kLines[] = {"N=1,64 C=520,12", "N=1,8,64 C=260,130,6"};
  int idx = 0;
  for (const std::string& planner : planner_names())
    for (const char* nodes : kLines) {
      const bool bf16 = idx % 2 == 1;
      const int dim = (idx / 2) % 2 ? 64 : 128;
      ws_levels_check(line(nodes, 32, 8, dim, 16), planner, bf16, 900 + idx, nullptr);
      ++idx;
    }
}

TEST(WsGpu, MaskedFlattenItems) {
  TA_REQUIRE_WS();
  ForceWs ws;
  struct MaskedLine {
    const char* nodes;
    int qo, kv, dim, page;
    bool bf16;
  };
  // flatten's block-diagonal masks: consumers skip the tiles none of their rows sees
  constexpr MaskedLine kLines[] = {
      {"N=1,2,64 C=130,40,9", 32, 32, 128, 16, false},
      {"N=1,2,64 C=130,40,9", 32, 8, 64, 1, true},
      {"N=1,4,32 C=300,70,9", 28, 4, 128, 256, false},
      {"N=1,4,32 C=300,70,9", 32, 1, 64, 16, true},
      {"N=1,8,64 C=200,100,20", 64, 8, 128, 16, true},
      {"N=1,4,32 C=260,50,3", 16, 1, 128, 1, false},
  };
  GroupedItems seen;
  uint64_t seed = 1100;
  for (const MaskedLine& m : kLines)
    ws_levels_check(line(m.nodes, m.qo, m.kv, m.dim, m.page), "flatten", m.bf16, seed++, &seen);
  EXPECT_GT(seen.masked, 0) << "no masked kM64/kM128 item was run";
}

/// The node planner puts a root of `len` tokens shared by `queries` queries (32/8 heads) in one
/// item per KV head: 16 queries x 4 heads = 64 rows (kM64, 64-token tiles split over the
/// consumers), 32 or 64 queries: 128 or 256 rows (kM128 items, 128-token tiles). Every
/// combination of lens x queries x dims, dtype and page size rotating.
void root_items_check(const std::vector<int>& lens, const std::vector<int>& queries,
                      const std::vector<int>& dims, uint64_t seed0) {
  GroupedItems seen;
  int idx = 0;
  for (int len : lens)
    for (int q : queries)
      for (int dim : dims) {
        const std::string nodes = "N=1," + std::to_string(q) + " C=" + std::to_string(len) + ",2";
        constexpr int kPages[] = {16, 1, 256};
        ws_levels_check(line(nodes.c_str(), 32, 8, dim, kPages[idx % 3]), "node", idx % 2 == 1,
                        seed0 + idx, &seen);
        ++idx;
      }
  EXPECT_GT(seen.m64, 0);
  EXPECT_GT(seen.m128, 0);
}

TEST(WsGpu, ShortItemsAndTileBoundaries) {
  TA_REQUIRE_WS();
  ForceWs ws;
  // root lengths below, at and past one and two tiles of each size
  root_items_check({1, 5, 63, 64, 65, 127, 128, 129, 192, 257}, {16, 64}, {64, 128}, 1300);
}

TEST(WsGpu, LongItemsWrapTheStageRing) {
  TA_REQUIRE_WS();
  ForceWs ws;
  // more than twice the tiles of each stage ring (kM64: 6 or 8 stages of 64 tokens; kM128: 2 or 6
  // of 128), so every stage's barriers go through both phase parities more than once
  root_items_check({2100}, {16, 32}, {64, 128}, 1500);
}

TEST(WsGpu, LargeLogitsRescaleMidItem) {
  TA_REQUIRE_WS();
  // Softmax scales of 1 and 0.4 (the default is 1/sqrt(head_dim)): a row's scaled scores spread
  // over 10-20 powers of two, so some tiles after the first raise a row's max by more than the
  // lazy rescale's slack (softmax.cuh) and the warp rescales O mid-item, while the others keep the
  // stale max. Both kernels (the mma.sync / wgmma one rescales every tile); kM64 and kM128 root
  // items (node: 16 and 32 queries x 4 heads) long enough to wrap the stage ring.
  const char* kNodes[] = {"N=1,16 C=2100,5", "N=1,32 C=2100,5", "N=1,32 C=700,300"};
  ForceWs restore;  // kLegacy again at the end, whatever fails
  GroupedItems seen;
  int idx = 0;
  for (const GroupedKernel kernel : {GroupedKernel::kWarpSpecialized, GroupedKernel::kLegacy}) {
    set_grouped_kernel(kernel);
    for (const char* nodes : kNodes)
      for (const int dim : {64, 128}) {
        SCOPED_TRACE(kernel == GroupedKernel::kLegacy ? "legacy" : "ws");
        ws_levels_check(line(nodes, 32, 8, dim, idx % 2 == 0 ? 16 : 1), "node", idx % 2 == 1,
                        1900 + idx, &seen, idx % 3 == 0 ? 0.4f : 1.f);
        ++idx;
      }
  }
  EXPECT_GT(seen.m64, 0);
  EXPECT_GT(seen.m128, 0);
}

TEST(WsGpu, Fp8KvCacheEveryGroupedClass) {
  TA_REQUIRE_WS();
  ForceWs ws;
  struct Fp8Line {
    const char* nodes;
    const char* planner;
    int qo, kv, dim, page;
  };
  // kM64 / kM128 (node), masked (flatten), long items that wrap the stage ring, a 16/1 root
  const Fp8Line kLines[] = {
      {"N=1,2,64 C=130,40,9", "node", 32, 8, 128, 16},
      {"N=1,2,64 C=130,40,9", "node", 32, 32, 64, 1},
      {"N=1,2,64 C=130,40,9", "flatten", 32, 8, 64, 16},
      {"N=1,4,32 C=300,70,9", "flatten", 28, 4, 128, 256},
      {"N=1,16 C=2100,5", "node", 32, 8, 128, 32},
      {"N=1,32 C=1500,7", "node", 32, 8, 64, 16},
      {"N=1,64 C=520,12", "fasttree", 16, 1, 128, 16},
      {"N=1,8,64 C=260,130,6", "pat", 64, 8, 128, 1},
  };
  constexpr KvDType kTypes[] = {KvDType::kFloat8E4M3, KvDType::kFloat8E5M2};
  constexpr float kScales[] = {1.f, 0.37f, 0x1.0p-10f, 64.f};
  GroupedItems seen;
  int idx = 0;
  for (const Fp8Line& l : kLines) {
    for (KvDType kv : kTypes) {
      // bf16 on every other line, so both fp8 types run with fp16 and with bf16; the scales
      // rotate so each fp8 type gets all four K and all four V scales
      LevelsCase lc = levels_case(line(l.nodes, l.qo, l.kv, l.dim, l.page).c_str(), l.planner,
                                  (idx / 2) % 2 == 1, 1700 + idx);
      lc.c.kv_dtype = kv;
      lc.c.k_scale = kScales[(idx + idx / 4) % 4];
      lc.c.v_scale = kScales[(idx + idx / 4 + 1) % 4];
      lc.c.seed = 1800 + idx;
      lc.c.sample_queries = 1 << 20;  // every query
      SCOPED_TRACE(std::string(l.nodes) + " " + l.planner + " " + kv_dtype_name(kv));
      const Plan plan = make_case_plan(lc.tree, lc.c);
      seen.add(plan);
      // the fp8 plan really runs its grouped classes on the warp-specialized kernel
      const PlanLayout layout = plan_layout(plan);
      for (int cls : {1, 2})
        if (layout.class_items_planned[cls] > 0)
          EXPECT_EQ(grouped_kernel_for(layout, static_cast<TileClass>(cls)),
                    GroupedKernel::kWarpSpecialized);
      plan_run_check(lc.tree, lc.c);
      ++idx;
    }
  }
  EXPECT_GT(seen.m64, 0);
  EXPECT_GT(seen.m128, 0);
  EXPECT_GT(seen.masked, 0);
}

TEST(WsGpu, DeterministicAcrossRunsAndGridSizes) {
  TA_REQUIRE_WS();
  ForceWs ws;
  struct Line {
    const char* levels;
    const char* planner;
  };
  const Line lines[] = {{"N=1,4,16,64 C=300,100,50,20 heads=32/8 dim=128 page=16", "fasttree"},
                        {"N=1,4,32 C=700,150,9 heads=64/8 dim=64 page=1", "node"},
                        {"N=1,2,64 C=130,40,9 heads=32/8 dim=128 page=32", "flatten"},
                        {"N=1,16,64 C=900,64,5 heads=16/1 dim=128 page=16", "auto"}};
  for (const Line& ln : lines) {
    LevelsCase lc = levels_case(ln.levels, ln.planner, /*bf16=*/&ln - lines >= 2, 3);
    const PrefixTree& tree = lc.tree;
    Case& c = lc.c;
    c.sample_queries = 1 << 20;  // every query
    SCOPED_TRACE(c.describe() + " " + ln.levels);
    const Plan plan = make_case_plan(tree, c);
    GroupedItems seen;
    seen.add(plan);
    ASSERT_GT(seen.m64 + seen.m128, 0) << "the line must have kM64/kM128 items";
    expect_deterministic(tree, c, plan, 5);
  }
}

}  // namespace
}  // namespace treeattn::gpu_test
