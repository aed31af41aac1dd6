// The UCX progress thread and request helpers (see ucx_worker.h).
#include "common/transport/ucx/ucx_worker.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/transport/ucx/ucx_status.h"

namespace scd::transport {
namespace {

// Backstop for the event-driven sleep: even if a wakeup were missed, the worker progresses
// at least this often.
constexpr int kMaxSleepMs = 50;

// One posted request: its handler and any bytes it must keep alive.
struct UcxOp {
  UcxDone done;
  std::string storage;
};

void Complete(UcxOp* op, ucs_status_t status) {
  UcxDone done = std::move(op->done);
  delete op;
  done(status);
}

void OnSend(void* request, ucs_status_t status, void* user_data) {
  ucp_request_free(request);
  Complete(static_cast<UcxOp*>(user_data), status);
}

void OnRecv(void* request, ucs_status_t status, size_t /*length*/, void* user_data) {
  ucp_request_free(request);
  Complete(static_cast<UcxOp*>(user_data), status);
}

// A request pointer that is not a pending request means UCX already finished (NULL) or
// failed (an error pointer) without calling the callback.
void FinishImmediate(void* request, UcxOp* op) {
  if (request == nullptr) {
    Complete(op, UCS_OK);
  } else if (UCS_PTR_IS_ERR(request)) {
    Complete(op, UCS_PTR_STATUS(request));
  }
}

void Send(ucp_ep_h ep, const void* data, size_t size, UcxOp* op) {
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.send = OnSend;
  param.user_data = op;
  FinishImmediate(ucp_stream_send_nbx(ep, data, size, &param), op);
}

}  // namespace

absl::StatusOr<std::shared_ptr<UcxWorker>> UcxWorker::Create(const std::string& transports) {
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) return UcxStatus(status, "reading the UCX configuration");
  if (!transports.empty()) status = ucp_config_modify(config, "TLS", transports.c_str());
  if (status != UCS_OK) {
    ucp_config_release(config);
    return UcxStatus(status, absl::StrCat("setting UCX_TLS=", transports));
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_STREAM | UCP_FEATURE_WAKEUP;
  ucp_context_h context = nullptr;
  status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (status != UCS_OK) {
    return absl::UnavailableError(UcxStatus(status, "ucp_init").message());
  }
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  status = ucp_worker_create(context, &worker_params, &worker);
  if (status != UCS_OK) {
    ucp_cleanup(context);
    return absl::UnavailableError(UcxStatus(status, "ucp_worker_create").message());
  }
  int worker_fd = -1;
  status = ucp_worker_get_efd(worker, &worker_fd);
  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (status != UCS_OK || wake_fd < 0) {
    if (wake_fd >= 0) close(wake_fd);
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
    return status != UCS_OK ? UcxStatus(status, "ucp_worker_get_efd")
                            : absl::InternalError("eventfd failed");
  }
  return std::shared_ptr<UcxWorker>(new UcxWorker(context, worker, wake_fd, worker_fd));
}

UcxWorker::UcxWorker(ucp_context_h context, ucp_worker_h worker, int wake_fd, int worker_fd)
    : context_(context), worker_(worker), wake_fd_(wake_fd), worker_fd_(worker_fd) {
  thread_ = std::thread([this] { Loop(); });
}

UcxWorker::~UcxWorker() {
  {
    scd::MutexLock lock(&mu_);
    stopping_ = true;
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  thread_.join();
  ucp_worker_destroy(worker_);  // also destroys any endpoint its owner failed to close
  ucp_cleanup(context_);
  close(wake_fd_);
}

void UcxWorker::Post(std::function<void()> task) {
  {
    scd::MutexLock lock(&mu_);
    if (stopping_) return;
    tasks_.push_back(std::move(task));
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void UcxWorker::Run(const std::function<void()>& task) {
  scd::Notification done;
  Post([&] {
    task();
    done.Notify();
  });
  done.WaitForNotification();
}

void UcxWorker::Loop() {
  for (;;) {
    std::deque<std::function<void()>> tasks;
    bool stopping = false;
    {
      scd::MutexLock lock(&mu_);
      tasks.swap(tasks_);
      stopping = stopping_;
    }
    for (auto& task : tasks) task();
    while (ucp_worker_progress(worker_) != 0) {
    }
    if (stopping) return;
    if (!tasks.empty()) continue;  // tasks may have queued more work; check before sleeping
    if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;
    pollfd fds[2] = {{worker_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    poll(fds, 2, kMaxSleepMs);
    uint64_t drained;
    (void)!read(wake_fd_, &drained, sizeof(drained));
  }
}

void UcxStreamSend(ucp_ep_h ep, const void* data, size_t size, UcxDone done) {
  Send(ep, data, size, new UcxOp{std::move(done), {}});
}

void UcxStreamSendCopy(ucp_ep_h ep, std::string bytes, UcxDone done) {
  auto* op = new UcxOp{std::move(done), std::move(bytes)};
  Send(ep, op->storage.data(), op->storage.size(), op);
}

void UcxStreamRecv(ucp_ep_h ep, void* data, size_t size, UcxDone done) {
  auto* op = new UcxOp{std::move(done), {}};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv_stream = OnRecv;
  param.user_data = op;
  param.flags = UCP_STREAM_RECV_FLAG_WAITALL;
  size_t length = 0;
  FinishImmediate(ucp_stream_recv_nbx(ep, data, size, &length, &param), op);
}

void UcxCloseEndpoint(ucp_ep_h ep, std::function<void()> done) {
  auto* op = new UcxOp{[done = std::move(done)](ucs_status_t) { done(); }, {}};
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = OnSend;
  param.user_data = op;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  FinishImmediate(ucp_ep_close_nbx(ep, &param), op);
}

}  // namespace scd::transport
