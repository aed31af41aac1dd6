// See model_pair.h.
#include "common/scd/model_pair.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace scd {

absl::Status CheckSameVocabulary(const Model& producer, const std::string& producer_dir,
                                 const Model& consumer, const std::string& consumer_dir) {
  if (producer.config.vocab_size == consumer.config.vocab_size) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "producer ", producer_dir, " and consumer ", consumer_dir, " have different vocabularies (",
      producer.config.vocab_size, " and ", consumer.config.vocab_size, " tokens)"));
}

absl::StatusOr<ModelPair> LoadModelPair(const std::string& producer_dir,
                                        const std::string& consumer_dir) {
  ModelPair pair;
  SCD_ASSIGN_OR_RETURN(pair.producer_model, LoadModel(producer_dir));
  SCD_ASSIGN_OR_RETURN(pair.consumer_model, LoadModel(consumer_dir));
  SCD_RETURN_IF_ERROR(
      CheckSameVocabulary(*pair.producer_model, producer_dir, *pair.consumer_model, consumer_dir));
  SCD_ASSIGN_OR_RETURN(pair.tokenizer, Tokenizer::FromFile(consumer_dir + "/tokenizer.json"));
  SCD_ASSIGN_OR_RETURN(pair.producer, CreateBackend(BackendKind::kCpu, pair.producer_model));
  SCD_ASSIGN_OR_RETURN(pair.consumer, CreateBackend(BackendKind::kCpu, pair.consumer_model));
  return pair;
}

}  // namespace scd
