// What the HTTP server, its connections and the responders it hands out share: the
// options and handler, the live counts that stop() waits on, and the gate through which
// other threads post work to the IO threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "serving/http_server.h"

namespace ernie {

class HttpConnection;

// Responders and streams may outlive the server (an engine thread can hold one after
// shutdown). Whatever they keep must be safe to use and destroy then, so they keep no
// strand or connection, only this gate and weak pointers; the gate lends them the
// connection for the moment of a post, and the server shuts it before the io_context
// goes away.
class HttpPostGate {
 public:
  explicit HttpPostGate(boost::asio::io_context::executor_type io) : io_(std::move(io)) {}

  // Runs `fn` on the connection's strand. False (and `fn` dropped) if the server has
  // stopped or the connection is gone.
  bool post(const std::weak_ptr<HttpConnection>& connection, std::function<void()> fn);
  // Runs `fn` on some IO thread; false once the server has stopped.
  bool post(std::function<void()> fn);
  void shut();

 private:
  std::mutex mutex_;
  bool open_ = true;
  // Untracked io_context executors are plain pointers: safe to destroy after the context.
  const boost::asio::io_context::executor_type io_;
};

class HttpServerState {
 public:
  HttpServerState(HttpServerOptions server_options, HttpHandler request_handler,
                  boost::asio::io_context::executor_type io)
      : options(std::move(server_options)),
        handler(std::move(request_handler)),
        gate(std::make_shared<HttpPostGate>(std::move(io))) {}

  const HttpServerOptions options;
  const HttpHandler handler;
  const std::shared_ptr<HttpPostGate> gate;
  // Set once by stop(): connections finish the response they owe, then close.
  std::atomic<bool> stopping{false};

  // The registry owns each open connection: a connection waiting for its handler may
  // have no operation pending (reading pauses once enough is read ahead), and nothing
  // else would keep it alive.
  void add_connection(std::shared_ptr<HttpConnection> connection);
  void remove_connection(const HttpConnection* connection);  // idempotent
  std::vector<std::shared_ptr<HttpConnection>> connections() const;
  size_t open_connections() const;
  // Drops the registry's references (after the IO threads are gone).
  void release_connections();

  void request_started();
  void request_finished();
  size_t in_flight_requests() const;

  // Wait until the count reaches zero or `deadline` passes; true if it reached zero.
  bool wait_no_requests(std::chrono::steady_clock::time_point deadline);
  bool wait_no_connections(std::chrono::steady_clock::time_point deadline);

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::unordered_map<const HttpConnection*, std::shared_ptr<HttpConnection>> connections_;
  size_t in_flight_ = 0;
};

}  // namespace ernie
