// See evaluation.h.
#include "common/scd/evaluation.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/elapsed.h"
#include "common/base/status_macros.h"
#include "common/eval/answer.h"
#include "common/eval/babi.h"
#include "common/eval/babi_context.h"
#include "common/eval/metrics.h"
#include "common/eval/text_corpus.h"
#include "common/plot/plot.h"
#include "common/plot/table.h"
#include "common/runtime/sampler.h"

namespace scd {
namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<const Model> Unowned(const Model& m) {
  return std::shared_ptr<const Model>(std::shared_ptr<const Model>(), &m);
}

PrefillOptions AllHooks() {
  PrefillOptions o;
  o.layer_states = o.surprisal = o.residual = true;
  return o;
}

struct Accum {
  eval::QaAggregate qa;
  std::map<std::string, eval::QaAggregate> by_file;
  double payload_bytes = 0, payload_tokens = 0, raw_bytes = 0;
  double encode_ms = 0, rebuild_ms = 0, prefill_ms = 0;
  double nll = 0, kl = 0, top1 = 0;
  long text_rows = 0, text_scored = 0;
};

// What the steps of one Evaluator::Run share: the pair, the codecs and the sums per mode.
struct EvalRun {
  const EvalConfig& cfg;
  const ProgressFn& progress;
  Backend& producer;
  Backend& consumer;
  const Tokenizer& tokenizer;
  std::unique_ptr<ProducerCodec> enc;
  std::unique_ptr<ConsumerCodec> dec;
  int ctx = 0, vocab = 0;
  std::vector<Accum> acc;

