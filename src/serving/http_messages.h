// The bytes the HTTP server writes besides handler bodies: response heads, chunked
// framing, the interim 100 Continue, and the OpenAI-style JSON error bodies. Kept apart
// from the connection so the formats can be tested and read in one place.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ernie {

// How the end of a response body is found by the client.
enum class HttpFraming {
  kContentLength,  // whole responses
  kChunked,        // streams to HTTP/1.1 clients
  kUntilClose,     // streams to HTTP/1.0 clients, which do not know chunked encoding
};

struct HttpHead {
  int status = 200;              // 100..599
  unsigned version = 11;         // the request's: 10 or 11
  std::string_view content_type;  // empty: no Content-Type
  bool keep_alive = true;
  HttpFraming framing = HttpFraming::kContentLength;
  size_t content_length = 0;     // with kContentLength
  bool no_cache = false;         // Cache-Control: no-cache (streams)
  // Extra headers from the handler. Content-Length, Transfer-Encoding and Connection are
  // the server's to set and are ignored; Server, Content-Type and Cache-Control replace
  // the defaults; anything else is added, repeats included (Set-Cookie).
  const std::vector<std::pair<std::string, std::string>>* extra = nullptr;
};

// Status line and header fields, ending with the blank line.
std::string http_response_head(const HttpHead& head);

// Whether a response with this status never has a body (1xx, 204, 304).
bool http_status_has_no_body(int status);

// One chunk of a chunked body: size in hex, CRLF, the bytes, CRLF. `bytes` must not be
// empty (a zero-size chunk ends the body).
void append_http_chunk(std::string& out, std::string_view bytes);
inline constexpr std::string_view kHttpLastChunk = "0\r\n\r\n";
inline constexpr std::string_view kHttpContinue = "HTTP/1.1 100 Continue\r\n\r\n";

// {"error":{"message":...,"type":...,"param":null,"code":code}}, the shape OpenAI's
// clients parse.
std::string http_error_body(std::string_view message, std::string_view type, int code);

}  // namespace ernie
