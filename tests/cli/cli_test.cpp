// The `ernie` executable end to end: help, synth -> run, logits against a golden file,
// and one clear error line with a non-zero exit for every broken input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "model/safetensors_writer.h"
#include "support/test_support.h"

namespace ernie {
namespace {

using ::testing::HasSubstr;
using testing::run_shell;
using testing::shell_quote;
using testing::TempDir;

std::string ernie(const std::string& args) { return testing::ernie_binary() + " " + args; }

// The lines of `output` that are not log lines (logs start with a date).
std::vector<std::string> non_log_lines(const std::string& output) {
  std::vector<std::string> lines;
  std::istringstream stream(output);
  std::string line;
  const std::regex log_line(R"(^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (INFO|WARNING|DEBUG) )");
  while (std::getline(stream, line))
    if (!std::regex_search(line, log_line) && !line.empty()) lines.push_back(line);
  return lines;
}

// A broken input must give exit status 1 and exactly one error line containing `needle`.
void expect_one_error_line(const testing::CommandResult& result, const std::string& needle) {
  EXPECT_EQ(result.exit_code, 1) << result.output;
  const std::vector<std::string> lines = non_log_lines(result.output);
  ASSERT_EQ(lines.size(), 1u) << result.output;
  EXPECT_THAT(lines[0], ::testing::StartsWith("error: "));
  EXPECT_THAT(lines[0], HasSubstr(needle));
}

TEST(CliTest, HelpForEveryCommand) {
  const auto top = run_shell(ernie("--help"));
  EXPECT_EQ(top.exit_code, 0);
  for (const char* command : {"run", "logits", "synth", "bench", "quantize", "perplexity"}) {
    EXPECT_THAT(top.output, HasSubstr(command));
    const auto help = run_shell(ernie(std::string(command) + " --help"));
    EXPECT_EQ(help.exit_code, 0) << command;
    EXPECT_THAT(help.output, HasSubstr("usage: ernie " + std::string(command))) << help.output;
  }
  expect_one_error_line(run_shell(ernie("run --modle x")), "did you mean --model?");
  EXPECT_EQ(run_shell(ernie("serve-everything")).exit_code, 2);
}

TEST(CliTest, SynthThenRunGeneratesText) {
  TempDir temp;
  const std::string dir = temp.file("m");
  const auto synth = run_shell(ernie("synth --out " + dir + " --preset tiny-moe --layout paddle --shards 2"));
  ASSERT_EQ(synth.exit_code, 0) << synth.output;
  const auto greedy = run_shell(ernie("run --model " + dir + " --prompt 'The license' --max-tokens 12 --temperature 0 --ignore-eos"), false);
  ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
  EXPECT_GT(greedy.output.size(), 2u) << "12 tokens of random-model text";
  const auto again = run_shell(ernie("run --model " + dir + " --prompt 'The license' --max-tokens 12 --temperature 0 --ignore-eos"), false);
  EXPECT_EQ(again.output, greedy.output) << "greedy is deterministic";
  const auto seeded_a = run_shell(ernie("run --model " + dir + " --prompt 'x' --max-tokens 8 --temperature 1 --seed 5 --ignore-eos"), false);
  const auto seeded_b = run_shell(ernie("run --model " + dir + " --prompt 'x' --max-tokens 8 --temperature 1 --seed 5 --ignore-eos"), false);
  EXPECT_EQ(seeded_a.output, seeded_b.output) << "same seed, same text";
  const auto log = run_shell(ernie("run --model " + dir + " --prompt 'x' --max-tokens 2 --temperature 0"));
  EXPECT_THAT(log.output, HasSubstr("paddle layout"));
  EXPECT_THAT(log.output, HasSubstr("peak RSS"));
}

// ernie quantize -> run on the packed checkpoint: the same greedy text as quantizing at
// load, no conversion at start, and clear refusals (a packed input, an occupied --out,
// a KL divergence with no original to compare against, a flag that packs nothing).
TEST(CliTest, QuantizeWritesACheckpointThatRunsWithoutConversion) {
  TempDir temp;
  const std::string source = temp.file("m"), packed = temp.file("packed");
  ASSERT_EQ(run_shell(ernie("synth --out " + source + " --preset tiny-moe")).exit_code, 0);
  const auto quantize = run_shell(ernie("quantize --model " + source + " --quantization wint4 --out " + packed));
  ASSERT_EQ(quantize.exit_code, 0) << quantize.output;
  EXPECT_THAT(quantize.output, HasSubstr("packed Linears"));
  const std::string prompt = " --prompt 'The license' --max-tokens 12 --temperature 0 --ignore-eos";
  const auto at_load = run_shell(ernie("run --model " + source + " --quantization wint4" + prompt), false);
  const auto prepacked = run_shell(ernie("run --model " + packed + prompt), false);
  ASSERT_EQ(prepacked.exit_code, 0) << prepacked.output;
  EXPECT_EQ(prepacked.output, at_load.output);
  const auto log = run_shell(ernie("run --model " + packed + " --quantization wint8" + prompt));
  EXPECT_THAT(log.output, HasSubstr("packed by ernie quantize"));
  EXPECT_THAT(log.output, HasSubstr("--quantization wint8 is ignored"));

  expect_one_error_line(run_shell(ernie("quantize --model " + packed + " --quantization wint8 --out " + temp.file("again"))),
                        "already pre-quantized");
  expect_one_error_line(run_shell(ernie("quantize --model " + source + " --quantization wint8 --out " + packed)),
                        "already holds a checkpoint");
  expect_one_error_line(
      run_shell(ernie("quantize --model " + source + " --quantization '{\"quantization\":\"mix_quant\",\"kv_cache_quant_type\":\"int8\"}' --out " +
                      temp.file("kv"))),
      "nothing to pack");
  testing::write_file(temp.file("text.txt"), "In the beginning God created the heaven and the earth.");
  expect_one_error_line(run_shell(ernie("perplexity --model " + packed + " --file " + temp.file("text.txt") +
                                        " --context 8 --kl-divergence")),
                        "needs the original checkpoint");
}

// Every command that takes --model resolves a hub name in the local Hugging Face cache,
// as `ernie serve` does (issue 13, item 10).
TEST(CliTest, EveryCommandFindsAHubNameInTheLocalCache) {
  TempDir temp;
  const std::string repo = temp.file("hub/models--baidu--ERNIE-4.5-tiny");
  std::filesystem::create_directories(repo + "/snapshots");
  std::filesystem::create_directory_symlink(testing::golden_model_dir("tiny-dense"), repo + "/snapshots/rev1");
  const std::string env = "HF_HUB_CACHE=" + temp.file("hub") + " ";
  testing::write_file(temp.file("text.txt"), "In the beginning God created the heaven and the earth.");
  const std::string model = " --model baidu/ERNIE-4.5-tiny";
  for (const std::string& command : {"run" + model + " --prompt x --max-tokens 2",
                                    "logits" + model + " --ids 5,17 --out " + temp.file("logits.bin"),
                                    "perplexity" + model + " --file " + temp.file("text.txt") + " --context 16",
                                    "bench" + model + " --pp 8 --tg 2 --repetitions 1"}) {
    const auto result = run_shell(env + ernie(command));
    EXPECT_EQ(result.exit_code, 0) << command << "\n" << result.output;
  }
  const auto missing = run_shell(env + ernie("run --model baidu/absent --prompt x"));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.output, HasSubstr("local Hugging Face cache"));
}

TEST(CliTest, LogitsCommandReproducesAGoldenCase) {
  TempDir temp;
  const std::string golden = testing::shared_dir() + "/golden/tiny-moe";
  const auto cases = nlohmann::json::parse(testing::read_file(golden + "/cases.json"));
  const auto& test_case = cases.at("cases").at(1);
  std::string ids;
  for (const auto& id : test_case.at("input_ids")) ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int>());
  const auto result = run_shell(ernie("logits --model " + testing::golden_model_dir("tiny-moe-paddle") + " --ids " +
                                      ids + " --out " + temp.file("out.f32")));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::vector<float> ours = testing::read_f32_file(temp.file("out.f32"));
  const std::vector<float> reference = testing::read_f32_file(golden + "/" + test_case.at("logits_file").get<std::string>());
  ASSERT_EQ(ours.size(), reference.size());
  double max_diff = 0;
  for (size_t i = 0; i < ours.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(ours[i]) - reference[i]));
  EXPECT_LE(max_diff, 2e-3);
  expect_one_error_line(run_shell(ernie("logits --model " + testing::golden_model_dir("tiny-moe") +
                                        " --ids 1,x --out " + temp.file("o"))),
                        "\"x\" is not an integer");
  expect_one_error_line(run_shell(ernie("logits --model " + testing::golden_model_dir("tiny-moe") +
                                        " --ids 1,99999 --out " + temp.file("o"))),
                        "token id 99999 is outside the vocabulary 0..4095");
}

