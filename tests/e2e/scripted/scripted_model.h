// A model whose answers are written in advance, behind the engine's LanguageModel
// interface, so end-to-end tests can drive the real server (templates, engine, parsers,
// streaming) through answers that random weights would never give: thinking markers,
// tool calls, malformed JSON.
//
// It keeps each sequence's token ids in its KV cache rows, so it sees the whole context
// at every step, whatever the batching, chunking or prefix caching. The answer starts
// after the last occurrence of `answer_start` (the chat template's generation prompt);
// the first script whose `when` strings all occur in the text before it is replayed
// token by token, then an end token. When the engine overrides a token (a thinking
// budget forcing </think>), the reply resumes after that token's place in the script.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "model/language_model.h"
#include "text/tokenizer.h"

namespace ernie::testing {

struct Script {
  std::vector<std::string> when;
  std::vector<int32_t> reply;
};

class ScriptedModel final : public LanguageModel {
 public:
  // step_delay: how long each forward pass takes, so tests can act while requests run.
  ScriptedModel(ModelConfig config, const Tokenizer& tokenizer, std::vector<int32_t> answer_start,
                std::vector<Script> scripts, int32_t end_token,
                std::chrono::milliseconds step_delay = std::chrono::milliseconds(0));

  const ModelConfig& config() const override { return config_; }
  size_t kv_row_bytes() const override { return sizeof(int32_t); }
  std::vector<float>& forward(const ForwardBatch& batch) override;
  // A draft head that knows the script: row t (the token at t + 1) predicts the script's
  // token at t + 2, or a wrong one every `mtp_miss_every`-th row, so speculative decoding
  // sees accepted and rejected drafts. Its rows read the context from layer 0.
  bool has_mtp() const override { return true; }
  std::vector<float>& forward_mtp(const ForwardBatch& batch, std::span<const float> hidden, bool normalize_hidden) override;
  std::span<const float> last_hidden_states() const override { return hidden_; }

 private:
  int32_t next_token(const std::vector<int32_t>& context) const;

  ModelConfig config_;
  const Tokenizer& tokenizer_;
  std::vector<int32_t> answer_start_;
  std::vector<Script> scripts_;
  int32_t end_token_;
  std::chrono::milliseconds step_delay_;
  std::vector<float> logits_;
  std::vector<float> hidden_;  // zeros: the scripted target has no hidden state to speak of
  int64_t mtp_rows_ = 0;
};

}  // namespace ernie::testing
