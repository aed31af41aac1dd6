// See payload_sender.h.
#include "prefill_server/payload_sender.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace scd {

absl::StatusOr<std::shared_ptr<transport::Connection>> PayloadSender::ConnectionTo(
    const std::string& address, absl::Time deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = connections_.find(address);
    if (it != connections_.end() && it->second->health().ok()) return it->second;
    if (it != connections_.end()) connections_.erase(it);
  }
  // Connect outside the lock: a slow peer must not stall sends to the others. Two callers may
  // race to connect; the second connection simply replaces the first in the map.
  const absl::Time connect_by = std::min(deadline, absl::Now() + connect_timeout_);
  absl::StatusOr<std::unique_ptr<transport::Connection>> c =
      transport_->Connect(address, connect_by);
  if (!c.ok()) {
    // Our connect timeout, not the request's deadline, ran out: the daemon is unreachable,
    // which another replica may not be.
    if (absl::IsDeadlineExceeded(c.status()) && connect_by < deadline) {
      return absl::UnavailableError(absl::StrCat("no answer within ",
                                                 absl::FormatDuration(connect_timeout_), " (",
                                                 c.status().message(), ")"));
    }
    return c.status();
  }
  std::shared_ptr<transport::Connection> shared(std::move(*c));
  std::lock_guard<std::mutex> lock(mu_);
  connections_[address] = shared;
  return shared;
}

void PayloadSender::Drop(const std::string& address, const transport::Connection* connection) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(address);
  if (it != connections_.end() && it->second.get() == connection) {
    it->second->Close();
    connections_.erase(it);
  }
}

absl::Status PayloadSender::Send(const std::string& address, uint64_t transfer_id,
                                 const transport::TransferToken& token,
                                 absl::Span<const uint8_t> bytes, absl::Time deadline) {
  absl::StatusOr<std::shared_ptr<transport::Connection>> c = ConnectionTo(address, deadline);
  if (!c.ok()) {
    return absl::Status(c.status().code(), absl::StrCat("data plane connect to ", address, ": ",
                                                        std::string(c.status().message())));
  }
  absl::Status st = (*c)->Send(transfer_id, token, bytes, deadline);
  if (!st.ok()) {
    if (st.code() != absl::StatusCode::kDataLoss) Drop(address, c->get());
    return absl::Status(
        st.code(), absl::StrCat("data plane send to ", address, ": ", std::string(st.message())));
  }
  return absl::OkStatus();
}

void PayloadSender::CloseAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [address, c] : connections_) c->Close();
  connections_.clear();
}

}  // namespace scd
