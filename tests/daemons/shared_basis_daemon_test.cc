// Both bundled specialists served on one shared basis (configs/calibration's shared file): a
// context prefilled for one is a prefix-cache hit for the other; a fan-out (HTTP, streamed
// HTTP and gRPC) answers with each specialist, each answer the one a single request to it
// gives (greedy), from one prefill and one encode; a decode daemon refuses, with a clear
// error, a payload encoded on another basis, and keeps serving.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc/cluster_token.h"
#include "common/rpc/credentials.h"
#include "common/scd/codec.h"
#include "common/scd/shared_artifact.h"
#include "proto/scd.grpc.pb.h"
#include "tests/daemons/daemon_harness.h"
#include "tests/scd/scd_fixtures.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

using nlohmann::json;
using std::chrono::seconds;

const char kBabi[] = "stories260K-babi-qa";
const char kWiki[] = "stories260K-wiki";

std::string SharedPath() {
  return SourceFile("configs/calibration/stories260K.shared.scd.safetensors");
}

std::string Context(const std::string& who) {
  std::string text;
  for (int i = 1; i <= 6; ++i) {
    text += absl::StrCat(i, " ", who, " went to the kitchen. Sandra moved to the office. ");
  }
  return text + "Where is " + who + "?";
}

json Body(const std::string& model, const std::string& prompt, const json& scd = nullptr) {
  json b = {{"model", model}, {"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}};
  if (!scd.is_null()) b["scd"] = scd;
  return b;
}

json Post(int port, const json& body) {
  HttpResult r = HttpPost(port, "/v1/completions", body.dump());
  INFO(r.body);
  REQUIRE(r.status == 200);
  return json::parse(r.body);
}

std::string TextOf(int port, const std::string& model, const std::string& prompt) {
  return Post(port, Body(model, prompt))["choices"][0]["text"].get<std::string>();
}

json DecodeFor(const std::string& control_plane, const std::string& model) {
  json c = DecodeConfig(control_plane);
  c["model"] = {{"name", model}, {"path", ModelDir(model)}, {"artifact", SharedPath()}};
  return c;
}

struct Cluster {
  PrefillHandle prefill;
  DecodeHandle babi, wiki;
};

Cluster Start(const std::string& dir) {
  json pc = PrefillConfig("scd");
  pc["specialists"] = json::array();
  for (const char* model : {kBabi, kWiki}) {
    pc["specialists"].push_back(
        {{"name", model}, {"artifact", SharedPath()}, {"mode", "scd"}, {"chat_template", "plain"}});
  }
  Cluster c;
  c.prefill = StartPrefill(dir, pc);
  c.babi = StartDecode(dir, DecodeFor(c.prefill.grpc_address, kBabi), "decode-babi");
  c.wiki = StartDecode(dir, DecodeFor(c.prefill.grpc_address, kWiki), "decode-wiki");
  REQUIRE(WaitForReady(c.prefill.http_port, 200, seconds(10)));
  for (const char* model : {kBabi, kWiki}) {  // the gauge the daemon refreshes every second
    const std::string series = absl::StrCat("scd_decode_instances{model=\"", model, "\"}");
    const auto give_up = std::chrono::steady_clock::now() + seconds(10);
    while (ScrapeMetric(c.prefill.http_port, series).value_or(0) < 1 &&
           std::chrono::steady_clock::now() < give_up) {
    }
    REQUIRE(ScrapeMetric(c.prefill.http_port, series).value_or(0) == 1);
  }
  return c;
}

double Encodes(int port) {
  double n = 0;
  for (const char* model : {kBabi, kWiki}) {
    n += ScrapeMetric(port,
                      absl::StrCat("scd_encode_seconds_count{model=\"", model, "\",mode=\"scd\"}"))
             .value_or(0);
  }
  return n;
}

TEST_CASE("One basis, two specialists: a shared cache entry and fan-out from one encode",
          "[daemons]") {
  const std::string dir = TempDir();
  Cluster c = Start(dir);
  const int port = c.prefill.http_port;

  // Separate requests: the second specialist's is a hit on the first's entry.
  const std::string first = Context("Mary");
  const std::string babi_alone = TextOf(port, kBabi, first);
  const std::string wiki_alone = TextOf(port, kWiki, first);
  CHECK(ScrapeMetric(port, absl::StrCat("scd_prefix_cache_misses_total{model=\"", kBabi, "\"}")) ==
        1);
  CHECK(ScrapeMetric(port, absl::StrCat("scd_prefix_cache_hits_total{model=\"", kWiki, "\"}")) ==
        1);
  CHECK(Encodes(port) == 1);

  // A fan-out over a new context: one encode, one answer each, as a single request gives it.
  const std::string second = Context("John");
  const json out = Post(port, Body(kWiki, second, {{"fanout", {kWiki, kBabi}}}));
  CHECK(Encodes(port) == 2);
  REQUIRE(out["choices"].size() == 2);
  CHECK(out["model"] == kWiki);
  CHECK(out["choices"][0]["index"] == 0);
  CHECK(out["choices"][0]["model"] == kWiki);
  CHECK(out["choices"][1]["index"] == 1);
  CHECK(out["choices"][1]["model"] == kBabi);
  CHECK(out["choices"][1]["scd"]["mode"] == "scd");
  const std::string wiki_fan = out["choices"][0]["text"];
  const std::string babi_fan = out["choices"][1]["text"];
  CHECK(wiki_fan == TextOf(port, kWiki, second));
  CHECK(babi_fan == TextOf(port, kBabi, second));
  CHECK(out["usage"]["completion_tokens"] == 12);

  // Streamed: each chunk names its choice and model.
  SseResult sse = HttpStream(port, "/v1/completions", [&] {
    json b = Body(kBabi, first, {{"fanout", {kBabi, kWiki}}});
    b["stream"] = true;
    return b.dump();
  }());
  REQUIRE(sse.done());
  std::string texts[2];
  int finished = 0;
  for (const std::string& e : sse.events) {
    if (e == "[DONE]") continue;
    const json chunk = json::parse(e);
    for (const json& ch : chunk["choices"]) {
      const int i = ch["index"];
      REQUIRE((i == 0 || i == 1));
      CHECK(ch["model"] == (i == 0 ? kBabi : kWiki));
      texts[i] += ch["text"].get<std::string>();
      if (!ch["finish_reason"].is_null()) ++finished;
    }
  }
  CHECK(finished == 2);
  CHECK(texts[0] == babi_alone);
  CHECK(texts[1] == wiki_alone);

  // gRPC: a repeated field, events stamped with their choice.
  scd::v1::GenerateRequest g;
  g.set_model(kBabi);
  g.set_prompt(second);
  g.set_max_tokens(6);
  g.mutable_sampling()->set_temperature(0);
  g.add_fanout(kBabi);
  g.add_fanout(kWiki);
  const GrpcOutcome grpc_out = GrpcGenerate(c.prefill.grpc_address, g);
  REQUIRE(grpc_out.status.ok());
  std::string grpc_texts[2];
  int done = 0;
  for (const scd::v1::GenerateEvent& e : grpc_out.events) {
    REQUIRE((e.choice() == 0 || e.choice() == 1));
    CHECK(e.model() == (e.choice() == 0 ? kBabi : kWiki));
    if (e.has_delta()) grpc_texts[e.choice()] += e.delta().text();
    if (e.has_done()) ++done;
    CHECK_FALSE(e.has_error());
  }
  CHECK(done == 2);
  CHECK(grpc_texts[0] == babi_fan);
  CHECK(grpc_texts[1] == wiki_fan);
  g.clear_fanout();
  g.add_fanout(kWiki);  // the request's model is not listed
  const GrpcOutcome unlisted_grpc = GrpcGenerate(c.prefill.grpc_address, g);
  CHECK(unlisted_grpc.status.error_code() == grpc::INVALID_ARGUMENT);
  CHECK_THAT(unlisted_grpc.status.error_message(), Catch::Contains("fanout"));

  // Refusals, before any work: the body's model must be listed; unknown specialists.
  HttpResult unlisted =
      HttpPost(port, "/v1/completions", Body(kBabi, first, {{"fanout", {kWiki}}}).dump());
  CHECK(unlisted.status == 400);
  CHECK(ErrorOf(unlisted.body)["param"] == "scd.fanout");
  HttpResult unknown =
      HttpPost(port, "/v1/completions", Body(kBabi, first, {{"fanout", {kBabi, "nobody"}}}).dump());
  CHECK(unknown.status == 404);
  HttpResult twice =
      HttpPost(port, "/v1/completions", Body(kBabi, first, {{"fanout", {kBabi, kBabi}}}).dump());
  CHECK(twice.status == 400);
}

// Decode.Generate on `address` with one inline payload; the call's status.
grpc::Status DecodeInline(const std::string& address, const std::string& model,
                          const std::vector<uint8_t>& payload, int32_t suffix_token) {
  rpc::ChannelOptions options;
  options.call_metadata[rpc::kClusterTokenMetadata] = "test-token";
  scd::v1::DecodeRequest request;
  request.set_request_id("shared-basis-test");
  request.set_model(model);
  request.set_max_tokens(2);
  request.set_inline_payload(payload.data(), payload.size());
  request.add_suffix_token_ids(suffix_token);
  return CallDecode(address, options, request);
}

TEST_CASE("A decode daemon refuses a payload encoded on another basis", "[daemons]") {
  const std::string dir = TempDir();
  Cluster c = Start(dir);
  const std::string rpc =
      c.wiki.process->WaitForEvent("decode_started", seconds(1)).value()["rpc_address"];
  auto base = Load("models/stories260K");
  auto wiki = Load("models/stories260K-wiki");
  auto shared = SharedArtifact::Load(SharedPath());
  REQUIRE(shared.ok());
  ScdArtifact section = shared->ForConsumer(wiki->digest()).value();
  auto producer = Cpu(base);
  const std::vector<int32_t> context = SampledPassages(*producer, 1, 40, 5)[0];
  PrefillResult states;
  auto seq = producer->NewSequence(64).value();
  REQUIRE(producer->Prefill(*seq, context, ProducerPrefillOptions(CodecMode::kScd), &states).ok());
  auto encode = [&](const ScdArtifact& a) {
    auto codec =
        ProducerCodec::Create(base, wiki->digest(), std::make_shared<const ScdArtifact>(a)).value();
    return SerializePayload(codec->Encode(CodecMode::kScd, context, states).value());
  };
  // On its own basis: served.
  CHECK(DecodeInline(rpc, kWiki, encode(section), 1).ok());
  // The same codes stamped with another basis: refused, naming both.
  ScdArtifact elsewhere = section;
  elsewhere.basis_id = std::string(64, 'a');
  const grpc::Status refused = DecodeInline(rpc, kWiki, encode(elsewhere), 1);
  CHECK(refused.error_code() == grpc::FAILED_PRECONDITION);
  CHECK_THAT(refused.error_message(), Catch::Contains("another producer or shared basis"));
  CHECK_THAT(refused.error_message(), Catch::Contains(section.basis_id.substr(0, 12)));
  // And it keeps serving.
  CHECK_FALSE(TextOf(c.prefill.http_port, kWiki, Context("Mary")).empty());
}

}  // namespace
}  // namespace scd::testing
