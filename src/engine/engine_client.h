// The only door into the engine for everything else (the HTTP server, `ernie run`,
// `ernie bench`). Thread-safe: submit and abort from any thread; the engine runs on its
// own thread and hands outputs to per-request streams without ever waiting for the
// reader, so a slow client cannot stall the others.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "engine/engine.h"

namespace ernie {

// The outputs of one request, in order. The last one has finished() true.
class OutputStream {
 public:
  // Blocks until the next output; nullopt once the final output has been taken.
  std::optional<RequestOutput> next();
  // As next(), giving up after `timeout` (returns nullopt then too; check done()).
  std::optional<RequestOutput> next_for(std::chrono::milliseconds timeout);
  bool done() const;

 private:
  friend class EngineClient;
  void push(RequestOutput output);
  std::optional<RequestOutput> take_front();  // with mutex_ held

  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<RequestOutput> queue_;
  bool final_pushed_ = false;
  bool final_taken_ = false;
};

class EngineClient {
 public:
  explicit EngineClient(std::unique_ptr<Engine> engine);
  ~EngineClient();  // aborts what is still running and joins the engine thread
  EngineClient(const EngineClient&) = delete;
  EngineClient& operator=(const EngineClient&) = delete;

  // Queues a request; throws ernie::Error at once for an invalid one.
  std::shared_ptr<OutputStream> submit(GenerateRequest request);
  // The same, delivering each output to `sink` on the engine thread as it is made. The
  // sink must return quickly (hand the output on, never block): the engine waits for it.
  using OutputSink = std::function<void(RequestOutput)>;
  void submit(GenerateRequest request, OutputSink sink);
  // Finishes the request with reason "abort" (no effect if it already finished).
  void abort(const std::string& request_id);
  // Decode role of disaggregation: hands the outcome of a remote prefill to the engine
  // (Engine::complete_remote_prefill) on its thread.
  void complete_remote_prefill(const std::string& request_id, bool succeeded);
  // Live figures for metrics, taken after the latest step.
  EngineStats stats() const;
  // Bytes of the KV pool in RAM (KvBlockPool::resident_bytes). It walks the pool's page
  // table, so only /metrics asks, not each step's snapshot or the status polls.
  uint64_t kv_resident_bytes() const;

 private:
  void run();

  std::unique_ptr<Engine> engine_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  void validate(const GenerateRequest& request) const;

  std::deque<std::pair<GenerateRequest, OutputSink>> inbox_;
  std::deque<std::string> aborts_;
  std::deque<std::pair<std::string, bool>> remote_outcomes_;
  std::map<std::string, OutputSink> sinks_;  // engine thread only
  EngineStats stats_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ernie
