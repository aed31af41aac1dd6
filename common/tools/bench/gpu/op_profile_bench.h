// The part of scd-gpu-bench that says where a forward pass's device time goes: the backend's
// own profiling (cuda::SetOpProfiling, common/runtime/cuda/op_profiling.h) over one prefill and a
// few batch-1 decode steps, each operation class as a share of the pass and as a rate against this
// run's ceiling: the projections' and attention's TFLOP/s against the GEMM peak for the prefill
// (the FLOPs of common/tools/bench/model_cost.h), and the bytes each class must read (its weights;
// the KV cache for attention) per second against the copy for decode. An unprofiled pass is
// timed beside it, so the events' own cost shows. The first device run's prefill and decode
// missed their targets (docs/RESULTS.md, "GPU"), and these tables say which operations to
// blame instead of deriving it.
#ifndef SCD_COMMON_TOOLS_BENCH_GPU_OP_PROFILE_BENCH_H_
#define SCD_COMMON_TOOLS_BENCH_GPU_OP_PROFILE_BENCH_H_

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "common/model/config.h"
#include "common/runtime/backend.h"

namespace scd::cuda_bench {

// Profiles a `prefill_tokens`-token prefill and `steps` batch-1 decode steps after a
// `context`-token prompt on `backend` (a CUDA backend of `config`'s shape, its workspaces
// already grown by earlier runs). Leaves profiling off and decode graphs at their defaults.
absl::StatusOr<nlohmann::json> MeasureOpProfile(Backend& backend, const ModelConfig& config,
                                                int prefill_tokens, int context, int steps,
                                                double gemm_peak, double copy_gbps);

// The Markdown table of one model's MeasureOpProfile result (`model`: its name).
std::string OpProfileMarkdown(const std::string& model, const nlohmann::json& profile);

// The summary lines of one model's result ("<model> prefill_<T>_time_by_op=...",
// "<model> decode_b1_time_by_op=..."), which scripts/gpu_check.sh greps.
std::string OpProfileSummary(const std::string& model, const nlohmann::json& profile);

}  // namespace scd::cuda_bench

#endif  // SCD_COMMON_TOOLS_BENCH_GPU_OP_PROFILE_BENCH_H_
