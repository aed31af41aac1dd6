// What the SEKV decode-engine tests share (sekv_session_test.cc, sekv_admission_test.cc): an
// engine with SEKV on at a budget, a gate to hold engine work behind, waits on a request's
// tokens and end, and synthetic requests.
#ifndef SCD_TESTS_SERVING_SEKV_FIXTURE_H_
#define SCD_TESTS_SERVING_SEKV_FIXTURE_H_

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "common/serving/decode_engine.h"
#include "tests/serving/engine_fixture.h"

namespace scd::testing {

struct SekvFixture : ProducerFixture {
  static DecodeEngineOptions Options(double budget) {
    DecodeEngineOptions o;
    o.sekv.enabled = true;
    o.sekv.budget = budget;
    return o;
  }
  std::unique_ptr<DecodeEngine> Engine(double budget) {
    return ProducerFixture::Engine(Options(budget));
  }
};

// What a test holds engine work behind (a build, a release): Hold() blocks, for a minute at
// most, until Open().
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void Hold() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(60), [&] { return open; });
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

// Polls `ok` every 2 ms for up to 20 s; returns its last value.
inline bool WaitUntil(const std::function<bool()>& ok) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!ok() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return ok();
}

inline size_t TokensOf(DecodeEventCollector& ev, uint64_t id) {
  std::lock_guard<std::mutex> lock(ev.mu);
  return ev.tokens[id].size();
}

inline bool Ended(DecodeEventCollector& ev, uint64_t id) {
  std::lock_guard<std::mutex> lock(ev.mu);
  return ev.final_events.count(id) == 1;
}

// A request of `prompt_tokens` synthetic tokens that runs to max_tokens.
inline DecodeJob Job(uint64_t id, int prompt_tokens, int max_tokens) {
  DecodeJob j;
  j.request_id = id;
  j.suffix = SyntheticPrompt(prompt_tokens, static_cast<int>(id));
  j.max_tokens = max_tokens;
  j.stop_ids = {-1};
  return j;
}

}  // namespace scd::testing

#endif  // SCD_TESTS_SERVING_SEKV_FIXTURE_H_
