// The parts of scd-gpu-bench that time one kernel alone against its alternative on the same
// operands, at the 7-8B shapes, so that a device run says which one the backend should take:
//   - small batch: the backend's Linear (LinearSmallBatch for decode-sized m) against cuBLAS,
//     as weight bytes streamed per second against the copy;
//   - prefill attention: kAuto's WMMA kernel against the mma.sync one (kTensorCoreMma), as
//     TFLOP/s of the causal half against the GEMM peak;
//   - decode attention: the vectorized split kernel (DecodeImpl::kVectorized, kAuto's choice at
//     these shapes) against the generic one, as K/V bytes read per second against the copy;
//   - the SEKV zoom-in (SekvZoom) of one layer, with the CPU tier's bases on the device and in
//     pinned host memory: where a whole SEKV step's time goes (docs/RESULTS.md, "GPU").
// Each prints a line per shape with its "<x>_vs_<y>=" ratio, which scripts/gpu_check.sh greps
// into its summary, and returns the figures for results.json; KernelMarkdown renders them.
#ifndef SCD_COMMON_TOOLS_BENCH_GPU_KERNEL_BENCH_H_
#define SCD_COMMON_TOOLS_BENCH_GPU_KERNEL_BENCH_H_

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"

namespace scd::cuda_bench {

absl::StatusOr<nlohmann::json> MeasureSmallBatch(bool quick, double copy_gbps);
absl::StatusOr<nlohmann::json> MeasurePrefillAttention(bool quick, double gemm_peak);
absl::StatusOr<nlohmann::json> MeasureDecodeAttention(bool quick, double copy_gbps);
absl::StatusOr<nlohmann::json> MeasureSekvZoom(bool quick, int context);

// The Markdown tables of whichever of "small_batch", "prefill_attention", "decode_attention"
// and "sekv_zoom" `results` holds.
std::string KernelMarkdown(const nlohmann::json& results);

}  // namespace scd::cuda_bench

#endif  // SCD_COMMON_TOOLS_BENCH_GPU_KERNEL_BENCH_H_
