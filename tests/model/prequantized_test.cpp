// `ernie quantize` checkpoints: written from a loaded, quantized model, they load with no
// conversion and compute bit-identical logits, in both layouts (Paddle's fused
// tensors included), with a tied or an untied head; the bf16 copies of packed Linears
// are gone; a directory that holds a checkpoint is never overwritten.
#include "model/prequantized.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "model/ernie_model.h"
#include "model/quantization.h"
#include "model/synthetic_checkpoint.h"
#include "support/test_support.h"

namespace ernie {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string preset;
  CheckpointLayout layout;
  bool tied;
  std::string quantization;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.preset + (info.param.layout == CheckpointLayout::kPaddle ? "_paddle" : "_pt") +
                     (info.param.tied ? "_tied_" : "_untied_") +
                     (info.param.quantization.front() == '{' ? std::string("mix") : info.param.quantization);
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

std::vector<float> logits_of(ErnieModel& model) {
  auto cache = model.new_kv_cache();
  const std::vector<int32_t> ids = {1, 17, 300, 45, 9, 120, 3, 77};
  return model.forward(single_sequence_batch(*cache, ids, 0, true));
}

class PrequantizedTest : public ::testing::TestWithParam<Case> {
 protected:
  testing::TempDir temp_;
  ThreadPool pool_{2};
};

TEST_P(PrequantizedTest, LoadsWithoutConversionAndComputesTheSameLogits) {
  SyntheticModelSpec spec = synthetic_preset(GetParam().preset);
  spec.tie_embeddings = GetParam().tied;
  const std::string source = testing::make_checkpoint(temp_, "source", spec, GetParam().layout);
  const QuantizationPlan plan = parse_quantization(GetParam().quantization, load_model_config(source));
  auto quantized = ErnieModel::load(source, pool_, nullptr, plan);
  const std::vector<float> expected = logits_of(*quantized);

  const std::string out = temp_.file("packed");
  const PrequantizedWrite written =
      write_prequantized_checkpoint(source, quantized->checkpoint(), quantized->weights(), GetParam().quantization, out);
  EXPECT_GT(written.packed_linears, 0u);
  EXPECT_LT(fs::file_size(out + "/model.safetensors"), quantized->load_report().tensor_bytes);
  EXPECT_TRUE(fs::exists(out + "/tokenizer_config.json") || !fs::exists(source + "/tokenizer_config.json"));

  // The checkpoint names its quantization; loading it packs nothing.
  const std::optional<std::string> stored = prequantized_quantization(out);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(parse_quantization(*stored, load_model_config(out)).describe(), plan.describe());
  EXPECT_FALSE(prequantized_quantization(source).has_value());
  auto loaded = ErnieModel::load(out, pool_, nullptr, parse_quantization(*stored, load_model_config(out)));
  EXPECT_TRUE(loaded->load_report().prequantized);
  EXPECT_EQ(loaded->load_report().kept_dense, 0);
  EXPECT_EQ(logits_of(*loaded), expected);

  // No bf16 copy of a packed Linear is left; the embedding and the norms are.
  const auto checkpoint = Checkpoint::open(out);
  const std::string prefix = GetParam().layout == CheckpointLayout::kPaddle ? "ernie." : "model.";
  EXPECT_TRUE(checkpoint->contains(prefix + "embed_tokens.weight"));
  EXPECT_TRUE(checkpoint->contains(prefix + "norm.weight"));
  for (const std::string& name : checkpoint->names()) {
    EXPECT_EQ(name.find("proj.weight"), std::string::npos) << name;
    EXPECT_EQ(name.find("qkv"), std::string::npos) << name;
  }
  EXPECT_EQ(checkpoint->contains("lm_head.weight"), false);
}

INSTANTIATE_TEST_SUITE_P(
    Checkpoints, PrequantizedTest,
    ::testing::Values(Case{"tiny-dense", CheckpointLayout::kTorch, true, "wint4"},
                      Case{"tiny-dense", CheckpointLayout::kPaddle, false, "wint8"},
                      Case{"tiny-moe", CheckpointLayout::kTorch, false, "wint4"},
                      Case{"tiny-moe", CheckpointLayout::kPaddle, true,
                           R"({"quantization":"mix_quant","dense_quant_type":"wint8","moe_quant_type":"wint4"})"},
                      Case{"tiny-moe", CheckpointLayout::kTorch, true, "block_wise_fp8"}),
    case_name);

TEST(PrequantizedWriteTest, NeverOverwritesACheckpoint) {
  testing::TempDir temp;
  ThreadPool pool(2);
  const std::string source = testing::make_checkpoint(temp, "source", synthetic_preset("tiny-dense"), CheckpointLayout::kTorch);
  auto model = ErnieModel::load(source, pool, nullptr, parse_quantization("wint8", load_model_config(source)));
  const std::string message = testing::error_message(
      [&] { write_prequantized_checkpoint(source, model->checkpoint(), model->weights(), "wint8", source); });
  EXPECT_NE(message.find("already holds a checkpoint"), std::string::npos) << message;
}

}  // namespace
}  // namespace ernie
