#include "tensor/dtype.h"

#include <cmath>
#include <cstring>

#include "util/error.h"

namespace ernie {

DType parse_safetensors_dtype(std::string_view name) {
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "F32") return DType::kF32;
  if (name == "U8") return DType::kU8;
  if (name == "I8") return DType::kI8;
  fail("unsupported tensor dtype \"", name, "\" (supported: BF16, F16, F32, U8, I8)");
}

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF32: return "F32";
    case DType::kU8: return "U8";
    case DType::kI8: return "I8";
  }
  return "?";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kF32: return 4;
    case DType::kU8:
    case DType::kI8: return 1;
  }
  return 0;
}

bool is_float_dtype(DType dtype) { return dtype != DType::kU8 && dtype != DType::kI8; }

uint16_t f32_to_f16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  // 65520 and above round beyond the largest half: saturate.
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7bffu);
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half (2^-14): a multiple of 2^-24, rounded to nearest
    // even in float arithmetic (exact here, as 2^24 scaling is).
    float scaled;
    const uint32_t plain = magnitude;
    std::memcpy(&scaled, &plain, sizeof scaled);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled * 16777216.0f)));
  }
  // Normal: rebias the exponent and keep 10 mantissa bits, rounding to nearest even on
  // the 13 dropped bits; a carry into the exponent is the correct rounding.
  const uint32_t rebased = magnitude - (112u << 23);
  const uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t result;
  if (exponent == 0x1f) {
    result = sign | 0x7f800000u | (mantissa << 13);  // inf or NaN
  } else if (exponent != 0) {
    result = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    result = sign;  // signed zero
  } else {
    // Subnormal half: shift the mantissa up until its leading 1 is the implicit bit.
    uint32_t shifted_exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --shifted_exponent;
    }
    result = sign | (shifted_exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &result, sizeof value);
  return value;
}

void convert_to_f32(DType dtype, const void* src, float* dst, size_t count) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::kBF16: {
      const auto* bits = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(bits[i]);
      return;
    }
    case DType::kF16: {
      const auto* bits = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = f16_to_f32(bits[i]);
      return;
    }
    case DType::kU8:
    case DType::kI8:
      fail(safetensors_dtype_name(dtype), " tensors hold packed bytes, not values to convert");
  }
}

}  // namespace ernie
