// Link faults between the prefill daemon and its decode daemons, each daemon in its own
// network namespace (netns_lab.h):
//   * the link pulled mid-transfer (a rate-limited link keeps the payload on the wire): the
//     request completes on the other replica within its deadline;
//   * the link pulled mid-stream: the stream ends with a clear error within seconds, the
//     decode daemon frees the slot, and both sides recover when the link returns (the decode
//     daemon re-registers by itself);
//   * latency (TcpRelay, since this kernel has no netem) plus random loss (nftables): every
//     transfer completes and every answer matches the undisturbed run;
//   * a byte flipped on the wire, in a data-plane frame or in an inline payload inside the
//     RPC: a clear refusal by checksum, never a silent wrong answer, and the daemon keeps
//     serving.
// Without permission to create namespaces every case skips with a message.
#include <signal.h>

#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "tests/netfaults/netfaults_support.h"
#include "tests/netfaults/tcp_relay.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

HttpResult Complete(const std::string& prompt, int max_tokens = 8) {
  return HttpPost(kPrefillHttpPort, "/v1/completions", CompletionBody(prompt, max_tokens, false),
                  {}, seconds(60));
}

// A long stream: sampled (greedy may stop at an end token early), 40 ms per token.
std::string LongStreamBody() {
  return json({{"model", "stories260K-babi-qa"},
               {"prompt", "Once upon a time"},
               {"max_tokens", 300},
               {"temperature", 0.8},
               {"seed", 3},
               {"stream", true}})
      .dump();
}

// Whether the prefill daemon's log has a decode_retry away from decode-1 for `reason`.
bool RetriedOffDecodeOne(DaemonProcess& prefill, const std::string& reason) {
  bool retried = false;
  for (const json& j : prefill.LogLines()) {
    if (j.value("event", "") == "decode_retry" && j.value("failed_instance", "") == "decode-1" &&
        j.value("message", "").find(reason) != std::string::npos) {
      retried = true;
    }
  }
  return retried;
}

// Decode-1 (its link down, at 64 kbit/s) notices it lost the control plane; when the link
// returns at full rate it registers again.
void CheckRejoinsWhenLinkReturns(NetnsLab& lab, DaemonProcess& d1) {
  const std::optional<double> lost =
      WaitFor([&] { return DecodeReadyStatus(lab, 1) == 503; }, seconds(10));
  CHECK(lost.has_value());
  REQUIRE(lab.SetRate(1, "").empty());
  REQUIRE(lab.SetLink(1, true).empty());
  const std::optional<double> back =
      WaitFor([&] { return DecodeReadyStatus(lab, 1) == 200; }, seconds(20));
  REQUIRE(back.has_value());
  CHECK(*back < 15);
  Report("mid-transfer link down: decode-1 re-registered after link up", *back, "s");
  // Both changes are in its log (sampled every 100 ms).
  CHECK(CountEvents(d1, "registration_lost") >= 1);
  CHECK(WaitFor([&] { return CountEvents(d1, "registered") >= 1; }, seconds(2)).has_value());
}

// Decode-1 serves again (sequential requests alternate between equally loaded replicas), with
// the undisturbed answer `ref_text` to `prompt`.
void CheckDecodeOneServesAgain(const NetnsLab& lab, const std::string& prompt,
                               const std::string& ref_text) {
  const std::string ok1 = "scd_decode_requests_total{outcome=\"ok\"}";
  const double served_before = DecodeMetric(lab, 1, ok1).value_or(0);
  for (int i = 0; i < 6 && DecodeMetric(lab, 1, ok1).value_or(0) == served_before; ++i) {
    const Outcome o = Classify(Complete(prompt));
    CHECK(o.completed());
    CHECK(o.text == ref_text);
  }
  CHECK(DecodeMetric(lab, 1, ok1).value_or(0) > served_before);
}

}  // namespace

