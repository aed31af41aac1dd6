// See decode_engine.h.
#include "common/serving/decode_engine.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/base/elapsed.h"
#include "common/base/host_memory.h"
#include "common/base/status_macros.h"
#include "common/scd/wire_format.h"
#include "common/sekv/budget_plan.h"
#include "common/serving/decode_engine_request.h"
#include "common/serving/payload_chunks.h"

namespace scd {
namespace {

using Clock = std::chrono::steady_clock;

// The positions a request may reach: its prompt and max_tokens, within the model's context.
int RequestCapacity(int64_t prompt_tokens, int64_t max_tokens, int max_positions) {
  return static_cast<int>(std::min<int64_t>(max_positions, prompt_tokens + max_tokens));
}

// The ranges of the options Create checks itself.
absl::Status CheckOptions(const DecodeEngineOptions& options) {
  if (options.max_batch < 1 || options.max_queue < 0 || options.prefill_chunk < 0 ||
      options.rebuild_chunk < 0 || options.kv_budget_bytes < 0 || options.sekv.max_host_bytes < 0 ||
      !(options.kv_memory_fraction >= 0 && options.kv_memory_fraction <= 1)) {
    return absl::InvalidArgumentError(
        "max_batch must be >= 1, max_queue >= 0, prefill_chunk >= 0, rebuild_chunk >= 0, "
        "kv_budget_bytes >= 0, kv_memory_fraction in [0, 1] and sekv.max_host_bytes >= 0");
  }
  const ShadowOptions& s = options.shadow;
  if (!(s.rate >= 0 && s.rate <= 1) || !(s.max_tokens_per_s > 0) || s.tokens < 1 ||
      s.max_pending < 1 || s.piece_tokens < 1) {
    return absl::InvalidArgumentError(
        "shadow.rate must be in [0, 1], shadow.max_tokens_per_s > 0, and shadow.tokens, "
        "shadow.max_pending and shadow.piece_tokens >= 1");
  }
  return absl::OkStatus();
}

}  // namespace

WorkspaceShape DecodeEngine::WorkspaceFor(const ModelConfig& config,
                                          const DecodeEngineOptions& options) {
  const int positions = config.max_position_embeddings;
  auto chunk = [&](int rows) { return rows > 0 ? std::min(rows, positions) : positions; };
  WorkspaceShape shape;
  shape.prefill_tokens = chunk(options.prefill_chunk);
  // SekvPrefill takes each chunk's K/V and surprisal.
  shape.prefill_surprisal = shape.prefill_layer_states = options.sekv.enabled;
  shape.decode_rows = options.max_batch;
  shape.decode_length = positions;
  shape.append_tokens = chunk(options.rebuild_chunk);
  return shape;
}

// The host's available memory, read on first use only: the budgets that take a share of it
// share one measurement.
class DecodeEngine::HostReading {
 public:
  explicit HostReading(const DecodeEngineOptions& options) : options_(options) {}

  const absl::StatusOr<int64_t>& available() {
    if (!value_)
      value_ = options_.host_memory_now ? options_.host_memory_now() : HostMemoryAvailable();
    return *value_;
  }
  // A failed reading, for the key whose share needed it.
  static absl::Status Error(const char* key, const absl::Status& st) {
    return absl::Status(st.code(),
                        absl::StrCat(key, ": the host's available memory: ", st.message()));
  }

