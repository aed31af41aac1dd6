// TtftEstimator: the prefill daemon's prediction of a new request's time to first token from
// the queues in front of it, for admission (load shedding, prefill_server/admission.h): a
// request predicted to wait past limits.max_queue_wait is refused at once with a retry delay,
// instead of being queued to answer after its client has given up.
//
// A request passes two queues. The base model prefills one request at a time (FIFO enough:
// the producer lock), so it is done after
//     producer = (producer_ahead + 1) × s_p
// where s_p is the mean time one request holds the producer (its prefill; 0 for a prefix-cache
// hit or an oracle payload, so the mean already weighs in the hit rate). A decode daemon runs
// up to B requests at once and queues the rest; a slot frees every D / B seconds on average,
// D being the mean time a request holds a slot (its first-token work f — rebuild, suffix
// prefill, SEKV build — plus its decoding after the first token). With L requests on the
// model's decode daemons and the admitted requests not yet routed there in front, this one
// gets a slot after
//     decode_slot = max(0, L + dispatch_ahead − B + 1) × D / B
// and its first token f after the later of the two:
//     ttft = max(producer, decode_slot) + f.
// (Queueing as in Orca's and DistServe's iteration-level schedulers: a slot turns over once
// per request, whatever the batch does meanwhile.) Slots, loads and D are summed or averaged
// over the model's live decode daemons, which the router keeps evenly loaded.
//
// What is measured: s_p from every request's producer stage, D and f (exponentially weighted
// means, `weight` on the newest sample) from every completed request, per model; B per decode
// daemon as it reports its batch slots at heartbeats, or else, by the registry, as the most
// requests it reported running while it also reported a queue. A daemon of unknown slots has
// a slot for the request, as far as anything measured says: until every daemon of the model
// has known slots, and until a stage has a sample, that stage adds nothing (a cold daemon
// admits everything).
//
// How it errs on the side of waiting longer (so that admitted requests keep their promise):
// a prefill in progress counts as a whole one; every admitted request ahead counts in both
// queues, as if it reached the decode daemons at once (completions during this request's
// own producer wait are credited only through the max); an inferred count of slots is the
// most seen running when full, never more. The HTTP, encode and transfer times around the
// queues are left to the margin.
//
// Thread-safe.
#ifndef SCD_COMMON_SERVING_TTFT_ESTIMATOR_H_
#define SCD_COMMON_SERVING_TTFT_ESTIMATOR_H_

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace scd {

// One live decode daemon of the model, as the router sees it.
struct DecodeQueueView {
  int load = 0;   // requests it holds now, running and queued
  int slots = 0;  // its batch slots (DecodeInstanceStatus::full_slots); 0: unknown
};

// The queues in front of a new request (not counting it).
struct QueueSnapshot {
  int producer_ahead = 0;  // admitted requests that have not finished the producer stage
  int dispatch_ahead = 0;  // admitted requests not yet routed to a decode daemon
  std::vector<DecodeQueueView> decodes;
};

struct TtftEstimate {
  absl::Duration producer;     // until this request's base-model prefill is done
  absl::Duration decode_slot;  // until a decode slot is free for it
  absl::Duration first_token;  // from holding a slot to its first token
  absl::Duration total;        // max(producer, decode_slot) + first_token
};

class TtftEstimator {
 public:
  // `weight` in (0, 1]: the newest sample's share in each mean.
  explicit TtftEstimator(double weight = 0.2) : weight_(weight) {}

  // One request's time holding the base model (zero when it needed no prefill).
  void ObserveProducer(absl::Duration held);
  // One completed request of `model`: its first-token work on the decode daemon and the
  // whole time it held a decode slot (that work included).
  void ObserveDecode(const std::string& model, absl::Duration first_token_work,
                     absl::Duration slot_held);

  // The prediction for a request of `model` arriving behind `queues`.
  TtftEstimate Estimate(const std::string& model, const QueueSnapshot& queues);

  // Whole seconds after which the backlog in front of `estimate` should have drained below
  // `limit`, if nothing else arrived: ceil(total − limit), at least 1 and at most 3600.
  static int RetryAfterSeconds(const TtftEstimate& estimate, absl::Duration limit);

 private:
  struct Mean {
    double value = 0;
    bool seen = false;
    void Add(double sample, double weight);
  };
  struct ModelState {
    Mean first_token_s, slot_held_s;
  };

  const double weight_;
  std::mutex mu_;
  Mean producer_s_;
  std::map<std::string, ModelState> models_;
};

}  // namespace scd

#endif  // SCD_COMMON_SERVING_TTFT_ESTIMATOR_H_