TEST_CASE(
    "Link down mid-transfer: the request completes on the other replica, and the decode "
    "daemon re-registers when the link returns",
    "[netfaults]") {
  NETFAULTS_LAB(lab, 2);
  const std::string dir = TempDir();
  PrefillHandle prefill = StartPrefill(dir, LabPrefillConfig());
  DecodeHandle d1 = StartDecode(dir, LabDecodeConfig(1), "decode-1", lab->decode_ns(1));
  DecodeHandle d2 = StartDecode(dir, LabDecodeConfig(2), "decode-2", lab->decode_ns(2));
  REQUIRE(WaitFor([&] { return AllDecodeReady(*lab, 2); }, seconds(15)).has_value());

  // Reference answers on the undisturbed links (greedy: any replica gives the same text).
  const std::string prompt_a = LongPrompt(320, 0), prompt_b = LongPrompt(320, 1);
  const Outcome ref_a = Classify(Complete(prompt_a)), ref_b = Classify(Complete(prompt_b));
  INFO("reference: " << ref_a.status << " " << ref_a.error << " / " << ref_b.error);
  REQUIRE(ref_a.completed());
  REQUIRE(ref_b.completed());

  // 64 kbit/s towards decode-1: a ~60 KB payload needs ~8 s on that link. Two requests at once
  // (least-loaded routing puts one on each replica); the one on decode-2 finishes at once, the
  // other is then mid-transfer, and the link goes down under it.
  REQUIRE(lab->SetRate(1, "64kbit").empty());
  const auto sent = Clock::now();
  auto a = std::async(std::launch::async, [&] { return Complete(prompt_a); });
  auto b = std::async(std::launch::async, [&] { return Complete(prompt_b); });
  auto first_done = [&] {
    return a.wait_for(milliseconds(0)) == std::future_status::ready ||
           b.wait_for(milliseconds(0)) == std::future_status::ready;
  };
  REQUIRE(WaitFor(first_done, seconds(15)).has_value());
  REQUIRE(lab->SetLink(1, false).empty());
  const auto link_down = Clock::now();
  const Outcome oa = Classify(a.get());
  const Outcome ob = Classify(b.get());
  const double failover_s = SecondsSince(link_down);
  INFO("a: " << oa.status << " " << oa.error << "; b: " << ob.status << " " << ob.error);
  INFO("prefill log:\n" << prefill.process->LogText());
  // Both complete, with the undisturbed answers: nothing lost, nothing garbled.
  CHECK(oa.completed());
  CHECK(ob.completed());
  CHECK(oa.text == ref_a.text);
  CHECK(ob.text == ref_b.text);
  CHECK(SecondsSince(sent) < kRequestTimeoutS);
  // The retry happened because the transfer to decode-1 broke (not the RPC, not the prefill).
  CHECK(RetriedOffDecodeOne(*prefill.process, "data plane send"));
  CHECK(failover_s < 15);
  Report("mid-transfer link down: request completed on the other replica after", failover_s, "s");

  CheckRejoinsWhenLinkReturns(*lab, *d1.process);
  CheckDecodeOneServesAgain(*lab, prompt_a, ref_a.text);
  Report("mid-transfer link down: all daemons exited after SIGTERM within",
         StopAllAndCheck({d1.process.get(), d2.process.get(), prefill.process.get()}), "s");
}

TEST_CASE(
    "A blackholed path to an idle replica: the first request to it fails over after "
    "the connect timeout, not at its deadline",
    "[netfaults]") {
  NETFAULTS_LAB(lab, 2);
  if (!NetnsLab::HaveTool("nft")) {
    WARN("SKIPPED: nftables (`nft`) is not installed; scripts/setup.sh installs it");
    return;
  }
  const std::string dir = TempDir();
  json pc = LabPrefillConfig();
  pc["control_plane"]["lease"] = "5s";  // decode-1 stays routable for a while after the cut
  PrefillHandle prefill = StartPrefill(dir, pc);
  json dc2 = LabDecodeConfig(2);
  dc2["engine"]["min_step_interval"] = "40ms";  // its requests stay in flight for ~0.3 s
  DecodeHandle d1 = StartDecode(dir, LabDecodeConfig(1), "decode-1", lab->decode_ns(1));
  DecodeHandle d2 = StartDecode(dir, dc2, "decode-2", lab->decode_ns(2));
  REQUIRE(WaitFor([&] { return AllDecodeReady(*lab, 2); }, seconds(15)).has_value());

  // No data-plane connection to decode-1 exists yet when every IP packet to and from it
  // starts vanishing (a partition or a firewall; unlike a downed link, ARP still answers, so
  // no "no route to host" comes back). Two requests at once: one is routed to decode-1,
  // still registered, and its connect gets no answer; after data_plane.peer_timeout (3 s) it
  // goes to decode-2 instead of waiting out its 30 s deadline.
  REQUIRE(lab->SetLoss(1, 100).empty());
  const auto sent = Clock::now();
  auto a = std::async(std::launch::async, [&] { return Classify(Complete(LongPrompt(60, 0))); });
  auto b = std::async(std::launch::async, [&] { return Classify(Complete(LongPrompt(60, 1))); });
  const Outcome oa = a.get(), ob = b.get();
  const double took = SecondsSince(sent);
  INFO("a: " << oa.status << " " << oa.error << "; b: " << ob.status << " " << ob.error);
  INFO("prefill log:\n" << prefill.process->LogText());
  CHECK(oa.completed());
  CHECK(ob.completed());
  bool retried_connect = false;
  for (const json& j : prefill.process->LogLines()) {
    if (j.value("event", "") == "decode_retry" && j.value("failed_instance", "") == "decode-1" &&
        j.value("message", "").find("data plane connect") != std::string::npos) {
      retried_connect = true;
      ReportText("blackholed idle replica: retry reason", j.value("message", ""));
    }
  }
  CHECK(retried_connect);
  CHECK(took < 10);
  Report("blackholed idle replica: both requests completed after", took, "s");
  // When the path heals, decode-1 is registered again without help.
  REQUIRE(lab->SetLoss(1, 0).empty());
  const std::optional<double> back =
      WaitFor([&] { return DecodeReadyStatus(*lab, 1) == 200; }, seconds(20));
  CHECK(back.has_value());
  if (back)
    Report("blackholed idle replica: decode-1 registered again after the path healed", *back, "s");
  StopAllAndCheck({d1.process.get(), d2.process.get(), prefill.process.get()});
}

