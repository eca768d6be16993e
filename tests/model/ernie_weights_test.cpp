#include "model/ernie_weights.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "model/ernie_model.h"
#include "model/safetensors_writer.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ernie {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

std::vector<float> all_logits(const std::string& dir) {
  ThreadPool pool(2);
  auto model = ErnieModel::load(dir, pool);
  auto cache = model->new_kv_cache();
  std::vector<int32_t> ids;
  for (int i = 0; i < 20; ++i) ids.push_back(3 + (i * 37) % 4000);
  return model->forward(single_sequence_batch(*cache, ids, 0, true));
}

void expect_same_matrix(const WeightMatrix& a, const WeightMatrix& b, const std::string& what) {
  ASSERT_EQ(a.rows, b.rows) << what;
  ASSERT_EQ(a.cols, b.cols) << what;
  EXPECT_EQ(a.to_f32(), b.to_f32()) << what;
}

void expect_same_mlp(const MlpWeights& a, const MlpWeights& b, const std::string& what) {
  expect_same_matrix(a.gate, b.gate, what + ".gate");
  expect_same_matrix(a.up, b.up, what + ".up");
  expect_same_matrix(a.down, b.down, what + ".down");
}

void expect_same_layer(const DecoderLayerWeights& a, const DecoderLayerWeights& b, const std::string& what) {
  EXPECT_EQ(a.input_norm, b.input_norm) << what;
  EXPECT_EQ(a.post_attention_norm, b.post_attention_norm) << what;
  expect_same_matrix(a.attention.q, b.attention.q, what + ".q");
  expect_same_matrix(a.attention.k, b.attention.k, what + ".k");
  expect_same_matrix(a.attention.v, b.attention.v, what + ".v");
  expect_same_matrix(a.attention.o, b.attention.o, what + ".o");
  ASSERT_EQ(a.mlp.has_value(), b.mlp.has_value()) << what;
  if (a.mlp) expect_same_mlp(*a.mlp, *b.mlp, what + ".mlp");
  ASSERT_EQ(a.moe.has_value(), b.moe.has_value()) << what;
  if (a.moe) {
    EXPECT_EQ(a.moe->router, b.moe->router) << what;
    EXPECT_EQ(a.moe->correction_bias, b.moe->correction_bias) << what;
    ASSERT_EQ(a.moe->experts.size(), b.moe->experts.size());
    for (size_t e = 0; e < a.moe->experts.size(); ++e)
      expect_same_mlp(a.moe->experts[e], b.moe->experts[e], what + ".expert" + std::to_string(e));
    ASSERT_EQ(a.moe->shared.has_value(), b.moe->shared.has_value());
    if (a.moe->shared) expect_same_mlp(*a.moe->shared, *b.moe->shared, what + ".shared");
  }
}

TEST(ErnieWeightsTest, GoldenPaddleTwinGivesBitIdenticalWeights) {
  for (const auto& [pt, paddle] : {std::pair{"tiny-dense", "tiny-dense-paddle"}, std::pair{"tiny-moe", "tiny-moe-paddle"}}) {
    SCOPED_TRACE(pt);
    const ModelConfig config = load_model_config(testing::golden_model_dir(pt));
    auto pt_checkpoint = Checkpoint::open(testing::golden_model_dir(pt));
    auto paddle_checkpoint = Checkpoint::open(testing::golden_model_dir(paddle));
    const ErnieWeights a = load_ernie_weights(*pt_checkpoint, config);
    const ErnieWeights b = load_ernie_weights(*paddle_checkpoint, load_model_config(testing::golden_model_dir(paddle)));
    EXPECT_EQ(a.layout, CheckpointLayout::kTorch);
    EXPECT_EQ(b.layout, CheckpointLayout::kPaddle);
    expect_same_matrix(a.embedding, b.embedding, "embedding");
    expect_same_matrix(a.lm_head, b.lm_head, "lm_head");
    EXPECT_EQ(a.final_norm, b.final_norm);
    ASSERT_EQ(a.layers.size(), b.layers.size());
    for (size_t i = 0; i < a.layers.size(); ++i) expect_same_layer(a.layers[i], b.layers[i], "layer" + std::to_string(i));
  }
}

