#include "model/vision_encoder.h"

#include <cmath>

#include "kernels/flash_attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "util/error.h"

namespace ernie {
namespace {

// The ViT and resampler LayerNorms (FastDeploy hard-codes it; notes §4).
constexpr float kLayerNormEps = 1e-6f;
// Query tokens per attention work item, as in the text decoder.
constexpr int kQueryTile = 64;

AttentionScratch& thread_scratch() {
  thread_local AttentionScratch scratch;
  return scratch;
}

// body(begin, end) over rows [0, n) on the pool.
template <typename Body>
void for_rows(ThreadPool& pool, int64_t n, const Body& body) {
  pool.parallel_for(static_cast<size_t>(n), 0, [&](size_t begin, size_t end) {
    body(static_cast<int64_t>(begin), static_cast<int64_t>(end));
  });
}

void layer_norm_rows(ThreadPool& pool, const LayerNormWeights& norm, const float* x, int64_t n, int64_t width,
                     float* y) {
  for_rows(pool, n, [&](int64_t r0, int64_t r1) {
    layer_norm(x + r0 * width, r1 - r0, width, norm.weight.data(), norm.bias.data(), kLayerNormEps, y + r0 * width);
  });
}

void add_rows(ThreadPool& pool, float* x, const float* delta, int64_t n, int64_t width) {
  for_rows(pool, n, [&](int64_t r0, int64_t r1) { add_scaled(x + r0 * width, delta + r0 * width, 1.0f, (r1 - r0) * width); });
}

// Rotates the halves (d, d + half) of every head by the row's angles (the ViT's
// rotate_half form, unlike the text decoder's adjacent pairs).
void rotate_halves(float* heads, int num_heads, int head_dim, const float* cos, const float* sin) {
  const int half = head_dim / 2;
  for (int head = 0; head < num_heads; ++head) {
    float* x = heads + head * head_dim;
    for (int d = 0; d < half; ++d) {
      const float a = x[d], b = x[d + half];
      x[d] = a * cos[d] - b * sin[d];
      x[d + half] = b * cos[d] + a * sin[d];
    }
  }
}

}  // namespace

VisionEncoder::VisionEncoder(const ModelConfig& config, const VisionTowerWeights& weights, ThreadPool& pool)
    : config_(config), vision_(config.vl->vision), weights_(weights), pool_(pool) {
  // VisionRotaryEmbedding(head_dim / 2): θ = 10000, frequencies 10000^(-2i / (head_dim/2)).
  const int dim = vision_.head_dim() / 2;
  for (int i = 0; 2 * i < dim; ++i) inv_freq_.push_back(static_cast<float>(std::pow(10000.0, -2.0 * i / dim)));
}

int64_t VisionEncoder::num_tokens(int grid_t, int grid_h, int grid_w) {
  const int64_t per_frame = static_cast<int64_t>(grid_h / 2) * (grid_w / 2);
  return grid_t == 1 ? per_frame : per_frame * (grid_t / 2);
}

void VisionEncoder::check_grid(const ImagePatches& patches) const {
  const int64_t expected = patches.num_patches() * vision_.patch_values();
  if (patches.grid_t < 1 || patches.grid_h < 2 || patches.grid_w < 2 || patches.grid_h % 2 != 0 ||
      patches.grid_w % 2 != 0 || (patches.grid_t > 1 && patches.grid_t % 2 != 0))
    fail("vision encoder: a grid of ", patches.grid_t, "x", patches.grid_h, "x", patches.grid_w,
         " patches is not one it takes (even sides; one frame or an even number)");
  if (static_cast<int64_t>(patches.values.size()) != expected)
    fail("vision encoder: ", patches.num_patches(), " patches need ", expected, " values, got ", patches.values.size());
}

void VisionEncoder::linear(const BiasedLinear& layer, const float* x, int64_t n, float* y) {
  matmul(pool_, x, n, layer.weight, y);
  const int64_t out = layer.weight.rows;
  for_rows(pool_, n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) add_scaled(y + r * out, layer.bias.data(), 1.0f, out);
  });
}

