// scd-ablate: the SCD rank ablation — r_K against r_V at a fixed total code
// width (fixed bytes per token), REUSE only, for one pair. Calibration statistics are collected
// once; each split refits REUSE in closed form and is evaluated through the full codec path
// (scd-reuse mode) by the same Evaluator scd-eval uses. Writes JSON, Markdown, CSV and PNG.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/strings/str_split.h"
#include "common/base/file_io.h"
#include "common/model/weights.h"
#include "common/plot/plot.h"
#include "common/plot/table.h"
#include "common/scd/calibration.h"
#include "common/scd/calibration_corpus.h"
#include "common/scd/evaluation.h"
#include "common/scd/model_pair.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tools/cli/flags.h"

namespace {

constexpr char kProgram[] = "scd-ablate";

// What the sweep gathers, one entry per r_K: the JSON points, the table rows and the series.
struct Sweep {
  nlohmann::json json;
  scd::plot::Table table{{"r_K", "r_V", "EM", "F1", "payload vs raw", "ppl", "KL vs oracle"}};
  std::vector<double> xs, f1s, kls;
};

// Loads the calibration passages and collects the pair's statistics once, with the code
// encoding named by `encoding` set in `o`.
absl::StatusOr<scd::CalibrationData> CollectData(const scd::ModelPair& pair,
                                                 const std::string& corpus, int max_tokens,
                                                 const std::string& encoding,
                                                 scd::CalibrationOptions& o) {
  scd::CorpusLoadOptions co;
  co.max_total_tokens = max_tokens;
  std::vector<std::string> files = absl::StrSplit(corpus, ',', absl::SkipEmpty());
  auto passages = scd::LoadCalibrationPassages(files, *pair.tokenizer, co);
  if (!passages.ok()) return passages.status();
  auto progress = [](const std::string& line) { std::cerr << "  " << line << "\n"; };
  if (encoding != "int8" && encoding != "fp16")
    return absl::InvalidArgumentError("--code-dtype must be int8 or fp16");
  o.code_encoding = encoding == "int8" ? scd::Encoding::kInt8Row : scd::Encoding::kF16;
  return scd::CollectCalibrationData(*pair.producer, *pair.consumer, *passages, o, progress);
}

// Refits REUSE at r_K = `rk`, r_V = `total_rank` - `rk` and evaluates it in scd-reuse mode.
absl::StatusOr<scd::ModeReport> EvaluateSplit(const scd::ModelPair& pair,
                                              const scd::CalibrationData& data,
                                              scd::CalibrationOptions& o, int rk, int total_rank,
                                              const scd::EvalConfig& cfg) {
  o.rank_k = rk;
  o.rank_v = total_rank - rk;
  auto a = scd::FitArtifact(data, *pair.producer_model, *pair.consumer_model, o,
                            /*fit_patches=*/false, nullptr);
  if (!a.ok()) return a.status();
  a->id = "ablation-" + std::to_string(rk);
  auto shared = std::make_shared<const scd::ScdArtifact>(std::move(a).value());
  auto ev = scd::Evaluator::Create(*pair.producer, *pair.consumer, shared, *pair.tokenizer);
  if (!ev.ok()) return ev.status();
  std::cerr << kProgram << ": r_K=" << rk << " r_V=" << total_rank - rk << "\n";
  auto r = (*ev)->Run(cfg, nullptr);
  if (!r.ok()) return r.status();
  return r->front();
}

// Records one evaluated split in the sweep.
void AddPoint(int rk, int total_rank, const scd::ModeReport& m, Sweep& sweep) {
  sweep.json["points"].push_back(
      {{"rank_k", rk}, {"rank_v", total_rank - rk}, {"result", m.ToJson()}});
  (void)sweep.table.AddRow({std::to_string(rk), std::to_string(total_rank - rk),
                            scd::plot::FormatFixed(m.em, 3), scd::plot::FormatFixed(m.f1, 3),
                            scd::plot::FormatFixed(m.payload_ratio_vs_raw, 3),
                            scd::plot::FormatFixed(m.ppl, 3), scd::plot::FormatFixed(m.kl, 4)});
  sweep.xs.push_back(rk);
  sweep.f1s.push_back(m.f1);
  sweep.kls.push_back(m.kl);
  std::cerr << "  F1 " << m.f1 << " KL " << m.kl << "\n";
}

// Writes PREFIX.json, .md, .csv and the F1 plot PREFIX.png.
absl::Status WriteOutputs(const std::string& out, int total_rank, const Sweep& sweep) {
  if (auto st = scd::WriteFileAtomically(out + ".json", sweep.json.dump(2)); !st.ok()) return st;
  if (auto st = sweep.table.WriteMarkdown(out + ".md"); !st.ok()) return st;
  if (auto st = sweep.table.WriteCsv(out + ".csv"); !st.ok()) return st;
  scd::plot::Plot p(900, 600);
  p.SetTitle("REUSE: r_K vs r_V at r_K + r_V = " + std::to_string(total_rank));
  p.SetXLabel("r_K (r_V = total - r_K)");
  p.SetYLabel("bAbI F1");
  if (auto st = p.AddSeries("scd-reuse F1", sweep.xs, sweep.f1s); !st.ok()) return st;
  return p.WritePng(out + ".png");
}

}  // namespace

