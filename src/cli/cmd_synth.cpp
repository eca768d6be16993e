// ernie synth: write a random checkpoint in the real ERNIE 4.5 formats (PT or Paddle,
// single file or sharded) with a trained SentencePiece tokenizer, for tests and
// benchmarks where real weights cannot be downloaded.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "model/synthetic_checkpoint.h"
#include "text/tokenizer.h"
#include "text/tokenizer_trainer.h"
#include "util/error.h"
#include "util/log.h"
#include "util/stopwatch.h"

namespace ernie {
namespace {

// A Thinking model ends its turn with <|im_end|> as well as </s>.
void end_turns_with_im_end(const std::string& dir) {
  const std::string path = dir + "/generation_config.json";
  std::ifstream in(path);
  nlohmann::ordered_json generation = nlohmann::ordered_json::parse(in);
  const std::optional<int32_t> im_end = Tokenizer::load(dir).token_id("<|im_end|>");
  if (!im_end) fail("internal: the synthetic tokenizer lacks <|im_end|>");
  generation["eos_token_id"] = {2, *im_end};
  std::ofstream(path) << generation.dump(2) << "\n";
}

// A VL checkpoint's config names its placeholder and marker ids: those the tokenizer gave
// the markers.
void point_config_at_vl_markers(const std::string& dir) {
  const Tokenizer tokenizer = Tokenizer::load(dir);
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(in);
  for (const auto& [key, marker] : std::initializer_list<std::pair<const char*, const char*>>{
           {"im_patch_id", "<|IMAGE_PLACEHOLDER|>"},
           {"image_start_token_id", "<|IMAGE_START|>"},
           {"image_end_token_id", "<|IMAGE_END|>"},
           {"video_start_token_id", "<|VIDEO_START|>"},
           {"video_end_token_id", "<|VIDEO_END|>"}}) {
    const std::optional<int32_t> id = tokenizer.token_id(marker);
    if (!id) fail("internal: the synthetic tokenizer lacks ", marker);
    config[key] = *id;
  }
  std::ofstream(path) << config.dump(2) << "\n";
}

}  // namespace
namespace {

// Overrides of the preset's integer fields, by flag name.
void apply_int_overrides(const ParsedArgs& args, SyntheticModelSpec& spec) {
  const std::pair<const char*, int*> fields[] = {
      {"hidden", &spec.hidden_size},          {"layers", &spec.num_layers},
      {"heads", &spec.num_heads},             {"kv-heads", &spec.num_kv_heads},
      {"head-dim", &spec.head_dim},           {"intermediate", &spec.intermediate_size},
      {"vocab", &spec.vocab_size},            {"experts", &spec.num_experts},
      {"moe-k", &spec.moe_k},                 {"moe-intermediate", &spec.moe_intermediate_size},
      {"shared-experts", &spec.num_shared_experts}, {"moe-start", &spec.moe_start}};
  for (const auto& [flag, field] : fields) {
    if (!args.has(flag)) continue;
    const int64_t value = args.get_int(flag);
    if (value < 0 || value > INT32_MAX) fail("--", flag, " must be a non-negative integer, got ", value);
    *field = static_cast<int>(value);
  }
}

}  // namespace

int synth_command(int argc, char** argv) {
  std::vector<OptionSpec> options = {
      {"out", "DIR", "directory to write (created if needed)", ""},
      {"preset", "NAME", "base shape: tiny-dense, tiny-moe, 0.3b, 21b-a3b, moe-scaled, vl-tiny, vl-28b-layer", "tiny-dense"},
      {"layout", "pt|paddle", "checkpoint layout: PT (model.*, [out,in]) or Paddle (ernie.*, [in,out], fused)", "pt"},
      {"shards", "N", "number of safetensors shards (1 = model.safetensors)", "1"},
      {"seed", "S", "weights depend only on the seed and the shapes", "1"},
      {"untied", "", "separate lm_head.weight instead of tying it to the embedding", ""},
      {"mtp", "", "add a multi-token-prediction head (mtp_* tensors)", ""},
      {"std", "X", "standard deviation of the weights (default: the preset's)", ""},
      {"tokenizer-vocab", "N", "pieces of the trained tokenizer", "4096"},
      {"thinking-markers", "", "ERNIE-4.5-21B-A3B-Thinking style: <think>, </think>, <tool_call>, ... as single tokenizer pieces, its chat template (with tools) and <|im_end|> as an end token", ""},
      {"no-tokenizer", "", "write only config and weights", ""}};
  for (const char* shape_flag : {"hidden", "layers", "heads", "kv-heads", "head-dim", "intermediate", "vocab",
                                 "experts", "moe-k", "moe-intermediate", "shared-experts", "moe-start"})
    options.push_back({shape_flag, "N", "override the preset's value", ""});
  const ArgParser parser("ernie synth --out DIR [--preset NAME] [--layout pt|paddle] [--shards N] [...]",
                         "Writes a random ERNIE 4.5 checkpoint in the published formats, with a tokenizer trained "
                         "on the machine's license texts. Not a trained model: its output is noise.",
                         options);
  const ParsedArgs args = parser.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::fputs(parser.help_text().c_str(), stdout);
    return 0;
  }
  const std::string out = args.get("out");
  SyntheticModelSpec spec = synthetic_preset(args.get("preset"));
  apply_int_overrides(args, spec);
  spec.seed = static_cast<uint64_t>(args.get_int("seed"));
  if (args.flag("untied")) spec.tie_embeddings = false;
  if (args.flag("mtp")) spec.with_mtp = true;
  if (args.has("std")) spec.weight_std = args.get_double("std");
  const std::string layout_name = args.get("layout");
  if (layout_name != "pt" && layout_name != "paddle") fail("--layout must be pt or paddle, got \"", layout_name, "\"");
  const CheckpointLayout layout = layout_name == "paddle" ? CheckpointLayout::kPaddle : CheckpointLayout::kTorch;
  const int64_t shards = args.get_int("shards");
  if (shards < 1 || shards > 99999) fail("--shards must lie in 1..99999, got ", shards);

  Stopwatch clock;
  std::filesystem::create_directories(out);
  write_synthetic_checkpoint(out, spec, layout, static_cast<int>(shards));
  if (!args.flag("no-tokenizer")) {
    SyntheticTokenizerOptions tokenizer;
    tokenizer.vocab_size = static_cast<int>(args.get_int("tokenizer-vocab"));
    if (tokenizer.vocab_size > spec.vocab_size)
      fail("--tokenizer-vocab (", tokenizer.vocab_size, ") exceeds the model's vocab (", spec.vocab_size, ")");
    const bool vl = spec.vision_depth > 0;
    if (args.flag("thinking-markers") && vl)
      fail("--thinking-markers is the text Thinking model's format; a VL checkpoint gets the VL markers and template");
    if (args.flag("thinking-markers")) {
      tokenizer.extra_markers = ernie_thinking_markers();
      tokenizer.chat_template = std::string(ernie_thinking_chat_template());
    }
    if (vl) {
      tokenizer.extra_markers = ernie_vl_markers();
      tokenizer.chat_template = std::string(ernie_vl_chat_template());
    }
    write_synthetic_tokenizer(out, tokenizer);
    if (args.flag("thinking-markers")) end_turns_with_im_end(out);
    if (vl) point_config_at_vl_markers(out);
  }
  log_info("wrote a synthetic ", spec.vision_depth > 0 ? "VL" : spec.num_experts > 0 ? "MoE" : "dense", " checkpoint (", layout_name, ", ", shards,
           " shard(s)) to ", out, " in ", clock.seconds(), " s");
  return 0;
}

}  // namespace ernie
