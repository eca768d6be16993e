// ERNIE-4.5-VL's image cost on this machine: decoding + preprocessing (smart_resize,
// bicubic, patches), the vision transformer, the resampler, and - for comparison - the
// text decoder's prefill of as many tokens as the image becomes, on the same checkpoint.
//
//   vision_bench MODEL_DIR IMAGE_FILE [--threads N] [--repeat R]
//
// With a `ernie synth --preset vl-28b-layer` checkpoint (VL-28B-A3B's vision tower and
// decoder widths in two layers) the vision figures are the real model's; the decoder
// prefill covers the checkpoint's layers only (run it on a --layers 3 copy too: the
// difference is one MoE layer, and 28B has one dense and 27 MoE layers).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "model/ernie_model.h"
#include "model/multimodal_positions.h"
#include "model/vision_encoder.h"
#include "util/stopwatch.h"
#include "util/text_file.h"
#include "vision/image.h"
#include "vision/preprocess.h"

namespace {

double best_of(int repeat, const std::function<void()>& body) {
  double best = 1e30;
  for (int i = 0; i < repeat; ++i) {
    ernie::Stopwatch clock;
    body();
    best = std::min(best, clock.seconds());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: vision_bench MODEL_DIR IMAGE_FILE [--threads N] [--repeat R]\n");
    return 2;
  }
  size_t threads = 0;
  int repeat = 2;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads") threads = std::strtoul(argv[i + 1], nullptr, 10);
    else if (flag == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
  }
  try {
    ernie::ThreadPool pool(threads);
    auto model = ernie::ErnieModel::load(argv[1], pool);
    if (!model->has_vision()) throw std::runtime_error("the model is not ERNIE-4.5-VL");
    const std::string bytes = ernie::read_text_file(argv[2]);
    const std::vector<uint8_t> encoded(bytes.begin(), bytes.end());

    ernie::ImagePatches patches;
    const double preprocess = best_of(repeat, [&] {
      patches = ernie::preprocess_image(ernie::decode_image(encoded), ernie::VisionPreprocessConfig{});
    });
    ernie::VisionEncoder encoder(model->config(), *model->weights().vision, pool);
    std::vector<float> vit, features;
    const double transformer = best_of(repeat, [&] { vit = encoder.transformer(patches); });
    const double resampler = best_of(repeat, [&] { features = encoder.resample(patches, vit); });
    const int64_t tokens = ernie::visual_token_count({patches.grid_t, patches.grid_h, patches.grid_w});

    std::vector<int32_t> ids;
    for (int64_t i = 0; i < tokens; ++i) ids.push_back(static_cast<int32_t>(3 + (i * 7919) % 3000));
    const double prefill = best_of(repeat, [&] {
      auto cache = model->new_kv_cache();
      model->forward(ernie::single_sequence_batch(*cache, ids, 0, false));
    });
    std::printf("image %s: %dx%d patches -> %lld tokens, %zu threads\n", argv[2], patches.grid_w, patches.grid_h,
                static_cast<long long>(tokens), pool.num_threads());
    std::printf("preprocess (decode, resize, patches): %8.3f s\n", preprocess);
    std::printf("vision transformer (%zu blocks):      %8.3f s\n", model->weights().vision->blocks.size(), transformer);
    std::printf("resampler:                           %8.3f s\n", resampler);
    std::printf("decoder prefill, %lld tokens, %d layers: %8.3f s\n", static_cast<long long>(tokens),
                model->config().num_hidden_layers, prefill);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "vision_bench: %s\n", error.what());
    return 1;
  }
}
