// compare_to_oracle() and its tolerance rule (include/treeattn/cpu/compare.h).
#include "treeattn/cpu/compare.h"

#include <algorithm>
#include <cmath>

#include "treeattn/common/error.h"

namespace treeattn {
namespace {

/// Running maxima of one comparison.
struct Tally {
  double max_ref = 0, max_err = 0;
  bool nan = false;
  void add(const double* ref, const float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const double o = static_cast<double>(out[i]);
      if (!std::isfinite(o) || !std::isfinite(ref[i])) {
        nan = true;
        continue;
      }
      max_ref = std::max(max_ref, std::fabs(ref[i]));
      max_err = std::max(max_err, std::fabs(o - ref[i]));
    }
  }
  OracleComparison result(OutputDtype dtype) const {
    OracleComparison c;
    c.max_rel_err = max_ref > 0 ? max_err / max_ref : max_err;
    c.nan = nan;
    c.bound = oracle_tolerance(dtype);
    c.pass = !nan && c.max_rel_err <= c.bound;
    return c;
  }
};

}  // namespace

double oracle_tolerance(OutputDtype dtype) {
  switch (dtype) {
    case OutputDtype::kFp32:
      return 1e-4;
    case OutputDtype::kFp16:
      return 2e-3;
    case OutputDtype::kBf16:
      return 1e-2;
  }
  TA_CHECK_ARG(false, "dtype", "unknown output dtype ", static_cast<int>(dtype));
  return 0;
}

OracleComparison compare_to_oracle(const double* ref, const float* out, int64_t n,
                                   OutputDtype dtype) {
  TA_CHECK_ARG(n >= 0, "n", "must be >= 0, got ", n);
  TA_CHECK_ARG(n == 0 || (ref != nullptr && out != nullptr), "ref", "null array");
  Tally t;
  t.add(ref, out, n);
  return t.result(dtype);
}

OracleComparison compare_rows_to_oracle(const double* ref, const float* out, int64_t row_size,
                                        const std::vector<int32_t>& rows, OutputDtype dtype) {
  TA_CHECK_ARG(row_size >= 0, "row_size", "must be >= 0, got ", row_size);
  TA_CHECK_ARG(rows.empty() || (ref != nullptr && out != nullptr), "ref", "null array");
  Tally t;
  for (const int32_t r : rows) {
    TA_CHECK_ARG(r >= 0, "rows", "negative row ", r);
    const int64_t off = static_cast<int64_t>(r) * row_size;
    t.add(ref + off, out + off, row_size);
  }
  return t.result(dtype);
}

}  // namespace treeattn