  void Say(const std::string& s) const {
    if (progress) progress(s);
  }
};

// Rebuilds `prefix` through mode m into a fresh consumer sequence of `capacity`.
absl::StatusOr<std::unique_ptr<Sequence>> Rebuild(EvalRun& r, size_t m,
                                                  absl::Span<const int32_t> prefix,
                                                  const PrefillResult& states, int capacity,
                                                  Accum& a) {
  auto t0 = Clock::now();
  SCD_ASSIGN_OR_RETURN(Payload payload, r.enc->Encode(r.cfg.modes[m], prefix, states));
  const std::vector<uint8_t> bytes = SerializePayload(payload);
  a.encode_ms += MsSince(t0);
  a.payload_bytes += static_cast<double>(bytes.size());
  a.payload_tokens += static_cast<double>(prefix.size());
  SCD_ASSIGN_OR_RETURN(Payload raw_payload, r.enc->Encode(CodecMode::kRaw, prefix, states));
  a.raw_bytes += static_cast<double>(SerializePayload(raw_payload).size());
  SCD_ASSIGN_OR_RETURN(auto seq, r.consumer.NewSequence(capacity));
  auto t1 = Clock::now();
  SCD_ASSIGN_OR_RETURN(Payload parsed, ParsePayload(bytes));
  SCD_RETURN_IF_ERROR(r.dec->Rebuild(parsed, r.consumer, *seq));
  a.rebuild_ms += MsSince(t1);
  return seq;
}

// The consumer's own prefill of `ids` into a fresh sequence of `capacity`, timed.
absl::StatusOr<double> TimeOwnPrefill(Backend& consumer, absl::Span<const int32_t> ids,
                                      int capacity) {
  SCD_ASSIGN_OR_RETURN(auto cseq, consumer.NewSequence(capacity));
  PrefillResult ignored;
  auto t0 = Clock::now();
  SCD_RETURN_IF_ERROR(consumer.Prefill(*cseq, ids, PrefillOptions{}, &ignored));
  return MsSince(t0);
}

// The consumer prefills the last prompt token on a rebuilt sequence, then answers greedily.
absl::StatusOr<std::string> GreedyAnswer(EvalRun& r, Sequence& seq,
                                         absl::Span<const int32_t> last) {
  PrefillResult first;
  SCD_RETURN_IF_ERROR(r.consumer.Prefill(seq, last, PrefillOptions{}, &first));
  eval::AnswerCollector collector(r.tokenizer);
  std::vector<float> logits = std::move(first.logits);
  for (int step = 0; step < r.cfg.max_answer_tokens; ++step) {
    const int32_t next = ArgMax(logits);
    if (!collector.Push(next) || step + 1 == r.cfg.max_answer_tokens) break;
    Sequence* batch[] = {&seq};
    SCD_RETURN_IF_ERROR(r.consumer.Decode(batch, absl::MakeConstSpan(&next, 1), &logits));
  }
  return collector.answer();
}

// The bAbI file name of an example's "path:line" location.
std::string BabiFileName(const std::string& loc) {
  const std::string file = loc.substr(0, loc.rfind(':'));
  return file.substr(file.rfind('/') + 1);
}

// One bAbI example in every mode: the producer prefills the prompt once, each mode rebuilds
// the consumer's cache and answers.
absl::Status ScoreBabiExample(EvalRun& r, const std::vector<int32_t>& ids,
                              const eval::BabiExample& example) {
  const int t = static_cast<int>(ids.size());
  const auto prefix = absl::MakeConstSpan(ids).first(t - 1);
  PrefillResult states;
  SCD_ASSIGN_OR_RETURN(auto pseq, r.producer.NewSequence(t));
  SCD_RETURN_IF_ERROR(r.producer.Prefill(*pseq, prefix, AllHooks(), &states));
  // The consumer's own prefill of the same prefix, timed once per example.
  SCD_ASSIGN_OR_RETURN(const double own_ms, TimeOwnPrefill(r.consumer, prefix, t));
  const std::string file = BabiFileName(example.location);
  for (size_t m = 0; m < r.cfg.modes.size(); ++m) {
    SCD_ASSIGN_OR_RETURN(auto seq,
                         Rebuild(r, m, prefix, states, t + r.cfg.max_answer_tokens, r.acc[m]));
    r.acc[m].prefill_ms += own_ms;
    SCD_ASSIGN_OR_RETURN(const std::string answer,
                         GreedyAnswer(r, *seq, absl::MakeConstSpan(&ids[t - 1], 1)));
    const eval::QaScore score = eval::ScoreAnswer(answer, example.answer);
    r.acc[m].qa.Add(score);
    r.acc[m].by_file[file].Add(score);
  }
  return absl::OkStatus();
}

// bAbI question answering; returns the number of examples scored.
absl::StatusOr<int> RunBabi(EvalRun& r, eval::BabiContextReport* fit_report) {
  int examples = 0;
  if (r.cfg.babi_files.empty()) return examples;
  eval::BabiOptions bo;
  bo.max_examples = r.cfg.max_examples;
  bo.max_examples_per_file = r.cfg.max_examples_per_file;
  SCD_ASSIGN_OR_RETURN(auto stories, eval::ReadBabiFiles(r.cfg.babi_files));
  // Long two-fact stories overflow the context: drop their oldest sentences (counted).
  eval::BabiContextOptions fit;
  fit.max_prompt_tokens = r.ctx - r.cfg.max_answer_tokens;
  SCD_ASSIGN_OR_RETURN(auto qa,
                       eval::FitBabiExamplesToContext(stories, eval::MakeBabiExamples(stories, bo),
                                                      r.tokenizer, fit, bo.format, fit_report));
  for (size_t i = 0; i < qa.size(); ++i) {
    const std::vector<int32_t> ids = r.tokenizer.Encode(qa[i].prompt);
    const int t = static_cast<int>(ids.size());
    if (t < 2 || t + r.cfg.max_answer_tokens > r.ctx) continue;  // does not fit the context
    SCD_RETURN_IF_ERROR(ScoreBabiExample(r, ids, qa[i]));
    ++examples;
    if (examples % 25 == 0 || i + 1 == qa.size()) {
      std::string line = absl::StrFormat("bAbI %d/%zu:", examples, qa.size());
      for (size_t m = 0; m < r.cfg.modes.size(); ++m) {
        absl::StrAppendFormat(&line, " %s F1 %.3f", std::string(CodecModeName(r.cfg.modes[m])),
                              r.acc[m].qa.f1.mean());
      }
      r.Say(line);
    }
  }
  return examples;
}

// Rebuilds the split's prefix through mode m, lets the consumer score the continuation and
// adds its agreement with the oracle's `rows` rows to `a`.
absl::Status ScoreContinuation(EvalRun& r, size_t m, const eval::PassageSplit& s,
                               const PrefillResult& states, absl::Span<const float> oracle_rows,
                               int rows, Accum& a) {
  const int t = static_cast<int>(s.tokens.size());
  Accum scratch;  // text rebuilds are not part of the per-example timing
  SCD_ASSIGN_OR_RETURN(auto seq, Rebuild(r, m, s.prefix(), states, t, scratch));
  PrefillOptions all;
  all.all_logits = true;
  PrefillResult rest;
  SCD_RETURN_IF_ERROR(r.consumer.Prefill(*seq, s.continuation(), all, &rest));
  SCD_ASSIGN_OR_RETURN(eval::LogitAgreement agree,
                       eval::CompareLogitRows(oracle_rows, rest.logits, r.vocab));
  a.kl += agree.mean_kl * rows;
  a.top1 += agree.top1_agreement * rows;
  a.text_rows += rows;
  if (rows > 1) {
    SCD_ASSIGN_OR_RETURN(
        double nll,
        eval::SumNll(
            absl::MakeConstSpan(rest.logits).first(static_cast<size_t>(rows - 1) * r.vocab),
            r.vocab, s.continuation().subspan(1)));
    a.nll += nll;
    a.text_scored += rows - 1;
  }
  return absl::OkStatus();
}

// One text split in every mode, against the oracle (the consumer's prefill of the whole
// split); returns the number of continuation rows compared.
absl::StatusOr<int> ScoreTextSplit(EvalRun& r, const eval::PassageSplit& s) {
  const int t = static_cast<int>(s.tokens.size());
  PrefillResult states;
  SCD_ASSIGN_OR_RETURN(auto pseq, r.producer.NewSequence(s.prefix_length));
  SCD_RETURN_IF_ERROR(r.producer.Prefill(*pseq, s.prefix(), AllHooks(), &states));
  PrefillResult oracle;
  PrefillOptions all;
  all.all_logits = true;
  SCD_ASSIGN_OR_RETURN(auto oseq, r.consumer.NewSequence(t));
  SCD_RETURN_IF_ERROR(r.consumer.Prefill(*oseq, s.tokens, all, &oracle));
  const int rows = s.num_scored();
  const auto oracle_rows = absl::MakeConstSpan(oracle.logits)
                               .subspan(static_cast<size_t>(s.prefix_length) * r.vocab,
                                        static_cast<size_t>(rows) * r.vocab);
  for (size_t m = 0; m < r.cfg.modes.size(); ++m) {
    SCD_RETURN_IF_ERROR(ScoreContinuation(r, m, s, states, oracle_rows, rows, r.acc[m]));
  }
  return rows;
}

// Perplexity and agreement with the oracle on text; returns the number of tokens scored.
absl::StatusOr<int> RunText(EvalRun& r) {
  int text_tokens = 0;
  if (r.cfg.text_file.empty()) return text_tokens;
  eval::CorpusOptions co;
  co.max_passages = r.cfg.text_passages;
  SCD_ASSIGN_OR_RETURN(auto passages, eval::ReadPassages(r.cfg.text_file, co));
  eval::SplitOptions so;
  so.max_tokens = std::min(r.cfg.text_max_tokens, r.ctx);
  SCD_ASSIGN_OR_RETURN(auto splits, eval::MakePassageSplits(r.tokenizer, passages, so));
  for (size_t i = 0; i < splits.size(); ++i) {
    SCD_ASSIGN_OR_RETURN(const int rows, ScoreTextSplit(r, splits[i]));
    text_tokens += std::max(rows - 1, 0);
    if ((i + 1) % 25 == 0 || i + 1 == splits.size()) {
      r.Say(absl::StrFormat("text %zu/%zu passages scored", i + 1, splits.size()));
    }
  }
  return text_tokens;
}

struct LongTimings {
  std::vector<double> rebuild_ms, prefill_ms;  // per mode
};

// Rebuild against the consumer's own prefill at a fixed long prompt, the best of timing_reps.
absl::StatusOr<LongTimings> TimeLongPrompt(EvalRun& r) {
  const EvalConfig& cfg = r.cfg;
  LongTimings out{std::vector<double>(cfg.modes.size(), 0),
                  std::vector<double>(cfg.modes.size(), 0)};
  if (cfg.timing_tokens <= 0 || cfg.timing_tokens >= r.ctx) return out;
  std::vector<int32_t> ids = {1};
  for (int i = 0; static_cast<int>(ids.size()) < cfg.timing_tokens; ++i) {
    ids.push_back(static_cast<int32_t>(3 + (i * 7919) % (r.vocab - 3)));
  }
  PrefillResult states;
  SCD_ASSIGN_OR_RETURN(auto pseq, r.producer.NewSequence(cfg.timing_tokens));
  SCD_RETURN_IF_ERROR(r.producer.Prefill(*pseq, ids, AllHooks(), &states));
  for (size_t m = 0; m < cfg.modes.size(); ++m) {
    double best_rebuild = 1e300, best_prefill = 1e300;
    for (int rep = 0; rep < std::max(cfg.timing_reps, 1); ++rep) {
      Accum a;
      SCD_ASSIGN_OR_RETURN(auto seq, Rebuild(r, m, ids, states, cfg.timing_tokens, a));
      best_rebuild = std::min(best_rebuild, a.rebuild_ms);
      SCD_ASSIGN_OR_RETURN(const double prefill_ms,
                           TimeOwnPrefill(r.consumer, ids, cfg.timing_tokens));
      best_prefill = std::min(best_prefill, prefill_ms);
    }
    out.rebuild_ms[m] = best_rebuild;
    out.prefill_ms[m] = best_prefill;
  }
  r.Say(absl::StrFormat("timing at %d tokens done", cfg.timing_tokens));
  return out;
}

std::vector<ModeReport> MakeReports(const EvalRun& r, int examples, int truncated_examples,
                                    int text_tokens, const LongTimings& timing) {
  std::vector<ModeReport> reports;
  for (size_t m = 0; m < r.cfg.modes.size(); ++m) {
    const Accum& a = r.acc[m];
    ModeReport rep;
    rep.mode = r.cfg.modes[m];
    rep.label = std::string(CodecModeName(r.cfg.modes[m]));
    rep.examples = examples;
    rep.truncated_examples = truncated_examples;
    rep.em = a.qa.em.mean();
    rep.f1 = a.qa.f1.mean();
    for (const auto& [file, agg] : a.by_file) {
      rep.f1_by_file[file] = {agg.f1.mean(), static_cast<int>(agg.f1.count())};
    }
    const double n = std::max(examples, 1);
    rep.encode_ms = a.encode_ms / n;
    rep.rebuild_ms = a.rebuild_ms / n;
    rep.consumer_prefill_ms = a.prefill_ms / n;
    if (a.payload_tokens > 0) {
      rep.payload_bytes_per_token = a.payload_bytes / a.payload_tokens;
      rep.payload_ratio_vs_raw = a.payload_bytes / std::max(a.raw_bytes, 1.0);
    }
    rep.text_tokens = text_tokens;
    if (a.text_scored > 0) rep.ppl = std::exp(a.nll / a.text_scored);
    if (a.text_rows > 0) {
      rep.kl = a.kl / a.text_rows;
      rep.top1 = a.top1 / a.text_rows;
    }
    rep.long_rebuild_ms = timing.rebuild_ms[m];
    rep.long_prefill_ms = timing.prefill_ms[m];
    reports.push_back(rep);
  }
  return reports;
}

}  // namespace

