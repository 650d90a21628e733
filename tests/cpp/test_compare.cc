// Tests of compare_to_oracle() (include/treeattn/cpu/compare.h): the measure is relative to the
// largest reference value, NaN and infinity never pass, the bound follows the output dtype, and
// the row-sampled form only looks at the given rows.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "treeattn/cpu/compare.h"

namespace treeattn {
namespace {

TEST(CompareToOracle, RelativeToLargestReference) {
  const std::vector<double> ref = {2.0, -4.0, 0.0, 1e-9};
  std::vector<float> out = {2.0f, -4.0f, 0.0f, 0.0f};
  OracleComparison c = compare_to_oracle(ref.data(), out.data(), 4, OutputDtype::kFp32);
  EXPECT_TRUE(c.pass);  // the tiny element's relative error does not count on its own
  EXPECT_NEAR(c.max_rel_err, 1e-9 / 4.0, 1e-15);
  out[0] = 2.0f + 4.0f * 5e-4f;  // 5e-4 of max |ref|: fails fp32, passes fp16 and bf16
  c = compare_to_oracle(ref.data(), out.data(), 4, OutputDtype::kFp32);
  EXPECT_FALSE(c.pass);
  EXPECT_NEAR(c.max_rel_err, 5e-4, 1e-6);
  EXPECT_EQ(c.bound, oracle_tolerance(OutputDtype::kFp32));
  EXPECT_TRUE(compare_to_oracle(ref.data(), out.data(), 4, OutputDtype::kFp16).pass);
  EXPECT_TRUE(compare_to_oracle(ref.data(), out.data(), 4, OutputDtype::kBf16).pass);
  EXPECT_LT(oracle_tolerance(OutputDtype::kFp32), oracle_tolerance(OutputDtype::kFp16));
  EXPECT_LT(oracle_tolerance(OutputDtype::kFp16), oracle_tolerance(OutputDtype::kBf16));
}

TEST(CompareToOracle, NanAndInfinityNeverPass) {
  const std::vector<double> ref = {1.0, 2.0};
  for (const float bad : {NAN, INFINITY, -INFINITY}) {
    const std::vector<float> out = {1.0f, bad};
    const OracleComparison c = compare_to_oracle(ref.data(), out.data(), 2, OutputDtype::kBf16);
    EXPECT_TRUE(c.nan);
    EXPECT_FALSE(c.pass);
  }
}

TEST(CompareToOracle, AllZeroReferenceIsAbsolute) {
  const std::vector<double> ref = {0.0, 0.0};
  const std::vector<float> out = {0.0f, 1e-3f};
  const OracleComparison c = compare_to_oracle(ref.data(), out.data(), 2, OutputDtype::kFp16);
  EXPECT_NEAR(c.max_rel_err, 1e-3, 1e-9);
  EXPECT_TRUE(c.pass);
}

TEST(CompareToOracle, RowsOnlyLooksAtTheSample) {
  // 3 rows of 2; row 1 is poisoned (not computed), rows 0 and 2 match.
  const std::vector<double> ref = {1, 2, 3, 4, 5, 6};
  const std::vector<float> out = {1, 2, NAN, NAN, 5, 6};
  EXPECT_TRUE(compare_rows_to_oracle(ref.data(), out.data(), 2, {0, 2}, OutputDtype::kFp32).pass);
  EXPECT_FALSE(compare_rows_to_oracle(ref.data(), out.data(), 2, {1}, OutputDtype::kFp32).pass);
}

}  // namespace
}  // namespace treeattn
