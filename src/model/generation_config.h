// generation_config.json: the checkpoint's default sampling settings and end tokens.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ernie {

struct GenerationConfig {
  std::vector<int> eos_token_ids;  // empty when the file does not say
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<float> repetition_penalty;
};

// Reads MODEL_DIR/generation_config.json; a missing file gives an empty config, a
// malformed one an error naming the file.
GenerationConfig load_generation_config(const std::string& model_dir);

}  // namespace ernie
