// The sending end of a UCX connection (see ucx_connection.h).
//
// Lifetime: UcxClient is shared by the Connection object and by every closure and request
// handler on the progress thread; while its endpoint is open it also holds a reference to
// itself, because UCX keeps a raw pointer to it as the endpoint's error-handler argument.
// That reference is dropped when the endpoint's close completes.
#include "common/transport/ucx/ucx_connection.h"

#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/mutex.h"
#include "common/base/status_macros.h"
#include "common/transport/address.h"
#include "common/transport/frame.h"
#include "common/transport/frame_sender.h"
#include "common/transport/ucx/ucx_status.h"

namespace scd::transport {
namespace {

constexpr uint64_t kMaxAckBodyBytes = 64 << 10;
// How long teardown waits for UCX to finish closing an endpoint.
constexpr absl::Duration kCloseWait = absl::Seconds(5);

// One write handed to the progress thread, and its outcome.
struct PendingWrite {
  scd::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  ucs_status_t status ABSL_GUARDED_BY(mu) = UCS_OK;

  void Finish(ucs_status_t result) {
    scd::MutexLock lock(&mu);
    done = true;
    status = result;
  }
  // True when finished before `deadline`.
  bool Wait(absl::Time deadline) {
    scd::MutexLock lock(&mu);
    return mu.AwaitWithDeadline(absl::Condition(&done), deadline);
  }
};

class UcxClient : public std::enable_shared_from_this<UcxClient> {
 public:
  UcxClient(UcxWorker* worker, std::string peer, const TransportOptions& options,
            std::shared_ptr<BandwidthLimiter> limiter)
      : worker_(worker),
        peer_(std::move(peer)),
        options_(options),
        sender_(
            options_, std::move(limiter),
            [this](const uint8_t* data, size_t size, absl::Time deadline) {
              return Write(data, size, deadline);
            },
            [this](const absl::Status&) {
              {
                scd::MutexLock lock(&mu_);
                broken_ = true;
              }
              worker_->Post([self = shared_from_this()] { self->CloseEndpoint(); });
            }) {}

  FrameSender& sender() { return sender_; }
  const std::string& peer() const { return peer_; }

  // Progress thread: creates the endpoint and starts reading the receiver's frames.
  absl::Status Start(const sockaddr_in& target) {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&target);
    params.sockaddr.addrlen = sizeof(target);
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &UcxClient::OnEndpointError;
    params.err_handler.arg = this;
    const ucs_status_t status = ucp_ep_create(worker_->worker(), &params, &ep_);
    if (status != UCS_OK) {
      ep_ = nullptr;
      MarkClosed();
      return UcxStatus(status, absl::StrCat("connecting to ", peer_));
    }
    self_ = shared_from_this();
    ReadHeader();
    return absl::OkStatus();
  }

  // Waits for HELLO, a failure, or the deadline.
  absl::Status AwaitHello(absl::Time deadline) {
    {
      scd::MutexLock lock(&mu_);
      auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return hello_ || broken_; };
      mu_.AwaitWithDeadline(absl::Condition(&settled), deadline);
      if (hello_ && !broken_) return absl::OkStatus();
    }
    absl::Status failure = sender_.acks().failure();
    if (failure.ok()) {
      failure = absl::DeadlineExceededError(
          absl::StrCat("no handshake from ", peer_, " before the deadline"));
    }
    return failure;
  }