int main(int argc, char** argv) {
  std::string producer_dir, consumer_dir, corpus, babi, text, out, encoding = "int8";
  int total_rank = 40, step = 4, max_tokens = 100000;
  scd::EvalConfig cfg;
  cfg.max_examples = 200;
  cfg.text_passages = 40;
  cfg.timing_tokens = 0;
  scd::cli::FlagParser flags(
      kProgram, "--producer DIR --consumer DIR --corpus FILES --babi FILES --out PREFIX");
  flags.AddString("producer", &producer_dir, "producer checkpoint directory", true);
  flags.AddString("consumer", &consumer_dir, "consumer checkpoint directory", true);
  flags.AddString("corpus", &corpus, "calibration files, comma-separated", true);
  flags.AddString("babi", &babi, "bAbI evaluation files, comma-separated", true);
  flags.AddString("text", &text, "perplexity text");
  flags.AddString("out", &out, "output prefix (PREFIX.json/.md/.csv/.png)", true);
  flags.AddInt("total-rank", &total_rank, "r_K + r_V held fixed (fixed code bytes per token)");
  flags.AddInt("step", &step, "r_K step of the sweep");
  flags.AddInt("max-examples", &cfg.max_examples, "bAbI questions per point");
  flags.AddInt("max-per-file", &cfg.max_examples_per_file, "bAbI questions per file");
  flags.AddInt("max-tokens", &max_tokens, "calibration token budget");
  flags.AddString("code-dtype", &encoding, "code encoding on the wire: int8 or fp16");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv)) return *exit;
  auto pair = scd::LoadModelPair(producer_dir, consumer_dir);
  if (!pair.ok()) return flags.Fail(pair.status());
  const int kvd = pair->producer_model->config.kv_dim();
  if (total_rank < 2 || total_rank > 2 * kvd || step < 1) {
    return flags.Fail("--total-rank must be in [2, 2*kv_dim] and --step >= 1");
  }
  scd::CalibrationOptions o;
  auto data = CollectData(*pair, corpus, max_tokens, encoding, o);
  if (!data.ok()) return flags.Fail(data.status());

  cfg.modes = {scd::CodecMode::kScdReuse};
  cfg.babi_files = babi;
  cfg.text_file = text;
  Sweep sweep;
  sweep.json = {{"command", scd::cli::QuotedCommandLine(argc, argv)},
                {"total_rank", total_rank},
                {"points", nlohmann::json::array()}};
  for (int rk = std::max(1, total_rank - kvd); rk <= std::min(kvd, total_rank - 1); rk += step) {
    absl::StatusOr<scd::ModeReport> m = EvaluateSplit(*pair, *data, o, rk, total_rank, cfg);
    if (!m.ok()) return flags.Fail(m.status());
    AddPoint(rk, total_rank, *m, sweep);
  }
  if (absl::Status st = WriteOutputs(out, total_rank, sweep); !st.ok()) return flags.Fail(st);
  std::cout << sweep.table.ToMarkdown();
  return 0;
}
