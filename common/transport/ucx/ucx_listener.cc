// The receiving end of the UCX transport (see ucx_listener.h).
//
// Lifetime: ListenerCore and every ServerEp are shared by the Listener object and by the
// closures and request handlers on the progress thread. The core keeps each ServerEp in
// `eps_` until UCX has closed its endpoint, because UCX holds a raw pointer to it as the
// error-handler argument. Nothing here owns the UcxWorker, so no closure can end up
// destroying the worker from its own thread.
#include "common/transport/ucx/ucx_listener.h"

#include <arpa/inet.h>

#include <deque>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/mutex.h"
#include "common/base/status_macros.h"
#include "common/transport/address.h"
#include "common/transport/frame.h"
#include "common/transport/inbox.h"
#include "common/transport/ucx/ucx_status.h"

namespace scd::transport {
namespace {

constexpr char kScheme[] = "ucx";
constexpr absl::Duration kCloseWait = absl::Seconds(5);

const EncodedHeader& HelloFrame() {
  static const EncodedHeader hello = EncodeHeader(FrameHeader{FrameType::kHello});
  return hello;
}

class ListenerCore;

// One accepted endpoint and where its byte stream stands.
struct ServerEp {
  enum class State { kHeader, kToken, kBody, kAwaitingSpace, kClosed };

  std::shared_ptr<ListenerCore> core;
  ucp_ep_h ep = nullptr;
  std::string peer;
  State state = State::kHeader;
  EncodedHeader header_bytes{};
  FrameHeader header;
  TransferToken token{};  // the DATA frame's, once received
  Message message;        // the body being received, or verified and waiting for inbox space
};

class ListenerCore : public std::enable_shared_from_this<ListenerCore> {
 public:
  ListenerCore(UcxWorker* worker, const TransportOptions& options)
      : worker_(worker), options_(options), inbox_(options.max_inbox_messages) {}

  Inbox& inbox() { return inbox_; }
  const std::string& address() const { return address_; }

  // Progress thread: binds and starts accepting.
  absl::Status Open(const sockaddr_in& bind_to) {
    ucp_listener_params_t params{};
    params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&bind_to);
    params.sockaddr.addrlen = sizeof(bind_to);
    params.conn_handler.cb = &ListenerCore::OnConnRequest;
    params.conn_handler.arg = this;
    ucs_status_t status = ucp_listener_create(worker_->worker(), &params, &listener_);
    if (status != UCS_OK) {
      listener_ = nullptr;
      return UcxStatus(status, absl::StrCat("listening on ", FormatAddress(kScheme, bind_to)));
    }
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    status = ucp_listener_query(listener_, &attr);
    if (status != UCS_OK) return UcxStatus(status, "ucp_listener_query");
    sockaddr_in bound = bind_to;
    bound.sin_port = reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port;
    address_ = FormatAddress(kScheme, bound);
    return absl::OkStatus();
  }

  // Progress thread: stops accepting and force-closes every endpoint.
  void Shutdown() {
    closing_ = true;
    if (listener_ != nullptr) ucp_listener_destroy(listener_);
    listener_ = nullptr;
    blocked_.clear();
    std::vector<std::shared_ptr<ServerEp>> eps;
    for (auto& [raw, ep] : eps_) eps.push_back(ep);
    for (auto& ep : eps) CloseEp(ep);
    MaybeAllClosed();
  }

