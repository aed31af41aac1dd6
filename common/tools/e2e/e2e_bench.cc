// See e2e_bench.h.
#include "common/tools/e2e/e2e_bench.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/eval/answer.h"
#include "common/eval/metrics.h"
#include "common/plot/plot.h"
#include "common/rpc/cluster_token.h"
#include "common/tools/cluster/daemon_process.h"
#include "common/tools/cluster/local_cluster.h"
#include "common/tools/loadgen/stats.h"
#include "proto/scd.grpc.pb.h"

namespace scd::e2e {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kToken[] = "e2e-bench-token";

struct Cluster {
  std::vector<std::unique_ptr<cluster::DaemonProcess>> decodes;
  std::unique_ptr<cluster::DaemonProcess> prefill;
  std::string grpc_address;
};

nlohmann::json PrefillJson(const E2eBenchOptions& o, const std::string& mode, double gbps,
                           bool cache, const std::string& grpc_address) {
  nlohmann::json c;
  c["base_model"] = o.base_model;
  c["http"] = {{"port", 0}};
  c["grpc"] = {{"listen", grpc_address}};
  c["control_plane"] = {
      {"cluster_token", kToken}, {"heartbeat_interval", "100ms"}, {"lease", "2s"}};
  c["data_plane"] = {{"transport", o.transport}, {"bandwidth_gbps", gbps}};
  c["prefix_cache"] = {{"enabled", cache}, {"block_tokens", 16}, {"max_consumer_suffix", 128}};
  // One request at a time: a long context's own predicted TTFT (a 4096-token prefill of the
  // synthetic pair takes about 20 s here) is no queue to shed.
  c["limits"] = {{"max_tokens", 256},
                 {"default_max_tokens", 16},
                 {"request_timeout", "300s"},
                 {"max_queue_wait", "300s"}};
  c["drain_timeout"] = "5s";
  c["specialists"] = nlohmann::json::array({{{"name", o.specialist_name},
                                             {"artifact", o.artifact},
                                             {"consumer_path", o.specialist_model},
                                             {"mode", mode},
                                             {"max_retries", 1}}});
  if (mode == "auto") c["specialists"][0]["quality_floor"] = o.quality_floor;
  return c;
}

// Decode daemons keep their registration across prefill restarts: only the prefill daemon is
// restarted between cells.
absl::Status StartPrefill(const E2eBenchOptions& o, Cluster& c, const std::string& mode,
                          double gbps, bool cache, const std::string& tag) {
  if (c.prefill != nullptr) c.prefill->Stop(std::chrono::seconds(10));
  c.prefill.reset();
  absl::StatusOr<cluster::StartedPrefill> started = cluster::StartPrefillDaemon(
      o.bin_dir, PrefillJson(o, mode, gbps, cache, c.grpc_address), o.workdir,
      absl::StrCat("prefill-", tag), std::chrono::seconds(120));
  if (!started.ok()) return started.status();
  c.prefill = std::move(started->process);
  return cluster::WaitForDecodeInstances(started->http_port, o.specialist_name, *c.prefill,
                                         c.decodes, std::chrono::seconds(60));
}

struct Outcome {
  bool ok = false;
  double ttft_ms = 0;
  std::string text;
  scd::v1::Timings timings;
  std::string error;
};

Outcome Ask(scd::v1::Generation::Stub& stub, const E2eBenchOptions& o, const std::string& prompt) {
  scd::v1::GenerateRequest req;
  req.set_model(o.specialist_name);
  req.set_prompt(prompt);
  req.set_max_tokens(o.max_tokens);
  req.mutable_sampling()->set_temperature(0);
  req.add_stop(".");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  Outcome out;
  const auto t0 = Clock::now();
  auto reader = stub.Generate(&ctx, req);
  scd::v1::GenerateEvent e;
  bool first = true;
  while (reader->Read(&e)) {
    if (e.has_delta()) {
      if (first) out.ttft_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      first = false;
      out.text += e.delta().text();
    } else if (e.has_done()) {
      out.timings = e.done().timings();
      out.ok = true;
      if (first) out.ttft_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    } else if (e.has_error()) {
      out.error = e.error().message();
    }
  }
  grpc::Status st = reader->Finish();
  if (!st.ok()) {
    out.ok = false;
    out.error = st.error_message();
  }
  // The daemon's time to first token, from the request's arrival to its first generated token:
  // the first text streamed can wait for more tokens (one that ends inside a character streams
  // nothing), and which tokens come first depends on the model's output, not on the mode.
  if (out.ok && out.timings.ttft_ms() > 0) out.ttft_ms = out.timings.ttft_ms();
  return out;
}

// Describes the decode daemons that register with the control plane at `grpc_address`.
cluster::DecodeDaemonSpec DecodeSpec(const E2eBenchOptions& o, const std::string& grpc_address) {
  cluster::DecodeDaemonSpec spec;
  spec.model_name = o.specialist_name;
  spec.model_path = o.specialist_model;
  spec.artifact = o.artifact;
  spec.transport = o.transport;
  spec.control_plane = grpc_address;
  spec.cluster_token = kToken;
  spec.drain_timeout = "5s";
  return spec;
}

// Stops any running decode daemons and starts a fresh set, tagged with the next generation.
absl::Status StartDecodes(const E2eBenchOptions& o, const cluster::DecodeDaemonSpec& spec,
                          Cluster& c, int& generation) {
  for (auto& d : c.decodes) d->Stop(std::chrono::seconds(10));
  c.decodes.clear();
  ++generation;
  // Long contexts: room for the longest prompt and its answer (the default is 4096 tokens).
  int longest = 0;
  for (const SharedPrefixContext& ctx : o.workload) longest = std::max(longest, ctx.context_tokens);
  for (int i = 0; i < o.decode_daemons; ++i) {
    nlohmann::json config = cluster::DecodeDaemonJson(spec, i);
    config["engine"] = {{"max_batch", 8}, {"max_queue", 64}};
    // No shadow oracle: its idle-time pieces would land in the gaps between the bench's
    // sequential requests and delay the next one's admission by up to a piece.
    config["quality"] = {{"shadow_rate", 0}};
    if (longest + 512 > 4096) config["engine"]["max_tokens"] = longest + 512;
    absl::StatusOr<std::unique_ptr<cluster::DaemonProcess>> d = cluster::StartWithConfig(
        o.bin_dir + "/scd-decode", config, o.workdir, absl::StrCat("decode-", i, "-", generation));
    if (!d.ok()) return d.status();
    c.decodes.push_back(std::move(*d));
  }
  return absl::OkStatus();
}

// Picks the control plane's port and starts the decode daemons, which keep retrying
// registration until a prefill daemon is up there; what they were started with.
absl::StatusOr<cluster::DecodeDaemonSpec> StartCluster(const E2eBenchOptions& o, Cluster& c,
                                                       int& generation) {
  absl::StatusOr<int> port = cluster::PickFreePort();
  if (!port.ok()) return port.status();
  c.grpc_address = absl::StrCat("127.0.0.1:", *port);
  cluster::DecodeDaemonSpec spec = DecodeSpec(o, c.grpc_address);
  if (absl::Status st = StartDecodes(o, spec, c, generation); !st.ok()) return st;
  return spec;
}

// Starts the prefill daemon for one cell, restarting the decode daemons once if they do not
// re-register; a final failure carries the decode daemons' log tails.
absl::Status StartCellPrefill(const E2eBenchOptions& o, const cluster::DecodeDaemonSpec& spec,
                              Cluster& c, int& generation, const std::string& mode, double gbps,
                              bool warm, const std::string& tag, const ProgressFn& progress) {
  absl::Status started = StartPrefill(o, c, mode, gbps, warm, tag);
  if (!started.ok()) {
    // A decode daemon that did not re-register with the restarted prefill daemon in time
    // is restarted too, so that one stuck daemon cannot void the run; the progress log
    // shows each restart.
    if (progress)
      progress(absl::StrCat("  decode daemons did not re-register; restarting them: ",
                            started.message().substr(0, 400)));
    if (absl::Status st = StartDecodes(o, spec, c, generation); !st.ok()) return st;
    started = StartPrefill(o, c, mode, gbps, warm, tag + "-retry");
  }
  if (!started.ok()) {
    std::string tails;
    for (auto& d : c.decodes) absl::StrAppend(&tails, "\n", d->log_path(), ":\n", d->LogTail(1500));
    return absl::Status(started.code(), absl::StrCat(started.message(), tails));
  }
  return absl::OkStatus();
}

// Adds one request's server-side stage timings to the running sums.
void AddTimings(const scd::v1::Timings& t, StageMeans& s) {
  s.queue_ms += t.queue_ms();
  s.prefill_ms += t.prefill_ms();
  s.encode_ms += t.encode_ms();
  s.transfer_ms += t.transfer_ms();
  s.rebuild_ms += t.rebuild_ms();
  s.suffix_prefill_ms += t.suffix_prefill_ms();
  s.server_ttft_ms += t.ttft_ms();
  s.payload_bytes += static_cast<double>(t.payload_bytes());
}

// Every figure of `s`, in one order.
std::array<double*, 8> StageFields(StageMeans& s) {
  return {&s.queue_ms,   &s.prefill_ms,        &s.encode_ms,      &s.transfer_ms,
          &s.rebuild_ms, &s.suffix_prefill_ms, &s.server_ttft_ms, &s.payload_bytes};
}

// One cell's raw measurements: counts and stage sums in `cell`, its TTFT samples, its F1 sum.
// Passes of the same cell add up (Merge) before FinishCell turns them into the cell's figures.
struct CellSamples {
  E2eCell cell;
  std::vector<double> ttfts;
  double f1_sum = 0;

