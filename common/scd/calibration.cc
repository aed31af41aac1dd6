// See calibration.h.
#include "common/scd/calibration.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/scd/wire_format.h"

namespace scd {
namespace {

std::shared_ptr<const Model> Unowned(const Model& m) {
  return std::shared_ptr<const Model>(std::shared_ptr<const Model>(), &m);
}

void Say(const ProgressFn& progress, const std::string& line) {
  if (progress) progress(line);
}

// Held-back passages with everything that does not depend on the configuration scored:
// producer states of each first half, and the oracle's next-token log-probabilities on the
// second half.
class HeldOutSet {
 public:
  static absl::StatusOr<HeldOutSet> Build(Backend& producer, Backend& consumer,
                                          const std::vector<std::vector<int32_t>>& passages) {
    HeldOutSet h;
    PrefillOptions all_hooks;
    all_hooks.layer_states = all_hooks.surprisal = all_hooks.residual = true;
    for (const auto& tokens : passages) {
      const int t = static_cast<int>(tokens.size());
      if (t < 4) continue;
      Item item;
      item.split = t / 2;
      item.tokens = tokens;
      SCD_ASSIGN_OR_RETURN(auto pseq, producer.NewSequence(item.split));
      SCD_RETURN_IF_ERROR(producer.Prefill(*pseq, absl::MakeConstSpan(tokens).first(item.split),
                                           all_hooks, &item.producer_states));
      SCD_ASSIGN_OR_RETURN(auto cseq, consumer.NewSequence(t));
      PrefillResult oracle;
      PrefillOptions logits;
      logits.all_logits = true;
      SCD_RETURN_IF_ERROR(consumer.Prefill(*cseq, tokens, logits, &oracle));
      const int vocab = consumer.model().config.vocab_size;
      item.oracle_logits.assign(oracle.logits.begin() + static_cast<long>(item.split) * vocab,
                                oracle.logits.end());
      h.items_.push_back(std::move(item));
    }
    if (h.items_.empty()) return absl::InvalidArgumentError("no held-back passage of >= 4 tokens");
    return h;
  }

  absl::StatusOr<SelectionScore> Score(Backend& producer, Backend& consumer,
                                       std::shared_ptr<const ScdArtifact> artifact, CodecMode mode,
                                       const CodecOptions& options) const {
    SCD_ASSIGN_OR_RETURN(auto enc,
                         ProducerCodec::Create(Unowned(producer.model()), consumer.model().digest(),
                                               artifact, options));
    SCD_ASSIGN_OR_RETURN(auto dec,
                         ConsumerCodec::Create(Unowned(consumer.model()), producer.model().digest(),
                                               artifact, options));
    const int vocab = consumer.model().config.vocab_size;
    double kl = 0, nll = 0, top1 = 0, bytes = 0;
    long positions = 0, scored = 0, context_tokens = 0;
    for (const Item& item : items_) {
      const int t = static_cast<int>(item.tokens.size());
      SCD_ASSIGN_OR_RETURN(Payload payload,
                           enc->Encode(mode, absl::MakeConstSpan(item.tokens).first(item.split),
                                       item.producer_states));
      // Through the wire, as in serving.
      const std::vector<uint8_t> wire = SerializePayload(payload);
      bytes += static_cast<double>(wire.size());
      context_tokens += item.split;
      SCD_ASSIGN_OR_RETURN(Payload parsed, ParsePayload(wire));
      SCD_ASSIGN_OR_RETURN(auto seq, consumer.NewSequence(t));
      SCD_RETURN_IF_ERROR(dec->Rebuild(parsed, consumer, *seq));
      PrefillOptions logits_opt;
      logits_opt.all_logits = true;
      PrefillResult rest;
      SCD_RETURN_IF_ERROR(consumer.Prefill(
          *seq, absl::MakeConstSpan(item.tokens).subspan(item.split), logits_opt, &rest));
      for (int i = 0; i < t - item.split; ++i) {
        const float* p = item.oracle_logits.data() + static_cast<long>(i) * vocab;
        const float* q = rest.logits.data() + static_cast<long>(i) * vocab;
        double pm = p[0], qm = q[0];
        int pa = 0, qa = 0;
        for (int j = 1; j < vocab; ++j) {
          if (p[j] > pm) pm = p[j], pa = j;
          if (q[j] > qm) qm = q[j], qa = j;
        }
        double pz = 0, qz = 0;
        for (int j = 0; j < vocab; ++j) {
          pz += std::exp(p[j] - pm);
          qz += std::exp(q[j] - qm);
        }
        const double plz = std::log(pz) + pm, qlz = std::log(qz) + qm;
        double d = 0;
        for (int j = 0; j < vocab; ++j) {
          const double lp = p[j] - plz, lq = q[j] - qlz;
          d += std::exp(lp) * (lp - lq);
        }
        kl += d;
        top1 += pa == qa;
        ++positions;
        const int target = item.split + i + 1;
        if (target < t) {
          nll += qlz - q[item.tokens[target]];
          ++scored;
        }
      }
    }
    SelectionScore s;
    s.kl = kl / std::max(positions, 1L);
    s.top1 = top1 / std::max(positions, 1L);
    s.nll = nll / std::max(scored, 1L);
    s.bytes_per_token = bytes / static_cast<double>(std::max(context_tokens, 1L));
    return s;
  }

