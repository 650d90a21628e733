// Random test inputs (src/cpu/random_inputs.cc), shared by the CPU tests, `treeattn check`, the
// benchmark and the GPU tests.
#pragma once

#include <cstdint>
#include <vector>

#include "treeattn/cpu/reference.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

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
