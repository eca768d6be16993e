#include "serving/router_registration.h"

#include <curl/curl.h>

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/log.h"

namespace ernie {
namespace {

size_t collect(char* data, size_t size, size_t count, void* user) {
  auto& body = *static_cast<std::string*>(user);
  const size_t bytes = size * count;
  if (body.size() + bytes > (1 << 20)) return 0;  // a registration answer is small
  body.append(data, bytes);
  return bytes;
}

}  // namespace

RouterRegistration::RouterRegistration(RouterRegistrationInfo info, PrefillsSink on_prefills)
    : info_(std::move(info)), on_prefills_(std::move(on_prefills)) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  thread_ = std::thread([this] { run(); });
}

RouterRegistration::~RouterRegistration() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

bool RouterRegistration::register_once(std::string& error) {
  nlohmann::json body = {{"role", info_.role}, {"host", info_.host}, {"port", info_.port}};
  if (info_.engine_worker_queue_port != 0) body["engine_worker_queue_port"] = info_.engine_worker_queue_port;
  const std::string request = body.dump();
  const std::string url = "http://" + info_.router + "/register";
  std::string answer;
  char curl_error[CURL_ERROR_SIZE] = {};
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    error = "cannot start an HTTP transfer";
    return false;
  }
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 2000L);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_error);
  const CURLcode code = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  if (code != CURLE_OK) {
    error = curl_error[0] != '\0' ? curl_error : curl_easy_strerror(code);
    return false;
  }
  if (status != 200) {
    error = str_cat("HTTP ", status, ": ", answer.substr(0, 300));
    return false;
  }
  try {
    const nlohmann::json parsed = nlohmann::json::parse(answer);
    std::vector<std::string> endpoints;
    for (const auto& endpoint : parsed.at("prefill_endpoints")) endpoints.push_back(endpoint.get<std::string>());
    if (on_prefills_) on_prefills_(endpoints);
  } catch (const std::exception& parse_error) {
    error = str_cat("the router's answer is not understood: ", parse_error.what());
    return false;
  }
  return true;
}

void RouterRegistration::run() {
  bool registered = false;
  std::string last_error;
  for (;;) {
    std::string error;
    const bool ok = register_once(error);
    if (ok && !registered) log_info("registered with the router at ", info_.router, " as ", info_.role);
    if (!ok && (registered || error != last_error))
      log_warning("cannot register with the router at ", info_.router, ": ", error, " (retrying every second)");
    registered = ok;
    last_error = error;
    std::unique_lock<std::mutex> lock(mutex_);
    if (wake_.wait_for(lock, std::chrono::seconds(1), [&] { return stopping_; })) return;
  }
}

}  // namespace ernie
