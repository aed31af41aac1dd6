// scd-gpu-bench: GPU roofline and runtime benchmark of the CUDA backend (issue 7), with random
// BF16 weights drawn on the device from the Mistral-7B and Llama-3-8B configs (no host copy).
// Every figure is measured in the same run as its ceiling:
//   - compute ceiling: the best cuBLAS BF16 GEMM TFLOP/s over a few large shapes (2·M·N·K
//     flops per GEMM); prefill is reported as achieved TFLOP/s (the model-cost FLOPs of
//     common/bench/model_cost.h, the same count the CPU benchmark uses:
//     2·T·L·P_layer + 2·P_out + L·4·q_dim·Σ_t min(t+1, window)) divided by the time to first
//     token, and as a fraction of that ceiling;
//   - memory ceiling: device-to-device cudaMemcpy GB/s, counting 2·bytes (read + write, the
//     STREAM "Copy" convention); decode is reported as tokens/s and as achieved HBM GB/s
//     (weights streamed once per step + the KV cache read) over that ceiling.
// Writes results.json and results.md into --out, and prints the command line, each step, and
// the ratios. Usage:
//   scd-gpu-bench --out DIR [--models mistral-7b,llama3-8b] [--prefill 1024,4096,16384]
//                 [--batches 1,32] [--context 512] [--steps 16]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/bench/model_cost.h"
#include "common/model/config.h"
#include "common/runtime/backend.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/synthetic_backend.h"

namespace scd {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string out = ".";
  std::vector<std::string> models = {"mistral-7b", "llama3-8b"};
  std::vector<int> prefill = {1024, 4096, 16384};
  std::vector<int> batches = {1, 32};
  int context = 512;
  int steps = 16;
};

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "scd-gpu-bench: %s\n", message.c_str());
  std::exit(1);
}

void Check(const absl::Status& status, const std::string& what) {
  if (!status.ok()) Die(what + ": " + status.ToString());
}

std::vector<int> ParseInts(const std::string& text) {
  std::vector<int> values;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    values.push_back(std::stoi(std::string(part)));
  }
  return values;
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Die("missing value for " + arg);
      return argv[++i];
    };
    if (arg == "--out") {
      f.out = value();
    } else if (arg == "--models") {
      f.models.clear();
      for (absl::string_view m : absl::StrSplit(value(), ',', absl::SkipEmpty())) {
        f.models.emplace_back(m);
      }
    } else if (arg == "--prefill") {
      f.prefill = ParseInts(value());
    } else if (arg == "--batches") {
      f.batches = ParseInts(value());
    } else if (arg == "--context") {
      f.context = std::stoi(value());
    } else if (arg == "--steps") {
      f.steps = std::stoi(value());
    } else {
      Die("unknown flag " + arg + " (see the usage in kernels/cuda/bench/gpu_bench_main.cc)");
    }
  }
  return f;
}

