// SCD rebuild benchmark (SCD rebuild time against the consumer's own prefill time at 4K
// tokens): ScdGpuRebuilder on a random RebuildSpec of a model's shape, timed from host
// codes to the filled BF16 cache, against a prefill TTFT the caller measured on the same
// device. Part of scd-gpu-bench (gpu_bench_main.cc). CUDA-free header.
#ifndef SCD_COMMON_TOOLS_BENCH_GPU_SCD_REBUILD_BENCH_H_
#define SCD_COMMON_TOOLS_BENCH_GPU_SCD_REBUILD_BENCH_H_

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "common/model/config.h"

namespace scd::cuda_bench {

inline constexpr double kScdTargetSpeedup = 5.0;

// Rebuilds `tokens` positions of every layer (warm-up, then the median of 5) and returns the
// figures: rebuild_ms (RebuildTimes::total_ms), stage_ms and gpu_ms with int8-row codes (what
// a payload carries), the same with F32 codes (*_f32_ms), prefill_ms, speedup = prefill_ms /
// rebuild_ms, payload_bytes (int8) and payload_bytes_f32, verdict "PASS"/"FAIL" against
// kScdTargetSpeedup, and the spec's shape. Prints one progress line per step.
absl::StatusOr<nlohmann::json> MeasureScdRebuild(const ModelConfig& config, int tokens,
                                                 double prefill_ms);

}  // namespace scd::cuda_bench

#endif  // SCD_COMMON_TOOLS_BENCH_GPU_SCD_REBUILD_BENCH_H_
