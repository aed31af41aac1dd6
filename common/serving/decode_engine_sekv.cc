// DecodeEngine's SEKV path after the prompt's prefill: each request's hierarchy is built on a
// thread of its own while the loop steps the running requests (StartBuild), then activated
// on the loop thread, its memory reservations cut to what the hierarchy holds, and its first
// token sampled (CollectBuilds); a finished request's hierarchy is handed to the releaser
// (ReleaseSekv). See decode_engine.h and sekv_session.h.
#include <algorithm>
#include <memory>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/serving/decode_engine.h"
#include "common/serving/decode_engine_request.h"

namespace scd {

void DecodeEngine::ReleaseSekv(Active& a) {
  std::unique_ptr<SekvSession> built;  // only once its build thread is joined
  if (!a.build.joinable() && a.built.ok()) built = std::move(a.built).value();
  for (std::unique_ptr<SekvSession>* s : {&a.sekv, &built}) {
    if (*s == nullptr) continue;
    (*s)->ReleaseDevice();
    releaser_.Release(std::move(*s), options_.sekv.before_release);
  }
}

void DecodeEngine::StartBuild(std::unique_ptr<Active> a) {
  Active* raw = a.get();
  SekvPrompt prompt = raw->sekv_prefill->Take();
  raw->sekv_prefill.reset();
  raw->build = std::thread([this, raw, prompt = std::move(prompt)]() mutable {
    // The positions it may still step: the prompt's last token and what it may generate.
    const int to_come = raw->capacity - raw->prompt_tokens + 1;
    auto built = SekvSession::Build(*sekv_decoder_, std::move(prompt), options_.sekv, sekv_tier_,
                                    backend_.get(), to_come);
    std::lock_guard<std::mutex> lock(mu_);
    raw->built = std::move(built);
    raw->build_ready = true;
    ++builds_ready_;
    cv_.notify_all();
  });
  building_.push_back(std::move(a));
}

void DecodeEngine::CollectBuilds(const std::unordered_map<uint64_t, bool>& cancelled) {
  std::vector<std::unique_ptr<Active>> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& a : building_) {
      if (a->build_ready) ready.push_back(std::move(a));
    }
    builds_ready_ -= static_cast<int>(ready.size());
  }
  building_.erase(std::remove(building_.begin(), building_.end(), nullptr), building_.end());
  auto ended = [&](Active& a) { return EndIfCancelled(a, cancelled, "during the SEKV build"); };
  // Builds still running: a cancellation or a deadline ends the request now; its thread's
  // result is dropped when it comes.
  for (auto& a : building_) ended(*a);
  for (auto& a : ready) {
    a->build.join();
    if (ended(*a)) {  // ended during its build: the hierarchy it built is not used
      ReleaseSekv(*a);
      continue;
    }
    if (!a->built.ok()) {
      Finish(*a, DecodeEvent::Error(a->built.status()));
      continue;
    }
    a->sekv = std::move(a->built).value();
    std::vector<float> logits;
    if (absl::Status st = a->sekv->Activate(*backend_, options_.sekv, &logits); !st.ok()) {
      Finish(*a, DecodeEvent::Error(st));
      continue;
    }
    const sekv::MemoryBreakdown m = a->sekv->memory();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.sekv_requests;
      stats_.sekv_gpu_bytes += static_cast<double>(m.gpu());
      stats_.sekv_full_kv_bytes += static_cast<double>(m.full_kv);
      stats_.sekv_cpu_bytes += static_cast<double>(m.cpu_bases);
      stats_.sekv_device_bytes += static_cast<double>(a->sekv->device_bytes());
      stats_.sekv_mirror_host_bytes += static_cast<double>(a->sekv->mirror_host_bytes());
      if (a->sekv->cpu_tier_access() == sekv::CpuTierAccess::kPinnedCopy) {
        ++stats_.sekv_cpu_tier_copies;
        stats_.sekv_cpu_tier_copy_reason = a->sekv->registration_error().ToString();
      }
    }
    if (a->kv.bytes() > 0 && a->sekv->on_gpu()) {
      // The prompt's full cache is gone (SekvPrefill::Take), and the mirror holds all the
      // device memory it will (its window sized for every position to come): keep that.
      a->kv.Set(std::min(a->kv.bytes(), static_cast<int64_t>(a->sekv->device_bytes())));
    } else if (a->kv.bytes() > 0 && a->host.bytes() > 0) {
      // Off the GPU the backend holds nothing of it any more, and the host reservation holds
      // all its hierarchy will (both tiers and the window's room). Without a host budget the
      // full reservation stays: the only count of what it holds.
      a->kv.Set(0);
    }
    if (a->host.bytes() > 0) {
      // The prompt's captured K/V is gone: what the host cache holds now (both tiers), its
      // window's room for the positions to come, and the GPU mirror's host memory.
      const sekv::MemoryBreakdown host = a->sekv->cache().Memory();
      const int64_t window =
          F32PositionBytes(backend_->model().config) * (a->capacity - a->prompt_tokens + 1);
      // Within the reservation (Submit): the tiers within their bound, the staging within its
      // plan, and a copy of the CPU tier within the captured K/V and what Submit added.
      a->host.Set(static_cast<int64_t>(host.gpu() + host.cpu_bases + a->sekv->mirror_host_bytes()) +
                  window);
    }
    if (options_.sekv.on_cache) options_.sekv.on_cache(m, true);
    const SekvStartTimes& st = a->sekv->start_times();
    a->timings.rebuild_ms = st.rebuild_ms;
    a->timings.suffix_prefill_ms = st.suffix_prefill_ms;
    a->timings.sekv_build_ms = st.build_ms;
    Started(std::move(a), logits);
  }
}

}  // namespace scd
