// HttpConnection: one client connection of HttpServer (http_server.h), on Boost.Beast. It reads
// a request (the header within header_timeout, the body within read_timeout), hands it to a
// handler thread, and writes the answer: a whole response, or a stream's events as the
// producer queues them, with keep-alive comments while it is idle. Then it reads the next
// request on the same connection (keep-alive) or closes. All its work runs on its strand, so
// it needs no lock; the handler thread and the stream's producer reach it by posting there.
// Internal to common/http.
#ifndef SCD_COMMON_HTTP_HTTP_CONNECTION_H_
#define SCD_COMMON_HTTP_HTTP_CONNECTION_H_

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/http/http_server.h"

namespace scd::http {

// How a stream's producer wakes its connection: Ring posts the connection's Pump while armed.
// Disarm returns once no Ring is in progress, so that nothing is posted to an I/O context
// after the connection (or the server) is gone.
class Wakeup {
 public:
  void Arm(std::function<void()> post) {
    std::lock_guard<std::mutex> lock(mutex_);
    post_ = std::move(post);
  }
  void Ring() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (post_) post_();
  }
  void Disarm() {
    std::lock_guard<std::mutex> lock(mutex_);
    post_ = nullptr;
  }

 private:
  std::mutex mutex_;
  std::function<void()> post_;
};

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(HttpServer& server, boost::asio::ip::tcp::socket socket, std::string address);
  ~HttpConnection();

  // Starts reading requests; with `refuse`, answers 429 (too many connections) and closes.
  void Start(bool refuse);
  // Closes the socket (from any thread): pending reads and writes end with an error.
  void Close();
  // Stops the stream's producer from posting here (the server's last step before its I/O
  // context goes; no I/O thread may run).
  void Disarm();

 private:
  using Clock = std::chrono::steady_clock;

  void ArmReadDeadline(int seconds);
  void ReadHeader();
  void OnHeader(boost::beast::error_code ec);
  void ReadBody();
  void OnRequest(boost::beast::error_code ec);
  // Answers a request the server refuses itself (malformed, too large, too slow) and closes.
  void RefuseRequest(const absl::Status& status);
  void Route();
  void OnHandled(ResponseData response);
  void WriteWhole(const ResponseData& response);

  // Streaming: the header, then chunks as the producer queues them.
  void StartStream(const ResponseData& response);
  void Pump();
  void WriteChunk(std::string data, bool last);
  void OnChunkWritten(boost::beast::error_code ec, bool last);
  void ArmKeepalive();
  void EndStream(bool delivered);

  // Writes `bytes` as they are and closes (a lingering close: the peer's unread request is
  // drained for a moment so that it reads the answer rather than a reset).
  void WriteRawAndClose(std::string bytes);
  void LingerThenClose();
  void Shutdown();

  HttpServer& server_;
  boost::beast::tcp_stream stream_;
  boost::asio::steady_timer read_deadline_;
  bool timed_out_ = false;  // the read deadline passed and cancelled the read
  boost::asio::steady_timer keepalive_timer_;
  const std::string address_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;

  // The request being answered.
  RequestData request_;
  const HttpServer::Route* route_ = nullptr;  // null: no route (404), or none parsed
  std::string request_id_;
  Clock::time_point start_;
  bool keep_alive_ = false;
  unsigned version_ = 11;

  // The response being written.
  std::shared_ptr<void> writing_;  // keeps the message or bytes alive during the write
  std::shared_ptr<SseStream> sse_;
  bool chunked_ = true;
  bool chunk_in_flight_ = false;
  std::shared_ptr<Wakeup> wakeup_;
  Clock::time_point last_write_;
  std::string linger_buffer_;
};

}  // namespace scd::http

#endif  // SCD_COMMON_HTTP_HTTP_CONNECTION_H_
