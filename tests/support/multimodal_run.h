// Running an ERNIE-4.5-VL prompt straight through the model, outside the engine: one
// forward pass over the whole prompt (its 3-D positions and image feature rows from the
// MultimodalPrompt), then greedy tokens one at a time, each at its next position.
#pragma once

#include <algorithm>
#include <span>
#include <vector>

#include "engine/multimodal_prompt.h"
#include "model/ernie_model.h"

namespace ernie::testing {

struct MultimodalRun {
  std::vector<float> logits;       // every prompt row's, [prompt, vocab]
  std::vector<int32_t> generated;  // `greedy` argmax tokens
};

inline MultimodalRun run_multimodal(ErnieModel& model, std::span<const int32_t> tokens, const MultimodalPrompt& prompt,
                                    int greedy) {
  auto cache = model.new_kv_cache();
  const auto rows_of = [&](std::span<const int32_t> ids, int64_t first) {
    ForwardBatch batch = single_sequence_batch(*cache, ids, first, true);
    for (int64_t i = first; i < first + static_cast<int64_t>(ids.size()); ++i) {
      int32_t thw[3];
      prompt.position(i, thw);
      batch.rope_positions.insert(batch.rope_positions.end(), thw, thw + 3);
      batch.input_embeddings.push_back(prompt.has_features(i) ? prompt.feature(i) : nullptr);
    }
    return batch;
  };
  MultimodalRun run;
  run.logits = model.forward(rows_of(tokens, 0));
  const int64_t v = model.config().vocab_size;
  std::vector<float> last(run.logits.end() - v, run.logits.end());
  for (int i = 0; i < greedy; ++i) {
    run.generated.push_back(static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin()));
    if (i + 1 == greedy) break;
    const std::vector<float>& next = model.forward(
        rows_of(std::span<const int32_t>(&run.generated.back(), 1), static_cast<int64_t>(tokens.size()) + i));
    last.assign(next.end() - v, next.end());
  }
  return run;
}

}  // namespace ernie::testing