  // Any thread: waits (bounded) for Shutdown's endpoint closes to complete.
  void AwaitAllClosed() {
    scd::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&all_closed_), kCloseWait);
  }

  // Progress thread: parked endpoints deliver as far as the inbox has room.
  void DrainBlocked() {
    while (!blocked_.empty()) {
      std::shared_ptr<ServerEp> sep = blocked_.front();
      if (sep->state != ServerEp::State::kAwaitingSpace) {
        blocked_.pop_front();
        continue;
      }
      if (!inbox_.TryPush(sep->message)) return;
      blocked_.pop_front();
      Acknowledge(sep, absl::OkStatus());
    }
  }

 private:
  static void OnConnRequest(ucp_conn_request_h request, void* arg) {
    static_cast<ListenerCore*>(arg)->Accept(request);
  }

  static void OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
    auto* raw = static_cast<ServerEp*>(arg);
    ListenerCore& core = *raw->core;
    auto it = core.eps_.find(raw);
    if (it == core.eps_.end()) return;
    core.Fail(it->second, UcxStatus(status, "endpoint error"));
  }

  void Accept(ucp_conn_request_h request) {
    if (closing_ || listener_ == nullptr) {
      if (listener_ != nullptr) ucp_listener_reject(listener_, request);
      return;
    }
    auto sep = std::make_shared<ServerEp>();
    sep->core = shared_from_this();
    ucp_conn_request_attr_t attr{};
    attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    if (ucp_conn_request_query(request, &attr) == UCS_OK &&
        attr.client_address.ss_family == AF_INET) {
      sep->peer = FormatAddress(kScheme, reinterpret_cast<const sockaddr_in&>(attr.client_address));
    } else {
      sep->peer = "ucx://unknown";
    }
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.conn_request = request;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &ListenerCore::OnEndpointError;
    params.err_handler.arg = sep.get();
    if (ucp_ep_create(worker_->worker(), &params, &sep->ep) != UCS_OK) return;  // peer retries
    eps_[sep.get()] = sep;
    {
      scd::MutexLock lock(&mu_);
      all_closed_ = false;
    }
    UcxStreamSend(sep->ep, HelloFrame().data(), HelloFrame().size(), [](ucs_status_t) {});
    ReadHeader(sep);
  }

  void ReadHeader(const std::shared_ptr<ServerEp>& sep) {
    sep->state = ServerEp::State::kHeader;
    UcxStreamRecv(sep->ep, sep->header_bytes.data(), sep->header_bytes.size(),
                  [sep](ucs_status_t s) { sep->core->OnHeader(sep, s); });
  }

  void OnHeader(const std::shared_ptr<ServerEp>& sep, ucs_status_t status) {
    if (sep->state == ServerEp::State::kClosed) return;
    if (status != UCS_OK) return Fail(sep, UcxStatus(status, "receiving a frame header"));
    auto header = DecodeHeader(sep->header_bytes, options_.max_message_bytes);
    if (header.ok() && header->type != FrameType::kData) {
      header = absl::DataLossError("unexpected frame type");
    }
    if (!header.ok()) {
      Report(*sep, 0,
             absl::Status(header.status().code(),
                          absl::StrCat(header.status().message(), "; connection dropped")));
      return CloseEp(sep);
    }
    sep->header = *header;
    sep->token = TransferToken{};
    sep->state = ServerEp::State::kToken;
    UcxStreamRecv(sep->ep, sep->token.data(), sep->token.size(),
                  [sep](ucs_status_t s) { sep->core->OnToken(sep, s); });
  }

  // The transfer token after a DATA header; a bad one is a damaged header (frame.h).
  void OnToken(const std::shared_ptr<ServerEp>& sep, ucs_status_t status) {
    if (sep->state == ServerEp::State::kClosed) return;
    if (status != UCS_OK) return Fail(sep, UcxStatus(status, "receiving a transfer token"));
    if (absl::Status intact = VerifyToken(sep->header, sep->token); !intact.ok()) {
      Report(*sep, 0,
             absl::Status(intact.code(), absl::StrCat(intact.message(), "; connection dropped")));
      return CloseEp(sep);
    }
    Message& message = sep->message;
    message = Message();
    message.request_id = sep->header.request_id;
    message.token = sep->token;
    message.peer = sep->peer;
    if (!AllocateBody(sep->header.body_length, &message)) {
      Report(*sep, message.request_id,
             absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", sep->header.body_length,
                                                       " bytes; connection dropped")));
      return CloseEp(sep);
    }
    sep->state = ServerEp::State::kBody;
    if (message.size == 0) return OnBody(sep, UCS_OK);
    UcxStreamRecv(sep->ep, message.data.get(), message.size,
                  [sep](ucs_status_t s) { sep->core->OnBody(sep, s); });
  }

  void OnBody(const std::shared_ptr<ServerEp>& sep, ucs_status_t status) {
    if (sep->state == ServerEp::State::kClosed) return;
    if (status != UCS_OK) return Fail(sep, UcxStatus(status, "receiving a frame body"));
    const absl::Status verdict = VerifyBody(sep->header, sep->message.body());
    if (!verdict.ok()) {
      Report(*sep, sep->header.request_id, verdict);
      return Acknowledge(sep, verdict);
    }
    sep->state = ServerEp::State::kAwaitingSpace;
    if (blocked_.empty() && inbox_.TryPush(sep->message)) return Acknowledge(sep, verdict);
    blocked_.push_back(sep);  // acknowledged by DrainBlocked once Receive makes room
  }

  void Acknowledge(const std::shared_ptr<ServerEp>& sep, const absl::Status& verdict) {
    std::string text;
    const EncodedHeader ack = EncodeHeader(MakeAck(sep->header, verdict, &text));
    std::string frame(reinterpret_cast<const char*>(ack.data()), ack.size());
    frame += text;
    UcxStreamSendCopy(sep->ep, std::move(frame), [](ucs_status_t) {});
    ReadHeader(sep);
  }

  // The endpoint failed: a message cut off mid-body is reported, then the endpoint closes.
  void Fail(const std::shared_ptr<ServerEp>& sep, const absl::Status& why) {
    if (sep->state == ServerEp::State::kClosed) return;
    if (sep->state == ServerEp::State::kBody && !closing_) {
      Report(*sep, sep->header.request_id,
             absl::UnavailableError(absl::StrCat("request ", sep->header.request_id,
                                                 " cut off mid-body (", sep->header.body_length,
                                                 " bytes announced): ", why.message())));
    }
    CloseEp(sep);
  }

  // Loss reports keep the request id when the header was valid, and the token once it came.
  void Report(const ServerEp& sep, uint64_t request_id, const absl::Status& why) {
    Message report;
    report.request_id = request_id;
    if (request_id != 0) report.token = sep.token;
    report.status = absl::Status(why.code(), absl::StrCat("from ", sep.peer, ": ", why.message()));
    report.peer = sep.peer;
    inbox_.PushReport(std::move(report));
  }

  void CloseEp(const std::shared_ptr<ServerEp>& sep) {
    if (sep->state == ServerEp::State::kClosed) return;
    sep->state = ServerEp::State::kClosed;
    sep->message = Message();
    UcxCloseEndpoint(sep->ep, [sep] {
      ListenerCore& core = *sep->core;
      core.eps_.erase(sep.get());
      core.MaybeAllClosed();
    });
  }

  void MaybeAllClosed() {
    if (!closing_ || !eps_.empty()) return;
    scd::MutexLock lock(&mu_);
    all_closed_ = true;
  }

  UcxWorker* const worker_;
  const TransportOptions options_;
  Inbox inbox_;
  std::string address_;  // written once by Open

  // Progress thread only.
  ucp_listener_h listener_ = nullptr;
  bool closing_ = false;
  absl::flat_hash_map<ServerEp*, std::shared_ptr<ServerEp>> eps_;
  std::deque<std::shared_ptr<ServerEp>> blocked_;

  scd::Mutex mu_;
  bool all_closed_ ABSL_GUARDED_BY(mu_) = true;
};

