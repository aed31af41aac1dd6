// The scd-loadgen command line as scripts and checks call it: the documented interface
// (--url --model --rate|--concurrency --requests --prompts --json) against a fake server on
// loopback, its exit codes, and the files it writes. The binary is found beside this test
// binary (build/tests/test_loadgen -> build/bin/scd-loadgen); when it has not been built the
// case says so and passes vacuously.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "catch2/catch.hpp"
#include "common/plot/png_io.h"
#include "nlohmann/json.hpp"
#include "tests/loadgen/fake_llm_server.h"
#include "tests/test_support.h"

namespace scd::loadgen {
namespace {

std::string LoadgenBinary() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  std::string path(self, static_cast<size_t>(n));
  path = path.substr(0, path.rfind('/'));  // build/tests
  path = path.substr(0, path.rfind('/')) + "/bin/scd-loadgen";
  return ::access(path.c_str(), X_OK) == 0 ? path : "";
}

// Runs a shell command; returns its exit status (-1 when it did not exit normally).
int Run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_CASE("scd-loadgen: the documented command line writes JSON, PNG and records", "[cpu]") {
  const std::string binary = LoadgenBinary();
  if (binary.empty()) {
    WARN("scd-loadgen is not built beside this test binary; skipping the CLI check");
    return;
  }
  testing::FakeLlmOptions fake_options;
  fake_options.first_token_delay = std::chrono::milliseconds(15);
  fake_options.behavior = [](int arrival) {
    return arrival == 4 ? testing::FakeBehavior::kHttp429 : testing::FakeBehavior::kStream;
  };
  testing::FakeLlmServer fake(fake_options);
  const std::string dir = scd::testing::TempDir();
  std::ofstream(dir + "/prompts.jsonl")
      << "{\"prompt\": \"Say hi\", \"max_tokens\": 3}\n"
      << "{\"context\": \"Shared document.\", \"questions\": [\"Q1?\", \"Q2?\"]}\n";
  const std::string json_path = dir + "/out.json";
  const std::string command = absl::StrCat(
      binary, " --url ", fake.url(), " --model ", testing::kFakeModel,
      " --rate 40 --requests 12 --prompts ", dir, "/prompts.jsonl --json ", json_path,
      " --records ", dir, "/records.jsonl --slo-ttft-ms 1000 --max-tokens 4 --seed 3 --quiet",
      " > ", dir, "/stdout.txt 2> ", dir, "/stderr.txt");
  REQUIRE(Run(command) == 0);
  CHECK(fake.arrivals() == 12);

  const nlohmann::json report = nlohmann::json::parse(scd::testing::ReadFileOrFail(json_path));
  CHECK(report["tool"] == "scd-loadgen");
  CHECK(report["requests"]["issued"] == 12);
  CHECK(report["requests"]["ok"] == 11);
  CHECK(report["requests"]["http_status"]["429"] == 1);
  CHECK(report["requests"]["lost"] == 0);
  for (const char* key : {"ttft_ms", "itl_ms", "e2e_ms"}) {
    INFO(key);
    CHECK(report[key]["p50"].is_number());
    CHECK(report[key]["p90"].is_number());
    CHECK(report[key]["p99"].is_number());
  }
  CHECK(report["ttft_ms"]["p50"].get<double>() >= 15);
  CHECK(report["throughput"]["requests_per_s"].get<double>() > 0);
  CHECK(report["throughput"]["output_tokens_per_s"].get<double>() > 0);
  CHECK(report["goodput"]["requests"] == 11);
  CHECK(report["config"]["num_prompts"] == 3);
  CHECK(report["config"]["rate"] == 40.0);
  // The default PNG sits beside the JSON.
  absl::StatusOr<plot::RgbImage> png = plot::ReadPng(dir + "/out_ttft.png");
  REQUIRE(png.ok());
  CHECK(png->width > 0);
  const std::string records = scd::testing::ReadFileOrFail(dir + "/records.jsonl");
  CHECK(std::count(records.begin(), records.end(), '\n') == 12);
  const std::string stdout_text = scd::testing::ReadFileOrFail(dir + "/stdout.txt");
  CHECK(stdout_text.find("12 requests") != std::string::npos);
  CHECK(scd::testing::ReadFileOrFail(dir + "/stderr.txt").empty());  // --quiet

  // A bad command line exits 2 and a missing prompt file 1; neither sends a request.
  CHECK(Run(absl::StrCat(binary, " --url ", fake.url(), " --model m --requests 3 ",
                         "--synthetic-prompt-tokens 5 2>/dev/null")) == 2);
  CHECK(Run(absl::StrCat(binary, " --url ", fake.url(), " --model m --rate 5 --requests 3 ",
                         "--prompts ", dir, "/missing.jsonl 2>/dev/null")) == 1);
  CHECK(fake.arrivals() == 12);
}

}  // namespace
}  // namespace scd::loadgen
