#include "model/perplexity.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace ernie {

namespace {

// -log softmax(values)[target], in double.
double token_nll(const float* values, int64_t vocab, int32_t target) {
  const double peak = *std::max_element(values, values + vocab);
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(values[v]) - peak);
  return peak + std::log(sum) - values[target];
}

// KL(p || q) of the softmaxes of two logit rows, in double.
double kl_divergence(const float* p_logits, const float* q_logits, int64_t vocab) {
  const double p_peak = *std::max_element(p_logits, p_logits + vocab);
  const double q_peak = *std::max_element(q_logits, q_logits + vocab);
  double p_sum = 0, q_sum = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    p_sum += std::exp(p_logits[v] - p_peak);
    q_sum += std::exp(q_logits[v] - q_peak);
  }
  const double p_log_norm = p_peak + std::log(p_sum), q_log_norm = q_peak + std::log(q_sum);
  double kl = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    const double log_p = p_logits[v] - p_log_norm, log_q = q_logits[v] - q_log_norm;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return std::max(0.0, kl);
}

}  // namespace

PerplexityResult evaluate_perplexity(ErnieModel& model, std::span<const int32_t> tokens, const PerplexityOptions& options,
                                     const std::function<void(int64_t, int64_t)>& on_window) {
  const bool second_half = options.protocol == PerplexityProtocol::kSecondHalf;
  const int64_t context = options.context;
  const int64_t min_context = second_half ? 4 : 2;
  if (context < min_context)
    fail("the perplexity context must be at least ", min_context, " tokens, got ", context);
  const int64_t vocab = model.config().vocab_size;
  for (int32_t token : tokens)
    if (token < 0 || token >= vocab) fail("token id ", token, " is outside the model's vocabulary 0..", vocab - 1);
  if (options.reference != nullptr && options.reference->config().vocab_size != vocab)
    fail("the reference model's vocabulary (", options.reference->config().vocab_size, ") differs from the model's (",
         vocab, ")");
  if (options.bos_id >= vocab) fail("BOS id ", options.bos_id, " is outside the model's vocabulary 0..", vocab - 1);
  const auto total = static_cast<int64_t>(tokens.size());
  // The second-half protocol scores whole windows only.
  const int64_t windows = second_half ? total / context : (total + context - 1) / context;
  // Rows [first_row, window - 1) predict the token after them.
  const int64_t first_row = second_half ? context / 2 : 0;
  PerplexityResult result;
  double nll_sum = 0, kl_sum = 0, same_top1 = 0;
  std::vector<int32_t> window;
  std::vector<float> reference_logits;
  for (int64_t w = 0; w < windows; ++w) {
    const int64_t start = w * context;
    window.assign(tokens.begin() + start, tokens.begin() + std::min(total, start + context));
    if (second_half && options.bos_id >= 0) window.front() = options.bos_id;
    if (static_cast<int64_t>(window.size()) > first_row + 1) {
      auto cache = model.new_kv_cache();
      ForwardBatch batch = single_sequence_batch(*cache, window, 0, /*all_rows=*/false);
      batch.logit_rows.clear();
      for (int64_t row = first_row; row + 1 < static_cast<int64_t>(window.size()); ++row)
        batch.logit_rows.push_back(static_cast<int32_t>(row));
      const std::vector<float>& logits = model.forward(batch);
      if (options.reference != nullptr) {
        auto reference_cache = options.reference->new_kv_cache();
        batch.sequences.front().cache = reference_cache.get();
        reference_logits = options.reference->forward(batch);
      }
      for (size_t i = 0; i < batch.logit_rows.size(); ++i) {
        const auto row = static_cast<size_t>(batch.logit_rows[i]);
        const float* values = logits.data() + i * static_cast<size_t>(vocab);
        nll_sum += token_nll(values, vocab, window[row + 1]);
        if (options.reference != nullptr) {
          const float* expected = reference_logits.data() + i * static_cast<size_t>(vocab);
          kl_sum += kl_divergence(expected, values, vocab);
          same_top1 += std::max_element(expected, expected + vocab) == expected + (std::max_element(values, values + vocab) - values);
        }
        ++result.predicted_tokens;
      }
    }
    ++result.windows;
    if (on_window) on_window(result.windows, windows);
  }
  if (result.predicted_tokens == 0) {
    if (second_half)
      fail("the second-half protocol needs at least one whole window of ", context, " tokens; the text has ", total);
    fail("perplexity needs at least 2 tokens in a window; the text has ", total, " token(s)");
  }
  result.mean_nll = nll_sum / static_cast<double>(result.predicted_tokens);
  result.perplexity = std::exp(result.mean_nll);
  result.mean_kl = kl_sum / static_cast<double>(result.predicted_tokens);
  result.same_top1 = same_top1 / static_cast<double>(result.predicted_tokens);
  return result;
}

PerplexityResult evaluate_perplexity(ErnieModel& model, std::span<const int32_t> tokens, int64_t context,
                                     const std::function<void(int64_t, int64_t)>& on_window) {
  return evaluate_perplexity(model, tokens, PerplexityOptions{.context = context}, on_window);
}

}  // namespace ernie
