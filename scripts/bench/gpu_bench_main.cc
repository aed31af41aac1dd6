// scd-gpu-bench: GPU roofline and runtime benchmark of the CUDA backend, with random
// BF16 weights drawn on the device from the Mistral-7B and Llama-3-8B configs (no host copy).
// Every figure is measured in the same run as its ceiling or its baseline:
//   - compute ceiling: the best cuBLAS BF16 GEMM TFLOP/s over a few large shapes (2·M·N·K
//     flops per GEMM); prefill is reported as achieved TFLOP/s (the model-cost FLOPs of
//     common/tools/bench/model_cost.h, the same count the CPU benchmark uses:
//     2·T·L·P_layer + 2·P_out + L·4·q_dim·Σ_t min(t+1, window)) divided by the time to first
//     token, and as a fraction of that ceiling;
//   - memory ceiling: device-to-device cudaMemcpy GB/s, counting 2·bytes (read + write, the
//     STREAM "Copy" convention); decode (DecodeSample steps: greedy sampling on the device,
//     the token ids back to the host) is reported as tokens/s and as achieved HBM GB/s
//     (weights streamed once per step + the KV cache read) over that ceiling, with the
//     backend's CUDA graphs (its default) and without them (eager launches), side by side;
//   - kernels alone (kernel_bench.h): the small-batch Linear against cuBLAS, the two prefill
//     attention kernels, the two decode attention kernels, each pair on the same operands;
//   - where the time goes (op_profile_bench.h): the backend's per-operation profile of the
//     summary's prefill (4K) and of batch-1 decode steps, each class's share of the pass and
//     its rate against the GEMM peak or the copy;
//   - SCD rebuild (scd_rebuild_bench.h): ScdGpuRebuilder's time from host codes to a filled
//     KV cache for --scd-tokens positions, against the consumer's own prefill TTFT at that
//     length, measured here (target: at least 5x faster);
//   - SEKV decode step (sekv_step_bench.h): the attention part of one batch-1 decode step
//     over all layers, SEKV's mixed-resolution GPU tier against DecodeAttention over the full
//     KV cache, at each --sekv-contexts length; and a whole step derived from it (that
//     attention plus the batch-1 decode step measured at --context);
//   - SEKV whole step (sekv_model_bench.h): a whole batch-1 decode step through the decode
//     daemon's GPU SEKV path (sekv::GpuSekv, zoom-in and CPU tier included) against the
//     backend's own full-KV decode step, at each --sekv-model-contexts length (first model),
//     with the zoom-in on the device (the daemon's default) and on the host;
//   - SEKV batches (sekv_model_bench.h): --sekv-batches concurrent SEKV requests of
//     --sekv-batch-context tokens (last model, at the end of the run), stepped one by one
//     and as one batch.
// Writes results.json and results.md into --out after every part (so a later failure keeps the
// earlier figures), and prints the command line, each step, and the ratios. Usage:
//   scd-gpu-bench --out DIR [--models mistral-7b,llama3-8b] [--prefill 1024,4096,16384]
//                 [--batches 1,32] [--context 512] [--steps 16] [--scd-tokens 4096]
//                 [--sekv-contexts 32768,131072] [--sekv-model-contexts 32768] [--skip-scd]
//                 [--skip-sekv] [--skip-sekv-model] [--sekv-batch-context 4096]
//                 [--sekv-batches 1,4,8] [--skip-sekv-batch] [--skip-mma] [--quick]
// (`--help` says what each flag is.) --quick runs every part at toy sizes (the "tiny" model,
// 256-wide GEMMs, a 16 MiB copy), except the sizes given on the command line: a check of the
// tool itself, whose figures mean nothing. CI runs it over CPU stand-ins of the CUDA calls
// (scd-gpu-bench-host, tests/gpu/CMakeLists.txt), so that the device run never meets a crash in the
// tool.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/model/config.h"
#include "common/runtime/backend.h"
#include "common/runtime/cuda/backend_access.h"
#include "common/runtime/cuda/decode_graph_cache.h"
#include "common/runtime/cuda/kernel_choices.h"
#include "common/runtime/cuda/op_profiling.h"
#include "common/runtime/cuda/synthetic_backend.h"
#include "common/runtime/sampler.h"
#include "common/tools/bench/gpu/bench_report.h"
#include "common/tools/bench/gpu/bench_support.h"
#include "common/tools/bench/gpu/kernel_bench.h"
#include "common/tools/bench/gpu/op_profile_bench.h"
#include "common/tools/bench/gpu/scd_rebuild_bench.h"
#include "common/tools/bench/gpu/sekv_model_bench.h"
#include "common/tools/bench/gpu/sekv_step_bench.h"
#include "common/tools/bench/model_cost.h"
#include "common/tools/cli/flags.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"

