// test_cuda_host: the CUDA backend's host code (common/runtime/cuda/cuda_backend.cc, its parts and
// device_weights.cc, unmodified, with the backend factory built as in a CUDA build) over the
// CPU stand-ins of every CUDA call it makes (tests/gpu/standin/standin_memory.cc, standin_ops.cc,
// standin_launchers.cc), so CI runs tests/gpu/parity's whole-backend cases (backend_test.cc,
// gpu_sekv_test.cc, compiled in as they are) on a machine without a GPU: the orchestration
// (step metadata, cache tables, buffer sizing, hooks, sampling parameters, the external
// attention path) is checked against the CPU backend; the kernels are test_cuda's. This case
// makes sure the stand-ins are what runs: in a CUDA build the real objects are in the link
// too (tests/gpu/CMakeLists.txt), and the stand-ins must win.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/runtime/cuda/backend_access.h"
#include "common/runtime/cuda/cuda_backend.h"
#include "common/runtime/cuda/decode_graph_cache.h"
#include "common/runtime/cuda/synthetic_backend.h"
#include "common/scd/artifact.h"
#include "common/scd/codec.h"
#include "common/scd/wire_format.h"
#include "common/sekv/budget_plan.h"
#include "common/sekv/gpu_sekv.h"
#include "common/serving/decode_engine.h"
#include "kernels/cuda/device_memory.h"
#include "tests/gpu/parity/cuda_test_support.h"
#include "tests/gpu/standin/standin_memory.h"
#include "tests/serving/engine_fixture.h"

