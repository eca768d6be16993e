// Tensor and expert parallelism under mpirun (tests/CMakeLists.txt runs this binary with
// 2 and 4 ranks): every rank loads its shard of a golden checkpoint; rank 0 drives the
// forward passes through TensorParallelModel while the others run the worker loop, as in
// `ernie serve`. Rank 0 then holds the logits to the golden reference (llama.cpp in fp32,
// tolerance 2e-3, as golden_logits_test) and the greedy continuation to the golden ids;
// quantized shards are held to the same quantization in one process. Every rank runs the
// same tests in the same order, so their collective operations line up.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "dist/mpi_communicator.h"
#include "dist/tensor_parallel.h"
#include "engine/kv_cache_manager.h"
#include "engine/sampler.h"
#include "model/ernie_model.h"
#include "text/tokenizer.h"
#include "support/test_support.h"

namespace ernie {
namespace {

MpiCommunicator* g_communicator = nullptr;  // made in main, before any test

struct Case {
  std::string golden;      // shared/golden/<golden>/cases.json
  std::string checkpoint;  // shared/golden/models/<checkpoint>
  bool expert_parallel = false;
};

std::ostream& operator<<(std::ostream& out, const Case& c) {
  return out << c.checkpoint << (c.expert_parallel ? " expert-parallel" : "");
}

constexpr int kBlockSize = 16;
constexpr int kBlocks = 64;

// Rank 0: teacher-forced logits of `ids` and a greedy continuation of `steps` tokens,
// through `model` over a paged cache.
struct Outputs {
  std::vector<float> logits;
  std::vector<int32_t> greedy;
};
Outputs run(LanguageModel& model, const std::vector<int32_t>& ids, size_t steps, int64_t vocab) {
  KvBlockPool pool(model.config().num_hidden_layers, model.kv_row_bytes(), kBlockSize, kBlocks);
  std::vector<BlockId> table;
  for (int b = 0; b < kBlocks; ++b) table.push_back(*pool.allocate());
  PagedKvCache cache(pool, table);
  Outputs result;
  result.logits = model.forward(single_sequence_batch(cache, ids, 0, true));
  std::vector<float> last(result.logits.end() - vocab, result.logits.end());
  int64_t position = static_cast<int64_t>(ids.size());
  while (result.greedy.size() < steps) {
    result.greedy.push_back(argmax(last));
    if (result.greedy.size() == steps) break;
    last = model.forward(single_sequence_batch(cache, std::span(&result.greedy.back(), 1), position++, false));
  }
  return result;
}

class TensorParallelTest : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallelTest, ShardedLogitsAndGreedyIdsMatchTheReference) {
  const Case param = GetParam();
  Communicator& communicator = *g_communicator;
  const std::string golden_dir = testing::shared_dir() + "/golden/" + param.golden;
  const nlohmann::json cases = nlohmann::json::parse(testing::read_file(golden_dir + "/cases.json"));
  const double tolerance = cases.at("tolerance_max_abs").get<double>();
  const int64_t vocab = cases.at("vocab_size").get<int64_t>();
  const std::string dir = testing::golden_model_dir(param.checkpoint);

  ThreadPool pool(1);
  const ShardPlan shard{communicator.rank(), communicator.size(), param.expert_parallel};
  auto model = ErnieModel::load(dir, pool, nullptr, {}, "", false, shard, &communicator);
  check_ranks_agree(communicator, rank_fingerprint(*model, ""), "localhost");
  if (communicator.rank() != 0) {
    run_tensor_parallel_worker(*model, communicator, model->config().num_hidden_layers, kBlockSize);
    return;
  }
  // Rank 0 holds only its share of the KV heads.
  EXPECT_LT(model->kv_row_bytes(), load_model_config(dir).kv_width() * sizeof(float));
  TensorParallelModel sharded(*model, communicator);
  sharded.share_kv_blocks(kBlocks);
  for (const auto& test_case : cases.at("cases")) {
    SCOPED_TRACE(test_case.at("name").get<std::string>());
    const auto ids = test_case.at("input_ids").get<std::vector<int32_t>>();
    const auto expected_greedy = test_case.at("greedy_ids").get<std::vector<int32_t>>();
    const auto near_ties = test_case.value("near_tie_positions", std::vector<int>{});
    const std::vector<float> golden =
        testing::read_f32_file(golden_dir + "/" + test_case.at("logits_file").get<std::string>());
    const Outputs ours = run(sharded, ids, expected_greedy.size(), vocab);
    ASSERT_EQ(ours.logits.size(), golden.size());
    double max_diff = 0;
    for (size_t i = 0; i < golden.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(ours.logits[i]) - golden[i]));
    EXPECT_LE(max_diff, tolerance);
    for (size_t row = 0; row < ids.size(); ++row) {
      if (std::find(near_ties.begin(), near_ties.end(), static_cast<int>(row)) != near_ties.end()) continue;
      EXPECT_EQ(argmax(std::span(ours.logits.data() + row * vocab, static_cast<size_t>(vocab))),
                argmax(std::span(golden.data() + row * vocab, static_cast<size_t>(vocab))))
          << "top-1 differs at row " << row;
    }
    EXPECT_EQ(ours.greedy, expected_greedy);
  }
  sharded.stop_workers();
}

