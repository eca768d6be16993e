// Element types of checkpoint tensors and their conversions to fp32.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace ernie {

// Checkpoint dtypes we read. Any other safetensors dtype is refused by name. kU8 and kI8
// hold packed quantized weights (the quantized-weights cache, FastDeploy's pre-quantized
// tensors); they are not weight dtypes, and the weight loader refuses them as such.
enum class DType : uint8_t { kBF16, kF16, kF32, kU8, kI8 };

// Parses a safetensors dtype name ("BF16", "F16", "F32", "U8", "I8"); throws ernie::Error
// naming the unsupported dtype otherwise.
DType parse_safetensors_dtype(std::string_view name);
const char* safetensors_dtype_name(DType dtype);
size_t dtype_size(DType dtype);
bool is_float_dtype(DType dtype);

inline float bf16_to_f32(uint16_t bits) {
  const uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof value);
  return value;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float f16_to_f32(uint16_t bits);
// IEEE half, rounded to nearest even; beyond the half range it saturates to ±65504 (a
// scale never needs infinity), NaN stays NaN.
uint16_t f32_to_f16(float value);

// Converts `count` elements of `dtype` at `src` to fp32.
void convert_to_f32(DType dtype, const void* src, float* dst, size_t count);

}  // namespace ernie
