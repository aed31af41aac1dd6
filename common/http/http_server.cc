// HttpServer over cpp-httplib (see http_server.h). httplib gives us the hooks we need:
//   - the pre-routing handler runs first for every parsed request: it stamps the request id
//     and the start time (thread-local: one pool thread serves a request from routing to the
//     logger call, which httplib makes after the last byte is written);
//   - the error handler fills an OpenAI body into every >= 400 response that has none (the
//     404s and 413s httplib produces itself);
//   - a chunked content provider is called in a loop on the connection's thread until it
//     returns false or calls sink.done(); its write fails once the peer has gone, which is how
//     SseStream learns of a disconnect; the resource releaser runs when the response is
//     destroyed, whatever happened, so a stream is always either delivered or cancelled.
// The API key is checked in our route wrapper rather than in pre-routing: pre-routing runs
// before httplib reads the body, and answering there would leave the unread body on a
// keep-alive connection to be parsed as the next request.
#include "common/http/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <random>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/http/openai_error.h"
#include "common/http/sse.h"

namespace scd::http {
namespace {

constexpr char kRequestIdHeader[] = "X-Request-Id";

thread_local std::chrono::steady_clock::time_point t_request_start;

std::string NewRequestId() {
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   std::hash<std::thread::id>{}(std::this_thread::get_id()));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(32, '0');
  uint64_t bits = 0;
  for (size_t i = 0; i < id.size(); ++i) {
    if (i % 16 == 0) bits = rng();
    id[i] = kHex[bits & 0xf];
    bits >>= 4;
  }
  return id;
}

// Compares in time independent of where the strings first differ.
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::string& reference = a.size() == b.size() ? b : a;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ reference[i];
  return diff == 0;
}

void WriteError(httplib::Response& res, const absl::Status& status) {
  const HttpError error = ToHttpError(status);
  res.status = error.status;
  res.set_content(error.body, "application/json");
  if (error.status == 429 || error.status == 503) res.set_header("Retry-After", "1");
}

// The status httplib's own error responses stand for.
absl::Status StatusForHttpError(const httplib::Request& req, int http_status,
                                size_t max_body_bytes) {
  switch (http_status) {
    case 404:
      return WithErrorCode(
          absl::NotFoundError(absl::StrCat("No route for ", req.method, " ", req.path)),
          "route_not_found");
    case 413:
      return WithErrorCode(
          WithHttpStatus(absl::InvalidArgumentError(absl::StrCat(
                             "Request body exceeds the limit of ", max_body_bytes, " bytes")),
                         413),
          "payload_too_large");
    case 400:
      return absl::InvalidArgumentError("Malformed HTTP request");
    default:
      return WithHttpStatus(
          absl::UnknownError(absl::StrCat("HTTP error ", http_status, " for ", req.path)),
          http_status);
  }
}

// httplib 0.11 listens with a backlog of 5: a burst of connects (a load test starting 100
// streams) would overflow it and stall clients for a SYN retransmit (1 s). The listening
// socket is a protected member, so a subclass widens the backlog after binding.
class WideBacklogServer : public httplib::Server {
 public:
  void WidenBacklog() { ::listen(svr_sock_, SOMAXCONN); }
};

}  // namespace

// ---- SseStream ----

bool SseStream::Send(std::string payload) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_ || cancelled_) return false;
  queue_.push_back(SseEvent(payload));
  changed_.notify_all();
  return true;
}

void SseStream::Finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_ || cancelled_) return;
  queue_.push_back(SseEvent(kSseDonePayload));
  finished_ = true;
  changed_.notify_all();
}

void SseStream::Fail(const absl::Status& status) {
  Send(DumpJson(ErrorJson(status)));
  Finish();
}

bool SseStream::cancelled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cancelled_;
}

void SseStream::OnCancel(std::function<void()> callback) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!cancelled_) {
      if (!delivered_) on_cancel_.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

bool SseStream::WaitCancelled(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return cancelled_; });
}

