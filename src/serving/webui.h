// The built-in chat page (`ernie serve` at /, off with --no-webui): static files from
// webui/ compiled into the executable (cmake/embed_webui.cmake), so the one binary still
// carries everything. Responses are built from memory, so the HTTP IO thread serves them.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "serving/http_server.h"

namespace ernie {

struct WebAsset {
  std::string_view name;  // file name in webui/, e.g. "app.js"
  std::string_view bytes;
};

// Every file of the page (generated).
std::span<const WebAsset> webui_assets();

// The response for a GET of `path` when it is one of the page's: / (index.html) and
// /webui/NAME. The page may load only its own files and talk only to its own origin
// (Content-Security-Policy), and nothing is sniffed or framed elsewhere.
std::optional<HttpResponse> webui_response(std::string_view path);

}  // namespace ernie
