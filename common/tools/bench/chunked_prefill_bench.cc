// See chunked_prefill_bench.h.
#include "common/tools/bench/chunked_prefill_bench.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "absl/strings/str_format.h"
#include "common/base/elapsed.h"
#include "common/base/status_macros.h"
#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/scd/codec.h"
#include "common/scd/wire_format.h"
#include "common/serving/decode_engine.h"
#include "common/tools/bench/bench_payload.h"
#include "common/tools/bench/runtime_bench.h"

namespace scd::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kLongId = 1000;
constexpr auto kWaitLimit = std::chrono::minutes(10);

// What the engine's callbacks record for one run.
struct Timeline {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::vector<Clock::time_point>> tokens;  // the streams' token times
  std::map<uint64_t, bool> ended;
  Clock::time_point long_first{};
  int32_t long_token = -1;
  DecodeTimings long_timings;  // from its first token's event (the admission stages)
  absl::Status long_status;

  DecodeCallback For(uint64_t id) {
    return [this, id](const DecodeEvent& e) {
      std::lock_guard<std::mutex> lock(mu);
      if (e.kind == DecodeEvent::Kind::kToken) {
        if (id == kLongId && long_token < 0) {
          long_first = Clock::now();
          long_token = e.token;
          long_timings = e.timings;
        }
        tokens[id].push_back(Clock::now());
      } else {
        ended[id] = true;
        if (id == kLongId && e.kind == DecodeEvent::Kind::kError) long_status = e.error;
      }
      cv.notify_all();
    };
  }
  // Waits until `done` holds (checked with mu held); DEADLINE_EXCEEDED after kWaitLimit.
  template <typename Pred>
  absl::Status WaitUntil(Pred done, const char* what) {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, kWaitLimit, done)) {
      return absl::DeadlineExceededError(absl::StrFormat("chunked-prefill bench: %s", what));
    }
    return absl::OkStatus();
  }
};

// What every run shares: the model, the artifact (modes that need one), and the long request.
struct Setup {
  std::shared_ptr<const Model> model;
  std::shared_ptr<const ScdArtifact> artifact;
  std::vector<uint8_t> payload;  // serialized; empty without one
  std::vector<int32_t> suffix;
};

absl::StatusOr<Setup> MakeSetup(const ChunkedPrefillBenchOptions& o, const ModelConfig& config,
                                const std::function<void(const std::string&)>& progress) {
  Setup s;
  progress(absl::StrFormat("synthetic %s weights", o.shape));
  s.model = MakeSyntheticModel(config, o.seed);
  std::vector<int32_t> prompt = BenchPrompt(o.prompt_tokens, o.seed, config.vocab_size);
  if (o.payload.empty()) {
    s.suffix = std::move(prompt);
    return s;
  }
  SCD_ASSIGN_OR_RETURN(const CodecMode mode, ParseCodecMode(o.payload));
  if (CodecModeNeedsArtifact(mode)) {
    progress("fitting a timing artifact (random-token passages)");
    SCD_ASSIGN_OR_RETURN(s.artifact, TimingArtifact(s.model, o.seed));
  }
  const std::vector<int32_t> context(prompt.begin(), prompt.end() - o.payload_suffix);
  s.suffix.assign(prompt.end() - o.payload_suffix, prompt.end());
  progress(absl::StrFormat("encoding a %s payload of %zu tokens", o.payload, context.size()));
  SCD_ASSIGN_OR_RETURN(const Payload payload,
                       EncodeBenchPayload(s.model, s.artifact, mode, context));
  s.payload = SerializePayload(payload);
  return s;
}

