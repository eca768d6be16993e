// The engine core: requests in, one scheduler step at a time, outputs out. It runs on
// one thread (EngineClient's), so it needs no locks; it never blocks on anything but
// the forward pass.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_config.h"
#include "engine/guided_decoding.h"
#include "engine/kv_block_pool.h"
#include "engine/kv_cache_manager.h"
#include "engine/multimodal_prompt.h"
#include "engine/remote_prefill.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/text_stream.h"
#include "model/language_model.h"
#include "text/tokenizer.h"
#include "util/random.h"

namespace ernie {

struct GenerateRequest {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
  // Special tokens whose text stays in the output text: the markers the server's
  // reasoning and tool-call parsers read.
  std::vector<int32_t> visible_special_tokens;
  // Requests that share a group (the prompts of one batched HTTP request) are admitted
  // in turn with other groups', so one large batch cannot starve everyone else. 0: a
  // group of its own.
  uint64_t fairness_group = 0;
  // ERNIE-4.5-VL: the prompt's encoded images and videos (its placeholder runs in order).
  std::shared_ptr<const MultimodalPrompt> multimodal = nullptr;
  // Structured output: the grammar the output must follow (null: free), from the first
  // generated token, or (constrain_after_reasoning) from the first token after </think>.
  std::shared_ptr<const structured::CompiledConstraint> constraint = nullptr;
  bool constrain_after_reasoning = false;
  // Prefill role of disaggregation: receives the prompt's keys and values layer by layer.
  std::shared_ptr<KvExport> kv_export = nullptr;
};

struct EngineStats {
  size_t running = 0;
  size_t waiting = 0;
  int blocks_total = 0;
  int blocks_free = 0;
  int blocks_cached = 0;
  PrefixCacheStats prefix_cache;
  KvSwapStats swap;  // the second KV tier (zeros without --swap-space)
  int64_t steps = 0;
  int64_t prompt_tokens_computed = 0;
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t finished_requests = 0;
  // Speculative decoding: drafts verified, accepted, tokens emitted by steps that
  // verified drafts, and those steps' most possible tokens (1 + drafts each); per draft
  // position, drafts verified and accepted.
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  int64_t spec_emitted_tokens = 0;
  int64_t spec_capacity_tokens = 0;
  std::array<int64_t, kMaxSpeculativeTokens> spec_drafted_at{};
  std::array<int64_t, kMaxSpeculativeTokens> spec_accepted_at{};

  // Derived speculative figures (0 before any draft): the accepted share of drafts, the
  // emitted share of what verifying steps could emit, and tokens per verifying step.
  double spec_acceptance() const { return ratio(spec_accepted_tokens, spec_draft_tokens); }
  double spec_efficiency() const { return ratio(spec_emitted_tokens, spec_capacity_tokens); }
  double spec_tokens_per_verifying_step() const {
    return ratio(spec_emitted_tokens, spec_capacity_tokens - spec_draft_tokens);
  }
  static double ratio(int64_t part, int64_t whole) {
    return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
  }
};

class Engine {
 public:
  // `model` and `tokenizer` must outlive the engine. `num_blocks` comes from
  // plan_kv_blocks. `eos_token_ids` end a request unless it ignores them.
  Engine(LanguageModel& model, const Tokenizer& tokenizer, const EngineConfig& config, int num_blocks,
         std::vector<int32_t> eos_token_ids);
  ~Engine();

  // Validates and queues a request. Throws ernie::Error naming what is wrong (empty or
  // too long prompt, bad sampling parameters, duplicate id).
  void add_request(GenerateRequest request);
  // Finishes a request with FinishReason::kAbort; returns its final output, if it existed.
  std::optional<RequestOutput> abort_request(const std::string& id);

  bool has_work() const { return !scheduler_.idle(); }
  // Runs one step; returns an output for every request that produced tokens or finished.
  std::vector<RequestOutput> step();

  EngineStats stats() const;

  // Decode role of disaggregation: from now on, the prompts of text requests (without
  // prompt logprobs) longer than `local_prompt_tokens` are computed by `remote`, which
  // must outlive the engine.
  void set_remote_prefill(RemotePrefill* remote, int64_t local_prompt_tokens = 0) {
    remote_ = remote;
    local_prompt_tokens_ = local_prompt_tokens;
  }
  // The outcome of a RemotePrefill task: on success the request's prompt, but its last
  // token, is in its blocks; on failure only its cached prefix is, and the engine
  // computes the rest itself. A request that has ended meanwhile is ignored.
  void complete_remote_prefill(const std::string& request_id, bool succeeded);
  // The block storage, for the transfer threads of disaggregation (they write only the
  // blocks of kRemote requests, see RemotePrefill::cancel).
  KvBlockPool& kv_pool() { return pool_; }
  const KvBlockPool& kv_pool() const { return pool_; }

