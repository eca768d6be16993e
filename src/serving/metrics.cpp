#include "serving/metrics.h"

#include <charconv>

namespace ernie {
namespace {

// The shortest text that reads back as the same double ("0.3", not
// "0.29999999999999999"), as Python's prometheus_client writes bucket bounds.
std::string number(double value) {
  char text[32];
  const auto result = std::to_chars(text, text + sizeof text, value);
  return std::string(text, result.ptr);
}

void gauge(const std::string& name, const std::string& help, double value, std::string& out) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + " " + number(value) + "\n";
}

void counter(const std::string& name, const std::string& help, double value, std::string& out) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " counter\n" + name + " " + number(value) + "\n";
}

// FastDeploy's spec_decode_* series: drafts verified, accepted and the tokens the
// verifying steps emitted; efficiency is emitted over the most those steps could emit.
void render_speculative(const EngineStats& engine, std::string& out) {
  const std::string p = "fastdeploy:spec_decode_";
  gauge(p + "draft_acceptance_rate", "Accepted share of the speculative drafts verified",
        engine.spec_acceptance(), out);
  gauge(p + "efficiency", "Tokens emitted by verifying steps over the most they could emit (1 + drafts each)",
        engine.spec_efficiency(), out);
  counter(p + "num_draft_tokens_total", "Speculative draft tokens verified", static_cast<double>(engine.spec_draft_tokens), out);
  counter(p + "num_accepted_tokens_total", "Speculative draft tokens accepted",
          static_cast<double>(engine.spec_accepted_tokens), out);
  counter(p + "num_emitted_tokens_total", "Tokens emitted by steps that verified drafts",
          static_cast<double>(engine.spec_emitted_tokens), out);
  const std::string name = p + "draft_single_head_acceptance_rate";
  out += "# HELP " + name + " Accepted share of the drafts at each draft position\n# TYPE " + name + " gauge\n";
  for (size_t head = 0; head < engine.spec_drafted_at.size(); ++head)
    out += name + "{head=\"" + std::to_string(head) + "\"} " +
           number(EngineStats::ratio(engine.spec_accepted_at[head], engine.spec_drafted_at[head])) + "\n";
}

// FastDeploy's 1-2-5 token buckets up to 33792.
std::vector<double> token_buckets() {
  std::vector<double> bounds;
  for (double scale = 1; scale <= 10000; scale *= 10)
    for (double step : {1.0, 2.0, 5.0}) bounds.push_back(step * scale);
  bounds.push_back(33792);
  return bounds;
}

const std::vector<double> kLatencyBuckets = {0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680};

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t bucket = 0;
  while (bucket < bounds_.size() && value > bounds_[bucket]) ++bucket;
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& help, std::string& out) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + number(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

ServingMetrics::ServingMetrics(std::string cache_labels)
    : cache_labels_(std::move(cache_labels)),
      ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5, 10}),
      tpot_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}),
      e2e_(kLatencyBuckets),
      queue_(kLatencyBuckets),
      inference_(kLatencyBuckets),
      prefill_(kLatencyBuckets),
      decode_(kLatencyBuckets),
      prompt_lengths_(token_buckets()),
      generation_lengths_(token_buckets()),
      max_tokens_(token_buckets()) {}

void ServingMetrics::request_received() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_;
}

void ServingMetrics::request_finished(const FinishedRequestFigures& figures) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (figures.success) ++successes_;
  prompt_tokens_ += static_cast<uint64_t>(figures.prompt_tokens);
  generation_tokens_ += static_cast<uint64_t>(figures.generation_tokens);
  if (figures.ttft_seconds > 0) ttft_.observe(figures.ttft_seconds);
  if (figures.generation_tokens > 1)
    tpot_.observe((figures.e2e_seconds - figures.ttft_seconds) / static_cast<double>(figures.generation_tokens - 1));
  e2e_.observe(figures.e2e_seconds);
  queue_.observe(figures.queue_seconds);
  inference_.observe(figures.inference_seconds);
  last_inference_ = figures.inference_seconds;
  if (figures.ttft_seconds > 0) {
    prefill_.observe(figures.prefill_seconds);
    decode_.observe(figures.decode_seconds);
    last_ttft_ = figures.ttft_seconds;
  }
  prompt_lengths_.observe(static_cast<double>(figures.prompt_tokens));
  generation_lengths_.observe(static_cast<double>(figures.generation_tokens));
  max_tokens_.observe(static_cast<double>(figures.max_tokens));
}

