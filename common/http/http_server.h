// HttpServer: the client-facing HTTP front of both daemons, an event-driven HTTP/1.1 server on
// Boost.Beast/Asio that adds what every route needs and no route should repeat:
//   - an `X-Request-Id` on every response (scd::NewRequestId, the format gRPC uses too; visible
//     to the handler for logs and passed downstream), and an optional access-log callback;
//   - an optional API key (or a check of the caller's own, for several keys): a route called
//     without `Authorization: Bearer <key>` gets 401 and an OpenAI error body, and its handler
//     never runs (/health, /ready, /metrics are exempt so that probes and scrapers need no
//     secret);
//   - a request-body limit (413), OpenAI error bodies for every error the server answers itself
//     (404 unknown route, 400 malformed request, 408 a header or body that came too slowly,
//     429 too many connections from one address, 500 handler exception);
//   - SSE streaming through SseStream, whose producer learns when the client disconnects;
//   - /health, /ready and /metrics helpers, per-route request counters and latency histograms,
//     and connection gauges and counters;
//   - graceful shutdown: stop admitting (503), drain in-flight requests and streams up to a
//     deadline, cancel what is left, stop.
// It listens on 127.0.0.1 by default; port 0 binds a free port, reported by port(). A port
// already in use is an error (no SO_REUSEPORT), so two daemons never share one.
//
// Threading: a few I/O threads run every connection's reads, writes and timers; an idle or slow
// connection costs its buffers, not a thread. Route handlers run on a pool of `num_threads`
// handler threads, since they may block (a non-streaming completion waits for its answer), but
// /health, /ready and /metrics run on the I/O thread, so that probes never queue behind them
// (their callbacks must not block); a
// streaming handler returns once it has called StartSse, and the stream's events are written
// by the I/O threads as they come. Handlers run on pool threads and must be thread-safe.
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
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metrics/registry.h"

namespace scd::http {

class HttpServer;
class HttpConnection;

// One server-sent-events response stream. The route handler gets it from
// HttpResponse::StartSse and hands it to whatever produces the events (any thread); the
// connection's I/O thread writes them to the socket as they come. Thread-safe.
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
  friend class HttpConnection;
  friend class HttpResponse;
  friend class HttpServer;
  enum class Pull { kData, kIdle, kDone, kCancelled };

  explicit SseStream(std::string request_id) : request_id_(std::move(request_id)) {}
  // Without waiting: on kData *out holds every queued event, framed; kDone once Finish was
  // called and everything before it was taken (the stream then counts as delivered).
  Pull Take(std::string* out);
  // `notify` runs (on the producer's thread, without locks held) after each Send and Finish,
  // and once at once, so that the connection writes what is queued.
  void SetNotifier(std::function<void()> notify);
  void Cancel();
  bool Delivered() const;

  const std::string request_id_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::deque<std::string> queue_;  // framed events
  bool finished_ = false;
  bool cancelled_ = false;
  bool delivered_ = false;  // [DONE] and everything before it were taken for the socket
  std::vector<std::function<void()>> on_cancel_;
  std::function<void()> notify_;
};

// A parsed request, as the server hands it to a route.
struct RequestData {
  std::string method;
  std::string path;  // the target without its query string
  std::string body;
  std::string remote_addr;
  std::vector<std::pair<std::string, std::string>> headers;  // in arrival order
};

// A request, as a route handler sees it (a view; valid during the handler call).
class HttpRequest {
 public:
  HttpRequest(const RequestData& request, std::string request_id)
      : request_(request), request_id_(std::move(request_id)) {}

  const std::string& method() const { return request_.method; }
  const std::string& path() const { return request_.path; }
  const std::string& body() const { return request_.body; }
  // The header's value ("" when absent; names are case-insensitive).
  std::string header(const std::string& name) const;
  const std::string& request_id() const { return request_id_; }

 private:
  const RequestData& request_;
  std::string request_id_;
};

// What a route answered: a whole body, or a stream.
struct ResponseData {
  int status = 200;
  std::string body;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;  // set by the handler
  std::shared_ptr<SseStream> stream;                         // set by StartSse
};

// The response a route handler fills in.
class HttpResponse {
 public:
  HttpResponse(ResponseData& response, HttpServer& server, std::string request_id)
      : response_(response), server_(server), request_id_(std::move(request_id)) {}

  void SetJson(int status, const std::string& body);
  void SetContent(int status, const std::string& body, const std::string& content_type);
  // The mapped HTTP status and an OpenAI error body (openai_error.h). 429 and 503 also get
  // `Retry-After: 1` (a later SetHeader may replace it).
  void SetError(const absl::Status& status);
  // Sets `name` to `value`, replacing an earlier value of the same header.
  void SetHeader(const std::string& name, const std::string& value);
  // Makes this a 200 `text/event-stream` response fed by the returned stream, which outlives
  // the handler. Call at most once, and set nothing else afterwards.
  std::shared_ptr<SseStream> StartSse();