namespace scd {
namespace {

using cuda_bench::Clock;
using cuda_bench::Seconds;

struct Flags {
  std::string out = ".";
  std::vector<std::string> models = {"mistral-7b", "llama3-8b"};
  std::vector<int> prefill = {1024, 4096, 16384};
  std::vector<int> batches = {1, 32};
  int context = 512;
  int steps = 16;
  int scd_tokens = 4096;
  std::vector<int> sekv_contexts = {32768, 131072};
  // One whole-model context, for the first model only (Mistral-7B and Llama-3-8B share the
  // attention shape): its host cache takes L·N·kv_dim·8 bytes of random K/V to build (8.6 GB
  // at 32K) and seconds of 16 cores.
  std::vector<int> sekv_model_contexts = {32768};
  // Concurrent SEKV requests of one context (last model): stepped one by one and batched.
  int sekv_batch_context = 4096;
  std::vector<int> sekv_batches = {1, 4, 8};
  bool skip_sekv_batch = false;
  bool skip_scd = false;
  // No mma.sync prefill attention anywhere: for a device where its parity case failed
  // (scripts/gpu_check.sh's first contact), so that a fault it makes cannot end the run.
  bool skip_mma = false;
  bool skip_sekv = false;
  bool skip_sekv_model = false;
  bool quick = false;  // toy sizes everywhere (see the usage above)
};

// --quick's sizes, for checking the tool itself.
void SetQuick(Flags* f) {
  f->quick = true;
  f->models = {"tiny"};
  f->prefill = {64, 128};
  f->batches = {1, 2};
  f->context = 32;
  f->steps = 2;
  f->scd_tokens = 128;
  f->sekv_contexts = {1024};
  f->sekv_model_contexts = {1024};
  f->sekv_batch_context = 1024;
  f->sekv_batches = {1, 2};
}

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "scd-gpu-bench: %s\n", message.c_str());
  std::exit(1);
}

void Check(const absl::Status& status, const std::string& what) {
  if (!status.ok()) Die(what + ": " + status.ToString());
}

// The shapes --models names: public HF configs, and "tiny" for --quick; nullopt for any other
// name.
std::optional<ModelConfig> ModelShape(const std::string& name) {
  ModelConfig c;
  c.name = name;
  c.hidden_size = 4096;
  c.num_layers = 32;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.intermediate_size = 14336;
  c.rms_norm_eps = 1e-5f;
  if (name == "mistral-7b") {  // Mistral-7B-v0.1: sliding window 4096
    c.arch = Architecture::kMistral;
    c.vocab_size = 32000;
    c.max_position_embeddings = 32768;
    c.sliding_window = 4096;
    c.rope_theta = 10000.0f;
  } else if (name == "tiny") {  // --quick: 8 layers, so that the SCD part has REUSE layers too
    c.arch = Architecture::kLlama;
    c.hidden_size = 256;
    c.num_layers = 8;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    c.intermediate_size = 512;
    c.vocab_size = 512;
    c.max_position_embeddings = 2048;
    c.rope_theta = 10000.0f;
  } else if (name == "llama3-8b") {
    c.arch = Architecture::kLlama;
    c.vocab_size = 128256;
    c.max_position_embeddings = 8192;
    c.rope_theta = 500000.0f;
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001};
  } else {
    return std::nullopt;
  }
  return c;
}

// Parses the command line into *f; returns the exit code when the tool stops here (--help, a
// bad command line).
std::optional<int> ParseFlags(int argc, char** argv, Flags* f) {
  std::string models = absl::StrJoin(f->models, ",");
  cli::FlagParser flags("scd-gpu-bench", "--out DIR [flags]");
  flags.AddString("out", &f->out, "folder for results.json and results.md");
  flags.AddString("models", &models, "model shapes, comma-separated: mistral-7b, llama3-8b");
  flags.AddIntList("prefill", &f->prefill, "prefill lengths (TTFT, TFLOP/s against the peak)");
  flags.AddIntList("batches", &f->batches, "decode batch sizes (GB/s against the copy)");
  flags.AddInt("context", &f->context, "tokens in the KV cache of each decoding sequence");
  flags.AddInt("steps", &f->steps, "timed decode steps");
  flags.AddInt("scd-tokens", &f->scd_tokens, "SCD rebuild length (against the prefill there)");
  flags.AddIntList("sekv-contexts", &f->sekv_contexts, "SEKV attention step lengths (>= 1024)");
  flags.AddIntList("sekv-model-contexts", &f->sekv_model_contexts,
                   "SEKV whole-step lengths, first model only (>= 1024)");
  flags.AddInt("sekv-batch-context", &f->sekv_batch_context,
               "length of each concurrent SEKV request (>= 1024)");
  flags.AddIntList("sekv-batches", &f->sekv_batches, "concurrent SEKV requests, last model only");
  flags.AddBool("skip-scd", &f->skip_scd, "no SCD rebuild");
  flags.AddBool("skip-mma", &f->skip_mma,
                "no mma.sync prefill attention (neither alone nor in the prefills)");
  flags.AddBool("skip-sekv", &f->skip_sekv, "no SEKV attention step");
  flags.AddBool("skip-sekv-model", &f->skip_sekv_model, "no SEKV whole step");
  flags.AddBool("skip-sekv-batch", &f->skip_sekv_batch, "no concurrent SEKV requests");
  flags.AddBool("quick", &f->quick,
                "toy sizes for every size not given: a check of the tool, not figures");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv)) return exit;
  f->models = absl::StrSplit(models, ',', absl::SkipEmpty());
  if (f->quick) {
    Flags q;
    SetQuick(&q);
    if (!flags.Seen("models")) f->models = q.models;
    if (!flags.Seen("prefill")) f->prefill = q.prefill;
    if (!flags.Seen("batches")) f->batches = q.batches;
    if (!flags.Seen("context")) f->context = q.context;
    if (!flags.Seen("steps")) f->steps = q.steps;
    if (!flags.Seen("scd-tokens")) f->scd_tokens = q.scd_tokens;
    if (!flags.Seen("sekv-contexts")) f->sekv_contexts = q.sekv_contexts;
    if (!flags.Seen("sekv-model-contexts")) f->sekv_model_contexts = q.sekv_model_contexts;
    if (!flags.Seen("sekv-batch-context")) f->sekv_batch_context = q.sekv_batch_context;
    if (!flags.Seen("sekv-batches")) f->sekv_batches = q.sekv_batches;
  }
  for (const std::string& m : f->models) {
    if (!ModelShape(m).has_value()) {
      return flags.UsageError(
          absl::StrCat("--models: unknown model \"", m, "\" (mistral-7b, llama3-8b, or tiny)"));
    }
  }
  if (f->scd_tokens < 1) return flags.UsageError("--scd-tokens must be positive");
  for (const std::vector<int>* list : {&f->sekv_contexts, &f->sekv_model_contexts}) {
    for (int n : *list) {
      if (n < 1024) {
        return flags.UsageError(absl::StrCat("SEKV contexts must be at least 1024 (got ", n, ")"));
      }
    }
  }
  if (f->sekv_batch_context < 1024) {
    return flags.UsageError("--sekv-batch-context must be at least 1024");
  }
  return std::nullopt;
}

