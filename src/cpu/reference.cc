// Float64 oracle: per query, its root path expanded into one dense KV sequence (through the
// tree's own token -> page mapping, never through a plan), then softmax(scale q.k) v per query
// head in double precision; lse = natural log of the softmax denominator (max-subtracted). Also
// the HostAttentionInputs view and its checks.
#include "treeattn/cpu/reference.h"

#include <cmath>
#include <vector>

#include "treeattn/common/error.h"

namespace treeattn {

HostAttentionInputs host_inputs(const float* q, const float* k, const float* v,
                                int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim,
                                float sm_scale) {
  return HostAttentionInputs{num_qo_heads, num_kv_heads, head_dim, sm_scale, q, k, v};
}

void check_host_inputs(const HostAttentionInputs& in) {
  TA_CHECK_ARG(in.num_qo_heads >= 1, "num_qo_heads", "must be >= 1, got ", in.num_qo_heads);
  TA_CHECK_ARG(in.num_kv_heads >= 1 && in.num_qo_heads % in.num_kv_heads == 0, "num_kv_heads",
               in.num_kv_heads, " must be >= 1 and divide num_qo_heads ", in.num_qo_heads);
  TA_CHECK_ARG(in.head_dim >= 4 && in.head_dim % 4 == 0, "head_dim",
               "must be a positive multiple of 4, got ", in.head_dim);
  TA_CHECK_ARG(std::isfinite(in.sm_scale) && in.sm_scale >= 0.f, "sm_scale",
               "must be 0 (1/sqrt(head_dim)) or a finite number > 0, got ", in.sm_scale);
  TA_CHECK_ARG(in.q != nullptr, "q", "null");
  TA_CHECK_ARG(in.k != nullptr, "k", "null");
  TA_CHECK_ARG(in.v != nullptr, "v", "null");
}

void reference_attention(const PrefixTree& tree, const HostAttentionInputs& in,
                         const std::vector<int32_t>& queries, double* out, double* lse) {
  check_host_inputs(in);
  TA_CHECK_ARG(out != nullptr, "out", "null");
  const int32_t nq = tree.num_queries();
  const int64_t H = in.num_qo_heads, KH = in.num_kv_heads, D = in.head_dim, P = tree.page_size;
  const int64_t group = H / KH;
  const double scale = in.sm_scale != 0.f ? in.sm_scale : 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<int32_t> all;
  if (queries.empty()) {
    all.resize(nq);
    for (int32_t q = 0; q < nq; ++q) all[q] = q;
  }
  const std::vector<int32_t>& qs = queries.empty() ? all : queries;

  std::vector<int64_t> tok;  // element offset of each path token's (kv head 0) K/V row
  std::vector<double> logit, qd(D), acc(D);
  for (const int32_t q : qs) {
    TA_CHECK_ARG(q >= 0 && q < nq, "queries", "query ", q, " out of range [0, ", nq, ")");
    tok.clear();
    for (const int32_t n : query_path(tree, q)) {
      const TreeNode& node = tree.nodes[n];
      for (int64_t i = 0; i < node.tokens; ++i) {
        const int64_t pos = node.page_offset + i;
        tok.push_back((static_cast<int64_t>(node.pages[pos / P]) * P + pos % P) * KH * D);
      }
    }
    logit.resize(tok.size());
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / group;
      const float* qp = in.q + (q * H + h) * D;
      for (int64_t d = 0; d < D; ++d) qd[d] = qp[d];
      double m = -INFINITY;
      for (size_t t = 0; t < tok.size(); ++t) {
        const float* kp = in.k + tok[t] + kvh * D;
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;  // independent chains for speed
        for (int64_t d = 0; d < D; d += 4) {
          s0 += qd[d] * kp[d];
          s1 += qd[d + 1] * kp[d + 1];
          s2 += qd[d + 2] * kp[d + 2];
          s3 += qd[d + 3] * kp[d + 3];
        }
        logit[t] = scale * ((s0 + s1) + (s2 + s3));
        m = std::max(m, logit[t]);
      }
      double denom = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t t = 0; t < tok.size(); ++t) {
        const double w = std::exp(logit[t] - m);
        denom += w;
        const float* vp = in.v + tok[t] + kvh * D;
        for (int64_t d = 0; d < D; ++d) acc[d] += w * vp[d];
      }
      double* op = out + (q * H + h) * D;
      for (int64_t d = 0; d < D; ++d) op[d] = acc[d] / denom;
      if (lse != nullptr) lse[q * H + h] = m + std::log(denom);
    }
  }
}

}  // namespace treeattn