TEST_CASE(
    "Link down mid-stream: a clear error within seconds, the slot is freed, and the pair "
    "recovers when the link returns",
    "[netfaults]") {
  NETFAULTS_LAB(lab, 1);
  const std::string dir = TempDir();
  PrefillHandle prefill = StartPrefill(dir, LabPrefillConfig());
  json dc = LabDecodeConfig(1);
  dc["engine"]["min_step_interval"] = "40ms";  // 300 tokens: a 12 s stream
  DecodeHandle d1 = StartDecode(dir, dc, "decode-1", lab->decode_ns(1));
  REQUIRE(WaitFor([&] { return AllDecodeReady(*lab, 1); }, seconds(15)).has_value());

  std::atomic<int> tokens{0};
  const auto sent = Clock::now();
  auto stream = std::async(std::launch::async, [&] {
    return HttpStream(
        kPrefillHttpPort, "/v1/completions", LongStreamBody(),
        [&](const std::string&) {
          ++tokens;
          return true;
        },
        seconds(60));
  });
  REQUIRE(WaitFor([&] { return tokens.load() >= 5; }, seconds(15)).has_value());
  REQUIRE(lab->SetLink(1, false).empty());
  const auto link_down = Clock::now();
  const Outcome o = Classify(stream.get());
  const double error_s = SecondsSince(link_down);
  INFO("outcome: status " << o.status << ", error '" << o.error << "', text " << o.text.size()
                          << " chars");
  // Exactly one terminal event, an explicit error naming the decode daemon, long before the
  // 12 s the stream had left and the 30 s deadline.
  CHECK(o.failed_clearly());
  CHECK(o.error.find("decode daemon decode-1") != std::string::npos);
  CHECK(o.done);
  CHECK(error_s < 10);
  CHECK(SecondsSince(sent) < kRequestTimeoutS);
  Report("mid-stream link down: client got the error after", error_s, "s");
  ReportText("mid-stream link down: error event", o.error);

  // The decode daemon cannot reach the prefill daemon either: its keepalive cancels the call,
  // which frees the batch slot, and it reports itself unregistered.
  const std::optional<double> freed = WaitFor(
      [&] {
        return DecodeMetric(*lab, 1, "scd_decode_active_requests").value_or(1) == 0 &&
               DecodeMetric(*lab, 1, "scd_decode_requests_total{outcome=\"cancelled\"}")
                       .value_or(0) == 1;
      },
      seconds(15));
  CHECK(freed.has_value());
  if (freed) Report("mid-stream link down: decode slot freed after", *freed + error_s, "s");
  CHECK(WaitFor([&] { return DecodeReadyStatus(*lab, 1) == 503; }, seconds(10)).has_value());
  CHECK(WaitForReady(kPrefillHttpPort, 503, seconds(10)));  // lease expired: nothing to route to

  REQUIRE(lab->SetLink(1, true).empty());
  const auto link_up = Clock::now();
  const std::optional<double> back =
      WaitFor([&] { return DecodeReadyStatus(*lab, 1) == 200; }, seconds(20));
  REQUIRE(back.has_value());
  CHECK(*back < 15);
  Report("mid-stream link down: decode-1 re-registered after link up", *back, "s");
  CHECK(WaitForReady(kPrefillHttpPort, 200, seconds(10)));
  Report("mid-stream link down: prefill ready again after link up", SecondsSince(link_up), "s");
  const Outcome after = Classify(Complete("Mary went to the garden. Where is Mary?", 4));
  CHECK(after.completed());
  Report("mid-stream link down: all daemons exited after SIGTERM within",
         StopAllAndCheck({d1.process.get(), prefill.process.get()}), "s");
}