// Longest sequence any part runs on the backend (the model's max_position_embeddings is raised
// to it: Llama-3-8B's 8192, so that the 16K prefill runs; nothing else depends on it).
int MaxTokens(const Flags& f) {
  int max_tokens = f.context + f.steps + 4;
  for (int t : f.prefill) max_tokens = std::max(max_tokens, t);
  if (!f.skip_scd) max_tokens = std::max(max_tokens, f.scd_tokens);
  return max_tokens;
}

// A part's stream, timer and cuBLAS handle (bench_support.h); exits on failure.
cuda_bench::Rig NewRig(bool with_gemm) {
  absl::StatusOr<cuda_bench::Rig> rig = cuda_bench::MakeRig(with_gemm);
  Check(rig.status(), "stream");
  return std::move(*rig);
}

// BestMsPerCall (bench_support.h); exits on failure.
template <typename Op>
float BestMs(const cuda_bench::Rig& rig, int calls, Op op) {
  absl::StatusOr<float> ms = cuda_bench::BestMsPerCall(rig, calls, op);
  Check(ms.status(), "timed call");
  return *ms;
}

// Best cuBLAS BF16 GEMM TFLOP/s over shapes typical of prefill (and one square).
nlohmann::json MeasureGemmPeak(bool quick) {
  std::printf("[gemm] cuBLAS BF16 GEMM (F32 accumulate and output), best of 5 after warm-up\n");
  const cuda_bench::Rig rig = NewRig(/*with_gemm=*/true);
  struct Shape {
    int m, n, k;
  };
  nlohmann::json shapes = nlohmann::json::array();
  double best = 0;
  const std::vector<Shape> all =
      quick
          ? std::vector<Shape>{{256, 256, 256}, {128, 384, 256}}
          : std::vector<Shape>{
                {8192, 8192, 8192}, {4096, 28672, 4096}, {4096, 4096, 14336}, {16384, 6144, 4096}};
  for (const Shape& s : all) {
    auto x = cuda::DeviceBuffer::Allocate(size_t{2} * s.m * s.k, "gemm x");
    auto w = cuda::DeviceBuffer::Allocate(size_t{2} * s.n * s.k, "gemm w");
    auto y = cuda::DeviceBuffer::Allocate(size_t{4} * s.m * s.n, "gemm y");
    Check(x.status(), "alloc");
    Check(w.status(), "alloc");
    Check(y.status(), "alloc");
    const cuda::StreamHandle h = rig.handle();
    Check(cuda::FillRandomBf16(x->as<cuda::Bf16>(), int64_t{s.m} * s.k, 1, 1.0f, h), "fill");
    Check(cuda::FillRandomBf16(w->as<cuda::Bf16>(), int64_t{s.n} * s.k, 2, 0.02f, h), "fill");
    const float best_ms = BestMs(rig, 1, [&](int) {
      return rig.gemm->Linear(x->as<cuda::Bf16>(), w->as<cuda::Bf16>(), y->as<float>(), s.m, s.n,
                              s.k);
    });
    const double tflops = 2.0 * s.m * s.n * s.k / (best_ms * 1e-3) / 1e12;
    best = std::max(best, tflops);
    std::printf("  M=%-6d N=%-6d K=%-6d %8.3f ms  %7.1f TFLOP/s\n", s.m, s.n, s.k, best_ms, tflops);
    shapes.push_back({{"m", s.m}, {"n", s.n}, {"k", s.k}, {"ms", best_ms}, {"tflops", tflops}});
  }
  return {{"peak_tflops", best}, {"shapes", shapes}};
}

