// generation_config.json: the checkpoint's default sampling settings and end tokens.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/config.h"

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

// The tokens that end a generation: generation_config.json's list, else config.json's.
std::vector<int32_t> end_token_ids(const GenerationConfig& generation, const ModelConfig& model);

}  // namespace ernie
