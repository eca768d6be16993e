#include "engine/engine.h"

#include <algorithm>

#include "util/error.h"
#include "util/log.h"

namespace ernie {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "?";
}

Engine::Engine(LanguageModel& model, const Tokenizer& tokenizer, const EngineConfig& config, int num_blocks,
               std::vector<int32_t> eos_token_ids)
    : model_(model),
      tokenizer_(tokenizer),
      config_(config),
      eos_token_ids_(std::move(eos_token_ids)),
      think_start_id_(tokenizer.token_id("<think>")),
      think_end_id_(tokenizer.token_id("</think>")),
      pool_(model.config().num_hidden_layers, model.kv_row_bytes(), config.block_size, num_blocks),
      cache_manager_(pool_, config.prefix_caching),
      scheduler_({config.max_num_seqs, config.effective_max_num_batched_tokens(), config.chunked_prefill,
                  !config.v1_scheduler, config.kv_cache_ratio},
                 cache_manager_),
      seeds_(config.seed) {
  validate_engine_config(config_, model_.config());
}

Engine::~Engine() = default;

bool Engine::is_eos(int32_t token) const {
  return std::find(eos_token_ids_.begin(), eos_token_ids_.end(), token) != eos_token_ids_.end();
}

bool Engine::prompt_leaves_model_thinking(const std::vector<int32_t>& prompt) const {
  for (auto token = prompt.rbegin(); token != prompt.rend(); ++token) {
    if (*token == think_end_id_) return false;
    if (*token == think_start_id_) return true;
  }
  return false;
}

int32_t Engine::apply_thinking_budget(EngineRequest& request, int32_t token) const {
  if (!request.thinking) return token;
  if (token == *think_end_id_) {
    request.thinking = false;
    return token;
  }
  if (request.reasoning_tokens >= *request.params.reasoning_max_tokens || is_eos(token)) {
    request.thinking = false;
    return *think_end_id_;
  }
  ++request.reasoning_tokens;
  return token;
}

void Engine::add_request(GenerateRequest request) {
  if (live_.count(request.id) != 0) fail("request id \"", request.id, "\" is already in use");
  const int64_t prompt_length = static_cast<int64_t>(request.prompt.size());
  if (prompt_length == 0) fail("the prompt is empty; at least one token is needed");
  if (prompt_length >= config_.max_model_len)
    fail("the prompt has ", prompt_length, " tokens but --max-model-len is ", config_.max_model_len,
         ", which must leave room for at least one generated token");
  const int vocab = model_.config().vocab_size;
  validate_prompt_tokens(request.prompt, vocab);
  validate_sampling_params(request.params, vocab);
  if (request.params.reasoning_max_tokens && !think_end_id_)
    fail("reasoning_max_tokens needs a model whose vocabulary has the </think> token, and this one has none");

  auto live = std::make_unique<Live>();
  EngineRequest& engine_request = live->request;
  engine_request.id = request.id;
  engine_request.tokens = std::move(request.prompt);
  engine_request.prompt_length = prompt_length;
  engine_request.fairness_group = request.fairness_group;
  engine_request.params = std::move(request.params);
  engine_request.max_total_tokens =
      std::min(config_.max_model_len, prompt_length + static_cast<int64_t>(engine_request.params.max_tokens));
  engine_request.arrival = std::chrono::steady_clock::now();
  engine_request.thinking = engine_request.params.reasoning_max_tokens && prompt_leaves_model_thinking(engine_request.tokens);
  const uint64_t default_seed = seeds_.next();
  engine_request.sampler = std::make_unique<RequestSampler>(
      engine_request.params, std::span<const int32_t>(engine_request.tokens), eos_token_ids_, default_seed,
      config_.sampling_class);
  live->text = std::make_unique<TextStream>(tokenizer_, engine_request.params.stop,
                                            engine_request.params.include_stop_str_in_output,
                                            std::move(request.visible_special_tokens));
  EngineRequest* pointer = &engine_request;
  live_[request.id] = std::move(live);
  scheduler_.add(pointer);
}

RequestOutput Engine::base_output(const EngineRequest& request) const {
  RequestOutput output;
  output.request_id = request.id;
  output.prompt_tokens = request.prompt_length;
  output.cached_tokens = request.cached_tokens.value_or(0);
  output.completion_tokens = request.num_output_tokens();
  return output;
}

void Engine::finish(Live& live, FinishReason reason, RequestOutput& output) {
  output.text += live.text->finish();
  output.finish_reason = reason;
  live.request.status = RequestStatus::kFinished;
  scheduler_.remove(&live.request);
  ++counters_.finished_requests;
}

