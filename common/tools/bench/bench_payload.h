// What the payload benchmarks share (chunked_prefill_bench.h, rebuild_bench.h): token ids,
// a calibration artifact fitted on the spot for timing, and a payload encoded by a model as
// its own producer.
#ifndef SCD_COMMON_TOOLS_BENCH_BENCH_PAYLOAD_H_
#define SCD_COMMON_TOOLS_BENCH_BENCH_PAYLOAD_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/weights.h"
#include "common/scd/artifact.h"
#include "common/scd/wire_format.h"

namespace scd::bench {

// `n` token ids of the vocabulary (past the specials), varied by `salt`.
std::vector<int32_t> BenchPrompt(int n, uint64_t salt, int vocab);

// An artifact fitted on a few random-token passages of `model` (as producer and consumer),
// with PATCH on about 1 in 6 layers and a one-layer recompute block in the middle: the
// shapes and costs of a real one, for timing (the codes' quality does not matter).
absl::StatusOr<std::shared_ptr<const ScdArtifact>> TimingArtifact(
    std::shared_ptr<const Model> model, uint64_t seed);

// `tokens` encoded in `mode` by `model` as its own producer on a CPU backend (`artifact` may
// be null for raw and quant modes), serialized and parsed again as a daemon receives it.
absl::StatusOr<Payload> EncodeBenchPayload(std::shared_ptr<const Model> model,
                                           std::shared_ptr<const ScdArtifact> artifact,
                                           CodecMode mode, const std::vector<int32_t>& tokens);

}  // namespace scd::bench

#endif  // SCD_COMMON_TOOLS_BENCH_BENCH_PAYLOAD_H_
