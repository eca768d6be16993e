// ernie bench: offline throughput and latency of the engine, without HTTP.
//   serving form:  --concurrency N --input-len L --output-len K
//   llama-bench form: --pp 512 --tg 128
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_setup.h"
#include "cli/model_loading.h"
#include "kernels/matmul.h"
#include "kernels/memory_bandwidth.h"
#include "structured/constraint.h"
#include "util/error.h"
#include "util/log.h"
#include "util/random.h"
#include "util/stopwatch.h"
#include "util/text_file.h"

namespace ernie {
namespace {

struct RequestTiming {
  double submitted = 0;
  double first_token = 0;
  double finished = 0;
  int64_t output_tokens = 0;
};

// Random prompt ids, away from the special tokens at the bottom of the vocabulary.
std::vector<int32_t> random_prompt(Random& random, int64_t length, int vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(length));
  const uint64_t low = std::min(1000, vocab / 2);
  for (int32_t& id : ids) id = static_cast<int32_t>(low + random.next() % (static_cast<uint64_t>(vocab) - low));
  return ids;
}

// Submits `prompts` all at once, greedy with exactly `output_len` tokens each, and
// waits for all of them. Times are seconds since `clock` started.
// `constraint`: an output constraint every request follows (null: free).
std::vector<RequestTiming> run_requests(EngineClient& client, const std::vector<std::vector<int32_t>>& prompts,
                                        int64_t output_len, const Stopwatch& clock, const std::string& prefix,
                                        const std::shared_ptr<const structured::CompiledConstraint>& constraint = nullptr) {
  std::vector<std::shared_ptr<OutputStream>> streams;
  std::vector<RequestTiming> timings(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest request;
    request.id = prefix + std::to_string(i);
    request.prompt = prompts[i];
    request.params.temperature = 0.0f;
    request.params.max_tokens = static_cast<int>(output_len);
    request.params.ignore_eos = true;
    request.constraint = constraint;
    timings[i].submitted = clock.seconds();
    streams.push_back(client.submit(std::move(request)));
  }
  // Streams are read in turn; timestamps are taken when an output is picked up, which
  // is at most one step late for the first token of a request read after others.
  std::vector<bool> done(prompts.size(), false);
  size_t remaining = prompts.size();
  while (remaining > 0) {
    for (size_t i = 0; i < streams.size(); ++i) {
      if (done[i]) continue;
      while (std::optional<RequestOutput> output = streams[i]->next_for(std::chrono::milliseconds(1))) {
        if (output->finish_reason == FinishReason::kError) fail("benchmark request failed: ", output->error);
        if (timings[i].first_token == 0 && output->completion_tokens > 0) timings[i].first_token = clock.seconds();
        timings[i].output_tokens = output->completion_tokens;
        if (output->finished()) {
          timings[i].finished = clock.seconds();
          done[i] = true;
          --remaining;
          break;
        }
      }
    }
  }
  return timings;
}

double mean(const std::vector<double>& values) {
  double total = 0;
  for (double value : values) total += value;
  return values.empty() ? 0 : total / static_cast<double>(values.size());
}

// The decode roofline (printed and in the JSON): the slower of the two bandwidth figures
// over the weight bytes read per token. Reading the KV cache is left out: at llama-bench's
// short contexts it is a few per cent of the weights.
void report_roofline(double bandwidth_before, double bandwidth_after, double bytes_per_token, double tokens_per_s,
                     nlohmann::ordered_json& result) {
  const double bandwidth = std::min(bandwidth_before, bandwidth_after);
  const double roofline = bandwidth * 1e9 / bytes_per_token;
  result["read_bandwidth_gbs_before"] = bandwidth_before;
  result["read_bandwidth_gbs_after"] = bandwidth_after;
  result["weight_bytes_per_token"] = bytes_per_token;
  result["roofline_tokens_per_s"] = roofline;
  result["roofline_fraction"] = tokens_per_s / roofline;
  std::printf("      %.1f MB of weights read per token; memory reads %.1f GB/s (%.1f before, %.1f after): "
              "roofline %.1f tokens/s, tg at %.0f%% of it\n",
              bytes_per_token / 1e6, bandwidth, bandwidth_before, bandwidth_after, roofline, 100.0 * tokens_per_s / roofline);
}

// Speculative decoding's figures (warm-up included): the share of drafts accepted and
// the tokens each verifying step emitted (1 without speculation).
void report_speculation(const EngineStats& stats, nlohmann::ordered_json& result) {
  result["draft_tokens"] = stats.spec_draft_tokens;
  result["draft_acceptance"] = stats.spec_acceptance();
  result["tokens_per_verifying_step"] = stats.spec_tokens_per_verifying_step();
  std::printf("  speculation: %lld drafts, %.1f%% accepted, %.2f tokens per verifying step\n",
              static_cast<long long>(stats.spec_draft_tokens), stats.spec_acceptance() * 100.0,
              stats.spec_tokens_per_verifying_step());
}

// Tensor parallelism: rank 0's share of the measured run spent in all-reduces and
// gathers (waiting for the other ranks counts: the step pays for it). The counters are
// read when the measurement starts (`start_bytes`, `start_seconds`) and now.
void report_communication(const Communicator& communicator, uint64_t start_bytes, double start_seconds, double seconds,
                          nlohmann::ordered_json& result) {
  const double communicating = communicator.seconds_communicating() - start_seconds;
  const uint64_t bytes = communicator.bytes_communicated() - start_bytes;
  result["ranks"] = communicator.size();
  result["communicated_bytes"] = bytes;
  result["communication_share"] = communicating / seconds;
  std::printf("  tensor parallelism: %d ranks; rank 0 all-reduced and gathered %.1f MB, %.1f%% of the time\n",
              communicator.size(), static_cast<double>(bytes) / 1e6, 100.0 * communicating / seconds);
}

}  // namespace