 private:
  const DecodeEngineOptions& options_;
  std::optional<absl::StatusOr<int64_t>> value_;
};

absl::StatusOr<std::unique_ptr<DecodeEngine>> DecodeEngine::Create(
    std::unique_ptr<Backend> backend, std::unique_ptr<ConsumerCodec> codec,
    DecodeEngineOptions options) {
  if (backend == nullptr || codec == nullptr) {
    return absl::InvalidArgumentError("DecodeEngine needs a backend and a consumer codec");
  }
  SCD_RETURN_IF_ERROR(CheckOptions(options));
  std::unique_ptr<DecodeEngine> e(new DecodeEngine(std::move(backend), std::move(codec), options));
  SCD_RETURN_IF_ERROR(e->ReserveScratch());
  HostReading host(e->options_);
  if (options.sekv.enabled) SCD_RETURN_IF_ERROR(e->SetUpSekv(host));
  SCD_RETURN_IF_ERROR(e->ResolveKvBudget(host));
  e->stats_.kv_budget_bytes = e->kv_budget_;
  e->thread_ = std::thread([p = e.get()] { p->Loop(); });
  return e;
}

absl::Status DecodeEngine::ReserveScratch() {
  // The backend's scratch memory for the largest calls the engine makes, taken now: the
  // readings of the device's (and host's) memory for the budgets then count it, and serving
  // allocates none beyond the requests' own.
  const WorkspaceShape shape = WorkspaceFor(backend_->model().config, options_);
  if (absl::Status st = backend_->ReserveWorkspace(shape); !st.ok()) {
    return absl::Status(
        st.code(),
        absl::StrCat(
            "the backend's scratch memory for the engine's largest calls (a prefill of ",
            shape.prefill_tokens, " tokens", options_.sekv.enabled ? " with SEKV's K/V" : "",
            ", a decode step of ", shape.decode_rows, " rows up to ", shape.decode_length,
            " positions, a payload chunk of ", shape.append_tokens, " rows): ", st.message(),
            "; lower engine.prefill_chunk, engine.max_batch or engine.rebuild_chunk"));
  }
  const WorkspaceBytes workspace = backend_->Workspace();
  stats_.workspace_device_bytes = static_cast<int64_t>(workspace.device);
  stats_.workspace_host_bytes = static_cast<int64_t>(workspace.pinned_host);
  // Likewise the codec's GPU rebuild of scd payloads, for a payload chunk.
  if (absl::Status st = codec_->ReserveRebuild(*backend_, shape.append_tokens); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("the SCD GPU rebuild's memory for a payload "
                                                "chunk of ",
                                                shape.append_tokens, " rows: ", st.message(),
                                                "; lower engine.rebuild_chunk"));
  }
  const WorkspaceBytes rebuild = codec_->RebuildWorkspace();
  stats_.rebuild_device_bytes = static_cast<int64_t>(rebuild.device);
  stats_.rebuild_host_bytes = static_cast<int64_t>(rebuild.pinned_host);
  return absl::OkStatus();
}

absl::Status DecodeEngine::SetUpSekv(HostReading& host) {
  SCD_RETURN_IF_ERROR(sekv::CheckBudget(options_.sekv.budget));
  if (options_.sekv.min_prompt_tokens < 0) {
    return absl::InvalidArgumentError("sekv min_prompt_tokens must be >= 0");
  }
  // The decoder reads the engine's model, which the backend owns for the engine's lifetime.
  const Model& m = backend_->model();
  SCD_ASSIGN_OR_RETURN(sekv_decoder_, sekv::SekvDecoder::Create(std::shared_ptr<const Model>(
                                          std::shared_ptr<const Model>(), &m)));
  sekv_tier_ = SekvSession::TierFor(*backend_, *sekv_decoder_, options_.sekv);
  host_budget_ = options_.sekv.max_host_bytes;
  const double fraction = options_.sekv.host_memory_fraction;
  if (!(fraction >= 0 && fraction <= 1)) {
    return absl::InvalidArgumentError("sekv host_memory_fraction must be in [0, 1]");
  }
  if (host_budget_ == 0 && fraction > 0) {
    const absl::StatusOr<int64_t>& available = host.available();
    if (available.ok()) {
      // At least one byte: a host with no memory left admits no SEKV request, rather than all.
      host_budget_ =
          std::max<int64_t>(1, static_cast<int64_t>(fraction * static_cast<double>(*available)));
    } else if (available.status().code() != absl::StatusCode::kUnimplemented) {
      return HostReading::Error("sekv.host_memory_fraction", available.status());
    }
  }
  stats_.sekv_host_budget_bytes = host_budget_;
  sekv_on_gpu_ = options_.sekv.gpu && sekv::GpuSekv::Applies(*backend_);
  if (sekv_on_gpu_ && options_.sekv.gpu_zoom == sekv::GpuZoom::kDevice) {
    SCD_ASSIGN_OR_RETURN(const bool in_place, sekv::GpuSekv::ReadsPageableCpuTier(*backend_));
    sekv_may_copy_cpu_tier_ = !in_place;
  }
  return absl::OkStatus();
}

absl::Status DecodeEngine::ResolveKvBudget(HostReading& host) {
  kv_budget_ = options_.kv_budget_bytes;
  if (kv_budget_ != 0 || !(options_.kv_memory_fraction > 0)) return absl::OkStatus();
  std::optional<int64_t> room;  // what the share is of; none: no limit
  absl::StatusOr<DeviceMemory> memory = backend_->DeviceMemoryNow();
  if (memory.ok()) {
    room = static_cast<int64_t>(memory->free_bytes);
  } else if (memory.status().code() != absl::StatusCode::kUnimplemented) {
    return memory.status();
  } else if (const absl::StatusOr<int64_t>& available = host.available(); available.ok()) {
    // The backend's memory is the host's (the CPU backend): the share is of what the host
    // has, less the SEKV host budget, which is taken from the same memory.
    room = std::max<int64_t>(0, *available - host_budget_);
    stats_.kv_budget_of_host = true;
  } else if (available.status().code() != absl::StatusCode::kUnimplemented) {
    return HostReading::Error("engine.kv_memory_fraction", available.status());
  }
  if (room.has_value()) {
    // At least one byte: a device with no memory left admits nothing, rather than all.
    kv_budget_ = std::max<int64_t>(
        1, static_cast<int64_t>(options_.kv_memory_fraction * static_cast<double>(*room)));
  }
  return absl::OkStatus();
}

