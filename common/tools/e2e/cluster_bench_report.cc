// See cluster_bench.h: the benchmark's JSON and Markdown reports.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/tools/e2e/cluster_bench.h"

namespace scd::e2e {
namespace {

std::string Fmt(double v, int digits = 1) { return absl::StrFormat("%.*f", digits, v); }

struct Spread {
  double min = 0, median = 0, max = 0;
};

Spread SpreadOf(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {v.front(), n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.back()};
}

}  // namespace

// The JSON keys are the members' names.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(StreamRound, streams, identical, different_text, errors, lost,
                                   duplicated, streaming_at_kill, kill_at_s, last_outcome_s,
                                   examples)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(KillSetting, migration_limit, undisturbed, killed,
                                   migrations_completed, migrations_failed, migrations_refused,
                                   retries_before_first_token)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ThroughputRun, label, prefill_daemons, issued, ok, duration_s,
                                   requests_per_s, output_tokens_per_s, ttft_p50_ms, ttft_p99_ms)

nlohmann::json ClusterBenchJson(const ClusterBenchOptions& o, const ClusterBenchResult& r) {
  nlohmann::json j;
  j["tool"] = "scd-cluster-bench";
  j["date"] = r.date;
  j["machine"] = {{"nproc", r.nproc}, {"cpu_model", r.cpu_model}};
  j["machine"]["openblas_num_threads"] = r.openblas_threads;
  j["machine"]["loadavg_start"] = r.loadavg_start;
  j["machine"]["loadavg_end"] = r.loadavg_end;
  j["model"] = o.specialist_name;
  j["wall_s"] = r.wall_s;
  j["kill"] = {{"streams", o.streams}, {"stream_tokens", o.stream_tokens}};
  j["kill"]["distinct_prompts"] = o.distinct_prompts;
  j["kill"]["min_step_interval"] = o.kill_step_interval;
  j["kill"]["kill_after_streaming"] = o.kill_after_streaming;
  j["kill"]["settings"] = r.kill;
  j["membership"] = {{"etcd_members", o.etcd_members}, {"lease", o.lease}};
  j["membership"]["repeats"] = o.repeats;
  j["membership"]["rows"] = nlohmann::json::array();
  for (const Timing& t : r.membership) {
    const Spread s = SpreadOf(t.samples_ms);
    nlohmann::json row = {{"name", t.name}, {"samples_ms", t.samples_ms}};
    row["min_ms"] = s.min;
    row["median_ms"] = s.median;
    row["max_ms"] = s.max;
    j["membership"]["rows"].push_back(std::move(row));
  }
  j["throughput"] = {{"concurrency", o.concurrency}, {"requests", o.requests}};
  j["throughput"]["warmup"] = o.warmup;
  j["throughput"]["max_tokens"] = o.max_tokens;
  j["throughput"]["prompt_words"] = o.prompt_words;
  j["throughput"]["runs"] = r.throughput;
  if (r.throughput.size() == 2 && r.throughput[0].requests_per_s > 0) {
    j["throughput"]["ratio_requests_per_s"] =
        r.throughput[1].requests_per_s / r.throughput[0].requests_per_s;
    j["throughput"]["ratio_output_tokens_per_s"] =
        r.throughput[1].output_tokens_per_s / r.throughput[0].output_tokens_per_s;
  }
  return j;
}