int bench_command(int argc, char** argv) {
  std::vector<OptionSpec> options = {
      {"model", "DIR", "checkpoint directory", ""},
      {"concurrency", "N", "requests in flight at once (serving form)", ""},
      {"num-prompts", "N", "requests in all (serving form; default: --concurrency)", ""},
      {"input-len", "L", "prompt tokens per request (serving form)", "128"},
      {"output-len", "K", "generated tokens per request (serving form)", "128"},
      {"pp", "N", "llama-bench prompt test: prefill N tokens of one sequence", ""},
      {"tg", "N", "llama-bench generation test: generate N tokens of one sequence", ""},
      {"repetitions", "N", "repeat the llama-bench tests and average", "1"},
      {"guided-json", "SCHEMA",
       "llama-bench form: each generation test runs twice, free and constrained to this JSON schema (a file or the "
       "text), and both rates are reported",
       ""},
      {"json", "", "print one JSON object with the results as the last line", ""}};
  for (OptionSpec& option : engine_option_specs()) options.push_back(std::move(option));
  const ArgParser parser(
      "ernie bench --model DIR (--concurrency N --input-len L --output-len K | --pp N --tg N) [--json]",
      "Offline engine benchmark (no HTTP). Prompts are random token ids; generation is greedy and ignores end "
      "tokens, so every request produces exactly its output length. Throughputs are aggregate tokens over wall "
      "time.",
      options);
  const ParsedArgs args = parser.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::fputs(parser.help_text().c_str(), stdout);
    return 0;
  }
  const bool llama_form = args.has("pp") || args.has("tg");
  if (llama_form == args.has("concurrency"))
    fail("give either --concurrency N (serving form) or --pp N and/or --tg N (llama-bench form)");

  EngineConfig config = engine_config_from_args(args);
  nlohmann::ordered_json result;
  result["model"] = args.get("model");
  result["quantization"] = config.quantization.empty() ? "none" : config.quantization;
  Random random(12345);
  EngineStats engine_stats;
  if (!llama_form) {
    const int64_t concurrency = args.get_int("concurrency");
    const int64_t num_prompts = args.has("num-prompts") ? args.get_int("num-prompts") : concurrency;
    const int64_t input_len = args.get_int("input-len"), output_len = args.get_int("output-len");
    if (concurrency < 1 || num_prompts < 1 || input_len < 1 || output_len < 1)
      fail("--concurrency, --num-prompts, --input-len and --output-len must be at least 1");
    if (!args.has("max-num-seqs")) config.max_num_seqs = static_cast<int>(concurrency);
    config.max_model_len = std::max(config.max_model_len, input_len + output_len);
    LoadedEngine engine = load_engine(resolve_model_path(args.get("model")), config, thread_count_from_flag(args.get_int("threads")));
    if (!engine.client) return 0;  // a tensor-parallel rank other than 0: rank 0 has stopped
    const int vocab = engine.model->config().vocab_size;
    // Warm-up: one short request pages the weights in.
    Stopwatch warm_clock;
    run_requests(*engine.client, {random_prompt(random, 8, vocab)}, 2, warm_clock, "warmup-");

    std::vector<RequestTiming> timings;
    const uint64_t bytes_before = engine.communicator ? engine.communicator->bytes_communicated() : 0;
    const double seconds_before = engine.communicator ? engine.communicator->seconds_communicating() : 0;
    Stopwatch clock;
    for (int64_t begin = 0; begin < num_prompts; begin += concurrency) {
      std::vector<std::vector<int32_t>> prompts;
      for (int64_t i = begin; i < std::min(num_prompts, begin + concurrency); ++i)
        prompts.push_back(random_prompt(random, input_len, vocab));
      const auto wave = run_requests(*engine.client, prompts, output_len, clock, "bench-" + std::to_string(begin) + "-");
      timings.insert(timings.end(), wave.begin(), wave.end());
    }
    const double wall = clock.seconds();
    std::vector<double> ttft, tpot;
    int64_t outputs = 0;
    for (const RequestTiming& timing : timings) {
      ttft.push_back(timing.first_token - timing.submitted);
      if (timing.output_tokens > 1)
        tpot.push_back((timing.finished - timing.first_token) / static_cast<double>(timing.output_tokens - 1));
      outputs += timing.output_tokens;
    }
    result["concurrency"] = concurrency;
    result["num_prompts"] = num_prompts;
    result["input_len"] = input_len;
    result["output_len"] = output_len;
    result["wall_seconds"] = wall;
    result["prompt_tokens_per_s"] = static_cast<double>(num_prompts * input_len) / wall;
    result["output_tokens_per_s"] = static_cast<double>(outputs) / wall;
    result["mean_ttft_ms"] = mean(ttft) * 1e3;
    result["mean_tpot_ms"] = mean(tpot) * 1e3;
    engine_stats = engine.client->stats();
    result["preemptions"] = engine_stats.preemptions;
    if (engine.communicator) report_communication(*engine.communicator, bytes_before, seconds_before, wall, result);
    std::printf("concurrency %lld, %lld prompts of %lld tokens, %lld output tokens each: %.2f s\n",
                static_cast<long long>(concurrency), static_cast<long long>(num_prompts),
                static_cast<long long>(input_len), static_cast<long long>(output_len), wall);
    std::printf("  prompt  %8.1f tokens/s\n  output  %8.1f tokens/s\n  TTFT    %8.1f ms (mean)\n  TPOT    %8.1f ms (mean)\n",
                result["prompt_tokens_per_s"].get<double>(), result["output_tokens_per_s"].get<double>(),
                result["mean_ttft_ms"].get<double>(), result["mean_tpot_ms"].get<double>());
  } else {
    const int64_t pp = args.has("pp") ? args.get_int("pp") : 0, tg = args.has("tg") ? args.get_int("tg") : 0;
    const int64_t repetitions = args.get_int("repetitions");
    if (pp < 0 || tg < 0 || repetitions < 1) fail("--pp and --tg must be >= 0 and --repetitions >= 1");
    config.max_num_seqs = 1;
    config.max_model_len = std::max<int64_t>(config.max_model_len, std::max(pp, tg) + 2);
    // The prompt test computes the whole prompt in one step, as llama-bench's batch does.
    if (!args.has("max-num-batched-tokens")) config.max_num_batched_tokens = std::max<int64_t>(pp, 512);
    config.prefix_caching = false;  // a repeated prompt must be recomputed, not served from the cache
    LoadedEngine engine = load_engine(resolve_model_path(args.get("model")), config, thread_count_from_flag(args.get_int("threads")));
    if (!engine.client) return 0;  // a tensor-parallel rank other than 0: rank 0 has stopped
    const int vocab = engine.model->config().vocab_size;
    // Warm-up, as llama-bench does: one prompt of the measured length pages the weights
    // in and sizes the step buffers, so the first repetition is not charged for it.
    Stopwatch warm_clock;
    run_requests(*engine.client, {random_prompt(random, std::max<int64_t>(pp, 8), vocab)}, 2, warm_clock, "warmup-");
    std::shared_ptr<const structured::CompiledConstraint> guided;
    if (args.has("guided-json")) {
      const std::string value = args.get("guided-json");
      guided = structured::compile({.kind = structured::ConstraintSpec::Kind::kJsonSchema,
                                    .text = std::filesystem::is_regular_file(value) ? read_text_file(value) : value});
      // The constraint's first masks are made once per parse state and kept; the warm-up
      // meets the cold ones, as a server's first request with a schema does.
      run_requests(*engine.client, {random_prompt(random, 1, vocab)}, tg + 1, warm_clock, "guided-warmup-", guided);
    }
    Stopwatch measured;  // the tests below, for the communication share
    const uint64_t bytes_before = engine.communicator ? engine.communicator->bytes_communicated() : 0;
    const double seconds_before = engine.communicator ? engine.communicator->seconds_communicating() : 0;
    std::vector<double> pp_rates, tg_rates, guided_rates, tg_weight_bytes;
    int64_t guided_tokens = 0;
    // The roofline: the machine's read bandwidth, measured right before and after the
    // tests, over the weight bytes the matmuls read per decoded token.
    const double bandwidth_before = tg > 0 ? measure_read_bandwidth(*engine.pool) : 0.0;
    // Decode rate of one sequence: the tokens after the first (which the prompt step
    // makes) over the time they took; a constrained one may end early, at the schema's end.
    const auto decode_rate = [&](const std::string& id, const std::shared_ptr<const structured::CompiledConstraint>& c) {
      Stopwatch clock;
      const uint64_t streamed = weight_bytes_streamed();
      const auto timing = run_requests(*engine.client, {random_prompt(random, 1, vocab)}, tg + 1, clock, id, c);
      // Every step of a one-token prompt reads the weights once, the prompt step too.
      if (!c) tg_weight_bytes.push_back(static_cast<double>(weight_bytes_streamed() - streamed) / timing[0].output_tokens);
      if (c) guided_tokens += timing[0].output_tokens - 1;
      return static_cast<double>(timing[0].output_tokens - 1) / (timing[0].finished - timing[0].first_token);
    };
    for (int64_t r = 0; r < repetitions; ++r) {
      if (pp > 0) {
        Stopwatch clock;
        const auto timing = run_requests(*engine.client, {random_prompt(random, pp, vocab)}, 1, clock, "pp-" + std::to_string(r));
        pp_rates.push_back(static_cast<double>(pp) / (timing[0].first_token - timing[0].submitted));
      }
      if (tg > 0) {
        // One prompt token, then tg generated: the first comes from the prompt step.
        tg_rates.push_back(decode_rate("tg-" + std::to_string(r), nullptr));
        if (guided) guided_rates.push_back(decode_rate("guided-" + std::to_string(r), guided));
      }
    }
    engine_stats = engine.client->stats();
    if (engine.communicator)
      report_communication(*engine.communicator, bytes_before, seconds_before, measured.seconds(), result);
    if (pp > 0) {
      result["pp"] = pp;
      result["pp_tokens_per_s"] = mean(pp_rates);
      std::printf("pp%lld  %8.1f tokens/s\n", static_cast<long long>(pp), mean(pp_rates));
    }
    if (tg > 0) {
      result["tg"] = tg;
      result["tg_tokens_per_s"] = mean(tg_rates);
      std::printf("tg%lld  %8.1f tokens/s\n", static_cast<long long>(tg), mean(tg_rates));
      report_roofline(bandwidth_before, measure_read_bandwidth(*engine.pool), mean(tg_weight_bytes), mean(tg_rates), result);
    }
    if (!guided_rates.empty()) {
      result["tg_guided_tokens_per_s"] = mean(guided_rates);
      result["guided_over_free"] = mean(guided_rates) / mean(tg_rates);
      result["tg_guided_tokens"] = guided_tokens;
      std::printf("tg%lld  %8.1f tokens/s constrained to the schema (%.1f%% of free; %lld constrained tokens)\n",
                  static_cast<long long>(tg), mean(guided_rates), 100.0 * mean(guided_rates) / mean(tg_rates),
                  static_cast<long long>(guided_tokens));
    }
  }
  if (config.speculative.enabled()) report_speculation(engine_stats, result);
  if (args.flag("json")) std::printf("%s\n", result.dump().c_str());
  return 0;
}

}  // namespace ernie