DecodeEngine::DecodeEngine(std::unique_ptr<Backend> backend, std::unique_ptr<ConsumerCodec> codec,
                           DecodeEngineOptions options)
    : backend_(std::move(backend)),
      codec_(std::move(codec)),
      options_(options),
      shadow_(options_.shadow) {}

DecodeEngine::~DecodeEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::Status DecodeEngine::Submit(DecodeJob job, DecodeCallback callback) {
  if (job.suffix.empty()) {
    return absl::InvalidArgumentError("a decode job needs at least one suffix token");
  }
  if (job.max_tokens < 1) return absl::InvalidArgumentError("max_tokens must be >= 1");
  SCD_RETURN_IF_ERROR(job.sampling.Validate());
  auto a = std::make_unique<Active>();
  a->submitted = Clock::now();
  std::vector<uint8_t> bytes;  // the payload's, kept for a shadow sample
  if (!job.payload.empty()) {
    // Parsed here, on the submitting thread: copying and checking a long payload (a raw one
    // is tens of MB) in the loop would stall the running requests. A bad payload still ends
    // its request with an error event, at admission.
    a->has_payload = true;
    a->payload = ParsePayload(job.payload);
    bytes = std::move(job.payload);  // the wire bytes are not needed any more
    job.payload = std::vector<uint8_t>();
  }
  const int64_t prompt = static_cast<int64_t>(job.suffix.size()) +
                         (a->payload.ok() ? static_cast<int64_t>(a->payload->token_ids.size()) : 0);
  const ModelConfig& c = backend_->model().config;
  const int capacity = RequestCapacity(prompt, job.max_tokens, c.max_position_embeddings);
  a->use_sekv = UsesSekv(prompt);
  a->shadow = a->payload.ok() && a->has_payload && a->payload->mode != CodecMode::kOracle &&
              a->payload->start_position == 0 && job.resumed == 0 && !a->use_sekv && shadow_.Pick();
  if (a->shadow) a->shadow_payload = std::move(bytes);
  const int64_t host_budget = HostBudget();
  if (host_budget > 0 && a->use_sekv) {
    // The build's peak, bounded before the prompt's surprisal is known: the prompt's K/V in
    // F32 (the positions before its last token) as the prefill captured it, beside the most
    // the hierarchy made of it can hold (sekv::MaxHostBytes: both tiers at sekv.budget), and
    // the window's room for the positions to come.
    const int64_t row = F32PositionBytes(c);
    const int64_t positions = std::max<int64_t>(prompt - 1, 0);
    const sekv::HostBound hierarchy = sekv::MaxHostBytes(
        sekv_decoder_->shape(), options_.sekv.cache, options_.sekv.budget, positions);
    a->host_need =
        row * positions + static_cast<int64_t>(hierarchy.total()) + row * (capacity - prompt + 1);
    if (sekv_on_gpu_) {
      // The GPU mirror's pinned staging.
      a->host_need += static_cast<int64_t>(
          sekv::GpuSekv::PlanHostBytes(sekv_decoder_->shape(), options_.sekv.cache,
                                       options_.sekv.gpu_tier, options_.sekv.gpu_zoom, positions));
    }
    if (sekv_may_copy_cpu_tier_) {
      // A pinned copy of the CPU tier, where the driver refuses to register it: made after the
      // build, when the captured K/V is gone, so the bound needs the copy's excess over that.
      a->host_need +=
          std::max<int64_t>(0, static_cast<int64_t>(hierarchy.cpu_tier) - row * positions);
    }
    if (a->host_need > host_budget) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the request's prompt (", prompt, " tokens) needs ", a->host_need,
          " bytes of host memory for its SEKV hierarchy, more than this decode engine's whole "
          "budget (sekv.max_host_bytes, or sekv.host_memory_fraction of the host's available "
          "memory at start) of ",
          host_budget, " bytes; shorten the prompt"));
    }
  }
  if (kv_budget_ > 0) {
    a->kv_need = static_cast<int64_t>(backend_->SequenceBytes(capacity));
    if (a->kv_need > kv_budget_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the request's KV cache (", capacity, " positions: prompt and max_tokens) needs ",
          a->kv_need, " bytes, more than this decode engine's whole KV budget of ", kv_budget_,
          " bytes; lower max_tokens or shorten the prompt"));
    }
  }
  a->job = std::move(job);
  a->callback = std::move(callback);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || draining_) return absl::UnavailableError("decode engine is shutting down");
    if (static_cast<int>(queue_.size()) >= options_.max_queue) {
      return absl::ResourceExhaustedError(
          absl::StrCat("decode queue is full (", options_.max_queue, " waiting)"));
    }
    queue_.push_back(std::move(a));
  }
  cv_.notify_all();
  return absl::OkStatus();
}

