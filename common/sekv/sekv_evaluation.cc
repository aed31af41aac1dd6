// See sekv_evaluation.h.
#include "common/sekv/sekv_evaluation.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/random.h"
#include "common/base/status_macros.h"
#include "common/eval/answer.h"
#include "common/eval/babi.h"
#include "common/eval/babi_context.h"
#include "common/eval/metrics.h"
#include "common/eval/text_corpus.h"
#include "common/runtime/sampler.h"
#include "common/scd/codec.h"
#include "common/sekv/kv_capture_backend.h"
#include "common/sekv/packed_text.h"
#include "common/sekv/sekv_decoder.h"

namespace scd::sekv {
namespace {

std::shared_ptr<const Model> Unowned(const Model& m) {
  return std::shared_ptr<const Model>(std::shared_ptr<const Model>(), &m);
}

struct Accum {
  MemoryBreakdown memory;
  double nll = 0, kl = 0, top1 = 0;
  long rows = 0;
  eval::QaAggregate qa;
  std::map<std::string, eval::QaAggregate> by_file;
  std::vector<eval::MeanAccumulator> niah;
  long zoom_rounds = 0, expanded_tokens = 0, candidate_tokens = 0, fetch_requests = 0,
       fetch_hits = 0;
  double wait_ms = 0;
};

absl::StatusOr<std::unique_ptr<KvCache>> MakeCache(const std::string& method,
                                                   const CacheShape& shape, const PrefixKv& prefix,
                                                   const BudgetPlan& plan,
                                                   std::shared_ptr<const ZoomRouter> router) {
  if (method == "full") return std::unique_ptr<KvCache>(new FullKvCache(shape, prefix));
  if (method == "h2o") {
    SCD_ASSIGN_OR_RETURN(auto c, HeavyHitterCache::Create(shape, prefix, plan.h2o));
    return std::unique_ptr<KvCache>(std::move(c));
  }
  if (method == "chunk") {
    SCD_ASSIGN_OR_RETURN(auto c, CreateChunkCache(shape, prefix, plan.chunk));
    return std::unique_ptr<KvCache>(std::move(c));
  }
  SekvOptions o = plan.sekv;
  if (method == "sekv-nozoom") {
    o.zoom = false;
    o.expand_budget = o.cache_tokens = o.pin_tokens = 0;
  } else if (method == "sekv-span" || method == "sekv-nopin") {
    // The plan was made with pin_share 0: every zoom-in slot is the expansion buffer.
    o.pin_tokens = 0;
    if (method == "sekv-span") o.resolution = ZoomResolution::kSpan;
  }
  SCD_ASSIGN_OR_RETURN(auto c, SekvCache::CreateWithSegmentation(shape, prefix, plan.segmentation,
                                                                 o, std::move(router)));
  return std::unique_ptr<KvCache>(std::move(c));
}

// Sums of the text samples' plan figures, reported as means.
struct PlanTotals {
  double budget_tokens = 0, window = 0, expand_budget = 0, pin_tokens = 0, anchors = 0, spans = 0,
         min_span = 0, chunk_size = 0;
  int plans = 0;

  void Add(const BudgetPlan& p) {
    budget_tokens += p.budget_tokens;
    window += p.segmentation.window_length();
    expand_budget += p.sekv.expand_budget;
    pin_tokens += p.sekv.pin_tokens;
    anchors += p.segmentation.anchors.size();
    spans += p.segmentation.spans.size();
    min_span += p.sekv.segmenter.min_span;
    chunk_size += p.chunk.chunk_size;
    ++plans;
  }
  nlohmann::json Means() const {
    return {{"budget_tokens", budget_tokens / plans},
            {"window", window / plans},
            {"expand_budget", expand_budget / plans},
            {"pin_tokens", pin_tokens / plans},
            {"anchors", anchors / plans},
            {"spans", spans / plans},
            {"min_span", min_span / plans},
            {"chunk_size", chunk_size / plans},
            {"text_samples_planned", plans}};
  }
};

// One prompt's plans: as configured, and without pins for the ablations that plan every
// zoom-in slot as expansion buffer.
struct PromptPlans {
  BudgetPlan plan, no_pin;

