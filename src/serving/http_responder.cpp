#include "serving/http_responder.h"

#include <exception>

#include "serving/http_connection.h"
#include "serving/http_messages.h"
#include "util/log.h"

namespace ernie {
namespace {

void call_disconnect_callback(const std::function<void()>& callback) {
  try {
    callback();
  } catch (const std::exception& e) {
    log_warning("HTTP stream on_disconnect callback threw: ", e.what());
  }
}

// For a callback registered after its disconnect: call it once, soon, from an IO thread,
// never from inside the registering call (the caller may hold a lock the callback takes);
// at once if the server is gone and no IO thread will run it.
void report_disconnect_later(HttpPostGate& gate, std::function<void()> callback) {
  auto shared = std::make_shared<std::function<void()>>(std::move(callback));
  if (!gate.post([shared] { call_disconnect_callback(*shared); })) call_disconnect_callback(*shared);
}

}  // namespace

void HttpDisconnectWatch::watch(std::function<void()> callback) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (retired_) return;
    if (!fired_) {
      callback_ = std::move(callback);
      return;
    }
  }
  report_disconnect_later(*gate_, std::move(callback));
}

void HttpDisconnectWatch::fire() {
  std::function<void()> callback;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fired_ || retired_) return;
    fired_ = true;
    callback = std::move(callback_);
  }
  if (callback) call_disconnect_callback(callback);
}

void HttpDisconnectWatch::retire() {
  std::function<void()> dropped;  // destroyed outside the lock: it may own anything
  std::lock_guard<std::mutex> lock(mutex_);
  retired_ = true;
  dropped = std::move(callback_);
}

bool HttpStreamState::write(std::string bytes) {
  bool post = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (gone_.load() || close_requested_) return false;
    if (bytes.empty()) return true;
    if (target_.chunked) {
      append_http_chunk(pending_, bytes);
    } else if (pending_.empty()) {
      pending_ = std::move(bytes);
    } else {
      pending_ += bytes;
    }
    post = !std::exchange(flush_posted_, true);
  }
  return !post || post_flush();
}

void HttpStreamState::close() {
  bool post = false;
  std::function<void()> dropped;  // destroyed outside the lock: it may own anything
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (gone_.load() || close_requested_) return;
    close_requested_ = true;
    dropped = std::move(callback_);
    if (target_.chunked) pending_ += kHttpLastChunk;
    post = !std::exchange(flush_posted_, true);
  }
  if (post) post_flush();
}

void HttpStreamState::on_disconnect(std::function<void()> callback) {
  std::function<void()> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (close_requested_) return;  // finished first: there is no disconnect to report
    if (!gone_.load()) {
      dropped = std::exchange(callback_, std::move(callback));
      return;
    }
  }
  report_disconnect_later(*target_.gate, std::move(callback));  // the client left before anyone listened
}

void HttpStreamState::abandon() {
  std::function<void()> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (gone_.load() || close_requested_) return;
    dropped = std::move(callback_);
  }
  target_.gate->post(target_.connection, [connection = target_.connection, self = shared_from_this()] {
    if (auto alive = connection.lock()) alive->abandon_stream(self);
  });
}

HttpStreamState::Taken HttpStreamState::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  Taken taken;
  taken.bytes = std::move(pending_);
  pending_.clear();
  taken.finished = close_requested_;
  flush_posted_ = false;
  return taken;
}

void HttpStreamState::peer_gone() {
  std::function<void()> callback;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (gone_.exchange(true)) return;
    pending_.clear();
    if (!close_requested_) callback = std::move(callback_);
    callback_ = nullptr;
  }
  if (callback) call_disconnect_callback(callback);
}

bool HttpStreamState::post_flush() {
  const bool posted = target_.gate->post(target_.connection, [connection = target_.connection, self = shared_from_this()] {
    if (auto alive = connection.lock()) {
      alive->flush_stream(self);
    } else {
      self->peer_gone();
    }
  });
  if (!posted) peer_gone();  // the connection or the whole server is gone
  return posted;
}

HttpResponderImpl::~HttpResponderImpl() {
  if (answered_.exchange(true)) return;
  HttpResponse error;
  error.status = 500;
  error.body = http_error_body("internal error: no response", "server_error", 500);
  post_response(std::move(error));
}

void HttpResponderImpl::respond(HttpResponse response) {
  if (answered_.exchange(true)) {
    log_warning("HTTP request answered twice; the second answer is dropped");
    return;
  }
  post_response(std::move(response));
}

void HttpResponderImpl::post_response(HttpResponse response) {
  target_.gate->post(target_.connection, [connection = target_.connection, seq = target_.request_seq,
                                      response = std::move(response)]() mutable {
    if (auto alive = connection.lock()) alive->deliver_response(seq, std::move(response));
  });
}

std::shared_ptr<HttpStream> HttpResponderImpl::start_stream(int status, std::string content_type,
                                                            std::vector<std::pair<std::string, std::string>> headers) {
  auto state = std::make_shared<HttpStreamState>(target_);
  if (answered_.exchange(true)) {
    log_warning("HTTP request answered twice; the second answer (a stream) is dropped");
    state->peer_gone();
    return std::make_shared<HttpStreamHandle>(std::move(state));
  }
  const bool posted = target_.gate->post(
      target_.connection, [connection = target_.connection, state, status, content_type = std::move(content_type),
                       headers = std::move(headers)]() mutable {
        if (auto alive = connection.lock()) {
          alive->begin_stream(state, status, std::move(content_type), std::move(headers));
        } else {
          state->peer_gone();
        }
      });
  if (!posted) state->peer_gone();
  return std::make_shared<HttpStreamHandle>(std::move(state));
}

}  // namespace ernie