nlohmann::json last_line_json(const std::string& output) {
  const size_t end = output.find_last_not_of('\n');
  const size_t start = output.rfind('\n', end);
  return nlohmann::json::parse(output.substr(start == std::string::npos ? 0 : start + 1, end - start));
}

TEST(CliBenchTest, ServingFormReportsThroughputAsJson) {
  const auto result = run_shell(ernie("bench --model " + testing::golden_model_dir("tiny-moe") +
                                      " --concurrency 3 --input-len 20 --output-len 6 --json"),
                                false);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const nlohmann::json json = last_line_json(result.output);
  EXPECT_EQ(json.at("concurrency"), 3);
  EXPECT_GT(json.at("prompt_tokens_per_s").get<double>(), 0.0);
  EXPECT_GT(json.at("output_tokens_per_s").get<double>(), 0.0);
  EXPECT_GT(json.at("mean_ttft_ms").get<double>(), 0.0);
  // 3 requests x 6 tokens over the wall time.
  EXPECT_NEAR(json.at("output_tokens_per_s").get<double>() * json.at("wall_seconds").get<double>(), 18.0, 1e-6);
}

TEST(CliBenchTest, LlamaBenchFormReportsPpAndTg) {
  const auto result =
      run_shell(ernie("bench --model " + testing::golden_model_dir("tiny-dense") + " --pp 64 --tg 16 --json"), false);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const nlohmann::json json = last_line_json(result.output);
  EXPECT_GT(json.at("pp_tokens_per_s").get<double>(), 0.0);
  EXPECT_GT(json.at("tg_tokens_per_s").get<double>(), 0.0);
  expect_one_error_line(run_shell(ernie("bench --model " + testing::golden_model_dir("tiny-dense") + " --pp 8 --concurrency 2")),
                        "give either --concurrency");
  expect_one_error_line(run_shell(ernie("bench --model " + testing::golden_model_dir("tiny-dense") +
                                        " --concurrency 1 --quantization wint3")),
                        "\"wint3\" is not a quantization ernie.cpp knows; use wint8, wint4, block_wise_fp8");
}

