// The HTTP server against a small blocking client on POSIX sockets, so the wire format is
// checked byte by byte rather than through another HTTP library's leniency.
#include "serving/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "serving/http_messages.h"
#include "util/error.h"

namespace ernie {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kIoTimeout = 10s;  // generous: a loaded CI machine must not make tests flaky

struct Head {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-cased keys
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

struct Response {
  Head head;
  std::string body;
  std::vector<std::string> chunks;  // for chunked responses
};

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// A blocking HTTP/1.1 client that parses just enough to check the server.
class TestClient {
 public:
  explicit TestClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    connect_errno_ = connected_ ? 0 : errno;
  }
  ~TestClient() { close(); }
  TestClient(const TestClient&) = delete;
  TestClient& operator=(const TestClient&) = delete;

  bool connected() const { return connected_; }
  int connect_errno() const { return connect_errno_; }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Closes with a reset (RST) instead of FIN, as a crashed peer or a proxy might.
  void reset() {
    linger hard{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
    close();
  }

  // Half-close: no more requests, but still reading.
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

  bool send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  std::optional<Head> read_head() {
    Head head;
    auto status_line = read_line();
    if (!status_line) return std::nullopt;
    // "HTTP/1.1 200 OK"
    if (status_line->size() < 12 || status_line->compare(0, 5, "HTTP/") != 0) return std::nullopt;
    head.status = std::stoi(status_line->substr(9, 3));
    while (true) {
      auto line = read_line();
      if (!line) return std::nullopt;
      if (line->empty()) break;
      const size_t colon = line->find(':');
      if (colon == std::string::npos) return std::nullopt;
      std::string value = line->substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      head.headers[lower(line->substr(0, colon))] = value;
    }
    return head;
  }

  // The next chunk's data; "" for the last chunk; nullopt on timeout, EOF or bad framing.
  std::optional<std::string> read_chunk() {
    auto size_line = read_line();
    if (!size_line || size_line->empty()) return std::nullopt;
    const size_t size = std::stoul(*size_line, nullptr, 16);
    auto data = read_exact(size);
    auto end = read_line();
    if (!data || !end || !end->empty()) return std::nullopt;
    return data;
  }

  std::optional<Response> read_response() {
    Response response;
    auto head = read_head();
    if (!head) return std::nullopt;
    response.head = *head;
    if (lower(head->header("transfer-encoding")) == "chunked") {
      while (true) {
        auto chunk = read_chunk();
        if (!chunk) return std::nullopt;
        if (chunk->empty()) break;
        response.body += *chunk;
        response.chunks.push_back(std::move(*chunk));
      }
    } else if (!head->header("content-length").empty()) {
      auto body = read_exact(std::stoul(head->header("content-length")));
      if (!body) return std::nullopt;
      response.body = *body;
    }
    return response;
  }

  std::optional<std::string> read_exact(size_t size) {
    while (buffer_.size() < size) {
      if (!fill()) return std::nullopt;
    }
    std::string out = buffer_.substr(0, size);
    buffer_.erase(0, size);
    return out;
  }

  // True once the server closes the connection (EOF or reset); false on timeout.
  bool wait_closed(std::chrono::milliseconds timeout = kIoTimeout) {
    const auto deadline = Clock::now() + timeout;
    while (!eof_) {
      if (Clock::now() >= deadline) return false;
      buffer_.clear();
      fill(deadline);
    }
    return true;
  }

  bool eof() const { return eof_; }

 private:
  std::optional<std::string> read_line() {
    while (true) {
      const size_t end = buffer_.find("\r\n");
      if (end != std::string::npos) {
        std::string line = buffer_.substr(0, end);
        buffer_.erase(0, end + 2);
        return line;
      }
      if (!fill()) return std::nullopt;
    }
  }

  bool fill(Clock::time_point deadline = Clock::now() + kIoTimeout) {
    if (fd_ < 0 || eof_) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd poll_fd{fd_, POLLIN, 0};
    if (::poll(&poll_fd, 1, static_cast<int>(std::max<int64_t>(0, left.count()))) <= 0) return false;
    char data[16384];
    const ssize_t n = ::recv(fd_, data, sizeof data, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buffer_.append(data, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  int connect_errno_ = 0;
  bool eof_ = false;
  std::string buffer_;
};

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout = kIoTimeout) {
  const auto deadline = Clock::now() + timeout;
  while (!condition()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

std::string get(const std::string& target) { return "GET " + target + " HTTP/1.1\r\nHost: test\r\n\r\n"; }

std::string post(const std::string& target, const std::string& body, const std::string& extra = "") {
  return "POST " + target + " HTTP/1.1\r\nHost: test\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
         extra + "\r\n" + body;
}

// Counts on_disconnect calls and when the first came.
struct DisconnectProbe {
  std::atomic<int> calls{0};
  std::atomic<int64_t> first_at_ns{0};
  std::function<void()> callback() {
    return [this] {
      int64_t unset = 0;
      first_at_ns.compare_exchange_strong(unset, Clock::now().time_since_epoch().count());
      calls.fetch_add(1);  // last: a test may destroy the probe once it sees the call
    };
  }
  Clock::time_point first_at() const { return Clock::time_point(Clock::duration(first_at_ns.load())); }
};

class HttpServerTest : public ::testing::Test {
 protected:
  void start(HttpServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    server_ = std::make_unique<HttpServer>(options, [this](HttpRequest request, std::shared_ptr<HttpResponder> responder) {
      handler_(std::move(request), std::move(responder));
    });
    server_->start();
    ASSERT_GT(server_->port(), 0);
  }

  void TearDown() override {
    join_producers();
    if (server_) server_->stop(1s);
  }

  // Runs `work` on its own thread, as the engine would answer.
  void spawn(std::function<void()> work) {
    std::lock_guard<std::mutex> lock(producers_mutex_);
    producers_.emplace_back(std::move(work));
  }

  void join_producers() {
    std::vector<std::thread> producers;
    {
      std::lock_guard<std::mutex> lock(producers_mutex_);
      producers.swap(producers_);
    }
    for (auto& producer : producers) producer.join();
  }

  // The responder of the latest request, kept for the test body to answer.
  std::shared_ptr<HttpResponder> wait_responder() {
    std::shared_ptr<HttpResponder> responder;
    wait_until([&] {
      std::lock_guard<std::mutex> lock(kept_mutex_);
      responder = std::exchange(kept_, nullptr);
      return responder != nullptr;
    });
    return responder;
  }
  void keep_responder(std::shared_ptr<HttpResponder> responder) {
    std::lock_guard<std::mutex> lock(kept_mutex_);
    kept_ = std::move(responder);
  }

  int port() const { return server_->port(); }

  HttpHandler handler_;
  std::unique_ptr<HttpServer> server_;
  std::mutex producers_mutex_;
  std::vector<std::thread> producers_;
  std::mutex kept_mutex_;
  std::shared_ptr<HttpResponder> kept_;
};

void echo(HttpRequest request, std::shared_ptr<HttpResponder> responder) {
  HttpResponse response;
  response.content_type = "text/plain";
  response.body = request.method + " " + request.path + " " + request.target + " [" + request.body + "]";
  if (request.headers.count("x-test")) response.body += " x-test=" + request.headers.at("x-test");
  response.headers.emplace_back("X-Remote", request.remote_address);
  responder->respond(std::move(response));
}

// ---- formats ---------------------------------------------------------------------

TEST(HttpMessagesTest, ErrorBodyHasOpenAiShapeAndOrder) {
  EXPECT_EQ(http_error_body("internal error: no response", "server_error", 500),
            R"({"error":{"message":"internal error: no response","type":"server_error","param":null,"code":500}})");
  EXPECT_EQ(http_error_body("a \"quoted\"\n", "x", 400),
            R"({"error":{"message":"a \"quoted\"\n","type":"x","param":null,"code":400}})");
}

TEST(HttpMessagesTest, ChunkFraming) {
  std::string out;
  append_http_chunk(out, "hello");
  append_http_chunk(out, std::string(26, 'x'));
  EXPECT_EQ(out, "5\r\nhello\r\n1a\r\n" + std::string(26, 'x') + "\r\n");
}

TEST(HttpMessagesTest, HeadFramingAndUnsafeExtraHeaders) {
  const std::vector<std::pair<std::string, std::string>> extra = {
      {"X-Ok", "1"}, {"X-Bad", "a\r\nInjected: yes"}, {"Content-Length", "999"}, {"Content-Type", "text/html"}};
  HttpHead head;
  head.status = 201;
  head.content_type = "application/json";
  head.content_length = 7;
  head.extra = &extra;
  const std::string text = http_response_head(head);
  EXPECT_EQ(text.rfind("HTTP/1.1 201 Created\r\n", 0), 0u) << text;
  EXPECT_NE(text.find("Server: ernie.cpp\r\n"), std::string::npos);
  EXPECT_NE(text.find("Content-Length: 7\r\n"), std::string::npos);
  EXPECT_EQ(text.find("999"), std::string::npos);
  EXPECT_EQ(text.find("Injected"), std::string::npos);
  EXPECT_NE(text.find("X-Ok: 1\r\n"), std::string::npos);
  EXPECT_NE(text.find("Content-Type: text/html\r\n"), std::string::npos);
  EXPECT_EQ(text.find("application/json"), std::string::npos);
  EXPECT_EQ(text.substr(text.size() - 4), "\r\n\r\n");
}

// ---- requests and responses ------------------------------------------------------

TEST_F(HttpServerTest, GetAndPostAreEchoed) {
  handler_ = echo;
  start();
  TestClient client(port());
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.send("GET /v1/models?limit=2 HTTP/1.1\r\nHost: test\r\nX-Test: yes\r\n\r\n"));
  auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->head.status, 200);
  EXPECT_EQ(response->body, "GET /v1/models /v1/models?limit=2 [] x-test=yes");
  EXPECT_EQ(response->head.header("server"), "ernie.cpp");
  EXPECT_EQ(response->head.header("content-type"), "text/plain");
  EXPECT_EQ(response->head.header("x-remote").rfind("127.0.0.1:", 0), 0u);

  const std::string body = "{\"prompt\":\"hi\"}";
  ASSERT_TRUE(client.send(post("/v1/completions", body)));
  response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->head.status, 200);
  EXPECT_EQ(response->body, "POST /v1/completions /v1/completions [" + body + "]");
}

TEST_F(HttpServerTest, ChunkedRequestBodyIsDecoded) {
  handler_ = echo;
  start();
  TestClient client(port());
  ASSERT_TRUE(client.send(
      "POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"));
  auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "POST /x /x [abcdefg]");
}

