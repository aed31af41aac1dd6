// HttpConnection (see http_connection.h). The request/response cycle:
//   ReadHeader -> OnHeader -> [ReadBody] -> OnRequest -> Route (handler thread) -> OnHandled
//     -> WriteWhole -> ReadHeader (keep-alive) or close
//     -> StartStream -> Pump -> WriteChunk -> OnChunkWritten -> ... -> EndStream -> ReadHeader
// A stream is either delivered ([DONE] written) or cancelled, and the server hears of its end
// exactly once (EndStream, or the destructor when the connection dies first).
#include "common/http/http_connection.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/request_id.h"
#include "common/http/openai_error.h"
#include "common/http/sse.h"

namespace scd::http {
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;

namespace {

constexpr size_t kHeaderLimit = 16 * 1024;
constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

// The status a request the server refuses itself stands for.
absl::Status StatusForReadError(beast::error_code ec, size_t max_body_bytes, bool timed_out) {
  if (timed_out) {
    return WithErrorCode(
        WithHttpStatus(absl::DeadlineExceededError("The request did not arrive in time"), 408),
        "request_timeout");
  }
  if (ec == bhttp::error::body_limit) {
    return WithErrorCode(
        WithHttpStatus(absl::InvalidArgumentError(absl::StrCat("Request body exceeds the limit of ",
                                                               max_body_bytes, " bytes")),
                       413),
        "payload_too_large");
  }
  if (ec == bhttp::error::header_limit) {
    return WithHttpStatus(absl::InvalidArgumentError(absl::StrCat(
                              "Request header exceeds the limit of ", kHeaderLimit, " bytes")),
                          431);
  }
  return absl::InvalidArgumentError("Malformed HTTP request");
}

// One HTTP/1.1 chunk; `last` appends the terminating empty chunk.
std::string Chunk(const std::string& data, bool last) {
  std::string out;
  if (!data.empty()) {
    out = absl::StrCat(absl::Hex(data.size()), "\r\n");
    out += data;
    out += "\r\n";
  }
  if (last) out += "0\r\n\r\n";
  return out;
}

bool Closed(beast::error_code ec) {
  return ec == net::error::eof || ec == bhttp::error::end_of_stream ||
         ec == net::error::operation_aborted || ec == net::error::connection_reset ||
         ec == net::error::bad_descriptor;
}

}  // namespace

HttpConnection::HttpConnection(HttpServer& server, net::ip::tcp::socket socket, std::string address)
    : server_(server),
      stream_(std::move(socket)),
      read_deadline_(stream_.get_executor()),
      keepalive_timer_(stream_.get_executor()),
      address_(std::move(address)),
      wakeup_(std::make_shared<Wakeup>()) {}

HttpConnection::~HttpConnection() {
  wakeup_->Disarm();
  if (sse_ != nullptr) {
    if (!sse_->Delivered()) sse_->Cancel();
    server_.StreamEnded(sse_.get());
  }
  server_.ConnectionClosed(address_, this);
}

void HttpConnection::Start(bool refuse) {
  if (!refuse) return ReadHeader();
  const HttpError error = ToHttpError(
      WithErrorCode(WithHttpStatus(absl::ResourceExhaustedError(absl::StrCat(
                                       "Too many connections from ", address_, " (the limit is ",
                                       server_.options_.max_connections_per_client, ")")),
                                   429),
                    "too_many_connections"));
  WriteRawAndClose(
      absl::StrCat("HTTP/1.1 429 Too Many Requests\r\nContent-Type: "
                   "application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
                   "Content-Length: ",
                   error.body.size(), "\r\n\r\n", error.body));
}

void HttpConnection::Close() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    if (self->sse_ != nullptr) self->EndStream(false);
    self->Shutdown();
  });
}

void HttpConnection::Disarm() { wakeup_->Disarm(); }

// ---- reading a request ----

void HttpConnection::ReadHeader() {
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(server_.options_.max_body_bytes);
  request_ = RequestData();
  ArmReadDeadline(server_.options_.header_timeout_seconds);
  bhttp::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
}

// The read deadlines run on a timer of their own rather than the stream's: the stream's timeout
// closes the socket, and a late request must still hear its 408.
void HttpConnection::ArmReadDeadline(int seconds) {
  stream_.expires_never();
  timed_out_ = false;
  read_deadline_.expires_after(std::chrono::seconds(seconds));
  read_deadline_.async_wait([weak = weak_from_this()](beast::error_code ec) {
    if (ec) return;
    if (auto self = weak.lock()) {
      self->timed_out_ = true;
      beast::error_code ignored;
      self->stream_.socket().cancel(ignored);
    }
  });
}