// Public HF configs. Llama-3-8B's max_position_embeddings (8192) is raised so that the 16K
// prefill runs; nothing else depends on it.
ModelConfig ConfigFor(const std::string& name, int max_tokens) {
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
  } else if (name == "llama3-8b") {
    c.arch = Architecture::kLlama;
    c.vocab_size = 128256;
    c.max_position_embeddings = 8192;
    c.rope_theta = 500000.0f;
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001};
  } else {
    Die("unknown model " + name + " (mistral-7b or llama3-8b)");
  }
  c.max_position_embeddings = std::max(c.max_position_embeddings, max_tokens);
  return c;
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Best cuBLAS BF16 GEMM TFLOP/s over shapes typical of prefill (and one square).
nlohmann::json MeasureGemmPeak() {
  std::printf("[gemm] cuBLAS BF16 GEMM (F32 accumulate and output), best of 5 after warm-up\n");
  auto stream = cuda::Stream::Create();
  Check(stream.status(), "stream");
  auto gemm = cuda::CublasGemm::Create((*stream)->handle());
  Check(gemm.status(), "cublas");
  auto timer = cuda::StreamTimer::Create();
  Check(timer.status(), "timer");
  struct Shape {
    int m, n, k;
  };
  nlohmann::json shapes = nlohmann::json::array();
  double best = 0;
  for (const Shape& s : {Shape{8192, 8192, 8192}, Shape{4096, 28672, 4096},
                         Shape{4096, 4096, 14336}, Shape{16384, 6144, 4096}}) {
    auto x = cuda::DeviceBuffer::Allocate(size_t{2} * s.m * s.k, "gemm x");
    auto w = cuda::DeviceBuffer::Allocate(size_t{2} * s.n * s.k, "gemm w");
    auto y = cuda::DeviceBuffer::Allocate(size_t{4} * s.m * s.n, "gemm y");
    Check(x.status(), "alloc");
    Check(w.status(), "alloc");
    Check(y.status(), "alloc");
    const cuda::StreamHandle h = (*stream)->handle();
    Check(cuda::FillRandomBf16(x->as<cuda::Bf16>(), int64_t{s.m} * s.k, 1, 1.0f, h), "fill");
    Check(cuda::FillRandomBf16(w->as<cuda::Bf16>(), int64_t{s.n} * s.k, 2, 0.02f, h), "fill");
    float best_ms = 1e30f;
    for (int rep = 0; rep < 6; ++rep) {
      Check((*timer)->Start(h), "timer");
      Check(
          (*gemm)->Linear(x->as<cuda::Bf16>(), w->as<cuda::Bf16>(), y->as<float>(), s.m, s.n, s.k),
          "gemm");
      auto ms = (*timer)->StopMs(h);
      Check(ms.status(), "timer");
      if (rep > 0) best_ms = std::min(best_ms, *ms);
    }
    const double tflops = 2.0 * s.m * s.n * s.k / (best_ms * 1e-3) / 1e12;
    best = std::max(best, tflops);
    std::printf("  M=%-6d N=%-6d K=%-6d %8.3f ms  %7.1f TFLOP/s\n", s.m, s.n, s.k, best_ms, tflops);
    shapes.push_back({{"m", s.m}, {"n", s.n}, {"k", s.k}, {"ms", best_ms}, {"tflops", tflops}});
  }
  return {{"peak_tflops", best}, {"shapes", shapes}};
}

nlohmann::json MeasureCopy() {
  const size_t bytes = size_t{2} << 30;
  std::printf("[copy] device-to-device cudaMemcpy of %.1f GiB, best of 5 after warm-up\n",
              bytes / 1073741824.0);
  auto stream = cuda::Stream::Create();
  Check(stream.status(), "stream");
  auto a = cuda::DeviceBuffer::Allocate(bytes, "copy src");
  auto b = cuda::DeviceBuffer::Allocate(bytes, "copy dst");
  Check(a.status(), "alloc");
  Check(b.status(), "alloc");
  auto timer = cuda::StreamTimer::Create();
  Check(timer.status(), "timer");
  const cuda::StreamHandle h = (*stream)->handle();
  Check(cuda::SetDeviceBytes(a->data(), 1, bytes, h), "memset");
  float best_ms = 1e30f;
  for (int rep = 0; rep < 6; ++rep) {
    Check((*timer)->Start(h), "timer");
    Check(cuda::CopyOnDevice(b->data(), a->data(), bytes, h), "copy");
    auto ms = (*timer)->StopMs(h);
    Check(ms.status(), "timer");
    if (rep > 0) best_ms = std::min(best_ms, *ms);
  }
  const double gbps = 2.0 * bytes / (best_ms * 1e-3) / 1e9;
  std::printf("  %.3f ms  %.0f GB/s (read + write)\n", best_ms, gbps);
  return {{"bytes", bytes}, {"ms", best_ms}, {"gbps", gbps}};
}

std::vector<int32_t> Tokens(int count, int vocab, int salt) {
  std::vector<int32_t> ids(count);
  for (int i = 0; i < count; ++i) ids[i] = (i * 7919 + salt * 104729 + 1) % vocab;
  return ids;
}

