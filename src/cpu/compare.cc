// compare_to_oracle() and its tolerance rule, the query sample and the comparison of a GPU run
// with an oracle sample (include/treeattn/cpu/compare.h).
#include "treeattn/cpu/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "treeattn/common/error.h"
#include "treeattn/common/half.h"

namespace treeattn {
namespace {

/// Running maxima of one array's comparison.
struct Tally {
  double max_ref = 0, max_err = 0;
  bool nan = false;
  void add(double ref, double out) {
    if (!std::isfinite(out) || !std::isfinite(ref)) {
      nan = true;
      return;
    }
    max_ref = std::max(max_ref, std::fabs(ref));
    max_err = std::max(max_err, std::fabs(out - ref));
  }
  /// max_err / max(floor, max_ref); floor 0 for outputs (absolute when every ref is 0), 1 for LSEs.
  double rel(double floor) const {
    const double d = std::max(floor, max_ref);
    return d > 0 ? max_err / d : max_err;
  }
};

OracleComparison finish(const Tally& out, const Tally& lse, OutputDtype dtype, OracleComparison c) {
  c.max_rel_err = out.rel(0.0);
  c.lse_rel_err = lse.rel(1.0);
  c.nan = out.nan || lse.nan;
  c.bound = oracle_tolerance(dtype);
  c.pass = c.passes(c.bound);
  return c;
}

}  // namespace

std::string OracleComparison::describe() const {
  char buf[160];
  int n = std::snprintf(buf, sizeof(buf), "max_rel_err %.2e, lse_rel_err %.2e (bound %.1e)",
                        max_rel_err, lse_rel_err, bound);
  if (nan && n < static_cast<int>(sizeof(buf)))
    n += std::snprintf(buf + n, sizeof(buf) - n, ", NaN");
  if (bad_empty_rows > 0 && n < static_cast<int>(sizeof(buf)))
    std::snprintf(buf + n, sizeof(buf) - n, ", %lld/%lld empty rows not exactly o = 0, lse = -inf",
                  static_cast<long long>(bad_empty_rows), static_cast<long long>(empty_rows));
  return buf;
}

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

OracleComparison compare_to_oracle(const double* ref_out, const double* ref_lse, const float* out,
                                   const float* lse, int64_t heads, int64_t head_dim,
                                   const std::vector<int32_t>& queries, OutputDtype dtype) {
  TA_CHECK_ARG(heads >= 1 && head_dim >= 1, "heads", "heads and head_dim must be >= 1, got ", heads,
               " and ", head_dim);
  TA_CHECK_ARG(queries.empty() || (ref_out != nullptr && ref_lse != nullptr && out != nullptr),
               "ref_out", "null array");
  Tally to, tl;
  OracleComparison c;
  for (const int32_t q : queries) {
    TA_CHECK_ARG(q >= 0, "queries", "negative query ", q);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t row = static_cast<int64_t>(q) * heads + h;
      const float* o = out + row * head_dim;
      if (ref_lse[row] == -INFINITY) {  // empty row: exactly the empty state
        ++c.empty_rows;
        bool ok = lse == nullptr || lse[row] == -INFINITY;
        for (int64_t d = 0; d < head_dim && ok; ++d) ok = o[d] == 0.f;
        c.bad_empty_rows += !ok;
        continue;
      }
      const double* r = ref_out + row * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) to.add(r[d], static_cast<double>(o[d]));
      if (lse != nullptr) tl.add(ref_lse[row], static_cast<double>(lse[row]));
    }
  }
  return finish(to, tl, dtype, c);
}

std::vector<int32_t> sample_queries(int32_t num_queries, int32_t k) {
  TA_CHECK_ARG(k >= 1, "k", "must be >= 1, got ", k);
  std::vector<int32_t> s;
  if (num_queries <= k) {
    for (int32_t q = 0; q < num_queries; ++q) s.push_back(q);
    return s;
  }
  if (k == 1) return {0};
  for (int32_t i = 0; i < k; ++i)
    s.push_back(static_cast<int32_t>(static_cast<int64_t>(i) * (num_queries - 1) / (k - 1)));
  s.erase(std::unique(s.begin(), s.end()), s.end());
  return s;
}

OracleComparison compare_to_sample(const OracleSample& ref, const std::vector<uint16_t>& out,
                                   const std::vector<float>* lse) {
  const int64_t H = ref.num_qo_heads, HD = H * ref.head_dim;
  const size_t n = ref.queries.size();
  TA_CHECK_ARG(ref.out.size() == n * HD && ref.lse.size() == n * H, "ref",
               "oracle sample arrays do not match its queries and shape");
  std::vector<float> got(n * HD), got_lse(n * H);
  std::vector<int32_t> rows(n);
  for (size_t i = 0; i < n; ++i) {
    rows[i] = static_cast<int32_t>(i);
    const size_t q = static_cast<size_t>(ref.queries[i]);
    TA_CHECK_ARG((q + 1) * HD <= out.size(), "out", "holds ", out.size(),
                 " elements, sampled query ", q, " needs ", (q + 1) * HD);
    for (int64_t e = 0; e < HD; ++e) {
      const uint16_t b = out[q * HD + e];
      got[i * HD + e] = ref.bf16 ? bf16_bits_to_float(b) : half_bits_to_float(b);
    }
    if (lse == nullptr) continue;
    TA_CHECK_ARG((q + 1) * H <= lse->size(), "lse", "holds ", lse->size(),
                 " elements, sampled query ", q, " needs ", (q + 1) * H);
    for (int64_t h = 0; h < H; ++h) got_lse[i * H + h] = (*lse)[q * H + h];
  }
  return compare_to_oracle(ref.out.data(), ref.lse.data(), got.data(),
                           lse != nullptr ? got_lse.data() : nullptr, H, ref.head_dim, rows,
                           ref.bf16 ? OutputDtype::kBf16 : OutputDtype::kFp16);
}

}  // namespace treeattn
