#include "serving/http_server_state.h"

#include <cassert>

#include <boost/asio/post.hpp>

#include "serving/http_connection.h"

namespace ernie {

bool HttpPostGate::post(const std::weak_ptr<HttpConnection>& connection, std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!open_) return false;
  // Taken and dropped under the lock, so a caller never holds the last reference past
  // shut(); an open connection is also owned by the server's registry, so dropping this
  // one never runs anything that could come back here.
  auto alive = connection.lock();
  if (!alive) return false;
  boost::asio::post(alive->executor(), std::move(fn));
  return true;
}

bool HttpPostGate::post(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!open_) return false;
  boost::asio::post(io_, std::move(fn));
  return true;
}

void HttpPostGate::shut() {
  std::lock_guard<std::mutex> lock(mutex_);
  open_ = false;
}

void HttpServerState::add_connection(std::shared_ptr<HttpConnection> connection) {
  std::lock_guard<std::mutex> lock(mutex_);
  const HttpConnection* key = connection.get();
  connections_.emplace(key, std::move(connection));
}

void HttpServerState::remove_connection(const HttpConnection* connection) {
  std::shared_ptr<HttpConnection> removed;  // may be the last reference: released unlocked
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = connections_.find(connection);
    if (it == connections_.end()) return;
    removed = std::move(it->second);
    connections_.erase(it);
  }
  changed_.notify_all();
}

std::vector<std::shared_ptr<HttpConnection>> HttpServerState::connections() const {
  std::vector<std::shared_ptr<HttpConnection>> open;
  std::lock_guard<std::mutex> lock(mutex_);
  open.reserve(connections_.size());
  for (const auto& entry : connections_) open.push_back(entry.second);
  return open;
}

void HttpServerState::release_connections() {
  std::unordered_map<const HttpConnection*, std::shared_ptr<HttpConnection>> released;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    released.swap(connections_);
  }
  released.clear();  // their destructors remove themselves again: must not hold the lock
  changed_.notify_all();
}

size_t HttpServerState::open_connections() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return connections_.size();
}

void HttpServerState::request_started() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++in_flight_;
}

void HttpServerState::request_finished() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    assert(in_flight_ > 0);
    --in_flight_;
  }
  changed_.notify_all();
}

size_t HttpServerState::in_flight_requests() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_flight_;
}

bool HttpServerState::wait_no_requests(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_until(lock, deadline, [&] { return in_flight_ == 0; });
}

bool HttpServerState::wait_no_connections(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_until(lock, deadline, [&] { return connections_.empty(); });
}

}  // namespace ernie
