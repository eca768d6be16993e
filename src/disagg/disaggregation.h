// A server's part in prefill/decode disaggregation (--splitwise-role), set up around
// the engine's life: a prefill instance binds its port before the model loads and takes
// tasks once the engine runs; a decode instance attaches its coordinator to the engine
// before the engine thread starts. `ernie serve` owns one of these beside its engine.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "disagg/decode_coordinator.h"
#include "disagg/prefill_server.h"

namespace ernie::disagg {

enum class Role { kMixed, kPrefill, kDecode };

struct DisaggregationConfig {
  Role role = Role::kMixed;
  std::string host = "0.0.0.0";         // prefill: the address decode instances reach it at
  int engine_worker_queue_port = 0;     // prefill: where decode instances connect
  // Decode: --innode-prefill-ports, FD_PD_CHANGEABLE, ERNIE_PD_TRANSFER_TIMEOUT.
  DecodeOptions decode;
  // Decode: prompts of at most this many tokens are computed here, not sent (0: all are
  // sent, as FastDeploy does); ERNIE_PD_LOCAL_PROMPT_TOKENS.
  int64_t local_prompt_tokens = 0;
};

const char* role_name(Role role);
// The KV format of `engine`'s cache: what a prefill and a decode instance must share.
KvFormat kv_format_of(Engine& engine);

class Disaggregation {
 public:
  // A prefill instance binds its port here. Must outlive the engine client.
  Disaggregation(const DisaggregationConfig& config, int max_num_seqs);
  ~Disaggregation();

  // Before the engine thread starts (load_engine's `prepare`).
  void prepare(Engine& engine);
  // Once the engine client runs.
  void attach(EngineClient& client);
  // Before the engine client goes.
  void stop();

  const DecodeCoordinator* coordinator() const { return coordinator_.get(); }
  // A router's current prefill instances (decode role; ignored otherwise).
  void set_prefill_endpoints(std::vector<std::string> endpoints) {
    if (coordinator_) coordinator_->set_prefill_endpoints(std::move(endpoints));
  }
  const PrefillServer* prefill_server() const { return prefill_.get(); }

 private:
  DisaggregationConfig config_;
  KvFormat format_;
  std::unique_ptr<PrefillServer> prefill_;
  std::unique_ptr<DecodeCoordinator> coordinator_;
};

}  // namespace ernie::disagg
