// See specialist.h.
#include "prefill_server/specialist.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/scd/shared_artifact.h"

namespace scd {
namespace {

absl::Status Annotate(const std::string& name, const absl::Status& st) {
  return absl::Status(st.code(),
                      absl::StrCat("specialist '", name, "': ", std::string(st.message())));
}

// The specialist's artifact: a pair's own file, or its consumer's section of a shared one
// (the section of consumer_path's model when given, else the one of the specialist's name).
absl::StatusOr<ScdArtifact> LoadSection(const SpecialistConfig& config) {
  const std::string& path = config.artifact_path;
  if (!SharedArtifact::IsSharedFile(path)) return ScdArtifact::Load(path);
  if (!config.consumer_path.empty()) {
    SCD_ASSIGN_OR_RETURN(std::shared_ptr<const Model> consumer, LoadModel(config.consumer_path));
    return LoadArtifactFor(path, consumer->digest());
  }
  SCD_ASSIGN_OR_RETURN(SharedArtifact shared, SharedArtifact::Load(path));
  std::string names;
  for (const ScdArtifact& a : shared.consumers()) {
    if (a.consumer_name == config.name) return a;
    absl::StrAppend(&names, names.empty() ? "" : ", ", a.consumer_name);
  }
  return absl::NotFoundError(
      absl::StrCat("shared artifact ", path, " has no section named '", config.name, "' (it holds ",
                   names, "); name the consumer's checkpoint with config key 'consumer_path'"));
}

}  // namespace

absl::Status ShareBases(const std::vector<Specialist*>& specialists) {
  std::map<std::string, std::vector<Specialist*>> by_basis;
  for (Specialist* s : specialists) {
    if (s->artifact != nullptr && !s->artifact->basis_id.empty()) {
      by_basis[s->artifact->basis_id].push_back(s);
    }
  }
  for (auto& [basis, group] : by_basis) {
    std::vector<const ScdArtifact*> sections;
    for (Specialist* s : group) sections.push_back(s->artifact.get());
    for (Specialist* s : group) {
      if (absl::Status st = s->codec->ServeSections(sections); !st.ok()) {
        return Annotate(s->config.name, st);
      }
      // auto weighs the bytes the shared payload carries, not the calibration's own layout's.
      for (ModeCandidate& c : s->candidates) {
        c.bytes_per_token += s->codec->SharedExtraBytesPerToken(c.mode, c.rung);
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Specialist>> LoadSpecialist(const SpecialistConfig& config,
                                                           std::shared_ptr<const Model> producer,
                                                           const Tokenizer& tokenizer) {
  auto s = std::make_unique<Specialist>();
  s->config = config;
  const std::string& name = config.name;
  if (name.empty())
    return absl::InvalidArgumentError("config key 'specialists[].name' is required");
  s->auto_mode = config.mode == "auto";
  absl::StatusOr<CodecMode> mode = ParseCodecMode(s->auto_mode ? "scd" : config.mode);
  if (!mode.ok()) {
    return Annotate(name, absl::InvalidArgumentError(absl::StrCat(
                              "config key 'mode': ", std::string(mode.status().message()))));
  }
  s->mode = *mode;
  absl::StatusOr<chat::ChatTemplate> tmpl = chat::ChatTemplate::ByName(config.chat_template);
  if (!tmpl.ok()) {
    return Annotate(name,
                    absl::InvalidArgumentError(absl::StrCat("config key 'chat_template': ",
                                                            std::string(tmpl.status().message()))));
  }
  if (absl::Status st = chat::CheckTemplateTokens(*tmpl, tokenizer); !st.ok()) {
    return Annotate(name, st);
  }
  s->chat_template = *tmpl;

  std::string consumer_digest;
  if (!config.artifact_path.empty()) {
    absl::StatusOr<ScdArtifact> a = LoadSection(config);
    if (!a.ok()) return Annotate(name, a.status());
    if (absl::Status st = a->CheckPair(producer.get(), nullptr); !st.ok()) {
      return Annotate(name,
                      absl::FailedPreconditionError(absl::StrCat(
                          "artifact ", config.artifact_path,
                          " was not calibrated for this base model: ", std::string(st.message()))));
    }
    consumer_digest = a->consumer_digest;
    s->artifact = std::make_shared<const ScdArtifact>(std::move(*a));
    s->ladder = RateLadder(*s->artifact);
    if (s->mode == CodecMode::kScd) s->patch_layers = s->artifact->PatchLayers();
  } else if (CodecModeNeedsArtifact(s->mode)) {
    return Annotate(name, absl::InvalidArgumentError(
                              absl::StrCat("mode ", config.mode, " needs config key 'artifact'")));
  } else if (!config.consumer_path.empty()) {
    absl::StatusOr<std::shared_ptr<const Model>> consumer = LoadModel(config.consumer_path);
    if (!consumer.ok()) return Annotate(name, consumer.status());
    consumer_digest = (*consumer)->digest();
  } else {
    return Annotate(name,
                    absl::InvalidArgumentError(
                        "needs config key 'artifact' or 'consumer_path' (for the pair digest)"));
  }
  absl::StatusOr<std::unique_ptr<ProducerCodec>> codec =
      ProducerCodec::Create(producer, consumer_digest, s->artifact);
  if (!codec.ok()) return Annotate(name, codec.status());
  s->codec = std::move(*codec);
  s->pair_digest_hex = PairDigestHex(MakePairDigest(producer->digest(), consumer_digest,
                                                    s->artifact != nullptr ? s->artifact->id : ""));
  s->pair_tag = PairDigestHex(s->codec->pair_digest(s->mode));
  if (s->auto_mode) {
    if (s->artifact == nullptr || s->artifact->quality.empty()) {
      return Annotate(name, absl::FailedPreconditionError(absl::StrCat(
                                "mode auto chooses from the artifact's quality record, which ",
                                config.artifact_path.empty() ? "is missing (config key 'artifact')"
                                                             : config.artifact_path + " lacks",
                                "; record it with scd-calibrate (--rescore for an existing "
                                "artifact)")));
    }
    s->candidates = CandidatesFromQuality(s->artifact->quality);
    s->costs = std::make_unique<ModeCostModel>();
    for (const ModeCandidate& c : s->candidates) {
      s->pair_tags[c.mode] = PairDigestHex(s->codec->pair_digest(c.mode));
    }
  }
  return s;
}

}  // namespace scd
