// `ernie router`: FastDeploy's router model of prefill/decode disaggregation across
// machines. Prefill, decode and mixed instances started with --router HOST:PORT register
// themselves (POST /register, repeated every second as a heartbeat; one silent for
// kInstanceTtl is dropped). Clients send their OpenAI requests to the router, which
// forwards each to the decode (or, with none, mixed) instance with the fewest requests
// in flight and streams its answer back. A decode instance learns the registered prefill
// instances from the router's answer to its heartbeat and sends them its prompts
// directly over ZeroMQ/TCP (disagg/), so the router never carries keys and values.
//
// Why the router and not FastDeploy's Redis "splitwise" scheduler: it is the model
// FastDeploy recommends from 2.3 on, it needs no Redis server, and the decode instance
// keeps the choice of prefill instance, which already balances by free seats and retries
// on failure. The splitwise scheduler's flags are refused with a pointer here.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serving/http_proxy.h"
#include "serving/http_server.h"

namespace ernie {

inline constexpr std::chrono::seconds kInstanceTtl{5};
inline constexpr size_t kMaxInstances = 1024;  // registrations past this are refused

// The registered instances. Thread-safe.
class RouterRegistry {
 public:
  // Registers or refreshes the instance described by `body` ({"role": "prefill" |
  // "decode" | "mixed", "host", "port", "engine_worker_queue_port" (prefill)}), whose
  // request came from `peer_host` (used when host is empty or 0.0.0.0). Returns the
  // answer: {"prefill_endpoints": [...]}, the ZeroMQ endpoints of the live prefill
  // instances. Throws ernie::Error naming a bad field.
  nlohmann::json register_instance(const nlohmann::json& body, const std::string& peer_host);
  // The base URL of the decode instance (else mixed) with the fewest requests in flight,
  // counted as taken until release(); empty when none is registered.
  std::string take_target();
  void release(const std::string& target);
  // Drops an instance that could not be reached until it registers again.
  void forget(const std::string& target);
  nlohmann::json list() const;

 private:
  struct Instance {
    std::string role;
    std::string base_url;          // http://host:port
    std::string prefill_endpoint;  // tcp://host:engine_worker_queue_port (prefill)
    std::chrono::steady_clock::time_point last_seen;
    int in_flight = 0;
  };
  void expire();  // with mutex_ held

  mutable std::mutex mutex_;
  std::map<std::string, Instance> instances_;  // by base URL
};

class RouterService {
 public:
  void handle(HttpRequest request, std::shared_ptr<HttpResponder> responder);  // IO thread
  const RouterRegistry& registry() const { return registry_; }

 private:
  void forward(HttpRequest request, std::shared_ptr<HttpResponder> responder, int attempts_left);

  RouterRegistry registry_;
  HttpProxy proxy_;
};

}  // namespace ernie
