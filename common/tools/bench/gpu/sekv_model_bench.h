// SEKV whole-model decode step (SEKV decode-step time against full-KV decode at 32K and 128K
// tokens), measured through the daemon's own path: sekv::GpuSekv::Step (the model
// on the device, the GPU tier mirrored there in BF16; the zoom-in on the device (SekvZoom,
// one host synchronisation per step), and beside it on the host (one round trip per layer for
// the gate, host span and token selection, the CPU tier's rebuild of the expanded rows on the
// SpanFetcher's worker, their upload); one softmax) against the CUDA backend's own batch-1
// Decode over the full BF16 KV cache of the same context, both whole steps with the logits
// back on the host. Unlike sekv_step_bench.h (the attention alone, over synthetic tier
// proportions), everything a served token costs is in it. Part of scd-gpu-bench.
// CUDA-free header.
#ifndef SCD_COMMON_TOOLS_BENCH_GPU_SEKV_MODEL_BENCH_H_
#define SCD_COMMON_TOOLS_BENCH_GPU_SEKV_MODEL_BENCH_H_

#include <nlohmann/json.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/config.h"

namespace scd::cuda_bench {

// Builds both contexts of `context` tokens (random weights from `config`, full attention:
// sliding window 0; random post-RoPE K/V and surprisal for SEKV at the daemon's default
// budget 0.4) and times decode steps of each (2 warm-ups, median of 10). Returns full_ms,
// sekv_ms (the device zoom), ratio = full_ms / sekv_ms, the set-up times, the zoom-in and
// fetch statistics and the device tier's bytes (GpuSekv::Memory); host_zoom (the same figures
// with GpuZoom::kHost), host_zoom_ms and device_zoom_speedup = host_zoom_ms / sekv_ms. Then 3
// more steps of each with the backend's op profile on (eager): "profile" (SEKV; host_zoom's
// own too) and "full_profile" hold each step's attention and other device time, and
// attention_ratio = full KV's attention / SEKV's. Prints progress lines.
absl::StatusOr<nlohmann::json> MeasureSekvModelStep(const ModelConfig& config, int context);

// Concurrent SEKV requests as the decode engine steps them: for each of `batches`, that many
// mirrors (BF16 tier, device zoom, the same plan and zoom-in as above) of `context` tokens,
// each round stepped one by one (GpuSekv::Step: the engine before batching) and then all at
// once (GpuSekv::StepBatch: the weights read once). Returns one entry per batch: batch,
// one_by_one_ms and batched_ms (medians of 10 rounds after 2), their tokens per second, and
// speedup = one_by_one_ms / batched_ms; then, beside as many plain requests (backend
// sequences of the same context), two_steps_ms (the backend's DecodeSample, then StepBatch)
// against mixed_ms (one GpuSekv::StepMixed: the weights read once), and mixed_speedup. Prints
// progress lines.
absl::StatusOr<nlohmann::json> MeasureSekvBatchSteps(const ModelConfig& config, int context,
                                                     const std::vector<int>& batches);

}  // namespace scd::cuda_bench

#endif  // SCD_COMMON_TOOLS_BENCH_GPU_SEKV_MODEL_BENCH_H_
