// The MTP head (model spec §4) against an independent float64 numpy implementation
// (tools/ref_mtp_numpy.py, written from the spec, not from our code): teacher-forced, row
// t sees the main model's hidden state at t and the token at t + 1 and predicts the one
// at t + 2. Both hidden inputs (before the final norm, as ERNIE's training code; after
// it, as FastDeploy) and both checkpoint layouts; the wrong input must not pass.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include "model/ernie_model.h"
#include "support/test_support.h"

namespace ernie {
namespace {

using testing::TempDir;

// Our MTP logits for rows 0..T-2, with the main model's hidden states of the same ids.
std::vector<float> our_mtp_logits(ErnieModel& model, const std::vector<int32_t>& ids, bool normalize_hidden) {
  auto cache = model.new_kv_cache();
  model.forward(single_sequence_batch(*cache, ids, 0, false));
  const int64_t h = model.config().hidden_size;
  const std::span<const float> hidden = model.last_hidden_states();
  const std::vector<float> inputs(hidden.begin(), hidden.begin() + static_cast<int64_t>(ids.size() - 1) * h);
  const std::vector<int32_t> next(ids.begin() + 1, ids.end());
  return model.forward_mtp(single_sequence_batch(*cache, next, 0, true), inputs, normalize_hidden);
}

class MtpReferenceTest : public ::testing::TestWithParam<CheckpointLayout> {};

TEST_P(MtpReferenceTest, LogitsAgreeWithTheNumpyReference) {
  SyntheticModelSpec spec;
  spec.hidden_size = 96;
  spec.num_layers = 3;
  spec.num_heads = 6;
  spec.num_kv_heads = 2;
  spec.head_dim = 32;
  spec.intermediate_size = 160;
  spec.vocab_size = 512;
  spec.num_experts = 4;
  spec.moe_k = 2;
  spec.moe_intermediate_size = 48;
  spec.moe_start = 1;
  spec.with_mtp = true;
  spec.seed = 91;
  TempDir temp;
  const std::string model_dir = testing::make_checkpoint(temp, "model", spec, GetParam(), 1);
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(3 + (i * 7919 + 5) % (spec.vocab_size - 3));
  std::string id_list;
  for (int32_t id : ids) id_list += (id_list.empty() ? "" : ",") + std::to_string(id);

  ThreadPool pool(2);
  auto model = ErnieModel::load(model_dir, pool);
  ASSERT_TRUE(model->has_mtp());
  std::map<bool, std::vector<float>> theirs;
  for (const bool normed : {false, true}) {
    const std::string out = temp.file(normed ? "normed.f32" : "prenorm.f32");
    const std::string command = testing::python3() + " " + std::string(ERNIE_SOURCE_DIR) + "/tools/ref_mtp_numpy.py --model " +
                                model_dir + " --ids " + id_list + " --hidden " + (normed ? "normed" : "prenorm") +
                                " --out " + out;
    const testing::CommandResult result = testing::run_shell(command);
    ASSERT_EQ(result.exit_code, 0) << command << "\n" << result.output;
    theirs[normed] = testing::read_f32_file(out);
  }
  for (const bool normed : {false, true}) {
    SCOPED_TRACE(normed ? "final-normed hidden input" : "pre-norm hidden input");
    const std::vector<float> ours = our_mtp_logits(*model, ids, normed);
    ASSERT_EQ(ours.size(), (ids.size() - 1) * static_cast<size_t>(spec.vocab_size));
    EXPECT_LE(testing::max_abs_difference(ours, theirs[normed]), 2e-3);
    EXPECT_GT(testing::max_abs_difference(ours, theirs[!normed]), 0.05) << "the two inputs must be told apart";
  }
  // Drafting projects through an int8 copy of the head: close, and the same argmax on
  // nearly every row (a different one only costs a rejected draft).
  model->prepare_mtp();
  const std::vector<float> drafted = our_mtp_logits(*model, ids, false);
  EXPECT_LE(testing::max_abs_difference(drafted, theirs[false]), 0.25);
  int same = 0;
  const auto rows = static_cast<int>(ids.size() - 1);
  for (int row = 0; row < rows; ++row) {
    const auto begin = static_cast<std::ptrdiff_t>(row) * spec.vocab_size;
    same += std::max_element(drafted.begin() + begin, drafted.begin() + begin + spec.vocab_size) - drafted.begin() ==
            std::max_element(theirs[false].begin() + begin, theirs[false].begin() + begin + spec.vocab_size) - theirs[false].begin();
  }
  EXPECT_GE(same, rows * 9 / 10);
}

INSTANTIATE_TEST_SUITE_P(Layouts, MtpReferenceTest,
                         ::testing::Values(CheckpointLayout::kTorch, CheckpointLayout::kPaddle),
                         [](const auto& test_info) { return test_info.param == CheckpointLayout::kTorch ? "pt" : "paddle"; });

}  // namespace
}  // namespace ernie