INSTANTIATE_TEST_SUITE_P(
    GoldenCheckpoints, TensorParallelTest,
    ::testing::Values(Case{"tiny-dense", "tiny-dense"}, Case{"tiny-dense", "tiny-dense-paddle"},
                      Case{"tiny-dense-untied", "tiny-dense-untied"}, Case{"tiny-moe", "tiny-moe"},
                      Case{"tiny-moe", "tiny-moe-paddle"}, Case{"tiny-moe", "tiny-moe", true},
                      Case{"tiny-moe", "tiny-moe-paddle", true}));

// Quantized shards, on the trained models that ship. Activations are rounded to int8 per
// block of 32, so a partial sum added in another order (the all-reduce) can move one code
// by a step, and the logits move with it: a quantized shard cannot be bit-identical to
// one process. It is held to the same quantization in one process: a quarter of the rows
// of logits or more within 1e-4 (float rounding), none off by more than 0.25, and the
// same best token wherever the reference's leads by more than twice the largest
// difference. The unquantized shard ("none") is held to 2e-3 and the same greedy tokens.
struct QuantizedCase {
  std::string model;  // models/<model>
  std::string quantization;
  bool expert_parallel = false;
};
std::ostream& operator<<(std::ostream& out, const QuantizedCase& c) {
  return out << c.model << " " << c.quantization << (c.expert_parallel ? " expert-parallel" : "");
}
class QuantizedTensorParallelTest : public ::testing::TestWithParam<QuantizedCase> {};

TEST_P(QuantizedTensorParallelTest, ShardedLogitsMatchOneProcess) {
  const QuantizedCase param = GetParam();
  Communicator& communicator = *g_communicator;
  const std::string dir = std::string(ERNIE_SOURCE_DIR) + "/models/" + param.model;
  const ModelConfig config = load_model_config(dir);
  // Integer formats need 32-aligned input slices: the trained MoE's 192-wide experts
  // (and shared expert, split even under expert parallelism) over four ranks leave 48.
  const auto aligned = [&](int64_t width) { return width / communicator.size() % 32 == 0; };
  if (config.moe && (!aligned(static_cast<int64_t>(config.moe->intermediate_size) * config.moe->num_shared_experts) ||
                     (!param.expert_parallel && !aligned(config.moe->intermediate_size))))
    GTEST_SKIP() << "the experts' width over " << communicator.size() << " ranks is not a multiple of 32 inputs";
  ThreadPool pool(1);
  const QuantizationPlan quantization = parse_quantization(param.quantization, config);
  const ShardPlan shard{communicator.rank(), communicator.size(), param.expert_parallel};
  auto model = ErnieModel::load(dir, pool, nullptr, quantization, "", false, shard, &communicator);
  check_ranks_agree(communicator, rank_fingerprint(*model, param.quantization), "localhost");
  if (communicator.rank() != 0) {
    run_tensor_parallel_worker(*model, communicator, config.num_hidden_layers, kBlockSize);
    return;
  }
  TensorParallelModel sharded(*model, communicator);
  sharded.share_kv_blocks(kBlocks);
  auto whole = ErnieModel::load(dir, pool, nullptr, quantization);
  const Tokenizer tokenizer = Tokenizer::load(dir);
  const std::vector<int32_t> ids =
      tokenizer.encode("In the beginning God created the heaven and the earth. And the earth was without form, and void");
  const int64_t vocab = config.vocab_size;
  const Outputs ours = run(sharded, ids, 24, vocab);
  const Outputs reference = run(*whole, ids, 24, vocab);
  double max_diff = 0;
  for (size_t i = 0; i < reference.logits.size(); ++i)
    max_diff = std::max(max_diff, std::fabs(double(ours.logits[i]) - reference.logits[i]));
  if (!quantization.quantizes_weights()) {
    EXPECT_LE(max_diff, 2e-3);
    EXPECT_EQ(ours.greedy, reference.greedy);
  } else {
    // Rows agree to float rounding except those where a code moved (measured over two
    // ranks: 6 of 20 rows for the dense model at wint8, 12 of 20 for the MoE at wint4,
    // the others within 3e-6). A wrongly sharded weight would move every row.
    int exact_rows = 0;
    for (size_t row = 0; row < ids.size(); ++row) {
      double row_diff = 0;
      for (int64_t i = 0; i < vocab; ++i)
        row_diff = std::max(row_diff, std::fabs(double(ours.logits[row * vocab + i]) - reference.logits[row * vocab + i]));
      exact_rows += row_diff <= 1e-4 ? 1 : 0;
    }
    EXPECT_GE(exact_rows, static_cast<int>(ids.size()) / 4) << "rows within 1e-4 of one process";
    EXPECT_LE(max_diff, 0.25) << "a moved code changes a logit by far less";
    int compared = 0;
    for (size_t row = 0; row < ids.size(); ++row) {
      const std::span<const float> theirs(reference.logits.data() + row * vocab, static_cast<size_t>(vocab));
      std::vector<float> top(theirs.begin(), theirs.end());
      std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
      if (top[0] - top[1] <= 2 * max_diff) continue;
      ++compared;
      EXPECT_EQ(argmax(std::span(ours.logits.data() + row * vocab, static_cast<size_t>(vocab))), argmax(theirs)) << row;
    }
    EXPECT_GE(compared, static_cast<int>(ids.size()) / 2) << "too few rows lead clearly enough to compare";
  }
  sharded.stop_workers();
}