TEST_F(HttpServerTest, KeepAliveServesThreeRequestsOnOneConnection) {
  handler_ = echo;
  start();
  TestClient client(port());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client.send(post("/r" + std::to_string(i), "body" + std::to_string(i))));
    auto response = client.read_response();
    ASSERT_TRUE(response) << "request " << i;
    EXPECT_EQ(response->head.status, 200);
    EXPECT_EQ(response->body, "POST /r" + std::to_string(i) + " /r" + std::to_string(i) + " [body" +
                                  std::to_string(i) + "]");
    EXPECT_NE(lower(response->head.header("connection")), "close");
  }
  EXPECT_EQ(server_->open_connections(), 1u);
  EXPECT_FALSE(client.eof());
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  handler_ = echo;
  start();
  TestClient client(port());
  ASSERT_TRUE(client.send(get("/a") + post("/b", "B") + get("/c")));
  for (const char* expected : {"GET /a /a []", "POST /b /b [B]", "GET /c /c []"}) {
    auto response = client.read_response();
    ASSERT_TRUE(response);
    EXPECT_EQ(response->body, expected);
  }
}

TEST_F(HttpServerTest, ReadAheadWhileWaitingIsKeptForLater) {
  handler_ = [this](HttpRequest request, std::shared_ptr<HttpResponder> responder) {
    if (request.path == "/wait") {
      keep_responder(std::move(responder));
    } else {
      echo(std::move(request), std::move(responder));
    }
  };
  start();
  TestClient client(port());
  // More than the server reads ahead (64 KiB): it stops reading while the first request
  // waits, and must neither lose the connection nor the bytes.
  std::string pipelined = get("/wait");
  while (pipelined.size() < 96 * 1024) pipelined += post("/next", std::string(1000, 'n'));
  const size_t followers = (pipelined.size() - get("/wait").size()) / post("/next", std::string(1000, 'n')).size();
  ASSERT_TRUE(client.send(pipelined));
  auto responder = wait_responder();
  ASSERT_TRUE(responder);
  std::this_thread::sleep_for(200ms);
  responder->respond(HttpResponse{200, "text/plain", "waited", {}});
  auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "waited");
  for (size_t i = 0; i < followers; ++i) {
    response = client.read_response();
    ASSERT_TRUE(response) << "follower " << i;
    EXPECT_EQ(response->body, "POST /next /next [" + std::string(1000, 'n') + "]");
  }
}