namespace scd {
namespace {

// A one-layer model small enough to build in every case.
ModelConfig OneLayerConfig() {
  ModelConfig c;
  c.hidden_size = 32;
  c.num_layers = 1;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 16;
  c.intermediate_size = 48;
  c.vocab_size = 40;
  c.max_position_embeddings = 16;
  return c;
}

}  // namespace

TEST_CASE("test_cuda_host runs the CUDA backend over the CPU stand-ins", "[cpu]") {
  CHECK(CudaDeviceCount() == 1);
  CHECK(cuda::DeviceDescription(0).find("CPU stand-in") != std::string::npos);
  CHECK(BackendAvailable(BackendKind::kCuda));
  const ModelConfig c = OneLayerConfig();
  auto backend = CreateBackend(BackendKind::kCuda, MakeSyntheticModel(c, 1));
  INFO(backend.status());
  REQUIRE(backend.ok());
  CHECK((*backend)->name() == "cuda");
  CHECK(cuda::IsCudaBackend(**backend));
}

TEST_CASE("Without a usable CUDA device the backend says why: no driver, an old driver, none seen",
          "[cpu]") {
  using cuda::DeviceReading;
  struct Case {
    DeviceReading reading;
    std::string message;
  };
  const std::string prefix = "no usable CUDA device: ";
  const std::vector<Case> cases = {
      {{0, "cudaErrorInsufficientDriver: CUDA driver version is insufficient", 0, 13000, {}},
       prefix + "no NVIDIA driver is loaded (libcuda.so.1 not found); this build needs one "
                "that supports CUDA 13.0"},
      {{0, "cudaErrorInsufficientDriver: CUDA driver version is insufficient", 12040, 13000, {}},
       prefix + "the NVIDIA driver supports CUDA 12.4, older than the CUDA 13.0 runtime this "
                "build links: update the driver"},
      {{0, "cudaErrorNoDevice: no CUDA-capable device is detected", 13000, 13000, "7"},
       prefix + "cudaGetDeviceCount: cudaErrorNoDevice: no CUDA-capable device is detected "
                "(driver CUDA 13.0); CUDA_VISIBLE_DEVICES=\"7\""},
      {{0, "", 13020, 13000, ""},
       prefix + "the driver (CUDA 13.2) sees no device; CUDA_VISIBLE_DEVICES=\"\""},
  };
  const ModelConfig c = OneLayerConfig();
  for (const Case& k : cases) {
    INFO(k.message);
    cuda::standin::SetDeviceReading(k.reading);
    CHECK(CudaDeviceCount() == 0);
    CHECK_FALSE(BackendAvailable(BackendKind::kCuda));
    const absl::Status status = CudaDeviceStatus();
    CHECK(status.code() == absl::StatusCode::kUnavailable);
    CHECK(status.message() == k.message);
    // Every way to a CUDA backend stops there, with the same words.
    auto backend = CreateBackend(BackendKind::kCuda, MakeSyntheticModel(c, 1));
    CHECK(backend.status() == status);
    CHECK(cuda::CreateSyntheticCudaBackend(c, 1, 0.02f).status() == status);
  }
  // A device the count reports despite an error is no device either; one with none is usable.
  cuda::standin::SetDeviceReading({1, "cudaErrorUnknown: unknown error", 13000, 13000, {}});
  CHECK(CudaDeviceCount() == 0);
  CHECK_FALSE(CudaDeviceStatus().ok());
  cuda::standin::SetDeviceReading({1, "", 13000, 13000, {}});
  CHECK(CudaDeviceStatus().ok());
  CHECK(CudaDeviceCount() == 1);
  CHECK(CreateBackend(BackendKind::kCuda, MakeSyntheticModel(c, 1)).ok());
}

TEST_CASE("A SEKV request on a device that refuses registration reads a pinned copy, and says why",
          "[cpu]") {
  // The stand-in device refuses cudaHostRegister for this case.
  const cuda::standin::StandInDevice refusing(/*registers=*/false, /*reads_pageable=*/false);
  testing::ProducerFixture f;
  DecodeEngineOptions o;
  o.sekv.enabled = true;
  auto engine =
      DecodeEngine::Create(CreateBackend(BackendKind::kCuda, f.model).value(),
                           ConsumerCodec::Create(f.model, f.model->digest(), nullptr).value(), o);
  REQUIRE(engine.ok());
  testing::DecodeEventCollector ev;
  for (uint64_t id : {1, 2}) {
    DecodeJob job;
    job.request_id = id;
    job.suffix = testing::SyntheticPrompt(60, static_cast<int>(id));
    job.max_tokens = 3;
    job.stop_ids = {-1};
    REQUIRE((*engine)->Submit(std::move(job), ev.For(id)).ok());
  }
  ev.WaitFor(2);
  for (uint64_t id : {1, 2}) CHECK(ev.final_events[id].error.ok());
  const DecodeEngineStats stats = (*engine)->stats();
  CHECK(stats.sekv_requests == 2);
  CHECK(stats.sekv_cpu_tier_copies == 2);
  CHECK(stats.sekv_cpu_tier_copy_reason.find("refuses registration") != std::string::npos);
}

namespace {

// Two SEKV requests of one 60-token prompt, one after the other, on the CUDA backend with a
// host budget: what the engine counted, and each request's host reservation when admitted
// (as its build starts) and once built (at its first token).
struct HostRun {
  DecodeEngineStats stats;
  std::vector<int64_t> admitted, kept;
};
constexpr int kHostRunPrompt = 60;
HostRun RunWithHostBudget(const testing::ProducerFixture& f) {
  DecodeEngineOptions o;
  o.sekv.enabled = true;
  o.sekv.max_host_bytes = int64_t{1} << 30;
  HostRun run;
  DecodeEngine* engine = nullptr;
  o.sekv.before_build = [&] { run.admitted.push_back(engine->stats().sekv_host_reserved_bytes); };
  o.sekv.on_cache = [&](const sekv::MemoryBreakdown&, bool started) {
    if (started) run.kept.push_back(engine->stats().sekv_host_reserved_bytes);
  };
  auto created =
      DecodeEngine::Create(CreateBackend(BackendKind::kCuda, f.model).value(),
                           ConsumerCodec::Create(f.model, f.model->digest(), nullptr).value(), o);
  REQUIRE(created.ok());
  engine = created->get();
  testing::DecodeEventCollector ev;
  for (uint64_t id : {1, 2}) {  // the second is admitted after the first has ended
    DecodeJob job;
    job.request_id = id;
    job.suffix = testing::SyntheticPrompt(kHostRunPrompt, 1);
    job.max_tokens = 3;
    job.stop_ids = {-1};
    REQUIRE(engine->Submit(std::move(job), ev.For(id)).ok());
    ev.WaitFor(id);
    CHECK(ev.final_events[id].error.ok());
  }
  engine->Drain();
  run.stats = engine->stats();
  CHECK(run.stats.sekv_requests == 2);
  CHECK(run.stats.sekv_host_reserved_bytes == 0);
  REQUIRE(run.admitted.size() == 2);
  REQUIRE(run.kept.size() == 2);
  for (int i : {0, 1}) CHECK(run.kept[i] <= run.admitted[i]);  // within the reservation
  return run;
}

}  // namespace

TEST_CASE(
    "On the GPU path a SEKV request's host reservation covers its mirror's pinned staging, and "
    "a pinned copy of its CPU tier where the driver refuses to register it",
    "[cpu]") {
  testing::ProducerFixture f;
  const sekv::CacheShape shape = sekv::CacheShape::FromConfig(f.model->config);
  const int64_t positions = kHostRunPrompt - 1;  // the prompt's captured K/V
  const int64_t captured =
      positions * 2 * shape.kv_dim() * shape.num_layers * static_cast<int64_t>(sizeof(float));
  const sekv::SekvOptions cache = DecodeEngineOptions().sekv.cache;
  const sekv::HostBound bound = sekv::MaxHostBytes(shape, cache, 0.4, positions);
  // A device that reads the CPU tier in place registers and copies nothing.
  HostRun pageable;
  {
    const cuda::standin::StandInDevice device(/*registers=*/true, /*reads_pageable=*/true);
    pageable = RunWithHostBudget(f);
  }
  CHECK(pageable.stats.sekv_cpu_tier_copies == 0);
  // Its reservation: the captured K/V, the hierarchy's bound, the window's room for the prompt's
  // last token and the 3 to come (capacity 63), and the mirror's planned staging.
  const int64_t row = captured / positions;
  CHECK(pageable.admitted[0] ==
        captured + static_cast<int64_t>(bound.total()) + row * 4 +
            static_cast<int64_t>(sekv::GpuSekv::PlanHostBytes(shape, cache, sekv::GpuTier::kBf16,
                                                              sekv::GpuZoom::kDevice, positions)));
  // One that registers it: the mirror keeps its pinned staging alone, within its plan; the
  // reservation also holds what a copy would need beyond the captured K/V, freed by then.
  const HostRun registered = RunWithHostBudget(f);
  CHECK(registered.stats.sekv_cpu_tier_copies == 0);
  const double staging = registered.stats.sekv_mirror_host_bytes / 2;
  CHECK(staging > 0);
  CHECK(staging <= static_cast<double>(sekv::GpuSekv::PlanHostBytes(
                       shape, cache, sekv::GpuTier::kBf16, sekv::GpuZoom::kDevice, positions)));
  const int64_t copy_room = registered.admitted[0] - pageable.admitted[0];
  CHECK(copy_room == std::max<int64_t>(0, static_cast<int64_t>(bound.cpu_tier) - captured));
  CHECK(copy_room > 0);  // at head_dim 8 the CPU tier's bound is twice the K/V
  CHECK(registered.admitted[1] == registered.admitted[0]);
  CHECK(registered.kept[1] == registered.kept[0]);
  // One that refuses: each request reads a pinned copy, kept in its reservation beside the
  // host cache, and still within what it reserved at admission.
  {
    const cuda::standin::StandInDevice device(/*registers=*/true, /*reads_pageable=*/false,
                                              /*refuses=*/true);
    const HostRun refused = RunWithHostBudget(f);
    CHECK(refused.stats.sekv_cpu_tier_copies == 2);
    CHECK(refused.stats.sekv_cpu_tier_copy_reason.find("refuses it") != std::string::npos);
    CHECK(refused.admitted == registered.admitted);
    // The copy: what the mirror's host memory gains, and the CPU tier (the mirror counts it).
    const double copy =
        (refused.stats.sekv_mirror_host_bytes - registered.stats.sekv_mirror_host_bytes) / 2;
    CHECK(copy > 0);
    CHECK(copy == (refused.stats.sekv_cpu_bytes - registered.stats.sekv_cpu_bytes) / 2);
    for (int i : {0, 1}) CHECK(static_cast<double>(refused.kept[i]) == registered.kept[i] + copy);
  }
}

namespace {

// What the stand-in's rounding of each allocation to 256 bytes may add to the backend's 15
// workspace buffers.
constexpr double kRoundingSlack = 15 * 256;

// Bytes the stand-in device's live allocations hold.
size_t DeviceBytesInUse() {
  const cuda::DeviceMemoryInfo m = cuda::MemoryInfo().value();
  return m.total_bytes - m.free_bytes;
}

// `n` requests of `prompt` + `max_tokens` positions (stop ids none) submitted at once to an
// engine on `backend`; returns when all have ended, with the device bytes in use then (the
// engine and its backend still alive) in *in_use when given.
DecodeEngineStats Run(std::unique_ptr<Backend> backend, const DecodeEngineOptions& options, int n,
                      int prompt, int max_tokens, testing::DecodeEventCollector* ev,
                      size_t* in_use = nullptr) {
  std::shared_ptr<const Model> model(std::shared_ptr<const Model>(), &backend->model());
  auto engine = DecodeEngine::Create(
      std::move(backend), ConsumerCodec::Create(model, model->digest(), nullptr).value(), options);
  REQUIRE(engine.ok());
  for (uint64_t id = 1; id <= static_cast<uint64_t>(n); ++id) {
    DecodeJob job;
    job.request_id = id;
    job.suffix = testing::SyntheticPrompt(prompt, static_cast<int>(id));
    job.max_tokens = max_tokens;
    job.stop_ids = {-1};
    REQUIRE((*engine)->Submit(std::move(job), ev->For(id)).ok());
  }
  ev->WaitFor(n);
  (*engine)->Drain();
  if (in_use != nullptr) *in_use = DeviceBytesInUse();
  return (*engine)->stats();
}

// Requests of `prompt` + `max_tokens` positions on the CUDA backend over a stand-in device
// whose memory is sized in requests' KV caches (the memory given back to 64 GiB at the end).
// The model's KV cache outweighs its weights and activations, as a long context's does: 16
// layers of 64 K/V columns (4 KB a position), hidden size 64.
struct SmallDevice {
  SmallDevice(int prompt, int max_tokens, bool sekv) : prompt(prompt), max_tokens(max_tokens) {
    ModelConfig c;
    c.hidden_size = 64;
    c.num_layers = 16;
    c.num_heads = 4;
    c.num_kv_heads = 4;
    c.head_dim = 16;
    c.intermediate_size = 128;
    c.vocab_size = 512;
    c.max_position_embeddings = 1024;
    model = MakeSyntheticModel(c, 3);
    empty = DeviceBytesInUse();
    // What the backend holds beside the requests' caches: its weights once created, then its
    // activations and workspaces, after two requests ran on an engine without a limit.
    auto backend = CreateBackend(BackendKind::kCuda, model).value();
    weights = DeviceBytesInUse() - empty;
    need = backend->SequenceBytes(prompt + max_tokens);
    DecodeEngineOptions o = Options(sekv);
    o.kv_memory_fraction = 0;
    testing::DecodeEventCollector ev;
    size_t in_use = 0;
    const DecodeEngineStats s = Run(std::move(backend), o, 2, prompt, 8, &ev, &in_use);
    CHECK(s.kv_budget_bytes == 0);  // fraction 0: no limit
    CHECK(s.completed == 2);
    graphs = s.graphs.device_bytes;
    workspaces = in_use - empty - weights - graphs;
  }
  ~SmallDevice() { cuda::standin::SetDeviceMemoryBytes(size_t{64} << 30); }