nlohmann::json MeasureCopy(bool quick) {
  const size_t bytes = quick ? size_t{16} << 20 : size_t{2} << 30;
  std::printf("[copy] device-to-device cudaMemcpy of %.1f GiB, best of 5 after warm-up\n",
              bytes / 1073741824.0);
  const cuda_bench::Rig rig = NewRig(/*with_gemm=*/false);
  auto a = cuda::DeviceBuffer::Allocate(bytes, "copy src");
  auto b = cuda::DeviceBuffer::Allocate(bytes, "copy dst");
  Check(a.status(), "alloc");
  Check(b.status(), "alloc");
  const cuda::StreamHandle h = rig.handle();
  Check(cuda::SetDeviceBytes(a->data(), 1, bytes, h), "memset");
  const float best_ms =
      BestMs(rig, 1, [&](int) { return cuda::CopyOnDevice(b->data(), a->data(), bytes, h); });
  const double gbps = 2.0 * bytes / (best_ms * 1e-3) / 1e9;
  std::printf("  %.3f ms  %.0f GB/s (read + write)\n", best_ms, gbps);
  return {{"bytes", bytes}, {"ms", best_ms}, {"gbps", gbps}};
}

std::vector<int32_t> Tokens(int count, int vocab, int salt) {
  std::vector<int32_t> ids(count);
  for (int i = 0; i < count; ++i) {
    ids[i] = static_cast<int32_t>((int64_t{i} * 7919 + int64_t{salt} * 104729 + 1) % vocab);
  }
  return ids;
}

// Time to first token of a `tokens`-token prompt: one untimed run (it grows the workspaces),
// then the timed one. Its last-position logits into *logits when given.
absl::StatusOr<double> TryPrefillSeconds(Backend& backend, const ModelConfig& c, int tokens,
                                         std::vector<float>* logits = nullptr) {
  const std::vector<int32_t> ids = Tokens(tokens, c.vocab_size, tokens);
  double best = 1e30;
  for (int rep = 0; rep < 2; ++rep) {
    auto seq = backend.NewSequence(tokens);
    if (!seq.ok()) return seq.status();
    PrefillResult r;
    const auto t0 = Clock::now();
    if (absl::Status s = backend.Prefill(**seq, ids, PrefillOptions{}, &r); !s.ok()) return s;
    const double s = Seconds(t0, Clock::now());
    if (rep > 0) best = std::min(best, s);
    if (logits != nullptr) *logits = std::move(r.logits);
  }
  return best;
}

double PrefillSeconds(Backend& backend, const ModelConfig& c, int tokens,
                      std::vector<float>* logits = nullptr) {
  const absl::StatusOr<double> seconds = TryPrefillSeconds(backend, c, tokens, logits);
  Check(seconds.status(), "prefill");
  return *seconds;
}

// How far logits `b` are from `a`: the largest difference over the largest |a|, and whether
// both pick the same greedy token.
nlohmann::json CompareLogits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.empty() || a.size() != b.size()) return {{"error", "logits of different sizes"}};
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
  }
  const bool same = std::max_element(a.begin(), a.end()) - a.begin() ==
                    std::max_element(b.begin(), b.end()) - b.begin();
  return {{"max_abs_diff", diff},
          {"relative_diff", scale > 0 ? diff / scale : diff},
          {"same_greedy_token", same}};
}

// The same prefill with the mma.sync attention kernel (kTensorCoreMma), which kAuto does not
// take until a device run has shown its parity and speed: its TTFT against the kAuto run's
// (`auto_seconds`) and its logits against `auto_logits`, so that one run says whether it
// brings prefill to the target. Restores the backend's kernel choices.
nlohmann::json PrefillWithMma(Backend& backend, const ModelConfig& c, int tokens,
                              double auto_seconds, const std::vector<float>& auto_logits,
                              double gemm_peak) {
  const absl::StatusOr<cuda::KernelChoices> before = cuda::KernelChoicesOf(backend);
  Check(before.status(), "kernel choices");
  cuda::KernelChoices mma = *before;
  mma.prefill_attention = cuda::AttentionImpl::kTensorCoreMma;
  if (absl::Status s = cuda::SetKernelChoices(backend, mma); !s.ok()) {
    return {{"error", std::string(s.message())}};
  }
  // A kernel no device has run may fail: that is a figure too, and the run goes on.
  std::vector<float> logits;
  const absl::StatusOr<double> timed = TryPrefillSeconds(backend, c, tokens, &logits);
  Check(cuda::SetKernelChoices(backend, *before), "kernel choices restored");
  if (!timed.ok()) return {{"error", "prefill: " + timed.status().ToString()}};
  const double seconds = *timed;
  const double tflops = bench::PrefillFlops(c, 0, tokens, /*logits_rows=*/1) / seconds / 1e12;
  return {{"ttft_ms", seconds * 1e3},
          {"tflops", tflops},
          {"vs_gemm_peak", tflops / gemm_peak},
          {"speedup", auto_seconds / seconds},
          {"logits", CompareLogits(auto_logits, logits)}};
}

