#include "engine/speculative.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace ernie {
namespace {

// How far back the n-gram proposer looks, so that one step's proposals cost at most this
// many comparisons per request and n, whatever the context length.
constexpr size_t kNgramSearchWindow = 8192;

int int_in_range(const nlohmann::json& value, const std::string& key, int low, int high) {
  if (!value.is_number_integer() || value.get<int64_t>() < low || value.get<int64_t>() > high)
    fail("--speculative-config: ", key, " must be an integer in ", low, "..", high, ", got ", value.dump());
  return value.get<int>();
}

}  // namespace

const char* speculative_method_name(SpeculativeMethod method) {
  switch (method) {
    case SpeculativeMethod::kNone: return "none";
    case SpeculativeMethod::kMtp: return "mtp";
    case SpeculativeMethod::kNgram: return "ngram";
  }
  return "?";
}

SpeculativeConfig parse_speculative_config(const std::string& json_text) {
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception&) {
    fail("--speculative-config expects a JSON object, got \"", json_text, "\"");
  }
  if (!parsed.is_object()) fail("--speculative-config expects a JSON object, got ", parsed.dump());
  SpeculativeConfig config;
  std::optional<int> model_steps;
  for (const auto& [key, value] : parsed.items()) {
    if (key == "method") {
      const std::string method = value.is_string() ? value.get<std::string>() : value.dump();
      if (method == "mtp") config.method = SpeculativeMethod::kMtp;
      else if (method == "ngram" || method == "ngram_match") config.method = SpeculativeMethod::kNgram;
      else fail("--speculative-config: method \"", method, "\" is not supported (valid: mtp, ngram, ngram_match)");
    } else if (key == "num_speculative_tokens") {
      config.num_speculative_tokens = int_in_range(value, key, 1, kMaxSpeculativeTokens);
    } else if (key == "num_model_steps") {
      model_steps = int_in_range(value, key, 1, kMaxSpeculativeTokens);
    } else if (key == "mtp_strategy") {
      if (value != "default" && value != "with_ngram")
        fail("--speculative-config: mtp_strategy ", value.dump(), " is not known (valid: default, with_ngram)");
      config.mtp_with_ngram = value == "with_ngram";
    } else if (key == "max_ngram_size") {
      config.max_ngram_size = int_in_range(value, key, 1, 64);
    } else if (key == "min_ngram_size") {
      config.min_ngram_size = int_in_range(value, key, 1, 64);
    } else if (key == "model") {
      if (!value.is_string() && !value.is_null()) fail("--speculative-config: model must be a directory, got ", value.dump());
      if (value.is_string()) config.model = value.get<std::string>();
    } else if (key == "quantization" || key == "max_candidate_len" || key == "verify_window" ||
               key == "num_gpu_block_expand_ratio" || key == "verify_strategy" || key == "accept_policy" ||
               key == "benchmark_mode") {
      // FastDeploy's GPU verifier and memory knobs; verification here is exact (the
      // target's own draw must equal the draft), so they have nothing to tune.
    } else {
      fail("--speculative-config: unknown key \"", key,
           "\" (known: method, num_speculative_tokens, num_model_steps, mtp_strategy, max_ngram_size, min_ngram_size, "
           "model, and FastDeploy's quantization, max_candidate_len, verify_window, num_gpu_block_expand_ratio, "
           "verify_strategy, accept_policy, benchmark_mode)");
    }
  }
  if (config.method == SpeculativeMethod::kNone)
    fail("--speculative-config needs \"method\": \"mtp\" or \"ngram\"");
  if (config.min_ngram_size > config.max_ngram_size)
    fail("--speculative-config: min_ngram_size ", config.min_ngram_size, " is above max_ngram_size ",
         config.max_ngram_size);
  // MTP drafts one token per pass; FastDeploy's default is one pass, and with_ngram lets
  // n-gram matches fill the rest. Without with_ngram every draft needs a pass.
  config.num_model_steps = model_steps.value_or(config.mtp_with_ngram ? 1 : config.num_speculative_tokens);
  if (config.num_model_steps > config.num_speculative_tokens)
    fail("--speculative-config: num_model_steps ", config.num_model_steps, " exceeds num_speculative_tokens ",
         config.num_speculative_tokens);
  return config;
}

int DraftPlanner::plan(int decoding, int max_drafts) {
  const auto measured = [&](int rows) {
    return static_cast<size_t>(rows) < step_seconds_.size() ? step_seconds_[static_cast<size_t>(rows)] : 0.0;
  };
  // The plain step is measured first; a larger one, until measured, is assumed to cost
  // the same, so that it is tried.
  const double plain = decoding > 0 ? measured(decoding) : 0.0;
  if (plain <= 0) return 0;
  const auto seconds = [&](int rows) { return measured(rows) > 0 ? measured(rows) : plain; };
  int best = 0;
  double best_rate = 0;
  double expected = 0, run = 1;  // tokens per request: 1 + a + ... + a^j
  for (int drafts = 0; drafts <= max_drafts && decoding * (1 + drafts) <= kMaxVerifyRows; ++drafts) {
    expected += run;
    run *= acceptance_;
    const double rate = decoding * expected / seconds(decoding * (1 + drafts));
    if (rate > best_rate * 1.1) {  // a plan must beat the last by 10%: measurements are noisy
      best = drafts;
      best_rate = rate;
    }
  }
  if (best > 0 || max_drafts == 0) {
    plain_plans_ = 0;
    return best;
  }
  if (++plain_plans_ < kProbeEvery) return 0;
  plain_plans_ = 0;
  return 1;  // a probe
}

void DraftPlanner::record_step(int rows, double seconds) {
  if (rows <= 0 || rows > kMaxVerifyRows) return;
  if (step_seconds_.size() <= static_cast<size_t>(rows)) step_seconds_.resize(static_cast<size_t>(rows) + 1, 0.0);
  double& average = step_seconds_[static_cast<size_t>(rows)];
  average = average > 0 ? average + kWeight * (seconds - average) : seconds;
}

void DraftPlanner::record_verification(int drafts, int accepted) {
  if (drafts <= 0) return;
  acceptance_ += kWeight * (static_cast<double>(accepted) / drafts - acceptance_);
}

std::vector<int32_t> propose_ngram_drafts(std::span<const int32_t> context, int count, int min_n, int max_n) {
  const size_t length = context.size();
  const size_t window_start = length > kNgramSearchWindow ? length - kNgramSearchWindow : 0;
  for (int n = max_n; n >= min_n; --n) {
    const auto size = static_cast<size_t>(n);
    if (length <= size) continue;
    const std::span<const int32_t> tail = context.subspan(length - size);
    // The most recent earlier occurrence: its start lies before the tail's.
    for (size_t start = length - size; start-- > window_start;) {
      if (!std::equal(tail.begin(), tail.end(), context.begin() + static_cast<std::ptrdiff_t>(start))) continue;
      const size_t from = start + size;
      const size_t to = std::min(length, from + static_cast<size_t>(count));
      return {context.begin() + static_cast<std::ptrdiff_t>(from), context.begin() + static_cast<std::ptrdiff_t>(to)};
    }
  }
  return {};
}

}  // namespace ernie