INSTANTIATE_TEST_SUITE_P(ShippedModels, QuantizedTensorParallelTest,
                         ::testing::Values(QuantizedCase{"ernie-4.5-kjv-dense", "none"}, QuantizedCase{"ernie-4.5-kjv-dense", "wint4"},
                                           QuantizedCase{"ernie-4.5-kjv-dense", "wint8"},
                                           QuantizedCase{"ernie-4.5-kjv-moe", "wint4"}, QuantizedCase{"ernie-4.5-kjv-moe", "none"}, QuantizedCase{"ernie-4.5-kjv-moe", "wint8"},
                                           QuantizedCase{"ernie-4.5-kjv-moe", "wint8", true}, QuantizedCase{"ernie-4.5-kjv-moe", "wint4", true}));

TEST(TensorParallelSetupTest, AModelThatDoesNotDivideIsRefusedNamingWhat) {
  ModelConfig config = load_model_config(testing::golden_model_dir("tiny-moe"));
  config.num_attention_heads = 6;
  EXPECT_NE(testing::error_message([&] { shard_shape(config, {0, 4, false}); }).find("num_attention_heads (6)"),
            std::string::npos);
  config.num_attention_heads = 8;
  config.num_key_value_heads = 3;
  EXPECT_NE(testing::error_message([&] { shard_shape(config, {0, 4, false}); }).find("num_key_value_heads (3)"),
            std::string::npos);
  config.num_key_value_heads = 2;
  config.moe->num_experts = 6;
  EXPECT_NE(testing::error_message([&] { shard_shape(config, {0, 4, true}); }).find("moe_num_experts (6)"),
            std::string::npos);
  // Two KV heads over four ranks: each is kept by the two ranks whose query heads read it.
  config.moe->num_experts = 8;
  for (int rank = 0; rank < 4; ++rank) {
    const ShardShape shape = shard_shape(config, {rank, 4, false});
    EXPECT_EQ(shape.kv_heads, 1);
    EXPECT_EQ(shape.first_kv_head, rank / 2);
    EXPECT_EQ(shape.heads, 2);
    EXPECT_EQ(shape.first_head * config.num_key_value_heads / config.num_attention_heads, shape.first_kv_head);
  }
}

}  // namespace
}  // namespace ernie

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ernie::MpiCommunicator communicator;
  ernie::g_communicator = &communicator;
  // Only rank 0 reports; the others' output would interleave with it.
  if (communicator.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}
