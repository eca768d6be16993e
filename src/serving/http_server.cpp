#include "serving/http_server.h"

#include <cassert>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "serving/http_connection.h"
#include "serving/http_server_state.h"
#include "util/log.h"

namespace ernie {

namespace net = boost::asio;
using boost::system::error_code;
using tcp = net::ip::tcp;

struct HttpServer::Impl {
  Impl(HttpServerOptions options, HttpHandler handler)
      : context(std::max(1, options.io_threads)),
        state(std::make_shared<HttpServerState>(std::move(options), std::move(handler), context.get_executor())) {}

  void accept();
  tcp::endpoint resolve_endpoint();

  net::io_context context;
  const std::shared_ptr<HttpServerState> state;
  // Declared after the context: destroyed before it.
  tcp::acceptor acceptor{net::make_strand(context)};
  net::steady_timer accept_retry{acceptor.get_executor()};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  int bound_port = 0;
  std::mutex lifecycle_mutex;  // start() and stop()
  bool started = false;
  bool stopped = false;
};

tcp::endpoint HttpServer::Impl::resolve_endpoint() {
  const auto& options = state->options;
  error_code error;
  const auto address = net::ip::make_address(options.host, error);
  if (!error) return {address, static_cast<unsigned short>(options.port)};
  // A name such as "localhost".
  tcp::resolver resolver(context);
  const auto results = resolver.resolve(options.host, std::to_string(options.port),
                                        tcp::resolver::passive | tcp::resolver::numeric_service, error);
  if (error || results.empty()) {
    fail("cannot listen on ", options.host, ":", options.port, ": ",
         error ? error.message() : std::string("host not found"));
  }
  return results.begin()->endpoint();
}

void HttpServer::Impl::accept() {
  // Each connection gets its own strand, so its handlers never run concurrently while
  // connections are spread over all IO threads.
  acceptor.async_accept(net::make_strand(context), [this](const error_code& error, tcp::socket socket) {
    if (!acceptor.is_open() || state->stopping.load()) return;
    if (error) {
      if (error == net::error::operation_aborted) return;
      // Typically out of file descriptors: wait a little rather than spin on the error.
      log_warning("HTTP accept failed: ", error.message());
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](const error_code& wait_error) {
        if (!wait_error) accept();
      });
      return;
    }
    auto connection = std::make_shared<HttpConnection>(std::move(socket), state);
    state->add_connection(connection);  // owns it until it closes
    net::post(connection->executor(), [connection] { connection->start(); });
    accept();
  });
}

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}

HttpServer::~HttpServer() { stop(std::chrono::milliseconds(0)); }

void HttpServer::start() {
  Impl& impl = *impl_;
  std::lock_guard<std::mutex> lock(impl.lifecycle_mutex);
  const auto& options = impl.state->options;
  if (impl.started || impl.stopped) fail("the HTTP server can be started only once");
  if (options.io_threads < 1) fail("HTTP io_threads must be at least 1, got ", options.io_threads);
  if (options.port < 0 || options.port > 65535) {
    fail("cannot listen on ", options.host, ":", options.port, ": port out of range 0..65535");
  }
  const tcp::endpoint endpoint = impl.resolve_endpoint();
  error_code error;
  auto check = [&](const char* what) {
    if (!error) return;
    const std::string reason = error.message();
    impl.acceptor.close(error);
    fail("cannot listen on ", options.host, ":", options.port, ": ", what, ": ", reason);
  };
  impl.acceptor.open(endpoint.protocol(), error);
  check("open");
  // Lets a restarted server bind while old connections sit in TIME_WAIT; on Linux it
  // does not allow two listeners on one port, so "port in use" still fails below.
  impl.acceptor.set_option(net::socket_base::reuse_address(true), error);
  check("SO_REUSEADDR");
  impl.acceptor.bind(endpoint, error);
  check("bind");
  impl.acceptor.listen(net::socket_base::max_listen_connections, error);
  check("listen");
  impl.bound_port = impl.acceptor.local_endpoint(error).port();
  check("local address");

  impl.started = true;
  impl.work.emplace(impl.context.get_executor());
  impl.accept();
  for (int i = 0; i < options.io_threads; ++i) {
    impl.threads.emplace_back([&context = impl.context] { context.run(); });
  }
  log_debug("HTTP server listening on ", options.host, ":", impl.bound_port);
}

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::stop(std::chrono::milliseconds grace, const std::function<void()>& grace_over) {
  Impl& impl = *impl_;
  std::lock_guard<std::mutex> lock(impl.lifecycle_mutex);
  if (impl.stopped) return;
  impl.stopped = true;
  if (!impl.started) return;
  // Called from an IO thread it would wait for itself below.
  assert(!impl.context.get_executor().running_in_this_thread());
  HttpServerState& state = *impl.state;
  state.stopping.store(true);

  // 1. No new connections: a connect from now on is refused by the kernel.
  std::promise<void> acceptor_closed;
  net::post(impl.acceptor.get_executor(), [&impl, &acceptor_closed] {
    error_code error;
    impl.acceptor.close(error);
    impl.accept_retry.cancel();
    acceptor_closed.set_value();
  });
  acceptor_closed.get_future().wait();

  // 2. Idle connections close now; busy ones after their response (Connection: close).
  for (const auto& connection : state.connections()) {
    net::post(connection->executor(), [connection] { connection->server_stopping(); });
  }
  const auto deadline = std::chrono::steady_clock::now() + grace;
  if (!state.wait_no_requests(deadline)) {
    log_warning("HTTP server stopping with ", state.in_flight_requests(), " responses unfinished after ",
                grace.count(), " ms");
  }

  if (grace_over) grace_over();
  // 3. Everything left is cut; open streams see on_disconnect.
  for (const auto& connection : state.connections()) {
    net::post(connection->executor(), [connection] { connection->abort(); });
  }
  if (!state.wait_no_connections(std::chrono::steady_clock::now() + std::chrono::seconds(5))) {
    log_warning("HTTP server: ", state.open_connections(), " connections did not close in time");
  }

  // 4. From here on, responders and streams post nowhere; then the threads end.
  state.gate->shut();
  impl.work.reset();
  impl.context.stop();
  for (auto& thread : impl.threads) thread.join();
  impl.threads.clear();
  state.release_connections();  // any that did not close in time
  log_debug("HTTP server on port ", impl.bound_port, " stopped");
}

size_t HttpServer::open_connections() const { return impl_->state->open_connections(); }

size_t HttpServer::in_flight_requests() const { return impl_->state->in_flight_requests(); }

}  // namespace ernie