TEST_F(HttpServerTest, HeadResponseHasLengthButNoBody) {
  handler_ = echo;
  start();
  TestClient client(port());
  ASSERT_TRUE(client.send("HEAD /h HTTP/1.1\r\nHost: t\r\n\r\n" + get("/after")));
  auto head = client.read_head();
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->header("content-length"), std::to_string(std::string("HEAD /h /h []").size()));
  auto response = client.read_response();  // would misparse if the HEAD body had been sent
  ASSERT_TRUE(response);
  EXPECT_EQ(response->head.status, 200);
  EXPECT_EQ(response->body, "GET /after /after []");
}

TEST_F(HttpServerTest, ConnectionCloseIsHonoured) {
  handler_ = echo;
  start();
  TestClient client(port());
  ASSERT_TRUE(client.send("GET /bye HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(lower(response->head.header("connection")), "close");
  EXPECT_TRUE(client.wait_closed());
}

TEST_F(HttpServerTest, AsynchronousAnswerFromAnotherThread) {
  handler_ = [this](HttpRequest request, std::shared_ptr<HttpResponder> responder) {
    spawn([request, responder] {
      std::this_thread::sleep_for(50ms);
      responder->respond(HttpResponse{202, "application/json", "{\"late\":true}", {}});
    });
  };
  start();
  TestClient client(port());
  ASSERT_TRUE(client.send(get("/slow")));
  auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->head.status, 202);
  EXPECT_EQ(response->body, "{\"late\":true}");
  EXPECT_TRUE(wait_until([&] { return server_->in_flight_requests() == 0; }));
}

TEST_F(HttpServerTest, OversizeBodyByContentLengthIs413WithoutReadingIt) {
  std::atomic<int> handled{0};
  handler_ = [&](HttpRequest request, std::shared_ptr<HttpResponder> responder) {
    ++handled;
    echo(std::move(request), std::move(responder));
  };
  HttpServerOptions options;
  options.max_body_bytes = 1024;
  start(options);
  TestClient client(port());
  // Declares 10 MB but sends only a little of it: the answer must come anyway.
  ASSERT_TRUE(client.send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n" +
                          std::string(5000, 'x')));
  auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->head.status, 413);
  EXPECT_EQ(response->head.header("content-type"), "application/json");
  EXPECT_EQ(response->body,
            R"({"error":{"message":"request body of 10000000 bytes exceeds the limit of 1024 bytes",)"
            R"("type":"invalid_request_error","param":null,"code":413}})");
  EXPECT_TRUE(client.wait_closed());
  EXPECT_EQ(handled.load(), 0);
}

