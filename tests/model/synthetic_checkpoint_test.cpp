#include "model/synthetic_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/checkpoint.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ernie {
namespace {

using testing::TempDir;

TEST(SyntheticCheckpointTest, SameSeedSameBytesOtherSeedOtherWeights) {
  TempDir temp;
  SyntheticModelSpec spec = synthetic_preset("tiny-dense");
  const std::string a = testing::make_checkpoint(temp, "a", spec, CheckpointLayout::kTorch);
  const std::string b = testing::make_checkpoint(temp, "b", spec, CheckpointLayout::kTorch);
  spec.seed = 2;
  const std::string c = testing::make_checkpoint(temp, "c", spec, CheckpointLayout::kTorch);
  const std::string bytes_a = testing::read_file(a + "/model.safetensors");
  EXPECT_EQ(bytes_a, testing::read_file(b + "/model.safetensors"));
  EXPECT_NE(bytes_a, testing::read_file(c + "/model.safetensors"));
}

TEST(SyntheticCheckpointTest, WritesTheRealFormatMarkers) {
  TempDir temp;
  const SyntheticModelSpec spec = synthetic_preset("tiny-moe");
  const std::string pt = testing::make_checkpoint(temp, "pt", spec, CheckpointLayout::kTorch);
  const std::string paddle = testing::make_checkpoint(temp, "paddle", spec, CheckpointLayout::kPaddle);
  const auto pt_config = nlohmann::json::parse(testing::read_file(pt + "/config.json"));
  const auto paddle_config = nlohmann::json::parse(testing::read_file(paddle + "/config.json"));
  EXPECT_EQ(pt_config.at("torch_dtype"), "bfloat16");
  EXPECT_FALSE(pt_config.contains("dtype"));
  EXPECT_EQ(paddle_config.at("dtype"), "bfloat16");
  EXPECT_EQ(pt_config.at("architectures").at(0), "Ernie4_5_MoeForCausalLM");

  auto pt_checkpoint = Checkpoint::open(pt);
  auto paddle_checkpoint = Checkpoint::open(paddle);
  EXPECT_EQ(pt_checkpoint->metadata().at("format"), "pt");
  EXPECT_EQ(paddle_checkpoint->metadata().at("format"), "np");
  // Spec §5.2 shapes of the Paddle layout.
  EXPECT_EQ(paddle_checkpoint->take("ernie.layers.0.self_attn.qkv_proj.weight").shape(),
            (std::vector<int64_t>{256, (4 + 2 + 2) * 64}));
  EXPECT_EQ(paddle_checkpoint->take("ernie.layers.1.mlp.gate.weight").shape(), (std::vector<int64_t>{256, 8}));
  EXPECT_EQ(paddle_checkpoint->take("ernie.layers.1.mlp.gate.weight").dtype(), DType::kF32);
  EXPECT_EQ(paddle_checkpoint->take("ernie.layers.1.mlp.experts.0.up_gate_proj.weight").shape(),
            (std::vector<int64_t>{256, 256}));
  EXPECT_EQ(paddle_checkpoint->take("ernie.layers.1.mlp.moe_statics.e_score_correction_bias").shape(),
            (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(pt_checkpoint->take("model.layers.1.mlp.shared_experts.gate_proj.weight").shape(),
            (std::vector<int64_t>{256, 256}));
  EXPECT_EQ(pt_checkpoint->take("model.layers.0.self_attn.o_proj.weight").shape(), (std::vector<int64_t>{256, 256}));
}

TEST(SyntheticCheckpointTest, PresetsAreValidAndUnknownOnesAreNamed) {
  for (const char* name : {"tiny-dense", "tiny-moe", "0.3b", "21b-a3b"}) EXPECT_NO_THROW(synthetic_preset(name)) << name;
  const SyntheticModelSpec real = synthetic_preset("0.3b");
  EXPECT_EQ(real.hidden_size, 1024);
  EXPECT_EQ(real.num_layers, 18);
  EXPECT_EQ(real.num_heads * real.head_dim, 2048);
  EXPECT_EQ(real.vocab_size, 103424);
  try {
    synthetic_preset("7b");
    FAIL();
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("unknown synthetic preset \"7b\""));
  }
}

}  // namespace
}  // namespace ernie
