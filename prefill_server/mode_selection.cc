// See mode_selection.h.
#include "prefill_server/mode_selection.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/http/openai_error.h"

namespace scd {
namespace {

bool HasRungs(CodecMode m) { return m == CodecMode::kScd || m == CodecMode::kScdReuse; }

std::string ModeName(const Specialist& s, CodecMode mode, int rung) {
  return CandidateName({mode, rung, 1, 0}, s.ladder);
}

// The tokens the payload of `mode` covers when the prefix cache has nothing: all but the last,
// cut to a multiple of the payload block (GenerationPipeline::BuildPayload does the same).
int Covered(CodecMode mode, int tokens, int block) {
  int covered = tokens - 1;
  if (block > 0 && mode != CodecMode::kOracle && covered >= block)
    covered = covered / block * block;
  return covered;
}

absl::StatusOr<RequestMode> Pinned(const Specialist& s, const ModeRequest& ask) {
  const CodecMode m = *ask.mode;
  const int rung = ask.rung.value_or(0);
  const std::string name(CodecModeName(m));
  if (CodecModeNeedsArtifact(m) && s.artifact == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("mode ", name, " needs specialist '",
                                                   s.config.name, "''s artifact, which it lacks"));
  }
  if (rung != 0) {
    const size_t rungs = s.ladder.size();
    if (!HasRungs(m) || rung < 0 || static_cast<size_t>(rung) >= rungs) {
      return absl::InvalidArgumentError(absl::StrCat("rung ", rung, " is not one of mode ", name,
                                                     "'s (", HasRungs(m) ? rungs : 1,
                                                     " for specialist '", s.config.name, "')"));
    }
  }
  return RequestMode{m, rung, ModeName(s, m, rung), -1};
}

}  // namespace

absl::StatusOr<ModeRequest> ModeRequestOf(const std::optional<std::string>& mode,
                                          std::optional<int> rung,
                                          std::optional<double> quality_floor) {
  ModeRequest ask;
  if (mode.has_value() && !mode->empty() && *mode != "auto") {
    absl::StatusOr<CodecMode> m = ParseCodecMode(*mode);
    if (!m.ok()) {
      return http::FieldError("scd.mode", std::string(m.status().message()));
    }
    ask.mode = *m;
  }
  if (rung.has_value() && !ask.mode.has_value()) {
    return http::FieldError("scd.rung", "needs scd.mode (scd or scd-reuse)");
  }
  ask.rung = rung;
  if (quality_floor.has_value() && !(*quality_floor >= 0 && *quality_floor <= 1)) {
    return http::FieldError("scd.quality_floor", "must be a number in [0, 1]");
  }
  ask.quality_floor = quality_floor;
  return ask;
}

nlohmann::json ModeJson(const scd::v1::Timings& t) {
  nlohmann::json j = {{"mode", t.mode()}, {"rung", t.rung()}, {"rung_name", t.rung_name()}};
  if (t.predicted_ttft_ms() > 0) j["predicted_ttft_ms"] = t.predicted_ttft_ms();
  return j;
}

absl::StatusOr<RequestMode> SelectMode(const Specialist& s, const ModeRequest& ask,
                                       const ModeContext& ctx) {
  if (ask.mode.has_value()) return Pinned(s, ask);
  if (!s.auto_mode || s.costs == nullptr) return RequestMode{s.mode, 0, ModeName(s, s.mode, 0), -1};
  const std::vector<int32_t>& tokens = *ctx.tokens;
  const int t = static_cast<int>(tokens.size());
  double future_reuses = 0;
  if (ctx.seen != nullptr && ctx.cache != nullptr && t > 1) {
    const int covered = Covered(CodecMode::kScd, t, ctx.payload_block_tokens);
    const int min_reuse = std::max(1, ctx.payload_block_tokens);
    s.costs->ObserveReuse(ctx.seen->Peek(s.config.name, 0, tokens, min_reuse) > 0);
    ctx.seen->Insert(s.config.name, 0,
                     std::vector<int32_t>(tokens.begin(), tokens.begin() + covered), {});
    future_reuses = s.costs->FutureReuses();
  }
  auto shape_of = [&](const ModeCandidate& c) {
    RequestShape shape;
    shape.producer_wait_seconds = ctx.producer_wait_seconds;
    shape.decode_wait_seconds = ctx.decode_wait_seconds;
    shape.future_reuses = future_reuses;
    int hit = 0;
    if (c.mode != CodecMode::kOracle && ctx.cache != nullptr && t > 1) {
      const RequestMode m{c.mode, c.rung, "", -1};
      hit = ctx.cache->Peek(s.PairTag(c.mode), m.CacheKind(), tokens);
      if (t - hit > ctx.max_consumer_suffix) hit = 0;  // BuildPayload would not use it
    }
    shape.context_tokens =
        hit > 0 ? hit : std::max(0, Covered(c.mode, t, ctx.payload_block_tokens));
    shape.cached_tokens = hit;
    shape.suffix_tokens = t - shape.context_tokens;
    return shape;
  };
  const double floor = ask.quality_floor.value_or(s.config.quality_floor);
  const TargetCosts costs = s.costs->ForTarget(ctx.decode_instance, ctx.decode_rates);
  SCD_ASSIGN_OR_RETURN(ModeChoice choice, ChooseMode(s.candidates, floor, costs, shape_of));
  return RequestMode{choice.chosen.mode, choice.chosen.rung, CandidateName(choice.chosen, s.ladder),
                     choice.predicted_seconds};
}

