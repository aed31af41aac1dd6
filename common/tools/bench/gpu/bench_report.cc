// scd-gpu-bench's report (bench_report.h).
#include "common/tools/bench/gpu/bench_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "absl/strings/str_format.h"
#include "common/tools/bench/gpu/kernel_bench.h"
#include "common/tools/bench/gpu/op_profile_bench.h"
#include "common/tools/bench/gpu/scd_rebuild_bench.h"

namespace scd::cuda_bench {

std::string LogitsAgreement(const nlohmann::json& logits) {
  return absl::StrFormat("logits differ by %.2g of their largest, same greedy token: %s",
                         logits.value("relative_diff", -1.0),
                         logits.value("same_greedy_token", false) ? "yes" : "no");
}

int SummaryPrefillTokens(const std::vector<int>& prefill) {
  if (std::find(prefill.begin(), prefill.end(), 4096) != prefill.end()) return 4096;
  return prefill.empty() ? 0 : *std::max_element(prefill.begin(), prefill.end());
}

namespace {

using nlohmann::json;

// Whether any model's results hold `part` ("scd_rebuild", "sekv", ...).
bool AnyModelHas(const json& r, const char* part) {
  for (const auto& m : r["models"]) {
    if (m.contains(part)) return true;
  }
  return false;
}

// The title, the device, the command line, the ceilings and each model's kernels.
void HeaderMarkdown(const json& r, std::ostream& md) {
  md << "# GPU benchmark (scd-gpu-bench)\n\n"
     << "Device: " << r["device"].get<std::string>() << "  \n"
     << "Command: `" << r["command"].get<std::string>() << "`  \n"
     << absl::StrFormat("cuBLAS BF16 GEMM peak: %.1f TFLOP/s; device-to-device copy: %.0f GB/s\n\n",
                        r["gemm"]["peak_tflops"].get<double>(), r["copy"]["gbps"].get<double>());
  for (const auto& m : r["models"]) {
    md << "Kernels (" << m["model"].get<std::string>() << "): " << m.value("kernels", "") << "  \n";
  }
  md << "\n";
  if (r.contains("quick")) md << "**--quick: toy sizes, a check of the tool; not figures.**\n\n";
}

// Prefill, with kAuto's attention kernel and with the mma.sync one.
void PrefillMarkdown(const json& r, std::ostream& md) {
  md << "Prefill with kAuto's attention kernel (WMMA), and again with the mma.sync kernel "
        "(`kTensorCoreMma`, not yet kAuto's choice): its TTFT, and its last-position logits "
        "against the WMMA run's (the largest difference over the largest logit; whether both "
        "pick the same greedy token).\n\n"
     << "| model | prefill tokens | TTFT (ms) | TFLOP/s | vs GEMM peak | mma.sync TTFT (ms) | "
        "mma.sync vs GEMM peak | mma.sync speed-up | logits diff | same token |\n"
     << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& m : r["models"]) {
    for (const auto& p : m["prefill"]) {
      md << absl::StrFormat("| %s | %d | %.1f | %.1f | %.2f | ", m["model"].get<std::string>(),
                            p["tokens"].get<int>(), p["ttft_ms"].get<double>(),
                            p["tflops"].get<double>(), p["vs_gemm_peak"].get<double>());
      const nlohmann::json& x = p["mma"];
      if (x.contains("error")) {
        md << "error: " << x["error"].get<std::string>() << " | | | | |\n";
      } else {
        md << absl::StrFormat("%.1f | %.2f | %.2fx | %.2g | %s |\n", x["ttft_ms"].get<double>(),
                              x["vs_gemm_peak"].get<double>(), x["speedup"].get<double>(),
                              x["logits"].value("relative_diff", -1.0),
                              x["logits"].value("same_greedy_token", false) ? "yes" : "no");
      }
    }
  }
}

// Decode steps: graphed, eager, and with cuBLAS projections.
void DecodeMarkdown(const json& r, std::ostream& md) {
  md << "\nDecode steps as CUDA graphs (the backend's default); eager: the same steps launched "
        "kernel by kernel. Graph MiB: the device memory the batch's cached graphs take. "
        "cuBLAS: the graphed steps with cuBLAS projections instead of the weight stream "
        "(`LinearSmallBatch`), for batches it takes; weight-stream speed-up: cuBLAS ms/step over "
        "the default's.\n\n"
     << "| model | decode batch | context | ms/step | tok/s | HBM GB/s | vs copy | eager ms/step "
        "| eager vs copy | graphs speedup | graph MiB | cuBLAS ms/step | cuBLAS vs copy | "
        "weight-stream speed-up |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& m : r["models"]) {
    for (const auto& d : m["decode"]) {
      md << absl::StrFormat(
          "| %s | %d | %d | %.3f | %.1f | %.0f | %.2f | %.3f | %.2f | %.2fx | %.2f |",
          m["model"].get<std::string>(), d["batch"].get<int>(), d["context"].get<int>(),
          d["step_ms"].get<double>(), d["tokens_per_s"].get<double>(), d["hbm_gbps"].get<double>(),
          d["vs_copy"].get<double>(), d["eager_step_ms"].get<double>(),
          d["eager_vs_copy"].get<double>(), d["graph_speedup"].get<double>(),
          d["graph_device_bytes"].get<double>() / 1048576.0);
      if (d.contains("cublas_step_ms")) {
        md << absl::StrFormat(" %.3f | %.2f | %.2fx |\n", d["cublas_step_ms"].get<double>(),
                              d["cublas_vs_copy"].get<double>(),
                              d["small_batch_speedup"].get<double>());
      } else {
        md << " - | - | - |\n";
      }
    }
  }
}

