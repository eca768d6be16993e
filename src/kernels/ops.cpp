#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/fast_exp.h"
#include "kernels/simd_dispatch.h"

namespace ernie {
namespace {

// The element-wise activations go 8 floats at a time through GCC vector extensions (AVX2
// or AVX-512 in the clones ERNIE_CLONE_FOR_ISAS makes, two SSE halves otherwise), and the
// remainder one at a time through the same formula. Written out because GCC does not
// vectorise the plain loops: see fast_exp_of.
constexpr int64_t kLanes = 8;
using FloatLanes = float __attribute__((vector_size(kLanes * sizeof(float))));
using IntLanes = int32_t __attribute__((vector_size(kLanes * sizeof(int32_t))));
using DoubleLanes = double __attribute__((vector_size(kLanes / 2 * sizeof(double))));

#if defined(__GNUC__)
// The lane helpers pass 32-byte vectors by value, which GCC flags as depending on AVX
// for the baseline clone. They are always inlined, so no such call exists; at -O3 GCC
// reports it from the end of the file, so it stays off to the end.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

[[gnu::always_inline]] inline FloatLanes load_lanes(const float* values) {
  FloatLanes lanes;
  std::memcpy(&lanes, values, sizeof lanes);
  return lanes;
}

[[gnu::always_inline]] inline void store_lanes(float* values, const FloatLanes& lanes) {
  std::memcpy(values, &lanes, sizeof lanes);
}

// Σ row[i]² in double, 8 values at a time into two 4-lane double sums (a plain double
// reduction stays scalar: GCC may not reorder it).
[[gnu::always_inline]] inline double sum_of_squares(const float* row, int64_t h) {
  DoubleLanes low_sum{}, high_sum{};
  int64_t i = 0;
  for (; i + kLanes <= h; i += kLanes) {
    const FloatLanes v = load_lanes(row + i);
    const DoubleLanes low = __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3), DoubleLanes);
    const DoubleLanes high = __builtin_convertvector(__builtin_shufflevector(v, v, 4, 5, 6, 7), DoubleLanes);
    low_sum += low * low;
    high_sum += high * high;
  }
  const DoubleLanes both = low_sum + high_sum;
  double sum = (both[0] + both[1]) + (both[2] + both[3]);
  for (; i < h; ++i) sum += static_cast<double>(row[i]) * row[i];
  return sum;
}

}  // namespace

ERNIE_CLONE_FOR_ISAS
void rms_norm(const float* x, int64_t n, int64_t h, const float* weight, float eps, float* y) {
  for (int64_t t = 0; t < n; ++t) {
    const float* row = x + t * h;
    const double sum_squares = sum_of_squares(row, h);
    const float inverse_rms = static_cast<float>(1.0 / std::sqrt(sum_squares / static_cast<double>(h) + eps));
    float* out = y + t * h;
    for (int64_t i = 0; i < h; ++i) out[i] = weight[i] * (row[i] * inverse_rms);
  }
}

std::vector<float> rope_inverse_frequencies(int head_dim, double theta) {
  std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i)
    inv_freq[static_cast<size_t>(i)] = static_cast<float>(std::pow(theta, -2.0 * i / head_dim));
  return inv_freq;
}

