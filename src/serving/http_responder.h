// The objects a handler holds while its request is served: the responder, and the stream
// it may start. They are used from any thread (the engine's, mostly) and reach the
// connection only by posting to its strand, addressing it by a weak pointer and the
// request's sequence number, so anything that arrives after the client left, or for a
// request that is over, is dropped there quietly.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "serving/http_server.h"
#include "serving/http_server_state.h"

namespace ernie {

class HttpConnection;

// Tells the handler of one request that its client went away before the answer started
// (HttpResponder::on_disconnect). Shared by the connection, which fires it, and the
// responder, which registers the callback.
class HttpDisconnectWatch {
 public:
  explicit HttpDisconnectWatch(std::shared_ptr<HttpPostGate> gate) : gate_(std::move(gate)) {}
  void watch(std::function<void()> callback);  // any thread
  void fire();                                  // IO thread; later calls do nothing
  void retire();  // the answer started: no disconnect is reported through this any more

 private:
  const std::shared_ptr<HttpPostGate> gate_;
  std::mutex mutex_;
  std::function<void()> callback_;
  bool fired_ = false;
  bool retired_ = false;
};

// Where one request's answer goes.
struct HttpReplyTarget {
  std::shared_ptr<HttpPostGate> gate;
  std::shared_ptr<HttpDisconnectWatch> watch;
  std::weak_ptr<HttpConnection> connection;
  uint64_t request_seq = 0;
  bool chunked = true;  // false for HTTP/1.0 clients: the stream's end is the connection's
};

// The state of one streamed response, shared by the user's handle and the connection.
// Writes collect in `pending_` and one posted flush carries everything written since the
// previous one, so a fast producer costs one post per IO-thread turn, not one per write.
class HttpStreamState : public std::enable_shared_from_this<HttpStreamState> {
 public:
  explicit HttpStreamState(HttpReplyTarget target) : target_(std::move(target)) {}

  // Any thread.
  bool write(std::string bytes);
  void close();
  bool disconnected() const { return gone_.load(); }
  void on_disconnect(std::function<void()> callback);
  void abandon();  // the last user handle went away

  // Connection strand (or any thread while no IO thread can run it any more).
  struct Taken {
    std::string bytes;
    bool finished = false;  // close() was called: `bytes` end the response
  };
  Taken take();
  void peer_gone();  // the client left, or the server cut the connection

  const HttpReplyTarget& target() const { return target_; }

 private:
  bool post_flush();  // false: the server is gone

  const HttpReplyTarget target_;
  mutable std::mutex mutex_;
  std::string pending_;
  bool flush_posted_ = false;
  bool close_requested_ = false;
  std::function<void()> callback_;
  std::atomic<bool> gone_{false};
};

// What the user holds. Dropping the last one without close() cuts the connection.
class HttpStreamHandle final : public HttpStream {
 public:
  explicit HttpStreamHandle(std::shared_ptr<HttpStreamState> state) : state_(std::move(state)) {}
  ~HttpStreamHandle() override { state_->abandon(); }
  HttpStreamHandle(const HttpStreamHandle&) = delete;
  HttpStreamHandle& operator=(const HttpStreamHandle&) = delete;

  bool write(std::string bytes) override { return state_->write(std::move(bytes)); }
  void close() override { state_->close(); }
  bool disconnected() const override { return state_->disconnected(); }
  void on_disconnect(std::function<void()> callback) override { state_->on_disconnect(std::move(callback)); }

 private:
  std::shared_ptr<HttpStreamState> state_;
};

class HttpResponderImpl final : public HttpResponder {
 public:
  explicit HttpResponderImpl(HttpReplyTarget target) : target_(std::move(target)) {}
  // Without an answer, the client gets a 500 rather than waiting forever.
  ~HttpResponderImpl() override;
  HttpResponderImpl(const HttpResponderImpl&) = delete;
  HttpResponderImpl& operator=(const HttpResponderImpl&) = delete;

  void respond(HttpResponse response) override;
  std::shared_ptr<HttpStream> start_stream(int status, std::string content_type,
                                           std::vector<std::pair<std::string, std::string>> headers) override;
  void on_disconnect(std::function<void()> callback) override { target_.watch->watch(std::move(callback)); }

 private:
  void post_response(HttpResponse response);

  const HttpReplyTarget target_;
  std::atomic<bool> answered_{false};
};

}  // namespace ernie
