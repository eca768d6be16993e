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
      config_.sampling_class, config_.early_stop.enabled);
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

void Engine::refuse_long_waiters(std::vector<RequestOutput>& outputs) {
  if (!config_.max_waiting_time) return;
  const auto now = std::chrono::steady_clock::now();
  const auto limit = std::chrono::duration<double>(*config_.max_waiting_time);
  std::vector<std::string> refused;
  for (const auto& [id, live] : live_) {
    const EngineRequest& request = live->request;
    // Only a request never admitted: one preempted back into the queue has started.
    if (request.status == RequestStatus::kWaiting && !request.cached_tokens && now - request.arrival > limit)
      refused.push_back(id);
  }
  for (const std::string& id : refused) {
    Live& live = *live_.at(id);
    RequestOutput output = base_output(live.request);
    const double waited = std::chrono::duration<double>(now - live.request.arrival).count();
    output.error = str_cat("the request waited ", waited, " s without being admitted, longer than --max-waiting-time ",
                           *config_.max_waiting_time, " s; the server is at capacity, retry later");
    output.waited_too_long = true;
    finish(live, FinishReason::kError, output);
    outputs.push_back(std::move(output));
    live_.erase(id);
  }
}

void Engine::score_prompt_rows(const std::vector<PromptLogprobRow>& rows, std::span<const float> logits) {
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  for (size_t k = 0; k < rows.size(); ++k) {
    EngineRequest& request = *rows[k].request;
    const int64_t target = rows[k].position + 1;
    request.prompt_logprobs.push_back(score_prompt_token(logits.subspan(k * vocab, vocab),
                                                         request.tokens[static_cast<size_t>(target)],
                                                         static_cast<size_t>(*request.params.prompt_logprobs)));
    request.next_prompt_logprob = target + 1;
  }
}

bool Engine::stops_early(EngineRequest& request, const SampledToken& sampled) const {
  if (!config_.early_stop.enabled) return false;
  request.confident_run = sampled.probability > config_.early_stop.threshold ? request.confident_run + 1 : 0;
  if (request.confident_run < config_.early_stop.window_size) return false;
  log_info("request ", request.id, " stopped early: ", request.confident_run,
           " tokens in a row each had probability above ", config_.early_stop.threshold);
  return true;
}

std::vector<RequestOutput> Engine::step() {
  std::vector<RequestOutput> outputs;
  refuse_long_waiters(outputs);
  const SchedulerStep plan = scheduler_.schedule();
  counters_.preemptions += static_cast<int64_t>(plan.preempted.size());
  if (plan.chunks.empty()) return outputs;
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
  std::vector<PromptLogprobRow>& prompt_rows = step_prompt_rows_;
  prompt_rows.clear();
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
    // Prompt logprobs: the rows of prompt positions whose next prompt token is not scored
    // yet (a recomputation after preemption scores nothing twice).
    if (request.params.prompt_logprobs) {
      const int64_t end = std::min(chunk.start + chunk.num_tokens, request.prompt_length - 1);
      for (int64_t position = std::max(chunk.start, request.next_prompt_logprob - 1); position < end; ++position)
        prompt_rows.push_back({&request, position, first + static_cast<int32_t>(position - chunk.start)});
    }
    if (chunk.start < request.prompt_length) counters_.prompt_tokens_computed += chunk.num_tokens;
  }
  // Sampling rows first, then the prompt rows.
  for (const PromptLogprobRow& row : prompt_rows) batch.logit_rows.push_back(row.batch_row);
  std::vector<float>& logits = model_.forward(batch);

  for (const ScheduledChunk& chunk : plan.chunks) {
    chunk.request->num_computed_tokens += chunk.num_tokens;
    cache_manager_.register_computed_blocks(*chunk.request);
  }

  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  score_prompt_rows(prompt_rows, std::span<const float>(logits).subspan(sampling.size() * vocab));
  for (size_t row = 0; row < sampling.size(); ++row) {
    EngineRequest& request = *sampling[row]->request;
    Live& live = *live_.at(request.id);
    SampledToken sampled = request.sampler->sample(std::span<float>(logits.data() + row * vocab, vocab));
    // Early stop ends the request with the first end token in place of the drawn one, as
    // FastDeploy's stopper does.
    const bool early_stop = stops_early(request, sampled);
    const int32_t token = early_stop && !eos_token_ids_.empty() ? eos_token_ids_.front()
                                                                : apply_thinking_budget(request, sampled.token);
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
    if (request.num_output_tokens() == 1) output.prompt_logprobs = std::move(request.prompt_logprobs);
    const bool stop_token = std::find(request.params.stop_token_ids.begin(), request.params.stop_token_ids.end(),
                                      token) != request.params.stop_token_ids.end();
    std::optional<FinishReason> reason;
    if (early_stop || (is_eos(token) && !request.params.ignore_eos) || stop_token) {
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