// The SCD rebuild against the consumer's own prefill.
void ScdRebuildMarkdown(const json& r, std::ostream& md) {
  md << "\nSCD rebuild (host codes to the filled BF16 cache: staging + upload + decode), with "
     << "int8-row codes as a payload carries them, and with F32 codes, "
     << absl::StrFormat("against the consumer's own prefill of the same tokens; target >= %.0fx.",
                        kScdTargetSpeedup)
     << "\n\n"
     << "| model | tokens | payload int8 (MB) | rebuild int8 (ms) | stage (ms) | GPU (ms) "
     << "| rebuild F32 (ms) | prefill (ms) | speedup (int8) | target |\n"
     << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& m : r["models"]) {
    if (!m.contains("scd_rebuild")) continue;
    const auto& x = m["scd_rebuild"];
    if (x.contains("error")) {
      md << "| " << m["model"].get<std::string>() << " | error: " << x["error"].get<std::string>()
         << " |||||||||\n";
      continue;
    }
    md << absl::StrFormat("| %s | %d | %.1f | %.2f | %.2f | %.2f | %.2f | %.1f | %.2fx | %s |\n",
                          m["model"].get<std::string>(), x["tokens"].get<int>(),
                          x["payload_bytes"].get<double>() / 1e6, x["rebuild_ms"].get<double>(),
                          x["stage_ms"].get<double>(), x["gpu_ms"].get<double>(),
                          x["rebuild_f32_ms"].get<double>(), x["prefill_ms"].get<double>(),
                          x["speedup"].get<double>(), x["verdict"].get<std::string>());
  }
}

