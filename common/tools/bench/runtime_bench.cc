// Runtime benchmark: builds (or loads) the model, then measures sgemm → prefill and
// memcpy → decode, each pair back to back. See runtime_bench.h for the definitions.
#include "common/tools/bench/runtime_bench.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "common/base/status_macros.h"
#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/tools/bench/model_cost.h"
#include "kernels/cpu/small_batch_linear.h"
#include "nlohmann/json.hpp"

// OpenBLAS extensions; declared here because the generic cblas.h does not always carry them.
extern "C" {
int openblas_get_num_threads(void);
char* openblas_get_config(void);
}

namespace scd::bench {
namespace {

constexpr int kDecodeWarmupSteps = 2;

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<int32_t> RandomTokens(int count, int vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> dist(3, std::max(3, vocab - 1));  // skip specials
  std::vector<int32_t> tokens(count);
  for (int32_t& t : tokens) t = dist(rng);
  return tokens;
}

absl::Status ValidateOptions(const RuntimeBenchOptions& o) {
  if (o.prefill_tokens < 1) return absl::InvalidArgumentError("--tokens must be >= 1");
  if (o.prefill_reps < 1) return absl::InvalidArgumentError("--reps must be >= 1");
  if (o.decode_context < 1) return absl::InvalidArgumentError("--decode-context must be >= 1");
  if (o.decode_steps < 1) return absl::InvalidArgumentError("--decode-steps must be >= 1");
  for (int b : o.decode_batches) {
    if (b < 1 || b > 256) return absl::InvalidArgumentError("--decode-batches must be in [1, 256]");
  }
  if (o.memcpy_bytes < (size_t{1} << 20)) {
    return absl::InvalidArgumentError("--memcpy-mib must be >= 1");
  }
  if (o.int8_rounds < 0 || o.cold_start_rounds < 0 || o.cold_start_tokens < 1) {
    return absl::InvalidArgumentError(
        "--int8-rounds and --cold-starts must be >= 0, --cold-start-tokens >= 1");
  }
  if (o.memcpy_reps < 1 || o.sgemm_reps < 1) {
    return absl::InvalidArgumentError("repetition counts must be >= 1");
  }
  return absl::OkStatus();
}

}  // namespace

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

absl::StatusOr<ModelConfig> BenchShapeConfig(std::string_view shape) {
  ModelConfig c;
  c.arch = Architecture::kLlama;
  c.name = std::string(shape);
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.tie_word_embeddings = true;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  if (shape == "stories110M" || shape == "synthetic110m-v512") {
    c.hidden_size = 768;
    c.num_layers = 12;
    c.num_heads = 12;
    c.num_kv_heads = 12;
    c.head_dim = 64;
    c.intermediate_size = 2048;
    c.vocab_size = 32000;
    c.max_position_embeddings = 1024;
    if (shape == "synthetic110m-v512") {  // the same layers, a small untied vocabulary
      c.vocab_size = 512;
      c.tie_word_embeddings = false;
    }
  } else if (shape == "stories260K") {
    c.hidden_size = 64;
    c.num_layers = 5;
    c.num_heads = 8;
    c.num_kv_heads = 4;
    c.head_dim = 8;
    c.intermediate_size = 172;
    c.vocab_size = 512;
    c.max_position_embeddings = 512;
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown shape \"%s\" (choices: stories110M, synthetic110m-v512, "
                        "stories260K)",
                        shape));
  }
  return c;
}

namespace {

void Progress(const RuntimeBenchOptions& options, const std::string& line) {
  if (options.progress) options.progress(line);
}

int DecodeCapacity(const RuntimeBenchOptions& options) {
  return options.decode_context + kDecodeWarmupSteps + options.decode_steps;
}

absl::Status CheckFits(const RuntimeBenchOptions& options, const ModelConfig& c) {
  const int T = options.prefill_tokens;
  const int decode_capacity = DecodeCapacity(options);
  if (T > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("--tokens ", T, " exceeds the model's ",
                                                   c.max_position_embeddings, " positions"));
  }
  if (decode_capacity > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--decode-context + --decode-steps + ", kDecodeWarmupSteps, " warm-up steps = ",
        decode_capacity, " exceeds the model's ", c.max_position_embeddings, " positions"));
  }
  return absl::OkStatus();
}