  const BudgetPlan& For(const std::string& method) const {
    return method == "sekv-span" || method == "sekv-nopin" ? no_pin : plan;
  }
};

void Harvest(const KvCache& cache, Accum& a) {
  const auto* s = dynamic_cast<const SekvCache*>(&cache);
  if (s == nullptr) return;
  const ZoomStats z = s->zoom_stats();
  const FetchStats f = s->fetch_stats();
  a.zoom_rounds += z.steps;
  a.expanded_tokens += z.expanded_tokens;
  a.candidate_tokens += z.candidate_tokens;
  a.fetch_requests += f.requests;
  a.fetch_hits += f.hits;
  a.wait_ms += f.wait_ms;
}

// Decodes the last prompt token, then answers greedily; records memory after the first step.
absl::StatusOr<std::string> GreedyAnswer(SekvDecoder& dec, KvCache& cache, int32_t last, int pos,
                                         int max_tokens, const Tokenizer& tok, Accum& a) {
  std::vector<float> logits;
  SCD_RETURN_IF_ERROR(dec.Step(last, pos, cache, &logits));
  a.memory += cache.Memory();
  eval::AnswerCollector collector(tok);
  for (int step = 0; step < max_tokens; ++step) {
    const int32_t next = ArgMax(logits);
    if (!collector.Push(next) || step + 1 == max_tokens) break;
    SCD_RETURN_IF_ERROR(dec.Step(next, pos + 1 + step, cache, &logits));
  }
  Harvest(cache, a);
  return collector.answer();
}

struct NiahCase {
  std::string prompt, answer;
  int depth_index = 0;
};

std::string LastWord(const std::string& s) {
  std::string w = s.substr(s.rfind(' ') + 1);
  while (!w.empty() && (w.back() == '.' || w.back() == '?')) w.pop_back();
  return w;
}

// Needle-in-a-haystack prompts from bAbI statements (see the header).
std::vector<NiahCase> MakeNiahCases(const std::vector<eval::BabiStory>& stories,
                                    const Tokenizer& tok, const SekvEvalConfig& cfg) {
  std::map<std::string, std::vector<std::string>> by_actor;
  for (const auto& s : stories) {
    for (const auto& line : s.lines) {
      if (line.is_question || line.text.empty()) continue;
      const std::string actor = line.text.substr(0, line.text.find(' '));
      if (line.text.find(" to the ") == std::string::npos) continue;
      by_actor[actor].push_back(line.text);
    }
  }
  std::vector<std::string> actors;
  for (const auto& [a, v] : by_actor) actors.push_back(a);
  std::vector<NiahCase> out;
  if (actors.size() < 2) return out;
  const int budget = cfg.context - cfg.max_answer_tokens - 1;
  for (int di = 0; di < static_cast<int>(cfg.niah_depths.size()); ++di) {
    for (int trial = 0; trial < cfg.niah_trials; ++trial) {
      SplitMix64 rng(1000003ULL * (trial + 1) + 7919ULL * di);
      const std::string& actor = actors[trial % actors.size()];
      const auto& own = by_actor[actor];
      const std::string needle = own[rng.NextBelow(static_cast<uint32_t>(own.size()))];
      std::vector<std::string> filler;
      while (filler.size() < 200) {
        const std::string& other = actors[rng.NextBelow(static_cast<uint32_t>(actors.size()))];
        if (other == actor) continue;
        const auto& v = by_actor[other];
        filler.push_back(v[rng.NextBelow(static_cast<uint32_t>(v.size()))]);
      }
      const std::string question = absl::StrCat("Q: Where is ", actor, "? A:");
      auto build = [&](int n) {
        std::vector<std::string> parts(filler.begin(), filler.begin() + n);
        const int at = static_cast<int>(std::lround(cfg.niah_depths[di] * n));
        parts.insert(parts.begin() + at, needle);
        parts.push_back(question);
        return absl::StrJoin(parts, " ");
      };
      int lo = 0, hi = static_cast<int>(filler.size());
      while (lo < hi) {  // the most filler sentences that fit
        const int mid = (lo + hi + 1) / 2;
        if (static_cast<int>(tok.Encode(build(mid)).size()) <= budget)
          lo = mid;
        else
          hi = mid - 1;
      }
      out.push_back({build(lo), LastWord(needle), di});
    }
  }
  return out;
}

std::vector<std::string> MethodNames(const SekvEvalConfig& cfg) {
  std::vector<std::string> methods = {"full", "sekv", "h2o", "chunk"};
  if (cfg.ablate) {
    for (const char* m : {"sekv-nozoom", "sekv-span", "sekv-nopin"}) methods.push_back(m);
  }
  return methods;
}

BudgetShares NoPinShares(BudgetShares shares) {
  shares.pin_share = 0;
  return shares;
}

// What the steps of one SekvEvaluator::Run share: the pair, the decoder, the methods and the
// sums per method.
struct SekvRun {
  SekvRun(const SekvEvalConfig& c, const std::function<void(const std::string&)>& p, Backend& prod,
          Backend& cons, const Tokenizer& tok, const std::shared_ptr<const ZoomRouter>& rt,
          std::unique_ptr<SekvDecoder> d)
      : cfg(c),
        progress(p),
        producer(prod),
        consumer(cons),
        tokenizer(tok),
        router(rt),
        dec(std::move(d)),
        shape(dec->shape()),
        vocab(cons.model().config.vocab_size),
        ctx(std::min(c.context, cons.model().config.max_position_embeddings)),
        methods(MethodNames(c)),
        no_pin_shares(NoPinShares(c.shares)),
        acc(methods.size()) {
    for (Accum& a : acc) a.niah.resize(cfg.niah_depths.size());
  }

