// Specialist: what the prefill daemon knows about one consumer model it routes to — its
// name (the `model` of client requests), the codec mode its payloads use, the pair's
// calibration artifact and producer codec, its chat template, and the pair digest that its
// decode daemons must present when they register (common/rpc/decode_registry.h).
//
// The pair digest is MakePairDigest(producer digest, consumer digest, artifact id): the
// consumer digest comes from the artifact (which records both models), or, for a specialist
// served with a baseline mode and no artifact, from the consumer checkpoint itself. The
// payloads of scd and scd-reuse codes on a shared basis carry the basis digest instead, and
// their prefix-cache namespace is that digest: one entry serves every specialist on the basis.
#ifndef SCD_PREFILL_SERVER_SPECIALIST_H_
#define SCD_PREFILL_SERVER_SPECIALIST_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chat/chat_template.h"
#include "common/model/weights.h"
#include "common/scd/artifact.h"
#include "common/scd/codec.h"
#include "common/scd/wire_format.h"
#include "common/serving/mode_chooser.h"
#include "common/serving/mode_cost_model.h"

namespace scd {

// One entry of the prefill daemon's `specialists` config list.
struct SpecialistConfig {
  std::string name;
  std::string artifact_path;  // required for modes scd, scd-reuse and recompute
  // Read for its digest when there is no artifact, or to pick its section of a shared one.
  std::string consumer_path;
  std::string mode = "scd";     // a CodecMode's name, or "auto" (prefill_server/mode_selection.h)
  double quality_floor = 0.95;  // auto: the top-1 agreement with the oracle a mode must keep
  std::string chat_template = "plain";
  int max_retries = 1;  // other replicas tried when a decode daemon fails before any token
  // When the payload path fails (data plane unreachable, DATA_LOSS, a rebuild refused):
  // "oracle" retries once with token ids only on a healthy replica, "fail" ends the request.
  std::string fallback = "oracle";
};

struct Specialist {
  SpecialistConfig config;
  CodecMode mode = CodecMode::kScd;  // with auto: scd, for what names one mode
  bool auto_mode = false;
  // auto: the artifact's quality record as candidates, and the stage costs measured from this
  // specialist's requests.
  std::vector<ModeCandidate> candidates;
  std::unique_ptr<ModeCostModel> costs;
  std::vector<Rung> ladder;  // the artifact's rate ladder (every specialist with an artifact)
  std::shared_ptr<const ScdArtifact> artifact;
  std::unique_ptr<ProducerCodec> codec;
  std::optional<chat::ChatTemplate> chat_template;
  std::string pair_digest_hex;  // expected at registration
  std::string pair_tag;         // prefix-cache namespace (pair digest of the payloads)
  std::map<CodecMode, std::string> pair_tags;  // the same for every mode it may send
  const std::string& PairTag(CodecMode m) const {
    auto it = pair_tags.find(m);
    return it == pair_tags.end() ? pair_tag : it->second;
  }
  std::vector<int> patch_layers;
};

// Loads and checks one specialist against the producer. Errors name the specialist and the
// config key. Its `artifact` may be a shared-basis file (common/scd/shared_artifact.h): the
// section of its `consumer_path` model, or else the one named like the specialist.
absl::StatusOr<std::unique_ptr<Specialist>> LoadSpecialist(const SpecialistConfig& config,
                                                           std::shared_ptr<const Model> producer,
                                                           const Tokenizer& tokenizer);

// Specialists whose artifacts are on one shared basis get one payload of their scd and
// scd-reuse codes, which serves them all (ProducerCodec::ServeSections), and so one prefix
// cache entry: their pair tags of those modes are the basis digest; mode auto weighs that
// payload's bytes. FAILED_PRECONDITION naming a specialist whose section cannot share the
// others' payload.
absl::Status ShareBases(const std::vector<Specialist*>& specialists);

}  // namespace scd

#endif  // SCD_PREFILL_SERVER_SPECIALIST_H_
