// Every golden case (shared/golden, reference logits from llama.cpp in fp32, cross-
// checked by an independent numpy implementation) within the stated tolerance, for the
// PT checkpoints and their Paddle twins.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "model/ernie_model.h"
#include "support/test_support.h"

namespace ernie {
namespace {

using testing::golden_model_dir;
using testing::read_f32_file;
using testing::read_file;
using testing::shared_dir;

struct GoldenCheckpoint {
  std::string golden;      // shared/golden/<golden>/cases.json
  std::string checkpoint;  // shared/golden/models/<checkpoint>
};

std::ostream& operator<<(std::ostream& out, const GoldenCheckpoint& value) {
  return out << value.checkpoint << " vs " << value.golden;
}

class GoldenLogitsTest : public ::testing::TestWithParam<GoldenCheckpoint> {};

TEST_P(GoldenLogitsTest, TeacherForcedLogitsAndGreedyIdsMatch) {
  const GoldenCheckpoint param = GetParam();
  const std::string golden_dir = shared_dir() + "/golden/" + param.golden;
  const nlohmann::json cases = nlohmann::json::parse(read_file(golden_dir + "/cases.json"));
  const double tolerance = cases.at("tolerance_max_abs").get<double>();
  ASSERT_EQ(tolerance, 0.002) << "the golden README states 2e-3";
  const int64_t vocab = cases.at("vocab_size").get<int64_t>();

  ThreadPool pool(2);
  auto model = ErnieModel::load(golden_model_dir(param.checkpoint), pool);
  ASSERT_EQ(model->config().vocab_size, vocab);

  for (const auto& test_case : cases.at("cases")) {
    SCOPED_TRACE(test_case.at("name").get<std::string>());
    const auto ids = test_case.at("input_ids").get<std::vector<int32_t>>();
    const auto near_ties = test_case.value("near_tie_positions", std::vector<int>{});
    const std::vector<float> golden = read_f32_file(golden_dir + "/" + test_case.at("logits_file").get<std::string>());
    ASSERT_EQ(golden.size(), ids.size() * static_cast<size_t>(vocab));

    auto cache = model->new_kv_cache();
    const std::vector<float> logits = model->forward(single_sequence_batch(*cache, ids, 0, true));
    ASSERT_EQ(logits.size(), golden.size());

    double max_diff = 0;
    for (size_t i = 0; i < logits.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(logits[i]) - golden[i]));
    EXPECT_LE(max_diff, tolerance);
    for (size_t row = 0; row < ids.size(); ++row) {
      if (std::find(near_ties.begin(), near_ties.end(), static_cast<int>(row)) != near_ties.end()) continue;
      const std::span<const float> ours(logits.data() + row * vocab, static_cast<size_t>(vocab));
      const std::span<const float> theirs(golden.data() + row * vocab, static_cast<size_t>(vocab));
      EXPECT_EQ(argmax(ours), argmax(theirs)) << "top-1 differs at row " << row;
    }

    // Greedy continuation through the KV cache, one token per forward.
    const auto expected_greedy = test_case.at("greedy_ids").get<std::vector<int32_t>>();
    std::vector<int32_t> greedy;
    std::span<const float> last(logits.data() + (ids.size() - 1) * vocab, static_cast<size_t>(vocab));
    std::vector<float> step_logits;
    int64_t position = static_cast<int64_t>(ids.size());
    while (greedy.size() < expected_greedy.size()) {
      greedy.push_back(argmax(last));
      if (greedy.size() == expected_greedy.size()) break;
      step_logits = model->forward(single_sequence_batch(*cache, std::span(&greedy.back(), 1), position++, false));
      last = step_logits;
    }
    EXPECT_EQ(greedy, expected_greedy);
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenLogitsTest,
                         ::testing::Values(GoldenCheckpoint{"tiny-dense", "tiny-dense"},
                                           GoldenCheckpoint{"tiny-dense", "tiny-dense-paddle"},
                                           GoldenCheckpoint{"tiny-moe", "tiny-moe"},
                                           GoldenCheckpoint{"tiny-moe", "tiny-moe-paddle"},
                                           GoldenCheckpoint{"tiny-moe", "tiny-thinking"},
                                           GoldenCheckpoint{"tiny-dense-untied", "tiny-dense-untied"}),
                         [](const auto& test_info) {
                           std::string name = test_info.param.checkpoint;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(GoldenCasesFile, ListsThePaddleTwinsWeTest) {
  // The golden README names the twins that must reproduce each golden; make sure the
  // instantiation above does not silently miss one.
  for (const std::string golden : {"tiny-dense", "tiny-moe", "tiny-dense-untied"}) {
    const nlohmann::json cases = nlohmann::json::parse(read_file(shared_dir() + "/golden/" + golden + "/cases.json"));
    for (const auto& twin : cases.value("same_model_checkpoints", nlohmann::json::array())) {
      const std::string path = twin.get<std::string>();
      const std::string name = path.substr(path.find_last_of('/') + 1);
      EXPECT_TRUE(name == "tiny-dense-paddle" || name == "tiny-moe-paddle" || name == "tiny-thinking")
          << golden << " lists an untested twin " << path;
    }
  }
}

}  // namespace
}  // namespace ernie