// One prefill length's row: its TTFT and rate, and again with the mma.sync attention. The
// logits of the first run are what the second is compared with.
nlohmann::json PrefillRow(Backend& backend, const ModelConfig& c, const Flags& f, int t,
                          double gemm_peak, double* seconds) {
  std::vector<float> logits;
  const double best = PrefillSeconds(backend, c, t, &logits);
  *seconds = best;
  const double flops = bench::PrefillFlops(c, 0, t, /*logits_rows=*/1);
  const double tflops = flops / best / 1e12;
  std::printf(
      "  prefill %6d tokens: TTFT %9.2f ms  %7.1f TFLOP/s  %.2f of GEMM peak "
      "(attention %.0f%% of FLOPs)\n",
      t, best * 1e3, tflops, tflops / gemm_peak, 100.0 * bench::AttentionFlops(c, 0, t) / flops);
  const nlohmann::json mma = f.skip_mma ? nlohmann::json{{"error", "skipped (--skip-mma)"}}
                                        : PrefillWithMma(backend, c, t, best, logits, gemm_peak);
  if (mma.contains("error")) {
    std::printf("  prefill %6d tokens, mma.sync attention: %s\n", t,
                mma["error"].get<std::string>().c_str());
  } else {
    std::printf(
        "  prefill %6d tokens, mma.sync attention: TTFT %9.2f ms  %7.1f TFLOP/s  %.2f of GEMM "
        "peak (%.2fx; %s)\n",
        t, mma["ttft_ms"].get<double>(), mma["tflops"].get<double>(),
        mma["vs_gemm_peak"].get<double>(), mma["speedup"].get<double>(),
        cuda_bench::LogitsAgreement(mma["logits"]).c_str());
  }
  return {{"tokens", t},      {"ttft_ms", best * 1e3},
          {"tflops", tflops}, {"vs_gemm_peak", tflops / gemm_peak},
          {"flops", flops},   {"mma", mma}};
}

// `b` sequences of the backend, each prefilled with f.context tokens and room for the timed
// steps of every decode mode.
std::vector<std::unique_ptr<Sequence>> DecodeSequences(Backend& backend, const ModelConfig& c,
                                                       const Flags& f, int b) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (int i = 0; i < b; ++i) {
    auto seq = backend.NewSequence(f.context + 3 * (f.steps + 2) + 4);
    Check(seq.status(), "sequence");
    PrefillResult r;
    Check(backend.Prefill(**seq, Tokens(f.context, c.vocab_size, i), PrefillOptions{}, &r),
          "decode context prefill");
    seqs.push_back(std::move(seq).value());
  }
  return seqs;
}

// The batch's decode steps in one mode: "eager" (graphs off), "graphs" (the backend's default)
// or "graphs_cublas" (graphed, with cuBLAS projections instead of the weight stream; the
// caller restores `kernels` after it). Two warm-up steps (recording the mode's graph), then
// f.steps timed ones.
nlohmann::json TimeDecodeMode(Backend& backend, const ModelConfig& c, const Flags& f,
                              const std::vector<Sequence*>& batch, const std::string& mode,
                              const cuda::KernelChoices& kernels, double weight_bytes,
                              double copy_gbps) {
  const int b = static_cast<int>(batch.size());
  const bool graphs = mode != "eager";
  const bool cublas = mode == "graphs_cublas";
  cuda::DecodeGraphOptions options;
  options.enabled = graphs;
  options.max_batch = std::max(b, options.max_batch);
  Check(cuda::SetDecodeGraphs(backend, options), "decode graph options");
  if (cublas) {
    cuda::KernelChoices choices = kernels;
    choices.small_batch_max_rows = 0;
    Check(cuda::SetKernelChoices(backend, choices), "kernel choices");
  }
  // A serving step: greedy sampling on the device, only the B token ids come back (the
  // full [B][vocab] logits copy of Decode would be timed otherwise), each fed to the next.
  std::vector<int32_t> tokens(b, 1), next;
  const std::vector<SampleDraw> draws(b);
  const int context = batch[0]->length();
  const DecodeGraphStats before = backend.decode_graph_stats();
  for (int w = 0; w < 2; ++w) {
    Check(backend.DecodeSample(batch, tokens, draws, &next), "decode warm-up");
    tokens.swap(next);
  }
  const auto t0 = Clock::now();
  for (int s = 0; s < f.steps; ++s) {
    Check(backend.DecodeSample(batch, tokens, draws, &next), "decode");
    tokens.swap(next);
  }
  const double step = Seconds(t0, Clock::now()) / f.steps;
  const double avg_ctx = context + 2 + f.steps / 2.0;
  const double kv_bytes = static_cast<double>(b) * avg_ctx * c.num_layers * 2.0 * c.kv_dim() * 2.0;
  const double gbps = (weight_bytes + kv_bytes) / step / 1e9;
  const DecodeGraphStats stats = backend.decode_graph_stats();
  std::printf(
      "  decode batch %3d (context %d, %s): %8.3f ms/step  %9.1f tok/s  %6.0f GB/s  "
      "%.2f of copy bandwidth\n",
      b, context,
      cublas   ? "CUDA graphs, cuBLAS projections"
      : graphs ? "CUDA graphs"
               : "eager",
      step * 1e3, b / step, gbps, gbps / copy_gbps);
  if (graphs && !cublas && stats.cached > 0) {
    std::printf(
        "  decode batch %3d: %d CUDA graph(s) cached, %zu nodes in the last, %.2f MiB "
        "of device memory\n",
        b, stats.cached, stats.last_nodes, stats.device_bytes / 1048576.0);
  }
  if (graphs && stats.capture_failures > 0) {
    std::printf("  decode batch %3d: CUDA graph capture failed, ran eagerly: %s\n", b,
                stats.last_failure.c_str());
  }
  return {{"step_ms", step * 1e3},
          {"hbm_gbps", gbps},
          {"kv_gb_per_step", kv_bytes / 1e9},
          {"vs_copy", gbps / copy_gbps},
          {"graph_captures", stats.captures - before.captures},
          {"graph_replays", stats.replays - before.replays},
          {"graph_nodes", stats.last_nodes},
          {"graph_device_bytes", stats.device_bytes},
          {"graph_failure", stats.last_failure}};
}