namespace {

std::string KillMarkdown(const ClusterBenchOptions& o, const ClusterBenchResult& r) {
  std::string md = absl::StrCat(
      "## kill -9 of a decode daemon under ", o.streams,
      " greedy streams\n\nOne prefill daemon "
      "(embedded registry), two decode daemons of ",
      o.specialist_name, " with `engine.min_step_interval: ", o.kill_step_interval, "`; ",
      o.streams, " streams of ", o.stream_tokens, " tokens over ", o.distinct_prompts,
      " prompts, judged "
      "against single undisturbed streams. decode-1 gets SIGKILL once ",
      o.kill_after_streaming,
      " streams have a token.\n\n| migration_limit | round | identical text | different text | "
      "errors | lost | duplicated | streaming at kill | last outcome after kill | migrations "
      "completed / failed / refused | retried before 1st token |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const KillSetting& s : r.kill) {
    for (const StreamRound* round : {&s.undisturbed, &s.killed}) {
      const bool k = round == &s.killed;
      absl::StrAppend(&md, "| ", s.migration_limit, " | ", k ? "kill -9 decode-1" : "undisturbed",
                      " | ", round->identical, " | ", round->different_text, " | ", round->errors,
                      " | ", round->lost, " | ", round->duplicated, " | ",
                      k ? absl::StrCat(round->streaming_at_kill, " of ", round->streams) : "-",
                      " | ", k ? Fmt(round->last_outcome_s, 2) + " s" : "-", " | ",
                      k ? absl::StrCat(s.migrations_completed, " / ", s.migrations_failed, " / ",
                                       s.migrations_refused)
                        : "-",
                      " | ", k ? absl::StrCat(s.retries_before_first_token) : "-", " |\n");
    }
  }
  for (const KillSetting& s : r.kill) {
    for (const std::string& e : s.killed.examples) {
      absl::StrAppend(&md, "\nmigration_limit ", s.migration_limit, ", e.g.: `", e, "`\n");
    }
  }
  return md;
}

std::string MembershipMarkdown(const ClusterBenchOptions& o, const ClusterBenchResult& r) {
  std::string md = absl::StrCat(
      "\n## etcd membership\n\n", o.etcd_members,
      "-member etcd, 2 prefill daemons and 2 "
      "decode daemons on `control_plane.registry: etcd`, `lease: ",
      o.lease,
      "` on all. Per "
      "repeat (",
      o.repeats,
      ") one more decode daemon is started, then killed with SIGKILL. A "
      "decode daemon logs `decode_started` once its announcement is in etcd, so the prefill "
      "daemons may log `decode_joined` first. They refresh their `scd_decode_instances` gauge "
      "once a second, so the gauge rows include up to 1 s of that sampling; routing does not "
      "wait for it.\n\n| measurement | n | min ms | median ms | max ms |\n|---|---|---|---|---|\n");
  for (const Timing& t : r.membership) {
    const Spread s = SpreadOf(t.samples_ms);
    absl::StrAppend(&md, "| ", t.name, " | ", t.samples_ms.size(), " | ", Fmt(s.min, 0), " | ",
                    Fmt(s.median, 0), " | ", Fmt(s.max, 0), " |\n");
  }
  return md;
}

std::string ThroughputMarkdown(const ClusterBenchOptions& o, const ClusterBenchResult& r) {
  std::string md = absl::StrCat(
      "\n## Two prefill daemons against one\n\nThe same etcd cluster (2 decode daemons, normal "
      "step time): closed loop at concurrency ",
      o.concurrency, ", ", o.requests, " streaming requests (after ", o.warmup, " warm-up) of ",
      o.prompt_words, "-word synthetic prompts, ", o.max_tokens,
      " greedy tokens each. Every daemon, etcd and "
      "the client share this machine's ",
      r.nproc,
      " CPUs.\n\n| through | ok / issued | req/s | "
      "output tok/s | TTFT p50 ms | TTFT p99 ms |\n|---|---|---|---|---|---|\n");
  for (const ThroughputRun& t : r.throughput) {
    absl::StrAppend(&md, "| ", t.label, " | ", t.ok, " / ", t.issued, " | ", Fmt(t.requests_per_s),
                    " | ", Fmt(t.output_tokens_per_s), " | ", Fmt(t.ttft_p50_ms), " | ",
                    Fmt(t.ttft_p99_ms), " |\n");
  }
  if (r.throughput.size() == 2 && r.throughput[0].requests_per_s > 0) {
    absl::StrAppend(
        &md, "\nTwo against one: ",
        Fmt(r.throughput[1].requests_per_s / r.throughput[0].requests_per_s, 2), "x requests/s, ",
        Fmt(r.throughput[1].output_tokens_per_s / r.throughput[0].output_tokens_per_s, 2),
        "x output tokens/s.\n");
  }
  return md;
}

}  // namespace

std::string ClusterBenchMarkdown(const ClusterBenchOptions& o, const ClusterBenchResult& r,
                                 const std::string& command) {
  std::string md = absl::StrCat(
      "# scd-cluster-bench\n\n", "Run on ", r.date, ": ", r.nproc, " CPUs (", r.cpu_model,
      "), OPENBLAS_NUM_THREADS ", r.openblas_threads.empty() ? "unset" : r.openblas_threads,
      "; the whole run took ", Fmt(r.wall_s, 0), " s. Load average (1, 5, 15 min) ",
      r.loadavg_start, " at the start, ", r.loadavg_end, " at the end.\n\n```sh\n", command,
      "\n```\n\n");
  if (!r.kill.empty()) md += KillMarkdown(o, r);
  if (!r.membership.empty()) md += MembershipMarkdown(o, r);
  if (!r.throughput.empty()) md += ThroughputMarkdown(o, r);
  return md;
}

}  // namespace scd::e2e