// Loads --model-dir or builds the synthetic --shape model; records its name in the report.
absl::StatusOr<std::shared_ptr<const Model>> LoadBenchModel(const RuntimeBenchOptions& options,
                                                            RuntimeBenchReport& r) {
  std::shared_ptr<const Model> model;
  if (!options.model_dir.empty()) {
    Progress(options, absl::StrCat("loading ", options.model_dir));
    SCD_ASSIGN_OR_RETURN(model, LoadModel(options.model_dir));
    SCD_RETURN_IF_ERROR(CheckFits(options, model->config));
    r.model_name = model->config.name;
  } else {
    SCD_ASSIGN_OR_RETURN(ModelConfig config, BenchShapeConfig(options.shape));
    SCD_RETURN_IF_ERROR(CheckFits(options, config));
    Progress(options, absl::StrCat("building synthetic ", options.shape, " model (seed ",
                                   options.seed, ")"));
    model = MakeSyntheticModel(config, options.seed);
    r.model_name = absl::StrCat(options.shape, " (synthetic, seed ", options.seed, ")");
  }
  return model;
}

void DescribeHostAndModel(const Model& model, RuntimeBenchReport& r) {
  r.config = model.config;
  r.parameters = static_cast<int64_t>(model.weights.ParameterCount());
  r.decode_bytes = model.weights.DecodeBytesStreamed();
  r.hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
  r.blas_threads = openblas_get_num_threads();
  r.blas_config = openblas_get_config();
}

// Compute ceiling: the GEMM shapes of this model's prefill, plus a large square one.
std::vector<std::array<int, 3>> SgemmShapes(const ModelConfig& cfg, int T) {
  const int d = cfg.hidden_size;
  std::vector<std::array<int, 3>> shapes = {{T, cfg.q_dim(), d},
                                            {T, cfg.kv_dim(), d},
                                            {T, d, cfg.q_dim()},
                                            {T, cfg.intermediate_size, d},
                                            {T, d, cfg.intermediate_size},
                                            {T, cfg.vocab_size, d},
                                            {2048, 2048, 2048}};
  std::sort(shapes.begin(), shapes.end());
  shapes.erase(std::unique(shapes.begin(), shapes.end()), shapes.end());
  return shapes;
}

// Measured before and after the prefill runs, keeping each shape's best, so that a burst of
// load from neighbours during one pass cannot lower the ceiling (and flatter the ratio).
void SgemmPass(const RuntimeBenchOptions& options, const std::vector<std::array<int, 3>>& shapes,
               const char* when, RuntimeBenchReport& r) {
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto& [m, n, k] = shapes[i];
    Progress(options, absl::StrFormat("sgemm %dx%dx%d (%s)", m, n, k, when));
    SgemmMeasurement measured = MeasureSgemm(m, n, k, options.sgemm_reps, options.seed);
    if (r.sgemm.size() <= i) {
      r.sgemm.push_back(measured);
    } else if (measured.gflops > r.sgemm[i].gflops) {
      r.sgemm[i] = measured;
    }
    r.sgemm_peak_gflops = std::max(r.sgemm_peak_gflops, r.sgemm[i].gflops);
  }
}

