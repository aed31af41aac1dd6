// See admission.h.
#include "prefill_server/admission.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/daemon/event_log.h"

namespace scd {
namespace {

// The retry delay travels as a status payload under a type URL of our own (as openai_error.h
// attaches its fields), so it survives being returned up to the API edges unchanged.
constexpr char kRetryAfterUrl[] = "type.scd-serve/retry-after";

// Admission admits up to this share of limits.max_queue_wait, the rest being the margin for the
// prediction's error. Under sustained overload admission holds the admitted requests' predicted
// TTFT at its bound; on the bundled pair their real TTFT was 0.77-1.31x the prediction (1st to
// 99th percentile) and 1.47x at worst, in a second-long stall of the shared host
// (docs/RESULTS.md, "Load shedding"), so a bound of the limit itself lets about half of them
// past it. The margin costs no throughput while the overload lasts: the decode slots stay
// busy with a shorter queue behind them.
constexpr double kAdmitShare = 2.0 / 3.0;

int64_t Ms(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

}  // namespace

AdmissionTicket::AdmissionTicket(std::atomic<int>* producer, std::atomic<int>* dispatch)
    : producer_(producer),
      dispatch_(dispatch),
      producer_ahead_(producer->fetch_add(1)),
      dispatch_ahead_(dispatch->fetch_add(1)) {}

AdmissionTicket::~AdmissionTicket() {
  LeaveProducer();
  LeaveDispatch();
}

void AdmissionTicket::LeaveProducer() {
  if (in_producer_.exchange(false)) producer_->fetch_sub(1);
}

void AdmissionTicket::LeaveDispatch() {
  if (in_dispatch_.exchange(false)) dispatch_->fetch_sub(1);
}

Admission::Admission(absl::Duration max_queue_wait, int prefill_queue,
                     rpc::DecodeRegistry* registry, metrics::Registry* metrics)
    : max_queue_wait_(max_queue_wait), prefill_queue_(prefill_queue), registry_(registry) {
  if (metrics == nullptr) return;
  shed_ = metrics
              ->AddCounterFamily("scd_requests_shed_total",
                                 "Requests refused for load before any work (429 / "
                                 "RESOURCE_EXHAUSTED), by reason: queue_wait (predicted time "
                                 "to first token over limits.max_queue_wait), prefill_queue "
                                 "(limits.prefill_queue full).",
                                 {"model", "reason"})
              .value();
  predicted_ = metrics
                   ->AddHistogramFamily("scd_predicted_ttft_seconds",
                                        "Admission's predicted time to first token of every "
                                        "request it weighed, admitted or shed.",
                                        {"model"}, metrics::ExponentialBuckets(0.001, 2, 18))
                   .value();
}

absl::StatusOr<std::shared_ptr<AdmissionTicket>> Admission::Admit(const std::string& model,
                                                                  const std::string& request_id) {
  // Joining the queues first: requests admitted at the same moment count each other.
  auto ticket = std::make_shared<AdmissionTicket>(&producer_, &dispatch_);
  QueueSnapshot queues;
  queues.producer_ahead = ticket->producer_ahead();
  queues.dispatch_ahead = ticket->dispatch_ahead();
  for (const rpc::DecodeInstanceStatus& d : registry_->Instances()) {
    if (d.info.model_name != model || d.quarantined) continue;
    queues.decodes.push_back({d.load, d.full_slots});
  }
  const TtftEstimate e = estimator_.Estimate(model, queues);
  ticket->set_predicted_ttft(e.total);
  // Of the producer's time, the requests ahead's share (its own prefill is the mode's cost).
  ticket->set_waits(
      e.producer * (static_cast<double>(queues.producer_ahead) / (queues.producer_ahead + 1)),
      e.decode_slot);
  if (predicted_ != nullptr) {
    predicted_->WithLabels({model}).value()->Observe(absl::ToDoubleSeconds(e.total));
  }
  const absl::Duration bound = max_queue_wait_ * kAdmitShare;
  const bool late = max_queue_wait_ > absl::ZeroDuration() && e.total > bound;
  // Ahead of it for the base model: one prefilling and the rest waiting, as limits.prefill_queue
  // counts them.
  if (!late && queues.producer_ahead <= prefill_queue_) return ticket;
  if (!late) {
    CountShed(model, "prefill_queue");
    return WithRetryAfter(absl::ResourceExhaustedError(absl::StrCat(
                              "the prefill queue is full (", prefill_queue_,
                              " requests waiting, limits.prefill_queue); retry after 1 s")),
                          1);
  }
  const int retry_after = TtftEstimator::RetryAfterSeconds(e, bound);
  CountShed(model, "queue_wait");
  daemon::LogWarning("request_shed", {{"request_id", request_id},
                                      {"model", model},
                                      {"predicted_ttft_ms", Ms(e.total)},
                                      {"producer_ms", Ms(e.producer)},
                                      {"decode_slot_ms", Ms(e.decode_slot)},
                                      {"producer_ahead", queues.producer_ahead},
                                      {"dispatch_ahead", queues.dispatch_ahead},
                                      {"retry_after_s", retry_after}});
  return WithRetryAfter(absl::ResourceExhaustedError(absl::StrCat(
                            "the server is overloaded: the predicted time to first token, ",
                            Ms(e.total), " ms, leaves no margin within limits.max_queue_wait (",
                            absl::FormatDuration(max_queue_wait_), "; admitted up to ", Ms(bound),
                            " ms); retry after ", retry_after, " s")),
                        retry_after);
}

void Admission::CountShed(const std::string& model, const std::string& reason) {
  if (shed_ != nullptr) shed_->WithLabels({model, reason}).value()->Increment();
}

absl::Status WithRetryAfter(absl::Status status, int seconds) {
  if (!status.ok()) status.SetPayload(kRetryAfterUrl, absl::Cord(absl::StrCat(seconds)));
  return status;
}

int RetryAfterSeconds(const absl::Status& status) {
  auto payload = status.GetPayload(kRetryAfterUrl);  // absl::optional, not std:: on Debian
  int seconds = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &seconds)) return 0;
  return seconds > 0 ? seconds : 0;
}

}  // namespace scd