TEST_F(HttpServerTest, OversizeChunkedBodyIs413) {
  handler_ = echo;
  HttpServerOptions options;
  options.max_body_bytes = 1024;
  start(options);
  TestClient client(port());
  ASSERT_TRUE(client.send("POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n" +
                          std::string(1024, 'a') + "\r\n1\r\nb\r\n0\r\n\r\n"));
  auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->head.status, 413);
  EXPECT_NE(response->body.find("exceeds the limit of 1024 bytes"), std::string::npos) << response->body;
  EXPECT_TRUE(client.wait_closed());
}

TEST_F(HttpServerTest, BodyAtTheLimitIsAccepted) {
  handler_ = echo;
  HttpServerOptions options;
  options.max_body_bytes = 1024;
  start(options);
  TestClient client(port());
  ASSERT_TRUE(client.send(post("/x", std::string(1024, 'z'))));
  auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->head.status, 200);
}

TEST_F(HttpServerTest, ExpectContinue) {
  handler_ = echo;
  HttpServerOptions options;
  options.max_body_bytes = 1024;
  start(options);
  TestClient client(port());
  ASSERT_TRUE(client.send("POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  auto interim = client.read_head();
  ASSERT_TRUE(interim);
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(client.send("hello"));
  auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->head.status, 200);
  EXPECT_EQ(response->body, "POST /up /up [hello]");

  // Too large: refused at once, no 100 Continue.
  TestClient other(port());
  ASSERT_TRUE(other.send("POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n"));
  response = other.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->head.status, 413);
}

TEST_F(HttpServerTest, MalformedRequestIs400AndClose) {
  handler_ = echo;
  start();
  for (const std::string bad : {"this is not http\r\n\r\n", "GET / HTTP/1.1\r\nNo colon here\r\n\r\n",
                                "POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n"}) {
    TestClient client(port());
    ASSERT_TRUE(client.send(bad));
    auto response = client.read_response();
    ASSERT_TRUE(response) << bad;
    EXPECT_EQ(response->head.status, 400) << bad;
    EXPECT_NE(response->body.find("\"type\":\"invalid_request_error\""), std::string::npos);
    EXPECT_NE(response->body.find("\"code\":400"), std::string::npos);
    EXPECT_TRUE(client.wait_closed()) << bad;
  }
}

TEST_F(HttpServerTest, DroppedResponderGives500) {
  handler_ = [](HttpRequest, std::shared_ptr<HttpResponder>) {};
  start();
  TestClient client(port());
  ASSERT_TRUE(client.send(get("/forgotten")));
  auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->head.status, 500);
  EXPECT_EQ(response->body,
            R"({"error":{"message":"internal error: no response","type":"server_error","param":null,"code":500}})");
  // The connection is still usable afterwards.
  handler_ = echo;
  ASSERT_TRUE(client.send(get("/next")));
  response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->head.status, 200);
}

TEST_F(HttpServerTest, ThrowingHandlerGives500) {
  handler_ = [](HttpRequest, std::shared_ptr<HttpResponder>) { throw Error("boom"); };
  start();
  TestClient client(port());
  ASSERT_TRUE(client.send(get("/throws")));
  auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->head.status, 500);
}

TEST_F(HttpServerTest, IdleConnectionTimesOut) {
  handler_ = echo;
  HttpServerOptions options;
  options.read_timeout = 1s;
  start(options);
  TestClient client(port());
  ASSERT_TRUE(client.connected());
  const auto begin = Clock::now();
  EXPECT_TRUE(client.wait_closed(10s));
  EXPECT_GE(Clock::now() - begin, 900ms);
  EXPECT_TRUE(wait_until([&] { return server_->open_connections() == 0; }));
}