nlohmann::json ModeReport::ToJson() const {
  nlohmann::json by_file = nlohmann::json::object();
  for (const auto& [file, v] : f1_by_file)
    by_file[file] = {{"f1", v.first}, {"examples", v.second}};
  return {{"label", label},
          {"f1_by_file", by_file},
          {"examples", examples},
          {"truncated_examples", truncated_examples},
          {"em", em},
          {"f1", f1},
          {"payload_bytes_per_token", payload_bytes_per_token},
          {"payload_ratio_vs_raw", payload_ratio_vs_raw},
          {"encode_ms", encode_ms},
          {"rebuild_ms", rebuild_ms},
          {"consumer_prefill_ms", consumer_prefill_ms},
          {"text_tokens", text_tokens},
          {"ppl", ppl},
          {"kl_vs_oracle", kl},
          {"top1_vs_oracle", top1},
          {"long_rebuild_ms", long_rebuild_ms},
          {"long_prefill_ms", long_prefill_ms}};
}

absl::StatusOr<std::unique_ptr<Evaluator>> Evaluator::Create(
    Backend& producer, Backend& consumer, std::shared_ptr<const ScdArtifact> artifact,
    const Tokenizer& tokenizer) {
  if (artifact != nullptr) {
    SCD_RETURN_IF_ERROR(artifact->CheckPair(&producer.model(), &consumer.model()));
  }
  return std::unique_ptr<Evaluator>(
      new Evaluator(producer, consumer, std::move(artifact), tokenizer));
}

