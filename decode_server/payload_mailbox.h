// PayloadMailbox: where a decode daemon keeps SCD payloads that arrived on the data plane
// until the Decode RPC naming them comes in. The prefill daemon sends the payload first (the
// transport acknowledges it once the checksum is verified, transport.h) and then calls
// Decode.Generate with its transfer id, so the RPC normally finds the payload waiting; Take
// also waits a little for one still being moved from the listener.
//
// Invariants: each payload is taken at most once; a payload nobody claims within `ttl` is
// dropped, and so is the oldest when the byte cap is exceeded, so a misbehaving peer cannot
// grow memory without bound. A payload whose sender's connection ended (its prefill daemon
// was killed between send and RPC, or the link died) is kept only `orphan_ttl` more: its RPC,
// if one is coming at all, is already on its way, and a restarted prefill daemon must not
// find the decode daemon holding state for the dead one (transports that report closed
// connections; see Listener::SetPeerClosedCallback). A message that arrived corrupted is
// kept as its error, so the RPC fails at once with DATA_LOSS instead of waiting for a payload
// that will never come.
//
// Authentication: the data plane itself admits any peer that reaches the port, so a payload
// is handed only to the Decode call that names both its transfer id and its transfer token
// (random per transfer, transport.h; the call is authenticated by mutual TLS and the cluster
// token, peer_auth.h). A payload without a token is refused on arrival; one whose token is
// not the claiming call's is refused when the call comes (and does not displace the right
// one, which may still be on its way). Each refusal is logged with the sender's address and
// counted (RefusalLog: payload_refused, scd_payload_rejected_total{reason}).
#ifndef SCD_DECODE_SERVER_PAYLOAD_MAILBOX_H_
#define SCD_DECODE_SERVER_PAYLOAD_MAILBOX_H_

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/daemon/refusal_log.h"
#include "common/transport/transport.h"

namespace scd {

struct PayloadMailboxOptions {
  absl::Duration ttl = absl::Seconds(60);
  absl::Duration orphan_ttl = absl::Seconds(5);  // after the sender's connection ended
  size_t max_bytes = size_t{1} << 30;
};

struct PayloadMailboxStats {
  long received = 0, taken = 0, expired = 0, evicted = 0, corrupted = 0, orphaned = 0;
  long rejected = 0;   // without a token, or with another call's
  size_t pending = 0;  // payloads (or loss reports) waiting for their RPC
  size_t bytes = 0;
};

class PayloadMailbox {
 public:
  // Starts a thread that drains `listener` (not owned; must outlive Stop()). Refusals go to
  // `refusals` (not owned; may be null).
  PayloadMailbox(transport::Listener* listener, PayloadMailboxOptions options,
                 daemon::RefusalLog* refusals = nullptr);
  ~PayloadMailbox();  // Stop()

  // The payload sent with `transfer_id` and `token`, waiting until `deadline` for it. NotFound
  // naming the id when it did not arrive in time; PermissionDenied when only payloads with
  // another token came under that id (refused); the transport's error (DATA_LOSS,
  // UNAVAILABLE) when it arrived broken; Unavailable once stopped.
  absl::StatusOr<std::vector<uint8_t>> Take(uint64_t transfer_id,
                                            const transport::TransferToken& token,
                                            absl::Time deadline);

  // Closes the listener and joins the thread. Idempotent.
  void Stop();

  PayloadMailboxStats stats() const;

 private:
  struct Item {
    absl::Status status;
    std::vector<uint8_t> bytes;
    absl::Time arrived;
    std::string peer;
    transport::TransferToken token{};
  };
  // A refusal to log once the lock is released.
  struct Refused {
    std::string peer;
    uint64_t transfer_id = 0;
    std::string reason;
  };
  void Loop();
  // Files one received message (or loss report); false when it is refused.
  bool FileLocked(transport::Message& m);
  void ExpireLocked(absl::Time now);
  void PeerClosed(const std::string& peer);
  // Removes the items of `transfer_id` whose token is not `token`, as refusals.
  std::vector<Refused> RefuseOthersLocked(uint64_t transfer_id,
                                          const transport::TransferToken& token);
  void Record(const std::vector<Refused>& refused);

  transport::Listener* listener_;
  const PayloadMailboxOptions options_;
  daemon::RefusalLog* const refusals_;
  mutable std::mutex mu_;
  std::condition_variable arrived_;
  // By transfer id; one id may hold several items with different tokens (a forged one must
  // not displace the right one).
  std::multimap<uint64_t, Item> items_;
  // Senders whose connection ended, and when; forgotten once nothing of theirs can remain.
  std::map<std::string, absl::Time> closed_peers_;
  bool stopped_ = false;
  PayloadMailboxStats stats_;
  std::thread thread_;
};

}  // namespace scd

#endif  // SCD_DECODE_SERVER_PAYLOAD_MAILBOX_H_