std::vector<float> VisionEncoder::encode(const ImagePatches& patches) {
  const std::vector<float> vit = transformer(patches);
  return resample(patches, vit);
}

std::vector<float> VisionEncoder::transformer(const ImagePatches& patches) {
  check_grid(patches);
  const int64_t n = patches.num_patches(), de = vision_.hidden_size;
  std::vector<float> x(static_cast<size_t>(n * de));
  matmul(pool_, patches.values.data(), n, weights_.patch_embed, x.data());

  // 2-D RoPE angles of each patch row: its row in the grid times the first half of the
  // frequencies, its column times the second (notes §4.1). Patch rows run in 2x2-window
  // order, and every frame repeats the same grid.
  const int half = vision_.head_dim() / 2, quarter = static_cast<int>(inv_freq_.size());
  std::vector<float> rotations(static_cast<size_t>(n * 2 * half));  // per row: cos[half], sin[half]
  const int64_t per_frame = static_cast<int64_t>(patches.grid_h) * patches.grid_w;
  const int windows_across = patches.grid_w / 2;
  for (int64_t row = 0; row < n; ++row) {
    const int64_t in_frame = row % per_frame, window = in_frame / 4, within = in_frame % 4;
    const auto grid_row = static_cast<float>((window / windows_across) * 2 + within / 2);
    const auto grid_col = static_cast<float>((window % windows_across) * 2 + within % 2);
    float* cos = rotations.data() + row * 2 * half;
    float* sin = cos + half;
    for (int d = 0; d < half; ++d) {
      const float angle = d < quarter ? grid_row * inv_freq_[static_cast<size_t>(d)]
                                      : grid_col * inv_freq_[static_cast<size_t>(d - quarter)];
      cos[d] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin[d] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  for (const VisionBlockWeights& block_weights : weights_.blocks) block(block_weights, patches, rotations.data(), x.data());
  layer_norm_rows(pool_, weights_.final_norm, x.data(), n, de, x.data());
  return x;
}

void VisionEncoder::block(const VisionBlockWeights& weights, const ImagePatches& patches, const float* rotations,
                          float* x) {
  const int64_t n = patches.num_patches(), de = vision_.hidden_size, wide = weights.fc1.weight.rows;
  const int heads = vision_.num_heads, hd = vision_.head_dim(), half = hd / 2;
  std::vector<float> normed(static_cast<size_t>(n * de)), qkv(static_cast<size_t>(n * 3 * de));
  std::vector<float> attended(static_cast<size_t>(n * de)), delta(static_cast<size_t>(n * de));

  layer_norm_rows(pool_, weights.norm1, x, n, de, normed.data());
  linear(weights.qkv, normed.data(), n, qkv.data());
  for_rows(pool_, n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* cos = rotations + r * 2 * half;
      rotate_halves(qkv.data() + r * 3 * de, heads, hd, cos, cos + half);       // q
      rotate_halves(qkv.data() + r * 3 * de + de, heads, hd, cos, cos + half);  // k
    }
  });

  // Each frame attends within itself only (cu_seqlens: one segment per frame).
  const int64_t per_frame = static_cast<int64_t>(patches.grid_h) * patches.grid_w;
  std::vector<const void*> keys(static_cast<size_t>(n)), values(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    keys[static_cast<size_t>(r)] = qkv.data() + r * 3 * de + de;
    values[static_cast<size_t>(r)] = qkv.data() + r * 3 * de + 2 * de;
  }
  const AttentionShape shape{heads, heads, hd, 1.0f / std::sqrt(static_cast<float>(hd)), KvStorage::kF32};
  const int64_t tiles = (per_frame + kQueryTile - 1) / kQueryTile;
  const int64_t items = patches.grid_t * heads * tiles;
  pool_.parallel_for(static_cast<size_t>(items), 1, [&](size_t begin, size_t end) {
    for (size_t item = begin; item < end; ++item) {
      const int64_t frame = static_cast<int64_t>(item) / (heads * tiles);
      const int head = static_cast<int>((static_cast<int64_t>(item) / tiles) % heads);
      const int64_t first = frame * per_frame + (static_cast<int64_t>(item) % tiles) * kQueryTile;
      const int count = static_cast<int>(std::min<int64_t>(kQueryTile, (frame + 1) * per_frame - first));
      bidirectional_attention_group(shape, keys.data() + frame * per_frame, values.data() + frame * per_frame, head,
                                    qkv.data() + first * 3 * de, 3 * de, per_frame, count,
                                    attended.data() + first * de, de, thread_scratch());
    }
  });
  linear(weights.proj, attended.data(), n, delta.data());
  add_rows(pool_, x, delta.data(), n, de);

  layer_norm_rows(pool_, weights.norm2, x, n, de, normed.data());
  std::vector<float> inner(static_cast<size_t>(n * wide));
  linear(weights.fc1, normed.data(), n, inner.data());
  for_rows(pool_, n, [&](int64_t r0, int64_t r1) { quick_gelu(inner.data() + r0 * wide, (r1 - r0) * wide); });
  linear(weights.fc2, inner.data(), n, delta.data());
  add_rows(pool_, x, delta.data(), n, de);
}

