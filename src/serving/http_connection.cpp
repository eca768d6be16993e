#include "serving/http_connection.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <limits>

#include <boost/asio/buffer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>

#include "serving/http_messages.h"
#include "serving/http_responder.h"
#include "util/log.h"

namespace ernie {
namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
using boost::system::error_code;

// Request line and header fields together; more is a 431.
constexpr uint32_t kHeaderLimit = 64 * 1024;
// Bytes read ahead of the request being served (pipelining). Past this the connection
// stops reading until it gets to them; disconnects are then noticed by failed writes.
constexpr size_t kMaxReadAhead = 64 * 1024;
// A client that reads nothing while its stream keeps producing is cut off here rather
// than letting the queue grow without bound. (A whole response is queued whatever its
// size: the handler chose it.)
constexpr size_t kMaxQueuedBytes = 64 << 20;
// After an error response with unread input (413), how long to keep draining before the
// close: closing with unread data makes the kernel send a reset, which can destroy the
// response before the client reads it.
constexpr std::chrono::seconds kLingerTime{2};
constexpr size_t kMaxBuffersPerWrite = 64;

std::string lower_case(boost::beast::string_view text) {
  std::string out(text.data(), text.size());
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool iequals(boost::beast::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool is_valid_status(int status) { return status >= 200 && status <= 599; }

}  // namespace

HttpConnection::HttpConnection(net::ip::tcp::socket socket, std::shared_ptr<HttpServerState> state)
    : socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      write_timer_(socket_.get_executor()),
      state_(std::move(state)) {}

HttpConnection::~HttpConnection() {
  // Normally closed long before; this covers an io_context destroyed with work pending.
  close_now();
}

void HttpConnection::start() {
  error_code error;
  const auto peer = socket_.remote_endpoint(error);
  if (!error) remote_ = str_cat(peer.address().to_string(), ":", peer.port());
  // Streamed tokens are small writes that must leave at once, not wait for Nagle.
  socket_.set_option(net::ip::tcp::no_delay(true), error);
  if (state_->stopping.load()) {
    close_now();
    return;
  }
  enter_reading();
  read_more();
}

void HttpConnection::server_stopping() {
  if (phase_ == Phase::kReading) close_now();
  // Otherwise finish_response() sees `stopping` and closes instead of reading on.
}

void HttpConnection::abort() { close_now(); }

// ---- reading ---------------------------------------------------------------------

void HttpConnection::read_more() {
  if (reading_ || phase_ == Phase::kClosed || peer_eof_) return;
  if (phase_ != Phase::kReading && phase_ != Phase::kClosing && buffer_.size() >= kMaxReadAhead) return;
  reading_ = true;
  socket_.async_read_some(net::buffer(read_chunk_), [self = shared_from_this()](const error_code& error, size_t bytes) {
    self->on_read(error, bytes);
  });
}

void HttpConnection::on_read(const error_code& error, size_t bytes) {
  reading_ = false;
  if (phase_ == Phase::kClosed) return;
  if (error == net::error::eof && (phase_ == Phase::kHandling || phase_ == Phase::kFinishing)) {
    // The client closed, or only half-closed (`nc -N`, some scripts): no way to tell
    // which. A whole response is still sent, in case it is read; a stream counts it as a
    // disconnect (begin_stream), since a stream must notice a vanished client at once.
    // The handler hears of it (on_disconnect) so it can stop working for a client that
    // is most likely gone, as uvicorn reports an EOF as a disconnect.
    peer_eof_ = true;
    if (watch_) watch_->fire();
    return;
  }
  if (error) {
    // EOF or reset. Between requests that is a normal end; while streaming, the client
    // left and the stream must know at once.
    if (phase_ != Phase::kReading && phase_ != Phase::kClosing) {
      log_debug("HTTP client ", remote_, " went away before its response was complete: ", error.message());
    }
    close_now();
    return;
  }
  if (phase_ == Phase::kClosing) {  // draining before the close: the bytes are not wanted
    read_more();
    return;
  }
  buffer_.commit(net::buffer_copy(buffer_.prepare(bytes), net::buffer(read_chunk_.data(), bytes)));
  if (phase_ == Phase::kReading) {
    // Once the header is in, the idle deadline moves with every read, so a large body on
    // a slow link is fine but a stalled one is not; the whole body has its own deadline.
    if (header_checked_) arm_body_timer();
    parse();
  }
  read_more();
}

void HttpConnection::parse() {
  while (phase_ == Phase::kReading) {
    if (parser_->is_header_done() && !header_checked_ && !check_header()) return;
    if (parser_->is_done()) {
      dispatch();
      return;
    }
    if (buffer_.size() == 0) return;
    error_code error;
    const size_t used = parser_->put(buffer_.data(), error);
    buffer_.consume(used);
    if (error == http::error::need_more) return;
    if (error == http::error::header_limit) {
      reject(431, "invalid_request_error", str_cat("request header exceeds the limit of ", kHeaderLimit, " bytes"));
      return;
    }
    if (error == http::error::body_limit) {
      // Only a chunked body gets here (a Content-Length is checked in check_header), and
      // its full size is unknown: it was cut off at the limit.
      const size_t limit = state_->options.max_body_bytes;
      reject(413, "invalid_request_error",
             str_cat("request body of more than ", limit, " bytes exceeds the limit of ", limit, " bytes"));
      return;
    }
    if (error) {
      reject(400, "invalid_request_error", str_cat("malformed HTTP request: ", error.message()));
      return;
    }
    if (used == 0) return;  // no progress without an error: wait for more bytes
  }
}

bool HttpConnection::check_header() {
  header_checked_ = true;
  body_deadline_ = std::chrono::steady_clock::now() + state_->options.request_timeout;
  arm_body_timer();
  const size_t limit = state_->options.max_body_bytes;
  const auto length = parser_->content_length();
  if (length && *length > limit) {
    // Refused from the header alone; the body is never read.
    reject(413, "invalid_request_error",
           str_cat("request body of ", *length, " bytes exceeds the limit of ", limit, " bytes"));
    return false;
  }
  // Set only now: Beast 1.74 would also compare a Content-Length against it while parsing
  // the header, and the message above wants the declared length.
  parser_->body_limit(limit);
  parser_->eager(true);
  const auto& request = parser_->get();
  if (request.version() >= 11 && !parser_->is_done() && iequals(request[http::field::expect], "100-continue")) {
    queue_write(std::string(kHttpContinue));
  }
  return true;
}

void HttpConnection::dispatch() {
  cancel_timer();  // the handler may take as long as it needs
  auto& message = parser_->get();
  version_ = message.version();
  keep_alive_ = message.keep_alive();
  head_request_ = message.method() == http::verb::head;

  HttpRequest request;
  request.method = std::string(message.method_string());
  request.target = std::string(message.target());
  request.path = request.target.substr(0, request.target.find('?'));
  for (const auto& field : message) {
    auto [it, inserted] = request.headers.emplace(lower_case(field.name_string()), std::string(field.value()));
    if (!inserted) it->second += str_cat(", ", field.value());  // RFC 9110 §5.3
  }
  request.body = std::move(message.body());
  request.remote_address = remote_;
  parser_.reset();

  phase_ = Phase::kHandling;
  ++request_seq_;
  request_in_flight_ = true;
  state_->request_started();

  watch_ = std::make_shared<HttpDisconnectWatch>(state_->gate);
  HttpReplyTarget target{state_->gate, watch_, weak_from_this(), request_seq_, version_ >= 11};
  auto responder = std::make_shared<HttpResponderImpl>(std::move(target));
  const std::string method = request.method;
  const std::string path = request.path;
  try {
    state_->handler(std::move(request), std::move(responder));
  } catch (const std::exception& e) {
    // The responder went with the unwinding, so the client gets its 500 from there.
    log_warning("HTTP handler for ", method, " ", path, " threw: ", e.what());
  }
}

void HttpConnection::reject(int status, std::string_view type, const std::string& message) {
  log_debug("HTTP ", status, " to ", remote_, ": ", message);
  keep_alive_ = false;
  const std::string body = http_error_body(message, type, status);
  queue_write(response_head(status, "application/json", false, body.size(), {}));
  queue_write(body);
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosing;
  parser_.reset();
  buffer_.clear();
  arm_timer(kLingerTime);  // bounds the write too, should the client not read
  linger_when_drained_ = true;
  if (!writing_) start_linger();
}

// ---- answers from the handler ------------------------------------------------------

std::string HttpConnection::response_head(int status, std::string_view content_type, bool streaming,
                                          size_t content_length,
                                          const std::vector<std::pair<std::string, std::string>>& headers) {
  if (state_->stopping.load()) keep_alive_ = false;
  HttpHead head;
  head.status = status;
  head.version = version_;
  head.content_type = content_type;
  head.keep_alive = keep_alive_;
  head.content_length = content_length;
  head.no_cache = streaming;
  head.extra = &headers;
  if (!streaming) {
    head.framing = HttpFraming::kContentLength;
  } else if (version_ >= 11) {
    head.framing = HttpFraming::kChunked;
  } else {
    head.framing = HttpFraming::kUntilClose;
    head.keep_alive = keep_alive_ = false;  // the close is what ends the body
  }
  return http_response_head(head);
}

void HttpConnection::deliver_response(uint64_t request_seq, HttpResponse response) {
  if (phase_ != Phase::kHandling || request_seq != request_seq_) return;
  if (!is_valid_status(response.status)) {
    log_warning("HTTP handler answered with status ", response.status, "; sending 500 instead");
    response = HttpResponse{};
    response.status = 500;
    response.body = http_error_body("internal error: invalid response status", "server_error", 500);
  }
  retire_watch();
  // A HEAD answer announces the length of the body it leaves out.
  const bool has_body = !http_status_has_no_body(response.status) && !head_request_;
  queue_write(response_head(response.status, response.content_type, false, response.body.size(), response.headers));
  if (has_body) queue_write(std::move(response.body));
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kFinishing;
  finish_when_drained();
}

void HttpConnection::begin_stream(const std::shared_ptr<HttpStreamState>& stream, int status,
                                  std::string content_type, std::vector<std::pair<std::string, std::string>> headers) {
  if (phase_ != Phase::kHandling || stream->target().request_seq != request_seq_) {
    stream->peer_gone();
    return;
  }
  retire_watch();  // the stream reports disconnects from here on
  if (peer_eof_) {  // the client is gone (see on_read)
    stream->peer_gone();
    close_now();
    return;
  }
  if (!is_valid_status(status)) {
    log_warning("HTTP handler started a stream with status ", status, "; sending 500 instead");
    stream->peer_gone();
    deliver_response(request_seq_, HttpResponse{500, "application/json",
                                                http_error_body("internal error: invalid response status",
                                                                "server_error", 500),
                                                {}});
    return;
  }
  queue_write(response_head(status, content_type, true, 0, headers));
  if (phase_ == Phase::kClosed) {
    stream->peer_gone();
    return;
  }
  phase_ = Phase::kStreaming;
  stream_ = stream;
  flush_stream(stream);  // anything written before this ran
}

void HttpConnection::flush_stream(const std::shared_ptr<HttpStreamState>& stream) {
  if (phase_ != Phase::kStreaming || stream != stream_) return;
  HttpStreamState::Taken taken = stream->take();
  queue_write(std::move(taken.bytes));
  if (queued_bytes_ > kMaxQueuedBytes) {
    log_warning("HTTP client ", remote_, " is not reading its stream (", queued_bytes_, " bytes queued); closing");
    close_now();
    return;
  }
  if (phase_ == Phase::kClosed || !taken.finished) return;
  phase_ = Phase::kFinishing;
  finish_when_drained();
}

void HttpConnection::abandon_stream(const std::shared_ptr<HttpStreamState>& stream) {
  if (phase_ != Phase::kStreaming || stream != stream_) return;
  // What was written still goes out, but no terminator: the client must be able to tell
  // the response is incomplete.
  log_warning("HTTP stream to ", remote_, " was dropped without close(); cutting the connection");
  keep_alive_ = false;
  phase_ = Phase::kFinishing;
  finish_when_drained();
}

// ---- writing -----------------------------------------------------------------------

void HttpConnection::queue_write(std::string bytes) {
  if (phase_ == Phase::kClosed || bytes.empty()) return;
  queued_bytes_ += bytes.size();
  queue_.push_back(std::move(bytes));
  send_queued();
}

void HttpConnection::send_queued() {
  if (writing_ || queue_.empty() || phase_ == Phase::kClosed) return;
  writing_ = true;
  sending_.clear();
  sending_.reserve(kMaxBuffersPerWrite);
  while (!queue_.empty() && sending_.size() < kMaxBuffersPerWrite) {
    sending_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  // Buffers point into sending_, which stays untouched until the write completes.
  std::vector<net::const_buffer> buffers;
  buffers.reserve(sending_.size());
  for (const std::string& piece : sending_) buffers.push_back(net::buffer(piece));
  arm_write_timer();
  net::async_write(socket_, buffers, [self = shared_from_this()](const error_code& error, size_t) {
    self->on_written(error);
  });
}

void HttpConnection::on_written(const error_code& error) {
  writing_ = false;
  ++write_generation_;
  write_timer_.cancel();
  for (const std::string& piece : sending_) queued_bytes_ -= piece.size();
  sending_.clear();
  if (phase_ == Phase::kClosed) return;
  if (error) {
    log_debug("HTTP write to ", remote_, " failed: ", error.message());
    close_now();
    return;
  }
  if (!queue_.empty()) {
    send_queued();
    return;
  }
  if (phase_ == Phase::kFinishing) {
    finish_response();
  } else if (phase_ == Phase::kClosing && linger_when_drained_) {
    start_linger();
  }
}

void HttpConnection::finish_when_drained() {
  if (!writing_ && queue_.empty()) finish_response();
}

void HttpConnection::finish_response() {
  end_request();
  stream_.reset();
  if (!keep_alive_ || state_->stopping.load()) {
    start_linger();
    return;
  }
  enter_reading();
  parse();  // a pipelined request may be waiting in the buffer
  if (phase_ == Phase::kReading && peer_eof_) {
    close_now();  // and no more will come
    return;
  }
  read_more();
}

// ---- lifecycle ---------------------------------------------------------------------

void HttpConnection::enter_reading() {
  phase_ = Phase::kReading;
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // see check_header
  header_checked_ = false;
  // Covers both an idle keep-alive connection and a request header that trickles in.
  arm_timer(state_->options.read_timeout);
}

void HttpConnection::start_linger() {
  linger_when_drained_ = false;
  if (peer_eof_) {  // nothing left to drain
    close_now();
    return;
  }
  phase_ = Phase::kClosing;
  parser_.reset();
  buffer_.clear();
  error_code error;
  socket_.shutdown(net::ip::tcp::socket::shutdown_send, error);
  if (error) {
    close_now();
    return;
  }
  arm_timer(kLingerTime);
  read_more();  // ends at the client's EOF, or at the timer
}

void HttpConnection::close_now() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  cancel_timer();
  ++write_generation_;
  write_timer_.cancel();
  error_code error;
  socket_.shutdown(net::ip::tcp::socket::shutdown_both, error);
  socket_.close(error);
  queue_.clear();
  end_request();
  if (auto stream = std::exchange(stream_, nullptr)) stream->peer_gone();
  if (auto watch = std::exchange(watch_, nullptr)) watch->fire();
  state_->remove_connection(this);
}

void HttpConnection::end_request() {
  if (!std::exchange(request_in_flight_, false)) return;
  state_->request_finished();
}

void HttpConnection::arm_timer(std::chrono::steady_clock::duration after) {
  const uint64_t generation = ++timer_generation_;
  timer_.expires_after(after);
  timer_.async_wait([self = shared_from_this(), generation](const error_code& error) {
    if (error || generation != self->timer_generation_) return;
    if (self->phase_ == Phase::kReading && self->header_checked_ &&
        std::chrono::steady_clock::now() >= self->body_deadline_) {
      self->reject(408, "invalid_request_error",
                   str_cat("the request body did not arrive within ", self->state_->options.request_timeout.count(), " s"));
      return;
    }
    if (self->phase_ == Phase::kReading || self->phase_ == Phase::kClosing) {
      if (self->phase_ == Phase::kReading) log_debug("HTTP connection ", self->remote_, " timed out; closing");
      self->close_now();
    }
  });
}

void HttpConnection::arm_body_timer() {
  const auto now = std::chrono::steady_clock::now();
  const auto idle_deadline = now + state_->options.read_timeout;
  arm_timer(std::min(idle_deadline, body_deadline_) - now);
}

void HttpConnection::arm_write_timer() {
  const uint64_t generation = ++write_generation_;
  write_timer_.expires_after(state_->options.write_timeout);
  write_timer_.async_wait([self = shared_from_this(), generation](const error_code& error) {
    if (error || generation != self->write_generation_ || !self->writing_) return;
    log_warning("HTTP client ", self->remote_, " took no data for ", self->state_->options.write_timeout.count(),
                " s; closing the connection");
    self->close_now();
  });
}

void HttpConnection::retire_watch() {
  if (auto watch = std::exchange(watch_, nullptr)) watch->retire();
}

void HttpConnection::cancel_timer() {
  ++timer_generation_;
  timer_.cancel();
}

}  // namespace ernie