absl::StatusOr<ChunkedPrefillRun> RunOne(const ChunkedPrefillBenchOptions& o, const Setup& setup,
                                         int chunk) {
  const std::shared_ptr<const Model>& model = setup.model;
  const int vocab = model->config.vocab_size;
  DecodeEngineOptions eo;
  eo.max_batch = o.streams + 1;
  (o.payload.empty() ? eo.prefill_chunk : eo.rebuild_chunk) = chunk;
  eo.sekv.enabled = o.sekv_budget > 0;
  eo.sekv.budget = o.sekv_budget;
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, CreateBackend(BackendKind::kCpu, model));
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<ConsumerCodec> codec,
                       ConsumerCodec::Create(model, model->digest(), setup.artifact));
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<DecodeEngine> engine,
                       DecodeEngine::Create(std::move(backend), std::move(codec), eo));
  Timeline tl;
  for (int s = 1; s <= o.streams; ++s) {
    DecodeJob job;
    job.request_id = static_cast<uint64_t>(s);
    job.suffix = BenchPrompt(o.stream_prompt, o.seed * 100 + s, vocab);
    job.max_tokens = model->config.max_position_embeddings - o.stream_prompt;
    job.stop_ids = {-1};
    SCD_RETURN_IF_ERROR(engine->Submit(std::move(job), tl.For(static_cast<uint64_t>(s))));
  }
  auto streams_have = [&](size_t n) {
    return [&, n] {
      for (int s = 1; s <= o.streams; ++s) {
        if (tl.tokens[s].size() < n) return false;
      }
      return true;
    };
  };
  SCD_RETURN_IF_ERROR(tl.WaitUntil(streams_have(o.warm_tokens), "the streams never warmed up"));
  size_t warm = 0;  // tokens per stream at the arrival (at least warm_tokens)
  Clock::time_point arrival;
  {
    std::lock_guard<std::mutex> lock(tl.mu);
    arrival = Clock::now();
    for (int s = 1; s <= o.streams; ++s) warm = std::max(warm, tl.tokens[s].size());
  }
  const DecodeEngineStats stats_before = engine->stats();
  DecodeJob job;
  job.request_id = kLongId;
  job.payload = setup.payload;
  job.suffix = setup.suffix;
  job.max_tokens = 1;
  SCD_RETURN_IF_ERROR(engine->Submit(std::move(job), tl.For(kLongId)));
  SCD_RETURN_IF_ERROR(
      tl.WaitUntil([&] { return tl.ended[kLongId]; }, "the long prompt never ended"));
  SCD_RETURN_IF_ERROR(tl.long_status);
  // Two more tokens of every stream, so that each gap across the prefill has closed.
  SCD_RETURN_IF_ERROR(tl.WaitUntil(streams_have(warm + 2), "the streams stopped"));
  for (int s = 1; s <= o.streams; ++s) engine->Cancel(static_cast<uint64_t>(s));
  SCD_RETURN_IF_ERROR(
      tl.WaitUntil([&] { return static_cast<int>(tl.ended.size()) == o.streams + 1; }, "cancel"));

  ChunkedPrefillRun r;
  r.chunk = chunk;
  const DecodeEngineStats after = engine->stats();
  r.prefill_chunks = after.prefill_chunks - stats_before.prefill_chunks;
  r.rebuild_chunks = after.rebuild_chunks - stats_before.rebuild_chunks;
  r.first_token = tl.long_token;
  r.rebuild_ms = tl.long_timings.rebuild_ms;
  r.prefill_ms = tl.long_timings.suffix_prefill_ms;
  r.ttft_ms = MsBetween(arrival, tl.long_first);
  std::vector<double> before;
  for (int s = 1; s <= o.streams; ++s) {
    const std::vector<Clock::time_point>& t = tl.tokens[s];
    for (size_t i = 1; i < t.size(); ++i) {
      const double gap = MsBetween(t[i - 1], t[i]);
      if (t[i] <= arrival) {
        before.push_back(gap);
      } else if (t[i - 1] <= tl.long_first) {  // a gap open while the prompt was prefilled
        r.stall_ms = std::max(r.stall_ms, gap);
      }
    }
  }
  r.itl_ms = Median(before);
  return r;
}

}  // namespace

absl::StatusOr<ChunkedPrefillBenchReport> RunChunkedPrefillBench(
    const ChunkedPrefillBenchOptions& options) {
  if (options.streams < 1 || options.stream_prompt < 1 || options.warm_tokens < 2 ||
      options.prompt_tokens < 1 || options.chunks.empty() || options.sekv_budget < 0 ||
      options.sekv_budget > 1) {
    return absl::InvalidArgumentError(
        "chunked-prefill bench: streams, stream prompt and prompt tokens must be >= 1, warm "
        "tokens >= 2, at least one chunk size, and the SEKV budget in [0, 1]");
  }
  if (options.sekv_budget > 0 && (options.stream_prompt < 2 || options.prompt_tokens < 2)) {
    return absl::InvalidArgumentError(
        "chunked-prefill bench: SEKV prompts need at least two tokens");
  }
  if (!options.payload.empty()) {
    const absl::StatusOr<CodecMode> mode = ParseCodecMode(options.payload);
    if (!mode.ok() || *mode == CodecMode::kOracle) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "chunked-prefill bench: the payload is a mode that rebuilds (raw, quant8, quant4, "
          "recompute, scd-reuse, scd), not \"%s\"",
          options.payload));
    }
    if (options.payload_suffix < 1 || options.payload_suffix >= options.prompt_tokens) {
      return absl::InvalidArgumentError(
          "chunked-prefill bench: the payload's suffix needs 1 to prompt - 1 tokens");
    }
  }
  for (int c : options.chunks) {
    if (c < 0) return absl::InvalidArgumentError("chunked-prefill bench: a negative chunk size");
  }
  ChunkedPrefillBenchReport report;
  report.options = options;
  SCD_ASSIGN_OR_RETURN(report.config, BenchShapeConfig(options.shape));
  const int context = report.config.max_position_embeddings;
  if (options.prompt_tokens >= context ||
      options.stream_prompt + 4 * options.warm_tokens >= context) {
    return absl::InvalidArgumentError(
        absl::StrFormat("chunked-prefill bench: %d prompt tokens do not fit the context of %d",
                        options.prompt_tokens, context));
  }
  auto progress = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  SCD_ASSIGN_OR_RETURN(const Setup setup, MakeSetup(options, report.config, progress));
  const char* key = options.payload.empty() ? "prefill_chunk" : "rebuild_chunk";
  // One untimed run first: the first prefills of a process pay for thread pools and buffers.
  progress(absl::StrFormat("warm-up run (%s %d)", key, options.chunks.front()));
  SCD_RETURN_IF_ERROR(RunOne(options, setup, options.chunks.front()).status());
  for (int chunk : options.chunks) {
    progress(absl::StrFormat("%s %d: %d streams, then a %d-token prompt", key, chunk,
                             options.streams, options.prompt_tokens));
    SCD_ASSIGN_OR_RETURN(ChunkedPrefillRun r, RunOne(options, setup, chunk));
    progress(absl::StrFormat("%s %d: inter-token %.1f ms, stall %.1f ms, TTFT %.1f ms", key, chunk,
                             r.itl_ms, r.stall_ms, r.ttft_ms));
    report.same_first_token = report.same_first_token &&
                              (report.runs.empty() || r.first_token == report.runs[0].first_token);
    report.runs.push_back(r);
  }
  return report;
}

