// test_cuda_host: the CUDA backend's host code (kernels/cuda/cuda_backend.cc and
// device_weights.cc, unmodified, with the backend factory built as in a CUDA build) over the
// CPU stand-ins of every CUDA call it makes (tests/gpu_host/stub_memory.cc, stub_ops.cc,
// stub_launchers.cc), so CI runs tests/cuda's whole-backend cases (backend_test.cc,
// gpu_sekv_test.cc, compiled in as they are) on a machine without a GPU: the orchestration
// (step metadata, cache tables, buffer sizing, hooks, sampling parameters, the external
// attention path) is checked against the CPU backend; the kernels are test_cuda's. This case
// makes sure the stand-ins are what runs: in a CUDA build the real objects are in the link
// too (tests/CMakeLists.txt), and the stand-ins must win.
#include <catch2/catch.hpp>
#include <string>

#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/runtime/cuda_backend.h"
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
  struct Refusing {  // the stand-in device refuses cudaHostRegister for this case
    Refusing() { cuda::stub::SetHostRegisterSupported(false); }
    ~Refusing() { cuda::stub::SetHostRegisterSupported(true); }
  } refusing;
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

// Bytes the stand-in device's live allocations hold.
size_t DeviceBytesInUse() {
  const cuda::DeviceMemoryInfo m = cuda::MemoryInfo().value();
  return m.total_bytes - m.free_bytes;
}

// Six requests of `prompt` + `max_tokens` positions (stop ids none) submitted at once to an
// engine on `backend`; returns when all have ended.
DecodeEngineStats RunSix(std::unique_ptr<Backend> backend, const DecodeEngineOptions& options,
                         int prompt, int max_tokens, testing::DecodeEventCollector* ev) {
  std::shared_ptr<const Model> model(std::shared_ptr<const Model>(), &backend->model());
  auto engine = DecodeEngine::Create(
      std::move(backend), ConsumerCodec::Create(model, model->digest, nullptr).value(), options);
  REQUIRE(engine.ok());
  for (uint64_t id = 1; id <= 6; ++id) {
    DecodeJob job;
    job.request_id = id;
    job.suffix = testing::SyntheticPrompt(prompt, static_cast<int>(id));
    job.max_tokens = max_tokens;
    job.stop_ids = {-1};
    REQUIRE((*engine)->Submit(std::move(job), ev->For(id)).ok());
  }
  ev->WaitFor(6);
  return (*engine)->stats();
}

}  // namespace

TEST_CASE(
    "On a device with memory for two requests' KV caches, the engine queues the others rather "
    "than fail them",
    "[cpu]") {
  // A model whose KV cache outweighs its weights and activations, as a long context's does:
  // 16 layers of 64 K/V columns (4 KB a position), hidden size 64.
  ModelConfig c;
  c.hidden_size = 64;
  c.num_layers = 16;
  c.num_heads = 4;
  c.num_kv_heads = 4;
  c.head_dim = 16;
  c.intermediate_size = 128;
  c.vocab_size = 512;
  c.max_position_embeddings = 1024;
  const std::shared_ptr<const Model> model = MakeSyntheticModel(c, 3);
  constexpr int kPrompt = 12, kMaxTokens = 500;
  struct Restore {  // the stand-in device's memory back to its default
    ~Restore() { cuda::stub::SetDeviceMemoryBytes(size_t{64} << 30); }
  } restore;
  const size_t empty = DeviceBytesInUse();
  // What the backend holds beside the requests' caches: its weights once created, then its
  // activations and workspaces, measured after two requests ran on an engine without a limit.
  size_t weights = 0, workspaces = 0;
  {
    auto backend = CreateBackend(BackendKind::kCuda, model).value();
    weights = DeviceBytesInUse() - empty;
    DecodeEngineOptions o;
    o.kv_memory_fraction = 0;
    auto engine = DecodeEngine::Create(
        std::move(backend), ConsumerCodec::Create(model, model->digest, nullptr).value(), o);
    REQUIRE(engine.ok());
    CHECK((*engine)->stats().kv_budget_bytes == 0);  // fraction 0: no limit
    testing::DecodeEventCollector ev;
    for (uint64_t id : {1, 2}) {
      DecodeJob job;
      job.request_id = id;
      job.suffix = testing::SyntheticPrompt(kPrompt, static_cast<int>(id));
      job.max_tokens = 8;
      REQUIRE((*engine)->Submit(std::move(job), ev.For(id)).ok());
    }
    ev.WaitFor(2);
    (*engine)->Drain();
    workspaces = DeviceBytesInUse() - empty - weights;
  }
  size_t need = 0;  // a request's reservation: what its sequence takes from the device
  {
    auto backend = CreateBackend(BackendKind::kCuda, model).value();
    need = backend->SequenceBytes(kPrompt + kMaxTokens);
    const size_t before = DeviceBytesInUse();
    auto seq = backend->NewSequence(kPrompt + kMaxTokens);
    REQUIRE(seq.ok());
    CHECK(DeviceBytesInUse() - before >= need);  // K, V and the logits, each rounded to 256
    CHECK(DeviceBytesInUse() - before < need + 3 * 256);
  }
  INFO("weights " << weights << ", workspaces " << workspaces << ", a request's KV cache " << need
                  << " bytes");
  REQUIRE(need > 3 * workspaces);  // else the workspaces, not the caches, would decide
  // The device: the weights, the workspaces ten times over (the budget leaves 10% of the free
  // memory for them), and room for two and a half requests' caches.
  const auto device_for = [&] { return empty + weights + 10 * workspaces + 5 * need / 2; };

  SECTION("without a KV budget, the requests that do not fit fail as cudaMalloc does") {
    auto backend = CreateBackend(BackendKind::kCuda, model).value();
    cuda::stub::SetDeviceMemoryBytes(device_for());
    DecodeEngineOptions o;
    o.kv_memory_fraction = 0;
    testing::DecodeEventCollector ev;
    const DecodeEngineStats s = RunSix(std::move(backend), o, kPrompt, kMaxTokens, &ev);
    CHECK(s.failed > 0);
    CHECK(s.completed + s.failed == 6);
    for (const auto& [id, e] : ev.final_events) {
      if (e.error.ok()) continue;
      CHECK(e.error.code() == absl::StatusCode::kResourceExhausted);
      CHECK(e.error.message().find("out of memory") != std::string_view::npos);
    }
  }
  SECTION("with the default budget, every request completes, two at a time") {
    auto backend = CreateBackend(BackendKind::kCuda, model).value();
    cuda::stub::SetDeviceMemoryBytes(device_for());
    const size_t free_at_create = cuda::MemoryInfo().value().free_bytes;
    testing::DecodeEventCollector ev;
    const DecodeEngineStats s = RunSix(std::move(backend), {}, kPrompt, kMaxTokens, &ev);
    CHECK(s.kv_budget_bytes == static_cast<int64_t>(0.9 * static_cast<double>(free_at_create)));
    CHECK(s.completed == 6);
    CHECK(s.failed == 0);
    for (uint64_t id = 1; id <= 6; ++id) CHECK(ev.tokens[id].size() == kMaxTokens);
    CHECK(s.max_batch_seen <= s.kv_budget_bytes / static_cast<int64_t>(need));
    CHECK(s.kv_waits >= 2);  // the first request of the second and third pairs, at least
  }
  CHECK(DeviceBytesInUse() == empty);
}

}  // namespace scd
