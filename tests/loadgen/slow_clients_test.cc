// SlowClients against a real HttpServer on loopback: it holds the connections it was asked
// for, spread over source addresses under the server's per-address cap, and reopens those the
// server's header deadline closes; it refuses targets off loopback and unbounded counts.
#include "common/tools/loadgen/slow_clients.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "common/http/http_server.h"

namespace scd::loadgen {
namespace {

using namespace std::chrono_literals;

TEST_CASE("SlowClients holds its connections and reopens what the server closes", "[cpu]") {
  http::HttpServerOptions options;
  options.header_timeout_seconds = 1;
  options.max_connections_per_client = 50;
  auto server = http::HttpServer::Create(options);
  REQUIRE(server.ok());
  REQUIRE((*server)->Start().ok());
  SlowClientOptions so;
  so.port = (*server)->port();
  so.connections = 200;
  so.per_source = 40;  // five source addresses, each under the server's cap of 50
  so.trickle = 200ms;
  so.ramp = 0ms;  // all at once
  auto clients = SlowClients::Start(so);
  REQUIRE(clients.ok());
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while ((*clients)->held() + (*clients)->reopened() < 200 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);  // polling a counter the client thread raises
  }
  CHECK((*clients)->held() + (*clients)->reopened() >= 200);
  CHECK((*clients)->failed() == 0);
  // The header deadline (1 s) closes them all, with a 408 each; they come back.
  while ((*clients)->reopened() < 200 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);  // polling a counter the client thread raises
  }
  CHECK((*clients)->reopened() >= 200);
  CHECK((*clients)->answered() >= 1);
  CHECK((*clients)->failed() == 0);
  CHECK((*clients)->held() >= 190);
}

TEST_CASE("SlowClients is bounded to loopback and 20000 connections", "[cpu]") {
  SlowClientOptions so;
  so.port = 80;
  so.host = "10.0.0.1";
  CHECK(SlowClients::Start(so).status().code() == absl::StatusCode::kInvalidArgument);
  so.host = "127.0.0.1";
  so.connections = 20001;
  CHECK(SlowClients::Start(so).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace scd::loadgen
