// The runtime benchmark's weight figures (see runtime_bench.h): a pass over a decode step's F32
// matrices alone, int8 against F32 decode on one model in one process, and new processes that
// load a checkpoint.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/model/checkpoint.h"
#include "common/runtime/cpu_backend.h"
#include "common/tools/bench/runtime_bench.h"
#include "kernels/cpu/ops.h"

namespace scd::bench::internal {
namespace {

namespace fs = std::filesystem;

// One single-token decode step of `seq` on `backend`, in seconds.
absl::StatusOr<double> TimedStep(Backend& backend, Sequence& seq, int vocab,
                                 std::vector<float>& logits, std::mt19937_64& rng) {
  Sequence* seqs[] = {&seq};
  const int32_t token = static_cast<int32_t>(3 + rng() % std::max(1, vocab - 3));
  const auto start = std::chrono::steady_clock::now();
  SCD_RETURN_IF_ERROR(backend.Decode(seqs, absl::MakeConstSpan(&token, 1), &logits));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A sequence of `context` random tokens, with room for `steps` more.
absl::StatusOr<std::unique_ptr<Sequence>> Prefilled(Backend& backend, int context, int steps,
                                                    int vocab, std::mt19937_64& rng) {
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq, backend.NewSequence(context + steps));
  std::vector<int32_t> prompt(context);
  for (int32_t& t : prompt) t = static_cast<int32_t>(3 + rng() % std::max(1, vocab - 3));
  PrefillResult unused;
  SCD_RETURN_IF_ERROR(backend.Prefill(*seq, prompt, PrefillOptions{}, &unused));
  return seq;
}

// The field-by-field medians of `runs` (tokens: the first run's).
ColdStartReport MedianOf(const std::vector<const ColdStartReport*>& runs) {
  ColdStartReport m = *runs.front();
  auto median = [&](auto field) {
    std::vector<double> v;
    for (const ColdStartReport* r : runs) v.push_back(static_cast<double>(r->*field));
    return Median(v);
  };
  m.load_seconds = median(&ColdStartReport::load_seconds);
  m.ttft_seconds = median(&ColdStartReport::ttft_seconds);
  m.decode_tokens_per_s = median(&ColdStartReport::decode_tokens_per_s);
  m.start_rss_bytes = static_cast<size_t>(median(&ColdStartReport::start_rss_bytes));
  m.peak_rss_bytes = static_cast<size_t>(median(&ColdStartReport::peak_rss_bytes));
  m.weight_bytes = static_cast<size_t>(median(&ColdStartReport::weight_bytes));
  return m;
}

int LeadingMatches(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return static_cast<int>(i);
}

}  // namespace

double DecodeMatricesSeconds(const Model& model, std::vector<float>& x, std::vector<float>& y) {
  const ModelConfig& c = model.config;
  const int widest = std::max({c.hidden_size, c.q_dim(), c.intermediate_size});
  if (x.size() < static_cast<size_t>(widest)) x.assign(widest, 0.01f);
  const int outputs = std::max({c.q_dim(), c.intermediate_size, c.vocab_size, c.hidden_size});
  if (y.size() < static_cast<size_t>(outputs)) y.resize(outputs);
  auto apply = [&](const WeightBuffer& w, int n, int k) {
    cpu::Linear(x.data(), w.data(), nullptr, y.data(), 1, n, k);
  };
  const int d = c.hidden_size, ffn = c.intermediate_size;
  const auto start = std::chrono::steady_clock::now();
  for (const LayerWeights& l : model.weights.layers) {
    apply(l.wq, c.q_dim(), d);
    apply(l.wk, c.kv_dim(), d);
    apply(l.wv, c.kv_dim(), d);
    apply(l.wo, d, c.q_dim());
    apply(l.w_gate, ffn, d);
    apply(l.w_up, ffn, d);
    apply(l.w_down, d, ffn);
  }
  apply(model.weights.output_matrix(), c.vocab_size, d);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

absl::Status MeasureInt8Decode(const RuntimeBenchOptions& o, std::shared_ptr<const Model> model,
                               Backend& f32, RuntimeBenchReport& r) {
  if (o.int8_rounds <= 0) return absl::OkStatus();
  const int vocab = model->config.vocab_size;
  if (o.progress) o.progress("int8: converting the weights");
  const auto start = std::chrono::steady_clock::now();
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Backend> int8, CreateCpuBackend(model, WeightDtype::kInt8));
  r.int8_convert_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.f32_weight_bytes = CpuBackendWeightBytes(f32);
  r.int8_weight_bytes = CpuBackendWeightBytes(*int8);
  r.f32_streamed_bytes = CpuBackendStreamedBytes(f32);
  r.int8_streamed_bytes = CpuBackendStreamedBytes(*int8);
  std::mt19937_64 rng(o.seed ^ 0x1e8ull);
  const int steps = 2 + o.decode_steps;  // the first two of each round are its warm-up
  const int capacity_steps = o.int8_rounds * steps;
  SCD_ASSIGN_OR_RETURN(auto f32_seq, Prefilled(f32, o.decode_context, capacity_steps, vocab, rng));
  SCD_ASSIGN_OR_RETURN(auto int8_seq,
                       Prefilled(*int8, o.decode_context, capacity_steps, vocab, rng));
  // F32 and int8 steps alternate one by one, which of the two goes first alternating too, so
  // that the host's memory bandwidth, which drifts over seconds here, is the same for both.
  std::vector<double> f32_seconds, int8_seconds;
  std::vector<float> logits;
  for (int round = 1; round <= o.int8_rounds; ++round) {
    if (o.progress) {
      o.progress(absl::StrFormat("int8 vs f32 decode: round %d/%d", round, o.int8_rounds));
    }
    for (int i = 0; i < steps; ++i) {
      double seconds[2];  // F32's step, int8's
      for (int side : {i % 2, 1 - i % 2}) {
        SCD_ASSIGN_OR_RETURN(seconds[side], side == 0
                                                ? TimedStep(f32, *f32_seq, vocab, logits, rng)
                                                : TimedStep(*int8, *int8_seq, vocab, logits, rng));
      }
      if (i < 2) continue;  // the first two pairs of each round are its warm-up
      f32_seconds.push_back(seconds[0]);
      int8_seconds.push_back(seconds[1]);
    }
  }
  r.int8_round_f32_median_seconds = Median(f32_seconds);
  r.int8_median_seconds = Median(int8_seconds);
  r.int8_vs_f32_decode = r.int8_round_f32_median_seconds / r.int8_median_seconds;
  r.int8_gbps = static_cast<double>(r.int8_streamed_bytes) / r.int8_median_seconds / 1e9;
  return absl::OkStatus();
}

absl::Status MeasureColdStarts(const RuntimeBenchOptions& o, const Model& model,
                               RuntimeBenchReport& r) {
  if (o.cold_start_rounds <= 0 || o.exe.empty()) return absl::OkStatus();
  std::string dir = o.model_dir;
  bool remove = false;
  if (dir.empty()) {  // a synthetic model: saved where the children can load it
    dir = o.checkpoint_dir.empty()
              ? (fs::temp_directory_path() / absl::StrCat("scd-bench-", getpid())).string()
              : o.checkpoint_dir;
    remove = o.checkpoint_dir.empty();
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (o.progress) o.progress(absl::StrCat("saving the synthetic model to ", dir));
    SCD_RETURN_IF_ERROR(SaveModel(model.config, model.weights, dir));
  }
  ColdStartOptions co;
  co.model_dir = dir;
  co.decode_tokens = o.cold_start_tokens;
  co.seed = o.seed;
  std::vector<WeightDtype> order;
  for (int i = 0; i < o.cold_start_rounds; ++i) {
    order.push_back(WeightDtype::kF32);
    order.push_back(WeightDtype::kInt8);
  }
  absl::StatusOr<std::vector<ColdStartReport>> runs =
      RunColdStartChildren(o.exe, co, order, o.progress);
  if (remove) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  SCD_RETURN_IF_ERROR(runs.status());
  r.cold_starts = std::move(*runs);
  std::vector<const ColdStartReport*> f32, int8;
  for (const ColdStartReport& c : r.cold_starts) {
    (c.dtype == WeightDtype::kF32 ? f32 : int8).push_back(&c);
  }
  r.f32_cold = MedianOf(f32);
  r.int8_cold = MedianOf(int8);
  r.int8_tokens_matching = LeadingMatches(r.f32_cold.tokens, r.int8_cold.tokens);
  r.rss_vs_weights = static_cast<double>(r.f32_cold.peak_rss_bytes) / r.f32_cold.weight_bytes;
  r.int8_rss_vs_weights =
      static_cast<double>(r.int8_cold.peak_rss_bytes) / r.int8_cold.weight_bytes;
  return absl::OkStatus();
}

void AppendInt8(const RuntimeBenchReport& r, std::string& s) {
  if (r.int8_median_seconds <= 0) return;
  absl::StrAppendFormat(
      &s,
      "int8 weights (blocks of 32, a scale each; converted in %.0f ms): %d rounds of %d "
      "steps, F32 and int8 alternating step by step (medians)\n",
      r.int8_convert_seconds * 1e3, r.options.int8_rounds, r.options.decode_steps);
  absl::StrAppendFormat(&s, "  weights held: F32 %.1f MB, int8 %.1f MB (%.2fx fewer bytes)\n",
                        r.f32_weight_bytes / 1e6, r.int8_weight_bytes / 1e6,
                        static_cast<double>(r.f32_weight_bytes) / r.int8_weight_bytes);
  absl::StrAppendFormat(&s,
                        "  read per step (an embedding table that is not the output matrix "
                        "aside): F32 %.1f MB, int8 %.1f MB (%.2fx fewer bytes)\n",
                        r.f32_streamed_bytes / 1e6, r.int8_streamed_bytes / 1e6,
                        static_cast<double>(r.f32_streamed_bytes) / r.int8_streamed_bytes);
  absl::StrAppendFormat(&s,
                        "  step: F32 %.2f ms (%.1f tokens/s), int8 %.2f ms (%.1f tokens/s, %.2f "
                        "GB/s of int8 weights read)\n",
                        r.int8_round_f32_median_seconds * 1e3, 1 / r.int8_round_f32_median_seconds,
                        r.int8_median_seconds * 1e3, 1 / r.int8_median_seconds, r.int8_gbps);
  absl::StrAppendFormat(&s, "  int8_vs_f32_decode: %.2fx (target %.1fx: %s)\n\n",
                        r.int8_vs_f32_decode, kInt8Target,
                        r.int8_vs_f32_decode >= kInt8Target ? "met" : "MISSED");
}

void AppendColdStarts(const RuntimeBenchReport& r, std::string& s) {
  if (r.cold_starts.empty()) return;
  absl::StrAppendFormat(&s,
                        "cold start: a new process loads the checkpoint (page cache warm), "
                        "prefills %d tokens, decodes %d greedily; medians of %d runs each, "
                        "F32 and int8 alternating\n",
                        ColdStartOptions{}.prompt_tokens, r.options.cold_start_tokens,
                        r.options.cold_start_rounds);
  absl::StrAppendFormat(&s, "  %-5s %9s %9s %11s %10s %10s %12s %8s\n", "dtype", "load ms",
                        "TTFT ms", "decode t/s", "start RSS", "peak RSS", "weights", "RSS/w");
  for (const ColdStartReport* c : {&r.f32_cold, &r.int8_cold}) {
    absl::StrAppendFormat(&s, "  %-5s %9.1f %9.1f %11.1f %7.1f MB %7.1f MB %9.1f MB %8.2f\n",
                          WeightDtypeName(c->dtype), c->load_seconds * 1e3, c->ttft_seconds * 1e3,
                          c->decode_tokens_per_s, c->start_rss_bytes / 1e6, c->peak_rss_bytes / 1e6,
                          c->weight_bytes / 1e6,
                          static_cast<double>(c->peak_rss_bytes) / c->weight_bytes);
  }
  absl::StrAppendFormat(&s,
                        "  rss_vs_weights (F32) %.3f (target <= %.2f: %s); cold TTFT (F32) %.0f "
                        "ms (target <= %.0f ms: %s)\n",
                        r.rss_vs_weights, kRssTarget,
                        r.rss_vs_weights <= kRssTarget ? "met" : "MISSED",
                        r.f32_cold.ttft_seconds * 1e3, kColdTtftTarget * 1e3,
                        r.f32_cold.ttft_seconds <= kColdTtftTarget ? "met" : "MISSED");
  absl::StrAppendFormat(&s,
                        "  process decode: int8 %.2fx F32; greedy tokens: int8 equals F32 for "
                        "the first %d of %zu\n\n",
                        r.int8_cold.decode_tokens_per_s / r.f32_cold.decode_tokens_per_s,
                        r.int8_tokens_matching, r.f32_cold.tokens.size());
}

nlohmann::json WeightsJson(const RuntimeBenchReport& r) {
  nlohmann::json j;
  j["int8"] = {{"rounds", r.options.int8_rounds},
               {"convert_seconds", r.int8_convert_seconds},
               {"f32_weight_bytes", r.f32_weight_bytes},
               {"int8_weight_bytes", r.int8_weight_bytes},
               {"f32_streamed_bytes", r.f32_streamed_bytes},
               {"int8_streamed_bytes", r.int8_streamed_bytes},
               {"f32_median_seconds", r.int8_round_f32_median_seconds},
               {"int8_median_seconds", r.int8_median_seconds},
               {"int8_gbps", r.int8_gbps},
               {"int8_vs_f32_decode", r.int8_vs_f32_decode}};
  nlohmann::json runs = nlohmann::json::array();
  for (const ColdStartReport& c : r.cold_starts)
    runs.push_back(nlohmann::json::parse(ColdStartJson(c)));
  j["cold_start"] = {{"runs", runs},
                     {"f32_median", nlohmann::json::parse(ColdStartJson(r.f32_cold))},
                     {"int8_median", nlohmann::json::parse(ColdStartJson(r.int8_cold))},
                     {"int8_tokens_matching", r.int8_tokens_matching},
                     {"rss_vs_weights", r.rss_vs_weights},
                     {"int8_rss_vs_weights", r.int8_rss_vs_weights}};
  return j;
}

}  // namespace scd::bench::internal
