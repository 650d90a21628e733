// Helpers for the GPU tests: device buffers, fp16/bf16 upload, one planned run of run_decode on a
// tree, and the error bound (float64 oracle vs a same-precision naive CPU implementation).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "treeattn/kernels/decode.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn::gpu_test {

/// Skips the current test when no CUDA device is usable.
#define TA_REQUIRE_GPU()                                                          \
  do {                                                                            \
    int n_ = 0;                                                                   \
    const cudaError_t e_ = cudaGetDeviceCount(&n_);                               \
    if (e_ != cudaSuccess || n_ == 0)                                             \
      GTEST_SKIP() << "no CUDA GPU: "                                             \
                   << (e_ != cudaSuccess ? cudaGetErrorString(e_) : "0 devices"); \
  } while (0)

#define TA_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(expr)

/// Owning device allocation.
struct DevBuf {
  void* ptr = nullptr;
  size_t bytes = 0;
  DevBuf() = default;
  explicit DevBuf(size_t n) : bytes(n) {
    if (cudaMalloc(&ptr, n == 0 ? 16 : n) != cudaSuccess) ptr = nullptr;
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (ptr != nullptr) cudaFree(ptr);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

/// One test configuration.
struct Case {
  std::string planner = "query";
  bool bf16 = false;
  int32_t num_qo_heads = 32, num_kv_heads = 8, head_dim = 128;
  bool combined_kv = false;  ///< vLLM [pages, 2, P, H, D] layout
  bool with_lse = true;
  uint64_t seed = 1;
  int32_t sample_queries = 16;  ///< checked queries (spread over the batch)
  std::string describe() const;
};

/// Error summary of one checked run.
struct CheckResult {
  double max_err = 0, naive_err = 0, bound = 0;  ///< output |gpu - ref|, naive |cpu - ref|
  double max_lse_err = 0, naive_lse_err = 0, lse_bound = 0;
  int64_t nan_count = 0, checked = 0;
  bool pass() const { return nan_count == 0 && max_err <= bound && max_lse_err <= lse_bound; }
  std::string describe() const;
};

/// Host copies of the 16-bit bits of a float vector already rounded to the dtype.
std::vector<uint16_t> to_bits(const std::vector<float>& v, bool bf16);

/// Sampled query ids: all when the tree has <= k queries, else k spread evenly (first and last
/// included).
std::vector<int32_t> sample_queries(int32_t num_queries, int32_t k);

/// Checks GPU output/LSE (host copies, dtype bits / float) against reference_attention and the
/// naive same-precision implementation for the sampled queries.
CheckResult check_outputs(const PrefixTree& tree, const Case& c, const std::vector<float>& q,
                          const std::vector<float>& k, const std::vector<float>& v,
                          const std::vector<uint16_t>& out_bits, const std::vector<float>& lse,
                          const std::vector<int32_t>& queries);

/// Uploads inputs in the requested KV layout, poisons out/lse (0xFF bytes), plans, packs,
/// uploads, runs run_decode once and checks it. Fails the current test on any error.
void plan_run_check(const PrefixTree& tree, const Case& c);

}  // namespace treeattn::gpu_test
