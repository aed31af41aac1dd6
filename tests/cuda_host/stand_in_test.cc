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

}  // namespace scd
