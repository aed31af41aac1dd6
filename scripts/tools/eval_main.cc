// scd-eval: evaluates codec modes for one producer/consumer pair in one run and writes JSON
// ({"modes": {...}}), plus a Markdown table, CSV and PNG with --report PREFIX. Ablations:
// --ablate-patch adds scd rows with patch budget k = 0..L (the artifact's greedy order).
// All logic lives in common/scd/evaluation.h.
// --sekv-budget F adds the SEKV evaluation (common/sekv/sekv_evaluation.h): SEKV, the
// heavy-hitter and chunk-summary baselines at GPU-tier bytes = F x full KV, under "sekv",
// "h2o" and "chunk" in the same JSON. --modes "" skips the codec modes.
// --online: the shadow oracle's statistics on the --babi or --text prompts, from real daemons
// with quality.shadow_rate 1 and from this process, side by side
// (common/tools/e2e/online_eval.h); JSON to --json, the table to stdout and PREFIX.md.
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/scd/evaluation.h"
#include "common/scd/model_pair.h"
#include "common/scd/shared_artifact.h"
#include "common/sekv/sekv_artifact.h"
#include "common/sekv/sekv_evaluation.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tools/cli/flags.h"
#include "common/tools/e2e/online_eval.h"

namespace {

constexpr char kProgram[] = "scd-eval";

using Progress = std::function<void(const std::string&)>;

// The command line.
struct Options {
  std::string producer_dir, consumer_dir, artifact_path, babi;
  std::string modes = "oracle,raw,quant8,quant4,recompute,scd-reuse,scd";
  std::string json_out, report, text;
  bool ablate_patch = false;
  scd::EvalConfig cfg;
  float sekv_budget = 0;
  std::string sekv_router;
  scd::sekv::SekvEvalConfig sk;
  bool sekv_ablate = false;
  float sekv_energy = static_cast<float>(scd::sekv::SekvEvalConfig{}.sekv.store.energy);
  std::string sekv_resolution = "token";
  bool online = false;
  scd::e2e::OnlineEvalOptions on;
};

void AddCodecFlags(scd::cli::FlagParser& flags, Options* o) {
  flags.AddString("producer", &o->producer_dir, "producer checkpoint directory", true);
  flags.AddString("consumer", &o->consumer_dir, "consumer checkpoint directory", true);
  flags.AddString("artifact", &o->artifact_path,
                  "calibration artifact (needed by recompute/scd modes)");
  flags.AddString("babi", &o->babi, "bAbI-format files, comma-separated");
  flags.AddString("modes", &o->modes, "comma-separated codec modes");
  flags.AddString("json", &o->json_out, "write results JSON here", true);
  flags.AddString("text", &o->text, "perplexity text (TinyStories-style passages)");
  flags.AddString("report", &o->report, "write PREFIX.md, PREFIX.csv and PREFIX.png");
  flags.AddInt("max-examples", &o->cfg.max_examples, "bAbI questions in total (0 = all)");
  flags.AddInt("max-per-file", &o->cfg.max_examples_per_file,
               "bAbI questions per file (0 = no cap)");
  flags.AddInt("text-passages", &o->cfg.text_passages, "perplexity passages");
  flags.AddInt("timing-tokens", &o->cfg.timing_tokens,
               "prompt length of the rebuild-vs-prefill timing (0 = skip)");
  flags.AddInt("kivi-group", &o->cfg.codec.kivi_group, "KIVI group size");
  flags.AddBool("ablate-patch", &o->ablate_patch, "add scd rows for patch budget k = 0..L");
}

void AddOnlineFlags(scd::cli::FlagParser& flags, Options* o) {
  flags.AddBool("online", &o->online,
                "the shadow oracle's statistics from real daemons and from this process");
  flags.AddString("bin-dir", &o->on.bin_dir, "--online: where scd-prefill and scd-decode are");
  flags.AddString("online-mode", &o->on.mode, "--online: the codes' mode");
  flags.AddInt("online-rung", &o->on.rung, "--online: the rate ladder's rung (scd)");
  flags.AddInt("online-prompts", &o->on.max_prompts, "--online: prompts served");
  flags.AddInt("online-prompt-tokens", &o->on.prompt_tokens,
               "--online: tokens of each --text passage sent as a prompt");
  flags.AddInt("online-tokens", &o->on.tokens, "--online: tokens generated and compared");
}

// --online: the report to --json, stdout and --report's PREFIX.md.
int EvaluateOnline(const scd::cli::FlagParser& flags, Options& o, const std::string& command) {
  if (o.artifact_path.empty()) return flags.Fail("--online needs --artifact");
  o.on.base_model = o.producer_dir;
  o.on.specialist_model = o.consumer_dir;
  o.on.artifact = o.artifact_path;
  o.on.babi_files = o.babi;
  o.on.text_file = o.text;
  o.on.workdir = o.json_out + ".work";
  std::error_code ec;
  std::filesystem::create_directories(o.on.workdir, ec);
  for (std::string* path :
       {&o.on.base_model, &o.on.specialist_model, &o.on.artifact, &o.on.bin_dir}) {
    *path = std::filesystem::absolute(*path).lexically_normal().string();
  }
  auto report = scd::e2e::RunOnlineEval(
      o.on, [](const std::string& line) { std::cerr << "  " << line << "\n"; });
  if (!report.ok()) return flags.Fail(report.status());
  nlohmann::json out = report->ToJson();
  out["command"] = command;
  if (absl::Status st = scd::WriteFileAtomically(o.json_out, out.dump(2)); !st.ok()) {
    return flags.Fail(st);
  }
  if (!o.report.empty()) {
    absl::Status st = scd::WriteFileAtomically(o.report + ".md", report->Markdown());
    if (!st.ok()) return flags.Fail(st);
  }
  std::cout << report->Markdown();
  return 0;
}

void AddSekvFlags(scd::cli::FlagParser& flags, Options* o) {
  scd::sekv::SekvEvalConfig& sk = o->sk;
  flags.AddFloat("sekv-budget", &o->sekv_budget,
                 "SEKV: GPU-tier bytes as a fraction of full KV (0 = skip SEKV)");
  flags.AddString("sekv-router", &o->sekv_router,
                  "SEKV: calibrated router artifact (default: share-threshold gate)");
  flags.AddInt("sekv-text-samples", &sk.text_samples, "SEKV: packed full-context text samples");
  flags.AddInt("sekv-scored", &sk.scored_tokens, "SEKV: tokens decoded and scored per text sample");
  flags.AddInt("sekv-niah-trials", &sk.niah_trials, "SEKV: needle prompts per depth (0 = skip)");
  flags.AddFloat("sekv-alpha", &sk.sekv.segmenter.alpha,
                 "SEKV: boundary threshold in std above the mean");
  flags.AddInt("sekv-min-span", &sk.sekv.segmenter.min_span, "SEKV: minimum span length");
  flags.AddInt("sekv-max-span", &sk.sekv.segmenter.max_span,
               "SEKV: maximum span length (0 = none)");
  flags.AddFloat("sekv-window-share", &sk.shares.window_share,
                 "SEKV: share of the budget for the recent window");
  flags.AddFloat("sekv-expand-share", &sk.shares.expand_share,
                 "SEKV: share of the budget for expanded spans");
  flags.AddInt("sekv-rmax", &sk.sekv.store.r_max, "SEKV: rank cap of the CPU bases");
  flags.AddFloat("sekv-energy", &o->sekv_energy,
                 "SEKV: spectral energy share kept by the CPU bases");
  flags.AddFloat("sekv-pin-share", &sk.shares.pin_share,
                 "SEKV: share of the zoom-in slots pinned at the first decode step");
  flags.AddString("sekv-zoom", &o->sekv_resolution, "SEKV: zoom-in resolution, token or span");
  flags.AddFloat("sekv-candidates", &sk.sekv.candidate_factor,
                 "SEKV: token zoom scores up to this x expansion-buffer tokens of routed spans");
  flags.AddFloat("sekv-tau", &sk.sekv.tau_override,
                 "SEKV: gate threshold for every head (-1 = the router's)");
  flags.AddBool("sekv-ablate", &o->sekv_ablate,
                "SEKV: also run SEKV without zoom-in (sekv-nozoom), with whole-span zoom-in and "
                "no pins (sekv-span, SeKV as published) and with token zoom-in but no pins "
                "(sekv-nopin)");
}

// The SEKV evaluation at --sekv-budget: its results into *out, one line per method printed.
absl::Status RunSekv(Options& o, const scd::ModelPair& pair,
                     std::shared_ptr<const scd::ScdArtifact> artifact, const Progress& progress,
                     nlohmann::json* out) {
  std::shared_ptr<const scd::sekv::ZoomRouter> router;
  if (!o.sekv_router.empty()) {
    SCD_ASSIGN_OR_RETURN(scd::sekv::SekvArtifact a, scd::sekv::SekvArtifact::Load(o.sekv_router));
    SCD_RETURN_IF_ERROR(a.CheckModel(*pair.consumer_model));
    router = std::make_shared<const scd::sekv::ZoomRouter>(a.router);
  }
  scd::sekv::SekvEvalConfig& sk = o.sk;
  if (o.sekv_resolution == "span") {
    sk.sekv.resolution = scd::sekv::ZoomResolution::kSpan;
  } else if (o.sekv_resolution != "token") {
    return absl::InvalidArgumentError("--sekv-zoom must be token or span");
  }
  sk.budget = o.sekv_budget;
  sk.sekv.store.energy = o.sekv_energy;
  sk.text_file = o.cfg.text_file;
  sk.babi_files = o.cfg.babi_files;
  sk.max_examples = o.cfg.max_examples;
  sk.max_examples_per_file = o.cfg.max_examples_per_file;
  sk.max_answer_tokens = o.cfg.max_answer_tokens;
  sk.ablate = o.sekv_ablate;
  std::cerr << kProgram << ": SEKV at budget " << o.sekv_budget << "\n";
  SCD_ASSIGN_OR_RETURN(auto sekv_eval,
                       scd::sekv::SekvEvaluator::Create(*pair.producer, *pair.consumer, artifact,
                                                        *pair.tokenizer, router));
  SCD_ASSIGN_OR_RETURN(const auto sr, sekv_eval->Run(sk, progress));
  const nlohmann::json sj = sr.ToJson();
  for (auto it = sj.begin(); it != sj.end(); ++it) (*out)[it.key()] = it.value();
  if (!o.sekv_router.empty()) (*out)["sekv"]["router"] = o.sekv_router;
  for (const char* m : {"sekv", "h2o", "chunk", "sekv-nozoom", "sekv-span", "sekv-nopin"}) {
    if (!out->contains(m)) continue;
    const auto& j = (*out)[m];
    std::cout << m << ": gpu_bytes_ratio " << j["gpu_bytes_ratio"] << " ppl " << j["ppl"]
              << " (full " << j["ppl_full"] << ") F1 " << j["f1"] << " (full " << j["f1_full"]
              << ") top1 " << j["top1_agreement"] << " niah " << j["niah_accuracy"].dump()
              << " (full " << j["niah_accuracy_full"].dump() << ")\n";
  }
  return absl::OkStatus();
}

// --ablate-patch: scd rows at patch budget k = 0..L, into *out and *all.
absl::Status AblatePatchBudget(const Options& o, const scd::ScdArtifact& artifact,
                               scd::Evaluator& evaluator, const Progress& progress,
                               nlohmann::json* out, std::vector<scd::ModeReport>* all) {
  for (int k = 0; k <= static_cast<int>(artifact.patch_order.size()); ++k) {
    scd::EvalConfig ab = o.cfg;
    ab.modes = {scd::CodecMode::kScd};
    ab.timing_tokens = 0;
    ab.codec.patch_layers =
        std::vector<int>(artifact.patch_order.begin(), artifact.patch_order.begin() + k);
    std::cerr << kProgram << ": ablation, patch budget k=" << k << "\n";
    SCD_ASSIGN_OR_RETURN(const std::vector<scd::ModeReport> r, evaluator.Run(ab, progress));
    scd::ModeReport row = r.front();
    row.label = "scd k=" + std::to_string(k);
    (*out)["ablation_patch_budget"][std::to_string(k)] = row.ToJson();
    all->push_back(row);
  }
  return absl::OkStatus();
}

// The JSON, and with --report the tables; then one line per codec row.
absl::Status WriteResults(const Options& o, const nlohmann::json& out,
                          const std::vector<scd::ModeReport>& all, const scd::Model& consumer) {
  SCD_RETURN_IF_ERROR(scd::WriteFileAtomically(o.json_out, out.dump(2)));
  if (!o.report.empty()) {
    SCD_RETURN_IF_ERROR(scd::WriteEvalTables(all, o.report, consumer.config.name));
  }
  for (const auto& r : all) {
    std::cout << r.label << ": EM " << r.em << " F1 " << r.f1 << " payload/raw "
              << r.payload_ratio_vs_raw << " ppl " << r.ppl << " rebuild_ms " << r.rebuild_ms
              << " prefill_ms " << r.consumer_prefill_ms << "\n";
  }
  return absl::OkStatus();
}

// Everything after the command line is read: 0, or the failure's exit code.
int Evaluate(const scd::cli::FlagParser& flags, Options& o, const std::string& command) {
  auto pair = scd::LoadModelPair(o.producer_dir, o.consumer_dir);
  if (!pair.ok()) return flags.Fail(pair.status());
  std::shared_ptr<const scd::ScdArtifact> artifact;
  if (!o.artifact_path.empty()) {
    auto a = scd::LoadArtifactFor(o.artifact_path, pair->consumer_model->digest());
    if (!a.ok()) return flags.Fail(a.status());
    artifact = std::make_shared<const scd::ScdArtifact>(std::move(a).value());
  }
  auto evaluator =
      scd::Evaluator::Create(*pair->producer, *pair->consumer, artifact, *pair->tokenizer);
  if (!evaluator.ok()) return flags.Fail(evaluator.status());
  const Progress progress = [](const std::string& line) { std::cerr << "  " << line << "\n"; };

  nlohmann::json out = {{"modes", nlohmann::json::object()}, {"command", command}};
  std::vector<scd::ModeReport> all;
  if (!o.cfg.modes.empty()) {
    auto reports = (*evaluator)->Run(o.cfg, progress);
    if (!reports.ok()) return flags.Fail(reports.status());
    for (const auto& r : *reports) out["modes"][r.label] = r.ToJson();
    all = *reports;
  }
  if (o.sekv_budget > 0) {
    if (absl::Status st = RunSekv(o, *pair, artifact, progress, &out); !st.ok()) {
      return flags.Fail(st);
    }
  }
  if (o.ablate_patch) {
    if (artifact == nullptr) return flags.Fail("--ablate-patch needs --artifact");
    absl::Status st = AblatePatchBudget(o, *artifact, **evaluator, progress, &out, &all);
    if (!st.ok()) return flags.Fail(st);
  }
  if (absl::Status st = WriteResults(o, out, all, *pair->consumer_model); !st.ok()) {
    return flags.Fail(st);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  scd::cli::FlagParser flags(kProgram,
                             "--producer DIR --consumer DIR --artifact A --babi FILES --json OUT");
  AddCodecFlags(flags, &o);
  AddSekvFlags(flags, &o);
  AddOnlineFlags(flags, &o);
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv)) return *exit;
  if (o.online) return EvaluateOnline(flags, o, scd::cli::QuotedCommandLine(argc, argv));
  for (const auto& name : absl::StrSplit(o.modes, ',', absl::SkipEmpty())) {
    auto m = scd::ParseCodecMode(std::string(name));
    if (!m.ok()) return flags.UsageError(m.status());
    o.cfg.modes.push_back(*m);
  }
  o.cfg.babi_files = o.babi;
  o.cfg.text_file = o.text;
  return Evaluate(flags, o, scd::cli::QuotedCommandLine(argc, argv));
}
