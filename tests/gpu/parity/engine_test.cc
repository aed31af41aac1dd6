// The decode engine (common/serving/decode_engine.h) on the CUDA backend, as the decode daemon
// runs it on a GPU: four requests at once, prefilled (and rebuilt) in chunks of 16 between
// batched decode steps (a suffix-only prompt, an oracle payload with a short suffix, a longer
// suffix, a raw payload), with the backend sampling on the device.
//   plain path: each request's tokens are the ones the CPU reference picks along them
//               (teacher-forced: the CPU prefills the prompt and the GPU's tokens), wherever the
//               CPU's lead over the runner-up is decisive (the margin of backend_test.cc);
//   SEKV path:  every request runs through GpuSekv and completes, within the GPU budget, its
//               CPU tier registered on the build thread and read there (no pinned copy);
//   both:       the two longer prompts on the SEKV path, the others plain (checked as above),
//               stepped together in mixed steps (GpuSekv::StepMixed).
// Both are admitted within the default KV budget, a share of the device's free memory.
// Both paths prefill every prompt token in chunks of at most 16, and rebuild the raw payload's
// rows 16 at a time.
#include <catch2/catch.hpp>

#include "common/runtime/sampler.h"
#include "common/scd/wire_format.h"
#include "common/serving/decode_engine.h"
#include "kernels/cuda/device_memory.h"
#include "tests/gpu/parity/cuda_test_support.h"
#include "tests/serving/engine_fixture.h"

