// ModelPair: the producer and consumer checkpoints of one SCD pair, loaded once for the
// offline tools (calibrate, eval, ablate): both models, their CPU backends, and the
// consumer's tokenizer. The two must share a vocabulary, since they read the same token ids.
#ifndef SCD_COMMON_SCD_MODEL_PAIR_H_
#define SCD_COMMON_SCD_MODEL_PAIR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/runtime/backend.h"
#include "common/tokenizer/tokenizer.h"

namespace scd {

struct ModelPair {
  std::shared_ptr<const Model> producer_model, consumer_model;
  std::unique_ptr<Tokenizer> tokenizer;  // `<consumer_dir>/tokenizer.json`
  std::unique_ptr<Backend> producer, consumer;
};

// FAILED_PRECONDITION naming both directories unless the two models read the same token ids.
absl::Status CheckSameVocabulary(const Model& producer, const std::string& producer_dir,
                                 const Model& consumer, const std::string& consumer_dir);

absl::StatusOr<ModelPair> LoadModelPair(const std::string& producer_dir,
                                        const std::string& consumer_dir);

}  // namespace scd

#endif  // SCD_COMMON_SCD_MODEL_PAIR_H_
