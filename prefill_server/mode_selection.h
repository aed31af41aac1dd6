// How each request's context travels: the specialist's configured mode, or, with `mode: auto`,
// the candidate ChooseMode (common/serving/mode_chooser.h) predicts fastest among those whose
// calibrated top-1 agreement with the oracle keeps the specialist's `quality_floor` (or the
// request's own floor or mode, the `scd` extension of the APIs).
//
// The prediction weighs, per candidate: its prefix-cache hit (PrefixCache::Peek, without
// counting it), the payload's tokens and the suffix the decode daemon prefills, the queues
// admission predicts in front of the request, and the specialist's ModeCostModel: stage costs
// fitted from its own recent requests (ObserveStages), seeded at start-up by a self-measure of
// the base model's prefill and the configured link (SeedCosts).
//
// /metrics: scd_mode_choices_total{specialist,mode,rung} and, for requests whose mode was
// chosen, scd_mode_ttft_prediction_ratio{specialist} (measured over predicted TTFT).
#ifndef SCD_PREFILL_SERVER_MODE_SELECTION_H_
#define SCD_PREFILL_SERVER_MODE_SELECTION_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/metrics/registry.h"
#include "common/runtime/backend.h"
#include "common/serving/prefix_cache.h"
#include "nlohmann/json.hpp"
#include "prefill_server/specialist.h"
#include "proto/scd.pb.h"

namespace scd {

// The mode of one request.
struct RequestMode {
  CodecMode mode = CodecMode::kScd;
  int rung = 0;                   // scd and scd-reuse: the rate ladder's rung
  std::string name;               // "scd r16/24 k3", "raw", ...
  double predicted_seconds = -1;  // ChooseMode's prediction; negative when not chosen

  // The prefix cache's key of payloads of this mode and rung.
  int CacheKind() const { return static_cast<int>(mode) | (rung << 8); }
};

// What a request asks of the choice (the APIs' `scd` extension): a mode to pin, or a floor.
struct ModeRequest {
  std::optional<CodecMode> mode;
  std::optional<int> rung;
  std::optional<double> quality_floor;
};

// A ModeRequest from the APIs' fields: INVALID_ARGUMENT naming `scd.mode` for an unknown
// mode, `scd.quality_floor` for a floor outside [0, 1].
absl::StatusOr<ModeRequest> ModeRequestOf(const std::optional<std::string>& mode,
                                          std::optional<int> rung,
                                          std::optional<double> quality_floor);

// The HTTP responses' `scd` object: the mode, rung and predicted TTFT of a request's Timings.
nlohmann::json ModeJson(const scd::v1::Timings& timings);

// What the choice needs to know of the pipeline.
struct ModeContext {
  const std::vector<int32_t>* tokens = nullptr;  // the whole prompt
  PrefixCache* cache = nullptr;                  // null: no prefix cache
  // Tokens only, every auto request's context: whether a context comes back, for the reuse
  // credit (ChooseMode). Null: no prefix cache.
  PrefixCache* seen = nullptr;
  int payload_block_tokens = 0;  // GenerationPipelineOptions'
  int max_consumer_suffix = 0;
  double producer_wait_seconds = 0;  // admission's prediction of the queues ahead
  double decode_wait_seconds = 0;
  // The decode daemon the request will likely go to (DecodeRegistry::PeekPick; empty: none
  // known) and the rates it reports: its link and its costs are the ones weighed.
  std::string decode_instance;
  DecodeSideRates decode_rates;
};

// The request's mode: the specialist's own unless it is `auto`; with `auto`, the choice. A
// request pinning a mode gets that mode (INVALID_ARGUMENT for one the specialist cannot send:
// an artifact mode without an artifact, a rung off its ladder). With `ctx.seen`, an auto
// request's context is looked up in it (its reuse counts in the cost model's FutureReuses),
// then recorded there.
absl::StatusOr<RequestMode> SelectMode(const Specialist& s, const ModeRequest& ask,
                                       const ModeContext& ctx);

// Feeds a completed request's stage times (its Timings) to the specialist's cost model.
// `payload_tokens`: the tokens the payload covered; `suffix_tokens`: those the decode daemon
// prefilled; `transferred`: whether the payload crossed the data plane.
// `instance`: the decode daemon that served it (its link is measured apart).
void ObserveStages(const Specialist& s, const RequestMode& mode, const scd::v1::Timings& t,
                   int payload_tokens, int suffix_tokens, bool cache_hit, bool transferred,
                   const std::string& instance = "");

// A decode daemon's reported rates (rpc::StageRates, by mode name) as the cost model reads them;
// unknown mode names are skipped.
DecodeSideRates DecodeSideRatesOf(const std::map<std::string, double>& rebuild_by_name,
                                  double prefill_seconds_per_token);

// Seeds the cost model of an `auto` specialist: the base model's prefill of `probe_tokens`
// synthetic tokens, timed (the consumer, of the same architecture, is assumed to match it
// until measured or reported by a decode daemon), each candidate mode's encode of it, and
// `link_gbps` (0: unknown).
absl::Status SeedCosts(Specialist& s, Backend& producer, double link_gbps, int probe_tokens = 64);

class ModeMetrics {
 public:
  explicit ModeMetrics(metrics::Registry* registry);  // null: nothing is counted
  void CountChoice(const std::string& specialist, const RequestMode& mode);
  void ObserveTtft(const std::string& specialist, const RequestMode& mode, double ttft_seconds);

 private:
  metrics::CounterFamily* choices_ = nullptr;
  metrics::HistogramFamily* ratio_ = nullptr;
};

}  // namespace scd

#endif  // SCD_PREFILL_SERVER_MODE_SELECTION_H_