void ObserveStages(const Specialist& s, const RequestMode& mode, const scd::v1::Timings& t,
                   int payload_tokens, int suffix_tokens, bool cache_hit, bool transferred,
                   const std::string& instance) {
  if (s.costs == nullptr || payload_tokens <= 0) return;
  ModeCostModel& m = *s.costs;
  if (!cache_hit && mode.mode != CodecMode::kOracle) {
    if (t.prefill_ms() > 0) m.ObserveProducerPrefill(payload_tokens, t.prefill_ms() / 1e3);
    m.ObserveEncode(mode.mode, payload_tokens, t.encode_ms() / 1e3);
  }
  if (transferred) {
    m.ObserveTransfer(static_cast<double>(t.payload_bytes()), t.transfer_ms() / 1e3, instance);
  }
  m.ObserveRebuild(mode.mode, payload_tokens, t.rebuild_ms() / 1e3);
  if (suffix_tokens > 0) m.ObserveConsumerPrefill(suffix_tokens, t.suffix_prefill_ms() / 1e3);
}

DecodeSideRates DecodeSideRatesOf(const std::map<std::string, double>& rebuild_by_name,
                                  double prefill_seconds_per_token) {
  DecodeSideRates r;
  for (const auto& [name, rate] : rebuild_by_name) {
    absl::StatusOr<CodecMode> mode = ParseCodecMode(name);
    if (mode.ok() && rate > 0) r.rebuild[*mode] = rate;
  }
  r.prefill = prefill_seconds_per_token > 0 ? prefill_seconds_per_token : 0;
  return r;
}

absl::Status SeedCosts(Specialist& s, Backend& producer, double link_gbps, int probe_tokens) {
  if (s.costs == nullptr) return absl::OkStatus();
  using Clock = std::chrono::steady_clock;
  const int vocab = producer.model().config.vocab_size;
  PrefillOptions hooks;
  hooks.layer_states = hooks.surprisal = hooks.residual = true;
  PrefillResult states;
  // Two sizes, so that the prefill's fixed cost and its cost per token are both seeded.
  for (int n : {std::max(2, probe_tokens / 4), std::max(4, probe_tokens)}) {
    std::vector<int32_t> probe(n);
    for (int i = 0; i < n; ++i) probe[i] = 1 + (i * 7919) % std::max(1, vocab - 1);
    SCD_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq, producer.NewSequence(n));
    const auto t0 = Clock::now();
    SCD_RETURN_IF_ERROR(producer.Prefill(*seq, probe, hooks, &states));
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    s.costs->ObserveProducerPrefill(n, seconds);
    s.costs->ObserveConsumerPrefill(n, seconds, /*seed=*/true);
    for (const ModeCandidate& c : s.candidates) {
      if (c.mode == CodecMode::kOracle || c.rung != 0) continue;
      const auto te = Clock::now();
      SCD_RETURN_IF_ERROR(s.codec->Encode(c.mode, probe, states).status());
      s.costs->ObserveEncode(c.mode, n, std::chrono::duration<double>(Clock::now() - te).count());
    }
  }
  s.costs->Seed(0, 0, link_gbps > 0 ? link_gbps * 1e9 / 8 : 0);
  return absl::OkStatus();
}

ModeMetrics::ModeMetrics(metrics::Registry* registry) {
  if (registry == nullptr) return;
  choices_ = registry
                 ->AddCounterFamily("scd_mode_choices_total",
                                    "Requests by the mode and rate ladder rung their context "
                                    "travelled in (mode: auto's choices, pinned and fixed modes).",
                                    {"specialist", "mode", "rung"})
                 .value();
  ratio_ = registry
               ->AddHistogramFamily("scd_mode_ttft_prediction_ratio",
                                    "Measured over predicted time to first token of requests "
                                    "whose mode mode: auto chose.",
                                    {"specialist"}, metrics::ExponentialBuckets(0.125, 1.414, 13))
               .value();
}

void ModeMetrics::CountChoice(const std::string& specialist, const RequestMode& mode) {
  if (choices_ == nullptr) return;
  choices_
      ->WithLabels({specialist, std::string(CodecModeName(mode.mode)), std::to_string(mode.rung)})
      .value()
      ->Increment();
}

void ModeMetrics::ObserveTtft(const std::string& specialist, const RequestMode& mode,
                              double ttft_seconds) {
  if (ratio_ == nullptr || mode.predicted_seconds <= 0 || ttft_seconds <= 0) return;
  ratio_->WithLabels({specialist}).value()->Observe(ttft_seconds / mode.predicted_seconds);
}

}  // namespace scd
