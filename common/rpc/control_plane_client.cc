// ControlPlaneClient: registration with backoff, the heartbeat thread, re-registration and
// deregistration (see the header).
#include "common/rpc/control_plane_client.h"

#include <grpcpp/client_context.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/rpc/status_translation.h"

namespace scd::rpc {
namespace {

// Errors that retrying cannot fix: the configuration must change.
bool IsRefusal(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kUnauthenticated:
      return true;
    default:
      return false;
  }
}

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ControlPlaneClient>> ControlPlaneClient::Create(
    ControlPlaneClientOptions options) {
  if (options.target.empty()) {
    return absl::InvalidArgumentError("control plane target address is empty");
  }
  if (options.rpc_timeout <= absl::ZeroDuration() ||
      options.initial_backoff <= absl::ZeroDuration() ||
      options.max_backoff < options.initial_backoff) {
    return absl::InvalidArgumentError(
        "control plane client needs rpc_timeout > 0 and 0 < initial_backoff <= max_backoff");
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(options.target, options.channel);
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<ControlPlaneClient>(
      new ControlPlaneClient(std::move(options), *std::move(channel)));
}

ControlPlaneClient::ControlPlaneClient(ControlPlaneClientOptions options,
                                       std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      stub_(scd::v1::ControlPlane::NewStub(channel_)),
      backoff_(options_.initial_backoff),
      jitter_(std::hash<std::string>()(options_.instance.instance_id) ^
              static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()))) {}

ControlPlaneClient::~ControlPlaneClient() { Shutdown(); }

absl::Status ControlPlaneClient::Start(absl::Duration wait) {
  {
    scd::MutexLock lock(&mu_);
    if (started_) return absl::FailedPreconditionError("ControlPlaneClient::Start called twice");
    started_ = true;
  }
  const absl::Time deadline = absl::Now() + wait;
  while (true) {
    absl::Status status = RegisterOnce();
    if (status.ok()) break;
    RecordError(status);
    if (IsRefusal(status)) return status;
    const absl::Duration remaining = deadline - absl::Now();
    if (remaining <= absl::ZeroDuration()) {
      return absl::UnavailableError(
          absl::StrCat("control plane at ", options_.target, " not reachable within ",
                       absl::FormatDuration(wait), ": ", std::string(status.message())));
    }
    if (!SleepUnlessStopped(std::min(NextBackoff(), remaining))) {
      return absl::CancelledError("control plane client shut down during Start");
    }
  }
  ResetBackoff();
  {
    scd::MutexLock lock(&mu_);
    if (!stop_) {
      thread_ = std::thread([this] { HeartbeatLoop(); });
      return absl::OkStatus();
    }
  }
  // Shutdown ran while the registration was in flight and may have missed it.
  DeregisterOnce();
  return absl::CancelledError("control plane client shut down during Start");
}

void ControlPlaneClient::Shutdown() {
  std::thread thread;
  {
    scd::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    stop_ = true;
    if (active_context_ != nullptr) active_context_->TryCancel();
    thread = std::move(thread_);
  }
  if (thread.joinable()) thread.join();
  if (registered()) DeregisterOnce();
}

bool ControlPlaneClient::registered() {
  scd::MutexLock lock(&mu_);
  return registered_;
}

int64_t ControlPlaneClient::registrations() {
  scd::MutexLock lock(&mu_);
  return registrations_;
}

absl::Status ControlPlaneClient::last_error() {
  scd::MutexLock lock(&mu_);
  return last_error_;
}

absl::Duration ControlPlaneClient::heartbeat_interval() {
  scd::MutexLock lock(&mu_);
  return heartbeat_interval_;
}

absl::Status ControlPlaneClient::RegisterOnce() {
  scd::v1::RegisterRequest request;
  const DecodeInstanceInfo& info = options_.instance;
  request.set_model_name(info.model_name);
  request.set_pair_digest(info.pair_digest);
  request.set_capacity(info.capacity);
  request.set_data_plane_address(info.data_plane_address);
  request.set_rpc_address(info.rpc_address);
  request.set_cluster_token(options_.cluster_token);
  request.set_instance_id(info.instance_id);
  scd::v1::RegisterResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, options_.rpc_timeout);
  {
    scd::MutexLock lock(&mu_);
    if (stop_) return absl::CancelledError("control plane client is shutting down");
    active_context_ = &context;
  }
  const grpc::Status rpc = stub_->Register(&context, request, &response);
  scd::MutexLock lock(&mu_);
  active_context_ = nullptr;
  if (!rpc.ok()) {
    registered_ = false;
    return FromGrpcStatus(rpc);
  }
  registered_ = true;
  ++registrations_;
  last_error_ = absl::OkStatus();
  if (response.heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = absl::Milliseconds(response.heartbeat_interval_ms());
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ControlPlaneClient::HeartbeatOnce() {
  scd::v1::HeartbeatRequest request;
  request.set_instance_id(options_.instance.instance_id);
  request.set_cluster_token(options_.cluster_token);
  if (options_.load_report) {
    const LoadReport load = options_.load_report();
    request.set_active_requests(load.active_requests);
    request.set_queue_depth(load.queue_depth);
    request.set_batch_slots(load.batch_slots);
    for (const auto& [mode, rate] : load.rates.rebuild_seconds_per_token) {
      (*request.mutable_rebuild_seconds_per_token())[mode] = rate;
    }
    request.set_prefill_seconds_per_token(load.rates.prefill_seconds_per_token);
  }
  scd::v1::HeartbeatResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, options_.rpc_timeout);
  {
    scd::MutexLock lock(&mu_);
    if (stop_) return absl::CancelledError("control plane client is shutting down");
    active_context_ = &context;
  }
  const grpc::Status rpc = stub_->Heartbeat(&context, request, &response);
  scd::MutexLock lock(&mu_);
  active_context_ = nullptr;
  if (!rpc.ok()) return FromGrpcStatus(rpc);
  return response.reregister();
}

void ControlPlaneClient::DeregisterOnce() {
  scd::v1::DeregisterRequest request;
  request.set_instance_id(options_.instance.instance_id);
  request.set_cluster_token(options_.cluster_token);
  scd::v1::DeregisterResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, options_.rpc_timeout);
  // Best effort: if it fails the lease expires on the server anyway.
  const grpc::Status rpc = stub_->Deregister(&context, request, &response);
  scd::MutexLock lock(&mu_);
  registered_ = false;
  if (!rpc.ok()) last_error_ = FromGrpcStatus(rpc);
}