void HttpConnection::OnHeader(beast::error_code ec) {
  read_deadline_.cancel();
  if (timed_out_) {
    // An idle kept-alive connection just closes; a request cut short hears why.
    if (buffer_.size() == 0 && !parser_->got_some()) return Shutdown();
    return RefuseRequest(StatusForReadError(ec, server_.options_.max_body_bytes, true));
  }
  if (Closed(ec)) return Shutdown();
  if (ec) return RefuseRequest(StatusForReadError(ec, server_.options_.max_body_bytes, false));
  if (parser_->is_done()) return OnRequest({});
  const auto expect = parser_->get().find(bhttp::field::expect);
  if (expect != parser_->get().end() &&
      absl::EqualsIgnoreCase(std::string(expect->value()), "100-continue")) {
    net::async_write(stream_, net::buffer(kContinue, sizeof(kContinue) - 1),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->Shutdown();
                       self->ReadBody();
                     });
    return;
  }
  ReadBody();
}

void HttpConnection::ReadBody() {
  ArmReadDeadline(server_.options_.read_timeout_seconds);
  bhttp::async_read(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRequest(ec); });
}

void HttpConnection::OnRequest(beast::error_code ec) {
  read_deadline_.cancel();
  if (timed_out_) {
    return RefuseRequest(StatusForReadError(ec, server_.options_.max_body_bytes, true));
  }
  if (Closed(ec)) return Shutdown();
  if (ec) return RefuseRequest(StatusForReadError(ec, server_.options_.max_body_bytes, false));
  bhttp::request<bhttp::string_body> message = parser_->release();
  parser_.reset();
  request_.method = std::string(message.method_string());
  const std::string target(message.target());
  request_.path = target.substr(0, target.find('?'));
  request_.body = std::move(message.body());
  request_.remote_addr = address_;
  for (const auto& field : message) {
    request_.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  version_ = message.version();
  keep_alive_ = message.keep_alive();
  Route();
}

void HttpConnection::RefuseRequest(const absl::Status& status) {
  const HttpError error = ToHttpError(status);
  if (parser_.has_value() && parser_->is_header_done()) {
    request_.method = std::string(parser_->get().method_string());
    const std::string target(parser_->get().target());
    request_.path = target.substr(0, target.find('?'));
  }
  request_.remote_addr = address_;
  server_.CountRefused(error.status == 408   ? "request_timeout"
                       : error.status == 413 ? "payload_too_large"
                                             : "malformed");
  route_ = request_.method.empty() ? nullptr : server_.FindRoute(request_.method, request_.path);
  server_.Log(route_, request_, NewRequestId(), error.status, Clock::now());
  WriteRawAndClose(
      absl::StrCat("HTTP/1.1 ", error.status, " ",
                   std::string(bhttp::obsolete_reason(static_cast<bhttp::status>(error.status))),
                   "\r\nContent-Type: application/json\r\nConnection: close\r\n"
                   "Content-Length: ",
                   error.body.size(), "\r\n\r\n", error.body));
}

// ---- answering ----

void HttpConnection::Route() {
  stream_.expires_never();
  request_id_ = NewRequestId();
  start_ = Clock::now();
  route_ = server_.FindRoute(request_.method, request_.path);
  const HttpServer::Route* route = route_;
  if (route == nullptr || route->public_route) {
    // Probes, metrics and 404s answer at once on this thread: they never block, and a probe
    // must not wait behind handlers that do.
    ResponseData response;
    server_.Dispatch(route, request_, request_id_, &response);
    return OnHandled(std::move(response));
  }
  server_.RunHandler([self = shared_from_this(), route] {
    ResponseData response;
    self->server_.Dispatch(route, self->request_, self->request_id_, &response);
    net::post(self->stream_.get_executor(), [self, response = std::move(response)]() mutable {
      self->OnHandled(std::move(response));
    });
  });
}

void HttpConnection::OnHandled(ResponseData response) {
  if (response.stream != nullptr) {
    sse_ = std::move(response.stream);
    return StartStream(response);
  }
  WriteWhole(response);
}

void HttpConnection::WriteWhole(const ResponseData& response) {
  auto message = std::make_shared<bhttp::response<bhttp::string_body>>();
  message->version(version_);
  message->result(response.status);
  message->set("X-Request-Id", request_id_);
  if (!response.content_type.empty()) {
    message->set(bhttp::field::content_type, response.content_type);
  }
  for (const auto& [name, value] : response.headers) message->set(name, value);
  message->body() = response.body;
  const bool keep_alive = keep_alive_ && !server_.draining();
  message->keep_alive(keep_alive);
  message->prepare_payload();
  writing_ = message;
  const int status = response.status;
  stream_.expires_after(std::chrono::seconds(server_.options_.write_timeout_seconds));
  bhttp::async_write(stream_, *message,
                     [self = shared_from_this(), keep_alive, status](beast::error_code ec, size_t) {
                       self->writing_.reset();
                       self->server_.Log(self->route_, self->request_, self->request_id_, status,
                                         self->start_);
                       if (ec || !keep_alive) return self->Shutdown();
                       self->ReadHeader();
                     });
}

// ---- streaming ----

void HttpConnection::StartStream(const ResponseData& response) {
  struct Header {
    bhttp::response<bhttp::empty_body> message;
    bhttp::response_serializer<bhttp::empty_body> serializer{message};
  };
  auto header = std::make_shared<Header>();
  bhttp::response<bhttp::empty_body>& m = header->message;
  m.version(version_);
  m.result(bhttp::status::ok);
  m.set("X-Request-Id", request_id_);
  m.set(bhttp::field::content_type, "text/event-stream");
  m.set(bhttp::field::cache_control, "no-cache");
  m.set("X-Accel-Buffering", "no");  // tell proxies not to buffer the stream
  for (const auto& [name, value] : response.headers) m.set(name, value);
  chunked_ = version_ >= 11;
  m.keep_alive(keep_alive_ && chunked_);
  if (chunked_) m.chunked(true);
  writing_ = header;
  stream_.expires_after(std::chrono::seconds(server_.options_.write_timeout_seconds));
  bhttp::async_write_header(stream_, header->serializer,
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              self->writing_.reset();
                              if (ec) {
                                self->EndStream(false);
                                return self->Shutdown();
                              }
                              self->last_write_ = Clock::now();
                              std::weak_ptr<HttpConnection> weak = self;
                              self->wakeup_->Arm([weak, executor = self->stream_.get_executor()] {
                                net::post(executor, [weak] {
                                  if (auto connection = weak.lock()) connection->Pump();
                                });
                              });
                              self->sse_->SetNotifier([wakeup = self->wakeup_] { wakeup->Ring(); });
                              self->ArmKeepalive();
                            });
}

