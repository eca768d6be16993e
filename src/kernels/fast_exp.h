// exp(x) for element-wise loops the compiler should vectorise (std::exp is a libm call
// per value). x·log2(e) = n + f with n integer and |f| <= 1/2; 2^f from its Taylor
// series to degree 7 (truncation ~5e-9 relative), 2^n placed in the exponent bits.
// Rounding x·log2(e) to fp32 dominates the error: about 5e-8·|x| relative.
// Inputs below -87 give 0, above 88 give +inf as std::exp would.
#pragma once

#include <cstdint>
#include <cstring>

namespace ernie {

// 2^f for |f| <= 1/2 from its Taylor series to degree 7 (truncation ~5e-9 relative).
// F is float or a GCC vector of floats (the flash-attention kernel uses it per lane).
// Vector instantiations are always inlined into functions compiled for their ISA, so
// the calling-convention note GCC gives for vector arguments never applies.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
template <typename F>
[[gnu::always_inline]] inline F exp2_taylor(F f) {
  F p = f * 1.5252733804059838e-05f + 1.5403530393381606e-04f;
  p = p * f + 1.3333558146428441e-03f;
  p = p * f + 9.618129107628477e-03f;
  p = p * f + 5.5504108664821576e-02f;
  p = p * f + 2.402265069591007e-01f;
  p = p * f + 6.931471805599453e-01f;
  p = p * f + 1.0f;
  return p;
}
#pragma GCC diagnostic pop

inline float fast_exp(float x) {
  float t = x * 1.4426950408889634f;
  t = t < -127.0f ? -127.0f : t;
  t = t > 128.0f ? 128.0f : t;
  // Adding and subtracting 1.5·2^23 rounds to the nearest integer for |t| < 2^22.
  const float n = (t + 12582912.0f) - 12582912.0f;
  const float p = exp2_taylor(t - n);
  // n = -127 leaves a zero exponent field (0); n = 128 an all-ones one (+inf).
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float power;
  std::memcpy(&power, &bits, sizeof power);
  return p * power;
}

}  // namespace ernie
