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
  auto say = [&](const std::string& s) {
    if (progress) progress(s);
  };
  SCD_RETURN_IF_ERROR(CheckBudget(cfg.budget));
  SCD_ASSIGN_OR_RETURN(auto dec, SekvDecoder::Create(Unowned(consumer_.model())));
  const CacheShape shape = dec->shape();
  const int vocab = consumer_.model().config.vocab_size;
  const int ctx = std::min(cfg.context, consumer_.model().config.max_position_embeddings);
  std::vector<std::string> methods = {"full", "sekv", "h2o", "chunk"};
  if (cfg.ablate) {
    for (const char* m : {"sekv-nozoom", "sekv-span", "sekv-nopin"}) methods.push_back(m);
  }
  // The ablations without pins plan every zoom-in slot as expansion buffer.
  BudgetShares no_pin_shares = cfg.shares;
  no_pin_shares.pin_share = 0;
  auto plan_for = [&](const std::string& method, const BudgetPlan& plan,
                      const BudgetPlan& no_pin) -> const BudgetPlan& {
    return method == "sekv-span" || method == "sekv-nopin" ? no_pin : plan;
  };
  std::vector<Accum> acc(methods.size());
  for (Accum& a : acc) a.niah.resize(cfg.niah_depths.size());
  double plan_g = 0, plan_w = 0, plan_b = 0, plan_p = 0, plan_a = 0, plan_s = 0, plan_ms = 0,
         plan_chunk = 0;
  int plans = 0;
  auto note_plan = [&](const BudgetPlan& p) {
    plan_g += p.budget_tokens;
    plan_w += p.segmentation.window_length();
    plan_b += p.sekv.expand_budget;
    plan_p += p.sekv.pin_tokens;
    plan_a += p.segmentation.anchors.size();
    plan_s += p.segmentation.spans.size();
    plan_ms += p.sekv.segmenter.min_span;
    plan_chunk += p.chunk.chunk_size;
    ++plans;
  };

  // ---- Text: perplexity, KL and top-1 against the full cache. ----
  if (!cfg.text_file.empty()) {
    SCD_ASSIGN_OR_RETURN(auto passages, eval::ReadPassages(cfg.text_file));
    const auto samples = PackPassages(tokenizer_, passages, ctx, cfg.text_samples);
    if (samples.empty())
      return absl::InvalidArgumentError("the text file gives no full-context sample");
    const int p = ctx - cfg.scored_tokens;
    if (p < 16 || cfg.scored_tokens < 2)
      return absl::InvalidArgumentError("scored_tokens leaves no prompt");
    std::vector<float> logits;
    for (size_t si = 0; si < samples.size(); ++si) {
      const auto& ids = samples[si];
      PrefillOptions po;
      po.layer_states = po.surprisal = true;
      PrefillResult pr;
      SCD_ASSIGN_OR_RETURN(auto seq, consumer_.NewSequence(p));
      SCD_RETURN_IF_ERROR(consumer_.Prefill(*seq, absl::MakeConstSpan(ids).first(p), po, &pr));
      SCD_ASSIGN_OR_RETURN(PrefixKv prefix, dec->MakePrefix(pr.layers, p, pr.surprisal));
      PrefillOptions all;
      all.all_logits = true;
      PrefillResult full;
      SCD_ASSIGN_OR_RETURN(auto fseq, consumer_.NewSequence(ctx));
      SCD_RETURN_IF_ERROR(consumer_.Prefill(*fseq, ids, all, &full));
      const BudgetPlan plan =
          PlanBudget(prefix.surprisal, cfg.budget, cfg.sekv, cfg.shares, shape.head_dim);
      const BudgetPlan no_pin =
          PlanBudget(prefix.surprisal, cfg.budget, cfg.sekv, no_pin_shares, shape.head_dim);
      note_plan(plan);
      for (size_t m = 0; m < methods.size(); ++m) {
        Accum& a = acc[m];
        SCD_ASSIGN_OR_RETURN(auto cache, MakeCache(methods[m], shape, prefix,
                                                   plan_for(methods[m], plan, no_pin), router_));
        for (int i = p; i < ctx - 1; ++i) {
          const auto ref =
              absl::MakeConstSpan(full.logits).subspan(static_cast<size_t>(i) * vocab, vocab);
          if (methods[m] == "full") {  // the prefill is the full cache's decode
            SCD_ASSIGN_OR_RETURN(double nll,
                                 eval::SumNll(ref, vocab, absl::MakeConstSpan(&ids[i + 1], 1)));
            a.nll += nll;
            a.top1 += 1;
            ++a.rows;
            continue;
          }
          SCD_RETURN_IF_ERROR(dec->Step(ids[i], i, *cache, &logits));
          if (i == p) a.memory += cache->Memory();
          SCD_ASSIGN_OR_RETURN(eval::LogitAgreement agree,
                               eval::CompareLogitRows(ref, logits, vocab));
          SCD_ASSIGN_OR_RETURN(double nll,
                               eval::SumNll(logits, vocab, absl::MakeConstSpan(&ids[i + 1], 1)));
          a.nll += nll;
          a.kl += agree.mean_kl;
          a.top1 += agree.top1_agreement;
          ++a.rows;
        }
        if (methods[m] == "full") a.memory += cache->Memory();
        Harvest(*cache, a);
      }
      if ((si + 1) % 10 == 0 || si + 1 == samples.size()) {
        std::string line = absl::StrFormat("text %zu/%zu:", si + 1, samples.size());
        for (size_t m = 0; m < methods.size(); ++m) {
          absl::StrAppendFormat(&line, " %s ppl %.4f", methods[m],
                                std::exp(acc[m].nll / std::max(acc[m].rows, 1L)));
        }
        say(line);
      }
    }
  }

  // ---- bAbI and the needle probe share one prompt → prefix → answer path. ----
  SCD_ASSIGN_OR_RETURN(auto enc, ProducerCodec::Create(Unowned(producer_.model()),
                                                       consumer_.model().digest, scd_, {}));
  SCD_ASSIGN_OR_RETURN(auto cdec, ConsumerCodec::Create(Unowned(consumer_.model()),
                                                        producer_.model().digest, scd_, {}));
  const bool through_scd = scd_ != nullptr;
  auto make_prefix = [&](absl::Span<const int32_t> prefix_ids) -> absl::StatusOr<PrefixKv> {
    const int t = static_cast<int>(prefix_ids.size());
    if (!through_scd) {
      PrefillOptions po;
      po.layer_states = po.surprisal = true;
      PrefillResult pr;
      SCD_ASSIGN_OR_RETURN(auto seq, consumer_.NewSequence(t));
      SCD_RETURN_IF_ERROR(consumer_.Prefill(*seq, prefix_ids, po, &pr));
      return dec->MakePrefix(pr.layers, t, pr.surprisal);
    }
    PrefillResult states;
    SCD_ASSIGN_OR_RETURN(auto pseq, producer_.NewSequence(t));
    SCD_RETURN_IF_ERROR(
        producer_.Prefill(*pseq, prefix_ids, ProducerPrefillOptions(CodecMode::kScd), &states));
    SCD_ASSIGN_OR_RETURN(Payload payload, enc->Encode(CodecMode::kScd, prefix_ids, states));
    SCD_ASSIGN_OR_RETURN(Payload parsed, ParsePayload(SerializePayload(payload)));
    KvCaptureBackend capture(consumer_);
    SCD_ASSIGN_OR_RETURN(auto cseq, capture.NewSequence(t));
    SCD_RETURN_IF_ERROR(cdec->Rebuild(parsed, capture, *cseq));
    // The surprisal travels in the payload; the producer's prefill computed it.
    return dec->MakePrefix(capture.TakeCaptured(), states.surprisal);
  };
  auto answer_all =
      [&](const std::vector<int32_t>& ids, const std::string& reference,
          const std::function<void(size_t, const eval::QaScore&)>& record) -> absl::Status {
    const int t = static_cast<int>(ids.size());
    SCD_ASSIGN_OR_RETURN(PrefixKv prefix, make_prefix(absl::MakeConstSpan(ids).first(t - 1)));
    const BudgetPlan plan =
        PlanBudget(prefix.surprisal, cfg.budget, cfg.sekv, cfg.shares, shape.head_dim);
    const BudgetPlan no_pin =
        PlanBudget(prefix.surprisal, cfg.budget, cfg.sekv, no_pin_shares, shape.head_dim);
    for (size_t m = 0; m < methods.size(); ++m) {
      SCD_ASSIGN_OR_RETURN(auto cache, MakeCache(methods[m], shape, prefix,
                                                 plan_for(methods[m], plan, no_pin), router_));
      SCD_ASSIGN_OR_RETURN(
          std::string answer,
          GreedyAnswer(*dec, *cache, ids[t - 1], t - 1, cfg.max_answer_tokens, tokenizer_, acc[m]));
      record(m, eval::ScoreAnswer(answer, reference));
    }
    return absl::OkStatus();
  };

  int babi_examples = 0;
  std::vector<eval::BabiStory> stories;
  if (!cfg.babi_files.empty()) {
    SCD_ASSIGN_OR_RETURN(stories, eval::ReadBabiFiles(cfg.babi_files));
    eval::BabiOptions bo;
    bo.max_examples = cfg.max_examples;
    bo.max_examples_per_file = cfg.max_examples_per_file;
    eval::BabiContextOptions fit;
    fit.max_prompt_tokens = ctx - cfg.max_answer_tokens;
    SCD_ASSIGN_OR_RETURN(
        auto qa, eval::FitBabiExamplesToContext(stories, eval::MakeBabiExamples(stories, bo),
                                                tokenizer_, fit));
    for (size_t i = 0; i < qa.size(); ++i) {
      const std::vector<int32_t> ids = tokenizer_.Encode(qa[i].prompt);
      if (ids.size() < 2 || static_cast<int>(ids.size()) + cfg.max_answer_tokens > ctx) continue;
      const std::string& loc = qa[i].location;
      const std::string file = loc.substr(0, loc.rfind(':'));
      const std::string base = file.substr(file.rfind('/') + 1);
      SCD_RETURN_IF_ERROR(answer_all(ids, qa[i].answer, [&](size_t m, const eval::QaScore& s) {
        acc[m].qa.Add(s);
        acc[m].by_file[base].Add(s);
      }));
      ++babi_examples;
      if (babi_examples % 50 == 0 || i + 1 == qa.size()) {
        std::string line = absl::StrFormat("bAbI %d/%zu:", babi_examples, qa.size());
        for (size_t m = 0; m < methods.size(); ++m) {
          absl::StrAppendFormat(&line, " %s F1 %.3f", methods[m], acc[m].qa.f1.mean());
        }
        say(line);
      }
    }
  }

  if (cfg.niah_trials > 0 && !stories.empty()) {
    const auto cases = MakeNiahCases(stories, tokenizer_, cfg);
    for (size_t i = 0; i < cases.size(); ++i) {
      const std::vector<int32_t> ids = tokenizer_.Encode(cases[i].prompt);
      SCD_RETURN_IF_ERROR(answer_all(ids, cases[i].answer, [&](size_t m, const eval::QaScore& s) {
        acc[m].niah[cases[i].depth_index].Add(s.em);
      }));
    }
    say(absl::StrFormat("needle probe: %zu prompts", cases.size()));
  }

  SekvEvalReport report;
  report.budget = cfg.budget;
  report.kv_source_babi = through_scd ? "scd" : "oracle";
  report.niah_depths = cfg.niah_depths;
  if (plans > 0) {
    report.plan = {{"budget_tokens", plan_g / plans}, {"window", plan_w / plans},
                   {"expand_budget", plan_b / plans}, {"pin_tokens", plan_p / plans},
                   {"anchors", plan_a / plans},       {"spans", plan_s / plans},
                   {"min_span", plan_ms / plans},     {"chunk_size", plan_chunk / plans},
                   {"text_samples_planned", plans}};
  }
  for (size_t m = 0; m < methods.size(); ++m) {
    const Accum& a = acc[m];
    MethodReport r;
    r.name = methods[m];
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
    report.methods.push_back(r);
  }
  return report;
}

}  // namespace scd::sekv
