// The KV element types (KvDType) and the one-byte floats of an fp8 KV cache: OCP e4m3 ("fn":
// no infinities, NaN = S.1111.111, largest finite 448) and e5m2 (IEEE-like: infinities, largest
// finite 57344). float -> fp8 bits rounds to nearest even and saturates to the largest finite
// value (inf too; the satfinite conversions of Hopper and of vLLM's quantizers); NaN stays NaN.
// fp8 bits -> float is exact. Shared by the host (random inputs, CPU decode, tests) and the
// kernels' software path; the kernels convert with the hardware instructions where they exist.
#pragma once

#include <cmath>
#include <cstdint>

#include "treeattn/common/host_device.h"

namespace treeattn {

/// Element type of K and V: kSame = the dtype of q and out (fp16 or bf16); an fp8 type = one
/// byte per element, dequantized as scale x value with a float32 scale for K and one for V.
enum class KvDType : int32_t { kSame = 0, kFloat8E4M3 = 1, kFloat8E5M2 = 2 };

/// "same", "fp8_e4m3" or "fp8_e5m2".
inline const char* kv_dtype_name(KvDType t) {
  return t == KvDType::kFloat8E4M3 ? "fp8_e4m3" : t == KvDType::kFloat8E5M2 ? "fp8_e5m2" : "same";
}
inline constexpr bool is_fp8(KvDType t) {
  return t == KvDType::kFloat8E4M3 || t == KvDType::kFloat8E5M2;
}

namespace fp8_detail {
// (mantissa bits, exponent bias, smallest normal exponent, largest finite value)
TA_HOST_DEVICE int mant_bits(KvDType t) { return t == KvDType::kFloat8E4M3 ? 3 : 2; }
TA_HOST_DEVICE int bias(KvDType t) { return t == KvDType::kFloat8E4M3 ? 7 : 15; }
TA_HOST_DEVICE float max_finite(KvDType t) { return t == KvDType::kFloat8E4M3 ? 448.0f : 57344.0f; }
}  // namespace fp8_detail

/// Largest finite value of an fp8 type (448 or 57344).
TA_HOST_DEVICE float fp8_max(KvDType t) { return fp8_detail::max_finite(t); }

/// fp8 bits of `f` (t is kFloat8E4M3 or kFloat8E5M2): round to nearest even, saturate to
/// +-fp8_max(t) (infinities too), NaN -> NaN (0x7F / 0xFF).
TA_HOST_DEVICE uint8_t float_to_fp8_bits(float f, KvDType t) {
  using namespace fp8_detail;
  const int M = mant_bits(t), B = bias(t);
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return static_cast<uint8_t>(sign | 0x7F);
  float a = std::fabs(f);
  const int emin = 1 - B;  // exponent of the smallest normal
  int e = 0;
  if (a > 0.f && a <= 3.0e38f) {
    std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): floor(log2 a) = e - 1
    e -= 1;
    if (e < emin) e = emin;
    a = std::ldexp(std::rint(std::ldexp(a, M - e)), e - M);  // to the fp8 grid, nearest even
  }
  if (!(a < fp8_max(t))) a = fp8_max(t);  // saturation (also inf)
  if (a == 0.f) return sign;
  std::frexp(a, &e);
  e -= 1;
  if (e < emin) {  // subnormal: a = mant * 2^(emin - M)
    return static_cast<uint8_t>(sign | static_cast<int>(std::ldexp(a, M - emin)));
  }
  const int mant = static_cast<int>(std::ldexp(a, M - e)) - (1 << M);
  return static_cast<uint8_t>(sign | ((e + B) << M) | mant);
}

/// Float value of fp8 bits `b` of type t (exact).
TA_HOST_DEVICE float fp8_bits_to_float(uint8_t b, KvDType t) {
  using namespace fp8_detail;
  const int M = mant_bits(t), B = bias(t);
  const int E = (b & 0x7F) >> M, mant = b & ((1 << M) - 1);
  const float s = (b & 0x80) ? -1.f : 1.f;
  if (t == KvDType::kFloat8E4M3 && (b & 0x7F) == 0x7F) return NAN;
  if (t == KvDType::kFloat8E5M2 && E == 31) return mant == 0 ? s * INFINITY : NAN;
  if (E == 0) return s * std::ldexp(static_cast<float>(mant), 1 - B - M);
  return s * std::ldexp(static_cast<float>((1 << M) + mant), E - B - M);
}

/// `f` rounded to the nearest value of fp8 type t (saturating), as a float.
TA_HOST_DEVICE float round_to_fp8(float f, KvDType t) {
  return fp8_bits_to_float(float_to_fp8_bits(f, t), t);
}

}  // namespace treeattn
