// A row's logits must not depend, not even in the last bit, on what else is in the
// packed batch: seeded sampling has to draw the same tokens for a request whether it
// runs alone or beside fifty others. The neighbours here change every expert's row
// count from step to step (MoE experts see 0, 1, 2..4 and many rows depending on what
// the other tokens route to them), and the whole batch goes from 1 row to dozens.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/engine.h"
#include "kernels/matmul.h"
#include "model/ernie_model.h"
#include "model/quantization.h"
#include "support/test_support.h"
#include "text/tokenizer.h"

namespace ernie {
namespace {

std::vector<int32_t> ids_for(int seed, int length) { return testing::synthetic_token_ids(seed, length); }

struct Variant {
  std::string model;
  std::string quantization;  // --quantization value, "" for the checkpoint's bf16
  bool bf16_products = false;  // kernels/matmul.h (where the CPU has AVX512-BF16)
};

std::string variant_name(const ::testing::TestParamInfo<Variant>& info) {
  std::string name = info.param.model + "_" + (info.param.quantization.empty() ? "bf16" : info.param.quantization) +
                     (info.param.bf16_products ? "_products" : "");
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

class BatchInvarianceTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    set_bf16_products(GetParam().bf16_products);
    const std::string dir = testing::golden_model_dir(GetParam().model);
    model_ = ErnieModel::load(dir, pool_, nullptr, parse_quantization(GetParam().quantization, load_model_config(dir)));
  }
  void TearDown() override { set_bf16_products(false); }
  ThreadPool pool_{2};
  std::unique_ptr<ErnieModel> model_;
};

// A neighbour sequence: its tokens and how many of them its cache holds.
struct Neighbour {
  std::unique_ptr<KvCache> cache;
  std::vector<int32_t> ids;
  int32_t done = 0;
};

TEST_P(BatchInvarianceTest, RowLogitsAreBitwiseTheSameAloneAndPacked) {
  const int64_t vocab = model_->config().vocab_size;
  const std::vector<int32_t> target = ids_for(11, 60);
  constexpr int32_t kPrompt = 13;
  const int steps = static_cast<int>(target.size()) - kPrompt + 1;

  // Alone: the prompt in one call, then one token per call.
  std::vector<std::vector<float>> expected;
  {
    auto cache = model_->new_kv_cache();
    const std::vector<float>& logits =
        model_->forward(single_sequence_batch(*cache, std::span(target).first(kPrompt), 0, false));
    expected.emplace_back(logits.begin(), logits.end());
    for (int32_t p = kPrompt; p < static_cast<int32_t>(target.size()); ++p) {
      const std::vector<float>& next = model_->forward(single_sequence_batch(*cache, std::span(target).subspan(p, 1), p, false));
      expected.emplace_back(next.begin(), next.end());
    }
  }
  ASSERT_EQ(static_cast<int>(expected.size()), steps);

  // Packed: the same calls for the target, each among neighbours that decode (1 row) or
  // prefill chunks of varying length, with the target first, in the middle or last.
  std::vector<Neighbour> neighbours;
  for (int i = 0; i < 24; ++i) neighbours.push_back({model_->new_kv_cache(), ids_for(100 + i, 300), 0});
  auto cache = model_->new_kv_cache();
  int32_t position = 0;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    ForwardBatch batch;
    const auto add = [&](KvCache& kv, std::span<const int32_t> tokens, int32_t start) {
      batch.sequences.push_back({&kv, start, static_cast<int32_t>(batch.tokens.size()), static_cast<int32_t>(tokens.size())});
      batch.tokens.insert(batch.tokens.end(), tokens.begin(), tokens.end());
    };
    // 0 to 23 neighbours this step; some prefill up to 37 tokens, most decode.
    const int active = (step * 7) % 25;
    const int target_at = step % 3 == 0 ? 0 : step % 3 == 1 ? active / 2 : active;
    int32_t target_row = -1;
    for (int i = 0; i <= active; ++i) {
      if (i == target_at) {
        const int32_t count = step == 0 ? kPrompt : 1;
        add(*cache, std::span(target).subspan(static_cast<size_t>(position), static_cast<size_t>(count)), position);
        position += count;
        target_row = static_cast<int32_t>(batch.tokens.size()) - 1;
      }
      if (i == active) break;
      Neighbour& other = neighbours[static_cast<size_t>((i + step) % neighbours.size())];
      const int32_t chunk = (i + step) % 4 == 0 ? 1 + (i * 5 + step * 3) % 37 : 1;
      if (other.done + chunk > static_cast<int32_t>(other.ids.size())) continue;
      add(*other.cache, std::span(other.ids).subspan(static_cast<size_t>(other.done), static_cast<size_t>(chunk)),
          other.done);
      other.done += chunk;
    }
    batch.logit_rows = {target_row};
    if (batch.tokens.size() > 1) batch.logit_rows.push_back(0);  // another row's logits too
    const std::vector<float>& logits = model_->forward(batch);
    ASSERT_EQ(logits.size(), batch.logit_rows.size() * static_cast<size_t>(vocab));
    const std::vector<float>& want = expected[static_cast<size_t>(step)];
    if (std::memcmp(logits.data(), want.data(), want.size() * sizeof(float)) != 0) {
      float worst = 0;
      for (size_t j = 0; j < want.size(); ++j) worst = std::max(worst, std::abs(logits[j] - want[j]));
      FAIL() << "the target's logits differ from its run alone in a batch of " << batch.tokens.size()
             << " rows; max |difference| " << worst;
    }
  }
}

