// Host-side fp16 / bf16 conversions: float -> 16-bit storage with round-to-nearest-even, back to
// float, and the "round a float to the nearest representable value" helpers the CPU code uses so
// that CPU and GPU see identical input values. Header-only, no CUDA.
#pragma once

#include <cstdint>
#include <cstring>

namespace treeattn {

/// IEEE binary16 bits of `f`, rounded to nearest even; overflow gives +-inf, NaN stays NaN.
inline uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  }
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520
  const int32_t exp = static_cast<int32_t>(absx >> 23) - 127;
  if (exp >= -14) {  // normal half
    const uint32_t mant = absx & 0x7fffffu;
    uint32_t h = (static_cast<uint32_t>(exp + 15) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fffu;                     // 13 dropped bits
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carries into the exponent are fine
    return static_cast<uint16_t>(sign | h);
  }
  if (exp < -25) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
  // Subnormal half: value = m * 2^-24 with m = full significand >> shift.
  const uint32_t full =
      (absx & 0x7fffffu) | 0x800000u;  // 24-bit significand, value full*2^(exp-23)
  const int shift = -exp - 1;          // (exp - 23) + 24 = exp + 1 -> right shift
  uint32_t h = full >> shift;
  const uint32_t rem = full & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

/// Float value of IEEE binary16 bits.
inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t x;
  if (e == 0) {
    if (m == 0) {
      x = sign;
    } else {  // subnormal: m * 2^-24
      float f = static_cast<float>(m) * (1.0f / 16777216.0f);
      std::memcpy(&x, &f, 4);
      x |= sign;
    }
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13);
  } else {
    x = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

/// bfloat16 bits of `f`, rounded to nearest even; NaN stays NaN.
inline uint16_t float_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

/// Float value of bfloat16 bits.
inline float bf16_bits_to_float(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

/// `f` rounded to the nearest fp16 / bf16 value, returned as float.
inline float round_to_fp16(float f) { return half_bits_to_float(float_to_half_bits(f)); }
inline float round_to_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }

}  // namespace treeattn
