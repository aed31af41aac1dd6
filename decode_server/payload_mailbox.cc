// See payload_mailbox.h.
#include "decode_server/payload_mailbox.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace scd {
namespace {

const char* RefusalMessage(const std::string& reason) {
  return reason == "no_token"
             ? "the payload carries no transfer token: its sender is not an authenticated "
               "prefill daemon"
             : "the payload's transfer token is not the one its Decode call names";
}

}  // namespace

PayloadMailbox::PayloadMailbox(transport::Listener* listener, PayloadMailboxOptions options,
                               daemon::RefusalLog* refusals)
    : listener_(listener), options_(options), refusals_(refusals) {
  listener_->SetPeerClosedCallback([this](const std::string& peer) { PeerClosed(peer); });
  thread_ = std::thread([this] { Loop(); });
}

PayloadMailbox::~PayloadMailbox() { Stop(); }

void PayloadMailbox::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_ && !thread_.joinable()) return;
    stopped_ = true;
  }
  listener_->SetPeerClosedCallback(nullptr);
  listener_->Close();
  arrived_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PayloadMailbox::Loop() {
  for (;;) {
    // A short wait keeps expiry prompt when nothing arrives.
    absl::StatusOr<transport::Message> m =
        listener_->Receive(absl::Now() + absl::Milliseconds(200));
    bool filed = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ExpireLocked(absl::Now());
      if (!m.ok()) {
        if (stopped_ || m.status().code() == absl::StatusCode::kCancelled) return;
        continue;  // DEADLINE_EXCEEDED: nothing arrived this second
      }
      if (m->request_id == 0) continue;  // lost before its header: nobody to tell
      filed = FileLocked(*m);
    }
    if (filed) {
      arrived_.notify_all();
    } else {
      Record({{m->peer, m->request_id, "no_token"}});
    }
  }
}

bool PayloadMailbox::FileLocked(transport::Message& m) {
  if (!transport::HasToken(m.token)) {
    ++stats_.rejected;
    return false;
  }
  Item item;
  item.arrived = absl::Now();
  item.status = m.status;
  item.peer = m.peer;
  item.token = m.token;
  if (m.status.ok()) {
    item.bytes.assign(m.data.get(), m.data.get() + m.size);
    stats_.bytes += item.bytes.size();
    ++stats_.received;
  } else {
    ++stats_.corrupted;
  }
  // The same id and token again replaces the first; another token is kept beside it.
  auto [lo, hi] = items_.equal_range(m.request_id);
  for (auto it = lo; it != hi; ++it) {
    if (it->second.token == m.token) {
      stats_.bytes -= it->second.bytes.size();
      items_.erase(it);
      break;
    }
  }
  items_.emplace(m.request_id, std::move(item));
  while (stats_.bytes > options_.max_bytes && !items_.empty()) {
    auto oldest = items_.begin();
    for (auto it = items_.begin(); it != items_.end(); ++it) {
      if (it->second.arrived < oldest->second.arrived) oldest = it;
    }
    stats_.bytes -= oldest->second.bytes.size();
    items_.erase(oldest);
    ++stats_.evicted;
  }
  return true;
}

void PayloadMailbox::PeerClosed(const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  closed_peers_[peer] = absl::Now();
}

void PayloadMailbox::ExpireLocked(absl::Time now) {
  for (auto it = items_.begin(); it != items_.end();) {
    auto closed = closed_peers_.find(it->second.peer);
    const bool orphaned =
        closed != closed_peers_.end() && now - closed->second > options_.orphan_ttl;
    if (orphaned || now - it->second.arrived > options_.ttl) {
      stats_.bytes -= it->second.bytes.size();
      it = items_.erase(it);
      ++(orphaned ? stats_.orphaned : stats_.expired);
    } else {
      ++it;
    }
  }
  // A closed sender's messages are all queued before the close is reported, so once its
  // items are gone nothing of its can arrive later (a new connection has a new port).
  for (auto it = closed_peers_.begin(); it != closed_peers_.end();) {
    if (now - it->second > options_.orphan_ttl + absl::Seconds(5)) {
      it = closed_peers_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<PayloadMailbox::Refused> PayloadMailbox::RefuseOthersLocked(
    uint64_t transfer_id, const transport::TransferToken& token) {
  std::vector<Refused> refused;
  auto [it, hi] = items_.equal_range(transfer_id);
  while (it != hi) {
    if (it->second.token == token) {
      ++it;
      continue;
    }
    refused.push_back({it->second.peer, transfer_id, "token_mismatch"});
    stats_.bytes -= it->second.bytes.size();
    ++stats_.rejected;
    it = items_.erase(it);
  }
  return refused;
}

void PayloadMailbox::Record(const std::vector<Refused>& refused) {
  if (refusals_ == nullptr) return;
  for (const Refused& r : refused) {
    refusals_->Refuse(r.peer, r.reason, RefusalMessage(r.reason), {{"transfer_id", r.transfer_id}});
  }
}

absl::StatusOr<std::vector<uint8_t>> PayloadMailbox::Take(uint64_t transfer_id,
                                                          const transport::TransferToken& token,
                                                          absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto [lo, hi] = items_.equal_range(transfer_id);
    auto it = lo;
    while (it != hi && it->second.token != token) ++it;
    if (it != hi) {
      Item item = std::move(it->second);
      items_.erase(it);
      stats_.bytes -= item.bytes.size();
      const std::vector<Refused> refused = RefuseOthersLocked(transfer_id, token);
      if (item.status.ok()) ++stats_.taken;
      lock.unlock();
      Record(refused);
      if (!item.status.ok()) {
        return absl::Status(item.status.code(),
                            absl::StrCat("payload ", transfer_id,
                                         " arrived broken: ", std::string(item.status.message())));
      }
      return std::move(item.bytes);
    }
    if (stopped_) return absl::UnavailableError("decode daemon is shutting down");
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      const std::vector<Refused> refused = RefuseOthersLocked(transfer_id, token);
      lock.unlock();
      Record(refused);
      if (!refused.empty()) {
        return absl::PermissionDeniedError(
            absl::StrCat("payload ", transfer_id, " arrived from ", refused.front().peer,
                         " with a transfer token that is not this call's: refused"));
      }
      return absl::NotFoundError(
          absl::StrCat("payload ", transfer_id, " never arrived on the data plane"));
    }
    arrived_.wait_for(lock, std::chrono::milliseconds(
                                std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - now))));
  }
}

PayloadMailboxStats PayloadMailbox::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PayloadMailboxStats out = stats_;
  out.pending = items_.size();
  return out;
}

}  // namespace scd