struct LayoutCase {
  std::string preset;
  bool untied;
  bool mtp;
};

class LayoutEquivalenceTest : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(LayoutEquivalenceTest, PaddleAndPtAndShardedGiveIdenticalLogits) {
  SyntheticModelSpec spec = synthetic_preset(GetParam().preset);
  spec.tie_embeddings = !GetParam().untied;
  spec.with_mtp = GetParam().mtp;
  TempDir temp;
  const std::vector<float> pt = all_logits(testing::make_checkpoint(temp, "pt", spec, CheckpointLayout::kTorch));
  EXPECT_EQ(all_logits(testing::make_checkpoint(temp, "paddle", spec, CheckpointLayout::kPaddle)), pt);
  EXPECT_EQ(all_logits(testing::make_checkpoint(temp, "pt3", spec, CheckpointLayout::kTorch, 3)), pt);
  EXPECT_EQ(all_logits(testing::make_checkpoint(temp, "paddle2", spec, CheckpointLayout::kPaddle, 2)), pt);
}

INSTANTIATE_TEST_SUITE_P(Synthetic, LayoutEquivalenceTest,
                         ::testing::Values(LayoutCase{"tiny-dense", false, false}, LayoutCase{"tiny-dense", true, false},
                                           LayoutCase{"tiny-moe", false, true}, LayoutCase{"tiny-moe", true, false}),
                         [](const auto& test_info) {
                           return (test_info.param.preset == "tiny-dense" ? std::string("dense") : std::string("moe")) +
                                  (test_info.param.untied ? "_untied" : "_tied") + (test_info.param.mtp ? "_mtp" : "");
                         });

// Rewrites a one-file checkpoint through `edit` and returns the load error, if any.
class DefectTest : public ::testing::Test {
 protected:
  std::string load_error_after(const std::function<void(std::vector<TensorToWrite>&)>& edit,
                               const std::string& preset = "tiny-moe",
                               CheckpointLayout layout = CheckpointLayout::kTorch) {
    const std::string dir = testing::make_checkpoint(temp_, "m" + std::to_string(count_++), synthetic_preset(preset), layout);
    std::vector<TensorToWrite> tensors = testing::read_all_tensors(dir + "/model.safetensors");
    edit(tensors);
    write_safetensors(dir + "/model.safetensors", tensors, {});
    try {
      auto checkpoint = Checkpoint::open(dir);
      load_ernie_weights(*checkpoint, load_model_config(dir));
    } catch (const Error& error) {
      return error.what();
    }
    return "(no error)";
  }
  static TensorToWrite* find(std::vector<TensorToWrite>& tensors, const std::string& name) {
    for (auto& tensor : tensors)
      if (tensor.name == name) return &tensor;
    ADD_FAILURE() << "no tensor " << name;
    return &tensors.front();
  }
  TempDir temp_;
  int count_ = 0;
};

TEST_F(DefectTest, MissingTensorIsNamedWithExpectedShape) {
  const std::string error = load_error_after([](auto& tensors) {
    std::erase_if(tensors, [](const TensorToWrite& t) { return t.name == "model.layers.2.mlp.experts.5.up_proj.weight"; });
  });
  EXPECT_THAT(error, HasSubstr("missing tensor \"model.layers.2.mlp.experts.5.up_proj.weight\" (expected shape [128, 256])"));
}

TEST_F(DefectTest, WrongShapeNamesBothShapes) {
  const std::string error = load_error_after([](auto& tensors) {
    TensorToWrite* tensor = find(tensors, "model.layers.0.self_attn.k_proj.weight");
    tensor->shape = {256, 128};  // same bytes, transposed shape
  });
  EXPECT_THAT(error, HasSubstr("\"model.layers.0.self_attn.k_proj.weight\" has shape [256, 128], expected [128, 256]"));
}

TEST_F(DefectTest, PaddleWrongShapeIsCaughtToo) {
  const std::string error = load_error_after(
      [](auto& tensors) { find(tensors, "ernie.layers.0.self_attn.qkv_proj.weight")->shape = {1024, 256}; }, "tiny-dense",
      CheckpointLayout::kPaddle);
  EXPECT_THAT(error, HasSubstr("has shape [1024, 256], expected [256, 1024]"));
}

