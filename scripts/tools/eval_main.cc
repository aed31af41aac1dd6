// scd-eval: evaluates codec modes for one producer/consumer pair in one run and writes JSON
// ({"modes": {...}}), plus a Markdown table, CSV and PNG with --report PREFIX. Ablations:
// --ablate-patch adds scd rows with patch budget k = 0..L (the artifact's greedy order).
// All logic lives in common/scd/evaluation.h.
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_split.h"
#include "common/base/file_io.h"
#include "common/cli/flags.h"
#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/scd/evaluation.h"
#include "common/scd/model_pair.h"
#include "common/tokenizer/tokenizer.h"

namespace {

constexpr char kProgram[] = "scd-eval";

int Fail(const std::string& message) {
  std::cerr << kProgram << ": " << message << "\n";
  return scd::cli::kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  std::string producer_dir, consumer_dir, artifact_path, babi, modes = "oracle,raw,quant8,quant4,recompute,scd-reuse,scd";
  std::string json_out, report, text;
  bool ablate_patch = false;
  scd::EvalConfig cfg;
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
  if (auto st = flags.Parse(argc, argv); !st.ok()) {
    std::cerr << kProgram << ": " << st.message() << "\n\n" << flags.Usage();
    return scd::cli::kExitUsage;
  }
  if (flags.help_requested()) {
    std::cout << flags.Usage();
    return 0;
  }
  for (const auto& name : absl::StrSplit(modes, ',', absl::SkipEmpty())) {
    auto m = scd::ParseCodecMode(std::string(name));
    if (!m.ok()) {
      std::cerr << kProgram << ": " << m.status().message() << "\n";
      return scd::cli::kExitUsage;
    }
    cfg.modes.push_back(*m);
  }
  cfg.babi_files = babi;
  cfg.text_file = text;
  auto pair = scd::LoadModelPair(producer_dir, consumer_dir);
  if (!pair.ok()) return Fail(std::string(pair.status().message()));
  auto& consumer_model = pair->consumer_model;
  auto& tokenizer = pair->tokenizer;
  auto& producer = pair->producer;
  auto& consumer = pair->consumer;
  std::shared_ptr<const scd::ScdArtifact> artifact;
  if (!artifact_path.empty()) {
    auto a = scd::ScdArtifact::Load(artifact_path);
    if (!a.ok()) return Fail(std::string(a.status().message()));
    artifact = std::make_shared<const scd::ScdArtifact>(std::move(a).value());
  }
  auto evaluator = scd::Evaluator::Create(*producer, *consumer, artifact, *tokenizer);
  if (!evaluator.ok()) return Fail(std::string(evaluator.status().message()));
  auto progress = [](const std::string& line) { std::cerr << "  " << line << "\n"; };

  auto reports = (*evaluator)->Run(cfg, progress);
  if (!reports.ok()) return Fail(std::string(reports.status().message()));
  nlohmann::json out = {{"modes", nlohmann::json::object()},
                        {"command", scd::cli::QuotedCommandLine(argc, argv)}};
  for (const auto& r : *reports) out["modes"][r.label] = r.ToJson();
  std::vector<scd::ModeReport> all = *reports;

  if (ablate_patch) {
    if (artifact == nullptr) return Fail("--ablate-patch needs --artifact");
    for (int k = 0; k <= static_cast<int>(artifact->patch_order.size()); ++k) {
      scd::EvalConfig ab = cfg;
      ab.modes = {scd::CodecMode::kScd};
      ab.timing_tokens = 0;
      ab.codec.patch_layers = std::vector<int>(artifact->patch_order.begin(),
                                               artifact->patch_order.begin() + k);
      std::cerr << kProgram << ": ablation, patch budget k=" << k << "\n";
      auto r = (*evaluator)->Run(ab, progress);
      if (!r.ok()) return Fail(std::string(r.status().message()));
      scd::ModeReport row = r->front();
      row.label = "scd k=" + std::to_string(k);
      out["ablation_patch_budget"][std::to_string(k)] = row.ToJson();
      all.push_back(row);
    }
  }
  if (auto st = scd::WriteFileAtomically(json_out, out.dump(2)); !st.ok()) {
    return Fail(std::string(st.message()));
  }
  if (!report.empty()) {
    if (auto st = scd::WriteEvalTables(all, report, consumer_model->config.name); !st.ok()) {
      return Fail(std::string(st.message()));
    }
  }
  for (const auto& r : all) {
    std::cout << r.label << ": EM " << r.em << " F1 " << r.f1 << " payload/raw "
              << r.payload_ratio_vs_raw << " ppl " << r.ppl << " rebuild_ms " << r.rebuild_ms
              << " prefill_ms " << r.consumer_prefill_ms << "\n";
  }
  return 0;
}
