// GPU test helpers (see gpu_test_util.h): inputs on the device, runs through DevicePlan, and the
// check against the float64 oracle, which is compare_to_oracle's rule (treeattn/cpu/compare.h:
// the fp16 / bf16 bound, empty rows exactly o = 0 and lse = -inf, NaN never passes).
#include "gpu_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "treeattn/common/half.h"
#include "treeattn/cpu/random_inputs.h"
#include "treeattn/cpu/reference.h"
#include "treeattn/tree/levels.h"

namespace treeattn::gpu_test {

std::string Case::describe() const {
  std::ostringstream os;
  os << "planner=" << planner << (bf16 ? " bf16" : " fp16") << " heads=" << num_qo_heads << "/"
     << num_kv_heads << " dim=" << head_dim << (combined_kv ? " combined-kv" : "")
     << " seed=" << seed;
  return os.str();
}

std::vector<uint16_t> to_bits(const std::vector<float>& v, bool bf16) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    b[i] = bf16 ? float_to_bf16_bits(v[i]) : float_to_half_bits(v[i]);
  return b;
}

std::vector<float> from_bits(const std::vector<uint16_t>& b, bool bf16) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i)
    v[i] = bf16 ? bf16_bits_to_float(b[i]) : half_bits_to_float(b[i]);
  return v;
}

std::vector<int32_t> sample_queries(int32_t num_queries, int32_t k) {
  std::vector<int32_t> s;
  if (num_queries <= k) {
    for (int32_t q = 0; q < num_queries; ++q) s.push_back(q);
    return s;
  }
  for (int32_t i = 0; i < k; ++i)
    s.push_back(static_cast<int32_t>(static_cast<int64_t>(i) * (num_queries - 1) / (k - 1)));
  s.erase(std::unique(s.begin(), s.end()), s.end());
  return s;
}

OracleComparison check_outputs(const PrefixTree& tree, const Case& c, const std::vector<float>& q,
                               const std::vector<float>& k, const std::vector<float>& v,
                               const std::vector<uint16_t>& out_bits, const std::vector<float>& lse,
                               const std::vector<int32_t>& queries) {
  const int64_t H = c.num_qo_heads, D = c.head_dim, nq = tree.num_queries();
  HostAttentionInputs in;
  in.num_qo_heads = c.num_qo_heads;
  in.num_kv_heads = c.num_kv_heads;
  in.head_dim = c.head_dim;
  in.q = q.data();
  in.k = k.data();
  in.v = v.data();
  std::vector<double> ref(nq * H * D), ref_lse(nq * H);
  reference_attention(tree, in, queries, ref.data(), ref_lse.data());
  const std::vector<float> out = from_bits(out_bits, c.bf16);
  return compare_to_oracle(ref.data(), ref_lse.data(), out.data(),
                           c.with_lse ? lse.data() : nullptr, H, D, queries,
                           c.bf16 ? OutputDtype::kBf16 : OutputDtype::kFp16);
}

void fill_inputs(const PrefixTree& tree, const Case& c, uint64_t seed, CaseInputs* in) {
  in->host = random_inputs(tree, c.num_qo_heads, c.num_kv_heads, c.head_dim, c.bf16, seed);
  const int64_t H = c.num_qo_heads, KH = c.num_kv_heads, D = c.head_dim, P = tree.page_size;
  const int64_t nq = tree.num_queries(), pages = tree.num_pages;
  const std::vector<uint16_t> qb = to_bits(in->host.q, c.bf16), kb = to_bits(in->host.k, c.bf16),
                              vb = to_bits(in->host.v, c.bf16);
  if (!in->q) {
    in->q = std::make_unique<DevBuf>(qb.size() * 2);
    in->kv = std::make_unique<DevBuf>(2 * kb.size() * 2 + 16);
    in->out = std::make_unique<DevBuf>(nq * H * D * 2);
    in->lse = std::make_unique<DevBuf>(nq * H * 4 + 16);
  }
  ASSERT_TRUE(in->q->ptr && in->kv->ptr && in->out->ptr && in->lse->ptr) << "cudaMalloc failed";
  ASSERT_LE(2 * kb.size() * 2, in->kv->bytes) << "the tree grew between fill_inputs calls";
  TA_CUDA_OK(cudaMemcpy(in->q->ptr, qb.data(), qb.size() * 2, cudaMemcpyHostToDevice));
  DecodeArgs& a = in->args;
  a.dtype = c.bf16 ? DType::kBFloat16 : DType::kFloat16;
  a.q = in->q->ptr;
  a.q_stride_query = H * D;
  a.q_stride_head = D;
  auto* kv = in->kv->as<uint16_t>();
  if (!c.combined_kv) {
    TA_CUDA_OK(cudaMemcpy(kv, kb.data(), kb.size() * 2, cudaMemcpyHostToDevice));
    TA_CUDA_OK(cudaMemcpy(kv + kb.size(), vb.data(), vb.size() * 2, cudaMemcpyHostToDevice));
    set_kv_split(&a, kv, kv + kb.size(), split_kv_strides(P, KH, D));
  } else {  // [pages, 2, P, KH, D]
    const int64_t page_elems = P * KH * D;
    for (int64_t p = 0; p < pages; ++p) {
      TA_CUDA_OK(cudaMemcpy(kv + (2 * p) * page_elems, kb.data() + p * page_elems, page_elems * 2,
                            cudaMemcpyHostToDevice));
      TA_CUDA_OK(cudaMemcpy(kv + (2 * p + 1) * page_elems, vb.data() + p * page_elems,
                            page_elems * 2, cudaMemcpyHostToDevice));
    }
    set_kv_combined(&a, kv, combined_kv_strides(P, KH, D));
  }
  a.out = in->out->ptr;
  a.o_stride_query = H * D;
  a.o_stride_head = D;
  a.lse = c.with_lse ? in->lse->as<float>() : nullptr;
}