// The SEKV decode step's attention against full-KV decode's.
void SekvAttentionMarkdown(const json& r, std::ostream& md) {
  md << "\nSEKV decode step against full-KV decode: attention of a batch-1 step over all "
     << "layers (window 0), host time; layer caches 1 means one layer's cache read L times.\n\n"
     << "The whole-step column adds the batch-1 decode step measured above at a short "
     << "context (derived, not measured at the long context).\n\n"
     << "| model | context | layer caches | full KV (ms) | SEKV (ms) | host select (ms) "
     << "| full/SEKV | whole step full/SEKV (derived) | entries per KV head "
     << "| GPU tier GB (SEKV / full) |\n"
     << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& m : r["models"]) {
    if (!m.contains("sekv")) continue;
    for (const auto& x : m["sekv"]) {
      if (x.contains("error")) {
        md << absl::StrFormat("| %s | %d | error: %s ||||||||\n", m["model"].get<std::string>(),
                              x["context"].get<int>(), x["error"].get<std::string>());
        continue;
      }
      const std::string whole =
          x.contains("whole_step")
              ? absl::StrFormat("%.2fx (%.2f / %.2f ms)", x["whole_step"]["ratio"].get<double>(),
                                x["whole_step"]["full_ms"].get<double>(),
                                x["whole_step"]["sekv_ms"].get<double>())
              : std::string("n/a");
      md << absl::StrFormat(
          "| %s | %d | %d | %.3f | %.3f | %.3f | %.2fx | %s | %d / %d | %.2f / %.2f (%.2f) |\n",
          m["model"].get<std::string>(), x["context"].get<int>(), x["layer_caches"].get<int>(),
          x["full_ms"].get<double>(), x["sekv_ms"].get<double>(), x["select_ms"].get<double>(),
          x["ratio"].get<double>(), whole, x["entries_per_head"].get<int>(),
          x["context"].get<int>(), x["sekv_tier_bytes"].get<double>() / 1e9,
          x["full_kv_bytes"].get<double>() / 1e9, x["tier_fraction"].get<double>());
    }
  }
}

// Concurrent SEKV requests, batched and beside plain ones.
void SekvBatchMarkdown(const json& r, std::ostream& md) {
  md << "\nConcurrent SEKV requests through the decode daemon's GPU path (`GpuSekv`, as "
     << "above), each round stepped one by one (`GpuSekv::Step`) and then as one batch "
     << "(`GpuSekv::StepBatch`: the weights read once); then beside as many plain requests "
     << "(backend sequences of the same context), two steps a round (`DecodeSample`, then "
     << "`StepBatch`) against one (`GpuSekv::StepMixed`: the weights read once for both "
     << "kinds); medians of 10 rounds.\n\n"
     << "| model | context | requests | one by one (ms) | batched (ms) | one by one (tok/s) | "
     << "batched (tok/s) | speed-up | with plain: two steps (ms) | one mixed step (ms) | "
     << "speed-up |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& m : r["models"]) {
    if (!m.contains("sekv_batch")) continue;
    const auto& b = m["sekv_batch"];
    if (b.is_object() && b.contains("error")) {
      md << absl::StrFormat("| %s | error: %s ||||||||||\n", m["model"].get<std::string>(),
                            b["error"].get<std::string>());
      continue;
    }
    for (const auto& x : b) {
      md << absl::StrFormat(
          "| %s | %d | %d | %.3f | %.3f | %.1f | %.1f | %.2fx | %.3f | %.3f | %.2fx |\n",
          m["model"].get<std::string>(), m["sekv_batch_context"].get<int>(), x["batch"].get<int>(),
          x["one_by_one_ms"].get<double>(), x["batched_ms"].get<double>(),
          x["one_by_one_tokens_per_s"].get<double>(), x["batched_tokens_per_s"].get<double>(),
          x["speedup"].get<double>(), x["two_steps_ms"].get<double>(), x["mixed_ms"].get<double>(),
          x["mixed_speedup"].get<double>());
    }
  }
}

