#include "scripted/scripted_model.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "util/error.h"

namespace ernie::testing {
namespace {
constexpr int64_t kMtpMissEvery = 4;  // every fourth draft is wrong on purpose
}  // namespace

ScriptedModel::ScriptedModel(ModelConfig config, const Tokenizer& tokenizer, std::vector<int32_t> answer_start,
                             std::vector<Script> scripts, int32_t end_token, std::chrono::milliseconds step_delay)
    : config_(std::move(config)),
      tokenizer_(tokenizer),
      answer_start_(std::move(answer_start)),
      scripts_(std::move(scripts)),
      end_token_(end_token),
      step_delay_(step_delay) {}

int32_t ScriptedModel::next_token(const std::vector<int32_t>& context) const {
  const auto start = std::find_end(context.begin(), context.end(), answer_start_.begin(), answer_start_.end());
  if (answer_start_.empty() || start == context.end()) return end_token_;
  const std::string prompt = tokenizer_.decode(std::vector<int32_t>(context.begin(), start), /*skip_special_tokens=*/false);
  const std::vector<int32_t> answer(start + static_cast<long>(answer_start_.size()), context.end());
  for (const Script& script : scripts_) {
    const bool chosen = std::all_of(script.when.begin(), script.when.end(),
                                    [&](const std::string& text) { return prompt.find(text) != std::string::npos; });
    if (!chosen) continue;
    const std::vector<int32_t>& reply = script.reply;
    // Where the answer first left the script: the engine replaced that token. The reply
    // goes on from that token's place in the script.
    const size_t diverged = static_cast<size_t>(
        std::mismatch(answer.begin(), answer.end(), reply.begin(), reply.end()).first - answer.begin());
    size_t at = answer.size();
    if (diverged < answer.size()) {
      const auto forced = std::find(reply.begin() + static_cast<long>(std::min(diverged, reply.size())), reply.end(), answer[diverged]);
      if (forced == reply.end()) return end_token_;
      at = static_cast<size_t>(forced - reply.begin()) + (answer.size() - diverged);
    }
    return at < reply.size() ? reply[at] : end_token_;
  }
  return end_token_;
}

std::vector<float>& ScriptedModel::forward(const ForwardBatch& batch) {
  if (step_delay_.count() > 0) std::this_thread::sleep_for(step_delay_);
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  logits_.assign(batch.logit_rows.size() * vocab, 0.0f);
  hidden_.assign(batch.tokens.size() * static_cast<size_t>(config_.hidden_size), 0.0f);
  std::vector<int32_t> context;
  for (const SequenceChunk& chunk : batch.sequences) {
    chunk.cache->reserve(chunk.start_position + chunk.num_tokens);
    for (int32_t i = 0; i < chunk.num_tokens; ++i) {
      const int32_t token = batch.tokens[static_cast<size_t>(chunk.first_token + i)];
      std::memcpy(chunk.cache->key(0, chunk.start_position + i), &token, sizeof(token));
    }
    for (size_t row = 0; row < batch.logit_rows.size(); ++row) {
      const int32_t batch_row = batch.logit_rows[row];
      if (batch_row < chunk.first_token || batch_row >= chunk.first_token + chunk.num_tokens) continue;
      const int64_t last = chunk.start_position + (batch_row - chunk.first_token);
      context.resize(static_cast<size_t>(last + 1));
      for (int64_t p = 0; p <= last; ++p) std::memcpy(&context[static_cast<size_t>(p)], chunk.cache->key(0, p), sizeof(int32_t));
      // A margin no sampling setting can overturn.
      logits_[row * vocab + static_cast<size_t>(next_token(context))] = 100.0f;
    }
  }
  return logits_;
}

std::vector<float>& ScriptedModel::forward_mtp(const ForwardBatch& batch, std::span<const float> hidden, bool) {
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  logits_.assign(batch.logit_rows.size() * vocab, 0.0f);
  hidden_.assign(batch.tokens.size() * static_cast<size_t>(config_.hidden_size), 0.0f);
  if (hidden.size() != hidden_.size()) fail("scripted forward_mtp: hidden rows do not match the batch");
  for (size_t row = 0; row < batch.logit_rows.size(); ++row) {
    const int32_t batch_row = batch.logit_rows[row];
    for (const SequenceChunk& chunk : batch.sequences) {
      if (batch_row < chunk.first_token || batch_row >= chunk.first_token + chunk.num_tokens) continue;
      // The context up to this row's position (layer 0 holds the target's tokens; a later
      // draft pass may sit past them, where it drafts nothing useful), then its token.
      const int64_t position = chunk.start_position + (batch_row - chunk.first_token);
      std::vector<int32_t> context;
      for (int64_t p = 0; p <= position; ++p) {
        int32_t token = 0;
        std::memcpy(&token, chunk.cache->key(0, p), sizeof(token));
        context.push_back(token);
      }
      context.push_back(batch.tokens[static_cast<size_t>(batch_row)]);
      int32_t draft = next_token(context);
      if (++mtp_rows_ % kMtpMissEvery == 0) draft = (draft + 1) % config_.vocab_size;
      logits_[row * vocab + static_cast<size_t>(draft)] = 100.0f;
    }
  }
  return logits_;
}

}  // namespace ernie::testing