// Prefill: a fresh sequence per run; only the Prefill call is timed.
absl::Status MeasurePrefill(const RuntimeBenchOptions& options, const ModelConfig& cfg,
                            Backend& backend, std::mt19937_64& rng, RuntimeBenchReport& r) {
  const int T = options.prefill_tokens;
  r.prefill_tokens = T;
  r.prefill_logit_rows = options.all_logits ? T : 1;
  r.prefill_layer_flops = 2.0 * T * cfg.num_layers * static_cast<double>(LayerMatmulParams(cfg));
  r.prefill_output_flops =
      2.0 * r.prefill_logit_rows * static_cast<double>(OutputMatmulParams(cfg));
  r.prefill_attention_flops = AttentionFlops(cfg, 0, T);
  r.prefill_flops = PrefillFlops(cfg, 0, T, r.prefill_logit_rows);
  const std::vector<int32_t> prompt = RandomTokens(T, cfg.vocab_size, rng);
  PrefillOptions prefill_options;
  prefill_options.all_logits = options.all_logits;
  r.prefill_best_seconds = 1e30;
  for (int run = 0; run <= options.prefill_reps; ++run) {
    Progress(options, run == 0 ? absl::StrFormat("prefill %d tokens (warm-up)", T)
                               : absl::StrFormat("prefill %d tokens (run %d/%d)", T, run,
                                                 options.prefill_reps));
    SCD_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq, backend.NewSequence(T));
    PrefillResult result;
    auto start = std::chrono::steady_clock::now();
    SCD_RETURN_IF_ERROR(backend.Prefill(*seq, prompt, prefill_options, &result));
    double seconds = Seconds(start);
    if (run == 0) continue;
    r.prefill_seconds.push_back(seconds);
    r.prefill_best_seconds = std::min(r.prefill_best_seconds, seconds);
  }
  return absl::OkStatus();
}

// Memory ceilings, memcpy and a read-only stream: one thread and every hardware thread,
// before and after the decode steps; the fastest run counts (see SgemmPass for why twice).
absl::Status MemoryPass(const RuntimeBenchOptions& options, const std::vector<int>& thread_counts,
                        const char* when, RuntimeBenchReport& r) {
  for (size_t i = 0; i < thread_counts.size(); ++i) {
    const int threads = thread_counts[i];
    Progress(options, absl::StrFormat("memcpy and read %.0f MiB, %d thread%s (%s)",
                                      options.memcpy_bytes / 1048576.0, threads,
                                      threads > 1 ? "s" : "", when));
    MemcpyMeasurement m = MeasureMemcpy(options.memcpy_bytes, threads, options.memcpy_reps);
    ReadMeasurement read = MeasureRead(options.memcpy_bytes, threads, options.memcpy_reps);
    if (m.gbps == 0 || read.gbps == 0) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot allocate 2 x ", options.memcpy_bytes,
                                                       " bytes for the memory measurements"));
    }
    if (r.memcpy.size() <= i) {
      r.memcpy.push_back(m);
      r.reads.push_back(read);
    }
    if (m.gbps > r.memcpy[i].gbps) r.memcpy[i] = m;
    if (read.gbps > r.reads[i].gbps) r.reads[i] = read;
    r.memcpy_gbps = std::max(r.memcpy_gbps, r.memcpy[i].gbps);
    r.read_gbps = std::max(r.read_gbps, r.reads[i].gbps);
  }
  return absl::OkStatus();
}

