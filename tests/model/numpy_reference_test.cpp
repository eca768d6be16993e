// Shapes beyond the golden ones, checked against the independent numpy forward pass
// (shared/tools/ref_ernie_numpy.py, float64). For each random checkpoint we write our
// teacher-forced logits and greedy ids in the golden file format; the numpy reference
// recomputes them and exits non-zero unless max |logit diff| <= 2e-3, top-1 agrees on
// every row that is not a near-tie, and the greedy ids are identical.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "model/ernie_model.h"
#include "support/test_support.h"

namespace ernie {
namespace {

using testing::TempDir;

// Gap between the two largest logits.
float top1_margin(std::span<const float> row) {
  std::vector<float> sorted(row.begin(), row.end());
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
  return sorted[0] - sorted[1];
}

// Writes cases.json + logits for `ids` into `golden_dir`, from our implementation.
void write_our_case(ErnieModel& model, const std::vector<int32_t>& ids, const std::string& golden_dir) {
  const int64_t vocab = model.config().vocab_size;
  auto cache = model.new_kv_cache();
  const std::vector<float> logits = model.forward(single_sequence_batch(*cache, ids, 0, true));

  std::vector<int> near_ties;
  for (size_t row = 0; row < ids.size(); ++row)
    if (top1_margin({logits.data() + row * vocab, static_cast<size_t>(vocab)}) < 4e-3f)
      near_ties.push_back(static_cast<int>(row));

  // Greedy ids, stopping before a step whose margin is too small to be decided
  // reliably by two fp implementations (the golden set screens such cases out).
  std::vector<int32_t> greedy;
  std::vector<float> last(logits.end() - vocab, logits.end());
  int64_t position = static_cast<int64_t>(ids.size());
  for (int step = 0; step < 8 && top1_margin(last) >= 0.02f; ++step) {
    greedy.push_back(argmax(last));
    last = model.forward(single_sequence_batch(*cache, std::span(&greedy.back(), 1), position++, false));
  }

  std::ofstream(golden_dir + "/case.f32", std::ios::binary)
      .write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
  nlohmann::json cases = {{"vocab_size", vocab},
                          {"cases",
                           {{{"name", "random"},
                             {"input_ids", ids},
                             {"logits_file", "case.f32"},
                             {"logits_positions", "all"},
                             {"shape", {ids.size(), vocab}},
                             {"greedy_ids", greedy},
                             {"near_tie_positions", near_ties}}}}};
  testing::write_file(golden_dir + "/cases.json", cases.dump());
}

struct Shape {
  std::string name;
  SyntheticModelSpec spec;
  CheckpointLayout layout;
  int shards;
};

void PrintTo(const Shape& shape, std::ostream* out) { *out << shape.name; }

class NumpyReferenceTest : public ::testing::TestWithParam<Shape> {};

TEST_P(NumpyReferenceTest, LogitsAgreeWithTheNumpyReference) {
  const Shape& shape = GetParam();
  TempDir temp;
  const std::string model_dir = testing::make_checkpoint(temp, "model", shape.spec, shape.layout, shape.shards);
  const std::string golden_dir = temp.file("ours");
  std::filesystem::create_directories(golden_dir);
  {
    ThreadPool pool(2);
    auto model = ErnieModel::load(model_dir, pool);
    std::vector<int32_t> ids;
    for (int i = 0; i < 70; ++i) ids.push_back(3 + (i * 7919 + 11) % (shape.spec.vocab_size - 3));
    write_our_case(*model, ids, golden_dir);
  }
  const std::string command = testing::python3() + " " + testing::shared_dir() + "/tools/ref_ernie_numpy.py " +
                              model_dir + " --golden " + golden_dir;
  const testing::CommandResult result = testing::run_shell(command);
  EXPECT_EQ(result.exit_code, 0) << command << "\n" << result.output;
  // The reference prints one row per case: name, positions, max |d|, ..., greedy "same".
  EXPECT_THAT(result.output, ::testing::ContainsRegex("random +70 .* same"));
  std::cout << result.output;
}

SyntheticModelSpec small_spec() {
  SyntheticModelSpec spec;
  spec.hidden_size = 96;
  spec.num_layers = 2;
  spec.num_heads = 6;
  spec.num_kv_heads = 3;
  spec.head_dim = 32;
  spec.intermediate_size = 160;
  spec.vocab_size = 512;
  spec.seed = 77;
  return spec;
}

std::vector<Shape> shapes() {
  std::vector<Shape> all;
  SyntheticModelSpec mha = small_spec();  // every q head has its own kv head
  mha.num_kv_heads = mha.num_heads;
  all.push_back({"mha_pt", mha, CheckpointLayout::kTorch, 1});
  SyntheticModelSpec mqa = small_spec();  // one kv head, untied head, Paddle, sharded
  mqa.num_kv_heads = 1;
  mqa.tie_embeddings = false;
  mqa.head_dim = 16;
  all.push_back({"mqa_untied_paddle_sharded", mqa, CheckpointLayout::kPaddle, 3});
  SyntheticModelSpec moe = small_spec();  // top-3 of 6 experts, no shared experts, MoE from layer 2
  moe.num_layers = 4;
  moe.num_experts = 6;
  moe.moe_k = 3;
  moe.moe_intermediate_size = 48;
  moe.moe_start = 2;
  all.push_back({"moe_top3_no_shared_pt", moe, CheckpointLayout::kTorch, 1});
  SyntheticModelSpec moe_shared = moe;  // Paddle, shared experts, MoE layers 1-2 then a dense layer 3, MTP
  moe_shared.num_shared_experts = 1;
  moe_shared.moe_start = 1;
  moe_shared.moe_end = 2;
  moe_shared.with_mtp = true;
  all.push_back({"moe_shared_mtp_paddle", moe_shared, CheckpointLayout::kPaddle, 2});
  return all;
}

INSTANTIATE_TEST_SUITE_P(RandomShapes, NumpyReferenceTest, ::testing::ValuesIn(shapes()),
                         [](const auto& test_info) { return test_info.param.name; });

// FastDeploy's WINT2 release format (docs/quantization.md): tools/make_fastdeploy_wint2.py
// writes the golden Paddle MoE model with its routed experts in WINT2; we load that
// checkpoint as it is. tools/ref_wint2_numpy.py, written from the format description,
// dequantizes the same file into a float checkpoint, and the numpy forward pass runs on
// that: same tolerance as above, greedy ids identical.
TEST(FastDeployWint2Test, LogitsAgreeWithTheNumpyReferenceOnTheDequantizedExperts) {
  TempDir temp;
  const std::string wint2_dir = temp.file("wint2"), float_dir = temp.file("float"), golden_dir = temp.file("ours");
  const std::string tools = std::string(ERNIE_SOURCE_DIR) + "/tools/";
  for (const std::string& command :
       {testing::python3() + " " + tools + "make_fastdeploy_wint2.py " + testing::golden_model_dir("tiny-moe-paddle") +
            " " + wint2_dir + " --w4-end-layer 0 --dense-quant-type bf16",
        testing::python3() + " " + tools + "ref_wint2_numpy.py --checkpoint " + wint2_dir + " " + float_dir}) {
    const testing::CommandResult made = testing::run_shell(command);
    ASSERT_EQ(made.exit_code, 0) << command << "\n" << made.output;
  }
  std::filesystem::create_directories(golden_dir);
  {
    ThreadPool pool(2);
    auto model = ErnieModel::load(wint2_dir, pool);
    const MlpWeights& expert = model->weights().layers[1].moe->experts[3];
    EXPECT_EQ(expert.gate.format, WeightFormat::kWint2);
    EXPECT_EQ(expert.down.format, WeightFormat::kWint2);
    EXPECT_EQ(model->weights().layers[1].moe->shared->gate.format, WeightFormat::kDense) << "shared experts are not WINT2";
    std::vector<int32_t> ids;
    for (int i = 0; i < 70; ++i) ids.push_back(3 + (i * 7919 + 11) % 4000);
    write_our_case(*model, ids, golden_dir);
  }
  const std::string command = testing::python3() + " " + testing::shared_dir() + "/tools/ref_ernie_numpy.py " +
                              float_dir + " --golden " + golden_dir;
  const testing::CommandResult result = testing::run_shell(command);
  EXPECT_EQ(result.exit_code, 0) << command << "\n" << result.output;
  EXPECT_THAT(result.output, ::testing::ContainsRegex("random +70 .* same"));
  std::cout << result.output;
}

}  // namespace
}  // namespace ernie
