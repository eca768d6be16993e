#include "kernels/ops.h"

#include <algorithm>
#include <cmath>

#include "kernels/fast_exp.h"
#include "kernels/simd_dispatch.h"

namespace ernie {

void rms_norm(const float* x, int64_t n, int64_t h, const float* weight, float eps, float* y) {
  for (int64_t t = 0; t < n; ++t) {
    const float* row = x + t * h;
    double sum_squares = 0.0;
    for (int64_t i = 0; i < h; ++i) sum_squares += static_cast<double>(row[i]) * row[i];
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

void apply_rope_rotation(float* heads, int num_heads, int head_dim, const float* cos_sin) {
  const int pairs = head_dim / 2;
  for (int i = 0; i < pairs; ++i) {
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    for (int head = 0; head < num_heads; ++head) {
      float* pair = heads + head * head_dim + 2 * i;
      const float even = pair[0], odd = pair[1];
      pair[0] = even * c - odd * s;
      pair[1] = odd * c + even * s;
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
  for (int64_t i = 0; i < count; ++i) {
    const float x = values[i];
    values[i] = x / (1.0f + fast_exp(-1.702f * x));
  }
}

void gelu_erf(float* values, int64_t count) {
  for (int64_t i = 0; i < count; ++i) values[i] = 0.5f * values[i] * (1.0f + std::erf(values[i] * 0.70710678118654752f));
}

ERNIE_CLONE_FOR_ISAS
void silu_mul(float* gate, const float* up, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
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
