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

}  // namespace

int main(int argc, char** argv) {
  std::string producer_dir, consumer_dir, corpus, babi, text, out, encoding = "int8";
  int total_rank = 40, step = 4, max_tokens = 100000;
  scd::EvalConfig cfg;
  cfg.max_examples = 200;
  cfg.text_passages = 40;
  cfg.timing_tokens = 0;
  scd::cli::FlagParser flags(kProgram, "--producer DIR --consumer DIR --corpus FILES --babi FILES --out PREFIX");
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
  auto& pm = pair->producer_model;
  auto& cm = pair->consumer_model;
  auto& tokenizer = pair->tokenizer;
  auto& producer = pair->producer;
  auto& consumer = pair->consumer;
  const int kvd = pm->config.kv_dim();
  if (total_rank < 2 || total_rank > 2 * kvd || step < 1) {
    return flags.Fail("--total-rank must be in [2, 2*kv_dim] and --step >= 1");
  }
  scd::CorpusLoadOptions co;
  co.max_total_tokens = max_tokens;
  std::vector<std::string> files = absl::StrSplit(corpus, ',', absl::SkipEmpty());
  auto passages = scd::LoadCalibrationPassages(files, *tokenizer, co);
  if (!passages.ok()) return flags.Fail(passages.status());
  auto progress = [](const std::string& line) { std::cerr << "  " << line << "\n"; };
  scd::CalibrationOptions o;
  if (encoding != "int8" && encoding != "fp16")
    return flags.Fail("--code-dtype must be int8 or fp16");
  o.code_encoding = encoding == "int8" ? scd::Encoding::kInt8Row : scd::Encoding::kF16;
  auto data = scd::CollectCalibrationData(*producer, *consumer, *passages, o, progress);
  if (!data.ok()) return flags.Fail(data.status());

  cfg.modes = {scd::CodecMode::kScdReuse};
  cfg.babi_files = babi;
  cfg.text_file = text;
  nlohmann::json json = {{"command", scd::cli::QuotedCommandLine(argc, argv)},
                         {"total_rank", total_rank},
                         {"points", nlohmann::json::array()}};
  scd::plot::Table table({"r_K", "r_V", "EM", "F1", "payload vs raw", "ppl", "KL vs oracle"});
  std::vector<double> xs, f1s, kls;
  for (int rk = std::max(1, total_rank - kvd); rk <= std::min(kvd, total_rank - 1); rk += step) {
    o.rank_k = rk;
    o.rank_v = total_rank - rk;
    auto a = scd::FitArtifact(*data, *pm, *cm, o, /*fit_patches=*/false, nullptr);
    if (!a.ok()) return flags.Fail(a.status());
    a->id = "ablation-" + std::to_string(rk);
    auto shared = std::make_shared<const scd::ScdArtifact>(std::move(a).value());
    auto ev = scd::Evaluator::Create(*producer, *consumer, shared, *tokenizer);
    if (!ev.ok()) return flags.Fail(ev.status());
    std::cerr << kProgram << ": r_K=" << rk << " r_V=" << total_rank - rk << "\n";
    auto r = (*ev)->Run(cfg, nullptr);
    if (!r.ok()) return flags.Fail(r.status());
    const scd::ModeReport& m = r->front();
    json["points"].push_back({{"rank_k", rk}, {"rank_v", total_rank - rk}, {"result", m.ToJson()}});
    (void)table.AddRow({std::to_string(rk), std::to_string(total_rank - rk),
                        scd::plot::FormatFixed(m.em, 3), scd::plot::FormatFixed(m.f1, 3),
                        scd::plot::FormatFixed(m.payload_ratio_vs_raw, 3),
                        scd::plot::FormatFixed(m.ppl, 3), scd::plot::FormatFixed(m.kl, 4)});
    xs.push_back(rk);
    f1s.push_back(m.f1);
    kls.push_back(m.kl);
    std::cerr << "  F1 " << m.f1 << " KL " << m.kl << "\n";
  }
  if (auto st = scd::WriteFileAtomically(out + ".json", json.dump(2)); !st.ok())
    return flags.Fail(st);
  if (auto st = table.WriteMarkdown(out + ".md"); !st.ok()) return flags.Fail(st);
  if (auto st = table.WriteCsv(out + ".csv"); !st.ok()) return flags.Fail(st);
  scd::plot::Plot p(900, 600);
  p.SetTitle("REUSE: r_K vs r_V at r_K + r_V = " + std::to_string(total_rank));
  p.SetXLabel("r_K (r_V = total - r_K)");
  p.SetYLabel("bAbI F1");
  if (auto st = p.AddSeries("scd-reuse F1", xs, f1s); !st.ok()) return flags.Fail(st);
  if (auto st = p.WritePng(out + ".png"); !st.ok()) return flags.Fail(st);
  std::cout << table.ToMarkdown();
  return 0;
}
