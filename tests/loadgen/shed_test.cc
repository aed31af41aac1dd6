// Requests a server sheds for load (429): scd-loadgen keeps each one's Retry-After, counts them
// apart from the other HTTP errors, and reports how many, how soon they were refused and what
// delay they were told — on hand-made records and against a real HTTP server that refuses
// chosen arrivals (fake_llm_server.h).
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "common/tools/loadgen/report.h"
#include "common/tools/loadgen/runner.h"
#include "common/tools/loadgen/stats.h"
#include "tests/loadgen/fake_llm_server.h"

namespace scd::loadgen {
namespace {

using testing::FakeBehavior;
using testing::FakeLlmOptions;
using testing::FakeLlmServer;

RequestRecord Refused(int status, double start_s, double end_s, int retry_after_s) {
  RequestRecord r;
  r.outcome = Outcome::kHttpError;
  r.http_status = status;
  r.start_s = start_s;
  r.end_s = end_s;
  r.retry_after_s = retry_after_s;
  return r;
}

}  // namespace

TEST_CASE("shed: 429s counted apart, with their answer times and Retry-After", "[cpu]") {
  RequestRecord ok;
  ok.outcome = Outcome::kOk;
  ok.start_s = 0;
  ok.end_s = 2;
  ok.chunk_times_s = {0.5, 1.0};
  const std::vector<RequestRecord> records = {
      ok,
      Refused(429, 1.0, 1.010, 3),
      Refused(429, 1.0, 1.030, 1),
      Refused(429, 1.0, 1.020, -1),  // no Retry-After sent
      Refused(503, 1.0, 1.5, 1),     // unavailable, not shed
  };
  const RunStats s = ComputeStats(records, Slo{});
  CHECK(s.shed == 3);
  CHECK(s.http_status.at(429) == 3);
  CHECK(s.http_status.at(503) == 1);
  CHECK(s.shed_answer_s.count == 3);
  CHECK(s.shed_answer_s.p50 == Approx(0.020));
  CHECK(s.shed_answer_s.max == Approx(0.030));
  CHECK(s.retry_after_s.count == 2);
  CHECK(s.retry_after_s.min == 1);
  CHECK(s.retry_after_s.max == 3);
  CHECK(s.ok() == 1);

  CHECK(RecordJson(records[1])["retry_after_s"] == 3);
  CHECK(RecordJson(records[3])["retry_after_s"].is_null());
}

TEST_CASE("shed: a server's 429s reach the report with their Retry-After", "[cpu]") {
  FakeLlmOptions fake_options;
  fake_options.behavior = [](int arrival) {
    if (arrival % 4 == 0) return FakeBehavior::kHttp429;  // SetError: Retry-After: 1
    if (arrival % 6 == 0) return FakeBehavior::kHttp500;
    return FakeBehavior::kStream;
  };
  FakeLlmServer fake(fake_options);
  LoadOptions options;
  options.client.target = *ParseUrl(fake.url());
  options.client.timeout_s = 10;
  options.body.model = testing::kFakeModel;
  options.body.max_tokens = 3;
  options.concurrency = 1;  // one at a time: arrival n is request n - 1
  options.requests = 24;
  absl::StatusOr<std::vector<Prompt>> prompts = SyntheticPrompts(4, 8, 1);
  REQUIRE(prompts.ok());
  absl::StatusOr<RunResult> result = RunLoad(options, *prompts);
  REQUIRE(result.ok());
  REQUIRE(result->records.size() == 24);

  for (const RequestRecord& r : result->records) {
    const int arrival = static_cast<int>(r.index) + 1;
    INFO("arrival " << arrival << ": " << r.error);
    if (arrival % 4 == 0) {
      CHECK(r.http_status == 429);
      CHECK(r.retry_after_s == 1);
    } else {
      CHECK(r.retry_after_s == -1);  // a 500 sends none, a 200 is not read for one
    }
  }
  ReportContext context;
  context.url = fake.url();
  const nlohmann::json report = BuildReport(options, *result, context);
  const nlohmann::json& shed = report["shed"];
  CHECK(shed["requests"] == 6);
  CHECK(shed["fraction"].get<double>() == Approx(0.25));
  CHECK(shed["answer_ms"]["count"] == 6);
  CHECK(shed["retry_after_s"]["p50"].get<double>() == Approx(1));
  CHECK(report["requests"]["http_status"]["429"] == 6);
  CHECK(report["requests"]["http_status"]["500"] == 2);  // arrivals 6 and 18
  CHECK(SummaryText(report).find("shed (429) 6 = 25.0% of requests") != std::string::npos);
}

}  // namespace scd::loadgen
