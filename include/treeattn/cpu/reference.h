// CPU side of correctness: the float64 oracle (independent of any plan: each query's root path
// expanded into one dense KV sequence) and a float32 plan executor (partial attention per work
// item plus log-sum-exp merge) that runs any plan anywhere.
//
// Tensors (row-major, element values already rounded to the storage dtype when they stand for
// fp16/bf16 data):
//   q      [num_queries, num_qo_heads, head_dim]
//   k, v   [num_pages, page_size, num_kv_heads, head_dim]
//   out    [num_queries, num_qo_heads, head_dim]
//   lse    [num_queries, num_qo_heads]  natural-log log-sum-exp of the scaled logits
// Softmax scale is 1/sqrt(head_dim) unless given.
#pragma once

#include <cstdint>
#include <vector>

#include "treeattn/plan/plan.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

struct HostAttentionInputs {
  int32_t num_qo_heads = 32, num_kv_heads = 8, head_dim = 128;
  float sm_scale = 0.f;  ///< 0 -> 1/sqrt(head_dim)
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
};

/// Float64 attention per query over its expanded root path; `queries` (empty = all) limits the
/// work to a sample; out/lse are [num_queries, ...] and only the sampled rows are written.
void reference_attention(const PrefixTree& tree, const HostAttentionInputs& in,
                         const std::vector<int32_t>& queries, double* out, double* lse);

/// Float32 executor of `plan`: every work item's partial attention, then the LSE merge.
/// out [num_queries, num_qo_heads, head_dim], lse (optional) [num_queries, num_qo_heads].
void execute_plan_cpu(const Plan& plan, const HostAttentionInputs& in, float* out, float* lse);
/// Same, restricted to `queries` (empty = all): only the rows of those queries are computed and
/// merged, items without such rows are skipped, and only those queries' out/lse rows are written
/// (others are left untouched). `treeattn check` uses it to sample large workloads.
void execute_plan_cpu(const Plan& plan, const HostAttentionInputs& in,
                      const std::vector<int32_t>& queries, float* out, float* lse);

/// Fresh random inputs in [-1, 1) (scaled q), rounded to fp16 (dtype_bytes 2, bf16 = false) or
/// bf16 so the CPU and GPU see identical values.
struct RandomInputs {
  std::vector<float> q, k, v;
};
RandomInputs random_inputs(const PrefixTree& tree, int32_t num_qo_heads, int32_t num_kv_heads,
                           int32_t head_dim, bool bf16, uint64_t seed);
/// HostAttentionInputs over `data` (which must outlive them) for the given shape.
HostAttentionInputs host_inputs(const RandomInputs& data, int32_t num_qo_heads,
                                int32_t num_kv_heads, int32_t head_dim);

}  // namespace treeattn