  void Say(const std::string& s) const {
    if (progress) progress(s);
  }
  PromptPlans Plan(const std::vector<float>& surprisal) const {
    return {PlanBudget(surprisal, cfg.budget, cfg.sekv, cfg.shares, shape.head_dim),
            PlanBudget(surprisal, cfg.budget, cfg.sekv, no_pin_shares, shape.head_dim)};
  }

  const SekvEvalConfig& cfg;
  const std::function<void(const std::string&)>& progress;
  Backend& producer;
  Backend& consumer;
  const Tokenizer& tokenizer;
  const std::shared_ptr<const ZoomRouter>& router;
  std::unique_ptr<SekvDecoder> dec;
  const CacheShape shape;
  const int vocab, ctx;
  const std::vector<std::string> methods;
  const BudgetShares no_pin_shares;
  std::vector<Accum> acc;
  PlanTotals plans;
  // The bAbI and needle prefixes: through the SCD codec when `through_scd`, else oracle.
  std::unique_ptr<ProducerCodec> enc;
  std::unique_ptr<ConsumerCodec> cdec;
  bool through_scd = false;
};

// The consumer's own prefill of `ids`: oracle K/V and surprisal.
absl::StatusOr<PrefixKv> OraclePrefix(SekvRun& r, absl::Span<const int32_t> ids) {
  const int t = static_cast<int>(ids.size());
  PrefillOptions po;
  po.layer_states = po.surprisal = true;
  PrefillResult pr;
  SCD_ASSIGN_OR_RETURN(auto seq, r.consumer.NewSequence(t));
  SCD_RETURN_IF_ERROR(r.consumer.Prefill(*seq, ids, po, &pr));
  return r.dec->MakePrefix(pr.layers, t, pr.surprisal);
}

// Decodes the text sample's scored tokens teacher-forced through method m's cache and adds
// perplexity, KL and top-1 against the full cache's logits to its sums.
absl::Status ScoreTextMethod(SekvRun& r, size_t m, const std::vector<int32_t>& ids, int p,
                             const PrefixKv& prefix, const PromptPlans& plans,
                             const std::vector<float>& full_logits, std::vector<float>& logits) {
  Accum& a = r.acc[m];
  const std::string& method = r.methods[m];
  SCD_ASSIGN_OR_RETURN(auto cache, MakeCache(method, r.shape, prefix, plans.For(method), r.router));
  for (int i = p; i < r.ctx - 1; ++i) {
    const auto ref =
        absl::MakeConstSpan(full_logits).subspan(static_cast<size_t>(i) * r.vocab, r.vocab);
    if (method == "full") {  // the prefill is the full cache's decode
      SCD_ASSIGN_OR_RETURN(double nll,
                           eval::SumNll(ref, r.vocab, absl::MakeConstSpan(&ids[i + 1], 1)));
      a.nll += nll;
      a.top1 += 1;
      ++a.rows;
      continue;
    }
    SCD_RETURN_IF_ERROR(r.dec->Step(ids[i], i, *cache, &logits));
    if (i == p) a.memory += cache->Memory();
    SCD_ASSIGN_OR_RETURN(eval::LogitAgreement agree, eval::CompareLogitRows(ref, logits, r.vocab));
    SCD_ASSIGN_OR_RETURN(double nll,
                         eval::SumNll(logits, r.vocab, absl::MakeConstSpan(&ids[i + 1], 1)));
    a.nll += nll;
    a.kl += agree.mean_kl;
    a.top1 += agree.top1_agreement;
    ++a.rows;
  }
  if (method == "full") a.memory += cache->Memory();
  Harvest(*cache, a);
  return absl::OkStatus();
}

// One packed text sample: the first p tokens are the prompt, the rest are scored.
absl::Status ScoreTextSample(SekvRun& r, const std::vector<int32_t>& ids, int p,
                             std::vector<float>& logits) {
  SCD_ASSIGN_OR_RETURN(PrefixKv prefix, OraclePrefix(r, absl::MakeConstSpan(ids).first(p)));
  PrefillOptions all;
  all.all_logits = true;
  PrefillResult full;
  SCD_ASSIGN_OR_RETURN(auto fseq, r.consumer.NewSequence(r.ctx));
  SCD_RETURN_IF_ERROR(r.consumer.Prefill(*fseq, ids, all, &full));
  const PromptPlans plans = r.Plan(prefix.surprisal);
  r.plans.Add(plans.plan);
  for (size_t m = 0; m < r.methods.size(); ++m) {
    SCD_RETURN_IF_ERROR(ScoreTextMethod(r, m, ids, p, prefix, plans, full.logits, logits));
  }
  return absl::OkStatus();
}

// Text: perplexity, KL and top-1 against the full cache.
absl::Status RunText(SekvRun& r) {
  if (r.cfg.text_file.empty()) return absl::OkStatus();
  SCD_ASSIGN_OR_RETURN(auto passages, eval::ReadPassages(r.cfg.text_file));
  const auto samples = PackPassages(r.tokenizer, passages, r.ctx, r.cfg.text_samples);
  if (samples.empty())
    return absl::InvalidArgumentError("the text file gives no full-context sample");
  const int p = r.ctx - r.cfg.scored_tokens;
  if (p < 16 || r.cfg.scored_tokens < 2)
    return absl::InvalidArgumentError("scored_tokens leaves no prompt");
  std::vector<float> logits;
  for (size_t si = 0; si < samples.size(); ++si) {
    SCD_RETURN_IF_ERROR(ScoreTextSample(r, samples[si], p, logits));
    if ((si + 1) % 10 == 0 || si + 1 == samples.size()) {
      std::string line = absl::StrFormat("text %zu/%zu:", si + 1, samples.size());
      for (size_t m = 0; m < r.methods.size(); ++m) {
        absl::StrAppendFormat(&line, " %s ppl %.4f", r.methods[m],
                              std::exp(r.acc[m].nll / std::max(r.acc[m].rows, 1L)));
      }
      r.Say(line);
    }
  }
  return absl::OkStatus();
}

// The prefix through the full SCD path: the producer prefills, the scd codec encodes,
// serialises, parses and rebuilds the consumer's pre-RoPE K/V.
absl::StatusOr<PrefixKv> ScdPrefix(SekvRun& r, absl::Span<const int32_t> prefix_ids) {
  const int t = static_cast<int>(prefix_ids.size());
  PrefillResult states;
  SCD_ASSIGN_OR_RETURN(auto pseq, r.producer.NewSequence(t));
  SCD_RETURN_IF_ERROR(
      r.producer.Prefill(*pseq, prefix_ids, ProducerPrefillOptions(CodecMode::kScd), &states));
  SCD_ASSIGN_OR_RETURN(Payload payload, r.enc->Encode(CodecMode::kScd, prefix_ids, states));
  SCD_ASSIGN_OR_RETURN(Payload parsed, ParsePayload(SerializePayload(payload)));
  KvCaptureBackend capture(r.consumer);
  SCD_ASSIGN_OR_RETURN(auto cseq, capture.NewSequence(t));
  SCD_RETURN_IF_ERROR(r.cdec->Rebuild(parsed, capture, *cseq));
  // The surprisal travels in the payload; the producer's prefill computed it.
  return r.dec->MakePrefix(capture.TakeCaptured(), states.surprisal);
}

// bAbI and the needle probe share one prompt → prefix → answer path: every method answers
// the prompt `ids` and `record` gets its score against `reference`.
absl::Status AnswerAll(SekvRun& r, const std::vector<int32_t>& ids, const std::string& reference,
                       const std::function<void(size_t, const eval::QaScore&)>& record) {
  const int t = static_cast<int>(ids.size());
  const auto prefix_ids = absl::MakeConstSpan(ids).first(t - 1);
  SCD_ASSIGN_OR_RETURN(PrefixKv prefix,
                       r.through_scd ? ScdPrefix(r, prefix_ids) : OraclePrefix(r, prefix_ids));
  const PromptPlans plans = r.Plan(prefix.surprisal);
  for (size_t m = 0; m < r.methods.size(); ++m) {
    SCD_ASSIGN_OR_RETURN(
        auto cache, MakeCache(r.methods[m], r.shape, prefix, plans.For(r.methods[m]), r.router));
    SCD_ASSIGN_OR_RETURN(std::string answer,
                         GreedyAnswer(*r.dec, *cache, ids[t - 1], t - 1, r.cfg.max_answer_tokens,
                                      r.tokenizer, r.acc[m]));
    record(m, eval::ScoreAnswer(answer, reference));
  }
  return absl::OkStatus();
}

// bAbI question answering; returns the number of examples scored.
absl::StatusOr<int> RunBabi(SekvRun& r, const std::vector<eval::BabiStory>& stories) {
  int babi_examples = 0;
  if (r.cfg.babi_files.empty()) return babi_examples;
  eval::BabiOptions bo;
  bo.max_examples = r.cfg.max_examples;
  bo.max_examples_per_file = r.cfg.max_examples_per_file;
  eval::BabiContextOptions fit;
  fit.max_prompt_tokens = r.ctx - r.cfg.max_answer_tokens;
  SCD_ASSIGN_OR_RETURN(auto qa,
                       eval::FitBabiExamplesToContext(stories, eval::MakeBabiExamples(stories, bo),
                                                      r.tokenizer, fit));
  for (size_t i = 0; i < qa.size(); ++i) {
    const std::vector<int32_t> ids = r.tokenizer.Encode(qa[i].prompt);
    if (ids.size() < 2 || static_cast<int>(ids.size()) + r.cfg.max_answer_tokens > r.ctx) continue;
    const std::string& loc = qa[i].location;
    const std::string file = loc.substr(0, loc.rfind(':'));
    const std::string base = file.substr(file.rfind('/') + 1);
    SCD_RETURN_IF_ERROR(AnswerAll(r, ids, qa[i].answer, [&](size_t m, const eval::QaScore& s) {
      r.acc[m].qa.Add(s);
      r.acc[m].by_file[base].Add(s);
    }));
    ++babi_examples;
    if (babi_examples % 50 == 0 || i + 1 == qa.size()) {
      std::string line = absl::StrFormat("bAbI %d/%zu:", babi_examples, qa.size());
      for (size_t m = 0; m < r.methods.size(); ++m) {
        absl::StrAppendFormat(&line, " %s F1 %.3f", r.methods[m], r.acc[m].qa.f1.mean());
      }
      r.Say(line);
    }
  }
  return babi_examples;
}

// Needle in a haystack: accuracy per depth.
absl::Status RunNeedleProbe(SekvRun& r, const std::vector<eval::BabiStory>& stories) {
  if (r.cfg.niah_trials <= 0 || stories.empty()) return absl::OkStatus();
  const auto cases = MakeNiahCases(stories, r.tokenizer, r.cfg);
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<int32_t> ids = r.tokenizer.Encode(cases[i].prompt);
    SCD_RETURN_IF_ERROR(AnswerAll(r, ids, cases[i].answer, [&](size_t m, const eval::QaScore& s) {
      r.acc[m].niah[cases[i].depth_index].Add(s.em);
    }));
  }
  r.Say(absl::StrFormat("needle probe: %zu prompts", cases.size()));
  return absl::OkStatus();
}

MethodReport MakeMethodReport(const std::string& name, const Accum& a, int babi_examples) {
  MethodReport r;
  r.name = name;
  r.memory = a.memory;
  r.text_nll = a.nll;
  r.text_kl = a.kl;
  r.text_top1 = a.top1;
  r.text_rows = a.rows;
  r.f1 = a.qa.f1.mean();
  r.em = a.qa.em.mean();
  r.babi_examples = babi_examples;
  for (const auto& [f, agg] : a.by_file)
    r.f1_by_file[f] = {agg.f1.mean(), static_cast<int>(agg.f1.count())};
  for (const auto& n : a.niah) r.niah_accuracy.push_back(n.mean());
  r.expanded_tokens_per_step =
      a.zoom_rounds > 0 ? static_cast<double>(a.expanded_tokens) / a.zoom_rounds : 0;
  r.candidate_tokens_per_step =
      a.zoom_rounds > 0 ? static_cast<double>(a.candidate_tokens) / a.zoom_rounds : 0;
  r.fetch_hit_rate =
      a.fetch_requests > 0 ? static_cast<double>(a.fetch_hits) / a.fetch_requests : 0;
  r.fetch_wait_ms = a.wait_ms;
  return r;
}

}  // namespace