namespace scd {
namespace {

using testing::DecodeEventCollector;
using testing::SyntheticPrompt;

using testing::kGreedyMargin;
constexpr int kTokens = 12;

struct Request {
  uint64_t id;
  std::vector<int32_t> prompt;
  size_t payload_tokens;  // the payload's; 0: suffix only
  CodecMode mode = CodecMode::kOracle;
};

// A suffix-only prompt, an oracle payload with a short suffix, a longer suffix, a raw payload.
std::vector<Request> FourRequests() {
  return {{1, SyntheticPrompt(40, 1), 0},
          {2, SyntheticPrompt(103, 2), 100},
          {3, SyntheticPrompt(70, 3), 0},
          {4, SyntheticPrompt(60, 4), 50, CodecMode::kRaw}};
}

// Mode 0: the plain path; 1: the SEKV path; 2: both (sekv.min_prompt_tokens 65: the two
// longer prompts on the SEKV path, the others plain, decoded in mixed steps while both run;
// steps slowed to 20 ms so that they do).
size_t MinSekvPrompt(int mode) { return mode == 2 ? 65 : 0; }

std::unique_ptr<DecodeEngine> CudaEngine(const testing::ProducerFixture& f, int mode) {
  DecodeEngineOptions o;
  o.max_batch = 4;
  o.prefill_chunk = 16;
  o.rebuild_chunk = 16;
  o.sekv.enabled = mode > 0;
  o.sekv.budget = 0.4;
  o.sekv.min_prompt_tokens = static_cast<int>(MinSekvPrompt(mode));
  if (mode == 2) o.min_step_interval = absl::Milliseconds(20);
  auto engine =
      DecodeEngine::Create(testing::MakeBackend(BackendKind::kCuda, f.model),
                           ConsumerCodec::Create(f.model, f.model->digest(), nullptr).value(), o);
  REQUIRE(engine.ok());
  return std::move(engine).value();
}

void SubmitAll(DecodeEngine& engine, testing::ProducerFixture& f,
               const std::vector<Request>& requests, DecodeEventCollector& ev) {
  for (const Request& r : requests) {
    DecodeJob job;
    job.request_id = r.id;
    if (r.payload_tokens > 0) {
      const std::vector<int32_t> prefix(r.prompt.begin(), r.prompt.begin() + r.payload_tokens);
      job.payload = SerializePayload(f.Encode(r.mode, prefix));
    }
    job.suffix.assign(r.prompt.begin() + r.payload_tokens, r.prompt.end());
    job.max_tokens = kTokens;
    job.stop_ids = {-1};
    REQUIRE(engine.Submit(std::move(job), ev.For(r.id)).ok());
  }
}

// At most 16 tokens a loop iteration, shared first come first served: an oracle payload's
// tokens, then the suffix (on the SEKV path, but its last token), never one chunk across both.
// A request's first chunk may take what the one before it left. The raw payload's rows are
// rebuilt 16 at a time, and the KV budget is the default one.
void CheckChunks(const DecodeEngineStats& stats, const std::vector<Request>& requests, int mode) {
  long tokens = 0, chunks = 0;
  for (const Request& r : requests) {
    const bool on_sekv = mode > 0 && r.prompt.size() >= MinSekvPrompt(mode);
    const size_t rest = r.prompt.size() - r.payload_tokens - (on_sekv ? 1 : 0);
    const size_t own = r.mode == CodecMode::kOracle ? r.payload_tokens : 0;  // prefilled
    tokens += static_cast<long>(own + rest);
    chunks += static_cast<long>((own + 15) / 16 + (rest + 15) / 16);
  }
  // The KV budget by default: 0.9 of the device's free memory when the engine was made (on
  // a GPU, what cudaMemGetInfo said).
  CHECK(stats.kv_budget_bytes > 0);
  CHECK(stats.kv_budget_bytes <=
        static_cast<int64_t>(0.9 * static_cast<double>(cuda::MemoryInfo().value().total_bytes)));
  CHECK(stats.rebuild_rows == 50);  // the raw payload's rows, 16 at a time
  CHECK(stats.rebuild_chunks == 4);
  CHECK(stats.prefill_tokens == tokens);
  CHECK(stats.prefill_chunks >= (tokens + 15) / 16);
  CHECK(stats.prefill_chunks <= chunks + static_cast<long>(requests.size()));
}

// Teacher-forced on the CPU: the logits after the prompt and each GPU token but the last pick
// the GPU's tokens wherever their lead is decisive.
void CheckTeacherForced(testing::ProducerFixture& f, const Request& r,
                        const std::vector<int32_t>& got) {
  const int vocab = f.model->config.vocab_size;
  std::vector<int32_t> forced = r.prompt;
  forced.insert(forced.end(), got.begin(), got.end() - 1);
  auto seq = f.reference->NewSequence(static_cast<int>(forced.size())).value();
  PrefillOptions all;
  all.all_logits = true;
  PrefillResult pr;
  REQUIRE(f.reference->Prefill(*seq, forced, all, &pr).ok());
  int decisive = 0;
  for (int i = 0; i < kTokens; ++i) {
    const float* row = pr.logits.data() + (r.prompt.size() - 1 + static_cast<size_t>(i)) * vocab;
    if (testing::TopTwoMargin(row, vocab) < kGreedyMargin) continue;
    ++decisive;
    INFO("token " << i);
    CHECK(got[i] == ArgMax(absl::MakeConstSpan(row, vocab)));
  }
  CHECK(decisive > 0);
}

// The SEKV path's statistics: every request through GpuSekv within the GPU budget, its CPU
// tier read where it lies (no pinned copy).
void CheckSekvStats(const testing::ProducerFixture& f, const DecodeEngineStats& stats,
                    const std::vector<Request>& requests) {
  CHECK(stats.sekv_requests == static_cast<long>(requests.size()));
  CHECK(stats.mixed_steps == 0);
  // Each build registered its CPU tier, and the mirror read it there: no pinned copy.
  CHECK(stats.sekv_cpu_tier_copies == 0);
  REQUIRE(stats.sekv_full_kv_bytes > 0);
  CHECK(stats.sekv_gpu_bytes / stats.sekv_full_kv_bytes <= 0.40);
  // The GPU path measures against the CUDA backend's BF16 cache (2 bytes an element; the
  // CPU path's is F32): the full cache of every request's positions after its first step.
  const ModelConfig& c = f.model->config;
  double elements = 0;
  for (const Request& r : requests) {
    elements += static_cast<double>(r.prompt.size()) * c.num_layers * 2 * c.kv_dim();
  }
  CHECK(stats.sekv_full_kv_bytes / elements >= 2.0);
  CHECK(stats.sekv_full_kv_bytes / elements < 2.2);
}

}  // namespace

TEST_CASE("The decode engine on the CUDA backend serves chunked, batched requests", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  testing::ProducerFixture f;
  const std::vector<Request> requests = FourRequests();
  for (const int mode : {0, 1, 2}) {
    INFO((mode == 0 ? "plain path" : mode == 1 ? "SEKV path" : "both paths"));
    std::unique_ptr<DecodeEngine> engine = CudaEngine(f, mode);
    DecodeEventCollector ev;
    SubmitAll(*engine, f, requests, ev);
    ev.WaitFor(requests.size());
    const DecodeEngineStats stats = engine->stats();
    CheckChunks(stats, requests, mode);
    for (const Request& r : requests) {
      INFO("request " << r.id);
      const DecodeEvent& done = ev.final_events[r.id];
      INFO(done.error);
      REQUIRE(done.kind == DecodeEvent::Kind::kDone);
      CHECK(done.prompt_tokens == static_cast<int>(r.prompt.size()));
      const std::vector<int32_t>& got = ev.tokens[r.id];
      REQUIRE(got.size() == static_cast<size_t>(kTokens));
      if (mode > 0 && r.prompt.size() >= MinSekvPrompt(mode)) continue;
      CheckTeacherForced(f, r, got);
    }
    if (mode == 2) {
      CHECK(stats.sekv_requests == 2);
      CHECK(stats.mixed_steps > 0);  // GpuSekv::StepMixed: the weights read once for both
      CHECK(stats.sekv_cpu_tier_copies == 0);
    } else if (mode == 1) {
      CheckSekvStats(f, stats, requests);
    } else {
      CHECK(stats.max_batch_seen >= 2);  // the requests were batched
    }
  }
}

}  // namespace scd
