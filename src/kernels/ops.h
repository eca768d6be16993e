// Element-wise and row-wise operations of the ERNIE forward pass, in fp32.
#pragma once

#include <cstdint>
#include <vector>

namespace ernie {

// y[t] = w ⊙ x[t] / sqrt(mean(x[t]²) + eps) for each of n rows of width h. y may be x.
void rms_norm(const float* x, int64_t n, int64_t h, const float* weight, float eps, float* y);

// Inverse frequencies θ^(−2i/head_dim), i < head_dim/2, as the reference computes them.
std::vector<float> rope_inverse_frequencies(int head_dim, double theta);

// RoPE rotates the adjacent pairs (2i, 2i+1) of each head by the angles
// position · inv_freq[i] (spec §2.2, "GLM style", not NeoX halves). In two steps, so one
// position's rotation serves every layer: cos_sin gets [cos θ_0, sin θ_0, cos θ_1, ...]
// (head_dim values), then `num_heads` heads are rotated by it in place.
void rope_rotation(float position, int head_dim, const float* inv_freq, float* cos_sin);
// ERNIE-4.5-VL's 3-D RoPE (spec §8.4, docs/vl-model-notes.md §6.3): the same pairs, but
// pair i < head_dim/2 - freq_allocation turns by the height position (even i) or the
// width position (odd i), and the last freq_allocation pairs by the temporal one. With
// t = h = w it equals rope_rotation.
void rope_rotation_3d(float t, float h, float w, int head_dim, int freq_allocation, const float* inv_freq,
                      float* cos_sin);
void apply_rope_rotation(float* heads, int num_heads, int head_dim, const float* cos_sin);

// y[t] = (x[t] - mean) / sqrt(var + eps) ⊙ weight + bias (LayerNorm, population variance,
// statistics in double). y may be x.
void layer_norm(const float* x, int64_t n, int64_t h, const float* weight, const float* bias, float eps, float* y);
// In place: x · sigmoid(1.702 x) (the vision transformer's quick_gelu).
void quick_gelu(float* values, int64_t count);
// In place: the exact GELU, x · Φ(x) = x/2 · (1 + erf(x/√2)) (the resampler's nn.GELU()).
void gelu_erf(float* values, int64_t count);
// gate[i] = silu(gate[i]) * up[i], with exp from kernels/fast_exp.h (relative error
// ~1e-7, vectorised).
void silu_mul(float* gate, const float* up, int64_t count);

// In-place softmax over `count` values, computed in fp32 with the max subtracted.
void softmax(float* values, int64_t count);

// dst[i] += scale * src[i].
void add_scaled(float* dst, const float* src, float scale, int64_t count);

}  // namespace ernie