  void Merge(const CellSamples& other) {
    cell.requests += other.cell.requests;
    cell.errors += other.cell.errors;
    cell.cache_hits += other.cell.cache_hits;
    cell.scored += other.cell.scored;
    for (const auto& [name, n] : other.cell.chosen) cell.chosen[name] += n;
    const std::array<double*, 8> sums = StageFields(cell.stages);
    StageMeans more = other.cell.stages;
    const std::array<double*, 8> add = StageFields(more);
    for (size_t i = 0; i < sums.size(); ++i) *sums[i] += *add[i];
    ttfts.insert(ttfts.end(), other.ttfts.begin(), other.ttfts.end());
    f1_sum += other.f1_sum;
  }
};

// The cell's figures: its sums turned into means and its TTFT samples into percentiles.
E2eCell FinishCell(const CellSamples& samples) {
  E2eCell cell = samples.cell;
  if (cell.requests > 0) {
    const double n = cell.requests;
    for (double* v : StageFields(cell.stages)) *v /= n;
    const loadgen::Distribution ttft = loadgen::Summarize(samples.ttfts);
    cell.ttft_p50_ms = ttft.p50;
    cell.ttft_p99_ms = ttft.p99;
    cell.ttft_mean_ms = ttft.mean;
  }
  cell.f1 = cell.scored > 0 ? samples.f1_sum / cell.scored : 0;
  return cell;
}

// Sends the whole workload through the running cluster: one pass of one cell.
CellSamples MeasureCell(const E2eBenchOptions& o, const Cluster& c, const std::string& mode,
                        double gbps, bool warm, const ProgressFn& progress) {
  auto stub = scd::v1::Generation::NewStub(
      grpc::CreateChannel(c.grpc_address, grpc::InsecureChannelCredentials()));
  CellSamples samples;
  E2eCell& cell = samples.cell;
  cell.mode = mode;
  cell.bandwidth_gbps = gbps;
  cell.cache = warm ? "warm" : "cold";
  for (const SharedPrefixContext& ctx : o.workload) {
    for (size_t q = 0; q < ctx.questions.size(); ++q) {
      Outcome r = Ask(*stub, o, ctx.questions[q].prompt);
      if (!r.ok) {
        ++cell.errors;
        if (progress) progress(absl::StrCat("  error: ", r.error));
        continue;
      }
      if (o.score_f1) {
        samples.f1_sum += eval::TokenF1(eval::ExtractAnswer(r.text), ctx.questions[q].answer);
        ++cell.scored;
      }
      if (warm && q == 0) continue;  // fills the cache
      ++cell.requests;
      samples.ttfts.push_back(r.ttft_ms);
      cell.cache_hits += r.timings.prefix_cache_hit() ? 1 : 0;
      ++cell.chosen[r.timings.rung_name().empty() ? r.timings.mode() : r.timings.rung_name()];
      AddTimings(r.timings, cell.stages);
    }
  }
  return samples;
}

}  // namespace

