// See payload_mailbox.h.
#include "decode_server/payload_mailbox.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace scd {

PayloadMailbox::PayloadMailbox(transport::Listener* listener, PayloadMailboxOptions options)
    : listener_(listener), options_(options) {
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
    std::lock_guard<std::mutex> lock(mu_);
    ExpireLocked(absl::Now());
    if (!m.ok()) {
      if (stopped_ || m.status().code() == absl::StatusCode::kCancelled) return;
      continue;  // DEADLINE_EXCEEDED: nothing arrived this second
    }
    if (m->request_id == 0) continue;  // lost before its header: nobody to tell
    Item item;
    item.arrived = absl::Now();
    item.status = m->status;
    item.peer = m->peer;
    if (m->status.ok()) {
      item.bytes.assign(m->data.get(), m->data.get() + m->size);
      stats_.bytes += item.bytes.size();
      ++stats_.received;
    } else {
      ++stats_.corrupted;
    }
    auto old = items_.find(m->request_id);
    if (old != items_.end()) {
      stats_.bytes -= old->second.bytes.size();
      items_.erase(old);
    }
    items_.emplace(m->request_id, std::move(item));
    while (stats_.bytes > options_.max_bytes && !items_.empty()) {
      auto oldest = items_.begin();
      for (auto it = items_.begin(); it != items_.end(); ++it) {
        if (it->second.arrived < oldest->second.arrived) oldest = it;
      }
      stats_.bytes -= oldest->second.bytes.size();
      items_.erase(oldest);
      ++stats_.evicted;
    }
    arrived_.notify_all();
  }
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

absl::StatusOr<std::vector<uint8_t>> PayloadMailbox::Take(uint64_t transfer_id,
                                                          absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto it = items_.find(transfer_id);
    if (it != items_.end()) {
      Item item = std::move(it->second);
      items_.erase(it);
      stats_.bytes -= item.bytes.size();
      if (!item.status.ok()) {
        return absl::Status(item.status.code(),
                            absl::StrCat("payload ", transfer_id, " arrived broken: ",
                                         std::string(item.status.message())));
      }
      ++stats_.taken;
      return std::move(item.bytes);
    }
    if (stopped_) return absl::UnavailableError("decode daemon is shutting down");
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::NotFoundError(absl::StrCat("payload ", transfer_id,
                                              " never arrived on the data plane"));
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
