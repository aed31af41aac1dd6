// Post-processors as (prefix, suffix) id lists. A Sequence applies its processors in order,
// each wrapping the result of the previous one, so prefixes compose as later + earlier and
// suffixes as earlier + later. Only the "single" template matters: we never encode pairs.
#include "common/tokenizer/post_processor.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace scd::tokenizer_internal {
namespace {

// The id of a ["token", id] pair (RobertaProcessing / BertProcessing "cls" and "sep").
absl::StatusOr<int32_t> PairId(const Json& json, std::string_view key, std::string_view path) {
  const Json* pair = FindField(json, key);
  if (pair == nullptr || !pair->is_array() || pair->size() != 2 ||
      !(*pair)[1].is_number_integer() || (*pair)[1].get<int64_t>() < 0 ||
      (*pair)[1].get<int64_t>() > INT32_MAX) {
    return JsonError(JoinPath(path, key), "expected [token, non-negative id]");
  }
  return (*pair)[1].get<int32_t>();
}

}  // namespace

absl::StatusOr<PostProcessor> PostProcessor::FromJson(const Json* json, std::string_view path) {
  PostProcessor processor;
  if (json != nullptr) SCD_RETURN_IF_ERROR(processor.Add(*json, path));
  return processor;
}

absl::Status PostProcessor::Add(const Json& json, std::string_view path) {
  SCD_ASSIGN_OR_RETURN(const std::string type, GetType(json, path));
  std::vector<int32_t> prefix, suffix;
  if (type == "Sequence") {
    return ForEachInSequence(
        json, "processors", path,
        [this](const Json& item, std::string_view item_path) { return Add(item, item_path); });
  }
  if (type == "ByteLevel") return absl::OkStatus();
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    SCD_ASSIGN_OR_RETURN(const int32_t cls, PairId(json, "cls", path));
    SCD_ASSIGN_OR_RETURN(const int32_t sep, PairId(json, "sep", path));
    prefix = {cls};
    suffix = {sep};
  } else if (type == "TemplateProcessing") {
    const Json* single = FindField(json, "single");
    const std::string single_path = JoinPath(path, "single");
    if (single == nullptr || !single->is_array()) {
      return JsonError(single_path, "expected an array");
    }
    const Json* specials = FindField(json, "special_tokens");
    bool seen_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const Json& piece = (*single)[i];
      const std::string piece_path = absl::StrCat(single_path, "[", i, "]");
      if (const Json* seq = FindField(piece, "Sequence")) {
        SCD_ASSIGN_OR_RETURN(const std::string id, GetString(*seq, "id", piece_path + ".Sequence"));
        if (id != "A" || seen_sequence) {
          return JsonError(piece_path, "the single template must contain sequence A once");
        }
        seen_sequence = true;
      } else if (const Json* special = FindField(piece, "SpecialToken")) {
        SCD_ASSIGN_OR_RETURN(const std::string name,
                             GetString(*special, "id", piece_path + ".SpecialToken"));
        const Json* entry = specials == nullptr ? nullptr : FindField(*specials, name);
        const std::string entry_path = JoinPath(JoinPath(path, "special_tokens"), name);
        if (entry == nullptr) return JsonError(entry_path, "missing special token entry");
        const Json* ids = FindField(*entry, "ids");
        if (ids == nullptr || !ids->is_array()) {
          return JsonError(JoinPath(entry_path, "ids"), "expected an array");
        }
        for (const Json& id : *ids) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
            return JsonError(JoinPath(entry_path, "ids"), "expected non-negative integers");
          }
          (seen_sequence ? suffix : prefix).push_back(id.get<int32_t>());
        }
      } else {
        return JsonError(piece_path, "expected a Sequence or SpecialToken entry");
      }
    }
    if (!seen_sequence) return JsonError(single_path, "the template has no sequence A");
  } else {
    return JsonError(JoinPath(path, "type"),
                     absl::StrCat("unsupported post_processor type: ", type));
  }
  prefix.insert(prefix.end(), prefix_.begin(), prefix_.end());
  prefix_ = std::move(prefix);
  suffix_.insert(suffix_.end(), suffix.begin(), suffix.end());
  return absl::OkStatus();
}

std::vector<int32_t> PostProcessor::Apply(std::vector<int32_t> ids) const {
  if (prefix_.empty() && suffix_.empty()) return ids;
  std::vector<int32_t> out;
  out.reserve(prefix_.size() + ids.size() + suffix_.size());
  out.insert(out.end(), prefix_.begin(), prefix_.end());
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

}  // namespace scd::tokenizer_internal
