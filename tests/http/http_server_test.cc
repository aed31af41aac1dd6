// HttpServer against a real loopback socket and httplib's client: SSE streaming in order with
// [DONE], include_usage, errors with OpenAI bodies (400, 401, 404, 413), request ids,
// /health, /ready and /metrics, disconnect detection, and graceful shutdown.
#include "common/http/http_server.h"

#include <httplib.h>

#include <catch2/catch.hpp>
#include <future>
#include <set>

#include "common/http/sse.h"
#include "tests/http/fake_openai_server.h"

namespace scd::http {
namespace {

using fake::FakeOpenAiServer;
using nlohmann::json;
using namespace std::chrono_literals;

std::string ChatBody(int max_tokens, bool stream, bool include_usage = false,
                     const std::string& model = fake::kModel) {
  json body{{"model", model},
            {"messages", json::array({json{{"role", "user"}, {"content", "Tell me a story"}}})},
            {"max_tokens", max_tokens},
            {"stream", stream}};
  if (include_usage) body["stream_options"] = json{{"include_usage", true}};
  return body.dump();
}

// All SSE events of a complete response body.
std::vector<std::string> Events(const std::string& body) { return SseParser().Feed(body); }

// Checks an error response: the status and an OpenAI error body of the given type.
void CheckErrorBody(const httplib::Result& res, int status, const std::string& type) {
  REQUIRE(res);
  CHECK(res->status == status);
  CHECK(res->get_header_value("Content-Type") == "application/json");
  const json body = json::parse(res->body);
  INFO(res->body);
  REQUIRE(body.contains("error"));
  CHECK(body["error"]["type"] == type);
  CHECK(body["error"]["message"].is_string());
  CHECK(body["error"].contains("param"));
  CHECK(body["error"]["code"].is_string());
}

template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds timeout = 5000ms) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

TEST_CASE("streams chat chunks in order, ending with [DONE]", "[cpu]") {
  FakeOpenAiServer fake;
  REQUIRE(fake.port() > 0);
  httplib::Client client("127.0.0.1", fake.port());
  constexpr int kTokens = 25;
  httplib::Result res =
      client.Post("/v1/chat/completions", ChatBody(kTokens, true), "application/json");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->get_header_value("Content-Type") == "text/event-stream");
  const std::vector<std::string> events = Events(res->body);
  REQUIRE(events.size() == kTokens + 2);  // tokens, finish chunk, [DONE]
  CHECK(events.back() == "[DONE]");
  std::string text;
  std::string id;
  for (int i = 0; i < kTokens; ++i) {
    const json chunk = json::parse(events[i]);
    CHECK(chunk["object"] == "chat.completion.chunk");
    CHECK(chunk["model"] == fake::kModel);
    if (i == 0) id = chunk["id"];
    CHECK(chunk["id"] == id);
    CHECK(chunk["choices"][0]["delta"].contains("role") == (i == 0));
    CHECK(chunk["choices"][0]["finish_reason"].is_null());
    CHECK_FALSE(chunk.contains("usage"));
    text += chunk["choices"][0]["delta"]["content"].get<std::string>();
  }
  CHECK(text == fake::FakeText(kTokens));
  const json finish = json::parse(events[kTokens]);
  CHECK(finish["choices"][0]["finish_reason"] == "length");
  CHECK(res->body.rfind("data: {", 0) == 0);
  CHECK(res->body.size() >= 14);
  CHECK(res->body.substr(res->body.size() - 14) == "data: [DONE]\n\n");
  CHECK(Eventually([&] { return fake.streams_completed == 1; }));
}

TEST_CASE("include_usage adds a final usage chunk", "[cpu]") {
  FakeOpenAiServer fake;
  httplib::Client client("127.0.0.1", fake.port());
  httplib::Result res =
      client.Post("/v1/chat/completions", ChatBody(4, true, true), "application/json");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  const std::vector<std::string> events = Events(res->body);
  REQUIRE(events.size() == 4 + 3);  // tokens, finish, usage, [DONE]
  for (int i = 0; i < 5; ++i) CHECK(json::parse(events[i])["usage"].is_null());
  const json usage = json::parse(events[5]);
  CHECK(usage["choices"] == json::array());
  CHECK(usage["usage"]["completion_tokens"] == 4);
  CHECK(usage["usage"]["prompt_tokens"] == std::string("Tell me a story").size());
  CHECK(usage["usage"]["total_tokens"] == 4 + 15);
  CHECK(events[6] == "[DONE]");
}