std::vector<E2eCellKey> E2eCellOrder(const E2eBenchOptions& o, int pass) {
  std::vector<E2eCellKey> keys;
  const size_t modes = o.modes.size();
  for (size_t k = 0; k < modes; ++k) {
    const std::string& mode = o.modes[(k + static_cast<size_t>(std::max(pass, 0))) % modes];
    for (double gbps : o.bandwidths_gbps) {
      for (const bool warm : {true, false}) {
        if ((warm && !o.warm) || (!warm && !o.cold)) continue;
        keys.push_back({mode, gbps, warm});
      }
    }
  }
  return keys;
}

absl::StatusOr<std::vector<E2eCell>> RunE2eBench(const E2eBenchOptions& o,
                                                 const ProgressFn& progress) {
  if (o.workload.empty()) return absl::InvalidArgumentError("empty workload");
  if (o.passes < 1) return absl::InvalidArgumentError("passes must be at least 1");
  Cluster c;
  int generation = 0;
  absl::StatusOr<cluster::DecodeDaemonSpec> started = StartCluster(o, c, generation);
  if (!started.ok()) return started.status();
  const cluster::DecodeDaemonSpec& spec = *started;
  const std::vector<E2eCellKey> keys = E2eCellOrder(o, 0);
  std::vector<CellSamples> pooled(keys.size());
  const int total = static_cast<int>(keys.size()) * o.passes;
  int done = 0;
  for (int pass = 0; pass < o.passes; ++pass) {
    for (const E2eCellKey& k : E2eCellOrder(o, pass)) {
      const size_t i = static_cast<size_t>(std::find(keys.begin(), keys.end(), k) - keys.begin());
      const std::string tag =
          absl::StrCat(k.mode, "-", k.bandwidth_gbps, "g-", k.warm ? "warm" : "cold",
                       o.passes > 1 ? absl::StrCat("-pass", pass + 1) : "");
      if (absl::Status st = StartCellPrefill(o, spec, c, generation, k.mode, k.bandwidth_gbps,
                                             k.warm, tag, progress);
          !st.ok()) {
        return st;
      }
      CellSamples samples = MeasureCell(o, c, k.mode, k.bandwidth_gbps, k.warm, progress);
      if (progress) {
        const E2eCell cell = FinishCell(samples);
        progress(absl::StrFormat(
            "[%d/%d] %-9s %6.0f Gbit/s %s: TTFT p50 %.1f ms p99 %.1f ms, payload %.0f KB, F1 %.3f, "
            "%d errors",
            ++done, total, k.mode, k.bandwidth_gbps, cell.cache, cell.ttft_p50_ms, cell.ttft_p99_ms,
            cell.stages.payload_bytes / 1024, cell.f1, cell.errors));
      }
      if (pass == 0) {
        pooled[i] = std::move(samples);
      } else {
        pooled[i].Merge(samples);
      }
    }
  }
  if (c.prefill != nullptr) c.prefill->Stop(std::chrono::seconds(10));
  for (auto& d : c.decodes) d->Stop(std::chrono::seconds(10));
  std::vector<E2eCell> cells;
  for (const CellSamples& s : pooled) cells.push_back(FinishCell(s));
  return cells;
}

