#include "model/perplexity.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace ernie {

PerplexityResult evaluate_perplexity(ErnieModel& model, std::span<const int32_t> tokens, int64_t context,
                                     const std::function<void(int64_t, int64_t)>& on_window) {
  if (context < 2) fail("the perplexity context must be at least 2 tokens, got ", context);
  const int64_t vocab = model.config().vocab_size;
  for (int32_t token : tokens)
    if (token < 0 || token >= vocab) fail("token id ", token, " is outside the model's vocabulary 0..", vocab - 1);
  const auto total = static_cast<int64_t>(tokens.size());
  const int64_t windows = (total + context - 1) / context;
  PerplexityResult result;
  double nll_sum = 0;
  for (int64_t start = 0; start < total; start += context) {
    const std::span<const int32_t> window = tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(std::min(context, total - start)));
    if (window.size() >= 2) {
      auto cache = model.new_kv_cache();
      // Only the rows that predict a token of the window are needed.
      ForwardBatch batch = single_sequence_batch(*cache, window, 0, /*all_rows=*/true);
      batch.logit_rows.pop_back();
      const std::vector<float>& logits = model.forward(batch);
      for (size_t row = 0; row + 1 < window.size(); ++row) {
        const float* values = logits.data() + row * static_cast<size_t>(vocab);
        const double peak = *std::max_element(values, values + vocab);
        double sum = 0;
        for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(values[v]) - peak);
        nll_sum += peak + std::log(sum) - values[window[row + 1]];
        ++result.predicted_tokens;
      }
    }
    ++result.windows;
    if (on_window) on_window(result.windows, windows);
  }
  if (result.predicted_tokens == 0) fail("perplexity needs at least 2 tokens in a window; the text has ", total, " token(s)");
  result.mean_nll = nll_sum / static_cast<double>(result.predicted_tokens);
  result.perplexity = std::exp(result.mean_nll);
  return result;
}

}  // namespace ernie
