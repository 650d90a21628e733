// GPU tests of the fp8 KV cache (DecodeArgs::kv_dtype e4m3 / e5m2): every tile class (kM16 wide
// and deep, kM64, kM128, masked and unmasked) x both fp8 types x head dims 64/128/256 x page
// sizes 1/16/256 x GQA ratios x fp16/bf16 queries, with K/V scales 1, 0.37, 2^-10 (e4m3 values
// saturate) and 64, against the float64 oracle on the dequantized values; the combined KV layout
// without LSE; a CUDA graph replayed after the scales changed on the device; NaN codes in the
// cache; and the argument checks that tie the cache's type to the plan's.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "treeattn/common/half.h"
#include "treeattn/kernels/decode.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/levels.h"
#include "treeattn/tree/random_tree.h"

namespace treeattn::gpu_test {
namespace {

constexpr KvDType kFp8Types[] = {KvDType::kFloat8E4M3, KvDType::kFloat8E5M2};
constexpr float kScales[] = {1.f, 0.37f, 0x1.0p-10f, 64.f};

TEST(Fp8Gpu, EveryTileClassTypeHeadDimPageSize) {
  TA_REQUIRE_GPU();
  // level shapes that give each tile class: one query per leaf (query planner: kM16, wide or
  // deep by count), the root's 64 / 128 packed rows (node: kM64 / kM128), their masked forms
  // (flatten)
  struct Shape {
    const char* levels;  // without heads / dim / page
    const char* planner;
  };
  constexpr Shape kShapes[] = {
      {"N=1,8 C=300,70", "query"},         // kM16
      {"N=1,2,64 C=130,40,9", "node"},     // kM64 / kM128 by group
      {"N=1,2,64 C=130,40,9", "flatten"},  // masked groups
      {"N=1,1024 C=200,3", "fasttree"},    // many small rows, merge
  };
  constexpr const char* kHeadsOf[] = {"32/8", "32/32", "16/1", "28/4"};
  constexpr int kPages[] = {1, 16, 256};
  int idx = 0;
  for (KvDType kv : kFp8Types) {
    for (int hd : {64, 128, 256}) {
      for (const Shape& sh : kShapes) {
        const std::string levels = std::string(sh.levels) + " heads=" + kHeadsOf[idx % 4] +
                                   " dim=" + std::to_string(hd) +
                                   " page=" + std::to_string(kPages[idx % 3]);
        LevelsCase lc = levels_case(levels.c_str(), sh.planner, idx % 2 == 1, 300 + idx);
        lc.c.kv_dtype = kv;
        lc.c.k_scale = kScales[idx % 4];
        lc.c.v_scale = kScales[(idx + 1) % 4];
        lc.c.seed = 8100 + idx;
        lc.c.sample_queries = 8;
        SCOPED_TRACE(levels);
        plan_run_check(lc.tree, lc.c);
        ++idx;
      }
    }
  }
}

TEST(Fp8Gpu, RandomTreesCombinedLayoutNoLse) {
  TA_REQUIRE_GPU();
  for (int i = 0; i < 8; ++i) {
    Case c;
    c.planner = i % 2 ? "auto" : "node";
    c.kv_dtype = kFp8Types[i % 2];
    c.bf16 = (i / 2) % 2 == 1;
    c.combined_kv = true;
    c.with_lse = i < 4;
    c.head_dim = i % 3 == 0 ? 64 : 128;
    c.k_scale = kScales[i % 4];
    c.v_scale = kScales[(i + 2) % 4];
    c.seed = 8300 + i;
    RandomTreeOptions o;
    o.page_size = i % 4 == 3 ? 1 : 16;
    o.shuffle_pages = true;
    plan_run_check(random_tree(c.seed, o), c);
  }
}

// A graph captured once reads the scales from the device at every replay: after new values are
// written, a replay gives the bits of a direct run with them, and differs from the first replay.
TEST(Fp8Gpu, GraphReplaySeesNewScales) {
  TA_REQUIRE_GPU();
  LevelsCase lc = levels_case("N=1,2,64 C=130,40,9 heads=32/8 dim=128 page=16", "auto", false, 5);
  lc.c.kv_dtype = KvDType::kFloat8E4M3;
  lc.c.k_scale = 0.5f;
  lc.c.v_scale = 2.f;
  const Plan plan = make_case_plan(lc.tree, lc.c);
  CaseInputs in;
  fill_inputs(lc.tree, lc.c, 77, &in);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  cudaStream_t stream;
  TA_CUDA_OK(cudaStreamCreate(&stream));
  DevicePlan dp;
  dp.upload(plan, stream);
  TA_CUDA_OK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  TA_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  dp.run(in.args, stream);
  TA_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  TA_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<uint16_t> out0, out1, out2;
  std::vector<float> lse0, lse1, lse2;
  run_and_fetch(dp, in, stream, exec, &out0, &lse0);
  expect_matches_oracle(lc.tree, lc.c, in, out0, lse0);
  const float scales[2] = {0.75f, 0.25f};
  TA_CUDA_OK(cudaMemcpy(const_cast<float*>(in.args.k_scale), scales, sizeof(scales),
                        cudaMemcpyHostToDevice));
  run_and_fetch(dp, in, stream, exec, &out1, &lse1);
  run_and_fetch(dp, in, stream, nullptr, &out2, &lse2);
  EXPECT_EQ(out1, out2) << "the replay did not read the new scales";
  EXPECT_EQ(lse1, lse2);
  EXPECT_NE(out0, out1);
  TA_CUDA_OK(cudaGraphExecDestroy(exec));
  TA_CUDA_OK(cudaGraphDestroy(graph));
  TA_CUDA_OK(cudaStreamDestroy(stream));
}

// A NaN code in the cache (e4m3 S.1111.111; e5m2 exponent 31, mantissa != 0) reaches every output
// row that attends it, through the merge too; rows that do not attend it stay finite.
TEST(Fp8Gpu, NanInTheCacheReachesTheRowsThatAttendIt) {
  TA_REQUIRE_GPU();
  for (KvDType kv : kFp8Types) {
    for (const char* planner : {"query", "node", "fasttree"}) {
      SCOPED_TRACE(std::string(kv_dtype_name(kv)) + " " + planner);
      // contiguous pages: the root's first token is page 0, slot 0 (8 queries share it)
      const LevelSpec spec = parse_levels("N=1,8 C=40,20 heads=8/2 dim=128 page=16");
      const PrefixTree tree = tree_from_levels(spec, PageLayout::kContiguous, 0);
      Case c;
      c.planner = planner;
      c.num_qo_heads = 8;
      c.num_kv_heads = 2;
      c.kv_dtype = kv;
      const Plan plan = make_case_plan(tree, c);
      CaseInputs in;
      fill_inputs(tree, c, 11, &in);
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
      // V of token 0, kv head 1, element 5 := NaN (split layout: [pages, P, kv heads, D])
      const uint8_t nan_code = 0x7F;
      TA_CUDA_OK(cudaMemcpy(static_cast<uint8_t*>(const_cast<void*>(in.args.v)) + 1 * 128 + 5,
                            &nan_code, 1, cudaMemcpyHostToDevice));
      DevicePlan dp;
      dp.upload(plan, nullptr);
      std::vector<uint16_t> out;
      std::vector<float> lse;
      run_and_fetch(dp, in, nullptr, nullptr, &out, &lse);
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
      for (int q = 0; q < tree.num_queries(); ++q) {
        for (int h = 0; h < 8; ++h) {
          const bool attends = h / 4 == 1;  // qo heads 4..7 read kv head 1
          for (int d = 0; d < 128; ++d) {
            const float x = half_bits_to_float(out[(static_cast<size_t>(q) * 8 + h) * 128 + d]);
            // V's NaN reaches element 5 of the rows of kv head 1 only (their LSE stays finite)
            if (attends && d == 5)
              ASSERT_TRUE(std::isnan(x)) << "query " << q << " head " << h << " elem " << d;
            else
              ASSERT_TRUE(std::isfinite(x)) << "query " << q << " head " << h << " elem " << d;
          }
        }
      }
    }
  }
}

TEST(Fp8Gpu, InvalidArgumentsNameTheMismatch) {
  TA_REQUIRE_GPU();
  LevelsCase lc = levels_case("N=1,4 C=64,8 heads=8/2 dim=128 page=16", "node", false, 3);
  lc.c.num_qo_heads = 8;
  lc.c.num_kv_heads = 2;
  lc.c.kv_dtype = KvDType::kFloat8E4M3;
  CaseInputs in;
  fill_inputs(lc.tree, lc.c, 5, &in);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  Case fp16_plan_case = lc.c;
  fp16_plan_case.kv_dtype = KvDType::kSame;
  DevicePlan fp16_plan, fp8_plan;
  fp16_plan.upload(make_case_plan(lc.tree, fp16_plan_case), nullptr);
  fp8_plan.upload(make_case_plan(lc.tree, lc.c), nullptr);
  auto status_of = [](const DevicePlan& dp, const DecodeArgs& a) {
    return run_decode(dp.layout(), dp.workspace(), a, nullptr);
  };
  // an fp8 cache with a plan made for 2-byte K/V, and the reverse
  EXPECT_EQ(status_of(fp16_plan, in.args), Status::kInvalidArgument);
  EXPECT_NE(std::string(last_cuda_error()).find("kv_dtype_bytes"), std::string::npos)
      << last_cuda_error();
  DecodeArgs same = in.args;
  same.kv_dtype = KvDType::kSame;
  same.k_scale = same.v_scale = nullptr;
  EXPECT_EQ(status_of(fp8_plan, same), Status::kInvalidArgument);
  EXPECT_NE(std::string(last_cuda_error()).find("kv_dtype_bytes"), std::string::npos);
  // a scale without an fp8 cache; an unknown KV type; a misaligned scale
  DecodeArgs scaled = same;
  scaled.k_scale = in.args.k_scale;
  EXPECT_EQ(status_of(fp16_plan, scaled), Status::kInvalidArgument);
  EXPECT_NE(std::string(last_cuda_error()).find("args.k_scale"), std::string::npos);
  DecodeArgs bad = in.args;
  bad.kv_dtype = static_cast<KvDType>(7);
  EXPECT_EQ(status_of(fp8_plan, bad), Status::kInvalidArgument);
  EXPECT_NE(std::string(last_cuda_error()).find("args.kv_dtype"), std::string::npos);
  bad = in.args;
  bad.v_scale = reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(in.args.v_scale) + 2);
  EXPECT_EQ(status_of(fp8_plan, bad), Status::kInvalidArgument);
  EXPECT_NE(std::string(last_cuda_error()).find("args.v_scale"), std::string::npos);
  // the matching pair runs
  EXPECT_EQ(status_of(fp8_plan, in.args), Status::kOk) << last_cuda_error();
  TA_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace treeattn::gpu_test