namespace {

// Changes the running prefill daemon's link (Admin.SetLinkBandwidth, with the cluster token).
absl::Status SetLink(const Cluster& c, double gbps) {
  auto stub = scd::v1::Admin::NewStub(
      grpc::CreateChannel(c.grpc_address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata(rpc::kClusterTokenMetadata, kToken);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  scd::v1::SetLinkBandwidthRequest req;
  req.set_gbps(gbps);
  scd::v1::SetLinkBandwidthResponse resp;
  grpc::Status st = stub->SetLinkBandwidth(&ctx, req, &resp);
  if (!st.ok())
    return absl::UnavailableError(absl::StrCat("SetLinkBandwidth: ", st.error_message()));
  return absl::OkStatus();
}

LinkSample SampleOf(const Outcome& r, int step, double t) {
  LinkSample x;
  x.t_seconds = t;
  x.step = step;
  x.ok = r.ok;
  x.mode = r.timings.mode();
  x.rung_name = r.timings.rung_name().empty() ? r.timings.mode() : r.timings.rung_name();
  x.ttft_ms = r.ttft_ms;
  x.transfer_ms = r.timings.transfer_ms();
  x.payload_bytes = static_cast<double>(r.timings.payload_bytes());
  return x;
}

// One step: the link set, then requests until its time is up.
void RunOneStep(const E2eBenchOptions& o, scd::v1::Generation::Stub& stub, int k,
                const LinkStep& step, Clock::time_point t0, double step_start, size_t& next,
                std::vector<LinkSample>& samples, const ProgressFn& progress) {
  std::vector<const SharedPrefixQuestion*> questions;
  for (const SharedPrefixContext& ctx : o.workload) {
    for (const SharedPrefixQuestion& q : ctx.questions) questions.push_back(&q);
  }
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  double report_at = step_start + 10;
  while (now() < step_start + step.seconds) {
    const double t = now();
    const Outcome r = Ask(stub, o, questions[next++ % questions.size()]->prompt);
    samples.push_back(SampleOf(r, k, t));
    if (!r.ok && progress) progress(absl::StrCat("  error: ", r.error));
    if (progress && now() >= report_at) {
      report_at += 10;
      progress(absl::StrFormat("  %.0f s: %d requests, last %s in %.1f ms", now(), samples.size(),
                               samples.back().rung_name, samples.back().ttft_ms));
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<LinkSample>> RunLinkSteps(const E2eBenchOptions& o,
                                                     const std::vector<LinkStep>& steps,
                                                     const ProgressFn& progress) {
  if (o.workload.empty() || steps.empty()) return absl::InvalidArgumentError("nothing to run");
  Cluster c;
  int generation = 0;
  absl::StatusOr<cluster::DecodeDaemonSpec> started = StartCluster(o, c, generation);
  if (!started.ok()) return started.status();
  const cluster::DecodeDaemonSpec& spec = *started;
  if (absl::Status st = StartCellPrefill(o, spec, c, generation, "auto", steps[0].gbps, true,
                                         "auto-link-steps", progress);
      !st.ok()) {
    return st;
  }
  auto stub = scd::v1::Generation::NewStub(
      grpc::CreateChannel(c.grpc_address, grpc::InsecureChannelCredentials()));
  std::vector<LinkSample> samples;
  size_t next = 0;
  double step_start = 0;
  const Clock::time_point t0 = Clock::now();
  for (size_t k = 0; k < steps.size(); ++k) {
    if (absl::Status st = SetLink(c, steps[k].gbps); !st.ok()) return st;
    if (progress)
      progress(absl::StrFormat("step %d/%d: %g Gbit/s for %g s", k + 1, steps.size(), steps[k].gbps,
                               steps[k].seconds));
    RunOneStep(o, *stub, static_cast<int>(k), steps[k], t0, step_start, next, samples, progress);
    step_start += steps[k].seconds;
  }
  c.prefill->Stop(std::chrono::seconds(10));
  for (auto& d : c.decodes) d->Stop(std::chrono::seconds(10));
  return samples;
}

nlohmann::json E2eCellsJson(const E2eBenchOptions& o, const std::vector<E2eCell>& cells) {
  nlohmann::json j;
  j["label"] = o.label;
  j["base_model"] = o.base_model;
  j["specialist_model"] = o.specialist_model;
  j["decode_daemons"] = o.decode_daemons;
  j["transport"] = o.transport;
  j["max_tokens"] = o.max_tokens;
  j["passes"] = o.passes;
  j["contexts"] = o.workload.size();
  j["questions_per_context"] = o.workload.empty() ? 0 : o.workload[0].questions.size();
  double tokens = 0;
  for (const auto& c : o.workload) tokens += c.context_tokens;
  j["mean_context_tokens"] =
      o.workload.empty() ? 0 : tokens / static_cast<double>(o.workload.size());
  j["cells"] = nlohmann::json::array();
  for (const E2eCell& c : cells) {
    j["cells"].push_back({{"mode", c.mode},
                          {"bandwidth_gbps", c.bandwidth_gbps},
                          {"cache", c.cache},
                          {"requests", c.requests},
                          {"errors", c.errors},
                          {"cache_hits", c.cache_hits},
                          {"ttft_p50_ms", c.ttft_p50_ms},
                          {"ttft_p99_ms", c.ttft_p99_ms},
                          {"ttft_mean_ms", c.ttft_mean_ms},
                          {"stages_mean_ms",
                           {{"queue", c.stages.queue_ms},
                            {"producer_prefill", c.stages.prefill_ms},
                            {"encode", c.stages.encode_ms},
                            {"transfer", c.stages.transfer_ms},
                            {"rebuild", c.stages.rebuild_ms},
                            {"suffix_prefill", c.stages.suffix_prefill_ms},
                            {"server_ttft", c.stages.server_ttft_ms}}},
                          {"payload_bytes_mean", c.stages.payload_bytes},
                          {"f1", c.f1},
                          {"scored", c.scored},
                          {"chosen", c.chosen}});
  }
  return j;
}

std::string E2eCellsMarkdown(const std::vector<E2eCell>& cells) {
  std::string md =
      "| mode | Gbit/s | cache | n | TTFT p50 ms | TTFT p99 ms | oracle/this (p50) | prefill | "
      "encode | "
      "transfer | rebuild | suffix prefill | payload KB | F1 | errors |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const E2eCell& c : cells) {
    double oracle = 0;
    for (const E2eCell& o : cells) {
      if (o.mode == "oracle" && o.bandwidth_gbps == c.bandwidth_gbps && o.cache == c.cache)
        oracle = o.ttft_p50_ms;
    }
    absl::StrAppendFormat(
        &md,
        "| %s | %g | %s | %d | %.1f | %.1f | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f | "
        "%d |\n",
        c.mode, c.bandwidth_gbps, c.cache, c.requests, c.ttft_p50_ms, c.ttft_p99_ms,
        oracle > 0 && c.ttft_p50_ms > 0 ? absl::StrFormat("%.2fx", oracle / c.ttft_p50_ms) : "-",
        c.stages.prefill_ms, c.stages.encode_ms, c.stages.transfer_ms, c.stages.rebuild_ms,
        c.stages.suffix_prefill_ms, c.stages.payload_bytes / 1024, c.f1, c.errors);
  }
  return md;
}

absl::Status WriteE2ePlot(const std::vector<E2eCell>& cells, const std::string& title,
                          const std::string& path) {
  plot::Plot p(900, 600);
  p.SetTitle(title);
  p.SetXLabel("emulated bandwidth (Gbit/s)");
  p.SetYLabel("TTFT p50 (ms)");
  p.SetLogX(true);
  bool any_warm = false;
  for (const E2eCell& c : cells) any_warm |= c.cache == "warm";
  const std::string cache = any_warm ? "warm" : "cold";
  std::vector<std::string> modes;
  for (const E2eCell& c : cells) {
    if (std::find(modes.begin(), modes.end(), c.mode) == modes.end()) modes.push_back(c.mode);
  }
  for (const std::string& m : modes) {
    std::vector<double> xs, ys;
    for (const E2eCell& c : cells) {
      if (c.mode == m && c.cache == cache && c.requests > 0) {
        xs.push_back(c.bandwidth_gbps);
        ys.push_back(c.ttft_p50_ms);
      }
    }
    if (!xs.empty()) {
      if (absl::Status st = p.AddSeries(absl::StrCat(m, " (", cache, ")"), xs, ys); !st.ok())
        return st;
    }
  }
  return p.WritePng(path);
}

}  // namespace scd::e2e