// Issue 12: a body trickled a byte at a time, each within the idle timeout, kept its
// connection forever. The whole body now has a deadline of its own.
TEST_F(HttpServerTest, ATrickledBodyMeetsTheRequestDeadline) {
  handler_ = echo;
  HttpServerOptions options;
  options.read_timeout = 2s;
  options.request_timeout = 1s;
  start(options);
  TestClient client(port());
  ASSERT_TRUE(client.send("POST /slow HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\n"));
  const auto begin = Clock::now();
  // Writing from this thread while the server answers: the read below follows.
  for (int i = 0; i < 15 && client.send("x"); ++i) std::this_thread::sleep_for(100ms);
  const auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->head.status, 408);
  EXPECT_LT(Clock::now() - begin, 2500ms);
  EXPECT_TRUE(wait_until([&] { return server_->open_connections() == 0; }));
}

// A client that never reads its (large) response cannot hold the connection forever.
TEST_F(HttpServerTest, AResponseTheClientDoesNotReadIsCutOffByTheWriteTimeout) {
  handler_ = [](HttpRequest, std::shared_ptr<HttpResponder> responder) {
    responder->respond({200, "text/plain", std::string(64 << 20, 'x'), {}});
  };
  HttpServerOptions options;
  options.write_timeout = 1s;
  start(options);
  TestClient client(port());
  ASSERT_TRUE(client.send(get("/big")));  // and never reads
  ASSERT_TRUE(wait_until([&] { return server_->in_flight_requests() == 1; }));
  const auto begin = Clock::now();
  EXPECT_TRUE(wait_until([&] { return server_->open_connections() == 0; }, 10s));
  EXPECT_GE(Clock::now() - begin, 500ms) << "closed by the write timeout, not at once";
}

// The handler of a whole (non-streamed) response hears when its client leaves, so it
// can stop working for nobody.
TEST_F(HttpServerTest, AResponderHearsThatItsClientLeft) {
  DisconnectProbe probe;
  std::shared_ptr<HttpResponder> kept;
  std::mutex kept_mutex;
  handler_ = [&](HttpRequest, std::shared_ptr<HttpResponder> responder) {
    responder->on_disconnect(probe.callback());
    std::lock_guard<std::mutex> lock(kept_mutex);
    kept = std::move(responder);  // never answered while the client is there
  };
  start();
  {
    TestClient client(port());
    ASSERT_TRUE(client.send(get("/slow")));
    ASSERT_TRUE(wait_until([&] {
      std::lock_guard<std::mutex> lock(kept_mutex);
      return kept != nullptr;
    }));
    client.reset();
  }
  EXPECT_TRUE(wait_until([&] { return probe.calls.load() == 1; }));
  // Registered after the client left: still called, once.
  DisconnectProbe late;
  kept->on_disconnect(late.callback());
  EXPECT_TRUE(wait_until([&] { return late.calls.load() == 1; }));
  std::lock_guard<std::mutex> lock(kept_mutex);
  kept.reset();
}

