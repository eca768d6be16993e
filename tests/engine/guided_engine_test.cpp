// Structured output in the engine: every output follows its constraint (ended by an end
// token only where the grammar is complete, or cut by max_tokens as a prefix that could
// still become a sentence), in a batch with free requests, with speculative drafts, and
// after the reasoning of a thinking prompt. The random golden model's preferences are
// arbitrary, so the constraint does all the shaping.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "engine/engine.h"
#include "model/ernie_model.h"
#include "structured/constraint.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ernie {
namespace {

using structured::ConstraintSpec;

constexpr int32_t kEos = 2;

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason reason = FinishReason::kAbort;
  std::string error;
};

class GuidedEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pool_ = new ThreadPool(2);
    model_ = ErnieModel::load(testing::golden_model_dir("tiny-moe"), *pool_).release();
    tokenizer_ = new Tokenizer(Tokenizer::load(testing::golden_model_dir("tiny-thinking")));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
    delete pool_;
  }

  static EngineConfig config() {
    EngineConfig config;
    config.block_size = 16;
    config.max_model_len = 512;
    config.max_num_seqs = 16;
    return config;
  }

  static std::vector<int32_t> prompt(int seed) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 12; ++i) ids.push_back(20 + (seed * 7919 + i * 104729) % 4000);
    return ids;
  }

  // Seed 0: greedy; otherwise sampled at temperature 1 with that seed.
  static GenerateRequest request(const std::string& id, const ConstraintSpec& spec, uint64_t seed, int max_tokens) {
    GenerateRequest request{id, prompt(static_cast<int>(seed) + 1), {}, {}};
    request.params.max_tokens = max_tokens;
    request.params.top_p = 1.0f;
    if (seed == 0) request.params.temperature = 0.0f;
    else request.params.seed = seed;
    request.constraint = structured::compile(spec);
    return request;
  }

  static std::map<std::string, Outcome> run(Engine& engine, std::vector<GenerateRequest> requests) {
    for (auto& r : requests) engine.add_request(std::move(r));
    std::map<std::string, Outcome> outcomes;
    for (int steps = 0; engine.has_work(); ++steps) {
      if (steps > 20000) ADD_FAILURE() << "the engine does not finish";
      for (RequestOutput& output : engine.step()) {
        Outcome& outcome = outcomes[output.request_id];
        outcome.tokens.insert(outcome.tokens.end(), output.token_ids.begin(), output.token_ids.end());
        outcome.text += output.text;
        if (output.finished()) {
          outcome.reason = *output.finish_reason;
          outcome.error = output.error;
        }
      }
    }
    return outcomes;
  }

  // A finished output is a sentence of the constraint; one cut by the length limit is a
  // prefix of one.
  static void expect_follows(const ConstraintSpec& spec, const Outcome& outcome, const std::string& id) {
    SCOPED_TRACE(id + ": " + outcome.text);
    ASSERT_TRUE(outcome.error.empty()) << outcome.error;
    structured::GrammarMatcher matcher(structured::compile_constraint(spec));
    const structured::MatchState state = matcher.step(matcher.start(), outcome.text);
    if (outcome.reason == FinishReason::kStop) {
      EXPECT_TRUE(state.accepting);
      EXPECT_EQ(outcome.tokens.back(), kEos);
    } else {
      EXPECT_EQ(outcome.reason, FinishReason::kLength);
      EXPECT_FALSE(state.dead()) << "a cut output must be a sentence or able to continue";
    }
  }

  static std::vector<ConstraintSpec> specs() {
    ConstraintSpec schema{.kind = ConstraintSpec::Kind::kJsonSchema,
                          .text = R"({"type": "object", "properties": {
                                      "name": {"type": "string", "maxLength": 6},
                                      "age": {"type": "integer"},
                                      "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "maxItems": 2}},
                                    "required": ["name", "age"]})",
                          .any_whitespace = false};
    ConstraintSpec regex{.kind = ConstraintSpec::Kind::kRegex, .text = R"([a-z]{2,5}@[a-z]{2,4}\.(com|org))"};
    ConstraintSpec choice{.kind = ConstraintSpec::Kind::kChoice, .choices = {"yes", "no", "maybe not"}};
    ConstraintSpec grammar{.kind = ConstraintSpec::Kind::kGrammar,
                           .text = "root ::= \"(\" num (\"+\" num)* \")\"\nnum ::= [1-9] [0-9]?"};
    return {schema, regex, choice, grammar};
  }

  static ThreadPool* pool_;
  static ErnieModel* model_;
  static Tokenizer* tokenizer_;
};

ThreadPool* GuidedEngineTest::pool_ = nullptr;
ErnieModel* GuidedEngineTest::model_ = nullptr;
Tokenizer* GuidedEngineTest::tokenizer_ = nullptr;

