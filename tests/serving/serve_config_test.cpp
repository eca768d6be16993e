#include "serving/serve_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "cli/model_loading.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ernie {
namespace {

using ::testing::HasSubstr;

ServeConfig parse(std::vector<std::string> words) {
  std::vector<char*> argv = {const_cast<char*>("ernie"), const_cast<char*>("serve")};
  for (auto& word : words) argv.push_back(word.data());
  return *parse_serve_args(static_cast<int>(argv.size()), argv.data(), 2);
}

std::string flags_error_of(std::vector<std::string> words) {
  return testing::error_message([&] { parse(std::move(words)); });
}

TEST(ServeConfigTest, TheSeedCommandsParse) {
  const std::string model = testing::golden_model_dir("tiny-moe");
  const ServeConfig thinking = parse({"--model", model, "--load_choices", "default_v1", "--tensor-parallel-size", "1",
                                      "--max-model-len", "131072", "--quantization", "wint8", "--reasoning-parser",
                                      "ernie_x1", "--tool-call-parser", "ernie_x1", "--max-num-seqs", "32"});
  EXPECT_EQ(thinking.engine.max_model_len, 131072);
  EXPECT_EQ(thinking.engine.max_num_seqs, 32);
  EXPECT_EQ(thinking.reasoning_parser, ReasoningParser::kErnieX1);
  EXPECT_EQ(thinking.tool_call_parser, ToolCallParser::kErnieX1);
  const ServeConfig big = parse({"--model", model, "--tensor-parallel-size", "8", "--quantization", "wint4",
                                 "--max-model-len", "32768", "--kv-cache-ratio", "0.75", "--max-num-seqs", "128"});
  EXPECT_DOUBLE_EQ(big.engine.kv_cache_ratio, 0.75);
  const ServeConfig mixed = parse({"--model", model, "--port", "8180", "--metrics-port", "8181",
                                   "--engine-worker-queue-port", "8182", "--cache-queue-port", "8183",
                                   "--swap-space", "20", "--use-cudagraph",
                                   "--enable-prefix-caching", "--enable-chunked-prefill", "--gpu-memory-utilization", "0.8",
                                   "--max-num-batched-tokens", "384", "--limit-mm-per-prompt", R"({"image": 100, "video": 100})",
                                   "--enable-mm", "--speculative-config", R"({"method": "mtp", "num_speculative_tokens": 1})",
                                   "--num-gpu-blocks-override", "40000"});
  EXPECT_EQ(mixed.port, 8180);
  EXPECT_EQ(mixed.metrics_port, 8181);
  EXPECT_EQ(mixed.engine.max_num_batched_tokens, 384);
  EXPECT_EQ(mixed.engine.num_gpu_blocks_override, 40000);
  EXPECT_EQ(mixed.model_name, model);
  EXPECT_EQ(mixed.disaggregation.role, disagg::Role::kMixed);
  // The 21B-A3B guide's 1P1D pair (--tensor-parallel-size left out: refused with a split).
  const ServeConfig prefill = parse({"--model", model, "--max-num-seqs", "20", "--num-gpu-blocks-override", "40000",
                                     "--quantization", "block_wise_fp8", "--gpu-memory-utilization", "0.9",
                                     "--kv-cache-ratio", "0.9", "--port", "7012", "--engine-worker-queue-port", "7013",
                                     "--metrics-port", "7014", "--cache-queue-port", "7015", "--splitwise-role", "prefill"});
  EXPECT_EQ(prefill.disaggregation.role, disagg::Role::kPrefill);
  EXPECT_EQ(prefill.disaggregation.engine_worker_queue_port, 7013);
  const ServeConfig decode = parse({"--model", model, "--max-num-seqs", "20", "--quantization", "block_wise_fp8",
                                    "--gpu-memory-utilization", "0.85", "--kv-cache-ratio", "0.1", "--port", "9012",
                                    "--engine-worker-queue-port", "8013", "--metrics-port", "8014",
                                    "--cache-queue-port", "8015", "--innode-prefill-ports", "7013",
                                    "--splitwise-role", "decode"});
  EXPECT_EQ(decode.disaggregation.role, disagg::Role::kDecode);
  EXPECT_EQ(decode.disaggregation.decode.prefill_endpoints, std::vector<std::string>{disagg::local_endpoint(7013)});
  EXPECT_THROW(parse({"--model", model, "--splitwise-role", "decode", "--innode-prefill-ports", "7013",
                      "--tensor-parallel-size", "4"}),
               Error);
}

TEST(ServeConfigTest, WithoutModelTheShippedOneIsServed) {
  const ServeConfig config = parse({});
  EXPECT_EQ(config.model_name, "ernie-4.5-kjv-dense");
  EXPECT_TRUE(std::filesystem::exists(config.model_dir + "/config.json")) << config.model_dir;
  // It was trained on 256-token windows: the default length follows it.
  EXPECT_EQ(config.engine.max_model_len, 256);
  EXPECT_EQ(parse({"--served-model-name", "kjv"}).model_name, "kjv");
}

TEST(ServeConfigTest, BadValuesAndMisspellingsAreRefused) {
  const std::string model = testing::golden_model_dir("tiny-dense");
  EXPECT_THAT(flags_error_of({"--model", model, "--max-num-seq", "4"}), HasSubstr("did you mean --max-num-seqs?"));
  EXPECT_THAT(flags_error_of({"--model", model, "--quantization", "int3"}), HasSubstr("--quantization \"int3\" is not a quantization ernie.cpp knows"));
  EXPECT_THAT(flags_error_of({"--model", model, "--speculative-config", "{mtp"}), HasSubstr("expects a JSON object"));
  EXPECT_THAT(flags_error_of({"--model", model, "--reasoning-parser", "qwen3"}), HasSubstr("valid: ernie_x1, ernie-x1, ernie-45-vl"));
  EXPECT_THAT(flags_error_of({"--model", model, "--splitwise-role", "both"}), HasSubstr("splitwise-role"));
  EXPECT_THAT(flags_error_of({"--model", model, "--port", "70000"}), HasSubstr("--port must lie in 0..65535"));
  EXPECT_THAT(flags_error_of({"--model", "baidu/ERNIE-4.5-0.3B-PT"}), HasSubstr("local Hugging Face cache"));
  EXPECT_THAT(flags_error_of({"--model", model, "--max-waiting-time", "0"}), HasSubstr("or -1 for no limit"));
  EXPECT_THAT(flags_error_of({"--model", model, "--max-logprobs", "-2"}), HasSubstr("--max-logprobs must be -1"));
  EXPECT_THAT(flags_error_of({"--model", model, "--enable-early-stop", "--early-stop-config", R"({"enable_early_stop": false})"}),
              HasSubstr("contradicts"));
}

TEST(ServeConfigTest, FastDeployLoadControlsReachTheEngine) {
  const std::string model = testing::golden_model_dir("tiny-dense");
  EXPECT_FALSE(parse({"--model", model}).engine.max_waiting_time.has_value());
  EXPECT_FALSE(parse({"--model", model, "--max-waiting-time", "-1"}).engine.max_waiting_time.has_value());
  EXPECT_EQ(parse({"--model", model, "--max-waiting-time", "2.5"}).engine.max_waiting_time, 2.5);
  EXPECT_EQ(parse({"--model", model, "--max-logprobs", "-1"}).max_logprobs, -1);
  const EarlyStopConfig defaults = parse({"--model", model, "--enable-early-stop"}).engine.early_stop;
  EXPECT_TRUE(defaults.enabled);
  EXPECT_EQ(defaults.window_size, 3000);  // FastDeploy's defaults
  EXPECT_DOUBLE_EQ(defaults.threshold, 0.99);
  const EarlyStopConfig custom =
      parse({"--model", model, "--early-stop-config", R"({"enable_early_stop": true, "threshold": 0.9})"}).engine.early_stop;
  EXPECT_TRUE(custom.enabled);
  EXPECT_DOUBLE_EQ(custom.threshold, 0.9);
  EXPECT_FALSE(parse({"--model", model}).engine.early_stop.enabled);
}

TEST(ServeConfigTest, HubNamesResolveInTheLocalCache) {
  testing::TempDir temp;
  const std::string snapshot = temp.file("hub/models--baidu--ERNIE-4.5-0.3B-PT/snapshots/abc123");
  std::filesystem::create_directories(snapshot);
  std::filesystem::create_directories(temp.file("hub/models--baidu--ERNIE-4.5-0.3B-PT/refs"));
  testing::write_file(snapshot + "/config.json", "{}");
  testing::write_file(temp.file("hub/models--baidu--ERNIE-4.5-0.3B-PT/refs/main"), "abc123");
  setenv("HF_HUB_CACHE", temp.file("hub").c_str(), 1);
  EXPECT_EQ(resolve_model_path("baidu/ERNIE-4.5-0.3B-PT"), snapshot);
  unsetenv("HF_HUB_CACHE");
}

TEST(ServeConfigTest, ApiKeysFromFlagsOrEnvironment) {
  const std::string model = testing::golden_model_dir("tiny-dense");
  EXPECT_EQ(parse({"--model", model, "--api-key", "a", "--api-key", "b"}).api_keys, (std::vector<std::string>{"a", "b"}));
  setenv("FD_API_KEY", "x,y", 1);
  EXPECT_EQ(parse({"--model", model}).api_keys, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(parse({"--model", model, "--api-key", "z"}).api_keys, std::vector<std::string>{"z"}) << "the flag wins";
  unsetenv("FD_API_KEY");
}

}  // namespace
}  // namespace ernie