void run_and_fetch(const DevicePlan& dp, const CaseInputs& in, cudaStream_t stream,
                   cudaGraphExec_t graph, std::vector<uint16_t>* out, std::vector<float>* lse) {
  TA_CUDA_OK(cudaMemsetAsync(in.out->ptr, 0xFF, in.out->bytes, stream));
  TA_CUDA_OK(cudaMemsetAsync(in.lse->ptr, 0xFF, in.lse->bytes, stream));
  const PlanLayout& L = dp.layout();
  if (L.total_bytes > L.metadata_bytes)
    TA_CUDA_OK(cudaMemsetAsync(static_cast<unsigned char*>(dp.workspace()) + L.metadata_bytes, 0xFF,
                               L.total_bytes - L.metadata_bytes, stream));
  if (graph != nullptr) {
    TA_CUDA_OK(cudaGraphLaunch(graph, stream));
  } else {
    try {
      dp.run(in.args, stream);
    } catch (const std::exception& e) {
      FAIL() << "DevicePlan::run threw: " << e.what();
    }
  }
  TA_CUDA_OK(cudaStreamSynchronize(stream));
  out->resize(in.out->bytes / 2);
  lse->resize(in.lse->bytes / 4);
  TA_CUDA_OK(cudaMemcpy(out->data(), in.out->ptr, out->size() * 2, cudaMemcpyDeviceToHost));
  TA_CUDA_OK(cudaMemcpy(lse->data(), in.lse->ptr, lse->size() * 4, cudaMemcpyDeviceToHost));
}

void expect_matches_oracle(const PrefixTree& tree, const Case& c, const CaseInputs& in,
                           const std::vector<uint16_t>& out, const std::vector<float>& lse) {
  const std::vector<int32_t> qs = sample_queries(tree.num_queries(), c.sample_queries);
  const OracleComparison r = check_outputs(tree, c, in.host.q, in.host.k, in.host.v, out, lse, qs);
  EXPECT_TRUE(r.pass) << r.describe() << " (" << qs.size() << " queries checked)";
}

Plan make_case_plan(const PrefixTree& tree, const Case& c) {
  PlanOptions opts;
  opts.planner = c.planner;
  opts.num_qo_heads = c.num_qo_heads;
  opts.num_kv_heads = c.num_kv_heads;
  opts.head_dim = c.head_dim;
  opts.dtype_bytes = 2;
  return make_plan(tree, opts);
}

void plan_run_check(const PrefixTree& tree, const Case& c) {
  SCOPED_TRACE(c.describe());
  Plan plan;
  try {
    plan = make_case_plan(tree, c);
  } catch (const std::exception& e) {
    FAIL() << "make_plan threw: " << e.what();
  }
  CaseInputs in;
  fill_inputs(tree, c, c.seed * 7919 + 13, &in);
  if (::testing::Test::HasFatalFailure()) return;
  std::vector<uint16_t> out;
  std::vector<float> lse;
  try {
    DevicePlan dp;
    dp.upload(plan, nullptr);
    run_and_fetch(dp, in, nullptr, nullptr, &out, &lse);
  } catch (const std::exception& e) {
    FAIL() << "DevicePlan threw: " << e.what();
  }
  if (::testing::Test::HasFatalFailure()) return;
  SCOPED_TRACE("items=" + std::to_string(plan.items.size()) +
               " slots=" + std::to_string(plan.num_slots));
  expect_matches_oracle(tree, c, in, out, lse);
}

void expect_deterministic(const PrefixTree& tree, const Case& c, const Plan& plan, int runs) {
  CaseInputs in;
  fill_inputs(tree, c, 99, &in);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  DevicePlan small, large;
  small.upload(plan, nullptr, 1.0);
  large.upload(plan, nullptr, 3.0);
  std::vector<uint16_t> ref_out, out;
  std::vector<float> ref_lse, lse;
  run_and_fetch(small, in, nullptr, nullptr, &ref_out, &ref_lse);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  expect_matches_oracle(tree, c, in, ref_out, ref_lse);
  for (int run = 0; run < runs; ++run) {
    for (const DevicePlan* dp : {&small, &large}) {
      run_and_fetch(*dp, in, nullptr, nullptr, &out, &lse);
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
      ASSERT_EQ(out, ref_out) << "output bits differ: run " << run
                              << (dp == &small ? " headroom 1" : " headroom 3");
      ASSERT_EQ(0, std::memcmp(lse.data(), ref_lse.data(), lse.size() * sizeof(float)))
          << "LSE bits differ: run " << run;
    }
  }
}

LevelsCase levels_case(const char* levels, const char* planner, bool bf16, uint64_t page_seed) {
  const LevelSpec spec = parse_levels(levels);
  LevelsCase lc{tree_from_levels(spec, PageLayout::kShuffled, page_seed), Case{}};
  lc.c.planner = planner;
  lc.c.bf16 = bf16;
  lc.c.num_qo_heads = spec.shape.num_qo_heads;
  lc.c.num_kv_heads = spec.shape.num_kv_heads;
  lc.c.head_dim = spec.shape.head_dim;
  return lc;
}

void levels_run_check(const char* levels, const char* planner, bool bf16, uint64_t page_seed,
                      uint64_t input_seed, int32_t sample_queries) {
  LevelsCase lc = levels_case(levels, planner, bf16, page_seed);
  lc.c.seed = input_seed;
  lc.c.sample_queries = sample_queries;
  plan_run_check(lc.tree, lc.c);
}

}  // namespace treeattn::gpu_test
