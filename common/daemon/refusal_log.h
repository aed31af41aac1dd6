// RefusalLog: what a daemon does each time it refuses a peer (a control-plane call with the
// wrong token or no valid client certificate, a Decode call without one, a data-plane payload
// whose transfer token does not match): one warning line naming the peer's address and the
// reason, and one increment of a counter labelled with the reason (scd_registry_rejected_total,
// scd_decode_rejected_total, scd_payload_rejected_total; docs/CONFIG.md, "Securing a cluster").
//
// A refused peer that keeps trying must not flood the log: the first refusal of each (peer
// host, reason) is logged at once, and later ones at most once per `interval` as one line
// whose "repeats" field says how many refusals it stands for. The counter counts every one.
#ifndef SCD_COMMON_DAEMON_REFUSAL_LOG_H_
#define SCD_COMMON_DAEMON_REFUSAL_LOG_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "common/base/mutex.h"
#include "common/metrics/registry.h"
#include "nlohmann/json.hpp"

namespace scd::daemon {

class RefusalLog {
 public:
  // `event` names the log line; `counter` (one label, the reason) may be null.
  RefusalLog(std::string event, metrics::CounterFamily* counter,
             absl::Duration interval = absl::Minutes(1))
      : event_(std::move(event)), counter_(counter), interval_(interval) {}
  RefusalLog(const RefusalLog&) = delete;
  RefusalLog& operator=(const RefusalLog&) = delete;

  // Records one refusal of `peer` ("ipv4:10.0.0.7:50312", "tcp://10.0.0.7:41000") for `reason`
  // (a short label: "token", "no_certificate", ...). `message` says what was wrong; `fields`
  // (a JSON object) adds to the line.
  void Refuse(const std::string& peer, const std::string& reason, const std::string& message,
              nlohmann::json fields = nlohmann::json::object());

 private:
  struct Seen {
    absl::Time logged;
    int64_t unlogged = 0;  // refusals since that line
  };

  const std::string event_;
  metrics::CounterFamily* const counter_;
  const absl::Duration interval_;
  scd::Mutex mu_;
  std::map<std::pair<std::string, std::string>, Seen> seen_ ABSL_GUARDED_BY(mu_);
};

// The peer's host: its address without the port ("ipv4:10.0.0.7", "tcp://10.0.0.7").
std::string PeerHost(const std::string& peer);

}  // namespace scd::daemon

#endif  // SCD_COMMON_DAEMON_REFUSAL_LOG_H_