// The whole SEKV decode step through GpuSekv against the backend's full-KV step.
void SekvModelMarkdown(const json& r, std::ostream& md) {
  md << "\nSEKV whole decode step through the decode daemon's GPU path (`GpuSekv`: BF16 tier, "
     << "the zoom-in on the device (`SekvZoom`: selection, token scoring and rebuild of the "
     << "expanded rows, no host round trip), one softmax) against the backend's own full-KV "
     << "decode step, batch 1, full attention, logits to the host; beside it the same with the "
     << "zoom-in on the host (gate read back per layer, host selection, CPU-tier rebuild, "
     << "upload); budget 0.4, zoom-in of 64 rows per layer and KV head at every step.\n\n"
     << "| model | context | full KV (ms) | SEKV (ms) | full/SEKV | SEKV, host zoom (ms) | "
     << "device zoom speed-up | rows expanded per layer and KV head | resident rows per KV "
     << "head | GPU tier GB (SEKV / full) | set-up s (host cache / CPU tier registered / "
     << "GPU tier, how the device reads the CPU tier; GPU tier with a pinned copy instead) |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& m : r["models"]) {
    for (const auto& x : m.value("sekv_model", nlohmann::json::array())) {
      if (x.contains("error")) {
        md << absl::StrFormat("| %s | %d | error: %s |||||||||\n", m["model"].get<std::string>(),
                              x["context"].get<int>(), x["error"].get<std::string>());
        continue;
      }
      md << absl::StrFormat(
          "| %s | %d | %.3f | %.3f | %.2fx | %.3f | %.2fx | %.1f | %d | %.2f / %.2f (%.2f) | "
          "%.1f / %.2f / %.1f, %s; %.1f |\n",
          m["model"].get<std::string>(), x["context"].get<int>(), x["full_ms"].get<double>(),
          x["sekv_ms"].get<double>(), x["ratio"].get<double>(), x["host_zoom_ms"].get<double>(),
          x["device_zoom_speedup"].get<double>(), x["expanded_rows_per_head"].get<double>(),
          x["resident_rows_per_head"].get<int>(), x["sekv_tier_bytes"].get<double>() / 1e9,
          x["full_kv_bytes"].get<double>() / 1e9, x["tier_fraction"].get<double>(),
          x["setup_s"]["host_cache"].get<double>(), x["setup_s"].value("register", 0.0),
          x["setup_s"]["gpu_tier"].get<double>(), x.value("cpu_tier_access", std::string("?")),
          x["setup_s"].value("gpu_tier_with_copy", 0.0));
    }
  }
}

// The same steps' op profile: where the device time goes.
void SekvModelProfileMarkdown(const json& r, std::ostream& md) {
  int profiled = 0;
  for (const auto& m : r["models"]) {
    for (const auto& x : m.value("sekv_model", nlohmann::json::array())) {
      if (x.contains("profile")) profiled = x["profile"]["steps"].get<int>();
    }
  }
  md << "\nThe same steps, where the device time goes: " << profiled
     << " more steps of each with the backend's op profile on (`cuda::SetOpProfiling`; eager, so "
        "slower than the steps above). "
     << "Attention: each layer's attention, for SEKV all of it (gate, zoom-in, resident "
     << "softmax, merge, and any wait for the host within it); the rest: everything else from "
     << "the embedding to the logits.\n\n"
     << "| model | context | full KV attention (ms) | SEKV attention (ms) | full/SEKV attention "
     << "| SEKV gate / zoom-in / resident softmax (ms) | SEKV host zoom attention (ms) | host "
     << "zoom: gate / zoom-in / resident softmax (ms) | full KV rest (ms) | SEKV rest (ms) |\n"
     << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& m : r["models"]) {
    for (const auto& x : m.value("sekv_model", nlohmann::json::array())) {
      if (x.contains("error")) continue;
      const nlohmann::json &full = x["full_profile"], &dev = x["profile"],
                           &host = x["host_zoom"]["profile"];
      auto parts = [](const nlohmann::json& y) {
        return absl::StrFormat("%.3f / %.3f / %.3f", y["sekv_gate_ms"].get<double>(),
                               y["sekv_zoom_ms"].get<double>(),
                               y["sekv_resident_ms"].get<double>());
      };
      md << absl::StrFormat("| %s | %d | %.3f | %.3f | %.2fx | %s | %.3f | %s | %.3f | %.3f |\n",
                            m["model"].get<std::string>(), x["context"].get<int>(),
                            full["attention_ms"].get<double>(), dev["attention_ms"].get<double>(),
                            x["attention_ratio"].get<double>(), parts(dev),
                            host["attention_ms"].get<double>(), parts(host),
                            full["other_ms"].get<double>(), dev["other_ms"].get<double>());
    }
  }
}