class UcxListener : public Listener {
 public:
  UcxListener(std::shared_ptr<UcxWorker> worker, std::shared_ptr<ListenerCore> core)
      : worker_(std::move(worker)), core_(std::move(core)) {
    std::weak_ptr<ListenerCore> weak = core_;
    UcxWorker* raw_worker = worker_.get();  // Receive runs only while this listener lives
    core_->inbox().SetOnSpace([weak, raw_worker] {
      raw_worker->Post([weak] {
        if (auto core = weak.lock()) core->DrainBlocked();
      });
    });
  }

  ~UcxListener() override { Close(); }

  absl::StatusOr<Message> Receive(absl::Time deadline) override {
    return core_->inbox().Pop(deadline);
  }

  void Close() override {
    scd::MutexLock lock(&close_mu_);
    if (closed_) return;
    closed_ = true;
    core_->inbox().Close();
    worker_->Run([core = core_] { core->Shutdown(); });
    core_->AwaitAllClosed();
  }

  const std::string& address() const override { return core_->address(); }

 private:
  const std::shared_ptr<UcxWorker> worker_;
  const std::shared_ptr<ListenerCore> core_;
  scd::Mutex close_mu_;
  bool closed_ ABSL_GUARDED_BY(close_mu_) = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Listener>> ListenUcx(std::shared_ptr<UcxWorker> worker,
                                                    const std::string& address,
                                                    const TransportOptions& options) {
  SCD_ASSIGN_OR_RETURN(const sockaddr_in bind_to, ResolveAddress(address, kScheme));
  auto core = std::make_shared<ListenerCore>(worker.get(), options);
  absl::Status opened;
  worker->Run([&] {
    opened = core->Open(bind_to);
    if (!opened.ok()) core->Shutdown();
  });
  SCD_RETURN_IF_ERROR(opened);
  return std::unique_ptr<Listener>(new UcxListener(std::move(worker), std::move(core)));
}

}  // namespace scd::transport
