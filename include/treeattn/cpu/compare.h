// compare_to_oracle(): the one rule for "an attention output matches the float64 oracle"
// (reference_attention, reference.h), used by the CPU tests, `treeattn check`, the benchmark and
// the GPU tests.
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
// LSE arrays (float32 whatever the output dtype) are compared with the same function and the
// same bound as the output they belong to.
#pragma once

#include <cstdint>
#include <vector>

namespace treeattn {

enum class OutputDtype { kFp32, kFp16, kBf16 };

/// The bound on max_rel_err for outputs stored as `dtype` (see the file comment).
double oracle_tolerance(OutputDtype dtype);

struct OracleComparison {
  double max_rel_err = 0;  ///< max |out - ref| / max |ref| (absolute when max |ref| == 0)
  bool nan = false;        ///< some checked element of out or ref is NaN or infinite
  double bound = 0;        ///< oracle_tolerance(dtype)
  bool pass = false;       ///< !nan && max_rel_err <= bound
};

/// Compares `n` produced values `out` with the float64 oracle's `ref`, element by element.
OracleComparison compare_to_oracle(const double* ref, const float* out, int64_t n,
                                   OutputDtype dtype);

/// The same over the rows `rows` only of [num_rows, row_size] arrays (sampled queries).
OracleComparison compare_rows_to_oracle(const double* ref, const float* out, int64_t row_size,
                                        const std::vector<int32_t>& rows, OutputDtype dtype);

}  // namespace treeattn
