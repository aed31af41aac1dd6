// See refusal_log.h.
#include "common/daemon/refusal_log.h"

#include "absl/time/clock.h"
#include "common/daemon/event_log.h"

namespace scd::daemon {
namespace {

// Hosts remembered at most; past it, entries whose interval ended are forgotten, so that a
// scan from many addresses cannot grow memory without bound.
constexpr size_t kMaxRemembered = 4096;

}  // namespace

std::string PeerHost(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  // "host:port": the port is all digits. Anything else (no port) is kept whole.
  if (colon == std::string::npos || colon + 1 == peer.size() ||
      peer.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
    return peer;
  }
  return peer.substr(0, colon);
}

void RefusalLog::Refuse(const std::string& peer, const std::string& reason,
                        const std::string& message, nlohmann::json fields) {
  if (counter_ != nullptr) {
    if (auto c = counter_->WithLabels({reason}); c.ok()) (*c)->Increment();
  }
  const absl::Time now = absl::Now();
  int64_t repeats = 0;
  {
    scd::MutexLock lock(&mu_);
    if (seen_.size() >= kMaxRemembered) {
      for (auto it = seen_.begin(); it != seen_.end();) {
        it = now - it->second.logged >= interval_ ? seen_.erase(it) : std::next(it);
      }
    }
    auto [it, fresh] = seen_.try_emplace({PeerHost(peer), reason});
    Seen& s = it->second;
    if (!fresh && now - s.logged < interval_) {
      ++s.unlogged;
      return;
    }
    repeats = s.unlogged;
    s.logged = now;
    s.unlogged = 0;
  }
  if (!fields.is_object()) fields = nlohmann::json::object();
  fields["peer"] = peer;
  fields["reason"] = reason;
  fields["message"] = message;
  if (repeats > 0) fields["repeats"] = repeats;  // refused since the last line, not logged
  LogWarning(event_, std::move(fields));
}

}  // namespace scd::daemon
