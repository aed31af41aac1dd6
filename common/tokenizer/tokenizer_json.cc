// Tokenizer::FromJson / FromFile: parse tokenizer.json (HF's serialization of TokenizerImpl)
// into the pipeline parts and hand them to HfTokenizer. Every failure is an
// InvalidArgumentError naming the field: invalid JSON (with nlohmann's byte position), a
// wrong type, or a component type / regex we do not implement. "truncation" and "padding"
// are ignored: the serving layer decides lengths itself.
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/tokenizer/hf_tokenizer.h"
#include "common/tokenizer/json_fields.h"
#include "common/tokenizer/tokenizer.h"

namespace scd {
namespace {

using tokenizer_internal::AddedToken;
using tokenizer_internal::BpeModel;
using tokenizer_internal::DecoderPipeline;
using tokenizer_internal::FindField;
using tokenizer_internal::HfTokenizer;
using tokenizer_internal::Json;
using tokenizer_internal::JsonError;
using tokenizer_internal::Normalizer;
using tokenizer_internal::PostProcessor;
using tokenizer_internal::PreTokenizer;

absl::StatusOr<std::unique_ptr<Tokenizer>> Build(const Json& root) {
  if (!root.is_object()) return JsonError("(root)", "expected an object");
  HfTokenizer::Parts parts;
  const Json* model = FindField(root, "model");
  if (model == nullptr) return JsonError("model", "missing");
  SCD_ASSIGN_OR_RETURN(parts.model, BpeModel::FromJson(*model, "model"));
  if (const Json* normalizer = FindField(root, "normalizer")) {
    SCD_ASSIGN_OR_RETURN(parts.normalizer, Normalizer::FromJson(*normalizer, "normalizer"));
  }
  if (const Json* pre = FindField(root, "pre_tokenizer")) {
    SCD_ASSIGN_OR_RETURN(parts.pre_tokenizer, PreTokenizer::FromJson(*pre, "pre_tokenizer"));
  }
  SCD_ASSIGN_OR_RETURN(
      parts.post_processor,
      PostProcessor::FromJson(FindField(root, "post_processor"), "post_processor"));
  SCD_ASSIGN_OR_RETURN(parts.decoder,
                       DecoderPipeline::FromJson(FindField(root, "decoder"), "decoder"));
  SCD_ASSIGN_OR_RETURN(parts.added_tokens, tokenizer_internal::ParseAddedTokens(
                                               FindField(root, "added_tokens"), "added_tokens"));
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<HfTokenizer> tokenizer,
                       HfTokenizer::Create(std::move(parts)));
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json_text) {
  Json root;
  try {
    root = Json::parse(json_text.begin(), json_text.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: invalid JSON: ", e.what()));
  }
  try {
    return Build(root);
  } catch (const Json::exception& e) {
    // The accessors check types first; this is a backstop so a malformed file never aborts.
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open tokenizer file: ", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read tokenizer file: ", path));
  auto tokenizer = FromJson(buffer.str());
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(path, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

}  // namespace scd
