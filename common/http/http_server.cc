// HttpServer on Boost.Asio (see http_server.h): an acceptor and every connection's reads,
// writes and timers run on `io_threads` threads, each connection on its own strand
// (http_connection.h); route handlers run on a pool of `num_threads` threads, because they may
// block. The server keeps the books a drain needs: handlers running, streams open, connections
// open per client address.
#include "common/http/http_server.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/constant_time.h"
#include "common/http/http_connection.h"
#include "common/http/openai_error.h"

namespace scd::http {
namespace net = boost::asio;

struct HttpServer::Io {
  net::io_context context;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  // The acceptor has a context and a thread of its own, so that connections are accepted at
  // once even while the I/O threads are busy (a burst of reconnects must not fill the kernel's
  // accept queue, where a new client's SYN would wait a second for its retransmit).
  net::io_context accept_context;
  net::ip::tcp::acceptor acceptor{accept_context};
  std::thread accept_thread;
  std::unique_ptr<net::thread_pool> handlers;
  std::vector<std::thread> threads;
  // Open connections, for Shutdown (guarded by HttpServer::mutex_).
  std::map<HttpConnection*, std::weak_ptr<HttpConnection>> live;
};

namespace {

void WriteError(ResponseData* response, const absl::Status& status) {
  const HttpError error = ToHttpError(status);
  response->status = error.status;
  response->body = error.body;
  response->content_type = "application/json";
  if (error.status == 429 || error.status == 503)
    response->headers.emplace_back("Retry-After", "1");
}

absl::Status ValidateOptions(const HttpServerOptions& o) {
  if (o.host.empty()) return absl::InvalidArgumentError("http: 'host' must not be empty");
  if (o.port < 0 || o.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("http: 'port' must be in [0, 65535], got ", o.port));
  }
  if (o.max_body_bytes == 0) {
    return absl::InvalidArgumentError("http: 'max_body_bytes' must be positive");
  }
  if (o.num_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("http: 'num_threads' must be at least 1, got ", o.num_threads));
  }
  if (o.io_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("http: 'io_threads' must be at least 1, got ", o.io_threads));
  }
  if (o.header_timeout_seconds < 1 || o.read_timeout_seconds < 1 || o.write_timeout_seconds < 1) {
    return absl::InvalidArgumentError("http: header, read and write timeouts must be at least 1 s");
  }
  if (o.max_connections_per_client < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("http: 'max_connections_per_client' must be at least 1, got ",
                     o.max_connections_per_client));
  }
  if (o.sse_keepalive.count() < 1) {
    return absl::InvalidArgumentError("http: 'sse_keepalive' must be positive");
  }
  return absl::OkStatus();
}

}  // namespace

// ---- HttpRequest / HttpResponse ----

std::string HttpRequest::header(const std::string& name) const {
  for (const auto& [key, value] : request_.headers) {
    if (absl::EqualsIgnoreCase(key, name)) return value;
  }
  return "";
}

void HttpResponse::SetJson(int status, const std::string& body) {
  SetContent(status, body, "application/json");
}

void HttpResponse::SetContent(int status, const std::string& body,
                              const std::string& content_type) {
  response_.status = status;
  response_.body = body;
  response_.content_type = content_type;
}

void HttpResponse::SetError(const absl::Status& status) { WriteError(&response_, status); }

void HttpResponse::SetHeader(const std::string& name, const std::string& value) {
  for (auto& [key, old] : response_.headers) {
    if (absl::EqualsIgnoreCase(key, name)) {
      old = value;
      return;
    }
  }
  response_.headers.emplace_back(name, value);
}

std::shared_ptr<SseStream> HttpResponse::StartSse() {
  std::shared_ptr<SseStream> stream(new SseStream(request_id_));
  server_.StreamStarted(stream);
  response_.status = 200;
  response_.stream = stream;
  return stream;
}

// ---- HttpServer: set-up and routes ----

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(HttpServerOptions options) {
  if (absl::Status st = ValidateOptions(options); !st.ok()) return st;
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(options)));
  if (absl::Status st = server->RegisterMetrics(); !st.ok()) return st;
  return server;
}

HttpServer::HttpServer(HttpServerOptions options)
    : options_(std::move(options)), io_(std::make_unique<Io>()) {}

HttpServer::~HttpServer() { Stop(); }

