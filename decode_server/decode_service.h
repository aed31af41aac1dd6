// DecodeService: the scd.v1.Decode gRPC service of a decode daemon, the edge between the
// prefill daemon's RPC and the DecodeEngine. For each call it claims the payload (from the
// data plane's mailbox, or inline), submits one job, and relays the engine's events as a
// server stream: tokens with their text pieces, then exactly one `done` or `error` event.
//
// Error placement (scd.proto): anything that fails before the first token — a malformed
// request, another model's name, a payload that never arrived or is for another pair, a full
// queue — is the call's gRPC status, so the prefill daemon can retry on another replica;
// anything later is a final StreamError event, so tokens already sent are not lost.
// A cancelled call (the prefill daemon's client went away, or a stop string matched) cancels
// the engine job, which frees its batch slot at the next step.
//
// Who may call: with mutual TLS, only holders of a certificate of the cluster's CA, and with a
// cluster token, only calls carrying it (peer_auth.h); anyone else gets UNAUTHENTICATED before
// the request is read, and the refusal is logged (decode_call_refused) and counted
// (scd_decode_rejected_total{reason}). A data-plane payload goes only to the call naming its
// transfer token (payload_mailbox.h).
#ifndef SCD_DECODE_SERVER_DECODE_SERVICE_H_
#define SCD_DECODE_SERVER_DECODE_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "common/daemon/refusal_log.h"
#include "common/metrics/registry.h"
#include "common/rpc/peer_auth.h"
#include "common/serving/decode_engine.h"
#include "common/tokenizer/tokenizer.h"
#include "decode_server/payload_mailbox.h"
#include "decode_server/stage_rate_tracker.h"
#include "proto/scd.grpc.pb.h"

namespace scd {

// Who may call the service (see the file comment). Not owned; must outlive the service.
struct DecodeServiceGuard {
  const rpc::PeerAuthenticator* auth = nullptr;  // null: no check (tests)
  std::string cluster_token;                     // empty: none required
  daemon::RefusalLog* refusals = nullptr;
};

struct DecodeServiceOptions {
  std::string model_name;                              // requests must name it
  int max_tokens = 4096;                               // ceiling on DecodeRequest.max_tokens
  absl::Duration default_deadline = absl::Minutes(5);  // when the request gives none
  absl::Duration payload_wait = absl::Seconds(5);      // for a payload still in flight
};

class DecodeService final : public scd::v1::Decode::Service {
 public:
  // Nothing is owned; all must outlive the service. `metrics` may be null.
  DecodeService(DecodeEngine* engine, PayloadMailbox* mailbox, const Tokenizer* tokenizer,
                DecodeServiceOptions options, metrics::Registry* metrics,
                DecodeServiceGuard guard = {});

  grpc::Status Generate(grpc::ServerContext* context, const scd::v1::DecodeRequest* request,
                        grpc::ServerWriter<scd::v1::DecodeEvent>* writer) override;

  // Seconds per token of the requests served so far (heartbeats report them).
  rpc::StageRates rates() const { return rates_.Rates(); }

  // New calls get UNAVAILABLE from now on (the daemon is draining).
  void StopAccepting() { accepting_.store(false); }
  int in_flight() const { return in_flight_.load(); }

 private:
  struct Stream;
  absl::Status Validate(const scd::v1::DecodeRequest& request) const;
  void Count(const std::string& outcome);
  // Counts and logs a refused call: its status for the caller.
  grpc::Status Refuse(const scd::v1::DecodeRequest& request, const absl::Status& st);
  // The engine's job for a valid request, with its payload (taken from the mailbox, or
  // inline and checked here).
  absl::StatusOr<DecodeJob> MakeJob(const scd::v1::DecodeRequest& request);
  // A token to the caller; a caller gone or a failed write cancels the job.
  void WriteToken(Stream& s, const DecodeEvent& e);
  // The final event, an error or done: the call's status.
  grpc::Status EndWithError(Stream& s, const scd::v1::DecodeRequest& request, const DecodeEvent& e);
  grpc::Status EndDone(Stream& s, const DecodeEvent& e);

  DecodeEngine* const engine_;
  PayloadMailbox* const mailbox_;
  const Tokenizer* const tokenizer_;
  const DecodeServiceOptions options_;
  const DecodeServiceGuard guard_;
  std::atomic<bool> accepting_{true};
  std::atomic<int> in_flight_{0};
  std::atomic<uint64_t> next_job_id_{1};
  StageRateTracker rates_;

  metrics::CounterFamily* requests_ = nullptr;  // {outcome}
  metrics::Histogram* rebuild_seconds_ = nullptr;
  metrics::Histogram* suffix_prefill_seconds_ = nullptr;
  metrics::Histogram* sekv_build_seconds_ = nullptr;
  metrics::Histogram* queue_seconds_ = nullptr;
  metrics::Histogram* itl_seconds_ = nullptr;
  metrics::Histogram* payload_bytes_ = nullptr;
};

}  // namespace scd

#endif  // SCD_DECODE_SERVER_DECODE_SERVICE_H_
