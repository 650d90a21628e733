// Helpers for the GPU tests: the check harness they share with `treeattn bench` (DeviceInputs,
// treeattn/kernels/device_inputs.h; oracle_sample and compare_to_sample, treeattn/cpu/) wrapped
// to fail the current test, one planned run through DevicePlan on a tree, and device buffers.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "treeattn/cpu/compare.h"
#include "treeattn/cpu/random_inputs.h"
#include "treeattn/kernels/decode.h"
#include "treeattn/kernels/device_inputs.h"
#include "treeattn/kernels/device_plan.h"
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
  int32_t sample_queries = 16;        ///< checked queries (spread over the batch)
  KvDType kv_dtype = KvDType::kSame;  ///< an fp8 cache: K/V stored as fp8(value / scale)
  float k_scale = 1.f, v_scale = 1.f;
  float sm_scale = 0.f;     ///< the softmax scale of the run and the oracle (0: 1/sqrt(head_dim))
  int32_t paths_group = 0;  ///< PlanOptions::paths_group (0: the model's)
  std::string describe() const;
};

/// Floats of 16-bit fp16 / bf16 bits (a fetched output).
std::vector<float> from_bits(const std::vector<uint16_t>& b, bool bf16);

/// A case's random inputs (seeded) on the device in its KV layout, plus out/lse buffers and the
/// DecodeArgs over them (DeviceInputs::fill: later fills reuse the first one's buffers, so the
/// tree must not grow in between). Fails the current test on an error.
using CaseInputs = DeviceInputs;
void fill_inputs(const PrefixTree& tree, const Case& c, uint64_t seed, CaseInputs* in);

/// DeviceInputs::run_and_fetch with in.args: poisoned out/lse and partials, a run of `dp` on
/// `stream` (or a replay of `graph` when given), out/lse copied back. Fails the current test on an
/// error.
void run_and_fetch(const DevicePlan& dp, const CaseInputs& in, cudaStream_t stream,
                   cudaGraphExec_t graph, std::vector<uint16_t>* out, std::vector<float>* lse);

/// Checks a fetched run of `in` against oracle_sample on c.sample_queries queries with
/// compare_to_sample (the fp16 or bf16 bound; LSE only with c.with_lse); fails the current test.
void expect_matches_oracle(const PrefixTree& tree, const Case& c, const CaseInputs& in,
                           const std::vector<uint16_t>& out, const std::vector<float>& lse);

/// The case's plan (make_plan with its planner, shape and KV element size).
Plan make_case_plan(const PrefixTree& tree, const Case& c);

/// Plans, uploads inputs in the requested KV layout and the plan through a DevicePlan, poisons
/// out/lse and the partials (0xFF bytes), runs once and checks it against the oracle. Fails the
/// current test on any error, a planner that throws included.
void plan_run_check(const PrefixTree& tree, const Case& c);

/// Runs `plan` on two workspaces laid out with headroom 1 and 3 (3x the CTAs in every launch),
/// `runs` times each; the first run must match the oracle (every query of c.sample_queries) and
/// every run must give its output and LSE bits. Fails the current test.
void expect_deterministic(const PrefixTree& tree, const Case& c, const Plan& plan, int runs);

/// The tree of a level spec (e.g. "N=1,64 C=100,9 heads=32/8 dim=128 page=16") with its pages
/// shuffled by `page_seed`, and a Case with the spec's heads and head dim.
struct LevelsCase {
  PrefixTree tree;
  Case c;
};
LevelsCase levels_case(const char* levels, const char* planner, bool bf16, uint64_t page_seed);

/// plan_run_check on the tree of a level spec (e.g. "N=1,64 C=100,9 heads=32/8 dim=128 page=16")
/// with its pages shuffled by `page_seed`; heads and head dim from the spec, inputs from
/// `input_seed`.
void levels_run_check(const char* levels, const char* planner, bool bf16, uint64_t page_seed,
                      uint64_t input_seed, int32_t sample_queries = 16);

}  // namespace treeattn::gpu_test