SseStream::Pull SseStream::Next(std::chrono::milliseconds wait, std::string* out) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, wait, [&] { return cancelled_ || finished_ || !queue_.empty(); });
  if (cancelled_) return Pull::kCancelled;
  if (!queue_.empty()) {
    out->clear();
    for (const std::string& event : queue_) out->append(event);
    queue_.clear();
    return Pull::kData;
  }
  if (finished_) {
    delivered_ = true;
    return Pull::kDone;
  }
  return Pull::kIdle;
}

void SseStream::Cancel() {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cancelled_ || delivered_) return;
    cancelled_ = true;
    callbacks.swap(on_cancel_);
    changed_.notify_all();
  }
  for (auto& callback : callbacks) callback();
}

bool SseStream::Delivered() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return delivered_;
}

// ---- HttpRequest / HttpResponse ----

const std::string& HttpRequest::method() const { return request_.method; }
const std::string& HttpRequest::path() const { return request_.path; }
const std::string& HttpRequest::body() const { return request_.body; }
std::string HttpRequest::header(const std::string& name) const {
  return request_.get_header_value(name);
}

void HttpResponse::SetJson(int status, const std::string& body) {
  SetContent(status, body, "application/json");
}

void HttpResponse::SetContent(int status, const std::string& body,
                              const std::string& content_type) {
  response_.status = status;
  response_.set_content(body, content_type);
}

void HttpResponse::SetError(const absl::Status& status) { WriteError(response_, status); }

void HttpResponse::SetHeader(const std::string& name, const std::string& value) {
  response_.set_header(name, value);
}

std::shared_ptr<SseStream> HttpResponse::StartSse() {
  std::shared_ptr<SseStream> stream(new SseStream(request_id_));
  HttpServer* server = &server_;
  server->StreamStarted(stream);
  const std::chrono::milliseconds keepalive = server->options_.sse_keepalive;
  response_.status = 200;
  response_.set_header("Cache-Control", "no-cache");
  response_.set_header("X-Accel-Buffering", "no");  // tell proxies not to buffer the stream
  response_.set_chunked_content_provider(
      "text/event-stream",
      [stream, keepalive](size_t /*offset*/, httplib::DataSink& sink) {
        std::string chunk;
        switch (stream->Next(keepalive, &chunk)) {
          case SseStream::Pull::kIdle:
            chunk = SseComment("keep-alive");
            [[fallthrough]];
          case SseStream::Pull::kData:
            if (!sink.is_writable() || !sink.write(chunk.data(), chunk.size())) {
              stream->Cancel();  // the client is gone
              return false;
            }
            return true;
          case SseStream::Pull::kDone:
            sink.done();
            return true;
          case SseStream::Pull::kCancelled:
            return false;
        }
        return false;
      },
      [stream, server](bool /*success*/) {
        if (!stream->Delivered()) stream->Cancel();
        server->StreamEnded(stream.get());
      });
  return stream;
}

// ---- HttpServer ----

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(HttpServerOptions options) {
  if (options.host.empty()) return absl::InvalidArgumentError("http: 'host' must not be empty");
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("http: 'port' must be in [0, 65535], got ", options.port));
  }
  if (options.max_body_bytes == 0) {
    return absl::InvalidArgumentError("http: 'max_body_bytes' must be positive");
  }
  if (options.num_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("http: 'num_threads' must be at least 1, got ", options.num_threads));
  }
  if (options.read_timeout_seconds < 1 || options.write_timeout_seconds < 1) {
    return absl::InvalidArgumentError("http: read and write timeouts must be at least 1 s");
  }
  if (options.sse_keepalive.count() < 1) {
    return absl::InvalidArgumentError("http: 'sse_keepalive' must be positive");
  }
  metrics::Registry* registry = options.metrics;
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(options)));
  if (registry != nullptr) {
    absl::StatusOr<metrics::CounterFamily*> requests = registry->AddCounterFamily(
        "scd_http_requests_total", "HTTP requests answered, by method, route and status code.",
        {"method", "route", "code"});
    if (!requests.ok()) return requests.status();
    absl::StatusOr<metrics::HistogramFamily*> seconds = registry->AddHistogramFamily(
        "scd_http_request_duration_seconds",
        "Time from routing to the last byte of the response (whole stream for SSE).", {"route"},
        metrics::ExponentialBuckets(0.001, 2, 17));  // 1 ms .. ~65 s
    if (!seconds.ok()) return seconds.status();
    server->requests_total_ = *requests;
    server->request_seconds_ = *seconds;
  }
  return server;
}

