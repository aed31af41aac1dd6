// See online_eval.h.
#include "common/tools/e2e/online_eval.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/eval/babi.h"
#include "common/eval/text_corpus.h"
#include "common/scd/artifact.h"
#include "common/scd/codec.h"
#include "common/scd/model_pair.h"
#include "common/scd/shared_artifact.h"
#include "common/serving/shadow_oracle.h"
#include "common/tools/cluster/local_cluster.h"
#include "proto/scd.grpc.pb.h"

namespace scd::e2e {
namespace {

constexpr char kToken[] = "online-eval-token";
constexpr char kSpecialist[] = "specialist";

// One prompt as served: its token ids (the daemon's tokenization) and the tokens generated,
// the stop token included where the model ended the answer itself.
struct Served {
  std::vector<int32_t> prompt, generated;
};

// The online means from the decode daemon's exposition (sums and counts of its histograms).
ShadowMeans OnlineMeans(const std::string& m, int layers) {
  ShadowMeans s;
  const double n = cluster::SumMetric(m, "scd_shadow_samples_total", {});
  s.samples = static_cast<int>(n);
  if (n <= 0) return s;
  s.first_kl = cluster::SumMetric(m, "scd_shadow_kl_sum", {"tokens=\"first\""}) / n;
  s.kl = cluster::SumMetric(m, "scd_shadow_kl_sum", {"tokens=\"generated\""}) / n;
  s.first_top1 = cluster::SumMetric(m, "scd_shadow_top1_agreement_sum", {"tokens=\"first\""}) / n;
  s.top1 = cluster::SumMetric(m, "scd_shadow_top1_agreement_sum", {"tokens=\"generated\""}) / n;
  for (int l = 0; l < layers; ++l) {
    const std::string layer = absl::StrCat("layer=\"", l, "\"");
    s.k_rel_error.push_back(
        cluster::SumMetric(m, "scd_shadow_kv_rel_error_sum", {layer, "kv=\"k\""}) / n);
    s.v_rel_error.push_back(
        cluster::SumMetric(m, "scd_shadow_kv_rel_error_sum", {layer, "kv=\"v\""}) / n);
  }
  return s;
}

absl::StatusOr<Served> Ask(scd::v1::Generation::Stub& stub, const OnlineEvalOptions& o,
                           const std::string& prompt, const Tokenizer& tokenizer,
                           const std::vector<int32_t>& eos) {
  scd::v1::GenerateRequest req;
  req.set_model(kSpecialist);
  req.set_prompt(prompt);
  req.set_max_tokens(o.tokens);
  req.set_return_token_ids(true);
  req.set_mode(o.mode);
  if (o.mode == "scd" || o.mode == "scd-reuse") req.set_rung(o.rung);
  req.mutable_sampling()->set_temperature(0);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  Served s;
  s.prompt = tokenizer.Encode(prompt, true);  // as the prefill daemon tokenizes a prompt
  auto reader = stub.Generate(&ctx, req);
  scd::v1::GenerateEvent e;
  std::string finish;
  while (reader->Read(&e)) {
    if (e.has_delta()) {
      s.generated.insert(s.generated.end(), e.delta().token_ids().begin(),
                         e.delta().token_ids().end());
    } else if (e.has_done()) {
      finish = e.done().finish_reason();
    }
  }
  grpc::Status st = reader->Finish();
  if (!st.ok())
    return absl::UnavailableError(absl::StrCat("a prompt failed: ", st.error_message()));
  // A stop token ends the answer without being streamed; the shadow oracle compares it too.
  if (finish == "stop" && static_cast<int>(s.generated.size()) < o.tokens && !eos.empty()) {
    s.generated.push_back(eos.front());
  }
  return s;
}

// Adds one offline comparison to `sum` (means taken at the end).
absl::Status AddOffline(const ModelPair& pair, const ProducerCodec& enc, const ConsumerCodec& dec,
                        CodecMode mode, int rung, const Served& s, ShadowMeans* sum) {
  if (s.prompt.size() < 2 || s.generated.empty()) return absl::OkStatus();
  // The prefill daemon's split with no payload blocks: every token but the last in the codes.
  const std::vector<int32_t> prefix(s.prompt.begin(), s.prompt.end() - 1);
  const std::vector<int32_t> suffix(s.prompt.end() - 1, s.prompt.end());
  SCD_ASSIGN_OR_RETURN(auto seq, pair.producer->NewSequence(static_cast<int>(prefix.size())));
  PrefillResult states;
  SCD_RETURN_IF_ERROR(pair.producer->Prefill(*seq, prefix, ProducerPrefillOptions(mode), &states));
  SCD_ASSIGN_OR_RETURN(Payload payload, enc.Encode(mode, prefix, states, 0, rung));
  // Through the wire format, as the decode daemon receives it.
  SCD_ASSIGN_OR_RETURN(payload, ParsePayload(SerializePayload(payload)));
  SCD_ASSIGN_OR_RETURN(ShadowStats st, CompareWithOwnCache(*pair.consumer, dec, std::move(payload),
                                                           suffix, s.generated));
  ++sum->samples;
  sum->first_kl += st.first_kl;
  sum->first_top1 += st.first_top1 ? 1 : 0;
  sum->kl += st.mean_kl;
  sum->top1 += st.top1_agreement;
  sum->k_rel_error.resize(st.k_rel_error.size());
  sum->v_rel_error.resize(st.v_rel_error.size());
  for (size_t l = 0; l < st.k_rel_error.size(); ++l) {
    sum->k_rel_error[l] += st.k_rel_error[l];
    sum->v_rel_error[l] += st.v_rel_error[l];
  }
  return absl::OkStatus();
}

void DivideBy(ShadowMeans* m) {
  if (m->samples == 0) return;
  const double n = m->samples;
  m->first_kl /= n, m->first_top1 /= n, m->kl /= n, m->top1 /= n;
  for (double& e : m->k_rel_error) e /= n;
  for (double& e : m->v_rel_error) e /= n;
}

double MaxDifference(const ShadowMeans& a, const ShadowMeans& b) {
  double d = std::max({std::abs(a.first_kl - b.first_kl), std::abs(a.kl - b.kl),
                       std::abs(a.first_top1 - b.first_top1), std::abs(a.top1 - b.top1)});
  for (size_t l = 0; l < a.k_rel_error.size() && l < b.k_rel_error.size(); ++l) {
    d = std::max({d, std::abs(a.k_rel_error[l] - b.k_rel_error[l]),
                  std::abs(a.v_rel_error[l] - b.v_rel_error[l])});
  }
  return d;
}

absl::StatusOr<std::vector<std::string>> Prompts(const OnlineEvalOptions& o,
                                                 const Tokenizer& tokenizer) {
  std::vector<std::string> prompts;
  if (!o.babi_files.empty()) {
    SCD_ASSIGN_OR_RETURN(auto examples, eval::LoadBabiExamples(o.babi_files));
    for (const eval::BabiExample& e : examples) prompts.push_back(e.prompt);
  } else if (!o.text_file.empty()) {
    eval::CorpusOptions co;
    co.max_passages = 4 * o.max_prompts;
    SCD_ASSIGN_OR_RETURN(auto passages, eval::ReadPassages(o.text_file, co));
    if (passages.size() < 2) {  // no blank lines: a passage a line, as WikiText's raw files
      co.format = eval::CorpusFormat::kLines;
      SCD_ASSIGN_OR_RETURN(passages, eval::ReadPassages(o.text_file, co));
    }
    eval::SplitOptions so;
    so.max_tokens = o.prompt_tokens;
    so.min_tokens = std::min(16, o.prompt_tokens);
    SCD_ASSIGN_OR_RETURN(auto splits, eval::MakePassageSplits(tokenizer, passages, so));
    for (const eval::PassageSplit& s : splits) {
      prompts.push_back(tokenizer.Decode(absl::MakeConstSpan(s.tokens).subspan(1)));  // no BOS
    }
  } else {
    return absl::InvalidArgumentError("--online needs --babi or --text for its prompts");
  }
  if (static_cast<int>(prompts.size()) > o.max_prompts) prompts.resize(o.max_prompts);
  return prompts;
}

// Serves every prompt through a daemon pair with the shadow oracle on; fills *served and
// *online.
absl::Status RunOnline(const OnlineEvalOptions& o, const std::vector<std::string>& prompts,
                       const Tokenizer& tokenizer, const std::vector<int32_t>& eos, int layers,
                       const OnlineProgressFn& progress, std::vector<Served>* served,
                       ShadowMeans* online, int* dropped) {
  nlohmann::json pc;
  pc["base_model"] = o.base_model;
  pc["http"] = {{"port", 0}};
  pc["control_plane"] = {{"cluster_token", kToken}, {"heartbeat_interval", "100ms"}};
  pc["prefix_cache"] = {{"enabled", false}, {"block_tokens", 0}};
  pc["limits"] = {{"max_tokens", std::max(256, o.tokens)}, {"request_timeout", "300s"}};
  pc["specialists"] = nlohmann::json::array({{{"name", kSpecialist},
                                              {"artifact", o.artifact},
                                              {"consumer_path", o.specialist_model},
                                              {"mode", o.mode}}});
  cluster::DecodeDaemonSpec spec;
  spec.model_name = kSpecialist;
  spec.model_path = o.specialist_model;
  spec.artifact = o.artifact;
  spec.cluster_token = kToken;
  spec.extra = {{"http", {{"port", 0}}},
                {"quality",
                 {{"shadow_rate", 1},
                  {"shadow_tokens", o.tokens},
                  {"shadow_max_tokens_per_s", 1e9},
                  {"shadow_max_pending", 1024}}}};
  SCD_ASSIGN_OR_RETURN(cluster::LocalPair pair,
                       cluster::StartLocalPair(o.bin_dir, pc, spec, 1, o.workdir));
  SCD_ASSIGN_OR_RETURN(nlohmann::json started,
                       pair.decodes[0]->WaitForEvent("decode_started", std::chrono::seconds(60)));
  const int decode_port = started.value("http_port", -1);
  if (decode_port <= 0) return absl::InternalError("the decode daemon reports no http_port");
  auto stub = scd::v1::Generation::NewStub(
      grpc::CreateChannel(pair.grpc_address, grpc::InsecureChannelCredentials()));
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCD_ASSIGN_OR_RETURN(Served s, Ask(*stub, o, prompts[i], tokenizer, eos));
    served->push_back(std::move(s));
    if (progress && ((i + 1) % 25 == 0 || i + 1 == prompts.size())) {
      progress(absl::StrFormat("online: %zu/%zu prompts served", i + 1, prompts.size()));
    }
  }
  // The samples are compared in the decode daemon's idle time, after their requests.
  int expected = 0;
  for (const Served& s : *served) expected += s.prompt.size() >= 2 && !s.generated.empty();
  std::string metrics;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (true) {
    SCD_ASSIGN_OR_RETURN(metrics, cluster::ScrapeMetrics(decode_port));
    const double seen = cluster::SumMetric(metrics, "scd_shadow_samples_total", {}) +
                        cluster::SumMetric(metrics, "scd_shadow_dropped_total", {});
    if (seen >= expected) break;
    if (std::chrono::steady_clock::now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat("the decode daemon compared ", seen, " of ",
                                                      expected, " samples in 10 minutes"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // polling its /metrics
  }
  *online = OnlineMeans(metrics, layers);
  *dropped = static_cast<int>(cluster::SumMetric(metrics, "scd_shadow_dropped_total", {}));
  return absl::OkStatus();
}

}  // namespace

nlohmann::json ShadowMeans::ToJson() const {
  return {
      {"samples", samples}, {"first_kl", first_kl},       {"first_top1", first_top1},  {"kl", kl},
      {"top1", top1},       {"k_rel_error", k_rel_error}, {"v_rel_error", v_rel_error}};
}

nlohmann::json OnlineEvalReport::ToJson() const {
  return {{"online", online.ToJson()},
          {"offline", offline.ToJson()},
          {"max_abs_difference", max_abs_difference},
          {"dropped", dropped}};
}

std::string OnlineEvalReport::Markdown() const {
  auto row = [](const char* name, const ShadowMeans& m) {
    double k = 0, v = 0;
    for (double e : m.k_rel_error) k += e;
    for (double e : m.v_rel_error) v += e;
    const double layers = std::max<size_t>(1, m.k_rel_error.size());
    return absl::StrFormat("| %s | %d | %.4f | %.3f | %.4f | %.3f | %.4f | %.4f |\n", name,
                           m.samples, m.first_kl, m.first_top1, m.kl, m.top1, k / layers,
                           v / layers);
  };
  return absl::StrCat(
      "| statistics | samples | KL first | top-1 first | KL generated | top-1 generated | K rel. "
      "error | V rel. error |\n|---|---|---|---|---|---|---|---|\n",
      row("online (decode daemon /metrics)", online), row("offline (this process)", offline),
      absl::StrFormat("\nmax_abs_difference=%.2e dropped=%d\n", max_abs_difference, dropped));
}

absl::StatusOr<OnlineEvalReport> RunOnlineEval(const OnlineEvalOptions& o,
                                               const OnlineProgressFn& progress) {
  SCD_ASSIGN_OR_RETURN(CodecMode mode, ParseCodecMode(o.mode));
  if (mode == CodecMode::kOracle) {
    return absl::InvalidArgumentError("--online compares codes with the oracle: pick another mode");
  }
  SCD_ASSIGN_OR_RETURN(ModelPair pair, LoadModelPair(o.base_model, o.specialist_model));
  SCD_ASSIGN_OR_RETURN(ScdArtifact loaded,
                       LoadArtifactFor(o.artifact, pair.consumer_model->digest()));
  auto artifact = std::make_shared<const ScdArtifact>(std::move(loaded));
  SCD_ASSIGN_OR_RETURN(auto enc, ProducerCodec::Create(pair.producer_model,
                                                       pair.consumer_model->digest(), artifact));
  SCD_ASSIGN_OR_RETURN(auto dec, ConsumerCodec::Create(pair.consumer_model,
                                                       pair.producer_model->digest(), artifact));
  const ModelConfig& c = pair.consumer_model->config;
  OnlineEvalReport report;
  std::vector<Served> served;
  SCD_ASSIGN_OR_RETURN(const std::vector<std::string> prompts, Prompts(o, *pair.tokenizer));
  SCD_RETURN_IF_ERROR(RunOnline(o, prompts, *pair.tokenizer, c.eos_token_ids, c.num_layers,
                                progress, &served, &report.online, &report.dropped));
  for (size_t i = 0; i < served.size(); ++i) {
    SCD_RETURN_IF_ERROR(AddOffline(pair, *enc, *dec, mode, o.rung, served[i], &report.offline));
    if (progress && ((i + 1) % 25 == 0 || i + 1 == served.size())) {
      progress(absl::StrFormat("offline: %zu/%zu prompts compared", i + 1, served.size()));
    }
  }
  DivideBy(&report.offline);
  report.max_abs_difference = MaxDifference(report.online, report.offline);
  return report;
}

}  // namespace scd::e2e
