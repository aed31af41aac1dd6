// scd-eval: evaluates codec modes for one producer/consumer pair in one run and writes JSON
// ({"modes": {...}}), plus a Markdown table, CSV and PNG with --report PREFIX. Ablations:
// --ablate-patch adds scd rows with patch budget k = 0..L (the artifact's greedy order).
// All logic lives in common/scd/evaluation.h.
// --sekv-budget F adds the SEKV evaluation (common/sekv/sekv_evaluation.h): SEKV, the
// heavy-hitter and chunk-summary baselines at GPU-tier bytes = F x full KV, under "sekv",
// "h2o" and "chunk" in the same JSON. --modes "" skips the codec modes.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/strings/str_split.h"
#include "common/base/file_io.h"
#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/scd/evaluation.h"
#include "common/scd/model_pair.h"
#include "common/sekv/sekv_artifact.h"
#include "common/sekv/sekv_evaluation.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tools/cli/flags.h"

namespace {

constexpr char kProgram[] = "scd-eval";

}  // namespace

int main(int argc, char** argv) {
  std::string producer_dir, consumer_dir, artifact_path, babi, modes = "oracle,raw,quant8,quant4,recompute,scd-reuse,scd";
  std::string json_out, report, text;
  bool ablate_patch = false;
  scd::EvalConfig cfg;
  float sekv_budget = 0;
  std::string sekv_router;
  scd::sekv::SekvEvalConfig sk;
  bool sekv_ablate = false;
  scd::cli::FlagParser flags(kProgram, "--producer DIR --consumer DIR --artifact A --babi FILES --json OUT");
  flags.AddString("producer", &producer_dir, "producer checkpoint directory", true);
  flags.AddString("consumer", &consumer_dir, "consumer checkpoint directory", true);
  flags.AddString("artifact", &artifact_path, "calibration artifact (needed by recompute/scd modes)");
  flags.AddString("babi", &babi, "bAbI-format files, comma-separated");
  flags.AddString("modes", &modes, "comma-separated codec modes");
  flags.AddString("json", &json_out, "write results JSON here", true);
  flags.AddString("text", &text, "perplexity text (TinyStories-style passages)");
  flags.AddString("report", &report, "write PREFIX.md, PREFIX.csv and PREFIX.png");
  flags.AddInt("max-examples", &cfg.max_examples, "bAbI questions in total (0 = all)");
  flags.AddInt("max-per-file", &cfg.max_examples_per_file, "bAbI questions per file (0 = no cap)");
  flags.AddInt("text-passages", &cfg.text_passages, "perplexity passages");
  flags.AddInt("timing-tokens", &cfg.timing_tokens, "prompt length of the rebuild-vs-prefill timing (0 = skip)");
  flags.AddInt("kivi-group", &cfg.codec.kivi_group, "KIVI group size");
  flags.AddBool("ablate-patch", &ablate_patch, "add scd rows for patch budget k = 0..L");
  flags.AddFloat("sekv-budget", &sekv_budget, "SEKV: GPU-tier bytes as a fraction of full KV (0 = skip SEKV)");
  flags.AddString("sekv-router", &sekv_router, "SEKV: calibrated router artifact (default: share-threshold gate)");
  flags.AddInt("sekv-text-samples", &sk.text_samples, "SEKV: packed full-context text samples");
  flags.AddInt("sekv-scored", &sk.scored_tokens, "SEKV: tokens decoded and scored per text sample");
  flags.AddInt("sekv-niah-trials", &sk.niah_trials, "SEKV: needle prompts per depth (0 = skip)");
  flags.AddFloat("sekv-alpha", &sk.sekv.segmenter.alpha, "SEKV: boundary threshold in std above the mean");
  flags.AddInt("sekv-min-span", &sk.sekv.segmenter.min_span, "SEKV: minimum span length");
  flags.AddInt("sekv-max-span", &sk.sekv.segmenter.max_span, "SEKV: maximum span length (0 = none)");
  flags.AddFloat("sekv-window-share", &sk.shares.window_share, "SEKV: share of the budget for the recent window");
  flags.AddFloat("sekv-expand-share", &sk.shares.expand_share, "SEKV: share of the budget for expanded spans");
  flags.AddInt("sekv-rmax", &sk.sekv.store.r_max, "SEKV: rank cap of the CPU bases");
  float sekv_energy = static_cast<float>(sk.sekv.store.energy);
  flags.AddFloat("sekv-energy", &sekv_energy, "SEKV: spectral energy share kept by the CPU bases");
  flags.AddFloat("sekv-pin-share", &sk.shares.pin_share, "SEKV: share of the zoom-in slots pinned at the first decode step");
  std::string sekv_resolution = "token";
  flags.AddString("sekv-zoom", &sekv_resolution, "SEKV: zoom-in resolution, token or span");
  flags.AddFloat("sekv-candidates", &sk.sekv.candidate_factor, "SEKV: token zoom scores up to this x expansion-buffer tokens of routed spans");
  flags.AddFloat("sekv-tau", &sk.sekv.tau_override, "SEKV: gate threshold for every head (-1 = the router's)");
  flags.AddBool("sekv-ablate", &sekv_ablate, "SEKV: also run SEKV without zoom-in (sekv-nozoom), with whole-span zoom-in and no pins (sekv-span, SeKV as published) and with token zoom-in but no pins (sekv-nopin)");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv)) return *exit;
  for (const auto& name : absl::StrSplit(modes, ',', absl::SkipEmpty())) {
    auto m = scd::ParseCodecMode(std::string(name));
    if (!m.ok()) return flags.UsageError(m.status());
    cfg.modes.push_back(*m);
  }
  cfg.babi_files = babi;
  cfg.text_file = text;
  auto pair = scd::LoadModelPair(producer_dir, consumer_dir);
  if (!pair.ok()) return flags.Fail(pair.status());
  auto& consumer_model = pair->consumer_model;
  auto& tokenizer = pair->tokenizer;
  auto& producer = pair->producer;
  auto& consumer = pair->consumer;
  std::shared_ptr<const scd::ScdArtifact> artifact;
  if (!artifact_path.empty()) {
    auto a = scd::ScdArtifact::Load(artifact_path);
    if (!a.ok()) return flags.Fail(a.status());
    artifact = std::make_shared<const scd::ScdArtifact>(std::move(a).value());
  }
  auto evaluator = scd::Evaluator::Create(*producer, *consumer, artifact, *tokenizer);
  if (!evaluator.ok()) return flags.Fail(evaluator.status());
  auto progress = [](const std::string& line) { std::cerr << "  " << line << "\n"; };

  nlohmann::json out = {{"modes", nlohmann::json::object()},
                        {"command", scd::cli::QuotedCommandLine(argc, argv)}};
  std::vector<scd::ModeReport> all;
  if (!cfg.modes.empty()) {
    auto reports = (*evaluator)->Run(cfg, progress);
    if (!reports.ok()) return flags.Fail(reports.status());
    for (const auto& r : *reports) out["modes"][r.label] = r.ToJson();
    all = *reports;
  }

  if (sekv_budget > 0) {
    std::shared_ptr<const scd::sekv::ZoomRouter> router;
    if (!sekv_router.empty()) {
      auto a = scd::sekv::SekvArtifact::Load(sekv_router);
      if (!a.ok()) return flags.Fail(a.status());
      if (auto st = a->CheckModel(*consumer_model); !st.ok()) return flags.Fail(st);
      router = std::make_shared<const scd::sekv::ZoomRouter>(a->router);
    }
    if (sekv_resolution == "span") {
      sk.sekv.resolution = scd::sekv::ZoomResolution::kSpan;
    } else if (sekv_resolution != "token") {
      return flags.Fail("--sekv-zoom must be token or span");
    }
    sk.budget = sekv_budget;
    sk.sekv.store.energy = sekv_energy;
    sk.text_file = cfg.text_file;
    sk.babi_files = cfg.babi_files;
    sk.max_examples = cfg.max_examples;
    sk.max_examples_per_file = cfg.max_examples_per_file;
    sk.max_answer_tokens = cfg.max_answer_tokens;
    sk.ablate = sekv_ablate;
    std::cerr << kProgram << ": SEKV at budget " << sekv_budget << "\n";
    auto sekv_eval = scd::sekv::SekvEvaluator::Create(*producer, *consumer, artifact, *tokenizer, router);
    if (!sekv_eval.ok()) return flags.Fail(sekv_eval.status());
    auto sr = (*sekv_eval)->Run(sk, progress);
    if (!sr.ok()) return flags.Fail(sr.status());
    const nlohmann::json sj = sr->ToJson();
    for (auto it = sj.begin(); it != sj.end(); ++it) out[it.key()] = it.value();
    if (!sekv_router.empty()) out["sekv"]["router"] = sekv_router;
    for (const char* m : {"sekv", "h2o", "chunk", "sekv-nozoom", "sekv-span", "sekv-nopin"}) {
      if (!out.contains(m)) continue;
      const auto& j = out[m];
      std::cout << m << ": gpu_bytes_ratio " << j["gpu_bytes_ratio"] << " ppl " << j["ppl"] << " (full "
                << j["ppl_full"] << ") F1 " << j["f1"] << " (full " << j["f1_full"] << ") top1 "
                << j["top1_agreement"] << " niah " << j["niah_accuracy"].dump() << " (full "
                << j["niah_accuracy_full"].dump() << ")\n";
    }
  }

  if (ablate_patch) {
    if (artifact == nullptr) return flags.Fail("--ablate-patch needs --artifact");
    for (int k = 0; k <= static_cast<int>(artifact->patch_order.size()); ++k) {
      scd::EvalConfig ab = cfg;
      ab.modes = {scd::CodecMode::kScd};
      ab.timing_tokens = 0;
      ab.codec.patch_layers = std::vector<int>(artifact->patch_order.begin(),
                                               artifact->patch_order.begin() + k);
      std::cerr << kProgram << ": ablation, patch budget k=" << k << "\n";
      auto r = (*evaluator)->Run(ab, progress);
      if (!r.ok()) return flags.Fail(r.status());
      scd::ModeReport row = r->front();
      row.label = "scd k=" + std::to_string(k);
      out["ablation_patch_budget"][std::to_string(k)] = row.ToJson();
      all.push_back(row);
    }
  }
  if (auto st = scd::WriteFileAtomically(json_out, out.dump(2)); !st.ok()) {
    return flags.Fail(st);
  }
  if (!report.empty()) {
    if (auto st = scd::WriteEvalTables(all, report, consumer_model->config.name); !st.ok()) {
      return flags.Fail(st);
    }
  }
  for (const auto& r : all) {
    std::cout << r.label << ": EM " << r.em << " F1 " << r.f1 << " payload/raw "
              << r.payload_ratio_vs_raw << " ppl " << r.ppl << " rebuild_ms " << r.rebuild_ms
              << " prefill_ms " << r.consumer_prefill_ms << "\n";
  }
  return 0;
}