void ControlPlaneClient::HeartbeatLoop() {
  bool need_register = false;
  while (true) {
    if (!SleepUnlessStopped(need_register ? NextBackoff() : heartbeat_interval())) return;
    if (!need_register) {
      absl::StatusOr<bool> reregister = HeartbeatOnce();
      if (reregister.ok() && !*reregister) continue;  // lease renewed
      if (!reregister.ok()) {
        // CANCELLED is ours only when Shutdown cancelled the call. A server that shuts down
        // (a prefill daemon restarting) cancels its calls in flight too: that is one more
        // failed heartbeat, and the client must go on to re-register.
        if (stopping()) return;
        RecordError(reregister.status());
      }
      scd::MutexLock lock(&mu_);
      registered_ = false;
    }
    // Either the server forgot us (register at once) or a retry is due.
    const absl::Status status = RegisterOnce();
    if (status.ok()) {
      need_register = false;
      ResetBackoff();
      continue;
    }
    if (stopping()) return;
    RecordError(status);
    need_register = true;
    // A refusal will not clear up quickly (token or artifact changed on the server).
    if (IsRefusal(status)) backoff_ = options_.max_backoff;
  }
}

bool ControlPlaneClient::stopping() {
  scd::MutexLock lock(&mu_);
  return stop_;
}

bool ControlPlaneClient::SleepUnlessStopped(absl::Duration duration) {
  scd::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stop_), duration);
  return !stop_;
}

absl::Duration ControlPlaneClient::NextBackoff() {
  // Half fixed, half uniform jitter: retries of many daemons spread out, none waits too long.
  const absl::Duration current = backoff_;
  backoff_ = std::min(backoff_ * 2, options_.max_backoff);
  return current / 2 + current / 2 * static_cast<double>(jitter_.NextUniform());
}

void ControlPlaneClient::ResetBackoff() { backoff_ = options_.initial_backoff; }

void ControlPlaneClient::RecordError(const absl::Status& status) {
  scd::MutexLock lock(&mu_);
  last_error_ = status;
}

}  // namespace scd::rpc
