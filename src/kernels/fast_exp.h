// exp(x) for element-wise loops the compiler should vectorise (std::exp is a libm call
// per value). x·log2(e) = n + f with n integer and |f| <= 1/2; 2^f from its Taylor
// series to degree 7 (truncation ~5e-9 relative), 2^n placed in the exponent bits.
// Rounding x·log2(e) to fp32 dominates the error: about 5e-8·|x| relative.
// Inputs below -87 give 0, above 88 give +inf as std::exp would.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

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

// exp(x) for a float or for a GCC vector of floats F with its matching int32 vector I.
// The clamps are lane selects, so a vector loop over them has no branches. The scalar
// form is not enough for loops: GCC threads its clamps into separate paths around the
// caller's division and then cannot vectorise the loop ("control flow in loop").
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
template <typename F, typename I>
[[gnu::always_inline]] inline F fast_exp_of(F x) {
  F t = x * 1.4426950408889634f;
  const F lowest = F{} - 127.0f, highest = F{} + 128.0f;
  t = t < lowest ? lowest : t;
  t = t > highest ? highest : t;
  // Adding and subtracting 1.5·2^23 rounds to the nearest integer for |t| < 2^22.
  const F n = (t + 12582912.0f) - 12582912.0f;
  const F p = exp2_taylor(t - n);
  // n = -127 leaves a zero exponent field (0); n = 128 an all-ones one (+inf).
  I whole;
  if constexpr (std::is_same_v<F, float>) whole = static_cast<I>(n);
  else whole = __builtin_convertvector(n, I);
  return p * std::bit_cast<F>((whole + 127) << 23);
}
#pragma GCC diagnostic pop

inline float fast_exp(float x) { return fast_exp_of<float, int32_t>(x); }

}  // namespace ernie
