// compare_to_oracle(): the one rule for "an attention output matches the float64 oracle"
// (reference_attention, reference.h), used by the CPU tests, the planner fuzzer, `treeattn check`,
// `treeattn bench` and the GPU tests. No caller has a tolerance of its own. compare_to_sample()
// applies it to a GPU run's 16-bit outputs on the queries of an oracle sample (the check that
// `treeattn bench` and the GPU tests share with DeviceInputs, treeattn/kernels/device_inputs.h).
//
// The rule. Error measure: max_rel_err = max_i |out_i - ref_i| / max_i |ref_i| over every checked
// element (the absolute max_i |out_i - ref_i| when every ref_i is 0). The measure is relative to
// the largest reference value, not per element: outputs are softmax-weighted averages of V rows,
// and single elements can be ~0. A NaN or infinity in `out` (or `ref`) never passes. The bound
// depends only on the storage dtype of the output that was produced:
//   fp32  1e-4  float32 arithmetic on inputs already rounded to fp16/bf16 (the CPU executor):
//               measured <= 2.6e-5 on every workload line with every planner;
//   fp16  2e-3  outputs rounded to fp16 (2^-11 relative) after fp16 P x V MMAs with fp32
//               accumulation (the CUDA kernels);
//   bf16  1e-2  the same with bf16 (2^-8 relative).
// LSEs (natural log, float32 whatever the output dtype) get the same bound as the output they
// belong to, on lse_rel_err = max |lse - ref| / max(1, max |ref|): an LSE is a logarithm, so an
// error d in it is a relative error d of the softmax denominator, and LSEs near 0 (one visible
// key with a score near 0) must not turn a tiny absolute error into a large relative one.
//
// Empty rows. A (query, head) row whose oracle LSE is -inf sees no key (zero context, or every key
// masked); its result is the empty attention state, and it passes only when its output is exactly
// 0 and its LSE exactly -inf (NaN never passes). Empty rows take no part in the error measures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace treeattn {

enum class OutputDtype { kFp32, kFp16, kBf16 };

/// The bound on max_rel_err for outputs stored as `dtype` (see the file comment).
double oracle_tolerance(OutputDtype dtype);

struct OracleComparison {
  double max_rel_err = 0;  ///< outputs: max |out - ref| / max |ref| (absolute when max |ref| == 0)
  double lse_rel_err = 0;  ///< LSEs: max |lse - ref| / max(1, max |ref|) (0 when not compared)
  bool nan = false;        ///< a checked value of out/lse or ref is NaN or +-inf (empty rows aside)
  int64_t empty_rows = 0;  ///< checked (query, head) rows with oracle LSE -inf
  int64_t bad_empty_rows = 0;  ///< of those, rows not exactly o = 0, lse = -inf
  double bound = 0;            ///< oracle_tolerance(dtype)
  bool pass = false;           ///< passes(bound)
  /// The rule with another bound (`treeattn check --tolerance`).
  bool passes(double b) const {
    return !nan && bad_empty_rows == 0 && max_rel_err <= b && lse_rel_err <= b;
  }
  /// "max_rel_err 1.2e-04, lse_rel_err 3.0e-06 (bound 2.0e-03)", plus "NaN" and "k/n empty rows
  /// not exactly o = 0, lse = -inf" when they occur.
  std::string describe() const;
};

/// Compares one attention result with the oracle's, over the queries `queries` only (sampled
/// queries; the others are not read). Outputs are [num_queries, heads, head_dim], LSEs
/// [num_queries, heads], dense. `lse` may be null (a run without LSE output): then only the
/// outputs are compared, empty rows included; `ref_lse` is always needed (it marks empty rows).
OracleComparison compare_to_oracle(const double* ref_out, const double* ref_lse, const float* out,
                                   const float* lse, int64_t heads, int64_t head_dim,
                                   const std::vector<int32_t>& queries, OutputDtype dtype);

/// Sampled query ids: all of [0, num_queries) when there are <= k, else k spread evenly (the
/// first and the last included). Throws std::invalid_argument naming "k" when k < 1.
std::vector<int32_t> sample_queries(int32_t num_queries, int32_t k);

/// The float64 oracle's results for a sample of queries (oracle_sample(), random_inputs.h):
/// out [queries.size(), num_qo_heads, head_dim] and lse [queries.size(), num_qo_heads], row i
/// for query queries[i]; `bf16` is the inputs' dtype, which the GPU kernels also write out in.
struct OracleSample {
  std::vector<int32_t> queries;
  int32_t num_qo_heads = 0, head_dim = 0;
  bool bf16 = false;
  std::vector<double> out, lse;
};

/// A GPU run's outputs against the sample with compare_to_oracle at the fp16 or bf16 bound: `out`
/// holds the fp16 / bf16 bits of [num_queries, num_qo_heads, head_dim], `lse` (null: outputs
/// only) the float32 [num_queries, num_qo_heads]; only the sampled queries' rows are read. Throws
/// std::invalid_argument naming "out" or "lse" when a sampled row lies past its end.
OracleComparison compare_to_sample(const OracleSample& ref, const std::vector<uint16_t>& out,
                                   const std::vector<float>* lse);

}  // namespace treeattn