namespace {

// Relays in the prefill namespace for decode-1's three connections: the control plane, the
// Decode RPC and the data plane.
struct DecodeRelays {
  std::unique_ptr<TcpRelay> control, rpc, data;
  // decode-1's config, with every address pointed at its relay.
  json RelayedDecodeConfig() const {
    json dc = LabDecodeConfig(1);
    dc["control_plane"]["address"] = control->address();
    dc["grpc"]["advertise"] = rpc->address();
    dc["data_plane"]["advertise"] = data->address();
    return dc;
  }
};

DecodeRelays StartDecodeRelays() {
  const std::string here = NetnsLab::PrefillSide(1);
  std::string why;
  DecodeRelays r;
  r.control = TcpRelay::Start("", here, 7100, "127.0.0.1", kPrefillGrpcPort, &why);
  REQUIRE(r.control != nullptr);
  r.rpc = TcpRelay::Start("", here, 7101, NetnsLab::DecodeSide(1), kDecodeRpcPort, &why);
  REQUIRE(r.rpc != nullptr);
  r.data = TcpRelay::Start("", here, 7102, NetnsLab::DecodeSide(1), kDecodeDataPort, &why);
  REQUIRE(r.data != nullptr);
  return r;
}

// Six requests one after another: their outcomes, and the mean transfer and request times.
struct SixRequests {
  std::vector<Outcome> outcomes;
  double mean_transfer_s = 0, mean_e2e_s = 0;
};

SixRequests RunSixRequests() {
  const std::string transfer_sum =
      "scd_transfer_seconds_sum{model=\"stories260K-babi-qa\",mode=\"scd\"}";
  const std::string transfer_count =
      "scd_transfer_seconds_count{model=\"stories260K-babi-qa\",mode=\"scd\"}";
  SixRequests r;
  const double sum0 = PrefillMetric(transfer_sum).value_or(0);
  const double n0 = PrefillMetric(transfer_count).value_or(0);
  const auto t0 = Clock::now();
  for (int i = 0; i < 6; ++i) r.outcomes.push_back(Classify(Complete(LongPrompt(160 + 32 * i, i))));
  r.mean_e2e_s = SecondsSince(t0) / 6;
  const double n = PrefillMetric(transfer_count).value_or(0) - n0;
  r.mean_transfer_s = n > 0 ? (PrefillMetric(transfer_sum).value_or(0) - sum0) / n : 0;
  return r;
}

void ReportLatencyAndLoss(const SixRequests& clean, const SixRequests& impaired, long dropped) {
  Report("latency+loss: packets dropped (5% both ways)", static_cast<double>(dropped), "packets");
  Report("latency+loss: mean transfer, clean link", clean.mean_transfer_s * 1e3, "ms");
  Report("latency+loss: mean transfer, +50 ms each way and 5% loss", impaired.mean_transfer_s * 1e3,
         "ms");
  Report("latency+loss: mean request, clean link", clean.mean_e2e_s * 1e3, "ms");
  Report("latency+loss: mean request, +50 ms each way and 5% loss", impaired.mean_e2e_s * 1e3,
         "ms");
}

}  // namespace

