// The GPU half of the correctness check that `treeattn bench` and the GPU tests share: a problem's
// random inputs written on the device (the values random_inputs() gives on the host, from the
// stream of treeattn/common/random_values.h), the DecodeArgs over them, and one run of a
// DevicePlan on poisoned outputs fetched back to the host. The host half, the float64 oracle on a
// sample of queries and the comparison, is oracle_sample() (treeattn/cpu/random_inputs.h) and
// compare_to_sample() (treeattn/cpu/compare.h):
//
//   DeviceInputs in;
//   in.fill(tree, spec, KvLayout::kSplit, /*with_lse=*/true, stream);
//   in.run_and_fetch(dp, in.args, stream, nullptr, &out, &lse);
//   compare_to_sample(oracle_sample(tree, in.spec(), 16), out, &lse).pass
#pragma once

#include <cstdint>
#include <vector>

#include "treeattn/common/random_values.h"
#include "treeattn/kernels/decode.h"
#include "treeattn/kernels/device_plan.h"
#include "treeattn/tree/prefix_tree.h"

typedef struct CUgraphExec_st* cudaGraphExec_t;

namespace treeattn {

/// Writes `count` values of `tensor` from `values` (elements [0, count)), rounded to bf16 or fp16,
/// as 16-bit bits into device memory on `stream` (asynchronously): element i goes to
/// dst[i] when chunk == 0, else to dst[(i / chunk) * chunk_stride + i % chunk] (e.g. K or V pages
/// of the combined KV layout). Throws std::runtime_error with the CUDA error.
void fill_random_values(uint16_t* dst, const RandomValueStream& values, InputTensor tensor,
                        uint64_t count, bool bf16, cudaStream_t stream, uint64_t chunk = 0,
                        uint64_t chunk_stride = 0);

/// Same for an fp8 K or V (`type` e4m3 / e5m2): element i = float_to_fp8_bits(value / scale)
/// (treeattn/common/fp8.h), the cache of a tensor that stands for scale x stored values. Throws
/// std::invalid_argument naming "type" or "scale" (finite, > 0), std::runtime_error with the CUDA
/// error.
void fill_random_values_fp8(uint8_t* dst, const RandomValueStream& values, InputTensor tensor,
                            uint64_t count, KvDType type, float scale, cudaStream_t stream,
                            uint64_t chunk = 0, uint64_t chunk_stride = 0);

enum class KvLayout {
  kSplit,     ///< K and V each [num_pages, page_size, num_kv_heads, head_dim]
  kCombined,  ///< one [num_pages, 2, page_size, num_kv_heads, head_dim] cache (vLLM, FlashInfer)
};

/// Device buffers of one problem's q, K/V, out and lse, and the DecodeArgs over them. Not
/// copyable; frees its buffers when destroyed. Thread safety: one thread at a time.
class DeviceInputs {
 public:
  DeviceInputs() = default;
  ~DeviceInputs();
  DeviceInputs(const DeviceInputs&) = delete;
  DeviceInputs& operator=(const DeviceInputs&) = delete;

  /// Writes random_inputs(tree, spec...)'s q, k and v on the device in `layout` (on `stream`,
  /// then waits) and points `args` at them, at out and (with_lse) at lse; for an fp8
  /// spec.kv_dtype, K/V are written in fp8 (fill_random_values_fp8) and args.kv_dtype, k_scale
  /// and v_scale point at device copies of the spec's scales; args.sm_scale = spec.sm_scale. The
  /// other fields of `args` are left as they are. The first call allocates the buffers; later ones
  /// reuse them (a graph captured around a run keeps pointing at them) and throw
  /// std::invalid_argument naming "tree" when its inputs or outputs need more room than the first
  /// call's. Throws std::invalid_argument naming a field of `spec`, std::runtime_error with a CUDA
  /// error.
  void fill(const PrefixTree& tree, const RandomInputSpec& spec, KvLayout layout, bool with_lse,
            cudaStream_t stream = nullptr);

  /// Poisons out, lse and the partials of `dp`'s workspace (0xFF bytes: every value the merge
  /// reads must have been written), runs `dp` on `stream` with `run_args` (`args`, or a copy of it
  /// with other fields set, over these buffers) or launches `graph` when given, waits, and copies
  /// the outputs of the last fill's tree back: `out` the fp16 / bf16 bits [num_queries,
  /// num_qo_heads, head_dim], `lse` [num_queries, num_qo_heads] (the poison bits when run without
  /// LSE). Throws what DevicePlan::run throws, std::runtime_error with a CUDA error,
  /// std::logic_error before the first fill.
  void run_and_fetch(const DevicePlan& dp, const DecodeArgs& run_args, cudaStream_t stream,
                     cudaGraphExec_t graph, std::vector<uint16_t>* out,
                     std::vector<float>* lse) const;

  /// The spec of the last fill (the oracle needs its seed and shape).
  const RandomInputSpec& spec() const { return spec_; }

  DecodeArgs args;  ///< over the buffers after fill(); the caller may set other fields

 private:
  struct Buffer {
    void* ptr = nullptr;
    uint64_t bytes = 0;
  };
  Buffer q_, kv_, out_, lse_, scales_;
  RandomInputSpec spec_;
  uint64_t out_elems_ = 0, lse_elems_ = 0;  ///< of the last fill's tree
};

}  // namespace treeattn
