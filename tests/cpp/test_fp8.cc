// fp8 KV on the host: the conversions of treeattn/common/fp8.h (every code of e4m3 and e5m2
// against an independent decode, round-trips, ties to even, saturation, NaN, subnormals), the
// random inputs of an fp8 spec (values on the scaled fp8 grid, scale checks), the plan's KV bytes
// (kv_dtype_bytes in the options, the shape, the stats and the cost model) and the CPU executor
// against the float64 oracle on dequantized fp8 inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_planners_util.h"
#include "treeattn/common/fp8.h"
#include "treeattn/cpu/random_inputs.h"
#include "treeattn/plan/cost/cost_model.h"
#include "treeattn/plan/layout.h"
#include "treeattn/plan/planner.h"
#include "treeattn/plan/stats.h"
#include "treeattn/tree/levels.h"

namespace treeattn {
namespace {

const KvDType kBoth[] = {KvDType::kFloat8E4M3, KvDType::kFloat8E5M2};

/// Value of code b from its fields, in double (written from the format tables, not fp8.h):
/// e4m3 = 1 sign, 4 exponent bits (bias 7), 3 mantissa bits, only S.1111.111 is NaN;
/// e5m2 = 1, 5 (bias 15), 2, exponent 31 = inf (mantissa 0) or NaN.
double decode_ref(uint8_t b, KvDType t) {
  const bool e4 = t == KvDType::kFloat8E4M3;
  const int mbits = e4 ? 3 : 2, ebits = e4 ? 4 : 5, bias = e4 ? 7 : 15;
  const int exp = (b >> mbits) & ((1 << ebits) - 1), man = b & ((1 << mbits) - 1);
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  if (e4 && exp == 15 && man == 7) return std::numeric_limits<double>::quiet_NaN();
  if (!e4 && exp == 31)
    return man == 0 ? sign * std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::quiet_NaN();
  const double frac = static_cast<double>(man) / (1 << mbits);
  return exp == 0 ? sign * frac * std::pow(2.0, 1 - bias)
                  : sign * (1.0 + frac) * std::pow(2.0, exp - bias);
}

TEST(Fp8, EveryCodeDecodesAndRoundTrips) {
  for (KvDType t : kBoth) {
    int nans = 0, infs = 0;
    for (int c = 0; c < 256; ++c) {
      const uint8_t b = static_cast<uint8_t>(c);
      const double want = decode_ref(b, t);
      const float got = fp8_bits_to_float(b, t);
      if (std::isnan(want)) {
        ++nans;
        EXPECT_TRUE(std::isnan(got)) << kv_dtype_name(t) << " code " << c;
        EXPECT_TRUE(std::isnan(round_to_fp8(got, t)));
        continue;
      }
      ASSERT_EQ(static_cast<double>(got), want) << kv_dtype_name(t) << " code " << c;
      EXPECT_EQ(std::signbit(got), (b & 0x80) != 0) << c;  // -0 stays -0
      if (std::isinf(want)) {
        ++infs;  // inf saturates: the largest finite code of its sign
        EXPECT_EQ(float_to_fp8_bits(got, t),
                  (b & 0x80) | (t == KvDType::kFloat8E4M3 ? 0x7E : 0x7B));
        continue;
      }
      EXPECT_EQ(float_to_fp8_bits(got, t), b) << kv_dtype_name(t) << " code " << c;
    }
    EXPECT_EQ(nans, t == KvDType::kFloat8E4M3 ? 2 : 6);
    EXPECT_EQ(infs, t == KvDType::kFloat8E4M3 ? 0 : 2);
  }
}

TEST(Fp8, KnownValues) {
  const KvDType e4 = KvDType::kFloat8E4M3, e5 = KvDType::kFloat8E5M2;
  EXPECT_EQ(fp8_bits_to_float(0x38, e4), 1.0f);
  EXPECT_EQ(fp8_bits_to_float(0x7E, e4), 448.0f);
  EXPECT_EQ(fp8_bits_to_float(0x08, e4), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(fp8_bits_to_float(0x01, e4), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_bits_to_float(0x3C, e5), 1.0f);
  EXPECT_EQ(fp8_bits_to_float(0x7B, e5), 57344.0f);
  EXPECT_EQ(fp8_bits_to_float(0x04, e5), std::ldexp(1.0f, -14));
  EXPECT_EQ(fp8_bits_to_float(0x01, e5), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8_max(e4), 448.0f);
  EXPECT_EQ(fp8_max(e5), 57344.0f);
  EXPECT_STREQ(kv_dtype_name(KvDType::kSame), "same");
  EXPECT_STREQ(kv_dtype_name(e4), "fp8_e4m3");
  EXPECT_STREQ(kv_dtype_name(e5), "fp8_e5m2");
  EXPECT_FALSE(is_fp8(KvDType::kSame));
  EXPECT_TRUE(is_fp8(e4) && is_fp8(e5));
}

// Between two neighbouring finite codes: the midpoint goes to the even code (mantissa LSB 0),
// anything off the midpoint to the nearer one. Covers subnormals and the normal range.
TEST(Fp8, RoundsToNearestEven) {
  for (KvDType t : kBoth) {
    for (int c = 0; c < 0x7F; ++c) {
      const uint8_t lo = static_cast<uint8_t>(c), hi = static_cast<uint8_t>(c + 1);
      const double a = decode_ref(lo, t), b = decode_ref(hi, t);
      if (!std::isfinite(a) || !std::isfinite(b)) continue;
      const float mid = static_cast<float>((a + b) / 2);  // exact: few mantissa bits
      ASSERT_EQ(static_cast<double>(mid), (a + b) / 2);
      const uint8_t even = (lo & 1) == 0 ? lo : hi;
      EXPECT_EQ(float_to_fp8_bits(mid, t), even) << kv_dtype_name(t) << " tie after " << c;
      EXPECT_EQ(float_to_fp8_bits(-mid, t), even | 0x80) << kv_dtype_name(t) << " " << c;
      EXPECT_EQ(float_to_fp8_bits(std::nextafter(mid, 0.f), t), lo) << c;
      EXPECT_EQ(float_to_fp8_bits(std::nextafter(mid, 1e30f), t), hi) << c;
    }
  }
}

TEST(Fp8, SaturatesInfinitiesAndLargeValues) {
  for (KvDType t : kBoth) {
    const uint8_t top = t == KvDType::kFloat8E4M3 ? 0x7E : 0x7B;
    const float mx = fp8_max(t);
    for (float f : {mx, std::nextafter(mx, 1e30f), mx * 1.1f, mx * 2.f, 1e30f,
                    std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity()}) {
      EXPECT_EQ(float_to_fp8_bits(f, t), top) << kv_dtype_name(t) << " " << f;
      EXPECT_EQ(float_to_fp8_bits(-f, t), top | 0x80) << kv_dtype_name(t) << " " << -f;
      EXPECT_EQ(round_to_fp8(f, t), mx);
    }
  }
}

TEST(Fp8, NanStaysNanAndTinyValuesUnderflow) {
  for (KvDType t : kBoth) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(float_to_fp8_bits(nan, t), 0x7F);
    EXPECT_EQ(float_to_fp8_bits(-nan, t), 0xFF);
    EXPECT_TRUE(std::isnan(round_to_fp8(nan, t)));
    const float sub = std::ldexp(1.0f, t == KvDType::kFloat8E4M3 ? -9 : -16);  // smallest
    EXPECT_EQ(float_to_fp8_bits(sub / 2, t), 0x00);                            // tie to even: zero
    EXPECT_EQ(float_to_fp8_bits(-sub / 2, t), 0x80);
    EXPECT_EQ(float_to_fp8_bits(sub * 0.5001f, t), 0x01);
    EXPECT_EQ(float_to_fp8_bits(sub * 1.5f, t), 0x02);  // tie between 1 and 2: even
    EXPECT_EQ(float_to_fp8_bits(1e-30f, t), 0x00);
    EXPECT_EQ(float_to_fp8_bits(std::numeric_limits<float>::denorm_min(), t), 0x00);
    EXPECT_EQ(float_to_fp8_bits(0.f, t), 0x00);
    EXPECT_EQ(float_to_fp8_bits(-0.f, t), 0x80);
  }
}

PrefixTree fp8_tree() { return tree_from_levels(parse_levels("N=1,3 C=37,17 page=4 heads=8/2")); }

RandomInputSpec fp8_spec(KvDType t, float ks, float vs, uint64_t seed = 3) {
  RandomInputSpec s{8, 2, 64, false, seed};
  s.kv_dtype = t;
  s.k_scale = ks;
  s.v_scale = vs;
  return s;
}

TEST(Fp8, RandomInputsSitOnTheScaledGrid) {
  const PrefixTree tree = fp8_tree();
  for (KvDType t : kBoth)
    for (float scale : {1.0f, 0.37f, std::ldexp(1.0f, -10), std::ldexp(1.0f, 6)}) {
      const RandomInputs fp = random_inputs(tree, fp8_spec(t, scale, 2 * scale));
      const RandomInputs h = random_inputs(tree, 8, 2, 64, false, 3);
      ASSERT_EQ(fp.k.size(), h.k.size());
      EXPECT_EQ(fp.q, h.q);  // q stays fp16
      const RandomValueStream s = random_value_stream(
          fp8_spec(t, scale, 2 * scale), tree.num_queries(), tree.num_pages, tree.page_size);
      int differ = 0;
      for (size_t i = 0; i < fp.k.size(); ++i) {
        const float xk = s.value(InputTensor::kK, i), xv = s.value(InputTensor::kV, i);
        ASSERT_EQ(fp.k[i], scale * round_to_fp8(xk / scale, t)) << i;
        ASSERT_EQ(fp.v[i], 2 * scale * round_to_fp8(xv / (2 * scale), t)) << i;
        ASSERT_TRUE(std::isfinite(fp.k[i]) && std::isfinite(fp.v[i]));
        differ += fp.k[i] != h.k[i];
      }
      EXPECT_GT(differ, 0);  // fp8 is coarser than fp16
    }
}

void expect_throws_naming(const std::function<void()>& fn, const std::string& name) {
  try {
    fn();
    ADD_FAILURE() << "no throw for " << name;
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind(name, 0), 0u) << e.what();
  }
}

TEST(Fp8, BadScalesAreRefusedByName) {
  const PrefixTree tree = fp8_tree();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (KvDType t : kBoth)
    for (float bad : {0.f, -1.f, nan, inf, -inf}) {
      expect_throws_naming([&] { random_inputs(tree, fp8_spec(t, bad, 1.f)); }, "k_scale");
      expect_throws_naming([&] { random_inputs(tree, fp8_spec(t, 1.f, bad)); }, "v_scale");
      expect_throws_naming([&] { oracle_sample(tree, fp8_spec(t, bad, 1.f), 2); }, "k_scale");
      expect_throws_naming([&] { oracle_sample(tree, fp8_spec(t, 1.f, bad), 2); }, "v_scale");
    }
  RandomInputSpec odd = fp8_spec(KvDType::kFloat8E4M3, 1.f, 1.f);
  odd.kv_dtype = static_cast<KvDType>(7);
  expect_throws_naming([&] { random_inputs(tree, odd); }, "kv_dtype");
  // kSame ignores the scales
  EXPECT_NO_THROW(random_inputs(tree, fp8_spec(KvDType::kSame, 0.f, nan)));
}

TEST(Fp8, ExecutorMatchesOracleOnDequantizedInputs) {
  const PrefixTree tree = fp8_tree();
  for (KvDType t : kBoth)
    for (float scale : {1.0f, 0.37f, std::ldexp(1.0f, -10), std::ldexp(1.0f, 6)}) {
      PlanOptions o = make_plan_options("auto", 8, 2, 64, DeviceInfo(), 2, 1);
      const Plan plan = make_plan(tree, o);
      const RandomInputs in = random_inputs(tree, fp8_spec(t, scale, scale / 4, 11));
      testing_util::expect_plan_matches_reference(tree, plan, in, 1 << 20, 11);
      // the oracle sample sees the same dequantized values as the full oracle on `in`
      const OracleSample os = oracle_sample(tree, fp8_spec(t, scale, scale / 4, 11), 2);
      ASSERT_EQ(os.queries.size(), 2u);
      const int64_t row = 8 * 64;
      std::vector<double> ref(tree.num_queries() * row), lse(tree.num_queries() * 8);
      reference_attention(tree, host_inputs(in, 8, 2, 64), os.queries, ref.data(), lse.data());
      for (size_t i = 0; i < os.queries.size(); ++i)
        for (int64_t e = 0; e < row; ++e)
          ASSERT_NEAR(os.out[i * row + e], ref[os.queries[i] * row + e], 1e-12)
              << kv_dtype_name(t) << " scale " << scale;
    }
}

TEST(Fp8, PlanCountsOneBytePerKvElement) {
  const PrefixTree tree = tree_from_levels(parse_levels("N=256 C=4096 heads=32/8"));
  const DeviceInfo dev = device_preset("h100");
  const Plan p16 = make_plan(tree, make_plan_options("node", 32, 8, 128, dev));
  const Plan p8 = make_plan(tree, make_plan_options("node", 32, 8, 128, dev, 2, 1));
  EXPECT_EQ(p16.shape.kv_dtype_bytes, 2);
  EXPECT_EQ(p8.shape.kv_dtype_bytes, 1);
  EXPECT_EQ(p8.shape.dtype_bytes, 2);
  const PlanStats s16 = plan_stats(tree, p16, dev), s8 = plan_stats(tree, p8, dev);
  EXPECT_EQ(s8.kv_bytes_read * 2, s16.kv_bytes_read);
  EXPECT_EQ(s8.unique_kv_bytes * 2, s16.unique_kv_bytes);
  EXPECT_EQ(s8.qo_bytes, s16.qo_bytes);  // Q/O stay 2 bytes
  EXPECT_EQ(s8.partial_bytes, s16.partial_bytes);
  EXPECT_LT(s8.est_time_us, s16.est_time_us);  // memory-bound: fewer bytes, less time
  EXPECT_EQ(plan_layout(p8).shape.kv_dtype_bytes, 1);
  // 0 = dtype_bytes; a plan for 2-byte KV does not fit a layout for fp8 KV
  EXPECT_EQ(make_plan(tree, make_plan_options("node", 32, 8, 128, dev, 4, 0)).shape.kv_dtype_bytes,
            4);
  EXPECT_FALSE(plan_fits(p16, plan_layout(p8)));
  EXPECT_TRUE(plan_fits(p8, plan_layout(p8)));
  for (int bad : {3, -1, 8})
    expect_throws_naming([&] { make_plan_options("node", 32, 8, 128, dev, 2, bad); },
                         "kv_dtype_bytes");
}

}  // namespace
}  // namespace treeattn
