// One client connection of the HTTP server: reads a request, hands it to the handler,
// writes the response (whole or streamed), then reads the next. Every member function
// runs on the connection's strand; responders and streams reach it by posting there.
//
// A read is kept pending on the socket for the whole life of the connection, not only
// while a request is being read, so a client that goes away while its response is being
// streamed is noticed at once (EOF or reset), even if nothing is written. (An EOF before
// the answer starts may be a half-close by a client still reading: a whole response is
// still sent then, a stream is not.)
// Bytes that arrive meanwhile (a pipelined request) are kept, up to a cap, for later.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "serving/http_server.h"
#include "serving/http_server_state.h"

namespace ernie {

class HttpStreamState;
class HttpDisconnectWatch;

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(boost::asio::ip::tcp::socket socket, std::shared_ptr<HttpServerState> state);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  boost::asio::any_io_executor executor() { return socket_.get_executor(); }

  // Strand only, from here on.
  void start();
  void server_stopping();  // close now if between requests, else after the current response
  void abort();            // close now; an open stream sees on_disconnect

  // Posted by responders and streams. An answer for a request that is not the current
  // one, or that comes after the connection closed, is dropped.
  void deliver_response(uint64_t request_seq, HttpResponse response);
  void begin_stream(const std::shared_ptr<HttpStreamState>& stream, int status, std::string content_type,
                    std::vector<std::pair<std::string, std::string>> headers);
  void flush_stream(const std::shared_ptr<HttpStreamState>& stream);
  void abandon_stream(const std::shared_ptr<HttpStreamState>& stream);

 private:
  enum class Phase {
    kReading,    // parsing a request (the read timeout runs)
    kHandling,   // the handler has it; waiting for respond() or start_stream()
    kStreaming,  // a stream is open
    kFinishing,  // the whole response is queued; waiting for the socket to take it
    kClosing,    // our side is shut; draining what the client still sends, briefly
    kClosed,
  };

  void read_more();
  void on_read(const boost::system::error_code& error, size_t bytes);
  void parse();
  bool check_header();
  void dispatch();
  void reject(int status, std::string_view type, const std::string& message);

  void queue_write(std::string bytes);
  void send_queued();
  void on_written(const boost::system::error_code& error);
  void finish_when_drained();
  void finish_response();
  std::string response_head(int status, std::string_view content_type, bool streaming, size_t content_length,
                            const std::vector<std::pair<std::string, std::string>>& headers);

  void enter_reading();
  void start_linger();
  void close_now();
  void end_request();

  void arm_timer(std::chrono::steady_clock::duration after);
  void cancel_timer();
  void arm_body_timer();
  void arm_write_timer();
  void retire_watch();

  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  uint64_t timer_generation_ = 0;  // a wait that fires after being replaced is ignored
  // Bounds each socket write; separate from timer_, which the reading phases own.
  boost::asio::steady_timer write_timer_;
  uint64_t write_generation_ = 0;
  const std::shared_ptr<HttpServerState> state_;
  std::string remote_;
  Phase phase_ = Phase::kReading;

  // Reading. Socket reads land in read_chunk_ and are then appended to buffer_, so the
  // buffer is never resized under a pending read.
  std::array<char, 16 * 1024> read_chunk_{};
  bool reading_ = false;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  bool header_checked_ = false;
  std::chrono::steady_clock::time_point body_deadline_;  // set once the header is in
  bool peer_eof_ = false;  // the client sent EOF while its request was being answered

  // The current request.
  uint64_t request_seq_ = 0;
  bool request_in_flight_ = false;  // counted in state_->in_flight_requests()
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool head_request_ = false;
  std::shared_ptr<HttpStreamState> stream_;
  std::shared_ptr<HttpDisconnectWatch> watch_;  // while the handler has the request

  // Writing: queue_ waits while sending_ is on the wire.
  std::deque<std::string> queue_;
  std::vector<std::string> sending_;
  size_t queued_bytes_ = 0;  // queue_ and sending_
  bool writing_ = false;
  bool linger_when_drained_ = false;
};

}  // namespace ernie