HttpServer::HttpServer(HttpServerOptions options)
    : options_(std::move(options)), server_(std::make_unique<WideBacklogServer>()) {
  const int threads = options_.num_threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(options_.max_body_bytes);
  server_->set_read_timeout(options_.read_timeout_seconds, 0);
  server_->set_write_timeout(options_.write_timeout_seconds, 0);
  server_->set_keep_alive_timeout(2);  // an idle keep-alive connection delays Stop this long
  server_->set_tcp_nodelay(true);      // stream chunks must not wait for Nagle
  // httplib's default sets SO_REUSEPORT, which would let a second daemon bind our port and
  // silently share its traffic; SO_REUSEADDR alone still allows a quick restart.
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server_->set_pre_routing_handler([](const httplib::Request&, httplib::Response& res) {
    t_request_start = std::chrono::steady_clock::now();
    res.set_header(kRequestIdHeader, NewRequestId());
    return httplib::Server::HandlerResponse::Unhandled;
  });
  const size_t max_body = options_.max_body_bytes;
  server_->set_error_handler(httplib::Server::HandlerWithResponse(
      [max_body](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        const int http_status = res.status;
        WriteError(res, StatusForHttpError(req, http_status, max_body));
        res.status = http_status;
        return httplib::Server::HandlerResponse::Handled;
      }));
  server_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        WriteError(res, absl::InternalError(absl::StrCat("Internal error: ", what)));
      });
  server_->set_logger(
      [this](const httplib::Request& req, const httplib::Response& res) { Log(req, res); });
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Get(const std::string& path, Handler handler) {
  AddRoute("GET", path, std::move(handler), /*public_route=*/false);
}

void HttpServer::Post(const std::string& path, Handler handler) {
  AddRoute("POST", path, std::move(handler), /*public_route=*/false);
}

void HttpServer::AddHealthRoute() {
  AddRoute(
      "GET", "/health",
      [](const HttpRequest&, HttpResponse& res) { res.SetJson(200, R"({"status":"ok"})"); },
      /*public_route=*/true);
}

void HttpServer::AddReadyRoute(std::function<absl::Status()> ready) {
  AddRoute(
      "GET", "/ready",
      [this, ready = std::move(ready)](const HttpRequest&, HttpResponse& res) {
        absl::Status status =
            draining() ? absl::UnavailableError("The server is shutting down") : ready();
        if (status.ok()) {
          res.SetJson(200, R"({"status":"ready"})");
        } else {
          // Whatever the cause, not-ready is 503 to a probe.
          res.SetError(WithHttpStatus(std::move(status), 503));
        }
      },
      /*public_route=*/true);
}

void HttpServer::AddMetricsRoute(const metrics::Registry* registry) {
  AddRoute(
      "GET", "/metrics",
      [registry](const HttpRequest&, HttpResponse& res) {
        res.SetContent(200, registry->Render(), metrics::kExpositionContentType);
      },
      /*public_route=*/true);
}

void HttpServer::AddRoute(const std::string& method, const std::string& path, Handler handler,
                          bool public_route) {
  route_paths_.insert(path);
  // httplib matches routes as regular expressions; escape so that the path matches literally.
  std::string pattern;
  for (char c : path) {
    if (std::string_view(".^$|()[]{}*+?\\").find(c) != std::string_view::npos) pattern += '\\';
    pattern += c;
  }
  auto wrapped = [this, handler = std::move(handler), public_route](const httplib::Request& req,
                                                                    httplib::Response& res) {
    Dispatch(handler, public_route, req, res);
  };
  if (method == "GET") {
    server_->Get(pattern, std::move(wrapped));
  } else {
    server_->Post(pattern, std::move(wrapped));
  }
}