  const EngineConfig& config() const { return config_; }
  const ModelConfig& model_config() const { return model_.config(); }
  const Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  struct Live {
    EngineRequest request;
    std::unique_ptr<TextStream> text;
  };
  RequestOutput base_output(const EngineRequest& request) const;
  void finish(Live& live, FinishReason reason, RequestOutput& output);
  bool is_eos(int32_t token) const;
  bool prompt_leaves_model_thinking(const std::vector<int32_t>& prompt) const;
  // The thinking budget's replacement for `token`, or `token` itself.
  int32_t apply_thinking_budget(EngineRequest& request, int32_t token) const;
  // Ends, with an error output each, the requests never admitted within --max-waiting-time.
  void refuse_long_waiters(std::vector<RequestOutput>& outputs);
  // A batch row whose logits predict prompt token position + 1 of `request`.
  struct PromptLogprobRow {
    EngineRequest* request;
    int64_t position;
    int32_t batch_row;
  };
  // Scores each row's next prompt token; `logits` holds the rows' logits in order.
  void score_prompt_rows(const std::vector<PromptLogprobRow>& rows, std::span<const float> logits);
  // Counts `sampled` toward the request's early stop; true when the stop fires.
  bool stops_early(EngineRequest& request, const SampledToken& sampled) const;
  // One scheduled chunk as this step sees it.
  struct StepChunk {
    EngineRequest* request = nullptr;  // null once the request finished this step
    int32_t first_row = 0;             // its first batch row
    int64_t start = 0;                 // position of that row
    int64_t own = 0;                   // rows of the request's own tokens; drafts follow them
    int drafts = 0;
    int32_t first_logit = -1;          // its first logit row when it samples, else -1
    int64_t valid_rows = 0;            // rows whose keys and values stand after verification
    int draft_budget = 0;              // drafts to propose for its next step
    int mask_job = -1;                 // its entry in step_masks_ when it samples under a constraint
  };
  struct MtpDraft {
    EngineRequest* request;
    int passes;  // MTP passes it drafts with, one draft each
  };
  // Samples a chunk's rows (its last token's, then one per draft) while the drafts hold,
  // emits the tokens and stops; `logits` holds the chunk's rows.
  RequestOutput emit_tokens(StepChunk& chunk, float* logits);
  // ERNIE-4.5-VL: the batch's 3-D positions and image feature rows, when a request of the
  // step has images or video.
  void add_multimodal_rows(const SchedulerStep& plan, ForwardBatch& batch) const;
  // Speculative drafts for the requests that decode next step.
  void propose_drafts(std::vector<StepChunk>& chunks);
  // Drafts a request may get next step: 0 while it pauses after repeated misses.
  int draft_budget(EngineRequest& request) const;
  // Structured output: drops the drafts a constrained request could never accept.
  void constrain_drafts(EngineRequest& request);
  // Starts the masks of the step's constrained sampling rows on the guided worker.
  void start_masks(std::vector<StepChunk>& chunks);
  // Moves a constrained request past `token`; returns why it must end, if it must.
  std::optional<std::string> follow_constraint(EngineRequest& request, int32_t token);
  void draft_with_mtp(const std::vector<StepChunk>& chunks);
  // Hands the requests admitted for a remote prefill to `remote_`.
  void start_remote_prefills(const std::vector<EngineRequest*>& started);
  // Sets batch.after_layer when a chunk of the step exports its keys and values.
  void export_layers_of(const std::vector<StepChunk>& chunks, ForwardBatch& batch);

  LanguageModel& model_;
  const Tokenizer& tokenizer_;
  EngineConfig config_;
  std::vector<int32_t> eos_token_ids_;
  std::optional<int32_t> think_start_id_;  // <think> and </think>, when the vocabulary has them
  std::optional<int32_t> think_end_id_;
  KvBlockPool pool_;
  KvCacheManager cache_manager_;
  Scheduler scheduler_;
  Random seeds_;
  std::map<std::string, std::unique_ptr<Live>> live_;
  EngineStats counters_;
  // step()'s working vectors, kept so their capacity is reused.
  ForwardBatch step_batch_;
  std::vector<PagedKvCache> step_caches_;
  std::vector<StepChunk> step_chunks_;
  std::vector<PromptLogprobRow> step_prompt_rows_;
  ForwardBatch mtp_batch_;
  std::vector<float> mtp_hidden_;
  std::vector<MtpDraft> mtp_drafting_;
  DraftPlanner planner_;
  std::unique_ptr<GuidedDecoding> guided_;  // made for the first constrained request
  std::vector<MaskJob> step_masks_;
  RemotePrefill* remote_ = nullptr;  // decode role only
  int64_t local_prompt_tokens_ = 0;
};

}  // namespace ernie
