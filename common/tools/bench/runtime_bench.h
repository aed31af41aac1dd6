// Runtime benchmark: how close the CPU backend's prefill and decode come
// to the host's own ceilings, measured by the same program in the same run.
//   prefill_vs_sgemm = prefill GFLOP/s / peak OpenBLAS sgemm GFLOP/s
//     prefill GFLOP/s = PrefillFlops (model_cost.h) / best prefill wall time
//   decode_vs_memcpy = decode weight-streaming GB/s / memcpy GB/s
//     decode GB/s = ModelWeights::DecodeBytesStreamed() / median single-token step time
//     memcpy GB/s = 2·bytes / best copy time (read + write; the faster of 1 thread and all
//     hardware threads), see roofline.h
//   decode_vs_read = decode GB/s / read-only stream GB/s (bytes read once; the faster of 1
//     thread and all hardware threads, measured beside each memcpy): the ceiling a step that
//     only reads meets first, reported beside the target's memcpy ratio
//   step_vs_matrices = the median time of a pass over the step's F32 matrices alone, run
//     beside each step / the median step time: the share of a step its matrices take
//   int8_vs_f32_decode = int8 decode tokens/s / F32 decode tokens/s, their steps interleaved
//     in rounds on two backends of the same model (runtime_bench_weights.cc)
//   rss_vs_weights = peak RSS of a new process that loads the checkpoint, prefills and
//     decodes (cold_start_bench.h) / the weight bytes it computes from; load time beside it
// Each compared pair is measured back to back (sgemm then prefill, memcpy then decode) so
// that load from neighbours on a shared host skews both sides alike.
#ifndef SCD_COMMON_TOOLS_BENCH_RUNTIME_BENCH_H_
#define SCD_COMMON_TOOLS_BENCH_RUNTIME_BENCH_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/config.h"
#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/tools/bench/cold_start_bench.h"
#include "common/tools/bench/roofline.h"
#include "nlohmann/json.hpp"

namespace scd::bench {

// The synthetic shapes the benchmark knows: "stories110M" (llama2.c's 110M TinyStories
// model: d 768, 12 layers, 12 heads, ffn 2048, vocab 32000, context 1024, tied embeddings)
// "synthetic110m-v512" (the same with a 512-token vocabulary, untied: 85M parameters, nearly
// all of them in the layers) and "stories260K" (the shape of ../shared/models/stories260K).
// Errors list the choices.
absl::StatusOr<ModelConfig> BenchShapeConfig(std::string_view shape);

// The median of `values` (the mean of the middle two for an even count); 0 when empty.
double Median(std::vector<double> values);

struct RuntimeBenchOptions {
  std::string shape = "stories110M";
  std::string model_dir;  // when set, benchmark this checkpoint instead of a synthetic shape
  uint64_t seed = 1;      // synthetic weights and token ids
  int prefill_tokens = 512;
  int prefill_reps = 3;     // timed runs after one warm-up; the best is reported
  bool all_logits = true;   // logits for every prompt row (what the SCD producer computes)
  int decode_context = 64;  // tokens prefilled before the decode steps
  int decode_steps = 32;    // timed single-token steps (after 2 untimed warm-up steps)
  // Batched decode after it: for each size, that many sequences of decode_context tokens step
  // together (decode_steps timed steps after 2), as the decode engine batches them; then the
  // same sequences as many steps again with cpu::Linear's few-row GEMMs on OpenBLAS, as before
  // SmallBatchLinear (SetSmallBatchLinearEnabled(false)), side by side.
  std::vector<int> decode_batches = {4, 8, 16};
  size_t memcpy_bytes = size_t{1} << 30;
  int memcpy_reps = 5;
  int sgemm_reps = 5;
  int int8_rounds = 3;  // rounds of decode_steps F32 and int8 steps, alternating; 0: none
  // Cold starts in new processes of `exe` (scd-bench): this many rounds of one F32 and one int8
  // run each, with cold_start_tokens greedy tokens; 0 or an empty exe: none. A synthetic model
  // is saved to checkpoint_dir first ("": a temporary directory, removed afterwards).
  int cold_start_rounds = 3;
  int cold_start_tokens = 256;
  std::string exe;
  std::string checkpoint_dir;
  std::function<void(const std::string&)> progress;  // one line per phase; may be empty
};

struct RuntimeBenchReport {
  RuntimeBenchOptions options;
  std::string model_name;
  ModelConfig config;
  int64_t parameters = 0;
  size_t decode_bytes = 0;  // ModelWeights::DecodeBytesStreamed()
  int hardware_threads = 0;
  int blas_threads = 0;
  std::string blas_config;

  std::vector<SgemmMeasurement> sgemm;
  double sgemm_peak_gflops = 0;

  int prefill_tokens = 0;
  int prefill_logit_rows = 0;
  double prefill_layer_flops = 0;      // 2·T·L·P_layer
  double prefill_output_flops = 0;     // 2·R·P_out
  double prefill_attention_flops = 0;  // L·4·q_dim·Σ n
  double prefill_flops = 0;
  std::vector<double> prefill_seconds;  // every timed run
  double prefill_best_seconds = 0;
  double prefill_gflops = 0;

