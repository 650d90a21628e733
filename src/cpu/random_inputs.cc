// Random test inputs: q, k, v uniform in [-1, 1), q then scaled by kQueryScale (a power of two,
// so exact) to make the softmax peaked enough that merge bugs show; every value rounded to fp16
// or bf16 so the CPU and GPU paths see identical numbers. Deterministic per seed.
#include "treeattn/cpu/random_inputs.h"

#include <cstdint>

#include "treeattn/common/error.h"
#include "treeattn/common/half.h"

namespace treeattn {
namespace {

constexpr float kQueryScale = 4.0f;

/// splitmix64: fast, good enough for test data, and identical on every platform.
uint64_t next(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void fill(std::vector<float>* v, size_t n, uint64_t* rng, float scale, bool bf16) {
  v->resize(n);
  for (size_t i = 0; i < n; ++i) {
    // 24 random bits -> uniform in [-1, 1), exact in float.
    const float u = static_cast<float>(next(rng) >> 40) * 0x1.0p-23f - 1.0f;
    const float x = u * scale;
    (*v)[i] = bf16 ? round_to_bf16(x) : round_to_fp16(x);
  }
}

}  // namespace

RandomInputs random_inputs(const PrefixTree& tree, int32_t num_qo_heads, int32_t num_kv_heads,
                           int32_t head_dim, bool bf16, uint64_t seed) {
  TA_CHECK_ARG(num_qo_heads >= 1, "num_qo_heads", "must be >= 1, got ", num_qo_heads);
  TA_CHECK_ARG(num_kv_heads >= 1, "num_kv_heads", "must be >= 1, got ", num_kv_heads);
  TA_CHECK_ARG(head_dim >= 1, "head_dim", "must be >= 1, got ", head_dim);
  TA_CHECK_ARG(tree.num_pages >= 0, "tree.num_pages", "must be >= 0, got ", tree.num_pages);
  check_page_size(tree.page_size, "tree.page_size");
  uint64_t rng = seed * 0xD1B54A32D192ED03ull + 0x5DEECE66Dull;
  RandomInputs r;
  const size_t kv = static_cast<size_t>(tree.num_pages) * tree.page_size * num_kv_heads * head_dim;
  fill(&r.q, static_cast<size_t>(tree.num_queries()) * num_qo_heads * head_dim, &rng, kQueryScale,
       bf16);
  fill(&r.k, kv, &rng, 1.0f, bf16);
  fill(&r.v, kv, &rng, 1.0f, bf16);
  return r;
}

HostAttentionInputs host_inputs(const RandomInputs& data, int32_t num_qo_heads,
                                int32_t num_kv_heads, int32_t head_dim) {
  HostAttentionInputs in;
  in.num_qo_heads = num_qo_heads;
  in.num_kv_heads = num_kv_heads;
  in.head_dim = head_dim;
  in.q = data.q.data();
  in.k = data.k.data();
  in.v = data.v.data();
  return in;
}

}  // namespace treeattn
