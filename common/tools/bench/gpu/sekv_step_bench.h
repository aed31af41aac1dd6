// SEKV decode-step benchmark (SEKV decode-step time against full-KV decode at 32K and 128K
// tokens): the attention part of one batch-1 decode step over all layers, SEKV's
// mixed-resolution GPU tier against DecodeAttention over the full KV cache, both on random
// device data of a model's attention shape. Part of scd-gpu-bench (gpu_bench_main.cc).
// CUDA-free header.
#ifndef SCD_COMMON_TOOLS_BENCH_GPU_SEKV_STEP_BENCH_H_
#define SCD_COMMON_TOOLS_BENCH_GPU_SEKV_STEP_BENCH_H_

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "common/model/config.h"

namespace scd::cuda_bench {

// Times both steps at `context` tokens (2 warm-ups, median of 10) and returns full_ms,
// sekv_ms, ratio = full_ms / sekv_ms, the host selection time, entries per KV head and the
// GPU-tier bytes of SEKV against the full KV cache. Prints one progress line.
absl::StatusOr<nlohmann::json> MeasureSekvStep(const ModelConfig& config, int context);

}  // namespace scd::cuda_bench

#endif  // SCD_COMMON_TOOLS_BENCH_GPU_SEKV_STEP_BENCH_H_
