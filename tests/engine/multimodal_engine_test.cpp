// ERNIE-4.5-VL requests in the engine: a prompt with images gives the same greedy tokens
// as one forward pass over the whole prompt, however its prefill is chunked (splits
// inside an image's tokens), when it shares steps with text requests, and after
// preemption; the prefix cache reuses an image's blocks for the same pixels and never
// for different ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "engine/engine.h"
#include "model/ernie_model.h"
#include "model/synthetic_checkpoint.h"
#include "support/multimodal_run.h"
#include "support/test_support.h"
#include "util/random.h"

namespace ernie {
namespace {

Image noise_image(int width, int height, uint64_t seed) {
  Random random(seed);
  Image image{width, height, std::vector<uint8_t>(static_cast<size_t>(width) * height * 3)};
  for (uint8_t& value : image.rgb) value = static_cast<uint8_t>(random.next() % 256);
  return image;
}

class MultimodalEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    temp_ = new testing::TempDir();
    pool_ = new ThreadPool(2);
    vision_pool_ = new ThreadPool(1);
    const std::string dir =
        testing::make_checkpoint(*temp_, "vl", synthetic_preset("vl-tiny"), CheckpointLayout::kTorch, 1);
    model_ = ErnieModel::load(dir, *pool_).release();
    tokenizer_ = new Tokenizer(Tokenizer::load(testing::golden_model_dir("tiny-moe")));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
    delete vision_pool_;
    delete pool_;
    delete temp_;
  }

  static EncodedVisual encode(const Image& image) {
    const ImagePatches patches = preprocess_image(image, VisionPreprocessConfig{});
    EncodedVisual encoded;
    encoded.grid = {patches.grid_t, patches.grid_h, patches.grid_w};
    encoded.features = model_->encode_vision(patches, *vision_pool_);
    encoded.content_hash = visual_content_hash(patches.grid_t, patches.grid_h, patches.grid_w, patches.values);
    return encoded;
  }

  // text, an image block per image, text.
  static GenerateRequest request(const std::string& id, const std::vector<EncodedVisual>& images, int seed) {
    const VlConfig& vl = *model_->config().vl;
    std::vector<int32_t> tokens = {1, 20 + seed, 21, 22};
    for (const EncodedVisual& image : images) {
      tokens.push_back(vl.image_start_token_id);
      tokens.insert(tokens.end(), static_cast<size_t>(visual_token_count(image.grid)), vl.im_patch_id);
      tokens.push_back(vl.image_end_token_id);
      tokens.push_back(30 + seed);
    }
    GenerateRequest generate;
    generate.id = id;
    generate.prompt = tokens;
    generate.multimodal = make_multimodal_prompt(tokens, vl.im_patch_id, model_->config().hidden_size, images);
    generate.params.temperature = 0.0f;
    generate.params.max_tokens = 6;
    generate.params.ignore_eos = true;
    return generate;
  }

  // The greedy tokens of one forward pass over the whole prompt, then one token at a time.
  static std::vector<int32_t> direct(const GenerateRequest& generate) {
    return testing::run_multimodal(*model_, generate.prompt, *generate.multimodal, generate.params.max_tokens).generated;
  }

  static std::map<std::string, RequestOutput> run(Engine& engine, std::vector<GenerateRequest> requests,
                                                  std::map<std::string, std::vector<int32_t>>& tokens) {
    for (auto& generate : requests) engine.add_request(std::move(generate));
    std::map<std::string, RequestOutput> finals;
    for (int steps = 0; engine.has_work() && steps < 10000; ++steps)
      for (RequestOutput& output : engine.step()) {
        auto& mine = tokens[output.request_id];
        mine.insert(mine.end(), output.token_ids.begin(), output.token_ids.end());
        if (output.finished()) finals[output.request_id] = output;
      }
    EXPECT_FALSE(engine.has_work());
    return finals;
  }

