// An instance's side of `ernie router` (--router HOST:PORT): a thread that registers the
// instance every second (the router drops one silent for kInstanceTtl) and, for a decode
// instance, passes on the prefill instances the router knows.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ernie {

struct RouterRegistrationInfo {
  std::string router;  // HOST:PORT
  std::string role;    // prefill, decode or mixed
  std::string host;    // as --host; the router uses the address it sees when 0.0.0.0
  int port = 0;        // the HTTP port
  int engine_worker_queue_port = 0;  // prefill
};

class RouterRegistration {
 public:
  using PrefillsSink = std::function<void(const std::vector<std::string>& endpoints)>;
  // Starts registering at once; `on_prefills` (may be empty) gets the router's list of
  // prefill endpoints after every heartbeat.
  RouterRegistration(RouterRegistrationInfo info, PrefillsSink on_prefills);
  ~RouterRegistration();  // stops the heartbeats

 private:
  void run();
  bool register_once(std::string& error);

  RouterRegistrationInfo info_;
  PrefillsSink on_prefills_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ernie
