// Admission: the prefill daemon's load shedding. Every request, HTTP or gRPC, passes it at the
// end of GenerationPipeline::Prepare, before any work is spent on it: its time to first token
// is predicted from the queues in front of it (common/serving/ttft_estimator.h: the admitted
// requests still ahead of it in the producer and before their decode daemon, the model's
// decode daemons' loads and batch slots, as DecodeRegistry knows them), and a request whose
// prediction leaves no margin within limits.max_queue_wait (admitted up to 2/3 of it, the
// rest for the prediction's error; see admission.cc) is refused at once with
// RESOURCE_EXHAUSTED (HTTP 429, gRPC RESOURCE_EXHAUSTED) and a retry delay in whole seconds
// (Retry-After; the `retry-after` trailer in gRPC). A request that would find more than
// limits.prefill_queue requests ahead of it for the base model is refused the same way, so
// that a streaming request learns it before its stream starts. Under overload the daemon so
// serves the requests it admits within the limit instead of all of them late: goodput stays
// near the saturation rate where a queue without bound lets every request's wait grow.
//
// An admitted request holds an AdmissionTicket, which counts it in the producer and dispatch
// queues until the pipeline reports it past each stage (or the ticket is dropped). The
// pipeline feeds the estimator its measurements: each request's time holding the producer,
// and each completed request's first-token work and decode-slot time.
//
// /metrics: scd_requests_shed_total{model,reason} (queue_wait: past limits.max_queue_wait;
// prefill_queue: past limits.prefill_queue) and scd_predicted_ttft_seconds{model}, the
// prediction for every request that reached admission.
//
// Thread-safe.
#ifndef SCD_PREFILL_SERVER_ADMISSION_H_
#define SCD_PREFILL_SERVER_ADMISSION_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics/registry.h"
#include "common/rpc/decode_registry.h"
#include "common/serving/ttft_estimator.h"

namespace scd {

// One admitted request's place in the queues admission counts. Leaving is idempotent; the
// destructor leaves whatever is left.
class AdmissionTicket {
 public:
  AdmissionTicket(std::atomic<int>* producer, std::atomic<int>* dispatch);
  ~AdmissionTicket();
  AdmissionTicket(const AdmissionTicket&) = delete;
  AdmissionTicket& operator=(const AdmissionTicket&) = delete;

  // The admitted requests in each queue before this one joined.
  int producer_ahead() const { return producer_ahead_; }
  int dispatch_ahead() const { return dispatch_ahead_; }
  // Past the base model's prefill (or failed before it).
  void LeaveProducer();
  // Routed to a decode daemon (or failed before it).
  void LeaveDispatch();

  // What admission predicted for the request (for its log line), and of that the waits in
  // the queues ahead of it (for mode: auto).
  absl::Duration predicted_ttft() const { return predicted_ttft_; }
  void set_predicted_ttft(absl::Duration ttft) { predicted_ttft_ = ttft; }
  absl::Duration producer_wait() const { return producer_wait_; }
  absl::Duration decode_wait() const { return decode_wait_; }
  void set_waits(absl::Duration producer, absl::Duration decode) {
    producer_wait_ = producer;
    decode_wait_ = decode;
  }

 private:
  std::atomic<int>* const producer_;
  std::atomic<int>* const dispatch_;
  std::atomic<bool> in_producer_{true}, in_dispatch_{true};
  const int producer_ahead_;
  const int dispatch_ahead_;
  absl::Duration predicted_ttft_;
  absl::Duration producer_wait_, decode_wait_;
};

class Admission {
 public:
  // `max_queue_wait` zero turns shedding by the prediction off; `prefill_queue` still bounds
  // the requests ahead for the base model. Nothing is owned; `metrics` may be null.
  Admission(absl::Duration max_queue_wait, int prefill_queue, rpc::DecodeRegistry* registry,
            metrics::Registry* metrics);

  // Admits a request of `model`, or refuses it: RESOURCE_EXHAUSTED naming the predicted TTFT
  // and limits.max_queue_wait, or the full prefill queue, with RetryAfterSeconds set (the
  // seconds until the backlog ahead should have drained below the admission bound).
  absl::StatusOr<std::shared_ptr<AdmissionTicket>> Admit(const std::string& model,
                                                         const std::string& request_id);

  void ObserveProducer(absl::Duration held) { estimator_.ObserveProducer(held); }
  void ObserveDecode(const std::string& model, absl::Duration first_token_work,
                     absl::Duration slot_held) {
    estimator_.ObserveDecode(model, first_token_work, slot_held);
  }
  // A request of `model` refused elsewhere for load (reason "prefill_queue").
  void CountShed(const std::string& model, const std::string& reason);

 private:
  const absl::Duration max_queue_wait_;
  const int prefill_queue_;
  rpc::DecodeRegistry* const registry_;
  TtftEstimator estimator_;
  std::atomic<int> producer_{0};
  std::atomic<int> dispatch_{0};
  metrics::CounterFamily* shed_ = nullptr;         // {model, reason}
  metrics::HistogramFamily* predicted_ = nullptr;  // {model}
};

// `status` with a retry delay attached (a status payload), for the API edges to send on.
absl::Status WithRetryAfter(absl::Status status, int seconds);
// The attached retry delay in seconds; 0 when none is attached.
int RetryAfterSeconds(const absl::Status& status);

}  // namespace scd

#endif  // SCD_PREFILL_SERVER_ADMISSION_H_