TEST_CASE("text completions stream and plain JSON responses", "[cpu]") {
  FakeOpenAiServer fake;
  httplib::Client client("127.0.0.1", fake.port());
  httplib::Result streamed = client.Post(
      "/v1/completions",
      json{{"model", fake::kModel}, {"prompt", "Once"}, {"max_tokens", 3}, {"stream", true}}.dump(),
      "application/json");
  REQUIRE(streamed);
  const std::vector<std::string> events = Events(streamed->body);
  REQUIRE(events.size() == 5);
  CHECK(json::parse(events[0])["object"] == "text_completion");
  CHECK(json::parse(events[2])["choices"][0]["text"] == " w2");
  CHECK(events[4] == "[DONE]");

  httplib::Result whole =
      client.Post("/v1/chat/completions", ChatBody(3, false), "application/json");
  REQUIRE(whole);
  CHECK(whole->status == 200);
  CHECK(whole->get_header_value("Content-Type") == "application/json");
  const json body = json::parse(whole->body);
  CHECK(body["object"] == "chat.completion");
  CHECK(body["choices"][0]["message"]["content"] == fake::FakeText(3));
  CHECK(body["usage"]["completion_tokens"] == 3);

  httplib::Result models = client.Get("/v1/models");
  REQUIRE(models);
  CHECK(json::parse(models->body)["data"][0]["id"] == fake::kModel);
}

TEST_CASE("bad requests get OpenAI error bodies", "[cpu]") {
  HttpServerOptions options;
  options.max_body_bytes = 4096;
  FakeOpenAiServer fake(options);
  httplib::Client client("127.0.0.1", fake.port());

  SECTION("malformed JSON is 400") {
    CheckErrorBody(client.Post("/v1/chat/completions", "{\"model\": ", "application/json"), 400,
                   "invalid_request_error");
  }
  SECTION("an invalid field is 400 naming it") {
    httplib::Result res = client.Post(
        "/v1/chat/completions", json{{"model", fake::kModel}, {"messages", json::array()}}.dump(),
        "application/json");
    CheckErrorBody(res, 400, "invalid_request_error");
    CHECK(json::parse(res->body)["error"]["param"] == "messages");
  }
  SECTION("an unknown model is 404") {
    httplib::Result res =
        client.Post("/v1/chat/completions", ChatBody(2, true, false, "nope"), "application/json");
    CheckErrorBody(res, 404, "not_found_error");
    CHECK(json::parse(res->body)["error"]["code"] == "model_not_found");
  }
  SECTION("an unknown route is 404") {
    CheckErrorBody(client.Get("/v1/nothing"), 404, "not_found_error");
    CheckErrorBody(client.Post("/v2/chat", "{}", "application/json"), 404, "not_found_error");
  }
  SECTION("a body over the limit is 413 and the handler never runs") {
    const std::string big = R"({"model": "x", "prompt": ")" + std::string(8192, 'a') + "\"}";
    httplib::Result res = client.Post("/v1/completions", big, "application/json");
    CheckErrorBody(res, 413, "invalid_request_error");
    CHECK(json::parse(res->body)["error"]["code"] == "payload_too_large");
    CHECK(fake.handler_calls == 0);
  }
}

TEST_CASE("every response carries a fresh X-Request-Id", "[cpu]") {
  FakeOpenAiServer fake;
  httplib::Client client("127.0.0.1", fake.port());
  std::set<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    httplib::Result ok = client.Get("/health");
    httplib::Result missing = client.Get("/missing");
    REQUIRE(ok);
    REQUIRE(missing);
    for (const httplib::Result* r : {&ok, &missing}) {
      const std::string id = (*r)->get_header_value("X-Request-Id");
      CHECK(id.size() == 32);
      CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
      ids.insert(id);
    }
  }
  CHECK(ids.size() == 6);
}