absl::Status HttpServer::RegisterMetrics() {
  metrics::Registry* registry = options_.metrics;
  if (registry == nullptr) return absl::OkStatus();
  absl::StatusOr<metrics::CounterFamily*> requests = registry->AddCounterFamily(
      "scd_http_requests_total", "HTTP requests answered, by method, route and status code.",
      {"method", "route", "code"});
  if (!requests.ok()) return requests.status();
  absl::StatusOr<metrics::HistogramFamily*> seconds = registry->AddHistogramFamily(
      "scd_http_request_duration_seconds",
      "Time from routing to the last byte of the response (whole stream for SSE).", {"route"},
      metrics::ExponentialBuckets(0.001, 2, 17));  // 1 ms .. ~65 s
  if (!seconds.ok()) return seconds.status();
  absl::StatusOr<metrics::Gauge*> connections =
      registry->AddGauge("scd_http_connections", "Open client connections to the HTTP server.");
  if (!connections.ok()) return connections.status();
  absl::StatusOr<metrics::CounterFamily*> refused = registry->AddCounterFamily(
      "scd_http_connections_refused_total",
      "Connections or requests the HTTP server refused itself, by reason (too_many_connections, "
      "request_timeout, payload_too_large, malformed).",
      {"reason"});
  if (!refused.ok()) return refused.status();
  requests_total_ = *requests;
  request_seconds_ = *seconds;
  connections_gauge_ = *connections;
  refused_total_ = *refused;
  return absl::OkStatus();
}

void HttpServer::Get(const std::string& path, Handler handler) {
  AddRoute("GET", path, std::move(handler), /*public_route=*/false);
}

void HttpServer::Post(const std::string& path, Handler handler) {
  AddRoute("POST", path, std::move(handler), /*public_route=*/false);
}

void HttpServer::GetPrefix(const std::string& prefix, Handler handler) {
  get_prefix_routes_[prefix] = Route{prefix + "{id}", std::move(handler), false};
}

void HttpServer::AddRoute(const std::string& method, const std::string& path, Handler handler,
                          bool public_route) {
  (method == "GET" ? get_routes_ : post_routes_)[path] =
      Route{path, std::move(handler), public_route};
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

const HttpServer::Route* HttpServer::FindRoute(const std::string& method,
                                               const std::string& path) const {
  if (method == "GET" || method == "POST") {
    const auto& routes = method == "GET" ? get_routes_ : post_routes_;
    if (auto it = routes.find(path); it != routes.end()) return &it->second;
  }
  if (method != "GET") return nullptr;
  for (const auto& [prefix, route] : get_prefix_routes_) {
    if (path.size() > prefix.size() && absl::StartsWith(path, prefix)) return &route;
  }
  return nullptr;
}

// ---- HttpServer: answering ----

void HttpServer::RunHandler(std::function<void()> work) {
  net::post(*io_->handlers, std::move(work));
}

void HttpServer::Dispatch(const Route* route, const RequestData& request,
                          const std::string& request_id, ResponseData* response) {
  if (route == nullptr) {
    return WriteError(
        response, WithErrorCode(absl::NotFoundError(absl::StrCat("No route for ", request.method,
                                                                 " ", request.path)),
                                "route_not_found"));
  }
  if (!route->public_route && draining()) {
    return WriteError(response, absl::UnavailableError("The server is shutting down"));
  }
  if (!route->public_route && !Authorized(request)) {
    response->headers.emplace_back("WWW-Authenticate", "Bearer");
    return WriteError(
        response, WithErrorCode(absl::UnauthenticatedError("Missing or invalid API key; send it as "
                                                           "'Authorization: Bearer <key>'"),
                                "invalid_api_key"));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++active_handlers_;
  }
  HttpRequest req(request, request_id);
  HttpResponse res(*response, *this, request_id);
  try {
    route->handler(req, res);
  } catch (const std::exception& e) {
    WriteError(response, absl::InternalError(absl::StrCat("Internal error: ", e.what())));
  } catch (...) {
    WriteError(response, absl::InternalError("Internal error: unknown exception"));
  }
  if (response->stream == nullptr && response->status >= 400 && response->body.empty()) {
    WriteError(response,
               WithHttpStatus(absl::UnknownError(absl::StrCat("HTTP error ", response->status,
                                                              " for ", request.path)),
                              response->status));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  --active_handlers_;
  idle_.notify_all();
}

bool HttpServer::Authorized(const RequestData& request) const {
  const std::string authorization = HttpRequest(request, "").header("Authorization");
  if (options_.authenticate) return options_.authenticate(authorization);
  if (options_.api_key.empty()) return true;
  return ConstantTimeEquals(authorization, "Bearer " + options_.api_key);
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

int HttpServer::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return active_handlers_ + static_cast<int>(streams_.size());
}

int HttpServer::connections() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return connections_;
}

void HttpServer::Log(const Route* route, const RequestData& request, const std::string& request_id,
                     int status, std::chrono::steady_clock::time_point start) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (requests_total_ != nullptr) {
    const std::string label = route != nullptr ? route->label : "unmatched";
    if (auto counter = requests_total_->WithLabels({request.method, label, absl::StrCat(status)});
        counter.ok()) {
      (*counter)->Increment();
    }
    if (auto histogram = request_seconds_->WithLabels({label}); histogram.ok()) {
      (*histogram)->Observe(seconds);
    }
  }
  if (options_.access_log) {
    AccessLogEntry entry;
    entry.request_id = request_id;
    entry.method = request.method;
    entry.path = request.path;
    entry.remote_addr = request.remote_addr;
    entry.status = status;
    entry.seconds = seconds;
    options_.access_log(entry);
  }
}