void HttpServer::Dispatch(const Handler& handler, bool public_route, const httplib::Request& req,
                          httplib::Response& res) {
  if (!public_route && draining()) {
    WriteError(res, absl::UnavailableError("The server is shutting down"));
    return;
  }
  if (!public_route && !Authorized(req)) {
    res.set_header("WWW-Authenticate", "Bearer");
    WriteError(res,
               WithErrorCode(absl::UnauthenticatedError("Missing or invalid API key; send it as "
                                                        "'Authorization: Bearer <key>'"),
                             "invalid_api_key"));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++active_handlers_;
  }
  struct Done {
    HttpServer* server;
    ~Done() { server->FinishedOne(); }
  } done{this};
  const std::string request_id = res.get_header_value(kRequestIdHeader);
  HttpRequest request(req, request_id);
  HttpResponse response(res, *this, request_id);
  handler(request, response);
}

bool HttpServer::Authorized(const httplib::Request& req) const {
  if (options_.api_key.empty()) return true;
  return ConstantTimeEquals(req.get_header_value("Authorization"), "Bearer " + options_.api_key);
}

void HttpServer::StreamStarted(const std::shared_ptr<SseStream>& stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  streams_[stream.get()] = stream;
}

void HttpServer::StreamEnded(SseStream* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  streams_.erase(stream);
  idle_.notify_all();
}

void HttpServer::FinishedOne() {
  std::lock_guard<std::mutex> lock(mutex_);
  --active_handlers_;
  idle_.notify_all();
}

int HttpServer::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return active_handlers_ + static_cast<int>(streams_.size());
}

void HttpServer::Log(const httplib::Request& req, const httplib::Response& res) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_request_start).count();
  if (requests_total_ != nullptr) {
    const std::string route = route_paths_.count(req.path) > 0 ? req.path : "unmatched";
    if (auto counter = requests_total_->WithLabels({req.method, route, absl::StrCat(res.status)});
        counter.ok()) {
      (*counter)->Increment();
    }
    if (auto histogram = request_seconds_->WithLabels({route}); histogram.ok()) {
      (*histogram)->Observe(seconds);
    }
  }
  if (options_.access_log) {
    AccessLogEntry entry;
    entry.request_id = res.get_header_value(kRequestIdHeader);
    entry.method = req.method;
    entry.path = req.path;
    entry.remote_addr = req.remote_addr;
    entry.status = res.status;
    entry.seconds = seconds;
    options_.access_log(entry);
  }
}

absl::Status HttpServer::Start() {
  if (started_ || draining()) {
    return absl::FailedPreconditionError("http: the server was already started or stopped");
  }
  int port = -1;
  if (options_.port == 0) {
    port = server_->bind_to_any_port(options_.host);
  } else if (server_->bind_to_port(options_.host, options_.port)) {
    port = options_.port;
  }
  if (port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("http: cannot listen on ", options_.host, ":", options_.port));
  }
  static_cast<WideBacklogServer*>(server_.get())->WidenBacklog();
  port_ = port;
  started_ = true;
  listener_ = std::thread([this] {
    server_->listen_after_bind();
    listener_done_ = true;
  });
  // httplib's stop() is a no-op until the accept loop runs, so do not return before it does.
  while (!server_->is_running() && !listener_done_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (listener_done_) return absl::UnavailableError("http: the accept loop exited at start");
  return absl::OkStatus();
}

void HttpServer::Shutdown(std::chrono::milliseconds drain) {
  std::call_once(stop_once_, [&] {
    draining_ = true;
    if (!started_) return;
    std::vector<std::shared_ptr<SseStream>> remaining;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      idle_.wait_for(lock, drain, [&] { return active_handlers_ == 0 && streams_.empty(); });
      for (auto& [raw, weak] : streams_) {
        if (std::shared_ptr<SseStream> stream = weak.lock()) remaining.push_back(stream);
      }
    }
    for (auto& stream : remaining) stream->Cancel();
    server_->stop();
    if (listener_.joinable()) listener_.join();
  });
}

}  // namespace scd::http
