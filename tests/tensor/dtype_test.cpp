#include "tensor/dtype.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "util/error.h"

namespace ernie {
namespace {

TEST(DTypeTest, ParsesTheSupportedNamesAndRefusesOthersByName) {
  EXPECT_EQ(parse_safetensors_dtype("BF16"), DType::kBF16);
  EXPECT_EQ(parse_safetensors_dtype("F16"), DType::kF16);
  EXPECT_EQ(parse_safetensors_dtype("F32"), DType::kF32);
  EXPECT_EQ(parse_safetensors_dtype("U8"), DType::kU8);  // packed quantized weights
  EXPECT_EQ(parse_safetensors_dtype("I8"), DType::kI8);  // FastDeploy's packed tensors
  EXPECT_FALSE(is_float_dtype(DType::kU8));
  EXPECT_FALSE(is_float_dtype(DType::kI8));
  for (const char* other : {"F8_E4M3", "I16", "F64", "bf16"}) {
    try {
      parse_safetensors_dtype(other);
      FAIL() << other;
    } catch (const Error& error) {
      EXPECT_THAT(error.what(), ::testing::HasSubstr(std::string("\"") + other + "\""));
    }
  }
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
}

TEST(DTypeTest, Bf16KnownValues) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(bf16_to_f32(0x3e20), 0.15625f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 lies exactly halfway between bf16 1.0 and 1.0078125: ties go to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  // Just above halfway rounds up.
  EXPECT_EQ(f32_to_bf16(std::nextafter(1.00390625f, 2.0f)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DTypeTest, F16KnownValuesIncludingSubnormalsAndSpecials) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);               // largest normal
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_to_f32(0x8000), -0.0f);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
}

// Every half round-trips exactly; a float between two halves goes to the nearer one
// (ties to the even one), checked against the neighbours f16_to_f32 gives.
TEST(DTypeTest, F32ToF16RoundsToNearestEven) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto half = static_cast<uint16_t>(bits);
    const float value = f16_to_f32(half);
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(value))));
    } else if (std::isfinite(value)) {
      ASSERT_EQ(f32_to_f16(value), half) << value;
    }
  }
  for (uint16_t half = 0x0001; half < 0x7bff; half = static_cast<uint16_t>(half + 97)) {
    const float low = f16_to_f32(half), high = f16_to_f32(static_cast<uint16_t>(half + 1));
    const float middle = low + (high - low) / 2;
    const uint16_t even = (half & 1) ? static_cast<uint16_t>(half + 1) : half;
    EXPECT_EQ(f32_to_f16(middle), even) << middle;
    EXPECT_EQ(f32_to_f16(std::nextafter(middle, 0.0f)), half) << middle;
    EXPECT_EQ(f32_to_f16(std::nextafter(middle, 1e9f)), static_cast<uint16_t>(half + 1)) << middle;
    EXPECT_EQ(f32_to_f16(-middle), static_cast<uint16_t>(even | 0x8000u));
  }
  EXPECT_EQ(f32_to_f16(1e6f), 0x7bff);  // saturates at 65504
  EXPECT_EQ(f32_to_f16(-1e6f), 0xfbff);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);  // a quarter of the smallest subnormal
}

TEST(DTypeTest, ConvertsBuffers) {
  const uint16_t bf16[] = {0x3f80, 0x4000};
  float out[2];
  convert_to_f32(DType::kBF16, bf16, out, 2);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 2.0f);
  const float f32[] = {3.5f, -1.25f};
  convert_to_f32(DType::kF32, f32, out, 2);
  EXPECT_EQ(out[1], -1.25f);
}

}  // namespace
}  // namespace ernie
