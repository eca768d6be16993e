// The decode role (--splitwise-role decode): the engine's RemotePrefill. It probes every
// prefill instance (--innode-prefill-ports) for free seats, sends each new prompt to the
// one with the most, writes the keys and values it streams back, layer by layer, into
// the request's blocks, and tells the engine when they are all there.
//
// Failures never lose a request: a prefill instance that fails a task, falls silent
// (kSilenceLimit), restarts, or exceeds the transfer timeout has the task retried on
// another prefill instance, and when none is left the engine computes the prompt
// itself; with FD_PD_CHANGEABLE=1 it also does so at once when no prefill instance has
// a free seat.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "disagg/pd_protocol.h"
#include "engine/remote_prefill.h"

namespace ernie::disagg {

struct DecodeOptions {
  // ZeroMQ endpoints of the prefill instances (prefill_endpoint()).
  std::vector<std::string> prefill_endpoints;
  bool changeable = false;  // FD_PD_CHANGEABLE
  // The longest a task may take at one prefill instance before it is retried elsewhere.
  std::chrono::milliseconds transfer_timeout{std::chrono::minutes(10)};
  int max_attempts = 3;  // prefill instances tried per request before computing it here
};

// An --innode-prefill-ports entry: PORT (this machine, over a Unix socket) or HOST:PORT (TCP).
std::string prefill_endpoint(const std::string& entry);

struct TransferStats {
  int64_t completed = 0;
  int64_t retried = 0;        // attempts that failed and went to another prefill instance
  int64_t computed_here = 0;  // requests whose prompt the decode instance computed after all
  int64_t bytes = 0;          // key/value bytes received
  // Of the completed transfers, wall time from the task's dispatch to its last row,
  // and the time after the prefill instance finished computing until every row was
  // here (the transfer's share of time to first token; one machine's clock only).
  double seconds = 0;
  double tail_seconds = 0;
};

class DecodeCoordinator final : public RemotePrefill {
 public:
  // `pool` is the engine's (Engine::kv_pool); `format` its KV format (kv_format_of).
  DecodeCoordinator(KvBlockPool& pool, KvFormat format, DecodeOptions options);
  ~DecodeCoordinator() override;

  // Where outcomes go (EngineClient::complete_remote_prefill); set before the first task.
  void set_outcome_sink(std::function<void(const std::string& request_id, bool succeeded)> sink);
  // Replaces the list of prefill instances (a router's registrations): new ones are
  // connected, ones left out get no new tasks. Any thread.
  void set_prefill_endpoints(std::vector<std::string> endpoints);
  void start(RemotePrefillTask task) override;
  void cancel(const std::string& request_id) override;
  // Stops the transfer thread (before the engine client goes); cancel() stays valid.
  void stop();
  TransferStats stats() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Prefill {
    std::string endpoint;
    std::unique_ptr<zmq::socket_t> socket;
    std::string instance;  // from its last status; empty until heard
    int free_seats = 0;
    bool usable = false;   // heard within kSilenceLimit, same KV format
    bool listed = true;    // in the latest set_prefill_endpoints
    bool format_reported = false;
    Clock::time_point last_heard{};
    Clock::time_point last_probe{};
  };
  struct Transfer {
    RemotePrefillTask task;
    int attempt = 0;
    int prefill = -1;  // while sent
    std::string wire_id;
    std::set<int> tried;
    std::vector<int64_t> next;  // per layer, the next position expected
    Clock::time_point queued;
    Clock::time_point sent;
    Clock::time_point deadline;
    int64_t bytes = 0;
  };

  void run();
  // Transfer thread: connects the endpoints of the latest set_prefill_endpoints.
  void update_prefills();
  void connect(const std::string& endpoint);
  void on_prefill_message(int prefill, zmq::multipart_t& message, std::vector<std::pair<std::string, bool>>& outcomes);
  void on_status(int prefill, const zmq::multipart_t& message);
  void probe_and_expire();
  void dispatch(std::vector<std::pair<std::string, bool>>& outcomes);
  // With mutex_ held: the attempt failed; try another prefill instance or give the
  // request back to the engine to compute.
  void retry_or_compute_here(Transfer& transfer, const std::string& why);
  int pick_prefill(const Transfer& transfer) const;

  KvBlockPool& pool_;
  KvFormat format_;
  DecodeOptions options_;
  zmq::context_t context_;
  std::vector<Prefill> prefills_;  // transfer thread only
  std::function<void(const std::string&, bool)> sink_;

  zmq::socket_t wake_pull_;  // transfer thread: woken by start() and cancel()
  zmq::socket_t wake_push_;  // engine thread only
  mutable std::mutex mutex_;
  std::map<std::string, Transfer> transfers_;  // by request id
  std::vector<std::pair<int, std::string>> cancels_;  // (prefill, wire id) to tell
  std::optional<std::vector<std::string>> new_endpoints_;  // from set_prefill_endpoints
  TransferStats stats_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ernie::disagg
