// scd-gpu-bench's profile of a forward pass (op_profile_bench.h).
#include "common/tools/bench/gpu/op_profile_bench.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/runtime/cuda/decode_graph_cache.h"
#include "common/runtime/cuda/op_profiling.h"
#include "common/runtime/sampler.h"
#include "common/tools/bench/gpu/bench_support.h"
#include "common/tools/bench/model_cost.h"

namespace scd::cuda_bench {
namespace {

using cuda::kOpClasses;
using cuda::kOpClassNames;
using cuda::OpClass;

int Index(OpClass c) { return static_cast<int>(c); }

// The work of each class that has a natural rate: FLOPs (prefill) or bytes it must read
// (decode); 0 for the classes reported as time only.
struct ClassWork {
  double amount[kOpClasses] = {};
};

// A prefill of `tokens` tokens from position 0 with the last row's logits (model_cost.h's
// terms, split by projection).
ClassWork PrefillWork(const ModelConfig& c, int tokens) {
  const double t = tokens, L = c.num_layers, d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(),
               ffn = c.intermediate_size;
  ClassWork w;
  w.amount[Index(OpClass::kQkv)] = 2 * t * d * (qd + 2 * kvd) * L;
  w.amount[Index(OpClass::kOutProj)] = 2 * t * qd * d * L;
  w.amount[Index(OpClass::kGateUp)] = 2 * t * d * 2 * ffn * L;
  w.amount[Index(OpClass::kDown)] = 2 * t * ffn * d * L;
  w.amount[Index(OpClass::kAttention)] = bench::AttentionFlops(c, 0, tokens);
  w.amount[Index(OpClass::kLogits)] = 2 * d * static_cast<double>(c.vocab_size);
  return w;
}

// Batch-1 decode steps at positions [first, first + steps): the BF16 weights each projection
// streams and the BF16 K/V attention reads (min(p + 1, window) positions a layer), per step.
ClassWork DecodeWork(const ModelConfig& c, int first, int steps) {
  const double L = c.num_layers, d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(),
               ffn = c.intermediate_size, bf16 = 2;
  ClassWork w;
  w.amount[Index(OpClass::kQkv)] = d * (qd + 2 * kvd) * bf16 * L;
  w.amount[Index(OpClass::kOutProj)] = qd * d * bf16 * L;
  w.amount[Index(OpClass::kGateUp)] = d * 2 * ffn * bf16 * L;
  w.amount[Index(OpClass::kDown)] = ffn * d * bf16 * L;
  w.amount[Index(OpClass::kLogits)] = static_cast<double>(c.vocab_size) * d * bf16;
  double keys = 0;
  for (int p = first; p < first + steps; ++p) {
    keys += c.sliding_window > 0 ? std::min(p + 1, c.sliding_window) : p + 1;
  }
  w.amount[Index(OpClass::kAttention)] = keys / std::max(steps, 1) * 2 * kvd * bf16 * L;
  return w;
}

std::vector<int32_t> Prompt(int count, int vocab) {
  std::vector<int32_t> ids(count);
  for (int i = 0; i < count; ++i) ids[i] = static_cast<int32_t>((int64_t{i} * 7919 + 3) % vocab);
  return ids;
}

// The classes of `p`, each per pass (divided by `passes`), as a share of the pass and, where
// `work` has an amount, as a rate: TFLOP/s against `ceiling` (prefill) or GB/s (decode).
nlohmann::json Classes(const cuda::OpProfile& p, int passes, const ClassWork& work, bool flops,
                       double ceiling) {
  nlohmann::json out = nlohmann::json::array();
  const double pass_ms = p.pass_ms / passes;
  for (int k = 0; k < kOpClasses; ++k) {
    const double ms = p.ms[k] / passes;
    nlohmann::json x = {{"class", kOpClassNames[k]},
                        {"ms", ms},
                        {"share", pass_ms > 0 ? ms / pass_ms : 0.0},
                        {"ops", p.ops[k] / passes}};
    if (work.amount[k] > 0 && ms > 0) {
      const double rate = work.amount[k] / (ms * 1e-3) / (flops ? 1e12 : 1e9);
      x[flops ? "tflops" : "gbps"] = rate;
      x[flops ? "vs_gemm_peak" : "vs_copy"] = rate / ceiling;
    }
    out.push_back(x);
  }
  return out;
}

absl::StatusOr<nlohmann::json> Profile(Backend& backend, const ModelConfig& c, int prefill_tokens,
                                       int context, int steps, double gemm_peak, double copy_gbps) {
  // Prefill: unprofiled, then profiled, each on a new sequence.
  const std::vector<int32_t> ids = Prompt(prefill_tokens, c.vocab_size);
  auto prefill = [&]() -> absl::StatusOr<double> {
    SCD_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq, backend.NewSequence(prefill_tokens));
    PrefillResult r;
    const auto t0 = Clock::now();
    SCD_RETURN_IF_ERROR(backend.Prefill(*seq, ids, PrefillOptions{}, &r));
    return Seconds(t0, Clock::now());
  };
  SCD_ASSIGN_OR_RETURN(const double plain_prefill, prefill());
  SCD_RETURN_IF_ERROR(cuda::SetOpProfiling(backend, true));
  SCD_ASSIGN_OR_RETURN(const double profiled_prefill, prefill());
  SCD_ASSIGN_OR_RETURN(const cuda::OpProfile pp, cuda::TakeOpProfile(backend));
  SCD_RETURN_IF_ERROR(cuda::SetOpProfiling(backend, false));
  if (pp.passes != 1) {
    return absl::InternalError(absl::StrCat("profiled prefill: ", pp.passes, " passes"));
  }
  std::printf(
      "  profile: prefill %d tokens %.2f ms unprofiled, %.2f ms profiled (device, embedding to "
      "logits: %.2f ms)\n",
      prefill_tokens, plain_prefill * 1e3, profiled_prefill * 1e3, pp.pass_ms);