// A decode batch's row: the graphed figures, beside the eager ones and, where it ran, the
// cuBLAS projections'.
nlohmann::json DecodeRow(int b, const Flags& f, const nlohmann::json& modes, bool cublas_mode) {
  const nlohmann::json& g = modes["graphs"];
  const double step_ms = g["step_ms"].get<double>();
  nlohmann::json row = {{"batch", b},
                        {"context", f.context},
                        {"step_ms", step_ms},
                        {"tokens_per_s", b / (step_ms / 1e3)},
                        {"hbm_gbps", g["hbm_gbps"]},
                        {"kv_gb_per_step", g["kv_gb_per_step"]},
                        {"vs_copy", g["vs_copy"]},
                        {"eager_step_ms", modes["eager"]["step_ms"]},
                        {"eager_vs_copy", modes["eager"]["vs_copy"]},
                        {"graph_speedup", modes["eager"]["step_ms"].get<double>() / step_ms},
                        {"graph_device_bytes", g["graph_device_bytes"]},
                        {"modes", modes}};
  if (cublas_mode) {
    const nlohmann::json& x = modes["graphs_cublas"];
    row["cublas_step_ms"] = x["step_ms"];
    row["cublas_vs_copy"] = x["vs_copy"];
    row["small_batch_speedup"] = x["step_ms"].get<double>() / step_ms;
  }
  return row;
}

// Decode: B sequences prefilled with `context` tokens, then `steps` timed batched steps,
// kernel by kernel (graphs off) and then as CUDA graphs (the backend's default), on the
// same sequences: the graphed figures are the backend's, the eager ones show what the
// graphs save. Each mode's two warm-up steps record its graph. Where the batch is small
// enough for the weight-stream projections (LinearSmallBatch), a third mode runs the graphed
// steps with cuBLAS projections instead, as the first device run did.
nlohmann::json BenchDecode(Backend& backend, const ModelConfig& c, const Flags& f,
                           double weight_bytes, double copy_gbps) {
  const absl::StatusOr<cuda::KernelChoices> kernels = cuda::KernelChoicesOf(backend);
  Check(kernels.status(), "kernel choices");
  nlohmann::json decode = nlohmann::json::array();
  for (int b : f.batches) {
    const bool cublas_mode = b <= kernels->small_batch_max_rows;
    const std::vector<std::unique_ptr<Sequence>> seqs = DecodeSequences(backend, c, f, b);
    std::vector<Sequence*> batch;
    for (const auto& seq : seqs) batch.push_back(seq.get());
    nlohmann::json modes = nlohmann::json::object();
    for (const char* mode : {"eager", "graphs", "graphs_cublas"}) {
      if (mode == std::string_view("graphs_cublas") && !cublas_mode) continue;
      modes[mode] = TimeDecodeMode(backend, c, f, batch, mode, *kernels, weight_bytes, copy_gbps);
    }
    if (cublas_mode) Check(cuda::SetKernelChoices(backend, *kernels), "kernel choices restored");
    decode.push_back(DecodeRow(b, f, modes, cublas_mode));
  }
  return decode;
}

