// scd-sekv-calibrate: fits the SEKV zoom router of one consumer model (common/sekv/
// sekv_calibration.h) on calibration text with the full KV cache as teacher, and writes the
// SEKV artifact (safetensors + JSON report). Sequences: packed full-context samples of the
// --text passages, plus bAbI stories rendered as text (--babi) for a bAbI specialist.
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "common/base/file_io.h"
#include "common/eval/babi.h"
#include "common/eval/text_corpus.h"
#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/sekv/packed_text.h"
#include "common/sekv/sekv_artifact.h"
#include "common/sekv/sekv_calibration.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tools/cli/flags.h"

namespace {

constexpr char kProgram[] = "scd-sekv-calibrate";

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, text, babi, out;
  float budget = static_cast<float>(scd::sekv::kDefaultBudget);
  int sequences = 48, babi_sequences = 24, passages = 1500;
  scd::sekv::CalibrationRun run;
  scd::sekv::CalibrationOptions co;
  scd::cli::FlagParser flags(kProgram, "--model DIR --text FILES --out ARTIFACT");
  flags.AddString("model", &model_dir, "consumer checkpoint directory", true);
  flags.AddString("text", &text, "calibration passages (comma-separated files)", true);
  flags.AddString("babi", &babi, "bAbI train files rendered as extra calibration text");
  flags.AddString("out", &out, "write the SEKV artifact here", true);
  flags.AddFloat("budget", &budget, "plan segmentations as the evaluation does at this budget");
  flags.AddInt("sequences", &sequences, "packed text sequences");
  flags.AddInt("babi-sequences", &babi_sequences, "packed bAbI sequences");
  flags.AddInt("passages", &passages, "passages read from --text");
  flags.AddInt("prefix", &run.prefix, "prompt tokens per sequence (the rest is decoded)");
  flags.AddFloat("label-threshold", &co.label_threshold,
                 "teacher attention mass that labels a span");
  flags.AddFloat("alpha", &run.base.segmenter.alpha, "boundary threshold in std above the mean");
  flags.AddInt("min-span", &run.base.segmenter.min_span, "minimum span length");
  flags.AddInt("max-span", &run.base.segmenter.max_span, "maximum span length (0 = none)");
  flags.AddFloat("window-share", &run.shares.window_share, "share of the budget for the window");
  flags.AddFloat("expand-share", &run.shares.expand_share, "share of the budget for expansions");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv)) return *exit;
  run.budget = budget;
  auto model = scd::LoadModel(model_dir);
  if (!model.ok()) return flags.Fail(model.status());
  auto tokenizer = scd::Tokenizer::FromFile(model_dir + "/tokenizer.json");
  if (!tokenizer.ok()) return flags.Fail(tokenizer.status());
  auto backend = scd::CreateBackend(scd::BackendKind::kCpu, *model);
  if (!backend.ok()) return flags.Fail(backend.status());
  auto decoder = scd::sekv::SekvDecoder::Create(*model);
  if (!decoder.ok()) return flags.Fail(decoder.status());
  run.context = (*model)->config.max_position_embeddings;

  scd::eval::CorpusOptions corpus;
  corpus.max_passages = passages;
  auto texts = scd::eval::ReadPassages(text, corpus);
  if (!texts.ok()) return flags.Fail(texts.status());
  auto seqs = scd::sekv::PackPassages(**tokenizer, *texts, run.context, sequences);
  if (!babi.empty()) {
    auto stories = scd::eval::ReadBabiFiles(babi);
    if (!stories.ok()) return flags.Fail(stories.status());
    std::vector<std::string> rendered;
    int last_story = -1;
    for (const auto& ex : scd::eval::MakeBabiExamples(*stories)) {
      // Keep each story's longest prompt (its last question), answered.
      if (!rendered.empty() && ex.story_id == last_story) rendered.pop_back();
      rendered.push_back(ex.prompt + " " + ex.answer + ".");
      last_story = ex.story_id;
    }
    auto more = scd::sekv::PackPassages(**tokenizer, rendered, run.context, babi_sequences);
    seqs.insert(seqs.end(), more.begin(), more.end());
  }
  run.max_sequences = static_cast<int>(seqs.size());
  const scd::ModelConfig& c = (*model)->config;
  scd::sekv::RouterSampleSet set(c.num_layers, c.num_kv_heads, c.head_dim, co);
  std::cerr << kProgram << ": teacher pass over " << seqs.size() << " sequences of " << run.context
            << " tokens\n";
  if (auto st = scd::sekv::CollectRouterSamples(**backend, **decoder, seqs, run, &set); !st.ok()) {
    return flags.Fail(st);
  }
  nlohmann::json report;
  auto router = scd::sekv::FitZoomRouter(set, co, &report);
  if (!router.ok()) return flags.Fail(router.status());
  scd::sekv::SekvArtifact artifact;
  artifact.model_name = c.name;
  artifact.model_digest = (*model)->digest;
  artifact.router = *router;
  report["command"] = scd::cli::QuotedCommandLine(argc, argv);
  report["sequences"] = seqs.size();
  report["budget"] = budget;
  artifact.report = report;
  if (auto st = artifact.Save(out); !st.ok()) return flags.Fail(st);
  if (auto st = scd::WriteFileAtomically(out + ".json", report.dump(2)); !st.ok()) {
    return flags.Fail(st);
  }
  for (const auto& h : report["heads"]) {
    std::cout << "layer " << h["layer"] << " head " << h["kv_head"] << ": samples " << h["samples"]
              << " positives " << h["positives"] << " tau " << h.value("tau", 0.5) << " precision "
              << h.value("precision", 0.0) << " recall " << h.value("recall", 0.0) << "\n";
  }
  std::cout << "wrote " << out << "\n";
  return 0;
}