TEST_F(DefectTest, UnexpectedTensorIsRefusedByName) {
  const std::string error = load_error_after([](auto& tensors) {
    tensors.push_back({"model.layers.0.self_attn.q_proj.bias", DType::kBF16, {256}, std::vector<uint8_t>(512, 0)});
  });
  EXPECT_THAT(error, HasSubstr("does not use: \"model.layers.0.self_attn.q_proj.bias\""));
}

TEST_F(DefectTest, MissingCorrectionBiasIsRefusedWhenTheConfigUsesIt) {
  const std::string error = load_error_after([](auto& tensors) {
    std::erase_if(tensors, [](const TensorToWrite& t) { return t.name.find("e_score_correction_bias") != std::string::npos; });
  });
  EXPECT_THAT(error, HasSubstr("e_score_correction_bias"));
}

TEST_F(DefectTest, MixedPrefixesAreRefused) {
  const std::string error = load_error_after([](auto& tensors) {
    TensorToWrite copy = *find(tensors, "model.embed_tokens.weight");
    copy.name = "ernie.embed_tokens.weight";
    tensors.push_back(copy);
  });
  EXPECT_THAT(error, HasSubstr("found both"));
}

TEST_F(DefectTest, DuplicateLmHeadOfATiedModelIsAccepted) {
  // The 0.3B-PT release may carry an lm_head.weight although it ties embeddings.
  const std::string error = load_error_after([](auto& tensors) {
    TensorToWrite copy = *find(tensors, "model.embed_tokens.weight");
    copy.name = "lm_head.weight";
    tensors.push_back(copy);
  });
  EXPECT_EQ(error, "(no error)");
}

TEST_F(DefectTest, FusedTorchQkvAndUpGateAreAccepted) {
  // llama.cpp's converter accepts torch-layout fused qkv_proj / up_gate_proj; so do we.
  const std::string error = load_error_after([](auto& tensors) {
    for (const std::string base : {"model.layers.0.self_attn.", "model.layers.1.self_attn."}) {
      TensorToWrite fused{base + "qkv_proj.weight", DType::kBF16, {0, 256}, {}};
      for (const char* part : {"q_proj", "k_proj", "v_proj"}) {
        TensorToWrite* tensor = find(tensors, base + part + ".weight");
        fused.shape[0] += tensor->shape[0];
        fused.bytes.insert(fused.bytes.end(), tensor->bytes.begin(), tensor->bytes.end());
      }
      std::erase_if(tensors, [&](const TensorToWrite& t) { return t.name.rfind(base, 0) == 0 && t.name.find("_proj") != std::string::npos && t.name.find("o_proj") == std::string::npos; });
      tensors.push_back(fused);
    }
  });
  EXPECT_EQ(error, "(no error)");
}

TEST(ErnieWeightsMtpTest, MtpTensorsAreLoadedWhenPresent) {
  SyntheticModelSpec spec = synthetic_preset("tiny-moe");
  spec.with_mtp = true;
  TempDir temp;
  for (CheckpointLayout layout : {CheckpointLayout::kTorch, CheckpointLayout::kPaddle}) {
    const std::string dir = testing::make_checkpoint(temp, layout == CheckpointLayout::kTorch ? "pt" : "pd", spec, layout);
    auto checkpoint = Checkpoint::open(dir);
    const ErnieWeights weights = load_ernie_weights(*checkpoint, load_model_config(dir));
    ASSERT_EQ(weights.mtp.size(), 1u);
    EXPECT_EQ(weights.mtp[0].linear_projection.rows, 256);
    EXPECT_EQ(weights.mtp[0].linear_projection.cols, 512);
    EXPECT_TRUE(weights.mtp[0].block.mlp.has_value()) << "the MTP block is a dense layer";
    EXPECT_EQ(weights.mtp[0].block.mlp->gate.rows, 512);
  }
}

}  // namespace
}  // namespace ernie