  std::vector<MemcpyMeasurement> memcpy;
  double memcpy_gbps = 0;
  std::vector<ReadMeasurement> reads;  // same thread counts as memcpy
  double read_gbps = 0;
  double read_vs_memcpy = 0;

  std::vector<double> decode_step_seconds;  // every timed step
  double decode_median_seconds = 0;
  double decode_best_seconds = 0;
  double decode_gbps = 0;
  // The step's F32 matrices alone (DecodeMatricesSeconds), one pass beside every timed step.
  std::vector<double> matrices_seconds;
  double matrices_median_seconds = 0;
  double matrices_gbps = 0;     // decode bytes / median pass
  double step_vs_matrices = 0;  // median matrices pass / median step: the share of a step they take

  double prefill_vs_sgemm = 0;
  double decode_vs_memcpy = 0;
  double decode_vs_read = 0;

  struct BatchedDecode {
    int batch = 0;
    double median_seconds = 0;  // one step of every sequence
    double tokens_per_second = 0;
    double vs_batch_1 = 0;  // tokens_per_second / the single sequence's tokens per second
    double openblas_median_seconds = 0;  // the same with OpenBLAS's few-row GEMMs
    double openblas_tokens_per_second = 0;
  };
  std::vector<BatchedDecode> batched_decode;

  // int8 weights, stepped in rounds interleaved with F32 on the same model.
  size_t f32_weight_bytes = 0;     // CpuBackendWeightBytes of the F32 backend
  size_t int8_weight_bytes = 0;    // and of the int8 one
  size_t f32_streamed_bytes = 0;   // CpuBackendStreamedBytes: what a step reads, F32
  size_t int8_streamed_bytes = 0;  // and int8
  double int8_convert_seconds = 0;
  double int8_round_f32_median_seconds = 0;  // median F32 step, alternating with int8
  double int8_median_seconds = 0;            // median int8 step
  double int8_vs_f32_decode = 0;
  double int8_gbps = 0;  // int8 streamed bytes / median int8 step

  // Cold starts (cold_start_bench.h), in run order; medians per dtype.
  std::vector<ColdStartReport> cold_starts;
  ColdStartReport f32_cold;        // the medians of the F32 runs, field by field
  ColdStartReport int8_cold;       // and of the int8 runs
  int int8_tokens_matching = 0;    // leading greedy tokens the int8 run shares with F32's
  double rss_vs_weights = 0;       // F32: peak RSS / weight bytes
  double int8_rss_vs_weights = 0;  // int8: peak RSS / its weight bytes
};

inline constexpr double kPrefillTarget = 0.60;  // target: prefill ≥ 60% of sgemm peak
inline constexpr double kDecodeTarget = 0.75;   // target: decode ≥ 75% of memcpy bandwidth
inline constexpr double kInt8Target = 2.9;      // target: int8 decode ≥ 2.9x F32's
inline constexpr double kRssTarget = 1.15;      // target: peak RSS ≤ 1.15x the weight bytes
inline constexpr double kColdTtftTarget = 0.3;  // target: cold-start TTFT ≤ 0.3 s

// Runs every measurement on the CPU backend. Fails on invalid options, a model that cannot
// be loaded, or a backend error.
absl::StatusOr<RuntimeBenchReport> RunRuntimeBench(const RuntimeBenchOptions& options);

// Human-readable report: the command line, absolute figures, ratios against the targets,
// and as its last line `prefill_vs_sgemm=<r> decode_vs_memcpy=<r> decode_vs_read=<r>
// int8_vs_f32_decode=<r> rss_vs_weights=<r> load_s=<s> cold_ttft_s=<s>` (the last four 0 when
// not measured).
std::string FormatRuntimeBenchReport(const RuntimeBenchReport& report,
                                     const std::string& command_line);

// The same figures as a JSON document.
std::string RuntimeBenchReportJson(const RuntimeBenchReport& report,
                                   const std::string& command_line);

namespace internal {
// Parts of the runtime benchmark in runtime_bench_weights.cc.
absl::Status MeasureInt8Decode(const RuntimeBenchOptions& options,
                               std::shared_ptr<const Model> model, Backend& f32,
                               RuntimeBenchReport& r);
// One pass over the F32 matrices a decode step reads (ModelWeights::DecodeBytesStreamed, norms
// aside), each through cpu::Linear with one row as the CPU backend calls it; x and y are
// scratch, grown as needed. Returns the seconds it took.
double DecodeMatricesSeconds(const Model& model, std::vector<float>& x, std::vector<float>& y);
absl::Status MeasureColdStarts(const RuntimeBenchOptions& options, const Model& model,
                               RuntimeBenchReport& r);
void AppendInt8(const RuntimeBenchReport& r, std::string& s);
void AppendColdStarts(const RuntimeBenchReport& r, std::string& s);
nlohmann::json WeightsJson(const RuntimeBenchReport& r);
}  // namespace internal

}  // namespace scd::bench

#endif  // SCD_COMMON_TOOLS_BENCH_RUNTIME_BENCH_H_
