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

// The consumer model with what calibration runs on it: tokenizer, CPU backend, SEKV decoder.
struct Consumer {
  std::shared_ptr<const scd::Model> model;
  std::unique_ptr<scd::Tokenizer> tokenizer;
  std::unique_ptr<scd::Backend> backend;
  std::unique_ptr<scd::sekv::SekvDecoder> decoder;
};

// Loads the checkpoint in `model_dir` with its tokenizer, a CPU backend and a SEKV decoder.
absl::StatusOr<Consumer> LoadConsumer(const std::string& model_dir) {
  Consumer c;
  auto model = scd::LoadModel(model_dir);
  if (!model.ok()) return model.status();
  c.model = *std::move(model);
  auto tokenizer = scd::Tokenizer::FromFile(model_dir + "/tokenizer.json");
  if (!tokenizer.ok()) return tokenizer.status();
  c.tokenizer = *std::move(tokenizer);
  auto backend = scd::CreateBackend(scd::BackendKind::kCpu, c.model);
  if (!backend.ok()) return backend.status();
  c.backend = *std::move(backend);
  auto decoder = scd::sekv::SekvDecoder::Create(c.model);
  if (!decoder.ok()) return decoder.status();
  c.decoder = *std::move(decoder);
  return c;
}

// Renders each bAbI story as text: its longest prompt (its last question), answered.
std::vector<std::string> RenderBabiStories(const std::vector<scd::eval::BabiStory>& stories) {
  std::vector<std::string> rendered;
  int last_story = -1;
  for (const auto& ex : scd::eval::MakeBabiExamples(stories)) {
    if (!rendered.empty() && ex.story_id == last_story) rendered.pop_back();
    rendered.push_back(ex.prompt + " " + ex.answer + ".");
    last_story = ex.story_id;
  }
  return rendered;
}

// The calibration sequences: `sequences` packed from the --text passages, then
// `babi_sequences` packed from the rendered bAbI stories when `babi` names files.
absl::StatusOr<std::vector<std::vector<int32_t>>> CalibrationSequences(
    const scd::Tokenizer& tokenizer, const std::string& text, const std::string& babi, int passages,
    int sequences, int babi_sequences, int context) {
  scd::eval::CorpusOptions corpus;
  corpus.max_passages = passages;
  auto texts = scd::eval::ReadPassages(text, corpus);
  if (!texts.ok()) return texts.status();
  auto seqs = scd::sekv::PackPassages(tokenizer, *texts, context, sequences);
  if (!babi.empty()) {
    auto stories = scd::eval::ReadBabiFiles(babi);
    if (!stories.ok()) return stories.status();
    auto more =
        scd::sekv::PackPassages(tokenizer, RenderBabiStories(*stories), context, babi_sequences);
    seqs.insert(seqs.end(), more.begin(), more.end());
  }
  return seqs;
}

// Collects the teacher's router samples over `seqs` and fits the zoom router; the fit's
// report goes to `report`.
absl::StatusOr<scd::sekv::ZoomRouter> FitRouter(Consumer& consumer,
                                                const std::vector<std::vector<int32_t>>& seqs,
                                                const scd::sekv::CalibrationRun& run,
                                                const scd::sekv::CalibrationOptions& co,
                                                nlohmann::json& report) {
  const scd::ModelConfig& c = consumer.model->config;
  scd::sekv::RouterSampleSet set(c.num_layers, c.num_kv_heads, c.head_dim, co);
  std::cerr << kProgram << ": teacher pass over " << seqs.size() << " sequences of " << run.context
            << " tokens\n";
  if (auto st =
          scd::sekv::CollectRouterSamples(*consumer.backend, *consumer.decoder, seqs, run, &set);
      !st.ok()) {
    return st;
  }
  return scd::sekv::FitZoomRouter(set, co, &report);
}

// Prints one line per calibrated head: its samples, positives and fitted threshold.
void PrintHeads(const nlohmann::json& report) {
  for (const auto& h : report["heads"]) {
    std::cout << "layer " << h["layer"] << " head " << h["kv_head"] << ": samples " << h["samples"]
              << " positives " << h["positives"] << " tau " << h.value("tau", 0.5) << " precision "
              << h.value("precision", 0.0) << " recall " << h.value("recall", 0.0) << "\n";
  }
}

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
  absl::StatusOr<Consumer> consumer = LoadConsumer(model_dir);
  if (!consumer.ok()) return flags.Fail(consumer.status());
  run.context = consumer->model->config.max_position_embeddings;
  auto seqs = CalibrationSequences(*consumer->tokenizer, text, babi, passages, sequences,
                                   babi_sequences, run.context);
  if (!seqs.ok()) return flags.Fail(seqs.status());
  run.max_sequences = static_cast<int>(seqs->size());
  nlohmann::json report;
  auto router = FitRouter(*consumer, *seqs, run, co, report);
  if (!router.ok()) return flags.Fail(router.status());
  scd::sekv::SekvArtifact artifact;
  artifact.model_name = consumer->model->config.name;
  artifact.model_digest = consumer->model->digest();
  artifact.router = *router;
  report["command"] = scd::cli::QuotedCommandLine(argc, argv);
  report["sequences"] = seqs->size();
  report["budget"] = budget;
  artifact.report = report;
  if (auto st = artifact.Save(out); !st.ok()) return flags.Fail(st);
  if (auto st = scd::WriteFileAtomically(out + ".json", report.dump(2)); !st.ok()) {
    return flags.Fail(st);
  }
  PrintHeads(report);
  std::cout << "wrote " << out << "\n";
  return 0;
}
