// The shadow oracle: what SCD costs in quality, measured on live traffic. The decode engine
// samples a share of the requests it serves from a payload (ShadowOptions::rate) and, after
// one is served, rebuilds its payload again and prefills the same context with its own weights
// (the oracle), then compares the two caches:
//   first      the next-token distribution at the first generated position: KL(oracle ‖
//              served) and whether the top-1 tokens agree;
//   generated  the first `tokens` generated tokens teacher-forced through both caches: mean
//              KL and top-1 agreement over their positions (the first included);
//   kv         per layer, the relative L2 error ‖K_served − K_own‖ / ‖K_own‖ over the
//              payload's positions, and the same for V (where the backend can read its cache,
//              Backend::ReadKv).
// These are scd-eval's statistics (eval::CompareLogitRows) for one context: its text protocol
// teacher-forces a passage's second half the same way.
//
// Shadow work is low priority: the engine runs it only while it has no live request (none
// running, prefilling, building or queued), a piece of at most `piece_tokens` rows or tokens
// at a time, so that a request arriving meanwhile waits one piece at most and no running
// request's step ever waits for it. A sample waits in a queue of `max_pending`; one that
// finds the queue full, or the token budget (`max_tokens_per_s`, on average) in debt, is
// dropped and counted, as is one under way when a live request has to wait for KV memory.
//
// Loop thread only (the decode engine's), like the backend it runs on.
#ifndef SCD_COMMON_SERVING_SHADOW_ORACLE_H_
#define SCD_COMMON_SERVING_SHADOW_ORACLE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/runtime/backend.h"
#include "common/scd/codec.h"
#include "common/scd/wire_format.h"
#include "common/serving/payload_chunks.h"

namespace scd {

// One sample's statistics (see above).
struct ShadowStats {
  double first_kl = 0;
  bool first_top1 = false;
  double mean_kl = 0;         // over `rows` generated positions
  double top1_agreement = 0;  // share of them whose top-1 agrees
  int rows = 0;
  // Per layer; empty where the backend cannot read its cache.
  std::vector<double> k_rel_error, v_rel_error;
};

// The comparison of one served context with the consumer's own cache, a piece at a time: the
// payload's rebuild, the continuation on it, the own prefill of the payload's tokens, the
// continuation on that, then the statistics. The continuation is the suffix and the generated
// tokens but the last (whose distribution follows the last position compared).
class ShadowComparison {
 public:
  // INVALID_ARGUMENT for a payload that does not start at position 0, an oracle payload, an
  // empty suffix or no generated token.
  static absl::StatusOr<std::unique_ptr<ShadowComparison>> Create(Payload payload,
                                                                  std::vector<int32_t> suffix,
                                                                  std::vector<int32_t> generated);

  // Positions each cache holds at the end, the payload's and the continuation's.
  int positions() const { return static_cast<int>(payload_tokens_.size() + continuation_.size()); }
  bool done() const { return stage_ == Stage::kDone; }
  // Runs the next piece: at most `max_tokens` rows or tokens (at least one step).
  absl::Status Advance(Backend& backend, const ConsumerCodec& codec, int max_tokens);
  const ShadowStats& stats() const { return stats_; }

 private:
  enum class Stage { kRebuild, kServedContinuation, kOwnPrefill, kOwnContinuation, kDone };
  ShadowComparison() = default;
  absl::Status Finish(Backend& backend, const std::vector<float>& own_logits);

  std::vector<int32_t> payload_tokens_, continuation_;
  int suffix_tokens_ = 0, rows_ = 0;
  Stage stage_ = Stage::kRebuild;
  size_t own_prefilled_ = 0;
  PayloadChunks rebuild_;
  std::unique_ptr<Sequence> served_, own_;
  std::vector<float> served_logits_;
  ShadowStats stats_;
};

// The comparison run whole (offline, and the tests' reference).
absl::StatusOr<ShadowStats> CompareWithOwnCache(Backend& backend, const ConsumerCodec& codec,
                                                Payload payload, std::vector<int32_t> suffix,
                                                std::vector<int32_t> generated);

struct ShadowSample {
  CodecMode mode = CodecMode::kScd;
  int rung = 0;
  int context_tokens = 0;  // the payload's
  ShadowStats stats;
};

struct ShadowOptions {
  double rate = 0;                // share of payload requests sampled; 0: off
  double max_tokens_per_s = 512;  // shadow tokens (rebuilt rows and prefilled tokens), average
  int tokens = 16;                // generated tokens teacher-forced
  int max_pending = 4;            // samples waiting
  int piece_tokens = 32;          // rows or tokens per piece
  std::function<void(const ShadowSample&)> on_sample;
  // A sample dropped: "busy", "budget", "memory", "preempted" or "error" (with its status).
  std::function<void(const std::string& reason, const absl::Status& error)> on_drop;
};

// A served request's sample: its payload, suffix and first generated tokens.
struct ShadowJob {
  std::vector<uint8_t> payload;
  std::vector<int32_t> suffix;
  std::vector<int32_t> generated;
};

class ShadowOracle {
 public:
  explicit ShadowOracle(ShadowOptions options) : options_(std::move(options)) {}

  bool enabled() const { return options_.rate > 0; }
  int tokens() const { return options_.tokens; }
  // Whether the next request with a payload is sampled: every 1/rate-th. Any thread.
  bool Pick();
  // Queues a served request's sample, or drops it ("busy", "budget").
  void Offer(ShadowJob job);
  bool HasWork() const { return current_ != nullptr || !pending_.empty(); }
  bool Holding() const { return current_ != nullptr; }
  // Runs one piece of the oldest sample. A sample starts only where `fits` says its two
  // sequences' memory fits (else it is dropped: "memory"), held in `pool` until it ends.
  void RunPiece(Backend& backend, const ConsumerCodec& codec,
                const std::function<bool(int64_t)>& fits, std::atomic<int64_t>* pool);
  // Gives up the sample under way and frees its memory ("preempted").
  void Preempt();

 private:
  void Drop(const std::string& reason, const absl::Status& error = absl::OkStatus());
  absl::Status Start(Backend& backend, const std::function<bool(int64_t)>& fits,
                     std::atomic<int64_t>* pool, bool* dropped);
  void Release();

  ShadowOptions options_;
  std::atomic<uint64_t> picks_{0};
  double budget_tokens_ = 0;  // negative: in debt
  std::chrono::steady_clock::time_point budget_time_{};
  std::deque<ShadowJob> pending_;
  std::unique_ptr<ShadowComparison> current_;
  ShadowSample sample_;  // current_'s, but for its statistics
  std::atomic<int64_t>* pool_ = nullptr;
  int64_t held_bytes_ = 0;
};

}  // namespace scd

#endif  // SCD_COMMON_SERVING_SHADOW_ORACLE_H_
