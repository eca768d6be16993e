// Forwards HTTP requests to another server and streams its answers back, for `ernie
// router`. One thread drives every transfer with libcurl's multi interface, so a router
// holds thousands of open streams without a thread each and its IO threads only do IO.
// Bytes are passed on as they arrive (Server-Sent Events stay live); a client that goes
// away ends its upstream transfer, which the upstream server sees as a disconnect and
// aborts the request.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "serving/http_server.h"

namespace ernie {

class HttpProxy {
 public:
  HttpProxy();
  ~HttpProxy();  // ends open transfers
  HttpProxy(const HttpProxy&) = delete;
  HttpProxy& operator=(const HttpProxy&) = delete;

  // How a forwarded request ended: `connected` false when the upstream server could not
  // be reached (nothing was sent to the client yet: `request` and `responder` come back
  // so the caller may try another server or answer itself); `error` says why it failed,
  // empty on success.
  struct Outcome {
    bool connected = true;
    std::string error;
    HttpRequest request;
    std::shared_ptr<HttpResponder> responder;
  };
  using Done = std::function<void(Outcome outcome)>;

  // Sends `request` to `base_url` (http://host:port) and its answer to `responder`. When
  // the upstream could not be reached, `done` decides: it may forward again or respond
  // itself; otherwise the client has its answer (or a 502) when `done` runs. Any thread.
  void forward(const std::string& base_url, HttpRequest request, std::shared_ptr<HttpResponder> responder, Done done);
  size_t in_flight() const { return in_flight_.load(); }

  struct Transfer;  // one forwarded request (http_proxy.cpp)

 private:
  void run();
  void finish(Transfer* transfer, int curl_code);

  void* multi_ = nullptr;  // CURLM*
  std::mutex mutex_;
  std::deque<std::unique_ptr<Transfer>> incoming_;
  std::atomic<size_t> in_flight_{0};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace ernie