// The WMMA prefill at 4K, and the mma.sync one at 4K or at the longest prompt.
void PrintPrefillSummary(const char* name, const json& m) {
  for (const auto& p : m["prefill"]) {
    if (p["tokens"] == 4096) {
      std::printf("%s prefill_4k_vs_gemm_peak=%.3f (WMMA attention)\n", name,
                  p["vs_gemm_peak"].get<double>());
    }
  }
  // The mma.sync prefill at 4K, or at the longest prompt measured when there is no 4K.
  const nlohmann::json& rows = m["prefill"];
  std::vector<int> lengths;
  for (const auto& p : rows) lengths.push_back(p["tokens"].get<int>());
  const int summary_tokens = SummaryPrefillTokens(lengths);
  const auto mma_row = std::find_if(rows.begin(), rows.end(), [&](const auto& p) {
    return p["tokens"].template get<int>() == summary_tokens;
  });
  if (mma_row != rows.end()) {
    const nlohmann::json& x = (*mma_row)["mma"];
    const int tokens = (*mma_row)["tokens"].get<int>();
    if (x.contains("error")) {
      std::printf("%s prefill_mma_vs_wmma=error at %d tokens (%s)\n", name, tokens,
                  x["error"].get<std::string>().c_str());
    } else {
      std::printf(
          "%s prefill_mma_vs_wmma=%.2f at %d tokens (mma.sync attention: %.3f of GEMM "
          "peak; %s)\n",
          name, x["speedup"].get<double>(), tokens, x["vs_gemm_peak"].get<double>(),
          LogitsAgreement(x["logits"]).c_str());
    }
  }
}

// Each decode batch against the copy ceiling: graphed, eager, cuBLAS projections.
void PrintDecodeSummary(const char* name, const json& m) {
  for (const auto& d : m["decode"]) {
    std::printf("%s decode_b%d_vs_copy=%.3f (eager %.3f; CUDA graphs %.2fx faster", name,
                d["batch"].get<int>(), d["vs_copy"].get<double>(), d["eager_vs_copy"].get<double>(),
                d["graph_speedup"].get<double>());
    if (d.contains("cublas_vs_copy")) {
      std::printf("; cuBLAS projections %.3f, the weight stream %.2fx faster",
                  d["cublas_vs_copy"].get<double>(), d["small_batch_speedup"].get<double>());
    }
    std::printf(")\n");
  }
}

// The SCD rebuild's speed-up over prefill.
void PrintScdRebuildSummary(const char* name, const json& x) {
  if (x.contains("error")) {
    std::printf("%s scd_rebuild_speedup=error (%s)\n", name, x["error"].get<std::string>().c_str());
  } else {
    std::printf(
        "%s scd_rebuild_speedup=%.2f (rebuild %.2f ms vs prefill %.2f ms at %d tokens; "
        "target >= %.0fx: %s)\n",
        name, x["speedup"].get<double>(), x["rebuild_ms"].get<double>(),
        x["prefill_ms"].get<double>(), x["tokens"].get<int>(), x["target"].get<double>(),
        x["verdict"].get<std::string>().c_str());
  }
}

// The SEKV step's attention against full KV's, and the derived whole step.
void PrintSekvSummary(const char* name, const json& m) {
  for (const auto& x : m.value("sekv", nlohmann::json::array())) {
    if (x.contains("error")) {
      std::printf("%s context %d sekv_vs_full=error (%s)\n", name, x["context"].get<int>(),
                  x["error"].get<std::string>().c_str());
    } else {
      std::printf(
          "%s context %d sekv_vs_full=%.2f (full KV %.3f ms vs SEKV %.3f ms per step; GPU "
          "tier %.2f of full KV)\n",
          name, x["context"].get<int>(), x["ratio"].get<double>(), x["full_ms"].get<double>(),
          x["sekv_ms"].get<double>(), x["tier_fraction"].get<double>());
      if (x.contains("whole_step")) {
        std::printf("%s context %d sekv_whole_step_vs_full=%.2f (derived: %.3f vs %.3f ms)\n", name,
                    x["context"].get<int>(), x["whole_step"]["ratio"].get<double>(),
                    x["whole_step"]["full_ms"].get<double>(),
                    x["whole_step"]["sekv_ms"].get<double>());
      }
    }
  }
}

