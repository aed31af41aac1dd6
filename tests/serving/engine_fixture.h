// What the decode-engine tests share: a collector of each request's token and final events,
// synthetic prompts, and a producer that encodes a prefix's payload from the CPU reference
// backend's own states (so the payload is what the prefill daemon would send).
#ifndef SCD_TESTS_SERVING_ENGINE_FIXTURE_H_
#define SCD_TESTS_SERVING_ENGINE_FIXTURE_H_

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/runtime/backend.h"
#include "common/serving/decode_engine.h"
#include "tests/test_support.h"

namespace scd::testing {

// Every token and the final event of each request id, filled by the engine's callbacks.
struct DecodeEventCollector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, DecodeEvent> final_events;

  DecodeCallback For(uint64_t id) {
    return [this, id](const DecodeEvent& e) {
      std::lock_guard<std::mutex> lock(mu);
      if (e.kind == DecodeEvent::Kind::kToken) {
        tokens[id].push_back(e.token);
      } else {
        final_events[id] = e;
        cv.notify_all();
      }
    };
  }
  // Waits (at most 60 s, 5 min in a sanitizer build; else the test fails) until `n` requests
  // have ended.
  void WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(60 * kSanitizerWaitFactor),
                        [&] { return final_events.size() >= n; }));
  }
};

// A BOS-led prompt of `n` tokens from the base vocabulary; `seed` varies its content.
inline std::vector<int32_t> SyntheticPrompt(int n, int seed) {
  std::vector<int32_t> p = {1};
  for (int i = 1; i < n; ++i) p.push_back(3 + (i * 131 + seed * 17) % 500);
  return p;
}

// The base model with a CPU reference backend and a producer codec (no artifact: the
// identity pair, so every mode's payload is exact where the mode is lossless).
struct ProducerFixture {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Backend> reference;
  std::unique_ptr<ProducerCodec> producer;

  ProducerFixture() {
    auto m = LoadModel(SharedPath("models/stories260K"));
    REQUIRE(m.ok());
    model = *m;
    reference = CreateBackend(BackendKind::kCpu, model).value();
    producer = ProducerCodec::Create(model, model->digest(), nullptr).value();
  }
  // The payload of `prefix` in `mode`, encoded from the reference backend's prefill states.
  Payload Encode(CodecMode mode, const std::vector<int32_t>& prefix) {
    auto seq = reference->NewSequence(static_cast<int>(prefix.size())).value();
    PrefillResult states;
    REQUIRE(reference->Prefill(*seq, prefix, ProducerPrefillOptions(mode), &states).ok());
    return producer->Encode(mode, prefix, states).value();
  }
  // A decode engine on a fresh CPU backend of the same model, or why there is none.
  absl::StatusOr<std::unique_ptr<DecodeEngine>> TryEngine(const DecodeEngineOptions& options) {
    return DecodeEngine::Create(CreateBackend(BackendKind::kCpu, model).value(),
                                ConsumerCodec::Create(model, model->digest(), nullptr).value(),
                                options);
  }
  std::unique_ptr<DecodeEngine> Engine(const DecodeEngineOptions& options) {
    auto e = TryEngine(options);
    REQUIRE(e.ok());
    return std::move(e).value();
  }
};

}  // namespace scd::testing

#endif  // SCD_TESTS_SERVING_ENGINE_FIXTURE_H_
