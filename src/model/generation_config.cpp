#include "model/generation_config.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace ernie {

GenerationConfig load_generation_config(const std::string& model_dir) {
  const std::string path = model_dir + "/generation_config.json";
  GenerationConfig config;
  if (!std::filesystem::exists(path)) return config;
  nlohmann::json root;
  try {
    std::ifstream file(path);
    root = nlohmann::json::parse(file);
  } catch (const nlohmann::json::exception& error) {
    fail(path, ": invalid JSON (", error.what(), ")");
  }
  if (!root.is_object()) fail(path, ": expected a JSON object");
  try {
    if (root.contains("eos_token_id") && !root["eos_token_id"].is_null()) {
      const auto& eos = root["eos_token_id"];
      if (eos.is_array()) config.eos_token_ids = eos.get<std::vector<int>>();
      else config.eos_token_ids = {eos.get<int>()};
    }
    if (root.contains("temperature")) config.temperature = root["temperature"].get<float>();
    if (root.contains("top_p")) config.top_p = root["top_p"].get<float>();
    if (root.contains("top_k")) config.top_k = root["top_k"].get<int>();
    if (root.contains("repetition_penalty")) config.repetition_penalty = root["repetition_penalty"].get<float>();
  } catch (const nlohmann::json::exception& error) {
    fail(path, ": a field has the wrong type (", error.what(), ")");
  }
  return config;
}

std::vector<int32_t> end_token_ids(const GenerationConfig& generation, const ModelConfig& model) {
  const std::vector<int>& ids = generation.eos_token_ids.empty() ? model.eos_token_ids : generation.eos_token_ids;
  return {ids.begin(), ids.end()};
}

}  // namespace ernie
