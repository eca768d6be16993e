#include "kernels/wint2.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "kernels/simd_dispatch.h"
#include "util/error.h"

namespace ernie {
namespace {

constexpr int64_t kBytesPerGroup = kWint2Group / 4;

const Wint2Params& params_of(const WeightMatrix& w) { return *static_cast<const Wint2Params*>(w.scales); }

// The 64 unscaled levels of one group (16 bytes, 4 inputs each) as 4 planes of 16:
// planes[j * 16 + r] is input 4r + j. Plane order keeps every loop here contiguous, so
// it vectorizes (one AVX-512 register per plane). The helpers here are inlined into the
// one cloned loop below, so each ISA's copy has them compiled for it and no call per group.
#define ERNIE_INLINE __attribute__((always_inline)) inline
ERNIE_INLINE void decode_group(const uint8_t* bytes, float code_scale, float code_zp, float* planes) {
  // Rounded after the multiply and after each add, as FastDeploy's reference
  // dequantizer (winx_unzip) does, so floor() lands on the same integer: the product is
  // exact in double and rounded once to float, which no FMA contraction can merge with
  // the add that follows.
  int32_t codes[kBytesPerGroup];
  for (int r = 0; r < kBytesPerGroup; ++r) {
    float t = static_cast<float>(static_cast<double>(bytes[r]) * static_cast<double>(code_scale));
    t = t + code_zp;
    t = t + 0.5f;
    codes[r] = static_cast<int32_t>(std::floor(t));
  }
  for (int j = 0; j < 4; ++j) {
    const int shift = 9 - 3 * j;
    for (int r = 0; r < kBytesPerGroup; ++r) planes[j * kBytesPerGroup + r] = static_cast<float>(((codes[r] >> shift) & 63) - 32);
  }
}

// x [n, cols] with each group's 64 inputs in decode_group's plane order.
void to_planes(const float* x, int64_t n, int64_t cols, float* planes) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t g = 0; g < cols / kWint2Group; ++g) {
      const float* in = x + t * cols + g * kWint2Group;
      float* out = planes + t * cols + g * kWint2Group;
      for (int r = 0; r < kBytesPerGroup; ++r)
        for (int j = 0; j < 4; ++j) out[j * kBytesPerGroup + r] = in[4 * r + j];
    }
}

// sum(a[i] * b[i]) over `count` (a multiple of 16) in 16 independent lanes, so it
// vectorizes without reassociating a single sum.
ERNIE_INLINE float dot(const float* a, const float* b, int64_t count) {
  float lanes[16] = {};
  for (int64_t i = 0; i < count; i += 16)
    for (int l = 0; l < 16; ++l) lanes[l] += a[i + l] * b[i + l];
  float sum = 0.0f;
  for (float lane : lanes) sum += lane;
  return sum;
}

// Row `row` of the matrix as floats (level times scale), each group in plane order.
ERNIE_INLINE void decode_row(const WeightMatrix& w, int64_t row, float* out) {
  const Wint2Params& params = params_of(w);
  const int64_t groups = w.cols / kWint2Group;
  const auto* bytes = static_cast<const uint8_t*>(w.data) + row * (w.cols / 4);
  const float super = params.super_scale[static_cast<size_t>(row)];
  for (int64_t g = 0; g < groups; ++g) {
    float* group = out + g * kWint2Group;
    decode_group(bytes + g * kBytesPerGroup, params.code_scale[static_cast<size_t>(row)],
                 params.code_zp[static_cast<size_t>(row)], group);
    const float scale = static_cast<float>(params.group_scale[static_cast<size_t>(row * groups + g)]) * super;
    for (int i = 0; i < kWint2Group; ++i) group[i] *= scale;
  }
}

// lanes[i] += scale * levels[i] * x[i] over one group.
ERNIE_INLINE void accumulate_group(const float* levels, const float* x, float scale, float* lanes) {
  for (int i = 0; i < kWint2Group; ++i) lanes[i] += scale * levels[i] * x[i];
}