std::string ServingMetrics::render(const EngineStats& engine, uint64_t kv_resident_bytes, int max_num_seqs) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  const std::string p = "fastdeploy:";
  counter(p + "requests_number", "Requests received", static_cast<double>(requests_), out);
  counter(p + "request_success_total", "Requests that finished without error", static_cast<double>(successes_), out);
  gauge(p + "num_requests_running", "Requests running in the engine", static_cast<double>(engine.running), out);
  gauge(p + "num_requests_waiting", "Requests waiting for admission", static_cast<double>(engine.waiting), out);
  counter(p + "prompt_tokens_total", "Prompt tokens of finished requests", static_cast<double>(prompt_tokens_), out);
  counter(p + "generation_tokens_total", "Generated tokens of finished requests", static_cast<double>(generation_tokens_), out);
  ttft_.render(p + "time_to_first_token_seconds", "Time to first token", out);
  tpot_.render(p + "time_per_output_token_seconds", "Time per output token after the first", out);
  e2e_.render(p + "e2e_request_latency_seconds", "Request latency from arrival to finish", out);
  queue_.render(p + "request_queue_time_seconds", "Time from arrival to submission to the engine", out);
  inference_.render(p + "request_inference_time_seconds", "Time from submission to the engine to the last output", out);
  prefill_.render(p + "request_prefill_time_seconds", "Time from submission to the first token", out);
  decode_.render(p + "request_decode_time_seconds", "Time from the first token to the last output", out);
  gauge(p + "first_token_latency", "Time to first token of the latest request", last_ttft_, out);
  gauge(p + "infer_latency", "Inference time of the latest request", last_inference_, out);
  prompt_lengths_.render(p + "request_prompt_tokens", "Prompt tokens per request", out);
  generation_lengths_.render(p + "request_generation_tokens", "Generated tokens per request", out);
  max_tokens_.render(p + "request_params_max_tokens", "max_tokens per request", out);
  gauge(p + "batch_size", "Requests in the current batch", static_cast<double>(engine.running), out);
  gauge(p + "max_batch_size", "--max-num-seqs", max_num_seqs, out);
  gauge(p + "available_batch_size", "Free batch slots", std::max(0, max_num_seqs - static_cast<int>(engine.running)), out);
  gauge(p + "max_gpu_block_num", "KV cache blocks in all (in RAM on a CPU)", engine.blocks_total, out);
  gauge(p + "free_gpu_block_num", "Unreferenced KV cache blocks", engine.blocks_free, out);
  gauge(p + "available_gpu_block_num", "KV cache blocks available to new requests", engine.blocks_free, out);
  gauge(p + "available_gpu_resource", "Share of KV cache blocks free",
        engine.blocks_total > 0 ? static_cast<double>(engine.blocks_free) / engine.blocks_total : 0.0, out);
  // Not one of FastDeploy's: on a CPU the pool is reserved up front but enters RAM as
  // its blocks are first written, so RSS alone does not say what the server holds.
  gauge("ernie_kv_cache_resident_bytes", "Bytes of the KV cache pool in RAM (it fills as blocks are first used)",
        static_cast<double>(kv_resident_bytes), out);
  gauge(p + "max_cpu_block_num", "Blocks of the second (--swap-space) cache tier", engine.swap.capacity_blocks, out);
  out += "# HELP " + p + "cache_config_info The KV cache configuration, as labels\n# TYPE " + p +
         "cache_config_info gauge\n" + p + "cache_config_info{" + cache_labels_ + "} 1\n";
  gauge(p + "gpu_cache_usage_perc", "Share of KV cache blocks in use",
        engine.blocks_total > 0 ? 1.0 - static_cast<double>(engine.blocks_free) / engine.blocks_total : 0.0, out);
  const PrefixCacheStats& prefix = engine.prefix_cache;
  gauge(p + "hit_req_rate", "Share of requests that reused cached prefix blocks",
        prefix.queries > 0 ? static_cast<double>(prefix.hits) / static_cast<double>(prefix.queries) : 0.0, out);
  gauge(p + "hit_token_rate", "Share of prompt tokens served by the prefix cache",
        prefix.queried_tokens > 0 ? static_cast<double>(prefix.hit_tokens) / static_cast<double>(prefix.queried_tokens) : 0.0,
        out);
  // The second tier's hits are part of the prefix cache's; the first tier's are the rest.
  const double swapped_in = static_cast<double>(engine.swap.swapped_in * engine.swap.block_size);
  const double first_tier = static_cast<double>(prefix.hit_tokens) - swapped_in;
  const double queried = static_cast<double>(prefix.queried_tokens);
  gauge(p + "gpu_hit_token_rate", "Share of prompt tokens served by the first (in-RAM) cache tier",
        queried > 0 ? first_tier / queried : 0.0, out);
  gauge(p + "prefix_cache_token_num", "Prompt tokens served by the prefix cache", static_cast<double>(prefix.hit_tokens), out);
  gauge(p + "prefix_gpu_cache_token_num", "Prompt tokens served by the first (in-RAM) cache tier", first_tier, out);
  gauge(p + "cpu_hit_token_rate", "Share of prompt tokens served by the second (--swap-space) tier",
        queried > 0 ? swapped_in / queried : 0.0, out);
  gauge(p + "prefix_cpu_cache_token_num", "Prompt tokens served by the second (--swap-space) tier", swapped_in, out);
  gauge(p + "prefix_ssd_cache_token_num", "Prompt tokens served from disk: none yet", 0, out);
  render_speculative(engine, out);
  return out;
}

}  // namespace ernie