void DecodeEngine::Cancel(uint64_t request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_[request_id] = true;
  }
  cv_.notify_all();
}

void DecodeEngine::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  draining_ = true;
  cv_.notify_all();
  cv_.wait(lock, [&] { return queue_.empty() && running_count_.load() == 0; });
}

int DecodeEngine::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(queue_.size());
}

DecodeEngineStats DecodeEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  DecodeEngineStats s = stats_;
  s.kv_reserved_bytes = kv_reserved_.load();
  s.sekv_host_reserved_bytes = host_reserved_.load();
  return s;
}

bool DecodeEngine::UsesSekv(int64_t prompt_tokens) const {
  return sekv_decoder_ != nullptr && prompt_tokens >= options_.sekv.min_prompt_tokens;
}

int64_t DecodeEngine::HostBudget() const { return host_budget_; }

bool DecodeEngine::DeviceFits(const Active& a) const {
  return kv_budget_ == 0 || kv_reserved_.load() + a.kv_need <= kv_budget_;
}

bool DecodeEngine::HostFits(const Active& a) const {
  return HostBudget() == 0 || host_reserved_.load() + a.host_need <= HostBudget();
}

bool DecodeEngine::ReserveKv(Active& head) {
  const bool host_fits = HostFits(head);
  if (!DeviceFits(head) || !host_fits) {
    if (!head.waited_for_kv) ++stats_.kv_waits;
    if (!host_fits && !head.waited_for_host) ++stats_.sekv_host_waits;
    head.waited_for_kv = true;
    head.waited_for_host = head.waited_for_host || !host_fits;
    return false;
  }
  if (kv_budget_ > 0) head.kv.Set(head.kv_need, &kv_reserved_);
  if (HostBudget() > 0) head.host.Set(head.host_need, &host_reserved_);
  return true;
}

std::deque<std::unique_ptr<DecodeEngine::Active>>::iterator DecodeEngine::NextPastHead() {
  // Only a head that waits for host memory alone lets anything pass.
  if (queue_.empty() || !DeviceFits(*queue_.front()) || HostFits(*queue_.front())) {
    return queue_.end();
  }
  const int64_t head_kv = queue_.front()->kv_need;
  return std::find_if(queue_.begin() + 1, queue_.end(), [&](const auto& a) {
    return a->host_need == 0 &&
           (kv_budget_ == 0 || kv_reserved_.load() + a->kv_need + head_kv <= kv_budget_);
  });
}

bool DecodeEngine::Expired(const Active& a, absl::Time now) const {
  return cancelled_.count(a.job.request_id) > 0 || now > a.job.deadline;
}

bool DecodeEngine::QueueHasExpired() const {
  const absl::Time now = absl::Now();
  return std::any_of(queue_.begin(), queue_.end(),
                     [&](const std::unique_ptr<Active>& a) { return Expired(*a, now); });
}

void DecodeEngine::Finish(Active& a, DecodeEvent event) {
  if (a.done) return;
  a.done = true;
  if (a.sekv != nullptr && options_.sekv.on_cache) options_.sekv.on_cache(a.sekv->memory(), false);
  ReleaseSekv(a);
  event.prompt_tokens = a.prompt_tokens;
  event.completion_tokens = a.generated;
  event.timings = a.timings;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (event.kind == DecodeEvent::Kind::kDone) {
      ++stats_.completed;
    } else if (event.error.code() == absl::StatusCode::kCancelled) {
      ++stats_.cancelled;
    } else {
      ++stats_.failed;
    }
    cancelled_.erase(a.job.request_id);
  }
  a.callback(event);
  if (a.shadow && event.kind == DecodeEvent::Kind::kDone && !a.shadow_tokens.empty()) {
    shadow_.Offer({std::move(a.shadow_payload), a.job.suffix, std::move(a.shadow_tokens)});
  }
}