  // Prompts prefilled 32 tokens and payloads rebuilt 8 rows at a time, so that the backend's
  // activations and staging stay small.
  static DecodeEngineOptions Options(bool sekv) {
    DecodeEngineOptions o;
    o.sekv.enabled = sekv;
    o.prefill_chunk = 32;
    o.rebuild_chunk = 8;
    return o;
  }
  // A backend on a device of the weights, the workspaces `spare` times over (an engine
  // reserves them once, before it reads the free memory for its budget), the decode graphs of
  // two requests' steps, and room for `caches` requests' caches.
  std::unique_ptr<Backend> MakeBackend(double caches, size_t spare = 1) {
    auto backend = CreateBackend(BackendKind::kCuda, model).value();
    cuda::standin::SetDeviceMemoryBytes(empty + weights + spare * workspaces + graphs +
                                        static_cast<size_t>(caches * static_cast<double>(need)));
    return backend;
  }

  const int prompt, max_tokens;
  std::shared_ptr<const Model> model;
  size_t empty = 0, weights = 0, workspaces = 0;
  size_t graphs = 0;  // the decode graphs the two requests' steps recorded
  size_t need = 0;    // a request's reservation: what its sequence takes from the device
};

// The engine of the scratch-memory case below: SEKV prompts prefilled 256 tokens at a time.
struct ScratchServing {
  explicit ScratchServing(const SmallDevice& d) : d(d) {
    o.prefill_chunk = 256;
    o.max_batch = 4;
    o.sekv.min_prompt_tokens = 200;  // 300-token prompts take the SEKV path, 40-token ones not
    o.min_step_interval = absl::Milliseconds(3);  // so that requests overlap
  }
  absl::StatusOr<std::unique_ptr<DecodeEngine>> MakeEngine(std::unique_ptr<Backend> backend) const {
    std::shared_ptr<const Model> model(std::shared_ptr<const Model>(), &backend->model());
    return DecodeEngine::Create(std::move(backend),
                                ConsumerCodec::Create(model, model->digest(), nullptr).value(), o);
  }
  // A raw K/V payload of a 100-token prefix, from the same model on the CPU backend: the
  // engine rebuilds it through AppendKv, 8 rows at a time.
  std::vector<uint8_t> RawPayload(int seed) const {
    const std::vector<int32_t> prefix = testing::SyntheticPrompt(100, seed);
    auto seq = producer_backend->NewSequence(100).value();
    PrefillResult states;
    REQUIRE(
        producer_backend->Prefill(*seq, prefix, ProducerPrefillOptions(CodecMode::kRaw), &states)
            .ok());
    return SerializePayload(producer->Encode(CodecMode::kRaw, prefix, states).value());
  }
  // Eight requests at once: SEKV prompts, and plain ones of 40 tokens after a raw payload (of
  // 100) or alone, in turn; waits for all.
  void Serve(DecodeEngine& engine, testing::DecodeEventCollector* ev) const {
    for (uint64_t id = 1; id <= 8; ++id) {
      DecodeJob job;
      job.request_id = id;
      job.suffix = testing::SyntheticPrompt(id % 2 == 1 ? d.prompt : 40, static_cast<int>(id));
      if (id % 4 == 2) job.payload = RawPayload(static_cast<int>(id));
      job.max_tokens = d.max_tokens;
      job.stop_ids = {-1};
      REQUIRE(engine.Submit(std::move(job), ev->For(id)).ok());
    }
    ev->WaitFor(8);
    engine.Drain();
  }

