// See bench_payload.h.
#include "common/tools/bench/bench_payload.h"

#include <algorithm>

#include "common/base/status_macros.h"
#include "common/runtime/backend.h"
#include "common/scd/calibration.h"
#include "common/scd/codec.h"

namespace scd::bench {

std::vector<int32_t> BenchPrompt(int n, uint64_t salt, int vocab) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) {
    p[i] = 3 + static_cast<int32_t>((static_cast<uint64_t>(i) * 7919 + salt * 131) % (vocab - 3));
  }
  return p;
}

absl::StatusOr<std::shared_ptr<const ScdArtifact>> TimingArtifact(
    std::shared_ptr<const Model> model, uint64_t seed) {
  const ModelConfig& c = model->config;
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, CreateBackend(BackendKind::kCpu, model));
  std::vector<std::vector<int32_t>> passages;
  for (int i = 0; i < 6; ++i) passages.push_back(BenchPrompt(128, seed * 7 + i, c.vocab_size));
  CalibrationOptions o;
  o.rank_k = std::min(64, c.kv_dim());
  o.rank_v = std::min(128, c.kv_dim());
  o.rank_h = std::min(256, c.hidden_size);
  o.code_encoding = Encoding::kInt8Row;
  o.max_aligner_rows = 512;
  o.aligner.steps = 10;
  SCD_ASSIGN_OR_RETURN(const CalibrationData data,
                       CollectCalibrationData(*backend, *backend, passages, o));
  SCD_ASSIGN_OR_RETURN(ScdArtifact a, FitArtifact(data, *model, *model, o, /*fit_patches=*/true));
  const int patched = std::max(1, c.num_layers / 6);
  for (int i = 0; i < patched; ++i)
    a.patch_order.push_back((2 * i + 1) * c.num_layers / (2 * patched));
  a.patch_budget = patched;
  a.recompute_first = c.num_layers / 2;
  a.recompute_end = a.recompute_first + 1;
  return std::make_shared<const ScdArtifact>(std::move(a));
}

absl::StatusOr<Payload> EncodeBenchPayload(std::shared_ptr<const Model> model,
                                           std::shared_ptr<const ScdArtifact> artifact,
                                           CodecMode mode, const std::vector<int32_t>& tokens) {
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Backend> producer, CreateBackend(BackendKind::kCpu, model));
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<ProducerCodec> codec,
                       ProducerCodec::Create(model, model->digest(), std::move(artifact)));
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq,
                       producer->NewSequence(static_cast<int>(tokens.size())));
  PrefillResult states;
  SCD_RETURN_IF_ERROR(producer->Prefill(*seq, tokens, ProducerPrefillOptions(mode), &states));
  SCD_ASSIGN_OR_RETURN(const Payload payload, codec->Encode(mode, tokens, states));
  return ParsePayload(SerializePayload(payload));
}

}  // namespace scd::bench
