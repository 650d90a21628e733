// The values of the random test inputs, by index. random_inputs() (treeattn/cpu/random_inputs.h)
// on the host and DeviceInputs (treeattn/kernels/device_inputs.h) on the GPU both read them from
// here, so q, k and v hold the same numbers on both sides, and an oracle can recompute the values
// of a few sampled queries' paths without generating the rest (oracle_sample()).
//
// One stream per problem: splitmix64 started at an origin derived from the seed; value j is the
// generator's output number j, mix(origin + (j + 1) * golden), whose top 24 bits give a number
// uniform in [-1, 1), exact in float. q takes values [0, q_elems) scaled by kQueryScale (a power
// of two, so exact), which makes the softmax peaked enough that merge bugs show; k takes the next
// kv_elems values, v the kv_elems after them. Callers round to fp16 or bf16.
#pragma once

#include <cstdint>

#include "treeattn/common/error.h"
#include "treeattn/common/fp8.h"
#include "treeattn/common/host_device.h"

namespace treeattn {

enum class InputTensor : int32_t { kQ = 0, kK = 1, kV = 2 };

/// The shape, storage dtype and seed of a problem's random inputs: q [num_queries, num_qo_heads,
/// head_dim], k and v [num_pages, page_size, num_kv_heads, head_dim] each.
struct RandomInputSpec {
  int32_t num_qo_heads = 32, num_kv_heads = 8, head_dim = 128;
  bool bf16 = false;  ///< values rounded to bf16, else fp16
  uint64_t seed = 0;
  /// K/V storage: kSame = rounded like q; fp8 = k stored as fp8(value / k_scale) (saturating),
  /// standing for k_scale x stored (v likewise): the oracle sees those dequantized values.
  KvDType kv_dtype = KvDType::kSame;
  float k_scale = 1.f, v_scale = 1.f;
  /// The softmax scale of the problem (0: 1/sqrt(head_dim)): oracle_sample's reference uses it and
  /// DeviceInputs::fill sets DecodeArgs::sm_scale to it. A large one makes the scores of a row
  /// spread over many powers of two (the kernels' lazy rescale then runs mid-item).
  float sm_scale = 0.f;
};

struct RandomValueStream {
  static constexpr float kQueryScale = 4.0f;
  static constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

  uint64_t origin = 0;    ///< generator state before value 0
  uint64_t q_elems = 0;   ///< values of q
  uint64_t kv_elems = 0;  ///< values of k, and of v

  /// Element i of `tensor`, before rounding to the storage dtype.
  TA_HOST_DEVICE float value(InputTensor tensor, uint64_t i) const {
    const uint64_t j = tensor == InputTensor::kQ   ? i
                       : tensor == InputTensor::kK ? q_elems + i
                                                   : q_elems + kv_elems + i;
    uint64_t z = origin + (j + 1) * kGolden;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * 0x1.0p-23f - 1.0f;
    return tensor == InputTensor::kQ ? u * kQueryScale : u;
  }
};

/// The stream of `spec`'s inputs for a tree with `num_queries` queries and `num_pages` pages of
/// `page_size` tokens. Throws std::invalid_argument naming "num_qo_heads", "num_kv_heads",
/// "head_dim", "num_queries", "num_pages" or "page_size" when one is < 1 (< 0 for the counts),
/// "kv_dtype" when it is not a KvDType, "k_scale" / "v_scale" when an fp8 spec's scale is not
/// finite and > 0, "sm_scale" when it is not finite and >= 0.
inline RandomValueStream random_value_stream(const RandomInputSpec& spec, int64_t num_queries,
                                             int64_t num_pages, int64_t page_size) {
  TA_CHECK_ARG(spec.num_qo_heads >= 1, "num_qo_heads", "must be >= 1, got ", spec.num_qo_heads);
  TA_CHECK_ARG(spec.num_kv_heads >= 1, "num_kv_heads", "must be >= 1, got ", spec.num_kv_heads);
  TA_CHECK_ARG(spec.head_dim >= 1, "head_dim", "must be >= 1, got ", spec.head_dim);
  TA_CHECK_ARG(num_queries >= 0, "num_queries", "must be >= 0, got ", num_queries);
  TA_CHECK_ARG(num_pages >= 0, "num_pages", "must be >= 0, got ", num_pages);
  TA_CHECK_ARG(page_size >= 1, "page_size", "must be >= 1, got ", page_size);
  TA_CHECK_ARG(spec.kv_dtype == KvDType::kSame || is_fp8(spec.kv_dtype), "kv_dtype",
               "unknown KV dtype ", static_cast<int>(spec.kv_dtype));
  if (is_fp8(spec.kv_dtype)) {
    TA_CHECK_ARG(std::isfinite(spec.k_scale) && spec.k_scale > 0.f, "k_scale",
                 "must be finite and > 0, got ", spec.k_scale);
    TA_CHECK_ARG(std::isfinite(spec.v_scale) && spec.v_scale > 0.f, "v_scale",
                 "must be finite and > 0, got ", spec.v_scale);
  }
  TA_CHECK_ARG(std::isfinite(spec.sm_scale) && spec.sm_scale >= 0.f, "sm_scale",
               "must be finite and >= 0 (0: 1/sqrt(head_dim)), got ", spec.sm_scale);
  RandomValueStream s;
  s.origin = spec.seed * 0xD1B54A32D192ED03ull + 0x5DEECE66Dull;
  s.q_elems = static_cast<uint64_t>(num_queries) * spec.num_qo_heads * spec.head_dim;
  s.kv_elems = static_cast<uint64_t>(num_pages) * page_size * spec.num_kv_heads * spec.head_dim;
  return s;
}

}  // namespace treeattn