TEST_CASE("API key: missing or wrong is 401 and no work is done", "[cpu]") {
  HttpServerOptions options;
  options.api_key = "sk-test-123";
  FakeOpenAiServer fake(options);
  httplib::Client client("127.0.0.1", fake.port());

  httplib::Result missing =
      client.Post("/v1/chat/completions", ChatBody(2, true), "application/json");
  CheckErrorBody(missing, 401, "authentication_error");
  CHECK(json::parse(missing->body)["error"]["code"] == "invalid_api_key");
  CHECK(missing->get_header_value("WWW-Authenticate") == "Bearer");
  for (const std::string bad :
       {"Bearer sk-wrong", "Bearer sk-test-1234", "sk-test-123", "Basic c2stdGVzdC0xMjM="}) {
    httplib::Result wrong = client.Post("/v1/chat/completions", {{"Authorization", bad}},
                                        ChatBody(2, true), "application/json");
    CheckErrorBody(wrong, 401, "authentication_error");
  }
  CheckErrorBody(client.Get("/v1/models"), 401, "authentication_error");
  CHECK(fake.handler_calls == 0);

  // Probes and scrapes need no key.
  REQUIRE(client.Get("/health"));
  CHECK(client.Get("/health")->status == 200);
  CHECK(client.Get("/ready")->status == 200);
  CHECK(client.Get("/metrics")->status == 200);

  httplib::Result good =
      client.Post("/v1/chat/completions", {{"Authorization", "Bearer sk-test-123"}},
                  ChatBody(2, true), "application/json");
  REQUIRE(good);
  CHECK(good->status == 200);
  CHECK(fake.handler_calls == 1);
}

TEST_CASE("API key: an authenticate callback decides instead of api_key", "[cpu]") {
  HttpServerOptions options;
  options.api_key = "sk-ignored";
  std::vector<std::string> seen;
  std::mutex seen_mutex;
  options.authenticate = [&](const std::string& authorization) {
    std::lock_guard<std::mutex> lock(seen_mutex);
    seen.push_back(authorization);
    return authorization == "Bearer sk-one" || authorization == "Bearer sk-two";
  };
  FakeOpenAiServer fake(options);
  httplib::Client client("127.0.0.1", fake.port());
  for (const char* good : {"Bearer sk-one", "Bearer sk-two"}) {
    httplib::Result r = client.Post("/v1/chat/completions", {{"Authorization", good}},
                                    ChatBody(2, false), "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
  }
  CHECK(fake.handler_calls == 2);
  httplib::Result ignored =
      client.Post("/v1/chat/completions", {{"Authorization", "Bearer sk-ignored"}},
                  ChatBody(2, false), "application/json");
  CheckErrorBody(ignored, 401, "authentication_error");
  CheckErrorBody(client.Get("/v1/models"), 401, "authentication_error");
  CHECK(fake.handler_calls == 2);
  CHECK(client.Get("/health")->status == 200);  // probes never reach the callback
  std::lock_guard<std::mutex> lock(seen_mutex);
  CHECK(seen ==
        std::vector<std::string>{"Bearer sk-one", "Bearer sk-two", "Bearer sk-ignored", ""});
}

TEST_CASE("a client disconnecting mid-stream cancels the producer", "[cpu]") {
  HttpServerOptions options;
  options.sse_keepalive = 50ms;
  FakeOpenAiServer fake(options, /*token_delay=*/5ms);
  constexpr int kTokens = 2000;  // 10 s if nobody stops it
  httplib::Client client("127.0.0.1", fake.port());
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = ChatBody(kTokens, true);
  req.set_header("Content-Type", "application/json");
  SseParser parser;
  int received = 0;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    received += static_cast<int>(parser.Feed(std::string_view(data, n)).size());
    return received < 3;  // hang up after three events
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(client.send(req, res, error));
  CHECK(error == httplib::Error::Canceled);
  CHECK(received >= 3);
  REQUIRE(Eventually([&] { return fake.streams_cancelled == 1; }, 5000ms));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 5.0);
  CHECK(fake.tokens_streamed < kTokens);
  CHECK(fake.streams_completed == 0);
  CHECK(Eventually([&] { return fake.server().in_flight() == 0; }));
}

