// CUDA graphs: cuda::Graph (device_memory.h) records and replays a stream's work, and the CUDA
// backend's graphed decode steps (common/runtime/cuda/decode_graph_cache.h, DecodeGraphOptions)
// give exactly what its eager steps give. Graphed and eager steps run the same kernels on the same
// split plan (the length bucket), so the logits and the sampled tokens must be bitwise equal,
// across batch-size changes, a length-bucket crossing, a sliding window, evictions and a batch
// limit, while the graphs are actually replayed.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/runtime/cuda/decode_graph_cache.h"
#include "common/runtime/sampler.h"
#include "kernels/cuda/split_plan.h"
#include "tests/gpu/parity/cuda_test_support.h"

namespace scd {
namespace {

using testing::RequireOk;

// The parity model with room for a 512 bucket, and a window that lets steps cross it.
ModelConfig GraphConfig(Architecture arch) {
  ModelConfig c = testing::ParityConfig(arch);
  c.max_position_embeddings = 600;
  if (c.sliding_window > 0) c.sliding_window = 100;
  return c;
}

std::unique_ptr<Sequence> Prefilled(Backend& backend, int length, int salt) {
  auto seq = backend.NewSequence(400);
  RequireOk(seq.status());
  std::vector<int32_t> ids(length);
  for (int i = 0; i < length; ++i) ids[i] = (i * 31 + salt * 7 + 3) % 300;
  PrefillResult r;
  RequireOk(backend.Prefill(**seq, ids, PrefillOptions{}, &r));
  return std::move(seq).value();
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

DecodeGraphStats Stats(const Backend& backend) { return backend.decode_graph_stats(); }

}  // namespace

TEST_CASE("cuda::Graph replays the recorded work on the buffers' current contents", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  auto stream = cuda::Stream::Create();
  RequireOk(stream.status());
  const cuda::StreamHandle s = (*stream)->handle();
  testing::DeviceArray<float> x(std::vector<float>{1.0f, -2.5f, 3.25f, 0.0f});
  testing::DeviceArray<cuda::Bf16> y(4);
  auto graph = cuda::Graph::Capture(s, [&] { return cuda::F32ToBf16(x.get(), y.get(), 4, s); });
  RequireOk(graph.status());
  CHECK((*graph)->nodes() >= 1);
  for (float scale : {1.0f, 2.0f, -4.0f}) {
    const std::vector<float> input = {scale, -2.5f * scale, 3.25f * scale, 0.5f * scale};
    RequireOk(cuda::CopyToDeviceSync(x.get(), input.data(), sizeof(float) * input.size()));
    RequireOk((*graph)->Launch(s));
    RequireOk(cuda::SynchronizeStream(s));
    const std::vector<cuda::Bf16> got = y.ToHost();
    for (size_t i = 0; i < input.size(); ++i) CHECK(cuda::Bf16ToFloat(got[i]) == input[i]);
  }

  // A recording that fails returns its own error, and the stream works eagerly afterwards.
  auto failed = cuda::Graph::Capture(s, [&]() -> absl::Status {
    RequireOk(cuda::F32ToBf16(x.get(), y.get(), 4, s));
    return absl::InternalError("recording failed on purpose");
  });
  CHECK(failed.status().code() == absl::StatusCode::kInternal);
  CHECK(failed.status().message() == "recording failed on purpose");
  const std::vector<float> after = {7.0f, 8.0f, 9.0f, 10.0f};
  RequireOk(cuda::CopyToDeviceSync(x.get(), after.data(), sizeof(float) * after.size()));
  RequireOk(cuda::F32ToBf16(x.get(), y.get(), 4, s));
  RequireOk(cuda::SynchronizeStream(s));
  CHECK(cuda::Bf16ToFloat(y.ToHost()[3]) == 10.0f);
}

TEST_CASE("CUDA decode length buckets", "[cuda]") {
  using cuda::split_plan::DecodeLengthBucket;
  CHECK(DecodeLengthBucket(1) == 256);
  CHECK(DecodeLengthBucket(256) == 256);
  CHECK(DecodeLengthBucket(257) == 512);
  CHECK(DecodeLengthBucket(32768) == 32768);
  CHECK(DecodeLengthBucket(32769) == 65536);
  CHECK(DecodeLengthBucket((1 << 30) + 5) == (1 << 30) + 5);
}

namespace {

// An eager and a graphed CUDA backend of one synthetic model, each with three sequences (the
// longest just under the 256 bucket's end), their samplers and next tokens.
struct GraphPair {
  explicit GraphPair(Architecture arch) {
    auto model = MakeSyntheticModel(GraphConfig(arch), 21, 0.1f);
    eager = testing::MakeBackend(BackendKind::kCuda, model);
    graphed = testing::MakeBackend(BackendKind::kCuda, model);
    cuda::DecodeGraphOptions off;
    off.enabled = false;
    RequireOk(cuda::SetDecodeGraphs(*eager, off));
    CHECK(Stats(*graphed).active);  // on by default
    const int lengths[] = {250, 40, 7};
    for (int i = 0; i < 3; ++i) {
      es.push_back(Prefilled(*eager, lengths[i], i));
      gs.push_back(Prefilled(*graphed, lengths[i], i));
    }
  }