// Decode: prefill a context, then single-token steps; warm-up steps are not timed. Beside
// each step runs a pass over its matrices alone, before or after it in turn, so that the two
// medians share the host's drifting memory bandwidth.
absl::Status MeasureDecode(const RuntimeBenchOptions& options, const Model& model, Backend& backend,
                           std::mt19937_64& rng, std::vector<float>& logits,
                           RuntimeBenchReport& r) {
  const ModelConfig& cfg = model.config;
  Progress(options, absl::StrFormat("decode: %d-token context, %d steps", options.decode_context,
                                    options.decode_steps));
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq, backend.NewSequence(DecodeCapacity(options)));
  {
    PrefillResult unused;
    SCD_RETURN_IF_ERROR(backend.Prefill(*seq,
                                        RandomTokens(options.decode_context, cfg.vocab_size, rng),
                                        PrefillOptions{}, &unused));
  }
  const std::vector<int32_t> steps =
      RandomTokens(kDecodeWarmupSteps + options.decode_steps, cfg.vocab_size, rng);
  Sequence* seqs[] = {seq.get()};
  std::vector<float> x, y;
  for (size_t i = 0; i < steps.size(); ++i) {
    double matrices = i % 2 ? internal::DecodeMatricesSeconds(model, x, y) : 0;
    auto start = std::chrono::steady_clock::now();
    SCD_RETURN_IF_ERROR(backend.Decode(seqs, absl::MakeConstSpan(&steps[i], 1), &logits));
    double seconds = Seconds(start);
    if (i % 2 == 0) matrices = internal::DecodeMatricesSeconds(model, x, y);
    if (i < kDecodeWarmupSteps) continue;
    r.decode_step_seconds.push_back(seconds);
    r.matrices_seconds.push_back(matrices);
  }
  r.matrices_median_seconds = Median(r.matrices_seconds);
  r.matrices_gbps = static_cast<double>(r.decode_bytes) / r.matrices_median_seconds / 1e9;
  r.decode_median_seconds = Median(r.decode_step_seconds);
  r.step_vs_matrices = r.matrices_median_seconds / r.decode_median_seconds;
  r.decode_best_seconds =
      *std::min_element(r.decode_step_seconds.begin(), r.decode_step_seconds.end());
  return absl::OkStatus();
}

// The median step time of a batch, with SmallBatchLinear on or off.
absl::StatusOr<double> MedianBatchStep(const RuntimeBenchOptions& options, const ModelConfig& cfg,
                                       Backend& backend, std::mt19937_64& rng,
                                       absl::Span<Sequence* const> batch_seqs,
                                       std::vector<float>& logits, bool small_batch) {
  const int batch = static_cast<int>(batch_seqs.size());
  cpu::SetSmallBatchLinearEnabled(small_batch);
  std::vector<double> step_seconds;
  absl::Status st;
  for (int i = 0; st.ok() && i < kDecodeWarmupSteps + options.decode_steps; ++i) {
    const std::vector<int32_t> tokens = RandomTokens(batch, cfg.vocab_size, rng);
    auto start = std::chrono::steady_clock::now();
    st = backend.Decode(batch_seqs, tokens, &logits);
    if (i >= kDecodeWarmupSteps) step_seconds.push_back(Seconds(start));
  }
  cpu::SetSmallBatchLinearEnabled(true);  // back to the default, whatever happened
  SCD_RETURN_IF_ERROR(st);
  return Median(step_seconds);
}

// Batched decode: the sequences of a batch step together, one token each, twice as many
// steps as the single-sequence decode (SmallBatchLinear on, then off).
absl::StatusOr<RuntimeBenchReport::BatchedDecode> MeasureBatchedDecode(
    const RuntimeBenchOptions& options, const ModelConfig& cfg, Backend& backend,
    std::mt19937_64& rng, int batch, std::vector<float>& logits, const RuntimeBenchReport& r) {
  const int batched_capacity =
      options.decode_context + 2 * (kDecodeWarmupSteps + options.decode_steps);
  Progress(options,
           absl::StrFormat("decode: %d sequences at once, %d steps", batch, options.decode_steps));
  std::vector<std::unique_ptr<Sequence>> owned;
  std::vector<Sequence*> batch_seqs;
  for (int b = 0; b < batch; ++b) {
    SCD_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> s, backend.NewSequence(batched_capacity));
    PrefillResult unused;
    SCD_RETURN_IF_ERROR(backend.Prefill(
        *s, RandomTokens(options.decode_context, cfg.vocab_size, rng), PrefillOptions{}, &unused));
    batch_seqs.push_back(s.get());
    owned.push_back(std::move(s));
  }
  RuntimeBenchReport::BatchedDecode d;
  d.batch = batch;
  SCD_ASSIGN_OR_RETURN(d.median_seconds,
                       MedianBatchStep(options, cfg, backend, rng, batch_seqs, logits, true));
  SCD_ASSIGN_OR_RETURN(d.openblas_median_seconds,
                       MedianBatchStep(options, cfg, backend, rng, batch_seqs, logits, false));
  d.tokens_per_second = batch / d.median_seconds;
  d.openblas_tokens_per_second = batch / d.openblas_median_seconds;
  d.vs_batch_1 = d.tokens_per_second * r.decode_median_seconds;
  return d;
}

}  // namespace

