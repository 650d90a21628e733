// GPU tests of run_decode: every available planner x fp16/bf16 x head dims 64/128/256 x GQA ratios
// (32/32, 32/8, 28/4, 16/1, 64/8, 32/1) x page sizes (1, 16, 32, 64, 256) on random trees and on
// workload lines with shuffled pages; the combined vLLM KV layout; CUDA-graph capture and replay
// over a later plan; argument validation. The cross product is sampled (a rotating schedule) so
// the suite stays well under two minutes. Outputs are poisoned first and checked element-wise
// against the float64 oracle within the bound documented in gpu_test_util.cc.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "treeattn/cpu/random_inputs.h"
#include "treeattn/cpu/reference.h"
#include "treeattn/kernels/decode.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/builders.h"
#include "treeattn/tree/workloads.h"

namespace treeattn::gpu_test {
namespace {

struct Heads {
  int32_t qo, kv;
};
constexpr Heads kHeads[] = {{32, 32}, {32, 8}, {28, 4}, {16, 1}, {64, 8}, {32, 1}};
constexpr int32_t kPageSizes[] = {1, 16, 32, 64, 256};
constexpr int32_t kHeadDims[] = {64, 128, 256};

/// Every planner: one that throws fails the test (plan_run_check).
const std::vector<std::string>& working_planners() { return planner_names(); }

TEST(DecodeGpu, RandomTreesAllPlanners) {
  TA_REQUIRE_GPU();
  const std::vector<std::string> planners = working_planners();
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
  const std::vector<std::string> planners = working_planners();
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
  for (const char* planner : {"query", "node"}) {
    SCOPED_TRACE(planner);
    Case c;
    c.planner = planner;
    c.seed = 4242;
    // Leaves each hold one query, so appending grows them in place and the later plan keeps
    // the item structure (a forking append can move items between tile classes and outgrow
    // any per-class headroom).
    PrefixTree tree = tree_from_levels(parse_levels("N=1,4,16 C=300,100,37 page=16"));
    // spare pages for the appended tokens
    const int32_t extra = tree.num_queries() + 8;
    for (int32_t p = 0; p < extra; ++p) tree.free_pages.push_back(tree.num_pages + p);
    tree.num_pages += extra;
    PlanOptions opts;
    opts.planner = planner;
    const Plan plan0 = make_plan(tree, opts);
    const PlanLayout layout = plan_layout(plan0, 2.0);
    const int64_t H = 32, KH = 8, D = 128, nq = tree.num_queries();
    const int64_t kv_elems = static_cast<int64_t>(tree.num_pages) * tree.page_size * KH * D;
    DevBuf dq(nq * H * D * 2), dk(kv_elems * 2), dv(kv_elems * 2), dout(nq * H * D * 2),
        dlse(nq * H * 4), dws(layout.total_bytes);
    ASSERT_TRUE(dq.ptr && dk.ptr && dv.ptr && dout.ptr && dlse.ptr && dws.ptr);
    DecodeArgs a;
    a.q = dq.ptr;
    a.q_stride_query = H * D;
    a.q_stride_head = D;
    a.k = dk.ptr;
    a.v = dv.ptr;
    a.page_stride = tree.page_size * KH * D;
    a.slot_stride = KH * D;
    a.head_stride = D;
    a.out = dout.ptr;
    a.o_stride_query = H * D;
    a.o_stride_head = D;
    a.lse = dlse.as<float>();
    cudaStream_t stream;
    TA_CUDA_OK(cudaStreamCreate(&stream));
    std::vector<unsigned char> meta(layout.metadata_bytes);

    auto upload_and_check = [&](const PrefixTree& t, const Plan& plan, cudaGraphExec_t exec,
                                uint64_t seed) {
      pack_plan(plan, layout, meta.data());
      const RandomInputs in = random_inputs(t, H, KH, D, false, seed);
      const auto qb = to_bits(in.q, false), kb = to_bits(in.k, false), vb = to_bits(in.v, false);
      ASSERT_EQ(static_cast<int64_t>(kb.size()), kv_elems);
      TA_CUDA_OK(cudaMemcpy(dws.ptr, meta.data(), meta.size(), cudaMemcpyHostToDevice));
      TA_CUDA_OK(cudaMemcpy(dq.ptr, qb.data(), qb.size() * 2, cudaMemcpyHostToDevice));
      TA_CUDA_OK(cudaMemcpy(dk.ptr, kb.data(), kb.size() * 2, cudaMemcpyHostToDevice));
      TA_CUDA_OK(cudaMemcpy(dv.ptr, vb.data(), vb.size() * 2, cudaMemcpyHostToDevice));
      TA_CUDA_OK(cudaMemset(dout.ptr, 0xFF, dout.bytes));
      TA_CUDA_OK(cudaMemset(dlse.ptr, 0xFF, dlse.bytes));
      TA_CUDA_OK(cudaGraphLaunch(exec, stream));
      TA_CUDA_OK(cudaStreamSynchronize(stream));
      std::vector<uint16_t> out(nq * H * D);
      std::vector<float> lse(nq * H);
      TA_CUDA_OK(cudaMemcpy(out.data(), dout.ptr, out.size() * 2, cudaMemcpyDeviceToHost));
      TA_CUDA_OK(cudaMemcpy(lse.data(), dlse.ptr, lse.size() * 4, cudaMemcpyDeviceToHost));
      Case cc = c;
      const CheckResult r = check_outputs(t, cc, in.q, in.k, in.v, out, lse,
                                          sample_queries(static_cast<int32_t>(nq), 16));
      EXPECT_TRUE(r.pass()) << r.describe();
    };

    // capture once (metadata of plan0 uploaded first so the warm-up run is valid)
    pack_plan(plan0, layout, meta.data());
    TA_CUDA_OK(cudaMemcpy(dws.ptr, meta.data(), meta.size(), cudaMemcpyHostToDevice));
    ASSERT_EQ(run_decode(layout, dws.ptr, a, stream), Status::kOk);  // sets smem attributes
    TA_CUDA_OK(cudaStreamSynchronize(stream));
    cudaGraph_t graph;
    TA_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const Status st = run_decode(layout, dws.ptr, a, stream);
    TA_CUDA_OK(cudaStreamEndCapture(stream, &graph));
    ASSERT_EQ(st, Status::kOk) << last_cuda_error();
    cudaGraphExec_t exec;
    TA_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    upload_and_check(tree, plan0, exec, 1);

    for (int32_t q = 0; q < tree.num_queries(); ++q) tree.append_tokens(q, 1);
    const Plan plan1 = make_plan(tree, opts);
    upload_and_check(tree, plan1, exec, 2);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
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
  a.q_stride_head = a.o_stride_head = a.head_stride = 128;
  a.page_stride = 16 * 8 * 128;
  a.slot_stride = 8 * 128;
  DecodeArgs bad = a;
  bad.q = nullptr;
  EXPECT_EQ(run_decode(layout, buf.ptr, bad, nullptr), Status::kInvalidArgument);
  bad = a;
  bad.slot_stride = 12;
  EXPECT_EQ(run_decode(layout, buf.ptr, bad, nullptr), Status::kInvalidArgument);
  bad = a;
  bad.dtype = static_cast<DType>(7);
  EXPECT_EQ(run_decode(layout, buf.ptr, bad, nullptr), Status::kInvalidArgument);
  EXPECT_EQ(run_decode(layout, nullptr, a, nullptr), Status::kInvalidArgument);
  PlanLayout bad_layout = layout;
  bad_layout.shape.head_dim = 96;
  EXPECT_EQ(run_decode(bad_layout, buf.ptr, a, nullptr), Status::kInvalidArgument);
}

}  // namespace
}  // namespace treeattn::gpu_test