// Prefill and decode on the synthetic backend. Also sets *scd_prefill_ms to the TTFT at
// f.scd_tokens (from the prefill table when it ran that length, else measured here), the
// baseline of the SCD rebuild.
nlohmann::json BenchModel(const ModelConfig& c, const Flags& f, double gemm_peak, double copy_gbps,
                          double* scd_prefill_ms) {
  const std::string& name = c.name;
  std::printf(
      "[%s] random BF16 weights on the device (d %d, %d layers, %d/%d heads, ffn %d, "
      "vocab %d, window %d)\n",
      name.c_str(), c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.intermediate_size,
      c.vocab_size, c.sliding_window);
  auto made = cuda::CreateSyntheticCudaBackend(c, 1234, 0.02f);
  Check(made.status(), "backend for " + name);
  Backend& backend = **made;
  const double weight_bytes = static_cast<double>(cuda::CudaDecodeBytesStreamed(backend));
  const std::string described = backend.kernel_description();
  std::printf("[%s] kernels: %s\n", name.c_str(), described.c_str());
  nlohmann::json out = {{"model", name}, {"weight_gb", weight_bytes / 1e9}, {"kernels", described}};

  nlohmann::json prefill = nlohmann::json::array();
  *scd_prefill_ms = 0;
  for (int t : f.prefill) {
    double seconds = 0;
    prefill.push_back(PrefillRow(backend, c, f, t, gemm_peak, &seconds));
    if (t == f.scd_tokens) *scd_prefill_ms = seconds * 1e3;
  }
  out["prefill"] = prefill;
  if (!f.skip_scd && *scd_prefill_ms == 0) {
    *scd_prefill_ms = PrefillSeconds(backend, c, f.scd_tokens) * 1e3;
    std::printf("  prefill %6d tokens (SCD baseline): TTFT %9.2f ms\n", f.scd_tokens,
                *scd_prefill_ms);
  }
  out["decode"] = BenchDecode(backend, c, f, weight_bytes, copy_gbps);

  // Where the time goes (op_profile_bench.h): the prefill the summary reports and batch-1
  // decode, operation by operation. A failure is kept as the part's figure.
  if (const int tokens = cuda_bench::SummaryPrefillTokens(f.prefill); tokens > 0) {
    absl::StatusOr<nlohmann::json> profile =
        cuda_bench::MeasureOpProfile(backend, c, tokens, f.context, f.steps, gemm_peak, copy_gbps);
    if (!profile.ok()) std::printf("  profile FAILED: %s\n", profile.status().ToString().c_str());
    out["op_profile"] =
        profile.ok() ? *profile : nlohmann::json{{"error", profile.status().ToString()}};
  }
  return out;
}

nlohmann::json ErrorJson(const absl::Status& status) { return {{"error", status.ToString()}}; }

// A whole batch-1 decode step at the SEKV context, derived from two figures of this run: the
// measured batch-1 step at --context (weights, norms, GEMMs, sampling, and attention over
// that short context) plus the attention of all layers at the long context, full KV or SEKV.
// The short context's own attention is left in both, so the ratio is slightly understated.
void AddWholeStep(const nlohmann::json& model, nlohmann::json* x) {
  for (const auto& d : model.value("decode", nlohmann::json::array())) {
    if (d["batch"] != 1) continue;
    const double rest = d["step_ms"].get<double>();
    const double full = rest + (*x)["full_ms"].get<double>();
    const double sekv = rest + (*x)["sekv_ms"].get<double>();
    (*x)["whole_step"] = {{"base_step_ms", rest}, {"base_context", d["context"]},
                          {"full_ms", full},      {"sekv_ms", sekv},
                          {"ratio", full / sekv}, {"derived", true}};
  }
}

// The ceilings (GEMM peak, copy) and the kernels alone against their alternatives
// (kernel_bench.h): which ones the backend takes.
void MeasureCeilingsAndKernels(const Flags& f, nlohmann::json* r) {
  (*r)["gemm"] = MeasureGemmPeak(f.quick);
  (*r)["copy"] = MeasureCopy(f.quick);
  if (f.quick) (*r)["quick"] = "toy sizes: a check of the tool, not figures";
  const double peak = (*r)["gemm"]["peak_tflops"], copy = (*r)["copy"]["gbps"];
  auto kernel_part = [&](const char* key, const absl::StatusOr<nlohmann::json>& x) {
    Check(x.status(), key);
    (*r)[key] = *x;
  };
  kernel_part("small_batch", cuda_bench::MeasureSmallBatch(f.quick, copy));
  if (f.skip_mma) {
    std::printf("[attention] prefill attention alone: skipped (--skip-mma)\n");
  } else {
    kernel_part("prefill_attention", cuda_bench::MeasurePrefillAttention(f.quick, peak));
  }
  kernel_part("decode_attention", cuda_bench::MeasureDecodeAttention(f.quick, copy));
  if (!f.skip_sekv_model && !f.sekv_model_contexts.empty()) {
    kernel_part("sekv_zoom", cuda_bench::MeasureSekvZoom(f.quick, f.sekv_model_contexts.front()));
  }
}

// The SCD and SEKV parts below report an error in the results instead of exiting, so that the
// figures before them are kept; each returns the number of its failures, for the exit code.

// The SCD rebuild against the prefill TTFT at f.scd_tokens.
int AddScdRebuild(const ModelConfig& c, const Flags& f, double scd_prefill_ms,
                  nlohmann::json* entry) {
  absl::StatusOr<nlohmann::json> scd =
      cuda_bench::MeasureScdRebuild(c, f.scd_tokens, scd_prefill_ms);
  if (!scd.ok()) std::printf("  scd rebuild FAILED: %s\n", scd.status().ToString().c_str());
  (*entry)["scd_rebuild"] = scd.ok() ? *scd : ErrorJson(scd.status());
  return scd.ok() ? 0 : 1;
}

