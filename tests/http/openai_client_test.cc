// The official `openai` npm client (pinned in tests/http/openai_client/package.json) against
// the fake server: a streaming chat completion with include_usage must come back whole, and a
// wrong API key must surface as the client's APIError with status 401. Needs `node` and the
// client installed by `npm ci` in tests/http/openai_client (scripts/setup does it); skips
// with a message when either is missing.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/http/fake_openai_server.h"

namespace scd::http {
namespace {

namespace fs = std::filesystem;

// The client folder beside this source file (CMake compiles sources by absolute path).
fs::path ClientDir() { return fs::path(__FILE__).parent_path() / "openai_client"; }

int Run(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output->append(buffer, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Empty when the client can run; otherwise why not.
std::string WhyNotRunnable() {
  std::string ignored;
  if (Run("command -v node", &ignored) != 0) return "node is not installed";
  if (!fs::exists(ClientDir() / "node_modules" / "openai" / "package.json")) {
    return "the openai npm client is not installed (run `npm ci` in " + ClientDir().string() + ")";
  }
  return "";
}

std::string RunClient(int port, const std::string& api_key, int max_tokens, int* rc) {
  const std::string command = "cd '" + ClientDir().string() +
                              "' && SCD_OPENAI_BASE_URL=http://127.0.0.1:" + std::to_string(port) +
                              "/v1 SCD_OPENAI_API_KEY='" + api_key +
                              "' SCD_OPENAI_MAX_TOKENS=" + std::to_string(max_tokens) +
                              " timeout 60 node stream_chat.mjs";
  std::string output;
  *rc = Run(command, &output);
  return output;
}

TEST_CASE("the official openai npm client streams a chat completion", "[slow]") {
  if (const std::string why = WhyNotRunnable(); !why.empty()) {
    WARN("SKIPPED: " << why);
    return;
  }
  HttpServerOptions options;
  options.api_key = "sk-scd-test";
  // Tokens 20 ms apart with 5 ms keep-alives: the client must skip SSE comment lines too.
  options.sse_keepalive = std::chrono::milliseconds(5);
  fake::FakeOpenAiServer fake(options, std::chrono::milliseconds(20));
  constexpr int kTokens = 12;

  int rc = 0;
  const std::string output = RunClient(fake.port(), "sk-scd-test", kTokens, &rc);
  INFO("node output:\n" << output);
  CHECK(rc == 0);
  CHECK(output ==
        std::string("MODEL ") + fake::kModel + " model\nMISSING 404\n" + fake::FakeText(kTokens) +
            "\nUSAGE " + std::to_string(kTokens) + " " +
            std::to_string(std::string("You tell short stories.Once upon a time").size()) +
            "\nFINISH length\n");

  const std::string rejected = RunClient(fake.port(), "sk-wrong", kTokens, &rc);
  INFO("node output:\n" << rejected);
  CHECK(rc == 2);
  CHECK(rejected.rfind("ERROR 401 authentication_error", 0) == 0);
}

}  // namespace
}  // namespace scd::http