// --quantization through a command: the weights are quantized at load, the log says
// how, and the result names it.
TEST(CliBenchTest, QuantizedBenchRunsAndSaysSo) {
  const auto result = run_shell(ernie("bench --model " + testing::golden_model_dir("tiny-moe") +
                                      " --pp 32 --tg 4 --quantization wint4 --json"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output, HasSubstr("quantization: dense layers wint8, experts wint4, LM head int6, KV cache bf16"));
  const nlohmann::json json = last_line_json(result.output);
  EXPECT_EQ(json.at("quantization"), "wint4");
  EXPECT_GT(json.at("tg_tokens_per_s").get<double>(), 0.0);
}

// ERNIE_QUANTIZE_LM_HEAD picks the head's format; anything else is refused, naming the choices.
TEST(CliBenchTest, HeadFormatFollowsTheEnvironment) {
  const std::string bench = "bench --model " + testing::golden_model_dir("tiny-dense") + " --pp 8 --tg 2 --quantization wint4";
  const auto int8 = run_shell("ERNIE_QUANTIZE_LM_HEAD=int8 " + ernie(bench));
  ASSERT_EQ(int8.exit_code, 0) << int8.output;
  EXPECT_THAT(int8.output, HasSubstr("dense layers wint4, experts wint4, LM head wint8,"));
  const auto bf16 = run_shell("ERNIE_QUANTIZE_LM_HEAD=0 " + ernie(bench));
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  EXPECT_THAT(bf16.output, HasSubstr("LM head bf16,"));
  expect_one_error_line(run_shell("ERNIE_QUANTIZE_LM_HEAD=int4 " + ernie(bench)),
                        "ERNIE_QUANTIZE_LM_HEAD must be 1 (the head follows --quantization), 0 (bf16) or int8");
  // A file `ernie quantize` packed with the int8 head loads with it, and the log says so.
  TempDir temp;
  const std::string packed = temp.file("packed");
  const auto quantize = run_shell("ERNIE_QUANTIZE_LM_HEAD=int8 " + ernie("quantize --model " + testing::golden_model_dir("tiny-dense") +
                                                                         " --quantization wint4 --out " + packed));
  ASSERT_EQ(quantize.exit_code, 0) << quantize.output;
  const auto loaded = run_shell(ernie("bench --model " + packed + " --pp 8 --tg 2"));
  ASSERT_EQ(loaded.exit_code, 0) << loaded.output;
  EXPECT_THAT(loaded.output, HasSubstr("LM head wint8,"));
}

TEST(CliEngineFlagsTest, EnvironmentAndFlagsAreCheckedAndLogged) {
  const std::string model = testing::golden_model_dir("tiny-dense");
  const auto ratio = run_shell(ernie("run --model " + model + " --prompt hi --max-tokens 2 --kv-cache-ratio 0.5"));
  EXPECT_EQ(ratio.exit_code, 0) << ratio.output;
  EXPECT_THAT(ratio.output, HasSubstr("--kv-cache-ratio has no effect under the V1 scheduler"));
  EXPECT_THAT(ratio.output, HasSubstr("KV cache: total_block_num"));
  expect_one_error_line(run_shell("ENABLE_V1_KVCACHE_SCHEDULER=2 " + ernie("run --model " + model + " --prompt hi")),
                        "ENABLE_V1_KVCACHE_SCHEDULER must be 0 or 1");
  expect_one_error_line(run_shell("FD_SAMPLING_CLASS=fancy " + ernie("run --model " + model + " --prompt hi")),
                        "FD_SAMPLING_CLASS");
  expect_one_error_line(run_shell(ernie("run --model " + model + " --prompt hi --max-model-len 4096 --num-gpu-blocks-override 3")),
                        "needs 64 blocks");
  const auto v0 = run_shell("ENABLE_V1_KVCACHE_SCHEDULER=0 FD_DISABLE_CHUNKED_PREFILL=1 FD_SAMPLING_CLASS=rejection " +
                            ernie("run --model " + model + " --prompt hi --max-tokens 3 --temperature 0"));
  EXPECT_EQ(v0.exit_code, 0) << v0.output;
}

class BrokenCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_.file("m");
    const auto synth = run_shell(ernie("synth --out " + dir_ + " --preset tiny-dense --no-tokenizer"));
    ASSERT_EQ(synth.exit_code, 0) << synth.output;
  }
  testing::CommandResult logits() {
    return run_shell(ernie("logits --model " + dir_ + " --ids 1,2,3 --out " + temp_.file("o.f32")));
  }
  void rewrite(const std::function<void(std::vector<TensorToWrite>&)>& edit) {
    auto tensors = testing::read_all_tensors(dir_ + "/model.safetensors");
    edit(tensors);
    write_safetensors(dir_ + "/model.safetensors", tensors, {{"format", "pt"}});
  }
  TempDir temp_;
  std::string dir_;
};