TEST_CASE("SseStream reports cancellation to callbacks and waiters", "[cpu]") {
  HttpServerOptions options;
  options.sse_keepalive = 20ms;
  auto server = HttpServer::Create(options);
  REQUIRE(server.ok());
  std::promise<std::shared_ptr<SseStream>> started;
  std::atomic<int> callbacks{0};
  (*server)->Get("/events", [&](const HttpRequest&, HttpResponse& res) {
    std::shared_ptr<SseStream> stream = res.StartSse();
    stream->OnCancel([&] { ++callbacks; });
    stream->Send("\"hello\"");
    started.set_value(stream);
  });
  REQUIRE((*server)->Start().ok());
  std::thread client_thread([port = (*server)->port()] {
    httplib::Client client("127.0.0.1", port);
    httplib::Request req;
    req.method = "GET";
    req.path = "/events";
    req.content_receiver = [](const char*, size_t, uint64_t, uint64_t) { return false; };
    httplib::Response res;
    httplib::Error error;
    client.send(req, res, error);
  });
  std::shared_ptr<SseStream> stream = started.get_future().get();
  client_thread.join();
  // Nothing is sent after "hello": the idle keep-alive comment is what finds the dead peer.
  CHECK(stream->WaitCancelled(5000ms));
  CHECK(Eventually([&] { return callbacks == 1; }));  // callbacks run just after the flag flips
  CHECK_FALSE(stream->Send("\"late\""));
  int late = 0;
  stream->OnCancel([&] { ++late; });  // already cancelled: runs at once
  CHECK(late == 1);
}

TEST_CASE("a failing stream sends an OpenAI error event, then [DONE]", "[cpu]") {
  FakeOpenAiServer fake;
  fake.fail_after_tokens = 2;
  httplib::Client client("127.0.0.1", fake.port());
  httplib::Result res = client.Post("/v1/chat/completions", ChatBody(5, true), "application/json");
  REQUIRE(res);
  const std::vector<std::string> events = Events(res->body);
  REQUIRE(events.size() == 4);
  const json error = json::parse(events[2]);
  CHECK(error["error"]["type"] == "service_unavailable_error");
  CHECK(error["error"]["message"] == "decode daemon lost");
  CHECK(events[3] == "[DONE]");
}

TEST_CASE("/health, /ready and /metrics", "[cpu]") {
  FakeOpenAiServer fake;
  httplib::Client client("127.0.0.1", fake.port());
  httplib::Result health = client.Get("/health");
  REQUIRE(health);
  CHECK(health->status == 200);
  CHECK(json::parse(health->body)["status"] == "ok");

  CHECK(client.Get("/ready")->status == 200);
  fake.set_ready(false);
  httplib::Result not_ready = client.Get("/ready");
  CheckErrorBody(not_ready, 503, "service_unavailable_error");
  CHECK(json::parse(not_ready->body)["error"]["message"] == "no decode daemon registered");
  CHECK(not_ready->get_header_value("Retry-After") == "1");

  REQUIRE(client.Post("/v1/chat/completions", ChatBody(2, false), "application/json"));
  // The logger runs after the response is written; give it a moment.
  REQUIRE(Eventually([&] {
    return fake.registry().Render().find(
               "scd_http_requests_total{method=\"POST\",route=\"/v1/chat/completions\","
               "code=\"200\"} 1") != std::string::npos;
  }));
  client.Get("/some/unknown/path");
  REQUIRE(Eventually([&] {
    return fake.registry().Render().find("route=\"unmatched\",code=\"404\"") != std::string::npos;
  }));
  httplib::Result metrics = client.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->status == 200);
  CHECK(metrics->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0) == 0);
  CHECK(metrics->body.find("# TYPE scd_http_request_duration_seconds histogram") !=
        std::string::npos);
  CHECK(metrics->body.find("route=\"unmatched\",code=\"404\"") != std::string::npos);
  CHECK(metrics->body.find("/some/unknown/path") == std::string::npos);  // bounded labels
}