// The SEKV step's attention at each --sekv-contexts length, saved after each.
int AddSekvSteps(const ModelConfig& c, const Flags& f, nlohmann::json* entry,
                 const std::function<void()>& save) {
  int failures = 0;
  (*entry)["sekv"] = nlohmann::json::array();
  for (int context : f.sekv_contexts) {
    absl::StatusOr<nlohmann::json> sekv = cuda_bench::MeasureSekvStep(c, context);
    if (!sekv.ok()) {
      std::printf("  sekv context %d FAILED: %s\n", context, sekv.status().ToString().c_str());
      ++failures;
    }
    nlohmann::json x = sekv.ok() ? *sekv : ErrorJson(sekv.status());
    x["context"] = context;
    if (sekv.ok()) AddWholeStep(*entry, &x);
    (*entry)["sekv"].push_back(x);
    save();
  }
  return failures;
}

// The whole SEKV step through GpuSekv at each --sekv-model-contexts length, saved after each.
int AddSekvModelSteps(const ModelConfig& c, const Flags& f, nlohmann::json* entry,
                      const std::function<void()>& save) {
  int failures = 0;
  (*entry)["sekv_model"] = nlohmann::json::array();
  for (int context : f.sekv_model_contexts) {
    absl::StatusOr<nlohmann::json> x = cuda_bench::MeasureSekvModelStep(c, context);
    if (!x.ok()) {
      std::printf("  sekv model context %d FAILED: %s\n", context, x.status().ToString().c_str());
      ++failures;
    }
    nlohmann::json y = x.ok() ? *x : ErrorJson(x.status());
    y["context"] = context;
    (*entry)["sekv_model"].push_back(y);
    save();
  }
  return failures;
}

// Concurrent SEKV requests of --sekv-batch-context tokens, batched and beside plain ones.
int AddSekvBatch(const ModelConfig& c, const Flags& f, nlohmann::json* entry) {
  absl::StatusOr<nlohmann::json> x =
      cuda_bench::MeasureSekvBatchSteps(c, f.sekv_batch_context, f.sekv_batches);
  if (!x.ok()) std::printf("  sekv batch FAILED: %s\n", x.status().ToString().c_str());
  (*entry)["sekv_batch"] = x.ok() ? *x : ErrorJson(x.status());
  (*entry)["sekv_batch_context"] = f.sekv_batch_context;
  return x.ok() ? 0 : 1;
}

// Every part of one model, its entry appended to r["models"] and the results saved after each
// part; the number of parts that failed.
int BenchModelParts(const std::string& name, const Flags& f, nlohmann::json* r,
                    const std::function<void()>& save) {
  const double peak = (*r)["gemm"]["peak_tflops"], copy = (*r)["copy"]["gbps"];
  ModelConfig c = *ModelShape(name);  // checked by ParseFlags
  c.max_position_embeddings = std::max(c.max_position_embeddings, MaxTokens(f));
  double scd_prefill_ms = 0;
  (*r)["models"].push_back(BenchModel(c, f, peak, copy, &scd_prefill_ms));
  nlohmann::json& entry = (*r)["models"].back();
  int failures = 0;
  if (entry.contains("op_profile") && entry["op_profile"].contains("error")) ++failures;
  save();
  if (!f.skip_scd) {
    failures += AddScdRebuild(c, f, scd_prefill_ms, &entry);
    save();
  }
  if (!f.skip_sekv) failures += AddSekvSteps(c, f, &entry, save);
  if (!f.skip_sekv_model && name == f.models.front()) {
    failures += AddSekvModelSteps(c, f, &entry, save);
  }
  // Last: a run cut short by its time limit loses this part before any of the others.
  if (!f.skip_sekv_batch && name == f.models.back()) {
    failures += AddSekvBatch(c, f, &entry);
    save();
  }
  return failures;
}

int Main(int argc, char** argv) {
  // Line-buffered even into a log file, so that a run cut short by a timeout keeps its steps.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Flags f;
  if (std::optional<int> exit = ParseFlags(argc, argv, &f)) return *exit;
  const std::string command = cli::QuotedCommandLine(argc, argv);
  std::printf("command: %s\n", command.c_str());
  if (const absl::Status usable = cuda::DeviceStatus(); !usable.ok()) {
    Die(std::string(usable.message()));
  }
  auto device = cuda::CurrentDevice();
  Check(device.status(), "device");
  const std::string description = cuda::DeviceDescription(*device);
  std::printf("device: %s\n", description.c_str());

  nlohmann::json r = {{"command", command}, {"device", description}};
  std::filesystem::create_directories(f.out);
  const std::string json_path = (std::filesystem::path(f.out) / "results.json").string();
  const std::string md_path = (std::filesystem::path(f.out) / "results.md").string();
  const std::function<void()> save = [&] {
    std::ofstream(json_path) << r.dump(2) << "\n";
    std::ofstream(md_path) << cuda_bench::ResultsMarkdown(r);
  };
  MeasureCeilingsAndKernels(f, &r);
  r["models"] = nlohmann::json::array();
  int failures = 0;
  for (const std::string& name : f.models) failures += BenchModelParts(name, f, &r, save);

  std::printf("\n%s\nwrote %s and %s\n", cuda_bench::ResultsMarkdown(r).c_str(), json_path.c_str(),
              md_path.c_str());
  cuda_bench::PrintSummary(r);
  if (failures > 0) {
    std::fprintf(stderr, "scd-gpu-bench: %d part(s) failed (see above and results.json)\n",
                 failures);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace scd

int main(int argc, char** argv) { return scd::Main(argc, argv); }
