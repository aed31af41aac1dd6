// HttpServer: the client-facing HTTP front of the prefill daemon, a thin layer over
// cpp-httplib's threaded server that adds what every route needs and no route should repeat:
//   - an `X-Request-Id` on every response (generated per request, visible to the handler for
//     logs and passed downstream), and an optional access-log callback;
//   - an optional API key: a route called without `Authorization: Bearer <key>` gets 401 and
//     an OpenAI error body, and its handler never runs (/health, /ready, /metrics are exempt so
//     that probes and scrapers need no secret);
//   - a request-body limit (413), OpenAI error bodies for every error httplib answers itself
//     (404 unknown route, 400 malformed request, 500 handler exception);
//   - SSE streaming through SseStream, whose producer learns when the client disconnects;
//   - /health, /ready and /metrics helpers, per-route request counters and latency histograms;
//   - graceful shutdown: stop admitting (503), drain in-flight requests and streams up to a
//     deadline, cancel what is left, stop.
// It listens on 127.0.0.1 by default; port 0 binds a free port, reported by port().
//
// Threading: httplib serves each connection on a pool thread (num_threads of them), and a
// streaming response holds its thread until it ends, so num_threads bounds concurrent streams;
// further connections wait in httplib's queue. Handlers run on pool threads and must be
// thread-safe.
#ifndef SCD_COMMON_HTTP_HTTP_SERVER_H_
#define SCD_COMMON_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metrics/registry.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace scd::http {

class HttpServer;

// One server-sent-events response stream. The route handler gets it from
// HttpResponse::StartSse and hands it to whatever produces the events (any thread); the
// connection's pool thread drains it to the socket. Thread-safe.
class SseStream {
 public:
  SseStream(const SseStream&) = delete;
  SseStream& operator=(const SseStream&) = delete;

  // Queues one event carrying `payload` (see SseEvent). False when the stream is already
  // closed or cancelled, which tells the producer to stop its work.
  bool Send(std::string payload);
  // Queues `data: [DONE]` and closes the stream to further events. Idempotent.
  void Finish();
  // Queues an OpenAI error event ({"error": {...}}, as OpenAI sends mid-stream), then finishes.
  void Fail(const absl::Status& status);

  // True once the client went away or the server cancelled the stream while shutting down.
  bool cancelled() const;
  // Runs `callback` once when the stream is cancelled, on the thread that notices; at once if
  // it already is. Never runs for a stream that finished and was delivered.
  void OnCancel(std::function<void()> callback);
  // Blocks until the stream is cancelled or `timeout` passes; returns cancelled().
  bool WaitCancelled(std::chrono::milliseconds timeout) const;

  const std::string& request_id() const { return request_id_; }

 private:
  friend class HttpServer;
  friend class HttpResponse;
  enum class Pull { kData, kIdle, kDone, kCancelled };

  explicit SseStream(std::string request_id) : request_id_(std::move(request_id)) {}
  // Waits up to `wait` for queued events; on kData *out holds all of them, framed.
  Pull Next(std::chrono::milliseconds wait, std::string* out);
  void Cancel();
  // True when Finish was called and everything queued was handed to the socket.
  bool Delivered() const;

  const std::string request_id_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::deque<std::string> queue_;  // framed events
  bool finished_ = false;
  bool cancelled_ = false;
  bool delivered_ = false;  // [DONE] and everything before it went to the socket
  std::vector<std::function<void()>> on_cancel_;
};

// A request, as a route handler sees it (a view; valid during the handler call).
class HttpRequest {
 public:
  HttpRequest(const httplib::Request& request, std::string request_id)
      : request_(request), request_id_(std::move(request_id)) {}

  const std::string& method() const;
  const std::string& path() const;
  const std::string& body() const;
  // The header's value ("" when absent; names are case-insensitive).
  std::string header(const std::string& name) const;
  const std::string& request_id() const { return request_id_; }

 private:
  const httplib::Request& request_;
  std::string request_id_;
};

// The response a route handler fills in.
class HttpResponse {
 public:
  HttpResponse(httplib::Response& response, HttpServer& server, std::string request_id)
      : response_(response), server_(server), request_id_(std::move(request_id)) {}

