#include "serving/http_proxy.h"

#include <curl/curl.h>

#include <map>

#include "serving/http_messages.h"

#include "util/error.h"
#include "util/log.h"

namespace ernie {

struct HttpProxy::Transfer {
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  HttpRequest request;
  std::shared_ptr<HttpResponder> responder;
  std::shared_ptr<HttpStream> stream;  // once the upstream's answer started
  std::shared_ptr<std::atomic<bool>> client_gone = std::make_shared<std::atomic<bool>>(false);
  Done done;
  std::string url;
  char error[CURL_ERROR_SIZE] = {};

  ~Transfer() {
    if (easy != nullptr) curl_easy_cleanup(easy);
    if (headers != nullptr) curl_slist_free_all(headers);
  }
};

namespace {

// Headers that describe one hop, not the request: curl writes its own.
bool hop_by_hop(const std::string& name) {
  for (const char* skipped : {"host", "connection", "content-length", "transfer-encoding", "keep-alive", "te",
                              "upgrade", "expect", "proxy-connection"})
    if (name == skipped) return true;
  return false;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto& transfer = *static_cast<HttpProxy::Transfer*>(user);
  if (*transfer.client_gone) return 0;  // aborts the upstream transfer
  if (!transfer.stream) {
    long status = 0;
    char* type = nullptr;
    curl_easy_getinfo(transfer.easy, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(transfer.easy, CURLINFO_CONTENT_TYPE, &type);
    transfer.stream = transfer.responder->start_stream(static_cast<int>(status), type != nullptr ? type : "application/json");
    transfer.stream->on_disconnect([gone = transfer.client_gone] { *gone = true; });
  }
  const size_t bytes = size * count;
  return transfer.stream->write(std::string(data, bytes)) ? bytes : 0;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  // About once a second even while the upstream is silent (a long prefill).
  return *static_cast<HttpProxy::Transfer*>(user)->client_gone ? 1 : 0;
}

}  // namespace

HttpProxy::HttpProxy() {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  multi_ = curl_multi_init();
  if (multi_ == nullptr) fail("cannot start the HTTP proxy");
  thread_ = std::thread([this] { run(); });
}

HttpProxy::~HttpProxy() {
  stopping_ = true;
  curl_multi_wakeup(static_cast<CURLM*>(multi_));
  thread_.join();
  curl_multi_cleanup(static_cast<CURLM*>(multi_));
}

void HttpProxy::forward(const std::string& base_url, HttpRequest request, std::shared_ptr<HttpResponder> responder,
                        Done done) {
  auto transfer = std::make_unique<Transfer>();
  transfer->url = base_url + request.target;
  transfer->request = std::move(request);
  transfer->responder = std::move(responder);
  transfer->done = std::move(done);
  transfer->responder->on_disconnect([gone = transfer->client_gone] { *gone = true; });
  ++in_flight_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    incoming_.push_back(std::move(transfer));
  }
  curl_multi_wakeup(static_cast<CURLM*>(multi_));
}

void HttpProxy::run() {
  CURLM* multi = static_cast<CURLM*>(multi_);
  std::map<CURL*, std::unique_ptr<Transfer>> active;
  while (!stopping_) {
    std::deque<std::unique_ptr<Transfer>> arrived;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      arrived.swap(incoming_);
    }
    for (std::unique_ptr<Transfer>& transfer : arrived) {
      CURL* easy = curl_easy_init();
      transfer->easy = easy;
      const HttpRequest& request = transfer->request;
      curl_easy_setopt(easy, CURLOPT_URL, transfer->url.c_str());
      curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http");
      curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
      curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, transfer->error);
      curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
      curl_easy_setopt(easy, CURLOPT_WRITEDATA, transfer.get());
      curl_easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, on_progress);
      curl_easy_setopt(easy, CURLOPT_XFERINFODATA, transfer.get());
      if (request.method == "POST") {
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, request.body.data());
        curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
      } else if (request.method != "GET") {
        curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, request.method.c_str());
      }
      transfer->headers = curl_slist_append(transfer->headers, "Expect:");
      for (const auto& [name, value] : request.headers)
        if (!hop_by_hop(name)) transfer->headers = curl_slist_append(transfer->headers, (name + ": " + value).c_str());
      curl_easy_setopt(easy, CURLOPT_HTTPHEADER, transfer->headers);
      curl_multi_add_handle(multi, easy);
      active[easy] = std::move(transfer);
    }
    int running = 0;
    curl_multi_perform(multi, &running);
    int queued = 0;
    while (CURLMsg* message = curl_multi_info_read(multi, &queued)) {
      if (message->msg != CURLMSG_DONE) continue;
      CURL* easy = message->easy_handle;
      const int code = static_cast<int>(message->data.result);
      curl_multi_remove_handle(multi, easy);
      std::unique_ptr<Transfer> transfer = std::move(active.at(easy));
      active.erase(easy);
      finish(transfer.get(), code);
    }
    curl_multi_poll(multi, nullptr, 0, 1000, nullptr);
  }
  for (auto& [easy, transfer] : active) {
    curl_multi_remove_handle(multi, easy);
    --in_flight_;
  }
}

void HttpProxy::finish(Transfer* transfer, int curl_code) {
  --in_flight_;
  const auto code = static_cast<CURLcode>(curl_code);
  Outcome outcome;
  if (code == CURLE_OK) {
    if (transfer->stream) {
      transfer->stream->close();
    } else {
      long status = 0;
      curl_easy_getinfo(transfer->easy, CURLINFO_RESPONSE_CODE, &status);
      transfer->responder->respond({static_cast<int>(status), "application/json", "", {}});
    }
  } else {
    outcome.error = transfer->error[0] != '\0' ? transfer->error : curl_easy_strerror(code);
    outcome.connected = transfer->stream != nullptr ||
                        (code != CURLE_COULDNT_CONNECT && code != CURLE_COULDNT_RESOLVE_HOST &&
                         code != CURLE_OPERATION_TIMEDOUT);
    // Mid-stream: dropping the stream without close() cuts the client's connection, so
    // it sees an incomplete answer, never one that looks whole.
    if (outcome.connected && !transfer->stream && !*transfer->client_gone)
      transfer->responder->respond({502, "application/json", http_error_body("the upstream instance failed: " + outcome.error, "server_error", 502), {}});
    if (!outcome.connected) {
      outcome.request = std::move(transfer->request);
      outcome.responder = std::move(transfer->responder);
    }
  }
  if (transfer->done) transfer->done(std::move(outcome));
}

}  // namespace ernie