TEST_F(GuidedEngineTest, EveryOutputFollowsItsConstraintInABatchWithFreeRequests) {
  Engine engine(*model_, *tokenizer_, config(), 128, {kEos});
  std::vector<GenerateRequest> requests;
  std::map<std::string, ConstraintSpec> by_id;
  const std::vector<ConstraintSpec> all = specs();
  for (size_t k = 0; k < all.size(); ++k) {
    for (uint64_t seed : {0, 1, 2, 3}) {
      const std::string id = "c" + std::to_string(k) + "s" + std::to_string(seed);
      requests.push_back(request(id, all[k], seed, 60));
      by_id[id] = all[k];
    }
  }
  GenerateRequest free{"free", prompt(9), {}, {}};
  free.params.max_tokens = 20;
  requests.push_back(free);
  const auto outcomes = run(engine, requests);
  int stopped = 0;
  for (const auto& [id, spec] : by_id) {
    expect_follows(spec, outcomes.at(id), id);
    stopped += outcomes.at(id).reason == FinishReason::kStop ? 1 : 0;
  }
  // The choices and the regex always finish within 60 tokens: the grammar runs out.
  EXPECT_GE(stopped, 8);
  EXPECT_EQ(outcomes.at("free").tokens.size(), 20u);
}

TEST_F(GuidedEngineTest, EndsAtTheGrammarsEndEvenWhenEndTokensAreIgnored) {
  Engine engine(*model_, *tokenizer_, config(), 64, {kEos});
  GenerateRequest r = request("r", specs()[2], 0, 50);
  r.params.ignore_eos = true;
  const Outcome outcome = run(engine, {r}).at("r");
  expect_follows(specs()[2], outcome, "r");
  EXPECT_EQ(outcome.reason, FinishReason::kStop);
}

TEST_F(GuidedEngineTest, MaxTokensInsideTheStructureEndsWithLength) {
  Engine engine(*model_, *tokenizer_, config(), 64, {kEos});
  const Outcome outcome = run(engine, {request("r", specs()[0], 1, 3)}).at("r");
  EXPECT_EQ(outcome.reason, FinishReason::kLength);
  expect_follows(specs()[0], outcome, "r");
}

TEST_F(GuidedEngineTest, SpeculativeDraftsChangeNothing) {
  EngineConfig speculative = config();
  speculative.speculative.method = SpeculativeMethod::kNgram;
  speculative.speculative.num_speculative_tokens = 3;
  speculative.speculative.min_ngram_size = 1;
  speculative.speculative.adaptive = false;
  // Repetitive grammars, so that prompt lookup proposes drafts the grammar allows.
  ConstraintSpec digits{.kind = ConstraintSpec::Kind::kRegex, .text = "(12|34|56){10,20}"};
  std::vector<GenerateRequest> requests;
  for (uint64_t seed : {0, 1, 2}) {
    requests.push_back(request("d" + std::to_string(seed), digits, seed, 40));
    requests.push_back(request("s" + std::to_string(seed), specs()[0], seed, 40));
  }
  Engine plain_engine(*model_, *tokenizer_, config(), 128, {kEos});
  Engine drafting_engine(*model_, *tokenizer_, speculative, 128, {kEos});
  const auto plain = run(plain_engine, requests);
  const auto drafted = run(drafting_engine, requests);
  for (const auto& [id, outcome] : plain) {
    EXPECT_EQ(drafted.at(id).tokens, outcome.tokens) << id;
    expect_follows(id[0] == 'd' ? digits : specs()[0], drafted.at(id), id);
  }
  EXPECT_GT(drafting_engine.stats().spec_accepted_tokens, 0);
}

TEST_F(GuidedEngineTest, AThinkingPromptIsConstrainedOnlyAfterItsReasoning) {
  constexpr int32_t kThinkStart = 13, kThinkEnd = 14;
  Engine engine(*model_, *tokenizer_, config(), 64, {kEos});
  std::vector<int32_t> ids = prompt(4);
  ids.push_back(kThinkStart);
  GenerateRequest r = request("r", specs()[2], 0, 30);
  r.prompt = ids;
  r.params.reasoning_max_tokens = 4;  // the budget forces </think> after four free tokens
  r.constrain_after_reasoning = true;
  r.visible_special_tokens = {kThinkEnd};
  const Outcome outcome = run(engine, {r}).at("r");
  const size_t end = outcome.text.find("</think>");
  ASSERT_NE(end, std::string::npos) << outcome.text;
  Outcome answer = outcome;
  answer.text = outcome.text.substr(end + 8);
  expect_follows(specs()[2], answer, "r");
  EXPECT_EQ(outcome.reason, FinishReason::kStop);
}

TEST_F(GuidedEngineTest, ManyDifferentConstraintsComeAndGo) {
  Engine engine(*model_, *tokenizer_, config(), 128, {kEos});
  // More constraints than the engine keeps after their requests end.
  for (size_t round = 0; round < 3; ++round) {
    std::vector<GenerateRequest> requests;
    std::vector<ConstraintSpec> used;
    for (size_t k = 0; k < GuidedDecoding::kKeptGrammars / 2 + 2; ++k) {
      ConstraintSpec spec{.kind = ConstraintSpec::Kind::kChoice,
                          .choices = {"v" + std::to_string(round * 100 + k), "w" + std::to_string(k)}};
      used.push_back(spec);
      requests.push_back(request("r" + std::to_string(k), spec, k % 3, 10));
    }
    const auto outcomes = run(engine, requests);
    for (size_t k = 0; k < used.size(); ++k) {
      const Outcome& outcome = outcomes.at("r" + std::to_string(k));
      expect_follows(used[k], outcome, "r" + std::to_string(k));
      EXPECT_EQ(outcome.reason, FinishReason::kStop);
    }
  }
}

}  // namespace
}  // namespace ernie
