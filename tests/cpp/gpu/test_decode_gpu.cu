// GPU tests of DevicePlan and run_decode: every planner x fp16/bf16 x head dims 64/128/256 x GQA
// ratios (32/32, 32/8, 28/4, 16/1, 64/8, 32/1) x page sizes (1, 16, 32, 64, 256) on random trees
// and on workload lines with shuffled pages; the combined vLLM KV layout; CUDA-graph capture and
// replay over a later plan that fits; reallocation on upload; argument validation with messages;
// small kM64/kM128 groups, masked and unmasked (the wgmma path on sm_90a), for compute-sanitizer.
// The cross product is sampled (a rotating schedule) so the suite stays well under two minutes.
// Outputs are poisoned first and checked against the float64 oracle with compare_to_oracle
// (treeattn/cpu/compare.h). Every planner of planner_names() runs: one that throws fails.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.h"
#include "treeattn/cpu/random_inputs.h"
#include "treeattn/cpu/reference.h"
#include "treeattn/kernels/decode.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/levels.h"
#include "treeattn/tree/random_tree.h"
#include "treeattn/tree/workloads.h"

namespace treeattn::gpu_test {
namespace {

struct Heads {
  int32_t qo, kv;
};
constexpr Heads kHeads[] = {{32, 32}, {32, 8}, {28, 4}, {16, 1}, {64, 8}, {32, 1}};
constexpr int32_t kPageSizes[] = {1, 16, 32, 64, 256};
constexpr int32_t kHeadDims[] = {64, 128, 256};

TEST(DecodeGpu, RandomTreesAllPlanners) {
  TA_REQUIRE_GPU();
  const std::vector<std::string>& planners = planner_names();
  ASSERT_FALSE(planners.empty());
  int idx = 0;
  for (size_t pi = 0; pi < planners.size(); ++pi) {
    for (int i = 0; i < 6; ++i, ++idx) {
      Case c;
      c.planner = planners[pi];
      c.bf16 = (i % 2) == 1;
      c.head_dim = kHeadDims[(i / 2) % 3];
      const Heads h = kHeads[(i + pi) % 6];
      c.num_qo_heads = h.qo;
      c.num_kv_heads = h.kv;
      c.seed = 100 + idx;
      c.sample_queries = 12;
      RandomTreeOptions o;
      o.page_size = kPageSizes[(i + 2 * pi) % 5];
      o.shuffle_pages = true;
      const PrefixTree tree = random_tree(c.seed, o);
      plan_run_check(tree, c);
    }
  }
}

TEST(DecodeGpu, EveryDtypeHeadDimRatio) {
  TA_REQUIRE_GPU();
  // Full cross product of dtype x head_dim x ratio on one planner pair (query, node).
  int idx = 0;
  for (const char* planner : {"query", "node"}) {
    for (bool bf16 : {false, true}) {
      for (int32_t hd : kHeadDims) {
        for (const Heads& h : kHeads) {
          Case c;
          c.planner = planner;
          c.bf16 = bf16;
          c.head_dim = hd;
          c.num_qo_heads = h.qo;
          c.num_kv_heads = h.kv;
          c.seed = 5000 + idx;
          c.sample_queries = 6;
          RandomTreeOptions o;
          o.max_nodes = 24;
          o.max_queries = 24;
          o.page_size = kPageSizes[idx % 5];
          ++idx;
          plan_run_check(random_tree(c.seed, o), c);
        }
      }
    }
  }
}

TEST(DecodeGpu, WorkloadLinesShuffledPages) {
  TA_REQUIRE_GPU();
  const std::vector<std::string>& planners = planner_names();
  int idx = 0;
  for (const std::string& set : workload_set_names()) {
    // the two smallest lines of each set (by unique tokens x kv heads)
    std::vector<Workload> ws = workload_set(set);
    std::vector<std::pair<double, size_t>> size;
    for (size_t i = 0; i < ws.size(); ++i) {
      const PrefixTree t = build_workload(ws[i], PageLayout::kContiguous);
      size.push_back({static_cast<double>(unique_tokens(t)) * ws[i].spec.shape.num_kv_heads *
                          ws[i].spec.shape.head_dim,
                      i});
    }
    std::sort(size.begin(), size.end());
    for (size_t j = 0; j < std::min<size_t>(2, size.size()); ++j) {
      const Workload& w = ws[size[j].second];
      const PrefixTree tree = build_workload(w, PageLayout::kShuffled, 77 + idx);
      for (const std::string& p : planners) {
        Case c;
        c.planner = p;
        c.bf16 = (idx % 2) == 1;
        c.num_qo_heads = w.spec.shape.num_qo_heads;
        c.num_kv_heads = w.spec.shape.num_kv_heads;
        c.head_dim = w.spec.shape.head_dim;
        c.seed = 9000 + idx++;
        c.sample_queries = 6;
        SCOPED_TRACE(set + ": " + w.name);
        plan_run_check(tree, c);
      }
    }
  }
}

TEST(DecodeGpu, BlockGroupsSmall) {
  TA_REQUIRE_GPU();
  // kM64 / kM128 items (wgmma on sm_90a): unmasked (node: the root's 64 queries) and masked
  // (flatten: the leaves' block-diagonal masks), head dims 64/128, fp16/bf16; sized for
  // compute-sanitizer.
  struct BlockCase {
    const char* levels;
    const char* planner;
    bool bf16;
  };
  constexpr BlockCase kCases[] = {
      {"N=1,2,64 C=130,40,9 heads=32/32 dim=128 page=16", "node", false},    // 64 rows: kM64
      {"N=1,2,64 C=130,40,9 heads=32/8 dim=64 page=16", "node", true},       // 2 x 128: kM128
      {"N=1,2,64 C=130,40,9 heads=32/32 dim=64 page=16", "flatten", false},  // masked kM64
      {"N=1,2,64 C=130,40,9 heads=32/8 dim=128 page=32", "flatten", true},   // masked kM128
  };
  uint64_t seed = 7100;
  for (const BlockCase& bc : kCases) {
    SCOPED_TRACE(std::string(bc.levels) + " planner=" + bc.planner);
    levels_run_check(bc.levels, bc.planner, bc.bf16, seed, seed + 1000);
    ++seed;
  }
}

TEST(DecodeGpu, CombinedKvLayoutAndNoLse) {
  TA_REQUIRE_GPU();
  for (int i = 0; i < 4; ++i) {
    Case c;
    c.planner = i % 2 ? "node" : "query";
    c.combined_kv = true;
    c.with_lse = i < 2;
    c.bf16 = i == 1 || i == 3;
    c.head_dim = i == 2 ? 64 : 128;
    c.seed = 300 + i;
    RandomTreeOptions o;
    o.page_size = i == 3 ? 1 : 16;
    plan_run_check(random_tree(c.seed, o), c);
  }
}

TEST(DecodeGpu, GraphReplayAfterAppend) {
  TA_REQUIRE_GPU();
  // query at 16/1: 16 deep kM16 CTAs of long items, so the launch runs cluster pairs
  // (tile::use_pair_m16, the default setting); paths and paths-split in groups of 4 queries (one
  // middle node's leaves: masked items over their root paths; paths-split cuts them into pieces
  // and merges); auto at 32/8 takes paths-split here
  for (const auto& [planner, qo_heads, kv_heads, group] :
       {std::tuple<const char*, int, int, int>{"query", 32, 8, 0},
        {"node", 32, 8, 0},
        {"query", 16, 1, 0},
        {"paths", 32, 8, 4},
        {"paths-split", 32, 8, 4},
        {"auto", 32, 8, 0}}) {
    SCOPED_TRACE(std::string(planner) + " heads=" + std::to_string(qo_heads) + "/" +
                 std::to_string(kv_heads) + " paths_group=" + std::to_string(group));
    Case c;
    c.planner = planner;
    c.num_qo_heads = qo_heads;
    c.num_kv_heads = kv_heads;
    c.paths_group = group;
    c.seed = 4242;
    // Leaves each hold one query, so appending grows them in place and the later plan keeps
    // the item structure (a forking append can move items between tile classes and outgrow
    // any per-class headroom).
    PrefixTree tree = tree_from_levels(parse_levels("N=1,4,16 C=300,100,37 page=16"));
    // spare pages for the appended tokens
    const int32_t extra = tree.num_queries() + 8;
    for (int32_t p = 0; p < extra; ++p) tree.free_pages.push_back(tree.num_pages + p);
    tree.num_pages += extra;
    const Plan plan0 = make_case_plan(tree, c);
    cudaStream_t stream;
    TA_CUDA_OK(cudaStreamCreate(&stream));
    DevicePlan dp;
    CaseInputs in;
    fill_inputs(tree, c, 1, &in);
    ASSERT_FALSE(HasFatalFailure());
    dp.upload(plan0, stream, 2.0);
    dp.run(in.args, stream);  // warm-up outside the capture (sets the smem attributes)
    TA_CUDA_OK(cudaStreamSynchronize(stream));
    const void* workspace = dp.workspace();
    // uploads are refused while capturing
    cudaGraph_t graph;
    TA_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    EXPECT_THROW(dp.upload(plan0, stream), std::runtime_error);
    dp.run(in.args, stream);
    TA_CUDA_OK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec;
    TA_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    std::vector<uint16_t> out;
    std::vector<float> lse;
    run_and_fetch(dp, in, stream, exec, &out, &lse);
    expect_matches_oracle(tree, c, in, out, lse);

    for (int32_t q = 0; q < tree.num_queries(); ++q) tree.append_tokens(q, 1);
    const Plan plan1 = make_case_plan(tree, c);
    ASSERT_TRUE(dp.fits(plan1));
    dp.upload(plan1, stream);
    EXPECT_EQ(dp.workspace(), workspace);  // fits: no reallocation, the graph stays valid
    fill_inputs(tree, c, 2, &in);
    run_and_fetch(dp, in, stream, exec, &out, &lse);
    expect_matches_oracle(tree, c, in, out, lse);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

TEST(DecodeGpu, UploadReallocatesOnlyWhenThePlanDoesNotFit) {
  TA_REQUIRE_GPU();
  Case c;
  RandomTreeOptions o;
  o.max_nodes = 6;
  const PrefixTree small = random_tree(11, o);
  o.max_nodes = 64;
  o.max_queries = 64;
  const PrefixTree large = random_tree(12, o);
  const Plan p_small = make_case_plan(small, c), p_large = make_case_plan(large, c);
  DevicePlan dp;
  EXPECT_FALSE(dp.uploaded());
  EXPECT_FALSE(dp.fits(p_small));
  EXPECT_THROW(dp.run(DecodeArgs{}, nullptr), std::logic_error);
  EXPECT_THROW(dp.upload(p_small, nullptr, 0.5), std::invalid_argument);  // headroom
  dp.upload(p_small, nullptr);
  EXPECT_TRUE(dp.fits(p_small));
  if (!dp.fits(p_large)) {
    dp.upload(p_large, nullptr);
    EXPECT_TRUE(dp.fits(p_large));
    EXPECT_GE(dp.layout().total_bytes, plan_layout(p_large).total_bytes);
  }
  // and the reallocated workspace runs the large plan correctly
  CaseInputs in;
  fill_inputs(large, c, 5, &in);
  ASSERT_FALSE(HasFatalFailure());
  std::vector<uint16_t> out;
  std::vector<float> lse;
  run_and_fetch(dp, in, nullptr, nullptr, &out, &lse);
  expect_matches_oracle(large, c, in, out, lse);
  // a later plan that fits keeps the workspace, and the launcher's counts follow it
  dp.upload(p_small, nullptr);
  EXPECT_TRUE(dp.fits(p_large));
  EXPECT_EQ(dp.layout().m16_items_planned, p_small.class_begin[1] - p_small.class_begin[0]);
  const PlanLayout small_layout = plan_layout(p_small);
  for (int cls = 0; cls < kNumTileClasses; ++cls) {
    EXPECT_EQ(dp.layout().class_items_planned[cls], small_layout.class_items_planned[cls]);
    EXPECT_EQ(dp.layout().class_kv_tokens_planned[cls], small_layout.class_kv_tokens_planned[cls]);
  }
  dp.release();
  EXPECT_FALSE(dp.uploaded());
}

TEST(DecodeGpu, InvalidArguments) {
  TA_REQUIRE_GPU();
  RandomTreeOptions o;
  o.max_nodes = 4;
  PrefixTree tree = random_tree(3, o);
  PlanOptions opts;
  opts.planner = "query";
  const Plan plan = make_plan(tree, opts);
  const PlanLayout layout = plan_layout(plan);
  DevBuf buf(1 << 20);
  DecodeArgs a;
  a.q = a.k = a.v = buf.ptr;
  a.out = buf.ptr;
  a.q_stride_query = a.o_stride_query = 32 * 128;
  a.q_stride_head = a.o_stride_head = 128;
  set_kv_split(&a, buf.ptr, buf.ptr, split_kv_strides(16, 8, 128));
  // Every invalid argument returns kInvalidArgument with a message naming it.
  auto expect_invalid = [&](const PlanLayout& L, void* ws, const DecodeArgs& args,
                            const char* name) {
    EXPECT_EQ(run_decode(L, ws, args, nullptr), Status::kInvalidArgument) << name;
    EXPECT_NE(std::string(last_cuda_error()).find(name), std::string::npos)
        << "message '" << last_cuda_error() << "' does not name " << name;
  };
  DecodeArgs bad = a;
  bad.q = nullptr;
  expect_invalid(layout, buf.ptr, bad, "args.q");
  bad = a;
  bad.slot_stride = 12;
  expect_invalid(layout, buf.ptr, bad, "args.slot_stride");
  bad = a;
  bad.dtype = static_cast<DType>(7);
  expect_invalid(layout, buf.ptr, bad, "args.dtype");
  bad = a;
  bad.sm_scale = -1.f;
  expect_invalid(layout, buf.ptr, bad, "args.sm_scale");
  expect_invalid(layout, nullptr, a, "workspace");
  PlanLayout bad_layout = layout;
  bad_layout.shape.head_dim = 96;
  expect_invalid(bad_layout, buf.ptr, a, "head_dim");
  // DevicePlan turns them into std::invalid_argument with the same message
  DevicePlan dp;
  dp.upload(plan, nullptr);
  bad = a;
  bad.out = nullptr;
  try {
    dp.run(bad, nullptr);
    ADD_FAILURE() << "DevicePlan::run accepted a null output";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("args.out"), std::string::npos) << e.what();
  }
  EXPECT_THROW(DevicePlan(1 << 20), std::invalid_argument);  // no such device
}

}  // namespace
}  // namespace treeattn::gpu_test
