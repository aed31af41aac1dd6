// UcxWorker: one UCP context and worker driven by its own progress thread. UCX objects are
// touched only on that thread (the worker is created UCS_THREAD_MODE_SINGLE), so other
// threads hand it closures through Post/Run; the thread sleeps on the worker's event fd
// (UCP_FEATURE_WAKEUP) plus an eventfd for new closures, so an idle worker costs no CPU.
//
// The request helpers post non-blocking stream operations whose completion handler runs on
// the progress thread exactly once, whether UCX completes the request at once, later, or
// purges it when the endpoint closes.
#ifndef SCD_COMMON_TRANSPORT_UCX_UCX_WORKER_H_
#define SCD_COMMON_TRANSPORT_UCX_UCX_WORKER_H_

#include <ucp/api/ucp.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/mutex.h"

namespace scd::transport {

class UcxWorker {
 public:
  // `transports` is the UCX_TLS value to use ("" = the environment's or UCX's default).
  // UNAVAILABLE when UCX cannot start here (no usable transport, no memory, ...).
  static absl::StatusOr<std::shared_ptr<UcxWorker>> Create(const std::string& transports);

  ~UcxWorker();

  // Runs `task` on the progress thread soon. Dropped once the worker is shutting down.
  void Post(std::function<void()> task);
  // Runs `task` on the progress thread and returns when it has run.
  void Run(const std::function<void()>& task);

  // Only on the progress thread.
  ucp_worker_h worker() const { return worker_; }

 private:
  UcxWorker(ucp_context_h context, ucp_worker_h worker, int wake_fd, int worker_fd);
  void Loop();

  ucp_context_h const context_;
  ucp_worker_h const worker_;
  const int wake_fd_;    // eventfd: closures are waiting
  const int worker_fd_;  // UCX's event fd for the worker
  scd::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Completion handler of a stream request: the UCX status of the whole operation.
using UcxDone = std::function<void(ucs_status_t)>;

// Progress thread only. Sends `size` bytes at `data`, which must stay valid until `done`.
void UcxStreamSend(ucp_ep_h ep, const void* data, size_t size, UcxDone done);
// As above, but the request owns a copy of `bytes`.
void UcxStreamSendCopy(ucp_ep_h ep, std::string bytes, UcxDone done);
// Receives exactly `size` bytes into `data` (UCP_STREAM_RECV_FLAG_WAITALL).
void UcxStreamRecv(ucp_ep_h ep, void* data, size_t size, UcxDone done);
// Closes `ep` without flushing; pending requests on it complete with an error first.
void UcxCloseEndpoint(ucp_ep_h ep, std::function<void()> done);

}  // namespace scd::transport

#endif  // SCD_COMMON_TRANSPORT_UCX_UCX_WORKER_H_