 private:
  struct Item {
    std::vector<int32_t> tokens;
    int split = 0;
    PrefillResult producer_states;
    std::vector<float> oracle_logits;  // [t - split, vocab]
  };
  std::vector<Item> items_;
};

nlohmann::json ScoreJson(const SelectionScore& s) {
  return {{"kl", s.kl}, {"nll", s.nll}, {"top1", s.top1}, {"bytes_per_token", s.bytes_per_token}};
}

// Scores every baseline mode and every rung of the artifact's rate ladder on the held-back
// set into a.quality (rate_ladder.h).
absl::Status RecordQuality(Backend& producer, Backend& consumer, ScdArtifact& a,
                           const HeldOutSet& set, const ProgressFn& progress) {
  std::shared_ptr<const ScdArtifact> view(std::shared_ptr<const ScdArtifact>(), &a);
  std::vector<QualityRecord> records;
  auto record = [&](CodecMode mode, int rung, const std::string& label) -> absl::Status {
    CodecOptions co;
    co.rung = rung;
    SCD_ASSIGN_OR_RETURN(SelectionScore s, set.Score(producer, consumer, view, mode, co));
    records.push_back({std::string(CodecModeName(mode)), rung, s.kl, s.top1, s.bytes_per_token});
    Say(progress, absl::StrFormat("[3/3] quality of %s: KL %.4f, top-1 %.3f, %.1f B/token", label,
                                  s.kl, s.top1, s.bytes_per_token));
    return absl::OkStatus();
  };
  for (CodecMode m : {CodecMode::kOracle, CodecMode::kRaw, CodecMode::kQuant8, CodecMode::kQuant4,
                      CodecMode::kRecompute}) {
    SCD_RETURN_IF_ERROR(record(m, 0, std::string(CodecModeName(m))));
  }
  const std::vector<Rung> ladder = RateLadder(a);
  for (size_t i = 0; i < ladder.size(); ++i) {
    SCD_RETURN_IF_ERROR(record(CodecMode::kScd, static_cast<int>(i),
                               absl::StrCat("scd rung ", i, " (", RungName(ladder[i]), ")")));
  }
  a.quality = std::move(records);
  return absl::OkStatus();
}

}  // namespace

namespace {

// Mean next-token NLL of `b` over `passage` (its prefill's surprisal past the first token).
absl::StatusOr<double> MeanNll(Backend& b, const std::vector<int32_t>& passage) {
  SCD_ASSIGN_OR_RETURN(auto seq, b.NewSequence(static_cast<int>(passage.size())));
  PrefillOptions options;
  options.surprisal = true;
  PrefillResult r;
  SCD_RETURN_IF_ERROR(b.Prefill(*seq, passage, options, &r));
  double sum = 0;
  for (size_t i = 1; i < r.surprisal.size(); ++i) sum += r.surprisal[i];
  return sum / static_cast<double>(std::max<size_t>(r.surprisal.size() - 1, 1));
}

}  // namespace

absl::StatusOr<std::vector<int>> ConsumerDomainSources(
    Backend& producer, Backend& consumer, const std::vector<std::vector<int32_t>>& passages,
    const std::vector<int>& sources, int num_files, int per_file, double margin,
    std::vector<double>* gaps) {
  if (sources.size() != passages.size()) {
    return absl::InvalidArgumentError("one source per passage is needed");
  }
  std::vector<double> gap(std::max(num_files, 0), 0.0);
  std::vector<int> seen(gap.size(), 0);
  for (size_t i = 0; i < passages.size(); ++i) {
    const int f = sources[i];
    if (f < 0 || f >= num_files || seen[f] >= per_file || passages[i].size() < 2) continue;
    SCD_ASSIGN_OR_RETURN(double p, MeanNll(producer, passages[i]));
    SCD_ASSIGN_OR_RETURN(double c, MeanNll(consumer, passages[i]));
    gap[f] += p - c;
    ++seen[f];
  }
  std::vector<int> domain;
  for (int f = 0; f < num_files; ++f) {
    if (seen[f] > 0) gap[f] /= seen[f];
    if (seen[f] > 0 && gap[f] > margin) domain.push_back(f);
  }
  if (gaps != nullptr) *gaps = gap;
  return domain;
}

absl::Status RecordArtifactQuality(Backend& producer, Backend& consumer, ScdArtifact& a,
                                   const std::vector<std::vector<int32_t>>& held,
                                   const ProgressFn& progress) {
  SCD_RETURN_IF_ERROR(a.CheckPair(&producer.model(), &consumer.model()));
  SCD_ASSIGN_OR_RETURN(HeldOutSet set, HeldOutSet::Build(producer, consumer, held));
  return RecordQuality(producer, consumer, a, set, progress);
}

absl::StatusOr<SelectionScore> ScoreCodec(Backend& producer, Backend& consumer,
                                          std::shared_ptr<const ScdArtifact> artifact,
                                          CodecMode mode, const CodecOptions& codec_options,
                                          const std::vector<std::vector<int32_t>>& passages) {
  SCD_ASSIGN_OR_RETURN(HeldOutSet set, HeldOutSet::Build(producer, consumer, passages));
  return set.Score(producer, consumer, std::move(artifact), mode, codec_options);
}

namespace {

absl::Status CheckCompatible(const ModelConfig& pc, const ModelConfig& cc,
                             const CalibrationOptions& o) {
  if (pc.num_layers != cc.num_layers || pc.hidden_size != cc.hidden_size ||
      pc.kv_dim() != cc.kv_dim() || pc.vocab_size != cc.vocab_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "producer '", pc.name, "' and consumer '", cc.name,
        "' do not share an architecture (layers, width, KV width and vocabulary must match)"));
  }
  const int kvd = pc.kv_dim();
  if (o.rank_k < 1 || o.rank_k > kvd || o.rank_v < 1 || o.rank_v > kvd) {
    return absl::InvalidArgumentError(absl::StrCat("rank-k and rank-v must be in [1, ", kvd, "]"));
  }
  if (o.rank_h < 1 || o.rank_h > pc.hidden_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank-h must be in [1, ", pc.hidden_size, "]"));
  }
  if (o.patch_budget < 0 || o.patch_budget > pc.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("patch-layers must be in [0, ", pc.num_layers, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CalibrationData> CollectCalibrationData(
    Backend& producer, Backend& consumer, const std::vector<std::vector<int32_t>>& train,
    const CalibrationOptions& o, const ProgressFn& progress) {
  const ModelConfig& pc = producer.model().config;
  SCD_RETURN_IF_ERROR(CheckCompatible(pc, consumer.model().config, o));
  const int layers = pc.num_layers, d = pc.hidden_size, kvd = pc.kv_dim();
  CalibrationData data;
  data.key.assign(layers, CrossMoments(kvd, kvd));
  data.value.assign(layers, CrossMoments(kvd, kvd));
  data.h_in.assign(layers, CrossMoments(d, d));
  data.h_producer.resize(layers);
  data.h_consumer.resize(layers);
  std::mt19937_64 rng(o.seed);
  PrefillOptions hooks;
  hooks.layer_states = true;
  for (size_t i = 0; i < train.size(); ++i) {
    const auto& tokens = train[i];
    const int t = static_cast<int>(tokens.size());
    PrefillResult ps, cs;
    SCD_ASSIGN_OR_RETURN(auto pseq, producer.NewSequence(t));
    SCD_ASSIGN_OR_RETURN(auto cseq, consumer.NewSequence(t));
    SCD_RETURN_IF_ERROR(producer.Prefill(*pseq, tokens, hooks, &ps));
    SCD_RETURN_IF_ERROR(consumer.Prefill(*cseq, tokens, hooks, &cs));
    for (int l = 0; l < layers; ++l) {
      data.key[l].Add(ps.layers[l].k_pre_rope.data(), cs.layers[l].k_pre_rope.data(), t);
      data.value[l].Add(ps.layers[l].v.data(), cs.layers[l].v.data(), t);
      data.h_in[l].Add(ps.layers[l].h_in.data(), cs.layers[l].h_in.data(), t);
    }
    // Reservoir sampling of rows (the same rows for every layer).
    for (int r = 0; r < t; ++r, ++data.tokens) {
      long slot = data.tokens;
      if (data.tokens >= o.max_aligner_rows) {
        slot = std::uniform_int_distribution<long>(0, data.tokens)(rng);
        if (slot >= o.max_aligner_rows) continue;
      }
      for (int l = 0; l < layers; ++l) {
        const float* src_p = ps.layers[l].h_in.data() + static_cast<size_t>(r) * d;
        const float* src_c = cs.layers[l].h_in.data() + static_cast<size_t>(r) * d;
        if (slot == static_cast<long>(data.h_producer[l].size() / d)) {
          data.h_producer[l].insert(data.h_producer[l].end(), src_p, src_p + d);
          data.h_consumer[l].insert(data.h_consumer[l].end(), src_c, src_c + d);
        } else {
          std::copy(src_p, src_p + d, data.h_producer[l].begin() + slot * d);
          std::copy(src_c, src_c + d, data.h_consumer[l].begin() + slot * d);
        }
      }
    }
    ++data.passages;
    if ((i + 1) % 50 == 0 || i + 1 == train.size()) {
      Say(progress, absl::StrFormat("[1/3] collected %zu/%zu passages (%ld tokens)", i + 1,
                                    train.size(), data.tokens));
    }
  }
  return data;
}

namespace {

// The code of one state: the pair's own reduced-rank fit, or the decoder on a shared basis.
absl::StatusOr<LinearCode> FitCode(const CrossMoments& m, int rank, double ridge,
                                   const LinearCode* basis, FitReport* report) {
  if (basis == nullptr) return m.Fit(rank, ridge, report);
  if (basis->rank != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("the shared basis has rank ", basis->rank, " where the options ask ", rank));
  }
  return FitDecoderOnBasis(m, *basis, report);
}

absl::Status CheckBasis(const SharedBasis& b, const Model& producer, int layers) {
  if (b.producer_digest != producer.digest()) {
    return absl::FailedPreconditionError("the shared basis was fitted for another producer");
  }
  if (static_cast<int>(b.key.size()) != layers || static_cast<int>(b.value.size()) != layers ||
      static_cast<int>(b.h_in.size()) != layers) {
    return absl::InvalidArgumentError("the shared basis has another number of layers");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ScdArtifact> FitArtifact(const CalibrationData& data, const Model& pm,
                                        const Model& cm, const CalibrationOptions& o,
                                        bool fit_patches, const ProgressFn& progress,
                                        const SharedBasis* basis) {
  const ModelConfig& pc = pm.config;
  SCD_RETURN_IF_ERROR(CheckCompatible(pc, cm.config, o));
  const int layers = pc.num_layers, d = pc.hidden_size, kvd = pc.kv_dim();
  if (static_cast<int>(data.key.size()) != layers) {
    return absl::InvalidArgumentError("calibration data was collected for another model shape");
  }
  if (basis != nullptr) SCD_RETURN_IF_ERROR(CheckBasis(*basis, pm, layers));
  ScdArtifact a;
  a.producer_digest = pm.digest();
  a.consumer_digest = cm.digest();
  a.producer_name = pc.name;
  a.consumer_name = cm.config.name;
  a.num_layers = layers;
  a.hidden_size = d;
  a.kv_dim = kvd;
  a.rank_k = o.rank_k;
  a.rank_v = o.rank_v;
  a.rank_h = o.rank_h;
  a.code_encoding = o.code_encoding;
  a.reuse.resize(layers);
  nlohmann::json fits = nlohmann::json::array();
  for (int l = 0; l < layers; ++l) {
    FitReport kr, vr, hr;
    SCD_ASSIGN_OR_RETURN(a.reuse[l].key, FitCode(data.key[l], o.rank_k, o.ridge,
                                                 basis ? &basis->key[l] : nullptr, &kr));
    SCD_ASSIGN_OR_RETURN(a.reuse[l].value, FitCode(data.value[l], o.rank_v, o.ridge,
                                                   basis ? &basis->value[l] : nullptr, &vr));
    nlohmann::json fit = {{"layer", l},
                          {"key",
                           {{"rel_err", kr.relative_error},
                            {"raw_rel_err", kr.raw_relative_error},
                            {"energy", kr.energy_kept}}},
                          {"value",
                           {{"rel_err", vr.relative_error},
                            {"raw_rel_err", vr.raw_relative_error},
                            {"energy", vr.energy_kept}}}};
    std::string patch_note;
    if (fit_patches) {
      PatchLayer patch;
      SCD_ASSIGN_OR_RETURN(patch.code, FitCode(data.h_in[l], o.rank_h, o.ridge,
                                               basis ? &basis->h_in[l] : nullptr, &hr));
      const int n = static_cast<int>(data.h_producer[l].size() / d);
      std::vector<float> z(static_cast<size_t>(n) * o.rank_h);
      patch.code.Encode(data.h_producer[l].data(), n, z.data());
      // G = [W_K; W_V] of the consumer's layer: the metric the aligner is trained in.
      const LayerWeights& lw = cm.weights.layers[l];
      std::vector<float> g(lw.wk.begin(), lw.wk.end());
      g.insert(g.end(), lw.wv.begin(), lw.wv.end());
      AlignerReport ar;
      AlignerTrainOptions ao = o.aligner;
      ao.seed = o.seed + l;
      SCD_ASSIGN_OR_RETURN(patch.aligner, TrainPatchAligner(z, data.h_consumer[l], n, patch.code, g,
                                                            2 * kvd, ao, &ar));
      a.patches[l] = std::move(patch);
      const double energy = std::max(ar.target_energy, 1e-30);
      fit["h_in"] = {{"rel_err", hr.relative_error}, {"raw_rel_err", hr.raw_relative_error}};
      fit["aligner_kv_rel_err"] = {{"linear", ar.linear_loss / energy},
                                   {"trained", ar.trained_loss / energy}};
      patch_note = absl::StrFormat(", patch K/V rel.err linear %.4f -> aligner %.4f",
                                   ar.linear_loss / energy, ar.trained_loss / energy);
    }
    fits.push_back(fit);
    Say(progress, absl::StrFormat("[2/3] layer %d/%d: key rel.err %.4f (raw %.4f), value %.4f "
                                  "(raw %.4f)%s",
                                  l + 1, layers, kr.relative_error, kr.raw_relative_error,
                                  vr.relative_error, vr.raw_relative_error, patch_note));
  }
  if (basis != nullptr) {
    a.basis_id = basis->id;
    a.basis_kind = SharedBasisKindName(basis->kind);
  }
  a.report = {{"train_passages", data.passages},
              {"train_tokens", data.tokens},
              {"aligner_rows", static_cast<long>(data.h_producer[0].size() / d)},
              {"fits", fits}};
  return a;
}

absl::Status SelectLayers(Backend& producer, Backend& consumer, ScdArtifact& a,
                          const std::vector<std::vector<int32_t>>& held,
                          const CalibrationOptions& o, const ProgressFn& progress) {
  const int layers = a.num_layers;
  // Scoring reads the artifact through a non-owning pointer while we edit it between scores.
  std::shared_ptr<const ScdArtifact> view(std::shared_ptr<const ScdArtifact>(), &a);
  SCD_ASSIGN_OR_RETURN(HeldOutSet set, HeldOutSet::Build(producer, consumer, held));
  nlohmann::json baselines = nlohmann::json::object();
  for (CodecMode m : {CodecMode::kRaw, CodecMode::kScdReuse}) {
    SCD_ASSIGN_OR_RETURN(SelectionScore s, set.Score(producer, consumer, view, m, {}));
    baselines[std::string(CodecModeName(m))] = ScoreJson(s);
    Say(progress, absl::StrFormat("[3/3] %s: KL %.4f, top-1 %.3f", std::string(CodecModeName(m)),
                                  s.kl, s.top1));
  }
  const int depth = std::min(
      layers, o.selection_depth < 0 ? layers : std::max(o.selection_depth, o.patch_budget));
  nlohmann::json trace = nlohmann::json::array();
  std::vector<int> chosen;
  for (int step = 0; step < depth; ++step) {
    int best_layer = -1;
    SelectionScore best;
    nlohmann::json candidates = nlohmann::json::object();
    for (int l = 0; l < layers; ++l) {
      if (std::find(chosen.begin(), chosen.end(), l) != chosen.end() || !a.patches.count(l))
        continue;
      CodecOptions co;
      co.patch_layers = chosen;
      co.patch_layers->push_back(l);
      SCD_ASSIGN_OR_RETURN(SelectionScore s,
                           set.Score(producer, consumer, view, CodecMode::kScd, co));
      candidates[std::to_string(l)] = ScoreJson(s);
      if (best_layer < 0 || s.kl < best.kl) best_layer = l, best = s;
    }
    if (best_layer < 0) break;
    chosen.push_back(best_layer);
    trace.push_back({{"step", step + 1},
                     {"chosen", best_layer},
                     {"score", ScoreJson(best)},
                     {"candidates", candidates}});
    Say(progress, absl::StrFormat("[3/3] greedy step %d: patch layer %d -> KL %.4f, top-1 %.3f",
                                  step + 1, best_layer, best.kl, best.top1));
  }
  a.patch_order = chosen;
  a.patch_budget = std::min<int>(o.patch_budget, static_cast<int>(chosen.size()));

  const int block = std::clamp(
      o.recompute_block < 0 ? std::max(o.patch_budget, 1) : o.recompute_block, 1, layers);
  nlohmann::json recompute = nlohmann::json::array();
  int best_first = 0;
  double best_kl = 0;
  for (int first = 0; first + block <= layers; ++first) {
    a.recompute_first = first;
    a.recompute_end = first + block;
    SCD_ASSIGN_OR_RETURN(SelectionScore s,
                         set.Score(producer, consumer, view, CodecMode::kRecompute, {}));
    recompute.push_back({{"block", {first, first + block}}, {"score", ScoreJson(s)}});
    if (first == 0 || s.kl < best_kl) best_kl = s.kl, best_first = first;
  }
  a.recompute_first = best_first;
  a.recompute_end = best_first + block;
  Say(progress, absl::StrFormat("[3/3] recompute block [%d, %d): KL %.4f", a.recompute_first,
                                a.recompute_end, best_kl));
  SCD_RETURN_IF_ERROR(RecordQuality(producer, consumer, a, set, progress));
  a.report["heldout_passages"] = held.size();
  a.report["baselines"] = baselines;
  a.report["selection"] = trace;
  a.report["recompute"] = recompute;
  return absl::OkStatus();
}

absl::StatusOr<ScdArtifact> Calibrate(Backend& producer, Backend& consumer,
                                      const std::vector<std::vector<int32_t>>& passages,
                                      const CalibrationOptions& o, const ProgressFn& progress) {
  const int holdout = std::min<int>(o.holdout_passages, static_cast<int>(passages.size()) / 4);
  if (passages.size() < 8 || holdout < 2) {
    return absl::InvalidArgumentError("calibration needs at least 8 passages");
  }
  const std::vector<std::vector<int32_t>> train(passages.begin(), passages.end() - holdout);
  const std::vector<std::vector<int32_t>> held(passages.end() - holdout, passages.end());
  return Calibrate(producer, consumer, train, held, o, progress);
}

absl::StatusOr<ScdArtifact> Calibrate(Backend& producer, Backend& consumer,
                                      const std::vector<std::vector<int32_t>>& train,
                                      const std::vector<std::vector<int32_t>>& held,
                                      const CalibrationOptions& o, const ProgressFn& progress) {
  if (train.size() < 4 || held.size() < 2) {
    return absl::InvalidArgumentError(
        "calibration needs at least 4 training and 2 held-back passages");
  }
  SCD_ASSIGN_OR_RETURN(CalibrationData data,
                       CollectCalibrationData(producer, consumer, train, o, progress));
  SCD_ASSIGN_OR_RETURN(ScdArtifact a, FitArtifact(data, producer.model(), consumer.model(), o,
                                                  /*fit_patches=*/true, progress));
  SCD_RETURN_IF_ERROR(SelectLayers(producer, consumer, a, held, o, progress));
  return a;
}

}  // namespace scd