void DecodeEngine::Loop() {
  for (;;) {
    std::vector<std::unique_ptr<Active>> admitted;
    std::vector<std::unique_ptr<Active>> expired;  // queued, then cancelled or past deadline
    std::unordered_map<uint64_t, bool> cancelled;
    {
      std::unique_lock<std::mutex> lock(mu_);
      WaitForWork(lock);
      if (stopping_) break;
      TakeFromQueue(&admitted, &expired);
      cancelled = cancelled_;
      stats_.admitted += static_cast<long>(admitted.size());
      // Admitted and expired jobs count as running until they end, so Drain() never misses
      // them.
      PublishCounts(static_cast<int>(admitted.size() + expired.size()));
    }
    for (auto& a : expired) {
      Finish(*a, cancelled.count(a->job.request_id) > 0
                     ? DecodeEvent::Error(absl::CancelledError("request cancelled"))
                     : DecodeEvent::Error(
                           absl::DeadlineExceededError("request deadline passed while queued")));
    }
    expired.clear();
    for (auto& a : admitted) {
      if (cancelled.count(a->job.request_id)) {
        Finish(*a, DecodeEvent::Error(absl::CancelledError("request cancelled")));
        continue;
      }
      Admit(std::move(a));
    }
    CollectBuilds(cancelled);
    PrefillChunks(cancelled);
    // Cancellations and deadlines of running requests.
    for (auto& a : running_) EndIfCancelled(*a, cancelled, "during decode");
    running_.erase(
        std::remove_if(running_.begin(), running_.end(), [](const auto& a) { return a->done; }),
        running_.end());
    PublishCounts();
    if (!running_.empty()) {
      const absl::Time step_start = absl::Now();
      const auto start = Clock::now();
      const int live = AdmittedCount();
      Step();
      if (options_.trace) options_.trace({EngineTrace::Kind::kStep, start, Clock::now(), live});
      const absl::Duration rest = options_.min_step_interval - (absl::Now() - step_start);
      if (rest > absl::ZeroDuration()) absl::SleepFor(rest);
    }
    PublishCounts();
    RunShadow();
    cv_.notify_all();  // Drain() waiters
  }
  ShutDown();
}

int DecodeEngine::AdmittedCount() const {
  return static_cast<int>(running_.size() + building_.size() + prefilling_.size());
}

void DecodeEngine::WaitForWork(std::unique_lock<std::mutex>& lock) {
  auto work = [&] {
    return stopping_ || !running_.empty() || !prefilling_.empty() || builds_ready_ > 0 ||
           (!queue_.empty() && AdmittedCount() < options_.max_batch &&
            DeviceFits(*queue_.front()) && HostFits(*queue_.front())) ||
           (AdmittedCount() + 1 < options_.max_batch && NextPastHead() != queue_.end()) ||
           QueueHasExpired() || (shadow_.HasWork() && AdmittedCount() == 0 && queue_.empty());
  };
  // Wake for the builds' cancellations and deadlines now and then, and for the first
  // deadline of a request still queued (one waiting for KV memory may wait long).
  absl::Time wake =
      building_.empty() ? absl::InfiniteFuture() : absl::Now() + absl::Milliseconds(50);
  for (const auto& a : queue_) wake = std::min(wake, a->job.deadline);
  if (wake == absl::InfiniteFuture()) {
    cv_.wait(lock, work);
  } else {
    cv_.wait_until(lock, absl::ToChronoTime(wake), work);
  }
}