  void SetJson(int status, const std::string& body);
  void SetContent(int status, const std::string& body, const std::string& content_type);
  // The mapped HTTP status and an OpenAI error body (openai_error.h). 429 and 503 also get
  // `Retry-After: 1`.
  void SetError(const absl::Status& status);
  void SetHeader(const std::string& name, const std::string& value);
  // Makes this a 200 `text/event-stream` response fed by the returned stream, which outlives
  // the handler. Call at most once, and set nothing else afterwards.
  std::shared_ptr<SseStream> StartSse();

 private:
  httplib::Response& response_;
  HttpServer& server_;
  std::string request_id_;
};

using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;

// One line of the access log, delivered after the response (a stream: after its last byte).
struct AccessLogEntry {
  std::string request_id;
  std::string method;
  std::string path;
  std::string remote_addr;
  int status = 0;
  double seconds = 0;  // from routing to the end of the response
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                     // 0: any free port (see HttpServer::port)
  size_t max_body_bytes = 1 << 20;  // larger request bodies get 413
  std::string api_key;              // empty: no authentication
  int num_threads = 64;             // concurrent connections served (streams included)
  int read_timeout_seconds = 30;
  int write_timeout_seconds = 30;
  // An idle stream sends an SSE comment this often; writing it is how a disconnected client
  // is noticed while no tokens flow (e.g. during a long prefill).
  std::chrono::milliseconds sse_keepalive{1000};
  // When set, the server registers scd_http_requests_total{method,route,code} and
  // scd_http_request_duration_seconds{route} here (unknown paths count as route="unmatched").
  metrics::Registry* metrics = nullptr;
  std::function<void(const AccessLogEntry&)> access_log;
};

class HttpServer {
 public:
  // Validates the options (InvalidArgument naming the bad one) and registers the metrics.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(HttpServerOptions options);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Routes match the literal path. Register before Start.
  void Get(const std::string& path, Handler handler);
  void Post(const std::string& path, Handler handler);
  // GET /health: 200 {"status": "ok"} while the process serves (liveness; also while draining).
  void AddHealthRoute();
  // GET /ready: 200 {"status": "ready"} when `ready` returns OK, otherwise 503 with its message
  // in an OpenAI error body; always 503 while draining.
  void AddReadyRoute(std::function<absl::Status()> ready);
  // GET /metrics: registry->Render() as text/plain; version=0.0.4. The registry must outlive
  // the server.
  void AddMetricsRoute(const metrics::Registry* registry);

  // Binds host:port and serves on a background thread. Unavailable when the address cannot be
  // bound; FailedPrecondition when already started.
  absl::Status Start();
  // The bound port (after Start).
  int port() const { return port_; }

  // Graceful stop: new requests get 503, in-flight handlers and streams get up to `drain` to
  // finish, remaining streams are cancelled (their producers see Send fail), then the listener
  // and pool stop. Idempotent; safe from any thread but a handler's.
  void Shutdown(std::chrono::milliseconds drain);
  void Stop() { Shutdown(std::chrono::milliseconds(0)); }

  bool draining() const { return draining_.load(); }
  // Handlers running plus streams not yet ended.
  int in_flight() const;
  const HttpServerOptions& options() const { return options_; }

 private:
  friend class HttpResponse;
  explicit HttpServer(HttpServerOptions options);

  void AddRoute(const std::string& method, const std::string& path, Handler handler,
                bool public_route);
  void Dispatch(const Handler& handler, bool public_route, const httplib::Request& req,
                httplib::Response& res);
  bool Authorized(const httplib::Request& req) const;
  // Stream bookkeeping for drain and cancellation.
  void StreamStarted(const std::shared_ptr<SseStream>& stream);
  void StreamEnded(SseStream* stream);
  void FinishedOne();
  void Log(const httplib::Request& req, const httplib::Response& res);

  const HttpServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  std::atomic<bool> listener_done_{false};
  int port_ = 0;
  bool started_ = false;
  std::atomic<bool> draining_{false};
  std::once_flag stop_once_;

  std::set<std::string> route_paths_;  // for metric labels; fixed after Start

  mutable std::mutex mutex_;  // guards the fields below
  std::condition_variable idle_;
  int active_handlers_ = 0;
  std::map<SseStream*, std::weak_ptr<SseStream>> streams_;

  metrics::CounterFamily* requests_total_ = nullptr;
  metrics::HistogramFamily* request_seconds_ = nullptr;
};

}  // namespace scd::http

#endif  // SCD_COMMON_HTTP_HTTP_SERVER_H_