  std::unique_ptr<Backend> eager, graphed;
  std::vector<std::unique_ptr<Sequence>> es, gs;
  std::vector<Sampler> samplers = {Sampler({0.0f, 0, 1.0f, 1}), Sampler({0.9f, 0, 1.0f, 2}),
                                   Sampler({1.1f, 30, 0.9f, 3})};
  std::vector<int32_t> next = {5, 6, 7};
};

// Batches of 3, 2 and 1 in turn (a shape each).
std::vector<std::vector<int>> BatchPattern() { return {{0, 1, 2}, {0, 1, 2}, {0, 2}, {0}}; }

// Twelve steps of both backends, across 256 -> 512: logits back every third step, sampled on
// the device otherwise, bitwise equal each time.
void StepBothTwelveTimes(GraphPair& p) {
  const std::vector<std::vector<int>> pattern = BatchPattern();
  for (int step = 0; step < 12; ++step) {
    INFO("step " << step);
    const std::vector<int>& rows = pattern[step % pattern.size()];
    std::vector<Sequence*> eb, gb;
    std::vector<int32_t> tokens;
    std::vector<SampleDraw> draws;
    for (int r : rows) {
      eb.push_back(p.es[r].get());
      gb.push_back(p.gs[r].get());
      tokens.push_back(p.next[r]);
      draws.push_back(p.samplers[r].Draw());
    }
    if (step % 3 == 2) {  // logits back
      std::vector<float> el, gl;
      RequireOk(p.eager->Decode(eb, tokens, &el));
      RequireOk(p.graphed->Decode(gb, tokens, &gl));
      CHECK(BitwiseEqual(el, gl));
      for (size_t i = 0; i < rows.size(); ++i) p.next[rows[i]] = (tokens[i] + 11) % 300;
    } else {  // sampled on the device
      std::vector<int32_t> en, gn;
      RequireOk(p.eager->DecodeSample(eb, tokens, draws, &en));
      RequireOk(p.graphed->DecodeSample(gb, tokens, draws, &gn));
      CHECK(en == gn);
      for (size_t i = 0; i < rows.size(); ++i) p.next[rows[i]] = gn[i];
    }
  }
}

// The eager backend never recorded; the graphed one recorded each shape once per bucket and
// replayed it.
void CheckRecordedAndReplayed(const GraphPair& p, Architecture arch) {
  CHECK(p.gs[0]->length() > 256);  // the bucket was crossed
  CHECK(p.gs[0]->length() == p.es[0]->length());
  const DecodeGraphStats g = Stats(*p.graphed), e = Stats(*p.eager);
  CHECK(e.captures == 0);
  CHECK(e.device_bytes == 0);
  CHECK(e.eager_steps == 12);
  CHECK_FALSE(e.active);
  // Steps 0-5 (longest length <= 256): batches 3, 3, 2, 1, 3, 3 record three graphs and
  // replay three; from step 6 the 512 bucket's larger workspace moves a recorded buffer, so
  // the three shapes are recorded again (steps 6, 7, 8) and replayed (9, 10, 11). Decode and
  // DecodeSample share their graphs.
  INFO("captures " << g.captures << ", replays " << g.replays);
  CHECK(g.capture_failures == 0);
  CHECK(g.eager_steps == 0);
  CHECK(g.captures == 6);
  CHECK(g.replays == 6);
  CHECK(g.last_nodes >= static_cast<size_t>(GraphConfig(arch).num_layers) * 8);
}

// A batch limit runs larger batches eagerly; one cached graph evicts on every new shape.
void CheckBatchLimitAndEviction(GraphPair& p) {
  cuda::DecodeGraphOptions small;
  small.max_batch = 2;
  small.max_graphs = 1;
  RequireOk(cuda::SetDecodeGraphs(*p.graphed, small));
  const DecodeGraphStats before = Stats(*p.graphed);
  CHECK(before.cached == 0);
  CHECK(before.device_bytes == 0);  // dropped with the graphs
  const std::vector<std::vector<int>> pattern = BatchPattern();
  for (int step = 0; step < 4; ++step) {
    const std::vector<int>& rows = pattern[step];
    std::vector<Sequence*> eb, gb;
    std::vector<int32_t> tokens;
    for (int r : rows) {
      eb.push_back(p.es[r].get());
      gb.push_back(p.gs[r].get());
      tokens.push_back(p.next[r]);
    }
    std::vector<float> el, gl;
    RequireOk(p.eager->Decode(eb, tokens, &el));
    RequireOk(p.graphed->Decode(gb, tokens, &gl));
    CHECK(BitwiseEqual(el, gl));
  }
  const DecodeGraphStats after = Stats(*p.graphed);
  CHECK(after.eager_steps - before.eager_steps == 2);  // the two batches of 3
  CHECK(after.captures - before.captures == 2);        // batches of 2, then 1
  CHECK(after.evictions - before.evictions == 1);
  CHECK(after.cached == 1);
}

}  // namespace

TEST_CASE("CUDA graphed decode steps equal eager steps bitwise", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  for (Architecture arch : {Architecture::kLlama, Architecture::kMistral}) {
    INFO("architecture " << static_cast<int>(arch));
    GraphPair p(arch);
    StepBothTwelveTimes(p);
    CheckRecordedAndReplayed(p, arch);
    CheckBatchLimitAndEviction(p);
  }
}

TEST_CASE("CUDA decode-graph options are checked", "[cuda]") {
  auto cpu =
      CreateBackend(BackendKind::kCpu, MakeSyntheticModel(GraphConfig(Architecture::kLlama), 1));
  RequireOk(cpu.status());
  CHECK(cuda::SetDecodeGraphs(**cpu, {}).code() == absl::StatusCode::kInvalidArgument);
  CHECK_FALSE((*cpu)->decode_graph_stats().active);
  CHECK((*cpu)->decode_graph_stats().eager_steps == 0);
  SCD_SKIP_WITHOUT_CUDA();
  auto gpu = testing::MakeBackend(BackendKind::kCuda,
                                  MakeSyntheticModel(GraphConfig(Architecture::kLlama), 1));
  cuda::DecodeGraphOptions bad;
  bad.max_graphs = 0;
  CHECK(cuda::SetDecodeGraphs(*gpu, bad).code() == absl::StatusCode::kInvalidArgument);
  bad = {};
  bad.max_batch = -1;
  CHECK(cuda::SetDecodeGraphs(*gpu, bad).code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace scd
