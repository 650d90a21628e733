// Float32 CPU executor of a Plan, following the execution model of plan.h exactly: per work item
// and KV head, every row (query) x group query heads runs an online softmax over the item's
// tokens (masked ranges only for rows whose bit is set); a row that sees no token yields the
// empty state (lse = -inf, o = 0). Rows write the final output or their partial slot; then each
// query merges its slots with merge_state() (attention_state.h, the tested AttentionState merge). A
// query whose merged state is empty is a planner bug and throws std::logic_error.
#include "treeattn/cpu/executor.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "treeattn/common/attention_state.h"
#include "treeattn/common/error.h"

namespace treeattn {

namespace {

float dot(const float* a, const float* b, int64_t D) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (int64_t d = 0; d < D; d += 4) {
    s0 += a[d] * b[d];
    s1 += a[d + 1] * b[d + 1];
    s2 += a[d + 2] * b[d + 2];
    s3 += a[d + 3] * b[d + 3];
  }
  return (s0 + s1) + (s2 + s3);
}

}  // namespace

void execute_plan_cpu(const Plan& plan, const HostAttentionInputs& in, float* out, float* lse) {
  execute_plan_cpu(plan, in, {}, out, lse);
}

void execute_plan_cpu(const Plan& plan, const HostAttentionInputs& in,
                      const std::vector<int32_t>& queries, float* out, float* lse) {
  check_host_inputs(in);
  TA_CHECK_ARG(out != nullptr, "out", "null");
  const PlanShape& s = plan.shape;
  TA_CHECK_ARG(in.num_qo_heads == s.num_qo_heads && in.num_kv_heads == s.num_kv_heads &&
                   in.head_dim == s.head_dim,
               "plan", "made for ", s.num_qo_heads, "/", s.num_kv_heads, " heads x head_dim ",
               s.head_dim, ", inputs have ", in.num_qo_heads, "/", in.num_kv_heads, " x ",
               in.head_dim);
  TA_CHECK_ARG(static_cast<int64_t>(plan.merge_indptr.size()) == s.num_queries + 1, "plan",
               "merge_indptr has ", plan.merge_indptr.size(), " entries for ", s.num_queries,
               " queries");
  const int64_t nq = s.num_queries, H = s.num_qo_heads, KH = s.num_kv_heads, D = s.head_dim;
  const int64_t P = s.page_size, group = H / KH;
  const float scale = in.sm_scale != 0.f ? in.sm_scale : 1.0f / std::sqrt(static_cast<float>(D));

  std::vector<char> want(nq, queries.empty() ? 1 : 0);
  for (const int32_t q : queries) {
    TA_CHECK_ARG(q >= 0 && q < nq, "queries", "query ", q, " out of range [0, ", nq, ")");
    want[q] = 1;
  }

  std::vector<float> part_o, part_lse;  // [slots, H, D], [slots, H]; only needed slots filled
  if (plan.num_slots > 0) {
    part_o.assign(static_cast<size_t>(plan.num_slots) * H * D, 0.f);
    part_lse.assign(static_cast<size_t>(plan.num_slots) * H, -INFINITY);
  }

  std::vector<int64_t> tok;        // element offset of each item token's K/V row (kv head 0)
  std::vector<int32_t> tok_range;  // item-local range index of each token
  std::vector<float> acc(D);
  for (const WorkItem& it : plan.items) {
    bool any = false;
    for (int32_t r = 0; r < it.num_rows && !any; ++r) any = want[plan.rows[it.row_begin + r].query];
    if (!any) continue;
    tok.clear();
    tok_range.clear();
    for (int32_t j = 0; j < it.num_ranges; ++j) {
      const KvRange& g = plan.ranges[it.range_begin + j];
      for (int64_t i = 0; i < g.len; ++i) {
        const int64_t pos = g.page_offset + i;
        const int64_t page = plan.page_ids[g.page_begin + pos / P];
        tok.push_back((page * P + pos % P) * KH * D);
        tok_range.push_back(j);
      }
    }
    for (int32_t r = 0; r < it.num_rows; ++r) {
      const PlanRow& row = plan.rows[it.row_begin + r];
      if (!want[row.query]) continue;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kvh = h / group;
        const float* qp = in.q + (row.query * H + h) * D;
        float m = -INFINITY, l = 0.f;
        std::fill(acc.begin(), acc.end(), 0.f);
        for (size_t t = 0; t < tok.size(); ++t) {
          if (it.mask_begin >= 0 && !((plan.masks[it.mask_begin + tok_range[t]] >> r) & 1ull))
            continue;
          const float sc = scale * dot(qp, in.k + tok[t] + kvh * D, D);
          if (sc > m) {                        // new running max: rescale what we have
            const float f = std::exp(m - sc);  // exp(-inf) = 0 on the first token
            l *= f;
            for (int64_t d = 0; d < D; ++d) acc[d] *= f;
            m = sc;
          }
          const float p = std::exp(sc - m);
          l += p;
          const float* vp = in.v + tok[t] + kvh * D;
          for (int64_t d = 0; d < D; ++d) acc[d] += p * vp[d];
        }
        const bool empty = l == 0.f;
        const float state_lse = empty ? -INFINITY : m + std::log(l);
        const float inv = empty ? 0.f : 1.f / l;
        if (row.slot == kFinalOutput) {
          TA_CHECK_INTERNAL(!empty, "query ", row.query, " head ", h,
                            " has an empty final-output row");
          float* op = out + (row.query * H + h) * D;
          for (int64_t d = 0; d < D; ++d) op[d] = acc[d] * inv;
          if (lse != nullptr) lse[row.query * H + h] = state_lse;
        } else {
          float* op = part_o.data() + (static_cast<int64_t>(row.slot) * H + h) * D;
          for (int64_t d = 0; d < D; ++d) op[d] = acc[d] * inv;
          part_lse[static_cast<int64_t>(row.slot) * H + h] = state_lse;
        }
      }
    }
  }

  // LSE merge of each query's partial slots.
  std::vector<float> o(D);
  for (int64_t q = 0; q < nq; ++q) {
    const int32_t b = plan.merge_indptr[q], e = plan.merge_indptr[q + 1];
    if (!want[q] || b == e) continue;
    for (int64_t h = 0; h < H; ++h) {
      float m_lse = -INFINITY;
      std::fill(o.begin(), o.end(), 0.f);
      for (int32_t k = b; k < e; ++k) {
        const int64_t sl = plan.merge_slots[k];
        merge_state(o.data(), &m_lse, part_o.data() + (sl * H + h) * D, part_lse[sl * H + h],
                    static_cast<int>(D));
      }
      TA_CHECK_INTERNAL(m_lse != -INFINITY, "query ", q, " head ", h,
                        " merged to an empty state (no KV token)");
      std::copy(o.begin(), o.end(), out + (q * H + h) * D);
      if (lse != nullptr) lse[q * H + h] = m_lse;
    }
  }
}

}  // namespace treeattn