// Rows [begin, end) of y (x in plane order). Decode (a few tokens): each group is
// decoded and multiplied into per-token lane sums, summed once per row. Prefill: each row
// is decoded once into floats and dotted with every token.
ERNIE_CLONE_FOR_ISAS
void rows_wint2(const float* x, int64_t n, const WeightMatrix& w, int64_t begin, int64_t end, float* y) {
  const Wint2Params& params = params_of(w);
  const int64_t groups = w.cols / kWint2Group;
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  constexpr int64_t kFewTokens = 4;
  thread_local std::vector<float> row_values;
  if (n > kFewTokens) row_values.resize(static_cast<size_t>(w.cols));
  alignas(64) float levels[kWint2Group];
  alignas(64) float lanes[kFewTokens][kWint2Group];
  for (int64_t row = begin; row < end; ++row) {
    const uint8_t* row_bytes = bytes + row * (w.cols / 4);
    const float super = params.super_scale[static_cast<size_t>(row)];
    const float code_scale = params.code_scale[static_cast<size_t>(row)], code_zp = params.code_zp[static_cast<size_t>(row)];
    const uint8_t* group_scale = params.group_scale.data() + row * groups;
    if (n > kFewTokens) {
      decode_row(w, row, row_values.data());
      for (int64_t t = 0; t < n; ++t) y[t * w.rows + row] = dot(row_values.data(), x + t * w.cols, w.cols);
      continue;
    }
    for (int64_t t = 0; t < n; ++t) std::fill(lanes[t], lanes[t] + kWint2Group, 0.0f);
    for (int64_t g = 0; g < groups; ++g) {
      decode_group(row_bytes + g * kBytesPerGroup, code_scale, code_zp, levels);
      const float scale = static_cast<float>(group_scale[g]) * super;
      for (int64_t t = 0; t < n; ++t) accumulate_group(levels, x + t * w.cols + g * kWint2Group, scale, lanes[t]);
    }
    for (int64_t t = 0; t < n; ++t) {
      float sum = 0.0f;
      for (float lane : lanes[t]) sum += lane;
      y[t * w.rows + row] = sum;
    }
  }
}

}  // namespace

WeightMatrix make_wint2_weight(const uint8_t* quant_weight, const uint8_t* weight_scale, const float* super_scales,
                               const float* code_scale, const float* code_zp, int64_t in_features,
                               int64_t out_features, int64_t first_out, int64_t count) {
  if (in_features <= 0 || in_features % (2 * kWint2Group) != 0)
    fail("a WINT2 weight needs a multiple of 128 inputs (two 64-input groups per scale byte), got ", in_features);
  if (first_out < 0 || count <= 0 || first_out + count > out_features)
    fail("internal: WINT2 outputs ", first_out, "..", first_out + count - 1, " of ", out_features);
  struct Owned {
    std::vector<uint8_t> bytes;
    Wint2Params params;
  };
  auto owned = std::make_shared<Owned>();
  const int64_t packed = in_features / 4, groups = in_features / kWint2Group;
  owned->bytes.resize(static_cast<size_t>(count * packed));
  Wint2Params& params = owned->params;
  params.code_scale.assign(code_scale + first_out, code_scale + first_out + count);
  params.code_zp.assign(code_zp + first_out, code_zp + first_out + count);
  params.super_scale.assign(super_scales + first_out, super_scales + first_out + count);
  params.group_scale.resize(static_cast<size_t>(count * groups));
  for (int64_t r = 0; r < packed; ++r)
    for (int64_t o = 0; o < count; ++o)
      owned->bytes[static_cast<size_t>(o * packed + r)] = quant_weight[r * out_features + first_out + o];
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t o = 0; o < count; ++o) {
      const uint8_t pair = weight_scale[(g / 2) * out_features + first_out + o];
      params.group_scale[static_cast<size_t>(o * groups + g)] = g % 2 == 0 ? pair >> 4 : pair & 0xf;
    }
  WeightMatrix w;
  w.format = WeightFormat::kWint2;
  w.group = kWint2Group;
  w.rows = count;
  w.cols = in_features;
  w.data = owned->bytes.data();
  w.scales = &owned->params;
  w.storage = owned;
  return w;
}

void wint2_dequantize_row(const WeightMatrix& w, int64_t row, float* out) {
  decode_row(w, row, out);
  float planes[kWint2Group];
  for (int64_t g = 0; g < w.cols / kWint2Group; ++g) {
    float* group = out + g * kWint2Group;
    std::copy_n(group, kWint2Group, planes);
    for (int r = 0; r < kBytesPerGroup; ++r)
      for (int j = 0; j < 4; ++j) group[4 * r + j] = planes[j * kBytesPerGroup + r];
  }
}

void matmul_wint2(ThreadPool& pool, const float* x, int64_t n, const WeightMatrix& w, float* y) {
  // The inputs in plane order once, so each group's dot product reads both sides in order.
  thread_local std::vector<float> planes;
  planes.resize(static_cast<size_t>(n * w.cols));
  to_planes(x, n, w.cols, planes.data());
  x = planes.data();
  const auto threads = static_cast<int64_t>(pool.num_threads());
  const size_t grain = static_cast<size_t>(std::max<int64_t>(1, w.rows / (threads * (n <= 3 ? 1 : 4))));
  pool.parallel_for(static_cast<size_t>(w.rows), grain, [&](size_t begin, size_t end) {
    rows_wint2(x, n, w, static_cast<int64_t>(begin), static_cast<int64_t>(end), y);
  });
}

uint64_t wint2_bytes(const WeightMatrix& w) {
  const auto rows = static_cast<uint64_t>(w.rows), cols = static_cast<uint64_t>(w.cols);
  return rows * cols / 4 + rows * (cols / kWint2Group) + rows * 3 * sizeof(float);
}

}  // namespace ernie