TEST_F(HttpServerTest, AnAnsweredRequestReportsNoDisconnect) {
  DisconnectProbe probe;
  handler_ = [&](HttpRequest request, std::shared_ptr<HttpResponder> responder) {
    responder->on_disconnect(probe.callback());
    echo(std::move(request), std::move(responder));
  };
  start();
  {
    TestClient client(port());
    ASSERT_TRUE(client.send(get("/quick")));
    ASSERT_TRUE(client.read_response());
  }
  EXPECT_TRUE(wait_until([&] { return server_->open_connections() == 0; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(probe.calls.load(), 0);
}

// ---- streams -----------------------------------------------------------------------

TEST_F(HttpServerTest, TwoHundredConcurrentStreamsArriveWholeAndInOrder) {
  constexpr int kClients = 200;
  constexpr int kChunks = 20;
  handler_ = [this](HttpRequest request, std::shared_ptr<HttpResponder> responder) {
    spawn([request = std::move(request), responder = std::move(responder)] {
      auto stream = responder->start_stream(200, "text/event-stream", {{"X-Path", request.path}});
      for (int i = 0; i < kChunks; ++i) {
        if (!stream->write(request.path + " data: " + std::to_string(i) + "\n\n")) return;
        if (i % 5 == 0) std::this_thread::sleep_for(1ms);
      }
      stream->close();
    });
  };
  HttpServerOptions options;
  options.io_threads = 2;
  start(options);

  std::vector<std::unique_ptr<TestClient>> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(std::make_unique<TestClient>(port()));
    ASSERT_TRUE(clients.back()->connected()) << "client " << c;
    ASSERT_TRUE(clients.back()->send(get("/s" + std::to_string(c))));
  }
  for (int c = 0; c < kClients; ++c) {
    const std::string path = "/s" + std::to_string(c);
    auto response = clients[c]->read_response();
    ASSERT_TRUE(response) << "client " << c;
    EXPECT_EQ(response->head.status, 200);
    EXPECT_EQ(response->head.header("content-type"), "text/event-stream");
    EXPECT_EQ(lower(response->head.header("transfer-encoding")), "chunked");
    EXPECT_EQ(response->head.header("cache-control"), "no-cache");
    EXPECT_EQ(lower(response->head.header("connection")), "keep-alive");
    EXPECT_EQ(response->head.header("x-path"), path);
    ASSERT_EQ(response->chunks.size(), static_cast<size_t>(kChunks)) << "client " << c;
    for (int i = 0; i < kChunks; ++i) {
      EXPECT_EQ(response->chunks[i], path + " data: " + std::to_string(i) + "\n\n");
    }
  }
  join_producers();
  EXPECT_TRUE(wait_until([&] { return server_->in_flight_requests() == 0; }));
  EXPECT_EQ(server_->open_connections(), static_cast<size_t>(kClients));
  // And every connection is still good for another request.
  handler_ = echo;
  for (int c = 0; c < kClients; c += 37) {
    ASSERT_TRUE(clients[c]->send(get("/again")));
    auto response = clients[c]->read_response();
    ASSERT_TRUE(response);
    EXPECT_EQ(response->body, "GET /again /again []");
  }
}

TEST_F(HttpServerTest, ClientDisconnectMidStreamIsReportedOnce) {
  DisconnectProbe probe;
  std::shared_ptr<HttpStream> stream;
  std::mutex stream_mutex;
  handler_ = [&](HttpRequest, std::shared_ptr<HttpResponder> responder) {
    auto started = responder->start_stream(200, "text/event-stream");
    started->on_disconnect(probe.callback());
    started->write("data: first\n\n");
    std::lock_guard<std::mutex> lock(stream_mutex);
    stream = started;
  };
  start();
  TestClient client(port());
  ASSERT_TRUE(client.send(get("/stream")));
  auto head = client.read_head();
  ASSERT_TRUE(head);
  EXPECT_EQ(client.read_chunk(), "data: first\n\n");
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard<std::mutex> lock(stream_mutex);
    return stream != nullptr;
  }));
  EXPECT_FALSE(stream->disconnected());
  EXPECT_TRUE(stream->write("data: second\n\n"));
  client.close();

  ASSERT_TRUE(wait_until([&] { return probe.calls.load() > 0; }));
  EXPECT_TRUE(stream->disconnected());
  EXPECT_FALSE(stream->write("data: too late\n\n"));
  stream->close();  // harmless after a disconnect
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(probe.calls.load(), 1);
  EXPECT_TRUE(wait_until([&] { return server_->in_flight_requests() == 0 && server_->open_connections() == 0; }));
  // A callback registered after the fact is still called, once.
  DisconnectProbe late;
  stream->on_disconnect(late.callback());
  EXPECT_TRUE(wait_until([&] { return late.calls.load() == 1; }));
}

TEST_F(HttpServerTest, IdleStreamNoticesDisconnectPromptly) {
  DisconnectProbe probe;
  std::shared_ptr<HttpStream> stream;
  std::mutex stream_mutex;
  handler_ = [&](HttpRequest, std::shared_ptr<HttpResponder> responder) {
    auto started = responder->start_stream(200, "text/event-stream");
    started->on_disconnect(probe.callback());
    std::lock_guard<std::mutex> lock(stream_mutex);
    stream = started;
  };
  HttpServerOptions options;
  options.read_timeout = 1s;  // must not apply to a connection that is streaming
  start(options);
  TestClient client(port());
  ASSERT_TRUE(client.send(get("/quiet")));
  ASSERT_TRUE(client.read_head());
  std::this_thread::sleep_for(2s);  // nothing written for 2 s
  EXPECT_EQ(probe.calls.load(), 0);
  ASSERT_TRUE(stream->write("data: still here\n\n"));
  EXPECT_EQ(client.read_chunk(), "data: still here\n\n");

  const auto closed_at = Clock::now();
  client.close();
  ASSERT_TRUE(wait_until([&] { return probe.calls.load() > 0; }, 5s));
  const auto latency = std::chrono::duration_cast<std::chrono::milliseconds>(probe.first_at() - closed_at);
  // Typically a millisecond or two; the bound is loose for loaded machines.
  EXPECT_LT(latency, 1000ms) << "disconnect noticed after " << latency.count() << " ms";
  EXPECT_FALSE(stream->write("x"));
}

TEST_F(HttpServerTest, StreamStartedAfterDisconnectIsDropped) {
  handler_ = [this](HttpRequest, std::shared_ptr<HttpResponder> responder) { keep_responder(std::move(responder)); };
  start();
  for (bool hard : {false, true}) {
    std::shared_ptr<HttpResponder> responder;
    {
      TestClient client(port());
      ASSERT_TRUE(client.send(get("/gone")));
      responder = wait_responder();
      ASSERT_TRUE(responder);
      if (hard) client.reset();
    }
    std::this_thread::sleep_for(100ms);  // the result must not depend on whether the server saw it yet
    DisconnectProbe probe;
    auto stream = responder->start_stream(200, "text/event-stream");
    stream->on_disconnect(probe.callback());
    EXPECT_TRUE(wait_until([&] { return stream->disconnected(); }));
    EXPECT_FALSE(stream->write("data: x\n\n"));
    EXPECT_TRUE(wait_until([&] { return probe.calls.load() == 1; }));
    EXPECT_TRUE(wait_until([&] { return server_->open_connections() == 0 && server_->in_flight_requests() == 0; }));
  }
}

