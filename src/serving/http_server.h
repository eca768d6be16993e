// A small asynchronous HTTP/1.1 server (Boost.Beast over Boost.Asio) for the OpenAI-style
// API. It knows nothing about the API itself: it parses requests, hands each one to a
// handler on an IO thread, and sends back whatever the handler answers, at once or later,
// whole or as a chunked stream (Server-Sent Events). Generation runs on the engine thread,
// so everything a handler is given may be used from any thread.
// See docs/http-server.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ernie {

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string target;                          // path + query as sent
  std::string path;                            // without the query
  std::map<std::string, std::string> headers;  // keys lower-cased; repeated fields joined by ", "
  std::string body;                            // chunked bodies arrive decoded
  std::string remote_address;                  // "ip:port" of the peer
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

// A response sent in pieces (Server-Sent Events). Thread-safe: write() may be called from
// any thread; it never waits for the network: it queues the bytes and an IO thread sends
// them in order. After the peer disconnects, write() returns false and the on_disconnect
// callback has been (or will be) called exactly once.
class HttpStream {
 public:
  virtual ~HttpStream() = default;
  // Sends `bytes` as one chunk. False once the peer is gone or after close(); an empty
  // write sends nothing (an empty chunk would end the response).
  virtual bool write(std::string bytes) = 0;
  // Finishes the response (the chunked terminator); the connection then reads the next
  // request, or closes if the client asked for that. Dropping the last reference to a
  // stream without close() cuts the connection instead, so the client sees an incomplete
  // response rather than one that looks whole.
  virtual void close() = 0;
  virtual bool disconnected() const = 0;
  // Called once, on an IO thread, when the peer goes away (or the server stops) before
  // close(). Registered after that already happened, it is still called once, soon, on an
  // IO thread. A later registration replaces an earlier one that has not been called.
  virtual void on_disconnect(std::function<void()> callback) = 0;
};

// Given to the handler for one request; exactly one of respond()/start_stream() must be
// called, on any thread, possibly later. If the last reference goes away without either,
// the client gets a 500 JSON error, so a forgotten request never hangs. After the client
// disconnected, both are accepted and dropped silently (the stream reports disconnected).
class HttpResponder {
 public:
  virtual ~HttpResponder() = default;
  virtual void respond(HttpResponse response) = 0;
  virtual std::shared_ptr<HttpStream> start_stream(int status, std::string content_type,
                                                   std::vector<std::pair<std::string, std::string>> headers = {}) = 0;
  // Called once, on an IO thread, if the client goes away (closes, resets, or sends
  // EOF) or the server cuts the connection while the request is being handled, so the
  // work for it can stop. Registered after that happened, it is still called once,
  // soon. Once a stream is started, the stream's on_disconnect reports instead.
  virtual void on_disconnect(std::function<void()> callback) = 0;
};

// Runs on an IO thread and must not block: anything slow goes to another thread, with
// the responder.
using HttpHandler = std::function<void(HttpRequest request, std::shared_ptr<HttpResponder> responder)>;

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  int port = 8000;                        // 0 = pick a free port (tests)
  size_t max_body_bytes = 32 << 20;       // larger: 413 with an OpenAI-style JSON error, body not read
  int io_threads = 1;
  std::chrono::seconds read_timeout{60};  // idle keep-alive connection / no byte of a request for this long: closed
  // From a request's first byte to its last: a client that trickles its request byte by
  // byte is cut off here even though each read comes within read_timeout.
  std::chrono::seconds request_timeout{300};
  // A response (or stream) the client stops reading: closed when a write makes no
  // progress for this long.
  std::chrono::seconds write_timeout{60};
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpHandler handler);
  ~HttpServer();  // stop() with no grace
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens, then starts the IO threads. Throws ernie::Error
  // "cannot listen on HOST:PORT: reason" (port in use, bad address, ...).
  void start();
  int port() const;  // the bound port (the chosen one when options.port was 0)

  // Graceful stop: stops accepting at once and closes idle connections; waits up to
  // `grace` for in-flight responses to finish (respond() sent, or stream close()d); then
  // calls `grace_over` (if given: the owner may end what is left in its own way), closes
  // every connection (open streams see on_disconnect) and joins the IO threads.
  // Idempotent; the server cannot be started again. Not from a handler or callback: it
  // waits for the IO threads.
  void stop(std::chrono::milliseconds grace, const std::function<void()>& grace_over = nullptr);

  size_t open_connections() const;
  size_t in_flight_requests() const;  // requests read whose response has not been sent in full

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ernie