 private:
  ResponseData& response_;
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

// The defaults here are the daemons' config defaults; the ranges are checked in Create and,
// for config keys, by ReadHttpServerKeys (common/config/http_keys.h).
struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                     // 0: any free port (see HttpServer::port)
  size_t max_body_bytes = 1 << 20;  // larger request bodies get 413
  std::string api_key;              // empty: no authentication
  // When set, decides instead of `api_key` whether a request may reach a route: called with
  // its Authorization header ("" when absent) on a handler thread; must not block. The prefill
  // daemon checks its several keys with it (prefill_server/api_keys.h).
  std::function<bool(const std::string& authorization)> authenticate;
  int num_threads = 64;  // route handlers running at once
  int io_threads = 2;    // threads that run every connection's reads and writes
  // A request's header must arrive within this (also the idle limit of a kept-alive
  // connection between requests), and its body within `read_timeout_seconds` after it;
  // a late header closes the connection, a late body gets 408.
  int header_timeout_seconds = 60;
  int read_timeout_seconds = 30;
  int write_timeout_seconds = 30;  // a response write that makes no progress for this long
  // Open connections one client address may hold; further ones get 429 and are closed.
  int max_connections_per_client = 1024;
  // An idle stream sends an SSE comment this often; writing it is how a disconnected client
  // is noticed while no tokens flow (e.g. during a long prefill).
  std::chrono::milliseconds sse_keepalive{1000};
  // When set, the server registers scd_http_requests_total{method,route,code},
  // scd_http_request_duration_seconds{route} (unknown paths count as route="unmatched"),
  // scd_http_connections and scd_http_connections_refused_total{reason} here.
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
  // GET of any path that starts with `prefix` and has more after it (`/v1/models/` serves
  // `/v1/models/<id>`); a literal route of the same path wins.
  void GetPrefix(const std::string& prefix, Handler handler);
  // GET /health: 200 {"status": "ok"} while the process serves (liveness; also while draining).
  void AddHealthRoute();
  // GET /ready: 200 {"status": "ready"} when `ready` returns OK, otherwise 503 with its message
  // in an OpenAI error body; always 503 while draining.
  void AddReadyRoute(std::function<absl::Status()> ready);
  // GET /metrics: registry->Render() as text/plain; version=0.0.4. The registry must outlive
  // the server.
  void AddMetricsRoute(const metrics::Registry* registry);

  // Binds host:port and serves on background threads. Unavailable naming the address and the
  // reason when it cannot be bound (a port in use among them); FailedPrecondition when already
  // started.
  absl::Status Start();
  // The bound port (after Start).
  int port() const { return port_; }

  // Graceful stop: new requests get 503, in-flight handlers and streams get up to `drain` to
  // finish, remaining streams are cancelled (their producers see Send fail), then the listener,
  // the connections and the threads stop. Idempotent; safe from any thread but a handler's.
  void Shutdown(std::chrono::milliseconds drain);
  void Stop() { Shutdown(std::chrono::milliseconds(0)); }

  bool draining() const { return draining_.load(); }
  // Handlers running plus streams not yet ended.
  int in_flight() const;
  // Open client connections.
  int connections() const;
  const HttpServerOptions& options() const { return options_; }

 private:
  friend class HttpConnection;
  friend class HttpResponse;
  struct Route {
    std::string label;  // the metric label: the path, or the prefix followed by "{id}"
    Handler handler;
    bool public_route = false;
  };
  struct Io;  // the Asio state (http_server.cc)
  explicit HttpServer(HttpServerOptions options);

  absl::Status RegisterMetrics();
  void AddRoute(const std::string& method, const std::string& path, Handler handler,
                bool public_route);
  // The route for a request, or null (404).
  const Route* FindRoute(const std::string& method, const std::string& path) const;
  // Runs on a handler thread: checks draining and the API key, then the route's handler.
  void Dispatch(const Route* route, const RequestData& request, const std::string& request_id,
                ResponseData* response);
  bool Authorized(const RequestData& request) const;
  void Accept();
  // Runs `work` on a handler thread.
  void RunHandler(std::function<void()> work);
  // A connection from `address` opens or closes; false when the address is over its limit.
  bool ConnectionOpened(const std::string& address,
                        const std::shared_ptr<HttpConnection>& connection);
  void ConnectionClosed(const std::string& address, HttpConnection* connection);
  void CountRefused(const std::string& reason);
  // Stream bookkeeping for drain and cancellation.
  void StreamStarted(const std::shared_ptr<SseStream>& stream);
  void StreamEnded(SseStream* stream);
  // Counts and logs an answered request; `route` is its route (null: "unmatched").
  void Log(const Route* route, const RequestData& request, const std::string& request_id,
           int status, std::chrono::steady_clock::time_point start);

  const HttpServerOptions options_;
  std::unique_ptr<Io> io_;
  int port_ = 0;
  bool started_ = false;
  std::atomic<bool> draining_{false};
  std::once_flag stop_once_;

  std::map<std::string, Route> get_routes_, post_routes_;  // fixed after Start
  std::map<std::string, Route> get_prefix_routes_;

  mutable std::mutex mutex_;  // guards the fields below
  std::condition_variable idle_;
  int active_handlers_ = 0;
  std::map<SseStream*, std::weak_ptr<SseStream>> streams_;
  std::map<std::string, int> connections_by_address_;
  int connections_ = 0;

  metrics::CounterFamily* requests_total_ = nullptr;
  metrics::HistogramFamily* request_seconds_ = nullptr;
  metrics::Gauge* connections_gauge_ = nullptr;
  metrics::CounterFamily* refused_total_ = nullptr;
};

}  // namespace scd::http

#endif  // SCD_COMMON_HTTP_HTTP_SERVER_H_