std::string FormatChunkedPrefillBenchReport(const ChunkedPrefillBenchReport& report,
                                            const std::string& command) {
  const ChunkedPrefillBenchOptions& o = report.options;
  const ChunkedPrefillRun* whole = nullptr;
  const ChunkedPrefillRun* smallest = nullptr;
  for (const ChunkedPrefillRun& r : report.runs) {
    if (r.chunk == 0) whole = &r;
    if (r.chunk > 0 && (smallest == nullptr || r.chunk < smallest->chunk)) smallest = &r;
  }
  const bool payload = !o.payload.empty();
  std::ostringstream md;
  md << "Command: `" << command << "`\n\n"
     << absl::StrFormat(
            "%s (synthetic weights), CPU backend, decode engine%s: %d streams running "
            "(prompts of %d tokens, greedy), then one prompt of %d tokens%s. Stall: the longest "
            "gap between two tokens of a running stream until that prompt's first token. Its "
            "rebuild and prefill: the long request's own stages, summed over its chunks (an "
            "oracle payload's prefill counts as its rebuild). First token of the long prompt the "
            "same at every chunk size: %s.\n\n",
            o.shape,
            o.sekv_budget > 0
                ? absl::StrFormat(
                      " on the SEKV path (budget %.2f; the long prompt's hierarchy is built "
                      "off the loop before its first token)",
                      o.sekv_budget)
                : std::string(),
            o.streams, o.stream_prompt, o.prompt_tokens,
            payload
                ? absl::StrFormat(" (%d tokens as a payload in mode %s, rebuilt, and %d "
                                  "suffix tokens, prefilled)",
                                  o.prompt_tokens - o.payload_suffix, o.payload, o.payload_suffix)
                : std::string(),
            report.same_first_token ? "yes" : "NO")
     << (payload ? "| rebuild_chunk | rebuilds" : "| prefill_chunk | prefills")
     << " | inter-token (ms) | stall (ms) | stall / inter-token | "
        "stall vs whole | long prompt TTFT (ms) | TTFT vs whole | its rebuild (ms) | its "
        "prefill (ms) |\n"
     << "|---|---|---|---|---|---|---|---|---|---|\n";
  auto vs_whole = [&](double x, double w) {
    return whole != nullptr && w > 0 ? absl::StrFormat("%.2fx", x / w) : std::string("-");
  };
  for (const ChunkedPrefillRun& r : report.runs) {
    md << absl::StrFormat(
        "| %s | %ld | %.1f | %.1f | %.1f | %s | %.1f | %s | %.1f | %.1f |\n",
        r.chunk == 0 ? std::string("0 (whole)") : absl::StrFormat("%d", r.chunk),
        payload ? r.rebuild_chunks : r.prefill_chunks, r.itl_ms, r.stall_ms,
        r.itl_ms > 0 ? r.stall_ms / r.itl_ms : 0, vs_whole(r.stall_ms, whole ? whole->stall_ms : 0),
        r.ttft_ms, vs_whole(r.ttft_ms, whole ? whole->ttft_ms : 0), r.rebuild_ms, r.prefill_ms);
  }
  if (whole != nullptr && smallest != nullptr && whole->stall_ms > 0 && whole->ttft_ms > 0) {
    md << absl::StrFormat("\nchunked_%s_stall_vs_whole=%.2f ttft_vs_whole=%.2f (chunk %d)\n",
                          payload ? "rebuild" : "prefill", smallest->stall_ms / whole->stall_ms,
                          smallest->ttft_ms / whole->ttft_ms, smallest->chunk);
  }
  return md.str();
}

}  // namespace scd::bench
