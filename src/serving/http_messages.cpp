#include "serving/http_messages.h"

#include <array>
#include <charconv>
#include <sstream>

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/write.hpp>
#include <nlohmann/json.hpp>

#include "util/log.h"

namespace ernie {
namespace {

namespace http = boost::beast::http;

// Beast 1.74 takes boost::string_view, which does not convert from std::string_view.
boost::beast::string_view beast_view(std::string_view text) { return {text.data(), text.size()}; }

bool is_token_char(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// A handler's header that would break the framing (CR, LF, NUL) or is not a field name
// at all must not reach the wire: it could smuggle a second response to the client.
bool is_safe_field(std::string_view name, std::string_view value) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!is_token_char(c)) return false;
  }
  for (char c : value) {
    if (c == '\r' || c == '\n' || c == '\0') return false;
  }
  return true;
}

void add_extra_headers(http::response_header<>& header,
                       const std::vector<std::pair<std::string, std::string>>& extra) {
  for (const auto& [name, value] : extra) {
    if (!is_safe_field(name, value)) {
      log_warning("HTTP response header '", name, "' is not a valid field; left out");
      continue;
    }
    switch (http::string_to_field(name)) {
      case http::field::content_length:
      case http::field::transfer_encoding:
      case http::field::connection:
        continue;  // framing and keep-alive are the server's
      case http::field::server:
      case http::field::content_type:
      case http::field::cache_control:
        header.set(name, value);
        break;
      default:
        header.insert(name, value);
    }
  }
}

}  // namespace

bool http_status_has_no_body(int status) { return (status >= 100 && status < 200) || status == 204 || status == 304; }

std::string http_response_head(const HttpHead& head) {
  http::response_header<> header;
  header.version(head.version);
  header.result(static_cast<unsigned>(head.status));
  if (http::int_to_status(static_cast<unsigned>(head.status)) == http::status::unknown) {
    header.reason("Unknown");  // Beast would write "<unknown-status>"
  }
  header.set(http::field::server, "ernie.cpp");
  if (!head.content_type.empty()) header.set(http::field::content_type, beast_view(head.content_type));
  if (head.no_cache) header.set(http::field::cache_control, "no-cache");
  if (head.extra != nullptr) add_extra_headers(header, *head.extra);
  switch (head.framing) {
    case HttpFraming::kContentLength:
      if (!http_status_has_no_body(head.status)) {
        header.set(http::field::content_length, std::to_string(head.content_length));
      }
      break;
    case HttpFraming::kChunked:
      header.set(http::field::transfer_encoding, "chunked");
      break;
    case HttpFraming::kUntilClose:
      break;
  }
  // Said explicitly for both versions: streaming clients look for it, and HTTP/1.0 ones
  // close unless told keep-alive.
  header.set(http::field::connection, head.keep_alive ? "keep-alive" : "close");
  std::ostringstream out;
  out << header;
  return out.str();
}

void append_http_chunk(std::string& out, std::string_view bytes) {
  std::array<char, 24> size;
  const auto result = std::to_chars(size.data(), size.data() + size.size(), bytes.size(), 16);
  out.append(size.data(), result.ptr);
  out += "\r\n";
  out += bytes;
  out += "\r\n";
}

std::string http_error_body(std::string_view message, std::string_view type, int code) {
  // ordered_json keeps the field order OpenAI uses; a plain json object would sort keys.
  nlohmann::ordered_json error;
  error["message"] = message;
  error["type"] = type;
  error["param"] = nullptr;
  error["code"] = code;
  nlohmann::ordered_json body;
  body["error"] = std::move(error);
  // Replace, not throw, on invalid UTF-8: error messages may quote client bytes.
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace ernie