absl::StatusOr<RuntimeBenchReport> RunRuntimeBench(const RuntimeBenchOptions& options) {
  SCD_RETURN_IF_ERROR(ValidateOptions(options));
  RuntimeBenchReport r;
  r.options = options;
  r.options.progress = nullptr;

  SCD_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, LoadBenchModel(options, r));
  const ModelConfig& cfg = model->config;
  DescribeHostAndModel(*model, r);
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, CreateBackend(BackendKind::kCpu, model));
  std::mt19937_64 rng(options.seed ^ 0x9e3779b97f4a7c15ull);

  const std::vector<std::array<int, 3>> shapes = SgemmShapes(cfg, options.prefill_tokens);
  SgemmPass(options, shapes, "before prefill", r);
  SCD_RETURN_IF_ERROR(MeasurePrefill(options, cfg, *backend, rng, r));
  SgemmPass(options, shapes, "after prefill", r);
  r.prefill_gflops = r.prefill_flops / r.prefill_best_seconds / 1e9;
  r.prefill_vs_sgemm = r.prefill_gflops / r.sgemm_peak_gflops;

  std::vector<int> thread_counts = {1};
  if (r.hardware_threads > 1) thread_counts.push_back(r.hardware_threads);
  SCD_RETURN_IF_ERROR(MemoryPass(options, thread_counts, "before decode", r));
  std::vector<float> logits;
  SCD_RETURN_IF_ERROR(MeasureDecode(options, *model, *backend, rng, logits, r));
  SCD_RETURN_IF_ERROR(MemoryPass(options, thread_counts, "after decode", r));
  r.decode_gbps = static_cast<double>(r.decode_bytes) / r.decode_median_seconds / 1e9;
  r.decode_vs_memcpy = r.decode_gbps / r.memcpy_gbps;
  r.decode_vs_read = r.decode_gbps / r.read_gbps;
  r.read_vs_memcpy = r.read_gbps / r.memcpy_gbps;

  for (int batch : options.decode_batches) {
    SCD_ASSIGN_OR_RETURN(RuntimeBenchReport::BatchedDecode d,
                         MeasureBatchedDecode(options, cfg, *backend, rng, batch, logits, r));
    r.batched_decode.push_back(d);
  }
  SCD_RETURN_IF_ERROR(internal::MeasureInt8Decode(options, model, *backend, r));
  backend.reset();
  SCD_RETURN_IF_ERROR(internal::MeasureColdStarts(options, *model, r));
  return r;
}

