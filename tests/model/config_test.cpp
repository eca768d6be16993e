#include "model/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "util/error.h"

namespace ernie {
namespace {

using ::testing::HasSubstr;

// ERNIE-4.5-0.3B-PT's config.json values (spec §1).
nlohmann::json config_03b() {
  return {{"architectures", {"Ernie4_5ForCausalLM"}},
          {"model_type", "ernie4_5"},
          {"hidden_size", 1024},
          {"intermediate_size", 3072},
          {"num_hidden_layers", 18},
          {"num_attention_heads", 16},
          {"num_key_value_heads", 2},
          {"head_dim", 128},
          {"vocab_size", 103424},
          {"max_position_embeddings", 131072},
          {"rope_theta", 500000.0},
          {"rms_norm_eps", 1e-05},
          {"tie_word_embeddings", true},
          {"use_bias", false},
          {"hidden_act", "silu"},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"pad_token_id", 0},
          {"torch_dtype", "bfloat16"}};
}

nlohmann::json config_21b() {
  nlohmann::json config = config_03b();
  config["architectures"] = {"Ernie4_5_MoeForCausalLM"};
  config["hidden_size"] = 2560;
  config["intermediate_size"] = 12288;
  config["num_hidden_layers"] = 28;
  config["num_attention_heads"] = 20;
  config["num_key_value_heads"] = 4;
  config["moe_num_experts"] = 64;
  config["moe_k"] = 6;
  config["moe_intermediate_size"] = 1536;
  config["moe_num_shared_experts"] = 2;
  config["moe_layer_start_index"] = 1;
  config["moe_layer_interval"] = 1;
  config["moe_use_aux_free"] = true;
  config["num_nextn_predict_layers"] = 1;
  return config;
}

std::string config_error_of(const nlohmann::json& config) {
  return testing::error_message([&] { parse_model_config(config.dump(), "config.json"); });
}

TEST(ModelConfigTest, ReadsThe03BConfigWithHeadDimNotDerivedFromHidden) {
  const ModelConfig config = parse_model_config(config_03b().dump(), "config.json");
  EXPECT_EQ(config.architecture, "Ernie4_5ForCausalLM");
  EXPECT_EQ(config.hidden_size, 1024);
  EXPECT_EQ(config.head_dim, 128);
  EXPECT_EQ(config.q_width(), 2048);  // 16 x 128 != hidden 1024
  EXPECT_EQ(config.kv_width(), 256);
  EXPECT_EQ(config.vocab_size, 103424);
  EXPECT_DOUBLE_EQ(config.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(config.rms_norm_eps, 1e-5);
  EXPECT_TRUE(config.tie_word_embeddings);
  EXPECT_EQ(config.eos_token_ids, std::vector<int>{2});
  EXPECT_EQ(config.layout_hint, CheckpointLayout::kTorch);
  EXPECT_FALSE(config.moe.has_value());
  EXPECT_FALSE(config.is_moe_layer(5));
}

TEST(ModelConfigTest, DtypeKeyMeansPaddleLayout) {
  nlohmann::json config = config_03b();
  config.erase("torch_dtype");
  config["dtype"] = "bfloat16";
  EXPECT_EQ(parse_model_config(config.dump(), "c").layout_hint, CheckpointLayout::kPaddle);
}

TEST(ModelConfigTest, MoeLayerRuleFor21BAnd300B) {
  const ModelConfig config = parse_model_config(config_21b().dump(), "config.json");
  ASSERT_TRUE(config.moe.has_value());
  EXPECT_EQ(config.moe->layer_end_index, 27);  // absent = last layer
  EXPECT_FALSE(config.is_moe_layer(0));
  for (int layer = 1; layer < 28; ++layer) EXPECT_TRUE(config.is_moe_layer(layer)) << layer;
  EXPECT_EQ(config.num_nextn_predict_layers, 1);

  nlohmann::json big = config_21b();
  big["num_hidden_layers"] = 54;
  big["moe_layer_start_index"] = 3;
  big["moe_layer_end_index"] = 53;
  const ModelConfig config300 = parse_model_config(big.dump(), "config.json");
  EXPECT_FALSE(config300.is_moe_layer(2));
  EXPECT_TRUE(config300.is_moe_layer(3));
  EXPECT_TRUE(config300.is_moe_layer(53));
}

TEST(ModelConfigTest, VlStyleListsTakeTheTextBranchAndTheWidestRange) {
  nlohmann::json config = config_21b();
  config["moe_num_experts"] = {64, 64};
  config["moe_intermediate_size"] = {1536, 512};
  config["moe_layer_start_index"] = {1, 1};
  config["moe_layer_end_index"] = {27, 26};
  const ModelConfig parsed = parse_model_config(config.dump(), "c");
  EXPECT_EQ(parsed.moe->num_experts, 64);
  EXPECT_EQ(parsed.moe->intermediate_size, 1536);
  EXPECT_EQ(parsed.moe->layer_start_index, 1);
  EXPECT_EQ(parsed.moe->layer_end_index, 27);
}

// ERNIE-4.5-VL-28B-A3B as the runtimes read it (docs/vl-model-notes.md §1.1).
nlohmann::json config_vl_28b() {
  nlohmann::json config = config_21b();
  config["architectures"] = {"Ernie4_5_VLMoeForConditionalGeneration"};
  config["moe_num_experts"] = {64, 64};
  config["moe_intermediate_size"] = {1536, 512};
  config["moe_layer_start_index"] = {1, 1};
  config["moe_layer_end_index"] = {29, 28};
  config["num_nextn_predict_layers"] = 0;
  config["rope_3d"] = true;
  config["freq_allocation"] = 20;
  config["im_patch_id"] = 100295;
  config["pixel_hidden_size"] = 1280;
  config["spatial_conv_size"] = 2;
  config["temporal_conv_size"] = 2;
  config["vision_config"] = {{"depth", 32}, {"embed_dim", 1280}, {"hidden_size", 1280}, {"num_heads", 16},
                             {"mlp_ratio", 4}, {"hidden_act", "quick_gelu"}, {"patch_size", 14},
                             {"spatial_merge_size", 2}, {"in_channels", 3}};
  return config;
}

TEST(ModelConfigTest, ReadsTheVlConfig) {
  const ModelConfig config = parse_model_config(config_vl_28b().dump(), "config.json");
  ASSERT_TRUE(config.vl && config.moe);
  EXPECT_EQ(config.moe->num_experts, 64);
  EXPECT_EQ(config.moe->intermediate_size, 1536);
  EXPECT_EQ(config.moe->layer_end_index, 27);  // [29, 28] of 28 layers: to the last one
  EXPECT_EQ(config.vl->vision_num_experts, 64);
  EXPECT_EQ(config.vl->vision_intermediate_size, 512);
  EXPECT_EQ(config.vl->vision.depth, 32);
  EXPECT_EQ(config.vl->vision.head_dim(), 80);
  EXPECT_EQ(config.vl->freq_allocation, 20);
  // Ids not in the file take the released tokenizer's values.
  EXPECT_EQ(config.vl->image_start_token_id, 101304);
  EXPECT_EQ(config.vl->video_end_token_id, 101307);
  EXPECT_TRUE(config.vl->is_vision_token(100295));
  EXPECT_TRUE(config.vl->is_vision_token(101306));
  EXPECT_FALSE(config.vl->is_vision_token(100296));  // <|AUDIO_PLACEHOLDER|> routes as text
}

TEST(ModelConfigTest, RefusesVlConfigsWeCannotCompute) {
  nlohmann::json config = config_vl_28b();
  config.erase("vision_config");
  EXPECT_THAT(config_error_of(config), HasSubstr("needs the object \"vision_config\""));
  config = config_vl_28b();
  config["freq_allocation"] = 21;
  EXPECT_THAT(config_error_of(config), HasSubstr("freq_allocation 21 must lie in 0..64 and leave an even number"));
  config = config_vl_28b();
  config["moe_num_experts"] = {64, 32};
  EXPECT_THAT(config_error_of(config), HasSubstr("only equal counts are supported"));
  config = config_vl_28b();
  config["moe_layer_start_index"] = {1, 2};
  EXPECT_THAT(config_error_of(config), HasSubstr("moe_layer_start_index differs between text (1) and vision (2)"));
  config = config_vl_28b();
  config["vision_config"]["num_heads"] = 3;
  EXPECT_THAT(config_error_of(config), HasSubstr("must split into num_heads (3) heads"));
  config = config_vl_28b();
  config["im_patch_id"] = 200000;
  EXPECT_THAT(config_error_of(config), HasSubstr("im_patch_id 200000 is outside the vocabulary"));
  config = config_vl_28b();
  config["text_config"] = nlohmann::json::object();
  EXPECT_THAT(config_error_of(config), HasSubstr("transformers-native ERNIE-VL format"));
}

TEST(ModelConfigTest, EosMayBeAList) {
  nlohmann::json config = config_03b();
  config["eos_token_id"] = {2, 12};
  EXPECT_EQ(parse_model_config(config.dump(), "c").eos_token_ids, (std::vector<int>{2, 12}));
}

TEST(ModelConfigTest, RefusesWhatWeCannotCompute) {
  nlohmann::json unknown = config_03b();
  unknown["architectures"] = {"LlamaForCausalLM"};
  EXPECT_THAT(config_error_of(unknown), HasSubstr("unsupported architecture \"LlamaForCausalLM\""));
  EXPECT_THAT(config_error_of(unknown), HasSubstr("Ernie4_5_MoeForCausalLM"));

  nlohmann::json indivisible = config_03b();
  indivisible["num_key_value_heads"] = 3;
  EXPECT_THAT(config_error_of(indivisible), HasSubstr("must be divisible by num_key_value_heads (3)"));

  nlohmann::json no_head_dim = config_03b();
  no_head_dim.erase("head_dim");
  EXPECT_THAT(config_error_of(no_head_dim), HasSubstr("missing required field \"head_dim\""));

  nlohmann::json wrong_type = config_03b();
  wrong_type["hidden_size"] = "1024";
  EXPECT_THAT(config_error_of(wrong_type), HasSubstr("\"hidden_size\" must be an integer"));

  nlohmann::json negative = config_03b();
  negative["num_hidden_layers"] = 0;
  EXPECT_THAT(config_error_of(negative), HasSubstr("\"num_hidden_layers\" must be positive"));

  nlohmann::json biased = config_03b();
  biased["use_bias"] = true;
  EXPECT_THAT(config_error_of(biased), HasSubstr("use_bias"));

  nlohmann::json scaled = config_03b();
  scaled["rope_scaling"] = {{"type", "yarn"}};
  EXPECT_THAT(config_error_of(scaled), HasSubstr("rope_scaling"));

  nlohmann::json too_many = config_21b();
  too_many["moe_k"] = 65;
  EXPECT_THAT(config_error_of(too_many), HasSubstr("moe_k (65) exceeds moe_num_experts (64)"));

  nlohmann::json bad_range = config_21b();
  bad_range["moe_layer_start_index"] = 30;
  EXPECT_THAT(config_error_of(bad_range), HasSubstr("moe_layer_start_index 30"));
}

TEST(ModelConfigTest, BadJsonNamesTheFile) {
  try {
    parse_model_config("{\"hidden_size\": ", "/models/x/config.json");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("/models/x/config.json: invalid JSON"));
  }
  EXPECT_THROW(parse_model_config("[1, 2]", "c"), Error);
}

}  // namespace
}  // namespace ernie