std::optional<RequestOutput> Engine::abort_request(const std::string& id) {
  const auto found = live_.find(id);
  if (found == live_.end()) return std::nullopt;
  RequestOutput output = base_output(found->second->request);
  finish(*found->second, FinishReason::kAbort, output);
  live_.erase(found);
  return output;
}

std::vector<RequestOutput> Engine::step() {
  const SchedulerStep plan = scheduler_.schedule();
  counters_.preemptions += static_cast<int64_t>(plan.preempted.size());
  if (plan.chunks.empty()) return {};
  ++counters_.steps;

  // One packed batch: every scheduled chunk, each over its own block table. The batch
  // vectors are members so their capacity carries over from step to step.
  ForwardBatch& batch = step_batch_;
  batch.tokens.clear();
  batch.sequences.clear();
  batch.logit_rows.clear();
  std::vector<PagedKvCache>& caches = step_caches_;
  caches.clear();
  // batch.sequences points into `caches`, so it must not reallocate while filled.
  caches.reserve(plan.chunks.size());
  std::vector<const ScheduledChunk*>& sampling = step_sampling_;
  sampling.clear();
  for (const ScheduledChunk& chunk : plan.chunks) {
    EngineRequest& request = *chunk.request;
    caches.emplace_back(pool_, request.block_table);
    const int32_t first = static_cast<int32_t>(batch.tokens.size());
    batch.tokens.insert(batch.tokens.end(), request.tokens.begin() + chunk.start,
                        request.tokens.begin() + chunk.start + chunk.num_tokens);
    batch.sequences.push_back({&caches.back(), chunk.start, first, static_cast<int32_t>(chunk.num_tokens)});
    // A request samples when this chunk reaches its last token.
    if (chunk.start + chunk.num_tokens == request.num_tokens()) {
      batch.logit_rows.push_back(first + static_cast<int32_t>(chunk.num_tokens) - 1);
      sampling.push_back(&chunk);
    }
    if (chunk.start < request.prompt_length) counters_.prompt_tokens_computed += chunk.num_tokens;
  }
  std::vector<float>& logits = model_.forward(batch);

  for (const ScheduledChunk& chunk : plan.chunks) {
    chunk.request->num_computed_tokens += chunk.num_tokens;
    cache_manager_.register_computed_blocks(*chunk.request);
  }

  std::vector<RequestOutput> outputs;
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  for (size_t row = 0; row < sampling.size(); ++row) {
    EngineRequest& request = *sampling[row]->request;
    Live& live = *live_.at(request.id);
    SampledToken sampled = request.sampler->sample(std::span<float>(logits.data() + row * vocab, vocab));
    const int32_t token = apply_thinking_budget(request, sampled.token);
    if (token != sampled.token) {
      // Forced, not drawn: certain under the rule that put it there.
      sampled.token = token;
      sampled.logprob = 0.0f;
    }
    request.tokens.push_back(token);
    request.sampler->accept(token);
    ++counters_.generated_tokens;

    RequestOutput output = base_output(request);
    output.token_ids = {token};
    if (request.params.logprobs) output.logprobs = {sampled};
    const bool stop_token = std::find(request.params.stop_token_ids.begin(), request.params.stop_token_ids.end(),
                                      token) != request.params.stop_token_ids.end();
    std::optional<FinishReason> reason;
    if ((is_eos(token) && !request.params.ignore_eos) || stop_token) {
      reason = FinishReason::kStop;  // the end token itself has no text
    } else {
      const TextStream::Update update = live.text->push(token);
      output.text = update.text;
      if (update.stopped) reason = FinishReason::kStop;
    }
    if (!reason && request.num_tokens() >= request.max_total_tokens) reason = FinishReason::kLength;
    if (reason) {
      const std::string id = request.id;  // `request` lives inside the entry erased below
      finish(live, *reason, output);
      outputs.push_back(std::move(output));
      live_.erase(id);
    } else {
      outputs.push_back(std::move(output));
    }
  }
  return outputs;
}

EngineStats Engine::stats() const {
  EngineStats stats = counters_;
  stats.running = scheduler_.num_running();
  stats.waiting = scheduler_.num_waiting();
  const KvBlockPoolStats pool = pool_.stats();
  stats.blocks_total = pool.num_blocks;
  stats.blocks_free = pool.free_blocks;
  stats.blocks_cached = pool.cached_blocks;
  stats.prefix_cache = cache_manager_.stats();
  return stats;
}

}  // namespace ernie
