// mode: auto with real daemons: over a slow link it sends no large payload, over an unlimited
// link with a floor raw meets it takes raw's cached codes; the chosen mode shows in the
// response (the `scd` object, the gRPC timings) and in /metrics; a request may pin a mode or
// a rung, and a bad pin is refused with 400 naming the field; an artifact without a quality
// record cannot serve auto.
#include <catch2/catch.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/scd/artifact.h"
#include "tests/daemons/daemon_harness.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

using nlohmann::json;
using std::chrono::seconds;

// A context of about 470 tokens and a question: raw's payload, about 300 KB, is larger than the
// emulated link's burst (256 KB, common/transport/bandwidth_limiter.h).
std::string Prompt() {
  std::string text;
  for (int i = 0; i < 18; ++i) text += "Mary went to the garden. John went to the office. ";
  return text + "Where is Mary?";
}

std::string Body(const json& scd = nullptr) {
  json b = {{"model", kModel}, {"prompt", Prompt()}, {"max_tokens", 2}, {"temperature", 0}};
  if (!scd.is_null()) b["scd"] = scd;
  return b.dump();
}

json Post(int port, const std::string& body, int want_status = 200) {
  HttpResult r = HttpPost(port, "/v1/completions", body);
  INFO(r.body);
  REQUIRE(r.status == want_status);
  return json::parse(r.body);
}

// The artifact's recorded bytes per token of `mode` (rung 0).
double BytesPerToken(const ScdArtifact& a, const std::string& mode) {
  for (const QualityRecord& q : a.quality) {
    if (q.mode == mode && q.rung == 0) return q.bytes_per_token;
  }
  FAIL("no quality record of " << mode);
  return 0;
}

struct Pair {
  PrefillHandle prefill;
  DecodeHandle decode;
};

Pair StartAuto(const std::string& dir, double gbps, double floor) {
  json pc = PrefillConfig("auto");
  pc["specialists"][0]["quality_floor"] = floor;
  pc["data_plane"] = {{"bandwidth_gbps", gbps}, {"inline_max_bytes", 0}};
  Pair p{StartPrefill(dir, pc), {}};
  p.decode = StartDecode(dir, DecodeConfig(p.prefill.grpc_address));
  REQUIRE(WaitForReady(p.prefill.http_port, 200, seconds(10)));
  return p;
}

TEST_CASE("mode auto follows the link: no large payload on a slow one, cached raw on a fast one",
          "[daemons]") {
  auto artifact = ScdArtifact::Load(ArtifactPath());
  REQUIRE(artifact.ok());
  REQUIRE_FALSE(artifact->quality.empty());
  const std::string dir = TempDir();
  for (double gbps : {0.001, 0.0}) {  // 125 KB/s, then unlimited
    INFO("bandwidth_gbps " << gbps);
    Pair p = StartAuto(dir, gbps, 0.9);  // raw keeps 0.928 of the oracle's top-1: admissible
    // Fill the prefix cache with raw's and scd's codes of the context (pinned modes), so that
    // auto weighs them warm, as a second question about the same context would.
    CHECK(Post(p.prefill.http_port, Body({{"mode", "raw"}}))["scd"]["mode"] == "raw");
    const json pinned = Post(p.prefill.http_port, Body({{"mode", "scd"}, {"rung", 5}}));
    CHECK(pinned["scd"]["mode"] == "scd");
    CHECK(pinned["scd"]["rung"] == 5);
    CHECK(pinned["scd"]["rung_name"] == "scd r12/18 k2");
    CHECK(Post(p.prefill.http_port, Body({{"mode", "scd"}}))["scd"]["rung"] == 0);
    const json chosen = Post(p.prefill.http_port, Body())["scd"];
    INFO(chosen.dump());
    REQUIRE(chosen.contains("predicted_ttft_ms"));
    CHECK(chosen["predicted_ttft_ms"].get<double>() > 0);
    const std::string mode = chosen["mode"];
    if (gbps > 0) {
      // Raw's 300 KB take seconds at 125 KB/s: the choice is a payload no larger than scd's.
      CHECK(mode != "raw");
      CHECK(mode != "quant8");
      CHECK(mode != "recompute");
    } else {
      CHECK(mode == "raw");  // warm, the least rebuild work, and the link costs nothing
    }
    const std::string metrics = HttpGet(p.prefill.http_port, "/metrics").body;
    const std::string series =
        absl::StrCat("scd_mode_choices_total{specialist=\"", kModel, "\",mode=\"", mode,
                     "\",rung=\"", chosen["rung"].get<int>(), "\"}");
    INFO(series);
    CHECK(MetricValue(metrics, series).value_or(0) >= 1);
    CHECK(MetricValue(metrics, absl::StrCat("scd_mode_ttft_prediction_ratio_count{specialist=\"",
                                            kModel, "\"}"))
              .value_or(0) >= 1);
  }
  CHECK(BytesPerToken(*artifact, "raw") > 3 * BytesPerToken(*artifact, "scd"));
}

TEST_CASE("A bad pin is refused naming its field; auto needs a quality record", "[daemons]") {
  const std::string dir = TempDir();
  {
    Pair p = StartAuto(dir, 0.0, 0.95);
    const json bogus = Post(p.prefill.http_port, Body({{"mode", "bogus"}}), 400);
    CHECK(bogus["error"]["param"] == "scd.mode");
    const json rung = Post(p.prefill.http_port, Body({{"mode", "raw"}, {"rung", 3}}), 400);
    CHECK(rung["error"]["message"].get<std::string>().find("rung 3") != std::string::npos);
    const json far = Post(p.prefill.http_port, Body({{"mode", "scd"}, {"rung", 200}}), 400);
    CHECK(far["error"]["message"].get<std::string>().find("rung 200") != std::string::npos);
    const json unknown = Post(p.prefill.http_port, Body({{"speed", 1}}), 400);
    CHECK(unknown["error"]["param"] == "scd.speed");
    const json floor = Post(p.prefill.http_port, Body({{"quality_floor", 1.5}}), 400);
    CHECK(floor["error"]["param"] == "scd.quality_floor");
    // A floor above every mode's agreement leaves the oracle.
    CHECK(Post(p.prefill.http_port, Body({{"quality_floor", 1.0}}))["scd"]["mode"] == "oracle");
  }
  // An artifact without its quality record: the daemon refuses to start, saying how to fix it.
  auto artifact = ScdArtifact::Load(ArtifactPath());
  REQUIRE(artifact.ok());
  artifact->quality.clear();
  const std::string old = dir + "/old.safetensors";
  REQUIRE(artifact->Save(old).ok());
  json pc = PrefillConfig("auto");
  pc["specialists"][0]["artifact"] = old;
  std::string log;
  CHECK(RunToExit("scd-prefill", dir, pc, "old-artifact", &log) == 1);
  INFO(log);
  CHECK(log.find("quality record") != std::string::npos);
  CHECK(log.find("--rescore") != std::string::npos);
}

}  // namespace
}  // namespace scd::testing