  const SmallDevice& d;
  DecodeEngineOptions o = SmallDevice::Options(true);
  std::unique_ptr<Backend> producer_backend = CreateBackend(BackendKind::kCpu, d.model).value();
  std::unique_ptr<ProducerCodec> producer =
      ProducerCodec::Create(d.model, d.model->digest(), nullptr).value();
};

// On a large device: the workspace reserved at start holds the prefill's `scratch`, and serving
// adds only the decode graphs to it. The bytes reserved.
size_t CheckReservedAtStart(const ScratchServing& serving, size_t scratch) {
  auto backend = CreateBackend(BackendKind::kCuda, serving.d.model).value();
  const size_t with_weights = DeviceBytesInUse();
  const size_t pinned_before = cuda::standin::PinnedBytesInUse();
  auto engine = serving.MakeEngine(std::move(backend));
  REQUIRE(engine.ok());
  const DecodeEngineStats at_start = (*engine)->stats();
  const size_t reserved = DeviceBytesInUse() - with_weights;
  CHECK(static_cast<double>(reserved) >= at_start.workspace_device_bytes);
  CHECK(static_cast<double>(reserved) < at_start.workspace_device_bytes + kRoundingSlack);
  CHECK(static_cast<size_t>(at_start.workspace_device_bytes) > scratch);
  CHECK(cuda::standin::PinnedBytesInUse() - pinned_before ==
        static_cast<size_t>(at_start.workspace_host_bytes));
  // The budget: the share of the free memory after the reservation.
  const double free_now = static_cast<double>(cuda::MemoryInfo().value().free_bytes);
  CHECK(at_start.kv_budget_bytes == static_cast<int64_t>(0.9 * free_now));
  testing::DecodeEventCollector ev;
  serving.Serve(**engine, &ev);
  const DecodeEngineStats s = (*engine)->stats();
  CHECK(s.completed == 8);
  CHECK(s.sekv_requests == 4);
  CHECK(s.rebuild_rows == 2 * 100);
  CHECK(s.max_batch_seen >= 2);
  CHECK(s.max_batch_seen <= 4);
  // Every request's cache and mirror freed, and the workspace as it was at start: no call
  // grew it. The decode graphs recorded meanwhile hold the rest, out of the memory the
  // budget left free.
  CHECK(s.graphs.captures > 0);
  CHECK(s.graphs.device_bytes > 0);
  CHECK(DeviceBytesInUse() == with_weights + reserved + s.graphs.device_bytes);
  CHECK(cuda::standin::PinnedBytesInUse() - pinned_before ==
        static_cast<size_t>(at_start.workspace_host_bytes));
  return reserved;
}

// The bundled pair, its artifact, and payloads of 40 tokens rebuilt 16 rows at a time.
struct RebuildServing {
  RebuildServing() {
    auto loaded = ScdArtifact::Load(
        testing::SourceFile("configs/calibration/stories260K-babi-qa.scd.safetensors"));
    INFO(loaded.status());
    REQUIRE(loaded.ok());
    artifact = std::make_shared<const ScdArtifact>(std::move(loaded).value());
    encoder = ProducerCodec::Create(producer_model, consumer_model->digest(), artifact).value();
    o.prefill_chunk = 32;
    o.rebuild_chunk = 16;
    o.max_batch = 2;
    o.min_step_interval = absl::Milliseconds(3);  // so that requests overlap
  }
  std::vector<uint8_t> PayloadBytes(CodecMode mode, int seed) const {
    const std::vector<int32_t> prefix = testing::SyntheticPrompt(40, seed);
    auto seq = producer_cpu->NewSequence(40).value();
    PrefillResult states;
    REQUIRE(
        producer_cpu->Prefill(*seq, prefix, ProducerPrefillOptions(CodecMode::kScd), &states).ok());
    return SerializePayload(encoder->Encode(mode, prefix, states).value());
  }
  absl::StatusOr<std::unique_ptr<DecodeEngine>> MakeEngine(std::unique_ptr<Backend> backend) const {
    return DecodeEngine::Create(
        std::move(backend),
        ConsumerCodec::Create(consumer_model, producer_model->digest(), artifact).value(), o);
  }