void rope_rotation(float position, int head_dim, const float* inv_freq, float* cos_sin) {
  for (int i = 0; i < head_dim / 2; ++i) {
    // The angle is formed in fp32 as the reference does; cos/sin of it are exact-rounded.
    const float angle = position * inv_freq[i];
    cos_sin[2 * i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    cos_sin[2 * i + 1] = static_cast<float>(std::sin(static_cast<double>(angle)));
  }
}

void rope_rotation_3d(float t, float h, float w, int head_dim, int freq_allocation, const float* inv_freq,
                      float* cos_sin) {
  const int spatial_pairs = head_dim / 2 - freq_allocation;
  for (int i = 0; i < head_dim / 2; ++i) {
    const float position = i >= spatial_pairs ? t : i % 2 == 0 ? h : w;
    const float angle = position * inv_freq[i];
    cos_sin[2 * i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    cos_sin[2 * i + 1] = static_cast<float>(std::sin(static_cast<double>(angle)));
  }
}

// Head by head over contiguous pairs, so the clones vectorise it (the interleaved
// pairs become lane permutes); pair by pair across heads it stayed scalar.
ERNIE_CLONE_FOR_ISAS
void apply_rope_rotation(float* __restrict heads, int num_heads, int head_dim, const float* __restrict cos_sin) {
  const int pairs = head_dim / 2;
  for (int head = 0; head < num_heads; ++head) {
    float* __restrict row = heads + head * head_dim;
    for (int i = 0; i < pairs; ++i) {
      const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
      const float even = row[2 * i], odd = row[2 * i + 1];
      row[2 * i] = even * c - odd * s;
      row[2 * i + 1] = odd * c + even * s;
    }
  }
}

void layer_norm(const float* x, int64_t n, int64_t h, const float* weight, const float* bias, float eps, float* y) {
  for (int64_t t = 0; t < n; ++t) {
    const float* row = x + t * h;
    double sum = 0.0;
    for (int64_t i = 0; i < h; ++i) sum += row[i];
    const double mean = sum / static_cast<double>(h);
    double sum_squares = 0.0;
    for (int64_t i = 0; i < h; ++i) sum_squares += (row[i] - mean) * (row[i] - mean);
    const float inverse_std = static_cast<float>(1.0 / std::sqrt(sum_squares / static_cast<double>(h) + eps));
    const auto centre = static_cast<float>(mean);
    float* out = y + t * h;
    for (int64_t i = 0; i < h; ++i) out[i] = (row[i] - centre) * inverse_std * weight[i] + bias[i];
  }
}

ERNIE_CLONE_FOR_ISAS
void quick_gelu(float* values, int64_t count) {
  int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    const FloatLanes x = load_lanes(values + i);
    store_lanes(values + i, x / (1.0f + fast_exp_of<FloatLanes, IntLanes>(-1.702f * x)));
  }
  for (; i < count; ++i) {
    const float x = values[i];
    values[i] = x / (1.0f + fast_exp(-1.702f * x));
  }
}

void gelu_erf(float* values, int64_t count) {
  for (int64_t i = 0; i < count; ++i) values[i] = 0.5f * values[i] * (1.0f + std::erf(values[i] * 0.70710678118654752f));
}

// 16 lanes at a time first: in the AVX-512 clone one register each, half the
// instructions of two 8-lane steps (a bf16 prefill computes silu for every MLP row;
// BM_SiluMul). Every lane computes the same operations at any width, so the bits do not
// depend on where an element falls.
using WideLanes = float __attribute__((vector_size(2 * kLanes * sizeof(float))));
using WideIntLanes = int32_t __attribute__((vector_size(2 * kLanes * sizeof(int32_t))));

ERNIE_CLONE_FOR_ISAS
void silu_mul(float* gate, const float* up, int64_t count) {
  int64_t i = 0;
  for (; i + 2 * kLanes <= count; i += 2 * kLanes) {
    WideLanes g, u;
    std::memcpy(&g, gate + i, sizeof g);
    std::memcpy(&u, up + i, sizeof u);
    const WideLanes out = g / (1.0f + fast_exp_of<WideLanes, WideIntLanes>(-g)) * u;
    std::memcpy(gate + i, &out, sizeof out);
  }
  for (; i + kLanes <= count; i += kLanes) {
    const FloatLanes g = load_lanes(gate + i);
    store_lanes(gate + i, g / (1.0f + fast_exp_of<FloatLanes, IntLanes>(-g)) * load_lanes(up + i));
  }
  for (; i < count; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + fast_exp(-g)) * up[i];
  }
}

void softmax(float* values, int64_t count) {
  if (count <= 0) return;
  const float max_value = *std::max_element(values, values + count);
  double sum = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    values[i] = std::exp(values[i] - max_value);
    sum += values[i];
  }
  const float inverse = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < count; ++i) values[i] *= inverse;
}

void add_scaled(float* dst, const float* src, float scale, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] += scale * src[i];
}

}  // namespace ernie