  // Decode: batch 1, eager both times (a profiled step runs eagerly), greedy on the device.
  cuda::DecodeGraphOptions eager;
  eager.enabled = false;
  SCD_RETURN_IF_ERROR(cuda::SetDecodeGraphs(backend, eager));
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq, backend.NewSequence(context + 2 * steps + 4));
  PrefillResult r;
  SCD_RETURN_IF_ERROR(backend.Prefill(*seq, Prompt(context, c.vocab_size), PrefillOptions{}, &r));
  std::vector<Sequence*> batch = {seq.get()};
  std::vector<int32_t> tokens = {1}, next;
  const std::vector<SampleDraw> draws(1);
  auto step = [&](int n) -> absl::StatusOr<double> {
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      SCD_RETURN_IF_ERROR(backend.DecodeSample(batch, tokens, draws, &next));
      tokens.swap(next);
    }
    return Seconds(t0, Clock::now()) / n;
  };
  SCD_RETURN_IF_ERROR(step(2).status());  // warm-up
  SCD_ASSIGN_OR_RETURN(const double plain_step, step(steps));
  const int first = seq->length();
  SCD_RETURN_IF_ERROR(cuda::SetOpProfiling(backend, true));
  SCD_ASSIGN_OR_RETURN(const double profiled_step, step(steps));
  SCD_ASSIGN_OR_RETURN(const cuda::OpProfile dp, cuda::TakeOpProfile(backend));
  SCD_RETURN_IF_ERROR(cuda::SetOpProfiling(backend, false));
  if (dp.passes != steps) {
    return absl::InternalError(
        absl::StrCat("profiled decode: ", dp.passes, " passes for ", steps, " steps"));
  }
  std::printf(
      "  profile: decode batch 1 %.3f ms a step eager unprofiled, %.3f ms profiled (device, "
      "embedding to logits: %.3f ms)\n",
      plain_step * 1e3, profiled_step * 1e3, dp.pass_ms / steps);

  nlohmann::json out;
  out["prefill"] = {{"tokens", prefill_tokens},
                    {"unprofiled_ms", plain_prefill * 1e3},
                    {"profiled_ms", profiled_prefill * 1e3},
                    {"pass_ms", pp.pass_ms},
                    {"classes", Classes(pp, 1, PrefillWork(c, prefill_tokens), true, gemm_peak)}};
  out["decode"] = {{"batch", 1},
                   {"context", context},
                   {"steps", steps},
                   {"unprofiled_eager_ms", plain_step * 1e3},
                   {"profiled_ms", profiled_step * 1e3},
                   {"pass_ms", dp.pass_ms / steps},
                   {"classes", Classes(dp, steps, DecodeWork(c, first, steps), false, copy_gbps)}};
  return out;
}

// The classes of `part` by share, largest first.
std::vector<nlohmann::json> ByShare(const nlohmann::json& part) {
  std::vector<nlohmann::json> v(part["classes"].begin(), part["classes"].end());
  std::stable_sort(v.begin(), v.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a["share"].get<double>() > b["share"].get<double>();
  });
  return v;
}

// "gate_up 0.19 at 0.83 of GEMM peak, attention 0.43 at 0.06 of GEMM peak, ..., rest 0.05".
std::string Shares(const nlohmann::json& part, const char* vs, const char* ceiling) {
  constexpr int kNamed = 5;
  std::string s;
  double rest = 0;
  int named = 0;
  for (const nlohmann::json& x : ByShare(part)) {
    const double share = x["share"].get<double>();
    if (named == kNamed) {
      rest += share;
      continue;
    }
    absl::StrAppend(&s, named == 0 ? "" : ", ", x["class"].get<std::string>(),
                    absl::StrFormat(" %.2f", share));
    if (x.contains(vs)) {
      absl::StrAppend(&s, absl::StrFormat(" at %.2f of %s", x[vs].get<double>(), ceiling));
    }
    ++named;
  }
  absl::StrAppend(&s, absl::StrFormat(", rest %.2f", rest));
  return s;
}

}  // namespace

