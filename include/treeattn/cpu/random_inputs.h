// Random test inputs (src/cpu/random_inputs.cc), shared by the CPU tests, `treeattn check`, the
// benchmark and the GPU tests: the host copy of the value stream of treeattn/common/
// random_values.h (DeviceInputs, treeattn/kernels/device_inputs.h, writes the same values on the
// GPU), its HostAttentionInputs view, and the float64 oracle on a sample of queries.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "treeattn/common/random_values.h"
#include "treeattn/cpu/compare.h"
#include "treeattn/cpu/reference.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

/// q in [-4, 4), k and v in [-1, 1) (RandomValueStream), rounded to fp16 (spec.bf16 = false) or
/// bf16 so the CPU and GPU see identical values; with an fp8 spec.kv_dtype, k and v hold the
/// dequantized values k_scale x round_to_fp8(value / k_scale) (v likewise), what an fp8 cache of
/// DeviceInputs stands for. Throws std::invalid_argument naming "k_scale" / "v_scale" (fp8 only:
/// each must be finite and > 0), "kv_dtype", the tree's page fields or the spec's shape fields.
struct RandomInputs {
  std::vector<float> q, k, v;
};
RandomInputs random_inputs(const PrefixTree& tree, const RandomInputSpec& spec);
/// random_inputs() of the spec {num_qo_heads, num_kv_heads, head_dim, bf16, seed} (K/V kSame).
RandomInputs random_inputs(const PrefixTree& tree, int32_t num_qo_heads, int32_t num_kv_heads,
                           int32_t head_dim, bool bf16, uint64_t seed);

/// HostAttentionInputs over `data` (which must outlive them) for the given shape.
HostAttentionInputs host_inputs(const RandomInputs& data, int32_t num_qo_heads,
                                int32_t num_kv_heads, int32_t head_dim);

/// The float64 oracle (reference_attention) on the random inputs of `spec` for the queries
/// sample_queries(num_queries, k) picks, in order, stopping before the oracle work (context tokens
/// x num_qo_heads x head_dim x 2 multiply-adds, summed over the sample) would pass `max_work`
/// (the first query is always kept). It runs on the sub-tree of the sampled queries' root paths,
/// whose q rows and K/V pages it recomputes from the value stream, so its cost grows with the
/// sampled paths, not with the tree or its page count. K/V as random_inputs() stores them (the
/// dequantized values of an fp8 spec). Throws std::invalid_argument naming the offender (the
/// tree, the spec's fields, "k_scale", "v_scale", "k").
OracleSample oracle_sample(const PrefixTree& tree, const RandomInputSpec& spec, int32_t k,
                           double max_work = std::numeric_limits<double>::infinity());

}  // namespace treeattn