  static std::unique_ptr<Engine> engine(int64_t batched_tokens, int blocks, bool prefix_caching) {
    EngineConfig config;
    config.block_size = 16;
    config.max_model_len = 1024;
    config.max_num_seqs = 8;
    config.max_num_batched_tokens = batched_tokens;
    config.prefix_caching = prefix_caching;
    return std::make_unique<Engine>(*model_, *tokenizer_, config, blocks, std::vector<int32_t>{2});
  }

  static testing::TempDir* temp_;
  static ThreadPool* pool_;
  static ThreadPool* vision_pool_;
  static ErnieModel* model_;
  static Tokenizer* tokenizer_;
};

testing::TempDir* MultimodalEngineTest::temp_ = nullptr;
ThreadPool* MultimodalEngineTest::pool_ = nullptr;
ThreadPool* MultimodalEngineTest::vision_pool_ = nullptr;
ErnieModel* MultimodalEngineTest::model_ = nullptr;
Tokenizer* MultimodalEngineTest::tokenizer_ = nullptr;

TEST_F(MultimodalEngineTest, ChunkedMixedAndPreemptedRunsMatchOneForwardPass) {
  const EncodedVisual wide = encode(noise_image(150, 60, 1)), tall = encode(noise_image(50, 120, 2));
  const GenerateRequest two_images = request("two", {wide, tall}, 1);
  const GenerateRequest one_image = request("one", {tall}, 2);
  GenerateRequest text;
  text.id = "text";
  text.prompt = {1, 40, 41, 42, 43, 44};
  text.params = two_images.params;
  const std::map<std::string, std::vector<int32_t>> expected = {
      {"two", direct(two_images)}, {"one", direct(one_image)}, {"text", {}}};

  // 7-token chunks split every image's run; the text request shares the steps.
  for (const auto& [batched, blocks] : std::vector<std::pair<int64_t, int>>{{7, 64}, {512, 64}, {512, 4}}) {
    SCOPED_TRACE(::testing::Message() << batched << " tokens per step, " << blocks << " blocks");
    std::map<std::string, std::vector<int32_t>> tokens;
    auto runner = engine(batched, blocks, false);
    run(*runner, {two_images, one_image, text}, tokens);
    EXPECT_EQ(tokens["two"], expected.at("two"));
    EXPECT_EQ(tokens["one"], expected.at("one"));
    EXPECT_EQ(tokens["text"].size(), 6u);
    if (blocks == 4) {
      EXPECT_GT(runner->stats().preemptions, 0) << "the small pool must preempt";
    }
  }
}

TEST_F(MultimodalEngineTest, PrefixCacheHitsOnlyForTheSamePixels) {
  const EncodedVisual image = encode(noise_image(150, 60, 3));
  const EncodedVisual changed = encode(noise_image(150, 60, 4));  // same size, other pixels
  auto runner = engine(512, 128, true);
  std::map<std::string, std::vector<int32_t>> tokens;
  const GenerateRequest first = request("first", {image}, 5);
  const int64_t image_end = 4 + 1 + visual_token_count(image.grid);
  run(*runner, {first}, tokens);
  // The same image again: every full block of the prompt comes from the cache.
  const auto again = run(*runner, {request("again", {image}, 5)}, tokens);
  EXPECT_EQ(again.at("again").cached_tokens, (static_cast<int64_t>(first.prompt.size()) - 1) / 16 * 16);
  EXPECT_EQ(tokens["again"], tokens["first"]);
  // Other pixels behind the same tokens: only the blocks before the image may be reused.
  const GenerateRequest other = request("other", {changed}, 5);
  const auto different = run(*runner, {other}, tokens);
  EXPECT_LE(different.at("other").cached_tokens, 4);
  EXPECT_LT(different.at("other").cached_tokens, image_end);
  EXPECT_EQ(tokens["other"], direct(other));
}

}  // namespace
}  // namespace ernie
