// The prefill role (--splitwise-role prefill): computes prompts for decode instances.
// It listens on --engine-worker-queue-port (TCP, and a Unix socket for instances on the
// same machine), answers status probes with its free seats, runs each task through the
// engine as a one-token request whose keys and values are exported layer by layer
// while later layers compute, and forwards them to the decode instance that asked.
// Tasks of a decode instance that falls silent, or that cancels them, are aborted, so
// a vanished decode instance leaves no request and no block behind.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "disagg/pd_protocol.h"
#include "engine/engine_client.h"

namespace ernie::disagg {

class PrefillServer {
 public:
  // Binds host:port (throws ernie::Error naming it when taken), before minutes of loading.
  PrefillServer(const std::string& host, int port, int max_num_seqs);
  // Must outlive `engine`: tasks still in it report to this object until it stops.
  ~PrefillServer();
  PrefillServer(const PrefillServer&) = delete;
  PrefillServer& operator=(const PrefillServer&) = delete;

  // Starts taking tasks for `engine`, whose KV format is `format`.
  void start(EngineClient& engine, const KvFormat& format);
  // Stops taking tasks; call before the engine client goes (tasks still in the engine
  // may report until then: their messages are dropped).
  void stop();
  int tasks_in_flight() const;
  int port() const { return port_; }

 private:
  struct Task {
    std::string decode;  // the decode instance's routing id
    std::string engine_id;
  };
  class LayerExport;
  void run();
  void on_decode_message(zmq::multipart_t& message);
  void start_task(const std::string& decode, zmq::multipart_t& message);
  void abort_tasks_of_silent_decodes();
  // Sends a message to `decode` from the server thread (the only user of router_).
  void reply(const std::string& decode, zmq::multipart_t message);
  // Queues a message for `decode` from the engine thread (the only user of push_).
  void send_from_engine(const std::string& decode, zmq::multipart_t message);

  EngineClient* engine_ = nullptr;
  KvFormat format_;
  int max_num_seqs_;
  std::string instance_ = new_instance_id();
  int port_ = 0;
  std::string ipc_path_;
  zmq::context_t context_;
  zmq::socket_t router_;  // decode instances; server thread only
  zmq::socket_t pull_;    // what the engine thread queued; server thread only
  zmq::socket_t push_;    // engine thread only
  mutable std::mutex mutex_;
  std::map<std::string, Task> tasks_;  // by wire id
  uint64_t next_engine_id_ = 0;
  std::map<std::string, std::chrono::steady_clock::time_point> last_heard_;  // by decode routing id
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace ernie::disagg
