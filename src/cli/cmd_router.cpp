// ernie router: FastDeploy's router for prefill/decode disaggregation across machines
// (serving/router.h): instances started with --router register with it, clients send it
// their OpenAI requests.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "serving/router.h"
#include "serving/server_runner.h"
#include "util/error.h"
#include "util/log.h"

namespace ernie {

int router_command(int argc, char** argv) {
  const sigset_t shutdown_signals = block_shutdown_signals();
  set_log_to_stdout(true);
  const ArgParser parser(
      "ernie router [--host HOST] [--port PORT]",
      "Routes OpenAI requests to the decode instances registered with it (ernie serve --router HOST:PORT), which "
      "have their prompts computed by the registered prefill instances (docs/disaggregation.md).",
      {{"host", "HOST", "address to bind", "0.0.0.0"},
       {"port", "PORT", "HTTP port for clients and registrations", "30000"},
       {"splitwise", "", "accepted for FastDeploy compatibility: this router always pairs prefill and decode instances", ""}});
  const ParsedArgs args = parser.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::fputs(parser.help_text().c_str(), stdout);
    return 0;
  }
  const int64_t port = args.get_int("port");
  if (port < 0 || port > 65535) fail("--port must lie in 0..65535, got ", port);
  auto service = std::make_shared<RouterService>();
  HttpServerOptions options;
  options.host = args.get("host");
  options.port = static_cast<int>(port);
  HttpServer server(options, [service](HttpRequest request, std::shared_ptr<HttpResponder> responder) {
    service->handle(std::move(request), std::move(responder));
  });
  server.start();
  log_info("router on http://", options.host, ":", server.port(), " (POST /register, GET /registered; OpenAI requests "
           "go to the registered decode instances)");
  int signal_number = 0;
  sigwait(&shutdown_signals, &signal_number);
  log_info("received ", signal_number == SIGINT ? "SIGINT" : "SIGTERM", ": stopping the router");
  server.stop(std::chrono::seconds(5));
  return 0;
}

}  // namespace ernie