nlohmann::json BenchModel(const std::string& name, const Flags& f, double gemm_peak,
                          double copy_gbps) {
  int max_tokens = f.context + f.steps + 4;
  for (int t : f.prefill) max_tokens = std::max(max_tokens, t);
  const ModelConfig c = ConfigFor(name, max_tokens);
  std::printf(
      "[%s] random BF16 weights on the device (d %d, %d layers, %d/%d heads, ffn %d, "
      "vocab %d, window %d)\n",
      name.c_str(), c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.intermediate_size,
      c.vocab_size, c.sliding_window);
  auto made = cuda::CreateSyntheticCudaBackend(c, 1234, 0.02f);
  Check(made.status(), "backend for " + name);
  Backend& backend = **made;
  const double weight_bytes = static_cast<double>(cuda::CudaDecodeBytesStreamed(backend));
  nlohmann::json out = {{"model", name}, {"weight_gb", weight_bytes / 1e9}};

  // Prefill: one untimed run per length (it grows the workspaces), then the timed one.
  nlohmann::json prefill = nlohmann::json::array();
  for (int t : f.prefill) {
    const std::vector<int32_t> ids = Tokens(t, c.vocab_size, t);
    double best = 1e30;
    for (int rep = 0; rep < 2; ++rep) {
      auto seq = backend.NewSequence(t);
      Check(seq.status(), "sequence");
      PrefillResult r;
      const auto t0 = Clock::now();
      Check(backend.Prefill(**seq, ids, PrefillOptions{}, &r), "prefill");
      const double s = Seconds(t0, Clock::now());
      if (rep > 0) best = std::min(best, s);
    }
    const double flops = bench::PrefillFlops(c, 0, t, /*logits_rows=*/1);
    const double tflops = flops / best / 1e12;
    std::printf(
        "  prefill %6d tokens: TTFT %9.2f ms  %7.1f TFLOP/s  %.2f of GEMM peak "
        "(attention %.0f%% of FLOPs)\n",
        t, best * 1e3, tflops, tflops / gemm_peak, 100.0 * bench::AttentionFlops(c, 0, t) / flops);
    prefill.push_back({{"tokens", t},
                       {"ttft_ms", best * 1e3},
                       {"tflops", tflops},
                       {"vs_gemm_peak", tflops / gemm_peak},
                       {"flops", flops}});
  }
  out["prefill"] = prefill;

  // Decode: B sequences prefilled with `context` tokens, then `steps` timed batched steps.
  nlohmann::json decode = nlohmann::json::array();
  for (int b : f.batches) {
    std::vector<std::unique_ptr<Sequence>> seqs;
    std::vector<Sequence*> batch;
    for (int i = 0; i < b; ++i) {
      auto seq = backend.NewSequence(f.context + f.steps + 4);
      Check(seq.status(), "sequence");
      PrefillResult r;
      Check(backend.Prefill(**seq, Tokens(f.context, c.vocab_size, i), PrefillOptions{}, &r),
            "decode context prefill");
      batch.push_back(seq->get());
      seqs.push_back(std::move(seq).value());
    }
    std::vector<int32_t> tokens(b, 1);
    std::vector<float> logits;
    for (int w = 0; w < 2; ++w) Check(backend.Decode(batch, tokens, &logits), "decode warm-up");
    const auto t0 = Clock::now();
    for (int s = 0; s < f.steps; ++s) Check(backend.Decode(batch, tokens, &logits), "decode");
    const double step = Seconds(t0, Clock::now()) / f.steps;
    const double avg_ctx = f.context + 2 + f.steps / 2.0;
    const double kv_bytes =
        static_cast<double>(b) * avg_ctx * c.num_layers * 2.0 * c.kv_dim() * 2.0;
    const double gbps = (weight_bytes + kv_bytes) / step / 1e9;
    std::printf(
        "  decode batch %3d (context %d): %8.3f ms/step  %9.1f tok/s  %6.0f GB/s  "
        "%.2f of copy bandwidth\n",
        b, f.context, step * 1e3, b / step, gbps, gbps / copy_gbps);
    decode.push_back({{"batch", b},
                      {"context", f.context},
                      {"step_ms", step * 1e3},
                      {"tokens_per_s", b / step},
                      {"hbm_gbps", gbps},
                      {"kv_gb_per_step", kv_bytes / 1e9},
                      {"vs_copy", gbps / copy_gbps}});
  }
  out["decode"] = decode;
  return out;
}