// Nor on how many threads the pool has. Where a MoE model decodes with at least as many
// active experts as threads (here: one token, top-2 experts, two threads), each thread
// runs whole experts on its own (ErnieModel::experts_on_threads); on one thread they run
// one after another, each over the pool. Both must give the same bits.
TEST_P(BatchInvarianceTest, LogitsAreBitwiseTheSameOnOneThreadAndOnTwo) {
  ThreadPool one_thread(1);
  const std::string dir = testing::golden_model_dir(GetParam().model);
  auto alone = ErnieModel::load(dir, one_thread, nullptr, parse_quantization(GetParam().quantization, load_model_config(dir)));
  const std::vector<int32_t> ids = ids_for(5, 40);
  constexpr int32_t kPrompt = 9;
  auto cache = model_->new_kv_cache();
  auto alone_cache = alone->new_kv_cache();
  for (int32_t p = 0; p < static_cast<int32_t>(ids.size());) {
    const int32_t count = p == 0 ? kPrompt : 1;  // a prompt, then decode steps
    SCOPED_TRACE("position " + std::to_string(p));
    const auto tokens = std::span(ids).subspan(static_cast<size_t>(p), static_cast<size_t>(count));
    const std::vector<float> two = model_->forward(single_sequence_batch(*cache, tokens, p, false));
    const std::vector<float>& one = alone->forward(single_sequence_batch(*alone_cache, tokens, p, false));
    ASSERT_EQ(one.size(), two.size());
    ASSERT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0)
        << "the logits on one thread differ from those on two";
    p += count;
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, BatchInvarianceTest,
                         ::testing::Values(Variant{"tiny-moe", ""}, Variant{"tiny-moe", "wint8"},
                                           Variant{"tiny-moe", "wint4"}, Variant{"tiny-moe", "block_wise_fp8"},
                                           Variant{"tiny-dense", ""}, Variant{"tiny-dense", "wint8"},
                                           Variant{"tiny-dense", "block_wise_fp8"}, Variant{"tiny-moe", "", true},
                                           Variant{"tiny-dense", "", true}),
                         variant_name);

// The engine's view of the same promise: a seeded temperature-1 request draws the same
// tokens with the same logprobs alone and beside 40 others (prefilling and decoding,
// greedy and sampled) that share its steps.
TEST(BatchInvarianceEngineTest, SeededSamplingIsTheSameAloneAndBesideFortyOthers) {
  ThreadPool pool(2);
  const std::string dir = testing::golden_model_dir("tiny-moe");
  auto model = ErnieModel::load(dir, pool);
  const Tokenizer tokenizer = Tokenizer::load(dir);
  EngineConfig config;
  config.block_size = 16;
  config.max_model_len = 256;
  config.max_num_seqs = 48;
  config.max_num_batched_tokens = 128;
  config.prefix_caching = false;

  const auto sampled = [](const std::string& id, std::vector<int32_t> prompt, uint64_t seed, int max_tokens) {
    GenerateRequest request{id, std::move(prompt), {}, {}};
    request.params.temperature = 1.0f;
    request.params.seed = seed;
    request.params.max_tokens = max_tokens;
    request.params.ignore_eos = true;
    request.params.logprobs = 0;
    return request;
  };
  const auto run = [&](std::vector<GenerateRequest> requests) {
    Engine engine(*model, tokenizer, config, 400, std::vector<int32_t>{2});
    for (auto& request : requests) engine.add_request(std::move(request));
    std::vector<SampledToken> target;
    for (int steps = 0; engine.has_work(); ++steps) {
      if (steps > 10000) ADD_FAILURE() << "engine does not finish";
      for (RequestOutput& output : engine.step())
        if (output.request_id == "target") target.insert(target.end(), output.logprobs.begin(), output.logprobs.end());
    }
    return target;
  };

  const GenerateRequest target = sampled("target", ids_for(5, 9), 1234, 60);
  const std::vector<SampledToken> alone = run({target});
  ASSERT_EQ(alone.size(), 60u);

  std::vector<GenerateRequest> crowd;
  for (int i = 0; i < 40; ++i) {
    GenerateRequest other = sampled("other" + std::to_string(i), ids_for(200 + i, 1 + (i * 13) % 70), 77 + i, 5 + (i * 7) % 50);
    if (i % 3 == 0) other.params.temperature = 0.0f;
    crowd.push_back(std::move(other));
    if (i == 20) crowd.push_back(target);
  }
  const std::vector<SampledToken> beside = run(std::move(crowd));
  ASSERT_EQ(beside.size(), alone.size());
  size_t first_token = alone.size(), first_logprob = alone.size();
  for (size_t i = alone.size(); i-- > 0;) {
    if (beside[i].token != alone[i].token) first_token = i;
    if (beside[i].logprob != alone[i].logprob) first_logprob = i;  // bitwise: the same float or not
  }
  EXPECT_EQ(first_token, alone.size()) << "the tokens diverge at this index";
  EXPECT_EQ(first_logprob, alone.size()) << "the logprobs differ first at this index";
}

}  // namespace
}  // namespace ernie
