// test_cuda_host: the CUDA backend's host code (kernels/cuda/cuda_backend.cc and
// device_weights.cc, unmodified, with the backend factory built as in a CUDA build) over the
// CPU stand-ins of every CUDA call it makes (tests/gpu_host/stub_memory.cc, stub_ops.cc,
// stub_launchers.cc), so CI runs tests/cuda's whole-backend cases (backend_test.cc,
// gpu_sekv_test.cc, compiled in as they are) on a machine without a GPU: the orchestration
// (step metadata, cache tables, buffer sizing, hooks, sampling parameters, the external
// attention path) is checked against the CPU backend; the kernels are test_cuda's. This case
// makes sure the stand-ins are what runs: in a CUDA build the real objects are in the link
// too (tests/CMakeLists.txt), and the stand-ins must win.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>

#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/runtime/cuda_backend.h"
#include "common/sekv/budget_plan.h"
#include "common/sekv/gpu_sekv.h"
#include "common/serving/decode_engine.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/synthetic_backend.h"
#include "tests/gpu_host/stub_memory.h"
#include "tests/serving/engine_fixture.h"

namespace scd {

TEST_CASE("test_cuda_host runs the CUDA backend over the CPU stand-ins", "[cpu]") {
  CHECK(CudaDeviceCount() == 1);
  CHECK(cuda::DeviceDescription(0).find("CPU stand-in") != std::string::npos);
  CHECK(BackendAvailable(BackendKind::kCuda));
  ModelConfig c;
  c.hidden_size = 32;
  c.num_layers = 1;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 16;
  c.intermediate_size = 48;
  c.vocab_size = 40;
  c.max_position_embeddings = 16;
  auto backend = CreateBackend(BackendKind::kCuda, MakeSyntheticModel(c, 1));
  INFO(backend.status());
  REQUIRE(backend.ok());
  CHECK((*backend)->name() == "cuda");
  CHECK(cuda::IsCudaBackend(**backend));
}

TEST_CASE("A SEKV request on a device that refuses registration reads a pinned copy, and says why",
          "[cpu]") {
  // The stand-in device refuses cudaHostRegister for this case.
  const cuda::stub::StandInDevice refusing(/*registers=*/false, /*reads_pageable=*/false);
  testing::ProducerFixture f;
  DecodeEngineOptions o;
  o.sekv.enabled = true;
  auto engine =
      DecodeEngine::Create(CreateBackend(BackendKind::kCuda, f.model).value(),
                           ConsumerCodec::Create(f.model, f.model->digest, nullptr).value(), o);
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
                           ConsumerCodec::Create(f.model, f.model->digest, nullptr).value(), o);
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
    const cuda::stub::StandInDevice device(/*registers=*/true, /*reads_pageable=*/true);
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
    const cuda::stub::StandInDevice device(/*registers=*/true, /*reads_pageable=*/false,
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
      std::move(backend), ConsumerCodec::Create(model, model->digest, nullptr).value(), options);
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
    workspaces = in_use - empty - weights;
  }
  ~SmallDevice() { cuda::stub::SetDeviceMemoryBytes(size_t{64} << 30); }

  // Prompts prefilled 32 tokens at a time, so that the backend's activations stay small.
  static DecodeEngineOptions Options(bool sekv) {
    DecodeEngineOptions o;
    o.sekv.enabled = sekv;
    o.prefill_chunk = 32;
    return o;
  }
  // A backend on a device of the weights, the workspaces `spare` times over (the default
  // budget leaves 10% of the free memory for them: 10) and room for `caches` requests' caches.
  std::unique_ptr<Backend> MakeBackend(double caches, size_t spare = 10) {
    auto backend = CreateBackend(BackendKind::kCuda, model).value();
    cuda::stub::SetDeviceMemoryBytes(empty + weights + spare * workspaces +
                                     static_cast<size_t>(caches * static_cast<double>(need)));
    return backend;
  }

  const int prompt, max_tokens;
  std::shared_ptr<const Model> model;
  size_t empty = 0, weights = 0, workspaces = 0;
  size_t need = 0;  // a request's reservation: what its sequence takes from the device
};

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
    DecodeEngineOptions o;
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
    const DecodeEngineStats s = Run(std::move(backend), {}, 6, d.prompt, d.max_tokens, &ev);
    CHECK(s.kv_budget_bytes == static_cast<int64_t>(0.9 * static_cast<double>(free_at_create)));
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
  REQUIRE(d.need > 3 * d.workspaces);
  // A budget of three full caches (so the plain path runs three at a time), on a device with
  // room for it and twice the workspaces: a request whose mirror took more than it reserved
  // would run the device out of memory.
  DecodeEngineOptions o = SmallDevice::Options(true);
  o.kv_budget_bytes = static_cast<int64_t>(3 * d.need);
  o.min_step_interval = absl::Milliseconds(6);
  testing::DecodeEventCollector ev;
  size_t in_use = 0;
  const DecodeEngineStats s =
      Run(d.MakeBackend(3, /*spare=*/2), o, 8, d.prompt, d.max_tokens, &ev, &in_use);
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

}  // namespace scd
