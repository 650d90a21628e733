// GPU test helpers (see gpu_test_util.h). The error bound is the usual one for attention kernels
// (FlashAttention's tests): the kernel
// passes iff max |gpu - ref| <= 2 * max |naive - ref| + 1e-3 over every checked element, where
// ref is the float64 oracle and naive is a same-precision implementation on the CPU (fp32 dot
// products and softmax, P rounded to the dtype before P.V, fp32 accumulation, output rounded to
// the dtype); NaN never passes. The LSE (natural log) gets the same rule against the naive fp32
// LSE.
#include "gpu_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "treeattn/common/half.h"
#include "treeattn/cpu/random_inputs.h"
#include "treeattn/cpu/reference.h"

namespace treeattn::gpu_test {

std::string Case::describe() const {
  std::ostringstream os;
  os << "planner=" << planner << (bf16 ? " bf16" : " fp16") << " heads=" << num_qo_heads << "/"
     << num_kv_heads << " dim=" << head_dim << (combined_kv ? " combined-kv" : "")
     << " seed=" << seed;
  return os.str();
}

std::string CheckResult::describe() const {
  std::ostringstream os;
  os << "max_err=" << max_err << " (bound " << bound << ", naive " << naive_err
     << ") lse_err=" << max_lse_err << " (bound " << lse_bound << ") nan=" << nan_count
     << " checked=" << checked;
  return os.str();
}

std::vector<uint16_t> to_bits(const std::vector<float>& v, bool bf16) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    b[i] = bf16 ? float_to_bf16_bits(v[i]) : float_to_half_bits(v[i]);
  return b;
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

namespace {

float round_dt(float x, bool bf16) { return bf16 ? round_to_bf16(x) : round_to_fp16(x); }

/// Naive same-precision attention for one query (all heads): out [H, D], lse [H].
void naive_query(const PrefixTree& tree, const Case& c, const std::vector<float>& q,
                 const std::vector<float>& k, const std::vector<float>& v, int32_t query,
                 std::vector<float>* out, std::vector<float>* lse) {
  const int64_t H = c.num_qo_heads, KH = c.num_kv_heads, D = c.head_dim, P = tree.page_size;
  const int64_t group = H / KH;
  std::vector<int64_t> tok;
  for (const int32_t n : query_path(tree, query)) {
    const TreeNode& node = tree.nodes[n];
    for (int64_t i = 0; i < node.tokens; ++i) {
      const int64_t pos = node.page_offset + i;
      tok.push_back((static_cast<int64_t>(node.pages[pos / P]) * P + pos % P) * KH * D);
    }
  }
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  out->assign(H * D, 0.f);
  lse->assign(H, -INFINITY);
  std::vector<float> s(tok.size()), acc(D);
  for (int64_t h = 0; h < H; ++h) {
    const float* qh = &q[(query * H + h) * D];
    const int64_t kvh = h / group;
    float m = -INFINITY;
    for (size_t t = 0; t < tok.size(); ++t) {
      const float* kt = &k[tok[t] + kvh * D];
      float dot = 0.f;
      for (int64_t d = 0; d < D; ++d) dot += qh[d] * kt[d];
      s[t] = dot * scale;
      m = std::max(m, s[t]);
    }
    if (tok.empty()) continue;
    float l = 0.f;
    std::fill(acc.begin(), acc.end(), 0.f);
    for (size_t t = 0; t < tok.size(); ++t) {
      const float p = std::exp(s[t] - m);
      l += p;
      const float pr = round_dt(p, c.bf16);
      const float* vt = &v[tok[t] + kvh * D];
      for (int64_t d = 0; d < D; ++d) acc[d] += pr * vt[d];
    }
    for (int64_t d = 0; d < D; ++d) (*out)[h * D + d] = round_dt(acc[d] / l, c.bf16);
    (*lse)[h] = m + std::log(l);
  }
}

}  // namespace

CheckResult check_outputs(const PrefixTree& tree, const Case& c, const std::vector<float>& q,
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
  CheckResult r;
  std::vector<float> nv, nl;
  for (const int32_t qi : queries) {
    naive_query(tree, c, q, k, v, qi, &nv, &nl);
    for (int64_t i = 0; i < H * D; ++i) {
      const int64_t e = qi * H * D + i;
      const uint16_t b = out_bits[e];
      const float g = c.bf16 ? bf16_bits_to_float(b) : half_bits_to_float(b);
      ++r.checked;
      if (std::isnan(g)) {
        ++r.nan_count;
        continue;
      }
      r.max_err = std::max(r.max_err, std::fabs(g - ref[e]));
      r.naive_err = std::max(r.naive_err, std::fabs(nv[i] - ref[e]));
    }
    if (c.with_lse) {
      for (int64_t h = 0; h < H; ++h) {
        const double rl = ref_lse[qi * H + h];
        const float gl = lse[qi * H + h];
        if (std::isnan(gl)) {
          ++r.nan_count;
          continue;
        }
        if (std::isinf(rl) || std::isinf(gl)) {  // empty rows must agree exactly
          if (!(std::isinf(rl) && std::isinf(gl) && (rl < 0) == (gl < 0))) r.max_lse_err = INFINITY;
          continue;
        }
        r.max_lse_err = std::max(r.max_lse_err, std::fabs(gl - rl));
        r.naive_lse_err = std::max(r.naive_lse_err, std::fabs(nl[h] - rl));
      }
    }
  }
  r.bound = 2 * r.naive_err + 1e-3;
  r.lse_bound = 2 * r.naive_lse_err + 1e-3;
  return r;
}

void plan_run_check(const PrefixTree& tree, const Case& c) {
  SCOPED_TRACE(c.describe());
  PlanOptions opts;
  opts.planner = c.planner;
  opts.num_qo_heads = c.num_qo_heads;
  opts.num_kv_heads = c.num_kv_heads;
  opts.head_dim = c.head_dim;
  opts.dtype_bytes = 2;
  Plan plan;
  try {
    plan = make_plan(tree, opts);
  } catch (const std::exception& e) {
    FAIL() << "make_plan threw: " << e.what();
  }
  const PlanLayout layout = plan_layout(plan);
  std::vector<unsigned char> meta(static_cast<size_t>(layout.metadata_bytes));
  pack_plan(plan, layout, meta.data());

  const RandomInputs in =
      random_inputs(tree, c.num_qo_heads, c.num_kv_heads, c.head_dim, c.bf16, c.seed * 7919 + 13);
  const int64_t H = c.num_qo_heads, KH = c.num_kv_heads, D = c.head_dim, P = tree.page_size;
  const int64_t nq = tree.num_queries(), pages = tree.num_pages;
  const std::vector<uint16_t> qb = to_bits(in.q, c.bf16), kb = to_bits(in.k, c.bf16),
                              vb = to_bits(in.v, c.bf16);
  const int64_t page_elems = P * KH * D;

  DevBuf dq(qb.size() * 2), dkv(2 * kb.size() * 2 + 16), dout(nq * H * D * 2),
      dlse(nq * H * 4 + 16), dws(layout.total_bytes);
  ASSERT_TRUE(dq.ptr && dkv.ptr && dout.ptr && dlse.ptr && dws.ptr) << "cudaMalloc failed";
  TA_CUDA_OK(cudaMemcpy(dq.ptr, qb.data(), qb.size() * 2, cudaMemcpyHostToDevice));
  DecodeArgs a;
  a.dtype = c.bf16 ? DType::kBFloat16 : DType::kFloat16;
  a.q = dq.ptr;
  a.q_stride_query = H * D;
  a.q_stride_head = D;
  auto* kv = dkv.as<uint16_t>();
  if (!c.combined_kv) {
    TA_CUDA_OK(cudaMemcpy(kv, kb.data(), kb.size() * 2, cudaMemcpyHostToDevice));
    TA_CUDA_OK(cudaMemcpy(kv + kb.size(), vb.data(), vb.size() * 2, cudaMemcpyHostToDevice));
    a.k = kv;
    a.v = kv + kb.size();
    a.page_stride = page_elems;
  } else {  // [pages, 2, P, KH, D]
    for (int64_t p = 0; p < pages; ++p) {
      TA_CUDA_OK(cudaMemcpy(kv + (2 * p) * page_elems, kb.data() + p * page_elems, page_elems * 2,
                            cudaMemcpyHostToDevice));
      TA_CUDA_OK(cudaMemcpy(kv + (2 * p + 1) * page_elems, vb.data() + p * page_elems,
                            page_elems * 2, cudaMemcpyHostToDevice));
    }
    a.k = kv;
    a.v = kv + page_elems;
    a.page_stride = 2 * page_elems;
  }
  a.slot_stride = KH * D;
  a.head_stride = D;
  a.out = dout.ptr;
  a.o_stride_query = H * D;
  a.o_stride_head = D;
  a.lse = c.with_lse ? dlse.as<float>() : nullptr;
  TA_CUDA_OK(cudaMemcpy(dws.ptr, meta.data(), meta.size(), cudaMemcpyHostToDevice));
  TA_CUDA_OK(cudaMemset(dout.ptr, 0xFF, dout.bytes));
  TA_CUDA_OK(cudaMemset(dlse.ptr, 0xFF, dlse.bytes));
  // poison the partials too: every slot the merge reads must have been written
  if (layout.total_bytes > layout.metadata_bytes)
    TA_CUDA_OK(cudaMemset(dws.as<unsigned char>() + layout.metadata_bytes, 0xFF,
                          layout.total_bytes - layout.metadata_bytes));
  const Status st = run_decode(layout, dws.ptr, a, nullptr);
  ASSERT_EQ(st, Status::kOk) << status_string(st) << ": " << last_cuda_error();
  TA_CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint16_t> out(nq * H * D);
  std::vector<float> lse(nq * H);
  TA_CUDA_OK(cudaMemcpy(out.data(), dout.ptr, out.size() * 2, cudaMemcpyDeviceToHost));
  if (c.with_lse)
    TA_CUDA_OK(cudaMemcpy(lse.data(), dlse.ptr, lse.size() * 4, cudaMemcpyDeviceToHost));
  const std::vector<int32_t> qs = sample_queries(static_cast<int32_t>(nq), c.sample_queries);
  const CheckResult r = check_outputs(tree, c, in.q, in.k, in.v, out, lse, qs);
  EXPECT_TRUE(r.pass()) << r.describe() << " items=" << plan.items.size()
                        << " slots=" << plan.num_slots;
}

}  // namespace treeattn::gpu_test
