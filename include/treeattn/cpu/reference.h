// CPU side of correctness: the host tensors and the float64 oracle (src/cpu/reference.cc,
// independent of any plan: each query's root path expanded into one dense KV sequence). The
// float32 plan executor is in executor.h, random test inputs in random_inputs.h, the tolerance
// rule in compare.h.
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

#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

struct HostAttentionInputs {
  int32_t num_qo_heads = 32, num_kv_heads = 8, head_dim = 128;
  float sm_scale = 0.f;  ///< 0 -> 1/sqrt(head_dim); else finite and > 0
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
};

/// HostAttentionInputs over q, k, v (which must outlive them) for the given shape and softmax
/// scale (0: 1/sqrt(head_dim)).
HostAttentionInputs host_inputs(const float* q, const float* k, const float* v,
                                int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim,
                                float sm_scale = 0.f);

/// Throws std::invalid_argument naming the field on bad heads, head_dim, sm_scale or null
/// tensors.
void check_host_inputs(const HostAttentionInputs& in);

/// Float64 attention per query over its expanded root path; `queries` (empty = all) limits the
/// work to a sample; out/lse are [num_queries, ...] and only the sampled rows are written.
/// Reentrant: reads `tree` and `in`, writes only `out` and `lse`.
void reference_attention(const PrefixTree& tree, const HostAttentionInputs& in,
                         const std::vector<int32_t>& queries, double* out, double* lse);

}  // namespace treeattn
