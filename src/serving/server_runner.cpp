#include "serving/server_runner.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "serving/http_server.h"
#include "serving/openai_server.h"
#include "util/log.h"

namespace ernie {

sigset_t block_shutdown_signals() {
  sigset_t shutdown_signals;
  sigemptyset(&shutdown_signals);
  sigaddset(&shutdown_signals, SIGINT);
  sigaddset(&shutdown_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &shutdown_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server
  return shutdown_signals;
}

int serve_until_signalled(const ServeConfig& config, const sigset_t& shutdown_signals, EngineClient& engine,
                          const Tokenizer& tokenizer, LanguageModel& model, const GenerationConfig& generation) {
  auto service = std::make_shared<OpenAiService>(config, engine, tokenizer, model, generation);

  HttpServerOptions options;
  options.host = config.host;
  options.port = config.port;
  HttpServer server(options, [service](HttpRequest request, std::shared_ptr<HttpResponder> responder) {
    service->handle(std::move(request), std::move(responder));
  });
  server.start();
  std::unique_ptr<HttpServer> metrics_server;
  if (config.metrics_port) {
    HttpServerOptions metrics_options = options;
    metrics_options.port = *config.metrics_port;
    metrics_server = std::make_unique<HttpServer>(metrics_options, [service](HttpRequest request, std::shared_ptr<HttpResponder> responder) {
      service->handle_metrics_port(std::move(request), std::move(responder));
    });
    metrics_server->start();
    log_info("metrics on http://", config.host, ":", metrics_server->port(), "/metrics");
  }
  log_info("serving ", config.model_name, " on http://", config.host, ":", server.port(),
           " (OpenAI API: /v1/chat/completions, /v1/completions, /v1/models; /health, /metrics)");

  int signal_number = 0;
  sigwait(&shutdown_signals, &signal_number);
  log_info("received ", signal_number == SIGINT ? "SIGINT" : "SIGTERM", ": no new connections; waiting up to ",
           config.graceful_shutdown_seconds, " s for ", service->in_flight(), " request(s) in flight");
  const auto grace = std::chrono::seconds(config.graceful_shutdown_seconds);
  // Requests still running when the grace period ends are aborted then, while their
  // clients are still connected, and named in the log.
  std::vector<std::string> cut_off;
  server.stop(std::chrono::duration_cast<std::chrono::milliseconds>(grace),
              [&] { cut_off = service->abort_all_requests(); });
  if (metrics_server) metrics_server->stop(std::chrono::milliseconds(0));
  // Then wait for their last outputs (and abort anything that started meanwhile), so
  // nothing calls into a service being torn down.
  for (std::string& id : service->shutdown(std::chrono::seconds(10)))
    if (std::find(cut_off.begin(), cut_off.end(), id) == cut_off.end()) cut_off.push_back(std::move(id));
  if (!cut_off.empty()) {
    std::string ids;
    for (const std::string& id : cut_off) ids += (ids.empty() ? "" : ", ") + id;
    log_warning("shutdown cut off ", cut_off.size(), " request(s) still running after the grace period: ", ids);
  }
  log_info("server stopped");
  return 0;
}

}  // namespace ernie