namespace {

const char* Verdict(double ratio, double target) { return ratio >= target ? "met" : "MISSED"; }

void AppendHeader(const RuntimeBenchReport& r, const std::string& command_line, std::string& s) {
  const ModelConfig& c = r.config;
  absl::StrAppendFormat(&s, "SCD-Serve runtime benchmark (CPU backend)\n");
  absl::StrAppendFormat(&s, "command: %s\n", command_line);
  absl::StrAppendFormat(&s, "host: %d hardware threads; BLAS: %s; %d BLAS threads\n",
                        r.hardware_threads, r.blas_config, r.blas_threads);
  absl::StrAppendFormat(&s,
                        "model: %s: d=%d layers=%d heads=%d kv_heads=%d head_dim=%d ffn=%d "
                        "vocab=%d%s; %.1fM parameters\n\n",
                        r.model_name, c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads,
                        c.head_dim, c.intermediate_size, c.vocab_size,
                        c.tie_word_embeddings ? " tied" : "", r.parameters / 1e6);
}

void AppendSgemm(const RuntimeBenchReport& r, std::string& s) {
  absl::StrAppendFormat(
      &s,
      "sgemm, C[M,N] = A[M,K]·B[N,K]^T, 2·M·N·K flops, best of 2 x %d (before and after "
      "prefill):\n",
      r.options.sgemm_reps);
  absl::StrAppendFormat(&s, "  %6s %6s %6s %10s %10s\n", "M", "N", "K", "ms", "GFLOP/s");
  for (const SgemmMeasurement& m : r.sgemm) {
    absl::StrAppendFormat(&s, "  %6d %6d %6d %10.2f %10.1f\n", m.m, m.n, m.k, m.best_seconds * 1e3,
                          m.gflops);
  }
  absl::StrAppendFormat(&s, "  peak (max of the above): %.1f GFLOP/s\n\n", r.sgemm_peak_gflops);
}

void AppendPrefill(const RuntimeBenchReport& r, std::string& s) {
  absl::StrAppendFormat(&s, "prefill: %d tokens, logits for %d row%s, best of %d after a warm-up\n",
                        r.prefill_tokens, r.prefill_logit_rows, r.prefill_logit_rows > 1 ? "s" : "",
                        r.options.prefill_reps);
  absl::StrAppendFormat(&s,
                        "  FLOPs = 2·T·L·P_layer + 2·R·P_out + L·4·q_dim·Σ_t(t+1)\n"
                        "        = %.2f + %.2f + %.2f = %.2f GFLOP\n",
                        r.prefill_layer_flops / 1e9, r.prefill_output_flops / 1e9,
                        r.prefill_attention_flops / 1e9, r.prefill_flops / 1e9);
  std::vector<std::string> runs;
  for (double t : r.prefill_seconds) runs.push_back(absl::StrFormat("%.1f", t * 1e3));
  absl::StrAppendFormat(&s, "  time: best %.1f ms (runs: %s ms), %.0f tokens/s\n",
                        r.prefill_best_seconds * 1e3, absl::StrJoin(runs, ", "),
                        r.prefill_tokens / r.prefill_best_seconds);
  absl::StrAppendFormat(&s,
                        "  achieved: %.1f GFLOP/s = %.1f%% of sgemm peak (target %.0f%%: %s)\n\n",
                        r.prefill_gflops, 100 * r.prefill_vs_sgemm, 100 * kPrefillTarget,
                        Verdict(r.prefill_vs_sgemm, kPrefillTarget));
}

// A line per thread count of memcpy or read-only runs (MemcpyMeasurement, ReadMeasurement).
template <class Measurement>
void AppendMemoryRuns(const std::vector<Measurement>& runs, std::string& s) {
  for (const Measurement& m : runs) {
    absl::StrAppendFormat(&s, "  %-10s %7.1f ms, %.2f GB/s\n",
                          absl::StrFormat("%d thread%s:", m.threads, m.threads > 1 ? "s" : ""),
                          m.best_seconds * 1e3, m.gbps);
  }
}

void AppendMemcpy(const RuntimeBenchReport& r, std::string& s) {
  absl::StrAppendFormat(
      &s,
      "memcpy, %.0f MiB per copy, GB/s = 2·bytes/s (read + write), best of 2 x %d (before "
      "and after decode):\n",
      r.options.memcpy_bytes / 1048576.0, r.options.memcpy_reps);
  AppendMemoryRuns(r.memcpy, s);
  absl::StrAppendFormat(&s, "  bandwidth (the faster): %.2f GB/s\n", r.memcpy_gbps);
  absl::StrAppendFormat(&s, "reads alone, the same buffer size, GB/s = bytes/s (read only):\n");
  AppendMemoryRuns(r.reads, s);
  absl::StrAppendFormat(&s, "  bandwidth (the faster): %.2f GB/s = %.1f%% of memcpy's\n\n",
                        r.read_gbps, 100 * r.read_vs_memcpy);
}

void AppendDecode(const RuntimeBenchReport& r, std::string& s) {
  const RuntimeBenchOptions& o = r.options;
  absl::StrAppendFormat(
      &s, "decode: %d single-token steps after a %d-token prefill (%d warm-up steps untimed)\n",
      o.decode_steps, o.decode_context, kDecodeWarmupSteps);
  absl::StrAppendFormat(&s, "  step: median %.2f ms, best %.2f ms, %.1f tokens/s\n",
                        r.decode_median_seconds * 1e3, r.decode_best_seconds * 1e3,
                        1.0 / r.decode_median_seconds);
  absl::StrAppendFormat(&s,
                        "  weights streamed per step: %.1f MB (DecodeBytesStreamed; KV-cache "
                        "reads not counted)\n",
                        r.decode_bytes / 1e6);
  absl::StrAppendFormat(
      &s, "  achieved: %.2f GB/s = %.1f%% of memcpy bandwidth (target %.0f%%: %s)\n", r.decode_gbps,
      100 * r.decode_vs_memcpy, 100 * kDecodeTarget, Verdict(r.decode_vs_memcpy, kDecodeTarget));
  absl::StrAppendFormat(&s, "            = %.1f%% of the read-only stream's bandwidth\n",
                        100 * r.decode_vs_read);
  absl::StrAppendFormat(&s,
                        "  its matrices alone, one pass beside each step (cpu::Linear, one row): "
                        "median %.2f ms, %.2f GB/s = %.1f%% of the read-only stream's; the step "
                        "runs at %.1f%% of their speed\n\n",
                        r.matrices_median_seconds * 1e3, r.matrices_gbps,
                        100 * r.matrices_gbps / r.read_gbps, 100 * r.step_vs_matrices);
}

void AppendBatchedDecode(const RuntimeBenchReport& r, std::string& s) {
  if (r.batched_decode.empty()) return;
  absl::StrAppendFormat(&s,
                        "batched decode: sequences of a %d-token context stepping together "
                        "(median of %d steps after %d)\n",
                        r.options.decode_context, r.options.decode_steps, kDecodeWarmupSteps);
  for (const RuntimeBenchReport::BatchedDecode& d : r.batched_decode) {
    absl::StrAppendFormat(&s,
                          "  batch %3d: step %.2f ms, %.1f tokens/s = %.2fx batch 1; with "
                          "OpenBLAS's few-row GEMMs %.2f ms, %.1f tokens/s (SmallBatchLinear "
                          "%.2fx)\n",
                          d.batch, d.median_seconds * 1e3, d.tokens_per_second, d.vs_batch_1,
                          d.openblas_median_seconds * 1e3, d.openblas_tokens_per_second,
                          d.tokens_per_second / d.openblas_tokens_per_second);
  }
  s += "\n";
}

// The JSON array of memcpy or read-only runs, their GB/s under `gbps_key`.
template <class Measurement>
nlohmann::json MemoryRunsJson(const std::vector<Measurement>& runs, const char* gbps_key) {
  nlohmann::json out = nlohmann::json::array();
  for (const Measurement& m : runs) {
    out.push_back({{"bytes", m.bytes},
                   {"threads", m.threads},
                   {"best_seconds", m.best_seconds},
                   {gbps_key, m.gbps}});
  }
  return out;
}

}  // namespace