  std::shared_ptr<const ScdArtifact> artifact;
  std::shared_ptr<const Model> producer_model = testing::LoadSharedModel("models/stories260K");
  std::shared_ptr<const Model> consumer_model =
      testing::LoadSharedModel("models/stories260K-babi-qa");
  std::unique_ptr<Backend> producer_cpu = CreateBackend(BackendKind::kCpu, producer_model).value();
  std::unique_ptr<ProducerCodec> encoder;
  DecodeEngineOptions o;
};

// Six requests after scd and scd-reuse payloads in turn: one rebuilder serves both, no chunk
// allocates.
void ServeScdPayloads(const RebuildServing& serving, DecodeEngine& engine,
                      const DecodeEngineStats& at_start) {
  testing::DecodeEventCollector ev;
  for (uint64_t id = 1; id <= 6; ++id) {
    DecodeJob job;
    job.request_id = id;
    job.payload = serving.PayloadBytes(id % 2 == 1 ? CodecMode::kScd : CodecMode::kScdReuse,
                                       static_cast<int>(id));
    job.suffix = {5, 6, 7};
    job.max_tokens = 4;
    job.stop_ids = {-1};
    REQUIRE(engine.Submit(std::move(job), ev.For(id)).ok());
  }
  ev.WaitFor(6);
  engine.Drain();
  for (const auto& [id, e] : ev.final_events) {
    INFO("request " << id << ": " << e.error);
    CHECK(e.error.ok());
  }
  const DecodeEngineStats s = engine.stats();
  CHECK(s.completed == 6);
  CHECK(s.rebuild_rows == 6 * 40);
  CHECK(s.rebuild_chunks == 6 * 3);  // 16 + 16 + 8 rows
  CHECK(s.rebuild_device_bytes == at_start.rebuild_device_bytes);
  CHECK(s.rebuild_host_bytes == at_start.rebuild_host_bytes);
}

// On a large device: beside the backend's workspace, the rebuilder (every layer's REUSE
// decoders, the selected layers' aligners and [W_K; W_V], and its buffers for 16 rows) is
// taken at start, before the KV budget's reading. The bytes reserved, and the rebuilder's.
std::pair<size_t, size_t> CheckRebuilderReservedAtStart(const RebuildServing& serving) {
  const size_t pinned_before = cuda::standin::PinnedBytesInUse();
  auto backend = CreateBackend(BackendKind::kCuda, serving.consumer_model).value();
  const size_t with_weights = DeviceBytesInUse();
  auto engine = serving.MakeEngine(std::move(backend));
  REQUIRE(engine.ok());
  const DecodeEngineStats at_start = (*engine)->stats();
  CHECK(at_start.rebuild_device_bytes > 0);
  CHECK(at_start.rebuild_host_bytes > 0);
  const size_t reserved = DeviceBytesInUse() - with_weights;
  const double both =
      static_cast<double>(at_start.workspace_device_bytes + at_start.rebuild_device_bytes);
  CHECK(static_cast<double>(reserved) >= both);
  CHECK(static_cast<double>(reserved) < both + kRoundingSlack + 64 * 256);
  const size_t pinned =
      static_cast<size_t>(at_start.workspace_host_bytes + at_start.rebuild_host_bytes);
  CHECK(cuda::standin::PinnedBytesInUse() - pinned_before == pinned);
  const double free_now = static_cast<double>(cuda::MemoryInfo().value().free_bytes);
  CHECK(at_start.kv_budget_bytes == static_cast<int64_t>(0.9 * free_now));
  ServeScdPayloads(serving, **engine, at_start);
  CHECK(DeviceBytesInUse() == with_weights + reserved + (*engine)->stats().graphs.device_bytes);
  CHECK(cuda::standin::PinnedBytesInUse() - pinned_before == pinned);
  return {reserved, static_cast<size_t>(at_start.rebuild_device_bytes)};
}

}  // namespace

TEST_CASE(
    "On a device with memory for two requests' KV caches, the engine queues the others rather "
    "than fail them",
    "[cpu]") {
  SmallDevice d(/*prompt=*/12, /*max_tokens=*/500, /*sekv=*/false);
  {
    auto backend = CreateBackend(BackendKind::kCuda, d.model).value();
    const size_t before = DeviceBytesInUse();
    auto seq = backend->NewSequence(d.prompt + d.max_tokens);
    REQUIRE(seq.ok());
    CHECK(DeviceBytesInUse() - before >= d.need);  // K, V and the logits, each rounded to 256
    CHECK(DeviceBytesInUse() - before < d.need + 3 * 256);
  }
  INFO("weights " << d.weights << ", workspaces " << d.workspaces << ", a request's KV cache "
                  << d.need << " bytes");
  REQUIRE(d.need > 3 * d.workspaces);  // else the workspaces, not the caches, would decide

  SECTION("without a KV budget, the requests that do not fit fail as cudaMalloc does") {
    DecodeEngineOptions o = SmallDevice::Options(false);
    o.kv_memory_fraction = 0;
    testing::DecodeEventCollector ev;
    const DecodeEngineStats s = Run(d.MakeBackend(2.5), o, 6, d.prompt, d.max_tokens, &ev);
    CHECK(s.failed > 0);
    CHECK(s.completed + s.failed == 6);
    for (const auto& [id, e] : ev.final_events) {
      if (e.error.ok()) continue;
      CHECK(e.error.code() == absl::StatusCode::kResourceExhausted);
      CHECK(e.error.message().find("out of memory") != std::string_view::npos);
    }
  }
  SECTION("with the default budget, every request completes, two at a time") {
    auto backend = d.MakeBackend(2.5);
    const size_t free_at_create = cuda::MemoryInfo().value().free_bytes;
    testing::DecodeEventCollector ev;
    const DecodeEngineStats s =
        Run(std::move(backend), SmallDevice::Options(false), 6, d.prompt, d.max_tokens, &ev);
    // The share of what the device has free once the engine's workspace is reserved (its
    // buffers each rounded up to 256 bytes by the stand-in, as by cudaMalloc).
    const double after_reserve =
        static_cast<double>(free_at_create) - static_cast<double>(s.workspace_device_bytes);
    CHECK(s.workspace_device_bytes > 0);
    CHECK(s.kv_budget_bytes <= static_cast<int64_t>(0.9 * after_reserve));
    CHECK(s.kv_budget_bytes >= static_cast<int64_t>(0.9 * (after_reserve - kRoundingSlack)));
    CHECK(s.completed == 6);
    CHECK(s.failed == 0);
    for (uint64_t id = 1; id <= 6; ++id)
      CHECK(ev.tokens[id].size() == static_cast<size_t>(d.max_tokens));
    CHECK(s.max_batch_seen <= s.kv_budget_bytes / static_cast<int64_t>(d.need));
    CHECK(s.kv_waits >= 2);  // the first request of the second and third pairs, at least
  }
  CHECK(DeviceBytesInUse() == d.empty);
}

TEST_CASE(
    "SEKV requests hold only their mirror's device memory once built, so more of them run at "
    "once on the same device",
    "[cpu]") {
  // Long prompts, which SEKV holds at a fraction (sekv.budget 0.4) of their full cache, and
  // long generations (100 steps of 6 ms or more), so that requests overlap.
  SmallDevice d(/*prompt=*/400, /*max_tokens=*/100, /*sekv=*/true);
  INFO("weights " << d.weights << ", workspaces " << d.workspaces << ", a request's KV cache "
                  << d.need << " bytes");
  REQUIRE(d.need > 2 * d.workspaces);
  // A budget of three full caches (so the plain path runs three at a time), on a device with
  // room for it and the workspaces the engine reserves at start, no more: a request whose
  // mirror took more than it reserved would run the device out of memory.
  DecodeEngineOptions o = SmallDevice::Options(true);
  o.kv_budget_bytes = static_cast<int64_t>(3 * d.need);
  o.min_step_interval = absl::Milliseconds(6);
  testing::DecodeEventCollector ev;
  size_t in_use = 0;
  const DecodeEngineStats s = Run(d.MakeBackend(3), o, 8, d.prompt, d.max_tokens, &ev, &in_use);
  CHECK(s.completed == 8);
  CHECK(s.failed == 0);
  CHECK(s.sekv_requests == 8);
  for (uint64_t id = 1; id <= 8; ++id)
    CHECK(ev.tokens[id].size() == static_cast<size_t>(d.max_tokens));
  // Once built, a request keeps its mirror's device memory (about half its full cache here),
  // so a fourth starts beside three.
  CHECK(s.max_batch_seen >= 4);
  const double kept = s.sekv_device_bytes / 8 / static_cast<double>(d.need);
  CHECK(kept > 0.3);
  CHECK(kept < 0.65);
  CHECK(in_use <= d.empty + d.weights + d.workspaces);  // every mirror freed
}

TEST_CASE(
    "The engine takes the backend's scratch memory for its largest calls when it starts: "
    "serving allocates no more of it, and the KV budget is a share of what is left",
    "[cpu]") {
  // SEKV prompts prefilled 256 tokens at a time: each chunk's K/V and H_in (the hooks) and
  // its logits for the surprisal take more device memory than a request's whole cache.
  SmallDevice d(/*prompt=*/300, /*max_tokens=*/8, /*sekv=*/true);
  const ScratchServing serving(d);
  const ModelConfig& c = d.model->config;
  const WorkspaceShape shape = DecodeEngine::WorkspaceFor(c, serving.o);
  CHECK(shape.prefill_tokens == 256);
  CHECK(shape.prefill_surprisal);
  CHECK(shape.prefill_layer_states);
  CHECK(shape.decode_rows == 4);
  CHECK(shape.decode_length == c.max_position_embeddings);
  CHECK(shape.append_tokens == 8);
  const size_t hooks =
      sizeof(float) * c.num_layers * 256 * static_cast<size_t>(c.hidden_size + 2 * c.kv_dim());
  const size_t logits = sizeof(float) * 256 * static_cast<size_t>(c.vocab_size);
  INFO("a request's KV cache " << d.need << " bytes, the prefill's hooks " << hooks
                               << " and logits " << logits);
  REQUIRE(hooks + logits > d.need);
  const size_t reserved = CheckReservedAtStart(serving, hooks + logits);
  CHECK(DeviceBytesInUse() == d.empty);

  SECTION("a device with room for the weights, the workspace and 2.5 caches serves them all") {
    auto small = CreateBackend(BackendKind::kCuda, d.model).value();
    const size_t caches = static_cast<size_t>(2.5 * static_cast<double>(d.need));
    cuda::standin::SetDeviceMemoryBytes(DeviceBytesInUse() + reserved + caches);
    auto engine = serving.MakeEngine(std::move(small));
    REQUIRE(engine.ok());
    testing::DecodeEventCollector ev;
    serving.Serve(**engine, &ev);
    const DecodeEngineStats s = (*engine)->stats();
    CHECK(s.completed == 8);
    CHECK(s.failed == 0);
    for (const auto& [id, e] : ev.final_events) CHECK(e.error.ok());
    CHECK(s.kv_budget_bytes == static_cast<int64_t>(0.9 * static_cast<double>(caches)));
    CHECK(s.kv_waits > 0);  // two at a time
  }
  SECTION("a device without room for the workspace refuses to start, and says what to lower") {
    auto small = CreateBackend(BackendKind::kCuda, d.model).value();
    cuda::standin::SetDeviceMemoryBytes(DeviceBytesInUse() + reserved / 2);
    auto engine = serving.MakeEngine(std::move(small));
    REQUIRE(!engine.ok());
    CHECK(engine.status().code() == absl::StatusCode::kResourceExhausted);
    const std::string message(engine.status().message());
    INFO(message);
    CHECK(message.find("a prefill of 256 tokens with SEKV's K/V") != std::string::npos);
    CHECK(message.find("lower engine.prefill_chunk") != std::string::npos);
    CHECK(message.find("out of memory") != std::string::npos);
  }
}

TEST_CASE(
    "The CUDA backend's reserved workspace holds a decode step of every batch and length up to "
    "its shape's",
    "[cpu]") {
  SmallDevice d(/*prompt=*/12, /*max_tokens=*/4, /*sekv=*/false);
  WorkspaceShape shape;
  shape.prefill_tokens = 1000;
  shape.decode_rows = 8;
  shape.decode_length = 1024;
  auto reserve = [&](int length) {
    shape.decode_length = length;
    auto backend = CreateBackend(BackendKind::kCuda, d.model).value();
    REQUIRE(backend->ReserveWorkspace(shape).ok());
    return backend;
  };
  // The decode attention's split-K workspace grows with the context: a shape of 256 positions
  // reserves less than one of 1024.
  const size_t short_context = reserve(256)->Workspace().device;
  auto backend = reserve(1024);
  const WorkspaceBytes reserved = backend->Workspace();
  CHECK(reserved.device > short_context);
  CHECK(reserved.pinned_host > 0);
  // Eight sequences of 1000 positions, then decode steps of 8 down to 1 of them: nothing grows.
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (int i = 0; i < 8; ++i) {
    seqs.push_back(backend->NewSequence(1024).value());
    PrefillResult r;
    REQUIRE(backend->Prefill(*seqs.back(), testing::SyntheticPrompt(1000, i), {}, &r).ok());
  }
  const size_t in_use = DeviceBytesInUse();
  for (int b = 8; b >= 1; b /= 2) {
    std::vector<Sequence*> batch;
    for (int i = 0; i < b; ++i) batch.push_back(seqs[i].get());
    std::vector<int32_t> tokens(b, 5), next;
    std::vector<SampleDraw> draws(b);
    REQUIRE(backend->DecodeSample(batch, tokens, draws, &next).ok());
    CHECK(next.size() == static_cast<size_t>(b));
  }
  CHECK(backend->Workspace().device == reserved.device);
  CHECK(backend->Workspace().pinned_host == reserved.pinned_host);
  // What the device lost is the decode graphs', one per batch size.
  CHECK(backend->decode_graph_stats().cached == 4);
  CHECK(DeviceBytesInUse() == in_use + backend->decode_graph_stats().device_bytes);
}

TEST_CASE(
    "The CUDA decode graphs' device memory is counted and given back, and a graph the device "
    "has no room for leaves the step eager",
    "[cpu]") {
  SmallDevice d(/*prompt=*/12, /*max_tokens=*/4, /*sekv=*/false);
  auto graphed = CreateBackend(BackendKind::kCuda, d.model).value();
  auto eager = CreateBackend(BackendKind::kCuda, d.model).value();
  cuda::DecodeGraphOptions off;
  off.enabled = false;
  REQUIRE(cuda::SetDecodeGraphs(*eager, off).ok());
  std::vector<std::unique_ptr<Sequence>> gs, es;
  for (int i = 0; i < 2; ++i) {
    for (auto* pair : {&gs, &es}) {
      Backend& backend = pair == &gs ? *graphed : *eager;
      pair->push_back(backend.NewSequence(64).value());
      PrefillResult r;
      REQUIRE(backend.Prefill(*pair->back(), testing::SyntheticPrompt(20 + i, i), {}, &r).ok());
    }
  }
  // A step of the first `batch` sequences on each backend; the logits must match bitwise.
  auto step = [&](int batch) {
    std::vector<Sequence*> gb, eb;
    for (int i = 0; i < batch; ++i) {
      gb.push_back(gs[i].get());
      eb.push_back(es[i].get());
    }
    const std::vector<int32_t> tokens = {5, 6};
    const std::vector<int32_t> batch_tokens(tokens.begin(), tokens.begin() + batch);
    std::vector<float> gl, el;
    REQUIRE(graphed->Decode(gb, batch_tokens, &gl).ok());
    REQUIRE(eager->Decode(eb, batch_tokens, &el).ok());
    REQUIRE(gl.size() == el.size());
    CHECK(std::memcmp(gl.data(), el.data(), gl.size() * sizeof(float)) == 0);
  };
  // Eager steps first, so the workspaces have their size before anything is counted.
  REQUIRE(cuda::SetDecodeGraphs(*graphed, off).ok());
  step(2);
  step(1);
  REQUIRE(cuda::SetDecodeGraphs(*graphed, {}).ok());
  const size_t before = DeviceBytesInUse();

  // Two shapes, two graphs: the device lost exactly what they hold; replays take nothing more.
  step(2);
  step(1);
  step(2);
  DecodeGraphStats g = graphed->decode_graph_stats();
  CHECK(g.captures == 2);
  CHECK(g.replays == 1);
  CHECK(g.cached == 2);
  CHECK(g.device_bytes >= 2 * cuda::standin::kGraphNodeBytes);
  CHECK(DeviceBytesInUse() - before == g.device_bytes);

  // Dropping the graphs gives their memory back.
  REQUIRE(cuda::SetDecodeGraphs(*graphed, {}).ok());
  CHECK(graphed->decode_graph_stats().device_bytes == 0);
  CHECK(DeviceBytesInUse() == before);

  // A device with room for one node: the instantiation fails as cudaGraphInstantiate does,
  // the step runs eagerly with the same result, and graphs stay off, saying why.
  cuda::standin::SetDeviceMemoryBytes(before + cuda::standin::kGraphNodeBytes);
  step(2);
  step(2);
  g = graphed->decode_graph_stats();
  CHECK(g.capture_failures == 1);
  CHECK_FALSE(g.active);
  CHECK(g.cached == 0);
  CHECK(g.device_bytes == 0);
  INFO(g.last_failure);
  CHECK(g.last_failure.find("cudaGraphInstantiate") != std::string::npos);
  CHECK(g.last_failure.find("out of memory") != std::string::npos);
  CHECK(DeviceBytesInUse() == before);
}

TEST_CASE(
    "The engine reserves the SCD GPU rebuild's memory for a payload chunk at start, and scd and "
    "scd-reuse payloads then allocate none of it",
    "[cpu]") {
  const RebuildServing serving;
  const size_t pinned_before = cuda::standin::PinnedBytesInUse();
  const auto [reserved, rebuild_device] = CheckRebuilderReservedAtStart(serving);
  CHECK(cuda::standin::PinnedBytesInUse() == pinned_before);

  SECTION("a device with room for the backend's workspace but not the rebuilder refuses to start") {
    auto small = CreateBackend(BackendKind::kCuda, serving.consumer_model).value();
    cuda::standin::SetDeviceMemoryBytes(DeviceBytesInUse() + (reserved - rebuild_device) +
                                        rebuild_device / 2);
    auto engine = serving.MakeEngine(std::move(small));
    cuda::standin::SetDeviceMemoryBytes(size_t{64} << 30);
    REQUIRE(!engine.ok());
    CHECK(engine.status().code() == absl::StatusCode::kResourceExhausted);
    const std::string message(engine.status().message());
    INFO(message);
    CHECK(message.find("SCD GPU rebuild") != std::string::npos);
    CHECK(message.find("payload chunk of 16 rows") != std::string::npos);
    CHECK(message.find("lower engine.rebuild_chunk") != std::string::npos);
  }
}

}  // namespace scd
