// DecodeEngine's part of the shadow oracle (shadow_oracle.h): the tokens a sampled request
// keeps, and the shadow's pieces of work while the engine has no live request.
#include <chrono>
#include <mutex>

#include "common/serving/decode_engine.h"
#include "common/serving/decode_engine_request.h"

namespace scd {

void DecodeEngine::NoteShadowToken(Active& a, int32_t token) {
  if (a.shadow && static_cast<int>(a.shadow_tokens.size()) < shadow_.tokens()) {
    a.shadow_tokens.push_back(token);
  }
}

void DecodeEngine::RunShadow() {
  if (!shadow_.HasWork()) return;
  bool preempt = false, idle = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    preempt = !queue_.empty() && shadow_.Holding() && !DeviceFits(*queue_.front());
    idle = !stopping_ && queue_.empty() && AdmittedCount() == 0;
  }
  // Outside mu_: the drop's callback counts and may log (shadow_ is the loop thread's alone).
  if (preempt) shadow_.Preempt();
  if (!idle) return;
  const auto start = std::chrono::steady_clock::now();
  shadow_.RunPiece(
      *backend_, *codec_,
      [&](int64_t bytes) { return kv_budget_ == 0 || kv_reserved_.load() + bytes <= kv_budget_; },
      &kv_reserved_);
  if (options_.trace)
    options_.trace({EngineTrace::Kind::kShadowPiece, start, std::chrono::steady_clock::now(), 0});
}

}  // namespace scd