std::string Markdown(const nlohmann::json& r) {
  std::ostringstream md;
  md << "# GPU benchmark (scd-gpu-bench)\n\n"
     << "Device: " << r["device"].get<std::string>() << "  \n"
     << "Command: `" << r["command"].get<std::string>() << "`  \n"
     << absl::StrFormat("cuBLAS BF16 GEMM peak: %.1f TFLOP/s; device-to-device copy: %.0f GB/s\n\n",
                        r["gemm"]["peak_tflops"].get<double>(), r["copy"]["gbps"].get<double>());
  md << "| model | prefill tokens | TTFT (ms) | TFLOP/s | vs GEMM peak |\n|---|---|---|---|---|\n";
  for (const auto& m : r["models"]) {
    for (const auto& p : m["prefill"]) {
      md << absl::StrFormat("| %s | %d | %.1f | %.1f | %.2f |\n", m["model"].get<std::string>(),
                            p["tokens"].get<int>(), p["ttft_ms"].get<double>(),
                            p["tflops"].get<double>(), p["vs_gemm_peak"].get<double>());
    }
  }
  md << "\n| model | decode batch | context | ms/step | tok/s | HBM GB/s | vs copy |\n"
     << "|---|---|---|---|---|---|---|\n";
  for (const auto& m : r["models"]) {
    for (const auto& d : m["decode"]) {
      md << absl::StrFormat(
          "| %s | %d | %d | %.3f | %.1f | %.0f | %.2f |\n", m["model"].get<std::string>(),
          d["batch"].get<int>(), d["context"].get<int>(), d["step_ms"].get<double>(),
          d["tokens_per_s"].get<double>(), d["hbm_gbps"].get<double>(), d["vs_copy"].get<double>());
    }
  }
  return md.str();
}

int Main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  std::printf("command: %s\n", command.c_str());
  if (cuda::DeviceCount() == 0) Die("no CUDA device is present");
  auto device = cuda::CurrentDevice();
  Check(device.status(), "device");
  const std::string description = cuda::DeviceDescription(*device);
  std::printf("device: %s\n", description.c_str());

  nlohmann::json r = {{"command", command}, {"device", description}};
  r["gemm"] = MeasureGemmPeak();
  r["copy"] = MeasureCopy();
  const double peak = r["gemm"]["peak_tflops"], copy = r["copy"]["gbps"];
  r["models"] = nlohmann::json::array();
  for (const std::string& m : f.models) r["models"].push_back(BenchModel(m, f, peak, copy));

  std::filesystem::create_directories(f.out);
  const std::string json_path = (std::filesystem::path(f.out) / "results.json").string();
  const std::string md_path = (std::filesystem::path(f.out) / "results.md").string();
  std::ofstream(json_path) << r.dump(2) << "\n";
  const std::string md = Markdown(r);
  std::ofstream(md_path) << md;
  std::printf("\n%s\nwrote %s and %s\n", md.c_str(), json_path.c_str(), md_path.c_str());
  for (const auto& m : r["models"]) {
    for (const auto& p : m["prefill"]) {
      if (p["tokens"] == 4096) {
        std::printf("%s prefill_4k_vs_gemm_peak=%.3f\n", m["model"].get<std::string>().c_str(),
                    p["vs_gemm_peak"].get<double>());
      }
    }
    for (const auto& d : m["decode"]) {
      std::printf("%s decode_b%d_vs_copy=%.3f\n", m["model"].get<std::string>().c_str(),
                  d["batch"].get<int>(), d["vs_copy"].get<double>());
    }
  }
  return 0;
}

}  // namespace
}  // namespace scd

int main(int argc, char** argv) { return scd::Main(argc, argv); }