std::vector<float> VisionEncoder::resample(const ImagePatches& patches, std::span<const float> vit_output) {
  check_grid(patches);
  const int64_t de = vision_.hidden_size, spatial = 4 * de, h = config_.hidden_size;
  const int64_t merged = patches.num_patches() / 4;  // four consecutive rows = one 2x2 window
  if (static_cast<int64_t>(vit_output.size()) != patches.num_patches() * de)
    fail("vision encoder: the resampler needs ", patches.num_patches() * de, " values, got ", vit_output.size());

  // Spatial: Linear, GELU, Linear, LayerNorm over each window's four patches.
  std::vector<float> a(static_cast<size_t>(merged * spatial)), s(static_cast<size_t>(merged * spatial));
  linear(weights_.spatial1, vit_output.data(), merged, a.data());
  for_rows(pool_, merged, [&](int64_t r0, int64_t r1) { gelu_erf(a.data() + r0 * spatial, (r1 - r0) * spatial); });
  linear(weights_.spatial2, a.data(), merged, s.data());
  layer_norm_rows(pool_, weights_.spatial_norm, s.data(), merged, spatial, s.data());

  // Temporal: token j of frames 2k and 2k+1 side by side; an image pairs with itself.
  const int64_t per_frame = merged / patches.grid_t;
  const int64_t rows = num_tokens(patches.grid_t, patches.grid_h, patches.grid_w);
  std::vector<float> paired(static_cast<size_t>(rows * 2 * spatial));
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t pair = row / per_frame, j = row % per_frame;
    const int64_t first = (patches.grid_t == 1 ? 0 : 2 * pair) * per_frame + j;
    const int64_t second = (patches.grid_t == 1 ? 0 : 2 * pair + 1) * per_frame + j;
    std::copy_n(s.data() + first * spatial, spatial, paired.data() + row * 2 * spatial);
    std::copy_n(s.data() + second * spatial, spatial, paired.data() + row * 2 * spatial + spatial);
  }
  std::vector<float> b(static_cast<size_t>(rows * spatial)), t(static_cast<size_t>(rows * spatial));
  linear(weights_.temporal1, paired.data(), rows, b.data());
  for_rows(pool_, rows, [&](int64_t r0, int64_t r1) { gelu_erf(b.data() + r0 * spatial, (r1 - r0) * spatial); });
  linear(weights_.temporal2, b.data(), rows, t.data());
  layer_norm_rows(pool_, weights_.temporal_norm, t.data(), rows, spatial, t.data());

  // Projection to the decoder's width, then RMSNorm with the decoder's epsilon.
  std::vector<float> features(static_cast<size_t>(rows * h));
  linear(weights_.projection, t.data(), rows, features.data());
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  for_rows(pool_, rows, [&](int64_t r0, int64_t r1) {
    rms_norm(features.data() + r0 * h, r1 - r0, h, weights_.after_norm.data(), eps, features.data() + r0 * h);
  });
  return features;
}

}  // namespace ernie
