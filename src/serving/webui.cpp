#include "serving/webui.h"

namespace ernie {
namespace {

std::string_view content_type(std::string_view name) {
  if (name.ends_with(".html")) return "text/html; charset=utf-8";
  if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (name.ends_with(".css")) return "text/css; charset=utf-8";
  if (name.ends_with(".png")) return "image/png";
  return "application/octet-stream";
}

// Only the page's own scripts and styles run, and it talks only to this server. Model
// output is put in the page as text (webui/markdown.js builds nodes, never HTML), and
// the policy stops an injected script even if that ever failed. Images the user attaches
// are shown from data: and blob: URLs.
constexpr const char* kPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; media-src 'self' blob:; "
    "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

}  // namespace

std::optional<HttpResponse> webui_response(std::string_view path) {
  constexpr std::string_view kPrefix = "/webui/";
  std::string_view name;
  if (path == "/" || path == "/index.html") name = "index.html";
  else if (path.starts_with(kPrefix)) name = path.substr(kPrefix.size());
  else return std::nullopt;
  for (const WebAsset& asset : webui_assets()) {
    if (asset.name != name) continue;
    HttpResponse response;
    response.content_type = std::string(content_type(name));
    response.body = std::string(asset.bytes);
    response.headers = {{"Content-Security-Policy", kPolicy},
                        {"X-Content-Type-Options", "nosniff"},
                        {"Referrer-Policy", "no-referrer"},
                        {"Cache-Control", "no-cache"}};
    return response;
  }
  return std::nullopt;
}

}  // namespace ernie