// Batched SEKV steps against one by one, and mixed steps against two.
void PrintSekvBatchSummary(const char* name, const json& m) {
  if (m.contains("sekv_batch") && m["sekv_batch"].is_array()) {
    for (const auto& x : m["sekv_batch"]) {
      std::printf("%s sekv batch %d batched_vs_one_by_one=%.2f (%.3f vs %.3f ms a step)\n", name,
                  x["batch"].get<int>(), x["speedup"].get<double>(), x["batched_ms"].get<double>(),
                  x["one_by_one_ms"].get<double>());
      std::printf("%s sekv batch %d mixed_vs_two_steps=%.2f (%.3f vs %.3f ms a step)\n", name,
                  x["batch"].get<int>(), x["mixed_speedup"].get<double>(),
                  x["mixed_ms"].get<double>(), x["two_steps_ms"].get<double>());
    }
  }
}

// The whole SEKV step through GpuSekv against full KV, and its profiled attention.
void PrintSekvModelSummary(const char* name, const json& m) {
  for (const auto& x : m.value("sekv_model", nlohmann::json::array())) {
    if (x.contains("error")) {
      std::printf("%s context %d sekv_model_vs_full=error (%s)\n", name, x["context"].get<int>(),
                  x["error"].get<std::string>().c_str());
    } else {
      std::printf(
          "%s context %d sekv_model_vs_full=%.2f (measured whole steps through GpuSekv: full "
          "KV %.3f ms vs SEKV %.3f ms; host zoom %.3f ms, device zoom %.2fx faster; GPU tier "
          "%.2f of full KV)\n",
          name, x["context"].get<int>(), x["ratio"].get<double>(), x["full_ms"].get<double>(),
          x["sekv_ms"].get<double>(), x["host_zoom_ms"].get<double>(),
          x["device_zoom_speedup"].get<double>(), x["tier_fraction"].get<double>());
      std::printf(
          "%s context %d sekv_model_attention_vs_full=%.2f (profiled steps: attention %.3f ms "
          "full KV vs %.3f ms SEKV, of which gate %.3f, zoom-in %.3f, resident softmax %.3f; "
          "%.3f ms SEKV with the host zoom; the rest %.3f vs %.3f ms)\n",
          name, x["context"].get<int>(), x["attention_ratio"].get<double>(),
          x["full_profile"]["attention_ms"].get<double>(),
          x["profile"]["attention_ms"].get<double>(), x["profile"]["sekv_gate_ms"].get<double>(),
          x["profile"]["sekv_zoom_ms"].get<double>(),
          x["profile"]["sekv_resident_ms"].get<double>(),
          x["host_zoom"]["profile"]["attention_ms"].get<double>(),
          x["full_profile"]["other_ms"].get<double>(), x["profile"]["other_ms"].get<double>());
    }
  }
}

}  // namespace

std::string ResultsMarkdown(const nlohmann::json& r) {
  std::ostringstream md;
  HeaderMarkdown(r, md);
  md << KernelMarkdown(r);
  PrefillMarkdown(r, md);
  DecodeMarkdown(r, md);
  md << "\n";
  for (const auto& m : r["models"]) {
    if (m.contains("op_profile")) {
      md << OpProfileMarkdown(m["model"].get<std::string>(), m["op_profile"]);
    }
  }
  if (AnyModelHas(r, "scd_rebuild")) ScdRebuildMarkdown(r, md);
  if (AnyModelHas(r, "sekv")) SekvAttentionMarkdown(r, md);
  if (AnyModelHas(r, "sekv_batch")) SekvBatchMarkdown(r, md);
  if (AnyModelHas(r, "sekv_model")) {
    SekvModelMarkdown(r, md);
    SekvModelProfileMarkdown(r, md);
  }
  return md.str();
}

void PrintSummary(const nlohmann::json& r) {
  for (const auto& m : r["models"]) {
    const char* name = m["model"].get_ref<const std::string&>().c_str();
    PrintPrefillSummary(name, m);
    PrintDecodeSummary(name, m);
    if (m.contains("op_profile")) {
      std::printf("%s", OpProfileSummary(name, m["op_profile"]).c_str());
    }
    if (m.contains("scd_rebuild")) PrintScdRebuildSummary(name, m["scd_rebuild"]);
    PrintSekvSummary(name, m);
    PrintSekvBatchSummary(name, m);
    PrintSekvModelSummary(name, m);
  }
}

}  // namespace scd::cuda_bench
