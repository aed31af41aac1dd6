// The shadow oracle with real daemons: a decode daemon with quality.shadow_rate 1 compares
// every request it served from a payload with its own prefill, and its /metrics shows the
// samples, their KL, agreement and per-layer K/V error beside the calibration's figures, in an
// exposition promtool accepts.
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "common/scd/artifact.h"
#include "tests/daemons/daemon_harness.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

using nlohmann::json;
using std::chrono::seconds;

// The metric names an exposition declares (# TYPE), with a histogram's _bucket, _sum and
// _count series.
std::set<std::string> Declared(const std::string& exposition) {
  std::set<std::string> names;
  std::istringstream in(exposition);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string hash, type, name, kind;
    if (!(words >> hash >> type >> name >> kind) || hash != "#" || type != "TYPE") continue;
    names.insert(name);
    if (kind == "histogram") {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) names.insert(name + suffix);
    }
  }
  return names;
}

// The scd_ metrics and scd: recorded series a PromQL expression names.
std::set<std::string> NamesIn(const std::string& expr) {
  std::set<std::string> names;
  static const std::regex name("scd[_:][a-zA-Z0-9_:]*");
  for (auto it = std::sregex_iterator(expr.begin(), expr.end(), name); it != std::sregex_iterator();
       ++it) {
    names.insert(it->str());
  }
  return names;
}

// Every name the dashboard's and the rules' expressions use is a series /metrics declares, or
// one the rules record.
void CheckDashboardNames(const std::string& prefill_metrics, const std::string& decode_metrics) {
  std::set<std::string> exported = Declared(prefill_metrics);
  for (const std::string& n : Declared(decode_metrics)) exported.insert(n);
  const std::string rules = ReadFileOrFail(SourceFile("deploy/prometheus/scd-rules.yml"));
  std::set<std::string> recorded;
  static const std::regex record("record: (scd:[a-zA-Z0-9_:]+)");
  for (auto it = std::sregex_iterator(rules.begin(), rules.end(), record);
       it != std::sregex_iterator(); ++it) {
    recorded.insert((*it)[1].str());
  }
  CHECK(recorded.size() >= 5);
  std::set<std::string> used = NamesIn(rules);
  const json dashboard = json::parse(ReadFileOrFail(SourceFile("deploy/grafana/scd-serve.json")));
  int exprs = 0;
  for (const json& panel : dashboard.at("panels")) {
    for (const json& target : panel.at("targets")) {
      ++exprs;
      for (const std::string& n : NamesIn(target.at("expr").get<std::string>())) used.insert(n);
    }
  }
  CHECK(exprs >= 9);
  for (const std::string& n : used) {
    INFO(n);
    CHECK((exported.count(n) > 0 || recorded.count(n) > 0));
  }
}

}  // namespace

TEST_CASE("A decode daemon's shadow oracle exports what scd costs, beside calibration",
          "[daemons]") {
  const std::string dir = TempDir();
  PrefillHandle prefill = StartPrefill(dir, PrefillConfig("scd"));
  json dc = DecodeConfig(prefill.grpc_address);
  // Every request sampled and none dropped for the budget: the test counts them all.
  dc["quality"] = {{"shadow_rate", 1}, {"shadow_tokens", 4}, {"shadow_max_tokens_per_s", 1e6}};
  DecodeHandle decode = StartDecode(dir, dc);
  REQUIRE(WaitForReady(prefill.http_port, 200, seconds(10)));
  const std::string story =
      "Mary went to the garden. John went to the office. Sandra went to the kitchen. ";
  for (const char* question : {"Where is Mary?", "Where is John?", "Where is Sandra?"}) {
    json body = {
        {"model", kModel}, {"prompt", story + question}, {"max_tokens", 4}, {"temperature", 0}};
    HttpResult r = HttpPost(prefill.http_port, "/v1/completions", body.dump());
    INFO(r.body);
    REQUIRE(r.status == 200);
  }
  // The samples are compared after their requests, while the daemon is idle.
  const std::string samples =
      "scd_shadow_samples_total{specialist=\"stories260K-babi-qa\",mode=\"scd\",rung=\"0\"}";
  std::string metrics;
  const auto give_up = std::chrono::steady_clock::now() + seconds(30 * kSanitizerWaitFactor);
  do {
    metrics = HttpGet(decode.http_port, "/metrics").body;
  } while (MetricValue(metrics, samples).value_or(0) < 3 &&
           std::chrono::steady_clock::now() < give_up);
  INFO(metrics);
  REQUIRE(MetricValue(metrics, samples) == 3);
  const std::string labels = "specialist=\"stories260K-babi-qa\",mode=\"scd\",rung=\"0\"";
  CHECK(MetricValue(metrics, "scd_shadow_kl_count{" + labels + ",tokens=\"first\"}") == 3);
  CHECK(MetricValue(metrics, "scd_shadow_kl_count{" + labels + ",tokens=\"generated\"}") == 3);
  const double kl_sum =
      MetricValue(metrics, "scd_shadow_kl_sum{" + labels + ",tokens=\"generated\"}").value_or(-1);
  CHECK(kl_sum > 0);  // scd is lossy
  CHECK(kl_sum < 3);  // but close: calibration reads about 0.02 a position
  CHECK(MetricValue(metrics, "scd_shadow_top1_agreement_count{" + labels + ",tokens=\"first\"}") ==
        3);
  CHECK(MetricValue(metrics,
                    "scd_shadow_kv_rel_error_count{" + labels + ",layer=\"0\",kv=\"k\"}") == 3);
  // The calibration's record, as the artifact has it.
  auto artifact = ScdArtifact::Load(ArtifactPath());
  REQUIRE(artifact.ok());
  int recorded = 0;
  for (const QualityRecord& q : artifact->quality) {
    if (q.mode != "scd" || q.rung != 0) continue;
    ++recorded;
    CHECK(MetricValue(metrics, "scd_calibration_kl{" + labels + "}") == Approx(q.kl));
    CHECK(MetricValue(metrics, "scd_calibration_top1_agreement{" + labels + "}") == Approx(q.top1));
  }
  CHECK(recorded == 1);
  CHECK_FALSE(MetricValue(metrics,
                          "scd_shadow_dropped_total{specialist=\"stories260K-babi-qa\","
                          "reason=\"error\"}")
                  .has_value());
  const std::string path = dir + "/shadow_metrics.txt";
  std::ofstream(path) << metrics;
  std::string output;
  const int rc = RunCommand("promtool check metrics < '" + path + "'", &output);
  INFO(output);
  CHECK(rc == 0);
  // The Grafana dashboard and the alert rules name only what the daemons export.
  CheckDashboardNames(HttpGet(prefill.http_port, "/metrics").body, metrics);
}

}  // namespace scd::testing