double MethodReport::ppl() const { return text_rows > 0 ? std::exp(text_nll / text_rows) : 0; }

const MethodReport* SekvEvalReport::Find(const std::string& name) const {
  for (const auto& m : methods) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

nlohmann::json SekvEvalReport::ToJson() const {
  nlohmann::json out = nlohmann::json::object();
  const MethodReport* full = Find("full");
  for (const MethodReport& m : methods) {
    if (m.name == "full") continue;
    nlohmann::json j = {{"budget", budget},
                        {"gpu_bytes_ratio", m.memory.gpu_ratio()},
                        {"ppl_full", full ? full->ppl() : 0},
                        {"ppl_" + m.name, m.ppl()},
                        {"ppl", m.ppl()},
                        {"f1_full", full ? full->f1 : 0},
                        {"f1_" + m.name, m.f1},
                        {"f1", m.f1},
                        {"em_full", full ? full->em : 0},
                        {"em", m.em},
                        {"top1_agreement", m.text_rows > 0 ? m.text_top1 / m.text_rows : 0},
                        {"kl_vs_full", m.text_rows > 0 ? m.text_kl / m.text_rows : 0},
                        {"text_tokens", m.text_rows},
                        {"babi_examples", m.babi_examples},
                        {"babi_kv_source", kv_source_babi},
                        {"niah_depths", niah_depths},
                        {"niah_accuracy_full", full ? full->niah_accuracy : std::vector<double>{}},
                        {"niah_accuracy", m.niah_accuracy},
                        {"bytes",
                         {{"gpu", m.memory.gpu()},
                          {"anchors", m.memory.anchors},
                          {"summaries", m.memory.summaries},
                          {"window", m.memory.window},
                          {"expanded_cache", m.memory.expanded_cache},
                          {"pinned", m.memory.pinned},
                          {"cpu_bases", m.memory.cpu_bases},
                          {"full_kv", m.memory.full_kv}}}};
    nlohmann::json by_file = nlohmann::json::object();
    for (const auto& [f, v] : m.f1_by_file) by_file[f] = {{"f1", v.first}, {"examples", v.second}};
    j["f1_by_file"] = by_file;
    nlohmann::json full_by_file = nlohmann::json::object();
    if (full != nullptr) {
      for (const auto& [f, v] : full->f1_by_file) {
        full_by_file[f] = {{"f1", v.first}, {"examples", v.second}};
      }
    }
    j["f1_by_file_full"] = full_by_file;
    if (m.name.rfind("sekv", 0) == 0) {
      j["expanded_tokens_per_round"] = m.expanded_tokens_per_step;
      j["candidate_tokens_per_round"] = m.candidate_tokens_per_step;
      j["fetch_hit_rate"] = m.fetch_hit_rate;
      j["fetch_wait_ms"] = m.fetch_wait_ms;
      if (m.name == "sekv") j["plan"] = plan;
    }
    out[m.name] = j;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<SekvEvaluator>> SekvEvaluator::Create(
    Backend& producer, Backend& consumer, std::shared_ptr<const ScdArtifact> scd_artifact,
    const Tokenizer& tokenizer, std::shared_ptr<const ZoomRouter> router) {
  if (scd_artifact != nullptr) {
    SCD_RETURN_IF_ERROR(scd_artifact->CheckPair(&producer.model(), &consumer.model()));
  }
  return std::unique_ptr<SekvEvaluator>(
      new SekvEvaluator(producer, consumer, std::move(scd_artifact), tokenizer, std::move(router)));
}

absl::StatusOr<SekvEvalReport> SekvEvaluator::Run(
    const SekvEvalConfig& cfg, const std::function<void(const std::string&)>& progress) {
  SCD_RETURN_IF_ERROR(CheckBudget(cfg.budget));
  SCD_ASSIGN_OR_RETURN(auto dec, SekvDecoder::Create(Unowned(consumer_.model())));
  SekvRun r(cfg, progress, producer_, consumer_, tokenizer_, router_, std::move(dec));
  SCD_RETURN_IF_ERROR(RunText(r));

  SCD_ASSIGN_OR_RETURN(r.enc, ProducerCodec::Create(Unowned(producer_.model()),
                                                    consumer_.model().digest(), scd_, {}));
  SCD_ASSIGN_OR_RETURN(r.cdec, ConsumerCodec::Create(Unowned(consumer_.model()),
                                                     producer_.model().digest(), scd_, {}));
  r.through_scd = scd_ != nullptr;
  std::vector<eval::BabiStory> stories;
  if (!cfg.babi_files.empty()) {
    SCD_ASSIGN_OR_RETURN(stories, eval::ReadBabiFiles(cfg.babi_files));
  }
  SCD_ASSIGN_OR_RETURN(const int babi_examples, RunBabi(r, stories));
  SCD_RETURN_IF_ERROR(RunNeedleProbe(r, stories));

  SekvEvalReport report;
  report.budget = cfg.budget;
  report.kv_source_babi = r.through_scd ? "scd" : "oracle";
  report.niah_depths = cfg.niah_depths;
  if (r.plans.plans > 0) report.plan = r.plans.Means();
  for (size_t m = 0; m < r.methods.size(); ++m) {
    report.methods.push_back(MakeMethodReport(r.methods[m], r.acc[m], babi_examples));
  }
  return report;
}

}  // namespace scd::sekv