absl::StatusOr<std::vector<ModeReport>> Evaluator::Run(const EvalConfig& cfg,
                                                       const ProgressFn& progress) {
  SCD_ASSIGN_OR_RETURN(auto enc,
                       ProducerCodec::Create(Unowned(producer_.model()), consumer_.model().digest(),
                                             artifact_, cfg.codec));
  SCD_ASSIGN_OR_RETURN(auto dec,
                       ConsumerCodec::Create(Unowned(consumer_.model()), producer_.model().digest(),
                                             artifact_, cfg.codec));
  EvalRun r{cfg,
            progress,
            producer_,
            consumer_,
            tokenizer_,
            std::move(enc),
            std::move(dec),
            consumer_.model().config.max_position_embeddings,
            consumer_.model().config.vocab_size,
            std::vector<Accum>(cfg.modes.size())};
  SCD_ASSIGN_OR_RETURN(const int examples, RunBabi(r, &babi_fit_));
  SCD_ASSIGN_OR_RETURN(const int text_tokens, RunText(r));
  SCD_ASSIGN_OR_RETURN(const LongTimings timing, TimeLongPrompt(r));
  return MakeReports(r, examples, babi_fit_.truncated, text_tokens, timing);
}

absl::Status WriteEvalTables(const std::vector<ModeReport>& reports, const std::string& prefix,
                             const std::string& title) {
  plot::Table table({"mode", "EM", "F1", "F1 vs oracle", "F1 per file", "bytes/token",
                     "payload vs raw", "ppl", "KL vs oracle", "top-1 vs oracle", "encode ms",
                     "rebuild ms", "own prefill ms", "rebuild ms @long", "prefill ms @long"});
  double oracle_f1 = 0;
  for (const ModeReport& r : reports) {
    if (r.mode == CodecMode::kOracle) oracle_f1 = r.f1;
  }
  for (const ModeReport& r : reports) {
    std::string per_file;
    for (const auto& [file, v] : r.f1_by_file) {
      absl::StrAppend(&per_file, per_file.empty() ? "" : "; ", file.substr(0, file.find('_')), " ",
                      plot::FormatFixed(v.first, 3));
    }
    SCD_RETURN_IF_ERROR(table.AddRow(
        {r.label, plot::FormatFixed(r.em, 3), plot::FormatFixed(r.f1, 3),
         oracle_f1 > 0 ? plot::FormatFixed(r.f1 / oracle_f1, 3) : "-", per_file,
         plot::FormatFixed(r.payload_bytes_per_token, 1),
         plot::FormatFixed(r.payload_ratio_vs_raw, 3), plot::FormatFixed(r.ppl, 3),
         plot::FormatFixed(r.kl, 4), plot::FormatFixed(r.top1, 3),
         plot::FormatFixed(r.encode_ms, 3), plot::FormatFixed(r.rebuild_ms, 3),
         plot::FormatFixed(r.consumer_prefill_ms, 3), plot::FormatFixed(r.long_rebuild_ms, 3),
         plot::FormatFixed(r.long_prefill_ms, 3)}));
  }
  SCD_RETURN_IF_ERROR(table.WriteMarkdown(prefix + ".md"));
  SCD_RETURN_IF_ERROR(table.WriteCsv(prefix + ".csv"));

  // Quality against payload; oracle sits at payload 0 (it ships ids only) and is drawn as a
  // reference line. The Pareto front joins the points no other point beats on both axes.
  plot::Plot p(900, 600);
  p.SetTitle(title);
  p.SetXLabel("payload bytes / raw F16 bytes");
  p.SetYLabel("bAbI F1");
  std::vector<std::pair<double, double>> pts;
  for (const ModeReport& r : reports) {
    if (r.mode == CodecMode::kOracle) continue;
    SCD_RETURN_IF_ERROR(p.AddSeries(r.label, {r.payload_ratio_vs_raw}, {r.f1},
                                    {plot::SeriesStyle::kMarkers, {}, {}, 2, 6}));
    pts.push_back({r.payload_ratio_vs_raw, r.f1});
  }
  std::sort(pts.begin(), pts.end());
  std::vector<double> fx, fy;
  double best = -1;
  for (const auto& [x, y] : pts) {
    if (y > best) {
      fx.push_back(x);
      fy.push_back(y);
      best = y;
    }
  }
  if (!fx.empty()) {
    SCD_RETURN_IF_ERROR(
        p.AddSeries("Pareto front", fx, fy, {plot::SeriesStyle::kLine, {}, {}, 1, 0}));
  }
  if (oracle_f1 > 0 && !pts.empty()) {
    SCD_RETURN_IF_ERROR(p.AddSeries("oracle", {0.0, std::max(1.05, pts.back().first)},
                                    {oracle_f1, oracle_f1},
                                    {plot::SeriesStyle::kLine, {}, {}, 1, 0}));
  }
  return p.WritePng(prefix + ".png");
}

}  // namespace scd