namespace ernie {
namespace {

// FastDeploy's offline-quantized releases announce themselves in quantization_config
// (docs/quantization.md): read as such, or refused naming the key.
TEST(ModelConfigTest, ReadsFastDeployReleaseQuantizationConfigs) {
  nlohmann::json config = config_21b();
  EXPECT_FALSE(parse_model_config(config.dump(), "c").release.has_value());
  config["quantization_config"] = {{"quantization", "wint2"}, {"dense_quant_type", "wint8"},
                                   {"moe_quant_config", {{"moe_w4_quant_config", {{"quant_end_layer", 6}}}}}};
  const ModelConfig wint2 = parse_model_config(config.dump(), "c");
  ASSERT_TRUE(wint2.release.has_value());
  EXPECT_EQ(wint2.release->scheme, "wint2");
  EXPECT_EQ(wint2.release->moe_w4_quant_end_layer, 6);

  config["quantization_config"] = {{"quantization", "mix_quant"}, {"dense_quant_type", "wint8"},
                                   {"moe_quant_type", "w4a8"}, {"kv_cache_quant_type", "int8"},
                                   {"is_permuted", false}, {"is_quantized", true}, {"hadamard_block_size", 64}};
  const ModelConfig w4a8 = parse_model_config(config.dump(), "c");
  ASSERT_TRUE(w4a8.release.has_value());
  EXPECT_EQ(w4a8.release->scheme, "w4a8");
  EXPECT_EQ(w4a8.release->hadamard_block_size, 64);
  EXPECT_TRUE(w4a8.release->static_kv_int8);
  EXPECT_THAT(w4a8.release->quantization(), HasSubstr("\"kv_cache_quant_type\":\"int8\""));

  // An online mix_quant (experts wint4) is not a release.
  config["quantization_config"] = {{"quantization", "mix_quant"}, {"dense_quant_type", "wint8"}, {"moe_quant_type", "wint4"}};
  EXPECT_FALSE(parse_model_config(config.dump(), "c").release.has_value());
}

TEST(ModelConfigTest, RefusesW4A8LayoutsAndFieldsItDoesNotRead) {
  nlohmann::json config = config_21b();
  const nlohmann::json base = {{"quantization", "mix_quant"}, {"moe_quant_type", "w4a8"}, {"is_permuted", false}};
  const auto error_with = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json quantization = base;
    quantization[key] = value;
    config["quantization_config"] = quantization;
    return config_error_of(config);
  };
  config["quantization_config"] = {{"quantization", "mix_quant"}, {"moe_quant_type", "w4a8"}};
  EXPECT_THAT(config_error_of(config), HasSubstr("\"is_permuted\": false"));
  EXPECT_THAT(error_with("is_permuted", true), HasSubstr("permuted layout"));
  EXPECT_THAT(error_with("hadamard_block_size", 96), HasSubstr("hadamard_block_size must be a power of two"));
  EXPECT_THAT(error_with("kv_cache_quant_type", "int4_zp"), HasSubstr("kv_cache_quant_type \"int4_zp\""));
  EXPECT_THAT(error_with("dense_quant_type", "w8a8"), HasSubstr("dense_quant_type \"w8a8\""));
}

}  // namespace
}  // namespace ernie
