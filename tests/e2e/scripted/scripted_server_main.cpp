// ernie_scripted_server SCRIPT.json [ernie serve flags]: the real server (flags,
// templates, engine, parsers, HTTP) over a ScriptedModel instead of the weights. The
// model directory still supplies config.json, the tokenizer and the chat template.
//
// SCRIPT.json: {"answer_start": "<|im_start|>assistant\n<think>\n",
//               "end": "<|im_end|>",
//               "scripts": [{"when": ["weather"], "reply": "…</think>…"}, …],
//               "step_delay_ms": 0}   (optional: each forward pass takes this long)
// Replies are tokenized with special tokens parsed, so markers become their single ids.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/engine_client.h"
#include "model/config.h"
#include "model/generation_config.h"
#include "scripted/scripted_model.h"
#include "serving/serve_config.h"
#include "serving/server_runner.h"
#include "util/error.h"
#include "util/log.h"

namespace {

int run(int argc, char** argv) {
  using namespace ernie;
  if (argc < 2) fail("usage: ernie_scripted_server SCRIPT.json [ernie serve flags]");
  const sigset_t shutdown_signals = block_shutdown_signals();
  set_log_to_stdout(true);
  std::ifstream file(argv[1]);
  if (!file) fail("cannot read the script ", argv[1]);
  const nlohmann::json script = nlohmann::json::parse(file);
  const std::optional<ServeConfig> parsed = parse_serve_args(argc, argv, 2);
  if (!parsed) return 0;
  const ServeConfig& config = *parsed;

  const Tokenizer tokenizer = Tokenizer::load(config.tokenizer_dir);
  std::vector<testing::Script> scripts;
  for (const auto& entry : script.at("scripts"))
    scripts.push_back({entry.at("when").get<std::vector<std::string>>(), tokenizer.encode(entry.at("reply").get<std::string>())});
  const GenerationConfig generation = load_generation_config(config.model_dir);
  ModelConfig model_config = load_model_config(config.model_dir);
  const std::vector<int32_t> eos = end_token_ids(generation, model_config);
  const std::vector<int32_t> end = tokenizer.encode(script.value("end", tokenizer.token_bytes(eos.at(0), false)));
  if (end.size() != 1) fail("the script's \"end\" must be one token");
  testing::ScriptedModel model(model_config, tokenizer, tokenizer.encode(script.at("answer_start").get<std::string>()),
                               std::move(scripts), end[0], std::chrono::milliseconds(script.value("step_delay_ms", 0)));
  auto engine = std::make_unique<Engine>(model, tokenizer, config.engine, /*num_blocks=*/4096, eos);
  EngineClient client(std::move(engine));
  return serve_until_signalled(config, shutdown_signals, client, tokenizer, model, generation);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
}
