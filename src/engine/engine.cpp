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
      pool_(config.kv_layers(model.config()), model.kv_row_bytes(), config.block_size, num_blocks),
      cache_manager_(pool_, config.prefix_caching),
      scheduler_({config.max_num_seqs, config.effective_max_num_batched_tokens(), config.chunked_prefill,
                  !config.v1_scheduler, config.kv_cache_ratio},
                 cache_manager_),
      seeds_(config.seed) {
  validate_engine_config(config_, model_.config());
  if (config_.swap_space_gb > 0) {
    pool_.enable_swap(static_cast<uint64_t>(config_.swap_space_gb * (1ull << 30)));
    const KvSwapStats swap = pool_.swap_tier()->stats();
    log_info("KV swap tier: ", swap.capacity_blocks, " blocks (", config_.swap_space_gb,
             " GB) on local disk for evicted prefix-cache blocks");
  }
  if (config_.speculative.mtp_drafts() > 0 && !model_.has_mtp())
    fail("--speculative-config method \"mtp\" needs a checkpoint with an MTP head (config.json ",
         "num_nextn_predict_layers >= 1 and mtp_* tensors); this one has none: use method \"ngram\"");
  if (config_.speculative.mtp_drafts() > 0) model_.prepare_mtp();
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
  if (request.multimodal) {
    if (!model_.has_vision()) fail("this model takes no images or video");
    if (request.multimodal->prompt_length != prompt_length)
      fail("internal: the multimodal inputs describe ", request.multimodal->prompt_length, " prompt tokens, not ",
           prompt_length);
  }

  auto live = std::make_unique<Live>();
  EngineRequest& engine_request = live->request;
  engine_request.id = request.id;
  engine_request.tokens = std::move(request.prompt);
  engine_request.prompt_length = prompt_length;
  engine_request.fairness_group = request.fairness_group;
  engine_request.multimodal = std::move(request.multimodal);
  engine_request.params = std::move(request.params);
  engine_request.max_total_tokens =
      std::min(config_.max_model_len, prompt_length + static_cast<int64_t>(engine_request.params.max_tokens));
  engine_request.arrival = std::chrono::steady_clock::now();
  engine_request.thinking = engine_request.params.reasoning_max_tokens && prompt_leaves_model_thinking(engine_request.tokens);
  // Prompt logprobs need the logits of every prompt position, and images their features:
  // such prompts are computed here.
  engine_request.remote_prefill =
      remote_ != nullptr && prompt_length >= 2 && prompt_length > local_prompt_tokens_ && !engine_request.multimodal &&
      !engine_request.params.prompt_logprobs;
  engine_request.kv_export = std::move(request.kv_export);
  const uint64_t default_seed = seeds_.next();
  engine_request.sampler = std::make_unique<RequestSampler>(
      engine_request.params, std::span<const int32_t>(engine_request.tokens), eos_token_ids_, default_seed,
      config_.sampling_class, config_.early_stop.enabled);
  if (request.constraint) {
    if (!guided_) guided_ = std::make_unique<GuidedDecoding>(tokenizer_, vocab, eos_token_ids_);
    engine_request.guide = std::make_unique<GuidedState>(guided_->begin(request.constraint, request.visible_special_tokens));
    engine_request.guide->waits_for_think_end = request.constrain_after_reasoning && think_end_id_.has_value();
  }
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
  // A prefill instance may still be writing into the blocks: stop it before they go back.
  if (live.request.status == RequestStatus::kRemote && remote_) remote_->cancel(live.request.id);
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
  start_remote_prefills(plan.remote_started);
  if (plan.chunks.empty()) return outputs;
  ++counters_.steps;
  const auto started = std::chrono::steady_clock::now();
  // What the draft planner measures, read before any request of the step finishes.
  bool decode_only = config_.speculative.enabled();
  int rows = 0;
  for (const ScheduledChunk& chunk : plan.chunks) {
    if (!decode_only) break;
    decode_only = chunk.start >= chunk.request->prompt_length;
    rows += static_cast<int>(chunk.num_tokens);
  }

  // One packed batch: every scheduled chunk, each over its own block table. The batch
  // vectors are members so their capacity carries over from step to step.
  ForwardBatch& batch = step_batch_;
  batch.tokens.clear();
  batch.sequences.clear();
  batch.logit_rows.clear();
  batch.rope_positions.clear();
  batch.input_embeddings.clear();
  std::vector<PagedKvCache>& caches = step_caches_;
  caches.clear();
  // batch.sequences points into `caches`, so it must not reallocate while filled.
  caches.reserve(plan.chunks.size());
  std::vector<StepChunk>& chunks = step_chunks_;
  chunks.clear();
  std::vector<PromptLogprobRow>& prompt_rows = step_prompt_rows_;
  prompt_rows.clear();
  for (const ScheduledChunk& chunk : plan.chunks) {
    EngineRequest& request = *chunk.request;
    caches.emplace_back(pool_, request.block_table);
    const int32_t first = static_cast<int32_t>(batch.tokens.size());
    // The request's own tokens, then (a decode) the drafts the scheduler made room for.
    const int64_t own = std::min(chunk.num_tokens, request.num_tokens() - chunk.start);
    const int64_t drafts = chunk.num_tokens - own;
    batch.tokens.insert(batch.tokens.end(), request.tokens.begin() + chunk.start,
                        request.tokens.begin() + chunk.start + own);
    batch.tokens.insert(batch.tokens.end(), request.drafts.begin(), request.drafts.begin() + drafts);
    batch.sequences.push_back({&caches.back(), chunk.start, first, static_cast<int32_t>(chunk.num_tokens)});
    StepChunk step_chunk;
    step_chunk.request = &request;
    step_chunk.first_row = first;
    step_chunk.start = chunk.start;
    step_chunk.own = own;
    step_chunk.drafts = static_cast<int>(drafts);
    step_chunk.valid_rows = own;
    // A request samples when this chunk reaches its last token: that row and every
    // draft's row.
    if (chunk.start + own == request.num_tokens()) {
      step_chunk.first_logit = static_cast<int32_t>(batch.logit_rows.size());
      for (int64_t row = own - 1; row < chunk.num_tokens; ++row) batch.logit_rows.push_back(first + static_cast<int32_t>(row));
    }
    chunks.push_back(step_chunk);
    // Prompt logprobs: the rows of prompt positions whose next prompt token is not scored
    // yet (a recomputation after preemption scores nothing twice).
    if (request.params.prompt_logprobs) {
      const int64_t end = std::min(chunk.start + own, request.prompt_length - 1);
      for (int64_t position = std::max(chunk.start, request.next_prompt_logprob - 1); position < end; ++position)
        prompt_rows.push_back({&request, position, first + static_cast<int32_t>(position - chunk.start)});
    }
    if (chunk.start < request.prompt_length) counters_.prompt_tokens_computed += own;
  }
  add_multimodal_rows(plan, batch);
  // Sampling rows first, then the prompt rows.
  const size_t sampling_rows = batch.logit_rows.size();
  for (const PromptLogprobRow& row : prompt_rows) batch.logit_rows.push_back(row.batch_row);
  start_masks(chunks);
  export_layers_of(chunks, batch);
  std::vector<float>& logits = model_.forward(batch);
  if (!step_masks_.empty()) guided_->wait_masks();

  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  score_prompt_rows(prompt_rows, std::span<const float>(logits).subspan(sampling_rows * vocab));
  for (StepChunk& chunk : chunks) {
    EngineRequest& request = *chunk.request;
    if (chunk.first_logit < 0) {
      request.num_computed_tokens += chunk.own;  // a prompt chunk that does not sample
      cache_manager_.register_computed_blocks(request);
      continue;
    }
    outputs.push_back(emit_tokens(chunk, logits.data() + static_cast<size_t>(chunk.first_logit) * vocab));
  }
  if (config_.speculative.enabled()) {
    propose_drafts(chunks);
    for (const StepChunk& chunk : chunks)
      if (chunk.request && chunk.request->guide && !chunk.request->drafts.empty()) constrain_drafts(*chunk.request);
    // The planner learns what a decode-only step costs by its rows, drafting included:
    // from steady steps only, which proposed as many rows as they verified (a step that
    // starts or stops drafting pays for one plan and verifies another).
    int proposed = 0;
    for (const StepChunk& chunk : chunks)
      if (chunk.request && chunk.first_logit >= 0) proposed += 1 + static_cast<int>(chunk.request->drafts.size());
    if (decode_only && proposed == rows) planner_.record_step(rows, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  return outputs;
}

void Engine::start_remote_prefills(const std::vector<EngineRequest*>& started) {
  for (EngineRequest* request : started) {
    RemotePrefillTask task;
    task.request_id = request->id;
    task.tokens.assign(request->tokens.begin(), request->tokens.begin() + request->prompt_length - 1);
    task.first_position = request->num_computed_tokens;
    task.block_table = request->block_table;
    remote_->start(std::move(task));
  }
}

void Engine::complete_remote_prefill(const std::string& request_id, bool succeeded) {
  const auto found = live_.find(request_id);
  if (found == live_.end() || found->second->request.status != RequestStatus::kRemote) return;
  EngineRequest& request = found->second->request;
  if (succeeded) {
    request.num_computed_tokens = request.prompt_length - 1;
    cache_manager_.register_computed_blocks(request);
  }
  scheduler_.resume_remote(&request);
}

void Engine::export_layers_of(const std::vector<StepChunk>& chunks, ForwardBatch& batch) {
  batch.after_layer = nullptr;
  bool any = false;
  for (const StepChunk& chunk : chunks) any = any || chunk.request->kv_export != nullptr;
  if (!any) return;
  batch.after_layer = [this, &chunks](int layer) {
    for (const StepChunk& chunk : chunks)
      if (chunk.request->kv_export)
        chunk.request->kv_export->layer_computed(pool_, chunk.request->block_table, layer, chunk.start, chunk.own);
  };
}

void Engine::add_multimodal_rows(const SchedulerStep& plan, ForwardBatch& batch) const {
  bool any = false;
  for (const ScheduledChunk& chunk : plan.chunks) any = any || chunk.request->multimodal != nullptr;
  if (!any) return;
  // Every row gets its 3-D position (a text request's is (p, p, p)); placeholder rows of
  // a prompt chunk get their image's features.
  batch.rope_positions.resize(3 * batch.tokens.size());
  batch.input_embeddings.assign(batch.tokens.size(), nullptr);
  size_t row = 0;
  for (const ScheduledChunk& chunk : plan.chunks) {
    const MultimodalPrompt* multimodal = chunk.request->multimodal.get();
    for (int64_t index = chunk.start; index < chunk.start + chunk.num_tokens; ++index, ++row) {
      int32_t* thw = batch.rope_positions.data() + 3 * row;
      if (multimodal == nullptr) {
        thw[0] = thw[1] = thw[2] = static_cast<int32_t>(index);
        continue;
      }
      multimodal->position(index, thw);
      if (multimodal->has_features(index)) batch.input_embeddings[row] = multimodal->feature(index);
    }
  }
}

RequestOutput Engine::emit_tokens(StepChunk& chunk, float* logits) {
  EngineRequest& request = *chunk.request;
  Live& live = *live_.at(request.id);
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  RequestOutput output = base_output(request);
  const bool first_tokens = request.num_output_tokens() == 0;
  // Row r holds the target's logits after the request's last token and the first r
  // drafts. Each row's token is drawn exactly as without speculation; the next row
  // counts only while the drawn token equals the draft that row was computed with, so
  // the request emits the very tokens (and, seeded, the very draws) it would emit alone.
  int accepted = 0;
  std::optional<FinishReason> reason;
  for (int row = 0; row <= chunk.drafts && !reason; ++row) {
    std::span<float> row_logits(logits + static_cast<size_t>(row) * vocab, vocab);
    const MaskJob* masks = chunk.mask_job >= 0 ? &step_masks_[static_cast<size_t>(chunk.mask_job)] : nullptr;
    if (masks && !masks->error.empty()) {
      output.error = masks->error;
      reason = FinishReason::kError;
      break;
    }
    SampledToken sampled;
    try {
      sampled = request.sampler->sample(row_logits, masks ? masks->rows[static_cast<size_t>(row)] : nullptr);
    } catch (const Error& error) {
      if (!masks) throw;
      // A grammar that needs bytes no token of this vocabulary spells ends here.
      output.error = error.what();
      reason = FinishReason::kError;
      break;
    }
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
    output.token_ids.push_back(token);
    if (request.params.logprobs) output.logprobs.push_back(std::move(sampled));
    const bool stop_token = std::find(request.params.stop_token_ids.begin(), request.params.stop_token_ids.end(),
                                      token) != request.params.stop_token_ids.end();
    if (request.guide) {
      if (std::optional<std::string> error = follow_constraint(request, token)) {
        output.error = std::move(*error);
        reason = FinishReason::kError;
        break;
      }
    }
    // A constrained request ends at the end token its grammar allowed, ignore_eos or not.
    const bool ends = is_eos(token) && (!request.params.ignore_eos || (request.guide && !request.guide->waits_for_think_end));
    if (early_stop || ends || stop_token) {
      reason = FinishReason::kStop;  // the end token itself has no text
    } else {
      const TextStream::Update update = live.text->push(token);
      output.text += update.text;
      if (update.stopped) reason = FinishReason::kStop;
    }
    if (!reason && request.num_tokens() >= request.max_total_tokens) reason = FinishReason::kLength;
    if (row == chunk.drafts || token != request.drafts[static_cast<size_t>(row)]) break;
    ++accepted;
  }
  if (chunk.drafts > 0) {
    // A request whose drafts keep failing stops drafting for a while: each rejected
    // verification cost a row of compute for nothing.
    planner_.record_verification(chunk.drafts, accepted);
    request.draft_misses = accepted == 0 ? request.draft_misses + 1 : 0;
    if (request.draft_misses >= kDraftMissesBeforePause) {
      request.draft_misses = 0;
      request.draft_pause = kDraftPauseSteps;
    }
    request.draft_tokens += chunk.drafts;
    request.accepted_draft_tokens += accepted;
    counters_.spec_draft_tokens += chunk.drafts;
    counters_.spec_accepted_tokens += accepted;
    counters_.spec_emitted_tokens += static_cast<int64_t>(output.token_ids.size());
    counters_.spec_capacity_tokens += 1 + chunk.drafts;
    for (int i = 0; i < chunk.drafts; ++i) {
      ++counters_.spec_drafted_at[static_cast<size_t>(i)];
      if (i < accepted) ++counters_.spec_accepted_at[static_cast<size_t>(i)];
    }
  }
  // The keys and values of the request's tokens and of its accepted drafts stand; those
  // of rejected drafts are overwritten by later steps, and blocks only they filled go back.
  chunk.valid_rows = chunk.own + accepted;
  request.num_computed_tokens = chunk.start + chunk.valid_rows;
  request.drafts.clear();
  cache_manager_.register_computed_blocks(request);
  if (chunk.drafts > accepted) cache_manager_.release_slots_beyond(request, request.num_tokens());
  if (first_tokens) output.prompt_logprobs = std::move(request.prompt_logprobs);
  output.completion_tokens = request.num_output_tokens();
  output.draft_tokens = request.draft_tokens;
  output.accepted_draft_tokens = request.accepted_draft_tokens;
  if (reason) {
    const std::string id = request.id;  // `request` lives inside the entry erased below
    finish(live, *reason, output);
    live_.erase(id);
    chunk.request = nullptr;
  }
  return output;
}

void Engine::start_masks(std::vector<StepChunk>& chunks) {
  step_masks_.clear();
  for (StepChunk& chunk : chunks) {
    chunk.mask_job = -1;
    const EngineRequest& request = *chunk.request;
    if (chunk.first_logit < 0 || !request.guide || request.guide->waits_for_think_end) continue;
    chunk.mask_job = static_cast<int>(step_masks_.size());
    MaskJob job;
    job.guide = request.guide.get();
    job.drafts.assign(request.drafts.begin(), request.drafts.begin() + chunk.drafts);
    step_masks_.push_back(std::move(job));
  }
  if (!step_masks_.empty()) guided_->start_masks(step_masks_);
}

std::optional<std::string> Engine::follow_constraint(EngineRequest& request, int32_t token) {
  GuidedState& guide = *request.guide;
  if (guide.waits_for_think_end) {
    if (token == think_end_id_) guide.waits_for_think_end = false;
    return std::nullopt;
  }
  if (is_eos(token)) return std::nullopt;  // allowed only where the grammar accepts
  try {
    guide.state = guided_->advance(*guide.grammar, guide.state, token);
  } catch (const Error& error) {
    return error.what();
  }
  if (guide.state == structured::GrammarMatcher::kDead)
    return str_cat("internal: token ", token, " was emitted against the request's output constraint");
  return std::nullopt;
}

void Engine::constrain_drafts(EngineRequest& request) {
  GuidedState& guide = *request.guide;
  size_t keep = 0;
  if (guide.waits_for_think_end) {
    // Rows after </think> would need the constraint's masks, which are made only once
    // the request has left its reasoning: stop the drafts before it.
    while (keep < request.drafts.size() && request.drafts[keep] != think_end_id_) ++keep;
  } else {
    int32_t state = guide.state;
    while (keep < request.drafts.size()) {
      const int32_t draft = request.drafts[keep];
      if (is_eos(draft)) {
        keep += guide.grammar->matcher.state(state).accepting ? 1 : 0;
        break;
      }
      try {
        state = guided_->advance(*guide.grammar, state, draft);
      } catch (const Error&) {
        state = structured::GrammarMatcher::kDead;  // the request's next token meets the same limit and ends it
      }
      if (state == structured::GrammarMatcher::kDead) break;
      ++keep;
    }
  }
  request.drafts.resize(keep);
}

int Engine::draft_budget(EngineRequest& request) const {
  if (request.draft_pause > 0) {
    --request.draft_pause;
    return 0;
  }
  // Never past the request's output limit.
  const int64_t room = request.max_total_tokens - request.num_tokens();
  return static_cast<int>(std::clamp<int64_t>(room, 0, config_.speculative.num_speculative_tokens));
}

void Engine::propose_drafts(std::vector<StepChunk>& chunks) {
  const SpeculativeConfig& spec = config_.speculative;
  // How many drafts each request gets is the planner's call: none once the batch is
  // compute-bound or acceptance is low (speculative.h).
  int decoding = 0;
  for (StepChunk& chunk : chunks) {
    chunk.draft_budget = 0;
    if (chunk.request && chunk.first_logit >= 0) ++decoding;
  }
  if (decoding == 0) return;
  const int planned = spec.adaptive ? planner_.plan(decoding, spec.num_speculative_tokens) : spec.num_speculative_tokens;
  const int per_request = std::min(planned, (spec.max_verify_rows - decoding) / decoding);
  if (per_request <= 0) return;
  for (StepChunk& chunk : chunks)
    if (chunk.request && chunk.first_logit >= 0) chunk.draft_budget = std::min(per_request, draft_budget(*chunk.request));
  if (spec.mtp_drafts() > 0) draft_with_mtp(chunks);
  if (spec.method == SpeculativeMethod::kMtp && !spec.mtp_with_ngram) return;
  for (const StepChunk& chunk : chunks) {
    if (chunk.draft_budget == 0) continue;
    EngineRequest& request = *chunk.request;
    const auto wanted = static_cast<size_t>(chunk.draft_budget);
    if (request.drafts.size() >= wanted) continue;
    // n-gram drafts: the whole proposal, or (mtp_strategy with_ngram) the rest after the
    // MTP's, matched on the context extended by them (copied only then).
    std::span<const int32_t> context = request.tokens;
    std::vector<int32_t> extended;
    if (!request.drafts.empty()) {
      extended = request.tokens;
      extended.insert(extended.end(), request.drafts.begin(), request.drafts.end());
      context = extended;
    }
    const std::vector<int32_t> more = propose_ngram_drafts(context, static_cast<int>(wanted - request.drafts.size()),
                                                           spec.min_ngram_size, spec.max_ngram_size);
    request.drafts.insert(request.drafts.end(), more.begin(), more.end());
  }
}

void Engine::draft_with_mtp(const std::vector<StepChunk>& chunks) {
  // Every row of this step whose next token is known runs through the MTP head, so its
  // own KV cache keeps up with the target's: row t holds the token at t + 1 and the
  // target's hidden state at t. Drafting requests read the logits of their last row.
  const int64_t h = model_.config().hidden_size;
  const std::span<const float> hidden = model_.last_hidden_states();
  if (hidden.size() != step_batch_.tokens.size() * static_cast<size_t>(h))
    fail("internal: the model kept ", hidden.size(), " hidden values for a step of ", step_batch_.tokens.size(),
         " tokens; the MTP head needs ", h, " per token");
  ForwardBatch& batch = mtp_batch_;
  batch.tokens.clear();
  batch.sequences.clear();
  batch.logit_rows.clear();
  mtp_hidden_.clear();
  std::vector<PagedKvCache>& caches = step_caches_;
  caches.clear();
  caches.reserve(chunks.size());
  std::vector<MtpDraft>& drafting = mtp_drafting_;
  drafting.clear();
  for (const StepChunk& chunk : chunks) {
    if (!chunk.request) continue;
    EngineRequest& request = *chunk.request;
    const int64_t rows = chunk.valid_rows;
    const int32_t first = static_cast<int32_t>(batch.tokens.size());
    caches.emplace_back(pool_, request.block_table);
    batch.tokens.insert(batch.tokens.end(), request.tokens.begin() + chunk.start + 1,
                        request.tokens.begin() + chunk.start + 1 + rows);
    batch.sequences.push_back({&caches.back(), chunk.start, first, static_cast<int32_t>(rows)});
    mtp_hidden_.insert(mtp_hidden_.end(), hidden.begin() + chunk.first_row * h, hidden.begin() + (chunk.first_row + rows) * h);
    if (chunk.draft_budget > 0) {
      batch.logit_rows.push_back(first + static_cast<int32_t>(rows) - 1);
      drafting.push_back({&request, std::min(chunk.draft_budget, config_.speculative.mtp_drafts())});
    }
  }
  if (batch.tokens.empty()) return;
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  const std::vector<float>* logits = &model_.forward_mtp(batch, mtp_hidden_, config_.mtp_normed_hidden);
  // Each further pass drafts one more token: the previous draft at the next position,
  // with the head's own output state in place of the target's (model spec §4.1).
  for (;;) {
    std::vector<MtpDraft> again;
    std::vector<float> next_hidden;
    const std::span<const float> states = model_.last_hidden_states();
    for (size_t i = 0; i < drafting.size(); ++i) {
      EngineRequest& request = *drafting[i].request;
      request.drafts.push_back(argmax(std::span<const float>(logits->data() + i * vocab, vocab)));
      if (static_cast<int>(request.drafts.size()) >= drafting[i].passes) continue;
      // The next pass sits at the draft's position: after the request's last token.
      const int64_t position = request.num_tokens() - 2 + static_cast<int64_t>(request.drafts.size());
      if (!cache_manager_.allocate_slots(request, position + 1)) continue;  // no room: fewer drafts
      const int32_t row = batch.logit_rows[i];
      next_hidden.insert(next_hidden.end(), states.begin() + row * h, states.begin() + (row + 1) * h);
      again.push_back(drafting[i]);
    }
    if (again.empty()) return;
    drafting.swap(again);
    batch.tokens.clear();
    batch.sequences.clear();
    batch.logit_rows.clear();
    caches.clear();
    for (const MtpDraft& draft : drafting) {
      EngineRequest& request = *draft.request;
      const int32_t row = static_cast<int32_t>(batch.tokens.size());
      caches.emplace_back(pool_, request.block_table);
      batch.sequences.push_back({&caches.back(), request.num_tokens() - 2 + static_cast<int64_t>(request.drafts.size()), row, 1});
      batch.logit_rows.push_back(row);
      batch.tokens.push_back(request.drafts.back());
    }
    mtp_hidden_.swap(next_hidden);
    logits = &model_.forward_mtp(batch, mtp_hidden_, config_.mtp_normed_hidden);
  }
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
  if (const KvSwapTier* swap = pool_.swap_tier()) stats.swap = swap->stats();
  return stats;
}

}  // namespace ernie