absl::StatusOr<nlohmann::json> MeasureOpProfile(Backend& backend, const ModelConfig& config,
                                                int prefill_tokens, int context, int steps,
                                                double gemm_peak, double copy_gbps) {
  if (prefill_tokens < 1 || context < 1 || steps < 1) {
    return absl::InvalidArgumentError("op profile: tokens, context and steps must be positive");
  }
  absl::StatusOr<nlohmann::json> out =
      Profile(backend, config, prefill_tokens, context, steps, gemm_peak, copy_gbps);
  // Whatever happened, the backend is left as it was made: no profiling, graphs on.
  const absl::Status off = cuda::SetOpProfiling(backend, false);
  const absl::Status graphs = cuda::SetDecodeGraphs(backend, cuda::DecodeGraphOptions{});
  if (!out.ok()) return out;
  SCD_RETURN_IF_ERROR(off);
  SCD_RETURN_IF_ERROR(graphs);
  return out;
}

std::string OpProfileMarkdown(const std::string& model, const nlohmann::json& profile) {
  std::ostringstream md;
  if (profile.contains("error")) {
    md << "Where the device time goes (" << model
       << "): error: " << profile["error"].get<std::string>() << "\n\n";
    return md.str();
  }
  const nlohmann::json& p = profile["prefill"];
  const nlohmann::json& d = profile["decode"];
  md << absl::StrFormat(
      "Where the device time goes (%s; `cuda::SetOpProfiling`): a prefill of %d tokens and "
      "batch-1 decode steps after %d tokens (eager), each operation class's time on the device's "
      "clock (with any wait for the host to queue it) and share of the pass (embedding to "
      "logits). Rates: the class's FLOPs (model_cost.h) a second "
      "against the GEMM peak (prefill); the bytes it must read (weights; K/V for attention) a "
      "second against the copy (decode). The pass: %.2f ms profiled on the device, %.2f ms "
      "(host) unprofiled, %.2f ms (host) profiled; a step: %.3f ms on the device, %.3f ms "
      "eager unprofiled, %.3f ms profiled.\n\n",
      model, p["tokens"].get<int>(), d["context"].get<int>(), p["pass_ms"].get<double>(),
      p["unprofiled_ms"].get<double>(), p["profiled_ms"].get<double>(), d["pass_ms"].get<double>(),
      d["unprofiled_eager_ms"].get<double>(), d["profiled_ms"].get<double>());
  md << "| class | prefill ms | share | TFLOP/s | vs GEMM peak | decode ms/step | share | GB/s "
        "| vs copy |\n|---|---|---|---|---|---|---|---|---|\n";
  for (int k = 0; k < kOpClasses; ++k) {
    const nlohmann::json& a = p["classes"][k];
    const nlohmann::json& b = d["classes"][k];
    if (a["ops"].get<int64_t>() == 0 && b["ops"].get<int64_t>() == 0) continue;  // GpuSekv's
    auto rate = [](const nlohmann::json& x, const char* key, const char* vs, const char* fmt) {
      return x.contains(key) ? absl::StrFormat(fmt, x[key].get<double>(), x[vs].get<double>())
                             : std::string("- | -");
    };
    md << absl::StrFormat("| %s | %.3f | %.3f | %s | %.4f | %.3f | %s |\n",
                          a["class"].get<std::string>(), a["ms"].get<double>(),
                          a["share"].get<double>(),
                          rate(a, "tflops", "vs_gemm_peak", "%.1f | %.2f"), b["ms"].get<double>(),
                          b["share"].get<double>(), rate(b, "gbps", "vs_copy", "%.0f | %.2f"));
  }
  md << "\n";
  return md.str();
}

std::string OpProfileSummary(const std::string& model, const nlohmann::json& profile) {
  if (profile.contains("error")) {
    return absl::StrCat(model, " prefill_time_by_op=error (", profile["error"].get<std::string>(),
                        ")\n");
  }
  const nlohmann::json& p = profile["prefill"];
  const nlohmann::json& d = profile["decode"];
  return absl::StrCat(
      model, " prefill_", p["tokens"].get<int>(),
      "_time_by_op=", Shares(p, "vs_gemm_peak", "GEMM peak"),
      absl::StrFormat(" (%.2f ms on the device profiled, %.2f ms unprofiled)\n",
                      p["pass_ms"].get<double>(), p["unprofiled_ms"].get<double>()),
      model, " decode_b1_time_by_op=", Shares(d, "vs_copy", "copy"),
      absl::StrFormat(" (%.3f ms a step on the device profiled, %.3f ms eager unprofiled)\n",
                      d["pass_ms"].get<double>(), d["unprofiled_eager_ms"].get<double>()));
}

}  // namespace scd::cuda_bench