void HttpConnection::Pump() {
  if (sse_ == nullptr || chunk_in_flight_) return;
  std::string data;
  switch (sse_->Take(&data)) {
    case SseStream::Pull::kData:
      return WriteChunk(std::move(data), sse_->Delivered());
    case SseStream::Pull::kCancelled:
      EndStream(false);
      return Shutdown();
    case SseStream::Pull::kIdle:
    case SseStream::Pull::kDone:
      return;
  }
}

void HttpConnection::WriteChunk(std::string data, bool last) {
  chunk_in_flight_ = true;
  auto bytes = std::make_shared<std::string>(chunked_ ? Chunk(data, last) : std::move(data));
  stream_.expires_after(std::chrono::seconds(server_.options_.write_timeout_seconds));
  net::async_write(stream_, net::buffer(*bytes),
                   [self = shared_from_this(), bytes, last](beast::error_code ec, size_t) {
                     self->OnChunkWritten(ec, last);
                   });
}

void HttpConnection::OnChunkWritten(beast::error_code ec, bool last) {
  chunk_in_flight_ = false;
  last_write_ = Clock::now();
  if (ec) {  // the client is gone, or too slow to read
    EndStream(false);
    return Shutdown();
  }
  if (!last) return Pump();
  EndStream(true);
  if (keep_alive_ && chunked_ && !server_.draining()) return ReadHeader();
  Shutdown();
}

void HttpConnection::ArmKeepalive() {
  keepalive_timer_.expires_after(server_.options_.sse_keepalive);
  keepalive_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || self->sse_ == nullptr) return;
    const auto idle = Clock::now() - self->last_write_;
    if (!self->chunk_in_flight_ && idle >= self->server_.options_.sse_keepalive / 2) {
      self->WriteChunk(SseComment("keep-alive"), false);
    }
    self->ArmKeepalive();
  });
}

void HttpConnection::EndStream(bool delivered) {
  if (sse_ == nullptr) return;
  keepalive_timer_.cancel();
  wakeup_->Disarm();
  if (!delivered) sse_->Cancel();
  server_.StreamEnded(sse_.get());
  server_.Log(route_, request_, request_id_, 200, start_);
  sse_.reset();
}

// ---- closing ----

void HttpConnection::WriteRawAndClose(std::string bytes) {
  auto buffer = std::make_shared<std::string>(std::move(bytes));
  stream_.expires_after(std::chrono::seconds(server_.options_.write_timeout_seconds));
  net::async_write(stream_, net::buffer(*buffer),
                   [self = shared_from_this(), buffer](beast::error_code ec, size_t) {
                     if (ec) return self->Shutdown();
                     self->LingerThenClose();
                   });
}

void HttpConnection::LingerThenClose() {
  beast::error_code ignored;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_send, ignored);
  linger_buffer_.resize(16 * 1024);
  stream_.expires_after(std::chrono::seconds(1));
  stream_.async_read_some(net::buffer(linger_buffer_),
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                            if (ec) return self->Shutdown();
                            self->LingerThenClose();
                          });
}

void HttpConnection::Shutdown() {
  keepalive_timer_.cancel();
  read_deadline_.cancel();
  beast::error_code ignored;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  stream_.close();
}

}  // namespace scd::http
