// DecodeEngine::Active: one request's state inside the decode engine, from submission to its
// terminal event, with the memory reservations it holds; shared by decode_engine.cc (queue,
// admission, prefill, decode) and decode_engine_sekv.cc (the SEKV path's hierarchy).
#ifndef SCD_COMMON_SERVING_DECODE_ENGINE_REQUEST_H_
#define SCD_COMMON_SERVING_DECODE_ENGINE_REQUEST_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/serving/decode_engine.h"
#include "common/serving/payload_chunks.h"
#include "common/serving/prompt_chunks.h"
#include "common/serving/sekv_session.h"

namespace scd {

// One position's K and V over every layer, in F32: a row of a SEKV request's host cache.
inline int64_t F32PositionBytes(const ModelConfig& c) {
  return 2 * static_cast<int64_t>(sizeof(float)) * c.num_layers * c.kv_dim();
}

// Bytes of the engine's KV budget held by one request, given back when it is destroyed.
class KvReservation {
 public:
  KvReservation() = default;
  KvReservation(const KvReservation&) = delete;
  KvReservation& operator=(const KvReservation&) = delete;
  ~KvReservation() { Set(0); }

  // Holds `bytes` of `pool` (the first call names the pool).
  void Set(int64_t bytes, std::atomic<int64_t>* pool = nullptr) {
    if (pool != nullptr) pool_ = pool;
    if (pool_ != nullptr) pool_->fetch_add(bytes - bytes_);
    bytes_ = bytes;
  }
  int64_t bytes() const { return bytes_; }

 private:
  std::atomic<int64_t>* pool_ = nullptr;
  int64_t bytes_ = 0;
};

struct DecodeEngine::Active {
  // Declared first, so destroyed last: after the sequence or hierarchy's device part it
  // stands for.
  KvReservation kv, host;              // device KV; SEKV host memory (prompt, then hierarchy)
  int64_t kv_need = 0, host_need = 0;  // the reservations it needs to be admitted (Submit)
  bool waited_for_kv = false, waited_for_host = false;
  DecodeJob job;  // its payload bytes are parsed into `payload` on submission
  bool has_payload = false;
  bool use_sekv = false;  // the SEKV path (DecodeEngine::UsesSekv), decided on submission
  absl::StatusOr<Payload> payload = Payload{};  // empty without one
  DecodeCallback callback;
  std::chrono::steady_clock::time_point submitted;
  std::unique_ptr<Sequence> seq;      // the backend path
  std::unique_ptr<SekvSession> sekv;  // the SEKV path
  int capacity = 0;                   // positions the request may reach
  std::unique_ptr<Sampler> sampler;
  std::vector<int32_t> stops;
  int prompt_tokens = 0;
  int generated = 0;
  int32_t next_input = -1;
  DecodeTimings timings;
  bool done = false;
  // The SEKV path's hierarchy, built on its own thread while the loop steps the others;
  // `built` and `build_ready` are written by that thread under mu_.
  std::thread build;
  absl::StatusOr<std::unique_ptr<SekvSession>> built;
  bool build_ready = false;
  // The SEKV path's prompt while it is prefilled in chunks (PrefillChunks).
  std::unique_ptr<SekvPrefill> sekv_prefill;
  // The backend path's payload rows still to rebuild, then its prompt tokens still to
  // prefill (PrefillChunks); an oracle payload's prefill counts as the rebuild's time.
  PayloadChunks rebuild;
  PromptChunks pending;
  // Sampled by the shadow oracle: the payload's bytes and the first tokens sampled.
  bool shadow = false;
  std::vector<uint8_t> shadow_payload;
  std::vector<int32_t> shadow_tokens;

  // Positions held; 0 once its sequence or SEKV hierarchy is released (Finish).
  int length() const {
    if (sekv != nullptr) return sekv->length();
    return seq != nullptr ? seq->length() : 0;
  }
};

}  // namespace scd

#endif  // SCD_COMMON_SERVING_DECODE_ENGINE_REQUEST_H_