TEST_CASE("graceful shutdown drains streams and refuses new work", "[cpu]") {
  FakeOpenAiServer fake({}, /*token_delay=*/10ms);
  const int port = fake.port();
  auto stream_done = std::async(std::launch::async, [port] {
    httplib::Client client("127.0.0.1", port);
    return client.Post("/v1/chat/completions", ChatBody(30, true), "application/json");
  });
  REQUIRE(Eventually([&] { return fake.tokens_streamed > 2; }));
  std::thread stopper([&] { fake.server().Shutdown(10000ms); });
  REQUIRE(Eventually([&] { return fake.server().draining(); }));
  httplib::Client late("127.0.0.1", port);
  httplib::Result refused =
      late.Post("/v1/chat/completions", ChatBody(2, true), "application/json");
  if (refused) {  // the listener may already be closed, which is also a refusal
    CheckErrorBody(refused, 503, "service_unavailable_error");
  }
  httplib::Result streamed = stream_done.get();
  stopper.join();
  REQUIRE(streamed);
  const std::vector<std::string> events = Events(streamed->body);
  REQUIRE_FALSE(events.empty());
  CHECK(events.back() == "[DONE]");
  CHECK(events.size() == 32);
  CHECK(Eventually([&] { return fake.streams_completed == 1; }));
}

TEST_CASE("stopping cancels streams that outlive the drain deadline", "[cpu]") {
  FakeOpenAiServer fake({}, /*token_delay=*/10ms);
  const int port = fake.port();
  auto stream_done = std::async(std::launch::async, [port] {
    httplib::Client client("127.0.0.1", port);
    return client.Post("/v1/chat/completions", ChatBody(1000, true), "application/json");
  });
  REQUIRE(Eventually([&] { return fake.tokens_streamed > 2; }));
  const auto start = std::chrono::steady_clock::now();
  fake.server().Shutdown(100ms);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  stream_done.get();
  CHECK(Eventually([&] { return fake.streams_cancelled == 1; }));
}

TEST_CASE("many concurrent streams are served", "[cpu]") {
  FakeOpenAiServer fake({}, /*token_delay=*/2ms);
  constexpr int kClients = 48;
  const int port = fake.port();
  std::vector<std::future<size_t>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::async(std::launch::async, [port] {
      httplib::Client client("127.0.0.1", port);
      httplib::Result res =
          client.Post("/v1/chat/completions", ChatBody(20, true), "application/json");
      return res && res->status == 200 ? Events(res->body).size() : size_t{0};
    }));
  }
  for (auto& c : clients) CHECK(c.get() == 22);
  // A producer counts its stream just after [DONE] leaves, so the count may trail the clients.
  CHECK(Eventually([&] { return fake.streams_completed == kClients; }));
}

TEST_CASE("options are validated; port 0 picks a free port", "[cpu]") {
  HttpServerOptions bad;
  bad.num_threads = 0;
  CHECK(HttpServer::Create(bad).status().code() == absl::StatusCode::kInvalidArgument);
  bad = HttpServerOptions();
  bad.port = 70000;
  CHECK(HttpServer::Create(bad).status().code() == absl::StatusCode::kInvalidArgument);

  auto a = HttpServer::Create({});
  auto b = HttpServer::Create({});
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE((*a)->Start().ok());
  REQUIRE((*b)->Start().ok());
  CHECK((*a)->port() > 0);
  CHECK((*a)->port() != (*b)->port());
  CHECK((*a)->Start().code() == absl::StatusCode::kFailedPrecondition);
  // The port in use cannot be bound again.
  HttpServerOptions taken;
  taken.port = (*a)->port();
  auto c = HttpServer::Create(taken);
  REQUIRE(c.ok());
  CHECK((*c)->Start().code() == absl::StatusCode::kUnavailable);

  // A registry can hold one server's metrics.
  metrics::Registry registry;
  HttpServerOptions with_metrics;
  with_metrics.metrics = &registry;
  REQUIRE(HttpServer::Create(with_metrics).ok());
  CHECK(HttpServer::Create(with_metrics).status().code() == absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace scd::http
