// See model_pair.h.
#include "common/scd/model_pair.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace scd {

absl::StatusOr<ModelPair> LoadModelPair(const std::string& producer_dir,
                                        const std::string& consumer_dir) {
  ModelPair pair;
  SCD_ASSIGN_OR_RETURN(pair.producer_model, LoadModel(producer_dir));
  SCD_ASSIGN_OR_RETURN(pair.consumer_model, LoadModel(consumer_dir));
  if (pair.producer_model->config.vocab_size != pair.consumer_model->config.vocab_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "producer ", producer_dir, " and consumer ", consumer_dir,
        " have different vocabularies (", pair.producer_model->config.vocab_size, " and ",
        pair.consumer_model->config.vocab_size, " tokens)"));
  }
  SCD_ASSIGN_OR_RETURN(pair.tokenizer, Tokenizer::FromFile(consumer_dir + "/tokenizer.json"));
  SCD_ASSIGN_OR_RETURN(pair.producer, CreateBackend(BackendKind::kCpu, pair.producer_model));
  SCD_ASSIGN_OR_RETURN(pair.consumer, CreateBackend(BackendKind::kCpu, pair.consumer_model));
  return pair;
}

}  // namespace scd