// ---- HttpServer: connections ----

void HttpServer::Accept() {
  io_->acceptor.async_accept(net::make_strand(io_->context), [this](boost::system::error_code ec,
                                                                    net::ip::tcp::socket socket) {
    if (ec == net::error::operation_aborted || !io_->acceptor.is_open()) return;
    if (!ec) {
      boost::system::error_code endpoint_error;
      const auto remote = socket.remote_endpoint(endpoint_error);
      std::string address = endpoint_error ? "" : remote.address().to_string();
      socket.set_option(net::ip::tcp::no_delay(true), endpoint_error);  // no Nagle on chunks
      auto connection = std::make_shared<HttpConnection>(*this, std::move(socket), address);
      connection->Start(/*refuse=*/!ConnectionOpened(address, connection));
    }
    Accept();  // an accept error (out of descriptors) must not stop the server
  });
}

bool HttpServer::ConnectionOpened(const std::string& address,
                                  const std::shared_ptr<HttpConnection>& connection) {
  bool over = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    io_->live[connection.get()] = connection;
    ++connections_;
    over = ++connections_by_address_[address] > options_.max_connections_per_client;
  }
  if (connections_gauge_ != nullptr) connections_gauge_->Add(1);
  if (over) CountRefused("too_many_connections");
  return !over;
}

void HttpServer::ConnectionClosed(const std::string& address, HttpConnection* connection) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    io_->live.erase(connection);
    --connections_;
    if (--connections_by_address_[address] <= 0) connections_by_address_.erase(address);
  }
  if (connections_gauge_ != nullptr) connections_gauge_->Add(-1);
}

void HttpServer::CountRefused(const std::string& reason) {
  if (refused_total_ == nullptr) return;
  if (auto counter = refused_total_->WithLabels({reason}); counter.ok()) (*counter)->Increment();
}

absl::Status HttpServer::Start() {
  if (started_ || draining()) {
    return absl::FailedPreconditionError("http: the server was already started or stopped");
  }
  boost::system::error_code ec;
  const auto address = net::ip::make_address(options_.host, ec);
  net::ip::tcp::acceptor& acceptor = io_->acceptor;
  const net::ip::tcp::endpoint endpoint(address, static_cast<unsigned short>(options_.port));
  if (!ec) acceptor.open(endpoint.protocol(), ec);
  // SO_REUSEADDR allows a quick restart; SO_REUSEPORT stays off, so a port in use fails.
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    boost::system::error_code ignored;
    acceptor.close(ignored);
    return absl::UnavailableError(absl::StrCat("http: cannot listen on ", options_.host, ":",
                                               options_.port, ": ", ec.message()));
  }
  port_ = acceptor.local_endpoint().port();
  started_ = true;
  io_->handlers = std::make_unique<net::thread_pool>(options_.num_threads);
  io_->work.emplace(io_->context.get_executor());
  Accept();
  io_->accept_thread = std::thread([this] { io_->accept_context.run(); });
  for (int i = 0; i < options_.io_threads; ++i) {
    io_->threads.emplace_back([this] { io_->context.run(); });
  }
  return absl::OkStatus();
}

void HttpServer::Shutdown(std::chrono::milliseconds drain) {
  std::call_once(stop_once_, [&] {
    draining_ = true;
    if (!started_) return;
    std::vector<std::shared_ptr<SseStream>> remaining;
    std::vector<std::shared_ptr<HttpConnection>> open;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      idle_.wait_for(lock, drain, [&] { return active_handlers_ == 0 && streams_.empty(); });
      for (auto& [raw, weak] : streams_) {
        if (std::shared_ptr<SseStream> stream = weak.lock()) remaining.push_back(stream);
      }
    }
    for (auto& stream : remaining) stream->Cancel();
    net::post(io_->accept_context, [this] {
      boost::system::error_code ignored;
      io_->acceptor.close(ignored);
    });
    io_->accept_thread.join();  // the accept loop ends with the acceptor
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [raw, weak] : io_->live) {
        if (auto connection = weak.lock()) open.push_back(connection);
      }
    }
    for (auto& connection : open) connection->Close();
    open.clear();
    io_->handlers->join();  // handlers still running finish; their answers go nowhere
    io_->work.reset();
    io_->context.stop();
    for (std::thread& thread : io_->threads) thread.join();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [raw, weak] : io_->live) {
        if (auto connection = weak.lock()) open.push_back(connection);
      }
    }
    for (auto& connection : open) connection->Disarm();
    open.clear();
    // Connections die with the handlers still queued on the context; a stream started by a
    // handler that outlived the drain is cancelled here.
    io_.reset(new Io());  // releases the old context's pending handlers
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [raw, weak] : streams_) {
        if (std::shared_ptr<SseStream> stream = weak.lock()) remaining.push_back(stream);
      }
      streams_.clear();
    }
    for (auto& stream : remaining) stream->Cancel();
  });
}

}  // namespace scd::http