std::string FormatRuntimeBenchReport(const RuntimeBenchReport& r, const std::string& command_line) {
  std::string s;
  AppendHeader(r, command_line, s);
  AppendSgemm(r, s);
  AppendPrefill(r, s);
  AppendMemcpy(r, s);
  AppendDecode(r, s);
  AppendBatchedDecode(r, s);
  internal::AppendInt8(r, s);
  internal::AppendColdStarts(r, s);
  absl::StrAppendFormat(&s,
                        "prefill_vs_sgemm=%.3f decode_vs_memcpy=%.3f decode_vs_read=%.3f "
                        "int8_vs_f32_decode=%.2f rss_vs_weights=%.3f load_s=%.3f "
                        "cold_ttft_s=%.3f\n",
                        r.prefill_vs_sgemm, r.decode_vs_memcpy, r.decode_vs_read,
                        r.int8_vs_f32_decode, r.rss_vs_weights, r.f32_cold.load_seconds,
                        r.f32_cold.ttft_seconds);
  return s;
}

std::string RuntimeBenchReportJson(const RuntimeBenchReport& r, const std::string& command_line) {
  nlohmann::json j;
  j["command"] = command_line;
  j["host"] = {{"hardware_threads", r.hardware_threads},
               {"blas_threads", r.blas_threads},
               {"blas_config", r.blas_config}};
  j["model"] = {{"name", r.model_name},
                {"config", nlohmann::json::parse(r.config.ToCanonicalJson(), nullptr, false)},
                {"parameters", r.parameters},
                {"decode_bytes_streamed", r.decode_bytes}};
  nlohmann::json sgemm = nlohmann::json::array();
  for (const SgemmMeasurement& m : r.sgemm) {
    sgemm.push_back({{"m", m.m},
                     {"n", m.n},
                     {"k", m.k},
                     {"best_seconds", m.best_seconds},
                     {"gflops", m.gflops}});
  }
  j["sgemm"] = {
      {"reps", r.options.sgemm_reps}, {"shapes", sgemm}, {"peak_gflops", r.sgemm_peak_gflops}};
  j["prefill"] = {{"tokens", r.prefill_tokens},
                  {"logit_rows", r.prefill_logit_rows},
                  {"flops", r.prefill_flops},
                  {"layer_flops", r.prefill_layer_flops},
                  {"output_flops", r.prefill_output_flops},
                  {"attention_flops", r.prefill_attention_flops},
                  {"run_seconds", r.prefill_seconds},
                  {"best_seconds", r.prefill_best_seconds},
                  {"gflops", r.prefill_gflops}};
  j["memcpy"] = {{"reps", r.options.memcpy_reps},
                 {"runs", MemoryRunsJson(r.memcpy, "gbps_read_plus_write")},
                 {"gbps", r.memcpy_gbps}};
  j["read"] = {{"reps", r.options.memcpy_reps},
               {"runs", MemoryRunsJson(r.reads, "gbps_read")},
               {"gbps", r.read_gbps},
               {"vs_memcpy", r.read_vs_memcpy}};
  j["decode"] = {{"context", r.options.decode_context},
                 {"step_seconds", r.decode_step_seconds},
                 {"median_seconds", r.decode_median_seconds},
                 {"best_seconds", r.decode_best_seconds},
                 {"gbps", r.decode_gbps},
                 {"matrices_seconds", r.matrices_seconds},
                 {"matrices_median_seconds", r.matrices_median_seconds},
                 {"matrices_gbps", r.matrices_gbps},
                 {"step_vs_matrices", r.step_vs_matrices}};
  nlohmann::json batched = nlohmann::json::array();
  for (const RuntimeBenchReport::BatchedDecode& d : r.batched_decode) {
    batched.push_back({{"batch", d.batch},
                       {"median_seconds", d.median_seconds},
                       {"tokens_per_second", d.tokens_per_second},
                       {"vs_batch_1", d.vs_batch_1},
                       {"openblas_median_seconds", d.openblas_median_seconds},
                       {"openblas_tokens_per_second", d.openblas_tokens_per_second}});
  }
  j["batched_decode"] = batched;
  j["prefill_vs_sgemm"] = r.prefill_vs_sgemm;
  j["decode_vs_memcpy"] = r.decode_vs_memcpy;
  j["decode_vs_read"] = r.decode_vs_read;
  j["weights"] = internal::WeightsJson(r);
  j["int8_vs_f32_decode"] = r.int8_vs_f32_decode;
  j["rss_vs_weights"] = r.rss_vs_weights;
  j["load_seconds"] = r.f32_cold.load_seconds;
  j["cold_ttft_seconds"] = r.f32_cold.ttft_seconds;
  j["targets"] = {{"prefill_vs_sgemm", kPrefillTarget},
                  {"decode_vs_memcpy", kDecodeTarget},
                  {"int8_vs_f32_decode", kInt8Target},
                  {"rss_vs_weights", kRssTarget},
                  {"cold_ttft_seconds", kColdTtftTarget}};
  return j.dump(2) + "\n";
}

}  // namespace scd::bench
