#include "disagg/disaggregation.h"

#include "util/error.h"

namespace ernie::disagg {

const char* role_name(Role role) {
  switch (role) {
    case Role::kMixed: return "mixed";
    case Role::kPrefill: return "prefill";
    case Role::kDecode: return "decode";
  }
  return "?";
}

KvFormat kv_format_of(Engine& engine) {
  const ModelConfig& model = engine.model_config();
  KvFormat format;
  format.kv_layers = engine.kv_pool().num_layers();
  format.row_bytes = engine.kv_pool().row_bytes();
  const std::string& quantization = engine.config().quantization;
  format.model = str_cat(model.architecture, " layers ", model.num_hidden_layers, " hidden ", model.hidden_size,
                         " vocab ", model.vocab_size, " heads ", model.num_attention_heads, "/",
                         model.num_key_value_heads, " experts ", model.moe ? model.moe->num_experts : 0,
                         " quantization ", quantization.empty() ? "none" : quantization);
  return format;
}

Disaggregation::Disaggregation(const DisaggregationConfig& config, int max_num_seqs) : config_(config) {
  if (config_.role == Role::kPrefill)
    prefill_ = std::make_unique<PrefillServer>(config_.host, config_.engine_worker_queue_port, max_num_seqs);
}

Disaggregation::~Disaggregation() { stop(); }

void Disaggregation::prepare(Engine& engine) {
  format_ = kv_format_of(engine);
  if (config_.role != Role::kDecode) return;
  coordinator_ = std::make_unique<DecodeCoordinator>(engine.kv_pool(), format_, config_.decode);
  engine.set_remote_prefill(coordinator_.get(), config_.local_prompt_tokens);
}

void Disaggregation::attach(EngineClient& client) {
  if (coordinator_)
    coordinator_->set_outcome_sink(
        [&client](const std::string& id, bool succeeded) { client.complete_remote_prefill(id, succeeded); });
  if (prefill_) prefill_->start(client, format_);
}

void Disaggregation::stop() {
  if (coordinator_) coordinator_->stop();
  if (prefill_) prefill_->stop();
}

}  // namespace ernie::disagg
