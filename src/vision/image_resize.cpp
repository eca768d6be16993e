// Pillow's bicubic resampling (libImaging/Resample.c), written from its documented
// algorithm: for each output coordinate, the input span center ± support·scale, where
// scale = in/out and support = 2 scaled up when shrinking; weights from the a = -0.5
// cubic kernel, normalised to sum 1, then turned into fixed point with 22 fractional
// bits; each output sample is the rounded, clipped weighted sum. Rows are resampled first
// into an 8-bit intermediate image, then columns.
#include <algorithm>
#include <cmath>

#include "util/error.h"
#include "vision/image.h"

namespace ernie {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// One output coordinate's input span and fixed-point weights.
struct Taps {
  int first = 0;
  std::vector<int32_t> weights;
};

std::vector<Taps> plan_taps(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 2.0 * filter_scale;
  std::vector<Taps> taps(static_cast<size_t>(out_size));
  std::vector<double> weights;
  for (int x = 0; x < out_size; ++x) {
    const double center = (x + 0.5) * scale;
    const int first = std::max(0, static_cast<int>(center - support + 0.5));
    const int last = std::min(in_size, static_cast<int>(center + support + 0.5));
    weights.assign(static_cast<size_t>(last - first), 0.0);
    double total = 0.0;
    for (int i = first; i < last; ++i) {
      const double w = bicubic((i - center + 0.5) / filter_scale);
      weights[static_cast<size_t>(i - first)] = w;
      total += w;
    }
    Taps& tap = taps[static_cast<size_t>(x)];
    tap.first = first;
    for (double w : weights) {
      const double normalised = total != 0.0 ? w / total : 0.0;
      // Rounded half away from zero, as Pillow does.
      const double scaled = normalised * (1 << kPrecisionBits);
      tap.weights.push_back(static_cast<int32_t>(normalised < 0 ? std::trunc(scaled - 0.5) : std::trunc(scaled + 0.5)));
    }
  }
  return taps;
}

uint8_t clip8(int64_t sum) {
  const int64_t value = sum >> kPrecisionBits;
  return static_cast<uint8_t>(std::clamp<int64_t>(value, 0, 255));
}

}  // namespace

Image resize_bicubic(const Image& image, int width, int height) {
  if (width < 1 || height < 1) fail("cannot resize an image to ", width, "x", height);
  if (image.width < 1 || image.height < 1) fail("cannot resize an empty image");
  // Rows first (when the width changes), into an 8-bit image; then columns.
  Image rows_done;
  if (width == image.width) {
    rows_done = image;
  } else {
    const std::vector<Taps> taps = plan_taps(image.width, width);
    rows_done.width = width;
    rows_done.height = image.height;
    rows_done.rgb.resize(static_cast<size_t>(width) * image.height * 3);
    for (int y = 0; y < image.height; ++y) {
      const uint8_t* in = image.pixel(0, y);
      uint8_t* out = rows_done.rgb.data() + static_cast<size_t>(y) * width * 3;
      for (int x = 0; x < width; ++x) {
        const Taps& tap = taps[static_cast<size_t>(x)];
        for (int c = 0; c < 3; ++c) {
          int64_t sum = int64_t{1} << (kPrecisionBits - 1);
          for (size_t i = 0; i < tap.weights.size(); ++i)
            sum += static_cast<int64_t>(in[(static_cast<size_t>(tap.first) + i) * 3 + c]) * tap.weights[i];
          out[static_cast<size_t>(x) * 3 + c] = clip8(sum);
        }
      }
    }
  }
  if (height == rows_done.height) return rows_done;
  const std::vector<Taps> taps = plan_taps(rows_done.height, height);
  Image result;
  result.width = width;
  result.height = height;
  result.rgb.resize(static_cast<size_t>(width) * height * 3);
  const size_t stride = static_cast<size_t>(width) * 3;
  for (int y = 0; y < height; ++y) {
    const Taps& tap = taps[static_cast<size_t>(y)];
    uint8_t* out = result.rgb.data() + static_cast<size_t>(y) * stride;
    for (size_t s = 0; s < stride; ++s) {
      int64_t sum = int64_t{1} << (kPrecisionBits - 1);
      for (size_t i = 0; i < tap.weights.size(); ++i)
        sum += static_cast<int64_t>(rows_done.rgb[(static_cast<size_t>(tap.first) + i) * stride + s]) * tap.weights[i];
      out[s] = clip8(sum);
    }
  }
  return result;
}

}  // namespace ernie