void DecodeEngine::TakeFromQueue(std::vector<std::unique_ptr<Active>>* admitted,
                                 std::vector<std::unique_ptr<Active>>* expired) {
  const absl::Time now = absl::Now();
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (Expired(**it, now)) {
      expired->push_back(std::move(*it));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  while (!queue_.empty() &&
         AdmittedCount() + static_cast<int>(admitted->size()) < options_.max_batch &&
         ReserveKv(*queue_.front())) {
    admitted->push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  // A head waiting for SEKV host memory alone lets the plain requests behind it pass, in
  // order, while the KV memory it needs stays free (NextPastHead) and a batch slot is
  // left for it: they take nothing it waits for, so it starts no later than it would have.
  for (auto it = NextPastHead();
       it != queue_.end() &&
       AdmittedCount() + static_cast<int>(admitted->size()) + 1 < options_.max_batch;
       it = NextPastHead()) {
    Active& a = **it;
    if (kv_budget_ > 0) a.kv.Set(a.kv_need, &kv_reserved_);
    ++stats_.admitted_past_host_wait;
    admitted->push_back(std::move(*it));
    queue_.erase(it);
  }
}

void DecodeEngine::ShutDown() {
  // Builds still running finish first: their threads hold their requests.
  for (auto& a : building_) {
    a->build.join();
    Finish(*a, DecodeEvent::Error(absl::UnavailableError("decode engine shut down")));
    ReleaseSekv(*a);
  }
  building_.clear();
  // Everything still here ends with an error.
  std::deque<std::unique_ptr<Active>> leftover;
  {
    std::lock_guard<std::mutex> lock(mu_);
    leftover.swap(queue_);
  }
  for (auto& a : running_) {
    Finish(*a, DecodeEvent::Error(absl::UnavailableError("decode engine shut down")));
  }
  for (auto& a : prefilling_) {
    Finish(*a, DecodeEvent::Error(absl::UnavailableError("decode engine shut down")));
  }
  prefilling_.clear();
  for (auto& a : leftover) {
    Finish(*a, DecodeEvent::Error(absl::UnavailableError("decode engine shut down")));
  }
  running_.clear();
  running_count_.store(0);
  starting_count_.store(0);
}

void DecodeEngine::PublishCounts(int admitted) {
  const int starting = static_cast<int>(building_.size() + prefilling_.size()) + admitted;
  starting_count_.store(starting);
  running_count_.store(static_cast<int>(running_.size()) + starting);
}

void DecodeEngine::Admit(std::unique_ptr<Active> a) {
  const auto admitted_at = Clock::now();
  a->timings.queue_ms = MsBetween(a->submitted, admitted_at);
  const ModelConfig& c = backend_->model().config;
  auto fail = [&](absl::Status st) { Finish(*a, DecodeEvent::Error(std::move(st))); };
  if (absl::Now() > a->job.deadline) {
    return fail(absl::DeadlineExceededError("request deadline passed while queued"));
  }
  const bool has_payload = a->has_payload;
  if (!a->payload.ok()) return fail(a->payload.status());
  Payload payload = std::move(a->payload).value();
  a->prompt_tokens = static_cast<int>(payload.token_ids.size() + a->job.suffix.size());
  if (a->prompt_tokens >= c.max_position_embeddings) {
    return fail(absl::InvalidArgumentError(absl::StrCat("prompt of ", a->prompt_tokens,
                                                        " tokens does not fit the context of ",
                                                        c.max_position_embeddings)));
  }
  a->capacity = RequestCapacity(a->prompt_tokens, a->job.max_tokens, c.max_position_embeddings);
  if (a->use_sekv) {
    // The SEKV path (sekv_session.h): a payload's rebuild, then the prefill, in chunks
    // (PrefillChunks), both on the backend's thread; then the hierarchy on a thread of its own
    // while the loop steps the running requests (StartBuild; CollectBuilds activates it).
    auto prefill = SekvPrefill::Begin(
        *backend_, *codec_, has_payload ? std::optional<Payload>(std::move(payload)) : std::nullopt,
        a->job.suffix);
    if (!prefill.ok()) return fail(prefill.status());
    a->sekv_prefill = std::move(prefill).value();
    if (a->sekv_prefill->done()) return StartBuild(std::move(a));
    prefilling_.push_back(std::move(a));
    return;
  }
  const auto t0 = Clock::now();
  auto seq = backend_->NewSequence(a->capacity);
  if (!seq.ok()) return fail(seq.status());
  a->seq = std::move(seq).value();
  if (has_payload && payload.mode == CodecMode::kOracle) {
    // Nothing to rebuild: the payload's tokens are prefilled here, in chunks like the suffix.
    if (absl::Status st = codec_->Check(payload, *a->seq); !st.ok()) return fail(st);
    a->pending.tokens = std::move(payload.token_ids);
    a->pending.payload_end = a->pending.tokens.size();
  } else if (has_payload) {
    // Rebuilt in chunks (PrefillChunks); the checks that need no rows fail it here.
    if (absl::Status st = codec_->Check(payload, *a->seq); !st.ok()) return fail(st);
    a->rebuild = PayloadChunks(std::move(payload));
  }
  a->timings.rebuild_ms = MsSince(t0);
  a->pending.tokens.insert(a->pending.tokens.end(), a->job.suffix.begin(), a->job.suffix.end());
  prefilling_.push_back(std::move(a));
}

bool DecodeEngine::EndIfCancelled(Active& a, const std::unordered_map<uint64_t, bool>& cancelled,
                                  const char* stage) {
  if (a.done) return true;
  if (cancelled.count(a.job.request_id)) {
    Finish(a, DecodeEvent::Error(absl::CancelledError("request cancelled")));
  } else if (absl::Now() > a.job.deadline) {
    Finish(a, DecodeEvent::Error(
                  absl::DeadlineExceededError(absl::StrCat("request deadline passed ", stage))));
  }
  return a.done;
}

void DecodeEngine::PrefillChunks(const std::unordered_map<uint64_t, bool>& cancelled) {
  auto limit = [](int chunk) {
    return chunk > 0 ? static_cast<size_t>(chunk) : std::numeric_limits<size_t>::max();
  };
  size_t budget = limit(options_.prefill_chunk);          // prompt tokens to prefill
  size_t rebuild_budget = limit(options_.rebuild_chunk);  // payload rows to rebuild
  auto count = [&](bool rebuilt, size_t n) {
    const WorkspaceBytes rebuild = rebuilt ? codec_->RebuildWorkspace() : WorkspaceBytes{};
    std::lock_guard<std::mutex> lock(mu_);
    ++(rebuilt ? stats_.rebuild_chunks : stats_.prefill_chunks);
    (rebuilt ? stats_.rebuild_rows : stats_.prefill_tokens) += static_cast<long>(n);
    if (rebuilt) {
      stats_.rebuild_device_bytes = static_cast<int64_t>(rebuild.device);
      stats_.rebuild_host_bytes = static_cast<int64_t>(rebuild.pinned_host);
    }
  };
  while (!prefilling_.empty()) {
    Active& a = *prefilling_.front();
    if (EndIfCancelled(a, cancelled, "during the prompt's prefill")) {
      prefilling_.pop_front();
      continue;
    }
    SekvPrefill* sekv = a.sekv_prefill.get();
    const bool rebuilding =
        sekv != nullptr ? sekv->rebuild_remaining() > 0 : a.rebuild.remaining() > 0;
    if ((rebuilding ? rebuild_budget : budget) == 0) break;  // first come, first served
    absl::StatusOr<size_t> n;
    PrefillResult prefill;
    const auto t0 = Clock::now();
    if (rebuilding) {
      // A payload's next rows (a chunk may pass the budget by less than the payload's
      // granularity: KIVI keys split at their groups only).
      n = sekv != nullptr ? sekv->AdvanceRebuild(rebuild_budget)
                          : a.rebuild.Advance(*codec_, *backend_, *a.seq, rebuild_budget);
      if (sekv == nullptr) a.timings.rebuild_ms += MsSince(t0);  // SekvPrefill times its own
      if (n.ok()) rebuild_budget -= std::min(*n, rebuild_budget);
    } else if (sekv != nullptr) {
      n = sekv->Advance(budget);
      if (n.ok()) budget -= *n;
    } else {
      const absl::Span<const int32_t> chunk = a.pending.Next(budget);
      const absl::Status st = backend_->Prefill(*a.seq, chunk, PrefillOptions{}, &prefill);
      (a.pending.in_payload() ? a.timings.rebuild_ms : a.timings.suffix_prefill_ms) += MsSince(t0);
      n = st.ok() ? absl::StatusOr<size_t>(chunk.size()) : absl::StatusOr<size_t>(st);
      if (n.ok()) {
        a.pending.prefilled += *n;
        budget -= *n;
      }
    }
    if (!n.ok()) {
      Finish(a, DecodeEvent::Error(n.status()));
      prefilling_.pop_front();
      continue;
    }
    count(rebuilding, *n);
    const bool complete =
        sekv != nullptr ? sekv->done() : (!rebuilding && a.pending.remaining() == 0);
    if (!complete) continue;
    std::unique_ptr<Active> ready = std::move(prefilling_.front());
    prefilling_.pop_front();
    if (sekv != nullptr) {
      StartBuild(std::move(ready));
    } else {
      ready->pending = {};
      Started(std::move(ready), prefill.logits);
    }
  }
}

void DecodeEngine::Started(std::unique_ptr<Active> a, const std::vector<float>& logits) {
  const ModelConfig& c = backend_->model().config;
  a->sampler = std::make_unique<Sampler>(a->job.sampling);
  for (int i = 0; i < a->job.resumed; ++i) a->sampler->Draw();  // the draws already made
  a->stops = a->job.stop_ids.empty() ? c.eos_token_ids : a->job.stop_ids;
  const int32_t first = a->sampler->Sample(logits);
  a->timings.first_token_ms = MsBetween(a->submitted, Clock::now());
  NoteShadowToken(*a, first);
  if (std::find(a->stops.begin(), a->stops.end(), first) != a->stops.end()) {
    return Finish(*a, DecodeEvent::Done("stop"));
  }
  a->generated = 1;
  DecodeEvent first_event = DecodeEvent::Token(first);
  first_event.timings = a->timings;  // admission stages are known now (stop strings may end
                                     // the stream before the final event carries them)
  a->callback(first_event);
  if (a->generated >= a->job.max_tokens) return Finish(*a, DecodeEvent::Done("length"));
  if (a->length() >= a->capacity) return Finish(*a, DecodeEvent::Done("context"));
  a->next_input = first;
  running_.push_back(std::move(a));
}

void DecodeEngine::CountStep(bool mixed, size_t sekv_rows) {
  DecodeGraphStats graphs = backend_->decode_graph_stats();  // this thread's to read
  std::lock_guard<std::mutex> lock(mu_);
  stats_.graphs = std::move(graphs);
  ++stats_.steps;
  stats_.max_batch_seen = std::max<long>(stats_.max_batch_seen, static_cast<long>(running_.size()));
  if (mixed) ++stats_.mixed_steps;
  if (sekv_rows > 0) {
    ++stats_.sekv_steps;
    stats_.sekv_step_rows += static_cast<long>(sekv_rows);
    stats_.sekv_max_step_rows =
        std::max<long>(stats_.sekv_max_step_rows, static_cast<long>(sekv_rows));
  }
}

void DecodeEngine::Step() {
  // One batched Decode over the backend's sequences, then one batched step of the SEKV
  // requests through their hierarchies (SekvSession::StepBatch: the weights are read once
  // for all of them, not once per request); or both in one step (StepMixed) where the SEKV
  // requests decode on the backend's own device. The backend samples where the logits are
  // (on the device for CUDA): each request's sampler takes its draw first, exactly as Sample
  // would.
  std::vector<Sequence*> seqs;
  std::vector<int32_t> inputs;
  std::vector<SampleDraw> draws;
  std::vector<SekvSession*> sekv;
  std::vector<int32_t> sekv_inputs;
  // Requests that ended are skipped here and below (a SEKV one has released its hierarchy).
  for (auto& a : running_) {
    if (a->done) continue;
    if (a->sekv != nullptr) {
      sekv.push_back(a->sekv.get());
      sekv_inputs.push_back(a->next_input);
      continue;
    }
    seqs.push_back(a->seq.get());
    inputs.push_back(a->next_input);
    draws.push_back(a->sampler->Draw());
  }
  // Both kinds in one model step where the SEKV requests decode on the backend itself
  // (SekvSession::StepMixed: the weights read once, not once per kind).
  const bool mixed = !seqs.empty() && !sekv.empty() &&
                     std::all_of(sekv.begin(), sekv.end(),
                                 [&](const SekvSession* s) { return s->SharesStep(*backend_); });
  std::vector<int32_t> sampled;
  std::vector<std::vector<float>> sekv_logits;
  absl::Status st, sekv_st;
  if (mixed) {
    st = SekvSession::StepMixed(*backend_, seqs, inputs, draws, &sampled, sekv, sekv_inputs,
                                &sekv_logits);
    sekv_st = st;
  } else {
    if (!seqs.empty()) st = backend_->DecodeSample(seqs, inputs, draws, &sampled);
    if (!sekv.empty()) sekv_st = SekvSession::StepBatch(sekv, sekv_inputs, &sekv_logits);
  }
  CountStep(mixed, sekv.size());
  size_t row = 0, sekv_row = 0;  // this request's row in its batch
  for (size_t i = 0; i < running_.size(); ++i) {
    Active& a = *running_[i];
    if (a.done) continue;
    int32_t next = 0;
    if (a.sekv != nullptr) {
      const size_t r = sekv_row++;
      if (!sekv_st.ok()) {
        Finish(a, DecodeEvent::Error(sekv_st));
        continue;
      }
      next = a.sampler->Sample(sekv_logits[r]);
    } else {
      const size_t r = row++;
      if (!st.ok()) {
        Finish(a, DecodeEvent::Error(st));
        continue;
      }
      next = sampled[r];
    }
    NoteShadowToken(a, next);
    if (std::find(a.stops.begin(), a.stops.end(), next) != a.stops.end()) {
      Finish(a, DecodeEvent::Done("stop"));
      continue;
    }
    ++a.generated;
    a.callback(DecodeEvent::Token(next));
    if (a.generated >= a.job.max_tokens) {
      Finish(a, DecodeEvent::Done("length"));
    } else if (a.length() >= a.capacity) {
      Finish(a, DecodeEvent::Done("context"));
    } else {
      a.next_input = next;
    }
  }
  running_.erase(
      std::remove_if(running_.begin(), running_.end(), [](const auto& a) { return a->done; }),
      running_.end());
}

}  // namespace scd
