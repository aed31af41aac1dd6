// The HTTP front door under slow and greedy clients, against real loopback sockets: idle and
// half-sent requests hold no thread (other clients are served while hundreds of them wait),
// the header and body deadlines answer 408, one address cannot hold more than its share of
// connections, and the smaller pieces of HTTP/1.1 a front door needs (prefix routes,
// `Expect: 100-continue`, keep-alive after a stream).
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "common/http/http_server.h"
#include "common/http/sse.h"

namespace scd::http {
namespace {

using namespace std::chrono_literals;

// A client socket that speaks raw bytes.
class RawClient {
 public:
  explicit RawClient(int port, const char* source = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (source != nullptr) {
      sockaddr_in local{};
      local.sin_family = AF_INET;
      ::inet_pton(AF_INET, source, &local.sin_addr);
      ::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local));
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawClient() { ::close(fd_); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  bool Send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Reads until the peer closes, `stop` appears in what was read, or `timeout` passes.
  std::string Read(std::chrono::milliseconds timeout, const std::string& stop = "") {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
      char buffer[4096];
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      out.append(buffer, static_cast<size_t>(n));
      if (!stop.empty() && absl::StrContains(out, stop)) break;
    }
    return out;
  }
  bool closed() const { return closed_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
};

// A server with /health, a slow-free echo route and a streaming route.
std::unique_ptr<HttpServer> StartServer(HttpServerOptions options) {
  auto created = HttpServer::Create(std::move(options));
  REQUIRE(created.ok());
  std::unique_ptr<HttpServer> server = std::move(*created);
  server->AddHealthRoute();
  server->Post("/echo", [](const HttpRequest& req, HttpResponse& res) {
    res.SetContent(200, req.body(), "text/plain");
  });
  server->Get("/stream", [](const HttpRequest&, HttpResponse& res) {
    std::shared_ptr<SseStream> stream = res.StartSse();
    std::thread([stream] {
      for (int i = 0; i < 3; ++i) stream->Send(std::to_string(i));
      stream->Finish();
    }).detach();
  });
  server->GetPrefix("/v1/models/", [](const HttpRequest& req, HttpResponse& res) {
    res.SetContent(200, req.path(), "text/plain");
  });
  server->Get("/v1/models/list", [](const HttpRequest&, HttpResponse& res) {
    res.SetContent(200, "literal", "text/plain");
  });
  REQUIRE(server->Start().ok());
  return server;
}

TEST_CASE("idle and half-sent requests hold no thread: others are served meanwhile", "[cpu]") {
  HttpServerOptions options;
  options.num_threads = 2;
  options.io_threads = 1;
  std::unique_ptr<HttpServer> server = StartServer(options);
  constexpr int kSlow = 300;  // 150 times the handler threads
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(std::make_unique<RawClient>(server->port()));
    REQUIRE(slow.back()->connected());
    if (i % 2 == 0) REQUIRE(slow.back()->Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Len"));
  }
  // Every one is accepted and held.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (server->connections() < kSlow && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  REQUIRE(server->connections() == kSlow);
  httplib::Client client("127.0.0.1", server->port());
  client.set_read_timeout(2, 0);
  for (int i = 0; i < 20; ++i) {
    auto health = client.Get("/health");
    REQUIRE(health);
    CHECK(health->status == 200);
    auto echo = client.Post("/echo", "ping", "text/plain");
    REQUIRE(echo);
    CHECK(echo->body == "ping");
  }
  auto stream = client.Get("/stream");
  REQUIRE(stream);
  CHECK(SseParser().Feed(stream->body) == std::vector<std::string>{"0", "1", "2", "[DONE]"});
}

TEST_CASE("probes answer while every handler thread is blocked", "[cpu]") {
  HttpServerOptions options;
  options.num_threads = 1;
  auto created = HttpServer::Create(options);
  REQUIRE(created.ok());
  HttpServer& server = **created;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  server.AddHealthRoute();
  server.Get("/block", [released](const HttpRequest&, HttpResponse& res) {
    released.wait();
    res.SetContent(200, "done", "text/plain");
  });
  REQUIRE(server.Start().ok());
  auto blocked = std::async(std::launch::async, [&] {
    httplib::Client client("127.0.0.1", server.port());
    return client.Get("/block");
  });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (server.in_flight() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  REQUIRE(server.in_flight() == 1);  // the one handler thread is taken
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(2, 0);
  auto health = client.Get("/health");
  REQUIRE(health);
  CHECK(health->status == 200);
  CHECK(client.Get("/nowhere")->status == 404);
  release.set_value();
  auto answer = blocked.get();
  REQUIRE(answer);
  CHECK(answer->body == "done");
}

TEST_CASE("a late header or body gets 408 and the connection closes", "[cpu]") {
  HttpServerOptions options;
  options.header_timeout_seconds = 1;
  options.read_timeout_seconds = 1;
  metrics::Registry registry;
  options.metrics = &registry;
  std::unique_ptr<HttpServer> server = StartServer(options);

  RawClient half_header(server->port());
  REQUIRE(half_header.Send("GET /health HTTP/1.1\r\nHo"));
  const std::string header_answer = half_header.Read(5s);
  CHECK(absl::StartsWith(header_answer, "HTTP/1.1 408"));
  CHECK(absl::StrContains(header_answer, "request_timeout"));
  CHECK(half_header.closed());

  RawClient half_body(server->port());
  REQUIRE(half_body.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"));
  const std::string body_answer = half_body.Read(5s);
  CHECK(absl::StartsWith(body_answer, "HTTP/1.1 408"));
  CHECK(half_body.closed());

  RawClient idle(server->port());  // sends nothing: closed without an answer
  CHECK(idle.Read(5s).empty());
  CHECK(idle.closed());
  CHECK(absl::StrContains(registry.Render(),
                          "scd_http_connections_refused_total{reason=\"request_timeout\"} 2"));
}

TEST_CASE("one address holds at most max_connections_per_client connections", "[cpu]") {
  HttpServerOptions options;
  options.max_connections_per_client = 3;
  metrics::Registry registry;
  options.metrics = &registry;
  std::unique_ptr<HttpServer> server = StartServer(options);
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 3; ++i) held.push_back(std::make_unique<RawClient>(server->port()));
  // The three held ones are accepted before the fourth is (one accept loop, in order).
  RawClient fourth(server->port());
  const std::string refused = fourth.Read(5s);
  CHECK(absl::StartsWith(refused, "HTTP/1.1 429"));
  CHECK(absl::StrContains(refused, "Retry-After: 1"));
  CHECK(absl::StrContains(refused, "too_many_connections"));
  CHECK(fourth.closed());
  // Another address is not affected, and a held connection still works.
  RawClient other(server->port(), "127.0.0.2");
  REQUIRE(other.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  CHECK(absl::StartsWith(other.Read(5s, "\r\n\r\n"), "HTTP/1.1 200"));
  REQUIRE(held[0]->Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  CHECK(absl::StartsWith(held[0]->Read(5s, "\r\n\r\n"), "HTTP/1.1 200"));
  CHECK(absl::StrContains(registry.Render(),
                          "scd_http_connections_refused_total{reason=\"too_many_connections\"} 1"));
}

TEST_CASE("prefix routes, Expect: 100-continue, keep-alive after a stream", "[cpu]") {
  std::unique_ptr<HttpServer> server = StartServer({});
  httplib::Client client("127.0.0.1", server->port());
  auto model = client.Get("/v1/models/stories260K");
  REQUIRE(model);
  CHECK(model->body == "/v1/models/stories260K");
  CHECK(client.Get("/v1/models/list")->body == "literal");  // a literal route wins
  CHECK(client.Get("/v1/models/")->status == 404);          // the prefix alone is no id

  RawClient expect(server->port());
  REQUIRE(
      expect.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                  "Expect: 100-continue\r\n\r\n"));
  CHECK(absl::StartsWith(expect.Read(5s, "\r\n\r\n"), "HTTP/1.1 100 Continue"));
  REQUIRE(expect.Send("hello"));
  const std::string answer = expect.Read(5s, "hello");
  CHECK(absl::StartsWith(answer, "HTTP/1.1 200"));
  CHECK(absl::StrContains(answer, "hello"));

  // A stream, then a second request on the same connection.
  RawClient keep(server->port());
  REQUIRE(keep.Send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string streamed = keep.Read(5s, "0\r\n\r\n");
  CHECK(absl::StrContains(streamed, "Transfer-Encoding: chunked"));
  CHECK(absl::StrContains(streamed, "data: [DONE]"));
  REQUIRE(keep.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  CHECK(absl::StrContains(keep.Read(5s, "\"ok\""), "\"ok\""));
}

}  // namespace
}  // namespace scd::http