TEST_CASE("Latency and random loss on the link: every transfer completes with the right answer",
          "[netfaults]") {
  NETFAULTS_LAB(lab, 1);
  if (!NetnsLab::HaveTool("nft")) {
    WARN("SKIPPED: nftables (`nft`) is not installed; scripts/setup.sh installs it");
    return;
  }
  const std::string dir = TempDir();
  json pc = LabPrefillConfig();
  pc["prefix_cache"] = {{"enabled", false}};  // every request moves its full payload
  PrefillHandle prefill = StartPrefill(dir, pc);
  // Every byte between the daemons crosses a relay in the prefill namespace: the control
  // plane, the Decode RPC and the data plane.
  const DecodeRelays relays = StartDecodeRelays();
  DecodeHandle d1 = StartDecode(dir, relays.RelayedDecodeConfig(), "decode-1", lab->decode_ns(1));
  REQUIRE(WaitFor([&] { return AllDecodeReady(*lab, 1); }, seconds(15)).has_value());

  const SixRequests clean = RunSixRequests();
  for (const Outcome& o : clean.outcomes) REQUIRE(o.completed());

  // 50 ms each way on every connection, and 5% of the packets on the veth dropped both ways.
  for (TcpRelay* relay : {relays.control.get(), relays.rpc.get(), relays.data.get()}) {
    relay->SetDelay(milliseconds(50));
  }
  REQUIRE(lab->SetLoss(1, 5).empty());
  const SixRequests impaired = RunSixRequests();
  const long dropped = lab->DroppedPackets(1);
  REQUIRE(lab->SetLoss(1, 0).empty());
  for (size_t i = 0; i < impaired.outcomes.size(); ++i) {
    INFO("request " << i << ": status " << impaired.outcomes[i].status << " "
                    << impaired.outcomes[i].error);
    CHECK(impaired.outcomes[i].completed());
    CHECK(impaired.outcomes[i].text == clean.outcomes[i].text);
  }
  // The faults were real: packets were dropped, and every transfer waited out the added RTT.
  CHECK(dropped > 0);
  CHECK(impaired.mean_transfer_s >= 0.1);
  // TCP repaired the losses; no payload reached the decoder damaged.
  CHECK(DecodeMetric(*lab, 1, "scd_decode_payloads_total{outcome=\"corrupted\"}").value_or(0) == 0);
  CHECK(WaitFor(  // the counters follow the mailbox within 100 ms
            [&] {
              return DecodeMetric(*lab, 1, "scd_decode_payloads_total{outcome=\"taken\"}")
                         .value_or(0) == 12;
            },
            seconds(2))
            .has_value());
  ReportLatencyAndLoss(clean, impaired, dropped);
  StopAllAndCheck({d1.process.get(), prefill.process.get()});
}

TEST_CASE("A byte flipped on the wire is refused by checksum, and the daemon keeps serving",
          "[netfaults]") {
  NETFAULTS_LAB(lab, 1);
  const std::string dir = TempDir();
  // The flip lands 40 bytes into the SCD payload body, past its 64-byte header ("SCDW"...).
  const std::string kMagic = "SCDW";
  const size_t kSkip = 64 + 40;
  const bool inline_payload = GENERATE(false, true);
  SECTION(inline_payload ? "inline payload in the Decode RPC" : "data-plane frame") {
    json pc = LabPrefillConfig();
    if (inline_payload) pc["data_plane"]["inline_max_bytes"] = 1 << 20;
    // The refusal itself, not the oracle retry that follows it by default (test_cluster).
    pc["specialists"][0]["fallback"] = "fail";
    PrefillHandle prefill = StartPrefill(dir, pc);
    std::string why;
    const int target_port = inline_payload ? kDecodeRpcPort : kDecodeDataPort;
    auto relay = TcpRelay::Start("", NetnsLab::PrefillSide(1), 7110, NetnsLab::DecodeSide(1),
                                 target_port, &why);
    REQUIRE(relay != nullptr);
    json dc = LabDecodeConfig(1);
    dc[inline_payload ? "grpc" : "data_plane"]["advertise"] = relay->address();
    DecodeHandle d1 = StartDecode(dir, dc, "decode-1", lab->decode_ns(1));
    REQUIRE(WaitFor([&] { return AllDecodeReady(*lab, 1); }, seconds(15)).has_value());

    const std::string prompt = LongPrompt(160);
    const Outcome ref = Classify(Complete(prompt));
    REQUIRE(ref.completed());
    relay->ArmCorruption(kMagic, kSkip);
    const Outcome bad = Classify(Complete(prompt));
    INFO("corrupted request: status " << bad.status << ", error '" << bad.error << "'");
    REQUIRE(relay->corruptions() == 1);
    // Refused, naming the checksum; no answer computed from damaged codes.
    CHECK(bad.failed_clearly());
    CHECK(bad.error.find("checksum") != std::string::npos);
    CHECK(bad.status == 503);
    ReportText(inline_payload ? "corrupted inline payload: client saw"
                              : "corrupted data-plane frame: client saw",
               std::to_string(bad.status) + " " + bad.error);
    if (!inline_payload) {  // the transport's frame checksum caught it on the decode side
      CHECK(WaitFor(
                [&] {
                  return DecodeMetric(*lab, 1, "scd_decode_payloads_total{outcome=\"corrupted\"}")
                             .value_or(0) == 1;
                },
                seconds(5))
                .has_value());
    }
    // The same daemon keeps serving (after the prefill daemon's 1 s failure quarantine).
    std::optional<Outcome> good;
    CHECK(WaitFor(
              [&] {
                good = Classify(Complete(prompt));
                return good->completed();
              },
              seconds(10))
              .has_value());
    CHECK(good->text == ref.text);
    CHECK(d1.process->running());
    StopAllAndCheck({d1.process.get(), prefill.process.get()});
  }
}

}  // namespace scd::testing