TEST_F(HttpServerTest, ResetWhileWaitingClosesAtOnceAndTheAnswerIsDropped) {
  handler_ = [this](HttpRequest, std::shared_ptr<HttpResponder> responder) { keep_responder(std::move(responder)); };
  start();
  TestClient client(port());
  ASSERT_TRUE(client.send(get("/gone")));
  auto responder = wait_responder();
  ASSERT_TRUE(responder);
  client.reset();
  ASSERT_TRUE(wait_until([&] { return server_->open_connections() == 0; }));
  EXPECT_EQ(server_->in_flight_requests(), 0u);
  responder->respond(HttpResponse{});  // must not crash or resurrect anything
  responder.reset();
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(server_->open_connections(), 0u);
  EXPECT_EQ(server_->in_flight_requests(), 0u);
}

TEST_F(HttpServerTest, HalfClosedClientStillGetsAWholeResponse) {
  handler_ = [this](HttpRequest request, std::shared_ptr<HttpResponder> responder) {
    spawn([request = std::move(request), responder = std::move(responder)]() mutable {
      std::this_thread::sleep_for(100ms);  // the EOF arrives first
      echo(std::move(request), std::move(responder));
    });
  };
  start();
  TestClient client(port());
  ASSERT_TRUE(client.send(post("/half", "closed")));
  client.shutdown_write();
  auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "POST /half /half [closed]");
  EXPECT_TRUE(client.wait_closed());
  EXPECT_TRUE(wait_until([&] { return server_->open_connections() == 0 && server_->in_flight_requests() == 0; }));
}

TEST_F(HttpServerTest, StreamToAClientThatDoesNotReadIsCutOff) {
  DisconnectProbe probe;
  std::atomic<int> written{0};
  std::atomic<bool> refused{false};
  handler_ = [&](HttpRequest, std::shared_ptr<HttpResponder> responder) {
    spawn([&, responder] {
      auto stream = responder->start_stream(200, "text/event-stream");
      stream->on_disconnect(probe.callback());
      const std::string megabyte(1 << 20, 'x');
      for (int i = 0; i < 1000; ++i) {
        if (!stream->write(megabyte)) {
          refused = true;
          return;
        }
        ++written;
        std::this_thread::sleep_for(1ms);
      }
    });
  };
  start();
  TestClient client(port());
  ASSERT_TRUE(client.send(get("/firehose")));  // and never reads
  EXPECT_TRUE(wait_until([&] { return refused.load(); }));
  join_producers();
  EXPECT_LT(written.load(), 200);  // 64 MiB queued, plus what the socket buffers hold
  EXPECT_TRUE(wait_until([&] { return probe.calls.load() == 1; }));
}

TEST_F(HttpServerTest, StreamDroppedWithoutCloseCutsTheConnection) {
  handler_ = [](HttpRequest, std::shared_ptr<HttpResponder> responder) {
    auto stream = responder->start_stream(200, "text/event-stream");
    stream->write("data: partial\n\n");
  };  // the stream handle dies here
  start();
  TestClient client(port());
  ASSERT_TRUE(client.send(get("/abandoned")));
  ASSERT_TRUE(client.read_head());
  EXPECT_EQ(client.read_chunk(), "data: partial\n\n");
  EXPECT_TRUE(client.wait_closed());  // no terminator: the client can tell it is incomplete
}

TEST_F(HttpServerTest, Http10StreamEndsWithTheConnection) {
  handler_ = [](HttpRequest, std::shared_ptr<HttpResponder> responder) {
    auto stream = responder->start_stream(200, "text/event-stream");
    stream->write("one ");
    stream->write("two");
    stream->close();
  };
  start();
  TestClient client(port());
  ASSERT_TRUE(client.send("GET /old HTTP/1.0\r\n\r\n"));
  auto head = client.read_head();
  ASSERT_TRUE(head);
  EXPECT_EQ(head->header("transfer-encoding"), "");
  EXPECT_EQ(lower(head->header("connection")), "close");
  auto body = client.read_exact(7);
  EXPECT_EQ(body, "one two");
  EXPECT_TRUE(client.wait_closed());
}

// ---- lifecycle ---------------------------------------------------------------------