TEST_F(BrokenCheckpointTest, TruncatedFile) {
  const std::string bytes = testing::read_file(dir_ + "/model.safetensors");
  testing::write_file(dir_ + "/model.safetensors", bytes.substr(0, bytes.size() / 2));
  expect_one_error_line(logits(), "file truncated?");
}

TEST_F(BrokenCheckpointTest, WrongShape) {
  rewrite([](auto& tensors) {
    for (auto& tensor : tensors)
      if (tensor.name == "model.layers.1.mlp.down_proj.weight") tensor.shape = {512, 256};
  });
  expect_one_error_line(logits(), "\"model.layers.1.mlp.down_proj.weight\" has shape [512, 256], expected [256, 512]");
}

TEST_F(BrokenCheckpointTest, MissingTensor) {
  rewrite([](auto& tensors) {
    std::erase_if(tensors, [](const TensorToWrite& t) { return t.name == "model.norm.weight"; });
  });
  expect_one_error_line(logits(), "missing tensor \"model.norm.weight\" (expected shape [256])");
}

TEST_F(BrokenCheckpointTest, BadJsonInConfigAndHeader) {
  const std::string config = testing::read_file(dir_ + "/config.json");
  testing::write_file(dir_ + "/config.json", config.substr(0, config.size() / 2));
  expect_one_error_line(logits(), "config.json: invalid JSON");
  testing::write_file(dir_ + "/config.json", config);
  std::string bytes = testing::read_file(dir_ + "/model.safetensors");
  bytes[8] = '[';  // the header's opening brace
  testing::write_file(dir_ + "/model.safetensors", bytes);
  expect_one_error_line(logits(), "model.safetensors: safetensors header");
}

TEST_F(BrokenCheckpointTest, MissingDirectoryAndTokenizer) {
  expect_one_error_line(run_shell(ernie("logits --model " + temp_.file("none") + " --ids 1 --out x")), "is not a directory");
  expect_one_error_line(run_shell(ernie("run --model " + dir_ + " --prompt hi")), "tokenizer");
}

TEST(CliRealDimensionsTest, Ernie03BShapedCheckpointLoadsAndGenerates) {
  // The real ERNIE-4.5-0.3B dimensions: hidden 1024, 18 layers, 16 heads x 128, 2 KV
  // heads, FFN 3072, vocab 103424, tied; random weights (0.72 GB of bf16).
  TempDir temp;
  const std::string dir = temp.file("ernie-0.3b");
  const auto synth = run_shell(ernie("synth --out " + dir + " --preset 0.3b --shards 2"));
  ASSERT_EQ(synth.exit_code, 0) << synth.output;
  const auto run = run_shell(ernie("run --model " + dir + " --prompt 'Hello world' --max-tokens 4 --temperature 0 --ignore-eos"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("18 layers, hidden 1024, vocab 103424"));
  EXPECT_THAT(run.output, HasSubstr("generated 4 tokens"));
  std::cout << run.output;  // load time and peak RSS, for the record
}

}  // namespace
}  // namespace ernie