  // Breaks the connection and waits (bounded) until UCX has closed the endpoint.
  void Shutdown(const absl::Status& reason) {
    sender_.Break(reason);
    scd::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&closed_), kCloseWait);
  }

 private:
  // Caller thread (FrameSender): one stream send, waited for.
  absl::Status Write(const uint8_t* data, size_t size, absl::Time deadline) {
    auto pending = std::make_shared<PendingWrite>();
    worker_->Post([self = shared_from_this(), pending, data, size] {
      if (self->ep_ == nullptr || self->closing_) {
        pending->Finish(UCS_ERR_NOT_CONNECTED);
        return;
      }
      UcxStreamSend(self->ep_, data, size, [pending](ucs_status_t s) { pending->Finish(s); });
    });
    if (!pending->Wait(deadline)) {
      // UCX may still read `data`; a forced close purges the request, after which the caller's
      // buffer is free again. The purge is synchronous in UCX, so this wait is short.
      worker_->Post([self = shared_from_this()] { self->CloseEndpoint(); });
      pending->Wait(absl::InfiniteFuture());
      return absl::DeadlineExceededError(absl::StrCat("UCX send to ", peer_, " timed out"));
    }
    scd::MutexLock lock(&pending->mu);
    return UcxStatus(pending->status, absl::StrCat("UCX send to ", peer_));
  }

  static void OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
    auto* self = static_cast<UcxClient*>(arg);
    self->Fail(UcxStatus(status, "endpoint error"));
  }

  // Progress thread from here on.
  void Fail(const absl::Status& why) {
    sender_.Break(
        absl::UnavailableError(absl::StrCat("connection to ", peer_, " lost: ", why.message())));
  }

  void ReadHeader() {
    UcxStreamRecv(ep_, header_bytes_.data(), header_bytes_.size(),
                  [self = shared_from_this()](ucs_status_t s) { self->OnHeader(s); });
  }

  void OnHeader(ucs_status_t status) {
    if (closing_) return;
    if (status != UCS_OK) return Fail(UcxStatus(status, "receiving a frame header"));
    auto header = DecodeHeader(header_bytes_, kMaxAckBodyBytes);
    if (!header.ok()) return Fail(header.status());
    header_ = *header;
    if (header_.type == FrameType::kHello) {
      scd::MutexLock lock(&mu_);
      hello_ = true;
    } else if (header_.type != FrameType::kAck) {
      return Fail(absl::DataLossError("unexpected frame type from the receiver"));
    } else if (header_.body_length > 0) {
      ack_text_.assign(header_.body_length, '\0');
      UcxStreamRecv(ep_, ack_text_.data(), ack_text_.size(),
                    [self = shared_from_this()](ucs_status_t s) { self->OnAckText(s); });
      return;
    } else {
      sender_.acks().Resolve(header_.sequence, AckToStatus(header_, {}));
    }
    ReadHeader();
  }

  void OnAckText(ucs_status_t status) {
    if (closing_) return;
    if (status != UCS_OK) return Fail(UcxStatus(status, "receiving an ACK"));
    const absl::Span<const uint8_t> body(reinterpret_cast<const uint8_t*>(ack_text_.data()),
                                         ack_text_.size());
    const absl::Status intact = VerifyBody(header_, body);
    if (!intact.ok()) return Fail(intact);
    sender_.acks().Resolve(header_.sequence, AckToStatus(header_, body));
    ReadHeader();
  }

  void CloseEndpoint() {
    if (closing_) return;
    closing_ = true;
    if (ep_ == nullptr) return MarkClosed();
    UcxCloseEndpoint(ep_, [self = shared_from_this()] {
      self->ep_ = nullptr;
      self->MarkClosed();
      self->self_.reset();
    });
  }

  void MarkClosed() {
    scd::MutexLock lock(&mu_);
    closed_ = true;
  }

  UcxWorker* const worker_;
  const std::string peer_;
  const TransportOptions options_;
  FrameSender sender_;

  // Progress thread only.
  ucp_ep_h ep_ = nullptr;
  bool closing_ = false;
  std::shared_ptr<UcxClient> self_;
  EncodedHeader header_bytes_{};
  FrameHeader header_;
  std::string ack_text_;

  scd::Mutex mu_;
  bool hello_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

class UcxConnection : public Connection {
 public:
  UcxConnection(std::shared_ptr<UcxWorker> worker, std::shared_ptr<UcxClient> client)
      : worker_(std::move(worker)), client_(std::move(client)) {}

  ~UcxConnection() override { client_->Shutdown(absl::CancelledError("connection closed")); }

  using Connection::Send;
  absl::Status Send(uint64_t request_id, const TransferToken& token,
                    absl::Span<const uint8_t> bytes, absl::Time deadline) override {
    return client_->sender().Send(request_id, token, bytes, deadline);
  }

  void Close() override { client_->sender().Break(absl::CancelledError("connection closed")); }

  absl::Status health() const override { return client_->sender().acks().failure(); }
  const std::string& peer_address() const override { return client_->peer(); }

 private:
  const std::shared_ptr<UcxWorker> worker_;  // outlives the client's endpoint
  const std::shared_ptr<UcxClient> client_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Connection>> ConnectUcx(std::shared_ptr<UcxWorker> worker,
                                                       const std::string& address,
                                                       absl::Time deadline,
                                                       const TransportOptions& options,
                                                       std::shared_ptr<BandwidthLimiter> limiter) {
  SCD_ASSIGN_OR_RETURN(const sockaddr_in target, ResolveAddress(address, "ucx"));
  auto client = std::make_shared<UcxClient>(worker.get(), address, options, std::move(limiter));
  absl::Status started;
  worker->Run([&] { started = client->Start(target); });
  SCD_RETURN_IF_ERROR(started);
  const absl::Status hello = client->AwaitHello(deadline);
  if (!hello.ok()) {
    client->Shutdown(hello);
    return absl::Status(hello.code(),
                        absl::StrCat("connecting to ", address, ": ", hello.message()));
  }
  return std::unique_ptr<Connection>(new UcxConnection(std::move(worker), std::move(client)));
}

}  // namespace scd::transport