TEST_F(HttpServerTest, StopLetsAnInFlightStreamFinishAndRefusesNewConnections) {
  std::atomic<bool> release{false};
  handler_ = [&](HttpRequest, std::shared_ptr<HttpResponder> responder) {
    spawn([&release, responder] {
      auto stream = responder->start_stream(200, "text/event-stream");
      stream->write("data: 0\n\n");
      // Finish only once stop() has begun, so the stream is truly in flight during it.
      while (!release.load()) std::this_thread::sleep_for(5ms);
      for (int i = 1; i < 5; ++i) {
        stream->write("data: " + std::to_string(i) + "\n\n");
        std::this_thread::sleep_for(20ms);
      }
      stream->close();
    });
  };
  start();
  const int bound_port = port();
  TestClient idle(bound_port);  // keep-alive, between requests: closed at once by stop()
  TestClient client(bound_port);
  ASSERT_TRUE(client.send(get("/long")));
  ASSERT_TRUE(client.read_head());
  EXPECT_EQ(client.read_chunk(), "data: 0\n\n");
  ASSERT_TRUE(wait_until([&] { return server_->open_connections() == 2; }));

  const auto begin = Clock::now();
  std::thread stopper([&] { server_->stop(10s); });
  // New connections are refused once stop() has begun.
  EXPECT_TRUE(wait_until([&] {
    TestClient probe(bound_port);
    return !probe.connected() && probe.connect_errno() == ECONNREFUSED;
  }));
  EXPECT_TRUE(idle.wait_closed());
  EXPECT_EQ(server_->in_flight_requests(), 1u);
  release = true;
  for (int i = 1; i < 5; ++i) EXPECT_EQ(client.read_chunk(), "data: " + std::to_string(i) + "\n\n");
  EXPECT_EQ(client.read_chunk(), "");  // the terminator: the stream finished whole
  EXPECT_TRUE(client.wait_closed());
  stopper.join();
  EXPECT_LT(Clock::now() - begin, 9s);  // returned when the stream finished, not at the deadline
  EXPECT_EQ(server_->open_connections(), 0u);
}

TEST_F(HttpServerTest, StopAfterGraceCutsUnfinishedStreams) {
  DisconnectProbe probe;
  handler_ = [&](HttpRequest, std::shared_ptr<HttpResponder> responder) {
    auto stream = responder->start_stream(200, "text/event-stream");
    stream->on_disconnect(probe.callback());
    spawn([stream] {
      while (stream->write("data: tick\n\n")) std::this_thread::sleep_for(20ms);
    });
  };
  start();
  TestClient client(port());
  ASSERT_TRUE(client.send(get("/forever")));
  ASSERT_TRUE(client.read_head());
  const auto begin = Clock::now();
  server_->stop(200ms);
  EXPECT_GE(Clock::now() - begin, 150ms);
  EXPECT_EQ(probe.calls.load(), 1);
  EXPECT_TRUE(client.wait_closed());
  join_producers();  // the producer saw write() fail
}

TEST_F(HttpServerTest, HandlesMayOutliveTheServer) {
  handler_ = [this](HttpRequest, std::shared_ptr<HttpResponder> responder) { keep_responder(std::move(responder)); };
  start();
  TestClient streaming(port());
  ASSERT_TRUE(streaming.send(get("/stream")));
  auto stream = wait_responder()->start_stream(200, "text/event-stream");
  ASSERT_TRUE(streaming.read_head());
  DisconnectProbe probe;
  stream->on_disconnect(probe.callback());
  TestClient waiting(port());
  ASSERT_TRUE(waiting.send(get("/never")));
  auto unanswered = wait_responder();
  ASSERT_TRUE(unanswered);

  server_.reset();  // stops with no grace
  EXPECT_EQ(probe.calls.load(), 1);
  EXPECT_TRUE(stream->disconnected());
  EXPECT_FALSE(stream->write("data: late\n\n"));
  DisconnectProbe late;
  stream->on_disconnect(late.callback());  // no IO thread left: called right here
  EXPECT_EQ(late.calls.load(), 1);
  stream->close();
  stream.reset();
  unanswered->respond(HttpResponse{});
  unanswered.reset();  // a destroyed responder would post its 500: must not crash
  EXPECT_TRUE(streaming.wait_closed());
  EXPECT_TRUE(waiting.wait_closed());
}

TEST_F(HttpServerTest, PortInUseNamesThePort) {
  handler_ = echo;
  start();
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = port();
  HttpServer second(options, echo);
  try {
    second.start();
    FAIL() << "a second server started on a port in use";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cannot listen on 127.0.0.1:" + std::to_string(port())), std::string::npos) << message;
  }
  // The first one is unaffected.
  TestClient client(port());
  ASSERT_TRUE(client.send(get("/still")));
  auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->head.status, 200);
}

TEST_F(HttpServerTest, BadHostIsAnError) {
  HttpServerOptions options;
  options.host = "192.0.2.1";  // TEST-NET-1: not an address of this machine
  options.port = 0;
  HttpServer server(options, echo);
  EXPECT_THROW(server.start(), Error);
}

}  // namespace
}  // namespace ernie
