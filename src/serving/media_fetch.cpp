#include "serving/media_fetch.h"

#include <curl/curl.h>

#include <mutex>
#include <string_view>

#include "util/base64.h"
#include "util/error.h"

namespace ernie {
namespace {

std::vector<uint8_t> decode_data_url(std::string_view url, size_t max_bytes) {
  // data:[<media type>][;base64],<data>
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) fail("a data: URL needs a comma before its data");
  const std::string_view header = url.substr(5, comma - 5);
  if (header.size() < 7 || header.substr(header.size() - 7) != ";base64")
    fail("a data: URL must be base64 (data:image/png;base64,...), got \"data:", header.substr(0, 64), ",\"");
  return decode_base64(url.substr(comma + 1), max_bytes);
}

struct Transfer {
  std::vector<uint8_t> bytes;
  size_t max_bytes = 0;
  bool too_large = false;
};

size_t on_data(char* data, size_t size, size_t count, void* user) {
  auto& transfer = *static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  if (transfer.bytes.size() + bytes > transfer.max_bytes) {
    transfer.too_large = true;
    return 0;  // aborts the transfer
  }
  transfer.bytes.insert(transfer.bytes.end(), data, data + bytes);
  return bytes;
}

std::vector<uint8_t> fetch_http(const std::string& url, const FetchLimits& limits) {
  static std::once_flag initialised;
  std::call_once(initialised, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURL* curl = curl_easy_init();
  if (curl == nullptr) fail("cannot start an HTTP transfer");
  Transfer transfer;
  transfer.max_bytes = limits.max_bytes;
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, static_cast<long>(limits.max_redirects));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(limits.timeout_seconds * 1000));
  curl_easy_setopt(curl, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(limits.max_bytes));
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // worker threads: no SIGALRM for DNS timeouts
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "ernie.cpp");
  const CURLcode code = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(curl);
  if (transfer.too_large || code == CURLE_FILESIZE_EXCEEDED)
    fail("fetching ", url, ": more than ", limits.max_bytes, " bytes (the limit)");
  if (code == CURLE_OPERATION_TIMEDOUT)
    fail("fetching ", url, ": no complete answer within ", limits.timeout_seconds, " s");
  if (code != CURLE_OK) fail("fetching ", url, ": ", error[0] != '\0' ? error : curl_easy_strerror(code));
  if (status != 200) fail("fetching ", url, ": the server answered HTTP ", status);
  return std::move(transfer.bytes);
}

}  // namespace

std::vector<uint8_t> fetch_media(const std::string& url, const FetchLimits& limits) {
  const std::string_view view(url);
  if (view.substr(0, 5) == "data:") return decode_data_url(view, limits.max_bytes);
  if (view.substr(0, 7) == "http://" || view.substr(0, 8) == "https://") return fetch_http(url, limits);
  const size_t colon = view.find(':');
  fail("the URL scheme \"", colon == std::string_view::npos || colon > 16 ? std::string_view("(none)") : view.substr(0, colon),
       "\" is not fetched; send a data: URL (data:image/png;base64,...) or an http(s) URL");
}

}  // namespace ernie
