// See shared_calibration.h.
#include "common/scd/shared_calibration.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"

namespace scd {
namespace {

// The encoders of one state (K, V or H_in) of layer l over every consumer's statistics.
absl::StatusOr<LinearCode> LayerEncoder(const std::vector<const CalibrationData*>& data,
                                        std::vector<CrossMoments> CalibrationData::*state, int l,
                                        int rank, double ridge, SharedBasisKind kind) {
  std::vector<const CrossMoments*> moments;
  for (const CalibrationData* d : data) moments.push_back(&(d->*state)[l]);
  return FitSharedEncoder(moments, rank, ridge, kind);
}

// A consumer's artifact from its statistics on `basis`: decoders, aligners, selection and
// quality record.
absl::StatusOr<ScdArtifact> FinishConsumer(Backend& producer, const SharedConsumer& consumer,
                                           const CalibrationData& data, const CalibrationOptions& o,
                                           const SharedBasis& basis, const ProgressFn& progress) {
  Backend& backend = *consumer.backend;
  SCD_ASSIGN_OR_RETURN(ScdArtifact a, FitArtifact(data, producer.model(), backend.model(), o,
                                                  /*fit_patches=*/true, progress, &basis));
  SCD_RETURN_IF_ERROR(SelectLayers(producer, backend, a, consumer.held, o, progress));
  return a;
}

absl::Status CheckConsumer(const SharedConsumer& c, size_t index) {
  if (c.backend == nullptr || c.held.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("consumer ", index, " needs a backend and at least 2 held-back passages"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SharedBasis> FitSharedBasis(const std::vector<const CalibrationData*>& data,
                                           const Model& producer, const CalibrationOptions& o,
                                           SharedBasisKind kind) {
  if (data.empty()) return absl::InvalidArgumentError("a shared basis needs a consumer");
  const int layers = producer.config.num_layers;
  for (const CalibrationData* d : data) {
    if (static_cast<int>(d->key.size()) != layers || d->passages != data[0]->passages ||
        d->tokens != data[0]->tokens) {
      return absl::InvalidArgumentError(
          "every consumer's calibration data must come from the same producer and passages");
    }
  }
  SharedBasis b;
  b.kind = kind;
  b.producer_digest = producer.digest();
  for (int l = 0; l < layers; ++l) {
    SCD_ASSIGN_OR_RETURN(LinearCode k,
                         LayerEncoder(data, &CalibrationData::key, l, o.rank_k, o.ridge, kind));
    SCD_ASSIGN_OR_RETURN(LinearCode v,
                         LayerEncoder(data, &CalibrationData::value, l, o.rank_v, o.ridge, kind));
    SCD_ASSIGN_OR_RETURN(LinearCode h,
                         LayerEncoder(data, &CalibrationData::h_in, l, o.rank_h, o.ridge, kind));
    b.key.push_back(std::move(k));
    b.value.push_back(std::move(v));
    b.h_in.push_back(std::move(h));
  }
  b.id = BasisId(b);
  return b;
}

absl::StatusOr<std::vector<ScdArtifact>> CalibrateShared(
    Backend& producer, const std::vector<SharedConsumer>& consumers,
    const std::vector<std::vector<int32_t>>& train, const CalibrationOptions& o,
    SharedBasisKind kind, const ProgressFn& progress) {
  if (consumers.empty()) return absl::InvalidArgumentError("no consumer to calibrate");
  if (train.size() < 4)
    return absl::InvalidArgumentError("calibration needs at least 4 training passages");
  std::vector<CalibrationData> data;
  for (size_t c = 0; c < consumers.size(); ++c) {
    SCD_RETURN_IF_ERROR(CheckConsumer(consumers[c], c));
    if (progress) {
      progress(absl::StrFormat("consumer %d/%d: %s", c + 1, consumers.size(),
                               consumers[c].backend->model().config.name));
    }
    SCD_ASSIGN_OR_RETURN(CalibrationData d, CollectCalibrationData(producer, *consumers[c].backend,
                                                                   train, o, progress));
    data.push_back(std::move(d));
  }
  std::vector<const CalibrationData*> views;
  for (const CalibrationData& d : data) views.push_back(&d);
  SCD_ASSIGN_OR_RETURN(SharedBasis basis, FitSharedBasis(views, producer.model(), o, kind));
  if (progress) {
    progress(absl::StrCat("shared basis ", SharedBasisKindName(kind), " ", basis.id.substr(0, 12)));
  }
  std::vector<ScdArtifact> artifacts;
  for (size_t c = 0; c < consumers.size(); ++c) {
    SCD_ASSIGN_OR_RETURN(ScdArtifact a,
                         FinishConsumer(producer, consumers[c], data[c], o, basis, progress));
    artifacts.push_back(std::move(a));
  }
  return artifacts;
}

absl::StatusOr<SharedBasis> BasisOf(const ScdArtifact& a) {
  if (a.basis_id.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the artifact of consumer '", a.consumer_name,
                     "' is a pair's own code, not on a shared basis"));
  }
  SharedBasis b;
  SCD_ASSIGN_OR_RETURN(b.kind, ParseSharedBasisKind(a.basis_kind));
  b.producer_digest = a.producer_digest;
  auto encoder_only = [](LinearCode c) {
    c.out_dim = 0;
    c.decoder.clear();
    c.mu_out.clear();
    return c;
  };
  for (int l = 0; l < a.num_layers; ++l) {
    auto patch = a.patches.find(l);
    if (patch == a.patches.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the artifact has no PATCH code at layer ", l, ": not a whole basis"));
    }
    b.key.push_back(encoder_only(a.reuse[l].key));
    b.value.push_back(encoder_only(a.reuse[l].value));
    b.h_in.push_back(encoder_only(patch->second.code));
  }
  b.id = BasisId(b);
  if (b.id != a.basis_id) {
    return absl::InvalidArgumentError(
        absl::StrCat("the artifact's encoders are not its basis ", a.basis_id.substr(0, 12), "'s"));
  }
  return b;
}

absl::StatusOr<ScdArtifact> CalibrateOnBasis(Backend& producer, const SharedConsumer& consumer,
                                             const std::vector<std::vector<int32_t>>& train,
                                             const CalibrationOptions& options,
                                             const SharedBasis& basis, const ProgressFn& progress) {
  SCD_RETURN_IF_ERROR(CheckConsumer(consumer, 0));
  if (basis.key.empty()) return absl::InvalidArgumentError("empty basis");
  CalibrationOptions o = options;
  o.rank_k = basis.key[0].rank;
  o.rank_v = basis.value[0].rank;
  o.rank_h = basis.h_in[0].rank;
  SCD_ASSIGN_OR_RETURN(CalibrationData data,
                       CollectCalibrationData(producer, *consumer.backend, train, o, progress));
  return FinishConsumer(producer, consumer, data, o, basis, progress);
}

}  // namespace scd
